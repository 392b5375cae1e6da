"""The server log as text: reading it, ANSI stripping, one line's prefix split, its tail.

Every launcher that keeps a log writes it to one file (``Launcher.log_path``); this module
reads it the one way (``read_log``), cuts its tail for an error record (``log_tail``), and
splits a vLLM log line into its process label, pid, level, source and message
(``split_line``). The startup-failure table, the engine-death reader and the engine-log
parser all read lines through it, so a new line prefix is taught here once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LOG_TAIL_LINES",
    "NUMBER",
    "LogLine",
    "log_tail",
    "read_log",
    "split_line",
    "split_lines",
    "strip_ansi",
]

LOG_TAIL_LINES = 25
"""Non-empty lines an error record keeps of the server log (raw text: private folder only)."""

NUMBER = r"-?\d+(?:\.\d+)?"
"""A number as vLLM's format strings print it ("%.2f", "%d"), for the log patterns."""

# CSI sequences (colours, cursor moves). ≤0.14 colour the process prefix even in files.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")

# "(Worker_TP0 pid=123) " — the label is absent in some Ray lines, which add ", ip=…".
_PREFIX_RE = re.compile(r"^\((?:(?P<label>[^()]*?) )?pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?")
# The same label anywhere before the header: an operator's VLLM_LOGGING_PREFIX, or a log
# collector's timestamp, may come first. The label itself is a process name (no spaces, no
# brackets), so a prefix that merely contains "pid=" is not taken for it.
_LABEL_ANYWHERE_RE = re.compile(r"(?:^|(?<=\s))\((?:(?P<label>[A-Za-z][\w.-]*(?: [A-Z]+\d+(?:_[A-Z]+\d+)*)?) )?"
                                r"pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?")
# "INFO 11-30 01:50:54 [cpu_worker.py:260] message" (no year; some versions add milliseconds
# or a path in the brackets).
_HEADER_SOURCE = (
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? "
    r"\[(?P<source>[^\]]*)\] ?"
)
# The header after any text: VLLM_LOGGING_PREFIX is written before the level.
_HEADER_ANYWHERE_RE = re.compile(r"(?:^|(?<=[\s\]\)]))" + _HEADER_SOURCE)


def read_log(path: Path | None) -> str:
    """The log file so far (raw; sanitize before showing it publicly); '' when there is none yet."""
    if path is None:
        return ""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def log_tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines of a log."""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences; vLLM colours prefixes and levels depending on version."""
    return _ANSI_RE.sub("", text)


@dataclass(frozen=True)
class LogLine:
    """One log line, split: who wrote it (label, pid), at what level, from where, and what."""

    label: str | None
    pid: int | None
    level: str | None
    source: str | None
    message: str


def split_lines(text: str) -> list[LogLine]:
    """Every line of ``text`` (colours removed, ``\\r`` read as a line break), split."""
    return [split_line(raw) for raw in strip_ansi(text).replace("\r", "\n").split("\n")]


def split_line(raw: str) -> LogLine:
    """One line's label, pid, level, source and (stripped) message; text before the label or the
    header (VLLM_LOGGING_PREFIX, a collector's timestamp) is dropped, never read as the message."""
    label: str | None = None
    pid: int | None = None
    body = raw
    header = _HEADER_ANYWHERE_RE.search(body)
    head = body[: header.start()] if header else body
    prefix = _PREFIX_RE.match(body) or _LABEL_ANYWHERE_RE.search(head)
    if prefix is not None and (header is None or prefix.end() <= header.start() + 1):
        label = (prefix.group("label") or "").strip() or None
        pid = int(prefix.group("pid"))
        if header is None:
            body = body[prefix.end():]
    level: str | None = None
    source: str | None = None
    if header is not None:
        level = header.group("level")
        source = header.group("source")
        body = body[header.end():]
    return LogLine(label, pid, level, source, body.strip())
