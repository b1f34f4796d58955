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
"""

from __future__ import annotations

import io
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import re2

from .errors import CorruptData, InvalidArgument, NotFound

if TYPE_CHECKING:
    from .backend import ReadTxn
    from .chunking import Manifest
    from .index import Entry
    from .store import Store

__all__ = ["GrepMatch", "GrepResult", "ReadsMixin", "EntryStream", "MAX_PATTERN", "compile_pattern"]

#: longest pattern accepted, in characters
MAX_PATTERN = 4096
#: longest line kept whole in grep results; longer ones become a window around the match
LINE_WINDOW = 2000
#: the largest stretch of a single line searched at once (longer lines are searched in pieces)
_MAX_SEGMENT = 64 << 20


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
            "line": self.line, "text": self.text, "spans": [list(s) for s in self.spans],
            "before": [list(b) for b in self.before], "after": [list(a) for a in self.after],
            "offset": self.offset, "line_chars": self.line_chars,
        }


@dataclass
class GrepResult:
    """What ``Store.grep`` found: ``matches`` in line order, ``truncated`` when more
    matches exist past ``max_matches``."""

    matches: list[GrepMatch]
    truncated: bool

    def __len__(self) -> int:
        return len(self.matches)

    def __iter__(self) -> Iterator[GrepMatch]:
        return iter(self.matches)

    def to_dict(self) -> dict[str, Any]:
        return {"matches": [m.to_dict() for m in self.matches], "truncated": self.truncated}


def _options(ignore_case: bool, literal: bool) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.never_nl = True  # like rg: a match never spans lines
    options.case_sensitive = not ignore_case
    options.literal = literal
    options.max_mem = 64 << 20
    options.never_capture = True  # only whole-match spans are used: lets RE2 stay in its DFA
    return options


def _encode_pattern(pattern: object) -> bytes:
    if not isinstance(pattern, str):
        raise InvalidArgument(f"pattern must be a string, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise InvalidArgument(f"pattern is {len(pattern)} characters long; the limit is {MAX_PATTERN}")
    try:
        return pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("pattern contains lone surrogates; pass valid Unicode") from None


def compile_pattern(pattern: object, *, ignore_case: bool = False, fixed: bool = False) -> Any:
    """Compile an untrusted pattern with RE2; raise InvalidArgument with RE2's reason."""
    raw = _encode_pattern(pattern)
    try:
        return re2.compile(raw if fixed else b"(?m)" + raw, _options(ignore_case, bool(fixed)))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidArgument(f"invalid pattern: {str(reason)[:300]}; patterns use RE2 syntax "
                              "(no backreferences or look-around); pass fixed=True for a literal") from None


def _line_matcher(pattern: str, *, ignore_case: bool, fixed: bool) -> Callable[[bytes, int, int], tuple[int, int]]:
    """A function finding, from a position, the first matching line's (match start, line end).

    The pattern is extended to run to the end of the line, so RE2 itself skips the
    rest of a matching line and one call finds one matching line.  It is compiled
    only after the bare pattern compiled, so the wrapping group cannot be escaped.
    """
    compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
    raw = _encode_pattern(pattern)
    body = re2.escape(raw) if fixed else raw
    regex = re2.compile(b"(?m)(?:" + body + b")[^\n]*", _options(ignore_case, False))
    match = regex._regexp.Match  # the binding under re2's pure-Python wrapper: no Match objects
    unanchored = re2._Anchor.UNANCHORED

    def find(text: bytes, pos: int, end: int) -> tuple[int, int]:
        return match(unanchored, text, pos, end)[0]

    return find


