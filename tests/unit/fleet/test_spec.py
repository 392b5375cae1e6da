"""The fleet file: shipped fleets load, bad ones fail naming the file, the key and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import ROOT

from pytest_vllmqual.errors import FleetError
from pytest_vllmqual.fleet.runner import job_resources
from pytest_vllmqual.fleet.spec import PlacementMode, RetryWhen, load_fleet
from pytest_vllmqual.recipe.loader import resolve_recipe
from pytest_vllmqual.recipe.overrides import with_overrides

FLEETS = ROOT / "fixtures" / "fleets"
RECIPES = ROOT / "fixtures" / "recipes"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_tiny_cpu_fleet_loads_with_defaults() -> None:
    spec = load_fleet(FLEETS / "tiny-cpu.yaml")
    assert spec.name == "tiny-cpu" and spec.max_parallel == 2
    every, anywhere = spec.jobs
    assert every.placement.mode is PlacementMode.EACH_NODE and every.placement.resource is None
    assert anywhere.placement.mode is PlacementMode.ANY
    # every job answers the probe and the item bank unless it opts out (the any-node job does); CI's
    # every-node job leaves the tool-call replay out (the fleet does not compare it)
    assert every.pytest_selection() == ["-m", "(engine or lifecycle) or equivalence or items", "-k", "not tool_replay"]
    assert anywhere.pytest_selection() == ["-m", "engine"] and not anywhere.answers.compare
    assert every.retry.attempts == 0 and every.retry.on == (RetryWhen.LOST,)  # default: no retry


def test_cpu_recipe_asks_for_cores_and_gpu_recipe_for_tp_times_dcp() -> None:
    spec = load_fleet(FLEETS / "reference-campaign.yaml")
    names = [j.name for j in spec.jobs]
    assert names[:4] == ["131k-control", "131k-4096", "393k-fp8kv", "393k-offload"]
    gpu_job = spec.jobs[0]
    assert job_resources(gpu_job, resolve_recipe(gpu_job.recipe, RECIPES)) == (1.0, 2)
    cpu_job = load_fleet(FLEETS / "tiny-cpu.yaml").jobs[1]
    assert job_resources(cpu_job, resolve_recipe(cpu_job.recipe, RECIPES)) == (2.0, 0)


def test_node_label_adds_its_overrides_and_they_validate() -> None:
    job = load_fleet(FLEETS / "tiny-cpu.yaml").jobs[0]
    assert job.overrides_for({"kv": "big"}) == job.overrides and job.overrides[0] == "serve.tensor_parallel_size=1"
    small = job.overrides_for({"kv": "small"})
    assert small[:len(job.overrides)] == job.overrides and len(small) == len(job.overrides) + 2
    recipe = with_overrides(resolve_recipe(job.recipe, RECIPES), list(small))
    assert "VLLM_CPU_KVCACHE_SPACE" not in recipe.launcher.env
    assert recipe.serve.extra_args[-2:] == ("--kv-cache-memory-bytes", "536870912")


@pytest.mark.parametrize(("text", "words"), [
    ("name: f\njobs: [{name: a, recipe: tiny-cpu, placment: {mode: any}}]\n",
     ["unknown key 'jobs.0.placment'", "rename it to 'placement'"]),
    ("name: f\njobs: [{name: a}]\n", ["missing required key 'jobs.0.recipe'", "Fix: add it"]),
    ("name: f\njobs: [{name: a, recipe: r, placement: {mode: everywhere}}]\n",
     ["'jobs.0.placement.mode'", "any, each_node"]),
    ("name: f\njobs: [{name: a, recipe: r, placement: {mode: each_node, label: gpu}}]\n",
     ["'jobs.0.placement.label'", "KEY=VALUE"]),
    ("name: f\njobs: [{name: a, recipe: r}, {name: a, recipe: r}]\n", ["'jobs.1.name' repeats the job name"]),
    ("name: f\njobs: []\n", ["'jobs'"]),
    ("name: f\njobs: [{name: a, recipe: r\n", ["not valid YAML", "line"]),
    ("- just a list\n", ["must be a YAML mapping"]),
])
def test_bad_fleet_file_names_file_key_and_fix(tmp_path: Path, text: str, words: list[str]) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(FleetError) as info:
        load_fleet(path)
    message = str(info.value)
    assert str(path) in message and "Traceback" not in message
    for word in words:
        assert word in message


def test_missing_fleet_file(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match=r"cannot read fleet file .*Fix"):
        load_fleet(tmp_path / "nope.yaml")


def test_recipe_path_is_relative_to_the_fleet_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: f\njobs: [{name: a, recipe: ./mine.yaml}, {name: b, recipe: tiny-cpu}]\n")
    spec = load_fleet(path)
    assert spec.recipe_argument(spec.jobs[0]) == str(tmp_path / "mine.yaml")
    assert spec.recipe_argument(spec.jobs[1]) == "tiny-cpu"


def test_one_gpu_fleet_sets_tp_one_per_job_so_each_job_asks_one_gpu() -> None:
    spec = load_fleet(FLEETS / "tiny-gpu-one-node.yaml")
    assert [(j.name, j.recipe) for j in spec.jobs] == [("tiny-gpu", "tiny-gpu"),
                                                       ("tiny-gpu-393k-fp8kv", "tiny-gpu-393k-fp8kv")]
    for job in spec.jobs:
        as_shipped = resolve_recipe(job.recipe, RECIPES)
        assert as_shipped.serve.tensor_parallel_size == 2  # the fleet file, not a rewritten recipe, says TP=1
        recipe = with_overrides(as_shipped, list(job.overrides))
        assert recipe.serve.tensor_parallel_size == 1
        assert job_resources(job, recipe) == (1.0, 1)
        assert job.retry.attempts == 0 and job.placement.mode is PlacementMode.ANY
    # Both are handed to Ray at once, so Ray (not the fleet) queues the second behind the first,
    # and the second's deadline, counted from that hand-over, covers the first job's run too.
    first, second = spec.jobs
    assert spec.max_parallel >= len(spec.jobs)
    assert second.deadline_s >= first.deadline_s + 300


def test_one_gpu_fleet_selects_registered_markers_and_the_393k_ladder() -> None:
    from pytest_vllmqual.plugin import MARKERS

    known = {name.split("(")[0] for name in MARKERS}
    for job in load_fleet(FLEETS / "tiny-gpu-one-node.yaml").jobs:
        words = set(str(job.markers).replace("(", " ").replace(")", " ").split()) - {"and", "or", "not"}
        assert words and words <= known, job.name
        assert "capacity" in words and "load" not in words  # the ladder runs; load is the load benchmark's


def test_gpu_campaign_script_names_only_fleet_files_that_load() -> None:
    script = (ROOT / "scripts" / "gpu" / "run_gpu_campaign.sh").read_text()
    named = sorted(set(re.findall(r"fixtures/fleets/[\w.-]+\.yaml", script)))
    assert named == ["fixtures/fleets/tiny-gpu-one-node.yaml"]
    for relative in named:
        assert load_fleet(ROOT / relative).jobs
