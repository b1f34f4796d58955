"""Processes that open, fork and compact one store (found by a lifecycle fuzz).

* A process that opens the store while another compacts it must wait for the
  compaction and then use the new file: before, it mapped the old data file first
  and its acknowledged puts went into a file that was about to be replaced.
* A forked child uses the store it inherited, or opens it again, as its own: lmdb
  refused to open the parent's files a second time in the child.  Its reopen leaves
  the parent's reader slots alone: the parent's snapshots stay protected from the
  child's writes (the child's close of the inherited environment aborted the spare
  read transaction lmdb kept, which freed the slot the parent was reading under).
* The ``max_bytes`` a process saves applies to the processes that had the store
  open already.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest

import blobpad

CHILD = """
import sys, blobpad
with blobpad.open(sys.argv[1]) as s:
    print(s.put("written by the child", session="c", name="child", ttl=None).id, flush=True)
"""


def _holds(pid: int, name: str) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").endswith(name) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to see what the child holds")
def test_opening_during_a_compaction_waits_and_uses_the_new_file(tmp_path):
    path = tmp_path / "store"
    with blobpad.open(path) as s:
        keep = s.put("x" * 300_000, ttl=None).id
        for _ in range(20):
            s.delete(s.put(os.urandom(200_000)).id)
    copy = tmp_path / "copy"
    copy.mkdir()
    env = lmdb.open(str(path), max_dbs=32)
    env.copy(str(copy), compact=True)  # what compact() swaps in
    env.close()
    # Play compact(): hold the exclusive side of blobpad.lock while data.mdb is replaced.
    lock = os.open(path / "blobpad.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _holds(child.pid, "blobpad.lock") and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child is at the lock (after it, with the old code, it had mapped the old file)
        assert child.poll() is None, child.communicate()
        os.replace(copy / "data.mdb", path / "data.mdb")
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err.decode()
    child_id = out.decode().strip()
    with blobpad.open(path) as s:
        assert s.get(child_id) == "written by the child", "the child's acknowledged put was lost"
        assert s.get(keep) == "x" * 300_000 and s.verify().ok


def _in_forked_child(work: Callable[[], list[str]]) -> list[str]:
    """Fork; the child runs ``work`` and reports its words through a pipe, then leaves without
    pytest's cleanup; return the words, once the child exited cleanly."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            os.write(w, " ".join(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    report = os.read(r, 1000).decode().split()
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0, report
    return report


def test_a_forked_child_uses_the_store_as_its_own(tmp_path):
    path = tmp_path / "store"
    with blobpad.open(path) as s:
        parent_id = s.put("parent").id

        def child() -> list[str]:
            inherited = s.put("child, inherited handle", ttl=None).id
            with blobpad.open(path) as again:
                reopened = again.put("child, new handle", ttl=None).id
                ok = again.get(parent_id) == "parent" and s.get(reopened) == "child, new handle"
            return [inherited, reopened, str(ok)]

        report = _in_forked_child(child)
        assert report[2] == "True", report
        assert s.get(report[0]) == "child, inherited handle" and s.get(report[1]) == "child, new handle"
        s.put("the parent still writes")
        assert s.verify().ok


def test_a_forked_child_reads_an_inherited_memory_store_but_never_writes_to_it():
    """A memory store lives in one process's memory: a forked child reads its copy (the store as
    it was at the fork) but its writes are refused with a clear error (they were accepted and
    lost to the parent, which found nothing); ``memory://NAME`` opened in the child is a store
    of its own.  Oracle: the parent's entries, and what the child reports through a pipe."""
    with blobpad.open("memory://forked-name") as s:
        parent_id = s.put("parent", session="p").id

        def child() -> list[str]:
            words = [str(s.get(parent_id) == "parent")]
            try:
                s.put("child", session="c", name="result")
                words.append("stored")
            except blobpad.BlobpadError as exc:
                words.append("refused" if "forked child" in str(exc) else "other:" + str(exc)[:60])
            with blobpad.open("memory://forked-name") as own:
                words.append(str(own.entries() == []))
                own.put("child's own", session="c")
                words.append(str(len(own.entries())))
            return words

        assert _in_forked_child(child) == ["True", "refused", "True", "1"]
        assert [e.id for e in s.entries()] == [parent_id]  # nothing of the child's reached the parent
        s.put("the parent still writes", session="p")


