"""The fleet runner on a real multi-node Ray cluster, with fake jobs (no vLLM server).

What is tested here is Ray's side of a fleet: GPU accounting, a pending job's reason and
deadline, a bad recipe in one job, a report that does not validate, placement on each node.
The jobs' commands are stand-ins (support.fleet_jobs.FAKE_JOB) because what they would run, a
real pytest session, is covered by test_fleet_tiny_cpu.py.
"""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

from support.fleet_jobs import REPORT_SAMPLE, ROOT, fake_argv, machine_addresses
from support.local_cluster import LocalRayCluster

from pytest_vllmqual.fleet.attempts import JobAttempt, JobOutcome
from pytest_vllmqual.fleet.cluster import RayCluster
from pytest_vllmqual.fleet.command import write_outputs
from pytest_vllmqual.fleet.record import validate_record
from pytest_vllmqual.fleet.runner import FleetRun
from pytest_vllmqual.fleet.spec import load_fleet


def run_fleet_file(cluster: LocalRayCluster, tmp_path: Path, text: str, sleep_s: float = 1.0,
                   report: Path | str | None = REPORT_SAMPLE) -> tuple[FleetRun, dict[str, Any], list[str]]:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    lines: list[str] = []
    tag = f"vqfake-{uuid.uuid4().hex[:8]}"

    def argv_for(attempt: JobAttempt) -> list[str]:
        return fake_argv(f"{tag}-{attempt.attempt_id}", sleep_s, report=report)

    with RayCluster.connect(cluster.address) as ray_cluster:
        run = FleetRun(spec=load_fleet(path), cluster=ray_cluster, progress=lines.append, project_dir=ROOT,
                       argv_for=argv_for)
        run.run()
        record = write_outputs(run, tmp_path / "out", mode="address")
    folder = Path(record.pop("_folder"))
    assert json.loads((folder / "fleet.json").read_text()) == record
    validate_record(record)
    return run, record, lines


def test_each_node_runs_once_per_matching_node_and_passes(three_nodes: LocalRayCluster, tmp_path: Path) -> None:
    _run, record, lines = run_fleet_file(three_nodes, tmp_path, """
name: each
max_parallel: 4
jobs:
  - {name: every, recipe: tiny-cpu, placement: {mode: each_node, resource: fleet_node}, deadline_s: 120}
""")
    rows = [r for r in record["rows"] if not r["floor"]]
    assert sorted(r["outcome"] for r in rows) == ["passed"] * 3
    assert len({r["node"] for r in rows}) == 3 and all(r["node"].startswith("node-") for r in rows)
    # and once more on one of those nodes: the floor its answers are compared against (the default)
    (floor,) = [r for r in record["rows"] if r["floor"]]
    assert floor["outcome"] == "passed" and floor["node"] in {r["node"] for r in rows}
    assert all(r["resources"] == {"cpus": 2.0, "gpus": 0} for r in rows)
    assert all(r["queue_s"] is not None and r["queue_s"] >= 0 for r in rows)
    assert any(line.startswith("running every") for line in lines)
    # three identical reports agree; the fleet proves each node passed, and says what it does not prove
    assert record["comparisons"][0]["agree"] is True and record["decision"]["verdict"] == "consistent"
    assert any("was not in the cluster" in text for text in record["decision"]["does_not_prove"])
    text = json.dumps(record)
    assert "127.0.0.1" not in text and not [a for a in machine_addresses() if a in text]
    assert "vqfake" not in text  # nor the jobs' command lines


def test_every_node_listens_on_loopback_only(three_nodes: LocalRayCluster, tmp_path: Path) -> None:
    """The head, every node and their workers (started by a job here) bind 127.0.0.1, nothing else."""
    run_fleet_file(three_nodes, tmp_path, """
name: loopback
max_parallel: 4
jobs:
  - {name: every, recipe: tiny-cpu, placement: {mode: each_node, resource: fleet_node}, deadline_s: 120}
""")
    assert three_nodes.node_addresses() == {"127.0.0.1"}
    listening = three_nodes.listening()
    assert len(listening) >= 8  # the GCS, two ports per raylet, the workers' own servers
    assert all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")) for a in listening), listening


