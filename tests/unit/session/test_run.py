"""The session's run in its two kinds: the controller (plans arms, owns servers, writes reports)
and the xdist worker (uses the server the controller handed over). No server is started here:
a gate record is added by hand, and a startup failure is set on the server manager."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import ROOT
from support.recipes import tiny

from pytest_vllmqual.errors import LaunchError, VllmQualError
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.records import RunRecord
from pytest_vllmqual.session.campaign_arms import CampaignArms
from pytest_vllmqual.session.controller import ControllerRun
from pytest_vllmqual.session.invocation import reproduce_line
from pytest_vllmqual.session.server import STATE_FILE, ServerGuard, ServerManager, WorkerServer
from pytest_vllmqual.session.settings import Settings, resolve_settings
from pytest_vllmqual.session.worker import WorkerRun

RECIPES = ROOT / "fixtures" / "recipes"


def settings_for(reports: Path) -> Settings:
    return resolve_settings(rootdir=ROOT, env={}, cli_recipe="tiny-cpu", ini_recipe=None, cli_reports=str(reports),
                            ini_reports=None, cli_endpoint=None, cli_recipes_dir=str(RECIPES), ini_recipes_dir=None)


class Hooks:
    """The report hooks, as a conftest would implement them."""

    def __init__(self, *, breaks: bool = False) -> None:
        self.generated: list[RunRecord] = []
        self.breaks = breaks

    def generate(self, record: RunRecord) -> dict[str, Any] | None:
        self.generated.append(record)
        return None

    def update(self, report: dict[str, Any]) -> None:
        report["extensions"]["ticket"] = "QUAL-123"
        if self.breaks:
            report["not_a_section"] = 1


def passed_gate(arm: str) -> dict[str, Any]:
    return {"nodeid": "test_x.py::test_measured", "gate": "measured", "arm": arm, "outcome": "passed",
            "measurements": {"answer": 42}}


def test_the_controller_calls_the_hooks_it_was_built_with(tmp_path: Path) -> None:
    lines: list[str] = []
    hooks = Hooks()
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lines.append, invocation_args=[], hooks=hooks)
    run.add_gate("tiny-cpu", passed_gate("tiny-cpu"))
    assert run.finish_session(interrupted=False, failed_tests=0) is None
    (path,) = tmp_path.glob("tiny-cpu-*.json")
    report = json.loads(path.read_text())
    assert report["extensions"]["ticket"] == "QUAL-123"
    assert [r.arm for r in hooks.generated] == ["tiny-cpu"]
    assert path.with_suffix(".html").is_file()
    assert lines == [f"report written: {path}", f"HTML report written: {path.with_suffix('.html')}"]
    (title, summary), = run.summary_sections()
    assert title == "tiny-cpu" and any(str(path) in line for line in summary)


def test_a_report_a_hook_broke_is_not_written_and_the_session_says_why(tmp_path: Path) -> None:
    lines: list[str] = []
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lines.append, invocation_args=[],
                        hooks=Hooks(breaks=True))
    run.add_gate("tiny-cpu", passed_gate("tiny-cpu"))
    run.finish_arm("tiny-cpu")
    assert any(line.startswith("REPORT NOT WRITTEN for tiny-cpu:") and "not_a_section" in line for line in lines)
    assert not list(tmp_path.glob("tiny-cpu-*.json"))
    assert run.finish_session(interrupted=False, failed_tests=0) == "report_not_written"


def test_an_arm_that_never_started_gets_no_report(tmp_path: Path) -> None:
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[])
    run.arm("tiny-cpu")
    assert run.write_reports() == []
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(("options", "message"), [
    ({"bracket": True}, "--bracket needs --ab"),
    ({"ab": "tiny-cpu,tiny-cpu-4096", "campaign": "tiny-cpu,tiny-cpu-4096"}, "--campaign and --ab both plan arms"),
    ({"ab": "tiny-cpu,tiny-cpu-4096", "parallel": True}, "--ab runs its arms in order"),
    ({"campaign": "tiny-cpu,tiny-cpu-4096", "parallel": True}, "--campaign runs its arms in order"),
    ({"ab": "tiny-cpu"}, "--ab takes exactly two recipes"),
])
def test_the_controller_refuses_arm_options_that_do_not_fit(tmp_path: Path, options: dict[str, Any],
                                                            message: str) -> None:
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[])
    kwargs: dict[str, Any] = {"ab": None, "bracket": False, "campaign": None, "rootdir": tmp_path, **options}
    with pytest.raises(VllmQualError, match=message):
        run.plan_arms(**kwargs)


def test_an_ab_plan_orders_the_arms_and_their_tests(tmp_path: Path) -> None:
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[])
    run.plan_arms(ab="tiny-cpu,tiny-cpu-4096", bracket=True, campaign=None, rootdir=tmp_path)
    assert [(s.key, s.role) for s in run.plan] == [("A-tiny-cpu", "control"), ("B-tiny-cpu-4096", "candidate"),
                                                  ("A2-tiny-cpu", "replay")]
    assert run.arm("B-tiny-cpu-4096").recipe.name == "tiny-cpu-4096"
    key = run.test_order(["B-tiny-cpu-4096", "A-tiny-cpu"])
    assert sorted(["A2-tiny-cpu", "B-tiny-cpu-4096", "A-tiny-cpu"], key=lambda arm: key(arm, None)) == [
        "A-tiny-cpu", "B-tiny-cpu-4096", "A2-tiny-cpu"]


def test_a_campaign_runs_its_first_arm_and_keeps_the_reason_it_skips_another(tmp_path: Path) -> None:
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[])
    run.plan_arms(ab=None, bracket=False, campaign="tiny-cpu,tiny-cpu-4096", rootdir=tmp_path)
    assert isinstance(run.campaign, CampaignArms)
    assert [s.role for s in run.plan] == ["campaign", "campaign"]
    first, second = (spec.key for spec in run.plan)
    assert run.campaign_skip_reason(first) is None
    reason = run.campaign_skip_reason(second)
    assert reason and run.campaign.skips == {second: reason}
    assert run.campaign_skip_reason(second) == reason


def test_the_reproduce_line_pins_the_recipe() -> None:
    assert reproduce_line(["-q", "--recipe=y", "-m", "engine"], "tiny-cpu", discovered=False) == \
        "pytest --recipe=tiny-cpu -q -m engine"
    assert reproduce_line(["--vllmqual-endpoint", "http://h"], "found", discovered=True) == \
        "pytest --vllmqual-endpoint http://h"


def failed_manager(tmp_path: Path) -> ServerManager:
    manager = ServerManager(tiny(), run_id="r1", private_dir=tmp_path / "private", progress=lambda line: None)
    manager.startup_error = LaunchError("the KV cache does not fit", status="kv_insufficient", exit_code=1,
                                        hint="lower max_model_len", details={"last_phase": "profiling"})
    manager.startup_status = "kv_insufficient"
    return manager


def test_a_worker_fails_with_the_startup_error_the_controller_handed_over(tmp_path: Path) -> None:
    manager = failed_manager(tmp_path)
    handoff = manager.handoff("tiny-cpu")
    run = WorkerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[],
                    handoff=json.loads(json.dumps(handoff)))
    with pytest.raises(LaunchError) as caught:
        run.start_server("tiny-cpu")
    assert caught.value.to_dict() == manager.startup_error.to_dict()  # type: ignore[union-attr]
    assert run.guard("tiny-cpu") is None and run.api_keys() == []
    assert run.private_dir("tiny-cpu") == tmp_path / "private"
    assert run.campaign_skip_reason("tiny-cpu") is None
    with pytest.raises(LaunchError, match="only the session recipe") as other:
        run.start_server("tiny-cpu-4096")
    assert other.value.status == "not_run"


def test_a_worker_uses_the_server_the_controller_handed_over(tmp_path: Path) -> None:
    info = {"arm": "tiny-cpu", "private_dir": str(tmp_path), "run_id": "r1",
            "handle": {"base_url": "http://127.0.0.1:1", "served_model_name": "tiny", "launcher_kind": "subprocess",
                       "api_key": "sk-secret", "direct_only": False, "cold_start_s": 3.0},
            "facts": {"engine": {"a": 1}, "endpoints": {}, "identity": {}, "cold_start_s": 3.0}}
    run = WorkerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[], handoff=info)
    handle = run.start_server("tiny-cpu")
    assert (handle.base_url, handle.api_key) == ("http://127.0.0.1:1", "sk-secret")
    assert run.server_facts("tiny-cpu")["engine"] == {"a": 1}
    assert isinstance(run.guard("tiny-cpu"), ServerGuard)
    assert "sk-secret" not in run.public_text_sanitizer(Sanitizer()).scrub("key sk-secret")
    run.finish_arm("tiny-cpu")  # nothing to do on a worker
    assert run.arms["tiny-cpu"].report_path is None


def test_the_run_record_keeps_the_startup_error_as_plain_data(tmp_path: Path) -> None:
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[])
    arm = run.arm("tiny-cpu")
    arm.manager = failed_manager(tmp_path)
    from pytest_vllmqual.session.reports import run_record

    record = run_record(arm, mode="managed", reproduce="pytest --recipe=tiny-cpu", deselected=[])
    assert record.lifecycle["startup_error"] == arm.manager.startup_error.to_dict()  # type: ignore[union-attr]
    assert record.status == "incomplete"
    assert record.status_reasons == ["the server did not start (kv_insufficient)"]


def test_a_guard_verdict_is_written_whole_and_read_by_every_process(tmp_path: Path) -> None:
    info = WorkerServer({"private_dir": str(tmp_path), "handle": {
        "base_url": "http://127.0.0.1:1", "served_model_name": "tiny", "launcher_kind": "subprocess"}}, tiny())
    assert info.guard is not None
    info.guard.mark("server_dead", "the server process exited with status 1")
    assert json.loads((tmp_path / STATE_FILE).read_text())["status"] == "server_dead"
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE], "no temp file is left behind"
    gone = ServerGuard(info.guard.handle, tmp_path / STATE_FILE).gone_error()
    assert gone is not None and gone.status == "server_dead"


def pinned_manager(tmp_path: Path, key: str) -> ServerManager:
    """A server manager that never started, whose identity pins the model by its content digest (as a
    real tiny-cpu run's does): a campaign qualifies only a pinned arm."""
    manager = ServerManager(tiny(), run_id=f"{key}-r1", private_dir=tmp_path / key, progress=lambda line: None)
    digest = "sha256:" + "0" * 64
    manager.facts.identity = {"status": "verified", "checks": [
        {"field": "content_digest", "expected": digest, "observed": digest, "ok": True, "status": "matched",
         "source": "the model folder", "pinned": True}]}
    return manager


def _fallback_session(tmp_path: Path, primary_failures: list[str]) -> tuple[ControllerRun, list[str]]:
    """A campaign of tiny-cpu-kvfail (required: kv_pool) with tiny-cpu as its fallback, gates added by hand,
    each arm's identity pinned by its content digest."""
    lines: list[str] = []
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lines.append, invocation_args=[])
    run.plan_arms(ab=None, bracket=False, campaign="tiny-cpu-kvfail:kv_pool,tiny-cpu?fallback", rootdir=tmp_path)
    first, second = (spec.key for spec in run.plan)
    for key in (first, second):
        run.arm(key).manager = pinned_manager(tmp_path, key)
    assert run.campaign_skip_reason(first) is None
    for gate in ("kv_pool", "identity", "smoke"):
        outcome = "failed" if gate in primary_failures else "passed"
        run.add_gate(first, {"nodeid": f"t.py::test_{gate}", "gate": gate, "arm": first, "outcome": outcome,
                             "reason": "below the recipe minimum" if outcome == "failed" else ""})
    run.finish_arm(first)
    assert run.campaign_skip_reason(second) is None
    for gate in ("kv_pool", "identity", "smoke"):
        run.add_gate(second, {"nodeid": f"t.py::test_{gate}", "gate": gate, "arm": second, "outcome": "passed"})
    return run, lines


