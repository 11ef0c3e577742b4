"""The key directory holds what the store needs: leftovers, orphans and ended keys go."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from engram_memory.crypto.key_hygiene import file_names, sweep_directory, sweep_temporaries
from engram_memory.crypto.keys import RootKey
from engram_memory.crypto.keystore import KeyStore
from engram_memory.crypto.sealing import new_data_key

ROOT = RootKey(os.urandom(32))
SCOPE = "tenant:acme/workspace:support"
NOW = 1_000_000.0
GRACE = 600.0


def _stored(store: KeyStore, item: str, *, age_s: float) -> Path:
    store.store_item_key(ROOT, SCOPE, item, new_data_key())
    path = store.path_for(SCOPE, item)
    os.utime(path, (NOW - age_s, NOW - age_s))
    return path


def test_sweep_keeps_live_keys_and_young_orphans_and_removes_old_orphans(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    live = _stored(store, "cand_live", age_s=10 * GRACE)
    old_orphan = _stored(store, "cand_never_committed", age_s=GRACE + 1)
    young_orphan = _stored(store, "cand_in_flight", age_s=GRACE - 1)

    report = sweep_directory(
        store, file_names([(SCOPE, "cand_live", True)]), grace_s=GRACE, now_s=NOW
    )

    assert (live.exists(), old_orphan.exists(), young_orphan.exists()) == (True, False, True)
    assert (report.orphans, report.young_orphans) == (1, 1)


def test_sweep_removes_keys_of_ended_items_whatever_their_age(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    ended = _stored(store, "mem_forgotten", age_s=0)

    report = sweep_directory(
        store, file_names([(SCOPE, "mem_forgotten", False)]), grace_s=GRACE, now_s=NOW
    )

    assert not ended.exists()
    assert report.ended == 1


def test_sweep_keeps_an_orphan_a_call_in_flight_has_claimed(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    claimed = _stored(store, "cand_claimed", age_s=10 * GRACE)
    assert store.claims.claim(claimed)

    sweep_directory(store, (set(), set()), grace_s=GRACE, now_s=NOW)

    assert claimed.exists()
    store.claims.release(claimed)
    sweep_directory(store, (set(), set()), grace_s=GRACE, now_s=NOW)
    assert not claimed.exists()


def test_sweep_removes_temporaries_including_empty_ones(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    live = _stored(store, "cand_live", age_s=0)
    leftovers = [live.with_name(live.name + ".tmp"), live.with_name("other.key.rot")]
    leftovers[0].write_bytes(b"")  # what a full disk leaves
    leftovers[1].write_bytes(b"\x01" * 92)
    state_leftover = store.directory / "state.json.tmp"
    state_leftover.write_bytes(b"")

    report = sweep_directory(
        store, file_names([(SCOPE, "cand_live", True)]), grace_s=GRACE, now_s=NOW
    )

    assert [p.exists() for p in (*leftovers, state_leftover)] == [False, False, False]
    assert report.temporaries == 3
    assert live.exists()


def test_temporaries_of_one_shard_are_swept_alone(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    live = _stored(store, "cand_live", age_s=0)
    leftover = live.with_name(live.name + ".tmp")
    leftover.write_bytes(b"")

    assert sweep_temporaries(store, live.parent) == 1
    assert not leftover.exists()
    assert live.exists()


def test_a_key_write_that_hits_a_full_disk_leaves_no_temporary(tmp_path: Path) -> None:
    # A real process whose file size limit is 0 gets EFBIG on its first byte, as ENOSPC would.
    script = textwrap.dedent(
        f"""
        import os, resource, signal, sys
        from pathlib import Path
        from engram_memory.crypto.keys import RootKey
        from engram_memory.crypto.keystore import KeyStore, KeyStoreUnavailable
        store = KeyStore(Path({str(tmp_path / "keys")!r}))
        store.put("{SCOPE}", "warm-up", b"x")  # the shard and its lock file exist first
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        try:
            store.store_item_key(RootKey(os.urandom(32)), "{SCOPE}", "cand_full", os.urandom(32))
        except KeyStoreUnavailable:
            sys.exit(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)

    assert done.returncode == 3, done.stderr
    names = sorted(p.name for p in (tmp_path / "keys").rglob("*") if p.is_file())
    assert not [n for n in names if n.endswith((".tmp", ".rot"))], names
    assert not KeyStore(tmp_path / "keys").path_for(SCOPE, "cand_full").exists()
