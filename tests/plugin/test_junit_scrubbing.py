"""junit XML on every path (failure message, skip reason, setup error, system-out/err) is
scrubbed with what the scrubber learns: the recipe's env values and this machine's names.

This is the second line of defence: public outputs are built from the harness's own words,
and whatever a user's gate prints or raises still passes the scrubber. The gates need no
server, so this runs without vLLM."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "db7.prod.acme-internal"
PREFIX = f"[{PLANTED} rack-7b] "

GATES = f'''
import sys
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("setup broke on {PLANTED}")

def test_prints(gate):
    print("stdout from {PLANTED}")
    print("stderr from {PLANTED}", file=sys.stderr)
    assert False, "failed on {PLANTED}"

def test_skips(gate):
    pytest.skip("skipped on {PLANTED}")

def test_setup_error(gate, broken):
    pass
'''


def test_every_junit_path_is_scrubbed_with_the_recipe_env(pytester: pytest.Pytester) -> None:
    recipe = yaml.safe_load((ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml").read_text())
    recipe["name"] = "tiny-cpu-env"
    recipe["launcher"]["env"]["VLLM_LOGGING_PREFIX"] = PREFIX
    recipes = pytester.path / "recipes"
    recipes.mkdir()
    (recipes / "tiny-cpu-env.yaml").write_text(yaml.safe_dump(recipe))
    pytester.makepyfile(test_gates=GATES)
    junit = pytester.path / "junit.xml"
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={recipes}", "--recipe=tiny-cpu-env",
                                           f"--vllmqual-reports-dir={reports}", f"--junitxml={junit}",
                                           "-o", "junit_logging=all")
    assert result.ret == 1, result.stdout.str()
    text = html.unescape(junit.read_text())
    for where in ("failed on", "skipped on", "setup broke on", "stdout from", "stderr from"):
        assert f"{where} <env>" in text, f"{where!r} is not in the junit file: nothing was tested"
    assert PLANTED not in text and "rack-7b" not in text
    (path,) = reports.glob("tiny-cpu-env-*.json")
    report = path.read_text()
    assert PLANTED not in report and "rack-7b" not in report
    assert json.loads(report)["recipe"]["content"]["launcher"]["env"]["VLLM_LOGGING_PREFIX"].strip() == "<env>"
