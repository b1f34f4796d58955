"""pytest wiring of the benchmarks: options, smoke mode, parametrisation, fixtures.

Smoke mode: when pytest runs without ``--benchmark-only`` (and without
``--benchmark-enable``), which is how the project's plain ``pytest`` and CI run,
pytest-benchmark is disabled before its session is built, so every benchmark calls
its function exactly once and still checks its answer, and only the smallest size
is generated.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .config import Settings, resolve, size_label
from .harness import Bench, Scratch, make_workdir

SETTINGS = pytest.StashKey[Settings]()
ENGINE_AT_START = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("blobpad benchmarks")
    group.addoption("--bench-sizes", "--sizes", dest="bench_sizes", default=None, metavar="MB,MB,...",
                    help="sizes of the data in MB, e.g. 1,10,100 (default; env BLOBPAD_BENCH_SIZES)")
    group.addoption("--bench-1gb", dest="bench_1gb", action="store_true", default=False,
                    help="also run at 1 GB, log text only (env BLOBPAD_BENCH_1GB=1)")
    group.addoption("--bench-kinds", dest="bench_kinds", default=None, metavar="KIND,...",
                    help="kinds of data: log,multibyte,json,binary (default all; env BLOBPAD_BENCH_KINDS)")
    group.addoption("--bench-rounds", dest="bench_rounds", type=int, default=None,
                    help="rounds of the put benchmarks (default 10/5/3/1 at 1/10/100/1024 MB; env BLOBPAD_BENCH_ROUNDS)")


def _smoke(config: pytest.Config) -> bool:
    return not config.getoption("benchmark_only", False) and not config.getoption("benchmark_enable", False)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    smoke = _smoke(config)
    if smoke:
        # pytest-benchmark reads this when its own (trylast) pytest_configure builds
        # its session; if that already happened, switch the session itself.
        config.option.benchmark_disable = True
        session = getattr(config, "_benchmarksession", None)
        if session is not None:
            session.disabled = True
    config.stash[SETTINGS] = resolve(
        sizes=config.getoption("bench_sizes", None),
        one_gb=bool(config.getoption("bench_1gb", False)),
        kinds=config.getoption("bench_kinds", None),
        rounds=config.getoption("bench_rounds", None),
        smoke=smoke,
    )
    config.stash[ENGINE_AT_START] = _engine_state()
    config.addinivalue_line("markers", "kinds(*kinds): the kinds of data a benchmark runs on")
    config.addinivalue_line("markers", "largest_only: run only at the largest selected size")


def pytest_report_header(config: pytest.Config) -> str:
    s = config.stash[SETTINGS]
    sizes = ", ".join(size_label(m) for m in s.sizes_mb)
    mode = "smoke (each benchmark once; pass --benchmark-only to measure)" if s.smoke else "measure"
    return f"blobpad benchmarks: {mode}; sizes {sizes}; kinds {', '.join(s.kinds)}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "size_mb" not in metafunc.fixturenames:
        return
    settings = metafunc.config.stash[SETTINGS]
    sizes = settings.sizes_mb
    if metafunc.definition.get_closest_marker("largest_only"):
        sizes = (settings.largest_mb,)
    if "kind" not in metafunc.fixturenames:
        metafunc.parametrize("size_mb", sizes, ids=[size_label(s) for s in sizes])
        return
    marker = metafunc.definition.get_closest_marker("kinds")
    wanted = marker.args if marker else settings.kinds
    combos = [(k, s) for s in sizes for k in settings.kinds_at(s) if k in wanted]
    metafunc.parametrize(("kind", "size_mb"), combos, ids=[f"{k}-{size_label(s)}" for k, s in combos])


@pytest.fixture(scope="session")
def settings(request: pytest.FixtureRequest) -> Settings:
    return request.config.stash[SETTINGS]


@pytest.fixture(scope="session")
def bench(settings: Settings) -> Iterator[Bench]:
    b = Bench(settings, make_workdir())
    yield b
    b.close()


@pytest.fixture
def scratch(bench: Bench) -> Iterator[Scratch]:
    s = Scratch(bench)
    yield s
    s.close()


def _git(*args: str) -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _engine_state() -> dict[str, Any]:
    """The commit, the uncommitted changes and a digest of blobpad's sources, as they are now."""
    import hashlib

    package = Path(__file__).resolve().parent.parent / "blobpad"
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):  # the subpackages too (engine/, tools/)
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    dirty = _git("status", "--porcelain", "--", "blobpad")
    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "engine_dirty": bool(dirty),
        "engine_changes": dirty.splitlines(),
        "engine_sha256": digest.hexdigest()[:16],
    }


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """Record what was measured: blobpad's exact source state and the machine's load.

    The state is taken when the session starts (the code the benchmarks imported);
    if blobpad's sources changed during the run, that is recorded too.
    """
    import blobpad

    s = config.stash[SETTINGS]
    start = config.stash[ENGINE_AT_START]
    end = _engine_state()
    output_json["blobpad"] = {
        "version": blobpad.__version__,
        **start,
        "engine_changed_during_run": end["engine_sha256"] != start["engine_sha256"],
        "commit_at_end": end["commit"],
        "sizes_mb": list(s.sizes_mb),
        "kinds": list(s.kinds),
        "cpus": os.cpu_count(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "tools": {name: _version(name) for name in ("rg", "zstd", "sed")},
    }


def _version(name: str) -> str | None:
    try:
        out = subprocess.run([name, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip("* ") if out else None


# no test may run over blobpad.testing.TEST_TIME_LIMIT (a hang fails CI at once): the autouse fixture
from blobpad.testing import no_test_hangs  # noqa: E402, F401
