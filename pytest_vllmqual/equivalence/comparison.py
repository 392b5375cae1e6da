"""The comparison's ``equivalence`` section: does the candidate answer as the control does?

This is the one module of the package above the report layer: it reads two public reports (their
recipes' ``compare`` sections, their scored gates) as well as their sidecars. Everything below it
(the probe, the item bank, the sidecar, the figures and the paired statistics) is layer 6 and is
imported through the package itself (:mod:`pytest_vllmqual.equivalence`).

Built from the arms' probe sidecars (token IDs and log probabilities, referenced by SHA-256 from
each report) and the items both reports scored. It is ``not measurable`` when either arm has no
probe, no log probabilities (K = 0), or the arms differ in probe, tokenizer or checkpoint pin;
otherwise the figures of :mod:`pytest_vllmqual.equivalence.figures` are held against the control
recipe's ``compare.equivalence`` thresholds (:mod:`pytest_vllmqual.equivalence.verdict`). With a
bracketed replay of the control, the control against its replay is the A/A floor: a figure is
within the floor when its interval overlaps the A/A interval. Without one the floor is not measured.
The section's ``tasks`` judges the scored items both sidecars carry for non-inferiority
(:mod:`pytest_vllmqual.equivalence.tasks`), whether or not the token figures could be compared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllmqual.records import EquivalenceVerdict
from pytest_vllmqual.report.query import recipe_value

from . import sidecar as sidecars
from .answers import count_flips
from .depth_figures import depth_comparison, depth_lines
from .figures import greedy_figures, teacher_forced
from .intervals import exact_interval
from .layers import PromotionSettings, layers_lines, promotion_section
from .load_floor import floor_lines, with_load_floor
from .tasks import Names, TaskSettings, tasks_markdown, tasks_section
from .verdict import FIGURES, Thresholds, check_figure, decide_equivalence

__all__ = ["LOWER_BOUND_NOTE", "ArmWords", "carry_forward", "checkpoint_pin", "equivalence_section", "flip_items",
           "load_sidecars", "logprobs_mode", "markdown_lines", "needle_by_depth", "prefix_caching", "sidecar_arm", "summary_line"]

LOWER_BOUND_NOTE = ("the KL figure is a lower bound of the full-vocabulary KL (tokens outside both arms' top-K "
                    "are merged into one bucket): it can show a difference, never equivalence")
_SCORED_FAMILIES = ("functional", "quality")


def checkpoint_pin(report: Mapping[str, Any]) -> dict[str, str] | None:
    """What "the same checkpoint" means for this report: the local model folder's content digest,
    else the hub revision the identity check matched; None when neither is known."""
    identity = report.get("identity") or {}
    pin = identity.get("pin")
    if isinstance(pin, Mapping) and pin.get("value"):
        return {"kind": str(pin.get("kind") or "pin"), "value": str(pin["value"])}
    content = (identity.get("model_files") or {}).get("content")
    if isinstance(content, str) and content:
        return {"kind": "content digest", "value": content}
    for check in identity.get("checks") or []:
        if isinstance(check, Mapping) and check.get("field") == "revision" and check.get("ok") is True:
            return {"kind": "hub revision", "value": str(check.get("observed"))}
    return None


def prefix_caching(report: Mapping[str, Any]) -> bool | None:
    """Whether the arm's engine cached prefixes (its ``cache_config``), None when not reported."""
    value = (((report.get("engine") or {}).get("cache_config")) or {}).get("enable_prefix_caching")
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(str(value).lower()) if value is not None else None


def logprobs_mode(report: Mapping[str, Any]) -> str:
    """The server's ``--logprobs-mode`` (vLLM's default: raw log probabilities)."""
    args = (report.get("engine") or {}).get("non_default_args") or {}
    value = args.get("logprobs_mode") if isinstance(args, Mapping) else None
    return str(value) if value else sidecars.DEFAULT_LOGPROBS_MODE


