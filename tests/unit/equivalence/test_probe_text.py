"""The probe's own text: shipped with the package, pinned by version and SHA-256, independent of
the Python that runs the probe, long enough for 32K-token chunks; and what a probe record says
besides its hash (the text, the chat template as rendered, ``max_tokens`` and the stop rules)."""

from __future__ import annotations

import gzip
import hashlib
import json
import pydoc_data.topics
import re
import sys
import zlib
from collections import Counter
from collections.abc import Mapping
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tomllib
from support import ROOT

from pytest_vllmqual.equivalence import probe
from pytest_vllmqual.equivalence.comparison import equivalence_section
from pytest_vllmqual.equivalence.depth import DepthSettings
from pytest_vllmqual.equivalence.probe import ProbeSettings, probe_text
from pytest_vllmqual.equivalence.runner import run_probe

PROMPTS = [("smoke", "Say cloud."), ("open-1", "Explain in two sentences why the sky looks blue.")]
SETTINGS = ProbeSettings(context_lengths=(16, 32), chunks_per_length=2, greedy_max_tokens=4)
CI_DEPTHS = (1024, 8192, 32768)
"""The longest probe a shipped recipe asks for (tiny-gpu-131k-*: 4 chunks at each of these lengths)."""
CI_TOKENS = 4 * sum(CI_DEPTHS)
OLD_EXAMPLE = ROOT / "reports" / "examples" / "cpu-smollm2"


def _word_tokens(text: str) -> list[int]:
    """A stand-in tokenizer: one ID per word or punctuation mark, the same on every machine."""
    return [zlib.crc32(piece.encode()) % 50_000 for piece in re.findall(r"\w+|[^\w\s]", text)]


