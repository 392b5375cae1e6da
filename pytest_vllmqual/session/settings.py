"""Where each setting comes from, resolved in one place (the pytest-timeout convention).

Precedence, highest first: command line, environment, ini file (pytest.ini / pyproject
``[tool.pytest.ini_options]``), then the embedded default. The resolved value remembers its
source so that every error can say where a bad value came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllmqual.recipe.loader import DEFAULT_RECIPE

RECIPE_ENV = "VLLMQUAL_RECIPE"
REPORTS_ENV = "VLLMQUAL_REPORTS_DIR"
ENDPOINT_ENV = "VLLMQUAL_ENDPOINT"
RECIPES_DIR_ENV = "VLLMQUAL_RECIPES_DIR"


@dataclass(frozen=True)
class Setting:
    """A resolved value and where it came from (e.g. ``--recipe``, ``VLLMQUAL_RECIPE``)."""

    value: str | None
    source: str


def pick(cli: str | None, cli_name: str, env: dict[str, str], env_name: str, ini: str | None, ini_name: str,
         default: str | None) -> Setting:
    """The first non-empty of command line, environment, ini, default."""
    if cli:
        return Setting(cli, cli_name)
    if env.get(env_name):
        return Setting(env[env_name], env_name)
    if ini:
        return Setting(ini, f"ini {ini_name}")
    return Setting(default, "embedded default")


@dataclass(frozen=True)
class Settings:
    """Everything the plugin needs to know before the first gate runs."""

    recipe: Setting
    reports_dir: Path
    recipes_dir: Path
    endpoint: Setting
    overrides: tuple[str, ...] = ()
    invocation_dir: Path | None = None
    """The directory pytest runs in (the reproduce line shows paths relative to it)."""


def resolve_settings(*, rootdir: Path, env: dict[str, str], cli_recipe: str | None, ini_recipe: str | None,
                     cli_reports: str | None, ini_reports: str | None, cli_endpoint: str | None,
                     cli_recipes_dir: str | None, ini_recipes_dir: str | None,
                     invocation_dir: Path | None = None) -> Settings:
    """Resolve every setting. Relative paths from the ini file are relative to ``rootdir`` (where
    the ini is); the rest relative to ``invocation_dir`` (the directory pytest runs in)."""
    recipe = pick(cli_recipe, "--recipe", env, RECIPE_ENV, ini_recipe, "vllmqual_recipe", DEFAULT_RECIPE)
    reports = pick(cli_reports, "--vllmqual-reports-dir", env, REPORTS_ENV, ini_reports,
                   "vllmqual_reports_dir", "reports")
    recipes_dir = pick(cli_recipes_dir, "--vllmqual-recipes-dir", env, RECIPES_DIR_ENV,
                       ini_recipes_dir, "vllmqual_recipes_dir", None)
    endpoint = pick(cli_endpoint, "--vllmqual-endpoint", env, ENDPOINT_ENV, None, "", None)
    cwd = invocation_dir or rootdir
    return Settings(
        recipe=recipe,
        reports_dir=_anchor(Path(str(reports.value)), rootdir if reports.source.startswith("ini ") else cwd),
        recipes_dir=(_anchor(Path(str(recipes_dir.value)), rootdir if recipes_dir.source.startswith("ini ") else cwd)
                     if recipes_dir.value else default_recipes_dir(rootdir)),
        endpoint=endpoint,
        invocation_dir=invocation_dir,
    )


def _anchor(path: Path, base: Path) -> Path:
    return path if path.is_absolute() else base / path


def default_recipes_dir(rootdir: Path) -> Path:
    """``fixtures/recipes`` of the project when it has one, else the recipes shipped in the package."""
    from pytest_vllmqual.layout import shipped_recipes_dir

    own = rootdir / "fixtures" / "recipes"
    return own if own.is_dir() else shipped_recipes_dir()


# -- the command line -------------------------------------------------------------------------

ENV_HELP = (
    "VLLMQUAL_RECIPE (recipe), VLLMQUAL_ENDPOINT (running server), VLLMQUAL_REPORTS_DIR, "
    "VLLMQUAL_RECIPES_DIR, VLLMQUAL_CACHE_DIR (fixture model builds; default ~/.cache/vllmqual), "
    "VLLM_API_KEY (API key of a running server, or the variable a recipe's launcher.api_key_env names), "
    "HF_TOKEN / HUGGING_FACE_HUB_TOKEN (passed to docker servers)"
)
OPTION_GROUP_HELP = (
    "LLM serve qualification (pytest_vllmqual; inactive unless --recipe, --vllmqual-endpoint, "
    f"VLLMQUAL_RECIPE, ini vllmqual_recipe or the shipped gates ask for it). Environment: {ENV_HELP}")


@dataclass(frozen=True)
class CommandLineOption:
    """One option of the plugin's group, declared as data (every option has ``dest`` and
    ``metavar``, the pytest-xdist convention); the plugin hands it to pytest's parser."""

    flags: tuple[str, ...]
    dest: str
    help: str
    metavar: str | None = None
    flag_only: bool = False
    repeatable: bool = False

    def keywords(self) -> dict[str, Any]:
        if self.flag_only:
            return {"dest": self.dest, "action": "store_true", "default": False, "help": self.help}
        return {"dest": self.dest, "metavar": self.metavar, "help": self.help,
                "action": "append" if self.repeatable else "store", "default": [] if self.repeatable else None}


