"""The in-memory engine: for tests and short-lived runtimes.

It keeps every keyspace as a sorted list of keys and a dict of values, in this
process only; the data is gone when the last store using it closes.  It has the
semantics of the LMDB engine:

* one writer at a time (``write(fn)``: ``fn`` runs on a private overlay that reads its
  own writes; the overlay is applied at commit in one step, or dropped if ``fn``
  raises, so a failed write leaves nothing visible);
* readers see a snapshot taken when ``read()`` opens and never wait for the writer,
  nor make it wait: a commit that changes a key while a reader is open keeps the old
  value in an undo log that the reader consults (multi-version concurrency, like
  LMDB's), and the log is dropped once no reader needs it;
* one transaction per thread at a time (a nested one raises BlobpadError);
* stores opened with the same ``memory://name`` in one process share one engine; a
  bare ``memory://`` is a new private one;
* a forked child may read the stores it inherited (its copy of the parent's memory as it
  was at the fork) but not write to them: those writes would be lost to the parent
  without a word; ``memory://name`` opened in the child is a store of its own.

There is no size ceiling: a store's ``max_bytes`` cap works as on LMDB.  Nothing is
written to disk, so nothing survives the process.
"""

from __future__ import annotations

import os
import threading
import weakref
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import BlobpadError, InvalidArgument
from .base import MAX_KEY, SPACES, Capabilities, RawReadTxn, RawWriteTxn, TxnGuard

__all__ = ["MemoryEngine", "acquire_memory"]

T = TypeVar("T")

_GONE: Any = object()  # a deleted key (a tombstone while readers may still see it), or an absent old value
_BATCH = 256  # keys a scan resolves per hold of the lock
_TRIM_AT = 4096  # undo records kept before those no reader needs are dropped

CAPABILITIES = Capabilities(
    name="memory", persistent=False, processes=False, compaction=False, size_ceiling=False,
    durability="none: the data lives in this process's memory and is gone when the last store using it "
               "closes or the process ends",
)


class _Space:
    __slots__ = ("keys", "values", "tombstones")

    def __init__(self) -> None:
        self.keys: list[bytes] = []           # sorted; includes tombstoned keys
        self.values: dict[bytes, Any] = {}    # key -> bytes, or _GONE (a tombstone)
        self.tombstones: set[bytes] = set()


