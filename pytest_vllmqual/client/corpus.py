"""Deterministic, natural-looking English filler text for exact-length prompts.

Capacity probes need long prompts that look like prose to the tokenizer (varied words,
punctuation, paragraph breaks), not one repeated token and not random bytes: both of those
tokenize atypically and can make prefill figures unrepresentative. Sentences come from a
small grammar over fixed word lists, driven by ``random.Random(seed)``, so the same seed
always gives the same text on every machine and Python version (``Random.choices`` and
``Random.choice`` are stable across CPython releases for a given seed).

The text is a *stream*: ``filler_text(seed, n)`` is a prefix of ``filler_text(seed, m)`` for
``n < m``, so asking for more text never changes text already produced.
"""

from __future__ import annotations

import functools
import random

DETERMINERS = ("the", "a", "every", "one", "that", "this", "each", "some", "another", "no")

ADJECTIVES = (
    "quiet", "early", "narrow", "bright", "careful", "distant", "heavy", "gentle", "sudden",
    "patient", "silver", "broken", "ancient", "steady", "curious", "simple", "hidden", "open",
    "warm", "cold", "tall", "small", "crowded", "empty", "green", "northern", "southern",
    "wooden", "famous", "ordinary", "private", "public", "formal", "rough", "smooth", "busy",
    "honest", "clever", "tired", "golden", "rapid", "slow", "long", "short", "deep", "shallow",
    "clear", "cloudy", "dry", "wet", "local", "foreign", "modern", "rural", "urban", "young",
    "old", "proud", "humble", "strange", "familiar", "loud", "soft", "sharp", "plain", "rare",
)

NOUNS = (
    "river", "village", "teacher", "engine", "garden", "letter", "market", "window", "harbor",
    "bridge", "forest", "station", "painter", "kitchen", "library", "mountain", "island",
    "farmer", "doctor", "student", "merchant", "sailor", "council", "museum", "orchard",
    "lantern", "journey", "meadow", "valley", "tower", "record", "report", "signal", "ledger",
    "workshop", "camera", "basket", "ribbon", "pocket", "compass", "notebook", "blanket",
    "candle", "mirror", "shelter", "factory", "carpet", "fountain", "pilot", "captain",
    "neighbor", "traveler", "musician", "writer", "engineer", "builder", "baker", "gardener",
    "clock", "table", "ladder", "wagon", "barrel", "stone", "field", "road", "coast", "city",
    "school", "office", "theater", "stadium", "hospital", "chapel", "square", "tunnel",
    "canal", "lake", "storm", "winter", "summer", "morning", "evening", "season", "harvest",
    "festival", "meeting", "lesson", "question", "answer", "story", "song", "map", "plan",
)

VERBS = (
    "carried", "noticed", "repaired", "visited", "described", "followed", "measured",
    "painted", "opened", "closed", "crossed", "watched", "remembered", "collected", "moved",
    "finished", "started", "checked", "cleaned", "built", "found", "kept", "left", "reached",
    "studied", "answered", "explained", "prepared", "protected", "shared", "signed", "tested",
    "counted", "weighed", "copied", "sorted", "named", "guided", "carved", "planted",
    "borrowed", "returned", "delivered", "recorded", "improved", "covered", "lifted", "joined",
)

INTRANSITIVE_VERBS = (
    "waited", "rested", "arrived", "laughed", "listened", "wandered", "paused", "returned",
    "worked", "travelled", "slept", "hesitated", "agreed", "continued", "vanished", "appeared",
)

ADVERBS = (
    "slowly", "quickly", "quietly", "carefully", "eventually", "suddenly", "gladly", "often",
    "rarely", "finally", "nearly", "barely", "openly", "gently", "firmly", "patiently",
    "certainly", "happily", "briefly", "simply",
)

PREPOSITIONS = (
    "near", "behind", "beside", "under", "above", "across", "along", "beyond", "inside",
    "outside", "around", "toward", "past", "without", "within", "before", "after", "between",
)

CONNECTIVES = (
    "Later", "Meanwhile", "Afterwards", "By noon", "That winter", "In the end", "At first",
    "Even so", "For a while", "Before dawn", "Once again", "On most days",
)

NUMBERS = (
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "twenty",
    "forty", "a hundred",
)

_SENTENCE_POOL_SIZE = 8192
_BLOCK = 1024
_PARAGRAPH_EVERY = 6  # on average, one sentence in this many ends its paragraph


