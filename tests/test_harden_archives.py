"""Zip bombs (issue 13, finding 2): a small .docx that unpacks to 200 MB is refused early, with bounded memory.

The bomb is made here: a valid Word package whose ``word/document.xml`` is 200 MB of paragraphs,
deflated to a few hundred KB. The limit of one file is the upload limit (the server) or the CLI's.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from bunko.cli import cli
from bunko.errors import ArchiveTooLargeError, CorruptDocumentError
from bunko.loaders import LoadOptions, check_archive, load_path

MIB = 1024 * 1024
_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="word/document.xml"/></Relationships>'
)
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def make_docx(path: Path, unpacked: int) -> Path:
    """A Word file whose document.xml is about ``unpacked`` bytes of paragraphs, streamed into the ZIP."""
    paragraph = "<w:p><w:r><w:t>" + "備蓄" * 40 + "</w:t></w:r></w:p>"
    piece = (paragraph * (MIB // len(paragraph.encode()))).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{_W}"><w:body>'.encode())
            written = 0
            while written < unpacked:
                part.write(piece)
                written += len(piece)
            part.write(b"</w:body></w:document>")
    return path


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_docx(tmp_path_factory.mktemp("bomb") / "report.docx", 200 * MIB)
    assert path.stat().st_size < 2 * MIB  # small on the wire
    return path


def _peak(call: object) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        call()  # type: ignore[operator]
        error: BaseException | None = None
    except BaseException as exc:
        error = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return error, peak


def test_a_docx_bomb_is_refused_before_unpacking(bomb: Path) -> None:
    error, peak = _peak(lambda: load_path(bomb, LoadOptions(max_bytes=50 * MIB)))
    assert isinstance(error, ArchiveTooLargeError), error
    assert error.code == "ARCHIVE_TOO_LARGE" and "limit" in error.message
    assert peak < 8 * MIB, f"{peak / MIB:.1f} MiB allocated to refuse the bomb"


def test_an_archive_that_understates_its_sizes_is_stopped_while_streaming(bomb: Path, tmp_path: Path) -> None:
    """The central directory and local header claim 1 KB for document.xml: the real bytes are counted."""
    raw = bytearray(bomb.read_bytes())
    liar = tmp_path / "liar.docx"
    name = b"word/document.xml"
    for signature, size_at, name_at in ((b"PK\x01\x02", 24, 46), (b"PK\x03\x04", 22, 30)):
        start = 0
        while (at := raw.find(signature, start)) >= 0:
            start = at + 4
            if raw[at + name_at: at + name_at + len(name)] == name:
                struct.pack_into("<I", raw, at + size_at, 1000)
    liar.write_bytes(bytes(raw))
    # Whatever the archive claims, no more than the limit (plus one piece) is ever unpacked.
    error, peak = _peak(lambda: check_archive(liar, 50 * MIB))
    assert isinstance(error, (ArchiveTooLargeError, CorruptDocumentError)), error
    assert peak < 8 * MIB
    error, _ = _peak(lambda: load_path(liar, LoadOptions(max_bytes=50 * MIB)))
    assert isinstance(error, (ArchiveTooLargeError, CorruptDocumentError)), error


def test_a_normal_docx_under_the_limit_still_loads(tmp_path: Path) -> None:
    small = make_docx(tmp_path / "small.docx", 64 * 1024)
    assert check_archive(small, 10 * MIB) > 64 * 1024
    [document] = load_path(small, LoadOptions(max_bytes=10 * MIB))
    assert "備蓄" in document.content
    with pytest.raises(ArchiveTooLargeError):
        check_archive(small, 32 * 1024)


def test_the_cli_refuses_the_bomb_and_ingests_the_rest(bomb: Path, tmp_path: Path) -> None:
    from .conftest import EXAMPLES

    result = CliRunner().invoke(cli, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "ingest", str(bomb),
                                      str(EXAMPLES / "bichiku.txt"), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["documents"] == 1
    assert [e["type"] for e in data["errors"]] == ["ArchiveTooLargeError"]
