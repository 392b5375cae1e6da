"""Exact-length prompt calibration on several offline tokenizers and chat shapes.

The tokenizers are trained here, in seconds, with the ``tokenizers`` library (byte-level
BPE, WordPiece, Unigram/SentencePiece-style), so the tests need no network and no model
download, and they cover the three families whose boundary behaviour differs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from pytest_vllmqual.client.corpus import ADJECTIVES, NOUNS, PAD_WORD_CANDIDATES, VERBS, filler_text
from pytest_vllmqual.client.prompts import (
    ChatShape,
    ExactPromptBuilder,
    Message,
    TextCut,
    TokenCounter,
    build_exact_prompt,
)
from pytest_vllmqual.client.token_counters import HFTokenCounter, ServerTokenCounter
from pytest_vllmqual.errors import CalibrationError

# A ChatML template (Qwen-like): tools in the system turn, an extra system turn whose text
# depends on reasoning_effort, and a closed think block when enable_thinking is false.
CHATML_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- if reasoning_effort is defined and reasoning_effort %}<|im_start|>system
Reasoning effort: {{ reasoning_effort }}.{% if reasoning_effort == 'high' %} Think step by step and check every assumption before you answer.{% endif %}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% endif %}{% endif %}"""

# A Phi-like template with different markers, for the WordPiece tokenizer.
PHI_TEMPLATE = """{%- if tools %}<|tools|>{% for tool in tools %}{{ tool.function.name }}: {{ tool.function.description }} {{ tool.function.parameters | tojson }}
{% endfor %}<|end|>{% endif %}
{%- if reasoning_effort is defined and reasoning_effort %}<|system|>effort {{ reasoning_effort }}{% if reasoning_effort == 'high' %} deliberate carefully{% endif %}<|end|>{% endif %}
{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""

CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
PHI_SPECIALS = ["[UNK]", "<|system|>", "<|user|>", "<|assistant|>", "<|tools|>", "<|end|>"]

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the manual and return the best passages.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}

SHAPES: dict[str, ChatShape] = {
    "plain": ChatShape(),
    "system": ChatShape(system_prompt="You are a careful assistant. Answer briefly."),
    "tools": ChatShape(system_prompt="Use tools when they help.", tools=[WEATHER_TOOL, SEARCH_TOOL]),
    "reasoning_high": ChatShape(reasoning_effort="high"),
    "everything": ChatShape(
        question="Which tool would you call first, and why?",
        system_prompt="You are terse.",
        tools=[WEATHER_TOOL],
        reasoning_effort="low",
        chat_template_kwargs={"custom_flag": True},
    ),
}


def _training_texts() -> Iterator[str]:
    text = filler_text(12345, 120_000)
    for start in range(0, len(text), 2_000):
        yield text[start : start + 2_000]
    extras = [
        json.dumps(WEATHER_TOOL),
        json.dumps(SEARCH_TOOL),
        "[probe 7f3a9c0b12de rung 3] 0123456789 abcdef",
        "Reasoning effort: high. Think step by step and check every assumption before you answer.",
        "# Tools\n<tools>\n</tools> effort deliberate carefully: assistant user system",
        "In one sentence, what is the text above about? Which tool would you call first, and why?",
        "You are a careful assistant. Answer briefly. Use tools when they help. You are terse.",
        " ".join(PAD_WORD_CANDIDATES),
    ]
    for _ in range(20):
        yield from extras


def _byte_level_bpe() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=CHATML_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_texts(), trainer)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, chat_template=CHATML_TEMPLATE, eos_token="<|im_end|>"
    )


def _wordpiece() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=900, special_tokens=PHI_SPECIALS, show_progress=False
    )
    tokenizer.train_from_iterator(_training_texts(), trainer)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, chat_template=PHI_TEMPLATE, unk_token="[UNK]"
    )


def _unigram() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=900,
        special_tokens=["<unk>", *CHATML_SPECIALS],
        unk_token="<unk>",
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_texts(), trainer)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        chat_template=CHATML_TEMPLATE,
        unk_token="<unk>",
        eos_token="<|im_end|>",
    )


BUILDERS = {"byte_level_bpe": _byte_level_bpe, "wordpiece": _wordpiece, "unigram": _unigram}


@pytest.fixture(scope="module")
def tokenizers_by_kind() -> dict[str, PreTrainedTokenizerFast]:
    return {kind: build() for kind, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def builders(tokenizers_by_kind: dict[str, PreTrainedTokenizerFast]) -> dict[str, ExactPromptBuilder]:
    """One builder per tokenizer, reused like the ladder reuses one (pad words cached)."""
    return {
        kind: ExactPromptBuilder(HFTokenCounter(tokenizer), seed=7)
        for kind, tokenizer in tokenizers_by_kind.items()
    }


def independent_count(tokenizer: PreTrainedTokenizerFast, messages: list[Message], shape: ChatShape) -> int:
    """The templated length through transformers' own tokenize path, not the counter's."""
    ids = tokenizer.apply_chat_template(
        messages,
        tools=list(shape.tools) if shape.tools else None,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        **shape.template_kwargs(),
    )
    return len(ids)


def user_content(messages: list[Message]) -> str:
    content = messages[-1]["content"]
    assert messages[-1]["role"] == "user" and isinstance(content, str)
    return content


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("shape_name", sorted(SHAPES))
def test_templated_length_equals_target_exactly(
    kind: str,
    shape_name: str,
    builders: dict[str, ExactPromptBuilder],
    tokenizers_by_kind: dict[str, PreTrainedTokenizerFast],
) -> None:
    shape = SHAPES[shape_name]
    builder = builders[kind]
    overhead = builder.chat_overhead(shape, "n1")
    for target in (overhead, overhead + 1, overhead + 2, 257, 1001, 4097):
        if target < overhead:
            continue
        prompt = builder.build(target, shape, nonce="n1")
        assert prompt.measured_tokens == target
        assert independent_count(tokenizers_by_kind[kind], prompt.messages, shape) == target
        assert prompt.calibration_error == 0
        assert prompt.overhead_tokens == overhead
        assert prompt.messages[0]["role"] == ("system" if shape.system_prompt else "user")
        assert user_content(prompt.messages).endswith(shape.question)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("target", [32767, 20_001])
def test_odd_large_targets_converge_in_few_counter_calls(
    kind: str,
    target: int,
    builders: dict[str, ExactPromptBuilder],
    tokenizers_by_kind: dict[str, PreTrainedTokenizerFast],
) -> None:
    shape = SHAPES["everything"]
    builder = builders[kind]
    builder.build(500, shape, nonce="warm")  # pad words and ratio are cached after this
    prompt = builder.build(target, shape, nonce="odd")
    assert independent_count(tokenizers_by_kind[kind], prompt.messages, shape) == target
    # overhead + cut (+ one tiny count of a dropped partial word) + 1..3 chat counts
    assert prompt.iterations <= 6, prompt.iterations
    assert prompt.build_seconds >= 0.0 and prompt.build_wall_seconds >= 0.0


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_target_below_overhead_is_a_clear_error(kind: str, builders: dict[str, ExactPromptBuilder]) -> None:
    shape = SHAPES["tools"]
    overhead = builders[kind].chat_overhead(shape, "low")
    with pytest.raises(CalibrationError) as caught:
        builders[kind].build(overhead - 1, shape, nonce="low")
    message = str(caught.value)
    assert "below the chat overhead" in message
    assert f"{overhead} tokens" in message
    assert f"smallest reachable target for this chat shape is {overhead}" in message


def test_target_equal_to_overhead_needs_one_count(builders: dict[str, ExactPromptBuilder]) -> None:
    shape = SHAPES["system"]
    builder = builders["byte_level_bpe"]
    overhead = builder.chat_overhead(shape, "eq")
    prompt = builder.build(overhead, shape, nonce="eq")
    assert prompt.measured_tokens == overhead and prompt.iterations == 1
    assert user_content(prompt.messages) == f"[probe eq]\n\n{shape.question}"


def test_target_above_max_model_len_raises_unless_allowed(
    tokenizers_by_kind: dict[str, PreTrainedTokenizerFast],
) -> None:
    counter = HFTokenCounter(tokenizers_by_kind["byte_level_bpe"], max_model_len=2048)
    with pytest.raises(CalibrationError, match=r"above the model's max_model_len 2048"):
        build_exact_prompt(counter, 2049, nonce="over")
    rejected_rung = build_exact_prompt(counter, 2049, nonce="over", allow_over_max_model_len=True)
    assert rejected_rung.measured_tokens == 2049


def test_reasoning_effort_changes_the_prompt_and_stays_exact(
    builders: dict[str, ExactPromptBuilder],
) -> None:
    builder = builders["byte_level_bpe"]
    overheads = {
        effort: builder.chat_overhead(ChatShape(reasoning_effort=effort), "fx")
        for effort in (None, "none", "low", "high")
    }
    # The template uses the effort, so each effort is a different prompt (a fingerprint).
    assert len(set(overheads.values())) == 4, overheads
    assert overheads["high"] > overheads["low"] > overheads[None]
    for effort in ("none", "low", "high"):
        assert builder.build(3001, ChatShape(reasoning_effort=effort), nonce="fx").measured_tokens == 3001


def test_template_kwargs_mirror_vllm_chat_completion_request() -> None:
    assert ChatShape().template_kwargs() == {}
    assert ChatShape(reasoning_effort="none").template_kwargs() == {
        "reasoning_effort": "none",
        "enable_thinking": False,
    }
    explicit = ChatShape(
        reasoning_effort="high", chat_template_kwargs={"enable_thinking": False, "reasoning_effort": "low"}
    )
    # The top-level effort wins over the kwarg; an explicit enable_thinking is kept.
    assert explicit.template_kwargs() == {"reasoning_effort": "high", "enable_thinking": False}
    fields = SHAPES["everything"].request_fields()
    assert fields == {
        "tools": [WEATHER_TOOL],
        "reasoning_effort": "low",
        "chat_template_kwargs": {"custom_flag": True, "reasoning_effort": "low", "enable_thinking": True},
    }


def test_same_seed_gives_same_messages_and_other_seed_does_not(
    tokenizers_by_kind: dict[str, PreTrainedTokenizerFast],
) -> None:
    tokenizer = tokenizers_by_kind["unigram"]
    shape = SHAPES["tools"]

    def build(seed: int) -> list[Message]:
        return ExactPromptBuilder(HFTokenCounter(tokenizer), seed=seed).build(5003, shape, nonce="d").messages

    first, again, other = build(3), build(3), build(4)
    assert first == again
    assert user_content(first) != user_content(other)


def test_nonce_leads_the_user_text_and_changes_the_first_tokens(
    builders: dict[str, ExactPromptBuilder], tokenizers_by_kind: dict[str, PreTrainedTokenizerFast]
) -> None:
    tokenizer = tokenizers_by_kind["byte_level_bpe"]
    builder = builders["byte_level_bpe"]
    one = builder.build(2000, nonce="a1b2c3 rung 1")
    two = builder.build(2000, nonce="9f8e7d rung 2")
    assert user_content(one.messages).startswith("[probe a1b2c3 rung 1] ")
    assert (one.nonce, two.nonce) == ("a1b2c3 rung 1", "9f8e7d rung 2")
    first_one = tokenizer.encode(user_content(one.messages), add_special_tokens=False)[:6]
    first_two = tokenizer.encode(user_content(two.messages), add_special_tokens=False)[:6]
    assert first_one != first_two
    # Without a nonce, each build draws a fresh one and records it.
    drawn = {builder.build(300).nonce for _ in range(3)}
    assert len(drawn) == 3


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_text_is_natural_prose_not_a_repeated_token(
    kind: str, builders: dict[str, ExactPromptBuilder], tokenizers_by_kind: dict[str, PreTrainedTokenizerFast]
) -> None:
    prompt = builders[kind].build(4000, nonce="prose")
    text = user_content(prompt.messages)
    ids = tokenizers_by_kind[kind].encode(text, add_special_tokens=False)
    most_common_share = Counter(ids).most_common(1)[0][1] / len(ids)
    assert len(set(ids)) > 150 and most_common_share < 0.1, (len(set(ids)), most_common_share)
    words = [word.strip(".,?").lower() for word in text.split()]
    known = set(ADJECTIVES) | set(NOUNS) | set(VERBS)
    assert sum(word in known for word in words) / len(words) > 0.4
    assert text.count(". ") > 50 and "\n\n" in text


class ParityCounter:
    """A counter on which odd targets are unreachable: every word costs two tokens."""

    max_model_len: int | None = None

    def count_chat(self, messages: Sequence[Message], shape: ChatShape) -> int:
        return 10 + self.count_text(" ".join(str(message["content"]) for message in messages))

    def count_text(self, text: str) -> int:
        return 2 * len(text.split())

    def cut_text(self, text: str, max_tokens: int) -> TextCut:
        words = text.split(" ")
        kept = " ".join(words[: max_tokens // 2 + 1])
        return TextCut(kept, self.count_text(kept), self.count_text(text))


def test_tokenizer_without_single_token_words_is_a_clear_error() -> None:
    counter = ParityCounter()
    assert isinstance(counter, TokenCounter)
    with pytest.raises(CalibrationError, match="pad-word candidates costs one or two tokens"):
        build_exact_prompt(counter, 101, nonce="p")


class SpaceIsATokenCounter(ParityCounter):
    """Like the fixture model's tokenizer: a space is never glued onto a word, so " the" is two
    tokens; punctuation is one token of its own."""

    def count_text(self, text: str) -> int:
        return len(re.findall(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]| ", text))

    def cut_text(self, text: str, max_tokens: int) -> TextCut:
        pieces = re.findall(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]|\s", text)
        kept = "".join(pieces[:max_tokens])
        return TextCut(kept, self.count_text(kept), self.count_text(text))


@pytest.mark.parametrize("target", [101, 102, 777, 4096, 4097])
def test_two_token_pad_words_reach_odd_and_even_targets(target: int) -> None:
    prompt = build_exact_prompt(SpaceIsATokenCounter(), target, nonce="p")
    assert prompt.measured_tokens == target


def test_unreachable_target_reports_iterations_and_last_count(
    tokenizers_by_kind: dict[str, PreTrainedTokenizerFast],
) -> None:
    class OddOnly(HFTokenCounter):
        """Reports only even totals, so odd targets can never be hit."""

        def count_chat(self, messages: Sequence[Message], shape: ChatShape) -> int:
            return super().count_chat(messages, shape) // 2 * 2

    counter = OddOnly(tokenizers_by_kind["byte_level_bpe"])
    with pytest.raises(CalibrationError) as caught:
        ExactPromptBuilder(counter, max_corrections=5).build(1001, nonce="odd")
    message = str(caught.value)
    assert "no convergence after 5 chat-form counts" in message
    assert re.search(r"the last count was \d+ tokens for target 1001 \(off by -?1\)", message)


# ServerTokenCounter is tested against httpx.MockTransport that answers /tokenize and
# /detokenize with a local HF tokenizer, because unit tests run without a server. The same
# counter against a real vLLM (and usage.prompt_tokens as the final judge) is covered by the
# integration suite.
class FakeVllmTokenizeServer:
    """Simulates vLLM 0.32's /tokenize (prompt and chat forms) and /detokenize."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.fail_with: int | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append((request.url.path, body))
        if self.fail_with is not None:
            return httpx.Response(self.fail_with, json={"error": {"message": "model not found"}})
        if request.url.path == "/detokenize":
            return httpx.Response(200, json={"prompt": self.tokenizer.decode(body["tokens"])})
        assert request.url.path == "/tokenize"
        if "messages" in body:
            text = self.tokenizer.apply_chat_template(
                body["messages"],
                tools=body.get("tools"),
                add_generation_prompt=body["add_generation_prompt"],
                tokenize=False,
                **(body.get("chat_template_kwargs") or {}),
            )
            ids = self.tokenizer.encode(text, add_special_tokens=False)
        else:
            ids = self.tokenizer.encode(body["prompt"], add_special_tokens=body["add_special_tokens"])
        return httpx.Response(
            200, json={"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}
        )


@pytest.mark.parametrize("kind", ["byte_level_bpe", "wordpiece"])
def test_server_counter_calibrates_through_tokenize_and_detokenize(
    kind: str, tokenizers_by_kind: dict[str, PreTrainedTokenizerFast]
) -> None:
    tokenizer = tokenizers_by_kind[kind]
    server = FakeVllmTokenizeServer(tokenizer, max_model_len=16384)
    shape = SHAPES["everything"]
    with httpx.Client(base_url="http://vllm.test", transport=httpx.MockTransport(server)) as client:
        counter = ServerTokenCounter(client, "tiny-chat")
        builder = ExactPromptBuilder(counter, seed=1)
        builder.build(600, shape, nonce="warm")
        requests_before = counter.requests_made
        prompt = builder.build(12_345, shape, nonce="srv")
        assert counter.max_model_len == 16384
        with pytest.raises(CalibrationError, match="max_model_len 16384"):
            builder.build(16385, shape, nonce="too-long")
    assert prompt.measured_tokens == 12_345
    assert independent_count(tokenizer, prompt.messages, shape) == 12_345
    assert counter.requests_made - requests_before <= 6
    chat_bodies = [body for path, body in server.bodies if path == "/tokenize" and "messages" in body]
    assert all(body["add_generation_prompt"] is True for body in chat_bodies)
    assert all(body["tools"] == [WEATHER_TOOL] for body in chat_bodies)
    assert all(body["chat_template_kwargs"]["reasoning_effort"] == "low" for body in chat_bodies)
    prompt_bodies = [body for path, body in server.bodies if path == "/tokenize" and "prompt" in body]
    assert all(body["add_special_tokens"] is False for body in prompt_bodies)
    assert any(path == "/detokenize" for path, _ in server.bodies)


def test_server_counter_turns_http_errors_into_calibration_errors(
    tokenizers_by_kind: dict[str, PreTrainedTokenizerFast],
) -> None:
    server = FakeVllmTokenizeServer(tokenizers_by_kind["byte_level_bpe"], max_model_len=4096)
    server.fail_with = 404
    with httpx.Client(base_url="http://vllm.test", transport=httpx.MockTransport(server)) as client:
        with pytest.raises(CalibrationError, match=r"POST /tokenize returned HTTP 404: .*model not found"):
            build_exact_prompt(ServerTokenCounter(client, "missing"), 1000, nonce="e")


def test_exact_prompt_request_fields_carry_the_shape(builders: dict[str, ExactPromptBuilder]) -> None:
    shape = SHAPES["everything"]
    prompt = builders["byte_level_bpe"].build(900, shape, nonce="req")
    fields = prompt.request_fields()
    assert fields["messages"] == prompt.messages
    assert fields["tools"] == [WEATHER_TOOL] and fields["reasoning_effort"] == "low"
    assert (prompt.target, prompt.seed, prompt.nonce) == (900, 7, "req")
