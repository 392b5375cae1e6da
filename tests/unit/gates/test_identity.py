"""Identity, field by field: every pinned field compared with what the server says, with its
source; verified only when every pinned field was checked and matched."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from support import ROOT, recipes

from pytest_vllmqual.gates.checkpoint import model_directory_fingerprint
from pytest_vllmqual.gates.identity import (
    CONTENT_KEY,
    check_identity,
    image_digest_matches,
    logged_model_args,
    model_files_sha256,
)
from pytest_vllmqual.recipe.loader import load_recipe
from pytest_vllmqual.recipe.model import Recipe

RECIPES = ROOT / "fixtures" / "recipes"
DIGEST = "sha256:fdde59fed7f9fc12f9fd5ef1b3b3ea8d5097bf10ebad54b348497102c3a83f82"
REVISION = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"


def args_line(args: dict[str, Any], prefix: str = "") -> str:
    return f"{prefix}(APIServer pid=7) INFO 11-30 01:52:52 [api_utils.py:286] non-default args: {args!r}\n"


def by_field(result: Any) -> dict[str, dict[str, Any]]:
    return {c["field"]: c for c in result.to_dict(load_recipe(RECIPES / "tiny-cpu.yaml"))["checks"]}


def tiny() -> Recipe:
    """tiny-cpu without its content pin: the pin file exists only where the model was built."""
    recipe = recipes.tiny()
    return dataclasses.replace(recipe, identity=dataclasses.replace(recipe.identity, content_digest_file=None))


def test_a_local_tiny_cpu_server_is_verified_field_by_field_and_shows_no_path() -> None:
    recipe = tiny()
    location = recipe.model_location()
    log = args_line({"model": location, "served_model_name": ["tiny-chat"]}, prefix="[node-a] ")
    result = check_identity(recipe, version="0.32.0", launcher_kind="subprocess", tp_size_seen=2, log_text=log,
                            models=[{"id": "tiny-chat", "root": location, "max_model_len": 32768}])
    assert result.status == "verified" and result.not_checked == []
    checks = by_field(result)
    assert list(checks) == ["checkpoint", "revision", "content_digest", "image_digest", "runtime_version",
                            "tensor_parallel_size", "max_model_len", "served_model"]
    assert checks["checkpoint"] == {
        "field": "checkpoint", "expected": "vllmqual/tiny-chat (fixtures/model/build/tiny-chat)",
        "observed": "fixtures/model/build/tiny-chat", "ok": True, "status": "matched",
        "source": "log non-default args 'model' and /v1/models root", "pinned": True, "note": "",
        "observable": True}
    assert checks["revision"]["status"] == "not pinned" and checks["content_digest"]["status"] == "not pinned"
    assert result.unpinned == ["the model is pinned neither by a hub revision nor by a content digest"]
    assert checks["image_digest"]["status"] == "not pinned"
    assert checks["image_digest"]["note"] == "not applicable: the subprocess launcher runs no container"
    assert checks["runtime_version"]["source"] == "/version"
    assert checks["tensor_parallel_size"] == {**checks["tensor_parallel_size"], "observed": 2,
                                              "source": "rank count in the log"}
    assert str(Path(location).parent) not in json.dumps(result.to_dict(recipe))


def test_another_local_directory_is_a_mismatch_named_without_its_path(tmp_path: Path) -> None:
    recipe = tiny()
    mine, other = tmp_path / "mine", tmp_path / "users" / "jdoe" / "other-model"
    for directory, content in ((mine, '{"hidden_size": 64}'), (other, '{"hidden_size": 128}')):
        directory.mkdir(parents=True)
        (directory / "config.json").write_text(content)
    result = check_identity(recipe, version="0.32.0", tp_size_seen=2, log_text=args_line({"model": str(other)}),
                            models=[{"id": "tiny-chat", "root": str(other), "max_model_len": 32768}],
                            expected_model_arg=str(mine))
    assert result.status == "provenance_mismatch"
    checkpoint = by_field(result)["checkpoint"]
    assert checkpoint["ok"] is False and checkpoint["observed"] == "<another local directory>"
    assert checkpoint["note"] == "log non-default args 'model': different files: config.json differs"
    assert "jdoe" not in json.dumps(result.to_dict(recipe))


def test_a_pinned_hub_checkpoint_checks_revision_and_image_digest_through_the_launcher_hook() -> None:
    recipe = load_recipe(RECIPES / "131k-control.yaml")
    log = args_line({"model": "deepseek-ai/DeepSeek-V4-Flash-0731", "revision": REVISION})
    models = [{"id": recipe.identity.served_model_name, "root": "deepseek-ai/DeepSeek-V4-Flash-0731",
               "max_model_len": 131072}]
    common: dict[str, Any] = dict(version=recipe.identity.runtime_version, models=models, tp_size_seen=2,
                                  launcher_kind="docker", log_text=log, expected_model_arg=recipe.model_location())
    verified = check_identity(recipe, image_digest=[f"voipmonitor/vllm@{DIGEST}"], **common)
    assert verified.status == "verified"
    checks = {c.field: c for c in verified.checks}
    assert (checks["revision"].observed, checks["revision"].source) == (REVISION, "log non-default args 'revision'")
    assert checks["image_digest"].ok is True and "RepoDigests" in checks["image_digest"].source
    assert checks["checkpoint"].observed == "deepseek-ai/DeepSeek-V4-Flash-0731", "a hub id is shown as is"

    unreported = check_identity(recipe, image_digest=None, **common)
    assert unreported.status == "partially-verified" and unreported.not_checked == ["image_digest"]
    other = check_identity(recipe, image_digest="voipmonitor/vllm@sha256:" + "0" * 64, **common)
    assert other.status == "provenance_mismatch"


def test_the_revision_is_read_from_a_snapshot_path_when_no_argument_names_it() -> None:
    recipe = load_recipe(RECIPES / "131k-control.yaml")
    snapshot = f"/models/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/{'a' * 40}"
    result = check_identity(recipe, version=recipe.identity.runtime_version, tp_size_seen=2, launcher_kind="docker",
                            models=[{"id": recipe.identity.served_model_name, "root": snapshot,
                                     "max_model_len": 131072}],
                            image_digest=DIGEST, expected_model_arg=snapshot)
    revision = next(c for c in result.checks if c.field == "revision")
    assert revision.observed == "a" * 40 and revision.ok is False
    assert revision.source == "snapshot path in the /v1/models root"


def test_nothing_observed_is_never_verified() -> None:
    result = check_identity(tiny(), version=None, models=None, tp_size_seen=None)
    assert result.status == "unverified"
    assert set(result.not_checked) == {"checkpoint", "runtime_version", "tensor_parallel_size", "max_model_len",
                                       "served_model"}


def test_the_image_digest_hook_reads_a_digest_or_repo_digests() -> None:
    image = f"voipmonitor/vllm@{DIGEST}"
    assert image_digest_matches(image, DIGEST) is True
    assert image_digest_matches(image, ["other/repo@sha256:" + "1" * 64, image]) is True
    assert image_digest_matches(image, ["other/repo@sha256:" + "1" * 64]) is False
    assert image_digest_matches("voipmonitor/vllm:latest", DIGEST) is None
    assert image_digest_matches(image, None) is None


def test_model_files_are_hashed_config_and_weights_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    files = model_files_sha256(tmp_path)
    assert files.pop(CONTENT_KEY) == hashlib.sha256(
        "".join(f"{name}\t{digest}\n" for name, digest in sorted(model_directory_fingerprint(tmp_path).items()))
        .encode()).hexdigest()
    assert files == {
        "config.json": hashlib.sha256(b'{"hidden_size": 64}').hexdigest(),
        "model.safetensors.index.json": hashlib.sha256(b'{"weight_map": {}}').hexdigest()}
    single = tmp_path / "single"
    single.mkdir()
    header = b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    (single / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0\0\0")
    files = model_files_sha256(single)
    assert files["model.safetensors#header"] == hashlib.sha256(struct.pack("<Q", len(header)) + header).hexdigest()
    assert set(files) == {"model.safetensors#header", CONTENT_KEY}


def test_a_model_retrained_into_the_same_shapes_differs_only_in_content(tmp_path: Path) -> None:
    """The header digest cannot tell two trainings of one architecture apart; the content can,
    and a copy of the same files has the same content."""
    header = b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    runs = {}
    for name, weights in (("first", b"\0\0\0\1"), ("second", b"\0\0\0\2"), ("copy", b"\0\0\0\1")):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "config.json").write_text('{"hidden_size": 64}')
        (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + weights)
        runs[name] = model_files_sha256(directory)
    assert runs["first"]["model.safetensors#header"] == runs["second"]["model.safetensors#header"]
    assert runs["first"]["config.json"] == runs["second"]["config.json"]
    assert runs["first"][CONTENT_KEY] != runs["second"][CONTENT_KEY]
    assert runs["first"] == runs["copy"]


def test_logged_model_args_read_the_last_start_through_a_prefix() -> None:
    log = args_line({"model": "/a"}, "[n1] ") + args_line({"model": "/b", "revision": "r"}, "[n1] ")
    assert logged_model_args(log) == {"model": "/b", "revision": "r"}


def test_the_gate_reads_back_the_same_result_from_the_facts_dict() -> None:
    """The identity gate reads ``server_facts["identity"]`` as an IdentityResult again: status,
    not-checked fields, mismatches and the one-line description survive the round trip."""
    from pytest_vllmqual.gates.identity import IdentityResult

    recipe = tiny()
    location = recipe.model_location()
    for tp_seen, version in ((2, "0.32.0"), (None, "0.31.0")):
        result = check_identity(recipe, version=version, launcher_kind="subprocess", tp_size_seen=tp_seen,
                                log_text=args_line({"model": location}),
                                models=[{"id": "tiny-chat", "root": location, "max_model_len": 32768}])
        again = IdentityResult.from_dict(json.loads(json.dumps(result.to_dict(recipe))))
        assert again.status == result.status and again.not_checked == result.not_checked
        assert [c.field for c in again.mismatches] == [c.field for c in result.mismatches]
        assert [c.field for c in again.unchecked] == result.not_checked
        assert again.describe() == "; ".join(f"{c['field']} {c['status']}" for c in result.to_dict(recipe)["checks"])
    assert again.status == "provenance_mismatch" and [c.field for c in again.mismatches] == ["runtime_version"]
    assert "tensor_parallel_size" in again.not_checked


def test_engine_facts_typed_view_of_a_direct_only_run() -> None:
    """What the engine gates read: typed facts with their sources; per-rank facts are not
    observable without the server log, and wrong-typed values read as absent."""
    from pytest_vllmqual.vllm.fact_sources import with_sources
    from pytest_vllmqual.vllm.log_facts import NOT_OBSERVABLE, EngineFacts, RankFacts

    metrics = {"cache_config_info": {"kv_cache_size_tokens": "2097152", "kv_cache_max_concurrency": "64.0"}}
    facts = EngineFacts.from_dict(
        with_sources({}, {"metrics": metrics, "models": [{"max_model_len": 32768}]}, has_log=False))
    assert facts.kv_cache_tokens == 2_097_152 and facts.max_concurrency == 64.0
    assert facts.concurrency_at_tokens == 32768 and facts.source("kv_cache_tokens") == "metrics"
    assert facts.ranks_observable is False and facts.source("ranks") == NOT_OBSERVABLE and facts.ranks == []
    logged = EngineFacts.from_dict({"kv_cache_tokens": True, "ranks": [{"label": "TP0", "available_kv_gib": 1.0}],
                                    "sources": {}})
    assert logged.kv_cache_tokens is None and logged.ranks_observable
    assert logged.ranks == [RankFacts(label="TP0", available_kv_gib=1.0)] and logged.ranks[0].kv_gib == 1.0


def test_engine_facts_are_one_type_from_the_log_to_the_gate() -> None:
    """What the server manager writes (the parsed log, completed with its sources) reads back as
    the same facts in a gate."""
    from pytest_vllmqual.vllm.fact_sources import with_sources
    from pytest_vllmqual.vllm.log_facts import EngineFacts, parse_engine_log

    log = ("(EngineCore_DP0 pid=7) INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 283,917 tokens\n"
           "(Worker_TP0 pid=8) INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 15.27 GiB\n")
    public = with_sources(parse_engine_log(log).to_dict(), {"version": "0.32.0"}, has_log=True)
    back = EngineFacts.from_dict(public)
    assert back.to_dict() == public
    assert back.kv_cache_tokens == 283_917 and back.get("min_rank_kv_gib") == 15.27
    assert back.source("vllm_version") == "endpoint" and back.vllm_version == "0.32.0"
