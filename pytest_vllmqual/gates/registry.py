"""The gate registry: every built-in gate declared once.

A gate is known by its *name* (the ``gate`` marker on its test, e.g.
``@pytest.mark.gate("tool_continuation")``), never by its test function's name, so renaming a
test changes nothing in a report. Each entry says which family the gate belongs to, its title,
and what a pass proves, in words that depend on how the check ran (a long-context check in
``smoke_after_filler`` mode proves an answer after filler, not recall). The decision, the A/B
comparison, the campaign, the HTML page and the junit properties all read this table.

The table lists the gates in the order they run (``EXECUTION_ORDER``; ``session.gate_order``
derives the run order from it): smoke, identity, the rest of the functional family, reasoning,
quality, engine, lifecycle, capacity, load; the item bank and the equivalence probe, which are not
in this table, run after every other but before the gates that can take the server down, and
with them (``gate_order.AFTER_THE_CHEAP_GATES``, ``gate_order.SERVER_AT_RISK``). A family is named by the marker a user puts on a gate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.recipe.load_gate_settings import SLOS
from pytest_vllmqual.records import GateOutcome, RungSource

FAMILIES = ("functional", "reasoning", "quality", "capacity", "engine", "lifecycle", "load")
"""Every gate family, in the order a report lists them; each is also the marker of its gates."""

ProvesFn = Callable[[Mapping[str, Any]], str]
"""What a passed gate proves, from its public record (measurements, summary)."""


def _measured(gate: Mapping[str, Any], key: str) -> Any:
    return (gate.get("measurements") or {}).get(key)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"


def _k_of_n(gate: Mapping[str, Any]) -> str:
    passed, repeat = _measured(gate, "passed"), _measured(gate, "repeat")
    if isinstance(passed, int) and isinstance(repeat, int):
        return f"{passed}/{repeat}"
    return str(gate.get("summary") or "k/N")


@dataclass(frozen=True)
class GateSpec:
    """One gate: its stable name, family, title and what a pass proves."""

    name: str
    family: str
    title: str
    proves_fn: ProvesFn
    preflight_label: str | None = None
    """Its label in the reference campaign's "6/6" functional preflight (None: not a preflight gate)."""

    def proves(self, gate: Mapping[str, Any]) -> str:
        """What this passed gate proves, in the words of the mode it ran in."""
        return self.proves_fn(gate)


def _values_said(gate: Mapping[str, Any]) -> str:
    """What a tool gate's record says of the argument values: compared, not compared, or (a record
    from before the gate wrote it) nothing."""
    checked = _measured(gate, "value_checks")
    if checked is True:
        return " and equal to the expected values"
    if checked is False:
        return " (argument values were not compared with the expected ones)"
    return ""


def _tools(gate: Mapping[str, Any]) -> str:
    passed = _measured(gate, "passed") if _measured(gate, "passed") is not None else _measured(gate, "valid_calls")
    total = _measured(gate, "total") if _measured(gate, "total") is not None else _measured(gate, "count")
    repeat = _measured(gate, "repeat")
    times = f", each asked {repeat} times" if isinstance(repeat, int) and repeat > 1 else ""
    counted = f"{passed}/{total} " if isinstance(passed, int) and isinstance(total, int) else ""
    return (f"{counted}typed tool calls came back through the server's tool parser, each naming the expected tool, "
            f"its arguments valid against the tool's JSON schema{_values_said(gate)}{times}")


def _streaming_tool(gate: Mapping[str, Any]) -> str:
    ended = ("; the stream ended with [DONE] and a usage chunk"
             if _measured(gate, "saw_done") is True and _measured(gate, "usage_chunk") is True else "")
    return ("a streamed tool call reassembled into one call naming the expected tool, its arguments valid against "
            f"the tool's JSON schema{_values_said(gate)}{ended}")


def _quality_tools(gate: Mapping[str, Any]) -> str:
    """The repeated call is checked for its name and its arguments' schema; values only where the
    record says they were compared (the gate does not compare them)."""
    passed, repeat = _measured(gate, "passed"), _measured(gate, "repeat")
    counted = f"{passed}/{repeat} times" if isinstance(passed, int) and isinstance(repeat, int) else _k_of_n(gate)
    tool = _measured(gate, "tool")
    naming = f"naming {tool}" if isinstance(tool, str) and tool else "naming the expected tool"
    values = (_values_said(gate) if _measured(gate, "value_checks") is not None
              else " (argument values were not compared with the expected ones)")
    return (f"the same typed tool call came back {counted} {naming}, its arguments valid against the tool's JSON "
            f"schema{values}")


