"""A campaign's arms within the session: which of them really run, decided arm by arm from the
reports written so far (a skipped arm keeps its reason), and at the end the campaign record, with
the arm that qualified and the exit code that gives (``campaign.qualify``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.campaign.decision import CampaignPlan
from pytest_vllmqual.campaign.spec import Campaign, campaigns_dir, load_campaign
from pytest_vllmqual.layout import shipped_campaigns_dir

from .arms import ArmSpec

__all__ = ["CampaignArms", "Reports"]

Reports = Mapping[str, Mapping[str, Any]]
"""The reports written so far, by arm key."""


class CampaignArms:
    """The running campaign of the session (``--campaign``)."""

    def __init__(self, campaign: Campaign) -> None:
        self.plan = CampaignPlan(campaign)
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

    def record(self, reports: Reports, report_files: Mapping[str, str], *,
               failed_tests: int | None = None) -> dict[str, Any]:
        """The campaign record: which arm ran and why, which qualified, the exit code that gives
        (``failed_tests``: pytest's count), and the file name of each arm's report."""
        self.plan.next_arm(reports)
        record = self.plan.record(failed_tests=failed_tests)
        record["reports"] = dict(report_files)
        return record
