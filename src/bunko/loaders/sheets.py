"""Spreadsheets (.xlsx, .xlsm) and delimited text (.csv, .tsv): rows kept with their column headers.

Workbooks are read with python-calamine or, when large, openpyxl (both the ``sheets`` extra; see
below), one sheet at a time: a sheet is
a section of the document (``section`` and ``sheet`` = its name), and its rows become small
Markdown tables under the sheet's header row (:mod:`bunko.loaders.tables`), each a chunk with
``row_start`` / ``row_end`` (the sheet's row numbers). Formulas are read as the values Excel
cached for them; dates as ISO dates. Chart sheets are left out, hidden sheets are read and their
chunks say ``hidden``.

CSV and TSV files are decoded like text files (UTF-8, Shift_JIS/CP932, EUC-JP, ... see
:func:`bunko.loaders.text.decode_text`); a ``.csv`` file's delimiter (comma, tab or semicolon)
is the one that splits its first lines into the same number of fields. Their rows are numbered
as records, the header being record 1.

Why python-calamine, and openpyxl past a size (``benchmarks/bench_sheets.py``, this project's 2-core
machine, every cell read as text): 15,000 rows over 3 sheets of 8 columns (text, dates, numbers,
formulas) took 0.12 s with calamine and 0.62 s with openpyxl's read-only mode; 200,000 rows 1.5 s
against 9.2 s. But calamine holds all of a sheet's cells while it is read: one sheet of 200,000 rows
of 8 numbers raised the peak memory by 110 MB with calamine and by 17 MB with openpyxl, which streams
the sheet's XML row by row (2.4 s against 11.6 s); 450,000 rows, 247 MB against 38 MB. (Text costs
openpyxl more, its copy of the shared strings: 108 MB against calamine's 64 MB for the 200,000 mixed
rows.) So a workbook with more than ``STREAM_SHEET_BYTES`` (16 MB, about 50,000 rows of 8 such
columns) of sheet XML is read by openpyxl, a smaller one by calamine; both give the same rows. Either
way the rows are turned into text as they are read, never all kept as Python values, and the
unpacked size of a workbook is capped at the file size limit (``check_archive``).
"""

from __future__ import annotations

import csv
import io
import re
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from ..errors import CorruptDocumentError, EncryptedDocumentError, LoaderError, NoTextError, UnsupportedFormatError
from ..types import Document, DocumentPart
from . import LoadOptions, check_archive, file_metadata, read_bytes
from .tables import Table, cell_text
from .text import decode_text

_MISSING = 'reading Excel files needs: pip install "bunko[sheets]"'
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")
_CORE = {"title": "{http://purl.org/dc/elements/1.1/}title", "author": "{http://purl.org/dc/elements/1.1/}creator",
         "created_at": "{http://purl.org/dc/terms/}created"}
_DELIMITERS = (",", "\t", ";")
_SNIFF_LINES = 30
# Past this many bytes of worksheet XML (unpacked), a workbook is read by openpyxl, which streams each sheet,
# instead of python-calamine, which holds a sheet's cells whole (see the module docstring).
STREAM_SHEET_BYTES = 16 * 1024 * 1024


def _import(module: str) -> Any:
    from importlib import import_module

    try:
        return import_module(module)
    except ImportError as exc:
        raise LoaderError(_MISSING) from exc


def _core_properties(raw: bytes) -> dict[str, Any]:
    """Title, author and creation time from ``docProps/core.xml``, where the workbook has them."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            root = ElementTree.fromstring(archive.read("docProps/core.xml"))
    except (KeyError, zipfile.BadZipFile, ElementTree.ParseError, OSError):
        return {}
    found: dict[str, Any] = {}
    for key, tag in _CORE.items():
        element = root.find(tag)
        value = (element.text or "").strip() if element is not None else ""
        if not value:
            continue
        if key == "created_at":
            match = re.match(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})", value)
            if not match or not value.endswith("Z"):
                continue
            value = f"{match.group(1)}T{match.group(2)}Z"
        found[key] = value
    return found


@dataclass(slots=True)
class _Sheet:
    """One worksheet as a reader gives it: rows are ``(row number, cells as text)``, read as they are asked for."""

    name: str
    hidden: bool
    first_column: int  # the 0-based sheet column of the first cell of each row
    rows: Iterator[tuple[int, list[str]]]


def _sheet_xml_bytes(raw: bytes) -> int:
    """The unpacked size of the workbook's worksheets (their XML), from the sizes the archive declares."""
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        return sum(m.file_size for m in archive.infolist() if m.filename.startswith("xl/worksheets/"))


def _calamine_sheets(raw: bytes) -> Iterator[_Sheet]:
    """The worksheets read by python-calamine: fast, but a sheet's cells are held whole while it is read."""
    calamine = _import("python_calamine")
    workbook = calamine.CalamineWorkbook.from_filelike(io.BytesIO(raw))
    try:
        for info in workbook.sheets_metadata:
            if info.typ != calamine.SheetTypeEnum.WorkSheet:
                continue  # a chart, dialog or macro sheet: no cells
            sheet = workbook.get_sheet_by_name(info.name)
            hidden = info.visible != calamine.SheetVisibleEnum.Visible
            if sheet.start is None:  # no cells
                yield _Sheet(info.name, hidden, 0, iter(()))
                continue
            # iter_rows starts at the sheet's first row and at its first column that has data
            rows = ((index + 1, [cell_text(value) for value in row]) for index, row in enumerate(sheet.iter_rows()))
            yield _Sheet(info.name, hidden, sheet.start[1], rows)
            del sheet, rows
    finally:
        workbook.close()


