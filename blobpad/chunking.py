"""Content-defined chunking on line boundaries, and the manifest that lists chunks.

A chunk ends after a line whose hash, compared with the line's length, falls under a
threshold: the decision depends only on that line's bytes, so an edit only moves the
cuts next to it and re-offloading a log that grew, or had a line inserted, produces
the same chunks as before everywhere else.  The probability of cutting after a line
is proportional to its length, so chunks average ``min_size + avg_extra`` bytes
whatever the line lengths are.  No cut falls closer than ``min_size`` to the last
one (those lines are not even hashed, which is most of the speed), and a chunk never
grows past ``max_size``: content without newlines (minified JSON, binary) is cut at
``max_size``, moved back to a UTF-8 character boundary so that every chunk of valid
text decodes on its own.

The end of an entry is cut from the end: a last chunk longer than half of
``min_size`` is split after the first line that ends in its last ``min_size / 4``
bytes (16 KB by default), so that reading the tail of an entry, what agents read
most, decompresses at most that much whatever the entry's size.  That cut depends
only on the bytes near the end, so a re-put of the same content makes the same
chunks, and an insertion before the last 16 KB keeps the final one.

The manifest of an entry packs, for its n chunks, their keys and the cumulative raw
byte, character and newline counts before each chunk (n + 1 values each), so that
a read finds the chunk holding byte, character or line N with one binary search and
decompresses nothing else.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import compress, count, repeat
from operator import lt, mul

import xxhash

from .errors import InvalidArgument, check_int

__all__ = ["ChunkParams", "cut_chunks", "cut_views", "cut_spans", "chunk_stats", "span_stats", "Manifest", "KEY_SIZE"]

#: chunk keys: 16 bytes of seeded xxh3-128, then one byte telling apart the
#: (astronomically rare, or forced by an attacker) different chunks with equal hashes.
KEY_SIZE = 17
#: The largest chunk size accepted (a chunk is decompressed whole on every read of it).
MAX_CHUNK = 64 << 20

_WINDOW = 16 << 10  # bytes of lines examined at a time while looking for a cut
_line_hash = xxhash.xxh32_intdigest


@dataclass(frozen=True)
class ChunkParams:
    """Chunk size parameters; persisted with the store so cuts never change under it."""

    min_size: int = 64 << 10
    avg_extra: int = 32 << 10
    max_size: int = 256 << 10

    def __post_init__(self) -> None:
        for label in ("min_size", "avg_extra", "max_size"):
            check_int(label, getattr(self, label), minimum=1, maximum=MAX_CHUNK)
        if not self.min_size < self.max_size:
            raise InvalidArgument("chunk sizes need 1 <= min_size < max_size and avg_extra >= 1")


def _find_cut(data: bytes, pos: int, end: int, params: ChunkParams, final: bool) -> int | None:
    """Return where the chunk starting at ``pos`` ends, or None if more data is needed.

    ``data[pos:end]`` is what is buffered; ``final`` says nothing follows it.  A cut is
    decided only once ``max_size`` bytes past ``pos`` are known (or the data ended),
    so the result never depends on how the input was split into blocks.
    """
    avail = end - pos
    if avail <= params.min_size:
        return end if final else None
    if avail <= params.max_size + 3 and not final:
        return None  # the decision may look three bytes past the window
    limit = min(pos + params.max_size, end)
    nl = data.find(b"\n", pos + params.min_size - 1, limit)
    if nl >= 0:
        threshold = (1 << 32) // params.avg_extra
        start = nl + 1
        while start < limit:
            stop = min(start + _WINDOW, limit)
            lines = data[start:stop].split(b"\n")
            lines.pop()  # the piece after the last newline is not a whole line
            if not lines:
                break
            hit = next(compress(count(), map(lt, map(_line_hash, lines), map(mul, map(len, lines), repeat(threshold)))), None)
            if hit is not None:
                return start + sum(map(len, lines[: hit + 1])) + hit + 1
            start = data.rfind(b"\n", start, stop) + 1  # after the last whole line
    if limit == end and final:
        return end
    # No line qualified: end at the last newline, else at a character boundary.
    last = data.rfind(b"\n", pos + params.min_size - 1, limit)
    if last >= 0:
        return last + 1
    return _char_boundary(data, pos, limit, end)


def _char_boundary(data: bytes, pos: int, limit: int, end: int) -> int:
    """A forced cut near ``limit`` that does not split a UTF-8 character.

    Moves back (or, when the chunk is too small for that, forward) by at most three
    bytes to a byte that is not a continuation byte; binary data is cut at ``limit``.
    """
    if limit >= end or not 0x80 <= data[limit] < 0xC0:
        return limit
    back = limit
    while back - 1 > pos and limit - back < 3 and 0x80 <= data[back] < 0xC0:
        back -= 1
    if not 0x80 <= data[back] < 0xC0:
        return back
    fwd = limit
    while fwd < end and fwd - limit < 3 and 0x80 <= data[fwd] < 0xC0:
        fwd += 1
    if fwd == end or not 0x80 <= data[fwd] < 0xC0:
        return fwd
    return limit  # not UTF-8 here: any place will do


def cut_chunks(blocks: Iterable[bytes], params: ChunkParams) -> Iterator[bytes]:
    """Cut a stream of byte blocks into content-defined chunks.

    Holds at most one block plus ``max_size`` bytes in memory.  Concatenating the
    chunks gives back the input exactly; an empty input gives no chunk.
    """
    for view in cut_views(blocks, params):
        yield view.tobytes()


def cut_views(blocks: Iterable[bytes], params: ChunkParams) -> Iterator[memoryview]:
    """:func:`cut_chunks` without copying: read-only views of the chunks (see :func:`cut_spans`)."""
    last = b""
    view = memoryview(last)
    for buf, start, end in cut_spans(blocks, params):
        if buf is not last:
            last, view = buf, memoryview(buf)
        yield view[start:end]


def cut_spans(blocks: Iterable[bytes], params: ChunkParams) -> Iterator[tuple[bytes, int, int]]:
    """Where the chunks of :func:`cut_chunks` lie, without copying them.

    Yields ``(buffer, start, end)``: the chunk is ``buffer[start:end]``, and
    ``buffer`` is one of the blocks (the same object, for as many chunks as lie in
    it) or, for the few chunks that straddle two blocks, a joined copy of at most
    ``2 * (max_size + 4)`` bytes.  Blocks that are not ``bytes`` are copied to bytes
    first.  The cuts are exactly those of :func:`cut_chunks`.
    """
    # A cut is decided by at most max_size + 4 bytes from the chunk's start (see
    # _find_cut), so what is left undecided at the end of a block is shorter than
    # ``need``, and joining it with the next block's first ``need`` bytes decides
    # every chunk that starts in it.
    need = params.max_size + 4
    rest = b""
    for block in blocks:
        if not block:
            continue
        if type(block) is not bytes:
            block = bytes(block)
        start = 0
        if rest:
            if len(block) < need:
                block = rest + block
            else:
                joined = rest + block[:need]
                pos = 0
                while pos < len(rest):
                    cut = _find_cut(joined, pos, len(joined), params, False)
                    assert cut is not None  # at least ``need`` bytes follow pos
                    yield joined, pos, cut
                    pos = cut
                start = pos - len(rest)
            rest = b""
        end = len(block)
        while True:
            cut = _find_cut(block, start, end, params, False)
            if cut is None:
                break
            yield block, start, cut
            start = cut
        rest = block[start:]
    pos = 0
    split = False
    while pos < len(rest):
        cut = _find_cut(rest, pos, len(rest), params, True)
        assert cut is not None  # final: always decided
        if cut == len(rest) and not split:  # the last chunk: split once, from the end
            cut = _tail_cut(rest, pos, cut, params)
            split = True
        yield rest, pos, cut
        pos = cut


def _tail_cut(data: bytes, pos: int, end: int, params: ChunkParams) -> int:
    """Where the last chunk ``data[pos:end]`` of an entry is split (``end``: not split).

    A chunk longer than twice ``tail = min_size // 4`` is cut after the first newline
    in its last ``tail`` bytes; failing that, after its last newline before them; a
    chunk that is one line ending in a newline is not cut, and one without any newline
    (minified JSON, binary) is cut at the character boundary ``tail`` bytes from the end.
    """
    tail = params.min_size // 4
    if not tail or end - pos <= 2 * tail:
        return end
    target = end - tail
    nl = data.find(b"\n", target - 1, end - 1)
    if nl < 0:
        nl = data.rfind(b"\n", pos, target - 1)
    if nl >= 0:
        return nl + 1
    if data[end - 1] == 10:  # one line: cut only at line ends
        return end
    return _char_boundary(data, pos, target, end)


def chunk_stats(raw: bytes) -> tuple[int | None, int]:
    """Return (characters, newlines) of a chunk; characters is None if not UTF-8."""
    newlines = raw.count(b"\n")
    if raw.isascii():
        return len(raw), newlines
    try:
        return len(raw.decode("utf-8")), newlines
    except UnicodeDecodeError:
        return None, newlines


def span_stats(buf: bytes, start: int, end: int, ascii: bool) -> tuple[int | None, int]:
    """:func:`chunk_stats` of ``buf[start:end]`` without copying it.

    ``ascii`` tells that the whole of ``buf`` is ASCII (``buf.isascii()``, checked
    once per buffer by the caller), which spares decoding the chunk.
    """
    newlines = buf.count(b"\n", start, end)
    if ascii:
        return end - start, newlines
    try:
        return len(str(memoryview(buf)[start:end], "utf-8")), newlines
    except UnicodeDecodeError:
        return None, newlines


def _u64(values: Iterable[int]) -> array:
    arr = array("Q", values)
    if sys.byteorder == "big":  # pragma: no cover
        arr.byteswap()
    return arr


class Manifest:
    """The chunk list of one entry, with cumulative byte, char and newline offsets.

    ``bytes_at[i]``, ``chars_at[i]`` and ``lines_at[i]`` count what precedes chunk i;
    the last value of each is the entry's total.  For binary entries ``chars_at``
    equals ``bytes_at``.
    """

    __slots__ = ("keys", "bytes_at", "chars_at", "lines_at")

    def __init__(self, keys: list[bytes], bytes_at: array, chars_at: array, lines_at: array) -> None:
        self.keys = keys
        self.bytes_at = bytes_at
        self.chars_at = chars_at
        self.lines_at = lines_at

    @classmethod
    def build(cls, keys: list[bytes], sizes: list[int], chars: list[int], newlines: list[int]) -> Manifest:
        def cumulative(values: list[int]) -> array:
            out = [0]
            total = 0
            for v in values:
                total += v
                out.append(total)
            return _u64(out)

        return cls(keys, cumulative(sizes), cumulative(chars), cumulative(newlines))

    def __len__(self) -> int:
        return len(self.keys)

    def pack(self) -> bytes:
        n = len(self.keys)
        head = n.to_bytes(8, "little")
        return head + b"".join(self.keys) + self.bytes_at.tobytes() + self.chars_at.tobytes() + self.lines_at.tobytes()

    @classmethod
    def unpack(cls, blob: bytes) -> Manifest:
        n = int.from_bytes(blob[:8], "little")
        keys_end = 8 + n * KEY_SIZE
        width = (n + 1) * 8
        if len(blob) != keys_end + 3 * width:
            raise ValueError("manifest has the wrong length")
        keys = [blob[i : i + KEY_SIZE] for i in range(8, keys_end, KEY_SIZE)]
        arrays = []
        for k in range(3):
            arr = array("Q")
            arr.frombytes(blob[keys_end + k * width : keys_end + (k + 1) * width])
            if sys.byteorder == "big":  # pragma: no cover
                arr.byteswap()
            arrays.append(arr)
        return cls(keys, arrays[0], arrays[1], arrays[2])

    def chunk_of(self, offsets: array, position: int) -> int:
        """Index of the chunk holding unit ``position`` (0-based) of ``offsets``."""
        return min(bisect_right(offsets, position) - 1, len(self.keys) - 1)
