"""The storage engine (issue 2): open, put, ids, names, dedup, expiry, caps, errors, concurrency.

Every test runs against a real LMDB store in a temporary directory.  The oracles are
the original bytes, ``hashlib``, and small in-memory models of what the store should
hold.  The single exception to "no mocks" is the forced hash collision, which patches
the chunk hash function (see its docstring).
"""

from __future__ import annotations

import functools
import hashlib
import io
import multiprocessing
import os
import pathlib
import random
import re
import subprocess
import sys
import textwrap
import threading
import types

import pytest
import xxhash

import blobpad
import blobpad.catalog as catalog_module
import blobpad.codec as codec_module
import blobpad.put as put_module
from blobpad import BlobpadError, CorruptData, InvalidArgument, NotFound, StoreFull, sample
from blobpad.chunking import Manifest
from blobpad.view import chunk_list_blob

#: tiny chunks, so that even a few KB of content spans many chunk boundaries
SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
#: chunks of a few KB whose cuts depend on the content (a line qualifies ~1 time in 40)
MEDIUM = blobpad.ChunkParams(min_size=2048, avg_extra=4096, max_size=32768)
ID_RE = re.compile(r"[0-9a-f]{16}")


@functools.cache
def _log(size: int, seed: int = 0) -> str:
    return sample.log_text(size, seed)


