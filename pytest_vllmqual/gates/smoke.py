"""The smoke request, once: the recipe's smoke prompt and the rule its answer is judged by. The smoke
gate and the ladder's post-probe smoke both send it."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllmqual.client.qual_client import QualClient
from pytest_vllmqual.client.results import ChatResult
from pytest_vllmqual.privacy.public_text import quote_answer
from pytest_vllmqual.recipe.gate_settings import SMOKE_PROMPT
from pytest_vllmqual.recipe.model import Recipe

__all__ = ["SMOKE_PROMPT", "SmokeResult", "SmokeRule", "run_smoke"]


@dataclass(frozen=True)
class SmokeRule:
    """What a smoke answer must be, from the recipe's ``gates.smoke``: how it may finish
    (``finish_reasons``, default ``[stop]``) and the text it must hold (``expect_substring``)."""

    prompt: str = SMOKE_PROMPT
    max_tokens: int = 32
    finish_reasons: tuple[str, ...] = ("stop",)
    expect: str | None = None

    @classmethod
    def of(cls, recipe: Recipe) -> SmokeRule:
        settings = recipe.gate("smoke")
        return cls(prompt=settings.get("prompt", SMOKE_PROMPT), max_tokens=int(settings.get("max_tokens", 32)),
                   finish_reasons=tuple(settings.get("finish_reasons") or ("stop",)),
                   expect=settings.get("expect_substring") or None)

    def finish_problem(self, finish_reason: str | None) -> str | None:
        """Why the answer's finish reason breaks the rule, or None."""
        if finish_reason in self.finish_reasons:
            return None
        allowed = " or ".join(repr(r) for r in self.finish_reasons)
        why = (f": the model did not end its answer within {self.max_tokens} tokens"
               if finish_reason == "length" else "")
        return f"finished with {finish_reason!r}, not {allowed}{why}"

    def text_problem(self, content: str) -> str | None:
        """Why the answer's text breaks the rule (empty, or without the expected text), or None."""
        if not content.strip():
            return "returned empty content"
        if self.expect and self.expect.lower() not in content.lower():
            return f"answer {quote_answer(content)} lacks {self.expect!r}"
        return None


@dataclass(frozen=True)
class SmokeResult:
    """The recipe's smoke request and its answer, judged by the recipe's smoke rule."""

    chat: ChatResult
    max_tokens: int
    rule: SmokeRule = SmokeRule()

    @property
    def outcome(self) -> str:
        """'passed' (HTTP 200, an allowed finish reason, the expected text) or what went wrong, as a
        rung records it."""
        chat = self.chat
        if chat.status_code != 200:
            return f"failed: HTTP {chat.status_code}"
        if self.rule.finish_problem(chat.finish_reason) or not chat.content.strip():
            return f"failed: finish_reason {chat.finish_reason!r}, content {quote_answer(chat.content)}"
        lacking = self.rule.text_problem(chat.content)
        return f"failed: {lacking}" if lacking else "passed"


def run_smoke(client: QualClient, recipe: Recipe, *, label: str) -> SmokeResult:
    """Send the recipe's smoke prompt (``gates.smoke``: prompt, max_tokens) at temperature 0."""
    rule = SmokeRule.of(recipe)
    chat = client.chat({"messages": [{"role": "user", "content": rule.prompt}],
                        "max_tokens": rule.max_tokens, "temperature": 0}, label=label)
    return SmokeResult(chat, rule.max_tokens, rule)
