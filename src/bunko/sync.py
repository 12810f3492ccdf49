"""Sync forms of bunko's async operations: each runs its coroutine on a fresh event loop.

``Tenant.search`` is ``sync_form(Tenant.asearch)``: same arguments, same answer, no ``await``. Inside a
running event loop a sync form is refused (``BunkoError``): blocking the loop would stall every other
task on it, so the caller must await the ``a…`` form instead.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from .errors import BunkoError

S = TypeVar("S")
P = ParamSpec("P")
T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a fresh event loop; ``BunkoError`` when called inside a running one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise BunkoError("called a sync bunko method inside a running event loop; await the 'a…' form instead")


def sync_form(method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[S, P], T]:
    """The sync form of an async method ``aname``: a method ``name`` with the same arguments (see the module doc)."""

    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(method(self, *args, **kwargs))

    name = method.__name__.removeprefix("a")
    call.__name__ = name
    call.__qualname__ = f"{method.__qualname__.rpartition('.')[0]}.{name}".lstrip(".")
    call.__doc__ = f"Sync form of :meth:`{method.__name__}`."
    call.__module__ = method.__module__
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return call


__all__ = ["run_sync", "sync_form"]
