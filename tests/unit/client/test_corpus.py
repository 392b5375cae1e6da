"""The filler corpus: deterministic, prefix-stable, prose-like."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

from support import ROOT

from pytest_vllmqual.client.corpus import PAD_WORD_CANDIDATES, filler_text, sentence_pool


def test_same_seed_same_text_and_longer_text_extends_it() -> None:
    short, long = filler_text(5, 10_000), filler_text(5, 300_000)
    assert len(short) == 10_000 and len(long) == 300_000
    assert long.startswith(short)
    assert filler_text(6, 10_000) != short


def test_text_does_not_depend_on_the_interpreter_hash_seed() -> None:
    code = "from pytest_vllmqual.client.corpus import filler_text; print(filler_text(3, 5000))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1


def test_text_reads_like_prose() -> None:
    text = filler_text(9, 50_000)
    assert text.startswith(" ") and text[1].isupper()
    sentences = re.split(r"(?<=[.?])\s+", text.strip())
    assert len(sentences) > 300
    assert all(sentence[0].isupper() for sentence in sentences[:-1])
    words = Counter(re.findall(r"[a-z]+", text.lower()))
    assert len(words) > 200
    assert words.most_common(1)[0][1] / sum(words.values()) < 0.1
    assert " a early" not in text and "librarys" not in text
    assert text.count("\n\n") > 20


def test_sentence_pool_is_cached_per_seed_and_pads_are_unique() -> None:
    assert sentence_pool(1) is sentence_pool(1)
    assert sentence_pool(1) != sentence_pool(2)
    assert len(set(PAD_WORD_CANDIDATES)) == len(PAD_WORD_CANDIDATES)
