"""The wall clock as reports and file names write it: UTC, to the second, one format each.

A report says when a run started and finished (``2026-08-10T14:03:22Z``); a folder or a run id
carries the same instant without colons (``20260810T140322Z``), so it sorts by time and is a
valid file name everywhere.
"""

from __future__ import annotations

import time
from datetime import datetime

__all__ = ["parse_utc", "utc_now", "utc_stamp"]

_TEXT = "%Y-%m-%dT%H:%M:%SZ"
_STAMP = "%Y%m%dT%H%M%SZ"


def utc_now(at: float | None = None) -> str:
    """Now (or the instant ``at``, in seconds since the epoch) as a report writes it."""
    return time.strftime(_TEXT, time.gmtime(time.time() if at is None else at))


def utc_stamp(at: float | None = None) -> str:
    """Now (or the instant ``at``) for a file or run name: no colons, sorts by time."""
    return time.strftime(_STAMP, time.gmtime(time.time() if at is None else at))


def parse_utc(text: object) -> datetime | None:
    """A time a report wrote (``...Z`` or with an offset) as an aware datetime; None when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
