"""Peak RSS of a put and of a line window, on the largest log of the run, in fresh processes.

The time pytest-benchmark shows for these includes starting the interpreter;
the figures are in ``extra_info`` (``peak_kb``, ``baseline_kb``, ``cli_peak_kb``)
and in the report's memory table.

The memory engine's readers (``blobpad-memory``) are left out of
``bench_memory_lines``: the window is read in a fresh process that reopens the
store, and a memory store cannot be reopened there, so its ``reopen`` puts the
whole dataset again into a new memory store of that process.  The peak RSS
(``VmHWM``, a high-water mark) would then be the peak of that put, not of the
read, and the baseline would hold the stored content; the figure would not be
comparable with the other peers'.
"""

from __future__ import annotations

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from .harness import Bench, pedantic, record
from .memory import measure
from .peers import READERS, WRITERS

PUT_CASES = [
    ("put", "blobpad"), ("put_bytes", "blobpad"), ("put", "sqlite-seed"), ("put", "diskcache"), ("put", "zstd-cli"),
]
LINE_PEERS = ("blobpad", "sqlite-seed", "diskcache", "mmap-re", "sed")


def _store(benchmark: BenchmarkFixture, op: str, kind: str, size_mb: int, peer: str, spec: dict[str, object],
           bench: Bench) -> None:
    ds = bench.dataset(kind, size_mb)
    spec = {"op": op, "peer": peer, "kind": kind, "size_mb": size_mb, **spec}
    results: list[dict[str, object]] = []
    record(benchmark, f"memory_{op}", ds, peer)
    pedantic(benchmark, lambda: results.append(measure(spec)), rounds=1)
    benchmark.extra_info.update(results[-1])


@pytest.mark.largest_only
@pytest.mark.kinds("log")
@pytest.mark.parametrize(("op", "peer"), PUT_CASES, ids=[f"{o}-{p}" for o, p in PUT_CASES])
def bench_memory_put(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int,
                     op: str, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    reason = WRITERS[peer].unavailable(ds)
    if reason:
        pytest.skip(reason)
    directory = bench.new_dir(f"memory-{peer}")
    _store(benchmark, op, kind, size_mb, peer, {"directory": str(directory)}, bench)


@pytest.mark.largest_only
@pytest.mark.kinds("log")
@pytest.mark.parametrize("peer", LINE_PEERS)
def bench_memory_lines(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    ds = bench.dataset(kind, size_mb)
    if READERS[peer].unavailable(ds):
        pytest.skip(READERS[peer].unavailable(ds) or "")
    reader = bench.reader(peer, ds)
    first = max(1, ds.newlines() // 2)
    _store(benchmark, "lines", kind, size_mb, peer, {"location": reader.location(), "first": first}, bench)
