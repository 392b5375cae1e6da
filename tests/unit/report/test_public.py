"""Private artifacts, the allowlisted public report, its schema, the atomic writer, verify.

The run data comes from tests/support/report_samples.py: the reference campaign's control arm
(TP=2, a retained HTTP 400, an expected max_model_len+1 rejection), optionally with a canary of
every private kind planted in every free-text field.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from support.report_samples import (
    CANARIES,
    CANARY_API_KEY,
    CANARY_ENV,
    blank_sanitizer,
    reference_control_run,
)

from pytest_vllmqual.errors import ArtifactError, ReportError
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import TeardownResult
from pytest_vllmqual.layout import REPORT_SCHEMA, load_schema
from pytest_vllmqual.privacy.sanitize import KINDS, Sanitizer
from pytest_vllmqual.records import Attempt, GateRecord
from pytest_vllmqual.report.artifacts import ArtifactStore
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.html_page import render_html
from pytest_vllmqual.report.public import (
    SCHEMA_ID,
    build_public_report,
    load_report,
    resanitize,
    validation_errors,
    verify_report,
    write_report_atomic,
)


def canary_sanitizer() -> Sanitizer:
    return Sanitizer([CANARY_API_KEY], environ=CANARY_ENV, hostname=CANARIES["hostname"], username=CANARIES["user"])


@pytest.fixture
def private_dir(tmp_path: Path) -> Path:
    return tmp_path / "private" / "run-1"


@pytest.fixture
def report(private_dir: Path) -> dict[str, Any]:
    run = reference_control_run(private_dir)
    return with_decision(build_public_report(run, sanitizer=blank_sanitizer()))


# -- ArtifactStore --------------------------------------------------------------------------------


def test_artifact_entries_hash_the_closed_files_with_relative_names(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "p")
    recorder = GateRecorder(GateRecord(nodeid="t::smoke", gate="smoke"), tmp_path / "p")
    recorder.record_attempt(Attempt(kind="chat", label="smoke", ok=True), b'{"a": 1}', b"ok")
    with open(tmp_path / "p" / "server.log", "ab") as handle:  # a launcher appends its log, then closes it
        handle.write(b"line 1\n")
        handle.write(b"line 2\n")
    entries = {e["name"]: e for e in store.entries()}
    assert list(entries) == ["gates/smoke/001-smoke.request.json", "gates/smoke/001-smoke.response.txt", "server.log"]
    assert entries["gates/smoke/001-smoke.request.json"] == {
        "name": "gates/smoke/001-smoke.request.json", "size": 8, "sha256": hashlib.sha256(b'{"a": 1}').hexdigest()}
    assert entries["server.log"]["sha256"] == hashlib.sha256(b"line 1\nline 2\n").hexdigest()
    assert entries["server.log"]["size"] == 14


def test_bookkeeping_files_are_not_artifacts(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    (tmp_path / "server.log").write_text("x")
    (tmp_path / "traffic.lock").write_text("")
    (tmp_path / ".report.json.abc.tmp").write_text("partial")
    (tmp_path / ".hidden").write_text("h")
    assert [e["name"] for e in store.entries()] == ["server.log"]


@pytest.mark.parametrize(("gate_name", "label"), [("/etc/passwd", "x"), ("..", "../outside"), (".hidden", ".."),
                                                  ("a//b", "sp ace"), ("", "")])
def test_any_gate_name_or_label_gives_a_listed_artifact_inside_the_gate_folder(tmp_path: Path, gate_name: str,
                                                                               label: str) -> None:
    """The recorder names every artifact: whatever the gate or the attempt is called, its files
    land inside ``gates/`` under one folder, and the store lists them under those names."""
    attempt = Attempt(kind="chat", label=label, ok=True)
    GateRecorder(GateRecord(nodeid="t::x", gate=gate_name), tmp_path).record_attempt(attempt, b"req", b"resp")
    names = [e["name"] for e in ArtifactStore(tmp_path).entries()]
    assert names == [attempt.request_artifact, attempt.response_artifact]
    for name in names:
        parts = name.split("/")
        assert len(parts) == 3 and parts[0] == "gates" and all(p and not p.startswith(".") for p in parts)
        assert (tmp_path / name).resolve().is_relative_to((tmp_path / "gates").resolve())


def test_an_unwritable_private_folder_is_an_artifact_error(tmp_path: Path) -> None:
    (tmp_path / "private").write_text("a file where the private folder should be")
    recorder = GateRecorder(GateRecord(nodeid="t::smoke", gate="smoke"), tmp_path / "private")
    with pytest.raises(ArtifactError, match="cannot write the artifacts"):
        recorder.record_attempt(Attempt(kind="chat", label="smoke", ok=True), b"req", b"resp")


# -- the public report ----------------------------------------------------------------------------


def test_report_validates_and_carries_every_section(report: dict[str, Any]) -> None:
    assert validation_errors(report) == []
    assert report["schema"] == SCHEMA_ID and report["schema_version"] == 4
    assert report["tool"]["name"] == "pytest-vllmqual"
    assert list(report) == ["schema", "schema_version", "tool", "run", "recipe", "identity", "hardware",
                            "lifecycle", "engine", "gates", "preflight", "ladder", "ladder_summary", "decision",
                            "artifacts", "redactions", "extensions"]
    assert report["run"]["status"] == "complete" and report["run"]["mode"] == "managed"
    assert report["identity"]["status"] == "verified"
    assert report["hardware"] == {"source": "nvml", "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation "
                                  "Edition", "gpu_count": 2, "gpu_memory_gib": 95.6, "interconnect": "PCIe",
                                  "driver_version": "580.65.06"}
    assert report["lifecycle"]["cold_start_s"] == 323.5
    assert report["lifecycle"]["teardown"]["clean"] is True


def test_engine_section_has_per_rank_and_min_rank_facts(report: dict[str, Any]) -> None:
    engine = report["engine"]
    assert engine["kv_cache_tokens"] == 283917 and engine["max_concurrency"] == 2.17
    assert engine["concurrency_at_tokens"] == 131072 and engine["min_rank_kv_gib"] == 15.27
    assert engine["kv_tokens_per_gib"] == round(283917 / 15.27, 1)
    assert [(r["rank"], r["process"]) for r in engine["ranks"]] == [(0, "Worker_TP0"), (1, "Worker_TP1")]
    assert engine["ranks"][1]["kv_gib"] == 15.31
    assert engine["ranks"][0]["weights_gib"] == 75.64 and engine["ranks"][1]["peak_activation_gib"] == 1.73
    assert engine["cache_config"] == {"num_gpu_blocks": 4437, "block_size": 64, "cache_dtype": "fp8_ds_mla",
                                      "kv_cache_size_tokens": 283917, "kv_cache_max_concurrency": 2.17}
    assert engine["non_default_args"]["max_num_batched_tokens"] == 8192


def test_fields_outside_the_allowlist_never_reach_the_report(private_dir: Path) -> None:
    run = reference_control_run(private_dir)
    run.engine["ranks"][0]["gpu_uuid"] = "GPU-3f1c2b9a-7d44-4e1b-9c0a-5b6e7f801234"
    run.lifecycle["env"] = {"HF_TOKEN": "x"}
    run.identity["observed"]["container_name"] = "private-name"
    text = json.dumps(with_decision(build_public_report(run, sanitizer=blank_sanitizer())))
    for absent in ("unknown_future_field", "raw_log_excerpt", "uuids", "bus_ids", "gpu_uuid", "private-name",
                   '"env": {"HF_TOKEN"'):
        assert absent not in text


def test_preflight_and_gates(report: dict[str, Any]) -> None:
    preflight = report["preflight"]
    assert preflight["summary"] == "6/6" and preflight["passed"] == 6 and preflight["total"] == 6
    assert preflight["text"] == ("6/6: smoke, JSON, 20/20 tool calls, streaming tool, tool-result continuation, "
                                 "Responses API")
    capacity = next(g for g in report["gates"] if g["gate"] == "ladder")
    assert capacity["family"] == "capacity" and capacity["title"] == "Context ladder"
    assert capacity["retained_failures"] == 1, "the HTTP 400 is retained; the expected rejection is not a failure"
    assert len(capacity["attempts"]) == 6
    assert "ladder" not in capacity["measurements"], "rungs are reported once, in the ladder section"
    assert capacity["measurements"]["largest_prompt_tokens"] == 119503
    assert all(a["request_sha256"] and a["request_artifact"] for a in capacity["attempts"])


def test_preflight_counts_a_missing_or_failed_gate(private_dir: Path) -> None:
    run = reference_control_run(private_dir)
    run.gates = [g for g in run.gates if g.gate != "responses"]
    next(g for g in run.gates if g.gate == "json").outcome = "failed"
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    assert report["preflight"]["summary"] == "4/6"
    outcomes = {g["gate"]: g["outcome"] for g in report["preflight"]["gates"]}
    assert outcomes["json"] == "failed" and outcomes["responses"] == "absent"


def test_ladder_keeps_actual_sizes_and_summarizes(report: dict[str, Any]) -> None:
    ladder = report["ladder"]
    assert [r["prompt_tokens"] for r in ladder] == [87207, 118830, None, 119503, 88939, 131073]
    summary = report["ladder_summary"]
    assert summary["rungs"] == 6 and summary["completed"] == 4 and summary["failed"] == 1
    assert summary["rejected_as_expected"] == 1 and summary["max_abs_calibration_error"] == 31061
    assert summary["largest"]["prompt_tokens"] == 119503 and summary["largest"]["ttft_s"] == 17.445


def test_missing_derived_metrics_follow_the_schema_formulas(private_dir: Path) -> None:
    run = reference_control_run(private_dir)
    rung = run.ladder[3]
    rung.prefill_tok_s = rung.decode_tok_s = rung.calibration_error = None
    rung.ttft_s, rung.e2e_s, rung.completion_tokens = 16.0, 18.0, 101
    out = build_public_report(run, sanitizer=blank_sanitizer())["ladder"][3]
    assert out["prefill_tok_s"] == round(119503 / 16.0, 2)
    assert out["decode_tok_s"] == round(100 / 2.0, 2)
    assert out["calibration_error"] == 3


def test_teardown_argument_overrides_the_record(private_dir: Path) -> None:
    run = reference_control_run(private_dir)
    result = TeardownResult(launcher_kind="subprocess", stopped=True, seconds=1.25,
                            survivors=["123 python3 vllm"], shm_leftovers=["/dev/shm/x"])
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer(), teardown=result))
    teardown = report["lifecycle"]["teardown"]
    assert teardown["clean"] is False and teardown["surviving_processes"] == 1 and teardown["shm_leftover_files"] == 1
    assert validation_errors(report) == []


def test_reclaimed_shm_files_read_as_names_and_sizes(private_dir: Path) -> None:
    run = reference_control_run(private_dir)
    reclaim = {"reclaimed": [{"name": "psm_3185d982", "bytes": 251658260}], "postcondition_clean": True,
               "summary": "reclaimed exactly one unmapped 251,658,260-byte file; clean postcondition"}
    result = TeardownResult(launcher_kind="subprocess", stopped=True, seconds=1.0, shm_reclaim=reclaim)
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer(), teardown=result))
    assert report["lifecycle"]["teardown"]["shm_reclaim"]["reclaimed"] == ["psm_3185d982 (251,658,260 bytes)"]
    assert validation_errors(report) == []


def test_artifacts_default_to_every_file_in_the_private_folder(report: dict[str, Any], private_dir: Path) -> None:
    names = {a["name"] for a in report["artifacts"]}
    on_disk = {p.relative_to(private_dir).as_posix() for p in private_dir.rglob("*") if p.is_file()}
    assert names == on_disk and "server.log" in names
    for artifact in report["artifacts"]:
        data = (private_dir / artifact["name"]).read_bytes()
        assert artifact["sha256"] == hashlib.sha256(data).hexdigest() and artifact["size"] == len(data)


def test_startup_error_and_incomplete_run_are_reported(private_dir: Path) -> None:
    run = reference_control_run(private_dir)
    run.status, run.status_reasons = "incomplete", ["the server did not start (kv_insufficient)"]
    log_sha = "ab" * 32
    run.lifecycle.update(cold_start_s=None, startup_status="kv_insufficient", startup_error={
        "status": "kv_insufficient", "message": "startup failed", "exit_code": 1,
        "log_tail": "\n".join(f"line {i}" for i in range(100)),
        "details": {"needed_gib": 28.0, "available_gib": 3.5, "max_seq_len": 131072, "estimated_max_len": 16384,
                    "evidence": "[node-a.corp] ValueError: To serve at least one request ...",
                    "last_phase": "KV cache allocated", "private_log": {"name": "server.log", "sha256": log_sha}}})
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    assert validation_errors(report) == []
    error = report["lifecycle"]["startup_error"]
    assert error["status"] == "kv_insufficient" and "log_tail" not in error
    assert error["cause"] == ("the KV cache cannot hold one request of max_model_len: 28.0 GiB needed, 3.5 GiB "
                              "available for max_model_len 131072; the engine estimates the maximum length at "
                              "16384 tokens")
    assert error["details"] == {"max_seq_len": 131072, "needed_gib": 28.0, "available_gib": 3.5,
                                "estimated_max_len": 16384, "last_phase": "KV cache allocated"}
    assert error["private_log"] == {"name": "server.log", "sha256": log_sha}
    assert "line 9" not in json.dumps(report) and "node-a" not in json.dumps(report)
    assert report["decision"]["verdict"] == "no-promotion"
    page = render_html(report)
    assert f"server.log sha256 {log_sha}" in page and "16384" in page
    assert "line 9" not in page and "node-a" not in page


def test_schema_states_the_metric_formulas() -> None:
    schema = load_schema(REPORT_SCHEMA)
    assert schema["$id"] == SCHEMA_ID
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    rung = schema["$defs"]["rung"]["properties"]
    assert "prompt_tokens / ttft_s" in rung["prefill_tok_s"]["description"]
    assert "(completion_tokens - 1) / (last_output_s - ttft_s)" in rung["decode_tok_s"]["description"]
    assert "usage.prompt_tokens" in rung["prompt_tokens"]["description"]
    assert "first streamed delta" in rung["ttft_s"]["description"]
    assert "end of the stream" in rung["e2e_s"]["description"]


# -- canaries: planted secrets and identifiers, the API key ----------------------------------------


def test_canaries_of_every_kind_reach_neither_the_json_nor_the_html(private_dir: Path) -> None:
    run = reference_control_run(private_dir, canaries=True)
    run.gates[0].reason = f"GPU {CANARIES['gpu_uuid']} at {CANARIES['pci']} ({CANARIES['ipv6']})"
    run.status_reasons = [f"{CANARIES['hf_token']} {CANARIES['sk_key']} by {CANARIES['user']}",
                          "an unknown key hf_NotInTheEnvironment0123456"]
    report = with_decision(build_public_report(run, sanitizer=canary_sanitizer()))
    assert validation_errors(report) == []
    text = json.dumps(report, ensure_ascii=False)
    page = render_html(report)
    for kind, value in CANARIES.items():
        assert value not in text, f"{kind} canary leaked into the JSON report"
        assert value not in page, f"{kind} canary leaked into the HTML page"
    assert CANARIES["container"][:12] not in text
    assert "hf_NotInTheEnvironment" not in text
    assert set(report["redactions"]) == set(KINDS), "every kind was planted, so every kind is counted"
    assert report["recipe"]["content"]["launcher"]["env"]["HF_TOKEN"] == "<secret>"
    # the private artifacts still hold the raw values, and their hashes match
    assert CANARIES["hf_token"] in (private_dir / "server.log").read_text()
    path = private_dir.parent.parent / "report.json"
    write_report_atomic(report, path)
    assert verify_report(path, private_dir) == []


def test_resanitize_after_a_hook_scrubs_new_values_without_pseudonym_collisions(private_dir: Path) -> None:
    run = reference_control_run(private_dir, canaries=True)
    report = with_decision(build_public_report(run, sanitizer=canary_sanitizer()))
    before = dict(report["redactions"])
    assert "host-A" in json.dumps(report)
    report["extensions"]["ticket"] = "built on db7.corp.internal with key hf_HookAddedTokenAbCdEfGh"
    again = resanitize(report, known_secrets=[CANARY_API_KEY], sanitizer=blank_sanitizer())
    ticket = again["extensions"]["ticket"]
    assert "db7.corp.internal" not in ticket and "hf_HookAdded" not in ticket
    assert "host-A" not in ticket, "a new host must not reuse a pseudonym already in the report"
    assert again["redactions"]["hostname"] == before["hostname"] + 1
    assert again["redactions"]["token"] == before.get("token", 0) + 1
    assert validation_errors(again) == []


# -- atomic writing: an unwritable or full reports disk --------------------------------------------


def test_write_report_atomic_writes_valid_json_and_no_temp_files(report: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "new-reports" / "r.json"
    assert write_report_atomic(report, path) == path
    assert json.loads(path.read_text()) == report
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]
    assert load_report(path) == report


@pytest.fixture
def reports_dir(tmp_path: Path) -> Path:
    path = tmp_path / "reports"
    path.mkdir()
    return path


def test_validation_failure_writes_nothing(report: dict[str, Any], reports_dir: Path) -> None:
    report["run"]["status"] = "finished"
    path = reports_dir / "r.json"
    with pytest.raises(ReportError, match=r"key 'run\.status' is 'finished', which is not one of"):
        write_report_atomic(report, path)
    assert list(reports_dir.iterdir()) == []


@pytest.mark.parametrize(("code", "hint"), [(errno.ENOSPC, "free space on the device holding"),
                                            (errno.EACCES, "writable")])
def test_full_disk_or_unwritable_dir_names_the_path_and_leaves_no_partial_file(
        report: dict[str, Any], reports_dir: Path, monkeypatch: pytest.MonkeyPatch, code: int, hint: str) -> None:
    path = reports_dir / "r.json"
    path.write_text('{"previous": "report"}')

    def failing_fsync(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(ReportError) as info:
        write_report_atomic(report, path)
    message = str(info.value)
    assert str(path) in message and hint in message and os.strerror(code) in message
    assert [p.name for p in reports_dir.iterdir()] == ["r.json"], "the temp file is removed"
    assert path.read_text() == '{"previous": "report"}', "the old report is never half-replaced"


def test_unwritable_directory_at_temp_creation(report: dict[str, Any], reports_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(reports_dir))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(ReportError, match=r"cannot write the report .*r\.json: Permission denied\. Fix: make"):
        write_report_atomic(report, reports_dir / "r.json")
    assert list(reports_dir.iterdir()) == []


# -- verify ---------------------------------------------------------------------------------------


def _written(report: dict[str, Any], tmp_path: Path) -> Path:
    return write_report_atomic(report, tmp_path / "report.json")


def test_verify_passes_on_untouched_artifacts(report: dict[str, Any], tmp_path: Path, private_dir: Path) -> None:
    assert verify_report(_written(report, tmp_path), private_dir) == []


def test_verify_names_changed_missing_and_extra_files(report: dict[str, Any], tmp_path: Path,
                                                      private_dir: Path) -> None:
    path = _written(report, tmp_path)
    (private_dir / "server.log").write_text("tampered")
    (private_dir / "gates" / "json" / "001-json.response.txt").unlink()
    (private_dir / "gates" / "added.txt").write_text("new")
    problems = verify_report(path, private_dir)
    assert any(p.startswith("changed: server.log") for p in problems)
    assert "missing: gates/json/001-json.response.txt" in problems
    assert any(p.startswith("extra: gates/added.txt") for p in problems)
    assert len(problems) == 3


def test_verify_cross_checks_attempt_hashes(report: dict[str, Any], tmp_path: Path, private_dir: Path) -> None:
    report["gates"][0]["attempts"][0]["request_sha256"] = "0" * 64
    problems = verify_report(_written(report, tmp_path), private_dir)
    assert problems == ["changed: gates/smoke/001-smoke.request.json (attempt 'smoke' of gate smoke recorded a "
                        "different request sha256)"]


def test_verify_refuses_names_that_escape_the_private_folder(report: dict[str, Any], tmp_path: Path,
                                                             private_dir: Path) -> None:
    report["artifacts"].append({"name": "gates/../../../etc-passwd", "size": 1, "sha256": "0" * 64})
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    with pytest.raises(ReportError, match="does not match the report schema"):
        verify_report(path, private_dir)


def test_verify_reports_a_missing_private_folder(report: dict[str, Any], tmp_path: Path) -> None:
    assert verify_report(_written(report, tmp_path), tmp_path / "nope") == [
        f"private folder {tmp_path / 'nope'} does not exist"]


def test_load_report_errors_are_one_clear_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="cannot read report"):
        load_report(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ReportError, match="is not valid JSON"):
        load_report(bad)
    bad.write_text('{"schema": "x"}')
    with pytest.raises(ReportError, match="does not match the report schema"):
        load_report(bad)
    for old in ("report/2", "report/3"):
        bad.write_text(f'{{"schema": "https://pytest-vllmqual/schemas/{old}"}}')
        with pytest.raises(ReportError, match=r"older version of pytest-vllmqual\. Fix: carry it forward"):
            load_report(bad)


def test_a_gate_says_whose_failure_it_was_and_a_report_without_it_still_reads(private_dir: Path) -> None:
    """``failure_kind`` is optional in report/4: a report written before it validates as it is."""
    run = reference_control_run(private_dir)
    run.gates[0].outcome, run.gates[0].failure_kind = "failed", "server_error"
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    assert validation_errors(report) == []
    assert report["gates"][0]["failure_kind"] == "server_error"
    assert {g["failure_kind"] for g in report["gates"][1:]} == {None}
    older = json.loads(json.dumps(report))
    for gate in older["gates"]:
        del gate["failure_kind"]
    assert validation_errors(older) == []
    older["gates"][0]["failure_kind"] = "the model, probably"
    assert validation_errors(older), "a kind outside the fixed words is refused"
