"""Crash safety (issue 8): SIGKILL a process in the middle of puts, deletes, gc and
notepad writes, again and again, and check the store after every kill.

The victim is ``tests/_crash_child.py`` in a real process.  It logs an intent line
before each operation and an acknowledgement after it returned (flushed and fsynced),
so after a kill the parent knows every operation that completed, and the one that was
in flight.  After each kill it reopens the store (which rolls back the dead process's
half-written put) and checks:

* every acknowledged put reads back byte for byte (unless its deletion was
  acknowledged, a later put of the same name replaced it, or it has expired);
* no entry exists that was not acknowledged, except the one put in flight, and that
  one holds exactly the content it was given;
* nothing half-written is visible: the ``pending`` journal is empty after reopening,
  and the counters agree with the keyspaces;
* ``Store.verify()`` returns ok with an empty problems list.

``BLOBPAD_CRASH_ITERATIONS`` sets the number of kills (20 by default).
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import blobpad
from blobpad.index import Entry

sys.path.insert(0, str(Path(__file__).parent))
from _crash_child import BIG, CRASH_PARAMS, content, is_big, notepad_available, sha  # noqa: E402
from oracles import saved_counters  # noqa: E402

CHILD = Path(__file__).parent / "_crash_child.py"
ITERATIONS = int(os.environ.get("BLOBPAD_CRASH_ITERATIONS", "20"))
#: an entry whose expiry is this close is allowed to be gone (the clocks of the two
#: processes, and the time the checks take)
EXPIRY_SLACK = 2.0
STATS = ("half_written_puts", "in_flight_puts_landed", "in_flight_deletes_landed", "entries_checked",
         "in_flight_notes_landed", "notepads_checked")


def _journal_has_batches(path: Path) -> bool:
    """Whether a put has committed some of its batches but is not finished (read with lmdb)."""
    import lmdb

    try:
        env = lmdb.open(str(path), readonly=True, max_dbs=32, subdir=True)
    except lmdb.Error:
        return False
    try:
        db = env.open_db(b"pending", create=False)
        with env.begin() as txn, txn.cursor(db) as cur:
            return any(key[8:9] == b"B" for key, _ in cur)
    except lmdb.Error:
        return False
    finally:
        env.close()


def _read_log(path: Path) -> list[dict]:
    """The complete lines of the ack file (a line cut by the kill is ignored)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    return [json.loads(line) for line in lines[:-1] if line]


class Model:
    """What the acknowledgements say the store holds."""

    def __init__(self) -> None:
        self.live: dict[str, dict] = {}  # id -> put record
        self.notes: dict[str, dict] = {}  # session -> last acknowledged notepad write
        self.consumed = 0  # ack lines already applied
        self.next_counter = 0

    def drop_named(self, session: str, name: str | None, keep: str | None = None) -> None:
        if name is None:
            return
        for eid, rec in list(self.live.items()):
            if eid != keep and rec["session"] == session and rec["name"] == name:
                del self.live[eid]

    def apply(self, records: list[dict]) -> dict | None:
        """Apply the new acknowledgements; return the intent left in flight, if any."""
        in_flight = None
        for rec in records[self.consumed :]:
            op = rec["op"]
            if op.endswith("-intent"):
                in_flight = rec
                if op == "put-intent":
                    self.next_counter = max(self.next_counter, rec["c"] + 1)
                continue
            in_flight = None
            if op == "put":
                self.drop_named(rec["session"], rec["name"], keep=rec["id"])
                self.live[rec["id"]] = rec
            elif op in ("del", "del-missing"):
                self.live.pop(rec["id"], None)
            elif op == "note":
                self.notes[rec["session"]] = rec
        self.consumed = len(records)
        return in_flight


def _pending_and_counters(store: blobpad.Store) -> tuple[list[bytes], dict, dict]:
    """The ``pending`` journal, the saved counters (the base record plus every writer's shard
    record), and the counters recounted from the keyspaces."""
    with store.engine.read() as txn:
        pending = [k for k, _ in txn.scan("pending")]
        saved = saved_counters(txn)
        entries = logical = 0
        for _, raw in txn.scan("entries"):
            entries += 1
            logical += Entry.decode(raw).size_bytes
        chunks = stored = unique = 0
        for _, rec in txn.scan("refs"):
            chunks += 1
            _, slen, rlen = struct.unpack("<QII", rec)
            stored += slen
            unique += rlen
    recount = {"entries": entries, "logical_bytes": logical, "chunks": chunks, "stored_bytes": stored, "unique_bytes": unique}
    return pending, {k: saved.get(k, 0) for k in recount}, recount