class MemoryEngine:
    """The in-memory engine (see the module docstring).  Open it with :func:`acquire_memory`."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.capabilities = CAPABILITIES
        self._spaces = {name: _Space() for name in SPACES}
        self._lock = threading.Lock()        # guards every structure below; held only briefly
        self._writer = threading.Lock()      # one write transaction at a time
        self._guard = TxnGuard()
        self._version = 0
        self._readers: dict[int, int] = {}   # snapshot version -> open readers
        # (space, key) -> [(version that changed it, value before that change)], oldest first
        self._undo: dict[tuple[str, bytes], list[tuple[int, Any]]] = {}
        self._bytes = 0
        self._holders = 0
        self._closed = False
        self._pid = os.getpid()  # the process whose memory holds the store (a forked child holds a copy)
        _ENGINES.add(self)

    # -- reading ------------------------------------------------------------------

    def _resolve(self, space: str, key: bytes, version: int) -> bytes | None:
        """The value of ``key`` as of ``version`` (called holding ``_lock``)."""
        changes = self._undo.get((space, key))
        if changes:
            for changed_at, old in changes:
                if changed_at > version:
                    return None if old is _GONE else old
        value = self._spaces[space].values.get(key, _GONE)
        return None if value is _GONE else value

    @contextmanager
    def read(self) -> Iterator[RawReadTxn]:
        """A snapshot of the committed state."""
        self._check_open()
        with self._guard:
            with self._lock:
                version = self._version
                self._readers[version] = self._readers.get(version, 0) + 1
            try:
                yield _Snapshot(self, version)
            finally:
                with self._lock:
                    left = self._readers[version] - 1
                    if left:
                        self._readers[version] = left
                    else:
                        del self._readers[version]
                if not self._readers and self._writer.acquire(blocking=False):
                    try:
                        self._forget_history()
                    finally:
                        self._writer.release()

    # -- writing ------------------------------------------------------------------

    def write(self, fn: Callable[[RawWriteTxn], T], *, frees: bool = False) -> T:
        """Run ``fn`` on an overlay of the committed state and apply it in one step.

        A forked child's writes are refused (BlobpadError): they would change its copy of
        the parent's memory only, and be lost to the parent without a word."""
        self._check_open()
        if self._pid != os.getpid():
            raise BlobpadError(
                f"the store {self.target} lives in the memory of the process that opened it (pid {self._pid}); this "
                "forked child holds a copy that no other process sees, so it may read it but not write to it: open a "
                "store of its own (memory://), or share one between processes on an LMDB directory or Redis"
            )
        with self._guard, self._writer:
            txn = _Overlay(self)
            result = fn(txn)
            self._commit(txn.changes)
            return result

    def _commit(self, changes: dict[tuple[str, bytes], Any]) -> None:
        if not changes:
            return
        with self._lock:
            version = self._version + 1
            keep = bool(self._readers)  # a reader may still need the old values
            for (space_name, key), value in changes.items():
                space = self._spaces[space_name]
                old = space.values.get(key, _GONE)
                if keep:
                    self._undo.setdefault((space_name, key), []).append((version, old))
                if old is not _GONE:
                    self._bytes -= len(key) + len(old)
                if value is _GONE:
                    if old is _GONE:
                        continue
                    if keep:
                        space.values[key] = _GONE
                        space.tombstones.add(key)
                    else:
                        del space.values[key]
                        del space.keys[bisect_left(space.keys, key)]
                else:
                    if key not in space.values:
                        insort(space.keys, key)
                    space.values[key] = value
                    space.tombstones.discard(key)
                    self._bytes += len(key) + len(value)
            self._version = version
            if not keep:
                self._forget_history_locked()
            elif len(self._undo) > _TRIM_AT:
                self._trim_history_locked()

    def _forget_history(self) -> None:
        """Drop the undo log and tombstones once no reader is open (called holding ``_writer``)."""
        with self._lock:
            if not self._readers:
                self._forget_history_locked()

    def _trim_history_locked(self) -> None:
        """Drop the changes no open reader can need (each needs only those after its snapshot)."""
        oldest = min(self._readers)
        for ident in list(self._undo):
            kept = [c for c in self._undo[ident] if c[0] > oldest]
            if kept:
                self._undo[ident] = kept
            else:
                del self._undo[ident]

    def _forget_history_locked(self) -> None:
        self._undo.clear()
        for space in self._spaces.values():
            if space.tombstones:
                for key in space.tombstones:
                    del space.values[key]
                space.keys = [k for k in space.keys if k not in space.tombstones]
                space.tombstones.clear()

    # -- the rest of the contract -----------------------------------------------------

    def size(self) -> int:
        """The bytes of the keys and values held."""
        return self._bytes

    def compact(self) -> tuple[int, int]:
        raise BlobpadError("the memory engine has nothing to compact (capabilities.compaction is False)")

    def _check_open(self) -> None:
        if self._closed:
            raise BlobpadError(f"the store {self.target} is closed")

    def close(self) -> None:
        """Release one holder; the data is dropped when the last one lets go."""
        with _REGISTRY_LOCK:
            if self._closed:
                return
            self._holders -= 1
            if self._holders > 0:
                return
            self._closed = True
            if _REGISTRY.get(self.target) is self:
                del _REGISTRY[self.target]
        with self._lock:
            self._spaces = {name: _Space() for name in SPACES}
            self._undo.clear()
            self._bytes = 0

    def _after_fork(self) -> None:
        # Only the forking thread exists in the child: locks another thread held stay held.
        self._lock = threading.Lock()
        self._writer = threading.Lock()
        self._readers.clear()
        self._forget_history_locked()


