"""The put pipeline: source -> content-defined chunks -> codec (on the pool) -> chunk space -> one catalog commit.

A put reads its source in blocks, cuts them into chunks (:mod:`blobpad.chunking`),
hashes, compresses and compares them on the store's worker pool (:mod:`blobpad.codec`),
and writes them in batches of ``BATCH`` raw bytes: every batch but the last commits its
chunks with a pending-put record (:mod:`blobpad.journal`); the last commits its chunks,
the entry, its manifest and indexes and the counters in one transaction
(:meth:`blobpad.catalog.Catalog.commit_entry`), so a put that fits in one batch commits
exactly one write transaction, and the final transactions of puts made at the same time
by threads of one process are committed together (:class:`GroupCommit`).  Content
identical to an entry already stored (same size and SHA-256) shares its chunks without
being cut again.
"""

from __future__ import annotations

import builtins
import codecs
import hashlib
import io
import json
import os
import stat
import threading
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from functools import partial
from typing import IO, Any

import xxhash
import zstandard

from . import journal, prefilter
from .catalog import BASE_KEY, REF, WHOLE_DEDUP, Catalog, bump, get_or_damaged, shard_key, unpack_ref
from .chunking import ChunkParams, Manifest, cut_spans, span_stats
from .codec import Codec
from .engine import Checked, ReadTxn, WriteTxn
from .engine import prefix_end as _prefix_end
from .errors import (
    HINT_MAX_BYTES,
    BlobpadError,
    Conflict,
    CorruptData,
    InvalidArgument,
    NotFound,
    StoreFull,
    describe,
    typename,
)
from .forks import reset_in_child
from .index import Entry, name_key, new_raw_id
from .journal import head_record, in_flight, process_token, rollback_pending
from .view import chunk_list_blob

__all__ = ["Putter", "PutWriter", "Source", "GroupCommit", "check_meta", "BATCH_BYTES", "MAX_META"]


_BLOCK = 8 << 20          # bytes read from a file or stream at a time
#: a block of a buffered stream (a pipe) is handed on once this many seconds passed since its
#: first bytes, however few (see _gather)
_GATHER_SECONDS = 1.0


BATCH_BYTES = 16 << 20         # raw bytes per write transaction of a put
_TWIN_CHECK = 32               # chunks of an identical entry read at a time to check that they are all there


MAX_META = 64 << 10      # largest caller meta, as JSON


#: what a worker found for one chunk: key, new frame (None when the stored one is
#: equal), the stored frame it compared with, characters (None if not UTF-8), newlines,
#: the chunk's trigram filter (:mod:`blobpad.prefilter`)
_Prepared = tuple[bytes, "bytes | None", "bytes | None", "int | None", int, bytes]


#: a chunk's filter takes at most this share of its compressed size (see prefilter.SHARE)
FILTER_SHARE = prefilter.SHARE
#: an entry's filters are kept only up to this many bytes (see prefilter.RECORD_MAX)
FILTER_RECORD_MAX = prefilter.RECORD_MAX


#: one chunk handed to a worker: a view of it, and where it lies (buffer, start, end,
#: whether the whole buffer is ASCII)
_Span = tuple[memoryview, bytes, int, int, bool]


def non_str_key(value: object) -> tuple[object] | None:
    """The first mapping key in ``value`` (a JSON-serialisable value, so finite) that is
    not a str, at any depth, as a 1-tuple (the key may be None); None when there is none.
    JSON turns such keys into strings without a word (1 and "1" into one key)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for k, v in item.items():
                if not isinstance(k, str):
                    return (k,)
                stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def check_meta(meta: object) -> dict[str, Any]:
    """Validate caller metadata and return a JSON round-tripped copy of it."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InvalidArgument(f"meta must be a dict, not {type(meta).__name__}")
    try:
        meta_json = json.dumps(meta, ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise InvalidArgument("meta is nested too deeply to store as JSON") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"meta must be JSON-serialisable: {describe(str(exc), 200)}") from None
    if len(meta_json) > MAX_META:
        raise InvalidArgument(f"meta is {len(meta_json)} characters as JSON; the limit is {MAX_META}")
    found = non_str_key(meta)
    if found is not None:  # JSON would make it a string: {1: "a", "1": "b"} would keep one of the two
        raise InvalidArgument(f"meta's keys must be strings, as JSON's are, not {typename(found[0])} ({describe(found[0])})")
    try:
        meta_json.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("meta contains lone surrogates; pass valid Unicode text") from None
    result: dict[str, Any] = json.loads(meta_json)
    return result


class GroupJob:
    """One thread's function waiting in a :class:`GroupCommit`, and what became of it."""

    __slots__ = ("fn", "wake", "batch", "finished", "result", "error")

    def __init__(self, fn: Callable[[WriteTxn], Any]) -> None:
        self.fn = fn
        self.wake = threading.Event()  # set when the job is finished, or its thread is to commit
        self.batch: list[GroupJob] | None = None  # the jobs this job's thread is to commit
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.finished = result, error, True
        self.wake.set()


