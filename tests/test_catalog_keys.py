"""The catalog's shared records: no record that every put updates, on every engine.

Two puts made at once by two writers (threads here; processes and hosts alike) must not
touch a record the other one writes, unless they share content: on an optimistic engine
(Redis) such a record makes every two concurrent puts conflict and one of them run
again.  The checks record every key a put's write transaction reads, scans and writes,
through the store's public engine, and compare two puts' sets.

Stores written before the creation sequence came from the clock keep 8-byte sequences
in their ``by_seq`` and ``by_scope`` keys and one counters record: they are rebuilt here
through the engine, and must list, page, count, verify and delete as before.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from oracles import saved_counters

import blobpad
from blobpad.catalog import WHOLE_DEDUP, digest_key
from blobpad.index import decode_entry, inline_chunk_list, scope_key, scope_value

LOG = "".join(f"2026-11-24T08:{i // 60:02d}:{i % 60:02d} worker-{i % 7} request {i} took {i % 97} ms\n" for i in range(120))


class _Recorder:
    """A transaction that notes every key it reads, every range it scans and every key it writes."""

    def __init__(self, txn: Any, log: dict[str, set]) -> None:
        self._txn = txn
        self._log = log

    def get(self, space: str, key: bytes) -> Any:
        self._log["read"].add((space, bytes(key)))
        return self._txn.get(space, key)

    def get_unchecked(self, space: str, key: bytes) -> Any:
        self._log["read"].add((space, bytes(key)))
        return self._txn.get_unchecked(space, key)

    def get_many(self, space: str, keys: Any) -> Any:
        keys = list(keys)
        self._log["read"].update((space, bytes(k)) for k in keys)
        return self._txn.get_many(space, keys)

    def scan(self, space: str, start: bytes | None = None, stop: bytes | None = None, **kw: Any) -> Any:
        self._log["scan"].add((space, start or b"", stop))
        return self._txn.scan(space, start, stop, **kw)

    def put(self, space: str, key: bytes, value: bytes) -> None:
        self._log["write"].add((space, bytes(key)))
        self._txn.put(space, key, value)

    def delete(self, space: str, key: bytes) -> Any:
        self._log["write"].add((space, bytes(key)))
        return self._txn.delete(space, key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


def _record_put(store: blobpad.Store, monkeypatch: pytest.MonkeyPatch, text: str) -> dict[str, set]:
    """The keys the write transactions of one put, made in a new thread, read, scanned and wrote."""
    log: dict[str, set] = {"read": set(), "scan": set(), "write": set()}
    engine = store.engine
    real = type(engine).write

    def write(self: Any, fn: Any, **kw: Any) -> Any:
        if self is not engine:
            return real(self, fn, **kw)
        return real(self, lambda txn: fn(_Recorder(txn, log)), **kw)

    monkeypatch.setattr(type(engine), "write", write)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            store.put(text, session="bench", turn=1)
        except BaseException as exc:  # pragma: no cover - reported below
            failure.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    monkeypatch.undo()
    assert not t.is_alive() and not failure, failure
    assert log["write"], "the put wrote nothing through the engine"
    return log


def _in_scans(key: tuple[str, bytes], scans: set) -> bool:
    space, k = key
    return any(s == space and start <= k and (stop is None or k < stop) for s, start, stop in scans)


def test_two_puts_at_once_touch_no_common_record(store, monkeypatch):
    """The records one put writes are neither read, scanned nor written by another put of
    other content in the same session and turn (so an optimistic engine never makes them
    conflict), except a counters shard when both writers' threads map to the same one."""
    store.put("warm the store up " * 400, session="bench", turn=1)  # settings and first records exist
    first = _record_put(store, monkeypatch, LOG + "first\n")
    second = _record_put(store, monkeypatch, LOG + "second\n")
    for a, b in ((first, second), (second, first)):
        touched = b["read"] | b["write"]
        common = {key for key in a["write"] if key in touched or _in_scans(key, b["scan"])}
        assert all(space == "meta" and key.startswith(b"counters:") for space, key in common), common
    shards = {key for space, key in first["write"] | second["write"] if space == "meta"}
    assert shards and all(key.startswith(b"counters:") for key in shards), shards


