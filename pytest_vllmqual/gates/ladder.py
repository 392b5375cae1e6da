"""The context ladder: one real streamed request per rung at an exact prompt length.

Each rung's size is the API-reported ``usage.prompt_tokens``; the target is only a label.
Every rung starts with a fresh nonce (no prefix-cache result), is followed by a post-probe
smoke, and a failure (HTTP 400, timeout) is retained with its error text while the ladder
goes on. The deliberate ``max_model_len + 1`` rung must be rejected with HTTP 400 and is
recorded as an expected rejection. Where ``/metrics`` exists, each rung is cross-checked
against the server's own TTFT histogram and prompt-token counter. Each rung's verdict and
the ladder gate's findings are computed here (``LadderResult``), not in the suite.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_vllmqual.client.probes import check_health
from pytest_vllmqual.client.prompts import ChatShape, ExactPrompt, ExactPromptBuilder, new_nonce
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import StreamResult
from pytest_vllmqual.client.token_counters import ServerTokenCounter
from pytest_vllmqual.errors import CalibrationError, ServerGoneError
from pytest_vllmqual.launch.base import ProgressFn
from pytest_vllmqual.not_measured import not_measured
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import FigureSource, RungRecord, RungSource
from pytest_vllmqual.vllm.endpoints import MetricsDelta, MetricsSnapshot, parse_metrics
from pytest_vllmqual.vllm.server_messages import public_failure, public_rung_error

from .recorder import GateRecorder
from .smoke import run_smoke
from .verdict import GateVerdict

__all__ = [
    "DERIVED_RUNGS",
    "OVER_LENGTH_PREFIX",
    "SERVER_DECODE_HISTOGRAM",
    "ConcurrencyResult",
    "LadderPlan",
    "LadderResult",
    "concurrency_gate",
    "fetch_metrics",
    "fetch_metrics_text",
    "ladder_gate",
    "ladder_plan",
    "parse_metrics_text",
    "run_concurrency",
    "run_ladder",
    "rung_targets",
]

OVER_LENGTH_PREFIX = "This model's maximum context length is"


DERIVED_RUNGS: tuple[str, ...] = ("0.125", "0.25", "0.5", "0.99")
"""The rungs of a managed run whose recipe sets none: fractions of ``max_model_len``, as tiny-cpu's."""


@dataclass(frozen=True)
class LadderPlan:
    """The rungs a ladder climbs and where they came from, or why it sends nothing."""

    rungs: tuple[int | str, ...]
    source: RungSource
    #: Set when no rung may be sent: the gate is then skipped as not measured, with this reason.
    not_measured: str | None = None


def ladder_plan(recipe: Recipe, *, direct_only: bool) -> LadderPlan:
    """The recipe's rungs; where it sets none, rungs derived from ``max_model_len`` for a server this
    run started, and none at all for someone's running endpoint: a large prompt is sent there
    only when the operator's recipe asks for it."""
    configured = tuple(recipe.gate("capacity").get("rungs") or ())
    if configured:
        return LadderPlan(configured, RungSource.RECIPE)
    if direct_only:
        return LadderPlan((), RungSource.RECIPE, not_measured=not_measured(
            f"recipe {recipe.name} sets no gates.capacity.rungs, and against a server this run did "
            "not start the ladder sends only the prompts a recipe asks for (none were sent)"))
    return LadderPlan(DERIVED_RUNGS, RungSource.MAX_MODEL_LEN)


def rung_targets(recipe: Recipe, rungs: tuple[int | str, ...] | None = None) -> list[tuple[int, str]]:
    """(target tokens, label) per rung (the recipe's unless given): absolute targets, or fractions of
    max_model_len."""
    mml = recipe.serve.max_model_len
    targets: list[tuple[int, str]] = []
    for rung in recipe.gate("capacity").get("rungs", []) if rungs is None else rungs:
        if isinstance(rung, str):
            target = int(float(rung) * mml)
            targets.append((target, f"{rung} x max_model_len"))
        else:
            targets.append((int(rung), f"{int(rung):,}"))
    return targets