def sidecar_arm(report: Mapping[str, Any]) -> dict[str, Any]:
    """What the arm's sidecar records of its report (``sidecar.ARM_KEYS``), for a later comparison."""
    return {"checkpoint_pin": checkpoint_pin(report), "prefix_caching": prefix_caching(report),
            "logprobs_mode": logprobs_mode(report),
            "runtime_version": ((report.get("identity") or {}).get("observed") or {}).get("runtime_version")}


def load_sidecars(reports: Mapping[str, Mapping[str, Any] | None],
                  folders: Mapping[str, Path | None]) -> dict[str, dict[str, Any] | str]:
    """Per role: the arm's sidecar, or why it has none (no probe ran, not beside the report, changed)."""
    out: dict[str, dict[str, Any] | str] = {}
    for role, report in reports.items():
        if report is None:
            continue
        reference = report.get("equivalence_probe")
        folder = folders.get(role)
        if not isinstance(reference, Mapping):
            out[role] = f"the {role} ran no equivalence probe"
        elif folder is None:
            out[role] = f"the {role}'s probe sidecar was not given"
        else:
            found, why = sidecars.load(reference, folder)
            out[role] = found if found is not None else f"the {role}: {why}"
    return out


def flip_items(report: Mapping[str, Any]) -> dict[str, bool]:
    """Every scored item of one report, correct or not: each functional and quality gate that passed
    or failed, each typed tool case, each ladder rung's smoke."""
    items: dict[str, bool] = {}
    for gate in report.get("gates") or []:
        outcome = gate.get("outcome")
        if gate.get("family") in _SCORED_FAMILIES and outcome in ("passed", "failed"):
            items[f"gate:{gate.get('gate')}"] = outcome == "passed"
        per_case = (gate.get("measurements") or {}).get("items")
        if isinstance(per_case, Mapping):
            items.update({f"{gate.get('gate')}:{name}": bool(ok) for name, ok in per_case.items()
                          if isinstance(ok, bool)})
    for rung in report.get("ladder") or []:
        if isinstance(rung.get("post_probe_smoke_ok"), bool):
            items[f"ladder:{rung.get('target')}"] = rung["post_probe_smoke_ok"]
    return items


def _tools_in_flight(report: Mapping[str, Any]) -> int:
    """How many typed tool cases the run asked at once (a report from before ``in_flight``: one)."""
    gate = next((g for g in report.get("gates") or [] if g.get("gate") == "tools"), None)
    return int(((gate or {}).get("measurements") or {}).get("in_flight") or 1)


