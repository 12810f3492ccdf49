// bunko web app: plain JavaScript, no build step. It talks only to the public /api/v1 endpoints,
// sending the API key (kept in this tab's session storage) in the Authorization header.
"use strict";

const STRINGS = {
  en: {
    skip: "Skip to content", screens: "Screens", "tab.documents": "Documents", "tab.chat": "Chat",
    "tab.search": "Search", "tab.usage": "Usage", collection: "Collection", "collection.new": "New…",
    "collection.name": "New collection name",
    "collection.namehelp": "Letters, digits, _ . - ; it is created by its first upload.",
    "collection.invalid": "A collection name is letters, digits, _ . - (up to 100), starting with a letter or digit.",
    signout: "Sign out", "signin.title": "Sign in",
    "signin.help": "Enter an API key made with bunko admin keys create. It is kept only in this browser tab.",
    "signin.key": "API key", "signin.button": "Sign in", "signin.empty": "Enter your API key.",
    "signin.refused": "This API key was refused: {detail}. Check the key, or ask your administrator for a new one.",
    "signin.failed": "The server could not be reached ({detail}).",
    "documents.title": "Documents", "upload.drop": "Drop files here, or", "upload.choose": "Choose files",
    "upload.hint": "PDF, text, Markdown, HTML, JSON, Word, PowerPoint, Excel, CSV — several at once",
    "col.file": "File", "col.status": "Status", "col.chunks": "Chunks", "col.version": "Version", "col.size": "Size",
    "col.uploaded": "Uploaded", "col.actions": "Actions", "documents.empty": "No documents in this collection yet.",
    "status.uploading": "uploading", "status.processing": "processing", "status.completed": "completed",
    "status.failed": "failed", delete: "Delete", cancel: "Cancel", ok: "OK", close: "Close",
    "delete.confirm": "Delete “{name}” with its chunks and vectors? This cannot be undone.",
    "delete.done": "Deleted {name}.", "delete.label": "Delete {name}",
    "chat.label": "Your question", "chat.placeholder": "Ask about your documents", "chat.send": "Send",
    "chat.hint": "Enter sends, Shift+Enter starts a new line.", "chat.you": "You", "chat.new": "New conversation", "chat.bunko": "bunko",
    "chat.searching": "Searching…", "chat.found": "Found {count} passages. Writing…", "chat.writing": "Writing…",
    "chat.done": "Answered by {model} in {ms} ms · {sources} sources",
    "chat.extractive": "No language model is configured: the answer quotes the best passages.",
    "chat.error": "The answer failed: {detail}", "citation.label": "Source {n}: {name}",
    "source.title": "Source", "source.file": "File", "source.page": "Page", "source.section": "Section",
    "source.score": "Score", "source.passage": "Cited passage", none: "—",
    "search.query": "Query", "search.mode": "Mode", "search.limit": "Results", "search.button": "Search",
    "search.filters": "Filters", "search.types": "File types (comma-separated)", "search.from": "From date",
    "search.to": "To date", "search.threshold": "Minimum similarity (semantic)",
    "search.metadata": "Metadata filter (JSON)", "search.badjson": "The metadata filter is not valid JSON: {detail}",
    "search.summary": "{count} results in {ms} ms ({mode})", "search.summary.one": "1 result in {ms} ms ({mode})", "search.page": "page {n}", "search.chunk": "chunk {n}",
    "mode.hybrid": "Hybrid", "mode.semantic": "Semantic", "mode.keyword": "Keyword",
    "usage.title": "Usage", "usage.tenant": "Tenant: {tenant}", "usage.operation": "Operation",
    "usage.model": "Provider / model", "usage.calls": "Calls", "usage.input": "Input tokens",
    "usage.output": "Output tokens", "usage.items": "Items", "usage.latency": "Avg. latency",
    "usage.empty": "No usage recorded yet.", "usage.documents": "Documents", "usage.chunks": "Chunks",
    "usage.collections": "Collections", "usage.size": "Stored files", "usage.period": "Period",
    "usage.all": "All time", "usage.day": "Last 24 hours", "usage.week": "Last 7 days", "usage.month": "Last 30 days",
    "quota.title": "Quotas", "quota.help": "Limits set by the operator of this server; work past a limit is refused.",
    "quota.name": "Quota", "quota.used": "Used", "quota.limit": "Limit", "quota.none": "No limit",
    "quota.share": "{percent}% of the limit", "quota.full": "At the limit",
    "quota.documents": "Documents", "quota.chunks": "Chunks", "quota.bytes": "Stored text",
    "quota.upload_bytes_per_day": "Uploads, last 24 hours", "quota.requests_per_minute": "Requests this minute",
    "collection.empty": "Collection “{name}” has no documents yet: upload some first.",
    "error.generic": "Something went wrong: {detail}", "error.session": "Your key is no longer accepted; sign in again.",
  },
  ja: {
    skip: "本文へ移動", screens: "画面", "tab.documents": "文書", "tab.chat": "チャット", "tab.search": "検索",
    "tab.usage": "利用状況", collection: "コレクション", "collection.new": "新規…",
    "collection.name": "新しいコレクションの名前",
    "collection.namehelp": "英数字と _ . - が使えます。最初のアップロードで作られます。",
    "collection.invalid": "コレクション名は英数字と _ . -（100文字まで）で、英数字で始めてください。",
    signout: "サインアウト", "signin.title": "サインイン",
    "signin.help": "bunko admin keys create で作った API キーを入力してください。キーはこのタブの中だけに保存されます。",
    "signin.key": "API キー", "signin.button": "サインイン", "signin.empty": "API キーを入力してください。",
    "signin.refused": "この API キーは受け付けられませんでした（{detail}）。キーを確認するか、管理者に新しいキーを依頼してください。",
    "signin.failed": "サーバーに接続できませんでした（{detail}）。",
    "documents.title": "文書", "upload.drop": "ここにファイルをドロップ、または", "upload.choose": "ファイルを選択",
    "upload.hint": "PDF・テキスト・Markdown・HTML・JSON・Word・PowerPoint・Excel・CSV（複数可）",
    "col.file": "ファイル", "col.status": "状態", "col.chunks": "チャンク", "col.version": "版", "col.size": "サイズ",
    "col.uploaded": "登録日時", "col.actions": "操作", "documents.empty": "このコレクションにはまだ文書がありません。",
    "status.uploading": "送信中", "status.processing": "処理中", "status.completed": "完了", "status.failed": "失敗",
    delete: "削除", cancel: "キャンセル", ok: "OK", close: "閉じる",
    "delete.confirm": "「{name}」をチャンクとベクトルごと削除しますか？元に戻せません。",
    "delete.done": "{name} を削除しました。", "delete.label": "{name} を削除",
    "chat.label": "質問", "chat.placeholder": "文書について質問してください", "chat.send": "送信",
    "chat.hint": "Enter で送信、Shift+Enter で改行。", "chat.you": "あなた", "chat.new": "新しい会話", "chat.bunko": "bunko",
    "chat.searching": "検索しています…", "chat.found": "{count} 件の箇所が見つかりました。回答を作成しています…",
    "chat.writing": "回答を作成しています…", "chat.done": "{model} が {ms} ms で回答 · 出典 {sources} 件",
    "chat.extractive": "言語モデルが設定されていないため、最も関連する箇所を引用しています。",
    "chat.error": "回答できませんでした: {detail}", "citation.label": "出典 {n}: {name}",
    "source.title": "出典", "source.file": "ファイル", "source.page": "ページ", "source.section": "節",
    "source.score": "スコア", "source.passage": "引用箇所", none: "—",
    "search.query": "検索語", "search.mode": "方式", "search.limit": "件数", "search.button": "検索",
    "search.filters": "絞り込み", "search.types": "ファイル形式（カンマ区切り）", "search.from": "開始日",
    "search.to": "終了日", "search.threshold": "最小類似度（意味検索）",
    "search.metadata": "メタデータ条件（JSON）", "search.badjson": "メタデータ条件が JSON として正しくありません: {detail}",
    "search.summary": "{count} 件（{ms} ms、{mode}）", "search.summary.one": "1 件（{ms} ms、{mode}）", "search.page": "{n} ページ", "search.chunk": "チャンク {n}",
    "mode.hybrid": "ハイブリッド", "mode.semantic": "意味検索", "mode.keyword": "キーワード",
    "usage.title": "利用状況", "usage.tenant": "テナント: {tenant}", "usage.operation": "処理",
    "usage.model": "プロバイダー / モデル", "usage.calls": "回数", "usage.input": "入力トークン",
    "usage.output": "出力トークン", "usage.items": "件数", "usage.latency": "平均所要時間",
    "usage.empty": "まだ利用記録がありません。", "usage.documents": "文書", "usage.chunks": "チャンク",
    "usage.collections": "コレクション", "usage.size": "保存ファイル", "usage.period": "期間",
    "usage.all": "全期間", "usage.day": "過去24時間", "usage.week": "過去7日間", "usage.month": "過去30日間",
    "quota.title": "利用上限", "quota.help": "このサーバーの運用者が設定した上限です。上限を超える操作は受け付けられません。",
    "quota.name": "項目", "quota.used": "使用量", "quota.limit": "上限", "quota.none": "上限なし",
    "quota.share": "上限の{percent}%", "quota.full": "上限に達しています",
    "quota.documents": "文書", "quota.chunks": "チャンク", "quota.bytes": "保存テキスト",
    "quota.upload_bytes_per_day": "アップロード（過去24時間）", "quota.requests_per_minute": "リクエスト（この1分間）",
    "collection.empty": "コレクション「{name}」にはまだ文書がありません。先にアップロードしてください。",
    "error.generic": "エラーが発生しました: {detail}", "error.session": "キーが受け付けられなくなりました。もう一度サインインしてください。",
  },
};

