"""Synthetic probe answers for the equivalence tests: a report gets a sidecar beside it.

``shift`` moves the candidate's log probabilities (a changed arm); ``swap_top`` makes the
candidate prefer another token at every fourth position (top-1 disagreement). Scored items
(:func:`item_outcomes`, :func:`items_block`) are built from a paired table per family.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pytest_vllmqual.equivalence.comparison import sidecar_arm
from pytest_vllmqual.equivalence.outcomes import ItemOutcome
from pytest_vllmqual.equivalence.sidecar import publish

PIN = "ab" * 32


def _position(t: int, *, shift: float, swap_top: bool) -> list[Any]:
    first, second = 100 + t % 7, 200 + t % 5
    p_first, p_second = 0.6, 0.25
    if swap_top and t % 4 == 0:
        p_first, p_second = p_second, p_first
    top = [[first, math.log(p_first) - shift], [second, math.log(p_second)]]
    top.sort(key=lambda pair: -pair[1])
    return [first, math.log(p_first) - shift, top]


def probe_body(*, shift: float = 0.0, swap_top: bool = False, top_k: int = 2, probe: str = "p" * 64,
               tokenizer: str = "t" * 64, hard_greedy: bool = False, chunks_per_length: int = 4,
               prompts: int = 8) -> dict[str, Any]:
    """Two lengths × four chunks and eight greedy prompts, as the probe's defaults (the verdict's
    minimum units); fewer with ``chunks_per_length`` and ``prompts``."""
    chunks = [{"length": length, "scored_from": length // 2,
               "positions": [_position(t + 3 * n, shift=shift * (1 + n % 3), swap_top=swap_top)
                             for t in range(length // 2)]}
              for length in (16, 32) for n in range(chunks_per_length)]
    greedy = [{"id": f"g{n}", "prompt_sha256": "0" * 64, "finish_reason": "stop",
               "steps": [[5, [[5, -0.1], [6, -2.5]]], [7 if not (hard_greedy and n == 0) else 9, [[7, -0.2]]]]}
              for n in range(prompts)]
    return {"source": "synthetic", "parameters": {"greedy_max_tokens": 8}, "probe_sha256": probe,
            "tokenizer_sha256": tokenizer, "top_k": top_k, "chunk_tokens": [], "chunks": chunks, "greedy": greedy}


def attach_probe(report: dict[str, Any], folder: Path, name: str, body: dict[str, Any],
                 *, pin: str | None = PIN) -> dict[str, Any]:
    """Publish ``body`` as ``report``'s sidecar in ``folder`` (the report named ``name``.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    identity = report.setdefault("identity", {})
    identity["model_files"] = {"content": pin} if pin else {}
    private = folder / f"{name}.private.json"
    private.write_text(json.dumps(body))
    report["equivalence_probe"] = publish(private, sidecar_arm(report), folder / f"{name}.json")
    private.unlink()
    return report


def item_outcomes(family: str, table: tuple[int, int, int, int], *, start: int = 0,
                  unparsed: tuple[int, int] = (0, 0), truncated: tuple[int, int] = (0, 0)
                  ) -> tuple[list[ItemOutcome], list[ItemOutcome]]:
    """(control, candidate) answers with the paired table (a, b, c, d): a correct in both, b in the
    control only, c in the candidate only, d in neither. The first ``unparsed[k]`` (``truncated[k]``)
    wrong answers of arm k are marked unparsed (ended at max_tokens)."""
    a, b, c, d = table
    pairs = [(True, True)] * a + [(True, False)] * b + [(False, True)] * c + [(False, False)] * d
    arms: list[list[ItemOutcome]] = [[], []]
    for k in range(2):
        wrong = 0
        for i, pair in enumerate(pairs):
            correct = pair[k]
            wrong += not correct
            arms[k].append(ItemOutcome(f"{family}-{start + i}", family, correct,
                                       parsed=correct or wrong > unparsed[k],
                                       hit_max_tokens=not correct and wrong <= truncated[k]))
    return arms[0], arms[1]


BANK = {"name": "vllmqual-items", "version": "1", "seed": 7, "sha256": "b" * 64, "chat_template_sha256": "c" * 64,
        "max_tokens": 64, "stop": [], "judge_version": "1"}


def items_block(families: dict[str, tuple[int, int, int, int]], *, family: str | None = None,
                **bank: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(control, candidate) sidecar blocks ``{"bank", "outcomes"}`` for the paired tables per family
    (``family`` renames every family, as the tool replay's single one); ``bank`` overrides its keys."""
    blocks: tuple[dict[str, Any], dict[str, Any]] = ({"bank": {**BANK, **bank}, "outcomes": []},
                                                      {"bank": {**BANK, **bank}, "outcomes": []})
    start = 0
    for name, table in families.items():
        left, right = item_outcomes(family or name, table, start=start)
        start += sum(table)
        blocks[0]["outcomes"] += [o.to_dict() for o in left]
        blocks[1]["outcomes"] += [o.to_dict() for o in right]
    return blocks


def depth_body(*, shift: float = 0.0, swap_top: bool = False, edges: tuple[int, ...] = (64, 128),
               windows: int = 8, width: int = 4, deep_shift_only: bool = False) -> dict[str, Any]:
    """A sidecar's ``depth`` part: ``windows`` windows of ``width`` positions per bucket of ``edges``;
    ``deep_shift_only`` changes only the deepest bucket (an error that grows with the context)."""
    buckets = list(zip((0, *edges[:-1]), edges, strict=True))
    out = []
    for index, (lo, hi) in enumerate(buckets):
        moved = shift if (not deep_shift_only or index == len(buckets) - 1) else 0.0
        for n in range(windows):
            depth = lo + 1 + n * ((hi - lo - width) // windows)
            out.append({"bucket": index, "depth": depth, "context_sha256": f"{depth:064x}",
                        "positions": [_position(depth + t, shift=moved * (1 + n % 3), swap_top=swap_top and moved > 0)
                                      for t in range(width)]})
    return {"method": "synthetic", "settings": {"window_tokens": width}, "buckets": [list(b) for b in buckets],
            "dropped": [], "windows": out, "seconds": 0.0}
