"""TPOT and decode rate, defined once (``client.results.tpot_s``) as vLLM defines them: from the
first output token to the last, not to the end of the stream (the usage chunk and ``[DONE]``)."""

from __future__ import annotations

import json
import types

import pytest

from pytest_vllmqual.client import results
from pytest_vllmqual.client.results import StreamBody, StreamResult, decode_tok_s, tpot_s
from pytest_vllmqual.records import Attempt


def test_tpot_is_the_steps_after_the_first_token_up_to_the_last() -> None:
    assert tpot_s(11, 0.2, 1.2) == pytest.approx(0.1)
    assert decode_tok_s(11, 0.2, 1.2) == pytest.approx(10.0)


@pytest.mark.parametrize("tokens", [1, 0, None])
def test_one_output_token_or_none_has_no_tpot(tokens: int | None) -> None:
    assert tpot_s(tokens, 0.2, 0.2) is None
    assert decode_tok_s(tokens, 0.2, 0.2) is None


@pytest.mark.parametrize(("ttft", "last"), [(None, 1.2), (0.2, None), (None, None)])
def test_a_missing_time_has_no_tpot(ttft: float | None, last: float | None) -> None:
    assert tpot_s(11, ttft, last) is None and decode_tok_s(11, ttft, last) is None


def test_tokens_read_all_at_once_have_no_decode_rate() -> None:
    assert tpot_s(16, 30.0, 30.0) == 0.0
    assert decode_tok_s(16, 30.0, 30.0) is None


def _event(data: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def test_a_streamed_requests_decode_rate_ends_at_its_last_output_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three tokens at 0.2, 0.3 and 1.2 s, then the usage chunk at 1.25 s and [DONE] at 1.3 s (the
    stream's end): decode is 2 steps over 1.0 s, not over the 1.1 s to the end of the stream."""
    clock = iter([0.2, 0.3, 1.2, 1.25])
    monkeypatch.setattr(results, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    result = StreamResult(attempt=Attempt(kind="stream", label="t", ok=True), status_code=200)
    body = StreamBody(result, started=0.0)
    for text in ("a", "b", "c"):
        body.feed(_event({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}))
    body.feed(_event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}))
    body.feed(b"data: [DONE]\n\n")
    result.e2e_s = 1.3
    assert (result.ttft_s, result.last_output_s) == (0.2, 1.2)
    assert result.metrics()["decode_tok_s"] == pytest.approx(2 / 1.0)