def test_a_campaign_exits_0_only_when_its_fallback_stood_in_for_the_failure_it_exists_for(tmp_path: Path) -> None:
    run, lines = _fallback_session(tmp_path, ["kv_pool"])
    assert run.finish_session(interrupted=False, failed_tests=1) == "campaign_passed"
    record = json.loads(next(tmp_path.glob("campaign-*.json")).read_text())
    assert record["qualified"] == "tiny-cpu" and record["exit"]["code"] == 0
    assert lines[-1] == "campaign: tiny-cpu qualified (fallback for tiny-cpu-kvfail, which failed kv_pool); exit 0"


def test_a_campaign_whose_primary_failed_more_than_its_fallback_stands_in_for_exits_1(tmp_path: Path) -> None:
    """The tiny-cpu fallback campaign once ended "2 failed, 10 passed" with exit 0: the record, the
    terminal's last line and the exit now say 1, naming the failure no fallback stands in for."""
    run, lines = _fallback_session(tmp_path, ["kv_pool", "identity"])
    assert run.finish_session(interrupted=False, failed_tests=2) == "campaign_failed"
    record = json.loads(next(tmp_path.glob("campaign-*.json")).read_text())
    assert record["qualified"] == "tiny-cpu" and record["exit"]["code"] == 1
    assert lines[-1] == ("campaign: tiny-cpu qualified, but tiny-cpu-kvfail also failed identity, which its fallback "
                         "does not stand in for (it failed kv_pool); exit 1")


