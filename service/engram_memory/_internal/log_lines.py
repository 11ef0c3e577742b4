"""Log lines a client cannot write into: every control character of a message is escaped.

Client-supplied values reach the log in places we do not format ourselves (the MCP SDK logs
a refused `Host` or `Origin` header verbatim, issue 23): a header carrying an ANSI or 8-bit
CSI escape would rewrite the terminal that shows the log, and a newline would forge a line.
So the one formatter of the process escapes them all, whoever logged the message: C0, DEL
and C1 controls and the bidi/format characters become `\\xNN` / `\\uNNNN`, a backslash stays
a backslash. A traceback (exc_info), written by the formatter itself, keeps its newlines.
"""

from __future__ import annotations

import logging
import unicodedata

# Control (C0, DEL, C1), format (bidi overrides and isolates, zero-width) and line or
# paragraph separators: what rewrites, reorders, hides or splits what a reader sees.
_ESCAPED = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (one line, readable)."""
    if text.isprintable():  # the common line: nothing to look at twice
        return text
    return "".join(
        _escaped(char) if unicodedata.category(char) in _ESCAPED else char for char in text
    )


class EscapingFormatter(logging.Formatter):
    """A `logging.Formatter` that escapes control characters in the message part."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)
