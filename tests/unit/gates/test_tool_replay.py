"""The tool-call replay as a gate, against a stand-in server: the per-case judge (exactly one call,
the expected name, arguments valid against the schema and equal to the expected ones), what the
sidecar block and the record keep (outcomes, calls without the model's text, the bank, the useful
range), a declared recipe that does not run it, and a request the server did not answer."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from support.recipes import RECIPES, tiny

from pytest_vllmqual import GateRecord, GateRecorder, QualClient, ServerHandle
from pytest_vllmqual.equivalence.sidecar import BLOCKS_DIR
from pytest_vllmqual.gates.checks import shipped_tool_fixtures
from pytest_vllmqual.gates.tool_replay import judge_call, replay_bank, tool_replay_gate
from pytest_vllmqual.recipe.loader import load_recipe

FIXTURES = shipped_tool_fixtures()
WEATHER = FIXTURES[0]


def call(name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": text}}


def test_a_call_with_the_right_name_and_arguments_is_correct() -> None:
    judged = judge_call("x", [call("get_weather", {"unit": "celsius", "city": "Lima"})], WEATHER, "tool_calls", 20)
    assert judged.outcome.correct and judged.outcome.parsed and not judged.outcome.hit_max_tokens
    assert judged.outcome.family == "tool_replay" and judged.outcome.item_id == "x"
    assert judged.call["arguments_sha256"] == judged.call["expected_sha256"]
    assert judged.call["name"] == "get_weather" and judged.call["problems"] == []


def test_valid_arguments_with_other_values_are_wrong() -> None:
    judged = judge_call("x", [call("get_weather", {"city": "Oslo", "unit": "celsius"})], WEATHER, "tool_calls")
    assert not judged.outcome.correct and judged.outcome.parsed
    assert judged.call["problems"] == [{"path": "arguments", "kind": "other values than expected"}]
    assert judged.call["arguments_sha256"] != judged.call["expected_sha256"]


def test_arguments_that_break_the_schema_are_wrong_and_said_by_path() -> None:
    judged = judge_call("x", [call("get_weather", {"city": "Lima", "unit": "kelvin"})], WEATHER, "tool_calls")
    assert not judged.outcome.correct
    assert [p["path"] for p in judged.call["problems"]] == ["unit"]


def test_another_tool_two_calls_no_call_and_bad_json() -> None:
    other = judge_call("x", [call("set_alarm", {"hour": 7, "minute": 0})], WEATHER, "tool_calls")
    assert not other.outcome.correct and other.call["name"] == "(another tool)"
    twice = [call("get_weather", WEATHER.expected)] * 2
    assert not judge_call("x", twice, WEATHER, "tool_calls").outcome.correct
    none = judge_call("x", [], WEATHER, "stop")
    assert not none.outcome.correct and not none.outcome.parsed and none.call["name"] is None
    cut = judge_call("x", [call("get_weather", '{"city": "Li')], WEATHER, "length")
    assert not cut.outcome.correct and not cut.outcome.parsed and cut.outcome.hit_max_tokens


def test_the_sidecar_keeps_no_model_text() -> None:
    judged = judge_call("x", [call("get_weather", {"city": "Secretville", "unit": "celsius"})], WEATHER, "tool_calls")
    assert "Secretville" not in json.dumps(judged.call)


def client(answer: Any, seen: list[dict[str, Any]]) -> QualClient:
    """A stand-in server: /tokenize gives one token per message, chat answers with ``answer(body)``."""
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": list(range(len(body["messages"]) + len(body["tools"]))),
                                             "count": 1})
        return answer(body)

    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external",
                                   direct_only=True), timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handle))
    return qual


def small_lists_only(body: dict[str, Any]) -> httpx.Response:
    """Right when one or two tools are offered, no call otherwise."""
    prompt = body["messages"][-1]["content"]
    fixture = next(f for f in FIXTURES if f.prompt == prompt)
    calls = [call(fixture.name, fixture.expected)] if len(body["tools"]) <= 2 else []
    message = {"role": "assistant", "content": None if calls else "no", "tool_calls": calls}
    return httpx.Response(200, json={"choices": [{"index": 0, "message": message,
                                                   "finish_reason": "tool_calls" if calls else "stop"}],
                                     "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}})


def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::tool_replay", gate="tool_replay", title="Tool-call replay"), tmp_path)


def with_replay(settings: dict[str, Any]) -> Any:
    recipe = tiny()
    return dataclasses.replace(recipe, gates={**recipe.gates, "tool_replay": settings})


def test_the_gate_writes_the_sidecar_block_and_the_record(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    recipe = with_replay({"count": 40})
    gate = recorder(tmp_path)
    verdict = tool_replay_gate(client(small_lists_only, seen), recipe, gate, FIXTURES)
    assert verdict.passed, verdict.failure
    bank = replay_bank(recipe, FIXTURES)
    chats = [body for body in seen if "max_tokens" in body]
    assert [{k: v for k, v in body.items() if k != "model"} for body in chats] == bank.requests()
    block = json.loads((tmp_path / BLOCKS_DIR / "tool_replay.json").read_text())
    expected = [len(case.tools) <= 2 for case in bank.cases]
    assert [o["correct"] for o in block["outcomes"]] == expected
    assert {o["family"] for o in block["outcomes"]} == {"tool_replay"}
    assert block["bank"]["sha256"] == bank.sha256 and block["bank"]["count"] == 40
    assert block["bank"]["tool_choice"] == "auto" and block["bank"]["max_tokens"] == 128  # gates.tools.max_tokens
    assert len(block["bank"]["chat_template_sha256"]) == 64
    assert block["correct"] == sum(expected) and block["count"] == 40
    assert block["not_parsed"] == 40 - sum(expected) and block["hit_max_tokens"] == 0
    assert len(block["calls"]) == 40 and block["calls"][0]["item_id"] == bank.cases[0].case_id
    measured = gate.record.measurements
    assert measured["correct"] == sum(expected) and measured["bank_sha256"] == bank.sha256
    assert sum(n for _, n in measured["by_shape"].values()) == 40
    assert measured["informative"] is block["informative"]
    assert gate.record.summary.startswith(f"{sum(expected)}/40 cases correct")


def test_a_replay_every_case_of_which_is_right_says_it_is_not_informative(tmp_path: Path) -> None:
    def always(body: dict[str, Any]) -> httpx.Response:
        return small_lists_only({**body, "tools": body["tools"][:1]})

    gate = recorder(tmp_path)
    verdict = tool_replay_gate(client(always, []), with_replay({"count": 20}), gate, FIXTURES)
    assert verdict.passed
    block = json.loads((tmp_path / BLOCKS_DIR / "tool_replay.json").read_text())
    assert block["accuracy"] == 1.0 and block["informative"] is False
    assert "outside the useful range 20.0%-80.0%" in block["informative_reason"]
    assert "cannot tell arms apart" in gate.record.summary


def test_a_request_the_server_did_not_answer_fails_the_gate_and_writes_no_block(tmp_path: Path) -> None:
    def broken(body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "boom"}})

    gate = recorder(tmp_path)
    verdict = tool_replay_gate(client(broken, []), with_replay({"count": 5}), gate, FIXTURES)
    assert verdict.failure is not None and "tool-call replay case" in verdict.failure
    assert gate.record.measurements["answered"] == 0
    assert not (tmp_path / BLOCKS_DIR / "tool_replay.json").exists()


def test_a_recipe_that_declares_it_not_applicable_sends_nothing(tmp_path: Path) -> None:
    def nothing(body: dict[str, Any]) -> httpx.Response:
        raise AssertionError("no request may be sent")

    recipe = load_recipe(RECIPES / "smollm2-cpu.yaml")
    gate = recorder(tmp_path)
    verdict = tool_replay_gate(client(nothing, []), recipe, gate, FIXTURES)
    assert verdict.skip_reason is not None and "not applicable to recipe smollm2-cpu" in verdict.skip_reason
    assert gate.record.measurements["measured_outcome"] == "skipped"
    assert not (tmp_path / BLOCKS_DIR).exists()


def test_without_typed_tools_it_is_not_measured(tmp_path: Path) -> None:
    verdict = tool_replay_gate(client(small_lists_only, []), tiny(), recorder(tmp_path), [])
    assert verdict.skip_reason is not None and verdict.skip_reason.startswith("not measured:")


def test_cases_sent_four_at_a_time_come_back_in_the_bank_s_order(tmp_path: Path) -> None:
    """``in_flight: 4``: never more than four chats at once, and the outcomes in the bank's order
    whatever order the answers came back in (here a case offered more than two tools answers later)."""
    lock, now, most = threading.Lock(), [0], [0]

    def slow_then_fast(body: dict[str, Any]) -> httpx.Response:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05 if len(body["tools"]) > 2 else 0.01)
        with lock:
            now[0] -= 1
        return small_lists_only(body)

    recipe = with_replay({"count": 20, "in_flight": 4})
    gate = recorder(tmp_path)
    verdict = tool_replay_gate(client(slow_then_fast, []), recipe, gate, FIXTURES)
    assert verdict.passed, verdict.failure
    bank = replay_bank(recipe, FIXTURES)
    block = json.loads((tmp_path / BLOCKS_DIR / "tool_replay.json").read_text())
    assert [o["item_id"] for o in block["outcomes"]] == [case.case_id for case in bank.cases]
    assert [o["correct"] for o in block["outcomes"]] == [len(case.tools) <= 2 for case in bank.cases]
    assert 1 < most[0] <= 4
    assert block["bank"]["in_flight"] == 4 and gate.record.measurements["in_flight"] == 4


def test_after_a_request_the_server_did_not_answer_no_new_case_is_sent(tmp_path: Path) -> None:
    chats: list[dict[str, Any]] = []
    lock = threading.Lock()

    def third_fails(body: dict[str, Any]) -> httpx.Response:
        with lock:
            chats.append(body)
            arrived = len(chats)
        if arrived == 3:
            return httpx.Response(500, json={"error": {"message": "boom"}})
        time.sleep(0.02)
        return small_lists_only(body)

    gate = recorder(tmp_path)
    verdict = tool_replay_gate(client(third_fails, []), with_replay({"count": 40, "in_flight": 2}), gate, FIXTURES)
    assert verdict.failure is not None and "tool-call replay case" in verdict.failure
    assert len(chats) <= 5  # the failed one, the one beside it, and at most one each worker had taken
    assert gate.record.measurements["answered"] <= 3  # cases before the failed one in the bank's order
    assert not (tmp_path / BLOCKS_DIR / "tool_replay.json").exists()
