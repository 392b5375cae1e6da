"""What changes the CPU build's answers? The probe on the fixture model under environments a node may have.

Usage: python scripts/measure_fleet_numerics.py OUT [--variants base,base-again,threads-2,...]
       [--out tests/data/fleet-numerics.json]

Each variant runs the equivalence probe alone (``pytest suites/test_equivalence.py --recipe tiny-cpu``
at TP=1, no depth windows) with a server started under that variant's environment, set outside the
recipe (the recipe's ``launcher.env`` leaves ``VLLM_CPU_OMP_THREADS_BIND`` out, so the environment
the run starts in decides it, as a node's ``ray start`` environment would), or under ``taskset``.
Every variant's answers are then compared with the first one's by the fleet's own comparison
(``fleet.answers``): the figures, which of them differ from identical answers, and the fingerprint
field that records the cause (none: the cause is not in the fingerprint). It writes the figures as
JSON (no text, no host names) and prints one line per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_vllmqual.equivalence import sidecar as sidecars
from pytest_vllmqual.fleet.answers import NodeAnswers, differing_figures, pair_section
from pytest_vllmqual.hashing import canonical_json
from pytest_vllmqual.launch.fingerprint import fingerprint_key

ROOT = Path(__file__).resolve().parents[1]

VARIANTS: dict[str, tuple[dict[str, str], list[str]]] = {
    "base": ({"VLLM_CPU_OMP_THREADS_BIND": "0"}, []),
    "base-again": ({"VLLM_CPU_OMP_THREADS_BIND": "0"}, []),
    "other-core": ({"VLLM_CPU_OMP_THREADS_BIND": "1"}, []),
    "threads-2": ({"VLLM_CPU_OMP_THREADS_BIND": "0-1"}, []),
    "aten-default": ({"VLLM_CPU_OMP_THREADS_BIND": "0", "ATEN_CPU_CAPABILITY": "default"}, []),
    "onednn-sse41": ({"VLLM_CPU_OMP_THREADS_BIND": "0", "ONEDNN_MAX_CPU_ISA": "SSE41"}, []),
    "taskset-0-bind-0": ({"VLLM_CPU_OMP_THREADS_BIND": "0"}, ["taskset", "-c", "0"]),
    "auto-bind": ({}, []),
    "auto-bind-taskset-0": ({}, ["taskset", "-c", "0"]),
    "auto-bind-no-reserve": ({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, []),
    "auto-bind-no-reserve-taskset-0": ({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, ["taskset", "-c", "0"]),
}
RECIPE_ENV = '{"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_USE_AOT_COMPILE": "0"}'


def run_variant(name: str, out: Path) -> dict[str, Any]:
    """One probe run under the variant's environment; its report, sidecar, time and exit code."""
    env_extra, prefix = VARIANTS[name]
    env = {k: v for k, v in os.environ.items() if k not in {"VLLM_CPU_OMP_THREADS_BIND", "ATEN_CPU_CAPABILITY",
                                                            "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS",
                                                            "VLLM_CPU_NUM_OF_RESERVED_CPU"}}
    env.update(env_extra)
    reports = out / name
    argv = [*prefix, sys.executable, "-m", "pytest", str(ROOT / "suites" / "test_equivalence.py"), "--recipe", "tiny-cpu",
            "--vllmqual-set", "serve.tensor_parallel_size=1", "--vllmqual-set", f"launcher.env={RECIPE_ENV}",
            "--vllmqual-set", "gates.equivalence.depth=false", f"--vllmqual-reports-dir={reports}",
            "-p", "no:cacheprovider", "-q"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    (out / f"{name}.log").write_text(done.stdout[-20000:] + done.stderr[-20000:])
    found = sorted(p for p in reports.glob("*.json") if not p.name.startswith(("comparison-", "campaign-")))
    report = json.loads(found[-1].read_text()) if found else {}
    body, why = sidecars.load(report.get("equivalence_probe") or {}, reports) if report else (None, "no report")
    return {"name": name, "env": env_extra, "prefix": prefix, "exit": done.returncode, "elapsed_s": round(elapsed, 1),
            "report": report, "sidecar": body if body is not None else why}


def compare(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The other variant against the first, with the fleet's comparison and the fingerprint's difference."""
    nodes = [NodeAnswers(node=v["name"], report=v["report"], sidecar=v["sidecar"],
                         fingerprint=fingerprint_key(v["report"].get("fingerprint"), v["report"].get("hardware")))
             for v in (base, other)]
    if not all(isinstance(n.sidecar, dict) for n in nodes):
        return {"compared": False, "why": [str(n.sidecar) for n in nodes if not isinstance(n.sidecar, dict)]}
    section = pair_section(*nodes)
    fa, fb = (n.fingerprint.get("fields") or {} for n in nodes)
    return {"compared": True, "differing": differing_figures(section, None),
            "figures": {f["figure"]: f["point"] for f in section.get("figures") or []},
            "kl_max": ((section.get("teacher_forced") or {}).get("overall") or {}).get("kl_max"),
            "greedy": {k: (section.get("greedy") or {}).get(k) for k in ("prompts", "identical", "near_ties", "hard")},
            "fingerprint_differs": sorted(k for k in {*fa, *fb} if fa.get(k) != fb.get(k))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    runs = [run_variant(name, args.work) for name in names]
    rows = []
    for run in runs:
        row = {k: run[k] for k in ("name", "env", "prefix", "exit", "elapsed_s")}
        row["fingerprint_env"] = {k: v for k, v in ((run["report"].get("fingerprint") or {}).get("env") or {}).items()
                                  if v is not None}
        row["against_first"] = compare(runs[0], run) if run is not runs[0] else None
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(canonical_json({"command": " ".join(["python", *sys.argv]), "variants": rows},
                                           compact=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
