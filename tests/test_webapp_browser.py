"""The web app in a real browser: Debian's Chromium driven by Playwright against a live ``bunko serve``.

One server (embedded SQLite store, the bundled embedder, an OpenAI-compatible fake LLM on a local
socket) and one browser serve the whole module. Every page fails its test on a console error or an
uncaught exception. Where no Chromium is installed (or Playwright is missing) the tests skip and say so.

``BUNKO_SCREENSHOTS=docs/screenshots`` makes the tests save a screenshot of each screen there, at
desktop and phone width (how the README's pictures are made).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import EXAMPLES, FIXTURES
from tests.provider_fakes import OpenAIFake
from tests.test_server import LiveServer

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")

CHROMIUM = os.environ.get("BUNKO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).is_file(),
                       reason=f"no Chromium at {CHROMIUM} (install Debian's chromium package, or set BUNKO_CHROMIUM)"),
]

DOCS = sorted(p for p in EXAMPLES.iterdir() if p.suffix in {".md", ".txt"})
PDF = FIXTURES / "bousai_ja.pdf"  # two pages of Japanese: 家庭の防災備蓄ガイド
COLLECTION = "bousai"
QUESTION = "飲料水は一人一日どれくらい必要ですか？"
# The fake model's answer, streamed in these pieces; it cites the three best passages.
PIECES = ["飲料水は", "一人一日三リットル", "が目安です[1]。", "最低三日分、", "できれば一週間分を", "備えます[2][3]。"]
GATE = 3  # the fake holds its stream after the role frame and two pieces until the test releases it
STEP = 120_000  # ms: Playwright waits for events up to this long (only to catch hangs on a loaded machine)
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
SHOTS = os.environ.get("BUNKO_SCREENSHOTS")


class Held(threading.Event):
    """The fake's gate, held until the test releases it (the fake's own wait gives up after 10 s)."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(None if timeout is None else max(timeout, STEP / 1000))


@pytest.fixture(scope="module")
def llm() -> Iterator[OpenAIFake]:
    with OpenAIFake(stream_pieces=PIECES) as fake:
        fake.release = Held()
        yield fake


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, llm: OpenAIFake) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("webapp") / "home", BUNKO_LLM="openai-compatible:fake-model",
                        BUNKO_LLM_BASE_URL=llm.url + "/v1")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keys(live: LiveServer) -> dict[str, str]:
    return {"a": live.key("acme", "alice"), "b": live.key("globex", "bob")}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        # launch() gives each run a fresh, temporary user-data directory.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield chromium
        chromium.close()


class Console:
    """What a page logged: console errors and uncaught exceptions fail the test."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.allowed: list[re.Pattern[str]] = []
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def allow(self, pattern: str) -> None:
        """Expect console errors matching ``pattern`` (the browser logs refused requests, e.g. a 401)."""
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


@pytest.fixture()
def open_page(browser: Any, live: LiveServer) -> Iterator[Callable[..., tuple[Any, Console]]]:
    contexts: list[Any] = []
    consoles: list[Console] = []

    def open_(locale: str = "en-US", viewport: dict[str, int] = DESKTOP) -> tuple[Any, Console]:
        context = browser.new_context(locale=locale, viewport=viewport, base_url=live.url)
        context.set_default_timeout(STEP)
        contexts.append(context)
        page = context.new_page()
        console = Console(page)
        consoles.append(console)
        page.goto("/")
        return page, console

    yield open_
    for context in contexts:
        context.close()
    problems = [e for c in consoles for e in c.unexpected()]
    assert not problems, problems


def expect(locator: Any) -> Any:
    return sync_api.expect(locator)


def shot(page: Any, name: str) -> None:
    """Save a screenshot of the page when BUNKO_SCREENSHOTS names a folder."""
    if SHOTS:
        folder = Path(SHOTS)
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"), full_page=False)


def unlabelled(page: Any) -> list[str]:
    """The visible form controls and buttons of the page without an accessible name."""
    return list(page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button, a[href]')]
        .filter((e) => e.getClientRects().length && e.type !== 'hidden')
        .filter((e) => !((e.labels && e.labels.length) || e.getAttribute('aria-label') || e.textContent.trim()))
        .map((e) => e.outerHTML.slice(0, 80))"""))


def sign_in(page: Any, key: str) -> None:
    page.get_by_test_id("api-key-input").fill(key)
    page.get_by_test_id("sign-in").click()
    expect(page.get_by_role("navigation")).to_be_visible()


