"""The one /health probe and the one 1-token probe, and the readiness checks that read them.

Readiness receives its probe (``probes.ServerProbe``) instead of importing a client; these
tests drive both sides without a server: the probes over ``httpx.MockTransport``, the checks
over a fake probe.
"""

from __future__ import annotations

import json

import httpx

from pytest_vllmqual.client.probes import ServerProbe, check_health, one_token_completion
from pytest_vllmqual.launch.base import ServerHandle
from pytest_vllmqual.launch.readiness import HealthOk, ModelListed, OneTokenCompletion, ProbeAnswer

HANDLE = ServerHandle(base_url="http://127.0.0.1:9", served_model_name="tiny", launcher_kind="subprocess")


def client(handler: httpx.MockTransport) -> httpx.Client:
    return httpx.Client(base_url=HANDLE.base_url, transport=handler)


def test_health_probe_answers_and_errors() -> None:
    ok = check_health(client(httpx.MockTransport(lambda r: httpx.Response(200, text=""))), 1.0)
    assert ok.ok and ok.status_code == 200 and ok.error is None

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    refused = check_health(client(httpx.MockTransport(refuse)), 1.0)
    assert (refused.status_code, refused.error, refused.timed_out) == (None, "ConnectError", False)

    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    hung = check_health(client(httpx.MockTransport(hang)), 1.0)
    assert (hung.error, hung.timed_out) == ("ReadTimeout", True)


def test_one_token_probe_sends_one_token_request_and_reads_usage() -> None:
    seen: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"usage": {"completion_tokens": 1}})

    result = one_token_completion(client(httpx.MockTransport(answer)), "tiny", 3.0)
    assert seen == [{"model": "tiny", "messages": [{"role": "user", "content": "Say ok."}],
                     "max_tokens": 1, "temperature": 0}]
    assert result.ok and result.payload == {"usage": {"completion_tokens": 1}}


class FakeProbe:
    def __init__(self, health: ProbeAnswer, models: ProbeAnswer, one_token: ProbeAnswer) -> None:
        self.answers = {"health": health, "models": models, "one_token": one_token}

    def health(self, timeout_s: float) -> ProbeAnswer:
        return self.answers["health"]

    def models(self, timeout_s: float) -> ProbeAnswer:
        return self.answers["models"]

    def one_token(self, timeout_s: float) -> ProbeAnswer:
        return self.answers["one_token"]


def test_readiness_checks_read_the_probe_answers_in_their_own_words() -> None:
    listed = ProbeAnswer(200, payload={"data": [{"id": "tiny"}]})
    probe = FakeProbe(ProbeAnswer(503), listed, ProbeAnswer(error="ReadTimeout", timed_out=True))
    assert HealthOk().check(probe, HANDLE).detail == "/health 503"
    assert ModelListed().check(probe, HANDLE).ready
    hung = OneTokenCompletion(2.0).check(probe, HANDLE)
    assert not hung.ready and hung.detail.startswith("1-token completion did not answer within 2 s")

    down = FakeProbe(ProbeAnswer(error="ConnectError"), ProbeAnswer(200, payload={"data": [{"id": "other"}]}),
                     ProbeAnswer(200, payload={"usage": {"completion_tokens": 0}}))
    assert HealthOk().check(down, HANDLE).detail == "/health 200: ConnectError"
    assert ModelListed().check(down, HANDLE).detail == "/v1/models lists 1 model(s), none named 'tiny'"
    empty = OneTokenCompletion(2.0).check(down, HANDLE)
    assert not empty.ready and empty.detail == "1-token completion returned no tokens"


def test_server_probe_binds_the_served_name() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny"}]})
        return httpx.Response(200, json={"model": json.loads(request.content)["model"]})

    probe = ServerProbe(client(httpx.MockTransport(answer)), "tiny")
    assert ModelListed().check(probe, HANDLE).ready
    assert probe.one_token(1.0).payload == {"model": "tiny"}
