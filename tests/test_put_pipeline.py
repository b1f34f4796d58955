"""A put's write transactions and threads, counted from outside the store.

The oracle for transactions is LMDB's own counter of committed write transactions
(``last_txnid``), read by another process while the store is open: a put whose content
fits in one batch (16 MiB) must add exactly one, whatever it has to do (new chunks,
chunks already stored, an identical entry, a named entry replaced, eviction under
``max_bytes``).  The oracle for threads is ``threading.Thread.start``: a put starts
none of its own; only the store's long-lived worker pool (threads named ``blobpad...``)
may start, once, for content of several tasks.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import blobpad
from blobpad import sample

_TXNID = "import lmdb, sys; e = lmdb.open(sys.argv[1], readonly=True, max_dbs=32); print(e.info()['last_txnid'])"


def _last_txnid(path: Path) -> int:
    """LMDB's id of the last committed write transaction of the store at ``path`` (read by another process)."""
    out = subprocess.run([sys.executable, "-c", _TXNID, str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout)


def _log(size: int, seed: int) -> str:
    return sample.log_text(size, seed)


CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "5 KB text": ({}, lambda: _log(5000, 1)),
    "50 KB text": ({}, lambda: _log(50_000, 2)),
    "empty": ({}, lambda: ""),
    "binary": ({}, lambda: os.urandom(100_000)),
    "1 MB text, several chunks on the pool": ({}, lambda: _log(1 << 20, 3)),
    "3 MB file": ({"file": True}, lambda: _log(3 << 20, 4)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_put_that_fits_in_one_batch_commits_one_write_transaction(tmp_path: Path, case: str) -> None:
    options, make = CASES[case]
    content = make()
    path = tmp_path / "store"
    with blobpad.open(path) as store:
        store.put("warm-up", session="s")
        data: Any = content
        if options.get("file"):
            data = tmp_path / "observation.txt"
            data.write_text(content)
        before = _last_txnid(path)
        entry = store.put(data, session="s", turn=1)
        assert _last_txnid(path) == before + 1
        assert store.get(entry.id) == content
        # the same content again: its chunks are shared, still in one transaction
        before = _last_txnid(path)
        again = store.put(data, session="s", turn=2)
        assert _last_txnid(path) == before + 1
        assert store.get(again.id) == content
        assert again.sha256 == entry.sha256 and again.chunks == entry.chunks


def test_a_named_put_that_replaces_and_evicts_commits_one_write_transaction(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with blobpad.open(path, max_bytes=40_000) as store:
        first = store.put(os.urandom(15_000), session="s", name="report")
        older = store.put(os.urandom(15_000), session="s", ttl=60)
        before = _last_txnid(path)
        # replaces first (15 KB freed), and 15 + 30 KB is over the cap: evicts older, the closest to expiry
        newer = store.put(os.urandom(30_000), session="s", name="report")
        assert _last_txnid(path) == before + 1
        assert store.find("report", session="s").id == newer.id
        assert not store.exists(first.id)
        assert not store.exists(older.id)
        assert store.stats().stored_bytes <= 40_000


def test_a_put_larger_than_a_batch_commits_its_batches_then_one_more(tmp_path: Path) -> None:
    """Each full batch but the last is a transaction of its own; the last rides in the final one."""
    path = tmp_path / "store"
    content = os.urandom(20 << 20)  # one full batch of 16 MiB, and the rest
    with blobpad.open(path) as store:
        before = _last_txnid(path)
        entry = store.put(content)
        assert _last_txnid(path) == before + 2
        assert store.get(entry.id) == content


def test_a_put_starts_no_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    with blobpad.open(tmp_path / "store") as store:
        small = [_log(5000, seed) for seed in range(5)]
        for text in small:
            store.put(text, session="s")
        assert started == [], "a small put is compressed in the caller's thread"
        big = tmp_path / "big.txt"
        big.write_text(_log(12 << 20, 9))  # several tasks and blocks: the pool compresses and hashes
        store.put(big)
        assert started and all(name.startswith("blobpad") for name in started), started
        pool = list(started)
        store.put(big.read_bytes() + b"more")
        store.put(Path(big))
        for text in small:
            store.put(text + "again", session="s")
        assert started == pool, "the pool is long-lived: later puts start no thread"


def test_threads_putting_at_once_each_get_their_own_result(tmp_path: Path) -> None:
    """Final transactions of several threads may be committed together: every put lands
    whole, with its own entry, and a put that fails inside the shared transaction (over
    ``max_bytes`` by itself) fails alone."""
    path = tmp_path / "store"
    texts = {t: [_log(3000 + 10 * i, 100 * t + i) for i in range(25)] for t in range(6)}
    results: dict[int, list[tuple[str, str]]] = {t: [] for t in texts}
    failures: list[BaseException] = []
    too_big: list[BaseException] = []
    barrier = threading.Barrier(len(texts) + 1)
    with blobpad.open(path, max_bytes=8 << 20) as store:

        def putter(t: int) -> None:
            barrier.wait()
            try:
                for text in texts[t]:
                    results[t].append((store.put(text, session=f"s{t}", turn=1).id, text))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                failures.append(exc)

        def oversized() -> None:
            barrier.wait()
            for _ in range(10):
                try:
                    store.put(os.urandom(9 << 20))
                except blobpad.StoreFull as exc:
                    too_big.append(exc)

        threads = [threading.Thread(target=putter, args=(t,)) for t in texts]
        threads.append(threading.Thread(target=oversized))
        before = _last_txnid(path)
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert failures == []
        assert len(too_big) == 10
        puts = sum(len(r) for r in results.values())
        assert puts == 150
        assert _last_txnid(path) - before <= puts  # at most one each (fewer when committed together)
        for t, done in results.items():
            assert [e.id for e in store.entries(session=f"s{t}")] == [eid for eid, _ in done]
            for eid, text in done:
                assert store.get(eid) == text
        assert store.stats().entries == puts
        report = store.verify()
        assert report.ok, report.problems


def test_records_another_process_wrote_since_are_read_again(tmp_path: Path) -> None:
    """A put reads the counters and the settings without parsing them again when their
    bytes are the ones this process last read or wrote: once another process has written
    either, the next put here sees its values (the entries' sequence numbers stay unique
    and the counters exact; the other process's ``max_bytes`` applies at once)."""
    path = tmp_path / "store"
    child = "import sys, blobpad; s = blobpad.open(sys.argv[1]); s.put('child ' + sys.argv[2], session='c'); s.close()"
    texts = []
    with blobpad.open(path) as store:
        for i in range(3):
            texts.append(f"parent {i}")
            store.put(texts[-1], session="p")  # this process has read and written the counters
            subprocess.run([sys.executable, "-c", child, str(path), str(i)], check=True)
            texts.append(f"child {i}")
        entries = store.entries()
        assert len(entries) == 6 and len({e.seq for e in entries}) == 6
        st = store.stats()
        assert st.entries == 6 and st.logical_bytes == sum(len(t) for t in texts)
        assert store.verify().ok
        store.put(os.urandom(300_000), ttl=100)  # read with no cap saved
        subprocess.run([sys.executable, "-c", "import sys, blobpad; blobpad.open(sys.argv[1], max_bytes=1_000_000).close()",
                        str(path)], check=True)
        for i in range(4):
            store.put(os.urandom(500_000), ttl=101 + i)
        st = store.stats()
        assert store.max_bytes == 1_000_000 and st.stored_bytes <= 1_000_000, "the other process's cap was ignored"
        assert store.verify().ok


class _GrowingFile:
    """A file opened by put() whose writer appends faster than put() reads: every read
    finds ``grow`` more bytes at the end (``times`` times at most, so that a reader
    without a bound still ends)."""

    def __init__(self, fh, path, grow: bytes, times: int) -> None:
        self._fh, self._path, self._grow, self._times = fh, path, grow, times

    def read(self, size: int = -1) -> bytes:
        if self._times:
            self._times -= 1
            with open(self._path, "ab") as out:
                out.write(self._grow)
        return self._fh.read(size)

    def __getattr__(self, name: str):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()


def test_a_file_growing_while_it_is_put_is_stored_as_it_was_when_the_put_opened_it(store, tmp_path, monkeypatch):
    import builtins

    import blobpad.put as put_module

    path = tmp_path / "app.log"
    first = b"".join(b"line %d of the log\n" % i for i in range(300_000))  # several blocks
    path.write_bytes(first)
    real_open = builtins.open

    def opening(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        if str(file) == str(path):
            return _GrowingFile(fh, path, b"grown line\n" * 100_000, times=50)
        return fh

    monkeypatch.setattr(put_module.builtins, "open", opening)
    e = store.put(path, session="s")
    monkeypatch.undo()
    assert e.size == len(first) and store.get(e.id) == first.decode()
    assert path.stat().st_size > len(first)  # it did grow meanwhile
    assert store.verify().ok


def _chunk_list(store: blobpad.Store, entry_id: str) -> tuple[list[bytes], list[int], list[int], list[int]]:
    from blobpad.chunking import Manifest
    from blobpad.view import chunk_list_blob

    with store.engine.read() as txn:
        m = Manifest.unpack(chunk_list_blob(txn, bytes.fromhex(entry_id)))
    return m.keys, list(m.bytes_at), list(m.chars_at), list(m.lines_at)


@pytest.mark.parametrize("params", [None, blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256),
                                    blobpad.ChunkParams(min_size=7, avg_extra=3, max_size=9)], ids=["default", "tiny", "odd"])
def test_content_held_in_memory_is_stored_as_the_same_content_streamed(store_factory, params) -> None:
    """Content given as one string or bytes object (hashed at once, prepared in the put's
    thread when small) and the same content streamed from a file object (hashed beside
    the cutting, block by block) must give the same entry: chunk list, sizes, characters,
    lines, kind, hash, and count with chunk filters (built by both) equal."""
    store = store_factory(chunk_params=params, filters=True)
    p = store.chunk_params
    bound = min(p.min_size, 2 * (p.min_size // 4))
    texts = ["x", "\n", "a\nb", "é" * 3, "line one\nline two\n", "no newline at the end", "ü\n" * 40]
    texts += [("w" * 7 + "\n") * (n // 8) + "z" * (n % 8) for n in (bound - 1, bound, bound + 1, 2 * bound + 5)]
    texts += [sample.log_text(n, 5) for n in (1000, 5000, bound, 70_000)]
    blobs = [os.urandom(n) for n in (1, bound, bound + 1)] + [b"\xff\xfe" * 9]
    for content in [*texts, *blobs]:
        data = content.encode() if isinstance(content, str) else content
        whole = store.put(content, session="s", ttl=None)
        streamed = store.put(io.BytesIO(data), session="s", ttl=None)
        if len(data) <= bound:  # no cut within min_size of the start, no split of a last chunk this short
            assert whole.chunks == 1
        mine, theirs = whole.to_dict(), streamed.to_dict()
        for k in ("id", "created_at", "updated_at", "seq", "expires_at"):
            mine.pop(k), theirs.pop(k)
        assert mine == theirs, content[:40]
        assert _chunk_list(store, whole.id) == _chunk_list(store, streamed.id)
        assert store.byte_range(whole.id, None) == store.byte_range(streamed.id, None) == data
        if isinstance(content, str) and content.split():  # (a pattern never holds a line break)
            word = content.split()[0]
            assert store.count(whole.id, word, fixed=True) == store.count(streamed.id, word, fixed=True)
    assert store.verify().ok