class _Snapshot:
    """A read transaction: the committed state as of one version."""

    __slots__ = ("_engine", "_version")

    def __init__(self, engine: MemoryEngine, version: int) -> None:
        self._engine = engine
        self._version = version

    def get(self, space: str, key: bytes) -> bytes | None:
        with self._engine._lock:
            return self._engine._resolve(space, key, self._version)

    def count(self, space: str) -> int | None:
        return sum(1 for _ in self.scan(space, b"", None, False))

    def scan(self, space: str, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        engine = self._engine
        lo, hi = start, stop  # the range still to visit: lo <= key < hi (hi None: no bound)
        while True:
            batch: list[tuple[bytes, bytes]] = []
            with engine._lock:
                keys = engine._spaces[space].keys
                i = bisect_left(keys, lo)
                j = len(keys) if hi is None else bisect_left(keys, hi)
                window = keys[max(i, j - _BATCH):j] if reverse else keys[i:min(j, i + _BATCH)]
                for key in reversed(window) if reverse else window:
                    value = engine._resolve(space, key, self._version)
                    if value is not None:
                        batch.append((key, value))
            yield from batch
            if len(window) < _BATCH:
                return
            if reverse:
                hi = window[0]
            else:
                lo = window[-1] + b"\x00"


class _Overlay:
    """A write transaction: changes kept aside, reads see them first."""

    __slots__ = ("_engine", "changes")

    def __init__(self, engine: MemoryEngine) -> None:
        self._engine = engine
        self.changes: dict[tuple[str, bytes], Any] = {}

    def get(self, space: str, key: bytes) -> bytes | None:
        value = self.changes.get((space, key), None)
        if value is None:
            value = self._engine._spaces[space].values.get(key, _GONE)  # stable: this is the only writer
        return None if value is _GONE else value

    def count(self, space: str) -> int | None:
        return sum(1 for _ in self.scan(space, b"", None, False))

    def scan(self, space: str, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        # The keys present when the scan starts, committed and written here, in order;
        # each value is looked up when it is yielded, so a key deleted meanwhile is skipped.
        keys = self._engine._spaces[space].keys
        i = bisect_left(keys, start)
        j = len(keys) if stop is None else bisect_left(keys, stop)
        mine = sorted(k for (s, k) in self.changes if s == space and start <= k and (stop is None or k < stop))
        merged = _merge(keys[i:j], mine)
        for key in reversed(merged) if reverse else merged:
            value = self.get(space, key)
            if value is not None:
                yield key, value

    def put(self, space: str, key: bytes, stored: bytes) -> None:
        if space not in SPACES or not isinstance(stored, bytes) or not 0 < len(key) <= MAX_KEY:
            raise BlobpadError(f"internal error: a bad put in the {space!r} keyspace")
        self.changes[(space, bytes(key))] = stored

    def delete(self, space: str, key: bytes) -> bool:
        existed = self.get(space, key) is not None
        self.changes[(space, bytes(key))] = _GONE
        return existed


def _merge(a: list[bytes], b: list[bytes]) -> list[bytes]:
    """The sorted union of two sorted lists of keys."""
    return sorted(set(a).union(b)) if b else a


_REGISTRY: dict[str, MemoryEngine] = {}
#: the longest name of a memory store
_NAME_MAX = 200
_REGISTRY_LOCK = threading.RLock()  # re-entrant: a close run by the GC inside an open must not deadlock
_ENGINES: weakref.WeakSet[MemoryEngine] = weakref.WeakSet()


def acquire_memory(target: str, **options: Any) -> MemoryEngine:
    """The memory engine of ``target``: ``memory://name`` is shared in this process while open, ``memory://`` is new.

    The memory engine takes no options; any is refused with InvalidArgument.
    """
    if options:
        name = str(sorted(options, key=str)[0])
        raise InvalidArgument(f"unknown option {name[:80]!r}; the memory engine ({target}) takes none")
    name = target[len("memory://"):]
    if (any(c in name for c in "/?#") or not name.isprintable() or any(c.isspace() for c in name)
            or len(name) > _NAME_MAX):
        raise InvalidArgument(
            f"{target[:_NAME_MAX + 20]!r} is not a memory store: use memory:// or memory://NAME, a NAME of 1 to "
            f"{_NAME_MAX} printable characters without white space, '/', '?' or '#'"
        )
    with _REGISTRY_LOCK:
        if not name:
            # its target is what opens another one like it: ``memory://`` names no store to share
            engine = MemoryEngine("memory://")
            engine._holders = 1
            return engine
        engine = _REGISTRY.get(target)
        if engine is None or engine._closed:
            engine = _REGISTRY[target] = MemoryEngine(target)
        engine._holders += 1
        return engine


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.RLock()
    for engine in list(_ENGINES):
        engine._after_fork()
    # memory://NAME names a store of one process: a child that opens the name gets its own, and the
    # stores it inherited stay the parent's (readable copies, see MemoryEngine.write)
    _REGISTRY.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
