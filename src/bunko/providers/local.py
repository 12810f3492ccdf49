"""Local models through sentence-transformers (the optional ``local`` extra; it brings torch).

``get_embedder("sentence-transformers:/models/ruri-v3-310m")`` loads a model from a local
folder, or by name from the Hugging Face cache the user already has. Nothing is
downloaded unless ``allow_download=True``: a RAG engine should not fetch hundreds of
megabytes behind the operator's back. The library is imported only when a model is built.

Models that define ``query`` and ``document`` prompts (e5, ruri, …) get them; ``query_prompt``
and ``document_prompt`` set them explicitly (ruri-v3: ``"検索クエリ: "`` and ``"検索文書: "``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..embedders import BaseEmbedder
from ..errors import ConfigError, EmbeddingError
from ..types import UsageEvent

EXTRA_HINT = 'install the "local" extra: pip install "bunko[local]"'


def import_sentence_transformers() -> Any:
    """The ``sentence_transformers`` module, or a ``ConfigError`` naming the extra to install."""
    try:
        import sentence_transformers
    except ImportError as exc:
        raise ConfigError(f"local models need sentence-transformers; {EXTRA_HINT}") from exc
    return sentence_transformers


def load_error(kind: str, model: str, exc: Exception, allow_download: bool) -> ConfigError:
    """The error of a local model that did not load, saying how to give one that will."""
    hint = "" if allow_download else " (downloads are off: give a local folder, or pass allow_download=True)"
    return ConfigError(f"could not load the {kind} {model!r}: {type(exc).__name__}: {exc}"[:400] + hint)


class LocalModel:
    """A local sentence-transformers model: where it comes from, and loading it once, on first use.

    A subclass names its ``provider`` and an ``example`` folder (for the error when no model is given)
    and implements ``_model()`` by calling :meth:`_load` with the class to build and its own options.
    """

    provider: str
    example: ClassVar[str]
    usage_sink: Callable[[UsageEvent], None] | None

    def __init__(self, model: str | None, *, device: str | None, allow_download: bool, trust_remote_code: bool,
                 usage_sink: Callable[[UsageEvent], None] | None) -> None:
        if not model:
            raise ConfigError(f"{self.provider}: give a model folder or name, e.g. '{self.provider}:{self.example}'")
        self._module = import_sentence_transformers()  # fail at construction, naming the extra
        self.model = model
        self.device = device
        self.allow_download = allow_download
        self.trust_remote_code = trust_remote_code
        self.usage_sink = usage_sink
        self._loaded: Any = None
        self._lock = threading.Lock()

    def _model(self) -> Any:
        raise NotImplementedError

    def _load(self, kind: str, class_name: str, **options: Any) -> Any:
        """The model, built by ``sentence_transformers.<class_name>`` on the first call (``kind`` names it in
        the error if it does not load)."""
        with self._lock:
            if self._loaded is None:
                try:
                    self._loaded = getattr(self._module, class_name)(
                        self.model, device=self.device, local_files_only=not self.allow_download,
                        trust_remote_code=self.trust_remote_code, **options,
                    )
                except Exception as exc:  # OSError, ValueError, HF errors: all mean "not loadable"
                    raise load_error(kind, self.model, exc, self.allow_download) from exc
            return self._loaded

    def warm_up(self) -> None:
        """Load the model ahead of the first call."""
        self._model()


class SentenceTransformerEmbedder(LocalModel, BaseEmbedder):
    """A sentence-transformers model run in a worker thread; vectors are L2-normalised by default."""

    provider = "sentence-transformers"
    example = "/models/ruri-v3-310m"
    batch_size = 32

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str | None = None,
        normalize: bool = True,
        batch_size: int | None = None,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        cache_folder: str | None = None,
        allow_download: bool = False,
        trust_remote_code: bool = False,
        usage_sink: Callable[[UsageEvent], None] | None = None,
    ) -> None:
        super().__init__(model, device=device, allow_download=allow_download, trust_remote_code=trust_remote_code,
                         usage_sink=usage_sink)
        self.normalize = normalize
        if batch_size is not None:
            self.batch_size = int(batch_size)
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.cache_folder = cache_folder

    def _model(self) -> Any:
        return self._load("model", "SentenceTransformer", cache_folder=self.cache_folder)

    @property
    def dimension(self) -> int:
        """The model's output dimension (loads the model on first use)."""
        model = self._model()
        # sentence-transformers 6 renamed the method; older releases only have the long name.
        getter = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension",
                                                                             None)
        size = getter() if getter else None
        if not size:
            size = len(model.encode(["dimension"], convert_to_numpy=True)[0])
        return int(size)

    @dimension.setter
    def dimension(self, value: int) -> None:  # BaseEmbedder learns unknown dimensions; ours is always known
        return None

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the model's tokenizer."""
        return len(self._model().tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode(self, texts: list[str], query: bool) -> np.ndarray:
        model = self._model()
        prompt = self.query_prompt if query else self.document_prompt
        kwargs: dict[str, Any] = {"batch_size": self.batch_size, "normalize_embeddings": self.normalize,
                                  "convert_to_numpy": True, "show_progress_bar": False}
        prompts = getattr(model, "prompts", None) or {}
        name = "query" if query else "document"
        if prompt is not None:
            kwargs["prompt"] = prompt
        elif name in prompts:
            kwargs["prompt_name"] = name
        try:
            return np.asarray(model.encode(texts, **kwargs), dtype=np.float32)
        except Exception as exc:
            raise EmbeddingError(f"{self.provider}:{self.model} failed: {type(exc).__name__}: {exc}") from exc

    async def _embed_many(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self._encode, texts, False)

    async def _embed_query_many(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self._encode, texts, True)
