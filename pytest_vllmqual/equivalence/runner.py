"""Run the probe against one server, one request at a time, into the numbers of its sidecar.

:func:`run_probe` tokenizes the text through the server, finds K, sends every chunk and every
greedy prompt, and returns the sidecar's body (token IDs and log probabilities, no text). A
refusal it cannot step around (no prompt log probabilities at all) is a :class:`ProbeResult`
with ``top_k`` 0 and the reason: the comparison is then not measurable, which is not a failure
of this arm. A server that dies under the probe ends it with ``ServerGoneError``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.hashing import canonical_sha256, sha256_hex

from .depth import DepthSettings, run_depth
from .probe import (
    GREEDY_STOP_RULES,
    K_STEPS,
    ProbeSettings,
    chunk_plan,
    parse_chat_steps,
    parse_prompt_positions,
    probe_sha256,
    request_rules,
    tokenizer_sample,
)

__all__ = ["ProbeResult", "answer_chunks", "answer_greedy", "chat_template_fingerprint", "find_top_k", "run_probe", "tokenize_text"]

_CHARS_PER_TOKEN = 3
_TOKENIZER_SAMPLE = 1024
"""The tokenizer's fingerprint: the SHA-256 of the first token IDs of the tokenizer sample, a fixed
text of its own (the probe text may change; the fingerprint of the same tokenizer must not)."""


@dataclass
class ProbeResult:
    """What one arm answered: the sidecar's numbers, K, and the reason when nothing was measurable."""

    top_k: int
    body: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    seconds: float = 0.0

    @property
    def measured(self) -> bool:
        return self.top_k > 0 and self.reason is None


def tokenize_text(client: QualClient, text: str, needed: int) -> list[int]:
    """The server's token IDs of the text's start, enough for ``needed`` tokens (or the whole text)."""
    size = max(needed * _CHARS_PER_TOKEN, 4096)
    while True:
        result = client.post_json("/tokenize", {"model": client.model, "prompt": text[:size],
                                                "add_special_tokens": False},
                                  kind="tokenize", label="equivalence-tokenize")
        tokens = [int(t) for t in (result.body or {}).get("tokens") or []]
        if not result.ok or not tokens:
            raise ValueError(f"the server did not tokenize the probe text: {result.attempt.error or 'no tokens'}")
        if len(tokens) >= needed or size >= len(text):
            return tokens[:needed] if len(tokens) >= needed else tokens
        size *= 2


def _completion(client: QualClient, tokens: Sequence[int], top_k: int, label: str) -> Any:
    body = {"model": client.model, "prompt": list(tokens), "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": top_k}
    return client.post_json("/v1/completions", body, kind="completion", label=label)


def find_top_k(client: QualClient, tokens: Sequence[int], asked: int) -> tuple[int, str | None]:
    """The largest K of ``K_STEPS`` (at most ``asked``) the server accepts on a 4-token prompt;
    (0, why) when it accepts none."""
    last = "no K was tried"
    for k in [k for k in K_STEPS if k <= asked] or [asked]:
        result = _completion(client, tokens[:4], k, f"equivalence-k{k}")
        if result.ok and ((result.body or {}).get("choices") or [{}])[0].get("prompt_logprobs"):
            return k, None
        last = f"prompt_logprobs {k} refused (HTTP {result.status_code})" if not result.ok else (
            f"prompt_logprobs {k} answered without prompt log probabilities")
    return 0, f"the server returns no prompt log probabilities: {last}"


def answer_chunks(client: QualClient, plan: Sequence[tuple[int, list[int]]], top_k: int) -> list[dict[str, Any]]:
    """Each chunk's prompt log probabilities (top ``top_k``) over its scored second half."""
    out = []
    for number, (length, ids) in enumerate(plan):
        result = _completion(client, ids, top_k, f"equivalence-chunk{number:02d}-{length}")
        if not result.ok:
            raise ValueError(f"chunk {number} ({length} tokens) failed: {result.attempt.error or result.status_code}")
        entries = ((result.body or {}).get("choices") or [{}])[0].get("prompt_logprobs") or []
        start = length // 2
        out.append({"length": length, "scored_from": start,
                    "positions": parse_prompt_positions(entries, ids, start, top_k)})
    return out


