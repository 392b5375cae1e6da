"""The tool-call replay against the real fixture model, in the real tiny-cpu run (``tiny_run``, the one
managed run several tests read, so no replay of its own on another server): the recipe's bank of
40 cases (CI's reduced profile; the default is 100) is answered, the published sidecar beside the
report carries the ``tool_replay`` block under the bank's hash (the cases asked four at a time, the
outcomes in the bank's order), and the accuracy is the one measured
by hand: every case right (400/400 of a 400-case bank, 2026-12-05), because every variant is one the
model was trained on. A replay that right on both arms cannot tell them apart, and the block says
so (``informative: false``)."""

from __future__ import annotations

import pytest
from support.recipes import tiny
from support.tiny_run import SessionRun

from pytest_vllmqual.equivalence.outcomes import ItemOutcome
from pytest_vllmqual.equivalence.sidecar import load
from pytest_vllmqual.gates.checks import recipe_tool_fixtures
from pytest_vllmqual.gates.tool_replay import replay_bank

pytestmark = [pytest.mark.real_vllm]


def test_the_fixture_model_answers_every_replay_case(tiny_run: SessionRun) -> None:
    recipe = tiny()
    fixtures = recipe_tool_fixtures(recipe)
    gate = tiny_run.gate("tool_replay")
    assert gate["outcome"] == "passed", gate
    sidecar, why = load(tiny_run.report["equivalence_probe"], tiny_run.report_path.parent)
    assert why is None and sidecar is not None
    block = sidecar["tool_replay"]
    assert block["bank"]["sha256"] == replay_bank(recipe, fixtures).sha256 and block["bank"]["count"] == len(replay_bank(recipe, fixtures).cases)
    assert len(block["bank"]["chat_template_sha256"]) == 64
    outcomes = [ItemOutcome.from_dict(o) for o in block["outcomes"]]
    assert len(outcomes) == block["bank"]["count"] == 40 and all(o.correct and o.parsed and not o.hit_max_tokens for o in outcomes), \
        [o.item_id for o in outcomes if not o.correct]
    assert block["bank"]["in_flight"] == recipe.gate("tool_replay")["in_flight"] == 4  # four cases at once
    assert [o.item_id for o in outcomes] == [case.case_id for case in replay_bank(recipe, fixtures).cases]
    assert block["accuracy"] == 1.0 and block["informative"] is False
    assert "outside the useful range" in block["informative_reason"]
    measured = gate["measurements"]
    print(f"tool replay: {measured.get('correct')}/{measured.get('count')} in {measured.get('replay_seconds')} s "
          f"by shape {measured.get('by_shape')}")
