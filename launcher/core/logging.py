"""One logging setup for the CLI and the server process.

Log lines carry what clients send (URL paths, model names, header values, error messages quoting
them). A client could otherwise write a line break into the log and forge a line of its own that
reads like the server's, so every line is escaped where it is written (`EscapeControlCharacters`,
on the handler `setup` installs): control characters and Unicode line breaks become `\\n`, `\\x85`,
`\\u2028` and the like. No call site has to remember it.
"""

from __future__ import annotations

import logging
import re
import sys

# C0 controls except tab, DEL, C1 controls (U+0085 NEL among them), and the Unicode line and
# paragraph separators: everything some reader of the log may take for the end of a line.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    """`text` on one line: control characters and Unicode line breaks written as escapes."""
    return _CONTROL.sub(_escaped, text)


class EscapeControlCharacters(logging.Filter):
    """Escapes the formatted message of every record it sees (tracebacks, our own, stay as they are)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        escaped = escape_control(message)
        if escaped != message:
            record.msg, record.args = escaped, None
        return True


def setup(level: str = "INFO") -> None:
    """Log to stderr with timestamps, one line per record; stdout stays free for machine-readable lines."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(EscapeControlCharacters())
