"""One pytest session's qualification run: arms, their servers, their records, their reports.

An *arm* is one recipe run in this session (the default recipe, a ``recipe`` marker's
recipe, or an A/B arm). At most one arm's server is alive at a time. Gate records arrive
as dicts (from this process or from xdist workers) and are merged per arm; at the end each
arm gets its own sanitized report.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual import __version__
from pytest_vllmqual.errors import LaunchError, RecipeError, VllmQualError
from pytest_vllmqual.gates.registry import family_of
from pytest_vllmqual.launch.base import ProgressFn, ServerHandle
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.recipe.loader import Recipe, resolve_recipe, with_overrides
from pytest_vllmqual.records import GateRecord, RungRecord, RunRecord

from .server import ServerGuard, ServerManager, WorkerServer, utc_now, utc_stamp
from .settings import Setting, Settings


def session_recipe(settings: Settings) -> tuple[Settings, Recipe]:
    """The session's recipe: discovered from the endpoint when no recipe was chosen, else
    resolved by name or path; ``--vllmqual-set`` overrides applied. Raises RecipeError, or
    OSError when a discovered recipe cannot be written."""
    if settings.endpoint.value and settings.recipe.source == "embedded default":
        from pytest_vllmqual.recipe.discover import discover_recipe

        recipe = discover_recipe(str(settings.endpoint.value), api_key=os.environ.get("VLLM_API_KEY"),
                                 directory=settings.reports_dir / "private" / "discovered")
        settings = dataclasses.replace(settings, recipe=Setting(recipe.name, "discovery from the endpoint"))
    else:
        recipe = resolve_recipe(str(settings.recipe.value), settings.recipes_dir)
    return settings, with_overrides(recipe, settings.overrides)


def gate_junit_properties(record: GateRecord, sanitizer: Sanitizer) -> list[tuple[str, object]]:
    """A gate's junit ``<property>`` rows (family, title, scalar measurements, summary), scrubbed."""
    prefix = f"vllmqual.{record.gate}"
    properties: list[tuple[str, object]] = [
        (f"{prefix}.family", family_of(record.gate, record.markers) or "other"),
        (f"{prefix}.title", sanitizer.scrub(record.title or record.gate)),
    ]
    for key, value in record.measurements.items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            properties.append((f"{prefix}.{key}", sanitizer.scrub_obj(value)))
    if record.summary:
        properties.append((f"{prefix}.summary", sanitizer.scrub(record.summary)))
    return properties


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
                 invocation_args: list[str], worker_info: dict[str, Any] | None = None) -> None:
        self.settings = settings
        #: On an xdist worker: the controller's server (``ServerManager.handoff``); None on the controller.
        self.worker_info = worker_info
        self._worker_server: WorkerServer | None = None
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

    def plan_arms(self, *, ab: str | None, bracket: bool, campaign: str | None, rootdir: Path) -> None:
        """Plan the session's arms from ``--ab`` (and ``--bracket``) or ``--campaign``; every
        recipe is loaded now, so a bad one fails before any server starts."""
        if ab:
            try:
                self.set_plan(ab_plan(ab, bracket=bracket))
            except RecipeError as exc:
                raise RecipeError(f"{exc} (from --ab)") from None
        if campaign:
            from pytest_vllmqual.campaign.plan import campaigns_dir, load_campaign
            from pytest_vllmqual.layout import shipped_campaigns_dir

            try:
                self.set_campaign(load_campaign(campaign, search_dirs=[campaigns_dir(rootdir), shipped_campaigns_dir()]))
            except VllmQualError as exc:
                raise type(exc)(f"{exc} (from --campaign)") from None

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
        """Before arm ``key`` starts: finish the active arm (one server at a time)."""
        if self.active is not None and self.active.key != key:
            if self.active.manager is not None and self.active.manager.teardown is None:
                self.progress(f"stopping {self.active.key} before starting {key} (one server at a time)")
            self.finish_arm(self.active.key)

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
        from pytest_vllmqual.atomic_io import write_text_atomic

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

    # -- the server of an arm: started in one place, stopped in one place ------------------

    def start_server(self, key: str) -> ServerHandle:
        """The one place a server starts: finish any other arm first (exclusive GPUs), then bring
        arm ``key``'s server up (prepare, start, ready, engine facts). A failed start is stopped,
        remembered and raised again for every later test of the arm. On an xdist worker this is
        the controller's server, handed over at worker start."""
        if self.worker_info is not None:
            return self._worker(key).ensure_ready()
        arm = self.arm(key)
        self.finish_other_arms(key)
        if arm.manager is None:
            arm.private_dir.mkdir(parents=True, exist_ok=True)
            arm.manager = ServerManager(arm.recipe, run_id=arm.run_id, private_dir=arm.private_dir,
                                        endpoint=self.settings.endpoint.value, progress=self.progress)
        self.active = arm
        try:
            return arm.manager.ensure_ready()
        except LaunchError as exc:
            self.stop_server(key)
            arm.manager.name_private_log(exc)
            raise

    def stop_server(self, key: str) -> None:
        """The one place a server stops (idempotent; an external server is left running)."""
        arm = self.arms.get(key)
        if arm is not None and arm.manager is not None:
            arm.manager.stop()

    def finish_arm(self, key: str) -> None:
        """Arm ``key`` is done (pytest tore its fixtures down, or the next arm starts): stop its
        server and write its report now, so a later arm's failure cannot lose it."""
        if self.worker_info is not None or key not in self.arms:
            return
        arm = self.arms[key]
        self.stop_server(key)
        if self.active is arm:
            self.active = None
        if arm.report_path is None and self.on_arm_done is not None:
            self.on_arm_done(arm)

    def server_facts(self, key: str) -> dict[str, Any]:
        """Engine facts, endpoint facts and the identity check of arm ``key``'s started server."""
        if self.worker_info is not None:
            return self._worker(key).facts_dict()
        manager = self.arm(key).manager
        return manager.facts_dict() if manager is not None else {}

    def guard(self, key: str) -> ServerGuard | None:
        """The liveness guard of arm ``key``'s server (None before it is ready)."""
        if self.worker_info is not None:
            return self._worker(key).guard
        manager = self.arm(key).manager
        return manager.guard if manager is not None else None

    def private_dir(self, key: str) -> Path:
        """Where arm ``key``'s private artifacts go (a worker writes into the controller's)."""
        if self.worker_info is not None:
            return Path(self.worker_info.get("private_dir", "."))
        return self.arm(key).private_dir

    def handoff(self) -> dict[str, Any]:
        """Controller side of xdist: start the session recipe's server and describe it for workers."""
        key = self.default_recipe.name
        arm = self.arm(key)
        try:
            self.start_server(key)
        except LaunchError:
            pass  # the handoff carries the error; every worker's tests fail with it
        assert arm.manager is not None
        info = arm.manager.handoff(key)
        info["run_id"] = arm.run_id
        return info

    def _worker(self, key: str) -> WorkerServer:
        assert self.worker_info is not None
        if key != self.worker_info.get("arm"):
            raise LaunchError(f"recipe marker {key!r}: under xdist only the session recipe "
                              f"{self.worker_info.get('arm')!r} has a server", status="not_run",
                              hint="run recipe-marked tests without -n.")
        if self._worker_server is None:
            self._worker_server = WorkerServer(self.worker_info, self.arm(key).recipe)
        return self._worker_server

    def api_keys(self) -> list[str]:
        """The API keys of this session's servers (the sanitizer removes them from every output)."""
        if self.worker_info is not None:
            key = (self.worker_info.get("handle") or {}).get("api_key")
            return [key] if key else []
        return [arm.manager.handle.api_key for arm in self.arms.values()
                if arm.manager is not None and arm.manager.handle is not None and arm.manager.handle.api_key]

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

    def test_order(self, arm_keys: list[str]) -> Callable[[str, str | None], tuple[int, int]]:
        """The sort key of a test (arm key, gate name or None): arms in plan order, each arm's
        tests together so its server starts once, cheapest gates first within an arm."""
        from .gate_order import run_rank

        order: dict[str, int] = {spec.key: i for i, spec in enumerate(self.plan)}
        for key in [self.default_recipe.name, *arm_keys]:
            order.setdefault(key, len(order))
        return lambda arm, gate: (order[arm], run_rank(gate))

    def header_lines(self, recipe_source: str) -> list[str]:
        """What the terminal header says: the recipe, its identity and how to reproduce the run."""
        r = self.default_recipe
        rev = r.identity.revision or "unpinned"
        image = r.identity.image or "no image (subprocess)"
        launcher = "external" if self.settings.endpoint.value else r.launcher.kind
        lines = [
            f"vllmqual: recipe {r.name} ({r.path}, sha256 {r.sha256[:12]}) chosen by {recipe_source}",
            f"vllmqual: identity {r.identity.checkpoint}@{rev}, {image}, runtime {r.identity.runtime_version}, "
            f"served as {r.identity.served_model_name}; launcher {launcher}; "
            f"TP={r.serve.tensor_parallel_size} max_model_len={r.serve.max_model_len}",
            f"vllmqual: reproduce with: {self.reproduce_line(r.name)}",
        ]
        if r.discovered:
            lines.insert(1, "vllmqual: the recipe was DISCOVERED from the endpoint, not pinned: gates record what "
                            "they measure; thresholds only a pinned recipe knows are not checked")
        if r.overrides:
            lines.insert(1, f"vllmqual: overrides {', '.join(r.overrides)} -> effective recipe sha256 {r.sha256}")
        return lines

    def record_deselected(self, arm_key: str, gate: str, how: str) -> None:
        """A gate left out by -m/-k: the decision lists it as not proven."""
        entries = self.deselected.setdefault(arm_key, [])
        if not any(e["gate"] == gate for e in entries):
            entries.append({"gate": gate, "reason": f"deselected by {how}" if how else "deselected"})

    def public_text_sanitizer(self, sanitizer: Sanitizer) -> Sanitizer:
        """Teach ``sanitizer`` this session's secrets: every arm's recipe env values and the API
        keys of the servers started so far (junit and the terminal are scrubbed with it)."""
        for recipe in [self.default_recipe, *(arm.recipe for arm in self.arms.values())]:
            sanitizer.add_env_values(recipe.server_env())
        for key in self.api_keys():
            sanitizer.add_secret(key)
        return sanitizer

    def campaign_outcome(self) -> tuple[str | None, bool]:
        """At the end of a campaign: the line to print, and whether a fallback arm qualified in
        place of the failed one (then the session exits 0)."""
        from pytest_vllmqual.campaign.plan import qualified_by_fallback

        done = {k: a.report for k, a in self.arms.items() if a.report is not None}
        self.campaign.next_arm(done)
        record = self.campaign.record()
        arm = qualified_by_fallback(record)
        if arm is not None:
            failed = [a["name"] for a in record["arms"] if a.get("status") == "failed"]
            return f"campaign: {arm} qualified (fallback for {', '.join(failed)}, which failed); exit 0", True
        if record.get("complete"):
            passed = [a["name"] for a in record["arms"] if a.get("status") == "passed"]
            return f"campaign: {'qualified: ' + ', '.join(passed) if passed else 'no arm qualified'}", False
        return None, False

    # -- the end ------------------------------------------------------------------------

    def finish_session(self, *, interrupted: bool, tests_failed: bool) -> str | None:
        """The session ends: stop every server, then write the reports, the campaign record or the
        comparison. Returns ``qualified_by_fallback`` (a campaign's fallback arm qualified in place
        of the failed one: the session exits 0), ``report_not_written`` (it must fail), or None."""
        if interrupted:
            self.mark_interrupted()
        self.stop_all()
        if not self.arms:
            return None
        try:
            self.write_reports()
            if self.campaign is not None:
                self.write_campaign_record()
                line, by_fallback = self.campaign_outcome()
                if by_fallback and tests_failed:
                    self.progress(str(line))
                    return "qualified_by_fallback"
                if line and not by_fallback:
                    self.progress(line)
            elif self.plan:
                self.write_comparison()
        except (VllmQualError, OSError) as exc:
            self.progress(f"REPORT NOT WRITTEN: {exc}")
            return "report_not_written"
        return None

    def mark_interrupted(self) -> None:
        """The session stops before every gate ran (Ctrl-C, SIGTERM, -x): every arm's report says so."""
        for arm in self.arms.values():
            arm.interrupted = True

    def stop_all(self) -> None:
        for key in self.arms:
            self.stop_server(key)

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
        from pytest_vllmqual.launch.gpu import hardware_summary
        from pytest_vllmqual.report.public import resanitize, write_report_atomic
        from pytest_vllmqual.report.writer import arm_report

        if arm.report_path is not None or (arm.manager is None and not arm.gates):
            return None
        if arm.key in self.campaign_skips and arm.manager is None:
            return None  # the campaign decided not to run it: its record says why; no report claims it ran
        self.stop_server(arm.key)
        record = self.run_record(arm)
        record.hardware = hardware_summary(arm.recipe.gpu_indexes())
        api_key = arm.manager.handle.api_key if arm.manager and arm.manager.handle else None
        sanitizer = Sanitizer(known_secrets=[api_key] if api_key else [])
        if arm.manager is not None and arm.manager.handle is not None:
            sanitizer.add_identifier("container_id", arm.manager.handle.container_id)
        generated = self.generate(record) if self.generate else None
        report = generated or arm_report(record, sanitizer=sanitizer, tool_version=__version__)
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

    def summary_sections(self) -> list[tuple[str, list[str]]]:
        """The terminal summary: (title, lines) per arm with a report, then the A/B comparison."""
        from pytest_vllmqual.ab.compare import render_markdown
        from pytest_vllmqual.report.summary import summary_lines

        sections: list[tuple[str, list[str]]] = []
        for arm in self.arms.values():
            if arm.report is not None:
                title = arm.recipe.name if arm.key == arm.recipe.name else f"{arm.key} ({arm.role})"
                sections.append((title, summary_lines(arm.report, arm.report_path)))
        if self.comparison is not None:
            sections.append(("A/B comparison", [*render_markdown(self.comparison).splitlines(),
                                                f"comparison: {self.comparison_path}"]))
        return sections

    def write_arm_report_or_say_why(self, arm: Arm) -> None:
        """An arm finished mid-session (the next arm starts): write its report now, or say why not."""
        try:
            self.write_arm_report(arm)
        except (VllmQualError, OSError) as exc:
            self.progress(f"REPORT NOT WRITTEN for {arm.key}: {exc}")

    def write_html(self, report: dict[str, Any], path: Path, comparison: dict[str, Any] | None = None) -> None:
        """The human-readable page beside the JSON (rendered from the sanitized report only)."""
        from pytest_vllmqual.atomic_io import write_text_atomic
        from pytest_vllmqual.report.html_page import render_html

        write_text_atomic(render_html(report, comparison=comparison), path, what="HTML report")
        self.progress(f"HTML report written: {path}")

    def write_comparison(self) -> Path | None:
        """With an A/B plan: compare control and candidate (and the replay) into comparison.json."""
        from pytest_vllmqual.ab.compare import compare_reports, write_comparison_atomic

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


__all__ = ["Arm", "ArmSpec", "QualRun", "ab_plan", "gate_junit_properties", "session_recipe"]
