"""Committed example reports validate against the current schemas, so they cannot rot; the GPU
evidence of the real GPU runs says what they proved (hardware, runtime, the 393K ladder, the A/B)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_vllmqual.ab.compare import validate_comparison
from pytest_vllmqual.report.public import validate_report

EXAMPLES = Path(__file__).resolve().parents[2] / "reports" / "examples"
GPU = EXAMPLES / "gpu"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.json")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_committed_example_validates_against_the_current_schema(path: Path) -> None:
    data = load(path)
    kind = str(data.get("schema", "")).rsplit("/", 2)[-2] if data.get("schema") else None
    if kind == "report":
        validate_report(data)
    elif kind == "comparison":
        validate_comparison(data)
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
    # Every gate passed or is named as not applicable; nothing overclaims.
    outcomes = {g["gate"]: g["outcome"] for g in report["decision"]["gates"]}
    assert {gate for gate, outcome in outcomes.items() if outcome != "passed"} == {
        "quality_intelligence", "quality_session_recall"}
    assert report["decision"]["verdict"] == "healthy"
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
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "migrate_report_v1.py"
    spec = importlib.util.spec_from_file_location("migrate_report_v1", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_carries_report_2_forward_renaming_its_candidate_verdict() -> None:
    """report/2 called the top single-run verdict candidate; report/3 calls it promotable, nothing else moves."""
    migrate = _migrate_script().migrate
    old = load(GPU / "tiny-gpu.json")
    old["schema"], old["schema_version"] = "https://pytest-vllmqual/schemas/report/2", 2
    old["decision"] = {**old["decision"], "verdict": "candidate", "summary": "candidate; no-promotion",
                       "reasons": ["every registered gate passed; a single run is at most a candidate (...)"]}
    new = migrate(old)
    validate_report(new)
    assert (new["schema_version"], new["decision"]["verdict"], new["decision"]["summary"]) == (
        3, "promotable", "promotable; no-promotion")
    assert new["decision"]["reasons"] == ["every registered gate passed; a single run is at most promotable (...)"]
    assert {k: v for k, v in new.items() if k not in ("schema", "schema_version", "decision")} == {
        k: v for k, v in old.items() if k not in ("schema", "schema_version", "decision")}
    with pytest.raises(SystemExit, match="schema_version 3"):
        migrate(new)
