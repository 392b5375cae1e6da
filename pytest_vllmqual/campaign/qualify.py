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
from typing import Any

from pytest_vllmqual.gates.registry import PREFLIGHT_GATES
from pytest_vllmqual.records import ArmStatus, GateOutcome, Verdict
from pytest_vllmqual.report.decision import declared_failing, public_record, unpinned

__all__ = ["QUALIFYING_VERDICTS", "arm_facts", "campaign_exit", "campaign_line", "qualified_arm",
           "qualified_by_fallback"]

QUALIFYING_VERDICTS = (Verdict.HEALTHY, Verdict.PROMOTABLE, Verdict.PRIORITY_CHALLENGER)
"""The verdicts at or above ``healthy``: an arm's own report must have one of them to qualify (and
its run must be pinned, see :func:`arm_facts`)."""

_FAILING = (GateOutcome.FAILED, GateOutcome.ERROR)


def arm_facts(report: Mapping[str, Any] | None, *, met_requirements: bool) -> dict[str, Any]:
    """What the campaign record says of one arm beyond its requirements: its verdict, its failed
    gates, the registered gates it did not run, the gates a declaration excused, why it is not
    pinned (empty when it is), and whether it qualifies (and why, or why not, in words)."""
    if report is None:
        return {"verdict": None, "qualifies": False, "failed_gates": [], "gates_not_run": [], "excused_gates": [],
                "not_pinned": [], "qualification": ""}
    verdict = (report.get("decision") or {}).get("verdict")
    failed = list(dict.fromkeys(str(g.get("gate")) for g in report.get("gates") or [] if g.get("outcome") in _FAILING))
    not_run = [{"gate": str(g.get("gate")), "reason": str(g.get("reason") or "")}
               for g in (report.get("decision") or {}).get("gates") or [] if g.get("outcome") == GateOutcome.ABSENT]
    record = public_record(report)
    not_pinned, excused = unpinned(record), declared_failing(record)
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
    return {"verdict": verdict, "qualifies": qualifies, "failed_gates": failed, "gates_not_run": not_run,
            "excused_gates": excused, "not_pinned": not_pinned, "qualification": why}


def _ran(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [a for a in record.get("arms") or [] if a.get("ran")]


def _stood_in_for(name: str, arms: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a fallback of the failed arm ``name`` qualifies, or failed and was itself stood in for."""
    return any(a.get("qualifies") or (a.get("status") == ArmStatus.FAILED and _stood_in_for(str(a["name"]), arms))
               for a in arms if a.get("fallback_for") == name)


def _blocking(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The arms that ran, did not qualify, and no fallback stood in for."""
    arms = _ran(record)
    return [a for a in arms if not a.get("qualifies")
            and not (a.get("status") == ArmStatus.FAILED and _stood_in_for(str(a["name"]), arms))]


def qualified_arm(record: Mapping[str, Any]) -> str | None:
    """The arm that qualified the campaign (see the module docstring), or None."""
    if not record.get("complete"):
        return None
    qualifying = [a for a in _ran(record) if a.get("qualifies")]
    if not qualifying or _blocking(record):
        return None
    return str(qualifying[-1]["name"])


def qualified_by_fallback(record: Mapping[str, Any]) -> str | None:
    """The qualified arm when it is a fallback that stood in for a failed arm, else None."""
    name = record.get("qualified")
    arm = next((a for a in record.get("arms") or [] if a.get("name") == name), None)
    return str(name) if arm is not None and arm.get("fallback_for") else None


def _covered(gate: str, failed_requirements: Sequence[str]) -> bool:
    if "startup" in failed_requirements or "gates" in failed_requirements:
        return True
    return gate in failed_requirements or ("preflight" in failed_requirements and gate in PREFLIGHT_GATES)


def campaign_exit(record: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]],
                  failed_tests: int | None = None) -> dict[str, Any] | None:
    """The campaign's exit code and why (None while it is incomplete). ``failed_tests``: pytest's
    count of failed tests in the session, when known; more of them than the failures a fallback
    stood in for keeps the exit at 1."""
    if not record.get("complete"):
        return None
    qualified = record.get("qualified")
    if qualified is None:
        blocking = _blocking(record)
        why = "; ".join(f"{a['name']} {a.get('qualification') or a.get('reason')}" for a in blocking)
        return {"code": 1, "reason": f"no arm qualified{': ' + why if why else ''}", "accepted_failures": 0}
    accepted = 0
    for arm in _ran(record):
        if arm.get("qualifies"):
            continue
        unmet = [str(r["name"]) for r in arm.get("requirements") or [] if not r.get("ok")]
        outside = [g for g in arm.get("failed_gates") or [] if not _covered(g, unmet)]
        if outside:
            return {"code": 1, "reason": f"{qualified} qualified, but {arm['name']} also failed {', '.join(outside)}, "
                                         f"which its fallback does not stand in for (it failed {', '.join(unmet)})",
                    "accepted_failures": 0}
        accepted += sum(1 for g in (reports.get(str(arm["name"])) or {}).get("gates") or []
                        if g.get("outcome") in _FAILING)
    if failed_tests is not None and failed_tests > accepted:
        return {"code": 1, "reason": f"{qualified} qualified, but {failed_tests} test(s) failed where a fallback "
                                     f"stands in for {accepted}", "accepted_failures": accepted}
    by = qualified_by_fallback(record)
    stood = [str(a["name"]) for a in _ran(record) if not a.get("qualifies")]
    reason = (f"{qualified} qualified (fallback for {', '.join(stood)}, which failed "
              f"{'; '.join(_failure(a) for a in _ran(record) if not a.get('qualifies'))})" if by and stood
              else f"{qualified} qualified")
    return {"code": 0, "reason": reason, "accepted_failures": accepted}


def _failure(arm: Mapping[str, Any]) -> str:
    return ", ".join(str(r["name"]) for r in arm.get("requirements") or [] if not r.get("ok")) or "its requirements"


def campaign_line(record: Mapping[str, Any]) -> str | None:
    """The terminal's last word on the campaign: what qualified and the exit code it gives."""
    outcome = record.get("exit")
    if not isinstance(outcome, Mapping):
        return None
    return f"campaign: {outcome['reason']}; exit {outcome['code']}"
