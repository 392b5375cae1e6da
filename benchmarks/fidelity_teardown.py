"""The teardown profile: how long stopping the server takes, and which cleanup step spends it."""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pytest_vllmqual.launch import local_process as launch_local_process
from pytest_vllmqual.launch.cleanup import procs as cleanup_procs
from pytest_vllmqual.launch.cleanup import shm as cleanup_shm

#: The teardown steps timed in ``teardown_profile``: (module the caller looks the name up in, the
#: function). Named by reference, not by string, so that mypy fails a renamed one, and checked
#: in ``timed_calls`` so that a caller that stopped looking the function up there fails too.
TEARDOWN_CALLS: tuple[tuple[types.ModuleType, Callable[..., Any]], ...] = (
    (launch_local_process, cleanup_procs.kill_run),
    (launch_local_process, cleanup_procs.processes_of_run),
    (launch_local_process, cleanup_shm.reclaim_run_shm),
    (cleanup_shm, cleanup_shm.reclaim_shm),
    (cleanup_shm, cleanup_shm.shm_files_of_run),
)


@contextlib.contextmanager
def timed_calls(targets: Sequence[tuple[types.ModuleType, Callable[..., Any]]]) -> Iterator[dict[str, list[float]]]:
    """Time every call of the given functions, as looked up in the given modules, while the block runs.

    Benchmark-only wrapping. A function the module no longer binds under its name is an
    error, not a silent zero: the profile would otherwise time nothing.
    """
    originals = []
    for module, fn in targets:
        name = fn.__name__
        if getattr(module, name, None) is not fn:
            raise RuntimeError(f"{module.__name__} no longer calls {fn.__module__}.{name} by that name; "
                               "update TEARDOWN_CALLS in benchmarks/fidelity_teardown.py")
        originals.append((module, name, fn))
    spent: dict[str, list[float]] = {name: [] for _, name, _ in originals}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name].append(time.perf_counter() - start)
        return timed

    for module, name, fn in originals:
        setattr(module, name, wrap(name, fn))
    try:
        yield spent
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)
