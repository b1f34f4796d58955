"""Small offloads, measured (not asserted): ``python -m benchmarks.small_puts``.

An agent runtime offloads every observation over a few KB (seed 000: over 4 KB), so
the put that matters most is a small one.  Two measurements, each peer in a fresh
directory of its own under a temporary directory:

* ``latency [--rounds 200] [--sizes 5,50] [--sync both]``: one process puts log text
  of 5 KB and 50 KB (new text every round), the peers interleaved round-robin in one
  run (the starting peer rotates every round), and prints the median and p90 of each
  peer and its ratio to a bare LMDB write transaction of the same bytes, per sync
  setting;
* ``throughput [--procs 4] [--seconds 10] [--slices 5] [--sync on]``: ``--procs``
  processes put 5 KB observations (each one different) into one store for
  ``--seconds`` in all, in ``--slices`` turns with the peers alternating, and the total
  puts per second is printed per peer;
* ``threads [--threads 1,4,8] [--seconds 5] [--sync on]``: the same with threads of
  one process sharing one store (blobpad commits the final transactions of puts made
  at the same time together), with blobpad's write transactions per put.

The peers, with the same text and, per table, the same sync setting:

* ``blobpad``: ``Store.put(text, session=..., turn=...)`` on a store opened with
  ``sync=``;
* ``lmdb``: one bare LMDB write transaction putting the UTF-8 bytes under a random
  16-byte key (``lmdb.open(sync=, metasync=)``): the floor for anything built on LMDB;
* ``lmdb-layout`` (latency and throughput): one bare LMDB write transaction putting what a blobpad
  put writes, without blobpad's Python: the text compressed (zstd level 1, as a store's
  default) under a random chunk key, its reference record, an entry record of the same
  size holding its chunk list (format 3), the session index key naming the turn, the
  expiry key and the writer's counters shard (no creation index of every entry, no
  content index: a put of this size writes neither), each in its own named database as
  in a store: the floor of blobpad's layout (every tree a transaction touches is
  written and flushed on commit);
* ``lmdb-merged`` (latency and throughput): the same records in two trees, each chunk
  beside its reference record in one, every catalog record in the other under a
  one-byte tag of its keyspace: what a store's layout costs with its trees merged
  (fewer pages written and flushed per commit), keys and records unchanged;
* ``lmdb-session`` (latency and throughput): the floor of the layout issue 13 asks for,
  in one bare LMDB write transaction: the compressed text under a random chunk key in a
  chunk tree, and in one catalog tree, under keys that start with the session, an entry
  record with its chunk list inline and one creation-order key; no reference count, no
  global index, no counters record (chunk lifetimes and expiry left to the engine);
* ``sqlite-seed``: seed 000's design (:class:`benchmarks.peers.SqliteSeedWriter`'s
  schema and row: content, head+tail summary, turn, expiry), default rollback
  journal, ``synchronous=FULL`` (sync on) or ``OFF`` (sync off);
* ``sqlite-wal``: the same row in WAL mode, ``synchronous=FULL`` (sync on) or ``OFF``.

Sync on means every commit is flushed to disk before the put returns (an
acknowledged put survives a crash of the operating system or a power cut); sync off
leaves the flush to the operating system (it survives a killed process only).  Every
put is checked afterwards (size read back).  Text comes from :func:`blobpad.sample.log_lines`,
so the benchmark needs nothing outside the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import multiprocessing
import os
import queue
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import zstandard

import blobpad
from blobpad import sample

from . import redis_server
from .peers import SEED_INDEXES, SEED_SCHEMA, SEED_TTL, seed_summary

PEERS = ("blobpad", "lmdb", "lmdb-layout", "lmdb-merged", "lmdb-session", "sqlite-seed", "sqlite-wal")
THROUGHPUT_PEERS = ("blobpad", "lmdb", "sqlite-wal")
#: the throughput of processes (``blobpad-redis`` only where a Valkey server can be started: see :func:`process_peers`)
PROCESS_PEERS = ("blobpad", "blobpad-redis", "lmdb", "lmdb-layout", "lmdb-merged", "lmdb-session", "sqlite-wal")
#: the environment variable through which the throughput run's processes learn the Valkey server's URL
#: (``..._AOF`` for sync on, ``..._NOAOF`` for sync off)
REDIS_URL_ENV = "BLOBPAD_BENCH_REDIS_URL"


def texts(size: int, count: int, seed: int = 0) -> list[str]:
    """``count`` different log texts of about ``size`` bytes each (whole lines)."""
    lines = sample.log_lines(seed)
    out = []
    for _ in range(count):
        parts: list[str] = []
        total = 0
        while total < size:
            line = next(lines)
            parts.append(line)
            total += len(line) + 1
        out.append("\n".join(parts) + "\n")
    return out


class Peer:
    """One store of one peer, in its own directory; ``put`` returns a handle, ``check`` reads it back."""

    def __init__(self, directory: Path, sync: bool) -> None:
        self.directory = directory
        self.sync = sync
        directory.mkdir(parents=True, exist_ok=True)

    def put(self, text: str) -> Any:
        raise NotImplementedError

    def check(self, handle: Any, text: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class BlobpadPeer(Peer):
    def __init__(self, directory: Path, sync: bool) -> None:
        super().__init__(directory, sync)
        self.store = blobpad.open(directory / "store", sync=sync)
        self.turn = 0

    def put(self, text: str) -> Any:
        self.turn += 1
        return self.store.put(text, session="bench", turn=self.turn).id

    def check(self, handle: Any, text: str) -> None:
        assert self.store.stat(handle).size_bytes == len(text.encode()), handle

    def close(self) -> None:
        self.store.close()


class BlobpadRedisPeer(Peer):
    """blobpad on the Redis engine: ``Store.put(text, session=..., turn=...)`` on a Valkey server over loopback.

    The server is the run's (its URL in ``REDIS_URL_ENV``, set by the parent of the
    throughput run's processes; else this process starts one): sync on is a server
    writing an AOF fsynced before every reply (``appendfsync always``), sync off one
    without AOF.  The store's namespace is named after ``directory``, so every process
    given the same directory opens the same store.
    """

    def __init__(self, directory: Path, sync: bool) -> None:
        super().__init__(directory, sync)
        base = os.environ.get(_redis_env(sync)) or redis_server.url(appendonly=sync)
        ns = "sp-" + hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
        self.store = blobpad.open(redis_server.store_url(base, ns))
        self.turn = 0

    def put(self, text: str) -> Any:
        self.turn += 1
        return self.store.put(text, session="bench", turn=self.turn).id

    def check(self, handle: Any, text: str) -> None:
        assert self.store.stat(handle).size_bytes == len(text.encode()), handle
        assert self.store.range(handle, 0, len(text)) == text, handle

    def close(self) -> None:
        self.store.close()


def _redis_env(sync: bool) -> str:
    return f"{REDIS_URL_ENV}_{'AOF' if sync else 'NOAOF'}"


def process_peers() -> tuple[str, ...]:
    """The peers of the throughput run here: ``blobpad-redis`` only if a Valkey server can be started."""
    reason = redis_server.unavailable()
    if reason:
        print(f"  (blobpad-redis left out: {reason})")
        return tuple(p for p in PROCESS_PEERS if p != "blobpad-redis")
    return PROCESS_PEERS


class LmdbPeer(Peer):
    def __init__(self, directory: Path, sync: bool) -> None:
        super().__init__(directory, sync)
        self.env = lmdb.open(str(directory / "lmdb"), map_size=4 << 30, sync=sync, metasync=sync)

    def put(self, text: str) -> Any:
        key = secrets.token_bytes(16)
        with self.env.begin(write=True) as txn:
            txn.put(key, text.encode())
        return key

    def check(self, handle: Any, text: str) -> None:
        with self.env.begin() as txn:
            assert txn.get(handle) == text.encode(), handle

    def close(self) -> None:
        self.env.close()


class LmdbLayoutPeer(Peer):
    """The records of a blobpad put, in the trees of a store, from one bare LMDB transaction."""

    _SPACES = ("meta", "entries", "chunks", "refs", "by_scope", "expiry")

    def __init__(self, directory: Path, sync: bool) -> None:
        super().__init__(directory, sync)
        self.env = lmdb.open(str(directory / "lmdb"), map_size=4 << 30, max_dbs=16, sync=sync, metasync=sync)
        self.dbs = {name: self.env.open_db(name.encode()) for name in self._trees()}
        self.compressor = zstandard.ZstdCompressor(level=1, write_content_size=True)
        self.seq = 0

    def _trees(self) -> tuple[str, ...]:
        return self._SPACES

    def _where(self, space: str, key: bytes) -> tuple[Any, bytes]:
        """The tree and the key a record of ``space`` is written under."""
        return self.dbs[space], key

    def put(self, text: str) -> Any:
        raw = text.encode()
        frame = self.compressor.compress(raw)
        chunk, entry_id = secrets.token_bytes(17), secrets.token_bytes(8)
        self.seq += 1
        seq = self.seq.to_bytes(8, "big")
        expires = int((time.time() + 3600) * 1e6).to_bytes(8, "big")
        # an entry record of a put with a session and a turn, its chunk list of one chunk after it
        record = b"e" * 500
        rows = [
            ("chunks", chunk, frame), ("refs", chunk, b"r" * 24), ("entries", entry_id, record),
            ("by_scope", b"S\0\0\0\x05bench" + seq + entry_id, entry_id + b"i\0\0\0\x011"),  # the id, turn 1
            ("expiry", expires + seq + entry_id, b""),
            ("meta", b"counters:\x05", b"c" * 56),  # this writer's counters shard
        ]
        with self.env.begin(write=True) as txn:
            for space, key, value in rows:
                db, where = self._where(space, key)
                txn.put(where, value, db=db)
        return chunk, len(frame)

    def check(self, handle: Any, text: str) -> None:
        db, key = self._where("chunks", handle[0])
        with self.env.begin() as txn:
            frame = txn.get(key, db=db)
            assert frame is not None and len(frame) == handle[1], handle

    def close(self) -> None:
        self.env.close()


class LmdbMergedPeer(LmdbLayoutPeer):
    """``lmdb-layout``'s records in two trees: each chunk beside its reference record, and
    every catalog record in one tree under a one-byte tag of its keyspace."""

    _TAGS = {space: bytes([i]) for i, space in enumerate(LmdbLayoutPeer._SPACES)}

    def _trees(self) -> tuple[str, ...]:
        return ("chunks", "catalog")

    def _where(self, space: str, key: bytes) -> tuple[Any, bytes]:
        if space in ("chunks", "refs"):
            return self.dbs["chunks"], key + (b"\0" if space == "chunks" else b"\1")
        return self.dbs["catalog"], self._TAGS[space] + key


class LmdbSessionPeer(Peer):
    """The records of a put in a session-scoped layout, from one bare LMDB transaction."""

    def __init__(self, directory: Path, sync: bool) -> None:
        super().__init__(directory, sync)
        self.env = lmdb.open(str(directory / "lmdb"), map_size=4 << 30, max_dbs=4, sync=sync, metasync=sync)
        self.chunks = self.env.open_db(b"chunks")
        self.catalog = self.env.open_db(b"catalog")
        self.compressor = zstandard.ZstdCompressor(level=1, write_content_size=True)
        self.session = b"\0\0\0\x05bench"

    def put(self, text: str) -> Any:
        frame = self.compressor.compress(text.encode())
        chunk, entry_id = secrets.token_bytes(17), secrets.token_bytes(8)
        seq = time.time_ns().to_bytes(8, "big")
        record = b"e" * 500  # an entry record of about 420 bytes with a chunk list of one chunk inline
        with self.env.begin(write=True) as txn:
            txn.put(chunk, frame, db=self.chunks)
            txn.put(self.session + b"E" + entry_id, record, db=self.catalog)
            txn.put(self.session + b"Q" + seq + entry_id, b"", db=self.catalog)
        return chunk, len(frame)

    def check(self, handle: Any, text: str) -> None:
        with self.env.begin() as txn:
            frame = txn.get(handle[0], db=self.chunks)
            assert frame is not None and len(frame) == handle[1], handle

    def close(self) -> None:
        self.env.close()


class SqliteSeedPeer(Peer):
    """Seed 000's table and row; ``wal`` switches the journal to WAL."""

    wal = False

    def __init__(self, directory: Path, sync: bool) -> None:
        super().__init__(directory, sync)
        db = directory / "scratchpad.db"
        fresh = not db.exists()
        self.conn = sqlite3.connect(db, timeout=60)
        if self.wal and self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self.conn.execute("PRAGMA journal_mode=WAL")  # persistent: once per database (it takes a lock at once)
        self.conn.execute(f"PRAGMA synchronous={'FULL' if sync else 'OFF'}")
        if fresh:
            try:
                self.conn.executescript(SEED_SCHEMA.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS")
                                        + SEED_INDEXES.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS"))
                self.conn.commit()
            except sqlite3.OperationalError:  # another process of the throughput run made it first
                self.conn.rollback()

    def put(self, text: str) -> Any:
        now = time.time()
        entry_id = secrets.token_hex(8)
        self.conn.execute(
            "INSERT INTO entries (id, turn_id, step_num, executor_name, content_kind, content, size_bytes,"
            " summary, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry_id, uuid.uuid4().hex, 1, "fs_read", "text", text, len(text.encode()),
             seed_summary(text), now, now + SEED_TTL),
        )
        self.conn.commit()
        return entry_id

    def check(self, handle: Any, text: str) -> None:
        row = self.conn.execute("SELECT size_bytes, content FROM entries WHERE id = ?", (handle,)).fetchone()
        assert row == (len(text.encode()), text), handle

    def close(self) -> None:
        self.conn.close()


