"""The whole qualification in a container: `pytest suites --recipe=tiny-docker`, run once.

The image is first removed from the engine (it stays in the local registry), so the run
pulls it by digest, with progress per layer, as a GPU operator's first run does. Every test
here asserts on what that one run left behind: the report, its output, the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import httpx
import pytest
from docker_harness import (
    DIGEST_FILE,
    IMAGE_REMOVAL_TIMEOUT_S,
    REPOSITORY,
    RUN_LABEL,
    containers,
    engine,
    image_reference,
)
from support.gatekit import run_shm_files, wait_for

from pytest_vllmqual.gates.registry import COMPARISON_GATES
from pytest_vllmqual.report.public import validate_report

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.real_vllm, pytest.mark.needs_docker]
SHORTER_CONTEXT = ["--vllmqual-set", "serve.max_model_len=8192",
                   "--vllmqual-set", "gates.capacity.min_largest_prompt=8000",
                   "--vllmqual-set", "gates.quality.long_context_tokens=6000"]
"""Every gate, at an 8,192-token context instead of 32,768: the long prompts are the managed
tiny-cpu run's to prove (tests/integration/test_tiny_cpu_session.py); here the subject is the
pull by digest, the container's start, identity, every gate and teardown. A 30,000-token
prefill takes 25-35 s on a 2-core machine without bf16 units, and the full ladder would add four."""
ONE_LOAD_LEVEL = ["--vllmqual-set", "gates.load.levels=[4]"]
"""The load gate at its top level only (4 in flight, 32 requests): here the subject is that the gate
runs against the container, not the server's curve, which the managed tiny-cpu run measures at
every level; about 5 s instead of 21-23 s (2026-12-07, the gate alone on the tiny-cpu recipe)."""
SINGLE_RUN_GATES = ["-m", "not items and not equivalence and not load_floor"]
"""Every gate a single run's verdict reads: the gates only a comparison judges (the item bank, the
tool-call replay, the equivalence probe, the floor under load; ``COMPARISON_GATES``) are the managed tiny-cpu run's to
prove on the real server (tests/integration/test_items_tiny.py, test_tool_replay.py); nothing here
asserts on them, and they took about a third of this session in CI."""


@dataclass
class DockerRun:
    returncode: int
    output: str
    report: dict[str, Any]
    started_at: float
    wall_s: float


@pytest.fixture(scope="module")
def docker_run(tmp_path_factory: pytest.TempPathFactory, docker_image: str) -> DockerRun:
    """Owns its server: the managed container run is what is tested (pull, start, gates, teardown).
    Asks for ``docker_image`` (tests/docker/conftest.py) so the image is waited for before it."""
    client = engine(IMAGE_REMOVAL_TIMEOUT_S)
    try:  # only the engine's copy, every tag of it: the registry keeps the image, the run pulls it back
        client.images.remove(client.images.get(docker_image).id, force=True)
    except docker.errors.ImageNotFound:
        pass
    reports = tmp_path_factory.mktemp("docker-reports")
    started_at = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--recipe=tiny-docker", f"--vllmqual-reports-dir={reports}",
         "-p", "no:cacheprovider", "-q", *SHORTER_CONTEXT, *ONE_LOAD_LEVEL, *SINGLE_RUN_GATES],
        cwd=ROOT, capture_output=True, text=True, timeout=1500, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    output = proc.stdout + proc.stderr
    paths = sorted(reports.glob("tiny-docker-*.json"))
    assert paths, f"no report written; pytest said:\n{output[-6000:]}"
    return DockerRun(proc.returncode, output, json.loads(paths[-1].read_text()), started_at,
                     time.time() - started_at)


def test_every_gate_tiny_cpu_passes_passes_in_the_container(docker_run: DockerRun) -> None:
    assert docker_run.returncode == 0, docker_run.output[-8000:]
    assert docker_run.report["run"]["status"] == "complete"
    assert "functional preflight: 6/6" in docker_run.output
    outcomes = {g["gate"]: g["outcome"] for g in docker_run.report["gates"]}
    assert not [g for g, o in outcomes.items() if o not in ("passed", "skipped")], outcomes
    assert not set(COMPARISON_GATES) & set(outcomes), outcomes  # SINGLE_RUN_GATES reached the session
    for gate in docker_run.report["gates"]:  # skipped only where tiny-cpu skips too: not applicable
        if gate["outcome"] == "skipped":
            assert "not applicable" in (gate["reason"] or ""), gate
    passed = {g for g, o in outcomes.items() if o == "passed"}
    assert len(passed) >= 15 and {"smoke", "tools", "streaming_tool", "reasoning_fingerprints"} <= passed, outcomes
    validate_report(docker_run.report)


def test_identity_checks_the_running_containers_digest(docker_run: DockerRun) -> None:
    identity = docker_run.report["identity"]
    assert identity["status"] == "verified", identity
    digest = DIGEST_FILE.read_text().strip()
    check = next(c for c in identity["checks"] if c["field"] == "image_digest")
    assert check["ok"] is True and check["expected"] == digest and check["observed"].endswith(digest), check
    assert identity["observed"]["tensor_parallel_size"] == 2 and identity["observed"]["runtime_version"] == "0.32.0"
    assert identity["observed"]["max_model_len"] == 8192  # SHORTER_CONTEXT reached the container's server


def test_engine_facts_come_from_the_containers_log(docker_run: DockerRun) -> None:
    engine_facts = docker_run.report["engine"]
    assert engine_facts["device"] == "CPU" and engine_facts["kv_cache_tokens"] > 32768
    assert [(r["rank"], r["process"]) for r in engine_facts["ranks"]] == [(0, "Worker_TP0"), (1, "Worker_TP1")]
    assert docker_run.report["lifecycle"]["launcher"] == "docker"


def test_pull_shows_each_layer_and_start_names_container_and_log(docker_run: DockerRun) -> None:
    out = docker_run.output
    assert f"pulling {image_reference()}" in out, out[-4000:]
    layers = {line.split("pull layer ", 1)[1].split(":", 1)[0] for line in out.splitlines() if "pull layer " in line}
    assert len(layers) >= 2, f"progress for {len(layers)} layer(s) only"  # rootfs and venv
    assert any("Downloading" in line and "MiB (" in line for line in out.splitlines())
    start = next(line for line in out.splitlines() if "started for recipe tiny-docker" in line)
    run_id = docker_run.report["run"]["id"]
    assert f"container vllmqual-{run_id}" in start and "server.log" in start and "docker logs" in start, start


def test_the_pulled_image_is_the_one_built_and_its_layers_were_pushed_uncompressed(docker_run: DockerRun) -> None:
    """fixtures/docker/assemble_image.py pushed the layers as the tars it wrote: the registry's
    manifest lists them with the uncompressed media type, and what the run pulled by that digest has
    the image ID (the config's digest) the manifest names."""
    host, repo = REPOSITORY.replace("localhost", "127.0.0.1").split("/", 1)
    manifest = httpx.get(f"http://{host}/v2/{repo}/manifests/{DIGEST_FILE.read_text().strip()}",
                         headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"}).json()
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/vnd.docker.image.rootfs.diff.tar"] * 2
    assert engine().images.get(image_reference()).id == manifest["config"]["digest"]


def test_teardown_leaves_no_container_and_no_shm_file(docker_run: DockerRun) -> None:
    run_id = docker_run.report["run"]["id"]
    assert containers(engine(), f"{RUN_LABEL}={run_id}") == []
    teardown = docker_run.report["lifecycle"]["teardown"]
    assert teardown["clean"] and teardown["containers_left"] == 0 and teardown["shm_leftover_files"] == 0, teardown
    assert teardown["shm_reclaim"] is not None and teardown["shm_reclaim"]["summary"].endswith("clean postcondition")
    # a few seconds' grace: the files of a server that something else on the machine killed go
    # when its own teardown reclaims them
    assert wait_for(lambda: run_shm_files(docker_run.started_at - 1) == [], 10), run_shm_files(docker_run.started_at - 1)
