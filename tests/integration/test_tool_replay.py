"""The tool-call replay against the real fixture model (the shared tiny-cpu server): the recipe's
bank of 40 cases (CI's reduced profile; the default is 100) is answered, the published sidecar carries the ``tool_replay`` block under the
bank's hash, and the accuracy is the one measured by hand: every case right (400/400 of a
400-case bank, 2026-12-05), because every variant is one the model was trained on. A replay that
right on both arms cannot tell them apart, and the block says so (``informative: false``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.recipes import tiny
from support.shared_server import SharedTinyServer

from pytest_vllmqual import GateRecord, GateRecorder, QualClient, ServerHandle
from pytest_vllmqual.equivalence.outcomes import ItemOutcome
from pytest_vllmqual.equivalence.sidecar import PRIVATE_NAME, load, publish
from pytest_vllmqual.gates.checks import recipe_tool_fixtures
from pytest_vllmqual.gates.tool_replay import replay_bank, tool_replay_gate

pytestmark = [pytest.mark.real_vllm]


def test_the_fixture_model_answers_every_replay_case(shared_tiny_server: SharedTinyServer, tmp_path: Path) -> None:
    recipe = tiny()
    fixtures = recipe_tool_fixtures(recipe)
    handle = ServerHandle(base_url=shared_tiny_server.base_url, served_model_name=shared_tiny_server.served_model,
                          launcher_kind="external", direct_only=True)
    gate = GateRecorder(GateRecord(nodeid="t::tool_replay", gate="tool_replay", title="Tool-call replay"),
                        tmp_path / "private")
    with QualClient(handle, timeout_s=120) as client:
        verdict = tool_replay_gate(client, recipe, gate, fixtures)
    assert verdict.passed, verdict.failure
    reference = publish(tmp_path / "private" / PRIVATE_NAME, {}, tmp_path / "tiny-cpu-x.json")
    sidecar, why = load(reference, tmp_path)
    assert why is None and sidecar is not None
    block = sidecar["tool_replay"]
    assert block["bank"]["sha256"] == replay_bank(recipe, fixtures).sha256 and block["bank"]["count"] == len(replay_bank(recipe, fixtures).cases)
    assert len(block["bank"]["chat_template_sha256"]) == 64
    outcomes = [ItemOutcome.from_dict(o) for o in block["outcomes"]]
    assert len(outcomes) == block["bank"]["count"] == 40 and all(o.correct and o.parsed and not o.hit_max_tokens for o in outcomes), \
        [o.item_id for o in outcomes if not o.correct]
    assert block["accuracy"] == 1.0 and block["informative"] is False
    assert "outside the useful range" in block["informative_reason"]
    measured = gate.record.measurements
    print(f"tool replay: {measured['correct']}/{measured['count']} in {measured['replay_seconds']:.1f} s "
          f"by shape {measured['by_shape']}")
