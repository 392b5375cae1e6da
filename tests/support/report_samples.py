"""Realistic RunRecords for the report tests, built from the reference campaign's published figures.

``reference_control_run`` is the reference campaign's 131K control (TP=2, 131,072 context, cold
start 323.5 s, 283,917 KV tokens, the retained HTTP 400 at the 120K target, the non-monotonic
targets). ``reference_candidate_run`` is its 4,096-token A/B arm. Figures are the campaign's own
(its prefill and decode figures come from its harness and are carried verbatim; the report
carries whatever the record measured).

``CANARIES`` are fake secrets and identifiers of every kind the sanitizer must catch; with
``canaries=True`` they are planted in every free-text field a run can fill.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.records import Attempt, GateRecord, RungRecord, RunRecord

CANARY_API_KEY = "vq-Canary0123456789abcdefghijklmnopq"
CANARIES = {
    "hf_token": "hf_CanaryTokenAbCdEfGhIjKlMnOp",
    "sk_key": "sk-proj-CanarySecretKey0123456789ab",
    "api_key": CANARY_API_KEY,
    "hostname": "gpu-node-17.cluster.internal",
    "short_host": "gpu-node-17",
    "ip": "10.44.3.21",
    "ipv6": "fd00:beef:1::21",
    "gpu_uuid": "GPU-3f1c2b9a-7d44-4e1b-9c0a-5b6e7f801234",
    "pci": "00000000:3B:00.0",
    "container": "4d2c9e1f0a7b3c5d6e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d",
    "home": "/home/qualuser/models",
    "user": "qualuser",
    "log_prefix": "[rack-7b.lab-gpu] ",
}
"""Values that must never reach a public report, HTML page or junit file."""

CANARY_ENV = {"HF_TOKEN": CANARIES["hf_token"], "OPENAI_API_KEY": CANARIES["sk_key"],
              "VLLM_API_KEY": CANARY_API_KEY, "PATH": "/usr/bin"}

RECIPE_CONTENT: dict[str, Any] = {
    "name": "131k-control",
    "description": "r33 target-only control, 131,072 context, batch 8,192.",
    "pinned": True,
    "identity": {
        "checkpoint": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
        "model_path": None,
        "image": "voipmonitor/vllm@sha256:fdde59fed7f9fc12f9fd5ef1b3b3ea8d5097bf10ebad54b348497102c3a83f82",
        "runtime_version": "0.11.2.dev280+gilded.gnosis.v20.vllmfa13d33.b12x06db0f4.fi1ac6942.cu132.20260809.r33",
        "served_model_name": "deepseek-v4-flash-r33-131k",
    },
    "launcher": {"kind": "docker", "host": "127.0.0.1", "port": 18081, "env": {}, "api_key_env": None},
    "serve": {"tensor_parallel_size": 2, "decode_context_parallel_size": 1, "max_model_len": 131072,
              "max_num_seqs": 1, "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.975,
              "kv_cache_dtype": "fp8_ds_mla", "env": {}},
    "gates": {"capacity": {"min_largest_prompt": 300000, "max_len_plus_one": True}},
}

PREFLIGHT = [
    ("smoke", "Smoke", "Coding smoke returned a Python function"),
    ("json", "JSON", "json_schema reply parsed and validated"),
    ("tools", "Typed tool calls", "20/20 typed tool calls parsed by the server"),
    ("streaming_tool", "Streaming tool", "streamed tool call reassembled"),
    ("tool_continuation", "Tool-result continuation", "continued after the tool result"),
    ("responses", "Responses API", "Responses API at high reasoning returned message and function_call"),
]


class PrivateFolder:
    """Writes sample artifacts into a run's private folder, as the recorder and the launcher do."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, name: str, data: bytes) -> None:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(data)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _attempt(store: PrivateFolder, gate: str, n: int, label: str, *, ok: bool = True, status: int = 200,
             error: str | None = None, expected_rejection: bool = False, prompt_tokens: int = 120) -> Attempt:
    request = f'{{"gate": "{gate}", "label": "{label}"}}'.encode()
    response = (f'{{"error": "{error}"}}' if error else '{"choices": []}').encode()
    base = f"gates/{gate}/{n:03d}-{label}"
    store.write(f"{base}.request.json", request)
    store.write(f"{base}.response.txt", response)
    return Attempt(kind="chat", label=label, ok=ok, status_code=status, latency_s=0.8,
                   usage={"prompt_tokens": prompt_tokens, "completion_tokens": 12, "total_tokens": prompt_tokens + 12},
                   request_sha256=_sha(request), response_sha256=_sha(response),
                   request_artifact=f"{base}.request.json", response_artifact=f"{base}.response.txt",
                   error=error, error_kind="http" if error else None, expected_rejection=expected_rejection)


