"""The item bank: questions with exact answers, generated from a seed, versioned and hashed.

A bank is what the ``items`` gate asks every arm: a count of questions per family (arithmetic,
recall, lists, a JSON field, a needle in the probe text; see :mod:`.families`) and an operator's
own items from a JSONL file the recipe names. It is the same on every machine and Python for the
same settings, and its identity is a SHA-256: :meth:`Bank.items_sha256` over the canonical item
list (and the operator file's content, which the items carry), :meth:`Bank.sha256` over that and
everything else that changes an answer (the bank's version, the judges' version, ``max_tokens``,
the stop rules, and the chat template as the server renders the prompts). Two arms compare item
by item only when their bank hashes match.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual.hashing import canonical_sha256, sha256_hex
from pytest_vllmqual.words import ItemFamily, ItemJudge

from ..probe import GREEDY_STOP_RULES, TEXT_VERSION, probe_text
from . import families as fam
from .judges import JUDGE_VERSION

__all__ = ["BANK_NAME", "BANK_VERSION", "CHARS_PER_TOKEN", "Bank", "BankSettings", "Item", "build_bank",
           "operator_items"]

BANK_NAME = "vllmqual-items"
BANK_VERSION = "2"
"""Version 2: easier arithmetic and recall, longer JSON lists, deeper needles, 64 answer tokens (version 1's
grades left SmolLM2-135M at 10% on arithmetic and recall, 90% and 100% on JSON and needles)."""
CHARS_PER_TOKEN = 4
"""Characters of the probe text per token, to size a needle's passage (283,755 SmolLM2 tokens for
1,151,625 characters: 4.06); the server counts the real tokens."""
_ANSWER_ROOM = 64
"""Tokens kept free beside a needle prompt's passage: the question, the template, the answer."""


@dataclass(frozen=True)
class Item:
    """One question of the bank: its id, family, grade, prompt, exact answer and judge."""

    item_id: str
    family: str
    grade: str
    prompt: str
    answer: str
    judge: ItemJudge

    def canonical(self) -> dict[str, str]:
        return {"id": self.item_id, "family": self.family, "grade": self.grade, "prompt": self.prompt,
                "answer": self.answer, "judge": self.judge.value}


def _ints(value: Any, default: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in value) if value else tuple(default)


@dataclass(frozen=True)
class BankSettings:
    """The recipe's ``gates.items``, after the model's limits are applied."""

    families: tuple[ItemFamily, ...] = fam.FAMILY_ORDER
    counts: tuple[int, ...] = (30, 30, 30, 30, 30)
    max_tokens: int = 64
    seed: int = 1
    needle_tokens: tuple[int, ...] = (4096, 5120, 6144)
    needle_depths: tuple[int, ...] = (10, 50, 90)
    #: Needle lengths asked for that the model's ``max_model_len`` does not allow.
    dropped_needle_tokens: tuple[int, ...] = ()
    operator_file: str | None = None
    max_unparsed_pct: float = 50.0
    max_hit_max_tokens_pct: float = 50.0

    @classmethod
    def from_recipe(cls, settings: Mapping[str, Any], max_model_len: int | None,
                    root: Path | None = None) -> BankSettings:
        """The recipe's settings; needle lengths that do not fit ``max_model_len`` with room for the
        answer are dropped and kept in ``dropped_needle_tokens``. A relative operator file is under
        ``root`` (the recipe's project)."""
        default = cls()
        names = [ItemFamily(str(name)) for name in settings.get("families") or default.families]
        count = settings.get("count", 30)
        counts = tuple(int(count.get(str(name), 0)) if isinstance(count, Mapping) else int(count) for name in names)
        max_tokens = int(settings.get("max_tokens") or default.max_tokens)
        asked = _ints(settings.get("needle_tokens"), default.needle_tokens)
        limit = (max_model_len - max_tokens - _ANSWER_ROOM) if max_model_len else max(asked)
        kept = tuple(n for n in asked if n <= limit)
        operator = settings.get("operator_file")
        if operator and root is not None and not Path(str(operator)).is_absolute():
            operator = Path(root) / str(operator)
        return cls(families=tuple(names), counts=counts, max_tokens=max_tokens,
                   seed=int(settings.get("seed", default.seed)), needle_tokens=kept,
                   needle_depths=_ints(settings.get("needle_depths"), default.needle_depths),
                   dropped_needle_tokens=tuple(n for n in asked if n not in kept),
                   operator_file=str(operator) if operator else None,
                   max_unparsed_pct=float(settings.get("max_unparsed_pct", default.max_unparsed_pct)),
                   max_hit_max_tokens_pct=float(settings.get("max_hit_max_tokens_pct",
                                                             default.max_hit_max_tokens_pct)))

    def to_dict(self) -> dict[str, Any]:
        return {"families": {str(f): n for f, n in zip(self.families, self.counts, strict=True)}, "max_tokens": self.max_tokens,
                "seed": self.seed, "needle_tokens": list(self.needle_tokens),
                "needle_depths_pct": list(self.needle_depths), "dropped_needle_tokens": list(self.dropped_needle_tokens),
                "max_unparsed_pct": self.max_unparsed_pct, "max_hit_max_tokens_pct": self.max_hit_max_tokens_pct}


def _family_rng(seed: int, family: ItemFamily) -> random.Random:
    """One generator per family, so adding a family or changing one count leaves the others' items alone."""
    return random.Random(int(sha256_hex(f"{BANK_NAME}/{BANK_VERSION}:{seed}:{family.value}")[:16], 16))


