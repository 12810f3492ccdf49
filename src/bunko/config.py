"""Settings: one typed tree for the engine, the stores, the providers and the HTTP server.

Each setting comes from the first of these that has it (flags > env > file > defaults):

1. an explicit argument (the CLI's flags, keyword arguments of ``Bunko`` or ``Settings.resolve``);
2. an environment variable;
3. the config file: ``--config PATH``, else ``$BUNKO_CONFIG``, else ``./bunko.toml`` if it exists;
4. the default.

Every setting has one name per source: the argument ``name`` (the flag ``--name``, where the
command has one), the variable ``BUNKO_NAME``, and a key of a table in ``bunko.toml``. A blank
value (``BUNKO_LLM=``) counts as not set.

| setting | environment | ``bunko.toml`` | default |
|---|---|---|---|
| data folder | ``BUNKO_HOME`` | ``[store] home`` | ``$XDG_DATA_HOME/bunko`` or ``~/.local/share/bunko`` |
| store URL | ``BUNKO_DATABASE_URL`` | ``[store] database_url`` | ``sqlite:///$BUNKO_HOME/bunko.db`` |
| anonymised search logs | ``BUNKO_ANONYMIZE_SEARCH_LOGS`` | ``[store] anonymize_search_logs`` | false |
| embedder | ``BUNKO_EMBEDDER`` | ``[embedder] model`` | ``use`` (bundled, offline) |
| embedder URL | ``BUNKO_EMBEDDER_BASE_URL`` | ``[embedder] base_url`` | the provider's |
| embedder key | ``BUNKO_EMBEDDER_API_KEY`` | ``[embedder] api_key`` | the provider's own variable |
| embedder dimension | ``BUNKO_EMBEDDER_DIMENSIONS`` | ``[embedder] dimensions`` | the model's (or learned) |
| hosted embedder timeout (s) | ``BUNKO_EMBEDDER_TIMEOUT`` | ``[embedder] timeout`` | the provider's (60) |
| hosted embedder retries | ``BUNKO_EMBEDDER_MAX_RETRIES`` | ``[embedder] max_retries`` | the provider's (4) |
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
| reranker URL | ``BUNKO_RERANK_BASE_URL`` | ``[rerank] base_url`` | the provider's |
| cached query embeddings | ``BUNKO_CACHE_QUERY_VECTORS`` | ``[cache] query_vectors`` | 2048 (0 = off) |
| cached search results | ``BUNKO_CACHE_SEARCH_RESULTS`` | ``[cache] search_results`` | 512 (0 = off) |
| worker processes of bulk writes | ``BUNKO_INGEST_WORKERS`` | ``[ingest] workers`` | one per core (0: none) |
| hosts the URL loader may fetch | ``BUNKO_FETCH_ALLOW_HOSTS`` | ``[fetch] allow_hosts`` | none (public hosts only) |
| OCR of scans and images on | ``BUNKO_OCR`` | ``[ocr] enabled`` | true (when Tesseract is installed) |
| OCR models (``jpn+eng``, ...) | ``BUNKO_OCR_LANG`` | ``[ocr] lang`` | chosen per page |
| OCR time limit per page (s) | ``BUNKO_OCR_PAGE_SECONDS`` | ``[ocr] page_seconds`` | 120 |
| pages OCR'd per document at most | ``BUNKO_OCR_MAX_PAGES`` | ``[ocr] max_pages`` | 100 |
| largest upload (MiB) | ``BUNKO_MAX_UPLOAD_MB`` | ``[server] max_upload_mb`` | 50 |
| largest JSON request body (MiB) | ``BUNKO_MAX_JSON_MB`` | ``[server] max_json_mb`` | 4 |
| requests per minute per API key | ``BUNKO_RATE_LIMIT`` | ``[server] rate_limit`` | 600 (0 = off) |
| uploads processed at once per worker | ``BUNKO_JOB_CONCURRENCY`` | ``[server] job_concurrency`` | 2 |
| BLAS threads per worker | ``BUNKO_BLAS_THREADS`` | ``[server] blas_threads`` | 1 |
| upload workers per API process | ``BUNKO_JOB_WORKERS`` | ``[server] job_workers`` | 1 (0: ``bunko worker``) |
| spool folder shared by API and workers | ``BUNKO_SPOOL_DIR`` | ``[server] spool_dir`` | ``$BUNKO_HOME/spool`` |
| job lease (s) | ``BUNKO_JOB_LEASE_SECONDS`` | ``[server] job_lease_seconds`` | 60 |
| claims of a job before it fails | ``BUNKO_JOB_ATTEMPTS`` | ``[server] job_attempts`` | 3 |
| jobs of a tenant in flight | ``BUNKO_TENANT_JOBS_IN_FLIGHT`` | ``[server] tenant_jobs_in_flight`` | 0 (no cap) |
| PostgreSQL tuning | ``BUNKO_PG_<KEY>`` | ``[postgres] <key>`` | see ``PostgresSettings`` |
| SQLite approximate search | ``BUNKO_SQLITE_<KEY>`` | ``[sqlite] <key>`` | see ``SQLiteSettings`` |
| memory search budget (s) | ``BUNKO_MEMORY_TIMEOUT`` | ``[memory] timeout`` | 2 |
| memory semantic leg budget (s) | ``BUNKO_MEMORY_SEMANTIC_TIMEOUT`` | ``[memory] semantic_timeout`` | 1.5 |

API keys and the store URL (which may hold a password) are ``SecretStr``: ``repr``, ``str`` and
``model_dump_json()`` show ``**********``. ``bunko`` reads API keys only from the environment or
the config file, never from flags.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args

import annotated_types
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from .errors import ConfigError

DEFAULT_TENANT = "default"
DEFAULT_COLLECTION = "default"
CONFIG_FILE = "bunko.toml"
CONFIG_ENV = "BUNKO_CONFIG"

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


# The keyword postings a process holds in memory unless told (``keyword_memory_mb`` unset): this share of the
# memory it may use, within these bounds (MiB).
KEYWORD_MEMORY_SHARE = 1 / 8
KEYWORD_MEMORY_MIN_MB = 256
KEYWORD_MEMORY_MAX_MB = 4096


def usable_memory(root: Path = Path("/")) -> int | None:
    """The bytes of memory this process may use: the machine's physical memory, or its container's limit
    when that is lower (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None when unknown."""
    found: list[int] = []
    try:
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    for limit in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = (root / limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < 1 << 60:  # "max" or a huge number: no limit
            found.append(int(text))
    return min(found) if found else None


def keyword_memory_bytes(configured_mb: int | None, usable: int | None = None) -> int:
    """The keyword postings a backend holds in memory (bytes): ``keyword_memory_mb`` when set, else
    ``KEYWORD_MEMORY_SHARE`` of :func:`usable_memory` (or ``usable``), within the bounds; the least of
    them when the memory is unknown. A million chunks' postings (1.9 GiB) are held whole from 16 GiB."""
    if configured_mb is not None:
        return configured_mb * 2**20
    usable = usable_memory() if usable is None else usable
    if usable is None:
        return KEYWORD_MEMORY_MIN_MB * 2**20
    share = int(usable * KEYWORD_MEMORY_SHARE)
    return max(KEYWORD_MEMORY_MIN_MB * 2**20, min(KEYWORD_MEMORY_MAX_MB * 2**20, share))


@dataclass(frozen=True, slots=True)
class Env:
    """Field metadata: the environment variable of a setting.

    The argument (and flag) name is the variable without ``BUNKO_``, in lower case.
    """

    name: str

    @property
    def argument(self) -> str:
        """The keyword argument of ``Bunko(...)`` that sets this variable's setting."""
        return self.name.removeprefix("BUNKO_").lower()


# Names of URL query parameters and libpq conninfo keys whose values are secrets.
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token|key|auth|credential|signature|sig\b", re.IGNORECASE)


def redact_url(url: str) -> str:
    """A store URL (or libpq conninfo) safe to print: passwords and other secret-looking values as ``***``.

    Covers ``user:pass@host``, query parameters such as ``?password=...`` / ``&sslpassword=...`` /
    ``&api_key=...``, and ``key=value`` conninfo strings (``host=db password=...``). Every place that
    shows a store URL (``bunko serve``, the server log, ``repr`` of a backend) goes through this.
    """
    text = re.sub(r"(://[^@/?#\s]*?):[^@/?#\s]*@", r"\1:***@", url)  # user:password@

    def query_value(match: re.Match[str]) -> str:
        name = match.group(2)
        return match.group(0) if not _SECRET_PARAM.search(name) else f"{match.group(1)}{name}=***"

    text = re.sub(r"([?&])([^=&#\s]+)=([^&#]*)", query_value, text)

    def conninfo_value(match: re.Match[str]) -> str:
        name = match.group(2)
        return match.group(0) if not _SECRET_PARAM.search(name) else f"{match.group(1)}{name}=***"

    if "://" not in text:  # libpq "key=value key='value'" form
        text = re.sub(r"(^|\s)(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", conninfo_value, text)
    return text


def _secret(value: SecretStr | None) -> str | None:
    return None if value is None else value.get_secret_value()


class Section(BaseModel):
    """One table of the tree: typed, frozen, unknown keys refused.

    Built directly (``PostgresSettings(ef_search=200)``), a bad value raises ``ConfigError``
    naming the key; built by ``Settings.resolve``, the error names the flag, variable or file key.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **values: Any) -> None:
        # Pydantic calls this also for a section inside the tree; ``Settings.resolve`` then names the source.
        try:
            super().__init__(**values)
        except ValidationError as exc:
            table = next(t for t, section in SECTIONS.items() if isinstance(self, section))
            raise SectionError(table, exc) from None


class SectionError(ConfigError):
    """A bad value in one section (a ``ConfigError``); keeps pydantic's details for naming the source."""

    def __init__(self, table: str, error: ValidationError) -> None:
        super().__init__(_explain(error, lambda table, key: f"{SECTIONS[table].__name__}: {key}", table))
        self.table = table
        self.error = error


def _sqlite_under_home(data: dict[str, Any]) -> SecretStr:
    """The default store: a SQLite file in the (already validated) data folder."""
    home = data.get("home") or default_home()
    return SecretStr(f"sqlite:///{Path(home) / 'bunko.db'}")


class StoreSettings(Section):
    """``[store]``: where data lives."""

    home: Annotated[Path, Env("BUNKO_HOME")] = Field(default_factory=default_home)
    database_url: Annotated[SecretStr, Env("BUNKO_DATABASE_URL")] = Field(default_factory=_sqlite_under_home)
    anonymize_search_logs: Annotated[bool, Env("BUNKO_ANONYMIZE_SEARCH_LOGS")] = False

    @field_validator("home")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class EmbedderSettings(Section):
    """``[embedder]``: the embedding model of new collections."""

    model: Annotated[str, Env("BUNKO_EMBEDDER")] = "use"
    base_url: Annotated[str | None, Env("BUNKO_EMBEDDER_BASE_URL")] = None
    api_key: Annotated[SecretStr | None, Env("BUNKO_EMBEDDER_API_KEY")] = None
    dimensions: Annotated[int | None, Env("BUNKO_EMBEDDER_DIMENSIONS"), Field(ge=1, le=16000)] = None
    # A hosted embedder's wait for each answer (s) and its retries after the first try; unset: the provider's
    # (60 s, 4 retries: a hung API could hold a search or an ingest for 5 x 60 s). A local model takes neither.
    timeout: Annotated[float | None, Env("BUNKO_EMBEDDER_TIMEOUT"), Field(ge=0.1, le=3600)] = None
    max_retries: Annotated[int | None, Env("BUNKO_EMBEDDER_MAX_RETRIES"), Field(ge=0, le=10)] = None

    def options(self) -> dict[str, Any]:
        """Options for ``get_embedder``: only those that are set."""
        options = {"base_url": self.base_url, "api_key": _secret(self.api_key), "dimensions": self.dimensions,
                   "timeout": self.timeout, "max_retries": self.max_retries}
        return {k: v for k, v in options.items() if v is not None}


class LLMSettings(Section):
    """``[llm]``: which LLM answers, and how (R23, R24)."""

    model: Annotated[str | None, Env("BUNKO_LLM")] = None  # "provider:model"; None means extractive answers
    base_url: Annotated[str | None, Env("BUNKO_LLM_BASE_URL")] = None
    api_key: Annotated[SecretStr | None, Env("BUNKO_LLM_API_KEY")] = None
    timeout: Annotated[float | None, Env("BUNKO_LLM_TIMEOUT"), Field(ge=0.1, le=3600)] = None
    max_retries: Annotated[int | None, Env("BUNKO_LLM_MAX_RETRIES"), Field(ge=0, le=10)] = None
    temperature: Annotated[float, Env("BUNKO_TEMPERATURE"), Field(ge=0, le=2)] = DEFAULT_TEMPERATURE
    max_tokens: Annotated[int, Env("BUNKO_MAX_TOKENS"), Field(ge=1, le=1_000_000)] = DEFAULT_MAX_TOKENS
    system_prompt: Annotated[str | None, Env("BUNKO_SYSTEM_PROMPT")] = None
    context_tokens: Annotated[int, Env("BUNKO_CONTEXT_TOKENS"), Field(ge=100, le=10_000_000)] = DEFAULT_CONTEXT_TOKENS
    history_turns: Annotated[int, Env("BUNKO_HISTORY_TURNS"), Field(ge=0, le=100)] = DEFAULT_HISTORY_TURNS

    @property
    def spec(self) -> str | None:
        """``"provider:model"``, or None for extractive answers."""
        return self.model

    def client_options(self) -> dict[str, Any]:
        """Options for ``get_llm``: only those that are set."""
        options = {"base_url": self.base_url, "api_key": _secret(self.api_key), "timeout": self.timeout,
                   "max_retries": self.max_retries}
        return {k: v for k, v in options.items() if v is not None}


class RerankSettings(Section):
    """``[rerank]``: where a hosted reranker lives (its key comes from the provider's own variable)."""

    base_url: Annotated[str | None, Env("BUNKO_RERANK_BASE_URL")] = None


class CacheSettings(Section):
    """``[cache]``: how many query embeddings and search results an engine keeps (0 turns one off).

    Entries are per tenant; a result is keyed by the whole request and the collection's write
    counter, so any write to the collection makes its cached results unreachable.
    """

    query_vectors: Annotated[int, Env("BUNKO_CACHE_QUERY_VECTORS"), Field(ge=0, le=10_000_000)] = 2048
    search_results: Annotated[int, Env("BUNKO_CACHE_SEARCH_RESULTS"), Field(ge=0, le=10_000_000)] = 512


class IngestSettings(Section):
    """``[ingest]``: the worker processes bulk work runs on (:mod:`bunko.workers`)."""

    # Worker processes that analyze bulk writes' keywords; none given: one per core, 0: in the writing process.
    workers: Annotated[int | None, Env("BUNKO_INGEST_WORKERS"), Field(ge=0, le=256)] = None


class FetchSettings(Section):
    """``[fetch]``: the URL loader. ``allow_hosts`` opens private hosts, IPs or networks (CIDR) to it."""

    allow_hosts: Annotated[tuple[str, ...], Env("BUNKO_FETCH_ALLOW_HOSTS")] = ()

    @field_validator("allow_hosts", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):  # "a.example, 10.0.0.0/8 b.example"
            return tuple(part for part in re.split(r"[,\s]+", value) if part)
        return value


class OCRSettings(Section):
    """``[ocr]``: OCR of scanned PDF pages and images (:mod:`bunko.loaders.ocr`), in ``bunko ingest`` and the
    upload workers: on or off, the Tesseract models (``jpn+eng``, ``jpn_vert``; unset: chosen per page), the
    time one page may take (then ``OCRTimeoutError``) and the most pages one document may have read by OCR
    (then ``OCRPageLimitError``; the document fails, nothing else does). ``bunko ingest --ocr-lang`` and the
    other ``--ocr`` options outrank them for one run."""

    enabled: Annotated[bool, Env("BUNKO_OCR")] = True
    lang: Annotated[str | None, Env("BUNKO_OCR_LANG"), Field(pattern=r"^[A-Za-z_]+(\+[A-Za-z_]+)*$")] = None
    page_seconds: Annotated[float, Env("BUNKO_OCR_PAGE_SECONDS"), Field(gt=0, le=86_400)] = 120.0
    max_pages: Annotated[int, Env("BUNKO_OCR_MAX_PAGES"), Field(ge=1, le=1_000_000)] = 100

    def load_options(self) -> dict[str, Any]:
        """The ``LoadOptions`` fields these set (``ocr``, ``ocr_lang``, ``ocr_page_seconds``, ``ocr_max_pages``)."""
        return {"ocr": self.enabled, "ocr_lang": self.lang, "ocr_page_seconds": self.page_seconds,
                "ocr_max_pages": self.max_pages}


class ServerSettings(Section):
    """``[server]``: limits of the HTTP API.

    One BLAS thread per worker: requests run side by side in threads, and OpenBLAS's own thread
    pool on top of them oversubscribes the cores (measured: hybrid search at 32 concurrent clients
    went from 7 to 138 requests/s on a 2-core machine; see benchmarks/bench_server.py).
    """

    max_upload_mb: Annotated[int, Env("BUNKO_MAX_UPLOAD_MB"), Field(ge=1, le=1_000_000)] = 50
    # Every other request body (JSON): refused with 413 past this, before it is read.
    max_json_mb: Annotated[int, Env("BUNKO_MAX_JSON_MB"), Field(ge=1, le=1024)] = 4
    rate_limit: Annotated[int, Env("BUNKO_RATE_LIMIT"), Field(ge=0)] = 600  # per API key and minute; 0 = off
    job_concurrency: Annotated[int, Env("BUNKO_JOB_CONCURRENCY"), Field(ge=1, le=1000)] = 2
    blas_threads: Annotated[int, Env("BUNKO_BLAS_THREADS"), Field(ge=1, le=1024)] = 1
    # Upload workers (bunko.server.worker): processes each API process starts beside it; 0 = separate
    # `bunko worker` processes take the jobs (any number of API replicas and workers on one store).
    job_workers: Annotated[int, Env("BUNKO_JOB_WORKERS"), Field(ge=0, le=64)] = 1
    # Where uploads wait for a worker; API processes and workers must see the same folder
    # (the same machine, or a shared file system). Default: BUNKO_HOME/spool.
    spool_dir: Annotated[str | None, Env("BUNKO_SPOOL_DIR")] = None
    # A worker renews its job's lease every quarter of this; a lease not renewed this long means it died.
    job_lease_seconds: Annotated[float, Env("BUNKO_JOB_LEASE_SECONDS"), Field(gt=0, le=86_400)] = 60.0
    # Claims of one upload before it is failed (its workers died this often).
    job_attempts: Annotated[int, Env("BUNKO_JOB_ATTEMPTS"), Field(ge=1, le=100)] = 3
    # Upload jobs of one tenant in flight (claimed by a worker) at once, across all workers; 0 = no cap.
    # Tenants take turns anyway (bunko.server.worker); the cap keeps one tenant from filling every worker.
    tenant_jobs_in_flight: Annotated[int, Env("BUNKO_TENANT_JOBS_IN_FLIGHT"), Field(ge=0, le=100_000)] = 0
    # How long an upload with ``?wait=true`` waits for its job to end before answering 202 (still processing).
    upload_wait_seconds: Annotated[float, Env("BUNKO_UPLOAD_WAIT_SECONDS"), Field(gt=0, le=86_400)] = 300.0

    @property
    def max_upload_bytes(self) -> int:
        """The largest upload, in bytes."""
        return self.max_upload_mb * 1024 * 1024

    @property
    def max_json_bytes(self) -> int:
        """The largest JSON body, in bytes."""
        return self.max_json_mb * 1024 * 1024

    @property
    def rate_limit_per_minute(self) -> int:
        """Requests per API key and minute (0: no limit)."""
        return self.rate_limit

    @classmethod
    def from_env(cls) -> ServerSettings:
        """The ``[server]`` section resolved without arguments (environment > config file > defaults)."""
        return Settings.resolve().server


class PostgresSettings(Section):
    """``[postgres]`` / ``BUNKO_PG_<KEY>``: tuning knobs of the PostgreSQL backend."""

    pool_min: Annotated[int, Env("BUNKO_PG_POOL_MIN"), Field(ge=0)] = 1
    # A search holds one connection; a hybrid search over an HNSW index also sends its vector leg on a second
    # one when one is idle (never waiting for it: else on its own, pipelined).
    pool_max: Annotated[int, Env("BUNKO_PG_POOL_MAX"), Field(ge=1)] = 8
    # Seconds a statement waits for a pooled connection (every one busy, or the server unreachable) before
    # it fails with TransientStoreError (503); also how long one attempt of the pool to reconnect goes on
    # before it starts over, so a server back after an outage is found within a few seconds.
    pool_timeout: Annotated[float, Env("BUNKO_PG_POOL_TIMEOUT"), Field(gt=0, le=600)] = 10.0
    # Seconds a new connection may take to be established (a server that accepts but does not answer).
    connect_timeout: Annotated[int, Env("BUNKO_PG_CONNECT_TIMEOUT"), Field(ge=2, le=600)] = 10
    # A connection that goes silent (the server's machine or the network gone, no reset): libpq's TCP options.
    # Data sent and not acknowledged for tcp_user_timeout seconds fails the statement (0: the kernel's default,
    # about 15 minutes of retransmissions); an idle connection is probed after keepalives_idle seconds, every
    # keepalives_interval seconds, and given up after keepalives_count probes unanswered. TCP only (not a Unix
    # socket); options the URL sets itself win.
    tcp_user_timeout: Annotated[float, Env("BUNKO_PG_TCP_USER_TIMEOUT"), Field(ge=0, le=3600)] = 30.0
    keepalives_idle: Annotated[int, Env("BUNKO_PG_KEEPALIVES_IDLE"), Field(ge=1, le=7200)] = 30
    keepalives_interval: Annotated[int, Env("BUNKO_PG_KEEPALIVES_INTERVAL"), Field(ge=1, le=600)] = 10
    keepalives_count: Annotated[int, Env("BUNKO_PG_KEEPALIVES_COUNT"), Field(ge=1, le=100)] = 3
    hnsw_m: Annotated[int, Env("BUNKO_PG_HNSW_M"), Field(ge=2, le=100)] = 16
    # Graph quality (fixed per collection when its index is built) and search breadth. At 100,000 chunks of
    # benchmarks/bench_search.py, recall@10 of plain vector search was 0.71-0.79 with the former (64, 100)
    # and 0.98 with (200, 400), at about the time of an exact numpy scan (docs/ARCHITECTURE.md).
    hnsw_ef_construction: Annotated[int, Env("BUNKO_PG_HNSW_EF_CONSTRUCTION"), Field(ge=4, le=1000)] = 200
    ef_search: Annotated[int, Env("BUNKO_PG_EF_SEARCH"), Field(ge=1, le=1000)] = 400
    # An unfiltered search of a larger collection searches wider: ef_search up to ef_search_rows chunks, then
    # ef_search * sqrt(chunks / ef_search_rows), and past ef_search_linear_rows at least ef_search * chunks /
    # ef_search_linear_rows; at most pgvector's 1,000 (search.search_breadth; 0 = never wider): 503 at 60,000
    # chunks, 649 at 100,000, 909 at 150,000, 1,000 from 165,000. Measured with HNSW over halfvec (two
    # question samples): recall@10 0.990-0.995 at 500 at 60,000, 0.991-1.0 at 600-640 at 100,000 (two builds),
    # 0.993 at 900 at 150,000 (0.98 at 740) (docs/ARCHITECTURE.md).
    ef_search_rows: Annotated[int, Env("BUNKO_PG_EF_SEARCH_ROWS"), Field(ge=0)] = 38_000
    ef_search_linear_rows: Annotated[int, Env("BUNKO_PG_EF_SEARCH_LINEAR_ROWS"), Field(ge=0)] = 66_000
    # A collection whose index is built when it holds at least this many chunks gets an IVFFlat index over
    # halfvec (the square root of its rows lists) instead of HNSW, and a search probes this share of its
    # lists, re-ranking by the full vectors. On benchmarks/bench_search.py's chunks, HNSW over halfvec found
    # 0.998 / 0.97 / 0.92-0.95 of the top 10 at 100,000 / 200,000 / 300,000 chunks (ef_search 800-1,000: its
    # graph leaves clusters unreachable, 0.755-0.873 at 1,000,000), IVFFlat probing 4% 0.975-0.982 / 0.971-0.985
    # at 200,000 / 300,000 for less server time, 0.967-0.981 at 1,000,000; at 100,000 IVFFlat peaked at 0.985.
    # 0 = never IVFFlat.
    ivfflat_min_rows: Annotated[int, Env("BUNKO_PG_IVFFLAT_MIN_ROWS"), Field(ge=0)] = 150_000
    ivfflat_probe_share: Annotated[float, Env("BUNKO_PG_IVFFLAT_PROBE_SHARE"), Field(gt=0, le=1)] = 0.04
    # At most this many lists probed (0: no cap). At 1,000,000 chunks of benchmarks/bench_search.py (1,000 lists,
    # 60 questions) probing 40 / 30 / 25 / 20 lists found 0.983 / 0.980 / 0.972 / 0.968 of the top 10, the
    # server's time about in proportion to the lists; below 750,000 chunks 4% is fewer than 30 lists.
    ivfflat_max_probes: Annotated[int, Env("BUNKO_PG_IVFFLAT_MAX_PROBES"), Field(ge=0)] = 30
    # Build a collection's HNSW index once it has this many chunks; below it exact scans are fast.
    hnsw_min_rows: Annotated[int, Env("BUNKO_PG_HNSW_MIN_ROWS"), Field(ge=0)] = 10_000
    maintenance_work_mem: Annotated[str, Env("BUNKO_PG_MAINTENANCE_WORK_MEM")] = "1GB"
    parallel_workers: Annotated[int, Env("BUNKO_PG_PARALLEL_WORKERS"), Field(ge=0, le=1024)] = 2
    # A restricted search scans exactly when the restriction leaves at most this many chunks.
    exact_max_rows: Annotated[int, Env("BUNKO_PG_EXACT_MAX_ROWS"), Field(ge=0)] = 20_000
    # Iterative HNSW scans: None = use them when pgvector supports them (0.8+); False = never.
    iterative_scan: Annotated[bool | None, Env("BUNKO_PG_ITERATIVE_SCAN")] = None
    max_scan_tuples: Annotated[int, Env("BUNKO_PG_MAX_SCAN_TUPLES"), Field(ge=1)] = 100_000
    # Refuse to run as a login that can get around RLS (superuser, BYPASSRLS, table owner) instead of warning.
    require_app_login: Annotated[bool, Env("BUNKO_PG_REQUIRE_APP_LOGIN")] = False
    # Keyword postings held in memory by this process, whole segments (MiB; 0: a search reads its terms'
    # postings from the database each time; none given: an eighth of the memory the process may use, 256 to
    # 4,096, see keyword_memory_bytes). 100,000 chunks of Japanese text hold about 211 MiB, a million 1.9 GiB.
    # docs/ARCHITECTURE.md ("Keyword postings held in memory").
    keyword_memory_mb: Annotated[int | None, Env("BUNKO_PG_KEYWORD_MEMORY_MB"), Field(ge=0, le=1_048_576)] = None

    @model_validator(mode="after")
    def _consistent(self) -> PostgresSettings:
        if self.hnsw_ef_construction < 2 * self.hnsw_m:
            raise ValueError(f"hnsw_ef_construction must be at least 2 * hnsw_m ({2 * self.hnsw_m}); "
                             f"got {self.hnsw_ef_construction}")
        if self.pool_max < self.pool_min:
            raise ValueError(f"pool_max ({self.pool_max}) must be at least pool_min ({self.pool_min})")
        return self

    @classmethod
    def from_env(cls) -> PostgresSettings:
        """The ``[postgres]`` section resolved without arguments (environment > config file > defaults)."""
        return Settings.resolve().postgres


class SQLiteSettings(Section):
    """``[sqlite]`` / ``BUNKO_SQLITE_<KEY>``: the embedded store's approximate vector search (the ``ann`` extra).

    A collection of at least ``ann_min_rows`` chunks gets an HNSW graph (usearch) that unfiltered vector
    searches ask for ``ann_candidates`` candidates at breadth ``ann_ef_search``, re-ranked by the exact
    vectors; from ``ann_lists_min_rows`` chunks, IVF lists whose nearest ``ann_probe_share`` are scored by
    int8 codes (exactly from the matrix without the extra), the best re-ranked exactly; smaller
    collections, filtered searches and installs without usearch below ``ann_lists_min_rows`` scan exactly.
    Figures in docs/ARCHITECTURE.md ("Approximate vector search").
    """

    ann: Annotated[bool, Env("BUNKO_SQLITE_ANN")] = True
    # Below 20,000 chunks the exact scan takes about a millisecond, what the graph takes at this breadth.
    ann_min_rows: Annotated[int, Env("BUNKO_SQLITE_ANN_MIN_ROWS"), Field(ge=1)] = 20_000
    # The graph's search breadth up to ann_ef_search_rows chunks; past it, ann_ef_search * sqrt(chunks /
    # ann_ef_search_rows) (0: never wider), at most 8,192. At 100,000 chunks of benchmarks/bench_search.py
    # (bf16 graph), four builds: recall@10 0.991-0.995 at 640, 0.993-0.996 at 768. At a million chunks
    # (breadth 2,024) recall is 0.865: no breadth reaches 0.99 below the exact scan's cost there.
    # docs/ARCHITECTURE.md.
    ann_ef_search: Annotated[int, Env("BUNKO_SQLITE_ANN_EF_SEARCH"), Field(ge=1, le=8192)] = 640
    ann_ef_search_rows: Annotated[int, Env("BUNKO_SQLITE_ANN_EF_SEARCH_ROWS"), Field(ge=0)] = 100_000
    ann_candidates: Annotated[int, Env("BUNKO_SQLITE_ANN_CANDIDATES"), Field(ge=1, le=4096)] = 100
    # From this many chunks a collection gets IVF lists instead of a graph: about sqrt(chunks) k-means lists
    # of chunk ids over the in-memory matrix; a search scores the nearest ann_probe_share of the lists by
    # their rows' int8 codes (with the ann extra; exactly from the matrix without it) and ranks the best
    # ann_candidates exactly. The graph's recall@10 on bench_search.py's vectors: 0.99 at 200,000 chunks,
    # 0.98 at 300,000, 0.865 at a million; the lists with their spill list at 4 / 6 / 8%: 0.995 / 0.995 /
    # 0.996 at 300,000, 0.992 / 0.995 / 0.998 at a million (1.7 / 2.2-2.4 / 2.7-2.9 ms of CPU); at 4% with
    # the far rows in three lists instead (a third fewer rows scored): 0.994 at 300,000, 0.992 at a million.
    # docs/ARCHITECTURE.md ("Int8 codes in list order, a spill list", "Far rows in three lists").
    ann_lists_min_rows: Annotated[int, Env("BUNKO_SQLITE_ANN_LISTS_MIN_ROWS"), Field(ge=1)] = 250_000
    ann_probe_share: Annotated[float, Env("BUNKO_SQLITE_ANN_PROBE_SHARE"), Field(gt=0, le=1)] = 0.04
    # Keyword postings held in memory by this process, as [postgres] keyword_memory_mb.
    keyword_memory_mb: Annotated[int | None, Env("BUNKO_SQLITE_KEYWORD_MEMORY_MB"),
                                 Field(ge=0, le=1_048_576)] = None

    @classmethod
    def from_env(cls) -> SQLiteSettings:
        """The ``[sqlite]`` section resolved without arguments (environment > config file > defaults)."""
        return Settings.resolve().sqlite


class MemorySettings(Section):
    """``[memory]`` / ``BUNKO_MEMORY_*``: agent memory search (:mod:`bunko.memory`)."""

    # A memory search that takes longer raises RagSearchTimeoutError (the seed's 2-second target).
    timeout: Annotated[float, Env("BUNKO_MEMORY_TIMEOUT"), Field(gt=0, le=600)] = 2.0
    # The semantic leg (query embedding) gets this long; past it the keyword leg answers alone.
    semantic_timeout: Annotated[float, Env("BUNKO_MEMORY_SEMANTIC_TIMEOUT"), Field(gt=0, le=600)] = 1.5

    @model_validator(mode="after")
    def _consistent(self) -> MemorySettings:
        if self.semantic_timeout > self.timeout:
            raise ValueError(f"semantic_timeout ({self.semantic_timeout}) must not exceed timeout ({self.timeout})")
        return self


SECTIONS: dict[str, type[Section]] = {
    "store": StoreSettings,
    "embedder": EmbedderSettings,
    "llm": LLMSettings,
    "rerank": RerankSettings,
    "cache": CacheSettings,
    "ingest": IngestSettings,
    "fetch": FetchSettings,
    "ocr": OCRSettings,
    "server": ServerSettings,
    "postgres": PostgresSettings,
    "sqlite": SQLiteSettings,
    "memory": MemorySettings,
}


@dataclass(frozen=True, slots=True)
class Setting:
    """One leaf of the tree and its names in each source."""

    table: str
    key: str
    env: str
    secret: bool
    field: FieldInfo

    @property
    def argument(self) -> str:
        """The keyword argument of ``Bunko(...)`` that sets this setting."""
        return Env(self.env).argument


def _leaves() -> dict[str, Setting]:
    leaves: dict[str, Setting] = {}
    for table, section in SECTIONS.items():
        for key, info in section.model_fields.items():
            [env] = [m for m in info.metadata if isinstance(m, Env)]
            secret = info.annotation is SecretStr or SecretStr in get_args(info.annotation)
            setting = Setting(table, key, env.name, secret, info)
            assert setting.argument not in leaves, setting.argument
            leaves[setting.argument] = setting
    return leaves


SETTINGS: dict[str, Setting] = _leaves()
"""Every setting by its argument name (``temperature``, ``llm_base_url``, ``pg_ef_search``, ...)."""
_BY_KEY = {(s.table, s.key): s for s in SETTINGS.values()}


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class EnvironmentSource(PydanticBaseSettingsSource):
    """Each setting's ``BUNKO_*`` variable (named by its field's ``Env``); blank counts as not set."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Nothing per field: the values come whole from ``__call__``."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        """The settings the environment sets, by section."""
        values: dict[str, dict[str, Any]] = {}
        for setting in SETTINGS.values():
            raw = os.environ.get(setting.env)
            if not _blank(raw):
                values.setdefault(setting.table, {})[setting.key] = raw
        return values


def find_config_file(config: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file in use: ``config``, else ``$BUNKO_CONFIG``, else ``./bunko.toml`` if it exists."""
    explicit = config or os.environ.get(CONFIG_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path
    path = Path.cwd() / CONFIG_FILE
    return path if path.is_file() else None


def load_config_file(config: str | os.PathLike[str] | None = None) -> tuple[Path | None, dict[str, dict[str, Any]]]:
    """The config file in use and its tables (``{"llm": {"temperature": 0.2}}``); ``(None, {})`` if none."""
    path = find_config_file(config)
    if path is None:
        return None, {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    tables: dict[str, dict[str, Any]] = {}
    for table, values in data.items():
        if table not in SECTIONS or not isinstance(values, dict):
            raise ConfigError(f"{path}: {table!r} is not a settings table; known tables: "
                              f"{', '.join(f'[{t}]' for t in SECTIONS)}")
        for key, value in values.items():
            if key not in SECTIONS[table].model_fields:
                raise ConfigError(f"{path}: unknown setting [{table}] {key}; known in [{table}]: "
                                  f"{', '.join(SECTIONS[table].model_fields)}")
            if not _blank(value):
                tables.setdefault(table, {})[key] = value
    return path, tables


class ConfigFileSource(PydanticBaseSettingsSource):
    """The tables of ``bunko.toml`` (or the file given), and the file's path as ``config_path``."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | os.PathLike[str] | None) -> None:
        super().__init__(settings_cls)
        self.path = path  # None: $BUNKO_CONFIG, else ./bunko.toml

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Nothing per field: the values come whole from ``__call__``."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        """The settings the config file sets, by section (nothing without a file)."""
        path, tables = load_config_file(self.path)
        return {} if path is None else {"config_path": path, **tables}


class Settings(BaseSettings):
    """The resolved settings tree of one engine (and of its HTTP server).

    Build it with ``Settings.resolve(...)``: flat argument names, errors as ``ConfigError``.
    """

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    store: StoreSettings = Field(default_factory=StoreSettings)
    # The table is [embedder]; the attribute ``embedder`` is the model spec, as callers use it.
    embedding: EmbedderSettings = Field(default_factory=EmbedderSettings,
                                        validation_alias=AliasChoices("embedder", "embedding"))
    llm: LLMSettings = Field(default_factory=LLMSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    ocr: OCRSettings = Field(default_factory=OCRSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    sqlite: SQLiteSettings = Field(default_factory=SQLiteSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    config_path: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments > ``BUNKO_*`` variables > the config file (``config_path=`` picks it) > defaults."""
        config = init_settings.init_kwargs.get("config_path") if isinstance(init_settings, InitSettingsSource) else None
        return init_settings, EnvironmentSource(settings_cls), ConfigFileSource(settings_cls, config)

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

        ``overrides`` take any argument name of ``SETTINGS`` (``llm``, ``llm_base_url``, ``temperature``,
        ``max_upload_mb``, ``rerank_base_url``, ``pg_ef_search``, ...); None means "not given".
        """
        given = {"database_url": database_url, "home": home, "embedder": embedder, **overrides}
        unknown = set(given) - set(SETTINGS)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        given = {name: value for name, value in given.items() if not _blank(value)}
        tables: dict[str, dict[str, Any]] = {}
        for name, value in given.items():
            setting = SETTINGS[name]
            tables.setdefault(setting.table, {})[setting.key] = value
        arguments: dict[str, Any] = dict(tables)
        if config:
            arguments["config_path"] = Path(config).expanduser()
        try:
            return cls(**arguments)
        except (SectionError, ValidationError) as exc:
            path = find_config_file(config)

            def source(table: str, key: str) -> str:
                setting = _BY_KEY[(table, key)]
                if setting.argument in given:
                    return f"--{setting.argument.replace('_', '-')}"
                if not _blank(os.environ.get(setting.env)):
                    return setting.env
                return f"{path} [{table}] {key}"

            if isinstance(exc, SectionError):
                raise ConfigError(_explain(exc.error, source, exc.table)) from None
            raise ConfigError(_explain(exc, source)) from None

    # -- the names callers use -------------------------------------------------------------------
    @property
    def home(self) -> Path:
        """bunko's data folder (``BUNKO_HOME``)."""
        return self.store.home

    @property
    def database_url(self) -> str:
        """The store's URL, in clear (it is kept as a secret)."""
        return self.store.database_url.get_secret_value()

    @property
    def anonymize_search_logs(self) -> bool:
        """Whether search logs are stored without the query."""
        return self.store.anonymize_search_logs

    @property
    def embedder(self) -> str:
        """The embedder spec, ``provider[:model]``."""
        return self.embedding.model

    @property
    def embedder_base_url(self) -> str | None:
        """The embedding provider's base URL, if set."""
        return self.embedding.base_url

    @property
    def embedder_dimensions(self) -> int | None:
        """The embedding dimensions asked of a provider that can shorten them, if set."""
        return self.embedding.dimensions

    def embedder_options(self) -> dict[str, Any]:
        """Options for ``get_embedder``: only those that are set."""
        return self.embedding.options()

    def for_processes(self, processes: int) -> Settings:
        """These settings for each of ``processes`` processes started together (``bunko serve --workers``):
        the keyword memory of a store section left unset is its default split between them, so that the
        processes together hold no more than one would."""
        if processes <= 1:
            return self
        update: dict[str, Any] = {}
        for name in ("postgres", "sqlite"):
            section = getattr(self, name)
            if section.keyword_memory_mb is None:
                share = keyword_memory_bytes(None) // processes // 2**20
                update[name] = section.model_copy(update={"keyword_memory_mb": share})
        return self.model_copy(update=update) if update else self

    def as_arguments(self) -> dict[str, Any]:
        """Every setting as ``resolve`` arguments, so ``Settings.resolve(**s.as_arguments())`` equals ``s``.

        Secrets stay ``SecretStr``, except the store URL (a plain string, as ``database_url`` takes it).
        """
        values: dict[str, Any] = {}
        for name, setting in SETTINGS.items():
            table = "embedding" if setting.table == "embedder" else setting.table
            value = getattr(getattr(self, table), setting.key)
            if value is not None:
                values[name] = value
        values["database_url"] = self.database_url
        return values


def _explain(exc: ValidationError, source: Callable[[str, str], str], table: str | None = None) -> str:
    """One line per problem: where the value came from, the value (secrets hidden), what is wrong.

    ``table`` is the section's table when the section was built on its own.
    """
    lines = []
    for error in exc.errors(include_url=False):
        if error["type"] == "default_factory_not_called":  # a default that follows from a bad value
            continue
        loc = [str(part) for part in error["loc"]]
        if table is not None:
            loc = [table, *loc]
        if len(loc) >= 2 and (loc[0], loc[1]) in _BY_KEY:
            setting = _BY_KEY[(loc[0], loc[1])]
        else:
            where = f"[{loc[0]}]" if loc else "settings"
            lines.append(f"{where}: {_message(error, None)}")
            continue
        shown = "(hidden)" if setting.secret else repr(error["input"])
        lines.append(f"{source(setting.table, setting.key)} = {shown}: {_message(error, setting)}")
    return "; ".join(lines)


def _message(error: Any, setting: Setting | None) -> str:
    kind = str(error["type"])
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than") and setting is not None:
        lo = next((m.ge for m in setting.field.metadata if isinstance(m, annotated_types.Ge)), None)
        hi = next((m.le for m in setting.field.metadata if isinstance(m, annotated_types.Le)), None)
        if lo is not None and hi is not None:
            return f"must be from {lo} to {hi}"
        if lo is not None:
            return f"must be at least {lo}"
    if kind.startswith("int_"):
        return "expected a whole number"
    if kind.startswith("float_"):
        return "expected a number"
    if kind.startswith("bool_"):
        return "expected true or false"
    if kind == "string_type":
        return "expected text"
    if kind == "path_type":
        return "expected a path"
    message = str(error["msg"]).removeprefix("Value error, ")
    return message[:1].lower() + message[1:]