def _smoke(gate: Mapping[str, Any]) -> str:
    """What the smoke's answer showed, in the words of the finish reasons the recipe allowed in this
    run (``gates.smoke.finish_reasons``, recorded as a threshold; a record without it ran under the
    default, stop only)."""
    thresholds = gate.get("thresholds") or {}
    finish = _measured(gate, "finish_reason")
    allowed = [str(r) for r in thresholds.get("finish_reasons") or ["stop"]]
    setting = f"gates.smoke.finish_reasons {' or '.join(allowed)}"
    expect = thresholds.get("expect_substring")
    holding = f", its content holding {expect!r}" if isinstance(expect, str) and expect else ""
    if finish == "length":
        return ("a short chat completion returned content and usage and was cut off at max_tokens "
                f"(finish_reason length, which the recipe allows: {setting}){holding}")
    if finish is None:
        return f"a short chat completion finished with content and usage, as the recipe allows ({setting}){holding}"
    others = [r for r in allowed if r != finish]
    also = f" (the recipe also allowed {' or '.join(others)}: {setting})" if others else ""
    return f"a short chat completion finished with content, usage and finish_reason {finish}{also}{holding}"


def _openai_sdk(gate: Mapping[str, Any]) -> str:
    found = _measured(gate, "strict_findings")
    said = ("; strict validation against the SDK's models found nothing" if found == 0 else
            f"; strict validation noted {_count(found)} deviation(s) from the SDK's models (findings)"
            if isinstance(found, int) else "")
    return ("chat, a streamed tool call and the Responses API gave an application what it reads through the "
            f"official openai SDK as shipped{said}")


def _long_context(gate: Mapping[str, Any]) -> str:
    mode = _measured(gate, "check") or "needle"
    target = _count(_measured(gate, "target_tokens"))
    if mode == "smoke_after_filler":
        return (f"the smoke prompt was still answered after {target} filler tokens, {_k_of_n(gate)} "
                "(a long-context smoke: no fact was recalled)")
    return f"a fact at the start of a {target}-token prompt was recalled at its end, {_k_of_n(gate)}"


def _identity(gate: Mapping[str, Any]) -> str:
    status = _measured(gate, "identity_status") or gate.get("summary") or "unknown"
    checked = _measured(gate, "checked_fields")
    fields = f": {checked}" if isinstance(checked, str) and checked else ""
    return f"identity {status}{fields}"


def _ranks(gate: Mapping[str, Any]) -> str:
    ranks = _measured(gate, "ranks")
    kv = _measured(gate, "min_rank_kv_gib")
    reporting, silent = _measured(gate, "ranks_reporting_kv"), _measured(gate, "ranks_not_reporting_kv")
    minimum = f" (minimum {kv} GiB)" if isinstance(kv, int | float) else ""
    if not isinstance(reporting, list) or not reporting:
        return f"the log shows {_count(ranks)} rank(s)"
    if isinstance(silent, list) and silent:
        return (f"the log shows {_count(ranks)} rank(s); {', '.join(map(str, reporting))} logged its KV allocation"
                f"{minimum}, {', '.join(map(str, silent))} logged none (GPU vLLM logs it on rank 0 only)")
    return f"the log shows {_count(ranks)} rank(s), each with its KV allocation{minimum}"


def _kv_pool(gate: Mapping[str, Any]) -> str:
    tokens = _measured(gate, "kv_cache_tokens")
    minimum = (gate.get("thresholds") or {}).get("min_kv_tokens")
    text = f"the engine reported a KV pool of {_count(tokens)} tokens"
    if isinstance(minimum, int) and not isinstance(minimum, bool):
        return f"{text}, at or above the recipe minimum of {minimum:,}"
    return f"{text} (measured only: the recipe sets no minimum)"


def _cold_start(gate: Mapping[str, Any]) -> str:
    seconds = _measured(gate, "cold_start_s")
    ceiling = (gate.get("thresholds") or {}).get("cold_start_max_s")
    at = f" in {seconds:.1f} s" if isinstance(seconds, int | float) else ""
    within = f", within the recipe's ceiling of {ceiling:g} s" if isinstance(ceiling, int | float) else ""
    return f"a cold managed start passed health, the model list and a real completion{at}{within}"