def fetch_metrics_text(http: httpx.Client) -> str | None:
    """The raw /metrics body, or None where the endpoint is absent.

    Gates fetch the body between requests and parse it afterwards: right after a request
    vLLM's TP workers busy-poll for a second (``busy_loop_s`` in its shm_broadcast), and on
    a machine with few cores any parsing done then waits for the CPU (figures in
    docs/PERFORMANCE.md).
    """
    try:
        response = http.get("/metrics", timeout=10.0)
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


def parse_metrics_text(text: str | None) -> MetricsSnapshot | None:
    """A snapshot of a body from ``fetch_metrics_text``; None where absent or malformed."""
    if text is None:
        return None
    try:
        return parse_metrics(text)
    except Exception:  # a malformed exposition is not a gate failure; the cross-check says n/a
        return None


def fetch_metrics(http: httpx.Client) -> MetricsSnapshot | None:
    """A /metrics snapshot, or None where the endpoint is absent."""
    return parse_metrics_text(fetch_metrics_text(http))


@dataclass
class LadderResult:
    """All rungs, in order, each with its verdict (``RungRecord.verdict``), and what the ladder
    gate fails on (``problems``): read by the gate, built into the report from the same records."""

    rungs: list[RungRecord] = field(default_factory=list)
    #: Set when the server died or hung during a rung: that rung is the last one, marked
    #: ``killed_server``, and the climb stopped there.
    server_gone: ServerGoneError | None = None
    #: Tokens of the chat template before any user text (the conversation with an empty user turn),
    #: which every prompt shares whatever its nonce: a model's default system message, say. Prefix-cache
    #: hits up to this many tokens are the template's, not a reused prompt.
    template_prefix_tokens: int | None = None

    @property
    def largest_ok(self) -> RungRecord | None:
        ok = [r for r in self.rungs if r.verdict.completed and r.prompt_tokens]
        return max(ok, key=lambda r: r.prompt_tokens or 0) if ok else None

    def problems(self, min_largest_prompt: int | None) -> list[str]:
        """Every rule the ladder broke, rung by rung: the ladder gate asserts this is empty."""
        problems: list[str] = []
        if self.server_gone is not None:
            killer = next((r for r in self.rungs if r.verdict.killed_server), None)
            where = (f"rung {killer.index} ({killer.target_label}, target {killer.target:,})"
                     if killer is not None else "a rung")
            problems.append(f"the server did not survive {where}: {self.server_gone.status}; "
                            "the rungs after it were not sent")
        for rung in self.rungs:
            verdict = rung.verdict
            name = f"rung {rung.index} ({rung.target_label}, target {rung.target:,})"
            if verdict.rejection_rung:
                if not verdict.rejected_as_expected:
                    problems.append(f"{name}: expected HTTP 400 'This model's maximum context length', "
                                    f"got {public_rung_error(rung.error, rung.status_code) or f'HTTP {rung.status_code}'}")
            elif verdict.failed:
                problems.append(f"{name}: {public_rung_error(rung.error, rung.status_code) or 'failed'}")
            if verdict.killed_server:
                continue
            if verdict.smoke is not True:
                problems.append(f"{name}: post-probe smoke {rung.post_probe_smoke}")
            if rung.prefix_cache_hits and rung.prefix_cache_hits > (self.template_prefix_tokens or 0):
                shared = (f", more than the {self.template_prefix_tokens:,} tokens of the chat template before "
                          "the user's text" if self.template_prefix_tokens else "")
                problems.append(f"{name}: {rung.prefix_cache_hits} prefix-cache hit tokens despite the nonce{shared}")
        if not any(not rung.expected_rejection for rung in self.rungs) and self.server_gone is None:
            problems.append("no ladder rung was sent: a ladder passes only on a rung it measured")
        if min_largest_prompt:
            largest = self.largest_ok
            seen = largest.prompt_tokens if largest and largest.prompt_tokens else 0
            if seen <= min_largest_prompt:
                problems.append(f"largest actual prompt {seen:,} does not exceed the recipe minimum "
                                f"{min_largest_prompt:,}")
        return problems