class SqliteWalPeer(SqliteSeedPeer):
    wal = True


#: the longest a run waits for its threads or processes to start, in seconds
_WAIT = 60.0

MAKERS: dict[str, Callable[[Path, bool], Peer]] = {
    "blobpad": BlobpadPeer, "blobpad-redis": BlobpadRedisPeer, "lmdb": LmdbPeer, "lmdb-layout": LmdbLayoutPeer,
    "lmdb-merged": LmdbMergedPeer, "lmdb-session": LmdbSessionPeer,
    "sqlite-seed": SqliteSeedPeer, "sqlite-wal": SqliteWalPeer,
}


def _last_txnid(path: Path) -> int:
    """LMDB's last committed write transaction at ``path``, read by another process (the store is open here)."""
    code = "import lmdb, sys; print(lmdb.open(sys.argv[1], readonly=True, max_dbs=32).info()['last_txnid'])"
    return int(subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                              check=True).stdout)


def _put_from_threads(name: str, directory: Path, sync: bool, n: int, seconds: float, bodies: list[str]) -> tuple[int, int]:
    """``n`` threads putting into one store of peer ``name`` for ``seconds``: (puts, blobpad's write transactions)."""
    shared = MAKERS[name](directory, sync) if name != "sqlite-wal" else None  # SQLite: a connection per thread
    if shared is None:
        MAKERS[name](directory, sync).close()  # the database made once (schema, WAL mode), not by racing threads
    done = [0] * n
    errors: list[BaseException] = []
    barrier = threading.Barrier(n + 1)

    def run(i: int) -> None:
        try:
            peer = shared or MAKERS[name](directory, sync)
            barrier.wait(timeout=_WAIT)
            deadline = time.perf_counter() + seconds
            k = 0
            last: tuple[Any, str] | None = None
            while time.perf_counter() < deadline:
                text = f"thread={i} put={k}\n" + bodies[k % len(bodies)]
                last = (peer.put(text), text)
                k += 1
            if last is not None:
                peer.check(*last)
            if shared is None:
                peer.close()
            done[i] = k
        except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread; never leave it waiting
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for w in workers:
        w.start()
    before = _last_txnid(directory / "store") if name == "blobpad" else 0
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread failed: its error is raised below
        barrier.wait(timeout=_WAIT)
    for w in workers:
        w.join(timeout=seconds + _WAIT)
    if errors:
        raise errors[0]
    if any(w.is_alive() for w in workers):
        raise RuntimeError(f"a {name} thread did not finish within {seconds + _WAIT:g} s")
    txns = _last_txnid(directory / "store") - before if name == "blobpad" else 0
    if shared is not None:
        shared.close()
    return sum(done), txns


