"""The committed fixture-model A/B (tiny-cpu against tiny-cpu-4096, TP=2, bracketed) with the tool
replay and depth windows to 32K: what it measured, read from its files (today's code recomputes the
comparison from them in ``tests/unit/project/test_examples.py``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from support import ROOT

FOLDER = ROOT / "reports" / "examples" / "cpu-tiny-ab"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def arms() -> dict[str, dict[str, Any]]:
    comparison = load(FOLDER / "comparison.json")
    by_run = {load(p)["run"]["id"]: load(p) for p in FOLDER.glob("*.json") if p.name != "comparison.json"}
    return {role: by_run[comparison[role]["run_id"]] for role in ("control", "candidate", "replay")}


def test_the_arms_are_a_bracketed_tp2_pair_of_the_fixture_model() -> None:
    found = arms()
    assert [found[r]["recipe"]["name"] for r in ("control", "candidate", "replay")] == [
        "tiny-cpu", "tiny-cpu-4096", "tiny-cpu"]
    assert {found[r]["recipe"]["content"]["serve"]["tensor_parallel_size"] for r in found} == {2}


def test_the_depth_buckets_reach_32k_each_on_at_least_8_windows() -> None:
    depth = load(FOLDER / "comparison.json")["equivalence"]["depth"]
    assert [(b["from"], b["to"], b["windows"], b["verdict"]) for b in depth["buckets"]] == [
        (0, 8192, 8, "equivalent"), (8192, 16384, 8, "equivalent"), (16384, 32440, 8, "equivalent")]


def test_the_replay_was_cut_off_before_its_probe_so_no_floor_was_measured() -> None:
    """The session hit its 590 s limit during the replay's probe: the replay carries the item bank
    and the tool replay but no probe, so the A/A floor (and the exact rule) are not measured."""
    equivalence = load(FOLDER / "comparison.json")["equivalence"]
    assert arms()["replay"]["run"]["status"] == "incomplete"
    assert equivalence["floor"]["status"] == "not measured"
    exact = next(r for r in equivalence["promotion"]["rules"] if r["rule"] == "exact")
    assert exact["status"] == "not measured"


def test_the_tool_replay_is_paired_on_100_cases_and_says_it_cannot_tell_the_arms_apart() -> None:
    tasks = load(FOLDER / "comparison.json")["equivalence"]["tasks"]
    replay = next(b for b in tasks["blocks"] if b["block"] == "tool_replay")
    assert replay["carried"] is True and replay["overall"]["paired"] == 100
    assert (replay["overall"]["b"], replay["overall"]["c"], replay["verdict"]) == (0, 0, "inconclusive")


def test_the_three_layers_and_the_rule_are_in_the_json_and_its_junit() -> None:
    promotion = load(FOLDER / "comparison.json")["equivalence"]["promotion"]
    assert [layer["layer"] for layer in promotion["layers"]] == ["tokens", "tasks", "depth"]
    assert (promotion["rule"], promotion["status"]) == ("tokens", "not measured")
    assert [(x["layer"], x["status"]) for x in promotion["layers"]] == [
        ("tokens", "not measured"), ("tasks", "not measured"), ("depth", "passed")]
    cases = {(c.get("classname"), c.get("name")) for c in ET.parse(FOLDER / "comparison.xml").iter("testcase")}
    assert {("equivalence.layer", name) for name in ("tokens", "tasks", "depth")} <= cases
