"""The equivalence package's door: a curated ``__all__``, and no module outside the package
imports one of its submodules by path (the comparison above the report is the one module named)."""

from __future__ import annotations

import ast
import importlib

from support import ROOT

import pytest_vllmqual.equivalence as door

PACKAGE = ROOT / "pytest_vllmqual"
OWN_NAME = ("pytest_vllmqual.equivalence.comparison",)
"""The modules of the package an outside module may name: the comparison sits above the report, so
the package's door (below the gates) cannot re-export it."""

CURATED = {
    "the probe": ("OPEN_PROMPTS", "PRIVATE_NAME", "DepthSettings", "ProbeMemory", "ProbeSettings", "model_vocab",
                  "run_probe", "server_memory", "size_probe"),
    "the item bank and the tool replay": ("BANK_VERSION", "Item", "BankSettings", "ItemOutcome", "NumberAnswer", "TOOL_REPLAY_FAMILY",
                                          "TOOL_REPLAY_KEY", "build_bank", "judge_final_number", "run_bank",
                                          "tool_replay_range"),
    "the sidecar": ("BLOCKS_DIR", "has_answers", "load_sidecar", "publish", "write_block"),
    "the figures, the task layer and their words": ("FIGURES", "FigureSpec", "TaskSettings", "Thresholds",
                                                    "depth_lines", "fmt_interval", "tasks_line"),
    "the floor under load": ("LOAD_FLOOR_KEY", "FloorQuestions", "FloorSettings", "RecordedAnswers", "floor_levels",
                             "run_floor"),
    "the promotion rule and the layers": ("PromotionSettings", "layer_cases", "layers_lines", "promotion_section"),
}


def test_the_door_is_the_curated_list_sorted() -> None:
    curated = [name for names in CURATED.values() for name in names]
    assert len(curated) == len(set(curated))
    assert sorted(door.__all__) == sorted(curated)
    assert [name for name in door.__all__ if getattr(door, name, None) is None] == []


def _outside_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "equivalence") or path == PACKAGE / "ab" / "equivalence.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                       else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in modules
                      if m.startswith("pytest_vllmqual.equivalence.") and m not in OWN_NAME]
    return found


def test_no_outside_module_imports_a_submodule_by_path() -> None:
    assert _outside_imports() == []


def test_the_old_comparison_path_is_an_alias_of_the_new_one() -> None:
    old = importlib.import_module("pytest_vllmqual.ab.equivalence")
    new = importlib.import_module("pytest_vllmqual.equivalence.comparison")
    assert old.equivalence_section is new.equivalence_section
    assert "deprecated" in (old.__doc__ or "").lower()


def test_the_sidecar_reads_no_key_of_the_public_report() -> None:
    """What the sidecar records of the arm is read from the report above the report layer (the
    comparison's ``sidecar_arm``); the sidecar module, below the gates, is handed it."""
    source = (PACKAGE / "equivalence" / "sidecar.py").read_text()
    assert [key for key in ('"identity"', '"engine"', '"recipe"', '"gates"') if key in source] == []