def _pending_puts_before_open(path: Path) -> int:
    """How many half-written puts the dead process left (read with the lmdb module)."""
    import lmdb

    if not (path / "data.mdb").exists():
        return 0
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=32, subdir=True)
    try:
        db = env.open_db(b"pending", create=False)
        with env.begin() as txn, txn.cursor(db) as cur:
            return sum(1 for key, _ in cur if key[8:9] == b"H")
    except lmdb.NotFoundError:
        return 0
    finally:
        env.close()


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def _check_store(path: Path, model: Model, in_flight: dict | None, stats: dict) -> None:
    """Reopen the store after a kill and check everything the docstring lists."""
    stats["half_written_puts"] += _pending_puts_before_open(path)
    with blobpad.open(path, chunk_params=CRASH_PARAMS) as store:
        pending, saved, recount = _pending_and_counters(store)
        assert pending == [], f"reopening left {len(pending)} pending journal records: half-written puts are still there"
        assert saved == recount, f"counters {saved} disagree with the keyspaces {recount}"
        report = store.verify()
        assert report.problems == [], report.problems[:10]
        assert report.ok and report.damaged_entries == []

        now = time.time()
        live = {e.id: e for e in store.entries()}
        unknown = [eid for eid in live if eid not in model.live]
        if unknown:
            assert in_flight is not None and in_flight["op"] == "put-intent" and len(unknown) == 1, (
                f"entries nobody acknowledged: {unknown} (in flight: {in_flight})"
            )
            e = live[unknown[0]]
            data = content(in_flight["c"])
            assert e.sha256 == sha(data) and e.session == in_flight["session"] and e.name == in_flight["name"]
            assert _as_bytes(store.get(e.id)) == data, f"the put in flight ({e.id}) holds wrong bytes"
            model.drop_named(e.session, e.name, keep=e.id)
            model.live[e.id] = {"op": "put", "c": in_flight["c"], "id": e.id, "sha": e.sha256, "session": e.session,
                                "name": e.name, "expires_at": e.expires_at}
            stats["in_flight_puts_landed"] += 1

        for eid, rec in list(model.live.items()):
            expiring = rec["expires_at"] is not None and rec["expires_at"] <= now + EXPIRY_SLACK
            if eid not in live:
                if expiring:
                    del model.live[eid]
                    continue
                if in_flight is not None and in_flight["op"] == "del-intent" and in_flight["id"] == eid:
                    del model.live[eid]
                    stats["in_flight_deletes_landed"] += 1
                    continue
                pytest.fail(f"acknowledged put {eid} (counter {rec['c']}) is gone after the kill")
            data = content(rec["c"])
            assert live[eid].sha256 == rec["sha"] == sha(data)
            try:
                got = _as_bytes(store.get(eid))
            except blobpad.NotFound:
                assert expiring, f"acknowledged put {eid} is listed but cannot be read"
                continue
            assert got == data, f"entry {eid} (counter {rec['c']}) reads back wrong bytes after the kill"
            if rec["name"] is not None and not expiring:
                assert store.find(rec["name"], session=rec["session"]).id == eid
        stats["entries_checked"] += len(live)
        if notepad_available():
            _check_notepads(store, model, in_flight, stats)


def _check_notepads(store: blobpad.Store, model: Model, in_flight: dict | None, stats: dict) -> None:
    """Each session's notepad holds its last acknowledged write, or the write in flight."""
    for session in ("alpha", "beta"):
        pad = store.notepad(session)
        text = pad.read()
        version = pad.version("notepad")
        acked = model.notes.get(session)
        allowed = {(acked["sha"], acked["version"]) if acked else (sha(b""), 0)}
        landed = None
        if in_flight is not None and in_flight["op"] == "note-intent" and in_flight["session"] == session:
            landed = (in_flight["sha"], (acked["version"] if acked else 0) + 1)
            allowed.add(landed)
        got = (sha(text.encode()), version)
        assert got in allowed, f"notepad of {session!r} after the kill: {got}, expected one of {allowed}"
        if got == landed:
            model.notes[session] = {"op": "note", "session": session, "sha": landed[0], "version": landed[1]}
            stats["in_flight_notes_landed"] += 1
        stats["notepads_checked"] += 1


