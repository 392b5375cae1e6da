"""Everything that talks to Ray: connect (or start a local cluster), list nodes, submit, cancel.

Ray places, accounts GPUs and cancels; this module only asks it. Each job attempt is one
Ray task with ``max_retries=0`` (Ray would otherwise retry a task whose worker died; the fleet
retries only as a job's policy says). ``each_node`` runs are pinned with
``NodeAffinitySchedulingStrategy(soft=False)``. A tiny ``FleetBoard`` actor hears when an
attempt starts on its node, so progress can say which node runs what and a pending job can
say why it waits.

Nodes are shown only as ``node-1``, ``node-2``, ... (the order Ray lists them in) and a short
hash of Ray's node id: never a host name or an address.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pytest_vllmqual.errors import FleetError

__all__ = ["INSTALL_HINT", "LOST_ERRORS", "NodeInfo", "RayCluster", "import_ray", "is_loopback", "loopback_kept",
           "node_hash"]

INSTALL_HINT = "Fix: pip install 'pytest-vllmqual[fleet]' (it brings Ray), or pip install ray."
LOST_ERRORS = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError",
               "OwnerDiedError", "RaySystemError", "ObjectReconstructionFailedError")
"""Ray errors that mean the attempt's worker or node went away: the attempt is ``lost``."""


def import_ray() -> ModuleType:
    """Ray, or FleetError saying how to install it (nothing else of the package needs Ray)."""
    try:
        import ray
    except ImportError:
        raise FleetError(f"vllmqual fleet runs on Ray, which is not installed here. {INSTALL_HINT}") from None
    module: ModuleType = ray  # the type check does not read Ray (pyproject.toml), so it is Any here
    return module


def is_loopback(address: str | None) -> bool:
    """Whether ``host:port``, ``[host]:port`` or a bare host names this machine's loopback interface."""
    host = (address or "").strip()
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host in {"127.0.0.1", "localhost", "::1"}


@contextmanager
def loopback_kept(ray: ModuleType) -> Iterator[None]:
    """Let ``ray.init`` use 127.0.0.1 as given, for a cluster that listens on loopback only.

    Ray binds its servers to 127.0.0.1 only when a node's address is that string, but on Linux
    ``ray.init`` (like ``ray start``) first swaps a loopback name for the machine's outward
    address (``ray._private.services.resolve_ip_for_localhost``): the driver would then knock
    at an address the cluster does not listen on, and a local cluster would listen on every
    interface. For the length of the call that swap is a no-op; afterwards Ray is as it was.
    """
    services: Any = importlib.import_module("ray._private.services")
    original = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = original


