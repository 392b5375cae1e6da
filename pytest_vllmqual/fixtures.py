"""The plugin's fixtures: function-scoped handles over one session-scoped server (the
pytest-httpserver layering). ``plugin`` registers this module as a pytest plugin and holds the
hooks; with it, the only module that imports pytest besides ``hookspecs``.

The run (``session.run.QualRun``) lives in ``config.stash``; the session-scoped fixtures are
parametrized by arm, so pytest itself tears one arm's server down before the next arm's starts.
Each fixture has one name (their types are importable from ``pytest_vllmqual``):

- ``vllmqual_arm`` (session) -> str: the key of the arm (the recipe, an A/B or campaign arm, or a
  ``recipe`` marker's recipe).
- ``vllm_server`` (session) -> ServerHandle: that arm's ready server, started on first use and
  stopped when the arm's tests are done (override it in a conftest to bring your own server).
- ``recipe`` -> Recipe: the recipe of the test's arm.
- ``gate`` -> GateRecorder: where the test records attempts, measurements and a summary; a test
  that uses it is a gate and gets an entry in the report.
- ``qual_client`` -> QualClient: an API client wired to the gate and to the liveness guard.
- ``server_facts`` (session) -> dict: engine facts, endpoint facts and the identity check, read
  once after readiness.
- ``progress`` -> ProgressFn: prints a ``[vllmqual]`` line to the terminal, past output capture.

Two more are autouse and private: one ends a test that talks to a server found gone, one holds
the traffic lock (exclusively for measurement gates and the equivalence probe).
"""

from __future__ import annotations

import inspect
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.errors import LaunchError, RecipeError, ServerGoneError, VllmQualError
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.plugin import (
    MEASUREMENT_MARKERS,
    RECORD_KEY,
    RUN_KEY,
    arm_of,
    gate_name,
    new_recorder,
    progress_printer,
    session_sanitizer,
)
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.session.run import QualRun
from pytest_vllmqual.session.server import traffic_lock

__all__ = ["gate", "progress", "qual_client", "recipe", "server_facts", "vllm_server", "vllmqual_arm"]


def _active_run(config: pytest.Config) -> QualRun:
    """The session's QualRun; a test that needs it in an inert session fails with the fix."""
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        pytest.fail("pytest_vllmqual is not active in this run, so there is no recipe or server. Fix: pass "
                    "--recipe=NAME|PATH or --vllmqual-endpoint URL (or set VLLMQUAL_RECIPE, or the ini key "
                    "vllmqual_recipe).", pytrace=False)
    return run


def _fail(exc: VllmQualError, config: pytest.Config) -> None:
    """Fail with the harness's own account (LaunchError's str carries no log text), scrubbed.
    The failure carries the error's status, so a gate that reuses a session fixture's cached
    failure still records why (``startup_timeout``, ``server_dead``, ...)."""
    failure = pytest.fail.Exception(session_sanitizer(config).scrub(str(exc)), pytrace=False)
    failure.vllmqual_status = getattr(exc, "status", None)  # type: ignore[attr-defined]
    failure.vllmqual_during = getattr(exc, "during", None)  # type: ignore[attr-defined]
    raise failure from None  # said once: not again as "during handling of" the error it words


def _arm_key(request: pytest.FixtureRequest) -> str:
    run = request.config.stash[RUN_KEY]
    return arm_of(request.node) or run.default_recipe.name


@pytest.fixture(scope="session")
def vllmqual_arm(request: pytest.FixtureRequest) -> str:
    """The key of this test's arm (session-scoped; the parameter is set by
    ``pytest_generate_tests``): an A/B or campaign arm, a ``recipe`` marker's recipe, or the
    session recipe. A campaign arm that its campaign does not run is skipped with the reason."""
    run = _active_run(request.config)
    key = str(getattr(request, "param", None) or run.default_recipe.name)
    reason = run.campaign_skip_reason(key)
    if reason is not None:
        pytest.skip(f"campaign: {reason}")
    return key


