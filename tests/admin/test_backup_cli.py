"""`engram-memory admin backup | restore` from the operator's shell, on a real data directory."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from engram_memory.policy.embedded import EmbeddedWasmEngine
from tests.admin.test_rotation_cli import _admin, _cli, _get, _service
from tests.admin.test_rotation_cli import prepared as prepared  # the same prepared store
from tests.tools.test_tool_rules import value


def test_operator_backs_up_and_restores_a_verified_store(
    prepared: tuple[dict[str, str], list[str]], engine: EmbeddedWasmEngine, tmp_path: Path
) -> None:
    env, records = prepared
    archive = tmp_path / "nightly.backup"
    made = _admin(env, "backup", "--out", str(archive))
    assert made.returncode == 0, made.stderr
    assert "backup: archived" in made.stderr  # progress
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert b"Rotated from the shell" not in archive.read_bytes()

    target = tmp_path / "restored"
    back = _admin(env, "restore", "--from", str(archive), "--to", str(target))
    assert back.returncode == 0, back.stderr
    assert "restore: verified" in back.stderr
    verified = _cli(env, "audit", "verify", "--data-dir", str(target))
    assert verified.returncode == 0, verified.stderr
    with _service(target, Path(env["ENGRAM_ROOT_KEY"]), engine) as caller:
        for record_id in records:
            assert value(_get(caller, record_id))

    again = _admin(env, "restore", "--from", str(archive), "--to", str(target))
    assert json.loads(again.stdout) == {"ok": False, "code": "RESTORE_REFUSED"}
    damaged = bytearray(archive.read_bytes())
    damaged[len(damaged) // 2] ^= 0x40
    (tmp_path / "damaged.backup").write_bytes(bytes(damaged))
    broken = _admin(
        env, "restore", "--from", str(tmp_path / "damaged.backup"), "--to", str(tmp_path / "x")
    )
    assert json.loads(broken.stdout) == {"ok": False, "code": "BACKUP_INVALID"}
    assert not (tmp_path / "x").exists()
