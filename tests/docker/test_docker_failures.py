"""Docker startup failures, classified as the subprocess launcher's are: a container that
exits during startup (KV does not fit), a Docker daemon that is not running, an image the
registry does not have. Each is one clear paragraph naming the fix, and no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docker_harness import REPOSITORY, RUN_LABEL, containers, derive_docker_recipe, engine
from support.fault_harness import Session, assert_gates_errored, startup_error


def assert_one_paragraph(session: Session, status: str, *needles: str) -> None:
    error = startup_error(session)
    assert error["status"] == status, error
    for needle in needles:
        assert needle in error["message"] + error["hint"], error
    assert "Traceback" not in session.stdout, session.tail()
    assert_gates_errored(session, status)


@pytest.mark.real_vllm
@pytest.mark.needs_docker
def test_container_exiting_during_startup_is_kv_insufficient(tmp_path: Path) -> None:
    """The container's vLLM cannot fit max_model_len in its KV cache and exits: kv_insufficient,
    with the needed and available GiB and the estimated length parsed from the container's log.
    A container that never became ready is stopped with the short grace, not the recipe's 30 s
    drain (its API server lingers after the engine failed: it was SIGKILLed after 31 s before)."""
    base = derive_docker_recipe(tmp_path / "base", "base").data
    recipe = derive_docker_recipe(tmp_path, "tiny-docker-kv", {
        "launcher": {"env": {"VLLM_CPU_OMP_THREADS_BIND": "auto", "-VLLM_CPU_KVCACHE_SPACE": None}},
        "serve": {"tensor_parallel_size": 1, "max_model_len": 32768,
                  "extra_args": [*base["serve"]["extra_args"], "--kv-cache-memory-bytes", "4194304"]},
        "startup": {"deadline_s": 600},
    })
    session = Session(tmp_path, recipe, ["startup_probe"]).run(timeout_s=700)
    error = startup_error(session)
    assert error["status"] == "kv_insufficient", error
    log = (session.private_dir() / "server.log").read_text()
    line = re.search(r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed, which is larger than the "
                     r"available KV cache memory \(([\d.]+) GiB\)", log)
    assert line, "the container's log has no KV-insufficient line"
    details = error["details"]
    assert (details["max_seq_len"], details["needed_gib"], details["available_gib"]) == (
        int(line.group(1)), float(line.group(2)), float(line.group(3)))
    assert details["estimated_max_len"] and str(details["estimated_max_len"]) in error["message"]
    assert_gates_errored(session, "kv_insufficient")
    teardown = session.report["lifecycle"]["teardown"]
    assert teardown["clean"] and teardown["containers_left"] == 0, teardown
    assert teardown["seconds"] < recipe.data["launcher"]["docker"]["stop_timeout_s"], teardown
    assert containers(engine(), f"{RUN_LABEL}={session.run_id}") == []


def test_docker_daemon_not_running_is_one_paragraph(tmp_path: Path) -> None:
    """DOCKER_HOST names a socket nothing listens on: the state of a machine whose daemon is
    stopped. Needs no engine, so it runs everywhere."""
    recipe = derive_docker_recipe(tmp_path, "tiny-docker-nodaemon", {
        "identity": {"image": f"{REPOSITORY}@sha256:{'0' * 64}"}, "launcher": {"docker": {"-image_digest_file": None}}})
    session = Session(tmp_path, recipe, ["startup_probe"],
                      env={"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}).run(timeout_s=120)
    # The socket path itself is the environment's value, which public text withholds; the
    # variable's name is what the paragraph gives the reader.
    assert_one_paragraph(session, "docker_unavailable", "no Docker engine answers", "DOCKER_HOST",
                         "scripts/docker_setup.sh")


@pytest.mark.needs_docker
def test_image_missing_from_the_registry_is_one_paragraph(tmp_path: Path) -> None:
    """A digest the local registry does not hold: the pull fails at once, naming the fix."""
    missing = f"{REPOSITORY}@sha256:{'0' * 64}"
    recipe = derive_docker_recipe(tmp_path, "tiny-docker-noimage", {
        "identity": {"image": missing}, "launcher": {"docker": {"-image_digest_file": None}}})
    session = Session(tmp_path, recipe, ["startup_probe"]).run(timeout_s=120)
    assert_one_paragraph(session, "image_unavailable", missing, "make docker-image")
