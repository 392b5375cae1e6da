"""The background load of the floor under load: exactly ``level`` requests in flight while the block
runs, each mark recording how many were, failures counted, and a server gone raised at the end."""

from __future__ import annotations

import threading
import time

import pytest
from support.gatekit import wait_for

from pytest_vllmqual.equivalence.in_flight import InFlight


class Counting:
    def __init__(self, fail_every: int = 0, raise_at: int | None = None) -> None:
        self.now = 0
        self.most = 0
        self.lock = threading.Lock()
        self.fail_every, self.raise_at = fail_every, raise_at

    def __call__(self, index: int) -> bool:
        if self.raise_at is not None and index == self.raise_at:
            raise ConnectionError("gone")
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.005)
        with self.lock:
            self.now -= 1
        return not (self.fail_every and (index + 1) % self.fail_every == 0)


def _until_sending(send: Counting) -> None:
    """Wait until a worker is inside ``send``: on a starved machine (this test once ran beside two real
    servers at a low priority) the block can start before any worker took its next request."""
    wait_for(lambda: send.now >= 1, timeout_s=10.0, interval_s=0.001)


def test_the_level_is_kept_in_flight_and_each_mark_sees_it() -> None:
    send = Counting()
    with InFlight(3, send, ok=bool) as load:
        for _ in range(5):
            _until_sending(send)
            assert load.mark() >= 1
            time.sleep(0.01)
    figures = load.figures.to_dict()
    assert send.most == 3 and figures["in_flight"] == 3 and figures["sends"] == 5
    assert figures["load_requests"] == load.figures.started >= 6 and figures["load_failed"] == 0
    assert figures["in_flight_at_sends_max"] <= 3 and figures["sends_at_full_level"] <= 5
    assert send.now == 0, "every worker has stopped when the block ends"


def test_failed_load_requests_are_counted_not_raised() -> None:
    with InFlight(2, Counting(fail_every=2), ok=bool) as load:
        time.sleep(0.05)
    assert load.figures.failed >= 1 and load.figures.failed <= load.figures.ended


def test_a_server_gone_under_the_load_is_raised_when_the_block_ends() -> None:
    with pytest.raises(ConnectionError, match="gone"):
        with InFlight(2, Counting(raise_at=3)):
            time.sleep(0.05)


def test_a_level_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        InFlight(0, Counting())
