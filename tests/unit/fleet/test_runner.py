"""Planning a fleet run against a stand-in for Ray's node list (no cluster needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from support import ROOT

from pytest_vllmqual.fleet.attempts import JobOutcome
from pytest_vllmqual.fleet.cluster import NodeInfo
from pytest_vllmqual.fleet.runner import FleetRun
from pytest_vllmqual.fleet.spec import AnswersSpec, load_fleet
from pytest_vllmqual.words import FloorNodes


class StandInCluster:
    """What FleetRun.plan asks of RayCluster: the alive nodes."""

    started_locally = False

    def __init__(self, nodes: list[NodeInfo]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[NodeInfo]:
        return self._nodes

    def label_of(self, node_id: str) -> str:
        return next(n.label for n in self._nodes if n.node_id == node_id)


NODES = [NodeInfo("h", "node-1", {"CPU": 0}), NodeInfo("a", "node-2", {"CPU": 2}),
         NodeInfo("b", "node-3", {"CPU": 2}, {"kv": "small"}), NodeInfo("g", "node-4", {"CPU": 8, "GPU": 1})]


def _plan(text: str, tmp_path: Path) -> tuple[FleetRun, list[str]]:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    lines: list[str] = []
    cluster: Any = StandInCluster(NODES)
    run = FleetRun(spec=load_fleet(path), cluster=cluster, progress=lines.append, project_dir=ROOT)
    run.plan()
    return run, lines


def test_each_node_without_a_filter_is_every_node_that_can_hold_the_job(tmp_path: Path) -> None:
    shipped = load_fleet(ROOT / "fixtures" / "fleets" / "tiny-cpu.yaml")  # CI's file asks no floor: ask one here
    jobs = tuple(dataclasses.replace(j, answers=AnswersSpec(True, FloorNodes.ONE)) if j.name == "every-node" else j
                 for j in shipped.jobs)
    run = FleetRun(spec=dataclasses.replace(shipped, jobs=jobs), cluster=StandInCluster(NODES),
                   progress=lambda _l: None, project_dir=ROOT)  # type: ignore[arg-type]
    attempts = run.plan()
    every = [a for a in attempts if a.job.name == "every-node" and not a.floor]
    assert [a.pinned_node for a in every] == ["a", "b", "g"]  # the 0-core head is skipped
    # the floor: the job once more on its first node, the probe and the item bank only
    (floor,) = [a for a in attempts if a.floor]
    assert floor.pinned_node == "a" and floor.job.name == "every-node" and floor.overrides == every[0].overrides
    assert run._request(floor)["selection"] == ["-m", "equivalence or items"]
    # every node gets the job's TP=1 overrides; the kv=small node its own on top
    assert len(every[1].overrides) == len(every[0].overrides) + 2 and every[0].overrides == every[0].job.overrides
    assert all(not a.done for a in attempts)


def test_a_named_node_that_cannot_hold_the_job_is_a_finding(tmp_path: Path) -> None:
    run, _ = _plan("name: f\njobs: [{name: big, recipe: tiny-gpu, placement: {mode: each_node, label: kv=small}}]\n",
                   tmp_path)
    (attempt,) = run.attempts
    assert attempt.outcome is JobOutcome.NOT_STARTED
    assert "node-3 has 0 GPU(s) and 2 core(s); the job needs 2 GPU(s)" in str(attempt.reason)


def test_tp_one_override_for_one_gpu_nodes(tmp_path: Path) -> None:
    run, _ = _plan("name: f\njobs: [{name: g, recipe: tiny-gpu, set: ['serve.tensor_parallel_size=1']}]\n", tmp_path)
    (attempt,) = run.attempts
    assert (attempt.cpus, attempt.gpus) == (1.0, 1) and not attempt.done


def test_one_gpu_fleet_plans_both_jobs_on_the_one_gpu_node(tmp_path: Path) -> None:
    one_gpu_node: Any = StandInCluster([NodeInfo("g", "node-1", {"CPU": 16, "GPU": 1})])
    run = FleetRun(spec=load_fleet(ROOT / "fixtures" / "fleets" / "tiny-gpu-one-node.yaml"), cluster=one_gpu_node,
                   progress=lambda _l: None, project_dir=ROOT)
    attempts = run.plan()
    assert [(a.job.name, a.gpus, a.done) for a in attempts] == [("tiny-gpu", 1, False),
                                                                 ("tiny-gpu-393k-fp8kv", 1, False)]
    assert all(a.overrides == ("serve.tensor_parallel_size=1",) and a.pinned_node is None for a in attempts)


def test_floor_every_and_none_and_the_opt_out(tmp_path: Path) -> None:
    job = "{name: j, recipe: tiny-cpu, markers: engine, placement: {mode: each_node}"
    every, _ = _plan(f"name: f\njobs: [{job}, answers: {{floor: every}}}}]\n", tmp_path)
    assert sorted(str(a.pinned_node) for a in every.attempts if a.floor) == ["a", "b", "g"]
    none, _ = _plan(f"name: f\njobs: [{job}, answers: {{floor: none}}}}]\n", tmp_path)
    assert not [a for a in none.attempts if a.floor]
    out, _ = _plan(f"name: f\njobs: [{job}, answers: {{compare: false}}}}]\n", tmp_path)
    assert not [a for a in out.attempts if a.floor] and out.attempts[0].job.pytest_selection() == ["-m", "engine"]
    assert none.attempts[0].job.pytest_selection() == ["-m", "(engine) or equivalence or items"]


def test_a_retest_runs_only_the_named_nodes_and_no_any_job(tmp_path: Path) -> None:
    class Keyed(StandInCluster):
        def node_keys(self, nodes: list[NodeInfo]) -> dict[str, str]:
            return {n.node_id: f"machine-{n.node_id}" for n in nodes}

    lines: list[str] = []
    cluster: Any = Keyed(NODES)
    run = FleetRun(spec=load_fleet(ROOT / "fixtures" / "fleets" / "tiny-cpu.yaml"), cluster=cluster,
                   progress=lines.append, project_dir=ROOT, only_nodes=("machine-b",))
    run.plan()
    assert {a.pinned_node for a in run.attempts} == {"b"} and all(a.job.name == "every-node" for a in run.attempts)
    assert not [a for a in run.attempts if a.floor]  # a re-test is held against its reference, not a floor
    assert any("any-node: skipped" in line for line in lines)


def test_a_one_node_fleet_runs_the_job_twice_for_the_floor(tmp_path: Path) -> None:
    lines: list[str] = []
    cluster: Any = StandInCluster([NodeInfo("g", "node-1", {"CPU": 8, "GPU": 1})])
    path = tmp_path / "fleet.yaml"
    path.write_text("name: f\njobs: [{name: j, recipe: tiny-cpu, markers: engine, placement: {mode: each_node}}]\n")
    run = FleetRun(spec=load_fleet(path), cluster=cluster, progress=lines.append, project_dir=ROOT)
    run.plan()
    assert [(a.pinned_node, a.floor) for a in run.attempts] == [("g", False), ("g", True)]
