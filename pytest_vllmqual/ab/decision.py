"""The A/B decision: whether the candidate (B) arm earns ``priority-challenger`` against its control.

:func:`decide_comparison` reads an :class:`ABEvidence`: the comparison's rows, controlled
variables and retained findings (built by :mod:`.rows`, :mod:`.variables`, :mod:`.findings`)
and the arms, each read once as a :class:`~pytest_vllmqual.report.read_model.RunView` (their own
verdicts, and the facts every judge reads the same way: ready, largest prompt, sustained load,
concurrency proven, the configured context and KV pool); it writes the comparison's decision block: a verdict, what the
comparison proves, what it does not prove and the caveats, every sentence generated from what
was measured. :class:`Targets` is the capacity the next qualification must show (what "does
not prove" measures against). The single run's verdict is
:func:`pytest_vllmqual.report.decision.decide`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.not_measured import Measured, of_equivalence
from pytest_vllmqual.records import EquivalenceVerdict, RunMode, Verdict
from pytest_vllmqual.report.decision import BOUNDARY, verdict_summary
from pytest_vllmqual.report.number_format import short_tokens
from pytest_vllmqual.report.read_model import RunView, verdict_of

__all__ = ["ABEvidence", "Targets", "arm_verdict", "decide_comparison", "read_arms"]


@dataclass(frozen=True)
class Targets:
    """The capacity the next qualification must show: an actual prompt above ``prompt_tokens`` and
    a serve that starts with ``max_model_len`` and a reported KV pool of ``context_tokens``.

    Defaults are the reference campaign's next GPU-only arm (393,216 configured tokens, a prompt above 300,000);
    :meth:`from_reports` takes the arms' recipe thresholds when they set them.
    """

    prompt_tokens: int = 300_000
    context_tokens: int = 393_216
    source: str = "default: the reference campaign's next qualification arm"

    @classmethod
    def from_reports(cls, reports: Iterable[Mapping[str, Any] | RunView]) -> Targets:
        """The largest thresholds the arms' recipes set; defaults fill what none sets."""
        prompts: list[int] = []
        contexts: list[int] = []
        for view in (r if isinstance(r, RunView) else RunView.of(r) for r in reports):
            if view.prompt_floor is not None:
                prompts.append(view.prompt_floor)
            minimum = view.recipe_kv_minimum
            if minimum is not None:
                contexts.append(minimum)
        if not prompts and not contexts:
            return cls()
        default = cls()
        return cls(prompt_tokens=max(prompts) if prompts else default.prompt_tokens,
                   context_tokens=max(contexts) if contexts else default.context_tokens,
                   source="the arms' recipe thresholds" + ("" if prompts and contexts else " and the default"))


def read_arms(**reports: Mapping[str, Any] | None) -> dict[str, RunView]:
    """Each arm report read once (:class:`RunView`), by role; a role without a report is left out."""
    return {role: RunView.of(report) for role, report in reports.items() if report is not None}


def arm_verdict(report: Mapping[str, Any] | RunView) -> Verdict:
    """The arm report's own verdict (no-promotion when it has none, or one this version does not know)."""
    return report.verdict if isinstance(report, RunView) else verdict_of(report.get("decision"))


def _regressions(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        change = str(row["change"])
        if row["rule"] == "status" and (change.startswith("regressed") or "→ failed" in change
                                        or "→ error" in change):
            out.append(f"{row['measurement']}: {change}")
        elif row["key"] == "largest_prompt_tokens" and (row["delta"] or 0) < 0:
            out.append(f"{row['measurement']}: {row['values'][0]} → {row['values'][1]}")
    return out


def _size_word(pct: float | None) -> str:
    if pct is None:
        return "change"
    if 90 <= pct < 100:
        return "near-doubling"
    if 100 <= pct < 101:
        return "doubling"
    return f"{pct:+.3f}% change"


@dataclass(frozen=True)
class ABEvidence:
    """What the A/B decision reads: the arm reports and what the comparison built from them."""

    control: RunView
    #: The B arm: the arm whose changed variable is on trial.
    candidate: RunView
    replay: RunView | None
    rows: list[dict[str, Any]]
    variables: Mapping[str, Any]
    findings: list[dict[str, Any]]
    replay_section: Mapping[str, Any] | None
    targets: Targets
    #: The comparison's equivalence section (None: not assessed, as in a record older than schema 4).
    equivalence: Mapping[str, Any] | None = None

    @property
    def arms(self) -> list[RunView]:
        return [self.control, self.candidate, *([self.replay] if self.replay is not None else [])]

    def finding(self, finding_id: str) -> dict[str, Any] | None:
        return next((f for f in self.findings if f["id"] == finding_id), None)

    def row(self, key: str) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["key"] == key), None)

    @property
    def kv_flagged(self) -> dict[str, Any] | None:
        """The KV bytes-vs-tokens finding when it is flagged (its cause unresolved), else None."""
        kv = self.finding("kv_bytes_vs_tokens")
        return kv if kv and kv["status"] == "flagged" else None

    @property
    def started(self) -> list[RunView]:
        """The arms that proved the target startup (:meth:`RunView.started_at` the target context)."""
        return [r for r in self.arms if r.started_at(self.targets.context_tokens)]


