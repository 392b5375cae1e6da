"""scripts/load_slo_table.py: the table of docs/PERFORMANCE.md from a load report's levels."""

from __future__ import annotations

from support import ROOT, load_script

table = load_script(ROOT / "scripts" / "load_slo_table.py", "load_slo_table").table


def test_a_level_row_becomes_the_servers_buckets_and_the_time_outside_the_engine() -> None:
    row = {"level": 2, "ttft_p50_s": 0.067, "ttft_p95_s": 0.183, "e2e_p50_s": 0.24, "e2e_p95_s": 0.558,
           "ttft_outside_engine_p50_s_low": 0.007, "ttft_outside_engine_p50_s_high": 0.027,
           "ttft_outside_engine_p95_s_low": 0.103, "ttft_outside_engine_p95_s_high": 0.123,
           "e2e_outside_engine_p50_s_low": None, "e2e_outside_engine_p50_s_high": None,
           "server_http_duration_mean_s": 0.25, "server_e2e_mean_s": 0.248, "client_cpu_share": 0.026,
           "client_reader_oversleep_p99_s": 0.0933, "slo_judgement": "met"}
    attempts = [{"label": "load-2-warmup", "ok": True, "latency_s": 9.0},
                *({"label": f"load-2-{i}", "ok": True, "latency_s": 0.3} for i in range(4))]
    report = {"load": {"levels": [row]}, "gates": [{"gate": "load", "attempts": attempts}]}
    line = table(report).splitlines()[2]
    assert line == ("| 2 | 67 / 183 | (40, 60] / (60, 80] | 240 / 558 | n/a / n/a | 2 | 50 | 2.6 | 93.3 | met |"), line
