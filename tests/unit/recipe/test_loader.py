"""Recipe loading: the shipped recipes validate, and every kind of bad input gets a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support import ROOT

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.recipe.gate_settings import min_kv_tokens
from pytest_vllmqual.recipe.loader import available_recipes, load_recipe, resolve_recipe, resolve_recipe_path

RECIPES = ROOT / "fixtures" / "recipes"
REFERENCE_IDENTITY = {
    "checkpoint": "deepseek-ai/DeepSeek-V4-Flash-0731",
    "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "image": "voipmonitor/vllm@sha256:fdde59fed7f9fc12f9fd5ef1b3b3ea8d5097bf10ebad54b348497102c3a83f82",
    "runtime_version": "0.11.2.dev280+gilded.gnosis.v20.vllmfa13d33.b12x06db0f4.fi1ac6942.cu132.20260809.r33",
}


def write_recipe(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def tiny_data() -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    return data


def test_shipped_recipes_are_the_five_named_ones() -> None:
    assert {"131k-4096", "131k-control", "393k-fp8kv", "393k-offload", "tiny-cpu"} <= set(available_recipes(RECIPES))


@pytest.mark.parametrize("name", ["131k-4096", "131k-control", "393k-fp8kv", "393k-offload"])
def test_reference_recipes_carry_the_reference_identity(name: str) -> None:
    recipe = resolve_recipe(name, RECIPES)
    for key, value in REFERENCE_IDENTITY.items():
        assert getattr(recipe.identity, key) == value
    assert recipe.pinned and recipe.launcher.kind == "docker"
    assert recipe.serve.tensor_parallel_size == 2 and recipe.serve.decode_context_parallel_size == 1
    assert recipe.serve.max_num_seqs == 1 and recipe.serve.gpu_memory_utilization == 0.975
    assert recipe.serve.kv_cache_dtype == "fp8_ds_mla" and recipe.serve.speculative_config is None
    assert recipe.gate("reasoning")["fingerprints"] == {"low": 6, "high": 85, "max": 98}


def test_reference_arms_differ_only_in_batch_tokens_functionally() -> None:
    control, candidate = resolve_recipe("131k-control", RECIPES), resolve_recipe("131k-4096", RECIPES)
    assert (control.serve.max_num_batched_tokens, candidate.serve.max_num_batched_tokens) == (8192, 4096)
    assert control.serve.max_model_len == candidate.serve.max_model_len == 131072
    assert control.gate("capacity")["rungs"] == [117500, 118500, 119500]
    fp8 = resolve_recipe("393k-fp8kv", RECIPES)
    offload = resolve_recipe("393k-offload", RECIPES)
    assert fp8.serve.max_model_len == 393216 and fp8.gate("engine")["min_kv_tokens"] == 393216
    assert max(fp8.gate("capacity")["rungs"]) > 300000 and fp8.gate("capacity")["min_largest_prompt"] == 300000
    assert not fp8.serve.kv_offloading_size_gib
    assert offload.serve.kv_offloading_size_gib == 16 and offload.serve.kv_offloading_backend == "native"
    flags = offload.serve_flags(host="127.0.0.1", port=8000)
    assert flags[flags.index("--kv-offloading-size") + 1] == "16"


def test_tiny_cpu_is_tp2_on_vllm_cpu() -> None:
    recipe = resolve_recipe("tiny-cpu", RECIPES)
    argv = recipe.subprocess_argv(host="127.0.0.1", port=8123)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert Path(argv[argv.index("--model") + 1]) == ROOT / "fixtures/model/build/tiny-chat"
    assert "--api-key" not in argv  # the key travels in the environment only


def test_unknown_name_lists_existing_recipes() -> None:
    with pytest.raises(RecipeError) as err:
        resolve_recipe_path("nope", RECIPES)
    text = str(err.value)
    assert "unknown recipe 'nope'" in text and "tiny-cpu" in text and "131k-control" in text and "Fix:" in text


def test_typo_in_name_suggests_the_close_one() -> None:
    with pytest.raises(RecipeError, match="Did you mean 'tiny-cpu'"):
        resolve_recipe_path("tiny-cpv", RECIPES)


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "bad", "name: bad\nidentity: {checkpoint: x\nserve: [\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert str(path) in str(err.value) and "not valid YAML at line" in str(err.value) and "Fix:" in str(err.value)


def test_unknown_key_is_named_with_its_path_and_a_suggestion(tmp_path: Path) -> None:
    data = tiny_data()
    data["name"] = "typo"
    serve = dict(data["serve"])  # type: ignore[call-overload]
    serve["max_modle_len"] = serve.pop("max_model_len")
    data["serve"] = serve
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tmp_path, "typo", data))
    text = str(err.value)
    assert "typo.yaml" in text
    assert "'serve.max_modle_len'" in text or "'serve.max_model_len'" in text
    assert "Fix:" in text


def test_unknown_key_alone_suggests_the_right_name(tmp_path: Path) -> None:
    data = tiny_data()
    data["name"] = "typo2"
    data["startup"] = {"deadline": 10}
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tmp_path, "typo2", data))
    assert "unknown key 'startup.deadline'" in str(err.value) and "rename it to 'deadline_s'" in str(err.value)


def test_wrong_type_names_key_and_expected_type(tmp_path: Path) -> None:
    data = tiny_data()
    data["name"] = "wrongtype"
    serve = dict(data["serve"])  # type: ignore[call-overload]
    serve["tensor_parallel_size"] = "two"
    data["serve"] = serve
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tmp_path, "wrongtype", data))
    text = str(err.value)
    assert "'serve.tensor_parallel_size' must be of type integer" in text and "'two'" in text


def test_missing_launch_command_is_named(tmp_path: Path) -> None:
    data = tiny_data()
    data["name"] = "nocmd"
    launcher = dict(data["launcher"])  # type: ignore[call-overload]
    launcher.pop("command")
    data["launcher"] = launcher
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tmp_path, "nocmd", data))
    assert "'launcher.command' is missing" in str(err.value) and "Fix:" in str(err.value)


def test_missing_required_key(tmp_path: Path) -> None:
    data = tiny_data()
    data["name"] = "noserve"
    del data["serve"]
    with pytest.raises(RecipeError, match="missing required key 'serve'"):
        load_recipe(write_recipe(tmp_path, "noserve", data))


def test_pinned_recipe_needs_digest_and_revision(tmp_path: Path) -> None:
    data = yaml.safe_load((RECIPES / "131k-control.yaml").read_text())
    data["name"] = "tagonly"
    data["identity"]["image"] = "vllm/vllm-openai:latest"
    with pytest.raises(RecipeError, match="by digest"):
        load_recipe(write_recipe(tmp_path, "tagonly", data))
    data["name"] = "shortrev"
    data["identity"]["image"] = REFERENCE_IDENTITY["image"]
    data["identity"]["revision"] = "9e165c30"
    with pytest.raises(RecipeError, match="40-hex"):
        load_recipe(write_recipe(tmp_path, "shortrev", data))


def test_name_must_match_file(tmp_path: Path) -> None:
    data = tiny_data()
    with pytest.raises(RecipeError, match="set name: other"):
        load_recipe(write_recipe(tmp_path, "other", data))


@pytest.mark.parametrize(("gate", "key", "good", "bad", "says"), [
    ("openai_sdk", "strict", True, "yes", "'gates.openai_sdk.strict' must be of type boolean"),
    ("tools", "repeat", 3, 0, "'gates.tools.repeat'"),
])
def test_sdk_strict_and_tools_repeat_are_recipe_keys(tmp_path: Path, gate: str, key: str, good: object, bad: object,
                                                     says: str) -> None:
    data = tiny_data()
    data["name"] = f"{gate}-{key}"
    data["gates"] = {**data["gates"], gate: {**data["gates"].get(gate, {}), key: good}}  # type: ignore[dict-item]
    assert load_recipe(write_recipe(tmp_path, f"{gate}-{key}", data)).gate(gate)[key] == good
    data["gates"][gate][key] = bad  # type: ignore[index]
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tmp_path, f"{gate}-{key}", data))
    assert f"{gate}-{key}.yaml" in str(err.value) and says in str(err.value)


def test_sdk_strict_and_tools_repeat_are_off_by_default() -> None:
    recipe = load_recipe(RECIPES / "tiny-cpu.yaml")
    assert "strict" not in recipe.gate("openai_sdk") and "repeat" not in recipe.gate("tools")


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_says_its_kv_pool_minimum_once(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    assert "min_kv_tokens" not in (data["gates"].get("capacity") or {})
    assert "min_kv_tokens" in data["gates"]["engine"]


@pytest.mark.parametrize(("capacity", "engine", "settled"), [
    (32768, 32768, 32768),   # an older recipe: the same value in both places
    (32768, None, 32768),    # only the older place set
    (None, 4096, 4096),      # the older place null: unset
])
def test_an_older_recipe_with_the_kv_minimum_in_the_capacity_block_still_loads(
        tmp_path: Path, capacity: int | None, engine: int | None, settled: int) -> None:
    data = tiny_data()
    gates = data["gates"]
    assert isinstance(gates, dict)
    gates["capacity"]["min_kv_tokens"] = capacity
    gates["engine"]["min_kv_tokens"] = engine
    recipe = load_recipe(write_recipe(tmp_path, "tiny-cpu", data))
    assert recipe.gate("engine")["min_kv_tokens"] == settled
    assert "min_kv_tokens" not in recipe.gate("capacity")
    assert min_kv_tokens(recipe.raw) == settled


def test_an_older_recipe_whose_two_kv_minimums_differ_is_refused(tmp_path: Path) -> None:
    data = tiny_data()
    gates = data["gates"]
    assert isinstance(gates, dict)
    gates["capacity"]["min_kv_tokens"] = 32768
    gates["engine"]["min_kv_tokens"] = 65536
    path = write_recipe(tmp_path, "tiny-cpu", data)
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    text = str(err.value)
    assert text.startswith(f"recipe {path}: keys 'gates.engine.min_kv_tokens' (65536) and "
                           "'gates.capacity.min_kv_tokens' (32768) disagree")
    assert "Fix: keep the value you mean in 'gates.engine.min_kv_tokens'" in text
    assert err.value.key == "gates.capacity.min_kv_tokens"


def test_the_kv_minimum_of_a_report_reads_the_older_place_too() -> None:
    assert min_kv_tokens({"gates": {"engine": {"min_kv_tokens": 8192}}}) == 8192
    assert min_kv_tokens({"gates": {"capacity": {"min_kv_tokens": 8192}, "engine": {"min_kv_tokens": None}}}) == 8192
    assert min_kv_tokens({"gates": {"engine": {"min_kv_tokens": True}}}) is None
    assert min_kv_tokens(None) is None and min_kv_tokens({}) is None


@pytest.mark.parametrize(("name", "kind"), [("tiny-cpu", "subprocess"), ("tiny-docker", "docker"),
                                            ("131k-control", "docker")])
def test_the_launcher_kind_is_a_typed_word_that_prints_and_dumps_as_itself(name: str, kind: str) -> None:
    from pytest_vllmqual.recipe.overrides import effective_yaml
    from pytest_vllmqual.records import LauncherKind

    recipe = resolve_recipe(name, RECIPES)
    assert recipe.launcher.kind is LauncherKind(kind)
    assert f"{recipe.launcher.kind}" == str(recipe.launcher.kind) == kind
    assert f"kind: {kind}" in effective_yaml(recipe.raw)
    assert type(recipe.raw["launcher"]["kind"]) is str


@pytest.mark.parametrize("rule", ["exact", "tokens", "tasks"])
def test_compare_promotion_names_one_of_three_rules(tmp_path: Path, rule: str) -> None:
    data = tiny_data()
    data["name"] = f"promote-{rule}"
    data["compare"] = {**dict(data.get("compare") or {}), "promotion": rule}  # type: ignore[dict-item]
    assert load_recipe(write_recipe(tmp_path, f"promote-{rule}", data)).compare["promotion"] == rule


def test_an_unknown_promotion_rule_is_refused_with_the_three_words(tmp_path: Path) -> None:
    data = tiny_data()
    data["name"] = "promote-bogus"
    data["compare"] = {"promotion": "numerics"}
    with pytest.raises(RecipeError) as err:
        load_recipe(write_recipe(tmp_path, "promote-bogus", data))
    assert "'compare.promotion' is 'numerics', which is not one of exact, tokens, tasks" in str(err.value)
