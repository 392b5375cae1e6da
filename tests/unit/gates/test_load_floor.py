"""The load_floor gate as a function against an in-process server (httpx.MockTransport) whose answers
change when other requests share its batch: the items are asked alone and again at each level while
the load gate's exact prompts stay in flight, the flips are counted, every answer goes into the
sidecar block, and a recipe without load levels is not applicable."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from support.word_tokens import WordTokens

from pytest_vllmqual import GateRecord, GateRecorder, QualClient, Recipe, ServerHandle
from pytest_vllmqual.equivalence import sidecar
from pytest_vllmqual.equivalence.load_floor import floor_levels
from pytest_vllmqual.gates.load_floor import floor_items, load_floor_gate


class BatchedServer(WordTokens):
    """/tokenize counts words; a streamed chat (the load) takes a few milliseconds; a plain chat (an
    item) answers the right number alone and one more when ``moves_at`` or more streams are in flight.

    Once the load has begun, an item waits (up to ``LOAD_WAIT_S``) for ``moves_at`` streams to be in
    flight: the gate keeps the load going while it asks, but a starved test process can send an item
    in the gap between one load request and the next, where a real server's batch would still hold."""

    LOAD_WAIT_S = 2.0

    def __init__(self, moves_at: int) -> None:
        self.moves_at = moves_at
        self.streams = 0
        self.load_began = False
        super().__init__()
        self.in_flight = threading.Condition(self.lock)
        self.items_seen_with: list[int] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(404)
        body = json.loads(request.content or b"{}")
        if request.url.path == "/detokenize":
            return httpx.Response(200, json={"prompt": " ".join(self.words[i] for i in body["tokens"])})
        if request.url.path == "/tokenize":
            if "messages" in body:
                count = sum(3 + len(str(m.get("content") or "").split()) for m in body["messages"]) + 2
                return httpx.Response(200, json={"count": count, "max_model_len": 4096})
            tokens = self.ids(body["prompt"])
            return httpx.Response(200, json={"count": len(tokens), "tokens": tokens, "max_model_len": 4096})
        if body.get("stream"):
            with self.in_flight:
                self.streams += 1
                self.load_began = True
                self.in_flight.notify_all()
            time.sleep(0.05)
            with self.lock:
                self.streams -= 1
            chunks = [{"choices": [{"index": 0, "delta": {"content": "w "}, "finish_reason": None}]}
                      for _ in range(body["max_tokens"])]
            chunks.append({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": body["max_tokens"]}})
            text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx.Response(200, stream=httpx.ByteStream(text.encode()),
                                  headers={"content-type": "text/event-stream"})
        with self.in_flight:
            if self.load_began:
                self.in_flight.wait_for(lambda: self.streams >= self.moves_at, timeout=self.LOAD_WAIT_S)
            busy = self.streams
        self.items_seen_with.append(busy)
        prompt = body["messages"][0]["content"]
        a, op, b = prompt.removeprefix("What is ").split("?")[0].split()
        value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op] + (busy >= self.moves_at)
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": str(value)},
                                                      "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}})


def client_of(server: BatchedServer) -> QualClient:
    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external"),
                      timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(server))
    return qual


def with_floor(recipe: Recipe, **floor: Any) -> Recipe:
    gates = {**recipe.gates, "items": {"families": ["arithmetic"], "count": 6},
             "load": {"levels": [1, 3], "prompt_tokens": 40, "output_tokens": 3, "e2e_s": 30},
             "load_floor": {"probe": False, "items_per_family": 4, **floor}}
    return dataclasses.replace(recipe, gates=gates)


