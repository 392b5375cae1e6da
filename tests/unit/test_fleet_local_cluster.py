"""The local multi-node cluster's own hygiene, without starting Ray: a node that fails to join
stops what already started, and every process of the cluster sees one HOME (Ray's token file)."""

from __future__ import annotations

import pytest

from pytest_vllmqual.fleet.local_cluster import LocalRayCluster, NodeSpec


def test_a_node_that_fails_to_join_stops_the_head(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalRayCluster([NodeSpec(cpus=1)])
    calls: list[str] = []

    def fake_ray(*args: str) -> None:
        calls.append(args[0])
        if args[0].startswith("--address="):
            raise RuntimeError("ray start --address failed")

    monkeypatch.setattr(cluster, "_ray", fake_ray)
    monkeypatch.setattr(cluster, "own_ip", lambda: "127.0.0.1")
    monkeypatch.setattr(cluster, "stop", lambda: calls.append("stop"))
    with pytest.raises(RuntimeError, match="--address failed"):
        with cluster:
            pass
    assert calls == ["--head", f"--address=127.0.0.1:{cluster.port}", "stop"]


def test_the_clusters_processes_see_their_own_home() -> None:
    cluster = LocalRayCluster([])
    try:
        assert cluster.env["HOME"] == str(cluster.temp_dir)
    finally:
        cluster.temp_dir.rmdir()
