"""Maintenance: gc (expiry, reference repair, expired notepads) and verify (every record checked).

gc() removes expired entries through the expiry index in bounded transactions,
folds the writers' counters shards into one record,
recounts chunk references when the store was flagged for it (a damaged chunk list
deleted, or verify() finding a wrong record), and purges expired notepads.  verify()
reads every record of every keyspace and cross-checks entries, chunk lists, indexes,
references, counters and notepads, reporting instead of raising.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zstandard

from . import notes, prefilter
from .catalog import (
    BASE_KEY,
    COUNTERS,
    FORMAT_GUARD,
    REF,
    REPAIR,
    WHOLE_DEDUP,
    Catalog,
    counter_keys,
    counters,
    digest_key,
    due,
    entry_totals,
    expiry_keys,
    filter_bytes,
    fold,
    get_or_damaged,
    prefetch_due,
    recount,
    seq_index_keys,
    stored_counters,
    unpack_ref,
)
from .chunking import KEY_SIZE, Manifest
from .codec import Codec
from .engine import SPACES, Checked, ReadTxn, WriteTxn, skip_damaged
from .errors import BlobpadError, CorruptData, Unavailable
from .index import decode_entry, expiry_id, inline_chunk_list, name_key, scope_key, scope_value

__all__ = ["GcReport", "VerifyReport", "gc", "sweep", "SWEEP_LIMIT", "verify", "repair_refs"]


@dataclass(frozen=True)
class GcReport:
    """What ``Store.gc()`` freed: expired ``entries``, the ``chunks`` and stored ``bytes``
    nobody referenced any more, ``aborted_puts`` of dead processes rolled back, and
    expired session ``notepads`` (those given a ttl) removed."""

    entries: int
    chunks: int
    bytes: int
    aborted_puts: int = 0
    notepads: int = 0
    #: damage gc() met and could not repair (empty when the store is sound): run
    #: verify() for the whole picture and delete the entries it names
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if k == "problems" else v for k, v in ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


@dataclass(frozen=True)
class VerifyReport:
    """What ``Store.verify()`` found: ``ok`` is true when ``problems`` is empty."""

    ok: bool
    entries: int
    chunks: int
    problems: list[str]
    damaged_entries: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Verifier:
    """One verify() pass over a read transaction (see :meth:`Store.verify`)."""

    def __init__(self, codec: Codec, txn: ReadTxn, problems: list[str], damaged: set[str], totals: list[int]) -> None:
        self.codec = codec
        self.txn = txn
        self.problems = problems
        self.damaged = damaged
        self.totals = totals
        self.recount = False
        #: keyspaces whose scan stopped at damage: a record not seen in one may lie past
        #: that point, so it is looked up on its own before it is called missing
        self.cut: set[str] = set()
        #: the keys of each keyspace's damaged records, reported once (by _read_space): the
        #: checks after it neither call them missing nor count on what they held
        self.bad: dict[str, set[bytes]] = {}

    def run(self) -> bool:
        # Every keyspace but the chunks, whose frames are checked one at a time (_chunks).
        records = {space: self._read_space(space) for space in SPACES if space != "chunks"}
        records["manifests"].pop(FORMAT_GUARD, None)  # no chunk list: what keeps format 2's gc() from repairing
        for phase in (self._entries, self._chunks, self._counters):
            try:
                phase(records)
            except Unavailable:
                raise  # no answer is not damage
            except BlobpadError as exc:  # damage that stops one phase must not hide the others
                self.problems.append(f"verify stopped early in {phase.__name__.strip('_')}: {exc}")
        try:
            self.problems.extend(notes.verify_notepads(self.txn, records["notes"]))
        except Unavailable:
            raise
        except BlobpadError as exc:
                self.problems.append(f"verify stopped early in the notepads: {exc}")
        return self.recount

    def _read_space(self, space: str, check: Callable[[bytes, bytes], None] | None = None,
                    lost: set[bytes] | None = None) -> dict[bytes, bytes]:
        """Every sound record of ``space``; damaged ones and lost pages are reported.

        With ``check``, each value is handed to it and only the keys are kept (the
        chunks: memory stays one frame, whatever the store's size).  With ``lost``, a
        record that cannot be read because its bytes are gone (a cluster's chunk whose
        key a node lost) is added to it instead of being reported as damaged: the caller
        reports it once, as missing."""
        found: dict[bytes, bytes] = {}
        bad: list[bytes] = []
        try:
            for key, value in self.txn.scan(space, on_damage=bad.append):
                if check is not None:
                    check(key, value)
                    value = b""
                found[key] = value
        except Unavailable:
            raise  # the server did not answer: not damage (verify raises it, as every call does)
        except BlobpadError as exc:
            self.problems.append(f"the {space} keyspace cannot be read to its end: {exc}")
            self.cut.add(space)
        self.bad[space] = set(bad)
        for key in bad:
            if lost is not None and self.txn.get_unchecked(space, key) is None:
                lost.add(key)
                continue
            if space == "manifests" and (key == FORMAT_GUARD or self._holds_list(key)):
                self.problems.append(
                    "the format guard record is damaged; gc() writes it again" if key == FORMAT_GUARD else
                    f"chunk list {key.hex()}: a damaged record beside the chunk list its entry holds, which reads "
                    "use; gc() removes it"
                )
                self.recount = True  # neither harms a read
                continue
            self.problems.append(f"{space} record {key[:40].hex()}: damaged (checksum mismatch)")
            if space in ("entries", "manifests") and len(key) == 8:
                self.damaged.add(key.hex())
        recorded = self.txn.recorded_count(space)
        if recorded is not None and recorded != len(found) + len(bad):
            self.problems.append(
                f"the {space} keyspace records {recorded} records but {len(found) + len(bad)} can be read: "
                "pages of the store file are damaged"
            )
        return found

    def _holds_list(self, raw_id: bytes) -> bool:
        """Whether entry ``raw_id``'s record is sound and holds its chunk list (then a damaged
        ``manifests`` record of it is a stale one, which no read uses)."""
        try:
            raw = self.txn.get("entries", raw_id)
        except Unavailable:
            raise  # no answer is not damage
        except BlobpadError:  # the record is damaged, or cannot be read: the chunk list may be its
            return False
        return raw is not None and inline_chunk_list(raw) is not None

    def _lookup(self, records: dict[str, dict[bytes, bytes]], space: str, key: bytes) -> bytes | None:
        """The record ``key`` of ``space``: as its scan found it, or, when that scan stopped at
        damage before reaching it, read on its own (and kept with the others); None when it
        is not stored, or cannot be read (reported, with the damage that stopped the scan)."""
        value = records[space].get(key)
        if value is not None or space not in self.cut:
            return value
        value, error = self._read_one(space, key)
        if error is not None:
            self.problems.append(f"{space} record {key[:40].hex()}: unreadable ({error})")
        elif value is not None:
            records[space][key] = value
        return value

    def _read_one(self, space: str, key: bytes) -> tuple[bytes | None, BlobpadError | None]:
        """(the record, None), or (None, the damage that kept it from being read); no answer raises."""
        try:
            return self.txn.get(space, key), None
        except Unavailable:
            raise
        except BlobpadError as exc:
            return None, exc

    def _recover_entries(self, records: dict[str, dict[bytes, bytes]]) -> None:
        """With the entries' scan stopped at damage, look up on their own the entries the
        indexes and chunk lists name, so that the entries past the damage are checked too
        (and their index records are not taken for stale ones)."""
        if "entries" not in self.cut:
            return
        named: set[bytes] = set(records["manifests"]) | set(records["filters"])
        for space in ("by_seq", "by_scope", "names"):
            named.update(v[:8] for v in records[space].values() if len(v) >= 8)  # by_scope: the id, then the turn
        named.update(expiry_id(key) for key in records["expiry"])
        named.update(key[40:] for key in records["digests"] if len(key) == 48)
        for raw_id in sorted(named - records["entries"].keys()):
            self._lookup(records, "entries", raw_id)

    def _entries(self, records: dict[str, dict[bytes, bytes]]) -> None:
        self._recover_entries(records)
        self._inline_lists(records)
        entries, manifests = records["entries"], records["manifests"]
        self.totals[0] = len(entries)
        want: dict[str, dict[bytes, bytes]] = {space: {} for space in ("by_seq", "by_scope", "expiry", "digests")}
        names: dict[bytes, bytes] = {}
        for raw_id, raw in entries.items():
            eid = raw_id.hex()
            e = decode_entry(raw)
            if e is None or e.id != eid:
                self.problems.append(f"entry {eid}: record unreadable")
                self.damaged.add(eid)
                continue
            session_prefix = scope_key(e.session)
            for space, key in seq_index_keys(self.txn, e, raw_id):
                if space == "by_scope" and key.startswith(session_prefix):  # the id and turn (older stores: the id)
                    got = records["by_scope"].get(key)
                    want[space][key] = raw_id if got is not None and len(got) == 8 else scope_value(raw_id, e.turn)
                elif key in records[space] or space not in ("by_seq", "by_scope"):
                    want[space][key] = raw_id  # by_seq and the turns' keys: kept by stores written before only
            (_, key), (_, legacy) = expiry_keys(e, raw_id)  # the layout with the sequence, and the older one
            want["expiry"][legacy if legacy in records["expiry"] and key not in records["expiry"] else key] = b""
            digest = digest_key(e.size_bytes, e.sha256, raw_id)
            if e.size_bytes > WHOLE_DEDUP or digest in records["digests"]:  # smaller: indexed by older stores
                want["digests"][digest] = b""
            if e.name is not None:
                names[name_key(e.session, e.name)] = raw_id
            blob = self._lookup(records, "manifests", raw_id)
            try:
                m = Manifest.unpack(blob) if blob is not None else None
            except ValueError:
                m = None
            if m is None:
                self.problems.append(f"entry {eid}: chunk list missing or damaged")
                self.damaged.add(eid)
            elif m.bytes_at[-1] != e.size_bytes or len(m) != e.chunks:
                self.problems.append(f"entry {eid}: its chunk list holds {m.bytes_at[-1]} bytes, not {e.size_bytes}")
                self.damaged.add(eid)
        for raw_id in manifests.keys() - entries.keys():
            self.problems.append(f"chunk list {raw_id.hex()}: no entry owns it")
            self.recount = True
        self._filters(records["filters"], entries, manifests)
        for space, expected in [*want.items(), ("names", names)]:
            for key in expected.keys() - records[space].keys():
                self._lookup(records, space, key)
            self._compare_index(space, expected, records[space])

    def _inline_lists(self, records: dict[str, dict[bytes, bytes]]) -> None:
        """Take the chunk lists entry records hold (small entries) in with the ``manifests``
        records, as the other phases read them; a ``manifests`` record of an entry that
        holds its own is reported (the entry's is the one read; gc() removes the other)."""
        manifests = records["manifests"]
        for raw_id, raw in records["entries"].items():
            blob = inline_chunk_list(raw)
            if blob is None:
                continue
            if raw_id in manifests:
                self.problems.append(
                    f"chunk list {raw_id.hex()}: its entry holds its own chunk list, which reads use; gc() removes this one"
                )
                self.recount = True
            manifests[raw_id] = blob

    def _filters(self, filters: dict[bytes, bytes], entries: dict[bytes, bytes], manifests: dict[bytes, bytes]) -> None:
        """Each sound ``filters`` record belongs to an entry and holds one filter per chunk of
        its chunk list (an entry without one, put before filters existed, is sound: grep
        and count read all of its chunks; so does a damaged record, reported by the scan)."""
        for raw_id, record in filters.items():
            blob = manifests.get(raw_id)
            if raw_id not in entries or blob is None:
                self.problems.append(f"chunk filters {raw_id.hex()}: no entry owns them; gc() removes them")
                self.recount = True
                continue
            try:
                n = len(Manifest.unpack(blob))
            except ValueError:
                continue  # reported with its entry
            if prefilter.unpack(record, n) is None:
                self.problems.append(
                    f"entry {raw_id.hex()}: its chunk filters do not match its {n} chunks (grep reads every chunk)"
                )

    def _compare_index(self, space: str, expected: dict[bytes, bytes], actual: dict[bytes, bytes]) -> None:
        """Every entry indexed in ``space`` and every record of ``space`` naming a live entry."""
        for key, value in expected.items():
            got = actual.get(key)
            if got != value:
                owner = value[:8].hex() if len(value) >= 8 else key[-8:].hex()
                if got is None:
                    state = "missing"
                elif len(got) > 8 and got[:8] == value[:8]:  # a session index record: its id, then another turn
                    state = "naming another turn (the entry is left out of its turn's listing)"
                else:
                    state = f"pointing at {got[:8].hex()}"
                self.problems.append(f"entry {owner}: its {space} record is {state}")
                self.damaged.add(owner)
        for key in actual.keys() - expected.keys():
            self.problems.append(f"{space} record {key[:40].hex()}: names no entry (a stale or damaged index record)")

    def _chunks(self, records: dict[str, dict[bytes, bytes]]) -> None:
        expected: dict[bytes, int] = {}
        raw_len: dict[bytes, int] = {}
        chunk_owner: dict[bytes, list[str]] = {}
        for raw_id, blob in records["manifests"].items():
            try:
                m = Manifest.unpack(blob)
            except ValueError:
                continue  # reported with its entry
            count_keys(m, expected, raw_len)
            for key in m.keys:
                chunk_owner.setdefault(key, []).append(raw_id.hex())
        for key, value in records["pending"].items():
            if key[8:9] == b"B":
                for i in range(0, len(value), KEY_SIZE):
                    k = value[i : i + KEY_SIZE]
                    expected[k] = expected.get(k, 0) + 1
        failed: dict[bytes, str] = {}
        stored_len: dict[bytes, int] = {}  # each chunk's frame length, for its reference record

        def check(key: bytes, frame: bytes) -> None:
            stored_len[key] = len(frame)
            if key in raw_len:
                try:
                    self.codec.decompress(frame, key, raw_len[key])
                except CorruptData as exc:
                    failed[key] = str(exc)

        lost: set[bytes] = set()
        chunks = self._read_space("chunks", check, lost)
        for key in expected.keys() - records["refs"].keys():
            self._lookup(records, "refs", key)
        if "chunks" in self.cut:  # the chunks past the damage that stopped the scan: read one by one
            for key in chunk_owner.keys() - chunks.keys():
                frame, error = self._read_one("chunks", key)
                if error is not None:
                    failed[key] = f"chunk {key.hex()}: unreadable ({error})"
                elif frame is not None:
                    check(key, frame)
                    chunks[key] = b""
        refs = records["refs"]
        self.totals[1] = len(refs)
        for key, rec in refs.items():
            ref = unpack_ref(rec)
            if ref is None:
                self.problems.append(f"chunk {key.hex()}: reference record damaged ({len(rec)} bytes); gc() rebuilds it")
                self.recount = True
            elif expected.get(key, 0) != ref[0]:
                self.problems.append(
                    f"chunk {key.hex()}: reference count {ref[0]}, but {expected.get(key, 0)} references; gc() recounts them"
                )
                self.recount = True
            elif ref[1] != stored_len.get(key, ref[1]) or ref[2] != raw_len.get(key, ref[2]):
                self.problems.append(
                    f"chunk {key.hex()}: reference record says {ref[1]} bytes stored and {ref[2]} raw, but the chunk "
                    f"has {stored_len.get(key, ref[1])} and its chunk lists {raw_len.get(key, ref[2])}; gc() rebuilds it"
                )
                self.recount = True
        for key in expected.keys() - refs.keys() - self.bad.get("refs", set()):  # a damaged one: reported
            self.problems.append(f"chunk {key.hex()}: referenced but has no reference record; gc() rebuilds it")
            self.recount = True
        for key in chunks.keys() - expected.keys():
            self.problems.append(f"chunk {key.hex()}: stored, but nothing references it; gc() frees it")
            self.recount = True
        for key in lost - chunk_owner.keys():  # the owners' lost chunks are reported below, with them
            self.problems.append(f"chunk {key.hex()}: missing (its bytes are gone from the server)")
        reported = self.bad.get("chunks", set()) - lost  # damaged, and said so by _read_space
        for key, owners in chunk_owner.items():
            if key not in chunks or key in failed:
                if key not in reported or key in failed:
                    self.problems.append(failed.get(key, f"chunk {key.hex()}: missing"))
                self.damaged.update(owners)

    def _counters(self, records: dict[str, dict[bytes, bytes]]) -> None:
        if not counter_keys(self.txn):
            if records["entries"] or records["refs"]:
                self.problems.append("the counters records are missing; gc() recounts them")
                self.recount = True
            return
        stored = stored_counters(self.txn)
        actual = recount(self.txn)
        # a counter made from damaged records cannot be recounted: those records are reported already
        unknown = {name for space, names in _COUNTED_FROM.items() if self.bad.get(space) for name in names}
        if stored is None or any(stored.get(k, 0) != actual[k] for k in (*COUNTERS, "filter_bytes") if k not in unknown):
            shown = "damaged" if stored is None else json.dumps({k: stored.get(k, 0) for k in actual})[:200]
            self.problems.append(f"the counters are wrong ({shown}); gc() recounts them")
            self.recount = True


#: the keyspaces each counter is recounted from (catalog.recount)
_COUNTED_FROM = {"entries": ("entries", "logical_bytes"), "refs": ("chunks", "stored_bytes"), "filters": ("filter_bytes",)}


def census(txn: ReadTxn) -> tuple[dict[bytes, int], dict[bytes, int], dict[bytes, int], list[bytes]] | None:
    """(references each chunk should have, each chunk's raw length, each entry's size, the
    ``manifests`` records of entries that hold their chunk list in their own record), from
    every chunk list (in entry records and ``manifests`` records) and the pending journal;
    None while a chunk list does not decode, or an entry record is damaged (it may hold one)."""
    expected: dict[bytes, int] = {}
    raw_len: dict[bytes, int] = {}
    sizes: dict[bytes, int] = {}
    damaged: list[bytes] = []
    lists = {raw_id: blob for raw_id, raw in txn.scan("entries", on_damage=damaged.append)
             if (blob := inline_chunk_list(raw)) is not None}
    holding = set(lists)  # the entries whose records hold their chunk lists: their manifests records are stale
    bad_lists: list[bytes] = []
    stale: list[bytes] = []
    for raw_id, blob in txn.scan("manifests", on_damage=bad_lists.append):
        if raw_id in holding:
            stale.append(raw_id)
        elif raw_id != FORMAT_GUARD:
            lists[raw_id] = blob
    bad_lists = [raw_id for raw_id in bad_lists if raw_id != FORMAT_GUARD]  # the guard holds no chunk list
    stale += [raw_id for raw_id in bad_lists if raw_id in holding]  # damaged, but stale: it goes
    if damaged or any(raw_id not in holding for raw_id in bad_lists):
        return None
    for raw_id, blob in lists.items():
        try:
            m = Manifest.unpack(blob)
        except ValueError:
            return None
        sizes[raw_id] = m.bytes_at[-1]
        count_keys(m, expected, raw_len)
    count_pending(txn, expected)
    return expected, raw_len, sizes, stale


def count_keys(m: Manifest, expected: dict[bytes, int], raw_len: dict[bytes, int]) -> None:
    """Add one reference per chunk occurrence in ``m`` to ``expected``; note each chunk's raw length."""
    at = m.bytes_at
    for i, key in enumerate(m.keys):
        expected[key] = expected.get(key, 0) + 1
        raw_len[key] = at[i + 1] - at[i]


def count_pending(txn: ReadTxn, expected: dict[bytes, int]) -> None:
    """Add the references held by puts in flight (their journal's chunk batches)."""
    for key, value in txn.scan("pending"):
        if key[8:9] == b"B":
            for i in range(0, len(value), KEY_SIZE):
                k = value[i : i + KEY_SIZE]
                expected[k] = expected.get(k, 0) + 1


def content_size(frame: bytes) -> int:
    """The raw length a zstd frame declares, 0 when it declares none or is not a frame."""
    try:
        return max(zstandard.frame_content_size(frame), 0)
    except zstandard.ZstdError:
        return 0


def repair_refs(txn: WriteTxn) -> tuple[int, int]:
    """Recount the references of every chunk, when the store is flagged for it.

    The references of a chunk list that does not decode cannot be released when its
    entry is deleted, nor those of a damaged or missing reference record; the
    delete flags the store instead (so does verify() when it finds a wrong record),
    and gc() runs this: the references are recounted from the surviving chunk lists
    and the pending journal (in one transaction, so puts in flight are counted
    right), damaged or missing records are rebuilt from the stored frame and the
    chunk lists, chunks nothing references are freed, so are chunk filters whose
    chunk list is gone and ``manifests`` records of entries whose records hold their
    chunk list, a damaged format guard is written again, and the counters are
    recounted.  While a damaged chunk list, or a damaged entry record (which may hold
    one), is still stored nothing is changed (its references are unknown).  Returns
    (chunks freed, stored bytes freed).
    """
    if txn.get("meta", REPAIR) is None:
        return 0, 0
    counted = census(txn)
    if counted is None:
        return 0, 0  # repaired by the gc() after that entry is deleted
    expected, raw_len, sizes, stale = counted
    for raw_id in stale:  # a chunk list its entry's record holds too: that one is the entry's
        txn.delete("manifests", raw_id)
    if get_or_damaged(txn, "manifests", FORMAT_GUARD) == (True, None):  # the guard, damaged: written again
        txn.put("manifests", FORMAT_GUARD, b"")
    fixes: list[tuple[bytes, bytes | None]] = []
    chunks = stored = unique = freed_chunks = freed_bytes = 0
    # every stored chunk's lengths, from its frame and its chunk lists: what its record must say
    lengths = {key: (len(frame), raw_len.get(key) or content_size(frame))
               for key, frame in txn.scan("chunks", on_damage=skip_damaged)}
    recorded = set()
    for key, rec in txn.scan("refs", on_damage=skip_damaged):  # a damaged one: rebuilt below, as a missing one
        recorded.add(key)
        want = expected.get(key, 0)
        ref = unpack_ref(rec)
        if not want or ref is None and key not in lengths:  # unreferenced, or damaged with its chunk unreadable
            fixes.append((key, None))
            freed_chunks += 1
            freed_bytes += ref[1] if ref is not None else 0
            continue
        slen, rlen = lengths.get(key) or ref[1:]  # ref: a chunk that cannot be read keeps what its record says
        chunks += 1
        stored += slen
        unique += rlen
        if ref != (want, slen, rlen):  # a wrong count or wrong lengths; a damaged record is rebuilt
            fixes.append((key, REF.pack(want, slen, rlen)))
    for key, (slen, rlen) in lengths.items():  # chunks whose record is missing
        if key in recorded:
            continue
        if key in expected:
            fixes.append((key, REF.pack(expected[key], slen, rlen)))
            chunks += 1
            stored += slen
            unique += rlen
        else:
            fixes.append((key, None))
            freed_chunks += 1
            freed_bytes += slen
    for key, new in fixes:
        if new is None:
            txn.delete("refs", key)
            txn.delete("chunks", key)
        else:
            txn.put("refs", key, new)
    entries, logical = entry_totals(txn)
    orphans = [key for key, _ in txn.scan("filters", on_damage=skip_damaged) if key not in sizes]
    for key in orphans:  # chunk filters whose entry (and chunk list) is gone
        txn.delete("filters", key)
    fold(txn, {"entries": entries, "logical_bytes": logical, "chunks": chunks, "stored_bytes": stored,
               "unique_bytes": unique, "filter_bytes": filter_bytes(txn)})
    txn.delete("meta", REPAIR)
    return freed_chunks, freed_bytes


def _remove_due(txn: WriteTxn, catalog: Catalog, now: float, limit: int) -> tuple[int, int, int, list[str]]:
    """Remove up to ``limit`` entries expired at ``now`` from the front of the expiry index:
    (entries, chunks freed, bytes freed, damaged index records removed, in words)."""
    n = chunks = freed = 0
    damaged_keys: list[bytes] = []
    prefetch_due(txn, now, limit)
    for key, _ in due(txn, now, damaged_keys.append):
        c, b = catalog.delete_in(txn, expiry_id(key))
        if not c and not b and not get_or_damaged(txn, "entries", expiry_id(key))[0]:
            txn.delete("expiry", key)
        n += 1
        chunks += c
        freed += b
        if n >= limit:
            break
    for key in damaged_keys:  # an index record that names nothing it can be trusted for
        txn.delete("expiry", key)
    return n, chunks, freed, [f"removed a damaged expiry index record {k.hex()}" for k in damaged_keys]


#: how many expired entries one :func:`sweep` removes at most
SWEEP_LIMIT = 64


def sweep(engine: Checked, catalog: Catalog, now: float) -> int:
    """Remove a few expired entries and expired notepads (at most :data:`SWEEP_LIMIT` of
    each, the first to have expired), freeing their chunks and texts; return the larger
    of the numbers of entries and of notepad expiry records gone through (SWEEP_LIMIT:
    more may be due).  The store calls it after puts, so a store nobody runs gc() on
    still frees what expires, and calls it again at once when a whole batch went.
    Reads nothing but the front of the two expiry indexes when nothing is due."""
    with engine.read() as txn:
        entries = next(due(txn, now), None) is not None
        notepads = notes.any_expired(txn, now)
    if not entries and not notepads:
        return 0

    def txn_fn(txn: WriteTxn) -> int:
        n = _remove_due(txn, catalog, now, SWEEP_LIMIT)[0] if entries else 0
        return max(n, notes.purge_some(txn, now, SWEEP_LIMIT)[1] if notepads else 0)

    return int(engine.write(txn_fn, frees=True))


#: at most this many sweeps (each up to SWEEP_LIMIT entries) make room for one refused write
ROOM_SWEEPS = 256


def make_room(engine: Checked, catalog: Catalog, now: float) -> int:
    """Remove what has expired, for a write a full store refused (:attr:`Checked.room`):
    :func:`sweep` again and again until less than a whole batch was due (at most
    :data:`ROOM_SWEEPS` times, so a refused write waits a bounded time); return how many
    entries and notepad records went (0: the store holds nothing expired, the write cannot
    be helped).  Each sweep is a freeing transaction, which a full store lets through."""
    total = 0
    for _ in range(ROOM_SWEEPS):
        n = sweep(engine, catalog, now)
        total += n
        if n < SWEEP_LIMIT:
            break
    if total:
        # one more commit, gc()'s folding of the counters shards the sweeps wrote (so there is one to
        # fold): LMDB reuses the pages a commit freed only from the second commit after it (the last
        # one may still be read), so the write tried again next finds the sweeps' pages free
        engine.write(_fold_counters, frees=True)
    return total


def _fold_counters(txn: WriteTxn) -> None:
    """Fold the writers' counters shards into the base record (damaged ones: recounted)."""
    if counter_keys(txn) not in ([], [BASE_KEY]):
        fold(txn, counters(txn))


def _page_damage(engine: Checked) -> list[str]:
    """The damage an engine that checks its own structure finds in it (LMDB walks its B-trees in
    Python: see :meth:`Checked.read_salvaged`); [] on the others.  The recount of references walks
    every tree through the engine's library, which a damaged page makes abort the process."""
    with engine.read_salvaged() as (_txn, found):
        return list(found)


def gc(engine: Checked, catalog: Catalog, now: float, aborted: int) -> GcReport:
    """Remove expired entries (through the expiry index), free unreferenced chunks,
    roll back puts whose process died, and remove expired notepads; report what was freed.
    The caller (``Store.gc``) has mended the engine (:meth:`Checked.mend`) and rolled back
    the puts whose process died (``aborted``) first: both before any scan of this one."""
    total_entries = total_chunks = total_bytes = 0
    problems: list[str] = []
    engine.release_dead_readers()  # a reader killed inside its snapshot keeps every page freed since from reuse
    while True:  # in bounded transactions, so a big gc never holds the writer for long

        n, c, b, found = engine.write(lambda txn: _remove_due(txn, catalog, now, 500), frees=True)
        problems.extend(found)
        total_entries += n
        total_chunks += c
        total_bytes += b
        if n < 500:
            break
    with engine.read() as txn:
        repair = get_or_damaged(txn, "meta", REPAIR)[0]
    damage = _page_damage(engine) if repair else []
    if damage:
        problems.append(
            f"chunk references cannot be recounted while the store file has damaged pages ({damage[0][:200]}): "
            "compact() writes the file again from its sound pages; then run verify() and gc() again"
        )
    elif repair:
        c, b = engine.write(repair_refs, frees=True)
        total_chunks += c
        total_bytes += b
        with engine.read() as txn:
            if get_or_damaged(txn, "meta", REPAIR)[0]:
                problems.append(
                    "chunk references cannot be recounted while a damaged chunk list or entry remains; "
                    "delete the entries verify() names, then run gc() again"
                )
    notepads = engine.write(lambda txn: notes.purge_expired(txn, now), frees=True)
    engine.write(_fold_counters, frees=True)
    total_chunks += engine.collect()
    return GcReport(total_entries, total_chunks, total_bytes, aborted, notepads, tuple(problems))


def verify(engine: Checked, codec: Codec) -> VerifyReport:
    """Read every record of every keyspace and report what is damaged; never raises for damage.

    Checks each record's checksum, that LMDB's own record counts match what a
    scan finds (pages lost to damage), every entry against its chunk list and
    every index both ways (each entry is indexed, each index record names a live
    record of the right session), every chunk's content against its hash, the
    reference counts and the counters, and each notepad's heads, versions and
    texts.  ``damaged_entries`` names the entries whose content or lookup cannot
    be trusted.  Wrong reference records or counters damage no content: verify()
    flags the store so that the next gc() rebuilds them.
    """
    engine.refuse_pinned("verify()")  # it must read the store as it is, never report a snapshot's refusal as damage
    problems: list[str] = []
    damaged: set[str] = set()
    totals = [0, 0]  # entries, chunks
    try:
        with engine.read_salvaged() as (txn, found):
            problems.extend(found)
            recount = Verifier(codec, txn, problems, damaged, totals).run()
    except Unavailable:
        raise
    except BlobpadError as exc:  # the store file cannot even be read through
        problems.append(f"the store cannot be read: {exc}")
        recount = False
    if recount:  # flag the store so that the next gc() recounts every reference
        with contextlib.suppress(BlobpadError):
            engine.write(lambda txn: txn.put("meta", REPAIR, b"1"), frees=True)
    return VerifyReport(not problems, totals[0], totals[1], problems, sorted(damaged))
