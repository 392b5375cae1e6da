"""Committed example reports validate against the current schemas, so they cannot rot; the GPU
evidence of the real GPU runs says what they proved (hardware, runtime, the 393K ladder, the A/B)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, load_script

from pytest_vllmqual.ab.compare import report_digest, validate_comparison
from pytest_vllmqual.cli import EXIT_OK, main
from pytest_vllmqual.equivalence import sidecar
from pytest_vllmqual.equivalence.load_floor import arm_floor, batch_invariance
from pytest_vllmqual.fleet.record import validate_record as validate_fleet_record
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.public import validate_report

EXAMPLES = ROOT / "reports" / "examples"
GPU = EXAMPLES / "gpu"
GPU_TP1 = EXAMPLES / "gpu-tp1"
CPU_SMOLLM2 = EXAMPLES / "cpu-smollm2"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


REPORTS = [p for p in sorted(EXAMPLES.rglob("*.json")) if '"https://pytest-vllmqual/schemas/report/' in p.read_text()[:200]]


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.json")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_committed_example_validates_against_the_current_schema(path: Path) -> None:
    data = load(path)
    kind = str(data.get("schema", "")).rsplit("/", 2)[-2] if data.get("schema") else None
    if kind == "report":
        validate_report(data)
    elif kind == "comparison":
        validate_comparison(data)
    elif kind == "fleet-record":
        validate_fleet_record(data)
    elif path.name.endswith(".probe.json"):  # a probe sidecar: its report references it by SHA-256
        report = load(path.with_name(path.name.removesuffix(".probe.json") + ".json"))
        assert sidecar.load(report["equivalence_probe"], path.parent) == (data, None)
    elif path.name.startswith("campaign-"):
        assert {"campaign", "arms", "qualified", "complete", "reports", "exit"} <= set(data), f"{path}: not a campaign record"
    else:
        assert path.name.startswith("bench-"), f"{path}: not a report, a comparison or a benchmark summary"


@pytest.mark.parametrize("name", ["tiny-gpu.json", "tiny-gpu-393k-fp8kv.json", "ab-131k/A-control-8192.json",
                                  "ab-131k/B-candidate-4096.json", "ab-131k/A2-replay-8192.json"])
def test_gpu_reports_name_two_h200_and_runtime_0_24_0(name: str) -> None:
    report = load(GPU / name)
    hardware = report["hardware"]
    assert (hardware["gpu_model"], hardware["gpu_count"]) == ("NVIDIA H200", 2)
    runtime = next(c for c in report["identity"]["checks"] if c["field"] == "runtime_version")
    assert runtime["observed"] == "0.24.0" and runtime["status"] == "matched"
    assert report["recipe"]["content"]["serve"]["tensor_parallel_size"] == 2
    # Every gate passed or is named as not applicable; nothing overclaims. The decision as written
    # predates the openai_sdk and load gates; today's rules list them as not run, beside it.
    outcomes = {g["gate"]: g["outcome"] for g in report["decision"]["gates"]}
    assert {gate for gate, outcome in outcomes.items() if outcome != "passed"} == {
        "quality_intelligence", "quality_session_recall"}
    recomputed = {g["gate"]: g["outcome"] for g in report["decision_recomputed"]["decision"]["gates"]}
    assert {gate for gate, outcome in recomputed.items() if outcome != "passed"} == {
        "quality_intelligence", "quality_session_recall", "openai_sdk", "load"}
    assert recomputed["openai_sdk"] == recomputed["load"] == "absent"
    assert report["decision"]["verdict"] == report["decision_recomputed"]["decision"]["verdict"] == "healthy"
    assert report["lifecycle"]["teardown"]["clean"] is True


def test_gpu_393k_ladder_past_300k_on_fp8_kv() -> None:
    report = load(GPU / "tiny-gpu-393k-fp8kv.json")
    assert report["recipe"]["content"]["serve"]["kv_cache_dtype"] == "fp8"
    assert report["engine"]["kv_cache_tokens"] >= 393_216
    measured = [r for r in report["ladder"] if not r["expected_rejection"]]
    assert all(r["ok"] and r["calibration_error"] == 0 and r["post_probe_smoke"] == "passed" for r in measured)
    assert max(r["prompt_tokens"] for r in measured) > 300_000
    rejected = [r for r in report["ladder"] if r["expected_rejection"]]
    assert [(r["prompt_tokens"], r["status_code"], r["ok"]) for r in rejected] == [(393_217, 400, True)]


def test_gpu_ab_compares_8192_against_4096_from_real_arms() -> None:
    comparison = load(GPU / "ab-131k" / "comparison.json")
    arms = [load(GPU / "ab-131k" / n) for n in ("A-control-8192.json", "B-candidate-4096.json")]
    assert [a["recipe"]["content"]["serve"]["max_num_batched_tokens"] for a in arms] == [8192, 4096]
    assert comparison["controlled_variables"]["confounded"] is False
    assert "serve.max_num_batched_tokens" in json.dumps(comparison["controlled_variables"])
    replay = next(f for f in comparison["findings"] if f["id"] == "replay")
    assert replay["status"] == "reproduced"


def _migrate_script() -> Any:
    return load_script(ROOT / "scripts" / "gpu" / "migrate_report_v1.py", "migrate_report_v1")


def test_the_migration_carries_report_2_forward_renaming_its_candidate_verdict() -> None:
    """report/2 called the top single-run verdict candidate; report/3 calls it promotable, nothing else moves."""
    migrate = _migrate_script().migrate
    old = load(GPU / "tiny-gpu.json")
    old.pop("decision_recomputed", None)
    old["schema"], old["schema_version"] = "https://pytest-vllmqual/schemas/report/2", 2
    old["decision"] = {**old["decision"], "verdict": "candidate", "summary": "candidate; no-promotion",
                       "reasons": ["every registered gate passed; a single run is at most a candidate (...)"]}
    new = migrate(old)
    validate_report(new)
    assert (new["schema_version"], new["decision"]["verdict"], new["decision"]["summary"]) == (
        4, "promotable", "promotable; no-promotion")
    assert new["decision"]["reasons"] == ["every registered gate passed; a single run is at most promotable (...)"]
    moved = ("schema", "schema_version", "decision", "decision_recomputed")
    assert {k: v for k, v in new.items() if k not in moved} == {k: v for k, v in old.items() if k not in moved}
    old["schema_version"] = 5
    with pytest.raises(SystemExit, match="schema_version 5"):
        migrate(old)


def _as_report_3(report: dict[str, Any]) -> dict[str, Any]:
    old = json.loads(json.dumps(report))
    old.pop("decision_recomputed", None)
    old["schema"], old["schema_version"] = "https://pytest-vllmqual/schemas/report/3", 3
    for section in (old["load"], old["recipe"]["content"]["gates"]["load"], _gate(old, "load")["measurements"]):
        section["slos_set_by"] = "operator"
    return old


def test_the_migration_to_report_4_keeps_the_stored_decision_and_puts_a_different_recomputation_beside_it() -> None:
    """report/3 wrote operator also where the recipe said nothing: carried forward it is 'not stated'. The
    decision stays as the run wrote it; today's rules' decision sits beside it only where it differs, and
    running the migration again changes nothing."""
    migrate = _migrate_script().migrate
    old = _as_report_3(load(GPU_TP1 / "tiny-gpu.json"))
    new = migrate(old)
    validate_report(new)
    assert new["decision"] == old["decision"] and new["schema_version"] == 4
    assert {new["load"]["slos_set_by"], _gate(new, "load")["measurements"]["slos_set_by"],
            new["recipe"]["content"]["gates"]["load"]["slos_set_by"]} == {"not stated"}
    assert new["decision_recomputed"]["decision"] == with_decision(new)["decision"] != new["decision"]
    assert new["decision_recomputed"]["rules"].endswith("report/4")
    assert migrate(new) == new
    agreeing = {**new, "decision": new["decision_recomputed"]["decision"]}
    assert "decision_recomputed" not in migrate(agreeing)


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_committed_report_decision_recomputed_is_what_today_s_rules_decide(path: Path) -> None:
    """The stored decision is kept as the run wrote it; where today's rules decide otherwise, the
    recomputation sits beside it. When the rules change, this fails until the migration is run again
    (scripts/migrate_examples.py), so the examples never claim a recomputation they do not carry."""
    report = load(path)
    recomputed = with_decision(report)["decision"]
    stored = report.get("decision_recomputed", {}).get("decision", report["decision"])
    assert recomputed == stored, "run scripts/migrate_examples.py: today's rules decide this report differently"
    assert recomputed["verdict"] == report["decision"]["verdict"], "a recomputation changed a verdict"


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("comparison.json")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_committed_comparison_names_its_arm_reports_by_their_sha256(path: Path) -> None:
    comparison = load(path)
    arms = {load(p)["run"]["id"]: p for p in path.parent.glob("*.json")
            if p.name != "comparison.json" and not p.name.endswith(".probe.json")}
    for role in ("control", "candidate", "replay"):
        ref = comparison[role]
        if ref is None and role == "replay":
            continue  # a comparison without a bracketed replay (it says so in its decision)
        arm = arms[ref["run_id"]]
        digest = hashlib.sha256(arm.read_bytes()).hexdigest() if ref["hashed"] == "file" else report_digest(load(arm))
        assert ref["report_sha256"] == digest, f"{role}: {arm.name}"


TP1_REPORTS = ["tiny-gpu.json", "tiny-gpu-393k-fp8kv.json", "tiny-gpu-kvfail.json", "ab-131k/A-control-8192.json",
               "ab-131k/B-candidate-4096.json", "ab-131k/A2-replay-8192.json"]


@pytest.mark.parametrize("name", TP1_REPORTS)
def test_one_gpu_reports_name_one_h200_tp1_runtime_0_24_0_and_carry_junit(name: str) -> None:
    report = load(GPU_TP1 / name)
    assert (report["hardware"]["gpu_model"], report["hardware"]["gpu_count"]) == ("NVIDIA H200", 1)
    assert report["recipe"]["content"]["serve"]["tensor_parallel_size"] == 1
    assert report["lifecycle"]["teardown"]["clean"] is True
    junit = {"tiny-gpu.json": "tiny-gpu.xml", "tiny-gpu-393k-fp8kv.json": "tiny-gpu-393k.xml",
             "tiny-gpu-kvfail.json": "tiny-gpu-kvfail.xml"}.get(name, "ab-131k/tiny-gpu-ab.xml")
    assert (GPU_TP1 / junit).is_file()
    if name != "tiny-gpu-kvfail.json":
        runtime = next(c for c in report["identity"]["checks"] if c["field"] == "runtime_version")
        assert runtime["observed"] == "0.24.0" and runtime["status"] == "matched"


def _gate(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in report["gates"] if g["gate"] == name)


def test_one_gpu_tiny_gpu_passes_the_sdk_gate_with_its_strict_finding_and_the_load_gate() -> None:
    report = load(GPU_TP1 / "tiny-gpu.json")
    outcomes = {g["gate"]: g["outcome"] for g in report["decision"]["gates"]}
    assert {gate for gate, outcome in outcomes.items() if outcome != "passed"} == {
        "quality_intelligence", "quality_session_recall"}
    sdk = _gate(report, "openai_sdk")
    assert sdk["outcome"] == "passed" and sdk["measurements"]["sdk_version"] == "2.54.0"
    assert [f["path"] for f in sdk["measurements"]["findings"]] == ["usage.input_tokens_details.cache_write_tokens"]
    load_section = report["load"]
    assert load_section["outcome"] == "passed" and load_section["promoted_levels"] == [1, 8]
    assert load_section["search"]["max_at_slo"] == 8 == load_section["max_num_seqs"]
    queued = [lvl["level"] for lvl in load_section["levels"] if lvl["above_max_num_seqs"]]
    assert queued and min(queued) == 9  # past max_num_seqs the requests queue, and the report says so


def test_one_gpu_393k_ladder_past_300k_and_its_tool_failure_names_the_path() -> None:
    report = load(GPU_TP1 / "tiny-gpu-393k-fp8kv.json")
    assert report["recipe"]["content"]["serve"]["kv_cache_dtype"] == "fp8"
    measured = [r for r in report["ladder"] if not r["expected_rejection"]]
    assert all(r["ok"] and r["post_probe_smoke"] == "passed" for r in measured)
    assert max(r["prompt_tokens"] for r in measured) > 300_000
    tools = _gate(report, "tools")
    assert tools["outcome"] == "failed" and "start.time: missing" in tools["reason"]
    campaign = load(GPU_TP1 / "campaign-393k.json")  # met its requirements, but a gate failed: not qualified
    assert campaign["qualified"] is None and campaign["complete"] is True and campaign["exit"]["code"] == 1


def test_one_gpu_kvfail_is_classified_with_the_gib_needed_and_available() -> None:
    report = load(GPU_TP1 / "tiny-gpu-kvfail.json")
    error = report["lifecycle"]["startup_error"]
    assert error["status"] == "kv_insufficient"
    assert "0.5 GiB needed" in error["cause"] and "0.1 GiB available" in error["cause"]


def test_one_gpu_ab_replay_reproduced_and_load_rows_are_labelled() -> None:
    comparison = load(GPU_TP1 / "ab-131k" / "comparison.json")
    assert {f["id"]: f["status"] for f in comparison["findings"]}["replay"] == "reproduced"
    load_rows = [r for r in comparison["rows"] if r["kind"] == "load"]
    assert load_rows and all(r["label"] for r in load_rows if "label" in r)


GPU_FLEET = GPU_TP1 / "fleet-one-node"


def test_one_gpu_fleet_ran_both_recipes_one_after_the_other_on_the_one_gpu() -> None:
    """Ray gave each TP=1 job the node's one GPU in turn: the second waited in the queue for about
    the first job's run, and both passed; the 393K job's ladder went past 300,000 on FP8 KV."""
    record = load(GPU_FLEET / "fleet.json")
    assert record["status"] == "complete" and record["decision"]["verdict"] == "not compared"
    assert record["comparisons"] == [] and [(j["job"], j["reason"].split(":")[0]) for j in
                                            record["decision"]["not_compared"]] == [
        ("tiny-gpu", "one node ran the job (node-1) (placement any (any node))"),
        ("tiny-gpu-393k-fp8kv", "one node ran the job (node-1) (placement any (any node))")]
    assert [n["gpus"] for n in record["cluster"]["nodes"]] == [1.0]
    rows = {row["job"]: row for row in record["rows"]}
    assert set(rows) == {"tiny-gpu", "tiny-gpu-393k-fp8kv"}
    for row in rows.values():
        assert (row["outcome"], row["verdict"], row["tp_size_seen"]) == ("passed", "healthy", 1)
        assert row["resources"]["gpus"] == 1 and row["overrides"] == ["serve.tensor_parallel_size=1"]
        assert row["gates"]["failed"] == 0
        job_report = load(GPU_FLEET / row["report"]["file"])
        validate_report(job_report)
        assert row["report"]["sha256"] == hashlib.sha256(json.dumps(job_report, sort_keys=True).encode()).hexdigest()
    first, second = rows["tiny-gpu"], rows["tiny-gpu-393k-fp8kv"]
    assert second["queue_s"] >= 0.9 * first["elapsed_s"], "the second job held no GPU while the first ran"
    assert second["largest_prompt_tokens"] > 300_000
    assert (GPU_FLEET / "fleet.xml").is_file() and (GPU_FLEET / "fleet.html").is_file()


def test_one_gpu_load_fidelity_against_vllm_bench() -> None:
    """The closed loop against vllm bench serve at 1 and 8 in flight, 4 rounds alternating: TPOT p50
    within 5% at both levels, both tools' TPOT within 5% of the server's own; TTFT lower than vLLM
    bench's and nearer the server's own at every level; the gate's CPU per request under vLLM bench's."""
    summary = load(GPU_TP1 / "bench-load-fidelity-gpu.json")
    assert summary["levels"] == [1, 8] and summary["rounds"] == 4 and summary["vllm_bench"] is True
    assert all(p["completed"] == p["requests"] == 32 for p in summary["passes"])
    for row in summary["ratios"]:
        assert abs(row["tpot_p50_ratio"] - 1.0) < 0.05, row
    server = {(row["level"], row["tool"]): row for row in summary["against_the_server"]}
    for level in (1, 8):
        gate, bench = server[(level, "gate")], server[(level, "vllm_bench")]
        assert abs(gate["tpot_mean_over_server"] - 1.0) < 0.05 and abs(bench["tpot_mean_over_server"] - 1.0) < 0.05
        assert 1.0 < gate["ttft_mean_over_server"] < bench["ttft_mean_over_server"]
    cpu = summary["client_cpu_at_highest_level"]
    assert cpu["gate_cpu_ms_per_request"] <= cpu["vllm_bench_cpu_ms_per_request"]


RERUN = GPU_TP1 / "rerun-2026-12-04"
RERUN_REPORTS = ["tiny-gpu.json", "tiny-gpu-393k-fp8kv.json", "ab-131k/A-control-8192.json",
                 "ab-131k/B-candidate-4096.json", "ab-131k/A2-replay-8192.json"]


@pytest.mark.parametrize("name", RERUN_REPORTS)
def test_one_gpu_rerun_passes_every_applicable_gate(name: str) -> None:
    report = load(RERUN / name)
    assert (report["hardware"]["gpu_model"], report["hardware"]["gpu_count"]) == ("NVIDIA H200", 1)
    assert report["recipe"]["content"]["serve"]["tensor_parallel_size"] == 1
    outcomes = {g["gate"]: g["outcome"] for g in report["decision"]["gates"]}
    assert {gate for gate, outcome in outcomes.items() if outcome != "passed"} == {
        "quality_intelligence", "quality_session_recall"}
    assert report["decision"]["verdict"] == "healthy" and report["lifecycle"]["teardown"]["clean"] is True


def test_one_gpu_rerun_393k_keeps_its_tools_and_the_ladder_past_300k() -> None:
    """The fixture model rebuilt with a bf16 answer margin keeps the tool the earlier build lost on FP8 KV.
    Its recipe said ``pinned: false``: the arm is healthy, but its campaign qualifies no arm (exit 1),
    and says why."""
    report = load(RERUN / "tiny-gpu-393k-fp8kv.json")
    assert _gate(report, "tools")["measurements"]["passed"] == 20
    assert _gate(load(GPU_TP1 / "tiny-gpu-393k-fp8kv.json"), "tools")["measurements"]["passed"] == 19
    measured = [r for r in report["ladder"] if not r["expected_rejection"]]
    assert max(r["prompt_tokens"] for r in measured) > 300_000
    campaign = load(RERUN / "campaign-393k.json")
    assert report["recipe"]["content"]["pinned"] is False
    assert campaign["qualified"] is None and campaign["exit"]["code"] == 1, "a campaign qualifies a pinned arm only"
    assert "the run is not pinned: the recipe says pinned: false" in campaign["arms"][0]["qualification"]


def test_one_gpu_rerun_kvfail_stops_the_never_ready_server_after_its_short_grace() -> None:
    report = load(RERUN / "tiny-gpu-kvfail.json")
    assert report["lifecycle"]["startup_error"]["status"] == "kv_insufficient"
    assert report["lifecycle"]["teardown"]["seconds"] < 5 < load(GPU_TP1 / "tiny-gpu-kvfail.json")[
        "lifecycle"]["teardown"]["seconds"]


def test_one_gpu_rerun_ab_collected_from_the_background_reproduced_its_control() -> None:
    comparison = load(RERUN / "ab-131k" / "comparison.json")
    assert {f["id"]: f["status"] for f in comparison["findings"]}["replay"] == "reproduced"
    assert comparison["controlled_variables"]["confounded"] is False
    assert (RERUN / "ab-131k" / "tiny-gpu-ab.xml").is_file()


def test_a_recomputed_decision_leads_the_page_and_the_stored_one_follows_it() -> None:
    from pytest_vllmqual.report.html_page import render_html

    report = load(GPU / "tiny-gpu.json")
    page = render_html(report)
    assert "Decided again by the rules of pytest-vllmqual" in page and "The decision the run wrote (stored)" in page
    assert page.index("Load at SLO (goodput) (gate load, load): not run") < page.index('id="stored-decision"')
    assert "Decided again" not in render_html({k: v for k, v in report.items() if k != "decision_recomputed"})


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("comparison.json")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_committed_comparison_is_what_today_s_code_computes_from_its_arms(path: Path) -> None:
    """When the comparison code changes, this fails until scripts/migrate_examples.py is run again."""
    module = load_script(ROOT / "scripts" / "migrate_examples.py", "migrate_examples")
    comparison = load(path)
    assert module.refresh_comparison(comparison, path.parent) == comparison


EQUIVALENCE = GPU_TP1 / "equivalence-2026-12-04"


def test_one_gpu_smollm2_fp8_kv_is_not_equivalent_to_its_control_and_the_replay_is_its_floor() -> None:
    """SmolLM2 on one H200: the FP8-KV candidate moves the top token at about 9% of the scored
    positions; the bracketed replay reproduced the control exactly (the A/A floor)."""
    comparison = load(EQUIVALENCE / "ab-smollm2-fp8kv" / "comparison.json")
    section = comparison["equivalence"]
    assert section["verdict"] == "not equivalent" and comparison["decision"]["verdict"] == "no-promotion"
    assert section["floor"]["status"] == "measured" and section["top_k"] == 20
    assert "serve.kv_cache_dtype" in json.dumps(comparison["controlled_variables"])
    top1 = next(f for f in section["figures"] if f["figure"] == "top1_agreement")
    assert top1["status"] == "beyond" and 90 < top1["point"] < 92 and top1["floor"]["point"] == 100.0
    assert section["greedy"]["identical"] == 1 and section["greedy"]["hard"] == 0
    assert '<testsuite' in (EQUIVALENCE / "ab-smollm2-fp8kv" / "comparison.xml").read_text()


ANSWERS = GPU_TP1 / "answers-2026-12-06"


def test_one_gpu_smollm2_three_layers_are_bracketed_and_the_depth_windows_are_forced_by_logit_bias() -> None:
    """SmolLM2 on one H100, FP8 KV against auto KV, bracketed: the token layer is not equivalent, the
    task layer inconclusive at the 3-point margin over 500 paired items, and the depth layer, forced by
    logit_bias (GPU vLLM 0.24.0 masks an allowed_token_ids token that already occurs in the prompt,
    the diagnosis file beside it), scores 8 windows in each of 4 buckets to 8,110 tokens with an A/A
    floor of identical answers."""
    folder = ANSWERS / "smollm2-three-layers"
    comparison = load(folder / "comparison.json")
    assert {f["id"]: f["status"] for f in comparison["findings"]}["replay"] == "reproduced"
    section = comparison["equivalence"]
    assert section["floor"]["status"] == "measured" and section["verdict"] == "not equivalent"
    overall = section["tasks"]["blocks"][0]["overall"]
    assert overall["paired"] == 500 and (overall["b"], overall["c"]) == (32, 27) and overall["status"] == "inconclusive"
    depth = section["depth"]
    assert depth["verdict"] == "not equivalent" and "(logit_bias)" in depth["method"]
    assert [b["windows"] for b in depth["buckets"]] == [8, 8, 8, 8]
    top1 = [next(f for f in b["figures"] if f["figure"] == "top1_agreement") for b in depth["buckets"]]
    assert all(80 < f["point"] < 95 and f["floor"]["point"] == 100.0 for f in top1)
    layers = {layer["layer"]: layer["verdict"] for layer in section["promotion"]["layers"]}
    assert layers == {"tokens": "not equivalent", "tasks": "inconclusive", "depth": "not equivalent"}
    diagnosis = (folder / "forced-token-diagnosis.txt").read_text()
    assert '126 357 allowed+ids {"text": "", "finish": "length", "tokens": ["token_id:0"]' in diagnosis
    assert '126 357 allowed-neutral {"text": "", "finish": "length", "tokens": ["token_id:0"]' in diagnosis
    assert '126 357 bias100 {"text": " it", "finish": "length", "tokens": ["token_id:357"]' in diagnosis


def test_cpu_smollm2_floor_under_load_at_two_levels_is_every_answer_identical() -> None:
    """SmolLM2 on 2 CPU cores, the floor under load at 1 and 4 in flight (the probe's 4 chunks, its 8
    greedy prompts and 12 items each time): every answer identical to the answer alone."""
    folder = CPU_SMOLLM2 / "floor-2026-12-06"
    report = load(folder / "smollm2-cpu-20261206T065607Z.json")
    answers, why_not = sidecar.load(report["equivalence_probe"], folder)
    assert why_not is None, why_not
    floor = arm_floor(answers)
    assert floor["status"] == "measured" and [level["in_flight"] for level in floor["levels"]] == [1, 4]
    for level in floor["levels"]:
        assert level["answers_identical"] and level["items"]["items"] == 12 and level["items"]["changed_answers"] == 0
        assert level["probe"]["greedy_identical"] == 8 and level["probe"]["top1_agreement"]["point"] == 1.0
    assert batch_invariance({"control": floor})["status"] == "passed"


def test_one_gpu_131k_batch_token_ab_is_within_every_threshold_but_flips_cannot_be_judged() -> None:
    """The reference campaign's own variable (8,192 vs 4,096 batched tokens) on the fixture model:
    top-1 agreement 99.6%, every greedy answer identical, but one scored item per arm (the smoke)
    cannot bound the flips, so the section says inconclusive instead of equivalent."""
    comparison = load(EQUIVALENCE / "ab-131k" / "comparison.json")
    section = comparison["equivalence"]
    assert section["verdict"] == "inconclusive"
    assert section["greedy"]["identical"] == section["greedy"]["prompts"] == 8
    assert "flips" in " ".join(section["reasons"])


def test_one_gpu_smollm2_suite_names_the_conversion_that_differs_from_the_pin() -> None:
    """Converted on the host by transformers 5.17, the folder's tokenizer differs from the pinned
    5.19 conversion (same weights): the identity gate fails on the content digest, as it must."""
    report = load(EQUIVALENCE / "smollm2-gpu.json")
    gates = {g["gate"]: g for g in report["gates"]}
    assert gates["identity"]["outcome"] == "failed" and "content_digest" in gates["identity"]["reason"]
    assert gates["tools"]["outcome"] == "skipped" and "declared" in gates["tools"]["reason"]
    assert gates["quality_intelligence"]["outcome"] == "passed" and gates["load"]["outcome"] == "passed"
    assert report["decision"]["verdict"] == "no-promotion"


def _cpu_smollm2_arm(prefix: str) -> Path:
    (path,) = CPU_SMOLLM2.glob(f"{prefix}-smollm2-cpu*Z.json")
    return path


def test_cpu_smollm2_fp8_kv_is_not_equivalent_naming_its_figures_against_the_a_a_floor() -> None:
    comparison = load(CPU_SMOLLM2 / "comparison.json")
    section = comparison["equivalence"]
    assert section["verdict"] == "not equivalent" and comparison["verdict"] == "no-promotion"
    assert section["floor"]["status"] == "measured"
    figures = {f["figure"]: f for f in section["figures"]}
    top1 = figures["top1_agreement"]
    assert top1["status"] == "beyond" and top1["within_floor"] is False
    assert top1["high"] < top1["threshold"] == 97.67 and top1["floor"]["point"] == 100.0
    assert section["reasons"][0].startswith(f"top-1 agreement {top1['point']:.1f}% [")
    # 2 of 8 greedy answers diverged hard: the exact interval [3.2%, 65.1%] excludes the zero threshold
    # (a bootstrap over the 8 prompts reached 0 and left it undecided).
    assert {name for name, f in figures.items() if f["status"] == "beyond"} == {
        "top1_agreement", "ln_ppl_ratio", "rms_delta_p", "hard_divergence", "kl_lower_bound"}
    assert (figures["hard_divergence"]["events"], figures["hard_divergence"]["units"]) == (2, 8)
    assert figures["flips"]["status"] == "too few units" and figures["flips"]["units"] == 1
    assert (CPU_SMOLLM2 / "comparison.xml").read_text().count("<failure") == 6
    assert comparison["controlled_variables"]["functional"] == ["serve.kv_cache_dtype"]


def test_cpu_smollm2_control_against_its_replay_is_at_the_a_a_floor_but_flips_were_not_measured(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``vllmqual compare`` on the committed A/A pair: every probe figure at its floor (top-1 100%,
    every difference 0, 0 of 8 greedy answers diverged), but the replay ran the probe only
    (``--vllmqual-arm-marks replay=equivalence``), so no item was scored in both arms and the flips
    are not measured: ``inconclusive``, naming them. (It said ``equivalent`` while flips were
    dropped unmeasured.)"""
    out = tmp_path / "comparison.json"
    assert main(["compare", str(_cpu_smollm2_arm("A")), str(_cpu_smollm2_arm("A2")), "-o", str(out)]) == EXIT_OK
    section = load(out)["equivalence"]
    assert section["verdict"] == "inconclusive", section["reasons"]
    assert section["reasons"] == ["flips not measured: 0 items scored in both arms, at least 6 needed "
                                  "(fix: run the functional and quality gates on both arms)"]
    assert "equivalence: inconclusive: flips not measured" in capsys.readouterr().out
    figures = {f["figure"]: f for f in section["figures"]}
    assert figures["top1_agreement"]["point"] == 100.0 and figures["top1_agreement"]["status"] == "within"
    assert figures["ln_ppl_ratio"]["point"] == figures["rms_delta_p"]["point"] == 0.0
    assert figures["kl_lower_bound"]["point"] == 0.0
    hard = figures["hard_divergence"]
    assert (hard["status"], hard["events"], hard["units"]) == ("within", 0, 8)


