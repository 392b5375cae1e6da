"""The tool gates' checks: one call of the right tool with arguments its schema accepts (from a
reply or a stream), and the serve flags that ``tool_choice: auto`` needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.client.results import StreamResult
from pytest_vllmqual.launch.registry import launcher_class
from pytest_vllmqual.privacy.public_text import quote_answer
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.vllm.server_messages import public_failure

from .schema_checks import schema_violations
from .tool_fixtures import ToolCase

__all__ = ["ToolProblem", "auto_tool_choice", "check_stream_tool", "check_tool_call", "missing_tool_flags", "tool_call_problems", "tool_flags_problem"]


@dataclass(frozen=True)
class ToolProblem:
    """One rule a tool call broke: the sentence a gate fails with, and its path and kind."""

    text: str
    kind: str
    path: str | None = None


def tool_call_problems(calls: list[dict[str, Any]], fixture: ToolCase, *, value_checks: bool) -> list[ToolProblem]:
    """Typed-tool gate: exactly one call, the right name, arguments valid (and equal if asked).

    ``calls`` are OpenAI tool_calls entries ({"function": {"name", "arguments"}}) or
    reassembled ``{"name", "arguments"}`` dicts. A schema violation says the path in the
    arguments and the kind of value (``start.time``: missing), not the model's text.
    """
    if not calls:
        return [ToolProblem(f"no tool call; expected a call to {fixture.name}", "no tool call")]
    problems: list[ToolProblem] = []
    if len(calls) > 1:
        problems.append(ToolProblem(f"{len(calls)} tool calls; expected exactly one", "several tool calls"))
    call = calls[0]
    function = call.get("function", call)
    name = function.get("name")
    if name != fixture.name:
        problems.append(ToolProblem(f"tool call names {name!r}, expected {fixture.name!r}", "another tool", "name"))
        return problems
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        return [*problems, ToolProblem(f"arguments of {fixture.name} are not JSON ({exc.msg}): {quote_answer(str(raw))}",
                                       "not JSON", "arguments")]
    violations = schema_violations(arguments, fixture.parameters)
    problems += [ToolProblem(v.worded(f"arguments of {fixture.name} violate the schema"), v.kind, v.path)
                 for v in violations]
    if value_checks and not problems and arguments != fixture.expected:
        problems.append(ToolProblem(f"arguments of {fixture.name} are {quote_answer(arguments)}, expected "
                                    f"{fixture.expected}",
                                    "other values than expected", "arguments"))
    return problems


def check_tool_call(
    calls: list[dict[str, Any]], fixture: ToolCase, *, value_checks: bool
) -> list[str]:
    """Typed-tool gate's rules as sentences (see :func:`tool_call_problems`)."""
    return [p.text for p in tool_call_problems(calls, fixture, value_checks=value_checks)]


def check_stream_tool(result: StreamResult, fixture: ToolCase, *, value_checks: bool) -> list[str]:
    """Streaming-tool gate: the SSE contract, then the reassembled call. A request the server did
    not answer is said as every gate says it (:func:`public_failure`): never the server's own text."""
    problems = list(result.violations)
    if result.status_code != 200:
        return [public_failure(result.attempt), *problems]
    calls = [{"name": c.name, "arguments": c.arguments} for c in result.tool_calls]
    problems += check_tool_call(calls, fixture, value_checks=value_checks)
    if result.tool_calls and result.finish_reason != "tool_calls":
        problems.append(f"finish_reason is {result.finish_reason!r}, expected 'tool_calls'")
    return problems


def auto_tool_choice(tool_choice: Any) -> bool:
    """A request with tools and this ``tool_choice`` needs vLLM's tool parser (``auto``, or none given)."""
    return tool_choice is None or tool_choice == "auto"


_TOOL_FLAGS = (("--enable-auto-tool-choice", "serve.enable_auto_tool_choice: true"),
               ("--tool-call-parser", "serve.tool_call_parser: NAME"))


def missing_tool_flags(recipe: Recipe) -> list[tuple[str, str]]:
    """The serve flags ``tool_choice: auto`` needs that the server this recipe starts lacks, each
    with the recipe key that sets it; none for an endpoint the run does not start (its flags are
    not the recipe's)."""
    if not launcher_class(recipe.launcher.kind).starts_server:
        return []
    argv = [*recipe.launcher.command, *recipe.serve.extra_args]
    given = {"--enable-auto-tool-choice": recipe.serve.enable_auto_tool_choice,
             "--tool-call-parser": bool(recipe.serve.tool_call_parser)}
    return [(flag, key) for flag, key in _TOOL_FLAGS
            if not given[flag] and not any(a == flag or a.startswith(f"{flag}=") for a in argv)]


def tool_flags_problem(recipe: Recipe, status_code: int | None, *, auto_tools: bool) -> str | None:
    """Why an HTTP 400 to a request with tools for vLLM's tool parser (``auto_tools``) is the
    recipe's own doing: the server it starts lacks the flags that parser needs (named, with the
    recipe keys that set them); None when it is not."""
    missing = missing_tool_flags(recipe) if auto_tools and status_code == 400 else []
    if not missing:
        return None
    return (f"the recipe starts the server without {' and '.join(f for f, _ in missing)}, which tool_choice auto "
            f"needs. Fix: set {' and '.join(k for _, k in missing)} in the recipe")