def _blockers(ev: ABEvidence, own: Verdict, regressions: list[str]) -> list[str]:
    """Why a B arm that is not no-promotion still is no priority-challenger (empty when it is one)."""
    blockers = []
    if own is not Verdict.PROMOTABLE:
        first = ev.candidate.first_reason
        blockers.append(f"the candidate arm's own evidence is {own}" + (f" ({first})" if first else ""))
    if ev.control.verdict is Verdict.NO_PROMOTION:
        blockers.append("the control arm itself is no-promotion")
    if ev.variables["confounded"]:
        blockers.append("the comparison is confounded: " + ", ".join(ev.variables["functional"]))
    if not ev.variables["functional"]:
        blockers.append("no functional variable changed: a repeat, not an A/B")
    if ev.replay is None:
        blockers.append("no bracketed replay of the control ran")
    elif ev.replay_section is not None and not ev.replay_section["reproduced"]:
        blockers.append("the baseline is not reproducible")
    if regressions:
        blockers.append("the candidate regressed against the control: " + "; ".join(regressions))
    return blockers


def _verdict(ev: ABEvidence, regressions: list[str]) -> tuple[Verdict, list[str]]:
    """Whether the B arm earns priority-challenger; otherwise its own verdict (healthy when a
    promotable B arm regressed)."""
    own = ev.candidate.verdict
    if own is Verdict.NO_PROMOTION:
        first = ev.candidate.first_reason
        return own, ["the candidate arm's own decision is no-promotion" + (f": {first}" if first else "")]
    blockers = _blockers(ev, own, regressions)
    if blockers:
        verdict = Verdict.HEALTHY if own is Verdict.PROMOTABLE and regressions else own
        return verdict, ["not a priority-challenger: " + "; ".join(blockers)]
    return Verdict.PRIORITY_CHALLENGER, [
        "a managed, verified, promotable candidate arm changed one functional variable, kept every gate of the "
        "control, and a bracketed replay reproduced the baseline"]


def _proves(ev: ABEvidence, regressions: list[str]) -> list[str]:
    """What moved between the arms, what the B arm kept, and whether the control reproduced."""
    proves: list[str] = []
    functional = ev.variables["functional"]
    # A flagged KV mismatch keeps the token count (and the concurrency derived from it) out of
    # what the comparison proves: the engine reported it, but its cause is unresolved.
    kinds = ("memory", "fixed") if ev.kv_flagged else ("memory", "fixed", "derived", "capacity")
    memory_rows = [r for r in ev.rows if r["kind"] in kinds and r["change"] not in ("unchanged", "n/a")]
    moved = "; ".join(f"{r['measurement']} {r['values'][0]} → {r['values'][1]} ({r['change']})" for r in memory_rows)
    if len(functional) == 1 and memory_rows:
        proves.append(f"with only {functional[0]} changed functionally, the engine's own facts moved: {moved}")
    elif memory_rows:
        proves.append(f"the engine's own facts differ between the arms (not attributed to one variable): {moved}")
    kept = [r for r in ev.rows if r["rule"] == "status" and str(r["change"]).startswith("unchanged pass")]
    if kept and not regressions:
        proves.append("the candidate kept the control's bounded gates: "
                      + ", ".join(f"{r['measurement']} {r['values'][1]}" for r in kept))
    replay = ev.finding("replay")
    if replay and replay["status"] == "reproduced":
        proves.append("the control is reproducible under the current runtime: "
                      + str(replay["summary"]).split(":", 1)[0])
    return proves


