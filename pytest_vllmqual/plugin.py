"""pytest glue: options, markers, fixtures, xdist hand-off, report hooks (with ``hookspecs``, the
only module that imports pytest; the work is done by the pytest-free core, see ARCHITECTURE.md).

Fixtures: function-scoped handles over one session-scoped server (the pytest-httpserver
layering). The run (``run.QualRun``) lives in ``config.stash``; the session-scoped fixtures are
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

import dataclasses
import inspect
import os
import signal
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark import MarkMatcher
from _pytest.mark.expression import Expression

from pytest_vllmqual.atomic_io import check_writable_dir
from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.errors import LaunchError, RecipeError, ServerGoneError, VllmQualError
from pytest_vllmqual.gates.recorder import GateRecorder
from pytest_vllmqual.gates.registry import title_of
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.layout import names_shipped_gates
from pytest_vllmqual.privacy.failure_reason import repeats_its_causes, report_reason
from pytest_vllmqual.privacy.sanitize import Sanitizer, scrub_test_report
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import GateOutcome, GateRecord, RunRecord
from pytest_vllmqual.session.controller import ControllerRun
from pytest_vllmqual.session.run import QualRun, gate_junit_properties, session_recipe
from pytest_vllmqual.session.server import traffic_lock
from pytest_vllmqual.session.settings import (
    COMMAND_LINE_OPTIONS,
    OPTION_GROUP_HELP,
    Settings,
    plugin_activation_reason,
    resolve_settings,
)
from pytest_vllmqual.session.worker import WorkerRun

__all__ = ["MARKERS", "RUN_KEY", "RunHooks", "gate", "progress", "qual_client", "recipe",
           "server_facts", "vllm_server", "vllmqual_arm"]

RUN_KEY = pytest.StashKey[QualRun]()
SETTINGS_KEY = pytest.StashKey[Settings]()
RECORD_KEY = pytest.StashKey[GateRecorder]()
SANITIZER_KEY = pytest.StashKey[Sanitizer]()
STARTUP_SAID_KEY = pytest.StashKey[dict[str, str]]()
DESELECTED_BY_KEY = pytest.StashKey[str]()

MARKERS = {
    "functional": "functional preflight gates (smoke, JSON, tools, streaming tool, continuation, Responses)",
    "reasoning": "reasoning prompt contract (per-effort prompt-token fingerprints)",
    "quality": "repeated quality checks reported as k/N",
    "capacity": "measurement gates: exact-length ladder, KV pool, concurrency; run alone",
    "engine": "engine facts and identity gates",
    "lifecycle": "startup, teardown and cleanup gates",
    "load": "measurement gate: sustained concurrency levels under per-request SLOs (goodput); run alone",
    "equivalence": "the output-equivalence probe (log probabilities for an A/B comparison); run alone",
    "recipe(name)": "run this module/class against the named recipe's server (one server at a time)",
    "gate(name)": "the evidence name of a gate (defaults to the test name without test_)",
}
MEASUREMENT_MARKERS = ("capacity", "load", "equivalence")
VLLMQUAL_FIXTURES = frozenset({"gate", "vllm_server", "qual_client", "server_facts", "recipe", "vllmqual_arm"})
"""A test using any of these touches the server: its report text is scrubbed like a gate's."""


