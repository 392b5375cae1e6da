"""The sanitized public report: its allowlist builder, its schema check, and reading it back.

The public report is built by :func:`build_public_report` from an *allowlist*: every
section copies known keys one by one, so a new field in a record never reaches the report
by accident, and every string that came from the run passes the
:class:`~pytest_vllmqual.privacy.sanitize.Sanitizer`. Raw artifacts stay private
(:mod:`~pytest_vllmqual.report.artifacts`) and appear here only as ``{name, size, sha256}``.

The builder does not judge: the verdict is added by
:func:`pytest_vllmqual.report.decision.with_decision`. The report as a file (its schema check,
its atomic write, reading it back, re-checking its artifacts) is ``report.on_disk``; those names
(``SCHEMA_ID``, ``SCHEMA_VERSION``, ``validate_report``, ``validation_errors``, ``migration_hint``,
``write_report_atomic``, ``load_report``, ``verify_report``) are re-exported here, where they were
first defined, for a release.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_vllmqual.client.results import decode_tok_s
from pytest_vllmqual.gates.registry import family_of, title_of
from pytest_vllmqual.gates.registry import proves as gate_proves
from pytest_vllmqual.hashing import canonical_json
from pytest_vllmqual.launch.base import TeardownResult
from pytest_vllmqual.privacy.public_text import public_startup_details, startup_cause
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.privacy.secret_policy import SECRET_ENV_NAME, SECRET_KEY_NAME
from pytest_vllmqual.records import Attempt, GateRecord, RungRecord, RunRecord, rung_verdict
from pytest_vllmqual.version import __version__
from pytest_vllmqual.vllm.server_messages import public_attempt_error, public_rung_error

from .artifacts import ArtifactStore
from .load_section import LOAD_LEVELS, load_section
from .on_disk import (
    SCHEMA_ID,
    SCHEMA_VERSION,
    load_report,
    migration_hint,
    validate_report,
    validation_errors,
    verify_report,
    write_report_atomic,
)
from .query import ok_rungs, preflight_summary

__all__ = ["SCHEMA_ID", "SCHEMA_VERSION", "TOOL_NAME", "build_public_report", "load_report", "migration_hint", "resanitize",
           "validate_report", "validation_errors", "verify_report", "write_report_atomic"]

TOOL_NAME = "pytest-vllmqual"

_MAX_TEXT = 2000
"""Free text (errors, reasons) is cut to this many characters; the full text stays private."""

_IDENTITY_FIELDS = ("checkpoint", "revision", "image", "runtime_version", "served_model_name", "max_model_len",
                   "tensor_parallel_size", "served_model", "image_digest", "content_digest")
_HARDWARE_FIELDS = ("source", "gpu_model", "gpu_count", "gpu_memory_gib", "interconnect", "driver_version")
_ENGINE_FIELDS = ("device", "kv_pool", "kv_cache_tokens", "max_concurrency", "concurrency_at_tokens",
                 "min_rank_kv_gib", "tp_size_seen", "init_engine_seconds", "compilation_seconds", "vllm_version",
                 "redacted_arg_keys", "kv_cache_memory_gib", "sources")
_ENGINE_RANK_FIELDS = ("rank", "process", "weights_gib", "load_seconds", "weights_read_seconds", "available_kv_gib",
                      "kv_in_use_gib", "kv_gib", "cuda_graph_gib", "graph_capture_seconds", "peak_activation_gib",
                      "non_torch_gib", "consumed_gib", "device_free_gib", "device_total_gib", "cpu_node_memory_gib")
_CACHE_CONFIG_FIELDS = ("num_gpu_blocks", "num_cpu_blocks", "block_size", "cache_dtype", "kv_cache_size_tokens",
                       "kv_cache_max_concurrency", "enable_prefix_caching", "gpu_memory_utilization")
_TEARDOWN_FIELDS = ("launcher", "stopped", "seconds", "surviving_processes", "surviving_process_names",
                   "shm_leftover_files", "containers_left", "shm_reclaim", "clean", "notes")
_ATTEMPT_FIELDS = ("kind", "label", "ok", "status_code", "latency_s", "usage", "request_sha256", "response_sha256",
                  "request_artifact", "response_artifact", "error", "error_kind", "expected_rejection", "timing")
_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens",
                "reasoning_tokens", "cached_tokens")
_TIMING_FIELDS = ("ttft_s", "ttft_content_s", "e2e_s", "prefill_tok_s", "decode_tok_s", "chunks",
                 "first_delta_kind")
_RUNG_FIELDS = ("index", "target", "target_label", "prompt_tokens", "calibration_error", "status_code",
               "finish_reason", "completion_tokens", "ttft_s", "ttft_content_s", "e2e_s", "prefill_tok_s",
               "decode_tok_s", "ok", "expected_rejection", "error", "post_probe_smoke", "health_after",
               "server_ttft_s", "decode_not_measured", "server_prompt_tokens", "prefix_cache_hits",
               "decode_source", "server_decode_tok_s", "client_decode_not_measured")
_GATE_MEASUREMENTS_IN_SECTIONS = ("ladder", LOAD_LEVELS)
"""Measurements reported as their own section (the capacity gate's rungs, the load gate's levels) are not
repeated per gate."""


# -- the public report ----------------------------------------------------------------------


def _pick(source: Mapping[str, Any] | None, keys: Iterable[str]) -> dict[str, Any]:
    """Copy only ``keys`` (the allowlist) from ``source``."""
    source = source or {}
    return {k: source[k] for k in keys if k in source}


def _text(value: Any, limit: int = _MAX_TEXT) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    return _text(value)


def _shallow(value: Any) -> Any:
    """A scalar or a list of scalars; deeper structure is flattened to text."""
    if isinstance(value, list | tuple):
        return [_scalar(v) if not isinstance(v, dict | list | tuple) else _text(json.dumps(v, default=str))
                for v in value]
    if isinstance(value, dict):
        return _text(canonical_json(value, compact=False, default=str))
    return _scalar(value)


def _flat(obj: Any) -> dict[str, Any] | None:
    """A flat object: string keys, shallow values."""
    if not isinstance(obj, Mapping):
        return None
    return {str(k): _shallow(v) for k, v in obj.items()}


def _measurement(value: Any) -> Any:
    """Measurements are gate-defined names; values are limited by shape, never dumped deeply."""
    if isinstance(value, Mapping):
        return _flat(value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, Mapping) for v in value):
        return [_flat(v) for v in value]
    return _shallow(value)


def _attempt(attempt: Attempt) -> dict[str, Any]:
    data = _pick(attempt.to_dict(), _ATTEMPT_FIELDS)
    # Server text never reaches the report: a known vLLM message re-rendered, else withheld.
    data["error"] = _text(public_attempt_error(data.get("error"), data.get("error_kind"), data.get("status_code")))
    data["usage"] = _pick(data["usage"], _USAGE_FIELDS) if isinstance(data.get("usage"), Mapping) else None
    data["timing"] = _pick(data["timing"], _TIMING_FIELDS) if isinstance(data.get("timing"), Mapping) else None
    return data


def _gate(gate: GateRecord) -> dict[str, Any]:
    attempts = [_attempt(a) for a in gate.attempts]
    out: dict[str, Any] = {
        "nodeid": gate.nodeid,
        "gate": gate.gate,
        "title": title_of(gate.gate, gate.title or gate.gate),
        "family": family_of(gate.gate, gate.markers) or "other",
        "markers": [str(m) for m in gate.markers],
        "arm": gate.arm,
        "outcome": gate.outcome,
        "reason": _text(gate.reason),
        "status": gate.status,
        "failure_kind": gate.failure_kind,
        "duration_s": gate.duration_s,
        "summary": _text(gate.summary),
        "measurements": {str(k): _measurement(v) for k, v in gate.measurements.items()
                         if k not in _GATE_MEASUREMENTS_IN_SECTIONS},
        "thresholds": {str(k): _measurement(v) for k, v in gate.thresholds.items()},
        "attempts": attempts,
        "retained_failures": sum(1 for a in gate.attempts if not a.ok and not a.expected_rejection),
    }
    out["proves"] = gate_proves(out)
    return out


def _rung(rung: RungRecord) -> dict[str, Any]:
    data = _pick(rung.to_dict(), _RUNG_FIELDS)
    data["error"] = _text(public_rung_error(data.get("error"), data.get("status_code")))
    verdict = rung.verdict
    data["post_probe_smoke_ok"], data["health_after_ok"] = verdict.smoke, verdict.healthy
    pt, ttft = data.get("prompt_tokens"), data.get("ttft_s")
    if data.get("prefill_tok_s") is None and isinstance(pt, int) and isinstance(ttft, int | float) and ttft > 0:
        data["prefill_tok_s"] = round(pt / ttft, 2)
    ct, e2e = data.get("completion_tokens"), data.get("e2e_s")
    # A rung keeps no last-output time: a rate filled in here ends at the stream's end.
    if (data.get("decode_tok_s") is None and not data.get("decode_not_measured") and isinstance(ct, int)
            and isinstance(e2e, int | float) and isinstance(ttft, int | float)
            and (decode := decode_tok_s(ct, ttft, e2e)) is not None):
        data["decode_tok_s"] = round(decode, 2)
    if data.get("calibration_error") is None and isinstance(pt, int):
        data["calibration_error"] = pt - int(data["target"])
    return data


def _ladder_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    ladder = report.get("ladder") or []
    completed = ok_rungs(report)
    errors = [abs(r["calibration_error"]) for r in ladder if isinstance(r.get("calibration_error"), int)]
    largest = max(completed, key=lambda r: int(r["prompt_tokens"])) if completed else None
    return {
        "rungs": len(ladder),
        "completed": len(completed),
        "failed": sum(1 for r in ladder if rung_verdict(r).failed),
        "rejected_as_expected": sum(1 for r in ladder if rung_verdict(r).rejected_as_expected),
        "max_abs_calibration_error": max(errors) if errors else None,
        "largest": dict(largest) if largest else None,
    }


def _identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    checks = []
    for check in identity.get("checks") or []:
        if not isinstance(check, Mapping):
            continue
        row = {"field": str(check.get("field")), "expected": _shallow(check.get("expected")),
               "observed": _shallow(check.get("observed")), "ok": check.get("ok")}
        if check.get("status") in ("matched", "mismatch", "not checked", "not pinned"):
            row["status"] = check["status"]
        if check.get("source"):
            row["source"] = str(_text(check.get("source")))
        if isinstance(check.get("pinned"), bool):
            row["pinned"] = check["pinned"]
        if check.get("note"):
            row["note"] = _text(check.get("note"))
        checks.append(row)
    status = identity.get("status")
    if status not in ("verified", "partially-verified", "provenance_mismatch", "unverified"):
        if any(c["ok"] is False for c in checks):
            status = "provenance_mismatch"
        elif checks and all(c["ok"] for c in checks):
            status = "verified"
        else:
            status = "unverified"
    out: dict[str, Any] = {
        "status": status,
        "expected": {k: _shallow(v) for k, v in _pick(identity.get("expected"), _IDENTITY_FIELDS).items()},
        "observed": {k: _shallow(v) for k, v in _pick(identity.get("observed"), _IDENTITY_FIELDS).items()},
        "checks": checks,
        "not_checked": [str(f) for f in identity.get("not_checked") or []],
        "model_files": {str(k): str(v) for k, v in (identity.get("model_files") or {}).items()
                        if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)},
    }
    file_hashes = _file_hashes(identity.get("file_hashes"))
    if file_hashes:  # a local model folder's files (a hub model has none here)
        out["file_hashes"] = file_hashes
    return out


def _file_hashes(value: Any) -> dict[str, dict[str, Any]]:
    """Each model file's digests as ``FileHash.to_dict`` wrote them; a malformed entry is left out."""
    out: dict[str, dict[str, Any]] = {}
    for name, entry in (value or {}).items() if isinstance(value, Mapping) else ():
        if not isinstance(entry, Mapping):
            continue
        size, content, raw = entry.get("size"), entry.get("content"), entry.get("sha256")
        if (isinstance(size, int) and isinstance(content, str) and re.fullmatch(r"[0-9]+:[0-9a-f]{64}", content)
                and isinstance(raw, str) and re.fullmatch(r"[0-9a-f]{64}", raw)
                and isinstance(entry.get("hashed_at"), str)):
            out[str(_text(name, 500))] = {"size": size, "content": content, "sha256": raw,
                                          "hashed_at": str(_text(entry["hashed_at"], 40)),
                                          "from_cache": entry.get("from_cache") is True}
    return out