def node_hash(node_id: str) -> str:
    """A stable anonymous tag of a Ray node id (12 hex of its SHA-256)."""
    return hashlib.sha256(node_id.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node, as the fleet sees it."""

    node_id: str
    label: str
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return node_hash(self.node_id)

    def has(self, *, label: str | None, resource: str | None) -> bool:
        """Whether the node matches a placement filter."""
        if label:
            key, _, value = label.partition("=")
            if self.labels.get(key.strip()) != value.strip():
                return False
        return not (resource and self.resources.get(resource, 0) <= 0)

    def fits(self, cpus: float, gpus: int) -> bool:
        return self.resources.get("CPU", 0) >= cpus and self.resources.get("GPU", 0) >= gpus


def _fleet_task(request: dict[str, Any], board: Any) -> dict[str, Any]:
    """The Ray task body: say where it started, then run the job's pytest on this node."""
    import ray

    from pytest_vllmqual.fleet.node_task import node_key, run_on_node

    node_id = ray.get_runtime_context().get_node_id()
    board.started.remote(request["attempt_id"], node_id, time.time())
    result = run_on_node(request)
    result["node_id"] = node_id
    result["node_key"] = node_key((request.get("node_labels") or {}).get(node_id))
    result["gpu_ids"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    return result


def _node_key_task(labels: dict[str, str]) -> str:
    """The stable key of the node this runs on (``node_task.node_key``)."""
    from pytest_vllmqual.fleet.node_task import node_key

    return node_key(labels)


class _Board:
    """Start times of attempts, by attempt id (a Ray actor: the only state shared with tasks)."""

    def __init__(self) -> None:
        self.events: dict[str, tuple[str, float]] = {}

    def started(self, attempt_id: str, node_id: str, at: float) -> None:
        self.events[attempt_id] = (node_id, at)

    def snapshot(self) -> dict[str, tuple[str, float]]:
        return dict(self.events)


class RayCluster:
    """A connection to a Ray cluster for one fleet run."""

    def __init__(self, ray: ModuleType, *, started_locally: bool) -> None:
        self.ray = ray
        self.started_locally = started_locally
        self._task = ray.remote(max_retries=0, retry_exceptions=False)(_fleet_task)
        self._board = ray.remote(num_cpus=0)(_Board).remote()
        self._labels: dict[str, str] = {}

    @classmethod
    @contextmanager
    def connect(cls, address: str | None) -> Iterator[RayCluster]:
        """Join the cluster at ``address``; without one, start a local cluster on loopback and stop it after."""
        ray = import_ray()
        kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False,
                                  "configure_logging": False}
        try:
            if address and not is_loopback(address):
                ray.init(address=address, **kwargs)
            else:
                with loopback_kept(ray):
                    ray.init(address=address or None, **({} if address else {"_node_ip_address": "127.0.0.1"}),
                             **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"at {address}" if address else "locally"
            raise FleetError(f"cannot start or reach a Ray cluster {where}: {type(exc).__name__}. Fix: start one "
                             "with `ray start --head` and pass --address HOST:PORT, or leave --address out "
                             "for a local cluster.") from None
        try:
            yield cls(ray, started_locally=not address)
        finally:
            ray.shutdown()

    def nodes(self) -> list[NodeInfo]:
        """Alive nodes, labelled node-1, node-2, ... in Ray's order (stable for the run)."""
        infos: list[NodeInfo] = []
        for raw in self.ray.nodes():
            if not raw.get("Alive"):
                continue
            node_id = str(raw["NodeID"])
            if node_id not in self._labels:
                self._labels[node_id] = f"node-{len(self._labels) + 1}"
            labels = {str(k): str(v) for k, v in (raw.get("Labels") or {}).items() if not str(k).startswith("ray.io/")}
            resources = {str(k): float(v) for k, v in (raw.get("Resources") or {}).items()
                         if not str(k).startswith("node:")}
            infos.append(NodeInfo(node_id, self._labels[node_id], resources, labels))
        return infos

    def label_of(self, node_id: str) -> str:
        if node_id not in self._labels:
            self.nodes()
        return self._labels.get(node_id, f"node-{node_hash(node_id)}")

    def submit(self, request: dict[str, Any], *, cpus: float, gpus: int, node_id: str | None,
               resources: dict[str, float] | None = None) -> Any:
        """One attempt as a Ray task; pinned to ``node_id`` when given."""
        options: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus}
        if resources:
            options["resources"] = resources
        if node_id:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        return self._task.options(**options).remote(request, self._board)

    def node_keys(self, nodes: list[NodeInfo], timeout: float = 60.0) -> dict[str, str]:
        """Ray node id -> the node's stable key (its ``vllmqual-node`` label, else a salted hash of its
        machine id, read there by a tiny task pinned to it); a node that does not answer is left out."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self.ray.remote(num_cpus=0, max_retries=0)(_node_key_task)
        refs = {n.node_id: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=n.node_id, soft=False)).remote(n.labels) for n in nodes}
        keys: dict[str, str] = {}
        for node_id, ref in refs.items():
            try:
                keys[node_id] = str(self.ray.get(ref, timeout=timeout))
            except Exception:  # a node that cannot say its key is not selected by key
                continue
        return keys

    def started(self) -> dict[str, tuple[str, float]]:
        """attempt id -> (node id, epoch seconds it started), as the tasks reported."""
        try:
            events: dict[str, tuple[str, float]] = self.ray.get(self._board.snapshot.remote(), timeout=10)
        except Exception:  # the board is best effort: progress, never a verdict
            return {}
        return events

    def wait(self, refs: list[Any], timeout: float) -> list[Any]:
        """The refs among ``refs`` that are done after at most ``timeout`` seconds."""
        if not refs:
            time.sleep(timeout)
            return []
        done, rest = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if done and rest:  # everything else that is already done, without waiting again
            more, _pending = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            done = [*done, *more]
        return list(done)

    def outcome(self, ref: Any) -> tuple[dict[str, Any] | None, str | None, bool]:
        """(result, error class name, lost): a finished attempt's value or why it has none."""
        try:
            return self.ray.get(ref), None, False
        except Exception as exc:
            names = {cls.__name__ for cls in type(exc).__mro__}
            lost = bool(names & set(LOST_ERRORS)) and "RayTaskError" not in names
            return None, type(exc).__name__, lost

    def cancel(self, ref: Any) -> None:
        """Cancel an attempt; force ends its worker, and the node's watchdog ends its pytest run."""
        try:
            self.ray.cancel(ref, force=True)
        except Exception:  # already finished or its node is gone: nothing left to cancel
            pass
