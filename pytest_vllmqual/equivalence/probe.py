"""The probe each arm answers: teacher-forced chunks of a fixed text and greedy chat answers.

The text is the Python standard library's ``pydoc_data.topics`` (the interpreter's help topics,
PSF license: free to redistribute, natural English and code, long enough for every chunk). The
server tokenizes it (``/tokenize``), so each arm cuts the same token IDs only when it has the
same tokenizer; the token IDs are hashed into the probe hash, which a comparison requires to
match. Chunks at two or more context lengths go to ``/v1/completions`` as token IDs with
``max_tokens: 1``, ``temperature: 0`` and ``prompt_logprobs: K``; the second half of each chunk
is scored (the first half gives the context). K is the server's cap, found by asking for 20 and
stepping down on a refusal (vLLM does not publish ``--max-logprobs``). Greedy chat prompts go with
``logprobs``, ``top_logprobs: K`` and token IDs instead of text. Every request is sent alone:
log probabilities change with batch composition.

Memory: vLLM computes a prompt's log probabilities over the whole vocabulary for every position
at once, outside its KV budget, so a chunk is capped (``max_chunk_tokens``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.hashing import sha256_hex

__all__ = ["DEFAULT_LENGTHS", "K_STEPS", "OPEN_PROMPTS", "ProbeSettings", "chunk_plan", "parse_chat_steps",
           "parse_prompt_positions", "probe_sha256", "probe_text", "token_id"]

K_STEPS = (20, 10, 5, 1)
"""The top-K asked for, in order, until the server accepts one (none accepted: K = 0)."""

DEFAULT_LENGTHS = (512, 1024)
OPEN_PROMPTS = (
    "Explain in two sentences why the sky looks blue.",
    "Write a Python function that returns the factorial of n.",
    "List three uses of a hash table.",
)
"""Open prompts beside the gates' own: answers long enough to diverge somewhere."""

PostFn = Callable[[str, dict[str, Any], str], tuple[int | None, Mapping[str, Any] | None, str]]
"""POST (path, body, label) → (status code, parsed JSON body, error text)."""


def probe_text() -> tuple[str, str]:
    """(the probe text, where it comes from): the help topics of this Python, in key order."""
    import sys
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key] for key in sorted(topics))
    return text, f"pydoc_data.topics of Python {sys.version_info.major}.{sys.version_info.minor} (PSF license)"


@dataclass(frozen=True)
class ProbeSettings:
    """How the probe runs (the recipe's ``gates.equivalence``), after the model's limits are applied."""

    context_lengths: tuple[int, ...] = DEFAULT_LENGTHS
    chunks_per_length: int = 4
    max_chunk_tokens: int = 2048
    top_k: int = K_STEPS[0]
    greedy_max_tokens: int = 64
    #: Context lengths the recipe asked for that this model or the chunk cap does not allow.
    dropped_lengths: tuple[int, ...] = field(default=())

    @classmethod
    def from_recipe(cls, settings: Mapping[str, Any], max_model_len: int | None) -> ProbeSettings:
        """The recipe's settings, every context length within ``max_model_len − 1`` (one token is
        generated) and within ``max_chunk_tokens``."""
        default = cls()
        cap = int(settings.get("max_chunk_tokens") or default.max_chunk_tokens)
        limit = min(cap, (max_model_len - 1) if max_model_len else cap)
        asked = tuple(int(n) for n in settings.get("context_lengths") or default.context_lengths)
        kept = tuple(sorted({n for n in asked if 2 <= n <= limit}))
        return cls(context_lengths=kept, chunks_per_length=int(settings.get("chunks_per_length")
                                                              or default.chunks_per_length),
                   max_chunk_tokens=cap, top_k=int(settings.get("top_k") or default.top_k),
                   greedy_max_tokens=int(settings.get("greedy_max_tokens") or default.greedy_max_tokens),
                   dropped_lengths=tuple(sorted(set(asked) - set(kept))))

    @property
    def tokens_needed(self) -> int:
        return sum(self.context_lengths) * self.chunks_per_length

    def to_dict(self) -> dict[str, Any]:
        return {"context_lengths": list(self.context_lengths), "chunks_per_length": self.chunks_per_length,
                "max_chunk_tokens": self.max_chunk_tokens, "top_k_asked": self.top_k,
                "greedy_max_tokens": self.greedy_max_tokens, "dropped_lengths": list(self.dropped_lengths),
                "scored": "second half of each chunk", "temperature": 0}


def chunk_plan(tokens: Sequence[int], settings: ProbeSettings) -> list[tuple[int, list[int]]]:
    """(context length, token IDs) per chunk: consecutive, non-overlapping windows of the text,
    the shortest length first; a length the text is too short for gets fewer chunks."""
    chunks: list[tuple[int, list[int]]] = []
    cursor = 0
    for length in settings.context_lengths:
        for _ in range(settings.chunks_per_length):
            if cursor + length > len(tokens):
                break
            chunks.append((length, list(tokens[cursor:cursor + length])))
            cursor += length
    return chunks


def token_id(text: str) -> int | None:
    """The token ID of ``token_id:123`` (vLLM's ``return_tokens_as_token_ids`` form), else None."""
    prefix, _, number = text.partition(":")
    return int(number) if prefix == "token_id" and number.lstrip("-").isdigit() else None


def parse_prompt_positions(entries: Sequence[Mapping[str, Any] | None], tokens: Sequence[int],
                           start: int, top_k: int) -> list[list[Any]]:
    """The scored positions of one chunk from ``prompt_logprobs``: [token, logprob, [[id, logprob], …]]
    per position from ``start`` on. vLLM returns the top K (ranks 1..K) and the scored token, which
    is an extra entry when it ranked below K."""
    rows: list[list[Any]] = []
    for t in range(start, len(tokens)):
        entry = entries[t] if t < len(entries) else None
        if not entry:
            raise ValueError(f"position {t} has no prompt log probabilities")
        actual = entry.get(str(tokens[t]))
        if not isinstance(actual, Mapping):
            raise ValueError(f"position {t} lacks the scored token's log probability")
        top = [[int(key), float(value["logprob"])] for key, value in entry.items()
               if isinstance(value, Mapping) and int(value.get("rank") or 1) <= top_k]
        top.sort(key=lambda pair: -pair[1])
        rows.append([tokens[t], float(actual["logprob"]), top])
    return rows


def parse_chat_steps(content: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """A greedy answer's steps from chat ``logprobs.content`` (token IDs, not text): [token, [[id, logprob], …]]."""
    steps: list[list[Any]] = []
    for item in content:
        token = token_id(str(item.get("token")))
        if token is None:
            raise ValueError("the server returned token text, not token IDs (return_tokens_as_token_ids)")
        top = [[token_id(str(t.get("token"))), float(t["logprob"])] for t in item.get("top_logprobs") or []]
        steps.append([token, [pair for pair in top if pair[0] is not None]])
    return steps


def probe_sha256(text_tokens: Sequence[int], chunks: Sequence[tuple[int, Sequence[int]]],
                 prompts: Sequence[Any], settings: ProbeSettings, top_k: int) -> str:
    """The probe's identity: the token IDs of the text and of every chunk, the greedy prompts and
    the parameters (K included). Two arms answered the same probe only when it matches."""
    body = {"text_tokens": list(text_tokens), "chunks": [[n, list(ids)] for n, ids in chunks],
            "prompts": list(prompts), "settings": settings.to_dict(), "top_k": top_k}
    return sha256_hex(json.dumps(body, sort_keys=True, separators=(",", ":")))
