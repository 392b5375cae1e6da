"""Exact-length chat prompts: the *templated* prompt is exactly the target number of tokens.

Why this exists: peers size the user text, not the prompt the server counts, so they
overshoot by the chat template (and by far more with tools or a reasoning system prompt),
and decode/re-encode drift adds more. A capacity rung is only
evidence if ``usage.prompt_tokens`` equals what was asked for, so the length is measured
exactly as the server measures it: chat template applied with ``add_generation_prompt``,
tools and reasoning effort included.

How (few counter calls, bulk string work only):

1. Count the chat overhead: the messages with the nonce header and the question but no
   filler. Targets below it are impossible and raise :class:`CalibrationError`.
2. Generate deterministic prose (:mod:`pytest_vllmqual.client.corpus`) in bulk, tokenize it once,
   cut it at a token boundary a few tokens short of the target, back off to a word boundary.
3. Fill the remaining gap with *pad words* (short words that are one token after a space,
   discovered once per counter) and re-count the whole chat. Each pad word is one token, so
   the first re-count is usually exact; a bounded loop fixes the rest.

Every prompt starts its user text with ``[probe NONCE]`` so that no two rungs share a prefix
beyond the template, system prompt and tools (the prefix cache cannot serve the filler).

This module imports nothing from pytest; the length is measured through the
:class:`TokenCounter` protocol so the same algorithm runs against vLLM's ``/tokenize``
(``token_counters.ServerTokenCounter``) and against a local tokenizer
(``token_counters.HFTokenCounter``).
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from pytest_vllmqual.errors import CalibrationError

from .corpus import PAD_WORD_CANDIDATES, filler_text

__all__ = ["DEFAULT_QUESTION", "ChatShape", "ExactPrompt", "ExactPromptBuilder", "Message", "TextCut", "TokenCounter",
           "build_exact_prompt", "new_nonce"]

ODD_FIXERS = (".", ",", ";", "!", "?", ":", " -", "7")
"""Suffixes tried, in order, to add one token after a word when pad words cost two."""

Message = dict[str, Any]

DEFAULT_QUESTION = "In one sentence, what is the text above about?"


@dataclass
class ChatShape:
    """What surrounds the filler in a recipe's requests: it all counts toward the prompt.

    ``tools`` are OpenAI function-tool dicts. ``reasoning_effort`` and
    ``chat_template_kwargs`` reach the chat template the way vLLM passes them.
    """

    question: str = DEFAULT_QUESTION
    system_prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def messages(self, user_content: str) -> list[Message]:
        """The chat messages for one request whose user turn is ``user_content``."""
        messages: list[Message] = []
        if self.system_prompt is not None:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": user_content})
        return messages

    def template_kwargs(self) -> dict[str, Any]:
        """Template variables exactly as vLLM (0.32) builds them for a chat completion.

        ``ChatCompletionRequest.build_chat_params`` overrides ``reasoning_effort`` from the
        top-level field and adds ``enable_thinking = effort != "none"`` unless the caller set
        it. ``/tokenize`` has no ``reasoning_effort`` field, so the counter must send the
        same variables explicitly or it would measure a different prompt.
        """
        kwargs = dict(self.chat_template_kwargs)
        if self.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.reasoning_effort
            kwargs.setdefault("enable_thinking", self.reasoning_effort != "none")
        return kwargs

    def request_fields(self) -> dict[str, Any]:
        """Fields to merge into a ``/v1/chat/completions`` body so it renders what was counted.

        The template kwargs are sent explicitly as well as ``reasoning_effort``: then the
        render does not depend on how a given vLLM version maps the effort to kwargs.
        """
        fields: dict[str, Any] = {}
        if self.tools:
            fields["tools"] = self.tools
        if self.reasoning_effort is not None:
            fields["reasoning_effort"] = self.reasoning_effort
        kwargs = self.template_kwargs()
        if kwargs:
            fields["chat_template_kwargs"] = kwargs
        return fields


class TextCut(NamedTuple):
    """A prefix of a text ending at a token boundary, holding ``prefix_tokens`` of its tokens.

    ``total_tokens`` is the text's token count, or, when counting stopped early, a lower
    bound that is at least the requested number (enough to know the text was long enough).
    """

    prefix: str
    prefix_tokens: int
    total_tokens: int


@runtime_checkable
class TokenCounter(Protocol):
    """Measures lengths the way the serving stack does; the calibration needs nothing else."""

    @property
    def max_model_len(self) -> int | None:
        """The model's context limit, or None while it is unknown."""
        ...

    def count_chat(self, messages: Sequence[Message], shape: ChatShape) -> int:
        """Tokens of the templated prompt (add_generation_prompt, tools, template kwargs)."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of plain text, no special tokens added."""
        ...

    def cut_text(self, text: str, max_tokens: int) -> TextCut:
        """Tokenize ``text`` once and return its prefix up to a token boundary."""
        ...


