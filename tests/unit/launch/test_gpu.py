"""GPU hardware summary and exclusivity preflight.

These tests use a fake ``pynvml`` module because this machine has no GPU and no NVML
library; the fake follows nvidia-ml-py's function names, constants and error class, and
raises NotSupported for NVLink queries on PCIe-only devices as the real library does. One
test runs against the real ``pynvml`` here and must report "n/a".
"""

from __future__ import annotations

import json
import re
import sys
import types
from dataclasses import dataclass, field

import pytest

from pytest_vllmqual.errors import LaunchError
from pytest_vllmqual.launch import gpu

GIB = 1024**3


class FakeNVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int = 1 * GIB  # NVML's field name


@dataclass
class FakeDevice:
    name: str = "NVIDIA H200"
    memory_bytes: int = 141 * GIB
    nvlinks_up: int = 0  # 0 → PCIe-only: NVLink queries raise NotSupported
    compute_mode: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    uuid: str = "GPU-12345678-1234-1234-1234-123456789abc"
    bus_id: str = "00000000:18:00.0"


def fake_pynvml(devices: list[FakeDevice], *, init_fails: bool = False) -> types.ModuleType:
    """A module with the pynvml surface gpu.py uses, plus UUID/bus-id calls it must not use."""
    module = types.ModuleType("pynvml")
    state = {"initialised": 0, "uuid_calls": 0}
    module.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    module.NVML_FEATURE_ENABLED = 1  # type: ignore[attr-defined]
    module.NVML_NVLINK_MAX_LINKS = 18  # type: ignore[attr-defined]
    module.NVML_COMPUTEMODE_DEFAULT = 0  # type: ignore[attr-defined]
    module.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3  # type: ignore[attr-defined]

    def init() -> None:
        if init_fails:
            raise FakeNVMLError("NVML Shared Library Not Found")
        state["initialised"] += 1

    def shutdown() -> None:
        state["initialised"] -= 1

    def nvlink_state(device: FakeDevice, link: int) -> int:
        if device.nvlinks_up == 0:
            raise FakeNVMLError("Not Supported")
        if link >= 18:
            raise FakeNVMLError("Invalid Argument")
        return 1 if link < device.nvlinks_up else 0

    def forbidden(_device: FakeDevice) -> str:
        state["uuid_calls"] += 1
        raise AssertionError("gpu.py must not read UUIDs or bus ids")

    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = shutdown  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(devices)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: devices[i]  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda d: d.name  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = lambda d: types.SimpleNamespace(total=d.memory_bytes)  # type: ignore[attr-defined]
    module.nvmlDeviceGetNvLinkState = nvlink_state  # type: ignore[attr-defined]
    module.nvmlSystemGetDriverVersion = lambda: b"570.86.15"  # type: ignore[attr-defined]
    module.nvmlDeviceGetComputeRunningProcesses = lambda d: list(d.processes)  # type: ignore[attr-defined]
    module.nvmlDeviceGetComputeMode = lambda d: d.compute_mode  # type: ignore[attr-defined]
    module.nvmlDeviceGetUUID = forbidden  # type: ignore[attr-defined]
    module.nvmlDeviceGetPciInfo = forbidden  # type: ignore[attr-defined]
    module.state = state  # type: ignore[attr-defined]
    return module


def install(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType) -> types.ModuleType:
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


UUID_OR_BUS = re.compile(r"GPU-[0-9a-f]{8}|[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]", re.IGNORECASE)


def test_summary_reports_nvlink_pair_without_identifiers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, fake_pynvml([FakeDevice(nvlinks_up=18), FakeDevice(nvlinks_up=18)]))
    summary = gpu.hardware_summary()
    assert summary == {
        "source": "nvml",
        "gpu_model": "NVIDIA H200",
        "gpu_count": 2,
        "gpu_memory_gib": 141.0,
        "interconnect": "NVLink",
        "driver_version": "570.86.15",
    }
    assert not UUID_OR_BUS.search(json.dumps(summary))
    assert fake.state == {"initialised": 0, "uuid_calls": 0}  # NVML shut down again, no UUID read


def test_summary_reports_pcie_when_nvlink_is_not_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    devices = [FakeDevice(name="NVIDIA RTX PRO 6000 Blackwell", memory_bytes=96 * GIB) for _ in range(2)]
    install(monkeypatch, fake_pynvml(devices))
    summary = gpu.hardware_summary()
    assert summary["interconnect"] == "PCIe"
    assert summary["gpu_model"] == "NVIDIA RTX PRO 6000 Blackwell"
    assert summary["gpu_memory_gib"] == 96.0