def test_cpu_smollm2_arms_ran_their_own_gates_and_the_example_stays_small() -> None:
    ran = {prefix: sorted({g["gate"] for g in load(_cpu_smollm2_arm(prefix))["gates"]}) for prefix in ("B", "A2")}
    assert ran == {"B": ["equivalence", "smoke"], "A2": ["equivalence"]}
    assert len(load(_cpu_smollm2_arm("A"))["gates"]) == 21
    assert not (CPU_SMOLLM2 / "private").exists()
    assert max(p.stat().st_size for p in CPU_SMOLLM2.iterdir()) < 3_000_000


VERDICTS = GPU_TP1 / "verdicts-2026-12-04"


def test_one_gpu_393k_decode_at_the_largest_rung_comes_from_the_server_and_says_so() -> None:
    """At 389,283 prompt tokens the client read the answer in one burst: the rung's decode rate is
    the server's own (its decode-time histogram over the one request in flight), and says so."""
    report = load(VERDICTS / "tiny-gpu-393k-fp8kv.json")
    rung = next(r for r in report["ladder"] if r.get("prompt_tokens") == 389_283)
    assert rung["decode_source"] == "server_metrics" and rung["client_decode_not_measured"]
    assert rung["decode_tok_s"] == rung["server_decode_tok_s"] and 100 < rung["decode_tok_s"] < 1000
    campaign = load(VERDICTS / "campaign-393k.json")
    assert campaign["qualified"] == "tiny-gpu-393k-fp8kv" and campaign["exit"]["code"] == 0
    assert report["decision"]["verdict"] == "healthy"


