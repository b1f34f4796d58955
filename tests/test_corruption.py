"""Corruption (issue 8): damaged chunks, records and files never turn into wrong bytes.

The damage is done with the ``lmdb`` module directly (the store is closed first: LMDB
allows one environment per file per process), or with plain file operations.  Then:

* a read that needs damaged bytes raises ``blobpad.CorruptData``; a read that does
  not need them still answers right; nothing ever returns wrong bytes;
* ``verify()`` is not ok and names the damaged entries in ``damaged_entries`` (and
  only them); deleting them makes the store verify ok again, and the content can be
  put again;
* a truncated data file, a garbage or empty ``data.mdb``, a foreign LMDB file and a
  regular file given as the store path make ``open`` (or the reads) fail with a
  clear ``BlobpadError``, in a subprocess so that a crash (SIGBUS on a truncated
  map) shows as a failure instead of killing pytest.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import lmdb
import pytest
import zstandard

import blobpad
from blobpad import CorruptData, sample
from blobpad.chunking import Manifest
from blobpad.engine.base import seal, unseal
from blobpad.view import chunk_list_blob

SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
PROBE = Path(__file__).parent / "_probe_store.py"


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_keys(store: blobpad.Store, entry_id: str) -> list[bytes]:
    with store.engine.read() as txn:
        return Manifest.unpack(chunk_list_blob(txn, bytes.fromhex(entry_id))).keys


class Raw:
    """The store's LMDB file opened with the ``lmdb`` module (the Store must be closed)."""

    def __init__(self, path: Path) -> None:
        self.env = lmdb.open(str(path), max_dbs=32, subdir=True, map_size=1 << 30)

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.env.close()

    def get(self, space: str, key: bytes) -> bytes | None:
        """The record's value, its checksum checked and removed."""
        stored = self.get_raw(space, key)
        return None if stored is None else unseal(space, key, stored)

    def put(self, space: str, key: bytes, value: bytes) -> None:
        """Replace a record with a consistently sealed value: damage the checksum cannot see,
        so that the checks behind it (chunk hashes, record shapes) are what is tested."""
        self.put_raw(space, key, seal(space, key, value))

    def get_raw(self, space: str, key: bytes) -> bytes | None:
        db = self.env.open_db(space.encode(), create=False)
        with self.env.begin() as txn:
            return txn.get(key, db=db)

    def put_raw(self, space: str, key: bytes, value: bytes) -> None:
        db = self.env.open_db(space.encode(), create=False)
        with self.env.begin(write=True) as txn:
            txn.put(key, value, db=db)

    def delete(self, space: str, key: bytes) -> None:
        db = self.env.open_db(space.encode(), create=False)
        with self.env.begin(write=True) as txn:
            assert txn.delete(key, db=db)


def _text(n: int, seed: int) -> str:
    return sample.log_text(n, seed)


@pytest.fixture
def damaged_setup(tmp_path):
    """Three entries: ``a`` (text), ``b`` (a's text plus more: shares a's first chunks,
    another session), ``c`` (binary, unrelated).  Returns (path, contents, ids)."""
    path = tmp_path / "store"
    a = _text(6000, 1).encode()
    b = a + _text(3000, 2).encode()
    c = sample.binary_blob(5000, seed=3)
    with blobpad.open(path, chunk_params=SMALL) as s:
        ids = {"a": s.put(a, session="one").id, "b": s.put(b, session="two").id, "c": s.put(c, session="one").id}
        keys = {k: _manifest_keys(s, eid) for k, eid in ids.items()}
    assert keys["a"][0] == keys["b"][0], "b was meant to share a's first chunk"
    assert not set(keys["c"]) & set(keys["a"])
    return path, {"a": a, "b": b, "c": c}, ids, keys


def _flip_middle(frame: bytes, other: bytes) -> bytes:
    i = len(frame) // 2
    return frame[:i] + bytes([frame[i] ^ 0x41]) + frame[i + 1 :]


def _flip_last(frame: bytes, other: bytes) -> bytes:
    return frame[:-1] + bytes([frame[-1] ^ 0x01])


