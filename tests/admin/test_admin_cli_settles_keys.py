"""The admin CLI's direct-store path settles the key directory before it acts, as `serve` does:
a destruction a crash left promised is carried out by the first command that opens the store."""

from __future__ import annotations

from pathlib import Path

from engram_memory.crypto.keystore import KEYS_DIRECTORY, KeyStore
from engram_memory.store import key_intents
from engram_memory.store.database import Database
from tests.admin.test_admin_cli import _admin, prepared

__all__ = ["prepared"]  # the fixture, imported for pytest
SCOPE = "tenant:acme/workspace:support"


def test_an_admin_command_on_a_stopped_store_first_keeps_every_promised_destruction(
    prepared: tuple[dict[str, str], str],
) -> None:
    env, record_id = prepared
    data = Path(env["ENGRAM_DATA_DIR"])
    keys = KeyStore(data / KEYS_DIRECTORY)
    keys.put(SCOPE, "cand_ended_before_a_crash", b"\x01" * 92)
    database = Database.open(data)
    with database.transaction() as tx:
        key_intents.promise(tx, SCOPE, ["cand_ended_before_a_crash"], "withdraw", 0)
    database.close()

    history = _admin(env, "human:erin", "history", record_id)

    assert history.returncode == 0, history.stderr
    assert not keys.path_for(SCOPE, "cand_ended_before_a_crash").exists()
    database = Database.open(data)
    with database.transaction() as tx:
        assert key_intents.pending(tx) == []
    database.close()
    assert keys.path_for(SCOPE, record_id).exists()