@functools.cache
def _rand(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def _footprint(s: blobpad.Store) -> tuple[int, int, int, int, int]:
    st = s.stats()
    return st.entries, st.chunks, st.logical_bytes, st.stored_bytes, st.unique_bytes


# -- open, location, lifecycle ----------------------------------------------------------


def test_open_defaults_to_blobpad_dir_and_creates_it(tmp_path, monkeypatch):
    target = tmp_path / "not" / "yet" / "there"
    monkeypatch.setenv("BLOBPAD_DIR", str(target))
    assert not target.exists()
    with blobpad.open() as s:
        assert s.path == str(target)
        e = s.put("kept in $BLOBPAD_DIR\n")
    assert (target / "data.mdb").is_file()
    with blobpad.open() as again:
        assert again.get(e.id) == "kept in $BLOBPAD_DIR\n"


def test_open_defaults_to_blobpad_dir_in_a_fresh_process(tmp_path):
    target = tmp_path / "from-env"
    script = textwrap.dedent(
        """
        import blobpad
        with blobpad.open() as s:
            print(s.put("written by a child\\n", ttl=None).id)
        """
    )
    env = dict(os.environ, BLOBPAD_DIR=str(target))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    entry_id = out.stdout.strip()
    assert ID_RE.fullmatch(entry_id)
    with blobpad.open(target) as s:
        assert s.get(entry_id) == "written by a child\n"


def test_store_is_a_context_manager_and_closes(tmp_path):
    path = tmp_path / "cm"
    with blobpad.open(path) as s:
        assert isinstance(s, blobpad.Store)
        e = s.put(b"\xff\x00 payload")
    with pytest.raises(BlobpadError, match="open"):
        s.get(e.id)
    with blobpad.open(path) as s2:
        assert s2.get(e.id) == b"\xff\x00 payload"


def test_verify_is_ok_on_a_healthy_store(store_factory):
    s = store_factory(chunk_params=SMALL)
    ids = [s.put(_log(5000, k), session=f"s{k % 2}").id for k in range(5)]
    s.put(_log(5000, 0))  # shares every chunk with the first
    s.delete(ids[1])
    report = s.verify()
    assert report.ok, report.problems
    assert report.problems == [] and report.damaged_entries == []
    assert report.entries == 5
    assert report.chunks == s.stats().chunks


@pytest.mark.parametrize("field", [1, 2])  # the stored length, the raw length
def test_verify_names_a_reference_record_whose_lengths_are_wrong_and_gc_rebuilds_it(store_factory, field):
    """A chunk's reference record states its frame's length and its content's: one that
    says otherwise (sealed, so no checksum error) is named by verify(), and gc() rebuilds
    it from the frame and the chunk lists, so stats() and max_bytes count the truth."""
    s = store_factory(chunk_params=SMALL)
    entries = [s.put(_log(3000, k), ttl=None) for k in range(3)]
    truth = s.stats()
    wrong: list[bytes] = []

    def tamper(txn):
        key, rec = next(iter(txn.scan("refs")))
        values = list(catalog_module.unpack_ref(rec))
        values[field] += 1_000_000
        txn.put("refs", key, catalog_module.REF.pack(*values))
        wrong.append(key)

    s.engine.write(tamper)
    report = s.verify()
    assert not report.ok and any(wrong[0].hex() in p and "reference record says" in p for p in report.problems)
    s.gc()
    after = s.stats()
    assert (after.stored_bytes, after.unique_bytes, after.chunks) == (truth.stored_bytes, truth.unique_bytes, truth.chunks)
    assert s.verify().ok and [s.get(e.id) for e in entries] == [_log(3000, k) for k in range(3)]


@pytest.mark.parametrize("space", ["chunks", "refs"])
def test_verify_names_one_damaged_record_once(store_factory, space):
    """One record damaged (a byte of its stored value flipped under the integrity checks): verify()
    reports it once, as damaged, and not again as a chunk missing, a reference record missing or
    counters gone wrong (the counters are sound); the entry whose chunk it is is named damaged."""
    s = store_factory(chunk_params=SMALL)
    victim = s.put(_log(3000, 1), session="s", ttl=None)
    s.put(_log(3000, 2), session="s", ttl=None)
    raw = s.engine.engine
    with s.engine.read() as txn:
        key = Manifest.unpack(chunk_list_blob(txn, bytes.fromhex(victim.id))).keys[0]
    with raw.read() as txn:
        stored = txn.get(space, key)
    assert stored is not None
    flipped = bytearray(stored)
    flipped[len(flipped) // 2] ^= 0x01
    raw.write(lambda txn: txn.put(space, key, bytes(flipped)))
    report = s.verify()
    mentioned = [p for p in report.problems if key.hex() in p or "counters" in p]
    assert len(mentioned) == 1 and "damaged" in mentioned[0], report.problems
    assert victim.id in report.damaged_entries if space == "chunks" else True


# -- put: what it accepts -----------------------------------------------------------------


def test_put_str_is_always_text_even_when_it_names_a_file(store, tmp_path):
    f = tmp_path / "secret.txt"
    f.write_text("FILE CONTENT, must not be read\n")
    e = store.put(str(f))
    assert store.get(e.id) == str(f)
    assert e.kind == "text" and e.size_bytes == len(str(f).encode())


def test_put_bytes_kind_follows_utf8_validity(store):
    text = "naïve café 🙂\nzweite Zeile\n".encode()
    t = store.put(text)
    assert t.kind == "text" and store.get(t.id) == text.decode()
    assert t.chars == len(text.decode()) and t.size_bytes == len(text)
    b = store.put(b"\xff\xfe\x00binary\n")
    assert b.kind == "binary" and b.chars is None and store.get(b.id) == b"\xff\xfe\x00binary\n"
    for like in (bytearray(text), memoryview(text)):
        e = store.put(like)
        assert e.kind == "text" and store.get(e.id) == text.decode()
    released = memoryview(text)
    released.release()
    before = store.stats().entries
    with pytest.raises(InvalidArgument, match="memoryview was released"):  # a ValueError escaped
        store.put(released)
    assert store.stats().entries == before


def test_put_kind_overrides_detection(store):
    forced = store.put("plain ascii\n", kind="binary")
    assert forced.kind == "binary" and store.get(forced.id) == b"plain ascii\n"
    assert store.put(b"abc", kind="text").kind == "text"
    before = _footprint(store)
    with pytest.raises(InvalidArgument, match="kind='binary'"):
        store.put(b"\xff\xfe not utf-8" * 50, kind="text")
    assert _footprint(store) == before  # the failed put left nothing behind
    with pytest.raises(InvalidArgument):
        store.put("x", kind="image")
    assert store.verify().ok


def test_put_pathlike_reads_the_file(store, tmp_path):
    text = tmp_path / "obs.log"
    text.write_bytes(_log(50_000, 3).encode())
    e = store.put(text)
    assert e.kind == "text" and store.get(e.id) == _log(50_000, 3)
    blob = tmp_path / "obs.bin"
    blob.write_bytes(sample.binary_blob(30_000))
    b = store.put(blob)
    assert b.kind == "binary" and store.get(b.id) == sample.binary_blob(30_000)
    with pytest.raises(NotFound):
        store.put(tmp_path / "missing.log")
    with pytest.raises(InvalidArgument, match="directory"):
        store.put(tmp_path)


class _LazyReader:
    """A binary file object producing ``size`` bytes on demand, never all at once."""

    def __init__(self, size: int, seed: int) -> None:
        self.remaining = size
        self.rnd = random.Random(seed)
        self.sha = hashlib.sha256()
        self.requests: list[int] = []

    def read(self, n: int = -1) -> bytes:
        assert n is not None and n > 0, "put() must read a stream in bounded blocks, not read() it whole"
        self.requests.append(n)
        n = min(n, self.remaining, 3 << 20)  # short reads, like a pipe
        self.remaining -= n
        # half random, half repetitive: realistic, and not valid UTF-8
        data = self.rnd.randbytes(n // 2) + b"\x00" * (n - n // 2)
        self.sha.update(data)
        return data


def test_an_expired_name_reads_exactly_like_an_unknown_one(store_factory):
    clock = [1.8e9]
    store = store_factory(clock=lambda: clock[0])
    store.put("hello\n", session="a", name="plan", ttl=10)
    clock[0] += 10
    with pytest.raises(NotFound) as expired:
        store.find("plan", session="a")
    with pytest.raises(NotFound) as unknown:
        store.find("nope", session="a")
    assert str(expired.value).replace("'plan'", "'nope'") == str(unknown.value)
    assert expired.value.hint == unknown.value.hint is not None


class _FailingReader(io.RawIOBase):
    """A binary file object whose read fails after ``good`` bytes, as a disk or a pipe can."""

    def __init__(self, good: int, error: Exception) -> None:
        self.left, self.error = good, error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.left <= 0:
            raise self.error
        n = min(len(buffer), self.left)
        buffer[:n] = b"x" * n
        self.left -= n
        return n


@pytest.mark.parametrize("error", [OSError(5, "Input/output error"), ValueError("I/O operation on closed file.")])
def test_a_file_object_that_fails_leaves_nothing(store, error):
    closed = io.BytesIO(b"data\n")
    closed.close()
    with pytest.raises(InvalidArgument, match="the file object is closed"):
        store.put(closed)
    for good in (0, 10, 3 << 20):  # at once, in the first batch, after several batches
        # a closed file is the caller's mistake; a disk's failure goes up as the OSError it is
        expected = (OSError, "Input/output error") if isinstance(error, OSError) else (
            InvalidArgument, "reading the file object failed: .*closed file")
        with pytest.raises(expected[0], match=expected[1]):
            store.put(io.BufferedReader(_FailingReader(good, error)), session="s")
    stats = store.stats()
    assert store.entries() == [] and (stats.entries, stats.chunks, stats.stored_bytes) == (0, 0, 0)
    assert store.get(store.put(b"after\n", session="s").id) == "after\n"


def test_put_binary_file_object_is_streamed(store, tmp_path):
    reader = _LazyReader(20 << 20, seed=5)
    e = store.put(reader)
    assert reader.remaining == 0 and len(reader.requests) > 1
    assert max(reader.requests) <= 64 << 20
    assert e.size_bytes == 20 << 20 and e.kind == "binary"
    assert e.sha256 == reader.sha.hexdigest()
    h = hashlib.sha256()
    with store.stream(e.id) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    assert h.hexdigest() == e.sha256

    f = tmp_path / "f.log"
    f.write_text(_log(40_000, 1))
    with f.open("rb") as fh:
        t = store.put(fh)
    assert t.kind == "text" and store.get(t.id) == _log(40_000, 1)
    assert store.put(io.BytesIO(b"from BytesIO\n")).kind == "text"
    with f.open("r") as fh, pytest.raises(InvalidArgument, match="binary mode"):
        store.put(fh)


class _Reads:
    """A file object whose read() gives ``values`` in turn, then b""."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def read(self, size: int = -1) -> object:
        return self.values.pop(0) if self.values else b""


@pytest.mark.parametrize(("values", "words"), [
    ((b"abc", 7), "returned int; it must return bytes"),   # it looped for ever: bytes(7) is seven NULs... each call
    ((0,), "returned int"),
    ((None,), "returned None .*non-blocking"),            # it stored an empty entry
    ((b"abc", None), "returned None"),
    (([1, 2],), "returned list"),
])
def test_a_file_object_that_reads_no_bytes_is_refused_and_stores_nothing(store, values, words):
    before = _footprint(store)
    with pytest.raises(InvalidArgument, match=words):
        store.put(_Reads(*values), session="s")
    assert _footprint(store) == before and store.entries(session="s") == []
    assert store.put(_Reads(b"abc", bytearray(b"def"), memoryview(b"ghi"))).size == 9  # bytes-like all count


def test_put_rejects_what_it_cannot_store(store):
    with pytest.raises(InvalidArgument, match="pathlib.Path"):
        store.put(12345)
    with pytest.raises(InvalidArgument, match="surrogate"):
        store.put("bad \ud800 text")
    for kwargs in ({"ttl": 0}, {"ttl": -5}, {"ttl": float("nan")}, {"turn": True}, {"step": -1},
                   {"session": 3}, {"meta": [1]}, {"meta": {"x": object()}}):
        with pytest.raises(InvalidArgument):
            store.put("x", **kwargs)
    assert store.stats().entries == 0


# -- ids ----------------------------------------------------------------------------------


def test_ids_are_16_lowercase_hex_and_random(store):
    ids = [store.put("same content\n").id for _ in range(25)]
    assert all(ID_RE.fullmatch(i) for i in ids)
    assert len(set(ids)) == 25
    # the content is stored once however many ids point at it
    st = store.stats()
    assert st.entries == 25 and st.chunks == 1 and st.unique_bytes == len("same content\n")


# -- named entries -------------------------------------------------------------------------


def test_same_name_in_same_session_replaces_and_releases(store_factory):
    s = store_factory(chunk_params=SMALL)
    a_text, b_text = _log(20_000, 1), _log(30_000, 2)
    a = s.put(a_text, name="report", session="s1")
    with_a = _footprint(s)
    b = s.put(b_text, name="report", session="s1")
    for read in (s.get, s.stat, s.head, s.stream):
        with pytest.raises(NotFound):
            read(a.id)
    assert s.find("report", session="s1").id == b.id
    assert s.get(b.id) == b_text
    st = s.stats()
    assert st.entries == 1 and st.logical_bytes == len(b_text)
    assert st.unique_bytes == len(b_text)  # none of a's chunks is left
    c = s.put(a_text, name="report", session="s1")
    assert _footprint(s) == with_a  # back to exactly what a alone occupied
    assert [e.id for e in s.entries()] == [c.id]
    assert s.verify().ok


def test_same_name_in_two_sessions_never_collides(store):
    # sessions and names that are prefixes of one another must stay apart too
    made = {}
    for session in ("s", "s1", "s12", ""):
        for name in ("n", "n1", "report"):
            made[session, name] = store.put(f"{session}/{name}\n", session=session, name=name)
    for (session, name), e in made.items():
        assert store.find(name, session=session).id == e.id
        assert store.get(e.id) == f"{session}/{name}\n"
    assert store.find("report").id == made["", "report"].id
    with pytest.raises(NotFound):
        store.find("report", session="nobody")
    assert len(store.entries()) == len(made)


# -- chunk sharing ---------------------------------------------------------------------------


def test_identical_content_is_stored_once(store_factory):
    s = store_factory(chunk_params=SMALL)
    log = _log(30_000, 4)
    a = s.put(log)
    once = s.stats()
    b = s.put(log.encode(), session="elsewhere", turn=7)
    twice = s.stats()
    assert a.chunks > 50
    assert (twice.chunks, twice.stored_bytes, twice.unique_bytes) == (once.chunks, once.stored_bytes, once.unique_bytes)
    assert twice.logical_bytes == 2 * once.logical_bytes and twice.entries == 2
    assert twice.dedup_ratio == pytest.approx(2.0)
    s.delete(a.id)
    assert s.get(b.id) == log  # the shared chunks survive the first owner
    assert s.stats().chunks == once.chunks


def test_a_file_that_changes_after_it_was_hashed_records_what_was_stored(store, tmp_path, monkeypatch):
    """put(Path) hashes a file first when something of its size is stored (to share a whole
    identical entry), then reads it again to store it: when the file changed in between (a
    log still being written), the entry's hash is that of the bytes stored, so that a later
    put of the earlier content neither shares these chunks nor reads back other bytes."""
    n = 1 << 20
    a, b = b"A" * (n - 1) + b"\n", b"B" * (n - 1) + b"\n"
    path = tmp_path / "growing.log"
    path.write_bytes(a)
    store.put(b"C" * (n - 1) + b"\n", session="s")  # something of this size: put(Path) hashes first
    first_pass = put_module.Source.sha256

    def hashed_then_rewritten(self):
        digest = first_pass(self)
        path.write_bytes(b)  # another process rewrites the file between the two reads
        return digest

    monkeypatch.setattr(put_module.Source, "sha256", hashed_then_rewritten)
    e = store.put(path, session="s")
    monkeypatch.undo()
    assert store.get(e.id).encode() == b and e.sha256 == hashlib.sha256(b).hexdigest() == store.stat(e.id).sha256
    other = store.put(a, session="t")
    assert store.get(other.id).encode() == a and other.sha256 == hashlib.sha256(a).hexdigest()
    again = store.put(b, session="t")  # the same bytes as the file's entry: shared whole, and right
    assert store.get(again.id).encode() == b
    assert store.verify().ok


def test_dedup_across_store_sessions(tmp_path):
    path = tmp_path / "reopened"
    log = _log(40_000, 6)
    with blobpad.open(path, chunk_params=SMALL) as s:
        first = s.put(log, session="agent-1", ttl=None)
        once = s.stats()
    with blobpad.open(path) as s:
        second = s.put(log, session="agent-2", ttl=None)
        st = s.stats()
        assert (st.chunks, st.stored_bytes) == (once.chunks, once.stored_bytes)
        assert s.get(first.id) == s.get(second.id) == log


@pytest.mark.parametrize(("params", "size"), [(MEDIUM, 600_000), (None, 3_000_000)], ids=["medium", "default"])
def test_regrown_log_stores_only_new_tail_chunks(store_factory, params, size):
    s = store_factory(chunk_params=params)
    log = _log(size, 8)
    grown = log + _log(size // 10, 9)
    old = s.put(log)
    before = s.stats()
    new = s.put(grown)
    created = s.stats().chunks - before.chunks
    assert old.chunks >= 8
    # only chunks from the old last two on may be new (the end of an entry is split from the end)
    assert 1 <= created <= new.chunks - (old.chunks - 2)
    assert s.get(new.id) == grown


@pytest.mark.parametrize(("params", "size"), [(MEDIUM, 600_000), (None, 3_000_000)], ids=["medium", "default"])
def test_one_inserted_line_stores_at_most_three_chunks(store_factory, params, size):
    s = store_factory(chunk_params=params)
    log = _log(size, 10)
    lines = log.splitlines(keepends=True)
    s.put(log)
    base = _footprint(s)
    for where in (1, len(lines) // 3, len(lines) // 2, len(lines) - 2):
        edited = "".join(lines[:where]) + "2023-11-14T22:13:20.000 WARN  [inserted] one more line\n" + "".join(lines[where:])
        before = s.stats().chunks
        e = s.put(edited)
        assert s.stats().chunks - before <= 3, f"inserting at line {where}"
        assert s.get(e.id) == edited
        s.delete(e.id)
        assert _footprint(s) == base


def test_forced_hash_collision_keeps_every_entry_its_own_bytes(target, monkeypatch):
    """Every chunk gets the same hash key; each entry must still read back its own bytes.

    This is the one monkeypatch in the suite, and it is not a mock of the store: a
    real xxh3-128 collision cannot be produced on demand, so the hash function is
    forced.  ``blobpad.put`` computes chunk keys (``PutWriter``) and
    ``blobpad.codec`` checks them on read (``Codec.decompress``), each through its
    module global ``xxhash``; forcing ``xxh3_128_digest`` in both makes put and read
    agree on the colliding key, so only
    the collision handling (``_place`` compares the bytes and picks another key
    variant) keeps the entries apart.  ``xxh3_64_digest`` (the cache's frame
    fingerprint) stays real.
    """
    contents = [
        b"A" * 200,  # same length as the next one: only a byte comparison tells them apart
        b"B" * 200,
        _log(3000, 1).encode(),
        _log(3000, 2).encode(),
        "🙂 multi-byte ünïcödé\n".encode() * 40,
        sample.binary_blob(2000, seed=3),
    ]
    with blobpad.open(target("honest"), chunk_params=SMALL) as honest:
        for c in contents:
            honest.put(c)
        expected = honest.stats()

    forced = types.SimpleNamespace(
        xxh3_128_digest=lambda data, seed=0: b"\x42" * 16,
        xxh3_64_digest=xxhash.xxh3_64_digest,
    )
    monkeypatch.setattr(put_module, "xxhash", forced)
    monkeypatch.setattr(codec_module, "xxhash", forced)
    with blobpad.open(target("colliding"), chunk_params=SMALL) as s:
        ids = [s.put(c).id for c in contents]
        got = s.stats()
        assert (got.chunks, got.unique_bytes, got.logical_bytes) == (
            expected.chunks, expected.unique_bytes, expected.logical_bytes)
        for eid, c in zip(ids, contents, strict=True):
            raw = s.get(eid)
            assert (raw.encode() if isinstance(raw, str) else raw) == c
        # dedup still works under the collision
        again = s.put(contents[1])
        assert s.stats().chunks == got.chunks
        assert s.verify().ok
        s.delete(ids[0])
        s.delete(ids[2])
        survivors = zip(ids[1:2] + ids[3:] + [again.id], contents[1:2] + contents[3:] + [contents[1]], strict=True)
        for eid, c in survivors:
            raw = s.get(eid)
            assert (raw.encode() if isinstance(raw, str) else raw) == c
        late = s.put(b"C" * 200)
        assert s.get(late.id) == "C" * 200
        assert s.verify().ok


# -- metadata ----------------------------------------------------------------------------------


def test_entries_in_creation_order_by_session_and_turn(store):
    model: list[tuple[str, str, object]] = []
    plan = [("a", 1), ("b", 1), ("a", 2), ("a", "1"), ("", 1), ("b", None), ("a", 1), ("", None), ("a", None), ("", 1)]
    for k, (session, turn) in enumerate(plan):
        e = store.put(f"entry {k}\n", session=session, turn=turn)
        model.append((e.id, session, turn))

    def ids(pred):
        return [i for i, s, t in model if pred(s, t)]

    assert [e.id for e in store.entries()] == ids(lambda s, t: True)
    assert [e.id for e in store.entries(session="a")] == ids(lambda s, t: s == "a")
    # turn 1 and turn "1" are different turns
    assert [e.id for e in store.entries(session="a", turn=1)] == ids(lambda s, t: s == "a" and t == 1 and t != "1")
    assert [e.id for e in store.entries(session="a", turn="1")] == ids(lambda s, t: s == "a" and t == "1")
    assert [e.id for e in store.entries(turn=1)] == ids(lambda s, t: s == "" and t == 1 and t != "1")
    assert [e.id for e in store.entries(limit=3)] == ids(lambda s, t: True)[:3]
    assert store.entries(session="nobody") == []
    assert store.sessions() == ["", "a", "b"]
    store.delete(model[2][0])
    del model[2]
    assert [e.id for e in store.entries(session="a")] == ids(lambda s, t: s == "a")


def test_entries_limit_takes_the_first_n(store):
    ids = [store.put(f"entry {k}\n", session="s").id for k in range(4)]
    for limit in range(6):
        assert [e.id for e in store.entries(limit=limit)] == ids[:limit], f"limit={limit}"
        assert [e.id for e in store.entries(session="s", limit=limit)] == ids[:limit], f"limit={limit}"


def test_delete_session_removes_its_entries_only(store_factory):
    s = store_factory(chunk_params=SMALL)
    keep = s.put(_log(4000, 1), session="keep")
    base = _footprint(s)
    for k in range(3):
        s.put(_log(4000, 10 + k), session="drop", turn=k, name=f"n{k}")
    assert s.delete_session("drop") == 3
    assert s.entries(session="drop") == [] and _footprint(s) == base
    with pytest.raises(NotFound):
        s.find("n0", session="drop")
    assert s.get(keep.id) == _log(4000, 1)


def test_delete_session_goes_a_bounded_batch_per_transaction(store_factory, monkeypatch):
    """A session is deleted SESSION_BATCH entries per write transaction, each entry whole,
    past index records that name no entry (which go too), its notepad with the last batch;
    what other sessions hold, shared chunks included, is untouched."""
    import blobpad.store as store_module
    from blobpad.index import scope_key, seq_key

    monkeypatch.setattr(store_module, "SESSION_BATCH", 5)
    s = store_factory(chunk_params=SMALL)
    keep = [s.put(_log(3000, k), session="keep", turn=k) for k in range(3)]
    s.notepad("keep").write("kept")
    base = _footprint(s)
    # some share all their chunks with a kept entry, some are named, some have turns
    drop = [s.put(_log(3000, k % 5), session="drop", turn=k % 3 if k % 4 else None, name=f"n{k}" if k % 2 else None)
            for k in range(23)]
    s.notepad("drop").write("dropped")
    ghosts = [scope_key("drop") + seq_key(drop[10].seq, os.urandom(8)) for _ in range(12)]

    def haunt(txn):
        for key in ghosts:
            txn.put("by_scope", key, key[-8:])

    s.engine.write(haunt)
    engine = s.engine
    real = type(engine).write
    left: list[int] = []  # the session's index records after each write transaction

    def counting(self, fn, **kw):
        out = real(self, fn, **kw)
        if self is engine:
            with engine.read() as txn:
                left.append(sum(1 for _ in txn.scan("by_scope", scope_key("drop"), scope_key("drop") + b"\xff")))
        return out

    monkeypatch.setattr(type(engine), "write", counting)
    assert s.delete_session("drop") == len(drop)
    monkeypatch.undo()
    steps = [a - b for a, b in zip([len(drop) + len(ghosts), *left], left, strict=False)]
    assert left[-1] == 0 and all(0 < step <= 5 for step in steps[:-1]) and 0 <= steps[-1] <= 5, left
    assert len(left) == -(-(len(drop) + len(ghosts)) // 5) + ((len(drop) + len(ghosts)) % 5 == 0)
    assert s.entries(session="drop") == [] and _footprint(s) == base
    assert s.notepad("drop").spaces() == {} and s.notepad("keep").read() == "kept"
    with pytest.raises(NotFound):
        s.find("n1", session="drop")
    assert [s.get(e.id) for e in keep] == [_log(3000, k) for k in range(3)]
    report = s.verify()
    assert report.ok, report.problems


def test_stat_reports_what_put_was_told(store_factory):
    t = [1_700_000_000.25]
    s = store_factory(clock=lambda: t[0])
    text = "héllo\nwörld\nno newline at the end"
    e = s.put(text, session="sess", turn=3, step=9, tool="bash", name="out", meta={"cmd": "ls -l", "n": [1, 2]}, ttl=60)
    assert s.stat(e.id) == e == s.find("out", session="sess")
    assert (e.session, e.turn, e.step, e.tool, e.name) == ("sess", 3, 9, "bash", "out")
    assert e.meta == {"cmd": "ls -l", "n": [1, 2]}
    assert e.kind == "text" and e.size_bytes == len(text.encode()) and e.chars == len(text) and e.lines == 3
    assert e.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert e.created_at == 1_700_000_000.25 and e.expires_at == 1_700_000_060.25
    assert s.exists(e.id) and not s.exists("0123456789abcdef") and not s.exists("not an id")
    forever = s.put(b"", ttl=None)
    assert forever.expires_at is None and forever.lines == 0 and forever.size_bytes == 0 and forever.kind == "text"


def test_delete_releases_and_is_final(store_factory):
    s = store_factory(chunk_params=SMALL)
    keep = s.put(_log(8000, 1))
    base = _footprint(s)
    gone = s.put(_log(8000, 2), name="tmp")
    s.delete(gone.id)
    assert _footprint(s) == base
    for read in (s.get, s.stat, lambda i: s.delete(i), lambda i: s.grep(i, "a"), lambda i: s.lines(i, 1, 2)):
        with pytest.raises(NotFound):
            read(gone.id)
    with pytest.raises(NotFound):
        s.find("tmp")
    assert s.get(keep.id) == _log(8000, 1)


# -- expiry and gc -------------------------------------------------------------------------------


def test_expired_entries_are_not_found_and_gc_frees_them(store_factory):
    t = [2_000_000.0]
    s = store_factory(clock=lambda: t[0], chunk_params=SMALL)
    empty = _footprint(s)
    short = s.put(_log(6000, 1), ttl=10, name="short", session="s", turn=1)
    after_short = _footprint(s)
    long = s.put(_log(6000, 2), ttl=100, session="s")
    forever = s.put(_log(6000, 3), ttl=None)
    full = _footprint(s)

    t[0] = 2_000_009.999
    assert s.get(short.id) == _log(6000, 1)
    t[0] = 2_000_010.0
    reads = (s.get, s.stat, s.stream, s.head, s.tail, s.lines, lambda i: s.range(i, 0, 5),
             lambda i: s.byte_range(i, 0, 5), lambda i: s.grep(i, "INFO"), lambda i: s.count(i, "INFO"))
    for read in reads:
        with pytest.raises(NotFound):
            read(short.id)
    assert not s.exists(short.id)
    with pytest.raises(NotFound):
        s.find("short", session="s")
    assert [e.id for e in s.entries()] == [long.id, forever.id]
    assert s.entries(session="s", turn=1) == []
    st = s.stats()  # still on disk until gc, counted apart from the live entries
    assert (st.entries, st.expired_entries, st.expired_bytes) == (full[0] - 1, 1, short.size_bytes)
    assert (st.chunks, st.logical_bytes + st.expired_bytes, st.stored_bytes, st.unique_bytes) == full[1:]

    report = s.gc()
    assert isinstance(report, blobpad.GcReport)
    assert report.entries == 1
    assert report.chunks == after_short[1] - empty[1]
    assert report.bytes == after_short[3] - empty[3]
    st = s.stats()
    assert st.entries == 2 and st.chunks == full[1] - report.chunks
    assert st.stored_bytes == full[3] - report.bytes and st.logical_bytes == full[2] - short.size_bytes

    t[0] = 2_000_100.0
    report = s.gc()
    assert report.entries == 1 and report.chunks > 0
    assert [e.id for e in s.entries()] == [forever.id]
    t[0] = 9e9
    assert s.gc().to_dict() == {"entries": 0, "chunks": 0, "bytes": 0, "aborted_puts": 0, "notepads": 0, "problems": []}
    assert s.get(forever.id) == _log(6000, 3)
    assert s.verify().ok


def test_gc_frees_more_expired_entries_than_one_batch(store_factory):
    t = [1000.0]
    s = store_factory(clock=lambda: t[0])
    keep = s.put("kept\n", ttl=None)
    for k in range(1100):
        s.put(f"expiring {k}\n", ttl=5 + k % 3)
    t[0] = 2000.0
    report = s.gc()
    assert (report.entries, report.chunks) == (1100, 1100)
    st = s.stats()
    assert (st.entries, st.chunks, st.logical_bytes) == (1, 1, len("kept\n"))
    assert s.get(keep.id) == "kept\n"


def test_gc_keeps_chunks_a_live_entry_shares(store_factory):
    t = [100.0]
    s = store_factory(clock=lambda: t[0], chunk_params=SMALL)
    log = _log(5000, 4)
    s.put(log, ttl=1)
    live = s.put(log, ttl=None)
    chunks = s.stats().chunks
    t[0] = 200.0
    report = s.gc()
    assert (report.entries, report.chunks, report.bytes) == (1, 0, 0)
    assert s.stats().chunks == chunks and s.get(live.id) == log


def test_stats_attributes(store_factory):
    s = store_factory(chunk_params=MEDIUM)
    st = s.stats()
    assert (st.entries, st.chunks, st.logical_bytes, st.stored_bytes) == (0, 0, 0, 0)
    assert st.compression_ratio == 1.0 and st.dedup_ratio == 1.0
    log = _log(300_000, 11)
    a = s.put(log)
    s.put(log, session="again")
    blob = _rand(50_000, 1)
    b = s.put(blob)
    st = s.stats()
    assert st.entries == 3
    assert st.logical_bytes == 2 * len(log) + len(blob)
    assert st.unique_bytes == len(log) + len(blob)
    assert st.chunks == a.chunks + b.chunks  # no chunk of the log repeats, nor of random bytes
    assert st.dedup_ratio == pytest.approx(st.logical_bytes / st.unique_bytes)
    assert st.compression_ratio == pytest.approx(st.unique_bytes / st.stored_bytes)
    assert st.compression_ratio > 1.5  # logs compress; random bytes do not
    assert len(blob) < st.stored_bytes < st.unique_bytes
    assert st.disk_bytes > st.stored_bytes
    if s.engine.capabilities.size_ceiling:  # LMDB: the file lies inside the map
        assert st.map_size >= st.disk_bytes
    else:
        assert st.map_size == 0
    d = st.to_dict()
    assert {"entries", "chunks", "logical_bytes", "stored_bytes", "compression_ratio", "dedup_ratio"} <= set(d)


# -- max_bytes, compaction, map growth -----------------------------------------------------------


def test_max_bytes_evicts_entries_closest_to_expiry_first(store_factory):
    t = [5_000.0]
    size = 20_000
    cap = 3 * (size + 200)  # random bytes do not compress: room for three entries
    s = store_factory(clock=lambda: t[0], max_bytes=cap)
    assert s.max_bytes == cap
    live: dict[str, bytes] = {}

    def put(seed, ttl):
        e = s.put(_rand(size, seed), ttl=ttl)
        live[e.id] = _rand(size, seed)
        assert s.stats().stored_bytes <= cap
        return e.id

    ids = {1: put(1, 300), 2: put(2, 100), 3: put(3, None)}
    # (seed, ttl, seed of the entry that must make room): always the one expiring first
    for seed, ttl, victim in ((4, 200, 2), (5, 1000, 4), (6, None, 1), (7, 50, 5)):
        ids[seed] = put(seed, ttl)
        gone = [i for i in live if not s.exists(i)]
        assert gone == [ids[victim]], f"putting seed {seed} must evict seed {victim}"
        del live[ids[victim]]
    e3 = ids[3]
    assert e3 in live  # never-expiring entries go last
    for i, data in live.items():
        assert s.get(i) == data

    with pytest.raises(StoreFull, match="max_bytes"):
        s.put(_rand(4 * size, 99))
    assert sorted(e.id for e in s.entries()) == sorted(live)  # a failed put evicts nothing
    for i, data in live.items():
        assert s.get(i) == data
    assert s.verify().ok


def test_a_put_that_spares_untimed_entries_evicts_only_expiring_ones_or_fails_whole(store_factory):
    """``put(..., evict_untimed=False)`` makes room from the entries that expire only
    (closest to expiry first), never from those without a TTL; when they do not free
    enough it raises StoreFull and evicts nothing.  Oracle: the entries put, and the
    same sequence with the default, which evicts the untimed ones too."""
    size = 20_000
    cap = 3 * (size + 200)  # random bytes do not compress: room for three entries
    s = store_factory(max_bytes=cap)
    untimed = [s.put(_rand(size, i), ttl=None) for i in (1, 2)]
    timed = s.put(_rand(size, 3), ttl=600)
    kept = s.put(_rand(size, 4), ttl=None, evict_untimed=False)  # room made from the timed entry alone
    assert not s.exists(timed.id) and all(s.get(e.id) == _rand(size, i) for e, i in zip(untimed, (1, 2), strict=True))
    with pytest.raises(StoreFull, match="entries without a TTL are kept"):
        s.put(_rand(size, 5), ttl=600, evict_untimed=False)
    assert sorted(e.id for e in s.entries()) == sorted([*(e.id for e in untimed), kept.id])  # nothing evicted
    s.put(_rand(size, 6), ttl=None)  # the default evicts an untimed entry, the oldest put
    assert not s.exists(untimed[0].id) and s.exists(untimed[1].id) and s.exists(kept.id)
    with pytest.raises(InvalidArgument, match="evict_untimed"):
        s.put("x", evict_untimed=None)
    assert s.verify().ok


def test_an_edit_that_spares_untimed_entries_evicts_none_of_them_or_fails_whole(store_factory):
    """``edit(..., evict_untimed=False)`` makes room as such a put does: an edit that would
    need an untimed entry's room raises StoreFull and changes nothing; the default evicts it."""
    size = 40_000
    text = [_rand(size, i).hex() for i in range(4)]  # 80,000 hex digits: about 40,000 bytes stored
    s = store_factory(max_bytes=3 * size + 6_000)  # two of them and 60,000 more fit only without the first
    untimed = [s.put(text[i], ttl=None, name=f"f{i}") for i in (0, 1)]
    grow = (text[2] + text[3])[:3 * size]
    with pytest.raises(StoreFull, match="entries without a TTL are kept"):
        s.edit(untimed[1].id, text[1][:32], text[1][:32] + grow, evict_untimed=False)
    assert [s.get(e.id) for e in untimed] == [text[0], text[1]] and len(s.entries()) == 2
    done = s.edit(untimed[1].id, text[1][:32], text[1][:32] + grow)  # the default evicts the oldest untimed entry
    assert not s.exists(untimed[0].id) and s.get(done.entry.id) == text[1][:32] + grow + text[1][32:]
    with pytest.raises(InvalidArgument, match="evict_untimed"):
        s.edit(done.entry.id, "a", "b", evict_untimed="no")
    assert s.verify().ok


@pytest.mark.parametrize("name", [None, "build.log"])
def test_a_ttl_counts_from_the_commit_so_a_long_put_is_readable_for_all_of_it(store_factory, name):
    """A streamed put that takes longer than its ttl (the clock moves 10 s per read of
    the source, the ttl is 5 s) is readable when it returns, for the whole ttl, and then
    gone: an entry is created when its put commits."""
    t = [1_000.0]
    s = store_factory(clock=lambda: t[0], chunk_params=SMALL)

    class Slow(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self.data = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, buf) -> int:
            t[0] += 10.0
            return self.data.readinto(memoryview(buf)[:4096])

    data = _log(40_000, 3).encode()
    e = s.put(Slow(data), ttl=5, name=name)
    committed = t[0]
    assert committed > 1_000.0 + 5 and e.created_at == e.updated_at == committed
    assert e.expires_at == committed + 5 and s.get(e.id) == data.decode()
    t[0] = committed + 4.999
    assert s.exists(e.id) and [x.id for x in s.entries()] == [e.id]
    t[0] = committed + 5
    assert not s.exists(e.id) and s.entries() == []


@pytest.mark.parametrize("ttl", [None, 600.0])
def test_entries_that_expire_together_are_evicted_oldest_first(store_factory, ttl):
    """Entries without a TTL (or put at one instant with one TTL) expire together: the
    oldest put goes first, never a random one of them (ids are random)."""
    t = [5_000.0]
    size = 2_000
    s = store_factory(clock=lambda: t[0])
    first = [s.put(_rand(size, i), ttl=ttl) for i in range(40)]  # the clock stands still: all expire together
    cap = s.stats().stored_bytes
    store_factory(clock=lambda: t[0], max_bytes=cap).close()  # the same store: the cap is saved in it
    capped = s  # (one handle: its sequence goes on where it was, the clock standing still)
    later = [capped.put(_rand(size, 100 + i), ttl=ttl) for i in range(25)]
    survivors = [e for e in first + later if capped.exists(e.id)]
    assert survivors == (first + later)[25:]  # exactly the 25 oldest went, in the order they were put
    touched = capped.touch(first[30].id, ttl=ttl)  # a touch keeps the entry's place among its peers
    assert touched.expires_at == (None if ttl is None else t[0] + ttl)
    capped.put(_rand(size, 999), ttl=ttl)
    assert not capped.exists(first[25].id) and capped.exists(first[30].id)
    assert capped.verify().ok


@pytest.mark.parametrize("where", ["memory", "lmdb"])
def test_a_put_that_would_evict_more_than_a_put_may_says_so_and_evicts_nothing(where, tmp_path):
    """A put evicts at most 10,000 entries in its one transaction: one that would need more
    raises StoreFull naming that bound (it said the content did not fit even after evicting
    every other entry, which was false) and leaves every entry; one that needs fewer fits.
    The bound is the catalog's, the same on every engine: local ones keep the test short."""
    target = "memory://evict-bound" if where == "memory" else str(tmp_path / "s")
    with blobpad.open(target, **({} if where == "memory" else {"sync": False})) as s:
        for i in range(10_400):
            s.put(f"{i}\n", ttl=600)
        stored = s.stats().stored_bytes
        with blobpad.open(target, max_bytes=stored + 1_000) as capped:
            # random bytes of about the store's size: room for them means evicting all but about 170 entries
            with pytest.raises(blobpad.StoreFull, match="more than 10,000 entries"):
                capped.put(_rand(stored - 1_300, 7))
            assert capped.stats().entries == 10_400 and capped.verify().ok
            small = capped.put(_rand(3_000, 8))  # about 160 evictions: within the bound
            assert capped.exists(small.id) and 10_000 < capped.stats().entries < 10_400


def test_expiry_keys_of_older_stores_are_still_found(store_factory):
    """An expiry index key without the creation sequence (stores written before it was
    part of the key) is still deleted, swept, touched and verified as its entry's."""
    t = [5_000.0]
    s = store_factory(clock=lambda: t[0])
    es = [s.put(f"entry {i}\n" * 50, ttl=10.0 * (i + 1)) for i in range(4)]
    raw = [bytes.fromhex(e.id) for e in es]

    def to_legacy(txn):
        for key, _ in list(txn.scan("expiry")):
            txn.delete("expiry", key)
            txn.put("expiry", key[:8] + key[-8:], b"")

    s.engine.write(to_legacy)
    assert s.verify().ok
    with s.engine.read() as txn:
        assert sorted(k[-8:] for k, _ in txn.scan("expiry")) == sorted(raw)
        assert {len(k) for k, _ in txn.scan("expiry")} == {16}
    s.delete(es[0].id)
    s.touch(es[1].id, ttl=None)
    t[0] += 35  # es[2] has expired, es[3] not yet
    assert s.gc().entries == 1
    assert [s.exists(e.id) for e in es] == [False, True, False, True]
    with s.engine.read() as txn:
        assert sorted(k[-8:] for k, _ in txn.scan("expiry")) == sorted(raw[1::2])
    assert s.verify().ok


def test_one_put_evicts_across_many_batches_in_expiry_order(store_factory):
    """A put that needs the room of more entries than one batch of victims (64) evicts
    them in expiry order across batches, and only as many as it takes."""
    t = [5_000.0]
    size = 1_000
    s = store_factory(clock=lambda: t[0])
    small = [s.put(_rand(size, i), ttl=1_000 + (i * 37) % 301) for i in range(301)]  # expiries all distinct
    cap = s.stats().stored_bytes
    by_expiry = sorted(small, key=lambda e: e.expires_at)
    capped = store_factory(clock=lambda: t[0], max_bytes=cap)  # the same store: the cap is saved in it
    big = capped.put(_rand(150 * size, 999), ttl=None)
    gone = [e for e in by_expiry if not capped.exists(e.id)]
    assert 140 <= len(gone) < 200, len(gone)
    assert gone == by_expiry[: len(gone)]  # the first to expire, and none after a survivor
    assert capped.stats().stored_bytes <= cap
    assert capped.get(big.id) == _rand(150 * size, 999)
    for e in by_expiry[len(gone):]:
        assert capped.get(e.id) == _rand(size, small.index(e))
    assert capped.verify().ok


def test_max_bytes_is_saved_with_the_store(tmp_path):
    path = tmp_path / "capped"
    with blobpad.open(path, max_bytes=123_456) as s:
        assert s.max_bytes == 123_456
    with blobpad.open(path) as s:
        assert s.max_bytes == 123_456 and s.stats().max_bytes == 123_456
    with blobpad.open(path, max_bytes=0) as s:
        assert s.max_bytes is None
    with blobpad.open(path) as s:
        assert s.max_bytes is None


@pytest.mark.engines("lmdb")
def test_compact_shrinks_the_file_after_deletes(store):
    keep = store.put(_log(20_000, 1))
    big = [store.put(_rand(2 << 20, k)).id for k in range(4)]
    for i in big:
        store.delete(i)
    before, after = store.compact()
    assert before >= 8 << 20
    assert after < before // 4
    assert store.stats().disk_bytes == after
    assert store.get(keep.id) == _log(20_000, 1)
    again = store.put(b"\xffafter compact")
    assert store.get(again.id) == b"\xffafter compact"
    assert store.verify().ok


def test_map_grows_from_a_tiny_map_size(tmp_path):
    blob = sample.binary_blob(24 << 20, seed=2)
    with blobpad.open(tmp_path / "tiny", map_size=1 << 20) as s:
        assert s.stats().map_size == 1 << 20
        e = s.put(blob)
        log = s.put(_log(2 << 20, 5))
        assert s.stats().map_size > 16 << 20
        assert s.get(e.id) == blob
        assert s.get(log.id) == _log(2 << 20, 5)
        assert s.verify().ok
    with blobpad.open(tmp_path / "tiny", map_size=1 << 20) as s:
        assert hashlib.sha256(s.get(e.id)).hexdigest() == e.sha256


def test_text_put_over_several_write_batches(store):
    """A text put larger than one write batch (16 MB) keeps its totals and its tail right."""
    base = _log(1 << 20, 3)
    text = base * 20 + "tail line without newline é"
    e = store.put(text)
    assert e.kind == "text" and e.size_bytes == len(text.encode()) and e.chars == len(text)
    assert e.lines == 20 * base.count("\n") + 1
    assert e.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert store.tail(e.id, 40) == text[-40:]
    assert store.lines(e.id, e.lines - 1) == [base.split("\n")[-2], "tail line without newline é"]
    assert store.range(e.id, 17 << 20, (17 << 20) + 100) == text[17 << 20 : (17 << 20) + 100]
    assert store.count(e.id, "ERROR") == 20 * sum("ERROR" in line for line in base.split("\n"))


def test_map_ceiling_raises_store_full_and_rolls_back(tmp_path):
    with blobpad.open(tmp_path / "ceiling", map_size=1 << 20, max_map_size=32 << 20) as s:
        small = s.put(_log(10_000, 1))
        before = _footprint(s)
        with pytest.raises(StoreFull, match="max_map_size"):
            s.put(_rand(48 << 20, 3))  # three write batches; the second no longer fits
        assert _footprint(s) == before
        assert s.get(small.id) == _log(10_000, 1)
        assert s.verify().ok
        assert s.get(s.put("still usable").id) == "still usable"


def _full_of_expiring(path, now: list[float]) -> tuple[blobpad.Store, list[str]]:
    """A store at an 8 MiB max_map_size ceiling on the clock ``now[0]``, filled with 256 KB entries
    that expire in 60 s until it said StoreFull; the ids put."""
    s = blobpad.open(path, map_size=1 << 20, max_map_size=8 << 20, clock=lambda: now[0])
    ids: list[str] = []
    try:
        with pytest.raises(StoreFull, match="max_map_size"):
            for i in range(100):
                ids.append(s.put(_rand(256 << 10, i), session="s", ttl=60).id)
    except BaseException:
        s.close()
        raise
    return s, ids


def test_a_full_store_whose_entries_expired_takes_the_next_put_without_gc(tmp_path):
    """A store at its max_map_size ceiling whose entries have all expired: the next put removes them
    and fits.  It was refused until someone ran gc(), since the sweep that frees what expired
    followed a put that succeeded.  Live entries are never removed to make room."""
    now = [1_800_000_000.0]
    s, ids = _full_of_expiring(tmp_path / "ceiling", now)
    with s:
        assert len(ids) >= 4
        now[0] += 61
        e = s.put(_rand(256 << 10, 1000), session="s")  # fits: what expired went
        assert s.range(e.id, 0, 256 << 10) == _rand(256 << 10, 1000)
        st = s.stats()
        assert (st.entries, st.expired_entries) == (1, 0)
        live = [e.id]
        with pytest.raises(StoreFull, match="max_map_size"):  # nothing expired: full is full
            for i in range(100):
                live.append(s.put(_rand(256 << 10, 2000 + i), session="s").id)
        assert s.stats().entries == len(live)
        for i, entry_id in enumerate(live):
            assert s.range(entry_id, 0, 256 << 10) == _rand(256 << 10, 1000 if i == 0 else 1999 + i)
        assert s.verify().ok


def test_a_notepad_write_to_a_full_store_whose_entries_expired_goes_through_without_gc(tmp_path):
    """Every write of the store makes room the same way, not puts alone: a notepad write to a
    store at its ceiling whose entries have expired removes them and is kept."""
    now = [1_800_000_000.0]
    s, _ = _full_of_expiring(tmp_path / "ceiling", now)
    with s:
        pad = s.notepad("s")
        text = _rand(450_000, 7).hex()  # 900 KB that compresses to half: more than the store has left
        with pytest.raises(StoreFull):  # nothing expired yet: full is full
            pad.write(text)
        now[0] += 61
        pad.write(text)
        assert pad.read() == text
        assert s.stats().entries == 0
        assert s.verify().ok


# -- errors ----------------------------------------------------------------------------------------


def test_errors_are_builtin_exceptions_with_helpful_messages(store):
    assert issubclass(NotFound, KeyError) and issubclass(NotFound, BlobpadError)
    assert issubclass(InvalidArgument, ValueError) and issubclass(InvalidArgument, BlobpadError)
    assert issubclass(StoreFull, BlobpadError) and issubclass(CorruptData, BlobpadError)

    missing = "0123456789abcdef"
    with pytest.raises(KeyError) as err:
        store.get(missing)
    msg = str(err.value)
    assert missing in msg and "put()" in msg and not msg.startswith(("'", '"'))

    with pytest.raises(ValueError) as err:
        store.get("ABC")
    assert "'ABC'" in str(err.value) and "16 lowercase hex" in str(err.value)

    with pytest.raises(ValueError) as err:
        store.put(3.5)
    assert "float" in str(err.value) and "pathlib.Path" in str(err.value)

    with pytest.raises(ValueError) as err:
        store.put("x", ttl=-1)
    assert "ttl" in str(err.value) and "positive" in str(err.value)

    with pytest.raises(KeyError) as err:
        store.find("nope")
    assert "entries()" in str(err.value)

    with pytest.raises(InvalidArgument, match="cache_bytes"):
        blobpad.open(store.path + "-x", cache_bytes=-1)


# -- concurrency: threads ----------------------------------------------------------------------------


def _thread_content(worker: int, i: int) -> bytes:
    if i % 3 == 0:
        return _log(6000, 100 + i).encode()  # the same in every thread: dedup under contention
    if i % 3 == 1:
        return _log(6000, 1000 * worker + i).encode()
    return sample.binary_blob(5000, seed=1000 * worker + i)


def test_threads_put_and_read_concurrently(store_factory):
    s = store_factory(chunk_params=SMALL)
    n_threads, per_thread = 6, 9
    barrier = threading.Barrier(n_threads)
    written: dict[str, bytes] = {}
    lock = threading.Lock()
    failures: list[str] = []

    def work(w: int) -> None:
        try:
            barrier.wait()
            mine = []
            for i in range(per_thread):
                data = _thread_content(w, i)
                e = s.put(data, session=f"w{w}", turn=i)
                mine.append((e.id, data))
                with lock:
                    written[e.id] = data
                    others = list(written.items())
                for eid, expect in mine + others[-5:]:
                    got = s.get(eid)
                    got = got.encode() if isinstance(got, str) else got
                    if got != expect:
                        failures.append(f"thread {w}: {eid} read back wrong")
                    if s.byte_range(eid, 100, 700) != expect[100:700]:
                        failures.append(f"thread {w}: byte_range of {eid} wrong")
        except BaseException as exc:  # surfaced in the main thread below
            failures.append(f"thread {w}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(w,)) for w in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads)
    assert failures == []
    assert len(written) == n_threads * per_thread
    for eid, data in written.items():
        got = s.get(eid)
        assert (got.encode() if isinstance(got, str) else got) == data
    assert s.verify().ok
    # concurrency must not store a chunk twice: compare with the same puts made one by one
    model = store_factory("sequential", chunk_params=SMALL)
    for w in range(n_threads):
        for i in range(per_thread):
            model.put(_thread_content(w, i))
    assert _footprint(s)[1:] == _footprint(model)[1:]


# -- concurrency: processes ---------------------------------------------------------------------------


def _mp_content(owner: int, i: int) -> bytes:
    if i % 2 == 0:
        return _log(20_000, 500 + i).encode()  # identical in both processes
    return _log(20_000, 10 * owner + i).encode()


def _mp_writer(path: str, owner: int, n: int, barrier, queue) -> None:
    try:
        with blobpad.open(path, chunk_params=SMALL) as s:
            barrier.wait(60)
            out = []
            for i in range(n):
                e = s.put(_mp_content(owner, i), session=f"proc{owner}", ttl=None, name=f"n{i}")
                out.append((e.id, owner, i))
        queue.put(("ok", out))
    except BaseException as exc:
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def test_two_processes_write_the_same_store_at_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    path = str(tmp_path / "shared")
    n = 12
    barrier = ctx.Barrier(2)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_mp_writer, args=(path, owner, n, barrier, queue)) for owner in (1, 2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert [r[0] for r in results] == ["ok", "ok"], results
    written = [row for _, rows in results for row in rows]
    assert len(written) == 2 * n
    with blobpad.open(path) as s:
        for eid, owner, i in written:
            expect = _mp_content(owner, i)
            assert s.get(eid).encode() == expect
            assert s.find(f"n{i}", session=f"proc{owner}").id == eid
        assert s.verify().ok
        assert s.stats().entries == 2 * n
        shared = _footprint(s)
    with blobpad.open(tmp_path / "model", chunk_params=SMALL) as model:
        for owner in (1, 2):
            for i in range(n):
                model.put(_mp_content(owner, i))
        assert shared[1:] == _footprint(model)[1:]


def test_pathlike_put_matches_bytes_put(store_factory, tmp_path):
    s = store_factory(chunk_params=SMALL)
    f = pathlib.Path(tmp_path / "x.txt")
    f.write_bytes(_log(9000, 2).encode())
    a = s.put(f)
    chunks = s.stats().chunks
    b = s.put(_log(9000, 2))
    assert s.stats().chunks == chunks and a.sha256 == b.sha256 and a.chunks == b.chunks


def test_sessions_walks_the_session_index_and_matches_the_entries(store_factory):
    t = [1000.0]
    s = store_factory(clock=lambda: t[0])
    rng = random.Random(7)
    names = ["", "a", "ab", "abc", "b", "ß", "é", "a\x00b", "z" * 200, "agent-1", "agent-10", "agent-2"]
    for i in range(120):
        s.put(f"line {i}\n", session=rng.choice(names), ttl=rng.choice([None, 5, 50]), turn=rng.choice([None, 1, "x"]))
    for e in rng.sample(s.entries(), 20):
        s.delete(e.id)
    for now in (1000.0, 1010.0, 1100.0):
        t[0] = now
        live = sorted({e.session for e in s.entries()})  # the oracle: every live entry
        assert s.sessions() == live
        for prefix in ("", "a", "ag", "agent-1", "é", "q"):
            assert s.sessions(prefix) == [x for x in live if x.startswith(prefix)]
    with pytest.raises(InvalidArgument):
        s.sessions(3)  # type: ignore[arg-type]


def test_touch_refreshes_an_entrys_expiry_and_nothing_else(store_factory):
    t = [1000.0]
    s = store_factory(clock=lambda: t[0])
    e = s.put("keep me\n" * 100, session="s", ttl=10)
    other = s.put("let me go\n", session="s", ttl=10)
    t[0] = 1008.0
    touched = s.touch(e.id, ttl=60)
    assert touched.expires_at == 1068.0 and s.stat(e.id) == touched
    assert (touched.created_at, touched.updated_at, touched.sha256) == (e.created_at, e.updated_at, e.sha256)
    t[0] = 1020.0
    assert s.get(e.id) == "keep me\n" * 100 and not s.exists(other.id)  # the other expired as it would
    report = s.gc()
    assert report.entries == 1 and s.exists(e.id)
    assert s.touch(e.id, ttl=None).expires_at is None
    t[0] = 10**9
    assert s.get(e.id) == "keep me\n" * 100 and s.gc().entries == 0
    s.touch(e.id, ttl=5)
    t[0] += 6
    assert s.gc().entries == 1 and s.entries() == []  # the expiry index followed the new expiry
    with pytest.raises(NotFound):
        s.touch(e.id)  # gone
    with pytest.raises(NotFound):
        s.touch(other.id)
    with pytest.raises(InvalidArgument):
        s.touch("not an id")
    live = s.put("x", ttl=10)
    with pytest.raises(InvalidArgument):
        s.touch(live.id, ttl=0)
    with pytest.raises(InvalidArgument, match="microsecond"):  # shorter than the clock tells: it would delete it
        s.touch(live.id, ttl=1e-9)
    assert s.exists(live.id) and s.touch(live.id, ttl=1e-6).expires_at > t[0]
    assert s.verify().ok


def test_a_named_entry_keeps_its_created_at_across_puts_and_says_when_it_was_updated(store_factory):
    t = [1000.0]
    s = store_factory(clock=lambda: t[0])
    first = s.put("v1\n", session="s", name="plan", ttl=100)
    assert first.created_at == first.updated_at == 1000.0
    t[0] = 1050.0
    second = s.put("v2\n", session="s", name="plan", ttl=100)
    assert (second.created_at, second.updated_at, second.expires_at) == (1000.0, 1050.0, 1150.0)
    assert s.find("plan", session="s") == second and s.get(second.id) == "v2\n"
    elsewhere = s.put("v1\n", session="t", name="plan")
    assert elsewhere.created_at == 1050.0  # another session's name is another entry
    t[0] = 1200.0  # the named entry expired: a new put of the name starts afresh
    third = s.put("v3\n", session="s", name="plan")
    assert third.created_at == third.updated_at == 1200.0


def test_named_lists_a_sessions_live_names_by_prefix(store_factory):
    t = [1000.0]
    s = store_factory(clock=lambda: t[0])
    rng = random.Random(11)
    pool = ["", "a", "ab", "abc", "b", "ß", "é", "a b", "plan", "plan-2", "x" * 200]
    model: dict[tuple[str, str], tuple[str, float | None]] = {}  # (session, name) -> (id, expires_at)
    for _ in range(150):
        session, name = rng.choice(["s", "t", ""]), rng.choice(pool[1:])
        ttl = rng.choice([None, 5, 50])
        e = s.put(f"{name}\n", session=session, name=name, ttl=ttl)
        model[(session, name)] = (e.id, e.expires_at)
        if rng.random() < 0.1:
            s.delete(e.id)
            del model[(session, name)]
    for now in (1000.0, 1010.0, 1100.0):
        t[0] = now
        for session in ("s", "t", "", "nobody"):
            for prefix in (None, "", "a", "plan", "é", "q"):
                expect = sorted(
                    (name, eid) for (sess, name), (eid, exp) in model.items()
                    if sess == session and (exp is None or exp > now) and (prefix is None or name.startswith(prefix))
                )
                assert [(e.name, e.id) for e in s.named(session=session, prefix=prefix)] == expect


def test_the_readme_library_example_runs_as_written(tmp_path, monkeypatch):
    from oracles import readme_snippet

    code = readme_snippet("## Library").replace('"/tmp/readme-db"', repr(str(tmp_path / "readme-db")))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.log").write_text(_log(300_000, 5))
    namespace: dict = {}
    exec(compile(code, "README.md#library", "exec"), namespace)
    e = namespace["e"]
    assert e.kind == "text" and e.size == len(_log(300_000, 5).encode())
    found = namespace["found"]  # "grep every entry of a session": the log's ERROR lines, the first 50
    errors = [i for i, line in enumerate(_log(300_000, 5).splitlines(), 1) if "ERROR" in line]
    assert [(m.entry_id, m.line) for m in found.matches] == [(e.id, n) for n in errors[:50]] and found.cursor


@pytest.mark.parametrize("meta", [{True: 1}, {1: "a", "1": "b"}, {"a": [{"b": {2: 3}}]}, {None: 0}, {1.5: "x"}])
def test_meta_keys_that_json_would_rewrite_are_refused(store, meta):
    """JSON keys are strings: {1: "a", "1": "b"} would keep one value of the two, silently."""
    with pytest.raises(InvalidArgument, match="meta's keys must be strings"):
        store.put("x", session="s", meta=meta)
    assert store.entries(session="s") == []
    nested = {"a": [{"b": {"c": (1, 2)}}], "ok": True}
    assert store.put("x", session="s", meta=nested).meta == {"a": [{"b": {"c": [1, 2]}}], "ok": True}


# -- reads by name while other writers write -----------------------------------------------------


def test_a_snapshot_reads_one_state_while_other_writers_change_the_store(store):
    """Inside ``store.snapshot()`` every read of the thread sees the store as it was when
    the block began: a name written again and an entry deleted by another writer (a
    thread, as another host would) meanwhile read as before until the block ends.  Oracle:
    the contents put, and the state after the block."""
    first = store.put("version one\n" * 50, session="s", name="doc")
    other = store.put("other\n", session="s")
    with store.snapshot():
        found = store.find("doc", session="s")
        worker = threading.Thread(target=lambda: (store.put("version two\n", session="s", name="doc"),
                                                  store.delete(other.id)))
        worker.start()
        worker.join(60)
        assert not worker.is_alive()
        assert found.id == first.id and store.find("doc", session="s").id == first.id
        assert store.get(first.id) == "version one\n" * 50
        assert store.lines(first.id, 2, 3) == ["version one", "version one"]
        assert [m.line for m in store.grep(first.id, "one", max_matches=3).matches] == [1, 2, 3]
        assert store.get(other.id) == "other\n"
        assert {e.id for e in store.entries(session="s")} == {first.id, other.id}
        with store.snapshot():  # a block inside shares it
            assert store.get(first.id) == "version one\n" * 50
        assert store.exists(other.id)
    assert store.get(store.find("doc", session="s").id) == "version two\n"
    for gone in (first.id, other.id):
        with pytest.raises(NotFound):
            store.get(gone)


def test_a_snapshot_is_the_state_when_its_block_began_even_before_its_first_read(store):
    """The block's first statement may come after another writer's commit: the snapshot is
    still the store as it was when ``snapshot()`` was entered (on Redis too, whose reads fix
    their snapshot at the first read).  Oracle: the entries put before and inside the block."""
    before = store.put("before\n", session="s", name="doc")
    with store.snapshot():
        worker = threading.Thread(target=lambda: (store.put("after\n", session="s", name="doc"),
                                                  store.put("new\n", session="s")))
        worker.start()
        worker.join(60)
        assert not worker.is_alive()
        assert [e.id for e in store.entries(session="s")] == [before.id]
        assert store.find("doc", session="s").id == before.id
    assert len(store.entries(session="s")) == 2 and store.find("doc", session="s").id != before.id


def test_snapshots_of_two_stores_nest_each_reading_its_own(store_factory):
    """A snapshot of one store inside a snapshot of another: each store's reads see its
    own (the inner block used to take the outer store's reads for another task's, and
    refused them), and a write to either is refused as a write inside a snapshot.  Oracle:
    the entries put before the blocks and by another thread inside them."""
    a, b = store_factory("a"), store_factory("b")
    ea, eb = a.put("in a\n", session="s"), b.put("in b\n", session="s")
    with a.snapshot():
        worker = threading.Thread(target=lambda: (a.put("later a\n", session="s"), b.put("later b\n", session="s")))
        worker.start()
        worker.join(60)
        assert not worker.is_alive()
        with b.snapshot():
            assert a.get(ea.id) == "in a\n" and b.get(eb.id) == "in b\n"
            assert [e.id for e in a.entries(session="s")] == [ea.id]  # a's snapshot: before the worker's put
            assert len(b.entries(session="s")) == 2  # b's began after it
            for write in (lambda: a.put("x", session="s"), lambda: a.delete(ea.id), a.gc,
                          lambda: b.put("x", session="s"), lambda: a.notepad("s").write("p", space="plan")):
                with pytest.raises(BlobpadError, match="inside a snapshot"):
                    write()
        assert [e.id for e in a.entries(session="s")] == [ea.id]  # still a's snapshot after b's block
    assert len(a.entries(session="s")) == 2 and len(b.entries(session="s")) == 2
    a.put("after\n", session="s")


def test_close_inside_a_snapshot_is_refused_and_the_snapshot_reads_on(store_factory):
    """close() while the calling thread holds a snapshot of the store, in its own block or in
    another asyncio task's (awaiting inside its block), is refused: it ended the transaction
    under the block, whose reads then found an emptied store (memory: NotFound, grep_session
    no match) or the engine's own failure (LMDB).  Once the block ends, close() closes."""
    import asyncio

    store = store_factory("c")
    e = store.put("hello ERROR\n", session="s")
    with store.snapshot():
        with pytest.raises(BlobpadError, match="close\\(\\) inside a snapshot"):
            store.close()
        assert store.head(e.id, 5) == "hello"
    seen: list[object] = []

    async def holder(entered: asyncio.Event, closed: asyncio.Event) -> None:
        with store.snapshot():
            seen.append(store.head(e.id, 5))
            entered.set()
            await closed.wait()
            seen.append(store.head(e.id, 5))
            seen.append(len(store.grep_session("s", "ERROR").matches))

    async def closer(entered: asyncio.Event, closed: asyncio.Event) -> None:
        await entered.wait()
        try:
            store.close()
        except BlobpadError as exc:
            seen.append(type(exc).__name__)
        closed.set()

    async def main() -> None:
        entered, closed = asyncio.Event(), asyncio.Event()
        await asyncio.wait_for(asyncio.gather(holder(entered, closed), closer(entered, closed)), 60)

    asyncio.run(main())
    assert seen == ["hello", "BlobpadError", "hello", 1]
    store.close()
    with pytest.raises(BlobpadError, match="closed"):
        store.head(e.id)


def test_a_write_inside_a_snapshot_is_refused_and_changes_nothing(store):
    entry = store.put("kept\n", session="s", name="n")
    with store.snapshot():
        for write in (lambda: store.put("x", session="s"), lambda: store.delete(entry.id),
                      lambda: store.touch(entry.id, 60), lambda: store.notepad("s").write("p", space="plan")):
            with pytest.raises(BlobpadError, match="inside a snapshot") as caught:
                write()
            assert type(caught.value) is BlobpadError
        if store.engine.capabilities.compaction:  # on the others, compact() says there is nothing to compact
            with pytest.raises(BlobpadError, match="inside a snapshot"):
                store.compact()
        with pytest.raises(BlobpadError, match="inside a snapshot"):  # gc() writes too (it said "internal error")
            store.gc()
        assert store.get(entry.id) == "kept\n"  # the snapshot still reads
    assert [e.id for e in store.entries(session="s")] == [entry.id] and store.notepad("s").read("plan") == ""
    store.put("after\n", session="s")  # and writes work again after the block
    assert store.stats().entries == 2


def test_with_named_runs_again_on_the_entry_a_put_of_the_name_made_meanwhile(store):
    """``with_named(name, fn)``: ``fn`` meets NotFound because another writer put the name
    again after it was looked up: it runs again on the new entry; bounded (Conflict) when
    the name is written again every time; NotFound when the name is gone."""
    store.put("one", session="s", name="n")
    calls = []

    def read(entry):
        calls.append(entry.id)
        if len(calls) == 1:  # another writer puts the name again between the lookup and this read
            thread = threading.Thread(target=store.put, args=("two",), kwargs={"session": "s", "name": "n"})
            thread.start()
            thread.join(60)
        return store.get(entry.id)

    assert store.with_named("n", read, session="s") == "two"
    assert len(calls) == 2 and calls[1] == store.find("n", session="s").id

    def always_replaced(entry):
        store.put("again", session="s", name="n")
        return store.get(entry.id)

    with pytest.raises(blobpad.Conflict, match="written again"):
        store.with_named("n", always_replaced, session="s")
    with pytest.raises(NotFound):
        store.with_named("missing", store.get, session="s")

    def gone(entry):
        store.delete(entry.id)
        return store.get(entry.id)

    with pytest.raises(NotFound):
        store.with_named("n", gone, session="s")


def test_a_snapshot_belongs_to_its_thread_and_task(store_factory, engine_name):
    """The pin of ``store.snapshot()`` is its thread's and task's alone: puts of other
    threads go on (a put inside is refused, also when another thread would have
    committed it with its own, and stores nothing); a second handle sharing the engine
    reads in the snapshot too (and cannot write); a block left in another thread (a generator resumed there)
    leaves its thread free; another asyncio task of the thread gets a clear error, never
    "internal error"; verify() inside is refused; seed 001's context block reads."""
    import asyncio

    store = store_factory()
    other = store_factory()  # a second handle of the same store
    first = store.put("one\n", session="s", name="doc")
    results: dict[str, int] = {"ok": 0}
    stop = threading.Event()

    def put_loop():
        while not stop.is_set() and results["ok"] < 500:
            store.put("x" * 100, session="bg")
            results["ok"] += 1

    workers = [threading.Thread(target=put_loop) for _ in range(2)]
    with store.snapshot():
        for w in workers:
            w.start()
        for _ in range(50):
            with pytest.raises(BlobpadError, match="inside a snapshot"):
                store.put("inside\n", session="in")
        assert other.get(other.find("doc", session="s").id) == "one\n"
        with pytest.raises(BlobpadError, match="inside a snapshot"):  # every handle of the store: its pin
            other.put("inside\n", session="in")
        with pytest.raises(BlobpadError, match="verify"):
            store.verify()
        assert blobpad.Toolbox(store, session="s", profile="seed001").context_block() is not None
        stop.set()
        for w in workers:
            w.join(60)
    assert results["ok"] > 0 and store.entries(session="in") == []
    assert len(store.entries(session="bg")) == results["ok"]

    def reading():  # a generator holding a block, resumed in another thread
        with store.snapshot():
            yield store.get(first.id)
            yield store.get(first.id)

    gen = reading()
    assert next(gen) == "one\n"
    closer = threading.Thread(target=gen.close)
    closer.start()
    closer.join(60)
    store.put("after\n", session="s", name="doc")  # this thread is free again: it writes, and reads anew
    assert store.get(store.find("doc", session="s").id) == "after\n"

    async def both() -> str:
        entered = asyncio.Event()
        release = asyncio.Event()

        async def holder() -> None:
            with store.snapshot():
                store.find("doc", session="s")
                entered.set()
                await release.wait()

        task = asyncio.create_task(holder())
        await entered.wait()
        try:
            store.find("doc", session="s")
            return "read"
        except BlobpadError as exc:
            return str(exc)
        finally:
            release.set()
            await task

    said = asyncio.run(both())
    assert "another asyncio task or generator" in said and "internal error" not in said
    assert store.get(store.find("doc", session="s").id) == "after\n"


def test_a_child_forked_inside_a_snapshot_never_frees_the_parents(tmp_path):
    """LMDB: a child forked inside ``store.snapshot()`` that leaves the block and lets its
    objects go does not end the parent's read transaction (it would free its reader slot
    in the shared lock file, and writers would reuse the pages the parent reads)."""
    import gc

    store = blobpad.open(tmp_path / "s", cache_bytes=0)
    payload = os.urandom(3 << 20)
    kept = store.put(payload, session="s", name="a")

    class Leave(Exception):
        pass

    pid = -1
    try:
        with store.snapshot():
            found = store.find("a", session="s")
            pid = os.fork()
            if pid == 0:
                raise Leave  # the child unwinds the block
            assert os.waitpid(pid, 0)[1] == 0

            def churn():
                store.delete(kept.id)
                for i in range(12):
                    store.put(os.urandom(1 << 20), session="s", name=f"n{i}")

            worker = threading.Thread(target=churn)
            worker.start()
            worker.join(120)
            assert store.get(found.id) == payload
    except Leave:
        pass
    finally:
        if pid == 0:  # the child: its objects go, then it ends at once (never back into the test run)
            try:
                gc.collect()
            finally:
                os._exit(0)
    store.close()