class _CallCounter:
    """Wraps a counter to count its calls (reported as ``ExactPrompt.iterations``)."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self.calls = 0

    @property
    def max_model_len(self) -> int | None:
        return self.inner.max_model_len

    def count_chat(self, messages: Sequence[Message], shape: ChatShape) -> int:
        self.calls += 1
        return self.inner.count_chat(messages, shape)

    def count_text(self, text: str) -> int:
        self.calls += 1
        return self.inner.count_text(text)

    def cut_text(self, text: str, max_tokens: int) -> TextCut:
        self.calls += 1
        return self.inner.cut_text(text, max_tokens)


@dataclass
class ExactPrompt:
    """A calibrated prompt and the evidence of its calibration."""

    messages: list[Message]
    target: int
    measured_tokens: int
    nonce: str
    seed: int
    iterations: int
    build_seconds: float
    build_wall_seconds: float = 0.0
    overhead_tokens: int = 0
    shape: ChatShape = field(default_factory=ChatShape)

    @property
    def calibration_error(self) -> int:
        """Measured minus target by the counter (0 unless built over the limit on purpose)."""
        return self.measured_tokens - self.target

    def request_fields(self) -> dict[str, Any]:
        """``messages`` plus the shape's fields: merge into a chat-completions body."""
        return {"messages": self.messages, **self.shape.request_fields()}


def new_nonce(rung: int | str | None = None) -> str:
    """A fresh random nonce, optionally labelled with the rung (``7f3a9c0b12de rung 3``)."""
    token = secrets.token_hex(6)
    return token if rung is None else f"{token} rung {rung}"


def _last_whitespace(text: str) -> int:
    return max(text.rfind(" "), text.rfind("\n"))


def _drop_last_word(text: str) -> str:
    stripped = text.rstrip()
    return stripped[: max(_last_whitespace(stripped), 0)].rstrip()


def _to_word_boundary(text: str, prefix: str) -> str:
    """Never end the filler mid-word: a half word looks unnatural and retokenizes oddly."""
    n = len(prefix)
    if n < len(text) and prefix[-1:].isalnum() and text[n].isalnum() and text.startswith(prefix):
        prefix = prefix[: max(_last_whitespace(prefix), 0)]
    return prefix.rstrip()


def _user_frame(shape: ChatShape, nonce: str) -> tuple[str, str]:
    """What goes before and after the filler in the user turn: nonce header, question."""
    return f"[probe {nonce}]", (f"\n\n{shape.question}" if shape.question else "")