class FakeServer:
    """Just enough of a vLLM server for the probe's runner: /tokenize, prompt log probabilities, chat."""

    model = "fake"

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    @staticmethod
    def _answer(body: Mapping[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(ok=True, status_code=200, body=body, attempt=SimpleNamespace(error=None))

    def post_json(self, path: str, body: dict[str, Any], *, kind: str, label: str, **_: Any) -> SimpleNamespace:
        self.sent.append((label, body))
        if path == "/tokenize":
            if "messages" in body:
                return self._answer({"tokens": [1, *_word_tokens(body["messages"][0]["content"]), 2]})
            return self._answer({"tokens": _word_tokens(body["prompt"])})
        if "allowed_token_ids" in body:  # a depth window's forced one-token request
            forced, n = body["allowed_token_ids"][0], len(body["prompt"])
            top = {f"token_id:{n % 13}": -0.5, f"token_id:{forced}": -1.5}
            return self._answer({"choices": [{"logprobs": {"tokens": [f"token_id:{forced}"], "token_logprobs": [-1.5],
                                                            "top_logprobs": [top]}}]})
        prompt, k = body["prompt"], body["prompt_logprobs"]
        entries = [None] + [{str(t): {"logprob": -1.0, "rank": 1},
                             **{str(90_000 + j): {"logprob": -2.0 - j, "rank": j + 2} for j in range(k - 1)}}
                            for t in prompt[1:]]
        return self._answer({"choices": [{"prompt_logprobs": entries}]})

    def tokenize_chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> SimpleNamespace:
        return self.post_json("/tokenize", {"messages": messages}, kind="tokenize", label=kwargs.get("label", "t"))

    def chat(self, body: dict[str, Any], *, label: str, **_: Any) -> SimpleNamespace:
        self.sent.append((label, body))
        step = {"token": "token_id:5", "logprob": -0.1, "top_logprobs": [{"token": "token_id:5", "logprob": -0.1}]}
        return SimpleNamespace(ok=True, status_code=200, choice={"logprobs": {"content": [step]}},
                               finish_reason="length", attempt=SimpleNamespace(error=None))


def _probe(server: FakeServer | None = None, settings: ProbeSettings = SETTINGS) -> dict[str, Any]:
    result = run_probe(server or FakeServer(), settings, PROMPTS)  # type: ignore[arg-type]
    assert result.measured, result.reason
    return result.body


def test_the_probe_text_does_not_come_from_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another Python's help topics (they differ between 3.11.2 and 3.11.7) change nothing the probe sends."""
    before = _probe()
    monkeypatch.setattr(pydoc_data.topics, "topics", {"assert": "Another Python's help topics, shorter. " * 3000})
    server = FakeServer()
    after = _probe(server)
    assert after["chunk_tokens"] == before["chunk_tokens"], "the chunks followed pydoc_data.topics"
    assert after["probe_sha256"] == before["probe_sha256"], "the probe hash followed pydoc_data.topics"
    tokenized = [body["prompt"] for label, body in server.sent if label == "equivalence-tokenize"]
    assert tokenized and all("help topics" not in text for text in tokenized)


def test_the_shipped_text_is_pinned_by_version_and_sha256_and_read_as_shipped() -> None:
    text = probe_text()
    assert (text.file, text.version) == ("probe_text.txt.gz", "austen-pp-persuasion/1")
    assert text.sha256 == "e89c5431b88a26cfa6fe67094765ded9f4c05afbe562fed17251e5b508400c90"
    raw = gzip.decompress((resources.files("pytest_vllmqual.equivalence") / "data" / "probe_text.txt.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == text.sha256 and raw.decode("utf-8") == text.text
    assert text.text.startswith("PRIDE AND PREJUDICE") and "Anne Elliot" in text.text
    assert text.record() == {"file": "probe_text.txt.gz", "version": "austen-pp-persuasion/1", "sha256": text.sha256,
                             "characters": 1_151_625, "source": probe.TEXT_SOURCE}


def test_a_changed_text_is_an_error_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    changed = tmp_path / "mine.txt.gz"
    changed.write_bytes(gzip.compress(probe_text().text.replace("Elizabeth", "Elisabeth", 1).encode()))
    with pytest.raises(ValueError, match=r"the probe text mine\.txt\.gz has SHA-256 [0-9a-f]{64}, not the pinned e89c54"):
        probe_text(str(changed), probe.TEXT_SHA256)
    monkeypatch.setattr(probe, "TEXT_SHA256", "0" * 64)
    with pytest.raises(ValueError, match=r"the probe text probe_text\.txt\.gz has SHA-256 e89c54.*not the pinned 0{64}"):
        probe_text()


def test_a_recipe_s_own_text_is_checked_and_recorded_like_the_shipped_one(tmp_path: Path) -> None:
    """The route to depths the shipped text is too short for: a file named by the recipe, with its SHA-256."""
    own = "It was a bright cold day in a village nobody had named yet. " + probe_text().text[:40_000]
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "own.txt").write_text(own, encoding="utf-8")
    digest = hashlib.sha256(own.encode()).hexdigest()
    settings = ProbeSettings.from_recipe({"context_lengths": [16, 32], "chunks_per_length": 2,
                                          "text_file": "texts/own.txt", "text_sha256": f"sha256:{digest}"},
                                         4096, root=tmp_path)
    body = _probe(settings=settings)
    assert body["text"] == {"file": "own.txt", "version": "the recipe's own file", "sha256": digest,
                            "characters": len(own), "source": "gates.equivalence.text_file"}
    assert str(tmp_path) not in json.dumps(body)  # a local path never reaches the record
    assert body["probe_sha256"] != _probe()["probe_sha256"]
    with pytest.raises(ValueError, match=r"own\.txt has no pinned SHA-256"):
        ProbeSettings.from_recipe({"text_file": "texts/own.txt"}, 4096, root=tmp_path).text()


def test_the_record_carries_the_text_the_rendered_chat_template_max_tokens_and_the_stop_rules() -> None:
    server = FakeServer()
    body = _probe(server)
    assert {"text", "chat_template", "requests"} <= set(body), sorted(body)
    assert body["text"]["sha256"] == probe.TEXT_SHA256 and body["text"]["version"] == probe.TEXT_VERSION
    rendered = [[name, [1, *_word_tokens(prompt), 2]] for name, prompt in PROMPTS]
    template = body["chat_template"]
    assert template["rendered_sha256"] == hashlib.sha256(json.dumps(rendered, separators=(",", ":")).encode()).hexdigest()
    assert template["prompt_tokens"] == {name: len(ids) for name, ids in rendered}
    greedy = body["requests"]["greedy"]
    assert (greedy["max_tokens"], greedy["temperature"], greedy["top_logprobs"]) == (4, 0, body["top_k"])
    assert (greedy["stop"], greedy["stop_token_ids"], greedy["ignore_eos"]) == ([], [], False)
    assert body["requests"]["teacher_forced"]["max_tokens"] == 1
    sent = [b for label, b in server.sent if label.startswith("equivalence-greedy-")]
    assert sent and all(b["max_tokens"] == 4 and b["stop"] == [] and b["ignore_eos"] is False for b in sent)


def test_the_depth_windows_ride_with_the_probe_and_leave_its_hash_alone() -> None:
    """Depth windows are scored from the same text's token IDs by forced one-token requests; the chunk
    probe, its hash and its tokens stay as they were (two arms with other depth plans still compare)."""
    plain = _probe()
    server = FakeServer()
    depth = DepthSettings(edges=(64, 128), windows_per_bucket=8, window_tokens=4)
    result = run_probe(server, SETTINGS, PROMPTS, depth)  # type: ignore[arg-type]
    body = result.body
    assert body["probe_sha256"] == plain["probe_sha256"] and body["chunk_tokens"] == plain["chunk_tokens"]
    assert body["depth"]["buckets"] == [[0, 64], [64, 128]] and len(body["depth"]["windows"]) == 16
    forced = [(label, sent) for label, sent in server.sent if "allowed_token_ids" in sent]
    assert len(forced) == 16 * 4 and all(label.startswith("equivalence-depth-") for label, _ in forced)
    scored = [row[0] for window in body["depth"]["windows"] for row in window["positions"]]
    assert scored == [sent["allowed_token_ids"][0] for _, sent in forced]
    first_chunk = plain["chunk_tokens"][0]
    assert all(sent["prompt"][:len(first_chunk)] == first_chunk for _, sent in forced if len(sent["prompt"]) > 16)


def test_the_probe_hash_changes_with_the_text_the_template_and_max_tokens() -> None:
    base = probe.probe_sha256([1, 2], [(2, [1, 2])], [], SETTINGS, 20, text={"version": "v", "sha256": "a"},
                               chat_template={"rendered_sha256": "r"})
    assert base != probe.probe_sha256([1, 2], [(2, [1, 2])], [], SETTINGS, 20, text={"version": "v", "sha256": "b"},
                                      chat_template={"rendered_sha256": "r"})
    assert base != probe.probe_sha256([1, 2], [(2, [1, 2])], [], SETTINGS, 20, text={"version": "v", "sha256": "a"},
                                      chat_template={"rendered_sha256": "s"})
    longer = ProbeSettings(context_lengths=(16, 32), chunks_per_length=2, greedy_max_tokens=8)
    assert base != probe.probe_sha256([1, 2], [(2, [1, 2])], [], longer, 20, text={"version": "v", "sha256": "a"},
                                      chat_template={"rendered_sha256": "r"})


def test_the_text_is_natural_and_does_not_repeat() -> None:
    text = probe_text().text
    paragraphs = [p for p in text.split("\n\n") if len(p) > 80]
    assert len(paragraphs) > 2_000 and max(Counter(paragraphs).values()) == 1
    assert len(set(re.findall(r"[a-z]+", text.lower()))) > 8_000
    assert len(gzip.compress(text.encode())) / len(text) > 0.3  # repeated filler compresses far better


def test_the_text_is_long_enough_for_four_chunks_at_1k_8k_and_32k_by_a_conservative_bound() -> None:
    """English prose runs at about 4 characters per token (SmolLM2: 4.06 on this text; the fixture model's
    1,216-token vocabulary: 1.54); 5 is a bound no English tokenizer we know reaches."""
    assert len(probe_text().text) / 5 >= CI_TOKENS


def _tokenizer_count(folder: Path, text: str) -> int:
    tokenizers = pytest.importorskip("tokenizers")
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"{folder.name} is not built here")
    return len(tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("folder", ["tiny-chat", "smollm2-135m-instruct"])
def test_the_text_is_long_enough_for_four_chunks_at_1k_8k_and_32k_with_the_projects_tokenizers(folder: str) -> None:
    assert _tokenizer_count(ROOT / "fixtures" / "model" / "build" / folder, probe_text().text) >= CI_TOKENS


@pytest.mark.parametrize(("folder", "fingerprint"), [
    ("tiny-chat", "9553f01e178ddc639356aaaeee5f704da771c6dc0e74f9c552232b96a9c3e01d"),  # ab-131k's arms
    ("smollm2-135m-instruct", "6cdc8ef9fb5b36f5a3cd04d7e0140ba254e687246a77dae1cdd9d9144eae8bb0"),  # cpu-smollm2's
])
def test_the_tokenizer_fingerprint_of_earlier_records_is_kept(folder: str, fingerprint: str) -> None:
    """Records made before the text changed fingerprinted the tokenizer on the start of the help topics;
    the frozen sample gives the same fingerprint, so a comparison says the probe changed, not the tokenizer."""
    tokenizers = pytest.importorskip("tokenizers")
    path = ROOT / "fixtures" / "model" / "build" / folder / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"{folder} is not built here")
    ids = tokenizers.Tokenizer.from_file(str(path)).encode(probe.tokenizer_sample(), add_special_tokens=False).ids
    assert hashlib.sha256(json.dumps(ids[:1024], separators=(",", ":")).encode()).hexdigest() == fingerprint


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the sample was frozen from Python 3.11's help topics")
def test_the_tokenizer_sample_is_the_start_of_the_help_topics_earlier_records_used() -> None:
    topics = pydoc_data.topics.topics
    earlier = "\n\n".join(topics[key] for key in sorted(topics))
    sample = probe.tokenizer_sample()
    assert len(sample) == 16_384 and earlier.startswith(sample)
    old_fingerprint = hashlib.sha256(json.dumps(_word_tokens(earlier[:20_000])[:1024], separators=(",", ":")).encode())
    server = FakeServer()
    assert _probe(server)["tokenizer_sha256"] == old_fingerprint.hexdigest()


def _old_sidecar(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((OLD_EXAMPLE / f"{name}.probe.json").read_text())
    return data


def test_old_records_still_compare_and_a_new_one_against_an_old_one_is_not_comparable() -> None:
    old, replay = _old_sidecar("A-smollm2-cpu-20261204T184444Z"), _old_sidecar("A2-smollm2-cpu-20261204T184444Z")
    assert old["probe_sha256"] == replay["probe_sha256"]
    section = equivalence_section({}, {}, None, {"control": old, "candidate": replay})
    assert section["verdict"] != "not measurable" and section["probe_sha256"] == old["probe_sha256"]
    fresh = _probe()
    # The same server answering today: the same tokenizer fingerprint (the frozen sample), a new text.
    new = {**old, **{key: fresh[key] for key in ("text", "requests", "chat_template", "probe_sha256", "source")}}
    section = equivalence_section({}, {}, None, {"control": old, "candidate": new})
    assert section["verdict"] == "not measurable"
    assert "answered different probes" in section["reasons"][0], section["reasons"]
    assert section["arms"]["candidate"]["probe_sha256"] == fresh["probe_sha256"] != old["probe_sha256"]


def test_the_wheel_ships_the_text_its_note_and_the_tokenizer_sample() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["pytest_vllmqual.equivalence"]
    assert "pytest_vllmqual.equivalence" in config["packages"]
    folder = ROOT / "pytest_vllmqual" / "equivalence"
    for name in ("data/probe_text.txt.gz", "data/tokenizer_sample.txt", "data/README.md"):
        assert (folder / name).is_file() and any(fnmatch(name, pattern) for pattern in patterns), name
    assert (folder / "data" / "probe_text.txt.gz").stat().st_size < 500_000


def test_the_text_s_note_names_its_source_licence_version_and_sha256() -> None:
    note = (ROOT / "pytest_vllmqual" / "equivalence" / "data" / "README.md").read_text()
    for needed in (probe.TEXT_VERSION, probe.TEXT_SHA256, probe.SAMPLE_SHA256, "public domain",
                   "r-cran-janeaustenr", "Python Software Foundation", "text_file", "text_sha256"):
        assert needed in note, needed


def test_the_recipe_schema_takes_a_text_file_only_with_its_sha256() -> None:
    import jsonschema
    import yaml

    schema = yaml.safe_load((ROOT / "pytest_vllmqual" / "schemas" / "recipe.schema.yaml").read_text())
    block = schema["properties"]["gates"]["properties"]["equivalence"]
    validator = jsonschema.Draft202012Validator(block)
    assert validator.is_valid({"text_file": "texts/own.txt", "text_sha256": probe.TEXT_SHA256})
    assert validator.is_valid({"text_file": "texts/own.txt.gz", "text_sha256": f"sha256:{probe.TEXT_SHA256}"})
    assert not validator.is_valid({"text_file": "texts/own.txt"})
    assert not validator.is_valid({"text_file": "texts/own.txt", "text_sha256": "not-a-digest"})