def answer_greedy(client: QualClient, prompts: Sequence[tuple[str, str]], top_k: int,
                  max_tokens: int) -> list[dict[str, Any]]:
    """Each greedy prompt's answer, token by token with its top ``top_k`` log probabilities."""
    out = []
    for name, prompt in prompts:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
                "logprobs": True, "top_logprobs": top_k, "return_tokens_as_token_ids": True, **GREEDY_STOP_RULES}
        result = client.chat(body, label=f"equivalence-greedy-{name}")
        if not result.ok:
            raise ValueError(f"greedy prompt {name} failed: {result.attempt.error or result.status_code}")
        content = (result.choice.get("logprobs") or {}).get("content") or []
        out.append({"id": name, "prompt_sha256": sha256_hex(prompt),
                    "finish_reason": result.finish_reason, "steps": parse_chat_steps(content)})
    return out


def chat_template_fingerprint(client: QualClient, prompts: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The chat template as this server applies it: the SHA-256 of every greedy prompt's token IDs
    after the template (``/tokenize``, ``add_generation_prompt``). Two servers that render the
    prompts alike fed the model the same tokens, whatever file the template came from."""
    rendered = []
    for name, prompt in prompts:
        result = client.tokenize_chat([{"role": "user", "content": prompt}], label=f"equivalence-template-{name}")
        tokens = [int(t) for t in (result.body or {}).get("tokens") or []]
        if not result.ok or not tokens:
            return {"rendered_sha256": None, "reason": f"the server did not render greedy prompt {name}: "
                                                       f"{result.attempt.error or result.status_code}"}
        rendered.append([name, tokens])
    return {"rendered_sha256": canonical_sha256(rendered),
            "prompt_tokens": {name: len(tokens) for name, tokens in rendered},
            "how": "SHA-256 of the greedy prompts' token IDs as the server's chat template renders them"}


def _depth(client: QualClient, tokens: Sequence[int], depth: DepthSettings, top_k: int) -> dict[str, Any]:
    """The depth windows, with the client's raw copies off: a run to 389K tokens sends thousands of
    requests of up to 389K token IDs each. The sidecar keeps what they answered; their bodies follow
    from the text's token IDs and the plan, and the last one stays named if the server dies."""

    def post(body: dict[str, Any]) -> dict[str, Any]:
        result = client.post_json("/v1/completions", {"model": client.model, **body}, kind="completion",
                                  label=f"equivalence-depth-{len(body['prompt'])}")
        if not result.ok or not isinstance(result.body, dict):
            raise ValueError(f"the depth request at {len(body['prompt']):,} tokens failed: "
                             f"{result.attempt.error or result.status_code}")
        return result.body

    sink, client.sink = getattr(client, "sink", None), None
    try:
        return run_depth(post, tokens, depth, top_k)
    finally:
        client.sink = sink


def run_probe(client: QualClient, settings: ProbeSettings, prompts: Sequence[tuple[str, str]],
              depth: DepthSettings | None = None) -> ProbeResult:
    """Answer the probe: teacher-forced chunks, the depth windows (``depth``, when given and on),
    then greedy prompts ((name, text) pairs)."""
    started = time.perf_counter()
    text = settings.text()
    deep = depth is not None and depth.off is None and bool(depth.edges)
    needed = max(settings.tokens_needed, max(depth.edges) if deep and depth else 0)
    stream = tokenize_text(client, text.text, needed)
    tokens = stream[:settings.tokens_needed]
    plan = chunk_plan(tokens, settings)
    if len({length for length, _ in plan}) < 1:
        return ProbeResult(0, reason="the probe text is too short for any chunk of the recipe's context lengths")
    top_k, refusal = find_top_k(client, tokens, settings.top_k)
    if refusal is not None:
        return ProbeResult(0, reason=refusal, seconds=round(time.perf_counter() - started, 3))
    chunks = answer_chunks(client, plan, top_k)
    depth_body = _depth(client, stream, depth, top_k) if deep and depth else None
    template = chat_template_fingerprint(client, prompts)
    greedy = answer_greedy(client, prompts, top_k, settings.greedy_max_tokens)
    prompt_hashes = [[g["id"], g["prompt_sha256"]] for g in greedy]
    sample = tokenize_text(client, tokenizer_sample(), _TOKENIZER_SAMPLE)
    tokenizer = canonical_sha256(sample[:_TOKENIZER_SAMPLE])
    body = {"source": text.source, "text": text.record(), "parameters": {**settings.to_dict(), "top_k": top_k},
            "requests": request_rules(settings, top_k), "chat_template": template,
            "probe_sha256": probe_sha256(tokens, plan, prompt_hashes, settings, top_k, text=text.record(),
                                         chat_template=template),
            "tokenizer_sha256": tokenizer, "top_k": top_k, "chunk_tokens": [ids for _, ids in plan],
            "chunks": chunks, "greedy": greedy}
    if depth_body is not None:
        body["depth"] = depth_body
    return ProbeResult(top_k, body, seconds=round(time.perf_counter() - started, 3))