def test_two_jobs_never_share_a_gpu(three_nodes: LocalRayCluster, tmp_path: Path) -> None:
    run, _record, _ = run_fleet_file(three_nodes, tmp_path, """
name: gpus
max_parallel: 4
jobs:
  - {name: g1, recipe: tiny-cpu, resources: {gpus: 2, cpus: 0}, placement: {mode: any, resource: gpu_node}}
  - {name: g2, recipe: tiny-cpu, resources: {gpus: 2, cpus: 0}, placement: {mode: any, resource: gpu_node}}
  - {name: g3, recipe: tiny-cpu, resources: {gpus: 2, cpus: 0}, placement: {mode: any}}
""", sleep_s=2.0)
    attempts = sorted(run.attempts, key=lambda a: a.started_epoch or 0)
    assert [a.outcome for a in attempts] == [JobOutcome.PASSED] * 3
    assert len({a.node_id for a in attempts}) == 1  # only one node has GPUs
    for earlier, later in itertools.pairwise(attempts):
        assert (later.started_epoch or 0) >= (earlier.finished_epoch or 0) - 1.0 or \
            (later.started_epoch or 0) - (earlier.started_epoch or 0) >= 1.9  # one after the other
    assert {a.result.get("gpu_ids") for a in attempts} == {"0,1"}


def test_pending_job_gives_up_at_its_deadline_with_the_reason(three_nodes: LocalRayCluster, tmp_path: Path) -> None:
    _, record, _lines = run_fleet_file(three_nodes, tmp_path, """
name: pending
jobs:
  - {name: too-big, recipe: tiny-cpu, resources: {gpus: 4, cpus: 0}, deadline_s: 4}
  - {name: no-label, recipe: tiny-cpu, placement: {mode: each_node, label: zone=mars}}
""")
    big, label = record["rows"]
    assert big["outcome"] == "not_started" and "no matching node has 4 GPU(s)" in big["reason"]
    assert "the most any has: 2 GPU(s)" in big["reason"]
    assert label["outcome"] == "not_started" and "label zone=mars" in label["reason"]
    assert record["decision"]["verdict"] == "incomplete"


def test_bad_recipe_fails_its_job_and_the_others_go_on(three_nodes: LocalRayCluster, tmp_path: Path) -> None:
    _, record, _ = run_fleet_file(three_nodes, tmp_path, """
name: bad
jobs:
  - {name: broken, recipe: tiny-cpu-typo}
  - {name: broken-set, recipe: tiny-cpu, set: ["serve.max_num_seqs=zero"]}
  - {name: fine, recipe: tiny-cpu}
""")
    broken, broken_set, fine = record["rows"]
    assert broken["outcome"] == "error" and "unknown recipe 'tiny-cpu-typo'" in broken["reason"]
    assert "Fix:" in broken["reason"]
    assert broken_set["outcome"] == "error" and "serve.max_num_seqs" in broken_set["reason"]
    assert fine["outcome"] == "passed"


def test_report_that_does_not_validate_never_enters_the_record(three_nodes: LocalRayCluster, tmp_path: Path) -> None:
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({**json.loads(REPORT_SAMPLE.read_text()), "schema_version": "three"}))
    run, record, _ = run_fleet_file(three_nodes, tmp_path, "name: invalid\njobs: [{name: j, recipe: tiny-cpu}]\n",
                                    report=invalid)
    row = record["rows"][0]
    assert row["outcome"] == "invalid_report" and row["report"] is None and row["verdict"] is None
    assert "does not match the report schema" in row["reason"]
    assert not list((tmp_path / "out").rglob("jobs/*.json"))
    assert run.attempts[0].report is None
