"""``gates.checks`` is a deprecated alias for a release: every old name is the object of the module
that owns it now, and the package itself no longer imports the alias."""

from __future__ import annotations

import importlib

from support import ROOT

from pytest_vllmqual.gates import checks

OWNERS = ("verdict", "tool_fixtures", "schema_checks", "tool_checks", "smoke", "number_answer")


def test_every_old_name_is_its_owners_object() -> None:
    owners = [importlib.import_module(f"pytest_vllmqual.gates.{name}") for name in OWNERS]
    for name in checks.__all__:
        homes = [m for m in owners if name in m.__all__]
        assert len(homes) == 1, f"{name} is owned by {len(homes)} modules"
        assert getattr(checks, name) is getattr(homes[0], name)
    assert "judge_final_number" in checks.__all__ and "release" in (checks.__doc__ or "")


def test_the_package_does_not_import_the_alias() -> None:
    users = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "pytest_vllmqual").rglob("*.py"))
             if "gates.checks import" in path.read_text(encoding="utf-8")
             or "from .checks import" in path.read_text(encoding="utf-8")]
    assert users == []
