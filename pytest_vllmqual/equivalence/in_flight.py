"""Keep ``level`` requests in flight in the background while other requests are measured.

The floor under load asks the probe and the items again while the load gate's own prompts keep a
level of requests in the server's batch: ``level`` workers each send the next load request as soon
as their own ends (the load gate's closed loop, open-ended), until the measurement is done. It knows
nothing about HTTP: ``send(i)`` is any callable, which lets the tests drive it in-process. A worker
whose request raises (the server is gone) stops taking new ones; the first such error is raised
when the block ends, so a dead server is never taken for a quiet one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = ["InFlight", "InFlightFigures"]


@dataclass
class InFlightFigures:
    """What the background load did: requests started and ended, failures, and how many were in
    flight each time a measured request was sent (``mark``)."""

    level: int
    started: int = 0
    ended: int = 0
    failed: int = 0
    at_marks: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        marks = self.at_marks
        return {"in_flight": self.level, "load_requests": self.ended, "load_failed": self.failed,
                "in_flight_at_sends_min": min(marks) if marks else None,
                "in_flight_at_sends_max": max(marks) if marks else None,
                "sends_at_full_level": sum(1 for m in marks if m >= self.level), "sends": len(marks)}


class InFlight:
    """A context manager: ``level`` workers send ``send(0)``, ``send(1)``, … until the block ends.

    The block starts once every worker's first request has ended (a fresh request meets a server
    already serving the level, as a load level's steady state does, not one still admitting it).

    ``ok(result)`` says whether a request succeeded (a failed one is counted, not raised); ``mark()``
    records how many load requests are in flight at that moment (call it before each measured request)."""

    def __init__(self, level: int, send: Callable[[int], Any], ok: Callable[[Any], bool] = lambda _r: True) -> None:
        if level < 1:
            raise ValueError(f"a load level keeps at least 1 request in flight, got {level}")
        self.figures = InFlightFigures(level)
        self._send, self._ok = send, ok
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._now = 0
        self._error: BaseException | None = None
        self._threads = [threading.Thread(target=self._worker, name=f"floor-load-{level}-{n}", daemon=True)
                         for n in range(level)]
        self._steady = threading.Barrier(level + 1)

    def _take(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or self._error is not None:
                return None
            index, self._next = self._next, self._next + 1
            self._now += 1
            self.figures.started += 1
            return index

    def _worker(self) -> None:
        first = True
        while (index := self._take()) is not None:
            try:
                result = self._send(index)
            except BaseException as exc:  # the server is gone: stop taking requests, raise at the end
                with self._lock:
                    self._error = self._error or exc
                    self._now -= 1
                self._steady.abort()
                return
            with self._lock:
                self._now -= 1
                self.figures.ended += 1
                self.figures.failed += 0 if self._ok(result) else 1
            if first:
                first = False
                try:
                    self._steady.wait()
                except threading.BrokenBarrierError:
                    return

    def mark(self) -> int:
        """How many load requests are in flight now; recorded."""
        with self._lock:
            self.figures.at_marks.append(self._now)
            return self._now

    def __enter__(self) -> InFlight:
        for thread in self._threads:
            thread.start()
        try:
            self._steady.wait()  # every worker's first request has ended: the level is in its steady state
        except threading.BrokenBarrierError:
            self.__exit__(None, None, None)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self._error is not None and kind is None:
            raise self._error
