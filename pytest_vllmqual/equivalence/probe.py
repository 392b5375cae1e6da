"""The probe each arm answers: teacher-forced chunks of a fixed text and greedy chat answers.

The text ships with the package (``data/probe_text.txt.gz``): two public-domain novels by Jane
Austen, *Pride and Prejudice* and *Persuasion*, 1,151,625 characters of natural, non-repeating
English (about 280,000 tokens for SmolLM2's tokenizer), pinned by a version and the SHA-256 of its
text, which :func:`probe_text` checks each time it loads it. It does not depend on the Python
that runs the probe: an earlier version read the interpreter's ``pydoc_data.topics``, which
differs between Python patch releases, so an upgrade of Python made every later drift check
"not measurable". A recipe may name a longer text of its own (``gates.equivalence.text_file``
with its ``text_sha256``), checked and recorded the same way; ``data/README.md`` says where the
six novels (about a million tokens) come from.

The server tokenizes the text (``/tokenize``), so each arm cuts the same token IDs only when it has the
same tokenizer; the token IDs are hashed into the probe hash, which a comparison requires to
match, with the text's version and SHA-256, the chat template as the server renders the greedy
prompts, and every request parameter (``max_tokens``, the stop rules, K). Chunks at two or more
context lengths go to ``/v1/completions`` as token IDs with
``max_tokens: 1``, ``temperature: 0`` and ``prompt_logprobs: K``; the second half of each chunk
is scored (the first half gives the context). K is the server's cap, found by asking for 20 and
stepping down on a refusal (vLLM does not publish ``--max-logprobs``). Greedy chat prompts go with
``logprobs``, ``top_logprobs: K`` and token IDs instead of text. Every request is sent alone:
log probabilities change with batch composition.

Memory: vLLM computes a prompt's log probabilities over the whole vocabulary for every position
at once, outside its KV budget, so a chunk is capped (``max_chunk_tokens``).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_vllmqual.hashing import canonical_sha256, sha256_hex

__all__ = ["DEFAULT_LENGTHS", "GREEDY_STOP_RULES", "K_STEPS", "OPEN_PROMPTS", "TEXT_SHA256", "TEXT_VERSION",
           "ProbeSettings", "ProbeText", "chunk_plan", "parse_chat_steps", "parse_prompt_positions",
           "probe_sha256", "probe_text", "request_rules", "token_id", "tokenizer_sample"]

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


TEXT_FILE = "probe_text.txt.gz"
TEXT_VERSION = "austen-pp-persuasion/1"
TEXT_SHA256 = "e89c5431b88a26cfa6fe67094765ded9f4c05afbe562fed17251e5b508400c90"
"""The shipped text's version and the SHA-256 of its UTF-8 text (not of the gzip file)."""
TEXT_SOURCE = ("Jane Austen, Pride and Prejudice (1813) and Persuasion (1818), public domain; the Project "
               "Gutenberg editions as Debian's r-cran-janeaustenr 1.0.0-1 carries them")
SAMPLE_FILE = "tokenizer_sample.txt"
SAMPLE_SHA256 = "7e43a3fbd545fe028f2b5bb97dfd36f05244bcaa4cbc34dd26245283eac8329c"
"""The tokenizer's fingerprint text: the first 16,384 characters of Python 3.11's help topics, frozen,
so the fingerprints of records made before the probe text changed still match (PSF license)."""
GREEDY_STOP_RULES: dict[str, Any] = {"stop": [], "stop_token_ids": [], "ignore_eos": False}
"""Sent with every greedy request (vLLM's defaults, made explicit): an answer ends at the model's own
end-of-sequence token (its generation config) or at ``max_tokens``."""


@dataclass(frozen=True)
class ProbeText:
    """The probe text, and what identifies it in a record (never the text itself, never a local path)."""

    text: str
    file: str
    version: str
    sha256: str
    source: str

    def record(self) -> dict[str, Any]:
        return {"file": self.file, "version": self.version, "sha256": self.sha256,
                "characters": len(self.text), "source": self.source}


def _read_text(path: Path | Any, name: str, expected: str) -> str:
    """The UTF-8 text of a file (gzip when its name ends in .gz), checked against its SHA-256."""
    try:
        data = path.read_bytes()
        if name.endswith(".gz"):
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"the probe text {name} cannot be read: {exc}") from exc
    digest = sha256_hex(data)
    if digest != expected:
        raise ValueError(f"the probe text {name} has SHA-256 {digest}, not the pinned {expected}: the file was "
                         "changed or damaged (reinstall the package, or pin the new file's SHA-256 on purpose)")
    return data.decode("utf-8")


