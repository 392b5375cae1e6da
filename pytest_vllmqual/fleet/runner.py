"""The fleet run: plan each job's attempts, hand them to Ray, watch them, retry by policy.

Planning resolves each job's recipe here first (a bad recipe fails that job with the recipe's
own error, and the other jobs go on), picks the nodes of an ``each_node`` job, and works out
what each attempt asks Ray for: GPUs (TP x DCP) for a GPU recipe, CPU cores (the TP size) for a
CPU recipe, unless the job says otherwise. At most ``max_parallel`` attempts are in Ray at
once. An attempt that has not started by its deadline is cancelled with the reason it waited
(no node has the GPUs or the label); one that runs past it is ended on its node. Ctrl-C (or
SIGTERM) cancels every attempt and the record says ``incomplete``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual.clock import utc_stamp
from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.fleet.attempts import JobAttempt, JobOutcome, evaluate_result
from pytest_vllmqual.fleet.cluster import NodeInfo, RayCluster
from pytest_vllmqual.fleet.spec import FleetSpec, JobSpec, PlacementMode, RetryWhen
from pytest_vllmqual.records import FloorNodes

__all__ = ["DEADLINE_GRACE_S", "FleetRun", "ProgressFn", "job_resources"]

ProgressFn = Callable[[str], None]
DEADLINE_GRACE_S = 45.0
"""How long past a running attempt's deadline the driver waits for the node to end it itself."""
HEARTBEAT_S = 30.0


def job_resources(job: JobSpec, recipe: Any) -> tuple[float, int]:
    """(CPU cores, GPUs) an attempt asks Ray for: the job's own numbers, else what its recipe needs."""
    env = recipe.server_env()
    cpu_recipe = any(str(key).startswith("VLLM_CPU_") for key in env)
    tp = int(recipe.serve.tensor_parallel_size or 1)
    dcp = int(getattr(recipe.serve, "decode_context_parallel_size", 1) or 1)
    gpus = job.gpus if job.gpus is not None else (0 if cpu_recipe else tp * dcp)
    cpus = job.cpus if job.cpus is not None else (float(tp) if cpu_recipe else 1.0)
    return float(cpus), int(gpus)


def _pending_reason(attempt: JobAttempt, nodes: list[NodeInfo]) -> str:
    placement = attempt.job.placement
    matching = [n for n in nodes if n.has(label=placement.label, resource=placement.resource)]
    if attempt.pinned_node:
        matching = [n for n in matching if n.node_id == attempt.pinned_node]
    if not matching:
        return f"no alive node matches {placement.describe()}"
    if not any(n.fits(attempt.cpus, attempt.gpus) for n in matching):
        most = max(n.resources.get("GPU", 0) for n in matching)
        cores = max(n.resources.get("CPU", 0) for n in matching)
        return (f"no matching node has {attempt.gpus} GPU(s) and {attempt.cpus:g} CPU core(s) "
                f"(the most any has: {most:g} GPU(s), {cores:g} core(s))")
    return "waiting for a matching node's GPUs/cores to be free"