def _truncate(frame: bytes, other: bytes) -> bytes:
    return frame[: len(frame) // 2]


def _empty(frame: bytes, other: bytes) -> bytes:
    return b""


def _another_chunk(frame: bytes, other: bytes) -> bytes:
    return other  # a valid zstd frame, of other bytes


def _same_length_other_bytes(frame: bytes, other: bytes) -> bytes:
    raw = zstandard.ZstdDecompressor().decompress(frame)
    changed = bytes([raw[0] ^ 0x20]) + raw[1:]
    return zstandard.ZstdCompressor(level=1, write_content_size=True).compress(changed)


def _garbage(frame: bytes, other: bytes) -> bytes:
    return os.urandom(len(frame))


DAMAGES = [_flip_middle, _flip_last, _truncate, _empty, _another_chunk, _same_length_other_bytes, _garbage]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__.strip("_") for d in DAMAGES])
def test_a_damaged_chunk_raises_corrupt_data_and_verify_names_its_entries(damaged_setup, damage):
    path, data, ids, keys = damaged_setup
    victim = keys["a"][0]  # shared by a and b
    with Raw(path) as raw:
        frame = raw.get("chunks", victim)
        raw.put("chunks", victim, damage(frame, raw.get("chunks", keys["c"][0])))

    with blobpad.open(path) as s:
        for name in ("a", "b"):
            eid = ids[name]
            for read in (
                lambda e=eid: s.get(e),
                lambda e=eid: s.head(e, 10),
                lambda e=eid: s.range(e, 0, 5),
                lambda e=eid: s.byte_range(e, 0, 100),
                lambda e=eid: s.lines(e, 1, 2),
                lambda e=eid: s.grep(e, "INFO"),
                lambda e=eid: s.count(e, "x"),
                lambda e=eid: s.stream(e).read(),
            ):
                with pytest.raises(CorruptData) as err:
                    read()
                msg = str(err.value)
                assert 0 < len(msg) < 500 and "verify" in msg, msg
        # reads that do not need the damaged chunk still answer, and right
        far = len(data["a"]) - 50
        assert s.byte_range(ids["a"], far) == data["a"][far:]
        assert _as_bytes(s.tail(ids["b"], 100)) == data["b"][-100:]
        assert _as_bytes(s.get(ids["c"])) == data["c"]

        report = s.verify()
        assert not report.ok and report.problems
        assert report.damaged_entries == sorted([ids["a"], ids["b"]])
        assert all(len(p) < 500 for p in report.problems)

        # what CorruptData tells to do works: delete the damaged entries, put them again
        s.delete(ids["a"])
        s.delete(ids["b"])
        after = s.verify()
        assert after.ok and after.problems == [] and after.damaged_entries == []
        again = s.put(data["a"], session="one")
        assert _as_bytes(s.get(again.id)) == data["a"]
        assert _as_bytes(s.get(ids["c"])) == data["c"]
        assert s.verify().ok


def test_a_missing_chunk_raises_corrupt_data_and_verify_names_its_entry(damaged_setup):
    path, data, ids, keys = damaged_setup
    with Raw(path) as raw:
        raw.delete("chunks", keys["c"][1])
    with blobpad.open(path) as s:
        with pytest.raises(CorruptData):
            s.get(ids["c"])
        with pytest.raises(CorruptData):
            s.byte_range(ids["c"], 0)
        assert _as_bytes(s.get(ids["a"])) == data["a"]
        report = s.verify()
        assert not report.ok and report.damaged_entries == [ids["c"]]
        s.delete(ids["c"])
        assert s.verify().ok