def ensure_documents(live: LiveServer, key: str) -> None:
    """Tenant A's documents, uploaded over the API when the browser test has not done it (a -k run)."""
    client = live.client(key)
    have = {d["filename"] for d in client.get("/api/v1/documents", params={"limit": 500}).json()["documents"]}
    for path in [*DOCS, PDF]:
        if path.name not in have:
            response = client.post("/api/v1/documents/upload", params={"wait": "true"}, data={"collection": COLLECTION},
                                   files={"file": (path.name, path.read_bytes())})
            assert response.status_code == 200 and response.json()["status"] == "completed", response.text


def test_upload_ask_and_check_the_cited_passage(open_page: Callable[..., tuple[Any, Console]], live: LiveServer,
                                                keys: dict[str, str], llm: OpenAIFake) -> None:
    """Sign in, upload several files at once, wait for completed, ask in Japanese, watch tokens stream,
    open a [N] and read the cited passage with its file and page; then search and usage."""
    page, _ = open_page()
    expect(page.get_by_label("API key")).to_be_visible()
    shot(page, "sign-in-desktop")
    sign_in(page, keys["a"])

    # A new collection, then several files at once through the file picker.
    page.get_by_role("button", name="New…").click()
    page.get_by_role("textbox", name="New collection name").fill(COLLECTION)
    page.get_by_role("button", name="OK").click()
    expect(page.get_by_test_id("collection-select")).to_have_value(COLLECTION)
    files = [*DOCS, PDF]
    page.get_by_test_id("upload-input").set_input_files([str(p) for p in files])
    statuses = page.get_by_test_id("upload-status")
    expect(statuses).to_have_count(len(files))
    for i in range(len(files)):
        expect(statuses.nth(i).locator(".status")).to_have_text("completed", timeout=4 * STEP)
    rows = page.get_by_test_id("document-row")
    expect(rows).to_have_count(len(files))
    pdf_row = rows.filter(has_text=PDF.name)
    expect(pdf_row).to_contain_text("completed")
    expect(pdf_row.locator("td").nth(2)).to_have_text("1")  # one chunk
    expect(pdf_row.locator("td").nth(3)).to_have_text("1")  # version 1
    shot(page, "documents-desktop")
    assert not unlabelled(page)

    # Chat: the first tokens are on the page while the model still holds back the rest of its answer.
    page.get_by_role("button", name="Chat").click()
    llm.stream_gate_after = GATE
    llm.release.clear()
    page.get_by_test_id("chat-input").fill(QUESTION)
    page.get_by_test_id("chat-send").click()
    answer = page.get_by_test_id("answer")
    try:
        expect(answer).to_contain_text(PIECES[0] + PIECES[1])
        assert llm.holding.is_set(), "the model's stream was not held while the first tokens showed"
        expect(answer).to_have_attribute("data-state", "streaming")
    finally:
        llm.release.set()
    expect(answer).to_have_attribute("data-state", "done")
    expect(answer).to_have_text("".join(PIECES))
    citations = answer.get_by_test_id("citation")
    expect(citations).to_have_count(3)
    assert citations.all_inner_texts() == ["[1]", "[2]", "[3]"]

    # Each [N] opens the source panel; the PDF's passage shows with its file and page.
    panel = page.get_by_test_id("source-panel")
    seen = {}
    for i in range(3):
        citations.nth(i).click()
        expect(panel).to_be_visible()
        expect(panel).to_have_attribute("data-index", str(i + 1))
        seen[panel.locator("#source-file").inner_text()] = (panel.locator("#source-page").inner_text(),
                                                            panel.locator("#source-passage").inner_text())
        if PDF.name in seen:
            break
    assert PDF.name in seen, f"no citation of {PDF.name} among {list(seen)}"
    page_number, passage = seen[PDF.name]
    assert page_number == "1"
    assert "飲料水は一人一日三リットルを目安に" in passage
    expect(panel).to_be_focused()
    shot(page, "chat-desktop")
    assert not unlabelled(page)
    page.keyboard.press("Escape")  # the panel closes and focus returns to the [N] that opened it
    expect(panel).to_be_hidden()
    expect(citations.nth(len(seen) - 1)).to_be_focused()
    page.keyboard.press("Space")  # and the keyboard opens it again
    expect(panel).to_be_visible()
    expect(panel.locator("#source-file")).to_have_text(PDF.name)

    # Search: mode, scores; a file-type filter narrows to the PDF.
    page.get_by_role("button", name="Search").first.click()
    page.get_by_test_id("search-input").fill("持ち出し袋")
    page.get_by_label("Mode").select_option("keyword")
    page.get_by_role("button", name="Search", exact=True).last.click()
    results = page.get_by_test_id("search-result")
    expect(results.first).to_be_visible()
    expect(results.first).to_contain_text("Score")
    expect(page.locator("#search-summary")).to_contain_text("Keyword")
    page.get_by_text("Filters").click()
    page.get_by_label("File types (comma-separated)").fill("pdf")
    page.get_by_label("Mode").select_option("hybrid")
    page.get_by_test_id("search-input").press("Enter")
    expect(results).to_have_count(1)
    expect(results.first).to_contain_text(PDF.name)
    expect(results.first).to_contain_text("page 1")
    shot(page, "search-desktop")
    assert not unlabelled(page)

    # Usage: the tenant's embedding, search and LLM calls.
    page.get_by_role("button", name="Usage").click()
    usage = page.locator("#usage tbody tr")
    expect(usage.filter(has_text="llm")).to_have_count(1)
    expect(page.locator("#usage-tenant")).to_contain_text("acme")
    page.get_by_label("Period").select_option("1")  # the last 24 hours: everything above is recent
    expect(usage.filter(has_text="llm")).to_have_count(1)
    shot(page, "usage-desktop")


