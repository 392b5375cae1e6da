"""Why a running engine died, in the harness's own words.

A GPU engine that dies mid-request leaves its cause spread over several processes' lines: a
worker's device-side assert, then the NCCL watchdog's abort, then the API server's
``EngineDeadError``. The API server's own tail shows only the last step. This module reads every
process's lines of the log and names each step it recognises, in the order they first appear,
with the numbers re-rendered (never the raw line, which may carry host details).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .server_log import strip_ansi

__all__ = ["ENGINE_DEAD", "EngineDeath", "classify_engine_death"]


def _bound(match: re.Match[str]) -> str:
    return f"a device-side assert in a GPU kernel (index out of bounds: bound {int(match.group('bound')):,})"


ENGINE_DEAD = re.compile(r"EngineDead(?:Error)?|EngineCore encountered(?: a fatal error| an issue)?")
"""The engine core is dead: the API server's ``EngineDeadError``, in its log or in the body of a
500 it answers with."""

#: (kind, pattern, words) in no particular order: the log decides the order of the steps.
_STEPS: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    ("device_assert", re.compile(r"index out of bounds: 0 <= \S+ < (?P<bound>\d+)"), _bound),
    ("device_assert", re.compile(r"device-side assert triggered"),
     lambda m: "a device-side assert in a GPU kernel"),
    ("illegal_memory_access", re.compile(r"an illegal memory access was encountered"),
     lambda m: "an illegal memory access on the GPU"),
    ("out_of_memory", re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError"),
     lambda m: "the GPU ran out of memory"),
    ("nccl_abort", re.compile(r"ProcessGroupNCCL|NCCL watchdog|Watchdog caught collective operation timeout"
                              r"|ncclInternalError|NCCL error"),
     lambda m: "the NCCL watchdog aborted the process group"),
    ("worker_died", re.compile(r"Worker proc \S+ died unexpectedly|WorkerProc hit an exception"
                               r"|[Ww]orker process(?:es)? (?:died|exited)"),
     lambda m: "a worker process died"),
    ("engine_dead", ENGINE_DEAD,
     lambda m: "the engine core died (EngineDeadError)"),
)


@dataclass(frozen=True)
class EngineDeath:
    """The recognised steps of an engine death, first cause first."""

    kinds: tuple[str, ...]
    steps: tuple[str, ...]

    @property
    def root_cause(self) -> str:
        """The kind of the first recognised step."""
        return self.kinds[0]

    def describe(self) -> str:
        return ", then ".join(self.steps)

    def to_dict(self) -> dict[str, object]:
        return {"root_cause": self.root_cause, "kinds": list(self.kinds), "steps": list(self.steps),
                "description": self.describe()}


def classify_engine_death(log_text: str, *, since: int = 0) -> EngineDeath | None:
    """The steps of an engine death found in ``log_text[since:]`` (every process's lines), or None.

    Each kind is named once, at its first appearance; the device assert's bound is kept when any
    of its lines states one.
    """
    text = strip_ansi(log_text[since:])
    found: dict[str, tuple[int, str]] = {}
    for kind, pattern, words in _STEPS:
        match = pattern.search(text)
        if match is None:
            continue
        position, description = match.start(), words(match)
        if kind in found:
            # Two patterns of one kind: keep the earliest position and the more specific words.
            earlier = min(found[kind][0], position)
            best = description if "bound" in description else found[kind][1]
            found[kind] = (earlier, best)
        else:
            found[kind] = (position, description)
    if not found:
        return None
    ordered = sorted(found.items(), key=lambda item: item[1][0])
    return EngineDeath(kinds=tuple(k for k, _ in ordered), steps=tuple(v[1] for _, v in ordered))
