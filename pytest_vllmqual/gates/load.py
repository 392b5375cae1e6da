"""The load gate: does the configuration hold the concurrency it is promoted for, within its SLOs?

Each promoted level of the recipe's ``gates.load`` is *sustained*: after one uncounted
warm-up request, a closed loop (``client.load_loop``) keeps exactly that many streamed
requests in flight until the level's requests are done. Every prompt is an exact-length
prompt with its own nonce (no prefix-cache hit flatters a level), every request asks for the
same number of output tokens (``ignore_eos``), and nothing is retried: a failed request is
an error of its level and stays in the record as a retained failure. The server's own
histograms (``/metrics``) are read after the warm-up and after the counted requests, so they
see exactly those requests.

A level passes when its goodput (``load_stats``) reaches ``min_goodput_pct`` with no errors,
TTFT and E2E judged on the client's figures (what the user waits), TPOT on the client's and the
server's histogram both (``load_views``). The gate passes when every promoted level does, fails
when one missed, and is skipped as not measured when a level missed while the client itself fell
behind (``client.lag``, measured over
each level): the one rule of :mod:`pytest_vllmqual.not_measured`, where a failure outranks it. A level above ``serve.max_num_seqs`` is
measured like any other: its requests queue in the server, which the report says. With
``find_max`` the gate also searches the highest level that meets the SLOs, up to
``max_ceiling``; that search is reported and never fails the gate.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.client.lag import LagMeter
from pytest_vllmqual.client.load_loop import LoopRequest, run_closed_loop
from pytest_vllmqual.client.prompts import ChatShape, ExactPrompt, ExactPromptBuilder, new_nonce
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import StreamResult
from pytest_vllmqual.client.token_counters import ServerTokenCounter
from pytest_vllmqual.launch.base import ProgressFn
from pytest_vllmqual.not_measured import Measured, not_measured, of_level
from pytest_vllmqual.recipe.load_gate_settings import LoadSettings, load_settings
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import LevelJudgement

from .ladder import fetch_metrics_text, parse_metrics_text
from .load_stats import (
    LevelFigures,
    RequestFigures,
    SearchResult,
    level_figures,
    search_max_level,
    server_cross_check,
)
from .load_views import SLO_FIGURES, compare_views, good_without_lag, judge_level, lag_reason
from .recorder import GateRecorder
from .verdict import GateVerdict

__all__ = ["LevelRunner", "LoadResult", "load_gate", "run_load"]

_BUILD_THREADS = 4


def _figures(result: StreamResult) -> RequestFigures:
    usage = result.usage or {}
    completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    return RequestFigures.from_times(
        ok=result.ok, ttft_s=result.ttft_s, e2e_s=result.e2e_s,
        completion_tokens=completion if isinstance(completion, int) else None,
        prompt_tokens=prompt if isinstance(prompt, int) else None,
        output_times=result.output_times, error_kind=result.attempt.error_kind)


@dataclass
class LevelRunner:
    """Measures one level at a time against one server, building its distinct prompts first."""

    client: QualClient
    settings: LoadSettings
    progress: ProgressFn
    max_num_seqs: int | None = None
    failures: list[str] = field(default_factory=list)
    _builder: ExactPromptBuilder | None = None

    def prompts(self, level: int, count: int) -> list[ExactPrompt]:
        """``count`` distinct exact-length prompts for ``level`` (each with its own nonce)."""
        if self._builder is None:
            self._builder = ExactPromptBuilder(ServerTokenCounter(self.client.http, self.client.model))
        builder, tokens = self._builder, self.settings.prompt_tokens
        first = builder.build(tokens, ChatShape(), nonce=new_nonce(f"load {level}-0"))  # learns the pad words
        with concurrent.futures.ThreadPoolExecutor(max_workers=_BUILD_THREADS) as pool:
            rest = list(pool.map(lambda i: builder.build(tokens, ChatShape(), nonce=new_nonce(f"load {level}-{i}")),
                                 range(1, count)))
        return [first, *rest]

    def send(self, prompt: ExactPrompt, label: str) -> StreamResult:
        """One load request: streamed, the level's output tokens exactly (``ignore_eos``), never retried."""
        body = {**prompt.request_fields(), "max_tokens": self.settings.output_tokens, "temperature": 0,
                "ignore_eos": True}
        return self.client.stream_chat_once(body, label=label, output_times=True)

    def measure(self, level: int, *, phase: str) -> LevelFigures:
        """One sustained level: warm-up, the closed loop, the server's histograms before and after."""
        count = self.settings.requests_at(level)
        prompts = self.prompts(level, count + 1)
        queued = self.max_num_seqs is not None and level > self.max_num_seqs
        note = f" (above max_num_seqs {self.max_num_seqs}: requests queue in the server)" if queued else ""
        self.progress(f"load level {level} ({phase}): {count} requests, {level} in flight{note}")
        before: list[str | None] = []
        lag = LagMeter()

        def warmup() -> StreamResult:
            result = self.send(prompts[0], f"load-{level}-warmup")
            before.append(fetch_metrics_text(self.client.http))  # the window then holds only the counted requests
            lag.start()
            return result

        def send(i: int) -> StreamResult:
            return self.send(prompts[i + 1], f"load-{level}-{i}")

        def failed(done: LoopRequest[StreamResult]) -> None:
            if not done.result.ok:
                self.failures.append(f"level {level} request {done.index}: {done.result.attempt.error_kind or 'failed'}")

        try:
            loop = run_closed_loop(level, count, send, warmup=warmup, on_done=failed)
        finally:
            client_lag = lag.stop()  # the reader's timer stops firing even when the server is gone
        after = fetch_metrics_text(self.client.http)
        snapshot_before, snapshot_after = parse_metrics_text(before[0] if before else None), parse_metrics_text(after)
        delta = snapshot_after.delta(snapshot_before) if snapshot_before and snapshot_after else None
        requests = [_figures(r.result) for r in sorted(loop.requests, key=lambda r: r.index)]
        slo = self.settings.slo()
        views = compare_views(requests, delta, slo)
        figures = level_figures(level, requests, loop.wall_s, {key: slo[key] for key in views.client_slo_keys})
        warmup_ok = loop.warmup is not None and loop.warmup.ok
        if not warmup_ok:
            figures.errors += 1
            self.failures.append(f"level {level} warm-up request: "
                                 f"{loop.warmup.attempt.error_kind if loop.warmup is not None else 'not sent'}")
        unlagged = good_without_lag(requests, {key: slo[key] for key in views.client_slo_keys}, client_lag)
        figures.judgement, low, high = judge_level(figures.requests, figures.errors, figures.good, views,
                                                   self.settings.min_goodput_pct, lag=client_lag, unlagged_good=unlagged)
        met = figures.meets(self.settings.min_goodput_pct)
        figures.row.update(**views.row(), slo_judgement=str(figures.judgement),
                           goodput_pct_low=round(low, 3) if views.server_shares else None,
                           goodput_pct_high=round(high, 3) if views.server_shares else None, **client_lag.row(),
                           not_measured_because=lag_reason(client_lag, unlagged, figures.requests)
                           if figures.judgement is LevelJudgement.NOT_MEASURED else None)
        figures.row.update(phase=phase, errors=figures.errors, warmup_ok=warmup_ok, met_slo=met,
                           above_max_num_seqs=queued, max_in_flight=loop.max_in_flight,
                           sustained_starts=loop.sustained_starts, **server_cross_check(delta))
        self.progress(_level_line(figures, met) + (f" ({'; '.join(views.notes)})" if views.notes else ""))
        return figures


