"""How often concurrent puts on the Redis engine conflict: ``python -m benchmarks.redis_conflicts``.

``--procs`` processes (4) put 5 KB observations of their own into one store, in one
session and turn, for ``--seconds`` (5) on a Valkey server of the test extra without AOF
(:mod:`benchmarks.redis_server`).  Each process counts the outcomes of the engine's
commits (a wrapper around its commit step: "ok", or "conflict" when another writer
changed something the transaction read, and it runs again) and the puts it made; the
totals and puts per second are printed.  A measurement, not a test: it reads a private
method of the engine, and its figures go to ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from typing import Any

from benchmarks import redis_server


def _worker(url: str, seconds: float, out: Any) -> None:
    import blobpad
    from blobpad.engine.redis import RedisEngine

    outcomes: dict[str, int] = {}
    real = RedisEngine._commit

    def counted(self: RedisEngine, txn: Any, frees: bool) -> str:
        status = real(self, txn, frees)
        outcomes[status] = outcomes.get(status, 0) + 1
        return status

    RedisEngine._commit = counted  # type: ignore[method-assign]
    text = "".join(f"2026-11-24T09:00:{i % 60:02d} worker {os.getpid()} request {i} ok\n" for i in range(110))
    puts = 0
    with blobpad.open(url) as store:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            store.put(f"{text}{puts}\n", session="bench", turn=1)
            puts += 1
    out.put((puts, outcomes))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    reason = redis_server.unavailable()
    if reason:
        raise SystemExit(f"no Valkey server: {reason}")
    try:
        url = redis_server.store_url(redis_server.url(), redis_server.namespace("conflicts"))
        out: Any = multiprocessing.get_context("spawn").Queue()
        procs = [multiprocessing.get_context("spawn").Process(target=_worker, args=(url, args.seconds, out))
                 for _ in range(args.procs)]
        for p in procs:
            p.start()
        results = [out.get(timeout=args.seconds + 120) for _ in procs]
        for p in procs:
            p.join(60)
    finally:
        redis_server.stop()
    puts = sum(r[0] for r in results)
    totals: dict[str, int] = {}
    for _, outcomes in results:
        for k, v in outcomes.items():
            totals[k] = totals.get(k, 0) + v
    commits = sum(totals.values())
    print(f"{args.procs} processes, {args.seconds:g} s: {puts} puts ({puts / args.seconds:,.0f} puts/s), "
          f"{commits} commits, {totals.get('conflict', 0)} conflicts "
          f"({100 * totals.get('conflict', 0) / max(commits, 1):.2f}%), outcomes {totals}")


if __name__ == "__main__":
    main()
