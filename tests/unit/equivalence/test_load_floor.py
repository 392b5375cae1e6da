"""The floor under load from one arm's ``load_floor`` block: per level, the chunks' top-1 agreement,
KL lower bound and ln PPL ratio against the pass alone, the greedy answers and the item flips
(b, c, changed answers) computed by hand; the settings from the recipe; the comparison's section
(the floor matched to how the items were sent) and batch invariance, asked or not."""

from __future__ import annotations

import math
from typing import Any

from pytest_vllmqual.equivalence.load_floor import (
    BLOCK_KEY,
    FloorSettings,
    arm_floor,
    batch_invariance,
    floor_levels,
    floor_lines,
    load_floor_section,
    with_load_floor,
)

LN_HALF, LN_QUARTER = math.log(0.5), math.log(0.25)


def position(token: int, top: dict[int, float]) -> list[Any]:
    return [token, top[token], [[k, lp] for k, lp in top.items()]]


def chunk(rows: list[list[Any]]) -> dict[str, Any]:
    return {"length": 8, "scored_from": 4, "positions": rows}


SAME = [position(1, {1: LN_HALF, 2: LN_QUARTER}), position(3, {3: LN_HALF, 4: LN_QUARTER})]
SWAPPED = [position(1, {2: LN_HALF, 1: LN_QUARTER}), position(3, {3: LN_HALF, 4: LN_QUARTER})]
"""The second arm's top token differs at the first position: top-1 agreement 1 of 2 there."""


def greedy(tokens: list[int]) -> dict[str, Any]:
    return {"id": "g", "steps": [[t, [[t, -0.1]]] for t in tokens]}


def items(correct: list[bool], texts: list[str]) -> dict[str, Any]:
    return {"outcomes": [{"item_id": f"i{n}", "family": "arithmetic", "correct": ok} for n, ok in enumerate(correct)],
            "answers": [{"item_id": f"i{n}", "text": text} for n, text in enumerate(texts)]}


def one_pass(level: int, chunks: list[list[list[Any]]], tokens: list[int], correct: list[bool],
             texts: list[str]) -> dict[str, Any]:
    return {"in_flight": level, "chunks": [chunk(c) for c in chunks], "greedy": [greedy(tokens)],
            **items(correct, texts), "seconds": 1.0, "load": {"in_flight": level} if level else None}


ALONE = one_pass(0, [SAME, SAME], [5, 6, 7], [True, True, False, False], ["2", "4", "7", "9"])
BLOCK = {"version": "1", "probe": {"top_k": 2, "greedy_max_tokens": 8}, "passes": [
    ALONE,
    one_pass(1, [SAME, SAME], [5, 6, 7], [True, True, False, False], ["2", "4", "7", "9"]),
    one_pass(4, [SWAPPED, SAME], [5, 6, 8], [False, True, True, False], ["3", "4", "8", "9"]),
]}


def test_each_level_is_its_answers_against_the_pass_alone() -> None:
    one, four = floor_levels(BLOCK)
    assert one["in_flight"] == 1 and one["answers_identical"] is True
    assert one["probe"]["top1_agreement"]["point"] == 1.0 and one["probe"]["kl_lower_bound"]["point"] == 0.0
    assert one["items"] == {"items": 4, "b": 0, "c": 0, "changed_answers": 0, "changed": []}
    assert four["answers_identical"] is False
    assert four["probe"]["top1_agreement"]["point"] == 0.75, "3 of 4 scored positions keep their top token"
    assert four["probe"]["greedy_prompts"] == 1 and four["probe"]["greedy_identical"] == 0
    # i0 right alone, wrong loaded (b); i2 wrong alone, right loaded (c); i3 unchanged
    assert four["items"] == {"items": 4, "b": 1, "c": 1, "changed_answers": 2, "changed": ["i0", "i2"]}


def test_the_ln_ppl_ratio_and_kl_are_those_of_the_swapped_position() -> None:
    four = floor_levels(BLOCK)[1]
    # the forced token 1: ln 0.5 alone, ln 0.25 loaded, over 4 positions
    assert math.isclose(four["probe"]["ln_ppl_ratio"]["point"], -(LN_QUARTER - LN_HALF) / 4, abs_tol=1e-6)
    assert four["probe"]["kl_lower_bound"]["point"] > 0


def test_a_block_without_a_pass_alone_has_no_floor() -> None:
    assert floor_levels({"passes": [BLOCK["passes"][1]]}) == []
    assert arm_floor({BLOCK_KEY: {"passes": []}})["status"] == "not measured"
    assert "load_floor gate did not run" in arm_floor({"items": {}})["reason"]


