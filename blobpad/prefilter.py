"""Per-chunk trigram filters: which chunks cannot hold a match of a grep pattern.

A filter is built once per chunk at put (:func:`build`) and tells a later grep or
count, before anything is decompressed, that the chunk holds no match of the
pattern, or that it may.  It never says "no" for a chunk that holds a match.

**The filter** is a one-hash Bloom filter of the chunk's byte trigrams after case
folding: bit 5 (0x20) of every byte is set, which maps ``A-Z`` to ``a-z`` and merges
a few pairs of other bytes (``@`` and a backquote, a newline and ``*``...), and is
cheaper than a translation table.  For each trigram
``g`` (its three bytes read as a little-endian integer) it sets bit
``(s * m) >> 16`` of ``m`` bits, where ``s = ((g * 0x9E3779B1) mod 2**32) >> 16`` is
a 16-bit hash.  ``m`` is :data:`BITS_PER_GRAM` bits per distinct trigram of the
chunk (64 bits at least, 2**16 at most, rounded up to whole bytes, and at most what
``max_bytes`` allows).  With fewer than :data:`DENSITY` bits per trigram (always at
the default density, more so under ``max_bytes``), only a sample of the trigrams is
kept, those with ``((s * 40503) mod 2**16) >> 8 < R``, at that density: a Bloom
filter of fewer keys at its best density (half of its bits set) excludes more than
one of all keys filled up, and a query takes the trigrams left out as present.  A
single trigram then passes a chunk that lacks it about two times in three, but a
literal of ``L`` bytes needs its ``L - 2`` trigrams at once, and an absent literal of
a dozen bytes passes a chunk by chance about one time in a hundred
(benchmarks/README.md, "Chunk prefilters", has the measures that chose this design).

The serialized form is ``[VERSION]``, a flags byte (bit 0: the chunk ends in a
newline), ``R - 1`` (255: every trigram), the number of bytes of bits as two bytes
little-endian, then the bits (bit ``j`` is bit ``j % 8`` of byte ``j // 8``); a
reader that meets another version, or a damaged filter, must read the chunk.

One folded filter serves case-sensitive and case-insensitive queries alike: a query
folds its literals the same way, and a string present in the chunk is present,
folded, in the folded chunk (the fold is a function of each byte).

**Queries** (:meth:`Query.compile`) turn a pattern's parsed form into an AND/OR
formula of literals that any match must contain, in the spirit of Russ Cox's
"Regular Expression Matching with a Trigram Index": concatenation is AND,
alternation OR, an optional or starred part requires nothing, ``x+`` requires what
``x`` requires, a small character class is the OR of its members, ``.``, ``\\w`` and
the like, anchors and ``\\b`` require nothing.  Short exact sets are carried along
(``colou?r`` requires ``color`` or ``colour``).  Anything not understood - a pattern
Python's parser reads differently from RE2 or cannot read, look-around,
back-references - gives :data:`MATCH_ALL`, which excludes nothing.  Under
case-insensitive matching, a character whose case variants include another byte
sequence (``k`` and the Kelvin sign, ``s`` and the long s, ``i`` and the dotted or
dotless i, and every non-ASCII character outside a few caseless scripts) requires
nothing: folding never makes a match look absent.

**Chunk boundaries.**  Matches lie within lines, and chunks end at line ends except
where a line is longer than the largest chunk.  ``build`` takes the first
:data:`SPILL` bytes after a chunk that does not end in a newline, so that the
trigrams that start in it and end in the next are in its filter; a line that runs over several chunks must then be
checked against all of their filters at once (:meth:`Query.may_match_run`): a match
``foo.*bar`` may have ``foo`` in one and ``bar`` in the next.  :meth:`Query.select`
does that for an entry's chunks: it tells which to read, from their filters alone
(each filter says whether its chunk ends in a newline).  With numpy, an entry of
:data:`VECTOR_MIN` chunks or more is checked by whole arrays (:class:`_Table`), a block
of groups at a time: the answers of the loop over chunks, at a small part of its cost.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import warnings
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any


@cache
def _numpy() -> Any:
    """numpy, imported when a filter is first built or checked (so that ``import blobpad``
    and every CLI command do not pay for it), or None where it is not installed."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy comes with the test and bench extras
        return None
    return numpy


