"""Text normalisation before splitting and indexing (R6).

Every loader's output goes through :class:`Preprocessor` before it is split, so
chunk offsets, keyword terms and embeddings all see the same text: full-width
and half-width forms unified, whitespace tamed, no empty documents.
"""

from __future__ import annotations

import re
import unicodedata

from bunko.errors import PreprocessingError

# Windows (\r\n) and old Mac (\r) line ends; \r\n first so it becomes one \n, not two.
_LINE_ENDS = re.compile(r"\r\n?")
# Horizontal whitespace: any whitespace except \n (tabs, NBSP, U+3000 left over, ...).
_HORIZONTAL_SPACE = re.compile(r"[^\S\n]+")
# Two or more newlines, where the lines between may hold a single space (step 4 has
# already reduced any horizontal run to one space), so "a\n \n \nb" is a plain
# paragraph break, like "a\n\n\nb".
_BLANK_LINES = re.compile(r"\n(?: ?\n)+")


class Preprocessor:
    """Normalises raw document text into the canonical form the rest of bunko sees.

    The rules, applied in this order:

    1. Non-``str`` input raises :class:`PreprocessingError`.
    2. ``\\r\\n`` and a lone ``\\r`` become ``\\n``. This is the one addition to the
       seed's rules: without it a Windows file would keep stray ``\\r`` (which is
       horizontal whitespace after step 4 and breaks paragraph detection).
    3. Unicode NFKC: full-width ASCII becomes half-width, half-width katakana
       becomes full-width, the ideographic space U+3000 becomes an ASCII space.
       (NFKC also folds compatibility forms such as ``①`` -> ``1`` and ``㈱`` -> ``(株)``.)
    4. Every run of horizontal whitespace (``[^\\S\\n]+``: spaces, tabs, NBSP, ...)
       becomes one ASCII space. Newlines are kept.
    5. Runs of newlines become at most two. A line holding only spaces counts as
       empty, so ``"a\\n \\n \\nb"`` and ``"a\\n \\nb"`` both become ``"a\\n\\nb"``.
    6. Leading and trailing whitespace is stripped.
    7. An empty result raises :class:`PreprocessingError`.
    """

    def normalize(self, text: str) -> str:
        """Return ``text`` normalised by the rules above; raise on non-str or empty text."""
        if not isinstance(text, str):
            raise PreprocessingError(f"expected text as str, got {type(text).__name__}")
        text = _LINE_ENDS.sub("\n", text)
        text = unicodedata.normalize("NFKC", text)
        text = _HORIZONTAL_SPACE.sub(" ", text)
        text = _BLANK_LINES.sub("\n\n", text)
        text = text.strip()
        if not text:
            raise PreprocessingError("text is empty or contains only whitespace after normalisation")
        return text

    def __repr__(self) -> str:
        return "Preprocessor()"


_DEFAULT = Preprocessor()


def normalize(text: str) -> str:
    """Normalise ``text`` with a default :class:`Preprocessor`."""
    return _DEFAULT.normalize(text)


__all__ = ["Preprocessor", "normalize"]
