"""Settings: where data lives, which embedder and LLM to use, and how to generate answers.

Each setting comes from the first of these that has it (flags > env > file > defaults):

1. an explicit argument (the CLI's flags, or keyword arguments of ``Bunko``);
2. an environment variable;
3. the config file: ``--config PATH``, else ``$BUNKO_CONFIG``, else ``./bunko.toml`` if it exists;
4. the default.

| setting | environment | ``bunko.toml`` | default |
|---|---|---|---|
| data folder | ``BUNKO_HOME`` | ``[store] home`` | ``$XDG_DATA_HOME/bunko`` or ``~/.local/share/bunko`` |
| store URL | ``BUNKO_DATABASE_URL`` | ``[store] database_url`` | ``sqlite:///$BUNKO_HOME/bunko.db`` |
| anonymised search logs | ``BUNKO_ANONYMIZE_SEARCH_LOGS`` | ``[store] anonymize_search_logs`` | false |
| embedder | ``BUNKO_EMBEDDER`` | ``[embedder] model`` | ``use`` (bundled, offline) |
| embedder URL | ``BUNKO_EMBEDDER_BASE_URL`` | ``[embedder] base_url`` | the provider's |
| embedder key | ``BUNKO_EMBEDDER_API_KEY`` | ``[embedder] api_key`` | the provider's own variable |
| embedder dimension | ``BUNKO_EMBEDDER_DIMENSIONS`` | ``[embedder] dimensions`` | the model's (or learned) |
| LLM (``provider:model``) | ``BUNKO_LLM`` | ``[llm] model`` | none: extractive answers |
| LLM URL | ``BUNKO_LLM_BASE_URL`` | ``[llm] base_url`` | the provider's |
| LLM key | ``BUNKO_LLM_API_KEY`` | ``[llm] api_key`` | the provider's own variable |
| LLM timeout (s) | ``BUNKO_LLM_TIMEOUT`` | ``[llm] timeout`` | the provider's |
| LLM retries | ``BUNKO_LLM_MAX_RETRIES`` | ``[llm] max_retries`` | the provider's (4, so 5 tries) |
| temperature | ``BUNKO_TEMPERATURE`` | ``[llm] temperature`` | 0.1 |
| max answer tokens | ``BUNKO_MAX_TOKENS`` | ``[llm] max_tokens`` | 1000 |
| system prompt | ``BUNKO_SYSTEM_PROMPT`` | ``[llm] system_prompt`` | the seed's prompt |
| context budget (tokens) | ``BUNKO_CONTEXT_TOKENS`` | ``[llm] context_tokens`` | 4000 |
| conversation turns fed back | ``BUNKO_HISTORY_TURNS`` | ``[llm] history_turns`` | 6 |

API keys are read only from the environment or the config file, never from flags, and never
printed: ``Settings`` and ``LLMSettings`` leave them out of their ``repr``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

DEFAULT_TENANT = "default"
DEFAULT_COLLECTION = "default"
CONFIG_FILE = "bunko.toml"

# The seeds disagree (the workflow block says 0.3 / 2000, the RAG chat design 0.1 / 1000); the chat
# design is the one about answering from documents, and low temperature keeps answers reproducible.
DEFAULT_TEMPERATURE = 0.1
DEFAULT_MAX_TOKENS = 1000
DEFAULT_CONTEXT_TOKENS = 4000  # R24
DEFAULT_HISTORY_TURNS = 6  # messages (3 questions and their answers) fed back to the LLM


def default_home() -> Path:
    """The data folder when ``BUNKO_HOME`` is not set."""
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "bunko"


@dataclass(slots=True, frozen=True)
class LLMSettings:
    """Which LLM answers, and how (R23, R24)."""

    spec: str | None = None  # "provider:model"; None means extractive answers
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float | None = None
    max_retries: int | None = None
    temperature: float = DEFAULT_TEMPERATURE
    max_tokens: int = DEFAULT_MAX_TOKENS
    system_prompt: str | None = None
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    history_turns: int = DEFAULT_HISTORY_TURNS

    def client_options(self) -> dict[str, Any]:
        """Options for ``get_llm``: only those that are set."""
        options = {"base_url": self.base_url, "api_key": self.api_key, "timeout": self.timeout,
                   "max_retries": self.max_retries}
        return {k: v for k, v in options.items() if v is not None}


@dataclass(slots=True, frozen=True)
class Settings:
    """Resolved settings for one engine."""

    home: Path
    database_url: str
    embedder: str
    embedder_base_url: str | None = None
    embedder_api_key: str | None = field(default=None, repr=False)
    embedder_dimensions: int | None = None
    llm: LLMSettings = field(default_factory=LLMSettings)
    anonymize_search_logs: bool = False
    config_path: Path | None = None

    def embedder_options(self) -> dict[str, Any]:
        """Options for ``get_embedder``: only those that are set."""
        options = {"base_url": self.embedder_base_url, "api_key": self.embedder_api_key,
                   "dimensions": self.embedder_dimensions}
        return {k: v for k, v in options.items() if v is not None}

    @classmethod
    def resolve(
        cls,
        database_url: str | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        embedder: str | None = None,
        config: str | os.PathLike[str] | None = None,
        **overrides: Any,
    ) -> Settings:
        """Settings from arguments, then environment variables, then the config file, then defaults.

        ``overrides`` take any field name of the table in the module docstring (``llm``,
        ``llm_base_url``, ``temperature``, ``max_tokens``, ``system_prompt``, ...); None means "not given".
        """
        unknown = set(overrides) - set(_FIELDS)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        given = {"database_url": database_url, "home": home, "embedder": embedder, **overrides}
        path, file_values = load_config_file(config)
        values: dict[str, Any] = {}
        for name, spec in _FIELDS.items():
            values[name] = spec.pick(name, given.get(name), file_values, path)
        home_path = Path(values["home"] or default_home()).expanduser()
        url = values["database_url"] or f"sqlite:///{home_path / 'bunko.db'}"
        llm = LLMSettings(
            spec=values["llm"] or None,
            base_url=values["llm_base_url"],
            api_key=values["llm_api_key"],
            timeout=values["llm_timeout"],
            max_retries=values["llm_max_retries"],
            temperature=DEFAULT_TEMPERATURE if values["temperature"] is None else values["temperature"],
            max_tokens=values["max_tokens"] or DEFAULT_MAX_TOKENS,
            system_prompt=values["system_prompt"] or None,
            context_tokens=values["context_tokens"] or DEFAULT_CONTEXT_TOKENS,
            history_turns=DEFAULT_HISTORY_TURNS if values["history_turns"] is None else values["history_turns"],
        )
        return cls(
            home=home_path,
            database_url=url,
            embedder=values["embedder"] or "use",
            embedder_base_url=values["embedder_base_url"],
            embedder_api_key=values["embedder_api_key"],
            embedder_dimensions=values["embedder_dimensions"],
            llm=llm,
            anonymize_search_logs=bool(values["anonymize_search_logs"]),
            config_path=path,
        )


def load_config_file(config: str | os.PathLike[str] | None = None) -> tuple[Path | None, dict[str, Any]]:
    """The config file in use and its settings as ``{"section.key": value}``; ``(None, {})`` if there is none."""
    explicit = config or os.environ.get("BUNKO_CONFIG")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
    else:
        path = Path.cwd() / CONFIG_FILE
        if not path.is_file():
            return None, {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    known = {spec.file_key for spec in _FIELDS.values()}
    flat: dict[str, Any] = {}
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {section!r} must be a table like [{section}]; "
                              f"known settings: {', '.join(sorted(known))}")
        for key, value in table.items():
            name = f"{section}.{key}"
            if name not in known:
                raise ConfigError(f"{path}: unknown setting [{section}] {key}; known: {', '.join(sorted(known))}")
            flat[name] = value
    return path, flat


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected text")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError("expected a number")
    return float(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or isinstance(value, float) or not isinstance(value, int | str):
        raise TypeError("expected a whole number")
    return int(value)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise TypeError("expected true or false")


@dataclass(slots=True, frozen=True)
class _Field:
    env: str
    file_key: str
    convert: Callable[[Any], Any]
    check: Callable[[Any], str | None] = lambda value: None  # an error message, or None

    def pick(self, name: str, given: Any, file_values: Mapping[str, Any], path: Path | None) -> Any:
        """The value from the first source that has one, converted and checked."""
        if given is not None:
            source, raw = f"--{name.replace('_', '-')}", given
        elif os.environ.get(self.env):
            source, raw = self.env, os.environ[self.env]
        elif self.file_key in file_values:
            section, key = self.file_key.split(".")
            source, raw = f"{path} [{section}] {key}", file_values[self.file_key]
        else:
            return None
        try:
            value = self.convert(raw)
        except (TypeError, ValueError) as exc:
            message = str(exc) if isinstance(exc, TypeError) else "not valid"
            shown = "(hidden)" if name.endswith("api_key") else repr(raw)
            raise ConfigError(f"{source} = {shown}: {message}") from None
        problem = self.check(value)
        if problem:
            raise ConfigError(f"{source} = {value!r}: {problem}")
        return value


def _between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be from {lo:g} to {hi:g}"


_FIELDS: dict[str, _Field] = {
    "home": _Field("BUNKO_HOME", "store.home", lambda v: str(os.fspath(v))),
    "database_url": _Field("BUNKO_DATABASE_URL", "store.database_url", _text),
    "anonymize_search_logs": _Field("BUNKO_ANONYMIZE_SEARCH_LOGS", "store.anonymize_search_logs", _flag),
    "embedder": _Field("BUNKO_EMBEDDER", "embedder.model", _text),
    "embedder_base_url": _Field("BUNKO_EMBEDDER_BASE_URL", "embedder.base_url", _text),
    "embedder_api_key": _Field("BUNKO_EMBEDDER_API_KEY", "embedder.api_key", _text),
    "embedder_dimensions": _Field("BUNKO_EMBEDDER_DIMENSIONS", "embedder.dimensions", _integer,
                                  _between(1, 16000)),
    "llm": _Field("BUNKO_LLM", "llm.model", _text),
    "llm_base_url": _Field("BUNKO_LLM_BASE_URL", "llm.base_url", _text),
    "llm_api_key": _Field("BUNKO_LLM_API_KEY", "llm.api_key", _text),
    "llm_timeout": _Field("BUNKO_LLM_TIMEOUT", "llm.timeout", _number, _between(0.1, 3600)),
    "llm_max_retries": _Field("BUNKO_LLM_MAX_RETRIES", "llm.max_retries", _integer, _between(0, 10)),
    "temperature": _Field("BUNKO_TEMPERATURE", "llm.temperature", _number, _between(0, 2)),
    "max_tokens": _Field("BUNKO_MAX_TOKENS", "llm.max_tokens", _integer, _between(1, 1_000_000)),
    "system_prompt": _Field("BUNKO_SYSTEM_PROMPT", "llm.system_prompt", _text),
    "context_tokens": _Field("BUNKO_CONTEXT_TOKENS", "llm.context_tokens", _integer, _between(100, 10_000_000)),
    "history_turns": _Field("BUNKO_HISTORY_TURNS", "llm.history_turns", _integer, _between(0, 100)),
}
