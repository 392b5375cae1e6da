"""Which arm of a campaign runs next, and why, decided from the arm reports so far.

The reference campaign's next step: an arm that starts with a reported KV pool of at least
393,216 tokens, serves an actual prompt above 300,000 tokens and passes the post-probe smoke
after it, with the prepared native-offload arm as the fallback if it does not. As a campaign::

    Campaign([CampaignArm("393k-fp8kv", requires=["startup", "kv_pool", "ladder"]),
              CampaignArm("393k-offload", requires=["startup", "ladder"], fallback_for="393k-fp8kv")])

This module is pure logic over public report dicts (no pytest, no server):
``plan = CampaignPlan(campaign); plan.next_arm(reports_so_far)`` says which arm runs next (None
when the campaign is over) and ``plan.record()`` says which arm ran and why, e.g.
"393k-offload ran because 393k-fp8kv failed kv_pool: 283,917 < 393,216".

Rules, in arm order:

- a regular arm runs unless the campaign has stopped;
- a fallback arm (``fallback_for=P``) runs only when P ran and failed one of its required
  gates; it is skipped when P passed or was skipped;
- after an arm fails, the campaign stops (later arms are skipped) unless a fallback for it
  follows or the arm says ``stop_on_failure=False``; after an arm passes, the campaign stops
  when the arm says ``stop_on_success=True``.

"Passed" and "failed" here are about an arm's ``requires`` only: they decide which arm runs next.
Which arm *qualifies* the campaign (its own verdict at least ``healthy`` over the gates that ran,
and its run pinned) and the exit code that gives are decided in ``campaign.qualify``.

Requirements (``requires``) are gate names, evaluated by ``campaign.requirements``. When the
report has gates of that name, their outcome decides (all passed = met); otherwise these names are evaluated from the report's
sections: ``startup`` (the server became ready), ``kv_pool`` (engine-reported KV tokens ≥ the
recipe's ``gates.engine.min_kv_tokens``, else ≥ max_model_len), ``ladder`` (a completed rung above the
recipe's ``min_largest_prompt`` and every post-probe smoke passed), ``preflight`` (k/k) and
``gates`` (no gate failed and the run is complete: the default; gates a declaration excused are
named as excused, not counted as passed). Any other name
that did not run is unmet ("did not run").

The campaign itself (its arms, the string and YAML formats) is ``campaign.spec``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pytest_vllmqual.errors import CampaignError
from pytest_vllmqual.records import ArmStatus
from pytest_vllmqual.report.read_model import RunView

from .qualify import ArmFacts, arm_facts, campaign_exit, qualified_arm
from .requirements import Requirement, evaluate_requirement
from .spec import Campaign, CampaignArm, parse_campaign_spec

__all__ = ["ArmDecision", "CampaignPlan", "decide_arms", "reports_by_arm", "requalify"]


@dataclass
class ArmDecision:
    """What the campaign decided for one arm, and why."""

    arm: CampaignArm
    status: ArmStatus
    reason: str
    requirements: list[Requirement] = field(default_factory=list)
    report: Mapping[str, Any] | None = None
    #: The report read once (:class:`RunView`); read from ``report`` when not given.
    view: RunView | None = None

    def __post_init__(self) -> None:
        if self.view is None and self.report is not None:
            self.view = RunView.of(self.report)

    @property
    def ran(self) -> bool:
        return self.status.ran

    @property
    def name(self) -> str:
        return self.arm.name

    @property
    def fallback_for(self) -> str | None:
        return self.arm.fallback_for

    @property
    def unmet(self) -> list[str]:
        """The names of the requirements it did not meet."""
        return [r.name for r in self.failed_requirements]

    @cached_property
    def facts(self) -> ArmFacts:
        """Its verdict, failed and excused gates, pinning and qualification (``campaign.qualify``)."""
        return arm_facts(self.view if self.ran else None, met_requirements=self.status is ArmStatus.PASSED)

    @property
    def failed_requirements(self) -> list[Requirement]:
        return [r for r in self.requirements if not r.ok]

    def failure_text(self) -> str:
        """"kv_pool: 283,917 < 393,216" (every unmet requirement, ';'-joined)."""
        return "; ".join(f"{r.name}: {r.detail}" for r in self.failed_requirements)

    def to_dict(self) -> dict[str, Any]:
        report = self.report or {}
        run = report.get("run") or {}
        return {
            "name": self.arm.name,
            "recipe": self.arm.recipe_name,
            "role": "fallback" if self.arm.fallback_for else "primary",
            "fallback_for": self.arm.fallback_for,
            "requires": list(self.arm.requires),
            "status": self.status.value,
            "ran": self.ran,
            "reason": self.reason,
            "requirements": [r.to_dict() for r in self.requirements],
            "run_id": run.get("id") if self.report is not None else None,
            **self.facts.to_dict(),
        }


def decide_arms(campaign: Campaign, reports: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]) -> list[ArmDecision]:
    """Every arm's decision given the reports so far (pure: the same reports, the same answer)."""
    by_arm = reports_by_arm(campaign, reports)
    decisions: dict[str, ArmDecision] = {}
    stopped: str | None = None
    waiting: str | None = None
    previous: ArmDecision | None = None
    for arm in campaign.arms:
        if waiting is not None:
            decisions[arm.name] = ArmDecision(arm, ArmStatus.WAITING, f"waits for {waiting}")
            continue
        if stopped is not None:
            decisions[arm.name] = ArmDecision(arm, ArmStatus.SKIPPED, stopped)
            continue
        if arm.fallback_for is not None:
            primary = decisions[arm.fallback_for]
            if primary.status is ArmStatus.FAILED:
                reason = f"{arm.name} ran because {primary.arm.name} failed {primary.failure_text()}"
            elif primary.status is ArmStatus.PASSED:
                decisions[arm.name] = ArmDecision(
                    arm, ArmStatus.SKIPPED, f"{arm.name} skipped: {primary.arm.name} passed "
                    f"{', '.join(primary.arm.requires)}, so its fallback is not needed")
                continue
            else:
                decisions[arm.name] = ArmDecision(
                    arm, ArmStatus.SKIPPED, f"{arm.name} skipped: its primary {primary.arm.name} did not run "
                    f"({primary.reason})")
                continue
        elif previous is None:
            reason = f"{arm.name} ran as the first arm of the campaign"
        else:
            reason = f"{arm.name} ran after {previous.arm.name} {previous.status}"
        report = by_arm.get(arm.name)
        if report is None:
            decisions[arm.name] = ArmDecision(arm, ArmStatus.PENDING, reason.replace(" ran ", " runs ", 1))
            waiting = arm.name
            continue
        view = RunView.of(report)
        requirements = [evaluate_requirement(report, r, view) for r in arm.requires]
        status = ArmStatus.PASSED if all(r.ok for r in requirements) else ArmStatus.FAILED
        decision = ArmDecision(arm, status, reason, requirements, report, view)
        decisions[arm.name] = decision
        previous = decision
        if status is ArmStatus.FAILED:
            has_fallback = any(a.fallback_for == arm.name for a in campaign.arms)
            if not has_fallback and arm.stop_on_failure:
                stopped = (f"campaign stopped: {arm.name} failed {decision.failure_text()}"
                           + (" and has no fallback" if not arm.fallback_for else ""))
        elif arm.stop_on_success:
            stopped = f"campaign stopped: {arm.name} passed {', '.join(arm.requires)} (stop on success)"
    unexpected = [name for name, d in decisions.items() if d.status is ArmStatus.SKIPPED and name in by_arm]
    if unexpected:
        name = unexpected[0]
        raise CampaignError(f"campaign {campaign.name}: there is a report for arm {name}, but the campaign skipped it "
                            f"({decisions[name].reason}). Fix: run the arms in the order next_arm() gives.")
    return [decisions[a.name] for a in campaign.arms]


