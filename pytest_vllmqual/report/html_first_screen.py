"""The first screen of a report's HTML page: can this be promoted, what stops it, the key figures.

An operator opens the page to decide; the long lists (what the run proves, every gate, the
per-rank tables) come after. This block answers in the first 800 pixels of a laptop window:
the promotion answer beside the verdict, the blocking reasons cut short (the full ones stay in
the decision block below), and one compact table of the figures a promotion turns on, beside
the capacity ladder's chart. Every value is read from the report (or the comparison) and
escaped; nothing here is stronger than the decision it shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.gates.registry import COLD_START_GATE, KV_POOL_GATE
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.records import GateOutcome, RunMode
from pytest_vllmqual.report.number_format import fmt_num

from .html_kit import bullets, esc, table
from .html_svg import ladder_svg
from .load_section import load_summary_line
from .query import decision_shown, gate_outcome, largest_rung

__all__ = ["FIRST_SCREEN_CSS", "blockers", "first_screen", "key_figures"]

FIRST_SCREEN_CSS = """
#first-screen{margin-top:.8rem;padding:.6rem 1.2rem .4rem}
#first-screen h2{margin-top:0;border:0;font-size:1.1rem}
.answer{font-size:1.15rem;margin:.2rem 0 .4rem}.answer b{font-size:1.3rem}
#first-screen ul{margin:.2rem 0 .4rem;padding-left:1.3rem}#first-screen li{margin:.05rem 0}
.glance{display:flex;gap:1.2rem;align-items:flex-start;flex-wrap:wrap}
.glance .scroll{flex:1 1 520px}.glance table{margin:.3rem 0;font-size:.88rem}
.glance svg{flex:0 1 560px;max-height:330px;width:auto;margin:.3rem 0}
"""

_YES = {"promotable", "priority-challenger"}
_SHORT = 140
_MOST = 6


def blockers(decision: Mapping[str, Any]) -> list[str]:
    """What stops promotion, each cut short: a reason that lists several gaps ("...incomplete: a; b")
    becomes one item per gap. Empty when the verdict allows promotion."""
    if str(decision.get("verdict")) in _YES:
        return []
    items: list[str] = []
    for reason in decision.get("reasons") or []:
        text = str(reason)
        head, sep, gaps = text.partition("incomplete: ")
        inside = head.count("(") > head.count(")")  # "...incomplete: ..." quoted inside another reason
        parts = gaps.split("; ") if sep and not inside else [text]
        items += [first_line(part, _SHORT) for part in parts if part.strip()]
    if len(items) > _MOST:
        items = [*items[:_MOST - 1], f"and {len(items) - _MOST + 1} more (the decision below lists every reason)"]
    return items


def _cold_start(report: Mapping[str, Any]) -> str:
    life = report.get("lifecycle") or {}
    if (report.get("run") or {}).get("mode") == RunMode.DIRECT_ONLY:
        return "not measured: the endpoint was used direct-only"
    if (life.get("startup_error") or {}).get("status"):
        return f"failed ({life['startup_error']['status']})"
    if life.get("cold_start_s") is None:
        return "not measured"
    outcome = gate_outcome(report, COLD_START_GATE)
    judged = "" if outcome is GateOutcome.ABSENT else f"; cold_start gate {outcome}"
    return f"{life['cold_start_s']:.1f} s to health and a real completion{judged}"


def _largest_prompt(report: Mapping[str, Any]) -> str:
    top = largest_rung(report)
    if top is None:
        return "no capacity rung completed"
    limit = ((report.get("identity") or {}).get("expected") or {}).get("max_model_len")
    of = f" of max_model_len {fmt_num(limit)}" if isinstance(limit, int) else ""
    return (f"{fmt_num(top.get('prompt_tokens'))} API-reported prompt tokens{of}; "
            f"TTFT {fmt_num(top.get('ttft_s'), 3)} s")


def _kv_pool(report: Mapping[str, Any]) -> str:
    engine = report.get("engine") or {}
    if engine.get("kv_cache_tokens") is None:
        return "not read from the server"
    text = f"{fmt_num(engine['kv_cache_tokens'])} tokens"
    if engine.get("min_rank_kv_gib") is not None:
        text += f", {fmt_num(engine['min_rank_kv_gib'], 2)} GiB on the smallest rank"
    if engine.get("max_concurrency") is not None:
        text += f", {fmt_num(engine['max_concurrency'], 2)}× the {fmt_num(engine.get('concurrency_at_tokens'))}-token envelope"
    outcome = gate_outcome(report, KV_POOL_GATE)
    return text + ("" if outcome is GateOutcome.ABSENT else f"; kv_pool gate {outcome}")


def _equivalence(report: Mapping[str, Any], comparison: Mapping[str, Any] | None) -> str | None:
    judged = (comparison or {}).get("equivalence")
    if isinstance(judged, Mapping):
        return f"{judged.get('verdict')}: the candidate against the control (the comparison below)"
    drift = report.get("drift")
    if isinstance(drift, Mapping):
        return f"{drift.get('verdict') or 'see below'}: this run against the reference run (drift, below)"
    if isinstance(report.get("equivalence_probe"), Mapping):
        return "probe recorded; judged only in a comparison against another arm"
    return None


def key_figures(report: Mapping[str, Any], comparison: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(figure, value) rows of the first screen's table: what a promotion turns on."""
    load = load_summary_line(report)
    rows = [("Cold start", _cold_start(report)), ("Largest exact prompt", _largest_prompt(report)),
            ("KV pool", _kv_pool(report)),
            ("Load at SLO", load.removeprefix("load: ") if load else "not measured: no load gate ran")]
    equivalence = _equivalence(report, comparison)
    return rows + ([("Equivalence", equivalence)] if equivalence else [])


def _answer(decision: Mapping[str, Any], subject: str, answer_id: str) -> str:
    verdict = str(decision.get("verdict") or "unknown")
    word = "Yes" if verdict in _YES else "No"
    return (f'<p class="answer verdict-{esc(verdict)}" id="{esc(answer_id)}">Can {esc(subject)} be promoted? '
            f'<b>{word}</b> <span class="badge">{esc(verdict)}</span></p>')


def first_screen(report: Mapping[str, Any], comparison: Mapping[str, Any] | None = None) -> str:
    """The block a page opens with; a comparison page answers for the comparison first."""
    decision = decision_shown(report).first
    out = ['<section id="first-screen" class="decision"><h2>Promotion at a glance</h2>']
    if comparison is not None:
        judged = comparison.get("decision") or {"verdict": comparison.get("verdict")}
        out.append(_answer(judged, "this comparison's candidate", "comparison-answer")
                   + bullets(blockers(judged), "comparison-blockers"))
    out.append(_answer(decision, "this run" if comparison is None else "the candidate run alone", "promotion-answer"))
    stops = blockers(decision)
    out.append(("<h3>What stops it</h3>" if stops else "") + bullets(stops or ["nothing: the decision allows "
               "promotion; the run itself changed no route"], "blockers"))
    out.append('<div class="glance">' + table("key-figures", ["Key figure", "Value"], key_figures(report, comparison))
               + (ladder_svg(report) if report.get("ladder") else "") + "</div></section>")
    return "".join(out)