def test_a_put_writes_no_index_of_every_entry_and_the_listing_of_all_still_keeps_creation_order(store, monkeypatch):
    """No put writes ``by_seq`` (one index of every entry: a record of the whole store in every
    commit), nor a key in an index of its turn: its one session index key names the turn.  The
    listing of every entry merges the sessions' own indexes, in creation order; a turn's is
    the session's, by the turn its keys name.  Oracle: the puts, interleaved over sessions
    and turns (int and str turns apart), with a delete."""
    store.put("warm the store up " * 400, session="bench", turn=1)
    log = _record_put(store, monkeypatch, LOG + "recorded\n")
    assert "by_seq" not in {space for space, _ in log["write"] | log["read"]}
    # one key in the session's index, naming the turn: no key of an index of each turn
    assert [key[:1] for space, key in log["write"] if space == "by_scope"] == [b"S"]
    turns = [1, "1", None, 0, "x" * 240, -(2**62)]  # the int 1 and the str "1" are other turns
    made = [store.put(f"{LOG}{i}\n", session=f"s{i % 3}", turn=turns[i % 6]) for i in range(12)]
    store.delete(made[4].id)
    everyone = [e.id for e in store.entries()]
    kept = [e for e in made if e is not made[4]]
    assert everyone[-11:] == [e.id for e in kept]
    for session in ("s0", "s1", "s2"):
        for turn in [t for t in turns if t is not None]:  # turn=None lists the whole session
            want = [e.id for e in kept if e.session == session and e.turn == turn and type(e.turn) is type(turn)]
            assert [e.id for e in store.entries(session=session, turn=turn)] == want, (session, turn)
    assert [e.id for e in store.entries(limit=3)] == everyone[:3]
    with store.engine.read() as txn:
        assert list(txn.scan("by_seq")) == []


def test_the_listing_of_all_merges_small_and_large_sessions_in_creation_order(store):
    """Sessions small enough to be read whole while the sessions are walked, and one too large
    (read by a scan of its own), interleaved: every entry in put order, a limit a prefix of it,
    every session named.  Oracle: the order of the puts."""
    made = []
    for i in range(80):
        session = "big" if i % 2 else f"small-{i % 40:02d}"  # 40 in one session, 40 in 20 others
        made.append(store.put(f"{LOG}{i}\n", session=session, turn=i % 3))
    assert [e.id for e in store.entries()] == [e.id for e in made]
    assert [e.id for e in store.entries(limit=7)] == [e.id for e in made[:7]]
    assert store.sessions() == sorted({e.session for e in made})
    assert [e.id for e in store.entries(session="big", turn=1)] == [e.id for e in made if e.session == "big" and e.turn == 1]


def test_counters_stay_exact_with_many_writers(store):
    """Puts and deletes from many threads add up: stats() equals the records, and verify() agrees."""
    ids: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        for i in range(6):
            e = store.put(f"{LOG}writer {n} put {i}\n", session=f"s{n % 2}", turn=i)
            with lock:
                ids.append(e.id)
            if i % 3 == 2:
                store.delete(e.id)
                with lock:
                    ids.remove(e.id)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    st = store.stats()
    assert st.entries == len(ids) == 24
    assert st.logical_bytes == sum(store.stat(i).size_bytes for i in ids)
    report = store.verify()
    assert report.ok, report.problems
    store.gc()  # folds the writers' records into one: the same counts
    after = store.stats()
    assert (after.entries, after.logical_bytes, after.chunks, after.stored_bytes) == (
        st.entries, st.logical_bytes, st.chunks, st.stored_bytes)
    with store.engine.read() as txn:
        assert [k for k, _ in txn.scan("meta", b"counters", b"counters;")] == [b"counters"]


