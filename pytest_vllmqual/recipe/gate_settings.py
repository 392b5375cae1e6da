"""Rules between a recipe's gate settings that the schema cannot say: what a smoke answer is
checked against when the recipe lets it run out of tokens, and what the long-context check
compares when it asks the smoke prompt again. Each error names the file, the key and the fix,
like the loader's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import RecipeError

__all__ = ["check_gate_settings"]


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
