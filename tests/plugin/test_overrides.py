"""--vllmqual-set overrides a recipe for one run; the report records the overrides, the file's
SHA-256 and the SHA-256 of the effective recipe; a bad override is a usage error naming the key."""

from __future__ import annotations

import hashlib
import json

import pytest

from pytest_vllmqual.recipe.overrides import effective_yaml

GATE = "def test_seqs(recipe, gate):\n    gate.measure(seqs=recipe.serve.max_num_seqs)\n"


def test_override_is_applied_and_recorded(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_o=GATE)
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess("--recipe=tiny-cpu", f"--vllmqual-reports-dir={reports}", "-p",
                                           "no:cacheprovider", "--vllmqual-set", "serve.max_num_seqs=3",
                                           "--vllmqual-set=startup.deadline_s=99")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["vllmqual: overrides serve.max_num_seqs=3, startup.deadline_s=99 -> effective "
                                 "recipe sha256 *"])
    (path,) = reports.glob("tiny-cpu-*.json")
    report = json.loads(path.read_text())
    recipe = report["recipe"]
    assert recipe["overrides"] == ["serve.max_num_seqs=3", "startup.deadline_s=99"]
    assert recipe["content"]["serve"]["max_num_seqs"] == 3 and recipe["content"]["startup"]["deadline_s"] == 99
    assert recipe["file_sha256"] != recipe["sha256"]
    from pytest_vllmqual.layout import shipped_recipes_dir
    from pytest_vllmqual.recipe.loader import load_recipe
    from pytest_vllmqual.recipe.overrides import with_overrides

    effective = with_overrides(load_recipe(shipped_recipes_dir() / "tiny-cpu.yaml"),
                               ["serve.max_num_seqs=3", "startup.deadline_s=99"])
    assert recipe["sha256"] == hashlib.sha256(effective_yaml(effective.raw).encode()).hexdigest()
    assert report["gates"][0]["measurements"]["seqs"] == 3


def test_bad_override_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_o=GATE)
    result = pytester.runpytest_subprocess("--recipe=tiny-cpu", "--vllmqual-set", "serve.max_num_seqs=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "serve.max_num_seqs" in text and "--vllmqual-set serve.max_num_seqs=lots" in text and "Traceback" not in text


def test_a_recipe_given_as_a_file_is_reproduced_by_its_path(pytester: pytest.Pytester) -> None:
    """The recipe's name would find the shipped tiny-cpu, not this copy: the reproduce line keeps the
    file (relative to the run's directory), so running it again runs the same recipe."""
    from pytest_vllmqual.layout import shipped_recipes_dir

    (pytester.path / "mine").mkdir()
    (pytester.path / "mine" / "tiny-cpu.yaml").write_text((shipped_recipes_dir() / "tiny-cpu.yaml").read_text())
    pytester.makepyfile(test_o=GATE)
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(f"--recipe={pytester.path}/mine/tiny-cpu.yaml",
                                           f"--vllmqual-reports-dir={reports}", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["vllmqual: reproduce with: pytest --recipe=mine/tiny-cpu.yaml *"])
    (path,) = reports.glob("tiny-cpu-*.json")
    assert json.loads(path.read_text())["run"]["reproduce"].startswith("pytest --recipe=mine/tiny-cpu.yaml ")