def _does_not_prove(ev: ABEvidence) -> list[str]:
    """The capacity the targets ask for and no arm showed, and what the comparison cannot speak to."""
    targets, does_not = ev.targets, []
    sizes = [r.largest_prompt for r in ev.arms if r.largest_prompt is not None]
    largest = max(sizes) if sizes else None
    if largest is None or largest <= targets.prompt_tokens:
        does_not.append(f"a request above {short_tokens(targets.prompt_tokens)} prompt tokens"
                        + (f" (the largest measured in any arm was {largest:,})" if largest is not None
                           else " (no arm completed a capacity rung)"))
    if not ev.started:
        does_not.append(f"{short_tokens(targets.context_tokens)} startup (no arm was configured with "
                        f"max_model_len ≥ {targets.context_tokens:,} and a reported KV pool ≥ "
                        f"{targets.context_tokens:,} tokens)")
    sustained, concurrency = ev.candidate.sustained_load, ev.candidate.concurrency_proven
    if sustained is not None:
        does_not.append(f"sustained load above {sustained} requests in flight within the SLOs")
    else:
        does_not.append("concurrency beyond one active request" if concurrency is None or concurrency <= 1
                        else f"concurrency beyond {concurrency} active requests")
    quality_both = [r for r in ev.rows if r["key"].startswith("gate:quality")]
    does_not.append("broad task-quality equivalence" + (
        ": bounded repeated checks are not a benchmark" if quality_both else
        ": the arms did not both run the repeated quality checks"))
    kv = ev.kv_flagged
    if kv:
        does_not.append(f"a causal explanation for the {_size_word(kv['figures'].get('kv_tokens_change_pct'))} "
                        "of reported KV tokens")
    replay = ev.finding("replay")
    if ev.replay is None:
        does_not.append("that the control is reproducible: no bracketed replay ran")
    elif replay and replay["status"] == "not_reproducible":
        does_not.append("a reproducible baseline: the replay did not reproduce the control")
    if ev.candidate.record.mode is RunMode.DIRECT_ONLY:
        does_not.append("a cold start or a clean teardown of the candidate: it was used direct-only")
    return does_not


def _capacity_caveats(ev: ABEvidence) -> list[str]:
    """A reported KV pool that looks like the target capacity but is not yet a result, and why."""
    caveats: list[str] = []
    kv_row, kv, targets = ev.row("kv_cache_tokens"), ev.kv_flagged, ev.targets
    ctx_lens = [v for v in (ev.control.max_model_len, ev.candidate.max_model_len) if v is not None]
    if (kv_row and not ev.started and isinstance(kv_row["candidate"], int)
            and kv_row["candidate"] >= targets.context_tokens):
        text = (f"the reported KV pool of {kv_row['candidate']:,} tokens is not yet a "
                f"{short_tokens(targets.context_tokens)} capacity result")
        clauses = []
        if kv:
            pct = kv["figures"].get("kv_gib_change_pct")
            clauses.append(f"the KV byte allocation {'rose only' if (pct or 0) > 0 else 'moved'} "
                           f"{abs(pct or 0):.3f}%")
        if ctx_lens and max(ctx_lens) < targets.context_tokens:
            clauses.append(f"this A/B retained a {max(ctx_lens):,}-token configured context")
        caveats.append(text + (": " + ", and ".join(clauses) if clauses else ""))
    if kv:
        caveats.append(f"the mismatch between {kv['figures'].get('kv_gib_change')} KV bytes and "
                       f"{kv['figures'].get('kv_tokens_change')} reported tokens is retained explicitly rather than "
                       "normalized away")
    return caveats


