"""The storage contract: what blobpad needs from an engine, and the checks every engine inherits.

An engine holds named keyspaces (:data:`SPACES`) of ordered byte keys and offers two
kinds of transaction:

* ``engine.read()``: a context manager giving a :class:`RawReadTxn`, a consistent
  snapshot (``get``, ordered ``scan``, ``count``) that never sees a later commit.  The
  local engines fix it when the transaction opens; a networked engine may fix it at its
  first read instead (a transaction that reads nothing costs no round trip), and then
  offers ``fix_snapshot()``, which :meth:`Checked.pinned` calls, so that a snapshot the
  caller pins is the state when the block began on every engine;
* ``engine.write(fn)``: runs ``fn(txn)`` in one write transaction (:class:`RawWriteTxn`
  adds ``put`` and ``delete``) and commits it.  Inside ``fn`` the transaction reads its
  own writes.  The engine may call ``fn`` more than once (LMDB does when its map had to
  grow; an optimistic engine does on a conflict), so ``fn`` touches the store only
  through ``txn`` and computes; it never waits for another thread, a lock, pool work or
  caller code.  ``write(fn, frees=True)`` marks a transaction that makes room (delete,
  gc, rollback): an engine with a size ceiling lets it through when full.

A thread holds at most one transaction of a store at a time: opening one inside another
of the same store in the same thread, through any handle of it, raises
:class:`~blobpad.BlobpadError` at once (on LMDB it would hang at the next map growth; every
engine refuses it, so code that works on one works on all).

Engines store bytes; they do not interpret them.  Integrity is checked here, above the
engines (:class:`Checked`): every value is sealed with a checksum bound to its keyspace
and key on ``put`` and checked on every read, so a flipped bit, a record moved to another
key, or a value cut short reads as :class:`~blobpad.CorruptData` on every engine, never
as other bytes.  Values longer than their keyspace's limit (:data:`VALUE_LIMITS`) are
damage too, on every engine (LMDB refuses them before they are copied).

What an engine can and cannot do is stated in its :class:`Capabilities`, never assumed
by the layers above.  The engines: :mod:`blobpad.engine.lmdb` (one machine, the
default) and :mod:`blobpad.engine.memory` (tests, short-lived runtimes).  The contract
is tested by :class:`blobpad.testing.EngineTests`, which every engine's tests subclass.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

import xxhash

from ..errors import HINT_VERIFY, BlobpadError, CorruptData, InvalidArgument, StoreFull
from ..forks import reset_in_child

__all__ = [
    "SPACES", "LATER_SPACES", "VALUE_LIMITS", "MAX_KEY", "SEAL_SIZE", "Capabilities", "RawReadTxn", "RawWriteTxn", "Engine",
    "ReadTxn", "WriteTxn", "Checked", "seal", "unseal", "damaged_length", "TxnGuard", "prefix_end", "skip_damaged",
]

T = TypeVar("T")

#: The keyspaces every engine provides.
SPACES = (
    "meta",       # settings and counters
    "entries",    # entry id -> JSON record (a small entry's followed by its packed chunk list, catalog.INLINE_CHUNKS)
    "manifests",  # entry id -> packed chunk list with cumulative offsets (of an entry of more chunks than that)
    "chunks",     # chunk key -> zstd frame
    "refs",       # chunk key -> reference count and sizes
    "by_seq",     # creation sequence + id -> id (stores written before: no put writes it now)
    "by_scope",   # session, sequence, id -> id and turn
    "expiry",     # expires_at + id -> b""
    "names",      # session, name -> id
    "digests",    # size + sha256 + id -> b"": finds an identical entry to share
    "pending",    # id + batch -> chunk keys of a put still in progress
    "notes",      # notepad heads and versions
    "filters",    # entry id -> its chunks' trigram filters, in chunk-list order (blobpad.prefilter)
)

#: Keyspaces added after stores were first written: a store opened without them gets them
#: empty (an entry without a ``filters`` record is read whole by grep and count).
LATER_SPACES = frozenset({"filters"})

#: The longest value (checksum included) a record of each keyspace can have; a longer
#: one is damage (its length field, on a file engine), refused before it is copied.
VALUE_LIMITS: dict[str, int] = {
    "meta": 1 << 20,
    "entries": 1 << 20,
    "manifests": 1 << 30,
    "chunks": 1 << 30,
    "refs": 64,
    "by_seq": 64,
    "by_scope": 320,  # an id and a turn (at most 240 bytes of UTF-8): index.scope_value
    "expiry": 64,
    "names": 64,
    "digests": 64,
    "pending": 1 << 28,
    "notes": 4 << 20,
    "filters": 1 << 30,
}
#: The longest key any engine must accept (LMDB's limit).
MAX_KEY = 511


@dataclass(frozen=True)
class Capabilities:
    """What an engine offers, stated so that nothing above it has to assume.

    Attributes:
        name: the engine's name ("lmdb", "memory").
        persistent: the data outlives the process (and ``close``).
        processes: several processes may use the same store at once.
        compaction: ``compact()`` gives unused space back.
        size_ceiling: writes can fail with StoreFull at a configured ceiling
            (LMDB's ``max_map_size``); ``write(fn, frees=True)`` passes it.
        durability: what an acknowledged write survives, in words.
    """

    name: str
    persistent: bool
    processes: bool
    compaction: bool
    size_ceiling: bool
    durability: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RawReadTxn(Protocol):
    """A consistent read-only snapshot of an engine's keyspaces (stored bytes, unchecked)."""

    def get(self, space: str, key: bytes) -> bytes | None:
        """The bytes stored under ``key`` in ``space``, or None."""
        ...

    def scan(self, space: str, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, stored)`` for ``start <= key < stop`` (no upper bound if None) in key order, or reversed."""
        ...

    def count(self, space: str) -> int | None:
        """The engine's own count of the records in ``space``, or None if it keeps none."""
        ...


class RawWriteTxn(RawReadTxn, Protocol):
    """A write transaction: reads see its own writes; its changes become visible together on commit."""

    def put(self, space: str, key: bytes, stored: bytes) -> None:
        """Store ``stored`` under ``key``, replacing any old value."""
        ...

    def delete(self, space: str, key: bytes) -> bool:
        """Remove ``key``; return whether it existed."""
        ...


class Engine(Protocol):
    """What blobpad needs from a storage engine (see the module docstring).

    An engine that keeps values outside its transactions (the Redis engine keeps a
    cluster's chunks under keys of their own) may also offer ``collect() -> int``: free
    what nothing names any more; :meth:`Checked.collect` calls it when there is one.  One that keeps
    structures beside its records it can rebuild from them (the Redis engine's sorted sets) may
    offer ``mend() -> int``: set them right; :meth:`Checked.mend` calls it, first thing in gc()."""

    #: the engine's target: a directory for LMDB, ``memory://...`` for memory
    target: str
    capabilities: Capabilities

    def read(self) -> AbstractContextManager[RawReadTxn]:
        """Open a read snapshot."""
        ...

    def write(self, fn: Callable[[RawWriteTxn], T], *, frees: bool = False) -> T:
        """Run ``fn`` in one write transaction, commit it, return its result."""
        ...

    def size(self) -> int:
        """The bytes the store occupies (on disk for LMDB, in memory for memory)."""
        ...

    def compact(self) -> tuple[int, int]:
        """Give unused space back; return (bytes before, bytes after).  Only if ``capabilities.compaction``."""
        ...

    def close(self) -> None:
        """Release one holding of the engine.  A process that opens a target it already holds
        gets the engine it has (LMDB, memory: its handles share one), and each open is released
        by one ``close()``; the engine closes when the last is, and later calls do nothing.  A
        :class:`~blobpad.Store` releases its holding once however often it is closed."""
        ...


# -- integrity at the seam ---------------------------------------------------------------

#: Bytes of the checksum that seals every stored value (see :func:`seal`).
SEAL_SIZE = 8
_SPACE_SEEDS = {name: xxhash.xxh3_64_intdigest(b"blobpad/" + name.encode()) for name in SPACES}

_SPACE_WORDS = {
    "meta": "settings",
    "entries": "entry",
    "manifests": "chunk list",
    "chunks": "chunk",
    "refs": "chunk reference",
    "by_seq": "creation index",
    "by_scope": "session index",
    "expiry": "expiry index",
    "names": "name index",
    "digests": "content index",
    "pending": "pending-put",
    "notes": "notepad",
    "filters": "chunk filter",
}


def seal(space: str, key: bytes, value: bytes) -> bytes:
    """Return ``value`` followed by its checksum, bound to the keyspace and the key."""
    return value + _checksum(space, key, value)


def _checksum(space: str, key: bytes, value: bytes | memoryview) -> bytes:
    return xxhash.xxh3_64_digest(value, seed=xxhash.xxh3_64_intdigest(key, seed=_SPACE_SEEDS[space]))


def shown_key(space: str, key: bytes) -> str:
    """A key as an error message shows it."""
    if space == "meta" and all(32 < b < 127 for b in key):
        return repr(key.decode())
    if space in ("entries", "manifests", "filters") and len(key) == 8:
        return key.hex()
    return key[:48].hex() + ("..." if len(key) > 48 else "")


def space_words(space: str) -> str:
    """What a keyspace's records are, in words."""
    return _SPACE_WORDS.get(space, space)


def unseal(space: str, key: bytes, stored: bytes) -> bytes:
    """Check a sealed value and return it without its checksum; raise CorruptData if damaged
    (a value longer than its keyspace's limit, :data:`VALUE_LIMITS`, is damage on every engine:
    no put can store one)."""
    if len(stored) > VALUE_LIMITS[space]:
        raise damaged_length(space, key, len(stored))
    if len(stored) >= SEAL_SIZE:
        value = stored[:-SEAL_SIZE]
        if _checksum(space, key, value) == stored[-SEAL_SIZE:]:
            return value
    raise CorruptData(
        f"the {space_words(space)} record {shown_key(space, key)} is damaged (checksum mismatch)", hint=HINT_VERIFY,
    )


def damaged_length(space: str, key: bytes | None, length: int) -> CorruptData:
    """The error for a key or value whose length is past what the keyspace allows."""
    if key is None:
        return CorruptData(f"a {space_words(space)} key claims {length} bytes: the store is damaged", hint=HINT_VERIFY)
    return CorruptData(
        f"the {space_words(space)} record {shown_key(space, key)} claims {length} bytes: the store is damaged",
        hint=HINT_VERIFY,
    )


#: snapshots verify() takes, at most, to find one whose pages can be walked before writers move on
_SALVAGE_ATTEMPTS = 5


def skip_damaged(key: bytes) -> None:
    """``on_damage`` of a scan that passes over damaged records: what reads past damage for a
    listing, a count or a repair use (verify() names each damaged record)."""


class ReadTxn:
    """A checked view of a :class:`RawReadTxn`: what the layers above the engine use.

    Every value read is unsealed (checked); a damaged one raises CorruptData, or in
    ``scan(..., on_damage=f)`` is passed to ``f`` by key and skipped.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: RawReadTxn) -> None:
        self._raw = raw

    def get(self, space: str, key: bytes) -> bytes | None:
        """The value under ``key`` in ``space``, or None."""
        stored = self._raw.get(space, key)
        return None if stored is None else unseal(space, key, stored)

    def get_many(self, space: str, keys: list[bytes]) -> list[bytes | None]:
        """The values under ``keys`` (None where absent), in one request on an engine that has one
        (``RawReadTxn.get_many``, optional: a networked engine), else key by key."""
        many = getattr(self._raw, "get_many", None)
        stored = many(space, keys) if many is not None else [self._raw.get(space, key) for key in keys]
        return [None if s is None else unseal(space, key, s) for key, s in zip(keys, stored, strict=True)]

    @property
    def networked(self) -> bool:
        """Whether reads cost a round trip, so that asking for keys ahead pays (``prefetch``)."""
        return hasattr(self._raw, "prefetch_pairs")

    def prefetch(self, space: str, keys: list[bytes]) -> None:
        """Ask a networked engine for ``keys`` in one request (see :meth:`prefetch_pairs`)."""
        if self.networked:
            self._raw.prefetch_pairs([(space, k) for k in keys])  # type: ignore[attr-defined]

    def prefetch_pairs(self, pairs: list[tuple[str, bytes]], *, bodies: bool = True) -> None:
        """Ask a networked engine for ``(keyspace, key)`` pairs in one request (the raw transaction's
        optional ``prefetch_pairs``), so that the ``get`` of each that follows in this transaction
        costs no round trip; a no-op on the local engines.  ``bodies`` false: an engine that
        keeps chunks apart from the catalog (a cluster) fetches what stands for each, not its
        bytes (enough for a delete)."""
        if self.networked:
            self._raw.prefetch_pairs(pairs, bodies=bodies)  # type: ignore[attr-defined]

    def get_unchecked(self, space: str, key: bytes) -> bytes | None:
        """The stored bytes, checksum included and unchecked (format detection only)."""
        return self._raw.get(space, key)

    def recorded_count(self, space: str) -> int | None:
        """The engine's own count of the records in ``space`` (verify() compares it with a scan)."""
        return self._raw.count(space)

    def scan(
        self,
        space: str,
        start: bytes = b"",
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        on_damage: Callable[[bytes], None] | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` for ``start <= key < stop`` in key order (or reversed)."""
        for key, stored in self._raw.scan(space, start, stop, reverse):
            try:
                value = unseal(space, key, stored)
            except CorruptData:
                if on_damage is None:
                    raise
                on_damage(key)
                continue
            yield key, value


class WriteTxn(ReadTxn):
    """A checked view of a :class:`RawWriteTxn`: values are sealed on ``put``."""

    __slots__ = ()
    _raw: RawWriteTxn

    def put(self, space: str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key`` in ``space``, replacing any old value."""
        if not 0 < len(key) <= MAX_KEY:
            raise BlobpadError(f"internal error: a {space_words(space)} key of {len(key)} bytes")
        if len(value) + SEAL_SIZE > VALUE_LIMITS[space]:  # a read would take it for damage
            raise InvalidArgument(
                f"a {space_words(space)} record of {len(value)} bytes is over the store's limit of "
                f"{VALUE_LIMITS[space] - SEAL_SIZE} bytes"
            )
        self._raw.put(space, key, seal(space, key, value))

    def delete(self, space: str, key: bytes) -> bool:
        """Remove ``key`` from ``space``; return whether it existed."""
        return self._raw.delete(space, key)

    def hold_chunks(self) -> None:
        """The chunks this transaction writes belong to a put still in progress: an engine that
        gives chunks lifetimes of their own (a cluster's chunk keys) leaves them leased, so that
        a client killed before the put's last commit leaves only chunks that expire (the raw
        transaction's optional ``hold_chunks``; nothing to do elsewhere)."""
        hold = getattr(self._raw, "hold_chunks", None)
        if hold is not None:
            hold()

    def keep_chunks(self, keys: list[bytes]) -> None:
        """The chunks ``keys`` (keys of the ``chunks`` keyspace) are an entry's that this
        transaction commits: an engine that held some leased (:meth:`hold_chunks`) makes them
        permanent with it (the raw transaction's optional ``keep_chunks``)."""
        keep = getattr(self._raw, "keep_chunks", None)
        if keep is not None:
            keep(keys)


#: what a transaction asked of a store that is closing, or closed, is told
CLOSED = "the store is closed; open it again with blobpad.open()"


class _Gate:
    """The transactions of one :class:`Checked` in flight, so that closing can wait for them.

    Closing an engine under a transaction of another thread pulls the data from under
    it: LMDB aborts it and unmaps the file (its reads fail, a view into the map would
    fault), the memory engine drops its keyspaces (its reads found chunks "missing",
    reported as damage).  So :meth:`Checked.drain` refuses new transactions, then waits
    for those in flight to end.
    """

    __slots__ = ("_lock", "_cond", "_open", "_closing", "_mine", "__weakref__")

    def __init__(self) -> None:
        self._setup()
        self._closing = False
        reset_in_child(self)

    def _setup(self) -> None:
        self._lock = threading.Lock()  # a leaf lock: held around the counter only
        self._cond = threading.Condition(self._lock)  # what drain() waits on
        self._open = 0
        self._mine = threading.local()  # .n: the transactions the calling thread has open

    def _after_fork(self) -> None:
        # only the forking thread lives on: the others' transactions are not the child's, and a
        # thread of the parent may have held the lock at the fork
        self._setup()

    def enter(self) -> None:
        with self._lock:
            if self._closing:
                raise BlobpadError(CLOSED)
            self._open += 1
        mine = self._mine
        mine.n = getattr(mine, "n", 0) + 1

    def leave(self) -> None:
        self._mine.n -= 1
        with self._lock:
            self._open -= 1
            if self._closing:
                self._cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Refuse new transactions; wait up to ``timeout`` seconds until only the calling
        thread's own (if any) are open.  Return whether they ended in time."""
        own = getattr(self._mine, "n", 0)
        with self._cond:
            self._closing = True
            return self._cond.wait_for(lambda: self._open <= own, timeout)


class Checked:
    """An engine seen through the integrity checks: ``read()`` and ``write(fn)`` give checked txns.

    ``room``: what the store does when a write is refused as full (a Redis server at its
    ``maxmemory``, LMDB at ``max_map_size``): remove what has expired and return how much
    went (the store sets :func:`blobpad.maintenance.make_room`); the write then runs once
    more.  Every write of the store goes through here, puts and notepads alike, so none
    is refused while expired records hold the room it needs."""

    __slots__ = ("engine", "_gate", "room")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._gate = _Gate()
        self.room: Callable[[], int] | None = None

    @property
    def capabilities(self) -> Capabilities:
        return self.engine.capabilities

    def read(self) -> AbstractContextManager[ReadTxn]:
        """A checked read snapshot (a context manager giving a :class:`ReadTxn`): the
        one pinned here inside :meth:`pinned`, else a new one."""
        pin = _pin_of(self.engine)
        if pin is not None:
            return _Held(pin.txn)
        _settle_pins(self.engine)
        return _CheckedRead(self.engine, self._gate)

    def pinned_here(self) -> bool:
        """Whether the caller is inside :meth:`pinned` of this engine (where writes are refused)."""
        return _pin_of(self.engine) is not None

    @contextmanager
    def pinned(self) -> Iterator[ReadTxn]:
        """One read snapshot that every :meth:`read` of the caller gives inside the block
        (through any :class:`Checked` of the same engine: every handle of an LMDB
        directory), so that several reads see one state of the store; a block inside
        another shares the outer one's.

        The pin belongs to the thread and the asyncio task (a context variable) that
        entered the block, in this process: another thread reads as usual, and so does
        a forked child.  As a thread holds one transaction at a time, another task or
        generator of the same thread that uses the store meanwhile gets a clear
        BlobpadError.  The transaction is closed by the thread that opened it: a block
        left in another thread (a generator resumed elsewhere) leaves it to its own
        thread's next call of the store.  A write inside raises BlobpadError, so does
        :meth:`read_salvaged`."""
        pin = _pin_of(self.engine)
        if pin is not None:
            yield pin.txn
            return
        _settle_pins(self.engine)
        cm = _CheckedRead(self.engine, self._gate)
        mine = _Pin(self.engine, cm.__enter__(), cm)
        fix = getattr(mine.txn._raw, "fix_snapshot", None)
        if fix is not None:  # an engine that fixes its snapshot at the first read: the block's start is the state
            try:
                fix()
            except BaseException:
                mine.close()
                raise
        key = (id(store_of(self.engine)), mine.thread)
        _OPEN_PINS[key] = mine
        token = _PIN.set((*_PIN.get(), mine))
        try:
            yield mine.txn
        finally:
            mine.open = False
            with suppress(ValueError):  # left in another context (a generator closed elsewhere)
                _PIN.reset(token)
            if mine.pid == os.getpid() and mine.thread == threading.get_ident():
                _OPEN_PINS.pop(key, None)
                mine.close()
            # else: a forked child never closes its parent's transaction; another thread
            # leaves it to the thread that opened it (_settle_pins)

    def refuse_pinned_close(self) -> None:
        """BlobpadError if the calling thread holds a snapshot of this store (:meth:`pinned`), in its
        own context or another task's or generator's: closing would end the transaction under it
        (its reads met an emptied store, or the engine's own failure)."""
        if self.pinned_here():
            raise BlobpadError("close() inside a snapshot (Store.snapshot()) of the store: close it after the "
                               "block ends")
        _settle_pins(self.engine)

    def refuse_pinned(self, what: str) -> None:
        """BlobpadError if the caller is inside :meth:`pinned` (``what``: the refused call, as the error says it)."""
        if self.pinned_here():
            raise BlobpadError(f"{what} inside a snapshot (Store.snapshot()): it would not see the store as it is "
                               "now; do it after the block ends")

    @contextmanager
    def read_salvaged(self) -> Iterator[tuple[ReadTxn, list[str]]]:
        """A checked read snapshot for verify(), and the damage found before it was read.

        An engine that can check its own structure first (``salvage(raw) -> (raw, problems)``,
        optional: LMDB walks its B-trees in Python) answers what sits on damaged pages from
        the sound ones instead of letting its library walk them; the others read as usual."""
        self.refuse_pinned("verify()")
        salvage = getattr(self.engine, "salvage", None)
        for attempt in range(_SALVAGE_ATTEMPTS):
            with self.read() as txn:
                found = None if salvage is None else salvage(txn._raw)
                if found is None and salvage is not None and attempt < _SALVAGE_ATTEMPTS - 1:
                    continue  # writers moved on while the pages were walked: walk a newer snapshot
                if found is None:  # no engine check, or writers never let one finish: read as usual
                    yield txn, []
                    return
                raw, problems = found
                yield (txn if raw is txn._raw else ReadTxn(raw)), problems
                return

    def write(self, fn: Callable[[WriteTxn], T], *, frees: bool = False) -> T:
        """Run ``fn`` on a checked write transaction and commit; when the store is full, once more
        after ``room()`` freed something (not for a write that frees: it is let through)."""
        self.refuse_pinned("a write")
        _settle_pins(self.engine)
        gate = self._gate
        gate.enter()
        try:
            try:
                return self.engine.write(lambda raw: fn(WriteTxn(raw)), frees=frees)
            except StoreFull:
                if frees or self.room is None or not self.room():
                    raise
                return self.engine.write(lambda raw: fn(WriteTxn(raw)), frees=frees)
        finally:
            gate.leave()

    def collect(self) -> int:
        """Free what the engine keeps outside its transactions that nothing names any more (an engine
        that keeps nothing there has no ``collect``: 0); ``gc()`` calls it.  Return how many it freed."""
        collect = getattr(self.engine, "collect", None)
        return int(collect()) if collect is not None else 0

    def mend(self) -> int:
        """Set right what an engine keeps beside its records and can rebuild from them (the Redis
        engine: the order of its keyspaces' sorted sets), before ``gc()`` scans anything; an engine
        with nothing of the kind has no ``mend``: 0.  Return how many things it set right."""
        mend = getattr(self.engine, "mend", None)
        return int(mend()) if mend is not None else 0

    def release_dead_readers(self) -> int:
        """Free what readers that died inside a transaction still hold (an engine whose readers
        hold nothing past their process has no ``release_dead_readers``: 0); ``gc()`` and the
        sweep after puts call it.  Return how many readers it released."""
        release = getattr(self.engine, "release_dead_readers", None)
        return int(release()) if release is not None else 0

    def drain(self, timeout: float) -> bool:
        """Refuse new transactions (they raise BlobpadError: the store is closed) and wait up
        to ``timeout`` seconds for those other threads have in flight to end; return
        whether they did.  The store calls it before it closes the engine."""
        return self._gate.drain(timeout)


class _CheckedRead:
    """The context manager of ``Checked.read()``: the engine's, with its transaction wrapped and
    counted in flight (a class, not a generator: it is on every read's path)."""

    __slots__ = ("_engine", "_gate", "_cm")

    def __init__(self, engine: Engine, gate: _Gate) -> None:
        self._engine = engine
        self._gate = gate

    def __enter__(self) -> ReadTxn:
        self._gate.enter()
        try:
            self._cm = self._engine.read()
            return ReadTxn(self._cm.__enter__())
        except BaseException:
            self._gate.leave()
            raise

    def __exit__(self, *exc: Any) -> bool | None:
        try:
            return self._cm.__exit__(*exc)
        finally:
            self._gate.leave()


def store_of(engine: Engine) -> object:
    """What stands for the store ``engine`` opens in this process: the engine itself, or the
    ``store`` object an engine whose handles of one store are separate objects shares among
    them (the Redis engine: the store's transaction guard).  A snapshot pinned through one
    handle is the pin of every handle of its store, as on the local engines, whose handles
    share one engine."""
    return getattr(engine, "store", engine)


class _Pin:
    """A snapshot pinned by :meth:`Checked.pinned`: its engine, transaction, thread and process."""

    __slots__ = ("engine", "txn", "cm", "thread", "pid", "open")

    def __init__(self, engine: Engine, txn: ReadTxn, cm: _CheckedRead) -> None:
        self.engine, self.txn, self.cm = engine, txn, cm
        self.thread, self.pid = threading.get_ident(), os.getpid()
        self.open = True

    def here(self, engine: Engine) -> bool:
        """Whether a read of ``engine`` by the caller takes this pin's transaction."""
        return (self.open and store_of(self.engine) is store_of(engine) and self.thread == threading.get_ident()
                and self.pid == os.getpid())

    def close(self) -> None:
        """End the transaction (in the thread that opened it)."""
        self.cm.__exit__(None, None, None)


#: the snapshots the caller pinned (Checked.pinned), one a store: blocks of several stores nest
_PIN: ContextVar[tuple[_Pin, ...]] = ContextVar("blobpad_pinned_snapshots", default=())


def _pin_of(engine: Engine) -> _Pin | None:
    """The snapshot the caller pinned of ``engine``'s store, if any."""
    for pin in _PIN.get():
        if pin.here(engine):
            return pin
    return None
#: the pins not closed yet, by (id of their engine, thread)
_OPEN_PINS: dict[tuple[int, int], _Pin] = {}


def _keep_inherited_pins() -> None:
    """In a forked child: never end a transaction the parent pinned.  Ending it (a block
    unwound by the child's exit, or its objects freed at the child's end) would, on LMDB,
    free the reader slot the parent's snapshot holds in the shared lock file, and the
    parent's writers would reuse the pages it reads.  So the child keeps one reference to
    each for good (the process ends without freeing them) and forgets them."""
    import ctypes

    for key, pin in list(_OPEN_PINS.items()):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(pin))
        del _OPEN_PINS[key]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_keep_inherited_pins)


def _settle_pins(engine: Engine) -> None:
    """Before the calling thread opens a transaction on ``engine`` outside a pin of its
    context: close the pin of this thread a block left in another thread; refuse, with
    the reason, while a pin of this thread is open in another context (another asyncio
    task or generator): a thread holds one transaction at a time."""
    key = (id(store_of(engine)), threading.get_ident())
    pin = _OPEN_PINS.get(key)
    if pin is None:
        return
    if pin.pid != os.getpid() or store_of(pin.engine) is not store_of(engine):  # a parent's (fork); a stale id
        _OPEN_PINS.pop(key, None)
        return
    if not pin.open:
        _OPEN_PINS.pop(key, None)
        pin.close()
        return
    raise BlobpadError(
        "this thread holds a snapshot of the store (Store.snapshot()) for another asyncio task or generator, and a "
        "thread holds one store transaction at a time: use the store inside that block, or after it ends (do not "
        "await or yield inside a snapshot while other code of the thread uses the store)"
    )


class _Held:
    """The context manager :meth:`Checked.read` gives inside :meth:`Checked.pinned`: the
    pinned transaction, left open at the end of the block (the pin's own closes it)."""

    __slots__ = ("_txn",)

    def __init__(self, txn: ReadTxn) -> None:
        self._txn = txn

    def __enter__(self) -> ReadTxn:
        return self._txn

    def __exit__(self, *exc: Any) -> None:
        return None


#: what a transaction opened inside another one in the same thread raises (every engine)
NESTED = ("a store transaction was opened inside another one in the same thread (which would hang at the next map "
          "growth): a function the store calls inside its own transaction, such as matching_lines' on_lines, used "
          "the store; use it after that call returns (with no such function, this is a blobpad bug: please report it)")


class TxnGuard:
    """Refuses a transaction opened inside another in the same thread (see the module docstring)."""

    def __init__(self) -> None:
        self._mine = threading.local()

    def held(self) -> bool:
        """Whether the calling thread has a transaction open (in this process: a child
        forked inside one holds none of its own)."""
        return getattr(self._mine, "held", 0) == os.getpid()

    def enter(self) -> None:
        if self.held():
            raise BlobpadError(NESTED)
        self._mine.held = os.getpid()

    def leave(self) -> None:
        self._mine.held = 0

    def __enter__(self) -> None:
        """``with guard:`` holds the calling thread's transaction for the block (:meth:`enter`, :meth:`leave`)."""
        self.enter()

    def __exit__(self, *exc: object) -> None:
        self.leave()


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return None