def _noun_phrase(rng: random.Random) -> str:
    determiner = rng.choice(DETERMINERS)
    words = f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}" if rng.random() < 0.5 else rng.choice(NOUNS)
    if determiner == "a" and words[0] in "aeiou":
        determiner = "an"
    return f"{determiner} {words}"


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _sentence(rng: random.Random) -> str:
    """One grammatical-looking sentence, capitalised and punctuated."""
    shape = rng.randrange(7)
    if shape == 0:
        body = f"{_noun_phrase(rng)} {rng.choice(VERBS)} {_noun_phrase(rng)}"
    elif shape == 1:
        body = (
            f"{_noun_phrase(rng)} {rng.choice(ADVERBS)} {rng.choice(VERBS)} "
            f"{_noun_phrase(rng)} {rng.choice(PREPOSITIONS)} {_noun_phrase(rng)}"
        )
    elif shape == 2:
        body = (
            f"{rng.choice(CONNECTIVES)}, {_noun_phrase(rng)} {rng.choice(INTRANSITIVE_VERBS)} "
            f"{rng.choice(PREPOSITIONS)} {_noun_phrase(rng)}"
        )
    elif shape == 3:
        body = (
            f"{_noun_phrase(rng)} {rng.choice(VERBS)} {rng.choice(NUMBERS)} "
            f"{_plural(rng.choice(NOUNS))}, and {_noun_phrase(rng)} {rng.choice(INTRANSITIVE_VERBS)}"
        )
    elif shape == 4:
        body = (
            f"{_noun_phrase(rng)} {rng.choice(INTRANSITIVE_VERBS)} {rng.choice(ADVERBS)} "
            f"because {_noun_phrase(rng)} {rng.choice(VERBS)} {_noun_phrase(rng)}"
        )
    elif shape == 5:
        body = (
            f"{_noun_phrase(rng)} was {rng.choice(ADJECTIVES)}, but {_noun_phrase(rng)} "
            f"{rng.choice(VERBS)} it {rng.choice(PREPOSITIONS)} {_noun_phrase(rng)}"
        )
    else:
        body = (
            f"{rng.choice(PREPOSITIONS)} {_noun_phrase(rng)}, {_noun_phrase(rng)} "
            f"{rng.choice(VERBS)} {_noun_phrase(rng)} {rng.choice(ADVERBS)}"
        )
    end = "?" if shape == 5 and rng.random() < 0.1 else "."
    return body[0].upper() + body[1:] + end


@functools.lru_cache(maxsize=16)
def sentence_pool(seed: int) -> tuple[str, ...]:
    """The pool of sentences for one random seed, each with its trailing separator (space or paragraph break)."""
    rng = random.Random(f"vllmqual-corpus-pool-{seed}")
    pool = []
    for _ in range(_SENTENCE_POOL_SIZE):
        separator = "\n\n" if rng.randrange(_PARAGRAPH_EVERY) == 0 else " "
        pool.append(_sentence(rng) + separator)
    return tuple(pool)


def filler_text(seed: int, min_chars: int) -> str:
    """``min_chars`` characters of prose, starting with a space, prefix-stable per seed.

    Built in bulk (``Random.choices`` over a cached sentence pool, then one join) because a
    400,000-token prompt is about two million characters and must cost well under a second.
    """
    pool = sentence_pool(seed)
    mean_len = sum(len(s) for s in pool[:256]) / 256
    rng = random.Random(f"vllmqual-corpus-stream-{seed}")
    chunks: list[str] = [" "]
    produced = 1
    while produced < min_chars:
        # Fixed block size keeps the stream prefix-stable whatever min_chars is.
        blocks_needed = max(1, int((min_chars - produced) / (mean_len * _BLOCK)) + 1)
        for _ in range(blocks_needed):
            block = "".join(rng.choices(pool, k=_BLOCK))
            chunks.append(block)
            produced += len(block)
    return "".join(chunks)[:min_chars]


# Short, common words, most frequent first: in any tokenizer trained on English most of them
# are one token when preceded by a space, which makes them the unit steps of the final length
# correction. Small-vocabulary tokenizers are searched in this order.
PAD_WORD_CANDIDATES = (
    "the", "a", "and", "of", "to", "in", "is", "it", "no", "one", "two", "on", "that", "for",
    "as", "at", "by", "we", "he", "or", "an", "be", "so", "do", "up", "if", "my", "me", "us",
    "go", "was", "but", "not", "all", "can", "had", "her", "his", "our", "out", "you", "day",
    "way", "new", "now", "old", "see", "who", "did", "its", "let", "say", "she", "too", "use",
    "city", "river", "stone", "road", "field", "lake", "map", "song", "plan", "clock", "table",
    "early", "quiet", "warm", "cold", "tall", "small", "open", "clear", "long", "deep", "dry",
)

__all__ = ["ADJECTIVES", "NOUNS", "PAD_WORD_CANDIDATES", "VERBS", "filler_text", "sentence_pool"]
