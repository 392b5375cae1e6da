"""Deprecated (kept for a release, removed in the next): the gate checks' old home, now split by
concern. Import from the module that owns each name instead:

- ``gates.verdict``: ``GateVerdict``, ``failed_request``;
- ``gates.tool_fixtures``: ``ToolCase`` and the fixture readers;
- ``gates.schema_checks``: the JSON-Schema checks and ``warm_up_validation``;
- ``gates.tool_checks``: the tool-call checks and the tool serve flags;
- ``gates.smoke``: ``SmokeRule``, ``SmokeResult``, ``run_smoke`` (and ``SMOKE_PROMPT``);
- ``gates.number_answer``: ``judge_final_number``, ``NumberAnswer``, ``check_fingerprints``.
"""

from __future__ import annotations

from .number_answer import NumberAnswer, check_fingerprints, judge_final_number
from .schema_checks import (
    ArgumentViolation,
    check_json_content,
    schema_problems,
    schema_violations,
    warm_up_validation,
)
from .smoke import SMOKE_PROMPT, SmokeResult, SmokeRule, run_smoke
from .tool_checks import (
    ToolProblem,
    auto_tool_choice,
    check_stream_tool,
    check_tool_call,
    missing_tool_flags,
    tool_call_problems,
    tool_flags_problem,
)
from .tool_fixtures import (
    ToolCase,
    load_tool_fixtures,
    recipe_tool_fixtures,
    recipe_tool_fixtures_path,
    shipped_tool_fixtures,
)
from .verdict import GateVerdict, failed_request

__all__ = ["SMOKE_PROMPT", "ArgumentViolation", "GateVerdict", "NumberAnswer", "SmokeResult", "SmokeRule", "ToolCase",
           "ToolProblem", "auto_tool_choice", "check_fingerprints", "check_json_content", "check_stream_tool",
           "check_tool_call", "failed_request", "judge_final_number", "load_tool_fixtures", "missing_tool_flags",
           "recipe_tool_fixtures", "recipe_tool_fixtures_path", "run_smoke", "schema_problems", "schema_violations",
           "shipped_tool_fixtures", "tool_call_problems", "tool_flags_problem", "warm_up_validation"]
