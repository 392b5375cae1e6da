"""Where caches live: one base for this user's caches, ours under it unless VLLMQUAL_CACHE_DIR says otherwise."""

from __future__ import annotations

from pathlib import Path

from pytest_vllmqual.layout import CACHE_ENV, cache_dir, user_cache_root


def test_the_user_cache_root_is_xdg_cache_home_else_dot_cache(tmp_path: Path) -> None:
    assert user_cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path
    assert user_cache_root({}) == Path.home() / ".cache"


def test_our_cache_is_under_the_user_cache_root_unless_set(tmp_path: Path) -> None:
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "vllmqual"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path), CACHE_ENV: str(tmp_path / "own")}) == tmp_path / "own"