__all__ = ["build", "build_numpy", "build_python", "trigram_bits", "Query", "MATCH_ALL", "VERSION", "SPILL", "GRAM",
           "BITS_PER_GRAM", "DENSITY", "MIN_BYTES", "MAX_BYTES", "SHARE", "RECORD_MAX", "FAST", "UNKNOWN",
           "pack", "unpack", "Filters", "VECTOR_MIN", "BLOCK"]

#: The first byte of every filter this module writes.
VERSION = 1
#: The n-gram size.
GRAM = 3
#: How many bytes of the next chunk :func:`build` uses (``GRAM - 1``).
SPILL = GRAM - 1
#: Bits of filter per distinct trigram of the chunk (rounded up to whole bytes).
BITS_PER_GRAM = 1.0
#: Under this many bits per trigram (``max_bytes`` binding), a sample of the trigrams is kept at
#: this density instead (1 / ln 2: half of the bits set, where a Bloom filter is at its best).
DENSITY = 1.44
#: Bounds of the filter's bits, in bytes (the serialized filter has 5 bytes more).
MIN_BYTES = 8
MAX_BYTES = 8192
#: A chunk's filter takes at most this share of its compressed size, wherever it is built
#: (benchmarks/README.md, "Chunk prefilters": 2.4% of the stored bytes on a generated log).
SHARE = 0.03
#: The filter of a chunk that has none yet, in an entry's record: the chunk is read (as
#: for a damaged filter), and the next search that reads it builds its filter.
UNKNOWN = b""
#: Whether filters are built with numpy (the ``filters`` extra): searches build them only
#: then, since the pure-Python builder is about 50 times slower than decompressing.
FAST = importlib.util.find_spec("numpy") is not None
#: An entry's filters are kept only up to this many bytes (about 10 GB of log text, 2 GB of
#: incompressible bytes): past it none are kept, and grep and count read every chunk, so a
#: put or a scan building them holds at most this much of them in memory.
RECORD_MAX = 64 << 20

_MULT = 0x9E3779B1
_SCRATCH_LOG = 16  # the trigram hash the filter's bits are taken from has 16 bits (18: 15% slower builds)
_HEADER = 5
_SAMPLE_MULT = 40503  # the trigrams sampled: ((s * _SAMPLE_MULT) & 0xFFFF) >> 8 < R
_ENDS_LINE = 1  # flags: the chunk ends in a newline
_FOLD = bytes(b | 0x20 for b in range(256))  # the case fold, as a translation table

#: Exact sets of strings are carried through a pattern while they hold at most this many strings.
_MAX_EXACT = 16
#: With numpy, an entry of this many chunks or more has its filters checked by whole arrays
#: (the loop over chunks costs about 10 µs a chunk; 1 GB of log text is 10,919 chunks).
VECTOR_MIN = 64
#: The chunks whose filters the first block of that check covers (twice as many each next
#: block): a search that stops after a few chunks checks few more filters than it needs.
BLOCK = 256
#: A character class of more members than this requires nothing.
_MAX_CLASS = 16
#: At most this many trigrams of one literal are checked (any subset is safe).
_MAX_GRAMS = 32
#: A formula of more literals than this requires nothing.
_MAX_LITERALS = 256
#: Longer patterns are not read (blobpad's grep takes 4096 characters at most).
_MAX_PATTERN = 1 << 16

# ASCII letters that case-insensitive matching (RE2's or Python's) also matches with a
# non-ASCII character: i (U+0130, U+0131 in Python), k (U+212A), s (U+017F).
_UNSAFE_ASCII = frozenset("iksIKS")
# Non-ASCII code points without case variants (in RE2's and Python's folding): their
# UTF-8 bytes are kept under case-insensitive matching; tests/test_prefilter.py checks
# the ranges against every code point.
_CASELESS = (
    (0x0600, 0x06FF),  # Arabic
    (0x0900, 0x097F),  # Devanagari
    (0x2000, 0x206F),  # general punctuation
    (0x3000, 0x30FF),  # CJK punctuation, Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7A3),  # Hangul syllables
    (0x1F300, 0x1FAFF),  # pictographs and emoji
)


def _caseless(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CASELESS)


# -- building -------------------------------------------------------------------------


