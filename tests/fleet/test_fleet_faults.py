"""Fleet faults against a real Ray cluster: a node dies mid-job, Ctrl-C, the driver SIGKILLed.

The jobs are fake (support.fleet_jobs.FAKE_JOB: a process that sleeps and carries a tag), because
each fault is about what Ray and the fleet do with a job's processes, and a sleeping process shows
that as well as a pytest run would, in seconds. The same with a real pytest run and its
server is test_fleet_tiny_cpu.py's killed-driver test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from support import python_path
from support.fleet_jobs import ROOT, cluster_env, fake_argv, processes_with
from support.local_cluster import LocalRayCluster, NodeSpec

from pytest_vllmqual.fleet.attempts import JobAttempt, JobOutcome
from pytest_vllmqual.fleet.cluster import RayCluster
from pytest_vllmqual.fleet.command import write_outputs
from pytest_vllmqual.fleet.runner import FleetRun
from pytest_vllmqual.fleet.spec import load_fleet


def _wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def test_node_dies_mid_job_is_lost_and_retried_only_by_policy(tmp_path: Path) -> None:
    tag = f"vqlost-{uuid.uuid4().hex[:8]}"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("""
name: lost
max_parallel: 2
jobs:
  - {name: keep, recipe: tiny-cpu, deadline_s: 300}
  - {name: again, recipe: tiny-cpu, deadline_s: 300, retry: {attempts: 1, on: [lost]}}
""")

    def argv_for(attempt: JobAttempt) -> list[str]:
        return fake_argv(f"{tag}-{attempt.attempt_id}", 120.0 if attempt.number == 1 else 1.0)

    with LocalRayCluster([NodeSpec(2), NodeSpec(2), NodeSpec(2)], env=cluster_env(tmp_path)) as cluster, \
            RayCluster.connect(cluster.address) as ray_cluster:
        run = FleetRun(spec=load_fleet(fleet), cluster=ray_cluster, progress=lambda _l: None, project_dir=ROOT,
                       argv_for=argv_for)
        thread = threading.Thread(target=run.run, daemon=True)
        thread.start()
        _wait_for(lambda: len(run.attempts) == 2 and all(a.started_epoch for a in run.attempts), 60,
                  "both jobs to start")
        _wait_for(lambda: len(processes_with(tag)) >= 2, 30, "both fake jobs to run")
        victims = {a.node_id for a in run.attempts}
        assert len(victims) == 2  # two 2-core jobs on two different 2-core nodes
        for node_id in victims:
            cluster.kill_node(str(node_id))
        thread.join(timeout=120)
        assert not thread.is_alive()
        record = write_outputs(run, tmp_path / "out", mode="address")
        first_tags = [f"{tag}-{a.attempt_id}" for a in run.attempts if a.number == 1]
        _wait_for(lambda: not any(processes_with(t) for t in first_tags), 60, "the lost jobs' processes to end")
    rows = {(r["job"], r["attempt"]): r for r in record["rows"]}
    assert rows[("keep", 1)]["outcome"] == "lost" and rows[("keep", 1)]["retried_as"] is None
    assert "went away mid-job" in rows[("keep", 1)]["reason"]
    assert rows[("again", 1)]["outcome"] == "lost" and rows[("again", 1)]["retried_as"]
    assert rows[("again", 2)]["outcome"] == "passed"
    assert rows[("again", 2)]["node"] not in {rows[("keep", 1)]["node"], rows[("again", 1)]["node"]}
    assert ("keep", 2) not in rows  # no retry policy, no retry
    assert record["decision"]["verdict"] == "incomplete"
    assert all(r["outcome"] != "passed" for r in record["rows"] if r["attempt"] == 1)


def _start_driver(cluster: LocalRayCluster, tmp_path: Path, tag: str) -> subprocess.Popen[str]:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("name: stop\nmax_parallel: 2\njobs:\n"
                     "  - {name: one, recipe: tiny-cpu, placement: {mode: any, resource: fleet_node}}\n"
                     "  - {name: two, recipe: tiny-cpu, placement: {mode: any, resource: fleet_node}}\n")
    env = {**os.environ, **cluster_env(tmp_path), "PYTHONPATH": python_path(os.environ.get("PYTHONPATH"))}
    driver = subprocess.Popen([sys.executable, "-m", "support.fake_driver", cluster.address, str(fleet),
                               str(tmp_path / "out"), tag, "300"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=ROOT, env=env)
    _wait_for(lambda: len(processes_with(f"{tag}-")) >= 2 or driver.poll() is not None, 90, "both fake jobs to run")
    assert driver.poll() is None, driver.communicate()[0][-3000:]
    return driver


def test_ctrl_c_cancels_every_job_and_the_record_says_incomplete(three_nodes: LocalRayCluster,
                                                                  tmp_path: Path) -> None:
    import json

    tag = f"vqint-{uuid.uuid4().hex[:8]}"
    driver = _start_driver(three_nodes, tmp_path, tag)
    driver.send_signal(signal.SIGINT)
    output = driver.communicate(timeout=90)[0]
    assert driver.returncode == 130, output[-3000:]
    _wait_for(lambda: not processes_with(f"{tag}-"), 60, "the cancelled jobs' processes to end")
    folder = Path(next(line.split(" ", 1)[1] for line in output.splitlines() if line.startswith("RECORD ")))
    record = json.loads((folder / "fleet.json").read_text())
    assert record["status"] == "incomplete" and record["interrupted"] is True
    assert record["decision"]["verdict"] == "incomplete"
    assert {r["outcome"] for r in record["rows"]} == {JobOutcome.CANCELLED.value}
    assert "interrupted" in output


def test_killed_driver_leaves_nothing_running(three_nodes: LocalRayCluster, tmp_path: Path) -> None:
    tag = f"vqkill-{uuid.uuid4().hex[:8]}"
    driver = _start_driver(three_nodes, tmp_path, tag)
    killed = time.monotonic()
    driver.kill()
    driver.communicate(timeout=30)
    _wait_for(lambda: not processes_with(f"{tag}-"), 60, "every job process to end after the driver was SIGKILLed")
    assert time.monotonic() - killed < 60
