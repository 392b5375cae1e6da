"""Drift against a reference record: does this run answer the equivalence probe as an earlier run did?

After a runtime or image upgrade, and in nightly re-qualification, the question is not how two
arms of one session compare but whether today's server still answers as the recorded one did.
``--vllmqual-reference REPORT.json`` names the earlier run's public report; its probe sidecar
(beside it, checked against the SHA-256 the report's ``equivalence_probe`` recorded) is the
control and this run's sidecar the candidate. The figures, intervals and verdict words are those
of a comparison's equivalence section, against this run's recipe ``compare.equivalence`` (the
thresholds the operator holds the server to now). There is no A/A floor: the reference run's own
restart was not measured, so every figure is read against its threshold alone.

The two runs must have answered the same probe (its hash) on the same checkpoint (its pin);
otherwise the drift is ``not measurable`` and says which differs.

The drift does not change this run's verdict: the verdict rates the run on its own gates (as an
A/B's equivalence finding leaves each arm's verdict alone), so that a report is decided the same
whichever reference it was held against. The rule this run's recipe names in ``compare.promotion``
decides instead (:mod:`pytest_vllmqual.equivalence.layers`; by default ``tokens``, so ``not
equivalent``): failed fails the session (a non-zero exit) and stands in the report's ``drift``
section, the page and the terminal beside the verdict; a rule not measured (``not measurable`` and
``inconclusive`` under ``tokens``) is a check not measured (:mod:`pytest_vllmqual.not_measured`):
junit skips it as ``not measured: ...``, the terminal names it last, and the exit is 0 unless
``--vllmqual-strict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllmqual.equivalence import PromotionSettings, TaskSettings, Thresholds, load_sidecar
from pytest_vllmqual.equivalence.comparison import ArmWords, equivalence_section, summary_line
from pytest_vllmqual.errors import ComparisonError
from pytest_vllmqual.hashing import sha256_file
from pytest_vllmqual.report.query import recipe_value

from .compare import load_arm_report

__all__ = ["EFFECT", "NO_FLOOR", "Reference", "drift_line", "drift_section", "load_reference"]

NO_FLOOR = "a drift check has no A/A floor (the reference run's own restart was not measured)"
EFFECT = ("The drift does not change this run's verdict (it rates the run's own gates); the rule the recipe's "
          "compare.promotion names decides (tokens by default: not equivalent): failed fails the session, and "
          "not measured is neither a pass nor a failure, exit 0 unless --vllmqual-strict.")
_WORDS = ArmWords(control="the reference run", candidate="this run", both="the two runs", plural="runs")


@dataclass(frozen=True)
class Reference:
    """The earlier run: its report, the report file's SHA-256, and its probe sidecar (already checked)."""

    path: Path
    report: dict[str, Any]
    report_sha256: str
    sidecar: dict[str, Any]


def load_reference(path: Path) -> Reference:
    """Read the reference report and its probe sidecar; a ComparisonError names what is wrong and the fix."""
    path = Path(path)
    report = load_arm_report(path, "reference")
    pointer = report.get("equivalence_probe")
    if not isinstance(pointer, Mapping) or not pointer.get("probe_sha256"):  # a sidecar of the item bank alone
        raise ComparisonError(f"the reference {path} ran no equivalence probe (its report has no equivalence_probe). "
                              "Fix: pass the report of a run that included the equivalence gate.")
    sidecar, why = load_sidecar(pointer, path.parent)
    if sidecar is None:
        raise ComparisonError(f"the reference {path}: {why}. Fix: keep the report and its probe sidecar together, "
                              "as the run wrote them.")
    return Reference(path, report, sha256_file(path), sidecar)


def _this_run(report: Mapping[str, Any], folder: Path) -> dict[str, Any] | str:
    pointer = report.get("equivalence_probe")
    if not isinstance(pointer, Mapping):
        return "this run ran no equivalence probe (the equivalence gate did not run)"
    body, why = load_sidecar(pointer, folder)
    return body if body is not None else f"this run: {why}"


def drift_section(reference: Reference, report: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The report's ``drift`` section: the reference run as the control, this run (its report, its
    sidecar in ``folder``) as the candidate."""
    found = {"control": reference.sidecar, "candidate": _this_run(report, folder)}
    thresholds = Thresholds.from_recipe(recipe_value(report, "compare", "equivalence"), recipe="this run's recipe")
    settings = TaskSettings.from_recipe(recipe_value(report, "compare"), recipe="this run's recipe")
    promotion = PromotionSettings.from_recipe(recipe_value(report, "compare"), recipe="this run's recipe")
    section = equivalence_section(reference.report, report, None, found, thresholds=thresholds, words=_WORDS,
                                  no_floor=NO_FLOOR, task_settings=settings, promotion=promotion)
    run = reference.report.get("run") or {}
    pointer = reference.report.get("equivalence_probe") or {}
    section["reference"] = {"report": reference.path.name, "report_sha256": reference.report_sha256,
                            "run_id": run.get("id"), "recipe": (reference.report.get("recipe") or {}).get("name"),
                            "started_utc": run.get("started_utc"), "sidecar": pointer.get("file"),
                            "sidecar_sha256": pointer.get("sha256")}
    section["effect"] = EFFECT
    return section


def drift_line(section: Mapping[str, Any]) -> str:
    """``drift against R.json: not equivalent: top-1 agreement 84.4% [83.1, 85.6] below 97.7%; A/A floor not measured``."""
    name = (section.get("reference") or {}).get("report") or "the reference"
    return summary_line(section, label=f"drift against {name}")

