"""A bad ``gates.load`` through the real command line: one paragraph naming the file, the key and
the fix, a usage-error exit, no traceback, and no server started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "fixtures" / "recipes"


def _recipe(pytester: pytest.Pytester, name: str, load: dict[str, Any]) -> Path:
    data = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    data["name"] = name
    data["gates"]["load"] = load
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_gate="def test_smoke(vllm_server):\n    pass\n")
    return pytester.runpytest_subprocess("--vllmqual-recipes-dir", str(RECIPES),
                                         "--vllmqual-reports-dir", str(pytester.path / "reports"), *args)


def _assert_usage_error(pytester: pytest.Pytester, result: pytest.RunResult, *needles: str) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "Traceback" not in text, text
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text}"
    assert not (pytester.path / "reports" / "private").exists(), "a run directory was created"


@pytest.mark.parametrize(("load", "needles"), [
    ({"levels": [1], "ttft_ms": 100, "ttft": 5}, ("unknown key 'gates.load.ttft'", "rename it to 'ttft_ms'")),
    ({"levels": [8], "ttft_ms": 100, "requests_per_level": 31},
     ("'gates.load.requests_per_level'", "Fix:")),
    ({"levels": [16], "ttft_ms": 100, "requests_per_level": 40},
     ("'gates.load.requests_per_level' is 40, below the floor of 64 for level 16", "Fix: set requests_per_level: 64")),
    ({"levels": [2, 4]}, ("'gates.load.ttft_ms' is not set, nor tpot_ms nor e2e_s", "Fix:")),
    ({"levels": [4], "e2e_s": 5, "find_max": True}, ("'gates.load.max_ceiling' is missing", "Fix: add max_ceiling")),
    ({"levels": [1], "ttft_ms": -1}, ("'gates.load.ttft_ms'",)),
])
def test_an_impossible_load_section_is_a_usage_error(pytester: pytest.Pytester, load: dict[str, Any],
                                                     needles: tuple[str, ...]) -> None:
    path = _recipe(pytester, "badload", load)
    result = _run(pytester, f"--recipe={path}")
    _assert_usage_error(pytester, result, str(path), *needles)


def test_an_override_is_checked_like_the_file(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "--recipe=tiny-cpu", "--vllmqual-set", "gates.load.levels=[1,2,2]")
    _assert_usage_error(pytester, result, "'gates.load.levels' lists a level twice", "--vllmqual-set")
