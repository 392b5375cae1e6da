"""compare_reports reproduces the reference campaign's A/B table and findings; confounded, replay and CLI paths."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, UNIT_DATA
from support.equivalence_samples import attach_probe, probe_body
from support.report_samples import blank_sanitizer as quiet
from support.report_samples import reference_candidate_run, reference_control_run

from pytest_vllmqual.ab.compare import (
    SCHEMA_ID,
    compare_reports,
    comparison_errors,
    render_markdown,
    report_digest,
)
from pytest_vllmqual.ab.decision import Targets
from pytest_vllmqual.ab.findings import STALE_LOG_CLEARED
from pytest_vllmqual.ab.rows import ABOVE_FLOOR, BOUNDED, percent_change
from pytest_vllmqual.ab.variables import classify_change
from pytest_vllmqual.cli import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main
from pytest_vllmqual.errors import ComparisonError
from pytest_vllmqual.gates.registry import REGISTRY
from pytest_vllmqual.hashing import sha256_file
from pytest_vllmqual.report.decision import decide, public_record, with_decision
from pytest_vllmqual.report.html_page import render_html
from pytest_vllmqual.report.public import build_public_report, validate_report
from pytest_vllmqual.report.query import preflight_summary

REFERENCE_REPORTS = UNIT_DATA / "reference_reports"

REFERENCE_TABLE = """\
| Measurement | 8,192 control | 4,096 candidate | Change |
|---|---|---|---|
| Minimum-rank KV allocation | 15.27 GiB | 15.99 GiB | +0.72 GiB / +4.715% |
| Engine-reported GPU KV tokens | 283,917 | 553,243 | +269,326 / +94.861% |
| Reported 131K concurrency | 2.17x | 4.22x | +2.05x |
| Peak activation per rank | 1.73 GiB | 1.14 GiB | -0.59 GiB / -34.104% |
| Weight allocation per rank | 75.64 GiB | 75.51 GiB | -0.13 GiB |
| Functional preflight | 6/6 | 6/6 | unchanged pass |
| Largest actual prompt | 119,503 | 119,503 | unchanged pass |
| Largest-request TTFT | 17.445 s | 17.364 s | -0.461% |
| Largest-request effective prefill | 7,537 tok/s | 7,344 tok/s | -2.569% |
| Largest-request decode | 73.86 tok/s | 75.20 tok/s | +1.820% |"""
"""The reference campaign's A/B Results table, cell for cell."""

REFERENCE_CHANGES = [line.split(" | ")[-1].rstrip(" |") for line in REFERENCE_TABLE.splitlines()[2:]]


def reference_report(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REFERENCE_REPORTS / name).read_text())
    return data


@pytest.fixture
def arms() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return reference_report("control-8192.json"), reference_report("candidate-4096.json"), reference_report("replay-8192.json")


