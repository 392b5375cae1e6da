"""A launcher the package does not ship, registered from outside it.

``fault-server`` starts the project's fault server (``tests/faults/fault_server.py``) as a local
process, with the recipe's serve flags, where the subprocess launcher would start vLLM: a recipe
of this kind needs no ``launcher.command``. It is the subprocess launcher with another server
argv, so the run's own machinery is what runs: the start in a new session with the run mark, the
readiness polling, the log, the teardown that verifies nothing survived.

A conftest registers it through the ``pytest_vllmqual_launchers`` hook; an installed package
would name it in the ``pytest_vllmqual.launchers`` entry-point group. Neither edits the package.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from pytest_vllmqual.launch.local_process import SubprocessLauncher
from pytest_vllmqual.launch.registry import RecipeProblem
from pytest_vllmqual.recipe.model import Recipe
from support import TESTS

__all__ = ["FAULT_SERVER_KIND", "FaultServerLauncher"]

FAULT_SERVER_KIND = "fault-server"


class FaultServerLauncher(SubprocessLauncher):
    """Starts the fault server in place of vLLM; everything else is the subprocess launcher's."""

    kind = FAULT_SERVER_KIND
    required: ClassVar[RecipeProblem | None] = None

    @classmethod
    def server_argv(cls, recipe: Recipe, port: int) -> list[str]:
        return [sys.executable, str(TESTS / "faults" / "fault_server.py"), "--model", recipe.model_location(),
                *recipe.serve_flags(host=recipe.launcher.host, port=port)]
