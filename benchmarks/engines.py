"""blobpad's reads on its two engines, side by side: ``python -m benchmarks.engines RUN.json``.

Renders, from a pytest-benchmark JSON of ``bench_read.py`` and ``bench_grep.py``,
a Markdown table of the median latency of each read operation and size for the
four blobpad readers: LMDB with its chunk cache off (``blobpad``) and with the
64 MB cache (``blobpad-warm``), and the memory engine likewise
(``blobpad-memory``, ``blobpad-memory-warm``).  ``--command`` names the command
that measured the run (the JSON does not record it); the table goes to standard
output.  ``benchmarks/results/engines.md`` was made this way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .report import OPS, Results, fmt_multiple, fmt_time, label, size_label, table

PEERS = ("blobpad", "blobpad-warm", "blobpad-memory", "blobpad-memory-warm")
READ_OPS = ("head", "tail", "range", "lines", "lines_mid", "grep_absent", "grep_rare", "grep_first", "count",
            "grep_all")


def render(res: Results, command: str, render_command: str) -> str:
    """The Markdown page: what was run, on what, and one row per operation, kind and size."""
    raw = res.raw
    info = raw.get("blobpad", {})
    machine = raw.get("machine_info", {})
    cpu = machine.get("cpu", {}).get("brand_raw") or machine.get("processor") or "unknown CPU"
    rows = []
    for op in READ_OPS:
        for kind in res.kinds(op):
            for size in res.sizes(op, kind):
                m = {p: res.median(op, kind, size, p) for p in PEERS}
                if not any(m.values()):
                    continue
                rows.append([f"{op} ({kind})", size_label(size), *(fmt_time(m[p]) for p in PEERS),
                             fmt_multiple(m["blobpad-memory"], m["blobpad"]),
                             fmt_multiple(m["blobpad-memory-warm"], m["blobpad-warm"])])
    commit = info.get("commit") or "?"
    dirty = " (with uncommitted changes to blobpad/)" if info.get("engine_dirty") else ""
    load = info.get("loadavg")
    lines = [
        "# blobpad's reads on LMDB and on the memory engine", "",
        f"Measured {raw.get('datetime', '?')[:16].replace('T', ' ')} UTC at commit `{commit}`{dirty}, "
        f"blobpad {info.get('version', '?')}, Python {info.get('python', '?')}, {info.get('cpus', '?')} CPUs ({cpu}).",
    ]
    if load:
        lines.append(f"The machine's {info.get('cpus', '?')} cores were shared with other jobs during the run "
                     f"(load average at its end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}): "
                     "rounds of the same read spread widely, so treat differences under about 2× as noise.")
    lines += [
        "", "```sh", command, render_command, "```", "",
        "Median time per call (pytest-benchmark's median of its rounds). *Cache off* is "
        "`blobpad.open(target, cache_bytes=0)`, *warm* the 64 MB cache of decompressed chunks after the first "
        "reads; LMDB is a store directory, memory is `memory://`. The last two columns divide the memory "
        "engine's time by LMDB's (below 1× the memory engine is faster).", "",
        *table(["read", "size", *(label(p, "head") for p in PEERS),
                "memory ÷ LMDB (cache off)", "memory ÷ LMDB (warm)"], rows, "ll" + "r" * (len(PEERS) + 2)),
        "",
        "The operations:", "",
        *(f"* `{op}`: {OPS[op]}" for op in READ_OPS), "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.engines", description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a pytest-benchmark JSON of bench_read.py and bench_grep.py")
    ap.add_argument("--command", default="?", help="the command that measured it, shown on the page")
    args = ap.parse_args(argv)
    res = Results(json.loads(Path(args.json).read_text()))
    if not any(k[3] in PEERS for k in res.items):
        print(f"{args.json} holds no blobpad read results", file=sys.stderr)
        return 1
    shown = f"python -m benchmarks.engines {args.json} --command '...' > benchmarks/results/engines.md"
    sys.stdout.write(render(res, args.command, shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
