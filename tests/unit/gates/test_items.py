"""The item bank as a gate, against a mock server: every item asked alone and greedy, the answers kept
in the private folder for the sidecar, accuracy and the unparsed and cut-off shares per family, and a
bank with no measured family skipped as not measured. Then the sidecar: the items go under ``items``,
scrubbed, beside the probe's answers or alone."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import httpx
from support.recipes import tiny

from pytest_vllmqual import GateRecord, GateRecorder, QualClient, ServerHandle
from pytest_vllmqual.equivalence import sidecar
from pytest_vllmqual.equivalence.comparison import sidecar_arm
from pytest_vllmqual.equivalence.items.bank import BankSettings, build_bank
from pytest_vllmqual.gates.items import items_gate
from pytest_vllmqual.records import FailureKind

SETTINGS = {"families": ["arithmetic", "recall"], "count": 4}


def client(answer: Any, sent: list[dict[str, Any]]) -> QualClient:
    """A server whose chat answer is ``answer(body)`` → (text, finish reason); /tokenize renders anything."""
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1, 2, len(json.dumps(body))]})
        sent.append(body)
        text, finish = answer(body)
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": text},
                                                      "finish_reason": finish}],
                                         "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}})

    qual = QualClient(ServerHandle(base_url="http://test", served_model_name="m", launcher_kind="external",
                                   direct_only=True), timeout_s=5)
    qual._http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handle))
    return qual


def recipe(settings: dict[str, Any] = SETTINGS) -> Any:
    base = tiny()
    return dataclasses.replace(base, gates={**base.gates, "items": settings})


def recorder(tmp_path: Path) -> GateRecorder:
    return GateRecorder(GateRecord(nodeid="t::items", gate="items", title="Item bank"), tmp_path)


def right_on_arithmetic(body: dict[str, Any]) -> tuple[str, str]:
    prompt = body["messages"][0]["content"]
    if prompt.startswith("What is "):
        a, op, b = prompt.removeprefix("What is ").split("?")[0].split()
        value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        return f"{a} {op} {b} = {value}", "stop"
    return "I do not remember.", "length"


def test_every_item_is_asked_greedy_and_alone_and_kept_for_the_sidecar(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    gate = recorder(tmp_path)
    verdict = items_gate(client(right_on_arithmetic, sent), recipe(), gate)
    assert verdict.passed, verdict
    assert len(sent) == 8 and all(b["temperature"] == 0 and b["max_tokens"] == BankSettings().max_tokens == 64 and b["stop"] == [] for b in sent)
    body = json.loads((tmp_path / sidecar.BLOCKS_DIR / "items.json").read_text())
    expected = build_bank(BankSettings.from_recipe(SETTINGS, 32768))
    assert body["bank"]["items_sha256"] == expected.items_sha256() and body["bank"]["count"] == 8
    assert body["bank"]["sha256"] == expected.sha256(body["bank"]["chat_template_sha256"])
    assert [o["correct"] for o in body["outcomes"]] == [True] * 4 + [False] * 4
    assert body["answers"][4]["text"] == "I do not remember." and body["answers"][4]["finish_reason"] == "length"
    families = {row["family"]: row for row in gate.record.measurements["families"]}
    assert families["arithmetic"]["accuracy_pct"] == 100.0 and families["arithmetic"]["measured"]
    assert families["recall"]["reason"] == ("not measured: 100.0% of its answers could not be parsed (cap 50%); "
                                            "100.0% of its answers ended at max_tokens (cap 50%)")
    assert gate.record.summary.startswith("8 items in ")
    assert "arithmetic 100.0% (4/4; unparsed 0.0%, at max_tokens 0.0%)" in gate.record.summary


def test_a_bank_with_no_measured_family_is_not_measured(tmp_path: Path) -> None:
    verdict = items_gate(client(lambda body: ("", "length"), []), recipe(), recorder(tmp_path))
    assert verdict.failure is None and verdict.skip_reason is not None
    assert verdict.skip_reason.startswith("not measured: no family of the item bank is measured: arithmetic "
                                          "not measured: 100.0% of its answers could not be parsed"), verdict.skip_reason


def test_near_zero_accuracy_passes_and_says_the_family_cannot_tell_arms_apart(tmp_path: Path) -> None:
    gate = recorder(tmp_path)
    verdict = items_gate(client(lambda body: ("100000", "stop"), []), recipe(), gate)
    assert verdict.passed
    assert "(near 0: cannot tell arms apart for this model)" in gate.record.summary
    assert "cannot tell arms apart" in gate.record.measurements["families"][0]["note"]


def test_a_bad_operator_file_is_the_recipe_s_failure(tmp_path: Path) -> None:
    verdict = items_gate(client(lambda body: ("1", "stop"), []), recipe({"operator_file": "/nonexistent.jsonl"}),
                         recorder(tmp_path))
    assert verdict.kind is FailureKind.CONFIG and verdict.failure is not None
    assert verdict.failure.startswith("gates.items: ")


def _report() -> dict[str, Any]:
    return {"identity": {"model_files": {"content": "sha256:" + "a" * 64}}, "engine": {}}


def test_the_sidecar_carries_the_items_scrubbed_beside_the_probe_or_alone(tmp_path: Path) -> None:
    private = tmp_path / "private"
    sidecar.write_block(private, "items", {"bank": {"sha256": "b" * 64, "count": 1},
                                           "answers": [{"item_id": "x", "text": "ask secret-host"}]})
    probe = private / sidecar.PRIVATE_NAME
    reference = sidecar.publish(probe, sidecar_arm(_report()), tmp_path / "r.json",
                                scrub=lambda obj: json.loads(json.dumps(obj).replace("secret-host", "<host>")))
    assert reference["items_bank_sha256"] == "b" * 64 and reference["items"] == 1
    assert reference["probe_sha256"] is None
    loaded, why = sidecar.load(reference, tmp_path)
    assert why is None and loaded is not None
    assert loaded["items"]["answers"][0]["text"] == "ask <host>"
    assert "chunks" not in loaded
    probe.write_text(json.dumps({"probe_sha256": "p" * 64, "top_k": 20, "chunks": []}))
    both = sidecar.publish(probe, sidecar_arm(_report()), tmp_path / "r.json")
    assert both["probe_sha256"] == "p" * 64 and both["items"] == 1
    body = json.loads(gzip.decompress((tmp_path / both["file"]).read_bytes()))
    assert body["items"]["bank"]["sha256"] == "b" * 64 and body["top_k"] == 20