def _ladder(gate: Mapping[str, Any]) -> str:
    largest = _measured(gate, "largest_prompt_tokens")
    derived = (" (rungs derived from max_model_len: the recipe sets none)"
               if _measured(gate, "rungs_from") == RungSource.MAX_MODEL_LEN else "")
    return (f"every ladder rung was exact and answered, the largest at {_count(largest)} API-reported prompt "
            f"tokens, each followed by a passing smoke{derived}")


def _concurrency(gate: Mapping[str, Any]) -> str:
    """Sent at once from as many threads; how many the server ran together is not measured here."""
    return f"{_count(_measured(gate, 'requests'))} requests sent at once all completed"


def _load(gate: Mapping[str, Any]) -> str:
    levels = _measured(gate, "promoted_levels")
    shown = ", ".join(_count(level) for level in levels) if isinstance(levels, list) and levels else "?"
    thresholds = gate.get("thresholds") or {}
    slo = [each.worded(thresholds[each.key]) for each in SLOS if isinstance(thresholds.get(each.key), int | float)]
    goodput = thresholds.get("min_goodput_pct")
    text = (f"at {shown} requests in flight (sustained), at least "
            f"{goodput:g}% of the requests met {', '.join(slo) or 'the SLOs'}, with no errors"
            if isinstance(goodput, int | float) else f"the promoted load levels {shown} met their SLOs")
    best = _measured(gate, "max_at_slo")
    if isinstance(best, int):
        text += f"; the highest level found at SLO was {best:,}"
    judged = _measured(gate, "slos_judged_on_server")  # reports before the client's figures judged every SLO
    if isinstance(judged, list) and judged:
        text += f" ({', '.join(map(str, judged))} judged on the server's own histograms, to their bucket resolution)"
    also = _measured(gate, "slos_also_judged_on_server")
    if isinstance(also, list) and also:
        text += (f" ({', '.join(map(str, also))} also judged on the server's own histograms, to their bucket "
                 "resolution: met only where they do not show a miss)")
    if _measured(gate, "slos_set_by") != "operator":
        text += f" (levels and SLOs: {_measured(gate, 'slos_set_by') or 'not stated'}, not an operator's)"
    return text


def _continuation(gate: Mapping[str, Any]) -> str:
    chars = _measured(gate, "answer_chars")
    said = f"{_count(chars)} characters of text" if isinstance(chars, int) else "text"
    return (f"after a tool call and its result, the model's next turn ended with finish_reason stop and {said}, "
            "without repeating the call (whether the answer used the result is not checked)")


def _fingerprints(gate: Mapping[str, Any]) -> str:
    counts = _measured(gate, "fingerprints")
    shown = (" (" + ", ".join(f"{effort} {_count(n)}" for effort, n in counts.items()) + ")"
             if isinstance(counts, Mapping) and counts else "")
    pinned = _measured(gate, "fingerprints_pinned")
    if pinned is None:  # a record from before the rule was measured: pinned when the threshold is a table
        pinned = isinstance((gate.get("thresholds") or {}).get("fingerprints"), Mapping)
    if pinned:
        return f"each reasoning effort's prompt-token count equals its pinned fingerprint{shown}, by usage and /tokenize"
    if _measured(gate, "efforts_compared") is False:
        return (f"nothing was pinned: each reasoning effort's prompt-token count{shown} was measured, usage and "
                "/tokenize agreeing")
    return (f"nothing was pinned: the reasoning efforts' prompt-token counts{shown} differ from each other, usage "
            "and /tokenize agreeing")


def _fixed(text: str) -> ProvesFn:
    return lambda _gate: text


