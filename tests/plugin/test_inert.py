"""With the plugin installed, a project that does not ask for a qualification behaves as if the
plugin were absent: no recipe is resolved, no report or reports/ folder appears, no extra
output, the exit code is the project's own; ``pytest --help`` works and lists the options."""

from __future__ import annotations

import pytest

FOREIGN_TEST = "def test_one():\n    assert 1 + 1 == 2\n"


@pytest.fixture
def foreign(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("VLLMQUAL_RECIPE", "VLLMQUAL_ENDPOINT", "VLLMQUAL_REPORTS_DIR", "VLLMQUAL_RECIPES_DIR"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_foreign=FOREIGN_TEST)
    return pytester


def test_foreign_project_is_untouched(foreign: pytest.Pytester) -> None:
    result = foreign.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    text = result.stdout.str() + result.stderr.str()
    assert "vllmqual" not in text.lower(), text
    assert "1 passed" in text
    assert not (foreign.path / "reports").exists(), "an inert plugin must not create reports/"


def test_foreign_project_failure_keeps_its_exit_code(foreign: pytest.Pytester) -> None:
    foreign.makepyfile(test_bad="def test_bad():\n    assert False\n")
    result = foreign.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "vllmqual" not in (result.stdout.str() + result.stderr.str()).lower()


def test_help_works_and_lists_options_and_env(foreign: pytest.Pytester) -> None:
    result = foreign.runpytest_subprocess("--help")
    assert result.ret == 0, result.stderr.str()
    text = " ".join(result.stdout.str().split())
    assert "ERROR" not in text
    for needle in ("--recipe", "--vllmqual-endpoint", "--vllmqual-set", "--vllmqual-no-fail-fast",
                   "--vllmqual-reports-dir", "VLLMQUAL_RECIPE", "VLLMQUAL_ENDPOINT", "VLLMQUAL_CACHE_DIR",
                   "VLLMQUAL_REPORTS_DIR", "VLLMQUAL_RECIPES_DIR", "VLLM_API_KEY", "HF_TOKEN"):
        assert needle in text, f"{needle} missing from --help"


def test_help_works_with_a_broken_recipe_setting(foreign: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLMQUAL_RECIPE", "no-such-recipe")
    result = foreign.runpytest_subprocess("--help")
    assert result.ret == 0
    assert "unknown recipe" not in result.stdout.str() + result.stderr.str()


def test_env_recipe_is_an_explicit_ask(foreign: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLMQUAL_RECIPE turns the plugin on: the header names the shipped recipe and its source."""
    monkeypatch.setenv("VLLMQUAL_RECIPE", "tiny-cpu")
    result = foreign.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["vllmqual: recipe tiny-cpu (*tiny-cpu.yaml, sha256 *) chosen by VLLMQUAL_RECIPE"])


def test_ini_recipe_is_an_explicit_ask(foreign: pytest.Pytester) -> None:
    foreign.makeini("[pytest]\nvllmqual_recipe = no-such-recipe\n")
    result = foreign.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown recipe 'no-such-recipe'" in result.stderr.str()


def test_plugin_fixture_in_an_inert_run_says_how_to_ask(foreign: pytest.Pytester) -> None:
    foreign.makepyfile(test_uses="def test_uses(vllm_server):\n    pass\n")
    result = foreign.runpytest_subprocess("-p", "no:cacheprovider", "test_uses.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*pytest_vllmqual is not active*Fix: pass --recipe=NAME|PATH*"])
    assert not (foreign.path / "reports").exists()
