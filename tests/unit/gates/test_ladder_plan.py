"""Which rungs the context ladder climbs, and that it never passes on nothing measured: the
recipe's rungs; rungs derived from max_model_len for a managed run whose recipe sets none; and
against someone's running endpoint no large prompt the recipe did not ask for (the gate is
skipped as not measured)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
from support.recipes import tiny

from pytest_vllmqual import GateRecord, GateRecorder, QualClient, Recipe, ServerHandle
from pytest_vllmqual.gates.ladder import DERIVED_RUNGS, LadderResult, ladder_gate, ladder_plan, rung_targets
from pytest_vllmqual.gates.registry import proves
from pytest_vllmqual.records import RungRecord, RungSource


def without_rungs(recipe: Recipe) -> Recipe:
    capacity = {k: v for k, v in recipe.gate("capacity").items() if k != "rungs"}
    return dataclasses.replace(recipe, gates={**recipe.gates, "capacity": capacity})


def test_the_recipes_rungs_are_climbed_as_written() -> None:
    plan = ladder_plan(tiny(), direct_only=True)
    assert plan.source is RungSource.RECIPE and plan.not_measured is None
    assert [t for t, _ in rung_targets(tiny(), plan.rungs)] == [4096, 8192, 16384, 32440]


def test_a_managed_run_without_rungs_derives_them_from_max_model_len() -> None:
    plan = ladder_plan(without_rungs(tiny()), direct_only=False)
    assert plan.source is RungSource.MAX_MODEL_LEN and plan.rungs == DERIVED_RUNGS
    targets = rung_targets(without_rungs(tiny()), plan.rungs)
    assert targets == [(4096, "0.125 x max_model_len"), (8192, "0.25 x max_model_len"),
                       (16384, "0.5 x max_model_len"), (32440, "0.99 x max_model_len")]
    assert rung_targets(without_rungs(tiny())) == [], "without rungs given, only the recipe's are read"


def test_an_endpoint_this_run_did_not_start_gets_no_prompt_it_did_not_ask_for(tmp_path: Path) -> None:
    def no_request(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request may be sent: {request.url.path}")

    client = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external",
                                     direct_only=True), timeout_s=5)
    client._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(no_request))
    recorder = GateRecorder(GateRecord(nodeid="t::ladder", gate="ladder", title="Context ladder"), tmp_path)
    verdict = ladder_gate(client, without_rungs(tiny()), recorder, progress=lambda line: None)
    assert not verdict.passed and verdict.failure is None
    assert verdict.skip_reason == ("not measured: recipe tiny-cpu sets no gates.capacity.rungs, and against a server "
                                   "this run did not start the ladder sends only the prompts a recipe asks for "
                                   "(none were sent)")
    assert recorder.record.summary == "not measured" and "ladder" not in recorder.record.measurements


def test_a_ladder_with_only_the_over_length_probe_does_not_pass() -> None:
    rejection = RungRecord(index=0, target=32769, target_label="max_model_len + 1", expected_rejection=True,
                           status_code=400, ok=True, prompt_tokens=32769, post_probe_smoke="passed",
                           health_after="healthy", error="This model's maximum context length is 32768 tokens.")
    problems = LadderResult(rungs=[rejection]).problems(None)
    assert problems == ["no ladder rung was sent: a ladder passes only on a rung it measured"]


def test_a_ladder_on_derived_rungs_says_so() -> None:
    gate = {"gate": "ladder", "outcome": "passed",
            "measurements": {"largest_prompt_tokens": 32440, "rungs_from": "max_model_len"}}
    assert proves(gate) == ("every ladder rung was exact and answered, the largest at 32,440 API-reported prompt "
                            "tokens, each followed by a passing smoke (rungs derived from max_model_len: the recipe "
                            "sets none)")
    gate["measurements"]["rungs_from"] = "recipe"
    assert proves(gate) is not None and "derived" not in str(proves(gate))
