"""One store on a Redis Cluster against one on a single server, measured (not asserted):
``python -m benchmarks.cluster_spread [--size 100] [--rounds 30] [--puts 200] [--program valkey-server]``.

A fleet uses a cluster to hold more than one node can: what matters is where a store's
bytes land, and what reads cost when an entry's chunks are spread over the nodes.  In one
run, on the benchmark log of ``--size`` MB (``benchmarks/data.py``, made if missing):

* a standalone server and a cluster of three primaries without replicas (both
  ``--program``, started here on 127.0.0.1 with fresh directories and no RDB, stopped by
  their PIDs at the end: ``tests/servers.py``);
* the put of the log (``Store.put(path)``) into each, timed once;
* ``used_memory`` growth (``INFO memory``) of the server and of each primary, and per
  logical byte;
* the median over ``--rounds`` rounds, the two stores interleaved, of: a 100-line window
  in the middle (``lines``), a 2,000-character range in the middle (``range``), the last
  2,000 characters (``tail``), a search for an absent literal (``grep``), and the count
  of ``error|fail(ed|ure)`` case-insensitively (``count``, a fifth of the rounds), each
  store opened with its chunk cache off;
* then the median of ``--puts`` puts of 5 KB of the log (new text each time) into each,
  interleaved (``put5k``).

The program only uses blobpad's public API, so ``BLOBPAD_CHECKOUT=<another checkout>
python -m benchmarks.cluster_spread`` measures that checkout's blobpad (the layout before
or after a change; see ``benchmarks/__init__.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import blobpad

from .data import Dataset

_TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(_TESTS) not in sys.path:
    sys.path.append(str(_TESTS))

ABSENT = "no-such-request-7f3a9c"
COUNT = "error|fail(ed|ure)"
OPS = ("lines", "range", "tail", "grep", "count", "put5k")


def _used(nodes: list[Any]) -> list[int]:
    return [int(n.info("memory")["used_memory"]) for n in nodes]


def _reads(store: blobpad.Store, entry_id: str, lines: int, chars: int) -> dict[str, Any]:
    mid = lines // 2
    return {
        "lines": lambda: store.lines(entry_id, mid, mid + 99),
        "range": lambda: store.range(entry_id, chars // 2, chars // 2 + 2000),
        "tail": lambda: store.tail(entry_id, 2000),
        "grep": lambda: store.grep(entry_id, ABSENT, fixed=True),
        "count": lambda: store.count(entry_id, COUNT, ignore_case=True),
    }


def run(size_mb: int, rounds: int, program: str, puts: int) -> dict[str, Any]:
    import servers  # tests/servers.py

    ds = Dataset("log", size_mb)
    path = ds.path
    logical = path.stat().st_size
    with path.open("rb") as fh:
        small = fh.read(5000).decode("utf-8", "replace")
    out: dict[str, Any] = {"size_mb": size_mb, "logical": logical, "program": program, "rounds": rounds, "puts": puts,
                           "commit": blobpad.__file__}
    with servers.Server(program) as single, servers.Cluster(program, replicas=0) as cluster:
        setups = {"standalone": (single.url + "?namespace=bench", [single]),
                  "cluster": (cluster.url + "?namespace=bench", cluster.primaries)}
        stores: dict[str, tuple[blobpad.Store, str]] = {}
        for name, (url, nodes) in setups.items():
            before = _used(nodes)
            store = blobpad.open(url, cache_bytes=0)
            t0 = time.perf_counter()
            entry = store.put(path)
            out[f"{name}_put_s"] = time.perf_counter() - t0
            grown = [a - b for a, b in zip(_used(nodes), before, strict=True)]
            out[f"{name}_memory"] = grown
            stores[name] = (store, entry.id)
        first = stores["standalone"][0].stat(stores["standalone"][1])
        lines, chars = first.lines, first.chars
        times: dict[str, dict[str, list[float]]] = {name: {} for name in stores}
        for r in range(rounds):
            order = list(stores) if r % 2 == 0 else list(reversed(stores))
            for name in order:
                store, eid = stores[name]
                for op, fn in _reads(store, eid, lines, chars).items():
                    if op == "count" and r % 5:
                        continue
                    t0 = time.perf_counter()
                    fn()
                    times[name].setdefault(op, []).append(time.perf_counter() - t0)
        for r in range(puts):  # small offloads, new text each time, the two stores interleaved
            order = list(stores) if r % 2 == 0 else list(reversed(stores))
            for name in order:
                text = f"put {r} {name}\n" + small
                t0 = time.perf_counter()
                stores[name][0].put(text, session="small", turn=r)
                times[name].setdefault("put5k", []).append(time.perf_counter() - t0)
        out["medians"] = {name: {op: statistics.median(v) for op, v in ops.items()} for name, ops in times.items()}
        for store, _ in stores.values():
            store.close()
    return out


def report(res: dict[str, Any]) -> str:
    logical = res["logical"]
    rows = [f"{res['size_mb']} MB log ({logical:,} bytes), {res['program']}, {res['rounds']} rounds, "
            f"blobpad from {res['commit']}", ""]
    for name in ("standalone", "cluster"):
        mem = res[f"{name}_memory"]
        per = " + ".join(f"{m / 1e6:.1f}" for m in mem)
        rows.append(f"{name:<11} put {res[f'{name}_put_s']:.2f} s; used_memory growth {per} MB "
                    f"= {sum(mem) / 1e6:.1f} MB, {sum(mem) / logical:.3f} per logical byte")
    rows += ["", f"{'median ms':<11}" + "".join(f"{op:>9}" for op in OPS)]
    for name, ops in res["medians"].items():
        rows.append(f"{name:<11}" + "".join(f"{ops[op] * 1e3:>9.2f}" for op in OPS))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cluster_spread", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=100, help="MB of benchmark log (default 100)")
    ap.add_argument("--rounds", type=int, default=30, help="rounds of the reads (default 30)")
    ap.add_argument("--puts", type=int, default=200, help="5 KB puts into each store (default 200)")
    ap.add_argument("--program", default="valkey-server", help="the server program (default valkey-server)")
    args = ap.parse_args(argv)
    print(report(run(args.size, args.rounds, args.program, args.puts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
