"""Tenant isolation as a property: a Hypothesis state machine over the engine API, on both stores.

Random operations — ingest, version changes, record upserts and vector queries, deletes (also of
other tenants' ids), searches in every mode with and without filters, answers with a conversation,
usage, search logs, tenant erasure — for three tenants, and after every step: no tenant sees, counts,
changes or deletes anything of another. Each tenant's texts carry its own token, so a hit of another
tenant shows at once. The embedder is a tiny deterministic one (what is tested is the stores'
isolation, not the embedding): vectors from the characters of the text.

The default run does 2,000 operations per store; the long form (``-m long``) 100,000.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from bunko import Bunko, Document
from bunko.embedders import BaseEmbedder
from bunko.errors import CollectionNotFoundError

TOKENS = ("alphatok", "betatok", "gammatok")  # the mark of each tenant's texts
WORDS = ("水", "備蓄", "避難", "地震", "電池", "食料", "毛布", "ラジオ")
COLLECTION = "c"
DIMENSION = 16


class CharEmbedder(BaseEmbedder):
    """Deterministic vectors from a text's characters (hashed into 16 dimensions)."""

    provider, model, dimension = "test", "chars-16", DIMENSION

    async def _embed_many(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for char in text:
                out[row, hashlib.blake2b(char.encode(), digest_size=1).digest()[0] % DIMENSION] += 1.0
            out[row] /= max(float(np.linalg.norm(out[row])), 1e-6)
        return out


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bunko]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 'p.db'}"
    e = Bunko(url, embedder=CharEmbedder())
    yield e
    e.close()