def _size(distinct: int, max_bytes: int | None) -> int:
    """The filter's bytes of bits for ``distinct`` trigram hashes."""
    size = math.ceil(distinct * BITS_PER_GRAM / 8)
    if max_bytes is not None:
        size = min(size, max_bytes - _HEADER)
    return max(MIN_BYTES, min(MAX_BYTES, size))


def _rate(distinct: int, size: int) -> int:
    """R, out of 256: the share of the trigrams kept in ``size`` bytes of bits."""
    if size * 8 >= DENSITY * distinct:
        return 256
    return max(1, math.ceil(256 * size * 8 / (DENSITY * distinct)))


def _header(size: int, flags: int, rate: int = 256) -> bytes:
    return bytes((VERSION, flags, rate - 1, size & 0xFF, size >> 8))


def trigram_bits(data: bytes, fold: bool = True) -> Any:
    """The 2**16-entry presence table of the 16-bit hashes of the trigrams of ``data``
    (at least 3 bytes), case-folded unless ``fold`` is false, with numpy."""
    np = _numpy()
    b = np.frombuffer(data, dtype=np.uint8)
    if fold:
        b = b | np.uint8(0x20)
    # each trigram as a little-endian integer, assembled from contiguous byte lanes (reading
    # unaligned 4-byte windows with a stride of 1 is 20% slower: numpy cannot vectorize it)
    g = b[2:].astype(np.uint32)
    g <<= np.uint32(8)
    g |= b[1:-1]
    g <<= np.uint32(8)
    g |= b[:-2]
    g *= np.uint32(_MULT)
    g >>= np.uint32(32 - _SCRATCH_LOG)
    table = np.zeros(1 << _SCRATCH_LOG, dtype=np.bool_)
    table[g.astype(np.intp)] = True  # numpy converts other index types on every call: slower
    return table


def build_numpy(data: bytes, max_bytes: int | None, flags: int = 0) -> bytes:
    """The filter of ``data`` (at least 3 bytes) built with numpy: :func:`build`'s bytes."""
    np = _numpy()
    hashes = np.flatnonzero(trigram_bits(data))
    size = _size(len(hashes), max_bytes)
    rate = _rate(len(hashes), size)
    if rate < 256:
        hashes = hashes[((hashes * _SAMPLE_MULT) & 0xFFFF) >> 8 < rate]
    bits = np.zeros(size * 8, dtype=np.bool_)
    bits[(hashes * (size * 8)) >> _SCRATCH_LOG] = True
    return _header(size, flags, rate) + np.packbits(bits, bitorder="little").tobytes()


def build_python(data: bytes, max_bytes: int | None, flags: int = 0) -> bytes:
    """The same bytes as :func:`build_numpy`, without numpy (about 50 times slower)."""
    data = data.translate(_FOLD)
    shift = 32 - _SCRATCH_LOG
    hashes = {((data[i] | data[i + 1] << 8 | data[i + 2] << 16) * _MULT & 0xFFFFFFFF) >> shift
              for i in range(len(data) - 2)}
    size = _size(len(hashes), max_bytes)
    rate = _rate(len(hashes), size)
    out = bytearray(size)
    m = size * 8
    for s in hashes:
        if ((s * _SAMPLE_MULT) & 0xFFFF) >> 8 < rate:
            j = s * m >> _SCRATCH_LOG
            out[j >> 3] |= 1 << (j & 7)
    return _header(size, flags, rate) + bytes(out)


def build(chunk: bytes, spill: bytes = b"", *, max_bytes: int | None = None) -> bytes:
    """The serialized filter of one chunk (see the module docstring for its format).

    ``spill`` is what follows the chunk in its entry (b"" for the last chunk): only its
    first :data:`SPILL` bytes are used, taken from as many chunks as it takes when the
    next one is shorter, so that a trigram starting in ``chunk`` and ending after it is
    in this filter.  A chunk that ends in a newline ignores ``spill`` (no literal a
    query requires holds a newline), so its filter is a function of its bytes alone:
    it can be kept with the chunk and shared by every entry holding the chunk.

    The result is about one bit per distinct trigram of the chunk, 13 to 8197 bytes
    long, and at most ``max_bytes`` long when that is given (at least 13): put passes
    a share of the chunk's compressed size, so that filters never take more than that
    share of the stored bytes (a smaller filter only lets more chunks through).
    """
    chunk = bytes(chunk)
    flags = _ENDS_LINE if chunk.endswith(b"\n") else 0
    if spill and not flags:
        chunk += bytes(spill[:SPILL])
    if len(chunk) < GRAM:
        return _header(MIN_BYTES, flags) + bytes(MIN_BYTES)
    if _numpy() is not None:
        return build_numpy(chunk, max_bytes, flags)
    return build_python(chunk, max_bytes, flags)


