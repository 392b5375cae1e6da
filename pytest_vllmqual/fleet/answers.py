"""Do the nodes answer alike? The probe's numbers of one job, node against node.

A restart on one host reproduces the probe's answers exactly, so with one pinned recipe on the same
hardware and software any difference between nodes is a finding. Every pair of nodes that answered
the same probe (its hash) is compared with the comparison's own figures and thresholds
(``equivalence_section``, the nodes as control and candidate): top-1 agreement, the KL lower bound,
the ln PPL ratio, RMS Δp, the greedy hard-divergence rate and the flips of the items both nodes
scored, with the item bank's flips beside them.

A pair *differs* when a figure's point lies outside what one node gives against itself (the floor:
the job run twice on a node), or, without a floor, when any figure is not exactly that of identical
answers (100 % top-1, every other figure 0, no flip). The thresholds' verdict is reported beside it.

Each difference is then told apart by its cause: ``recipe`` when a node ran with its own overrides
(a fleet file's ``node_set``), ``explained`` when the two nodes' fingerprints differ (the fields that
do are named), else ``unexplained``: the same recipe on what looks like the same machine, a suspect
host. With three or more nodes the node that differs from an agreeing majority is named; with two,
the difference is reported without blame.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.equivalence import Thresholds
from pytest_vllmqual.equivalence.comparison import ArmWords, equivalence_section
from pytest_vllmqual.report.query import recipe_value
from pytest_vllmqual.words import AnswerCause

__all__ = ["IDENTICAL", "NodeAnswers", "compare_answers", "compare_pair", "differing_figures", "floor_bounds",
           "pair_section"]

IDENTICAL: dict[str, float] = {"top1_agreement": 100.0, "ln_ppl_ratio": 0.0, "rms_delta_p": 0.0,
                               "hard_divergence": 0.0, "flips": 0.0, "kl_lower_bound": 0.0}
"""Each figure's value when two runs answered identically (as the section scales them)."""
NO_FLOOR = "no node ran the job twice (the fleet's floor was not asked for or did not run)"


@dataclass(frozen=True)
class NodeAnswers:
    """One node's answers to a job: its report, its sidecar (or why none), what explains a difference."""

    node: str
    report: Mapping[str, Any]
    sidecar: Mapping[str, Any] | str
    key: str | None = None
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    node_overrides: tuple[str, ...] = ()
    recipe_sha256: str | None = None

    @property
    def probe_sha256(self) -> str | None:
        return self.sidecar.get("probe_sha256") if isinstance(self.sidecar, Mapping) else None


def pair_section(a: NodeAnswers, b: NodeAnswers, *, words: ArmWords | None = None) -> dict[str, Any]:
    """The comparison's equivalence section of two nodes (``a`` as the control), thresholds from ``a``'s recipe."""
    words = words or ArmWords(control=a.node, candidate=b.node, both=f"{a.node} and {b.node}", plural="nodes")
    found: dict[str, Any] = {"control": a.sidecar, "candidate": b.sidecar}
    thresholds = Thresholds.from_recipe(recipe_value(a.report, "compare", "equivalence"), recipe="the job's recipe")
    return equivalence_section(a.report, b.report, None, found, thresholds=thresholds, words=words, no_floor=NO_FLOOR)


def _figures(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(f["figure"]): f for f in section.get("figures") or [] if f.get("point") is not None}


def _item_bank_flips(section: Mapping[str, Any]) -> int | None:
    blocks = (section.get("tasks") or {}).get("blocks") or []
    counted = [(b.get("overall") or {}) for b in blocks if b.get("block") == "items" and b.get("overall")]
    return int(counted[0].get("b", 0)) + int(counted[0].get("c", 0)) if counted else None


