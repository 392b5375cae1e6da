"""The real docker tests wait for the image ``make test`` builds beside the first round of tests
(``scripts/beside.sh``), then skip, with the reason, where no Docker engine can run; the terminal
summary says which way it went, so a log never hides that they did not run.

Whether they can run is known only once the build step has ended (it installs and starts the
engine), so it is decided when the first of them starts, not at collection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from docker_harness import ROOT, image_reference, unavailable_reason

_REASON = pytest.StashKey[str | None]()
SESSION_MODULE = "test_tiny_docker_session.py"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_docker: starts real containers on a real Docker engine (skipped, with the reason, "
        "where none can run)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The container session's tests go first among the tests of this folder: the build only pushes the
    image to the registry, so the session's pull (the image removed first, as it tests) is the one
    pull, and the other docker tests start from the engine's copy instead of pulling it again."""
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if item.path.parent == here]
    # a stable sort: each module's tests stay together, so the session's module fixture is set up once
    ordered = sorted((items[i] for i in slots), key=lambda item: item.path.name != SESSION_MODULE)
    for slot, item in zip(slots, ordered, strict=True):
        items[slot] = item


@pytest.fixture(scope="session")
def docker_image(pytestconfig: pytest.Config) -> str:
    """The image reference, once the build step started beside the tests has ended (at once when
    none was started); a failed build fails every docker test with the build's output."""
    waited = subprocess.run(["bash", str(ROOT / "scripts" / "beside.sh"), "wait", "docker-image"],
                            capture_output=True, text=True, check=False)
    if waited.returncode != 0:
        pytest.fail(f"the docker image build failed (exit {waited.returncode}):\n{waited.stdout[-4000:]}",
                    pytrace=False)
    reason = unavailable_reason()
    pytestconfig.stash[_REASON] = reason
    if reason is not None:
        pytest.skip(reason)
    return image_reference()


@pytest.fixture(autouse=True)
def _docker_ready(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("needs_docker"):
        request.getfixturevalue("docker_image")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _REASON not in config.stash:
        return
    reason = config.stash[_REASON]
    if reason is None:
        terminalreporter.write_line(f"docker tests: ran on a real Docker engine with {image_reference()}")
    else:
        terminalreporter.write_line(f"docker tests: SKIPPED, {reason}", yellow=True, bold=True)
