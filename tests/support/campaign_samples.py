"""Campaign arm samples: the reference campaign's published reports, made into pinned arms."""

from __future__ import annotations

from typing import Any


def pin_revision(report: dict[str, Any]) -> None:
    """Add a matched hub-revision check to a reference report's identity.

    The published reference identity checks no hub revision, so today's rule calls the run
    unpinned and a campaign qualifies none of its arms; samples that test which arm qualifies
    for another reason check the recipe's revision first."""
    revision = report["identity"]["expected"]["revision"]
    report["identity"]["checks"].append({"field": "revision", "expected": revision, "observed": revision, "ok": True})