class ExactPromptBuilder:
    """Builds exact-length prompts against one counter, caching what it learns about it.

    The first build discovers the pad words and the characters-per-token ratio (a few small
    counter calls); later builds with the same builder reuse them.
    """

    SAMPLE_CHARS = 16_384
    MIN_PAD_WORDS = 4

    def __init__(
        self,
        counter: TokenCounter,
        *,
        seed: int = 0,
        max_corrections: int = 12,
        reserve_pad_tokens: int = 6,
    ) -> None:
        self.counter = counter
        self.seed = seed
        self.max_corrections = max_corrections
        self.reserve_pad_tokens = reserve_pad_tokens
        self._pad_words: list[str] | None = None
        self._pad_cost = 1
        self._fixer: str | None = None
        self._fixer_tail: str | None = None
        self._chars_per_token: float | None = None

    def _discover_pad_words(self, counter: TokenCounter) -> list[str]:
        """Words that cost the same number of tokens (1, else 2) each after a space.

        One call settles a tokenizer trained on English (n words cost n tokens only if each
        costs one). Small-vocabulary tokenizers then get one tiny call per candidate, most
        common words first, until ``MIN_PAD_WORDS`` are found. A tokenizer that never glues a
        space onto a word (the fixture model's) gets two-token pad words, and an odd residue
        is then closed by one ``_odd_fixer`` appended to the last word.
        """
        if self._pad_words is not None:
            return self._pad_words
        candidates = list(PAD_WORD_CANDIDATES)
        found: list[str] = []
        if counter.count_text("".join(" " + word for word in candidates)) == len(candidates):
            found = candidates
            self._pad_cost = 1
        else:
            for cost in (1, 2):
                for word in candidates:
                    if counter.count_text(" " + word) == cost and (cost == 1 or counter.count_text(word) == 1):
                        found.append(word)
                        if len(found) >= self.MIN_PAD_WORDS:
                            break
                if found:
                    self._pad_cost = cost
                    break
        if not found:
            raise CalibrationError(
                f"none of the {len(candidates)} pad-word candidates costs one or two tokens after a "
                "space in this tokenizer; exact calibration needs at least one"
            )
        words = list(found)
        random.Random(f"vllmqual-pads-{self.seed}").shuffle(words)
        self._pad_words = words
        return words

    def _odd_fixer(self, counter: TokenCounter, tail: str) -> str:
        """A short suffix that adds exactly one token after a word, before ``tail`` (measured in
        that context: a suffix may merge with the tail's first characters)."""
        if self._fixer is None or self._fixer_tail != tail:
            self._fixer, self._fixer_tail = None, tail
            base = "the story of the " + (self._pad_words or ["the"])[0]
            base_count = counter.count_text(base + tail)
            for fixer in ODD_FIXERS:
                if counter.count_text(base + fixer + tail) == base_count + 1:
                    self._fixer = fixer
                    break
            else:
                raise CalibrationError(
                    f"the pad words cost {self._pad_cost} tokens each and none of {ODD_FIXERS} adds "
                    "exactly one token after a word, so odd targets cannot be reached exactly"
                )
        return self._fixer

    def _estimate_chars_per_token(self, counter: TokenCounter) -> float:
        if self._chars_per_token is None:
            sample = filler_text(self.seed, self.SAMPLE_CHARS)[: self.SAMPLE_CHARS]
            self._chars_per_token = len(sample) / max(counter.count_text(sample), 1)
        return self._chars_per_token

    def _filler_prefix(self, counter: TokenCounter, budget: int) -> tuple[str, int]:
        """Filler text of at most ``budget`` tokens ending at a word boundary, and its tokens.

        The token count is exact for the cut (the counter cut at a token boundary) minus the
        tokens of the partial word dropped after it, counted with one tiny call; so the
        first full chat count is usually already on target.
        """
        if budget <= 0:
            return "", 0
        ratio = self._estimate_chars_per_token(counter)
        margin = 1.06
        for _ in range(4):
            text = filler_text(self.seed, int(budget * ratio * margin) + 512)
            cut = counter.cut_text(text, budget)
            if cut.total_tokens >= budget:
                prefix = _to_word_boundary(text, cut.prefix)
                dropped = cut.prefix[len(prefix) :] if cut.prefix.startswith(prefix) else ""
                dropped_tokens = counter.count_text(dropped) if dropped.strip() else 0
                return prefix, max(cut.prefix_tokens - dropped_tokens, 0)
            ratio = len(text) / max(cut.total_tokens, 1)
            margin = 1.15
        raise CalibrationError(f"could not generate {budget} tokens of filler text in 4 attempts")

    def chat_overhead(self, shape: ChatShape, nonce: str) -> int:
        """Tokens of the prompt with no filler: the smallest target reachable for this shape."""
        head, tail = _user_frame(shape, nonce)
        return self.counter.count_chat(shape.messages(head + tail), shape)

    def build(
        self,
        target: int,
        shape: ChatShape | None = None,
        *,
        nonce: str | None = None,
        allow_over_max_model_len: bool = False,
    ) -> ExactPrompt:
        """Messages whose templated length is exactly ``target`` tokens by the counter.

        ``allow_over_max_model_len`` lets the ladder build its deliberate max_model_len + 1
        rung; otherwise a target above the known limit raises.
        """
        cpu_start = time.process_time()
        wall_start = time.perf_counter()
        shape = shape if shape is not None else ChatShape()
        nonce = nonce if nonce is not None else new_nonce()
        counter = _CallCounter(self.counter)
        head, tail = _user_frame(shape, nonce)

        def compose(body: str) -> list[Message]:
            return shape.messages(head + body + tail)

        messages = compose("")
        overhead = measured = counter.count_chat(messages, shape)
        _check_reachable(target, overhead, counter.max_model_len, allow_over_max_model_len)
        if target != overhead:
            messages, measured = self._pad_to_target(counter, shape, compose, tail, target, overhead)
        return ExactPrompt(
            messages=messages,
            target=target,
            measured_tokens=measured,
            nonce=nonce,
            seed=self.seed,
            iterations=counter.calls,
            build_seconds=time.process_time() - cpu_start,
            build_wall_seconds=time.perf_counter() - wall_start,
            overhead_tokens=overhead,
            shape=shape,
        )

    def _pad_to_target(self, counter: _CallCounter, shape: ChatShape, compose: Callable[[str], list[Message]],
                       tail: str, target: int, overhead: int) -> tuple[list[Message], int]:
        """Filler, then pad words corrected by each chat-form count until the count is ``target``."""
        pads = self._discover_pad_words(counter)
        need = target - overhead
        prefix, prefix_tokens = self._filler_prefix(counter, need - self.reserve_pad_tokens)
        cost = self._pad_cost
        n_pads = (need - prefix_tokens) // cost
        use_fixer = cost > 1 and (need - prefix_tokens) % cost == 1
        pad_offset = 0
        seen: set[tuple[int, int, int, bool]] = set()
        measured = overhead
        for _ in range(self.max_corrections):
            state = (len(prefix), n_pads, pad_offset, use_fixer)
            seen.add(state)
            padding = "".join(" " + pads[(pad_offset + i) % len(pads)] for i in range(n_pads))
            if use_fixer:
                padding += self._odd_fixer(counter, tail)
            messages = compose(prefix + padding)
            measured = counter.count_chat(messages, shape)
            if measured == target:
                return messages, measured
            residue = target - measured
            if cost > 1 and residue % cost:
                use_fixer = not use_fixer
                residue += -1 if use_fixer else 1
            n_pads += residue // cost
            # Keep at least one pad word after the filler so the filler/tail boundary stays
            # the same (adding a pad word then always adds exactly its own token).
            while n_pads < 1 and prefix:
                prefix = _drop_last_word(prefix)
                n_pads += 1
            n_pads = max(n_pads, 0)
            if (len(prefix), n_pads, pad_offset, use_fixer) in seen:
                # Oscillating at a boundary that merges tokens: change the boundary.
                if prefix:
                    prefix = _drop_last_word(prefix)
                    n_pads += 1
                pad_offset += 1
        raise CalibrationError(
            f"no convergence after {self.max_corrections} chat-form counts "
            f"({counter.calls} counter calls): the last count was {measured} tokens for target "
            f"{target} (off by {measured - target})."
        )