def test_a_damaged_chunk_list_raises_corrupt_data(damaged_setup):
    path, data, ids, keys = damaged_setup
    with Raw(path) as raw:
        blob = raw.get("manifests", bytes.fromhex(ids["c"]))
        raw.put("manifests", bytes.fromhex(ids["c"]), blob[: len(blob) // 2 + 3])
    with blobpad.open(path) as s:
        for read in (lambda: s.get(ids["c"]), lambda: s.tail(ids["c"], 5), lambda: s.lines(ids["c"])):
            with pytest.raises(CorruptData):
                read()
        assert _as_bytes(s.get(ids["a"])) == data["a"]
        report = s.verify()
        assert not report.ok and report.damaged_entries == [ids["c"]]
        s.delete(ids["c"])
        s.gc()
        report = s.verify()
        assert report.problems == [] and report.ok, report.problems[:3]


def _recount(path: Path) -> tuple[int, int]:
    """(chunks, stored bytes) counted from the raw ``chunks`` keyspace."""
    with Raw(path) as raw:
        db = raw.env.open_db(b"chunks", create=False)
        with raw.env.begin() as txn:
            frames = [v for _, v in txn.cursor(db=db)]
    return len(frames), sum(len(f) for f in frames)


@pytest.mark.parametrize("delete_first", [False, True], ids=["gc-after-verify", "delete-then-gc"])
def test_damaged_and_missing_reference_records_never_raise_raw_errors_and_gc_rebuilds_them(
    damaged_setup, delete_first
):
    path, data, ids, keys = damaged_setup
    shared, lone = keys["a"][0], keys["c"][0]  # shared by a and b; used by c only
    with Raw(path) as raw:
        raw.put("refs", shared, b"\x01\x02\x03")  # wrong length: does not unpack
        raw.delete("refs", lone)
    with blobpad.open(path) as s:
        # reads do not need the reference records: every entry reads back exactly
        for name in ("a", "b", "c"):
            assert _as_bytes(s.get(ids[name])) == data[name]
        report = s.verify()
        assert not report.ok and report.damaged_entries == []
        assert any(shared.hex() in p for p in report.problems) and any(lone.hex() in p for p in report.problems)
        assert all(len(p) < 500 for p in report.problems)
        # a put that deduplicates against the damaged records stores a good copy
        again = s.put(data["a"], session="three")
        assert _as_bytes(s.get(again.id)) == data["a"]
        if delete_first:
            s.delete(ids["b"])  # releases the damaged record: must not raise
            s.delete(ids["c"])
            del data["b"], data["c"], ids["b"], ids["c"]
            # lone had no record, so deleting c could not free it: verify names the orphan
            assert any(lone.hex() in p and "nothing references it" in p for p in s.verify().problems)
        s.gc()
        report = s.verify()
        assert report.ok and report.problems == [], report.problems[:3]
        for name in ids:
            assert _as_bytes(s.get(ids[name])) == data[name]
        stats = s.stats()
        for eid in [*ids.values(), again.id]:
            s.delete(eid)
        s.gc()
        assert s.verify().ok
        assert (s.stats().chunks, s.stats().stored_bytes) == (0, 0), stats
    assert _recount(path) == (0, 0)


def test_a_damaged_entry_record_raises_corrupt_data_and_can_be_deleted(damaged_setup):
    path, data, ids, keys = damaged_setup
    with Raw(path) as raw:
        raw.put("entries", bytes.fromhex(ids["c"]), b'{"id": "trunc')
    with blobpad.open(path) as s:
        for read in (lambda: s.stat(ids["c"]), lambda: s.get(ids["c"]), lambda: s.head(ids["c"], 3)):
            with pytest.raises(CorruptData):
                read()
        # listing must not fail with a raw JSON error: it skips the record or raises CorruptData
        try:
            listed = [e.id for e in s.entries()]
            assert ids["a"] in listed and ids["c"] not in listed
        except CorruptData:
            pass
        assert _as_bytes(s.get(ids["a"])) == data["a"]
        report = s.verify()
        assert not report.ok and report.damaged_entries == [ids["c"]]
        # CorruptData says "delete it": deleting the damaged entry must work
        s.delete(ids["c"])
        with pytest.raises(blobpad.NotFound):
            s.stat(ids["c"])
        s.gc()
        report = s.verify()
        assert report.ok and report.problems == [], report.problems
        assert _as_bytes(s.get(ids["b"])) == data["b"]


@pytest.mark.parametrize("damage", ["invalid utf-8", "length past the key", "length short", "length cut"])
def test_a_damaged_session_index_key_is_left_out_never_a_raw_error(tmp_path, damage):
    """A session-index key with a flipped byte (its session's text no longer UTF-8, or its length field
    wrong): listing entries and sessions leave that record out, with no exception of another kind, and
    verify() names it."""
    path = tmp_path / "store"
    with blobpad.open(path) as s:
        gone = s.put("hello\n", session="alpha", ttl=None)
        kept = s.put("world\n", session="beta", ttl=None)
    with Raw(path) as raw:
        db = raw.env.open_db(b"by_scope", create=False)
        with raw.env.begin() as txn:
            key, stored = next((k, v) for k, v in txn.cursor(db=db) if k[5:10] == b"alpha")
        bad = bytearray(key)
        if damage == "invalid utf-8":
            bad[5] = 0xBE
        elif damage == "length past the key":
            bad[1:5] = (len(key) + 50).to_bytes(4, "big")
        elif damage == "length short":
            bad[1:5] = (2).to_bytes(4, "big")
        else:
            bad = bad[:3]
        raw.delete("by_scope", key)
        raw.put_raw("by_scope", bytes(bad), stored)  # the value sealed under the old key: damaged
    with blobpad.open(path, cache_bytes=0) as s:
        assert [e.id for e in s.entries()] == [kept.id]
        assert s.sessions() == ["beta"] and s.sessions("a") == []
        assert [e.id for e in s.entries(session="beta")] == [kept.id]
        problems = s.verify().problems
        assert any("by_scope record" in p and "damaged" in p for p in problems)
        assert any(gone.id in p for p in problems)


@pytest.mark.parametrize("damage", [lambda v: b'{"id": "trunc', None], ids=["undecodable", "checksum"])
def test_counters_recounted_while_an_entry_record_is_damaged_stay_right_once_it_is_deleted(damaged_setup, damage):
    """verify() flags wrong counters, gc() recounts them while the damaged record is still
    stored, then the record is deleted: the counters must count it until then, or they
    end one entry (and its bytes) short of the truth."""
    path, data, ids, keys = damaged_setup
    with Raw(path) as raw:
        key = bytes.fromhex(ids["c"])
        if damage is None:  # a flipped byte: the checksum no longer matches
            stored = raw.get_raw("entries", key)
            raw.put_raw("entries", key, bytes([stored[0] ^ 1]) + stored[1:])
        else:
            raw.put("entries", key, damage(b""))
    with blobpad.open(path) as s:
        assert not s.verify().ok
        s.gc()
        assert s.stats().entries == 3  # the damaged one is still stored
        s.delete(ids["c"])
        s.gc()
        assert s.stats().entries == 2 and s.stats().logical_bytes == len(data["a"]) + len(data["b"])
        report = s.verify()
        assert report.ok, report.problems


# -- damaged and foreign files, in a subprocess ---------------------------------------------------


def _probe(path: Path, expected: dict[str, str]) -> dict:
    """Run tests/_probe_store.py on ``path``; fail if it crashed or hung."""
    try:
        proc = subprocess.run(
            [sys.executable, str(PROBE), str(path), json.dumps(expected)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"opening and reading {path} hung for 120 s")
    if proc.returncode != 0:
        sig = -proc.returncode
        what = signal.Signals(sig).name if proc.returncode < 0 and sig in signal.valid_signals() else proc.returncode
        pytest.fail(f"the process opening {path} died ({what}) instead of raising CorruptData:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_clear_failure_or_right_bytes(report: dict) -> None:
    assert report["foreign_errors"] == [], f"errors that are not BlobpadError escaped: {report['foreign_errors']}"
    if report["open"] != "ok":
        name, _, msg = report["open"].partition(": ")
        assert name in ("CorruptData", "BlobpadError") and 20 < len(msg) < 600, report["open"]
        return
    damaged = set()
    for eid, outcomes in report["reads"].items():
        for outcome in outcomes:
            assert "wrong bytes" not in outcome, f"{eid}: {outcome}"
            if not outcome.endswith(": ok"):
                assert "CorruptData" in outcome, f"{eid}: {outcome}"
                damaged.add(eid)
    verify = report["verify"]
    if isinstance(verify, dict):
        assert set(verify["damaged_entries"]) >= damaged, "verify() does not name every entry that failed to read"
        assert verify["ok"] == (not verify["problems"])
        if damaged:
            assert not verify["ok"]
    else:
        assert verify.startswith("CorruptData"), verify


@pytest.fixture(scope="module")
def filled_store(tmp_path_factory):
    """A store of ~8 MB in many pages, and the SHA-256 of every entry."""
    path = tmp_path_factory.mktemp("filled") / "store"
    expected = {}
    with blobpad.open(path, chunk_params=SMALL) as s:
        for i in range(12):
            data = sample.binary_blob(300_000, seed=i) if i % 2 else _text(300_000, i).encode()
            expected[s.put(data).id] = _sha(data)
    return path, expected


@pytest.mark.parametrize("cut", ["half", "tenth", "one-page-short", "odd-size", "two-pages"])
def test_a_truncated_data_file_fails_clearly_and_never_crashes(filled_store, tmp_path, cut):
    src, expected = filled_store
    path = tmp_path / "cut"
    path.mkdir()
    data = (src / "data.mdb").read_bytes()
    size = {"half": len(data) // 2, "tenth": len(data) // 10, "one-page-short": len(data) - 4096,
            "odd-size": len(data) - 1234, "two-pages": 8192}[cut]
    (path / "data.mdb").write_bytes(data[:size])
    report = _probe(path, expected)
    _assert_clear_failure_or_right_bytes(report)


def _short_by(path: Path) -> int:
    """Bytes by which data.mdb is shorter than its last transaction's pages (LMDB read directly)."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True, readonly=True, lock=False)
    try:
        needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    finally:
        env.close()
    return needed - (path / "data.mdb").stat().st_size


def _cut_trailing_zero_pages(data: Path, psize: int = 4096) -> None:
    """Truncate data.mdb after its last page holding anything (the zero pages after it were never written)."""
    raw = data.read_bytes()
    end = len(raw) - len(raw) % psize
    while end > 2 * psize and not any(raw[end - psize : end]):
        end -= psize
    os.truncate(data, end)


def test_a_healthy_file_shorter_than_its_last_page_opens(tmp_path):
    """LMDB counts pages a transaction allocated and freed again but never writes them,
    so a healthy data file can end before its last page: found by a user whose store
    blobpad then refused to open after delete_session.  It must open, read and verify."""
    text = "line\n" * 50_000
    # Whether LMDB leaves the file short depends on its page allocation: try a few
    # histories (a bounded search) until one does.
    for attempt, (versions, width) in enumerate([(120, 1), (200, 200), (80, 1), (300, 200), (40, 1), (80, 2000)]):
        path = tmp_path / f"store{attempt}"
        with blobpad.open(path) as s:
            keep = s.put(text, session="s2", ttl=None).id
            s.put(text.upper(), session="s1", turn=1)
        with blobpad.open(path) as s:
            pad = s.notepad("s1")
            pad.set_plan("1. a\n2. b")
            pad.append_notes("n")
            for i in range(versions):
                pad.set_plan(f"v{i}" * width)
        with blobpad.open(path) as s:
            s.delete_session("s1")
        _cut_trailing_zero_pages(path / "data.mdb")  # as a file written before blobpad backed the whole map
        if _short_by(path) > 0:
            break
    assert _short_by(path) > 0, "LMDB wrote every page: this test no longer makes the case it checks"
    with blobpad.open(path) as s:
        assert s.get(keep) == text and s.verify().ok and s.entries(session="s1") == []
        assert s.notepad("s1").spaces() == {}
        s.put("still writable")
    assert _short_by(path) <= 0


def _write_foreign_lmdb(path: Path) -> None:
    env = lmdb.open(str(path), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"meta", b"this is somebody else's database")
        txn.put(b"entries", b"not a blobpad keyspace")
    env.close()


FOREIGN = {
    "garbage": lambda p: (p / "data.mdb").write_bytes(os.urandom(64 << 10)),
    "empty": lambda p: (p / "data.mdb").write_bytes(b""),
    "zeros": lambda p: (p / "data.mdb").write_bytes(bytes(16 << 10)),
    "text": lambda p: (p / "data.mdb").write_text("hello, I am a text file\n" * 500),
    "one-byte": lambda p: (p / "data.mdb").write_bytes(b"\x01"),
    "foreign-lmdb": _write_foreign_lmdb,
}


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_directory_that_is_not_a_blobpad_store_fails_clearly(tmp_path, kind):
    path = tmp_path / "foreign"
    path.mkdir()
    FOREIGN[kind](path)
    before = (path / "data.mdb").read_bytes()
    report = _probe(path, {})
    assert report["foreign_errors"] == [], report["foreign_errors"]
    name, _, msg = report["open"].partition(": ")
    assert name in ("CorruptData", "BlobpadError"), report["open"]
    assert str(path) in msg and len(msg) < 600, msg
    assert (path / "data.mdb").read_bytes() == before, "opening a foreign file must not change it"


def test_a_regular_file_given_as_the_store_path_fails_clearly(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("not a store\n")
    with pytest.raises(blobpad.BlobpadError) as err:
        blobpad.open(f)
    assert str(f) in str(err.value) and len(str(err.value)) < 600
    assert f.read_text() == "not a store\n"


def test_a_garbage_lock_file_next_to_a_good_store_is_harmless(filled_store, tmp_path):
    src, expected = filled_store
    path = tmp_path / "lockjunk"
    path.mkdir()
    (path / "data.mdb").write_bytes((src / "data.mdb").read_bytes())
    (path / "lock.mdb").write_bytes(os.urandom(8192))
    report = _probe(path, expected)
    _assert_clear_failure_or_right_bytes(report)


# -- a damaged B-tree page: verify() reports it instead of letting LMDB walk onto it ---------------

_PAGE = 4096


def _main_root(img: bytes) -> int:
    """The main tree's root page of the newer of the two meta pages (LMDB 0.9's layout)."""
    best = (-1, 0)
    for pg in (0, 1):
        dbs = pg * _PAGE + 16 + 24
        txnid = int.from_bytes(img[dbs + 104:dbs + 112], "little")
        best = max(best, (txnid, int.from_bytes(img[dbs + 48 + 40:dbs + 48 + 48], "little")))
    return best[1]


def _nodes(img: bytes, pg: int) -> tuple[int, list[tuple[int, int, bytes, int]]]:
    """(flags, [(node offset in the page, branch child or leaf data size, key, data offset)])."""
    base = pg * _PAGE
    flags, lower = int.from_bytes(img[base + 10:base + 12], "little"), int.from_bytes(img[base + 12:base + 14], "little")
    out = []
    for j in range((lower - 16) // 2):
        ptr = int.from_bytes(img[base + 16 + 2 * j:base + 18 + 2 * j], "little")
        lo, hi, fl, ks = (int.from_bytes(img[base + ptr + i:base + ptr + i + 2], "little") for i in (0, 2, 4, 6))
        out.append((ptr, lo | hi << 16 | (fl << 32 if flags & 1 else 0), img[base + ptr + 8:base + ptr + 8 + ks],
                    base + ptr + 8 + ks))
    return flags, out


def _tree_root(img: bytes, name: bytes) -> int:
    pg = _main_root(img)
    while True:
        flags, nodes = _nodes(img, pg)
        if flags & 1:
            pg = [child for i, (_, child, key, _) in enumerate(nodes) if i == 0 or key <= name][-1]
            continue
        data = next(at for _, _, key, at in nodes if key == name)
        return int.from_bytes(img[data + 40:data + 48], "little")


def _set16(img: bytearray, at: int, value: int) -> None:
    img[at:at + 2] = value.to_bytes(2, "little")


_TREE_DAMAGE = {
    "leaf flagged overflow": lambda img, root, kids: _set16(img, kids[len(kids) // 2][1] * _PAGE + 10, 0x04),
    "leaf zeroed": lambda img, root, kids: img.__setitem__(
        slice(kids[len(kids) // 2][1] * _PAGE, kids[len(kids) // 2][1] * _PAGE + _PAGE), bytes(_PAGE)),
    "child past the file": lambda img, root, kids: _set16(img, root * _PAGE + kids[len(kids) // 2][0], 0xFFF0),
    "child is its parent": lambda img, root, kids: _set16(img, root * _PAGE + kids[len(kids) // 2][0], root),
    "child is a meta page": lambda img, root, kids: _set16(img, root * _PAGE + kids[len(kids) // 2][0], 1),
}

def _store_with_a_damaged_chunks_tree(tmp_path: Path, damage: str, tree: bytes = b"chunks") -> Path:
    """A store of 120 entries whose chunks' tree (a branch over several leaves; or ``tree``) has one
    page damaged by ``_TREE_DAMAGE[damage]``; the entries' texts in ``tmp_path / "expected.json"``."""
    path = tmp_path / "store"
    texts = {}
    with blobpad.open(path) as s:
        for i in range(120):
            text = f"entry {i}\n" + "".join(f"{i}-{n} some log text {n * i % 997}\n" for n in range(60))
            texts[s.put(text, session="s", ttl=None).id] = text
    data = path / "data.mdb"
    img = bytearray(data.read_bytes())
    root = _tree_root(bytes(img), tree)
    flags, kids = _nodes(bytes(img), root)
    assert flags & 1 and len(kids) > 4, f"the {tree.decode()} tree was meant to have a branch root over several leaves"
    _TREE_DAMAGE[damage](img, root, [(ptr, child) for ptr, child, _, _ in kids])
    data.write_bytes(bytes(img))
    (tmp_path / "expected.json").write_text(json.dumps(texts))
    return path


_VERIFY_THEN_READ = """
import json, sys, blobpad
expected = json.load(open(sys.argv[2]))
store = blobpad.open(sys.argv[1], cache_bytes=0)
report = store.verify()
failing = []
for eid, text in expected.items():
    try:
        if store.get(eid) != text:
            failing.append(eid)
    except blobpad.CorruptData:
        failing.append(eid)
print(json.dumps({"ok": report.ok, "listed": report.damaged_entries, "failing": sorted(failing),
                  "problems": report.problems}))
"""


@pytest.mark.parametrize("damage", list(_TREE_DAMAGE))
def test_a_damaged_tree_page_is_reported_by_verify_never_walked_into(tmp_path, damage):
    """A damaged branch or leaf page of the chunks' tree: LMDB's cursor aborts the process
    when it moves onto one (``Assertion 'IS_LEAF(mp)' failed``).  verify() walks the
    trees itself first: it returns, names the damaged page, and lists exactly the entries
    whose content cannot be read back (the oracle: reading each entry), no intact one."""
    path = _store_with_a_damaged_chunks_tree(tmp_path, damage)
    proc = subprocess.run([sys.executable, "-c", _VERIFY_THEN_READ, str(path), str(tmp_path / "expected.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"the process died ({proc.returncode}): {proc.stderr[-1500:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["ok"] and any("the chunks tree: page" in p for p in out["problems"]), out["problems"][:5]
    assert out["failing"] and out["listed"] == out["failing"]


_COMPACT_THEN_DELETE = """
import json, sys, blobpad
expected = json.load(open(sys.argv[2]))
store = blobpad.open(sys.argv[1], cache_bytes=0)
store.compact()  # rebuilds the file from its sound pages
report = store.verify()
for eid in report.damaged_entries:
    store.delete(eid)
store.gc()
after = store.verify()
wrong = [eid for eid, text in expected.items() if eid not in report.damaged_entries and store.get(eid) != text]
store.put("written after the repair\\n", session="s")
print(json.dumps({"listed": report.damaged_entries, "ok_after": after.ok, "problems_after": after.problems,
                  "wrong": wrong, "entries": store.stats().entries}))
"""


@pytest.mark.parametrize("damage", list(_TREE_DAMAGE))
def test_compact_rebuilds_a_damaged_tree_so_its_damaged_entries_can_be_deleted(tmp_path, damage):
    """With a tree page damaged, the entry whose chunk sat on it could not be deleted (the
    delete reached the page: MDB_CORRUPTED) and compact() failed (LMDB's copy walks every
    page).  compact() now writes the file again from its sound pages: then verify() names
    the entries left incomplete, they delete, gc() tidies, verify() is clean, every other
    entry reads back exactly, and the store takes puts."""
    path = _store_with_a_damaged_chunks_tree(tmp_path, damage)
    proc = subprocess.run([sys.executable, "-c", _COMPACT_THEN_DELETE, str(path), str(tmp_path / "expected.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"the process failed ({proc.returncode}): {proc.stderr[-1500:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["listed"] and out["ok_after"], out["problems_after"]
    assert out["wrong"] == [] and out["entries"] == 120 - len(out["listed"]) + 1


_VERIFY_THEN_GC = """
import json, sys, blobpad
store = blobpad.open(sys.argv[1], cache_bytes=0)
report = store.verify()
first, second = store.gc(), store.gc()
print(json.dumps({"ok": report.ok, "gc": [list(first.problems), list(second.problems)]}))
"""


@pytest.mark.parametrize("tree", [b"entries", b"chunks"])
@pytest.mark.parametrize("damage", list(_TREE_DAMAGE))
def test_gc_after_verify_on_a_damaged_tree_page_says_compact_instead_of_walking_into_it(tmp_path, damage, tree):
    """verify() of a store with a damaged tree page leaves the store flagged for gc() to recount the
    chunk references; that recount walked the trees through LMDB, which aborted the process on the
    damaged page (``Assertion 'IS_LEAF(mp)' failed``), at every gc() in any process until compact().
    gc() now checks the pages first: it returns, and says to compact() first."""
    path = _store_with_a_damaged_chunks_tree(tmp_path, damage, tree)
    proc = subprocess.run([sys.executable, "-c", _VERIFY_THEN_GC, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"the process died ({proc.returncode}): {proc.stderr[-1500:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["ok"]
    if tree == b"entries":  # entries that cannot be read whole: verify() asks gc() for the recount
        for problems in out["gc"]:
            assert any("damaged pages" in p and "compact()" in p for p in problems), problems


def test_a_damaged_overflow_page_header_is_found_by_verify_and_compact_lets_its_entry_go(tmp_path):
    """A large chunk lives on overflow pages; LMDB reads it without looking at their
    header, but freeing them (deleting the entry) checks it and fails: verify() said ok,
    then the entry could never be deleted.  verify() now checks those headers too, names
    the entry, and after compact() it deletes and the store comes clean."""
    path = tmp_path / "store"
    with blobpad.open(path) as s:
        big = s.put(sample.binary_blob(60_000, seed=5), session="s", ttl=None)
        small = {s.put(f"small {i}\n" * 20, session="s", ttl=None).id: f"small {i}\n" * 20 for i in range(5)}
    data = path / "data.mdb"
    img = bytearray(data.read_bytes())
    flags, nodes = _nodes(bytes(img), _tree_root(bytes(img), b"chunks"))
    assert flags & 2, "a chunks' tree of one leaf was expected"
    overflow = [at for ptr, size, key, at in nodes if size > 4000]
    assert overflow, "the large chunk was expected on overflow pages"
    pgno = int.from_bytes(img[overflow[0]:overflow[0] + 8], "little")
    _set16(img, pgno * _PAGE + 10, 0x02)  # its header now says leaf
    data.write_bytes(bytes(img))
    with blobpad.open(path) as s:
        report = s.verify()
        assert not report.ok and report.damaged_entries == [big.id], report.problems
        assert any("overflow page" in p for p in report.problems)
        s.compact()
        for eid in s.verify().damaged_entries:
            s.delete(eid)
        s.gc()
        assert s.verify().ok
        assert {eid: s.get(eid) for eid in small} == small
        s.delete_session("s")
        assert s.stats().entries == 0


def test_a_damaged_keyspace_table_is_reported_once_and_its_trees_left_to_lmdb(tmp_path):
    """The walk of a file whose main tree (LMDB's table of the keyspaces) has a damaged page
    reports that page once, under the table's name, and claims nothing about the keyspaces
    it can no longer find there (LMDB found them when the store opened); a sound file
    reports nothing."""
    from blobpad.engine import lmdbpages
    from blobpad.engine.base import SPACES

    path = tmp_path / "store"
    with blobpad.open(path) as s:
        for i in range(10):
            s.put(f"entry {i}\n" * 30, session="s")
    img = bytearray((path / "data.mdb").read_bytes())
    txnid, main = max((int.from_bytes(img[pg * _PAGE + 16 + 24 + 104:pg * _PAGE + 16 + 24 + 112], "little"),
                       _main_root(bytes(img))) for pg in (0, 1))
    assert lmdbpages.damaged_trees(str(path / "data.mdb"), txnid, list(SPACES)) == {}
    img[main * _PAGE + 4] ^= 8  # the page's own number, as its header records it
    (path / "data.mdb").write_bytes(bytes(img))
    trees = lmdbpages.damaged_trees(str(path / "data.mdb"), txnid, list(SPACES))
    assert list(trees) == [lmdbpages.KEYSPACE_TABLE]
    assert trees[lmdbpages.KEYSPACE_TABLE].damage == [f"the keyspace table tree: page {main}: its header says page "
                                                       f"{main + (1 << 35)}"]


def test_a_sound_store_whose_free_page_list_spans_many_commits_verifies_clean(tmp_path):
    """LMDB keys its free-page list by transaction id, as a native integer: past 255
    commits those keys are out of byte order by design.  verify() took that for damage
    (and said no write could commit) on healthy stores that had seen many commits."""
    with blobpad.open(tmp_path / "store", map_size=256 << 20) as s:  # no map growth: it would wait for the reader
        s.put("first\n")
        held, done = threading.Event(), threading.Event()

        def reader() -> None:  # an old snapshot: pages freed after it are not reused, the free list grows
            with s.engine.read():
                held.set()
                done.wait(60)

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            assert held.wait(60)
            for i in range(400):
                s.delete(s.put(f"entry {i}\n" * 200, session="s").id)
        finally:
            done.set()
            thread.join(60)
        for i in range(5):
            s.delete(s.put(f"again {i}\n" * 200, session="s").id)
        report = s.verify()
        assert report.ok, report.problems


_META_FLIPS = """
import json, shutil, sys, blobpad
from pathlib import Path
src, work, expected = Path(sys.argv[1]), Path(sys.argv[2]), json.load(open(sys.argv[3]))
cases = json.loads(sys.argv[4])
out = []
for i, flips in enumerate(cases):
    copy = work / str(i)  # a path of its own: a process holds an open store's file by its path
    shutil.copytree(src, copy)
    data = copy / "data.mdb"
    img = bytearray(data.read_bytes())
    for page, offset, mask in flips:
        img[page * 4096 + offset] ^= mask
    data.write_bytes(bytes(img))
    try:
        store = blobpad.open(copy, cache_bytes=0)
    except blobpad.CorruptData:
        out.append("refused")
        shutil.rmtree(copy)
        continue
    with store:
        if any(store.get(eid) != text for eid, text in expected.items()):
            out.append("wrong")
            continue
        try:
            e = store.put("after the damage\\n")  # its commit writes its meta over the older page
        except blobpad.BlobpadError as exc:
            out.append(f"put failed: {exc}")
            continue
    healed = True
    try:  # opened again and again, each time with one more commit: either meta page comes first in turn
        for cycle in range(4):
            with blobpad.open(copy, cache_bytes=0) as again:
                healed = healed and again.get(e.id) == "after the damage\\n" and all(
                    again.get(eid) == text for eid, text in expected.items())
                for _ in range(cycle):
                    again.put(f"cycle {cycle}\\n")
        with blobpad.open(copy, cache_bytes=0) as again:
            healed = healed and again.verify().ok
    except blobpad.BlobpadError as exc:
        out.append(f"reopen failed: {exc}")
        continue
    out.append("opened" if healed else "not healed")
    shutil.rmtree(copy)
print(json.dumps(out))
"""


def test_one_damaged_bit_in_the_older_meta_page_leaves_the_store_open(tmp_path):
    """LMDB keeps two meta pages and reads the newer; of the older it reads only the flags, magic,
    version and transaction id, and its next commit writes over it.  Damage to the older page's
    other fields made the whole store unopenable (50 of its first 160 bytes); it now opens on the
    sound page, reads every entry exactly, and the next put writes the older page anew.  Damage
    to the fields LMDB reads is still refused: never an older state.  So is a newer page naming
    a tree root of the wrong kind, checked at open now."""
    path = tmp_path / "store"
    expected = {}
    with blobpad.open(path) as s:
        for i in range(5):
            text = _text(20_000, i)
            expected[s.put(text, session=f"s{i % 2}").id] = text
    img = (path / "data.mdb").read_bytes()
    txnids = [int.from_bytes(img[p * _PAGE + 144 : p * _PAGE + 152], "little") for p in (0, 1)]
    older = txnids.index(min(txnids))
    assert abs(txnids[0] - txnids[1]) == 1 and min(txnids) > 1
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    # (damage to the newer page is refused or read right: test_byteflip.py; some of it LMDB itself
    # trips over at a later commit, as it trusts the page it reads)
    cases = [[(older, offset, 1 << offset % 8)] for offset in range(160)]
    # and the newer page naming, as a tree's root, a page of another kind (an overflow page, a page
    # never written), or a depth its root page does not have: refused at open, where LMDB failed at
    # the next commit ("Located page was wrong type") or aborted on an assertion
    newer = 1 - older
    kinds = {int.from_bytes(img[p * _PAGE : p * _PAGE + 8], "little"): img[p * _PAGE + 10] & 0x0F
             for p in range(2, len(img) // _PAGE)}
    overflow = next(p for p, kind in kinds.items() if kind == 0x04)
    unwritten = next(p for p in range(2, len(img) // _PAGE) if not any(img[p * _PAGE : p * _PAGE + 16]))

    def pointing(at: int, page: int) -> list[tuple[int, int, int]]:  # the root field at ``at`` set to ``page``
        old = img[newer * _PAGE + at : newer * _PAGE + at + 8]
        return [(newer, at + i, b ^ n) for i, (b, n) in enumerate(zip(old, page.to_bytes(8, "little"), strict=True))
                if b != n]

    roots = [pointing(80, overflow), pointing(128, overflow), pointing(128, unwritten),
             [(newer, 94, 0x02)]]  # the main tree's depth 1 (one leaf) said to be 3
    assert img[newer * _PAGE + 94] == 1
    proc = subprocess.run([sys.executable, "-c", _META_FLIPS, str(path), str(tmp_path / "work"),
                           str(tmp_path / "expected.json"), json.dumps(cases + roots)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the process died ({proc.returncode}): {proc.stderr[-1500:]}"
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcomes[len(cases):] == ["refused"] * len(roots)
    outcomes = outcomes[: len(cases)]
    by = {(flips[0][0], flips[0][1]): outcome for flips, outcome in zip(cases, outcomes, strict=True)}
    assert set(outcomes) <= {"refused", "opened"}, {k: v for k, v in by.items() if v not in ("refused", "opened")}
    # the older page: refused only where LMDB reads it (flags 10-11, magic 16-19, version 20-23) or
    # where the damage hides which page is older (its transaction id 144-151) or where the page size is
    # (page 0's free tree record: LMDB finds the second page by it)
    read = set(range(10, 12)) | set(range(16, 24)) | set(range(144, 152)) | (set(range(40, 44)) if older == 0 else set())
    refused = {offset for (_, offset), v in by.items() if v == "refused"}
    assert refused == read, (sorted(refused - read), sorted(read - refused))