const LANG = (() => {
  for (const tag of navigator.languages || [navigator.language || "en"]) {
    const base = String(tag).toLowerCase().split("-")[0];
    if (base in STRINGS) return base;
  }
  return "en";
})();

function t(key, vars = {}) {
  const text = STRINGS[LANG][key] ?? STRINGS.en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(vars[name] ?? ""));
}

const $ = (selector, root = document) => root.querySelector(selector);
const KEY_STORE = "bunko.apiKey";
const COLLECTION_STORE = "bunko.collection";
const VIEWS = ["documents", "chat", "search", "usage"];
// The API's collection names: Python's \w (Unicode letters, digits, _), then also . and -.
const NAME = /^[\p{L}\p{N}\p{M}_][\p{L}\p{N}\p{M}_.-]{0,99}$/u;

const state = {
  key: sessionStorage.getItem(KEY_STORE) || "",
  collection: sessionStorage.getItem(COLLECTION_STORE) || "default",
  view: "documents",
  conversation: newConversationId(),
  citedBy: null, // the [N] link whose source the panel shows
};

// -- helpers ----------------------------------------------------------------------------------
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function newConversationId() {
  return "web-" + (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));
}

const numberFormat = new Intl.NumberFormat(LANG);
const dateFormat = new Intl.DateTimeFormat(LANG, { dateStyle: "medium", timeStyle: "short" });

