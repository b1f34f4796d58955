"""A full disk is StoreFull or a clear BlobpadError, never a signal (issue 12).

Each case runs on a small tmpfs mounted for the test (as root, as CI runs; elsewhere
the mount is refused and the case says so) and in a subprocess, so that a SIGBUS
shows as a failure instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr[-2000:]}"
    return proc


def test_creating_a_store_on_a_full_disk_is_store_full(small_fs):
    small_fs.fill()
    proc = _run(
        """
        import sys, blobpad
        try:
            blobpad.open(sys.argv[1]).put("x")
        except blobpad.StoreFull as exc:
            print("StoreFull", exc)
        """,
        str(small_fs / "store"),
    )
    assert proc.returncode == 0 and proc.stdout.startswith("StoreFull"), proc.stdout + proc.stderr


@pytest.mark.parametrize("sparse_lock", [False, True], ids=["new", "sparse-lock-file-of-an-older-store"])
def test_many_readers_on_a_full_disk_never_fault(small_fs, sparse_lock):
    path = small_fs / "store"
    _run(
        """
        import sys, blobpad
        with blobpad.open(sys.argv[1], max_readers=256) as s:
            s.put("hello\\n" * 1000, ttl=None, name="log")
        """,
        str(path),
    )
    if sparse_lock:  # what LMDB itself leaves: a lock file with no blocks behind its pages
        lock = path / "lock.mdb"
        size = lock.stat().st_size
        os.truncate(lock, 0)
        os.truncate(lock, size)
    small_fs.fill()
    proc = _run(
        """
        import sys, threading, blobpad
        results = []
        def read():
            try:
                with blobpad.open(sys.argv[1]) as s:
                    results.append(s.get(s.find("log").id) == "hello\\n" * 1000)
            except blobpad.BlobpadError as exc:
                results.append(type(exc).__name__)
        threads = [threading.Thread(target=read) for _ in range(64)]
        for t in threads: t.start()
        for t in threads: t.join(60)
        print(sorted(set(map(str, results))), len(results))
        """,
        str(path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcomes, count = proc.stdout.rsplit(" ", 1)
    assert int(count) == 64
    assert set(eval(outcomes)) <= {"True", "StoreFull"}, proc.stdout  # read exactly, or told the disk is full
