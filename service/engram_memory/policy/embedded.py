"""Embedded engine: the bundle's `policy.wasm` (compiled by the pinned OPA) evaluated
in-process by opa-py-wasm on wasmtime.

Same Rego, same compiler, so OPA's semantics without an extra process. opa-py-wasm keeps a
bounded, thread-safe pool of instances; each evaluation has a wall-clock deadline (epoch
interruption) and each instance a linear-memory cap, so a runaway or memory-hungry policy
traps instead of hanging or exhausting the service. Every failure becomes
`PolicyUnavailable`; nothing raised inside the Wasm host escapes this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import opapywasm
from opapywasm import UNDEFINED, OpaWasmPolicy, PolicyConfig

from engram_memory.policy.bundle import (
    DEFAULT_BUNDLE_DIR,
    WASM_FILE,
    BundleError,
    bundle_data,
    read_lock,
    verify_bundle,
)
from engram_memory.policy.engine import BundleIdentity, EngineAnswer, PolicyUnavailable

ENGINE_ID = "opa-wasm-embedded"


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
    ) -> None:
        """Verify the bundle against its lock, then load `policy.wasm` and `data.json`.

        `max_memory_pages` caps each instance's linear memory (64 KiB pages; 512 = 32 MiB).

        Raises:
            BundleError: the bundle does not match its lock or the Wasm will not load.
        """
        directory = Path(bundle_dir)
        self.identity: BundleIdentity = verify_bundle(directory)
        lock = read_lock(directory)
        data = bundle_data(directory)
        config = PolicyConfig(
            pool_size=pool_size,
            eval_timeout_seconds=eval_timeout_seconds,
            borrow_timeout_seconds=borrow_timeout_seconds,
            max_memory_pages=max_memory_pages,
            strict_result_shape=True,
        )
        try:
            policy = OpaWasmPolicy.from_wasm_bytes((directory / WASM_FILE).read_bytes(), config)
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
        self._entrypoints = frozenset(policy.entrypoints)
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
        if path not in self._entrypoints:
            raise PolicyUnavailable(f"wasm: no entrypoint {path}")
        try:
            result = self._policy.evaluate(dict(policy_input), entrypoint=path)
        # The one boundary to third-party Wasm code: any failure in there (typed
        # OpaWasmError, wasmtime trap, codec error) must become POLICY_UNAVAILABLE and
        # never take the service down.
        except Exception as exc:
            raise PolicyUnavailable(f"wasm: {type(exc).__name__}") from exc
        if result is UNDEFINED:
            raise PolicyUnavailable(f"wasm: undefined result for {path}")
        return EngineAnswer(result=result, revision=self.identity.revision)

    def close(self) -> None:
        self._policy.close()
