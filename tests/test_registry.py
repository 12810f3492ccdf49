"""One Registry behind every seam: built-ins, registrations and entry-point plugins, by name.

The plugin tests install a real (tiny) distribution: a ``.dist-info`` folder with an
``entry_points.txt`` on ``sys.path``, as ``pip install`` of a plugin would leave it; its
entry points name the classes below, in this module.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bunko import analysis, embedders, llm, loaders, rerankers, splitters
from bunko.analysis import analyzer_names, get_analyzer, register_analyzer
from bunko.embedders import BaseEmbedder, available_embedders, get_embedder, register_embedder, unregister_embedder
from bunko.errors import ConfigError, UnknownProviderError
from bunko.llm import LLMDelta, LLMMessage, LLMProvider, LLMResponse, available_llms, get_llm, register_llm
from bunko.loaders import FileKind, LoadOptions, discover, file_metadata, load_path, register_loader, supported_suffixes
from bunko.registry import Registry
from bunko.rerankers import BaseReranker, available_rerankers, get_reranker, register_reranker
from bunko.splitters import Splitter, available_splitters, get_splitter, register_splitter
from bunko.types import Document, SearchHit, TextChunk

SEAMS = {"bunko.embedders": embedders, "bunko.llms": llm, "bunko.rerankers": rerankers,
         "bunko.splitters": splitters, "bunko.analyzers": analysis, "bunko.loaders": loaders}


# -- one implementation per seam (used as registrations and as plugins) ---------------------------


class ConstEmbedder(BaseEmbedder):
    provider = "const"
    dimension = 3

    def __init__(self, model: str | None = None, *, scale: float = 1.0) -> None:
        self.model = model or "one"
        self.scale = scale

    async def _embed_many(self, texts: list[str]) -> np.ndarray:
        return np.full((len(texts), 3), self.scale, dtype=np.float32)


class EchoLLM:
    name = "echo"

    def __init__(self, model: str | None = None) -> None:
        self.model = model or "echo-1"

    async def complete(self, messages: list[LLMMessage], *, temperature: float = 0.1,
                       max_tokens: int = 10) -> LLMResponse:
        return LLMResponse(messages[-1].content.upper(), self.model)

    async def stream(self, messages: list[LLMMessage], *, temperature: float = 0.1,
                     max_tokens: int = 10) -> Any:
        response = await self.complete(messages)
        yield LLMDelta(text=response.text)
        yield LLMDelta(response=response)

    async def close(self) -> None:
        return None


class ReverseReranker(BaseReranker):
    provider = "reverse"

    def __init__(self, model: str | None = None) -> None:
        self.model = model or "rev"

    async def _score(self, query: str, documents: list[str], top_k: int | None) -> tuple[dict[int, float], int]:
        return {i: float(i) for i in range(len(documents))}, 0


class LineSplitter:
    def __init__(self, keep_empty: bool = False) -> None:
        self.keep_empty = keep_empty

    def split(self, text: str) -> list[TextChunk]:
        chunks, start = [], 0
        for line in text.split("\n"):
            if line or self.keep_empty:
                chunks.append(TextChunk(line, len(chunks), start, start + len(line)))
            start += len(line) + 1
        return chunks


class UpperAnalyzer:
    name = "upper"

    def index_tokens(self, text: str) -> list[str]:
        return text.upper().split()

    def query_phrases(self, text: str) -> list[tuple[str, ...]]:
        return [(t,) for t in self.index_tokens(text)]


def load_ltsv(path: Path, options: LoadOptions) -> list[Document]:
    text = path.read_text(encoding="utf-8")
    return [Document(text.replace(",", " "), file_metadata(path, "ltsv", text))]


LTSV_KIND = FileKind("ltsv", lambda: load_ltsv, (".ltsv",), "text/x-ltsv")


HITS = [SearchHit(f"c{i}", "d", "a.txt", f"text {i}", 1.0 - i / 10) for i in range(3)]


# -- registrations through each seam's public function ---------------------------------------------


def test_every_seam_keeps_one_registry_with_its_entry_point_group() -> None:
    for group, module in SEAMS.items():
        registry = module._REGISTRY
        assert isinstance(registry, Registry) and registry.group == group


def test_each_seam_registers_and_builds_through_the_registry(tmp_path: Path) -> None:
    register_embedder("const-r", ConstEmbedder)
    register_llm("echo-r", EchoLLM)
    register_reranker("reverse-r", ReverseReranker)
    register_splitter("lines-r", LineSplitter)
    register_analyzer("upper-r", UpperAnalyzer)
    register_loader("ltsv", lambda: load_ltsv, [".LTSV"], "text/x-ltsv")
    try:
        assert "const-r" in embedders._REGISTRY and "const-r" in available_embedders()
        embedder = get_embedder("const-r:two", scale=2.0)
        assert isinstance(embedder, ConstEmbedder) and embedder.model == "two"
        assert asyncio.run(embedder.embed("x")) == [2.0, 2.0, 2.0]

        assert "echo-r" in available_llms()
        model = get_llm("echo-r:e2")
        assert isinstance(model, LLMProvider) and model.model == "e2"
        assert asyncio.run(model.complete([LLMMessage("user", "abc")], temperature=0, max_tokens=5)).text == "ABC"

        assert "reverse-r" in available_rerankers()
        ranked = asyncio.run(get_reranker("reverse-r").rerank("q", HITS, top_k=2))
        assert [h.chunk_id for h in ranked] == ["c2", "c1"]

        assert "lines-r" in available_splitters()
        splitter = get_splitter("lines-r", keep_empty=True)
        assert isinstance(splitter, Splitter)
        assert [c.content for c in splitter.split("a\n\nb")] == ["a", "", "b"]

        assert "upper-r" in analyzer_names()
        assert get_analyzer("upper-r").index_tokens("mizu no bichiku") == ["MIZU", "NO", "BICHIKU"]
        assert get_analyzer("upper-r") is get_analyzer("upper-r")  # built once, then shared

        ltsv = tmp_path / "stock.ltsv"
        ltsv.write_text("水,2L,6本", encoding="utf-8")
        assert ".ltsv" in supported_suffixes() and "ltsv" in loaders._REGISTRY
        (document,) = load_path(ltsv)
        assert document.content == "水 2L 6本"
        assert (document.metadata["kind"], document.metadata["mime_type"]) == ("ltsv", "text/x-ltsv")
    finally:
        embedders._REGISTRY.unregister("const-r")
        llm._REGISTRY.unregister("echo-r")
        rerankers._REGISTRY.unregister("reverse-r")
        splitters._REGISTRY.unregister("lines-r")
        analysis._REGISTRY.unregister("upper-r")
        loaders._REGISTRY.unregister("ltsv")
    assert "const-r" not in available_embedders() and ".ltsv" not in supported_suffixes()


def test_a_registration_replaces_a_built_in_until_it_is_removed() -> None:
    register_embedder("use", ConstEmbedder)
    try:
        assert isinstance(get_embedder("use"), ConstEmbedder)
    finally:
        unregister_embedder("use")
    assert get_embedder("use").provider == "use"  # the built-in shows again


def test_analyzer_replaced_by_registration_is_not_served_from_the_cache() -> None:
    register_analyzer("upper-c", UpperAnalyzer)
    try:
        first = get_analyzer("upper-c")

        class Lower(UpperAnalyzer):
            def index_tokens(self, text: str) -> list[str]:
                return text.lower().split()

        register_analyzer("upper-c", Lower)
        assert get_analyzer("upper-c") is not first
        assert get_analyzer("upper-c").index_tokens("A B") == ["a", "b"]
    finally:
        analysis._REGISTRY.unregister("upper-c")


# -- unknown names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("lookup", "error", "listed"), [
    (lambda: get_embedder("nope"), UnknownProviderError, "unknown embedder 'nope'; available: cohere, gemini"),
    (lambda: get_llm("nope:x"), UnknownProviderError, "unknown LLM provider 'nope'; available: anthropic, gemini"),
    (lambda: get_reranker("nope"), UnknownProviderError, "unknown reranker 'nope'; available: cohere, cross-encoder"),
    (lambda: get_splitter("nope"), UnknownProviderError, "unknown splitter 'nope'; available: recursive, token"),
    (lambda: get_analyzer("nope"), ConfigError, "unknown analyzer 'nope'; available: bigram, bigram_en, combined"),
    (lambda: loaders.mime_type("nope"), UnknownProviderError, "unknown file kind 'nope'; available: csv, docx, html"),
])
def test_an_unknown_name_is_a_typed_error_listing_the_names_there_are(lookup: Callable[[], object],
                                                                      error: type[Exception], listed: str) -> None:
    with pytest.raises(error) as info:
        lookup()
    assert str(info.value).strip("\"'").startswith(listed)
    assert isinstance(info.value, ConfigError)


# -- entry-point plugins ----------------------------------------------------------------------------

ENTRY_POINTS = f"""\
[bunko.embedders]
const = {__name__}:ConstEmbedder