def differing_figures(section: Mapping[str, Any], floor: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """The figures of a pair that show a difference: outside the floor's interval, or (without a
    floor) not the value of identical answers; the item bank's flips count as ``item_bank_flips``."""
    out = []
    for key, figure in _figures(section).items():
        point = float(figure["point"])
        bounds = (floor or {}).get(key)
        if bounds and bounds.get("low") is not None and bounds.get("high") is not None:
            if not float(bounds["low"]) <= point <= float(bounds["high"]):
                out.append(key)
        elif point != IDENTICAL.get(key, 0.0):
            out.append(key)
    if _item_bank_flips(section):
        out.append("item_bank_flips")
    return out


def _cause(a: NodeAnswers, b: NodeAnswers) -> tuple[AnswerCause, list[str], str]:
    """Why two nodes' answers may differ: the recipe, fields of their fingerprints, or nothing known."""
    if a.node_overrides or b.node_overrides or (a.recipe_sha256 and b.recipe_sha256 and
                                                 a.recipe_sha256 != b.recipe_sha256):
        which = [n.node for n in (a, b) if n.node_overrides]
        return (AnswerCause.RECIPE, ["recipe"], f"explained by the recipe, not the fingerprint: "
                f"{', '.join(which) or 'the nodes'} ran with node overrides (node_set)")
    fa, fb = a.fingerprint.get("fields"), b.fingerprint.get("fields")
    if not fa or not fb:
        missing = ", ".join(n.node for n in (a, b) if not n.fingerprint.get("fields"))
        return AnswerCause.UNEXPLAINED, [], f"unexplained: the fingerprint of {missing} was not measured"
    fields = sorted(k for k in {*fa, *fb} if fa.get(k) != fb.get(k))
    if fields:
        shown = "; ".join(f"{k} {fa.get(k)} vs {fb.get(k)}" for k in fields)
        return AnswerCause.EXPLAINED, fields, f"explained by the fingerprint: {shown}"
    return AnswerCause.UNEXPLAINED, [], "unexplained: the same recipe and the same fingerprint"


def _shown(figure: Mapping[str, Any]) -> str:
    return f"{figure.get('label')} {figure.get('point'):g}"


def compare_pair(a: NodeAnswers, b: NodeAnswers, floor: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    section = pair_section(a, b)
    if section["verdict"] == "not measurable":
        return {"nodes": [a.node, b.node], "compared": False, "differs": False, "verdict": section["verdict"],
                "reasons": section["reasons"], "summary": f"{a.node} and {b.node}: not compared, {section['reasons'][0]}"}
    figures = _figures(section)
    differ = differing_figures(section, floor)
    cause, fields, why = _cause(a, b)
    flips = _item_bank_flips(section)
    shown = ", ".join(_shown(figures[k]) for k in differ if k in figures)
    if "item_bank_flips" in differ:
        shown += (", " if shown else "") + f"{flips} item bank flip(s)"
    summary = (f"{a.node} and {b.node} answer differently ({shown}); {why}" if differ
               else f"{a.node} and {b.node} answer alike (" + ", ".join(_shown(f) for f in figures.values()) + ")")
    return {"nodes": [a.node, b.node], "compared": True, "differs": bool(differ), "differing": differ,
            "cause": cause.value if differ else None, "explained_by": fields if differ else [],
            "verdict": section["verdict"], "reasons": section["reasons"],
            "figures": {k: {x: f.get(x) for x in ("label", "point", "low", "high", "threshold", "status")}
                        for k, f in figures.items()},
            "greedy": {k: (section.get("greedy") or {}).get(k) for k in ("prompts", "identical", "near_ties", "hard")},
            "flips": {"reports": (section.get("flips") or {}).get("b", 0) + (section.get("flips") or {}).get("c", 0),
                      "item_bank": flips},
            "summary": summary}


def _floor(nodes: Sequence[NodeAnswers], floors: Mapping[str, NodeAnswers]) -> dict[str, Any]:
    """Each floor node against its second run: the figures a node gives against itself."""
    by_node = {n.node: n for n in nodes}
    measured: dict[str, Any] = {}
    for node, again in floors.items():
        first = by_node.get(node)
        if first is None or not isinstance(first.sidecar, Mapping) or not isinstance(again.sidecar, Mapping):
            continue
        section = pair_section(first, again, words=ArmWords(node, f"{node} again", f"{node}'s two runs", "runs"))
        if section["verdict"] == "not measurable":
            continue
        measured[node] = {k: {"low": f.get("low"), "high": f.get("high"), "point": f.get("point")}
                          for k, f in _figures(section).items()}
    return measured


def floor_bounds(floors: Mapping[str, Mapping[str, Any]], pair: Sequence[str]) -> dict[str, dict[str, Any]] | None:
    """The floor a pair is held to: its own nodes' floors where measured, else every floor; the widest."""
    chosen = [floors[n] for n in pair if n in floors] or list(floors.values())
    if not chosen:
        return None
    keys = {k for f in chosen for k in f}
    return {k: {"low": min(float(f[k]["low"]) for f in chosen if k in f),
                "high": max(float(f[k]["high"]) for f in chosen if k in f)} for k in keys}


def _groups(pairs: Sequence[Mapping[str, Any]], nodes: Sequence[str]) -> list[list[str]]:
    """Nodes that answer alike, joined through every pair that does not differ (largest first)."""
    parent = {n: n for n in nodes}

    def root(n: str) -> str:
        while parent[n] != n:
            n = parent[n]
        return n
    for pair in pairs:
        if pair["compared"] and not pair["differs"]:
            parent[root(pair["nodes"][0])] = root(pair["nodes"][1])
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(root(n), []).append(n)
    return sorted(groups.values(), key=lambda g: (-len(g), g))


def compare_answers(job: str, nodes: Sequence[NodeAnswers], floors: Mapping[str, NodeAnswers] | None = None,
                    *, floor_asked: bool = True) -> dict[str, Any]:
    """One job's answers compared node by node: the pairs, the floor, who differs and why, the suspects."""
    answered = [n for n in nodes if isinstance(n.sidecar, Mapping) and n.probe_sha256]
    missing = [{"node": n.node, "reason": n.sidecar if isinstance(n.sidecar, str) else "its sidecar holds no probe"}
               for n in nodes if n not in answered]
    hashes = sorted({str(n.probe_sha256) for n in answered})
    main = max(hashes, key=lambda h: sum(1 for n in answered if n.probe_sha256 == h)) if hashes else None
    other_probe = [{"node": n.node, "reason": f"it answered another probe ({str(n.probe_sha256)[:12]}…)"}
                   for n in answered if n.probe_sha256 != main]
    answered = [n for n in answered if n.probe_sha256 == main]
    floor_figures = _floor(answered, floors or {})
    pairs = [compare_pair(a, b, floor_bounds(floor_figures, (a.node, b.node)))
             for i, a in enumerate(answered) for b in answered[i + 1:]]
    names = [n.node for n in answered]
    groups = _groups(pairs, names)
    odd: list[str] = []
    if len(names) >= 3 and len(groups) >= 2 and len(groups[0]) >= 2 and len(groups[0]) > len(groups[1]):
        odd = sorted(n for g in groups[1:] for n in g)
    differing = [p for p in pairs if p["differs"]]
    unexplained = [p for p in differing if p["cause"] == AnswerCause.UNEXPLAINED]
    blamed = {n for p in unexplained for n in p["nodes"] if n in odd}
    keys = {n.node: n.key for n in answered}
    suspects = [{"node": n, "node_key": keys.get(n), "job": job, "cause": AnswerCause.UNEXPLAINED.value,
                 "reason": next(p["summary"] for p in unexplained if n in p["nodes"])} for n in sorted(blamed)]
    undecided = [p["nodes"] for p in unexplained if not set(p["nodes"]) & blamed]
    result = {"job": job, "probe_sha256": main, "nodes": names, "not_compared": [*missing, *other_probe],
              "floor": {"status": "measured" if floor_figures else "not measured",
                        "nodes": sorted(floor_figures), "figures": floor_figures,
                        **({} if floor_figures else {"reason": NO_FLOOR if floor_asked else
                                                     "the fleet file asked for no floor"})},
              "pairs": pairs, "groups": groups, "odd_one_out": odd, "suspects": suspects,
              "undecided": undecided, "agree": len(names) >= 2 and not unexplained,
              "compared": len(names) >= 2}
    result["summary"] = _summary(result, differing, unexplained)
    return result


def _floor_words(floor: Mapping[str, Any]) -> str:
    """``; node-1 against itself (the floor): top1_agreement 100, ln_ppl_ratio 0, ...``; '' without a floor."""
    parts = [f"; {node} against itself (the floor): " + ", ".join(f"{k} {v['point']:g}" for k, v in figures.items())
             for node, figures in (floor.get("figures") or {}).items()]
    return "".join(parts)


def _summary(result: Mapping[str, Any], differing: Sequence[Mapping[str, Any]],
             unexplained: Sequence[Mapping[str, Any]]) -> str:
    names = result["nodes"]
    if len(names) < 2:
        return "answers not compared: fewer than two nodes answered the same probe" + _floor_words(result["floor"])
    floor = "within the floor" if result["floor"]["status"] == "measured" else "identical (no floor measured)"
    if not differing:
        return f"{len(names)} nodes answer alike: every figure of every pair {floor}"
    parts = []
    for node in result["odd_one_out"]:
        mine = [p for p in differing if node in p["nodes"]]
        parts.append(f"{node} is the odd one out on answers: {mine[0]['summary']}")
    parts += [p["summary"] for p in differing if not set(p["nodes"]) & set(result["odd_one_out"])]
    tail = "" if unexplained else " (every difference explained)"
    if len(names) == 2:
        tail += "; with two nodes neither is taken as the reference"
    return "; ".join(parts) + tail
