"""Splitting normalised text into overlapping chunks (R7), plus a splitter registry.

The default :class:`RecursiveCharacterSplitter` works on character offsets into the
text it is given, never on copies glued back together, so every chunk satisfies
``text[chunk.start:chunk.end] == chunk.content`` and a 1 MB text splits in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from bunko.errors import SplitterError
from bunko.registry import Registry
from bunko.types import TextChunk

DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", "。", ". ", " ", "")

# Closing brackets and quotes stay with the sentence they close: "「はい。」" is cut
# after the 」, not between 。 and 」.
_CLOSERS = "」』）)］]】〕〉》”’\"'"
# Characters a chunk must not start with (a small kinsoku set: punctuation that ends
# the preceding text). ASCII quotes are left out because they also open quotations.
_NO_START_BASE = "。．.、，,！？!?：；:;」』）)］]】〕〉》”’"
# After one of these (or after whitespace) an overlap may start "cleanly".
_BOUNDARY_AFTER = "。．.、，,！？!?" + _CLOSERS

_NON_SPACE = re.compile(r"\S")

Span = tuple[int, int]


@runtime_checkable
class Splitter(Protocol):
    """Anything that turns text into ordered :class:`TextChunk` s."""

    def split(self, text: str) -> list[TextChunk]:
        """Split ``text`` into chunks whose offsets slice ``text``."""
        ...


class RecursiveCharacterSplitter:
    """Splits text at the highest-priority boundary that makes pieces fit ``chunk_size``.

    Algorithm (lengths are characters, ``len``):

    * A text (stripped) that fits in ``chunk_size`` is one chunk.
    * Otherwise the text is split by the first separator (in priority order) that
      actually cuts it; the pieces are stripped of whitespace and merged greedily,
      in order, while the merged span fits the *step* ``chunk_size - chunk_overlap``.
      A piece longer than the step is split recursively with the following
      separators and its sub-chunks stand alone, so a paragraph break is always
      preferred over a line, sentence or word break.
    * Whitespace separators (``"\\n\\n"``, ``"\\n"``, ``" "``) are dropped between
      pieces. Punctuation separators (``"。"``, ``". "``) stay attached to the
      preceding piece: the cut is after the ``。`` / ``.`` (and after any repeated
      punctuation or closing bracket/quote that follows it).
    * ``""`` means a hard character cut; it is also the implicit last resort when the
      separator list lacks it, so no chunk ever exceeds ``chunk_size``. A hard cut
      moves back rather than start a chunk with closing punctuation (kinsoku); if
      it cannot, it moves forward into the overlap room (never past ``chunk_size``).
    * No cut is made where the next piece would start with closing punctuation
      (``。``, ``.``, ``、``, ``」``, ...), so chunks never start with it unless the
      text itself does, or a run of such characters is longer than a chunk.

    Overlap rule: every chunk after the first is extended backwards into the previous
    chunk by up to ``chunk_overlap`` characters (never so far that it would exceed
    ``chunk_size`` or start at or before the previous chunk's start). Inside that
    window the overlap starts at the earliest *clean* position: a non-whitespace,
    non-punctuation character preceded by whitespace or by ``。 . 、 ！ ？`` (or a
    closing bracket). With no clean position in the window it starts at the earliest
    plain character that is not whitespace or punctuation (a character cut, usual
    for Japanese); with none at all the chunk has no overlap. Because merging only
    fills the step ``chunk_size - chunk_overlap``, there is always room for the overlap.
    """

    def __init__(
        self,
        chunk_size: int = 512,
        chunk_overlap: int = 64,
        separators: Sequence[str] | None = None,
    ) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
            raise SplitterError(f"chunk_size must be an int, got {chunk_size!r}")
        if isinstance(chunk_overlap, bool) or not isinstance(chunk_overlap, int):
            raise SplitterError(f"chunk_overlap must be an int, got {chunk_overlap!r}")
        if chunk_size < 1:
            raise SplitterError(f"chunk_size must be at least 1, got {chunk_size}")
        if chunk_overlap < 0:
            raise SplitterError(f"chunk_overlap must not be negative, got {chunk_overlap}")
        if chunk_overlap >= chunk_size:
            raise SplitterError(f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size})")
        seps = list(DEFAULT_SEPARATORS if separators is None else separators)
        if not seps:
            raise SplitterError("separators must not be empty")
        if not all(isinstance(s, str) for s in seps):
            raise SplitterError("separators must all be strings")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.separators = seps
        # Punctuation separators contribute their marks to the no-start set, so a
        # custom separator like "！" is kept off chunk starts too.
        no_start = set(_NO_START_BASE)
        self._punct_patterns: dict[str, re.Pattern[str]] = {}
        self._space_patterns: dict[str, re.Pattern[str]] = {}
        for sep in seps:
            core = sep.rstrip()
            if core.strip():
                no_start.update(core.strip())
                self._punct_patterns[sep] = _punctuation_pattern(core, sep[len(core) :])
            elif sep:
                # Possessive: a whitespace run is taken whole, never backtracked into.
                self._space_patterns[sep] = re.compile(re.escape(sep) + r"\s*+")
        self._no_start = frozenset(no_start)
        self._boundary_after = frozenset(_BOUNDARY_AFTER)

    def __repr__(self) -> str:
        return (
            f"RecursiveCharacterSplitter(chunk_size={self.chunk_size}, "
            f"chunk_overlap={self.chunk_overlap}, separators={self.separators!r})"
        )

    def split(self, text: str) -> list[TextChunk]:
        """Split ``text`` into chunks; empty or whitespace-only text gives ``[]``."""
        if not isinstance(text, str):
            raise SplitterError(f"expected text as str, got {type(text).__name__}")
        first = _NON_SPACE.search(text)
        if first is None:
            return []
        start = first.start()
        end = len(text.rstrip())
        if end - start <= self.chunk_size:
            return [TextChunk(text[start:end], 0, start, end)]
        step = self.chunk_size - self.chunk_overlap
        spans = self._split_span(text, start, end, 0, step)
        chunks: list[TextChunk] = []
        prev_start = prev_end = -1
        for index, (s, e) in enumerate(spans):
            if index and self.chunk_overlap:
                s = self._overlap_start(text, prev_start, prev_end, s, e)
            chunks.append(TextChunk(text[s:e], index, s, e))
            prev_start, prev_end = s, e
        return chunks

    # -- primary segmentation -------------------------------------------------

    def _split_span(self, text: str, start: int, end: int, level: int, limit: int) -> list[Span]:
        """Stripped spans covering ``text[start:end]``, each at most ``limit`` long."""
        if end - start <= limit:
            return [(start, end)]
        pieces: list[Span] = []
        while level < len(self.separators):
            sep = self.separators[level]
            if sep == "":
                return self._hard_split(text, start, end, limit)
            pieces = self._pieces(text, start, end, sep)
            if len(pieces) > 1:
                break
            level += 1
        else:
            # The list lacked "": cut by characters anyway, chunk_size is a hard limit.
            return self._hard_split(text, start, end, limit)
        out: list[Span] = []
        cur_start = cur_end = -1
        for ps, pe in pieces:
            if pe - ps > limit:
                # A big piece is split on its own: its sub-chunks never merge with the
                # neighbours, which is what keeps higher-priority boundaries intact.
                if cur_start >= 0:
                    out.append((cur_start, cur_end))
                    cur_start = -1
                out.extend(self._split_span(text, ps, pe, level + 1, limit))
            elif cur_start < 0:
                cur_start, cur_end = ps, pe
            elif pe - cur_start <= limit:
                cur_end = pe
            else:
                out.append((cur_start, cur_end))
                cur_start, cur_end = ps, pe
        if cur_start >= 0:
            out.append((cur_start, cur_end))
        return out

    def _pieces(self, text: str, start: int, end: int, sep: str) -> list[Span]:
        """Stripped, non-empty pieces of ``text[start:end]`` cut at ``sep``."""
        cuts: list[Span] = []  # (end of the piece before, start of the piece after)
        no_start = self._no_start
        punct = self._punct_patterns.get(sep)
        if punct is None:
            # The match swallows the whole whitespace run after the separator, so its
            # end is where the next piece starts and each run is scanned once.
            for match in self._space_patterns[sep].finditer(text, start, end):
                nxt = match.end()
                if nxt < end and text[nxt] not in no_start:
                    cuts.append((match.start(), nxt))
        else:
            for match in punct.finditer(text, start, end):
                cut = match.end()
                nxt = _next_non_space(text, cut, end)
                if nxt < end and text[nxt] not in no_start:
                    cuts.append((cut, nxt))
        pieces: list[Span] = []
        piece_start = start
        for piece_end, next_start in cuts:
            piece_end = _rstrip(text, piece_start, piece_end)
            if piece_end > piece_start:
                pieces.append((piece_start, piece_end))
            piece_start = next_start
        pieces.append((piece_start, end))
        return pieces

    def _hard_split(self, text: str, start: int, end: int, limit: int) -> list[Span]:
        """Cut ``text[start:end]`` every ``limit`` characters, avoiding kinsoku starts."""
        no_start = self._no_start
        out: list[Span] = []
        s = start
        while s < end:
            if end - s <= limit:
                out.append((s, end))
                break
            cut = s + limit
            # Move the cut back so the next chunk starts with an ordinary character.
            while cut > s + 1 and (text[cut].isspace() or text[cut] in no_start):
                cut -= 1
            if text[cut].isspace() or text[cut] in no_start:
                # Nothing to go back to (e.g. a step of 1 character): take the
                # punctuation along instead, using the room chunk_size leaves beyond
                # the step (the overlap then shrinks). A run of punctuation longer
                # than that gets a plain cut.
                cut = s + limit
                hard_max = min(end, s + self.chunk_size)
                while cut < hard_max and (text[cut].isspace() or text[cut] in no_start):
                    cut += 1
                if cut < end and (text[cut].isspace() or text[cut] in no_start):
                    cut = s + limit
            piece_end = _rstrip(text, s, cut)
            if piece_end > s:
                out.append((s, piece_end))
            s = _next_non_space(text, cut, end)
        return out

    # -- overlap --------------------------------------------------------------

    def _overlap_start(self, text: str, prev_start: int, prev_end: int, start: int, end: int) -> int:
        """Where a chunk whose own text is ``text[start:end]`` begins once overlap is added."""
        lo = max(prev_end - self.chunk_overlap, end - self.chunk_size, prev_start + 1)
        fallback = -1
        no_start = self._no_start
        boundary_after = self._boundary_after
        for pos in range(lo, prev_end):
            ch = text[pos]
            if ch.isspace() or ch in no_start:
                continue
            before = text[pos - 1]
            if before.isspace() or before in boundary_after:
                return pos
            if fallback < 0:
                fallback = pos
        return fallback if fallback >= 0 else start


def _punctuation_pattern(core: str, trailing: str) -> re.Pattern[str]:
    """Matches a punctuation separator; the cut goes at the end of the match.

    The match takes the whole run of the mark ("。。", "...") plus closing brackets
    or quotes after it, and requires the separator's trailing whitespace to follow
    (". " must not cut "3.14"). The look-behind starts matches only at the run's
    beginning, which keeps long runs of dots linear.
    """
    mark = re.escape(core)
    closers = re.escape(_CLOSERS)
    follow = f"(?={re.escape(trailing)})" if trailing else ""
    return re.compile(f"(?<!{mark})(?:{mark})++[{closers}]*+{follow}")


def _next_non_space(text: str, pos: int, end: int) -> int:
    """Index of the first non-whitespace character in ``text[pos:end]``, else ``end``."""
    match = _NON_SPACE.search(text, pos, end)
    return match.start() if match else end


def _rstrip(text: str, start: int, end: int) -> int:
    """``end`` moved back over trailing whitespace, not before ``start``."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


# -- token-aware splitting (R8) ---------------------------------------------------

TokenCounter = Callable[[str], int]

_CJK_CHARS = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af]")
_WORDS = re.compile(r"[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af]+")