def threads(counts: list[int], seconds: float, syncs: list[bool], workdir: Path) -> list[dict[str, Any]]:
    """Total puts/s of threads of one process sharing one store, per peer; print and return the rows."""
    rows: list[dict[str, Any]] = []
    bodies = texts(5000, 64, seed=7)
    for sync in syncs:
        print(f"\n{_sync_label(sync)}")
        print(f"  threads of one process putting 5 KB observations for {seconds:g} s into one store")
        print(f"    {'threads':>7} {'peer':12} {'puts/s':>8} {'x lmdb':>7} {'txns/put':>9}")
        for n in counts:
            rates: dict[str, float] = {}
            for name in ("lmdb", "blobpad", "sqlite-wal"):
                directory = workdir / f"th-{'sync' if sync else 'nosync'}-{n}-{name}"
                puts, txns = _put_from_threads(name, directory, sync, n, seconds, bodies)
                rates[name] = puts / seconds
                per = f"{txns / max(1, puts):9.2f}" if name == "blobpad" else ""
                print(f"    {n:7} {name:12} {rates[name]:8.0f} {rates[name] / rates['lmdb']:7.2f} {per:>9}")
                rows.append({"test": "threads", "sync": sync, "threads": n, "seconds": seconds, "peer": name,
                             "puts_per_s": rates[name], "ratio_lmdb": rates[name] / rates["lmdb"],
                             **({"txns_per_put": txns / max(1, puts)} if name == "blobpad" else {})})
    return rows


