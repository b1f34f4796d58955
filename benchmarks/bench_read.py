"""Slice reads: head, tail, a 2000-character range, 100-line windows.

Each benchmark cycles through 32 deterministic random positions (the middle of
the content for ``lines_mid``), times the peer, then checks the peer's answers
at several of them against the reference computed from the file.

blobpad runs on three engines: ``blobpad`` and ``blobpad-warm`` on LMDB (a
directory), ``blobpad-memory`` and ``blobpad-memory-warm`` on the memory engine
(``memory://``), ``blobpad-redis`` and ``blobpad-redis-warm`` on the Redis engine (a
Valkey server the run starts, over loopback), each with its chunk cache off and with
the 64 MB cache.  ``naive-redis`` is the Redis user without blobpad: the raw content as
one string key, ``GETRANGE`` for bytes, ``GET`` and Python for lines.
"""

from __future__ import annotations

from itertools import cycle

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from .config import KINDS, LINE_KINDS, SLICE_CHARS, WINDOW_LINES
from .harness import Bench, record

SLICE_PEERS = (
    "blobpad", "blobpad-warm", "blobpad-memory", "blobpad-memory-warm", "blobpad-redis", "blobpad-redis-warm",
    "sqlite-seed", "diskcache", "naive-redis", "mmap-re",
)
LINE_PEERS = (*SLICE_PEERS, "sed", "zstd-sed")
CHECKED = 4  # positions whose answers are compared with the reference after timing


@pytest.mark.kinds(*KINDS)
@pytest.mark.parametrize("peer", SLICE_PEERS)
def bench_head(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = bench.reader(peer, ds)
    record(benchmark, "head", ds, peer, chars=SLICE_CHARS)
    result = benchmark(reader.head, SLICE_CHARS)
    assert result == bench.truth(ds).head(SLICE_CHARS)


@pytest.mark.kinds(*KINDS)
@pytest.mark.parametrize("peer", SLICE_PEERS)
def bench_tail(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = bench.reader(peer, ds)
    record(benchmark, "tail", ds, peer, chars=SLICE_CHARS)
    result = benchmark(reader.tail, SLICE_CHARS)
    assert result == bench.truth(ds).tail(SLICE_CHARS)


@pytest.mark.kinds(*KINDS)
@pytest.mark.parametrize("peer", SLICE_PEERS)
def bench_range(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = bench.reader(peer, ds)
    truth = bench.truth(ds)
    starts = bench.positions("range", ds, 0, truth.length - SLICE_CHARS)
    it = cycle(starts)

    def read() -> str | bytes:
        start = next(it)
        return reader.range(start, start + SLICE_CHARS)

    record(benchmark, "range", ds, peer, chars=SLICE_CHARS)
    benchmark(read)
    for start in starts[:CHECKED]:
        assert reader.range(start, start + SLICE_CHARS) == truth.range(start, start + SLICE_CHARS), start


def _lines(benchmark: BenchmarkFixture, bench: Bench, op: str, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = bench.reader(peer, ds)
    truth = bench.truth(ds)
    middle = [max(1, truth.n_lines // 2 - WINDOW_LINES // 2)]
    firsts = middle if op == "lines_mid" else bench.positions(op, ds, 1, max(1, truth.n_lines - WINDOW_LINES + 1))
    it = cycle(firsts)

    def read() -> list[str]:
        first = next(it)
        return reader.lines(first, first + WINDOW_LINES - 1)

    record(benchmark, op, ds, peer, lines=WINDOW_LINES)
    benchmark(read)
    for first in firsts[:CHECKED]:
        got = reader.lines(first, first + WINDOW_LINES - 1)
        assert got == truth.lines(first, first + WINDOW_LINES - 1), first
        assert len(got) == WINDOW_LINES


@pytest.mark.kinds(*LINE_KINDS)
@pytest.mark.parametrize("peer", LINE_PEERS)
def bench_lines(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    """A 100-line window at random positions."""
    _lines(benchmark, bench, "lines", kind, size_mb, peer)


@pytest.mark.kinds("log")
@pytest.mark.parametrize("peer", LINE_PEERS)
def bench_lines_mid(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    """A 100-line window from the middle of a log."""
    _lines(benchmark, bench, "lines_mid", kind, size_mb, peer)