function formatSize(bytes) {
  if (!bytes) return "0 B";
  const units = ["B", "KB", "MB", "GB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

function formatDate(text) {
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? text : dateFormat.format(date);
}

let toastTimer = 0;
function toast(message) {
  const node = $("#toast");
  node.textContent = message;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { node.textContent = ""; }, 4000);
}

class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

async function problemOf(response) {
  let code = `HTTP_${response.status}`, detail = response.statusText || code;
  try {
    const body = await response.json();
    code = body.code || code;
    detail = body.detail || (Array.isArray(body.errors) ? body.errors.map((e) => e.message || e.msg).join("; ") : detail);
  } catch { /* not a problem document */ }
  return new ApiError(response.status, code, detail);
}

async function api(path, { method = "GET", json, key = state.key, signal } = {}) {
  const headers = { Authorization: `Bearer ${key}`, Accept: "application/json" };
  if (json !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`/api/v1${path}`, {
    method, headers, signal, body: json === undefined ? undefined : JSON.stringify(json), cache: "no-store",
  });
  if (!response.ok) {
    const problem = await problemOf(response);
    if (problem.status === 401 && key === state.key && state.key) signOut(t("error.session"));
    throw problem;
  }
  return response;
}

function describe(error) {
  return error instanceof ApiError ? `${error.detail} (${error.code})` : String(error.message || error);
}

// -- i18n of the static page ----------------------------------------------------------------------
function translatePage() {
  document.documentElement.lang = LANG;
  for (const node of document.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
  for (const node of document.querySelectorAll("[data-i18n-placeholder]")) node.placeholder = t(node.dataset.i18nPlaceholder);
  for (const node of document.querySelectorAll("[data-i18n-label]")) node.setAttribute("aria-label", t(node.dataset.i18nLabel));
  // The help text names a command: keep it as code.
  const help = $("#view-signin p[data-i18n]");
  help.replaceChildren(...t("signin.help").split(/(bunko admin keys create)/).map(
    (part) => (part === "bunko admin keys create" ? el("code", { text: part }) : part)));
}

// -- sign in ------------------------------------------------------------------------------------
async function signIn(event) {
  event.preventDefault();
  const input = $("#api-key");
  const error = $("#signin-error");
  const key = input.value.trim();
  error.textContent = "";
  if (!key) { error.textContent = t("signin.empty"); input.focus(); return; }
  const button = $("[data-testid=sign-in]");
  button.disabled = true;
  try {
    await api("/collections", { key });
  } catch (problem) {
    const refused = problem instanceof ApiError && (problem.status === 401 || problem.status === 403);
    error.textContent = refused ? t("signin.refused", { detail: problem.detail }) : t("signin.failed", { detail: describe(problem) });
    input.setAttribute("aria-invalid", "true");
    input.focus();
    input.select();
    return;
  } finally {
    button.disabled = false;
  }
  input.removeAttribute("aria-invalid");
  input.value = "";
  state.key = key;
  sessionStorage.setItem(KEY_STORE, key);
  await enter();
}

function signOut(message = "") {
  state.key = "";
  state.collection = "default";
  sessionStorage.removeItem(KEY_STORE);
  sessionStorage.removeItem(COLLECTION_STORE);
  $("#tabs").hidden = true;
  $("#session").hidden = true;
  for (const view of VIEWS) $(`#view-${view}`).hidden = true;
  $("#view-signin").hidden = false;
  $("#signin-error").textContent = message;
  $("#messages").replaceChildren();
  $("#uploads").replaceChildren();
  $("#search-results").replaceChildren();
  $("#search-summary").textContent = "";
  closeSource();
  $("#api-key").focus();
}

async function enter() {
  $("#view-signin").hidden = true;
  $("#tabs").hidden = false;
  $("#session").hidden = false;
  await loadCollections();
  if (knownCollections.length && !collectionHasDocuments()) {
    state.collection = knownCollections[0].name;  // start in one of the tenant's collections
    renderCollections();
  }
  const wanted = location.hash.slice(1);
  show(VIEWS.includes(wanted) ? wanted : "documents", { focus: false });
}

// -- collections --------------------------------------------------------------------------------
let knownCollections = [];
async function loadCollections() {
  try {
    const body = await (await api("/collections")).json();
    knownCollections = body.collections;
  } catch (error) {
    if (state.key) toast(t("error.generic", { detail: describe(error) }));
    return;
  }
  renderCollections();
}

function renderCollections() {
  const select = $("#collection");
  const names = new Set(knownCollections.map((c) => c.name));
  names.add(state.collection);
  if (!names.size) names.add("default");
  select.replaceChildren(...[...names].sort().map((name) => {
    const info = knownCollections.find((c) => c.name === name);
    const label = info ? `${name} (${numberFormat.format(info.documentCount)})` : name;
    return el("option", { value: name, text: label });
  }));
  select.value = state.collection;
}

function collectionHasDocuments() {
  return knownCollections.some((c) => c.name === state.collection);
}

function setCollection(name) {
  state.collection = name;
  sessionStorage.setItem(COLLECTION_STORE, name);
  renderCollections();
  state.conversation = newConversationId();
  $("#messages").replaceChildren();
  closeSource();
  $("#search-results").replaceChildren();
  $("#search-summary").textContent = "";
  refreshView();
}

async function newCollection() {
  const dialog = $("#prompt");
  const input = $("#prompt-input");
  input.value = "";
  dialog.returnValue = "";
  dialog.showModal();
  input.focus();
  const answer = await new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
  const name = input.value.trim();
  if (answer !== "ok" || !name) return;
  if (!NAME.test(name)) { toast(t("collection.invalid")); return; }
  setCollection(name);
}

// -- views ----------------------------------------------------------------------------------------
function show(view, { focus = true } = {}) {
  state.view = view;
  for (const name of VIEWS) $(`#view-${name}`).hidden = name !== view;
  for (const button of document.querySelectorAll("#tabs button")) {
    if (button.dataset.view === view) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  if (location.hash !== `#${view}`) history.replaceState(null, "", `#${view}`);
  refreshView();
  if (focus) {
    const first = { documents: "#upload-input", chat: "#chat-input", search: "#search-input", usage: "#usage-title" }[view];
    if (view === "chat" || view === "search") $(first).focus();
  }
}

function refreshView() {
  if (!state.key) return;
  if (state.view === "documents") loadDocuments();
  else if (state.view === "usage") loadUsage();
}

// -- documents ------------------------------------------------------------------------------------
let documentsRequest = 0;
async function loadDocuments() {
  const ticket = ++documentsRequest;
  let body;
  try {
    body = await (await api(`/documents?limit=500&collection=${encodeURIComponent(state.collection)}`)).json();
  } catch (error) {
    if (state.key) toast(t("error.generic", { detail: describe(error) }));
    return;
  }
  if (ticket !== documentsRequest) return;
  const rows = body.documents.map((doc) => {
    const status = el("span", { class: "status", dataset: { status: doc.status }, text: t(`status.${doc.status}`) });
    const remove = el("button", {
      type: "button", class: "ghost", text: t("delete"), "aria-label": t("delete.label", { name: doc.filename }),
      onclick: () => deleteDocument(doc, remove),
    });
    return el("tr", { "data-testid": "document-row", dataset: { id: doc.id, status: doc.status } },
      el("td", { class: "file-name" }, doc.filename),
      el("td", {}, status, doc.error ? el("div", { class: "reason", text: doc.error.message }) : null),
      el("td", { class: "num", "data-label": t("col.chunks"), text: numberFormat.format(doc.chunkCount) }),
      el("td", { class: "num", "data-label": t("col.version"), text: doc.version ? String(doc.version) : t("none") }),
      el("td", { class: "num", "data-label": t("col.size"), text: formatSize(doc.fileSize) }),
      el("td", { "data-label": t("col.uploaded"), text: formatDate(doc.uploadedAt) }),
      el("td", {}, remove));
  });
  $("#documents tbody").replaceChildren(...rows);
  $("#documents").hidden = rows.length === 0;
  $("#documents-empty").hidden = rows.length > 0;
}

async function confirmDialog(message) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = message;
  dialog.returnValue = "";
  dialog.showModal();
  $("#confirm [value=cancel]").focus();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }));
}