def _ms(value: Any) -> str:
    return f"{value * 1000:.1f} ms" if isinstance(value, int | float) else "n/a"


def _level_line(figures: LevelFigures, met: bool) -> str:
    row = figures.row
    rate = row.get("goodput_req_s")
    per_second = f" ({rate:.2f} req/s)" if isinstance(rate, int | float) else ""
    return (f"load level {figures.level}: {figures.requests} requests, {figures.errors} errors, "
            f"TTFT p95 {_ms(row.get('ttft_p95_s'))}, TPOT p95 {_ms(row.get('tpot_p95_s'))}, "
            f"goodput {figures.goodput_pct:.1f}%{per_second}"
            + (" - meets the SLOs" if met else " - SLOs not measured" if of_level(figures.judgement) is Measured.NOT_MEASURED
               else " - BELOW the SLOs"))


@dataclass
class LoadResult:
    """Every measured level (promoted first, then searched), which promoted levels met, the search."""

    levels: list[LevelFigures]
    met: dict[int, bool]
    search: SearchResult | None
    failures: list[str]


def run_load(client: QualClient, recipe: Recipe, settings: LoadSettings, *, progress: ProgressFn) -> LoadResult:
    """Measure the promoted levels, then (``find_max``) search the highest level at SLO."""
    runner = LevelRunner(client, settings, progress, max_num_seqs=recipe.serve.max_num_seqs)
    measured: list[LevelFigures] = []
    met: dict[int, bool] = {}
    for level in settings.levels:
        figures = runner.measure(level, phase="promoted")
        measured.append(figures)
        met[level] = figures.meets(settings.min_goodput_pct)
    search = None
    if settings.find_max and settings.max_ceiling is not None:
        def meets(level: int) -> bool:
            figures = runner.measure(level, phase="search")
            measured.append(figures)
            return figures.meets(settings.min_goodput_pct)

        search = search_max_level(meets, ceiling=settings.max_ceiling, max_steps=settings.max_steps, known=met)
    return LoadResult(measured, met, search, runner.failures)


