"""Stress (issue 12, item 1): nothing hangs when puts cross map growths under load.

The deadlock this guards against: a reader (count(), grep) holds a read transaction
while it waits for the store's worker pool; the pool's tasks (a put's) waited for a
transaction of their own, behind the map growth that the put had asked for; and the
growth waited for the reader.  The rules that exclude it are in
:mod:`blobpad.engine.lmdb` ("Locking rules").

Each workload runs in a child process (``python tests/test_stress.py ...``) opened on
a store with a 1 MiB map, so that multi-MB puts cross several growths while the
other threads read in every mode (get, head, tail, range, byte_range, lines, grep,
count, stream), delete, run gc() and verify(), and write notepads.  One thread counts
a multi-MB entry in a loop from before the first put: the issue's scenario.  Every
read is checked against an in-memory oracle of what was put (entries that may be
deleted, replaced or expire may also be NotFound; nothing else).  In the threads
test, a thread also forks while the others are inside transactions: the forked
child must be able to use the store at once (it inherits the parent's locks).

A child that does not finish within ``BLOBPAD_STRESS_HANG_SECONDS`` (90 s; a normal
run takes a few seconds) dumps every thread's stack (faulthandler) and exits, and
the test fails showing them.  Nothing here measures speed: the figures printed
(``pytest -s``) say what was exercised.
"""

from __future__ import annotations

import faulthandler
import hashlib
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

import pytest
from oracles import wait_child

import blobpad
from blobpad import BlobpadError, NotFound, sample

HANG = float(os.environ.get("BLOBPAD_STRESS_HANG_SECONDS", "90"))
MAP = 1 << 20
MODES = ("get", "head", "tail", "range", "byte_range", "lines", "grep", "count", "stream")
THREADS_PUTTERS, THREADS_READERS = 3, 3
PROCS, PROCS_PUTTERS, PROCS_READERS = 3, 1, 1


# -- the workload (runs in the child process) ----------------------------------------