@pytest.fixture
def reference_comparison(arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    control, candidate, replay = arms
    return compare_reports(control, candidate, replay=replay, sanitizer=quiet())


def with_every_gate(report: dict[str, Any]) -> dict[str, Any]:
    """An arm that also ran the registered gates the reference campaign published no record of (its
    arms as published are healthy: a candidate needs every gate of every family)."""
    present = {g["gate"] for g in report["gates"]}
    for spec in REGISTRY:
        if spec.name not in present:
            report["gates"].append({
                "nodeid": f"suites::test_{spec.name}", "gate": spec.name, "title": spec.title, "family": spec.family,
                "proves": None, "markers": [], "arm": report["run"]["arm"], "outcome": "passed", "reason": None,
                "status": None, "duration_s": 0.1, "summary": "passed", "measurements": {}, "thresholds": {},
                "attempts": [], "retained_failures": 0})
    return report


def redecide(report: dict[str, Any]) -> dict[str, Any]:
    """Recompute the derived sections after a test changed a report."""
    report["preflight"] = preflight_summary(report)
    report["decision"] = decide(public_record(report)).to_dict()
    validate_report(report)
    return report


def table_of(markdown: str) -> str:
    return "\n".join(line for line in markdown.splitlines() if line.startswith("|"))


def finding(comparison: dict[str, Any], finding_id: str) -> dict[str, Any]:
    return next(f for f in comparison["findings"] if f["id"] == finding_id)


# -- the reference campaign -------------------------------------------------------------------------


def test_reference_fixtures_are_valid_reports_with_only_published_figures(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, replay = arms
    for report in arms:
        validate_report(report)
        assert report["artifacts"] == []
    published = {  # field: (control, candidate, decimals as the reference campaign prints them)
        "ttft_s": (17.445, 17.364, 3), "prefill_tok_s": (7537, 7344, 0), "decode_tok_s": (73.86, 75.20, 2)}
    top_control, top_candidate = control["ladder_summary"]["largest"], candidate["ladder_summary"]["largest"]
    for key, (a, b, places) in published.items():
        assert round(top_control[key], places) == a and round(top_candidate[key], places) == b
    assert control["ladder_summary"]["largest"]["prefill_tok_s"] == 7537.2  # as measured, not 119,503 / 17.445
    assert replay["engine"] == {**control["engine"]}
    assert replay["ladder_summary"]["largest"] == {**control["ladder_summary"]["largest"], "index": 0}
    assert control["lifecycle"]["cold_start_s"] == 323.5 and candidate["lifecycle"]["cold_start_s"] is None
    assert [r["prompt_tokens"] for r in control["ladder"]] == [87207, 118830, None, 119503, 88939]


def test_compare_reproduces_the_reference_table_exactly(reference_comparison: dict[str, Any]) -> None:
    assert table_of(render_markdown(reference_comparison)) == REFERENCE_TABLE
    assert [r["change"] for r in reference_comparison["rows"]] == REFERENCE_CHANGES
    assert reference_comparison["arms"] == ["8,192 control", "4,096 candidate"]
    assert comparison_errors(reference_comparison) == []
    assert reference_comparison["schema"] == SCHEMA_ID


@pytest.mark.parametrize(("key", "rule", "delta", "delta_pct"), [
    ("min_rank_kv_gib", "abs+pct", 0.72, 4.715),
    ("kv_cache_tokens", "abs+pct", 269326, 94.861),
    ("max_concurrency", "abs", 2.05, None),
    ("peak_activation_gib", "abs+pct", -0.59, -34.104),
    ("weights_gib", "abs", -0.13, None),
    ("largest_ttft_s", "pct", None, -0.461),
    ("largest_prefill_tok_s", "pct", None, -2.569),
    ("largest_decode_tok_s", "pct", None, 1.820),
])
def test_rows_carry_the_rule_and_the_numbers(reference_comparison: dict[str, Any], key: str, rule: str,
                                             delta: float | None, delta_pct: float | None) -> None:
    row = next(r for r in reference_comparison["rows"] if r["key"] == key)
    assert row["rule"] == rule
    if delta is not None:
        assert row["delta"] == pytest.approx(delta)
    if delta_pct is not None:
        assert row["delta_pct"] == pytest.approx(delta_pct)


def test_kv_bytes_vs_tokens_mismatch_is_flagged_with_both_figures(reference_comparison: dict[str, Any]) -> None:
    kv = finding(reference_comparison, "kv_bytes_vs_tokens")
    assert kv["status"] == "flagged" and kv["retained"] is True
    assert "+4.715% KV bytes vs +94.861% reported tokens" in kv["summary"]
    assert "rose only 4.715% (15.27 → 15.99 GiB)" in kv["summary"]
    assert "283,917 → 553,243" in kv["summary"]
    assert "Cache geometry or engine accounting remains unresolved" in kv["summary"]
    assert "retained explicitly rather than normalized away" in kv["summary"]
    assert kv["figures"]["kv_gib_change_pct"] == 4.715 and kv["figures"]["kv_tokens_change_pct"] == 94.861
    assert kv["figures"]["control_tokens_per_gib"] == 18593.1
    caveats = reference_comparison["decision"]["caveats"]
    assert ("the mismatch between +4.715% KV bytes and +94.861% reported tokens is retained explicitly rather "
            "than normalized away") in caveats
    assert "a causal explanation for the near-doubling of reported KV tokens" in \
        reference_comparison["decision"]["does_not_prove"]


def test_not_yet_a_393k_capacity_result_caveat(reference_comparison: dict[str, Any]) -> None:
    caveat = next(c for c in reference_comparison["decision"]["caveats"] if "not yet a 393K capacity result" in c)
    assert caveat == ("the reported KV pool of 553,243 tokens is not yet a 393K capacity result: the KV byte "
                      "allocation rose only 4.715%, and this A/B retained a 131,072-token configured context")


def test_controlled_variables_identity_only_vs_one_functional_change(reference_comparison: dict[str, Any]) -> None:
    variables = reference_comparison["controlled_variables"]
    assert variables["functional"] == ["serve.max_num_batched_tokens"]
    assert variables["confounded"] is False
    assert {"launcher.port", "identity.served_model_name", "launcher.docker.container_name"} <= \
        set(variables["identity_only"])
    assert set(variables["identity_only"]) <= {"name", "description", "launcher.port", "identity.served_model_name",
                                              "launcher.docker.container_name"}
    batch = next(c for c in variables["changed"] if c["path"] == "serve.max_num_batched_tokens")
    assert (batch["control"], batch["candidate"], batch["kind"]) == (8192, 4096, "functional")
    assert variables["summary"].startswith("Only serve.max_num_batched_tokens changed functionally (8,192 → 4,096).")
    assert "changed solely to preserve evidence identity" in variables["summary"]
    assert variables["harness"] == []


def test_timing_rows_are_bounded_observations(reference_comparison: dict[str, Any]) -> None:
    labels = {r["key"]: r["label"] for r in reference_comparison["rows"]}
    assert labels["largest_ttft_s"] == labels["largest_prefill_tok_s"] == labels["largest_decode_tok_s"] == BOUNDED
    assert BOUNDED == "bounded observation, not a ranking"
    assert all(v is None for k, v in labels.items() if not k.startswith("largest_") or k == "largest_prompt_tokens")
    timing = finding(reference_comparison, "timing_noise")
    assert timing["status"] == "bounded"
    assert "Largest-request TTFT -0.461%" in timing["summary"]
    assert any(n.startswith("Largest-request decode: bounded observation, not a ranking") for n in
               reference_comparison["notes"])


def test_bracketed_replay_reproduced_the_baseline(reference_comparison: dict[str, Any]) -> None:
    replay = finding(reference_comparison, "replay")
    assert replay["status"] == "reproduced"
    assert replay["summary"].startswith(STALE_LOG_CLEARED)
    assert STALE_LOG_CLEARED == "a fresh bracketed replay reproduced the baseline, so this is not a stale-log comparison"
    check = reference_comparison["replay_check"]
    assert check["reproduced"] and check["bracketed"] and all(c["within"] for c in check["checks"])
    assert any("reproducible under the current runtime" in p for p in reference_comparison["decision"]["proves"])


def test_decision_lists_are_generated_from_what_was_measured(reference_comparison: dict[str, Any]) -> None:
    decision = reference_comparison["decision"]
    does_not = decision["does_not_prove"]
    assert "a request above 300K prompt tokens (the largest measured in any arm was 119,503)" in does_not
    assert any(d.startswith("393K startup") for d in does_not)
    assert "concurrency beyond one active request" in does_not
    assert any(d.startswith("broad task-quality equivalence") for d in does_not)
    proves = " ".join(decision["proves"])
    assert "Peak activation per rank 1.73 GiB → 1.14 GiB" in proves
    assert "Functional preflight 6/6, Largest actual prompt 119,503" in proves
    assert "Engine-reported GPU KV tokens" not in proves  # unresolved: a finding, not a proof
    assert decision["verdict"] == reference_comparison["verdict"] == "healthy"
    assert decision["summary"] == "healthy; no-promotion"
    assert "no cold start was measured" in decision["reasons"][0]


def test_comparison_is_sanitized_and_references_reports_by_sha256(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]], reference_comparison: dict[str, Any]) -> None:
    control, candidate, replay = arms
    assert reference_comparison["control"]["report_sha256"] == report_digest(control)
    assert reference_comparison["replay"]["report_sha256"] == report_digest(replay)
    assert reference_comparison["control"]["hashed"] == "canonical-json"
    text = json.dumps(reference_comparison)
    for never in ('"tool_call_parser"', "deepseek_v31", '"ladder_summary"', '"status_reasons"', '"reproduce"'):
        assert never not in text  # unchanged recipe keys and report sections are not copied
    assert reference_comparison["not_compared"][0]["measurement"] == "Largest-request E2E"
    planted = copy.deepcopy(candidate)
    planted["recipe"]["content"]["launcher"]["env"] = {"NOTE": "cache in /home/qualuser/models"}
    leaked = compare_reports(control, planted, sanitizer=quiet())
    assert "qualuser" not in json.dumps(leaked) and leaked["redactions"]["home_path"] == 1


