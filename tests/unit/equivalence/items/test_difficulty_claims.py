"""The bank's difficulty claim stays documented: SmolLM2-135M-Instruct's measured accuracy per family
(``tests/data/items-smollm2-cpu.yaml``, a real run with its command and date) was measured on the
bank this code generates (same items hash, so a change of grades or prompts needs a new
measurement), the README states each family's figure and the date, and the claim the bank must
meet, at least three families between 20% and 80% (else the bank does not do its job for small
models), which version 2 of the bank meets (version 1 did not: only lists landed there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.equivalence.items.bank import BANK_VERSION, BankSettings, build_bank

ROOT = Path(__file__).resolve().parents[4]
TABLE = ROOT / "tests" / "data" / "items-smollm2-cpu.yaml"


def table() -> dict[str, Any]:
    data = yaml.safe_load(TABLE.read_text())
    assert isinstance(data, dict)
    return data


def test_the_table_was_measured_on_the_bank_this_code_generates() -> None:
    data = table()
    bank = data["bank"]
    settings = BankSettings.from_recipe({"count": bank["counts"], "seed": bank["seed"],
                                         "max_tokens": bank["max_tokens"], "needle_tokens": bank["needle_tokens"],
                                         "needle_depths": bank["needle_depths"]}, 8192)
    assert bank["version"] == BANK_VERSION
    assert build_bank(settings).items_sha256() == bank["items_sha256"], \
        "the bank changed since SmolLM2 was measured on it: measure again (the table's command) and commit it"
    assert data["command"].startswith("flock /tmp/vllm-heavy.lock ") and data["date"] and data["machine"]


def test_at_least_three_families_land_between_20_and_80_percent() -> None:
    rows = table()["families"]
    middle = [name for name, row in rows.items() if 20.0 <= row["accuracy_pct"] <= 80.0 and row["items"] >= 10]
    assert len(middle) >= 3, rows


def test_each_accuracy_is_its_count_of_correct_answers() -> None:
    for row in table()["families"].values():
        assert row["accuracy_pct"] == round(100.0 * row["correct"] / row["items"], 1)


def test_the_readme_states_the_measured_figures_and_the_date() -> None:
    data = table()
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"tests/data/{TABLE.name}" in readme and str(data["date"]) in readme
    for name, row in data["families"].items():
        assert f"`{name}` {row['accuracy_pct']:.1f}% ({row['correct']}/{row['items']})" in readme, name
