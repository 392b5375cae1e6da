"""pytest glue: options, markers, fixtures, xdist hand-off, report hooks.

This is the only module that imports pytest. Everything it does is delegated to the
pytest-free core (recipe, launch, client, session, run, evidence).

Fixtures (all function-scoped handles over one session-scoped owner, the pytest-httpserver
layering); the ``vllmqual_*`` names are the public ones, the short names are kept as aliases:

- ``vllmqual_recipe`` / ``recipe`` -> Recipe: the recipe of the test's arm (``--recipe`` or a
  ``recipe`` marker).
- ``vllm_server`` -> ServerHandle: that recipe's server, started on first use and ready
  (override it in a conftest to bring your own server).
- ``vllmqual_gate`` / ``gate`` -> GateRecorder: where the test records attempts, measurements
  and a summary.
- ``vllmqual_client`` / ``qual_client`` -> QualClient: an API client wired to the gate and to
  the liveness guard.
- ``vllmqual_server_facts`` / ``server_facts`` -> dict: engine facts, endpoint facts and the
  identity check.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from .client import QualClient
from .errors import LaunchError, RecipeError, ServerGoneError, VllmQualError
from .gates import family_of, title_of
from .launch.base import ServerHandle
from .recipe import Recipe, resolve_recipe, with_overrides
from .records import GateRecord
from .run import QualRun, ab_plan
from .session import STATE_FILE, GateRecorder, ServerGuard, ServerManager, traffic_lock
from .settings import Setting, Settings, resolve_settings

RUN_KEY = pytest.StashKey[QualRun]()
SETTINGS_KEY = pytest.StashKey[Settings]()
WORKER_KEY = pytest.StashKey[dict[str, Any]]()
RECORD_KEY = pytest.StashKey[GateRecorder]()
SANITIZER_KEY = pytest.StashKey[Any]()

MARKERS = {
    "functional": "functional preflight gates (smoke, JSON, tools, streaming tool, continuation, Responses)",
    "reasoning": "reasoning prompt contract (per-effort prompt-token fingerprints)",
    "quality": "repeated quality checks reported as k/N",
    "capacity": "measurement gates: exact-length ladder, KV pool, concurrency; run alone",
    "engine": "engine facts and identity gates",
    "lifecycle": "startup, teardown and cleanup gates",
    "recipe(name)": "run this module/class against the named recipe's server (one server at a time)",
    "gate(name)": "the evidence name of a gate (defaults to the test name without test_)",
}
MEASUREMENT_MARKERS = ("capacity",)
VLLMQUAL_FIXTURES = frozenset({"gate", "vllm_server", "qual_client", "server_facts", "recipe", "vllmqual_arm"})
"""A test using any of these touches the server: its report text is scrubbed like a gate's."""


# -- options --------------------------------------------------------------------------------


