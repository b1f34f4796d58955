"""Where an entry's chunk list lives, on every engine.

An entry of at most ``INLINE_CHUNKS`` chunks keeps its chunk list in its own record
(after ``INLINE_MARK``): a small put writes one record fewer and a read of it reads one
record.  A larger entry keeps it in a ``manifests`` record, as every entry of a store
written before did.  Both read exactly (Python slicing is the oracle), both survive
``touch()``, both are freed by a delete, and damage to either is named by reads and
verify() and stays deletable.  Stores of format 2 (every chunk list a record of its own)
read and write on, marked format 3 from then on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from oracles import saved_counters

import blobpad
from blobpad.catalog import FORMAT_GUARD, INLINE_CHUNKS, WHOLE_DEDUP, recount
from blobpad.chunking import Manifest
from blobpad.index import INLINE_MARK, inline_chunk_list
from blobpad.view import chunk_list_blob

TINY = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)


def _text(lines: int, tag: str) -> str:
    return "".join(f"{tag} line {n} took {n % 97} ms {'x' * (n % 23)}\n" for n in range(lines))


def _records(store: blobpad.Store, entry_id: str) -> tuple[bytes | None, bytes | None]:
    """(the entry record, its ``manifests`` record), as stored."""
    raw_id = bytes.fromhex(entry_id)
    with store.engine.read() as txn:
        return txn.get("entries", raw_id), txn.get("manifests", raw_id)


def _reads_exactly(store: blobpad.Store, entry_id: str, text: str) -> None:
    assert store.get(entry_id) == text
    assert store.lines(entry_id, 2, 4) == text.splitlines()[1:4]
    assert store.tail(entry_id, 30) == text[-30:]
    assert store.range(entry_id, 7, 41) == text[7:41]
    assert store.byte_range(entry_id, 3, 200) == text.encode()[3:200]


def _counters_are_the_records(store: blobpad.Store) -> None:
    with store.engine.read() as txn:
        saved, truth = saved_counters(txn), recount(txn)
    assert {k: saved.get(k, 0) for k in truth} == truth


def test_a_small_entry_holds_its_chunk_list_and_a_large_one_keeps_it_apart(store_factory):
    store = store_factory(chunk_params=TINY)
    small_text, large_text = _text(3, "small"), _text(400, "large")
    small, large = store.put(small_text, session="s"), store.put(large_text, session="s")
    assert small.chunks <= INLINE_CHUNKS < large.chunks
    record, separate = _records(store, small.id)
    assert separate is None and inline_chunk_list(record) is not None
    assert Manifest.unpack(inline_chunk_list(record)).bytes_at[-1] == small.size_bytes
    record, separate = _records(store, large.id)
    assert inline_chunk_list(record) is None and Manifest.unpack(separate).bytes_at[-1] == large.size_bytes
    for e, text in ((small, small_text), (large, large_text)):
        _reads_exactly(store, e.id, text)
        assert store.touch(e.id, ttl=None).expires_at is None  # the record is written again
        _reads_exactly(store, e.id, text)
        assert store.stat(e.id) == store.touch(e.id, ttl=None)
    assert _records(store, small.id)[1] is None and inline_chunk_list(_records(store, small.id)[0]) is not None
    report = store.verify()
    assert report.ok and report.entries == 2, report.problems
    _counters_are_the_records(store)
    for e in (small, large):
        store.delete(e.id)
        assert _records(store, e.id) == (None, None)
    assert store.stats().chunks == 0 and store.verify().ok
    _counters_are_the_records(store)


@pytest.mark.parametrize("where", ["inline", "apart"])
def test_a_damaged_chunk_list_is_named_and_stays_deletable(store_factory, where):
    """A chunk list sealed afresh but cut short (damage its checksum cannot see): every read
    of the entry raises CorruptData naming it, verify() names it, the other entry reads
    on, and deleting it leaves a sound store after gc()."""
    store = store_factory(chunk_params=TINY)
    text = _text(3 if where == "inline" else 400, "doomed")
    bad, good = store.put(text, session="s"), store.put(_text(5, "kept"), session="s")
    raw_id = bytes.fromhex(bad.id)

    def cut(txn: Any) -> None:
        record = txn.get("entries", raw_id)
        blob = chunk_list_blob(txn, raw_id, record)
        if where == "inline":
            txn.put("entries", raw_id, record.partition(INLINE_MARK)[0] + INLINE_MARK + blob[: len(blob) // 2])
        else:
            txn.put("manifests", raw_id, blob[: len(blob) // 2 + 3])

    store.engine.write(cut)
    store.codec.cache.clear()
    for read in (lambda: store.get(bad.id), lambda: store.tail(bad.id, 2), lambda: store.grep(bad.id, "line")):
        with pytest.raises(blobpad.CorruptData) as caught:
            read()
        assert bad.id in str(caught.value)
    assert store.get(good.id) == _text(5, "kept")
    report = store.verify()
    assert not report.ok and report.damaged_entries == [bad.id]
    store.delete(bad.id)
    store.gc()
    report = store.verify()
    assert report.ok, report.problems
    _counters_are_the_records(store)


def test_a_chunk_list_kept_both_ways_reads_the_entrys_and_gc_removes_the_other(store):
    """Damage (or an interrupted tool) may leave a ``manifests`` record beside the chunk list
    an entry's record holds: reads use the entry's own, verify() names the other, and gc()
    removes it."""
    text = _text(4, "twice")
    e = store.put(text, session="s")
    raw_id = bytes.fromhex(e.id)
    wrong = Manifest.build([b"\x01" * 17], [5], [5], [0]).pack()
    store.engine.write(lambda txn: txn.put("manifests", raw_id, wrong))
    store.codec.cache.clear()
    assert store.get(e.id) == text
    report = store.verify()
    assert not report.ok and any(f"chunk list {e.id}" in p for p in report.problems), report.problems
    store.gc()
    assert _records(store, e.id)[1] is None
    assert store.verify().ok and store.get(e.id) == text
    _counters_are_the_records(store)


def _as_format_2(txn: Any) -> None:
    """Rewrite the store as format 2 wrote it: every chunk list a record of its own."""
    for raw_id, record in list(txn.scan("entries")):
        blob = inline_chunk_list(record)
        if blob is not None:
            txn.put("entries", raw_id, record.partition(INLINE_MARK)[0])
            txn.put("manifests", raw_id, blob)
    settings = json.loads(txn.get("meta", b"settings"))
    txn.put("meta", b"settings", json.dumps(settings | {"format": 2}).encode())


def _format(store: blobpad.Store) -> int:
    with store.engine.read() as txn:
        return json.loads(txn.get("meta", b"settings"))["format"]


def _guarded(store: blobpad.Store) -> bool:
    """Whether the store holds the guard record: a ``manifests`` record that does not decode as a
    chunk list, which keeps the gc() of a format 2 blobpad (it recounts chunk references from
    ``manifests`` records alone, and stops at one that does not decode) from freeing the chunks of
    entries whose records hold their chunk lists."""
    with store.engine.read() as txn:
        blob = txn.get("manifests", FORMAT_GUARD)
    if blob is None:
        return False
    with pytest.raises(ValueError):
        Manifest.unpack(blob)
    return True


def test_a_format_2_store_reads_and_writes_on_and_is_marked_format_3_by_its_first_small_put(store_factory):
    first = store_factory(chunk_params=TINY)
    texts = [_text(3 + i, f"old{i}") for i in range(4)]
    old = [first.put(t, session="s", name=f"n{i}" if i % 2 else None) for i, t in enumerate(texts)]
    first.engine.write(_as_format_2)
    assert _format(first) == 2 and all(_records(first, e.id)[1] is not None for e in old)
    store = store_factory()  # the same store, opened again (a memory store lives while the first is open)
    for e, text in zip(old, texts, strict=True):
        _reads_exactly(store, e.id, text)
    assert store.verify().ok and store.stats().entries == 4
    large = store.put(_text(400, "large"), session="s")  # its chunk list is a record of its own: as format 2 wrote
    assert large.chunks > INLINE_CHUNKS
    assert _format(store) == 2 and not _guarded(store)  # a format 2 blobpad can still open and use it all
    new = store.put(_text(3, "new"), session="s", name="n1")  # replaces an old named entry; its record holds its list
    assert _format(store) == 3 and _guarded(store)
    assert store.verify().ok, store.verify().problems
    assert _records(store, new.id)[1] is None and store.find("n1", session="s").id == new.id
    assert [e.id for e in store.entries(session="s")] == [old[0].id, old[2].id, old[3].id, large.id, new.id]
    store.delete(old[0].id)
    assert _records(store, old[0].id) == (None, None)
    report = store.verify()
    assert report.ok, report.problems
    _counters_are_the_records(store)


def test_a_store_of_a_later_format_is_refused_at_open(store_factory):
    store = store_factory()
    e = store.put("x" * 100)
    store.engine.write(lambda txn: txn.put("meta", b"settings", json.dumps(
        json.loads(txn.get("meta", b"settings")) | {"format": 4}).encode()))
    with pytest.raises(blobpad.BlobpadError, match=r"incompatible blobpad \(format 4"):
        store_factory()  # the same store, opened again
    assert _format(store) == 4 and store.get(e.id) == "x" * 100  # nothing was changed


def test_a_new_store_is_format_3_without_a_guard(store):
    """No blobpad of format 2 can have had a new store open: it needs no guard record."""
    store.put("small\n", session="s")
    assert _format(store) == 3 and not _guarded(store) and store.verify().ok


@pytest.mark.parametrize("where", ["inline", "apart"])
@pytest.mark.parametrize("wrong", ["a chunk fewer", "no chunk"])
def test_a_chunk_list_that_decodes_but_does_not_fit_its_entry_is_corrupt_data(store_factory, where, wrong):
    """A sound-looking chunk list (it decodes, its seal holds) that names fewer chunks than its
    entry holds: every read raises CorruptData naming the entry, never shorter content or
    another error."""
    store = store_factory(chunk_params=TINY)
    text = _text(3 if where == "inline" else 400, "listed")
    e = store.put(text, session="s")
    raw_id = bytes.fromhex(e.id)

    def shrink(txn: Any) -> None:
        record = txn.get("entries", raw_id)
        m = Manifest.unpack(chunk_list_blob(txn, raw_id, record))
        n = len(m) - 1 if wrong == "a chunk fewer" else 0
        at = list(m.bytes_at)
        blob = Manifest.build(m.keys[:n], [at[i + 1] - at[i] for i in range(n)], [at[i + 1] - at[i] for i in range(n)],
                              [0] * n).pack()
        if where == "inline":
            txn.put("entries", raw_id, record.partition(INLINE_MARK)[0] + INLINE_MARK + blob)
        else:
            txn.put("manifests", raw_id, blob)

    store.engine.write(shrink)
    store.codec.cache.clear()
    for read in (lambda: store.get(e.id), lambda: store.tail(e.id, 5), lambda: store.stream(e.id).read(),
                 lambda: store.lines(e.id, 1, 2), lambda: store.count(e.id, "line")):
        with pytest.raises(blobpad.CorruptData) as caught:
            read()
        assert e.id in str(caught.value)
    assert store.verify().damaged_entries == [e.id]
    store.delete(e.id)
    store.gc()
    assert store.verify().ok


def test_a_damaged_twin_is_passed_over_by_a_put_of_the_same_content(store_factory):
    """Content over 256 KiB is looked for whole: a stored twin whose record is damaged is not
    shared, and the put stores the content as new (it used to raise CorruptData)."""
    store = store_factory()
    text = "".join(f"request {n} from host-{n % 13} took {n * 7 % 1000} ms\n" for n in range(9000))
    assert len(text) > WHOLE_DEDUP
    twin = store.put(text, session="a", ttl=None)
    raw_id = bytes.fromhex(twin.id)

    def flip(raw: Any) -> None:
        value = bytearray(raw.get("entries", raw_id))
        value[len(value) // 3] ^= 0x40
        raw.put("entries", raw_id, bytes(value))

    store.engine.engine.write(flip)
    e = store.put(text, session="b", ttl=None)
    assert store.get(e.id) == text
    with pytest.raises(blobpad.CorruptData):
        store.get(twin.id)
    assert store.verify().damaged_entries == [twin.id]


@pytest.mark.parametrize("damage", ["lost", "flipped"])
def test_a_twin_missing_or_damaging_a_chunk_is_not_shared(store_factory, damage):
    """Content over 256 KiB is looked for whole: a twin one of whose chunks is gone (a node lost in
    a failover) or damaged reads as CorruptData, and a put of the same content must not share its
    chunks (it used to, so the new entry was unreadable too, and so was every later twin): it
    stores them afresh and reads back exactly."""
    store = store_factory(cache_bytes=0)
    text = "".join(f"build {n} step {n % 17} wrote {n * 31 % 4096} bytes\n" for n in range(9000))
    assert len(text) > WHOLE_DEDUP
    twin = store.put(text, session="a", ttl=None)
    raw_id = bytes.fromhex(twin.id)
    with store.engine.read() as txn:
        keys = Manifest.unpack(chunk_list_blob(txn, raw_id)).keys
    victim = keys[len(keys) // 2]

    def hurt(raw: Any) -> None:
        if damage == "lost":
            raw.delete("chunks", victim)
        else:
            value = bytearray(raw.get("chunks", victim))
            value[len(value) // 2] ^= 0x01
            raw.put("chunks", victim, bytes(value))

    store.engine.engine.write(hurt)
    with pytest.raises(blobpad.CorruptData, match=twin.id):
        store.get(twin.id)
    e = store.put(text, session="b", ttl=None)
    assert store.get(e.id) == text
    again = store.put(text, session="c", ttl=None)  # shares the sound copy now
    assert store.get(again.id) == text
    assert store.verify().damaged_entries == [twin.id]
    store.delete(twin.id)
    store.gc()
    assert store.verify().ok and store.get(e.id) == text


def test_touching_an_entry_whose_record_is_damaged_says_so(store):
    e = store.put("touched\n", session="s")
    raw_id = bytes.fromhex(e.id)
    store.engine.write(lambda txn: txn.put("entries", raw_id, b'{"not": "an entry"}'))  # sealed: only its shape is wrong
    with pytest.raises(blobpad.CorruptData, match=e.id):
        store.touch(e.id, ttl=60)
    store.delete(e.id)
    store.gc()  # the damaged record's chunk list was unknown: gc() recounts the references
    assert store.verify().ok


def test_a_damaged_stale_chunk_list_beside_an_entrys_own_harms_no_read_and_gc_removes_it(store):
    text = _text(4, "beside")
    e = store.put(text, session="s")
    raw_id = bytes.fromhex(e.id)
    store.engine.engine.write(lambda raw: raw.put("manifests", raw_id, b"\x07" * 40))  # no seal fits it
    assert store.get(e.id) == text
    report = store.verify()
    assert not report.ok and report.damaged_entries == [], report
    store.gc()
    assert _records(store, e.id)[1] is None and store.verify().ok and store.get(e.id) == text


def test_a_twin_whose_chunk_list_does_not_fit_it_is_not_shared(store_factory):
    """Content over 256 KiB is looked for whole: a twin whose chunk list decodes but names a
    chunk fewer (sealed afresh: damage its checksum cannot see) reads as CorruptData, and a
    put of the same content must not share that list: it stores the content afresh."""
    store = store_factory()
    text = "".join(f"job {n} on node-{n % 11} exited {n % 3} after {n * 13 % 900} s\n" for n in range(9000))
    twin = store.put(text, session="a", ttl=None)
    raw_id = bytes.fromhex(twin.id)

    def shrink(txn: Any) -> None:
        record = txn.get("entries", raw_id)
        m = Manifest.unpack(chunk_list_blob(txn, raw_id, record))
        n, at = len(m) - 1, list(m.bytes_at)
        sizes = [at[i + 1] - at[i] for i in range(n)]
        blob = Manifest.build(m.keys[:n], sizes, sizes, [0] * n).pack()
        if inline_chunk_list(record) is not None:
            txn.put("entries", raw_id, record.partition(INLINE_MARK)[0] + INLINE_MARK + blob)
        else:
            txn.put("manifests", raw_id, blob)

    store.engine.write(shrink)
    e = store.put(text, session="b", ttl=None)
    assert store.get(e.id) == text
    assert store.verify().damaged_entries == [twin.id]


def test_a_damaged_format_guard_is_written_again_by_gc(store_factory):
    first = store_factory()
    old = first.put(_text(3, "old"), session="s")
    first.engine.write(_as_format_2)
    store = store_factory()
    store.put(_text(3, "new"), session="s")
    assert _guarded(store)
    store.engine.engine.write(lambda raw: raw.put("manifests", FORMAT_GUARD, b"\x01" * 12))  # no seal fits it
    report = store.verify()
    assert not report.ok and report.damaged_entries == [] and any("guard" in p for p in report.problems), report
    gc = store.gc()
    assert not gc.problems and _guarded(store)
    assert store.verify().ok and store.get(old.id) == _text(3, "old")
    _counters_are_the_records(store)
