"""What a passed gate proves, said no stronger than what its check measured in the run: the shipped
gate runs against a replayed answer, and ``proves`` reads the record it wrote (its measurements
and the recipe's settings it recorded as thresholds)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_vllmqual import GateRecord, GateRecorder, Recipe, quality_tools_gate, smoke_gate
from pytest_vllmqual.gates.registry import proves

from .test_shipped_gates import chat_answer, client


@pytest.fixture
def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::x", gate="x", title="x"), tmp_path)


def passed(name: str, recorder: GateRecorder) -> dict[str, Any]:
    """The public shape ``proves`` reads, as a passed gate of ``name``."""
    record = recorder.record
    return {"gate": name, "outcome": "passed", "measurements": record.measurements, "thresholds": record.thresholds}


def allowing_length(recipe: Recipe) -> Recipe:
    smoke = {**recipe.gates["smoke"], "finish_reasons": ["stop", "length"]}
    return dataclasses.replace(recipe, gates={**recipe.gates, "smoke": smoke})


def test_a_smoke_cut_off_at_max_tokens_proves_no_stop_and_names_what_the_recipe_allowed(
        tiny: Recipe, recorder: GateRecorder) -> None:
    verdict = smoke_gate(client(chat_answer("cloud cloud cloud", finish_reason="length")), allowing_length(tiny),
                         recorder)
    assert verdict.passed, verdict.failure
    said = proves(passed("smoke", recorder))
    assert said is not None and "finish_reason stop" not in said
    assert said == ("a short chat completion returned content and usage and was cut off at max_tokens "
                    "(finish_reason length, which the recipe allows: gates.smoke.finish_reasons stop or length), "
                    "its content holding 'cloud'")


def test_a_smoke_that_stopped_names_stop_and_what_else_the_recipe_allowed(tiny: Recipe, recorder: GateRecorder) -> None:
    assert smoke_gate(client(chat_answer("cloud")), allowing_length(tiny), recorder).passed
    assert proves(passed("smoke", recorder)) == (
        "a short chat completion finished with content, usage and finish_reason stop (the recipe also allowed "
        "length: gates.smoke.finish_reasons stop or length), its content holding 'cloud'")
    assert smoke_gate(client(chat_answer("cloud")), tiny, recorder).passed
    assert proves(passed("smoke", recorder)) == ("a short chat completion finished with content, usage and "
                                                 "finish_reason stop, its content holding 'cloud'")


def test_a_smoke_record_from_before_the_rule_was_recorded_proves_what_it_measured() -> None:
    old = {"gate": "smoke", "outcome": "passed", "thresholds": {}, "measurements": {"finish_reason": "stop"}}
    assert proves(old) == "a short chat completion finished with content, usage and finish_reason stop"


def tool_answer(arguments: dict[str, Any]) -> Any:
    body = {"id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "call_1", "type": "function",
                              "function": {"name": "set_thermostat", "arguments": json.dumps(arguments)}}]}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}
    return lambda request: httpx.Response(200, json=body)


def test_quality_tools_proves_the_name_and_schema_it_checked_not_the_values_it_did_not(
        tiny: Recipe, recorder: GateRecorder) -> None:
    """The gate compares the call's name and its arguments against the tool's schema; the values
    (here 29 degrees, where the prompt asked for 21) are not compared, and a pass does not say so."""
    verdict = quality_tools_gate(client(tool_answer({"room": "kitchen", "temperature": 29})), tiny, recorder)
    assert verdict.passed, verdict.failure
    said = proves(passed("quality_tools", recorder))
    assert said is not None and "correctly" not in said
    assert said == ("the same typed tool call came back 3/3 times naming set_thermostat, its arguments valid "
                    "against the tool's JSON schema (argument values were not compared with the expected ones)")


def test_tools_proves_values_only_where_they_were_compared() -> None:
    gate = {"gate": "tools", "outcome": "passed", "measurements": {"passed": 20, "total": 20, "value_checks": True}}
    assert proves(gate) == ("20/20 typed tool calls came back through the server's tool parser, each naming the "
                            "expected tool, its arguments valid against the tool's JSON schema and equal to the "
                            "expected values")
    unchecked = {**gate, "measurements": {"passed": 20, "total": 20, "value_checks": False}}
    assert proves(unchecked) == ("20/20 typed tool calls came back through the server's tool parser, each naming the "
                                 "expected tool, its arguments valid against the tool's JSON schema (argument values "
                                 "were not compared with the expected ones)")


def test_a_streamed_tool_call_proves_the_name_schema_and_stream_it_checked() -> None:
    gate = {"gate": "streaming_tool", "outcome": "passed",
            "measurements": {"saw_done": True, "usage_chunk": True, "tool_calls": 1, "finish_reason": "tool_calls"}}
    said = proves(gate)
    assert said is not None and "valid typed call" not in said
    assert said == ("a streamed tool call reassembled into one call naming the expected tool, its arguments valid "
                    "against the tool's JSON schema; the stream ended with [DONE] and a usage chunk")


def test_concurrency_proves_requests_sent_at_once_not_served_together() -> None:
    """The gate sends N requests from N threads at once; whether the server ran them together is not measured."""
    said = proves({"gate": "concurrency", "outcome": "passed", "measurements": {"requests": 4}})
    assert said == "4 requests sent at once all completed"
