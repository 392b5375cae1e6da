"""GPU facts and the exclusivity preflight, read through NVML (``pynvml`` from nvidia-ml-py).

Two uses: the report's hardware section (model, count, memory, interconnect, driver; never a
UUID or a PCI bus id, which identify a machine), and the refusal to start a managed server
on GPUs another compute process already uses, because a shared GPU makes every capacity and
timing number meaningless. Where there is no GPU or no NVML the answer is "n/a", never
"pass": the check did not run, so it cannot have passed.

``pynvml`` is imported when a function runs (not at import time) so that this module loads
on machines without it, and so that tests can put a fake module in ``sys.modules``.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from pytest_vllmqual.errors import LaunchError, NvmlQueryFailed, NvmlUnavailable
from pytest_vllmqual.records import StartupStatus

__all__ = [
    "compute_process_pids",
    "exclusivity_preflight",
    "hardware_summary",
    "raise_if_refused",
    "wait_for_gpu_release",
]

_GIB = 1024**3
_NVLINK_MAX_LINKS_FALLBACK = 18


@contextmanager
def _nvml_session() -> Iterator[ModuleType]:
    """Initialise NVML for one query and always shut it down again."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as exc:
        raise NvmlUnavailable(f"pynvml is not installed ({exc})") from None
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except nvml_error as exc:
        raise NvmlUnavailable(f"NVML could not be initialised: {exc}") from None
    try:
        yield nvml
    except nvml_error as exc:
        raise NvmlQueryFailed(f"NVML query failed: {exc}") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml_error:
            pass


