"""A server that dies at start fails every gate of its arm with one account: the terminal shows
it in full (with the exception's type and its hint) at the first gate and points there from
the others, and the vllmqual summary says it on one line. The "server" is a Python one-liner
that dies as `vllm serve` does on the CPU build."""

from __future__ import annotations

import json

import pytest


def test_the_terminal_shows_a_failed_start_in_full_once(pytester: pytest.Pytester) -> None:
    recipe = json.loads(json.dumps({
        "name": "dies", "pinned": False,
        "identity": {"checkpoint": "x", "served_model_name": "x", "runtime_version": "0.32.0"},
        "launcher": {"kind": "subprocess", "command": [
            "{python}", "-c", "import importlib.metadata as m; m.version('no-such-distribution-here')"]},
        "serve": {"tensor_parallel_size": 1, "max_model_len": 64},
        "startup": {"deadline_s": 60, "poll_interval_s": 0.05}}))
    recipes = pytester.mkdir("recipes")
    (recipes / "dies.yaml").write_text(json.dumps(recipe))
    pytester.makepyfile(test_gates="""
def test_one(gate, vllm_server):
    pass

def test_two(gate, vllm_server):
    pass

def test_three(gate, vllm_server):
    pass
""")
    result = pytester.runpytest_subprocess(f"--vllmqual-recipes-dir={recipes}", "--recipe=dies",
                                           f"--vllmqual-reports-dir={pytester.path / 'r'}", "-p", "no:cacheprovider")
    out = result.stdout.str()
    # pytest's own short summary repeats each error's message, in full where CI is set (it does not
    # truncate there): the harness's account is what comes before it.
    ours = out.split("short test summary info")[0]
    assert ours.count("Hint: ") == 1, out
    assert out.count("exited during startup with a Python exception: PackageNotFoundError") >= 1
    assert "as reported in full at test_gates.py::test_one" in out
    assert out.count("[exited] — the server for recipe 'dies' exited") == 1, out


def test_a_server_that_died_is_not_said_to_have_not_started() -> None:
    """The later gates of a server that started and then died point to the death, with its gate."""
    from pytest_vllmqual.plugin import _gone_words

    assert _gone_words("server_dead", "equivalence") == "the server died during gate equivalence"
    assert _gone_words("hung", None) == "the server hung"
    assert _gone_words("kv_insufficient", None) == "the server did not start"