def _health(client: QualClient) -> str:
    answer = check_health(client.http, 5.0)
    if answer.error is not None:
        return f"unreachable ({answer.error})"
    return "healthy" if answer.ok else f"/health {answer.status_code}"


def _apply_stream(rung: RungRecord, result: StreamResult) -> None:
    metrics = result.metrics()
    rung.status_code = result.status_code
    rung.finish_reason = result.finish_reason
    rung.prompt_tokens = metrics["prompt_tokens"]  # type: ignore[assignment]
    rung.completion_tokens = metrics["completion_tokens"]  # type: ignore[assignment]
    rung.ttft_s = metrics["ttft_s"]
    rung.ttft_content_s = metrics["ttft_content_s"]
    rung.e2e_s = metrics["e2e_s"]
    rung.prefill_tok_s = metrics["prefill_tok_s"]
    rung.decode_tok_s = metrics["decode_tok_s"]
    rung.decode_source = FigureSource.CLIENT if rung.decode_tok_s is not None else None
    if rung.prompt_tokens is not None:
        rung.calibration_error = rung.prompt_tokens - rung.target


def _template_prefix_tokens(counter: ServerTokenCounter, shape: ChatShape) -> int | None:
    """The tokens every rung's prompt shares before its nonce, at most: the conversation with an
    empty user turn (the template's head and the few tokens that close the turn); None when the
    server cannot count it."""
    try:
        return counter.count_chat([{"role": "user", "content": ""}], shape)
    except Exception:  # counting is best effort: without it any prefix-cache hit is reported
        return None


SERVER_DECODE_HISTOGRAM = "vllm:request_decode_time_seconds"
"""The server's per-request decode time (first to last output token), observed when a request ends."""