def test_html_renders_the_comparison_section(arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
                                             reference_comparison: dict[str, Any]) -> None:
    page = render_html(arms[1], comparison=reference_comparison)
    for anchor in ('id="comparison-table"', 'id="controlled-variables"', 'id="comparison-findings"',
                   'id="comparison-does-not-prove"', 'id="comparison-reports"'):
        assert anchor in page
    assert "+0.72 GiB / +4.715%" in page and "not yet a 393K capacity result" in page


# -- variants -----------------------------------------------------------------------------------------


def test_two_functional_changes_are_confounded(arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, replay = arms
    changed = copy.deepcopy(candidate)
    changed["recipe"]["content"]["serve"]["kv_cache_dtype"] = "fp8"
    changed["recipe"]["content"]["gates"]["capacity"]["rungs"] = [120000]
    result = compare_reports(control, changed, replay=replay, sanitizer=quiet())
    variables = result["controlled_variables"]
    assert variables["confounded"] is True
    assert variables["functional"] == ["serve.kv_cache_dtype", "serve.max_num_batched_tokens"]
    assert variables["harness"] == ["gates.capacity.rungs"]
    assert "confounded" in variables["summary"]
    assert any(c.startswith("confounded: 2 functional variables changed") for c in result["decision"]["caveats"])
    assert finding(result, "kv_bytes_vs_tokens")["status"] == "not_applicable"
    assert result["arms"] == ["131k-control control", "131k-4096 candidate"]
    assert "not attributed to one variable" in " ".join(result["decision"]["proves"])
    assert result["verdict"] != "priority-challenger"


def test_replay_outside_tolerance_marks_the_baseline_not_reproducible(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, replay = arms
    drifted = copy.deepcopy(replay)
    drifted["engine"]["kv_cache_tokens"] = 295000  # +3.904% > the 2% replay tolerance
    result = compare_reports(control, candidate, replay=drifted, sanitizer=quiet())
    replay_finding = finding(result, "replay")
    assert replay_finding["status"] == "not_reproducible"
    assert replay_finding["summary"].startswith("the baseline is not reproducible")
    assert "Engine-reported GPU KV tokens 283,917 → 295,000 (+11,083 / +3.904%)" in replay_finding["summary"]
    assert result["replay_check"]["reproduced"] is False
    assert "a reproducible baseline: the replay did not reproduce the control" in result["decision"]["does_not_prove"]
    assert not any("reproducible under the current runtime" in p for p in result["decision"]["proves"])


def test_replay_with_a_different_recipe_is_not_a_replay(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, _ = arms
    result = compare_reports(control, candidate, replay=copy.deepcopy(candidate), sanitizer=quiet())
    assert finding(result, "replay")["status"] == "not_reproducible"
    assert "differs functionally from the control's (serve.max_num_batched_tokens)" in \
        finding(result, "replay")["summary"]


def test_replay_must_be_a_fresh_run(arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, _ = arms
    with pytest.raises(ComparisonError, match="the replay is the control's own report"):
        compare_reports(control, candidate, replay=copy.deepcopy(control))


def test_without_a_replay_the_baseline_may_be_stale(arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, _ = arms
    result = compare_reports(control, candidate, sanitizer=quiet())
    assert finding(result, "replay")["status"] == "absent"
    assert result["replay"] is None and result["replay_check"] is None
    assert "that the control is reproducible: no bracketed replay ran" in result["decision"]["does_not_prove"]
    assert table_of(render_markdown(result)) == REFERENCE_TABLE


def test_timing_delta_above_the_noise_floor_is_not_bounded(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, _ = arms
    slower = copy.deepcopy(candidate)
    for rung in (slower["ladder"][0], slower["ladder_summary"]["largest"]):
        rung["ttft_s"] = 19.5
    result = compare_reports(control, slower, sanitizer=quiet())
    ttft = next(r for r in result["rows"] if r["key"] == "largest_ttft_s")
    assert (ttft["change"], ttft["label"]) == ("+11.781%", ABOVE_FLOOR)
    assert finding(result, "timing_noise")["status"] == "above_noise_floor"


def test_kv_tokens_that_follow_the_bytes_are_consistent(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, _ = arms
    proportional = copy.deepcopy(candidate)
    proportional["engine"]["kv_cache_tokens"] = 297300  # 18,593.1 tokens per GiB × 15.99 GiB, within 1%
    result = compare_reports(control, proportional, sanitizer=quiet())
    kv = finding(result, "kv_bytes_vs_tokens")
    assert kv["status"] == "consistent" and "within the 1% tolerance" in kv["summary"]
    assert not any("causal explanation" in d for d in result["decision"]["does_not_prove"])
    assert not any("not yet a 393K" in c for c in result["decision"]["caveats"])


def test_a_clean_bracketed_candidate_is_a_priority_challenger(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]], tmp_path: Path) -> None:
    control, candidate, replay = arms
    managed = with_every_gate(copy.deepcopy(candidate))
    managed["lifecycle"]["cold_start_s"] = 318.0
    redecide(managed)
    assert managed["decision"]["verdict"] == "healthy", "the published identity has no revision check: not pinned"
    revision = managed["identity"]["expected"]["revision"]
    managed["identity"]["checks"].append({"field": "revision", "expected": revision, "observed": revision, "ok": True})
    redecide(managed)
    assert managed["decision"]["verdict"] == "promotable"
    unprobed = compare_reports(control, managed, replay=replay, sanitizer=quiet())
    assert unprobed["verdict"] == "healthy"  # equivalence not measurable caps it below promotable
    assert unprobed["decision"]["reasons"][-1].startswith("capped below promotable: equivalence not measurable")
    for role, report in (("control", control), ("candidate", managed), ("replay", replay)):
        attach_probe(report, tmp_path, role, probe_body())
    folders = {role: tmp_path for role in ("control", "candidate", "replay")}
    result = compare_reports(control, managed, replay=replay, sanitizer=quiet(), folders=folders)
    assert result["equivalence"]["verdict"] == "equivalent"
    assert result["verdict"] == "priority-challenger"
    assert result["decision"]["summary"] == "priority-challenger; no-promotion"
    cold = next(r for r in result["rows"] if r["key"] == "cold_start_s")
    assert (cold["values"], cold["change"], cold["label"]) == (["323.5 s", "318.0 s"], "-1.700%", BOUNDED)
    without_replay = compare_reports(control, managed, sanitizer=quiet(), folders=folders)
    assert without_replay["verdict"] == "promotable"
    assert "no bracketed replay of the control ran" in without_replay["decision"]["reasons"][0]


def test_a_failed_candidate_gate_is_no_promotion_and_a_regression(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, replay = arms
    broken = copy.deepcopy(candidate)
    tools = next(g for g in broken["gates"] if g["gate"] == "tools")
    tools["outcome"], tools["reason"] = "failed", "19/20 typed tool calls"
    redecide(broken)
    result = compare_reports(control, broken, replay=replay, sanitizer=quiet())
    preflight = next(r for r in result["rows"] if r["key"] == "preflight")
    assert preflight["change"] == "regressed: 6/6 → 5/6"
    assert result["verdict"] == "no-promotion"
    smaller = copy.deepcopy(candidate)
    smaller["lifecycle"]["cold_start_s"] = 318.0
    for rung in (smaller["ladder"][0], smaller["ladder_summary"]["largest"]):
        rung["prompt_tokens"] = 118830
    redecide(smaller)
    result = compare_reports(control, smaller, replay=replay, sanitizer=quiet())
    prompt = next(r for r in result["rows"] if r["key"] == "largest_prompt_tokens")
    assert prompt["change"] == "-673 / -0.563%"
    assert result["verdict"] == "healthy" and "regressed" in result["decision"]["reasons"][0]


def test_report_samples_arms_compare_with_a_known_block_size(tmp_path: Path) -> None:
    control = with_decision(build_public_report(reference_control_run(tmp_path / "a"), sanitizer=quiet()))
    candidate = with_decision(build_public_report(reference_candidate_run(tmp_path / "b"), sanitizer=quiet()))
    result = compare_reports(control, candidate, sanitizer=quiet())
    kv = finding(result, "kv_bytes_vs_tokens")
    assert kv["status"] == "flagged" and "block size 64 unchanged" in kv["summary"]
    assert result["controlled_variables"]["functional"] == []  # report_samples reuse one recipe for both arms
    assert "a repeat, not an A/B" in result["controlled_variables"]["summary"]
    keys = [r["key"] for r in result["rows"]]
    assert keys[:5] == ["min_rank_kv_gib", "kv_cache_tokens", "max_concurrency", "peak_activation_gib", "weights_gib"]
    assert "cold_start_s" in keys and "largest_e2e_s" in keys


def test_targets_come_from_the_recipes_when_they_set_them(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    control, candidate, _ = arms
    strict = copy.deepcopy(candidate)
    strict["recipe"]["content"]["gates"]["capacity"]["min_largest_prompt"] = 100000
    strict["recipe"]["content"]["gates"]["engine"]["min_kv_tokens"] = 131072
    targets = Targets.from_reports([control, strict])
    assert (targets.prompt_tokens, targets.context_tokens) == (100000, 131072)
    result = compare_reports(control, candidate, targets=targets, sanitizer=quiet())
    assert not any(d.startswith("a request above") for d in result["decision"]["does_not_prove"])
    assert not any(d.startswith("131K startup") for d in result["decision"]["does_not_prove"])


def test_number_helpers_round_half_up_from_the_carried_values() -> None:
    assert percent_change(17.4448, 17.3644) is not None
    assert f"{percent_change(1.73, 1.14):.3f}" == "-34.104"
    assert percent_change(0, 5) is None
    assert classify_change("launcher.port") == "identity-only"
    assert classify_change("gates.capacity.rungs") == "harness"
    assert classify_change("serve.max_num_batched_tokens") == "functional"


def test_compare_rejects_things_that_are_not_arm_reports(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]], reference_comparison: dict[str, Any]) -> None:
    control, candidate, _ = arms
    with pytest.raises(ComparisonError, match="is a comparison record"):
        compare_reports(reference_comparison, candidate)
    with pytest.raises(ComparisonError, match="not a vllmqual arm report"):
        compare_reports(control, {**candidate, "schema": "https://pytest-vllmqual/schemas/report/99"})


# -- the CLI ------------------------------------------------------------------------------------------


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("vllmqual: error: ")
    return lines[0]


def test_cli_compare_writes_the_comparison_and_prints_the_table(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out, page = tmp_path / "out" / "comparison.json", tmp_path / "page.html"
    code = main(["compare", str(REFERENCE_REPORTS / "control-8192.json"), str(REFERENCE_REPORTS / "candidate-4096.json"),
                 "--replay", str(REFERENCE_REPORTS / "replay-8192.json"), "-o", str(out), "--html", str(page)])
    assert code == EXIT_OK
    printed = capsys.readouterr().out
    assert table_of(printed) == REFERENCE_TABLE
    assert f"wrote {out}" in printed and f"wrote {page}" in printed
    written = json.loads(out.read_text())
    assert comparison_errors(written) == []
    assert written["control"]["report_sha256"] == sha256_file(REFERENCE_REPORTS / "control-8192.json")
    assert written["control"]["hashed"] == "file"
    assert 'id="comparison-table"' in page.read_text()
    assert not list(out.parent.glob(".*.tmp"))


def test_cli_compare_targets_and_default_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("control-8192.json", "candidate-4096.json"):
        (tmp_path / name).write_bytes((REFERENCE_REPORTS / name).read_bytes())
    code = main(["compare", str(tmp_path / "control-8192.json"), str(tmp_path / "candidate-4096.json"),
                 "--target-prompt", "100000"])
    assert code == EXIT_OK
    written = json.loads((tmp_path / "comparison.json").read_text())
    assert written["targets"] == {"prompt_tokens": 100000, "context_tokens": 393216, "source": "command line"}
    assert "a request above" not in capsys.readouterr().out


@pytest.mark.parametrize(("setup", "expected"), [
    ("missing", "the candidate {path} does not exist"),
    ("not-json", "is not valid JSON"),
    ("not-object", "is not a JSON object"),
    ("no-schema", "is not a vllmqual arm report (no 'schema' key"),
    ("other-schema", "is not a vllmqual arm report (schema 'https://pytest-vllmqual/schemas/report/99'"),
    ("older-schema", "Fix: carry it forward with scripts/gpu/migrate_report_v1.py"),
    ("invalid", "does not match the report schema"),
    ("comparison", "is a comparison record, not an arm report"),
    ("same", "the control and the candidate are the same report"),
])
def test_cli_compare_bad_inputs_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   setup: str, expected: str) -> None:
    control = REFERENCE_REPORTS / "control-8192.json"
    bad = tmp_path / "bad.json"
    report = reference_report("candidate-4096.json")
    if setup == "not-json":
        bad.write_text("{nope")
    elif setup == "not-object":
        bad.write_text("[1, 2]")
    elif setup == "no-schema":
        bad.write_text(json.dumps({"run": {}}))
    elif setup == "other-schema":
        bad.write_text(json.dumps({**report, "schema": "https://pytest-vllmqual/schemas/report/99"}))
    elif setup == "older-schema":
        bad.write_text(json.dumps({**report, "schema": "https://pytest-vllmqual/schemas/report/2"}))
    elif setup == "invalid":
        del report["engine"]
        bad.write_text(json.dumps(report))
    elif setup == "comparison":
        bad.write_text(json.dumps(compare_reports(reference_report("control-8192.json"), reference_report("candidate-4096.json"),
                                                  sanitizer=quiet())))
    elif setup == "same":
        bad.write_bytes(control.read_bytes())
    out = tmp_path / "comparison.json"
    assert main(["compare", str(control), str(bad), "-o", str(out)]) == EXIT_USAGE
    assert expected.format(path=bad) in one_line_error(capsys.readouterr().err)
    assert not out.exists()


def test_cli_compare_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(REFERENCE_REPORTS / "control-8192.json")])
    assert exit_info.value.code == EXIT_USAGE
    assert "vllmqual: error:" in capsys.readouterr().err
    code = main(["compare", str(REFERENCE_REPORTS / "control-8192.json"), str(REFERENCE_REPORTS / "candidate-4096.json"),
                 "--target-context", "0", "-o", "/dev/null/x.json"])
    assert code == EXIT_USAGE
    assert "--target-context must be a positive token count" in one_line_error(capsys.readouterr().err)


def test_a_startup_both_arms_made_is_not_denied_after_a_later_death(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    """As on 2x H200 with vLLM 0.24.0: two arms that started at 131,072 with 536M-token pools,
    then died on a ladder rung (run incomplete), still proved the 131K startup; only an arm that never became ready did not."""
    died = []
    for arm in copy.deepcopy(arms):
        arm["engine"]["kv_cache_tokens"] = 536_377_984
        arm["run"]["status"] = "incomplete"
        for section in ("engine", "capacity"):
            arm["recipe"]["content"]["gates"].setdefault(section, {})["min_kv_tokens"] = 131_072
        died.append(arm)
    control, candidate, replay = died
    started = compare_reports(control, candidate, replay=replay, sanitizer=quiet())
    assert not any(d.startswith("131K startup") for d in started["decision"]["does_not_prove"])
    for arm in died:
        arm["lifecycle"]["startup_status"] = "startup_timeout"
    never = compare_reports(control, candidate, replay=replay, sanitizer=quiet())
    assert any(d.startswith("131K startup") for d in never["decision"]["does_not_prove"])


def test_a_startup_is_measured_against_the_context_the_server_ran_not_the_recipe(
        arms: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    """The recipes asked for 393,216 but /v1/models served 131,072: that is no 393K startup.
    And arms whose server reported 393,216 did start it, whatever their recipe said."""
    asked = []
    for arm in copy.deepcopy(arms):
        arm["engine"]["kv_cache_tokens"] = 536_377_984
        arm["recipe"]["content"]["serve"]["max_model_len"] = 393_216
        arm["identity"]["observed"]["max_model_len"] = 131_072
        asked.append(arm)
    result = compare_reports(*asked[:2], replay=asked[2], sanitizer=quiet())
    assert any(d.startswith("393K startup") for d in result["decision"]["does_not_prove"])
    for arm in asked:
        arm["recipe"]["content"]["serve"]["max_model_len"] = 131_072
        arm["identity"]["observed"]["max_model_len"] = 393_216
    result = compare_reports(*asked[:2], replay=asked[2], sanitizer=quiet())
    assert not any(d.startswith("393K startup") for d in result["decision"]["does_not_prove"])


def test_cli_compare_exits_1_when_the_verdict_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A no-promotion comparison must not look like a pass to a script (`vllmqual compare && deploy`)."""
    candidate = json.loads((REFERENCE_REPORTS / "candidate-4096.json").read_text())
    candidate["decision"]["verdict"] = "no-promotion"
    path = tmp_path / "candidate-4096.json"
    path.write_text(json.dumps(candidate))
    code = main(["compare", str(REFERENCE_REPORTS / "control-8192.json"), str(path), "-o", str(tmp_path / "c.json")])
    assert code == EXIT_PROBLEMS
    assert json.loads((tmp_path / "c.json").read_text())["decision"]["verdict"] == "no-promotion"
    assert "verdict no-promotion" in capsys.readouterr().err


def test_load_timings_are_reported_not_judged_by_the_replay() -> None:
    """The one-H200 A/B's arms: the replay's engine facts match the control's exactly while its load
    levels' latency moved 5-10% with machine noise; that must not make the baseline unreproducible."""
    folder = ROOT / "reports" / "examples" / "gpu-tp1" / "ab-131k"
    control, candidate, replay = (json.loads((folder / name).read_text()) for name in (
        "A-control-8192.json", "B-candidate-4096.json", "A2-replay-8192.json"))
    result = compare_reports(control, candidate, replay=replay, sanitizer=quiet())
    replay_finding = finding(result, "replay")
    assert replay_finding["status"] == "reproduced", replay_finding["summary"]
    assert "Load 1 in flight" in replay_finding["summary"]  # reported as a timing, not as a problem
    judged = [check["key"] for check in result["replay_check"]["checks"] if check["key"].startswith("load:")]
    assert judged == ["load:00001:goodput_pct", "load:00008:goodput_pct"]  # goodput is still compared
