"""Hardening (issue 12): the offload sandbox never hands out a store's own files, names
and sessions have one byte limit that every path enforces, and a store's files are private.

Real stores in temporary directories; the oracles are the original strings, ``os.stat``
and an in-memory model of what each session holds.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import blobpad
from blobpad import Toolbox
from blobpad.errors import MAX_STR_BYTES

SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


# -- the offload sandbox refuses every blobpad store's files ---------------------------------------------


def _home_with_store(tmp_path: Path) -> tuple[Path, Path]:
    """A home directory holding the default store layout, and the store directory."""
    home = tmp_path / "home"
    db = home / ".local" / "share" / "blobpad"
    db.mkdir(parents=True)
    return home, db


def _offload(tb: Toolbox, path: str | Path) -> dict:
    out = tb.call("scratchpad_offload", {"path": str(path)})
    assert SECRET not in json.dumps(out)
    return out


def _refused(tb: Toolbox, path: str | Path) -> str:
    before = len(tb.store.entries(session=tb.session))
    out = _offload(tb, path)
    assert out["ok"] is False, (path, out)
    error = out["error"]
    assert "cannot be offloaded" in error and ("store" in error or "LMDB" in error), out
    assert len(tb.store.entries(session=tb.session)) == before       # nothing was stored
    return out["error"]


def test_offload_refuses_the_open_store_by_any_path(tmp_path):
    home, db = _home_with_store(tmp_path)
    (home / "sub").mkdir()
    (home / "notes.txt").write_text("my own notes\n")
    with blobpad.open(db) as store:
        store.notepad("victim").set_notes(SECRET)
        store.put(SECRET + "\n", session="victim")
        tb = Toolbox(store, session="attacker", turn=None, scope="session", always_show=True, allow_dirs=[home])
        for name in ("data.mdb", "lock.mdb", "blobpad.lock"):
            _refused(tb, db / name)                                         # absolute
            _refused(tb, f".local/share/blobpad/{name}")                     # relative to the allowed directory
            _refused(tb, f"sub/../.local/share/blobpad/./{name}")            # with .. and .
            _refused(tb, f"~/../home/.local//share/blobpad/{name}".replace("~", str(home)))
        (home / "link-to-data").symlink_to(db / "data.mdb")                  # a symlink to the file
        _refused(tb, "link-to-data")
        (home / "link-to-store").symlink_to(db, target_is_directory=True)   # a symlink to the directory
        _refused(tb, "link-to-store/data.mdb")
        os.link(db / "data.mdb", home / "innocent.txt")                      # a hard link, another name
        assert "open blobpad store" in _refused(tb, "innocent.txt")
        os.link(db / "blobpad.lock", home / "empty.txt")                     # even the empty lock file
        _refused(tb, "empty.txt")
        (db / "readme.txt").write_text("a file someone left in the store directory\n")
        _refused(tb, db / "readme.txt")                                     # anything inside a store
        (db / ".compact-1").mkdir()
        shutil.copyfile(db / "data.mdb", db / ".compact-1" / "data.mdb")     # a compaction's copy
        _refused(tb, db / ".compact-1" / "data.mdb")
        # The control: an ordinary file in the same allowed directory is offloaded.
        ok = _offload(tb, "notes.txt")
        assert ok["ok"] is True and store.get(ok["scratchpad_id"]) == "my own notes\n"
        found = tb.call("scratchpad_read", {"scratchpad_id": ok["scratchpad_id"], "mode": "grep",
                                            "pattern": "AWS_SECRET"})
        assert found["ok"] and found["total_matches"] == 0


def test_offload_refuses_other_stores_and_their_copies(tmp_path):
    allowed = tmp_path / "work"
    other = allowed / "old-store"
    with blobpad.open(other) as old:
        old.put(SECRET + "\n", session="victim")
        old.notepad("victim").set_notes(SECRET)
    (allowed / "backups").mkdir()
    shutil.copyfile(other / "data.mdb", allowed / "backups" / "data.bak")   # a copy, elsewhere, renamed
    os.link(other / "data.mdb", allowed / "backups" / "hardlink.bin")      # a hard link to another store's file
    shutil.copyfile(other / "lock.mdb", allowed / "backups" / "lock.copy")
    # Not stores: a directory with a data.mdb alone, holding text, and a text file named lock.mdb.
    (allowed / "plain").mkdir()
    (allowed / "plain" / "data.mdb").write_text("just a text file called data.mdb\n")
    (allowed / "lock.mdb").write_text("also text\n")
    with blobpad.open(tmp_path / "db") as store:
        tb = Toolbox(store, session="attacker", turn=None, scope="session", always_show=True, allow_dirs=[allowed])
        for name in ("data.mdb", "lock.mdb", "blobpad.lock"):
            assert "inside the blobpad store" in _refused(tb, other / name)
        for name in ("data.bak", "hardlink.bin", "lock.copy"):
            assert "LMDB" in _refused(tb, allowed / "backups" / name)
        for path, text in ((allowed / "plain" / "data.mdb", "just a text file called data.mdb\n"),
                           (allowed / "lock.mdb", "also text\n")):
            out = _offload(tb, path)
            assert out["ok"] is True and store.get(out["scratchpad_id"]) == text


# -- a store's directory is 0700 and its files 0600, whatever the umask ------------------------------------


def _modes(db: Path) -> dict[str, int]:
    """The permission bits of the store directory ('.') and of every file in it."""
    out = {".": stat.S_IMODE(db.stat().st_mode)}
    for p in db.iterdir():
        out[p.name] = stat.S_IMODE(p.stat().st_mode)
    return out


PRIVATE = {".": 0o700, "data.mdb": 0o600, "lock.mdb": 0o600, "blobpad.lock": 0o600}


#: run as root, the tests drop the capabilities that let root ignore file modes, so that a
#: mode that would lock its owner out does so here as it does for any user
_AS_USER = (["setpriv", "--inh-caps=-dac_override,-dac_read_search",
             "--bounding-set=-dac_override,-dac_read_search", "--"]
            if os.geteuid() == 0 and shutil.which("setpriv") else [])


def _cli(args: list[str], umask: int, env: dict[str, str] | None = None, stdin: bytes = b"") -> str:
    run_env = {**(os.environ if env is None else env), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([*_AS_USER, sys.executable, "-m", "blobpad", *args], input=stdin, capture_output=True,
                         env=run_env, preexec_fn=lambda: os.umask(umask))
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000, 0o077, 0o277, 0o777], ids=lambda m: f"umask-{m:03o}")
def test_a_new_store_is_private_whatever_the_umask(tmp_path, umask):
    db = tmp_path / "x"
    eid = json.loads(_cli(["--db", str(db), "put", "-", "--session", "s"], umask, stdin=SECRET.encode()))["id"]
    assert _modes(db) == PRIVATE
    # and it still works: a second process (same umask) opens it, reads and writes
    assert _cli(["--db", str(db), "read", eid, "--full"], umask) == SECRET
    _cli(["--db", str(db), "put", "-", "--session", "s"], umask, stdin=b"more")
    assert _modes(db) == PRIVATE


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o777], ids=lambda m: f"umask-{m:03o}")
def test_the_missing_parents_of_a_new_store_are_private_too(tmp_path, umask):
    """Whoever may write a parent of the store could swap the store for a link: the parents
    blobpad creates are 0700 as well (an existing parent is left as it is)."""
    db = tmp_path / "made" / "by" / "blobpad" / "db"
    _cli(["--db", str(db), "put", "-", "--session", "s"], umask, stdin=SECRET.encode())
    assert _modes(db) == PRIVATE
    for parent in (tmp_path / "made", tmp_path / "made" / "by", tmp_path / "made" / "by" / "blobpad"):
        assert stat.S_IMODE(parent.stat().st_mode) == 0o700, parent


COMPACT_FOREVER = """
import os, sys, blobpad
store = blobpad.open(sys.argv[1])
print("compacting", flush=True)
while True:
    store.compact()
