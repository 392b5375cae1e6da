"""Setting precedence: command line, then environment, then ini, then the embedded default."""

from __future__ import annotations

from pathlib import Path

from pytest_vllmqual.session.settings import resolve_settings


def resolve(**kw: object) -> object:
    base: dict[str, object] = dict(rootdir=Path("/proj"), env={}, cli_recipe=None, ini_recipe=None,
                                   cli_reports=None, ini_reports=None, cli_endpoint=None,
                                   cli_recipes_dir=None, ini_recipes_dir=None)
    base.update(kw)
    return resolve_settings(**base)  # type: ignore[arg-type]


def test_default_is_tiny_cpu() -> None:
    s = resolve()
    assert (s.recipe.value, s.recipe.source) == ("tiny-cpu", "embedded default")  # type: ignore[attr-defined]
    assert s.reports_dir == Path("/proj/reports")  # type: ignore[attr-defined]


def test_precedence_cli_env_ini() -> None:
    env = {"VLLMQUAL_RECIPE": "from-env"}
    assert resolve(cli_recipe="cli", env=env, ini_recipe="ini").recipe.value == "cli"  # type: ignore[attr-defined]
    s = resolve(env=env, ini_recipe="ini")
    assert (s.recipe.value, s.recipe.source) == ("from-env", "VLLMQUAL_RECIPE")  # type: ignore[attr-defined]
    s = resolve(ini_recipe="ini")
    assert (s.recipe.value, s.recipe.source) == ("ini", "ini vllmqual_recipe")  # type: ignore[attr-defined]


def test_absolute_reports_dir_kept() -> None:
    assert resolve(cli_reports="/tmp/r").reports_dir == Path("/tmp/r")  # type: ignore[attr-defined]