FORK_UNDER_A_SNAPSHOT = r"""
import os, select, sys, blobpad

def wait(fd):
    if not select.select([fd], [], [], 120)[0]:
        raise SystemExit("no word from the other process in 120 s")
    os.read(fd, 1)

s = blobpad.open(sys.argv[1])
e = s.put(os.urandom(3 << 20), ttl=None)
s.get(e.id)
with s.engine.read() as txn:  # reads that ended before the fork (lmdb may keep a reader slot for the next one)
    assert txn.get("entries", bytes.fromhex(e.id)) is not None
to_child_r, to_child_w = os.pipe()
to_parent_r, to_parent_w = os.pipe()
pid = os.fork()
if pid == 0:  # the child: its own environment, and a snapshot held (on the lowest free reader slot) while the parent writes
    code = 1
    try:
        assert len(s.get(e.id)) == 3 << 20  # its first store call: the child opens its own environment
        with s.engine.read() as snap:
            before = [(bytes(k), bytes(v)) for k, v in snap.scan("chunks")]
            os.write(to_parent_w, b"1")
            wait(to_child_r)
            after = [(bytes(k), bytes(v)) for k, v in snap.scan("chunks")]
        print("child snapshot", "same" if after == before and len(before) > 1 else "changed", flush=True)
        code = 0
    except BaseException as exc:  # what the child's snapshot read instead
        print("child snapshot failed:", type(exc).__name__, str(exc)[:300], flush=True)
    finally:
        os._exit(code)
wait(to_parent_r)
with s.engine.read() as txn:  # the parent reads again while the child holds its snapshots (and lets go of
    assert txn.get("entries", bytes.fromhex(e.id)) is not None  # the view it read under before the fork)
s.get(e.id)
s.delete(e.id)
for _ in range(24):  # and frees pages, which LMDB reuses unless a reader still needs them
    s.delete(s.put(os.urandom(400_000)).id)
os.write(to_child_w, b"1")
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_forked_childs_snapshot_survives_the_parents_writes(tmp_path):
    """A snapshot the child opens after the fork reads the same bytes while the parent reads,
    deletes and writes.  Before, the child's reopen aborted its copy of the read transaction
    lmdb had kept for the parent's next read (freeing the parent's reader slot for the
    child's snapshots to take), and the parent's next read, failing to renew it, cleared
    that slot: the child's snapshot lost its pages to the parent's writes."""
    run = subprocess.run([sys.executable, "-c", FORK_UNDER_A_SNAPSHOT, str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    assert run.stdout.splitlines() == ["child snapshot same", "child exit 0"], run.stdout + run.stderr[-5000:]


FORK_INSIDE_A_SNAPSHOT = r"""
import os, subprocess, sys, blobpad