def recorder_in(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::load_floor", gate="load_floor", title="Floor under load"), tmp_path)


def test_answers_alone_and_at_each_level_are_kept_and_the_flips_counted(tiny: Recipe, tmp_path: Path) -> None:
    server = BatchedServer(moves_at=1)
    gate = recorder_in(tmp_path)
    verdict = load_floor_gate(client_of(server), with_floor(tiny), gate, [], progress=lambda _line: None)
    assert verdict.passed, verdict
    block = json.loads((tmp_path / sidecar.BLOCKS_DIR / "load_floor.json").read_text())
    assert [p["in_flight"] for p in block["passes"]] == [0, 1, 3]
    assert block["items"]["item_ids"] == [f"arithmetic-{i:03d}" for i in range(4)] and block["probe"] is None
    assert block["passes"][0]["answers"][0]["text"] == "4", "alone, the right answer"
    for level in floor_levels(block):
        assert level["items"]["b"] == level["items"]["changed_answers"] > 0, "right alone, wrong beside a load request"
        assert level["items"]["c"] == 0 and not level["answers_identical"]
        assert level["load"]["load_requests"] >= level["in_flight"] and level["load"]["sends"] == 4
    measured = gate.record.measurements
    assert measured["answers_identical_at_every_level"] is False and len(measured["levels"]) == 2
    row = measured["levels"][1]
    assert row["in_flight"] == 3 and row["b"] > 0 and row["top1_agreement"] is None and row["sends"] == 4
    assert all(not isinstance(value, dict) for value in row.values()), "the report keeps flat rows"
    assert "1 in flight: items " in gate.record.summary and "3 in flight: items " in gate.record.summary


def test_the_items_are_the_first_of_each_family_of_the_recipes_own_bank(tiny: Recipe) -> None:
    recipe = dataclasses.replace(tiny, gates={**tiny.gates, "items": {"families": ["arithmetic", "needle", "recall"],
                                                                      "count": 5, "needle_tokens": [64]},
                                              "load": {"levels": [2], "e2e_s": 30}})
    from pytest_vllmqual.equivalence.load_floor import FloorSettings
    items, _ = floor_items(recipe, FloorSettings.from_recipe({**recipe.gates, "load_floor": {"items_per_family": 2}}))
    assert [i.item_id for i in items] == ["arithmetic-000", "arithmetic-001", "recall-000", "recall-001"], \
        "the needle family is asked only when named"


def test_a_recipe_without_load_levels_is_not_applicable(tiny: Recipe, tmp_path: Path) -> None:
    recipe = dataclasses.replace(tiny, gates={k: v for k, v in tiny.gates.items() if k not in ("load", "load_floor")})
    verdict = load_floor_gate(client_of(BatchedServer(1)), recipe, recorder_in(tmp_path), [], progress=lambda _l: None)
    assert verdict.skip_reason is not None and "sets no gates.load levels" in verdict.skip_reason


def items_recorder_in(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::items", gate="items", title="Item bank"), tmp_path)


def test_answers_the_item_bank_recorded_alone_are_the_alone_pass(tiny: Recipe, tmp_path: Path) -> None:
    """The bank asked these items alone earlier in the run: the gate takes those answers as its alone
    pass instead of asking them again, says so, and still counts the flips at each level."""
    from pytest_vllmqual.gates.items import items_gate

    server, recipe = BatchedServer(moves_at=1), with_floor(tiny)
    assert items_gate(client_of(server), recipe, items_recorder_in(tmp_path)).passed
    asked_by_bank = len(server.items_seen_with)
    gate = recorder_in(tmp_path)
    assert load_floor_gate(client_of(server), recipe, gate, [], progress=lambda _line: None).passed
    assert len(server.items_seen_with) - asked_by_bank == 2 * 4, "four items at each of the two levels, none alone"
    block = json.loads((tmp_path / sidecar.BLOCKS_DIR / "load_floor.json").read_text())
    alone = block["passes"][0]
    assert alone["recorded_by"] == ["equivalence", "items"] and alone["answers"][0]["text"] == "4"
    assert [a["item_id"] for a in alone["answers"]] == block["items"]["item_ids"]
    assert all(level["items"]["b"] > 0 for level in floor_levels(block))
    assert gate.record.measurements["alone_answers"] == "recorded by the probe and the item bank of this run"


def test_a_bank_of_other_items_is_asked_again_alone(tiny: Recipe, tmp_path: Path) -> None:
    from pytest_vllmqual.gates.items import items_gate

    server = BatchedServer(moves_at=1)
    other = dataclasses.replace(tiny, gates={**with_floor(tiny).gates, "items": {"families": ["arithmetic"], "count": 5}})
    assert items_gate(client_of(server), other, items_recorder_in(tmp_path)).passed
    asked_by_bank = len(server.items_seen_with)
    gate = recorder_in(tmp_path)
    assert load_floor_gate(client_of(server), with_floor(tiny), gate, [], progress=lambda _line: None).passed
    assert len(server.items_seen_with) - asked_by_bank == 3 * 4, "alone again, then at each level"
    assert gate.record.measurements["alone_answers"] == "asked by this gate"
