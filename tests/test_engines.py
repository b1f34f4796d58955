"""Every engine passes the storage contract (blobpad.testing.EngineTests), and what each adds.

The contract's tests run once per engine through a subclass; the rest of the suite runs
on every engine through the ``store`` fixture (conftest.ENGINES).
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest

import blobpad
from blobpad import BlobpadError, InvalidArgument, StoreFull
from blobpad.engine import open_engine
from blobpad.engine.lmdb import acquire_lmdb
from blobpad.engine.memory import acquire_memory
from blobpad.testing import EngineTests


class TestLmdbEngine(EngineTests):
    @pytest.fixture
    def open_engine(self, tmp_path):
        engines = []

        def make():
            engine = acquire_lmdb(tmp_path / "db", sync=False)
            engines.append(engine)
            return engine

        yield make
        for engine in engines:
            engine.close()


class TestMemoryEngine(EngineTests):
    @pytest.fixture
    def open_engine(self, request):
        engines = []
        name = f"memory://contract-{request.node.name}-{os.getpid()}"

        def make():
            engine = acquire_memory(name)
            engines.append(engine)
            return engine

        yield make
        for engine in engines:
            engine.close()


def test_the_contract_suite_refuses_a_stores_checked_layer_with_the_reason(tmp_path):
    """A subclass whose open_engine returns ``store.engine`` (the checked layer of an open store,
    settings written) is told what to return, instead of failing tests over records it did not put;
    one that returns ``blobpad.engine.open_engine(target)`` passes.  Run by pytest, as a user runs it."""
    (tmp_path / "test_mine.py").write_text(textwrap.dedent("""
        import pytest
        import blobpad
        from blobpad.engine import open_engine
        from blobpad.testing import EngineTests

        class TestThroughAStore(EngineTests):
            @pytest.fixture
            def open_engine(self, tmp_path):
                stores = []
                def make():
                    stores.append(blobpad.open(str(tmp_path / "db"), sync=False))
                    return stores[-1].engine
                yield make
                for s in stores:
                    s.close()

        class TestRaw(EngineTests):
            @pytest.fixture
            def open_engine(self, tmp_path):
                engines = []
                def make():
                    engines.append(open_engine(str(tmp_path / "db"), sync=False))
                    return engines[-1]
                yield make
                for e in engines:
                    e.close()
    """))
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          "test_mine.py", "-k", "capabilities or empty_store"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = ran.stdout + ran.stderr
    assert "TypeError: open_engine() returned a store's store.engine" in out, out[-3000:]
    assert "blobpad.engine.open_engine(target)" in out
    # every test of the store's layer refused at setup, every one of the raw engine passed
    assert re.search(r"\b(\d+) passed, \d+ deselected, \1 errors\b", out) and "failed" not in out, out[-3000:]


class _RedisContract(EngineTests):
    """The contract on a real server: each test's store is a namespace of its own on the session's server."""

    server_fixture = ""

    @pytest.fixture
    def open_engine(self, request):
        server = request.getfixturevalue(self.server_fixture)
        engines = []
        url = f"{server.url}?namespace=contract-{uuid.uuid4().hex[:12]}"

        def make():
            engine = open_engine(url)
            engines.append(engine)
            return engine

        yield make
        for engine in engines:
            engine.close()


class TestValkeyEngine(_RedisContract):
    server_fixture = "valkey_server"


class TestValkeyClusterEngine(_RedisContract):
    server_fixture = "valkey_cluster"


class TestRedisEngine(_RedisContract):
    server_fixture = "redis_server"


class TestRedisClusterEngine(_RedisContract):
    server_fixture = "redis_cluster"


# -- targets: paths and URLs -------------------------------------------------------------


def test_targets_pick_the_engine(tmp_path, monkeypatch):
    path = tmp_path / "db"
    for target in (path, str(path), f"lmdb://{path}", f"file://{path}", f"LMDB://{path}"):
        with blobpad.open(target) as s:
            assert s.engine.capabilities.name == "lmdb" and s.path == str(path)
            s.put("x\n")
    with blobpad.open(path) as s:
        assert len(s.entries()) == 5  # the same store every time
    with blobpad.open(str(tmp_path / "x:y")) as s:  # a colon in a path is still a path
        assert s.engine.capabilities.name == "lmdb"
    with blobpad.open("memory://") as s:
        assert s.engine.capabilities.name == "memory" and s.path.startswith("memory://")
    monkeypatch.setenv("BLOBPAD_STORE", "memory://from-env")
    monkeypatch.setenv("BLOBPAD_DIR", str(tmp_path / "older"))
    with blobpad.open() as s:
        assert s.path == "memory://from-env"
    monkeypatch.delenv("BLOBPAD_STORE")
    with blobpad.open() as s:
        assert s.path == str(tmp_path / "older")


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("redis://127.0.0.1:99999/0", "port is not a number"),
        ("redis+cluster://127.0.0.1:7000/3", "only database 0"),
        ("redis://127.0.0.1:7000/x", "database is a number"),
        ("redis://127.0.0.1:7000/²", "database is a number"),  # a digit to isdigit(), not to int()
        ("redis://127.0.0.1:7000/" + "9" * 5000, "database is a number"),
        ("redis://127.0.0.1:0/0", "port is not a number"),  # not the default port
        ("redis://u:pw@[::1/0", "not a valid Redis URL"),
        ("redis://127.0.0.1:7000/0?namespace=a&namespace=b", "namespace is given twice"),
        ("redis://127.0.0.1:7000/0?wait_replicas=1.5", "whole number"),
        ("redis://127.0.0.1:7000/0?namespace=a{b}", "namespace must be"),
        ("redis://127.0.0.1:7000/0?map_size=1", "option of the LMDB engine"),
        ("redis://127.0.0.1:7000/0?retry_seconds=-1", "more than 0"),
        ("redis://127.0.0.1:7000/0?colour=blue", "not an option"),
        ("ftp://x/y", "unknown store URL scheme 'ftp'"),
        ("lmdb://relative/path", "absolute path"),
        ("lmdb:///tmp/blobpad-never?sync=false", "no query string"),
        ("file:///tmp/blobpad-never#frag", "no query string"),
        ("file://elsewhere/tmp/blobpad-never", "absolute path"),
        ("", "store path is empty"),
        ("lmdb:///tmp/blobpad-never/caf%E9", "not UTF-8"),
        ("lmdb:///tmp/blobpad-never/a\tb", "tab or a line break"),
        ("file:///tmp/blobpad-never/x\ny", "tab or a line break"),
        ("memory://a/b", "not a memory store"),
        ("memory:", "not a store URL.*memory://"),  # it opened a store on disk named 'memory:' in the cwd
        ("MEMORY:x", "not a store URL.*memory://"),
        ("redis:/127.0.0.1:7000/0", "not a store URL.*redis://host:port/db"),
        ("redis+cluster:x", "not a store URL.*redis\\+cluster://"),
        ("lmdb:relative/path", "not a store URL.*lmdb:///absolute/path"),
        ("file:relative", "not a store URL.*file:///absolute/path"),
        ("file:/tmp/blobpad-never?x=1", "no query string"),
        (42, "path or a URL"),
        (b"/tmp/x", "path or a URL"),
        ("/tmp/blobpad-never/a\0b", "no NUL"),
        (pathlib.Path("/tmp/blobpad-never/a\0b"), "no NUL"),
        ("memory://a\0b", "no NUL"),
        ("redis://127.0.0.1:7000/0?namespace=a\0b", "no NUL"),
        ("lmdb:///tmp/blobpad-never/a%00b", "NUL"),
        # white space at either end of a path: another, empty store (a CRLF file's line end, mostly)
        ("/tmp/blobpad-never/store\r", "white space at its start or end"),
        ("store\n", "white space at its start or end"),
        (" store", "white space at its start or end"),
        ("   ", "only white space"),
        (pathlib.Path("store "), "white space at its start or end"),
        ("~no-such-user-blobpad/store", "no such user"),
        # memory store names: printable, no white space, not too long
        ("memory:// x", "not a memory store"),
        ("memory://a b", "not a memory store"),
        ("memory://a\x01b", "not a memory store"),
        ("memory://" + "n" * 201, "not a memory store"),
        # a directory name of bytes that are not UTF-8, as Python decodes it (surrogateescape): LMDB cannot open it
        ("st\udcff", "not valid UTF-8"),
        (pathlib.Path("nested/st\udcffore"), "not valid UTF-8"),
        # any scheme RFC 3986 allows ("-" and "."): a mistyped one is refused, never a directory of that name
        ("redis-cluster://127.0.0.1:1", "unknown store URL scheme 'redis-cluster'"),
        ("valkey.cluster://127.0.0.1:1", "unknown store URL scheme 'valkey.cluster'"),
        ("Redis-Cluster://127.0.0.1:1", "unknown store URL scheme"),
        (" redis://127.0.0.1:1/0", "white space around it"),
        ("redis://127.0.0.1:1/0\n", "white space around it"),
        ("\tmemory://x", "white space around it"),
    ],
)
def test_a_bad_target_is_a_clear_error(target, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a target taken for a directory would be made here
    with pytest.raises(InvalidArgument, match=words):
        blobpad.open(target)
    assert list(tmp_path.iterdir()) == []


#: bad targets of every form, each with a long run where a hostile or mistyped one may have it
_LONG = "a" * 150_000


@pytest.mark.parametrize("target", [
    "foo://" + _LONG, "file://host/" + _LONG, "lmdb://" + _LONG, "lmdb:///tmp/" + _LONG + "?x",
    "lmdb:///tmp/%ff" + _LONG, "lmdb:///tmp/\t" + _LONG, "memory://" + _LONG, "memory:" + _LONG, _LONG + "\0",
    "redis://127.0.0.1:7000/0?" + _LONG + "=1", "redis://127.0.0.1:7000/0?namespace=" + _LONG,
    "redis+cluster://127.0.0.1:7000/" + "1" * 150_000, "redis://127.0.0.1:7000/" + _LONG,
    "redis://127.0.0.1:" + _LONG + "/0", "~" + _LONG, " " + _LONG, _LONG + ":a:b@" + _LONG,
    "x" + "a:" * 75_000 + "@", "@" + "a:" * 75_000, "st\udcff" + _LONG,
    "redis://user:SECRETPW" + _LONG + "@127.0.0.1:7000/x", "foo://user:SECRETPW@" + _LONG,
])
def test_a_long_bad_target_is_refused_at_once_with_a_short_message(target, tmp_path, monkeypatch):
    """Whatever a bad target holds and however long it is, the error quotes at most a few
    hundred characters of it, never a password, and comes at once: masking the password
    took time quadratic in the length of a run of letters (minutes for a 150,000-character
    target; the test's time limit fails a hang)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument) as caught:
        blobpad.open(target)
    message = str(caught.value)
    assert len(message) < 700 and "SECRETPW" not in message
    assert list(tmp_path.iterdir()) == []


def test_a_path_object_whose_fspath_gives_no_text_is_refused(tmp_path):
    class Odd:
        def __fspath__(self):
            return 5

    with pytest.raises(InvalidArgument, match="__fspath__"):
        blobpad.open(Odd())


def test_a_path_starting_with_a_tilde_is_under_the_home_directory(tmp_path, monkeypatch):
    """``~/x`` names the directory x under $HOME, as a shell would expand it, wherever the target
    comes from (a JSON configuration that no shell reads): it used to open ./~/x in the working
    directory, a new empty store.  ``./~x`` is a directory of that name."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with blobpad.open("~/agent-store") as s:
        assert s.path == str(home / "agent-store")
        entry = s.put("kept", session="s")
    with blobpad.open(str(home / "agent-store")) as s:
        assert s.get(entry.id) == "kept"
    monkeypatch.setenv("BLOBPAD_STORE", "~/agent-store")
    with blobpad.open() as s:
        assert s.get(entry.id) == "kept"
    with blobpad.open("./~x") as s:
        assert s.path.endswith("~x") and (work / "~x").is_dir()
    assert sorted(p.name for p in work.iterdir()) == ["~x"]
    with blobpad.open("memory://a-name.with_[brackets]:and-more") as s:  # names as tests and runtimes make them
        assert s.entries() == []


def test_open_takes_the_target_by_position_or_keyword(tmp_path):
    with blobpad.open(target="memory://kw") as a, blobpad.open("memory://kw") as b:
        assert a.path == b.path == "memory://kw"
    with blobpad.open(path=tmp_path / "older-name") as s:  # the older keyword still works
        assert s.path == str(tmp_path / "older-name")
    with pytest.raises(InvalidArgument, match="given twice"):
        blobpad.open("memory://", path="memory://")


def test_a_url_of_one_slash_opens_that_absolute_directory_and_nothing_in_the_cwd(tmp_path, monkeypatch):
    """file:/abs and lmdb:/abs (RFC 8089's file URL of one slash) open /abs; they, and memory:, opened a
    directory named after the whole string under the working directory."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    with blobpad.open(f"file:{tmp_path}/one%20slash") as s:
        assert s.path == str(tmp_path / "one slash")
    with blobpad.open(f"LMDB:{tmp_path}/plain") as s:
        assert s.path == str(tmp_path / "plain")
    with pytest.raises(InvalidArgument):
        blobpad.open("memory:")
    with blobpad.open("./memory:") as s:  # a directory of that name, said as a path
        assert s.path.endswith("memory:")
    assert sorted(p.name for p in work.iterdir()) == ["memory:"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "one slash", "plain"]


def test_a_file_url_is_percent_decoded(tmp_path):
    with blobpad.open(f"file://{tmp_path}/two%20words%3F") as s:
        assert s.path == str(tmp_path / "two words?")
    with blobpad.open(f"lmdb://localhost{tmp_path}/plain") as s:
        assert s.path == str(tmp_path / "plain")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "two words?"]


def test_a_path_through_a_link_and_dotdot_makes_only_the_store(tmp_path):
    """The kernel follows a link before "..": so does the making of missing directories (a
    textual reading of "link/.." made a stray directory beside the store)."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    with blobpad.open(f"{tmp_path}/link/../newstore") as s:
        s.put("x\n")
    assert (tmp_path / "real" / "newstore" / "data.mdb").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_the_map_ceiling_holds_from_the_first_write(tmp_path):
    """A max_map_size below the default starting map brings the start down to it: the
    ceiling holds from the first write, not only once the map grows (StoreFull, nothing
    half-written); one below 1 MiB, or below an explicit map_size, is refused."""
    with blobpad.open(tmp_path / "small", max_map_size=2 << 20) as s:
        kept = s.put("kept\n", session="s")
        with pytest.raises(StoreFull, match="max_map_size"):
            for i in range(8):
                s.put(os.urandom(1 << 20), session="s", name=f"big{i}")
        assert s.get(kept.id) == "kept\n" and s.verify().ok
    with pytest.raises(InvalidArgument, match="at least 1 MiB"):
        blobpad.open(tmp_path / "tiny", max_map_size=1)
    with pytest.raises(InvalidArgument, match="map_size .* is above max_map_size"):
        blobpad.open(tmp_path / "above", map_size=1 << 30, max_map_size=1 << 20)


def test_a_second_open_never_silently_gets_another_sync(tmp_path):
    with blobpad.open(tmp_path / "db", sync=False) as first:
        with pytest.raises(InvalidArgument, match="already open in this process with sync=False"):
            blobpad.open(tmp_path / "db", sync=True)
        with blobpad.open(tmp_path / "db", sync=False) as same, blobpad.open(tmp_path / "db") as unsaid:
            assert "sync=False" in same.engine.capabilities.durability == unsaid.engine.capabilities.durability
        first.put("still open\n")
    with blobpad.open(tmp_path / "db", sync=True) as again:  # once closed, another sync is fine
        assert "sync=False" not in again.engine.capabilities.durability


def test_engine_options_belong_to_their_engine(tmp_path):
    with pytest.raises(InvalidArgument, match="map_size is an option of the LMDB engine"):
        blobpad.open("memory://", map_size=1 << 20)
    with pytest.raises(InvalidArgument, match=r"namespace is an option of the Redis engine; the memory engine"):
        blobpad.open("memory://", namespace="x")
    with pytest.raises(InvalidArgument, match=r"unknown option 'bogus'; the memory engine \(memory://\) takes none"):
        blobpad.open("memory://", bogus=1)
    with pytest.raises(InvalidArgument, match="namespace is an option of the Redis engine, not of the LMDB engine"):
        blobpad.open(tmp_path / "db", namespace="x")
    with pytest.raises(InvalidArgument, match="unknown option 'colour' of the LMDB engine"):
        blobpad.open(tmp_path / "db", colour="blue")
    with pytest.raises(InvalidArgument, match="sync must be True or False"):
        blobpad.open(tmp_path / "db", sync="yes")
    with pytest.raises(InvalidArgument, match="max_readers"):
        blobpad.open(tmp_path / "db", max_readers=0)
    with blobpad.open(tmp_path / "db", sync=False, map_size=2 << 20) as s:
        assert "sync=False" in s.engine.capabilities.durability
    with blobpad.open(tmp_path / "db2") as s:
        assert "sync=True" in s.engine.capabilities.durability  # the default survives a power loss


def _lmdb_calls(run):
    """The LMDB calls (commits and flushes) made by ``run()`` in any thread, in order,
    seen through the profiler hook (the calls themselves, nothing of blobpad's inside)."""
    seen: list[str] = []
    names = {"Transaction.__exit__": "commit", "Transaction.commit": "commit", "Environment.sync": "flush"}

    def hook(frame, event, arg):
        if event == "c_call" and getattr(arg, "__qualname__", "") in names:
            seen.append(names[arg.__qualname__])

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return seen


@pytest.mark.parametrize("sync", [True, False])
def test_with_sync_on_every_commit_is_on_disk_before_the_call_returns(tmp_path, sync):
    """sync=True: LMDB flushes a commit's data pages, and blobpad flushes its meta page
    (written without waiting: MDB_NOMETASYNC) after the writer lock is released, so every
    commit a call makes is followed by a flush before the call returns; sync=False
    flushes nothing (the operating system writes when it likes)."""
    text = "".join(f"line {i} {'x' * (i % 70)}\n" for i in range(40_000))  # several batches: a journalled put
    with blobpad.open(tmp_path / "db", sync=sync, map_size=8 << 20) as s:
        ops = [
            lambda: s.put("small observation\n" * 300, session="a", turn=1),
            lambda: s.put(text, session="a", name="big"),
            lambda: s.notepad("a").set_plan("read the log"),
            lambda: s.delete(s.find("big", session="a").id),
            lambda: s.gc(),
        ]
        for op in ops:
            calls = _lmdb_calls(op)
            assert calls.count("commit") >= 1
            if not sync:
                assert "flush" not in calls
                continue
            assert calls[-1] == "flush"  # the last commit was flushed before the call returned
            for before, after in itertools.pairwise(calls):
                assert not (before == "commit" and after == "commit")  # each commit flushed before the next


@pytest.mark.parametrize("target", [
    "redis://u:SECRETPW@127.0.0.1:notaport/0", "redis://u:SECRETPW@127.0.0.1:99999/0", "redis://u:SECRETPW@127.0.0.1:1/x",
    "redis+cluster://u:SECRETPW@127.0.0.1:1/3", "redis://u:SECRETPW@[::1/0", "redis2://u:SECRETPW@127.0.0.1:1/0",
    "redis://:SECRETPW@127.0.0.1:1/0?colour=blue",
])
def test_an_error_about_a_url_never_shows_its_password(target):
    with pytest.raises(InvalidArgument) as caught:
        blobpad.open(target)
    assert "SECRETPW" not in str(caught.value) and "SECRETPW" not in repr(caught.value)


def test_options_given_as_keywords_are_checked_like_the_query_strings():
    url = "redis://127.0.0.1:1/0"
    for options, words in [({"timeout": 10**400}, "timeout must be a number"), ({"wait_replicas": 2.9}, "whole number"),
                           ({"wait_replicas": True}, "whole number"), ({"retry_seconds": True}, "must be a number"),
                           ({"namespace": "b"}, None)]:
        with pytest.raises(InvalidArgument, match=words or "namespace is given twice"):
            blobpad.open(url + ("?namespace=a" if words is None else ""), **options)


def test_a_memory_store_is_shared_by_name_and_gone_at_close():
    a = blobpad.open("memory://shared-test")
    b = blobpad.open("memory://shared-test")
    private = blobpad.open("memory://")
    e = a.put("hello\n", session="s")
    assert b.get(e.id) == "hello\n"
    assert private.entries() == [] and not private.exists(e.id)
    a.close()
    assert b.get(e.id) == "hello\n"  # one holder closed: the other keeps the data
    b.close()
    with blobpad.open("memory://shared-test") as again:
        assert again.entries() == [] and not again.exists(e.id)  # the last close dropped it
    private.close()
    with pytest.raises(BlobpadError, match="closed"):
        private.get(e.id)


def test_a_stores_path_is_a_target_that_opens_a_store_like_it(tmp_path):
    """``Store.path`` (also in the CLI's stats and notes) is what the caller would pass to open it:
    a private memory store's is ``memory://``, which opens another private one, never a form
    blobpad.open refuses."""
    for target in ("memory://", "memory://path-test", str(tmp_path / "s")):
        with blobpad.open(target) as s:
            e = s.put("x\n", session="s")
            assert s.path == target and target in repr(s)
            with blobpad.open(s.path) as again:
                assert again.exists(e.id) == (target != "memory://")  # a private store is shared with none


def test_a_memory_store_says_what_it_cannot_do():
    s = blobpad.open("memory://")
    try:
        with pytest.raises(BlobpadError, match="nothing to compact"):
            s.compact()
        st = s.stats()
        assert st.map_size == 0 and 0 < st.disk_bytes < 1000  # the settings record
        s.put(os.urandom(5000))
        assert s.stats().disk_bytes > 5000  # the bytes it holds in memory
        caps = s.engine.capabilities
        assert (caps.persistent, caps.processes, caps.compaction, caps.size_ceiling) == (False, False, False, False)
    finally:
        s.close()


def test_the_cli_takes_the_same_target(tmp_path, capsys):
    from blobpad import cli

    assert cli.main(["--db", "memory://cli-test", "stats"]) == 0
    assert '"entries": 0' in capsys.readouterr().out
    log = tmp_path / "app.log"
    log.write_text("a\nb\n")
    assert cli.main(["--db", f"lmdb://{tmp_path / 'db'}", "put", str(log)]) == 0
    entry_id = json.loads(capsys.readouterr().out)["id"]
    assert cli.main(["--db", str(tmp_path / "db"), "ls"]) == 0  # the same store, named as a path
    assert entry_id in capsys.readouterr().out


def test_the_demo_on_a_memory_store_says_its_entry_is_gone_at_exit():
    import io

    from blobpad.demo import run

    out = io.StringIO()
    assert run("memory://demo-test", size=300_000, out=out) == 0
    text = out.getvalue()
    assert "in-memory store" in text and "gone when this command ends" in text
    assert "stays for an hour" not in text and "rm " not in text  # no command that would fail in another process


_CLOSE_DURING_OPEN = textwrap.dedent("""
    import gc, sys
    import blobpad
    kind, base = sys.argv[1], sys.argv[2]
    name = (lambda n: f"{base}/{n}") if kind == "lmdb" else (lambda n: f"memory://{n}")
    others = [blobpad.open(name(f"o{i}")) for i in range(200)]
    armed = []
    def collect(phase, info):  # a finalizer's work: close a store whenever the GC starts
        if phase == "start" and armed and others:
            others.pop().close()
    gc.callbacks.append(collect)
    gc.set_threshold(1)  # a collection at almost every allocation, so one runs inside the open
    armed.append(1)
    store = blobpad.open(name("b"))
    armed.clear()
    gc.callbacks.remove(collect)
    gc.set_threshold(700)
    store.put("x", session="s")
    store.close()
    for other in others:
        other.close()
    print("ok")
""")


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_a_store_closed_by_the_gc_during_an_open_does_not_deadlock(kind, tmp_path):
    """Closing a store from a finalizer (the GC runs them at any allocation, so also
    inside blobpad.open) must not wait for the lock that open holds: found by running
    deepagents' tests, whose finalizers closed stores; it hung the process for good."""
    run = subprocess.run([sys.executable, "-c", _CLOSE_DURING_OPEN, kind, str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_an_unreachable_redis_is_a_clear_error_within_bounded_time():
    import socket
    import time

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    began = time.monotonic()
    with pytest.raises(BlobpadError, match=rf"redis://127.0.0.1:{port}/0 did not answer at open"):
        blobpad.open(f"redis://127.0.0.1:{port}/0")
    assert time.monotonic() - began < 10
