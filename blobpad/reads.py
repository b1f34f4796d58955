"""Slice reads: whole content, streams, head, tail, ranges, line windows and grep.

Every read opens one read transaction, finds the chunks that hold the answer with a
binary search over the entry's manifest (cumulative bytes, characters and newlines
per chunk, see :mod:`blobpad.chunking`), and decompresses only those.  A read of
line 5,000,000 of a 1 GB entry costs what a read of line 5 costs.

Text is counted in characters, exactly as Python slices the decoded string; binary
in bytes.  Lines end at ``\\n`` as in sed and grep (a ``\\r`` before it stays part of
the line) and are numbered from 1; a last line without ``\\n`` counts.

Patterns are compiled with RE2, whose matching time is linear in the input: no
pattern a model sends can hang the caller.  Matching is line by line, like
``rg -n``: a match never spans a newline, and ``^``/``$`` match at line starts/ends.
Spans follow Python's ``re.finditer`` on the decoded line: after an empty match the
search resumes at the next character (for binary content, the next unit that
``bytes.decode("utf-8", "replace")`` turns into one character), never inside one.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import fnmatch
import hashlib
import io
import itertools
import json
import re
import struct
import time
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from itertools import chain
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from . import prefilter, rgscan
from .engine import prefix_end
from .errors import (
    HINT_CURSOR,
    HINT_VERIFY,
    MAX_STR_BYTES,
    CorruptData,
    InvalidArgument,
    NotFound,
    check_bool,
    check_int,
    check_str,
    describe,
    typename,
)
from .index import name_key, name_of_key, parse_id, scope_key
from .prefilter import Query
from .search import (
    MAX_PATTERN,
    MAX_SPANS,
    SEARCH_TIMEOUT,
    UNANCHORED,
    Deadline,
    LineCounter,
    TimedOut,
    bounded_find,
    check_timeout,
    compile_pattern,
    deadline_for,
    finder,
    line_runs,
    long_line,
    next_char,
    strict_utf8,
)

_Bytes = bytes | bytearray
_T = TypeVar("_T")
#: ``Match(anchor, text, pos, endpos)`` of a compiled RE2: the spans of the match and its groups
_Find = Callable[..., list[tuple[int, int]]]

if TYPE_CHECKING:
    from .chunking import Manifest
    from .codec import Codec
    from .engine import ReadTxn
    from .index import Entry
    from .view import Reader

__all__ = [
    "GrepMatch", "GrepResult", "SessionMatch", "SessionGrepResult", "CountResult", "LineWindow", "ReadsMixin",
    "EntryStream", "MAX_PATTERN", "MAX_SESSION_ENTRIES", "SEARCH_TIMEOUT", "compile_pattern", "line_span",
]

#: longest line kept whole in grep results; longer ones become a window around the match
LINE_WINDOW = 2000
#: the largest stretch of a single line searched at once (longer lines are searched in
#: pieces that overlap by SEGMENT_OVERLAP bytes: a match up to that long across a cut is found)
SEGMENT_BYTES = 8 << 20
SEGMENT_OVERLAP = 64 << 10
#: raw bytes of the chunks one worker task of count() takes (fewer, larger tasks: less overhead)
_TASK_BYTES = 1 << 20
#: the same for the chunks grep decompresses ahead of its search
_GREP_TASK_BYTES = 256 << 10
#: tasks decompressed ahead, and raw bytes per task, when the chunks are fed to ``rg``
#: (:func:`_rg_scan`; on the 100 MB count, 97 ms against 110 ms with grep's 4 and 256 KiB)
_RG_DEPTH = 8
_RG_TASK_BYTES = 1 << 20

#: line_windows() reads lines totalling at most this many bytes at once, longer ones by their windows
BULK_LINE_BYTES = 1 << 20

#: most entries one grep_session() call searches (and longest ``entries`` list it takes); the
#: rest of a larger session is searched by the calls its cursor continues
MAX_SESSION_ENTRIES = 10_000
#: longest ``names`` glob of grep_session()
MAX_GLOB = 1024


@dataclass
class GrepMatch:
    """One matching line.

    Attributes:
        line: its 1-based number.
        text: the line without its ``\\n``; a line longer than the window is cut to a
            window around the first match, and ``offset`` says where it starts.
        spans: (start, end) character offsets of the matches inside ``text``.
        before, after: the context lines, as (number, text) pairs.
        offset: character offset of ``text`` inside the whole line (0 unless cut).
        line_chars: length of the whole line in characters.
    """

    line: int
    text: str
    spans: list[tuple[int, int]]
    before: list[tuple[int, str]] = field(default_factory=list)
    after: list[tuple[int, str]] = field(default_factory=list)
    offset: int = 0
    line_chars: int = 0

    @property
    def clipped(self) -> bool:
        """Whether ``text`` is a window of a longer line."""
        return self.offset > 0 or len(self.text) < self.line_chars

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "text": self.text,
            "spans": [list(s) for s in self.spans],
            "before": [list(b) for b in self.before],
            "after": [list(a) for a in self.after],
            "offset": self.offset,
            "line_chars": self.line_chars,
        }


@dataclass(kw_only=True)
class _Searched:
    """How far a search of one entry went (the fields :class:`GrepResult` and
    :class:`MatchingLines` share; :class:`CountResult` has the same as attributes)."""

    timed_out: bool = False
    searched_lines: int | None = None
    chunks_read: int = 0
    chunks_total: int = 0


@dataclass
class GrepResult(_Searched):
    """What ``Store.grep`` found: ``matches`` in line order, ``truncated`` when more
    matches exist past ``max_matches``.

    ``timed_out`` is true when the time budget (``timeout``) ran out first: then
    ``matches`` are all the matching lines among lines 1 to ``searched_lines`` (the
    lines after those were not searched), and ``searched_lines`` is None otherwise.

    ``chunks_read`` is how many of the entry's ``chunks_total`` chunks the search read
    (decompressed, or found in the chunk cache), read-ahead included; the chunks the
    entry's trigram filters exclude (:mod:`blobpad.prefilter`) are not read, nor those
    after the search stopped.  Context lines and windows of long lines may read a few
    more.  Neither is in :meth:`to_dict`.  All four are keyword-only.

    ``skipped`` (keyword-only too, not in :meth:`to_dict`): the numbers of the matching
    lines ``grep(skip=N)`` passed over before ``matches``, in order.
    """

    matches: list[GrepMatch]
    truncated: bool
    skipped: list[int] = field(default_factory=list, kw_only=True)

    def __len__(self) -> int:
        return len(self.matches)

    def __iter__(self) -> Iterator[GrepMatch]:
        return iter(self.matches)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"matches": [m.to_dict() for m in self.matches], "truncated": self.truncated,
                               "timed_out": self.timed_out}
        if self.timed_out:
            out["searched_lines"] = self.searched_lines
        return out


@dataclass
class MatchingLines(_Searched):
    """What ``Store.matching_lines`` found: every matching line, in line order, each
    whole (what ``rg -n`` prints): ``numbers[k]`` is the number of the line ``texts[k]``
    (``bytes``, each line's own, with ``as_bytes``).
    Iterating gives ``(number, text)`` pairs, and ``lines`` is the list of them.

    ``timed_out``, ``searched_lines``, ``chunks_read`` and ``chunks_total`` are
    :class:`GrepResult`'s: when the time budget ran out, the lines are the matching
    lines among lines 1 to ``searched_lines``.  ``found`` is how many lines matched:
    ``len(result)``, or, when they were handed to ``on_lines`` as they were found (and
    the lists are empty), how many it was given.

    (Two lists rather than one list of pairs: where a hundred thousand lines match, the
    pairs, which Python's garbage collector tracks, cost more than finding the lines.)
    """

    numbers: list[int]
    texts: list[Any]
    found: int = field(default=0, kw_only=True)

    @property
    def lines(self) -> list[tuple[int, str]]:
        """The ``(number, text)`` pairs."""
        return list(zip(self.numbers, self.texts, strict=True))

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return zip(self.numbers, self.texts, strict=True)


@dataclass(kw_only=True)
class SessionMatch(GrepMatch):
    """One matching line of one entry of a session, as ``Store.grep_session`` finds it.

    A :class:`GrepMatch` (``line``, ``text``, ``spans``, ``before``, ``after``,
    ``offset``, ``line_chars``, with the same meanings, in that entry) that also says
    which entry the line is in (keyword-only fields).

    Attributes:
        entry_id: the id of the entry.
        name: the entry's name, None for an unnamed entry.
    """

    entry_id: str
    name: str | None

    @classmethod
    def of(cls, match: GrepMatch, entry_id: str, name: str | None) -> SessionMatch:
        """``match`` of the entry ``entry_id`` called ``name``."""
        return cls(match.line, match.text, match.spans, match.before, match.after, match.offset, match.line_chars,
                   entry_id=entry_id, name=name)

    def to_dict(self) -> dict[str, Any]:
        return {"entry_id": self.entry_id, "name": self.name, **super().to_dict()}


@dataclass
class SessionGrepResult:
    """What ``Store.grep_session`` found: ``matches`` in search order (entry by entry,
    line order within each).

    Attributes:
        matches: the matching lines, at most ``max_matches``.
        truncated: more matching lines exist past ``max_matches`` (within the entries
            this call could search; ``cursor`` continues with them).
        timed_out: the time budget ran out first: the matches are all those found
            before the point where the search stopped, and ``cursor`` continues from it.
        cursor: an opaque string that, passed back with the same arguments, continues
            exactly after the last match returned (past what this call searched without
            finding more); None when every entry was searched to its end.
        searched_entries: how many entries this call began to search (wholly or in
            part).  The entry a cursor stops inside was counted by the call that began it,
            not again by the call that continues it, so the calls of one search add up to
            the entries it searched.
    """

    matches: list[SessionMatch]
    truncated: bool
    timed_out: bool = False
    cursor: str | None = None
    searched_entries: int = 0

    def __len__(self) -> int:
        return len(self.matches)

    def __iter__(self) -> Iterator[SessionMatch]:
        return iter(self.matches)

    def to_dict(self) -> dict[str, Any]:
        return {"matches": [m.to_dict() for m in self.matches], "truncated": self.truncated,
                "timed_out": self.timed_out, "cursor": self.cursor, "searched_entries": self.searched_entries}


class CountResult(int):
    """What ``Store.count`` returns: the number of matching lines, an ``int``.

    ``timed_out`` is true when the time budget ran out first: then the value counts
    the matching lines among lines 1 to ``searched_lines`` only (a lower bound of the
    whole count), and ``searched_lines`` is None otherwise.  Arithmetic on it gives a
    plain ``int``.  ``chunks_read`` and ``chunks_total`` are as in :class:`GrepResult`.
    """

    timed_out: bool
    searched_lines: int | None
    chunks_read: int
    chunks_total: int

    def __new__(
        cls, value: int, *, timed_out: bool = False, searched_lines: int | None = None, chunks_read: int = 0,
        chunks_total: int = 0,
    ) -> CountResult:
        self = super().__new__(cls, value)
        self.timed_out = timed_out
        self.searched_lines = searched_lines if timed_out else None
        self.chunks_read, self.chunks_total = chunks_read, chunks_total
        return self

    def __repr__(self) -> str:
        if self.timed_out:
            return f"CountResult({int(self)}, timed_out=True, searched_lines={self.searched_lines})"
        return f"CountResult({int(self)})"

    def __reduce__(self) -> Any:
        return (_count_result, (int(self), self.timed_out, self.searched_lines, self.chunks_read, self.chunks_total))


def _count_result(
    value: int, timed_out: bool, searched_lines: int | None, chunks_read: int = 0, chunks_total: int = 0
) -> CountResult:
    return CountResult(value, timed_out=timed_out, searched_lines=searched_lines, chunks_read=chunks_read,
                       chunks_total=chunks_total)


@dataclass
class LineWindow:
    """A window of one line, as ``Store.line_windows`` reads it.

    Attributes:
        line: its 1-based number.
        text: characters ``offset`` to ``offset + width`` of the line (without its
            ``\\n``); empty when ``offset`` is at or past the line's end.
        offset: character offset of ``text`` inside the whole line.
        line_chars: length of the whole line in characters.
    """

    line: int
    text: str
    offset: int
    line_chars: int

    @property
    def clipped(self) -> bool:
        """Whether ``text`` is a window of a longer line (characters before or after it)."""
        return self.offset > 0 or self.offset + len(self.text) < self.line_chars

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text, "offset": self.offset, "line_chars": self.line_chars}


_BEYOND = 1 << 62  # past the end of any content: larger positions mean the same, and clamp to it


def _position(label: str, value: object, *, minimum: int | None = None) -> int:
    """An integer position or count, checked by :func:`blobpad.errors.check_int`; a value
    past any content means the same as the end, so it is clamped to it first (as slicing does)."""
    if isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum):
        value = max(-_BEYOND, min(value, _BEYOND))
    return check_int(label, value, minimum=minimum)


def line_span(first: int, last: int | None, total: int) -> tuple[int, int]:
    """The lines that ``first`` to ``last`` select in content of ``total`` lines, as
    ``(start, stop)`` (1-based, inclusive; ``start > stop`` when no line is selected).

    Lines are numbered from 1, like sed's; a negative number counts from the end (-1 is
    the last line, ``-100`` to ``-1`` the last hundred), and one before the first line
    stands for line 1, as slicing clamps.  ``last`` None is the last line.  Then sed's
    rule: a last line before the first selects the first alone (``sed -n 5,4p`` prints
    line 5).  Past the end, nothing more is selected.  Line 0 raises InvalidArgument.
    """
    start = line_number(first, total)
    if last is None:
        return start, total
    return start, min(max(start, line_number(last, total)), total)


def line_number(n: int, total: int) -> int:
    """Line ``n`` of content of ``total`` lines as a positive number: a negative one counts
    from the end (-1 is line ``total``), clamped to line 1; line 0 raises InvalidArgument.
    The one mapping of line numbers of the library, the CLI and the tools."""
    if n == 0:
        raise InvalidArgument("there is no line 0; lines are numbered from 1, and negative numbers count from the end "
                              "(-1 is the last line)")
    return n if n > 0 else max(1, total + 1 + n)


@lru_cache(maxsize=256)
def _query(pattern: str, ignore_case: bool, fixed: bool) -> Query:
    """The chunk filters' query of a pattern (:meth:`Query.compile`, once per pattern)."""
    return Query.compile(pattern, ignore_case=ignore_case, fixed=fixed)


class _Selection:
    """Which chunks a search reads (``selection[i]``), decided group by group as the
    search reaches them (:meth:`blobpad.prefilter.Query.iter_select`): a grep that stops
    after its first matches checks only the filters of the chunks it reached."""

    __slots__ = ("_known", "_rest")

    def __init__(self, decisions: Iterator[bool]) -> None:
        self._known: list[bool] = []
        self._rest = decisions

    def __getitem__(self, i: int) -> bool:
        known = self._known
        while len(known) <= i:
            known.append(next(self._rest))
        return known[i]


_AHEAD = 16  # the most chunks a view asks a networked engine for in one request


class _View:
    """One entry seen through one read transaction, with the chunks this read needs."""

    def __init__(self, reader: Reader, txn: ReadTxn, entry_id: str) -> None:
        self.reader = reader
        self.txn = txn
        self.raw_id, self.entry, m = reader.open_entry(txn, entry_id)
        self.m: Manifest = m
        self._raw: dict[int, bytes] = {}
        self._text: dict[int, str] = {}
        self._newline_index: dict[int, array[int]] = {}  # chunk -> the offsets of its newlines (newline_offset)
        self.wanted: _Selection | None = None  # the chunks a search reads (None: all), see select()
        self.chunks_read = 0  # chunks a search read (_map_chunks)
        #: each chunk's filter, kept or built as a search reads it (None: not building), see select()
        self.building: list[bytes | None] | None = None
        self._built_bytes = 0
        self._added = 0  # filters built by this search
        self._ahead = (0, 0, 1)  # chunks [from, to) asked of a networked engine ahead, and the next request's size

    def select(self, query: Query) -> None:
        """Have the searches of this view (grep, count) skip the chunks that the entry's
        trigram filters show hold no line matching ``query``'s pattern (:mod:`blobpad.prefilter`).

        A pattern the filters cannot use, an entry without filters (put without them)
        or with a damaged record: every chunk is read.  The chunks skipped are
        whole lines (the filters check the chunks of a line that runs over several
        together), so line numbers stay right.

        When the store keeps the filters searches build (``Reader.keep_filters``), the
        chunks the search reads that have no filter yet (every chunk of an entry without
        a filters record) get one, built on the worker threads as they are read, and the
        search hands them to the store (:func:`_keep_filters`): the next search of the
        entry skips chunks.  A search that stops early (its matches found, its time
        budget spent) keeps the filters of the chunks it read, so the searches of an
        entry too big to read within one budget build its filters together.
        """
        n = len(self.m)
        if not n:
            return
        keep = self.reader.keep_filters is not None
        filters = None
        if query.selective or keep:
            filters = self.reader.filters(self.txn, self.raw_id, n)
            if filters is not None and query.selective:
                self.wanted = _Selection(query.iter_select(filters))
        if keep:
            if filters is not None:
                if not all(filters):  # some chunks have no filter yet (prefilter.UNKNOWN)
                    self.building = [f or None for f in filters]
            elif self.txn.get_unchecked("filters", self.raw_id) is None:
                self.building = [None] * n

    def filter_budget(self, i: int, frame: bytes | None = None) -> int:
        """The most bytes chunk i's filter may take: the share of its compressed size a put
        gives it (so a search builds the filter a put would; build() keeps at least its minimum)."""
        if frame is None:
            frame = self.frame(i)
        return int(prefilter.SHARE * len(frame))

    def needs_filter(self, i: int) -> bool:
        """Whether this search builds chunk i's filter as it reads the chunk."""
        building = self.building
        return building is not None and building[i] is None

    def add_filter(self, i: int, flt: bytes) -> None:
        """Keep chunk i's filter as a search built it."""
        building = self.building
        if building is None:
            return
        self._built_bytes += len(flt)
        if self._built_bytes > prefilter.RECORD_MAX:
            self.building = None  # too many filters: none are kept
            return
        building[i] = flt
        self._added += 1

    def built(self) -> list[bytes] | None:
        """The entry's filters with those this search built (:data:`prefilter.UNKNOWN` for
        the chunks still without one), or None when it built none."""
        building = self.building
        if building is None or not self._added:
            return None
        return [f or prefilter.UNKNOWN for f in building]

    @property
    def text(self) -> bool:
        return self.entry.kind == "text"

    def _fetch_ahead(self, i: int) -> None:
        """On a networked engine, ask for chunk i with the ones after it in one request when the reads go
        forward (1, 2, 4 ... up to 16 chunks a request): one round trip per request, not per chunk."""
        start, stop, n = self._ahead
        if start <= i < stop or not self.txn.networked:
            return
        n = min(n * 2, _AHEAD) if i == stop else 1
        self._ahead = (i, i + n, n)
        self.txn.prefetch("chunks", self.m.keys[i:i + n])

    def raw(self, i: int) -> bytes:
        r = self._raw.get(i)
        if r is None:
            self._fetch_ahead(i)
            m = self.m
            r = self.reader.codec.chunk(self.txn, m.keys[i], m.bytes_at[i + 1] - m.bytes_at[i])
            self._raw[i] = r
        return r

    def frame(self, i: int) -> bytes:
        """The compressed chunk i, read in this view's transaction."""
        self._fetch_ahead(i)
        frame = self.txn.get("chunks", self.m.keys[i])
        if frame is None:
            raise CorruptData(f"chunk {self.m.keys[i].hex()} is missing", hint=HINT_VERIFY)
        return frame

    def frame_and_cached(self, i: int) -> tuple[bytes, bytes | None]:
        """Chunk i's stored frame (read once: a networked engine's reader holds a value it
        fetched ahead only until it is read, so a second read would cost a round trip per
        chunk) and its raw bytes if this view or the store's cache already holds them."""
        frame = self.frame(i)
        r = self._raw.get(i)
        if r is None:
            r = self.reader.codec.cached_frame(self.m.keys[i], frame)
        return frame, r

    def decoded(self, i: int) -> str:
        t = self._text.get(i)
        if t is None:
            r = self.raw(i)
            t = r.decode("ascii") if r.isascii() else r.decode("utf-8")
            self._text[i] = t
        return t

    def bytes_between(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end``; the chunks are not kept in this view (a 1 GB read
        holds its pieces and the joined result, not a third copy in the view)."""
        m = self.m
        if start >= end or not len(m):
            return b""
        i = m.chunk_of(m.bytes_at, start)
        if m.bytes_at[i + 1] >= end:  # within one chunk, kept for the reads that follow
            return self.raw(i)[start - m.bytes_at[i] : end - m.bytes_at[i]]
        return b"".join(self.pieces(start, end))

    def chars_between(self, start: int, end: int) -> str:
        m = self.m
        if start >= end or not len(m):
            return ""
        i = m.chunk_of(m.chars_at, start)
        parts = []
        while i < len(m) and m.chars_at[i] < end:
            base = m.chars_at[i]
            parts.append(self.chunk_chars(i, max(0, start - base), min(end, m.chars_at[i + 1]) - base))
            i += 1
        return "".join(parts)

    def chunk_chars(self, i: int, lo: int, hi: int) -> str:
        """Characters ``lo`` to ``hi`` of text chunk i, decoding only what holds them
        when they lie near one end of the chunk (a tail or a head reads a few KB of a
        chunk of up to 256 KB)."""
        t = self._text.get(i)
        if t is not None:
            return t[lo:hi]
        m = self.m
        chars = m.chars_at[i + 1] - m.chars_at[i]
        raw = self.raw(i)
        if chars == len(raw):  # one byte per character: ASCII
            return raw[lo:hi].decode("ascii")
        if 8 * (chars - lo) <= len(raw):
            # The last chars - lo characters fill at most 4 bytes each; a character cut
            # by that bound starts before it, so it is not one of them.
            b = len(raw) - 4 * (chars - lo)
            while b < len(raw) and (raw[b] & 0xC0) == 0x80:
                b += 1
            tail = raw[b:].decode("utf-8")
            k = len(tail) - (chars - lo)
            return tail[k : k + hi - lo]
        if 8 * hi <= len(raw):
            b = 4 * hi
            while b < len(raw) and (raw[b] & 0xC0) == 0x80:
                b += 1
            return raw[:b].decode("utf-8")[lo:hi]
        return self.decoded(i)[lo:hi]

    def newline_offset(self, c: int) -> int:
        """Absolute byte offset of the c-th newline (1-based); c must exist."""
        m = self.m
        i = bisect_left(m.lines_at, c) - 1
        j = c - m.lines_at[i]  # j-th newline inside chunk i (1-based)
        found = self._newline_index.get(i)
        if found is None:
            raw = self.raw(i)
            if j <= 64:  # near the chunk's start: no index of the whole chunk
                pos = -1
                for _ in range(j):
                    pos = raw.find(b"\n", pos + 1)
                return m.bytes_at[i] + pos
            # every newline of the chunk, once: calls for many lines (grep's context) cost one lookup
            # each, not a split of the chunk each (100,000 matches with a line of context took 30 s)
            if len(self._newline_index) >= 8:  # searches go in line order: the chunks lately indexed are enough
                self._newline_index.clear()
            found = self._newline_index[i] = array("I", [mt.start() for mt in _NEWLINE.finditer(raw)])
        return m.bytes_at[i] + found[j - 1]

    def line_start(self, k: int) -> int:
        return 0 if k <= 1 else self.newline_offset(k - 1) + 1

    def line_end(self, k: int) -> int:
        """Byte offset just past line k's content (before its newline)."""
        if k <= self.m.lines_at[-1]:
            return self.newline_offset(k)
        return self.entry.size_bytes

    def decode(self, raw: bytes) -> str:
        if self.text:
            return raw.decode("utf-8")
        return raw.decode("utf-8", "replace")

    def lines(self, first: int, last: int) -> list[str]:
        if first > last:
            return []
        return self.decode(self.bytes_between(self.line_start(first), self.line_end(last))).split("\n")

    def char_of(self, b: int) -> int:
        """The character offset of byte offset ``b`` of text content (a character boundary)."""
        m = self.m
        if b >= m.bytes_at[-1]:
            return m.chars_at[-1]
        i = m.chunk_of(m.bytes_at, b)
        off = b - m.bytes_at[i]
        if off == 0:
            return m.chars_at[i]
        raw = self.raw(i)
        if m.chars_at[i + 1] - m.chars_at[i] == len(raw):  # ASCII
            return m.chars_at[i] + off
        return m.chars_at[i] + len(raw[:off].decode("utf-8"))

    def pieces(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` in pieces of at most one chunk, without keeping the
        chunks in this view (the store's bounded cache may keep them)."""
        m = self.m
        if start >= end or not len(m):
            return
        i = m.chunk_of(m.bytes_at, start)
        while i < len(m) and m.bytes_at[i] < end:
            base = m.bytes_at[i]
            raw = self._raw.get(i)
            if raw is None:
                self._fetch_ahead(i)
                raw = self.reader.codec.chunk(self.txn, m.keys[i], m.bytes_at[i + 1] - base)
            yield raw[max(0, start - base) : end - base]
            i += 1

    def line_windows(self, first: int, last: int, column: int, width: int) -> list[LineWindow]:
        """Characters ``column`` to ``column + width`` of each line ``first`` to ``last``
        (existing lines), reading only the chunks that hold them, the line's start and
        its end: memory stays about ``width`` per line plus a few chunks, however long
        the lines are (lines under BULK_LINE_BYTES bytes in all are read at once)."""
        out: list[LineWindow] = []
        if first > last:
            return out
        start = self.line_start(first)
        end = self.line_end(last)
        if end - start <= BULK_LINE_BYTES:
            for k, text in enumerate(self.decode(self.bytes_between(start, end)).split("\n")):
                out.append(LineWindow(first + k, text[column : column + width], column, len(text)))
            return out
        ends = self._newlines(start, end)
        for k in range(first, last + 1):
            be = end if k == last else next(ends)
            out.append(self.line_window(k, start, be, column, width))
            if be - start > BULK_LINE_BYTES:  # after a long line: keep a few chunks, not all it spans
                self._raw.clear()
                self._text.clear()
            start = be + 1
        return out

    def _newlines(self, start: int, end: int) -> Iterator[int]:
        """The offsets of the newlines between bytes ``start`` and ``end``, in order, found
        one chunk at a time (one search each, where ``line_end`` splits a chunk per line)."""
        pos = start
        for piece in self.pieces(start, end):
            i = piece.find(b"\n")
            while i >= 0:
                yield pos + i
                i = piece.find(b"\n", i + 1)
            pos += len(piece)

    def line_window(self, k: int, bs: int, be: int, column: int, width: int) -> LineWindow:
        """Line ``k``, whose bytes are ``bs`` to ``be``, cut to ``width`` characters from ``column``."""
        if be - bs <= BULK_LINE_BYTES:
            text = self.decode(self.bytes_between(bs, be))
            return LineWindow(k, text[column : column + width], column, len(text))
        if self.text:
            cs, ce = self.char_of(bs), self.char_of(be)
            a = min(cs + column, ce)
            return LineWindow(k, self.chars_between(a, min(ce, a + width)), column, ce - cs)
        # binary: characters as decode("utf-8", "replace") makes them, decoded piece by piece
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        kept: list[str] = []
        n = 0
        for piece in chain(self.pieces(bs, be), (None,)):  # lazily: one piece in memory at a time
            t = decoder.decode(b"", final=True) if piece is None else decoder.decode(piece)
            lo, hi = max(0, column - n), min(len(t), column + width - n)
            if lo < hi:
                kept.append(t[lo:hi])
            n += len(t)
        return LineWindow(k, "".join(kept), column, n)


class ReadsMixin:
    """The read methods of :class:`blobpad.Store`, over the store's :class:`~blobpad.view.Reader`.

    They need nothing of the store but ``_reader``: reads never import the store.
    """

    _reader: Reader

    def _view(self, entry_id: str) -> AbstractContextManager[_View]:
        return _view_of(self._reader, entry_id)

    def get(self, entry_id: str) -> str | bytes:
        """Return the whole content: ``str`` for text, ``bytes`` for binary."""
        with self._view(entry_id) as v:
            raw = v.bytes_between(0, v.entry.size_bytes)
            return raw.decode("utf-8") if v.text else raw

    def stream(self, entry_id: str) -> EntryStream:
        """Return a readable, seekable binary file object over the content.

        It decompresses one chunk at a time; reading after the entry was deleted
        raises NotFound.
        """
        return EntryStream(self._reader, self._reader.stat(entry_id))

    def head(self, entry_id: str, n: int = 2000) -> str | bytes:
        """The first ``n`` characters (text) or bytes (binary)."""
        n = _position("n", n, minimum=0)
        return self.range(entry_id, 0, n)

    def tail(self, entry_id: str, n: int = 2000) -> str | bytes:
        """The last ``n`` characters (text) or bytes (binary)."""
        n = _position("n", n, minimum=0)
        with self._view(entry_id) as v:
            length = v.entry.length
            return self._slice(v, max(0, length - n), length)

    def range(self, entry_id: str, start: int | None, end: int | None = None) -> str | bytes:
        """Characters (text) or bytes (binary) ``start`` to ``end``, exactly as
        ``content[start:end]`` slices: negative values count from the end, values
        past the end clamp, None is the start (or the end)."""
        start = 0 if start is None else _position("start", start)
        if end is not None:
            end = _position("end", end)
        with self._view(entry_id) as v:
            s, e, _ = slice(start, end).indices(v.entry.length)
            return self._slice(v, s, max(s, e))

    @staticmethod
    def _slice(v: _View, start: int, end: int) -> str | bytes:
        return v.chars_between(start, end) if v.text else v.bytes_between(start, end)

    def byte_range(self, entry_id: str, start: int | None, end: int | None = None) -> bytes:
        """Bytes ``start`` to ``end`` of the content (text or binary), as bytes slicing does (None: the start, or the end)."""
        start = 0 if start is None else _position("start", start)
        if end is not None:
            end = _position("end", end)
        with self._view(entry_id) as v:
            s, e, _ = slice(start, end).indices(v.entry.size_bytes)
            return v.bytes_between(s, max(s, e))

    def lines(self, entry_id: str, first: int = 1, last: int | None = None) -> list[str]:
        """Lines ``first`` to ``last`` (1-based, inclusive), without their ``\\n``, as
        ``sed -n first,lastp`` selects them; negative numbers count from the end.

        ``last`` defaults to the last line; see :func:`line_span` for the rules (-1 is
        the last line, a last line before the first selects the first alone, values
        past either end clamp).  Binary content is decoded with U+FFFD for invalid bytes.
        """
        first = _position("first", first)
        if last is not None:
            last = _position("last", last)
        line_span(first, last, 0)  # line 0 is refused whatever the entry
        with self._view(entry_id) as v:
            return v.lines(*line_span(first, last, v.entry.lines))

    def line_windows(
        self, entry_id: str, first: int = 1, last: int | None = None, *, width: int = LINE_WINDOW, column: int = 0
    ) -> list[LineWindow]:
        """Lines ``first`` to ``last`` (selected as :meth:`lines` selects them), each cut to
        the characters ``column`` to ``column + width`` of the line, with its full length.

        Unlike :meth:`lines`, a long line is never read whole: only the chunks that hold
        the window, the line's start and its end are decompressed, so a call holds
        about ``width`` characters per line plus a few chunks (256 KB each by default),
        whatever the lines' lengths.  (Binary lines longer than 1 MB are decoded piece by
        piece to count their characters: memory stays bounded, time grows with them.)
        This is what the Toolbox's ``lines`` mode reads.
        """
        first = _position("first", first)
        if last is not None:
            last = _position("last", last)
        width = _position("width", width, minimum=1)
        column = _position("column", column, minimum=0)
        line_span(first, last, 0)
        with self._view(entry_id) as v:
            return v.line_windows(*line_span(first, last, v.entry.lines), column, width)

    def line_offsets(self, entry_id: str, first: int = 1, last: int | None = None) -> tuple[int, int]:
        """The bytes that hold lines ``first`` to ``last`` (selected as :meth:`lines` selects
        them) with their newlines, as ``(start, end)`` offsets: ``byte_range(start, end)``
        is what ``sed -n first,lastp`` prints.  ``(0, 0)`` when no line is selected.  Reads
        at most two chunks; stream the bytes with :meth:`stream` to copy long lines."""
        first = _position("first", first)
        if last is not None:
            last = _position("last", last)
        line_span(first, last, 0)
        with self._view(entry_id) as v:
            start, stop = line_span(first, last, v.entry.lines)
            if start > stop:
                return 0, 0
            end = v.line_end(stop)
            return v.line_start(start), min(end + 1, v.entry.size_bytes)

    # -- grep -------------------------------------------------------------------------

    def grep(
        self,
        entry_id: str,
        pattern: str,
        *,
        ignore_case: bool = False,
        fixed: bool = False,
        before: int = 0,
        after: int = 0,
        max_matches: int = 100,
        line_window: int = LINE_WINDOW,
        timeout: float | None = None,
        skip: int = 0,
        start_line: int = 1,
    ) -> GrepResult:
        """Find the lines matching ``pattern`` (RE2 syntax; a literal with ``fixed``).

        Each line is matched on its own, as ``rg`` does: ``^`` and ``\\A`` match at its
        start, ``$`` and ``\\z`` at its end (``(?-m)`` changes nothing), and a match
        never spans a newline.

        Returns at most ``max_matches`` matching lines with ``before``/``after``
        context lines each; ``truncated`` is true when more exist.  Stops reading as
        soon as it has them.  ``skip`` passes over the first ``skip`` matching lines,
        to page through many: their numbers are in the result's ``skipped``, and
        nothing else of them is built (neither text nor spans nor context).
        ``start_line`` starts the search at that line (the chunks before it are not
        read): a search that goes on after a page of matches starts at the line after
        the last one, and its ``searched_lines`` still counts from line 1.  Lines
        longer than ``line_window`` characters come back as a window of that size
        around their first match.  ``spans`` lists the matches of a line as
        ``re.finditer`` on the decoded line would, from its first match, bounded to the
        first ``MAX_SPANS`` (1000) matches of the line (then to those inside the window).
        Context lines longer than ``line_window`` are cut to their first ``line_window``
        characters, and only those are read.

        ``timeout`` is a time budget in seconds for the search (None, the default: no
        limit; :data:`SEARCH_TIMEOUT` is what the Toolbox, CLI and MCP server give).
        RE2's time is linear, but some patterns (``.*[0-9].{30}$``) defeat its DFA and
        search only a few hundred KB a second.  Under a budget the search runs in RE2
        calls sized to take about 10 ms each at the speed measured so far (the first
        searches 1 KB), and stops when the budget is spent: the result has
        ``timed_out`` set and holds every match of lines 1 to ``searched_lines``.  The
        call overruns its budget by one such call, plus, on a line longer than one
        call's window, one whole-line search, started only when searching that line
        in windows took under a quarter of the time left (so about a third of the
        budget at most), with the searches for its other matches inside the window of
        it that the result shows (each stops at the next match), plus reading the
        context lines of the matches found.
        """
        timeout = check_timeout(timeout)
        ignore_case, fixed = check_bool("ignore_case", ignore_case), check_bool("fixed", fixed)
        regex = compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
        before = _position("before", before, minimum=0)
        after = _position("after", after, minimum=0)
        max_matches = _position("max_matches", max_matches, minimum=0)
        line_window = _position("line_window", line_window, minimum=1)
        skip = _position("skip", skip, minimum=0)
        start_line = _position("start_line", start_line, minimum=1)
        if before > 1000 or after > 1000:
            raise InvalidArgument("before and after are limited to 1000 context lines")
        find = finder(regex)
        matches: list[GrepMatch] = []
        skipped: list[int] = []
        truncated = False
        dl = deadline_for(timeout)
        searched: int | None = None
        with _searching(self._reader, entry_id, _query(pattern, ignore_case, fixed)) as v:
            try:
                for number, build in _grep_lines(v, find, dl, line_window, start_line):
                    if len(skipped) < skip:
                        skipped.append(number)
                        continue
                    if len(matches) >= max_matches:
                        truncated = True
                        break
                    matches.append(build())
            except TimedOut as exc:
                searched = max(_searched_before(exc), start_line - 1)
            cut = _add_context(v, matches, before, after, line_window, dl)
            if cut is not None:
                searched, truncated = cut if searched is None else min(searched, cut), False
        return GrepResult(matches, truncated, skipped=skipped, **_how_far(v, searched))

    def matching_lines(
        self, entry_id: str, pattern: str, *, ignore_case: bool = False, fixed: bool = False,
        timeout: float | None = None, on_lines: Callable[[list[int], list[Any]], None] | None = None,
        as_bytes: bool = False,
    ) -> MatchingLines:
        """Every line matching ``pattern``, whole, with its number: what ``rg -n`` prints,
        and what ``blobpad grep`` prints without ``-m``, context or ``--max-columns``.

        The lines are :meth:`grep`'s with ``max_matches`` and ``line_window`` unbounded,
        without the work grep does for each of them (the spans of its matches, a
        :class:`GrepMatch`): several times faster where many lines match.  A large text
        entry searched for a set of literals is matched by ``rg`` in a child process
        (:mod:`blobpad.rgscan`), with the same result.  Each line
        comes whole, so a line of N bytes costs N bytes of memory; :meth:`grep` with a
        ``line_window`` bounds that, and is what a model should be given.  ``timeout``
        is :meth:`grep`'s time budget (None: no limit).

        ``on_lines``: where every line matches a 2 GB log, the result would hold 2 GB of
        text.  Given a function, the search hands it the lines as it goes instead, in
        order, a batch at a time (``on_lines(numbers, texts)``, lists as in the result,
        each batch a few MB at most), and keeps none: the result's lists are empty and
        its ``found`` counts the lines handed on.  The function runs in the calling
        thread while the search holds its read snapshot: it must not use the store (a
        store call inside raises BlobpadError); an exception it raises ends the search
        and propagates.  ``rg``'s lines are handed on once it succeeded, from an unlinked
        temporary file, so a failed ``rg`` hands nothing on before the search in process.

        ``as_bytes``: each line as its own bytes (``bytes``, without the newline), not as
        text: what ``rg -n`` prints of a binary entry, whose bytes that are not UTF-8 the
        text shows as U+FFFD.
        """
        timeout = check_timeout(timeout)
        ignore_case, fixed = check_bool("ignore_case", ignore_case), check_bool("fixed", fixed)
        as_bytes = check_bool("as_bytes", as_bytes)
        if on_lines is not None and not callable(on_lines):
            raise InvalidArgument(f"on_lines must be a function of (numbers, texts), not {describe(on_lines)}")
        find = finder(compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed))
        dl = deadline_for(timeout)
        found = MatchingLines([], [])
        searched: int | None = None
        if as_bytes and on_lines is not None:  # text comes back as its UTF-8: its own bytes
            on_lines = partial(_as_bytes, on_lines)
        with _searching(self._reader, entry_id, _query(pattern, ignore_case, fixed)) as v:
            scanned = _rg_scan(v, pattern, ignore_case, fixed, dl, numbered=True, on_lines=on_lines)
            if scanned is not None:
                found = MatchingLines(scanned.numbers, scanned.texts, found=scanned.count)
                searched = scanned.searched_lines
            else:
                handed = _Handed(found, on_lines)
                try:
                    _whole_lines(v, find, dl, found.numbers, found.texts, handed, raw=as_bytes)
                except TimedOut as exc:
                    searched = _searched_before(exc)
                handed()
        if as_bytes and found.texts and not isinstance(found.texts[0], bytes):
            found.texts[:] = [t.encode() for t in found.texts]
        return replace(found, **_how_far(v, searched))

    def count(
        self, entry_id: str, pattern: str, *, ignore_case: bool = False, fixed: bool = False,
        timeout: float | None = None,
    ) -> CountResult:
        """Count the lines matching ``pattern`` (like ``grep -c`` / ``rg -c``).

        Chunks are decompressed and counted on the store's worker threads (zstd and
        RE2 both release the GIL); those of a large text entry searched for a set of
        literals are counted by ``rg`` in a child process (:mod:`blobpad.rgscan`), with
        the same result.  A line longer than 8 MiB is searched in 8 MiB
        pieces that overlap by 64 KiB, so a match longer than that across a cut
        between two pieces is not seen.

        Returns a :class:`CountResult`, an ``int``.  ``timeout`` is a time budget in
        seconds, as for :meth:`grep` (None: no limit): when it runs out, the result has
        ``timed_out`` set and counts the matching lines among lines 1 to
        ``searched_lines``.  The overrun is grep's, on each worker thread at once.
        """
        timeout = check_timeout(timeout)
        ignore_case, fixed = check_bool("ignore_case", ignore_case), check_bool("fixed", fixed)
        counter = LineCounter(pattern, ignore_case=ignore_case, fixed=fixed)
        counter.deadline = deadline_for(timeout)
        with _searching(self._reader, entry_id, _query(pattern, ignore_case, fixed)) as v:
            scanned = _rg_scan(v, pattern, ignore_case, fixed, counter.deadline, numbered=False)
            if scanned is not None:
                return CountResult(scanned.count, timed_out=scanned.searched_lines is not None,
                                   searched_lines=scanned.searched_lines, chunks_read=v.chunks_read,
                                   chunks_total=len(v.m))
            result = _parallel_count(v, counter)
        return result

    def grep_session(
        self,
        session: str,
        pattern: str,
        *,
        names: str | None = None,
        entries: Sequence[str] | None = None,
        ignore_case: bool = False,
        fixed: bool = False,
        max_matches: int = 100,
        max_per_entry: int | None = None,
        before: int = 0,
        after: int = 0,
        line_window: int = LINE_WINDOW,
        timeout: float | None = None,
        cursor: str | None = None,
    ) -> SessionGrepResult:
        """Find the lines matching ``pattern`` in every live entry of ``session`` (text and
        binary), as :meth:`grep` finds them in one entry.

        Entries are searched in a stable order: the named ones by name (Python's string
        order, as :meth:`Store.named` lists them), then the unnamed ones in creation order
        (as :meth:`Store.entries` lists them).  ``names`` keeps only the named entries
        whose names match that shell glob (``fnmatch.fnmatchcase``: ``*`` crosses ``/``,
        case matters; unnamed entries never match).  ``entries`` searches those ids
        instead, in the order given: each must be a live entry of ``session``
        (NotFound), none listed twice.  ``names`` and ``entries`` cannot be combined.

        Bounds: at most ``max_matches`` matching lines in all (``truncated`` when more
        exist), at most ``max_per_entry`` of each entry (like ``rg -m``; None: no cap),
        at most :data:`MAX_SESSION_ENTRIES` (10,000) entries searched per call (and
        listed in ``entries``), and one time budget ``timeout`` for the whole call, with
        :meth:`grep`'s semantics (``timed_out``, never a hang).  ``before``, ``after``,
        ``line_window``, ``spans`` and long lines are as in :meth:`grep`.

        Paging: the result's ``cursor``, passed back with the same arguments (those that
        choose the lines: ``session``, ``pattern``, ``names``, ``entries``, ``ignore_case``,
        ``fixed``, ``max_per_entry``; ``max_matches``, the context and ``timeout`` may
        change), continues exactly after the last match returned; it is None when nothing
        is left.  A cursor of another search, or one that does not parse, raises
        InvalidArgument (so does one an older blobpad returned, before 2026-11-28: a cursor
        now says whether its entry was counted in ``searched_entries``).  Entries deleted
        or expired between pages are skipped; entries put meanwhile are searched if they
        sort after the cursor.
        """
        check_str("session", session, allow_none=False)
        timeout = check_timeout(timeout)
        ignore_case = check_bool("ignore_case", ignore_case)
        fixed = check_bool("fixed", fixed)
        regex = compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
        before = _position("before", before, minimum=0)
        after = _position("after", after, minimum=0)
        max_matches = _position("max_matches", max_matches, minimum=1)
        line_window = _position("line_window", line_window, minimum=1)
        cap = None if max_per_entry is None else _position("max_per_entry", max_per_entry, minimum=1)
        if before > 1000 or after > 1000:
            raise InvalidArgument("before and after are limited to 1000 context lines")
        glob = _check_glob(names)
        ids = _check_ids(entries)
        if glob is not None and ids is not None:
            raise InvalidArgument("pass names (a glob over entry names) or entries (a list of ids), not both")
        digest = _search_digest(session, pattern, ignore_case, fixed, glob, ids, cap)
        pos = None if cursor is None else _decode_cursor(cursor, digest, ids is not None)
        targets = _session_targets(self._reader, session, glob, ids, pos)
        find = finder(regex)
        query = _query(pattern, ignore_case, fixed)
        dl = deadline_for(timeout)
        matches: list[SessionMatch] = []
        truncated = timed_out = False
        stop: tuple[_Target, int, int] | None = None  # where the next page starts: target, lines searched, matches
        searched = 0
        built: list[tuple[bytes, list[bytes]]] = []  # the filters searches built, kept _KEEP_BATCH entries at a time
        todo = deque(targets[:MAX_SESSION_ENTRIES])
        try:
            while todo and stop is None:
                # a group of entries searched in one read snapshot, their records asked of a networked
                # engine in one request; a group ends after _GROUP entries or _GROUP_SECONDS
                with self._reader.read() as txn:
                    began = time.monotonic()
                    _prefetch_views(txn, [bytes.fromhex(t.entry_id) for t in itertools.islice(todo, _GROUP)])
                    for _ in range(_GROUP):
                        if not todo or time.monotonic() - began > _GROUP_SECONDS:
                            break
                        t = todo.popleft()
                        if cap is not None and t.count >= cap:
                            continue
                        if dl is not None and dl.left() <= 0:
                            timed_out = True
                            stop = (t, t.done, t.count)
                            break
                        try:
                            with _searching(self._reader, t.entry_id, query, built, txn) as v:
                                if not t.begun:  # an entry is counted by the call that begins to search it
                                    searched += 1
                                    t = t._replace(begun=True)
                                found: list[GrepMatch] = []
                                count = t.count
                                try:
                                    for number, build in _grep_lines(v, find, dl, line_window, t.done + 1):
                                        if len(matches) + len(found) >= max_matches:
                                            truncated = True
                                            stop = (t, number - 1, count)
                                            break
                                        found.append(build())
                                        count += 1
                                        if cap is not None and count >= cap:
                                            break
                                except TimedOut as exc:
                                    timed_out = True
                                    stop = (t, max(t.done, (exc.line or t.done + 1) - 1), count)
                                cut = _add_context(v, found, before, after, line_window, dl)
                                if cut is not None:  # out of time filling context: resume at the first left out
                                    timed_out, truncated = True, False
                                    stop = (t, max(t.done, cut), t.count + len(found))
                                matches.extend(SessionMatch.of(m, t.entry_id, t.name) for m in found)
                        except NotFound:
                            continue  # deleted or expired since it was listed
                        if stop is not None:
                            break
                if len(built) >= _KEEP_BATCH:  # the snapshot has ended: the store may write
                    _flush_filters(self._reader, built)
            if stop is None and len(targets) > MAX_SESSION_ENTRIES:
                nxt = targets[MAX_SESSION_ENTRIES]
                stop = (nxt, nxt.done, nxt.count)
        finally:
            _flush_filters(self._reader, built)
        next_cursor = None if stop is None else _encode_cursor(digest, *stop)
        return SessionGrepResult(matches, truncated, timed_out, next_cursor, searched)


@contextmanager
def _searching(
    reader: Reader, entry_id: str, query: Query, built: list[tuple[bytes, list[bytes]]] | None = None,
    txn: ReadTxn | None = None,
) -> Iterator[_View]:
    """A view of ``entry_id`` whose chunks the search of ``query`` reads (the others its
    filters exclude, :meth:`_View.select`), in a read transaction of its own or in
    ``txn``; once the search's read transaction ended, the filters it built are handed
    to the store (:func:`_keep_filters`), or, with ``built`` (always with ``txn``, which
    the caller ends), added to it for the caller to hand over with those of other entries."""
    if txn is None:
        with _view_of(reader, entry_id) as v:
            v.select(query)
            yield v
    else:
        with _named_damage(entry_id):
            v = _View(reader, txn, entry_id)
            v.select(query)
            yield v
    _keep_filters(v, built)


def _prefetch_views(txn: ReadTxn, raw_ids: list[bytes]) -> None:
    """Ask a networked engine for what opening views of ``raw_ids`` reads (records, chunk
    lists, filters) in one request; a no-op on local engines."""
    txn.prefetch_pairs([(space, raw_id) for raw_id in raw_ids for space in ("entries", "manifests", "filters")])


def _searched_before(exc: TimedOut) -> int:
    """The lines searched before a budget ran out: those before the line ``exc`` names."""
    return (exc.line or 1) - 1


def _how_far(v: _View, searched: int | None) -> dict[str, Any]:
    """A result's :class:`_Searched` fields: ``searched`` lines when the budget ran out (None: it did not)."""
    return {"timed_out": searched is not None, "searched_lines": searched, "chunks_read": v.chunks_read,
            "chunks_total": len(v.m)}


def _keep_filters(v: _View, pending: list[tuple[bytes, list[bytes]]] | None = None) -> None:
    """Hand the store the filters a search built of ``v``'s entry's chunks (see
    :meth:`_View.select`), after the search's read transaction ended; or add them to
    ``pending`` (see :func:`_flush_filters`)."""
    built = v.built()
    keep = v.reader.keep_filters
    if built is not None and keep is not None:
        v.building = None
        if pending is None:
            keep([(v.raw_id, built)])
        else:
            pending.append((v.raw_id, built))


#: grep_session keeps the chunk filters its searches built in one write transaction per this many entries
_KEEP_BATCH = 64
#: grep_session searches up to this many entries in one read snapshot, for at most this long
_GROUP = 32
_GROUP_SECONDS = 5.0


def _flush_filters(reader: Reader, pending: list[tuple[bytes, list[bytes]]]) -> None:
    """Hand the store the filters of ``pending`` (searches of several entries) in one
    write transaction, and empty it."""
    if pending and reader.keep_filters is not None:
        reader.keep_filters(pending[:])
    pending.clear()


def _run_task(
    codec: Codec, fn: Callable[[bytes], _T], items: list[bytes | tuple[bytes, bytes, int] | None]
) -> list[_T | None]:
    """``fn`` of each chunk of a task: given raw, or as (frame, key, size) to decompress; None: skipped."""
    return [None if item is None else fn(item if isinstance(item, bytes) else codec.decompress_cached(*item))
            for item in items]


def _run_building_task(
    codec: Codec, fn: Callable[[bytes], _T], items: list[bytes | tuple[bytes, bytes, int] | None],
    budgets: list[tuple[int, bool]],
) -> list[tuple[_T, bytes | None] | None]:
    """As :func:`_run_task`, each result paired with the chunk's filter (:func:`_chunk_filter`
    of its budget and whether it is the entry's last chunk; a budget under 0: not built, None)."""
    out: list[tuple[_T, bytes | None] | None] = []
    for item, (budget, last) in zip(items, budgets, strict=True):
        if item is None:
            out.append(None)
            continue
        raw = item if isinstance(item, bytes) else codec.decompress_cached(*item)
        out.append((fn(raw), None if budget < 0 else _chunk_filter(raw, budget, last)))
    return out


def _chunk_filter(raw: bytes, budget: int, last: bool) -> bytes | None:
    """The filter of a chunk that a search read (:func:`blobpad.prefilter.build`), or None
    for a chunk that ends inside a line (not the entry's last): its filter would need the
    next chunk's first bytes, so only a put builds it."""
    if not last and not raw.endswith(b"\n"):
        return None
    return prefilter.build(raw, b"", max_bytes=budget)


def _map_chunks(
    v: _View, fn: Callable[[bytes], _T], depth: int, task_bytes: int = 0, first: int = 0
) -> Iterator[_T | None]:
    """Yield ``fn(raw chunk)`` for the entry's chunks in order from chunk ``first``, running
    ``fn`` (and the decompression before it) on the store's worker pool, ``depth`` tasks ahead;
    None for a chunk the view's search skips (``v.wanted``, see :meth:`_View.select`), which
    is not read at all.

    A task takes consecutive chunks until it holds its share of raw bytes: one chunk
    for the first task, then twice as much per task up to ``task_bytes``.  Bigger tasks
    cost fewer futures, the small first ones answer a search that stops early sooner.
    Skipped chunks count for nothing; a task of skipped chunks only is not submitted.

    This thread reads the frames in the view's transaction and waits for the tasks
    inside it; that is safe only because a task is pure computation on the bytes it
    is given (``fn`` must not touch the store either): it never opens a transaction,
    so it never waits behind a map growth, which waits for this reader (see "Locking
    rules" in :mod:`blobpad.engine.lmdb`).
    """
    if not v.text:  # binary: searched with no character RE2 reads where UTF-8 has none (strict_utf8)
        fn = _after_strict(fn)
    reader = v.reader
    m = v.m
    n = len(m)
    wanted = v.wanted
    building = v.building is not None  # build each chunk's filter as well (see _View.select)
    if depth <= 0 or n - first <= 1:
        for i in range(first, n):
            if wanted is not None and not wanted[i]:
                yield None
                continue
            v.chunks_read += 1
            raw = v.raw(i)
            if building and v.needs_filter(i):
                flt = _chunk_filter(raw, v.filter_budget(i), i == n - 1)
                if flt is not None:
                    v.add_filter(i, flt)
            yield fn(raw)
            v._raw.pop(i, None)
        return
    codec = reader.codec
    nxt = first
    share = 0

    def submit() -> tuple[Future[list[Any]], int]:
        nonlocal nxt, share
        start = nxt
        items: list[bytes | tuple[bytes, bytes, int] | None] = []
        budgets: list[tuple[int, bool]] = []
        held = real = 0
        while nxt < n and (not real or held < share):
            i = nxt
            nxt += 1
            if wanted is not None and not wanted[i]:
                items.append(None)
                budgets.append((0, False))
                continue
            size = m.bytes_at[i + 1] - m.bytes_at[i]
            frame, hit = v.frame_and_cached(i)
            need = building and v.needs_filter(i)
            items.append(hit if hit is not None else (frame, m.keys[i], size))
            if building:
                budgets.append((v.filter_budget(i, frame) if need else -1, i == n - 1))
            held += size
            real += 1
        share = min(task_bytes, max(2 * held, share))
        v.chunks_read += real
        if not real:
            skipped: Future[list[Any]] = Future()
            skipped.set_result([None] * len(items))
            return skipped, start
        if building:
            return codec.submit(_run_building_task, codec, fn, items, budgets), start
        return codec.submit(_run_task, codec, fn, items), start

    pending: deque[tuple[Future[list[Any]], int]] = deque()
    while nxt < n and len(pending) < depth:
        pending.append(submit())
    try:
        while pending:
            future, start = pending.popleft()
            results = future.result()
            if nxt < n:
                pending.append(submit())
            if not building:
                yield from results
                continue
            for i, result in enumerate(results, start):
                if result is None:
                    yield None
                    continue
                value, flt = result
                if flt is not None:
                    v.add_filter(i, flt)
                yield value
    finally:  # the caller stopped early (or failed): the tasks ahead are not waited for
        for future, start in pending:
            if building and future.done() and not future.cancelled() and future.exception() is None:
                # filters already built ahead are kept too: a search that stops at the same
                # place again then builds none (a grep for the first matches would otherwise
                # rebuild the chunks it decompresses ahead on every call)
                for i, result in enumerate(future.result(), start):
                    if result is not None and result[1] is not None:
                        v.add_filter(i, result[1])
            future.cancel()


def _chunks_ahead(v: _View, depth: int, first: int = 0) -> Iterator[bytes | None]:
    """Yield the entry's raw chunks in order from chunk ``first``, decompressing up to
    ``depth`` tasks (of up to ``_GREP_TASK_BYTES``) ahead on the worker pool (zstd
    releases the GIL) while the caller searches the current one; None for a chunk the
    search skips (:meth:`_View.select`)."""
    return _map_chunks(v, _identity, depth, _GREP_TASK_BYTES, first)


def _identity(raw: bytes) -> bytes:
    return raw


def _after_strict(fn: Callable[[bytes], _T]) -> Callable[[bytes], _T]:
    """``fn`` of the chunk :func:`blobpad.search.strict_utf8` makes of its argument."""
    def strict(raw: bytes) -> _T:
        return fn(strict_utf8(raw))  # type: ignore[arg-type]

    return strict


def _rg_scan(
    v: _View, pattern: str, ignore_case: bool, fixed: bool, dl: Deadline | None, *, numbered: bool,
    on_lines: Callable[[list[int], list[str]], None] | None = None,
) -> rgscan.Scanned | None:
    """Count (or list, ``numbered``) the matching lines with ``rg`` (:mod:`blobpad.rgscan`)
    where it gives this process's answer and is worth starting: a text entry whose every
    chunk but the last holds a newline, :data:`blobpad.rgscan.MIN_BYTES` or more to read,
    a pattern that is a set of literals.  None: search in this process (nothing was
    read, or ``rg`` failed and what it read is read again)."""
    m = v.m
    n = len(m)
    if not v.text or n < 2 or m.bytes_at[n] < rgscan.MIN_BYTES:
        return None
    rg = rgscan.executable()
    if rg is None:
        return None
    found = rgscan.literals(pattern, ignore_case=ignore_case, fixed=fixed)
    if found is None:
        return None
    lines_at, bytes_at = m.lines_at, m.bytes_at
    if any(lines_at[i + 1] == lines_at[i] for i in range(n - 1)):
        return None  # a line longer than a chunk: searched in bounded pieces here
    wanted = v.wanted
    if wanted is not None and sum(bytes_at[i + 1] - bytes_at[i] for i in range(n) if wanted[i]) < rgscan.MIN_BYTES:
        return None
    chunks = ((raw, lines_at[i] + 1, lines_at[i + 1] - lines_at[i])
              for i, raw in enumerate(_map_chunks(v, _identity, _RG_DEPTH, _RG_TASK_BYTES)))
    scanned = rgscan.scan(rg, found, ignore_case=ignore_case, numbered=numbered, chunks=chunks, deadline=dl,
                          on_lines=on_lines)
    if scanned is None:
        v.chunks_read = 0  # read again in this process
    return scanned


def _count_chunk(counter: LineCounter, utf8: bool, raw: bytes) -> tuple[bytes, int, bytes]:
    """(text before the first newline, matching lines between the first and the last
    newline, text after the last newline); ``(raw, -1, b"")`` if there is no newline."""
    first = raw.find(b"\n")
    if first < 0:
        return raw, -1, b""
    last = raw.rfind(b"\n")
    return raw[: first + 1], counter.count(raw, first + 1, last + 1, utf8), raw[last + 1 :]


def _parallel_count(v: _View, counter: LineCounter) -> CountResult:
    """Count matching lines; the worker threads count whole lines inside each chunk, and
    this thread the lines that straddle chunk boundaries, stitched together.

    A line is gathered in a bytearray (no quadratic concatenation) of at most
    ``SEGMENT_BYTES`` bytes: a longer line is searched in pieces of that size, each
    starting with the last ``SEGMENT_OVERLAP`` bytes of the one before, and is not searched
    any more once a piece matched.

    When the counter's deadline passes (TimedOut, from a worker or from this thread),
    the count so far covers the lines that end before the chunk being stitched (and
    the line continuing past them if it already matched).
    """
    utf8 = v.text
    total = 0
    carry = bytearray()  # the start of the line that continues in the next chunk
    first = 0  # where to search carry from: 1 when it starts inside a line (its first byte is context)
    matched = False  # that line already matched (and was counted) in an earlier piece
    task = partial(_count_chunk, counter, utf8)
    done = 0  # chunks stitched: every line ending before chunk `done` is counted
    try:
        for counted in _map_chunks(v, task, 2 * v.reader.workers, _TASK_BYTES):
            if counted is None:  # skipped: whole lines, none matching (the line before ended in its chunk)
                done += 1
                continue
            head, n, tail = counted
            if n < 0:  # no newline: all of this chunk lies inside one line
                if counter.deadline is not None:  # a line of many chunks: stop gathering it too
                    counter.deadline.check()
                if not matched:
                    if carry and len(carry) + len(head) > SEGMENT_BYTES:
                        # the last byte is context only; the next piece starts with this one's end
                        matched = counter.count(carry, first, len(carry) - 1, utf8) > 0
                        total += matched
                        carry, first = bytearray(carry[-SEGMENT_OVERLAP:]), 1
                    if not matched:
                        carry += head
                done += 1
                continue
            if not matched:
                if carry:
                    carry += head
                    total += counter.count(carry, first, len(carry), utf8)
                else:
                    total += counter.count(head, 0, len(head), utf8)
            total += n
            carry, first = bytearray(tail), 0
            matched = False
            done += 1
        if carry and not matched:
            total += counter.count(carry, first, len(carry), utf8)
    except TimedOut:
        return CountResult(total, timed_out=True, searched_lines=v.m.lines_at[done] + matched,
                           chunks_read=v.chunks_read, chunks_total=len(v.m))
    return CountResult(total, chunks_read=v.chunks_read, chunks_total=len(v.m))


def _segments(
    v: _View, depth: int = 2, start_line: int = 1, dl: Deadline | None = None
) -> Iterator[tuple[_Bytes, int, int, int, bool]]:
    """Yield (buffer, end, number of the first line, byte offset of the buffer in the
    entry, whether the buffer starts inside a line an earlier buffer began):
    ``buffer[:end]`` is whole lines, or a piece of a very long line.

    Chunks end on newlines except inside very long lines; those are gathered in a
    bytearray (so a line of many chunks costs its length, not its length squared) up
    to ``SEGMENT_BYTES`` bytes, past which a line is searched in pieces, each starting
    with the last ``SEGMENT_OVERLAP`` bytes of the one before.  The bytes on either side of
    the part of a piece to search stay in the buffer as context (``end`` stops one
    short of a cut; a piece that starts inside a line is searched from its second
    byte), so ``^``, ``$`` and ``\b`` never match at a cut.  Chunks are decompressed
    ``depth`` ahead.  Line numbers come from the manifest's newline counts: a buffer
    yielded at chunk i starts after the last newline before chunk i.

    With ``start_line`` the buffers start at that line (the chunks before the one that
    holds its start are not read); past the last line nothing is yielded.  Under a
    budget ``dl``, gathering a long line stops when it is spent (TimedOut names that
    line): a line of many small chunks, each a round trip on a networked engine, could
    take many times the budget before its first piece was searched.
    """
    lines_at, bytes_at = v.m.lines_at, v.m.bytes_at
    first_chunk = skip = 0
    if start_line > 1:
        if start_line > v.entry.lines:
            return
        at = v.line_start(start_line)
        first_chunk = v.m.chunk_of(bytes_at, at)
        skip = at - bytes_at[first_chunk]
    carry = bytearray()
    base = 0  # where carry starts in the entry
    inside = False  # carry starts inside a line an earlier piece began
    for i, raw in enumerate(_chunks_ahead(v, depth, first_chunk), first_chunk):
        if raw is None:  # skipped: whole lines, none matching (the chunk before ended its last line)
            base = bytes_at[i + 1]
            continue
        line0, at = lines_at[i] + 1, bytes_at[i]  # the first line starting in raw, and raw's offset
        if i == first_chunk and start_line > 1:  # raw starts at a line start: the lines before it are skipped
            raw, line0, at = raw[skip:], start_line, at + skip
            base = at
        cut = raw.rfind(b"\n") + 1
        if cut == 0:
            if dl is not None:
                dl.check(line0)  # the line being gathered, which starts before or in raw
            carry += raw
            if len(carry) >= SEGMENT_BYTES:  # a piece of a very long line: its last byte is context only
                yield carry, len(carry) - 1, line0, base, inside
                base += len(carry) - SEGMENT_OVERLAP
                carry = bytearray(carry[-SEGMENT_OVERLAP:])
                inside = True
            continue
        if carry:
            carry += memoryview(raw)[:cut]
            yield carry, len(carry), line0, base, inside
        else:
            yield raw, cut, line0, at, False
        carry = bytearray(memoryview(raw)[cut:])
        base, inside = at + cut, False
    if carry:
        yield carry, len(carry), lines_at[-1] + 1, base, inside


def _matching_lines(
    v: _View, find: _Find, dl: Deadline | None = None, start_line: int = 1
) -> Iterator[tuple[int, _Bytes, int, int, tuple[int, int], int, bool]]:
    """Yield (line number, buffer, line start, line end, first match, buffer's offset
    in the entry, whether the whole line is in the buffer) for each matching line, in
    order and once; the offsets are into the buffer, the line excludes its newline (a
    line longer than a buffer: its part there).

    Under a budget ``dl``, raises TimedOut with the number of the first line not searched.
    The search starts at line ``start_line``."""
    reported = 0  # the last line yielded: a very long line's later pieces skip it
    try:
        for seg, size, first_line, base, inside in _segments(v, start_line=start_line, dl=dl):
            for found in _segment_matches(find, dl, seg, size, first_line, base, inside, reported):
                reported = found[0]
                yield found
    except TimedOut as exc:
        raise _past_reported(exc, reported) from None


def _past_reported(exc: TimedOut, reported: int) -> TimedOut:
    """A budget spent while a long line was gathered names that line as not searched; a line
    already reported (it matched in an earlier piece) was, as far as a match goes: the
    first line not searched is the next one, so a result never holds a line past it."""
    if exc.line is not None and exc.line <= reported:
        return TimedOut(reported + 1)
    return exc


def _segment_matches(
    find: _Find, dl: Deadline | None, seg: _Bytes, size: int, first_line: int, base: int, inside: bool, reported: int
) -> Iterator[tuple[int, _Bytes, int, int, tuple[int, int], int, bool]]:
    """:func:`_matching_lines` of one buffer of :func:`_segments` (``reported``: the last
    line yielded before it)."""
    pos = 0
    line_no = first_line
    counted = 0  # newlines of seg[:counted] are included in line_no
    if inside and first_line == reported:  # that line matched in an earlier piece
        nl = seg.find(b"\n", 0, size)
        if nl < 0:
            return
        pos = counted = nl + 1
        line_no += 1
    elif inside:
        pos = 1  # its first byte is context: it was searched in the piece before
    while pos < size:
        if dl is None:
            s, e = find(UNANCHORED, seg, pos, size)[0]
        else:
            try:
                s, e = bounded_find(find, seg, pos, size, dl)
            except TimedOut as exc:
                at = pos if exc.pos is None else exc.pos  # bounded_find tells where it stopped
                raise TimedOut(line_no + seg.count(b"\n", counted, at)) from None
        if s < 0 or (s == size and seg[size - 1] == 10):
            break  # none, or an empty match after the last newline: no line is there
        start = seg.rfind(b"\n", 0, s) + 1
        end = seg.find(b"\n", s, size)
        if end < 0:
            end = size
        line_no += seg.count(b"\n", counted, start)
        counted = start
        whole = not (inside and start == 0) and (end < size or size == len(seg))
        yield line_no, seg, start, end, (s, min(e, end)), base, whole
        pos = end + 1


def _line_spans(
    find: _Find, buf: _Bytes, start: int, end: int, first: tuple[int, int], window: int, dl: Deadline | None = None
) -> list[tuple[int, int]]:
    """Byte spans (relative to ``start``) of the matches in the line ``buf[start:end]``,
    from its first match on, at most ``MAX_SPANS``, and only those a grep window of
    ``window`` characters around the first can show (:func:`_make_match` keeps no other):
    a character is at most 4 bytes, so no span starting ``4 * window`` bytes or more past
    the first is.

    As in Python's ``re.finditer``: an empty match may follow a non-empty one at its
    end, and after an empty match the search resumes at the next character, so every
    span starts and ends on a character boundary.  (Python also retries a non-empty
    match at the empty match's position, for patterns that prefer the empty string,
    such as ``(|a)``; RE2 cannot ask for that, so those matches are not reported.)

    Under a budget ``dl``, each search starts only while time is left.  Their cost was
    weighed when the line was found: a line longer than a search window was searched
    whole by :func:`blobpad.search.long_line`, which first measured its windows, and a
    shorter one is a window.  Weighing each search again, on the speed of the last few
    (calls that stop at a match a few bytes on, any of which a moment of descheduling
    could make look slow), stopped searches of long lines with many matches at random.
    """
    s, e = first
    spans = [(s - start, e - start)]
    shown = s + 4 * window
    while len(spans) < MAX_SPANS:
        if e > s:
            p = e
        elif s >= end:
            break
        else:
            p = next_char(buf, s, end)
        s, e = find(UNANCHORED, buf, p, end)[0] if dl is None else dl.timed(find, buf, p, end)
        if s < 0 or s >= shown:
            break
        spans.append((s - start, e - start))
    return spans


def _make_match(v: _View, number: int, line: bytes, spans: list[tuple[int, int]], window: int) -> GrepMatch:
    if line.isascii():
        text_len = len(line)
        if text_len <= window:
            return GrepMatch(number, line.decode("ascii"), spans, line_chars=text_len)
        lo = max(0, spans[0][0] - window // 4)
        hi = min(text_len, lo + window)
        lo = max(0, hi - window)
        kept = [(s - lo, min(e, hi) - lo) for s, e in spans if lo <= s < hi]
        return GrepMatch(number, line[lo:hi].decode("ascii"), kept, offset=lo, line_chars=text_len)
    decode = v.decode
    text = decode(line)
    # Character offsets, decoding only the bytes between consecutive span ends: they
    # are character boundaries, so the pieces add up to the whole line's decoding.
    chars: list[tuple[int, int]] = []
    b = c = 0
    for s, e in spans:
        if s > b:
            c += len(decode(line[b:s]))
            b = s
        cs = c
        if e > b:
            c += len(decode(line[b:e]))
            b = e
        chars.append((cs, c))
    if len(text) <= window:
        return GrepMatch(number, text, chars, line_chars=len(text))
    lo = max(0, chars[0][0] - window // 4)
    hi = min(len(text), lo + window)
    lo = max(0, hi - window)
    kept = [(cs - lo, min(ce, hi) - lo) for cs, ce in chars if lo <= cs < hi]
    return GrepMatch(number, text[lo:hi], kept, offset=lo, line_chars=len(text))


def _long_match(v: _View, find: _Find, k: int, bs: int, be: int, b0: int, b1: int, window: int) -> GrepMatch:
    """The match at bytes ``b0`` to ``b1`` of line ``k`` (bytes ``bs`` to ``be``), a line
    too long to hold: a window of ``window`` characters around it, read through the view
    (a few chunks in memory, whatever the line's length), with the matches inside it."""
    if v.text:
        first = v.char_of(bs)
        col, col_end, total = v.char_of(b0) - first, v.char_of(b1) - first, v.char_of(be) - first
    else:  # characters as decode("utf-8", "replace") makes them, counted piece by piece
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        col = sum(len(decoder.decode(p)) for p in v.pieces(bs, b0))
        # bytes of a sequence cut short just before the match are characters (U+FFFD) before it, not
        # part of it: the decoder held them back, and would have counted them in the match
        col += len(decoder.decode(b"", final=True))
        decoder.reset()
        col_end = col + sum(len(decoder.decode(p)) for p in v.pieces(b0, b1))
        total = col_end + sum(len(decoder.decode(p)) for p in v.pieces(b1, be)) + len(decoder.decode(b"", final=True))
    lo = max(0, col - window // 4)
    hi = min(total, lo + window)
    lo = max(0, hi - window)
    text = v.line_window(k, bs, be, lo, hi - lo).text
    spans = [(col - lo, min(col_end, hi) - lo)]
    raw = text.encode("utf-8", "surrogateescape")
    edge = len(raw)
    # the line after the window is context (RE2 reads past the end it is given for \b and $), so a
    # match cut by the window's end is found as it is on the whole line, its span cut there
    after = v.line_window(k, bs, be, hi, _SPAN_CONTEXT).text if hi < total else ""
    ext = raw + after.encode("utf-8", "surrogateescape")
    # the other matches inside the window, their character offsets counted as they come; after an
    # empty first match the search resumes at the next character (else it found that match again)
    p = b = len(text[: col_end - lo].encode("utf-8", "surrogateescape"))
    c = col_end - lo
    if col_end == col and p < len(ext):
        p = next_char(ext, p, len(ext))
    while len(spans) < MAX_SPANS and p < edge:
        s, e = find(UNANCHORED, ext, p, len(ext))[0]
        if s < 0 or s >= edge:
            break
        inside = min(e, edge)
        c += len(raw[b:s].decode("utf-8", "replace"))
        cs = c
        c += len(raw[s:inside].decode("utf-8", "replace"))
        b = inside
        spans.append((cs, c))
        p = e if e > s else next_char(ext, s, len(ext))
    return GrepMatch(k, text, spans, offset=lo, line_chars=total)


#: the characters of a very long line after a grep window that its search reads as context
_SPAN_CONTEXT = 16384


def _grep_lines(
    v: _View, find: _Find, dl: Deadline | None, line_window: int, start_line: int = 1
) -> Iterator[tuple[int, Callable[[], GrepMatch]]]:
    """For each matching line from ``start_line`` on, in order: (its number, a function
    that builds its GrepMatch, to call before the next line is asked for).  Building
    costs the line's spans (and a window of a very long line): a caller that only
    needs to know that one more line matches does not pay for it.

    Under a budget ``dl``, the search and the building raise TimedOut with the number
    of the first line not searched (or not built)."""
    for number, seg, start, end, first, base, whole in _matching_lines(v, find, dl, start_line):
        yield number, partial(_build_match, v, find, dl, line_window, number, seg, start, end, first, base, whole)


def _as_bytes(on_lines: Callable[[list[int], list[Any]], None], numbers: list[int], texts: list[Any]) -> None:
    """``on_lines`` given the lines as bytes (a text line as its UTF-8, its own bytes)."""
    on_lines(numbers, [t if isinstance(t, bytes) else t.encode() for t in texts])


class _Handed:
    """What :meth:`ReadsMixin.matching_lines` does with the lines found so far, between two
    buffers of the search and at its end: hands them to ``on_lines`` and forgets them (if
    given), counting them in ``found.found``; else keeps them, counting them at the end."""

    __slots__ = ("found", "on_lines", "last")

    def __init__(self, found: MatchingLines, on_lines: Callable[[list[int], list[str]], None] | None) -> None:
        self.found, self.on_lines = found, on_lines
        self.last = 0  # the number of the last line handed on

    def __call__(self) -> None:
        found = self.found
        if self.on_lines is None:
            found.found = len(found.texts)
        elif found.texts:
            numbers, texts = found.numbers[:], found.texts[:]
            found.numbers.clear()
            found.texts.clear()
            found.found += len(texts)
            self.last = numbers[-1]
            self.on_lines(numbers, texts)


def _whole_lines(
    v: _View, find: _Find, dl: Deadline | None, numbers: list[int], texts: list[Any], handed: _Handed | None = None,
    raw: bool = False,
) -> None:
    """Append each matching line's number to ``numbers`` and its text to ``texts`` (see
    ``matching_lines``); under a budget ``dl`` raises TimedOut as :func:`_matching_lines`
    does, the lists holding the lines before it (but those ``handed`` on after each buffer
    and every :data:`_HAND_LINES` lines of binary content, when it hands them on).  ``raw``:
    the lines of binary content as their bytes (those of text are text, whatever it says).

    The buffers of text that hold whole lines only (all of them, but those of lines
    longer than one buffer) are searched by :func:`_whole_lines_of`, a loop of one RE2
    call and a few ``bytes`` calls per matching line, over the whole buffer, or under a
    budget over runs of lines sized as :func:`blobpad.search.bounded_find` sizes them
    (one line longer than such a run goes to :func:`blobpad.search.long_line`)."""
    if not v.text:
        return _whole_lines_slowly(v, find, dl, numbers, texts, handed, raw)
    reported = 0  # the last line appended: a very long line's later pieces skip it
    try:
        for seg, size, first_line, _, inside in _segments(v, dl=dl):
            if inside or not (size == len(seg) or seg[size - 1] == 10):  # a piece of a line longer than a buffer
                pieces = _segment_matches(find, dl, seg, size, first_line, 0, inside, reported)
                reported = _append_lines(_texts(v, pieces), numbers, texts) or reported
            elif dl is None:
                reported = _whole_lines_of(seg, 0, size, size, first_line, find, numbers, texts)[0] or reported
            else:
                reported = _whole_lines_timed(seg, size, first_line, find, dl, numbers, texts) or reported
            if handed is not None:
                handed()
    except TimedOut as exc:
        raise _past_reported(exc, numbers[-1] if numbers else handed.last if handed is not None else 0) from None


def _whole_lines_timed(
    seg: _Bytes, size: int, line_no: int, find: _Find, dl: Deadline, numbers: list[int], texts: list[str]
) -> int:
    """:func:`_whole_lines_of` of a whole buffer under a budget; TimedOut names the first
    line not searched."""
    last = 0
    for start, end, long in line_runs(seg, 0, size, dl):
        try:
            dl.check()
            if long:  # one line longer than a run
                if long_line(find, seg, start, end, dl, exact=False)[0] >= 0:
                    numbers.append(line_no)
                    texts.append(seg[start:end].decode("utf-8"))
                    last = line_no
            else:
                t0 = time.monotonic()
                found, line_no = _whole_lines_of(seg, start, end, size, line_no, find, numbers, texts)
                dl.pace(end - start, time.monotonic() - t0)
                last = found or last
        except TimedOut:
            raise TimedOut(line_no) from None  # the run's first line: the lines before it are all searched
        line_no += 1  # the run ended at a newline, or at the end of the buffer (then nothing follows)
    return last


def _whole_lines_of(
    seg: _Bytes, pos: int, end: int, size: int, line_no: int, find: _Find, numbers: list[int], texts: list[str]
) -> tuple[int, int]:
    """Append the numbers and texts of the matching lines of ``seg[pos:end]`` (whole lines
    of valid UTF-8 of a buffer of ``size`` bytes, ``pos`` starting line ``line_no``, ``end``
    at a newline or at ``size``) to ``numbers`` and ``texts``; return (the number of the
    last one, 0 if none; the number of the line that holds ``end``)."""
    number, text, match = numbers.append, texts.append, find
    nl_before, nl_after, newlines = seg.rfind, seg.find, seg.count
    counted = pos
    last = 0
    while pos <= end:
        s = match(UNANCHORED, seg, pos, end)[0][0]
        if s < 0 or (s == size and seg[size - 1] == 10):
            break  # none, or an empty match after the buffer's last newline: no line is there
        start = nl_before(b"\n", pos, s) + 1 or pos  # pos starts a line
        stop = nl_after(b"\n", s, end)
        if stop < 0:
            stop = end
        line_no += newlines(b"\n", counted, start)
        counted = start
        number(line_no)
        text(seg[start:stop].decode("utf-8"))
        last = line_no
        pos = stop + 1
    return last, line_no + newlines(b"\n", counted, end)


def _texts(v: _View, matches: Iterator[tuple[int, _Bytes, int, int, tuple[int, int], int, bool]],
           raw: bool = False) -> Iterator[tuple[int, Any]]:
    """``(number, text)`` of each line of ``matches`` (as :func:`_matching_lines` yields
    them), or with ``raw`` ``(number, its bytes)``; a line longer than one buffer is read
    whole through the view."""
    for number, buf, start, end, _, _, whole in matches:
        line = bytes(buf[start:end]) if whole else b"".join(v.pieces(v.line_start(number), v.line_end(number)))
        yield number, line if raw else v.decode(line)


#: matching lines of binary content :func:`_whole_lines_slowly` hands on at a time
_HAND_LINES = 4096


def _whole_lines_slowly(
    v: _View, find: _Find, dl: Deadline | None, numbers: list[int], texts: list[Any], handed: _Handed | None = None,
    raw: bool = False,
) -> None:
    """:func:`_whole_lines` of binary content: through :func:`_matching_lines` (``raw``: each
    line's bytes, not its text)."""
    lines = _texts(v, _matching_lines(v, find, dl), raw)
    if handed is None:
        _append_lines(lines, numbers, texts)
        return
    while _append_lines(itertools.islice(lines, _HAND_LINES), numbers, texts):
        handed()


def _append_lines(lines: Iterator[tuple[int, str]], numbers: list[int], texts: list[str]) -> int:
    """Append each ``(number, text)`` of ``lines`` to ``numbers`` and ``texts`` (as they come:
    a TimedOut leaves those before it); return the last number, 0 if none."""
    last = 0
    for last, line in lines:  # the last number seen is the result
        numbers.append(last)
        texts.append(line)
    return last


def _build_match(
    v: _View, find: _Find, dl: Deadline | None, line_window: int, number: int, seg: _Bytes, start: int, end: int,
    first: tuple[int, int], base: int, whole: bool,
) -> GrepMatch:
    """The GrepMatch of a line :func:`_matching_lines` yielded (see :func:`_grep_lines`)."""
    if end - start > BULK_LINE_BYTES or not whole:  # a very long line, or a piece of one
        bs, be = v.line_start(number), v.line_end(number)
        if be - bs > BULK_LINE_BYTES:  # read a window of it, never the whole line
            return _long_match(v, find, number, bs, be, base + first[0], base + first[1], line_window)
    try:
        spans = _line_spans(find, seg, start, end, first, line_window, dl)
    except TimedOut:
        raise TimedOut(number) from None
    return _make_match(v, number, bytes(seg[start:end]), spans, line_window)


_NEWLINE = re.compile(b"\n")

#: the time the context lines of a search's matches may take past its budget (a search that
#: spent its budget on finding matches still returns some of them with their context)
CONTEXT_GRACE = 0.25


def _add_context(v: _View, matches: list[GrepMatch], before: int, after: int, line_window: int,
                 dl: Deadline | None) -> int | None:
    """Fill the ``before``/``after`` context lines of ``matches`` (lines of ``v``), each cut
    to its first ``line_window`` characters (only those are read), within the search's
    budget ``dl`` plus :data:`CONTEXT_GRACE`: when it runs out, the matches left without
    their context are dropped from ``matches`` and the lines searched before the first of
    them returned (the search stopped there), else None.

    Each line is read once: the windows of nearby matches overlap (``-C 1000`` around
    matches a few lines apart), and the lines read for one are held, as shared
    ``(number, text)`` pairs, for the next ones, until they fall behind the window."""
    if not (before or after):
        return None
    ends = None if dl is None else time.monotonic() + max(dl.left(), 0.0) + CONTEXT_GRACE
    total = v.entry.lines
    held: dict[int, tuple[int, str]] = {}  # the lines read, in order, from the lowest one still needed on
    last = 0  # the highest line read
    for k, mt in enumerate(matches):
        if ends is not None and k and time.monotonic() > ends:  # the first match always gets its context
            del matches[k:]
            return mt.line - 1
        lo, hi = max(1, mt.line - before), min(total, mt.line + after)
        while held and (first := next(iter(held))) < lo:
            del held[first]
        if max(lo, last + 1) <= hi:
            held.update((w.line, (w.line, w.text)) for w in v.line_windows(max(lo, last + 1), hi, 0, line_window))
            last = hi
        if before:
            mt.before = [held[n] for n in range(lo, mt.line)]
        if after:
            mt.after = [held[n] for n in range(mt.line + 1, hi + 1)]


# -- grep over a session ------------------------------------------------------------------

#: where a grep_session() target sorts: named entries by name, then unnamed ones by
#: creation; or, with ``entries``, the place in that list
_NAMED, _UNNAMED, _LISTED = 0, 1, 2
_CURSOR_VERSION = 2
#: set in a cursor's phase byte when a call before already began to search the entry (and
#: counted it in its searched_entries)
_BEGUN = 0x80
#: version, phase, entry id, lines of the entry searched, its matches returned; then the entry's key
#: (its name; a place in ``entries`` as 8 bytes; its creation index key after the session: 16 bytes, or
#: 8 in older stores), then a tag: a hash of all that keyed by the search's arguments
_CURSOR_HEAD = struct.Struct(">BB8sQQ")
_CURSOR_TAG = 8
_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_-]+")
_CURSOR_MAX = 4 * (_CURSOR_HEAD.size + MAX_STR_BYTES + _CURSOR_TAG) // 3 + 4


class _Target(NamedTuple):
    """An entry grep_session() searches: where it sorts (``phase``, ``key``: a name, a
    creation sequence or a place in ``entries``), and, for the entry a cursor stopped in,
    how many of its lines were searched, how many of its matches returned, and whether a
    call before began to search it (``begun``: that call counted it in searched_entries)."""

    phase: int
    key: str | int
    entry_id: str
    name: str | None
    done: int = 0
    count: int = 0
    begun: bool = False


def _check_glob(names: object) -> str | None:
    """A ``names`` glob: a non-empty string of valid Unicode of at most MAX_GLOB characters."""
    if names is None:
        return None
    if not isinstance(names, str):
        raise InvalidArgument(f"names must be a glob (a string such as 'logs/*.txt') or None, not {typename(names)}")
    if not names:
        raise InvalidArgument("names is an empty glob: pass a glob such as 'logs/*.txt', or None for every entry")
    if len(names) > MAX_GLOB:
        raise InvalidArgument(f"names is a glob of {len(names)} characters; the limit is {MAX_GLOB}")
    try:
        names.encode("utf-8")
        re.compile(fnmatch.translate(names))
    except UnicodeEncodeError:
        raise InvalidArgument("names contains lone surrogates; pass valid Unicode") from None
    except re.error as exc:
        raise InvalidArgument(f"names is not a glob fnmatch can read ({exc})") from None
    return names


def _check_ids(entries: object) -> list[str] | None:
    """``entries``: a list of distinct entry ids (at most MAX_SESSION_ENTRIES), lowercased."""
    if entries is None:
        return None
    if isinstance(entries, (str, bytes, bytearray)) or not isinstance(entries, Sequence):
        raise InvalidArgument(f"entries must be a list of entry ids or None, not {typename(entries)}")
    if len(entries) > MAX_SESSION_ENTRIES:
        raise InvalidArgument(f"entries lists {len(entries)} ids; the limit is {MAX_SESSION_ENTRIES} per call")
    out: list[str] = []
    seen: set[bytes] = set()
    for entry_id in entries:
        raw_id = parse_id(entry_id)
        if raw_id in seen:
            raise InvalidArgument(f"entries lists {raw_id.hex()} twice; list each entry once")
        seen.add(raw_id)
        out.append(raw_id.hex())
    return out


def _search_digest(session: str, pattern: str, ignore_case: bool, fixed: bool, names: str | None,
                   ids: list[str] | None, max_per_entry: int | None) -> bytes:
    """What a cursor is bound to: the arguments that decide which lines match, in which order."""
    blob = json.dumps([session, pattern, ignore_case, fixed, names, ids, max_per_entry]).encode("ascii")
    return hashlib.blake2b(blob, digest_size=16, person=b"blobpad-grep").digest()


def _cursor_tag(digest: bytes, payload: bytes) -> bytes:
    """The tag that ties a cursor's ``payload`` to a search (any change of either shows)."""
    return hashlib.blake2b(payload, digest_size=_CURSOR_TAG, key=digest).digest()


def _encode_cursor(digest: bytes, t: _Target, done: int, count: int) -> str:
    """The cursor of a search to continue in target ``t`` after its first ``done`` lines."""
    phase = t.phase | (_BEGUN if t.begun else 0)
    head = _CURSOR_HEAD.pack(_CURSOR_VERSION, phase, bytes.fromhex(t.entry_id), min(done, _BEYOND), count)
    key = t.key.encode("utf-8") if isinstance(t.key, str) else t.key.to_bytes(16 if t.key >> 64 else 8, "big")
    payload = head + key
    return base64.urlsafe_b64encode(payload + _cursor_tag(digest, payload)).rstrip(b"=").decode("ascii")


def _decode_cursor(cursor: object, digest: bytes, listed: bool) -> _Target:
    """The target a cursor continues in (InvalidArgument unless this search returned it)."""
    if not isinstance(cursor, str):
        raise InvalidArgument(f"cursor must be a string that grep_session returned, or None, not {typename(cursor)}")
    bad = InvalidArgument(
        "the cursor is not one this search returned: pass back the cursor of the same search (the same "
        "session, pattern, names or entries, and options)", hint=HINT_CURSOR,
    )
    if len(cursor) > _CURSOR_MAX or not _CURSOR_CHARS.fullmatch(cursor):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise bad from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != cursor:
        raise bad  # not as grep_session writes it (stray bits in its last character)
    payload, tag = raw[:-_CURSOR_TAG], raw[-_CURSOR_TAG:]
    if len(payload) < _CURSOR_HEAD.size or tag != _cursor_tag(digest, payload):
        raise bad
    version, phase, raw_id, done, count = _CURSOR_HEAD.unpack_from(payload)
    tail = payload[_CURSOR_HEAD.size :]
    if version != _CURSOR_VERSION or done > _BEYOND or count > _BEYOND:
        raise bad  # version 1 (before 2026-11-28) too: its cursors did not say whether the entry was begun
    begun, phase = bool(phase & _BEGUN), phase & ~_BEGUN
    key: str | int
    if phase == _NAMED and not listed and 0 < len(tail) <= MAX_STR_BYTES:
        try:
            key = tail.decode("utf-8")
        except UnicodeDecodeError:
            raise bad from None
    elif phase == (_LISTED if listed else _UNNAMED) and (len(tail) == 8 or (phase == _UNNAMED and len(tail) == 16)):
        key = int.from_bytes(tail, "big")
    else:
        raise bad
    return _Target(phase, key, raw_id.hex(), None, done, count, begun)


def _resume(t: _Target, pos: _Target | None) -> _Target:
    """``t``, carrying the progress of the cursor's target when it is the same entry at the same place."""
    if pos is not None and (pos.phase, pos.key, pos.entry_id) == (t.phase, t.key, t.entry_id):
        return t._replace(done=pos.done, count=pos.count, begun=pos.begun)
    return t


def _session_targets(
    reader: Reader, session: str, glob: str | None, ids: list[str] | None, pos: _Target | None
) -> list[_Target]:
    """The entries of ``session`` to search, in order, from the cursor's position ``pos``
    on: at most MAX_SESSION_ENTRIES + 1 (one more says the call cannot finish).

    Named entries by name (``glob`` keeps those whose names match it), then, without a
    glob, unnamed ones in creation order, read from the session's name index and its
    index keys alone in one snapshot (no entry record: an expired one is skipped when
    the search opens it, so a call that stops early decodes only the records it
    searched).  With ``ids``, those entries in that order, each checked to be a live
    entry of the session on the first page (NotFound), skipped when gone on later ones.
    """
    out: list[_Target] = []
    limit = MAX_SESSION_ENTRIES + 1
    with reader.read() as txn:
        now = reader.now()

        def live(raw_id: bytes) -> Any:
            return next(reader.live(txn, (raw_id,), now), None)

        if ids is not None:
            start = 0 if pos is None else int(pos.key)
            for index in range(start, len(ids)):
                entry = live(bytes.fromhex(ids[index]))
                if entry is None or entry.session != session:
                    if pos is None:
                        where = "is not in" if entry is not None else "does not exist in, was deleted from, or has expired in"
                        raise NotFound(f"entry {ids[index]} {where} session {session[:200]!r}; list the session's "
                                       "entries to find their ids")
                    continue
                out.append(_resume(_Target(_LISTED, index, entry.id, entry.name), pos))
            return out[:limit]
        here = name_key(session, "")[:-4]  # the prefix of the session's names keys
        rows = [(name_of_key(key, len(here)), raw_id) for key, raw_id in txn.scan("names", here, prefix_end(here))]
        if pos is None or pos.phase == _NAMED:
            chosen = rows
            if glob is not None:
                chosen = [row for row in chosen if fnmatch.fnmatchcase(row[0], glob)]
            if pos is not None:
                chosen = [row for row in chosen if row[0] >= str(pos.key)]
            for name, raw_id in sorted(chosen):
                out.append(_resume(_Target(_NAMED, name, raw_id.hex(), name), pos))
                if len(out) >= limit:
                    return out
        if glob is None:
            named = {raw_id for _, raw_id in rows}  # listed by name: not again among the unnamed
            prefix = scope_key(session)
            start_key = prefix
            if pos is not None and pos.phase == _UNNAMED:  # the sequence and id (or, in older stores, the sequence)
                start_key += int(pos.key).to_bytes(16 if int(pos.key) >> 64 else 8, "big")
            for key, value in txn.scan("by_scope", start_key, prefix_end(prefix)):
                raw_id = value[:8]  # then the entry's turn (index.scope_value)
                if len(key) - len(prefix) not in (8, 16) or raw_id in named:
                    continue
                out.append(_resume(_Target(_UNNAMED, int.from_bytes(key[len(prefix) :], "big"), raw_id.hex(), None), pos))
                if len(out) >= limit:
                    break
    return out



@contextmanager
def _view_of(reader: Reader, entry_id: str) -> Iterator[_View]:
    """A view of ``entry_id`` in a read transaction of its own; damage found in it names the entry."""
    with _named_damage(entry_id), reader.read() as txn:
        yield _View(reader, txn, entry_id)


@contextmanager
def _named_damage(entry_id: str) -> Iterator[None]:
    """Raise the damage found inside as found in entry ``entry_id`` (a chunk's damage names no entry)."""
    try:
        yield
    except CorruptData as exc:
        if entry_id in exc.message:
            raise
        raise CorruptData(f"entry {entry_id}: {exc.message}", hint=exc.hint) from None


@dataclass
class _StreamCall:
    """One call of an :class:`EntryStream` (a read or a line): the transaction it opened
    on ``stack`` and the chunk list read in it, once it needed a chunk it did not hold;
    ``end``, the offset a read asks up to, and ``ahead``, the first chunk not yet asked
    for (a networked engine is asked for the chunks a read spans, up to 16 a request)."""

    stack: ExitStack
    end: int = 0
    txn: ReadTxn | None = None
    manifest: Manifest | None = None
    ahead: int = 0


class EntryStream(io.RawIOBase):
    """A read-only, seekable binary file over one entry, one chunk in memory at a time."""

    def __init__(self, reader: Reader, entry: Entry) -> None:
        super().__init__()
        self._reader = reader
        self._entry = entry
        self._pos = 0
        self._buf_start = -1  # where the chunk kept in _buf starts in the entry (-1: none yet)
        self._buf = b""
        self.name = entry.id

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidArgument(f"offset must be an integer, not {describe(offset)}")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._entry.size_bytes + offset
        else:
            raise InvalidArgument(f"whence must be 0, 1 or 2, not {describe(whence)}")
        if pos < 0:
            raise InvalidArgument("cannot seek before the start")
        self._pos = pos
        return pos

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the current position; all the rest when ``size`` is
        negative or None (as ``BytesIO`` and files take it; ``RawIOBase`` refuses None)."""
        return super().read(-1 if size is None else size)  # type: ignore[return-value]

    def readline(self, size: int | None = -1) -> bytes:
        """The bytes up to and including the next ``\n`` (at most ``size``), as
        ``BytesIO.readline``: found a chunk at a time (``RawIOBase``'s reads one byte per
        call), so iterating over the stream's lines costs what reading it does."""
        if size is None:
            size = -1
        if isinstance(size, bool) or not isinstance(size, int):
            raise InvalidArgument(f"size must be an integer or None, not {describe(size)}")
        if self.closed:
            raise ValueError("I/O operation on closed stream")
        total = self._entry.size_bytes
        parts: list[bytes] = []
        n = 0
        if size == 0 or self._pos >= total:
            return b""
        with ExitStack() as stack:
            call = _StreamCall(stack)
            while self._pos < total and (size < 0 or n < size):
                off, buf = self._chunk_at(call)
                end = len(buf) if size < 0 else min(len(buf), off + size - n)
                nl = buf.find(b"\n", off, end)
                piece = buf[off : end if nl < 0 else nl + 1]
                if not piece:
                    break
                parts.append(piece)
                n += len(piece)
                self._pos += len(piece)
                if nl >= 0:
                    break
        return b"".join(parts)

    @contextmanager
    def _read(self) -> Iterator[ReadTxn]:
        """A read transaction whose damage names this entry (a chunk's damage names none)."""
        with _named_damage(self._entry.id), self._reader.read() as txn:
            yield txn

    def _manifest(self, txn: ReadTxn) -> Manifest:
        try:
            return self._reader.open_entry(txn, self._entry.id)[2]
        except NotFound:
            raise NotFound(f"entry {self._entry.id} was deleted or expired while being read") from None

    def _chunk_at(self, call: _StreamCall) -> tuple[int, bytes]:
        """(the position's offset in its chunk, the chunk).  The chunk last read is kept:
        a position inside it is served without a transaction (reading a stream line by
        line on a networked engine costs a request per chunk, not per line); another
        chunk is read in one transaction opened on the ``call``'s stack for the whole call, the
        entry's chunk list read again in it: an entry deleted or expired meanwhile is
        NotFound when the stream next needs a chunk (what it already holds it serves, as
        a file unlinked while open is read on)."""
        off = self._pos - self._buf_start
        if self._buf_start >= 0 and 0 <= off < len(self._buf):
            return off, self._buf
        if call.txn is None or call.manifest is None:
            call.txn = call.stack.enter_context(self._read())
            call.manifest = self._manifest(call.txn)
        m = call.manifest
        i = m.chunk_of(m.bytes_at, self._pos)
        if i >= call.ahead and call.txn.networked and call.end > m.bytes_at[i + 1]:
            last = m.chunk_of(m.bytes_at, min(call.end, m.bytes_at[-1]) - 1)
            call.ahead = min(last + 1, i + _AHEAD)
            call.txn.prefetch("chunks", m.keys[i:call.ahead])
        self._buf = self._reader.codec.chunk(call.txn, m.keys[i], m.bytes_at[i + 1] - m.bytes_at[i])
        self._buf_start = m.bytes_at[i]
        return self._pos - self._buf_start, self._buf

    def readall(self) -> bytes:
        """The rest of the entry, read in one call (``RawIOBase``'s reads 8 KiB a call, each
        call a transaction of its own: on a networked engine, a request per chunk or two)."""
        if self.closed:
            raise ValueError("I/O operation on closed stream")
        out = bytearray(max(0, self._entry.size_bytes - self._pos))
        n = self.readinto(out)
        del out[n:]
        return bytes(out)

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from the current position, across as many chunks as it takes
        (like ``BytesIO``); return the number of bytes read, 0 at the end."""
        if self.closed:
            raise ValueError("I/O operation on closed stream")
        size = self._entry.size_bytes
        if self._pos >= size:
            return 0
        out = memoryview(buffer).cast("B")
        want = len(out)
        n = 0
        with ExitStack() as stack:
            call = _StreamCall(stack, end=self._pos + want)
            while n < want and self._pos < size:
                off, buf = self._chunk_at(call)
                piece = buf[off : off + want - n]
                if not piece:
                    break
                out[n : n + len(piece)] = piece
                n += len(piece)
                self._pos += len(piece)
        return n
