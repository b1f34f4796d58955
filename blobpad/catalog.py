"""The catalog: entry records, chunk lists and the indexes that find them, chunk references, counters.

Keyspaces (see :mod:`blobpad.engine.base`): ``entries``, ``manifests`` and ``filters`` (the
chunks' trigram filters, :mod:`blobpad.prefilter`) by id (the record of an entry of at most
:data:`INLINE_CHUNKS` chunks holds its chunk list, and it has no ``manifests`` record; the one
``manifests`` record that is no chunk list is the format guard, :func:`mark_format`); the
indexes ``by_seq``, ``by_scope``, ``expiry``, ``names`` and ``digests`` (key layouts in
:mod:`blobpad.index`); ``refs``, one reference count per chunk with its sizes; and the
counters in ``meta``: a base record plus one shard per group of writers (:func:`bump`), so
that no record is updated by every put.  Every function here works inside a transaction the
caller opened; none opens one.  Damage never stops a delete: what cannot be read is
found by scanning, or left flagged (``REPAIR``) for the next gc() to recount.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import struct
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import prefilter
from .chunking import Manifest
from .engine import ReadTxn, WriteTxn
from .engine.base import SEAL_SIZE, prefix_end, skip_damaged, store_of
from .errors import HINT_MAX_BYTES, HINT_NAME_TAKEN, HINT_VERIFY, Conflict, CorruptData, StoreFull
from .forks import reset_in_child
from .index import (
    INLINE_MARK,
    NEVER,
    Entry,
    Sequencer,
    decode_entry,
    expiry_id,
    expiry_key,
    inline_chunk_list,
    name_key,
    scope_key,
    scope_prefix,
    scope_value,
    seq_key,
)
from .view import Reader, ahead

__all__ = [
    "REF", "WHOLE_DEDUP", "COUNTERS", "REPAIR", "Catalog", "unpack_ref", "entry_totals",
    "get_or_damaged", "digest_key", "expiry_us", "INLINE_CHUNKS", "FORMAT", "READS_FORMATS", "FORMAT_GUARD",
    "mark_format",
    "purge_index", "expiry_keys", "recount", "due", "counters", "stored_counters", "bump", "fold", "release", "filter_bytes",
    "BASE_KEY", "SHARD_PREFIX", "SHARDS", "SHARD", "SHARD_WITH_SEQ", "SHARD_FIELDS", "highest_sequence", "shard_key",
    "counter_keys", "seq_index_keys",
    "prefetch_deletes", "prefetch_due", "walk_sessions", "creation_order", "session_last_sequence",
]


REF = struct.Struct("<QII")  # reference count, stored (compressed) length, raw length

#: Content larger than this is looked for whole before it is cut (an identical entry's
#: chunks are shared without cutting anything), through the ``digests`` index: only such
#: entries are indexed there (smaller content is deduplicated chunk by chunk), which spares
#: a small put one more tree to write.  Stores written before index every entry.
WHOLE_DEDUP = 256 << 10


COUNTERS = ("entries", "chunks", "logical_bytes", "stored_bytes")


#: ``meta`` key set when a deleted entry's chunk list was damaged: gc() recounts references
REPAIR = b"repair_refs"


def unpack_ref(rec: bytes) -> tuple[int, int, int] | None:
    """(reference count, stored length, raw length) of a ``refs`` record, or None when damaged."""
    return REF.unpack(rec) if len(rec) == REF.size else None


def get_or_damaged(txn: ReadTxn, space: str, key: bytes) -> tuple[bool, bytes | None]:
    """(whether a record is stored under ``key``, its value or None when damaged): for
    the paths that must go on past damage (delete, gc, repair)."""
    try:
        value = txn.get(space, key)
    except CorruptData:
        return True, None
    return value is not None, value


def digest_key(size: int, sha256: str, raw_id: bytes) -> bytes:
    return size.to_bytes(8, "big") + bytes.fromhex(sha256) + raw_id


def expiry_us(expires_at: float | None) -> int:
    if expires_at is None:
        return NEVER
    return max(0, min(NEVER - 1, int(expires_at * 1_000_000)))


def purge_index(txn: WriteTxn, raw_id: bytes) -> None:
    """Remove every index key of ``raw_id`` by scanning (its record is damaged: its keys are unknown)."""
    doomed: list[tuple[str, bytes]] = []
    for space in ("by_seq", "by_scope", "names"):  # a damaged index record names nothing: it goes too
        doomed.extend((space, key) for key, value in txn.scan(space, on_damage=lambda k, sp=space: doomed.append((sp, k)))
                      if value[:8] == raw_id)  # a session index value goes on with the turn
    doomed.extend(("expiry", key) for key, _ in txn.scan("expiry", on_damage=lambda k: doomed.append(("expiry", k)))
                  if expiry_id(key) == raw_id)
    doomed.extend(("digests", key) for key, _ in txn.scan("digests", on_damage=lambda k: doomed.append(("digests", k)))
                  if key[40:] == raw_id)
    for space, key in doomed:
        txn.delete(space, key)


def seq_index_keys(txn: ReadTxn, e: Entry, raw_id: bytes) -> list[tuple[str, bytes]]:
    """The creation-order index keys of entry ``e`` (``by_seq`` and its turn's ``by_scope``,
    which stores written before kept, and its session's ``by_scope``): the sequence and the
    id, or, for an entry a store wrote before the sequence came from the clock, the sequence
    alone where that key still names it."""
    legacy = _legacy_seq_keys(e)
    txn.prefetch_pairs(legacy)  # one request on a networked engine
    return [(space, key if (get_or_damaged(txn, space, key)[1] or b"")[:8] == raw_id else key + raw_id)
            for space, key in legacy]


#: keys a walk of the session index reads in one session before it seeks past that session
_SKIP_AFTER = 15  # under a networked engine's first page (redis._FIRST_PAGE, 16 keys): a large session costs that page


def walk_sessions(txn: ReadTxn) -> Iterator[tuple[bytes, list[tuple[bytes, bytes]] | None]]:
    """``(prefix, rows)`` for each session of the session index, in key order: ``rows`` its
    ``(key, value)`` records when the walk read all of them (a small session), None when it
    sought past the session after :data:`_SKIP_AFTER` of them.  A damaged record is left out
    of ``rows`` and starts no session (its key may be damaged too); verify() names it.  A
    session's prefix is read from its key's length field, never decoded."""
    start: bytes | None = scope_key("")[:1]
    while start is not None:
        here: bytes | None = None
        rows: list[tuple[bytes, bytes]] = []
        damaged: list[bytes] = []
        for key, value in _keys_with_damaged(txn, start, damaged):
            if here is not None and key.startswith(here):
                if len(rows) >= _SKIP_AFTER:  # a large session: seek past it
                    break
                if value:
                    rows.append((key, value))
                continue
            if not value:
                continue  # damaged, its key too perhaps: it starts no session (a short one would take the next)
            if here is not None:
                yield here, rows
            here = scope_prefix(key)
            rows = [(key, value)]
        else:
            if here is not None:
                yield here, rows
            return
        assert here is not None  # the walk broke off inside a session
        yield here, None
        start = prefix_end(here)


def _keys_with_damaged(txn: ReadTxn, start: bytes, damaged: list[bytes]) -> Iterator[tuple[bytes, bytes]]:
    """The sessions' index records from ``start``, in key order, a damaged one as ``(key, b"")``."""
    for key, value in txn.scan("by_scope", start, b"T", on_damage=damaged.append):
        while damaged and damaged[0] < key:
            yield damaged.pop(0), b""
        yield key, value
    yield from ((key, b"") for key in damaged)


def creation_order(txn: ReadTxn) -> Iterator[bytes]:
    """The id of every entry indexed, oldest first (by creation sequence, then id), merged from
    the sessions' own indexes: no put writes an index of every entry (a global record every
    writer updates, and the one index a commit of one session would share with the others).
    Stores written before kept one (``by_seq``); it is no longer read.  A damaged index record
    is left out (verify() names it).  The small sessions come whole from the walk over the
    sessions (a page of records per request on a networked engine); each large one is read
    by a scan of its own."""

    def session_rows(prefix: bytes, rows: list[tuple[bytes, bytes]] | None) -> Iterator[tuple[bytes, bytes]]:
        found: Iterable[tuple[bytes, bytes]] = (
            rows if rows is not None else txn.scan("by_scope", prefix, prefix_end(prefix), on_damage=skip_damaged))
        return ((key[len(prefix):], value[:8]) for key, value in found)

    for _, raw_id in heapq.merge(*[session_rows(prefix, rows) for prefix, rows in walk_sessions(txn)]):
        yield raw_id


def session_last_sequence(txn: ReadTxn, session: str) -> int:
    """The highest creation sequence ``session``'s index holds (0 when it has none): one reverse
    seek; a damaged record is passed over (verify() names it)."""
    prefix = scope_key(session)
    last = next(txn.scan("by_scope", prefix, prefix_end(prefix), reverse=True, on_damage=skip_damaged), None)
    return 0 if last is None else int.from_bytes(last[0][len(prefix):len(prefix) + 8], "big")


#: the sequencer of each store open in this process (by what stands for it, engine.base.store_of)
_SEQUENCERS: weakref.WeakKeyDictionary[object, Sequencer] = weakref.WeakKeyDictionary()
_SEQUENCERS_LOCK = threading.Lock()


def _sequencer_of(engine: Any) -> Sequencer:
    """The creation sequencer every handle of the store ``engine`` opens shares in this process."""
    with _SEQUENCERS_LOCK:
        key = store_of(engine)
        sequencer = _SEQUENCERS.get(key)
        if sequencer is None:
            sequencer = _SEQUENCERS[key] = Sequencer()
        return sequencer


def _legacy_seq_keys(e: Entry) -> list[tuple[str, bytes]]:
    """The creation-order index keys entry ``e`` has if a store wrote it before the sequence came from the clock."""
    keys = [("by_seq", b"")] + [("by_scope", scope_key(e.session, turn))
                                for turn in ((None,) if e.turn is None else (None, e.turn))]
    return [(space, prefix + seq_key(e.seq)) for space, prefix in keys]


def expiry_keys(e: Entry, raw_id: bytes) -> list[tuple[str, bytes]]:
    """Entry ``e``'s key in the ``expiry`` index, in either layout (:func:`expiry_key`: a
    store written before the sequence was part of it has the other)."""
    us = expiry_us(e.expires_at)
    return [("expiry", expiry_key(us, raw_id, e.seq)), ("expiry", expiry_key(us, raw_id))]


def _dated_keys(e: Entry, raw_id: bytes) -> list[tuple[str, bytes]]:
    """Entry ``e``'s keys in the ``expiry`` and ``digests`` indexes (the latter only where it was indexed)."""
    return [*expiry_keys(e, raw_id), ("digests", digest_key(e.size_bytes, e.sha256, raw_id))]


#: the store format this version writes: 2, every record sealed with a checksum
#: (:func:`blobpad.engine.base.seal`); 3, the record of a small entry may hold its chunk
#: list (:data:`INLINE_CHUNKS`), which a version that reads only format 2 takes for damage
FORMAT = 3
#: the formats this version reads (and writes on: a store of format 2 becomes format 3 at
#: the first put that writes what only format 3 reads, :func:`mark_format`)
READS_FORMATS = (2, 3)
#: the ``manifests`` key of the guard record :func:`mark_format` writes: a chunk list that
#: does not decode, so that a blobpad of format 2 that had the store open before it was
#: marked (and so goes on using it) never recounts chunk references (its gc() repair sees
#: only ``manifests`` records, and would free the chunks of the entries whose records hold
#: their chunk lists): it reports that it cannot repair instead.  This version passes over it.
FORMAT_GUARD = b"format-3-guard"
_SETTINGS = b"settings"


class _Marked:
    """The settings record this process last found not to say format 2 (it was marked, or is of
    format 3 from its creation), compared byte for byte: such settings need no marking."""

    raw = b""


_MARKED = _Marked()


def mark_format(txn: WriteTxn) -> None:
    """Mark the store format 3 in ``txn``, the transaction of a put about to write an entry
    record holding its chunk list, unless it is already: its settings say so from then on
    (a blobpad of format 2 refuses the store at open, rather than taking such records for
    damage) and the :data:`FORMAT_GUARD` record is written.  A store is marked by the put
    that needs it, not when a newer version opens it: a read-only use (``blobpad stats``)
    leaves an older version able to open it."""
    raw = txn.get("meta", _SETTINGS)
    if raw is None or raw == _MARKED.raw:
        return
    try:
        settings = json.loads(raw)
    except ValueError:
        return  # damaged settings: the store's open refused them, or they changed since (verify() names them)
    if isinstance(settings, dict) and settings.get("format") == 2:
        settings["format"] = FORMAT
        raw = json.dumps(settings).encode()
        txn.put("meta", _SETTINGS, raw)
        txn.put("manifests", FORMAT_GUARD, b"")
    _MARKED.raw = raw


#: an entry of at most this many chunks keeps its chunk list in its own record (after
#: :data:`~blobpad.index.INLINE_MARK`), not in a ``manifests`` record: a small put writes one
#: record fewer, and a read of it reads one record; listings stay light (at most 688 bytes more)
INLINE_CHUNKS = 16


def _chunk_list(txn: ReadTxn, raw_id: bytes, record: bytes | None = None) -> Manifest | None:
    """An entry's chunk list, or None when it is missing or damaged (delete and gc go on past that);
    ``record``: its entry record, when the caller read it (a damaged record holds no chunk
    list that can be trusted: then only a ``manifests`` record is looked for)."""
    if record is None:
        record = get_or_damaged(txn, "entries", raw_id)[1]
    inline = None if record is None else inline_chunk_list(record)
    blob = inline if inline is not None else get_or_damaged(txn, "manifests", raw_id)[1]
    try:
        return None if blob is None else Manifest.unpack(blob)
    except ValueError:
        return None


def prefetch_deletes(txn: ReadTxn, raw_ids: list[bytes]) -> None:
    """Ask a networked engine, in two requests, for what deleting the entries ``raw_ids``
    reads and deletes (:meth:`Catalog.delete_in`: records, chunk lists and filters, then
    index keys, chunk references and chunks, a delete reading whether its key was there),
    instead of several round trips per entry; a no-op on local engines."""
    if not txn.networked or not raw_ids:
        return
    txn.prefetch_pairs([(space, raw_id) for raw_id in raw_ids for space in ("entries", "manifests", "filters")])
    pairs: list[tuple[str, bytes]] = []
    for raw_id in raw_ids:
        raw = get_or_damaged(txn, "entries", raw_id)[1]
        e = None if raw is None else decode_entry(raw)
        if e is not None:
            legacy = _legacy_seq_keys(e)
            pairs += legacy + [(space, key + raw_id) for space, key in legacy] + _dated_keys(e, raw_id)
            if e.name is not None:
                pairs.append(("names", name_key(e.session, e.name)))
        m = _chunk_list(txn, raw_id, raw)
        for key in dict.fromkeys([] if m is None else m.keys):
            pairs += [("refs", key), ("chunks", key)]
    txn.prefetch_pairs(list(dict.fromkeys(pairs)), bodies=False)  # a chunk's bytes are not read to delete it


def entry_totals(txn: ReadTxn) -> tuple[int, int]:
    """(entries, logical bytes) counted from the entry records.

    A damaged entry record counts as an entry, of the size its chunk list holds, as
    deleting it takes off (:meth:`Catalog.delete_in`): otherwise counters recounted
    while it is stored would fall below the truth once it is deleted."""
    entries = logical = 0
    unreadable: list[bytes] = []
    for raw_id, raw in txn.scan("entries", on_damage=unreadable.append):
        e = decode_entry(raw)
        if e is None:
            unreadable.append(raw_id)
        else:
            entries += 1
            logical += e.size_bytes
    for raw_id in unreadable:
        m = _chunk_list(txn, raw_id)
        entries += 1
        logical += 0 if m is None else m.bytes_at[-1]
    return entries, logical


def recount(txn: ReadTxn) -> dict[str, int]:
    """Counters computed from the records themselves (when the counters record is damaged)."""
    entries, logical = entry_totals(txn)
    chunks = stored = unique = 0
    for _, rec in txn.scan("refs", on_damage=skip_damaged):
        ref = unpack_ref(rec)
        if ref is not None:
            chunks += 1
            stored += ref[1]
            unique += ref[2]
    return {"entries": entries, "chunks": chunks, "logical_bytes": logical, "stored_bytes": stored,
            "unique_bytes": unique, "filter_bytes": filter_bytes(txn)}


def filter_bytes(txn: ReadTxn) -> int:
    """The bytes of every ``filters`` record (without their checksums), damaged ones included."""
    damaged: list[bytes] = []
    total = sum(len(value) for _, value in txn.scan("filters", on_damage=damaged.append))
    for key in damaged:
        stored = txn.get_unchecked("filters", key)
        total += 0 if stored is None else max(0, len(stored) - SEAL_SIZE)
    return total


def due(
    txn: ReadTxn, now: float, on_damage: Callable[[bytes], None] | None = None
) -> Iterator[tuple[bytes, Entry | None]]:
    """The expiry index from its front up to ``now``, with each record's entry (None when
    missing or damaged), as gc() removes them; an entry that expires later within the
    same microsecond is left out (reads still see it).  A networked engine is asked for
    the entries' records one, then 256 at a time (one request each)."""
    keys: Iterator[bytes] = (key for key, _ in txn.scan("expiry", b"", _due_stop(now), on_damage=on_damage))
    for key in ahead(txn, keys, expiry_id):
        raw = get_or_damaged(txn, "entries", expiry_id(key))[1]
        e = decode_entry(raw) if raw is not None else None
        if e is not None and e.expires_at is not None and e.expires_at > now:
            continue
        yield key, e


def _due_stop(now: float) -> bytes:
    return expiry_key(expiry_us(now) + 1, b"")


def prefetch_due(txn: ReadTxn, now: float, limit: int) -> None:
    """Ask a networked engine ahead for what removing the first ``limit`` entries of
    :func:`due` reads (:func:`prefetch_deletes`); a no-op on local engines."""
    if txn.networked:
        rows = itertools.islice(txn.scan("expiry", b"", _due_stop(now), on_damage=skip_damaged), limit)
        prefetch_deletes(txn, [expiry_id(key) for key, _ in rows])


def counters(txn: ReadTxn) -> dict[str, int]:
    """The store's counters; damaged ones are recounted from the records (and rewritten by the next write)."""
    return stored_counters(txn) or recount(txn)


#: The counters as gc() last folded them (and every record of stores written before the shards).
BASE_KEY = b"counters"
#: Each writer adds its changes to one of :data:`SHARDS` records under this prefix
#: (``SHARD_PREFIX`` + one byte), chosen by its thread, so that writers running at once
#: rarely update the same record: on an optimistic engine, a record every put rewrote
#: would make every two puts at once conflict.  The counters are the base plus every shard.
SHARD_PREFIX = b"counters:"
SHARDS = 16


class _Shard(threading.local):
    """The calling thread's shard key, worked out once per thread (its native id is a system call)."""

    key = b""

    def _after_fork(self) -> None:
        self.key = b""  # the forking thread goes on in the child under another native id


_SHARD = _Shard()
reset_in_child(_SHARD)


def shard_key() -> bytes:
    """The counters shard the calling thread adds its changes to."""
    key = _SHARD.key
    if not key:
        key = _SHARD.key = SHARD_PREFIX + bytes((threading.get_native_id() % SHARDS,))
    return key


def counter_keys(txn: ReadTxn) -> list[bytes]:
    """The keys of every counters record stored (damaged ones included)."""
    keys = [BASE_KEY] if txn.get_unchecked("meta", BASE_KEY) is not None else []
    damaged: list[bytes] = []
    keys += [key for key, _ in txn.scan("meta", SHARD_PREFIX, prefix_end(SHARD_PREFIX), on_damage=damaged.append)]
    return keys + damaged


def stored_counters(txn: ReadTxn) -> dict[str, int] | None:
    """The counters (the base plus every shard), or None when a record of them is damaged."""
    total = _read_base(txn)
    if total is None:
        return None
    damaged: list[bytes] = []
    for _, raw in txn.scan("meta", SHARD_PREFIX, prefix_end(SHARD_PREFIX), on_damage=damaged.append):
        shard = _unpack_shard(raw)
        if shard is None:
            return None
        for k, v in zip(SHARD_FIELDS, shard[0], strict=True):
            total[k] = total.get(k, 0) + v
    return None if damaged else total


#: a shard record: these counters' changes, as signed 64-bit integers in this order, then (since
#: 2026-11-28; a shard written before ends before it) the highest creation sequence a put that
#: updated the shard committed: with the base's, the store's highest, which a process's
#: sequencer starts above (see highest_sequence), read from the records puts write anyway
SHARD = struct.Struct("<6q")
SHARD_WITH_SEQ = struct.Struct("<7q")
SHARD_FIELDS = ("entries", "chunks", "logical_bytes", "stored_bytes", "unique_bytes", "filter_bytes")
_FIELD = {k: i for i, k in enumerate(SHARD_FIELDS)}
#: the base record's key for the highest creation sequence of the shards it folded
_BASE_SEQ = "last_seq"


def _unpack_shard(raw: bytes) -> tuple[list[int], int] | None:
    """(the counters' changes, the highest sequence) of a shard record; None when damaged."""
    if len(raw) == SHARD_WITH_SEQ.size:
        *values, seq = SHARD_WITH_SEQ.unpack(raw)
        return values, seq
    if len(raw) == SHARD.size:
        return list(SHARD.unpack(raw)), 0
    return None


def highest_sequence(txn: ReadTxn) -> int:
    """The highest creation sequence the counters records hold (0 when none does): the floor of
    a process's first sequence, so that a clock set back, or standing still, between two runs
    never puts a new entry of any session before the older ones (in the listing of every
    entry, and among the entries eviction takes in creation order).  Damaged records count
    nothing."""
    high = 0
    try:
        raw = txn.get("meta", BASE_KEY)
        value = json.loads(raw) if raw is not None else {}
        if isinstance(value, dict) and type(value.get(_BASE_SEQ)) is int:
            high = value[_BASE_SEQ]
    except (CorruptData, ValueError):
        pass
    for _, raw in txn.scan("meta", SHARD_PREFIX, prefix_end(SHARD_PREFIX), on_damage=skip_damaged):
        shard = _unpack_shard(raw)
        if shard is not None:
            high = max(high, shard[1])
    return high


def _read_base(txn: ReadTxn) -> dict[str, int] | None:
    """The base counters record (JSON; an absent one counts nothing), or None when it is damaged."""
    try:
        raw = txn.get("meta", BASE_KEY)
    except CorruptData:
        return None
    if raw is None:
        return dict.fromkeys(SHARD_FIELDS, 0)
    last = _LAST_BASE
    if raw == last[0]:  # the record this process last read or wrote: no JSON to parse
        return dict(last[1])
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or any(type(v) is not int for v in value.values()) or any(
            k not in value for k in COUNTERS):
        return None
    value.pop("seq", None)  # stores written before the sequence came from the clock counted it here
    value.pop(_BASE_SEQ, None)  # a sequence, no counter (highest_sequence)
    _remember_base(raw, value)
    return value


#: the base record this process last parsed or wrote, and its value: a checked record equal
#: to it byte for byte parses to the same value, so the JSON is not parsed again
_LAST_BASE: tuple[bytes, dict[str, int]] = (b"", {})


def _remember_base(raw: bytes, value: dict[str, int]) -> None:
    global _LAST_BASE
    _LAST_BASE = (raw, dict(value))


def fold(txn: WriteTxn, totals: dict[str, int], seq: int = 0) -> None:
    """Write ``totals`` as the counters: the base, every shard removed (gc(), and a write that met
    damage); the base keeps the highest sequence of the records it replaces, or ``seq``."""
    high = max(seq, highest_sequence(txn))
    for key in counter_keys(txn):
        txn.delete("meta", key)
    record = {k: v for k, v in totals.items() if k != _BASE_SEQ}
    raw = json.dumps({**record, _BASE_SEQ: high} if high else record).encode()
    txn.put("meta", BASE_KEY, raw)
    _remember_base(raw, record)


def bump(txn: WriteTxn, /, seq: int = 0, **deltas: int) -> None:
    """Add ``deltas`` (counters named in :data:`SHARD_FIELDS`) to the calling thread's shard, and
    raise its highest creation sequence to ``seq`` (a put's).

    When the base or that shard is damaged, the counters are recounted from the records
    (which already hold this transaction's changes) and folded into the base.  Only
    those two records are read: a put never reads the shards other writers update.
    """
    key = shard_key()
    try:
        raw = txn.get("meta", key)
    except CorruptData:
        raw = b""
    shard = None if raw is None else _unpack_shard(raw)
    if (raw is not None and shard is None) or _read_base(txn) is None:
        fold(txn, recount(txn), seq)
        return
    values, high = ([0] * len(SHARD_FIELDS), 0) if shard is None else shard
    for k, v in deltas.items():
        values[_FIELD[k]] += v
    txn.put("meta", key, SHARD_WITH_SEQ.pack(*values, max(high, seq)))


def release(txn: WriteTxn, keys: Iterable[bytes]) -> tuple[int, int]:
    chunks = stored = unique = 0
    for key in keys:
        rec = get_or_damaged(txn, "refs", key)[1]
        ref = None if rec is None else unpack_ref(rec)
        if ref is None:  # missing or damaged: gc() recounts the references
            txn.put("meta", REPAIR, b"1")
            continue
        count, slen, rlen = ref
        if count <= 1:
            txn.delete("refs", key)
            txn.delete("chunks", key)
            chunks += 1
            stored += slen
            unique += rlen
        else:
            txn.put("refs", key, REF.pack(count - 1, slen, rlen))
    if chunks:
        bump(txn, chunks=-chunks, stored_bytes=-stored, unique_bytes=-unique)
    return chunks, stored


#: entries evicted for ``max_bytes`` are taken 4, then 16, then this many at a time, and at most
#: ``_EVICT_MAX`` by one put (then it raises StoreFull)
_EVICT_BATCH = 64
_EVICT_MAX = 10_000


#: the ``expiry`` key's first 8 bytes for an entry without a TTL
_NEVER_KEY = NEVER.to_bytes(8, "big")

#: ``replaces`` of a put whose name must be free (``Store.put(..., exclusive=True)``)
NAME_FREE = b""


class Catalog:
    """Writes to the catalog: an entry made visible, an entry deleted, entries evicted for ``max_bytes``.

    Parameters:
        reader: the store's read path (a deleted entry's chunk list leaves its LRU).
        now: the store's clock.
    """

    def __init__(self, reader: Reader, now: Callable[[], float]) -> None:
        self._reader = reader
        self._now = now
        self._sequencer = _sequencer_of(reader.engine.engine)

    def commit_entry(
        self, txn: WriteTxn, raw_id: bytes, packed: bytes, n_chunks: int, *, kind: str, size: int,
        chars: int | None, lines: int, sha256: str, session: str, turn: str | int | None, ttl: float | None,
        name: str | None, step: int | None, tool: str | None, meta: dict[str, Any], created: float,
        counts: dict[str, int] | None = None, replaces: bytes | None = None, filters: bytes | None = None,
    ) -> Entry:
        """Make an entry visible: its record, manifest, chunk filters and every index, in ``txn``.

        ``filters``: the entry's chunk filters as :func:`blobpad.prefilter.pack` packs them
        (None: none, grep and count read every chunk).
        ``counts`` are more counter changes of the same transaction (the chunks it
        created), written with the entry's in one update of the counters.
        ``replaces``: the id the name must still name, live (an edit of that entry), or
        of a live unnamed entry of the session while the name is free (the new entry
        takes its place: it is deleted in this transaction); when another writer put
        the name again or deleted the entry since, or it expired, raise Conflict; the
        new entry expires when that one does at this commit (``ttl`` is not used), so a
        ``touch()`` made during the edit is kept.
        :data:`NAME_FREE` instead: the name must name no live entry (``Store.put(...,
        exclusive=True)``), else Conflict.  Live means live when this transaction
        commits, by the store's clock, not when the put began.
        """
        # an entry is created when this commit makes it readable, not when its put began: a
        # put streamed for longer than its ttl is still readable for the whole ttl
        created = max(created, self._now())
        first_created = created
        expires = None if ttl is None else created + ttl
        if name is not None:
            editing = replaces is not None and replaces != NAME_FREE
            old = txn.get("names", name_key(session, name))
            previous = None
            if old is not None:
                replaced = get_or_damaged(txn, "entries", old)[1]
                previous = None if replaced is None else decode_entry(replaced)
                # live as of this commit (``created``), not as of the put's start: a slow put
                # must not take a name whose entry expired meanwhile for a live one
                if previous is not None and previous.expires_at is not None and previous.expires_at <= created:
                    previous = None
            unnamed = None  # the unnamed entry this put takes the place of
            if editing and previous is None:
                unnamed = self._live_unnamed(txn, replaces, session, created)  # type: ignore[arg-type]
                previous = unnamed
            if editing and (old != replaces and unnamed is None or previous is None):
                raise Conflict(
                    f"the entry named {name[:200]!r} is no longer entry {replaces.hex()} (replaced, deleted or "  # type: ignore[union-attr]
                    "expired since it was read, for an edit or a put with replaces=); nothing was changed: read it "
                    "again and retry"
                )
            if previous is not None:
                if replaces == NAME_FREE:
                    raise Conflict(
                        f"the session already has an entry named {name[:200]!r} (entry {old.hex()}); nothing "  # type: ignore[union-attr]
                        "was stored", hint=HINT_NAME_TAKEN,
                    )
                first_created = previous.created_at  # the name lives on: so does its creation time
                if editing:  # an edit expires when the entry does as it stands now (a touch() meanwhile counts)
                    expires = previous.expires_at
            if old is not None:
                self.delete_in(txn, old)
            if unnamed is not None:
                self.delete_in(txn, replaces)  # type: ignore[arg-type]
        sequencer = self._sequencer
        seq = sequencer.next(created, session, None if sequencer.primed(session) else session_last_sequence(txn, session),
                             store_floor=None if sequencer.store_primed else highest_sequence(txn))
        entry = Entry(
            id=raw_id.hex(), session=session, turn=turn, step=step, tool=tool, name=name, kind=kind,
            size_bytes=size, chars=chars, lines=lines, created_at=first_created, expires_at=expires,
            sha256=sha256, meta=meta, chunks=n_chunks, seq=seq, updated_at=created,
        )
        if n_chunks <= INLINE_CHUNKS:
            mark_format(txn)
            txn.put("entries", raw_id, entry.encode() + INLINE_MARK + packed)
        else:
            txn.put("entries", raw_id, entry.encode())
            txn.put("manifests", raw_id, packed)
        if filters is not None:
            txn.put("filters", raw_id, filters)
        txn.put("by_scope", scope_key(session) + seq_key(seq, raw_id), scope_value(raw_id, turn))
        txn.put("expiry", expiry_key(expiry_us(expires), raw_id, seq), b"")
        if size > WHOLE_DEDUP:  # only larger content is looked for whole (blobpad.put)
            txn.put("digests", digest_key(size, sha256, raw_id), b"")
        if name is not None:
            txn.put("names", name_key(session, name), raw_id)
        bump(txn, seq, **(counts or {}), entries=1, logical_bytes=size,
             filter_bytes=0 if filters is None else len(filters))
        return entry

    @staticmethod
    def _live_unnamed(txn: WriteTxn, raw_id: bytes, session: str, now: float) -> Entry | None:
        """The entry ``raw_id`` if it is live at ``now``, unnamed and of ``session``; else None."""
        raw = get_or_damaged(txn, "entries", raw_id)[1]
        e = None if raw is None else decode_entry(raw)
        if e is None or e.name is not None or e.session != session:
            return None
        return None if e.expires_at is not None and e.expires_at <= now else e

    def keep_filters(self, txn: WriteTxn, raw_id: bytes, filters: list[bytes]) -> bool:
        """Keep the chunk filters searches built of an entry's chunks (in chunk-list order,
        :data:`blobpad.prefilter.UNKNOWN` for a chunk without one) in ``txn``, merged into
        its record: a chunk keeps the filter it has, and gets one it lacks.  Nothing is
        written when the entry is gone, when its record is damaged or does not fit its
        chunks (verify() names it), or when nothing is new; return whether it was written.
        An entry's chunks never change, so filters built from them stay right."""
        if txn.get_unchecked("entries", raw_id) is None:
            return False
        old_bytes = 0
        if txn.get_unchecked("filters", raw_id) is not None:
            try:
                record = txn.get("filters", raw_id)
            except CorruptData:
                return False
            old = None if record is None else prefilter.unpack(record, len(filters))
            if old is None:
                return False
            merged = [o or f for o, f in zip(old, filters, strict=True)]
            if merged == old:
                return False
            filters, old_bytes = merged, len(record)
        record = prefilter.pack(filters)
        txn.put("filters", raw_id, record)
        bump(txn, filter_bytes=len(record) - old_bytes)
        return True

    def set_expiry(self, txn: WriteTxn, raw_id: bytes, expires: float | None) -> Entry | None:
        """Give a live entry a new expiry (None: never) in ``txn``; None when there is no live entry
        ``raw_id``; CorruptData when its record is damaged (as every read of it says)."""
        raw = txn.get("entries", raw_id)
        entry = None if raw is None else decode_entry(raw)
        if raw is not None and entry is None:
            raise CorruptData(f"the record of entry {raw_id.hex()} is damaged; delete the entry", hint=HINT_VERIFY)
        if entry is None or (entry.expires_at is not None and entry.expires_at <= self._now()):
            return None
        for space, key in expiry_keys(entry, raw_id):
            txn.delete(space, key)
        entry = dataclasses.replace(entry, expires_at=expires)
        inline = inline_chunk_list(raw)  # type: ignore[arg-type]
        txn.put("entries", raw_id, entry.encode() + (b"" if inline is None else INLINE_MARK + inline))
        txn.put("expiry", expiry_key(expiry_us(expires), raw_id, entry.seq), b"")
        return entry

    def delete_in(self, txn: WriteTxn, raw_id: bytes) -> tuple[int, int]:
        """Delete one entry inside ``txn``; return (chunks freed, stored bytes freed).

        Damage does not stop it: the index keys of a record that does not decode are
        found by scanning the indexes, and the chunks of a chunk list that is missing
        or does not decode are left for the next gc() to recount (``repair_refs``).
        """
        present, raw = get_or_damaged(txn, "entries", raw_id)
        if not present:
            return 0, 0
        e = decode_entry(raw) if raw is not None else None
        m = _chunk_list(txn, raw_id, raw)
        keys, size = (None, 0) if m is None else (m.keys, m.bytes_at[-1])
        txn.delete("entries", raw_id)
        if e is None:
            purge_index(txn, raw_id)
        else:
            size = e.size_bytes
            for space, key in seq_index_keys(txn, e, raw_id):
                txn.delete(space, key)
            for space, key in _dated_keys(e, raw_id):
                txn.delete(space, key)
            if e.name is not None and get_or_damaged(txn, "names", name_key(e.session, e.name)) == (True, raw_id):
                txn.delete("names", name_key(e.session, e.name))
        txn.delete("manifests", raw_id)
        stored = txn.get_unchecked("filters", raw_id)  # its length, even when damaged
        filter_bytes = 0 if stored is None else max(0, len(stored) - SEAL_SIZE)
        if stored is not None:
            txn.delete("filters", raw_id)
        freed = (0, 0)
        if keys is None:
            txn.put("meta", REPAIR, b"1")  # its chunks' references are unknown: gc() recounts them
        else:
            freed = release(txn, keys)
        bump(txn, entries=-1, logical_bytes=-size, filter_bytes=-filter_bytes)
        self._reader.forget(raw_id)
        return freed

    def evict_for(self, txn: WriteTxn, keep: bytes, cap: int | None, *, untimed: bool = True) -> None:
        """Evict the entries closest to expiry until the stored bytes fit under ``cap``
        (``max_bytes`` as ``txn`` reads it); among entries that expire together (those
        without a TTL, or put at one instant with one TTL), the oldest put first.
        ``untimed=False``: entries without a TTL are never evicted (StoreFull when those
        that expire do not free enough).

        Runs in the final transaction of a put (``keep`` is its id), whose chunks are
        already counted, never in its batches: a put that fails has evicted nothing.  A put
        evicts at most :data:`_EVICT_MAX` entries (StoreFull saying so beyond: the
        transaction stays bounded).
        """
        if not cap:
            return
        over = counters(txn)["stored_bytes"] - cap
        if over <= 0:
            return
        start, tried, batch = b"", 0, 4
        while tried <= _EVICT_MAX:  # the entries closest to expiry, a batch at a time (as many as it takes)
            victims, last = [], None
            for key, _ in txn.scan("expiry", start):
                if not untimed and key[:8] == _NEVER_KEY:  # entries without a TTL are kept: nothing more to evict
                    break
                last = key
                if (victim := expiry_id(key)) != keep:
                    victims.append(victim)
                if len(victims) >= batch:
                    break
            batch = min(4 * batch, _EVICT_BATCH)  # most puts evict one or two: ask for few first
            if last is None:
                break
            prefetch_deletes(txn, victims)
            for raw_id in victims:
                _, freed = self.delete_in(txn, raw_id)
                over -= freed
                if over <= 0:
                    return
            tried += len(victims)
            start = last + b"\0"
        else:  # more to evict than one put may: the transaction stays bounded
            raise StoreFull(
                f"the store is capped at max_bytes={cap} and this put would have to evict more than {_EVICT_MAX:,} "
                "entries in its one transaction, the most a put evicts; nothing was evicted or stored: make room "
                "first (delete(), delete_session(), gc()), or raise max_bytes",
                hint=HINT_MAX_BYTES,
            )
        raise StoreFull(
            f"the store is capped at max_bytes={cap} and this put does not fit even after evicting "
            + ("every other entry" if untimed else "every entry that expires (entries without a TTL are kept)"),
            hint=HINT_MAX_BYTES,
        )