ENV_HELP = (
    "VLLMQUAL_RECIPE (recipe), VLLMQUAL_ENDPOINT (running server), VLLMQUAL_REPORTS_DIR, "
    "VLLMQUAL_RECIPES_DIR, VLLMQUAL_CACHE_DIR (fixture model builds; default ~/.cache/vllmqual), "
    "VLLM_API_KEY (API key of a running server, or the variable a recipe's launcher.api_key_env names), "
    "HF_TOKEN / HUGGING_FACE_HUB_TOKEN (passed to docker servers)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(
        "vllmqual", f"LLM serve qualification (pytest_vllmqual; inactive unless --recipe, --vllmqual-endpoint, "
        f"VLLMQUAL_RECIPE, ini vllmqual_recipe or the shipped gates ask for it). Environment: {ENV_HELP}")
    group.addoption("--recipe", "--vllmqual-recipe", dest="vllmqual_recipe", metavar="NAME|PATH", default=None,
                    help="recipe to qualify: a name in the recipes dir (or a shipped one) or a YAML path. "
                    "Precedence: --recipe, then $VLLMQUAL_RECIPE, then ini vllmqual_recipe, then 'tiny-cpu'. "
                    "With --vllmqual-endpoint and no recipe, the recipe is discovered from the server.")
    group.addoption("--vllmqual-reports-dir", dest="vllmqual_reports_dir", metavar="DIR", default=None,
                    help="where reports are written (default: ./reports/ of the directory pytest runs in; private "
                    "artifacts under DIR/private/). Env: VLLMQUAL_REPORTS_DIR.")
    group.addoption("--vllmqual-endpoint", dest="vllmqual_endpoint", metavar="URL", default=None,
                    help="run the gates against an already running server (direct-only, no lifecycle); without a "
                    "recipe, one is discovered from /v1/models, /version and /metrics. Env: VLLMQUAL_ENDPOINT; "
                    "the server's key: VLLM_API_KEY.")
    group.addoption("--vllmqual-recipes-dir", dest="vllmqual_recipes_dir", metavar="DIR", default=None,
                    help="where named recipes are looked up (default: ./fixtures/recipes when the project has one, "
                    "then the shipped recipes). Env: VLLMQUAL_RECIPES_DIR.")
    group.addoption("--vllmqual-ab", "--ab", dest="vllmqual_ab", metavar="CONTROL,CANDIDATE", default=None,
                    help="A/B: run every gate against the control recipe, then the candidate "
                    "(one server at a time), write a report per arm and comparison.json.")
    group.addoption("--vllmqual-bracket", "--bracket", dest="vllmqual_bracket", action="store_true", default=False,
                    help="with --ab: replay the control after the candidate (A, B, A).")
    group.addoption("--vllmqual-campaign", "--campaign", dest="vllmqual_campaign", metavar="NAME|FILE|SPEC", default=None,
                    help="an ordered campaign of arms with stop conditions and fallbacks, e.g. 393k "
                    "(fixtures/campaigns/393k.yaml) or '393k-fp8kv:kv_pool+ladder,393k-offload?fallback'.")
    group.addoption("--vllmqual-set", dest="vllmqual_set", metavar="KEY=VALUE", action="append", default=[],
                    help="override a recipe key for this run (repeatable; dotted keys, YAML values), e.g. "
                    "--vllmqual-set serve.max_num_seqs=4 --vllmqual-set launcher.docker.model_cache=/data/hf. "
                    "The report records the overrides and the SHA-256 of the effective recipe.")
    group.addoption("--vllmqual-no-fail-fast", dest="vllmqual_no_fail_fast", action="store_true", default=False,
                    help="run every gate even after smoke or identity failed (default: the remaining gates "
                    "end as 'not run: smoke failed' / 'not run: identity mismatch').")
    parser.addini("vllmqual_recipe", "default recipe name or path", default=None)
    parser.addini("vllmqual_reports_dir", "reports directory", default=None)
    parser.addini("vllmqual_recipes_dir", "recipes directory", default=None)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hooks

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
    from .settings import ENDPOINT_ENV, RECIPE_ENV

    for dest, name in (("vllmqual_recipe", "--recipe"), ("vllmqual_endpoint", "--vllmqual-endpoint"),
                       ("vllmqual_ab", "--ab"), ("vllmqual_campaign", "--campaign"),
                       ("vllmqual_reports_dir", "--vllmqual-reports-dir"),
                       ("vllmqual_recipes_dir", "--vllmqual-recipes-dir"), ("vllmqual_set", "--vllmqual-set")):
        if config.getoption(dest, None):
            return name  # any of the plugin's own options on the command line is an explicit ask
    for env in (RECIPE_ENV, ENDPOINT_ENV):
        if os.environ.get(env):
            return env
    if config.getini("vllmqual_recipe"):
        return "ini vllmqual_recipe"
    if _collects_shipped_gates(config):
        return "the shipped gates are collected"
    return None


