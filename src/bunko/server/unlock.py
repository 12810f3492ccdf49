"""Encrypted PDF uploads: the API opens the upload with its password and spools a decrypted copy.

The password of an upload (the ``password`` form field) is used once, in the API process that
receives the file, and then dropped: it is not written to the job row, the spool folder or a log,
and it never travels to the upload worker (which may be another process or machine). The worker
reads the decrypted copy like any other PDF. That copy lies in the spool folder only until its job
ends, as every upload does; the text it holds is what the job stores in the chunks anyway.

PDFium (the ``pdf`` extra) opens and rewrites the file, holding the PDF loader's lock (PDFium is not
thread-safe).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ..errors import CorruptDocumentError, EncryptedDocumentError


def unlock_pdf(path: Path, password: str) -> bool:
    """Replace the PDF at ``path`` by a decrypted copy when it is encrypted; returns whether it was.

    A PDF that opens without a password (none, or an owner password only) stays as it is. Raises
    :class:`EncryptedDocumentError` when the password does not open it,
    :class:`CorruptDocumentError` when PDFium cannot open it at all, and the PDF loader's
    :class:`LoaderError` when the ``pdf`` extra is not installed. Messages name the file, not its path.
    """
    from ..loaders.pdf import _PDFIUM_LOCK, _pdfium

    pdfium, pdfium_c = _pdfium()
    unlocked = path.with_name(path.name + ".unlocked")
    with _PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(str(path), password=password)
        except pdfium.PdfiumError as exc:
            if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_PASSWORD:
                if _opens_without_password(pdfium, path):  # an owner password only: readable as it is
                    return False
                raise EncryptedDocumentError(f"{path.name}: the PDF is encrypted and the password given does not "
                                             "open it") from None
            raise CorruptDocumentError(f"{path.name}: not a PDF that can be opened with a password "
                                       "(damaged or incomplete)") from None
        try:
            if pdfium_c.FPDF_GetSecurityHandlerRevision(pdf.raw) < 0:
                return False  # not encrypted: the upload stays as it is
            try:
                with unlocked.open("wb") as out:
                    pdf.save(out, flags=pdfium_c.FPDF_REMOVE_SECURITY)
            except BaseException:
                with contextlib.suppress(OSError):
                    unlocked.unlink()
                raise
        finally:
            pdf.close()
    os.replace(unlocked, path)
    return True


def _opens_without_password(pdfium: Any, path: Path) -> bool:
    try:
        pdfium.PdfDocument(str(path)).close()
    except pdfium.PdfiumError:
        return False
    return True


__all__ = ["unlock_pdf"]
