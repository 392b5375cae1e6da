"""Rules between a recipe's gate settings that the schema cannot say: what a smoke answer is
checked against when the recipe lets it run out of tokens, what the long-context check
compares when it asks the smoke prompt again, and where the KV pool minimum lives. Each error
names the file, the key and the fix, like the loader's.

The KV pool minimum is ``gates.engine.min_kv_tokens`` (the ``kv_pool`` gate is an engine gate).
Recipes written before it had one place also carry it as ``gates.capacity.min_kv_tokens``;
they still load when both say the same, and the value moves to the engine gate's block."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import RecipeError

__all__ = ["MIN_KV_TOKENS_KEY", "SMOKE_PROMPT", "check_gate_settings", "min_kv_tokens", "with_one_min_kv_tokens"]

SMOKE_PROMPT = "Reply with the single word: cloud"
"""The smoke prompt when the recipe sets none (``gates.smoke.prompt``), and the one a recipe
written from a command asks: a small instruct model (SmolLM2-135M-Instruct, the smollm2-cpu
recipe) answers it within the smoke's 32 tokens, where "Say cloud." got an essay that ran out
of tokens. The fixture model's recipes set "Say cloud.", the prompt it was trained on."""

MIN_KV_TOKENS_KEY = "gates.engine.min_kv_tokens"
"""Where a recipe says the smallest KV pool, in tokens, the engine must report."""
_OLD_MIN_KV_TOKENS_KEY = "gates.capacity.min_kv_tokens"


def check_gate_settings(path: Path, raw: dict[str, Any]) -> None:
    """Raise RecipeError when a gate setting needs another one the recipe does not set."""
    gates = raw.get("gates") or {}
    smoke = gates.get("smoke") or {}
    expect = smoke.get("expect_substring")
    if "length" in (smoke.get("finish_reasons") or ()) and not expect:
        raise RecipeError(
            f"recipe {path}: key 'gates.smoke.finish_reasons' allows 'length', but 'gates.smoke.expect_substring' "
            "is not set, so an answer cut off at max_tokens would pass unchecked. Fix: set expect_substring to "
            "the text the answer must hold, or allow only 'stop'.",
            path=str(path), key="gates.smoke.expect_substring")
    quality = gates.get("quality") or {}
    if quality.get("long_context_check") == "smoke_after_filler" and not expect:
        raise RecipeError(
            f"recipe {path}: key 'gates.quality.long_context_check' is 'smoke_after_filler', which compares the "
            "answer after the filler with 'gates.smoke.expect_substring', and the recipe does not set it. "
            "Fix: set gates.smoke.expect_substring (e.g. 'cloud' for the prompt 'Say cloud.'), or use the "
            "needle check.",
            path=str(path), key="gates.smoke.expect_substring")


def with_one_min_kv_tokens(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the KV pool minimum in ``gates.engine`` only: an older recipe's
    ``gates.capacity.min_kv_tokens`` moves there (null counts as unset), and one that says two
    different values is refused."""
    gates = raw.get("gates") or {}
    capacity = gates.get("capacity") or {}
    if "min_kv_tokens" not in capacity:
        return raw
    engine = gates.get("engine") or {}
    old, new = capacity["min_kv_tokens"], engine.get("min_kv_tokens")
    if old is not None and new is not None and new != old:
        raise RecipeError(
            f"recipe {path}: keys '{MIN_KV_TOKENS_KEY}' ({new!r}) and '{_OLD_MIN_KV_TOKENS_KEY}' ({old!r}) "
            "disagree; the KV pool minimum has one place now. Fix: keep the value you mean in "
            f"'{MIN_KV_TOKENS_KEY}' and delete '{_OLD_MIN_KV_TOKENS_KEY}'.",
            path=str(path), key=_OLD_MIN_KV_TOKENS_KEY)
    settled = {**gates, "capacity": {k: v for k, v in capacity.items() if k != "min_kv_tokens"}}
    if old is not None:
        settled["engine"] = {**engine, "min_kv_tokens": old if new is None else new}
    return {**raw, "gates": settled}


def min_kv_tokens(content: Any) -> int | None:
    """The KV pool minimum of a recipe mapping (a report's recipe content): ``gates.engine``'s, or,
    in a report of an older recipe, ``gates.capacity``'s; None when neither sets one."""
    gates = content.get("gates") if isinstance(content, Mapping) else None
    for block in ("engine", "capacity"):
        section = gates.get(block) if isinstance(gates, Mapping) else None
        value = section.get("min_kv_tokens") if isinstance(section, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