def _openpyxl_sheets(raw: bytes) -> Iterator[_Sheet]:
    """The worksheets read by openpyxl in read-only mode: each sheet's XML is streamed, a row at a time."""
    openpyxl = _import("openpyxl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Workbook contains no default style", data validation, ...
        workbook = openpyxl.load_workbook(io.BytesIO(raw), read_only=True, data_only=True)
    try:
        for sheet in workbook.worksheets:  # worksheets only: chart sheets are not among them
            # The sheet's declared dimension names its first column (Excel writes it); without one, column A.
            first = (sheet.min_column or 1) - 1 if sheet.max_column is not None else 0
            rows = ((number, [cell_text(value) for value in values[first:]])
                    for number, values in enumerate(sheet.iter_rows(min_row=1, values_only=True), start=1))
            yield _Sheet(sheet.title, sheet.sheet_state != "visible", first, rows)
    finally:
        workbook.close()


def load_xlsx(path: Path, options: LoadOptions) -> list[Document]:
    """An Excel workbook as one document, a section per sheet (see the module docstring)."""
    raw = read_bytes(path, options)
    if raw.startswith(_OLE_MAGIC):
        if _ENCRYPTION_INFO in raw:
            raise EncryptedDocumentError(f"{path}: the Excel file is password-protected; save an unprotected copy")
        raise UnsupportedFormatError(f"{path}: a legacy Excel 97-2003 file; save it as .xlsx")
    try:
        check_archive(io.BytesIO(raw), options.max_bytes, name=str(path))
    except CorruptDocumentError as exc:
        raise CorruptDocumentError(f"{path}: not a readable Excel file ({exc.message})") from exc
    reader = _openpyxl_sheets if _sheet_xml_bytes(raw) > STREAM_SHEET_BYTES else _calamine_sheets
    parts: list[DocumentPart] = []
    sheets: list[str] = []
    hidden: list[str] = []
    rows = 0
    try:
        for sheet in reader(raw):
            meta: dict[str, Any] = {"section": sheet.name, "hierarchy": [sheet.name], "sheet": sheet.name}
            if sheet.hidden:
                meta["hidden"] = True
                hidden.append(sheet.name)
            sheets.append(sheet.name)
            table = Table(sheet.rows, meta, first_column=sheet.first_column, caption=sheet.name)
            parts.extend(table)
            rows += table.rows
    except (LoaderError, MemoryError):
        raise
    except Exception as exc:  # calamine's CalamineError, XmlError, ZipError, PasswordError; openpyxl's ...
        if type(exc).__name__ == "PasswordError":
            raise EncryptedDocumentError(f"{path}: the Excel file is password-protected; save an unprotected copy") \
                from exc
        raise CorruptDocumentError(f"{path}: not a readable Excel file ({type(exc).__name__}: {exc})") from exc
    if not parts:
        raise NoTextError(f"{path}: the workbook has no cells with values")
    document = Document.from_parts(parts)
    metadata = file_metadata(path, "xlsx", document.content)
    metadata.update(_core_properties(raw))
    metadata.update(sheets=sheets, sheet_count=len(sheets), row_count=rows)
    if hidden:
        metadata["hidden_sheets"] = hidden
    document.metadata = metadata
    return [document]


# -- CSV and TSV ------------------------------------------------------------------------------------


def _delimiter(text: str) -> str:
    """The delimiter that splits the first lines into the same number (more than one) of fields; ``,`` if none."""
    sample = "\n".join(text[:65536].split("\n")[:_SNIFF_LINES])
    best, best_score = ",", 0.0
    for delimiter in _DELIMITERS:
        try:
            counts = [len(row) for row in csv.reader(io.StringIO(sample), delimiter=delimiter) if row]
        except csv.Error:
            continue
        if len(counts) > 1:
            counts = counts[:-1]  # the sample may end inside a record
        if not counts:
            continue
        mode = max(set(counts), key=counts.count)
        share = counts.count(mode) / len(counts)
        score = mode * share if mode > 1 and share >= 0.6 else 0.0
        if score > best_score:
            best, best_score = delimiter, score
    return best


def _records(path: Path, text: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        for number, row in enumerate(reader, start=1):
            yield number, [cell_text(value) for value in row]
    except csv.Error as exc:
        raise CorruptDocumentError(f"{path}: not a readable CSV file (line {reader.line_num}: {exc})") from exc


def _load_delimited(path: Path, options: LoadOptions, kind: str, delimiter: str | None) -> list[Document]:
    text, encoding = decode_text(path, read_bytes(path, options))
    if "\x00" in text:
        raise CorruptDocumentError(f"{path}: not a readable CSV file (NUL characters)")
    delimiter = delimiter or _delimiter(text)
    table = Table(_records(path, text, delimiter), {})
    parts = list(table)
    if not parts:
        raise NoTextError(f"{path}: the file has no values")
    document = Document.from_parts(parts)
    metadata = file_metadata(path, kind, document.content)
    metadata.update(encoding=encoding, delimiter=delimiter, row_count=table.rows)
    document.metadata = metadata
    return [document]


def load_csv(path: Path, options: LoadOptions) -> list[Document]:
    """A CSV file as one document of table chunks (delimiter detected)."""
    return _load_delimited(path, options, "csv", None)


def load_tsv(path: Path, options: LoadOptions) -> list[Document]:
    """A tab-separated file as one document of table chunks."""
    return _load_delimited(path, options, "tsv", "\t")


__all__ = ["load_csv", "load_tsv", "load_xlsx"]