def test_creation_order_survives_a_clock_that_stands_still(store_factory):
    """Entries list in creation order even when the store's clock does not move."""
    s = store_factory(clock=lambda: 1_800_000_000.0)
    ids = [s.put(f"entry {i}", session="x", turn=i % 2).id for i in range(20)]
    assert [e.id for e in s.entries()] == ids
    assert [e.id for e in s.entries(session="x")] == ids
    assert [e.id for e in s.entries(session="x", turn=1)] == ids[1::2]
    seqs = [e.seq for e in s.entries()]
    assert seqs == sorted(set(seqs))


def _make_legacy(store: blobpad.Store) -> None:
    """Rewrite the store as a blobpad before this change wrote it: sequences 1, 2, ... in the
    entry records and as the 8-byte ``by_seq`` and ``by_scope`` keys, one counters record
    with the sequence in it, every entry in the ``digests`` index, and ``expiry`` keys
    without the sequence."""
    def fn(txn: Any) -> None:
        for key, _ in list(txn.scan("expiry")):
            txn.delete("expiry", key)
            txn.put("expiry", key[:8] + key[-8:], b"")
        rows = sorted((decode_entry(v).seq, k) for k, v in txn.scan("entries"))  # creation order
        totals = saved_counters(txn)
        for key, _ in list(txn.scan("meta", b"counters", b"counters;")):
            txn.delete("meta", key)
        for space in ("by_seq", "by_scope"):
            for key, _ in list(txn.scan(space)):
                txn.delete(space, key)
        for n, (_, raw_id) in enumerate(rows, 1):
            raw = txn.get("entries", raw_id)
            e = dataclasses.replace(decode_entry(raw), seq=n)
            txn.put("entries", raw_id, e.encode())
            txn.put("manifests", raw_id, inline_chunk_list(raw))  # a chunk list was a record of its own
            seq = n.to_bytes(8, "big")
            txn.put("by_seq", seq, raw_id)
            txn.put("by_scope", scope_key(e.session) + seq, raw_id)
            if e.turn is not None:
                txn.put("by_scope", scope_key(e.session, e.turn) + seq, raw_id)
            txn.put("digests", digest_key(e.size_bytes, e.sha256, raw_id), b"")  # every entry, however small
        txn.put("meta", b"counters", json.dumps(totals | {"seq": len(rows)}).encode())

    store.engine.write(fn)


def test_a_store_written_before_clock_sequences_reads_and_deletes_as_before(store):
    old = [store.put(f"{LOG}old {i} ERROR here\n", session="s", turn=i % 2, name=None if i % 3 else f"n{i}")
           for i in range(7)]
    _make_legacy(store)
    assert [e.seq for e in store.entries()] == list(range(1, 8))
    assert store.verify().ok, store.verify().problems
    new = [store.put(f"{LOG}new {i} ERROR here\n", session="s", turn=i % 2) for i in range(5)]
    everyone = [e.id for e in old + new]
    assert [e.id for e in store.entries()] == everyone  # old ones first, in their order
    assert [e.id for e in store.entries(session="s", turn=1)] == [e.id for e in old + new if e.turn == 1]
    st = store.stats()
    assert st.entries == 12 and st.logical_bytes == sum(e.size_bytes for e in old + new)
    report = store.verify()
    assert report.ok, report.problems

    # grep over the session, a page at a time: every entry once, in the same order as one call
    whole = store.grep_session("s", "ERROR", max_matches=1000)
    assert whole.cursor is None
    paged, cursor = [], None
    for _ in range(100):
        page = store.grep_session("s", "ERROR", max_matches=2, cursor=cursor)
        paged += [(m.entry_id, m.line) for m in page.matches]
        cursor = page.cursor
        if cursor is None:
            break
    assert paged == [(m.entry_id, m.line) for m in whole.matches]
    assert len({eid for eid, _ in paged}) == 12

    for e in (old[1], old[3], new[0], new[4]):  # deletes leave no index key behind, old or new
        store.delete(e.id)
    left = [i for i in everyone if i not in {old[1].id, old[3].id, new[0].id, new[4].id}]
    assert [e.id for e in store.entries()] == left
    with store.engine.read() as txn:
        # the index of every entry older stores kept: what is left of it goes with its entries, and no put adds to it
        assert sorted(v.hex() for _, v in txn.scan("by_seq")) == sorted(i for i in left if i in {e.id for e in old})
        scoped = [v[:8].hex() for k, v in txn.scan("by_scope") if k.startswith(scope_key("s"))]  # then the turn
        assert sorted(scoped) == sorted(left)
        assert sorted(k[40:].hex() for k, _ in txn.scan("digests")) == sorted(i for i in left if i in {e.id for e in old})
    report = store.verify()
    assert report.ok, report.problems
    assert store.stats().entries == 8