def _collects_shipped_gates(config: pytest.Config) -> bool:
    """Whether the run's arguments name the shipped gates (``--pyargs pytest_vllmqual.suites`` or a path)."""
    from .layout import is_shipped_suite

    pyargs = bool(getattr(config.option, "pyargs", False))
    base = Path(str(config.invocation_params.dir))
    for arg in config.args:
        target = str(arg).split("::", 1)[0]
        if pyargs and (target == "pytest_vllmqual" or target.startswith("pytest_vllmqual.suites")):
            return True
        if target and is_shipped_suite(base / target):
            return True
    return False


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
        if settings.endpoint.value and settings.recipe.source == "embedded default":
            from .discover import discover_recipe

            recipe = discover_recipe(str(settings.endpoint.value), api_key=os.environ.get("VLLM_API_KEY"),
                                     directory=settings.reports_dir / "private" / "discovered")
            settings = dataclasses.replace(settings, recipe=Setting(recipe.name, "discovery from the endpoint"))
        else:
            recipe = resolve_recipe(str(settings.recipe.value), settings.recipes_dir)
        recipe = with_overrides(recipe, settings.overrides)
    except RecipeError as exc:
        raise pytest.UsageError(f"{exc} (recipe chosen by {settings.recipe.source})") from None
    except OSError as exc:
        raise pytest.UsageError(f"the discovered recipe cannot be written under {settings.reports_dir}: {exc}. "
                                "Fix: pass a writable --vllmqual-reports-dir.") from None
    config.stash[SETTINGS_KEY] = settings
    if _is_worker(config):
        config.stash[WORKER_KEY] = config.workerinput.get("vllmqual", {})  # type: ignore[attr-defined]
    config.stash[RUN_KEY] = QualRun(settings, recipe, progress=_progress(config),
                                    invocation_args=list(config.invocation_params.args))
    run = config.stash[RUN_KEY]
    ab = config.getoption("vllmqual_ab")
    if config.getoption("vllmqual_bracket") and not ab:
        raise pytest.UsageError("--bracket needs --ab CONTROL,CANDIDATE. Fix: add --ab=131k-control,131k-4096.")
    if ab:
        if config.getoption("numprocesses", None) and not _is_worker(config):
            raise pytest.UsageError("--ab runs its arms in order with one server at a time, which xdist "
                                    "cannot do. Fix: drop -n for the A/B run.")
        try:
            run.set_plan(ab_plan(ab, bracket=config.getoption("vllmqual_bracket")))
        except RecipeError as exc:
            raise pytest.UsageError(f"{exc} (from --ab)") from None
    campaign = config.getoption("vllmqual_campaign")
    if campaign:
        if ab:
            raise pytest.UsageError("--campaign and --ab both plan arms. Fix: use one of them.")
        if config.getoption("numprocesses", None) and not _is_worker(config):
            raise pytest.UsageError("--campaign runs its arms in order with one server at a time, which xdist "
                                    "cannot do. Fix: drop -n for the campaign run.")
        from .campaign import campaigns_dir, load_campaign

        try:
            from .layout import shipped_campaigns_dir

            run.set_campaign(load_campaign(campaign, search_dirs=[campaigns_dir(Path(str(config.rootpath))),
                                                                  shipped_campaigns_dir()]))
        except VllmQualError as exc:
            raise pytest.UsageError(f"{exc} (from --campaign)") from None
    hook = config.hook
    run.generate = lambda record: hook.pytest_vllmqual_generate_report(config=config, record=record)
    run.update = lambda report: hook.pytest_vllmqual_update_report(config=config, report=report)
    run.on_arm_done = lambda arm: _write_arm_report_safely(run, arm)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "vllmqual-xdist")
    if not _is_worker(config):
        _install_sigterm_handler()


