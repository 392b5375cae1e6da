"""A real multi-node Ray cluster on one machine, for the fleet's tests and its benchmark.

Test scaffolding, not part of the package: it patches a private function of Ray (below), which
no user's cluster should run with. Process facts come from psutil.

Every node is its own raylet (``ray start --head`` once, then ``ray start --address`` per
node), each with its own CPU count, GPUs (logical), custom resources and labels, all under one
``--temp-dir`` of this cluster's own. It is stopped by its own processes only (those whose
command line names that temp dir, or this cluster's port, and their children), never with
``ray stop`` (which ends every Ray process on the machine). ``kill_node`` SIGKILLs one node's
raylet: the node dies mid-job as a crashed host would.

Every process of the cluster listens on loopback only. Ray's servers (the GCS, each raylet, the
workers, the object manager) bind 127.0.0.1 exactly when their node's address is the string
``127.0.0.1``, and on every interface otherwise. ``ray start`` itself never lets that string
through on Linux: it hands ``--node-ip-address`` and ``--address`` to
``ray._private.services.resolve_ip_for_localhost``, which swaps a loopback name for the
machine's outward address (the switch that would keep it,
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, also makes ``ray start --address`` refuse to add a
node). So each ``ray start`` here runs through a three-line launcher (``RAY_START``) that
leaves loopback names as given, and the driver connects through
``fleet.cluster.loopback_kept``, which does the same around ``ray.init``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

__all__ = ["RAY_START", "LocalRayCluster", "NodeSpec", "listening_sockets"]

RAY_START = ("import sys\nimport ray._private.services as services\n"
             "services.resolve_ip_for_localhost = lambda host: host\n"
             "from ray.scripts.scripts import main\nsys.argv[0] = 'ray'\nsys.exit(main())\n")
"""``python -c RAY_START start ...`` is ``ray start ...`` with 127.0.0.1 kept as the node's address."""


@dataclass(frozen=True)
class NodeSpec:
    """One worker node: its cores, logical GPUs, custom resources and labels; ``env`` and ``prefix``
    (``taskset -c 0``) are the node's own environment at ``ray start``, which its raylet, workers,
    jobs and servers inherit (a host set up differently)."""

    cpus: int = 2
    gpus: int = 0
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    prefix: tuple[str, ...] = ()


NO_LOG_MONITOR = ("--include-log-monitor=false",)
"""No node runs Ray's log monitor, which reads every worker's log files and sends their lines to the
drivers: the fleet's driver asks for none of them (``log_to_driver=False``), and each node's monitor
polled for as long as its cluster ran (in a CI run on a 2-core machine, 2026-12-07, Ray's log monitors
and agents took 153 CPU-s with it, 39 without)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def _address(ip: str, port: int) -> str:
    """``127.0.0.1:8080``; IPv6 (incl. IPv4-mapped) in brackets: ``[::1]:8080``."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def listening_sockets(pids: list[int]) -> list[str]:
    """The TCP addresses (``host:port``) these processes listen on."""
    found: set[str] = set()
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        found.update(_address(c.laddr.ip, c.laddr.port) for c in connections
                     if c.status == psutil.CONN_LISTEN and c.laddr)
    return sorted(found)


class LocalRayCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (or use it as a context manager)."""

    def __init__(self, nodes: list[NodeSpec], *, head_cpus: int = 0, env: dict[str, str] | None = None) -> None:
        self.nodes = nodes
        self.head_cpus = head_cpus
        self.port = _free_port()
        self.temp_dir = Path(tempfile.mkdtemp(prefix="vqray-", dir="/tmp"))
        # HOME is the cluster's own folder: Ray 2.59+ writes a token to ~/.ray/auth_token when a
        # local ray.init() starts a cluster, and a head and its nodes that disagree on that file
        # refuse each other; this cluster's processes then all see the same (absent) token.
        # RAY_worker_niceness=0: Ray starts its workers at nice 15 by default, so a job's server ran
        # at the lowest priority on a machine that was doing anything else (measured beside a
        # second test worker: each boot took minutes); a qualification measures the server as it
        # runs when it is alone, and the job runs nothing else.
        # No idle workers started ahead of a task (RAY_enable_worker_prestart, RAY_prestart_worker_first_driver):
        # the jobs start one process each (Ray's worker processes took 74 CPU-s of a CI run with the
        # prestart and 69 without, 2026-12-07: one run each, little either way).
        self.env = {**os.environ, **(env or {}), "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(self.temp_dir),
                    "RAY_worker_niceness": "0", "RAY_enable_worker_prestart": "0",
                    "RAY_prestart_worker_first_driver": "0"}
        self.address = ""

    def _ray(self, *args: str, node: NodeSpec | None = None) -> None:
        # A driver's RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 must not reach ray start: it refuses to add nodes then.
        env = {**self.env, **(node.env if node else {}), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
        prefix = list(node.prefix) if node else []
        proc = subprocess.run([*prefix, sys.executable, "-c", RAY_START, "start", *args, "--node-ip-address=127.0.0.1",
                               f"--temp-dir={self.temp_dir}", "--disable-usage-stats", *NO_LOG_MONITOR], env=env,
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed: {proc.stderr[-2000:]}")

    def start(self) -> LocalRayCluster:
        self._ray("--head", f"--port={self.port}", f"--num-cpus={self.head_cpus}", "--num-gpus=0",
                  "--include-dashboard=false")
        self.address = f"127.0.0.1:{self.port}"
        for node in self.nodes:
            args = [f"--address={self.address}", f"--num-cpus={node.cpus}", f"--num-gpus={node.gpus}"]
            if node.resources:
                args.append(f"--resources={json.dumps(node.resources)}")
            if node.labels:
                args.append(f"--labels={json.dumps(node.labels)}")
            self._ray(*args, node=node)
        return self

    def node_addresses(self) -> set[str]:
        """The node addresses Ray's processes were given (``--node_ip_address=`` on their command lines)."""
        found = set()
        for pid in self.pids():
            for part in _cmdline(pid).split():
                if part.startswith(("--node_ip_address=", "--node-ip-address=")):
                    found.add(part.split("=", 1)[1])
        return found

    def listening(self) -> list[str]:
        """Every TCP address a process of this cluster listens on (all must be on loopback)."""
        return listening_sockets(self.pids())

    def pids(self) -> list[int]:
        """Every process of this cluster: it names our temp dir or port, or descends from one that does."""
        markers = [str(self.temp_dir)] + ([f"--address={self.address}"] if self.address else [])
        me, tree, roots = os.getpid(), dict[int, list[int]](), []
        for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
            pid, ppid, argv = proc.info["pid"], proc.info["ppid"], proc.info["cmdline"] or []
            tree.setdefault(ppid, []).append(pid)
            line = " ".join(argv)
            if pid != me and any(m in line for m in markers):
                roots.append(pid)
        seen, stack = set[int](), roots
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            stack.extend(tree.get(pid, []))
        return sorted(seen)

    def raylet_pid(self, node_id: str) -> int | None:
        """The raylet process of the node with this Ray node id."""
        for pid in self.pids():
            line = _cmdline(pid)
            if "/raylet " in line and f"--node_id={node_id}" in line:
                return pid
        return None

    def kill_node(self, node_id: str) -> None:
        """SIGKILL a node's raylet (its workers then die with it)."""
        pid = self.raylet_pid(node_id)
        if pid is None:
            raise RuntimeError(f"no raylet for node {node_id[:12]} in this cluster")
        os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM this cluster's processes, then SIGKILL what is left after 2 s.

        What SIGTERM ends (the dashboard and its agents) is gone within a second; the GCS, the
        raylets, the autoscaler's monitor and the runtime-env agents were all still there 5 s
        after it (a four-node cluster, measured), so a longer grace only delays the SIGKILL."""
        for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 3.0)):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        if not self.pids():
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        try:
            return self.start()
        except BaseException:  # a node that failed to join must not leave the head running
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()
