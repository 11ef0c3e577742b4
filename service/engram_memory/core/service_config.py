"""Service configuration: environment variables, each with a matching `serve` flag.

| variable | flag | default |
|---|---|---|
| ENGRAM_DATA_DIR | --data-dir | ./.engram |
| ENGRAM_HOST_KEYS | --host-keys | (required) trusted host public keys, PEM or JWKS |
| ENGRAM_ROOT_KEY | --root-key | (required) root key file, mode 0600 |
| ENGRAM_POLICY | --policy | embedded; opa-spawn (a private OPA server); or an OPA URL |
| ENGRAM_BUNDLE | --bundle | the bundle shipped in the package |
| ENGRAM_BUNDLE_VERIFICATION_KEY | --bundle-verification-key | none: signatures not checked |
| ENGRAM_BUNDLE_SERVICE | --bundle-service | none; OPA fleet: URL of the signed bundle.tar.gz |
| ENGRAM_BUNDLE_KEY_ID | --bundle-key-id | (required with the key) the key id signatures name |
| ENGRAM_MEMORY_ENABLED | --enable-memory | false: the host opt-in of SPEC §1.5 |
| ENGRAM_DRAIN_SECONDS | --drain-seconds | 10: how long a stop waits for calls in flight |
| ENGRAM_MAX_REQUEST_BYTES | --max-request-bytes | 4194304: larger bodies 413, lines -32600 |
| ENGRAM_HTTP_MAX_CONNECTIONS | --http-max-connections | 128 open connections |
| ENGRAM_HTTP_MAX_CONNECTIONS_PER_PEER | --http-max-connections-per-peer | 32 |
| ENGRAM_HTTP_MAX_SESSIONS | --http-max-sessions | 256 sessions in all |
| ENGRAM_HTTP_MAX_SESSIONS_PER_PEER | --http-max-sessions-per-peer | 32 not yet bound, per address |
| ENGRAM_HTTP_MAX_SESSIONS_PER_PRINCIPAL | --http-max-sessions-per-principal | 32 bound, each |
| ENGRAM_HTTP_SESSION_IDLE_MINUTES | --http-session-idle-minutes | 10 |
| ENGRAM_HTTP_UNBOUND_SESSION_SECONDS | --http-unbound-session-seconds | 10 |
| ENGRAM_HTTP_HEADER_TIMEOUT_SECONDS | --http-header-timeout-seconds | 10 |
| ENGRAM_HTTP_BODY_TIMEOUT_SECONDS | --http-body-timeout-seconds | 30 |
| ENGRAM_HTTP_ALLOWED_HOSTS | --http-allowed-hosts | loopback names; required off loopback |
| ENGRAM_HTTP_ALLOWED_ORIGINS | --http-allowed-origins | loopback origins; required off loopback |
| ENGRAM_TLS_CERT, ENGRAM_TLS_KEY | --tls-cert, --tls-key | none; off loopback TLS or: |
| ENGRAM_INSECURE_NO_TLS | --insecure-no-tls | false |
| ENGRAM_STORE_AUDIENCE | --store-audience | none: tokens carry no `aud`; set: they name it |
| ENGRAM_REFUSAL_BURST | --refusal-burst | 10: refusals audited one by one per key and window |
| ENGRAM_REFUSAL_INTERVAL_S | --refusal-interval-s | 60: the window; then one counted summary |
| ENGRAM_CHECKPOINT_KEY | --checkpoint-key | none (one warning: unsigned); Ed25519 PEM, 0600 |
| ENGRAM_CHECKPOINT_INTERVAL_S | --checkpoint-interval-s | 300, only when a head moved |
| ENGRAM_DECISION_INPUT_RETENTION_DAYS | (none) | 90: decision inputs kept for replay; 0: none |
| ENGRAM_READ_CACHE_MIB | (none) | 64: record rows kept in memory for reads; 0: none |
| ENGRAM_READ_CACHE_KEYS | (none) | 65536: unwrapped item keys kept in memory; 0: none |

The HTTP settings (http_settings.py) are read only by `serve --transport http`, except
ENGRAM_MAX_REQUEST_BYTES, which stdio applies to a request line.

A bad value is reported as one line naming the problem; nothing is written before the
configuration is known to be good.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from engram_memory._internal.config_values import boolean as _bool
from engram_memory._internal.config_values import flag_or_env as _flag_or_env
from engram_memory._internal.config_values import given_as as _given_as
from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.contract.identifiers import has_refused_character
from engram_memory.core.decision_keeping import DEFAULT_RETENTION_DAYS, MAX_RETENTION_DAYS
from engram_memory.core.flood_bound import DEFAULT_BURST, DEFAULT_INTERVAL_MS
from engram_memory.crypto.key_cache import DEFAULT_MAX_KEYS
from engram_memory.policy.revision_trust import bundle_service_url
from engram_memory.policy.signing_keys import VerificationKey, load_verification_key
from engram_memory.store.read_cache import DEFAULT_MAX_BYTES
from engram_memory.transport.stopping import DEFAULT_DRAIN_SECONDS

DEFAULT_CHECKPOINT_INTERVAL_S = 300

EMBEDDED = "embedded"
# Start a private `opa run --server` with the bundle on 127.0.0.1 (needs the OPA binary).
OPA_SPAWN = "opa-spawn"


@dataclass(frozen=True)
class ServiceConfig:
    data_dir: Path
    host_keys: Path
    root_key: Path
    policy: str
    bundle: Path | None
    memory_enabled: bool
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    refusal_burst: int = DEFAULT_BURST
    refusal_interval_s: int = DEFAULT_INTERVAL_MS // 1000
    # None: bundle signatures are not checked (policy/signing.py).
    bundle_verification_key: VerificationKey | None = None
    # The Ed25519 key that signs audit checkpoints and export manifests (core/checkpoints.py);
    # None: none are signed. Read (and checked) by app.open_service before the store opens.
    checkpoint_key: Path | None = None
    checkpoint_interval_s: int = DEFAULT_CHECKPOINT_INTERVAL_S
    # This store's name in invocation tokens' `aud` (host/keys.py); None: tokens carry none.
    store_audience: str | None = None
    # An OPA fleet's bundle service: the URL of the published bundle.tar.gz (revision_trust).
    bundle_service: str | None = None
    # Days each decision's input is kept for `policy replay` (core/decision_keeping.py).
    decision_input_retention_days: int = DEFAULT_RETENTION_DAYS
    # The bounds of what reads keep in memory (store/read_cache.py, crypto/key_cache.py).
    read_cache_mib: int = DEFAULT_MAX_BYTES // (1024 * 1024)
    read_cache_keys: int = DEFAULT_MAX_KEYS

    @property
    def uses_opa_server(self) -> bool:
        return self.policy != EMBEDDED


def _existing_file(text: str | None, name: str) -> Path:
    if not text:
        raise ConfigurationError(
            f"{name} is not set: give the flag or the variable "
            "(`engram-memory host init --dir DIR` prints the values to use)"
        )
    path = Path(text).expanduser()
    if not path.is_file():
        raise ConfigurationError(f"{name} points to {path}, which is not a readable file")
    return path


def _optional_file(text: str | None, name: str) -> Path | None:
    """None when unset; a configured file that is missing is an error, never ignored."""
    return None if not text else _existing_file(text, name)


def _policy(text: str | None, name: str = "ENGRAM_POLICY") -> str:
    if not text or text == EMBEDDED:
        return EMBEDDED
    if text == OPA_SPAWN:
        return OPA_SPAWN
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigurationError(
            f"{name} must be 'embedded', 'opa-spawn' or an OPA URL, got {text!r}"
        )
    return text.rstrip("/")


def _seconds(text: str | None, name: str = "ENGRAM_DRAIN_SECONDS") -> float:
    if text is None or not text.strip():
        return DEFAULT_DRAIN_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise ConfigurationError(f"{name} must be 0 to 3600 seconds, got {text!r}")
    return value


def _whole(text: str | None, name: str, default: int, low: int, high: int) -> int:
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ConfigurationError(f"{name} must be a whole number {low} to {high}, got {text!r}")
    return value


def _verification_key(
    flags: Mapping[str, str | None], env: Mapping[str, str]
) -> VerificationKey | None:
    path = _flag_or_env(flags, env, "ENGRAM_BUNDLE_VERIFICATION_KEY")
    key_id = _flag_or_env(flags, env, "ENGRAM_BUNDLE_KEY_ID")
    if not path and not key_id:
        return None
    key_name = _given_as(flags, "ENGRAM_BUNDLE_VERIFICATION_KEY")
    if not path or not key_id:
        id_name = _given_as(flags, "ENGRAM_BUNDLE_KEY_ID")
        raise ConfigurationError(f"{key_name} and {id_name} must be set together")
    try:
        return load_verification_key(Path(path).expanduser(), key_id)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{key_name}: {exc}") from exc


def _bundle_service(flags: Mapping[str, str | None], env: Mapping[str, str]) -> str | None:
    text = _flag_or_env(flags, env, "ENGRAM_BUNDLE_SERVICE")
    return bundle_service_url(text) if text else None


def load_config(
    flags: Mapping[str, str | None] | None = None, env: Mapping[str, str] | None = None
) -> ServiceConfig:
    """Resolve flags over environment over defaults.

    Raises:
        ConfigurationError: the first unusable value, named.
    """
    flags = flags or {}
    env = os.environ if env is None else env
    bundle_text = _flag_or_env(flags, env, "ENGRAM_BUNDLE")
    bundle = None
    if bundle_text:
        bundle = Path(bundle_text).expanduser()
        if not bundle.is_dir():
            raise ConfigurationError(
                f"{_given_as(flags, 'ENGRAM_BUNDLE')} points to {bundle}, which is not a directory"
            )
    return ServiceConfig(
        drain_seconds=_seconds(
            _flag_or_env(flags, env, "ENGRAM_DRAIN_SECONDS"),
            _given_as(flags, "ENGRAM_DRAIN_SECONDS"),
        ),
        refusal_burst=_whole(
            _flag_or_env(flags, env, "ENGRAM_REFUSAL_BURST"),
            _given_as(flags, "ENGRAM_REFUSAL_BURST"),
            DEFAULT_BURST,
            0,
            10_000,
        ),
        refusal_interval_s=_whole(
            _flag_or_env(flags, env, "ENGRAM_REFUSAL_INTERVAL_S"),
            _given_as(flags, "ENGRAM_REFUSAL_INTERVAL_S"),
            DEFAULT_INTERVAL_MS // 1000,
            1,
            86_400,
        ),
        checkpoint_key=_optional_file(
            _flag_or_env(flags, env, "ENGRAM_CHECKPOINT_KEY"),
            _given_as(flags, "ENGRAM_CHECKPOINT_KEY"),
        ),
        checkpoint_interval_s=_whole(
            _flag_or_env(flags, env, "ENGRAM_CHECKPOINT_INTERVAL_S"),
            _given_as(flags, "ENGRAM_CHECKPOINT_INTERVAL_S"),
            DEFAULT_CHECKPOINT_INTERVAL_S,
            1,
            86_400,
        ),
        decision_input_retention_days=_whole(
            env.get("ENGRAM_DECISION_INPUT_RETENTION_DAYS"),
            "ENGRAM_DECISION_INPUT_RETENTION_DAYS",
            DEFAULT_RETENTION_DAYS,
            0,
            MAX_RETENTION_DAYS,
        ),
        read_cache_mib=_whole(
            env.get("ENGRAM_READ_CACHE_MIB"),
            "ENGRAM_READ_CACHE_MIB",
            DEFAULT_MAX_BYTES // (1024 * 1024),
            0,
            65_536,
        ),
        read_cache_keys=_whole(
            env.get("ENGRAM_READ_CACHE_KEYS"),
            "ENGRAM_READ_CACHE_KEYS",
            DEFAULT_MAX_KEYS,
            0,
            10_000_000,
        ),
        store_audience=_audience(
            _flag_or_env(flags, env, "ENGRAM_STORE_AUDIENCE"),
            _given_as(flags, "ENGRAM_STORE_AUDIENCE"),
        ),
        data_dir=Path(_flag_or_env(flags, env, "ENGRAM_DATA_DIR") or ".engram").expanduser(),
        host_keys=_existing_file(
            _flag_or_env(flags, env, "ENGRAM_HOST_KEYS"), _given_as(flags, "ENGRAM_HOST_KEYS")
        ),
        root_key=_existing_file(
            _flag_or_env(flags, env, "ENGRAM_ROOT_KEY"), _given_as(flags, "ENGRAM_ROOT_KEY")
        ),
        policy=_policy(
            _flag_or_env(flags, env, "ENGRAM_POLICY"), _given_as(flags, "ENGRAM_POLICY")
        ),
        bundle=bundle,
        bundle_verification_key=_verification_key(flags, env),
        bundle_service=_bundle_service(flags, env),
        memory_enabled=_bool(
            _flag_or_env(flags, env, "ENGRAM_MEMORY_ENABLED") or "false", "ENGRAM_MEMORY_ENABLED"
        ),
    )


def _audience(text: str | None, name: str = "ENGRAM_STORE_AUDIENCE") -> str | None:
    """Raises: ConfigurationError: empty, over 256 bytes or holding a control character."""
    if text is None:
        return None
    if not text or len(text.encode("utf-8")) > 256 or has_refused_character(text):
        raise ConfigurationError(f"{name} must be 1..256 bytes without control characters")
    return text