def _write_arm_report_safely(run: QualRun, arm: Any) -> None:
    """An arm finished mid-session (the next arm starts): write its report now, or say why not."""
    try:
        run.write_arm_report(arm)
    except (VllmQualError, OSError) as exc:
        run.progress(f"REPORT NOT WRITTEN for {arm.key}: {exc}")


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
    if run is None:
        return []
    r = run.default_recipe
    settings = config.stash[SETTINGS_KEY]
    rev = r.identity.revision or "unpinned"
    image = r.identity.image or "no image (subprocess)"
    lines = [
        f"vllmqual: recipe {r.name} ({r.path}, sha256 {r.sha256[:12]}) chosen by {settings.recipe.source}",
        f"vllmqual: identity {r.identity.checkpoint}@{rev}, {image}, runtime {r.identity.runtime_version}, "
        f"served as {r.identity.served_model_name}; launcher {'external' if settings.endpoint.value else r.launcher.kind}; "
        f"TP={r.serve.tensor_parallel_size} max_model_len={r.serve.max_model_len}",
        f"vllmqual: reproduce with: {run.reproduce_line(r.name)}",
    ]
    if r.discovered:
        lines.insert(1, "vllmqual: the recipe was DISCOVERED from the endpoint, not pinned: gates record what "
                        "they measure; thresholds only a pinned recipe knows are not checked")
    if r.overrides:
        lines.insert(1, f"vllmqual: overrides {', '.join(r.overrides)} -> effective recipe sha256 {r.sha256}")
    return lines


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
    """With an A/B plan, every gate runs once per arm (ids A-…, B-…, A2-…)."""
    run = metafunc.config.stash.get(RUN_KEY, None)
    if run is None or not run.plan or "vllmqual_arm" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("recipe") is not None:
        return
    keys = [spec.key for spec in run.plan]
    metafunc.parametrize("vllmqual_arm", keys, ids=keys, indirect=True)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group tests by arm so that each arm's server starts once, in plan order."""
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    default = run.default_recipe.name
    order: dict[str, int] = {spec.key: i for i, spec in enumerate(run.plan)}
    order.setdefault(default, len(order))
    for item in items:
        arm = _arm_of(item) or default
        order.setdefault(arm, len(order))
    from .gate_order import stage_rank

    def stage(item: pytest.Item) -> int:
        return stage_rank(_gate_name(item) if "gate" in getattr(item, "fixturenames", ()) else None)

    items.sort(key=lambda it: (order[_arm_of(it) or default], stage(it)))
    if not _is_worker(config) and any({"gate", "vllm_server"} & set(getattr(it, "fixturenames", ())) for it in items):
        from .atomic_io import check_writable_dir

        try:  # before any server starts: a report that cannot be written makes the run worthless
            check_writable_dir(run.settings.reports_dir)
        except VllmQualError as exc:
            raise pytest.UsageError(str(exc)) from None


# -- xdist: the controller owns the server --------------------------------------------------


class XdistHooks:
    """Registered only when xdist is present: hand the server to workers via workerinput."""

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        config: pytest.Config = node.config
        run = config.stash[RUN_KEY]
        arm = run.arm(run.default_recipe.name)
        manager = run.activate(arm)
        info: dict[str, Any] = {"arm": arm.key, "run_id": arm.run_id, "private_dir": str(arm.private_dir)}
        try:
            handle = manager.ensure_ready()
        except LaunchError as exc:
            info["startup_error"] = {"message": str(exc.args[0]) if exc.args else "", "status": exc.status,
                                     "exit_code": exc.exit_code, "log_tail": exc.log_tail, "hint": exc.hint,
                                     "details": exc.details}
        else:
            info["handle"] = {"base_url": handle.base_url, "served_model_name": handle.served_model_name,
                              "launcher_kind": handle.launcher_kind, "api_key": handle.api_key,
                              "direct_only": handle.direct_only, "cold_start_s": handle.cold_start_s}
            info["facts"] = {"engine": manager.facts.engine, "endpoints": manager.facts.endpoints,
                             "identity": manager.facts.identity, "cold_start_s": manager.facts.cold_start_s}
        node.workerinput["vllmqual"] = info