def pack(filters: Sequence[bytes]) -> bytes:
    """An entry's filters, in chunk-list order, as one record: their count (4 bytes), each
    one's length (2 bytes each), then the filters end to end; integers little-endian."""
    if any(len(f) > 0xFFFF for f in filters):
        raise ValueError("a filter longer than 65535 bytes")
    lengths = array("H", map(len, filters))
    if sys.byteorder != "little":
        lengths.byteswap()
    return b"".join((len(filters).to_bytes(4, "little"), lengths.tobytes(), *filters))


def unpack(record: bytes, count: int) -> list[bytes] | None:
    """The filters :func:`pack` put in ``record``, or None unless it holds exactly ``count``
    of them (the entry's chunks) and parses whole."""
    if len(record) < 4 or int.from_bytes(record[:4], "little") != count or len(record) < 4 + 2 * count:
        return None
    lengths = array("H", record[4 : 4 + 2 * count])
    if sys.byteorder != "little":
        lengths.byteswap()
    at = 4 + 2 * count
    if at + sum(lengths) != len(record):
        return None
    out = Filters(source=record, offset=at)
    for n in lengths:
        out.append(record[at : at + n])
        at += n
    return out


class Filters(list):  # type: ignore[type-arg]
    """An entry's filters, in chunk-list order (a list of bytes, as :func:`unpack` gives
    it), which keeps the arrays :meth:`Query.iter_select` checks them with once built
    (numpy), so that every search of a cached entry reuses them."""

    __slots__ = ("table", "source", "offset")

    def __init__(self, items: Iterable[bytes] = (), *, source: bytes | None = None, offset: int = 0) -> None:
        super().__init__(items)
        self.table: _Table | None = None
        #: the record the filters were unpacked from, and where the first one starts in it:
        #: the arrays read the filters there instead of from a copy of them all
        self.source = source
        self.offset = offset


# -- queries --------------------------------------------------------------------------

# A formula is True (nothing required), False (nothing can match), a tuple of 16-bit
# trigram hashes (all required: one literal), or ("and" | "or", tuple of formulas).
_Formula = Any


class _Unsupported(Exception):
    """Something in the parsed pattern this module does not understand."""


@dataclass(frozen=True)
class _Info:
    """What a part of a pattern requires of any string it matches: ``req`` holds for
    it, and when ``exact`` is not None the string (folded) is one of ``exact``."""

    exact: frozenset[bytes] | None
    req: _Formula = True


_ANY = _Info(None, True)
_EMPTY = _Info(frozenset({b""}), True)


def _and(parts: Iterable[_Formula]) -> _Formula:
    out: dict[_Formula, None] = {}  # ordered and without duplicates
    for p in parts:
        if p is False:
            return False
        if p is True:
            continue
        out.update(dict.fromkeys(p[1] if p[0] == "and" else (p,)))
    if not out:
        return True
    return next(iter(out)) if len(out) == 1 else ("and", tuple(out))


def _or(parts: Iterable[_Formula]) -> _Formula:
    out: dict[_Formula, None] = {}
    for p in parts:
        if p is True:
            return True
        if p is False:
            continue
        out.update(dict.fromkeys(p[1] if p[0] == "or" else (p,)))
    if not out:
        return False
    return next(iter(out)) if len(out) == 1 else ("or", tuple(out))


def _trim(f: _Formula) -> _Formula:
    """At most _MAX_LITERALS literals: an AND keeps its first conjuncts (requiring less is
    safe), anything else that is too big requires nothing."""
    if _count_literals(f) <= _MAX_LITERALS:
        return f
    if f[0] != "and":
        return True
    kept: list[_Formula] = []
    n = 0
    for part in f[1]:
        k = _count_literals(part)
        if n + k <= _MAX_LITERALS:
            kept.append(part)
            n += k
    return _and(kept)


