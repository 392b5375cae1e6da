"""The fleet tests' stand-in jobs and what they look for: a job that sleeps (``fake_argv``), the
processes that carry its tag, this machine's addresses, and the environment a Ray node's
workers get.

``fake_argv`` stands in for a job's pytest run where the test is about Ray's side (placement,
GPU accounting, deadlines, lost nodes, a killed driver): a Python process that sleeps and, when
asked, writes a sanitized tiny-cpu report recorded from a real run (``tests/fleet/data/``).
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_vllmqual.layout import user_cache_root
from support import ROOT, TESTS

__all__ = ["DATA", "FAKE_JOB", "REPORT_SAMPLE", "ROOT", "cluster_env", "fake_argv", "machine_addresses",
           "processes_with"]

DATA = TESTS / "fleet" / "data"
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
    """What every node's workers see: this checkout first on sys.path, a work folder of the test's own,
    and this user's vLLM cache. A cluster's HOME is a folder of its own (tests/support/local_cluster.py),
    where vLLM's default cache would be empty: every cluster's first servers would then inspect the
    model's class again, in a subprocess that imports vLLM (about 14 CPU-s each, twice per fleet run)."""
    cache = os.environ.get("VLLM_CACHE_ROOT") or str(user_cache_root() / "vllm")
    return {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "VLLMQUAL_FLEET_WORKDIR": str(tmp_path / "node-work"), "VLLM_CACHE_ROOT": cache}
