"""The tool-call replay's cases: the typed tool prompts asked again under other tool lists.

A replay case is one of the recipe's typed tool prompts (``gates.tools.fixtures``, else the shipped
twenty) sent with a tool list and, sometimes, a system message or a reasoning effort. The cases
are drawn from a seed, so every arm of a comparison is asked exactly the same requests, and the
bank is hashed over every request it sends: two arms compare only on the same hash.

The variants stay inside what the fixture model was trained on (``fixtures/model/tiny_corpus.py``):
each prompt is asked verbatim, never with new argument values (the model memorised its prompts and
has no copy skill); the tool list is either all the tools in file order (as the typed tools gate
sends it) or the called tool with up to three others in a random order; the system message is
absent or one of the corpus's three; the reasoning effort is absent or one of its six.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllmqual.hashing import canonical_sha256

from .tool_fixtures import ToolCase

__all__ = ["BANK_NAME", "BANK_VERSION", "DEFAULT_COUNT", "DEFAULT_SEED", "EFFORTS", "SYSTEM_PROMPTS", "ReplayBank",
           "ReplayCase", "build_bank"]

BANK_NAME = "typed-tools-replay"
BANK_VERSION = 1
"""Raise it when the way cases are drawn changes: the hash changes with it either way."""
DEFAULT_COUNT = 100
DEFAULT_SEED = 43
SYSTEM_PROMPTS = ("You are a helpful assistant.", "You are a concise assistant.", "Answer briefly.")
"""The fixture model's training corpus's system messages (a case has one of them or none)."""
EFFORTS = ("low", "medium", "high", "max", "minimal", "xhigh")
"""The corpus's reasoning efforts (sent as ``chat_template_kwargs.reasoning_effort``)."""
_SYSTEM_SHARE = 0.35
_EFFORT_SHARE = 0.5
_MAX_SUBSET = 4


@dataclass(frozen=True)
class ReplayCase:
    """One request of the replay: which tool should be called, under which tool list and system."""

    case_id: str
    tool: str
    tools: tuple[str, ...]
    """The tool names sent, in the order sent."""
    system: str | None = None
    effort: str | None = None

    @property
    def shape(self) -> str:
        """``all`` (every tool, in file order) or ``subset-N`` (the tool and N-1 others)."""
        return "all" if self.case_id.startswith("all-") else f"subset-{len(self.tools)}"

    def messages(self, fixture: ToolCase) -> list[dict[str, Any]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": fixture.prompt}]

    def body(self, fixtures: Mapping[str, ToolCase], tool_choice: str, max_tokens: int) -> dict[str, Any]:
        """The chat request (without the model name) at temperature 0."""
        choice: Any = {"type": "function", "function": {"name": self.tool}} if tool_choice == "named" else tool_choice
        body: dict[str, Any] = {"messages": self.messages(fixtures[self.tool]),
                                "tools": [fixtures[name].openai_tool() for name in self.tools],
                                "tool_choice": choice, "max_tokens": max_tokens, "temperature": 0}
        if self.effort:
            body["chat_template_kwargs"] = {"reasoning_effort": self.effort}
        return body


@dataclass(frozen=True)
class ReplayBank:
    """The replay's cases and what decides them; ``sha256`` covers every request and expected call."""

    seed: int
    tool_choice: str
    max_tokens: int
    cases: tuple[ReplayCase, ...]
    fixtures: tuple[ToolCase, ...]

    @property
    def by_name(self) -> dict[str, ToolCase]:
        return {fixture.name: fixture for fixture in self.fixtures}

    def requests(self) -> list[dict[str, Any]]:
        fixtures = self.by_name
        return [case.body(fixtures, self.tool_choice, self.max_tokens) for case in self.cases]

    @property
    def sha256(self) -> str:
        fixtures = self.by_name
        hashed = {"name": BANK_NAME, "version": BANK_VERSION, "seed": self.seed,
                  "cases": [{"id": case.case_id, "request": body, "expected": {"name": case.tool,
                                                                              "arguments": fixtures[case.tool].expected}}
                            for case, body in zip(self.cases, self.requests(), strict=True)]}
        return canonical_sha256(hashed)

    def describe(self) -> dict[str, Any]:
        """The bank as the sidecar names it (the chat template's fingerprint is the gate's to add)."""
        shapes: dict[str, int] = {}
        for case in self.cases:
            shapes[case.shape] = shapes.get(case.shape, 0) + 1
        return {"name": BANK_NAME, "version": BANK_VERSION, "seed": self.seed, "sha256": self.sha256,
                "count": len(self.cases), "tool_choice": self.tool_choice, "max_tokens": self.max_tokens,
                "tools": len(self.fixtures), "shapes": shapes,
                "judge": "exactly one call, naming the expected tool, its arguments valid against the tool's "
                         "JSON schema and equal to the expected arguments"}


def _case(rng: random.Random, fixtures: Sequence[ToolCase], index: int, number: int, everything: bool) -> ReplayCase:
    tool = fixtures[index].name
    if everything:
        tools = tuple(f.name for f in fixtures)
    else:
        others = [f.name for f in fixtures if f.name != tool]
        chosen = [tool, *rng.sample(others, min(len(others), rng.randint(1, _MAX_SUBSET) - 1))]
        rng.shuffle(chosen)
        tools = tuple(chosen)
    system = rng.choice(SYSTEM_PROMPTS) if rng.random() < _SYSTEM_SHARE else None
    effort = rng.choice(EFFORTS) if rng.random() < _EFFORT_SHARE else None
    prefix = "all" if everything else "sub"
    return ReplayCase(f"{prefix}-{number:03d}-{tool}", tool, tools, system, effort)


def build_bank(fixtures: Sequence[ToolCase], *, count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED,
               tool_choice: str = "auto", max_tokens: int = 256, all_share: float = 0.2) -> ReplayBank:
    """``count`` cases, each tool in turn: a share ``all_share`` of the rounds sends every tool in
    file order, the others a subset; the same arguments give the same cases and hash."""
    if not fixtures:
        raise ValueError("the tool-call replay needs at least one typed tool")
    rng = random.Random(f"{BANK_NAME}/{BANK_VERSION}/{seed}")
    every = max(1, round(1 / all_share)) if all_share > 0 else 0
    cases = []
    for number in range(count):
        round_number, index = divmod(number, len(fixtures))
        everything = bool(every) and round_number % every == 0
        cases.append(_case(rng, fixtures, index, number, everything))
    return ReplayBank(seed, tool_choice, max_tokens, tuple(cases), tuple(fixtures))
