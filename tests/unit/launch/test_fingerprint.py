"""The numerics fingerprint: read from a real process's own environment, kept verbatim in the report.

The fingerprint program runs here against a real ``sleep`` started with numerics variables in its
environment (as a server started under ``ray start`` with them would have), not this process's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.report_samples import blank_sanitizer, reference_control_run

from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.launch.fingerprint import (
    NUMERICS_ENV,
    fingerprint_key,
    from_output,
    not_measured,
    program_argv,
    run_program,
)
from pytest_vllmqual.launch.local_process import SubprocessLauncher
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.on_disk import validate_report
from pytest_vllmqual.report.public import build_public_report


@pytest.fixture()
def server_like() -> Iterator[int]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "3", "VLLM_CPU_OMP_THREADS_BIND": "0|1",
           "ATEN_CPU_CAPABILITY": "/home/someone/secret path"}
    proc = subprocess.Popen(["sleep", "30"], env=env)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_read_from_the_process_s_own_environment_verbatim(server_like: int) -> None:
    os.environ.pop("MKL_NUM_THREADS", None)
    found = run_program(program_argv(sys.executable, server_like), source="server process")
    assert found["source"] == "server process"
    assert found["env"]["OMP_NUM_THREADS"] == "3" and found["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert found["env"]["ATEN_CPU_CAPABILITY"].startswith("(not recorded")  # a path is never kept
    assert found["env"]["MKL_NUM_THREADS"] is None and sorted(found["env"]) == sorted(NUMERICS_ENV)
    assert len(found["cpu_sha256"]) == 16 and (found["build"] == "cpu" or str(found["build"]).startswith("cuda"))
    assert found["torch_version"] and found["vllm_version"]


def test_a_process_that_is_gone_reads_the_program_s_own_environment() -> None:
    found = run_program(program_argv(sys.executable, 2 ** 22 + 7), source="server process")
    assert found["source"] == "server process (the program's own environment)"


def test_not_json_and_a_failing_program_are_not_measured() -> None:
    assert from_output("Traceback ...", source="x") == not_measured("the fingerprint program gave no JSON")
    assert run_program([sys.executable, "-c", "raise SystemExit(3)"], source="x")["reason"].endswith("status 3")


def test_the_key_groups_by_every_field_and_the_gpu_and_is_empty_when_not_measured() -> None:
    base = {"source": "s", "cpu_sha256": "a" * 16, "build": "cuda 12.8", "vllm_version": "0.24.0",
            "torch_version": "2.9.0", "env": {"OMP_NUM_THREADS": None}}
    gpu = {"source": "nvml", "gpu_model": "NVIDIA H200", "driver_version": "570.1"}
    key = fingerprint_key(base, gpu)
    assert key["fields"]["accelerator"] == "NVIDIA H200" and key["fields"]["env.OMP_NUM_THREADS"] is None
    assert fingerprint_key(dict(base), dict(gpu))["sha256"] == key["sha256"]
    assert fingerprint_key(base, {**gpu, "driver_version": "575.0"})["sha256"] != key["sha256"]
    assert fingerprint_key({**base, "env": {"OMP_NUM_THREADS": "1"}}, gpu)["sha256"] != key["sha256"]
    assert fingerprint_key(not_measured("no"), gpu) == {} and fingerprint_key(None) == {}


def test_the_local_launcher_needs_the_server_s_pid(tmp_path: Path) -> None:
    launcher = SubprocessLauncher.__new__(SubprocessLauncher)
    handle = ServerHandle(base_url="http://127.0.0.1:1", served_model_name="m", launcher_kind="subprocess")
    assert launcher.fingerprint(handle)["source"] == "not measured"


def test_the_report_keeps_the_fingerprint_though_the_recipe_s_env_values_are_redacted(tmp_path: Path) -> None:
    run = reference_control_run(tmp_path / "private")
    run.recipe_content.setdefault("launcher", {})["env"] = {"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}
    run.fingerprint = {"source": "server process", "cpu_sha256": "a" * 16, "build": "cpu", "vllm_version": "0.32.0",
                       "torch_version": "2.13.0+cpu", "env": {"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}}
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    validate_report(report)
    assert report["fingerprint"]["env"]["ONEDNN_MAX_CPU_ISA"] == "avx512_core_amx"
    assert report["recipe"]["content"]["launcher"]["env"]["ONEDNN_MAX_CPU_ISA"] != "avx512_core_amx"


def test_the_server_s_interpreter_is_the_one_it_was_started_as() -> None:
    """A virtual environment's python is a link to the base interpreter (``/proc/PID/exe`` names the
    base): read through the path it was started as, the fingerprint sees the environment's packages."""
    from pytest_vllmqual.launch.cleanup.procs import process_executable

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while b"time.sleep" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)  # until the child has exec'd the interpreter
        python = process_executable(proc.pid)
        found = run_program(program_argv(str(python), proc.pid), source="server process")
    finally:
        proc.kill()
        proc.wait()
    assert python == sys.executable
    assert found["torch_version"] and found["vllm_version"] and found["build"]
