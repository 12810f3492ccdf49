"""Moving a tenant's data: export to files, import from them, and copy between stores (R34).

Everything a tenant owns in a store travels — collections (with their embedder, analyzer and
splitter settings), documents (with their version, metadata and content hash), chunks with their
vectors (exact float32, so nothing is re-embedded), records upserted without a document,
conversations, agent memories of every user, and the record of files whose ingest failed (so
``bunko documents list --failed`` still shows them). Usage records and search logs stay behind: they
are the operator's accounting.

An export is a folder (the format is described in docs/EXPORT.md)::

    manifest.json        format, tenant, counts, a SHA-256 per file and a digest of the data
    collections.jsonl    one collection per line
    documents.jsonl      one document per line, its chunks and vectors inline
    chunks.jsonl         records upserted without a document
    conversations.jsonl  one conversation per line, its turns inline
    memory_stores.jsonl  one agent memory store per line (its embedder and analyzer)
    memories.jsonl       one agent memory per line (user, session, type, subject, time, vector)
    ingest_failures.jsonl one failed file or URL per line (collection, source, error, message)

An import checks every file's checksum and the digest of the records themselves before it writes
anything, refuses collections whose embedder or analyzer differs from the target's, then writes
through the store's own write path (:mod:`.writer`: versions, keyword indexes and counters are kept as
ingest keeps them), and finally reads the imported data back and compares its digest with the
export's. An import or copy writes all or nothing: a record the target holds otherwise is a conflict,
and when anything fails the writer takes back what it wrote. ``copy_tenant`` does the same between two
open stores without files. Both work through the ``VectorStore`` protocol, so they run unchanged on
every backend and never reach another tenant: the stores are tenant-bound. The records and their
digest are :mod:`.records`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ArchiveError
from ..stores.base import VectorStore
from ..version import __version__
from .records import (
    FILES,
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    MANIFEST,
    OPTIONAL_KINDS,
    Digest,
    Progress,
    Summary,
    collection_record,
    conversation_record,
    read_tenant,
)
from .writer import TenantWriter


# -- files --------------------------------------------------------------------------------------
def export_tenant(store: VectorStore, path: str | os.PathLike[str], *, collections: Sequence[str] | None = None,
                  progress: Progress | None = None) -> Summary:
    """Write the tenant's data to the folder ``path`` (new, or empty) and return what was written."""
    folder = Path(path)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ArchiveError(f"{folder} exists and is not an empty folder; choose a new path for the export")
    folder.mkdir(parents=True, exist_ok=True)
    summary = Summary(store.tenant, path=str(folder))
    digest = Digest()
    hashes = {kind: hashlib.sha256() for kind in KINDS}
    sizes = dict.fromkeys(KINDS, 0)
    handles = {kind: (folder / f"{FILES[kind]}.partial").open("wb") for kind in KINDS}
    try:
        for kind, record in read_tenant(store, collections=collections):
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
            handles[kind].write(line)
            hashes[kind].update(line)
            sizes[kind] += len(line)
            digest.add(kind, record)
            summary.counts[kind] += 1
            if kind == "documents":
                summary.chunks_in_documents += len(record["chunks"])
            if progress is not None:
                progress(kind, summary.counts[kind])
    finally:
        for handle in handles.values():
            handle.close()
    for kind in KINDS:
        (folder / f"{FILES[kind]}.partial").replace(folder / FILES[kind])
    summary.digest = digest.hexdigest()
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "bunko_version": __version__, "tenant": store.tenant,
        "store": store.kind, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "counts": {**summary.counts, "chunks_in_documents": summary.chunks_in_documents},
        "digest": summary.digest,
        "files": {FILES[k]: {"sha256": hashes[k].hexdigest(), "records": summary.counts[k], "bytes": sizes[k]}
                  for k in KINDS},
    }
    # The manifest is written last: a folder without one is an export that did not finish.
    (folder / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    summary.verified = True
    return summary


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The export's manifest, after checking its format and every file's size and SHA-256."""
    folder = Path(path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArchiveError(f"{folder} has no {MANIFEST}: not a bunko export, or one that did not finish") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArchiveError(f"{folder / MANIFEST} cannot be read: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError(f"{folder / MANIFEST} is not a bunko export manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArchiveError(f"{folder} has export format version {manifest.get('format_version')!r}; this bunko "
                           f"reads version {FORMAT_VERSION}")
    for kind in KINDS:
        expected = (manifest.get("files") or {}).get(FILES[kind])
        if expected is None and kind in OPTIONAL_KINDS and not (folder / FILES[kind]).exists():
            continue
        if not isinstance(expected, dict):
            raise ArchiveError(f"{folder / MANIFEST} does not list {FILES[kind]}")
        file = folder / FILES[kind]
        sha, size = hashlib.sha256(), 0
        try:
            with file.open("rb") as handle:
                while block := handle.read(1 << 20):
                    sha.update(block)
                    size += len(block)
        except OSError as exc:
            raise ArchiveError(f"{file} cannot be read: {exc}") from exc
        if size != expected.get("bytes") or sha.hexdigest() != expected.get("sha256"):
            raise ArchiveError(f"{file} does not match its checksum in the manifest: the export is damaged or was "
                               "changed; nothing was imported")
    return manifest


def _file_records(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Records in import order: the collections, their documents and loose chunks, then conversations."""
    yield from (("collections", r) for r in _lines(folder, "collections"))
    yield from (("documents", r) for r in _lines(folder, "documents"))
    yield from (("chunks", r) for r in _lines(folder, "chunks"))
    yield from (("conversations", r) for r in _lines(folder, "conversations"))
    yield from (("memory_stores", r) for r in _lines(folder, "memory_stores"))
    yield from (("memories", r) for r in _lines(folder, "memories"))
    yield from (("ingest_failures", r) for r in _lines(folder, "ingest_failures"))


def _lines(folder: Path, kind: str) -> Iterator[dict[str, Any]]:
    file = folder / FILES[kind]
    if kind in OPTIONAL_KINDS and not file.exists():  # an export made before this kind existed
        return
    with file.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ArchiveError(f"{file}, line {number}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ArchiveError(f"{file}, line {number}: not a JSON object")
            yield record


def holds_data(store: VectorStore) -> bool:
    """Whether the tenant holds anything an import could meet: collections, conversations or memory stores."""
    if store.list_collections() or store.conversations.ids():
        return True
    memories = store.memories()
    return memories is not None and bool(memories.list_stores())


def _verified_records(folder: Path, manifest: dict[str, Any]) -> None:
    """Refuse, before anything is written, records that do not add up to the manifest's digest (an export edited
    and its checksums recomputed: the digest covers the data itself)."""
    expected = manifest.get("digest")
    if not isinstance(expected, str):
        raise ArchiveError(f"{folder / MANIFEST} has no digest of the data")
    digest = Digest()
    try:
        for kind, record in _file_records(folder):
            digest.add(kind, record)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveError(f"{folder}: a record lacks a field or has a wrong value ({type(exc).__name__}: {exc}); "
                           "nothing was imported") from exc
    if digest.hexdigest() != expected:
        raise ArchiveError(f"{folder}: the records do not match the digest in the manifest (the export was changed "
                           "after it was written); nothing was imported")


def _write_all(writer: TenantWriter, records: Iterable[tuple[str, dict[str, Any]]], expected: Callable[[], str | None],
               where: str) -> Summary:
    """Write every record and verify the result against ``expected()``; on any failure take back what was written."""
    try:
        try:
            for kind, record in records:
                writer.add(kind, record)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArchiveError(f"{where}: a record lacks a field or has a wrong value ({type(exc).__name__}: {exc})") \
                from exc
        return writer.finish(expected())
    except BaseException:
        writer.undo()
        raise


def import_tenant(store: VectorStore, path: str | os.PathLike[str], *, progress: Progress | None = None) -> Summary:
    """Import the export at ``path`` into the tenant-bound ``store``: all of it or, when a check or a write fails,
    nothing. Checksums, the data digest and the collections', conversations' and memory stores' conflicts are
    checked before anything is written; documents and records as they are written; afterwards the data read back
    must match the digest."""
    folder = Path(path)
    manifest = read_manifest(folder)
    _verified_records(folder, manifest)
    writer = TenantWriter(store, progress)
    for record in _lines(folder, "collections"):
        writer.check_collection(record)
    for record in _lines(folder, "conversations"):
        writer.check_conversation(record)
    for record in _lines(folder, "memory_stores"):
        writer.check_memory_store(record)
    summary = _write_all(writer, _file_records(folder), lambda: manifest.get("digest"), str(folder))
    summary.path = str(folder)
    return summary


def copy_tenant(source: VectorStore, target: VectorStore, *, collections: Sequence[str] | None = None,
                progress: Progress | None = None) -> Summary:
    """Copy a tenant's data from one store to another (or to another tenant), vectors as they are: all of it, or
    nothing when a check or a write fails."""
    writer = TenantWriter(target, progress)
    known = {c.name: c for c in source.list_collections()}
    for name in known if collections is None else collections:
        if name in known:
            writer.check_collection(collection_record(known[name]))
    for conversation_id in source.conversations.ids():
        writer.check_conversation(conversation_record(source, conversation_id))
    digest = Digest()

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        for kind, record in read_tenant(source, collections=collections):
            digest.add(kind, record)
            yield kind, record

    return _write_all(writer, records(), digest.hexdigest, f"tenant {source.tenant!r}")


def write_tenant(store: VectorStore, records: Iterable[tuple[str, dict[str, Any]]], *,
                 expected_digest: str | None = None, progress: Progress | None = None) -> Summary:
    """Write (kind, record) pairs into a tenant-bound store and verify them against ``expected_digest``: all of
    them, or nothing."""
    return _write_all(TenantWriter(store, progress), records, lambda: expected_digest, f"tenant {store.tenant!r}")


__all__ = ["FILES", "FORMAT", "FORMAT_VERSION", "KINDS", "MANIFEST", "Digest", "Summary", "TenantWriter",
           "copy_tenant", "export_tenant", "holds_data", "import_tenant", "read_manifest", "read_tenant",
           "write_tenant"]
