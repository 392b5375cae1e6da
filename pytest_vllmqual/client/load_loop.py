"""A closed loop: exactly ``level`` requests in flight, a new one starting as each one ends.

This is how a load level is *sustained* (what ``vllm bench serve --max-concurrency`` does with
every request queued at once): ``level`` workers each take the next request as soon as their
own ends, so until the queue runs dry the server always has ``level`` requests in flight. One
uncounted warm-up request goes first, alone, so a fresh server's first slow request does not
land in a level's percentiles. Nothing is retried: a failed request is a result like any other.

The loop knows nothing about HTTP: ``send(i)`` is any callable, which is what lets the tests
drive it with in-process functions and a controlled clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["LoopRequest", "LoopRun", "run_closed_loop"]

T = TypeVar("T")


@dataclass
class LoopRequest(Generic[T]):
    """One counted request: its index, when it started and ended (seconds from the level's start)."""

    index: int
    started_s: float
    ended_s: float
    in_flight_at_start: int
    result: T


@dataclass
class LoopRun(Generic[T]):
    """A level's requests in the order they ended, and the loop's own evidence."""

    level: int
    requests: list[LoopRequest[T]] = field(default_factory=list)
    warmup: T | None = None
    wall_s: float = 0.0
    max_in_flight: int = 0

    @property
    def sustained_starts(self) -> int:
        """Requests that started with the full level in flight (every start but the last level - 1)."""
        return sum(1 for r in self.requests if r.in_flight_at_start == self.level)


class _Slots:
    """The shared queue position and the in-flight count, under one lock."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.next_index = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.stopped: BaseException | None = None
        self.lock = threading.Lock()

    def take(self) -> tuple[int, int] | None:
        """The next request to send and the in-flight count it starts at, or None when done."""
        with self.lock:
            if self.stopped is not None or self.next_index >= self.count:
                return None
            index = self.next_index
            self.next_index += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return index, self.in_flight

    def release(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def stop(self, error: BaseException) -> None:
        with self.lock:
            if self.stopped is None:
                self.stopped = error


def run_closed_loop(level: int, count: int, send: Callable[[int], T], *,
                    warmup: Callable[[], T] | None = None,
                    on_done: Callable[[LoopRequest[T]], None] | None = None,
                    clock: Callable[[], float] = time.perf_counter) -> LoopRun[T]:
    """Send ``count`` requests, ``level`` at a time, each worker starting the next as its own ends.

    An exception from ``send`` (the server is gone) stops every worker from taking another
    request; the ones in flight finish, then the first exception is raised.
    """
    if level < 1 or count < 1:
        raise ValueError(f"a closed loop needs level >= 1 and count >= 1, got level {level}, count {count}")
    run: LoopRun[T] = LoopRun(level=level)
    if warmup is not None:
        run.warmup = warmup()
    slots = _Slots(count)
    done_lock = threading.Lock()
    start = clock()

    def worker() -> None:
        while (taken := slots.take()) is not None:
            index, in_flight = taken
            began = clock() - start
            try:
                result = send(index)
            except BaseException as exc:  # the server is gone: no new request starts
                slots.stop(exc)
                return
            finally:
                slots.release()
            request = LoopRequest(index, began, clock() - start, in_flight, result)
            with done_lock:
                run.requests.append(request)
            if on_done is not None:
                on_done(request)

    threads = [threading.Thread(target=worker, name=f"load-{level}-{n}", daemon=True) for n in range(min(level, count))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.wall_s = clock() - start
    run.max_in_flight = slots.max_in_flight
    if slots.stopped is not None:
        raise slots.stopped
    return run
