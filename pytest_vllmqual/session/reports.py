"""An arm's run record and the files the session writes from it: one report per arm (with its
HTML page), the A/B comparison, the campaign record. The controller decides when; this module
turns arms into records and hands the finished dicts to ``report.writer``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_vllmqual.atomic_io import write_text_atomic
from pytest_vllmqual.clock import utc_now
from pytest_vllmqual.equivalence import PRIVATE_NAME, has_answers, layers_lines, publish
from pytest_vllmqual.equivalence.comparison import sidecar_arm
from pytest_vllmqual.launch.base import ProgressFn
from pytest_vllmqual.not_measured import (
    Measured,
    Unmeasured,
    equivalence_blocks,
    equivalence_unmeasured,
    is_not_measured,
)
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.records import RungRecord, RunMode, RunRecord, ServerStatus
from pytest_vllmqual.version import __version__

from .arms import Arm
from .server import ServerManager, death_words

if TYPE_CHECKING:
    from pytest_vllmqual.ab.drift import Reference
    from pytest_vllmqual.report.writer import ReportHooks

__all__ = ["SessionReports", "run_record"]


def run_record(arm: Arm, *, mode: RunMode, reproduce: str, deselected: Sequence[Mapping[str, str]]) -> RunRecord:
    """Arm ``arm``'s typed run record: its recipe, gates, server facts and lifecycle, and whether
    it is complete (with the reasons when it is not)."""
    record = RunRecord(
        run_id=arm.run_id,
        arm=arm.key,
        recipe_name=arm.recipe.name,
        recipe_path=str(arm.recipe.path),
        recipe_sha256=arm.recipe.sha256,
        recipe_content=arm.recipe.raw,
        started_utc=arm.started_utc,
        finished_utc=utc_now(),
        mode=mode,
        reproduce=reproduce,
        gates=list(arm.gates),
        private_dir=str(arm.private_dir),
        deselected_gates=[dict(d) for d in deselected if not any(g.gate == d["gate"] for g in arm.gates)],
        recipe_origin="discovered" if arm.recipe.discovered else "file",
        recipe_overrides=list(arm.recipe.overrides),
        recipe_file_sha256=arm.recipe.file_sha256,
    )
    for gate in arm.gates:
        for rung in gate.measurements.get("ladder", []) or []:
            record.ladder.append(RungRecord.from_dict(rung))
    reasons: list[str] = []
    if arm.interrupted:
        reasons.append("the session was interrupted before all gates ran")
    if arm.manager is not None:
        reasons.extend(_server_part(record, arm.manager, launcher_kind=arm.recipe.launcher.kind))
    if any(g.status in (ServerStatus.SERVER_DEAD, ServerStatus.HUNG) for g in arm.gates):
        reasons.append("gates ended early because the server was gone")
    record.status = "incomplete" if reasons else "complete"
    record.status_reasons = sorted(set(reasons), key=reasons.index)
    return record


def _server_part(record: RunRecord, manager: ServerManager, *, launcher_kind: str) -> list[str]:
    """Fill in what the arm's server manager knows (facts, lifecycle); the reasons it makes the
    record incomplete."""
    record.engine = manager.facts.engine
    record.endpoints = manager.facts.endpoints
    record.identity = manager.facts.identity
    record.fingerprint = manager.facts.fingerprint
    error = manager.startup_error
    record.lifecycle = {
        "launcher": manager.launcher.kind if manager.launcher else launcher_kind,
        "cold_start_s": manager.facts.cold_start_s,
        "startup_status": str(manager.startup_status),
        "startup_error": None if error is None else error.to_dict(),
        "teardown": manager.teardown.to_dict() if manager.teardown else None,
        "gpu_preflight": manager.gpu_preflight,
    }
    reasons: list[str] = []
    if error is not None:
        reasons.append(f"the server did not start ({error.status})")
    if manager.guard is not None:
        state = manager.guard.state()
        if state.get("status", "ok") != "ok":
            cause = death_words(state)
            reasons.append(f"{cause} [{state['status']}]")  # the status word, as a gate's error carries it
            record.lifecycle["server_state"] = {**state, "cause": cause}
    return reasons


def _arm_sanitizer(arm: Arm) -> Sanitizer:
    """A sanitizer that knows the arm server's API key and container id."""
    handle = arm.manager.handle if arm.manager is not None else None
    sanitizer = Sanitizer(known_secrets=[handle.api_key] if handle is not None and handle.api_key else [])
    if handle is not None:
        sanitizer.add_identifier("container_id", handle.container_id)
        sanitizer.add_endpoint(handle.base_url)
    sanitizer.keep(arm.recipe.name, arm.recipe.identity.served_model_name, arm.recipe.identity.checkpoint)
    return sanitizer


