"""Which arm qualifies a campaign, and what the campaign's exit code is.

The rule, in one place:

- an arm **qualifies** when it ran, met its ``requires``, its own report's verdict is at least
  ``healthy`` over the gates that ran (so no gate of it failed), and its run is pinned (its
  decision has no "not pinned" item: the model named by a hub revision or a content digest, an
  image by digest, and the recipe not saying ``pinned: false``). An unpinned arm does not
  qualify, and its ``qualification`` says why in words. The record lists the registered gates
  each arm did not run (deselected with ``-m``/``-k``, or not collected) and the gates a
  declaration excused (declared not applicable, measured failing): excused, never passed;
- ``requires`` decide only whether a fallback runs: an arm that met them with a failed gate
  neither qualifies nor lets its fallback run;
- the campaign qualifies the last arm that qualifies, when every other arm that ran is a
  primary that failed its ``requires`` and was stood in for by a fallback that qualifies
  (directly, or through that fallback's own fallback);
- the exit code is 0 only when the campaign qualified an arm and every failed gate of the
  session belongs to a primary that its fallback stood in for and is a failure of the kind the
  fallback exists for: a gate named in the primary's failed ``requires`` (a failed ``startup`` or
  ``gates`` covers every gate of that arm, a failed ``preflight`` the functional preflight). Any
  other failure, or no qualified arm, is exit 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_vllmqual.gates.registry import PREFLIGHT_GATES
from pytest_vllmqual.records import ArmStatus, GateOutcome, Verdict
from pytest_vllmqual.report.read_model import RunView

__all__ = ["QUALIFYING_VERDICTS", "ArmFacts", "ArmStanding", "arm_facts", "campaign_exit", "campaign_line",
           "qualified_arm", "qualified_by_fallback"]

QUALIFYING_VERDICTS = (Verdict.HEALTHY, Verdict.PROMOTABLE, Verdict.PRIORITY_CHALLENGER)
"""The verdicts at or above ``healthy``: an arm's own report must have one of them to qualify (and
its run must be pinned, see :func:`arm_facts`)."""

_FAILING = (GateOutcome.FAILED, GateOutcome.ERROR)


@dataclass(frozen=True)
class ArmFacts:
    """What the campaign record says of one arm beyond its requirements (see :func:`arm_facts`)."""

    verdict: str | None = None
    qualifies: bool = False
    failed_gates: list[str] = field(default_factory=list)
    #: How many gate records of the arm failed or errored (a gate may run more than once).
    failed_runs: int = 0
    gates_not_run: list[dict[str, str]] = field(default_factory=list)
    excused_gates: list[str] = field(default_factory=list)
    not_pinned: list[str] = field(default_factory=list)
    qualification: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "qualifies": self.qualifies, "failed_gates": list(self.failed_gates),
                "gates_not_run": [dict(g) for g in self.gates_not_run], "excused_gates": list(self.excused_gates),
                "not_pinned": list(self.not_pinned), "qualification": self.qualification}


class ArmStanding(Protocol):
    """What the qualification rule reads of an arm: its name, whose fallback it is, its status,
    its unmet requirements, why it ran or not, and its facts (``campaign.decision.ArmDecision`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def fallback_for(self) -> str | None: ...

    @property
    def status(self) -> ArmStatus: ...

    @property
    def unmet(self) -> list[str]: ...

    @property
    def reason(self) -> str: ...

    @property
    def facts(self) -> ArmFacts: ...


def arm_facts(view: RunView | None, *, met_requirements: bool) -> ArmFacts:
    """What the campaign record says of one arm beyond its requirements: its verdict, its failed
    gates, the registered gates it did not run, the gates a declaration excused, why it is not
    pinned (empty when it is), and whether it qualifies (and why, or why not, in words)."""
    if view is None:
        return ArmFacts()
    verdict = view.decision.get("verdict")
    failing = [g for g in view.record.gates if g.outcome in _FAILING]
    failed = list(dict.fromkeys(g.gate for g in failing))
    not_run = [{"gate": str(g.get("gate")), "reason": str(g.get("reason") or "")}
               for g in view.decision.get("gates") or [] if g.get("outcome") == GateOutcome.ABSENT]
    not_pinned, excused = view.unpinned, view.excused
    qualifies = met_requirements and verdict in QUALIFYING_VERDICTS and not not_pinned
    if not met_requirements:
        why = "did not meet its requirements"
    elif qualifies:
        why = f"qualifies: its verdict is {verdict} over the gates that ran, and its run is pinned"
    elif verdict in QUALIFYING_VERDICTS:
        why = f"met its requirements and its verdict is {verdict}, but it does not qualify: the run is not pinned: " \
              + "; ".join(not_pinned)
    else:
        why = f"met its requirements, but its verdict is {verdict}" + (
            f" (failed: {', '.join(failed)})" if failed else "")
    if excused:
        why += f"; measured failing under a declaration: {', '.join(excused)} (excused, not passed)"
    if not_run:
        why += f"; {len(not_run)} registered gate(s) did not run: {', '.join(g['gate'] for g in not_run)}"
    return ArmFacts(verdict, qualifies, failed, len(failing), not_run, excused, list(not_pinned), why)


def _ran(arms: Sequence[ArmStanding]) -> list[ArmStanding]:
    return [a for a in arms if a.status.ran]


def _stood_in_for(name: str, arms: Sequence[ArmStanding]) -> bool:
    """Whether a fallback of the failed arm ``name`` qualifies, or failed and was itself stood in for."""
    return any(a.facts.qualifies or (a.status is ArmStatus.FAILED and _stood_in_for(a.name, arms))
               for a in arms if a.fallback_for == name)


def _blocking(arms: Sequence[ArmStanding]) -> list[ArmStanding]:
    """The arms that ran, did not qualify, and no fallback stood in for."""
    ran = _ran(arms)
    return [a for a in ran if not a.facts.qualifies
            and not (a.status is ArmStatus.FAILED and _stood_in_for(a.name, ran))]


def qualified_arm(arms: Sequence[ArmStanding], *, complete: bool) -> str | None:
    """The arm that qualified the campaign (see the module docstring), or None."""
    if not complete:
        return None
    qualifying = [a for a in _ran(arms) if a.facts.qualifies]
    if not qualifying or _blocking(arms):
        return None
    return qualifying[-1].name


def qualified_by_fallback(record: Mapping[str, Any]) -> str | None:
    """The qualified arm when it is a fallback that stood in for a failed arm, else None."""
    name = record.get("qualified")
    arm = next((a for a in record.get("arms") or [] if a.get("name") == name), None)
    return str(name) if arm is not None and arm.get("fallback_for") else None


def _covered(gate: str, failed_requirements: Sequence[str]) -> bool:
    if "startup" in failed_requirements or "gates" in failed_requirements:
        return True
    return gate in failed_requirements or ("preflight" in failed_requirements and gate in PREFLIGHT_GATES)


def campaign_exit(arms: Sequence[ArmStanding], *, complete: bool, qualified: str | None,
                  failed_tests: int | None = None) -> dict[str, Any] | None:
    """The campaign's exit code and why (None while it is incomplete). ``failed_tests``: pytest's
    count of failed tests in the session, when known; more of them than the failures a fallback
    stood in for keeps the exit at 1."""
    if not complete:
        return None
    if qualified is None:
        why = "; ".join(f"{a.name} {a.facts.qualification or a.reason}" for a in _blocking(arms))
        return {"code": 1, "reason": f"no arm qualified{': ' + why if why else ''}", "accepted_failures": 0}
    accepted = 0
    stood = [a for a in _ran(arms) if not a.facts.qualifies]
    for arm in stood:
        outside = [g for g in arm.facts.failed_gates if not _covered(g, arm.unmet)]
        if outside:
            return {"code": 1, "reason": f"{qualified} qualified, but {arm.name} also failed {', '.join(outside)}, "
                                         f"which its fallback does not stand in for (it failed {', '.join(arm.unmet)})",
                    "accepted_failures": 0}
        accepted += arm.facts.failed_runs
    if failed_tests is not None and failed_tests > accepted:
        return {"code": 1, "reason": f"{qualified} qualified, but {failed_tests} test(s) failed where a fallback "
                                     f"stands in for {accepted}", "accepted_failures": accepted}
    by = next((a for a in arms if a.name == qualified and a.fallback_for), None)
    reason = (f"{qualified} qualified (fallback for {', '.join(a.name for a in stood)}, which failed "
              f"{'; '.join(', '.join(a.unmet) or 'its requirements' for a in stood)})" if by and stood
              else f"{qualified} qualified")
    return {"code": 0, "reason": reason, "accepted_failures": accepted}


def campaign_line(record: Mapping[str, Any]) -> str | None:
    """The terminal's last word on the campaign: what qualified and the exit code it gives."""
    outcome = record.get("exit")
    if not isinstance(outcome, Mapping):
        return None
    return f"campaign: {outcome['reason']}; exit {outcome['code']}"
