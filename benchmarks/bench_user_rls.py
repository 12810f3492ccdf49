"""What row-level security for users (PostgreSQL migration m021) costs a memory search and a conversation read.

One tenant holds ``--users`` users (default 200), each with ``--memories`` memories (default 100) and
``--conversations`` conversations (default 5) of ``--turns`` turns (default 20), written untimed with the
hash embedder of ``bench_memory.py``. Timed, as an API key of a random user works (``tenant.for_user(user)``):

* ``memory``: ``memory.search_memory(query, user, 5)`` (hybrid: one read of the user's memories, cosine and BM25);
* ``conversation``: ``scope.conversation(name)`` (one read of a conversation's turns).

Both run in alternating rounds with the user policies of m021 in place (``with``) and dropped (``without``:
``DROP POLICY user_isolation`` on memories, conversation_turns and search_logs; created again afterwards), on
the same database in the same process, so the difference is the policies' cost and not the machine's load.

    python benchmarks/bench_user_rls.py [--users 200] [--memories 100] [--rounds 6] [--queries 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bunko import Bunko
from bunko.stores.postgres.migrations import MIGRATIONS
from bunko.types import ConversationTurn, EmbedderInfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_memory import DIM, WORDS, HashEmbedder, _sentence

_TABLES = ("memories", "conversation_turns", "search_logs")


def user_policies() -> list[str]:
    """The CREATE POLICY statements of m021 that hide other users' rows."""
    steps = dict(MIGRATIONS)["m021_user_rls"]
    return [s for s in steps if isinstance(s, str) and "user_isolation" in s]


def run(admin_url: str, url: str, users: int, memories: int, conversations: int, turns: int, rounds: int,
        queries: int) -> dict[str, Any]:
    import psycopg

    rng = random.Random(5)
    embedder = HashEmbedder()
    engine = Bunko(url, embedder=embedder, analyzer="bigram")
    tenant = engine.tenant("bench")
    records = tenant.memory._records
    from bunko.memory import MemoryRecord

    records.ensure_store("memories", EmbedderInfo(embedder.provider, embedder.model, DIM), "bigram")
    for u in range(users):
        texts = [_sentence(rng) for _ in range(memories)]
        vectors = np.asarray([embedder._vector(t) for t in texts], dtype=np.float32)
        records.add("memories", [MemoryRecord(t, "dialogue", "math").write(f"user-{u}", "s") for t in texts], vectors)
        scope = tenant.for_user(f"user-{u}")
        for c in range(conversations):
            scope.conversations().append(f"talk-{c}", [ConversationTurn("user" if t % 2 == 0 else "assistant",
                                                                        _sentence(rng)) for t in range(turns)])
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("ANALYZE")

    def toggle(on: bool) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            if on:
                for statement in user_policies():
                    conn.execute(statement)
            else:
                for table in _TABLES:
                    conn.execute(f"DROP POLICY user_isolation ON bunko.{table}")

    timings: dict[str, dict[str, list[float]]] = {m: {"memory": [], "conversation": []} for m in ("with", "without")}
    on = True
    for r in range(rounds * 2):
        mode = "with" if r % 2 == 0 else "without"
        if (mode == "with") != on:
            toggle(mode == "with")
            on = mode == "with"
        for i in range(queries + 3):
            user = f"user-{rng.randrange(users)}"
            scope = tenant.for_user(user)
            query = f"{rng.choice(WORDS)}の{rng.choice(WORDS)}"
            t0 = time.perf_counter()
            found = scope.memory.search_memory(query, user, 5, timeout=60)
            t1 = time.perf_counter()
            read = scope.conversation(f"talk-{rng.randrange(conversations)}")
            t2 = time.perf_counter()
            assert found["memories"] and len(read) == turns
            if i >= 3:  # warm-up after each switch
                timings[mode]["memory"].append((t1 - t0) * 1000)
                timings[mode]["conversation"].append((t2 - t1) * 1000)
    if not on:
        toggle(True)
    engine.close()

    def figures(samples: list[float]) -> dict[str, float]:
        ordered = sorted(samples)
        return {"p50_ms": round(statistics.median(ordered), 3),
                "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3)}

    return {"users": users, "memories": users * memories, "conversation_turns": users * conversations * turns,
            "rounds": rounds, "queries_per_round": queries,
            "results": {mode: {name: figures(s) for name, s in parts.items()} for mode, parts in timings.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--memories", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each mode, alternating")
    parser.add_argument("--queries", type=int, default=50, help="timed searches and reads per round")
    parser.add_argument("--json", action="store_true", help="JSON on stdout")
    args = parser.parse_args(argv)
    from bunko.testing.postgres import TemporaryPostgres, with_dbname

    folder = Path(tempfile.mkdtemp(prefix="bunko-bench-user-rls-"))
    server = TemporaryPostgres(folder / "pg")
    try:
        url = server.create_database("bunko_bench_user_rls")
        report = run(with_dbname(server.admin_url, "bunko_bench_user_rls"), url, args.users, args.memories,
                     args.conversations, args.turns, args.rounds, args.queries)
    finally:
        server.close()
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['memories']:,} memories and {report['conversation_turns']:,} turns of {report['users']} users",
              file=sys.stderr)
        for mode, parts in report["results"].items():
            for name, f in parts.items():
                print(f"  {mode:8s} {name:13s} p50 {f['p50_ms']:8.3f} ms   p95 {f['p95_ms']:8.3f} ms", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