def _sync_label(sync: bool) -> str:
    if sync:
        return "sync on (fsync on every commit: survives a killed process and an OS crash or power loss)"
    return "sync off (no fsync: survives a killed process, not an OS crash or power loss)"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(rounds: int, sizes_kb: list[int], syncs: list[bool], workdir: Path, warmup: int = 10) -> list[dict[str, Any]]:
    """Time ``rounds`` puts per peer, size and sync setting, interleaved; print and return the rows."""
    rows: list[dict[str, Any]] = []
    for sync in syncs:
        print(f"\n{_sync_label(sync)}")
        for kb in sizes_kb:
            data = texts(kb * 1000, rounds + warmup, seed=kb)
            peers = {name: MAKERS[name](workdir / f"lat-{'sync' if sync else 'nosync'}-{kb}-{name}", sync)
                     for name in PEERS}
            times: dict[str, list[float]] = {name: [] for name in PEERS}
            handles: dict[str, list[Any]] = {name: [] for name in PEERS}
            try:
                order = list(PEERS)
                for i, text in enumerate(data):
                    order = order[1:] + order[:1]  # rotate: no peer always runs first
                    for name in order:
                        t0 = time.perf_counter()
                        handle = peers[name].put(text)
                        dt = time.perf_counter() - t0
                        if i >= warmup:
                            times[name].append(dt)
                        handles[name].append(handle)
                for name, peer in peers.items():
                    for handle, text in zip(handles[name], data, strict=True):
                        peer.check(handle, text)
            finally:
                for peer in peers.values():
                    peer.close()
            base = statistics.median(times["lmdb"])
            print(f"  {kb} KB puts (text of {len(data[0].encode()):,} bytes), {rounds} rounds each, interleaved")
            print(f"    {'peer':12} {'median ms':>10} {'p90 ms':>8} {'x lmdb':>7}")
            for name in PEERS:
                med = statistics.median(times[name])
                p90 = _quantile(times[name], 0.9)
                print(f"    {name:12} {med * 1e3:10.3f} {p90 * 1e3:8.3f} {med / base:7.2f}")
                rows.append({"test": "latency", "sync": sync, "size_kb": kb, "peer": name, "rounds": rounds,
                             "median_ms": med * 1e3, "p90_ms": p90 * 1e3, "ratio_lmdb": med / base})
    return rows


