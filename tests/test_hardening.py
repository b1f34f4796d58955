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
from pathlib import Path

import pytest

import blobpad
from blobpad import Toolbox

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


def _cli(args: list[str], umask: int, env: dict[str, str] | None = None, stdin: bytes = b"") -> str:
    run_env = {**(os.environ if env is None else env), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-m", "blobpad", *args], input=stdin, capture_output=True,
                         env=run_env, preexec_fn=lambda: os.umask(umask), check=True)
    return out.stdout.decode()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000, 0o077, 0o277], ids=lambda m: f"umask-{m:03o}")
def test_a_new_store_is_private_whatever_the_umask(tmp_path, umask):
    db = tmp_path / "x"
    eid = json.loads(_cli(["--db", str(db), "put", "-", "--session", "s"], umask, stdin=SECRET.encode()))["id"]
    assert _modes(db) == PRIVATE
    # and it still works: a second process (same umask) opens it, reads and writes
    assert _cli(["--db", str(db), "read", eid, "--full"], umask) == SECRET
    _cli(["--db", str(db), "put", "-", "--session", "s"], umask, stdin=b"more")
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
