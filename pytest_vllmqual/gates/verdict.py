"""How a shipped gate ended (``GateVerdict``), and the verdict for a request the server did not
answer as asked, worded without the server's own text."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import Attempt, FailureKind
from pytest_vllmqual.vllm.server_messages import public_failure

from .tool_checks import tool_flags_problem

__all__ = ["GateVerdict", "failed_request"]


@dataclass(frozen=True, repr=False)
class GateVerdict:
    """How a shipped gate ended: passed, failed with the first rule it broke (the message the
    test fails with), or skipped with the reason. The gate function has already written its
    measurements, thresholds and summary into the recorder; the test asserts on this.

    ``kind`` says whose failure it is (:class:`FailureKind`); a failure without one is never
    excused by a declaration."""

    failure: str | None = None
    skip_reason: str | None = None
    kind: FailureKind | None = None

    @property
    def passed(self) -> bool:
        return self.failure is None and self.skip_reason is None

    def __repr__(self) -> str:  # short: pytest prints it under a failed assertion
        return f"GateVerdict({'passed' if self.passed else 'failed' if self.failure else 'skipped'})"


def failed_request(attempt: Attempt, recipe: Recipe, *, auto_tools: bool = False, what: str = "") -> GateVerdict:
    """A gate's failure for a request the server did not answer as asked: said without the server's
    own text (:func:`public_failure`), with its kind; ``config`` where the recipe's missing tool
    flags caused it (:func:`tool_flags_problem`)."""
    said = public_failure(attempt)
    flags = tool_flags_problem(recipe, attempt.status_code, auto_tools=auto_tools)
    if flags:
        return GateVerdict(f"{what}{said}; {flags}", kind=FailureKind.CONFIG)
    return GateVerdict(f"{what}{said}", kind=attempt.failure_kind)
