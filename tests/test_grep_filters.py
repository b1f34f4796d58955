"""grep and count with the per-chunk trigram filters (blobpad.prefilter) that put stores.

The filters must never hide a match: grep's matching lines and count equal ripgrep's on
the same bytes (Python's ``re`` when rg is missing), over random contents and patterns
with small chunks (many boundaries, lines longer than a chunk, matches across cuts),
multibyte text, CRLF, binary content, case-insensitive matching, alternations and regular
expressions with and without required literals.  Then what they save (an absent literal
reads no chunk), their life cycle (deleted with their entry, counted in stats), and what a
reader does without them (a damaged record, an entry put before filters existed).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import tempfile
import time

import lmdb
import pytest
from conftest import oracle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
from blobpad import prefilter, sample
from blobpad.chunking import Manifest
from blobpad.put import FILTER_SHARE
from blobpad.view import chunk_list_blob

SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
RG = oracle("rg")
#: how filters are checked: by the loop over chunks (from 10**9 chunks on numpy is used), or
#: by numpy arrays from the first chunk, in blocks of 1, 2 or the default number of chunks
CHECKS = st.sampled_from([(10**9, prefilter.BLOCK), (1, 1), (1, 2), (1, prefilter.BLOCK)])

# pieces of random content: words that patterns look for, case variants, multibyte
# characters (some with case variants, some caseless), CRLF, separators
PIECES = ["ERROR", "error", "Error", "fail", "FAILED", "failure", "ok", "req=", "id-42", "abc", "ABC", "xyz",
          "é", "É", "ß", "Σ", "σ", "ς", "日本", "語", "🙂", "k", "K", "s", "ſ", "i", "İ", "ı", " ", " ", "  ", "-",
          "0", "17", "255", "\t", "\r\n", "\n", "\n", "\n"]
TEMPLATES = ["ERROR", "error|fail(ed|ure)", "(ERROR|WARN)", "fail.*ok", "req=[0-9a-f]+", "[a-c]{3}", "日本語?",
             "^ok", "ok$", "ok\r$", "Σ+", "ß", "k+s", "id-4[0-9]", "x.z", "a[bB]c", "\\d{3}", "(?i)failure",
             "ab?c", "colou?r", "ERR(OR)?", ".", "^$", "[^a]bc", "é", "İ", "ſ"]


@st.composite
def contents(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.sampled_from(PIECES), min_size=0, max_size=400))
    text = "".join(parts)
    if draw(st.booleans()):  # a line longer than the largest chunk: cuts inside a line
        at = draw(st.integers(0, len(text)))
        run = "".join(draw(st.lists(st.sampled_from([p for p in PIECES if "\n" not in p]), min_size=100,
                                    max_size=400)))
        text = text[:at] + run + text[at:]
    data = text.encode()
    if draw(st.integers(0, 5)) == 0:  # not UTF-8: a binary entry
        at = draw(st.integers(0, len(data)))
        data = data[:at] + b"\xff\xfe" + data[at:]
    return data


@st.composite
def patterns(draw: st.DrawFn, data: bytes, cuts: list[int]) -> str:
    """A template, a piece of the content across a chunk cut inside a line (``cuts``: where
    chunks start), another piece of it, or two pieces of it."""
    inside = [c for c in cuts if 0 < c < len(data) and data[c - 1] != 10 and data[c] != 10]
    if inside and draw(st.integers(0, 2)) == 0:
        cut = draw(st.sampled_from(inside))
        lo = max(data.rfind(b"\n", 0, cut) + 1, cut - draw(st.integers(1, 6)))
        hi = data.find(b"\n", cut)
        hi = min(len(data) if hi < 0 else hi, cut + draw(st.integers(1, 6)))
        piece = data[lo:hi].decode("utf-8", "ignore")
        if len(piece) >= 3:
            return re.escape(piece)
    text = data.decode("utf-8", "replace").replace("\ufffd", "")
    kind = draw(st.integers(0, 3))
    if kind == 0 or len(text) < 4:
        return draw(st.sampled_from(TEMPLATES))
    starts = st.integers(0, len(text) - 3)
    a = draw(starts)
    lit = text[a : a + draw(st.integers(3, 14))].split("\n")[0] or "ok"
    if kind == 1:
        return re.escape(lit) if draw(st.booleans()) else lit  # fixed=True, or a literal regex
    b = draw(starts)
    other = text[b : b + draw(st.integers(3, 10))].split("\n")[0] or "ERROR"
    if kind == 2:
        return f"{re.escape(lit)}|{re.escape(other)}"
    return f"{re.escape(lit)}.*{re.escape(other)}"


def _oracle_lines(data: bytes, pattern: str, ignore_case: bool, fixed: bool) -> list[int]:
    """The numbers of the matching lines: rg's, or Python's re on the decoded lines."""
    if RG is not None:
        with tempfile.NamedTemporaryFile(suffix=".txt") as f:
            f.write(data)
            f.flush()
            flags = (["-i"] if ignore_case else []) + (["-F"] if fixed else [])
            proc = subprocess.run([RG, "--no-config", "-a", "-E", "none", "--json", *flags, "-e", pattern, f.name],
                                  capture_output=True)
        assert proc.returncode in (0, 1), proc.stderr.decode()
        return sorted(json.loads(row)["data"]["line_number"] for row in proc.stdout.splitlines()
                      if json.loads(row)["type"] == "match")
    rx = re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [i for i, line in enumerate(lines, 1) if rx.search(line.decode("utf-8", "surrogateescape"))]


def _draw_search(data: st.DataObject, s: blobpad.Store, e: blobpad.Entry, content: bytes) -> tuple[str, bool, bool]:
    """A pattern for ``content`` (:func:`patterns`), ignore_case, and fixed (set when Python's
    ``re``, the oracle's fallback, cannot read the pattern)."""
    pattern = data.draw(patterns(content, _cuts(s, e)))
    ignore_case, fixed = data.draw(st.booleans()), data.draw(st.booleans())
    try:
        re.compile(pattern)
    except re.error:
        fixed = True
    return pattern, ignore_case, fixed


def _cuts(s: blobpad.Store, e: blobpad.Entry) -> list[int]:
    """Where the entry's chunks start (from its chunk list)."""
    with s.engine.read() as txn:
        return list(Manifest.unpack(chunk_list_blob(txn, _raw_id(e))).bytes_at)


@pytest.mark.parametrize("share", [FILTER_SHARE, 100.0], ids=["filters-capped", "filters-uncapped"])
@SETTINGS
@given(data=st.data())
def test_grep_and_count_with_filters_equal_the_oracle(store_factory, monkeypatch, share, data):
    """Against rg, and against the same grep on the same content without filters.  Capped at
    3% of a small chunk's compressed size, a filter is a few bytes that exclude little;
    uncapped (a test setting), it excludes much more, so that a filter missing a trigram
    shows as a missed match."""
    monkeypatch.setattr(blobpad.put, "FILTER_SHARE", share)
    vector_min, block = data.draw(CHECKS)
    monkeypatch.setattr(prefilter, "VECTOR_MIN", vector_min)
    monkeypatch.setattr(prefilter, "BLOCK", block)
    s = store_factory(filters=True, chunk_params=SMALL, cache_bytes=0)
    plain = store_factory("plain", chunk_params=SMALL, cache_bytes=0, filters=False)  # never any filters
    content = data.draw(contents())
    entry = s.put(content)
    unfiltered = plain.put(content)
    plain.engine.write(lambda txn: txn.delete("filters", _raw_id(unfiltered)))
    for _ in range(4):
        pattern, ignore_case, fixed = _draw_search(data, s, entry, content)
        expected = _oracle_lines(content, pattern, ignore_case, fixed)
        got = s.grep(entry.id, pattern, ignore_case=ignore_case, fixed=fixed, max_matches=10**6)
        whole = plain.grep(unfiltered.id, pattern, ignore_case=ignore_case, fixed=fixed, max_matches=10**6)
        assert whole.chunks_read == entry.chunks
        assert [m.line for m in got] == [m.line for m in whole], (pattern, ignore_case, fixed)
        assert [m.line for m in got] == expected, (pattern, ignore_case, fixed)
        rows = content.split(b"\n")
        decode = (lambda b: b.decode()) if entry.kind == "text" else (lambda b: b.decode("utf-8", "replace"))
        every = s.matching_lines(entry.id, pattern, ignore_case=ignore_case, fixed=fixed)
        assert every.lines == [(n, decode(rows[n - 1])) for n in expected], (pattern, ignore_case, fixed)
        # under a budget the search runs over runs of lines sized by the measured speed (the
        # first of 1 KB), and lines longer than a run one by one: the same lines
        timed = s.matching_lines(entry.id, pattern, ignore_case=ignore_case, fixed=fixed, timeout=600)
        assert not timed.timed_out and timed.lines == every.lines, (pattern, ignore_case, fixed)
        assert every.lines == [(m.line, m.text) for m in plain.grep(
            unfiltered.id, pattern, ignore_case=ignore_case, fixed=fixed, max_matches=10**6, line_window=10**9)]
        counted = s.count(entry.id, pattern, ignore_case=ignore_case, fixed=fixed)
        assert counted == len(expected), (pattern, ignore_case, fixed)
        assert got.chunks_total == counted.chunks_total == entry.chunks
        assert 0 <= got.chunks_read <= entry.chunks and 0 <= counted.chunks_read <= entry.chunks
        if not expected:
            continue
        first = s.grep(entry.id, pattern, ignore_case=ignore_case, fixed=fixed, max_matches=1, before=1, after=1)
        assert [m.line for m in first] == expected[:1]


def _rare_log(size: int) -> tuple[str, list[int]]:
    """A generated log of about ``size`` bytes with a rare token on two lines (their numbers)."""
    lines = sample.log_text(size, 5).split("\n")
    marked = [len(lines) // 3, 2 * len(lines) // 3]
    for i in marked:
        lines[i] += " request_id=7f3a9c2e-rare-token"
    return "\n".join(lines), [i + 1 for i in marked]


def test_an_absent_literal_reads_no_chunk_and_a_rare_one_only_its_chunks(store_factory):
    s = store_factory(filters=True, cache_bytes=0)
    text, marked = _rare_log(5_000_000)
    e = s.put(text)
    assert e.chunks >= 19
    start = s.codec.decompressed
    assert s.count(e.id, "NoSuchExceptionAnywhere") == 0
    g = s.grep(e.id, "NoSuchExceptionAnywhere")
    assert not g.matches and (g.chunks_read, g.chunks_total) == (0, e.chunks)
    assert s.grep(e.id, "nosuchexceptionanywhere", ignore_case=True).chunks_read == 0
    assert s.grep(e.id, "NoSuch(Exception|Error)Anywhere").chunks_read == 0
    s.codec.settle()
    assert s.codec.decompressed == start  # nothing decompressed at all
    g = s.grep(e.id, "7f3a9c2e-rare-token", fixed=True)
    c = s.count(e.id, "request_id=[0-9a-f]+-rare-token")
    assert [m.line for m in g] == marked and c == 2
    assert 2 <= g.chunks_read <= 4 and 2 <= c.chunks_read <= 4, (g.chunks_read, c.chunks_read)
    full = s.count(e.id, "[0-9]{30}")  # no literal: every chunk read
    assert full == 0 and full.chunks_read == e.chunks


def test_filters_are_counted_and_deleted_with_their_entries(store_factory):
    """Deleted with their entry on every path: delete, a named replace, expiry and gc."""
    s = store_factory(filters=True, chunk_params=SMALL)
    assert s.stats().filter_bytes == 0
    a = s.put(sample.log_text(40_000, 1))
    one = s.stats().filter_bytes
    assert one > 0
    b = s.put(sample.log_text(40_000, 2), name="n")
    two = s.stats().filter_bytes
    assert two > one
    c = s.put(sample.log_text(40_000, 3), name="n")  # replaces b: b's filters go
    assert b.id not in {e.id for e in s.entries()}
    assert s.stats().filter_bytes == one + _record_bytes(s, c)
    s.delete(a.id)
    assert s.stats().filter_bytes == _record_bytes(s, c)
    s.put(sample.log_text(40_000, 4), ttl=0.001)
    time.sleep(0.01)
    assert s.gc().entries == 1  # the expired entry and its filters
    assert s.stats().filter_bytes == _record_bytes(s, c)
    s.delete(c.id)
    s.gc()
    st_ = s.stats()
    assert (st_.filter_bytes, st_.entries) == (0, 0) and "filter_bytes" in st_.to_dict()
    assert s.verify().ok


def _record_bytes(s: blobpad.Store, e: blobpad.Entry) -> int:
    with s.engine.read() as txn:
        return len(txn.get("filters", _raw_id(e)) or b"")


def test_whole_content_duplicates_share_their_filters(store_factory):
    s = store_factory(filters=True, cache_bytes=0)
    text = sample.log_text(600_000, 4)
    a = s.put(text)
    once = s.stats().filter_bytes
    b = s.put(text)  # shares a's chunks without cutting them again
    assert s.stats().filter_bytes == 2 * once
    s.delete(a.id)
    g = s.grep(b.id, "NoSuchExceptionAnywhere")
    assert not g.matches and g.chunks_read == 0
    assert s.count(b.id, "INFO") == text.count("INFO")
    assert s.verify().ok


def _raw_id(entry: blobpad.Entry) -> bytes:
    return bytes.fromhex(entry.id)


def _filtered_entry(store_factory):
    """A store with filters, an entry of a rare-token log in it, its raw id and its filter record."""
    s = store_factory(filters=True, chunk_params=SMALL, cache_bytes=0)
    text, marked = _rare_log(60_000)
    e = s.put(text)
    key = _raw_id(e)
    with s.engine.read() as txn:
        good = txn.get("filters", key)
    assert good is not None
    return s, e, key, good, marked


def test_a_damaged_filter_record_reads_every_chunk_and_verify_names_it(store_factory):
    s, e, key, good, marked = _filtered_entry(store_factory)
    # a flipped bit under the checksum (written past the checks, as damage on disk would be)
    s.engine.engine.write(lambda raw: raw.put("filters", key, bytes([good[0] ^ 1]) + good[1:] + b"\0" * 8))
    g = s.grep(e.id, "7f3a9c2e-rare-token")
    assert [m.line for m in g] == marked and g.chunks_read == e.chunks
    assert s.count(e.id, "7f3a9c2e-rare-token") == 2
    report = s.verify()
    assert not report.ok and any("filters" in p and "damaged" in p for p in report.problems)
    assert e.id not in report.damaged_entries  # the content is sound
    s.delete(e.id)  # a damaged record goes with its entry, and its bytes leave the counters
    s.gc()
    assert s.stats().filter_bytes == 0 and s.verify().ok


def test_a_filter_record_that_does_not_fit_its_entry_is_ignored_and_reported(store_factory):
    s, e, key, good, marked = _filtered_entry(store_factory)
    # a sealed record of one filter fewer than the entry has chunks
    s.engine.write(lambda txn: txn.put("filters", key, prefilter.pack(prefilter.unpack(good, e.chunks)[:-1])))
    g = s.grep(e.id, "7f3a9c2e-rare-token")
    assert [m.line for m in g] == marked and g.chunks_read == e.chunks
    assert any("chunk filters do not match" in p for p in s.verify().problems)


def test_an_entry_without_filters_reads_every_chunk(store_factory):
    """An entry without a record (put before filters existed, or by a store that never
    builds them): grep and count read all of it."""
    s = store_factory(filters=False, chunk_params=SMALL, cache_bytes=0)
    text, marked = _rare_log(60_000)
    e = s.put(text)
    for _ in range(2):
        g = s.grep(e.id, "7f3a9c2e-rare-token")
        assert [m.line for m in g] == marked and g.chunks_read == e.chunks
        c = s.count(e.id, "rare-token|NoSuchThing")
        assert c == 2 and c.chunks_read == e.chunks
    assert s.stats().filter_bytes == 0
    s.delete(e.id)


@pytest.mark.engines("lmdb")
def test_a_store_written_before_filters_opens_and_reads(tmp_path):
    """A store without the filters keyspace (dropped here with the lmdb module) opens, its
    entries read whole until a search has built their filters, and new puts get filters."""
    path = tmp_path / "old"
    text, marked = _rare_log(200_000)
    with blobpad.open(path, chunk_params=SMALL, cache_bytes=0, filters=True) as s:
        e = s.put(text)
    env = lmdb.open(str(path), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"filters", txn=txn, create=False), delete=True)
    with env.begin() as txn:
        assert b"filters" not in {bytes(k) for k, _ in txn.cursor()}
    env.close()
    with blobpad.open(path, cache_bytes=0, filters=True) as s:
        g = s.grep(e.id, "7f3a9c2e-rare-token")  # reads it whole, and builds its filters
        assert [m.line for m in g] == marked and g.chunks_read == e.chunks
        assert s.grep(e.id, "7f3a9c2e-rare-token").chunks_read < e.chunks
        new = s.put(text + "\nmore\n")
        assert s.grep(new.id, "7f3a9c2e-rare-token").chunks_read < new.chunks


def test_binary_entries_are_filtered_too(store_factory):
    s = store_factory(filters=True, chunk_params=SMALL, cache_bytes=0)
    data = b"".join(b"\xff\x00 record %d payload\n" % i for i in range(3000)) + b"\xfe needle-in-binary \xff\n"
    e = s.put(data)
    assert e.kind == "binary"
    g = s.grep(e.id, "needle-in-binary")
    assert [m.line for m in g] == [3001] and g.chunks_read <= 3
    assert s.count(e.id, "NEEDLE-IN", ignore_case=True) == 1


def test_filters_round_trip_and_refuse_what_does_not_fit():
    filters = [prefilter.build(b"one line\n"), prefilter.build(b"x" * 300, b"yz"), b""]
    packed = prefilter.pack(filters)
    assert prefilter.unpack(packed, 3) == filters
    assert prefilter.unpack(packed, 2) is None and prefilter.unpack(packed[:-1], 3) is None
    assert prefilter.unpack(b"", 0) is None and prefilter.unpack(prefilter.pack([]), 0) == []


@pytest.mark.parametrize("share", [FILTER_SHARE, 100.0], ids=["filters-capped", "filters-uncapped"])
def test_every_filter_holds_the_trigrams_that_cross_into_the_next_chunk(store_factory, monkeypatch, share):
    """Lines longer than a chunk over several of the put's pool tasks (the first is 256 KB):
    at every cut inside a line, including those between two tasks, the filter of the chunk
    before it passes the trigrams that start in it and end in the next chunk."""
    monkeypatch.setattr(blobpad.put, "FILTER_SHARE", share)
    s = store_factory(filters=True, chunk_params=SMALL, cache_bytes=0)
    rng = random.Random(7)
    data = b"".join(bytes(rng.choices(b"abcdefghjlmnopqrtuvwxyz", k=rng.randint(300, 1500))) + b"\n"
                    for _ in range(1500))
    e = s.put(data)
    cuts = _cuts(s, e)
    with s.engine.read() as txn:
        filters = prefilter.unpack(txn.get("filters", _raw_id(e)), e.chunks)
    assert filters is not None and len(cuts) == e.chunks + 1 and cuts[-1] == len(data) > 1 << 20
    checked = 0
    for i, cut in enumerate(cuts[1:-1]):
        if data[cut - 1] == 10:
            continue
        for start in (cut - 2, cut - 1):
            gram = data[start : start + 3].decode()
            if "\n" not in gram:
                assert prefilter.Query.compile(gram, fixed=True).may_match(filters[i]), (i, cut, gram)
                checked += 1
    assert checked > 4000


def _tiny_chunks_never_hide_a_match(store_factory, monkeypatch, max_size: int, size: int) -> None:
    monkeypatch.setattr(blobpad.put, "FILTER_SHARE", 100.0)  # filters exclude all they can
    params = blobpad.ChunkParams(min_size=1, avg_extra=1, max_size=max_size)
    s = store_factory(filters=True, chunk_params=params, cache_bytes=0)
    plain = store_factory("plain", filters=False, chunk_params=params, cache_bytes=0)
    rng = random.Random(max_size)
    text = "".join(rng.choice(("b", "b", "é", "x", "€", "\n" if rng.random() < 0.05 else "b")) for _ in range(size // 2))
    data = text.encode()
    e, whole = s.put(data), plain.put(data)
    for needle in ("bbé", "bé", "éb", "béx", "€bb", "xé€", "bbbb", "é€x"):
        expected = _oracle_lines(data, needle, False, True)
        assert expected, needle
        assert [m.line for m in s.grep(e.id, needle, fixed=True, max_matches=10**6)] == expected, needle
        assert [m.line for m in plain.grep(whole.id, needle, fixed=True, max_matches=10**6)] == expected, needle
        assert s.count(e.id, needle, fixed=True) == len(expected), needle


@pytest.mark.parametrize("max_size", [2, 3, 4])
def test_filters_of_chunks_shorter_than_a_trigram_never_hide_a_match(store_factory, monkeypatch, max_size):
    """Chunks of a byte or two (tiny chunk sizes, a cut moved back off a UTF-8 character):
    a chunk's filter takes the bytes after it from as many chunks as it takes, so a
    trigram over three chunks is in the filter of the first.  Oracle: rg, and the same
    store without filters."""
    _tiny_chunks_never_hide_a_match(store_factory, monkeypatch, max_size, 3_000)


@pytest.mark.engines("lmdb")  # the put's cutting is the same on every engine; 130,000 chunks cost minutes on Redis
def test_the_filter_before_a_pool_tasks_end_takes_its_spill_from_the_chunks_after(store_factory, monkeypatch):
    """The put hands its first pool task over after 256 KB; here ASCII cuts into 2-byte
    chunks up to there, and the chunk after the task is one byte (the cut backs off an
    "é"), so the task's last filter needs bytes of two chunks after it.  Oracle: every
    stored filter is the one built from its chunk and the two bytes after it."""
    monkeypatch.setattr(blobpad.put, "FILTER_SHARE", 100.0)  # no cap: a filter is its chunk's and spill's alone
    params = blobpad.ChunkParams(min_size=1, avg_extra=1, max_size=2)
    s = store_factory(filters=True, chunk_params=params, cache_bytes=0)
    rng = random.Random(3)
    data = bytes(rng.choices(b"abcdefgh", k=256 << 10)) + "xé".encode() + bytes(rng.choices(b"abcdefgh", k=4000))
    e = s.put(data)
    cuts = _cuts(s, e)
    k = cuts.index(256 << 10)
    assert cuts[k + 1] - cuts[k] == 1 and all(b - a == 2 for a, b in zip(cuts[:k], cuts[1:k + 1], strict=True))  # as designed
    with s.engine.read() as txn:
        filters = prefilter.unpack(txn.get("filters", _raw_id(e)), e.chunks)
    assert filters is not None
    for i in range(e.chunks):
        assert filters[i] == prefilter.build(data[cuts[i]:cuts[i + 1]], data[cuts[i + 1]:cuts[i + 1] + 2]), i
    assert s.count(e.id, data[(256 << 10) - 1:(256 << 10) + 1].decode() + "é", fixed=True) == 1


def test_a_put_whose_filters_outgrow_their_cap_keeps_none(store_factory, monkeypatch):
    monkeypatch.setattr(blobpad.put, "FILTER_RECORD_MAX", 200)
    s = store_factory(filters=True, chunk_params=SMALL, cache_bytes=0)
    text, marked = _rare_log(60_000)
    e = s.put(text)
    assert _record_bytes(s, e) == 0 and s.stats().filter_bytes == 0
    g = s.grep(e.id, "7f3a9c2e-rare-token")
    assert [m.line for m in g] == marked and g.chunks_read == e.chunks
    assert s.verify().ok


def test_filters_are_a_saved_choice_of_the_store(store_factory):
    """Built by searches only in a new store; filters=True is saved for every later opening;
    False turns them off for the puts and searches after (the entries that have filters keep
    them); anything else is refused."""
    text = "".join(f"line {i} ok\n" for i in range(60_000))
    store_factory("choice")  # held open to the end: a memory store lives while one holder has it
    s = store_factory("choice", cache_bytes=0)
    assert s.filters is False
    plain = s.put(text, session="s")
    assert s.stats().filter_bytes == 0 and s.count(plain.id, "zq-absent-literal-qz").chunks_read == plain.chunks
    s.close()
    s = store_factory("choice", filters=True, cache_bytes=0)
    filtered = s.put(text + "more\n", session="s")
    assert s.filters is True and s.stats().filter_bytes > 0
    assert s.count(filtered.id, "zq-absent-literal-qz").chunks_read <= filtered.chunks // 4  # the filters exclude
    s.close()
    s = store_factory("choice", cache_bytes=0)  # None keeps the saved choice
    assert s.filters is True
    s.close()
    s = store_factory("choice", filters=False, cache_bytes=0)
    late = s.put(text + "later\n", session="s")
    assert s.filters is False and s.count(late.id, "zq-absent-literal-qz").chunks_read == late.chunks
    assert s.count(filtered.id, "zq-absent-literal-qz").chunks_read <= filtered.chunks // 4
    for bad in ("yes", 1, 0.5):
        with pytest.raises(blobpad.InvalidArgument):
            store_factory("other", filters=bad)


# -- filters built by the searches (the default: filters=None) ---------------------------


def test_the_first_search_reading_every_chunk_builds_the_filters(store_factory):
    """In a store that does not build them at put, the first grep or count that reads every
    chunk of an entry builds its filters on the way and keeps them: the next search of an
    absent literal reads nothing, answers stay the oracle's, verify() finds them sound, and
    they go with their entry."""
    s = store_factory(cache_bytes=0)
    assert s.filters is False  # not built at put
    text, marked = _rare_log(5_000_000)
    e = s.put(text)
    assert s.stats().filter_bytes == 0
    first = s.count(e.id, "NoSuchExceptionAnywhere")
    assert first == 0 and first.chunks_read == e.chunks
    kept = s.stats().filter_bytes
    assert 0 < kept <= 0.03 * s.stats().stored_bytes + 13 * e.chunks
    for _ in range(2):
        g = s.grep(e.id, "NoSuchExceptionAnywhere")
        assert not g.matches and g.chunks_read == 0
    g = s.grep(e.id, "7f3a9c2e-rare-token", fixed=True)
    assert [m.line for m in g] == marked and 2 <= g.chunks_read <= 4
    assert s.count(e.id, "ok|request_id") == len(_oracle_lines(text.encode(), "ok|request_id", False, False))
    assert s.stats().filter_bytes == kept  # built once
    assert s.verify().ok
    s.delete(e.id)
    assert s.stats().filter_bytes == 0


def test_a_search_builds_the_filters_a_put_builds(store_factory):
    """Where every chunk ends a line, the record a first search keeps is the one a put with
    filters=True writes: the same filter per chunk, within the same share of its size."""
    text = sample.log_text(2_000_000, 3)
    at_put = store_factory("put", filters=True, cache_bytes=0)
    by_search = store_factory("search", cache_bytes=0)
    a, b = at_put.put(text), by_search.put(text)
    assert by_search.count(b.id, "zq-absent").chunks_read == b.chunks
    records = []
    for s, e in ((at_put, a), (by_search, b)):
        with s.engine.read() as txn:
            records.append(prefilter.unpack(txn.get("filters", _raw_id(e)), e.chunks))
    assert records[0] is not None and records[0] == records[1]


def test_a_search_that_stops_early_keeps_the_filters_of_what_it_read(store_factory):
    """grep stops at its max_matches: the filters of the chunks it read are kept, the
    others are built by the next search that reads them (merged into the same record),
    and from then on an absent literal reads nothing."""
    s = store_factory(cache_bytes=0)
    text, marked = _rare_log(3_000_000)
    e = s.put(text)
    assert e.chunks >= 10
    g = s.grep(e.id, "INFO|WARN|ERROR", max_matches=3)
    assert len(g.matches) == 3 and g.truncated and g.chunks_read < e.chunks
    partial = s.stats().filter_bytes
    assert partial > 0
    second = s.count(e.id, "NoSuchExceptionAnywhere")
    assert second == 0 and 0 < second.chunks_read < e.chunks  # the chunks with filters are skipped
    assert s.stats().filter_bytes > partial
    assert s.count(e.id, "NoSuchExceptionAnywhere").chunks_read == 0
    g = s.grep(e.id, "7f3a9c2e-rare-token", max_matches=5)
    assert [m.line for m in g] == marked and g.chunks_read < e.chunks
    assert s.verify().ok


def test_grep_session_builds_the_filters_of_the_entries_it_reads_whole(store_factory):
    s = store_factory(cache_bytes=0)
    text, marked = _rare_log(1_000_000)
    a = s.put(text, session="s", name="a.log")
    b = s.put(text + "tail\n", session="s", name="b.log")
    r = s.grep_session("s", "NoSuchExceptionAnywhere")
    assert not r.matches and r.searched_entries == 2
    for e in (a, b):
        assert s.count(e.id, "NoSuchExceptionAnywhere").chunks_read == 0
    r = s.grep_session("s", "7f3a9c2e-rare-token", fixed=True)
    assert sorted((m.entry_id, m.line) for m in r.matches) == sorted((e.id, n) for e in (a, b) for n in marked)


def test_a_search_builds_no_filter_for_a_chunk_cut_inside_a_line(store_factory):
    """A chunk that ends inside a line (a line longer than the largest chunk) needs the next
    chunk's first bytes in its filter: only a put builds it.  A search builds the others;
    the chunks of the long line are read by every search, and its matches are found."""
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    text = "short line\n" * 200 + "x" * 2000 + " needle-zq\n" + "short line\n" * 200
    e = s.put(text)
    first = s.count(e.id, "zq-absent")
    assert first == 0 and first.chunks_read == e.chunks
    assert s.stats().filter_bytes > 0
    again = s.count(e.id, "zq-absent")
    assert again == 0 and 7 <= again.chunks_read < e.chunks  # the long line's chunks (>= 2000 / 256)
    assert [m.line for m in s.grep(e.id, "needle-zq")] == [201]
    assert s.count(e.id, "x{100} needle-zq$") == 1


def test_filters_false_means_no_search_builds_any(store_factory):
    s = store_factory(filters=False, cache_bytes=0)
    text, _ = _rare_log(1_000_000)
    e = s.put(text)
    for _ in range(2):
        assert s.count(e.id, "NoSuchExceptionAnywhere").chunks_read == e.chunks
    assert s.stats().filter_bytes == 0


def test_without_numpy_searches_build_no_filters(store_factory, monkeypatch):
    """The pure-Python builder is about 50 times slower than decompressing: a search does
    not pay it (a put with filters=True still does, as asked)."""
    monkeypatch.setattr(blobpad.prefilter, "FAST", False)
    s = store_factory(cache_bytes=0)
    text, _ = _rare_log(300_000)
    e = s.put(text)
    for _ in range(2):
        assert s.count(e.id, "NoSuchExceptionAnywhere").chunks_read == e.chunks
    assert s.stats().filter_bytes == 0


@pytest.mark.parametrize("share", [prefilter.SHARE, 100.0], ids=["filters-capped", "filters-uncapped"])
@SETTINGS
@given(data=st.data())
def test_filters_built_by_a_search_never_hide_a_match(store_factory, monkeypatch, share, data):
    """The same property as for the filters of a put, with filters a first full count built."""
    monkeypatch.setattr(blobpad.prefilter, "SHARE", share)
    vector_min, block = data.draw(CHECKS)
    monkeypatch.setattr(prefilter, "VECTOR_MIN", vector_min)
    monkeypatch.setattr(prefilter, "BLOCK", block)
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    content = data.draw(contents())
    before = s.stats().filter_bytes  # the fixture's store lives through every example (a twin shares its filters)
    entry = s.put(content)
    s.count(entry.id, "zq-absent-qz")  # reads every chunk: builds the filters, but of chunks ending inside a line
    assert (s.stats().filter_bytes > before) == (entry.chunks > 0)  # the last chunk's, at least
    for _ in range(4):
        pattern, ignore_case, fixed = _draw_search(data, s, entry, content)
        expected = _oracle_lines(content, pattern, ignore_case, fixed)
        got = s.grep(entry.id, pattern, ignore_case=ignore_case, fixed=fixed, max_matches=10**6)
        assert [m.line for m in got] == expected, (pattern, ignore_case, fixed)
        assert s.count(entry.id, pattern, ignore_case=ignore_case, fixed=fixed) == len(expected)


def _re2_lines(data: bytes, pattern: str) -> list[int]:
    """The numbers of the lines RE2 matches when given each line alone (no newline)."""
    import re2  # noqa: PLC0415

    rx = re2.compile(pattern.encode())
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [i for i, line in enumerate(lines, 1) if rx.search(line)]


def _searched_lines(s: blobpad.Store, e: blobpad.Entry, pattern: str) -> dict[str, list[int] | int]:
    return {
        "grep": [m.line for m in s.grep(e.id, pattern, max_matches=10_000)],
        "count": int(s.count(e.id, pattern)),
        "matching_lines": list(s.matching_lines(e.id, pattern).numbers),
        "grep_session": [m.line for m in s.grep_session("s", pattern, max_matches=10_000) if m.entry_id == e.id],
    }


@pytest.mark.parametrize("filters", [True, None], ids=["built-by-put", "built-by-search"])
def test_patterns_that_pythons_parser_reads_otherwise_never_hide_a_match(store_factory, filters):
    """The filters derive a pattern's literals with Python's parser; where it reads a pattern
    otherwise than RE2 (``{,1}`` is a repetition to Python, text to RE2), no chunk may be
    excluded for it: every search finds the line RE2 finds in it, before and after the
    first search built the filters."""
    s = store_factory(**({} if filters is None else {"filters": filters}))
    filler = "".join(f"line {i} nothing to see here\n" for i in range(40_000))
    data = (filler + "config: abcd{,1}efgh x{,2}yz set\n" + filler).encode()
    e = s.put(data, session="s")
    assert e.chunks > 10
    for pattern in ["abcd{,1}efgh", "x{,2}yz", "d{,1}efgh x", "(?i)ABCD{,1}EFGH"]:
        want = _re2_lines(data, pattern)
        assert want == [40_001], pattern
        for _ in range(2):  # the second time with the filters the first search built
            assert _searched_lines(s, e, pattern) == {"grep": want, "count": 1, "matching_lines": want,
                                                      "grep_session": want}, pattern
    assert s.grep(e.id, "abcdefgh").chunks_read < e.chunks  # the filters are built, and exclude chunks


@pytest.mark.skipif(RG is None, reason="rg (the oracle) is not installed")
def test_anchors_of_the_whole_text_mean_each_lines_start_and_end(store_factory):
    r"""``\A``, ``\z`` and multi-line mode turned off (``(?-m)``) mean what rg makes of them:
    each line is searched alone, so they match at every line's start and end, never at the
    starts and ends of the chunks or pieces blobpad happens to search."""
    s = store_factory(chunk_params=SMALL)
    data = "".join(f"ab line {i} ab{' x' * (i % 7)}\n" for i in range(400)).encode() + b"ab last ab"
    e = s.put(data, session="s")
    assert e.chunks > 10
    for pattern in [r"\Aab", r"ab\z", r"\Aab line 1\b", r"(?-m)^ab line \d+ ab$", r"(?i-m:^AB LINE 3)", r"(?s)ab\z",
                    r"[\\]?\Aab", r"x\z", r"\A\z"]:
        want = _oracle_lines(data, pattern, False, False)
        got = _searched_lines(s, e, pattern)
        assert got == {"grep": want, "count": len(want), "matching_lines": want, "grep_session": want}, pattern
