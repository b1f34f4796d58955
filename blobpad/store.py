"""The store: content-addressed zstd chunks in LMDB, with sessions, turns and expiry.

``Store.put`` cuts the content into content-defined chunks
(:mod:`blobpad.chunking`), keys each one by its xxh3-128 hash seeded with a secret
drawn when the store was created, compresses the new ones with zstd on a thread
pool, and writes them in batches.  A chunk whose key is already stored is compared
with the stored bytes before it is shared, so a hash collision (accidental, or
crafted by someone who learnt the seed) can never make one entry read another's
bytes: the new chunk gets the next free key variant instead.

Atomicity: a put whose content fits in one batch (16 MiB) commits exactly one write
transaction: its chunks, their references, the entry with its manifest and indexes,
and the counters, all or nothing.  A larger put writes each batch but the last in a
transaction of its own that also records which chunk references it added under the
put's id in the ``pending`` keyspace; the entry becomes visible only in the final
transaction, which holds the last batch and removes those records.  A put that fails
rolls its batches back; one whose process was killed is rolled back by the next
``open`` or ``gc`` in any process, so nothing half-written is ever visible and no
reference leaks.  The final transactions of puts that several threads of one
process make at the same time are committed together (one transaction and one
flush to disk for all of them, :class:`_GroupCommit`).  How durable a returned put
is depends on the engine's ``sync`` setting (see "Durability" in the README).

Expiry: an expired entry reads as unknown at once.  Its records and chunks are freed
by ``gc()``, and, in small bounded batches, by the puts that follow (one sweep a
second per store, the first a second after it opened, :data:`SWEEP_SECONDS`; a sweep
also rolls back the puts of dead processes), so a long-running process that never calls
gc() still gives back what expires.  A sweep that finds more due than one batch
(:data:`blobpad.maintenance.SWEEP_LIMIT`) leaves the next put to sweep again at once:
each put adds one entry and a sweep removes up to that many, so removal keeps up with
any rate of puts, and a backlog (the morning after a night without puts) drains.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import math
import numbers
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from . import maintenance, notes, prefilter
from .catalog import (
    FORMAT,
    NAME_FREE,
    READS_FORMATS,
    Catalog,
    counters,
    creation_order,
    due,
    get_or_damaged,
    prefetch_deletes,
    walk_sessions,
)
from .chunking import ChunkParams
from .codec import Codec
from .edit import Edit, edit, occurrences
from .engine import Checked, ReadTxn, WriteTxn, open_engine, skip_damaged
from .engine import prefix_end as _prefix_end
from .engine.base import CLOSED
from .errors import (
    HINT_EXCLUSIVE_NAME,
    HINT_UNKNOWN_NAME,
    HINT_UNOPENABLE,
    HINT_VERIFY,
    BlobpadError,
    Conflict,
    CorruptData,
    InvalidArgument,
    NotFound,
    check_bool,
    check_int,
    check_str,
    check_ttl,
    check_turn,
    describe,
)
from .index import Entry, decode_entry, name_key, name_of_key, parse_id, scope_key, session_of_scope_key, turn_tag
from .journal import recover
from .maintenance import GcReport, VerifyReport
from .put import Putter, check_meta
from .reads import ReadsMixin
from .view import Reader, ahead, not_found, records

__all__ = ["Store", "Stats", "GcReport", "VerifyReport", "open", "NAME_TRIES", "NAME_SECONDS"]

T = TypeVar("T")


_MAX_CLOCK = 253402300800.0  # 10000-01-01: a clock past it is broken
#: how many times, and for how many seconds at most, a read by name runs again when the
#: entry it found was replaced by a put of the name before it read it (Store.with_named):
#: a name written again in a loop by another thread of the process wins a few rounds in a
#: row (the interpreter switches threads every few milliseconds), seldom twenty
NAME_TRIES = 20
NAME_SECONDS = 2.0

#: a store sweeps expired entries after a put at most this often (seconds; see Store._sweep)
SWEEP_SECONDS = 1.0
#: how many entries :meth:`Store.delete_session` deletes per write transaction
SESSION_BATCH = 256
#: how long close() waits for the transactions other threads have in flight
CLOSE_WAIT = 60.0
_MAX_MAP = 1 << 46         # largest map size: 64 TiB, inside any 64-bit address space


@dataclass(frozen=True)
class Stats:
    """What ``Store.stats()`` reports.

    ``entries`` counts the live entries (those ``entries()`` lists and reads find) and
    ``logical_bytes`` is the sum of their sizes; ``expired_entries`` and
    ``expired_bytes`` count apart the expired entries that ``gc()`` (or a put that
    needs their space) has not removed yet.  ``stored_bytes`` is what the compressed,
    deduplicated chunks of both occupy (an expired entry's chunks are freed when it is
    removed); ``compression_ratio`` compares the raw bytes of the stored chunks with
    their compressed size, ``dedup_ratio`` the logical bytes of every entry held with
    the raw bytes of the distinct chunks.  ``disk_bytes`` is what the engine occupies
    (the blocks of ``data.mdb`` for LMDB, the bytes of keys and values held for the
    memory engine), ``map_size`` LMDB's current map size (0 for an engine without a
    size ceiling).  ``filter_bytes`` is what the entries' chunk filters occupy (one
    trigram filter per chunk of each entry, at most 3% of the chunk's stored size, that
    grep and count read to skip chunks: :mod:`blobpad.prefilter`), live and expired
    entries together; it is not part of ``stored_bytes``.
    """

    entries: int
    chunks: int
    logical_bytes: int
    stored_bytes: int
    unique_bytes: int
    disk_bytes: int
    map_size: int
    max_bytes: int | None
    expired_entries: int = 0
    expired_bytes: int = 0
    filter_bytes: int = 0

    @property
    def compression_ratio(self) -> float:
        return self.unique_bytes / self.stored_bytes if self.stored_bytes else 1.0

    @property
    def dedup_ratio(self) -> float:
        held = self.logical_bytes + self.expired_bytes
        return held / self.unique_bytes if self.unique_bytes else 1.0

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["compression_ratio"] = round(self.compression_ratio, 3)
        d["dedup_ratio"] = round(self.dedup_ratio, 3)
        return d


#: the formats this version reads, in words ("formats 2 and 3")
_FORMATS_READ = "formats " + ", ".join(map(str, READS_FORMATS[:-1])) + f" and {READS_FORMATS[-1]}"


def _check_settings(raw: bytes, path: str) -> dict[str, Any]:
    """Decode the settings record; anything but the expected shape is CorruptData."""
    try:
        settings = json.loads(raw)
    except ValueError:
        settings = None
    if isinstance(settings, dict) and settings.get("format") not in (None, *READS_FORMATS) and isinstance(
            settings.get("format"), int):
        if settings["format"] == 1:
            raise BlobpadError(
                f"{path} was written by an older blobpad (format 1, before records carried checksums); "
                f"this version reads {_FORMATS_READ}: read it with blobpad 0.1 and put its entries again into a new store"
            )
        raise BlobpadError(f"{path} was written by an incompatible blobpad (format {settings['format']})")
    fields = ("format", "seed", "min_size", "avg_extra", "max_size")
    if not (
        isinstance(settings, dict)
        and all(type(settings.get(f)) is int for f in fields)
        and (settings.get("max_bytes") is None or type(settings["max_bytes"]) is int)
        and settings.get("filters") in (None, True, False)
        and 0 < settings["min_size"] <= settings["max_size"] <= 1 << 30
        and 0 <= settings["avg_extra"] <= 1 << 30
    ):
        raise CorruptData(f"the settings of the store at {path} are damaged; restore the store from a backup")
    return settings


class Store(ReadsMixin):
    """A blobpad store: observations and notepads, on one storage engine.

    Open it with :func:`blobpad.open`.  A Store is a context manager and may be shared
    by the threads of a process; on the LMDB engine several processes may open the
    same path at once.

    Parameters:
        path: the store's target: a directory (the LMDB engine, created if missing)
            or a URL such as ``memory://`` (see :mod:`blobpad.engine`); default
            ``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR``, else the user data directory.
        cache_bytes: size of the LRU cache of decompressed chunks (0 turns it off).
        max_bytes: cap on the stored (compressed) bytes; when a put would exceed it,
            the entries closest to expiry are evicted first.  The cap is saved in the
            store and applies to every process; 0 removes it, None keeps the saved one.
        level: zstd compression level of new chunks.
        workers: threads used to compress and verify chunks (default: CPU count, at most 4).
        clock: function returning the current Unix time; tests inject their own.  None (the
            default): the engine's clock where it has one (a Redis store: the server's, so
            that hosts whose clocks differ agree on lifetimes), else ``time.time``.
        chunk_params: chunk sizes of a new store; an existing store keeps its own.
        filters: when the trigram filter of each chunk is built, which lets grep and count
            skip the chunks that cannot match (an absent literal on 100 MB of log: about
            3 ms instead of 200).  None, the default of a new store: by the greps and
            counts, for the chunks they read (on the worker threads, as they read them),
            and kept for the searches after them, when numpy is installed (the
            ``filters`` extra); most observations are never searched, and these pay
            nothing.  True: by every put as well (a large put on 2 cores takes about
            twice as long: the filters take more CPU than compression), so that the
            first search skips chunks too.  False: never (every search reads every
            chunk).  Saved in the store, for every process that opens it after; None keeps
            the saved choice (README, "Chunk filters").
        engine_options: options of the engine.  The LMDB engine's are ``map_size``
            (initial map, default 64 MiB; it doubles on demand), ``max_map_size``
            (ceiling of the map, default 1 TiB; past it puts raise StoreFull),
            ``max_readers`` (reader slots shared by all processes, default 1024) and
            ``sync`` (default True: see "Durability" in the README; an acknowledged
            put survives a power cut, with False only a killed process).  The memory
            engine takes none.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        cache_bytes: int = 64 << 20,
        max_bytes: int | None = None,
        level: int = 1,
        workers: int | None = None,
        clock: Callable[[], float] | None = None,
        chunk_params: ChunkParams | None = None,
        filters: bool | None = None,
        **engine_options: Any,
    ) -> None:
        check_int("cache_bytes", cache_bytes, minimum=0, maximum=_MAX_MAP)
        check_int("max_bytes", max_bytes, minimum=0, allow_none=True)
        check_int("level", level, minimum=-7, maximum=22)
        check_int("workers", workers, minimum=1, maximum=256, allow_none=True)
        if clock is not None and not callable(clock):
            raise InvalidArgument(f"clock must be a function returning Unix time, not {type(clock).__name__}")
        if filters is not None and not isinstance(filters, bool):
            raise InvalidArgument(f"filters must be True, False or None, not {describe(filters)}")
        if chunk_params is not None and not isinstance(chunk_params, ChunkParams):
            raise InvalidArgument(f"chunk_params must be a blobpad.ChunkParams, not {type(chunk_params).__name__}")
        try:
            self._backend: Checked = Checked(open_engine(path, **engine_options))
        except CorruptData as exc:
            raise _unopenable(exc) from None
        #: the store's target: the directory of an LMDB store, the URL of another
        self.path: str = self._backend.engine.target
        self._clock: Callable[[], float] = clock or getattr(self._backend.engine, "clock", None) or time.time
        self._codec = Codec(seed=0, level=level, cache_bytes=cache_bytes, workers=workers or min(4, os.cpu_count() or 1))
        self._reader = Reader(self._backend, self._codec, self.now)
        self._catalog = Catalog(self._reader, self.now)
        try:
            settings = self._backend.write(lambda txn: self._init_settings(txn, chunk_params, max_bytes, filters))
            self._codec.seed = settings["seed"]
            self.chunk_params = ChunkParams(settings["min_size"], settings["avg_extra"], settings["max_size"])
            self.max_bytes: int | None = settings.get("max_bytes") or None
            #: whether puts build chunk filters (the ``filters`` saved in the store)
            self.filters: bool = settings.get("filters") is True
            if settings.get("filters") is not False and prefilter.FAST:
                self._reader.keep_filters = self._keep_filters
            self._putter = Putter(self._backend, self._codec, self._catalog, self.chunk_params, self.now, self._cap,
                                  filters=self.filters)
            self._backend.room = self._make_room  # a write refused as full: what expired goes, then it runs again
            try:
                recover(self._backend, self.now)
            except CorruptData:
                if not self._backend.mend():  # a Redis index out of order is set right, and read again
                    raise
                recover(self._backend, self.now)
            # time.monotonic() of the next sweep after a put (see _sweep): not before a store has been open
            # for SWEEP_SECONDS, so that a short-lived process (a CLI command) only does what it was asked
            self._next_sweep = self._next_recover = time.monotonic() + SWEEP_SECONDS
        except CorruptData as exc:
            self.close()
            raise _unopenable(exc) from None
        except BaseException:
            self.close()  # a failed open holds nothing: the store can be repaired or opened again
            raise

    def _keep_filters(self, built: list[tuple[bytes, list[bytes]]]) -> None:
        """Keep the chunk filters searches built, ``(entry id, filters)`` each (the reader's
        ``keep_filters`` hook), in one write transaction.  They only make later searches
        faster: a store that cannot take them now (full, or its write failing) goes on
        without them, and the search that built them succeeds."""
        def txn_fn(txn: WriteTxn) -> None:
            if len(built) > 1:  # what keeping them reads, in one request on a networked engine
                txn.prefetch_pairs([(space, raw_id) for raw_id, _ in built for space in ("entries", "filters")])
            for raw_id, filters in built:
                self._catalog.keep_filters(txn, raw_id, filters)

        try:
            self._backend.write(txn_fn)
        except BlobpadError:
            pass
        for raw_id, _ in built:
            self._reader.forget_filters(raw_id)  # as this process last unpacked them, they are out of date

    # -- lifecycle --------------------------------------------------------------------

    def _init_settings(self, txn: WriteTxn, params: ChunkParams | None, max_bytes: int | None,
                       filters: bool | None = None) -> dict[str, Any]:
        try:
            raw = txn.get("meta", b"settings")
        except CorruptData:
            _check_settings(txn.get_unchecked("meta", b"settings") or b"", self.path)  # an older format says so
            raise CorruptData(
                f"the settings of the store at {self.path} are damaged: its chunks cannot be checked without them; "
                "restore the store from a backup"
            ) from None
        if raw is None:
            if any(True for _ in txn.scan("entries", on_damage=skip_damaged)):
                raise CorruptData(f"{self.path} holds entries but no settings: it is damaged")
            p = params or ChunkParams()
            settings = {
                "format": FORMAT,
                "seed": secrets.randbits(63),
                "min_size": p.min_size,
                "avg_extra": p.avg_extra,
                "max_size": p.max_size,
                "created_at": self.now(),
            }
        else:
            settings = _check_settings(raw, self.path)
            if settings["format"] not in READS_FORMATS:
                raise BlobpadError(
                    f"{self.path} was written by an incompatible blobpad (format {settings.get('format')}); "
                    f"this version reads {_FORMATS_READ}"
                )
            # a store of format 2 stays so until a put writes what only format 3 reads (catalog.mark_format)
        if max_bytes is not None:
            settings["max_bytes"] = max_bytes or None
        if filters is not None:
            settings["filters"] = filters
        txn.put("meta", b"settings", json.dumps(settings).encode())
        return settings

    _settings_read: tuple[bytes, int | None] = (b"", None)  # the settings record _cap last parsed, and its cap

    def _cap(self, txn: ReadTxn) -> int | None:
        """The ``max_bytes`` saved in the store now (another process may have set it)."""
        raw = txn.get("meta", b"settings")
        if raw is not None:
            seen, cap = self._settings_read
            if raw == seen:  # parsed again only when they changed
                return cap
            try:
                self.max_bytes = json.loads(raw).get("max_bytes") or None
            except (ValueError, AttributeError):
                pass  # unreadable settings: keep the cap this process opened with
            else:
                self._settings_read = (raw, self.max_bytes)
        return self.max_bytes

    def notepad(self, session: str, **options: Any) -> Any:
        """The :class:`~blobpad.notepad.Notepad` of ``session`` (options: see that class)."""
        from .notepad import Notepad

        return Notepad(self, session, **options)

    def close(self) -> None:
        """Close the store (idempotent); further calls raise BlobpadError.

        Operations other threads have inside a store transaction finish it first (close
        waits up to :data:`CLOSE_WAIT` seconds for them); their next transaction, and every
        later call, raises BlobpadError ("the store is closed").  Should a transaction
        still be open after that wait, close raises BlobpadError and leaves the engine
        open (new transactions stay refused): call it again once that thread is done.
        Inside a :meth:`snapshot` block of the calling thread (in its task, or in another task
        or generator of the thread that holds one open), close raises BlobpadError and
        leaves the store open: close it after the block ends.
        """
        backend = self._backend
        if isinstance(backend, Checked):
            backend.refuse_pinned_close()
            if not backend.drain(CLOSE_WAIT):
                raise BlobpadError(
                    f"close() waited {CLOSE_WAIT:g} s for other threads' operations, which are still inside a store "
                    "transaction; new operations are refused, and close() closes the store once they are done"
                )
        self._backend = _ClosedBackend()
        if isinstance(backend, Checked):
            backend.engine.close()
        self._codec.close()

    @property
    def engine(self) -> Checked:
        """The store's engine seen through the integrity checks (``read()``, ``write(fn)``, ``capabilities``).

        Layers built on the store (the notepad) keep their records through it; see
        :mod:`blobpad.engine.base` for the contract.
        """
        return self._backend

    @property
    def codec(self) -> Codec:
        """The store's chunk codec: how many chunks it decompressed (``codec.decompressed``),
        its worker pool, and ``codec.settle()`` to wait for read-ahead a finished read left running."""
        return self._codec

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<blobpad.Store {self.path!r}>"

    def now(self) -> float:
        """The store's clock (the ``clock`` given, else the engine's, else ``time.time``).

        Raises BlobpadError when the clock gives something that is not a Unix time
        between 1970 and the year 9999 (NaN, infinity, a negative or absurd value, not
        a number): expiry decided on such a value would be wrong.
        """
        value = self._clock()
        if type(value) is float and 0 <= value < _MAX_CLOCK:  # time.time()'s: what the checks below pass, at once
            return value
        try:
            t = float(value) if isinstance(value, numbers.Number) else math.nan  # not "1700000000"
        except (TypeError, ValueError, OverflowError):
            t = math.nan
        if isinstance(value, bool) or not 0 <= t < _MAX_CLOCK:
            raise BlobpadError(
                f"the store's clock returned {describe(value)}, which is not a Unix time between 1970 and 9999; "
                "fix the clock function given to blobpad.open(clock=...)"
            )
        return t

    # -- counters ---------------------------------------------------------------------


    # -- put --------------------------------------------------------------------------

    def put(
        self,
        data: str | bytes | bytearray | memoryview | os.PathLike[str] | IO[bytes],
        *,
        session: str | None = None,
        turn: str | int | None = None,
        ttl: float | None = 3600,
        name: str | None = None,
        step: int | None = None,
        tool: str | None = None,
        meta: dict[str, Any] | None = None,
        kind: str | None = None,
        exclusive: bool = False,
        replaces: str | None = None,
        evict_untimed: bool = True,
    ) -> Entry:
        """Store an observation and return its :class:`Entry`.

        Args:
            data: ``str`` (always stored as text, never read as a path), bytes-like,
                an ``os.PathLike`` path to read (a regular file up to the size it had
                when the put opened it: a log still being written is stored as it was
                then), or a binary file object read as a stream to its end (a 2 GB file
                is never held in memory whole).
            session: the session that owns the entry ("" when None).
            turn: the turn inside the session (str or int).
            ttl: seconds until the entry expires, counted from when the put commits, its
                ``created_at`` (a put streamed for longer than its ttl is still readable
                that long); None for never.
            name: makes a named entry: putting the same name again in the same session
                replaces the old entry.
            step, tool: where the observation came from (kept in the index).
            meta: JSON-serialisable caller metadata (a dict whose keys, at every depth, are strings).
            kind: "text" or "binary"; by default text when the content is valid UTF-8.
            exclusive: with ``name``, never replace: if the session has a live entry of
                that name when the put commits, raise Conflict and store nothing (two
                writers choosing the same new name cannot both think they have it).
            replaces: with ``name``, the id of the entry this put updates (new content
                computed from that entry's): if, when the put commits, the name does not
                name that live entry any more (another writer put the name again, or it was
                deleted or expired), raise Conflict and store nothing, so that no update
                is lost to a concurrent one.  It may also be an unnamed live entry of the
                session while the name is free: the put takes its place (that entry is
                deleted in the same commit).  The new entry keeps that entry's expiry and
                ``created_at`` (``ttl`` is not used), as :meth:`edit` does.
            evict_untimed: on a store with ``max_bytes``, whether this put may evict
                entries without a TTL to make room (as it evicts those closest to expiry
                first, they go last); False keeps them: the put raises StoreFull when
                the entries that expire do not free enough (a file store's files).

        Raises:
            InvalidArgument: a bad argument (the store is unchanged).
            StoreFull: the store cannot hold the content even after evicting, or would have to
                evict more than 10,000 entries (the most one put evicts) to hold it.
            Conflict: ``exclusive`` and the name is taken, or the name no longer names
                ``replaces`` (the store is unchanged).
        """
        check_str("session", session)
        check_str("name", name)
        check_str("tool", tool)
        if session is None:
            session = ""
        check_turn(turn)
        check_int("step", step, minimum=0, allow_none=True)
        check_ttl(ttl)
        if kind not in (None, "text", "binary"):
            raise InvalidArgument(f"kind must be 'text', 'binary' or None, not {describe(kind)}")
        if check_bool("exclusive", exclusive) and name is None:
            raise InvalidArgument("an exclusive put needs a name: it refuses to replace an entry of that name",
                                  hint=HINT_EXCLUSIVE_NAME)
        if replaces is not None:
            if name is None or exclusive:
                raise InvalidArgument("replaces names the entry a named put updates: it needs a name, and "
                                      "excludes exclusive (which needs the name free)")
            expected: bytes | None = parse_id(replaces)
        else:
            expected = NAME_FREE if exclusive else None
        entry = self._putter.put(data, kind=kind, session=session, turn=turn, ttl=ttl, name=name, step=step,
                                 tool=tool, meta=check_meta(meta), replaces=expected,
                                 evict_untimed=check_bool("evict_untimed", evict_untimed))
        self._sweep()
        return entry

    def _make_room(self) -> int:
        """Remove what has expired for a write the store refused as full (:func:`blobpad.maintenance.make_room`)."""
        return maintenance.make_room(self._backend, self._catalog, self.now())

    def _sweep(self) -> None:
        """After a put, once every :data:`SWEEP_SECONDS` per store (and not in its first
        :data:`SWEEP_SECONDS`): roll back the puts whose process died, as open does
        (:func:`blobpad.journal.recover`), and remove a few expired entries
        (:func:`blobpad.maintenance.sweep`), so that a long-running process frees what
        expires and what killed puts left even where nobody runs gc().  After a sweep
        that removed a whole batch, the next put sweeps again (not rolling back again)
        until one finds less due.  The put has
        succeeded: a sweep that fails (damage, a busy server) is left to the next one,
        and gc() reports what it cannot remove."""
        t = time.monotonic()
        if t < self._next_sweep:
            return
        self._next_sweep = t + SWEEP_SECONDS
        if t >= self._next_recover:
            self._next_recover = t + SWEEP_SECONDS
            with contextlib.suppress(BlobpadError):
                recover(self._backend, self.now)  # the batches of puts whose process died (see blobpad.journal)
            with contextlib.suppress(BlobpadError):
                self._backend.release_dead_readers()  # the snapshots of readers whose process died
        with contextlib.suppress(BlobpadError):
            if maintenance.sweep(self._backend, self._catalog, self.now()) >= maintenance.SWEEP_LIMIT:
                # more are due: the next put sweeps again, so that removal keeps up with a
                # store where more than SWEEP_LIMIT entries a second expire (each put adds one)
                self._next_sweep = t


    def edit(self, entry_id: str, old: str, new: str, *, replace_all: bool = False, evict_untimed: bool = True) -> Edit:
        """Replace ``old`` with ``new`` in a named text entry, as ``str.replace`` does, storing only
        the chunks that change; return the :class:`~blobpad.edit.Edit` (the new entry under the
        same name, and how many occurrences were replaced).

        ``old`` must occur exactly once unless ``replace_all``.  The entry keeps its name,
        session, turn, step, tool, meta, ``created_at`` and remaining TTL; its id is new.
        The entry is read twice, one block at a time, never held in memory whole (see
        :mod:`blobpad.edit`).  ``evict_untimed``: as for :meth:`put`, whether making room
        under ``max_bytes`` may evict entries without a TTL.

        Raises:
            InvalidArgument: ``old`` empty, a binary or unnamed entry, a bad argument;
                NoUniqueMatch (an InvalidArgument) when ``old`` does not occur or occurs
                several times without ``replace_all`` (its ``occurrences`` says how many).
            NotFound: no live entry ``entry_id``.
            Conflict: another writer put the same name (or deleted the entry) meanwhile.
            StoreFull: as for :meth:`put`.
            Nothing is changed when it raises.
        """
        return edit(self._reader, self._putter, entry_id, old, new, replace_all=replace_all,
                    evict_untimed=evict_untimed)

    def occurrences(self, entry_id: str, text: str) -> int:
        """How many times ``text`` occurs in a text entry, as ``str.count`` counts (no
        overlaps), read one block at a time: the count :meth:`edit` checks, without editing.

        Raises:
            InvalidArgument: ``text`` empty or not a str, or a binary entry.
            NotFound: no live entry ``entry_id``.
        """
        return occurrences(self._reader, entry_id, text)

    # -- lookup -----------------------------------------------------------------------

    def stat(self, entry_id: str) -> Entry:
        """Return the :class:`Entry` of an id; raise NotFound if unknown or expired."""
        return self._reader.stat(entry_id)

    def exists(self, entry_id: str) -> bool:
        """Whether the id names a live (unexpired) entry; malformed ids are simply absent."""
        try:
            self.stat(entry_id)
        except (NotFound, InvalidArgument):
            return False
        return True

    def find(self, name: str, *, session: str | None = None) -> Entry:
        """Return the live entry called ``name`` in ``session``; raise NotFound otherwise."""
        check_str("name", name, allow_none=False)
        check_str("session", session)
        unknown = NotFound(f"no entry named {name[:200]!r} in this session", hint=HINT_UNKNOWN_NAME)
        with self._backend.read() as txn:
            raw_id = txn.get("names", name_key(session or "", name))
            if raw_id is None:
                raise unknown
            try:
                return self._reader.load(txn, raw_id.hex())[1]
            except NotFound:
                raise unknown from None  # expired: read exactly like a name never put

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """A block whose reads, in the calling thread, all see the store as it was when it
        began (one read transaction): an entry found by name, then read with several
        calls, is the same entry throughout, whatever other writers do meanwhile.

        Every read of the store (get, slices, grep, listings, find, stats), through
        this handle or another sharing its engine (every handle of an LMDB directory,
        or of a memory:// name, in the process), takes part; blocks nest, and so do blocks
        of several stores (each store's reads see its own).  Writes (put, delete, touch,
        notepad changes, gc, compact) and verify() inside the block raise
        BlobpadError: do them after it.  The snapshot belongs to the thread (and the
        asyncio task) that entered the block: other threads, tasks started before it
        and forked children read as usual (a child forked inside a block cannot use
        an LMDB store it inherited: open the store in a new process), and a generator
        resumed after the block reads as usual too; another task or generator of the
        same thread that uses the store while the block is open gets BlobpadError (a
        thread holds one transaction at a time: do not await inside the block).
        Keep it short: on LMDB a snapshot held open keeps the pages it reads from
        being reused, and a write of this process that must grow
        the map waits for it to end (never wait inside the block for a write of
        another thread); on Redis/Valkey it is readable for ``snapshot_seconds``
        (default 300) while others write, then raises.
        """
        with self._backend.pinned():
            yield

    def with_named(self, name: str, fn: Callable[[Entry], T], *, session: str | None = None) -> T:
        """``fn(entry)`` on the live entry called ``name`` in ``session``: what it returns.

        A put of the name makes a new entry (a new id) and deletes the old one.  Should
        that happen after the name was looked up, so that ``fn``, using the old entry,
        raises NotFound, ``fn`` runs again on the entry the name names then: an update
        of an entry found by name (an edit) never takes a replaced entry for a missing
        one.  At most :data:`NAME_TRIES` runs, within :data:`NAME_SECONDS` seconds.  A
        ``fn`` that only reads is better run inside :meth:`snapshot`, where the entry
        found is never replaced under it.

        Raises:
            NotFound: no live entry is called ``name`` (or ``fn`` raised it for
                another reason: the name still names the entry it ran on).
            Conflict: the name was written again every time ``fn`` ran.
            Whatever ``fn`` raises otherwise.
        """
        if not callable(fn):
            raise InvalidArgument(f"fn must be a function of the entry, not {describe(fn)}")
        start = time.monotonic()
        entry = self.find(name, session=session)
        attempt = 1
        while True:
            try:
                return fn(entry)
            except NotFound:
                now = self.find(name, session=session)  # NotFound: the name is gone too
                if now.id == entry.id:
                    raise
                if attempt >= NAME_TRIES or time.monotonic() - start > NAME_SECONDS:
                    raise Conflict(f"the entry named {name[:200]!r} was written again {attempt} times while it was "
                                   "being read (another writer keeps writing it); try again") from None
            entry = now
            attempt += 1

    def named(self, *, session: str | None = None, prefix: str | None = None) -> list[Entry]:
        """The live named entries of ``session`` whose names start with ``prefix``, sorted by name.

        Reads the session's name index only (one record per name), never other sessions'.
        """
        check_str("session", session)
        check_str("prefix", prefix)
        here = _session_names_prefix(session or "")
        now = self.now()
        with self._backend.read() as txn:
            ids = (raw_id for key, raw_id in txn.scan("names", here, _prefix_end(here))
                   if prefix is None or name_of_key(key, len(here)).startswith(prefix))
            found = list(self._reader.live(txn, ids, now))
        return sorted(found, key=lambda e: e.name or "")

    def entries(self, *, session: str | None = None, turn: str | int | None = None, limit: int | None = None) -> list[Entry]:
        """List live entries in creation order.

        With ``session`` (and optionally ``turn``) only that session's index keys are
        read (each names its entry's turn), and the records of the entries listed;
        ``turn`` alone means the turn in the default session "".  With neither, every
        entry is listed: the sessions' indexes merged.
        """
        check_str("session", session)
        check_turn(turn)
        check_int("limit", limit, minimum=0, allow_none=True)
        out: list[Entry] = []
        if limit == 0:
            return out
        now = self.now()
        with self._backend.read() as txn:
            want = None if turn is None else turn_tag(turn)
            if session is None and turn is None:
                ids: Iterator[bytes] = creation_order(txn)
            else:
                prefix = scope_key(session or "")
                # a turn's entries by the turn their session index keys name (a store written before
                # names none: those entries are told by their records, below)
                # (a damaged index record is passed over, as in the listing of all: verify() names it)
                ids = (value[:8] for _, value in txn.scan("by_scope", prefix, _prefix_end(prefix), on_damage=skip_damaged)
                       if want is None or len(value) == 8 or value[8:] == want)
            for _, raw in records(txn, ids, 1 << 30 if limit is None else limit):
                if raw is None:
                    continue
                entry = decode_entry(raw)
                if entry is None:
                    continue  # a damaged record: verify() names it, delete() removes it
                if want is not None and turn_tag(entry.turn) != want:
                    continue
                if entry.expires_at is not None and entry.expires_at <= now:
                    continue
                out.append(entry)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def sessions(self, prefix: str | None = None) -> list[str]:
        """The sessions that have live entries (those starting with ``prefix``), in sorted order.

        Walks the session index (a page of small sessions at a time, a seek past a large
        one), never every entry, and reads the first entry record of each session (the
        next ones of a session whose first expired): on a networked engine, the first
        records of many sessions in one request.
        """
        check_str("prefix", prefix)
        now = self.now()
        found = []
        with self._backend.read() as txn:
            walked = [(name, prefix_of, rows) for prefix_of, rows in walk_sessions(txn)
                      if (name := session_of_scope_key(prefix_of)) is not None  # None: a damaged key
                      and (prefix is None or name.startswith(prefix))]
            firsts = [rows[0][1][:8] for _, _, rows in walked if rows]
            collections.deque(ahead(txn, firsts, bytes, first=len(firsts)), maxlen=0)  # asked for, a batch a request
            for name, here, rows in walked:
                ids: Iterator[bytes] = (value[:8] for _, value in (
                    rows if rows is not None else txn.scan("by_scope", here, _prefix_end(here), on_damage=skip_damaged)))
                if next(self._reader.live(txn, ids, now, first=1), None) is not None:
                    found.append(name)
        return sorted(found)

    # -- delete, gc, eviction -----------------------------------------------------------

    def touch(self, entry_id: str, ttl: float | None = 3600) -> Entry:
        """Refresh an entry's expiry: it now expires ``ttl`` seconds from now (None: never).

        Nothing else changes (its content, ``created_at``, ``updated_at``); returns the
        updated :class:`Entry`.  Raises NotFound if the entry is unknown or has expired,
        CorruptData if its record is damaged (delete it).
        """
        raw_id = parse_id(entry_id)
        check_ttl(ttl)
        expires = None if ttl is None else self.now() + ttl
        entry = self._backend.write(lambda txn: self._catalog.set_expiry(txn, raw_id, expires))
        if entry is None:
            raise not_found(entry_id)
        return entry

    def delete(self, entry_id: str) -> None:
        """Delete an entry and release its chunks; raise NotFound if it does not exist."""
        raw_id = parse_id(entry_id)

        def txn_fn(txn: WriteTxn) -> bool:
            present, raw = get_or_damaged(txn, "entries", raw_id)
            if not present:
                return False
            e = decode_entry(raw) if raw is not None else None  # None when damaged: deleting it is the advice
            if e is not None and e.expires_at is not None and e.expires_at <= self.now():
                self._catalog.delete_in(txn, raw_id)
                return False
            self._catalog.delete_in(txn, raw_id)
            return True

        if not self._backend.write(txn_fn, frees=True):
            raise not_found(entry_id)

    def delete_session(self, session: str) -> int:
        """Delete every entry of a session and its notepad; return how many entries were
        removed: the live ones, and the expired ones no sweep had removed yet (as ``gc()``
        counts what it removes; ``len(entries(session=...))`` counts the live ones only).

        The entries go :data:`SESSION_BATCH` at a time, each batch in a transaction of
        its own (each entry goes whole), so that deleting a session of a million entries
        never holds other writers back for long, nor conflicts with them for ever on an
        optimistic engine; the notepad goes with the last batch.  An entry put in the
        session while it is being deleted may stay or go."""
        check_str("session", session, allow_none=False)
        prefix = scope_key(session)
        start = prefix
        total = 0
        while True:

            def txn_fn(txn: WriteTxn, start: bytes = start) -> tuple[int, bytes | None]:
                rows = [(key, value[:8]) for key, value in
                        itertools.islice(txn.scan("by_scope", start, _prefix_end(prefix)), SESSION_BATCH)]
                deleted = 0
                prefetch_deletes(txn, [raw_id for _, raw_id in rows])
                for key, raw_id in rows:
                    if get_or_damaged(txn, "entries", raw_id)[0]:
                        self._catalog.delete_in(txn, raw_id)
                        deleted += 1
                    else:
                        txn.delete("by_scope", key)  # names no entry (verify() reports such a record)
                if len(rows) < SESSION_BATCH:
                    notes.delete_notepad(txn, session)
                    return deleted, None
                return deleted, rows[-1][0]

            n, last = self._backend.write(txn_fn, frees=True)
            total += n
            if last is None:
                return total
            start = last + b"\0"


    # -- recovery of interrupted puts ---------------------------------------------------


    # -- stats, verify, compact -------------------------------------------------------

    def gc(self) -> GcReport:
        """Remove expired entries (through the expiry index), free unreferenced chunks,
        roll back puts whose process died, and remove expired notepads; report what was freed
        (see :func:`blobpad.maintenance.gc`).  Refused inside :meth:`snapshot`, as every write is."""
        self._backend.refuse_pinned("gc()")
        self._backend.mend()  # before any scan, the journal's too (see blobpad.maintenance.gc)
        aborted = recover(self._backend, self.now)
        return maintenance.gc(self._backend, self._catalog, self.now(), aborted)

    def verify(self) -> VerifyReport:
        """Read every record of every keyspace and report what is damaged; never raises for damage
        (see :func:`blobpad.maintenance.verify`)."""
        return maintenance.verify(self._backend, self._codec)

    def stats(self) -> Stats:
        """Counts and sizes of the store (see :class:`Stats`): live and expired entries apart."""
        now = self.now()
        expired = expired_bytes = 0
        with self._backend.read() as txn:
            c = counters(txn)
            cap = self._cap(txn)
            for _, e in due(txn, now):  # the expired entries gc() has not removed yet
                if e is not None and e.expires_at is not None:
                    expired += 1
                    expired_bytes += e.size_bytes
        return Stats(
            entries=c["entries"] - expired, chunks=c["chunks"], logical_bytes=c["logical_bytes"] - expired_bytes,
            stored_bytes=c["stored_bytes"], unique_bytes=c.get("unique_bytes", 0),
            disk_bytes=self._backend.engine.size(), map_size=self._map_size(), max_bytes=cap,
            expired_entries=expired, expired_bytes=expired_bytes, filter_bytes=c.get("filter_bytes", 0),
        )

    def _map_size(self) -> int:
        """The map size of an engine with a size ceiling (LMDB), else 0."""
        engine = self._backend.engine
        return int(engine.map_size()) if engine.capabilities.size_ceiling else 0  # type: ignore[attr-defined]

    def compact(self) -> tuple[int, int]:
        """Give free pages back to the file system; return (bytes before, bytes after).

        Needs the store to be open in this process only.  Raises BlobpadError on an
        engine without compaction (``store.engine.capabilities.compaction``).  On LMDB,
        a file whose trees have a damaged page is written again from its sound pages
        (what sat on the damaged ones is left out): run verify() after it, and delete
        the entries it names.
        """
        engine = self._backend.engine
        if not engine.capabilities.compaction:
            raise BlobpadError(f"the {engine.capabilities.name} engine has nothing to compact")
        self._backend.refuse_pinned("compact()")
        return engine.compact()