def _check_reachable(target: int, overhead: int, limit: int | None, allow_over_max_model_len: bool) -> None:
    """A target above the model's limit (unless asked for) or below the chat overhead cannot be built."""
    if limit is not None and target > limit and not allow_over_max_model_len:
        raise CalibrationError(
            f"target {target} tokens is above the model's max_model_len {limit}; the server "
            "would reject it with HTTP 400. Pass allow_over_max_model_len=True to build an "
            "over-length prompt on purpose."
        )
    if target < overhead:
        raise CalibrationError(
            f"target {target} tokens is below the chat overhead: the chat template, system "
            f"prompt, tools, reasoning effort, nonce header and question already take "
            f"{overhead} tokens. The smallest reachable target for this chat shape is "
            f"{overhead}."
        )


def build_exact_prompt(
    counter: TokenCounter,
    target: int,
    shape: ChatShape | None = None,
    *,
    seed: int = 0,
    nonce: str | None = None,
    allow_over_max_model_len: bool = False,
) -> ExactPrompt:
    """One-shot form of :meth:`ExactPromptBuilder.build` (reuse a builder for a ladder)."""
    builder = ExactPromptBuilder(counter, seed=seed)
    return builder.build(
        target, shape, nonce=nonce, allow_over_max_model_len=allow_over_max_model_len
    )