@pytest.mark.slow
def test_sigkill_in_the_middle_of_writes_never_loses_or_half_writes(tmp_path):
    path = tmp_path / "store"
    ack = tmp_path / "ack.jsonl"
    model = Model()
    rng = random.Random(int(os.environ.get("BLOBPAD_CRASH_SEED", "8")))
    stats = dict.fromkeys(STATS, 0)
    killed_in: dict[str, int] = {}
    started = time.monotonic()
    for iteration in range(ITERATIONS):
        ready = tmp_path / f"ready-{iteration}"
        # One kill in three is timed from the first committed batch of a multi-batch put
        # (the child starts with one), the others from the moment the child is ready.
        mid_put = iteration % 3 == 1
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(path), str(ack), str(rng.randrange(1 << 30)), str(model.next_counter),
             str(ready), "1" if mid_put else "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 120
            while not ready.exists():
                assert child.poll() is None, f"the child died before starting: {child.stderr.read().decode()[-3000:]}"
                assert time.monotonic() < deadline, "the child never opened the store"
                time.sleep(0.01)
            while mid_put and not _journal_has_batches(path) and child.poll() is None:
                assert time.monotonic() < deadline, "the child never wrote a batch of its multi-batch put"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.05, 0.4))
            assert child.poll() is None, f"the child failed: {child.stderr.read().decode()[-3000:]}"
            child.send_signal(signal.SIGKILL)
            child.wait(60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stderr.close()
        assert child.returncode == -signal.SIGKILL
        in_flight = model.apply(_read_log(ack))
        what = "idle" if in_flight is None else in_flight["op"].removesuffix("-intent")
        if what == "put" and in_flight["big"]:
            what = "multi-batch put"
        killed_in[what] = killed_in.get(what, 0) + 1
        _check_store(path, model, in_flight, stats)

    records = _read_log(ack)
    ops = {}
    for rec in records:
        if not rec["op"].endswith("-intent"):
            ops[rec["op"]] = ops.get(rec["op"], 0) + 1
    big_puts = sum(1 for r in records if r["op"] == "put" and is_big(r["c"]))
    summary = (
        f"crash: {ITERATIONS} SIGKILLs in {time.monotonic() - started:.1f} s; killed during {killed_in}; "
        f"acknowledged ops {ops} (multi-batch puts {big_puts}); {stats}"
    )
    if not notepad_available():
        summary += "; notepad writes NOT exercised: blobpad.Store.notepad does not exist yet"
    print("\n" + summary)
    assert sum(ops.values()) > 0
    assert stats["entries_checked"] > 0


def test_the_crash_model_sees_a_lost_put(tmp_path):
    """The checker itself: an acknowledged put that is missing is reported."""
    path = tmp_path / "store"
    with blobpad.open(path, chunk_params=CRASH_PARAMS) as s:
        e = s.put(content(1), session="alpha", meta={"c": 1})
        s.delete(e.id)
    model = Model()
    model.apply([{"op": "put", "c": 1, "id": e.id, "sha": sha(content(1)), "session": "alpha", "name": None,
                  "expires_at": None}])
    stats = dict.fromkeys(STATS, 0)
    with pytest.raises(pytest.fail.Exception, match="is gone after the kill"):
        _check_store(path, model, None, stats)


def test_big_content_really_spans_several_write_batches():
    """The multi-batch puts of the crash loop are bigger than one write transaction."""
    from blobpad import put as put_module

    assert BIG > put_module.BATCH_BYTES


# -- the store cannot grow: max_bytes cap, map-size ceiling, full disk ------------------------------
#
# A put that does not fit raises StoreFull saying what to do, leaves every other entry
# readable, and the store takes puts again once entries are deleted and gc() ran.

FULL_PARAMS = blobpad.ChunkParams(min_size=4096, avg_extra=4096, max_size=16384)
MiB = 1 << 20


def _blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)  # incompressible: stored size ~ raw size


def _all_read_back(store: blobpad.Store, kept: dict[str, bytes]) -> None:
    for eid, data in kept.items():
        assert store.get(eid) == data, f"entry {eid} reads back wrong after StoreFull"
    report = store.verify()
    assert report.ok and report.problems == [], report.problems[:5]