def _text(value: Any) -> str:
    """NVML returns bytes in old bindings and str in new ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _has_active_nvlink(nvml: ModuleType, handle: Any) -> bool:
    """True when at least one NVLink of the device is up. PCIe-only devices raise NotSupported."""
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS_FALLBACK)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) == enabled:
                return True
        except nvml_error:
            continue
    return False


def _not_available_summary() -> dict[str, Any]:
    return {
        "source": "n/a",
        "gpu_model": "n/a",
        "gpu_count": 0,
        "gpu_memory_gib": None,
        "interconnect": "n/a",
        "driver_version": "n/a",
    }


def hardware_summary(gpu_indexes: list[int] | None = None) -> dict[str, Any]:
    """The report's hardware facts for the given NVML indexes (all GPUs when None).

    Contains model, count, per-GPU memory in GiB, interconnect ("NVLink" when any NVLink of
    the GPUs is up, else "PCIe") and driver version. It deliberately holds no UUID and no bus
    id. Mixed models are joined with " + " and the smallest memory is reported.
    """
    try:
        with _nvml_session() as nvml:
            count = int(nvml.nvmlDeviceGetCount())
            indexes = list(range(count)) if gpu_indexes is None else [i for i in gpu_indexes if 0 <= i < count]
            if not indexes:
                return _not_available_summary()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indexes]
            models = sorted({_text(nvml.nvmlDeviceGetName(h)) for h in handles})
            memories = [int(nvml.nvmlDeviceGetMemoryInfo(h).total) for h in handles]
            nvlink = any(_has_active_nvlink(nvml, h) for h in handles)
            return {
                "source": "nvml",
                "gpu_model": " + ".join(models),
                "gpu_count": len(handles),
                "gpu_memory_gib": round(min(memories) / _GIB, 1),
                "interconnect": "NVLink" if nvlink else "PCIe",
                "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            }
    except (NvmlUnavailable, NvmlQueryFailed):
        return _not_available_summary()


def _compute_pids(nvml: ModuleType, handle: Any) -> set[int]:
    """PIDs of compute (and MPS compute) processes on one device, as NVML reports them."""
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    pids: set[int] = {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    mps = getattr(nvml, "nvmlDeviceGetMPSComputeRunningProcesses", None)
    if mps is not None:
        try:
            pids |= {int(p.pid) for p in mps(handle)}
        except nvml_error:
            pass
    return pids


def exclusivity_preflight(gpu_indexes: list[int] | None, require_exclusive_mode: bool) -> dict[str, Any]:
    """Check that the assigned GPUs are free (and exclusive, when asked) before a managed start.

    ``gpu_indexes`` are NVML indexes (not CUDA_VISIBLE_DEVICES positions); None means every
    GPU. Returns {status: pass|fail|n/a, reason, other_processes}. ``fail`` when another
    compute process is on an assigned GPU, when an index does not exist, or when exclusive
    compute mode is required and not set. ``n/a`` when NVML or a GPU is not there.
    """
    try:
        with _nvml_session() as nvml:
            count = int(nvml.nvmlDeviceGetCount())
            if count == 0:
                return {"status": "n/a", "reason": "NVML reports no GPU on this machine", "other_processes": 0}
            indexes = list(range(count)) if gpu_indexes is None else list(gpu_indexes)
            missing = [i for i in indexes if not 0 <= i < count]
            if missing:
                return {
                    "status": "fail",
                    "reason": f"GPU index(es) {missing} do not exist; NVML sees {count} GPU(s)",
                    "other_processes": 0,
                }
            own_pid = os.getpid()
            problems: list[str] = []
            other = 0
            exclusive_mode = getattr(nvml, "NVML_COMPUTEMODE_EXCLUSIVE_PROCESS", 3)
            for index in indexes:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                pids = _compute_pids(nvml, handle) - {own_pid}
                if pids:
                    other += len(pids)
                    problems.append(f"GPU {index} has {len(pids)} other compute process(es)")
                if require_exclusive_mode and nvml.nvmlDeviceGetComputeMode(handle) != exclusive_mode:
                    problems.append(f"GPU {index} is not in EXCLUSIVE_PROCESS compute mode")
            if problems:
                return {"status": "fail", "reason": "; ".join(problems), "other_processes": other}
            mode = " in exclusive compute mode" if require_exclusive_mode else ""
            return {
                "status": "pass",
                "reason": f"GPU(s) {indexes} have no other compute process{mode}",
                "other_processes": 0,
            }
    except NvmlUnavailable as exc:
        return {"status": "n/a", "reason": f"no GPU check possible: {exc}", "other_processes": 0}
    except NvmlQueryFailed as exc:
        # The GPUs are there but could not be checked: refusing is safer than guessing.
        return {"status": "fail", "reason": f"{exc}; GPU exclusivity could not be verified", "other_processes": 0}


def raise_if_refused(preflight: dict[str, Any]) -> None:
    """Turn a failed preflight into the LaunchError the run stops with (``gpu_busy``)."""
    if preflight.get("status") == "fail":
        raise LaunchError(
            f"GPU exclusivity preflight refused the start: {preflight.get('reason')}",
            status=StartupStatus.GPU_BUSY,
            hint="stop the other processes on these GPUs (nvidia-smi shows them), pick other GPUs "
            "in launcher.docker.gpus, or set the compute mode with `nvidia-smi -c EXCLUSIVE_PROCESS`.",
            details={"other_processes": preflight.get("other_processes", 0)},
        )


def compute_process_pids(gpu_indexes: list[int] | None = None) -> set[int] | None:
    """PIDs of compute processes on the GPUs (all when None); None when NVML is not available.

    Used around a docker run: what is on the GPUs after teardown and was not there before
    start is a survivor (``docker rm -f`` can leave workers that hold GPU memory).
    """
    try:
        with _nvml_session() as nvml:
            count = int(nvml.nvmlDeviceGetCount())
            indexes = range(count) if gpu_indexes is None else [i for i in gpu_indexes if 0 <= i < count]
            pids: set[int] = set()
            for index in indexes:
                pids |= _compute_pids(nvml, nvml.nvmlDeviceGetHandleByIndex(index))
            return pids
    except (NvmlUnavailable, NvmlQueryFailed):
        return None


def wait_for_gpu_release(
    baseline: set[int], gpu_indexes: list[int] | None = None, *, timeout_s: float = 10.0, poll_s: float = 0.5
) -> set[int] | None:
    """Wait until no compute process beyond ``baseline`` remains; return those that do (None: no NVML)."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = compute_process_pids(gpu_indexes)
        if now is None:
            return None
        extra = now - baseline
        if not extra or time.monotonic() >= deadline:
            return extra
        time.sleep(poll_s)
