"""A real multi-node Ray cluster on one machine, for the fleet's tests and its benchmark.

Every node is its own raylet (``ray start --head`` once, then ``ray start --address`` per
node), each with its own CPU count, GPUs (logical), custom resources and labels, all under one
``--temp-dir`` of this cluster's own. It is stopped by its own processes only (those whose
command line names that temp dir, or this cluster's port, and their children), never with
``ray stop`` (which ends every Ray process on the machine). ``kill_node`` SIGKILLs one node's
raylet: the node dies mid-job as a crashed host would.

Ray 2.60 turns ``--node-ip-address=127.0.0.1`` into the machine's own address for a multi-node
cluster; all traffic still stays on this machine.
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

__all__ = ["LocalRayCluster", "NodeSpec"]


@dataclass(frozen=True)
class NodeSpec:
    """One worker node: its cores, logical GPUs, custom resources and labels."""

    cpus: int = 2
    gpus: int = 0
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[-1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


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
        self.env = {**os.environ, **(env or {}), "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(self.temp_dir)}
        self.address = ""

    def _ray(self, *args: str) -> None:
        ray = str(Path(sys.executable).with_name("ray"))
        proc = subprocess.run([ray, "start", *args, "--node-ip-address=127.0.0.1", f"--temp-dir={self.temp_dir}",
                               "--disable-usage-stats"], env=self.env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed: {proc.stderr[-2000:]}")

    def start(self) -> LocalRayCluster:
        self._ray("--head", f"--port={self.port}", f"--num-cpus={self.head_cpus}", "--num-gpus=0",
                  "--include-dashboard=false")
        self.address = f"{self.own_ip()}:{self.port}"
        for node in self.nodes:
            args = [f"--address={self.address}", f"--num-cpus={node.cpus}", f"--num-gpus={node.gpus}"]
            if node.resources:
                args.append(f"--resources={json.dumps(node.resources)}")
            if node.labels:
                args.append(f"--labels={json.dumps(node.labels)}")
            self._ray(*args)
        return self

    def own_ip(self) -> str:
        """The address Ray gave the head (what ``--node-ip-address=127.0.0.1`` became)."""
        for pid in self.pids():
            for part in _cmdline(pid).split():
                if part.startswith("--node_ip_address=") or part.startswith("--node-ip-address="):
                    return part.split("=", 1)[1]
        return "127.0.0.1"

    def pids(self) -> list[int]:
        """Every process of this cluster: it names our temp dir or port, or descends from one that does."""
        markers = [str(self.temp_dir)] + ([f"--address={self.address}"] if self.address else [])
        roots = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and int(e.name) != os.getpid()
                 and any(m in _cmdline(int(e.name)) for m in markers)]
        if not roots:
            return []
        tree, seen, stack = _children(), set[int](), list(roots)
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
        """SIGTERM this cluster's processes, then SIGKILL what is left after 5 s."""
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 3.0)):
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
