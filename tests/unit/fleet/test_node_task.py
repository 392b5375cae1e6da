"""The node side without Ray: the pytest command, the work folder, the deadline, the watchdog.

Each job's command is replaced by a small Python process (what the fleet's own benchmark does),
so these run in a second: the real pytest run is covered by tests/fleet/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT

from pytest_vllmqual.fleet.node_task import private_manifest, pytest_command, run_on_node
from pytest_vllmqual.fleet.watchdog import group_alive
from pytest_vllmqual.launch.cleanup.owner import process_start

FAKE_REPORT = """
import json, pathlib, sys, time
reports = pathlib.Path(sys.argv[1])
(reports / "private" / "run-1").mkdir(parents=True, exist_ok=True)
(reports / "private" / "run-1" / "server.log").write_text("private text")
(reports / "tiny-cpu-1.json").write_text(json.dumps({"run": {"id": "run-1"}, "not": "a valid report"}))
(reports / "tiny-cpu-1.html").write_text("<html></html>")
time.sleep(float(sys.argv[2]))
"""


def _request(tmp_path: Path, argv: list[str], deadline_s: float = 30.0) -> dict[str, object]:
    return {"fleet_run_id": "f-1", "attempt_id": "job-a1", "recipe": "tiny-cpu", "overrides": [],
            "selection": [], "deadline_epoch": time.time() + deadline_s, "project_dir": str(tmp_path), "argv": argv}


def test_pytest_command_is_the_command_a_person_runs(tmp_path: Path) -> None:
    argv = pytest_command({"recipe": "tiny-cpu", "overrides": ["serve.max_num_seqs=4"],
                           "selection": ["-m", "engine"], "recipes_dir": str(tmp_path)}, tmp_path / "w")
    from pytest_vllmqual.layout import suites_dir

    assert argv[:4] == [sys.executable, "-m", "pytest", str(suites_dir())]
    assert (suites_dir() / "test_smoke.py").is_file()
    assert argv[argv.index("--recipe") + 1] == "tiny-cpu"
    assert f"--junitxml={tmp_path / 'w' / 'junit.xml'}" in argv
    assert ["--vllmqual-set", "serve.max_num_seqs=4"] == argv[argv.index("--vllmqual-set"):][:2]
    assert argv[-2:] == ["-m", "engine"] and f"--vllmqual-recipes-dir={tmp_path}" in argv


def test_run_on_node_brings_back_public_outputs_and_names_private_ones(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLMQUAL_FLEET_WORKDIR", str(tmp_path / "work"))
    reports = tmp_path / "work" / "f-1" / "job-a1" / "reports"
    result = run_on_node(_request(tmp_path, [sys.executable, "-c", FAKE_REPORT, str(reports), "0"]))
    assert result["exit_code"] == 0 and result["timed_out"] is False
    assert json.loads(str(result["report_text"]))["run"]["id"] == "run-1"
    assert result["html_text"] == "<html></html>" and result["run_id"] == "run-1"
    assert result["private"]["files"] == 1 and len(result["private"]["manifest_sha256"]) == 64
    assert "private text" not in json.dumps(result)  # private files never travel
    assert result["private"] == private_manifest(reports / "private" / "run-1")
    assert result["node_lost"] is False


NODE = """
import pathlib, subprocess, sys, time
worker, started = sys.argv[1], pathlib.Path(sys.argv[2])
subprocess.Popen([sys.executable, "-c", worker])
while not started.exists():
    time.sleep(0.05)
"""

WORKER = """
import json, os, sys
from pytest_vllmqual.fleet.node_task import run_on_node
request, out = json.loads(sys.argv[1]), sys.argv[2]
with open(out + ".part", "w") as f:
    json.dump(run_on_node(request), f)
