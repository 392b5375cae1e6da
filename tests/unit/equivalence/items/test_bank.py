"""The item bank: the same items and hashes from the same seed, every family's answers right by
construction, the recipe's settings within the model's limits, and an operator's own items."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_vllmqual.equivalence.items import families as fam
from pytest_vllmqual.equivalence.items.bank import BankSettings, build_bank, operator_items
from pytest_vllmqual.equivalence.items.judges import judge
from pytest_vllmqual.words import ItemFamily

SMALL = BankSettings(counts=(16, 8, 12, 6, 9), needle_tokens=(64, 128, 256))


def test_two_generations_give_the_same_items_and_hashes() -> None:
    first, second = build_bank(SMALL), build_bank(SMALL)
    assert first.items == second.items
    assert first.items_sha256() == second.items_sha256()
    assert first.sha256("t" * 64) == second.sha256("t" * 64) != first.sha256(None)


def test_a_fresh_interpreter_with_another_hash_seed_gives_the_same_hash() -> None:
    """Nothing depends on string hashing or set order: another PYTHONHASHSEED, the same bank."""
    code = ("from pytest_vllmqual.equivalence.items.bank import BankSettings, build_bank; "
            "print(build_bank(BankSettings(counts=(16, 8, 12, 6, 9), needle_tokens=(64, 128, 256))).items_sha256())")
    import os
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.strip()
    assert out == build_bank(SMALL).items_sha256()


def test_another_seed_gives_other_items_and_one_family_count_leaves_the_others_alone() -> None:
    base = build_bank(SMALL)
    assert build_bank(BankSettings(counts=SMALL.counts, seed=2, needle_tokens=SMALL.needle_tokens)).items_sha256() \
        != base.items_sha256()
    more = build_bank(BankSettings(counts=(24, 8, 12, 6, 9), needle_tokens=SMALL.needle_tokens))
    recall = [i for i in base.items if i.family == "recall"]
    assert recall == [i for i in more.items if i.family == "recall"]


def test_every_generated_item_is_right_by_its_own_judge_and_grades_are_shared_out() -> None:
    bank = build_bank(SMALL)
    assert bank.counts() == {"arithmetic": 16, "recall": 8, "lists": 12, "json_field": 6, "needle": 9}
    for item in bank.items:
        assert judge(item.judge, item.answer, item.answer).correct, item
        assert item.answer.split(",")[-1].strip() in item.prompt or item.family in ("arithmetic", "lists")
    grades = [i.grade for i in bank.items if i.family == "arithmetic"]
    assert grades == [g[0] for g in fam.ARITHMETIC_GRADES] * 2


def test_arithmetic_answers_are_the_arithmetic() -> None:
    for item in build_bank(SMALL).items:
        if item.family != "arithmetic":
            continue
        a, op, b = item.prompt.removeprefix("What is ").split("?")[0].split()
        assert int(item.answer) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def test_a_needle_sits_at_its_depth_inside_the_probe_text() -> None:
    items = [i for i in build_bank(SMALL).items if i.family == "needle"]
    assert [i.grade for i in items[:3]] == ["tokens-64-depth-10", "tokens-64-depth-50", "tokens-64-depth-90"]
    for item in items:
        assert f"The secret number is {item.answer}." in item.prompt
        passage = item.prompt.split("\n\n", 1)[1].rsplit("\n\nWhat is", 1)[0]
        depth = int(item.grade.rsplit("-", 1)[1])
        where = passage.index("The secret number") / len(passage)
        assert abs(where - depth / 100) < 0.15, (item.grade, where)


def test_the_shuffle_and_draws_use_integer_draws_only() -> None:
    assert fam.shuffled(random.Random(7), [1, 2, 3, 4]) == fam.shuffled(random.Random(7), [1, 2, 3, 4])
    assert all(10 <= fam.draw(random.Random(s), 10, 12) <= 12 for s in range(50))


def test_needle_lengths_that_do_not_fit_the_model_are_dropped() -> None:
    settings = BankSettings.from_recipe({"needle_tokens": [256, 4096], "count": 3}, 2048)
    assert settings.needle_tokens == (256,) and settings.dropped_needle_tokens == (4096,)
    assert settings.counts == (3, 3, 3, 3, 3)
    per_family = BankSettings.from_recipe({"families": ["arithmetic", "recall"], "count": {"recall": 4}}, None)
    assert per_family.families == (ItemFamily.ARITHMETIC, ItemFamily.RECALL) and per_family.counts == (0, 4)


def test_operator_items_are_read_hashed_and_part_of_the_bank(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    rows = [{"prompt": "Capital of France?", "answer": "Paris", "judge": "exact_text", "id": "paris"},
            {"prompt": "2 + 2?", "answer": 4, "judge": "final_number"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    items, record = operator_items(path)
    assert [i.item_id for i in items] == ["operator-paris", "operator-0002"] and items[1].answer == "4"
    assert record["file"] == "mine.jsonl" and record["items"] == 2 and len(record["sha256"]) == 64
    settings = BankSettings.from_recipe({"families": ["arithmetic"], "count": 2, "operator_file": "mine.jsonl"},
                                        None, tmp_path)
    bank = build_bank(settings)
    assert bank.counts() == {"arithmetic": 2, "operator": 2} and bank.operator == record
    path.write_text(path.read_text().replace("Paris", "Lyon"))
    assert build_bank(settings).items_sha256() != bank.items_sha256()


@pytest.mark.parametrize(("line", "why"), [
    ("not json", "line 1 is not JSON"),
    ('{"answer": "x", "judge": "exact_text"}', 'needs a non-empty "prompt"'),
    ('{"prompt": "x", "judge": "exact_text"}', 'needs an "answer"'),
    ('{"prompt": "x", "answer": "y", "judge": "regex"}', "judge 'regex' is not one of"),
    ('{"prompt": "x", "answer": "y", "judge": "exact_text", "id": "a"}\n'
     '{"prompt": "x", "answer": "y", "judge": "exact_text", "id": "a"}', "used twice"),
    ("", "holds no item"),
])
def test_a_bad_operator_file_names_the_line_and_the_fix(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line)
    with pytest.raises(ValueError, match=why):
        operator_items(path)


def test_the_bank_record_names_what_two_arms_must_share() -> None:
    bank = build_bank(SMALL)
    record = bank.record("c" * 64)
    assert {"name", "version", "seed", "sha256", "chat_template_sha256", "max_tokens", "stop", "judge_version",
            "count", "families"} <= set(record)
    assert record["sha256"] == bank.sha256("c" * 64) and record["count"] == len(bank.items) == 51
    assert record["families"] == ["arithmetic", "recall", "lists", "json_field", "needle"]
