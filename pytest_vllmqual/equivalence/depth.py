"""Equivalence by context depth: scored windows deep in one long prefix, pooled per depth bucket.

Errors of a KV cache (FP8, NVFP4, an offload path) grow with the context, so the probe also scores
short windows deep in the text: bucket by bucket up to the recipe's largest ladder rung, at least
eight windows per bucket, each window ``window_tokens`` consecutive positions of the probe text.

How a window is scored. A request with ``prompt_logprobs`` costs memory outside the KV budget for
every prompt position (the logits over the whole vocabulary), its answer grows with the prompt
(hundreds of megabytes at 393K tokens), and vLLM never reads the prefix cache for it: "cache the
context, then score a short tail with prompt log probabilities" would recompute the whole prompt
each time. So the depth probe teacher-forces on the decode side instead: for a scored position p
it sends the first p tokens of the text with ``max_tokens: 1``, ``logprobs: K`` and the text's
token at p forced: by ``allowed_token_ids`` holding only that token (the default), or by a
``logit_bias`` of +100 on it (``depth_force: logit_bias``, for a server whose mask goes wrong: GPU
vLLM 0.24.0 masked a forced token that already occurs in the prompt). The server reads the context from its
prefix cache (the previous request left it there), computes the few tokens after the last cached
block, and returns the raw log probabilities of position p (vLLM takes them before the forcing
mask and the bias, under its default ``--logprobs-mode raw_logprobs``): the text's token and the top K, exactly
what ``prompt_logprobs`` gives at that position, with the candidate's KV cache read as a decode
step reads it. Requests go one at a time, the shallowest first, so each extends the cached
prefix. Without prefix caching every request recomputes its context: the probe stops at its
time budget and says so.

A window is the unit of the intervals (the bootstrap of :mod:`.intervals` resamples windows). The
windows of one bucket share the text before them, as the probe's chunks share one novel; a
bucket's figures are read as the chunk figures are. The comparison matches windows by their
depth and the SHA-256 of their context's token IDs, so two arms whose plans differ (another
``max_model_len``) still compare the windows both scored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllmqual.hashing import canonical_sha256
from pytest_vllmqual.words import Word

from .probe import token_id

__all__ = [
    "DEFAULT_FIRST_EDGE",
    "DEFAULT_WINDOWS",
    "DEFAULT_WINDOW_TOKENS",
    "METHOD",
    "DepthPlan",
    "DepthSettings",
    "DepthWindow",
    "Forcing",
    "default_edges",
    "forced_request",
    "parse_forced",
    "plan_windows",
    "run_depth",
    "score_window",
]

DEFAULT_FIRST_EDGE = 1024
"""The first bucket ends here; each later edge doubles, the last one is the largest depth."""
DEFAULT_WINDOWS = 8
"""Windows per bucket: the fewest the comparison accepts (a bucket with fewer has too few units)."""
DEFAULT_WINDOW_TOKENS = 16
"""Scored positions per window (one request each)."""
DEFAULT_BUDGET_S = 900.0
"""The depth probe stops after this many seconds (a server without prefix caching recomputes every context)."""
METHOD = ("one-token /v1/completions requests over the text's first p tokens (token IDs), max_tokens 1, "
          "temperature 0, logprobs K, the text's token at p forced ({forcing}), prefix read from the cache; "
          "raw log probabilities of position p")
LOGIT_BIAS = 100.0
"""The bias that forces a token under ``depth_force: logit_bias``: the most the OpenAI API allows."""


class Forcing(Word):
    """How a depth request forces the text's token (``gates.equivalence.depth_force``)."""

    ALLOWED_TOKEN_IDS = "allowed_token_ids"
    LOGIT_BIAS = "logit_bias"

    def body(self, token: int) -> dict[str, Any]:
        """The request keys that force ``token``."""
        if self is Forcing.LOGIT_BIAS:
            return {"logit_bias": {str(token): LOGIT_BIAS}}
        return {"allowed_token_ids": [token]}


PostFn = Callable[[dict[str, Any]], Mapping[str, Any]]
"""Send one completion body (without the model) and return the parsed answer; raise ValueError on failure."""