async function deleteDocument(doc, button) {
  if (!(await confirmDialog(t("delete.confirm", { name: doc.filename })))) { button.focus(); return; }
  try {
    await api(`/documents/${encodeURIComponent(doc.id)}`, { method: "DELETE" });
    toast(t("delete.done", { name: doc.filename }));
  } catch (error) {
    toast(t("error.generic", { detail: describe(error) }));
  }
  await loadDocuments();
  $("#upload-input").focus();
  loadCollections();
}

function uploadFiles(files) {
  for (const file of files) uploadOne(file);
}

function uploadOne(file) {
  const status = el("span", { class: "status", dataset: { status: "uploading" }, text: t("status.uploading") });
  const progress = el("progress", { max: "100", value: "0", "aria-label": file.name });
  const reason = el("span", { class: "reason", hidden: true });
  const item = el("li", { "data-testid": "upload-status", dataset: { file: file.name, status: "uploading" } },
    el("span", { class: "file-name", text: file.name }), status, progress, reason);
  $("#uploads").prepend(item);
  const setStatus = (value, why = "") => {
    item.dataset.status = value;
    status.dataset.status = value;
    status.textContent = t(`status.${value}`);
    reason.textContent = why;
    reason.hidden = !why;
  };
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("collection", state.collection);
  const request = new XMLHttpRequest();
  request.open("POST", "/api/v1/documents/upload");
  request.setRequestHeader("Authorization", `Bearer ${state.key}`);
  request.setRequestHeader("Accept", "application/json");
  request.upload.addEventListener("progress", (event) => {
    if (event.lengthComputable) progress.value = Math.round((event.loaded / event.total) * 100);
  });
  request.addEventListener("load", () => {
    let body = {};
    try { body = JSON.parse(request.responseText); } catch { /* not JSON */ }
    if (request.status !== 202) {
      progress.value = 100;
      setStatus("failed", `${body.detail || request.statusText} (${body.code || request.status})`);
      return;
    }
    progress.value = 100;
    setStatus(body.status, body.error ? body.error.message : "");
    if (body.status === "processing") watchJob(body.documentId, setStatus);
    else jobFinished();
  });
  request.addEventListener("error", () => setStatus("failed", t("signin.failed", { detail: "network" })));
  request.send(form);
}