def _paragraph_starts(text: str, longest: int) -> list[int]:
    """Offsets where a paragraph of the text begins and ``longest`` characters still follow."""
    starts, at = [], text.find("\n\n")
    while 0 <= at < len(text) - longest:
        starts.append(at + 2)
        at = text.find("\n\n", at + 2)
    return starts


def _needles(rng: random.Random, count: int, settings: BankSettings) -> list[fam.Question]:
    if not settings.needle_tokens or count <= 0:
        return []
    shapes = [(tokens, depth) for tokens in settings.needle_tokens for depth in settings.needle_depths]
    filler = probe_text().text
    starts = _paragraph_starts(filler, max(settings.needle_tokens) * CHARS_PER_TOKEN)
    return [fam.needle(rng, i, filler, starts, shapes, CHARS_PER_TOKEN) for i in range(count)]


def _questions(family: ItemFamily, count: int, settings: BankSettings) -> list[fam.Question]:
    rng = _family_rng(settings.seed, family)
    if family is ItemFamily.NEEDLE:
        return _needles(rng, count, settings)
    make = {ItemFamily.ARITHMETIC: fam.arithmetic, ItemFamily.RECALL: fam.recall, ItemFamily.LISTS: fam.lists,
            ItemFamily.JSON_FIELD: fam.json_field}.get(family)
    if make is None:
        raise ValueError(f"gates.items: {family} is not a generated family (name the operator's items with "
                         "gates.items.operator_file)")
    return [make(rng, i) for i in range(count)]


def operator_items(path: Path) -> tuple[list[Item], dict[str, Any]]:
    """An operator's own items: one JSON object per line with ``prompt``, ``answer`` and ``judge`` (one
    of the shipped judges), optionally ``id``. A bad line is a ValueError naming the line and the fix."""
    data = Path(path).read_bytes()
    items: list[Item] = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{Path(path).name} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ValueError(f"{where} needs a non-empty \"prompt\" string")
        if not isinstance(row.get("answer"), (str, int, float)) or isinstance(row.get("answer"), bool):
            raise ValueError(f"{where} needs an \"answer\" (text or a number)")
        if row.get("judge") not in {j.value for j in ItemJudge}:
            raise ValueError(f"{where}: judge {row.get('judge')!r} is not one of "
                             f"{', '.join(j.value for j in ItemJudge)}")
        item_id = f"operator-{row.get('id') or f'{number:04d}'}"
        if any(item.item_id == item_id for item in items):
            raise ValueError(f"{where}: the id {item_id} is used twice")
        items.append(Item(item_id, ItemFamily.OPERATOR.value, "operator", row["prompt"], str(row["answer"]),
                          ItemJudge(row["judge"])))
    if not items:
        raise ValueError(f"{Path(path).name} holds no item")
    return items, {"file": Path(path).name, "sha256": sha256_hex(data), "items": len(items)}


@dataclass(frozen=True)
class Bank:
    """The questions one arm answers, and what identifies them."""

    settings: BankSettings
    items: tuple[Item, ...]
    operator: dict[str, Any] | None = field(default=None)

    def items_sha256(self) -> str:
        """The SHA-256 of the canonical item list (ids, families, grades, prompts, answers, judges)."""
        return canonical_sha256([item.canonical() for item in self.items], ascii_only=False)

    def sha256(self, chat_template_sha256: str | None) -> str:
        """The bank's identity: the items, the versions, ``max_tokens``, the stop rules and the chat template."""
        body = {"name": BANK_NAME, "version": BANK_VERSION, "judge_version": JUDGE_VERSION,
                "items": self.items_sha256(), "max_tokens": self.settings.max_tokens, "stop": GREEDY_STOP_RULES,
                "temperature": 0, "chat_template": chat_template_sha256}
        return canonical_sha256(body)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            out[item.family] = out.get(item.family, 0) + 1
        return out

    def record(self, chat_template_sha256: str | None) -> dict[str, Any]:
        """The sidecar's ``items.bank``: everything two arms must share to be compared item by item."""
        return {"name": BANK_NAME, "version": BANK_VERSION, "seed": self.settings.seed,
                "sha256": self.sha256(chat_template_sha256), "items_sha256": self.items_sha256(),
                "chat_template_sha256": chat_template_sha256, "max_tokens": self.settings.max_tokens,
                "temperature": 0, "stop": dict(GREEDY_STOP_RULES), "judge_version": JUDGE_VERSION,
                "count": len(self.items), "families": list(self.counts()), "counts": self.counts(),
                "needle_text": TEXT_VERSION if ItemFamily.NEEDLE.value in self.counts() else None,
                "operator": self.operator, "settings": self.settings.to_dict()}


def build_bank(settings: BankSettings) -> Bank:
    """The bank of ``settings``: each family's items from its own seeded generator, then the operator's."""
    items: list[Item] = []
    for family, count in zip(settings.families, settings.counts, strict=True):
        if family is ItemFamily.OPERATOR:
            continue
        for i, q in enumerate(_questions(family, count, settings)):
            items.append(Item(f"{family.value}-{i:03d}", family.value, q.grade, q.prompt, q.answer, q.judge))
    operator = None
    if settings.operator_file:
        own, operator = operator_items(Path(settings.operator_file))
        items += own
    return Bank(settings, tuple(items), operator)
