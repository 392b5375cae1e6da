"""`make bench` on an idle machine: the rules that keep it from going red on a server stall.

- Burst delivery: a rate (decode tok/s, per-request output tok/s) over tokens that reached the
  client together is ``not measurable`` for that request, by one rule for both tools; the
  medians are over the measurable requests (figures of 2026-12-05: medians of 6,483 and
  297,129 tok/s from a server that decodes at about 200).
- The bench's own server places its engine on one core, leaving the other to the API server
  and the clients (the busy-poll of two pinned TP ranks was the cause of the stalls).
- A guarded figure is demoted to ``reported`` only with three idle runs whose spread exceeds
  its guard, and a ratio against vLLM bench always keeps its guard.
- ``make bench`` states how long it took, and the Makefile and docs/PERFORMANCE.md agree on it.

No server, no timing: the figures are given.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import fidelity_common, fidelity_tools, run_all
from pytest_vllmqual.recipe.loader import resolve_recipe

ROOT = Path(__file__).resolve().parents[2]
Figures = fidelity_common.RequestFigures


# -- burst delivery ---------------------------------------------------------------------------


def test_a_stream_that_arrived_in_one_burst_gives_no_rate() -> None:
    # 128 tokens, the 127 after the first within 0.43 ms: the 297,129 tok/s of 2026-12-05.
    burst = Figures(1024, 128, 0.500, 0.500 + 127 / 297_129, True)
    assert burst.decode_tok_s is None
    assert burst.output_tok_s is None
    # 6,483 tok/s: 127 tokens over 19.6 ms, still a burst (under 50 ms).
    assert Figures(1024, 128, 0.500, 0.500 + 127 / 6_483, True).decode_tok_s is None


def test_a_stream_read_as_it_was_generated_keeps_its_rates() -> None:
    steady = Figures(1024, 128, 0.100, 0.100 + 127 / 200, True, max_gap_s=0.007, first_half_share=0.5)
    assert steady.rate_not_measurable is None
    assert steady.decode_tok_s == pytest.approx(200.0)
    assert steady.output_tok_s == pytest.approx(128 / 0.735)


@pytest.mark.parametrize(("timings", "why"), [
    ((10, 0.1, 0.5, None, None), "fewer than 16"),
    ((128, 0.1, 0.14, None, None), "under 50 ms"),
    # A one-second stall, then the backlog: the window is long, the rate is the stall's.
    ((128, 0.1, 1.3, 1.0, 0.9), "a stall, then a burst"),
    # A late first token, then the backlog at once: the first half of the chunks in 5 % of the window.
    ((128, 0.1, 0.7, 0.2, 0.05), "the first half of the chunks arrived within 5 %"),
    ((128, 0.1, 0.7, 0.2, 0.9), "the second half of the chunks arrived within 10 %"),
])
def test_each_part_of_the_rule_names_why(timings: tuple[int, float, float, float | None, float | None],
                                         why: str) -> None:
    tokens, ttft, end, max_gap, half = timings
    figures = Figures(1024, tokens, ttft, end, True, max_gap, half)
    assert figures.decode_tok_s is None and figures.output_tok_s is None
    assert why in (figures.rate_not_measurable or "")


def test_clumps_of_a_few_tokens_in_the_middle_keep_the_rate() -> None:
    """A busy client reads two or three chunks at a time: most waits are near zero, the rate is right."""
    times, t = [], 0.1
    for i in range(128):
        t += 0.015 if i % 3 == 0 else 0.00005  # three tokens per read, one read every 3 steps of 5 ms
        times.append(t)
    gaps = fidelity_common.gaps_of(times)
    figures = Figures(1024, 128, times[0], times[-1], True, *fidelity_common.gap_summary(gaps))
    assert figures.rate_not_measurable is None
    assert figures.decode_tok_s == pytest.approx(127 / (times[-1] - times[0]))


def test_a_backlog_at_the_start_gives_no_rate() -> None:
    # The first token late, then 80 tokens at once, then 47 at 5 ms each.
    times = [0.5 + 0.00005 * i for i in range(81)] + [0.504 + 0.005 * (i + 1) for i in range(47)]
    figures = Figures(1024, 128, times[0], times[-1], True, *fidelity_common.gap_summary(fidelity_common.gaps_of(times)))
    assert "first half" in (figures.rate_not_measurable or "")


def test_the_rule_is_the_same_for_both_tools() -> None:
    """The harness's chunk times and vLLM bench's ITLs give the same gaps, so the same verdict."""
    times = [0.1 + 0.005 * i for i in range(128)]
    harness = fidelity_common.gap_summary(fidelity_common.gaps_of(times))
    vllm_bench = fidelity_common.gap_summary([0.005] * 127)
    assert harness[0] == pytest.approx(vllm_bench[0]) and harness[1] == pytest.approx(vllm_bench[1])
    a = Figures(1024, 128, times[0], times[-1], True, *harness)
    b = Figures(1024, 128, times[0], times[-1], True, *vllm_bench)
    assert a.decode_tok_s == pytest.approx(b.decode_tok_s or -1.0) and a.decode_tok_s == pytest.approx(200.0)


def _requests(steady: int, bursts: int) -> list[fidelity_common.RequestFigures]:
    return ([Figures(1024, 128, 0.1, 0.1 + 127 / 200, True, 0.007, 0.5) for _ in range(steady)]
            + [Figures(1024, 128, 0.1, 0.1001, True, 0.00001, 0.5) for _ in range(bursts)])


def test_medians_are_over_the_measurable_requests_and_the_rest_are_counted() -> None:
    passes = [fidelity_common.PassResult(tool, 1, 0, _requests(6, 5 if tool == "harness" else 0), 5.0,
                                         workload="decode") for tool in ("harness", "vllm_bench")]
    summary = fidelity_tools.summarize(passes, 1)
    harness = summary["decode"]["harness"]
    assert harness["median_decode_tok_s"] == pytest.approx(200.0)  # the 5 bursts (10^6 tok/s) left out
    assert (harness["rate_not_measurable"], harness["rate_requests"]) == (5, 11)
    assert summary["ratios"]["median_decode_tok_s"] == pytest.approx(1.0)
    assert summary["ratios"]["median_output_tok_s_per_request"] == pytest.approx(1.0)


def test_a_median_needs_enough_measurable_requests() -> None:
    need = fidelity_common.RATE_MIN_REQUESTS
    assert fidelity_tools.median_of_measurable([200.0] * (need - 1) + [None] * 20) is None
    assert fidelity_tools.median_of_measurable([200.0] * need + [None] * 20) == 200.0


# -- the bench's own server ---------------------------------------------------------------------


def test_the_bench_server_places_its_engine_on_one_core_by_default() -> None:
    assert getattr(fidelity_common.FidelityConfig(), "engine_bind", None) == "one-core"
    args = run_all.parse_args([])
    assert getattr(args, "engine_bind", None) == "one-core"


def test_one_core_runs_the_recipe_at_tp1_on_core_0_and_recipe_keeps_it() -> None:
    recipe = resolve_recipe("tiny-cpu", ROOT / "fixtures" / "recipes")
    bound = fidelity_common.bench_server_recipe(recipe, "one-core")
    assert bound.serve.tensor_parallel_size == 1
    assert bound.server_env()["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    flags = bound.serve_flags(host="127.0.0.1", port=8000)
    assert flags[flags.index("--tensor-parallel-size") + 1] == "1"
    shared = fidelity_common.bench_server_recipe(recipe, "one-core-tp2")
    assert shared.serve.tensor_parallel_size == 2 and shared.server_env()["VLLM_CPU_OMP_THREADS_BIND"] == "0|0"
    assert fidelity_common.bench_server_recipe(recipe, "recipe") is recipe
    with pytest.raises(ValueError, match="unknown engine bind"):
        fidelity_common.bench_server_recipe(recipe, "two-cores")


def test_a_recipe_not_on_vllm_cpu_is_served_as_written() -> None:
    recipe = resolve_recipe("tiny-gpu", ROOT / "fixtures" / "recipes")
    assert fidelity_common.bench_server_recipe(recipe, "one-core") is recipe


# -- demotion and guards ----------------------------------------------------------------------


def test_ratios_against_vllm_bench_keep_a_guard() -> None:
    ratios = [c for c in run_all.build_checks()["fidelity"] if "harness / vllm bench" in c.name]
    assert ratios
    for check in ratios:
        assert check.unguarded is None and getattr(check, "demoted", None) is None, check.name
        assert check.guard is not None, check.name
        assert check.verdict(1e6) == "FAIL", check.name


def test_a_demotion_needs_three_idle_runs_whose_spread_exceeds_the_guard() -> None:
    two_runs = run_all.Demotion((0.5, 0.9), "docs/PERFORMANCE.md, section 4")
    narrow = run_all.Demotion((0.10, 0.12, 0.15), "docs/PERFORMANCE.md, section 4")
    wide = run_all.Demotion((0.10, 0.25, 0.12), "docs/PERFORMANCE.md, section 4")
    guard = (None, 0.20)
    assert "3 needed" in (two_runs.shortfall(guard) or "")
    assert "within the guard" in (narrow.shortfall(guard) or "")
    assert wide.shortfall(guard) is None
    assert run_all.Demotion((0.85, 1.2, 0.95), "x").shortfall((0.9, 1.1)) is None
    assert run_all.Demotion((0.92, 1.08, 0.95), "x").shortfall((0.9, 1.1)) is not None


def test_the_shipped_checks_refuse_a_demotion_without_its_runs() -> None:
    check = run_all.Check("harness overhead / wall of a full run", ("x",), None, 0.05, guard=(None, 0.20),
                          demoted=run_all.Demotion((0.202,), "one busy run"))
    with pytest.raises(ValueError, match="cannot be demoted"):
        run_all.check_rules([check])
    ratio = run_all.Check("fidelity c=1: x, harness / vllm bench", ("x",), 0.97, 1.03, guard=(0.9, 1.1),
                          demoted=run_all.Demotion((0.5, 1.0, 1.5), "x"))
    with pytest.raises(ValueError, match="keeps a guard"):
        run_all.check_rules([ratio])
    justified = run_all.Check("y", ("y",), None, 0.05, guard=(None, 0.20),
                              demoted=run_all.Demotion((0.10, 0.25, 0.12), "x"))
    run_all.check_rules([justified])
    assert justified.verdict(0.9) == "reported" and justified.bound() == "none (reported)"


# -- how long `make bench` takes ------------------------------------------------------------------


def _minutes(text: str) -> set[str]:
    return set(re.findall(r"about (\d+(?:-\d+)?) minutes", text))


def test_the_makefile_and_docs_state_one_duration_for_make_bench() -> None:
    """The Makefile, README.md and docs/PERFORMANCE.md say how long ``make bench`` takes, all alike."""
    makefile = (ROOT / "Makefile").read_text()
    comment = makefile[:makefile.index("\nbench:")].rsplit("\n\n", 1)[-1]
    stated = _minutes(comment)
    assert len(stated) == 1, f"the Makefile's bench comment states {stated or 'no'} duration"
    for doc in ("docs/PERFORMANCE.md", "README.md"):
        text = (ROOT / doc).read_text()
        line = next(line for line in text.splitlines() if line.startswith("make bench "))
        assert _minutes(line) == stated, f"{doc} says {line!r}, the Makefile {stated}"