def _cross_check(rung: RungRecord, before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> None:
    if before is None or after is None:
        return
    delta = after.delta(before)
    rung.server_ttft_s = delta.histogram_mean("vllm:time_to_first_token_seconds")
    rung.server_decode_tok_s = _server_decode_rate(rung, delta)
    _settle_decode(rung)
    prompt = delta.counter("vllm:prompt_tokens_total")
    rung.server_prompt_tokens = int(prompt) if prompt is not None else None
    hits = delta.counter("vllm:prefix_cache_hits_total")
    rung.prefix_cache_hits = int(hits) if hits is not None else None


def _server_decode_rate(rung: RungRecord, delta: MetricsDelta) -> float | None:
    """The rung's decode rate by the server's clock: one decode-time observation in the window (the
    rung was the only request in flight), over the rung's own ``completion_tokens - 1`` steps."""
    decode = delta.histograms.get(SERVER_DECODE_HISTOGRAM)
    tokens = rung.completion_tokens
    if decode is None or decode.count != 1 or decode.sum <= 0 or not tokens or tokens < 2:
        return None
    return (tokens - 1) / decode.sum


def _settle_decode(rung: RungRecord) -> None:
    """A decode rate the client could not time is not the client's figure. The client times decode
    from the first token it reads to the last (``tpot_s``); when it read the first token later than
    the server sent it by more than that whole window (a starved client on a busy machine, or output
    tokens arriving in one burst, reads the finished answer in one go), the tokens were generated
    while it was not reading, and the rate would be that of its read loop (48,755 tok/s was seen on 2
    busy cores). The server's own decode time for the request is then the figure, named as such;
    without it, decode is not measured."""
    if (rung.decode_tok_s is None or rung.ttft_s is None or rung.server_ttft_s is None
            or not rung.completion_tokens):
        return
    # The client's decode window, first to last token: its rate is (completion_tokens - 1) / window.
    lag, window = rung.ttft_s - rung.server_ttft_s, (rung.completion_tokens - 1) / rung.decode_tok_s
    if lag <= window:
        return
    late = (f"the client read the first token {lag:.3f} s after the server sent it, longer than the "
            f"{window:.3f} s it would have timed decode over")
    rung.client_decode_not_measured = late
    rung.decode_tok_s = rung.server_decode_tok_s
    if rung.server_decode_tok_s is not None:
        rung.decode_source = FigureSource.SERVER_METRICS
    else:
        rung.decode_source, rung.decode_not_measured = FigureSource.NOT_MEASURED, late


def run_ladder(
    client: QualClient,
    recipe: Recipe,
    *,
    progress: ProgressFn,
    shape: ChatShape | None = None,
    seed: int = 0,
    rungs: tuple[int | str, ...] | None = None,
) -> LadderResult:
    """Climb the recipe's ladder (or ``rungs``), then the max_model_len + 1 rung, on a live server."""
    settings = recipe.gate("capacity")
    mml = recipe.serve.max_model_len
    max_tokens = int(settings.get("max_tokens", 16))
    shape = shape or ChatShape()
    counter = ServerTokenCounter(client.http, client.model)
    builder = ExactPromptBuilder(counter, seed=seed)
    plan = [(t, label, False) for t, label in rung_targets(recipe, rungs)]
    if settings.get("max_len_plus_one", True):
        plan.append((mml + 1, "max_model_len + 1", True))
    # Every prompt is built before the first probe: calibration asks /tokenize many times, and
    # between probes the server's post-step busy-poll would slow it for nothing.
    progress(f"ladder: building {len(plan)} exact-length prompts before the first probe")
    prompts: list[ExactPrompt | CalibrationError] = []
    for index, (target, _label, expect_reject) in enumerate(plan):
        try:
            prompts.append(builder.build(target, shape, nonce=new_nonce(index),
                                         allow_over_max_model_len=expect_reject))
        except CalibrationError as exc:
            prompts.append(exc)
        progress(f"ladder: prompt {index + 1}/{len(plan)} ({target:,} tokens) "
                 f"{'refused by calibration' if isinstance(prompts[-1], CalibrationError) else 'ready'}")
    result = LadderResult(template_prefix_tokens=_template_prefix_tokens(counter, shape))
    snapshots: list[tuple[RungRecord, str | None, str | None]] = []
    try:
        for index, (target, label, expect_reject) in enumerate(plan):
            if result.server_gone is not None:
                break
            rung = RungRecord(index=index, target=target, target_label=label, expected_rejection=expect_reject)
            result.rungs.append(rung)
            prompt = prompts[index]
            if isinstance(prompt, CalibrationError):
                rung.error = f"calibration: {prompt}"
                progress(f"ladder rung {index + 1}: {rung.error}")
                continue
            try:
                before, after = _probe_rung(client, recipe, rung, prompt, max_tokens=max_tokens,
                                            rungs=len(plan), progress=progress)
            except ServerGoneError as exc:
                result.server_gone = exc
                continue
            if not expect_reject:
                snapshots.append((rung, before, after))
    finally:
        for rung, before, after in snapshots:
            _cross_check(rung, parse_metrics_text(before), parse_metrics_text(after))
    return result


def _probe_rung(client: QualClient, recipe: Recipe, rung: RungRecord, prompt: ExactPrompt, *, max_tokens: int,
                rungs: int, progress: ProgressFn) -> tuple[str | None, str | None]:
    """Send one rung, then its health check and post-probe smoke; the /metrics bodies around it."""
    index, target, expect_reject = rung.index, rung.target, rung.expected_rejection
    mml = recipe.serve.max_model_len
    rung_max_tokens = max(1, min(max_tokens, mml - target)) if not expect_reject else max_tokens
    before = fetch_metrics_text(client.http)
    progress(f"ladder rung {index + 1}/{rungs}: target {target:,} tokens ({rung.target_label}) — "
             f"sending {prompt.measured_tokens:,} tokens")
    started = time.perf_counter()
    try:
        # ignore_eos: every rung decodes the same number of tokens, so decode tok/s compares.
        stream = client.stream_chat({**prompt.request_fields(), "max_tokens": rung_max_tokens,
                                     "temperature": 0, "ignore_eos": True}, label=f"rung-{index}-{target}")
    except ServerGoneError as exc:
        # The request in flight is evidence: it stays in the ladder as a failed rung that the
        # server did not survive, with what the client saw before the death.
        last = client.last_attempt
        if last is not None and last.label.startswith(f"rung-{index}-{target}"):
            rung.status_code = last.status_code
            rung.e2e_s = last.latency_s
        engine_event = last is not None and last.error is not None and "error event inside the 200 stream" in last.error
        rung.error = (f"{exc.status}: the server did not survive this rung"
                      + (" (its stream carried the engine's error event)" if engine_event else ""))
        rung.health_after = exc.status
        rung.killed_server = True
        rung.post_probe_smoke = "not run: the server did not survive this rung"
        progress(f"ladder rung {index + 1}/{rungs}: the server did not survive this rung ({exc.status})")
        raise
    after = fetch_metrics_text(client.http)
    _apply_stream(rung, stream)
    if expect_reject:
        error = stream.attempt.error or ""
        rung.ok = stream.status_code == 400 and error.startswith(OVER_LENGTH_PREFIX)
        stream.attempt.expected_rejection = rung.ok
        stream.attempt.ok = rung.ok
        rung.error = error[:300]
        if rung.prompt_tokens is None:
            rung.prompt_tokens = prompt.measured_tokens
            rung.calibration_error = prompt.measured_tokens - target
    else:
        rung.ok = stream.ok and stream.status_code == 200 and rung.calibration_error == 0
        if not stream.ok:
            rung.error = (stream.attempt.error or "")[:300]
        elif rung.calibration_error != 0:
            rung.error = f"calibration error {rung.calibration_error} tokens"
    rung.health_after = _health(client)
    rung.post_probe_smoke = run_smoke(client, recipe, label=f"post-probe-{index}").outcome
    elapsed = time.perf_counter() - started
    progress(
        f"ladder rung {index + 1}/{rungs}: HTTP {rung.status_code}, "
        f"{rung.prompt_tokens or 0:,} prompt tokens, TTFT {rung.ttft_s or 0:.3f} s, "
        f"{'expected rejection' if expect_reject and rung.ok else ('ok' if rung.ok else 'FAILED')}; "
        f"post-probe smoke {rung.post_probe_smoke} ({elapsed:.1f} s)")
    return before, after


@dataclass
class ConcurrencyResult:
    """N simultaneous streamed requests at one prompt length."""

    requests: list[dict[str, Any]]
    wall_s: float
    aggregate_output_tok_s: float | None
    preemptions: int | None
    failures: list[str]


def run_concurrency(client: QualClient, recipe: Recipe, *, progress: ProgressFn,
                    shape: ChatShape | None = None) -> ConcurrencyResult:
    """Send N requests at once (unique nonces) and record each one and the aggregate."""
    settings = recipe.gate("capacity").get("concurrency") or {}
    n = int(settings.get("requests", 2))
    tokens = int(settings.get("prompt_tokens", 1024))
    max_tokens = int(settings.get("max_tokens", 32))
    builder = ExactPromptBuilder(ServerTokenCounter(client.http, client.model))
    prompts = [builder.build(tokens, shape or ChatShape(), nonce=new_nonce(f"c{i}")) for i in range(n)]
    before = fetch_metrics_text(client.http)
    progress(f"concurrency: {n} requests of {tokens:,} prompt tokens at once")
    started = time.perf_counter()

    def one(i: int) -> StreamResult:
        return client.stream_chat({**prompts[i].request_fields(), "max_tokens": max_tokens, "temperature": 0,
                                   "ignore_eos": True}, label=f"concurrent-{i}")

    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(one, range(n)))
    wall = time.perf_counter() - started
    after = fetch_metrics_text(client.http)
    rows, failures = [], []
    total_out = 0
    for i, res in enumerate(results):
        m = res.metrics()
        rows.append({"request": i, "status_code": res.status_code, **m})
        if not res.ok:
            failures.append(f"request {i}: {public_failure(res.attempt)}")
        total_out += int(m["completion_tokens"] or 0)
    preemptions = None
    before_snapshot, after_snapshot = parse_metrics_text(before), parse_metrics_text(after)
    if before_snapshot is not None and after_snapshot is not None:
        value = after_snapshot.delta(before_snapshot).counter("vllm:num_preemptions_total")
        preemptions = int(value) if value is not None else None
    return ConcurrencyResult(requests=rows, wall_s=wall,
                             aggregate_output_tok_s=total_out / wall if wall > 0 else None,
                             preemptions=preemptions, failures=failures)



