"""The shipped families of the item bank: each makes one question with an exact answer from a seeded draw.

Every draw is an integer draw of :class:`random.Random` (``randrange`` only, and a shuffle written
here on top of it), so a seed gives the same items on every Python version: no ``set`` or ``dict``
order, no string hashing, no floating-point draws. Each family has *grades*, from easy to hard, so
a small model and a large one both land somewhere in the middle; item ``i`` of a family takes grade
``i mod len(grades)``, so every grade gets its share. The grade tables are part of the bank's
version: changing one is a new :data:`~pytest_vllmqual.equivalence.items.bank.BANK_VERSION`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_vllmqual.words import ItemFamily, ItemJudge

__all__ = ["ARITHMETIC_GRADES", "FAMILY_ORDER", "FIELDS", "JSON_GRADES", "LIST_GRADES", "NAMES", "RECALL_BEFORE", "RECALL_GRADES", "Question", "arithmetic", "draw",
           "json_field", "lists", "needle", "recall", "shuffled"]

_NUMBER_ONLY = "Answer with the number only."
NAMES = ("apple", "river", "candle", "garden", "window", "pencil", "harbor", "meadow", "basket", "rocket",
         "violin", "forest", "mirror", "ladder", "button", "castle", "island", "jacket", "kettle", "lantern",
         "marble", "needle", "orange", "parrot", "quilt", "saddle", "tunnel", "valley", "wagon", "anchor",
         "bridge", "copper", "desert", "engine", "falcon", "glacier", "helmet", "igloo", "jungle", "kitten")
"""The keys of recall and JSON items: ordinary words, one token or two for most tokenizers."""
FIELDS = ("id", "price", "year", "count", "age", "score", "height", "weight", "level", "rank", "floor",
          "width", "depth", "speed", "total", "stock", "votes", "miles", "days", "pages")

ARITHMETIC_GRADES: tuple[tuple[str, str, int, int, int, int], ...] = (
    ("add-small", "+", 1, 5, 1, 4), ("add-1d", "+", 1, 9, 1, 9), ("sub-small", "-", 5, 9, 1, 4),
    ("add-2d1d", "+", 10, 99, 1, 9), ("mul-small", "*", 2, 5, 2, 5), ("add-2d", "+", 10, 99, 10, 99),
    ("sub-2d", "-", 10, 99, 10, 99), ("mul-2d1d", "*", 10, 99, 2, 9))
"""(label, operation, first operand's range, second operand's range): sums of small numbers for a
small model up to two-digit sums and products for a large one (a difference is never negative).
Half the grades are one-digit work: SmolLM2-135M got 1 of 10 right on a bank that started at
one-digit sums and climbed to three digits."""
RECALL_GRADES: tuple[int, ...] = (0, 1, 2, 4, 8, 16)
"""Other statements between the asked value and the question (the distance), one grade each.
Distance 0 asks for the last code stated, which a small model answers when it answers anything."""
RECALL_BEFORE = 1
"""Statements before the asked one (the first one stated is never asked: a model recalls it more easily)."""
LIST_GRADES: tuple[tuple[str, int], ...] = (("max", 2), ("count", 2), ("sort", 2), ("max", 3), ("count", 3),
                                           ("sort", 3), ("max", 4), ("max", 5))
"""(task, list length): name the largest, count the numbers, or sort them."""
JSON_GRADES: tuple[int, ...] = (8, 16, 24, 32)
"""Records in the object's list; the asked one, and which of its three numbers, are drawn (SmolLM2-135M
read 9 of 10 right among 1 to 8 records, so the list starts at 8)."""


@dataclass(frozen=True)
class Question:
    """One drawn question: its prompt, exact answer, judge and grade label."""

    prompt: str
    answer: str
    judge: ItemJudge
    grade: str


def draw(rng: random.Random, low: int, high: int) -> int:
    """An integer in [low, high], from an integer draw only."""
    return low + rng.randrange(high - low + 1)


def shuffled(rng: random.Random, values: Sequence[str | int]) -> list[str | int]:
    """A Fisher-Yates shuffle on ``randrange``: the same order for a seed on every Python."""
    out = list(values)
    for i in range(len(out) - 1, 0, -1):
        j = rng.randrange(i + 1)
        out[i], out[j] = out[j], out[i]
    return out


def _distinct(rng: random.Random, count: int, low: int, high: int) -> list[int]:
    out: list[int] = []
    while len(out) < count:
        value = draw(rng, low, high)
        if value not in out:
            out.append(value)
    return out


def arithmetic(rng: random.Random, grade: int) -> Question:
    """``What is 47 + 38?``: addition, subtraction and multiplication by grade."""
    label, op, a_low, a_high, b_low, b_high = ARITHMETIC_GRADES[grade % len(ARITHMETIC_GRADES)]
    a, b = draw(rng, a_low, a_high), draw(rng, b_low, b_high)
    if op == "-" and b > a:
        a, b = b, a
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return Question(f"What is {a} {op} {b}? {_NUMBER_ONLY}", str(value), ItemJudge.FINAL_NUMBER, label)


def recall(rng: random.Random, grade: int) -> Question:
    """A code stated after a few others and asked for after ``distance`` more (not the first one stated,
    which a model recalls more easily)."""
    distance = RECALL_GRADES[grade % len(RECALL_GRADES)]
    keys = [str(k) for k in shuffled(rng, NAMES)[:RECALL_BEFORE + distance + 1]]
    values = _distinct(rng, len(keys), 1000, 9999)
    lines = [f"The code for {key} is {value}." for key, value in zip(keys, values, strict=True)]
    prompt = ("Remember these codes.\n" + "\n".join(lines) +
              f"\nWhat is the code for {keys[RECALL_BEFORE]}? {_NUMBER_ONLY}")
    return Question(prompt, str(values[RECALL_BEFORE]), ItemJudge.FINAL_NUMBER, f"distance-{distance}")


def lists(rng: random.Random, grade: int) -> Question:
    """Count, find the largest of, or sort a short list of two-digit numbers."""
    task, length = LIST_GRADES[grade % len(LIST_GRADES)]
    values = _distinct(rng, length, 10, 99)
    shown = ", ".join(str(v) for v in values)
    if task == "count":
        return Question(f"How many numbers are in this list: {shown}? {_NUMBER_ONLY}", str(length),
                        ItemJudge.FINAL_NUMBER, f"count-{length}")
    if task == "max":
        return Question(f"What is the largest number in this list: {shown}? {_NUMBER_ONLY}", str(max(values)),
                        ItemJudge.FINAL_NUMBER, f"max-{length}")
    ordered = ", ".join(str(v) for v in sorted(values))
    return Question(f"Sort these numbers from smallest to largest: {shown}. Answer with the sorted numbers only, "
                    "separated by commas.", ordered, ItemJudge.NUMBER_LIST, f"sort-{length}")


def json_field(rng: random.Random, grade: int) -> Question:
    """One number of one named record in a JSON object's list of 8 to 32 records of three numbers each."""
    records = JSON_GRADES[grade % len(JSON_GRADES)]
    names = [str(k) for k in shuffled(rng, NAMES)[:records]]
    fields = [str(k) for k in shuffled(rng, FIELDS)[:3]]
    values = _distinct(rng, records * 3, 10, 999)
    rows = [", ".join([f'"name": "{name}"'] + [f'"{field}": {values[3 * r + f]}' for f, field in enumerate(fields)])
            for r, name in enumerate(names)]
    row, field = rng.randrange(records), rng.randrange(3)
    body = '{"items": [' + ", ".join("{" + text + "}" for text in rows) + "]}"
    prompt = (f"Here is a JSON object:\n{body}\nWhat is the \"{fields[field]}\" of the item named "
              f"\"{names[row]}\"? {_NUMBER_ONLY}")
    return Question(prompt, str(values[3 * row + field]), ItemJudge.FINAL_NUMBER, f"records-{records}")


