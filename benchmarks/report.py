"""``python -m benchmarks``: run the suite, then write a Markdown report and a chart.

By default it runs a quick version (1 and 10 MB, few rounds, a few minutes) and
writes ``REPORT.md``, ``latency.png`` and the raw ``benchmark.json`` into
``bench-data/report/``.  ``--full`` measures 1, 10 and 100 MB with
pytest-benchmark's default rounds; ``--out benchmarks/results`` updates the
committed report; ``--from-json FILE`` only renders an earlier run.

Every number comes from the pytest-benchmark JSON: times are the medians of the
rounds, and the figures that are not times (stored bytes, new chunks, peak RSS)
come from each benchmark's ``extra_info``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import ABSENT_LITERAL, COUNT_PATTERN, DEFAULT_SIZES_MB, FREQUENT_PATTERN, MB, RARE_LITERAL
from .config import size_label as _id_label
from .peers import READERS, WRITERS

ROOT = Path(__file__).resolve().parent.parent

READ_ORDER = ("blobpad", "blobpad-warm", "blobpad-memory", "blobpad-memory-warm", "blobpad-redis", "blobpad-redis-warm",
              "sqlite-seed", "diskcache", "naive-redis", "mmap-re", "rg", "zstd-rg", "sed", "zstd-sed")
PUT_ORDER = ("blobpad", "sqlite-seed", "diskcache", "file", "zstd-cli")

OPS: dict[str, str] = {
    "put": "put a file into an empty store",
    "reput_same": "re-put of identical content",
    "reput_append": "re-put after 1 MB was appended",
    "reput_insert": "re-put after one line was inserted in the middle",
    "head": "head: first 2000 characters",
    "tail": "tail: last 2000 characters",
    "range": "range: 2000 characters at random offsets",
    "lines": "lines: 100-line window at random positions",
    "lines_mid": "lines: 100-line window from the middle",
    "grep_absent": "grep of an absent literal",
    "grep_rare": "grep of a rare literal (10 matching lines at most)",
    "grep_first": "grep: first 100 matching lines of a frequent pattern",
    "count": f"count the lines matching `{COUNT_PATTERN}` (case-insensitive)",
    "grep_all": f"grep: every line matching `{COUNT_PATTERN}` (case-insensitive), with its number",
}
#: the searches whose blobpad results record the chunks they read and their first call
GREP_OPS = ("grep_absent", "grep_rare", "count", "grep_all", "grep_first")

QUICK_PYTEST = ["--benchmark-min-rounds=3", "--benchmark-max-time=0.25", "--bench-rounds=2"]


# -- loading ---------------------------------------------------------------------------


@dataclass
class Result:
    op: str
    kind: str
    size_mb: int
    size_bytes: int
    peer: str
    median: float | None
    rounds: int
    extra: dict[str, Any] = field(default_factory=dict)


class Results:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.items: dict[tuple[str, str, int, str], Result] = {}
        for b in raw.get("benchmarks", []):
            info = b.get("extra_info") or {}
            if "op" not in info:
                continue
            stats = b.get("stats") or {}
            r = Result(info["op"], info["kind"], int(info["size_mb"]), int(info["size_bytes"]), info["peer"],
                       stats.get("median"), int(stats.get("rounds") or 0), info)
            self.items[(r.op, r.kind, r.size_mb, r.peer)] = r

    def get(self, op: str, kind: str, size_mb: int, peer: str) -> Result | None:
        return self.items.get((op, kind, size_mb, peer))

    def median(self, op: str, kind: str, size_mb: int, peer: str) -> float | None:
        r = self.get(op, kind, size_mb, peer)
        return r.median if r else None

    def sizes(self, op: str | None = None, kind: str | None = None) -> list[int]:
        return sorted({k[2] for k in self.items if (op is None or k[0] == op) and (kind is None or k[1] == kind)})

    def kinds(self, op: str) -> list[str]:
        order = ("log", "multibyte", "json", "binary")
        return [k for k in order if any(key[0] == op and key[1] == k for key in self.items)]

    def peers(self, op: str) -> list[str]:
        order = PUT_ORDER if op.startswith(("put", "reput")) else READ_ORDER
        present = {k[3] for k in self.items if k[0] == op}
        return [p for p in order if p in present] + sorted(present - set(order))


def slim(run: dict[str, Any]) -> dict[str, Any]:
    """Drop the time of every single round (pytest-benchmark keeps them): the summary statistics stay."""
    for b in run.get("benchmarks", []):
        (b.get("stats") or {}).pop("data", None)
    return run


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One run made of several: benchmarks of later runs replace those of earlier ones with the same name."""
    merged = dict(runs[0])
    by_name: dict[str, Any] = {}
    for run in runs:
        for b in run.get("benchmarks", []):
            by_name[b.get("fullname") or b.get("name")] = b
    merged["benchmarks"] = list(by_name.values())
    extra = [r.get("blobpad", {}).get("command") for r in runs[1:] if r.get("blobpad", {}).get("command")]
    if extra:
        merged["blobpad"] = {**merged.get("blobpad", {}),
                             "command": " + ".join([merged.get("blobpad", {}).get("command", "?"), *extra])}
    return merged


