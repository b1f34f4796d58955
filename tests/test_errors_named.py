"""Only blobpad's own errors escape, each naming what happened (issue 12, item 5)."""

from __future__ import annotations

import decimal
import fractions
import math
import os
import subprocess
import sys

import lmdb
import pytest

import blobpad
from blobpad import BlobpadError, CorruptData, StoreFull
from blobpad.catalog import INLINE_CHUNKS
from blobpad.engine.base import seal
from blobpad.view import chunk_list_blob


def _put_raw(path, space: str, key: bytes, value: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            txn.put(key, value, db=env.open_db(space.encode(), txn=txn, create=False))
    finally:
        env.close()


@pytest.mark.parametrize("value", [b"{not json", b'{"format": 2}', b"[]", b'{"format": 2, "seed": "x"}'])
def test_damaged_settings_are_corrupt_data_at_open(tmp_path, value):
    path = tmp_path / "s"
    blobpad.open(path).close()
    _put_raw(path, "meta", b"settings", value)  # not even sealed
    with pytest.raises(CorruptData, match="settings"):
        blobpad.open(path)
    _put_raw(path, "meta", b"settings", seal("meta", b"settings", value))  # sealed, but the wrong shape
    with pytest.raises(CorruptData, match="settings"):
        blobpad.open(path)


@pytest.mark.parametrize("damage", ["settings", "truncated"])
def test_damage_that_stops_an_open_never_advises_verify_which_cannot_open_either(tmp_path, damage):
    """The usual advice for damage, "run verify()", is a loop when the store does not open:
    verify needs it open.  The advice then is what can be done: move it aside, restore."""
    path = tmp_path / "s"
    with blobpad.open(path) as store:
        for i in range(300):
            store.put(f"{i} x\n" * 2000, session="s")
    if damage == "settings":
        _put_raw(path, "meta", b"settings", b"{not json")
    else:
        with open(path / "data.mdb", "r+b") as fh:
            fh.truncate(20_000)
    with pytest.raises(CorruptData) as caught:
        blobpad.open(path)
    for face in ("library", "cli"):
        said = caught.value.render(face)
        rest = said.replace("verify() cannot open it either", "").replace("'blobpad verify' cannot open it either", "")
        assert "verify" not in rest and ("move the store aside" in said or "from a backup" in said), said
    proc = subprocess.run([sys.executable, "-m", "blobpad", "--db", str(path), "verify"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 2 and "from a backup" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", [b"{not json", b"[1, 2]", b'{"entries": "x"}', b"\xff\xfe"])
def test_damaged_counters_are_recounted(tmp_path, value):
    for sealed in (False, True):
        path = tmp_path / f"s{sealed}"
        with blobpad.open(path) as s:
            s.put("a" * 5000, ttl=None)
            s.put("b" * 7000, ttl=None)
            want = s.stats()
        _put_raw(path, "meta", b"counters", seal("meta", b"counters", value) if sealed else value)
        with blobpad.open(path) as s:
            got = s.stats()
            assert (got.entries, got.logical_bytes, got.chunks) == (want.entries, want.logical_bytes, want.chunks)
            assert not s.verify().ok  # verify names the damaged record
            s.put("c" * 100)  # writes go on, and rewrite sound counters
            got = s.stats()
            assert (got.entries, got.chunks, got.logical_bytes) == (want.entries + 1, want.chunks + 1, want.logical_bytes + 100)
            assert s.verify().ok


@pytest.mark.parametrize("clock", [lambda: math.nan, lambda: math.inf, lambda: -5.0, lambda: 1e300, lambda: "now", lambda: None,
                                   lambda: "1700000000", lambda: b"1700000000", lambda: complex(1.7e9, 0), lambda: True])
def test_a_broken_clock_is_a_clear_error(tmp_path, clock):
    """Also when it first runs as a new store is made (its creation time)."""
    with pytest.raises(BlobpadError, match="clock"), blobpad.open(tmp_path / "s", clock=clock) as s:
        s.put("x")


@pytest.mark.parametrize("value", [1_700_000_000, 1.7e9, decimal.Decimal("1700000000.25"), fractions.Fraction(17, 1) * 10**8])
def test_a_clock_giving_any_real_number_works(tmp_path, value):
    with blobpad.open(tmp_path / "s", clock=lambda: value) as s:
        e = s.put("x", ttl=10)
        assert e.expires_at == float(value) + 10 and s.get(e.id) == "x"


def test_the_same_store_through_another_path_shares_one_environment(tmp_path):
    real = tmp_path / "real"
    with blobpad.open(real) as a:
        eid = a.put("shared", ttl=None).id
        os.symlink(real, tmp_path / "link")
        other = tmp_path / "bind"
        other.mkdir()
        bound = subprocess.run(["mount", "--bind", str(real), str(other)], capture_output=True).returncode == 0
        try:
            paths = [tmp_path / "link", tmp_path / "." / "real"] + ([other] if bound else [])
            for path in paths:
                with blobpad.open(path) as b:
                    assert b.get(eid) == "shared"
                    b.put(f"from {path}", ttl=None)
            assert len(a.entries()) == 1 + len(paths)
        finally:
            if bound:
                subprocess.run(["umount", str(other)], check=False)


def test_too_many_readers_is_a_clear_error(tmp_path):
    path = tmp_path / "s"
    with blobpad.open(path, max_readers=2) as s:
        eid = s.put("x\n" * 10, ttl=None).id
    holder = subprocess.Popen(  # another process holding every reader slot
        [sys.executable, "-c", HOLD_READERS, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(BlobpadError, match="readers") as err, blobpad.open(path, max_readers=2) as s:
            s.get(eid)
        assert not isinstance(err.value, CorruptData)
    finally:
        holder.communicate("", timeout=30)


HOLD_READERS = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=32, max_readers=2)
held = [env.begin(), env.begin()]
print("holding", flush=True)
sys.stdin.read()
"""


def test_compact_on_a_full_disk_is_store_full_and_leaves_no_copy(small_fs):
    with blobpad.open(small_fs / "s") as s:
        keep = s.put(os.urandom(1 << 20).hex()[: 1 << 20], ttl=None).id
        small_fs.fill()
        with pytest.raises(StoreFull):
            s.compact()
        assert not [n for n in os.listdir(small_fs / "s") if n.startswith(".compact-")]
        assert len(s.get(keep)) == 1 << 20


def test_copies_left_by_a_killed_compact_are_removed_at_open(tmp_path):
    path = tmp_path / "s"
    blobpad.open(path).close()
    for pid in (123456, 99):
        stale = path / f".compact-{pid}"
        stale.mkdir()
        (stale / "data.mdb").write_bytes(b"\0" * 4096)
    with blobpad.open(path) as s:
        s.put("x")
    assert not [n for n in os.listdir(path) if n.startswith(".compact-")]


def _flip_stored(path, space: str, key: bytes) -> None:
    """Invert one byte of a stored record as it is on disk (its checksum no longer matches)."""
    env = lmdb.open(str(path), max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(space.encode(), txn=txn, create=False)
            value = bytearray(txn.get(key, db=db))
            value[len(value) // 2] ^= 0xFF
            txn.put(key, bytes(value), db=db)
    finally:
        env.close()


def test_damaged_records_are_named_deletable_and_gc_says_what_it_cannot_repair(tmp_path):
    path = tmp_path / "s"
    # small chunks: b has more than INLINE_CHUNKS of them, so its chunk list is a record of its own
    with blobpad.open(path, chunk_params=blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)) as s:
        a = s.put("alpha\n" * 500, ttl=None, session="x").id
        b = s.put("beta\n" * 2000, ttl=None, session="x").id
        c = s.put("gamma\n" * 500, ttl=None, session="y").id
        assert s.stat(b).chunks > INLINE_CHUNKS
    _flip_stored(path, "entries", bytes.fromhex(a))
    _flip_stored(path, "manifests", bytes.fromhex(b))
    with blobpad.open(path) as s:
        for read in (lambda: s.get(a), lambda: s.stat(a), lambda: s.get(b), lambda: s.entries(session="x")):
            with pytest.raises(CorruptData):
                read()
        assert s.get(c) == "gamma\n" * 500  # undamaged entries read on
        report = s.verify()
        assert not report.ok and set(report.damaged_entries) == {a, b}
        s.verify()  # flags the store for a recount, which the damaged chunk list blocks
        gc = s.gc()
        assert gc.problems and "damaged" in gc.problems[0]
    cli = subprocess.run([sys.executable, "-m", "blobpad", "--db", str(path), "gc"], capture_output=True, text=True)
    assert cli.returncode == 1 and "blobpad verify" in cli.stderr and "verify()" not in cli.stderr, cli
    cli = subprocess.run([sys.executable, "-m", "blobpad", "--db", str(path), "verify"], capture_output=True, text=True)
    assert cli.returncode == 1, cli
    with blobpad.open(path) as s:
        s.delete(a)  # damaged records are deletable: what CorruptData advises
        s.delete(b)
        assert not s.gc().problems
        assert s.verify().ok and [e.id for e in s.entries()] == [c]


@pytest.mark.parametrize("space", ["notes", "entries", "meta", "refs"])
def test_a_keyspace_lost_from_the_table_is_corrupt_data_not_an_empty_one(tmp_path, space):
    """Found by the byte-flip sweep: a damaged keyspace name made LMDB create an empty keyspace
    in its place (the notepad read "" and verify() was ok)."""
    path = tmp_path / "s"
    with blobpad.open(path) as s:
        s.put("x" * 1000, ttl=None)
        s.notepad("a").write("plan")
    env = lmdb.open(str(path), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(space.encode(), txn=txn, create=False), delete=True)
    env.close()
    with pytest.raises(CorruptData, match=space):
        blobpad.open(path)


def test_a_damaged_notepad_is_named_and_deletable(tmp_path):
    path = tmp_path / "s"
    with blobpad.open(path) as s:
        pad = s.notepad("a", ttl=60)
        pad.write("plan one")
        pad.write("plan two")
        s.notepad("b").write("other session")
    env = lmdb.open(str(path), max_dbs=32)
    with env.begin() as txn:  # session "a"'s versions and expiry record
        keys = [bytes(k) for k, _ in txn.cursor(db=env.open_db(b"notes", txn=txn, create=False))
                if k[:1] in (b"L", b"M") and k[1:6] == b"\x00\x00\x00\x01a"]
    env.close()
    assert len(keys) == 3
    for key in keys:
        _flip_stored(path, "notes", key)
    with blobpad.open(path) as s:
        with pytest.raises(CorruptData):
            s.notepad("a").read()
        assert not s.verify().ok
        s.delete_session("a")  # damaged notepad records are deletable
        assert s.notepad("a").read() == "" and s.notepad("b").read() == "other session"
        s.gc()
        problems = s.verify().problems
        assert all("notepad text" in p for p in problems), problems  # only the texts the damaged versions held


_READS = {
    "get": lambda s, i: s.get(i),
    "head": lambda s, i: s.head(i, 10**9),
    "tail": lambda s, i: s.tail(i, 10**9),
    "range": lambda s, i: s.range(i, 0, None),
    "byte_range": lambda s, i: s.byte_range(i, 0, None),
    "lines": lambda s, i: s.lines(i, 1, 10**6),
    "grep": lambda s, i: s.grep(i, "line", max_matches=10**9),
    "count": lambda s, i: s.count(i, "line"),
    "stream.read": lambda s, i: s.stream(i).read(),
    "stream.readline": lambda s, i: (lambda st: [st.readline() for _ in range(10**5)])(s.stream(i)),
    "stream.iter": lambda s, i: list(s.stream(i)),
    "stream.readinto": lambda s, i: s.stream(i).readinto(bytearray(10**7)),
}


@pytest.mark.parametrize("read", list(_READS))
def test_a_lost_chunk_is_corrupt_data_naming_its_entry_whatever_reads_it(store, read):
    """A chunk gone from the chunk space (a failover lost it, a disk page went): every way
    of reading the entry raises CorruptData naming the entry, so the caller knows which
    one to delete, and the other entry sharing nothing with it reads on."""
    from blobpad.chunking import Manifest

    text = "".join(f"line {n} of the entry that loses a chunk {'x' * (n % 50)}\n" for n in range(60_000))
    e = store.put(text, session="s")
    other = store.put("an entry that keeps all of its chunks\n", session="s")
    with store.engine.read() as txn:
        keys = Manifest.unpack(chunk_list_blob(txn, bytes.fromhex(e.id))).keys
    assert len(keys) > 2
    store.engine.write(lambda txn: txn.delete("chunks", keys[-1]), frees=True)
    store.codec.cache.clear()
    with pytest.raises(CorruptData) as caught:
        _READS[read](store, e.id)
    assert e.id in str(caught.value)
    assert store.get(other.id) == "an entry that keeps all of its chunks\n"
