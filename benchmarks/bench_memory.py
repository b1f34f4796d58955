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

from . import redis_server
from .config import SLICE_CHARS
from .harness import Bench, pedantic, record
from .memory import measure
from .peers import READERS, WRITERS, BlobpadReader, BlobpadRedisReader, NaiveRedisReader, Reader

PUT_CASES = [
    ("put", "blobpad"), ("put_bytes", "blobpad"), ("put", "sqlite-seed"), ("put", "diskcache"), ("put", "zstd-cli"),
]
LINE_PEERS = ("blobpad", "sqlite-seed", "diskcache", "mmap-re", "sed")
#: stores on the run's Valkey server whose memory is measured: blobpad, and the raw content as one string
REDIS_PEERS = ("blobpad-redis", "naive-redis")


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


@pytest.mark.largest_only
@pytest.mark.kinds("log")
@pytest.mark.parametrize("peer", REDIS_PEERS)
def bench_memory_redis(benchmark: BenchmarkFixture, bench: Bench, kind: str, size_mb: int, peer: str) -> None:
    """How much the Valkey server's ``used_memory`` grows when the log is stored in it.

    ``blobpad-redis`` puts it into a fresh namespace (zstd chunks, index, records);
    ``naive-redis`` ``SET``s the raw bytes under one key.  The time is that one put;
    ``extra_info`` has ``used_memory`` before and after (``INFO memory``, read once the
    server frees nothing more in the background), the growth, the growth per byte of
    content (``growth_per_byte``: issue 14's target for blobpad is at most 0.25), and
    ``used_memory_dataset``'s growth (the same without the server's overhead: clients,
    scripts).  Both are read with the loading client disconnected (an idle client's buffers
    are not what is stored; the server shrinks them on its own after a while), and the
    stored content is checked, by a new client, before it is dropped.
    """
    ds = bench.dataset(kind, size_mb)
    reason = READERS[peer].unavailable(ds)
    if reason:
        pytest.skip(reason)
    truth = bench.truth(ds)
    srv = redis_server.server()
    record(benchmark, "memory_redis", ds, peer)
    before = srv.info("memory")
    before_used = redis_server.used_memory(srv)
    loaded: list[Reader] = []
    pedantic(benchmark, lambda: loaded.append(READERS[peer].load(ds, bench.new_dir(f"memory-{peer}"))), rounds=1)
    loader = loaded[-1]
    assert isinstance(loader, (BlobpadRedisReader, NaiveRedisReader))
    # measured with the loader's connection closed: an idle client's buffers are no part of what is stored
    loader.disconnect()
    after_used = redis_server.used_memory(srv)
    after = srv.info("memory")
    reader = READERS[peer].reopen(ds, loader.location())
    try:
        assert reader.tail(SLICE_CHARS) == truth.tail(SLICE_CHARS)
        middle = max(1, truth.n_lines // 2)
        assert reader.lines(middle, middle + 99) == truth.lines(middle, middle + 99)
        if isinstance(reader, BlobpadReader):
            stat = reader.store.stat(reader.entry_id)
            assert stat.size_bytes == ds.size
            benchmark.extra_info["stored_bytes"] = reader.store.stats().stored_bytes
    finally:
        reader.close()
    growth = after_used - before_used
    benchmark.extra_info.update(
        used_memory_before=before_used, used_memory_after=after_used, growth_bytes=growth,
        growth_per_byte=round(growth / ds.size, 4),
        dataset_growth_bytes=int(after["used_memory_dataset"]) - int(before["used_memory_dataset"]),
        server=str(srv.info("server").get("valkey_version") or srv.info("server").get("redis_version")),
    )
