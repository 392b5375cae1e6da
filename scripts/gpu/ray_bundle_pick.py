"""Which wheels of the Ray bundle a host needs: Ray itself, and each dependency the host lacks.

A dependency the host (or the install target, on PYTHONPATH) already has at a version that every
bundled wheel's requirements accept is left out, so the target does not shadow a package the
host's torch or vLLM was tested with. Prints the wheels to install, one per line; notes on stderr.

    PYTHONPATH=/tmp/site python3 scripts/gpu/ray_bundle_pick.py ray-*.whl deps/*.whl

Runs on the offline host, so it uses only the standard library and the ``packaging`` that pip
vendors (pip is what installs the wheels anyway).
"""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name


def wheel_name(wheel: Path) -> str:
    """The distribution a wheel file installs, normalised (``PyYAML`` and ``pyyaml`` are one)."""
    return canonicalize_name(wheel.name.split("-", 1)[0])


def run_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's ``Requires-Dist`` lines that apply here without any extra."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(meta).decode("utf-8"))
    requirements = [Requirement(line) for line in message.get_all("Requires-Dist") or []]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def pick(wheels: list[Path]) -> list[Path]:
    """Ray's wheel, then every dependency wheel that is missing here or refused by a requirement."""
    specs: dict[str, list[Requirement]] = {}
    for wheel in wheels:
        for requirement in run_requirements(wheel):
            specs.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    chosen: list[Path] = []
    for wheel in wheels:
        name = wheel_name(wheel)
        have = None if name == "ray" else installed_version(name)
        refused = [str(r) for r in specs.get(name, []) if have is not None and not r.specifier.contains(have, True)]
        if have is not None and not refused:
            print(f"keep the host's {name} {have}", file=sys.stderr)
            continue
        why = "Ray itself" if name == "ray" else "not here" if have is None else \
            f"{have} here, but {', '.join(refused)} is needed"
        print(f"install {wheel.name} ({why})", file=sys.stderr)
        chosen.append(wheel)
    return chosen


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: ray_bundle_pick.py WHEEL...", file=sys.stderr)
        return 2
    for wheel in pick([Path(a) for a in argv]):
        print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
