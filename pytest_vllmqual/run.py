"""One pytest session's qualification run: arms, their servers, their records, their reports.

An *arm* is one recipe run in this session (the default recipe, a ``recipe`` marker's
recipe, or an A/B arm). At most one arm's server is alive at a time. Gate records arrive
as dicts (from this process or from xdist workers) and are merged per arm; at the end each
arm gets its own sanitized report.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .errors import RecipeError
from .launch.base import ProgressFn
from .recipe import Recipe, resolve_recipe, with_overrides
from .records import GateRecord, RungRecord, RunRecord
from .session import ServerManager, make_run_id, utc_now, utc_stamp
from .settings import Settings


@dataclass(frozen=True)
class ArmSpec:
    """One planned arm: its key (unique in the session), recipe and role in the A/B."""

    key: str
    recipe: str
    role: str


def ab_plan(spec: str, *, bracket: bool) -> list[ArmSpec]:
    """``--ab CONTROL,CANDIDATE`` (``--bracket``: control again after the candidate)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if len(names) != 2:
        raise RecipeError(
            f"--ab takes exactly two recipes, CONTROL,CANDIDATE; got {spec!r}. "
            "Fix: e.g. --ab=131k-control,131k-4096 (add --bracket to replay the control after the candidate).")
    plan = [ArmSpec(f"A-{names[0]}", names[0], "control"), ArmSpec(f"B-{names[1]}", names[1], "candidate")]
    if bracket:
        plan.append(ArmSpec(f"A2-{names[0]}", names[0], "replay"))
    return plan


@dataclass
class Arm:
    """One recipe's run within the session."""

    key: str
    recipe: Recipe
    role: str
    run_id: str
    private_dir: Path
    started_utc: str
    manager: ServerManager | None = None
    gates: list[GateRecord] = field(default_factory=list)
    interrupted: bool = False
    report_path: Path | None = None
    report: dict[str, Any] | None = None


