"""The pending-put journal: what a put in progress has placed, so that a killed one can be undone.

A put of several batches commits each batch's chunks with a ``pending`` record (the
chunk keys, and a head record naming the process by host, pid and start time, with the
time of its last batch) before
its final transaction makes the entry visible and clears them.  When the process that
wrote them is gone (on another host: when its last batch is :data:`STALE_SECONDS` old),
or the put failed in a process that runs on and could not be rolled back then (its store
did not answer), :func:`recover` (run at open, by gc() and by a put's periodic sweep)
rolls the put back: its
chunks' references are released and nothing of it stays visible.  A put that fits in
one batch writes no journal: its single transaction is all or nothing.
"""

from __future__ import annotations

import builtins
import os
import socket
import threading
import time
from collections.abc import Callable

from .catalog import REPAIR, get_or_damaged, release
from .chunking import KEY_SIZE
from .engine import Checked, WriteTxn
from .engine import prefix_end as _prefix_end

__all__ = ["host_identity", "process_token", "head_record", "STALE_SECONDS", "token_alive", "rollback_pending", "recover",
           "in_flight"]

#: the raw ids of this process's puts in progress: a pending put of this process that is not
#: one of them failed and could not be rolled back then (its store did not answer: a server
#: gone, a disk gone), and is dead although its process runs
_IN_FLIGHT: set[bytes] = set()
_IN_FLIGHT_LOCK = threading.Lock()


class in_flight:  # noqa: N801 - used as the function it was: ``with in_flight(raw_id):``
    """Mark the put ``raw_id`` of this process in progress while the block runs (see :func:`recover`).

    A class, not a generator: it is on every put's path (a generator context manager costs
    a generator, a frame and a helper object per use)."""

    __slots__ = ("_raw_id",)

    def __init__(self, raw_id: bytes) -> None:
        self._raw_id = raw_id

    def __enter__(self) -> None:
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT.add(self._raw_id)

    def __exit__(self, *exc: object) -> None:
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT.discard(self._raw_id)


def _after_fork_in_child() -> None:
    """A forked child has no put in progress, and a lock another thread of its parent held stays held."""
    global _IN_FLIGHT_LOCK
    _IN_FLIGHT_LOCK = threading.Lock()
    _IN_FLIGHT.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _abandoned(raw_id: bytes, record: str) -> bool:
    """Whether a head record names a put of this very process that is no longer in progress."""
    if record.partition(" ")[0] != process_token():
        return False
    with _IN_FLIGHT_LOCK:
        return raw_id not in _IN_FLIGHT


def host_identity() -> str:
    """The host as a pending put's token names it: ``hostname#boot.pidns``, the host name,
    the first 16 hex digits of the kernel's boot id and the inode of the process's PID
    namespace.  Two machines named alike differ in their boot ids; containers of one
    machine sharing its host name (host networking) differ in their PID namespaces, where
    one cannot see the other's pids: each takes the other's puts for another host's (alive
    until STALE_SECONDS old), never for dead because a pid is missing from its view."""
    name = socket.gethostname()
    try:
        with builtins.open("/proc/sys/kernel/random/boot_id", "rb") as fh:
            boot = fh.read().strip().decode("ascii", "replace").replace("-", "")[:16]
    except OSError:
        boot = ""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return f"{name}#{boot}.{namespace}" if boot or namespace else name


def process_token() -> str:
    """``host:pid:start time`` of this process (:func:`host_identity`; computed once per
    process: a forked child has its own pid, so it computes its own)."""
    global _TOKEN
    pid = os.getpid()
    if _TOKEN is None or _TOKEN[0] != pid:
        _TOKEN = (pid, f"{host_identity()}:{pid}:{start_time(pid)}")
    return _TOKEN[1]


_TOKEN: tuple[int, str] | None = None


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command's name (state first), or None."""
    try:
        with builtins.open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 19 else None


def start_time(pid: int) -> str:
    """A process's start time from /proc (tells a reused pid apart), or "?"."""
    fields = _stat_fields(pid)
    return "?" if fields is None else fields[19].decode()


