"""Build the reference campaign's A/B arms as public reports, using only the figures it published.

Run from the project root to regenerate the committed fixtures:

    .venv/bin/python tests/unit/data/reference_reports/build_reference_reports.py

Sources: the reference campaign's two reports, its control qualification (the 8,192 control:
cold start, ladder, retained HTTP 400, quality, reasoning, KV, weights) and its batch-token A/B
(the A/B table, the 4,096 candidate, and the bracketed replay of the 8,192 control, which
reproduced it). See README.md next to this file for every figure's provenance, including the
one reconstruction: the timing values carry one extra digit, chosen so that both the
published values *and* the published Change cells follow from them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.records import GateRecord, RungRecord, RunRecord
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.public import build_public_report, validate_report

ROOT = Path(__file__).resolve().parents[4]
HERE = Path(__file__).resolve().parent
RECIPES = ROOT / "fixtures" / "recipes"

# -- the published figures (one place) ------------------------------------------------------------

CONTROL = {  # 8,192 control: the control qualification and the A/B table's control column
    "min_rank_kv_gib": 15.27, "kv_cache_tokens": 283917, "max_concurrency": 2.17,
    "peak_activation_gib": 1.73, "weights_gib": 75.64,
    "largest_prompt": 119503, "ttft_s": 17.4448, "e2e_s": 17.886, "prefill_tok_s": 7537.2, "decode_tok_s": 73.857,
    "cold_start_s": 323.5,
}
CANDIDATE = {  # 4,096 candidate: the batch-token A/B
    "min_rank_kv_gib": 15.99, "kv_cache_tokens": 553243, "max_concurrency": 4.22,
    "peak_activation_gib": 1.14, "weights_gib": 75.51,
    "largest_prompt": 119503, "ttft_s": 17.3644, "prefill_tok_s": 7343.6, "decode_tok_s": 75.201,
}
PUBLISHED_ROUNDING = {  # field -> decimals the reference campaign prints it with
    "min_rank_kv_gib": 2, "max_concurrency": 2, "peak_activation_gib": 2, "weights_gib": 2,
    "ttft_s": 3, "e2e_s": 3, "prefill_tok_s": 0, "decode_tok_s": 2, "cold_start_s": 1,
}
CONFIGURED_CONTEXT = 131072
DATE = "2026-08-10"

PREFLIGHT = [
    ("smoke", "Smoke", "smoke passed"),
    ("json", "JSON", "JSON passed"),
    ("tools", "Typed tool calls", "20/20 typed tool calls"),
    ("streaming_tool", "Streaming tool", "streaming tool call passed"),
    ("tool_continuation", "Tool-result continuation", "tool-result continuation passed"),
    ("responses", "Responses API", "Responses API passed at high reasoning"),
]


def _recipe(name: str) -> tuple[dict[str, Any], str]:
    data = (RECIPES / f"{name}.yaml").read_bytes()
    content: dict[str, Any] = yaml.safe_load(data.decode("utf-8"))
    return content, hashlib.sha256(data).hexdigest()


def _gate(arm: str, name: str, title: str, summary: str, *, case: str = "", **measurements: Any) -> GateRecord:
    markers = ["preflight"] if name in {p[0] for p in PREFLIGHT} else []
    return GateRecord(nodeid=f"suites::test_{name}{case}", gate=name, title=title, markers=markers, arm=arm, outcome="passed",
                      summary=summary, measurements=measurements)


def _preflight(arm: str) -> list[GateRecord]:
    gates = []
    for name, title, summary in PREFLIGHT:
        extra = {"passed": 20, "total": 20} if name == "tools" else {}
        gates.append(_gate(arm, name, title, summary, **extra))
    return gates


def _largest(figures: dict[str, Any], index: int) -> RungRecord:
    return RungRecord(index=index, target=119500, target_label="119.5K", prompt_tokens=figures["largest_prompt"],
                      calibration_error=figures["largest_prompt"] - 119500, status_code=200,
                      ttft_s=figures["ttft_s"], e2e_s=figures.get("e2e_s"), prefill_tok_s=figures["prefill_tok_s"],
                      decode_tok_s=figures["decode_tok_s"], ok=True, post_probe_smoke="passed", health_after="ok")


def _engine(figures: dict[str, Any]) -> dict[str, Any]:
    rank = {"weights_gib": figures["weights_gib"], "peak_activation_gib": figures["peak_activation_gib"]}
    return {"device": "gpu", "kv_pool": "GPU", "kv_cache_tokens": figures["kv_cache_tokens"],
            "max_concurrency": figures["max_concurrency"], "concurrency_at_tokens": CONFIGURED_CONTEXT,
            "min_rank_kv_gib": figures["min_rank_kv_gib"], "tp_size_seen": 2,
            "ranks": [{"rank": 0, **rank}, {"rank": 1, **rank}]}


def _identity(recipe: dict[str, Any]) -> dict[str, Any]:
    ident = recipe["identity"]
    digest = ident["image"].split("@", 1)[1]
    expected = {"checkpoint": ident["checkpoint"], "revision": ident["revision"], "image": ident["image"],
                "runtime_version": ident["runtime_version"], "served_model_name": ident["served_model_name"],
                "max_model_len": CONFIGURED_CONTEXT, "tensor_parallel_size": 2}
    checks = [
        {"field": "runtime_version", "expected": ident["runtime_version"], "observed": ident["runtime_version"],
         "ok": True},
        {"field": "served_model", "expected": ident["served_model_name"], "observed": ident["served_model_name"],
         "ok": True},
        {"field": "max_model_len", "expected": CONFIGURED_CONTEXT, "observed": CONFIGURED_CONTEXT, "ok": True},
        {"field": "tensor_parallel_size", "expected": 2, "observed": 2, "ok": True},
        {"field": "image_digest", "expected": digest, "observed": digest, "ok": True},
    ]
    observed = {"runtime_version": ident["runtime_version"], "served_model": ident["served_model_name"],
                "max_model_len": CONFIGURED_CONTEXT, "tensor_parallel_size": 2, "image_digest": digest}
    return {"status": "verified", "expected": expected, "observed": observed, "checks": checks}


HARDWARE = {"source": "nvml", "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Max-Q", "gpu_count": 2,
            "gpu_memory_gib": None, "interconnect": "PCIe"}


def control_run() -> RunRecord:
    """The 8,192 control as the reference campaign's control qualification publishes it."""
    recipe, sha = _recipe("131k-control")
    arm = "131k-control"
    f = CONTROL
    gates = [
        _gate(arm, "cold_start", "Cold managed start", f"passed health in {f['cold_start_s']} seconds",
              cold_start_s=f["cold_start_s"]),
        _gate(arm, "identity", "Identity", "verified"),
        _gate(arm, "reasoning_fingerprints", "Reasoning prompt contract",
              "low/high/max fingerprints passed at 6/85/98 prompt tokens", low=6, high=85, max=98),
        *_preflight(arm),
        _gate(arm, "quality_intelligence", "Intelligence", "3/3", case="[check-1]", passed=3, repeat=3),
        _gate(arm, "quality_intelligence", "Intelligence", "3/3", case="[check-2]", passed=3, repeat=3),
        _gate(arm, "quality_session_recall", "Session recall", "3/3", passed=3, repeat=3),
        _gate(arm, "quality_tools", "Tools, repeated", "3/3", passed=3, repeat=3),
        _gate(arm, "quality_long_context", "32K context", "32K context pass"),
        _gate(arm, "ladder", "Near-limit capacity", "largest actual prompt 119,503; TTFT 17.445 s",
              largest_prompt_tokens=f["largest_prompt"]),
        _gate(arm, "kv_pool", "KV pool", "283,917 tokens, reported 2.17x at 131,072 tokens",
              kv_cache_tokens=f["kv_cache_tokens"]),
    ]
    ladder = [
        RungRecord(index=0, target=117500, target_label="117.5K", prompt_tokens=87207, calibration_error=87207 - 117500,
                   status_code=200, ok=True, post_probe_smoke="passed", health_after="ok"),
        RungRecord(index=1, target=118500, target_label="118.5K", prompt_tokens=118830,
                   calibration_error=118830 - 118500, status_code=200, ok=True, post_probe_smoke="passed",
                   health_after="ok"),
        RungRecord(index=2, target=120000, target_label="120K", status_code=400, ok=False,
                   error="HTTP 400 at the first 120,000-target context attempt", post_probe_smoke="passed",
                   health_after="ok"),
        _largest(f, 3),
        RungRecord(index=4, target=120000, target_label="120K replay", prompt_tokens=88939,
                   calibration_error=88939 - 120000, status_code=200, ok=True, post_probe_smoke="passed",
                   health_after="ok"),
    ]
    return RunRecord(run_id="r33-131k-control-8192", arm=arm, recipe_name="131k-control",
                     recipe_path="fixtures/recipes/131k-control.yaml", recipe_sha256=sha, recipe_content=recipe,
                     started_utc=f"{DATE}T08:00:00Z", finished_utc=f"{DATE}T09:00:00Z", mode="managed",
                     status="complete", reproduce="pytest --recipe=131k-control", identity=_identity(recipe),
                     hardware=HARDWARE, engine=_engine(f),
                     lifecycle={"launcher": "docker", "cold_start_s": f["cold_start_s"], "startup_status": "ready",
                                "last_phase": "ready", "teardown": None},
                     gates=gates, ladder=ladder)