def test_summary_limits_to_assigned_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeDevice(), FakeDevice(), FakeDevice(name="NVIDIA L4", memory_bytes=22 * GIB)]))
    summary = gpu.hardware_summary([2])
    assert (summary["gpu_count"], summary["gpu_model"], summary["gpu_memory_gib"]) == (1, "NVIDIA L4", 22.0)


def test_preflight_passes_on_free_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeDevice(), FakeDevice()]))
    result = gpu.exclusivity_preflight([0, 1], require_exclusive_mode=False)
    assert result["status"] == "pass"
    assert result["other_processes"] == 0
    gpu.raise_if_refused(result)  # does not raise


def test_preflight_refuses_busy_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeDevice(), FakeDevice(processes=[FakeProcess(4242), FakeProcess(4243)])]))
    result = gpu.exclusivity_preflight([0, 1], require_exclusive_mode=False)
    assert result == {"status": "fail", "reason": "GPU 1 has 2 other compute process(es)", "other_processes": 2}
    with pytest.raises(LaunchError) as info:
        gpu.raise_if_refused(result)
    assert info.value.status == "gpu_busy"
    assert "GPU 1 has 2 other compute process(es)" in str(info.value)


def test_preflight_ignores_busy_gpu_that_is_not_assigned(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeDevice(), FakeDevice(processes=[FakeProcess(4242)])]))
    assert gpu.exclusivity_preflight([0], require_exclusive_mode=False)["status"] == "pass"


def test_preflight_refuses_when_exclusive_mode_required_and_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeDevice(compute_mode=3), FakeDevice(compute_mode=0)]))
    result = gpu.exclusivity_preflight([0, 1], require_exclusive_mode=True)
    assert result["status"] == "fail"
    assert result["reason"] == "GPU 1 is not in EXCLUSIVE_PROCESS compute mode"


def test_preflight_passes_when_exclusive_mode_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeDevice(compute_mode=3), FakeDevice(compute_mode=3)]))
    result = gpu.exclusivity_preflight(None, require_exclusive_mode=True)
    assert result["status"] == "pass"
    assert "exclusive compute mode" in result["reason"]


def test_preflight_refuses_unknown_index(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeDevice()]))
    result = gpu.exclusivity_preflight([0, 3], require_exclusive_mode=False)
    assert result["status"] == "fail"
    assert "[3]" in result["reason"]


def test_preflight_fails_closed_when_a_query_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, fake_pynvml([FakeDevice()]))

    def lost(_device: FakeDevice) -> list[FakeProcess]:
        raise FakeNVMLError("GPU is lost")

    fake.nvmlDeviceGetComputeRunningProcesses = lost  # type: ignore[attr-defined]
    result = gpu.exclusivity_preflight([0], require_exclusive_mode=False)
    assert result["status"] == "fail"
    assert "could not be verified" in result["reason"]
    assert fake.state["initialised"] == 0


def test_no_nvml_library_is_not_applicable_never_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([], init_fails=True))
    assert gpu.exclusivity_preflight([0], require_exclusive_mode=True)["status"] == "n/a"
    assert gpu.hardware_summary()["source"] == "n/a"
    assert gpu.compute_process_pids() is None


def test_zero_gpus_is_not_applicable(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([]))
    assert gpu.exclusivity_preflight(None, require_exclusive_mode=False)["status"] == "n/a"
    assert gpu.hardware_summary()["interconnect"] == "n/a"


def test_compute_process_pids_and_release_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = FakeDevice(processes=[FakeProcess(10), FakeProcess(11)])
    install(monkeypatch, fake_pynvml([busy]))
    assert gpu.compute_process_pids() == {10, 11}
    assert gpu.wait_for_gpu_release({10}, timeout_s=0.0) == {11}
    busy.processes = [FakeProcess(10)]
    assert gpu.wait_for_gpu_release({10}, timeout_s=0.0) == set()


def test_this_machine_without_gpu_reports_not_applicable() -> None:
    """The real pynvml on this GPU-less machine: the check did not run, so it is n/a."""
    pytest.importorskip("pynvml")
    summary = gpu.hardware_summary()
    if summary["source"] == "nvml":
        pytest.skip("this machine has a working NVML; the n/a path is covered by the fakes")
    assert summary == {
        "source": "n/a", "gpu_model": "n/a", "gpu_count": 0,
        "gpu_memory_gib": None, "interconnect": "n/a", "driver_version": "n/a",
    }
    result = gpu.exclusivity_preflight([0], require_exclusive_mode=False)
    assert result["status"] == "n/a"
    assert result["other_processes"] == 0