async function watchJob(id, setStatus) {
  let delay = 300;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 1.5, 2000);
    if (!state.key) return;
    let info;
    try {
      info = await (await api(`/documents/${encodeURIComponent(id)}`)).json();
    } catch (error) {
      if (error instanceof ApiError && error.status === 429) { delay = 5000; continue; }
      setStatus("failed", describe(error));
      return;
    }
    if (info.status !== "processing") {
      setStatus(info.status, info.error ? `${info.error.message} (${info.error.code})` : "");
      jobFinished();
      return;
    }
  }
}

function jobFinished() {
  if (state.view === "documents") loadDocuments();
  loadCollections();
}

function setUpDropzone() {
  const zone = $("#dropzone");
  const input = $("#upload-input");
  input.addEventListener("change", () => { uploadFiles([...input.files]); input.value = ""; });
  for (const name of ["dragenter", "dragover"]) {
    zone.addEventListener(name, (event) => { event.preventDefault(); zone.classList.add("over"); });
  }
  for (const name of ["dragleave", "drop"]) zone.addEventListener(name, () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    if (event.dataTransfer && event.dataTransfer.files.length) uploadFiles([...event.dataTransfer.files]);
  });
}

// -- chat -----------------------------------------------------------------------------------------
function renderAnswer(node, text, sources) {
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(/\[(\d{1,3})\]/g)) {
    const source = sources.get(Number(match[1]));
    if (!source) continue;
    if (match.index > last) parts.push(text.slice(last, match.index));
    parts.push(citationLink(source));
    last = match.index + match[0].length;
  }
  parts.push(text.slice(last));
  node.replaceChildren(...parts);
}