WRITER = (
    "import os, sys, blobpad\n"
    "with blobpad.open(sys.argv[1]) as s:\n"
    "    s.delete(sys.argv[2])\n"
    "    for _ in range(24):\n"
    "        s.delete(s.put(os.urandom(400_000)).id)\n"
)
s = blobpad.open(sys.argv[1])
e = s.put(os.urandom(3 << 20), ttl=None)
with s.engine.read() as txn:
    before = [(bytes(k), bytes(v)) for k, v in txn.scan("chunks")]
    pid = os.fork()  # from inside the transaction
    if pid == 0:
        code = 1
        try:
            s.get(e.id)
            print("child used the store", flush=True)
        except blobpad.BlobpadError as exc:
            print("child refused:", exc, flush=True)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    subprocess.run([sys.executable, "-c", WRITER, sys.argv[1], e.id], check=True, timeout=120)  # frees pages
    after = [(bytes(k), bytes(v)) for k, v in txn.scan("chunks")]
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
print("parent snapshot", "same" if after == before and len(before) > 1 else "changed", flush=True)
print("store", "sound" if s.verify().ok else "damaged", flush=True)
"""


def test_a_child_forked_inside_a_transaction_leaves_the_store_to_its_parent(tmp_path):
    """A child forked while its thread was inside a transaction (a signal handler that
    forks, say) gets a clear error from the store it inherited: closing the parent's
    environment would free the reader slot the parent's snapshot is still read under
    (before, the next writer took the snapshot's pages)."""
    run = subprocess.run([sys.executable, "-c", FORK_INSIDE_A_SNAPSHOT, str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("child refused: this process was forked from inside a transaction"), run.stdout
    assert lines[1:] == ["child exit 0", "parent snapshot same", "store sound"], run.stdout


FORK_INSIDE_ONE_STORE = r"""
import os, select, sys, threading, blobpad

a = blobpad.open(sys.argv[1] + "/a")
b = blobpad.open(sys.argv[1] + "/b")
ea = a.put("in a\n", ttl=None)
eb = b.put(os.urandom(3 << 20), ttl=None)
b.get(eb.id)
inside, churned = threading.Event(), threading.Event()
seen = []

def hold_b():  # another thread's snapshot of b, open when the fork is asked for
    with b.engine.read() as txn:
        before = [(bytes(k), bytes(v)) for k, v in txn.scan("chunks")]
        inside.set()
        churned.wait(3)  # the fork waits for this snapshot to end (or, before, went ahead of it)
        seen.append([(bytes(k), bytes(v)) for k, v in txn.scan("chunks")] == before)

holder = threading.Thread(target=hold_b)
holder.start()
inside.wait(30)
done_r, done_w = os.pipe()
with a.engine.read():
    pid = os.fork()  # from inside a transaction of a (not of b)
    if pid == 0:
        code = 1
        try:
            try:
                a.get(ea.id)
                refused = False
            except blobpad.BlobpadError:
                refused = True
            b.delete(eb.id)  # b reopens in the child, and frees pages the parent's snapshot reads
            for _ in range(24):
                b.delete(b.put(os.urandom(400_000)).id)
            code = 0 if refused else 2
        finally:
            os.write(done_w, bytes([code]))
            os._exit(code)
if not select.select([done_r], [], [], 120)[0]:
    raise SystemExit("the child did not finish in 120 s")
churned.set()
holder.join(30)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
print("snapshot of b", "same" if seen == [True] else "changed", flush=True)
"""


def test_a_fork_inside_one_stores_transaction_still_waits_for_the_others(tmp_path):
    """A thread inside a transaction of store a forks while another thread reads store b:
    the fork waits for b's snapshot to end (before, it went ahead, and the child's reopen
    of b freed the slot that snapshot was read under)."""
    run = subprocess.run([sys.executable, "-c", FORK_INSIDE_ONE_STORE, str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    assert run.stdout.splitlines() == ["child exit 0", "snapshot of b same"], run.stdout + run.stderr[-5000:]


def test_a_cap_saved_by_another_process_applies_to_this_one(tmp_path):
    path = tmp_path / "store"
    with blobpad.open(path) as a:
        assert a.max_bytes is None
        subprocess.run([sys.executable, "-c", "import sys, blobpad; blobpad.open(sys.argv[1], max_bytes=1_000_000).close()",
                        str(path)], check=True)
        for i in range(5):
            a.put(os.urandom(500_000), ttl=100 + i)
        st = a.stats()
        assert st.max_bytes == 1_000_000 and a.max_bytes == 1_000_000
        assert st.stored_bytes <= 1_000_000, "the other process's cap was ignored"
        assert len(a.entries()) == 1  # the entries closest to expiry went first


def test_gc_never_removes_an_entry_that_reads_still_see(tmp_path):
    """Reads compare exact times; gc's index is in whole microseconds.  An entry that
    expires later within the current microsecond must survive gc, as it survives reads."""
    now = [1_000.0000002]  # a clock fine enough for tenths of a microsecond
    with blobpad.open(tmp_path / "store", clock=lambda: now[0]) as s:
        e = s.put("short", ttl=1e-6)  # the shortest ttl
        now[0] = e.expires_at - 1e-7  # it expires later within the current microsecond
        assert e.expires_at > now[0] and int(e.expires_at * 1e6) == int(now[0] * 1e6)
        assert s.exists(e.id)
        assert s.gc().entries == 0 and s.get(e.id) == "short"
        now[0] += 1e-6
        assert not s.exists(e.id) and s.gc().entries == 1