@pytest.fixture
def recipe(request: pytest.FixtureRequest, vllmqual_arm: str) -> Recipe:
    """The Recipe of this test's arm."""
    try:
        return request.config.stash[RUN_KEY].arm(vllmqual_arm).recipe
    except RecipeError as exc:
        _fail(exc, request.config)
        raise


@pytest.fixture(scope="session")
def vllm_server(request: pytest.FixtureRequest, vllmqual_arm: str) -> Iterator[ServerHandle]:
    """The ready server of this arm (session-scoped: started by the run on first use, stopped by
    the run when pytest finishes the arm; at most one is alive). Override it in a conftest to
    bring your own server."""
    run = _active_run(request.config)
    try:
        handle = run.start_server(vllmqual_arm)
    except (LaunchError, RecipeError) as exc:  # a recipe marker naming no recipe fails like a bad --recipe
        _fail(exc, request.config)
        raise
    yield handle
    if request.session.shouldstop or request.session.shouldfail:  # -x, --maxfail: the report says so
        run.mark_interrupted()
    run.finish_arm(vllmqual_arm)


@pytest.fixture(scope="session")
def server_facts(request: pytest.FixtureRequest, vllmqual_arm: str, vllm_server: ServerHandle) -> dict[str, Any]:
    """Engine facts, endpoint facts and the identity check, read once after readiness.

    They need a server that started, not one that is still alive: a server that died later (a
    ladder rung that killed it) still had these facts, and the gates that judge them still run.
    """
    return request.config.stash[RUN_KEY].server_facts(vllmqual_arm)


@pytest.fixture(autouse=True)
def _vllmqual_server_alive(request: pytest.FixtureRequest) -> None:
    """A test that talks to the server (``vllm_server`` or ``qual_client``) ends at once as
    ``server_dead`` / ``hung`` when an earlier gate found the server gone."""
    run = request.config.stash.get(RUN_KEY, None)
    if run is None or not _talks_to_server(request):
        return
    request.getfixturevalue("vllm_server")
    guard = run.guard(_arm_key(request))
    try:
        if guard is not None:
            guard.assert_usable()
            guard.gate_started(gate_name(request.node))
    except ServerGoneError as exc:
        _fail(exc, request.config)


def _talks_to_server(request: pytest.FixtureRequest) -> bool:
    if "qual_client" in request.fixturenames:
        return True
    function = getattr(request, "function", None)
    return function is not None and "vllm_server" in inspect.signature(function).parameters


@pytest.fixture
def progress(request: pytest.FixtureRequest) -> Any:
    """A ProgressFn that prints a ``[vllmqual]`` line to the terminal, past output capture."""
    return progress_printer(request.config)


@pytest.fixture
def gate(request: pytest.FixtureRequest, vllmqual_arm: str) -> GateRecorder:
    """Where this gate records attempts, measurements, thresholds and its k/N summary."""
    recorder: GateRecorder | None = request.node.stash.get(RECORD_KEY, None)
    return recorder if recorder is not None else new_recorder(request.node)


@pytest.fixture
def qual_client(request: pytest.FixtureRequest, vllm_server: ServerHandle, gate: GateRecorder,
                recipe: Recipe) -> Iterator[QualClient]:
    """An API client for this test: no retries, every call recorded into ``gate``."""
    guard = request.config.stash[RUN_KEY].guard(_arm_key(request))
    with QualClient(vllm_server, timeout_s=recipe.requests.timeout_s, sink=gate, guard=guard,
                    retries=recipe.requests.retries) as client:
        yield client


@pytest.fixture(autouse=True)
def _vllmqual_traffic_isolation(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    """Measurement gates hold the traffic lock exclusively; other gates share it."""
    if "gate" not in request.fixturenames or RUN_KEY not in request.config.stash:
        yield
        return
    private_dir = request.config.stash[RUN_KEY].private_dir(_arm_key(request))
    exclusive = any(request.node.get_closest_marker(m) for m in MEASUREMENT_MARKERS)
    with traffic_lock(private_dir, exclusive=exclusive):
        yield