def reports_by_arm(campaign: Campaign, reports: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]
            ) -> dict[str, Mapping[str, Any]]:
    if isinstance(reports, Mapping):
        by_arm = {str(k): v for k, v in reports.items()}
    else:
        by_arm = {}
        for report in reports:
            run = report.get("run") or {}
            name = str(run.get("arm") or (report.get("recipe") or {}).get("name") or "")
            if name not in campaign.names:
                name = str((report.get("recipe") or {}).get("name") or name)
            if name in by_arm:
                raise CampaignError(f"campaign {campaign.name}: two reports for arm {name}")
            by_arm[name] = report
    unknown = [n for n in by_arm if n not in campaign.names]
    if unknown:
        raise CampaignError(f"campaign {campaign.name}: report(s) for {', '.join(unknown)}, which are not arms of "
                            f"this campaign ({', '.join(campaign.names)})")
    return by_arm


class CampaignPlan:
    """The running campaign: ``next_arm(reports_so_far)`` then, at the end, ``record()``."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self._reports: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]] = {}

    def next_arm(self, reports_so_far: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]]) -> str | None:
        """The arm to run now, or None when every arm has run or been skipped.

        ``reports_so_far`` maps arm name → report (or is a list of reports, keyed by
        ``run.arm``). The plan keeps them for :meth:`record`.
        """
        self._reports = reports_so_far
        for decision in decide_arms(self.campaign, reports_so_far):
            if decision.status is ArmStatus.PENDING:
                return decision.arm.name
        return None

    def decisions(self) -> list[ArmDecision]:
        return decide_arms(self.campaign, self._reports)

    def record(self, *, failed_tests: int | None = None) -> dict[str, Any]:
        """Which arm ran and why, per arm, which arm qualified, and the exit code that gives
        (plain JSON; ``failed_tests``: pytest's count, when the session knows it)."""
        decisions = self.decisions()
        pending = next((d.arm.name for d in decisions if d.status is ArmStatus.PENDING), None)
        passed = [d for d in decisions if d.status is ArmStatus.PASSED]
        stopped = next((d.reason for d in decisions if d.status is ArmStatus.SKIPPED and d.reason.startswith("campaign "
                                                                                                      "stopped")), None)
        if pending is not None:
            outcome = f"in progress: {pending} runs next"
        elif passed:
            last = passed[-1]
            outcome = f"{last.arm.name} met its requirements ({', '.join(last.arm.requires)})"
        else:
            outcome = "no arm met its requirements"
        record: dict[str, Any] = {
            "campaign": self.campaign.name,
            "description": self.campaign.description,
            "spec": self.campaign.spec(),
            "arms": [d.to_dict() for d in decisions],
            "ran": [d.arm.name for d in decisions if d.ran],
            "skipped": [d.arm.name for d in decisions if d.status is ArmStatus.SKIPPED],
            "pending": pending,
            "complete": pending is None,
            "stopped": stopped,
            "outcome": outcome,
            "reasons": [d.reason for d in decisions if d.status is not ArmStatus.WAITING],
        }
        record["qualified"] = qualified_arm(decisions, complete=pending is None)
        record["exit"] = campaign_exit(decisions, complete=pending is None, qualified=record["qualified"],
                                       failed_tests=failed_tests)
        return record


def requalify(record: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A written campaign record decided again by today's rules from its arms' reports (by arm
    name); its description and report file names are kept."""
    plan = CampaignPlan(parse_campaign_spec(str(record["spec"]), name=str(record["campaign"])))
    plan.next_arm(reports)
    again = plan.record()
    again["description"] = record.get("description", "")
    again["reports"] = dict(record.get("reports") or {})
    return again
