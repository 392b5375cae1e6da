"""The port a managed server is given when its recipe says ``port: 0``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pytest_vllmqual.launch import base
from pytest_vllmqual.launch.base import FREE_PORT_SPAN, ephemeral_low, free_port


def test_the_port_is_picked_below_the_kernel_ephemeral_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outgoing connections take their source ports from the ephemeral range: a port picked there
    can be taken before the server binds it, tens of seconds later."""
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    monkeypatch.setattr(base, "EPHEMERAL_RANGE_FILE", ranges)
    assert ephemeral_low() == 40000
    ports = {free_port() for _ in range(20)}
    assert all(40000 - FREE_PORT_SPAN <= p < 40000 for p in ports), ports
    assert len(ports) > 1, "picked at random, not the same port for every server"
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_an_unreadable_range_falls_back_to_the_usual_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert ephemeral_low() == 32768
    assert 32768 - FREE_PORT_SPAN <= free_port() < 32768
