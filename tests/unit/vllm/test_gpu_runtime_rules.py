"""What real GPU runs showed (vLLM 0.24.0): an engine that dies mid-request, the per-rank KV rule,
and an error event inside a 200 stream."""

from __future__ import annotations

import pytest
from support import ROOT

from pytest_vllmqual.client.results import stream_error_event
from pytest_vllmqual.gates.kv_ranks import check_rank_kv
from pytest_vllmqual.vllm.engine_death import classify_engine_death

# The shape of the 0.24.0 GPU death seen on rung 0 of a 393K ladder (2x H200, 2026-11-30): a worker's
# inductor assert, the NCCL watchdog, then the API server's EngineDeadError. Host details and
# paths planted to prove none of them reach the description.
GPU_DEATH_LOG = """\
(APIServer pid=100) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.24.0
(Worker_TP1 pid=300) /tmp/torchinductor_alice/ab/cab.py:40: unknown: block: [0,0,0], thread: [0,0,0] \
Assertion `index out of bounds: 0 <= tmp5 < 32768` failed.
(Worker_TP1 pid=300) ERROR 11-30 10:00:01 [multiproc_executor.py:1] RuntimeError: CUDA error: device-side assert triggered
(Worker_TP0 pid=299) [rank0]:[E1130 10:00:02 ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 Rank 0] \
Process group watchdog thread terminated with exception: CUDA error: device-side assert triggered node-7.corp.example
(EngineCore_DP0 pid=200) ERROR 11-30 10:00:03 [core.py:1] EngineCore encountered a fatal error.
(APIServer pid=100) ERROR 11-30 10:00:03 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: \
EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def test_engine_death_names_every_step_in_order_with_numbers() -> None:
    death = classify_engine_death(GPU_DEATH_LOG)
    assert death is not None
    assert death.kinds == ("device_assert", "nccl_abort", "engine_dead")
    assert death.root_cause == "device_assert"
    assert "bound 32,768" in death.describe()
    assert death.describe().index("device-side assert") < death.describe().index("NCCL") \
        < death.describe().index("EngineDeadError")


def test_engine_death_description_is_the_harness_words_only() -> None:
    described = str(classify_engine_death(GPU_DEATH_LOG).to_dict())  # type: ignore[union-attr]
    for private in ("alice", "corp.example", "torchinductor", "pid=", "tmp5", "ProcessGroupNCCL.cpp"):
        assert private not in described


def test_engine_death_none_for_a_healthy_log() -> None:
    healthy = (ROOT / "tests/unit/data/engine_logs/cpu_0.32.0_tp2.log").read_text()
    assert classify_engine_death(healthy) is None


def test_engine_death_reads_only_past_since() -> None:
    text = "(EngineCore pid=1) EngineDeadError\n" + "(APIServer pid=2) INFO restarted\n"
    assert classify_engine_death(text, since=text.index("(APIServer")) is None


def test_rank_kv_rule_rank_zero_only_passes_and_names_reporters() -> None:
    # GPU 0.24.0 TP=2: "Available KV cache memory" on rank 0 only.
    check = check_rank_kv([{"label": "Worker_TP0", "kv_gib": 112.4}, {"label": "Worker_TP1", "kv_gib": None}])
    assert check.ok, check.problems
    assert check.reporting == {"Worker_TP0": 112.4} and check.silent == ("Worker_TP1",)
    assert check.min_kv_gib == 112.4
    assert "not logged by Worker_TP1" in check.summary()


def test_rank_kv_rule_reference_per_rank_view() -> None:
    check = check_rank_kv([{"label": "Worker_TP0", "kv_gib": 15.31}, {"label": "Worker_TP1", "kv_gib": 15.27}])
    assert check.ok and check.min_kv_gib == 15.27
    assert check.spread_pct is not None and check.spread_pct < 0.3


def test_rank_kv_rule_fails_when_no_rank_logged() -> None:
    check = check_rank_kv([{"label": "Worker_TP0"}, {"label": "Worker_TP1", "kv_gib": None}])
    assert not check.ok and check.problems == ("no rank logged its KV cache memory",)


def test_rank_kv_rule_fails_when_ranks_disagree_beyond_tolerance() -> None:
    check = check_rank_kv([{"label": "Worker_TP0", "kv_gib": 15.3}, {"label": "Worker_TP1", "kv_gib": 10.0}],
                          tolerance_pct=5)
    assert not check.ok and "disagree" in check.problems[0]
    assert check_rank_kv([{"label": "a", "kv_gib": 15.3}, {"label": "b", "kv_gib": 10.0}],
                         tolerance_pct=50).ok


@pytest.mark.parametrize("chunk, expected", [
    ({"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}},
     {"type": "InternalServerError", "code": 500, "message": "EngineCore encountered an issue."}),
    ({"object": "error", "message": "boom", "type": "BadRequestError", "code": 400},
     {"type": "BadRequestError", "code": 400, "message": "boom"}),
    ({"id": "x", "object": "chat.completion.chunk", "choices": []}, None),
    ("[DONE]", None),
])
def test_stream_error_event(chunk: object, expected: dict[str, object] | None) -> None:
    assert stream_error_event(chunk) == expected


def test_rung_that_killed_the_server_keeps_its_harness_words_in_public() -> None:
    from pytest_vllmqual.vllm.server_messages import public_rung_error

    words = "server_dead: the server did not survive this rung (its stream carried the engine's error event)"
    assert public_rung_error(words, 200) == words
    assert public_rung_error("server_dead: node-7.corp says boom", 200) == "server_dead: the server was found dead"


def test_one_engine_dead_pattern_reads_the_log_and_a_500_body() -> None:
    """The guard's check of a 500's body and the log's death step use the same pattern."""
    from pytest_vllmqual.vllm.engine_death import ENGINE_DEAD

    assert ENGINE_DEAD.search('{"error": {"type": "EngineDeadError", "message": "..."}}')
    assert ENGINE_DEAD.search("EngineCore encountered an issue. See stack trace above.")
    assert not ENGINE_DEAD.search('{"error": {"type": "BadRequestError"}}')
    death = classify_engine_death("ERROR vllm.v1.engine.exceptions.EngineDeadError: the engine died\n")
    assert death is not None and death.kinds == ("engine_dead",)
