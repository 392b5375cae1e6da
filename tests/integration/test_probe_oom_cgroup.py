"""A real OOM kill under the probe, bounded by a cgroup memory limit (never the host's OOM killer):
the tiny model's vLLM starts inside a child memory cgroup of its own, the limit is lowered to
what the server holds plus 40 MiB, and a prompt-log-probability request of 8,000 tokens (about
120 MB more at its peak, measured) pushes it over. The guard then says the server died, killed
by the kernel's OOM killer, while answering that request, during the equivalence gate.

Skipped, with the reason, where no memory cgroup can be made (cgroup v2 or v1's ``memory``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pytest_vllmqual import QualClient, ServerHandle
from pytest_vllmqual.errors import ServerGoneError
from pytest_vllmqual.launch.cleanup.shm import reclaim_unheld, shm_names_held_by
from pytest_vllmqual.launch.oom import KernelWatch
from pytest_vllmqual.session.server import STATE_FILE, ServerGuard, death_words

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "fixtures" / "model" / "build" / "tiny-chat"
pytestmark = [pytest.mark.real_vllm]


def _make_cgroup() -> tuple[Path, str, str]:
    """A child memory cgroup: (folder, limit file, what counts as held), or skip with why."""
    for base, limit in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"), (Path("/sys/fs/cgroup"), "memory.max")):
        folder = base / f"vllmqual-oom-test-{os.getpid()}"
        try:
            folder.mkdir()
        except OSError:
            continue
        if (folder / limit).exists():
            return folder, limit, "rss" if limit == "memory.limit_in_bytes" else "anon"
        folder.rmdir()
    pytest.skip("no memory cgroup can be made here (neither cgroup v1's memory hierarchy nor v2 is writable)")


def _held(folder: Path, key: str) -> int:
    stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
    return int(stat.get(f"total_{key}", stat.get(key, 0))) + int(stat.get("total_mapped_file", stat.get("file_mapped", 0)))


def _tree_holds(folder: Path) -> set[str]:
    """The /dev/shm names the server's processes (everything in its cgroup) map or hold open."""
    return shm_names_held_by(int(pid) for pid in (folder / "cgroup.procs").read_text().split())


@contextlib.contextmanager
def _server_in(folder: Path, held: set[str]) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The server in ``folder``'s cgroup; at the end its tree is killed and what it held in /dev/shm
    (``held``, which the test adds to before the OOM kill, and what is held at the end) is removed
    once nothing holds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_USE_AOT_COMPILE": "0"}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
               "--served-model-name", "tiny", "--port", str(port), "--max-model-len", "8192", "--enforce-eager",
               "--max-num-batched-tokens", "8192"]
    proc = subprocess.Popen(["sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$@"', "sh", *command], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc, port
    finally:
        # The OOM kill leaves vLLM's message queues (psm_*, up to 240 MiB) and the killed process's
        # multiprocessing semaphore (sem.mp-*) in /dev/shm: note what the tree still holds, and remove
        # that and what it held before the kill once nobody holds it.
        held |= _tree_holds(folder)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        for pid in (folder / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while (folder / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.5)
        with contextlib.suppress(OSError):
            folder.rmdir()
        reclaim_unheld(None, held)


def test_a_probe_request_killed_by_the_oom_killer_is_said_so(tmp_path: Path) -> None:
    folder, limit, key = _make_cgroup()
    held: set[str] = set()
    with _server_in(folder, held) as (proc, port):
        deadline = time.monotonic() + 400
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "the tiny server did not start"
            time.sleep(1)
        held |= _tree_holds(folder)  # before the OOM kill: what the process it kills holds
        handle = ServerHandle(base_url=f"http://127.0.0.1:{port}", served_model_name="tiny",
                              launcher_kind="subprocess", pid=proc.pid)
        guard = ServerGuard(handle, tmp_path / STATE_FILE, probe_timeout_s=10)
        guard.kernel = KernelWatch.start(proc.pid)
        guard.gate_started("equivalence")
        (folder / limit).write_text(str(_held(folder, key) + 40 * 2**20))
        client = QualClient(handle, timeout_s=120)
        client.guard = guard
        body = {"model": "tiny", "prompt": list(range(10, 1000)) * 8 + [5] * 80, "max_tokens": 1,
                "temperature": 0, "prompt_logprobs": 20}
        with pytest.raises(ServerGoneError):
            for _ in range(3):  # the kill may come on the first or a later one
                client.post_json("/v1/completions", body, kind="completion", label="equivalence-chunk00-8000")
        state = guard.state()
        assert state["status"] == "server_dead" and state["during_gate"] == "equivalence", state
        assert (state["kernel"] or {}).get("oom_killed") is True, state
        words = death_words(state)
        assert words.startswith("the server died: killed by the kernel's OOM killer"), words
        assert "while answering the equivalence probe's 8,000-token prompt-log-probability request" in words, words
        print(words)