"""


def _every_mode(db: Path) -> dict[str, int]:
    """The permission bits of everything under the store directory, by path."""
    out = {".": stat.S_IMODE(db.stat().st_mode)}
    for p in db.rglob("*"):
        out[str(p.relative_to(db))] = stat.S_IMODE(p.lstat().st_mode)
    return out


def test_a_compaction_killed_at_any_moment_leaves_nothing_readable_by_others(tmp_path):
    """compact() writes the store whole again beside it: that copy is the store's data too, so
    it is private from its first byte, also when the process is killed while it writes it
    (the copy stays until the next open removes it), whatever the umask."""
    db = tmp_path / "db"
    with blobpad.open(db) as store:
        for _ in range(24):
            store.put(os.urandom(2 << 20), ttl=None, session="s")   # 48 MB the copy takes a while to write
    seen_copy = 0
    for delay in [0.02 * k for k in range(1, 13)]:
        child = subprocess.Popen([*_AS_USER, sys.executable, "-c", COMPACT_FOREVER, str(db)], stdout=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                                 preexec_fn=lambda: os.umask(0))
        try:
            assert child.stdout is not None and child.stdout.readline() == b"compacting\n"
            time.sleep(delay)
        finally:
            child.kill()
            child.wait(timeout=30)
        modes = _every_mode(db)
        seen_copy += any(name.startswith(".compact-") and name.endswith("data.mdb") for name in modes)
        assert {name: mode for name, mode in modes.items() if mode not in (0o600, 0o700)} == {}, delay
    assert seen_copy  # the kills did land while a copy was being written
    with blobpad.open(db) as store:
        assert store.verify().ok and len(store.entries(session="s")) == 24
    assert _modes(db) == PRIVATE


def test_the_default_store_is_private(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("BLOBPAD_DIR", "XDG_DATA_HOME")} | {"HOME": str(home)}
    _cli(["put", "-", "--session", "s"], 0o022, env=env, stdin=SECRET.encode())
    db = home / ".local" / "share" / "blobpad"
    assert _modes(db) == PRIVATE


def test_opening_a_loose_store_tightens_it(tmp_path):
    db = tmp_path / "db"
    with blobpad.open(db) as store:
        store.put(SECRET, session="s")
    os.chmod(db, 0o755)
    for name, mode in (("data.mdb", 0o644), ("lock.mdb", 0o666), ("blobpad.lock", 0o604)):
        os.chmod(db / name, mode)
    with blobpad.open(db) as store:
        assert _modes(db) == PRIVATE
        store.put("more", session="s")
        os.chmod(db / "data.mdb", 0o644)
        store.compact()                         # the compacted copy replaces data.mdb: private as well
        assert _modes(db) == PRIVATE
        assert [store.get(e.id) for e in store.entries(session="s")] == [SECRET, "more"]


def test_a_store_in_a_directory_with_other_files_leaves_the_directory_alone(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    (shared / "README").write_text("other files live here\n")
    with blobpad.open(shared) as store:
        store.put(SECRET, session="s")
    modes = _modes(shared)
    assert modes.pop(".") == 0o755 and modes.pop("README") != 0o600
    assert modes == {k: v for k, v in PRIVATE.items() if k != "."}


def test_a_mode_that_cannot_be_tightened_is_warned_about(tmp_path, monkeypatch):
    db = tmp_path / "db"
    with blobpad.open(db) as store:
        store.put(SECRET, session="s")
    os.chmod(db / "data.mdb", 0o644)

    def refuse(path, mode, *args, **kwargs):   # as for a store owned by another user
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(os, "chmod", refuse)
    with pytest.warns(UserWarning, match=r"data\.mdb has mode 644.*chmod 600"), blobpad.open(db) as store:
        assert store.get(store.entries(session="s")[0].id) == SECRET


# -- sessions, turns, names and tools: one limit in bytes of UTF-8, on every path --------------------------

LIMIT = MAX_STR_BYTES


def _text(nbytes: int, pieces: str) -> str:
    """A string of exactly ``nbytes`` bytes of UTF-8, cycling through ``pieces`` (then ASCII to fill up)."""
    out, size, i = [], 0, 0
    while True:
        ch = pieces[i % len(pieces)]
        if size + len(ch.encode()) > nbytes:
            break
        out.append(ch)
        size += len(ch.encode())
        i += 1
    out.append("x" * (nbytes - size))
    text = "".join(out)
    assert len(text.encode()) == nbytes
    return text


# Each at exactly LIMIT bytes, in 1- to 4-byte characters, so characters and bytes differ.
SESSION = _text(LIMIT, "s😀")
NAME = _text(LIMIT, "né€")
TURN = _text(LIMIT, "ü")
TOOL = _text(LIMIT, "€")


def _over(text: str) -> list[str]:
    """Strings one byte past the limit: the string and one ASCII byte, and 238 ASCII characters and an emoji
    (fewer characters than the limit, one byte more)."""
    over = [text + "a", _text(LIMIT - 3, "a") + "😀"]
    assert all(len(o.encode()) == LIMIT + 1 for o in over)
    return over


def test_every_index_key_fits_lmdb_at_the_limit(tmp_path):
    import lmdb

    from blobpad import index, notes

    env = lmdb.open(str(tmp_path / "probe"), subdir=True)
    try:
        limit = env.max_key_size()
    finally:
        env.close()
    seq = (1 << 63).to_bytes(8, "big")
    longest_space = "s" * 32                                     # space names are 1-32 ASCII characters
    keys = [
        index.name_key(SESSION, NAME),
        index.scope_key(SESSION) + seq,
        index.scope_key(SESSION, TURN) + seq,
        index.scope_key(SESSION, -(1 << 62)) + seq,
        notes.log_key(SESSION, longest_space, 1 << 63),
        notes.head_key(SESSION, longest_space),
        notes.expiry_key(1e12, SESSION),
        notes.meta_key(SESSION),
    ]
    assert max(len(k) for k in keys) <= limit


def test_names_and_sessions_at_the_limit_work_on_every_path(tmp_path):
    content = "line one\nthe second line\n"
    with blobpad.open(tmp_path / "db") as store:
        other = store.put("someone else's\n", session="other", name=NAME)
        e = store.put(content, session=SESSION, turn=TURN, name=NAME, tool=TOOL)
        assert (e.session, e.turn, e.name, e.tool) == (SESSION, TURN, NAME, TOOL)
        assert store.get(e.id) == content
        assert store.find(NAME, session=SESSION).id == e.id
        assert store.find(NAME, session="other").id == other.id
        assert [x.id for x in store.entries(session=SESSION)] == [e.id]
        assert [x.id for x in store.entries(session=SESSION, turn=TURN)] == [e.id]
        assert [x.id for x in store.entries()] == [other.id, e.id]
        assert store.sessions() == sorted(["other", SESSION])
        replaced = store.put("new\n", session=SESSION, turn=TURN, name=NAME, tool=TOOL)   # same name: replaces
        assert store.find(NAME, session=SESSION).id == replaced.id
        # the notepad of a session at the limit, and a sub-session at the limit
        pad = store.notepad(SESSION)
        pad.write("# findings")
        pad.set_plan("1. look")
        assert store.notepad(SESSION).read() == "# findings"
        child = _text(LIMIT, "ü")
        assert pad.fork(child).read() == "# findings"
        # the tools: session-scoped listing, reads by id and by name, writes by name
        tb = Toolbox(store, session=SESSION, turn=TURN, scope="turn", always_show=True)
        listed = tb.call("scratchpad_list", {})
        assert listed["ok"] and [x["scratchpad_id"] for x in listed["entries"]] == [replaced.id], listed
        assert tb.call("scratchpad_read", {"scratchpad_id": replaced.id, "mode": "head"})["content"] == "new\n"
        seed003 = Toolbox(store, session=SESSION, turn=TURN, profile="seed003")
        long_name = _text(LIMIT, "ab€")
        w = seed003.call("scratchpad_write", {"name": long_name, "content": "kept"})
        assert w["ok"], w
        assert seed003.call("scratchpad_read", {"name": long_name})["content"].endswith("kept")
        assert store.find(long_name, session=SESSION).tool == "scratchpad_write"
        names = [x["name"] for x in seed003.call("scratchpad_list", {})["entries"]]
        assert sorted(names) == sorted([NAME, long_name]), names
        # seed 003's automatic names stay within the limit whatever the tool's name
        off = blobpad.Offloader(store, policy="seed003")
        obs = off.offload({"content": "y" * 40_000}, session=SESSION, turn=TURN, tool=TOOL)
        named = store.get(obs["scratchpad_id"])
        assert named == "y" * 40_000
        auto = [x.name for x in store.entries(session=SESSION) if x.tool == TOOL and x.name != NAME]
        assert len(auto) == 1 and len(auto[0].encode()) <= LIMIT
        # delete_session removes everything of the session, and nothing else
        assert store.delete_session(SESSION) == 3          # the replaced entry, the written one, the offloaded one
        assert store.entries(session=SESSION) == [] and store.notepad(SESSION).read() == ""
        assert store.find(NAME, session="other").id == other.id


def test_one_byte_past_the_limit_is_invalid_argument_on_every_path(tmp_path):
    with blobpad.open(tmp_path / "db") as store:
        e = store.put("x\n", session=SESSION, turn=TURN, name=NAME, tool=TOOL)
        calls = []
        for bad in _over(SESSION):
            calls += [
                lambda b=bad: store.put("x", session=b),
                lambda b=bad: store.find(NAME, session=b),
                lambda b=bad: store.entries(session=b),
                lambda b=bad: store.entries(session=b, turn=TURN),
                lambda b=bad: store.delete_session(b),
                lambda b=bad: store.notepad(b),
                lambda b=bad: store.notepad(SESSION).fork(b),
                lambda b=bad: Toolbox(store, session=b, turn=1),
                lambda b=bad: blobpad.Offloader(store).offload({"content": "y" * 9000}, session=b, turn=None),
            ]
        for bad in _over(NAME):
            calls += [
                lambda b=bad: store.put("x", session=SESSION, name=b),
                lambda b=bad: store.find(b, session=SESSION),
                lambda b=bad: blobpad.Offloader(store).offload("y", session=SESSION, turn=None, scratchpad=b),
            ]
        for bad in _over(TURN):
            calls += [
                lambda b=bad: store.put("x", session=SESSION, turn=b),
                lambda b=bad: store.entries(session=SESSION, turn=b),
                lambda b=bad: Toolbox(store, session=SESSION, turn=b),
            ]
        for bad in _over(TOOL):
            calls += [
                lambda b=bad: store.put("x", session=SESSION, tool=b),
                lambda b=bad: blobpad.Offloader(store, policy="seed003").offload(
                    {"content": "y" * 40_000}, session=SESSION, turn=None, tool=b),
            ]
        for call in calls:
            with pytest.raises(blobpad.InvalidArgument, match=rf"the limit is {LIMIT} bytes"):
                call()
        # a tool call answers ok:false, with the limit
        tb = Toolbox(store, session=SESSION, turn=TURN, profile="seed003")
        for bad in _over(NAME):
            for tool, args in (("scratchpad_write", {"name": bad, "content": "c"}), ("scratchpad_read", {"name": bad}),
                               ("scratchpad_delete", {"name": bad})):
                out = tb.call(tool, args)
                assert out["ok"] is False and f"{LIMIT} bytes" in out["error"], out
        # nothing was stored or changed by any of them
        assert [x.id for x in store.entries()] == [e.id]
        assert store.find(NAME, session=SESSION).id == e.id


def test_the_command_line_enforces_the_same_limit(tmp_path):
    db = str(tmp_path / "db")
    env = dict(os.environ)
    put = ["--db", db, "put", "-", "--session", SESSION, "--turn", TURN, "--name", NAME, "--tool", TOOL]
    eid = json.loads(_cli(put, 0o022, env=env, stdin=b"hello\n"))["id"]
    listed = _cli(["--db", db, "ls", "--session", SESSION, "--turn", TURN, "--json"], 0o022, env=env)
    assert eid in listed
    _cli(["--db", db, "notes", "--session", SESSION, "set", "found it"], 0o022, env=env)
    assert "found it" in _cli(["--db", db, "notes", "--session", SESSION], 0o022, env=env)
    run_env = {**env, "PYTHONPATH": os.pathsep.join(sys.path)}
    for args in (["put", "-", "--session", SESSION + "a"], ["put", "-", "--name", NAME + "a"],
                 ["put", "-", "--tool", TOOL + "a"], ["put", "-", "--turn", TURN + "a"],
                 ["ls", "--session", SESSION + "a"], ["notes", "--session", SESSION + "a"]):
        out = subprocess.run([sys.executable, "-m", "blobpad", "--db", db, *args], input=b"x", capture_output=True,
                             env=run_env)
        err = out.stderr.decode()
        assert out.returncode == 2 and f"the limit is {LIMIT} bytes" in err and "Traceback" not in err, (args, err)


def test_the_limit_is_exactly_in_bytes_for_every_field_and_character_width(tmp_path):
    """Around the limit, for 1- to 4-byte characters: a put (and then find and entries) works exactly when every
    field fits, and a session plus name of 500 bytes (LMDB's key limit, formerly a raw lmdb error) is refused."""
    with blobpad.open(tmp_path / "db") as store:
        for width, ch in enumerate(("a", "é", "€", "😀"), 1):
            for nbytes in range(LIMIT - 4, LIMIT + 5):
                value = _text(nbytes - nbytes % width, ch) + "b" * (nbytes % width)
                for field in ("session", "name", "turn", "tool"):
                    kwargs = {"session": "s", "name": "n", "turn": "t", "tool": "x"} | {field: value}
                    if nbytes <= LIMIT:
                        e = store.put(f"{field} {nbytes} {width}", **kwargs)
                        assert store.find(kwargs["name"], session=kwargs["session"]).id == e.id
                        assert e.id in [x.id for x in store.entries(session=kwargs["session"], turn=kwargs["turn"])]
                    else:
                        with pytest.raises(blobpad.InvalidArgument, match=f"{field} is .*the limit is {LIMIT} bytes"):
                            store.put("x", **kwargs)
        for session, name in ((_text(250, "é"), _text(260, "€")), (_text(100, "a"), _text(420, "😀"))):
            with pytest.raises(blobpad.InvalidArgument, match=f"the limit is {LIMIT} bytes"):
                store.put("x", session=session, name=name)
            with pytest.raises(blobpad.InvalidArgument, match=f"the limit is {LIMIT} bytes"):
                store.find(name, session=session)


# -- a model's patterns hold no memory once their calls end ------------------------------------------------

_PATTERN_MEMORY = r"""
import ctypes, os, blobpad

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20

store = blobpad.open("memory://")
e = store.put("".join(f"line {n} alpha{n % 7} beta {n * 13 % 97} gamma\n" for n in range(60000)), session="s", turn=1)
tb = blobpad.Toolbox(store, session="s", turn=1)
trim = ctypes.CDLL("libc.so.6").malloc_trim
trim(0)
base = rss_mb()
import re2
for k in range(6):  # distinct patterns of large programs (each just under the size refused, search._PROBE_MEM)
    pattern = r"\pL{%d}\pN{3}\pL{3}" % (44 + k)
    store.count(e.id, pattern)
    out = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": pattern})
    assert out["ok"], out
trim(0)  # what the allocator keeps for reuse is not held by anything
print(re2._Regexp._make.cache_info().currsize, rss_mb() - base)
"""


def test_the_patterns_a_model_sends_hold_no_memory_after_their_calls():
    """A regex's automata can take tens of MB (RE2's max_mem per pattern); google-re2 kept the
    last 128 patterns compiled in the process, so a model sending distinct hostile patterns grew
    the process by that much per pattern, for good (6 patterns of programs of millions of instructions:
    about 80 MB; such programs are refused now, search._PROBE_MEM).  Compiled patterns of large programs
    now live as long as their call: google-re2's cache holds none of them afterwards, and what is left
    is a few MB."""
    out = subprocess.run([sys.executable, "-c", _PATTERN_MEMORY], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    cached, grown = map(int, out.stdout.split()[-2:])
    assert cached == 0 and grown < 40, out.stdout