def _literal(s: bytes) -> _Formula:
    """The requirement of a folded literal: its trigrams."""
    grams: list[int] = []
    for i in range(len(s) - GRAM + 1):
        h = ((s[i] | s[i + 1] << 8 | s[i + 2] << 16) * _MULT & 0xFFFFFFFF) >> (32 - _SCRATCH_LOG)
        if h not in grams:
            grams.append(h)
    if not grams:
        return True
    if len(grams) > _MAX_GRAMS:  # keep grams spread over the literal
        step = len(grams) / _MAX_GRAMS
        grams = [grams[int(i * step)] for i in range(_MAX_GRAMS)]
    return tuple(grams)


def _full(info: _Info) -> _Formula:
    if info.exact is None:
        return info.req
    return _and((info.req, _or(_literal(s) for s in info.exact)))


def _char(cp: int, icase: bool) -> _Info:
    """A single character of the pattern."""
    if cp == 0x0A or (0xD800 <= cp < 0xE000):
        return _ANY
    if icase:
        if cp < 0x80:
            ch = chr(cp)
            if ch in _UNSAFE_ASCII:
                return _ANY
            return _Info(frozenset({ch.lower().encode().translate(_FOLD)}))
        if not _caseless(cp):
            return _ANY
        return _Info(frozenset({chr(cp).encode().translate(_FOLD)}))
    return _Info(frozenset({chr(cp).encode().translate(_FOLD)}))


class _Compiler:
    def __init__(self, sre: Any, verbose_flag: int, icase_flag: int) -> None:
        self.c = sre
        self.icase_flag = icase_flag
        self.verbose_flag = verbose_flag

    def seq(self, items: Iterable[tuple[Any, Any]], icase: bool) -> _Info:
        """A concatenation: exact sets are multiplied while small, otherwise flushed into ``req``."""
        req: _Formula = True
        exact: frozenset[bytes] | None = frozenset({b""})
        flushed = False
        for op, av in items:
            part = self.node(op, av, icase)
            if exact is not None and part.exact is not None and len(exact) * len(part.exact) <= _MAX_EXACT:
                exact = frozenset(a + b for a in exact for b in part.exact)
                req = _and((req, part.req))
                continue
            flushed = True
            if exact is not None:
                req = _and((req, _or(_literal(s) for s in exact)))
            req = _and((req, part.req))
            exact = part.exact
        if not flushed:
            return _Info(exact, req)
        return _Info(None, _full(_Info(exact, req)))

    def node(self, op: Any, av: Any, icase: bool) -> _Info:
        c = self.c
        if op is c.LITERAL:
            if av in (0x7B, 0x7D):  # { and }: never trust a reading of braces that RE2 may not share
                return _ANY
            return _char(av, icase)
        if op in (c.NOT_LITERAL, c.ANY):
            return _ANY
        if op is c.AT:
            return _EMPTY
        if op is c.IN:
            return self.klass(av, icase)
        if op is c.SUBPATTERN:
            _group, add, delete, sub = av
            if (add | delete) & ~self.icase_flag & ~c.SRE_FLAG_MULTILINE & ~c.SRE_FLAG_DOTALL:
                raise _Unsupported("flag")
            if add & self.icase_flag:
                icase = True
            if delete & self.icase_flag:
                icase = False
            return self.seq(sub, icase)
        if op is c.BRANCH:
            branches = [self.seq(b, icase) for b in av[1]]
            if all(b.exact is not None and b.req is True for b in branches):
                union = frozenset().union(*(b.exact for b in branches))  # type: ignore[misc]
                if len(union) <= _MAX_EXACT:
                    return _Info(union)
            return _Info(None, _or(_full(b) for b in branches))
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT)):
            lo, hi, sub = av
            inner = self.seq(sub, icase)
            if lo == 0:
                if hi == 1 and inner.exact is not None and inner.req is True and len(inner.exact) < _MAX_EXACT:
                    return _Info(inner.exact | {b""})
                return _ANY
            if lo == hi == 1:
                return inner
            return _Info(None, _full(inner))
        raise _Unsupported(str(op))

    def klass(self, items: list[tuple[Any, Any]], icase: bool) -> _Info:
        c = self.c
        members: set[bytes] = set()
        for op, av in items:
            if op is c.LITERAL:
                cps: Iterable[int] = (av,)
            elif op is c.RANGE:
                lo, hi = av
                if hi - lo >= _MAX_CLASS:
                    return _ANY
                cps = range(lo, hi + 1)
            else:  # NEGATE, CATEGORY (\d \w \s ...)
                return _ANY
            for cp in cps:
                one = _char(cp, icase)
                if one.exact is None:
                    return _ANY
                members |= one.exact
            if len(members) > _MAX_CLASS:
                return _ANY
        return _Info(frozenset(members))