@dataclass
class FleetRun:
    """One ``vllmqual fleet run``: its attempts and the cluster they ran on."""

    spec: FleetSpec
    cluster: RayCluster
    progress: ProgressFn = print
    project_dir: Path = field(default_factory=Path.cwd)
    argv_for: Callable[[JobAttempt], list[str]] | None = None
    run_id: str = field(default_factory=lambda: utc_stamp() + "-" +
                        uuid.uuid4().hex[:6])
    attempts: list[JobAttempt] = field(default_factory=list)
    nodes: list[NodeInfo] = field(default_factory=list)
    interrupted: bool = False
    started_epoch: float = 0.0
    finished_epoch: float = 0.0
    only_nodes: tuple[str, ...] = ()
    """Run only on the nodes with these keys, labels (node-N) or ``vllmqual-node`` names (a re-test)."""

    # -- planning -----------------------------------------------------------------------------

    def _recipes_dir(self) -> Path:
        from pytest_vllmqual.session.settings import default_recipes_dir

        return default_recipes_dir(self.project_dir)

    def _new_attempt(self, job: JobSpec, number: int, overrides: tuple[str, ...], node: NodeInfo | None,
                     *, floor: bool = False) -> JobAttempt:
        from pytest_vllmqual.recipe.loader import resolve_recipe
        from pytest_vllmqual.recipe.overrides import with_overrides

        recipe_arg = self.spec.recipe_argument(job)
        where = (f"-{node.label}" if node else "") + ("-floor" if floor else "")
        attempt = JobAttempt(attempt_id=f"{job.name}{where}-a{number}-{uuid.uuid4().hex[:4]}", job=job, number=number,
                             recipe_arg=recipe_arg, overrides=overrides, cpus=0.0, gpus=0,
                             pinned_node=node.node_id if node else None, node_id=node.node_id if node else None,
                             floor=floor)
        try:
            recipe = with_overrides(resolve_recipe(recipe_arg, self._recipes_dir()), list(overrides))
        except RecipeError as exc:
            attempt.finish(JobOutcome.ERROR, f"job {job.name}: {str(exc).splitlines()[0]}", time.time())
            return attempt
        attempt.recipe_sha256 = recipe.sha256
        attempt.cpus, attempt.gpus = job_resources(job, recipe)
        if node is not None and not node.fits(attempt.cpus, attempt.gpus):
            attempt.finish(JobOutcome.NOT_STARTED, f"{node.label} has {node.resources.get('GPU', 0):g} GPU(s) and "
                           f"{node.resources.get('CPU', 0):g} core(s); the job needs {attempt.gpus} GPU(s) and "
                           f"{attempt.cpus:g} core(s)", time.time())
        return attempt

    def plan(self) -> list[JobAttempt]:
        """Every job's first attempts (some already finished: a bad recipe, no matching node)."""
        self.nodes = self.cluster.nodes()
        if self.only_nodes:
            keys = self.cluster.node_keys(self.nodes)
            self.nodes = [n for n in self.nodes if n.label in self.only_nodes or keys.get(n.node_id) in self.only_nodes]
            self.progress(f"only on {', '.join(self.only_nodes)}: {len(self.nodes)} node(s) match")
        planned: list[JobAttempt] = []
        for job in self.spec.jobs:
            if job.placement.mode is PlacementMode.ANY and self.only_nodes:
                self.progress(f"{job.name}: skipped, it runs on any node and the run is limited to named nodes")
                continue
            if job.placement.mode is PlacementMode.ANY:
                planned.append(self._new_attempt(job, 1, job.overrides, None))
                continue
            matching = [n for n in self.nodes if n.has(label=job.placement.label, resource=job.placement.resource)]
            if not matching:
                attempt = self._new_attempt(job, 1, job.overrides, None)
                if not attempt.done:
                    attempt.finish(JobOutcome.NOT_STARTED, f"no alive node matches {job.placement.describe()}",
                                   time.time())
                planned.append(attempt)
            filtered = bool(job.placement.label or job.placement.resource)
            for node in matching:
                attempt = self._new_attempt(job, 1, job.overrides_for(node.labels), node)
                if not filtered and attempt.outcome is JobOutcome.NOT_STARTED:
                    self.progress(f"{job.name}: skipping {node.label}, it cannot hold the job ({attempt.reason})")
                    continue  # no filter: "every node that can run it"; a named node that cannot is a finding
                planned.append(attempt)
            planned += self._floor_attempts(job, [a for a in planned if a.job is job and not a.done])
        self.attempts = planned
        return planned

    def _floor_attempts(self, job: JobSpec, attempts: list[JobAttempt]) -> list[JobAttempt]:
        """The job's second run (probe and item bank only) on the first node, or on every node, that runs
        it: on a one-node fleet (one GPU host) the floor is the comparison there is."""
        if not job.answers.compare or job.answers.floor is FloorNodes.NONE or not attempts or self.only_nodes:
            return []  # a re-test (only named nodes) is held against its reference, not its own floor
        chosen = attempts if job.answers.floor is FloorNodes.EVERY else attempts[:1]
        nodes = {n.node_id: n for n in self.nodes}
        return [self._new_attempt(job, 1, a.overrides, nodes[str(a.pinned_node)], floor=True) for a in chosen
                if a.pinned_node in nodes]

    # -- running ------------------------------------------------------------------------------

    def _request(self, attempt: JobAttempt) -> dict[str, Any]:
        request: dict[str, Any] = {
            "fleet_run_id": f"{self.spec.name}-{self.run_id}", "attempt_id": attempt.attempt_id,
            "recipe": attempt.recipe_arg, "overrides": list(attempt.overrides),
            "selection": attempt.job.pytest_selection(floor=attempt.floor), "recipes_dir": str(self._recipes_dir()), "gpus": attempt.gpus,
            "project_dir": str(self.project_dir), "node_labels": {n.node_id: n.labels for n in self.nodes},
            "deadline_epoch": (attempt.submitted_epoch or time.time()) + attempt.job.deadline_s}
        if self.argv_for is not None:
            request["argv"] = self.argv_for(attempt)
        return request

    def _submit(self, attempt: JobAttempt) -> None:
        attempt.submitted_epoch, attempt.submitted_mono = time.time(), time.monotonic()
        attempt.ref = self.cluster.submit(self._request(attempt), cpus=attempt.cpus, gpus=attempt.gpus,
                                          node_id=attempt.pinned_node,
                                          resources={attempt.job.placement.resource: 0.001}
                                          if attempt.job.placement.resource and not attempt.pinned_node else None)
        where = self.cluster.label_of(attempt.pinned_node) if attempt.pinned_node else "any node"
        self.progress(f"queued {attempt.job.name} (attempt {attempt.number}) for {where}: "
                      f"{attempt.gpus} GPU(s), {attempt.cpus:g} core(s)")

    def _finish(self, attempt: JobAttempt) -> None:
        result, error, lost = self.cluster.outcome(attempt.ref)
        now = time.time()
        if result is not None:
            attempt.node_id = str(result.get("node_id") or attempt.node_id)
            evaluate_result(attempt, result, now)
            if attempt.cancel_as is JobOutcome.CANCELLED:
                attempt.finish(JobOutcome.CANCELLED, "the fleet run was interrupted (Ctrl-C); the attempt was ended "
                               "and its partial report kept", now)
        elif attempt.cancel_as is not None:
            attempt.finish(attempt.cancel_as, attempt.reason, now)
        elif lost:
            attempt.finish(JobOutcome.LOST, f"the attempt's worker or node went away mid-job (Ray: {error}); its "
                           "partial results stay on that node", now)
        else:
            attempt.finish(JobOutcome.ERROR, f"the Ray task failed (Ray: {error})", now)
        elapsed = now - (attempt.started_epoch or attempt.submitted_epoch or now)
        node = self.cluster.label_of(attempt.node_id) if attempt.node_id else "no node"
        outcome = attempt.outcome.value if attempt.outcome else "?"
        self.progress(f"done {attempt.job.name} (attempt {attempt.number}) on {node}: {outcome} "
                      f"after {elapsed:.1f} s" + (f" ({attempt.reason})" if attempt.reason else ""))

    def _retry(self, attempt: JobAttempt) -> JobAttempt | None:
        policy = attempt.job.retry
        if attempt.outcome is None or attempt.number > policy.attempts:
            return None
        if attempt.outcome.value not in {w.value for w in policy.on} or attempt.outcome.value not in \
                {w.value for w in RetryWhen}:
            return None
        node = None
        if attempt.pinned_node:
            node = next((n for n in self.cluster.nodes() if n.node_id == attempt.pinned_node), None)
            if node is None:
                self.progress(f"not retrying {attempt.job.name}: its node is gone and the job runs on each node")
                return None
        retry = self._new_attempt(attempt.job, attempt.number + 1, attempt.overrides, node, floor=attempt.floor)
        attempt.retried_as = retry.attempt_id
        self.progress(f"retrying {attempt.job.name} ({attempt.outcome.value}; attempt {retry.number} of "
                      f"{policy.attempts + 1}) on {node.label if node else 'any node'}")
        return retry

    def _check_deadlines(self, in_flight: list[JobAttempt]) -> None:
        now = time.monotonic()
        for attempt in in_flight:
            if attempt.cancel_as is not None or attempt.submitted_mono is None:
                continue
            over = now - attempt.submitted_mono - attempt.job.deadline_s
            if attempt.started_epoch is None and over >= 0:
                attempt.pending_reason = _pending_reason(attempt, self.cluster.nodes())
                attempt.cancel_as, attempt.reason = JobOutcome.NOT_STARTED, (
                    f"not started within its deadline of {attempt.job.deadline_s:g} s: {attempt.pending_reason}")
                self.cluster.cancel(attempt.ref)
            elif attempt.started_epoch is not None and over >= DEADLINE_GRACE_S:
                attempt.cancel_as, attempt.reason = JobOutcome.DEADLINE, (
                    f"ran past its deadline of {attempt.job.deadline_s:g} s and did not end on its node")
                self.cluster.cancel(attempt.ref)

    def _note_starts(self, in_flight: list[JobAttempt]) -> None:
        events = self.cluster.started()
        for attempt in in_flight:
            event = events.get(attempt.attempt_id)
            if event and attempt.started_epoch is None:
                attempt.node_id, attempt.started_epoch = event
                self.progress(f"running {attempt.job.name} (attempt {attempt.number}) on "
                              f"{self.cluster.label_of(event[0])}")

    def _heartbeat(self, queue: list[JobAttempt], in_flight: list[JobAttempt]) -> None:
        now = time.time()
        running = [f"{a.job.name} on {self.cluster.label_of(a.node_id or '')} {now - (a.started_epoch or now):.0f} s"
                   for a in in_flight if a.started_epoch]
        waiting = [f"{a.job.name}: {_pending_reason(a, self.cluster.nodes())}" for a in in_flight
                   if not a.started_epoch]
        done = sum(1 for a in self.attempts if a.done)
        self.progress(f"queued {len(queue)}, running {len(running)}, pending {len(waiting)}, done {done}"
                      + "".join(f"\n  running {r}" for r in running) + "".join(f"\n  pending {w}" for w in waiting))

    def _loop(self, queue: list[JobAttempt], in_flight: list[JobAttempt]) -> None:
        last_beat = time.monotonic()
        while queue or in_flight:
            while queue and len(in_flight) < self.spec.max_parallel:
                attempt = queue.pop(0)
                self._submit(attempt)
                in_flight.append(attempt)
            done_refs = self.cluster.wait([a.ref for a in in_flight], timeout=1.0)
            self._note_starts(in_flight)
            for attempt in [a for a in in_flight if any(a.ref is r for r in done_refs)]:
                in_flight.remove(attempt)
                self._finish(attempt)
                retry = self._retry(attempt)
                if retry is not None:
                    self.attempts.append(retry)
                    if not retry.done:
                        queue.insert(0, retry)
            self._check_deadlines(in_flight)
            if time.monotonic() - last_beat >= HEARTBEAT_S:
                last_beat = time.monotonic()
                self._heartbeat(queue, in_flight)

    def _interrupt(self, queue: list[JobAttempt], in_flight: list[JobAttempt]) -> None:
        self.interrupted = True
        self.progress(f"interrupted: cancelling {len(in_flight)} running attempt(s), {len(queue)} queued")
        for attempt in in_flight:
            attempt.cancel_as, attempt.reason = JobOutcome.CANCELLED, "the fleet run was interrupted (Ctrl-C)"
            self.cluster.cancel(attempt.ref)
        deadline = time.monotonic() + 15
        while in_flight and time.monotonic() < deadline:
            for ref in self.cluster.wait([a.ref for a in in_flight], timeout=1.0):
                attempt = next(a for a in in_flight if a.ref is ref)
                in_flight.remove(attempt)
                self._finish(attempt)
        for attempt in [*in_flight, *queue]:
            attempt.finish(JobOutcome.CANCELLED, "the fleet run was interrupted (Ctrl-C) before this attempt ended",
                           time.time())

    def run(self) -> list[JobAttempt]:
        """Plan, then run every attempt to an outcome (Ctrl-C cancels the rest)."""
        self.started_epoch = time.time()
        queue = [a for a in self.plan() if not a.done]
        for attempt in self.attempts:
            if attempt.done:
                self.progress(f"skipped {attempt.job.name}: {attempt.outcome.value if attempt.outcome else ''} "
                              f"({attempt.reason})")
        in_flight: list[JobAttempt] = []
        try:
            self._loop(queue, in_flight)
        except KeyboardInterrupt:
            self._interrupt(queue, in_flight)
        self.finished_epoch = time.time()
        return self.attempts
