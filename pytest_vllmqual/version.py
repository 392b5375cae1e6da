"""The package's version, in the foundation so any module can name it without importing the front door."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
