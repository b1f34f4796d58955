"""Closing a store while other threads use it (found in review).

A transaction in flight ends before the engine closes; every later one raises
BlobpadError saying that the store is closed.  Before, close() pulled the data from
under the readers: on the memory engine their reads found chunks "missing" and
reported damage (CorruptData, "run verify()"), on LMDB they failed as an engine
failure.  Runs on every engine.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import blobpad
from blobpad import BlobpadError, sample
from blobpad import store as store_module

CLOSED = "the store is closed"


def _is_closed_error(exc: BaseException) -> bool:
    return type(exc) is BlobpadError and CLOSED in str(exc)


def _close_under_load(s: blobpad.Store, trial: int) -> list[tuple[str, str]]:
    """Close ``s`` while five threads read, count, grep, put and write a notepad; what each met."""
    data = os.urandom(1 << 20)
    text = sample.log_text(1 << 20, trial)
    binary, log = s.put(data), s.put(text)
    errors = sum("ERROR" in line for line in text.split("\n"))
    outcomes: list[tuple[str, str]] = []
    ready = threading.Barrier(6)

    def work(k: int) -> None:
        ready.wait(30)
        deadline = time.monotonic() + 60
        i = 0
        try:
            while time.monotonic() < deadline:
                i += 1
                if k == 0:
                    assert s.byte_range(binary.id, 0, len(data)) == data
                elif k == 1:
                    assert s.count(log.id, "ERROR") == errors
                elif k == 2:
                    assert [n for n, _ in s.matching_lines(log.id, "ERROR")][:3] == [
                        m.line for m in s.grep(log.id, "ERROR", max_matches=3)]
                elif k == 3:
                    s.put(os.urandom(300_000), session="w")  # several chunks: the pool, more than one commit
                else:
                    s.notepad("pad").append(f"step {i}")
            outcomes.append(("still running", ""))
        except BaseException as exc:  # what each thread met once the store closed
            outcomes.append((type(exc).__name__, str(exc)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    ready.wait(30)
    time.sleep(0.05 * (trial + 1))
    s.close()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads)
    return outcomes


def test_closing_under_busy_threads_never_reports_damage(store_factory):
    for trial in range(3):
        outcomes = _close_under_load(store_factory(f"busy-{trial}"), trial)
        assert len(outcomes) == 5
        assert all(kind == "BlobpadError" and CLOSED in message for kind, message in outcomes), outcomes


def test_a_transaction_in_flight_ends_before_the_store_closes(store_factory):
    s = store_factory("in-flight")
    data = os.urandom(600_000)
    e = s.put(data)
    raw_id = bytes.fromhex(e.id)
    inside, closing = threading.Event(), threading.Event()
    seen: list[object] = []

    def hold() -> None:
        with s.engine.read() as txn:
            inside.set()
            closing.wait(30)
            seen.append(txn.get("entries", raw_id) is not None)  # the snapshot still reads
        seen.append("left")

    def close() -> None:
        s.close()
        seen.append("closed")

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(30)
    closer = threading.Thread(target=close)
    closer.start()
    refused = None
    for _ in range(3000):  # until close() refuses new transactions (bounded: 30 s)
        try:
            s.exists(e.id)
        except BlobpadError as exc:
            refused = exc
            break
        time.sleep(0.01)
    assert refused is not None and _is_closed_error(refused)
    assert closer.is_alive() and seen == []  # close() waits for the open transaction
    closing.set()
    holder.join(30)
    closer.join(30)
    assert seen == [True, "left", "closed"]
    with pytest.raises(BlobpadError, match=CLOSED):
        s.get(e.id)


def test_close_gives_up_on_a_transaction_that_stays_open_and_can_be_called_again(store_factory, monkeypatch):
    monkeypatch.setattr(store_module, "CLOSE_WAIT", 0.2)
    s = store_factory("stuck")
    e = s.put("kept\n")
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with s.engine.read():
            inside.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(30)
    with pytest.raises(BlobpadError, match="still inside a store transaction"):
        s.close()
    with pytest.raises(BlobpadError, match=CLOSED):  # new operations are refused meanwhile
        s.get(e.id)
    release.set()
    holder.join(30)
    s.close()  # now it closes
    with pytest.raises(BlobpadError, match=CLOSED):
        s.get(e.id)
    s.close()  # and stays closed


def test_a_store_closed_by_its_own_thread_inside_a_transaction_does_not_wait_for_itself(store_factory):
    s = store_factory("own")
    e = s.put("x\n")
    t0 = time.monotonic()
    with s.engine.read():
        s.close()
    assert time.monotonic() - t0 < store_module.CLOSE_WAIT
    with pytest.raises(BlobpadError, match=CLOSED):
        s.get(e.id)


def test_another_store_on_the_same_target_stays_open(tmp_path):
    a = blobpad.open(tmp_path / "s")
    b = blobpad.open(tmp_path / "s")
    e = a.put("shared\n")
    a.close()
    assert b.get(e.id) == "shared\n"
    b.close()
