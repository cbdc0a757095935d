"""Running tarry's async verbs from synchronous code: one event loop per thread."""

from __future__ import annotations

import asyncio
import atexit
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from tarry.errors import TarryError

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


class _Loop:
    """A thread's event loop, closed when the thread (or, for the main thread, the program) ends."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.running = False
        if threading.current_thread() is threading.main_thread():
            atexit.register(self.close)

    def run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        self.running = True
        try:
            return self.runner.run(coroutine)
        finally:
            self.running = False

    def close(self) -> None:
        """Close the loop, unless it still runs: a daemon thread (a Celery worker's) stopped mid-run at exit."""
        if not self.running:
            self.runner.close()

    def __del__(self) -> None:
        self.close()


class _ThreadLoop(threading.local):
    loop: _Loop | None = None


_thread_loop = _ThreadLoop()


def run_sync(coroutine: Coroutine[Any, Any, R], *, verb: str = "the async verb") -> R:
    """Run ``coroutine`` on this thread's event loop, made on first use and kept for later calls.

    Keeping the loop lets loop-bound clients (database pools, MCP sessions, HTTP clients)
    live from one call to the next. Raises [`TarryError`][tarry.errors.TarryError] inside a running event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coroutine.close()
        raise TarryError(f"Called inside a running event loop: use `await {verb}(...)` instead")
    if _thread_loop.loop is None:
        _thread_loop.loop = _Loop()
    return _thread_loop.loop.run(coroutine)


def twin_docstring(name: str, path: str) -> str:
    """The docstring of the blocking twin of the async method ``name`` (``path``: where the reference has it)."""
    return (
        f"Blocking form of [`{name}`][{path}]: the same arguments, run to the end on this thread's event loop. "
        "Not for use inside a running event loop."
    )


def sync_twin(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], R]:
    """The synchronous twin of an async method: same arguments, run by ``run_sync``."""

    @functools.wraps(method)
    def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        verb = f"{type(self).__name__.lower()}.{method.__name__}"
        return run_sync(method(self, *args, **kwargs), verb=verb)

    # The site reads the source, where a twin is a bare assignment: docs/sync_twins.py documents it there.
    twin.__doc__ = twin_docstring(method.__name__, f"{method.__module__}.{method.__qualname__}")
    twin.__name__ = f"{method.__name__}_sync"
    twin.__qualname__ = twin.__qualname__.removesuffix(method.__name__) + twin.__name__
    return twin