def test_phone_width_in_japanese(open_page: Callable[..., tuple[Any, Console]], live: LiveServer,
                                 keys: dict[str, str], llm: OpenAIFake) -> None:
    """A Japanese browser gets the Japanese UI; at phone width nothing overflows sideways."""
    ensure_documents(live, keys["a"])
    page, _ = open_page(locale="ja-JP", viewport=PHONE)
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    expect(page.get_by_label("API キー")).to_be_visible()
    expect(page.get_by_test_id("sign-in")).to_have_text("サインイン")
    shot(page, "sign-in-phone")

    def fits() -> None:
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), "sideways scrolling"

    # Keyboard only: the key field has focus, Enter signs in.
    expect(page.get_by_test_id("api-key-input")).to_be_focused()
    page.keyboard.type(keys["a"])
    page.keyboard.press("Enter")
    page.get_by_test_id("collection-select").select_option(COLLECTION)
    expect(page.get_by_test_id("document-row")).to_have_count(len(DOCS) + 1)
    expect(page.get_by_test_id("document-row").first).to_contain_text("完了")
    fits()
    shot(page, "documents-phone")

    page.get_by_role("button", name="チャット").click()
    llm.stream_gate_after = None
    page.get_by_test_id("chat-input").fill(QUESTION)
    page.get_by_test_id("chat-input").press("Enter")
    answer = page.get_by_test_id("answer")
    expect(answer).to_have_attribute("data-state", "done")
    answer.get_by_test_id("citation").first.click()
    expect(page.get_by_test_id("source-panel")).to_be_visible()
    expect(page.get_by_test_id("source-panel")).to_contain_text("引用箇所")
    fits()
    shot(page, "chat-phone")
    page.get_by_role("button", name="閉じる").click()

    page.get_by_role("button", name="検索").first.click()
    page.get_by_test_id("search-input").fill("備蓄")
    page.get_by_test_id("search-input").press("Enter")
    expect(page.get_by_test_id("search-result").first).to_be_visible()
    fits()
    shot(page, "search-phone")

    page.get_by_role("button", name="利用状況").click()
    expect(page.locator("#usage tbody tr").first).to_be_visible()
    fits()
    shot(page, "usage-phone")