def test_max_bytes_cap_raises_store_full_and_the_store_recovers(tmp_path):
    with blobpad.open(tmp_path / "capped", max_bytes=3 * MiB, chunk_params=FULL_PARAMS) as s:
        kept = {}
        for i in range(4):
            data = _blob(i, MiB // 2)
            kept[s.put(data, ttl=None).id] = data
        before = s.stats()
        with pytest.raises(blobpad.StoreFull) as err:
            s.put(_blob(99, 4 * MiB))
        msg = str(err.value)
        assert "max_bytes" in msg and ("raise" in msg or "delete" in msg or "gc" in msg) and len(msg) < 600, msg
        # the failed put evicted nothing and left nothing behind
        assert s.stats().entries == before.entries and s.stats().stored_bytes == before.stored_bytes
        _all_read_back(s, kept)
        # writable again: a put that fits (evicting the entries closest to expiry if needed)
        data = _blob(7, MiB)
        e = s.put(data)
        assert s.get(e.id) == data and s.stats().stored_bytes <= 3 * MiB
        for eid in list(kept):
            if s.exists(eid):
                s.delete(eid)
        s.gc()
        data = _blob(8, 2 * MiB)
        assert s.get(s.put(data).id) == data
        assert s.verify().ok


def test_a_multi_batch_put_over_the_cap_evicts_nothing(tmp_path):
    """A put that ends in StoreFull must not have evicted other entries on the way
    (its first batches fit, and make room by evicting, before a later one cannot)."""
    with blobpad.open(tmp_path / "capped", max_bytes=24 * MiB, chunk_params=FULL_PARAMS) as s:
        kept = {}
        for i in range(10):
            data = _blob(100 + i, MiB)
            kept[s.put(data, ttl=3600 + i).id] = data
        with pytest.raises(blobpad.StoreFull):
            s.put(_blob(1, 40 * MiB), ttl=None)  # three 16 MiB write batches; the cap holds 24 MiB
        _all_read_back(s, kept)
        assert s.stats().entries == len(kept)


def test_map_size_ceiling_raises_store_full_and_the_store_recovers(tmp_path):
    with blobpad.open(tmp_path / "ceiling", map_size=MiB, max_map_size=8 * MiB, chunk_params=FULL_PARAMS) as s:
        kept = {}
        for i in range(40):
            data = _blob(i, MiB // 2)
            try:
                kept[s.put(data).id] = data
            except blobpad.StoreFull as exc:
                msg = str(exc)
                break
        else:
            pytest.fail("20 MiB went into a map capped at 8 MiB")
        assert "max_map_size" in msg and ("delete" in msg or "gc" in msg) and len(msg) < 600, msg
        assert 4 <= len(kept) < 16
        _all_read_back(s, kept)
        for eid in list(kept)[: len(kept) // 2 + 1]:
            s.delete(eid)
            del kept[eid]
        s.gc()
        data = _blob(1000, MiB // 2)
        kept[s.put(data).id] = data
        _all_read_back(s, kept)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 4 MiB tmpfs (needs root and mount); skipped where it cannot be mounted."""
    mnt = tmp_path / "tiny-disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_raises_store_full_and_the_store_recovers(tiny_disk):
    with blobpad.open(tiny_disk / "store", map_size=MiB, chunk_params=FULL_PARAMS) as s:
        kept = {}
        err = None
        for i in range(30):
            data = _blob(i, 400_000)
            try:
                kept[s.put(data).id] = data
            except Exception as exc:  # the assertion below says what it should have been
                err = exc
                break
        assert err is not None, "12 MB went into a 4 MiB disk"
        assert isinstance(err, blobpad.StoreFull), f"a full disk raised {type(err).__name__}: {err}"
        msg = str(err)
        assert "full" in msg and ("gc" in msg or "free" in msg or "delete" in msg) and len(msg) < 600, msg
        _all_read_back(s, kept)
        for eid in list(kept)[:4]:
            s.delete(eid)
            del kept[eid]
        s.gc()
        data = _blob(1000, 400_000)
        kept[s.put(data).id] = data
        _all_read_back(s, kept)


_READER_KILLED_INSIDE = """
import sys, time, blobpad
s = blobpad.open(sys.argv[1])
with s.snapshot():
    s.entries()
    print("in", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("freer", ["gc", "sweep"])
def test_a_reader_killed_inside_its_snapshot_holds_no_pages_past_the_next_gc_or_sweep(tmp_path, freer, monkeypatch):
    """A process killed inside a read snapshot leaves its reader slot behind: every page freed since
    stays unusable, so a long-running writer's file grew by each put it deleted (1 MiB put and deleted
    40 times: 40 MiB more) until a new open cleared the slot.  gc(), and the sweep that follows a put,
    clear it too: the file stays at a few MiB."""
    from blobpad import store as store_module

    if freer == "sweep":
        monkeypatch.setattr(store_module, "SWEEP_SECONDS", 0.0)  # every put sweeps
    path = tmp_path / "store"
    s = blobpad.open(path)
    try:
        s.put("x\n", session="a")
        child = subprocess.Popen([sys.executable, "-c", _READER_KILLED_INSIDE, str(path)], stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout.readline().strip() == "in"
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
        rng = random.Random(7)
        for i in range(40):
            e = s.put(rng.randbytes(1 << 20), session="a")
            s.delete(e.id)
            if freer == "gc" and i % 10 == 0:
                s.gc()
        assert s.stats().disk_bytes < 16 << 20, s.stats().disk_bytes
    finally:
        s.close()
