"""put, and the re-puts an agent makes: identical content, a log that grew, a line inserted.

``put`` stores the file into an empty store in every round (a fresh store per
round, made outside the timing).  The re-puts start from a store holding the
base log and remove the new observation after each round, so every round sees
the same state.  Before timing, one untimed put checks the stored content and
records the figures that are not times: stored bytes, compression ratio, new
bytes and new chunks of a re-put.
"""

from __future__ import annotations

from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from .config import KINDS, Settings
from .data import Dataset
from .harness import Bench, Scratch, pedantic, record
from .peers import Writer

PUT_PEERS = ("blobpad", "sqlite-seed", "diskcache", "file", "zstd-cli")


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {f"new_{k}": after[k] - before.get(k, 0) for k in after}


@pytest.mark.kinds(*KINDS)
@pytest.mark.parametrize("peer", (*PUT_PEERS, "blobpad-filters"))  # filters at put: what they cost
def bench_put(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, settings: Settings,
              kind: str, size_mb: int, peer: str) -> None:
    """Put a file into an empty store."""
    ds = bench.dataset(kind, size_mb)
    probe = scratch.writer(peer, ds)
    before = probe.footprint()
    handle = probe.put(ds)
    probe.verify(handle, ds)
    figures = _delta(before, probe.footprint())
    scratch.release(probe)
    ratio = ds.size / figures["new_stored_bytes"] if figures["new_stored_bytes"] else None
    record(benchmark, "put", ds, peer, **figures, ratio=ratio)

    def setup() -> tuple[tuple[Writer], dict[str, Any]]:
        return (scratch.writer(peer, ds),), {}

    pedantic(benchmark, lambda w: w.put(ds), setup=setup, teardown=scratch.release,
             rounds=settings.put_rounds(size_mb))


def _reput(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, settings: Settings, op: str,
           base: Dataset, new: Dataset, peer: str) -> None:
    writer = scratch.writer(peer, base)
    writer.put(base)
    before = writer.footprint()
    handle = writer.put(new)
    writer.verify(handle, new)
    figures = _delta(before, writer.footprint())
    writer.remove(handle)
    record(benchmark, op, base, peer, **figures, new_size_bytes=new.size)

    handles: list[str] = []

    def put() -> None:
        handles.append(writer.put(new))

    def teardown() -> None:
        while handles:
            writer.remove(handles.pop())

    pedantic(benchmark, put, teardown=teardown, rounds=settings.put_rounds(base.size_mb))


@pytest.mark.kinds("log")
@pytest.mark.parametrize("peer", PUT_PEERS)
def bench_reput_same(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, settings: Settings,
                     kind: str, size_mb: int, peer: str) -> None:
    """Put the same log again (an agent reading the same file twice)."""
    base = bench.dataset(kind, size_mb)
    _reput(benchmark, bench, scratch, settings, "reput_same", base, base, peer)


@pytest.mark.kinds("log")
@pytest.mark.parametrize("peer", PUT_PEERS)
def bench_reput_append(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, settings: Settings,
                       kind: str, size_mb: int, peer: str) -> None:
    """Put the log again after 1 MB more was appended to it."""
    base = bench.dataset(kind, size_mb)
    _reput(benchmark, bench, scratch, settings, "reput_append", base, bench.dataset(kind, size_mb, "append1MB"), peer)


@pytest.mark.kinds("log")
@pytest.mark.parametrize("peer", PUT_PEERS)
def bench_reput_insert(benchmark: BenchmarkFixture, bench: Bench, scratch: Scratch, settings: Settings,
                       kind: str, size_mb: int, peer: str) -> None:
    """Put the log again after one line was inserted in its middle."""
    base = bench.dataset(kind, size_mb)
    _reput(benchmark, bench, scratch, settings, "reput_insert", base, bench.dataset(kind, size_mb, "insert"), peer)