os.rename(out + ".part", out)
"""


def test_a_job_that_ends_after_its_node_died_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race a killed raylet leaves: its worker outlives it, sees pytest end by a signal and
    sends that back. Here a stand-in raylet starts the worker and exits once the job runs; the job
    then ends by SIGTERM. The worker notices its parent changed, so the attempt is lost, not failed."""
    monkeypatch.setenv("VLLMQUAL_FLEET_WORKDIR", str(tmp_path / "work"))
    started, out = tmp_path / "started", tmp_path / "result.json"
    job = ["bash", "-c", f"touch {started}; sleep 1; kill -TERM $$"]
    worker = WORKER.replace("sys.argv[1]", repr(json.dumps(_request(tmp_path, job)))).replace(
        "sys.argv[2]", repr(str(out)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    node = subprocess.run([sys.executable, "-c", NODE, worker, str(started)], env=env, timeout=30, check=False)
    assert node.returncode == 0
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    result = json.loads(out.read_text())
    assert result["exit_code"] == -15 and result["node_lost"] is True


def test_run_past_deadline_is_ended_with_its_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLMQUAL_FLEET_WORKDIR", str(tmp_path / "work"))
    marker = tmp_path / "child.pid"
    script = (f"import os, subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
              f"'import time; time.sleep(60)']); open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    started = time.monotonic()
    result = run_on_node(_request(tmp_path, [sys.executable, "-c", script], deadline_s=2.0))
    assert result["timed_out"] is True and result["report_text"] is None
    assert time.monotonic() - started < 30
    child = int(marker.read_text())
    assert process_start(child) is None or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_watchdog_ends_the_group_when_its_owner_dies() -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    watchdog = subprocess.Popen([sys.executable, "-m", "pytest_vllmqual.fleet.watchdog", "--owner", str(owner.pid),
                                 "--owner-start", process_start(owner.pid) or "?", "--group", str(group.pid),
                                 "--grace", "2"], env={**os.environ})
    try:
        time.sleep(1.0)
        assert group_alive(group.pid)  # the owner lives: nothing happens
        owner.kill()
        owner.wait()
        group.wait(timeout=10)  # SIGTERM reaches the group within a poll
        assert watchdog.wait(timeout=10) == 0
        assert not group_alive(group.pid)
    finally:
        for proc in (owner, group, watchdog):
            if proc.poll() is None:
                proc.kill()


def _sleeper(start_new_session: bool = True) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=start_new_session)


@pytest.mark.wall_clock
def test_watchdog_ends_its_groups_the_moment_its_pipe_closes() -> None:
    """The owner's pipe closing (what a dead worker's pipe does) ends the watched groups, not the done ones."""
    owner, watched, finished = _sleeper(False), _sleeper(), _sleeper()
    watchdog = subprocess.Popen([sys.executable, "-m", "pytest_vllmqual.fleet.watchdog", "--owner", str(owner.pid),
                                 "--owner-start", process_start(owner.pid) or "?", "--stdin", "--grace", "2"],
                                stdin=subprocess.PIPE)
    try:
        assert watchdog.stdin is not None
        watchdog.stdin.write(f"watch {watched.pid}\nwatch {finished.pid}\ndone {finished.pid}\n".encode())
        watchdog.stdin.flush()
        time.sleep(1.5)
        assert watchdog.poll() is None and group_alive(watched.pid)  # owner and pipe alive: it only watches
        closed = time.monotonic()
        watchdog.stdin.close()  # the owner still runs: only the pipe says it is gone
        watched.wait(timeout=10)
        assert time.monotonic() - closed < 1.0  # no poll interval: end-of-file wakes it
        assert watchdog.wait(timeout=10) == 0
        assert finished.poll() is None  # a group it was told is done is left alone
    finally:
        for proc in (owner, watched, finished, watchdog):
            if proc.poll() is None:
                proc.kill()


def test_one_watchdog_serves_every_job_of_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two jobs in one worker start one watchdog (a job start spawns only its own command)."""
    from pytest_vllmqual.fleet import node_task

    monkeypatch.setenv("VLLMQUAL_FLEET_WORKDIR", str(tmp_path / "work"))
    monkeypatch.setattr(node_task, "WATCHDOG", node_task._Watchdog())
    first = run_on_node(_request(tmp_path, [sys.executable, "-c", "pass"]))
    watchdog = node_task.WATCHDOG.proc
    assert watchdog is not None and watchdog.poll() is None
    second = run_on_node({**_request(tmp_path, [sys.executable, "-c", "pass"]), "attempt_id": "job-a2"})
    assert node_task.WATCHDOG.proc is watchdog and first["exit_code"] == second["exit_code"] == 0
    assert watchdog.stdin is not None
    watchdog.stdin.close()  # as when this worker ends: the watchdog goes with it
    assert watchdog.wait(timeout=10) == 0


def test_a_gpu_job_is_pinned_to_the_gpus_ray_gave_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:

    from pytest_vllmqual.fleet.node_task import assigned_gpu_override
    from pytest_vllmqual.recipe.loader import resolve_recipe
    from pytest_vllmqual.recipe.overrides import with_overrides

    assert assigned_gpu_override(0, "0,1") == [] and assigned_gpu_override(2, None) == []
    assert assigned_gpu_override(2, "GPU-aaaa,GPU-bbbb") == []  # UUIDs: the recipe's own setting stands
    override = assigned_gpu_override(2, "2,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    argv = pytest_command({"recipe": "tiny-gpu", "gpus": 2}, tmp_path)
    assert argv[argv.index("--vllmqual-set") + 1] == override[0]
    recipes = ROOT / "fixtures" / "recipes"
    for name in ("tiny-gpu", "131k-control"):  # subprocess and docker launchers
        assert with_overrides(resolve_recipe(name, recipes), override).gpu_indexes() == [2, 3]


def test_preflight_checks_the_assigned_gpus_with_recorded_nvml_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another job holds GPUs 0 and 1 of a four-GPU node; this job was given 2 and 3 by Ray."""
    from pytest_vllmqual.launch.gpu import exclusivity_preflight
    from unit.launch.test_gpu import FakeDevice, FakeProcess, fake_pynvml

    devices = [FakeDevice(processes=[FakeProcess(4242)]), FakeDevice(processes=[FakeProcess(4243)]),
               FakeDevice(), FakeDevice()]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(devices))
    assert exclusivity_preflight([2, 3], False)["status"] == "pass"
    refused = exclusivity_preflight([0, 1], False)  # what the recipe's default (first TP GPUs) would check
    assert refused["status"] == "fail" and "GPU 0 has 1 other compute process" in refused["reason"]


def test_the_plugin_is_named_only_where_no_entry_point_loads_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Here the package is installed, so its entry point loads the plugin and the command must not
    name it again (pytest refuses a plugin registered twice); the command collects as it is. On a
    host that has the checkout only on PYTHONPATH (the offline GPU host) no entry point exists, and
    without ``-p pytest_vllmqual.plugin`` pytest refused ``--recipe`` (exit 4 on the H200)."""
    argv = pytest_command({"recipe": "tiny-cpu", "selection": ["--co"]}, tmp_path / "w")
    assert "pytest_vllmqual.plugin" not in argv
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    argv = pytest_command({"recipe": "tiny-cpu"}, tmp_path / "w")
    assert argv[argv.index("pytest_vllmqual.plugin") - 1] == "-p"


def test_the_job_gets_the_node_s_environment_without_what_ray_set_in_its_worker(tmp_path: Path) -> None:
    """A worker that was started without OMP_NUM_THREADS (the node left it unset) and has it now (Ray
    set it for the task) hands the job an environment without it; one started with it keeps it."""
    code = ("import json, os, sys\n"
            "os.environ['OMP_NUM_THREADS'] = '1'; os.environ['LATER'] = 'x'\n"
            "from pytest_vllmqual.fleet.node_task import job_environment\n"
            "env = job_environment()\n"
            "print(json.dumps({k: env.get(k) for k in ('OMP_NUM_THREADS', 'LATER', 'PYTHONUNBUFFERED')}))\n")
    base = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    unset = subprocess.run([sys.executable, "-c", code], env=base, cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(unset.stdout) == {"OMP_NUM_THREADS": None, "LATER": "x", "PYTHONUNBUFFERED": "1"}
    node_set = subprocess.run([sys.executable, "-c", code.replace("os.environ['OMP_NUM_THREADS'] = '1'; ", "")],
                              env={**base, "OMP_NUM_THREADS": "1"}, cwd=ROOT, capture_output=True, text=True,
                              check=True)
    assert json.loads(node_set.stdout)["OMP_NUM_THREADS"] == "1"
