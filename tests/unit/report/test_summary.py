"""The terminal summary names each failed, errored or skipped gate once per reason: the cases of a
parametrized gate that share a reason are listed on one line."""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.report.summary import summary_lines


def _gate(nodeid: str, gate: str, outcome: str, reason: str | None) -> dict[str, Any]:
    return {"nodeid": nodeid, "gate": gate, "outcome": outcome, "reason": reason, "status": None}


def _gate_lines(gates: list[dict[str, Any]]) -> list[str]:
    return [line for line in summary_lines({"gates": gates}, None) if line.startswith("  ")]


def test_cases_of_one_gate_with_one_reason_share_a_line() -> None:
    why = "not applicable to recipe tiny-cpu: cannot do arithmetic"
    lines = _gate_lines([
        _gate("suites/test_quality.py::test_quality_intelligence[addition]", "quality_intelligence", "skipped", why),
        _gate("suites/test_quality.py::test_quality_intelligence[subtraction]", "quality_intelligence", "skipped", why),
        _gate("suites/test_smoke.py::test_smoke", "smoke", "passed", None),
    ])
    assert lines == [f"  skipped: quality_intelligence (addition, subtraction) — {why}"]


def test_different_reasons_and_single_cases_keep_their_own_lines() -> None:
    lines = _gate_lines([
        _gate("s.py::test_tools[a]", "tools", "failed", "19/20 calls valid\nmore detail"),
        _gate("s.py::test_tools[b]", "tools", "failed", "18/20 calls valid"),
        _gate("s.py::test_json", "json", "error", None),
    ])
    assert lines == ["  failed: tools — 19/20 calls valid", "  failed: tools — 18/20 calls valid", "  error: json"]


def test_a_decode_the_client_could_not_time_is_not_reported() -> None:
    """Measured on 2 busy cores: the server sent the first token of the 32,440-token rung at 8.997 s,
    the client read it at 9.191 s and the stream's end 0.3 ms later: '48,755 decode tok/s' was the
    client's read loop. The ladder drops the figure and says why; the summary says so too."""
    from pytest_vllmqual.gates.ladder import _settle_decode
    from pytest_vllmqual.records import RungRecord

    late = RungRecord(index=3, target=32440, target_label="0.99", prompt_tokens=32440, completion_tokens=16,
                      ttft_s=9.190706976, e2e_s=9.191014634, decode_tok_s=48755.44, server_ttft_s=8.996742964, ok=True)
    _settle_decode(late)
    assert late.decode_tok_s is None and late.decode_not_measured is not None
    assert "0.194 s after the server sent it" in late.decode_not_measured
    timely = RungRecord(index=2, target=16384, target_label="0.5", prompt_tokens=16384, completion_tokens=16,
                        ttft_s=2.503, e2e_s=2.648, decode_tok_s=103.5, server_ttft_s=2.494, ok=True)
    _settle_decode(timely)
    assert timely.decode_tok_s == 103.5 and timely.decode_not_measured is None
    from pytest_vllmqual.report.public import _rung

    assert _rung(late)["decode_tok_s"] is None, "the public record does not compute it back"
    report = {"gates": [], "ladder": [{**_rung(late), "ok": True}], "ladder_summary": {"largest": _rung(late)}}
    line = next(x for x in summary_lines(report, None) if x.startswith("largest actual prompt"))
    assert line.endswith("decode not measured (the client read the answer late)")
