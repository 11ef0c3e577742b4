"""Proof that an OPA server runs the bundle its revision names (issue 23, finding 6).

OPA reports the revision label of the `.manifest` it loaded; nothing ties that label to the
content: a bundle whose `data.json` was edited behind an unchanged label was trusted, and
its receipts named the shipped bundle's digest. So the service reads back what OPA actually
serves through its REST API and compares it with the expected bundle:

- the modules: `GET /v1/policies` gives every module's raw source; its id is the bundle's
  location (a path or a bundle name) followed by the bundle path (`engram/...`), and that
  common location is dropped (a module pushed under any other id stays foreign and differs);
- the data: `GET /v1/data/engram/<key>` for every top-level key of the expected bundle's
  data under its root (`config`), base documents only: no rule is evaluated.

Both sides are reduced the same way to a *served digest*: `bundle.content_digest` over the
modules' UTF-8 bytes plus one `data.json` holding the RFC 8785 JSON of the data (OPA
re-serializes data, so the data is compared as JSON, not as the file's bytes). Equal digests
prove the content; the receipts then bind the bundle's content digest, which names exactly
that content. `ServedContentTrust` checks at start-up (a mismatch refuses to start) and again
for a revision whenever its last check is older than `recheck_seconds` (a mismatch makes the
decision `PolicyStale`).

Not compared: data OPA holds outside the expected bundle's data keys (no rule of the verified
modules can read it unless it names such a key, and then the expected bundle has none).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

from engram_memory.contract.canonical import JsonValue, canonical_json
from engram_memory.contract.exceptions import ContentMismatch
from engram_memory.policy.bundle import MANIFEST_FILE, SIGNATURES_FILE, content_digest
from engram_memory.policy.engine import BundleIdentity
from engram_memory.policy.revision_trust import RevisionListener, RevisionTrust

log = logging.getLogger("engram_memory.policy")

ROOT = "engram"
DATA_FILE = "data.json"
RECHECK_SECONDS = 30.0


class ServedContent(Protocol):
    """What an OPA server serves: `{id: raw source}` of its modules, and the base document
    at a data path (None when undefined)."""

    def served_modules(self) -> dict[str, str]: ...

    def served_data(self, path: str) -> object: ...


def _data_tree(files: Mapping[str, bytes]) -> dict[str, Any]:
    """The data of a bundle's `data.json` files, each nested under its directory."""
    tree: dict[str, Any] = {}
    for path in sorted(p for p in files if p == DATA_FILE or p.endswith("/" + DATA_FILE)):
        node = tree
        for part in path.split("/")[:-1]:
            node = node.setdefault(part, {})
        node.update(json.loads(files[path]))
    return tree


def _digest(modules: Mapping[str, bytes], data: object) -> str:
    return content_digest({**modules, DATA_FILE: canonical_json(cast(JsonValue, data))})


def expected_served_digest(files: Mapping[str, bytes]) -> tuple[str, tuple[str, ...]]:
    """(the served digest of a bundle's files, the data keys under its root to read back).

    Raises:
        ValueError: a `data.json` is not JSON.
    """
    modules = {p: b for p, b in files.items() if p.endswith(".rego")}
    data = _data_tree({p: b for p, b in files.items() if p not in (MANIFEST_FILE, SIGNATURES_FILE)})
    root = data.get(ROOT, {})
    keys = tuple(sorted(root)) if isinstance(root, dict) else ()
    return _digest(modules, data), keys


_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)


def _under_root(source: str) -> bool:
    """Whether a module's package lies under the bundle's root (`engram`, `engram.x`)."""
    found = _PACKAGE.search(source)
    package = found.group(1) if found else ""
    return package == ROOT or package.startswith(ROOT + ".")


def _bundle_paths(ids: list[str]) -> dict[str, str]:
    """`{bundle path: id}`: each id without the location all of them share (the longest
    common prefix ending just before `engram/`)."""
    # Character by character on purpose: the location is a path or a bundle name.
    common = os.path.commonprefix(ids) if ids else ""  # noqa: RUF071
    cut = common.rfind("/" + ROOT + "/")
    prefix = common[: cut + 1] if cut >= 0 else ""
    return {i.removeprefix(prefix): i for i in ids}


def served_digest(engine: ServedContent, data_keys: tuple[str, ...]) -> str:
    """The served digest of what `engine` serves now.

    Raises:
        PolicyUnavailable: OPA cannot be read.
    """
    # Only modules that define rules under the bundle's root count: an OPA node may load
    # others beside the bundle (the fleet kit's `system.log` mask), which cannot decide
    # anything under `data.engram`; one that does is compared, wherever it was loaded from.
    raw = {i: text for i, text in engine.served_modules().items() if _under_root(text)}
    modules = {path: raw[i].encode("utf-8") for path, i in _bundle_paths(sorted(raw)).items()}
    root: dict[str, Any] = {}
    for key in data_keys:
        value = engine.served_data(f"{ROOT}/{key}")
        if value is not None:
            root[key] = value
    return _digest(modules, {ROOT: root} if root else {})


class ServedContentTrust:
    """A `RevisionTrust` that also proves, per revision, that the engine serves its bundle.

    `expected` maps a revision to (served digest, data keys) of its verified bundle; a
    revision without an entry cannot be proven and is `PolicyStale`.
    """

    def __init__(
        self,
        inner: RevisionTrust,
        engine: ServedContent,
        expected: Mapping[str, tuple[str, tuple[str, ...]]],
        *,
        recheck_seconds: float = RECHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner, self._engine, self._expected = inner, engine, expected
        self._recheck, self._clock = recheck_seconds, clock
        self._checked_at: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def current(self) -> BundleIdentity:
        return self._inner.current

    def follow(self, listener: RevisionListener | None) -> None:
        self._inner.follow(listener)

    def identity_for(self, revision: str) -> BundleIdentity:
        """Raises: PolicyStale: the inner trust refuses, or the served content differs;
        PolicyUnavailable: OPA cannot be read back."""
        identity = self._inner.identity_for(revision)
        try:
            self.prove(identity.revision)
        except ContentMismatch:
            log.error(
                "the OPA server serves other policies or data than bundle revision %s",
                identity.revision,
            )
            raise
        return identity

    def prove(self, revision: str) -> None:
        """Check (unless checked within `recheck_seconds`) that the engine serves the bundle
        of `revision`.

        Raises:
            ContentMismatch: it serves other content, or the bundle is unknown.
            PolicyUnavailable: OPA cannot be read back.
        """
        now = self._clock()
        checked = self._checked_at.get(revision)
        if checked is not None and now - checked < self._recheck:
            return
        with self._lock:
            checked = self._checked_at.get(revision)
            if checked is not None and self._clock() - checked < self._recheck:
                return
            expected = self._expected.get(revision)
            if expected is None:
                raise ContentMismatch("no verified bundle for the revision the engine reports")
            digest, keys = expected
            if served_digest(self._engine, keys) != digest:
                self._checked_at.pop(revision, None)
                raise ContentMismatch("engine serves other content than its revision's bundle")
            self._checked_at[revision] = self._clock()