def needle(rng: random.Random, grade: int, filler: str, starts: Sequence[int],
           shapes: Sequence[tuple[int, int]], chars_per_token: int) -> Question:
    """A number hidden at a chosen depth of a passage of the probe text.

    ``shapes`` are (tokens of filler, depth in percent), a token taken as ``chars_per_token``
    characters; ``starts`` the offsets in ``filler`` where a paragraph begins, one of which is drawn."""
    tokens, depth = shapes[grade % len(shapes)]
    chars = tokens * chars_per_token
    start = starts[rng.randrange(len(starts))]
    passage = filler[start:start + chars]
    cut = passage.rfind(" ", 0, max(1, chars * depth // 100)) + 1
    secret = draw(rng, 1000, 9999)
    text = f"{passage[:cut]}The secret number is {secret}. {passage[cut:]}"
    prompt = (f"Read the text below.\n\n{text}\n\nWhat is the secret number mentioned in the text? "
              f"{_NUMBER_ONLY}")
    return Question(prompt, str(secret), ItemJudge.FINAL_NUMBER, f"tokens-{tokens}-depth-{depth}")


FAMILY_ORDER: tuple[ItemFamily, ...] = (ItemFamily.ARITHMETIC, ItemFamily.RECALL, ItemFamily.LISTS,
                                        ItemFamily.JSON_FIELD, ItemFamily.NEEDLE)
"""The shipped families, in the order a bank lists them."""