def probe_text(path: str | None = None, sha256: str | None = None) -> ProbeText:
    """The probe text: the package's own (its version and SHA-256 checked), or a recipe's file
    (``gates.equivalence.text_file``, checked against its ``text_sha256``). A mismatch is an error
    naming the file."""
    if path is None:
        shipped = resources.files(__package__) / "data" / TEXT_FILE
        return ProbeText(_read_text(shipped, TEXT_FILE, TEXT_SHA256), TEXT_FILE, TEXT_VERSION, TEXT_SHA256,
                         TEXT_SOURCE)
    if not sha256:
        raise ValueError(f"the probe text {Path(path).name} has no pinned SHA-256 (gates.equivalence.text_sha256)")
    name = Path(path).name
    text = _read_text(Path(path), name, sha256.removeprefix("sha256:"))
    return ProbeText(text, name, "the recipe's own file", sha256.removeprefix("sha256:"), "gates.equivalence.text_file")


def tokenizer_sample() -> str:
    """The fixed text whose first token IDs fingerprint the server's tokenizer (checked like the probe text)."""
    return _read_text(resources.files(__package__) / "data" / SAMPLE_FILE, SAMPLE_FILE, SAMPLE_SHA256)


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
    #: A recipe's own probe text (resolved path) and its pinned SHA-256; None: the package's text.
    text_file: str | None = None
    text_sha256: str | None = None

    @classmethod
    def from_recipe(cls, settings: Mapping[str, Any], max_model_len: int | None,
                    root: Path | None = None) -> ProbeSettings:
        """The recipe's settings, every context length within ``max_model_len − 1`` (one token is
        generated) and within ``max_chunk_tokens``; a relative ``text_file`` is under ``root`` (the
        recipe's project)."""
        default = cls()
        text_file = settings.get("text_file")
        if text_file and root is not None and not Path(str(text_file)).is_absolute():
            text_file = Path(root) / str(text_file)
        cap = int(settings.get("max_chunk_tokens") or default.max_chunk_tokens)
        limit = min(cap, (max_model_len - 1) if max_model_len else cap)
        asked = tuple(int(n) for n in settings.get("context_lengths") or default.context_lengths)
        kept = tuple(sorted({n for n in asked if 2 <= n <= limit}))
        return cls(context_lengths=kept, chunks_per_length=int(settings.get("chunks_per_length")
                                                              or default.chunks_per_length),
                   max_chunk_tokens=cap, top_k=int(settings.get("top_k") or default.top_k),
                   greedy_max_tokens=int(settings.get("greedy_max_tokens") or default.greedy_max_tokens),
                   dropped_lengths=tuple(sorted(set(asked) - set(kept))),
                   text_file=str(text_file) if text_file else None, text_sha256=settings.get("text_sha256"))

    def text(self) -> ProbeText:
        """The text this probe cuts its chunks from (checked against its pinned SHA-256)."""
        return probe_text(self.text_file, self.text_sha256)

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


def request_rules(settings: ProbeSettings, top_k: int) -> dict[str, Any]:
    """What every probe request asks for besides its tokens: the record's ``requests`` (and part of
    the probe hash), so two records say whether they asked the same."""
    return {"teacher_forced": {"endpoint": "/v1/completions", "prompt": "token IDs", "max_tokens": 1,
                               "temperature": 0, "prompt_logprobs": top_k},
            "greedy": {"endpoint": "/v1/chat/completions", "max_tokens": settings.greedy_max_tokens,
                       "temperature": 0, "logprobs": True, "top_logprobs": top_k,
                       "return_tokens_as_token_ids": True, **GREEDY_STOP_RULES}}


def probe_sha256(text_tokens: Sequence[int], chunks: Sequence[tuple[int, Sequence[int]]],
                 prompts: Sequence[Any], settings: ProbeSettings, top_k: int, *,
                 text: Mapping[str, Any] | None = None, chat_template: Mapping[str, Any] | None = None) -> str:
    """The probe's identity: the text (version and SHA-256) and the token IDs of it and of every
    chunk, the greedy prompts and the chat template as the server rendered them, and the
    parameters (K, ``max_tokens``, the stop rules). Two arms answered the same probe only when it
    matches."""
    body = {"text_tokens": list(text_tokens), "chunks": [[n, list(ids)] for n, ids in chunks],
            "prompts": list(prompts), "settings": settings.to_dict(), "top_k": top_k,
            "requests": request_rules(settings, top_k),
            "text": {key: (text or {}).get(key) for key in ("version", "sha256")},
            "chat_template": (chat_template or {}).get("rendered_sha256")}
    return canonical_sha256(body)
