"""Embedded engine: the bundle's `policy.wasm` (compiled by the pinned OPA) evaluated
in-process by opa-py-wasm on wasmtime.

Same Rego, same compiler, so OPA's semantics without an extra process. opa-py-wasm keeps a
bounded, thread-safe pool of instances; each evaluation has a wall-clock deadline (epoch
interruption) and each instance a linear-memory cap, so a runaway or memory-hungry policy
traps instead of hanging or exhausting the service. Every failure becomes
`PolicyUnavailable`; nothing raised inside the Wasm host escapes this module.

Answers are memoized per (entrypoint, input). That is exact, not a cache that can go stale:
the bundle is fixed for the engine's life and refuses host builtins (no clock, no randomness,
no network), so an entrypoint is a pure function of its input. Most calls repeat the same
discovery, authorization and confirmation questions; each costs ~1 ms of Wasm.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import opapywasm
from opapywasm import UNDEFINED, OpaWasmPolicy, PolicyConfig

from engram_memory.contract.exceptions import BundleError, PolicyUnavailable
from engram_memory.policy.bundle import (
    DEFAULT_BUNDLE_DIR,
    WASM_FILE,
    bundle_data,
    read_lock,
    verify_bundle,
)
from engram_memory.policy.engine import BundleIdentity, EngineAnswer
from engram_memory.policy.signing import VerificationKey, load_signed_bundle

ENGINE_ID = "opa-wasm-embedded"


class _AnswerMemo:
    """A bounded, thread-safe LRU of entrypoint answers, stored as JSON text so no caller can
    alter a remembered answer through the object it was handed."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._answers: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(path: str, policy_input: Mapping[str, Any]) -> str | None:
        try:
            return path + "\n" + json.dumps(policy_input, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return None  # not JSON: evaluated (and refused) without the memo

    def recall(self, key: str) -> tuple[object, str] | None:
        """The remembered answer and its text, or None."""
        with self._lock:
            text = self._answers.get(key)
            if text is None:
                return None
            self._answers.move_to_end(key)
        result: object = json.loads(text)
        return result, text

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    def keep(self, key: str, result: object) -> str:
        """Remember `result`; return the text it is remembered as."""
        text = json.dumps(result, separators=(",", ":"))
        with self._lock:
            self._answers[key] = text
            self._answers.move_to_end(key)
            while len(self._answers) > self._entries:
                self._answers.popitem(last=False)
        return text


class EmbeddedWasmEngine:
    """`PolicyEngine` evaluating a verified bundle directory's `policy.wasm` in-process."""

    engine_id = ENGINE_ID

    def __init__(
        self,
        bundle_dir: Path | str = DEFAULT_BUNDLE_DIR,
        *,
        pool_size: int = 4,
        eval_timeout_seconds: float = 1.0,
        borrow_timeout_seconds: float = 2.0,
        max_memory_pages: int = 512,
        memo_entries: int = 4096,
        verification_key: VerificationKey | None = None,
    ) -> None:
        """Verify the bundle against its lock (and its signature with `verification_key`),
        then load `policy.wasm` and `data.json`.

        `max_memory_pages` caps each instance's linear memory (64 KiB pages; 512 = 32 MiB);
        `memo_entries` bounds the answer memo (0 turns it off). With a key, the Wasm and
        data loaded are the very bytes whose signature was checked.

        Raises:
            BundleSignatureInvalid: a key is given and the bundle is not signed by it.
            BundleError: the bundle does not match its lock or the Wasm will not load.
        """
        directory = Path(bundle_dir)
        wasm: bytes | None = None
        if verification_key is None:
            self.identity: BundleIdentity = verify_bundle(directory)
            data = bundle_data(directory)
        else:
            signed = load_signed_bundle(directory, verification_key)
            self.identity, data, wasm = signed.identity, signed.data, signed.wasm
        lock = read_lock(directory)
        config = PolicyConfig(
            pool_size=pool_size,
            eval_timeout_seconds=eval_timeout_seconds,
            borrow_timeout_seconds=borrow_timeout_seconds,
            max_memory_pages=max_memory_pages,
            strict_result_shape=True,
        )
        try:
            if wasm is None:
                wasm = (directory / WASM_FILE).read_bytes()
            policy = OpaWasmPolicy.from_wasm_bytes(wasm, config)
        except (OSError, opapywasm.OpaWasmError) as exc:
            raise BundleError(f"{directory / WASM_FILE}: cannot load the policy") from exc
        try:
            policy.set_data(data)
            if policy.builtins:
                # Every builtin our Rego uses is native to OPA's Wasm; a host builtin would
                # be Python code we did not write standing in for OPA's semantics.
                raise BundleError(f"policy needs host builtins: {sorted(policy.builtins)}")
        except BaseException:
            policy.close()
            raise
        self._policy = policy
        # Where it was loaded from, so that another process can load the same bundle (the
        # bulk import's workers, bulk/pool.py: they check the identity they get is this one).
        self.bundle_dir = directory
        self.verification_key = verification_key
        self._entrypoints = frozenset(policy.entrypoints)
        self._memo = _AnswerMemo(memo_entries) if memo_entries > 0 else None
        self._closed = False
        self.engine_version = (
            f"opa-py-wasm/{opapywasm.__version__}+opa/{lock.get('opa_version', 'unknown')}"
        )

    @property
    def revision(self) -> str:
        return self.identity.revision

    def evaluate(self, path: str, policy_input: Mapping[str, Any]) -> EngineAnswer:
        """Evaluate the Wasm entrypoint `path`.

        Raises:
            PolicyUnavailable: unknown entrypoint, trap, timeout, memory cap, pool
                exhaustion, closed engine, unserializable input or undefined result.
        """
        if self._closed:
            raise PolicyUnavailable("wasm: engine closed")
        if path not in self._entrypoints:
            raise PolicyUnavailable(f"wasm: no entrypoint {path}")
        key = None if self._memo is None else self._memo.key(path, policy_input)
        if key is not None and self._memo is not None:
            remembered = self._memo.recall(key)
            if remembered is not None:
                result, text = remembered
                return EngineAnswer(result, self.identity.revision, result_text=text)
        try:
            result = self._policy.evaluate(dict(policy_input), entrypoint=path)
        # The one boundary to third-party Wasm code: any failure in there (typed
        # OpaWasmError, wasmtime trap, codec error) must become POLICY_UNAVAILABLE and
        # never take the service down.
        except Exception as exc:
            raise PolicyUnavailable(f"wasm: {type(exc).__name__}") from exc
        if result is UNDEFINED:
            raise PolicyUnavailable(f"wasm: undefined result for {path}")
        if key is not None and self._memo is not None:
            text = self._memo.keep(key, result)
            return EngineAnswer(result, self.identity.revision, result_text=text)
        return EngineAnswer(result=result, revision=self.identity.revision)

    def remembered_answers(self) -> int:
        """How many answers the memo holds (bounded by `memo_entries`)."""
        return 0 if self._memo is None else len(self._memo)

    def close(self) -> None:
        self._closed = True
        self._policy.close()
