"""The one clock format: reports and names write UTC to the second, and read it back."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

from pytest_vllmqual.clock import parse_utc, utc_now, utc_stamp

INSTANT = 1786370602.9  # 2026-08-10T14:03:22Z and some fraction


def test_an_instant_is_written_to_the_second_in_utc() -> None:
    assert utc_now(INSTANT) == "2026-08-10T14:03:22Z"
    assert utc_stamp(INSTANT) == "20260810T140322Z"
    assert utc_now(0) == "1970-01-01T00:00:00Z"


def test_now_is_the_current_time_and_reads_back() -> None:
    before = time.time()
    text, stamp = utc_now(), utc_stamp()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text)
    assert re.fullmatch(r"\d{8}T\d{6}Z", stamp)
    parsed = parse_utc(text)
    assert parsed is not None and parsed.tzinfo is not None
    assert before - 1 <= parsed.timestamp() <= time.time()


def test_a_written_time_reads_back_aware_and_anything_else_is_none() -> None:
    assert parse_utc("2026-08-10T14:03:22Z") == datetime(2026, 8, 10, 14, 3, 22, tzinfo=timezone.utc)
    assert parse_utc("2026-08-10T16:03:22+02:00") == parse_utc("2026-08-10T14:03:22Z")
    for text in (None, "", "yesterday", 1786370602):
        assert parse_utc(text) is None
