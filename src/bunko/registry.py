"""A registry of factories by name, filled by built-ins and by entry-point plugins.

The LLM and reranker seams share it: ``register``, the names available, and ``build``
from a ``"name:model"`` spec. Plugins come from an entry-point group, loaded once on first
use; a broken plugin is logged and skipped so it never breaks the built-ins.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from .errors import UnknownProviderError

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Registry(Generic[T]):
    """Factories ``factory(model, **options) -> T`` by name."""

    def __init__(self, kind: str, group: str, builtins: str | None = None) -> None:
        self.kind = kind  # "LLM provider", "reranker": used in error messages
        self.group = group  # the entry-point group of plugins
        self.builtins = builtins  # a module that registers the built-ins when imported
        self._factories: dict[str, Callable[..., T]] = {}
        self._loaded = False

    def register(self, name: str, factory: Callable[..., T]) -> None:
        """Register (or replace) the factory called ``name``."""
        self._factories[name] = factory

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.builtins:
            try:
                importlib.import_module(self.builtins)
            except ImportError as exc:  # pragma: no cover - an optional dependency missing
                logger.debug("built-in %ss unavailable: %s", self.kind, exc)
        for ep in entry_points(group=self.group):
            try:
                self.register(ep.name, ep.load())
            except Exception as exc:  # a broken plugin must not break the built-ins
                logger.warning("could not load %s plugin %s: %s", self.kind, ep.name, exc)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        self._load()
        return sorted(self._factories)

    def get(self, name: str) -> Callable[..., T]:
        """The factory registered as ``name``, or ``UnknownProviderError`` naming the ones there are."""
        self._load()
        factory = self._factories.get(name)
        if factory is None:
            raise UnknownProviderError(
                f"unknown {self.kind} {name!r}; available: {', '.join(self.names()) or '(none)'}"
            )
        return factory

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._factories

    def build(self, spec: str, **options: Any) -> T:
        """Build from ``"name:model"`` (or ``"name"``); ``options`` go to the factory."""
        self._load()
        name, _, model = spec.strip().partition(":")
        return self.get(name)(model or None, **options)