#: A pending put of another host whose head record is older than this (seconds, by the
#: store's clock: the server's on a shared server) is taken for dead: its process cannot
#: be asked, and a live put restamps it at every batch and at least every third of this
#: while its source is slow (a put rolled back under it fails with Conflict at its end).
STALE_SECONDS = 900


def head_record(token: str, now: float) -> bytes:
    """The head record of a pending put: its process's token and the time of its last batch."""
    return f"{token} {int(now)}".encode()


def token_alive(record: str, now: float | None = None) -> bool:
    """Whether the process a head record names still runs (True when it cannot tell).

    On this host, its pid and start time say; a put of another host (a store on a shared
    server) is alive while its last batch is less than :data:`STALE_SECONDS` old.
    """
    token, _, stamp = record.partition(" ")
    host, _, rest = token.partition(":")
    pid_s, _, start = rest.partition(":")
    # this host: the same identity, or a bare host name (a token of a version before host_identity)
    if host != host_identity() and host != socket.gethostname():
        try:
            last = int(stamp)
        except ValueError:
            return True  # an older record without its time: cannot tell
        return (time.time() if now is None else now) - last < STALE_SECONDS
    try:
        pid = int(pid_s)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    fields = _stat_fields(pid)
    if fields is not None and fields[0] in (b"Z", b"X"):
        return False  # it has exited (killed, say) and waits for its parent to collect it: it runs no put
    return start == "?" or fields is None or fields[19].decode() == start


def rollback_pending(txn: WriteTxn, raw_id: bytes) -> None:
    """Undo a pending put in ``txn``: release the chunks its batches placed (unless it completed) and drop its records.

    A damaged record is dropped too: a batch's chunks it listed cannot be released, so the
    references are left for the next gc() to recount (:data:`blobpad.catalog.REPAIR`)."""
    keys: list[bytes] = []
    doomed: list[bytes] = []
    damaged: list[bytes] = []
    for key, value in txn.scan("pending", raw_id, _prefix_end(raw_id), on_damage=damaged.append):
        doomed.append(key)
        if key[8:9] == b"B":
            keys.extend(value[i : i + KEY_SIZE] for i in range(0, len(value), KEY_SIZE))
    if get_or_damaged(txn, "entries", raw_id)[0]:
        keys = []  # the put completed; only the bookkeeping is stale
    elif damaged:
        txn.put("meta", REPAIR, b"1")
    release(txn, keys)
    for key in doomed + damaged:
        txn.delete("pending", key)


def recover(engine: Checked, clock: Callable[[], float] | None = None) -> int:
    """Roll back the pending puts of processes that died, and those of this process that failed
    without being rolled back (:func:`in_flight`); return how many.  ``clock`` is
    the store's (on a shared server, the server's: the one puts stamp their head records
    with), read once if there is a pending put; None: this host's.

    A damaged record never stops it (the store must open, and gc() run): a put whose head
    record is damaged is rolled back as a dead one's (if its process still runs, its last
    commit finds its journal gone and fails with Conflict, leaving nothing), and a damaged
    record of no put (its key damaged too) is dropped, its references left to gc()."""
    damaged: list[bytes] = []
    with engine.read() as txn:
        heads = [(key[:8], value.decode("utf-8", "replace"))
                 for key, value in txn.scan("pending", on_damage=damaged.append) if key[8:9] == b"H"]
    now = clock() if heads and clock is not None else None
    dead = {raw_id for raw_id, record in heads if _abandoned(raw_id, record) or not token_alive(record, now)}
    dead.update(key[:8] for key in damaged if len(key) > 8)
    for raw_id in sorted(dead):
        engine.write(lambda txn, r=raw_id: rollback_pending(txn, r), frees=True)
    for key in damaged:
        if len(key) <= 8:  # no put's: a prefix this short would take others' records
            engine.write(lambda txn, k=key: _drop_damaged(txn, k), frees=True)
    return len(dead)


def _drop_damaged(txn: WriteTxn, key: bytes) -> None:
    txn.delete("pending", key)
    txn.put("meta", REPAIR, b"1")