def default_edges(max_depth: int, first: int = DEFAULT_FIRST_EDGE, buckets: int | None = None) -> list[int]:
    """Bucket upper edges: ``first``, doubling, up to ``max_depth`` (the last edge); with ``buckets``
    only the deepest that many (the first of them then starts at 0)."""
    if max_depth < 2:
        return []
    edges: list[int] = []
    edge = first
    while edge < max_depth:
        edges.append(edge)
        edge *= 2
    if edges and max_depth - edges[-1] < edges[-1] // 4:
        edges.pop()
    edges.append(max_depth)
    return edges[-buckets:] if buckets else edges


@dataclass(frozen=True)
class DepthSettings:
    """The recipe's ``gates.equivalence`` depth keys, resolved against the model and the ladder."""

    edges: tuple[int, ...] = ()
    windows_per_bucket: int = DEFAULT_WINDOWS
    window_tokens: int = DEFAULT_WINDOW_TOKENS
    budget_s: float = DEFAULT_BUDGET_S
    forcing: Forcing = Forcing.ALLOWED_TOKEN_IDS
    #: Where the largest depth came from (the ladder's largest rung, max_model_len, the recipe).
    max_depth_source: str = ""
    #: Why depth is not probed (None: it is).
    off: str | None = None

    @classmethod
    def from_recipe(cls, settings: Mapping[str, Any], largest_rung: int | None, max_model_len: int | None) -> DepthSettings:
        """``depth: false`` turns it off; ``depth_edges`` sets the bucket edges; else they double from
        ``depth_first_edge`` up to ``depth_max`` or the largest ladder rung, within ``max_model_len − 1``
        (``depth_buckets`` keeps only the deepest that many)."""
        if settings.get("depth") is False:
            return cls(off="gates.equivalence.depth is false")
        limit = (max_model_len - 1) if max_model_len else None
        windows = int(settings.get("depth_windows") or DEFAULT_WINDOWS)
        width = int(settings.get("depth_window_tokens") or DEFAULT_WINDOW_TOKENS)
        budget = float(settings.get("depth_budget_s") or DEFAULT_BUDGET_S)
        forcing = Forcing(settings.get("depth_force") or Forcing.ALLOWED_TOKEN_IDS)
        if settings.get("depth_edges"):
            edges = sorted({int(e) for e in settings["depth_edges"]})
            source = "gates.equivalence.depth_edges"
        else:
            top, source = (int(settings["depth_max"]), "gates.equivalence.depth_max") if settings.get("depth_max") \
                else (largest_rung, "the largest ladder rung") if largest_rung else (limit, "max_model_len − 1")
            if not top:
                return cls(off="no largest depth: no ladder rung, no max_model_len and no gates.equivalence.depth_max")
            top = min(top, limit) if limit else top
            edges = default_edges(top, int(settings.get("depth_first_edge") or DEFAULT_FIRST_EDGE),
                                  int(settings["depth_buckets"]) if settings.get("depth_buckets") else None)
        if limit:
            edges = [e for e in edges if e <= limit]
        if not edges:
            return cls(off=f"no depth bucket fits max_model_len {max_model_len}")
        return cls(tuple(edges), windows, width, budget, forcing, source)

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "windows_per_bucket": self.windows_per_bucket,
                "window_tokens": self.window_tokens, "budget_s": self.budget_s, "forcing": self.forcing.value,
                "max_depth_source": self.max_depth_source, "off": self.off}


@dataclass(frozen=True)
class DepthWindow:
    """One window: its bucket, the depth of its first scored position (the tokens before it)."""

    bucket: int
    depth: int
    width: int


@dataclass(frozen=True)
class DepthPlan:
    """The windows of every bucket that the text is long enough for, and the buckets it is not."""

    buckets: tuple[tuple[int, int], ...]
    windows: tuple[DepthWindow, ...]
    dropped: tuple[str, ...] = field(default=())


def plan_windows(settings: DepthSettings, text_tokens: int) -> DepthPlan:
    """Windows spread evenly over each bucket (lo, hi]: the first scored position of window i lies
    at lo + (i + 1)·(hi − lo − w)/n, so the last window ends at hi. A bucket deeper than the text
    or too narrow for its windows is dropped, with why."""
    buckets: list[tuple[int, int]] = []
    windows: list[DepthWindow] = []
    dropped: list[str] = []
    lo = 0
    n, w = settings.windows_per_bucket, settings.window_tokens
    for hi in settings.edges:
        if hi > text_tokens:
            dropped.append(f"({lo:,}, {hi:,}]: the probe text has {text_tokens:,} tokens")
        elif hi - lo < n * w:
            dropped.append(f"({lo:,}, {hi:,}]: narrower than {n} windows of {w} tokens")
        else:
            index = len(buckets)
            buckets.append((lo, hi))
            step = (hi - lo - w) / n
            windows += [DepthWindow(index, max(1, lo + round((i + 1) * step)), w) for i in range(n)]
        lo = hi
    return DepthPlan(tuple(buckets), tuple(windows), tuple(dropped))


