"""A recipe for whatever runs at an endpoint: built from what the server reports about itself.

``pytest --vllmqual-endpoint URL`` without a recipe qualifies the server that is there. The
served name and ``max_model_len`` come from ``/v1/models``, the runtime version from
``/version`` and the KV cache settings from ``/metrics`` (``vllm:cache_config_info``). The
recipe says ``discovered: true`` and ``pinned: false``: it records what was found, so gates
whose thresholds only a pinned recipe can know (fingerprints, KV minimums) measure and report,
and say that nothing was pinned.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from pytest_vllmqual.errors import EngineEndpointError, RecipeError
from pytest_vllmqual.records import LauncherKind
from pytest_vllmqual.vllm.endpoints import EndpointFacts, fetch_engine_endpoints

from .loader import load_recipe
from .model import Recipe

__all__ = ["DISCOVERED_PREFIX", "discover_recipe", "discovered_recipe_raw"]

DISCOVERED_PREFIX = "discovered-"


def discovered_recipe_raw(facts: EndpointFacts, endpoint: str) -> dict[str, Any]:
    """The recipe mapping for the server whose endpoint facts these are."""
    if not facts.models:
        raise RecipeError(f"--vllmqual-endpoint {endpoint}: GET /v1/models lists no model, so there is nothing to "
                          "qualify. Fix: check that the server finished loading, or pass --recipe.")
    model = facts.models[0]
    served = str(model["id"])
    max_len = model.get("max_model_len")
    cache: dict[str, str] = dict(facts.metrics.cache_config_info) if facts.metrics is not None else {}
    name = DISCOVERED_PREFIX + (re.sub(r"[^A-Za-z0-9._-]+", "-", served).strip("-.") or "model")
    serve: dict[str, Any] = {
        "tensor_parallel_size": 1,  # not reported over HTTP; the identity check leaves it unverified
        "max_model_len": int(max_len) if isinstance(max_len, int) else 16,
    }
    dtype = cache.get("cache_dtype")
    if dtype and dtype != "auto":
        serve["kv_cache_dtype"] = dtype
    utilization = cache.get("gpu_memory_utilization")
    try:
        if utilization:
            value = float(utilization)
            if 0 < value <= 1:
                serve["gpu_memory_utilization"] = value
    except ValueError:
        pass
    description = (f"Discovered from {endpoint}: what the server reports (served model, max_model_len, "
                   "version, KV cache settings); nothing pinned.")
    if len(facts.models) > 1:
        description += f" The server lists {len(facts.models)} models; the first ({served}) is qualified."
    return {
        "name": name,
        "description": description,
        "pinned": False,
        "discovered": True,
        "identity": {
            "checkpoint": str(model.get("root") or served),
            "revision": None,
            "image": None,
            "runtime_version": facts.version or "unknown",
            "served_model_name": served,
        },
        "launcher": {"kind": LauncherKind.EXTERNAL.value, "endpoint": endpoint},
        "serve": serve,
    }


def discover_recipe(endpoint: str, *, api_key: str | None, directory: Path) -> Recipe:
    """Ask the server at ``endpoint``, write the discovered recipe into ``directory`` and load it."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=endpoint.rstrip("/"), headers=headers, timeout=30.0) as client:
            facts = fetch_engine_endpoints(client)
    except EngineEndpointError as exc:
        raise RecipeError(f"--vllmqual-endpoint {endpoint}: the recipe cannot be discovered: {exc}. Fix: start the "
                          "server first, check the URL (scheme, host, port), set VLLM_API_KEY if the server "
                          "wants a key, or pass --recipe.") from None
    raw = discovered_recipe_raw(facts, endpoint)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{raw['name']}.yaml"
    text = "# Discovered by pytest_vllmqual from the running server; nothing in it is pinned.\n"
    text += yaml.safe_dump(raw, sort_keys=False)
    tmp = path.with_suffix(f".tmp{id(raw)}")
    tmp.write_text(text)
    tmp.replace(path)
    return load_recipe(path)
