"""Readiness detection: when the server's log said it was up against when the plugin's readiness
returned, split into the server's own answer to the last readiness completion and the harness's delay."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.fidelity_common import Progress
from pytest_vllmqual.client.probes import ServerProbe
from pytest_vllmqual.launch.readiness import ProbeAnswer
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.session.server import ServerManager

STARTUP_COMPLETE = "Application startup complete."
SERVER_LISTENING = "Starting vLLM server on"


class LogWatcher:
    """Notes (monotonic clock) when marker lines first appear in the server log; reads only new bytes."""

    def __init__(self, path: Path, markers: Sequence[str], interval_s: float = 0.005) -> None:
        self.path = path
        self.markers = list(markers)
        self.interval_s = interval_s
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-log-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        offset = 0
        pending = b""
        while not self._stop.wait(self.interval_s):
            try:
                with self.path.open("rb") as log:
                    log.seek(offset)
                    data = log.read()
            except OSError:
                continue
            if not data:
                continue
            offset += len(data)
            now = time.monotonic()
            pending = (pending + data)[-65536:]
            text = pending.decode(errors="replace")
            for marker in self.markers:
                if marker not in self.seen and marker in text:
                    self.seen[marker] = now
            if len(self.seen) == len(self.markers):
                return


def start_server(recipe: Recipe, private_dir: Path, progress: Progress) -> tuple[ServerManager, dict[str, Any]]:
    """Start the recipe's server with the plugin's launcher; time readiness against the log."""
    ready_lines: list[float] = []

    def timed_progress(line: str) -> None:
        # ServerManager reports "<recipe> ready in …" the moment wait_until_ready returns.
        if f"{recipe.name} ready in " in line:
            ready_lines.append(time.monotonic())
        progress(line)

    manager = ServerManager(recipe, run_id=f"bench-{recipe.name}-{os.getpid()}", private_dir=private_dir,
                            progress=timed_progress)
    watcher = LogWatcher(private_dir / "server.log", [SERVER_LISTENING, STARTUP_COMPLETE])
    watcher.start()
    t0 = time.monotonic()
    try:
        with timed_one_token_probes() as probes:
            manager.ensure_ready()
    except BaseException:
        manager.stop()  # a failed start is the caller's to stop (the run does it in ControllerRun.start_server)
        raise
    finally:
        done_at = time.monotonic()
        watcher.stop()
    ready_at = ready_lines[0] if ready_lines else done_at
    complete = watcher.seen.get(STARTUP_COMPLETE)
    listening = watcher.seen.get(SERVER_LISTENING)
    readiness = {
        "ensure_ready_s": done_at - t0,
        "cold_start_s": manager.facts.cold_start_s,
        "log_startup_complete_after_s": complete - t0 if complete is not None else None,
        "ready_after_startup_complete_s": ready_at - complete if complete is not None else None,
        "ready_after_listening_s": ready_at - listening if listening is not None else None,
        "facts_after_ready_s": done_at - ready_at,
        **readiness_split(complete, ready_at, probes),
    }
    return manager, readiness


def readiness_split(complete: float | None, ready_at: float,
                    probes: Sequence[tuple[float, float, bool]]) -> dict[str, Any]:
    """Readiness after the log's startup line, split into the server's answer and the harness's delay.

    ``probes`` holds each 1-token readiness completion as (sent, returned, answered 200), on the
    monotonic clock. The last one made the server ready; while it ran, the server was answering
    (with ``--enforce-eager`` vLLM on CPU runs its first forward pass only then). The rest of the
    time from the startup line to ready is the harness's: its poll interval and its other checks.
    """
    answered = [p for p in probes if p[2]]
    if complete is None or not answered:
        return {"readiness_completion_s": None, "readiness_detection_s": None, "readiness_completions": len(probes)}
    sent, returned, _ = answered[-1]
    return {"readiness_completion_s": returned - sent,
            "readiness_detection_s": (ready_at - complete) - (returned - sent),
            "readiness_completion_sent_after_startup_complete_s": sent - complete,
            "readiness_completions": len(probes)}


@contextlib.contextmanager
def timed_one_token_probes() -> Iterator[list[tuple[float, float, bool]]]:
    """Record (sent, returned, answered 200) of every readiness 1-token completion while the block
    runs. Benchmark-only wrapping of ``ServerProbe.one_token``, the probe readiness calls."""
    original = ServerProbe.one_token
    calls: list[tuple[float, float, bool]] = []

    def timed(self: ServerProbe, timeout_s: float) -> ProbeAnswer:
        sent = time.monotonic()
        answer = original(self, timeout_s)
        calls.append((sent, time.monotonic(), answer.ok))
        return answer

    ServerProbe.one_token = timed  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        ServerProbe.one_token = original  # type: ignore[method-assign]
