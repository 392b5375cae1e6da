"""Drift against a reference record (``--vllmqual-reference``) on recorded sidecars built here: the
same probe is equivalent with every difference at zero, a changed sidecar is not equivalent naming
the figure, another probe or checkpoint is not measurable saying which, and a reference whose
sidecar changed after the report was written is refused. Also the controller's whole path: one
run's report becomes the next run's reference, and a drift that fails the rule compare.promotion
names (tokens by default: not equivalent) fails the session."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, UNIT_DATA
from support.equivalence_samples import PIN, attach_probe, probe_body

from pytest_vllmqual.ab.drift import NO_FLOOR, Reference, drift_line, drift_section, load_reference
from pytest_vllmqual.equivalence.sidecar import PRIVATE_NAME
from pytest_vllmqual.errors import ComparisonError, VllmQualError
from pytest_vllmqual.recipe.loader import resolve_recipe
from pytest_vllmqual.report.public import validate_report
from pytest_vllmqual.session.controller import ControllerRun
from pytest_vllmqual.session.settings import resolve_settings
from unit.report.test_html_page import table_rows

RECIPES = ROOT / "fixtures" / "recipes"
REPORTS = UNIT_DATA / "reference_reports"


def arm_report() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REPORTS / "control-8192.json").read_text())
    return data


def write_reference(folder: Path, body: dict[str, Any], *, pin: str | None = PIN) -> Path:
    """An earlier run's report and its sidecar, as that run left them."""
    report = attach_probe(arm_report(), folder, "earlier", body, pin=pin)
    path = folder / "earlier.json"
    path.write_text(json.dumps(report))
    return path


def drift(tmp_path: Path, earlier: dict[str, Any], now: dict[str, Any] | None, *,
          pin: str | None = PIN) -> dict[str, Any]:
    reference = load_reference(write_reference(tmp_path / "then", earlier))
    report = arm_report()
    if now is not None:
        attach_probe(report, tmp_path / "now", "now", now, pin=pin)
    return drift_section(reference, report, tmp_path / "now")


def figure(section: dict[str, Any], key: str) -> dict[str, Any]:
    return next(f for f in section["figures"] if f["figure"] == key)


def test_the_same_probe_is_equivalent_with_every_difference_at_zero(tmp_path: Path) -> None:
    section = drift(tmp_path, probe_body(), probe_body())
    assert section["verdict"] == "equivalent"
    assert figure(section, "top1_agreement")["point"] == 100.0
    for key in ("ln_ppl_ratio", "rms_delta_p", "kl_lower_bound"):
        assert figure(section, key)["point"] == figure(section, key)["high"] == 0.0, key
    for key, units in (("hard_divergence", 8), ("flips", 14)):  # counts: 0 events, an exact upper bound above 0
        checked = figure(section, key)
        assert (checked["point"], checked.get("events"), checked.get("units"), checked["status"]) == (0.0, 0, units, "within")
        assert checked["high"] == pytest.approx(100 * (1 - 0.025 ** (1 / units)), abs=0.001)
    assert section["floor"] == {"status": "not measured", "reason": NO_FLOOR}
    assert all(f["floor"] is None for f in section["figures"])
    assert section["reference"]["report"] == "earlier.json" and section["reference"]["sidecar"] == "earlier.probe.json.gz"
    assert section["thresholds"]["source"].startswith("default: llama.cpp")
    assert drift_line(section).startswith("drift against earlier.json: equivalent: every exact figure within")
    report = arm_report()
    report["drift"] = section
    validate_report(report)  # an optional section of the report schema, its version unchanged


def test_a_changed_sidecar_is_not_equivalent_and_names_the_figure(tmp_path: Path) -> None:
    section = drift(tmp_path, probe_body(), probe_body(swap_top=True))
    assert section["verdict"] == "not equivalent"
    assert section["reasons"][0].startswith("top-1 agreement 75.0% [") and "below 97.7%" in section["reasons"][0]
    assert figure(section, "top1_agreement")["status"] == "beyond"
    line = drift_line(section)
    assert line.startswith("drift against earlier.json: not equivalent: top-1 agreement 75.0%")
    assert line.endswith("; A/A floor not measured")
    assert section["arms"]["control"]["probe_sha256"] == section["arms"]["candidate"]["probe_sha256"]


@pytest.mark.parametrize(("now", "pin", "says"), [
    (probe_body(probe="q" * 64), PIN, "the two runs answered different probes (probe hash pppppppppppp… vs qqqq"),
    (probe_body(), "cd" * 32, "the two runs differ in checkpoint pin (content digest abababababab… vs "
                              "content digest cdcdcdcdcdcd…)"),
    (probe_body(top_k=0), PIN, "this run's server returned no log probabilities (K = 0)"),
    (None, PIN, "this run ran no equivalence probe"),
])
def test_another_probe_or_checkpoint_is_not_measurable_and_says_which(tmp_path: Path, now: dict[str, Any] | None,
                                                                      pin: str, says: str) -> None:
    section = drift(tmp_path, probe_body(), now, pin=pin)
    assert section["verdict"] == "not measurable"
    assert section["reasons"][0].startswith(says), section["reasons"]
    assert section["figures"] == []
    assert drift_line(section).startswith(f"drift against earlier.json: not measurable: {says}")


