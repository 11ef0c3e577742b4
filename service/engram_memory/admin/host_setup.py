"""`host init`: the key files a host needs (root key, host signing key, checkpoint key).

Shared by the `host` command, the demo and the reference host, which must agree on names.
"""

from __future__ import annotations

from pathlib import Path

from engram_memory.crypto.checkpoint_key import CheckpointSigningKey
from engram_memory.crypto.keys import RootKey
from engram_memory.host.keys import HostSigningKey

ROOT_KEY_FILE = "root.key"
SIGNING_KEY_FILE = "host-signing.pem"
PUBLIC_KEYS_FILE = "host-keys.pem"
CHECKPOINT_KEY_FILE = "checkpoint.pem"
CHECKPOINT_PUBLIC_FILE = "checkpoint-public.pem"  # for auditors (`audit checkpoint-key`)


def init_host_dir(directory: Path) -> tuple[Path, Path, Path]:
    """Create (once) a root key, a host signing key and its public key, and the Ed25519
    checkpoint key and its public key (core/checkpoints.py) in `directory`.

    Returns (root key, signing key, public keys) paths; existing files are kept.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    root, signing, public = (
        directory / ROOT_KEY_FILE,
        directory / SIGNING_KEY_FILE,
        directory / PUBLIC_KEYS_FILE,
    )
    RootKey.load_or_create(root)
    if not signing.exists():
        HostSigningKey.generate().write_pem_files(signing, public)
    checkpoint = directory / CHECKPOINT_KEY_FILE
    if not checkpoint.exists():
        CheckpointSigningKey.generate().write_pem_files(
            checkpoint, directory / CHECKPOINT_PUBLIC_FILE
        )
    return root, signing, public