class GroupCommit:
    """The final transactions of puts that threads of this process make at the same time,
    committed together: one write transaction, and one flush to disk, for all of them.

    A thread that finds no commit under way commits its own at once (a lone put waits
    for nobody).  Threads that arrive while one runs queue their functions; when it is
    done, the first of them commits every queued function in one transaction (in the
    order they came, each seeing the writes of those before it, as in transactions of
    their own), and each thread gets its own result.  Should one of them raise, that
    transaction is abandoned and each function is run again in a transaction of its
    own, so one put's failure never fails another's.  The functions only touch ``txn``
    (the rule of ``write(fn)``), so it does not matter which thread runs them; a
    waiting thread holds no transaction (see "Locking rules" in :mod:`blobpad.engine`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a leaf lock: held only around the queue
        self._queue: list[GroupJob] = []
        self._busy = False
        self._pid = os.getpid()
        reset_in_child(self)

    def _after_fork(self) -> None:
        # a fork may have caught another thread holding the lock, or committing: that
        # thread is not in the child, and neither are the threads that queued
        self._lock = threading.Lock()
        self._queue, self._busy, self._pid = [], False, os.getpid()

    def write(self, write: Callable[[Callable[[WriteTxn], Any]], Any], fn: Callable[[WriteTxn], Any]) -> Any:
        """``write(fn)``'s result, committed alone or with other threads' functions."""
        with self._lock:
            alone = not self._busy
            if alone:
                self._busy = True
            else:
                job = GroupJob(fn)
                self._queue.append(job)
        if alone:  # no commit under way: this thread commits its own at once, then hands over
            try:
                return write(fn)
            finally:
                self._hand_over([])
        job.wake.wait()
        batch = job.batch
        if batch is not None:  # this thread commits the batch (its own job is the first), then hands over
            job.batch = None
            try:
                self._commit(write, batch)
            finally:
                self._hand_over(batch)
        if job.error is not None:
            raise job.error
        return job.result

    @staticmethod
    def _commit(write: Callable[[Callable[[WriteTxn], Any]], Any], batch: list[GroupJob]) -> None:
        if len(batch) > 1:
            try:
                results = write(lambda txn: [job.fn(txn) for job in batch])
            except Exception:
                pass  # one of them failed: each runs on its own below
            else:
                for job, result in zip(batch, results, strict=True):
                    job.finish(result)
                return
        for job in batch:
            try:
                job.finish(write(job.fn))
            except Exception as exc:
                job.finish(error=exc)

    def _hand_over(self, batch: list[GroupJob]) -> None:
        """Release the jobs of ``batch`` and make the first queued thread commit the queue."""
        for job in batch:
            if not job.finished:  # the committing thread was interrupted (KeyboardInterrupt)
                job.finish(error=BlobpadError(
                    "the put was interrupted while another thread committed it; it may or may not be stored"
                ))
        with self._lock:
            if not self._queue:
                self._busy = False
                return
            queued, self._queue = self._queue, []
            queued[0].batch = queued
        queued[0].wake.set()


class Sha256:
    """The SHA-256 of a put's content, computed beside the cutting without a thread of its own.

    Blocks up to ``_INLINE`` bytes are hashed in the calling thread; larger ones go to
    the store's worker pool, one task at a time so that they are hashed in order: the
    blocks read while a task runs wait for the next one.  A task only hashes bytes it
    was given (a pool task, see "Locking rules" in :mod:`blobpad.engine`).
    """

    _INLINE = 1 << 20

    def __init__(self, codec: Codec) -> None:
        self._sha = hashlib.sha256()
        self._codec = codec
        self._waiting: list[bytes] = []
        self._running: Future[None] | None = None

    def feed(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        """``blocks``, hashed as they are read."""
        for block in blocks:
            if self._running is None and len(block) <= self._INLINE:
                self._sha.update(block)
            else:
                self._waiting.append(block)
                self._pump(wait=False)
            yield block

    def _pump(self, *, wait: bool) -> None:
        if self._running is not None:
            if not wait and not self._running.done():
                return
            self._running.result()
            self._running = None
        if self._waiting:
            blocks, self._waiting = self._waiting, []
            self._running = self._codec.submit(update_all, self._sha, blocks)

    def hexdigest(self) -> str:
        """The digest of every block fed, once the pool has hashed them all."""
        while self._running is not None or self._waiting:
            self._pump(wait=True)
        return self._sha.hexdigest()


def update_all(sha: Any, blocks: list[bytes]) -> None:
    for block in blocks:
        sha.update(block)


class _Ready:
    """The prepared chunks of a task done in the put's own thread, shaped like the
    Future of one done on the pool (a Future is costly to make: a lock and a condition)."""

    __slots__ = ("_result",)

    def __init__(self, result: list[_Prepared]) -> None:
        self._result = result

    def result(self) -> list[_Prepared]:
        return self._result

    def cancel(self) -> bool:
        return False


#: a task's prepared chunks: on the pool, or done in the put's thread
_Pending = Future[list[_Prepared]] | _Ready


def _first_refs(batch: list[tuple[memoryview, _Prepared]]) -> list[bytes]:
    """The reference key each chunk of ``batch`` is looked up under first (its variant 0, see ``_place``)."""
    return [key[:16] + b"\x00" for _, (key, *_) in batch]


class PutWriter:
    """The batches of one put: cut, hash, compress or verify, write, remember."""

    def __init__(self, store: Putter, raw_id: bytes, known_sha: str | None = None) -> None:
        self.store = store
        self.raw_id = raw_id
        self._known_sha = known_sha
        self.keys: list[bytes] = []
        self.sizes: list[int] = []
        self.char_counts: list[int] = []
        self.newlines: list[int] = []
        # each chunk's trigram filter, in order (None: the store builds none, or given up)
        self.filters: list[bytes] | None = [] if store.filters else None
        self._filter_bytes = 0
        self.chars = 0
        self.is_text = True
        self.size = 0
        self.ends_with_newline = False
        self._batch = 0
        self._written = False
        self._stamped = 0.0  # time.monotonic() of the last head record written (see _keep_alive)
        self.new_stored = 0  # stored bytes of the chunks this put created so far
        self.sha256 = ""
        self.tail: list[tuple[memoryview, _Prepared]] = []  # the last batch, placed by the final transaction

    def run(self, blocks: Iterable[bytes]) -> None:
        """Cut ``blocks`` into chunks and write all of them but the last batch.

        The calling thread cuts, without copying: chunks are views of the blocks read.
        It hashes each task's chunks and looks their keys up (:meth:`_lookup`), then,
        once the chunks after it are cut as far as the spill of its last chunk's filter
        (the first bytes after it, from as many chunks as it takes; see
        :func:`blobpad.prefilter.build`), hands the task
        (growing from ``_FIRST_TASK`` to ``_TASK`` bytes, so that a large put still
        spreads over the workers) to the store's worker pool, where each chunk is
        counted, compressed (or compared with the stored copy) and given its trigram
        filter while the next ones are being cut; a put that is a single task (up to
        ``_FIRST_TASK`` bytes) is prepared in this thread, without a hand-over.  The
        SHA-256 of the whole content is computed beside the cutting (:class:`Sha256`).
        At most two batches are in flight, so memory stays bounded on any input size.

        Each full batch but the last is written in a transaction of its own, recorded
        in the pending-put journal; the last one (the whole content of a put that
        fits in one batch) is kept in ``tail`` for the put's final transaction
        (:meth:`Store._finish_put`).  This thread waits for the pool holding no
        transaction, and the pool tasks open none (see "Locking rules" in
        :mod:`blobpad.engine`).
        """
        store = self.store
        codec = store._codec
        on_pool = False  # a task went to the pool: the last one goes there too
        inflight: deque[tuple[memoryview, _Pending, int]] = deque()
        inflight_bytes = 0
        task: list[_Span] = []
        task_bytes = 0
        task_size = self._FIRST_TASK
        sha = None if self._known_sha is not None else Sha256(codec)
        blocks = self._keep_alive(blocks)
        if sha is not None:
            blocks = sha.feed(blocks)
        last: bytes | None = None
        view = memoryview(b"")
        ascii = True
        try:
            for buf, start, end in cut_spans(blocks, store.chunk_params):
                if buf is not last:  # a new block: chunks are views of it until the next one
                    last, view, ascii = buf, memoryview(buf), buf.isascii()
                piece = (view[start:end], buf, start, end, ascii)
                # handed over once the chunks after it that hold its filter's spill are cut (one,
                # unless a chunk shorter than the spill follows: the task takes it in too)
                if task_bytes >= task_size and len(piece[0]) >= prefilter.SPILL:
                    fut = codec.submit(self._prepare, task, *self._lookup(task), bytes(piece[0][: prefilter.SPILL]))
                    on_pool = True
                    inflight.extend((span[0], fut, i) for i, span in enumerate(task))
                    inflight_bytes += task_bytes
                    task, task_bytes = [], 0
                    task_size = min(2 * task_size, self._TASK)
                    if inflight_bytes >= 2 * BATCH_BYTES:
                        inflight_bytes -= self._flush(inflight, BATCH_BYTES)
                task.append(piece)
                task_bytes += end - start
            if task:
                if not on_pool:  # the whole put is this one task: prepare it here
                    if task_bytes <= self._LOOKUP_FROM:  # new content, most likely: no lookup
                        found: list[bytes | None] = [None] * len(task)
                        fut = _Ready(self._prepare(task, self._keys(task), found))
                    else:
                        fut = _Ready(self._prepare(task, *self._lookup(task)))
                else:
                    fut = codec.submit(self._prepare, task, *self._lookup(task))
                inflight.extend((span[0], fut, i) for i, span in enumerate(task))
                inflight_bytes += task_bytes
            while inflight_bytes > BATCH_BYTES:
                inflight_bytes -= self._flush(inflight, BATCH_BYTES)
            self.tail = self._take(inflight, inflight_bytes)
        finally:
            for _, fut, _ in inflight:
                fut.cancel()
        self.sha256 = self._known_sha or (sha.hexdigest() if sha is not None else "")

    #: raw bytes of chunks handed to a worker at a time: few tasks, so that workers
    #: seldom wait for the GIL (held by the cutting thread) between chunks
    _TASK = 4 << 20
    _FIRST_TASK = 256 << 10
    #: a put of at most this many bytes is compressed without looking its chunks up
    #: first (a read transaction): were they stored already, the final transaction
    #: compares them with the stored bytes and shares them (:meth:`_place`)
    _LOOKUP_FROM = 64 << 10

    @property
    def batches(self) -> int:
        """How many batches were written before the final transaction (each recorded as pending)."""
        return self._batch

    def _keys(self, task: list[_Span]) -> list[bytes]:
        """Each chunk's key: its seeded xxh3-128 hash, variant 0."""
        seed = self.store._codec.seed
        return [xxhash.xxh3_128_digest(span[0], seed=seed) + b"\0" for span in task]

    def _lookup(self, task: list[_Span]) -> tuple[list[bytes], list[bytes | None]]:
        """In the put's own thread: each chunk's key, and the frame stored under it (or None).

        The lookup is a short read transaction of this thread, during which it waits
        for nothing: the pool task it prepares then only computes (see "Locking rules"
        in :mod:`blobpad.engine.lmdb`: a pool task that opened a transaction would wait
        behind a growth that waits for a reader that waits for the pool).
        """
        keys = self._keys(task)
        with self.store._backend.read() as txn:
            try:
                found = txn.get_many("chunks", keys)
            except CorruptData:  # a damaged stored chunk is never shared: this content gets its own copy
                found = [get_or_damaged(txn, "chunks", key)[1] for key in keys]
        return keys, found

    def _prepare(
        self, task: list[_Span], keys: list[bytes], found: list[bytes | None], spill: bytes = b""
    ) -> list[_Prepared]:
        """In a worker, pure computation: per chunk, its stats, either the stored frame
        (``found`` by :meth:`_lookup`) when it decompresses to exactly the chunk, or a new
        frame, and its trigram filter (:func:`blobpad.prefilter.build`, at most
        ``FILTER_SHARE`` of the frame's size; ``spill``: the first bytes of the chunk after
        the task, b"" at the end of the content)."""
        store = self.store
        stats = [span_stats(buf, start, end, ascii) for _, buf, start, end, ascii in task]
        found = list(found)
        codec = store._codec.contexts
        seen = [i for i, stored in enumerate(found) if stored is not None]
        stored_frames = [frame for frame in found if frame is not None]
        equal = self._equal_all(codec.decompressor, stored_frames, [task[i] for i in seen])
        for i, same in zip(seen, equal, strict=True):
            if not same:
                found[i] = None
        # the chunks to compress: not stored, or stored but different
        todo = [i for i, stored in enumerate(found) if stored is None]
        frames: list[bytes | None] = [None] * len(task)
        for i, frame in zip(todo, self._compress_all(codec.compressor, [task[i][0] for i in todo]), strict=True):
            frames[i] = frame
        if store.filters:
            spills = []  # each chunk's: the first bytes after it, from as many chunks as it takes
            for span in reversed(task):
                spills.append(spill)
                spill = (bytes(span[0][: prefilter.SPILL]) + spill)[: prefilter.SPILL]
            spills.reverse()
            filters = [
                prefilter.build(span[0], after, max_bytes=int(FILTER_SHARE * len(frame or stored or b"")))
                for span, after, frame, stored in zip(task, spills, frames, found, strict=True)
            ]
        else:
            filters = [b""] * len(task)
        return [
            (key, frame, stored, chars, newlines, flt)
            for key, frame, stored, (chars, newlines), flt in zip(keys, frames, found, stats, filters, strict=True)
        ]

    @staticmethod
    def _compress_all(compressor: zstandard.ZstdCompressor, chunks: list[memoryview]) -> list[bytes]:
        """One frame per chunk, as ``compressor.compress`` makes them.

        The C backend of zstandard compresses the whole list without taking the GIL
        back between chunks (with a context of its own, from the same parameters,
        which costs more than compressing a few small chunks one by one: so only from
        ``_MULTI_FROM`` bytes on).
        """
        if len(chunks) > 1 and PutWriter._multi and sum(len(c) for c in chunks) >= PutWriter._MULTI_FROM:
            try:
                out = compressor.multi_compress_to_buffer(chunks, threads=1)
            except (AttributeError, NotImplementedError):  # the cffi or Rust backend
                PutWriter._multi = False
            else:
                return [out[i].tobytes() for i in range(len(out))]
        return [compressor.compress(chunk) for chunk in chunks]

    @staticmethod
    def _equal_all(decompressor: zstandard.ZstdDecompressor, frames: list[bytes], spans: list[_Span]) -> list[bool]:
        """Whether each stored frame decompresses to its chunk, exactly.

        Like ``_compress_all``, the C backend decompresses the whole list at once,
        each frame into exactly its chunk's size: a frame of any other size (or a
        damaged one) fails the lot, and then each is compared on its own.  Chunks are
        compared in their buffers (``startswith`` is a memcmp; comparing memoryviews
        goes byte by byte).
        """
        if len(frames) > 1 and PutWriter._multi:
            try:
                out = decompressor.multi_decompress_to_buffer(
                    frames, decompressed_sizes=array("Q", [end - start for _, _, start, end, _ in spans]), threads=1
                )
            except zstandard.ZstdError:
                pass
            except (AttributeError, NotImplementedError):
                PutWriter._multi = False
            else:
                return [
                    len(out[i]) == end - start and buf.startswith(out[i], start)
                    for i, (_, buf, start, end, _) in enumerate(spans)
                ]
        equal = []
        for frame, (_, buf, start, end, _) in zip(frames, spans, strict=True):
            try:
                raw = decompressor.decompress(frame, max_output_size=end - start + 1)
            except zstandard.ZstdError:
                equal.append(False)
            else:
                equal.append(len(raw) == end - start and buf.startswith(raw, start))
        return equal

    _multi = True  # whether the multi_*_to_buffer functions are available (C backend)
    _MULTI_FROM = 1 << 20  # raw bytes from which a task's chunks are compressed in one call

    def _take(
        self, inflight: deque[tuple[memoryview, _Pending, int]], limit: int
    ) -> list[tuple[memoryview, _Prepared]]:
        """The oldest chunks in flight, up to ``limit`` raw bytes, with what the workers found,
        counted into the put's sizes and statistics (their keys are known once written)."""
        batch: list[tuple[memoryview, _Prepared]] = []
        taken = 0
        while inflight and taken < limit:
            chunk, fut, i = inflight.popleft()
            prepared = fut.result()[i]
            batch.append((chunk, prepared))
            taken += len(chunk)
            chars, nl = prepared[3], prepared[4]
            if self.filters is not None:
                self.filters.append(prepared[5])
                self._filter_bytes += len(prepared[5]) + 2
                if self._filter_bytes > FILTER_RECORD_MAX:
                    self.filters = None
            self.sizes.append(len(chunk))
            self.newlines.append(nl)
            if chars is None:
                self.is_text = False
                self.char_counts.append(len(chunk))
            else:
                self.char_counts.append(chars)
                self.chars += chars
            self.size += len(chunk)
        if batch:
            self.ends_with_newline = batch[-1][0][-1:] == b"\n"
        return batch

    def _place_batch(
        self, txn: WriteTxn, batch: list[tuple[memoryview, _Prepared]], cap: int | None
    ) -> tuple[list[bytes], dict[str, int]]:
        """Add a reference to each chunk of ``batch`` in ``txn``: their final keys, and the counter changes.

        Raises StoreFull when the chunks this put created exceed ``cap`` (``max_bytes``
        as ``txn`` reads it) by themselves (eviction waits for the final transaction;
        whatever it evicted, this put could not fit).
        """
        final_keys: list[bytes] = []
        new_stored = new_chunks = new_unique = 0
        if txn.networked:  # a no-op elsewhere: the key list is not even built
            txn.prefetch("refs", _first_refs(batch))
        for chunk, (key, frame, seen, _, _, _) in batch:
            key, created, slen = self._place(txn, chunk, key, frame, seen)
            final_keys.append(key)
            if created:
                new_chunks += 1
                new_stored += slen
                new_unique += len(chunk)
        if new_chunks:
            if cap and self.new_stored + new_stored > cap:
                raise StoreFull(
                    f"the store is capped at max_bytes={cap} and this put alone needs more stored "
                    "bytes than that", hint=HINT_MAX_BYTES,
                )
            return final_keys, {"chunks": new_chunks, "stored_bytes": new_stored, "unique_bytes": new_unique}
        return final_keys, {}

    def _flush(self, inflight: deque[tuple[memoryview, _Pending, int]], limit: int) -> int:
        """Write the oldest chunks in flight, up to ``limit`` raw bytes, in one transaction
        that records them in the pending-put journal; return their raw bytes."""
        store = self.store
        batch = self._take(inflight, limit)
        batch_no = self._batch
        self._batch += 1
        token = process_token()

        stamp = store.now()  # the store's clock: on a shared server, the server's, which every host reads alike

        def txn_fn(txn: WriteTxn) -> tuple[list[bytes], int]:
            txn.hold_chunks()  # leased until the put's last commit keeps them (a cluster's chunk keys)
            if batch_no:
                self._check_journal(txn, batch_no)  # another host may have taken this put for dead
            txn.put("pending", self.raw_id + b"H", head_record(token, stamp))  # this put is alive
            final_keys, counts = self._place_batch(txn, batch, store._cap(txn))
            txn.put("pending", self.raw_id + b"B" + batch_no.to_bytes(4, "big"), b"".join(final_keys))
            if counts:
                bump(txn, **counts)
            return final_keys, counts.get("stored_bytes", 0)

        final, added = store._backend.write(txn_fn)
        self._stamped = time.monotonic()
        self.new_stored += added
        self._written = True
        self.keys.extend(final)
        return sum(len(chunk) for chunk, _ in batch)

    def place_tail(self, txn: WriteTxn, cap: int | None) -> tuple[list[bytes], dict[str, int]]:
        """In the put's final transaction: place the last batch (see :meth:`_place_batch`)."""
        return self._place_batch(txn, self.tail, cap)

    def _place(
        self, txn: WriteTxn, chunk: bytes | memoryview, key: bytes, frame: bytes | None, seen: bytes | None
    ) -> tuple[bytes, bool, int]:
        """Add one reference to ``chunk``; return (its key, whether it was created, stored size).

        ``frame`` is the compressed chunk, or None when ``_prepare`` found ``seen``, the
        stored frame under the first key, to hold the same bytes.
        """
        store = self.store
        base = key[:16]
        for variant in range(256):
            k = base + bytes([variant])
            rec = txn.get("refs", k)
            if rec is None:
                if frame is None:
                    frame = store._codec.contexts.compressor.compress(chunk)
                txn.put("chunks", k, frame)
                txn.put("refs", k, REF.pack(1, len(frame), len(chunk)))
                return k, True, len(frame)
            ref = unpack_ref(rec)
            if ref is None:
                continue  # a damaged record: leave it to gc(), place the chunk under another variant
            count, slen, rlen = ref
            if rlen == len(chunk):
                stored = get_or_damaged(txn, "chunks", k)[1]  # damaged: not shared, placed under another variant
                if variant == 0 and seen is not None and stored == seen:
                    same = True  # verified against these very stored bytes by _prepare
                else:
                    try:
                        same = stored is not None and store._codec.contexts.decompressor.decompress(
                            stored, max_output_size=rlen + 1
                        ) == chunk
                    except zstandard.ZstdError:
                        same = False
                if same:
                    txn.put("refs", k, REF.pack(count + 1, slen, rlen))
                    return k, False, 0
        raise StoreFull(f"chunk hash {base.hex()} has 256 different contents; the store is under attack or damaged")

    def _keep_alive(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        """``blocks``, restamping the journal's head record when the source took more than
        a third of :data:`~blobpad.journal.STALE_SECONDS` since the last one (a slow pipe
        that fills no batch in that time), so that no other host takes the put for dead.
        A source silent for longer than that still loses the put: its final transaction
        then raises Conflict (:meth:`_check_journal`), and nothing is stored."""
        for block in blocks:
            if self._written and time.monotonic() - self._stamped > journal.STALE_SECONDS / 3:
                self._restamp()
            yield block

    def _restamp(self) -> None:
        """Write the journal's head record again, with the store's time (after checking that
        the put was not rolled back meanwhile)."""
        token, stamp, batches = process_token(), self.store.now(), self._batch

        def txn_fn(txn: WriteTxn) -> None:
            self._check_journal(txn, batches)
            txn.put("pending", self.raw_id + b"H", head_record(token, stamp))

        self.store._backend.write(txn_fn)
        self._stamped = time.monotonic()

    def _check_journal(self, txn: WriteTxn, batches: int) -> None:
        """Raise Conflict unless the journal still holds this put's head record and the
        records of its ``batches`` batches: a process of another host that found the put's
        last batch :data:`~blobpad.journal.STALE_SECONDS` old (a source that gave less than
        a batch in that time) took it for dead and rolled it back, releasing its chunks;
        committing it now would make an entry whose chunks may be gone."""
        prefix = self.raw_id
        held = {k[len(prefix):] for k, _ in txn.scan("pending", prefix, _prefix_end(prefix))}
        if b"H" not in held or any(b"B" + n.to_bytes(4, "big") not in held for n in range(batches)):
            raise Conflict(
                f"this put was rolled back by another process while it waited {journal.STALE_SECONDS} s or more for its "
                "source to fill a batch (it was taken for dead); nothing was stored: put it again"
            )

    def clear_pending(self, txn: WriteTxn) -> None:
        """In the put's final transaction: check that the journal still holds every batch
        (see :meth:`_check_journal`), then clear it."""
        self._check_journal(txn, self._batch)
        prefix = self.raw_id
        for key in [k for k, _ in txn.scan("pending", prefix, _prefix_end(prefix))]:
            txn.delete("pending", key)

    def rollback(self) -> None:
        if not self._written:
            return
        try:
            self.store._backend.write(lambda txn: rollback_pending(txn, self.raw_id), frees=True)
        except BlobpadError:
            pass  # this process's next gc(), open or sweep rolls it back, any process's once this one ends (journal.recover)


def _gather(fh: io.BufferedReader, size: int) -> bytes:
    """Up to ``size`` bytes of ``fh``, b"" at its end: what a pipe gives within
    :data:`_GATHER_SECONDS` of its first bytes, not a wait for all ``size`` (a slow
    source's put then goes on between its bytes and keeps its journal alive, see
    :meth:`PutWriter._keep_alive`); a regular file gives ``size`` at once."""
    first = fh.read1(size)
    if not first or len(first) >= size:
        return first
    parts, held, start = [first], len(first), time.monotonic()
    while held < size and time.monotonic() - start < _GATHER_SECONDS:
        piece = fh.read1(size - held)
        if not piece:
            break  # the end: the next call returns b""
        parts.append(piece)
        held += len(piece)
    return b"".join(parts)


class Source:
    """The content of a put: in memory, or a binary file read in blocks.

    ``size`` is known for in-memory content and regular files.  ``blocks()`` can be
    called again after ``sha256()`` only when the file is seekable.  A regular file the
    put opened by its path (``owned``) is read up to the size it had then: a log still
    being written is stored as it was when the put began (a put of a file that grows
    faster than it is read would never end), and the entry's size is the size reported
    (a file that says it is empty, as those of ``/proc`` do, is read to its end).
    """

    def __init__(self, data: bytes | None, fh: IO[bytes] | None = None, size: int | None = None, *, owned: bool = False):
        self.data = data
        self.fh = fh
        self.size = len(data) if data is not None else size
        self.owned = owned

    def blocks(self) -> Iterator[bytes]:
        if self.data is not None:
            if self.data:
                yield self.data
            return
        assert self.fh is not None
        fh = self.fh
        read = partial(_gather, fh) if isinstance(fh, io.BufferedReader) else fh.read
        # see the class's docstring; a size of 0 may be a file of /proc, which says 0 and has content
        left = self.size if self.owned and self.size else None
        if left is not None:
            left -= fh.tell()  # from where it stands (sha256() rewinds to its start)
        while left is None or left > 0:
            try:
                block = read(_BLOCK if left is None else min(_BLOCK, left))
            except ValueError as exc:  # closed meanwhile (an OSError, a disk's failure, goes up as it is)
                if isinstance(exc, BlobpadError):
                    raise
                raise InvalidArgument(f"reading the file object failed: {describe(str(exc), 300)}") from None
            if isinstance(block, str):
                raise InvalidArgument("the file object returned str; open it in binary mode ('rb')")
            if block is None:  # what a non-blocking stream's read() gives when nothing is ready yet
                raise InvalidArgument("the file object's read() returned None (a non-blocking stream with no data "
                                      "ready); pass a blocking one")
            if not isinstance(block, (bytes, bytearray, memoryview)):
                raise InvalidArgument(f"the file object's read() returned {typename(block)}; it must return bytes")
            if not block:
                return
            if left is not None:
                left -= len(block)
            yield bytes(block)

    def sha256(self) -> str:
        """Hash the whole content, then rewind so that blocks() reads it again."""
        sha = hashlib.sha256()
        if self.fh is not None:
            start = self.fh.tell()
            for block in self.blocks():
                sha.update(block)
            self.fh.seek(start)
        else:
            sha.update(self.data or b"")
        return sha.hexdigest()

    def is_utf8(self) -> bool:
        """Whether the whole content is valid UTF-8 (rewinds like sha256())."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        start = self.fh.tell() if self.fh is not None else 0
        try:
            for block in self.blocks():
                decoder.decode(block)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
        finally:
            if self.fh is not None:
                self.fh.seek(start)
        return True

    def close(self) -> None:
        if self.owned and self.fh is not None:
            self.fh.close()


class Putter:
    """The put pipeline of one store (see the module docstring).

    Parameters:
        engine: the store's engine, through the integrity checks.
        codec: the store's chunk codec (contexts, worker pool).
        catalog: where entries are made visible.
        chunk_params: the store's chunk sizes.
        now: the store's clock.
        cap: ``max_bytes`` as a transaction reads it (another process may have set it).
        filters: whether puts build each chunk's trigram filter (the store's ``filters``).
    """

    def __init__(self, engine: Checked, codec: Codec, catalog: Catalog, chunk_params: ChunkParams,
                 now: Callable[[], float], cap: Callable[[ReadTxn], int | None], filters: bool = False) -> None:
        self._backend = engine
        self._codec = codec
        self._catalog = catalog
        self.chunk_params = chunk_params
        self.now = now
        self._cap = cap
        self.filters = filters
        self._group = GroupCommit()

    def put(
        self, data: object, *, kind: str | None, session: str, turn: str | int | None, ttl: float | None,
        name: str | None, step: int | None, tool: str | None, meta: dict[str, Any], replaces: bytes | None = None,
        evict_untimed: bool = True,
    ) -> Entry:
        """Store checked arguments (``Store.put`` checks them) and return the new entry.

        ``replaces`` (an edit, :mod:`blobpad.edit`): the id ``name`` must still name when
        the entry is committed, else the put raises Conflict and writes nothing.
        """
        # here, in the caller's context, not in the write: a put may be committed by another
        # thread's (GroupCommit), whose own snapshot, or lack of one, is not this caller's
        self._backend.refuse_pinned("a put")
        source = self._source(data)
        created = self.now()
        raw_id = new_raw_id()
        fields = dict(session=session, turn=turn, ttl=ttl, name=name, step=step, tool=tool, meta=meta, created=created,
                      replaces=replaces)
        try:
            known_sha = None
            if source.size is not None and source.size > WHOLE_DEDUP and self._has_size(source.size):
                # Something of this very size is stored: hash first, and if the whole
                # content is already there, share its chunks without cutting anything.
                # (Smaller content is deduplicated chunk by chunk, in its one transaction.)
                known_sha = source.sha256()
                twins = self._twin_kinds(source.size, known_sha)
                share = kind or "text"
                if share not in twins and kind is None and "binary" in twins and not source.is_utf8():
                    share = "binary"
                if share in twins:
                    entry = self._put_duplicate(raw_id, source.size, known_sha, share, fields)
                    if entry is not None:
                        return entry
            elif source.data is not None and len(source.data) <= Sha256._INLINE:
                known_sha = hashlib.sha256(source.data).hexdigest()  # small: at once, without a Sha256 beside the cutting
            # a file is read again to be stored, and may have changed since it was hashed: its
            # entry records the hash of the bytes stored (computed beside the cutting), never
            # the earlier one, or a later put of that earlier content would share these chunks
            writer = PutWriter(self, raw_id, known_sha if source.fh is None else None)
            with in_flight(raw_id):  # a journal of it left after it is rolled back later (blobpad.journal.recover)
                try:
                    writer.run(source.blocks())
                    entry = self._finish_put(writer, raw_id, kind=kind, evict_untimed=evict_untimed, **fields)
                except BaseException:
                    writer.rollback()
                    raise
        finally:
            source.close()
        return entry

    def _has_size(self, size: int) -> bool:
        prefix = size.to_bytes(8, "big")
        with self._backend.read() as txn:
            return any(True for _ in txn.scan("digests", prefix, _prefix_end(prefix)))

    def _put_duplicate(
        self, raw_id: bytes, size: int, sha: str, kind: str, fields: dict[str, Any]
    ) -> Entry | None:
        """Store a new entry sharing the chunks of an identical one of ``kind``, in one
        write transaction; None if there is none (any more) or it is damaged.

        Identity is decided by size and SHA-256 (collision-resistant), never by the
        seeded chunk hashes alone.
        """
        prefix = size.to_bytes(8, "big") + bytes.fromhex(sha)
        whole = self._twins_whole(prefix)

        def txn_fn(txn: WriteTxn) -> Entry | None:
            for key, _ in txn.scan("digests", prefix, _prefix_end(prefix)):
                if key[40:] not in whole:
                    continue  # a chunk of it is gone or damaged (a node lost in a failover): never shared
                try:
                    twin_raw = txn.get("entries", key[40:])
                    blob = None if twin_raw is None else chunk_list_blob(txn, key[40:], twin_raw)
                except CorruptData:
                    continue  # a damaged twin is never shared; verify() reports it
                if twin_raw is None or blob is None:
                    continue
                try:
                    twin = Entry.decode(twin_raw)
                    m = Manifest.unpack(blob)
                except (ValueError, TypeError, RecursionError):  # a damaged twin is never shared; verify() reports it
                    continue
                keys = m.keys
                # nor one whose record or chunk list does not hold this very content (reads refuse it)
                if (twin.kind != kind or twin.size_bytes != size or twin.sha256 != sha or m.bytes_at[-1] != size
                        or len(m) != twin.chunks):
                    continue
                try:
                    filters = txn.get("filters", key[40:])  # the twin's filters are this entry's
                except CorruptData:
                    filters = None  # read whole by grep and count; verify() reports the twin's
                uses = Counter(keys)  # a chunk may occur several times in one entry
                refs = {k: unpack_ref(rec or b"") for k, rec in zip(uses, txn.get_many("refs", list(uses)), strict=True)}
                if any(r is None for r in refs.values()):
                    continue  # a chunk without a sound reference record is not shared
                for k, n in uses.items():
                    count, slen, rlen = refs[k]  # type: ignore[misc]
                    txn.put("refs", k, REF.pack(count + n, slen, rlen))
                return self._catalog.commit_entry(
                    txn, raw_id, blob, len(keys), kind=twin.kind, size=size, chars=twin.chars,
                    lines=twin.lines, sha256=sha, filters=filters, **fields,
                )
            return None

        return self._backend.write(txn_fn)

    def _twins_whole(self, prefix: bytes) -> set[bytes]:
        """The raw ids of the entries listed under ``prefix`` (size and SHA-256) whose every chunk is
        stored and sound: read in a read transaction, :data:`_TWIN_CHECK` chunks at a time (each read
        checks its seal; what is read is held no longer than its batch)."""
        whole: set[bytes] = set()
        with self._backend.read() as txn:
            for key, _ in txn.scan("digests", prefix, _prefix_end(prefix)):
                try:
                    blob = chunk_list_blob(txn, key[40:])
                    keys = [] if blob is None else list(dict.fromkeys(Manifest.unpack(blob).keys))
                    if keys and all(frame is not None for i in range(0, len(keys), _TWIN_CHECK)
                                    for frame in txn.get_many("chunks", keys[i:i + _TWIN_CHECK])):
                        whole.add(key[40:])
                except (CorruptData, ValueError, TypeError, RecursionError):
                    continue  # damaged: never shared; verify() reports it
        return whole

    def _twin_kinds(self, size: int, sha: str) -> set[str]:
        """The kinds ("text", "binary") of the sound entries holding exactly this content."""
        prefix = size.to_bytes(8, "big") + bytes.fromhex(sha)
        kinds: set[str] = set()
        with self._backend.read() as txn:
            for key, _ in txn.scan("digests", prefix, _prefix_end(prefix)):
                try:
                    raw = txn.get("entries", key[40:])
                    if raw is not None:
                        kinds.add(Entry.decode(raw).kind)
                except (CorruptData, ValueError, TypeError, RecursionError):  # damaged: never shared
                    continue
        return kinds

    @staticmethod
    def _source(data: object) -> Source:
        if isinstance(data, str):
            try:
                return Source(data.encode("utf-8"))
            except UnicodeEncodeError:
                raise InvalidArgument("the text contains lone surrogates; pass valid Unicode or bytes") from None
        if isinstance(data, (bytes, bytearray, memoryview)):
            try:
                return Source(bytes(data))
            except ValueError:  # a memoryview released before the put
                raise InvalidArgument("the memoryview was released: pass one whose buffer is still held") from None
        if isinstance(data, os.PathLike):
            path = os.fspath(data)
            shown = describe(path, 300)
            try:
                fh = builtins.open(path, "rb")  # noqa: SIM115 - closed by Source.close
            except FileNotFoundError:
                raise NotFound(f"no file at {shown}") from None
            except IsADirectoryError:
                raise InvalidArgument(f"{shown} is a directory; pass a file") from None
            except OSError as exc:
                raise InvalidArgument(f"cannot read {shown}: {exc.strerror}") from None
            except (ValueError, UnicodeError):  # an embedded NUL, lone surrogates
                raise InvalidArgument(f"{shown} is not a valid file name") from None
            st = os.fstat(fh.fileno())
            return Source(None, fh, st.st_size if stat.S_ISREG(st.st_mode) else None, owned=True)
        if callable(getattr(data, "read", None)):
            if getattr(data, "closed", False) is True:
                raise InvalidArgument("the file object is closed; pass an open one (opened with 'rb')")
            return Source(None, data)  # type: ignore[arg-type]
        raise InvalidArgument(
            f"put() takes str, bytes, a path (os.PathLike) or a binary file object, not {type(data).__name__}; "
            "to store a path given as a string, pass pathlib.Path(s)"
        )

    def _finish_put(self, writer: PutWriter, raw_id: bytes, *, kind: str | None, evict_untimed: bool = True,
                    **fields: Any) -> Entry:
        """The put's final write transaction, its only one when the content fits in one batch.

        It places the last batch of chunks (:meth:`PutWriter.place_tail`), clears the
        pending-put records of earlier batches if there were any, makes the entry
        visible with its manifest and indexes, updates the counters once, and evicts
        for ``max_bytes``: all or nothing.
        """
        size = writer.size
        is_text = writer.is_text if kind is None else kind == "text"
        if kind == "text" and not writer.is_text:
            raise InvalidArgument("kind='text' but the content is not valid UTF-8; use kind='binary' or omit kind")
        lines = sum(writer.newlines) + (1 if size and not writer.ends_with_newline else 0)
        chars = writer.char_counts if is_text else writer.sizes

        def txn_fn(txn: WriteTxn) -> tuple[Entry, list[bytes], int]:
            if txn.networked:  # what this transaction reads, asked of a networked engine in one request first
                wanted = [("meta", b"settings"), ("meta", BASE_KEY), ("meta", shard_key()),
                          *(("refs", k) for k in _first_refs(writer.tail))]
                if fields["name"] is not None:
                    wanted.append(("names", name_key(fields["session"], fields["name"])))
                txn.prefetch_pairs(wanted)
            cap = self._cap(txn)
            keys, counts = writer.place_tail(txn, cap)
            if writer.batches:
                writer.clear_pending(txn)
            txn.keep_chunks(writer.keys + keys)  # the earlier batches' held chunks, and any shared one held
            manifest = Manifest.build(writer.keys + keys, writer.sizes, chars, writer.newlines)
            entry = self._catalog.commit_entry(
                txn, raw_id, manifest.pack(), len(manifest), kind="text" if is_text else "binary", size=size,
                chars=writer.chars if is_text else None, lines=lines, sha256=writer.sha256, counts=counts,
                filters=None if writer.filters is None else prefilter.pack(writer.filters), **fields,
            )
            self._catalog.evict_for(txn, raw_id, cap, untimed=evict_untimed)  # only now: a put that fails evicts nothing
            return entry, keys, counts.get("stored_bytes", 0)

        entry, keys, added = self._group.write(self._backend.write, txn_fn)
        writer.keys.extend(keys)
        writer.new_stored += added
        return entry