def _writer(name: str, directory: str, sync: bool, seconds: float, child: int,
            ready: Any, go: Any, out: Any) -> None:
    """One process of the throughput run: open, wait for the start, put until the time is up."""
    peer = MAKERS[name](Path(directory), sync)
    bodies = texts(5000, 64, seed=100 + child % 16)
    ready.release()
    go.wait()
    n = 0
    deadline = time.perf_counter() + seconds
    last: tuple[Any, str] | None = None
    while time.perf_counter() < deadline:
        # every observation is different (a first line of its own), as in a real run
        text = f"writer={child} put={n} t={time.time():.6f}\n" + bodies[n % len(bodies)]
        last = (peer.put(text), text)
        n += 1
    elapsed = time.perf_counter() - deadline + seconds
    if last is not None:
        peer.check(*last)
    peer.close()
    out.put((n, elapsed))


def _run_writers(ctx: Any, name: str, directory: Path, sync: bool, procs: int, seconds: float,
                 tag: int) -> tuple[int, float]:
    """``procs`` processes putting into the store of ``name`` for ``seconds``: (puts, seconds taken)."""
    MAKERS[name](directory, sync).close()  # the store made once, not by racing processes
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    out = ctx.Queue()
    workers = [ctx.Process(target=_writer, args=(name, str(directory), sync, seconds, tag * procs + i, ready, go, out))
               for i in range(procs)]
    for w in workers:
        w.start()
    try:
        for _ in workers:  # every wait is bounded: a writer that dies never leaves the run waiting
            if not ready.acquire(timeout=_WAIT):
                raise RuntimeError(f"a {name} writer did not start within {_WAIT:g} s (exit codes "
                                   f"{[w.exitcode for w in workers]})")
        go.set()
        try:
            counts = [out.get(timeout=seconds + _WAIT) for _ in workers]
        except queue.Empty:
            raise RuntimeError(f"a {name} writer did not report within {seconds + _WAIT:g} s (exit codes "
                               f"{[w.exitcode for w in workers]})") from None
        for w in workers:
            w.join(timeout=_WAIT)
            if w.exitcode:
                raise RuntimeError(f"a {name} writer failed (exit code {w.exitcode})")
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
                w.join(timeout=_WAIT)
    return sum(n for n, _ in counts), max(elapsed for _, elapsed in counts)