def test_settings_come_from_the_load_gate_unless_the_floor_names_its_levels() -> None:
    load = {"levels": [1, 4, 8], "prompt_tokens": 128, "output_tokens": 16, "e2e_s": 60}
    settings = FloorSettings.from_recipe({"load": load})
    assert settings.levels == (1, 4, 8) and (settings.prompt_tokens, settings.output_tokens) == (128, 16)
    assert settings.items_per_family == 8 and settings.families is None and settings.probe and settings.off is None
    assert settings.context_lengths is None
    own = FloorSettings.from_recipe({"load": load, BLOCK_KEY: {"levels": [4], "probe": False, "context_lengths": [512]}})
    assert own.levels == (4,) and own.context_lengths == (512,) and not own.probe
    assert "sets no gates.load levels" in str(FloorSettings.from_recipe({}).off)


def test_batch_invariance_passes_fails_or_is_not_measured() -> None:
    clean = {"status": "measured", "levels": [floor_levels(BLOCK)[0]]}
    moved = arm_floor({BLOCK_KEY: BLOCK})
    assert batch_invariance({"control": clean, "candidate": clean})["status"] == "passed"
    failed = batch_invariance({"control": clean, "candidate": moved})
    assert failed["status"] == "failed" and "candidate at 4 in flight: 2 of 4 item answers and 1 of 1 greedy" \
        in failed["reasons"][0]
    assert batch_invariance({"control": clean, "candidate": arm_floor("no sidecar")})["status"] == "not measured"


def test_items_sent_alone_are_judged_with_the_bracketed_floor() -> None:
    found = {"control": {BLOCK_KEY: BLOCK, "items": {"sent_in_flight": 0}}, "candidate": {BLOCK_KEY: BLOCK}}
    section = load_floor_section(found, {"status": "measured"}, asks_batch_invariance=False)
    assert section["matched"]["floor"] == "bracketed A/A" and section["matched"]["status"] == "measured"
    assert section["batch_invariance"]["status"] == "not asked"
    loaded = load_floor_section({"control": {BLOCK_KEY: BLOCK, "items": {"sent_in_flight": 4}}}, {},
                                asks_batch_invariance=False)
    assert loaded["matched"]["status"] == "measured" and loaded["matched"]["level"]["in_flight"] == 4
    missing = load_floor_section({"control": {BLOCK_KEY: BLOCK, "items": {"sent_in_flight": 2}}}, {},
                                 asks_batch_invariance=False)
    assert missing["matched"]["status"] == "not measured"
    assert any("control at 4 in flight: top-1 75.00%" in line for line in floor_lines(section))


def test_the_section_is_added_only_when_measured_or_asked_and_a_failed_check_decides() -> None:
    plain: dict[str, Any] = {"verdict": "equivalent", "reasons": ["r"], "floor": {"status": "measured"}}
    with_load_floor(plain, {"control": {}, "candidate": {}}, {})
    assert BLOCK_KEY not in plain and plain["verdict"] == "equivalent"
    failed: dict[str, Any] = {"verdict": "equivalent", "reasons": ["r"], "floor": {}}
    with_load_floor(failed, {"control": {BLOCK_KEY: BLOCK}, "candidate": {BLOCK_KEY: BLOCK}}, {"batch_invariance": True})
    assert failed["verdict"] == "not equivalent" and failed["reasons"][0].startswith("batch invariance")
    unmeasured: dict[str, Any] = {"verdict": "equivalent", "reasons": ["r"], "floor": {}}
    with_load_floor(unmeasured, {"control": {}, "candidate": {}}, {"batch_invariance": True})
    assert unmeasured["verdict"] == "inconclusive" and unmeasured[BLOCK_KEY]["batch_invariance"]["status"] == "not measured"
    reported: dict[str, Any] = {"verdict": "not equivalent", "reasons": ["r"], "floor": {}}
    with_load_floor(reported, {"control": {BLOCK_KEY: BLOCK}}, {})
    assert reported["verdict"] == "not equivalent" and reported[BLOCK_KEY]["arms"]["control"]["status"] == "measured"


def test_the_section_matches_the_comparison_schema() -> None:
    import jsonschema

    from pytest_vllmqual.layout import COMPARISON_SCHEMA, load_schema

    schema = load_schema(COMPARISON_SCHEMA)["properties"]["equivalence"]["properties"][BLOCK_KEY]
    found = {"control": {BLOCK_KEY: BLOCK}, "candidate": "the candidate ran no equivalence probe"}
    for asked in (True, False):
        jsonschema.validate(load_floor_section(found, {"status": "measured"}, asks_batch_invariance=asked), schema)
