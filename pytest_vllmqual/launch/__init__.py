"""Launchers: local process, docker and external, plus readiness and teardown verification."""

from .base import Launcher, ProgressFn, ServerHandle, TeardownResult

__all__ = ["Launcher", "ProgressFn", "ServerHandle", "TeardownResult"]