def throughput(procs: int, seconds: float, syncs: list[bool], workdir: Path, slices: int = 5) -> list[dict[str, Any]]:
    """Total puts/s of ``procs`` processes per peer; print and return the rows.

    Each peer's ``seconds`` are cut into ``slices`` runs, the peers taking turns, so
    that a change in the machine's load (a disk shared with other jobs) falls on all
    of them alike.  ``blobpad-redis`` puts into a Valkey server this function starts
    (per sync setting: with an AOF fsynced before every reply for sync on, without AOF
    for sync off) and stops by its PID at the end.
    """
    ctx = multiprocessing.get_context("spawn")
    rows: list[dict[str, Any]] = []
    peers = process_peers()
    started = []
    try:
        for sync in syncs:
            if "blobpad-redis" in peers:  # the writers, spawned, find the server through the environment
                started.append(redis_server.start(appendonly=sync))
                os.environ[_redis_env(sync)] = started[-1].url
            print(f"\n{_sync_label(sync)}")
            print(f"  {procs} processes putting 5 KB observations for {seconds:g} s into one store "
                  f"({slices} turns of {seconds / slices:g} s, peers alternating)")
            if "blobpad-redis" in peers:
                print("  (blobpad-redis: a Valkey server on 127.0.0.1, "
                      f"{'AOF with appendfsync always' if sync else 'no AOF'})")
            puts = dict.fromkeys(peers, 0)
            spent = dict.fromkeys(peers, 0.0)
            for name in peers:
                MAKERS[name](workdir / f"tp-{'sync' if sync else 'nosync'}-{name}", sync).close()  # made before the race
            for turn in range(slices):
                for name in peers:
                    n, elapsed = _run_writers(ctx, name, workdir / f"tp-{'sync' if sync else 'nosync'}-{name}", sync,
                                              procs, seconds / slices, turn)
                    puts[name] += n
                    spent[name] += elapsed
            base = puts["lmdb"] / spent["lmdb"]
            print(f"    {'peer':13} {'puts/s':>8} {'x lmdb':>7}")
            for name in peers:
                rate = puts[name] / spent[name]
                print(f"    {name:13} {rate:8.0f} {rate / base:7.2f}")
                rows.append({"test": "throughput", "sync": sync, "procs": procs, "seconds": seconds, "peer": name,
                             "puts_per_s": rate, "ratio_lmdb": rate / base})
    finally:
        for sync in syncs:
            os.environ.pop(_redis_env(sync), None)
        for srv in started:
            srv.close()  # stopped by its PID, its directory removed
    return rows


