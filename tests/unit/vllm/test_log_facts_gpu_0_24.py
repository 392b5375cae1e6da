"""The engine-log parser on real GPU logs: vLLM 0.24.0 at TP=2 on 2× H200 (2026-11-30).

Captured by ``scripts/gpu/run_gpu_campaign.sh`` and sanitized by
``scripts/gpu/sanitize_gpu_log.py`` (paths only). What these logs showed that the format
strings did not: "Available KV cache memory" is logged by rank 0 alone, "GPU KV cache size" and
"Maximum concurrency" once by the EngineCore, and rank 1 logs no memory figure at all.
"""

from __future__ import annotations

import pytest
from support import UNIT_DATA

from pytest_vllmqual.gates.kv_ranks import check_rank_kv
from pytest_vllmqual.vllm.log_facts import parse_engine_log
from pytest_vllmqual.vllm.startup_failure import classify_startup_failure

LOGS = UNIT_DATA / "engine_logs"


def excerpt(name: str) -> str:
    """The log without its first line, which says where it was seen."""
    return (LOGS / name).read_text().split("\n", 1)[1]


def facts(name: str) -> dict[str, object]:
    return parse_engine_log(excerpt(name)).to_dict()


@pytest.mark.parametrize("name, tokens, concurrency, at_tokens, kv_gib, batched, kv_dtype", [
    ("gpu_0.24.0_tp2_bf16.log", 262_235_088, 8002.78, 32_768, 125.04, 8192, None),
    ("gpu_0.24.0_tp2_fp8_393k.log", 524_355_616, 1333.51, 393_216, 125.02, 4096, "fp8"),
    ("gpu_0.24.0_tp2_131k_8192.log", 262_235_088, 2000.69, 131_072, 125.04, 8192, None),
    ("gpu_0.24.0_tp2_131k_4096.log", 262_242_320, 2000.75, 131_072, 125.05, 4096, None),
])
def test_real_gpu_0_24_logs(name: str, tokens: int, concurrency: float, at_tokens: int, kv_gib: float,
                            batched: int, kv_dtype: str | None) -> None:
    got = facts(name)
    assert got["device"] == "GPU" and got["kv_pool"] == "GPU"
    assert got["vllm_version"] == "0.24.0"
    assert got["kv_cache_tokens"] == tokens
    assert got["max_concurrency"] == concurrency and got["concurrency_at_tokens"] == at_tokens
    assert got["tp_size_seen"] == 2
    ranks = got["ranks"]
    assert isinstance(ranks, list)
    assert [r["label"] for r in ranks] == ["Worker_TP0", "Worker_TP1"]
    assert ranks[0]["available_kv_gib"] == kv_gib and ranks[0]["weights_gib"] is not None
    assert ranks[1]["available_kv_gib"] is None, "rank 1 logs no KV memory on GPU 0.24.0"
    assert got["min_rank_kv_gib"] == kv_gib
    args = got["non_default_args"]
    assert isinstance(args, dict)
    assert args["max_num_batched_tokens"] == batched and args.get("kv_cache_dtype") == kv_dtype
    assert args["model"] == "<model-dir>" and "host" not in args and "port" not in args
    assert isinstance(got["init_engine_seconds"], float) and isinstance(got["compilation_seconds"], float)


def test_rank_kv_rule_on_real_gpu_ranks() -> None:
    check = check_rank_kv(facts("gpu_0.24.0_tp2_bf16.log")["ranks"])  # type: ignore[arg-type]
    assert check.ok, check.problems
    assert check.reporting == {"Worker_TP0": 125.04} and check.silent == ("Worker_TP1",)


def test_real_gpu_kv_insufficient_is_classified_with_its_numbers() -> None:
    text = excerpt("gpu_0.24.0_tp2_kv_insufficient.log")
    failure = classify_startup_failure(text)
    assert failure is not None and failure.kind == "kv_insufficient"
    assert (failure.max_seq_len, failure.needed_gib, failure.available_gib, failure.estimated_max_len) == \
        (524_288, 0.25, 0.1, 204_800)
    got = parse_engine_log(text)
    assert got.kv_cache_tokens is None and got.vllm_version == "0.24.0"
