"""Operations on many entries at once, measured (not asserted):
``python -m benchmarks.bulk_ops [--entries 5000] [--engines lmdb,valkey]``.

An agent fleet keeps many small observations per session and deletes, lists, expires
and searches them together; each of these must cost a bounded number of requests and
never hold other writers back for long.  In one run, per engine (an LMDB store in a
temporary directory, sync on; a Valkey server started here on 127.0.0.1, without AOF,
stopped by its PID at the end), each operation on a store of ``--entries`` entries of
about 300 bytes:

* ``delete_session``: ``Store.delete_session`` of a session of that many entries, alone;
* ``delete_session_busy``: the same while a thread puts into another session without a
  pause; with the longest of that thread's puts meanwhile (``writer_max_ms``);
* ``gc``: ``Store.gc()`` when all of them have expired (the store's clock moved on);
* ``evict_put``: the median of 100 puts into a store at its ``max_bytes`` (each evicts);
* ``entries``: ``Store.entries(session=...)`` listing all of them (median of 5);
* ``grep_session_first`` and ``grep_session``: ``Store.grep_session`` of a literal over
  all of them (with names), the first search (which builds the chunk filters) and the next;
* ``first_read``: the mean of ``Store.tail(id, 200)`` of each entry from another handle
  opened with its cache off, as a host that has not read them yet;
* ``expiry_backlog``: puts without a pause for ``--backlog-seconds`` (10), each with
  ``ttl=1``, then the expired entries not removed yet (``Stats.expired_entries``, shown as
  ``expired``) and the puts made (``puts``): what a process offloading at full speed
  leaves behind without calling ``gc()``.

On Valkey, each figure comes with the script calls the server counted
(``INFO commandstats``, ``EVALSHA``): the requests it took.  The program only uses
blobpad's public API, so ``BLOBPAD_CHECKOUT=<another checkout> python -m
benchmarks.bulk_ops`` measures that checkout's blobpad (see ``benchmarks/__init__.py``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blobpad

from . import redis_server

ENGINES = ("lmdb", "valkey")


def _body(i: int) -> str:
    return "".join(f"entry {i} line {k} status=ok\n" for k in range(10)) + ("ERROR boom\n" if i % 50 == 0 else "")


class _Calls:
    """The server's count of script calls (None without a server)."""

    def __init__(self, srv: Any) -> None:
        self.client = None if srv is None else srv.client()

    def reset(self) -> None:
        if self.client is not None:
            self.client.config_resetstat()

    def count(self) -> int | None:
        if self.client is None:
            return None
        return int(self.client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


#: the directories of the LMDB stores a run made: removed when it ends
_MADE: list[str] = []


def _target(engine: str, tag: str) -> str:
    if engine == "lmdb":
        _MADE.append(tempfile.mkdtemp(prefix=f"bulk-{tag}-"))
        return str(Path(_MADE[-1]) / "store")
    return redis_server.store_url(redis_server.url(), redis_server.namespace(tag))


def _fill(store: blobpad.Store, n: int, session: str, ttl: float | None = None) -> list[str]:
    return [store.put(_body(i), session=session, name=f"logs/f{i}.log" if i % 2 else None, ttl=ttl).id
            for i in range(n)]


def _timed(fn: Callable[[], Any], calls: _Calls) -> tuple[float, int | None, Any]:
    calls.reset()
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1e3, calls.count(), out


def run(engine: str, n: int, backlog_seconds: float = 10.0) -> list[dict[str, Any]]:
    srv = redis_server.server() if engine == "valkey" else None
    calls = _Calls(srv)
    rows: list[dict[str, Any]] = []

    def row(op: str, ms: float, count: int | None, **extra: Any) -> None:
        rows.append({"engine": engine, "op": op, "ms": ms, "calls": count, **extra})
        shown = "" if count is None else f"  {count:,} script calls"
        more = "".join(f"  {k} {v:,.1f}" if isinstance(v, float) else f"  {k} {v:,}" for k, v in extra.items())
        print(f"  {engine:7} {op:20} {ms:10.3f} ms{shown}{more}", flush=True)

    try:
        # delete_session, alone and beside a busy writer
        with blobpad.open(_target(engine, "del")) as s:
            _fill(s, n, "big")
            ms, c, _ = _timed(lambda: s.delete_session("big"), calls)
            row("delete_session", ms, c)
            _fill(s, n, "big")
            stop = threading.Event()
            waits: list[float] = []

            def writer() -> None:
                i = 0
                while not stop.is_set():
                    t0 = time.perf_counter()
                    s.put(f"other {i}\n", session="other")
                    waits.append(time.perf_counter() - t0)
                    i += 1

            th = threading.Thread(target=writer)
            th.start()
            try:
                ms, c, _ = _timed(lambda: s.delete_session("big"), calls)
            finally:
                stop.set()
                th.join(timeout=600)
            row("delete_session_busy", ms, c, writer_max_ms=max(waits, default=0.0) * 1e3)
        # gc of expired entries
        now = [1_800_000_000.0]
        with blobpad.open(_target(engine, "gc"), clock=lambda: now[0]) as s:
            _fill(s, n, "big", ttl=10)
            now[0] += 11
            ms, c, _ = _timed(s.gc, calls)
            row("gc", ms, c)
        # puts at the cap
        target = _target(engine, "evict")
        with blobpad.open(target) as s:
            for i in range(n):
                s.put(_body(i), session="big", ttl=3600 + i)
            cap = s.stats().stored_bytes
        with blobpad.open(target, max_bytes=cap) as s:
            times = []
            calls.reset()
            for i in range(100):
                t0 = time.perf_counter()
                s.put(_body(n + i), session="new", ttl=None)
                times.append(time.perf_counter() - t0)
            c = calls.count()
            row("evict_put", statistics.median(times) * 1e3, None if c is None else c // 100)
        # listing, searching, first reads
        target = _target(engine, "list")
        with blobpad.open(target) as s:
            ids = _fill(s, n, "big")
            listed = [_timed(lambda: s.entries(session="big"), calls) for _ in range(5)]
            row("entries", statistics.median(x[0] for x in listed), listed[0][1])
            ms, c, _ = _timed(lambda: s.grep_session("big", "ERROR", fixed=True, max_matches=10_000), calls)
            row("grep_session_first", ms, c)
            ms, c, _ = _timed(lambda: s.grep_session("big", "ERROR", fixed=True, max_matches=10_000), calls)
            row("grep_session", ms, c)
        with blobpad.open(target, cache_bytes=0) as other:
            ms, c, _ = _timed(lambda: [other.tail(i, 200) for i in ids], calls)
            row("first_read", ms / len(ids), None if c is None else round(c / len(ids)))
        # expired entries left behind by a process putting at full speed, without gc()
        with blobpad.open(_target(engine, "backlog")) as s:
            t0 = time.perf_counter()
            puts = 0
            while time.perf_counter() - t0 < backlog_seconds:
                s.put(_body(puts), session="fast", ttl=1)
                puts += 1
            st = s.stats()
            row("expiry_backlog", (time.perf_counter() - t0) * 1e3, None, puts=puts, expired=st.expired_entries)
    finally:
        calls.close()
        while _MADE:
            shutil.rmtree(_MADE.pop(), ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bulk_ops", description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=5000, help="entries per store (default 5000)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated: lmdb, valkey")
    ap.add_argument("--backlog-seconds", type=float, default=10.0, help="seconds of puts for expiry_backlog (default 10)")
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    if "valkey" in engines and redis_server.unavailable():
        print(f"  (valkey left out: {redis_server.unavailable()})")
        engines.remove("valkey")
    print(f"{args.entries:,} entries per store; blobpad from {Path(blobpad.__file__).parent}")
    try:
        for engine in engines:
            run(engine, args.entries, args.backlog_seconds)
    finally:
        redis_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