def cpu(puts: int, syncs: list[bool], workdir: Path, warmup: int = 200) -> list[dict[str, Any]]:
    """Process CPU time (user and system, ``time.process_time``) and wall time per 5 KB put, one
    peer at a time: ``warmup`` puts, then ``puts`` timed; print and return the rows.  With sync on,
    each put follows a flush that put the process to sleep, which the CPU figure shows."""
    rows: list[dict[str, Any]] = []
    data = texts(5000, puts + warmup, seed=5)
    for sync in syncs:
        print(f"\n{_sync_label(sync)}")
        print(f"    {'peer':12} {'cpu ms/put':>11} {'wall ms/put':>12}")
        for name in ("blobpad", "lmdb-layout", "lmdb"):
            peer = MAKERS[name](workdir / f"cpu-{'sync' if sync else 'nosync'}-{name}", sync)
            try:
                for text in data[:warmup]:
                    peer.put(text)
                c0, w0 = time.process_time(), time.perf_counter()
                for text in data[warmup:]:
                    peer.put(text)
                cpu_ms, wall_ms = (time.process_time() - c0) / puts * 1e3, (time.perf_counter() - w0) / puts * 1e3
            finally:
                peer.close()
            print(f"    {name:12} {cpu_ms:11.3f} {wall_ms:12.3f}")
            rows.append({"test": "cpu", "sync": sync, "peer": name, "puts": puts, "cpu_ms": cpu_ms, "wall_ms": wall_ms})
    return rows


def _syncs(value: str) -> list[bool]:
    return {"on": [True], "off": [False], "both": [True, False]}[value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.small_puts", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what")
    lat = sub.add_parser("latency", help="median and p90 of single puts, peers interleaved")
    lat.add_argument("--rounds", type=int, default=200)
    lat.add_argument("--sizes", default="5,50", help="sizes in KB (1 KB = 1000 bytes), comma-separated")
    lat.add_argument("--sync", choices=("on", "off", "both"), default="both")
    tp = sub.add_parser("throughput", help="puts/s of several processes")
    tp.add_argument("--procs", type=int, default=4)
    tp.add_argument("--seconds", type=float, default=10.0)
    tp.add_argument("--slices", type=int, default=5, help="turns the peers take, each of seconds/slices")
    tp.add_argument("--sync", choices=("on", "off", "both"), default="on")
    th = sub.add_parser("threads", help="puts/s of several threads of one process")
    th.add_argument("--threads", default="1,4,8", help="thread counts, comma-separated")
    th.add_argument("--seconds", type=float, default=5.0)
    th.add_argument("--sync", choices=("on", "off", "both"), default="on")
    cp = sub.add_parser("cpu", help="process CPU time and wall time per 5 KB put, one peer at a time")
    cp.add_argument("--puts", type=int, default=1000)
    cp.add_argument("--sync", choices=("on", "off", "both"), default="both")
    args = parser.parse_args(argv)
    whats = [args.what] if args.what else ["latency", "throughput"]
    with tempfile.TemporaryDirectory(prefix="blobpad-small-puts-", dir=os.environ.get("BLOBPAD_BENCH_TMP")) as d:
        for what in whats:
            if what == "latency":
                latency(getattr(args, "rounds", 200), [int(s) for s in getattr(args, "sizes", "5,50").split(",")],
                        _syncs(getattr(args, "sync", "both")), Path(d))
            elif what == "cpu":
                cpu(args.puts, _syncs(args.sync), Path(d))
            elif what == "threads":
                threads([int(n) for n in args.threads.split(",")], args.seconds, _syncs(args.sync), Path(d))
            else:
                throughput(getattr(args, "procs", 4), getattr(args, "seconds", 10.0),
                           _syncs(getattr(args, "sync", "on")), Path(d), getattr(args, "slices", 5))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
