"""Chunk prefilters (blobpad.prefilter): a filter never excludes a chunk holding a match.

The oracles are blobpad's own matcher (RE2 through ``reads.compile_pattern``, the
options grep uses), Python's ``re`` on each line, and ``rg`` on a few fixed cases:
whenever a line lying in chunks i..j matches, ``may_match_run(filters[i..j])`` is
True (``may_match(filters[i])`` for a line inside one chunk).  Contents are random
ASCII, multibyte UTF-8 (with the characters whose case folds across byte lengths),
CRLF, very long lines and random binary, cut at random places, including inside a
line and inside a character.
"""

from __future__ import annotations

import contextlib
import random
import re
import subprocess
import warnings
from collections.abc import Iterator

import pytest
import re2
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from blobpad import InvalidArgument, prefilter, sample
from blobpad.chunking import ChunkParams, cut_chunks
from blobpad.prefilter import MATCH_ALL, SPILL, Query, build
from blobpad.reads import compile_pattern

# Characters that make case folding interesting: the Kelvin sign, the long s, dotted
# and dotless i, sharp s, Greek sigmas, a 4-byte letter, CJK, emoji.
_SPECIAL = "KkSsIiſKİıßẞΣσςÅåÉé日志エラー🙂𝔘\u0345ι"
_ALPHABET = "abcdefkisABCDEFKIS0123456789 .:=_-/()[]{}|*+?\\^$\t" + _SPECIAL


def _filters(chunks: list[bytes], max_bytes: int | None = None) -> list[bytes]:
    """The filters of consecutive chunks, each with the SPILL bytes that follow it (from
    as many chunks as it takes: the tests cut chunks of one byte)."""
    out = []
    for i, c in enumerate(chunks):
        spill = b"".join(chunks[i + 1:i + 1 + SPILL])[:SPILL]
        out.append(build(c, spill, max_bytes=max_bytes))
    return out


@contextlib.contextmanager
def _vector(vector_min: int, block: int) -> Iterator[None]:
    """Check filters by numpy arrays from ``vector_min`` chunks on, ``block`` chunks first."""
    saved = prefilter.VECTOR_MIN, prefilter.BLOCK
    prefilter.VECTOR_MIN, prefilter.BLOCK = vector_min, block
    try:
        yield
    finally:
        prefilter.VECTOR_MIN, prefilter.BLOCK = saved


def _select(query: Query, filters: list[bytes]) -> list[bool]:
    """``query.select(filters)`` by the loop over chunks, which must equal what the numpy
    check answers from whole arrays, in blocks of 1, 2, 3 and 256 chunks (and what
    :meth:`Query.iter_select` yields one by one), from a list of filters and from the
    record :func:`prefilter.pack` makes of them."""
    with _vector(10**9, 1):
        loop = query.select(filters)
    for block in (1, 2, 3, 256):
        with _vector(1, block):
            assert query.select(filters) == loop == list(query.iter_select(filters)), (query, block)
            assert query.select(prefilter.Filters(filters)) == loop, (query, block)
            # as an entry's record holds them: read in place, after the record's lengths
            assert query.select(prefilter.unpack(prefilter.pack(filters), len(filters))) == loop, (query, block)
    return loop


