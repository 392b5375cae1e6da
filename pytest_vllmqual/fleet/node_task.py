"""What a fleet job does on its node: the same pytest run a person types, in a work folder there.

``run_on_node`` is the body of the Ray task (``fleet.cluster`` wraps it); it needs no Ray
itself. It starts ``python -m pytest <the package's suites> --recipe ... --junitxml ...`` (the
folder ``--pyargs pytest_vllmqual.suites`` names) in its own process group, hands that group to
the worker's watchdog (``launch.cleanup.watchdog``, one per Ray worker), which ends it when the worker
dies, and waits up to the job's deadline. What travels back is only the
sanitized report, its HTML page, the junit file and the probe sidecar the report names (token IDs
and numbers, compared across nodes); the private artifacts stay in the work folder, named by the
run id and the SHA-256 of their manifest.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_vllmqual.hashing import sha256_file, sha256_hex
from pytest_vllmqual.launch.cleanup.procs import (
    environment_at_start,
    group_alive,
    signal_group,
    terminate_then_kill,
)
from pytest_vllmqual.launch.cleanup.watchdog import WATCHDOG as THIS_PROCESS_WATCHDOG
from pytest_vllmqual.launch.cleanup.watchdog import Watchdog

__all__ = ["NODE_LABEL", "SET_BY_RAY", "TERM_GRACE_S", "WATCHDOG", "WORKDIR_ENV", "assigned_gpu_override",
           "job_environment", "node_key", "private_manifest", "pytest_command", "run_on_node", "work_root"]

WORKDIR_ENV = "VLLMQUAL_FLEET_WORKDIR"
NODE_LABEL = "vllmqual-node"
"""The Ray node label (``ray start --labels='{"vllmqual-node": "NAME"}'``) that names a node across restarts."""
TERM_GRACE_S = 20.0


def work_root() -> Path:
    """Where a node keeps its fleet work folders: ``$VLLMQUAL_FLEET_WORKDIR``, else the user cache."""
    configured = os.environ.get(WORKDIR_ENV)
    if configured:
        return Path(configured)
    from pytest_vllmqual.layout import user_cache_root

    return user_cache_root() / "vllmqual" / "fleet"


def assigned_gpu_override(gpus: int, cuda_visible_devices: str | None) -> list[str]:
    """Pin the run to the GPUs Ray gave this task (``CUDA_VISIBLE_DEVICES``, device indexes).

    The recipe's GPU list then names those GPUs, so the plugin's NVML exclusivity preflight checks
    the GPUs this job holds (not the node's first TP-size GPUs, which may be another job's) and the
    docker launcher hands exactly those to the container. Nothing when the job holds no GPU, or
    when the devices are given as UUIDs (then the recipe's own setting stands).
    """
    ids = [part.strip() for part in (cuda_visible_devices or "").split(",") if part.strip()]
    if gpus <= 0 or not ids or not all(part.isdigit() for part in ids):
        return []
    return ["launcher.docker.gpus=" + "[" + ",".join(f'"{i}"' for i in ids) + "]"]


def plugin_args() -> list[str]:
    """``-p pytest_vllmqual.plugin`` where the package is importable but not installed (a checkout
    on PYTHONPATH, as on an offline GPU host): pytest then knows no entry point that loads the
    plugin and would refuse ``--recipe``. Where it is installed, naming it again is an error."""
    from importlib.metadata import entry_points

    installed = any(ep.value == "pytest_vllmqual.plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_vllmqual.plugin"]


def pytest_command(request: dict[str, Any], workdir: Path) -> list[str]:
    """The argv of the job's pytest run (what a person runs by hand, plus its output places)."""
    from pytest_vllmqual.layout import suites_dir

    # The gates of this very package (`pytest --pyargs pytest_vllmqual.suites` names the same folder
    # in an install; in a checkout, --pyargs could find another checkout's suites on sys.path).
    argv = [sys.executable, "-m", "pytest", str(suites_dir()),
            "--recipe", str(request["recipe"]),
            f"--vllmqual-reports-dir={workdir / 'reports'}", f"--junitxml={workdir / 'junit.xml'}",
            "-p", "no:cacheprovider", "-q", "-rA", *plugin_args()]
    recipes_dir = request.get("recipes_dir")
    if recipes_dir and Path(recipes_dir).is_dir():
        argv.append(f"--vllmqual-recipes-dir={recipes_dir}")
    gpu_pin = assigned_gpu_override(int(request.get("gpus") or 0), os.environ.get("CUDA_VISIBLE_DEVICES"))
    for override in [*(request.get("overrides") or ()), *gpu_pin]:
        argv += ["--vllmqual-set", str(override)]
    argv += list(request.get("selection") or ())
    return argv


def private_manifest(folder: Path) -> dict[str, Any]:
    """The private folder as a count and the SHA-256 of its manifest (``sha256  name`` lines)."""
    if not folder.is_dir():
        return {"files": 0, "manifest_sha256": None}
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = sha256_file(path)
        lines.append(f"{digest}  {path.relative_to(folder).as_posix()}")
    return {"files": len(lines), "manifest_sha256": sha256_hex("\n".join(lines))}


_Watchdog = Watchdog
WATCHDOG = THIS_PROCESS_WATCHDOG
"""This worker's one watchdog (``launch.cleanup.watchdog``), started with its first job: Ray runs
task after task in the same worker, so it outlives a job, and a job start spawns only its own
pytest; the job's process group is registered on the watchdog's pipe."""


def _wait_for(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """``proc.wait(timeout)`` woken the moment the process ends (a pidfd), not on Popen's 50 ms poll."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        proc.wait(timeout=timeout_s)
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)
    if not ready:
        raise subprocess.TimeoutExpired(proc.args, timeout_s)
    proc.wait(timeout=5)


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the pytest group, SIGKILL what is left after the grace period."""
    def alive() -> bool:
        proc.poll()
        return group_alive(proc.pid)

    terminate_then_kill(lambda sig: signal_group(proc.pid, sig), alive, grace_s=TERM_GRACE_S, poll_s=0.2)


def _newest_report(reports: Path) -> Path | None:
    candidates = [p for p in reports.glob("*.json")
                  if not p.name.startswith(("comparison-", "campaign-"))] if reports.is_dir() else []
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _read_text(path: Path | None) -> str | None:
    if path is None or not path.is_file():
        return None
    return path.read_text(encoding="utf-8", errors="replace")


def _sidecar_bytes(report_text: str | None, report_path: Path | None) -> bytes | None:
    """The probe sidecar the report names (token IDs and numbers, the item bank's scrubbed answers),
    as written; it travels back so the fleet can compare the nodes' answers."""
    import json

    if not report_text or report_path is None:
        return None
    try:
        name = str((json.loads(report_text).get("equivalence_probe") or {}).get("file") or "")
    except (ValueError, AttributeError):
        return None
    path = report_path.parent / name
    return path.read_bytes() if name and Path(name).name == name and path.is_file() else None


def node_key(labels: dict[str, str] | None = None) -> str:
    """This node's stable name across restarts: the operator's ``vllmqual-node`` Ray label, else a
    salted hash of the machine id (``machine-`` and 12 hex); never a host name or address."""
    from pytest_vllmqual.hashing import sha256_hex

    given = (labels or {}).get(NODE_LABEL)
    if given:
        return str(given)
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            machine = Path(path).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if machine:
            return "machine-" + sha256_hex(f"vllmqual-fleet-node:{machine}")[:12]
    return "machine-unknown"


def _outputs(workdir: Path) -> dict[str, Any]:
    report_path = _newest_report(workdir / "reports")
    report_text = _read_text(report_path)
    run_id = None
    if report_text:
        import json

        try:
            run_id = (json.loads(report_text).get("run") or {}).get("id")
        except (ValueError, AttributeError):
            run_id = None
    private = private_manifest(workdir / "reports" / "private" / run_id) if run_id else {"files": 0,
                                                                                        "manifest_sha256": None}
    return {
        "report_text": report_text,
        "sidecar_bytes": _sidecar_bytes(report_text, report_path),
        "html_text": _read_text(report_path.with_suffix(".html") if report_path else None),
        "junit_text": _read_text(workdir / "junit.xml"),
        "run_id": run_id,
        "private": private,
    }


SET_BY_RAY = ("OMP_NUM_THREADS",)
"""Variables Ray sets in its worker for each task when the node's environment leaves them unset
(OpenMP threads: the task's CPU count, at least 1). They are Ray's choice for its own workers, not
the node's: the job's pytest and server get the node's environment without them, so a server sees
the thread count its host would give it, and a node whose environment sets one differs by it."""


def job_environment() -> dict[str, str]:
    """This worker's environment for the job's pytest, less what Ray set in it (``SET_BY_RAY``: a
    variable absent from the environment this worker was started with)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = environment_at_start()
    if started is not None:
        for name in SET_BY_RAY:
            if name not in started:
                env.pop(name, None)
    return env


def run_on_node(request: dict[str, Any]) -> dict[str, Any]:
    """Run one job attempt here; returns the exit code, the public outputs and the private manifest."""
    workdir = work_root() / str(request["fleet_run_id"]) / str(request["attempt_id"])
    (workdir / "reports").mkdir(parents=True, exist_ok=True)
    project = request.get("project_dir")
    cwd = Path(project) if project and Path(project).is_dir() else workdir
    given = request.get("argv")  # a stand-in command (the fleet's benchmark and tests): {reports} is filled in
    argv = [str(a).replace("{reports}", str(workdir / "reports")) for a in given] if given else \
        pytest_command(request, workdir)
    started = time.monotonic()
    raylet = os.getppid()  # Ray's workers are the raylet's children: a new parent means the node died
    with open(workdir / "pytest.log", "ab") as log:
        proc = subprocess.Popen(argv, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=job_environment())
    WATCHDOG.watch_group(proc.pid)
    timed_out = False
    try:
        _wait_for(proc, max(1.0, float(request["deadline_epoch"]) - time.time()))
    except subprocess.TimeoutExpired:
        timed_out = True
        _end_group(proc)
        proc.poll()
    finally:
        if group_alive(proc.pid):
            _end_group(proc)
        WATCHDOG.done("group", proc.pid)
    result = _outputs(workdir)
    result.update(exit_code=proc.returncode, timed_out=timed_out, elapsed_s=round(time.monotonic() - started, 3),
                  node_lost=os.getppid() != raylet)
    return result
