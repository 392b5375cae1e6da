"""The wheel is the product: it holds the gates, typed tools, quality checks, schemas, shipped
recipes and the fixture-model builder, and runs the qualification from an empty directory.

The wheel is built from a copy of the checkout (tracked and new files, nothing git ignores) and
installed with ``pip install --target`` into a temporary folder that goes first on PYTHONPATH:
the interpreter is this environment's, so vLLM and the other dependencies are reused, while
``pytest_vllmqual`` (and its data) is imported from the installed wheel, never the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fault_harness import NO_WORKER_ARGS, tiny_model_dir

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_MEMBERS = [
    "pytest_vllmqual/plugin.py",
    "pytest_vllmqual/fixtures.py",
    "pytest_vllmqual/layout.py",
    "pytest_vllmqual/schemas/recipe.schema.yaml",
    "pytest_vllmqual/schemas/report.schema.json",
    "pytest_vllmqual/equivalence/data/probe_text.txt.gz",
    "pytest_vllmqual/equivalence/data/tokenizer_sample.txt",
    "pytest_vllmqual/equivalence/data/README.md",
    "pytest_vllmqual/suites/__init__.py",
    "pytest_vllmqual/suites/test_smoke.py",
    "pytest_vllmqual/suites/test_functional.py",
    "pytest_vllmqual/suites/test_engine.py",
    "pytest_vllmqual/suites/test_capacity.py",
    "pytest_vllmqual/suites/test_load.py",
    "pytest_vllmqual/suites/test_quality.py",
    "pytest_vllmqual/suites/test_reasoning.py",
    "pytest_vllmqual/data/fixtures/recipes/tiny-cpu.yaml",
    "pytest_vllmqual/data/fixtures/recipes/393k-fp8kv.yaml",
    "pytest_vllmqual/data/fixtures/campaigns/393k.yaml",
    "pytest_vllmqual/data/fixtures/tools/typed_tools.yaml",
    "pytest_vllmqual/data/fixtures/quality/checks.yaml",
    "pytest_vllmqual/data/fixtures/model/build_tiny_model.py",
    "pytest_vllmqual/data/fixtures/model/tiny_corpus.py",
    "pytest_vllmqual/data/fixtures/model/chat_template.jinja",
]


@dataclass
class Installed:
    """The wheel, where it is installed, and how long building and installing took."""

    wheel: Path
    site: Path
    build_s: float
    install_s: float

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLMQUAL_", "PYTEST_"))}
        env["PYTHONPATH"] = str(self.site)
        env.update(extra)
        return env


def _copy_checkout(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    source, dist, site = base / "src", base / "dist", base / "site"
    _copy_checkout(source)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(source)], check=True, capture_output=True)
    build_s = time.monotonic() - started
    (wheel,) = dist.glob("pytest_vllmqual-*.whl")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    yield Installed(wheel, site, build_s, time.monotonic() - started)


def _run(installed: Installed, cwd: Path, *args: str, timeout: float = 120, **env: str
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=installed.env(**env), text=True,
                          capture_output=True, timeout=timeout)


def test_wheel_holds_the_gates_and_data(installed: Installed, record_property: pytest.RecordProperty) -> None:
    record_property("wheel_build_s", round(installed.build_s, 2))
    record_property("wheel_install_s", round(installed.install_s, 2))
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = [m for m in EXPECTED_MEMBERS if m not in names]
    assert not missing, f"the wheel lacks {missing}"
    shipped = {p.name for p in (ROOT / "fixtures" / "recipes").glob("*.yaml")}
    assert shipped <= {Path(n).name for n in names if n.startswith("pytest_vllmqual/data/fixtures/recipes/")}
    stray = [n for n in names if "/model/build/" in n or n.startswith(("tests/", "suites/", "fixtures/"))]
    # processes start in the data root: a package module there could shadow the stdlib
    stray += [n for n in names if n.startswith("pytest_vllmqual/data/") and n.count("/") == 2]
    assert not stray, f"the wheel carries build output or unmapped folders: {stray[:5]}"


def test_installed_package_is_imported_not_the_checkout(installed: Installed, tmp_path: Path) -> None:
    result = _run(installed, tmp_path, "-c", "import pytest_vllmqual.layout as l; print(l.data_root()); "
                  "print(l.checkout_root()); print(l.fixture_model_build_dir())",
                  VLLMQUAL_CACHE_DIR=str(tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    data_root, checkout, models = result.stdout.split("\n")[:3]
    assert Path(data_root) == installed.site / "pytest_vllmqual" / "data"
    assert checkout == "None"
    assert Path(models) == tmp_path / "cache" / "models"


def test_the_installed_package_loads_its_own_probe_text(installed: Installed, tmp_path: Path) -> None:
    """The probe text comes from the wheel (checked against its pinned SHA-256), not the interpreter."""
    result = _run(installed, tmp_path, "-c", "import pytest_vllmqual.equivalence.probe as p; t = p.probe_text(); "
                  "print(p.__file__); print(t.sha256, len(t.text), len(p.tokenizer_sample()))")
    assert result.returncode == 0, result.stderr
    module, loaded = result.stdout.split("\n")[:2]
    assert Path(module).is_relative_to(installed.site)
    assert loaded == "e89c5431b88a26cfa6fe67094765ded9f4c05afbe562fed17251e5b508400c90 1151625 16384"


def test_help_and_collection_from_an_empty_directory(installed: Installed, tmp_path: Path) -> None:
    result = _run(installed, tmp_path, "-m", "pytest", "--help")
    assert result.returncode == 0 and "--vllmqual-endpoint" in result.stdout, result.stderr
    result = _run(installed, tmp_path, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                  "pytest_vllmqual.suites", "--recipe=tiny-cpu", "--collect-only", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert collected[:2] == ["test_smoke.py::test_smoke", "test_engine.py::test_identity"], collected
    assert collected[-3:] == ["test_capacity.py::test_ladder", "test_capacity.py::test_concurrency",
                              "test_load.py::test_load"], collected
    assert "test_openai_sdk.py::test_openai_sdk" in collected
    result = _run(installed, tmp_path, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                  "pytest_vllmqual.suites", "--collect-only", "-k", "smoke")
    assert result.returncode == 0, result.stdout + result.stderr
    # no --recipe: collecting the shipped gates is the ask, and the shipped default recipe is used
    assert "site/pytest_vllmqual/data/fixtures/recipes/tiny-cpu.yaml" in result.stdout, result.stdout
    assert "chosen by embedded default" in result.stdout
    assert not (tmp_path / "reports").exists(), "collecting must not write a report"


@pytest.mark.real_vllm
def test_packaged_gates_qualify_tiny_cpu_from_an_empty_directory(
        installed: Installed, tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    """The packaged smoke and engine gates against a real tiny-cpu server, started from the wheel's
    recipe; the fixture model comes from the user cache (here: a copy of the checkout's build).
    Owns its server: the installed wheel's launcher starting it is what is tested, at TP=1 with the
    engine core running the model itself (``NO_WORKER_ARGS``: the packaging depends on neither)."""
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    # a copy, not a link: a stale stamp would make the packaged builder rebuild, and never into the checkout
    shutil.copytree(tiny_model_dir(), cache / "models" / "tiny-chat")
    work = tmp_path / "empty"
    work.mkdir()
    started = time.monotonic()
    result = _run(installed, work, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs", "pytest_vllmqual.suites",
                  "--recipe=tiny-cpu", "-k", "smoke or identity or kv_pool", "--junitxml=junit.xml",
                  *NO_WORKER_ARGS,
                  timeout=900, VLLMQUAL_CACHE_DIR=str(cache))
    record_property("packaged_run_s", round(time.monotonic() - started, 1))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    reports = list((work / "reports").glob("tiny-cpu-*.json"))
    assert len(reports) == 1, "the report goes to ./reports of the directory pytest runs in"
    assert "up to date" in result.stdout, "the packaged prepare step found the fixture model in the cache"