def _cut(data: bytes, cuts: list[int], at_lines: bool = False) -> list[bytes]:
    """``data`` cut at ``cuts`` (modulo its length), or just after the newline that follows each."""
    points = {c % (len(data) + 1) for c in cuts}
    if at_lines:
        points = {data.find(b"\n", p) + 1 or len(data) for p in points}
    points = sorted(points | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


def _lines(chunks: list[bytes]) -> list[tuple[bytes, int, int]]:
    """Each line of the concatenated chunks (without its newline), with the first and
    last chunk that hold its bytes (its newline excluded, an empty line in its own chunk)."""
    starts = []
    pos = 0
    for c in chunks:
        starts.append(pos)
        pos += len(c)

    def chunk_of(offset: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    data = b"".join(chunks)
    out = []
    pos = 0
    for line in data.split(b"\n"):
        end = pos + len(line)
        if pos < len(data):
            out.append((line, chunk_of(pos), chunk_of(max(pos, end - 1))))
        pos = end + 1
    return out


#: Python's re, a backtracking matcher, checks lines up to this long (RE2, blobpad's own
#: matcher, checks every line): ``.*a.*b.*c`` is cubic in the line's length.
_PY_RE_LINE = 200


def _backtracks(parsed: object, inside: bool = False) -> bool:
    """Whether a parsed pattern repeats a repetition or an alternation (exponential in re)."""
    from re import _constants as c

    for op, av in parsed:  # type: ignore[attr-defined]
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            if inside or _backtracks(av[2], True):
                return True
        elif op is c.BRANCH:
            if inside or any(_backtracks(b, inside) for b in av[1]):
                return True
        elif op is c.SUBPATTERN and _backtracks(av[3], inside):
            return True
    return False


def _python_re(pattern: str, ignore_case: bool, fixed: bool) -> re.Pattern[str] | None:
    """Python's re for the pattern, or None where it cannot read it or could take exponential time."""
    from re import _parser

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            source = re.escape(pattern) if fixed else pattern
            if _backtracks(_parser.parse(source)):
                return None
            return re.compile(source, re.IGNORECASE if ignore_case else 0)
    except (re.error, RecursionError):
        return None


def _check(chunks: list[bytes], pattern: str, ignore_case: bool, fixed: bool, max_bytes: int | None = None) -> int:
    """Assert the no-false-negative property; return how many lines matched."""
    try:
        regex = compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
    except InvalidArgument:
        return -1
    query = Query.compile(pattern, ignore_case=ignore_case, fixed=fixed)
    pyre = _python_re(pattern, ignore_case, fixed)
    filters = _filters(chunks, max_bytes)
    selected = _select(query, filters)
    assert len(selected) == len(filters)
    hits = 0
    for line, first, last in _lines(chunks):
        matched = regex.search(line) is not None
        if not matched and pyre is not None and len(line) <= _PY_RE_LINE:
            matched = pyre.search(line.decode("utf-8", "surrogateescape")) is not None
        if not matched:
            continue
        hits += 1
        assert query.may_match_run(filters[first:last + 1]), (pattern, ignore_case, fixed, line[:200], first, last)
        assert all(selected[first:last + 1])
        if first == last:
            assert query.may_match(filters[first])
    event(f"selective: {query.selective}, lines matched: {bool(hits)}, chunks excluded: {not all(selected)}")
    return hits


# -- strategies -------------------------------------------------------------------------

_text_lines = st.lists(
    st.one_of(
        st.text(alphabet=_ALPHABET, max_size=40),
        st.text(alphabet=_ALPHABET, min_size=1, max_size=8).map(lambda s: s * 400),  # a very long line
    ),
    min_size=1, max_size=30,
)


@st.composite
def _contents(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["text", "crlf", "binary", "log"]))
    if kind == "binary":
        return draw(st.binary(min_size=0, max_size=3000))
    if kind == "log":
        seed = draw(st.integers(0, 1000))
        return sample.log_text(draw(st.integers(200, 4000)), seed=seed).encode()
    sep = "\r\n" if kind == "crlf" else "\n"
    return sep.join(draw(_text_lines)).encode("utf-8")


_META = st.sampled_from([".", ".*", ".+", "\\b", "\\B", "^", "$", "\\w", "\\d+", "\\s", "[a-z]", "[^x]", "\\.", "\\("])


@st.composite
def _patterns(draw: st.DrawFn, data: bytes) -> str:
    """A random pattern, often built around pieces of ``data``."""
    text = data.decode("utf-8", "replace").replace("\ufffd", "")

    def piece() -> str:
        if text and draw(st.booleans()):
            a = draw(st.integers(0, len(text) - 1))
            b = draw(st.integers(a, min(len(text), a + 20)))
            s = text[a:b]
            if draw(st.booleans()):
                s = s.swapcase()
            return re.escape(s) if draw(st.booleans()) else s
        return draw(st.text(alphabet=_ALPHABET, max_size=6))

    def atom(depth: int) -> str:
        choice = draw(st.integers(0, 7 if depth < 2 else 3))
        if choice <= 1:
            return piece()
        if choice == 2:
            return draw(_META)
        if choice == 3:
            members = draw(st.text(alphabet="abcxyzKkSsIi019-_.日ſ", min_size=1, max_size=5))
            return "[" + members.replace("\\", "").replace("]", "").replace("[", "").lstrip("^") + "]"
        if choice == 4:
            return "(" + "|".join(seq(depth + 1) for _ in range(draw(st.integers(1, 3)))) + ")"
        if choice == 5:
            return "(?:" + seq(depth + 1) + ")" + draw(st.sampled_from(["?", "*", "+", "{2}", "{1,3}", "{0,2}", "{2,}"]))
        if choice == 6:
            return "(?i:" + seq(depth + 1) + ")"
        return piece() + "|" + piece()

    def seq(depth: int) -> str:
        return "".join(atom(depth) for _ in range(draw(st.integers(1, 3))))

    prefix = draw(st.sampled_from(["", "", "", "(?i)", "(?m)", "(?s)"]))
    if draw(st.booleans()):  # a piece of the content, found in some chunks and not others
        return prefix + draw(st.sampled_from(["{}", "{}|{}", "\\b{}", "({})+", "{}.*{}", "{}[0-9a-f]"])).format(
            *(piece() for _ in range(2)))
    return prefix + seq(0)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_never_excludes_a_chunk_with_a_match(data: st.DataObject) -> None:
    content = data.draw(_contents())
    cuts = data.draw(st.lists(st.integers(0, 1 << 16), max_size=12))
    chunks = _cut(content, cuts, at_lines=data.draw(st.booleans()))  # as blobpad cuts, or anywhere
    assume(chunks)
    fixed = data.draw(st.booleans())
    ignore_case = data.draw(st.booleans())
    pattern = data.draw(_patterns(content))
    if fixed:
        pattern = pattern.replace("\\", "")
    max_bytes = data.draw(st.sampled_from([None, None, 0, 20, 100]))  # small caps keep a sample of the trigrams
    _check(chunks, pattern, ignore_case, fixed, max_bytes)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), size=st.integers(1, 40_000), ignore_case=st.booleans())