# -- options --------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vllmqual", OPTION_GROUP_HELP)
    for option in COMMAND_LINE_OPTIONS:
        group.addoption(*option.flags, **option.keywords())
    parser.addini("vllmqual_recipe", "default recipe name or path", default=None)
    parser.addini("vllmqual_reports_dir", "reports directory", default=None)
    parser.addini("vllmqual_recipes_dir", "recipes directory", default=None)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_vllmqual import hookspecs as hooks

    pluginmanager.add_hookspecs(hooks)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _progress(config: pytest.Config) -> Any:
    def emit(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        text = f"[vllmqual] {line}"
        if reporter is None:
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(text)
        else:
            reporter.write_line(text)
    return emit


def activation_reason(config: pytest.Config) -> str | None:
    """Why this run asked for the qualification plugin, or None: then it stays inert."""
    return plugin_activation_reason(
        {option.dest: config.getoption(option.dest, None) for option in COMMAND_LINE_OPTIONS},
        env=os.environ, ini_recipe=config.getini("vllmqual_recipe") or None,
        collects_shipped_gates=names_shipped_gates([str(a) for a in config.args],
                                                   pyargs=bool(getattr(config.option, "pyargs", False)),
                                                   base=Path(str(config.invocation_params.dir))))


def _active_run(config: pytest.Config) -> QualRun:
    """The session's QualRun; a test that needs it in an inert session fails with the fix."""
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        pytest.fail("pytest_vllmqual is not active in this run, so there is no recipe or server. Fix: pass "
                    "--recipe=NAME|PATH or --vllmqual-endpoint URL (or set VLLMQUAL_RECIPE, or the ini key "
                    "vllmqual_recipe).", pytrace=False)
    return run


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if getattr(config.option, "help", False) or activation_reason(config) is None:
        return  # inert: no recipe resolution, no reports, no output, no changed exit code
    settings = resolve_settings(
        rootdir=Path(str(config.rootpath)),
        env=dict(os.environ),
        cli_recipe=config.getoption("vllmqual_recipe"),
        ini_recipe=config.getini("vllmqual_recipe") or None,
        cli_reports=config.getoption("vllmqual_reports_dir"),
        ini_reports=config.getini("vllmqual_reports_dir") or None,
        cli_endpoint=config.getoption("vllmqual_endpoint"),
        cli_recipes_dir=config.getoption("vllmqual_recipes_dir"),
        ini_recipes_dir=config.getini("vllmqual_recipes_dir") or None,
        invocation_dir=Path(str(config.invocation_params.dir)),
    )
    settings = dataclasses.replace(settings, overrides=tuple(config.getoption("vllmqual_set") or ()))
    try:
        settings, recipe = session_recipe(settings)
    except RecipeError as exc:
        raise pytest.UsageError(f"{exc} (recipe chosen by {settings.recipe.source})") from None
    except OSError as exc:
        raise pytest.UsageError(f"the discovered recipe cannot be written under {settings.reports_dir}: {exc}. "
                                "Fix: pass a writable --vllmqual-reports-dir.") from None
    config.stash[SETTINGS_KEY] = settings
    run = config.stash[RUN_KEY] = _new_run(config, settings, recipe)
    if isinstance(run, ControllerRun):
        config.pluginmanager.register(RunHooks(config, run), "vllmqual-run")
        _install_sigterm_handler()


def _new_run(config: pytest.Config, settings: Settings, recipe: Recipe) -> QualRun:
    """The session's run, built in one place: on an xdist worker, its view of the server the
    controller handed over; else the controller, its arms planned (``--ab``, ``--campaign``) and
    the report hooks passed in."""
    progress, args = _progress(config), list(config.invocation_params.args)
    if _is_worker(config):
        return WorkerRun(settings, recipe, progress=progress, invocation_args=args,
                         handoff=config.workerinput.get("vllmqual", {}))  # type: ignore[attr-defined]
    run = ControllerRun(settings, recipe, progress=progress, invocation_args=args, hooks=_ReportHookCalls(config))
    try:
        run.plan_arms(ab=config.getoption("vllmqual_ab"), bracket=bool(config.getoption("vllmqual_bracket")),
                      campaign=config.getoption("vllmqual_campaign"), rootdir=Path(str(config.rootpath)),
                      parallel=bool(config.getoption("numprocesses", None)),
                      reference=config.getoption("vllmqual_reference"),
                      marks=config.getoption("vllmqual_arm_marks") or ())
    except VllmQualError as exc:
        raise pytest.UsageError(str(exc)) from None
    return run


@dataclasses.dataclass
class _ReportHookCalls:
    """The report hooks (``hookspecs``) as the controller calls them for each arm's report."""

    config: pytest.Config

    def generate(self, record: RunRecord) -> Any:
        return self.config.hook.pytest_vllmqual_generate_report(config=self.config, record=record)

    def update(self, report: dict[str, Any]) -> None:
        self.config.hook.pytest_vllmqual_update_report(config=self.config, report=report)


def _install_sigterm_handler() -> None:
    """SIGTERM becomes KeyboardInterrupt, so teardown and the (incomplete) report still happen."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (embedded use)
        pass


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = config.stash.get(RUN_KEY, None)
    return [] if run is None else run.header_lines(config.stash[SETTINGS_KEY].recipe.source)


# -- arms and ordering ----------------------------------------------------------------------

def _arm_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("vllmqual_arm"):
        return str(callspec.params["vllmqual_arm"])
    marker = item.get_closest_marker("recipe")
    if marker is not None and marker.args:
        return str(marker.args[0])
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Arms are session-scoped parameters of ``vllmqual_arm``: with an A/B plan every gate runs
    once per arm (ids A-…, B-…, A2-…); a ``recipe`` marker names its arm. pytest then groups the
    tests by arm and tears an arm's server down before the next arm's starts."""
    run = metafunc.config.stash.get(RUN_KEY, None)
    if run is None or "vllmqual_arm" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("recipe")
    if marker is not None and marker.args:
        if str(marker.args[0]) != run.default_recipe.name:
            keys = [str(marker.args[0])]
            metafunc.parametrize("vllmqual_arm", keys, ids=keys, indirect=True, scope="session")
        return
    if run.plan:
        keys = [spec.key for spec in run.plan]
        metafunc.parametrize("vllmqual_arm", keys, ids=keys, indirect=True, scope="session")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group tests by arm so that each arm's server starts once, in plan order."""
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    if isinstance(run, ControllerRun) and run.arm_marks:
        _deselect_per_arm(config, run, items)
    sort_key = run.test_order([_arm_of(item) or run.default_recipe.name for item in items])
    items.sort(key=lambda it: sort_key(_arm_of(it) or run.default_recipe.name,
                                       _gate_name(it) if "gate" in getattr(it, "fixturenames", ()) else None))
    if not _is_worker(config) and any({"gate", "vllm_server"} & set(getattr(it, "fixturenames", ())) for it in items):
        try:  # before any server starts: a report that cannot be written makes the run worthless
            check_writable_dir(run.settings.reports_dir)
        except VllmQualError as exc:
            raise pytest.UsageError(str(exc)) from None


def _deselect_per_arm(config: pytest.Config, run: ControllerRun, items: list[pytest.Item]) -> None:
    """``--vllmqual-arm-marks``: an A/B arm keeps the tests its expression selects (as ``-m`` does,
    a gate's name counting as a marker); the others are deselected, and its report names them."""
    try:
        compiled = {key: Expression.compile(marks.expression) for key, marks in run.arm_marks.items()}
    except SyntaxError as exc:
        raise pytest.UsageError(f"--vllmqual-arm-marks: {exc.text!r} is not a marker expression: {exc.msg} at column "
                                f"{exc.offset}. Fix: write it as for -m, e.g. candidate='smoke or equivalence'.") from None

    def selects(item: pytest.Item, key: str) -> bool:
        marks, gate_name = MarkMatcher.from_markers(item.iter_markers()), _gate_name(item)
        return compiled[key].evaluate(lambda name, /, **kwargs: marks(name, **kwargs) or name == gate_name)

    dropped = [item for item in items if (_arm_of(item) or "") in compiled and not selects(item, str(_arm_of(item)))]
    for item in dropped:
        item.stash[DESELECTED_BY_KEY] = run.arm_marks[str(_arm_of(item))].how
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


# -- the server for a test ------------------------------------------------------------------


def _fail(exc: VllmQualError, config: pytest.Config) -> None:
    """Fail with the harness's own account (LaunchError's str carries no log text), scrubbed.
    The failure carries the error's status, so a gate that reuses a session fixture's cached
    failure still records why (``startup_timeout``, ``server_dead``, ...)."""
    failure = pytest.fail.Exception(_session_sanitizer(config).scrub(str(exc)), pytrace=False)
    failure.vllmqual_status = getattr(exc, "status", None)  # type: ignore[attr-defined]
    raise failure from None  # said once: not again as "during handling of" the error it words


def _arm_key(request: pytest.FixtureRequest) -> str:
    run = request.config.stash[RUN_KEY]
    return _arm_of(request.node) or run.default_recipe.name


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
    return _progress(request.config)


@pytest.fixture
def gate(request: pytest.FixtureRequest, vllmqual_arm: str) -> GateRecorder:
    """Where this gate records attempts, measurements, thresholds and its k/N summary."""
    recorder: GateRecorder | None = request.node.stash.get(RECORD_KEY, None)
    return recorder if recorder is not None else _new_recorder(request.node)


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


def _gate_name(item: pytest.Item) -> str:
    marker = item.get_closest_marker("gate")
    if marker is not None and marker.args:
        return str(marker.args[0])
    name = getattr(item, "originalname", None) or item.name
    return name[5:] if name.startswith("test_") else name


def _new_recorder(item: pytest.Item) -> GateRecorder:
    config = item.config
    run = config.stash[RUN_KEY]
    arm = _arm_of(item) or run.default_recipe.name
    private_dir = run.private_dir(arm)
    prefix = f"{config.workerinput['workerid']}-" if _is_worker(config) else ""  # type: ignore[attr-defined]
    doc = (getattr(item, "obj", None).__doc__ or "").strip().splitlines() if hasattr(item, "obj") else []
    name = _gate_name(item)
    record = GateRecord(
        nodeid=item.nodeid, gate=name, title=title_of(name, doc[0] if doc else ""),
        markers=sorted({m.name for m in item.iter_markers() if m.name in MARKERS}),
        arm=arm,
    )
    recorder = GateRecorder(record, private_dir, prefix=prefix)
    item.stash[RECORD_KEY] = recorder
    return recorder


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if "gate" in getattr(item, "fixturenames", ()) and RUN_KEY in item.config.stash:
        recorder = _new_recorder(item)
        if not item.config.getoption("vllmqual_no_fail_fast"):
            from pytest_vllmqual.session.gate_order import stop_reason

            reason = stop_reason(recorder.private_dir)
            if reason is not None:
                recorder.record.status = "not_run"
                pytest.skip(f"{reason} (--vllmqual-no-fail-fast runs it anyway)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    recorder = item.stash.get(RECORD_KEY, None)
    if recorder is None:
        if RUN_KEY in item.config.stash and set(getattr(item, "fixturenames", ())) & VLLMQUAL_FIXTURES:
            scrub_test_report(report, _session_sanitizer(item.config))
        return
    record = recorder.record
    if call.excinfo is not None and isinstance(call.excinfo.value, ServerGoneError):
        gone = call.excinfo.value
        record.status = gone.status
        # The harness's verdict only; the log tail is server text and stays in the private folder.
        report.longrepr = f"{gone.status}: {gone}"
    final = report.when == "call" or (report.when == "setup" and report.outcome != "passed")
    if not final:
        scrub_test_report(report, _session_sanitizer(item.config))  # a teardown error, captured output
        return
    record.outcome = GateOutcome("error" if report.when == "setup" and report.outcome == "failed" else report.outcome)
    record.duration_s = round(report.duration, 4)
    if (call.excinfo is not None and report.failed and not isinstance(call.excinfo.value, ServerGoneError)
            and repeats_its_causes(call.excinfo.value)):  # a server gone is already worded once above
        _drop_repeated_causes(item, call.excinfo, report)
    if report.outcome != "passed":
        record.reason = report_reason(report, call.excinfo.value if call.excinfo is not None else None)
        if call.excinfo is not None and isinstance(call.excinfo.value, ServerGoneError):
            record.reason = f"{call.excinfo.value.status}: {call.excinfo.value}"  # not the log tail's last lines
    if report.when == "setup" and record.status is None and call.excinfo is not None:
        error = call.excinfo.value
        record.status = getattr(error, "vllmqual_status", None) or getattr(error, "status", None)
    if report.when == "setup" and report.failed and call.excinfo is not None:
        _startup_failure_said_once(item, report, call.excinfo.value)
    if (record.outcome in ("failed", "error") and record.status is None
            and not item.config.getoption("vllmqual_no_fail_fast")):  # a startup failure has its own status
        from pytest_vllmqual.session.gate_order import record_stop

        record_stop(recorder.private_dir, record.gate)
    data = record.to_dict()
    report.vllmqual_gate = data  # type: ignore[attr-defined]
    sanitizer = _session_sanitizer(item.config)
    properties = gate_junit_properties(record, sanitizer)
    # junit writes the properties of the *teardown* report, which pytest builds from the item.
    item.user_properties.extend(properties)
    report.user_properties.extend(properties)
    scrub_test_report(report, sanitizer)


def _session_sanitizer(config: pytest.Config) -> Sanitizer:
    """One Sanitizer per session, taught the run's secrets (API keys, recipe env values)."""
    cached = config.stash.get(SANITIZER_KEY, None)
    if cached is None:
        cached = config.stash[SANITIZER_KEY] = Sanitizer()
    run = config.stash.get(RUN_KEY, None)
    return run.public_text_sanitizer(cached) if run is not None else cached


def _startup_failure_said_once(item: pytest.Item, report: pytest.TestReport, error: BaseException) -> None:
    """A failed start fails every gate of its arm alike: shown in full at the first, pointed to after."""
    status = getattr(error, "vllmqual_status", None)
    first = item.config.stash.setdefault(STARTUP_SAID_KEY, {}).setdefault(f"{_arm_of(item)}\n{error}", item.nodeid)
    if status is not None and first != item.nodeid:
        report.longrepr = f"not run: the server did not start [{status}], as reported in full at {first}"


def _drop_repeated_causes(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException],
                          report: pytest.TestReport) -> None:
    """The failure's own message already says what its causes say: the terminal shows it once."""
    excinfo.value.__cause__ = None
    excinfo.value.__suppress_context__ = True
    report.longrepr = item.repr_failure(excinfo)


class RunHooks:
    """The controller's hooks that need the session's run but get no ``config`` from pytest,
    registered as an object that holds both (no module globals); an xdist worker has none."""

    def __init__(self, config: pytest.Config, run: ControllerRun) -> None:
        self.config = config
        self.run = run

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Under xdist the controller starts the server and hands it to each worker through
        ``workerinput`` (the pytest-rerunfailures pattern)."""
        node.workerinput["vllmqual"] = self.run.handoff()

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Gates left out by -m/-k/--vllmqual-arm-marks are recorded by name: the decision lists them."""
        option = self.config.option
        how = " ".join(f"{flag} {value!r}" for flag, value in (("-m", option.markexpr), ("-k", option.keyword))
                       if value)
        for item in items:
            if "gate" in getattr(item, "fixturenames", ()):
                self.run.record_deselected(_arm_of(item) or self.run.default_recipe.name, _gate_name(item),
                                           item.stash.get(DESELECTED_BY_KEY, how))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "vllmqual_gate", None)
        if data:
            self.run.add_gate(data.get("arm") or self.run.default_recipe.name, data)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.run.mark_interrupted()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        outcome = self.run.finish_session(
            interrupted=bool(session.shouldstop or session.shouldfail) or exitstatus == pytest.ExitCode.INTERRUPTED,
            failed_tests=int(session.testsfailed))
        judged = session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
        if outcome == "campaign_passed" and judged:  # every failure is one a qualified fallback stood in for
            session.exitstatus = pytest.ExitCode.OK
        elif outcome in ("report_not_written", "not_equivalent") or (outcome == "campaign_failed" and judged):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest's junit XML names this machine (testsuite hostname): redact it like the report does."""
    xmlpath = getattr(config.option, "xmlpath", None)
    if not xmlpath or _is_worker(config) or RUN_KEY not in config.stash:
        return
    from pytest_vllmqual.report.junit import redact_junit_hostname, scrub_junit

    try:
        redact_junit_hostname(Path(os.path.abspath(xmlpath)))
        scrub_junit(Path(os.path.abspath(xmlpath)), _session_sanitizer(config))
    except VllmQualError as exc:
        config.stash[RUN_KEY].progress(f"junit XML not redacted: {exc}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if not isinstance(run, ControllerRun):
        return  # inert, or an xdist worker: the controller prints the summary
    for title, lines in run.summary_sections():
        terminalreporter.write_sep("=", f"vllmqual: {title}")
        for line in lines:
            terminalreporter.write_line(line)
