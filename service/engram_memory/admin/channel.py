"""The host-only maintenance channel: `engram-memory admin` against a running server.

DuckDB admits one writer, and every maintenance action is journaled and audited in the store,
so while a server runs, an operator's command must run inside it. `serve` therefore listens
on a Unix socket that only its own user can reach: the socket lives in a private runtime
directory (mode 0700, owned by that user, refused otherwise), and every connection's peer
uid is checked with SO_PEERCRED. `admin` uses the channel when a server holds the data
directory and opens the store itself otherwise. It is never reachable over MCP or a network.

Protocol, one JSON object per line: the admin sends one `AdminCommand` (admin/commands.py);
the server answers `{"progress": "..."}` lines, then one final line, `{"ok": true, "value":
...}`, `{"ok": false, "code": "<ErrorCode>"}` or `{"ok": false, "configuration_error":
"..."}`. Whoever can reach the socket can already read the data directory and keys, so the
operator named in the command is trusted as much as on the shell, and policy decides what
that operator may do.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import socketserver
import stat
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from engram_memory.admin.commands import AdminCommand, execute
from engram_memory.admin.maintenance import Progress
from engram_memory.contract.canonical import JsonValue
from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ConfigurationError, ToolError
from engram_memory.contract.refusals import PreBindingRefusal, RefusalReason
from engram_memory.core.runtime import Services
from engram_memory.transport.stopping import GracefulStop

log = logging.getLogger("engram_memory.admin.channel")

MAX_REQUEST_BYTES = 65_536
REQUEST_TIMEOUT_S = 30.0
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# Where the channel's refusals before a command runs are audited (the host-level stream).
Refused = Callable[[PreBindingRefusal], None]


def runtime_directory() -> Path:
    """`$XDG_RUNTIME_DIR/engram-memory` or `<tmp>/engram-memory-<uid>`, created private.

    Socket paths are limited to ~107 bytes, so sockets live here rather than in a data
    directory of any length.

    Raises:
        ConfigurationError: the directory exists but is not a private directory of ours: a
            link or another kind of file, another user's (someone may be squatting on the
            socket name), or open to group/others. Nothing is changed: the message names the
            documented fix (docs/operators/maintenance.md).
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    uid = os.getuid()
    directory = (
        Path(base) / "engram-memory"
        if base
        else Path(tempfile.gettempdir()) / f"engram-memory-{uid}"
    )
    try:
        with suppress(FileExistsError):
            directory.mkdir(mode=0o700, parents=False)
        info = directory.lstat()
    except OSError as exc:
        raise ConfigurationError(
            f"maintenance runtime directory {directory} cannot be made "
            f"({exc.strerror or type(exc).__name__}): set XDG_RUNTIME_DIR to an existing "
            "private directory of this user"
        ) from exc
    problem = None
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (a link or another file)"
    elif info.st_uid != uid:
        problem = f"is owned by uid {info.st_uid}, not by this user (uid {uid})"
    elif info.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(info.st_mode):04o}, not 0700"
    if problem is not None:
        raise ConfigurationError(
            f"maintenance runtime directory {directory} {problem}: remove it (as its owner "
            "or root) or set XDG_RUNTIME_DIR to a private directory of this user; see "
            "docs/operators/maintenance.md"
        )
    return directory


# A Unix socket path holds at most 107 bytes on Linux (sun_path is 108, NUL included).
_MAX_SOCKET_PATH_BYTES = 107


def channel_path(data_dir: Path) -> Path:
    """The socket for the server of `data_dir` (named by a digest of its real path).

    Raises:
        ConfigurationError: the runtime directory is unusable (`runtime_directory`), or so
            long that no socket path fits in it.
    """
    name = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:24]
    path = runtime_directory() / f"{name}.sock"
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH_BYTES:
        raise ConfigurationError(
            f"maintenance socket path would be {len(os.fsencode(path))} bytes, over the "
            f"{_MAX_SOCKET_PATH_BYTES} a Unix socket allows: set XDG_RUNTIME_DIR to a shorter "
            "private directory"
        )
    return path


