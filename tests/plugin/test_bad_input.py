"""Bad input through the real command line: a clear one-paragraph error, non-zero exit, no
traceback, and no server started (reliability cases 2, 17, 18, 19 of tests/faults/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "fixtures" / "recipes"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_gate="def test_smoke(vllm_server):\n    pass\n")
    return pytester.runpytest_subprocess("--vllmqual-recipes-dir", str(RECIPES),
                                         "--vllmqual-reports-dir", str(pytester.path / "reports"), *args)


def assert_clean_usage_error(result: pytest.RunResult, *needles: str) -> None:
    text = result.stderr.str() + result.stdout.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "Traceback" not in text, text
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text}"


def assert_nothing_started(pytester: pytest.Pytester) -> None:
    assert not (pytester.path / "reports" / "private").exists(), "a run directory was created"


def test_unknown_recipe_lists_existing(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--recipe=nope")
    assert_clean_usage_error(result, "unknown recipe 'nope'", "tiny-cpu", "393k-fp8kv", "(recipe chosen by --recipe)")
    assert_nothing_started(pytester)


def test_unknown_recipe_from_env_names_the_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLMQUAL_RECIPE", "nope")
    result = run(pytester)
    assert_clean_usage_error(result, "unknown recipe 'nope'", "chosen by VLLMQUAL_RECIPE")


def _tiny(name: str) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    data["name"] = name
    return data


def test_recipe_with_typo(pytester: pytest.Pytester) -> None:
    data = _tiny("typo")
    serve = dict(data.pop("serve"))  # type: ignore[call-overload]
    data["serve"] = serve
    serve["tensor_paralel_size"] = serve.pop("tensor_parallel_size")
    path = pytester.path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run(pytester, f"--recipe={path}")
    assert_clean_usage_error(result, str(path), "serve.tensor_paral", "Fix:")
    assert_nothing_started(pytester)


def test_malformed_yaml(pytester: pytest.Pytester) -> None:
    path = pytester.path / "broken.yaml"
    path.write_text("name: broken\nserve: {tensor_parallel_size: 2\n")
    result = run(pytester, f"--recipe={path}")
    assert_clean_usage_error(result, str(path), "not valid YAML", "line")


def test_wrong_type(pytester: pytest.Pytester) -> None:
    data = _tiny("wrongtype")
    data["startup"] = {"deadline_s": "soon"}
    path = pytester.path / "wrongtype.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run(pytester, f"--recipe={path}")
    assert_clean_usage_error(result, "'startup.deadline_s' must be of type number", "'soon'")


def test_missing_launch_command(pytester: pytest.Pytester) -> None:
    data = _tiny("nocommand")
    launcher = dict(data["launcher"])  # type: ignore[call-overload]
    del launcher["command"]
    data["launcher"] = launcher
    path = pytester.path / "nocommand.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run(pytester, f"--recipe={path}")
    assert_clean_usage_error(result, "'launcher.command' is missing", "Fix:")
    assert_nothing_started(pytester)


def test_tag_without_digest_in_pinned_recipe(pytester: pytest.Pytester) -> None:
    data = yaml.safe_load((RECIPES / "393k-fp8kv.yaml").read_text())
    data["name"] = "tagged"
    data["identity"]["image"] = "vllm/vllm-openai:v0.11.2"
    path = pytester.path / "tagged.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run(pytester, f"--recipe={path}")
    assert_clean_usage_error(result, "'identity.image'", "by digest")


def test_report_header_reproduces_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--vllmqual-recipes-dir", str(RECIPES), "--recipe=131k-control",
                                           "-k", "test_x")
    result.stdout.fnmatch_lines([
        "vllmqual: recipe 131k-control (*131k-control.yaml, sha256 *) chosen by --recipe",
        "vllmqual: identity deepseek-ai/DeepSeek-V4-Flash-0731@9e165c30e2704aec5d9d593cce3eebd58bbef1cb, "
        "voipmonitor/vllm@sha256:fdde59fed7f9*",
        "vllmqual: reproduce with: pytest --recipe=131k-control *-k test_x*",
    ])
    assert result.ret == 0
    assert not (pytester.path / "reports").exists(), "a run with no gate must not write a report"


def test_markers_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--vllmqual-recipes-dir", str(RECIPES), "--markers")
    for marker in ("functional", "reasoning", "quality", "capacity", "engine", "lifecycle", "recipe(name)"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{marker}:*"])


def test_unknown_recipe_in_a_marker_fails_its_tests_cleanly(pytester: pytest.Pytester) -> None:
    """A ``recipe`` marker naming no recipe: its tests fail with the recipe error (the known
    recipes listed), no traceback, no server started; the session's other tests still run."""
    pytester.makepyfile(test_marked='''
import pytest

pytestmark = pytest.mark.recipe("no-such-recipe")


def test_marked(vllm_server):
    pass
''', test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("--recipe=tiny-cpu", "--vllmqual-recipes-dir", str(RECIPES),
                                           "--vllmqual-reports-dir", str(pytester.path / "reports"))
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    assert "Traceback" not in text and "pytest_vllmqual/" not in text, "no frames of the plugin:\n" + text
    result.stdout.fnmatch_lines(["*unknown recipe 'no-such-recipe'*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("errors") == 1, outcomes
    assert not list((pytester.path / "reports" / "private").glob("*/server.log")), "no server may start"
