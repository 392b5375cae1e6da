"""pytest glue: options, markers, xdist hand-off, collection order, report hooks. With
``hookspecs`` and ``fixtures`` (which this module registers as a plugin: ``pytest_plugins``),
the only modules that import pytest; the work is done by the pytest-free core (ARCHITECTURE.md).

The run (``session.run.QualRun``) lives in ``config.stash``. The fixtures, one name each, are in
``fixtures``: ``vllmqual_arm``, ``vllm_server``, ``recipe``, ``gate``, ``qual_client``,
``server_facts`` and ``progress``. A gate's outcome and status are decided by the recorder
(``gates.recorder.end_phase``) from the values this module reads off pytest's report.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark import MarkMatcher
from _pytest.mark.expression import Expression

from pytest_vllmqual.atomic_io import check_writable_dir
from pytest_vllmqual.errors import RecipeError, ServerGoneError, VllmQualError
from pytest_vllmqual.gates.recorder import GateRecorder, end_phase, failed_on_its_own
from pytest_vllmqual.gates.registry import title_of
from pytest_vllmqual.gates.verdict import GateVerdict
from pytest_vllmqual.layout import names_shipped_gates
from pytest_vllmqual.privacy.failure_reason import repeats_its_causes, report_reason
from pytest_vllmqual.privacy.sanitize import Sanitizer, scrub_test_report
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.records import GateRecord, RunRecord, ServerStatus, StartupStatus
from pytest_vllmqual.session.controller import ControllerRun
from pytest_vllmqual.session.run import QualRun, gate_junit_properties, session_recipe
from pytest_vllmqual.session.settings import (
    COMMAND_LINE_OPTIONS,
    OPTION_GROUP_HELP,
    Settings,
    plugin_activation_reason,
    resolve_settings,
)
from pytest_vllmqual.session.worker import WorkerRun

__all__ = ["MARKERS", "MEASUREMENT_MARKERS", "RECORD_KEY", "RUN_KEY", "RunHooks", "activation_reason", "arm_of",
           "end_gate", "gate_name", "new_recorder", "progress_printer", "session_sanitizer"]

pytest_plugins = ["pytest_vllmqual.fixtures"]


def end_gate(verdict: GateVerdict) -> None:
    """A gate test's last line: a skip with the verdict's reason (not applicable, or not measured),
    else the assertion that it passed, failing with the first rule it broke. Hidden from the
    traceback, so a skip or a failure points at the gate's own line."""
    __tracebackhide__ = True
    if verdict.skip_reason:
        pytest.skip(verdict.skip_reason)
    assert verdict.passed, verdict.failure
"""The fixtures, registered with this plugin (and blocked with it by ``-p no:vllmqual``)."""

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
    "items": "the item bank: questions with exact answers, greedy, for a task-level comparison; run alone",
    "load_floor": "the floor under load: the probe and items alone and at each load level, for a comparison; run alone",
    "recipe(name)": "run this module/class against the named recipe's server (one server at a time)",
    "gate(name)": "the evidence name of a gate (defaults to the test name without test_)",
}
MEASUREMENT_MARKERS = ("capacity", "load", "equivalence", "items", "load_floor")
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


def progress_printer(config: pytest.Config) -> Callable[[str], None]:
    """A ProgressFn: one ``[vllmqual]`` line on the terminal, past output capture."""
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
    _register_launchers(config)
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


def _register_launchers(config: pytest.Config) -> None:
    """The launchers conftests and plugins add (``pytest_vllmqual_launchers``), registered before
    the recipe that may name them is loaded."""
    from pytest_vllmqual.launch.registry import register

    try:
        for classes in config.hook.pytest_vllmqual_launchers(config=config):
            for cls in classes or ():
                register(cls)
    except VllmQualError as exc:
        raise pytest.UsageError(str(exc)) from None


def _new_run(config: pytest.Config, settings: Settings, recipe: Recipe) -> QualRun:
    """The session's run, built in one place: on an xdist worker, its view of the server the
    controller handed over; else the controller, its arms planned (``--ab``, ``--campaign``) and
    the report hooks passed in."""
    progress, args = progress_printer(config), list(config.invocation_params.args)
    if _is_worker(config):
        return WorkerRun(settings, recipe, progress=progress, invocation_args=args,
                         handoff=config.workerinput.get("vllmqual", {}))  # type: ignore[attr-defined]
    run = ControllerRun(settings, recipe, progress=progress, invocation_args=args, hooks=_ReportHookCalls(config))
    run.strict = bool(config.getoption("vllmqual_strict"))
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

def arm_of(item: pytest.Item) -> str | None:
    """The key of the test's arm (its ``vllmqual_arm`` parameter or ``recipe`` marker); None: the session recipe."""
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
    sort_key = run.test_order([arm_of(item) or run.default_recipe.name for item in items])
    items.sort(key=lambda it: sort_key(arm_of(it) or run.default_recipe.name,
                                       gate_name(it) if "gate" in getattr(it, "fixturenames", ()) else None))
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
        marks, named = MarkMatcher.from_markers(item.iter_markers()), gate_name(item)
        return compiled[key].evaluate(lambda name, /, **kwargs: marks(name, **kwargs) or name == named)

    dropped = [item for item in items if (arm_of(item) or "") in compiled and not selects(item, str(arm_of(item)))]
    for item in dropped:
        item.stash[DESELECTED_BY_KEY] = run.arm_marks[str(arm_of(item))].how
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


