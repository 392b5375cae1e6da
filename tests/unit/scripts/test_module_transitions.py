"""The module transitions of a real comparison stay under their ceiling (see ``scripts/module_transitions.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

from support import ROOT, python_path

SCRIPT = ROOT / "scripts" / "module_transitions.py"

#: Measured on the committed cpu-smollm2 pair after the read model (``report.read_model``) was built;
#: a change that sends a reader through more modules, or back to more of them, raises these on purpose.
# "all" rose from 44/28/16 when the fixed words left records for words.py: a word's str() and
# format() are calls into that module from every judge that writes one. It rose from 47/29/18 to
# 51/31/20 when the comparison gained its task layer: the paired statistics (equivalence.paired, which
# now owns the exact McNemar test the flips call) and the layer over them (equivalence.tasks), and to
# 53/32/21 with the depth buckets (the equivalence section steps into equivalence.depth_figures), to
# 55/33/22 with the promotion rule (the section steps into equivalence.layers once, for its three
# layers and the rule that may block), and to 56/34/22 with the floor under load (the section asks
# equivalence.load_floor whether an arm measured it).
CEILINGS = {"candidate": {"steps": 10, "modules": 10, "returns": 0},
            "all": {"steps": 56, "modules": 34, "returns": 22}}


def _measure(follow: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, str(SCRIPT), "--follow", follow, "--steps"], capture_output=True,
                         text=True, check=False, cwd=ROOT, env={"PYTHONPATH": python_path(), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    figures: dict[str, int] = json.loads(lines[-1])
    steps = lines[:-1]
    assert len(steps) == figures["steps"] and sum(s.startswith("<-") for s in steps) == figures["returns"]
    return figures


def test_following_the_candidate_through_vllmqual_compare_stays_under_its_ceiling() -> None:
    for follow, ceiling in CEILINGS.items():
        figures = _measure(follow)
        assert figures["steps"] > 0
        over = {k: (figures[k], v) for k, v in ceiling.items() if figures[k] > v}
        assert over == {}, f"--follow {follow}: (measured, ceiling) {over}"
