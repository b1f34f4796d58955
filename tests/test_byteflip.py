"""The byte-flip sweep (issue 12): no damage to the data file ever turns into wrong bytes.

A small store (three entries in two sessions, one named, one binary; two notepads) is
built and compacted, so that every page up to its last one is a page LMDB may read.
Then, one byte at a time, a fresh copy of ``data.mdb`` gets that byte inverted and is
opened and read back in full in a subprocess (tests/_flip_probe.py), which classes the
outcome:

* harmless: every read gives exactly what was put and verify() is ok;
* corrupt: a read or the open raised CorruptData;
* named: verify() reported the damage;

and never WRONG (a read returned other content, or something went missing while
verify() said ok), ERROR (any other exception) or a crash (a signal: the probe
process dies, and the sweep goes on from the next byte in a new one, so that every
crash is counted).

By default the sweep takes every byte of every page header region (the first 64
bytes of each page, where LMDB keeps page numbers, flags and node offsets) and every
11th byte elsewhere, in two processes; ``BLOBPAD_FLIP_STEP=1`` sweeps every byte (the
exhaustive run, about ten minutes on two cores).
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

PROBE = Path(__file__).parent / "_flip_probe.py"
PAGE = 4096
HEADER = 64


def _offsets(used: int, step: int) -> list[int]:
    if step == 1:
        return list(range(used))
    picked = {o for o in range(0, used, step)}
    for page in range(0, used, PAGE):
        picked.update(range(page, page + HEADER))
    return sorted(picked)


def _run(top: Path, offsets: list[int]) -> tuple[collections.Counter[str], list[str]]:
    """Probe ``offsets`` in subprocesses, starting a new one after a crash."""
    counts: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    todo = list(offsets)
    while todo:
        listing = top / f"offsets-{os.getpid()}-{todo[0]}.txt"
        listing.write_text("\n".join(map(str, todo)))
        proc = subprocess.run(
            [sys.executable, str(PROBE), "list", str(top), str(listing)],
            capture_output=True, text=True, timeout=3600,
        )
        current = None
        done: set[int] = set()
        for line in proc.stdout.splitlines():
            if line.startswith("start "):
                current = int(line.split()[1])
                continue
            offset, cls, detail = line.split(" ", 2)
            done.add(int(offset))
            counts[cls] += 1
            if cls in ("WRONG", "ERROR"):
                bad.append(line)
        if proc.returncode == 0:
            break
        assert current is not None, proc.stderr[-2000:]
        counts["CRASH"] += 1
        bad.append(f"{current} CRASH (exit {proc.returncode}) {proc.stderr[-300:]!r}")
        todo = [o for o in todo if o > current and o not in done]
    return counts, bad


def test_no_flipped_byte_ever_reads_as_other_content(tmp_path):
    top = tmp_path / "flip"
    top.mkdir()
    subprocess.run([sys.executable, str(PROBE), "make", str(top)], check=True, timeout=120)
    import json

    used = json.loads((top / "expected.json").read_text())["used_bytes"]
    step = int(os.environ.get("BLOBPAD_FLIP_STEP", "11"))
    offsets = _offsets(used, step)
    halves = [offsets[0::2], offsets[1::2]]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda part: _run(top, part), halves))
    counts: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    for c, b in results:
        counts.update(c)
        bad.extend(b)
    print(f"byte-flip sweep: {len(offsets)} of {used} bytes flipped: {dict(counts)}")
    assert not bad, "\n".join(bad[:20])  # no wrong read, no other error, no crash
    assert sum(counts.values()) == len(offsets)
    # The sweep must really reach damage: detection by reads and by verify() both happen.
    assert counts["corrupt"] > 0 and counts["named"] > 0 and counts["harmless"] > 0, dict(counts)


@pytest.mark.parametrize("offset_in_page", [18, 19, 44, 45])
def test_a_damaged_node_offset_on_the_last_page_is_not_a_crash(tmp_path, offset_in_page):
    """Found by the sweep: an inverted node offset on a page near the end of the file sent
    LMDB's read past the end of data.mdb (SIGBUS); the file is now backed to the whole map."""
    top = tmp_path / "flip"
    top.mkdir()
    subprocess.run([sys.executable, str(PROBE), "make", str(top)], check=True, timeout=120)
    import json

    used = json.loads((top / "expected.json").read_text())["used_bytes"]
    offsets = [page + offset_in_page for page in range(2 * PAGE, used, PAGE)]
    counts, bad = _run(top, offsets)
    assert not bad, "\n".join(bad)  # neither a wrong read nor a crash
    assert sum(counts.values()) == len(offsets)
