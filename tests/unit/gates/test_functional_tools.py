"""The typed-tools gate: a failed case says the schema path and the kind of value, keeps its
answer by SHA-256 in the private folder, ``gates.tools.repeat`` asks each case N times and
``gates.tools.in_flight`` asks that many cases at once, their results in the fixtures' order.

Answers are replayed through httpx.MockTransport (a real model cannot be made to break a
schema on demand); the recorder writes the private artifacts as in a run."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_vllmqual import (
    GateRecord,
    GateRecorder,
    QualClient,
    Recipe,
    ServerHandle,
    tools_gate,
)
from pytest_vllmqual.gates.checks import ToolCase

EVENT = ToolCase(
    name="create_event", description="Create a calendar event.", prompt="Book the standup.",
    parameters={"type": "object", "required": ["title", "start"], "additionalProperties": False, "properties": {
        "title": {"type": "string"},
        "start": {"type": "object", "required": ["date", "time"],
                  "properties": {"date": {"type": "string"}, "time": {"type": "string"}}}}},
    expected={"title": "Standup", "start": {"date": "2026-01-05", "time": "09:00"}},
)
WEATHER = ToolCase(
    name="get_weather", description="Weather.", prompt="Weather in Lima?",
    parameters={"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
    expected={"city": "Lima"},
)
GOOD = {"create_event": EVENT.expected, "get_weather": WEATHER.expected}
NO_TIME = {"title": "Standup", "start": {"date": "2026-01-05"}}


@pytest.fixture
def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::tools", gate="tools", title="tools"), tmp_path)


def with_tools(recipe: Recipe, **settings: Any) -> Recipe:
    """The recipe's tools settings with these; one case at a time unless a test asks for more (the
    scripted answers come in turn, and the attempts are then recorded in the cases' order)."""
    return dataclasses.replace(recipe, gates={**recipe.gates, "tools": {**recipe.gate("tools"), "in_flight": 1,
                                                                          **settings}})


def scripted(answers: dict[str, list[dict[str, Any]]]) -> tuple[QualClient, dict[str, int]]:
    """Each tool's answers in turn (the last one repeats); the request's prompt picks the tool."""
    asked: dict[str, int] = {}
    by_prompt = {EVENT.prompt: "create_event", WEATHER.prompt: "get_weather"}

    def handler(request: httpx.Request) -> httpx.Response:
        name = by_prompt[json.loads(request.content)["messages"][-1]["content"]]
        turn = asked[name] = asked.get(name, 0) + 1
        arguments = answers.get(name, [GOOD[name]])
        call = {"id": f"call-{turn}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments[min(turn, len(arguments)) - 1])}}
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}})

    return _client(handler), asked


def _client(handler: Any) -> QualClient:
    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                      timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    return qual


def test_every_case_passing_once_is_todays_gate(tiny: Recipe, recorder: GateRecorder) -> None:
    client, asked = scripted({})
    client.sink = recorder
    verdict = tools_gate(client, with_tools(tiny, value_checks=False), recorder, [EVENT, WEATHER])
    assert verdict.passed, verdict.failure
    assert asked == {"create_event": 1, "get_weather": 1}
    record = recorder.record
    assert record.summary == "2/2" and record.thresholds == {"required": "2/2"}
    assert record.measurements["failed_cases"] == [] and record.measurements["repeat"] == 1
    assert [a.label for a in record.attempts] == ["tool-create_event", "tool-get_weather"]


def test_a_failed_case_says_the_path_and_the_kind_and_keeps_its_answer(tiny: Recipe, recorder: GateRecorder,
                                                                      tmp_path: Path) -> None:
    client, _ = scripted({"create_event": [NO_TIME]})
    client.sink = recorder
    verdict = tools_gate(client, with_tools(tiny, value_checks=False), recorder, [EVENT, WEATHER])
    assert verdict.failure == ("typed tools 1/2 (tool_choice=auto): create_event: arguments of create_event "
                               "violate the schema: missing required key 'start.time'")
    (case,) = recorder.record.measurements["failed_cases"]
    assert {k: case[k] for k in ("tool", "passed", "runs", "paths", "kinds")} == {
        "tool": "create_event", "passed": 0, "runs": 1, "paths": ["start.time"], "kinds": ["missing"]}
    kept = tmp_path / case["response_artifact"]
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == case["response_sha256"]
    assert "2026-01-05" in kept.read_text(), "the whole answer stays in the private folder"
    attempt = recorder.record.attempts[0]
    assert case["request_sha256"] == attempt.request_sha256 and attempt.label == "tool-create_event"


def test_repeat_asks_each_case_n_times_and_says_k_of_n(tiny: Recipe, recorder: GateRecorder) -> None:
    """A case that fails once in three runs fails the gate: pass means every case, every time."""
    client, asked = scripted({"create_event": [EVENT.expected, NO_TIME, EVENT.expected]})
    client.sink = recorder
    verdict = tools_gate(client, with_tools(tiny, repeat=3, value_checks=False), recorder, [EVENT, WEATHER])
    assert asked == {"create_event": 3, "get_weather": 3}
    assert verdict.failure == ("typed tools 1/2 (tool_choice=auto, 3 runs each): create_event 2/3: arguments of "
                               "create_event violate the schema: missing required key 'start.time'")
    measurements = recorder.record.measurements
    assert (measurements["passed"], measurements["total"], measurements["passed_runs"], measurements["total_runs"]) \
        == (1, 2, 5, 6)
    (case,) = measurements["failed_cases"]
    assert (case["passed"], case["runs"]) == (2, 3)
    assert case["response_sha256"] == recorder.record.attempts[1].response_sha256, "the failed run's answer"
    assert [a.label for a in recorder.record.attempts][:3] == [
        "tool-create_event-run1", "tool-create_event-run2", "tool-create_event-run3"]
    assert recorder.record.summary == "1/2 (3 runs each)"
    assert recorder.record.thresholds == {"required": "2/2, each 3/3"}


