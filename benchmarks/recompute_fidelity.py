"""Recompute the fidelity ratios of stored ``make bench`` result files with today's rules.

    python -m benchmarks.recompute_fidelity reports/bench/bench-*.json

Each result file keeps every pass with its requests and the server's histogram means, so a change
of statistic (such as the ratios at the server's pace, ``fidelity_tools.server_pace_tok_s``) can be
checked against every run already made instead of only the next one. Prints one line per file and
concurrency: the plain ratios as the run printed them, then the guarded ones recomputed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from benchmarks.fidelity_common import PassResult, RequestFigures
from benchmarks.fidelity_tools import summarize

GUARDED = ("paced_median_decode_tok_s", "paced_median_output_tok_s_per_request", "paced_output_throughput")
PLAIN = ("median_decode_tok_s", "median_output_tok_s_per_request", "output_throughput")


def _fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def passes_of(results: dict[str, Any]) -> list[PassResult]:
    """The stored passes as the bench built them (derived fields such as rates are recomputed)."""
    passes = []
    for data in results.get("fidelity", {}).get("passes", []):
        requests = [RequestFigures(**_fields(RequestFigures, r)) for r in data["requests"]]
        passes.append(PassResult(**{**_fields(PassResult, data), "requests": requests}))
    return passes


def recompute(path: Path) -> list[str]:
    results = json.loads(path.read_text())
    passes = passes_of(results)
    lines = []
    for c in sorted({p.concurrency for p in passes}):
        ratios = summarize(passes, c)["ratios"]
        plain = " ".join(_fmt(ratios.get(k)) for k in PLAIN)
        guarded = " ".join(_fmt(ratios.get(k)) for k in GUARDED)
        lines.append(f"{path.name} c={c}: plain decode/output/pass-wall {plain}; at the server's pace {guarded}")
    return lines


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    for path in parser.parse_args(argv).files:
        print("\n".join(recompute(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
