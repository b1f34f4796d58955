"""Checks of the benchmark machinery itself (they run under plain ``pytest``, not with --benchmark-only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import engines
from .config import Settings, parse_sizes, resolve
from .peers import run_pipeline, split_window, tool
from .report import Results, chart, render


def test_plain_pytest_is_smoke_mode(request: pytest.FixtureRequest, settings: Settings) -> None:
    session = request.config._benchmarksession  # type: ignore[attr-defined]
    assert settings.smoke
    assert session.disabled, "pytest-benchmark must be disabled so that each benchmark runs once"
    assert len(settings.sizes_mb) == 1


def test_sizes() -> None:
    assert parse_sizes("100,1, 10") == (1, 10, 100)
    assert parse_sizes("1GB,1") == (1, 1024)
    with pytest.raises(ValueError):
        parse_sizes("0")
    assert resolve(sizes="1,10,100", one_gb=True, kinds=None, rounds=None, smoke=False).sizes_mb == (1, 10, 100, 1024)
    assert resolve(sizes="10,100", one_gb=True, kinds="log", rounds=None, smoke=True).sizes_mb == (10,)
    assert resolve(sizes="1,1024", one_gb=False, kinds=None, rounds=None, smoke=False).kinds_at(1024) == ("log",)


def test_split_window() -> None:
    text = "a\nb\nc\n"
    assert split_window(text, 2, 3) == ["b", "c"]
    assert split_window(text, 3, 5) == ["c"]
    assert split_window("a\nb", 2, 2) == ["b"]


@pytest.mark.skipif(tool("sed") is None, reason="sed is not installed")
def test_pipeline_measures_the_tool_not_its_parent(tmp_path: Path) -> None:
    ballast = bytearray(64 << 20)
    ballast[::4096] = b"\1" * len(ballast[::4096])  # make this process's RSS big
    f = tmp_path / "f.txt"
    f.write_text("x\ny\n")
    result = run_pipeline(["sed", "-n", "2p", str(f)], measure=True)
    assert result.out == b"y\n"
    if result.peak_rss_kb[0] is not None:  # GNU time is installed
        assert result.peak_rss_kb[0] < 32 << 10, result.peak_rss_kb
    del ballast


def _fake_run() -> dict[str, Any]:
    benches: list[dict[str, Any]] = []

    def add(op: str, kind: str, size_mb: int, peer: str, median: float, **extra: object) -> None:
        benches.append({
            "group": f"{op} {kind} {size_mb:>4}MB", "name": f"bench_{op}[{peer}]",
            "stats": {"median": median, "rounds": 5},
            "extra_info": {"op": op, "kind": kind, "size_mb": size_mb, "size_bytes": size_mb << 20, "peer": peer,
                           **extra},
        })

    for size in (1, 100):
        add("put", "log", size, "blobpad", 0.01 * size, new_stored_bytes=size << 18, ratio=4.0, new_chunks=10)
        add("put", "log", size, "zstd-cli", 0.008 * size, new_stored_bytes=size << 18, ratio=4.2)
        add("reput_same", "log", size, "blobpad", 0.001 * size, new_stored_bytes=0, new_chunks=0,
            new_size_bytes=size << 20)
        add("reput_append", "log", size, "blobpad", 0.002 * size, new_stored_bytes=200_000, new_chunks=10,
            new_size_bytes=(size + 1) << 20)
        add("reput_insert", "log", size, "blobpad", 0.002 * size, new_stored_bytes=20_000, new_chunks=1,
            new_size_bytes=size << 20)
        for peer, t in (("blobpad", 1e-4), ("blobpad-warm", 3e-5), ("blobpad-memory", 8e-5),
                        ("blobpad-memory-warm", 2e-5), ("sqlite-seed", 1e-4 * size), ("zstd-sed", 0.01)):
            add("lines_mid", "log", size, peer, t)
            add("head", "log", size, peer, t)
        for peer, t in (("blobpad", 0.003 * size), ("blobpad-memory", 0.0025 * size), ("zstd-rg", 0.004 * size),
                        ("rg", 0.002 * size)):
            add("count", "log", size, peer, t, matches=42)
    benches.append({"group": None, "name": "x", "stats": {"median": 1.0}, "extra_info": {}})
    return {"datetime": "2025-01-01T00:00:00", "machine_info": {"system": "Linux"}, "benchmarks": benches,
            "blobpad": {"version": "0", "commit": "abc", "cpus": 2, "tools": {"rg": "ripgrep 13"}}}


def test_report_renders(tmp_path: Path) -> None:
    res = Results(_fake_run())
    md = render(res, "python -m benchmarks", "latency.png")
    assert "### Offloading 100 MB of log text" in md
    assert "new stored bytes: 0" in md
    assert "zstd -dc \\| sed -n" in md  # pipes inside table cells are escaped
    assert "| lines: 100-line window from the middle (log) |" in md
    assert "10×" in md or "100×" in md
    # the memory engine's readers have their columns beside LMDB's, in the headline and in every table
    assert "| search | blobpad | blobpad, memory engine | MB/s | blobpad MB/s |" not in md
    assert "| search | blobpad | blobpad MB/s | blobpad, memory engine | MB/s |" in md
    assert "memory engine, cache off 100 MB" in md and "memory engine, warm 100 MB" in md
    lines_mid = md.split("### lines: 100-line window from the middle", 1)[1].split("###", 1)[0]
    assert ("| data | size | blobpad (cache off) | blobpad (warm cache) | blobpad memory (cache off) "
            "| blobpad memory (warm cache) | SQLite row (seed 000) |") in lines_mid
    pytest.importorskip("matplotlib")
    assert chart(res, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 10_000


def test_engines_table() -> None:
    md = engines.render(Results(_fake_run()), "pytest benchmarks/bench_read.py ...", "python -m benchmarks.engines x")
    assert "| read | size | blobpad (cache off) | blobpad (warm cache) | blobpad memory (cache off) " \
           "| blobpad memory (warm cache) |" in md
    # lines_mid at 100 MB: 100 µs, 30 µs on LMDB; 80 µs, 20 µs in memory
    assert "| lines_mid (log) | 100 MB | 100 µs | 30 µs | 80 µs | 20 µs | 0.8× | 0.67× |" in md
    assert "| count (log) | 1 MB | 3 ms | – | 2.5 ms | – | 0.83× | – |" in md
    assert "put" not in md.split("| read |", 1)[1].split("The operations", 1)[0]  # reads only
    assert "pytest benchmarks/bench_read.py ..." in md


def test_small_puts_runs(tmp_path: Path) -> None:
    """python -m benchmarks.small_puts, in miniature: every mode runs and reads its puts back."""
    from . import small_puts

    rows = small_puts.latency(3, [5], [False], tmp_path / "latency", warmup=1)
    assert {r["peer"] for r in rows} == set(small_puts.PEERS)
    assert all(r["median_ms"] > 0 for r in rows)
    rows = small_puts.threads([2], 0.2, [False], tmp_path / "threads")
    assert {r["peer"] for r in rows} == set(small_puts.THROUGHPUT_PEERS)
    rows = small_puts.throughput(2, 0.2, [False], tmp_path / "throughput", slices=1)
    assert all(r["puts_per_s"] > 0 for r in rows)
    (tmp_path / "cpu").mkdir()
    rows = small_puts.cpu(3, [False], tmp_path / "cpu", warmup=1)
    assert [r["peer"] for r in rows] == ["blobpad", "lmdb-layout", "lmdb"] and all(r["wall_ms"] > 0 for r in rows)


def test_scan_floor_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """python -m benchmarks.scan_floor, in miniature: every step runs, and the counts agree with re."""
    import re

    from . import scan_floor
    from .config import COUNT_PATTERN
    from .data import Dataset

    scan_floor.main(["--size-mb", "1", "--rounds", "1"])
    out = capsys.readouterr().out
    lines = Dataset("log", 1).path.read_text().splitlines()
    want = sum(1 for line in lines if re.search(COUNT_PATTERN, line, re.IGNORECASE))
    assert f"({want:,})" in out and "zstd decompression" in out and "one RE2 call per matching line" in out


def test_matching_pairs(tmp_path: Path) -> None:
    """Every matching line with its number, on text and on a mapped file, as a plain loop finds them."""
    import mmap
    import re

    from .peers import matching_pairs

    text = "error one\nok\nFAILED twice failure\n\nfail\nlast error"
    rx = re.compile("error|fail(ed|ure)", re.IGNORECASE)
    expected = [(n, line) for n, line in enumerate(text.split("\n"), 1) if rx.search(line)]
    assert matching_pairs(text, rx) == expected == [(1, "error one"), (3, "FAILED twice failure"), (6, "last error")]
    f = tmp_path / "t.log"
    f.write_bytes(text.encode() + b"\n")
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        brx = re.compile(b"error|fail(ed|ure)", re.IGNORECASE)
        assert matching_pairs(mm, brx) == [(n, line.encode()) for n, line in expected]


def test_report_shows_chunks_and_first_call() -> None:
    """The grep rows carry blobpad's chunks read out of the total and its first call."""
    def bench(op: str, peer: str, median: float, **extra: object) -> dict[str, Any]:
        return {"group": f"{op} log  100MB", "name": f"bench_{op}[{peer}]", "stats": {"median": median, "rounds": 5},
                "extra_info": {"op": op, "kind": "log", "size_mb": 100, "size_bytes": 100 << 20, "peer": peer,
                               **extra}}

    run = {"datetime": "2025-01-01T00:00:00", "machine_info": {"system": "Linux"}, "blobpad": {"version": "0"},
           "benchmarks": [
               bench("grep_rare", "blobpad", 0.02, matches=6, first_ms=950.0, first_chunks_read=1053,
                     chunks_read=43, chunks_total=1053),
               bench("grep_rare", "zstd-rg", 0.4),
               bench("grep_all", "blobpad", 0.9, matches=190_000, first_ms=1200.0, first_chunks_read=1053,
                     chunks_read=1053, chunks_total=1053),
               bench("grep_all", "rg", 0.2),
           ]}
    md = render(Results(run), "pytest", None)
    headline = md.split("### grep over 100 MB of log text", 1)[1].split("## ", 1)[0]
    assert "| rare literal `2023-11-14T22:15:00.3` (6 lines) | 20 ms |" in headline
    assert "| 43 / 1053 (first call 1053) | 950 ms |" in headline
    assert "(190,000 lines)" in headline and "| 1053 / 1053 | 1.2 s |" in headline
    every = md.split("### grep: every line matching", 1)[1].split("###", 1)[0]
    assert "blobpad chunks read / total | blobpad first call |" in every


