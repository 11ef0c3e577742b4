"""The log formatter escapes control characters whoever logged the message."""

from __future__ import annotations

import logging
import sys

from engram_memory._internal.log_lines import EscapingFormatter, escape_controls


def test_controls_are_escaped_and_printable_text_is_kept() -> None:
    hostile = "evil\x9b2J\x1b[31m\nforged\u202eok é \\x9b"
    escaped = escape_controls(hostile)
    assert escaped == "evil\\x9b2J\\x1b[31m\\x0aforged\\u202eok é \\x9b"
    assert escaped.isprintable()
    assert escape_controls("plain line: été") == "plain line: été"


def test_the_formatter_escapes_the_message_and_keeps_a_tracebacks_lines() -> None:
    formatter = EscapingFormatter("%(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord("mcp", logging.WARNING, __file__, 1, "Host: %s", ("a\x1bb",), None)
    assert formatter.format(record) == "WARNING mcp: Host: a\\x1bb"
    try:
        raise ValueError("x")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert "\nTraceback" in formatter.format(record)