def estimate_tokens(text: str) -> int:
    """An offline token estimate for Japanese and English: one per CJK character, ~1.3 per word.

    Used when the embedder has no tokenizer of its own; it errs on the high side for
    subword tokenizers, so budgets computed with it are safe.
    """
    cjk = len(_CJK_CHARS.findall(text))
    words = _WORDS.findall(text)
    return cjk + sum(max(1, (len(w) + 3) // 4) for w in words)


# Paragraphs are separated by blank lines; a Markdown heading line starts a section.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_HEADING_LINE = re.compile(r"#{1,6}\s")  # used with .match(text, pos), which anchors at pos
# Sentence ends: Japanese 。！？ (and full stops) with any closing brackets after them, Western
# .!? before whitespace, and line breaks inside a paragraph.
_SENTENCE_END = re.compile(r"[。！？!?．][」』）)\]】〕〉》”’]*|\.(?=\s)[\"')\]]*|\n")


@dataclass(slots=True)
class _Unit:
    start: int
    end: int
    tokens: int
    heading: bool = False


class TokenSplitter:
    """Chunks of at most ``max_tokens`` tokens (R8), cut at paragraph, section and sentence breaks.

    * Paragraphs (blank-line separated) are packed whole while they fit; a paragraph
      that does not fit is cut into sentences (Japanese ``。！？`` with a closing
      ``」』）`` kept on the sentence; ``. ! ?`` before whitespace), and a sentence that
      still does not fit is cut by characters -- never truncated.
    * A Markdown heading stays with the text after it: a chunk never ends on a heading,
      and a heading starts a new chunk when the current one is at least half full.
    * Overlap: each chunk starts with the last whole sentences/paragraphs of the previous
      one that fit in ``overlap_tokens``.
    * Every chunk is measured again with ``counter`` (the embedder's own tokenizer where
      it has one) and cut further if it is over ``max_tokens``, so none ever exceeds it.

    Offsets slice the input: ``text[c.start:c.end] == c.content``.
    """

    def __init__(self, max_tokens: int = 1000, overlap_tokens: int = 100,
                 counter: TokenCounter | None = None) -> None:
        if not isinstance(max_tokens, int) or max_tokens < 8:
            raise SplitterError(f"max_tokens must be an integer of at least 8; got {max_tokens!r}")
        if not isinstance(overlap_tokens, int) or not 0 <= overlap_tokens < max_tokens // 2:
            raise SplitterError(f"overlap_tokens must be from 0 to half of max_tokens; got {overlap_tokens!r}")
        self.max_tokens = max_tokens
        self.chunk_overlap = overlap_tokens
        self.counter: TokenCounter = counter or estimate_tokens

    @property
    def chunk_size(self) -> int:
        """The budget in tokens (named like the character splitter's for change detection)."""
        return self.max_tokens

    def __repr__(self) -> str:
        return f"TokenSplitter(max_tokens={self.max_tokens}, overlap_tokens={self.chunk_overlap})"

    def split(self, text: str) -> list[TextChunk]:
        """Split ``text`` into chunks whose offsets slice ``text``."""
        units = self._units(text, 0, len(text), self.max_tokens)
        spans = self._pack(units)
        chunks: list[TextChunk] = []
        for start, end in spans:
            for s, e in self._enforce(text, start, end):
                chunks.append(TextChunk(text[s:e], len(chunks), s, e))
        return chunks

    # -- units ---------------------------------------------------------------------
    def _units(self, text: str, start: int, end: int, budget: int) -> list[_Unit]:
        units: list[_Unit] = []
        cursor = start
        for match in [*list(_PARAGRAPH_BREAK.finditer(text, start, end)), None]:
            stop = match.start() if match else end
            units.extend(self._paragraph(text, cursor, stop, budget))
            if match:
                cursor = match.end()
        return units

    def _paragraph(self, text: str, start: int, end: int, budget: int) -> list[_Unit]:
        start, end = _lstrip(text, start, end), _rstrip(text, start, end)
        if start >= end:
            return []
        tokens = self.counter(text[start:end])
        if tokens <= budget:
            return [_Unit(start, end, tokens, bool(_HEADING_LINE.match(text, start)))]
        units: list[_Unit] = []
        cursor = start
        for match in [*list(_SENTENCE_END.finditer(text, start, end)), None]:
            stop = match.end() if match else end
            s, e = _lstrip(text, cursor, stop), _rstrip(text, cursor, stop)
            if s < e:
                n = self.counter(text[s:e])
                units.extend([_Unit(s, e, n)] if n <= budget else self._hard(text, s, e, budget))
            cursor = stop
        return units

    def _hard(self, text: str, start: int, end: int, budget: int) -> list[_Unit]:
        """Cut a span with no usable boundary into the longest pieces that fit ``budget``."""
        units: list[_Unit] = []
        while start < end:
            lo, hi = start + 1, end
            while lo < hi:  # the longest prefix that fits (token counts grow with length)
                mid = (lo + hi + 1) // 2
                if self.counter(text[start:mid]) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            stop = max(lo, start + 1)
            s, e = start, _rstrip(text, start, stop)
            if s < e:
                units.append(_Unit(s, e, self.counter(text[s:e])))
            start = _lstrip(text, stop, end)
        return units

    # -- packing -------------------------------------------------------------------
    def _pack(self, units: list[_Unit]) -> list[tuple[int, int]]:
        def carry(current: list[_Unit], total: int, unit: _Unit) -> list[_Unit] | None:
            only_headings = all(u.heading for u in current)
            full = total + unit.tokens > self.max_tokens
            section_break = unit.heading and total * 2 >= self.max_tokens
            if not (full or section_break) or (only_headings and not full):
                return None
            carried = self._overlap(current) if not unit.heading else []
            return carried if sum(u.tokens for u in carried) + unit.tokens <= self.max_tokens else []

        return _packed(units, carry)

    def _overlap(self, previous: list[_Unit]) -> list[_Unit]:
        carried: list[_Unit] = []
        total = 0
        for unit in reversed(previous[1:]):  # never carry the whole chunk: each chunk must advance
            if unit.heading or total + unit.tokens > self.chunk_overlap:
                break
            carried.insert(0, unit)
            total += unit.tokens
        return carried

    def _enforce(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """The span itself if its real token count fits, else its pieces re-split with a smaller budget."""
        if self.counter(text[start:end]) <= self.max_tokens:
            return [(start, end)]
        budget = self.max_tokens
        while budget >= 4:
            budget = budget * 3 // 4
            units = self._units(text, start, end, budget)
            pieces = self._pack_plain(units, budget)
            if all(self.counter(text[s:e]) <= self.max_tokens for s, e in pieces):
                return pieces
        return [(u.start, u.end) for u in self._hard(text, start, end, self.max_tokens)]

    @staticmethod
    def _pack_plain(units: list[_Unit], budget: int) -> list[tuple[int, int]]:
        return _packed(units, lambda current, total, unit: [] if total + unit.tokens > budget else None)


def _packed(units: list[_Unit],
            carry: Callable[[list[_Unit], int, _Unit], list[_Unit] | None]) -> list[tuple[int, int]]:
    """Chunks of consecutive units, as spans. Before each unit, ``carry(chunk, its tokens, unit)`` says whether
    the chunk ends there: None, it goes on; else the units of it the next chunk starts with (the overlap)."""
    spans: list[tuple[int, int]] = []
    current: list[_Unit] = []
    total = 0
    for unit in units:
        carried = carry(current, total, unit) if current else None
        if carried is not None:
            spans.append((current[0].start, current[-1].end))
            current, total = carried, sum(u.tokens for u in carried)
        current.append(unit)
        total += unit.tokens
    if current:
        spans.append((current[0].start, current[-1].end))
    return spans


def _lstrip(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


# -- registry -------------------------------------------------------------------

SplitterFactory = Callable[..., Splitter]

_REGISTRY: Registry[Splitter] = Registry("splitter", "bunko.splitters",
                                         {"recursive": RecursiveCharacterSplitter, "token": TokenSplitter})


def register_splitter(name: str, factory: SplitterFactory) -> None:
    """Register ``factory`` (called with the collection's options) under ``name``.

    Plugins can also name splitters in the ``bunko.splitters`` entry-point group.
    """
    if not isinstance(name, str) or not name:
        raise SplitterError("a splitter name must be a non-empty string")
    if not callable(factory):
        raise SplitterError(f"splitter factory for {name!r} is not callable")
    _REGISTRY.register(name, factory)


def available_splitters() -> list[str]:
    """The registered splitter names, sorted."""
    return _REGISTRY.names()


def get_splitter(name: str = "recursive", **options: object) -> Splitter:
    """A new splitter registered under ``name``, built with ``options``."""
    factory = _REGISTRY.get(name)
    try:
        return factory(**options)
    except TypeError as exc:
        # A misspelt option is a configuration error the user should see as such.
        raise SplitterError(f"invalid options for splitter {name!r}: {exc}") from exc


DEFAULT_SPLITTER: dict[str, object] = {"name": "recursive", "chunk_size": 512, "chunk_overlap": 64}
_DEFAULT_OPTIONS: dict[str, dict[str, object]] = {
    "recursive": {"chunk_size": 512, "chunk_overlap": 64},
    "token": {"max_tokens": 1000, "overlap_tokens": 100},
}


def splitter_spec(name: str, **options: object) -> dict[str, object]:
    """A complete, JSON-ready description of a splitter (what a collection records)."""
    _REGISTRY.get(name)  # an unknown name raises, listing the known ones
    return {"name": name, **_DEFAULT_OPTIONS.get(name, {}), **options}


def build_splitter(spec: dict[str, object], embedder: object = None) -> Splitter:
    """The splitter a spec describes; a token splitter counts with the embedder's own tokenizer.

    The token budget is also capped at the embedder's input limit (``max_input_tokens``)
    when it declares one, so no chunk can be longer than the model accepts.
    """
    options = {k: v for k, v in spec.items() if k != "name"}
    name = str(spec.get("name", "recursive"))
    if name == "token":
        counter = getattr(embedder, "count_tokens", None)
        if counter is not None:
            options["counter"] = counter
        limit = getattr(embedder, "max_input_tokens", None)
        if isinstance(limit, int) and limit > 0:
            options["max_tokens"] = min(int(options.get("max_tokens", 1000)), limit)  # type: ignore[call-overload]
    return get_splitter(name, **options)


__all__ = [
    "DEFAULT_SEPARATORS",
    "DEFAULT_SPLITTER",
    "RecursiveCharacterSplitter",
    "Splitter",
    "SplitterFactory",
    "TokenSplitter",
    "available_splitters",
    "build_splitter",
    "estimate_tokens",
    "get_splitter",
    "register_splitter",
    "splitter_spec",
]
