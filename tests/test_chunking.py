"""Content-defined chunking (blobpad/chunking.py) and the manifest, alone and through a store.

Oracles: the input itself (chunks concatenate back to it), Python's UTF-8 decoder and
``bytes.count``, the chunks of the unedited input (an edit may only change chunks
near it), and chunk counts of a store fed the same content another way.
"""

from __future__ import annotations

import functools
import random
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
from blobpad import sample
from blobpad.chunking import KEY_SIZE, ChunkParams, Manifest, chunk_stats, cut_chunks

SMALL = ChunkParams(min_size=64, avg_extra=64, max_size=256)
MEDIUM = ChunkParams(min_size=2048, avg_extra=4096, max_size=32768)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _log(size: int, seed: int = 0) -> bytes:
    return sample.log_text(size, seed).encode()


def _cut(data: bytes, params: ChunkParams, blocks: list[int] | None = None) -> list[bytes]:
    """Chunks of ``data`` fed in blocks of the given sizes (one block when None)."""
    if blocks is None:
        return list(cut_chunks([data], params))
    pieces, pos = [], 0
    for n in blocks:
        pieces.append(data[pos : pos + n])
        pos += n
    pieces.append(data[pos:])
    return list(cut_chunks(iter(pieces), params))


params_st = st.builds(
    lambda lo, extra, span: ChunkParams(lo, extra, lo + span),
    st.integers(1, 300), st.integers(1, 400), st.integers(4, 600),
)
line_st = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=120)
text_st = st.lists(st.tuples(line_st, st.sampled_from(["\n", "\r\n", ""])), max_size=60).map(
    lambda parts: "".join(a + b for a, b in parts)
)
content_st = st.one_of(
    text_st.map(str.encode),
    st.binary(max_size=3000),
    st.builds(lambda n, c: c * n, st.integers(0, 2000), st.sampled_from(["🙂", "é", "日", "a", "a🙂é日"])).map(str.encode),
)


# -- cut_chunks --------------------------------------------------------------------------------


@FAST
@given(data=content_st, params=params_st)
def test_chunks_concatenate_to_the_input_and_respect_the_sizes(data, params):
    chunks = _cut(data, params)
    assert b"".join(chunks) == data
    assert all(chunks), "no empty chunk"
    assert all(len(c) <= params.max_size for c in chunks)
    for c in chunks[:-2]:  # only the last two may be short: the end of an entry is split from the end
        assert len(c) >= min(params.min_size, params.max_size - 3)
    tail = params.min_size // 4
    if chunks and tail:  # the last chunk is short (at most twice min_size / 4), unless it is one long line
        last = chunks[-1]
        assert len(last) <= max(2 * tail, tail + 3) or b"\n" not in last[:-1], (len(last), params)


@FAST
@given(data=content_st, params=params_st, cuts=st.lists(st.integers(0, 700), max_size=12))
def test_cuts_do_not_depend_on_how_the_input_is_split_into_blocks(data, params, cuts):
    assert _cut(data, params, cuts) == _cut(data, params)


@FAST
@given(data=text_st.map(str.encode), params=params_st)
def test_every_chunk_of_valid_text_decodes_on_its_own(data, params):
    chunks = _cut(data, params)
    for c in chunks:
        c.decode("utf-8")  # raises if a cut fell inside a character
    assert sum(chunk_stats(c)[0] for c in chunks) == len(data.decode())


@FAST
@given(data=content_st, params=params_st)
def test_chunks_end_on_a_newline_when_one_is_in_reach(data, params):
    """A non-final chunk ends after a newline whenever a newline lies between min_size
    and max_size bytes from its start (content without newlines is cut anywhere)."""
    chunks = _cut(data, params)
    pos = 0
    for c in chunks[:-1]:
        window = data[pos + params.min_size - 1 : pos + params.max_size]
        if b"\n" in window:
            assert c.endswith(b"\n"), (pos, len(c))
        pos += len(c)


def test_long_lines_are_cut_at_max_size():
    data = b"x" * 10_000
    chunks = _cut(data, SMALL)
    assert [len(c) for c in chunks[:-2]] == [SMALL.max_size] * (len(chunks) - 2)  # then the end, split from the end
    # 4-byte characters: cuts move back to a character boundary, never more than 3 bytes
    emoji = ("a" + "🙂" * 2000).encode()
    chunks = _cut(emoji, SMALL)
    assert all(SMALL.max_size - 3 <= len(c) <= SMALL.max_size for c in chunks[:-2])
    assert "".join(c.decode() for c in chunks) == "a" + "🙂" * 2000