def _count_literals(f: _Formula) -> int:
    if f is True or f is False:
        return 0
    if f[0] in ("and", "or"):
        return sum(_count_literals(x) for x in f[1])
    return 1


def _compile(pattern: str, ignore_case: bool, fixed: bool) -> _Formula:
    if fixed:
        return _fixed(pattern, ignore_case)
    if re.search(r"\\[0-9]|\[[:=.]|\{,", pattern):
        # read differently by Python's parser and RE2: octal escapes or back-references, POSIX
        # classes, and "{,n}" (a repetition to Python, the text "{,n}" to RE2)
        raise _Unsupported("escape")
    from re import _constants as sre  # noqa: PLC0415 - the parser's private modules (Python 3.11+)
    from re import _parser as parser  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "possible nested set" and the like: RE2 may read it otherwise
        parsed = parser.parse(pattern, 0)
    flags = parsed.state.flags
    allowed = sre.SRE_FLAG_IGNORECASE | sre.SRE_FLAG_MULTILINE | sre.SRE_FLAG_DOTALL | sre.SRE_FLAG_UNICODE
    if flags & ~allowed:
        raise _Unsupported("flags")
    icase = ignore_case or bool(flags & sre.SRE_FLAG_IGNORECASE)
    comp = _Compiler(sre, sre.SRE_FLAG_VERBOSE, sre.SRE_FLAG_IGNORECASE)
    return _full(comp.seq(list(parsed), icase))


def _fixed(pattern: str, ignore_case: bool) -> _Formula:
    req: _Formula = True
    run = b""
    for ch in pattern:
        one = _char(ord(ch), ignore_case)
        if one.exact is None:
            req = _and((req, _literal(run)))
            run = b""
        else:
            run += next(iter(one.exact))
    return _and((req, _literal(run)))