def test_literals_present_once_are_never_missed(seed: int, size: int, ignore_case: bool) -> None:
    """A literal taken from the content (often across a cut) is found wherever it is."""
    rnd = random.Random(seed)
    content = sample.multibyte_text(size, seed=seed).encode() if seed % 2 else sample.log_text(size, seed=seed).encode()
    chunks = _cut(content, [rnd.randrange(len(content) + 1) for _ in range(rnd.randrange(1, 8))], at_lines=seed % 3 > 0)
    text = content.decode()
    a = rnd.randrange(len(text))
    literal = text[a:a + rnd.randrange(1, 40)].split("\n")[0]
    assume(literal)
    assert _check(chunks, literal, ignore_case, True) >= 1
    assert _check(chunks, re.escape(literal.swapcase() if ignore_case else literal), ignore_case, False) >= 1


# -- the oracle rg on fixed cases -------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "flags"), [
    ("blobpad-needle-7f3a9c", ["-F"]),
    ("error|fail(ed|ure)", ["-i"]),
    ("ERROR|WARN", []),
    ("Error: could not write", ["-F"]),
    ("req=[0-9a-f]{8} GET", []),
    ("(?i)AUTHENTICATION FAILURE", []),
    ("日志|ошибка", []),
])
def test_agrees_with_rg(rg: str, tmp_path, pattern: str, flags: list[str]) -> None:
    content = (sample.log_text(300_000, seed=3) + sample.multibyte_text(100_000, seed=3)).encode()
    chunks = list(cut_chunks([content], ChunkParams(min_size=8 << 10, avg_extra=4 << 10, max_size=32 << 10)))
    filters = _filters(chunks)
    query = Query.compile(pattern, ignore_case="-i" in flags, fixed="-F" in flags)
    for i, chunk in enumerate(chunks):
        path = tmp_path / f"c{i}"
        path.write_bytes(chunk)
        out = subprocess.run([rg, "-c", "--no-config", *flags, "--", pattern, str(path)], capture_output=True)
        count = int(out.stdout or b"0")
        if count:
            assert query.may_match(filters[i]), (pattern, i)


# -- filters that really exclude ---------------------------------------------------------------


@pytest.fixture(scope="module")
def log_chunks() -> list[bytes]:
    return list(cut_chunks([sample.log_text(2 << 20, seed=7).encode()], ChunkParams()))


def _skipped(query: Query, chunks: list[bytes]) -> int:
    return sum(not query.may_match(f) for f in _filters(chunks))


@pytest.mark.parametrize(("pattern", "ignore_case", "fixed"), [
    ("blobpad-needle-7f3a9c", False, True),
    ("blobpad-needle-7f3a9c", True, True),
    ("NullPointerException", False, False),
    ("(?i)nullpointerexception|outofmemoryerror", False, False),
    ("java\\.lang\\.[A-Z]\\w+Exception", False, False),
    ("colou?r=(crimson|magenta)", False, False),
])
def test_absent_patterns_exclude_nearly_every_chunk(log_chunks: list[bytes], pattern: str, ignore_case: bool,
                                                     fixed: bool) -> None:
    query = Query.compile(pattern, ignore_case=ignore_case, fixed=fixed)
    assert query.selective
    assert _skipped(query, log_chunks) >= 0.8 * len(log_chunks)


