"""A damaged item key file is found by `audit verify` (issue 23, finding 7).

Captured through the real server, then, the server stopped, one byte flipped in each part of
a key file (header, nonce, wrapped key, tag): the CLI `engram-memory audit verify` with the
root key fails (non-zero exit) and names the file; restored, it passes again. Without the
root key only the shape is checked: a flipped wrapped-key byte cannot be seen, a broken
header still is.

At the next start the server reports the damaged file itself: one stderr line naming it,
found by the background key scan (crypto/key_scan.py) while the server already answers.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

from engram_memory.client.demo import demo_capture_arguments
from tests.adversarial.evidence_support import key, real_server, value

CAPTURE = "engram_memory_capture"
# root key id, scope tag, nonce, wrapped key, GCM tag (crypto/keyfile.py's layout)
_OFFSETS = {"root_id": 6, "scope_tag": 20, "nonce": 36, "wrapped_key": 50, "gcm_tag": 85}


async def test_a_flipped_byte_in_a_key_file_fails_audit_verify_naming_the_file(
    tmp_path: Path,
) -> None:
    with real_server("stdio", tmp_path) as server:
        async with server.host() as host:
            args = demo_capture_arguments("Courier lost parcel 7781.", key("cap"))
            value(await host.call(CAPTURE, args))
        assert server.audit_verify().returncode == 0
        key_files = sorted((server.data_dir / "keys").glob("??/*.key"))
        assert len(key_files) == 1
        path = key_files[0]
        shown = f"keys/{path.parent.name}/{path.name}"
        original = path.read_bytes()
        for part, offset in _OFFSETS.items():
            damaged = bytearray(original)
            damaged[offset] ^= 0x01
            path.write_bytes(bytes(damaged))
            verified = server.audit_verify()
            assert verified.returncode != 0, part
            assert shown in verified.stdout, part
        path.write_bytes(original)
        assert server.audit_verify().returncode == 0
        # Without the root key: the shape is all that can be checked.
        server.env = {k: v for k, v in server.env.items() if k != "ENGRAM_ROOT_KEY"}
        damaged = bytearray(original)
        damaged[_OFFSETS["wrapped_key"]] ^= 0x01
        path.write_bytes(bytes(damaged))
        assert server.audit_verify().returncode == 0
        damaged[1] ^= 0x01  # the magic
        path.write_bytes(bytes(damaged))
        assert server.audit_verify().returncode != 0


_SERVE = [sys.executable, "-m", "engram_memory.cli", "serve", "--transport", "stdio"]
_SCAN_DONE = "key file scan:"
_DEADLINE_S = 60.0


def _stderr_until_scan_done(env: dict[str, str]) -> list[str]:
    """The stderr lines of a real `serve` start up to the key scan's closing line; the
    server is then stopped (stdin closed). Lines are read on a thread so that a server that
    never says it fails the test instead of hanging it."""
    process = subprocess.Popen(
        _SERVE, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    assert process.stdin is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(
        target=lambda: [lines.put(raw.decode()) for raw in process.stderr or ()], daemon=True
    )
    reader.start()
    seen: list[str] = []
    try:
        while not seen or _SCAN_DONE not in seen[-1]:
            seen.append(lines.get(timeout=_DEADLINE_S))
    finally:
        process.stdin.close()
        process.wait(timeout=_DEADLINE_S)
    return seen


async def test_a_start_reports_each_damaged_key_file_in_one_line(tmp_path: Path) -> None:
    with real_server("stdio", tmp_path) as server:
        async with server.host() as host:
            for label in ("a", "b", "c"):
                args = demo_capture_arguments(f"Courier lost parcel {label}.", key("cap"))
                value(await host.call(CAPTURE, args))
        paths = sorted((server.data_dir / "keys").glob("??/*.key"))
        assert len(paths) == 3
        for path, offset in zip(
            paths[:2], (_OFFSETS["wrapped_key"], _OFFSETS["nonce"]), strict=True
        ):
            damaged = bytearray(path.read_bytes())
            damaged[offset] ^= 0x01
            path.write_bytes(bytes(damaged))
        lines = _stderr_until_scan_done(server.env)
    named = [line for line in lines if "key file damaged" in line]
    assert len(named) == 2
    for path in paths[:2]:
        assert sum(f"keys/{path.parent.name}/{path.name}" in line for line in named) == 1
    sound = paths[2]
    assert not any(sound.name in line for line in lines)