def _check_int(label: str, value: object, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{label} must be an integer, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{label} must be at least {minimum}, not {value}")
    if abs(value) > 1 << 62:
        raise InvalidArgument(f"{label} is out of range")
    return value


class _View:
    """One entry seen through one read transaction, with the chunks this read needs."""

    def __init__(self, store: Store, txn: ReadTxn, entry_id: str) -> None:
        self.store = store
        self.txn = txn
        raw_id, self.entry = store._load(txn, entry_id)
        self.m: Manifest = store._manifest(txn, raw_id)
        self._raw: dict[int, bytes] = {}
        self._text: dict[int, str] = {}

    @property
    def text(self) -> bool:
        return self.entry.kind == "text"

    def raw(self, i: int) -> bytes:
        r = self._raw.get(i)
        if r is None:
            m = self.m
            r = self.store._chunk(self.txn, m.keys[i], m.bytes_at[i + 1] - m.bytes_at[i])
            self._raw[i] = r
        return r

    def frame(self, i: int) -> bytes:
        """The compressed chunk i, read in this view's transaction."""
        frame = self.txn.get("chunks", self.m.keys[i])
        if frame is None:
            raise CorruptData(f"chunk {self.m.keys[i].hex()} is missing; run verify() to find the damaged entries")
        return frame

    def cached(self, i: int) -> bytes | None:
        """Chunk i if this view or the store's cache already holds it."""
        r = self._raw.get(i)
        if r is None:
            r = self.store._cached(self.txn, self.m.keys[i])
        return r

    def decoded(self, i: int) -> str:
        t = self._text.get(i)
        if t is None:
            r = self.raw(i)
            t = r.decode("ascii") if r.isascii() else r.decode("utf-8")
            self._text[i] = t
        return t

    def bytes_between(self, start: int, end: int) -> bytes:
        m = self.m
        if start >= end or not len(m):
            return b""
        i = m.chunk_of(m.bytes_at, start)
        parts = []
        while i < len(m) and m.bytes_at[i] < end:
            base = m.bytes_at[i]
            parts.append(self.raw(i)[max(0, start - base) : end - base])
            i += 1
        return b"".join(parts)

    def chars_between(self, start: int, end: int) -> str:
        m = self.m
        if start >= end or not len(m):
            return ""
        i = m.chunk_of(m.chars_at, start)
        parts = []
        while i < len(m) and m.chars_at[i] < end:
            base = m.chars_at[i]
            parts.append(self.decoded(i)[max(0, start - base) : end - base])
            i += 1
        return "".join(parts)

    def newline_offset(self, c: int) -> int:
        """Absolute byte offset of the c-th newline (1-based); c must exist."""
        m = self.m
        i = bisect_left(m.lines_at, c) - 1
        raw = self.raw(i)
        j = c - m.lines_at[i]  # j-th newline inside chunk i (1-based)
        pos = -1
        if j <= 64:
            for _ in range(j):
                pos = raw.find(b"\n", pos + 1)
        else:
            pos = len(raw) - len(raw.split(b"\n", j)[-1]) - 1
        return m.bytes_at[i] + pos

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


class ReadsMixin:
    """The read methods of :class:`blobpad.Store`."""

    def _view(self: Any, entry_id: str) -> Any:
        return _ViewContext(self, entry_id)

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
        entry = self.stat(entry_id)  # type: ignore[attr-defined]
        return EntryStream(self, entry)  # type: ignore[arg-type]

    def head(self, entry_id: str, n: int = 2000) -> str | bytes:
        """The first ``n`` characters (text) or bytes (binary)."""
        n = _check_int("n", n, minimum=0)
        return self.range(entry_id, 0, n)

    def tail(self, entry_id: str, n: int = 2000) -> str | bytes:
        """The last ``n`` characters (text) or bytes (binary)."""
        n = _check_int("n", n, minimum=0)
        with self._view(entry_id) as v:
            length = v.entry.length
            return self._slice(v, max(0, length - n), length)

    def range(self, entry_id: str, start: int, end: int | None = None) -> str | bytes:
        """Characters (text) or bytes (binary) ``start`` to ``end``, exactly as
        ``content[start:end]`` slices: negative values count from the end, values
        past the end clamp."""
        start = _check_int("start", start)
        if end is not None:
            end = _check_int("end", end)
        with self._view(entry_id) as v:
            s, e, _ = slice(start, end).indices(v.entry.length)
            return self._slice(v, s, max(s, e))

    @staticmethod
    def _slice(v: _View, start: int, end: int) -> str | bytes:
        return v.chars_between(start, end) if v.text else v.bytes_between(start, end)

    def byte_range(self, entry_id: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``start`` to ``end`` of the content (text or binary), as bytes slicing does."""
        start = _check_int("start", start)
        if end is not None:
            end = _check_int("end", end)
        with self._view(entry_id) as v:
            s, e, _ = slice(start, end).indices(v.entry.size_bytes)
            return v.bytes_between(s, max(s, e))

    def lines(self, entry_id: str, first: int = 1, last: int | None = None) -> list[str]:
        """Lines ``first`` to ``last`` (1-based, inclusive), without their ``\\n``.

        ``last`` defaults to the last line; values past the end clamp.  Binary
        content is decoded with U+FFFD for invalid bytes.
        """
        first = _check_int("first", first, minimum=1)
        if last is not None:
            last = _check_int("last", last, minimum=0)
            if last < first:
                raise InvalidArgument(f"last ({last}) is before first ({first}); lines are 1-based and inclusive")
        with self._view(entry_id) as v:
            total = v.entry.lines
            stop = total if last is None else min(last, total)
            return v.lines(first, stop)

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
    ) -> GrepResult:
        """Find the lines matching ``pattern`` (RE2 syntax; a literal with ``fixed``).

        Returns at most ``max_matches`` matching lines with ``before``/``after``
        context lines each; ``truncated`` is true when more exist.  Stops reading as
        soon as it has them.  Lines longer than ``line_window`` characters come back
        as a window of that size around their first match.
        """
        regex = compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
        before = _check_int("before", before, minimum=0)
        after = _check_int("after", after, minimum=0)
        max_matches = _check_int("max_matches", max_matches, minimum=0)
        line_window = _check_int("line_window", line_window, minimum=1)
        if before > 1000 or after > 1000:
            raise InvalidArgument("before and after are limited to 1000 context lines")
        matches: list[GrepMatch] = []
        truncated = False
        with self._view(entry_id) as v:
            for number, line, spans in _matching_lines(v, regex):
                if len(matches) >= max_matches:
                    truncated = True
                    break
                matches.append(_make_match(v, number, line, spans, line_window))
            total = v.entry.lines
            for mt in matches:
                if before:
                    lo = max(1, mt.line - before)
                    mt.before = [(lo + k, _clip(t, line_window)) for k, t in enumerate(v.lines(lo, mt.line - 1))]
                if after:
                    hi = min(total, mt.line + after)
                    mt.after = [(mt.line + 1 + k, _clip(t, line_window)) for k, t in enumerate(v.lines(mt.line + 1, hi))]
        return GrepResult(matches, truncated)

    def count(self, entry_id: str, pattern: str, *, ignore_case: bool = False, fixed: bool = False) -> int:
        """Count the lines matching ``pattern`` (like ``grep -c`` / ``rg -c``)."""
        find = _line_matcher(pattern, ignore_case=ignore_case, fixed=fixed)
        with self._view(entry_id) as v:
            return _parallel_count(v, find)


def _count_lines(find: Callable[[bytes, int, int], tuple[int, int]], seg: bytes, pos: int = 0, size: int = -1) -> int:
    """Count the matching lines of ``seg[pos:size]``, which starts at a line start."""
    n = 0
    if size < 0:
        size = len(seg)
    while pos < size:  # the text ends with its last line's newline, or is the unterminated last line
        start, end = find(seg, pos, size)
        if start < 0 or (start == size and seg[size - 1] == 10):
            break  # none, or an empty match after the last newline: no line is there
        n += 1
        pos = end + 1  # the line's newline, consumed by the extended pattern's [^\n]*
    return n


def _chunks_ahead(v: _View, depth: int) -> Iterator[bytes]:
    """Yield the entry's raw chunks in order, decompressing up to ``depth`` ahead on
    the worker pool (zstd releases the GIL) while the caller searches the current one."""
    store = v.store
    m = v.m
    n = len(m)
    if depth <= 0 or n <= 1:
        for i in range(n):
            yield v.raw(i)
            v._raw.pop(i, None)
        return
    pool = store._executor()

    def submit(i: int) -> Future[bytes] | bytes:
        hit = v.cached(i)
        if hit is not None:
            return hit
        return pool.submit(store._decompress_cached, v.frame(i), m.keys[i], m.bytes_at[i + 1] - m.bytes_at[i])

    pending: deque[Future[bytes] | bytes] = deque(submit(i) for i in range(min(depth, n)))
    nxt = len(pending)
    try:
        while pending:
            item = pending.popleft()
            raw = item if isinstance(item, bytes) else item.result()
            if nxt < n:
                pending.append(submit(nxt))
                nxt += 1
            yield raw
    finally:
        for item in pending:
            if not isinstance(item, bytes):
                item.cancel()


def _parallel_count(v: _View, find: Callable[[bytes, int, int], tuple[int, int]]) -> int:
    """Count matching lines, one RE2 call per matching line, chunks decompressed ahead.

    Lines that straddle chunk boundaries are stitched together before counting.
    """
    total = 0
    carry = b""
    for raw in _chunks_ahead(v, 2 * v.store._workers):
        first = raw.find(b"\n")
        if first < 0:
            carry += raw
            continue
        last = raw.rfind(b"\n")
        if carry:
            line = carry + raw[: first + 1]
            total += _count_lines(find, line)
            total += _count_lines(find, raw, first + 1, last + 1)
        else:
            total += _count_lines(find, raw, 0, last + 1)
        carry = raw[last + 1 :]
    if carry:
        total += _count_lines(find, carry)
    return total


def _clip(text: str, window: int) -> str:
    return text if len(text) <= window else text[:window]


def _segments(v: _View, depth: int = 2) -> Iterator[tuple[bytes, int, int]]:
    """Yield (buffer, end, number of the first line): ``buffer[:end]`` is whole lines.

    Chunks end on newlines except inside very long lines; those are carried over to
    the next chunk (up to ``_MAX_SEGMENT`` bytes, past which a line is searched in
    pieces).  Chunks are decompressed ``depth`` ahead.
    """
    carry = b""
    line_no = 1
    for raw in _chunks_ahead(v, depth):
        cut = raw.rfind(b"\n") + 1
        if cut == 0 and len(carry) + len(raw) < _MAX_SEGMENT:
            carry += raw
            continue
        if cut == 0:
            cut = len(raw)
        if carry:
            seg = carry + raw[:cut]
            yield seg, len(seg), line_no
            line_no += seg.count(b"\n")
        else:
            yield raw, cut, line_no
            line_no += raw.count(b"\n", 0, cut)
        carry = raw[cut:]
    if carry:
        yield carry, len(carry), line_no


def _matching_lines(v: _View, regex: Any) -> Iterator[tuple[int, bytes, list[tuple[int, int]]]]:
    """Yield (line number, line bytes, byte spans) of each matching line, in order."""
    for seg, size, first_line in _segments(v):
        pos = 0
        line_no = first_line
        counted = 0  # newlines of seg[:counted] are included in line_no
        while pos < size:
            m = regex.search(seg, pos, size)
            if m is None:
                break
            s = m.start()
            if s == size and seg[size - 1] == 10:
                break  # an empty match after the last newline: no line is there
            start = seg.rfind(b"\n", 0, s) + 1
            end = seg.find(b"\n", s, size)
            if end < 0:
                end = size
            line_no += seg.count(b"\n", counted, start)
            counted = start
            spans = [(s - start, m.end() - start)]
            p = m.end() if m.end() > s else m.end() + 1
            while p <= end and len(spans) < 1000:
                m2 = regex.search(seg, p, end)
                if m2 is None:
                    break
                spans.append((m2.start() - start, m2.end() - start))
                p = m2.end() if m2.end() > m2.start() else m2.end() + 1
            yield line_no, seg[start:end], spans
            if end >= size:
                break
            pos = end + 1
            if pos == size:
                break


def _make_match(v: _View, number: int, line: bytes, spans: list[tuple[int, int]], window: int) -> GrepMatch:
    if line.isascii():
        text_len = len(line)
        if text_len <= window:
            return GrepMatch(number, line.decode("ascii"), spans, line_chars=text_len)
        lo = max(0, spans[0][0] - window // 4)
        hi = min(text_len, lo + window)
        lo = max(0, hi - window)
        kept = [(s - lo, min(e, hi) - lo) for s, e in spans if s >= lo and s < hi]
        return GrepMatch(number, line[lo:hi].decode("ascii"), kept, offset=lo, line_chars=text_len)
    decode = v.decode
    text = decode(line)

    def char_at(b: int) -> int:
        return len(decode(line[:b]))

    if len(text) <= window:
        return GrepMatch(number, text, [(char_at(s), char_at(e)) for s, e in spans], line_chars=len(text))
    first = char_at(spans[0][0])
    lo = max(0, first - window // 4)
    hi = min(len(text), lo + window)
    lo = max(0, hi - window)
    kept = []
    for s, e in spans:
        cs = char_at(s) if s != spans[0][0] else first
        if lo <= cs < hi:
            kept.append((cs - lo, min(char_at(e), hi) - lo))
        if cs >= hi:
            break
    return GrepMatch(number, text[lo:hi], kept, offset=lo, line_chars=len(text))


class _ViewContext:
    def __init__(self, store: Store, entry_id: str) -> None:
        self.store = store
        self.entry_id = entry_id

    def __enter__(self) -> _View:
        self._cm = self.store._backend.read()
        txn = self._cm.__enter__()
        try:
            return _View(self.store, txn, self.entry_id)
        except BaseException:
            self._cm.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)


class EntryStream(io.RawIOBase):
    """A read-only, seekable binary file over one entry, one chunk in memory at a time."""

    def __init__(self, store: Store, entry: Entry) -> None:
        super().__init__()
        self._store = store
        self._entry = entry
        self._pos = 0
        self._buf_index = -1
        self._buf = b""
        self.name = entry.id

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._entry.size_bytes + offset
        else:
            raise InvalidArgument(f"whence must be 0, 1 or 2, not {whence!r}")
        if pos < 0:
            raise InvalidArgument("cannot seek before the start")
        self._pos = pos
        return pos

    def readinto(self, buffer: Any) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed stream")
        size = self._entry.size_bytes
        if self._pos >= size:
            return 0
        with self._store._backend.read() as txn:
            try:
                raw_id, _ = self._store._load(txn, self._entry.id)
            except NotFound:
                raise NotFound(f"entry {self._entry.id} was deleted or expired while being read") from None
            m = self._store._manifest(txn, raw_id)
            i = m.chunk_of(m.bytes_at, self._pos)
            if i != self._buf_index:
                self._buf = self._store._chunk(txn, m.keys[i], m.bytes_at[i + 1] - m.bytes_at[i])
                self._buf_index = i
            off = self._pos - m.bytes_at[i]
        piece = self._buf[off : off + len(buffer)]
        n = len(piece)
        buffer[:n] = piece
        self._pos += n
        return n
