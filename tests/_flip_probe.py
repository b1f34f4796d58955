"""Probe for the byte-flip sweep (tests/test_byteflip.py), run as a subprocess.

``python _flip_probe.py make DIR``: build the small reference store in DIR/store and
write what was put to DIR/expected.json.

``python _flip_probe.py sweep DIR START STOP``: for each offset in [START, STOP) copy
DIR/store/data.mdb to a fresh directory, invert that byte, open the copy and read
everything back; print one line per offset: ``offset class detail``.  The classes:

* ``harmless``: every read gave exactly what was put, and verify() is ok;
* ``corrupt``: a read (or the open) raised CorruptData;
* ``named``: verify() reported damage (and no read raised CorruptData);
* ``WRONG``: a read returned something other than what was put, or an entry or note
  went missing while verify() said ok;
* ``ERROR``: an exception that is not a blobpad error escaped.

A crash (a signal) ends the process; the parent sees which offset it was on from the
``start`` line printed before each probe.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable

import blobpad
from blobpad import BlobpadError, CorruptData, NotFound

SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)


def make(top: str) -> None:
    path = os.path.join(top, "store")
    text = "".join(f"2026-11-23 12:00:{i % 60:02d} INFO req={i} ok\n" for i in range(40))
    expected: dict = {"entries": {}, "notes": {}}
    with blobpad.open(path, chunk_params=SMALL) as s:
        for session, data, kw in (
            ("alpha", text, {"name": "log", "turn": 1}),
            ("beta", text[:300] + "ERROR boom\n", {"turn": 2, "ttl": None}),
            ("beta", bytes(range(256)) * 2, {"kind": "binary"}),
        ):
            e = s.put(data, session=session, **kw)
            expected["entries"][e.id] = {
                "session": session, "name": kw.get("name"), "turn": kw.get("turn"),
                "data": data if isinstance(data, str) else data.hex(), "text": isinstance(data, str),
            }
        for session, plan, notes in (("alpha", "1. find the error\n2. fix it", "seen req=7"), ("beta", "only plan", "")):
            pad = s.notepad(session)
            pad.set_plan(plan)
            if notes:
                pad.append_notes(notes)
            expected["notes"][session] = {"plan": pad.read("plan"), "notes": pad.read("notes")}
        s.compact()  # no free pages: every byte swept is one LMDB may read
    expected["used_bytes"] = used_bytes(path)
    with open(os.path.join(top, "expected.json"), "w") as fh:
        json.dump(expected, fh)


def used_bytes(path: str) -> int:
    """The bytes of data.mdb up to its last page in use (the rest is the sparse, never-read tail)."""
    import lmdb

    env = lmdb.open(path, readonly=True, lock=False, max_dbs=32)
    try:
        return (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    finally:
        env.close()


class Wrong(Exception):
    pass


def _check(s: blobpad.Store, expected: dict) -> tuple[list[str], list[str]]:
    """Read everything; return (missing, corrupt) descriptions; raise Wrong on a wrong read."""
    missing: list[str] = []
    corrupt: list[str] = []

    def attempt(what: str, fn, want) -> None:
        try:
            got = fn()
        except CorruptData as exc:
            corrupt.append(f"{what}: {exc}")
            return
        except NotFound:
            missing.append(what)
            return
        if got == "" and want != "" and what.startswith(("plan", "notes")):
            missing.append(what)  # a notepad space reads "" when it has no current version: its "not found"
            return
        if got != want:
            raise Wrong(f"{what}: got {str(got)[:80]!r}")

    for eid, e in expected["entries"].items():
        data = e["data"] if e["text"] else bytes.fromhex(e["data"])
        lines = data.splitlines(keepends=True) if e["text"] else None
        attempt(f"get {eid}", lambda eid=eid: s.get(eid), data)
        attempt(f"head {eid}", lambda eid=eid: s.head(eid, 50), data[:50])
        attempt(f"tail {eid}", lambda eid=eid: s.tail(eid, 50), data[-50:])
        attempt(f"range {eid}", lambda eid=eid: s.range(eid, 100, 200), data[100:200])
        attempt(f"stat {eid}", lambda eid=eid: _described(s.stat(eid)),
                (e["session"], e["name"], e["turn"], len(data.encode() if e["text"] else data)))
        if e["text"]:
            attempt(f"lines {eid}", lambda eid=eid: s.lines(eid, 3, 7), [x.rstrip("\n") for x in lines[2:7]])
            attempt(f"count {eid}", lambda eid=eid: int(s.count(eid, "req=1")), sum("req=1" in x for x in lines))
        if e["name"]:
            attempt(f"find {e['name']}", lambda e=e: s.find(e["name"], session=e["session"]).id, eid)
    for session in {e["session"] for e in expected["entries"].values()}:
        want = sorted(eid for eid, e in expected["entries"].items() if e["session"] == session)

        def listing(session: str = session) -> list[str]:
            return sorted(x.id for x in s.entries(session=session))

        try:
            got = listing()
        except CorruptData as exc:
            corrupt.append(f"entries {session}: {exc}")
            continue
        if not set(got) <= set(want):
            raise Wrong(f"entries({session}) lists {sorted(set(got) - set(want))}")
        missing.extend(f"listed {x}" for x in set(want) - set(got))
    for session, note in expected["notes"].items():
        attempt(f"plan {session}", lambda session=session: s.notepad(session).read("plan"), note["plan"])
        attempt(f"notes {session}", lambda session=session: s.notepad(session).read("notes"), note["notes"])
    return missing, corrupt


def _described(entry: blobpad.Entry) -> tuple:
    return entry.session, entry.name, entry.turn, entry.size_bytes


def probe(top: str, offset: int, expected: dict, work: str, image: bytes, size: int) -> tuple[str, str]:
    dst_dir = os.path.join(work, f"s{offset}")
    os.mkdir(dst_dir, 0o700)
    dst = os.path.join(dst_dir, "data.mdb")
    damaged = bytearray(image)
    damaged[offset] ^= 0xFF
    with open(dst, "wb") as fh:
        fh.write(damaged)
        fh.truncate(size)  # the same sparse tail as the original
    try:
        try:
            s = blobpad.open(dst_dir, sync=False, cache_bytes=0)
        except CorruptData as exc:
            return "corrupt", f"open: {exc}"
        try:
            missing, corrupt = _check(s, expected)
            report = s.verify()
        finally:
            s.close()
    except Wrong as exc:
        return "WRONG", str(exc)
    except BlobpadError as exc:
        return "ERROR", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - the probe's whole point is to classify
        return "ERROR", f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(dst_dir, ignore_errors=True)
    if corrupt:
        return "corrupt", corrupt[0]
    if not report.ok:
        return "named", report.problems[0]
    if missing:
        return "WRONG", f"missing while verify() is ok: {missing[0]}"
    return "harmless", ""


def sweep(top: str, start: int, stop: int, step: int = 1) -> None:
    probe_all(top, range(start, stop, step))


def probe_all(top: str, offsets: Iterable[int]) -> None:
    with open(os.path.join(top, "expected.json")) as fh:
        expected = json.load(fh)
    src = os.path.join(top, "store", "data.mdb")
    with open(src, "rb") as fh:
        image = fh.read(expected["used_bytes"])
    size = os.path.getsize(src)
    work = tempfile.mkdtemp(prefix="flip-")
    try:
        for offset in offsets:
            if offset >= len(image):
                break
            print(f"start {offset}", flush=True)
            cls, detail = probe(top, offset, expected, work, image, size)
            print(f"{offset} {cls} {detail[:300]!r}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "list":
        with open(sys.argv[3]) as fh:
            probe_all(sys.argv[2], [int(x) for x in fh.read().split()])
    else:
        sweep(sys.argv[2], *(int(a) for a in sys.argv[3:6]))
