"""Metadata filters (R18, R21): parsing and errors, dates, shortcuts, and filters through the engine and CLI.

The operator table itself runs on every backend in the store conformance suite
(``bunko.testing.store_suite``); here the same engine and CLI run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bunko import Bunko, Document, FilterError, build_filter, parse_filter
from bunko.cli import cli
from bunko.filters import And, Compare, Not, date_window_filter, file_type_filter, parse_date

from .conftest import EXAMPLES


# -- parsing -------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,problems", [
    ([1], ["(filter): a filter must be an object, got a list"]),
    ({"year": [2020, 2021]}, ["year: $eq needs a string, number, boolean, date or null, got a list"]),
    ({"year": {"$gt": True}}, ["year: $gt needs a number, a date or a string, got a boolean"]),
    ({"year": {"$lte": None}}, ["year: $lte needs a number, a date or a string, got null"]),
    ({"year": {"$in": 2020}}, ["year: $in needs a list of values, got a number"]),
    ({"year": {"$in": [1, {"a": 1}]}}, ["year: $in[1] needs a string, number, boolean, date or null, got an object"]),
    ({"year": {"$exists": "yes"}}, ["year: $exists needs true or false, got a string"]),
    ({"tags": {"$contains": ["a"]}}, ["tags: $contains needs a string, number or boolean, got a list"]),
    ({"year": {"$gt": float("nan")}}, ["year: $gt needs a finite number, got nan"]),
    ({"year": {}}, ['year: an empty operator object; write a value or an operator such as {"$eq": ...}']),
    ({"author": {"name": "Sato"}}, ["author: a field's value must be a value or an object of operators ($eq, $gt, "
                                    "...); to reach a nested field use a dotted name such as 'author.name'"]),
    ({"$or": {"a": 1}}, ["$or: $or needs a list of filters, got an object"]),
    ({"$and": []}, ["$and: $and needs at least one filter"]),
    ({"$nor": [{"a": 1}]}, ["$nor: unknown operator $nor; at this level use a field name, $and, $or or $not"]),
    ({"year": {"$and": [{"$gt": 1}]}}, ["year: $and belongs at the filter level, not inside a field"]),
    ({"year": {"$not": 5}}, ['year: $not needs an object of operators such as {"$gt": 5}, got a number']),
    ({"a.0": 1}, ["(filter): invalid field name 'a.0': use letters, digits, '_' or '-' (up to 64 per part, not "
                  "only digits), parts joined by '.' (at most 8)"]),
    # every bad part is reported, each with its path
    ({"$and": [{"year": {"$gt": []}}, {"$or": [{"ok": 1}, {"tags": {"$contains": None}}]}], "x": {"$regex": "a"}},
     ["$and[0].year: $gt needs a number, a date or a string, got a list",
      "$and[1].$or[1].tags: $contains needs a string, number or boolean, got null",
      "x: unknown operator $regex; use one of $eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $exists, $contains, $not"]),
])
def test_malformed_filters_list_every_problem_with_its_path(spec: object, problems: list[str]) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(spec)  # type: ignore[arg-type]
    assert [str(p) for p in caught.value.problems] == problems
    assert caught.value.message == "invalid filter: " + "; ".join(problems)
    assert caught.value.code == "INVALID_FILTER"


def test_parsing_builds_a_small_ast() -> None:
    flt = parse_filter('{"year": {"$gte": 2020, "$ne": 2021}, "kind": "pdf"}')
    assert flt is not None and flt.fields() == ["year", "kind"]
    assert isinstance(flt.root, And)
    year, kind = flt.root.items
    assert isinstance(year, And)
    year_gte, year_ne = year.items
    assert (year_gte.op, year_gte.operand.kind, year_gte.operand.value) == ("gte", "number", 2020)
    assert isinstance(year_ne, Not) and isinstance(year_ne.item, Compare)
    assert (kind.field, kind.operand.kind) == (("kind",), "string")
    assert parse_filter("{}").is_empty and parse_filter(None) is None and parse_filter("  ") is None
    assert parse_filter({"published": {"$lt": "2024-01-01"}}).root.operand.kind == "date"  # type: ignore[union-attr]
    # $contains never reads its operand as a date: it is text to look for
    assert parse_filter({"tags": {"$contains": "2024-01-01"}}).root.operand.kind == "string"  # type: ignore[union-attr]
    too_deep: dict = {"a": 1}
    for _ in range(20):
        too_deep = {"$not": too_deep}
    with pytest.raises(FilterError, match="nested deeper than 16 levels"):
        parse_filter(too_deep)
    with pytest.raises(FilterError, match=r"takes at most 1000 values, got 1001"):
        parse_filter({"a": {"$in": list(range(1001))}})


@pytest.mark.parametrize("text,expected", [
    ("2024-01-01", "2024-01-01T00:00:00+00:00"),
    ("2024-01-01T09:00:00+09:00", "2024-01-01T00:00:00+00:00"),
    ("2024-01-01 09:00", "2024-01-01T09:00:00+00:00"),  # no offset: UTC
    ("2023-12-31T22:00:00-02:00", "2024-01-01T00:00:00+00:00"),
    ("2024-02-29T23:59:59.5Z", "2024-02-29T23:59:59.500000+00:00"),
    ("2024-02-30", None), ("2023-02-29", None), ("2024-1-1", None), ("2024-01-01T24:00", None),
    ("2024-01-01T10:00+15:00", None), ("0000-01-01", None), ("20240101", None), ("yesterday", None), ("", None),
    (20240101, None),
])
def test_dates_are_strict_iso_8601(text: object, expected: str | None) -> None:
    from datetime import UTC, datetime, timedelta

    micros = parse_date(text)
    if expected is None:
        assert micros is None
    else:
        assert datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros) == datetime.fromisoformat(expected)


def test_python_evaluation_follows_the_typing_rules() -> None:
    flt = parse_filter({"n": {"$gt": 5}})
    assert flt.matches({"n": 6}) and flt.matches({"n": 5.5})
    assert not flt.matches({"n": "6"}) and not flt.matches({"n": True}) and not flt.matches({})
    assert parse_filter({"n": {"$ne": 5}}).matches({})  # negations match a missing field
    assert parse_filter({"n": 1}).matches({"n": 1.0}) and not parse_filter({"n": 1}).matches({"n": True})
    # the chunk's value wins over the document's, even when it is null
    assert parse_filter({"year": None}).matches({"year": None}, {"year": 2020})
    assert parse_filter({"year": 2020}).matches({}, {"year": 2020})


# -- shortcuts (R21) -------------------------------------------------------------------------------
def test_file_type_and_date_window_shortcuts() -> None:
    assert file_type_filter(["PDF", ".md", "htm", "markdown"]) == {"kind": {"$in": ["pdf", "markdown", "html"]}}
    assert file_type_filter(["application/pdf", "txt"]) == {
        "$or": [{"kind": {"$in": ["text"]}}, {"mime_type": {"$in": ["application/pdf"]}}]}
    # a day given as `until` counts whole
    assert date_window_filter("2024-01-01", "2024-12-31") == {"created_at": {"$gte": "2024-01-01",
                                                                             "$lt": "2025-01-01"}}
    assert date_window_filter(until="2024-06-30T12:00:00+09:00", date_field="published_at") == {
        "published_at": {"$lte": "2024-06-30T12:00:00+09:00"}}
    flt = build_filter({"lang": "ja"}, file_types=["pdf"], since="2024-01-01", date_field="published_at")
    assert flt is not None and flt.spec == {"$and": [{"lang": "ja"}, {"kind": {"$in": ["pdf"]}},
                                                     {"published_at": {"$gte": "2024-01-01"}}]}
    assert flt.matches({}, {"lang": "ja", "kind": "pdf", "published_at": "2024-03-01"})
    assert not flt.matches({}, {"lang": "ja", "kind": "pdf", "published_at": "2023-12-31T23:59:59Z"})
    assert build_filter() is None and build_filter({}) is None
    with pytest.raises(FilterError) as caught:
        build_filter({"a": {"$gt": []}}, file_types=["exe"], since="last week", date_field="published_at")
    assert [p.path for p in caught.value.problems] == ["a", "file_types", "since"]
    with pytest.raises(FilterError, match="date_field: given without since or until"):
        build_filter(date_field="published_at")


# -- through the engine, on both backends ----------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def engine_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'filters.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture()
def two_tenants(engine_url: str, embedder) -> Iterator[Bunko]:
    """Tenant alpha holds the sample documents; tenant beta one note, in a collection of the same name."""
    with Bunko(engine_url, embedder=embedder) as engine:
        report = engine.tenant("alpha").ingest([EXAMPLES], "docs")
        assert len(report.documents) == 6 and not report.errors
        engine.tenant("beta").add_document(Document(
            "ベータ社の備蓄メモ。水と食料を3日分、地震に備えて用意します。",
            {"source": "beta-note", "kind": "markdown", "published_at": "2024-05-01", "tags": ["防災", "beta"]},
        ), "docs")
        yield engine


def test_filters_restrict_every_search_mode(two_tenants: Bunko) -> None:
    alpha = two_tenants.tenant("alpha")
    for mode in ("vector", "keyword", "hybrid"):
        hits = alpha.search("地震 earthquake", "docs", top_k=10, mode=mode, file_types=["md"]).results
        assert hits and {Path(h.source).suffix for h in hits} == {".md"}, mode
        hits = alpha.search("地震 earthquake", "docs", top_k=10, mode=mode, filter={"filename": "hinan.md"}).results
        assert hits and {Path(h.source).name for h in hits} == {"hinan.md"}, mode
        assert alpha.search("地震", "docs", mode=mode, since="2999-01-01").results == [], mode
        assert len(alpha.search("地震", "docs", top_k=3, mode=mode, since="1970-01-01").results) == 3, mode
    response = alpha.search("水", "docs", filter='{"kind": "text"}', until="2999-12-31")
    assert response.filter is not None and response.to_dict()["filter"] == {
        "$and": [{"kind": "text"}, {"created_at": {"$lt": "3000-01-01"}}]}
    assert {Path(h.source).suffix for h in response.results} == {".txt"}
    answer = alpha.ask("水は何日分備蓄すればいいですか？", "docs", file_types=["txt"])
    assert answer.sources and {Path(s.source).name for s in answer.sources} <= {"bichiku.txt",
                                                                                "communication-plan.txt"}
    with pytest.raises(FilterError, match=r"invalid filter: year: \$gt needs a number"):
        alpha.search("水", "docs", filter={"year": {"$gt": [1]}}, mode="hybrid")
    with pytest.raises(FilterError):
        alpha.ask("水", "docs", filter="{not json")


def test_filters_from_another_tenant_see_nothing_of_alpha(two_tenants: Bunko) -> None:
    """Beta's filters that would match alpha's documents return nothing of alpha's, in every mode."""
    beta = two_tenants.tenant("beta")
    alpha_filters = [{"filename": "hinan.md"}, {"kind": {"$in": ["markdown", "text"]}}, {"source_type": "file"},
                     {"mime_type": {"$exists": True}}, {"language": {"$in": ["ja", "en"]}}, {}]
    for mode in ("vector", "keyword", "hybrid"):
        for flt in alpha_filters:
            hits = beta.search("地震 避難 水 earthquake", "docs", top_k=20, mode=mode, filter=flt).results
            assert {h.source for h in hits} <= {"beta-note"}, (mode, flt)
        hits = beta.search("地震 備蓄", "docs", mode=mode, filter={"tags": {"$contains": "防災"}}).results
        assert [h.source for h in hits] == ["beta-note"], mode
        assert beta.search("地震", "docs", mode=mode, file_types=["md"], since="2024-05-01",
                           date_field="published_at").results[0].source == "beta-note"
        assert beta.search("地震", "docs", mode=mode, filter={"source_type": "file"}).results == []
    assert beta.store.count("docs", filter={"source_type": "file"}) == 0
    assert two_tenants.tenant("alpha").store.count("docs", filter={"source_type": "file"}) > 6


