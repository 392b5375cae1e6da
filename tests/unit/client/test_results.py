"""The typed results the gates read: a rung's verdict, the ladder's findings, a Responses answer,
the smoke outcome. Each is derived once in the core; these pin what the gates and the report
builder get from it."""

from __future__ import annotations

from typing import Any

from pytest_vllmqual.client.results import ChatResult, ResponsesResult
from pytest_vllmqual.errors import ServerGoneError
from pytest_vllmqual.gates.checks import SmokeResult
from pytest_vllmqual.gates.ladder import LadderResult
from pytest_vllmqual.records import Attempt, RungRecord, rung_verdict


def _rung(index: int, **fields: Any) -> RungRecord:
    base: dict[str, Any] = {"target": 1000 * (index + 1), "target_label": f"{index + 1},000"}
    return RungRecord(index=index, **{**base, **fields})


def _completed(index: int, tokens: int) -> RungRecord:
    return _rung(index, target=tokens, prompt_tokens=tokens, calibration_error=0, status_code=200, ok=True,
                 post_probe_smoke="passed", health_after="healthy")


def test_verdict_of_a_record_and_of_its_report_dict_agree() -> None:
    rung = _completed(0, 1000)
    assert rung.verdict == rung_verdict(rung.to_dict())
    assert rung.verdict.completed and not rung.verdict.failed and rung.verdict.kind == "ok"
    assert rung.verdict.smoke is True and rung.verdict.healthy is True


def test_report_flags_win_over_the_text_they_came_from() -> None:
    data = {**_completed(0, 1000).to_dict(), "post_probe_smoke_ok": False, "health_after_ok": False}
    verdict = rung_verdict(data)
    assert verdict.smoke is False and verdict.healthy is False
    assert rung_verdict({"ok": True}).smoke is None and rung_verdict({"ok": True}).healthy is None


def test_verdict_kinds() -> None:
    failed = rung_verdict({"ok": False, "status_code": 400})
    assert failed.failed and not failed.completed and failed.kind == "failed"
    rejected = rung_verdict({"ok": True, "expected_rejection": True, "prompt_tokens": 4097})
    assert rejected.rejected_as_expected and not rejected.completed and rejected.kind == "rejected"
    missed = rung_verdict({"ok": False, "expected_rejection": True})
    assert missed.rejection_rung and not missed.rejected_as_expected and not missed.failed
    no_size = rung_verdict({"ok": True})
    assert not no_size.completed and no_size.kind == "ok"


def test_ladder_problems_name_each_broken_rule() -> None:
    result = LadderResult(rungs=[
        _completed(0, 1000),
        _rung(1, status_code=400, error="HTTP 400", post_probe_smoke="failed: HTTP 500"),
        _completed(2, 3000),
        _rung(3, target=4097, target_label="max_model_len + 1", expected_rejection=True, status_code=200,
              post_probe_smoke="passed"),
    ])
    result.rungs[2].prefix_cache_hits = 16
    assert result.largest_ok is result.rungs[2]
    problems = result.problems(5000)
    assert problems[0].startswith("rung 1 (2,000, target 2,000): ")
    assert problems[1] == "rung 1 (2,000, target 2,000): post-probe smoke failed: HTTP 500"
    assert problems[2] == "rung 2 (3,000, target 3,000): 16 prefix-cache hit tokens despite the nonce"
    assert problems[3].startswith("rung 3 (max_model_len + 1, target 4,097): expected HTTP 400 "
                                  "'This model's maximum context length', got ")
    assert problems[4] == "largest actual prompt 3,000 does not exceed the recipe minimum 5,000"
    assert len(problems) == 5
    assert LadderResult(rungs=[_completed(0, 1000)]).problems(None) == []


def test_ladder_problems_after_the_server_died() -> None:
    killer = _rung(1, killed_server=True, error="server_dead: the server did not survive this rung",
                   post_probe_smoke="not run: the server did not survive this rung")
    result = LadderResult(rungs=[_completed(0, 1000), killer],
                          server_gone=ServerGoneError("gone", status="server_dead"))
    problems = result.problems(None)
    assert problems[0] == ("the server did not survive rung 1 (2,000, target 2,000): server_dead; "
                           "the rungs after it were not sent")
    assert len(problems) == 2  # the killer's own failure; no smoke finding for a rung the server did not survive


def test_responses_result_reads_the_answer() -> None:
    body = {"status": "completed", "usage": {"input_tokens": 12, "output_tokens": 3},
            "output": [{"type": "reasoning", "content": []},
                       {"type": "message", "content": [{"type": "output_text", "text": "cl"},
                                                       {"type": "refusal", "refusal": "x"},
                                                       {"type": "output_text", "text": "oud"}]},
                       {"type": "function_call", "name": "get_weather", "arguments": "{}", "call_id": "c1"}]}
    result = ResponsesResult(Attempt(kind="responses", label="r", ok=True), 200, body, "")
    assert result.status == "completed" and result.output_text == "cloud"
    assert result.output_types == ["reasoning", "message", "function_call"]
    assert [c["call_id"] for c in result.function_calls] == ["c1"]
    assert (result.input_tokens, result.output_tokens) == (12, 3)
    empty = ResponsesResult(Attempt(kind="responses", label="r", ok=False), 500, None, "")
    assert empty.status is None and empty.output == [] and empty.output_text == "" and empty.input_tokens is None
    assert "cloud" not in repr(result)


def _chat(status: int, content: str, finish: str | None) -> ChatResult:
    body = {"choices": [{"message": {"content": content}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    return ChatResult(Attempt(kind="chat", label="smoke", ok=status == 200), status, body, "")


def test_smoke_outcome() -> None:
    assert SmokeResult(_chat(200, "Cloud.", "stop"), 32).outcome == "passed"
    assert SmokeResult(_chat(500, "", None), 32).outcome == "failed: HTTP 500"
    assert SmokeResult(_chat(200, "Cloud", "length"), 32).outcome == "failed: finish_reason 'length', content 'Cloud'"
    assert SmokeResult(_chat(200, "  ", "stop"), 32).outcome == "failed: finish_reason 'stop', content '  '"
    chat = _chat(200, "Cloud.", "stop")
    assert (chat.prompt_tokens, chat.completion_tokens) == (5, 2)


def test_prefix_cache_hits_within_the_chat_template_head_are_not_a_reused_prompt() -> None:
    """A model's default system message is the same in every prompt, whatever the nonce after it: on
    a 16-token KV block it is one cached block (SmolLM2 on an H200: 16 hits at an 8,110-token rung)."""
    hit = _completed(0, 8110)
    hit.prefix_cache_hits = 16
    assert LadderResult(rungs=[hit], template_prefix_tokens=31).problems(None) == []
    beyond = LadderResult(rungs=[hit], template_prefix_tokens=12).problems(None)
    assert beyond == ["rung 0 (1,000, target 8,110): 16 prefix-cache hit tokens despite the nonce, more than "
                      "the 12 tokens of the chat template before the user's text"]
    assert LadderResult(rungs=[hit]).problems(None) == [
        "rung 0 (1,000, target 8,110): 16 prefix-cache hit tokens despite the nonce"]
