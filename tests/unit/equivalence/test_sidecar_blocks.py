"""A sidecar's blocks: a gate other than the probe (the tool-call replay) leaves its part in the
private folder, and publishing merges it under its key, with or without the probe's answers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pytest_vllmqual.equivalence.sidecar import FORMAT, PRIVATE_NAME, has_answers, load, publish, write_block


def test_a_block_is_published_beside_the_probe(tmp_path: Path) -> None:
    private = tmp_path / "private"
    (private / "equivalence").mkdir(parents=True)
    (private / PRIVATE_NAME).write_text(json.dumps({"probe_sha256": "p", "top_k": 20}))
    write_block(private, "tool_replay", {"bank": {"sha256": "b"}, "outcomes": []})
    reference = publish(private / PRIVATE_NAME, {}, tmp_path / "arm-1.json")
    sidecar, why = load(reference, tmp_path)
    assert why is None and sidecar is not None
    assert sidecar["format"] == FORMAT and sidecar["probe_sha256"] == "p"
    assert sidecar["tool_replay"] == {"bank": {"sha256": "b"}, "outcomes": []}


def test_a_block_alone_makes_a_sidecar(tmp_path: Path) -> None:
    private = tmp_path / "private"
    assert not has_answers(private)
    write_block(private, "tool_replay", {"outcomes": [1]})
    assert has_answers(private)
    reference = publish(private / PRIVATE_NAME, {}, tmp_path / "arm-2.json")
    assert reference["probe_sha256"] is None and reference["top_k"] is None
    body = json.loads(gzip.decompress((tmp_path / reference["file"]).read_bytes()))
    assert body["tool_replay"] == {"outcomes": [1]}


def test_a_block_cannot_take_the_sidecars_own_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be a sidecar block's key"):
        write_block(tmp_path, "format", {})


def test_publish_refuses_a_whole_report_in_place_of_the_arm_s_facts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"not engine, identity: pass comparison.sidecar_arm\(report\)"):
        publish(tmp_path / "private" / PRIVATE_NAME, {"identity": {}, "engine": {}}, tmp_path / "arm-3.json")
