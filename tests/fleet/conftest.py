"""A real Ray cluster of several nodes on this machine for the fleet tests; the fake jobs they
run are ``support.fleet_jobs``. Tests that boot the real server are marked ``real_vllm``. Run
this tier under ``flock /tmp/vllmqual-real.lock``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.fleet_jobs import cluster_env
from support.local_cluster import LocalRayCluster, NodeSpec


@pytest.fixture(scope="session")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    """Three 2-core nodes offering ``fleet_node``; the third is labelled ``kv=small``; a fourth with 2 GPUs.

    One cluster for every test that does not kill a node or need other nodes (the fleet tests run
    one after another in one worker): a start of these four nodes takes about 20 s."""
    tmp = tmp_path_factory.mktemp("ray")
    nodes = [NodeSpec(2, resources={"fleet_node": 1}), NodeSpec(2, resources={"fleet_node": 1}),
             NodeSpec(2, resources={"fleet_node": 1}, labels={"kv": "small"}),
             NodeSpec(1, gpus=2, resources={"gpu_node": 1})]
    cluster = LocalRayCluster(nodes, env=cluster_env(tmp))
    with cluster:  # a node that fails to join stops the nodes already started
        yield cluster
    assert cluster.pids() == [], "the test cluster left processes behind"
