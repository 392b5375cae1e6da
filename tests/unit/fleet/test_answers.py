"""The nodes' answers compared: pairs on one probe, the floor, the odd one out, explained or not.

Sidecars are synthetic probe answers (``support.equivalence_samples``): ``shift`` moves a node's
log probabilities, as a host that computes differently would.
"""

from __future__ import annotations

from typing import Any

from support.equivalence_samples import PIN, items_block, probe_body

from pytest_vllmqual.equivalence.sidecar import FORMAT
from pytest_vllmqual.fleet.answers import NodeAnswers, compare_answers
from pytest_vllmqual.launch.fingerprint import fingerprint_key

FINGERPRINT = {"source": "server process", "cpu_sha256": "c" * 16, "build": "cpu", "vllm_version": "0.32.0",
               "torch_version": "2.13.0+cpu", "env": {"OMP_NUM_THREADS": None, "VLLM_CPU_OMP_THREADS_BIND": "0"}}


def sidecar(**kwargs: Any) -> dict[str, Any]:
    items = kwargs.pop("items", None)
    body = {"format": FORMAT, **probe_body(**kwargs), "arm": {"checkpoint_pin": {"kind": "content digest",
                                                                                    "value": PIN}}}
    if items is not None:
        body["items"] = items
    return body


def node(name: str, *, env: dict[str, Any] | None = None, overrides: tuple[str, ...] = (),
         **kwargs: Any) -> NodeAnswers:
    fingerprint = {**FINGERPRINT, "env": {**FINGERPRINT["env"], **(env or {})}}
    return NodeAnswers(node=name, report={"gates": []}, sidecar=sidecar(**kwargs), key=f"key-{name}",
                       fingerprint=fingerprint_key(fingerprint, {"source": "n/a"}), node_overrides=overrides,
                       recipe_sha256="a" * 64)


def test_identical_nodes_answer_alike_with_the_figures() -> None:
    result = compare_answers("j", [node("node-1"), node("node-2"), node("node-3")])
    assert result["compared"] and result["agree"] and not result["suspects"] and not result["odd_one_out"]
    assert len(result["pairs"]) == 3 and result["groups"] == [["node-1", "node-2", "node-3"]]
    pair = result["pairs"][0]
    assert pair["figures"]["top1_agreement"]["point"] == 100.0 and pair["figures"]["kl_lower_bound"]["point"] == 0.0
    assert pair["figures"]["ln_ppl_ratio"]["point"] == 0.0 and pair["greedy"]["hard"] == 0
    assert result["summary"].startswith("3 nodes answer alike") and "no floor measured" in result["summary"]


def test_the_node_that_differs_on_the_same_fingerprint_is_named_a_suspect() -> None:
    result = compare_answers("j", [node("node-1"), node("node-2"), node("node-3", shift=0.05, hard_greedy=True)])
    assert result["odd_one_out"] == ["node-3"] and not result["agree"]
    assert [s["node"] for s in result["suspects"]] == ["node-3"] and result["suspects"][0]["node_key"] == "key-node-3"
    differing = [p for p in result["pairs"] if p["differs"]]
    assert {tuple(p["nodes"]) for p in differing} == {("node-1", "node-3"), ("node-2", "node-3")}
    assert all(p["cause"] == "unexplained" for p in differing)
    assert {"ln_ppl_ratio", "kl_lower_bound", "hard_divergence"} <= set(differing[0]["differing"])
    assert "node-3 is the odd one out on answers" in result["summary"]


def test_a_difference_the_fingerprint_records_is_explained_and_not_a_suspect() -> None:
    odd = node("node-3", shift=0.05, env={"OMP_NUM_THREADS": "2"})
    result = compare_answers("j", [node("node-1"), node("node-2"), odd])
    assert result["odd_one_out"] == ["node-3"] and result["agree"] and not result["suspects"]
    pair = next(p for p in result["pairs"] if p["differs"])
    assert pair["cause"] == "explained" and pair["explained_by"] == ["env.OMP_NUM_THREADS"]
    assert "OMP_NUM_THREADS None vs 2" in pair["summary"] and "every difference explained" in result["summary"]


def test_a_node_set_override_is_explained_by_the_recipe() -> None:
    odd = node("node-3", shift=0.05, overrides=("serve.extra_args=[]",))
    pair = next(p for p in compare_answers("j", [node("node-1"), node("node-2"), odd])["pairs"] if p["differs"])
    assert pair["cause"] == "recipe" and "not the fingerprint" in pair["summary"] and "node-3" in pair["summary"]


def test_two_nodes_that_differ_are_reported_without_blame() -> None:
    result = compare_answers("j", [node("node-1"), node("node-2", shift=0.05)])
    assert not result["agree"] and result["odd_one_out"] == [] and result["suspects"] == []
    assert result["undecided"] == [["node-1", "node-2"]] and "neither is taken as the reference" in result["summary"]


def test_a_figure_within_the_floor_is_not_a_difference_and_one_beyond_it_is() -> None:
    floors = {"node-1": node("node-1", shift=0.002)}
    alike = compare_answers("j", [node("node-1"), node("node-2", shift=0.002)], floors)
    assert alike["floor"]["status"] == "measured" and alike["floor"]["nodes"] == ["node-1"]
    assert alike["agree"] and not alike["pairs"][0]["differs"] and "within the floor" in alike["summary"]
    apart = compare_answers("j", [node("node-1"), node("node-2", shift=0.05)], floors)
    assert apart["pairs"][0]["differs"] and "ln_ppl_ratio" in apart["pairs"][0]["differing"]


def test_item_bank_flips_count_as_a_difference() -> None:
    left, right = items_block({"arithmetic": (3, 2, 0, 3)})
    result = compare_answers("j", [node("node-1", items=left), node("node-2", items=right)])
    pair = result["pairs"][0]
    assert pair["differs"] and pair["differing"] == ["item_bank_flips"] and pair["flips"]["item_bank"] == 2


def test_another_probe_or_no_sidecar_is_not_compared_and_says_why() -> None:
    other = node("node-3", probe="q" * 64)
    missing = NodeAnswers(node="node-4", report={}, sidecar="the node ran no probe")
    result = compare_answers("j", [node("node-1"), node("node-2"), other, missing])
    assert result["nodes"] == ["node-1", "node-2"] and result["agree"]
    reasons = {n["node"]: n["reason"] for n in result["not_compared"]}
    assert "another probe" in reasons["node-3"] and reasons["node-4"] == "the node ran no probe"
    alone = compare_answers("j", [node("node-1"), missing])
    assert not alone["compared"] and "fewer than two nodes" in alone["summary"]


def test_one_node_run_twice_gives_the_floor_alone() -> None:
    result = compare_answers("j", [node("node-1")], {"node-1": node("node-1")})
    assert not result["compared"] and result["floor"]["status"] == "measured"
    assert "node-1 against itself (the floor): top1_agreement 100" in result["summary"]