# -- the CLI -------------------------------------------------------------------------------------
def test_cli_filters_and_their_errors(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"

    def run(*args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(cli, ["--db", db, *args], catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    assert run("ingest", str(EXAMPLES), "--json")[0] == 0
    code, out, _ = run("search", "地震", "-k", "10", "--file-type", "md", "--filter", '{"language": "ja"}', "--json")
    data = json.loads(out)
    assert code == 0 and data["results"]
    assert {Path(r["source"]).suffix for r in data["results"]} == {".md"}
    assert {r["metadata"]["language"] for r in data["results"]} == {"ja"}
    assert data["filter"] == {"$and": [{"language": "ja"}, {"kind": {"$in": ["markdown"]}}]}
    code, out, _ = run("search", "地震", "--since", "2999-01-01", "--date-field", "created_at", "--json")
    assert code == 0 and json.loads(out)["results"] == []
    code, out, _ = run("ask", "水は何日分備蓄すればいいですか？", "--file-type", "txt", "--mode", "hybrid", "--json")
    assert code == 0 and {Path(s["source"]).suffix for s in json.loads(out)["sources"]} == {".txt"}

    # malformed filters: one line (or one JSON error), exit 1, never a traceback
    code, out, err = run("search", "地震", "--filter", '{"year": {"$gt": [2020]}, "a b": 1}')
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.strip() == ("error: invalid filter: year: $gt needs a number, a date or a string, got a list; "
                           "(filter): invalid field name 'a b': use letters, digits, '_' or '-' (up to 64 per part, "
                           "not only digits), parts joined by '.' (at most 8)")
    code, out, _ = run("ask", "水", "--filter", "{oops", "--json")
    error = json.loads(out)["error"]
    assert code == 1 and (error["type"], error["code"]) == ("FilterError", "INVALID_FILTER")
    assert error["problems"] == [{"path": "", "message": "not valid JSON: Expecting property name enclosed in "
                                                         "double quotes at line 1 column 2"}]
    code, out, _ = run("search", "x", "--file-type", "exe", "--until", "tomorrow", "--json")
    assert code == 1 and [p["path"] for p in json.loads(out)["error"]["problems"]] == ["file_types", "until"]