def test_a_rare_literal_is_read_only_where_it_is(log_chunks: list[bytes]) -> None:
    text = b"".join(log_chunks)
    sid = re.findall(rb"session ([0-9a-f]{16})", text)[-1]
    where = [i for i, c in enumerate(log_chunks) if sid in c]
    query = Query.compile(sid.decode(), ignore_case=False, fixed=True)
    filters = _filters(log_chunks)
    passed = [i for i, f in enumerate(filters) if query.may_match(f)]
    assert set(where) <= set(passed)
    assert len(passed) <= len(where) + 0.1 * len(log_chunks)


def test_frequent_patterns_exclude_nothing_they_match(log_chunks: list[bytes]) -> None:
    query = Query.compile("ERROR|WARN", ignore_case=False, fixed=False)
    assert query.selective
    assert _skipped(query, log_chunks) == 0


@pytest.mark.parametrize(("pattern", "ignore_case", "fixed", "selective"), [
    ("ab", False, True, False),  # shorter than a trigram
    ("a.c", False, False, False),
    ("abc*", False, False, False),  # "ab" is all it requires
    ("abcd*", False, False, True),
    ("(abc)?", False, False, False),
    ("\\w+@\\w+", False, False, False),
    ("[a-z]{5}", False, False, False),
    ("xyz|.", False, False, False),
    ("kiss", True, True, False),  # k, i and s have non-ASCII case variants
    ("kiss", False, True, True),
    ("xéyz", True, True, False),  # a non-ASCII letter breaks the literal
    ("日志エラー", True, True, True),  # caseless scripts keep their bytes
    ("", False, True, False),
    ("", False, False, False),
])
def test_what_is_selective(pattern: str, ignore_case: bool, fixed: bool, selective: bool) -> None:
    assert Query.compile(pattern, ignore_case=ignore_case, fixed=fixed).selective is selective


@pytest.mark.parametrize("pattern", [
    "(", "[a", "a{2,1}", "foo(?=bar)", "(?<=foo)bar", "(foo)\\1bar", "(?P<x>abc)(?P=x)def",
    "[[:alpha:]]needle", "[[:digit:]]+abcdef", "\\Qa.b\\Eabcdef", "abc\\Cdef", "\\pLabcdef", "\\x{41}bcdef",
    "(?x) a b c d e", "(?a)abcdef", "(?U)abcdef", "a(?i)bcdef", "abc\\12def", "(?>abc)def",
])
def test_unparseable_or_unsupported_patterns_match_all(pattern: str) -> None:
    assert Query.compile(pattern, ignore_case=False, fixed=False) is MATCH_ALL


@pytest.mark.parametrize("hostile", [None, 3, b"abc", ["abc"], "abcdef" * 20_000])
def test_hostile_patterns_match_all(hostile: object) -> None:
    assert Query.compile(hostile, ignore_case=False, fixed=False) is MATCH_ALL  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(pattern=st.text(alphabet=_ALPHABET + "()[]{}|?*+^$.\\dwsbBQEPpxuU0123:=<>!#,", max_size=24),
       ignore_case=st.booleans(), fixed=st.booleans())
def test_any_string_compiles_without_raising(pattern: str, ignore_case: bool, fixed: bool) -> None:
    query = Query.compile(pattern, ignore_case=ignore_case, fixed=fixed)
    assert query.may_match(build(b"some content\n")) in (True, False)
    assert query.select([]) == []


def test_deep_nesting_matches_all() -> None:
    assert Query.compile("(" * 5000 + "abcdef" + ")" * 5000, ignore_case=False, fixed=False) is MATCH_ALL


def test_unknown_or_damaged_filters_are_read() -> None:
    query = Query.compile("blobpad-needle", ignore_case=False, fixed=True)
    good = build(b"nothing to see here\n" * 10)
    assert not query.may_match(good)
    for bad in (b"", b"\x01\x01\xff\x08", bytes([2]) + good[1:], good[:-1], good + b"\0",
                bytes([1, 1, 255, 4, 0]) + good[5:9], bytes([1, 1, 255, 1, 0x21]) + bytes(0x2101), bytes([1, 3]) + good[2:]):
        assert query.may_match(bad)
        assert _select(query, [good, bad, good, good]) == [False, True, True, False]
        # a query nothing can match reads a chunk only for a filter it cannot read
        assert _select(Query(False), [good, bad, good, good]) == [False, True, True, False]
    assert query.may_match_run([good, good[:5]])


