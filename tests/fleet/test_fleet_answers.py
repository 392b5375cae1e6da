"""Nodes whose answers really differ, for causes set in each node's own environment at ``ray start``.

Five nodes run the probe and the item bank alone at TP=1 (``tests/fleet/data/answers-probe.yaml``:
the recipe reserves no core and leaves the thread binding to vLLM's automatic binding, the same on
every node); nothing in the fleet file or the recipe tells them apart. Measured on this 2-core
machine (``scripts/measure_fleet_numerics.py``, docs/PERFORMANCE.md), the CPU build's answers
change with the number of threads a rank computes on (one against two: top-1 agreement 99.97%,
ln PPL ratio 4.6e-5), not with the core (the same single thread on core 0 or 1), and a restart
reproduces them exactly. So:

- three nodes as set up by default: vLLM binds its rank to both cores the node offers;
- ``explained``: one started with ``VLLM_CPU_OMP_THREADS_BIND=0`` in its environment (one
  thread), which its fingerprint records;
- ``unexplained``: one whose raylet was started under ``taskset -c 0``: the automatic binding
  then finds one core, so one thread, and the fingerprint (which does not record a process's CPU
  affinity) reads as the default nodes' do: a suspect host.

That the automatic binding with no reserved core takes both cores (and one under ``taskset``) is
vLLM 0.32's binding code (``utils/ompmultiprocessing``), not yet a measurement of this script.

Five, not four: the two one-thread nodes answer alike, and a majority must answer otherwise for a
node to be named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fleet_jobs import ROOT, cluster_env
from support.local_cluster import LocalRayCluster, NodeSpec

pytestmark = [pytest.mark.real_vllm]
FLEET = ROOT / "tests" / "fleet" / "data" / "answers-probe.yaml"
EXPLAINED_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0"}
UNEXPLAINED_PREFIX = ("taskset", "-c", "0")


def _spec(key: str, **kwargs: Any) -> NodeSpec:
    return NodeSpec(1, resources={"fleet_node": 1}, labels={"vllmqual-node": key}, **kwargs)


@pytest.fixture(scope="module")
def answers_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, dict[str, Any], Path]]:
    tmp = tmp_path_factory.mktemp("answers")
    nodes = [_spec("default-a"), _spec("default-b"), _spec("default-c"), _spec("explained", env=EXPLAINED_ENV),
             _spec("unexplained", prefix=UNEXPLAINED_PREFIX)]
    with LocalRayCluster(nodes, env=cluster_env(tmp)) as cluster:
        proc = subprocess.run([sys.executable, "-m", "pytest_vllmqual.cli", "fleet", "run", str(FLEET), "--address",
                               cluster.address, "-o", str(tmp / "out")], cwd=ROOT, text=True, capture_output=True,
                              env={**os.environ, **cluster_env(tmp)}, timeout=1200)
        output = proc.stdout + proc.stderr
        records = sorted((tmp / "out").glob("answers-*/fleet.json"))
        assert records, output[-5000:]
        yield proc.returncode, output, json.loads(records[-1].read_text()), records[-1].parent


def _node(record: dict[str, Any], key: str) -> str:
    return str(next(r["node"] for r in record["rows"] if r["node_key"] == key))


def test_the_default_nodes_answer_alike(answers_run: tuple[int, str, dict[str, Any], Path]) -> None:
    _code, output, record, _folder = answers_run
    (answers,) = record["answers"]
    assert len(answers["nodes"]) == 5, output[-4000:]
    pair = next(p for p in answers["pairs"] if set(p["nodes"]) == {_node(record, "default-a"),
                                                                   _node(record, "default-b")})
    assert pair["compared"] and not pair["differs"] and pair["figures"]["top1_agreement"]["point"] == 100.0


def test_the_node_with_a_recorded_cause_differs_explained(answers_run: tuple[int, str, dict[str, Any], Path]) -> None:
    _code, output, record, _folder = answers_run
    (answers,) = record["answers"]
    explained = _node(record, "explained")
    pair = next(p for p in answers["pairs"] if set(p["nodes"]) == {explained, _node(record, "default-a")})
    assert pair["differs"] and pair["cause"] == "explained", output[-4000:]
    assert pair["explained_by"] == ["env.VLLM_CPU_OMP_THREADS_BIND"]
    assert explained in answers["odd_one_out"] and explained not in {s["node"] for s in record["suspects"]}


def test_the_node_with_an_unrecorded_cause_is_the_suspect(answers_run: tuple[int, str, dict[str, Any], Path]) -> None:
    code, output, record, folder = answers_run
    (answers,) = record["answers"]
    suspect = _node(record, "unexplained")
    pair = next(p for p in answers["pairs"] if set(p["nodes"]) == {suspect, _node(record, "default-a")})
    assert pair["differs"] and pair["cause"] == "unexplained", output[-4000:]
    assert [(s["node"], s["node_key"]) for s in record["suspects"]] == [(suspect, "unexplained")]
    assert record["decision"]["verdict"] == "inconsistent" and code == 1
    assert json.loads((folder / "suspects.json").read_text())["suspects"][0]["node_key"] == "unexplained"
    assert f"{suspect} is the odd one out on answers" in output