def _rungs(arm: str) -> list[RungRecord]:
    """The reference campaign's context-target ladder; the candidate arm repeats the three passing targets."""
    largest = {"control": (17.445, 17.886, 7537.0, 73.86), "candidate": (17.364, 17.805, 7344.0, 75.20)}[arm]
    rungs = [
        RungRecord(index=0, target=117500, target_label="117.5K", prompt_tokens=87207, status_code=200,
                   finish_reason="length", completion_tokens=64, ttft_s=11.93, e2e_s=12.80,
                   prefill_tok_s=7310.0, decode_tok_s=72.4, ok=True, post_probe_smoke="passed", health_after="ok"),
        RungRecord(index=1, target=118500, target_label="118.5K", prompt_tokens=118830, status_code=200,
                   finish_reason="length", completion_tokens=64, ttft_s=17.30, e2e_s=18.18,
                   prefill_tok_s=7490.0, decode_tok_s=73.1, ok=True, post_probe_smoke="passed", health_after="ok"),
        RungRecord(index=2, target=120000, target_label="120K", prompt_tokens=None, status_code=400,
                   ok=False, error="HTTP 400: upstream rejected the request", post_probe_smoke="passed",
                   health_after="ok"),
        RungRecord(index=3, target=119500, target_label="119.5K", prompt_tokens=119503, status_code=200,
                   finish_reason="length", completion_tokens=33, ttft_s=largest[0], e2e_s=largest[1],
                   prefill_tok_s=largest[2], decode_tok_s=largest[3], ok=True, post_probe_smoke="passed",
                   health_after="ok"),
        RungRecord(index=4, target=120000, target_label="120K replay", prompt_tokens=88939, status_code=200,
                   finish_reason="length", completion_tokens=64, ttft_s=12.10, e2e_s=12.98,
                   prefill_tok_s=7350.0, decode_tok_s=72.9, ok=True, post_probe_smoke="passed", health_after="ok"),
        RungRecord(index=5, target=131073, target_label="max_model_len+1", prompt_tokens=131073, status_code=400,
                   ok=True, expected_rejection=True,
                   error="This model's maximum context length is 131072 tokens.", health_after="ok"),
    ]
    for rung in rungs:
        if rung.prompt_tokens is not None:
            rung.calibration_error = rung.prompt_tokens - rung.target
    return rungs