COMMAND_LINE_OPTIONS = (
    CommandLineOption(
        ("--recipe", "--vllmqual-recipe"), "vllmqual_recipe", metavar="NAME|PATH",
        help="recipe to qualify: a name in the recipes dir (or a shipped one) or a YAML path. "
        "Precedence: --recipe, then $VLLMQUAL_RECIPE, then ini vllmqual_recipe, then 'tiny-cpu'. "
        "With --vllmqual-endpoint and no recipe, the recipe is discovered from the server."),
    CommandLineOption(
        ("--vllmqual-reports-dir",), "vllmqual_reports_dir", metavar="DIR",
        help="where reports are written (default: ./reports/ of the directory pytest runs in; private "
        "artifacts under DIR/private/). Env: VLLMQUAL_REPORTS_DIR."),
    CommandLineOption(
        ("--vllmqual-endpoint",), "vllmqual_endpoint", metavar="URL",
        help="run the gates against an already running server (direct-only, no lifecycle); without a "
        "recipe, one is discovered from /v1/models, /version and /metrics. Env: VLLMQUAL_ENDPOINT; "
        "the server's key: VLLM_API_KEY."),
    CommandLineOption(
        ("--vllmqual-recipes-dir",), "vllmqual_recipes_dir", metavar="DIR",
        help="where named recipes are looked up (default: ./fixtures/recipes when the project has one, "
        "then the shipped recipes). Env: VLLMQUAL_RECIPES_DIR."),
    CommandLineOption(
        ("--vllmqual-ab", "--ab"), "vllmqual_ab", metavar="CONTROL,CANDIDATE",
        help="A/B: run every gate against the control recipe, then the candidate "
        "(one server at a time), write a report per arm and comparison.json."),
    CommandLineOption(
        ("--vllmqual-bracket", "--bracket"), "vllmqual_bracket", flag_only=True,
        help="with --ab: replay the control after the candidate (A, B, A)."),
    CommandLineOption(
        ("--vllmqual-arm-marks",), "vllmqual_arm_marks", metavar="ROLE=EXPR", repeatable=True,
        help="with --ab: the gates one arm runs (repeatable; ROLE is control, candidate or replay, EXPR a "
        "marker expression as -m takes, where a gate's name counts as a marker), e.g. "
        "--vllmqual-arm-marks candidate='smoke or equivalence'; the arm's report lists the others as deselected."),
    CommandLineOption(
        ("--vllmqual-campaign", "--campaign"), "vllmqual_campaign", metavar="NAME|FILE|SPEC",
        help="an ordered campaign of arms with stop conditions and fallbacks, e.g. 393k "
        "(fixtures/campaigns/393k.yaml) or '393k-fp8kv:kv_pool+ladder,393k-offload?fallback'."),
    CommandLineOption(
        ("--vllmqual-set",), "vllmqual_set", metavar="KEY=VALUE", repeatable=True,
        help="override a recipe key for this run (repeatable; dotted keys, YAML values), e.g. "
        "--vllmqual-set serve.max_num_seqs=4 --vllmqual-set launcher.docker.model_cache=/data/hf. "
        "The report records the overrides and the SHA-256 of the effective recipe."),
    CommandLineOption(
        ("--vllmqual-reference",), "vllmqual_reference", metavar="REPORT.json",
        help="drift: compare this run's equivalence probe with the one an earlier run's report references "
        "(its probe sidecar beside it; same checkpoint pin and probe hash, else not measurable). "
        "The rule the recipe's compare.promotion names decides (tokens by default: 'not equivalent' fails the "
        "session); the run's verdict is unchanged. Not with --ab or --campaign."),
    CommandLineOption(
        ("--vllmqual-strict",), "vllmqual_strict", flag_only=True,
        help="exit 1 when a check was not measured and nothing failed (a load level, the ladder, the "
        "equivalence probe, an A/B's equivalence or a drift that could not be decided); by default such a "
        "check is skipped as 'not measured: ...', listed last, and the exit stays 0."),
    CommandLineOption(
        ("--vllmqual-no-fail-fast",), "vllmqual_no_fail_fast", flag_only=True,
        help="run every gate even after smoke or identity failed (default: the remaining gates "
        "end as 'not run: smoke failed' / 'not run: identity mismatch')."),
)

def plugin_activation_reason(options: Mapping[str, Any], *, env: Mapping[str, str], ini_recipe: str | None,
                             collects_shipped_gates: bool) -> str | None:
    """Why this run asked for the qualification plugin (an option of its own, an environment
    variable, the ini key, or the shipped gates collected), or None: then it stays inert."""
    for option in COMMAND_LINE_OPTIONS:
        if not option.flag_only and options.get(option.dest):
            return min(option.flags, key=len)  # any of the plugin's own options is an explicit ask
    for name in (RECIPE_ENV, ENDPOINT_ENV):
        if env.get(name):
            return name
    if ini_recipe:
        return "ini vllmqual_recipe"
    return "the shipped gates are collected" if collects_shipped_gates else None


__all__ = ["COMMAND_LINE_OPTIONS", "ENDPOINT_ENV", "OPTION_GROUP_HELP", "RECIPES_DIR_ENV", "RECIPE_ENV",
           "REPORTS_ENV", "CommandLineOption", "Setting", "Settings", "default_recipes_dir", "pick",
           "plugin_activation_reason",
           "resolve_settings"]
