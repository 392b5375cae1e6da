"""The task layer from two sidecars: a block compared only on the same bank, not measured with the
reason otherwise, the family rule, the layer's verdict, and the line the terminal prints."""

from __future__ import annotations

from typing import Any

from support.equivalence_samples import items_block

from pytest_vllmqual.equivalence.paired import TaskSettings
from pytest_vllmqual.equivalence.tasks import Names, block_section, tasks_line, tasks_markdown, tasks_section

LARGE_EVEN = (500, 10, 10, 480)  # non-inferior at 3 points
COLLAPSE = (5, 25, 0, 20)  # inferior


def sidecars(items: tuple[dict[str, Any], dict[str, Any]] | None = None,
             replay: tuple[dict[str, Any], dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    control: dict[str, Any] = {"probe_sha256": "p" * 64}
    candidate: dict[str, Any] = {"probe_sha256": "p" * 64}
    for key, pair in (("items", items), ("tool_replay", replay)):
        if pair is not None:
            control[key], candidate[key] = pair
    return control, candidate


def block(section: dict[str, Any], key: str) -> dict[str, Any]:
    return next(b for b in section["blocks"] if b["block"] == key)


def test_the_item_bank_compared_on_the_same_hash_is_judged_per_family_and_overall() -> None:
    section = tasks_section(*sidecars(items_block({"math": LARGE_EVEN, "json": (40, 2, 3, 15)})), TaskSettings())
    items = block(section, "items")
    assert items["verdict"] == "non-inferior" and section["verdict"] == "non-inferior"
    assert [f["family"] for f in items["families"]] == ["json", "math"]
    assert items["overall"]["paired"] == 1060
    assert items["bank"]["sha256"] == "b" * 64
    # The family too small to be non-inferior is named, and reported only.
    assert any(r.startswith("family json: inconclusive") and r.endswith("compare.family_blocks is false)")
               for r in items["reasons"])
    replay = block(section, "tool_replay")
    assert replay["verdict"] == "not measured" and replay["carried"] is False
    assert replay["reasons"] == ["neither of the arms carries tool-call replay answers"]


def test_with_family_blocks_a_family_that_fails_blocks_the_bank() -> None:
    tables = {"math": LARGE_EVEN, "needle": COLLAPSE}
    reported = block(tasks_section(*sidecars(items_block(tables)), TaskSettings()), "items")
    blocking = block(tasks_section(*sidecars(items_block(tables)), TaskSettings(family_blocks=True)), "items")
    assert next(f for f in reported["families"] if f["family"] == "needle")["status"] == "inferior"
    assert reported["overall"]["status"] != "inferior"
    assert blocking["verdict"] == "inferior" and reported["verdict"] != "inferior"


def test_different_banks_are_not_measured_and_say_which_keys_differ() -> None:
    control, _ = items_block({"math": LARGE_EVEN})
    _, candidate = items_block({"math": LARGE_EVEN}, sha256="e" * 64, seed=8)
    section = tasks_section(*sidecars((control, candidate)), TaskSettings())
    items = block(section, "items")
    assert items["verdict"] == "not measured" and items["overall"] is None
    assert "the arms answered different item banks (SHA-256 bbbbbbbbbbbb… vs eeeeeeeeeeee…; they differ in seed)" \
        in items["reasons"][0]
    assert section["verdict"] == "not measured"


def test_the_same_bank_sent_differently_is_not_measured() -> None:
    """One case at a time against four at once (a bank without ``in_flight`` was sent one at a time)."""
    control, _ = items_block({"tool_replay": LARGE_EVEN})
    _, candidate = items_block({"tool_replay": LARGE_EVEN}, in_flight=4)
    replay = block(tasks_section(*sidecars(replay=(control, candidate)), TaskSettings()), "tool_replay")
    assert replay["verdict"] == "not measured" and replay["overall"] is None
    assert replay["reasons"] == ["the arms sent their tool-call replay cases differently (1 against 4 at once): a "
                                 "flip could be the batch's, not the change's; two arms compare only when sent the "
                                 "same way"]
    both_four = items_block({"tool_replay": LARGE_EVEN}, in_flight=4)
    assert block(tasks_section(*sidecars(replay=both_four), TaskSettings()), "tool_replay")["verdict"] == "non-inferior"


def test_a_block_one_arm_lacks_is_not_measured_and_keeps_the_layer_from_passing() -> None:
    control, candidate = sidecars(items_block({"math": LARGE_EVEN}), items_block({"tool_replay": LARGE_EVEN}))
    del candidate["tool_replay"]
    section = tasks_section(control, candidate, TaskSettings())
    replay = block(section, "tool_replay")
    assert replay["verdict"] == "not measured" and replay["carried"] is True
    assert replay["reasons"] == ["the candidate's sidecar has no tool-call replay answers"]
    assert block(section, "items")["verdict"] == "non-inferior"
    assert section["verdict"] == "inconclusive"


def test_an_inferior_block_makes_the_layer_inferior() -> None:
    section = tasks_section(*sidecars(items_block({"math": LARGE_EVEN}),
                                      items_block({"x": COLLAPSE}, family="tool_replay")), TaskSettings())
    assert block(section, "tool_replay")["verdict"] == "inferior"
    assert section["verdict"] == "inferior"


def test_an_arm_without_a_sidecar_says_why() -> None:
    control, _ = sidecars(items_block({"math": LARGE_EVEN}))
    section = tasks_section(control, "the candidate ran no equivalence probe", TaskSettings())
    assert block(section, "items")["reasons"] == ["the candidate ran no equivalence probe"]
    assert section["verdict"] == "not measured"


def test_unreadable_or_unpairable_answers_are_not_measured() -> None:
    control, candidate = items_block({"math": LARGE_EVEN})
    candidate["outcomes"].append(candidate["outcomes"][0])
    twice = block_section("items", "item bank", {"items": control}, {"items": candidate}, TaskSettings())
    assert twice["verdict"] == "not measured" and "answered item 'math-0' twice" in twice["reasons"][0]
    broken = block_section("items", "item bank", {"items": control}, {"items": {"bank": {"sha256": "b" * 64},
                                                                                 "outcomes": [{"family": "x"}]}},
                           TaskSettings())
    assert broken["verdict"] == "not measured" and "not readable" in broken["reasons"][0]


def test_the_sides_are_named_as_the_caller_names_them() -> None:
    control, _ = sidecars(items_block({"math": LARGE_EVEN}))
    names = Names("the reference run", "this run", "the two runs")
    section = tasks_section(control, {"probe_sha256": "p" * 64}, TaskSettings(), names)
    assert block(section, "items")["reasons"] == ["this run's sidecar has no item bank answers"]
    assert block(section, "tool_replay")["reasons"] == ["neither of the two runs carries tool-call replay answers"]


def test_the_line_says_the_margin_the_difference_the_flips_and_what_could_be_detected() -> None:
    section = tasks_section(*sidecars(items_block({"math": LARGE_EVEN})), TaskSettings())
    line = tasks_line(section)
    overall = block(section, "items")["overall"]
    detectable = overall["detectable_difference"]["points"]
    assert line.startswith("tasks: non-inferior at a 3-point margin: item bank non-inferior: candidate − control "
                           "+0.0 points [")
    assert "on 1000 paired items (b 10, c 10, exact McNemar p 1;" in line
    assert f"smallest detectable difference {detectable:.1f} points" in line
    assert "tool-call replay not measured: neither of the arms carries tool-call replay answers" in line
    table = tasks_markdown(section)
    assert table[0] == line and len(table) == 6  # line, blank, header, rule, math, overall
    assert table[-1].startswith("| item bank | overall | 1000 |")
