"""Where each setting comes from, resolved in one place (the pytest-timeout convention).

Precedence, highest first: command line, environment, ini file (pytest.ini / pyproject
``[tool.pytest.ini_options]``), then the embedded default. The resolved value remembers its
source so that every error can say where a bad value came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .recipe import DEFAULT_RECIPE

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
    )


def _anchor(path: Path, base: Path) -> Path:
    return path if path.is_absolute() else base / path


def default_recipes_dir(rootdir: Path) -> Path:
    """``fixtures/recipes`` of the project when it has one, else the recipes shipped in the package."""
    from .layout import shipped_recipes_dir

    own = rootdir / "fixtures" / "recipes"
    return own if own.is_dir() else shipped_recipes_dir()