def _machine(engine: Bunko, counter: Any, tally: dict[str, int]) -> type[RuleBasedStateMachine]:
    class Isolation(RuleBasedStateMachine):
        @initialize()
        def fresh_tenants(self) -> None:
            run = next(counter)  # new tenant names per example: earlier examples' data must stay invisible too
            self.names = [f"p{run}t{i}" for i in range(3)]
            self.tenants = [engine.tenant(name) for name in self.names]
            self.documents: list[dict[str, str]] = [{}, {}, {}]  # source -> document id
            self.records: list[set[str]] = [set(), set(), set()]
            self.searches = [0, 0, 0]
            self.turns = [0, 0, 0]
            self.queries: list[set[str]] = [set(), set(), set()]  # what each tenant itself asked

        def _step(self) -> None:
            tally["operations"] += 1

        def _own(self, t: int, content: str) -> None:
            for i, token in enumerate(TOKENS):
                if i != t and token in content:
                    tally["violations"] += 1
                    raise AssertionError(f"tenant {t} got content of tenant {i}: {content!r}")

        @rule(t=st.integers(0, 2), source=st.integers(0, 5), words=st.lists(st.sampled_from(WORDS), min_size=1,
                                                                             max_size=4), tag=st.sampled_from("xy"))
        def ingest(self, t: int, source: int, words: list[str], tag: str) -> None:
            self._step()
            text = f"{TOKENS[t]} {' '.join(words)} 文書 {source}"
            result = self.tenants[t].add_document(Document(text, {"source": f"s{source}", "tag": tag}), COLLECTION)
            previous = self.documents[t].get(f"s{source}")
            if previous is not None:  # a version change keeps the id
                assert result.document_id == previous
            self.documents[t][f"s{source}"] = result.document_id

        @rule(t=st.integers(0, 2), victim=st.integers(0, 2), pick=st.integers(0, 10))
        def delete(self, t: int, victim: int, pick: int) -> None:
            self._step()
            ids = sorted(self.documents[victim].items())
            if not ids:
                return
            source, document_id = ids[pick % len(ids)]
            deleted = self.tenants[t].delete_documents([document_id])
            if t == victim:
                assert deleted == 1
                del self.documents[t][source]
            else:
                if deleted:
                    tally["violations"] += 1
                assert deleted == 0, f"tenant {t} deleted a document of tenant {victim}"

        @rule(t=st.integers(0, 2), about=st.integers(0, 2), mode=st.sampled_from(["vector", "keyword", "hybrid"]),
              tag=st.sampled_from([None, "x", "y"]), word=st.sampled_from(WORDS))
        def search(self, t: int, about: int, mode: str, tag: str | None, word: str) -> None:
            self._step()
            query = f"{TOKENS[about]} {word}"
            try:
                found = self.tenants[t].search(query, COLLECTION, mode=mode, top_k=20,
                                               filter={"tag": tag} if tag else None)
            except CollectionNotFoundError:
                return
            self.searches[t] += 1
            self.queries[t].add(query)
            own = set(self.documents[t].values())
            for hit in found.results:
                self._own(t, hit.content)
                assert hit.document_id in own or hit.chunk_id in self.records[t], hit
                if tag:
                    assert hit.metadata.get("tag") == tag
            if about != t and mode == "keyword":
                assert all(TOKENS[about] not in hit.content for hit in found.results)

        @rule(t=st.integers(0, 2), seed=st.integers(0, 1000))
        def upsert_and_query(self, t: int, seed: int) -> None:
            self._step()
            vector = np.random.default_rng(seed).normal(size=DIMENSION).tolist()
            [record_id] = self.tenants[t].upsert(COLLECTION, [{"content": f"{TOKENS[t]} record {seed}",
                                                               "vector": vector}])
            self.records[t].add(record_id)
            self.searches[t] += 1  # a vector query is logged as a search too
            for hit in self.tenants[t].query(COLLECTION, vector=vector, top_k=50):
                self._own(t, hit.content)
                assert hit.chunk_id in self.records[t] or hit.document_id in set(self.documents[t].values())

        @rule(t=st.integers(0, 2), about=st.integers(0, 2))
        def ask(self, t: int, about: int) -> None:
            self._step()
            question = f"{TOKENS[about]} 水は？"
            try:
                answer = self.tenants[t].ask(question, COLLECTION, conversation_id="talk")
            except CollectionNotFoundError:
                return
            self.searches[t] += 1
            self.queries[t].add(question)
            self.turns[t] += 2
            own = set(self.documents[t].values())
            for source in answer.sources:
                self._own(t, source.excerpt)
                assert source.document_id in own or source.chunk_id in self.records[t]

        @rule(t=st.integers(0, 2))
        def records_of_the_tenant(self, t: int) -> None:
            self._step()
            logs = self.tenants[t].search_log(10_000)
            assert len(logs) == self.searches[t], (len(logs), self.searches[t])
            for entry in logs:  # the tenant's own queries (which may name another tenant's token)
                lines = (entry["query"] or "").split("\n")  # a follow-up question carries the earlier ones
                assert entry["query"] is None or all(line in self.queries[t] for line in lines), entry
            usage: dict[str, int] = {}
            for total in self.tenants[t].usage():  # one total per operation, provider and model
                usage[total.operation] = usage.get(total.operation, 0) + total.calls
            assert usage.get("search", 0) == len(logs), (usage, len(logs))  # counted for this tenant alone
            turns = self.tenants[t].conversation("talk")
            assert len(turns) == self.turns[t]
            for turn in turns:
                if turn.role == "user":
                    assert turn.content in self.queries[t]
                else:
                    self._own(t, turn.content)

        @rule(t=st.integers(0, 2))
        def erase(self, t: int) -> None:
            self._step()
            records = engine.backend.service_records()
            records.erase_tenant(engine.backend.for_tenant(self.names[t]))
            self.documents[t], self.records[t] = {}, set()
            self.searches[t] = self.turns[t] = 0
            self.queries[t] = set()

        @invariant()
        def each_tenant_lists_exactly_its_own(self) -> None:
            if not hasattr(self, "tenants"):
                return
            for t, tenant in enumerate(self.tenants):
                try:
                    listed = {d.id for d in tenant.documents(COLLECTION)}
                except CollectionNotFoundError:
                    listed = set()
                if listed != set(self.documents[t].values()):
                    tally["violations"] += 1
                assert listed == set(self.documents[t].values()), (t, listed, self.documents[t])

    return Isolation


def _run(engine: Bunko, examples: int, steps: int) -> dict[str, int]:
    tally = {"operations": 0, "violations": 0}
    machine = _machine(engine, itertools.count(), tally)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        # No shrinking: over a real database it takes minutes; the failing steps are printed as they ran.
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck)))
    return tally


def test_isolation_holds_over_thousands_of_random_operations(engine: Bunko) -> None:
    tally = _run(engine, examples=12, steps=200)
    print(f"isolation property on {engine.backend.scheme}: {tally['operations']} operations, "
          f"{tally['violations']} violations")
    assert tally["violations"] == 0
    assert tally["operations"] >= 2000


@pytest.mark.slow
@pytest.mark.long
def test_isolation_holds_over_a_hundred_thousand_operations(engine: Bunko) -> None:
    tally = _run(engine, examples=200, steps=500)
    print(f"isolation property on {engine.backend.scheme}: {tally['operations']} operations, "
          f"{tally['violations']} violations")
    assert tally["violations"] == 0 and tally["operations"] >= 95_000