def _caveats(ev: ABEvidence) -> list[str]:
    """What limits the comparison: capacity, timing noise, confounding, harness settings, the replay."""
    caveats = _capacity_caveats(ev)
    timing = ev.finding("timing_noise")
    if timing and timing["status"] in ("bounded", "above_noise_floor"):
        caveats.append("one request per target supports a capacity comparison, not a performance ranking; "
                       "small timing deltas are bounded observations")
    functional = ev.variables["functional"]
    if ev.variables["confounded"]:
        caveats.append(f"confounded: {len(functional)} functional variables changed ({', '.join(functional)})")
    if ev.variables["harness"]:
        caveats.append("the arms were measured with different harness settings: " + ", ".join(ev.variables["harness"]))
    prompt_row = ev.row("largest_prompt_tokens")
    if prompt_row and prompt_row["delta"]:
        caveats.append(f"the largest requests differ in size ({prompt_row['values'][0]} vs "
                       f"{prompt_row['values'][1]} tokens): the timing rows compare different prompts")
    replay = ev.finding("replay")
    if replay and replay["status"] == "not_reproducible":
        caveats.append(str(replay["summary"]))
    elif ev.replay_section is not None and not ev.replay_section.get("bracketed"):
        caveats.append("the replay did not run after the candidate (not bracketed A, B, A)")
    return caveats


_PASSED = {"tokens": "the candidate answers the equivalence probe as the control does",
           "exact": "every figure of the candidate lies within the A/A floor (the control against its replay)",
           "tasks": "the candidate's task answers are non-inferior to the control's (items, tool calls where run, "
                    "no depth bucket worse than the shallowest)"}
_FAILED = {"tokens": "the candidate is not equivalent to the control",
           "exact": "the candidate moved outside the A/A floor (compare.promotion exact)",
           "tasks": "the candidate's task answers are worse than the control's (compare.promotion tasks)"}


def _promotion(section: Mapping[str, Any]) -> tuple[str, Measured, str]:
    """The blocking rule, its status and why; a record written before ``compare.promotion`` existed
    was judged by the token verdict, today's default rule."""
    promotion = section.get("promotion")
    if isinstance(promotion, Mapping) and promotion.get("status") in {m.value for m in Measured}:
        why = "; ".join(str(r) for r in promotion.get("reasons") or []) or "no reason recorded"
        return str(promotion.get("rule")), Measured(promotion["status"]), why
    why = "; ".join(str(r) for r in section.get("reasons") or []) or "no figure"
    return "tokens", of_equivalence(section.get("verdict")), why


def _with_equivalence(section: Mapping[str, Any] | None, verdict: Verdict, reasons: list[str],
                      proves: list[str], does_not: list[str]) -> Verdict:
    """The rule ``compare.promotion`` names decides: failed makes the comparison no-promotion, not
    measured caps it below promotable; the token verdict is reported whichever rule blocks."""
    if section is None:
        return verdict
    word = EquivalenceVerdict(str(section.get("verdict")))
    tokens_why = "; ".join(str(r) for r in section.get("reasons") or []) or "no figure"
    rule, status, why = _promotion(section)
    if word is not EquivalenceVerdict.EQUIVALENT:
        does_not.append(f"that the candidate answers as the control does (equivalence {word}: {tokens_why})")
    if status is Measured.PASSED:
        proves.append(f"{_PASSED.get(rule, f'compare.promotion {rule} passed')}: {why}")
        return verdict
    if status is Measured.FAILED:
        reasons.append(f"{_FAILED.get(rule, f'compare.promotion {rule} failed')}: {why}")
        return Verdict.NO_PROMOTION
    if rule != "tokens":
        does_not.append(f"that the candidate passes compare.promotion {rule} (not measured: {why})")
    if verdict in (Verdict.PROMOTABLE, Verdict.PRIORITY_CHALLENGER):
        label = f"equivalence {word}" if rule == "tokens" else f"compare.promotion {rule} not measured"
        reasons.append(f"capped below promotable: {label} ({why})")
        return Verdict.HEALTHY
    return verdict


def decide_comparison(evidence: ABEvidence) -> dict[str, Any]:
    """The comparison's decision block: verdict, proves / does not prove, caveats (all generated)."""
    regressions = _regressions(evidence.rows)
    verdict, reasons = _verdict(evidence, regressions)
    proves, does_not = _proves(evidence, regressions), _does_not_prove(evidence)
    verdict = _with_equivalence(evidence.equivalence, verdict, reasons, proves, does_not)
    return {"verdict": verdict.value, "summary": verdict_summary(verdict), "scope": "A/B comparison",
            "reasons": reasons, "proves": proves, "does_not_prove": does_not,
            "caveats": _caveats(evidence), "boundary": BOUNDARY}
