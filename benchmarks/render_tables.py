"""Render the tables of docs/PERFORMANCE.md from a ``make bench`` result file.

    python -m benchmarks.render_tables [reports/bench/latest.json]

Prints Markdown; the prose of docs/PERFORMANCE.md is written by hand around it, so that
the figures in the document are copied from one result file and never typed in.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _f(value: Any, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
    if not isinstance(value, (int, float)):
        return "n/a"
    return f"{value * scale:.{digits}f}{unit}"


def _ci(interval: Any) -> str:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if isinstance(interval, list) else "n/a"


def checks_table(results: dict[str, Any]) -> list[str]:
    """The Results table of docs/PERFORMANCE.md: target (guard), figure with its interval, verdict."""
    lines = ["| target | figure (this run) | verdict |", "|---|---|---|"]
    for row in results.get("checks", []):
        value = row["value"]
        shown = (f"{value:.4g}" if isinstance(value, float) else str(value)) + (f" {row['unit']}" if row["unit"] else "")
        interval = row.get("ci95")
        ci = f" (95 % CI {interval[0]:.3f}–{interval[1]:.3f})" if isinstance(interval, list) else ""
        lines.append(f"| {row['bound']} | {row['figure']}: **{shown}**{ci} | {row['verdict']} |")
    return lines


#: The guarded rate ratios (fidelity_tools.server_pace_tok_s): label, ratio key, each tool's share key.
PACED_ROWS = (("median decode tok/s as a share of the server's own in the same pass", "paced_median_decode_tok_s",
               "paced_median_decode"),
              ("median per-request output tok/s as a share of the server's pace in the same pass",
               "paced_median_output_tok_s_per_request", "paced_median_output_per_request"),
              ("pass-wall output throughput at the server's pace (median of the rounds' paired ratios)",
               "paced_output_throughput", None))


def _paced_row(c: int, row: dict[str, Any], label: str, key: str, share_key: str | None) -> str:
    d = row["decode"]
    shares = [_f(d[tool].get(share_key), 3) if share_key else "" for tool in ("harness", "vllm_bench")]
    return (f"| {c} | **guarded:** {label} | {shares[0]} | {shares[1]} | {_f(row['ratios'].get(key))} | "
            f"{_ci(row['ci95'].get(key))} |")


def fidelity_tables(fidelity: dict[str, Any]) -> list[str]:
    config = fidelity.get("config") or {}
    ttft_tokens = config.get("ttft_prompt_tokens", config.get("prompt_tokens"))
    ttft_label = f"median TTFT, {ttft_tokens:,}-token prompt, 1 token (ms)" if ttft_tokens else "median TTFT (ms)"
    decode_label = f"{config.get('prompt_tokens', 0):,}-token prompt, {config.get('max_tokens', 0)} tokens"
    lines = ["| concurrency | figure | harness | vllm bench | harness / vllm bench | 95% CI |",
             "|---|---|---|---|---|---|"]
    for row in fidelity.get("summary", []):
        c = row["concurrency"]
        t, d = row["ttft"], row["decode"]
        lines += [
            f"| {c} | {ttft_label} | {_f(t['harness']['median_ttft_s'], 1, 1e3)} | "
            f"{_f(t['vllm_bench']['median_ttft_s'], 1, 1e3)} | {_f(row['ratios']['median_ttft'])} | "
            f"{_ci(row['ci95']['median_ttft'])} |",
            f"| {c} | median decode tok/s, {decode_label} | {_f(d['harness']['median_decode_tok_s'], 1)} | "
            f"{_f(d['vllm_bench']['median_decode_tok_s'], 1)} | {_f(row['ratios']['median_decode_tok_s'])} | "
            f"{_ci(row['ci95']['median_decode_tok_s'])} |",
            f"| {c} | the server's own decode tok/s (1 / mean TPOT) in those passes | "
            f"{_f(d['harness'].get('server_decode_tok_s'), 1)} | {_f(d['vllm_bench'].get('server_decode_tok_s'), 1)} | "
            f"{_f(row['ratios'].get('server_decode_harness_passes_vs_vllm_bench_passes'))} | |",
            f"| {c} | median per-request output tok/s (tokens / e2e), {decode_label} | "
            f"{_f(d['harness'].get('median_output_tok_s_per_request'), 1)} | "
            f"{_f(d['vllm_bench'].get('median_output_tok_s_per_request'), 1)} | "
            f"{_f(row['ratios'].get('median_output_tok_s_per_request'))} | "
            f"{_ci(row['ci95'].get('median_output_tok_s_per_request'))} |",
            f"| {c} | output throughput tok/s (pass wall clock: each tool's median of passes; the ratio is "
            f"the median of the rounds' paired ratios), {decode_label} | "
            f"{_f(d['harness']['output_throughput_tok_s'], 1)} | "
            f"{_f(d['vllm_bench']['output_throughput_tok_s'], 1)} | {_f(row['ratios']['output_throughput'])} | "
            f"{_ci(row['ci95']['output_throughput'])} |",
        ]
        lines += [_paced_row(c, row, label, key, share_key) for label, key, share_key in PACED_ROWS
                  if key in row["ratios"]]
        by_round = row.get("output_throughput_by_round") or []
        if by_round:
            lines.append(f"| {c} | pass-wall throughput ratio of each round's two passes | | | "
                         + ", ".join(_f(r["ratio"], 2) for r in by_round) + " | |")
    lines += ["", "| concurrency | workload | tool | client mean TTFT (ms) | server histogram mean TTFT (ms) | "
              "client / server | requests | rates not measurable (burst delivery) |", "|---|---|---|---|---|---|---|---|"]
    for row in fidelity.get("summary", []):
        for workload in ("ttft", "decode"):
            for tool in ("harness", "vllm_bench"):
                f = row[workload][tool]
                ratio = (f["mean_ttft_s"] / f["server_ttft_mean_s"]
                         if f["mean_ttft_s"] and f["server_ttft_mean_s"] else None)
                lines.append(f"| {row['concurrency']} | {workload} | {tool} | {_f(f['mean_ttft_s'], 1, 1e3)} | "
                             f"{_f(f['server_ttft_mean_s'], 1, 1e3)} | {_f(ratio, 2)} | {f['requests']} | "
                             f"{_rates_not_measurable(f) if workload == 'decode' else ''} |")
    return lines


def _rates_not_measurable(figures: dict[str, Any]) -> str:
    """'n of m' requests whose rates were not measurable (results older than the rule: their burst count)."""
    if "rate_not_measurable" in figures:
        return f"{figures['rate_not_measurable']} of {figures['rate_requests']}"
    return f"{figures.get('burst_requests', 'n/a')} (streams within 5 ms)"


def chunk_rate_table(fidelity: dict[str, Any]) -> list[str]:
    lines = ["| concurrency | tool | chunks/s | client CPU µs/chunk | client share of one core |",
             "|---|---|---|---|---|"]
    for row in fidelity.get("chunk_rate", []):
        lines.append(f"| {row['concurrency']} | harness | {row['chunks_per_s']:.0f} | "
                     f"{_f(row['client_cpu_us_per_chunk'], 1)} | {_f(row['client_core_fraction'], 2, 100, ' %')} |")
        if "vllm_bench_client_core_fraction" in row:
            lines.append(f"| {row['concurrency']} | vllm bench | {row['vllm_bench_chunks_per_s']:.0f} | "
                         f"{_f(row['vllm_bench_client_cpu_us_per_chunk'], 1)} | "
                         f"{_f(row['vllm_bench_client_core_fraction'], 2, 100, ' %')} |")
    floor = fidelity.get("client_ttft_floor")
    if floor:
        lines += ["", f"Client TTFT floor (the same {floor['prompt_tokens']}-token requests answered at once by an "
                  f"in-process server, median of {floor['requests']}): harness "
                  f"{_f(floor['harness_median_ttft_ms'], 2)} ms, vllm bench {_f(floor['vllm_bench_median_ttft_ms'], 2)} ms."]
    return lines


def calibration_table(section: dict[str, Any]) -> list[str]:
    lines = ["| target tokens | ours: error | ours: wall s | ours: client CPU s | counter calls | "
             "peers: error | peers: wall s | ours / peers (wall) |", "|---|---|---|---|---|---|---|---|"]
    for target, row in (section.get("by_target") or {}).items():
        if "refused" in row:
            lines.append(f"| {int(target):,} | refused | | | | {row.get('peer_error')} | "
                         f"{_f(row.get('peer_wall_s'))} | |")
            continue
        usage = f" (usage {row['ours_usage_error']})" if "ours_usage_error" in row else ""
        peer_usage = f" (usage {row['peer_usage_error']})" if row.get("peer_usage_error") is not None else ""
        lines.append(f"| {int(target):,} | {row['ours_error']}{usage} | {_f(row['ours_wall_s'])} | "
                     f"{_f(row['ours_cpu_s'])} | {row['ours_counter_calls']} | {row['peer_error']}{peer_usage} | "
                     f"{_f(row['peer_wall_s'])} | {_f(row.get('ours_over_peer_wall'), 2)} |")
    return lines


def verdict_table(verdict: dict[str, Any]) -> list[str]:
    wall = verdict["wall_s"]
    rows = [("server boot (cold_start_s)", verdict["server_boot_s"]),
            ("gate requests (attempt latencies)", verdict["gate_requests_s"]),
            ("harness overhead (everything else)", verdict["harness_overhead_s"]),
            ("  of which teardown", verdict["teardown_s"]),
            ("  of which inside gates, besides requests", verdict["in_gate_overhead_s"]),
            ("  of which outside gates (start-up, collection, report), besides boot and teardown", verdict["outside_gates_s"])]
    lines = ["| part | seconds | share of wall |", "|---|---|---|"]
    lines += [f"| {name} | {value:.2f} | {value / wall * 100:.1f} % |" for name, value in rows]
    lines.append(f"| **wall** | **{wall:.2f}** | 100 % |")
    if verdict.get("harness_cpu_s") is not None:
        lines.append(f"| harness process CPU (user + system) | {verdict['harness_cpu_s']:.2f} | "
                     f"{verdict['harness_cpu_s'] / wall * 100:.1f} % |")
    for phase, label in (("boot", "until ready"), ("gates", "from ready to the report"), ("after", "after the report")):
        part = (verdict.get("harness_cpu_by_phase") or {}).get(phase)
        if part:
            lines.append(f"|   harness process CPU {label} | {part['cpu_s']:.2f} of {part['wall_s']:.2f} s | "
                         f"{part['cpu_s'] / part['wall_s'] * 100 if part['wall_s'] else 0:.1f} % of that part |")
    stalls = verdict.get("server_stalls")
    if stalls:
        lines.append(f"| API-server stalls seen by an outside /health probe (> {stalls['threshold_s']} s each) | "
                     f"{stalls['stalled_s']:.2f} ({stalls['stalls']} stalls, longest {stalls['longest_s']:.2f} s) | "
                     f"{stalls['stalled_s'] / wall * 100:.1f} % |")
    lines += ["", "| gate | outcome | duration s | requests s | other s |", "|---|---|---|---|---|"]
    for gate in verdict.get("gates", []):
        if gate["duration_s"] >= 0.01:
            lines.append(f"| {gate['gate']} | {gate['outcome']} | {gate['duration_s']:.2f} | {gate['request_s']:.2f} | "
                         f"{gate['in_gate_overhead_s']:.2f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    path = Path(args[0]) if args else ROOT / "reports" / "bench" / "latest.json"
    results = json.loads(path.read_text())
    out = [f"<!-- rendered from {path.name} by benchmarks/render_tables.py -->", "", "### Checks", "",
           *checks_table(results)]
    if "prompts" in results and "by_target" in results["prompts"]:
        out += ["", "### Calibration, fixture tokenizer (HFTokenCounter)", "", *calibration_table(results["prompts"])]
    fidelity = results.get("fidelity") or {}
    if "summary" in fidelity:
        out += ["", "### Fidelity", "", *fidelity_tables(fidelity), "", "### Chunk rate", "",
                *chunk_rate_table(fidelity)]
    spin = fidelity.get("post_request_cpu")
    if spin:
        out += ["", "### A fixed CPU job right after a request (benchmarks/bench_spin.py)", "",
                "| when | worst wall (ms) | CPU (ms) | run-queue wait (ms) |", "|---|---|---|---|"]
        idle = max(spin["idle"], key=lambda j: j["wall_ms"])
        out.append(f"| idle | {idle['wall_ms']:.1f} | {idle['cpu_ms']:.1f} | {_f(idle['runqueue_wait_ms'], 1)} |")
        for delay, jobs in spin["after_request"].items():
            job = max(jobs, key=lambda j: j["wall_ms"])
            out.append(f"| {delay} s after a 1-token completion | {job['wall_ms']:.1f} | {job['cpu_ms']:.1f} | "
                       f"{_f(job['runqueue_wait_ms'], 1)} |")
    if "server_calibration" in fidelity:
        out += ["", "### Calibration against the server's /tokenize", "",
                *calibration_table(fidelity["server_calibration"])]
    if "wall_s" in (results.get("verdict") or {}):
        out += ["", "### Time to verdict", "", *verdict_table(results["verdict"])]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
