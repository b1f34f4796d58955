"""What counting or listing every matching line of 100 MB costs at best, piece by piece (issue 16).

Run ``python -m benchmarks.scan_floor`` (``--size-mb 100``; the log is the benchmarks'
generated one, made on first use).  It cuts the log into chunks as blobpad does
(:func:`blobpad.chunking.cut_chunks`), compresses them with zstd level 1, and times,
on this machine, each part of a search that must read every chunk:

* decompressing every chunk (``zstandard``, one thread, then two);
* one RE2 search over the whole log for a pattern that never matches, with the
  options grep uses: the speed of RE2's DFA alone, no Python per match
  (``error|fail(ed|ure)`` case-insensitively, the count benchmark's pattern, made
  absent by a NUL after it, which no line has);
* counting the lines that match ``error|fail(ed|ure)`` with
  :class:`blobpad.search.LineCounter` (batched RE2 calls), one thread, then two;
* finding each matching line's start, one RE2 call per matching line (what listing
  every line with its number needs at least), one thread, then two;
* ``zstd -dc | rg -c`` and ``zstd -dc | rg -n`` on the same log, the peers of the
  issue's targets (when ``zstd`` and ``rg`` are installed).

Every figure is the median of ``--rounds`` (5) runs, in milliseconds.  The floor of
a count on two cores is (decompression + DFA scan) / 2, with no Python at all; the
lines that hold a match each cost at least one RE2 call, whose Python binding
releases the GIL on every call: with two threads making such short calls, the hand
over of the GIL costs more than the second core gives (compare the one- and
two-thread rows).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable

import re2
import zstandard

from blobpad.chunking import ChunkParams, cut_chunks
from blobpad.search import UNANCHORED, LineCounter, compile_pattern, re2_options

from .config import COUNT_PATTERN, SEED
from .data import Dataset


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _two_threads(work: Callable[[list[bytes]], object], items: list[bytes]) -> Callable[[], None]:
    def run() -> None:
        threads = [threading.Thread(target=work, args=(items[i::2],)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scan_floor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    ds = Dataset("log", args.size_mb, SEED)
    raw = ds.path.read_bytes()
    chunks = [bytes(c) for c in cut_chunks([raw], ChunkParams())]
    comp = zstandard.ZstdCompressor(level=1, write_content_size=True)
    frames = [comp.compress(c) for c in chunks]
    local = threading.local()

    def decompress(items: list[bytes]) -> None:
        d = zstandard.ZstdDecompressor()
        for f in items:
            d.decompress(f)

    # the pattern followed by a NUL, which no line has: the DFA does all its work and never matches
    # (a prefix would let RE2 skip ahead to it, which the pattern itself does not)
    absent = re2.compile(b"(?:" + COUNT_PATTERN.encode() + b")\x00", re2_options(True, False))._regexp

    def dfa() -> None:
        absent.Match(UNANCHORED, raw, 0, len(raw))

    counter = LineCounter(COUNT_PATTERN, ignore_case=True, fixed=False)

    def count(items: list[bytes]) -> int:
        return sum(counter.count(c, 0, len(c), True) for c in items)

    def starts(items: list[bytes]) -> int:
        find = getattr(local, "find", None)
        if find is None:
            find = local.find = compile_pattern(COUNT_PATTERN, ignore_case=True)._regexp.Match
        n = 0
        for c in items:
            pos, end = 0, len(c)
            while pos < end:
                s = find(UNANCHORED, c, pos, end)[0][0]
                if s < 0:
                    break
                n += 1
                nl = c.find(b"\n", s)
                pos = end if nl < 0 else nl + 1
        return n

    rows: list[tuple[str, float | str, float | str]] = [
        (f"{len(chunks)} chunks, {len(raw) / 2**20:.0f} MiB", "", ""),
        ("zstd decompression of every chunk", _median_ms(lambda: decompress(frames), args.rounds),
         _median_ms(_two_threads(decompress, frames), args.rounds)),
        ("RE2 DFA over the whole log, no match", _median_ms(dfa, args.rounds), ""),
        (f"LineCounter: lines matching {COUNT_PATTERN} -i ({count(chunks):,})",
         _median_ms(lambda: count(chunks), args.rounds), _median_ms(_two_threads(count, chunks), args.rounds)),
        ("one RE2 call per matching line (its start)", _median_ms(lambda: starts(chunks), args.rounds),
         _median_ms(_two_threads(starts, chunks), args.rounds)),
    ]
    zstd, rg = shutil.which("zstd"), shutil.which("rg")
    if zstd and rg:
        zst = ds.zst_path()
        for label, flags in (("zstd -dc | rg -c -i", "-c"), ("zstd -dc | rg -n -i > /dev/null", "-n")):
            cmd = f"{zstd} -dc {zst} | {rg} {flags} -i '{COUNT_PATTERN}' > /dev/null"
            rows.append((label, _median_ms(lambda c=cmd: subprocess.run(c, shell=True, check=True), args.rounds),
                         ""))
    print("| step | 1 thread, ms | 2 threads, ms |\n|---|--:|--:|")
    for label, one, two in rows:
        print(f"| {label.replace('|', chr(92) + '|')} | {_cell(one)} | {_cell(two)} |")


def _cell(value: float | str) -> str:
    return f"{value:,.1f}" if isinstance(value, float) else value


if __name__ == "__main__":
    main()