class _ClosedBackend:
    """Stands in for the backend of a closed Store: every use raises."""

    path = ""

    def __getattr__(self, name: str) -> Any:
        raise BlobpadError(CLOSED)

    def close(self) -> None:
        pass


def _unopenable(exc: CorruptData) -> CorruptData:
    """Damage met while opening, with a hint that can be followed: verify needs an open store."""
    return CorruptData(exc.message, hint=HINT_UNOPENABLE) if exc.hint is HINT_VERIFY else exc


def open(target: str | os.PathLike[str] | None = None, **options: Any) -> Store:  # noqa: A001 - the public name
    """Open (creating if needed) the store ``target`` names: a directory, or a URL such as ``memory://``.

    ``target`` defaults to ``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR``, else the
    platform's user data directory (``platformdirs.user_data_dir("blobpad")``); see
    :mod:`blobpad.engine` for the URLs (``path=`` is its older name).  ``options``
    are those of :class:`Store`, the engine's own included (``map_size``, ``sync``,
    ... for LMDB).
    """
    if "path" in options:
        if target is not None:
            raise InvalidArgument("the store is given twice (target, and path, its older name): give it once")
        target = options.pop("path")
    return Store(target, **options)


def _session_names_prefix(session: str) -> bytes:
    """The prefix of every ``names`` key of ``session``."""
    return name_key(session, "")[: -4]  # name_key(session, name) = part(session) + part(name)