function sourceName(source) {
  return String((source.metadata && source.metadata.filename) || source.source || source.document_id);
}

function citationLink(source) {
  const link = el("a", {
    href: `#source-${source.index}`, class: "citation", role: "button", "data-testid": "citation",
    "aria-controls": "source-panel", "aria-expanded": "false",
    "aria-label": t("citation.label", { n: source.index, name: sourceName(source) }),
    text: `[${source.index}]`,
  });
  link.addEventListener("click", (event) => { event.preventDefault(); openSource(source, link); });
  link.addEventListener("keydown", (event) => {
    if (event.key === " ") { event.preventDefault(); openSource(source, link); }
  });
  return link;
}

function openSource(source, link) {
  const meta = source.metadata || {};
  $("#source-file").textContent = sourceName(source);
  $("#source-page").textContent = meta.page_number != null ? String(meta.page_number) : t("none");
  $("#source-section").textContent = meta.section ? String(meta.section) : t("none");
  $("#source-score").textContent = typeof source.score === "number" ? source.score.toFixed(3) : t("none");
  $("#source-passage").textContent = source.excerpt || "";
  const panel = $("#source-panel");
  panel.dataset.index = String(source.index);
  panel.hidden = false;
  $(".chat-layout").classList.add("with-panel");
  if (state.citedBy) state.citedBy.setAttribute("aria-expanded", "false");
  state.citedBy = link;
  link.setAttribute("aria-expanded", "true");
  panel.focus();
}

function closeSource() {
  const panel = $("#source-panel");
  if (panel.hidden) return;
  panel.hidden = true;
  $(".chat-layout").classList.remove("with-panel");
  const link = state.citedBy;
  state.citedBy = null;
  if (link) { link.setAttribute("aria-expanded", "false"); if (link.isConnected) link.focus(); }
}

function addMessage(role, text) {
  const body = el("div", { class: "body" });
  const item = el("li", { class: `msg ${role}` }, el("span", { class: "who", text: t(role === "user" ? "chat.you" : "chat.bunko") }), body);
  if (text) body.textContent = text;
  $("#messages").append(item);
  return { item, body };
}

let chatBusy = false;
async function sendQuestion(event) {
  event.preventDefault();
  const input = $("#chat-input");
  const question = input.value.trim();
  if (!question || chatBusy) return;
  if (!collectionHasDocuments()) { toast(t("collection.empty", { name: state.collection })); return; }
  chatBusy = true;
  $("[data-testid=chat-send]").disabled = true;
  input.value = "";
  addMessage("user", question);
  const { item, body } = addMessage("assistant", "");
  body.dataset.testid = "answer";
  body.dataset.state = "searching";
  item.setAttribute("aria-busy", "true");  // screen readers read the answer once it is complete
  const status = el("span", { class: "state", text: t("chat.searching") });
  item.append(status);
  item.scrollIntoView({ block: "end" });
  const sources = new Map();
  let text = "";
  const finish = (stateName, message) => {
    item.setAttribute("aria-busy", "false");
    body.dataset.state = stateName;
    status.textContent = message;
    if (stateName === "failed") item.classList.add("failed");
  };
  try {
    const response = await api("/chat/rag", {
      method: "POST",
      json: { message: question, collection: state.collection, conversationId: state.conversation },
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let ended = false;
    while (!ended) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trimStart()).join("\n");
        if (!data) continue;
        const event = JSON.parse(data);
        if (event.type === "search_results") status.textContent = t("chat.found", { count: event.count });
        else if (event.type === "generation_start") { body.dataset.state = "streaming"; status.textContent = t("chat.writing"); }
        else if (event.type === "token") {
          body.dataset.state = "streaming";
          text += event.content;
          renderAnswer(body, text, sources);
        } else if (event.type === "citation") {
          sources.set(event.source.index, event.source);
          renderAnswer(body, text, sources);
        } else if (event.type === "done") {
          const result = event.response;
          sources.clear();
          for (const source of result.sources) sources.set(source.index, source);
          text = result.answer;
          renderAnswer(body, text, sources);
          finish("done", result.extractive ? t("chat.extractive")
            : t("chat.done", { model: result.model, ms: Math.round(result.processing_time_ms), sources: result.sources.length }));
          ended = true;
        } else if (event.type === "error") {
          const problem = event.error || {};
          finish("failed", t("chat.error", { detail: `${problem.detail} (${problem.code})` }));
          ended = true;
        }
      }
    }
    if (!ended) finish("failed", t("chat.error", { detail: "the stream ended early" }));
  } catch (error) {
    finish("failed", t("chat.error", { detail: describe(error) }));
  } finally {
    chatBusy = false;
    $("[data-testid=chat-send]").disabled = false;
    input.focus();
  }
}