def test_a_wrong_key_is_refused_with_a_clear_message(open_page: Callable[..., tuple[Any, Console]]) -> None:
    page, console = open_page()
    console.allow(r"status of 401")  # Chromium logs the refused request itself
    page.get_by_test_id("api-key-input").fill("bk_" + "x" * 43)
    page.get_by_test_id("sign-in").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("This API key was refused")
    expect(alert).to_contain_text("not valid or was revoked")
    expect(page.get_by_test_id("api-key-input")).to_be_focused()
    expect(page.get_by_role("navigation")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0
    shot(page, "sign-in-refused-desktop")


def test_tenant_b_sees_none_of_tenant_a_documents(open_page: Callable[..., tuple[Any, Console]], live: LiveServer,
                                                  keys: dict[str, str]) -> None:
    ensure_documents(live, keys["a"])
    page, _ = open_page()
    sign_in(page, keys["b"])
    select = page.get_by_test_id("collection-select")
    expect(select.locator("option")).to_have_count(1)  # only the default one, nothing of tenant A's
    assert COLLECTION not in select.locator("option").all_inner_texts()
    expect(page.locator("#documents-empty")).to_be_visible()
    expect(page.get_by_test_id("document-row")).to_have_count(0)
    page.get_by_role("button", name="Search").first.click()
    page.get_by_test_id("search-input").fill("飲料水")
    page.get_by_test_id("search-input").press("Enter")
    expect(page.get_by_role("alert").filter(has_text="no documents")).to_be_visible()
    expect(page.get_by_test_id("search-result")).to_have_count(0)
    # B's own file, dropped on the page, is B's alone; deleting it asks first.
    page.get_by_role("button", name="Documents").click()
    page.evaluate("""() => {
        const data = new DataTransfer();
        const text = "# 連絡先\\n\\n家族の集合場所は南公園です。\\n";
        data.items.add(new File([text], "renraku.md", {type: "text/markdown"}));
        document.querySelector("#dropzone").dispatchEvent(new DragEvent("drop", {dataTransfer: data, bubbles: true}));
    }""")
    expect(page.get_by_test_id("upload-status").locator(".status")).to_have_text("completed")
    row = page.get_by_test_id("document-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("renraku.md")
    row.get_by_role("button", name="Delete renraku.md").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete “renraku.md”")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    page.keyboard.press("Enter")  # Cancel has the focus: nothing is deleted
    expect(dialog).to_be_hidden()
    expect(row).to_have_count(1)
    row.get_by_role("button", name="Delete renraku.md").click()
    dialog.get_by_role("button", name="Delete").click()
    expect(page.get_by_test_id("document-row")).to_have_count(0)
    expect(page.get_by_role("status")).to_contain_text("Deleted renraku.md")
    # A file that cannot be read ends "failed", with the reason, in its upload row and in the list.
    page.get_by_test_id("upload-input").set_input_files(str(FIXTURES / "invalid.pdf"))
    failed = page.get_by_test_id("upload-status").filter(has_text="invalid.pdf")
    expect(failed.locator(".status")).to_have_text("failed")
    expect(failed.locator(".reason")).not_to_be_empty()
    reason = failed.locator(".reason").inner_text()
    expect(page.get_by_test_id("document-row").filter(has_text="invalid.pdf")).to_contain_text(reason.split(" (")[0])
    # The key stays in this tab's session storage and never appears in a URL.
    assert page.evaluate("sessionStorage.getItem('bunko.apiKey')") == keys["b"]
    assert keys["b"] not in page.url
    # Tenant A, through the API, still has its documents.
    documents = httpx.get(live.url + "/api/v1/documents", headers={"Authorization": f"Bearer {keys['a']}"}).json()
    assert documents["totalCount"] == len(DOCS) + 1


def test_the_usage_tab_shows_each_quota_beside_its_usage(open_page: Callable[..., tuple[Any, Console]],
                                                         live: LiveServer) -> None:
    """Quotas set by the operator appear beside the tenant's usage, "no limit" where none is set, in English
    and in Japanese; a quota reached is marked."""
    key = live.key("initech", "ida")
    client = live.client(key)
    stored = client.post("/api/v1/collections/notes/vectors", json={
        "records": [{"id": "m1", "content": "会議は月曜の十時から"}, {"id": "m2", "content": "備品の発注は総務へ"}]})
    assert stored.status_code == 200, stored.text
    live.cli("admin", "tenants", "set-quota", "initech", "--chunks", "2", "--bytes", "3000000",
             "--documents", "40")
    page, _ = open_page()
    sign_in(page, key)
    page.get_by_role("button", name="Usage").click()
    quotas = page.get_by_role("table", name="Quotas")
    expect(quotas).to_be_visible()
    rows = page.get_by_test_id("quota-row")
    expect(rows).to_have_count(5)
    chunks = rows.filter(has=page.get_by_role("rowheader", name="Chunks"))
    expect(chunks.locator("td").nth(0)).to_have_text("2")
    expect(chunks.locator("td").nth(1)).to_have_text("2")
    expect(chunks).to_have_attribute("data-state", "full")
    expect(chunks).to_contain_text("At the limit")
    documents = rows.filter(has=page.get_by_role("rowheader", name="Documents"))
    expect(documents.locator("td").nth(1)).to_have_text("40")
    expect(documents).to_have_attribute("data-state", "limited")
    expect(rows.filter(has=page.get_by_role("rowheader", name="Stored text")).locator("td").nth(1)).to_have_text(
        "2.9 MB")
    for unlimited in ("Uploads, last 24 hours", "Requests this minute"):
        row = rows.filter(has=page.get_by_role("rowheader", name=unlimited))
        expect(row.locator("td").nth(1)).to_have_text("No limit")
        expect(row).to_have_attribute("data-state", "none")
    assert not unlabelled(page)
    shot(page, "quotas-desktop")

    page, _ = open_page(locale="ja-JP", viewport=PHONE)
    sign_in(page, key)
    page.get_by_role("button", name="利用状況").click()
    expect(page.get_by_role("table", name="利用上限")).to_be_visible()
    rows = page.get_by_test_id("quota-row")
    chunks = rows.filter(has=page.get_by_role("rowheader", name="チャンク"))
    expect(chunks).to_contain_text("上限に達しています")
    uploads = rows.filter(has=page.get_by_role("rowheader", name="アップロード（過去24時間）"))
    expect(uploads).to_contain_text("上限なし")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), "sideways scrolling"
    shot(page, "quotas-phone")
