"""Named findings from a pydantic ValidationError: the schema path, what the SDK's model needs,
the kind of value the server sent (never the value), union variants resolved to the one meant."""

from __future__ import annotations

import copy
from typing import Any

import pydantic
import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from pytest_vllmqual.client.sdk_findings import (
    MAX_FINDINGS,
    SdkFinding,
    findings_from_validation_error,
    json_kind,
    render_path,
    strict_findings,
)

RESPONSE: dict[str, Any] = {
    "id": "r1", "object": "response", "created_at": 1, "model": "m", "status": "completed",
    "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "cloud", "annotations": []}]}],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4,
              "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
              "output_tokens_details": {"reasoning_tokens": 0}},
}


def response(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(RESPONSE)
    data.update(changes)
    return data


def findings(data: Any, model: Any = Response) -> list[tuple[str, str, str]]:
    return [(f.path, f.needs, f.sent) for f in strict_findings(model, data, call="responses", sdk_version="9.9.9")]


def test_a_conforming_answer_has_no_finding() -> None:
    assert findings(RESPONSE) == []


def test_the_missing_cache_write_tokens_is_named_by_its_path() -> None:
    data = response()
    del data["usage"]["input_tokens_details"]["cache_write_tokens"]
    with pytest.raises(pydantic.ValidationError) as caught:
        Response.model_validate(data)
    (finding,) = findings_from_validation_error(caught.value, data, call="responses", model="Response",
                                                sdk_version="2.54.0")
    assert finding == SdkFinding(call="responses", model="Response",
                                 path="usage.input_tokens_details.cache_write_tokens", needs="a value",
                                 sent="missing", sdk_version="2.54.0")
    assert finding.text() == ("responses: usage.input_tokens_details.cache_write_tokens is missing "
                              "(openai 2.54.0's Response)")


def test_a_wrong_type_says_the_kind_sent_and_never_the_value() -> None:
    data = response()
    data["usage"]["input_tokens"] = "secret-value-words"
    (finding,) = strict_findings(Response, data, call="responses", sdk_version="2.54.0")
    assert (finding.path, finding.needs, finding.sent) == ("usage.input_tokens", "an integer", "string")
    assert "secret-value-words" not in repr(finding) + finding.text()
    assert finding.text() == "responses: usage.input_tokens is a string, not an integer (openai 2.54.0's Response)"


def test_a_value_inside_a_union_is_judged_against_the_variant_its_type_names() -> None:
    """pydantic tries every output item type; only the message variant (type: message) counts."""
    data = response()
    data["output"][0]["content"][0]["text"] = 5
    assert findings(data) == [("output[0].content[0].text", "a string", "integer")]


def test_an_item_no_variant_accepts_is_one_finding() -> None:
    data = response(output=[{"type": "not-a-known-item", "id": "x"}])
    assert findings(data) == [("output[0]", "one of the SDK's variants", "object")]


def test_a_string_where_the_sdk_needs_an_array() -> None:
    assert findings(response(output="cloud")) == [("output", "an array", "string")]


def test_a_literal_outside_the_sdks_values() -> None:
    assert findings(response(status="secret-status")) == [("status", "one of the SDK's values", "string")]


def test_chat_findings_name_list_positions() -> None:
    chat = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}
    assert findings(chat, ChatCompletion) == [("choices[0].finish_reason", "a value", "missing")]


def test_findings_are_capped() -> None:
    chat = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": i, "message": {"role": "assistant", "content": "x"}} for i in range(30)]}
    assert len(findings(chat, ChatCompletion)) == MAX_FINDINGS


@pytest.mark.parametrize(("value", "kind"), [(None, "null"), (True, "boolean"), (3, "integer"), (2.5, "number"),
                                             ("x", "string"), ([1], "array"), ({"a": 1}, "object")])
def test_json_kinds(value: Any, kind: str) -> None:
    assert json_kind(value) == kind


def test_paths_render_as_an_application_writes_them() -> None:
    assert render_path(("output", 0, "content", 1, "text")) == "output[0].content[1].text"
    assert render_path(()) == "(answer)"
