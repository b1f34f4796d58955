"""grep: an absent literal, the first 100 matches of a frequent pattern, and a count.

The absent literal and the count read every byte, so they are the throughput
figures; ``grep_first`` stops once it has 100 matching lines.  blobpad runs on
both engines (LMDB: ``blobpad``, ``blobpad-warm``; memory: ``blobpad-memory``,
``blobpad-memory-warm``).
"""

from __future__ import annotations

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from .config import ABSENT_LITERAL, COUNT_PATTERN, FREQUENT_PATTERN, GREP_LIMIT, LINE_KINDS, TEXT_KINDS
from .harness import Bench, record

GREP_PEERS = (
    "blobpad", "blobpad-warm", "blobpad-memory", "blobpad-memory-warm", "sqlite-seed", "diskcache", "mmap-re", "rg",
    "zstd-rg",
)


@pytest.mark.kinds(*TEXT_KINDS)
@pytest.mark.parametrize("peer", GREP_PEERS)
def bench_grep_absent(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = bench.reader(peer, ds)
    record(benchmark, "grep_absent", ds, peer, pattern=ABSENT_LITERAL)
    found = benchmark(reader.grep_absent, ABSENT_LITERAL)
    assert found == 0
    assert bench.truth(ds).matching_lines(ABSENT_LITERAL, fixed=True) == []


@pytest.mark.kinds(*LINE_KINDS)
@pytest.mark.parametrize("peer", GREP_PEERS)
def bench_grep_first(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = bench.reader(peer, ds)
    pattern = FREQUENT_PATTERN[kind]
    record(benchmark, "grep_first", ds, peer, pattern=pattern, limit=GREP_LIMIT)
    found = benchmark(reader.grep_first, pattern, GREP_LIMIT)
    expected = bench.truth(ds).matching_lines(pattern, limit=GREP_LIMIT)
    assert len(expected) == GREP_LIMIT, "the frequent pattern should match at least 100 lines"
    assert found == expected


@pytest.mark.kinds(*TEXT_KINDS)
@pytest.mark.parametrize("peer", GREP_PEERS)
def bench_count(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reader = bench.reader(peer, ds)
    record(benchmark, "count", ds, peer, pattern=COUNT_PATTERN, ignore_case=True)
    n = benchmark(lambda: reader.count(COUNT_PATTERN, ignore_case=True))
    expected = len(bench.truth(ds).matching_lines(COUNT_PATTERN, ignore_case=True))
    benchmark.extra_info["matches"] = expected
    assert n == expected