def test_one_gpu_load_levels_are_judged_on_the_client_where_both_views_agree() -> None:
    """With 16 cores the client sees what the server sees: no level needed the server's view."""
    report = load(VERDICTS / "tiny-gpu.json")
    levels = report["load"]["levels"]
    assert {lv["level"] for lv in levels} >= {1, 8, 9, 16}
    assert all(lv["ttft_source"] == "client" and lv["tpot_source"] == "client" for lv in levels)
    assert [lv["level"] for lv in levels if lv["slo_judgement"] == "met"] == [1, 8]


def test_one_gpu_smollm2_with_the_pinned_folder_verifies_its_identity_and_climbs_the_ladder() -> None:
    """The folder converted by transformers 5.19 (carried, its prepare step overridden) is the pin:
    identity verified on the H200; the ladder passes with the template-head prefix-cache rule."""
    report = load(EQUIVALENCE / "smollm2-gpu-pinned.json")
    gates = {g["gate"]: g for g in report["gates"]}
    assert gates["identity"]["outcome"] == "passed" and gates["ladder"]["outcome"] == "passed"
    assert report["recipe"]["overrides"] and "prepare" in json.dumps(report["recipe"]["overrides"])
    assert gates["quality_long_context"]["outcome"] == "failed" and report["decision"]["verdict"] == "no-promotion"


