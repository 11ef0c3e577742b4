"""`audit pack`: one directory an auditor hands over, under a manifest signed with the
checkpoint key, and its check with files alone.

A pack holds `export/` (a full `audit export`, itself signed), `report/` (`audit report` of
the period), `policies/<label>-<digest>/` (the policy text of each bundle revision in force
in the period, when the bundle is at hand: the store records only a revision's label and
content digest, never its text, so the text comes from the bundle shipped in the package and
from bundle directories given with `--bundle`, each matched by its verified content
digest), `verification.txt` (the `audit verify` transcript), `checkpoints/` (every
checkpoint the store kept that was signed in the period) and `checkpoint-public.pem`.
`manifest.json` lists every other file with its SHA-256 and size and is signed like an
export manifest (Ed25519 over its canonical JSON, core/checkpoints.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from engram_memory.admin.audit_output import instant_text
from engram_memory.contract.exceptions import BundleError, CheckpointInvalid, ConfigurationError
from engram_memory.core.checkpoints import sign_manifest, verify_signature
from engram_memory.crypto.checkpoint_key import CheckpointPublicKey, CheckpointSigningKey
from engram_memory.policy.bundle import (
    BUNDLE_FILE,
    MANIFEST_FILE,
    SIGNATURES_FILE,
    read_tarball,
    verify_bundle,
)
from engram_memory.store.checkpoints import stored_documents
from engram_memory.store.database import Database

PACK_FORMAT = "engram-audit-pack/1"
PACK_MANIFEST = "manifest.json"
POLICIES_DIR = "policies"
CHECKPOINTS_DIR = "checkpoints"


@dataclass(frozen=True)
class RevisionText:
    revision: str
    digest: str
    directory: str | None  # the pack path of its text; None when no bundle at hand matched
    source: str | None  # "shipped" or the --bundle directory it came from


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_policy_texts(
    revisions: Iterable[tuple[str, str]], bundles: Mapping[str, Path], out_dir: Path
) -> list[RevisionText]:
    """The text of each (revision, digest) whose bundle is among `bundles` (source name ->
    bundle directory), written under `out_dir/policies/`.

    Raises:
        ConfigurationError: a given bundle directory does not verify.
    """
    by_digest: dict[str, tuple[str, Path]] = {}
    for source, directory in bundles.items():
        try:
            identity = verify_bundle(directory)
        except BundleError as exc:
            raise ConfigurationError(f"--bundle {directory}: {exc}") from exc
        by_digest.setdefault(identity.digest, (source, directory))
    texts = []
    for revision, digest in sorted(set(revisions)):
        found = by_digest.get(digest)
        if found is None:
            texts.append(RevisionText(revision, digest, None, None))
            continue
        source, directory = found
        label = revision.partition("+")[0] or "bundle"
        target = f"{POLICIES_DIR}/{label}-{digest.removeprefix('sha256:')[:12]}"
        for name, content in read_tarball(directory / BUNDLE_FILE).items():
            if name in (MANIFEST_FILE, SIGNATURES_FILE):
                continue
            path = out_dir / target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        texts.append(RevisionText(revision, digest, target, source))
    return texts


def write_checkpoints(
    data_dir: Path, start: datetime | None, end: datetime | None, out_dir: Path
) -> list[Path]:
    """Every checkpoint the stopped store kept that was signed in [start, end), one file each.

    Raises:
        StoreOpenFailed: the store cannot be opened read-only.
    """
    database = Database.open(data_dir, read_only=True)
    try:
        with database.transaction() as tx:
            documents = stored_documents(tx)
    finally:
        database.close()
    low = None if start is None else instant_text(start)
    high = None if end is None else instant_text(end)
    written: list[Path] = []
    target = out_dir / CHECKPOINTS_DIR
    target.mkdir(parents=True, exist_ok=True)
    for text in documents:
        document = json.loads(text)
        signed_at = str(document.get("signed_at", ""))
        if (low is not None and signed_at < low) or (high is not None and signed_at >= high):
            continue
        head = document.get("audit_head") or {}
        path = target / f"{len(written) + 1:04d}-seq{head.get('sequence', 0)}.json"
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


def _listed_files(pack_dir: Path) -> list[Path]:
    return sorted(p for p in pack_dir.rglob("*") if p.is_file() and p != pack_dir / PACK_MANIFEST)


def sign_pack(
    pack_dir: Path,
    key: CheckpointSigningKey,
    period: tuple[datetime | None, datetime | None],
    texts: list[RevisionText],
) -> dict[str, object]:
    """Write the signed `manifest.json` listing every file in `pack_dir`; return it."""
    files: list[object] = [
        {
            "path": path.relative_to(pack_dir).as_posix(),
            "sha256": file_sha256(path),
            "bytes": path.stat().st_size,
        }
        for path in _listed_files(pack_dir)
    ]
    manifest: dict[str, object] = {
        "format": PACK_FORMAT,
        "from": None if period[0] is None else instant_text(period[0]),
        "to": None if period[1] is None else instant_text(period[1]),
        "key_id": key.key_id,
        "revisions": [
            {"revision": t.revision, "digest": t.digest, "text": t.directory, "source": t.source}
            for t in texts
        ],
        "files": files,
    }
    signed = sign_manifest(manifest, key)
    (pack_dir / PACK_MANIFEST).write_text(json.dumps(signed, indent=2) + "\n", encoding="utf-8")
    return signed


def verify_pack(pack_dir: Path, key: CheckpointPublicKey) -> tuple[int, list[str]]:
    """(problems found, lines): the manifest's signature, then every listed file's SHA-256
    and size, and any file present but not listed. Each failing line names its file.

    Raises:
        ConfigurationError: no readable manifest.
        CheckpointInvalid: the manifest is not a pack manifest or not signed by `key`.
    """
    try:
        manifest = json.loads((pack_dir / PACK_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{pack_dir} holds no readable {PACK_MANIFEST}") from exc
    except ValueError as exc:
        raise CheckpointInvalid(f"{PACK_MANIFEST}: not JSON") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != PACK_FORMAT:
        raise CheckpointInvalid(f"{PACK_MANIFEST}: not an {PACK_FORMAT} manifest")
    try:
        verify_signature(manifest, key)
    except CheckpointInvalid as exc:
        raise CheckpointInvalid(f"{PACK_MANIFEST}: {exc}") from exc
    problems = []
    listed = set()
    for entry in manifest.get("files") or []:
        name = str(entry.get("path", "")) if isinstance(entry, dict) else ""
        listed.add(name)
        target = pack_dir / name
        if not name or ".." in Path(name).parts or not target.is_file():
            problems.append(f"FAILED: {name or '(unnamed)'}: missing")
        elif target.stat().st_size != entry.get("bytes") or file_sha256(target) != entry.get(
            "sha256"
        ):
            problems.append(f"FAILED: {name}: sha256 differs from the signed manifest")
    for path in _listed_files(pack_dir):
        name = path.relative_to(pack_dir).as_posix()
        if name not in listed:
            problems.append(f"FAILED: {name}: not listed in the signed manifest")
    lines = problems or [
        f"ok: {len(listed)} files match the manifest signed by key {key.key_id} "
        f"(period {manifest.get('from') or 'start'} to {manifest.get('to') or 'end'})"
    ]
    return len(problems), lines
