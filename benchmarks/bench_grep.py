"""grep: an absent literal, a rare literal, the first 100 matches of a frequent
pattern, a count, and every matching line with its number.

The absent and rare literals, the count and ``grep_all`` read every byte (less
where blobpad's chunk filters exclude chunks), so they are the throughput figures;
``grep_first`` stops once it has 100 matching lines.  ``grep_all`` is what
``blobpad grep`` prints once uncapped: each line matching ``COUNT_PATTERN``
case-insensitively, with its number, against ``rg -n -i`` writing them into a pipe.
blobpad runs on three engines (LMDB: ``blobpad``, ``blobpad-warm``; memory:
``blobpad-memory``, ``blobpad-memory-warm``; Redis, a Valkey server over loopback:
``blobpad-redis``, cache off only: a scan reads every chunk once, so a warm cache
smaller than the content changes nothing but the first call).

Each blobpad benchmark loads its own store, so that the one call timed before the
rounds (``first_ms`` in ``extra_info``) is the first search of the entry: grep and
count may build the entry's chunk filters on that first full scan.  ``extra_info``
also has the chunks that first call read (``first_chunks_read``) and those of the
last round (``chunks_read``), out of ``chunks_total``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from .config import (
    ABSENT_LITERAL,
    COUNT_PATTERN,
    FREQUENT_PATTERN,
    GREP_LIMIT,
    LINE_KINDS,
    RARE_LITERAL,
    TEXT_KINDS,
)
from .data import Dataset
from .harness import Bench, Scratch, record
from .peers import READERS, BlobpadReader, Reader

GREP_PEERS = (
    "blobpad", "blobpad-warm", "blobpad-memory", "blobpad-memory-warm", "blobpad-redis", "sqlite-seed", "diskcache",
    "mmap-re", "rg", "zstd-rg",
)
#: every matching line: blobpad, the plain file mapped, and rg writing them
GREP_ALL_PEERS = ("blobpad", "blobpad-warm", "blobpad-memory", "blobpad-memory-warm", "mmap-re", "rg", "zstd-rg")
#: the most matching lines a "rare" literal may have
RARE_MAX = 10

T = TypeVar("T")


def grep_reader(bench: Bench, scratch: Scratch, peer: str, ds: Dataset) -> Reader:
    """blobpad in a store of this benchmark alone (its first search is the entry's first); the others shared."""
    if issubclass(READERS[peer], BlobpadReader):
        return scratch.reader(peer, ds)
    return bench.reader(peer, ds)


def first_call(benchmark: BenchmarkFixture, reader: Reader, call: Callable[[], T]) -> T | None:
    """For blobpad, time one call before the rounds and record it with its chunks read."""
    if not isinstance(reader, BlobpadReader):
        return None
    t0 = time.perf_counter()
    result = call()
    benchmark.extra_info["first_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    assert reader.last_chunks is not None
    benchmark.extra_info["first_chunks_read"], benchmark.extra_info["chunks_total"] = reader.last_chunks
    return result


def chunks_after(benchmark: BenchmarkFixture, reader: Reader) -> None:
    """Record the chunks the last round read (blobpad only)."""
    if isinstance(reader, BlobpadReader) and reader.last_chunks is not None:
        benchmark.extra_info["chunks_read"], benchmark.extra_info["chunks_total"] = reader.last_chunks


def run(benchmark: BenchmarkFixture, reader: Reader, call: Callable[[], T]) -> T:
    """The first call (blobpad), the benchmark's rounds, then the chunks of the last round."""
    first_call(benchmark, reader, call)
    result: T = benchmark(call)
    chunks_after(benchmark, reader)
    return result


@pytest.mark.kinds(*TEXT_KINDS)
@pytest.mark.parametrize("peer", GREP_PEERS)
def bench_grep_absent(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, kind: str, size_mb: int,
                      peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = grep_reader(bench, scratch, peer, ds)
    record(benchmark, "grep_absent", ds, peer, pattern=ABSENT_LITERAL)
    found = run(benchmark, reader, lambda: reader.grep_absent(ABSENT_LITERAL))
    assert found == 0
    assert bench.truth(ds).matching_lines(ABSENT_LITERAL, fixed=True) == []


@pytest.mark.kinds(*RARE_LITERAL)
@pytest.mark.parametrize("peer", GREP_PEERS)
def bench_grep_rare(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, kind: str, size_mb: int,
                    peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = grep_reader(bench, scratch, peer, ds)
    literal = RARE_LITERAL[kind]
    expected = bench.truth(ds).matching_lines(literal, fixed=True)
    assert 1 <= len(expected) <= RARE_MAX, f"{literal!r} should be on 1 to {RARE_MAX} lines, not {len(expected)}"
    record(benchmark, "grep_rare", ds, peer, pattern=literal, matches=len(expected))
    found = run(benchmark, reader, lambda: reader.grep_lines(literal))
    assert found == expected


@pytest.mark.kinds(*LINE_KINDS)
@pytest.mark.parametrize("peer", GREP_PEERS)
def bench_grep_first(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, kind: str, size_mb: int,
                     peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = grep_reader(bench, scratch, peer, ds)
    pattern = FREQUENT_PATTERN[kind]
    record(benchmark, "grep_first", ds, peer, pattern=pattern, limit=GREP_LIMIT)
    found = run(benchmark, reader, lambda: reader.grep_first(pattern, GREP_LIMIT))
    expected = bench.truth(ds).matching_lines(pattern, limit=GREP_LIMIT)
    assert len(expected) == GREP_LIMIT, "the frequent pattern should match at least 100 lines"
    assert found == expected


@pytest.mark.kinds(*TEXT_KINDS)
@pytest.mark.parametrize("peer", GREP_PEERS)
def bench_count(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, kind: str, size_mb: int,
                peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = grep_reader(bench, scratch, peer, ds)
    record(benchmark, "count", ds, peer, pattern=COUNT_PATTERN, ignore_case=True)
    n = run(benchmark, reader, lambda: reader.count(COUNT_PATTERN, ignore_case=True))
    expected = len(bench.truth(ds).matching_lines(COUNT_PATTERN, ignore_case=True))
    benchmark.extra_info["matches"] = expected
    assert n == expected


@pytest.mark.kinds(*LINE_KINDS)
@pytest.mark.parametrize("peer", GREP_ALL_PEERS)
def bench_grep_all(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, kind: str, size_mb: int,
                   peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = grep_reader(bench, scratch, peer, ds)
    record(benchmark, "grep_all", ds, peer, pattern=COUNT_PATTERN, ignore_case=True)
    first_call(benchmark, reader, lambda: reader.grep_all(COUNT_PATTERN, True))
    # the whole list of line numbers, checked once, outside the timed calls
    expected = bench.truth(ds).matching_lines(COUNT_PATTERN, ignore_case=True)
    assert reader.grep_all_lines(COUNT_PATTERN, True) == expected
    benchmark.extra_info["matches"] = len(expected)
    n = benchmark(reader.grep_all, COUNT_PATTERN, True)
    chunks_after(benchmark, reader)
    assert n == len(expected)
