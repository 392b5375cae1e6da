"""The controller's run: it plans the arms, owns their servers (started in one place, stopped in
one place, at most one alive), merges the gate records per arm and decides when each report, the
A/B comparison and the campaign record are written. Under xdist it starts the session recipe's
server and hands it to the workers (``handoff``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_vllmqual.campaign.qualify import campaign_line
from pytest_vllmqual.errors import LaunchError, RecipeError, VllmQualError
from pytest_vllmqual.launch.base import ProgressFn, ServerHandle
from pytest_vllmqual.not_measured import Unmeasured, exit_code, summary_lines
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import GateRecord, RunMode

from .arms import Arm, ArmMarks, ArmSpec, ab_plan, arm_marks
from .reports import SessionReports, run_record
from .run import QualRun
from .server import ServerGuard, ServerManager
from .settings import Settings

if TYPE_CHECKING:
    from pytest_vllmqual.ab.drift import Reference
    from pytest_vllmqual.report.writer import ReportHooks

    from .campaign_arms import CampaignArms

__all__ = ["ControllerRun", "SessionEnd"]

SessionEnd = Literal["campaign_passed", "campaign_failed", "report_not_written", "not_equivalent"] | None
"""What ``finish_session`` tells the plugin: a campaign's exit (``campaign_passed``: 0,
``campaign_failed``: 1), ``report_not_written`` (it must fail), ``not_equivalent`` (the A/B's
candidate does not answer as its control does, or this run not as its ``--vllmqual-reference``:
the session fails) or None (pytest's own exit)."""


class ControllerRun(QualRun):
    """The controller side of the session (see the module docstring). ``hooks`` (the plugin's
    report hooks) may build or change each report before it is written."""

    def __init__(self, settings: Settings, default_recipe: Recipe, *, progress: ProgressFn,
                 invocation_args: list[str], hooks: ReportHooks | None = None) -> None:
        super().__init__(settings, default_recipe, progress=progress, invocation_args=invocation_args)
        self.active: Arm | None = None
        self.campaign: CampaignArms | None = None
        self.reports = SessionReports(settings.reports_dir, stamp=self.stamp, progress=progress, hooks=hooks)
        self.deselected: dict[str, list[dict[str, str]]] = {}
        """Per arm key: gates pytest deselected (-m/-k, --vllmqual-arm-marks), with the reason."""
        self.reference: Reference | None = None
        """The earlier run the session recipe's arm is held against (``--vllmqual-reference``)."""
        self.arm_marks: dict[str, ArmMarks] = {}
        """Per A/B arm key: the marker expression that picks its gates (``--vllmqual-arm-marks``)."""
        self.strict = False
        """``--vllmqual-strict``: a check not measured makes the session exit 1 (``not_measured``)."""
        self.exit_status: int | None = None
        """The session's exit code once decided, for the terminal's last line."""

    # -- planning -----------------------------------------------------------------------

    def plan_arms(self, *, ab: str | None, bracket: bool, campaign: str | None, rootdir: Path,
                  parallel: bool = False, reference: str | None = None, marks: Sequence[str] = ()) -> None:
        """Plan the session's arms from ``--ab`` (and ``--bracket``) or ``--campaign``; every
        recipe is loaded now, so a bad one fails before any server starts. ``parallel``: the
        session runs under xdist (``-n``), which cannot run arms in order. ``reference``: the
        earlier report a drift check holds this run against (read and checked now, too).
        ``marks``: the values of ``--vllmqual-arm-marks`` (``ROLE=EXPR``), the gates each A/B arm runs."""
        if reference:
            self.set_reference(reference, planned="--ab" if ab else "--campaign" if campaign else None)
        if bracket and not ab:
            raise VllmQualError("--bracket needs --ab CONTROL,CANDIDATE. Fix: add --ab=131k-control,131k-4096.")
        if ab and campaign:
            raise VllmQualError("--campaign and --ab both plan arms. Fix: use one of them.")
        if (ab or campaign) and parallel:
            raise VllmQualError(f"{'--ab' if ab else '--campaign'} runs its arms in order with one server at a "
                                f"time, which xdist cannot do. Fix: drop -n for the {'A/B' if ab else 'campaign'} run.")
        if ab:
            try:
                self.set_plan(ab_plan(ab, bracket=bracket))
            except RecipeError as exc:
                raise RecipeError(f"{exc} (from --ab)") from None
        if campaign:
            from .campaign_arms import CampaignArms

            try:
                self.set_campaign(CampaignArms.load(campaign, rootdir=rootdir))
            except VllmQualError as exc:
                raise type(exc)(f"{exc} (from --campaign)") from None
        self.arm_marks = arm_marks(marks, self.plan)

    def set_reference(self, reference: str, *, planned: str | None = None) -> None:
        """``--vllmqual-reference``: read the earlier report and its probe sidecar now (a wrong path,
        a report without a probe or a changed sidecar fail before any server starts)."""
        from pytest_vllmqual.ab.drift import load_reference

        if planned:
            raise VllmQualError(f"--vllmqual-reference holds one run against an earlier one; {planned} plans several "
                                "arms. Fix: drop one of them (an A/B compares its own arms).")
        path = Path(reference)
        if not path.is_absolute():
            path = (self.settings.invocation_dir or Path.cwd()) / path
        self.reference = load_reference(path)

    def set_plan(self, plan: list[ArmSpec]) -> None:
        """Plan arms run in order (A/B, bracketed replay); loads every recipe now (fail fast)."""
        for spec in plan:
            self.recipe(spec.recipe)
        self.plan = plan

    def set_campaign(self, campaign: CampaignArms) -> None:
        """Plan a campaign's arms in order; which of them really run is decided arm by arm."""
        self.set_plan(campaign.specs)
        self.campaign = campaign

    def campaign_skip_reason(self, key: str) -> str | None:
        """Why campaign arm ``key`` must not run now (None: it runs). Reports written so far decide."""
        if self.campaign is None:
            return None
        if key in self.campaign.skips:
            return self.campaign.skips[key]
        if key in self.arms and self.arms[key].started:
            return None
        self.finish_other_arms(key)
        return self.campaign.decide(key, self._reports_so_far())

    def _reports_so_far(self) -> dict[str, dict[str, Any]]:
        return {k: a.report for k, a in self.arms.items() if a.report is not None}

    # -- the server of an arm: started in one place, stopped in one place ------------------

    def start_server(self, key: str) -> ServerHandle:
        """The one place a server starts: finish any other arm first (exclusive GPUs), then bring
        arm ``key``'s server up (prepare, start, ready, engine facts). A failed start is stopped,
        remembered and raised again for every later test of the arm."""
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

    def stop_all(self) -> None:
        for key in self.arms:
            self.stop_server(key)

    def finish_other_arms(self, key: str) -> None:
        """Before arm ``key`` starts: finish the active arm (one server at a time)."""
        if self.active is not None and self.active.key != key:
            if self.active.manager is not None and self.active.manager.teardown is None:
                self.progress(f"stopping {self.active.key} before starting {key} (one server at a time)")
            self.finish_arm(self.active.key)

    def finish_arm(self, key: str) -> None:
        """Arm ``key`` is done (pytest tore its fixtures down, or the next arm starts): stop its
        server and write its report now, so a later arm's failure cannot lose it."""
        arm = self.arms.get(key)
        if arm is None:
            return
        self.stop_server(key)
        if self.active is arm:
            self.active = None
        if arm.report_path is None:
            try:
                self.write_arm_report(arm)
            except (VllmQualError, OSError) as exc:
                self.progress(f"REPORT NOT WRITTEN for {arm.key}: {exc}")

    def server_facts(self, key: str) -> dict[str, Any]:
        manager = self.arm(key).manager
        return manager.facts_dict() if manager is not None else {}

    def guard(self, key: str) -> ServerGuard | None:
        manager = self.arm(key).manager
        return manager.guard if manager is not None else None

    def private_dir(self, key: str) -> Path:
        return self.arm(key).private_dir

    def api_keys(self) -> list[str]:
        return [arm.manager.handle.api_key for arm in self.arms.values()
                if arm.manager is not None and arm.manager.handle is not None and arm.manager.handle.api_key]

    def handoff(self) -> dict[str, Any]:
        """Under xdist: start the session recipe's server and describe it for the workers
        (``worker.WorkerRun``); a failed start is handed over too, so every worker's tests fail with it."""
        key = self.default_recipe.name
        arm = self.arm(key)
        try:
            self.start_server(key)
        except LaunchError:
            pass
        assert arm.manager is not None
        info = arm.manager.handoff(key)
        info["run_id"] = arm.run_id
        return info

    # -- what the tests report ---------------------------------------------------------------

    def add_gate(self, arm_key: str, record: dict[str, Any]) -> None:
        """A gate's record, from this process or an xdist worker, joins its arm."""
        self.arm(arm_key).gates.append(GateRecord.from_dict(record))

    def record_deselected(self, arm_key: str, gate: str, how: str) -> None:
        """A gate left out by -m/-k: the decision lists it as not proven."""
        entries = self.deselected.setdefault(arm_key, [])
        if not any(e["gate"] == gate for e in entries):
            entries.append({"gate": gate, "reason": f"deselected by {how}" if how else "deselected"})

    # -- the end ------------------------------------------------------------------------

    def finish_session(self, *, interrupted: bool, failed_tests: int) -> SessionEnd:
        """The session ends: stop every server, then write the reports, the campaign record or the
        comparison. Returns the campaign's exit as its record states it, ``report_not_written``
        (it must fail), or None. ``failed_tests``: pytest's count of failed tests."""
        if interrupted:
            self.mark_interrupted()
        self.stop_all()
        if not self.arms:
            return None
        try:
            self.write_reports()
            if self.campaign is not None:
                return self._finish_campaign(self.campaign, failed_tests=failed_tests)
            if self.plan:
                self.write_comparison()
        except (VllmQualError, OSError) as exc:
            self.progress(f"REPORT NOT WRITTEN: {exc}")
            return "report_not_written"
        return "not_equivalent" if self.reports.not_equivalent else None

    def _finish_campaign(self, campaign: CampaignArms, *, failed_tests: int) -> SessionEnd:
        """Write the campaign record, print its last line, and return the exit it states."""
        reports = self._reports_so_far()
        files = {k: str(a.report_path.name) for k, a in self.arms.items() if a.report_path}
        record = campaign.record(reports, files, failed_tests=failed_tests)
        self.reports.write_campaign_record(record)
        line = campaign_line(record)
        if line is None:
            return None
        self.progress(line)
        return "campaign_passed" if record["exit"]["code"] == 0 else "campaign_failed"

    def write_reports(self) -> list[Path]:
        """Write every arm's report not written yet (see ``write_arm_report``)."""
        written = [self.write_arm_report(arm) for arm in self.arms.values()]
        return [path for path in written if path is not None]

    def write_arm_report(self, arm: Arm) -> Path | None:
        """Write arm ``arm``'s report once, after its server stopped; none for an arm that never
        started, or that its campaign decided not to run (the campaign record says why)."""
        if arm.report_path is not None or not arm.started:
            return None
        if self.campaign is not None and arm.key in self.campaign.skips and arm.manager is None:
            return None
        self.stop_server(arm.key)
        record = run_record(arm, mode=RunMode.DIRECT_ONLY if self.settings.endpoint.value else RunMode.MANAGED,
                            reproduce=self.reproduce_line(arm.recipe.name),
                            deselected=self.deselected.get(arm.key, []))
        name = arm.key if self.plan or len(self.arms) > 1 else arm.recipe.name
        reference = self.reference if arm.key == self.default_recipe.name else None
        return self.reports.write_arm(arm, record, name=name, reference=reference)

    def write_comparison(self) -> Path | None:
        """With an A/B plan: compare control and candidate (and the replay) into comparison.json."""
        by_role = {spec.role: self.arms.get(spec.key) for spec in self.plan}
        control, candidate, replay = by_role.get("control"), by_role.get("candidate"), by_role.get("replay")
        if control is None or candidate is None:
            return None
        return self.reports.write_comparison(control, candidate, replay)

    def unmeasured(self) -> list[Unmeasured]:
        """Every check of the session that was not measured, in the order the summary names them."""
        return self.reports.unmeasured(list(self.arms.values()))

    def exit_code(self, code: int) -> int:
        """The session's exit code under the not-measured rule (``code``: pytest's and the reports'),
        kept for the terminal's last line."""
        self.exit_status = exit_code(code, self.unmeasured(), strict=self.strict)
        return self.exit_status

    def summary_sections(self) -> list[tuple[str, list[str]]]:
        """The terminal summary: (title, lines) per arm with a report, then the A/B comparison, the
        promotion decision and its three layers, and last the checks not measured with the exit code they leave (``not_measured``)."""
        sections = self.reports.summary_sections(list(self.arms.values())) + self.reports.promotion_sections()
        lines = summary_lines(self.unmeasured(), code=self.exit_status or 0, strict=self.strict,
                              option="--vllmqual-strict")
        return sections + ([("not measured", lines)] if lines else [])