[bunko.llms]
echo = {__name__}:EchoLLM

[bunko.rerankers]
reverse = {__name__}:ReverseReranker

[bunko.splitters]
lines = {__name__}:LineSplitter
broken = bunko_no_such_module:Splitter

[bunko.analyzers]
upper = {__name__}:UpperAnalyzer

[bunko.loaders]
ltsv = {__name__}:LTSV_KIND
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A plugin distribution installed on ``sys.path`` (a dist-info folder, as pip leaves it)."""
    site = tmp_path / "site"
    info = site / "bunko_fixture_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bunko-fixture-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    for module in SEAMS.values():
        module._REGISTRY.reload()
    yield tmp_path
    sys.path.remove(str(site))
    for module in SEAMS.values():
        module._REGISTRY.reload()


def test_plugins_of_every_seam_are_found_by_their_entry_points(plugin: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bunko.registry"):
        assert "lines" in available_splitters()
    assert "broken" not in available_splitters() and "recursive" in available_splitters()
    assert any("could not load splitter plugin broken" in r.getMessage() for r in caplog.records)

    assert asyncio.run(get_embedder("const").embed("x")) == [1.0, 1.0, 1.0]
    assert asyncio.run(get_llm("echo").complete([LLMMessage("user", "hi")], temperature=0, max_tokens=5)).text == "HI"
    assert [h.chunk_id for h in asyncio.run(get_reranker("reverse:r").rerank("q", HITS))] == ["c2", "c1", "c0"]
    assert [c.content for c in get_splitter("lines").split("a\nb")] == ["a", "b"]
    assert get_analyzer("upper").index_tokens("kit") == ["KIT"]

    folder = plugin / "docs"
    folder.mkdir()
    (folder / "stock.ltsv").write_text("水,2L", encoding="utf-8")
    (folder / "notes.xyz").write_text("?", encoding="utf-8")
    found, skipped = discover([folder])
    assert [Path(p).name for p in found] == ["stock.ltsv"] and [Path(s.path).name for s in skipped] == ["notes.xyz"]
    assert load_path(folder / "stock.ltsv")[0].metadata["mime_type"] == "text/x-ltsv"


def test_plugins_leave_with_their_distribution(plugin: Path) -> None:
    assert "const" in available_embedders()
    sys.path.remove(str(plugin / "site"))
    embedders._REGISTRY.reload()
    try:
        assert "const" not in available_embedders()
        with pytest.raises(UnknownProviderError, match="unknown embedder 'const'"):
            get_embedder("const")
    finally:
        sys.path.insert(0, str(plugin / "site"))


def test_a_registration_wins_over_a_plugin_of_the_same_name(plugin: Path) -> None:
    register_embedder("const", lambda model=None: ConstEmbedder(model, scale=5.0))
    try:
        assert asyncio.run(get_embedder("const").embed("x")) == [5.0, 5.0, 5.0]
    finally:
        unregister_embedder("const")
    assert asyncio.run(get_embedder("const").embed("x")) == [1.0, 1.0, 1.0]  # the plugin again


# -- the Registry itself ----------------------------------------------------------------------------


def test_built_ins_named_by_import_path_are_imported_on_first_use(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bunko_lazy_builtin.py").write_text("def make(model=None, *, size=1):\n    return [model] * size\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry: Registry[list[str | None]] = Registry("widget", "bunko.test-widgets", {
        "lazy": "bunko_lazy_builtin:make", "missing": "bunko_lazy_builtin:nothing"})
    assert registry.names() == ["lazy", "missing"] and "lazy" in registry
    assert "bunko_lazy_builtin" not in sys.modules  # naming it imported nothing
    try:
        assert registry.build("lazy:m", size=2) == ["m", "m"]
        assert registry.build("lazy") == [None]
        with pytest.raises(ConfigError, match="widget 'lazy' does not take the option"):
            registry.build("lazy", colour="red")
        with pytest.raises(ConfigError, match="built-in widget 'missing' could not be imported"):
            registry.get("missing")
        with pytest.raises(UnknownProviderError, match="available: lazy, missing"):
            registry.get("other")
    finally:
        sys.modules.pop("bunko_lazy_builtin", None)


SETUP: Registry[str] = Registry("setup thing", "bunko.test-setup", "bunko_setup_module")


def test_a_module_that_registers_the_built_ins_is_imported_on_first_use(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bunko_setup_module.py").write_text(
        f"from {__name__} import SETUP\nSETUP.register('made', lambda model=None: f'made {{model}}')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "bunko_setup_module" not in sys.modules
        assert SETUP.names() == ["made"]
        assert SETUP.build("made:x") == "made x"
    finally:
        sys.modules.pop("bunko_setup_module", None)


def test_registry_layers_and_checks() -> None:
    registry: Registry[str] = Registry("thing", "bunko.test-things", {"a": json.dumps}, unknown=ConfigError)
    assert registry.create("a", [1]) == "[1]"
    registry.register("a", lambda value: "mine")
    assert registry.create("a", 1) == "mine"
    registry.unregister("a")
    registry.unregister("never-registered")  # nothing to remove: no error
    assert registry.create("a", [2]) == "[2]"
    with pytest.raises(ConfigError, match="non-empty string"):
        registry.register("", json.dumps)
    with pytest.raises(ConfigError, match="not callable"):
        registry.register("b", 42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        registry.get("zzz")
    assert type(info.value) is ConfigError and "available: a" in str(info.value)