def test_report_shows_redis_memory() -> None:
    """The Valkey server's used_memory growth per byte has a table of its own, not the RSS table's dashes."""
    def bench(peer: str, median: float, growth: int) -> dict[str, Any]:
        return {"group": "memory_redis log  100MB", "name": f"bench_memory_redis[{peer}]",
                "stats": {"median": median, "rounds": 1},
                "extra_info": {"op": "memory_redis", "kind": "log", "size_mb": 100, "size_bytes": 100 << 20,
                               "peer": peer, "growth_bytes": growth, "growth_per_byte": growth / (100 << 20)}}

    run = {"datetime": "2025-01-01T00:00:00", "machine_info": {"system": "Linux"}, "blobpad": {"version": "0"},
           "benchmarks": [bench("blobpad-redis", 0.9, 22 << 20), bench("naive-redis", 0.2, 100 << 20)]}
    md = render(Results(run), "pytest", None)
    section = md.split("## Memory of a Redis / Valkey server", 1)[1].split("## ", 1)[0]
    assert "| blobpad Redis (cache off) | 100 MB | 22 MB | 0.220 | 900 ms |" in section
    assert "| Redis string (GET / GETRANGE) | 100 MB | 100 MB | 1.000 | 200 ms |" in section
    assert "## Memory\n" not in md  # no RSS rows made of dashes
