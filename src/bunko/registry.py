"""One registry of factories by name, used by every seam.

Embedders, LLMs, rerankers, splitters, analyzers and loaders each keep one ``Registry``.
A name is found in three layers, the first that has it wins:

1. factories given to ``register`` (the application's own, and tests' fakes);
2. entry-point plugins of the seam's group (``bunko.embedders``, ``bunko.llms``,
   ``bunko.rerankers``, ``bunko.splitters``, ``bunko.analyzers``, ``bunko.loaders``),
   loaded once, on first use; a broken plugin is logged and skipped so it never
   breaks the built-ins;
3. the built-ins, given when the registry is made, either as factories or as
   ``"module:attribute"`` paths imported on first use (so naming a provider costs no import).
   A registry may instead be given the name of a module that registers its built-ins when
   imported; it is imported on first use, before the plugins are read.

``unregister`` removes a registration; a plugin or built-in of the same name shows again.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import threading
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from .errors import ConfigError, UnknownProviderError

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _import(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Registry(Generic[T]):
    """Factories ``factory(...) -> T`` by name, for one seam."""

    def __init__(
        self,
        kind: str,
        group: str,
        builtins: Mapping[str, Callable[..., T] | str] | str | None = None,
        *,
        unknown: type[ConfigError] = UnknownProviderError,
    ) -> None:
        self.kind = kind  # "embedder", "LLM provider", …: used in error messages
        self.group = group  # the entry-point group of plugins
        self.unknown = unknown  # the error an unknown name raises
        self._registered: dict[str, Callable[..., T]] = {}
        self._plugins: dict[str, Callable[..., T]] = {}
        self._builtins: dict[str, Callable[..., T] | str] = {} if isinstance(builtins, str) else dict(builtins or {})
        self._setup_module = builtins if isinstance(builtins, str) else None
        self._plugins_loaded = False
        self._lock = threading.RLock()  # re-entrant: a plugin's import may look its own seam up

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, group={self.group!r})"

    # -- filling ---------------------------------------------------------------------------------

    def register(self, name: str, factory: Callable[..., T]) -> None:
        """Register (or replace) the factory called ``name``; it wins over plugins and built-ins."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"a {self.kind} name must be a non-empty string; got {name!r}")
        if not callable(factory):
            raise ConfigError(f"the {self.kind} factory for {name!r} is not callable")
        self._registered[name] = factory

    def unregister(self, name: str) -> None:
        """Remove what ``register`` put under ``name`` (nothing happens if there is none)."""
        self._registered.pop(name, None)

    def reload(self) -> None:
        """Forget the plugins read so far; the next lookup reads the entry points again."""
        with self._lock:
            self._plugins.clear()
            self._plugins_loaded = False

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        with self._lock:
            if self._plugins_loaded:
                return
            if self._setup_module:
                importlib.import_module(self._setup_module)  # it calls ``register`` for its built-ins
            plugins: dict[str, Callable[..., T]] = {}
            for ep in entry_points(group=self.group):
                try:
                    factory = ep.load()
                except Exception as exc:  # a broken plugin must not break the built-ins
                    logger.warning("could not load %s plugin %s: %s", self.kind, ep.name, exc)
                    continue
                if not callable(factory):
                    logger.warning("%s plugin %s is not callable (%r); skipped", self.kind, ep.name, factory)
                    continue
                plugins[ep.name] = factory
            self._plugins.update(plugins)
            self._plugins_loaded = True

    # -- lookups ---------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every name there is, sorted."""
        self._load_plugins()
        return sorted({*self._registered, *self._plugins, *self._builtins})

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._registered or name in self._plugins or name in self._builtins

    def get(self, name: str) -> Callable[..., T]:
        """The factory called ``name``; the registry's typed error naming those there are, if none."""
        self._load_plugins()
        entry = next((layer[name] for layer in (self._registered, self._plugins, self._builtins) if name in layer),
                     None)
        if entry is None:
            raise self.unknown(f"unknown {self.kind} {name!r}; available: {', '.join(self.names()) or '(none)'}")
        if isinstance(entry, str):  # a built-in named by its import path
            try:
                entry = _import(entry)
            except (ImportError, AttributeError) as exc:
                raise ConfigError(f"the built-in {self.kind} {name!r} could not be imported: {exc}") from exc
            self._builtins[name] = entry
        return entry

    # -- building --------------------------------------------------------------------------------

    def create(self, name: str, *args: Any, **options: Any) -> T:
        """``get(name)(*args, **options)``; options the factory does not take are a ``ConfigError``."""
        factory = self.get(name)
        try:
            inspect.signature(factory).bind(*args, **options)
        except TypeError as exc:
            raise ConfigError(f"{self.kind} {name!r} does not take the option(s) "
                              f"{', '.join(sorted(options)) or '(none)'}: {exc}") from exc
        except ValueError:  # no signature to check (a builtin function); the call decides
            pass
        return factory(*args, **options)

    def build(self, spec: str, **options: Any) -> T:
        """Build from ``"name:model"`` (or ``"name"``): the factory is called as ``factory(model, **options)``."""
        name, _, model = spec.strip().partition(":")
        return self.create(name, model or None, **options)
