"""The one read path: an entry's record and chunk list from the catalog, its chunks through the codec.

A :class:`Reader` is what :mod:`blobpad.reads` needs of a store, and all it gets: read
snapshots of the engine, entry records (expired ones are absent), chunk lists (kept
in a small LRU, dropped when an entry is deleted), chunk filters and verified chunks.  It never
writes; the one write a read may cause, keeping the chunk filters a search built, goes
through the store's ``keep_filters`` hook.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

from . import prefilter
from .chunking import Manifest
from .codec import Codec
from .engine import Checked, ReadTxn
from .errors import HINT_UNKNOWN_ID, CorruptData, NotFound
from .forks import reset_in_child
from .index import Entry, decode_entry, inline_chunk_list, parse_id

__all__ = ["Reader", "not_found", "records", "ahead", "chunk_list_blob"]

T = TypeVar("T")

_MANIFESTS = 256  # chunk lists kept decoded
_AHEAD = 256  # entry records a listing asks a networked engine for at a time
_FILTER_BYTES = 16 << 20  # entries' chunk filters kept unpacked (about 3 GB of log text)


def ahead(txn: ReadTxn, items: Iterable[T], raw_id: Callable[[T], bytes], first: int = 1) -> Iterator[T]:
    """``items``, in order, the entry record of each (``raw_id(item)``) asked of a networked
    engine ahead: ``first`` items' (at least one), then :data:`_AHEAD` at a time, each batch
    in one request; on a local engine, ``items`` as they come."""
    if not txn.networked:
        yield from items
        return
    it = iter(items)
    size = max(1, min(first, _AHEAD))
    while batch := list(itertools.islice(it, size)):
        txn.prefetch("entries", [raw_id(item) for item in batch])
        yield from batch
        size = _AHEAD


def records(txn: ReadTxn, raw_ids: Iterable[bytes], first: int = 0) -> Iterator[tuple[bytes, bytes | None]]:
    """``(id, entry record or None)`` for each of ``raw_ids``, in order, asked for ahead (:func:`ahead`)."""
    for raw_id in ahead(txn, raw_ids, lambda r: r, first):
        yield raw_id, txn.get("entries", raw_id)


def not_found(entry_id: str) -> NotFound:
    """The error for an id that names no live entry."""
    return NotFound(f"no entry {entry_id!r}: it does not exist, was deleted, or has expired", hint=HINT_UNKNOWN_ID)


def chunk_list_blob(txn: ReadTxn, raw_id: bytes, record: bytes | None = None) -> bytes | None:
    """The packed chunk list of entry ``raw_id``: the one its record holds (``record``, the
    entry record, read when not given), else its ``manifests`` record; None when it has
    neither.  Raises CorruptData when the record it is read from is damaged."""
    if record is None:
        record = txn.get("entries", raw_id)
    inline = None if record is None else inline_chunk_list(record)
    return inline if inline is not None else txn.get("manifests", raw_id)


class Reader:
    """Read access to one store's entries (see the module docstring)."""

    def __init__(self, engine: Checked, codec: Codec, now: Callable[[], float]) -> None:
        self.engine = engine
        self.codec = codec
        self.now = now
        self._manifests: OrderedDict[bytes, Manifest] = OrderedDict()
        self._filters: OrderedDict[bytes, tuple[list[bytes], int]] = OrderedDict()
        self._filter_bytes = 0
        self._lock = threading.Lock()
        #: the store's hook keeping an entry's chunk filters that a search built of all its
        #: chunks ((raw id, filters in chunk order) of one entry or more); None: searches build none
        self.keep_filters: Callable[[list[tuple[bytes, list[bytes]]]], None] | None = None
        reset_in_child(self)

    @property
    def workers(self) -> int:
        return self.codec.workers

    def read(self) -> AbstractContextManager[ReadTxn]:
        """A read snapshot of the store."""
        return self.engine.read()

    def load(self, txn: ReadTxn, entry_id: str) -> tuple[bytes, Entry]:
        """The raw id and record of a live entry; NotFound if unknown or expired."""
        return self._load(txn, entry_id)[:2]  # type: ignore[return-value]

    def _load(self, txn: ReadTxn, entry_id: str) -> tuple[bytes, Entry, bytes]:
        """:meth:`load`, and the entry's stored record."""
        raw_id = parse_id(entry_id)
        raw = txn.get("entries", raw_id)
        if raw is None:
            raise not_found(entry_id)
        try:
            entry = Entry.decode(raw)
        except (ValueError, TypeError) as exc:
            raise CorruptData(f"the record of entry {entry_id} is damaged ({exc}); delete it") from None
        if entry.expires_at is not None and entry.expires_at <= self.now():
            raise not_found(entry_id)
        return raw_id, entry, raw

    def stat(self, entry_id: str) -> Entry:
        """The record of a live entry; NotFound if unknown or expired."""
        with self.engine.read() as txn:
            return self.load(txn, entry_id)[1]

    def live(self, txn: ReadTxn, raw_ids: Iterable[bytes], now: float, first: int = _AHEAD) -> Iterator[Entry]:
        """The live entries among ``raw_ids`` (missing, expired and damaged records are skipped:
        verify() names the damaged ones).  A networked engine is asked for the records
        ``first`` ids at a time, then :data:`_AHEAD` at a time (one request each, not one per
        entry); ``first``: how many the caller expects to take."""
        for _, raw in records(txn, raw_ids, first):
            entry = None if raw is None else decode_entry(raw)
            if entry is not None and (entry.expires_at is None or entry.expires_at > now):
                yield entry

    def open_entry(self, txn: ReadTxn, entry_id: str) -> tuple[bytes, Entry, Manifest]:
        """The raw id, record and chunk list of a live entry (NotFound if unknown or expired):
        on a networked engine, a chunk list not kept decoded is asked for with the record,
        in one request."""
        if txn.networked:
            raw_id = parse_id(entry_id)
            with self._lock:
                cached = raw_id in self._manifests
            if not cached:
                txn.prefetch_pairs([("entries", raw_id), ("manifests", raw_id)])
        raw_id, entry, record = self._load(txn, entry_id)
        m = self.manifest(txn, raw_id, record)
        # a chunk list that decodes but does not fit its entry would read as other content
        if m.bytes_at[-1] != entry.size_bytes or (entry.chunks and len(m) != entry.chunks):
            raise CorruptData(
                f"the chunk list of entry {entry.id} holds {m.bytes_at[-1]} bytes in {len(m)} chunks where its "
                f"record says {entry.size_bytes} bytes in {entry.chunks} chunks: the store is damaged, delete the entry"
            )
        return raw_id, entry, m

    def manifest(self, txn: ReadTxn, raw_id: bytes, record: bytes | None = None) -> Manifest:
        """The chunk list of an entry (decoded once, then from a small LRU); ``record``: the
        entry's record, when the caller has it (a small entry's holds its chunk list)."""
        with self._lock:
            m = self._manifests.get(raw_id)
            if m is not None:
                self._manifests.move_to_end(raw_id)
                return m
        blob = chunk_list_blob(txn, raw_id, record)
        if blob is None:
            raise CorruptData(f"entry {raw_id.hex()} has no chunk list; the store is damaged, delete the entry")
        try:
            m = Manifest.unpack(blob)
        except ValueError as exc:
            raise CorruptData(f"the chunk list of entry {raw_id.hex()} is damaged ({exc}); delete the entry") from None
        with self._lock:
            self._manifests[raw_id] = m
            while len(self._manifests) > _MANIFESTS:
                self._manifests.popitem(last=False)
        return m

    def filters(self, txn: ReadTxn, raw_id: bytes, chunks: int) -> list[bytes] | None:
        """The trigram filters of an entry's ``chunks`` chunks, in order (:mod:`blobpad.prefilter`),
        or None when it has none (put before filters existed) or its record is damaged or
        does not fit its chunk list: then every chunk is read (verify() reports damage).
        Unpacked once, then kept in a small LRU (up to 16 MB of filters) until the entry
        is deleted or a search keeps more of them (:meth:`forget_filters`)."""
        with self._lock:
            kept = self._filters.get(raw_id)
            if kept is not None and len(kept[0]) == chunks:
                self._filters.move_to_end(raw_id)
                return kept[0]
        try:
            record = txn.get("filters", raw_id)
        except CorruptData:
            return None
        filters = None if record is None else prefilter.unpack(record, chunks)
        if filters is not None and record is not None and len(record) <= _FILTER_BYTES:
            with self._lock:
                if raw_id not in self._filters:
                    self._filters[raw_id] = (filters, len(record))
                    self._filter_bytes += len(record)
                while self._filter_bytes > _FILTER_BYTES:
                    self._filter_bytes -= self._filters.popitem(last=False)[1][1]
        return filters

    def forget(self, raw_id: bytes) -> None:
        """Drop a deleted entry's chunk list and filters from the LRUs."""
        with self._lock:
            self._manifests.pop(raw_id, None)
        self.forget_filters(raw_id)

    def forget_filters(self, raw_id: bytes) -> None:
        """Drop an entry's filters from their LRU (its record changed: read it again)."""
        with self._lock:
            kept = self._filters.pop(raw_id, None)
            if kept is not None:
                self._filter_bytes -= kept[1]

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._manifests = OrderedDict()
        self._filters = OrderedDict()
        self._filter_bytes = 0