# -- the server for a test ------------------------------------------------------------------


class _WorkerServer:
    """A worker's view of the controller's server (no lifecycle, same private dir)."""

    def __init__(self, info: dict[str, Any], recipe: Recipe) -> None:
        self.info = info
        self.recipe = recipe
        self.private_dir = Path(info["private_dir"])
        self.handle = ServerHandle(**info["handle"]) if "handle" in info else None
        self.guard = (ServerGuard(self.handle, self.private_dir / STATE_FILE,
                                  probe_timeout_s=recipe.startup.ready_completion_timeout_s)
                      if self.handle else None)

    def ensure_ready(self) -> ServerHandle:
        if self.handle is None:
            err = self.info.get("startup_error", {})
            raise LaunchError(err.get("message", "the server did not start"), status=err.get("status", "unknown"),
                              exit_code=err.get("exit_code"), log_tail=err.get("log_tail", ""),
                              hint=err.get("hint", ""), details=err.get("details") or {})
        return self.handle

    @property
    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = self.info.get("facts", {})
        return facts


def _fail(exc: VllmQualError, config: pytest.Config) -> None:
    """Fail with the harness's own account (LaunchError's str carries no log text), scrubbed."""
    pytest.fail(_session_sanitizer(config).scrub(str(exc)), pytrace=False)


def _arm_key(request: pytest.FixtureRequest) -> str:
    run = request.config.stash[RUN_KEY]
    return _arm_of(request.node) or run.default_recipe.name


@pytest.fixture
def vllmqual_arm(request: pytest.FixtureRequest) -> str:
    """The key of this test's arm: an A/B or campaign arm, a ``recipe`` marker's recipe, or the
    session recipe. A campaign arm that its campaign does not run is skipped with the reason."""
    run = _active_run(request.config)
    key = _arm_key(request)
    if run.campaign is not None and not _is_worker(request.config):
        reason = run.campaign_skip_reason(key)
        if reason is not None:
            pytest.skip(f"campaign: {reason}")
    return key


@pytest.fixture
def recipe(request: pytest.FixtureRequest, vllmqual_arm: str) -> Recipe:
    """The Recipe of this test's arm."""
    run = request.config.stash[RUN_KEY]
    try:
        return run.arm(vllmqual_arm).recipe
    except RecipeError as exc:
        _fail(exc, request.config)
        raise


def _server_owner(request: pytest.FixtureRequest) -> ServerManager | _WorkerServer:
    config = request.config
    run = config.stash[RUN_KEY]
    key = _arm_key(request)
    if _is_worker(config):
        info = config.stash[WORKER_KEY]
        if key != info.get("arm"):
            pytest.fail(f"recipe marker {key!r}: under xdist only the session recipe "
                        f"{info.get('arm')!r} has a server. Fix: run recipe-marked tests without -n.",
                        pytrace=False)
        return _WorkerServer(info, run.arm(key).recipe)
    return run.activate(run.arm(key))


@pytest.fixture
def vllm_server(request: pytest.FixtureRequest, vllmqual_arm: str) -> ServerHandle:
    """The ready server of this test's recipe (started on first use; at most one alive)."""
    owner = _server_owner(request)
    try:
        handle = owner.ensure_ready()
        guard = owner.guard
        if guard is not None:
            guard.assert_usable()
    except (LaunchError, ServerGoneError) as exc:
        recorder = request.node.stash.get(RECORD_KEY, None)
        if recorder is not None:
            recorder.record.status = getattr(exc, "status", None)
        _fail(exc, request.config)
        raise
    return handle