class Query:
    """A pattern's requirement on chunk filters: :meth:`may_match` is False only for a
    chunk that cannot hold a matching line.  Build with :meth:`compile`."""

    __slots__ = ("_formula",)

    def __init__(self, formula: _Formula = True) -> None:
        self._formula = formula

    @classmethod
    def compile(cls, pattern: str, *, ignore_case: bool = False, fixed: bool = False) -> Query:
        """The query of ``pattern`` as blobpad's grep reads it (RE2 syntax, or a literal
        with ``fixed``; ``ignore_case`` as RE2's case-insensitive option).

        Never raises: a pattern it cannot read, or reads with any doubt, gives
        :data:`MATCH_ALL`.
        """
        if not isinstance(pattern, str) or len(pattern) > _MAX_PATTERN:
            return MATCH_ALL
        try:
            formula = _compile(pattern, bool(ignore_case), bool(fixed))
        except Exception:  # anything unexpected in a parsed form means "not understood": never a traceback
            return MATCH_ALL
        formula = _trim(formula)
        if formula is True:
            return MATCH_ALL
        return cls(formula)

    @property
    def selective(self) -> bool:
        """Whether this query can ever exclude a chunk (else every chunk must be read)."""
        return self._formula is not True

    def may_match(self, filter: bytes) -> bool:
        """False only when the chunk whose filter this is holds no match (its filter
        from :func:`build`; a filter of an unknown version or damaged: True)."""
        return self.may_match_run((filter,))

    def may_match_run(self, filters: Sequence[bytes]) -> bool:
        """:meth:`may_match` for consecutive chunks checked as one: those of a line
        that runs over chunk boundaries (a chunk not ending in a newline, and the
        chunks after it up to the one where that line ends)."""
        f = self._formula
        if f is True:
            return True
        if f is False:
            return False
        parsed: list[tuple[int, int, bytes]] = []
        for flt in filters:
            size = _valid_size(flt)
            if not size:
                return True
            parsed.append((size * 8, flt[2] + 1, flt))
        if not parsed:
            return True
        return _eval(f, parsed)

    def select(self, filters: Sequence[bytes]) -> list[bool]:
        """Which of an entry's chunks (their filters, in order) must be read: False only
        for a chunk no matching line touches.  The chunks of a line that runs over chunk
        boundaries are checked together (:meth:`may_match_run`); a damaged filter, or one
        of another version, joins its chunk to the next and makes the group read."""
        if self._formula is True:
            return [True] * len(filters)
        return list(self.iter_select(filters))

    def iter_select(self, filters: Sequence[bytes]) -> Iterator[bool]:
        """:meth:`select`'s answers one chunk at a time, each group of chunks checked only
        when the first of them is asked for (a search that stops early checks only the
        filters of the chunks it reached).

        With numpy, an entry of :data:`VECTOR_MIN` chunks or more is checked by whole
        arrays, :data:`BLOCK` chunks first and twice as many each time after (:class:`_Table`):
        the same answers, at a small fraction of the per-chunk loop's cost."""
        if len(filters) >= VECTOR_MIN and _numpy() is not None:
            return self._iter_vector(filters)
        return self._iter_loop(filters)

    def _iter_vector(self, filters: Sequence[bytes]) -> Iterator[bool]:
        table = getattr(filters, "table", None)
        if table is None:
            table = _Table(filters)
            if isinstance(filters, Filters):
                filters.table = table
        start, size = 0, BLOCK
        while start < table.n:
            stop = table.block_end(start, size)
            yield from table.decide(self._formula, start, stop).tolist()
            start, size = stop, size * 2

    def _iter_loop(self, filters: Sequence[bytes]) -> Iterator[bool]:
        start = 0
        tainted = False  # the open group holds a filter that cannot be read: all of it is read
        last = len(filters) - 1
        for i, flt in enumerate(filters):
            size = _valid_size(flt)
            ends = bool(size) and bool(flt[1] & _ENDS_LINE)
            if not size and not tainted:  # answer the group so far now, not at its end (which
                tainted = True            # may be far: every chunk not built yet is in it)
                for _ in range(i - start):
                    yield True
            if tainted:
                yield True
            elif ends or i == last:
                keep = self.may_match_run(filters[start:i + 1])
                for _ in range(i + 1 - start):
                    yield keep
            if ends or i == last:
                start, tainted = i + 1, False

    def __repr__(self) -> str:
        return "Query(MATCH_ALL)" if self._formula is True else f"Query({self._formula!r})"


def _valid_size(flt: bytes) -> int:
    """The bytes of bits of a well-formed filter of this version, else 0."""
    if len(flt) < _HEADER or flt[0] != VERSION or flt[1] & ~_ENDS_LINE:
        return 0
    size = flt[3] | flt[4] << 8
    return size if MIN_BYTES <= size <= MAX_BYTES and len(flt) == _HEADER + size else 0


def _eval(f: _Formula, filters: list[tuple[int, int, bytes]]) -> bool:
    if f is True:
        return True
    if f is False:
        return False
    kind = f[0]
    if kind == "and":
        return all(_eval(x, filters) for x in f[1])
    if kind == "or":
        return any(_eval(x, filters) for x in f[1])
    for s in f:
        sample = ((s * _SAMPLE_MULT) & 0xFFFF) >> 8
        for m, rate, flt in filters:
            if sample >= rate:  # not kept in this filter: may be present
                break
            j = s * m >> _SCRATCH_LOG
            if flt[_HEADER + (j >> 3)] >> (j & 7) & 1:
                break
        else:
            return False
    return True