class QualRun:
    """The controller-side state of a session (see module docstring)."""

    def __init__(self, settings: Settings, default_recipe: Recipe, *, progress: ProgressFn,
                 invocation_args: list[str]) -> None:
        self.settings = settings
        self.default_recipe = default_recipe
        self.progress = progress
        self.invocation_args = invocation_args
        self.stamp = utc_stamp()
        self.arms: dict[str, Arm] = {}
        self._recipes: dict[str, Recipe] = {default_recipe.name: default_recipe}
        self.active: Arm | None = None
        self.plan: list[ArmSpec] = []
        self.campaign: Any = None
        self.campaign_path: Path | None = None
        #: Campaign arms decided not to run, with the reason: decided once, at the arm's first
        #: test, and kept (the skipped test itself leaves a gate record on the arm).
        self.campaign_skips: dict[str, str] = {}
        self.comparison_path: Path | None = None
        self.comparison: dict[str, Any] | None = None
        self.on_arm_done: Callable[[Arm], None] | None = None
        self.generate: Callable[[RunRecord], dict[str, Any] | None] | None = None
        self.update: Callable[[dict[str, Any]], object] | None = None
        self.deselected: dict[str, list[dict[str, str]]] = {}
        """Per arm key: gates pytest deselected (-m/-k), with the reason."""

    def set_plan(self, plan: list[ArmSpec]) -> None:
        """Plan arms run in order (A/B, bracketed replay); loads every recipe now (fail fast)."""
        for spec in plan:
            self.recipe(spec.recipe)
        self.plan = plan

    # -- recipes and arms ---------------------------------------------------------------

    def recipe(self, name: str) -> Recipe:
        """A recipe by name, loaded once (RecipeError on bad input)."""
        if name not in self._recipes:
            self._recipes[name] = with_overrides(resolve_recipe(name, self.settings.recipes_dir),
                                                 self.settings.overrides)
        return self._recipes[name]

    def set_campaign(self, campaign: Any) -> None:
        """Plan a campaign's arms in order; which of them really run is decided arm by arm."""
        self.set_plan([ArmSpec(a.name, a.recipe_name, "campaign") for a in campaign.arms])
        self.campaign = campaign.plan()

    def finish_other_arms(self, key: str) -> None:
        """Before arm ``key`` starts: stop the active arm and write its report (one server at a time)."""
        if self.active is not None and self.active.key != key and self.active.report_path is None:
            if self.active.manager is not None:
                self.active.manager.stop()
            if self.on_arm_done is not None:
                self.on_arm_done(self.active)

    def campaign_skip_reason(self, key: str) -> str | None:
        """Why campaign arm ``key`` must not run now (None: it runs). Reports written so far decide."""
        if self.campaign is None:
            return None
        if key in self.campaign_skips:
            return self.campaign_skips[key]
        if key in self.arms and (self.arms[key].manager is not None or self.arms[key].gates):
            return None
        self.finish_other_arms(key)
        done = {k: a.report for k, a in self.arms.items() if a.report is not None}
        next_arm = self.campaign.next_arm(done)
        if next_arm == key:
            return None
        reason = next((str(d.reason) for d in self.campaign.decisions() if d.arm.name == key),
                      f"campaign arm {key} does not run")
        self.campaign_skips[key] = reason
        return reason

    def write_campaign_record(self) -> Path | None:
        """The campaign record: which arm ran and why (written beside the arm reports)."""
        from .atomic_io import write_text_atomic

        if self.campaign is None:
            return None
        done = {k: a.report for k, a in self.arms.items() if a.report is not None}
        self.campaign.next_arm(done)
        record = self.campaign.record()
        record["reports"] = {k: str(a.report_path.name) for k, a in self.arms.items() if a.report_path}
        path = self.settings.reports_dir / f"campaign-{self.stamp}.json"
        write_text_atomic(json.dumps(record, indent=2, sort_keys=True) + "\n", path, what="campaign record")
        self.campaign_path = path
        self.progress(f"campaign record written: {path} ({record['outcome']})")
        return path

    def arm(self, key: str) -> Arm:
        if key not in self.arms:
            spec = next((s for s in self.plan if s.key == key), None)
            recipe = self.recipe(spec.recipe if spec else key)
            run_id = f"{key}-{self.stamp}-{os.getpid()}"
            self.arms[key] = Arm(
                key=key, recipe=recipe, role=spec.role if spec else "single", run_id=run_id,
                private_dir=self.settings.reports_dir / "private" / run_id,
                started_utc=utc_now(),
            )
        return self.arms[key]

    def activate(self, arm: Arm) -> ServerManager:
        """Make ``arm`` the one with a live server, stopping any other first (exclusive GPUs)."""
        if self.active is not None and self.active is not arm and self.active.manager is not None:
            self.progress(f"stopping {self.active.key} before starting {arm.key} (one server at a time)")
            self.active.manager.stop()
            if self.on_arm_done is not None:
                self.on_arm_done(self.active)
        if arm.manager is None:
            arm.private_dir.mkdir(parents=True, exist_ok=True)
            arm.manager = ServerManager(arm.recipe, run_id=arm.run_id, private_dir=arm.private_dir,
                                        endpoint=self.settings.endpoint.value, progress=self.progress)
        self.active = arm
        return arm.manager

    def add_gate(self, arm_key: str, record: dict[str, Any]) -> None:
        self.arm(arm_key).gates.append(GateRecord.from_dict(record))

    def reproduce_line(self, recipe_name: str) -> str:
        if self._recipes.get(recipe_name) is not None and self._recipes[recipe_name].discovered:
            return shlex.join(["pytest", *self.invocation_args])  # rediscovered from the same endpoint
        args = [a for a in self.invocation_args if not a.startswith("--recipe")]
        skip_next = False
        kept: list[str] = []
        for arg in args:
            if skip_next:
                skip_next = False
                continue
            if arg == "--recipe":
                skip_next = True
                continue
            kept.append(arg)
        return shlex.join(["pytest", f"--recipe={recipe_name}", *kept])

    # -- the end ------------------------------------------------------------------------

    def stop_all(self) -> None:
        for arm in self.arms.values():
            if arm.manager is not None:
                arm.manager.stop()

    def run_record(self, arm: Arm) -> RunRecord:
        manager = arm.manager
        record = RunRecord(
            run_id=arm.run_id,
            arm=arm.key,
            recipe_name=arm.recipe.name,
            recipe_path=str(arm.recipe.path),
            recipe_sha256=arm.recipe.sha256,
            recipe_content=arm.recipe.raw,
            started_utc=arm.started_utc,
            finished_utc=utc_now(),
            mode="direct-only" if self.settings.endpoint.value else "managed",
            reproduce=self.reproduce_line(arm.recipe.name),
            gates=list(arm.gates),
            private_dir=str(arm.private_dir),
            deselected_gates=[d for d in self.deselected.get(arm.key, [])
                              if not any(g.gate == d["gate"] for g in arm.gates)],
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
        if manager is not None:
            record.engine = manager.facts.engine
            record.endpoints = manager.facts.endpoints
            record.identity = manager.facts.identity
            record.lifecycle = {
                "launcher": manager.launcher.kind if manager.launcher else arm.recipe.launcher.kind,
                "cold_start_s": manager.facts.cold_start_s,
                "startup_status": manager.startup_status,
                "startup_error": None if manager.startup_error is None else {
                    "status": manager.startup_error.status,
                    "message": str(manager.startup_error.args[0]) if manager.startup_error.args else "",
                    "exit_code": manager.startup_error.exit_code,
                    "log_tail": manager.startup_error.log_tail,
                    "hint": manager.startup_error.hint,
                    "details": manager.startup_error.details,
                },
                "teardown": manager.teardown.to_dict() if manager.teardown else None,
                "gpu_preflight": manager.gpu_preflight,
            }
            if manager.startup_error is not None:
                reasons.append(f"the server did not start ({manager.startup_error.status})")
            if manager.guard is not None:
                state = manager.guard.state()
                if state.get("status", "ok") != "ok":
                    reasons.append(f"the server became {state['status']} during the run: {state.get('detail', '')}")
                    record.lifecycle["server_state"] = state
        if any(g.status in ("server_dead", "hung") for g in arm.gates):
            reasons.append("gates ended early because the server was gone")
        record.status = "incomplete" if reasons else "complete"
        record.status_reasons = sorted(set(reasons), key=reasons.index)
        return record

    def write_reports(self) -> list[Path]:
        """Write every arm's report not written yet (see ``write_arm_report``)."""
        written: list[Path] = []
        for arm in self.arms.values():
            path = self.write_arm_report(arm)
            if path is not None:
                written.append(path)
        return written

    def write_arm_report(self, arm: Arm) -> Path | None:
        """Build, sanitize, validate and atomically write one arm's report (once).

        ``self.generate`` may replace the default builder and ``self.update`` may change the
        report in place (the plugin's hooks); either way the result is sanitized again and
        schema-validated before it is written.
        """
        from .decision import with_decision
        from .evidence import build_public_report, resanitize, write_report_atomic
        from .launch.gpu import hardware_summary
        from .sanitize import Sanitizer

        if arm.report_path is not None or (arm.manager is None and not arm.gates):
            return None
        if arm.key in self.campaign_skips and arm.manager is None:
            return None  # the campaign decided not to run it: its record says why; no report claims it ran
        if arm.manager is not None:
            arm.manager.stop()
        record = self.run_record(arm)
        record.hardware = hardware_summary(arm.recipe.gpu_indexes())
        api_key = arm.manager.handle.api_key if arm.manager and arm.manager.handle else None
        sanitizer = Sanitizer(known_secrets=[api_key] if api_key else [])
        if arm.manager is not None and arm.manager.handle is not None:
            sanitizer.add_identifier("container_id", arm.manager.handle.container_id)
        generated = self.generate(record) if self.generate else None
        report = generated or with_decision(build_public_report(record, sanitizer=sanitizer, tool_version=__version__))
        if self.update is not None:
            self.update(report)
        if generated is not None or self.update is not None:
            report = resanitize(report, sanitizer=sanitizer)
        name = arm.key if self.plan or len(self.arms) > 1 else arm.recipe.name
        path = self.settings.reports_dir / f"{name}-{self.stamp}.json"
        write_report_atomic(report, path)
        arm.report_path = path
        arm.report = report
        self.progress(f"report written: {path}")
        self.write_html(report, path.with_suffix(".html"))
        return path

    def write_html(self, report: dict[str, Any], path: Path, comparison: dict[str, Any] | None = None) -> None:
        """The human-readable page beside the JSON (rendered from the sanitized report only)."""
        from .atomic_io import write_text_atomic
        from .html_report import render_html

        write_text_atomic(render_html(report, comparison=comparison), path, what="HTML report")
        self.progress(f"HTML report written: {path}")

    def write_comparison(self) -> Path | None:
        """With an A/B plan: compare control and candidate (and the replay) into comparison.json."""
        from .compare import compare_reports, write_comparison_atomic

        by_role = {spec.role: self.arms.get(spec.key) for spec in self.plan}
        control, candidate, replay = by_role.get("control"), by_role.get("candidate"), by_role.get("replay")
        if control is None or candidate is None or control.report is None or candidate.report is None:
            return None
        self.comparison = compare_reports(control.report, candidate.report,
                                          replay=replay.report if replay is not None else None)
        path = self.settings.reports_dir / f"comparison-{self.stamp}.json"
        write_comparison_atomic(self.comparison, path)
        self.comparison_path = path
        self.progress(f"comparison written: {path}")
        self.write_html(candidate.report, path.with_suffix(".html"), comparison=self.comparison)
        return path


__all__ = ["Arm", "QualRun", "RecipeError", "make_run_id"]
