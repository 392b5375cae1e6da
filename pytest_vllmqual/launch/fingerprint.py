"""The server's numerics fingerprint: what, besides the recipe, decides the numbers it answers with.

Two hosts that serve one pinned recipe on the same hardware and software answer a fixed probe with
the same numbers (a restart reproduces them exactly). When two answer differently, the fingerprint
says whether something known differs between them: the CPU (a hash of its model name and flags),
the build (the CUDA version torch was built for, or ``cpu``), the vLLM and torch versions, and the
variables that change how the kernels reduce (``NUMERICS_ENV``, recorded verbatim and never
scrubbed, so two hosts can be told apart by them). The accelerator model and driver are the report's
``hardware`` section (NVML).

It is read from the server's own environment, not the test process's: for a server this run
started as a process, the process's ``/proc/PID/environ`` and the packages of the interpreter it
runs; for a container, the same program run inside the container (its environment, its packages).
The program (``PROGRAM``) needs only Python's standard library, so it runs in any server image.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllmqual.hashing import canonical_sha256

__all__ = ["FINGERPRINT_FIELDS", "NUMERICS_ENV", "PROGRAM", "fingerprint_key", "from_output", "not_measured",
           "program_argv", "run_program"]

NUMERICS_ENV: dict[str, str] = {
    "VLLM_ATTENTION_BACKEND": "which attention kernels compute the scores",
    "VLLM_BATCH_INVARIANT": "batch-invariant kernels: the same answer whatever else is in the batch",
    "VLLM_FLASH_ATTN_VERSION": "which FlashAttention generation runs",
    "VLLM_CPU_OMP_THREADS_BIND": "the CPU build's cores per rank: how many threads split each reduction",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "cores the CPU build keeps out of the compute threads",
    "OMP_NUM_THREADS": "OpenMP threads: how a reduction is split and summed",
    "MKL_NUM_THREADS": "oneMKL threads (the same, in its kernels)",
    "ATEN_CPU_CAPABILITY": "the vector width of torch's CPU kernels (default, avx2, avx512): their summation order",
    "ONEDNN_MAX_CPU_ISA": "the widest instruction set oneDNN's kernels may use",
    "DNNL_MAX_CPU_ISA": "the same, by oneDNN's older name",
    "NVIDIA_TF32_OVERRIDE": "TF32 in cuBLAS and cuDNN matmuls, whatever the code asks",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "TF32 in torch's cuBLAS matmuls",
    "CUBLAS_WORKSPACE_CONFIG": "cuBLAS's deterministic workspace (set for reproducible reductions)",
}
"""Environment variables that change the numbers a server computes, each with why (extend it the
same way): their values are recorded as they are, unscrubbed (each value is checked to be a short
word, number or list, never a path or a secret)."""

FINGERPRINT_FIELDS = ("cpu_sha256", "build", "vllm_version", "torch_version", "env")
"""The fields two servers' fingerprints are grouped by (with the accelerator and driver of the report's hardware)."""

_VALUE = re.compile(r"^[A-Za-z0-9_.,:|+=\- ]{0,80}$")
PROGRAM = r'''
import hashlib, json, os, re, sys
from importlib import metadata

names, pid = json.loads(sys.argv[1]), sys.argv[2]
try:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        pairs = [p.split(b"=", 1) for p in handle.read().split(b"\0") if b"=" in p]
    env, read_from = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}, "process"
except OSError:
    env, read_from = dict(os.environ), "own"
cpu = {}
try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "flags", "Features", "CPU implementer", "CPU part", "vendor_id") and key not in cpu:
                cpu[key] = " ".join(sorted(value.split())) if key in ("flags", "Features") else value.strip()
except OSError:
    pass
def version(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
def build():
    try:
        text = metadata.distribution("torch").locate_file("torch/version.py").read_text()
    except Exception:
        return None
    found = re.search(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    hip = re.search(r"^hip\b[^=]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return f"cuda {found.group(1)}" if found else f"rocm {hip.group(1)}" if hip else "cpu"
cpu_text = json.dumps(cpu, sort_keys=True)
print(json.dumps({"read_from": read_from, "env": {n: env.get(n) for n in names},
                  "cpu_sha256": hashlib.sha256(cpu_text.encode()).hexdigest()[:16] if cpu else None,
                  "build": build(), "vllm_version": version("vllm") or version("vllm-cpu"),
                  "torch_version": version("torch")}))
'''
"""The program that reads a fingerprint where the server runs: argv ``NAMES_JSON PID``; JSON on stdout."""


def program_argv(python: str, pid: int | str) -> list[str]:
    """The argv that reads the fingerprint of process ``pid`` with the interpreter ``python``."""
    return [python, "-c", PROGRAM, json.dumps(sorted(NUMERICS_ENV)), str(pid)]


def not_measured(reason: str) -> dict[str, Any]:
    """A fingerprint that could not be read, and why."""
    return {"source": "not measured", "reason": reason}


def _clean(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if _VALUE.match(text) else "(not recorded: not a short word, number or list)"


def from_output(text: str, *, source: str) -> dict[str, Any]:
    """The fingerprint from the program's output; ``not measured`` with why when it is not one."""
    try:
        raw = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except ValueError:
        raw = None
    if not isinstance(raw, Mapping):
        return not_measured("the fingerprint program gave no JSON")
    given = raw.get("env")
    env: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    where = source if raw.get("read_from") == "process" else f"{source} (the program's own environment)"
    return {"source": where,
            "cpu_sha256": _clean(raw.get("cpu_sha256")), "build": _clean(raw.get("build")),
            "vllm_version": _clean(raw.get("vllm_version")), "torch_version": _clean(raw.get("torch_version")),
            "env": {name: _clean(env.get(name)) for name in sorted(NUMERICS_ENV)}}


def run_program(argv: Sequence[str], *, source: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Run the fingerprint program (a process beside the server) and read its answer."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return not_measured(f"the fingerprint program did not run ({type(exc).__name__})")
    if done.returncode != 0:
        return not_measured(f"the fingerprint program exited with status {done.returncode}")
    return from_output(done.stdout, source=source)


def fingerprint_key(fingerprint: Mapping[str, Any] | None, hardware: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fields a fleet groups servers by: the fingerprint's, the accelerator and driver, and a
    digest of them all (``sha256``); empty when the fingerprint was not measured."""
    body = dict(fingerprint or {})
    if not body or body.get("source") == "not measured":
        return {}
    hw = dict(hardware or {})
    fields: dict[str, Any] = {name: body.get(name) for name in FINGERPRINT_FIELDS if name != "env"}
    fields["accelerator"] = hw.get("gpu_model") if hw.get("source") == "nvml" else "none"
    fields["driver"] = hw.get("driver_version") if hw.get("source") == "nvml" else "none"
    fields.update({f"env.{k}": v for k, v in sorted((body.get("env") or {}).items())})
    return {"fields": fields, "sha256": canonical_sha256(fields)[:16]}