REGISTRY: tuple[GateSpec, ...] = (
    GateSpec("smoke", "functional", "Smoke", _smoke, "smoke"),
    GateSpec("identity", "engine", "Identity", _identity),
    GateSpec("json", "functional", "JSON structured output",
             _fixed("a json_schema response_format answer parsed and validated against its schema"), "JSON"),
    GateSpec("tools", "functional", "Typed tool calls", _tools, "typed tool calls"),
    GateSpec("streaming_tool", "functional", "Streaming tool call", _streaming_tool, "streaming tool"),
    GateSpec("tool_continuation", "functional", "Tool-result continuation", _continuation,
             "tool-result continuation"),
    GateSpec("responses", "functional", "Responses API",
             _fixed("the Responses API answered the smoke prompt"), "Responses API"),
    GateSpec("openai_sdk", "functional", "The official openai SDK", _openai_sdk),
    GateSpec("reasoning_fingerprints", "reasoning", "Reasoning prompt contract", _fingerprints),
    GateSpec("quality_intelligence", "quality", "Intelligence",
             lambda g: f"a known-answer question was answered correctly {_k_of_n(g)}"),
    GateSpec("quality_session_recall", "quality", "Session recall",
             lambda g: f"a fact from the first turn was recalled turns later, {_k_of_n(g)}"),
    GateSpec("quality_tools", "quality", "Tools, repeated", _quality_tools),
    GateSpec("quality_long_context", "quality", "Long context", _long_context),
    GateSpec("engine_ranks", "engine", "Per-rank engine facts", _ranks),
    GateSpec("kv_pool", "engine", "KV pool", _kv_pool),
    GateSpec("cold_start", "lifecycle", "Cold managed start", _cold_start),
    GateSpec("ladder", "capacity", "Context ladder", _ladder),
    GateSpec("concurrency", "capacity", "Concurrency", _concurrency),
    GateSpec("load", "load", "Load at SLO (goodput)", _load),
)

BY_NAME: dict[str, GateSpec] = {spec.name: spec for spec in REGISTRY}
COMPARISON_GATES: dict[str, str] = {"items": "Item bank", "equivalence": "Equivalence probe",
                                   "tool_replay": "Tool-call replay", "load_floor": "Floor under load"}
"""Shipped gates whose evidence only a comparison judges (name → title). They are not in the
registry: a single run's verdict neither needs them nor counts their absence."""
EXECUTION_ORDER: tuple[str, ...] = tuple(spec.name for spec in REGISTRY)
"""smoke, identity, functional, reasoning, quality, engine, lifecycle, capacity, load: the order gates run in."""

PREFLIGHT_GATES: tuple[str, ...] = tuple(s.name for s in REGISTRY if s.family == "functional" and s.preflight_label)
"""The six gates of the reference campaign's functional preflight, in their order."""
PREFLIGHT_LABELS: dict[str, str] = {s.name: s.preflight_label or s.title for s in REGISTRY if s.family == "functional"}

LADDER_GATE = "ladder"
KV_POOL_GATE = "kv_pool"
IDENTITY_GATE = "identity"
COLD_START_GATE = "cold_start"
ENGINE_RANKS_GATE = "engine_ranks"
SECTION_GATES: tuple[str, ...] = (LADDER_GATE, KV_POOL_GATE)
"""Gates whose evidence has its own report section (the ladder, the engine facts)."""


def spec(name: str) -> GateSpec | None:
    """The registered gate ``name`` (None for a gate the registry does not know: a user's own)."""
    return BY_NAME.get(name)


def family_of(name: str, markers: list[str] | tuple[str, ...] = ()) -> str | None:
    """The family of a gate: the registry's, or for a user's gate the first family-named marker."""
    known = BY_NAME.get(name)
    if known is not None:
        return known.family
    for marker in markers:
        if marker in FAMILIES:
            return marker
    return None


def title_of(name: str, fallback: str = "") -> str:
    known = BY_NAME.get(name)
    return known.title if known is not None else (COMPARISON_GATES.get(name) or fallback or name)


def proves(gate: Mapping[str, Any]) -> str | None:
    """What a passed gate record proves (None when it did not pass or is not registered)."""
    known = BY_NAME.get(str(gate.get("gate")))
    if known is None or gate.get("outcome") != GateOutcome.PASSED:
        return None
    return known.proves(gate)

__all__ = [
    "BY_NAME",
    "COLD_START_GATE",
    "COMPARISON_GATES",
    "ENGINE_RANKS_GATE",
    "EXECUTION_ORDER",
    "FAMILIES",
    "IDENTITY_GATE",
    "KV_POOL_GATE",
    "LADDER_GATE",
    "PREFLIGHT_GATES",
    "PREFLIGHT_LABELS",
    "REGISTRY",
    "SECTION_GATES",
    "GateSpec",
    "family_of",
    "proves",
    "spec",
    "title_of",
]
