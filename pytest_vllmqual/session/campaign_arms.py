"""A campaign's arms within the session: which of them really run, decided arm by arm from the
reports written so far (a skipped arm keeps its reason), and at the end the campaign record and
the line that says how the campaign ended."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.campaign.plan import (
    Campaign,
    CampaignPlan,
    campaigns_dir,
    load_campaign,
    qualified_by_fallback,
)
from pytest_vllmqual.layout import shipped_campaigns_dir

from .arms import ArmSpec

__all__ = ["CampaignArms", "Reports"]

Reports = Mapping[str, Mapping[str, Any]]
"""The reports written so far, by arm key."""


class CampaignArms:
    """The running campaign of the session (``--campaign``)."""

    def __init__(self, campaign: Campaign) -> None:
        self.plan: CampaignPlan = campaign.plan()
        #: Every arm of the campaign in order; which of them run is decided arm by arm.
        self.specs = [ArmSpec(a.name, a.recipe_name, "campaign") for a in campaign.arms]
        #: Arms decided not to run, with the reason: decided once, at the arm's first test, and
        #: kept (the skipped test itself leaves a gate record on the arm).
        self.skips: dict[str, str] = {}

    @classmethod
    def load(cls, value: str, *, rootdir: Path) -> CampaignArms:
        """The campaign named or spelled by ``--campaign`` (the project's campaigns, then the shipped ones)."""
        return cls(load_campaign(value, search_dirs=[campaigns_dir(rootdir), shipped_campaigns_dir()]))

    def decide(self, key: str, reports: Reports) -> str | None:
        """Whether arm ``key`` runs now, given the reports so far: None when it does, else why not
        (remembered: the arm's later tests are skipped for the same reason)."""
        if self.plan.next_arm(reports) == key:
            return None
        reason = next((str(d.reason) for d in self.plan.decisions() if d.arm.name == key),
                      f"campaign arm {key} does not run")
        self.skips[key] = reason
        return reason

    def record(self, reports: Reports, report_files: Mapping[str, str]) -> dict[str, Any]:
        """The campaign record: which arm ran and why, and the file name of each arm's report."""
        self.plan.next_arm(reports)
        record = self.plan.record()
        record["reports"] = dict(report_files)
        return record

    def outcome(self, reports: Reports) -> tuple[str | None, bool]:
        """At the end: the line to print, and whether a fallback arm qualified in place of the
        failed one (then the session exits 0)."""
        self.plan.next_arm(reports)
        record = self.plan.record()
        arm = qualified_by_fallback(record)
        if arm is not None:
            failed = [a["name"] for a in record["arms"] if a.get("status") == "failed"]
            return f"campaign: {arm} qualified (fallback for {', '.join(failed)}, which failed); exit 0", True
        if record.get("complete"):
            passed = [a["name"] for a in record["arms"] if a.get("status") == "passed"]
            return f"campaign: {'qualified: ' + ', '.join(passed) if passed else 'no arm qualified'}", False
        return None, False
