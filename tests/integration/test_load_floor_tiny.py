"""The floor under load in the real tiny-cpu run (``tiny_run``, the one managed run several tests
read, so no extra server): CI's profile (one level, 4 in flight) answered by the fixture model alone
and while the load gate's prompts kept 4 requests in flight, every answer in the sidecar beside the
report, and the floor recomputed offline from the sidecar equal to what the gate recorded."""

from __future__ import annotations

import gzip
import json

import pytest
from support.tiny_run import SessionRun

from pytest_vllmqual.equivalence.load_floor import floor_levels

pytestmark = [pytest.mark.real_vllm]


def test_the_floor_was_measured_alone_and_at_one_level_and_kept_in_the_sidecar(tiny_run: SessionRun) -> None:
    gate = tiny_run.gate("load_floor")
    assert gate["outcome"] == "passed", gate
    levels = gate["measurements"]["levels"]
    assert [level["in_flight"] for level in levels] == [4]
    level = levels[0]
    assert level["items"] == 16 and level["chunks"] >= 2 and level["greedy_prompts"] == 8
    assert level["load_requests"] > 0 and level["load_failed"] == 0
    assert level["sends_at_full_level"] > 0, "some measured request met the full level in flight"
    reference = tiny_run.report["equivalence_probe"]
    body = json.loads(gzip.decompress((tiny_run.report_path.parent / reference["file"]).read_bytes()))
    block = body["load_floor"]
    assert [p["in_flight"] for p in block["passes"]] == [0, 4]
    again = floor_levels(block)[0]
    assert again["items"]["changed_answers"] == level["changed_answers"]
    assert again["answers_identical"] == level["answers_identical"]
