"""Listing a run's containers while another run's teardown removes one: the one removed between the
engine's listing and its inspection is left out, not raised (docker-py's ``containers.list`` raised
NotFound there, and the container test of a SIGKILLed run failed on it in CI). A stand-in engine
client, because a real engine cannot be made to remove a container at that instant."""

from __future__ import annotations

from typing import Any

import docker.errors

from pytest_vllmqual.launch.docker.reaper import labelled_containers


class _Api:
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.filters: list[dict[str, Any]] = []

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, str]]:  # docker-py's argument names
        assert all is True
        self.filters.append(filters)
        return [{"Id": cid} for cid in self.ids]


class _Containers:
    def __init__(self, gone: set[str]) -> None:
        self.gone = gone

    def get(self, cid: str) -> str:
        if cid in self.gone:
            raise docker.errors.NotFound(f"No such container: {cid}")
        return f"container {cid}"


class _Client:
    def __init__(self, ids: list[str], gone: set[str]) -> None:
        self.api = _Api(ids)
        self.containers = _Containers(gone)


def test_a_container_removed_between_listing_and_inspection_is_left_out() -> None:
    client = _Client(["a1", "b2", "c3"], gone={"b2"})
    assert labelled_containers(client, "vllmqual.run=r1") == ["container a1", "container c3"]
    assert client.api.filters == [{"label": "vllmqual.run=r1"}]


def test_every_listed_container_is_returned_in_the_engine_s_order() -> None:
    assert labelled_containers(_Client(["z9", "a1"], gone=set()), "vllmqual.run") == ["container z9", "container a1"]