def forced_request(tokens: Sequence[int], position: int, top_k: int,
                   forcing: Forcing = Forcing.ALLOWED_TOKEN_IDS) -> dict[str, Any]:
    """The body that scores ``position``: its context as token IDs, the text's token forced."""
    return {"prompt": list(tokens[:position]), "max_tokens": 1, "temperature": 0, "logprobs": top_k,
            **forcing.body(int(tokens[position])), "return_tokens_as_token_ids": True}


def parse_forced(answer: Mapping[str, Any], token: int, top_k: int,
                 forcing: Forcing = Forcing.ALLOWED_TOKEN_IDS) -> list[Any]:
    """[token, logprob, [[id, logprob], …]] from a forced one-token answer (the sidecar's position
    form). The server must have generated the forced token and returned raw log probabilities."""
    logprobs = ((answer.get("choices") or [{}])[0] or {}).get("logprobs") or {}
    generated = [token_id(str(t)) for t in logprobs.get("tokens") or []]
    if generated[:1] != [token]:
        raise ValueError(f"the server generated {generated[:1]}, not the forced token {token} ({forcing.value})")
    entries = (logprobs.get("top_logprobs") or [None])[0] or {}
    pairs = [(token_id(str(k)), float(v)) for k, v in entries.items()]
    top: list[list[Any]] = [[k, v] for k, v in sorted(((k, v) for k, v in pairs if k is not None),
                                                       key=lambda pair: -pair[1])][:top_k]
    if top_k >= 2 and sum(1 for pair in top if pair[1] > -1e3) < 2:
        raise ValueError("the server returned log probabilities after the forcing mask (one finite entry): the "
                         "depth probe needs --logprobs-mode raw_logprobs")
    return [token, float(logprobs["token_logprobs"][0]), top]


def score_window(post: PostFn, tokens: Sequence[int], window: DepthWindow, top_k: int,
                 forcing: Forcing = Forcing.ALLOWED_TOKEN_IDS) -> list[list[Any]]:
    """The window's positions, one forced request each, the shallowest first."""
    return [parse_forced(post(forced_request(tokens, p, top_k, forcing)), int(tokens[p]), top_k, forcing)
            for p in range(window.depth, window.depth + window.width)]


def context_sha256(tokens: Sequence[int], window: DepthWindow) -> str:
    """The SHA-256 of the token IDs a window's requests read (its context and scored tokens)."""
    return canonical_sha256(list(tokens[:window.depth + window.width]))


def run_depth(post: PostFn, tokens: Sequence[int], settings: DepthSettings, top_k: int) -> dict[str, Any]:
    """The sidecar's ``depth`` body: the plan, every scored window, and the buckets not scored (why).
    A refused or unparsable answer stops the windows there and is recorded: the chunk probe's
    answers still stand (a server that is gone still ends the probe)."""
    plan = plan_windows(settings, len(tokens))
    started = time.perf_counter()
    scored: list[dict[str, Any]] = []
    dropped = list(plan.dropped)
    for window in plan.windows:
        if time.perf_counter() - started > settings.budget_s:
            lo, hi = plan.buckets[window.bucket]
            dropped.append(f"({lo:,}, {hi:,}]: the depth probe's time budget of {settings.budget_s:g} s ran out "
                           "(is prefix caching off?)")
            break
        try:
            positions = score_window(post, tokens, window, top_k, settings.forcing)
        except ValueError as exc:
            dropped.append(f"the depth windows stopped at depth {window.depth:,}: {exc}")
            break
        scored.append({"bucket": window.bucket, "depth": window.depth,
                       "context_sha256": context_sha256(tokens, window), "positions": positions})
    return {"method": METHOD.format(forcing=settings.forcing.value), "settings": settings.to_dict(), "buckets": [list(b) for b in plan.buckets],
            "dropped": dropped, "windows": scored, "seconds": round(time.perf_counter() - started, 3)}