def reference_run(private_dir: Path, *, arm: str = "control", canaries: bool = False) -> RunRecord:
    """A complete managed TP=2 run in the reference campaign's shape, its artifacts written under ``private_dir``."""
    store = PrivateFolder(private_dir)
    c = CANARIES
    log = "(Worker_TP0 pid=11) INFO Model loading took 75.64 GiB memory and 41.2 seconds\n"
    if canaries:
        log += (f"host {c['hostname']} ({c['ip']}) {c['gpu_uuid']} {c['pci']} container {c['container']} "
                f"key {c['hf_token']} {c['sk_key']} {CANARY_API_KEY} path {c['home']}\n")
    store.write("server.log", log.encode())
    gates: list[GateRecord] = []
    for name, title, summary in PREFLIGHT:
        attempts = [_attempt(store, name, 1, name)]
        measurements: dict[str, Any] = {"passed": 20, "total": 20} if name == "tools" else {}
        gates.append(GateRecord(nodeid=f"suites/test_preflight.py::test_{name}", gate=name, title=title,
                                markers=["functional"], arm=arm, outcome="passed", duration_s=1.2, summary=summary,
                                measurements=measurements, attempts=attempts))
    gates.append(GateRecord(nodeid="suites/test_engine.py::test_cold_start", gate="cold_start",
                            title="Cold managed start", markers=["lifecycle"], arm=arm, outcome="passed",
                            duration_s=0.01, summary="passed health in 323.5 seconds",
                            measurements={"cold_start_s": 323.5}))
    gates.append(GateRecord(nodeid="suites/test_engine.py::test_identity", gate="identity", title="Identity",
                            markers=["engine"], arm=arm, outcome="passed", duration_s=0.01, summary="verified",
                            measurements={"identity_status": "verified"}))
    gates.append(GateRecord(nodeid="suites/test_reasoning.py::test_reasoning", gate="reasoning_fingerprints",
                            title="Reasoning prompt contract", arm=arm, outcome="passed", duration_s=0.4,
                            summary="Low/high/max fingerprints passed at 6/85/98 prompt tokens",
                            measurements={"fingerprints": {"low": 6, "high": 85, "max": 98}},
                            thresholds={"fingerprints": {"low": 6, "high": 85, "max": 98}}))
    gates.append(GateRecord(nodeid="suites/test_quality.py::test_quality", gate="quality", markers=["quality"],
                            title="Repeated high-reasoning quality", arm=arm, outcome="passed", duration_s=88.0,
                            summary="Intelligence 2 checks × 3/3; session recall 3/3; tools 3/3; 32K context pass"))
    ladder = _rungs(arm)
    capacity_attempts = [_attempt(store, "ladder", i + 1, r.target_label.replace(" ", "_").replace("+", "-"),
                                  ok=r.ok, status=r.status_code or 0, error=r.error,
                                  expected_rejection=r.expected_rejection, prompt_tokens=r.prompt_tokens or 0)
                         for i, r in enumerate(ladder)]
    if canaries:
        capacity_attempts[2].error = (f"HTTP 400 from http://{c['short_host']}:8000 via {c['ip']} "
                                      f"(Authorization: Bearer {CANARY_API_KEY})")
    gates.append(GateRecord(nodeid="suites/test_capacity.py::test_ladder", gate="ladder",
                            title="Near-limit capacity", markers=["capacity"], arm=arm, outcome="passed",
                            duration_s=95.0, summary="119,503 actual prompt tokens",
                            measurements={"ladder": [r.to_dict() for r in ladder], "largest_prompt_tokens": 119503},
                            thresholds={"min_largest_prompt": 300000}, attempts=capacity_attempts))
    gates.append(GateRecord(nodeid="suites/test_engine.py::test_engine_ranks", gate="engine_ranks",
                            title="Per-rank engine facts", markers=["engine"], arm=arm, outcome="passed",
                            duration_s=0.01, summary="2 ranks", measurements={"ranks": 2, "min_rank_kv_gib": 15.27}))
    gates.append(GateRecord(nodeid="suites/test_engine.py::test_kv_pool", gate="kv_pool",
                            title="Engine facts", arm=arm, outcome="passed", duration_s=0.01,
                            summary="KV pool and per-rank facts read",
                            reason=f"log read from {c['home']}/server.log" if canaries else None))
    control = arm == "control"
    engine: dict[str, Any] = {
        "device": "gpu",
        "kv_cache_tokens": 283917 if control else 553243,
        "max_concurrency": 2.17 if control else 4.22,
        "concurrency_at_tokens": 131072,
        "min_rank_kv_gib": 15.27 if control else 15.99,
        "tp_size_seen": 2,
        "init_engine_seconds": 212.4,
        "ranks": [  # engine.RankFacts.to_dict() shape
            {"label": "Worker_TP0", "tp_rank": 0, "weights_gib": 75.64 if control else 75.51, "load_seconds": 41.2,
             "available_kv_gib": 15.27 if control else 15.99, "kv_gib": 15.27 if control else 15.99,
             "cuda_graph_gib": 0.62, "peak_activation_gib": 1.73 if control else 1.14,
             "unknown_future_field": "dropped by the allowlist"},
            {"label": "Worker_TP1", "tp_rank": 1, "weights_gib": 75.64 if control else 75.51, "load_seconds": 41.0,
             "available_kv_gib": 15.31 if control else 16.02, "kv_gib": 15.31 if control else 16.02,
             "cuda_graph_gib": 0.62, "peak_activation_gib": 1.73 if control else 1.14},
        ],
        "non_default_args": {"max_model_len": 131072, "max_num_batched_tokens": 8192 if control else 4096,
                             "api_key": [CANARY_API_KEY] if canaries else None,
                             "download_dir": c["home"] if canaries else "/models"},
        "raw_log_excerpt": "never copied: not in the allowlist",
    }
    identity = {
        "status": "verified",
        "expected": {"checkpoint": RECIPE_CONTENT["identity"]["checkpoint"],
                     "runtime_version": RECIPE_CONTENT["identity"]["runtime_version"],
                     "served_model_name": RECIPE_CONTENT["identity"]["served_model_name"],
                     "max_model_len": 131072, "tensor_parallel_size": 2,
                     "image": RECIPE_CONTENT["identity"]["image"]},
        "observed": {"runtime_version": RECIPE_CONTENT["identity"]["runtime_version"],
                     "served_model": RECIPE_CONTENT["identity"]["served_model_name"], "max_model_len": 131072,
                     "tensor_parallel_size": 2,
                     "image_digest": "sha256:fdde59fed7f9fc12f9fd5ef1b3b3ea8d5097bf10ebad54b348497102c3a83f82"},
        "checks": [
            {"field": "runtime_version", "expected": RECIPE_CONTENT["identity"]["runtime_version"],
             "observed": RECIPE_CONTENT["identity"]["runtime_version"], "ok": True, "note": ""},
            {"field": "served_model", "expected": RECIPE_CONTENT["identity"]["served_model_name"],
             "observed": RECIPE_CONTENT["identity"]["served_model_name"], "ok": True, "note": ""},
            {"field": "max_model_len", "expected": 131072, "observed": 131072, "ok": True, "note": ""},
            {"field": "tensor_parallel_size", "expected": 2, "observed": 2, "ok": True, "note": ""},
            {"field": "image_digest",
             "expected": "sha256:fdde59fed7f9fc12f9fd5ef1b3b3ea8d5097bf10ebad54b348497102c3a83f82",
             "observed": "sha256:fdde59fed7f9fc12f9fd5ef1b3b3ea8d5097bf10ebad54b348497102c3a83f82", "ok": True,
             "note": f"container {c['container'][:12]}" if canaries else ""},
            {"field": "revision", "expected": RECIPE_CONTENT["identity"]["revision"],
             "observed": RECIPE_CONTENT["identity"]["revision"], "ok": True, "note": ""},
        ],
    }
    recipe = {**RECIPE_CONTENT, "serve": dict(RECIPE_CONTENT["serve"])}
    if canaries:
        recipe["launcher"] = {**RECIPE_CONTENT["launcher"], "env": {"HF_TOKEN": c["hf_token"],
                                                                     "MODEL_CACHE": c["home"],
                                                                     "VLLM_LOGGING_PREFIX": c["log_prefix"]}}
    teardown = {"launcher": "docker", "stopped": True, "seconds": 14.2, "surviving_processes": 0,
                "surviving_process_names": [], "shm_leftover_files": 0, "containers_left": 0,
                "shm_reclaim": {"reclaimed_files": 1, "reclaimed_bytes": 4096, "scans": 2}, "clean": True,
                "notes": [f"stopped container {c['container']} on {c['hostname']}"] if canaries else []}
    return RunRecord(
        run_id=f"{arm}-20260810T120000Z-4242",
        arm=arm,
        recipe_name="131k-control" if control else "131k-4096",
        recipe_path=f"{c['home']}/recipes/131k-control.yaml" if canaries else "fixtures/recipes/131k-control.yaml",
        recipe_sha256=_sha(b"recipe " + arm.encode()),
        recipe_content=recipe,
        started_utc="2026-08-10T12:00:00Z",
        finished_utc="2026-08-10T12:31:05Z",
        mode="managed",
        status="complete",
        reproduce=(f"pytest --recipe=131k-control --vllmqual-endpoint=http://{c['ip']}:8000 --rootdir {c['home']}"
                   if canaries else "pytest --recipe=131k-control"),
        identity=identity,
        hardware={"source": "nvml", "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                  "gpu_count": 2, "gpu_memory_gib": 95.6, "interconnect": "PCIe", "driver_version": "580.65.06",
                  "uuids": [c["gpu_uuid"]], "bus_ids": [c["pci"]]},
        lifecycle={"launcher": "docker", "cold_start_s": 323.5, "startup_status": "ready", "last_phase": "ready",
                   "startup_error": None, "teardown": teardown},
        engine=engine,
        endpoints={"version": RECIPE_CONTENT["identity"]["runtime_version"],  # engine.EndpointFacts.to_dict()
                   "models": [{"id": RECIPE_CONTENT["identity"]["served_model_name"], "max_model_len": 131072}],
                   "metrics": {"counters": {}, "gauges": {}, "histograms": {},
                               "cache_config_info": {"num_gpu_blocks": "4437", "block_size": "64",
                                                     "cache_dtype": "fp8_ds_mla",
                                                     "kv_cache_size_tokens": "283917" if control else "553243",
                                                     "kv_cache_max_concurrency": "2.17" if control else "4.22",
                                                     "engine": "0"}}},
        gates=gates,
        ladder=ladder,
        private_dir=str(private_dir),
    )


def reference_control_run(private_dir: Path, *, canaries: bool = False) -> RunRecord:
    return reference_run(private_dir, arm="control", canaries=canaries)


def reference_candidate_run(private_dir: Path) -> RunRecord:
    return reference_run(private_dir, arm="candidate")


def with_every_gate_passed(run: RunRecord) -> RunRecord:
    """The reference run plus a passed record for each registered gate it has none of.

    The reference campaign published no record of those gates (concurrency, the repeated quality
    checks one by one), so the reference run is ``healthy`` as published; tests of what a run that ran every gate
    earns add them here, explicitly."""
    from pytest_vllmqual.gates.registry import REGISTRY

    present = {g.gate for g in run.gates}
    for spec in REGISTRY:
        if spec.name not in present:
            run.gates.append(GateRecord(nodeid=f"suites/test_{spec.family}.py::test_{spec.name}", gate=spec.name,
                                        title=spec.title, arm=run.arm, outcome="passed", duration_s=0.1,
                                        summary="passed"))
    return run


def blank_sanitizer() -> Sanitizer:
    """A sanitizer that learned nothing from this machine (no environment, host or user name): a
    report built from the samples reads the same wherever the test runs."""
    return Sanitizer(environ={}, hostname="", username="")
