"""Plain text, Markdown and JSON loaders."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import LoaderError
from ..types import Document
from . import LoadOptions, file_metadata, read_bytes


def decode_text(path: Path, raw: bytes) -> str:
    """Decode a text file: UTF-8 (with or without BOM)."""
    if b"\x00" in raw[:8192]:
        raise LoaderError(f"{path}: looks like a binary file, not text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoaderError(
            f"{path}: not valid UTF-8 (byte {exc.start}); convert it to UTF-8 "
            "(for example: iconv -f SHIFT_JIS -t UTF-8)"
        ) from exc


def load_text(path: Path, options: LoadOptions) -> list[Document]:
    """A plain-text file as one document."""
    text = decode_text(path, read_bytes(path, options))
    return [Document(content=text, metadata=file_metadata(path, "text", text))]


_HEADING_RE = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def load_markdown(path: Path, options: LoadOptions) -> list[Document]:
    """A Markdown file as one document; its first heading becomes ``title``."""
    text = decode_text(path, read_bytes(path, options))
    metadata = file_metadata(path, "markdown", text)
    heading = _HEADING_RE.search(text)
    if heading:
        metadata["title"] = heading.group(1)
    return [Document(content=text, metadata=metadata)]


def load_json(path: Path, options: LoadOptions) -> list[Document]:
    """JSON (not implemented yet)."""
    raise LoaderError(f"{path}: JSON loading is not available yet")
