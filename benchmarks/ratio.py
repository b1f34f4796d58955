"""Compression ratio of blobpad on a folder of real logs: ``python -m benchmarks.ratio DIR``.

Puts every ``*.log`` under DIR into a fresh store with the default options, one entry
per file, and prints each file's raw and stored bytes and their ratio, then the total.
The figure in the README comes from the loghub sample (``DIR`` = a checkout's
``../shared/corpus/loghub``); the test suite never depends on that folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import blobpad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ratio", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", metavar="DIR", help="a folder holding *.log files (searched recursively)")
    args = ap.parse_args(argv)
    if not Path(args.dir).is_dir():
        ap.error(f"{args.dir} is not a directory")
    files = sorted(Path(args.dir).rglob("*.log"))
    if not files:
        print(f"no *.log file under {args.dir}", file=sys.stderr)
        return 1
    total_raw = total_stored = 0
    with tempfile.TemporaryDirectory() as tmp, blobpad.open(Path(tmp) / "store", cache_bytes=0) as store:
        for path in files:
            before = store.stats().stored_bytes
            store.put(path)
            stored = store.stats().stored_bytes - before
            raw = path.stat().st_size
            total_raw += raw
            total_stored += stored
            print(f"{path.name:28s} {raw:>12,} B -> {stored:>11,} B  {raw / max(stored, 1):6.2f}x")
    label = f"all {len(files)} files"
    print(f"{label:28s} {total_raw:>12,} B -> {total_stored:>11,} B  {total_raw / max(total_stored, 1):6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
