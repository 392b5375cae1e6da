"""The report's ``run.reproduce`` line: it pins the arm's recipe (whichever way ``--recipe`` was
written) and says no absolute local path (relative to the run's directory, or ``<path>``)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from pytest_vllmqual.session.invocation import PATH_PLACEHOLDER, reproduce_line
from pytest_vllmqual.session.settings import resolve_settings


@pytest.mark.parametrize("args", [
    ["--recipe", "old", "-q"],
    ["--recipe=old", "-q"],
    ["--vllmqual-recipe", "old", "-q"],
    ["--vllmqual-recipe=old", "-q"],
    ["-q", "--recipe", "old"],
])
def test_every_form_of_the_recipe_option_is_replaced_by_the_arm_s_recipe(args: list[str]) -> None:
    assert reproduce_line(args, "tiny-cpu", discovered=False) == "pytest --recipe=tiny-cpu -q"


def test_the_space_separated_recipe_leaves_no_stray_name_behind() -> None:
    line = reproduce_line(["--recipe", "tiny-cpu-4096", "--pyargs", "pytest_vllmqual.suites"], "tiny-cpu",
                          discovered=False)
    assert shlex.split(line) == ["pytest", "--recipe=tiny-cpu", "--pyargs", "pytest_vllmqual.suites"]


def test_options_that_only_start_like_the_recipe_option_are_kept(tmp_path: Path) -> None:
    line = reproduce_line(["--vllmqual-recipes-dir", "fixtures/recipes", "--recipe", "x"], "x",
                          discovered=False, run_dir=tmp_path)
    assert shlex.split(line) == ["pytest", "--recipe=x", "--vllmqual-recipes-dir", "fixtures/recipes"]


def test_absolute_paths_inside_the_run_directory_become_relative(tmp_path: Path) -> None:
    args = ["--vllmqual-reports-dir", str(tmp_path / "reports"), f"--junitxml={tmp_path}/out/j.xml",
            "-o", f"cache_dir={tmp_path}/.cache", str(tmp_path), "--recipe", "tiny-cpu"]
    words = shlex.split(reproduce_line(args, "tiny-cpu", discovered=False, run_dir=tmp_path))
    assert words == ["pytest", "--recipe=tiny-cpu", "--vllmqual-reports-dir", "reports", "--junitxml=out/j.xml",
                     "-o", "cache_dir=.cache", "."]


def test_absolute_paths_outside_the_run_directory_become_a_placeholder(tmp_path: Path) -> None:
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    args = ["--vllmqual-recipes-dir", f"{elsewhere}/fixtures/recipes", f"--vllmqual-reports-dir={elsewhere}/r",
            "--rootdir", str(tmp_path)]
    line = reproduce_line(args, "tiny-cpu", discovered=False, run_dir=run_dir)
    assert str(tmp_path) not in line
    assert shlex.split(line) == ["pytest", "--recipe=tiny-cpu", "--vllmqual-recipes-dir", PATH_PLACEHOLDER,
                                 f"--vllmqual-reports-dir={PATH_PLACEHOLDER}", "--rootdir", PATH_PLACEHOLDER]


def test_a_path_through_a_symlink_to_the_run_directory_is_still_inside_it(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    line = reproduce_line(["--vllmqual-reports-dir", str(tmp_path / "link" / "reports")], "x", discovered=False,
                          run_dir=tmp_path / "real")
    assert shlex.split(line)[-1] == "reports"


def test_without_a_known_run_directory_every_absolute_path_is_a_placeholder() -> None:
    line = reproduce_line(["--vllmqual-reports-dir", "/srv/qual/reports", "-m", "engine"], "x", discovered=False)
    assert shlex.split(line) == ["pytest", "--recipe=x", "--vllmqual-reports-dir", PATH_PLACEHOLDER, "-m", "engine"]


def test_a_discovered_recipe_keeps_its_arguments_with_paths_hidden(tmp_path: Path) -> None:
    line = reproduce_line(["--vllmqual-endpoint", "http://127.0.0.1:8000", "--vllmqual-reports-dir", "/opt/r"],
                          "found", discovered=True, run_dir=tmp_path)
    assert shlex.split(line) == ["pytest", "--vllmqual-endpoint", "http://127.0.0.1:8000",
                                 "--vllmqual-reports-dir", PATH_PLACEHOLDER]


def test_the_settings_remember_the_directory_pytest_runs_in(tmp_path: Path) -> None:
    settings = resolve_settings(rootdir=tmp_path / "root", env={}, cli_recipe=None, ini_recipe=None, cli_reports=None,
                                ini_reports=None, cli_endpoint=None, cli_recipes_dir=None, ini_recipes_dir=None,
                                invocation_dir=tmp_path)
    assert settings.invocation_dir == tmp_path
