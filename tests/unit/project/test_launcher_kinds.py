"""One table from a launcher kind to its class (``launch.registry``): outside the launchers, no
module compares a recipe's ``launcher.kind`` with a kind's name or keys a table by it; it asks
the registered class instead, so a new launcher touches no existing module."""

from __future__ import annotations

import re

from support import ROOT

PACKAGE = ROOT / "pytest_vllmqual"
LAUNCHERS = [PACKAGE / "launch" / name for name in ("base.py", "local_process.py", "external.py", "registry.py", "docker")]
"""The launchers and their registry: where a kind's name may be written next to what it means
(``launch.command_line``, ``launch.readiness`` and the rest of ``launch`` are callers like any other)."""

BRANCH = re.compile(
    r"(?:==|!=|\bis(?:\s+not)?|\bin)\s*LauncherKind\.\w+"  # kind == LauncherKind.DOCKER
    r"|LauncherKind\.\w+\s*(?:==|!=|:\s*\()"  # LauncherKind.DOCKER == kind, {LauncherKind.DOCKER: (...)}
    r"|kind[\"'\]]*\s*(?:==|!=|\bis(?:\s+not)?|\bin)\s*[(\[{]?\s*[\"'](?:subprocess|docker|external)[\"']"  # == "docker"
)


def kind_branches() -> dict[str, list[int]]:
    """Lines outside the launchers that decide something by a launcher kind's name, per file."""
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path == own or path.is_relative_to(own) for own in LAUNCHERS):
            continue
        lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if BRANCH.search(line)]
        if lines:
            found[path.relative_to(ROOT).as_posix()] = lines
    return found


def test_the_pattern_finds_the_branches_it_forbids() -> None:
    for line in ('if recipe.launcher.kind is LauncherKind.DOCKER:', 'if kind == LauncherKind.EXTERNAL:',
                 'if launcher_kind != LauncherKind.DOCKER:', '    LauncherKind.SUBPROCESS: ("launcher.command",',
                 'if raw["launcher"]["kind"] == "docker":'):
        assert BRANCH.search(line), line
    for line in ('launcher_kind: str = LauncherKind.SUBPROCESS,', 'raw["launcher"] = {"kind": LauncherKind.DOCKER.value}',
                 'kind: str'):
        assert not BRANCH.search(line), line


def test_no_module_outside_the_launchers_branches_on_a_launcher_kind() -> None:
    assert kind_branches() == {}