class Oracle:
    """What this process put: id -> (content, text, may vanish); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: dict[str, tuple[bytes, bool, bool]] = {}

    def add(self, eid: str, data: bytes, text: bool, volatile: bool) -> None:
        with self._lock:
            self.items[eid] = (data, text, volatile)

    def drop(self, eid: str) -> None:
        with self._lock:
            self.items.pop(eid, None)

    def pick(self, rng: random.Random, *, volatile: bool | None = None) -> tuple[str, bytes, bool, bool] | None:
        with self._lock:
            ids = [k for k, v in self.items.items() if volatile is None or v[2] == volatile]
            if not ids:
                return None
            eid = rng.choice(ids)
            return (eid, *self.items[eid])


def _big_text(lines: list[str], size: int, seed: int) -> bytes:
    """About ``size`` bytes of log lines: ``lines`` rotated and some tagged, so that
    entries share many chunks with each other and differ in others."""
    rng = random.Random(seed)
    out: list[str] = []
    total = 0
    r = rng.randrange(len(lines))
    while total < size:
        for line in lines[r:] + lines[:r]:
            if rng.random() < 0.01:
                line = f"{line} tag={seed}"
            out.append(line)
            total += len(line) + 1
            if total >= size:
                break
        r = rng.randrange(len(lines))
    return ("\n".join(out) + "\n").encode()


def _plan(proc: int, putter: int, n: int, lines: list[str]) -> list[tuple[str, bytes]]:
    """The puts of one putter: multi-MB incompressible (grows the map), multi-MB log
    text (many chunks: grep and count use the pool), and small text and binary."""
    rng = random.Random(proc * 1000 + putter)
    out: list[tuple[str, bytes]] = []
    for k in range(n):
        seed = proc * 100_000 + putter * 1000 + k
        kind = k % 4
        if kind == 0:
            out.append(("big-binary", rng.randbytes(rng.randrange(2 << 20, 3 << 20))))
        elif kind == 1:
            out.append(("big-text", _big_text(lines, rng.randrange(1 << 20, 2 << 20), seed)))
        elif kind == 2:
            out.append(("text", sample.multibyte_text(rng.randrange(1000, 60_000), seed=seed).encode()))
        else:
            out.append(("binary", sample.binary_blob(rng.randrange(100, 200_000), seed=seed)))
    return out


def _lines(s: str) -> list[str]:
    lines = s.split("\n")
    if s.endswith("\n"):
        lines.pop()
    return lines


def _needle(rng: random.Random, lines: list[str]) -> str | None:
    line = rng.choice(lines) if lines else ""
    if len(line) < 3:
        return None
    a = rng.randrange(len(line) - 2)
    return line[a : a + rng.randrange(3, 12)]


def check_read(store: blobpad.Store, mode: str, eid: str, data: bytes, text: bool, rng: random.Random) -> None:
    """One read of ``eid`` in ``mode``, compared with the oracle; NotFound propagates."""
    content: str | bytes = data.decode("utf-8") if text else data
    n = len(content)
    if mode == "get":
        got: Any = store.get(eid)
        want: Any = content
    elif mode == "head":
        k = rng.randrange(0, 5000)
        got, want = store.head(eid, k), content[:k]
    elif mode == "tail":
        k = rng.randrange(0, 5000)
        got, want = store.tail(eid, k), content[max(0, n - k) :]
    elif mode == "range":
        a, b = rng.randrange(-n - 5, n + 5), rng.randrange(-n - 5, n + 5)
        got, want = store.range(eid, a, b), content[a:b]
    elif mode == "byte_range":
        a = rng.randrange(0, len(data) + 1)
        b = rng.randrange(a, min(len(data), a + 300_000) + 1)
        got, want = store.byte_range(eid, a, b), data[a:b]
    elif mode == "lines":
        lines = _lines(data.decode("utf-8", "replace"))
        first = rng.randrange(1, len(lines) + 2)
        last = first + rng.randrange(0, 50)
        got, want = store.lines(eid, first, last), lines[first - 1 : last]
    elif mode in ("grep", "count"):
        if not text:
            return check_read(store, "lines", eid, data, text, rng)
        lines = _lines(content)  # type: ignore[arg-type]
        needle = _needle(rng, lines)
        if needle is None:
            return None
        hits = [(i + 1, line) for i, line in enumerate(lines) if needle in line]
        if mode == "count":
            got, want = int(store.count(eid, needle, fixed=True)), len(hits)
        else:
            k = rng.randrange(1, 20)
            found = store.grep(eid, needle, fixed=True, max_matches=k)
            got = ([(m.line, m.text) for m in found.matches], found.truncated)
            want = (hits[:k], len(hits) > k)
    elif mode == "stream":
        with store.stream(eid) as fh:
            parts = []
            while True:
                piece = fh.read(rng.randrange(1, 400_000))
                if not piece:
                    break
                parts.append(piece)
            pos = rng.randrange(0, len(data) + 1)
            fh.seek(pos)
            tail = fh.read(5000)
        got, want = (b"".join(parts), tail), (data, data[pos : pos + 5000])
    else:  # pragma: no cover
        raise AssertionError(mode)
    if got != want:
        raise AssertionError(f"{mode} of {eid} differs from what was put")
    return None


class Workload:
    """The threads of one process on one store path."""

    def __init__(self, path: str, proc: int, putters: int, readers: int, puts_each: int, fork: bool) -> None:
        self.path = path
        self.proc = proc
        self.fork = fork
        self.store = blobpad.open(path, map_size=MAP)
        self.other = blobpad.open(path, map_size=MAP)  # a second handle: its own pool, the same lock
        self.oracle = Oracle()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.ops: dict[str, int] = {}
        self.ops_lock = threading.Lock()
        self.not_found = 0
        self.lines = _lines(sample.log_text(256 << 10, seed=proc))
        self.plans = [_plan(proc, p, puts_each, self.lines) for p in range(putters)]
        self.readers = readers
        self.counting = threading.Event()

    def op(self, name: str, k: int = 1) -> None:
        with self.ops_lock:
            self.ops[name] = self.ops.get(name, 0) + k

    def guarded(self, fn: Any, *args: Any) -> Any:
        def run() -> None:
            try:
                fn(*args)
            except BaseException:
                self.errors.append(traceback.format_exc()[-3000:])
                self.stop.set()

        return threading.Thread(target=run, name=f"{fn.__name__}{args}")

    # -- roles --

    def putter(self, p: int) -> None:
        rng = random.Random(self.proc * 7 + p)
        session = f"p{self.proc}-{p}"
        self.counting.wait(30)
        for k, (kind, data) in enumerate(self.plans[p]):
            if self.stop.is_set():
                return
            text = kind in ("text", "big-text")
            name = f"n{k % 2}" if kind == "text" and k % 3 == 0 else None
            ttl = 0.5 if kind == "binary" and k % 2 else None
            src: Any = io.BytesIO(data) if rng.random() < 0.3 else data  # a stream too
            e = self.store.put(src, session=session, turn=k, name=name, ttl=ttl)
            if e.size_bytes != len(data) or e.sha256 != hashlib.sha256(data).hexdigest():
                raise AssertionError(f"put {k} of putter {p} returned a wrong entry")
            self.op("put")
            # may vanish: a named entry (a later put of the name replaces it), a short
            # ttl, and every fifth (the collector deletes some of these)
            self.oracle.add(e.id, data, text, volatile=name is not None or ttl is not None or k % 5 == 4)

    def reader(self, r: int) -> None:
        rng = random.Random(self.proc * 31 + r)
        i = 0
        while not self.stop.is_set() or i < 2 * len(MODES):
            mode = MODES[(i + r) % len(MODES)]
            i += 1
            picked = self.oracle.pick(rng)
            if picked is None:
                time.sleep(0.01)
                continue
            eid, data, text, volatile = picked
            try:
                check_read(self.store, mode, eid, data, text, rng)
            except NotFound:
                if not volatile:
                    raise
                with self.ops_lock:
                    self.not_found += 1
            self.op(mode)
            if i % 7 == 0:
                self.foreign(rng)

    def foreign(self, rng: random.Random) -> None:
        """Read an entry any process put: its content must hash to its Entry.sha256."""
        listed = self.store.entries(limit=200)
        if not listed:
            return
        e = rng.choice(listed)
        try:
            got = self.store.get(e.id)
        except NotFound:
            return
        raw = got.encode("utf-8") if isinstance(got, str) else got
        if hashlib.sha256(raw).hexdigest() != e.sha256:
            raise AssertionError(f"get({e.id}) does not hash to its Entry.sha256")
        self.op("get")

    def counter(self) -> None:
        """The issue's scenario: count() a multi-MB entry again and again while puts grow the map."""
        data = _big_text(self.lines, 3 << 20, -1 - self.proc)
        e = self.store.put(data, session=f"p{self.proc}-base", ttl=None)
        self.oracle.add(e.id, data, True, False)
        lines = _lines(data.decode())
        want = {w: sum(w in line for line in lines) for w in ("ERROR", "WARN", "user=")}
        self.counting.set()
        i = 0
        while not self.stop.is_set() or i < 3:
            word = ("ERROR", "WARN", "user=")[i % 3]
            if self.store.count(e.id, word, fixed=True) != want[word]:
                raise AssertionError(f"count({word!r}) of the base entry is wrong")
            self.op("count")
            i += 1

    def collector(self) -> None:
        """gc() and verify() in a loop, and the deletes (on the second handle)."""
        rng = random.Random(self.proc)
        i = 0
        while not self.stop.is_set() or i < 2:
            picked = self.oracle.pick(rng, volatile=True)
            if picked is not None and rng.random() < 0.5:
                try:
                    self.other.delete(picked[0])
                except NotFound:
                    pass  # expired, replaced, or gc took it
                self.oracle.drop(picked[0])
                self.op("delete")
            self.other.gc()
            self.op("gc")
            if i % 10 == 0:
                report = self.other.verify()
                if not report.ok:
                    raise AssertionError(f"verify() during the run: {report.problems[:5]}")
                self.op("verify")
            i += 1
            time.sleep(0.02)

    def notepad(self) -> None:
        """Notepad writes and appends (on the second handle), each read back."""
        pad = self.other.notepad(f"p{self.proc}-pad", budgets={"log": None})
        log: list[str] = []
        i = 0
        while not self.stop.is_set() or i < 5:
            text = f"step {i} of process {self.proc}"
            pad.write(text)
            line = f"line {i}"
            if len(log) < 2000:
                pad.append(line, space="log")
                log.append(line)
            if pad.read() != text or pad.read("log") != "\n".join(log):
                raise AssertionError("the notepad did not read back what was written")
            self.op("notepad", 3)
            i += 1

    def forker(self) -> None:
        """fork() while the other threads are inside transactions and pool work: the child
        inherits the locks as they were, and must still be able to use the store at once."""
        self.counting.wait(30)
        for i in range(3):
            time.sleep(0.3)
            pid = os.fork()
            if pid == 0:  # the child: only this thread exists here
                code = 1
                try:
                    data = f"forked child {i}\n".encode() * 2000
                    e = self.store.put(data, session="fork")
                    ok = self.store.get(e.id) == data.decode() and self.store.count(e.id, "child") == 2000
                    ok = ok and self.other.notepad(f"fork{i}").write("forked").ok
                    code = 0 if ok else 3
                finally:
                    os._exit(code)
            code = wait_child(pid, min(HANG, 60))
            if code is None:
                raise AssertionError("a child forked during the run hung on its first store calls")
            if code != 0:
                raise AssertionError(f"a child forked during the run failed (exit {code})")
            self.op("fork")

    def run(self) -> dict[str, Any]:
        start = time.time()
        start_map = self.store.stats().map_size
        helpers = [self.guarded(self.counter), self.guarded(self.collector), self.guarded(self.notepad)]
        if self.fork and hasattr(os, "fork"):
            helpers.append(self.guarded(self.forker))
        helpers += [self.guarded(self.reader, r) for r in range(self.readers)]
        putters = [self.guarded(self.putter, p) for p in range(len(self.plans))]
        for t in helpers + putters:
            t.start()
        for t in putters:
            t.join()
        self.stop.set()
        for t in helpers:
            t.join()
        if self.errors:
            raise AssertionError("a thread failed:\n" + "\n".join(self.errors))
        # every entry that cannot have vanished reads back whole, after the run
        survivors = {}
        for eid, (data, text, volatile) in list(self.oracle.items.items()):
            if not volatile:
                check_read(self.store, "get", eid, data, text, random.Random(0))
                survivors[eid] = hashlib.sha256(data).hexdigest()
        end_map = self.store.stats().map_size
        self.store.close()
        self.other.close()
        return {
            "threads": len(helpers) + len(putters), "ops": self.ops, "not_found": self.not_found,
            "start_map": start_map, "end_map": end_map, "seconds": round(time.time() - start, 1),
            "put_bytes": sum(len(d) for plan in self.plans for _, d in plan), "survivors": survivors,
        }