def test_empty_input_gives_no_chunk():
    assert _cut(b"", SMALL) == []
    assert _cut(b"", ChunkParams(), [0, 0, 0]) == []


@pytest.mark.parametrize("line_len", [12, 60, 400, 1500])
def test_chunks_average_min_size_plus_avg_extra_whatever_the_line_lengths(line_len):
    rnd = random.Random(line_len)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 "
    lines, total = [], 0
    while total < 2_500_000:
        n = rnd.randint(line_len // 2, line_len * 3 // 2)
        line = bytes(rnd.choices(alphabet, k=n)) + b"\n"
        lines.append(line)
        total += len(line)
    chunks = _cut(b"".join(lines), MEDIUM)
    mean = total / len(chunks)
    target = MEDIUM.min_size + MEDIUM.avg_extra
    assert 0.7 * target < mean < 1.4 * target, (len(chunks), mean)


def _inserted(data: bytes, line_no: int, line: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join(lines[:line_no]) + line + b"".join(lines[line_no:])


INSERTED = [
    b"2023-11-14T22:13:20.000 WARN  [inserted] one more line\n",
    b"x\n",
    b"\n",
    b"y" * 300 + b"\n",
    "Fehler: ungültige Eingabe 🙂\n".encode(),
]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    where=st.floats(0, 1),
    line=st.sampled_from(INSERTED),
    setup=st.sampled_from([(MEDIUM, 600_000), (ChunkParams(), 3_000_000)]),
)
def test_inserting_one_line_changes_at_most_three_chunks(where, line, setup):
    params, size = setup
    log = _log(size, 10)
    before = set(_cut(log, params))
    n_lines = log.count(b"\n")
    edited = _inserted(log, round(where * n_lines), line)
    new = [c for c in _cut(edited, params) if c not in before]
    assert 1 <= len(new) <= 3


@settings(max_examples=25, deadline=None, derandomize=True)
@given(extra=st.integers(1, 200_000), setup=st.sampled_from([(MEDIUM, 600_000), (ChunkParams(), 3_000_000)]))
def test_appending_changes_only_the_tail(extra, setup):
    params, size = setup
    log = _log(size, 12)
    grown = log + _log(extra, 13)
    old, new = _cut(log, params), _cut(grown, params)
    assert new[: len(old) - 2] == old[:-2], "every chunk but the old last two is reused"


def test_the_last_chunk_is_cut_from_the_end_and_survives_edits_before_it():
    params = ChunkParams()
    tail = params.min_size // 4
    log = _log(3_000_000, 21)
    chunks = _cut(log, params)
    assert len(chunks[-1]) <= 2 * tail and chunks[-2].endswith(b"\n")
    assert _cut(log, params, [1000, 700_000]) == chunks  # the same whatever the blocks
    edited = _inserted(log, log.count(b"\n") // 2, b"one more line\n")
    assert _cut(edited, params)[-1] == chunks[-1]
    # a last line longer than the tail: cut before it, at a line boundary
    long_last = log + b"z" * (3 * tail)
    cut = _cut(long_last, params)
    assert cut[-1] == b"z" * (3 * tail) and cut[-2].endswith(b"\n")
    # no newline at all (minified JSON, binary): the last tail bytes
    blob = bytes(b for b in range(256) if b != 10) * 2000
    assert tail - 3 <= len(_cut(blob, params)[-1]) <= tail + 3  # moved to a UTF-8 boundary, as every forced cut


# -- chunk_stats and the manifest ------------------------------------------------------------------


@FAST
@given(data=content_st)
def test_chunk_stats_counts_characters_and_newlines(data):
    chars, newlines = chunk_stats(data)
    assert newlines == data.count(b"\n")
    try:
        expected = len(data.decode("utf-8"))
    except UnicodeDecodeError:
        expected = None
    assert chars == expected


@FAST
@given(sizes=st.lists(st.integers(1, 10_000), max_size=40), seed=st.integers(0, 1000))
def test_manifest_packs_round_trip_and_finds_chunks(sizes, seed):
    rnd = random.Random(seed)
    keys = [rnd.randbytes(KEY_SIZE) for _ in sizes]
    chars = [max(1, s - rnd.randrange(4)) for s in sizes]
    newlines = [rnd.randrange(5) for _ in sizes]
    m = Manifest.build(keys, sizes, chars, newlines)
    back = Manifest.unpack(m.pack())
    assert back.keys == keys and len(back) == len(sizes)
    for got, parts in ((back.bytes_at, sizes), (back.chars_at, chars), (back.lines_at, newlines)):
        assert list(got) == [sum(parts[:i]) for i in range(len(parts) + 1)]
    for _ in range(20):
        if not sizes:
            break
        pos = rnd.randrange(sum(sizes))
        i = back.chunk_of(back.bytes_at, pos)
        assert back.bytes_at[i] <= pos < back.bytes_at[i + 1]
    with pytest.raises(ValueError):
        Manifest.unpack(m.pack()[:-1])


def test_manifest_of_no_chunk():
    m = Manifest.build([], [], [], [])
    back = Manifest.unpack(m.pack())
    assert len(back) == 0 and list(back.bytes_at) == [0] and isinstance(back.bytes_at, array)


# -- parameters ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lo", "extra", "hi"), [(0, 1, 10), (10, 1, 10), (11, 1, 10), (1, 0, 10), (-1, 5, 10)])
def test_chunk_params_are_validated(lo, extra, hi):
    with pytest.raises(ValueError):
        ChunkParams(lo, extra, hi)


def test_a_store_keeps_the_chunk_params_it_was_created_with(tmp_path):
    path = tmp_path / "s"
    with blobpad.open(path, chunk_params=SMALL) as s:
        assert s.chunk_params == SMALL
        a = s.put(_log(20_000, 1), ttl=None)
    with blobpad.open(path, chunk_params=ChunkParams()) as s:
        assert s.chunk_params == SMALL
        chunks = s.stats().chunks
        b = s.put(_log(20_000, 1), ttl=None)
        assert b.chunks == a.chunks == len(_cut(_log(20_000, 1), SMALL))
        assert s.stats().chunks == chunks  # same cuts, so nothing new to store


# -- through the store -------------------------------------------------------------------------------


class _Trickle:
    """A file object handing out its content in small, irregular reads."""

    def __init__(self, data: bytes, seed: int) -> None:
        self.data = data
        self.pos = 0
        self.rnd = random.Random(seed)

    def read(self, n: int = -1) -> bytes:
        take = min(n, self.rnd.choice([1, 7, 63, 64, 65, 255, 256, 257, 1000, 5000]))
        out = self.data[self.pos : self.pos + take]
        self.pos += len(out)
        return out


@pytest.mark.parametrize(
    "data",
    [_log(30_000, 3), sample.multibyte_text(30_000, 2).encode(), ("🙂é" * 9000).encode(), sample.binary_blob(30_000)],
    ids=["log", "multibyte", "one-long-line", "binary"],
)
def test_store_cuts_streams_and_bytes_the_same_way(store_factory, data):
    s = store_factory(chunk_params=SMALL)
    whole = s.put(data)
    stored = s.stats()
    streamed = s.put(_Trickle(data, seed=len(data)))
    assert streamed.chunks == whole.chunks == len(_cut(data, SMALL))
    assert streamed.sha256 == whole.sha256 and streamed.kind == whole.kind
    assert (s.stats().chunks, s.stats().stored_bytes) == (stored.chunks, stored.stored_bytes)
    got = s.get(streamed.id)
    assert (got.encode() if isinstance(got, str) else got) == data


@pytest.mark.parametrize("max_size", [2, 3, 4, 5, 8, 16])
def test_valid_utf8_is_text_whatever_the_chunk_params(store_factory, max_size):
    """Kind follows UTF-8 validity of the whole content, not of the chunks it was cut into."""
    s = store_factory(chunk_params=ChunkParams(min_size=1, avg_extra=1, max_size=max_size))
    text = "🙂a🙂é日🙂" * 5
    e = s.put(text)
    assert e.kind == "text", f"valid UTF-8 stored as {e.kind} with max_size={max_size}"
    assert e.chars == len(text)
    assert s.get(e.id) == text
    assert s.put(text.encode(), kind="text").kind == "text"
