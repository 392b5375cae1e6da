"""The package's one ``/health`` probe and one 1-token completion probe.

Readiness (``launch.readiness``), the liveness guard (``session.server.ServerGuard``) and the context
ladder's after-rung health all ask a server the same two questions; each asks them here and
reads the answer (``ProbeAnswer``: status and body, or the httpx error) in its own words. A
probe never raises an httpx error: one that got no answer says so in ``error``/``timed_out``.
``ServerProbe`` binds the probes to one server for readiness, which receives it instead of
importing a client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx

from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.launch.readiness import ProbeAnswer

from .qual_client import http_client

__all__ = ["ONE_TOKEN_PROMPT", "ServerProbe", "check_health", "one_token_completion"]

ONE_TOKEN_PROMPT = "Say ok."
"""The user message of the 1-token completion: any prompt gives a token; this one is short."""


def _request(http: httpx.Client, method: str, path: str, timeout_s: float, *,
             json: dict[str, Any] | None = None) -> ProbeAnswer:
    """One request as a ProbeAnswer; an httpx error becomes its type name."""
    try:
        response = http.request(method, path, json=json, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        return ProbeAnswer(error=type(exc).__name__, timed_out=True)
    except httpx.HTTPError as exc:
        return ProbeAnswer(error=type(exc).__name__)
    payload: Any = None
    if response.status_code == 200:
        try:
            payload = response.json()
        except ValueError:
            payload = None
    return ProbeAnswer(status_code=response.status_code, text=response.text, payload=payload)


def check_health(http: httpx.Client, timeout_s: float) -> ProbeAnswer:
    """``GET /health``: 200 when the API process answers (it says nothing about generation)."""
    return _request(http, "GET", "/health", timeout_s)


def one_token_completion(http: httpx.Client, model: str, timeout_s: float) -> ProbeAnswer:
    """One real chat completion of at most one token: the engine generates, or it does not."""
    body = {"model": model, "messages": [{"role": "user", "content": ONE_TOKEN_PROMPT}],
            "max_tokens": 1, "temperature": 0}
    return _request(http, "POST", "/v1/chat/completions", timeout_s, json=body)


class ServerProbe:
    """The probes bound to one server (its client and served name): ``launch.readiness.ReadinessProbe``."""

    def __init__(self, http: httpx.Client, model: str) -> None:
        self.http = http
        self.model = model

    @classmethod
    @contextlib.contextmanager
    def open(cls, handle: ServerHandle) -> Iterator[ServerProbe]:
        """A probe on its own client for ``handle``'s server, closed on exit."""
        with http_client(handle) as http:
            yield cls(http, handle.served_model_name)

    def health(self, timeout_s: float) -> ProbeAnswer:
        return check_health(self.http, timeout_s)

    def models(self, timeout_s: float) -> ProbeAnswer:
        """``GET /v1/models``: whether the served name is listed is the caller's question."""
        return _request(self.http, "GET", "/v1/models", timeout_s)

    def one_token(self, timeout_s: float) -> ProbeAnswer:
        return one_token_completion(self.http, self.model, timeout_s)