DEPTH_393K = GPU_TP1 / "depth-393k-2026-12-05"


def test_one_gpu_393k_fp8_kv_is_scored_by_depth_to_389k_with_its_floor() -> None:
    """The 393K FP8-KV pair on one H100: ten depth buckets up to the largest ladder rung, each with
    eight scored windows; the bracketed replay reproduced the control in every bucket (the floor),
    and FP8 KV moved the top token at a few percent of positions at every depth."""
    comparison = load(DEPTH_393K / "comparison.json")
    depth = comparison["equivalence"]["depth"]
    buckets = depth["buckets"]
    assert [b["to"] for b in buckets][-1] == 389_283 and len(buckets) == 10
    assert all(b["windows"] >= 8 for b in buckets)
    for bucket in buckets:
        top1 = next(f for f in bucket["figures"] if f["figure"] == "top1_agreement")
        assert top1["floor"]["point"] == 100.0 and 95.0 < top1["point"] <= 100.0
    kl = [next(f for f in b["figures"] if f["figure"] == "kl_lower_bound")["point"] for b in buckets]
    assert all(k > 0 for k in kl)
    assert comparison["equivalence"]["verdict"] == "not equivalent" and depth["verdict"] == "not equivalent"
    arm = load(next(DEPTH_393K.glob("B-*Z.json")))
    assert arm["hardware"]["gpu_model"] == "NVIDIA H100 80GB HBM3" and arm["hardware"]["gpu_count"] == 1
    assert arm["recipe"]["content"]["serve"]["kv_cache_dtype"] == "fp8"
    assert "<testsuite" in (DEPTH_393K / "tiny-gpu-393k-depth.xml").read_text()
