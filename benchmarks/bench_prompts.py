"""Benchmark: exact-length prompt calibration against the method peers use.

    python -m benchmarks.bench_prompts                         # local tokenizer
    python -m benchmarks.bench_prompts --tokenizer DIR          # a given HF tokenizer dir
    python -m benchmarks.bench_prompts --server URL [--model NAME] [--api-key KEY] [--send]
    python -m benchmarks.bench_prompts --quick [--json PATH]   # fixture tokenizer, small targets, seconds

For each target (default 32K, 131K, 400K tokens) it prints, for pytest_vllmqual's builder:
client CPU seconds (``time.process_time``), wall seconds, counter calls and the calibration
error (templated length minus target, re-measured independently); and beside it the same
for the peer method, vLLM bench's random dataset (decode/re-encode loop on the user text,
no chat template), measured in the same run.

Local mode: the tokenizer is ``--tokenizer DIR``, else the fixture model's tokenizer at
fixtures/model/build/tiny-chat when it has been built, else a byte-level BPE trained here
on the corpus. In local mode tokenization is client CPU; against a server the server does
it, so the column ``tok_cpu_s`` shows how much of the local figure is tokenizer work.

Server mode: the builder counts with the server's /tokenize (``ServerTokenCounter``); the
error is re-measured with a separate /tokenize chat call, and with ``--send`` also as
``usage.prompt_tokens`` of a real 1-token chat completion for targets within
max_model_len. The peer method needs the model's tokenizer locally (as vLLM bench does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.quick_mode import add_quick_flag, fixture_tokenizer
from pytest_vllmqual.client.corpus import PAD_WORD_CANDIDATES, filler_text
from pytest_vllmqual.client.prompts import ChatShape, ExactPromptBuilder, Message, TextCut, TokenCounter
from pytest_vllmqual.client.token_counters import HFTokenCounter, ServerTokenCounter
from pytest_vllmqual.errors import CalibrationError

ROOT = Path(__file__).resolve().parent.parent

FIXTURE_TOKENIZER = ROOT / "fixtures" / "model" / "build" / "tiny-chat"
DEFAULT_TARGETS = (32_768, 131_072, 400_000)
#: Quick mode (benchmarks/quick_mode.py): two small targets, one build each.
QUICK_TARGETS = (1_024, 4_096)

BUILTIN_TEMPLATE = """{%- if messages[0].role == 'system' or tools or reasoning_effort is defined and reasoning_effort %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}
{% endif %}{% if reasoning_effort is defined and reasoning_effort %}Reasoning effort: {{ reasoning_effort }}.
{% endif %}{% if tools %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
{% endif %}<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

SHAPES = {
    "plain": ChatShape(),
    "system": ChatShape(system_prompt="You are a careful assistant. Answer briefly."),
    "full": ChatShape(
        system_prompt="You are a careful assistant. Answer briefly.",
        tools=[WEATHER_TOOL],
        reasoning_effort="high",
    ),
}


def builtin_tokenizer() -> Any:
    """A byte-level BPE (8K vocab) trained on the corpus: real-tokenizer-like chars/token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = filler_text(2024, 600_000)
    extras = [json.dumps(WEATHER_TOOL), " ".join(PAD_WORD_CANDIDATES), BUILTIN_TEMPLATE]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8000,
        special_tokens=["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    chunks = [text[i : i + 4000] for i in range(0, len(text), 4000)] + extras * 50
    tokenizer.train_from_iterator(chunks, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, chat_template=BUILTIN_TEMPLATE, eos_token="<|im_end|>"
    )


class TimedCounter:
    """Adds up the CPU time spent inside the counter (tokenizer or HTTP + JSON work)."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self.cpu_s = 0.0

    @property
    def max_model_len(self) -> int | None:
        return self.inner.max_model_len

    def _timed(self, fn: Any, *args: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args)
        finally:
            self.cpu_s += time.process_time() - start

    def count_chat(self, messages: Sequence[Message], shape: ChatShape) -> int:
        return int(self._timed(self.inner.count_chat, messages, shape))

    def count_text(self, text: str) -> int:
        return int(self._timed(self.inner.count_text, text))

    def cut_text(self, text: str, max_tokens: int) -> TextCut:
        cut: TextCut = self._timed(self.inner.cut_text, text, max_tokens)
        return cut


def gen_prompt_decode_to_target_len(
    tokenizer: Any, token_sequence: list[int], target_token_len: int, rng: np.random.Generator, max_retry: int = 10
) -> tuple[str, list[int], int]:
    """vLLM bench's loop (vllm/benchmarks/datasets/datasets.py, 0.32), reproduced as is."""
    remain_num_try = max_retry
    token_mismatch = 0
    while True:
        prompt = tokenizer.decode(token_sequence)
        token_sequence = tokenizer.encode(prompt, add_special_tokens=False)
        if remain_num_try <= 0:
            if len(token_sequence) != target_token_len:
                token_mismatch = len(token_sequence) - target_token_len
            break
        if len(token_sequence) == target_token_len:
            break
        if len(token_sequence) < target_token_len:
            extra = rng.integers(0, tokenizer.vocab_size, size=target_token_len - len(token_sequence))
            token_sequence.extend(extra.tolist())
        else:
            token_sequence = token_sequence[:target_token_len]
        remain_num_try -= 1
    return prompt, token_sequence, token_mismatch


def peer_style_prompt(tokenizer: Any, target: int, shape: ChatShape, seed: int = 0) -> dict[str, Any]:
    """The peers' method: vLLM bench RandomDataset, user text sized, chat template ignored.

    Sequential ids from a random offset over the non-special vocabulary, decoded, then the
    decode/re-encode loop. The text goes into the recipe's chat shape as the user turn,
    which is what the server then counts.
    """
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    rng = np.random.default_rng(seed)
    vocab_size = tokenizer.vocab_size
    allowed = np.array(sorted(set(range(vocab_size)) - set(tokenizer.all_special_ids)))
    offset = int(rng.integers(0, vocab_size))
    inner = allowed[(offset + np.arange(target)) % len(allowed)].tolist()
    prompt, tokens, mismatch = gen_prompt_decode_to_target_len(tokenizer, inner, target, rng)
    return {
        "messages": shape.messages(prompt),
        "believed_tokens": len(tokens),
        "content_mismatch": mismatch,
        "cpu_s": time.process_time() - cpu_start,
        "wall_s": time.perf_counter() - wall_start,
    }


def local_chat_count(tokenizer: Any, messages: list[Message], shape: ChatShape) -> int:
    """Independent re-count: transformers' own apply_chat_template(tokenize=True)."""
    ids = tokenizer.apply_chat_template(
        messages, tools=shape.tools, add_generation_prompt=True, tokenize=True, return_dict=False,
        **shape.template_kwargs(),
    )
    return len(ids)


def usage_prompt_tokens(client: httpx.Client, model: str, messages: list[Message], shape: ChatShape) -> int | str:
    """``usage.prompt_tokens`` of a real 1-token chat completion (the ground truth)."""
    body: dict[str, Any] = {
        "model": model, "messages": messages, "max_tokens": 1, "temperature": 0.0, **shape.request_fields()
    }
    if shape.tools:
        # The template still renders the tools; "none" just needs no tool parser on the server.
        body["tool_choice"] = "none"
    response = client.post("/v1/chat/completions", json=body, timeout=600.0)
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    return int(response.json()["usage"]["prompt_tokens"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    shape = SHAPES[args.shape]
    tokenizer: Any = None
    tokenizer_label = "none"
    if args.tokenizer:
        tokenizer = HFTokenCounter.from_pretrained(args.tokenizer).tokenizer
        tokenizer_label = args.tokenizer
    elif (FIXTURE_TOKENIZER / "tokenizer.json").exists():
        tokenizer = HFTokenCounter.from_pretrained(str(FIXTURE_TOKENIZER)).tokenizer
        tokenizer_label = f"fixture {FIXTURE_TOKENIZER.relative_to(ROOT)}"
    elif not args.server:
        tokenizer = builtin_tokenizer()
        tokenizer_label = "built-in byte-level BPE, 8000 vocab, trained on the corpus"

    client: httpx.Client | None = None
    model = args.model
    if args.server:
        api_key = getattr(args, "api_key", None)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        client = httpx.Client(base_url=args.server.rstrip("/"), headers=headers)
        if model is None:
            model = client.get("/v1/models", timeout=30.0).json()["data"][0]["id"]
        base_counter: TokenCounter = ServerTokenCounter(client, str(model))
        counter_label = f"ServerTokenCounter({args.server}, {model})"
    else:
        base_counter = HFTokenCounter(tokenizer)
        counter_label = "HFTokenCounter (tokenization is client CPU here)"

    def reference_count(messages: list[Message]) -> int:
        if client is not None:
            return ServerTokenCounter(client, str(model)).count_chat(messages, shape)
        return local_chat_count(tokenizer, messages, shape)

    timed = TimedCounter(base_counter)
    builder = ExactPromptBuilder(timed, seed=args.seed)
    warm_cpu, warm_wall = time.process_time(), time.perf_counter()
    warm_target = builder.chat_overhead(shape, "bench-warmup") + 200
    try:
        warm = builder.build(warm_target, shape, nonce="bench-warmup", allow_over_max_model_len=True)
    except CalibrationError as exc:
        # This tokenizer defeats the builder: every target would be refused the same way.
        print(f"calibration refused for this tokenizer: {exc}", flush=True)
        refused: list[dict[str, Any]] = []
        for target in args.targets:
            refusal: dict[str, Any] = {"target": target, "error": str(exc)}
            if tokenizer is not None and not args.no_peer:
                peer = peer_style_prompt(tokenizer, target, shape, seed=args.seed)
                refusal["peer"] = {"cpu_s": peer["cpu_s"], "wall_s": peer["wall_s"],
                                   "error": reference_count(peer["messages"]) - target,
                                   "content_error": peer["content_mismatch"]}
                print(f"{target:>8} | ours refused | peer: error {refusal['peer']['error']}, "
                      f"{peer['wall_s']:.3f} s wall", flush=True)
            refused.append(refusal)
        if client is not None:
            client.close()
        return {"tokenizer": tokenizer_label, "counter": counter_label, "shape": args.shape,
                "error": str(exc), "rows": refused}
    header = {
        "tokenizer": tokenizer_label,
        "counter": counter_label,
        "shape": args.shape,
        "warmup": {
            "counter_calls": warm.iterations,
            "cpu_s": time.process_time() - warm_cpu,
            "wall_s": time.perf_counter() - warm_wall,
        },
        "overhead_tokens": warm.overhead_tokens,
    }
    print_header(header)
    rows: list[dict[str, Any]] = []
    for target in args.targets:
        runs = []
        try:
            for repeat in range(args.repeat):
                timed.cpu_s = 0.0
                prompt = builder.build(
                    target, shape, nonce=f"bench {target} {repeat}", allow_over_max_model_len=True
                )
                runs.append((prompt, timed.cpu_s))
        except CalibrationError as exc:
            print(f"{target:>8} | calibration refused: {exc}", flush=True)
            rows.append({"target": target, "error": str(exc)})
            continue
        prompt = runs[-1][0]
        row: dict[str, Any] = {
            "target": target,
            "ours": {
                "cpu_s": statistics.median(p.build_seconds for p, _ in runs),
                "wall_s": statistics.median(p.build_wall_seconds for p, _ in runs),
                "counter_cpu_s": statistics.median(c for _, c in runs),
                "counter_calls": prompt.iterations,
                "error": reference_count(prompt.messages) - target,
            },
        }
        limit = base_counter.max_model_len
        send = client is not None and args.send and (limit is None or target < limit)
        if send:
            assert client is not None
            usage = usage_prompt_tokens(client, str(model), prompt.messages, shape)
            row["ours"]["usage_error"] = usage - target if isinstance(usage, int) else usage
        if tokenizer is not None and not args.no_peer:
            peer = peer_style_prompt(tokenizer, target, shape, seed=args.seed)
            row["peer"] = {
                "cpu_s": peer["cpu_s"],
                "wall_s": peer["wall_s"],
                "error": reference_count(peer["messages"]) - target,
                "content_error": peer["content_mismatch"],
            }
            if send:
                assert client is not None
                usage = usage_prompt_tokens(client, str(model), peer["messages"], shape)
                row["peer"]["usage_error"] = usage - target if isinstance(usage, int) else usage
        rows.append(row)
        print_row(row)
    if client is not None:
        client.close()
    return {**header, "rows": rows}


def print_header(header: dict[str, Any]) -> None:
    warm = header["warmup"]
    print(f"tokenizer: {header['tokenizer']}")
    print(f"counter:   {header['counter']}")
    print(f"shape:     {header['shape']} (chat overhead {header['overhead_tokens']} tokens)")
    print(
        f"warm-up:   {warm['counter_calls']} counter calls, {warm['cpu_s']:.3f} s CPU, "
        f"{warm['wall_s']:.3f} s wall (pad-word discovery, chars/token)"
    )
    print(
        f"{'target':>8} | {'ours: error':>11} {'calls':>5} {'cpu_s':>6} {'wall_s':>6} {'tok_cpu_s':>9} "
        f"| {'peer: error':>11} {'text_err':>8} {'cpu_s':>6} {'wall_s':>6}",
        flush=True,
    )


def print_row(row: dict[str, Any]) -> None:
    ours = row["ours"]
    line = (
        f"{row['target']:>8} | {ours['error']:>11} {ours['counter_calls']:>5} {ours['cpu_s']:>6.3f} "
        f"{ours['wall_s']:>6.3f} {ours['counter_cpu_s']:>9.3f} "
    )
    peer = row.get("peer")
    if peer:
        line += f"| {peer['error']:>11} {peer['content_error']:>8} {peer['cpu_s']:>6.3f} {peer['wall_s']:>6.3f}"
    else:
        line += "| (peer skipped: no local tokenizer)"
    if "usage_error" in ours:
        line += f"  usage.prompt_tokens error: ours {ours['usage_error']}"
        if peer and "usage_error" in peer:
            line += f", peer {peer['usage_error']}"
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", metavar="URL", help="vLLM server root, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", metavar="NAME", help="served model name (default: first of /v1/models)")
    parser.add_argument("--api-key", metavar="KEY", default=os.environ.get("VLLM_API_KEY"),
                        help="the server's API key (default $VLLM_API_KEY); /v1 routes need it, /tokenize not")
    parser.add_argument("--tokenizer", metavar="DIR", help="local HF tokenizer directory")
    parser.add_argument(
        "--targets", metavar="N,N,...", default=",".join(map(str, DEFAULT_TARGETS)),
        type=lambda value: [int(item) for item in value.split(",")],
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="builds per target; the median is shown")
    parser.add_argument("--send", action="store_true", help="also send each prompt (max_tokens=1)")
    parser.add_argument("--no-peer", action="store_true", help="skip the peer method")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        if args.server:
            parser.error("--quick runs locally (the fault server has no /tokenize); drop --server")
        args.targets, args.repeat, args.tokenizer = list(QUICK_TARGETS), 1, str(fixture_tokenizer())
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
