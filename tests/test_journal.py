"""The pending-put journal against a put that is still running, on every engine.

A put of several batches records each batch in the journal; a process of another host
cannot ask whether the put's process still runs, so it takes the put for dead once the
journal's head record is ``STALE_SECONDS`` old by the store's clock, and rolls it back.
Two promises follow, both checked here with a second "host" that rolls back from the
same process (its host name patched for the call, its clock given):

* a put whose journal was rolled back under it never acknowledges: it raises Conflict
  and leaves nothing (no entry, no chunk, no counter), instead of committing an entry
  whose chunks were released;
* a put whose source is slow (no batch for a while) restamps its head record, so the
  other host does not take it for dead while it still reads.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from oracles import wait_child

import blobpad
import blobpad.journal as journal
from blobpad import Conflict, NotFound
from blobpad.put import BATCH_BYTES


def _lines(count: int, start: int = 0) -> bytes:
    return b"".join(b"line %d of a long build log %s\n" % (i, b"x" * (i % 57)) for i in range(start, start + count))


def _other_host_recovers(store: blobpad.Store, clock: Callable[[], float], monkeypatch: pytest.MonkeyPatch) -> int:
    """What another host's open or gc() does with the journal, at the time ``clock`` gives."""
    with monkeypatch.context() as m:
        m.setattr(socket, "gethostname", lambda: "another-host")
        return journal.recover(store.engine, clock)


class _Source(io.RawIOBase):
    """``total`` bytes of log lines; ``hook(produced)`` runs before each read."""

    def __init__(self, total: int, hook: Callable[[int], None], step: int = 1 << 30) -> None:
        self.total, self.produced, self.hook, self.step = total, 0, hook, step
        self.lines = self._generate()
        self.pending = b""

    def _generate(self) -> Iterator[bytes]:
        n = 0
        while True:
            yield _lines(2000, n)
            n += 2000

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]
        self.hook(self.produced)
        if self.produced >= self.total:
            return 0
        if not self.pending:
            self.pending = next(self.lines)
        step = self.step if self.produced > 2 * BATCH_BYTES else len(buf)
        k = min(len(buf), len(self.pending), self.total - self.produced, step)
        buf[:k] = self.pending[:k]
        self.pending = self.pending[k:]
        self.produced += k
        return k


def test_a_put_rolled_back_under_it_raises_conflict_and_leaves_nothing(store, monkeypatch):
    kept = store.put("an earlier entry", session="s", ttl=None)
    before = store.stats()
    rolled: list[int] = []

    def hook(produced: int) -> None:
        # once a batch is committed (two batches in flight flush the first), the other host's
        # clock runs past the staleness limit and it rolls the put back
        if not rolled and produced > 2 * BATCH_BYTES + (BATCH_BYTES >> 1):
            rolled.append(_other_host_recovers(store, lambda: time.time() + journal.STALE_SECONDS + 60, monkeypatch))

    with pytest.raises(Conflict, match="rolled back"):
        store.put(io.BufferedReader(_Source(3 * BATCH_BYTES, hook)), session="s", name="big", ttl=None)
    assert rolled == [1]  # the put had committed a batch, and it was taken for dead
    assert [e.id for e in store.entries(session="s")] == [kept.id]
    with pytest.raises(NotFound):
        store.find("big", session="s")
    after = store.stats()
    assert (after.entries, after.chunks, after.logical_bytes, after.stored_bytes) == (
        before.entries, before.chunks, before.logical_bytes, before.stored_bytes)
    assert store.verify().ok
    assert store.get(kept.id) == "an earlier entry"