def test_a_campaign_with_a_failed_test_outside_its_arms_gates_exits_1(tmp_path: Path) -> None:
    run, lines = _fallback_session(tmp_path, ["kv_pool"])
    assert run.finish_session(interrupted=False, failed_tests=2) == "campaign_failed"
    assert lines[-1].endswith("2 test(s) failed where a fallback stands in for 1; exit 1")


def test_arm_marks_are_kept_by_the_key_of_the_arm_they_name(tmp_path: Path) -> None:
    run = ControllerRun(settings_for(tmp_path), tiny(), progress=lambda line: None, invocation_args=[])
    run.plan_arms(ab="tiny-cpu,tiny-cpu-4096", bracket=True, campaign=None, rootdir=tmp_path,
                  marks=["candidate = smoke or equivalence", "replay=equivalence"])
    assert {key: (m.role, m.expression) for key, m in run.arm_marks.items()} == {
        "B-tiny-cpu-4096": ("candidate", "smoke or equivalence"), "A2-tiny-cpu": ("replay", "equivalence")}
    assert run.arm_marks["A2-tiny-cpu"].how == "--vllmqual-arm-marks replay='equivalence'"
    with pytest.raises(VllmQualError, match="needs --ab CONTROL,CANDIDATE"):
        run.plan_arms(ab=None, bracket=False, campaign="tiny-cpu,tiny-cpu-4096", rootdir=tmp_path,
                      marks=["candidate=smoke"])