def _hardware(hardware: Mapping[str, Any]) -> dict[str, Any]:
    data = _pick(hardware, _HARDWARE_FIELDS)
    source = data.get("source")
    interconnect = data.get("interconnect")
    count = data.get("gpu_count")
    memory = data.get("gpu_memory_gib")
    out: dict[str, Any] = {
        "source": source if source in ("nvml", "n/a") else "n/a",
        "gpu_model": str(data.get("gpu_model") or "n/a"),
        "gpu_count": count if isinstance(count, int) and count >= 0 else 0,
        "gpu_memory_gib": memory if isinstance(memory, int | float) else None,
        "interconnect": interconnect if interconnect in ("NVLink", "PCIe", "n/a") else "n/a",
    }
    if data.get("driver_version") is not None:
        out["driver_version"] = str(data["driver_version"])
    return out


def _teardown(teardown: TeardownResult | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if teardown is None:
        return None
    data = teardown.to_dict() if isinstance(teardown, TeardownResult) else dict(teardown)
    out = _pick(data, _TEARDOWN_FIELDS)
    if "shm_reclaim" in out:
        out["shm_reclaim"] = _flat(_named_files(out["shm_reclaim"]))
    if "notes" in out:
        out["notes"] = [str(_text(n)) for n in out["notes"] or []]
    return out


def _named_files(reclaim: Any) -> Any:
    """The reclaim record with each reclaimed file as ``name (N bytes)``: a flat record
    would otherwise carry each one as a JSON string."""
    if not isinstance(reclaim, Mapping):
        return reclaim
    items = reclaim.get("reclaimed") or []
    named = [f"{i.get('name')} ({i.get('bytes', 0):,} bytes)" if isinstance(i, Mapping) else i for i in items]
    return {**reclaim, "reclaimed": named}


def _lifecycle(run: RunRecord, teardown: TeardownResult | Mapping[str, Any] | None) -> dict[str, Any]:
    life = run.lifecycle
    out: dict[str, Any] = {
        "launcher": life.get("launcher"),
        "cold_start_s": life.get("cold_start_s"),
        "startup_status": life.get("startup_status"),
        "last_phase": life.get("last_phase") or (run.engine or {}).get("last_phase"),
        "teardown": _teardown(teardown if teardown is not None else life.get("teardown")),
    }
    error = life.get("startup_error")
    if isinstance(error, Mapping):
        # The harness's account only: the log tail and the matched log line stay private.
        details = public_startup_details(error.get("details"))
        log = (error.get("details") or {}).get("private_log")
        out["startup_error"] = {
            "status": error.get("status"),
            "cause": startup_cause(error.get("status"), details),
            "message": _text(error.get("message")),
            "exit_code": error.get("exit_code"),
            "last_phase": details.get("last_phase") or out["last_phase"],
            "hint": _text(error.get("hint")),
            "details": details,
            "private_log": ({"name": str(log.get("name")), "sha256": str(log.get("sha256"))}
                            if isinstance(log, Mapping) and log.get("sha256") else None),
        }
    state = life.get("server_state")
    if isinstance(state, Mapping):
        out["server_state"] = {"status": _text(state.get("status")), "detail": _text(state.get("detail")),
                               **{key: _text(state[key]) for key in ("during_gate", "cause") if state.get(key)}}
    preflight = life.get("gpu_preflight")
    if isinstance(preflight, Mapping):
        out["gpu_preflight"] = {"status": _text(preflight.get("status")), "reason": _text(preflight.get("reason")),
                                "other_processes": preflight.get("other_processes")}
    return out


def _non_default_args(args: Any, sanitizer: Sanitizer) -> dict[str, Any] | None:
    """The engine's effective args; values of secret-named keys are replaced outright."""
    if not isinstance(args, Mapping):
        return None
    out: dict[str, Any] = {}
    for key, value in args.items():
        if SECRET_KEY_NAME.search(str(key)) and value not in (None, "", [], False):
            out[str(key)] = sanitizer.redact("secret")
        else:
            out[str(key)] = _measurement(value)
    return out


def _recipe_content(content: Mapping[str, Any], sanitizer: Sanitizer) -> dict[str, Any]:
    """The recipe as loaded, with the values of secret-named environment variables replaced."""
    out = json.loads(json.dumps(content, default=str))
    for section in ("launcher", "serve"):
        block = out.get(section)
        env = block.get("env") if isinstance(block, dict) else None
        if isinstance(env, dict):
            for name, value in env.items():
                if SECRET_ENV_NAME.search(str(name)) and value:
                    env[name] = sanitizer.redact("secret")
    result: dict[str, Any] = out
    return result


def _rank(facts: Mapping[str, Any], position: int) -> dict[str, Any]:
    """engine.RankFacts.to_dict() (label, tp_rank) or an already public rank (rank, process)."""
    data = dict(facts)
    if not isinstance(data.get("rank"), int):
        data["rank"] = data["tp_rank"] if isinstance(data.get("tp_rank"), int) else position
    if data.get("process") is None and data.get("label") is not None:
        data["process"] = str(data["label"])
    if data.get("kv_gib") is None:
        data["kv_gib"] = data.get("available_kv_gib") if data.get("available_kv_gib") is not None \
            else data.get("kv_in_use_gib")
    return _pick(data, _ENGINE_RANK_FIELDS)


def _number_or_text(value: Any) -> Any:
    """/metrics labels are strings: "4437" → 4437, "2.17" → 2.17, "None" → None."""
    if not isinstance(value, str):
        return _shallow(value)
    if value in ("None", ""):
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def _cache_config(run: RunRecord) -> dict[str, Any] | None:
    """``vllm:cache_config_info`` labels, wherever the engine facts or endpoint facts hold them."""
    endpoints = run.endpoints or {}
    found = endpoints.get("metrics")
    metrics: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    for candidate in ((run.engine or {}).get("cache_config"), endpoints.get("cache_config"),
                      metrics.get("cache_config"), metrics.get("cache_config_info")):
        if isinstance(candidate, Mapping) and candidate:
            return {k: _number_or_text(v) for k, v in _pick(candidate, _CACHE_CONFIG_FIELDS).items()}
    return None


def _engine(run: RunRecord, sanitizer: Sanitizer) -> dict[str, Any]:
    facts = run.engine or {}
    out = _pick(facts, _ENGINE_FIELDS)
    if "redacted_arg_keys" in out:
        out["redacted_arg_keys"] = [str(k) for k in out["redacted_arg_keys"] or []]
    out["ranks"] = [_rank(r, i) for i, r in enumerate(facts.get("ranks") or []) if isinstance(r, Mapping)]
    if out.get("min_rank_kv_gib") is None:
        kv = [r["kv_gib"] for r in out["ranks"] if isinstance(r.get("kv_gib"), int | float)]
        if kv:
            out["min_rank_kv_gib"] = min(kv)
    tokens, gib = out.get("kv_cache_tokens"), out.get("min_rank_kv_gib")
    if isinstance(tokens, int) and isinstance(gib, int | float) and gib > 0:
        out["kv_tokens_per_gib"] = round(tokens / gib, 1)
    out["non_default_args"] = _non_default_args(facts.get("non_default_args"), sanitizer)
    out["cache_config"] = _cache_config(run)
    return out


def build_public_report(
    run: RunRecord,
    *,
    sanitizer: Sanitizer | None = None,
    known_secrets: Iterable[str] = (),
    teardown: TeardownResult | Mapping[str, Any] | None = None,
    artifacts: Sequence[Mapping[str, Any]] | None = None,
    tool_version: str | None = None,
) -> dict[str, Any]:
    """The sanitized public report for one run (one arm), without its verdict.

    It validates once :func:`pytest_vllmqual.report.decision.with_decision` has added the decision.
    ``sanitizer`` defaults to a fresh one that also scrubs ``known_secrets``. ``teardown``
    overrides ``run.lifecycle["teardown"]``. ``artifacts`` defaults to ``run.artifacts``, or,
    when that is empty, to every file in ``run.private_dir`` (hashed now).
    """
    sanitizer = sanitizer or Sanitizer()
    for secret in known_secrets:
        sanitizer.add_secret(secret)
    for section in ("launcher", "serve"):
        block = (run.recipe_content or {}).get(section)
        if isinstance(block, Mapping) and isinstance(block.get("env"), Mapping):
            sanitizer.add_env_values(block["env"])
    if artifacts is None:
        artifacts = run.artifacts or (ArtifactStore(Path(run.private_dir)).entries() if run.private_dir else [])
    from_run: dict[str, Any] = {
        "run": {
            "id": run.run_id,
            "arm": run.arm,
            "started_utc": run.started_utc,
            "finished_utc": run.finished_utc,
            "status": run.status if run.status in ("complete", "incomplete") else "incomplete",
            "status_reasons": [str(_text(r)) for r in run.status_reasons],
            "mode": str(run.mode),
            "reproduce": run.reproduce,
            "deselected_gates": [{"gate": str(d.get("gate")), "reason": str(_text(d.get("reason")))}
                                 for d in run.deselected_gates if isinstance(d, Mapping)],
        },
        "recipe": {"name": run.recipe_name, "sha256": run.recipe_sha256,
                   "content": _recipe_content(run.recipe_content, sanitizer),
                   "origin": run.recipe_origin,
                   **({"overrides": list(run.recipe_overrides), "file_sha256": run.recipe_file_sha256}
                      if run.recipe_overrides else {})},
        "identity": _identity(run.identity),
        "hardware": _hardware(run.hardware),
        "lifecycle": _lifecycle(run, teardown),
        "engine": _engine(run, sanitizer),
        "gates": [_gate(g) for g in run.gates],
        "ladder": [_rung(r) for r in run.ladder],
        "load": load_section(run.gates),
        "artifacts": [{"name": str(a["name"]), "size": int(a["size"]), "sha256": str(a["sha256"])}
                      for a in artifacts],
    }
    scrubbed: dict[str, Any] = sanitizer.scrub_obj(from_run)
    report: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": tool_version or __version__},
        **{k: scrubbed[k] for k in ("run", "recipe", "identity", "hardware", "lifecycle", "engine", "gates")},
    }
    report["preflight"] = preflight_summary(report)
    report["ladder"] = scrubbed["ladder"]
    report["ladder_summary"] = _ladder_summary(report)
    if scrubbed["load"] is not None:
        report["load"] = scrubbed["load"]
    report["artifacts"] = scrubbed["artifacts"]
    if run.fingerprint:
        # Not scrubbed: the launcher's env values are redacted everywhere else, but these numerics
        # variables tell two hosts apart; launch.fingerprint keeps only short words and numbers.
        report["fingerprint"] = dict(run.fingerprint)
    report["redactions"] = sanitizer.redaction_summary()
    report["extensions"] = {}
    return report


def resanitize(report: dict[str, Any], *, known_secrets: Iterable[str] = (),
               sanitizer: Sanitizer | None = None) -> dict[str, Any]:
    """Scrub a report again after user hooks changed it; redaction counts are added up.

    Pseudonyms already in the report stay reserved, so a newly found host does not become a
    second "host-A".
    """
    sanitizer = sanitizer or Sanitizer()
    for secret in known_secrets:
        sanitizer.add_secret(secret)
    sanitizer.reserve(json.dumps(report, default=str))
    previous = dict(report.get("redactions") or {})
    scrubbed: dict[str, Any] = sanitizer.scrub_obj(report)
    for kind, count in sanitizer.redaction_summary().items():
        previous[kind] = int(previous.get(kind, 0)) + count
    scrubbed["redactions"] = previous
    return scrubbed