def test_repeat_passes_when_every_run_passes(tiny: Recipe, recorder: GateRecorder) -> None:
    client, asked = scripted({})
    verdict = tools_gate(client, with_tools(tiny, repeat=2, value_checks=True), recorder, [EVENT, WEATHER])
    assert verdict.passed, verdict.failure
    assert asked == {"create_event": 2, "get_weather": 2} and recorder.record.measurements["passed_runs"] == 4


def test_the_same_problem_in_several_runs_is_said_once(tiny: Recipe, recorder: GateRecorder) -> None:
    client, _ = scripted({"create_event": [NO_TIME]})
    verdict = tools_gate(client, with_tools(tiny, repeat=2, value_checks=False), recorder, [EVENT])
    assert verdict.failure is not None and verdict.failure.count("start.time") == 1
    assert "create_event 0/2" in verdict.failure


def test_an_http_error_is_a_failed_run_with_its_kind(tiny: Recipe, recorder: GateRecorder) -> None:
    client = _client(lambda request: httpx.Response(500, json={"error": {"message": "engine overloaded"}}))
    verdict = tools_gate(client, with_tools(tiny, value_checks=False), recorder, [WEATHER])
    (case,) = recorder.record.measurements["failed_cases"]
    assert case["kinds"] == ["HTTP 500"] and case["paths"] == [""]
    assert verdict.failure is not None and verdict.failure.startswith("typed tools 0/1 (tool_choice=auto): get_weather: ")


def test_failed_cases_and_sdk_findings_fit_the_report_schema(tiny: Recipe, recorder: GateRecorder,
                                                             tmp_path: Path) -> None:
    """The new gate details travel as measurements: the public report keeps them and validates."""
    from support.report_samples import blank_sanitizer, reference_control_run

    from pytest_vllmqual.client.sdk_findings import SdkFinding
    from pytest_vllmqual.report.decision import with_decision
    from pytest_vllmqual.report.public import build_public_report, validate_report

    client, _ = scripted({"create_event": [EVENT.expected, NO_TIME]})
    client.sink = recorder
    tools_gate(client, with_tools(tiny, repeat=2, value_checks=False), recorder, [EVENT, WEATHER])
    finding = SdkFinding(call="responses", model="Response", path="usage.input_tokens_details.cache_write_tokens",
                         needs="a value", sent="missing", sdk_version="2.54.0")
    sdk = GateRecord(nodeid="suites/test_openai_sdk.py::test_openai_sdk", gate="openai_sdk", outcome="passed",
                     measurements={"strict_findings": 1, "findings": [finding.to_dict()]})
    run = reference_control_run(tmp_path / "private")
    run.gates += [recorder.record, sdk]
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    validate_report(report)
    gates = {g["gate"]: g for g in report["gates"]}
    (case,) = gates["tools"]["measurements"]["failed_cases"]
    assert (case["tool"], case["passed"], case["runs"], case["paths"], case["kinds"]) == (
        "create_event", 1, 2, ["start.time"], ["missing"])
    assert gates["openai_sdk"]["measurements"]["findings"][0]["path"] == "usage.input_tokens_details.cache_write_tokens"
    assert "strict validation noted 1 deviation(s)" in gates["openai_sdk"]["proves"]


def test_cases_asked_four_at_a_time_keep_the_fixtures_order(tiny: Recipe, recorder: GateRecorder) -> None:
    """``in_flight: 4``: never more than four chats at once, and the per-case results in the fixtures'
    order whatever order the answers came back in (here each later case answers sooner)."""
    names = [f"tool_{n:02d}" for n in range(12)]
    fixtures = [dataclasses.replace(WEATHER, name=name, prompt=f"Weather {name}?") for name in names]
    lock, now, most = threading.Lock(), [0], [0]

    def later_answers_sooner(request: httpx.Request) -> httpx.Response:
        name = json.loads(request.content)["messages"][-1]["content"].split()[1].rstrip("?")
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.01 * (len(names) - names.index(name)))
        with lock:
            now[0] -= 1
        arguments = {"city": "Lima"} if name != "tool_05" else {}
        call = {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}})

    client = _client(later_answers_sooner)
    client.sink = recorder
    verdict = tools_gate(client, with_tools(tiny, value_checks=False, in_flight=4), recorder, fixtures)
    measurements = recorder.record.measurements
    assert list(measurements["items"]) == names and [n for n, ok in measurements["items"].items() if not ok] == ["tool_05"]
    assert verdict.failure is not None and verdict.failure.startswith("typed tools 11/12 (tool_choice=auto): tool_05: ")
    assert 1 < most[0] <= 4 and measurements["in_flight"] == 4
    assert sorted(a.label for a in recorder.record.attempts) == sorted(f"tool-{name}" for name in names)


def test_a_recipe_without_in_flight_asks_each_case_alone(tiny: Recipe) -> None:
    from pytest_vllmqual.gates.functional import tools_in_flight

    settings = {k: v for k, v in tiny.gate("tools").items() if k != "in_flight"}
    assert tools_in_flight(dataclasses.replace(tiny, gates={**tiny.gates, "tools": settings})) == 1
    assert tools_in_flight(tiny) == 4, "tiny-cpu asks four at once (its floor under load gate says why it may)"