def _child(path: str, proc: int, putters: int, readers: int, puts_each: int, fork: int) -> None:
    faulthandler.dump_traceback_later(HANG, exit=True)  # a hang: every stack to stderr, then exit 1
    result = Workload(path, proc, putters, readers, puts_each, bool(fork)).run()
    faulthandler.cancel_dump_traceback_later()
    print("RESULT " + json.dumps(result), flush=True)


# -- the tests (run the children, check what they report) ------------------------------


def _spawn(path: str, proc: int, putters: int, readers: int, puts_each: int, *, fork: bool = False) -> subprocess.Popen[str]:
    args = [sys.executable, os.path.abspath(__file__), path, *(str(a) for a in (proc, putters, readers, puts_each, int(fork)))]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _collect(children: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + HANG + 30  # the children dump their stacks at HANG; this is a backstop
    results = []
    try:
        for child in children:
            try:
                out, err = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                out, err = child.communicate()
                raise AssertionError(f"a stress child hung past {HANG + 30:.0f} s:\n{err[-20000:]}") from None
            if "Timeout (" in err:
                raise AssertionError(f"a stress child hung for {HANG:.0f} s; every thread's stack:\n{err[-20000:]}")
            assert child.returncode == 0, f"a stress child failed (exit {child.returncode}):\n{err[-20000:]}"
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
            results.append(json.loads(line[len("RESULT ") :]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
    return results


def _growths(start: int, end: int) -> int:
    return max(0, (end // start).bit_length() - 1)


def _summary(label: str, results: list[dict[str, Any]], end_map: int) -> str:
    ops: dict[str, int] = {}
    for r in results:
        for k, v in r["ops"].items():
            ops[k] = ops.get(k, 0) + v
    return (
        f"{label}: {len(results)} process(es), {sum(r['threads'] for r in results)} threads, "
        f"{sum(ops.values())} operations ({', '.join(f'{k} {v}' for k, v in sorted(ops.items()))}), "
        f"{sum(r['put_bytes'] for r in results) >> 20} MiB put, map {MAP >> 20} MiB -> {end_map >> 20} MiB "
        f"({_growths(MAP, end_map)} growths), {sum(r['not_found'] for r in results)} NotFound of vanishing entries, "
        f"{max(r['seconds'] for r in results)} s"
    )


def _check_after(path: str, results: list[dict[str, Any]]) -> int:
    """Reopened: every surviving entry hashes right, verify() is clean; returns the map size."""
    with blobpad.open(path) as s:
        for r in results:
            for eid, digest in r["survivors"].items():
                got = s.get(eid)
                raw = got.encode("utf-8") if isinstance(got, str) else got
                assert hashlib.sha256(raw).hexdigest() == digest, f"entry {eid} lost or changed"
        report = s.verify()
        assert report.ok, report.problems[:10]
        return s.stats().map_size


def _assert_exercised(results: list[dict[str, Any]], end_map: int) -> None:
    ops: dict[str, int] = {}
    for r in results:
        for k, v in r["ops"].items():
            ops[k] = ops.get(k, 0) + v
    missing = [m for m in (*MODES, "put", "gc", "delete", "verify", "notepad") if not ops.get(m)]
    assert not missing, f"the run did not exercise {missing}"
    assert _growths(MAP, end_map) >= 4, f"the map only grew to {end_map} bytes: too few growths crossed"


def test_threads_cross_map_growths_without_hanging(tmp_path, record_property):
    """Many threads on one store of one process: puts cross several map growths while
    count() runs on a multi-MB entry (the issue's deadlock) and every other operation."""
    path = str(tmp_path / "threads")
    results = _collect([_spawn(path, 0, THREADS_PUTTERS, THREADS_READERS, 8, fork=True)])
    end_map = _check_after(path, results)
    _assert_exercised(results, end_map)
    summary = _summary("stress, threads", results, end_map)
    print("\n" + summary)
    record_property("stress", summary)


def test_processes_cross_map_growths_without_hanging(tmp_path, record_property):
    """Several processes, each with its own threads, on one store path: each grows the
    map or adopts another's growth while the others read, delete, gc and write notepads."""
    path = str(tmp_path / "procs")
    with blobpad.open(path, map_size=MAP) as s:
        assert s.stats().map_size == MAP
    results = _collect([_spawn(path, p, PROCS_PUTTERS, PROCS_READERS, 8) for p in range(PROCS)])
    end_map = _check_after(path, results)
    _assert_exercised(results, end_map)
    summary = _summary("stress, processes", results, end_map)
    print("\n" + summary)
    record_property("stress", summary)



def test_a_transaction_inside_another_is_an_error_not_a_hang(store):
    """The class behind such hangs: a thread that waits for the resize lock while it
    holds it (a read, write or growth inside a read) would wait for itself as soon as
    a growth is queued.  It raises at once, and the store stays usable."""
    e = store.put("one line\n")
    with store.engine.read():
        with pytest.raises(BlobpadError, match="inside another"):
            store.get(e.id)
        with pytest.raises(BlobpadError, match="inside another"):
            store.put("x")
        if store.engine.capabilities.compaction:  # LMDB: takes the resize lock's exclusive side
            with pytest.raises(BlobpadError, match="inside another"):
                store.compact()
    assert store.get(e.id) == "one line\n"
    assert store.put("y").size_bytes == 1 and store.count(e.id, "line") == 1


if __name__ == "__main__":
    _child(sys.argv[1], *(int(a) for a in sys.argv[2:7]))