def ladder_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, *, progress: ProgressFn) -> GateVerdict:
    """Ladder: every rung exact (calibration error 0), answered, followed by a passing smoke."""
    settings = recipe.gate("capacity")
    plan = ladder_plan(recipe, direct_only=client.handle.direct_only)
    gate.measure(rungs_from=str(plan.source))
    if plan.not_measured is not None:
        gate.summary("not measured")
        return GateVerdict(skip_reason=plan.not_measured)
    if plan.source is RungSource.MAX_MODEL_LEN:
        progress(f"ladder: recipe {recipe.name} sets no gates.capacity.rungs; climbing {', '.join(map(str, plan.rungs))} "
                 f"x max_model_len {recipe.serve.max_model_len:,}")
    result = run_ladder(client, recipe, progress=progress, rungs=plan.rungs)
    gate.measure(ladder=[r.to_dict() for r in result.rungs], template_prefix_tokens=result.template_prefix_tokens)
    largest = result.largest_ok
    minimum = settings.get("min_largest_prompt")
    gate.threshold(calibration_error=0, min_largest_prompt=minimum, post_probe_smoke="passed",
                   max_len_plus_one="HTTP 400")
    if largest is not None:
        gate.measure(largest_prompt_tokens=largest.prompt_tokens, largest_ttft_s=largest.ttft_s,
                     largest_e2e_s=largest.e2e_s, largest_prefill_tok_s=largest.prefill_tok_s,
                     largest_decode_tok_s=largest.decode_tok_s, largest_server_ttft_s=largest.server_ttft_s)
        ttft = "n/a (no output delta)" if largest.ttft_s is None else f"{largest.ttft_s:.3f} s"
        gate.summary(f"largest actual prompt {largest.prompt_tokens:,}; TTFT {ttft}")
    problems = result.problems(minimum)
    return GateVerdict("ladder: " + "; ".join(problems)) if problems else GateVerdict()


def concurrency_gate(client: QualClient, recipe: Recipe, gate: GateRecorder, *,
                     progress: ProgressFn) -> GateVerdict:
    """Concurrency: N requests sent at once complete; per-request and aggregate figures, preemptions."""
    settings = recipe.gate("capacity").get("concurrency") or {}
    result = run_concurrency(client, recipe, progress=progress)
    gate.measure(requests=len(result.requests), prompt_tokens=settings.get("prompt_tokens"),
                 wall_s=round(result.wall_s, 4), aggregate_output_tok_s=result.aggregate_output_tok_s,
                 preemptions=result.preemptions, per_request=result.requests)
    gate.summary(f"{len(result.requests) - len(result.failures)}/{len(result.requests)} concurrent requests")
    return GateVerdict("concurrency: " + "; ".join(result.failures)) if result.failures else GateVerdict()
