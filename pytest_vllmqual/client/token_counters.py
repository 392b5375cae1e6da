"""Token counters: how long a chat or a text is, in the tokens the server will count.

``prompts.ExactPromptBuilder`` calibrates through the ``prompts.TokenCounter`` protocol; these
are its two implementations: the server's own tokenizer and chat template via ``/tokenize``
(what a capacity rung uses), and a local transformers tokenizer (tests and benchmarks, no
server needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import httpx

from pytest_vllmqual.errors import CalibrationError

from .prompts import ChatShape, Message, TextCut

__all__ = ["HFTokenCounter", "ServerTokenCounter"]


class ServerTokenCounter:
    """Counts with the server's own tokenizer and chat template via ``/tokenize``.

    ``client`` must have ``base_url`` set to the server root (``http://host:port``). Each
    method is one or two HTTP round trips; ``requests_made`` counts them.
    """

    def __init__(self, client: httpx.Client, model: str, *, timeout_s: float = 300.0) -> None:
        self.client = client
        self.model = model
        self.timeout_s = timeout_s
        self.requests_made = 0
        self._max_model_len: int | None = None

    @property
    def max_model_len(self) -> int | None:
        """Learned from the first ``/tokenize`` answer (it reports ``max_model_len``)."""
        return self._max_model_len

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.requests_made += 1
        try:
            response = self.client.post(path, json=body, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise CalibrationError(
                f"POST {path} to the server failed: {exc!r}. Is the server up and is the client's "
                "base_url the server root?"
            ) from exc
        if response.status_code != 200:
            raise CalibrationError(
                f"POST {path} returned HTTP {response.status_code}: {response.text[:500]}"
            )
        data: dict[str, Any] = response.json()
        return data

    def _tokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        data = self._post("/tokenize", body)
        if isinstance(data.get("max_model_len"), int):
            self._max_model_len = data["max_model_len"]
        return data

    def count_chat(self, messages: Sequence[Message], shape: ChatShape) -> int:
        """Chat form of ``/tokenize``: what ``usage.prompt_tokens`` will say for these messages."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "add_generation_prompt": True,
        }
        if shape.tools:
            body["tools"] = shape.tools
        kwargs = shape.template_kwargs()
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        return int(self._tokenize(body)["count"])

    def count_text(self, text: str) -> int:
        """Prompt form of ``/tokenize`` without special tokens."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return int(self._tokenize(body)["count"])

    def cut_text(self, text: str, max_tokens: int) -> TextCut:
        """Tokenize once, then ``/detokenize`` the first ``max_tokens`` ids (no offsets API)."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        tokens: list[int] = self._tokenize(body)["tokens"]
        total = len(tokens)
        if total <= max_tokens:
            return TextCut(text, total, total)
        if max_tokens <= 0:
            return TextCut("", 0, total)
        decoded = self._post("/detokenize", {"model": self.model, "tokens": tokens[:max_tokens]})
        prefix = str(decoded["prompt"])
        # Byte-level tokenizers decode to the exact original prefix; normalizing ones
        # (lowercasing WordPiece) do not, and then the decoded text itself is the filler.
        if not text.startswith(prefix):
            prefix = prefix.rstrip()
        return TextCut(prefix, max_tokens, total)


class _ChatTokenizer(Protocol):
    """The part of a transformers fast tokenizer that :class:`HFTokenCounter` uses."""

    @property
    def backend_tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` doing the work."""
        ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        """Render messages with the tokenizer's chat template."""
        ...


class HFTokenCounter:
    """Counts with a local transformers fast tokenizer, rendering as vLLM's HF renderer does.

    vLLM renders the template to text and then encodes it with ``add_special_tokens=False``;
    this does the same, on the Rust backend directly (no Python list of ids is built).
    """

    PIECE_CHARS = 32_768
    PIECES_PER_BATCH = 8

    def __init__(self, tokenizer: _ChatTokenizer, *, max_model_len: int | None = None) -> None:
        self.tokenizer = tokenizer
        self._backend = tokenizer.backend_tokenizer
        if max_model_len is None:
            limit = getattr(tokenizer, "model_max_length", None)
            max_model_len = limit if isinstance(limit, int) and 0 < limit < 10**8 else None
        self._max_model_len = max_model_len

    @classmethod
    def from_pretrained(cls, path: str, *, max_model_len: int | None = None) -> HFTokenCounter:
        """Load a tokenizer directory (offline) and wrap it."""
        from transformers import AutoTokenizer  # heavy import, only when asked for

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        return cls(tokenizer, max_model_len=max_model_len)

    @property
    def max_model_len(self) -> int | None:
        """The limit given at construction, else the tokenizer's model_max_length if sane."""
        return self._max_model_len

    def render_chat(self, messages: Sequence[Message], shape: ChatShape) -> str:
        """The templated prompt text, as the server would render it."""
        rendered = self.tokenizer.apply_chat_template(
            list(messages),
            tools=shape.tools,
            add_generation_prompt=True,
            tokenize=False,
            **shape.template_kwargs(),
        )
        return str(rendered)

    def _count(self, text: str) -> int:
        # encode_batch_fast skips offset tracking: about 40 % less CPU than encode().
        fast = getattr(self._backend, "encode_batch_fast", None)
        if fast is not None:
            return len(fast([text], add_special_tokens=False)[0])
        return len(self._backend.encode(text, add_special_tokens=False))

    def count_chat(self, messages: Sequence[Message], shape: ChatShape) -> int:
        """Tokens of the rendered chat prompt."""
        return self._count(self.render_chat(messages, shape))

    def count_text(self, text: str) -> int:
        """Tokens of plain text, no special tokens added."""
        return self._count(text)

    def cut_text(self, text: str, max_tokens: int) -> TextCut:
        """Count piece by piece (split before a space) and stop once past ``max_tokens``.

        Only the piece holding the cut is encoded with offsets. Pieces split before a space
        tokenize as they do in context for whitespace-splitting pre-tokenizers; the builder
        re-counts the whole chat anyway, so this only has to be a good first guess.
        """
        if max_tokens <= 0:
            return TextCut("", 0, self._count(text))
        counted = 0
        start = 0
        while start < len(text):
            bounds: list[tuple[int, int]] = []
            while start < len(text) and len(bounds) < self.PIECES_PER_BATCH:
                end = text.find(" ", start + self.PIECE_CHARS)
                end = len(text) if end < 0 else end
                bounds.append((start, end))
                start = end
            for (piece_start, piece_end), count in zip(bounds, self._count_many(text, bounds), strict=True):
                if counted + count >= max_tokens:
                    piece = text[piece_start:piece_end]
                    encoding = self._backend.encode(piece, add_special_tokens=False)
                    _, end_in_piece = encoding.token_to_chars(max_tokens - counted - 1)
                    return TextCut(text[: piece_start + end_in_piece], max_tokens, counted + count)
                counted += count
        return TextCut(text, counted, counted)

    def _count_many(self, text: str, bounds: Sequence[tuple[int, int]]) -> list[int]:
        pieces = [text[a:b] for a, b in bounds]
        fast = getattr(self._backend, "encode_batch_fast", None)
        if fast is not None:
            return [len(encoding) for encoding in fast(pieces, add_special_tokens=False)]
        return [self._count(piece) for piece in pieces]