def peer_uid(connection: socket.socket) -> int:
    _pid, uid, _gid = _PEERCRED.unpack(
        connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return int(uid)


# -- server ------------------------------------------------------------------------------


class _Handler(socketserver.StreamRequestHandler):
    server: _ChannelServer
    timeout = REQUEST_TIMEOUT_S

    def handle(self) -> None:
        # The request is read before a foreign peer is refused: closing on an unread request
        # would reset the connection, and the peer would see a broken pipe, not the refusal.
        try:
            line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
        except OSError:
            return  # the peer went away before it finished asking
        uid = peer_uid(self.connection)
        if uid != self.server.allowed_uid:
            self._send({"ok": False, "code": ErrorCode.UNAUTHORIZED.name})
            log.warning("maintenance channel: refused a connection from another user")
            self._refused(uid, RefusalReason.MAINTENANCE_REFUSED)
            return
        call = object()
        if not self.server.stop.admit(call):
            # Stopping: retriable, the next server takes it.
            self._send({"ok": False, "code": ErrorCode.STORE_UNAVAILABLE.name})
            return
        try:
            if len(line) > MAX_REQUEST_BYTES:
                self._refused(uid, RefusalReason.REQUEST_TOO_LARGE)
                raise ToolError(ErrorCode.INVALID_SCHEMA, "request too large")
            try:
                request = json.loads(line)
            except ValueError as exc:
                self._refused(uid, RefusalReason.PARSE_ERROR)
                raise ToolError(ErrorCode.INVALID_SCHEMA, "request is not JSON") from exc
            try:
                command = AdminCommand.from_json(request)
            except ToolError:
                self._refused(uid, RefusalReason.INVALID_REQUEST)
                raise
            log.info("maintenance channel: %s", command.name)
            value = execute(self.server.services, command, self._progress)
        except ToolError as error:
            self._send({"ok": False, "code": error.code.name})
        except ConfigurationError as error:
            # Operator-facing configuration text (key file paths), never content.
            self._send({"ok": False, "configuration_error": str(error)})
        except Exception as exc:  # noqa: BLE001 - nothing but a code crosses the channel
            log.error("maintenance channel: unexpected %s", type(exc).__name__)
            self._send({"ok": False, "code": ErrorCode.CAPABILITY_UNAVAILABLE.name})
        else:
            self._send({"ok": True, "value": value})
        finally:
            self.server.stop.leave(call)

    def _progress(self, line: str) -> None:
        self._send({"progress": line})

    def _refused(self, uid: int, reason: RefusalReason) -> None:
        if self.server.refused is not None:
            refusal = PreBindingRefusal("maintenance", f"uid:{uid}", "maintenance", reason)
            self.server.refused(refusal)

    def _send(self, message: dict[str, Any]) -> None:
        with suppress(OSError):  # the admin went away; the operation itself stands
            self.wfile.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
            self.wfile.flush()


class _ChannelServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(
        self,
        path: Path,
        services: Services,
        allowed_uid: int,
        stop: GracefulStop,
        refused: Refused | None,
    ) -> None:
        self.services = services
        self.allowed_uid = allowed_uid
        self.stop = stop
        self.refused = refused
        super().__init__(str(path), _Handler)


@contextmanager
def maintenance_channel(
    services: Services,
    data_dir: Path,
    *,
    allowed_uid: int | None = None,
    stop: GracefulStop | None = None,
    refused: Refused | None = None,
) -> Iterator[Path]:
    """Serve admin commands for `services` while the block runs; yields the socket path.
    A request refused before its command runs is handed to `refused` (the server passes
    `MemoryService.refused_before_binding`, which audits it in the host-level stream).

    Call it only while holding the store (the DuckDB lock proves no other server serves
    `data_dir`, so a socket already there is a dead server's and is replaced). On exit the
    stop begins (if it has not): no new command is taken, the running ones get the rest of
    the drain bound, then the socket is removed.
    """
    stop = stop or GracefulStop()
    path = channel_path(data_dir)
    with suppress(FileNotFoundError):
        path.unlink()
    uid = os.getuid() if allowed_uid is None else allowed_uid
    server = _ChannelServer(path, services, uid, stop, refused)
    path.chmod(0o600)
    thread = threading.Thread(
        target=server.serve_forever, name="engram-maintenance-channel", daemon=True
    )
    thread.start()
    try:
        yield path
    finally:
        stop.begin()
        server.shutdown()  # accepts no further connection
        stop.wait_drained()
        server.server_close()
        with suppress(FileNotFoundError):
            path.unlink()


# -- client ------------------------------------------------------------------------------


def send_command(
    data_dir: Path, command: AdminCommand, progress: Progress
) -> dict[str, JsonValue] | None:
    """Run `command` in the server of `data_dir`; None when no server listens there.

    Raises:
        ToolError: the server's refusal, with its code.
        ConfigurationError: the server found a named key file unusable.
    """
    path = channel_path(data_dir)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            connection.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return None  # no server, or a dead one's socket: the admin opens the store
        try:
            connection.sendall(json.dumps(command.as_json()).encode() + b"\n")
            with connection.makefile("rb") as replies:
                for line in replies:
                    reply = json.loads(line)
                    if "progress" in reply:
                        progress(str(reply["progress"]))
                        continue
                    return _final(reply)
        except (BrokenPipeError, ConnectionResetError) as exc:
            # The server closes on a peer it refuses; if that close overtook our request,
            # the refusal is all this error can mean.
            raise ToolError(ErrorCode.UNAUTHORIZED, "the server refused the channel") from exc
    finally:
        connection.close()
    raise ToolError(ErrorCode.STORE_UNAVAILABLE, "the server closed the channel mid-command")


def _final(reply: dict[str, Any]) -> dict[str, JsonValue]:
    if reply.get("ok") is True:
        value: dict[str, JsonValue] = reply["value"]
        return value
    if "configuration_error" in reply:
        raise ConfigurationError(str(reply["configuration_error"]))
    code = ErrorCode.__members__.get(str(reply.get("code")), ErrorCode.CAPABILITY_UNAVAILABLE)
    raise ToolError(code, "refused over the maintenance channel")