def test_a_reference_whose_sidecar_changed_is_refused(tmp_path: Path) -> None:
    path = write_reference(tmp_path, probe_body())
    sidecar = tmp_path / "earlier.probe.json.gz"
    sidecar.write_bytes(gzip.compress(gzip.decompress(sidecar.read_bytes()).replace(b'"synthetic"', b'"edited"')))
    with pytest.raises(ComparisonError, match=r"the reference .*earlier\.json: its probe sidecar earlier\.probe\.json\.gz "
                                              r"does not match the SHA-256 the report recorded\. Fix:"):
        load_reference(path)


def test_a_reference_that_is_not_a_probed_report_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ComparisonError, match="does not exist"):
        load_reference(tmp_path / "missing.json")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(arm_report()))
    with pytest.raises(ComparisonError, match="ran no equivalence probe"):
        load_reference(plain)
    gone = write_reference(tmp_path / "gone", probe_body())
    (gone.parent / "earlier.probe.json.gz").unlink()
    with pytest.raises(ComparisonError, match="is not beside the report"):
        load_reference(gone)


# -- the session's path: one run's report is the next run's reference ------------------------------


class PinHook:
    """A conftest's report hook that pins the checkpoint (no server ran, so identity knows no digest)."""

    def generate(self, record: Any) -> None:
        return None

    def update(self, report: dict[str, Any]) -> None:
        report["identity"]["model_files"] = {"content": PIN}


SCORED = ("smoke", "json", "tools", "quality_intelligence", "quality_session_recall", "quality_tools")
"""Gates of the functional and quality families: six items each run scores, so flips are measured."""


def session(reports: Path, body: dict[str, Any], reference: Path | None,
            scored: tuple[str, ...] = SCORED) -> tuple[ControllerRun, Any, list[str]]:
    settings = resolve_settings(rootdir=ROOT, env={}, cli_recipe="tiny-cpu", ini_recipe=None, cli_reports=str(reports),
                                ini_reports=None, cli_endpoint=None, cli_recipes_dir=str(RECIPES), ini_recipes_dir=None)
    lines: list[str] = []
    run = ControllerRun(settings, resolve_recipe("tiny-cpu", RECIPES), progress=lines.append, invocation_args=[],
                        hooks=PinHook())
    run.plan_arms(ab=None, bracket=False, campaign=None, rootdir=ROOT,
                  reference=str(reference) if reference is not None else None)
    run.add_gate("tiny-cpu", {"nodeid": "t.py::test_probe", "gate": "equivalence_probe", "arm": "tiny-cpu",
                              "outcome": "passed", "measurements": {}})
    for gate in scored:
        run.add_gate("tiny-cpu", {"nodeid": f"t.py::test_{gate}", "gate": gate, "arm": "tiny-cpu",
                                  "outcome": "passed", "measurements": {}})
    private = run.arm("tiny-cpu").private_dir / PRIVATE_NAME
    private.parent.mkdir(parents=True, exist_ok=True)
    private.write_text(json.dumps(body))
    return run, run.finish_session(interrupted=False, failed_tests=0), lines


def test_the_session_writes_the_drift_and_fails_when_not_equivalent(tmp_path: Path) -> None:
    _, end, _ = session(tmp_path / "night-1", probe_body(), None)
    assert end is None
    (earlier,) = (tmp_path / "night-1").glob("tiny-cpu-*Z.json")
    verdict = json.loads(earlier.read_text())["decision"]["verdict"]
    run, end, lines = session(tmp_path / "night-2", probe_body(), earlier)
    assert end is None and run.reports.drift is not None and run.reports.drift["verdict"] == "equivalent"
    run, end, lines = session(tmp_path / "night-2b", probe_body(), earlier, scored=())
    assert end is None and run.reports.drift is not None and run.reports.drift["verdict"] == "inconclusive"
    assert run.reports.drift["reasons"][0].startswith("flips not measured: 0 items scored in both arms")
    run, end, lines = session(tmp_path / "night-3", probe_body(shift=0.2, swap_top=True), earlier)
    assert end == "not_equivalent"
    (path,) = (tmp_path / "night-3").glob("tiny-cpu-*Z.json")
    report = json.loads(path.read_text())
    assert report["drift"]["verdict"] == "not equivalent" and report["drift"]["reference"]["report"] == earlier.name
    assert report["decision"]["verdict"] == verdict  # the same gates: the drift leaves the verdict alone
    assert any(line.startswith(f"drift against {earlier.name}: not equivalent: ") for line in lines)
    page = path.with_suffix(".html").read_text()
    assert 'id="drift"' in page and 'id="drift-kl-histogram"' in page
    assert [row[0] for row in table_rows(page, "drift-arms")[1:]] == ["reference run", "this run"]
    assert "A/A floor <b>not measured</b>: a drift check has no A/A floor" in page


def test_a_reference_with_an_ab_or_campaign_is_refused(tmp_path: Path) -> None:
    earlier = write_reference(tmp_path, probe_body())
    settings = resolve_settings(rootdir=ROOT, env={}, cli_recipe="tiny-cpu", ini_recipe=None, cli_reports=str(tmp_path),
                                ini_reports=None, cli_endpoint=None, cli_recipes_dir=str(RECIPES), ini_recipes_dir=None)
    run = ControllerRun(settings, resolve_recipe("tiny-cpu", RECIPES), progress=lambda line: None, invocation_args=[])
    with pytest.raises(VllmQualError, match="--vllmqual-reference holds one run against an earlier one; --ab plans"):
        run.plan_arms(ab="tiny-cpu,tiny-cpu-4096", bracket=False, campaign=None, rootdir=ROOT, reference=str(earlier))
    assert isinstance(load_reference(earlier), Reference)
