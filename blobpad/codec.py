"""Chunk bytes in and out: zstd contexts, the worker pool, verified decompression and the chunk cache.

Every chunk read goes through :meth:`Codec.decompress`, which checks the frame
decompresses to exactly the chunk's length and that its seeded xxh3-128 matches the
chunk's key (content addressing doubles as the integrity check).  Decompressed chunks
are kept in a byte-bounded LRU keyed by the chunk key and a hash of the stored frame,
so a frame replaced under the same key is never served from a stale copy.

The worker pool is shared by puts, count() and grep; its tasks only compute on bytes
read beforehand (the rules are in :mod:`blobpad.engine.lmdb`, "Locking rules").
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import xxhash
import zstandard

from .engine import ReadTxn
from .engine.base import CLOSED
from .errors import HINT_VERIFY, BlobpadError, CorruptData
from .forks import reset_in_child

__all__ = ["ChunkCache", "Contexts", "Codec"]

_T = TypeVar("_T")


class ChunkCache:
    """A thread-safe LRU of decompressed chunks, bounded in bytes (0 disables it)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[bytes, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: bytes) -> bytes | None:
        if not self.capacity:
            return None
        with self._lock:
            raw = self._items.get(key)
            if raw is not None:
                self._items.move_to_end(key)
            return raw

    def put(self, key: bytes, raw: bytes) -> None:
        if not self.capacity or len(raw) > self.capacity:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = raw
            self._size += len(raw)
            while self._size > self.capacity:
                _, old = self._items.popitem(last=False)
                self._size -= len(old)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._items = OrderedDict()
        self._size = 0


class Contexts(threading.local):
    """Per-thread zstd contexts (they are not thread-safe, and are costly to create)."""

    def __init__(self, level: int) -> None:
        self.compressor = zstandard.ZstdCompressor(level=level, write_content_size=True)
        self.decompressor = zstandard.ZstdDecompressor()


class Codec:
    """One store's chunk codec: contexts, pool, verification and cache.

    Parameters:
        seed: the store's chunk-hash seed (from its settings).
        level: zstd level of new chunks.
        cache_bytes: size of the LRU of decompressed chunks (0 turns it off).
        workers: threads of the worker pool.
    """

    def __init__(self, *, seed: int, level: int, cache_bytes: int, workers: int) -> None:
        self.seed = seed
        self.level = level
        self.workers = workers
        self.contexts = Contexts(level)
        self.cache = ChunkCache(cache_bytes)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1
        self._pool_lock = threading.Lock()
        self._closed = False
        self._decompressed = 0
        self._count_lock = threading.Lock()
        reset_in_child(self)

    @property
    def decompressed(self) -> int:
        """How many chunks this store has decompressed since it was opened (what reads cost)."""
        return self._decompressed

    # -- the worker pool --------------------------------------------------------------

    def _executor(self) -> ThreadPoolExecutor:
        """The worker pool (created on first use, per process; see the module docstring)."""
        with self._pool_lock:
            if self._closed:
                raise BlobpadError(CLOSED)
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="blobpad")
                self._pool_pid = os.getpid()
            return self._pool

    def settle(self) -> None:
        """Wait for the work queued on the pool (read-ahead a finished read left running)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.shutdown(wait=True)

    def submit(self, fn: Callable[..., _T], /, *args: Any) -> Future[_T]:
        """``fn(*args)`` on the worker pool; BlobpadError once the store is closed (a put that
        was between two transactions when it closed learns so here)."""
        try:
            return self._executor().submit(fn, *args)
        except RuntimeError:  # the pool shut down since this thread fetched it
            if self._closed:
                raise BlobpadError(CLOSED) from None
            raise

    def close(self) -> None:
        """Stop the pool and drop the cache; the pool is not started again."""
        with self._pool_lock:
            self._closed = True
        self.settle()
        self.cache.clear()

    # -- reading chunks -------------------------------------------------------------------

    def decompress(self, frame: bytes, key: bytes, raw_len: int) -> bytes:
        """The raw bytes of a frame, checked against the chunk's key and length; CorruptData if they differ."""
        with self._count_lock:
            self._decompressed += 1
        try:
            raw = self.contexts.decompressor.decompress(frame, max_output_size=raw_len)
        except zstandard.ZstdError as exc:
            raise CorruptData(f"chunk {key.hex()} does not decompress ({exc})", hint=HINT_VERIFY) from None
        if len(raw) != raw_len or xxhash.xxh3_128_digest(raw, seed=self.seed) != key[:16]:
            raise CorruptData(f"chunk {key.hex()} failed its checksum", hint=HINT_VERIFY)
        return raw

    def chunk(self, txn: ReadTxn, key: bytes, raw_len: int) -> bytes:
        """The verified raw bytes of one chunk read in ``txn`` (through the cache)."""
        frame = txn.get("chunks", key)
        if frame is None:
            raise CorruptData(f"chunk {key.hex()} is missing", hint=HINT_VERIFY)
        ident = key + xxhash.xxh3_64_digest(frame)
        raw = self.cache.get(ident)
        if raw is not None:
            return raw
        raw = self.decompress(frame, key, raw_len)
        self.cache.put(ident, raw)
        return raw

    def cached_frame(self, key: bytes, frame: bytes) -> bytes | None:
        """The raw chunk of ``frame``, stored under ``key``, if the cache holds it (the cache
        is keyed by the stored frame's hash: a chunk stored again under the same key misses)."""
        if not self.cache.capacity:
            return None
        return self.cache.get(key + xxhash.xxh3_64_digest(frame))

    def decompress_cached(self, frame: bytes, key: bytes, raw_len: int) -> bytes:
        """Decompress and verify a frame read by the caller, filling the cache."""
        raw = self.decompress(frame, key, raw_len)
        self.cache.put(key + xxhash.xxh3_64_digest(frame), raw)
        return raw

    def _after_fork(self) -> None:
        """In a forked child: fresh leaf locks and an empty cache (another thread may have held
        one); the worker pool is recreated on first use in the child (``_executor`` checks the pid)."""
        self._pool_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.cache._after_fork()
