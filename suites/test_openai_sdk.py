"""The real client: chat, a streamed tool call and the Responses API through the official
``openai`` SDK, the way users' applications call the server. The raw-HTTP gates time and keep
the evidence; this gate proves the SDK can parse every answer (strict validation, no retries)."""

from __future__ import annotations

import json

import pytest

from pytest_vllmqual.client.sdk import sdk_chat, sdk_client, sdk_responses, sdk_stream_tool_call
from pytest_vllmqual.errors import SdkParseError
from pytest_vllmqual.gates.checks import load_tool_fixtures, recipe_tool_fixtures_path
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.recipe.loader import Recipe

pytestmark = [pytest.mark.functional]


@pytest.mark.gate("openai_sdk")
def test_openai_sdk(vllm_server: ServerHandle, recipe: Recipe, gate: GateRecorder) -> None:
    """openai SDK: chat, a streamed tool call and a Responses answer all parse into the SDK's types."""
    import openai

    client = sdk_client(vllm_server.base_url, vllm_server.api_key, timeout_s=recipe.requests.timeout_s)
    model = vllm_server.served_model_name
    smoke = recipe.gate("smoke")
    fixtures = load_tool_fixtures(recipe_tool_fixtures_path(recipe.gate("tools").get("fixtures"), recipe.project_root))
    fixture = fixtures[0]
    mode = recipe.gate("tools").get("tool_choice", "auto")
    tool_choice = {"type": "function", "function": {"name": fixture.name}} if mode == "named" else mode
    responses = recipe.gate("responses")
    gate.measure(sdk_version=openai.__version__)
    try:
        chat = sdk_chat(client, model, smoke.get("prompt", "Say cloud."), max_tokens=smoke.get("max_tokens", 16))
        gate.measure(chat_s=round(chat.seconds, 3), chat_finish_reason=chat.finish_reason)
        tool = sdk_stream_tool_call(client, model, fixture.prompt, [f.openai_tool() for f in fixtures],
                                    tool_choice=tool_choice,
                                    max_tokens=recipe.gate("streaming_tool").get("max_tokens", 256))
        gate.measure(stream_s=round(tool.seconds, 3), stream_chunks=tool.chunks, stream_tool=tool.tool_name)
        answer = sdk_responses(client, model, smoke.get("prompt", "Say cloud."),
                               max_output_tokens=responses.get("max_output_tokens", 256),
                               reasoning_effort=responses.get("reasoning_effort"))
        gate.measure(responses_s=round(answer.seconds, 3), responses_status=answer.details.get("status"))
    except SdkParseError as exc:
        gate.summary("the openai SDK could not parse the server's answer")
        pytest.fail(str(exc), pytrace=False)
    assert chat.text.strip(), "chat through the SDK returned no content"
    assert tool.tool_name == fixture.name, f"streamed tool call named {tool.tool_name!r}, expected {fixture.name!r}"
    try:
        json.loads(tool.tool_arguments or "")
    except ValueError:
        pytest.fail(f"the streamed tool call's arguments are not JSON: {tool.tool_arguments!r}", pytrace=False)
    assert answer.details.get("status") == "completed" and answer.text.strip(), \
        f"Responses through the SDK: status {answer.details.get('status')!r}, output_text {answer.text!r}"
    gate.summary(f"chat, streamed tool call ({tool.chunks} chunks) and Responses parsed by openai {openai.__version__}")
