"""Declared not applicable: a recipe's claim that its model cannot be expected to pass a gate.

A model someone else trained may have a chat template without tools, or one that ignores
``reasoning_effort``; its recipe says so per gate (``gates.tools.not_applicable: "why"``, and
``gates.quality.not_applicable`` per quality check). A declaration is a claim, not a result:
a declared gate that is cheap still runs, and its record keeps what this run measured next to
the claim (``declared_not_applicable`` and ``measured_outcome`` in its measurements:
``passed``, ``failed``, or ``skipped`` when it was not run).

A declaration excuses the model, never the server: only a failure in the model's answers
(``model_behaviour``, see :class:`~pytest_vllmqual.records.FailureKind`) is what it claims. A
server error, a request that got no answer, a server that was gone, or the recipe's own
settings (tools without the flags vLLM's tool parser needs) fail a declared gate as they fail
any other.

How each end counts:

- **ran and failed in the model's answers**: the claim held. The gate ends skipped, its reason
  the declaration and the failure measured; a skipped gate is not evidence, so the run is at
  most ``healthy`` (never ``promotable``), and the decision names the gate among those declared
  not applicable and measured failing.
- **ran and failed otherwise**: the claim says nothing of it. The gate fails, its reason the
  failure and why the declaration does not excuse it.
- **ran and passed**: the claim no longer holds. The gate passes on its own evidence, and its
  summary and the decision's caveats say the declaration is out of date.
- **not run** (a costly check, e.g. long context): skipped with the declaration alone, also
  at most ``healthy``.

A failure outside what was declared (the plain Responses answer when only its function call
is declared) still fails the gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import FailureKind, GateOutcome

from .recorder import GateRecorder
from .verdict import GateVerdict

__all__ = ["DECLARABLE", "Declarable", "declaration", "judged", "not_run", "quality_declaration"]

_MEASURED_LIMIT = 300


@dataclass(frozen=True)
class Declarable:
    """A gate a recipe may declare not applicable: where the declaration is and what it covers."""

    block: str
    """The recipe's ``gates.<block>`` section that holds ``not_applicable``."""
    covers: str
    """What the declaration excuses, in a user's words."""


DECLARABLE: dict[str, Declarable] = {
    "tools": Declarable("tools", "the typed tool calls"),
    "streaming_tool": Declarable("streaming_tool", "the streamed tool call"),
    "tool_continuation": Declarable("tool_continuation", "the answer after a tool result"),
    "responses": Declarable("responses", "the Responses function-call round trip (the plain answer is still required)"),
    "openai_sdk": Declarable("openai_sdk", "the SDK's streamed tool call (its chat and Responses answers are still "
                                           "required)"),
    "reasoning_fingerprints": Declarable("reasoning", "the per-effort prompt fingerprints"),
    "tool_replay": Declarable("tool_replay", "the tool-call replay (not run: a comparison has no replay to judge)"),
}
"""Gate name -> its declaration; the quality checks are declared under ``gates.quality``."""


def declaration(recipe: Recipe, gate_name: str) -> str | None:
    """Why the recipe declares this gate not applicable, or None when it does not."""
    declarable = DECLARABLE.get(gate_name)
    if declarable is None:
        return None
    reason = recipe.gate(declarable.block).get("not_applicable")
    return str(reason) if reason else None


def quality_declaration(recipe: Recipe, check: str) -> str | None:
    """Why the recipe declares a quality check (``intelligence``, ``session_recall``, ``tools``,
    ``long_context``; a parametrized id such as ``intelligence[addition]`` reads its family)."""
    reasons: dict[str, str] = recipe.gate("quality").get("not_applicable") or {}
    reason = reasons.get(check) or reasons.get(check.split("[")[0].split(".")[0])
    return str(reason) if reason else None


def _said(recipe: Recipe, reason: str) -> str:
    return f"not applicable to recipe {recipe.name}: {reason}"


def _measured(failure: str) -> str:
    return first_line(failure, _MEASURED_LIMIT) or "failed"


def judged(recipe: Recipe, gate: GateRecorder, reason: str | None, verdict: GateVerdict) -> GateVerdict:
    """The verdict of a gate (or of its declared part) that ran, read against the declaration.

    Undeclared: the verdict as it is. Declared and failed in the model's answers: skipped, with
    the declaration and what was measured. Declared and failed otherwise (the server, the
    transport, the recipe's flags): failed, saying the declaration does not excuse it. Declared
    and passed: passed, and the record says the declaration no longer holds.
    """
    if reason is None or verdict.skip_reason is not None:
        return gate.ended(verdict)
    outcome = GateOutcome.PASSED if verdict.passed else GateOutcome.FAILED
    gate.measure(declared_not_applicable=reason, measured_outcome=outcome.value)
    measured = gate.record.summary
    if verdict.passed:
        gate.summary(f"{measured or 'pass'}; declared not applicable, but passed in this run: "
                     "the declaration no longer holds")
        return gate.ended(verdict)
    failure = verdict.failure or "failed"
    if verdict.kind is None or not FailureKind(verdict.kind).excused_by_declaration:
        whose = FailureKind(verdict.kind).said if verdict.kind is not None else "not classified as the model's"
        return gate.ended(GateVerdict(
            f"{failure} (recipe {recipe.name} declares this gate not applicable, but a declaration excuses only "
            f"the model's answers; this failure is {whose})", kind=verdict.kind))
    gate.summary("declared not applicable" + (f"; measured {measured}" if measured else "; measured: failed"))
    gate.record.failure_kind = str(FailureKind.MODEL_BEHAVIOUR)
    return GateVerdict(skip_reason=f"{_said(recipe, reason)} (declared; this run measured: {_measured(failure)})",
                       kind=FailureKind.MODEL_BEHAVIOUR)


def not_run(recipe: Recipe, gate: GateRecorder, reason: str, why_not_run: str) -> GateVerdict:
    """A declared check too costly to run for a claim: skipped with the declaration alone."""
    gate.measure(declared_not_applicable=reason, measured_outcome=GateOutcome.SKIPPED.value)
    gate.summary("not applicable")
    return GateVerdict(skip_reason=f"{_said(recipe, reason)} (declared; not run: {why_not_run})")