def test_select_reads_a_long_line_with_all_its_chunks() -> None:
    query = Query.compile("foo.*bar", ignore_case=False, fixed=False)
    chunks = [b"a line\n", b"x" * 50 + b"foo", b"y" * 50, b"bar and the end\n", b"other\n", b"foo\n", b"bar\n"]
    assert _select(query, _filters(chunks)) == [False, True, True, True, False, False, False]
    assert MATCH_ALL.select(_filters(chunks)) == [True] * 7


def test_filters_are_versioned_and_bounded() -> None:
    for data in (b"", b"ab", b"abc", sample.log_text(300_000).encode(), sample.binary_blob(300_000)):
        f = build(data)
        assert f[0] == prefilter.VERSION
        assert len(f) == 5 + (f[3] | f[4] << 8)
        assert 5 + prefilter.MIN_BYTES <= len(f) <= 5 + prefilter.MAX_BYTES
        assert f[1] == data.endswith(b"\n")
    log = sample.log_text(100_000).encode()
    for cap in (0, 13, 14, 100, 10_000):
        f = build(log, max_bytes=cap)
        assert len(f) == max(13, min(cap, len(build(log))))
        assert Query.compile("connection", ignore_case=False, fixed=True).may_match(f)


def test_spill_puts_boundary_trigrams_in_the_first_chunk() -> None:
    query = Query.compile("needle", ignore_case=False, fixed=True)
    a, b = b"x" * 100 + b"nee", b"dle" + b"y" * 100
    assert not query.may_match(build(a)) and not query.may_match(build(b))
    assert query.may_match_run([build(a, b[:SPILL]), build(b)])
    assert build(a, b) == build(a, b[:SPILL])
    assert build(a + b"\n", b) == build(a + b"\n")  # a chunk ending a line does not depend on the next


def test_numpy_and_pure_python_builders_agree() -> None:
    for seed, data in enumerate((sample.log_text(150_000).encode(), sample.binary_blob(70_000), b"abcd" * 3)):
        for cap in (None, 50):
            assert prefilter.build_python(data, cap) == prefilter.build_numpy(data, cap), seed


# -- the case folding tables -------------------------------------------------------------------

_ALL = "".join(chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000)


def test_only_i_k_s_fold_to_non_ascii() -> None:
    for letter in "abcdefghijklmnopqrstuvwxyz":
        crosses = re2.search("(?i)" + letter, _ALL) is not None or re.search("(?i)" + letter, _ALL) is not None
        assert crosses == (letter in "iks"), letter


@pytest.mark.parametrize(("lo", "hi"), prefilter._CASELESS)
def test_caseless_ranges_have_no_case_variants(lo: int, hi: int) -> None:
    members = "".join(chr(c) for c in range(lo, hi + 1))
    others = "".join(ch for ch in _ALL if not lo <= ord(ch) <= hi) + "".join(chr(c) for c in range(0x80))
    cls = f"[{chr(lo)}-{chr(hi)}]"
    assert re2.search("(?i)" + cls, others) is None
    assert re.search("(?i)" + cls, others) is None
    for ch in members:
        assert ch.lower() == ch == ch.upper() == ch.casefold()


def _groups_reference(query: Query, filters: list[bytes]) -> list[bool]:
    """The chunks to read, group by group as the module docstring defines them: a group ends
    at a chunk whose readable filter says it ends a line (or at the last chunk), and is read
    whole when its filters together may match or one of them cannot be read."""
    out: list[bool] = []
    start = 0
    for i, flt in enumerate(filters):
        readable = prefilter._valid_size(flt) > 0
        if (readable and flt[1] & 1) or i == len(filters) - 1:
            group = filters[start:i + 1]
            keep = not all(prefilter._valid_size(f) for f in group) or query.may_match_run(group)
            out.extend([keep] * len(group))
            start = i + 1
    return out


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.sampled_from(["ok line\n", "ERROR here\n", "a long li", "ne WARN\n", "tail", "", "junk"]),
                   min_size=1, max_size=30),
    pattern=st.sampled_from(["ERROR", "WARN", "ERROR|WARN", "zzz-absent", "long line", "ok"]),
)
def test_iter_select_answers_groups_with_unbuilt_filters_as_their_definition(parts, pattern):
    """Filters not built yet (prefilter.UNKNOWN) and unreadable ones mixed with built ones:
    iter_select, which answers a group holding one as it goes, equals the definition."""
    filters = []
    for part in parts:
        if part == "":
            filters.append(prefilter.UNKNOWN)
        elif part == "junk":
            filters.append(b"\x07junk")
        else:
            filters.append(prefilter.build(part.encode(), max_bytes=64))
    query = Query.compile(pattern)
    assert list(query.iter_select(filters)) == _select(query, filters) == _groups_reference(query, filters)
