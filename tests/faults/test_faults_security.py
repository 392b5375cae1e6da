"""Reliability cases 23-25 (``test_23`` … ``test_25``): redaction canaries, the API key, the bind address.

The canaries (fault_harness.CANARIES) are planted in the session's environment and printed
into the server log by the launch command. The tests first prove each canary reached a
private file (so the check is not vacuous), then that none reaches a public output: the JSON
report, the HTML page (``vllmqual report``) or the junit XML.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.fault_harness import (
    CANARIES,
    PYTHON,
    ROOT,
    Session,
    canary_env,
    derive_recipe,
    leaked_canaries,
    public_texts,
    survivors,
)

from pytest_vllmqual.recipe.loader import load_recipe


def verify(report: Path, private: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "pytest_vllmqual.cli", "verify", str(report), str(private)],
                          capture_output=True, text=True, cwd=ROOT)


def assert_artifacts_match(session: Session) -> None:
    """Every private artifact's SHA-256 in the report matches the file on disk (and a change shows)."""
    private = session.private_dir()
    listed = session.report["artifacts"]
    assert listed, "the report lists no artifacts"
    for artifact in listed:
        data = (private / artifact["name"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (artifact["size"], artifact["sha256"]), artifact
    result = verify(session.report_path, private)
    assert result.returncode == 0 and f"ok: {len(listed)} artifact(s) match" in result.stdout, result
    tampered = session.directory / "tampered"
    shutil.copytree(private, tampered)
    with open(tampered / listed[0]["name"], "ab") as handle:
        handle.write(b"x")
    result = verify(session.report_path, tampered)
    assert result.returncode == 1 and f"changed: {listed[0]['name']}" in result.stdout, result


@pytest.mark.real_vllm
def test_23_redaction_canaries(kill_session: Session, tmp_path: Path) -> None:
    """Fake tokens (hf_, sk-, VLLM_API_KEY), a hostname, an IP, a GPU UUID, a PCI bus id, a
    container id and a home path, in the environment and the server log, reach none of the
    public report, the HTML or the junit XML; the artifacts' SHA-256 match the files.

    (a) the real kill session (canaries in its env and at the top of vLLM's log);
    (b) a server that prints the canaries and exits during startup, so they sit in the log
    tail, which stays private: the report and the junit failure text name the log by SHA-256.
    """
    log = (kill_session.private_dir() / "server.log").read_text()
    assert set(leaked_canaries(log)) >= set(CANARIES), "the canaries were not planted"
    for where, text in public_texts(kill_session).items():
        assert leaked_canaries(text) == [], f"{where} leaks {leaked_canaries(text)}"
    assert_artifacts_match(kill_session)

    script = 'printf "%s\\n" "$FAULT_CANARY_LOG"; echo "serving with VLLM_API_KEY=$VLLM_API_KEY"; exit 3'
    recipe = derive_recipe(tmp_path, "tiny-cpu-canary", {"launcher": {"command": ["sh", "-c", script]}})
    session = Session(tmp_path, recipe, ["startup_probe"], env=canary_env()).run(timeout_s=120)
    error = session.report["lifecycle"]["startup_error"]
    assert "log_tail" not in error, "the log tail is server text: it stays private"
    log = (session.private_dir() / "server.log").read_bytes()
    assert set(leaked_canaries(log.decode())) >= set(CANARIES), "the canaries were not logged"
    assert error["private_log"]["sha256"] == hashlib.sha256(log).hexdigest()
    texts = public_texts(session)
    assert "canary:" not in texts["junit"] and f"sha256 {error['private_log']['sha256']}" in texts["junit"]
    for where, text in texts.items():
        assert leaked_canaries(text) == [], f"{where} leaks {leaked_canaries(text)}"
    assert_artifacts_match(session)
    assert survivors(session, session.run_id) == []


@pytest.mark.real_vllm
def test_24_api_key_never_written(kill_session: Session, hang_session: Session,
                                  fault_stream_session: Session) -> None:
    """The server's API key is generated per run (or taken from the environment) and is never
    written to a report, a junit file or a log tail, although the server logs it.

    Generated: the real kill session (the launch wrapper echoes the server's VLLM_API_KEY into
    the log). From the environment: the fault-server session, because a real vLLM never logs
    its key or the Authorization header; the fault server does, then dies, and its log tail
    stays private (the junit failure text names the server as dead, nothing of its log).
    """
    generated = kill_session.mark("start")["api_key"]
    assert generated.startswith("vq-") and generated != hang_session.mark("stopped")["api_key"], "not per run"
    assert f"VLLM_API_KEY={generated}" in (kill_session.private_dir() / "server.log").read_text()
    for where, text in public_texts(kill_session).items():
        assert generated not in text, f"the generated key is in the {where}"

    from_env = fault_stream_session.env["QUAL_SERVER_TOKEN"]
    assert fault_stream_session.mark("handle")["api_key"] == from_env, "the key was not taken from the environment"
    log = (fault_stream_session.private_dir() / "server.log").read_text()
    assert f"Authorization: Bearer {from_env}" in log, "the server did not log the key: nothing was tested"
    texts = public_texts(fault_stream_session)
    assert "last log lines" not in texts["junit"] and "fault-server:" not in texts["junit"], "a log tail went public"
    assert "Bearer" not in texts["junit"]
    for where, text in texts.items():
        assert from_env not in text, f"the key from the environment is in the {where}"
    report = fault_stream_session.report
    assert from_env not in yaml.safe_dump(report["recipe"]["content"]) and from_env not in report["run"]["reproduce"]


@pytest.mark.real_vllm
def test_25_loopback_by_default(kill_session: Session, tmp_path: Path) -> None:
    """The server binds to loopback by default (seen in /proc/net/tcp); binding anything else
    is an explicit recipe choice."""
    assert "host" not in kill_session.recipe.data["launcher"], "the kill session must use the default"
    assert kill_session.report["recipe"]["content"]["launcher"]["host"] == "127.0.0.1"
    start = kill_session.mark("start")
    assert start["addresses"] == ["127.0.0.1"], start["addresses"]
    gate = kill_session.gate("loopback_bind")
    assert gate["outcome"] == "passed" and gate["measurements"]["listen_addresses"] == ["127.0.0.1"]
    assert start["base_url"].startswith("http://127.0.0.1:")

    default = load_recipe(derive_recipe(tmp_path / "default", "tiny-cpu-default", {"launcher": {"-host": None}}).path)
    argv = default.subprocess_argv(host=default.launcher.host, port=8000)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    explicit = load_recipe(derive_recipe(tmp_path / "explicit", "tiny-cpu-explicit",
                                         {"launcher": {"host": "0.0.0.0"}}).path)
    argv = explicit.subprocess_argv(host=explicit.launcher.host, port=8000)
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
