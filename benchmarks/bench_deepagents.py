"""deepagents' ``read_file``: 100 lines in the middle of an evicted tool result.

deepagents evicts a large tool result by writing it through its backend to
``/large_tool_results/<tool call id>``; the model then pages through it with
``read_file(offset, limit)``, which calls the backend's ``read``.  The peers, each
holding the same log text as that evicted file:

* ``blobpad``: :class:`blobpad.integrations.deepagents.BlobpadBackend` on LMDB;
* ``blobpad-memory``: the same on the memory engine;
* ``store-inmemory``: deepagents' ``StoreBackend`` over LangGraph's ``InMemoryStore``;
* ``store-sqlite``: ``StoreBackend`` over LangGraph's ``SqliteStore`` (a file);
* ``filesystem``: deepagents' ``FilesystemBackend`` over a directory (``virtual_mode``).

Writing the file is not timed.  Each call reads 100 lines in the middle (the same
window every time, as an agent re-reading the place it found), and the answer is
checked against the lines of the file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from .config import WINDOW_LINES
from .harness import Bench, record

deepagents = pytest.importorskip("deepagents")

PEERS = ("blobpad", "blobpad-memory", "store-inmemory", "store-sqlite", "filesystem")
PATH = "/large_tool_results/call_bench"


def _backend(peer: str, bench: Bench, cleanup: list[Callable[[], Any]]) -> Any:
    from deepagents.backends import FilesystemBackend, StoreBackend

    import blobpad
    from blobpad.integrations.deepagents import BlobpadBackend

    if peer in ("blobpad", "blobpad-memory"):
        target = str(bench.new_dir("deepagents") / "store") if peer == "blobpad" else "memory://bench-deepagents"
        store = blobpad.open(target)
        cleanup.append(store.close)
        return BlobpadBackend(store, session="bench")
    if peer == "store-inmemory":
        from langgraph.store.memory import InMemoryStore
        return StoreBackend(store=InMemoryStore(), namespace=lambda _rt: ("bench",))
    if peer == "store-sqlite":
        import sqlite3

        from langgraph.store.sqlite import SqliteStore
        conn = sqlite3.connect(str(bench.new_dir("sqlite") / "store.db"), check_same_thread=False,
                               isolation_level=None)
        cleanup.append(conn.close)
        sqlite_store = SqliteStore(conn)
        sqlite_store.setup()
        return StoreBackend(store=sqlite_store, namespace=lambda _rt: ("bench",))
    if peer == "filesystem":
        return FilesystemBackend(root_dir=bench.new_dir("fs"), virtual_mode=True)
    raise ValueError(peer)


@pytest.mark.largest_only
@pytest.mark.parametrize("peer", PEERS)
def bench_read_file(benchmark: BenchmarkFixture, bench: Bench, size_mb: int, peer: str) -> None:
    ds = bench.dataset("log", size_mb)
    truth = bench.truth(ds)
    cleanup: list[Callable[[], Any]] = []
    try:
        backend = _backend(peer, bench, cleanup)
        written = backend.write(PATH, truth.text)
        assert written.error is None, written.error
        offset = truth.n_lines // 2 - WINDOW_LINES // 2
        record(benchmark, "deepagents_read_file", ds, peer, lines=WINDOW_LINES)
        result = benchmark(backend.read, PATH, offset, WINDOW_LINES)
        assert result.error is None, result.error
        assert (result.start_line, result.end_line) == (offset + 1, offset + WINDOW_LINES)
        assert result.file_data["content"] == "".join(
            line + "\n" for line in truth.lines(offset + 1, offset + WINDOW_LINES))
    finally:
        for close in reversed(cleanup):
            close()