def test_puts_free_what_expired_without_gc(store_factory, monkeypatch):
    """Expired entries are removed, chunks and all, by the puts that follow, a bounded
    batch per sweep; live entries are untouched."""
    import blobpad.store as store_module
    from blobpad.maintenance import SWEEP_LIMIT

    monkeypatch.setattr(store_module, "SWEEP_SECONDS", 0.0)  # every put sweeps
    now = [1_800_000_000.0]
    s = store_factory(clock=lambda: now[0])
    short = [s.put(f"{LOG}short {i}\n", ttl=10, session="a") for i in range(SWEEP_LIMIT + 6)]
    keep = [s.put(f"{LOG}kept {i}\n", ttl=None, session="a") for i in range(3)]
    before = s.stats()
    assert before.entries == len(short) + 3
    now[0] += 11
    keep.append(s.put(f"{LOG}after\n", ttl=None, session="a"))  # one sweep: SWEEP_LIMIT entries
    st = s.stats()
    assert st.expired_entries == 6 and st.entries == 4
    keep.append(s.put(f"{LOG}after 2\n", ttl=None, session="a"))
    st = s.stats()
    assert st.expired_entries == 0 and st.entries == len(keep)
    assert st.chunks < before.chunks and st.stored_bytes < before.stored_bytes
    assert [e.id for e in s.entries()] == [e.id for e in keep]
    for e in keep:
        assert s.get(e.id).startswith(LOG)
    for e in short[:3]:
        assert not s.exists(e.id)
    report = s.verify()
    assert report.ok, report.problems
    assert s.gc().entries == 0  # nothing was left for gc()


def test_a_store_sweeps_at_most_once_per_interval(store_factory, monkeypatch):
    import blobpad.store as store_module

    monkeypatch.setattr(store_module, "SWEEP_SECONDS", 3600.0)
    now = [1_800_000_000.0]
    s = store_factory(clock=lambda: now[0])
    s.put("first", ttl=None)  # the store has been open for less than the interval: no sweep
    for i in range(5):
        s.put(f"short {i}", ttl=10)
    now[0] += 11
    s.put("later", ttl=None)
    assert s.stats().expired_entries == 5
    assert s.gc().entries == 5


@pytest.mark.parametrize("value", [b"", b"\x01" * 47, b"{\"entries\": 1}" * 3, b"\x01" * 57])  # 48 and 56 bytes are shapes
def test_a_damaged_counters_shard_is_recounted(store, value):
    """A shard record of the wrong shape: stats() recounts from the records, verify() names
    it, and gc() folds sound counters back; no entry is touched."""
    ids = [store.put(f"{LOG}entry {i}\n", ttl=None).id for i in range(3)]
    want = store.stats()
    store.engine.write(lambda txn: txn.put("meta", b"counters:\x0f", value))
    got = store.stats()
    assert (got.entries, got.chunks, got.logical_bytes, got.stored_bytes) == (
        want.entries, want.chunks, want.logical_bytes, want.stored_bytes)
    report = store.verify()
    assert not report.ok and any("counters" in p for p in report.problems), report.problems
    store.gc()
    report = store.verify()
    assert report.ok, report.problems
    with store.engine.read() as txn:
        assert [k for k, _ in txn.scan("meta", b"counters", b"counters;")] == [b"counters"]
    assert [store.get(i) for i in ids] == [f"{LOG}entry {i}\n" for i in range(3)]
    assert store.stats().entries == 3


