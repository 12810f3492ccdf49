"""The bundled embedder tokenizes a chunk once: the ids its token count made are the ids it embeds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from bunko import Bunko
from bunko.embedders import TokenIds, UniversalSentenceEncoderEmbedder, _use_model

TEXTS = [f"第{n}条 申請者は所定の様式に必要事項を記入し、所属長の承認を得たうえで総務部に{n}日以内に提出する。"
         f" Section {n}: the form goes to the office within {n} days." for n in range(40)]


def test_a_counted_text_is_embedded_from_its_kept_ids_to_the_same_vector(
        embedder: UniversalSentenceEncoderEmbedder) -> None:
    tokens = _use_model()._tokenizer
    fresh = asyncio.run(embedder.embed_array(TEXTS))  # never counted: tokenized when embedded
    assert [embedder.count_tokens(text) for text in TEXTS[:5]] and not any(text in tokens._ids for text in TEXTS)
    counts = [embedder.count_chunk_tokens(text) for text in TEXTS]  # a chunk's count keeps its ids
    assert all(text in tokens._ids for text in TEXTS)
    assert counts == [len(tokens.tokenizer.encode(text, add_bos=False, add_eos=False)) for text in TEXTS]
    assert [tokens.encode(text) for text in TEXTS[:3]] == [tokens.tokenizer.encode(text) for text in TEXTS[:3]]
    counted = asyncio.run(embedder.embed_array(TEXTS[3:]))
    assert not any(text in tokens._ids for text in TEXTS)  # taken by the embedding, not tokenized again
    # The same ids give the same vectors (the rounding of one BLAS product may differ in the last bit).
    np.testing.assert_allclose(counted, fresh[3:], rtol=0, atol=1e-6)


def test_the_kept_ids_are_bounded_oldest_first() -> None:
    tokenizer = _use_model()._tokenizer.tokenizer
    tokens = TokenIds(tokenizer, limit=120)
    sizes = [tokens.count(text) for text in TEXTS[:10]]
    assert tokens._held <= 120 and 0 < len(tokens) < 10
    kept = list(tokens._ids)
    assert kept == TEXTS[10 - len(kept):10]  # the newest stay
    assert tokens._held == sum(sizes[10 - len(kept):])
    # A dropped text is tokenized as usual.
    assert tokens.encode(TEXTS[0]) == tokenizer.encode(TEXTS[0])
    assert tokens.encode(kept[-1]) == tokenizer.encode(kept[-1]) and len(tokens) == len(kept) - 1
    assert tokens._held == sum(sizes[11 - len(kept):])


def test_ingest_embeds_every_chunk_from_the_ids_its_split_counted(tmp_path: Path, engine: Bunko) -> None:
    source = tmp_path / "rules.md"
    source.write_text("# 規程\n\n" + "\n\n".join(TEXTS * 3), encoding="utf-8")
    tenant = engine.tenant("t")
    report = tenant.ingest([source])
    assert not report.errors and report.chunks > 3
    info = tenant.store.find_by_source("default", str(source))
    assert info is not None
    stored = tenant.store.document_chunks("default", [info.id])[info.id]
    texts = [c.chunk.content for c in stored]
    assert not any(text in _use_model()._tokenizer._ids for text in texts)
    assert all(c.chunk.token_count == len(_use_model()._tokenizer.tokenizer.encode(c.chunk.content, add_bos=False,
                                                                                   add_eos=False)) for c in stored)
    vectors = np.asarray([c.vector for c in stored], dtype=np.float32)
    again = asyncio.run(UniversalSentenceEncoderEmbedder().embed_array(texts))
    np.testing.assert_allclose(vectors, again, rtol=0, atol=1e-6)