@pytest.fixture
def server_facts(request: pytest.FixtureRequest, vllmqual_arm: str) -> dict[str, Any]:
    """Engine facts, endpoint facts and the identity check gathered at startup.

    They need a server that started, not one that is still alive: a server that died later (a
    ladder rung that killed it) still had these facts, and the gates that judge them still run.
    """
    owner = _server_owner(request)
    try:
        owner.ensure_ready()
    except LaunchError as exc:
        recorder = request.node.stash.get(RECORD_KEY, None)
        if recorder is not None:
            recorder.record.status = exc.status
        _fail(exc, request.config)
        raise
    if isinstance(owner, ServerManager):
        return {"engine": owner.facts.engine, "endpoints": owner.facts.endpoints,
                "identity": owner.facts.identity, "cold_start_s": owner.facts.cold_start_s}
    return owner.facts


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
    owner = _server_owner(request)
    with QualClient(vllm_server, timeout_s=recipe.requests.timeout_s, sink=gate, guard=owner.guard,
                    retries=recipe.requests.retries) as client:
        yield client


# The prefixed names are the public ones; the short names stay for the shipped gates and old suites.
@pytest.fixture
def vllmqual_recipe(recipe: Recipe) -> Recipe:
    """The Recipe of this test's arm (same as ``recipe``)."""
    return recipe


@pytest.fixture
def vllmqual_gate(gate: GateRecorder) -> GateRecorder:
    """Where this gate records attempts, measurements, thresholds and its summary (same as ``gate``)."""
    return gate


@pytest.fixture
def vllmqual_client(qual_client: QualClient) -> QualClient:
    """The raw-HTTP API client wired to the gate and the liveness guard (same as ``qual_client``)."""
    return qual_client


@pytest.fixture
def vllmqual_server_facts(server_facts: dict[str, Any]) -> dict[str, Any]:
    """Engine facts (with their sources), endpoint facts and the identity check (same as ``server_facts``)."""
    return server_facts


@pytest.fixture
def vllmqual_progress(progress: Any) -> Any:
    """Print a ``[vllmqual]`` line past output capture (same as ``progress``)."""
    return progress