// -- search ---------------------------------------------------------------------------------------
function highlight(text, query) {
  const terms = query.split(/\s+/).filter((term) => term.length > 1);
  if (!terms.length) return [text];
  const pattern = new RegExp(`(${terms.map((term) => term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`, "giu");
  return text.split(pattern).map((part, i) => (i % 2 ? el("mark", { text: part }) : part));
}

async function runSearch(event) {
  event.preventDefault();
  const query = $("#search-input").value.trim();
  const error = $("#search-error");
  error.textContent = "";
  if (!query) return;
  if (!collectionHasDocuments()) {
    $("#search-results").replaceChildren();
    $("#search-summary").textContent = "";
    error.textContent = t("collection.empty", { name: state.collection });
    return;
  }
  const mode = $("#search-mode").value;
  const body = { query, collection: state.collection, limit: Number($("#search-limit").value) || 10 };
  const types = $("#search-types").value.split(",").map((s) => s.trim().replace(/^\./, "")).filter(Boolean);
  if (types.length) body.fileTypes = types;
  const from = $("#search-from").value, to = $("#search-to").value;
  if (from || to) body.dateRange = { start: from || null, end: to || null };
  const threshold = $("#search-threshold").value;
  if (threshold !== "" && mode === "semantic") body.threshold = Number(threshold);
  const filter = $("#search-filter").value.trim();
  if (filter) {
    try { body.filter = JSON.parse(filter); } catch (problem) {
      error.textContent = t("search.badjson", { detail: problem.message });
      $("#search-filter").focus();
      return;
    }
  }
  let result;
  try {
    result = await (await api(`/search/${mode}`, { method: "POST", json: body })).json();
  } catch (problem) {
    error.textContent = t("error.generic", { detail: describe(problem) });
    return;
  }
  $("#search-summary").textContent = t(result.totalMatches === 1 ? "search.summary.one" : "search.summary", {
    count: result.totalMatches, ms: Math.round(result.searchTime), mode: t(`mode.${result.searchType}`),
  });
  $("#search-results").replaceChildren(...result.results.map((hit) => {
    const where = [hit.pageNumber != null ? t("search.page", { n: hit.pageNumber }) : null, hit.section,
      t("search.chunk", { n: hit.chunkIndex })].filter(Boolean).join(" · ");
    return el("li", { "data-testid": "search-result", dataset: { documentId: hit.documentId } },
      el("div", { class: "result-head" },
        el("strong", { text: hit.documentName }), el("span", { class: "hint", text: where }),
        el("span", { class: "score", text: `${t("source.score")} ${hit.score.toFixed(4)}` })),
      el("p", { class: "result-body" }, ...highlight(hit.content, query)));
  }));
}

// -- usage ----------------------------------------------------------------------------------------
function usageSince() {
  const days = Number($("#usage-since").value);
  if (!days) return "";
  return `?since=${encodeURIComponent(new Date(Date.now() - days * 86400000).toISOString())}`;
}

