"""The load generator's own lag: the process's CPU share over a level and how late the stream reader
thread's short timer fires, and the limits past which the client is said to have fallen behind."""

from __future__ import annotations

import itertools
import time

import pytest

from pytest_vllmqual.client.lag import CPU_SHARE_LIMIT, MIN_WALL_S, OVERSLEEP_P99_LIMIT_S, ClientLag, LagMeter
from pytest_vllmqual.client.stream_transport import LAG_TIMER_PERIOD_S, ReaderTimer


def test_the_cpu_share_is_the_processs_cpu_over_the_levels_wall_time() -> None:
    walls, cpus = itertools.count(0.0, 10.0), iter([1.0, 4.0])
    meter = LagMeter(clock=lambda: next(walls), cpu_clock=lambda: next(cpus))
    meter.start()
    lag = meter.stop()
    assert lag.wall_s == 10.0 and lag.cpu_share == 0.3
    assert LagMeter().stop() == ClientLag(0.0, None, None, 0), "a meter never started measures nothing"


def test_the_reader_timer_fires_only_while_watched_and_records_its_oversleep() -> None:
    timer = ReaderTimer()
    assert timer.timeout(1.0, now=64.0) == 1.0 and timer.due is None
    mark = timer.watch()
    assert timer.timeout(1.0, now=64.0) == pytest.approx(LAG_TIMER_PERIOD_S)
    timer.fired(64.0 + LAG_TIMER_PERIOD_S + 0.25)
    assert timer.since(mark) == [pytest.approx(0.25)]
    timer.unwatch()
    assert timer.timeout(1.0, now=128.0) == 1.0 and timer.due is None


def _seconds_per_item() -> float:
    """The fastest of five timings of a 1,000,000-item sum, per item: one timing preempted (this test
    once ran niced beside two real servers) sized the GIL holds too short to fill the wall time asked."""
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        sum(range(1_000_000))
        timings.append(time.perf_counter() - started)
    return min(timings) / 1_000_000


def test_a_reader_thread_kept_from_the_gil_is_measured_late() -> None:
    """The real reader thread: while another thread of the process holds the GIL for 0.15 s at a time in
    one C call (five times), the reader's 10 ms timer cannot fire."""
    items = int(0.15 / max(_seconds_per_item(), 1e-9))
    meter = LagMeter()
    meter.start()
    for _ in range(5):
        time.sleep(0.05)
        sum(range(items))
    time.sleep(0.1)
    lag = meter.stop()
    assert lag.wall_s >= MIN_WALL_S and lag.reader_timer_samples > 0 and lag.reader_oversleep_p99_s is not None
    assert lag.reader_oversleep_p99_s > OVERSLEEP_P99_LIMIT_S
    assert lag.fell_behind is not None and "stream reader's 10 ms timer fired" in lag.fell_behind


def test_the_limits_and_a_level_too_short_to_say() -> None:
    over = ClientLag(wall_s=5.0, cpu_share=CPU_SHARE_LIMIT + 0.01, reader_oversleep_p99_s=OVERSLEEP_P99_LIMIT_S * 2,
                     reader_timer_samples=400)
    assert over.fell_behind is not None and " and its process used " in over.fell_behind
    under = ClientLag(wall_s=5.0, cpu_share=CPU_SHARE_LIMIT, reader_oversleep_p99_s=OVERSLEEP_P99_LIMIT_S,
                      reader_timer_samples=400)
    assert under.fell_behind is None, "at the limit is not past it"
    short = ClientLag(wall_s=MIN_WALL_S / 2, cpu_share=1.0, reader_oversleep_p99_s=1.0, reader_timer_samples=1)
    assert short.fell_behind is None
    assert over.row() == {"client_cpu_share": round(CPU_SHARE_LIMIT + 0.01, 4),
                          "client_reader_oversleep_p99_s": OVERSLEEP_P99_LIMIT_S * 2, "client_reader_timer_samples": 400,
                          "client_fell_behind": True}