def test_only_content_looked_for_whole_is_in_the_digests_index(store):
    """A small put writes no ``digests`` key (one tree less to write); content over
    WHOLE_DEDUP is indexed, and a second put of it shares the first one's chunks."""
    small = store.put(LOG, ttl=None)
    big_text = (LOG * (WHOLE_DEDUP // len(LOG) + 2))
    big = store.put(big_text, ttl=None)
    chunks = store.stats().chunks
    twin = store.put(big_text, ttl=None, session="other")
    assert store.stats().chunks == chunks  # shared whole
    with store.engine.read() as txn:
        indexed = sorted(k[40:].hex() for k, _ in txn.scan("digests"))
    assert indexed == sorted([big.id, twin.id]) and small.id not in indexed
    store.delete(big.id)
    assert store.get(twin.id) == big_text
    report = store.verify()
    assert report.ok, report.problems


def test_creation_order_holds_across_handles_and_a_clock_set_back_between_runs(store_factory, engine_name):
    """Every handle of a store in a process takes its creation sequences from one sequencer,
    and its first in a session is above the highest that session holds: a second handle
    under a clock that stands still, and a clock set back between two runs (an NTP step, a
    restored VM), still list each session's entries in the order they were put (a new handle
    began at its own clock: the second handle's entry came first, the later run's before
    every older one).  Oracle: put order, per session and, within one run, over all."""
    t = [2_000_000_000.0]
    keeper = store_factory(name="order") if engine_name == "memory" else None  # memory lives while a handle does
    first = store_factory(name="order", clock=lambda: t[0])
    put = [first.put(f"{LOG}first {i}\n", session=f"s{i % 2}", ttl=None) for i in range(3)]
    second = store_factory(name="order", clock=lambda: t[0])  # the clock stands still
    put.append(second.put(f"{LOG}second\n", session="s1", ttl=None))
    assert [e.id for e in first.entries()] == [e.id for e in put]
    first.close()
    second.close()
    t[0] -= 10  # the next run's clock is behind the last one's
    third = store_factory(name="order", clock=lambda: t[0])
    put += [third.put(f"{LOG}third {s}\n", session=s, ttl=None) for s in ("s0", "s1", "s0")]
    for session in ("s0", "s1"):
        assert [e.id for e in third.entries(session=session)] == [e.id for e in put if e.session == session]
    assert sorted(e.id for e in third.entries()) == sorted(e.id for e in put)
    assert keeper is None or keeper.exists(put[0].id)


def test_a_damaged_session_index_record_stops_no_put_nor_the_listing_of_all(store_factory, engine_name):
    """A session index record damaged (its newest, which a new process reads to go on after it)
    is passed over: puts into that session and others go on, from a new handle too, every
    other entry is listed, and verify() names the record.  Oracle: the entries put."""
    keeper = store_factory(name="dmg") if engine_name == "memory" else None
    s = store_factory(name="dmg")
    made = [s.put(f"{LOG}{i}\n", session=f"s{i % 2}", turn=i) for i in range(6)]
    prefix = scope_key("s0")
    with s.engine.read() as txn:
        key, value = list(txn.scan("by_scope", prefix, prefix + b"\xff"))[-1]
    s.engine.engine.write(lambda raw: raw.put("by_scope", key, value[:-1] + bytes([value[-1] ^ 1])))  # a flipped bit
    damaged_id = value[:8].hex()
    s.close()
    again = store_factory(name="dmg")  # a new handle reads the session's newest key at its first put there
    more = [again.put(f"{LOG}again {i}\n", session=f"s{i % 2}") for i in range(2)]
    listed = [e.id for e in again.entries()]
    assert listed == [e.id for e in made + more if e.id != damaged_id]
    assert [e.id for e in again.entries(session="s0")][-1] == more[0].id
    report = again.verify()
    assert not report.ok and any("session index" in p or "by_scope" in p for p in report.problems), report.problems
    assert keeper is None or keeper.exists(made[1].id)


def test_verify_names_a_session_index_record_that_names_another_turn(store):
    """A session index record whose id is right but whose turn is another (sealed right: no
    checksum catches it) leaves its entry out of its turn's listing: verify() says so."""
    e = store.put(f"{LOG}x\n", session="s", turn=3)
    prefix = scope_key("s")
    with store.engine.read() as txn:
        key, value = next(iter(txn.scan("by_scope", prefix, prefix + b"\xff")))
    store.engine.write(lambda txn: txn.put("by_scope", key, scope_value(value[:8], 4)))
    assert store.entries(session="s", turn=3) == [] and [x.id for x in store.entries(session="s", turn=4)] == []
    report = store.verify()
    assert any(e.id in p and "naming another turn" in p for p in report.problems), report.problems


def test_a_store_with_another_clock_never_shifts_the_order_of_anothers_entries(store_factory):
    """Creation order follows each store's own clock: puts into a store whose clock runs
    years ahead (a test's, a server's) leave the sequences of another store in this process
    at its clock, so its entries still sort before what another process puts after them."""
    ahead = store_factory("ahead", clock=lambda: 4_000_000_000.0)
    for i in range(3):
        ahead.put(f"from the future {i}")
    s = store_factory("now")
    first = s.put("put here first", session="x")
    assert abs(first.seq - s.now() * 1_000_000) < 60_000_000
    if not s.engine.capabilities.processes:
        return
    child = ("import sys, blobpad; s = blobpad.open(sys.argv[1]); "
             "print(s.put('put by another process', session='x').id); s.close()")
    out = subprocess.run([sys.executable, "-c", child, s.path], check=True, capture_output=True, text=True, timeout=120)
    assert [e.id for e in s.entries(session="x")] == [first.id, out.stdout.strip()]


def test_sweeps_keep_up_with_more_expiring_than_one_batch(store_factory, monkeypatch):
    """Where more entries are due than one sweep removes, each following put sweeps again,
    whatever the interval, until a sweep finds less than a batch: a store whose puts
    expire faster than SWEEP_LIMIT a second never piles them up.  Once caught up, sweeps
    go back to one per interval."""
    import blobpad.store as store_module
    from blobpad.maintenance import SWEEP_LIMIT

    monkeypatch.setattr(store_module, "SWEEP_SECONDS", 0.0)  # the first put after the clock moves sweeps
    now = [1_800_000_000.0]
    s = store_factory(clock=lambda: now[0])
    backlog = 3 * SWEEP_LIMIT + 5
    short = [s.put(f"{LOG}short {i}\n", ttl=10, session="a") for i in range(backlog)]
    monkeypatch.setattr(store_module, "SWEEP_SECONDS", 3600.0)  # from now on, one sweep an hour at most
    now[0] += 11
    keep = [s.put(f"{LOG}kept 0\n", ttl=None, session="a")]  # a whole batch removed: the next put sweeps again
    assert s.stats().expired_entries == backlog - SWEEP_LIMIT
    keep += [s.put(f"{LOG}kept {i}\n", ttl=None, session="a") for i in range(1, 4)]
    st = s.stats()
    assert (st.expired_entries, st.entries) == (0, len(keep))
    assert not any(s.exists(e.id) for e in short)
    # caught up: the last sweep removed less than a batch, so the next is an hour away
    later = [s.put(f"{LOG}later {i}\n", ttl=10, session="b") for i in range(5)]
    now[0] += 11
    s.put(f"{LOG}after\n", ttl=None, session="b")
    assert s.stats().expired_entries == len(later)
    assert [e.id for e in s.entries(session="a")] == [e.id for e in keep]
    report = s.verify()
    assert report.ok, report.problems
    assert s.gc().entries == len(later)


def test_an_entry_committed_after_a_listing_is_never_listed_ahead_of_what_it_showed(store_factory):
    """Listing order follows commit order: an entry that a listing did not show, because it
    committed after it, is listed after everything that listing showed, so a reader paging
    forward never misses it.  A writer (X, a named put) is held inside its commit by the
    store's clock while another thread's unnamed put (Y) waits to commit; X lists the moment
    its put returns, and Y must come after all of that listing (a creation sequence taken
    before the commit, as b71d2b9 took one, listed Y ahead of X's entry)."""
    held, go = threading.Event(), threading.Event()
    calls: dict[str, int] = {}
    real = time.time

    def clock() -> float:
        name = threading.current_thread().name
        calls[name] = calls.get(name, 0) + 1
        if name == "X" and calls[name] == 2 and not go.is_set():  # X's second reading: inside its commit
            held.set()
            go.wait(10)
        return real()

    store = store_factory(clock=clock)
    store.put("first\n", session="s")
    out: dict[str, Any] = {}

    def x() -> None:
        out["named"] = store.put("named\n", session="s", name="n")
        out["seen"] = [e.id for e in store.entries(session="s")]  # at once, before Y's commit if it can

    def y() -> None:
        out["unnamed"] = store.put("unnamed\n", session="s")

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)  # X keeps the interpreter after its commit: it lists before Y commits
    try:
        writer = threading.Thread(target=x, name="X")
        writer.start()
        assert held.wait(10), "the clock never held X inside its commit: the test no longer tests anything"
        other = threading.Thread(target=y, name="Y")
        other.start()
        other.join(0.5)  # Y has read its clock and waits behind X's commit
        go.set()
        writer.join(20)
        other.join(20)
    finally:
        sys.setswitchinterval(old_interval)
        go.set()
    final = [e.id for e in store.entries(session="s")]
    seen = out["seen"]
    assert out["named"].id in seen and sorted(final) == sorted({*seen, out["unnamed"].id})
    assert final[:len(seen)] == seen, (seen, final)  # whatever came later is listed after all of it


@pytest.mark.parametrize("step", [0.0, -10.0], ids=["clock-stands", "clock-back"])
def test_entries_put_after_a_reopen_follow_every_older_one_whatever_the_clock(target, step):
    """A process's first sequence starts above the highest the store holds (kept in the counters shards
    puts write anyway), not only above its session's: with a clock standing still or set back between two
    runs, a new entry of another session was listed before older ones, and could be evicted before them."""
    url = target("order")
    t = 1_800_000_000.0
    keeper = blobpad.open(url)  # a memory store lives while a handle is open: the others come and go as with a file
    if keeper.engine.capabilities.persistent:
        keeper.close()  # the others: every handle below opens the store afresh
    try:
        _reopened_in_order(url, t, step)
    finally:
        keeper.close()


def _reopened_in_order(url: str, t: float, step: float) -> None:
    with blobpad.open(url, clock=lambda: t) as s:
        older = [s.put(f"old {i}\n" * 50, session=f"x{i}", ttl=None).id for i in range(3)]
    with blobpad.open(url, clock=lambda: t + step) as s:
        newer = s.put("new\n" * 50, session="y", ttl=None).id
        assert [e.id for e in s.entries()] == [*older, newer]
        cap = s.stats().stored_bytes
    with blobpad.open(url, clock=lambda: t + step, max_bytes=cap) as s:
        another = s.put("another\n" * 50, session="z", ttl=None).id  # no room: the oldest go first
        left = [e.id for e in s.entries()]
        assert newer in left and left == [*older, newer, another][-len(left):]
        s.gc()  # folding the counters keeps the highest sequence
    with blobpad.open(url, clock=lambda: t + 2 * step) as s:
        last = s.put("last\n" * 50, session="w", ttl=None).id
        assert [e.id for e in s.entries()][-1] == last
