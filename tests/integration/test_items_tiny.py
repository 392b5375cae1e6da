"""The item bank in the real tiny-cpu run (``tiny_run``, the one managed run several tests read, so no
extra server): CI's reduced profile (60 items in 2 families) answered by the fixture model, the gate
passed although the model scores near 0 (it measures, it does not judge one arm), every answer in
the sidecar beside the report, and the stored answers judged again offline give the same outcomes."""

from __future__ import annotations

import gzip
import json

import pytest
from support.tiny_run import SessionRun

from pytest_vllmqual.equivalence.items import rejudge
from pytest_vllmqual.equivalence.outcomes import ItemOutcome

pytestmark = [pytest.mark.real_vllm]


def test_the_item_bank_ran_on_the_fixture_model_and_its_answers_are_in_the_sidecar(tiny_run: SessionRun) -> None:
    gate = tiny_run.gate("items")
    assert gate["outcome"] == "passed", gate
    families = gate["measurements"]["families"]
    assert [row["family"] for row in families] == ["arithmetic", "recall"]
    assert sum(row["items"] for row in families) == gate["measurements"]["items"] == 60
    for row in families:
        if row["measured"] and row["accuracy_pct"] <= 10:
            assert "cannot tell arms apart for this model" in row["note"], row
    reference = tiny_run.report["equivalence_probe"]
    assert reference["items_bank_sha256"] == gate["measurements"]["bank_sha256"] and reference["items"] == 60
    body = json.loads(gzip.decompress((tiny_run.report_path.parent / reference["file"]).read_bytes()))
    items = body["items"]
    assert items["bank"]["chat_template_sha256"] and items["bank"]["max_tokens"] == 32
    outcomes = [ItemOutcome.from_dict(o) for o in items["outcomes"]]
    assert len(outcomes) == 60 and rejudge(items["answers"]) == outcomes
