"""The local multi-node cluster's own hygiene, without starting Ray: a node that fails to join
stops what already started, and every process of the cluster sees one HOME (Ray's token file)."""

from __future__ import annotations

import os
import sys

import pytest
from support.local_cluster import RAY_START, LocalRayCluster, NodeSpec, listening_sockets


def test_a_node_that_fails_to_join_stops_the_head(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalRayCluster([NodeSpec(cpus=1)])
    calls: list[str] = []

    def fake_ray(*args: str, node: NodeSpec | None = None) -> None:
        calls.append(args[0])
        if args[0].startswith("--address="):
            raise RuntimeError("ray start --address failed")

    monkeypatch.setattr(cluster, "_ray", fake_ray)
    monkeypatch.setattr(cluster, "stop", lambda: calls.append("stop"))
    with pytest.raises(RuntimeError, match="--address failed"):
        with cluster:
            pass
    assert calls == ["--head", f"--address=127.0.0.1:{cluster.port}", "stop"]


def test_ray_start_keeps_loopback_and_adds_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ray start runs through the launcher that keeps 127.0.0.1, with multi-node clusters on."""
    import subprocess

    cluster = LocalRayCluster([])
    seen: list[tuple[list[str], dict[str, str]]] = []
    real_run = subprocess.run

    def fake_run(argv: list[str], env: dict[str, str], **_kw: object) -> subprocess.CompletedProcess[str]:
        seen.append((argv, env))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a driver's setting must not reach ray start
    monkeypatch.setattr(subprocess, "run", fake_run)
    try:
        cluster._ray("--head")
    finally:
        cluster.temp_dir.rmdir()
    argv, env = seen[0]
    assert argv[1:4] == ["-c", RAY_START, "start"] and "--node-ip-address=127.0.0.1" in argv
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"
    # against the installed Ray: the launcher's patch leaves loopback as it is (Ray alone would not)
    probe = RAY_START.split("from ray.scripts")[0] + "print(services.resolve_ip_for_localhost('127.0.0.1'))\n"
    real = real_run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"})
    assert real.stdout.strip() == "127.0.0.1", real.stderr[-2000:]


def test_listening_sockets_reads_this_process_own_listener() -> None:
    import os
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert f"127.0.0.1:{port}" in listening_sockets([os.getpid()])
    assert f"127.0.0.1:{port}" not in listening_sockets([os.getpid()])
    assert listening_sockets([]) == []


def test_listening_sockets_writes_an_ipv6_listener_in_brackets() -> None:
    import os
    import socket

    try:
        server = socket.socket(socket.AF_INET6)
        server.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    with server:
        server.listen()
        port = server.getsockname()[1]
        assert f"[::1]:{port}" in listening_sockets([os.getpid()])


def test_the_clusters_processes_see_their_own_home() -> None:
    cluster = LocalRayCluster([])
    try:
        assert cluster.env["HOME"] == str(cluster.temp_dir)
    finally:
        cluster.temp_dir.rmdir()


def test_the_driver_keeps_loopback_only_while_it_connects() -> None:
    """Ray is in the dev tools (the fleet extra): without it this fails rather than skips."""
    import ray
    import ray._private.services as services

    from pytest_vllmqual.fleet.cluster import is_loopback, loopback_kept

    original = services.resolve_ip_for_localhost
    with loopback_kept(ray):
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert services.resolve_ip_for_localhost is original
    assert all(is_loopback(a) for a in ("127.0.0.1:6379", "localhost:1", "[::1]:6379", "127.0.0.1"))
    assert not any(is_loopback(a) for a in ("10.0.0.5:6379", "head.example:6379", "", None))
