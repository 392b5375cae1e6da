"""The load generator's own lag over one load level: whether the client could keep up.

The client takes each streamed chunk's time when it reads it, so a client that falls behind
adds its own delay to every TTFT and E2E it reports (never subtracts: lag only makes a request
look slower). Two figures per level say whether it fell behind:

- ``cpu_share``: the process's CPU seconds (every thread, user and system) over the level's
  wall seconds. A Python client near one whole core is busy all the time and reads late.
- ``reader_oversleep_p99_s``: the 99th percentile of how late a 10 ms timer fired in the
  stream reader's thread (``stream_transport.ReaderTimer``), which also times every chunk:
  the delay a chunk waits before it is read and timed.

``CPU_SHARE_LIMIT`` and ``OVERSLEEP_P99_LIMIT_S`` are the figures past which the client is said
to have fallen behind, over a level of at least ``MIN_WALL_S``; how they were measured is in
docs/PERFORMANCE.md ("The load generator's own lag").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .results import percentile
from .stream_transport import LAG_TIMER_PERIOD_S, ReaderTimer, watch_reader_lag

__all__ = ["CPU_SHARE_LIMIT", "MIN_WALL_S", "OVERSLEEP_P99_LIMIT_S", "ClientLag", "LagMeter"]

#: The client's process CPU over the level's wall time (1.0 = one core) past which it fell behind.
CPU_SHARE_LIMIT = 0.9
#: The stream reader's timer oversleep, p99, past which it fell behind.
OVERSLEEP_P99_LIMIT_S = 0.05
#: A level shorter than this says nothing about lag: a CPU share over a few ms, or a p99 of one
#: or two firings, is one scheduling decision, not a load generator that cannot keep up.
MIN_WALL_S = 0.5


@dataclass(frozen=True)
class ClientLag:
    """The client's lag over one level (None where a figure could not be taken)."""

    wall_s: float
    cpu_share: float | None
    reader_oversleep_p99_s: float | None
    reader_timer_samples: int

    @property
    def fell_behind(self) -> str | None:
        """Why the client fell behind over the level, or None where neither figure passed its limit."""
        if self.wall_s < MIN_WALL_S:
            return None
        reasons = []
        if self.reader_oversleep_p99_s is not None and self.reader_oversleep_p99_s > OVERSLEEP_P99_LIMIT_S:
            reasons.append(f"its stream reader's {LAG_TIMER_PERIOD_S * 1000:g} ms timer fired "
                           f"{self.reader_oversleep_p99_s * 1000:.0f} ms late at p99 "
                           f"(limit {OVERSLEEP_P99_LIMIT_S * 1000:g} ms)")
        if self.cpu_share is not None and self.cpu_share > CPU_SHARE_LIMIT:
            reasons.append(f"its process used {self.cpu_share:.0%} of a core over the level "
                           f"(limit {CPU_SHARE_LIMIT:.0%})")
        return "the load generator fell behind: " + " and ".join(reasons) if reasons else None

    def row(self) -> dict[str, Any]:
        """The level row's fields."""
        return {"client_cpu_share": None if self.cpu_share is None else round(self.cpu_share, 4),
                "client_reader_oversleep_p99_s": (None if self.reader_oversleep_p99_s is None
                                                  else round(self.reader_oversleep_p99_s, 6)),
                "client_reader_timer_samples": self.reader_timer_samples,
                "client_fell_behind": self.fell_behind is not None}


class LagMeter:
    """Measures the client's lag from ``start`` to ``stop`` (one level's counted requests)."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self._clock, self._cpu_clock = clock, cpu_clock
        self._started: tuple[float, float] | None = None
        self._watch: tuple[ReaderTimer, int] | None = None

    def start(self) -> None:
        self._watch = watch_reader_lag()
        self._started = (self._clock(), self._cpu_clock())

    def stop(self) -> ClientLag:
        """The lag since ``start`` (a meter never started measures nothing)."""
        if self._started is None:
            return ClientLag(0.0, None, None, 0)
        wall, cpu = self._clock() - self._started[0], self._cpu_clock() - self._started[1]
        late: list[float] = []
        if self._watch is not None:
            timer, mark = self._watch
            late = timer.since(mark)
            timer.unwatch()
        self._started = self._watch = None
        return ClientLag(wall, cpu / wall if wall > 0 else None, percentile(late, 99), len(late))