def _flips(control: Mapping[str, Any], candidate: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The scored items both reports hold, paired. The typed tool cases are left out when the two runs
    asked them differently (one at a time against several at once): on a GPU an answer can change with
    the batch it shares, so such a flip could be the batch's; ``left_out`` then says so."""
    left, right = flip_items(control), flip_items(candidate)
    sent = (_tools_in_flight(control), _tools_in_flight(candidate))
    shared = sorted(k for k in set(left) & set(right) if sent[0] == sent[1] or not k.startswith("tools:"))
    count = count_flips([(left[k], right[k]) for k in shared])
    record: dict[str, Any] = {"items": count.n, "b": count.b, "c": count.c, "flips": round(count.flips, 6),
                              "delta_accuracy": round(count.delta_accuracy, 6), "mcnemar_p": round(count.p_value, 6),
                              "flipped": [k for k in shared if left[k] != right[k]]}
    if sent[0] != sent[1]:
        record["left_out"] = (f"the typed tool cases: asked {sent[0]} against {sent[1]} at once, so a flip could be "
                              "the batch's, not the change's")
    interval = exact_interval(count.b + count.c, count.n).to_dict() if count.n else None
    return record, interval


@dataclass(frozen=True)
class ArmWords:
    """How the section names the two sides in its sentences (a drift check names runs, not arms)."""

    control: str = "the control"
    candidate: str = "the candidate"
    both: str = "the arms"
    plural: str = "arms"


def _not_comparable(control: Mapping[str, Any], candidate: Mapping[str, Any], words: ArmWords = ArmWords()) -> str | None:
    """Why two sidecars cannot be compared (None when they can)."""
    for role, body in ((words.control, control), (words.candidate, candidate)):
        if "probe_sha256" not in body:
            return f"{role} ran no equivalence probe (its sidecar holds the item bank's answers only)"
        if not body.get("top_k"):
            return f"{role}'s server returned no log probabilities (K = 0)"
    if control.get("tokenizer_sha256") != candidate.get("tokenizer_sha256"):
        return f"{words.both}' tokenizers differ (their token IDs of the probe text differ)"
    if control.get("probe_sha256") != candidate.get("probe_sha256"):
        return (f"{words.both} answered different probes (probe hash {str(control.get('probe_sha256'))[:12]}… vs "
                f"{str(candidate.get('probe_sha256'))[:12]}…: context lengths, chunks, greedy prompts or K differ: "
                f"K {control.get('top_k')} vs {candidate.get('top_k')})")
    pins = [(body.get("arm") or {}).get("checkpoint_pin") for body in (control, candidate)]
    if pins[0] is None or pins[1] is None:
        return f"the checkpoint is not pinned in both {words.plural} (no content digest or matched hub revision)"
    if pins[0] != pins[1]:
        return f"{words.both} differ in checkpoint pin ({pins[0]['kind']} {pins[0]['value'][:12]}… vs " \
               f"{pins[1]['kind']} {pins[1]['value'][:12]}…)"
    return None


def _figures(control: Mapping[str, Any], candidate: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    max_tokens = int((control.get("parameters") or {}).get("greedy_max_tokens") or 0)
    return teacher_forced(control, candidate), greedy_figures(control, candidate, max_tokens=max_tokens)


def _intervals(tf: Mapping[str, Any], greedy: Mapping[str, Any], flips: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**tf["overall"]["intervals"], "hard_divergence": greedy.get("hard_divergence"), "flips": flips}


def _judge_lengths(tf: dict[str, Any], thresholds: Thresholds) -> None:
    """Each context length's top-1 agreement against its threshold, written into its row
    (``top1_status``): the page shows the word, it does not judge."""
    top1 = next(spec for spec in FIGURES if spec.key == "top1_agreement")
    for row in tf.get("by_length") or []:
        row["top1_status"] = check_figure(top1, (row.get("intervals") or {}).get("top1_agreement"),
                                          thresholds).status.value


def _arm(body: Mapping[str, Any]) -> dict[str, Any]:
    """What one arm answered with: K, its probe and tokenizer hashes, prefix caching, logprobs mode, pin, runtime."""
    arm = body.get("arm") or {}
    return {"top_k": body.get("top_k"), "probe_sha256": body.get("probe_sha256"),
            "tokenizer_sha256": body.get("tokenizer_sha256"), "prefix_caching": arm.get("prefix_caching"),
            "logprobs_mode": arm.get("logprobs_mode"), "checkpoint_pin": arm.get("checkpoint_pin"),
            "runtime_version": arm.get("runtime_version")}


def _not_measurable(reason: str, thresholds: Thresholds, found: Mapping[str, Any]) -> dict[str, Any]:
    """No comparison; the arms that did answer a probe are still described (so a reader sees what differs)."""
    arms = {role: _arm(body) for role, body in found.items() if isinstance(body, dict)}
    return {"verdict": EquivalenceVerdict.NOT_MEASURABLE.value, "reasons": [reason], "thresholds": thresholds.to_dict(),
            "floor": {"status": "not measured", "reason": "no comparison was made"}, "figures": [],
            **({"arms": arms} if arms else {}), "notes": [LOWER_BOUND_NOTE]}


def equivalence_section(control: Mapping[str, Any], candidate: Mapping[str, Any],
                        replay: Mapping[str, Any] | None, found: Mapping[str, dict[str, Any] | str], *,
                        thresholds: Thresholds | None = None, words: ArmWords = ArmWords(),
                        no_floor: str = "no bracketed replay of the control ran",
                        task_settings: TaskSettings | None = None,
                        promotion: PromotionSettings | None = None) -> dict[str, Any]:
    """The section: verdict, reasons, thresholds, figures against them and the A/A floor, details,
    and ``tasks``: the scored items both sidecars carry, judged for non-inferiority (measured even
    when the token figures are not, e.g. across checkpoints).

    ``thresholds``, ``task_settings`` and ``promotion`` default to the control recipe's ``compare``;
    ``words`` name the two sides in the reasons; ``no_floor`` says why there is no A/A floor when no
    replay is given. The ``promotion`` part names the rule that may block and every layer's status."""
    section = _token_section(control, candidate, replay, found, thresholds=thresholds, words=words, no_floor=no_floor)
    settings = task_settings or TaskSettings.from_recipe(recipe_value(control, "compare"))
    section["tasks"] = tasks_section(found.get("control"), found.get("candidate"), settings,
                                     Names(words.control, words.candidate, words.both))
    section["tasks"]["by_depth"] = needle_by_depth(found.get("control"), found.get("candidate"))
    with_load_floor(section, found, recipe_value(control, "compare"))
    section["promotion"] = promotion_section(section, promotion or PromotionSettings.from_recipe(
        recipe_value(control, "compare")))
    return section


def carry_forward(section: Mapping[str, Any], control: Mapping[str, Any]) -> dict[str, Any]:
    """A stored section whose sidecars were not kept, brought to today's record: each context
    length's top-1 status and the ``promotion`` part, both derived from the stored figures and the
    control recipe's ``compare`` (nothing is measured again)."""
    out: dict[str, Any] = json.loads(json.dumps(section))
    thresholds = Thresholds.from_recipe(out.get("thresholds") if isinstance(out.get("thresholds"), Mapping) else None)
    if isinstance(out.get("teacher_forced"), dict):
        _judge_lengths(out["teacher_forced"], thresholds)
    out["promotion"] = promotion_section(out, PromotionSettings.from_recipe(recipe_value(control, "compare")))
    return out


def _needle_hits(sidecar: Mapping[str, Any] | str | None) -> dict[int, list[bool]]:
    """Per needle prompt length (its grade ``tokens-N-depth-D``), whether each needle was found."""
    if not isinstance(sidecar, Mapping):
        return {}
    block = sidecar.get("items") or {}
    correct = {o.get("item_id"): bool(o.get("correct")) for o in block.get("outcomes") or []}
    out: dict[int, list[bool]] = {}
    for answer in block.get("answers") or []:
        grade = str(answer.get("grade") or "").split("-")
        if answer.get("family") == "needle" and len(grade) == 4 and grade[1].isdigit() and answer["item_id"] in correct:
            out.setdefault(int(grade[1]), []).append(correct[answer["item_id"]])
    return out


def needle_by_depth(control: Mapping[str, Any] | str | None,
                    candidate: Mapping[str, Any] | str | None) -> list[dict[str, Any]]:
    """Task accuracy by depth: the needle family's accuracy per prompt length, each arm with its exact
    (Clopper-Pearson) 95% interval in percent; empty when neither arm answered needles."""
    arms = {"control": _needle_hits(control), "candidate": _needle_hits(candidate)}
    rows = []
    for tokens in sorted(set(arms["control"]) | set(arms["candidate"])):
        shown = {}
        for role, hits in arms.items():
            found = hits.get(tokens) or []
            if found:
                interval = exact_interval(sum(found), len(found))
                low, high = (interval.point if v is None else v for v in (interval.low, interval.high))
                shown[role] = {"point": round(100 * interval.point, 3), "low": round(100 * low, 3),
                               "high": round(100 * high, 3), "correct": sum(found), "items": len(found)}
        rows.append({"tokens": tokens, "items": max(len(h.get(tokens) or []) for h in arms.values()),
                     "accuracy_pct": shown})
    return rows


def _token_section(control: Mapping[str, Any], candidate: Mapping[str, Any],
                   replay: Mapping[str, Any] | None, found: Mapping[str, dict[str, Any] | str], *,
                   thresholds: Thresholds | None, words: ArmWords, no_floor: str) -> dict[str, Any]:
    """The token figures of the probe against their thresholds (the section less its tasks)."""
    thresholds = thresholds or Thresholds.from_recipe(recipe_value(control, "compare", "equivalence"))
    ctrl, cand = found.get("control"), found.get("candidate")
    for body in (ctrl, cand):
        if not isinstance(body, dict):
            return _not_measurable(str(body or "no probe sidecar"), thresholds, found)
    assert isinstance(ctrl, dict) and isinstance(cand, dict)
    why = _not_comparable(ctrl, cand, words)
    if why is not None:
        return _not_measurable(why, thresholds, found)
    tf, greedy = _figures(ctrl, cand)
    flips, flip_interval = _flips(control, candidate)
    floor_intervals, floor = None, {"status": "not measured", "reason": no_floor}
    rep = found.get("replay")
    if replay is not None and isinstance(rep, dict) and _not_comparable(ctrl, rep) is None:
        f_tf, f_greedy = _figures(ctrl, rep)
        _, f_flip_interval = _flips(control, replay)
        floor_intervals = _intervals(f_tf, f_greedy, f_flip_interval)
        floor = {"status": "measured", "reason": "the control against its bracketed replay (A/A)"}
    elif replay is not None:
        floor["reason"] = f"the replay's probe is not comparable: {rep if isinstance(rep, str) else _not_comparable(ctrl, rep or {})}"
    _judge_lengths(tf, thresholds)
    intervals = _intervals(tf, greedy, flip_interval)
    checks = [check_figure(spec, intervals.get(spec.key), thresholds,
                           floor_intervals.get(spec.key) if floor_intervals else None) for spec in FIGURES]
    verdict, reasons = decide_equivalence(checks)
    return {"verdict": verdict.value, "reasons": reasons, "thresholds": thresholds.to_dict(), "floor": floor,
            "figures": [c.to_dict() for c in checks], "top_k": ctrl.get("top_k"),
            "probe_sha256": ctrl.get("probe_sha256"),
            "arms": {"control": _arm(ctrl), "candidate": _arm(cand),
                     **({"replay": _arm(rep)} if floor_intervals is not None and isinstance(rep, dict) else {})},
            "teacher_forced": tf, "greedy": greedy, "flips": flips,
            "depth": depth_comparison(ctrl, cand, rep if floor_intervals is not None and isinstance(rep, dict)
                                      else None, thresholds),
            "notes": [LOWER_BOUND_NOTE, *([f"the flips leave out {flips['left_out']}"] if "left_out" in flips else [])]}


def summary_line(section: Mapping[str, Any], *, label: str = "equivalence") -> str:
    """``equivalence: not equivalent: top-1 agreement 84.4% [83.1, 85.6] below 97.7% (A/A 100.0%)``."""
    reasons = [str(r) for r in section.get("reasons") or []]
    first = reasons[0] if reasons else ""
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 and section.get("verdict") != "equivalent" else ""
    if section.get("verdict") == EquivalenceVerdict.EQUIVALENT:
        first = f"every exact figure within its threshold; {first}"
    floor = section.get("floor") or {}
    tail = "" if floor.get("status") == "measured" else "; A/A floor not measured"
    return f"{label}: {section.get('verdict')}: {first}{more}{tail}"


def markdown_lines(section: Mapping[str, Any]) -> list[str]:
    """The section in markdown: its line, each figure against its threshold, then the task layer."""
    lines = [summary_line(section)]
    lines += [f"- {f['label']}: {f['point']} [{f['low']}, {f['high']}] vs {f['threshold']} ({f['status']})"
              for f in section.get("figures") or []]
    lines += [f"- {text.strip()}" for text in depth_lines(section)]
    lines += [f"- {text}" for text in floor_lines(section.get("load_floor") or {})]
    if isinstance(section.get("tasks"), Mapping):
        lines += ["", "### Tasks: does the change matter?", "", *tasks_markdown(section["tasks"])]
    if isinstance(section.get("promotion"), Mapping):
        lines += ["", "### Promotion: the rule that may block", "", *(f"- {line.strip()}" for line in layers_lines(section))]
    return lines