def _server_judged(row: dict[str, Any]) -> list[str]:
    """The SLOs of a level row the server's histograms judged too (TPOT, beside the client's figures)."""
    return [key for key, (short, _) in SLO_FIGURES.items() if row.get(f"server_{short}_within_slo_pct_high") is not None]


def _search_measurements(search: SearchResult | None) -> dict[str, Any]:
    if search is None:
        return {"max_at_slo": None}
    return {"max_at_slo": search.best, "max_first_failing": search.first_failing, "max_ceiling": search.ceiling,
            "max_search_steps": search.steps, "max_search_tried": list(search.tried),
            "max_search_converged": search.converged}


def load_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, *, progress: ProgressFn) -> GateVerdict:
    """Load: every promoted level, sustained, meets min_goodput_pct of its SLOs with no errors."""
    settings = load_settings(recipe.gates)
    if settings is None:
        return GateVerdict(skip_reason=f"not applicable to recipe {recipe.name}: it sets no gates.load "
                                       "(the levels it is promoted for and their SLOs)")
    gate.threshold(**settings.slo(), min_goodput_pct=settings.min_goodput_pct, errors=0,
                   levels=list(settings.levels))
    result = run_load(client, recipe, settings, progress=progress)
    promoted = [f for f in result.levels if f.row.get("phase") == "promoted"]
    gate.measure(load_levels=[f.row for f in result.levels], promoted_levels=list(settings.levels),
                 levels_met=[level for level, ok in result.met.items() if ok],
                 min_level_goodput_pct=min((f.goodput_pct for f in promoted), default=None),
                 errors=sum(f.errors for f in result.levels), slos_set_by=str(settings.slos_set_by),
                 max_num_seqs=recipe.serve.max_num_seqs, **_search_measurements(result.search),
                 slos_also_judged_on_server=sorted({key for f in promoted for key in _server_judged(f.row)}))
    unmeasured = [f.level for f in promoted if of_level(f.judgement) is Measured.NOT_MEASURED]
    failing = [level for level, ok in result.met.items() if not ok and level not in unmeasured]
    found = "" if result.search is None else (
        f"; max at SLO {result.search.best}" if result.search.best else "; no level met the SLOs in the search")
    met = len(settings.levels) - len(failing) - len(unmeasured)
    gate.summary(f"{met}/{len(settings.levels)} promoted levels met the SLOs"
                 + (f", {len(unmeasured)} not measured" if unmeasured else "") + found)
    if not failing and unmeasured:
        return GateVerdict(skip_reason=not_measured("; ".join(
            f"level {f.level}: goodput {f.goodput_pct:.1f}% (minimum {settings.min_goodput_pct:g}%): "
            f"{f.row.get('not_measured_because')}"
            for f in promoted if f.level in unmeasured)))
    if not failing:
        return GateVerdict()
    parts = []
    for figures in promoted:
        if figures.level in failing:
            parts.append(f"level {figures.level}: goodput {figures.goodput_pct:.1f}% "
                         f"(minimum {settings.min_goodput_pct:g}%), {figures.errors} errors")
    detail = "; ".join(parts + result.failures[:5])
    return GateVerdict(f"load: {detail}")