class SessionReports:
    """Writes the session's files under the reports directory, named with the session's stamp,
    and says each one on the terminal."""

    def __init__(self, reports_dir: Path, *, stamp: str, progress: ProgressFn,
                 hooks: ReportHooks | None = None) -> None:
        self.reports_dir = reports_dir
        self.stamp = stamp
        self.progress = progress
        self.hooks = hooks
        self.comparison: dict[str, Any] | None = None
        self.comparison_path: Path | None = None
        self.drift: dict[str, Any] | None = None
        """The drift section of the arm held against ``--vllmqual-reference``, once written."""

    def write_arm(self, arm: Arm, record: RunRecord, *, name: str, reference: Reference | None = None) -> Path:
        """Build (through the hooks), sanitize, validate and atomically write one arm's report as
        ``NAME-STAMP.json``, then its HTML page; the arm keeps both the path and the report. With
        ``reference`` (``--vllmqual-reference``) the report carries its ``drift`` section."""
        from pytest_vllmqual.launch.gpu import hardware_summary
        from pytest_vllmqual.report.writer import hooked_arm_report, write_arm_report

        record.hardware = hardware_summary(arm.recipe.gpu_indexes())
        sanitizer = _arm_sanitizer(arm)
        report = hooked_arm_report(record, sanitizer=sanitizer, tool_version=__version__, hooks=self.hooks)
        target = self.reports_dir / f"{name}-{self.stamp}.json"
        probe = arm.private_dir / PRIVATE_NAME
        if has_answers(arm.private_dir):  # the probe's, the item bank's and the replay's answers: a sidecar
            report["equivalence_probe"] = publish(probe, sidecar_arm(report), target, scrub=sanitizer.scrub_obj)
            self.progress(f"probe sidecar written: {target.parent / report['equivalence_probe']['file']}")
        if reference is not None:
            from pytest_vllmqual.ab.drift import drift_line, drift_section
            from pytest_vllmqual.equivalence import tasks_line
            from pytest_vllmqual.report.junit import equivalence_junit

            report["drift"] = self.drift = sanitizer.scrub_obj(drift_section(reference, report, target.parent))
            junit = write_text_atomic(equivalence_junit(self.drift, drift_line(self.drift), name="drift",
                                                        title="vllmqual drift"),
                                      target.with_suffix(".drift.xml"), what="drift junit")
            self.progress(f"{drift_line(self.drift)} (junit: {junit})")
            if isinstance(self.drift.get("tasks"), dict):
                self.progress(tasks_line(self.drift["tasks"], label="drift tasks"))
        path = write_arm_report(report, target)
        arm.report_path = path
        arm.report = report
        self.progress(f"report written: {path}")
        self.write_html(report, path.with_suffix(".html"))
        return path

    def write_html(self, report: dict[str, Any], path: Path, comparison: dict[str, Any] | None = None) -> None:
        from pytest_vllmqual.report.writer import write_html

        write_html(report, path, comparison=comparison)
        self.progress(f"HTML report written: {path}")

    def write_comparison(self, control: Arm, candidate: Arm, replay: Arm | None) -> Path | None:
        """Compare control and candidate (and the replay) into comparison.json and its page; None
        while either report is missing."""
        from pytest_vllmqual.ab.compare import compare_reports, write_comparison_atomic
        from pytest_vllmqual.equivalence import depth_lines, tasks_line
        from pytest_vllmqual.equivalence.comparison import summary_line
        from pytest_vllmqual.report.junit import equivalence_junit

        if control.report is None or candidate.report is None:
            return None
        arms = {"control": control, "candidate": candidate, "replay": replay}
        self.comparison = compare_reports(control.report, candidate.report,
                                          replay=replay.report if replay is not None else None,
                                          folders={role: arm.report_path.parent for role, arm in arms.items()
                                                   if arm is not None and arm.report_path is not None})
        path = self.reports_dir / f"comparison-{self.stamp}.json"
        write_comparison_atomic(self.comparison, path)
        self.comparison_path = path
        self.progress(f"comparison written: {path}")
        line = summary_line(self.comparison["equivalence"])
        junit = write_text_atomic(equivalence_junit(self.comparison["equivalence"], line), path.with_suffix(".xml"),
                                  what="comparison junit")
        self.progress(f"{line} (junit: {junit})")
        tasks = self.comparison["equivalence"].get("tasks")
        if isinstance(tasks, dict):
            self.progress(tasks_line(tasks))
        for text in [*depth_lines(self.comparison["equivalence"]), *layers_lines(self.comparison["equivalence"])]:
            self.progress(text)
        self.write_html(candidate.report, path.with_suffix(".html"), comparison=self.comparison)
        return path

    @property
    def not_equivalent(self) -> bool:
        """The rule that may block (``compare.promotion``) failed in the comparison, or in the drift
        check of this run against its reference (the session must fail)."""
        sections = [(self.comparison or {}).get("equivalence") or {}, self.drift or {}]
        return any(equivalence_blocks(section) is Measured.FAILED for section in sections if section)

    def unmeasured(self, arms: Sequence[Arm]) -> list[Unmeasured]:
        """Every check of the session that was not measured (the rule of ``not_measured``): each
        arm's gates skipped as ``not measured: ...``, then the drift check and the A/B's equivalence."""
        found = [Unmeasured(f"gate {gate.get('gate')} ({arm.key})", str(gate.get("reason")).splitlines()[0])
                 for arm in arms for gate in (arm.report or {}).get("gates") or []
                 if gate.get("outcome") == "skipped" and is_not_measured(gate.get("reason"))]
        name = ((self.drift or {}).get("reference") or {}).get("report") or "the reference"
        sections = [equivalence_unmeasured(f"drift against {name}", self.drift),
                    equivalence_unmeasured("equivalence (A/B comparison)", (self.comparison or {}).get("equivalence"))]
        return found + [section for section in sections if section is not None]

    def write_campaign_record(self, record: dict[str, Any]) -> Path:
        """The campaign record, beside the arm reports."""
        from pytest_vllmqual.report.writer import write_campaign_record

        path = write_campaign_record(record, self.reports_dir / f"campaign-{self.stamp}.json")
        self.progress(f"campaign record written: {path} ({record['outcome']}; qualified: {record['qualified'] or 'none'})")
        return path

    def promotion_sections(self) -> list[tuple[str, list[str]]]:
        """The terminal's decision: for the A/B and the drift check, the rule that may block
        (``compare.promotion``) with its status, then each layer's (the record's words, shown as written)."""
        name = ((self.drift or {}).get("reference") or {}).get("report") or "the reference"
        found = [("promotion (A/B comparison)", layers_lines((self.comparison or {}).get("equivalence") or {})),
                 (f"promotion (drift against {name})", layers_lines(self.drift or {}, label="drift promotion"))]
        return [(title, lines) for title, lines in found if lines]

    def summary_sections(self, arms: Sequence[Arm]) -> list[tuple[str, list[str]]]:
        """The terminal summary: each arm with a report, then the A/B comparison."""
        from pytest_vllmqual.ab.compare import render_markdown
        from pytest_vllmqual.report.writer import summary_sections

        titled = [(arm.recipe.name if arm.key == arm.recipe.name else f"{arm.key} ({arm.role})", arm.report,
                   arm.report_path) for arm in arms if arm.report is not None]
        comparison = None if self.comparison is None else (render_markdown(self.comparison), self.comparison_path)
        return summary_sections(titled, comparison=comparison)