async function loadUsage() {
  let usage, collections;
  try {
    [usage, collections] = await Promise.all([
      api(`/usage${usageSince()}`).then((r) => r.json()), api("/collections").then((r) => r.json()),
    ]);
  } catch (error) {
    if (state.key) toast(t("error.generic", { detail: describe(error) }));
    return;
  }
  $("#usage-tenant").textContent = t("usage.tenant", { tenant: usage.tenant });
  const total = (field) => collections.collections.reduce((sum, c) => sum + c[field], 0);
  const stat = (label, value) => el("div", { class: "stat" }, el("b", { text: numberFormat.format(value) }), label);
  $("#usage-stats").replaceChildren(stat(t("usage.collections"), collections.collections.length),
    stat(t("usage.documents"), total("documentCount")), stat(t("usage.chunks"), total("chunkCount")));
  const rows = usage.usage.map((u) => el("tr", {},
    el("td", { text: u.operation }),
    el("td", { "data-label": t("usage.model"), text: [u.provider, u.model].filter(Boolean).join(" / ") || t("none") }),
    el("td", { class: "num", "data-label": t("usage.calls"), text: numberFormat.format(u.calls) }),
    el("td", { class: "num", "data-label": t("usage.input"), text: numberFormat.format(u.input_tokens) }),
    el("td", { class: "num", "data-label": t("usage.output"), text: numberFormat.format(u.output_tokens) }),
    el("td", { class: "num", "data-label": t("usage.items"), text: numberFormat.format(u.items) }),
    el("td", { class: "num", "data-label": t("usage.latency"),
               text: `${numberFormat.format(Math.round(u.latency_ms_avg))} ms` })));
  $("#usage tbody").replaceChildren(...rows);
  $("#usage").hidden = rows.length === 0;
  $("#usage-empty").hidden = rows.length > 0;
  renderQuotas(usage.quotas || {});
}

// Each quota beside its usage (GET /usage, field quotas): bytes in units, "no limit" where none is set.
const QUOTAS = ["documents", "chunks", "bytes", "upload_bytes_per_day", "requests_per_minute"];
const BYTE_QUOTAS = new Set(["bytes", "upload_bytes_per_day"]);

function renderQuotas(quotas) {
  const shown = (name, value) => (BYTE_QUOTAS.has(name) ? formatSize(value) : numberFormat.format(value));
  const rows = QUOTAS.filter((name) => name in quotas).map((name) => {
    const { limit, usage } = quotas[name];
    const limited = limit !== null && limit !== undefined;
    const full = limited && usage >= limit;
    const percent = limited ? (limit > 0 ? Math.min(100, Math.round((usage / limit) * 100)) : 100) : 0;
    const meter = limited
      ? el("meter", { min: 0, max: 100, value: percent, high: 80, optimum: 0,
                      "aria-label": t("quota.share", { percent }) })
      : null;
    return el("tr", { "data-testid": "quota-row", "data-quota": name, "data-state": full ? "full" : (limited ? "limited" : "none") },
      el("th", { scope: "row", text: t(`quota.${name}`) }),
      el("td", { class: "num", "data-label": t("quota.used"), text: shown(name, usage) }),
      el("td", { class: "num", "data-label": t("quota.limit"), text: limited ? shown(name, limit) : t("quota.none") }),
      el("td", { class: "quota-share" },
        ...(limited ? [meter, el("span", { class: full ? "quota-full" : "", text: full ? t("quota.full") : `${percent}%` })] : [])));
  });
  $("#quotas tbody").replaceChildren(...rows);
  $("#quotas-section").hidden = rows.length === 0;
}

// -- start ----------------------------------------------------------------------------------------
function start() {
  translatePage();
  $("#signin-form").addEventListener("submit", signIn);
  $("#sign-out").addEventListener("click", () => signOut());
  $("#collection").addEventListener("change", (event) => setCollection(event.target.value));
  $("#new-collection").addEventListener("click", newCollection);
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => show(button.dataset.view));
  }
  $("#tabs").addEventListener("keydown", (event) => {
    if (event.key !== "ArrowRight" && event.key !== "ArrowLeft") return;
    const buttons = [...document.querySelectorAll("#tabs button")];
    const at = buttons.indexOf(document.activeElement);
    if (at < 0) return;
    buttons[(at + (event.key === "ArrowRight" ? 1 : buttons.length - 1)) % buttons.length].focus();
  });
  setUpDropzone();
  $("#chat-form").addEventListener("submit", sendQuestion);
  $("#chat-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("#chat-form").requestSubmit();
    }
  });
  $("#source-close").addEventListener("click", closeSource);
  $("#new-chat").addEventListener("click", () => {
    state.conversation = newConversationId();
    closeSource();
    $("#messages").replaceChildren();
    $("#chat-input").focus();
  });
  $("#source-panel").addEventListener("keydown", (event) => { if (event.key === "Escape") closeSource(); });
  $("#search-form").addEventListener("submit", runSearch);
  window.addEventListener("hashchange", () => {
    const wanted = location.hash.slice(1);
    if (state.key && VIEWS.includes(wanted) && wanted !== state.view) show(wanted);
  });
  $("#usage-since").addEventListener("change", loadUsage);
  document.body.classList.remove("loading");
  performance.mark("bunko:ready");
  if (state.key) enter();
  else $("#api-key").focus();
}

start();