@pytest.fixture(autouse=True)
def _vllmqual_traffic_isolation(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    """Measurement gates hold the traffic lock exclusively; other gates share it."""
    if "gate" not in request.fixturenames or RUN_KEY not in request.config.stash:
        yield
        return
    config = request.config
    if _is_worker(config):
        private_dir = Path(config.stash[WORKER_KEY].get("private_dir", "."))
    else:
        run = config.stash[RUN_KEY]
        private_dir = run.arm(_arm_key(request)).private_dir
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
    if _is_worker(config):
        private_dir = Path(config.stash[WORKER_KEY].get("private_dir", "."))
        prefix = f"{config.workerinput['workerid']}-"  # type: ignore[attr-defined]
    else:
        private_dir = run.arm(arm).private_dir
        prefix = ""
    doc = (getattr(item, "obj", None).__doc__ or "").strip().splitlines() if hasattr(item, "obj") else []
    name = _gate_name(item)
    record = GateRecord(
        nodeid=item.nodeid, gate=name, title=title_of(name, doc[0] if doc else ""),
        markers=sorted({m.name for m in item.iter_markers() if m.name in MARKERS or m.name in
                        ("functional", "reasoning", "quality", "capacity", "engine", "lifecycle")}),
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
            from .gate_order import stop_reason

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
            _scrub_test_report(report, _sanitizer(item))
        return
    record = recorder.record
    if call.excinfo is not None and isinstance(call.excinfo.value, ServerGoneError):
        gone = call.excinfo.value
        record.status = gone.status
        # The harness's verdict only; the log tail is server text and stays in the private folder.
        report.longrepr = f"{gone.status}: {gone}"
    final = report.when == "call" or (report.when == "setup" and report.outcome != "passed")
    if not final:
        _scrub_test_report(report, _sanitizer(item))  # a teardown error, captured output
        return
    record.outcome = "error" if report.when == "setup" and report.outcome == "failed" else report.outcome
    record.duration_s = round(report.duration, 4)
    if report.outcome != "passed":
        record.reason = _reason_text(report)
        if call.excinfo is not None and isinstance(call.excinfo.value, ServerGoneError):
            record.reason = f"{call.excinfo.value.status}: {call.excinfo.value}"  # not the log tail's last lines
    if report.when == "setup" and record.status is None and call.excinfo is not None:
        record.status = getattr(call.excinfo.value, "status", None)
    if (record.outcome in ("failed", "error") and record.status is None
            and not item.config.getoption("vllmqual_no_fail_fast")):  # a startup failure has its own status
        from .gate_order import record_stop

        record_stop(recorder.private_dir, record.gate)
    data = record.to_dict()
    report.vllmqual_gate = data  # type: ignore[attr-defined]
    sanitizer = _sanitizer(item)
    properties: list[tuple[str, object]] = []
    properties.append((f"vllmqual.{record.gate}.family", family_of(record.gate, record.markers) or "other"))
    properties.append((f"vllmqual.{record.gate}.title", sanitizer.scrub(record.title or record.gate)))
    for key, value in record.measurements.items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            properties.append((f"vllmqual.{record.gate}.{key}", sanitizer.scrub_obj(value)))
    if record.summary:
        properties.append((f"vllmqual.{record.gate}.summary", sanitizer.scrub(record.summary)))
    # junit writes the properties of the *teardown* report, which pytest builds from the item.
    item.user_properties.extend(properties)
    report.user_properties.extend(properties)
    _scrub_test_report(report, sanitizer)


def _scrub_test_report(report: pytest.TestReport, sanitizer: Any) -> None:
    """junit XML and the terminal carry failure text, skip reasons and captured output (every
    phase): scrub them like the report's free text (second line of defence)."""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, lineno, reason = report.longrepr
        report.longrepr = (path, lineno, sanitizer.scrub(str(reason)))
    elif report.longrepr is not None:
        text = str(report.longrepr)
        scrubbed = sanitizer.scrub(text)
        if scrubbed != text:
            report.longrepr = scrubbed
    if report.sections:
        report.sections = [(title, sanitizer.scrub(content)) for title, content in report.sections]


def _sanitizer(item: pytest.Item) -> Any:
    return _session_sanitizer(item.config)


def _session_sanitizer(config: pytest.Config) -> Any:
    """One Sanitizer per session, knowing the run's API keys once a server is up and the values
    of every arm's recipe env."""
    from .sanitize import Sanitizer

    cached = config.stash.get(SANITIZER_KEY, None)
    if cached is None:
        cached = Sanitizer()
        config.stash[SANITIZER_KEY] = cached
    if RUN_KEY in config.stash:
        run = config.stash[RUN_KEY]
        for recipe in [run.default_recipe, *(arm.recipe for arm in run.arms.values())]:
            cached.add_env_values(recipe.server_env())
    keys: list[str | None] = []
    if _is_worker(config):
        keys.append((config.stash[WORKER_KEY].get("handle") or {}).get("api_key"))
    else:
        for arm in config.stash[RUN_KEY].arms.values():
            if arm.manager is not None and arm.manager.handle is not None:
                keys.append(arm.manager.handle.api_key)
    for key in keys:
        if key:
            cached.add_secret(key)
    return cached


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Gates left out by -m/-k are recorded by name: the decision lists them as not proven."""
    config = _CONFIG.get("config")
    if config is None or RUN_KEY not in config.stash or _is_worker(config):
        return
    run = config.stash[RUN_KEY]
    how = " ".join(f"{flag} {value!r}" for flag, value in (("-m", config.option.markexpr),
                                                          ("-k", config.option.keyword)) if value)
    for item in items:
        if "gate" not in getattr(item, "fixturenames", ()):
            continue
        arm = _arm_of(item) or run.default_recipe.name
        entries = run.deselected.setdefault(arm, [])
        name = _gate_name(item)
        if not any(e["gate"] == name for e in entries):
            entries.append({"gate": name, "reason": f"deselected by {how}" if how else "deselected"})


def _reason_text(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = getattr(report, "longreprtext", "") or str(report.longrepr or "")
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    chosen = errors or lines[-3:]
    return "\n".join(line.removeprefix("E ").strip() for line in chosen)[:2000]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    data = getattr(report, "vllmqual_gate", None)
    if not data:
        return
    config = _CONFIG.get("config")
    if config is None or _is_worker(config) or RUN_KEY not in config.stash:
        return
    run = config.stash[RUN_KEY]
    run.add_gate(data.get("arm") or run.default_recipe.name, data)


_CONFIG: dict[str, pytest.Config] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    config = _CONFIG.get("config")
    if config is not None and RUN_KEY in config.stash:
        for arm in config.stash[RUN_KEY].arms.values():
            arm.interrupted = True


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _is_worker(config) or RUN_KEY not in config.stash:
        return
    run = config.stash[RUN_KEY]
    if session.shouldstop or exitstatus == pytest.ExitCode.INTERRUPTED:
        for arm in run.arms.values():
            arm.interrupted = True
    run.stop_all()
    if not run.arms:
        return
    try:
        run.write_reports()
        if run.campaign is not None:
            run.write_campaign_record()
            _campaign_exit(session, run)
        elif run.plan:
            run.write_comparison()
    except (VllmQualError, OSError) as exc:
        run.progress(f"REPORT NOT WRITTEN: {exc}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _campaign_exit(session: pytest.Session, run: QualRun) -> None:
    """A campaign whose fallback arm qualified in place of the failed arm exits 0, and says so."""
    from .campaign import qualified_by_fallback

    done = {k: a.report for k, a in run.arms.items() if a.report is not None}
    run.campaign.next_arm(done)
    record = run.campaign.record()
    arm = qualified_by_fallback(record)
    if arm is not None and session.exitstatus == pytest.ExitCode.TESTS_FAILED:
        failed = [a["name"] for a in record["arms"] if a.get("status") == "failed"]
        run.progress(f"campaign: {arm} qualified (fallback for {', '.join(failed)}, which failed); exit 0")
        session.exitstatus = pytest.ExitCode.OK
    elif arm is None and record.get("complete"):
        passed = [a["name"] for a in record["arms"] if a.get("status") == "passed"]
        run.progress(f"campaign: {'qualified: ' + ', '.join(passed) if passed else 'no arm qualified'}")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest's junit XML names this machine (testsuite hostname): redact it like the report does."""
    xmlpath = getattr(config.option, "xmlpath", None)
    if not xmlpath or _is_worker(config) or RUN_KEY not in config.stash:
        return
    from .junit import redact_junit_hostname, scrub_junit

    try:
        redact_junit_hostname(Path(os.path.abspath(xmlpath)))
        scrub_junit(Path(os.path.abspath(xmlpath)), _session_sanitizer(config))
    except VllmQualError as exc:
        config.stash[RUN_KEY].progress(f"junit XML not redacted: {exc}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _is_worker(config) or RUN_KEY not in config.stash:
        return
    run = config.stash[RUN_KEY]
    from .summary import summary_lines

    for arm in run.arms.values():
        if arm.report is None:
            continue
        title = arm.recipe.name if arm.key == arm.recipe.name else f"{arm.key} ({arm.role})"
        terminalreporter.write_sep("=", f"vllmqual: {title}")
        for line in summary_lines(arm.report, arm.report_path):
            terminalreporter.write_line(line)
    if run.comparison is not None:
        from .compare import render_markdown

        terminalreporter.write_sep("=", "vllmqual: A/B comparison")
        for line in render_markdown(run.comparison).splitlines():
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"comparison: {run.comparison_path}")