def _ab_arm(name: str, figures: dict[str, Any], run_id: str, started: str, finished: str) -> RunRecord:
    """An arm of the batch-token A/B: preflight 6/6, the 119.5K capacity request, the KV pool."""
    recipe, sha = _recipe(name)
    gates = [
        _gate(name, "identity", "Identity", "verified"),
        *_preflight(name),
        _gate(name, "ladder", "Near-limit capacity",
              "passed the 117.5K, 118.5K and 119.5K context-target ladder; largest actual prompt 119,503",
              largest_prompt_tokens=figures["largest_prompt"]),
        _gate(name, "kv_pool", "KV pool", f"{figures['kv_cache_tokens']:,} tokens, reported "
              f"{figures['max_concurrency']:.2f}x at 131,072 tokens", kv_cache_tokens=figures["kv_cache_tokens"]),
    ]
    return RunRecord(run_id=run_id, arm=name, recipe_name=name, recipe_path=f"fixtures/recipes/{name}.yaml",
                     recipe_sha256=sha, recipe_content=recipe, started_utc=started, finished_utc=finished,
                     mode="managed", status="complete", reproduce=f"pytest --recipe={name}",
                     identity=_identity(recipe), hardware=HARDWARE, engine=_engine(figures),
                     lifecycle={"launcher": "docker", "cold_start_s": None, "startup_status": "ready",
                                "last_phase": "ready", "teardown": None},
                     gates=gates, ladder=[_largest(figures, 0)])


def candidate_run() -> RunRecord:
    return _ab_arm("131k-4096", CANDIDATE, "r33-131k-4096", f"{DATE}T10:00:00Z", f"{DATE}T11:00:00Z")


def replay_run() -> RunRecord:
    """The bracketed replay, which reproduced the 8,192 control: the control's figures, run after the candidate."""
    return _ab_arm("131k-control", CONTROL, "r33-131k-control-8192-replay", f"{DATE}T12:00:00Z",
                   f"{DATE}T13:00:00Z")


def build() -> dict[str, dict[str, Any]]:
    out = {}
    for filename, run in (("control-8192.json", control_run()), ("candidate-4096.json", candidate_run()),
                          ("replay-8192.json", replay_run())):
        report = with_decision(build_public_report(run, sanitizer=Sanitizer(environ={}, hostname="", username=""), artifacts=[],
                                     tool_version="0.1.0"))
        validate_report(report, where=filename)
        out[filename] = report
    return out


def main() -> None:
    for filename, report in build().items():
        (HERE / filename).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {HERE / filename}")


if __name__ == "__main__":
    main()