# -- gates: their records and how they ended ----------------------------------------------


def gate_name(item: pytest.Item) -> str:
    """The gate's evidence name: its ``gate`` marker's, else the test's name without ``test_``."""
    marker = item.get_closest_marker("gate")
    if marker is not None and marker.args:
        return str(marker.args[0])
    name = getattr(item, "originalname", None) or item.name
    return name[5:] if name.startswith("test_") else name


def new_recorder(item: pytest.Item) -> GateRecorder:
    """A fresh recorder for the gate ``item`` (kept in its stash, where the ``gate`` fixture finds it)."""
    config = item.config
    run = config.stash[RUN_KEY]
    arm = arm_of(item) or run.default_recipe.name
    private_dir = run.private_dir(arm)
    prefix = f"{config.workerinput['workerid']}-" if _is_worker(config) else ""  # type: ignore[attr-defined]
    doc = (getattr(item, "obj", None).__doc__ or "").strip().splitlines() if hasattr(item, "obj") else []
    name = gate_name(item)
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
        recorder = new_recorder(item)
        if not item.config.getoption("vllmqual_no_fail_fast"):
            from pytest_vllmqual.session.gate_order import stop_reason

            reason = stop_reason(recorder.private_dir)
            if reason is not None:
                recorder.record.status = StartupStatus.NOT_RUN
                pytest.skip(f"{reason} (--vllmqual-no-fail-fast runs it anyway)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A gate's phase report: the recorder decides what it says about the gate (``end_phase``);
    here, what pytest shows of it (said once, scrubbed) and the gate's entry it carries."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    recorder = item.stash.get(RECORD_KEY, None)
    if recorder is None:
        if RUN_KEY in item.config.stash and set(getattr(item, "fixturenames", ())) & VLLMQUAL_FIXTURES:
            scrub_test_report(report, session_sanitizer(item.config))
        return
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, ServerGoneError):
        # The harness's verdict only; the log tail is server text and stays in the private folder.
        report.longrepr = f"{error.status}: {error}"
    elif call.excinfo is not None and report.failed and report.when != "teardown" and repeats_its_causes(call.excinfo.value):
        _drop_repeated_causes(item, call.excinfo, report)  # a teardown error keeps pytest's own rendering
    ended = end_phase(recorder.record, when=report.when, outcome=report.outcome, duration_s=report.duration,
                      error=error, error_status=getattr(error, "vllmqual_status", None) or getattr(error, "status", None),
                      reason=None if report.passed else report_reason(report, error))
    if not ended:
        scrub_test_report(report, session_sanitizer(item.config))  # a teardown error, captured output
        return
    if report.when == "setup" and report.failed and error is not None:
        _startup_failure_said_once(item, report, error)
    if failed_on_its_own(recorder.record) and not item.config.getoption("vllmqual_no_fail_fast"):
        from pytest_vllmqual.session.gate_order import record_stop

        record_stop(recorder.private_dir, recorder.record.gate)
    report.vllmqual_gate = recorder.record.to_dict()  # type: ignore[attr-defined]
    sanitizer = session_sanitizer(item.config)
    properties = gate_junit_properties(recorder.record, sanitizer)
    # junit writes the properties of the *teardown* report, which pytest builds from the item.
    item.user_properties.extend(properties)
    report.user_properties.extend(properties)
    scrub_test_report(report, sanitizer)


def session_sanitizer(config: pytest.Config) -> Sanitizer:
    """One Sanitizer per session, taught the run's secrets (API keys, recipe env values)."""
    cached = config.stash.get(SANITIZER_KEY, None)
    if cached is None:
        cached = config.stash[SANITIZER_KEY] = Sanitizer()
    run = config.stash.get(RUN_KEY, None)
    return run.public_text_sanitizer(cached) if run is not None else cached


def _startup_failure_said_once(item: pytest.Item, report: pytest.TestReport, error: BaseException) -> None:
    """A failed start fails every gate of its arm alike: shown in full at the first, pointed to after."""
    status = getattr(error, "vllmqual_status", None)
    first = item.config.stash.setdefault(STARTUP_SAID_KEY, {}).setdefault(f"{arm_of(item)}\n{error}", item.nodeid)
    if status is not None and first != item.nodeid:
        report.longrepr = f"not run: {_gone_words(status, getattr(error, 'vllmqual_during', None))} [{status}], " \
                          f"as reported in full at {first}"


def _gone_words(status: str, during: str | None) -> str:
    """A server that had started and then went is said to have died (during which gate), never
    to have not started."""
    if status == ServerStatus.SERVER_DEAD:
        return f"the server died during gate {during}" if during else "the server died"
    if status == ServerStatus.HUNG:
        return f"the server hung during gate {during}" if during else "the server hung"
    return "the server did not start"


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
                self.run.record_deselected(arm_of(item) or self.run.default_recipe.name, gate_name(item),
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
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            session.exitstatus = self.run.exit_code(int(session.exitstatus))  # a check not measured, strict: 1


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest's junit XML names this machine (testsuite hostname): redact it like the report does."""
    xmlpath = getattr(config.option, "xmlpath", None)
    if not xmlpath or _is_worker(config) or RUN_KEY not in config.stash:
        return
    from pytest_vllmqual.report.junit import redact_junit_hostname, scrub_junit

    try:
        redact_junit_hostname(Path(os.path.abspath(xmlpath)))
        scrub_junit(Path(os.path.abspath(xmlpath)), session_sanitizer(config))
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