class _Table:
    """An entry's filters as numpy arrays, checked a block of whole groups at a time
    (:meth:`decide`) with the answers of :meth:`Query.may_match_run` on each group and of
    :meth:`Query._iter_loop` on the chunks (tests/test_prefilter.py holds them equal)."""

    __slots__ = ("n", "buf", "bits", "m", "rate", "unreadable", "ends")

    def __init__(self, filters: Sequence[bytes]) -> None:
        np = _numpy()
        n = self.n = len(filters)
        lengths = np.fromiter(map(len, filters), dtype=np.int64, count=n)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        source = getattr(filters, "source", None)
        if source is not None:  # the record they were unpacked from (Filters): no copy
            starts += filters.offset  # type: ignore[attr-defined]
        else:
            source = b"".join(filters)
        self.buf = buf = np.frombuffer(source or b"\0", dtype=np.uint8)  # never empty: index 0 is always there
        # the header of a filter too short to have one (unreadable: its answer is discarded)
        # is read from wherever stays inside the buffer
        at = [np.minimum(starts + k, len(buf) - 1) for k in range(_HEADER)]
        version, flags, rate = buf[at[0]], buf[at[1]].astype(np.int64), buf[at[2]].astype(np.int64) + 1
        size = buf[at[3]].astype(np.int64) | buf[at[4]].astype(np.int64) << 8
        readable = ((lengths >= _HEADER) & (version == VERSION) & ((flags & ~_ENDS_LINE) == 0)
                    & (size >= MIN_BYTES) & (size <= MAX_BYTES) & (lengths == _HEADER + size))
        self.unreadable = ~readable
        self.bits = np.where(readable, starts + _HEADER, 0)  # an unreadable filter reads bit 0 of byte 0
        self.m = np.where(readable, size * 8, 0)
        self.rate = np.where(readable, rate, 0)
        ends = readable & ((flags & _ENDS_LINE) != 0)
        if n:
            ends[-1] = True
        self.ends = np.flatnonzero(ends)  # the last chunk of each group

    def block_end(self, start: int, size: int) -> int:
        """The end of the block from chunk ``start``: after the group holding chunk
        ``start + size - 1`` (or the last chunk)."""
        ends = self.ends
        i = int(ends.searchsorted(min(start + size, self.n) - 1))
        return int(ends[i]) + 1

    def decide(self, formula: _Formula, start: int, stop: int) -> Any:
        """Whether each chunk of ``[start, stop)`` (whole groups) must be read."""
        np = _numpy()
        ends = self.ends
        last = ends[np.searchsorted(ends, start):np.searchsorted(ends, stop - 1) + 1]
        firsts = np.empty(len(last), dtype=np.int64)
        firsts[0] = 0
        firsts[1:] = last[:-1] + 1 - start
        keep = np.logical_or.reduceat(self.unreadable[start:stop], firsts)
        if not keep.all():
            checked = _Check(self, start, stop, firsts)
            keep |= checked.eval(formula)
        return np.repeat(keep, np.diff(np.append(firsts, stop - start)))


class _Check:
    """One formula checked over a block of groups (each trigram's bits read once)."""

    __slots__ = ("buf", "bits", "m", "rate", "firsts", "groups", "seen")

    def __init__(self, table: _Table, start: int, stop: int, firsts: Any) -> None:
        self.buf = table.buf
        self.bits = table.bits[start:stop]
        self.m = table.m[start:stop]
        self.rate = table.rate[start:stop]
        self.firsts = firsts
        self.groups = len(firsts)
        self.seen: dict[int, Any] = {}

    def gram(self, s: int) -> Any:
        """Per group: whether trigram hash ``s`` may be in it (in one of its filters, or
        left out of one's sample)."""
        got = self.seen.get(s)
        if got is None:
            np = _numpy()
            j = (self.m * s) >> _SCRATCH_LOG
            bit = (self.buf[self.bits + (j >> 3)] >> (j & 7)) & 1
            present = (bit != 0) | (self.rate <= (((s * _SAMPLE_MULT) & 0xFFFF) >> 8))
            got = self.seen[s] = np.logical_or.reduceat(present, self.firsts)
        return got

    def eval(self, f: _Formula) -> Any:
        np = _numpy()
        if f is True:
            return np.ones(self.groups, dtype=np.bool_)
        if f is False:
            return np.zeros(self.groups, dtype=np.bool_)
        kind = f[0]
        if kind == "and":
            out = np.ones(self.groups, dtype=np.bool_)
            for x in f[1]:
                out &= self.eval(x)
                if not out.any():
                    break
            return out
        if kind == "or":
            out = np.zeros(self.groups, dtype=np.bool_)
            for x in f[1]:
                out |= self.eval(x)
                if out.all():
                    break
            return out
        out = np.ones(self.groups, dtype=np.bool_)
        for s in f:
            out &= self.gram(s)
            if not out.any():
                break
        return out


#: The query that excludes no chunk.
MATCH_ALL = Query(True)
