"""The comparison's task layer on synthetic sidecars (no server): the item bank and the tool replay
that both arms' sidecars carry are judged in ``equivalence.tasks``, schema-valid, in the markdown
the CLI prints, measured even when the token figures are not (another checkpoint), and in a drift
check with that run's recipe settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import UNIT_DATA
from support.equivalence_samples import PIN, attach_probe, items_block, probe_body

from pytest_vllmqual.ab.compare import compare_reports, render_markdown
from pytest_vllmqual.ab.drift import drift_section, load_reference
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.report.public import validate_report

REPORTS = UNIT_DATA / "reference_reports"
EVEN = (500, 10, 10, 480)


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REPORTS / name).read_text())
    return data


def with_items(body: dict[str, Any], items: dict[str, Any] | None = None,
               replay: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**body, **({"items": items} if items is not None else {}),
            **({"tool_replay": replay} if replay is not None else {})}


def compare(tmp_path: Path, control_body: dict[str, Any], candidate_body: dict[str, Any], *,
            candidate_pin: str = PIN, compare_block: dict[str, Any] | None = None) -> dict[str, Any]:
    control, candidate = _load("control-8192.json"), _load("candidate-4096.json")
    if compare_block is not None:
        control["recipe"]["content"].setdefault("compare", {}).update(compare_block)
    attach_probe(control, tmp_path, "control", control_body)
    attach_probe(candidate, tmp_path, "candidate", candidate_body, pin=candidate_pin)
    return compare_reports(control, candidate, sanitizer=Sanitizer(),
                           folders={"control": tmp_path, "candidate": tmp_path})


def test_the_item_bank_and_the_tool_replay_are_judged_in_the_comparison(tmp_path: Path) -> None:
    items = items_block({"arithmetic": EVEN, "recall": (300, 4, 6, 200)})
    replay = items_block({"cases": (60, 2, 1, 57)}, family="tool_replay", name="tool-replay", sha256="d" * 64)
    result = compare(tmp_path, with_items(probe_body(), items[0], replay[0]),
                     with_items(probe_body(), items[1], replay[1]))
    tasks = result["equivalence"]["tasks"]  # compare_reports validated the record against its schema
    assert tasks["settings"]["non_inferiority_margin_points"] == 3.0
    blocks = {b["block"]: b for b in tasks["blocks"]}
    assert blocks["items"]["verdict"] == "non-inferior"
    assert [f["family"] for f in blocks["items"]["families"]] == ["arithmetic", "recall"]
    assert blocks["tool_replay"]["overall"]["paired"] == 120
    assert blocks["tool_replay"]["verdict"] == "inconclusive"  # 120 cases cannot show 3 points
    assert tasks["verdict"] == "inconclusive"
    markdown = render_markdown(result)
    assert "### Tasks: does the change matter?" in markdown
    assert "| item bank | arithmetic | 1000 |" in markdown
    assert "tasks: inconclusive at a 3-point margin: item bank non-inferior" in markdown


def test_tasks_are_measured_across_checkpoints_where_the_token_figures_are_not(tmp_path: Path) -> None:
    items = items_block({"arithmetic": EVEN})
    result = compare(tmp_path, with_items(probe_body(), items[0]), with_items(probe_body(), items[1]),
                     candidate_pin="cd" * 32)
    section = result["equivalence"]
    assert section["verdict"] == "not measurable" and "checkpoint pin" in section["reasons"][0]
    assert section["tasks"]["verdict"] == "non-inferior"


def test_no_scored_items_in_either_sidecar_is_not_measured(tmp_path: Path) -> None:
    tasks = compare(tmp_path, probe_body(), probe_body())["equivalence"]["tasks"]
    assert tasks["verdict"] == "not measured"
    assert [b["carried"] for b in tasks["blocks"]] == [False, False]


def test_the_margin_and_the_family_rule_come_from_the_control_recipe(tmp_path: Path) -> None:
    items = items_block({"arithmetic": EVEN, "needle": (5, 25, 0, 20)})
    body = (with_items(probe_body(), items[0]), with_items(probe_body(), items[1]))
    reported = compare(tmp_path / "a", *body)["equivalence"]["tasks"]
    blocking = compare(tmp_path / "b", *body, compare_block={"family_blocks": True, "non_inferiority_margin_points": 5})
    tasks = blocking["equivalence"]["tasks"]
    assert reported["verdict"] != "inferior"
    assert tasks["verdict"] == "inferior" and tasks["settings"]["non_inferiority_margin_points"] == 5.0
    assert tasks["settings"]["source"] == "the control recipe's compare and the defaults"


@pytest.mark.parametrize("bank", [{"sha256": "e" * 64}, {"sha256": "e" * 64, "version": "2"}])
def test_a_candidate_on_another_bank_is_not_measured(tmp_path: Path, bank: dict[str, Any]) -> None:
    control, _ = items_block({"arithmetic": EVEN})
    _, candidate = items_block({"arithmetic": EVEN}, **bank)
    tasks = compare(tmp_path, with_items(probe_body(), control), with_items(probe_body(), candidate))
    items = tasks["equivalence"]["tasks"]["blocks"][0]
    assert items["verdict"] == "not measured"
    assert items["reasons"][0].startswith("the arms answered different item banks")


def test_a_drift_check_judges_the_items_with_this_runs_recipe(tmp_path: Path) -> None:
    items = items_block({"arithmetic": EVEN})
    earlier = attach_probe(_load("control-8192.json"), tmp_path / "then", "earlier", with_items(probe_body(), items[0]))
    (tmp_path / "then" / "earlier.json").write_text(json.dumps(earlier))
    report = _load("control-8192.json")
    report["recipe"]["content"].setdefault("compare", {})["non_inferiority_margin_points"] = 4
    attach_probe(report, tmp_path / "now", "now", with_items(probe_body(), items[1]))
    section = drift_section(load_reference(tmp_path / "then" / "earlier.json"), report, tmp_path / "now")
    tasks = section["tasks"]
    assert tasks["verdict"] == "non-inferior"
    assert tasks["settings"]["source"] == "this run's recipe's compare and the defaults"
    assert tasks["blocks"][1]["reasons"] == ["neither of the two runs carries tool-call replay answers"]
    report["drift"] = section
    validate_report(report)