# -- formatting --------------------------------------------------------------------------


def size_label(size_mb: int) -> str:
    """``1 MB``, ``1 GB``: sizes as the report shows them."""
    ident = _id_label(size_mb)
    return ident[:-2] + " " + ident[-2:]


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            v = seconds / scale
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
    return f"{seconds:.3g} s"  # pragma: no cover


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("GB", 1 << 30), ("MB", MB), ("KB", 1 << 10)):
        if n >= scale:
            return f"{sign}{n / scale:.3g} {unit}"
    return f"{sign}{int(n)} B"


def fmt_rate(size_bytes: int, seconds: float | None) -> str:
    if not seconds:
        return "–"
    return f"{size_bytes / MB / seconds:,.0f} MB/s"


def fmt_multiple(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "–"
    m = value / base
    return f"{m:.2g}×" if m < 10 else f"{m:,.0f}×"


def label(peer: str, op: str) -> str:
    if op.startswith(("put", "reput", "memory_put")) and peer in WRITERS:
        return WRITERS[peer].label
    if peer in READERS:
        return READERS[peer].label
    return WRITERS[peer].label if peer in WRITERS else peer


def table(header: list[str], rows: Iterable[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    marks = {"l": "---", "r": "--:", "c": ":-:"}
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [line(header), "|" + "|".join(marks[a] for a in align) + "|", *(line(r) for r in rows)]


# -- the report ------------------------------------------------------------------------


def _about(res: Results, command: str) -> list[str]:
    raw = res.raw
    info = raw.get("blobpad", {})
    machine = raw.get("machine_info", {})
    cpu = machine.get("cpu", {}).get("brand_raw") or machine.get("processor") or "unknown CPU"
    engine = f"blobpad {info.get('version', '?')} at commit `{info.get('commit') or '?'}`"
    if info.get("engine_sha256"):
        engine += f" (sources `{info['engine_sha256']}`)"
    if info.get("engine_dirty"):
        engine += " **with uncommitted engine changes** (" + ", ".join(
            f"`{c.strip()}`" for c in info.get("engine_changes", [])) + ")"
    if info.get("engine_changed_during_run"):
        engine += f" **whose sources changed during the run** (commit `{info.get('commit_at_end')}` at the end)"
    tools = ", ".join(f"{v}" for v in (info.get("tools") or {}).values() if v)
    load = info.get("loadavg")
    lines = [
        f"Measured {raw.get('datetime', '?')[:16].replace('T', ' ')} UTC with `{command}`: {engine}; "
        f"Python {info.get('python', machine.get('python_version', '?'))} on {machine.get('system', '?')}, "
        f"{info.get('cpus', '?')} CPUs ({cpu}); {tools}.",
    ]
    if load:
        lines.append(f"Load average at the end of the run: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
                     f"(on {info.get('cpus', '?')} CPUs; a machine shared with other jobs makes the big sizes noisy).")
    if info.get("suite_seconds"):
        lines.append(f"The run took {info['suite_seconds'] / 60:.0f} minutes.")
    lines.append("Times are medians of the rounds; 1 MB = 2^20 bytes; ×blobpad is a peer's median divided "
                 "by blobpad's (above 1× the peer is slower).")
    return lines


def _headline_put(res: Results, big: int) -> list[str]:
    out = [f"### Offloading {size_label(big)} of log text", ""]
    put = res.get("put", "log", big, "blobpad")
    zst = res.get("put", "log", big, "zstd-cli")
    if put is None:
        return []
    size = put.size_bytes
    rows = [[
        "put from a file (`Store.put(Path(...))`)", fmt_time(put.median), fmt_rate(size, put.median),
        f"{fmt_bytes(put.extra.get('new_stored_bytes'))} stored, ratio {put.extra.get('ratio') or 0:.2f}",
    ]]
    if zst is not None:
        rows.append(["`zstd -3 -T2` on the same file", fmt_time(zst.median), fmt_rate(size, zst.median),
                     f"{fmt_bytes(zst.extra.get('new_stored_bytes'))}, ratio {zst.extra.get('ratio') or 0:.2f}"])
    same = res.get("reput_same", "log", big, "blobpad")
    if same is not None:
        rows.append(["re-put of the same content", fmt_time(same.median), fmt_rate(size, same.median),
                     f"new stored bytes: {same.extra.get('new_stored_bytes')}"])
    app = res.get("reput_append", "log", big, "blobpad")
    if app is not None:
        rows.append(["append 1 MB, re-put", fmt_time(app.median), fmt_rate(app.extra["new_size_bytes"], app.median),
                     f"new stored bytes: {app.extra.get('new_stored_bytes')} "
                     f"({fmt_bytes(app.extra.get('new_stored_bytes'))}), new chunks: {app.extra.get('new_chunks')}"])
    ins = res.get("reput_insert", "log", big, "blobpad")
    if ins is not None:
        rows.append(["insert one line in the middle, re-put", fmt_time(ins.median),
                     fmt_rate(ins.extra["new_size_bytes"], ins.median),
                     f"new chunks: {ins.extra.get('new_chunks')}, new stored bytes: {ins.extra.get('new_stored_bytes')}"])
    out += table(["blobpad", "time", "throughput", "storage"], rows)
    mem = _memory_rows(res, only=("put",))
    if mem:
        out += ["", "Peak RSS of the streaming put, in a fresh process: " + "; ".join(mem) + "."]
    return out + [""]


def _memory_rows(res: Results, only: tuple[str, ...] = ("put", "put_bytes", "lines")) -> list[str]:
    found = []
    for (op, _kind, size_mb, peer), r in sorted(res.items.items()):
        if op not in {f"memory_{o}" for o in only} or peer != "blobpad":
            continue
        secs = r.extra.get("seconds")
        took = f"; the put took {fmt_time(secs)}, {fmt_rate(r.size_bytes, secs)}" if secs else ""
        found.append(f"{fmt_bytes((r.extra.get('peak_kb') or 0) * 1024)} for {size_label(size_mb)} "
                     f"(baseline before the put {fmt_bytes((r.extra.get('baseline_kb') or 0) * 1024)}{took})")
    return found


def _headline_reads(res: Results, small: int, big: int) -> list[str]:
    cases = [("lines_mid", "log"), ("range", "multibyte"), ("head", "log"), ("tail", "log")]
    # the memory engine's columns, when the run measured it
    memory = any(res.median(op, kind, big, p) is not None for op, kind in cases
                 for p in ("blobpad-memory", "blobpad-memory-warm"))
    rows = []
    for op, kind in cases:
        c1, c2 = res.median(op, kind, small, "blobpad"), res.median(op, kind, big, "blobpad")
        w1, w2 = res.median(op, kind, small, "blobpad-warm"), res.median(op, kind, big, "blobpad-warm")
        s1, s2 = res.median(op, kind, small, "sqlite-seed"), res.median(op, kind, big, "sqlite-seed")
        if c2 is None:
            continue
        rows.append([
            f"{OPS[op].split(':')[0]}: {OPS[op].split(': ', 1)[-1]} ({kind})",
            fmt_time(c1), fmt_time(c2), fmt_multiple(c2, c1),
            fmt_time(w1), fmt_time(w2),
            fmt_time(s1), fmt_time(s2), fmt_multiple(s2, c2), fmt_multiple(s2, w2),
        ])
        if memory:
            rows[-1] += [fmt_time(res.median(op, kind, big, "blobpad-memory")),
                         fmt_time(res.median(op, kind, big, "blobpad-memory-warm"))]
    if not rows:
        return []
    a, b = size_label(small), size_label(big)
    header = ["read", f"cache off {a}", f"cache off {b}", f"{b} ÷ {a}", f"warm {a}", f"warm {b}",
              f"SQLite seed {a}", f"SQLite seed {b}", f"SQLite ÷ cache off ({b})", f"SQLite ÷ warm ({b})"]
    if memory:
        header += [f"memory engine, cache off {b}", f"memory engine, warm {b}"]
    if a == b:  # one size measured: its columns once, and no ratio of it to itself
        keep = [0, 2, 5, 7, 8, 9, *range(10, len(header))]
        header = [header[i].replace(f" {b}", "").replace(f" ({b})", "") for i in keep]
        rows = [[row[i] for i in keep] for row in rows]
    return [
        f"### Slices of a {b} entry and of a {a} entry" if a != b else f"### Slices of a {b} entry", "",
        *table(header, rows),
        "",
        "*Cache off* is `blobpad.open(path, cache_bytes=0)`; *warm* is the default 64 MB cache of decompressed "
        "chunks after the first reads; both on the LMDB engine"
        + (", and the *memory engine* columns are the same two stores opened on `memory://`" if memory else "")
        + ". The SQLite column is seed 000's design: the whole row fetched, then sliced.",
        "",
    ]


def chunks_note(r: Result | None) -> str:
    """``43 / 1053`` chunks a blobpad search read (the first call's too when it differs), or a dash."""
    if r is None or r.extra.get("chunks_total") is None:
        return "–"
    total = r.extra["chunks_total"]
    read, first = r.extra.get("chunks_read"), r.extra.get("first_chunks_read")
    note = f"{read if read is not None else first} / {total}"
    if first is not None and read is not None and first != read:
        note += f" (first call {first})"
    return note


def first_note(r: Result | None) -> str:
    """The time of a blobpad search's first call on its entry, or a dash."""
    if r is None or r.extra.get("first_ms") is None:
        return "–"
    return fmt_time(r.extra["first_ms"] / 1000)


def _headline_grep(res: Results, big: int) -> list[str]:
    rows = []
    ops = [op for op in ("grep_absent", "grep_rare", "count", "grep_all", "grep_first") if res.get(op, "log", big, "blobpad")]
    for op in ops:
        bp = res.get(op, "log", big, "blobpad")
        assert bp is not None
        zr = res.median(op, "log", big, "zstd-rg")
        rg = res.median(op, "log", big, "rg")
        size = bp.size_bytes
        matches = bp.extra.get("matches")
        what = {"grep_absent": "absent literal",
                "grep_rare": f"rare literal `{RARE_LITERAL['log']}`" + (f" ({matches} lines)" if matches else ""),
                "count": f"count `{COUNT_PATTERN}` -i",
                "grep_all": f"every line matching `{COUNT_PATTERN}` -i, numbered"
                + (f" ({matches:,} lines)" if matches else ""),
                "grep_first": "first 100 matches of `ERROR|WARN`"}[op]
        if op == "grep_first":  # stops after 100 lines: a throughput would mean nothing
            rows.append([what, fmt_time(bp.median), "stops early", fmt_time(zr), "", fmt_multiple(zr, bp.median),
                         fmt_time(rg), "", chunks_note(bp), first_note(bp)])
            continue
        rows.append([what, fmt_time(bp.median), fmt_rate(size, bp.median), fmt_time(zr), fmt_rate(size, zr),
                     fmt_multiple(zr, bp.median), fmt_time(rg), fmt_rate(size, rg), chunks_note(bp), first_note(bp)])
    if not rows:
        return []
    header = ["search", "blobpad", "blobpad MB/s", "`zstd -dc | rg`", "MB/s", "÷ blobpad", "`rg` (plain file)", "MB/s",
              "blobpad chunks read / total", "blobpad first call"]
    memory = [res.get(op, "log", big, "blobpad-memory") for op in ops]
    if any(memory):  # the memory engine beside LMDB, when the run measured it
        header[3:3] = ["blobpad, memory engine", "MB/s"]
        for row, op, m in zip(rows, ops, memory, strict=True):
            if m is None:
                row[3:3] = ["–", "–"]
            else:
                row[3:3] = [fmt_time(m.median), "stops early" if op == "grep_first" else fmt_rate(m.size_bytes, m.median)]
    return [
        f"### grep over {size_label(big)} of log text", "",
        *table(header, rows),
        "",
        *(["blobpad's columns are the store with its cache off, on the LMDB engine and on the memory engine.", ""]
          if any(memory) else []),
        "Times are medians of the rounds on one store, after a first call on the fresh entry (*first call*, "
        "which may build its chunk filters); *chunks read / total* are the chunks the last round decompressed "
        "out of the entry's. For every matching line, blobpad builds its `GrepMatch` (number and text) for each "
        "line, and `rg -n -i` writes `N:line` into a pipe that the benchmark reads whole.", "",
    ]


def _memory(res: Results) -> list[str]:
    rows = []
    for (op, _kind, size_mb, peer), r in sorted(res.items.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][3])):
        if not op.startswith("memory_") or op == "memory_redis":  # the server's memory: _redis_memory
            continue
        what = {"memory_put": "put a file (streamed where the peer can)", "memory_put_bytes": "put bytes in memory",
                "memory_lines": "100-line window from the middle"}.get(op, op)
        peak = r.extra.get("peak_kb")
        base = r.extra.get("baseline_kb")
        cli = r.extra.get("cli_peak_kb")
        if cli:  # a command of its own: its peak is what counts
            rows.append([what, label(peer, op), size_label(size_mb), fmt_bytes(cli * 1024), "–", "–", "–"])
            continue
        anon, mapped = r.extra.get("peak_anon_kb"), r.extra.get("peak_file_kb")
        rows.append([
            what, label(peer, op), size_label(size_mb),
            fmt_bytes(peak * 1024) if peak else "–",
            fmt_bytes(base * 1024) if base else "–",
            fmt_bytes((peak - base) * 1024) if peak and base else "–",
            f"{fmt_bytes(anon * 1024)} / {fmt_bytes((mapped or 0) * 1024)}" if anon else "–",
        ])
    if not rows:
        return []
    return [
        "## Memory", "",
        "Peak RSS (`VmHWM`) of a fresh Python process doing one operation; *baseline* is its peak before the "
        "operation (interpreter, imports, the open store, and for *put bytes* the content itself). Command-line "
        "tools are measured on their own process with GNU `time -f %M`. (`ru_maxrss` is not used: on Linux a "
        "child's `ru_maxrss`, and so `RUSAGE_CHILDREN`, starts at its parent's peak RSS at fork time, which here "
        "is the pytest process's.)", "",
        "The last column splits the peak into anonymous memory and file-backed pages (sampled every 2 ms; "
        "file-backed pages are mostly memory-mapped files such as LMDB's map: shared with the page cache and "
        "reclaimable).", "",
        *table(["operation", "peer", "size", "peak RSS", "baseline", "above baseline", "peak anon / file-backed"],
               rows, "lllrrrr"),
        "",
    ]


def _all_results(res: Results) -> list[str]:
    out = ["## All results", "",
           "Median time per call; in parentheses, the multiple of blobpad's time on the same data "
           "(for reads, blobpad on LMDB with its cache off).", ""]
    order = ["put", "reput_same", "reput_append", "reput_insert", "head", "tail", "range", "lines", "lines_mid",
             "grep_absent", "grep_rare", "grep_first", "count", "grep_all"]
    for op in order:
        kinds = res.kinds(op)
        if not kinds:
            continue
        peers = res.peers(op)
        rows = []
        for kind in kinds:
            for size in res.sizes(op, kind):
                base = res.median(op, kind, size, "blobpad")
                row = [kind, size_label(size)]
                for p in peers:
                    m = res.median(op, kind, size, p)
                    cell = fmt_time(m)
                    if m is not None and p != "blobpad" and base:
                        cell += f" ({fmt_multiple(m, base)})"
                    row.append(cell)
                if op in GREP_OPS:
                    bp = res.get(op, kind, size, "blobpad")
                    row += [chunks_note(bp), first_note(bp)]
                rows.append(row)
        extra = ["blobpad chunks read / total", "blobpad first call"] if op in GREP_OPS else []
        out += [f"### {OPS.get(op, op)}", "", *table(["data", "size", *[label(p, op) for p in peers], *extra], rows,
                                                      "ll" + "r" * (len(peers) + len(extra))), ""]
        if op.startswith(("put", "reput")):
            out += _storage_rows(res, op, kinds, peers)
    return out


def _storage_rows(res: Results, op: str, kinds: list[str], peers: list[str]) -> list[str]:
    rows = []
    for kind in kinds:
        for size in res.sizes(op, kind):
            row = [kind, size_label(size)]
            for p in peers:
                r = res.get(op, kind, size, p)
                if r is None:
                    row.append("–")
                    continue
                cell = fmt_bytes(r.extra.get("new_stored_bytes"))
                if op == "put" and r.extra.get("ratio"):
                    cell += f" ({r.extra['ratio']:.2f}:1)"
                if r.extra.get("new_chunks") is not None and op != "put":
                    cell += f", {r.extra['new_chunks']} chunks"
                row.append(cell)
            rows.append(row)
    what = "stored bytes (compression ratio)" if op == "put" else "new stored bytes"
    return [f"{what.capitalize()}: blobpad's `Store.stats()` delta; the others' growth on disk.", "",
            *table(["data", "size", *[label(p, op) for p in peers]], rows, "ll" + "r" * len(peers)), ""]


def _peers_section() -> list[str]:
    from . import peers

    doc = (peers.__doc__ or "").strip().split("\n\n", 1)[-1].replace("``", "`")
    doc = doc.replace("(copied below)", "(copied into `benchmarks/peers.py`)")
    doc = doc.replace(":class:`benchmarks.data.Truth`", "a reference computed from the file (`benchmarks/data.py`)")
    data = [
        "## Data", "",
        "Generated deterministically by `blobpad.sample` (seed 0) and cached in `bench-data/`:", "",
        "* **log**: varied log lines (timestamps, levels, components, request and session ids from slowly "
        "renewing pools, failures), written as a stream by `write_log`;",
        "* **multibyte**: numbered lines of words in 1- to 4-byte UTF-8 characters (CJK, Cyrillic, Greek, Arabic, "
        "Devanagari, emoji);",
        "* **json**: minified JSON, one single line (an API answer);",
        "* **binary**: random blocks mixed with runs of repeated bytes, not valid UTF-8.", "",
        f"Re-put variants of the log: the same file; the log continued by 1 MB (the base file is a byte-for-byte "
        f"prefix); the log with one line inserted after its middle. grep patterns: the absent literal "
        f"`{ABSENT_LITERAL}`; rare literals " + ", ".join(f"`{p}` ({k})" for k, p in RARE_LITERAL.items())
        + "; frequent patterns " + ", ".join(f"`{p}` ({k})" for k, p in FREQUENT_PATTERN.items())
        + f"; the count `{COUNT_PATTERN}` case-insensitive, counting matching lines like `rg -c`, and the same "
        "pattern for every matching line with its number.", "",
    ]
    return [*data, "## How each peer does it", "", doc, ""]


def _redis_memory(res: Results) -> list[str]:
    """The Valkey server's ``used_memory`` growth per byte of the log stored (``bench_memory_redis``)."""
    rows = []
    for (op, _kind, size_mb, peer), r in sorted(res.items.items(), key=lambda kv: (kv[0][2], kv[0][3])):
        if op != "memory_redis":
            continue
        per = r.extra.get("growth_per_byte")
        rows.append([label(peer, op), size_label(size_mb), fmt_bytes(r.extra.get("growth_bytes")),
                     f"{per:.3f}" if per is not None else "–", fmt_time(r.median)])
    if not rows:
        return []
    return [
        "## Memory of a Redis / Valkey server", "",
        "Growth of the server's `used_memory` (`INFO memory`) when the log is stored, and that growth per byte of "
        "the log: blobpad on the Redis engine (zstd chunks, index, records) against the raw log `SET` as one "
        "string key, each read with the loading client disconnected. The last column is the time of that one "
        "put, over loopback.", "",
        *table(["peer", "size", "used_memory growth", "per byte of content", "put"], rows, "llrrr"), "",
    ]


def render(res: Results, command: str, chart: str | None) -> str:
    sizes = res.sizes()
    if not sizes:
        return "# blobpad benchmarks\n\nNo results (was the suite run with --benchmark-only?).\n"
    small, big = min(sizes), max(s for s in sizes if s <= 100) if any(s <= 100 for s in sizes) else max(sizes)
    big_any = max(sizes)
    out = ["# blobpad benchmarks", "", *_about(res, command), ""]
    if chart:
        out += [f"![latency against size]({chart})", ""]
    out += ["## Headline figures", ""]
    out += _headline_put(res, big)
    if big_any != big:
        out += _headline_put(res, big_any)
    out += _headline_reads(res, small, big)
    out += _headline_grep(res, big)
    out += _memory(res)
    out += _redis_memory(res)
    out += _all_results(res)
    out += _peers_section()
    out += ["## Reproduce", "", "```sh",
            'pip install -e ".[bench]"   # pytest-benchmark, diskcache, psutil, matplotlib; rg, zstd, sed, GNU time',
            "python -m benchmarks --full --out benchmarks/results        # this report: 1, 10 and 100 MB",
            "python -m benchmarks                                        # a quick version: 1 and 10 MB",
            "pytest benchmarks/ --benchmark-only --bench-sizes 1,10,100  # pytest-benchmark's own tables",
            "BLOBPAD_BENCH_1GB=1 python -m benchmarks --full             # adds 1 GB of log text",
            "```", "",
            "Data are generated deterministically (`blobpad.sample`) and cached in `bench-data/`; every answer of "
            "every peer is checked against a reference computed from the file before its time is kept.", ""]
    return "\n".join(out)


# -- the chart ---------------------------------------------------------------------------


def chart(res: Results, path: Path) -> bool:
    """Latency against size, one panel per operation; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return False
    panels = [("put", "log"), ("head", "log"), ("tail", "log"), ("range", "multibyte"),
              ("lines_mid", "log"), ("grep_absent", "log"), ("grep_rare", "log"), ("grep_first", "log"),
              ("count", "log"), ("grep_all", "log")]
    panels = [(op, kind) for op, kind in panels if res.sizes(op, kind)]
    if not panels:
        return False
    cols = 4
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    styles = {
        "blobpad": ("C0", "o", 2.6), "blobpad-warm": ("C0", "s", 1.2),
        "blobpad-memory": ("C9", "o", 1.8), "blobpad-memory-warm": ("C9", "s", 1.2), "sqlite-seed": ("C3", "v", 1.2),
        "diskcache": ("C2", "^", 1.2), "mmap-re": ("C1", "D", 1.2), "file": ("C1", "D", 1.2),
        "rg": ("C4", "x", 1.2), "sed": ("C4", "x", 1.2), "zstd-rg": ("C5", "+", 1.2), "zstd-sed": ("C5", "+", 1.2),
        "zstd-cli": ("C5", "+", 1.2),
    }
    for ax, (op, kind) in zip(axes.flat, panels, strict=False):
        for peer in res.peers(op):
            pts = [(s, res.median(op, kind, s, peer)) for s in res.sizes(op, kind)]
            pts = [(s, m) for s, m in pts if m]
            if not pts:
                continue
            colour, marker, width = styles.get(peer, ("k", ".", 1.0))
            ax.plot([s for s, _ in pts], [m for _, m in pts], marker=marker, color=colour, linewidth=width,
                    linestyle="--" if peer.endswith("-warm") else "-", label=label(peer, op))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = res.sizes(op, kind)
        ax.set_xticks(ticks, [size_label(t) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlim(ticks[0] / 1.6, ticks[-1] * 1.6)
        ax.set_title(f"{op} ({kind})", fontsize=10)
        ax.set_xlabel("size of the entry", fontsize=8)
        ax.set_ylabel("median time (s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("blobpad and its peers: latency against size (log-log, lower is better)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- command line ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="1, 10 and 100 MB with pytest-benchmark's default rounds")
    ap.add_argument("--sizes", help="sizes in MB (quick default 1,10; --full default 1,10,100)")
    ap.add_argument("--1gb", dest="one_gb", action="store_true", help="also 1 GB of log text (env BLOBPAD_BENCH_1GB=1)")
    ap.add_argument("--kinds", help="restrict the kinds: log,multibyte,json,binary")
    ap.add_argument("--out", default=str(ROOT / "bench-data" / "report"), help="output folder (default bench-data/report)")
    ap.add_argument("--from-json", nargs="+", metavar="FILE",
                    help="render these pytest-benchmark JSON files (merged, later ones win) instead of running")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "benchmark.json"
    status = 0
    if args.from_json:
        sources = [Path(f) for f in args.from_json]
        meta = merge([json.loads(f.read_text()) for f in sources])
        command = meta.get("blobpad", {}).get("command") or "python -m benchmarks"
    else:
        sizes = args.sizes or ",".join(map(str, DEFAULT_SIZES_MB if args.full else (1, 10)))
        cmd = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks"), "--benchmark-only", "-p", "no:cacheprovider",
               f"--benchmark-json={json_path}", f"--bench-sizes={sizes}"]
        if not args.full:
            cmd += QUICK_PYTEST
        if args.one_gb:
            cmd.append("--bench-1gb")
        if args.kinds:
            cmd.append(f"--bench-kinds={args.kinds}")
        cmd += args.pytest_args
        shown = "python -m benchmarks" + (" --full" if args.full else "") + (f" --sizes {args.sizes}" if args.sizes else "") \
            + (" --1gb" if args.one_gb or os.environ.get("BLOBPAD_BENCH_1GB") else "")
        print("running:", " ".join(cmd), flush=True)
        t0 = time.monotonic()
        status = subprocess.run(cmd, cwd=ROOT, check=False).returncode
        print(f"suite finished in {time.monotonic() - t0:.0f} s with status {status}", flush=True)
        if not json_path.exists():
            print("no benchmark JSON was written; see the pytest output above", file=sys.stderr)
            return status or 1
        meta = slim(json.loads(json_path.read_text()))
        meta.setdefault("blobpad", {})["command"] = shown
        meta["blobpad"]["suite_seconds"] = round(time.monotonic() - t0)
        json_path.write_text(json.dumps(meta, indent=1))
        sources = [json_path]
        command = shown
    res = Results(meta)
    png = out / "latency.png"
    has_chart = chart(res, png)
    report = render(res, command, png.name if has_chart else None)
    (out / "REPORT.md").write_text(report)
    print(f"wrote {out / 'REPORT.md'}" + (f" and {png}" if has_chart else " (no chart: matplotlib is not installed)"))
    if sources != [json_path]:
        print("(rendered from " + ", ".join(map(str, sources)) + ")")
    return status


__all__ = ["main", "render", "chart", "Results"]
