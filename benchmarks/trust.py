"""The trust figures of issue 12, measured (not asserted): ``python -m benchmarks.trust``.

* ``patterns [--mb 20]``: the time of grep and count of the patterns that defeat RE2's
  DFA on a generated log, under the default search budget (library and Toolbox);
* ``rss [--mb 1024]``: the peak memory of each kind of ``lines`` read (and a Toolbox
  grep) on a single-line entry of that size, each in a fresh process that samples
  ``/proc/self/status``.

Both generate their data in a temporary directory and delete it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import blobpad
from blobpad import Toolbox, sample
from blobpad.reads import SEARCH_TIMEOUT

PATTERNS = (r"[ab]*a.{28}$", r".*[0-9].{30}$", r".*[0-9].{100}$")


def patterns(mb: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.txt")
        sample.write_log(log, mb << 20, 1)
        with blobpad.open(os.path.join(d, "store")) as store:
            e = store.put(Path(log), session="s", turn=1)
            print(f"entry: {e.size_bytes:,} bytes, {e.lines:,} lines; default budget {SEARCH_TIMEOUT} s")
            tb = Toolbox(store, session="s", turn=1)
            for pat in PATTERNS:
                for kind in ("grep", "count"):
                    t = time.perf_counter()
                    if kind == "grep":
                        r = store.grep(e.id, pat, max_matches=10**9, timeout=SEARCH_TIMEOUT)
                        what = f"{len(r)} matches"
                    else:
                        r = store.count(e.id, pat, timeout=SEARCH_TIMEOUT)
                        what = f"count {int(r)}"
                    dt = time.perf_counter() - t
                    print(f"library {kind:5} {pat!r:20} {dt:6.2f} s  {what}, timed_out={r.timed_out}, "
                          f"searched_lines={r.searched_lines}")
                t = time.perf_counter()
                answer = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": pat})
                print(f"Toolbox grep  {pat!r:20} {time.perf_counter() - t:6.2f} s  ok={answer['ok']}, "
                      f"timed_out={answer.get('timed_out', False)}")


_CHILD = r"""
import json, sys, threading, time
import blobpad
from blobpad import Toolbox
from blobpad.cli import main as cli_main

def status():
    d = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmHWM", "RssAnon"):
            d[k] = int(v.split()[0])
    return d

DB, ID, OUT = sys.argv[1:4]
s = blobpad.open(DB)
tb = Toolbox(s, session="s", turn=1)
s.stat(ID)
base = status()
peak = [0]
stop = threading.Event()
def watch():
    while not stop.wait(0.002):
        peak[0] = max(peak[0], status()["RssAnon"])
threading.Thread(target=watch, daemon=True).start()
t0 = time.perf_counter()
OP
dt = time.perf_counter() - t0
stop.set()
end = status()
json.dump({"base": base["VmHWM"], "hwm": end["VmHWM"], "anon": max(peak[0], end["RssAnon"]), "secs": dt}, open(OUT, "w"))
"""

_OPS = {
    "Toolbox lines mode (what the MCP server runs)": "tb.call('scratchpad_read', {'scratchpad_id': ID, 'mode': 'lines'})",
    "Store.line_windows(id, 1, 1)": "s.line_windows(ID, 1, 1)",
    "blobpad read --lines 1 (to /dev/null)": "cli_main(['--db', DB, 'read', ID, '--lines', '1'])",
    "Toolbox grep of a literal": "tb.call('scratchpad_read', {'scratchpad_id': ID, 'mode': 'grep', 'pattern': 'zq'})",
    "Store.lines(id, 1, 1) (the whole line, as asked)": "s.lines(ID, 1, 1)",
}


def rss(mb: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "store")
        with blobpad.open(db) as store:
            block = ("x" * 1023 + "y") * 1024
            stream = os.path.join(d, "line.txt")
            with open(stream, "w") as fh:
                for _ in range(mb):
                    fh.write(block)
            eid = store.put(Path(stream), session="s", turn=1, ttl=None).id
            os.remove(stream)
        print(f"a single line of {mb} MiB")
        for name, op in _OPS.items():
            out = os.path.join(d, "out.json")
            with open(os.devnull, "w") as devnull:
                proc = subprocess.run([sys.executable, "-c", _CHILD.replace("OP", op), db, eid, out],
                                      stdout=devnull, stderr=subprocess.PIPE, text=True)
            if proc.returncode:
                print(f"{name:50} failed: {proc.stderr[-500:]}")
                continue
            r = json.loads(Path(out).read_text())
            print(f"{name:50} peak RSS {r['hwm'] / 1024:7.1f} MiB (open store {r['base'] / 1024:6.1f} MiB), "
                  f"peak anonymous {r['anon'] / 1024:7.1f} MiB, {r['secs']:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trust", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("patterns", "rss"))
    parser.add_argument("--mb", type=int, help="size of the log (patterns, default 20) or the line (rss, default 1024)")
    args = parser.parse_args(argv)
    if args.what == "patterns":
        patterns(args.mb or 20)
    else:
        rss(args.mb or 1024)
    return 0


if __name__ == "__main__":
    sys.exit(main())