def test_a_slow_source_keeps_its_put_alive_for_other_hosts(store, monkeypatch):
    monkeypatch.setattr(journal, "STALE_SECONDS", 5)  # restamped once 5/3 s pass without one
    seen: list[int] = []
    total = 3 * BATCH_BYTES + 4096

    def hook(produced: int) -> None:
        # after the first batch is committed the source gives a little every 1.05 s for 6 reads
        # (more than the limit in all), then another host looks at the journal by the store's clock
        if produced > 2 * BATCH_BYTES + (BATCH_BYTES >> 1) and len(seen) < 7:
            if len(seen) < 6:
                time.sleep(1.05)
                seen.append(0)
            else:
                seen.append(_other_host_recovers(store, store.now, monkeypatch))

    entry = store.put(io.BufferedReader(_Source(total, hook, step=512)), session="s", name="slow", ttl=None)
    assert seen == [0] * 7  # the other host found the put alive: it rolled nothing back
    assert entry.size == total
    assert store.find("slow", session="s").id == entry.id
    assert store.verify().ok
    assert store.byte_range(entry.id, 0, 9) == b"line 0 of"
    assert store.stats().logical_bytes >= total


def _state(pid: int) -> str:
    """A process's state letter, as /proc says it (Z: a zombie)."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_a_killed_put_not_yet_reaped_by_its_parent_is_rolled_back(tmp_path):
    """A put killed with SIGKILL whose parent has not collected its exit status (a zombie:
    its pid and start time still answer) runs no put any more: gc() rolls it back."""
    db = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, blobpad; blobpad.open(sys.argv[1]).put(sys.stdin.buffer, session='z')",
         str(db)], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert child.stdin is not None
        child.stdin.write(_lines(700_000) * 2)  # about 2.5 batches: two are committed, the put waits for more
        child.stdin.flush()
        with blobpad.open(db) as store:
            for _ in range(600):  # at most 60 s for the child's batches to be journalled
                with store.engine.read() as txn:
                    batches = sum(1 for key, _ in txn.scan("pending") if key[8:9] == b"B")
                if batches >= 2:
                    break
                time.sleep(0.1)
            assert batches >= 2 and store.stats().chunks > 0
            os.kill(child.pid, signal.SIGKILL)
            for _ in range(100):  # the kernel marks it a zombie; nobody waits for it yet
                if _state(child.pid) == "Z":
                    break
                time.sleep(0.05)
            assert _state(child.pid) == "Z"
            report = store.gc()
            assert report.aborted_puts == 1
            st = store.stats()
            assert (st.entries, st.chunks, st.stored_bytes) == (0, 0, 0)
            assert store.verify().ok
    finally:
        child.kill()
        child.wait(timeout=60)


def test_a_put_of_another_pid_namespace_or_machine_of_the_same_host_name_is_not_taken_for_dead():
    """Containers sharing their machine's host name (host networking) each see only their own pids:
    a put of one was rolled back by the other's open, its pid missing there, while it still ran.
    A pending put names its host by host name, boot id and PID namespace (journal.host_identity):
    one of another namespace or machine is another host's, alive until its head record is
    STALE_SECONDS old; this host's own, and those of versions that named the bare host name,
    are asked of their pid as before."""
    me = journal.process_token()
    host, pid, start = me.split(":")
    name, _, rest = host.partition("#")
    assert name == socket.gethostname() and host == journal.host_identity()
    gone = 2**22 + 7  # above the kernel's default pid_max: no process has it
    now = time.time()
    assert journal.token_alive(f"{me} {int(now)}", now)
    assert not journal.token_alive(f"{host}:{gone}:{start} {int(now)}", now)  # this host: the pid says
    assert not journal.token_alive(f"{name}:{gone}:{start} {int(now)}", now)  # a bare host name: as before
    boot, _, namespace = rest.partition(".")
    for other in (f"{name}#{boot}.{namespace}1", f"{name}#{'0' * len(boot)}.{namespace}"):  # namespace, machine
        assert journal.token_alive(f"{other}:{gone}:{start} {int(now)}", now), other
        assert not journal.token_alive(f"{other}:{gone}:{start} {int(now - journal.STALE_SECONDS - 1)}", now)


def _damage_pending(store: blobpad.Store, which: bytes) -> None:
    """Flip a byte in the stored value of the put's first journal record of kind ``which`` (H head,
    B batch), through the engine under the integrity checks (its raw records)."""
    raw = store.engine.engine
    with raw.read() as txn:
        key, stored = next((k, v) for k, v in txn.scan("pending", b"", None, False) if k[8:9] == which)
    flipped = bytearray(stored)
    flipped[len(flipped) // 2] ^= 0x20
    raw.write(lambda txn: txn.put("pending", key, bytes(flipped)))


@pytest.mark.parametrize("which", [b"H", b"B"], ids=["head", "batch"])
def test_a_damaged_journal_record_never_keeps_the_store_from_opening_or_gc(store, monkeypatch, which):
    """One flipped byte in the journal of a put in progress (its head record, or a batch's list of
    chunks): recovery (at open and in gc()) still runs. A damaged head is rolled back as a dead put's
    (the put, still running, then fails with Conflict and leaves nothing); a damaged batch record is
    dropped and its chunks' references left for gc() to recount. It said the store could not be opened,
    on every engine, and verify() and gc() could not run either."""
    kept = store.put("an earlier entry", session="s", ttl=None)
    before = store.stats()
    rolled: list[int] = []

    def hook(produced: int) -> None:
        if not rolled and produced > 2 * BATCH_BYTES + (BATCH_BYTES >> 1):
            _damage_pending(store, which)
            # another host, its clock past the staleness limit: a batch record's damage is met in the rollback
            rolled.append(_other_host_recovers(store, lambda: time.time() + journal.STALE_SECONDS + 60, monkeypatch))

    with pytest.raises(Conflict, match="rolled back"):
        store.put(io.BufferedReader(_Source(3 * BATCH_BYTES, hook)), session="s", name="big", ttl=None)
    assert rolled == [1]
    with store.engine.read() as txn:
        assert list(txn.scan("pending")) == []  # the damaged record went too
    assert [e.id for e in store.entries(session="s")] == [kept.id]
    report = store.gc()
    after = store.stats()
    assert (after.entries, after.chunks, after.logical_bytes, after.stored_bytes) == (
        before.entries, before.chunks, before.logical_bytes, before.stored_bytes), report
    assert store.verify().ok
    assert store.get(kept.id) == "an earlier entry"


def test_a_store_whose_journal_head_is_damaged_opens(target):
    """The same at open, from another handle that finds the record: the store opens and the put is
    gone (the put then fails with Conflict).  Where no second handle can open the store (memory), the
    put meets its own damaged record at its end: CorruptData, and it leaves nothing either."""
    url = target("j")
    first = blobpad.open(url)
    try:
        shared = first.engine.capabilities.persistent
        hook_ran: list[bool] = []

        def hook(produced: int) -> None:
            if not hook_ran and produced > 2 * BATCH_BYTES + (BATCH_BYTES >> 1):
                hook_ran.append(True)
                _damage_pending(first, b"H")
                if shared:
                    with blobpad.open(url) as second:  # opening recovers: the damaged head is taken for dead
                        assert second.stats().entries == 0

        with pytest.raises(Conflict if shared else blobpad.CorruptData, match="rolled back" if shared else "pending"):
            first.put(io.BufferedReader(_Source(3 * BATCH_BYTES, hook)), session="s", ttl=None)
        assert hook_ran
        with first.engine.read() as txn:
            assert list(txn.scan("pending")) == []
        first.gc()
        st = first.stats()
        assert (st.entries, st.chunks, st.stored_bytes) == (0, 0, 0)
        assert first.verify().ok
    finally:
        first.close()


def test_a_child_forked_while_a_put_marks_itself_in_progress_can_put_and_gc(tmp_path):
    """A process forked while another of its threads holds the lock of the puts in progress
    (``journal.in_flight``): the child's own puts and gc() go on, never waiting for a lock that
    no thread of the child will release."""
    import threading

    path = tmp_path / "store"
    blobpad.open(path).close()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with journal._IN_FLIGHT_LOCK:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(30)
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if a put and gc() both finish
            code = 1
            try:
                with blobpad.open(path) as s:
                    s.put("x" * 10_000, session="child")
                    s.gc()
                code = 0
            finally:
                os._exit(code)
        code = wait_child(pid, 60)
        assert code is not None, "the forked child hung on the lock of the puts in progress"
        assert code == 0
    finally:
        release.set()
        holder.join(30)
