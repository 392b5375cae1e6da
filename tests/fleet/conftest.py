"""A real Ray cluster of several nodes on this machine for the fleet tests, and fake jobs.

``fake_argv`` stands in for a job's pytest run where the test is about Ray's side (placement,
GPU accounting, deadlines, lost nodes, a killed driver): a Python process that sleeps and, when
asked, writes a sanitized tiny-cpu report recorded from a real run (``data/``). Tests that boot
the real server are marked ``real_vllm``. Run this tier under ``flock /tmp/vllmqual-real.lock``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_cluster import LocalRayCluster, NodeSpec

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
REPORT_SAMPLE = DATA / "tiny-cpu-report.json"

FAKE_JOB = """
import pathlib, shutil, sys, time
tag, sleep_s, sample = sys.argv[1], float(sys.argv[2]), sys.argv[3]
reports = pathlib.Path(sys.argv[4])
if sample != "-":
    reports.mkdir(parents=True, exist_ok=True)
    shutil.copy(sample, reports / "tiny-cpu-fake.json")
time.sleep(sleep_s)
"""


def fake_argv(tag: str, sleep_s: float, *, report: Path | str | None = REPORT_SAMPLE) -> list[str]:
    """A job that sleeps ``sleep_s`` (its command line carries ``tag``) and leaves ``report`` as its report."""
    import sys

    return [sys.executable, "-c", FAKE_JOB, tag, str(sleep_s), str(report) if report else "-", "{reports}"]


def processes_with(tag: str) -> list[int]:
    """Pids whose command line carries ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if tag in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def machine_addresses() -> set[str]:
    """This machine's addresses other than loopback: the outward one and what its host name resolves to."""
    import socket

    found = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a UDP "connect" sends nothing: it only picks the outward interface
            found.add(probe.getsockname()[0])
        except OSError:
            pass
    try:
        found.update(info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        pass
    return {a for a in found if not a.startswith("127.") and a != "::1"}


def cluster_env(tmp_path: Path) -> dict[str, str]:
    """What every node's workers see: this checkout first on sys.path, a work folder of the test's own."""
    return {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "VLLMQUAL_FLEET_WORKDIR": str(tmp_path / "node-work")}


@pytest.fixture(scope="session")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    """Three 2-core nodes offering ``fleet_node``; the third is labelled ``kv=small``; a fourth with 2 GPUs.

    One cluster for every test that does not kill a node or need other nodes (the fleet tests run
    one after another in one worker): a start of these four nodes takes about 20 s."""
    tmp = tmp_path_factory.mktemp("ray")
    nodes = [NodeSpec(2, resources={"fleet_node": 1}), NodeSpec(2, resources={"fleet_node": 1}),
             NodeSpec(2, resources={"fleet_node": 1}, labels={"kv": "small"}),
             NodeSpec(1, gpus=2, resources={"gpu_node": 1})]
    cluster = LocalRayCluster(nodes, env=cluster_env(tmp))
    with cluster:  # a node that fails to join stops the nodes already started
        yield cluster
    assert cluster.pids() == [], "the test cluster left processes behind"
