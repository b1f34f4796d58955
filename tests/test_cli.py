"""The ``blobpad`` command (issue 6), run as a real subprocess against real stores.

Every test runs the installed entry point (or ``python -m blobpad``) with ``--db`` in
a temporary directory.  The oracles are the original bytes sliced by Python,
``sed -n`` for line windows, ``rg -n`` for grep (skipped where ripgrep is absent),
``hashlib`` and ``re``.  Subprocesses cost ~0.3 s each, so checks are grouped.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import io
import json
import math
import os
import pathlib
import pty
import random
import re
import select
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import blobpad
from blobpad import sample

_BIN = pathlib.Path(sys.executable).with_name("blobpad")
BLOBPAD = str(_BIN) if _BIN.exists() else (shutil.which("blobpad") or "blobpad")
ID_RE = re.compile(r"[0-9a-f]{16}")
ERROR_RE = re.compile(rb"blobpad: error: [^\n]+\n")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("BLOBPAD_DIR", None)
    env.update(extra)
    return env


def bp(*args: str, db: pathlib.Path | str | None = None, input: bytes | None = None,
       env: dict[str, str] | None = None, cmd: list[str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the blobpad command; ``db`` goes before the subcommand as ``--db``."""
    argv = list(cmd or [BLOBPAD])
    if db is not None:
        argv += ["--db", str(db)]
    argv += list(args)
    return subprocess.run(argv, input=input, capture_output=True, env=env or _env(), timeout=120)


def bp_many(runs: list[list[str]], db: pathlib.Path | str | None = None) -> list[subprocess.CompletedProcess[bytes]]:
    """Run independent read-only commands a few at a time (most of a run is interpreter start-up)."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda args: bp(*args, db=db, input=b""), runs))


def ok(proc: subprocess.CompletedProcess[bytes]) -> bytes:
    """stdout of a run that must succeed silently on stderr."""
    assert proc.returncode == 0, (proc.args, proc.returncode, proc.stderr)
    assert proc.stderr == b"", proc.stderr
    return proc.stdout


def assert_error(proc: subprocess.CompletedProcess[bytes], code: int, *words: str) -> str:
    """The run failed with ``code`` and exactly one error line on stderr, no traceback."""
    assert proc.returncode == code, (proc.args, proc.returncode, proc.stdout, proc.stderr)
    assert ERROR_RE.fullmatch(proc.stderr), proc.stderr
    assert b"Traceback" not in proc.stderr
    message = proc.stderr.decode()
    for w in words:
        assert w in message, (w, message)
    return message


# -- oracles ------------------------------------------------------------------------------


def oracle_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def oracle_summary(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"[BINARY: {len(data)} bytes, sha256={hashlib.sha256(data).hexdigest()}]"
    if len(text) <= 1000:
        return text
    return text[:500] + f"\n[... {len(text) - 1000} characters omitted ...]\n" + text[-500:]


def sed(path: pathlib.Path, script: str) -> bytes:
    return subprocess.run(["sed", "-n", script, str(path)], capture_output=True, check=True,
                          env=_env(LC_ALL="C")).stdout


# -- shared content: a store holding a log, multi-byte text, CRLF text and binary ---------


@functools.cache
def _contents() -> dict[str, bytes]:
    log = sample.log_text(1 << 20, seed=7) + "2023-11-15T00:00:00.000 ERROR [kernel] last line without newline: disk quota"
    return {
        "log": log.encode(),  # ~11 chunks, last line unterminated
        "mb": sample.multibyte_text(300_000, seed=3).encode(),
        "crlf": b"alpha\r\nbeta b\r\n\r\ngamma b\r\nlast\r",
        "bin": sample.binary_blob(300_000, seed=5),
        # not UTF-8, but no NUL either: rg prints its lines' bytes as they are
        "latin1": b"".join(
            (f"{i} caf\xe9 ERROR na\xefve \xff\xfe".encode("latin-1") if i % 3 else f"{i} plain ERROR ok".encode())
            + (b"\r\n" if i % 5 == 0 else b"\n") for i in range(200)
        ),
    }


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store with every content put through the CLI: {"db", "files", "ids", "puts", "times"}."""
    root = tmp_path_factory.mktemp("cli")
    db = root / "db"
    files, ids, puts, times = {}, {}, {}, {}
    for key, data in _contents().items():
        path = root / f"{key}.dat"
        path.write_bytes(data)
        t0 = time.time()
        out = ok(bp("put", str(path), db=db))
        times[key] = (t0, time.time())
        files[key] = path
        puts[key] = json.loads(out)
        ids[key] = puts[key]["id"]
        assert out.count(b"\n") == 1  # one JSON object on one line
    return {"db": db, "files": files, "ids": ids, "puts": puts, "times": times}


def test_put_prints_the_entry_with_its_summary(loaded):
    for key, data in _contents().items():
        put = loaded["puts"][key]
        assert set(put) == {"id", "size_bytes", "kind", "lines", "chars", "expires_at", "summary"}
        assert ID_RE.fullmatch(put["id"])
        is_text = key not in ("bin", "latin1")
        assert put["kind"] == ("text" if is_text else "binary")
        assert put["size_bytes"] == len(data)
        assert put["lines"] == oracle_lines(data)
        assert put["chars"] == (len(data.decode()) if is_text else None)
        assert put["summary"] == oracle_summary(data)
        t0, t1 = loaded["times"][key]
        assert t0 + 3600 <= put["expires_at"] <= t1 + 3600  # the library's default TTL
    assert "characters omitted" in loaded["puts"]["log"]["summary"]
    assert loaded["puts"]["bin"]["summary"].startswith("[BINARY: 300000 bytes, sha256=")


def test_read_modes_equal_python_slicing(loaded):
    db, ids = loaded["db"], loaded["ids"]
    log, mb, blob = (_contents()[k] for k in ("log", "mb", "bin"))
    mb_text = mb.decode()
    cases = [
        ("log", ["--full"], log),
        ("log", ["--head", "1000"], log[:1000]),
        ("log", ["--tail", "777"], log[-777:]),
        ("log", ["--range", "123456:654321"], log[123456:654321]),
        ("log", ["--range=-300:"], log[-300:]),
        ("log", ["--range", ":50"], log[:50]),
        ("log", ["--range", "5:5"], b""),
        ("log", ["--bytes", "999990:1000010"], log[999990:1000010]),
        ("mb", ["--full"], mb),
        ("mb", ["--head", "5000"], mb_text[:5000].encode()),
        ("mb", ["--tail", "5000"], mb_text[-5000:].encode()),
        ("mb", ["--range", "100000:100500"], mb_text[100000:100500].encode()),
        ("mb", ["--bytes", "101:102"], mb[101:102]),  # may cut a character: bytes as they are
        ("bin", ["--full"], blob),
        ("bin", ["--head", "4096"], blob[:4096]),
        ("bin", ["--tail", "10"], blob[-10:]),
        ("bin", ["--range", "1000:2000"], blob[1000:2000]),
        ("bin", ["--bytes=-5:"], blob[-5:]),
        ("mb", ["--head", "99999999999999999999"], mb),  # past any content: clamps, as slicing and head -c do
        ("bin", ["--tail", "99999999999999999999"], blob),
        ("log", ["--range=-99999999999999999999:99999999999999999999"], log),
    ]
    procs = bp_many([["read", ids[key], *mode] for key, mode, _ in cases], db=db)
    for (key, mode, expected), proc in zip(cases, procs, strict=True):
        assert ok(proc) == expected, (key, mode)


def test_read_lines_matches_sed(loaded):
    if not shutil.which("sed"):
        pytest.skip("sed is not installed")
    db, ids, files = loaded["db"], loaded["ids"], loaded["files"]
    n = loaded["puts"]["log"]["lines"]
    cases = {
        "log": [("1:1", "1,1p"), ("1:5", "1,5p"), ("5000:5020", "5000,5020p"), (f"{n - 3}:{n + 10}", f"{n - 3},{n + 10}p"),
                (str(n), f"{n}p"), ("10", "10p"), (f"{n + 5}:{n + 9}", f"{n + 5},{n + 9}p"), (":3", "1,3p"),
                (f"{n - 2}:", f"{n - 2},$p")],
        "mb": [("100:200", "100,200p"), ("1:2", "1,2p"), ("1:99999999999999999999", "1,99999999999999999999p")],
        "crlf": [("1:2", "1,2p"), ("3:5", "3,5p"), ("5", "5p"), ("99999999999999999999", "99999999999999999999p")],
        "bin": [("1:3", "1,3p"), ("5:9", "5,9p"), ("200:", "200,$p")],
    }
    flat = [(key, spec, script) for key, windows in cases.items() for spec, script in windows]
    procs = bp_many([["read", ids[key], "--lines", spec] for key, spec, _ in flat], db=db)
    for (key, spec, script), proc in zip(flat, procs, strict=True):
        assert ok(proc) == sed(files[key], script), (key, spec)
    assert sed(files["log"], f"{n}p").endswith(b"disk quota")  # the oracle really covers the unterminated line


def _lines_with_ends(data: bytes) -> list[bytes]:
    """The lines of ``data`` as sed sees them: split after each \\n (a \\r stays in its line)."""
    return re.findall(rb"[^\n]*\n|[^\n]+$", data)


def test_read_lines_follows_sed_when_the_last_line_is_before_the_first(loaded):
    if not shutil.which("sed"):
        pytest.skip("sed is not installed")
    db, ids, files = loaded["db"], loaded["ids"], loaded["files"]
    n = {key: put["lines"] for key, put in loaded["puts"].items()}
    cases = [(key, spec, script) for key in ("log", "crlf", "bin") for spec, script in (
        ("5:4", "5,4p"), ("3:1", "3,1p"), ("2:2", "2,2p"), (f"{n[key]}:1", f"{n[key]},1p"),
        (f"{n[key] + 1}:1", f"{n[key] + 1},1p"), ("4:3", "4,3p"),
    )]
    procs = bp_many([["read", ids[key], "--lines", spec] for key, spec, _ in cases], db=db)
    for (key, spec, script), proc in zip(cases, procs, strict=True):
        assert ok(proc) == sed(files[key], script), (key, spec)
    assert sed(files["log"], "5,4p") != b""  # the oracle prints line 5: the case is not vacuous


def test_read_lines_negative_numbers_count_from_the_end_like_slicing(loaded):
    db, ids = loaded["db"], loaded["ids"]
    specs = {  # --lines A:B (1-based, inclusive, negatives from the end) -> the Python slice of the lines
        "-1": lambda ls: ls[-1:], "-3:-1": lambda ls: ls[-3:], "-100:-1": lambda ls: ls[-100:],
        "-100:": lambda ls: ls[-100:], "-5:-3": lambda ls: ls[-5:-2], "2:-2": lambda ls: ls[1:-1],
        ":-2": lambda ls: ls[:-1], "-99999999999999999999:": lambda ls: ls,
        "-99999999999999999999:-1": lambda ls: ls, "1:-1": lambda ls: ls,
        "-1:-3": lambda ls: ls[-1:],  # then sed's rule: a last line before the first selects the first alone
    }
    cases = [(key, spec) for key in ("log", "mb", "crlf", "bin") for spec in specs]
    # "--lines -3:-1" as two arguments, as a user types it, and "--lines=-3:-1"
    runs = [["read", ids[key], "--lines", spec] if i % 2 else ["read", ids[key], f"--lines={spec}"]
            for i, (key, spec) in enumerate(cases)]
    for (key, spec), proc in zip(cases, bp_many(runs, db=db), strict=True):
        lines = _lines_with_ends(_contents()[key])
        assert len(lines) == loaded["puts"][key]["lines"]
        assert ok(proc) == b"".join(specs[spec](lines)), (key, spec)
    assert not _contents()["log"].endswith(b"\n")  # covers an unterminated last line, printed as sed prints it


def test_ids_are_accepted_in_either_case(loaded, tmp_path):
    db, eid = loaded["db"], loaded["ids"]["crlf"]
    data = _contents()["crlf"]
    mixed = "".join(c.upper() if i % 2 else c for i, c in enumerate(eid))
    reads = bp_many([["read", eid.upper(), "--full"], ["read", mixed, "--lines", "1:2"], ["stat", eid.upper()],
                     ["grep", mixed, "-c", "b"]], db=db)
    assert ok(reads[0]) == data and ok(reads[1]) == b"".join(_lines_with_ends(data)[:2])
    assert json.loads(ok(reads[2]))["id"] == eid  # ids are written in lowercase
    assert ok(reads[3]) == b"2\n"
    with blobpad.open(db) as store:  # the library and the tools accept them alike
        assert store.get(eid.upper()) == data.decode()
        tb = blobpad.Toolbox(store, session="", turn=None, scope="session")
        assert tb.call("scratchpad_read", {"scratchpad_id": mixed, "mode": "head", "n": 5})["content"] == "alpha"
    other = tmp_path / "db"
    put = json.loads(ok(bp("put", "-", db=other, input=b"x\n")))
    assert ok(bp("rm", put["id"].upper(), db=other)) == b""
    assert json.loads(ok(bp("ls", "--json", db=other))) == []


def test_sizes_are_labelled_in_binary_units_everywhere(tmp_path):
    from blobpad.cli import human_size

    assert human_size(89_177_500) == "85.0 MiB"  # the 89 MB of logs
    assert (human_size(0), human_size(1023), human_size(1024)) == ("0 B", "1023 B", "1.0 KiB")
    assert human_size((1 << 20) - 1) == "1.0 MiB"  # never "1024.0 KiB"
    for n in [1, 999, 1000, 1025, 10**6, 10**9, 1 << 40, 5 * (1 << 50), 2**62]:
        value, unit = human_size(n).split()
        scale = 1024 ** ("B", "KiB", "MiB", "GiB", "TiB", "PiB").index(unit)
        assert abs(float(value) * scale - n) <= 0.05 * scale, n  # the label says how many bytes
        assert unit == "B" or 1 <= float(value) < 1024 or unit == "PiB", n
    db = tmp_path / "db"
    ok(bp("put", "-", db=db, input=b"y" * 1_500_000))
    table = ok(bp("ls", db=db)).decode()
    assert table.splitlines()[1].split()[1:3] == ["1.4", "MiB"]
    assert not re.search(r"\d (KB|MB|GB)\b", table)


def test_ls_never_shows_a_live_entry_with_no_time_left():
    from blobpad.cli import _expires_in

    base = {"id": "0" * 16, "session": "", "turn": None, "step": None, "tool": None, "name": None, "kind": "text",
            "size_bytes": 1, "chars": 1, "lines": 1, "created_at": 0.0, "sha256": ""}
    now = 1_000_000.0
    shown = {}
    for left in [1e-6, 0.2, 0.999, 1.0, 1.5, 59.01, 59.999, 60.0, 61, 3599.5, 3600, 86399, 86400, 10**7]:
        text = _expires_in(blobpad.Entry(**base, expires_at=now + left), now)
        shown[left] = text
        m = re.fullmatch(r"(\d+)s|(\d+)m|(\d+)h(\d\d)m|(\d+)d", text)
        assert m, text
        assert not re.fullmatch(r"0[smhd]|0h00m", text), (left, text)
        if m.group(1):
            assert int(m.group(1)) == math.ceil(left)  # seconds are rounded up: some time is left
    assert (shown[1e-6], shown[0.999], shown[1.5], shown[61]) == ("1s", "1s", "2s", "1m")
    assert _expires_in(blobpad.Entry(**base, expires_at=None), now) == "never"


def test_stats_reports_live_and_expired_entries_apart(tmp_path):
    db = tmp_path / "db"
    live = json.loads(ok(bp("put", "-", db=db, input=b"live entry\n")))
    expired = json.loads(ok(bp("put", "-", "--ttl", "0.001", db=db, input=b"expired at once\n")))
    listed = json.loads(ok(bp("ls", "--json", db=db)))
    assert [e["id"] for e in listed] == [live["id"]]
    stats = json.loads(ok(bp("stats", db=db)))
    assert (stats["entries"], stats["logical_bytes"]) == (len(listed), sum(e["size_bytes"] for e in listed))
    assert (stats["expired_entries"], stats["expired_bytes"]) == (1, expired["size_bytes"])
    assert json.loads(ok(bp("gc", db=db)))["entries"] == 1
    stats = json.loads(ok(bp("stats", db=db)))
    assert (stats["entries"], stats["expired_entries"], stats["expired_bytes"]) == (1, 0, 0)


def test_grep_matches_rg(loaded, rg):
    db, ids, files = loaded["db"], loaded["ids"], loaded["files"]
    cases = [
        ("log", ["-m", "1000", "timed out"]),
        ("log", ["-i", "-m", "50", "error.*QUOTA"]),
        ("log", ["-F", "-m", "1000", "search?q=alpha"]),
        ("log", ["-C", "2", "-m", "1000", "crashed"]),  # overlapping contexts merge, -- between groups
        ("log", ["-A", "3", "-B", "1", "-m", "1000", "disk quota"]),
        ("log", ["-m", "2", "-A", "3", "ERROR"]),  # the last match's trailing context holds a 3rd match (27:)
        ("log", ["-C", "3", "-m", "10", "last line without"]),  # the unterminated last line
        ("log", ["-m", "1000", "^2023-11-14T22:1[0-5]:0[0-3]"]),
        ("log", ["-B", "2", "-m", "5", "^2023-11-14T22:13:20"]),  # context clipped at line 1
        ("log", ["-c", "ERROR"]),
        ("log", ["-c", "-i", "Timed OUT"]),
        ("log", ["no such text anywhere"]),
        ("mb", ["-i", "-C", "1", "-m", "1000", "ОШИБКА café"]),
        ("crlf", ["-A", "1", "b"]),
        # the default form, every matching line whole (Store.matching_lines)
        ("log", ["timed out"]),
        ("log", ["-i", "error.*QUOTA"]),
        ("log", ["-F", "search?q=alpha"]),
        ("log", ["^"]),  # every line, the empty ones and the unterminated last one too
        ("log", ["-i", "last line without"]),
        ("mb", ["-i", "ОШИБКА café"]),
        ("mb", ["."]),
        ("crlf", ["b$"]),  # rg: $ does not match before \r
        ("crlf", ["b"]),
        ("latin1", ["ERROR"]),  # each line's own bytes, as rg prints them (not U+FFFD)
        ("latin1", ["-C", "1", "-m", "1000", "plain"]),
        ("latin1", ["-A", "2", "-m", "20", "ERROR na"]),
    ]
    procs = bp_many([["grep", ids[key], *args] for key, args in cases], db=db)
    for (key, args), mine in zip(cases, procs, strict=True):
        ref = subprocess.run([rg, "-n", *args, str(files[key])], capture_output=True)
        assert mine.returncode == ref.returncode, (key, args, mine.stderr, ref.stderr)
        assert mine.stdout == ref.stdout, (key, args)
        assert b"Traceback" not in mine.stderr
    # the oracle is not vacuous: these cases print matches, contexts and separators
    assert b"\n--\n" in bp("grep", ids["log"], "-C", "2", "-m", "1000", "crashed", db=db).stdout


def test_grep_session_prints_the_bytes_of_lines_that_are_not_utf8_as_rg_does(tmp_path, rg):
    """grep-session prints NAME:N:TEXT like rg -n over files: the entries named as rg names
    the files, the output is rg's byte for byte, invalid UTF-8 included."""
    data = _contents()["latin1"]
    (tmp_path / "f.log").write_bytes(data)
    (tmp_path / "g.log").write_bytes(b"ok ERROR \xe9t\xe9\nnone\n")
    db = tmp_path / "db"
    for name in ("f.log", "g.log"):
        ok(bp("put", str(tmp_path / name), "--session", "s", "--name", name, db=db))
    for args in (["ERROR"], ["-C", "1", "plain"]):
        mine = bp("grep-session", "s", *args, db=db)
        ref = subprocess.run([rg, "-n", "--sort", "path", *args, "f.log", "g.log"], capture_output=True, cwd=tmp_path)
        assert mine.returncode == ref.returncode == 0
        assert mine.stdout == ref.stdout, args
        assert b"\xe9" in mine.stdout


def test_grep_session_prints_each_line_once_where_context_spans_two_pages(tmp_path, rg):
    """grep-session fetches its matches a page at a time (``blobpad.cli._SESSION_PAGE``, 1000):
    the context of a page's last match and of the next page's first overlapped, and those
    lines were printed twice (5,002 lines where rg prints 5,000).  Every line is printed once,
    ``--`` only between lines apart, as rg prints them, in an entry and across entries."""
    from blobpad.cli import _SESSION_PAGE

    rows = [f"line {i} {'hit' if i % 2 == 0 else 'miss'}" for i in range(1, 2 * _SESSION_PAGE + 1100)]
    (tmp_path / "a.log").write_text("\n".join(rows) + "\n")
    (tmp_path / "b.log").write_text("\n".join(rows[:1500]) + "\n")
    (tmp_path / "c.log").write_text("".join(f"x{i}\n" if i % 3 else f"hit {i}\n" for i in range(3100)))
    db = tmp_path / "db"
    for name in ("a.log", "b.log", "c.log"):
        ok(bp("put", str(tmp_path / name), "--session", "s", "--name", name, db=db))
    for args in (["-C", "1"], ["-A", "3"], ["-B", "2"], ["-C", "2", "-m", "1200"], ["-A", "1"]):
        mine = bp("grep-session", "s", *[a.replace("-m", "--max-per-entry") for a in args], "hit", db=db)
        ref = subprocess.run([rg, "-n", "--sort", "path", *args, "hit", "a.log", "b.log", "c.log"],
                             capture_output=True, cwd=tmp_path)
        assert mine.stdout == ref.stdout, args
    # --json: one object, written page by page: the matches of every page of the library's search
    said = json.loads(ok(bp("grep-session", "s", "hit", "-C", "1", "--json", db=db)))
    pages, cursor = [], None
    with blobpad.open(db) as store:
        while True:
            page = store.grep_session("s", "hit", before=1, after=1, max_matches=_SESSION_PAGE, line_window=1 << 60,
                                      cursor=cursor)
            pages += [m.to_dict() for m in page.matches]
            if page.cursor is None:
                break
            cursor = page.cursor
    assert said["matches"] == pages and len(pages) > 2 * _SESSION_PAGE
    assert (said["truncated"], said["timed_out"], said["cursor"]) == (False, False, None)
    assert said["searched_entries"] == 3  # an entry spanning pages is counted once (a.log was counted thrice)


def test_grep_with_context_or_json_prints_page_after_page_as_one_search(tmp_path, rg):
    """``blobpad grep`` with context, ``-m`` or ``--json`` asks for its matches a page at a time
    (``blobpad.cli._GREP_PAGE``), each page searched from the line after the last match (it held
    every match: -C 1 on every line of a 200 MB log took 1.5 GB).  The output is one search's:
    rg's bytes, each line once where contexts meet across pages, and the JSON of the library's
    single grep of every match."""
    from blobpad.cli import _GREP_PAGE

    rows = [f"line {i} {'hit' if i % 2 == 0 or i % 7 == 0 else 'miss'}" for i in range(1, 2 * _GREP_PAGE + 1500)]
    path = tmp_path / "a.log"
    path.write_text("\n".join(rows) + "\n")
    db = tmp_path / "db"
    eid = json.loads(ok(bp("put", str(path), db=db)))["id"]
    for args in (["-C", "1"], ["-A", "3"], ["-B", "2"], ["-C", "2", "-m", "2500"], ["-A", "1", "-m", f"{_GREP_PAGE}"]):
        mine = bp("grep", eid, *args, "hit", db=db)
        ref = subprocess.run([rg, "-n", *args, "hit", str(path)], capture_output=True)
        assert mine.returncode == ref.returncode == 0
        assert mine.stdout == ref.stdout, args
    for run in (bp("grep", "0" * 16, "hit", "--json", "-C", "1", db=db),  # an error before any page: no half object
                bp("grep-session", "", "hit", "--json", "--cursor", "A" * 40, db=db)):
        assert run.returncode in (1, 2) and run.stdout == b"" and run.stderr, run
    with blobpad.open(db) as store:
        for extra in ([], ["-C", "1"], ["-m", "1500"]):
            said = json.loads(ok(bp("grep", eid, "hit", "--json", *extra, db=db)))
            context = 1 if extra[:1] == ["-C"] else 0
            limit = int(extra[1]) if extra[:1] == ["-m"] else 10**6
            whole = store.grep(eid, "hit", before=context, after=context, max_matches=limit, line_window=1 << 60)
            assert said == whole.to_dict(), extra
            assert len(said["matches"]) > _GREP_PAGE


def test_grep_with_context_reads_the_lines_around_the_matches(tmp_path, rg):
    """``-A``/``-B``/``-C`` alone: the matching lines' numbers first, then the lines around them
    read window by window (``blobpad.cli._CONTEXT_WINDOW`` lines at most, a window ending at a
    gap as long).  rg's bytes exactly: dense matches filling many windows (a match whose line a
    window before printed as context stays a match), matches farther apart than a window, the
    first and the last line (without its newline), CRLF lines and a binary entry's own bytes."""
    from blobpad.cli import _CONTEXT_WINDOW

    n = 3 * _CONTEXT_WINDOW + 777
    dense = "".join(f"row {i} {'hit' if i % 5 == 0 or i % 11 == 3 else 'calm'}\n" for i in range(1, n))
    far = {1, 2, _CONTEXT_WINDOW + 5, 3 * _CONTEXT_WINDOW + 9, n}
    sparse = "\n".join(f"row {i} {'hit' if i in far else 'calm'}" for i in range(1, n + 1))  # no final newline
    crlf = "".join(f"{'hit' if i % 3 == 0 else 'calm'} {i}\r\n" for i in range(1, 3000))
    binary = b"".join(b"%s %d \xff\xfe\x00 %s\n" % (b"hit" if i % 4 == 0 else b"calm", i, b"\x80" * (i % 3))
                      for i in range(1, 5000))
    db = tmp_path / "db"
    for name, content in (("dense", dense.encode()), ("sparse", sparse.encode()), ("crlf", crlf.encode()),
                          ("binary", binary)):
        path = tmp_path / f"{name}.log"
        path.write_bytes(content)
        eid = json.loads(ok(bp("put", str(path), db=db)))["id"]
        for args in (["-C", "1"], ["-A", "2"], ["-B", "3"], ["-C", "7"], ["-B", "1", "-A", "40"], ["-A", "1000"]):
            for pattern in ("hit", r"hit.*\d$", "no such line"):
                mine = bp("grep", eid, *args, pattern, db=db)
                ref = subprocess.run([rg, "-n", "-a", *args, pattern, str(path)], capture_output=True)
                assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), (name, args, pattern)


def test_grep_pages_print_a_binary_entrys_own_bytes_read_window_by_window(tmp_path, rg):
    """The pages of grep (-m, --json aside) and of grep-session print a binary entry's lines as
    their own bytes, not the U+FFFD the library shows: read ahead for a page, window by window
    (``blobpad.cli._CONTEXT_WINDOW`` lines), where each line was read on its own (two reads a
    line).  rg's bytes, with matches dense, then farther apart than a window."""
    from blobpad.cli import _CONTEXT_WINDOW

    n = 3 * _CONTEXT_WINDOW
    hit = {i for i in range(1, n) if i < 3000 and i % 3 == 0} | {_CONTEXT_WINDOW + 7, 2 * _CONTEXT_WINDOW + 500, n - 1}
    binary = b"".join(b"%s %d \xff\xfe %s\n" % (b"hit" if i in hit else b"calm", i, b"\x80" * (i % 4))
                      for i in range(1, n + 1))
    (tmp_path / "bin.log").write_bytes(binary)
    (tmp_path / "text.log").write_text("".join(f"{'hit' if i % 7 == 0 else 'calm'} {i}\n" for i in range(1, 500)))
    db = tmp_path / "db"
    ids = {name: json.loads(ok(bp("put", str(tmp_path / name), "--session", "s", "--name", name, db=db)))["id"]
           for name in ("bin.log", "text.log")}
    for args in (["-m", "5000"], ["-m", "5000", "-C", "2"]):
        mine = bp("grep", ids["bin.log"], *args, "hit", db=db)
        ref = subprocess.run([rg, "-n", "-a", *args, "hit", "bin.log"], capture_output=True, cwd=tmp_path)
        assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), args
    for args in ([], ["-C", "1"], ["-A", "3"]):
        mine = bp("grep-session", "s", *args, "hit", db=db)
        ref = subprocess.run([rg, "-n", "-a", "--sort", "path", *args, "hit", "bin.log", "text.log"],
                             capture_output=True, cwd=tmp_path)
        assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), args


def test_lines_no_match_prints_are_skipped_not_held(tmp_path, rg, capsysbinary, monkeypatch):
    """A window of lines to print whose bytes pass ``blobpad.cli._WINDOW_BYTES`` (long lines
    between two matches: ten 40 MB lines took 844 MB) is read line by line, the lines between
    skipped a piece at a time; so are the binary lines a page reads ahead.  Shrunk here so a
    test-sized entry takes that path: rg's bytes still, for grep with context and -m, and
    grep-session, text and binary."""
    import blobpad.cli

    monkeypatch.setattr(blobpad.cli, "_WINDOW_BYTES", 4096)
    long = "y" * 50_000
    text = "".join(f"{'hit' if i % 9 in (0, 1) else long} {i}\n" for i in range(1, 120)) + "hit last"
    binary = b"".join(b"%s %d \xff\n" % (b"hit" if i % 9 in (0, 1) else long.encode(), i) for i in range(1, 120))
    db = tmp_path / "db"
    for name, content in (("text.log", text.encode()), ("bin.log", binary)):
        (tmp_path / name).write_bytes(content)
        ok(bp("put", str(tmp_path / name), "--session", "s", "--name", name, db=db))
    with blobpad.open(db) as store:
        ids = {e.name: e.id for e in store.named(session="s")}
    runs = [(["grep", ids[name], *args, "hit"], [*args, "hit", name])
            for name in ("text.log", "bin.log") for args in (["-A", "1"], ["-C", "2"], ["-B", "3", "-m", "20"])]
    runs += [(["grep-session", "s", *args, "hit"], ["--sort", "path", *args, "hit", "bin.log", "text.log"])
             for args in ([], ["-C", "1"])]
    for mine_args, rg_args in runs:
        rc = blobpad.cli.main(["--db", str(db), *mine_args])
        out, _ = capsysbinary.readouterr()
        ref = subprocess.run([rg, "-n", "-a", *rg_args], capture_output=True, cwd=tmp_path)
        assert (rc, out) == (ref.returncode, ref.stdout), mine_args


def test_grep_that_times_out_between_pages_says_timed_out_not_truncated(tmp_path):
    """A budget that runs out between two pages (here while the first page waits for a reader
    of the output that is 3 s late) ends the command as timed out: exit 3, the timeout said,
    and no "more exist (raise -m)" where no -m was given (the full page's own truncation was
    reported); with --json, ``"truncated": false`` beside ``"timed_out": true``."""
    path = tmp_path / "a.log"
    path.write_text("".join(f"hit {i:05d} {'x' * 200}\n" for i in range(1, 5001)))
    db = tmp_path / "db"
    eid = json.loads(ok(bp("put", str(path), db=db)))["id"]
    # (-A alone searches first and prints after: test_grep_with_context_reads_the_lines_around_the_matches)
    for extra in (["-A", "1", "--max-columns", "1000"], ["--json"]):
        proc = subprocess.Popen([BLOBPAD, "--db", str(db), "grep", eid, *extra, "--timeout", "1", "hit"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            time.sleep(3)  # the first page (over 200 KB) fills the pipe: the budget runs out meanwhile
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 3 and b"timed out after 1 s" in err and b"raise -m" not in err, err
        if extra == ["--json"]:
            said = json.loads(out)
            assert (said["truncated"], said["timed_out"]) == (False, True)
            assert said["searched_lines"] == said["matches"][-1]["line"]


def test_grep_that_times_out_prints_the_start_of_the_whole_output(tmp_path, rg):
    """Where the budget runs out, the last match's trailing context may hold lines that match
    (past the lines searched): they were printed as context (``N-``) where the whole output, and
    rg, print them as matches (``N:``).  What a search that timed out prints is now the start of
    what the whole search prints."""
    rand = random.Random(1)
    path = tmp_path / "a.log"
    path.write_text("".join(f"{i:06d} " + "".join(rand.choice("abcdefghij0123456789 ") for _ in range(80)) + "\n"
                            for i in range(1, 60_001)))
    db = tmp_path / "db"
    eid = json.loads(ok(bp("put", str(path), db=db)))["id"]
    pattern = ".*[0-9].{30}$"  # every line matches; RE2's DFA cannot hold it: a few hundred KB a second
    whole = bp("grep", eid, "-A", "3", "--timeout", "0", pattern, db=db)
    assert whole.returncode == 0 and whole.stdout == subprocess.run([rg, "-n", "-A", "3", pattern, str(path)],
                                                                    capture_output=True).stdout
    for budget in ("0.1", "0.3"):
        part = bp("grep", eid, "-A", "3", "--timeout", budget, pattern, db=db)
        assert part.returncode == 3 and part.stdout, part.stderr
        assert whole.stdout.startswith(part.stdout), budget


def test_grep_session_prints_a_match_past_its_limit_in_the_context_as_a_match(tmp_path, rg):
    """With --max-per-entry (rg's -m over files), a later match inside the last match's trailing
    context is printed NAME:N:, as rg prints it; it was printed as a context line."""
    (tmp_path / "a.txt").write_bytes(b"a ERROR\nb ok\nc ERROR\nd ok\ne ERROR\n")
    (tmp_path / "b.txt").write_bytes(b"x\nERROR one\nERROR two\ny\n")
    db = tmp_path / "db"
    for name in ("a.txt", "b.txt"):
        ok(bp("put", str(tmp_path / name), "--session", "q", "--name", name, db=db))
    for cap in ("1", "2"):
        mine = bp("grep-session", "q", "ERROR", "--max-per-entry", cap, "-A", "3", db=db)
        ref = subprocess.run([rg, "-n", "--sort", "path", "-m", cap, "-A", "3", "ERROR", "a.txt", "b.txt"],
                             capture_output=True, cwd=tmp_path)
        assert mine.stdout == ref.stdout, (cap, mine.stdout, ref.stdout)
    assert b"a.txt:3:c ERROR" in mine.stdout


def test_grep_session_shows_a_name_that_holds_a_line_break_or_an_escape_escaped(tmp_path):
    """Entry names are caller-chosen (a model's): grep-session printed them raw, so a name holding a
    line break forged a match line and a terminal escape reached the terminal; each is now shown
    escaped, as ls shows it, and the match line stays one line."""
    db = tmp_path / "db"
    forged = "notes\nprod-db.log:1:password=hunter2 \x1b[2K"
    with blobpad.open(db) as store:
        store.put("harmless ERROR\n", session="s", name=forged)
    out = ok(bp("grep-session", "s", "ERROR", db=db)).decode()
    assert out.count("\n") == 1 and "\x1b" not in out
    assert out == "notes\\nprod-db.log:1:password=hunter2 \\x1b[2K:1:harmless ERROR\n"
    assert "\\x1b[2K" in ok(bp("ls", "--session", "s", db=db)).decode()  # as ls shows it


def test_put_with_nowhere_to_print_the_id_stores_nothing_or_names_what_it_stored(tmp_path):
    """put stored the content and then failed on its stdout, so the caller got exit 2 and never the
    id of an entry that lived on until its TTL.  A closed stdout is now refused before anything is
    stored; a stdout that fails on writing (a full disk: /dev/full) gets exit 2 with the id named."""
    db = tmp_path / "db"
    src = tmp_path / "f.log"
    src.write_bytes(b"kept\n")
    closed = subprocess.run([BLOBPAD, "--db", str(db), "put", str(src)], stderr=subprocess.PIPE, env=_env(),
                            timeout=120, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and b"standard output is closed" in closed.stderr
    with blobpad.open(db) as store:
        assert store.entries(limit=None) == []
    if os.path.exists("/dev/full"):
        with open("/dev/full", "wb") as full:
            failed = subprocess.run([BLOBPAD, "--db", str(db), "put", str(src)], stdout=full, stderr=subprocess.PIPE,
                                    env=_env(), timeout=120)
        assert failed.returncode == 2, failed.stderr
        with blobpad.open(db) as store:
            [e] = store.entries(limit=None)
            assert store.get(e.id) == "kept\n"
        assert f"stored as entry {e.id}".encode() in failed.stderr and b"No space left" in failed.stderr


@pytest.mark.parametrize("argv", [["notes", "--session", "s", "set", "after"], ["notes", "--session", "s", "append", "x"],
                                  ["notes", "--session", "s", "plan", "p"], ["notes", "--session", "s", "refs", "add", "r"],
                                  ["gc"], ["compact"]])
def test_a_command_that_changes_the_store_with_nowhere_to_print_changes_nothing(tmp_path, argv):
    """notes, gc and compact made their change, then failed on the closed stdout with exit 2 (which says
    nothing changed); like put, they now refuse before they change anything."""
    db = tmp_path / "db"
    with blobpad.open(db, clock=lambda: 1_700_000_000.0) as store:  # 2023: expired by the real clock
        store.notepad("s").write("before", space="notes")
        gone = store.put("short-lived\n", ttl=1).id
    with blobpad.open(db) as store:  # the real clock: the entry expired long ago, gc() would remove it
        before = (store.notepad("s").spaces(), store.stats().expired_entries)
    closed = subprocess.run([BLOBPAD, "--db", str(db), *argv], stderr=subprocess.PIPE, env=_env(), timeout=120,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and b"standard output is closed" in closed.stderr
    with blobpad.open(db) as store:
        assert (store.notepad("s").spaces(), store.stats().expired_entries) == before
        assert before[1] == 1 and gone


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux): a stdout that fails on write")
@pytest.mark.parametrize("argv", [["ls"], ["stats"], ["read", "ID", "--head", "5"], ["grep", "ID", "line"],
                                  ["grep", "-c", "ID", "line"], ["verify"], ["gc"], ["--help"], ["--version"],
                                  ["grep", "--help"]])
def test_a_stdout_that_fails_on_write_is_one_line_and_exit_2(tmp_path, argv):
    """Every command whose output cannot be written (a full disk: /dev/full) says so in one line
    on stderr and exits 2, as the README's exit statuses say; it exited 120 with the
    interpreter's "Exception ignored ... OSError" after its own line (--help: that alone)."""
    db = tmp_path / "db"
    with blobpad.open(db) as store:
        eid = store.put("".join(f"line {i}\n" for i in range(2000)), session="default").id
    env = _env()
    env.pop("PYTHONUNBUFFERED", None)  # stdout buffered, as a shell starts it (unbuffered, argparse drops --help's error)
    with open("/dev/full", "wb") as full:
        done = subprocess.run([BLOBPAD, "--db", str(db), *[eid if a == "ID" else a for a in argv]], stdout=full,
                              stderr=subprocess.PIPE, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().splitlines() == ["blobpad: error: No space left on device"]


@pytest.mark.parametrize(("argv", "words"), [
    (["put", "-", "--ttl", "３h"], "invalid TTL"), (["put", "-", "--ttl", "٣d"], "invalid TTL"),
    (["put", "-", "--ttl", "1_0"], "invalid TTL"), (["grep", "ID", "x", "--timeout", "３"], "invalid time"),
    (["grep", "ID", "x", "--timeout", " 1_0 "], "invalid time"), (["grep", "ID", "x", "--timeout", "inf"], "invalid time"),
    (["grep", "ID", "x", "--timeout", "nan"], "invalid time"), (["mcp", "--search-timeout", "３"], "invalid time"),
    (["mcp", "--search-timeout", "-1"], "invalid time"), (["grep", "ID", "x", "--timeout", "1e999"], "invalid time"),
    (["grep", "ID", "x", "-C", "1001"], "at most 1000 context lines"), (["grep", "ID", "x", "-A", "２"], "invalid number"),
    (["grep-session", "default", "x", "--max-per-entry", "0"], "use a positive integer"),
    (["read", "ID", "--range", "1:" + "x" * 100_000], "invalid --range"),
    (["read", "ID", "--bytes", "1:" + "x" * 100_000], "invalid --bytes"),
    (["read", "ID", "--lines", "1:" + "x" * 100_000], "invalid --lines"),
    (["grep", "ID", "x", "--timeout", "x" * 100_000], "invalid time"),
    (["put", "-", "--ttl", "x" * 100_000], "invalid TTL"), (["put", "-", "--meta", "x" * 100_000], "invalid --meta"),
])
def test_numbers_on_the_command_line_are_ascii_and_bad_ones_are_quoted_short(tmp_path, argv, words):
    """Every number an option takes is written in ASCII digits, as -m and --head already were
    (--ttl took '３h' for three hours, --timeout ' 1_0 ' for ten seconds), and an option
    refused is quoted in at most about a hundred characters (a 100,000-character one came back
    whole on stderr)."""
    db = tmp_path / "db"
    with blobpad.open(db) as store:
        eid = store.put("x\n", session="default").id
    done = bp(*[eid if a == "ID" else a for a in argv], db=db, input=b"data\n")
    assert done.returncode == 2 and words in done.stderr.decode(), done.stderr[:300]
    assert len(done.stderr) < 600
    with blobpad.open(db) as store:
        assert len(store.entries(limit=None)) == 1  # nothing was put


def test_a_turn_is_an_integer_as_far_as_the_library_takes_one(tmp_path):
    """--turn 1000000000000000000 (19 digits) is the integer turn the library stores for
    turn=10**18, so ls --turn finds the entries of both; past the library's limit (2**62) a
    turn is its text, as are non-canonical spellings."""
    db = tmp_path / "db"
    with blobpad.open(db) as store:
        lib = store.put("lib\n", session="s", turn=10**18).id
    for turn in ("1000000000000000000", str(1 << 62), str(-(1 << 62)), str((1 << 62) + 1), "007", "1_0"):
        assert bp("put", "-", "--session", "s", "--turn", turn, db=db, input=b"x\n").returncode == 0
    with blobpad.open(db) as store:
        turns = [e.turn for e in store.entries(session="s", limit=None)]
    assert turns == [10**18, 10**18, 1 << 62, -(1 << 62), str((1 << 62) + 1), "007", "1_0"]
    listed = bp("ls", "--session", "s", "--turn", "1000000000000000000", "--json", db=db)
    assert lib in listed.stdout.decode() and len(json.loads(listed.stdout)) == 2


def test_rough_edges_of_the_command_line(tmp_path):
    """A closed stdout, an empty file name and the default session's notepad: each a clear
    answer (they were an internal error, a directory, and a refusal)."""
    db = tmp_path / "db"
    eid = json.loads(ok(bp("put", "-", db=db, input=b"hello\n")))["id"]
    closed = subprocess.run([BLOBPAD, "--db", str(db), "read", eid, "--full"], capture_output=False,
                            stdout=None, stderr=subprocess.PIPE, env=_env(), timeout=120,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and b"standard output is closed" in closed.stderr
    assert b"internal error" not in closed.stderr
    empty = bp("put", "", db=db)
    assert empty.returncode == 2 and b"the file name is empty" in empty.stderr
    ok(bp("notes", "--session", "", "set", "the default session's notes", db=db))
    shown = ok(bp("notes", "--session", "", "show", "--json", db=db))
    assert json.loads(shown)["notes"] == "the default session's notes"
    with blobpad.open(db) as store:
        assert store.notepad("").read("notes") == "the default session's notes"
    assert bp("notes", "show", db=db).returncode == 2  # no --session at all: still required
    ok(bp("put", "-", "--session", "s", "--name", "n", db=db, input=b"first\n"))
    taken = bp("put", "-", "--session", "s", "--name", "n", "--exclusive", db=db, input=b"second\n")
    assert taken.returncode == 2 and b"already has an entry named 'n'" in taken.stderr
    assert b"without --exclusive" in taken.stderr and b"exclusive=True" not in taken.stderr  # the shell's words
    nameless = bp("put", "-", "--session", "s", "--exclusive", db=db, input=b"third\n")
    assert nameless.returncode == 2 and b"pass --name with --exclusive" in nameless.stderr
    assert b"exclusive=True" not in nameless.stderr
    with blobpad.open(db) as store:
        assert store.get(store.find("n", session="s").id) == "first\n"


def test_grep_json_count_and_limits_against_re(loaded):
    db, eid = loaded["db"], loaded["ids"]["log"]
    lines = _contents()["log"].decode().split("\n")
    pattern = r"timed out after (\d+)ms"
    hits = [i + 1 for i, line in enumerate(lines) if re.search(pattern, line)]
    assert len(hits) > 40

    res = json.loads(ok(bp("grep", eid, pattern, "--json", "-m", "40", "-A", "1", db=db)))
    assert res["truncated"] is True
    assert [m["line"] for m in res["matches"]] == hits[:40]
    for m in res["matches"]:
        assert m["text"] == lines[m["line"] - 1]
        assert [m["text"][s:e] for s, e in m["spans"]] == [x.group(0) for x in re.finditer(pattern, m["text"])]
        assert m["after"] == [[m["line"] + 1, lines[m["line"]]]]

    assert json.loads(ok(bp("grep", eid, "-c", "--json", pattern, db=db))) == {"count": len(hits)}
    assert ok(bp("grep", eid, "-c", "-m", "5", pattern, db=db)) == b"5\n"

    # by default every matching line is printed, as rg prints them; -m cuts, announced on stderr (stdout stays rg-like)
    every = [i + 1 for i, line in enumerate(lines) if "ERROR" in line]
    assert len(every) > 100
    default = ok(bp("grep", eid, "ERROR", db=db))
    assert [int(row.split(b":", 1)[0]) for row in default.splitlines()] == every
    capped = bp("grep", eid, "ERROR", "-m", "100", db=db)
    assert capped.returncode == 0
    assert capped.stdout.count(b"\n") == 100
    assert capped.stderr == b"blobpad: stopped after 100 matching lines; more exist (raise -m)\n"

    none = bp("grep", eid, "-c", "zzz-no-such", db=db)
    assert (none.returncode, none.stdout, none.stderr) == (1, b"0\n", b"")
    none = bp("grep", eid, "zzz-no-such", "--json", db=db)
    none_json = json.loads(none.stdout)
    assert none.returncode == 1 and (none_json["matches"], none_json["truncated"]) == ([], False)


def test_grep_max_columns_windows_long_lines(tmp_path):
    db = tmp_path / "db"
    line = "x" * 10_000 + "NEEDLE" + "y" * 10_000
    eid = json.loads(ok(bp("put", "-", db=db, input=f"short\n{line}\n".encode())))["id"]
    assert ok(bp("grep", eid, "NEEDLE", db=db)) == f"2:{line}\n".encode()  # whole lines by default, like rg
    out = ok(bp("grep", eid, "NEEDLE", "-M", "100", db=db)).decode()
    text = out.removeprefix("2:").removesuffix("\n")
    assert len(text) == 100 and "NEEDLE" in text and text in line


def test_stdin_put_text_and_binary(tmp_path):
    db = tmp_path / "db"
    text = "día 1: naïve café\nzweite Zeile 🙂\nno newline at the end".encode()
    put = json.loads(ok(bp("put", "-", "--session", "s", db=db, input=text)))
    assert (put["kind"], put["size_bytes"], put["lines"], put["chars"]) == ("text", len(text), 3, len(text.decode()))
    assert put["summary"] == text.decode()
    assert ok(bp("read", put["id"], "--full", db=db)) == text

    blob = bytes(range(256)) * 40 + b"\xff\xfe\n"
    put = json.loads(ok(bp("put", "-", db=db, input=blob)))
    assert put["kind"] == "binary" and put["chars"] is None
    assert put["summary"] == f"[BINARY: {len(blob)} bytes, sha256={hashlib.sha256(blob).hexdigest()}]"
    assert ok(bp("read", put["id"], "--full", db=db)) == blob

    empty = json.loads(ok(bp("put", "-", db=db, input=b"")))
    assert (empty["size_bytes"], empty["lines"], empty["summary"]) == (0, 0, "")
    assert ok(bp("read", empty["id"], "--full", db=db)) == b""


def test_ls_stat_rm_gc_stats_compact_verify(tmp_path):
    db = tmp_path / "db"
    src = tmp_path / "obs.txt"
    src.write_bytes(b"line one\nline two\n")

    def put(*args: str, data: bytes | None = None) -> dict[str, Any]:
        return json.loads(ok(bp("put", "-" if data is not None else str(src), *args, db=db, input=data)))

    a = put("--session", "s1", "--turn", "1", "--name", "n1", "--tool", "fs_read", "--meta", "k=v", "--meta", "x=y=z")
    b = put("--session", "s1", "--turn", "2", data=b"bee\n")
    c = put("--session", "s2", "--ttl", "never", data=b"sea\n")
    d = put("--turn", "7", "--ttl", "2h", data=b"dee\n")
    e = put("--ttl", "0.001", data=b"expires at once\n")  # expired before the next command starts
    assert e["summary"] in ("expires at once\n", None)  # null when it expired before being read back
    assert c["expires_at"] is None
    assert d["expires_at"] - time.time() == pytest.approx(7200, abs=60)

    def ls(*args: str) -> list[str]:
        return [x["id"] for x in json.loads(ok(bp("ls", "--json", *args, db=db)))]

    queries = [[], ["--session", "s1"], ["--session", "s1", "--turn", "2"], ["--turn", "7"], ["--session", "nobody"]]
    *listed, table_run, stat_run = bp_many([*(["ls", "--json", *q] for q in queries), ["ls"], ["stat", a["id"]]], db=db)
    assert [[x["id"] for x in json.loads(ok(p))] for p in listed] == [
        [a["id"], b["id"], c["id"], d["id"]], [a["id"], b["id"]], [b["id"]],
        [d["id"]],  # --turn alone: the default session
        [],
    ]
    table = ok(table_run).decode().splitlines()
    assert table[0].split() == ["ID", "SIZE", "LINES", "KIND", "CREATED", "EXPIRES", "SESSION", "TURN", "NAME", "TOOL"]
    assert [row.split()[0] for row in table[1:]] == [a["id"], b["id"], c["id"], d["id"]]
    assert table[1].split()[-4:] == ["s1", "1", "n1", "fs_read"]

    st = json.loads(ok(stat_run))
    # a whole-number turn is the integer, as a runtime calling the library with turn=1 stores it
    assert (st["session"], st["turn"], st["name"], st["tool"]) == ("s1", 1, "n1", "fs_read")
    assert st["meta"] == {"k": "v", "x": "y=z"}
    assert (st["size_bytes"], st["lines"], st["sha256"]) == (18, 2, hashlib.sha256(src.read_bytes()).hexdigest())

    a2 = put("--session", "s1", "--name", "n1", data=b"replacement\n")  # same name: replaces a
    assert_error(bp("stat", a["id"], db=db), 1, a["id"])
    assert ok(bp("read", a2["id"], "--full", db=db)) == b"replacement\n"

    assert ok(bp("rm", b["id"], db=db)) == b""
    assert_error(bp("stat", b["id"], db=db), 1)
    assert_error(bp("rm", b["id"], db=db), 1, b["id"])
    assert ok(bp("rm", c["id"], d["id"], "--db", str(db))) == b""  # --db after the subcommand works too
    assert ls() == [a2["id"]]

    gc = json.loads(ok(bp("gc", db=db)))
    assert gc["entries"] == 1  # e, expired
    assert_error(bp("stat", e["id"], db=db), 1)
    stats = json.loads(ok(bp("stats", db=db)))
    assert (stats["entries"], stats["logical_bytes"], stats["path"]) == (1, len(b"replacement\n"), str(db))
    verify = json.loads(ok(bp("verify", db=db)))
    assert verify["ok"] is True and verify["entries"] == 1
    compact = json.loads(ok(bp("compact", db=db)))
    assert 0 < compact["bytes_after"] <= compact["bytes_before"]
    assert ok(bp("read", a2["id"], "--full", db=db)) == b"replacement\n"


def test_turns_mean_the_same_in_the_cli_and_the_library(tmp_path):
    db = tmp_path / "db"
    ids = {t: json.loads(ok(bp("put", "-", "--session", "s", "--turn", t, db=db, input=t.encode())))["id"]
           for t in ("3", "-1", "03", "t3", "3.0")}
    with blobpad.open(db) as s:
        assert [e.id for e in s.entries(session="s", turn=3)] == [ids["3"]]
        assert [e.id for e in s.entries(session="s", turn=-1)] == [ids["-1"]]
        assert [e.id for e in s.entries(session="s", turn="03")] == [ids["03"]]
        assert [e.id for e in s.entries(session="s", turn="t3")] == [ids["t3"]]
        assert [e.id for e in s.entries(session="s", turn="3.0")] == [ids["3.0"]]
        tb = blobpad.Toolbox(s, session="s", turn=3)
        assert [x["scratchpad_id"] for x in tb.call("scratchpad_list", {})["entries"]] == [ids["3"]]
        lib = s.put("from the library", session="s", turn=3).id
    listed = [x["id"] for x in json.loads(ok(bp("ls", "--json", "--session", "s", "--turn", "3", db=db)))]
    assert listed == [ids["3"], lib]


def test_ls_shows_control_characters_escaped(tmp_path):
    db = tmp_path / "db"
    ok(bp("put", "-", "--session", "a\nb", "--name", "\x1b[31mred", "--tool", "t ool", db=db, input=b"x"))
    out = ok(bp("ls", db=db)).decode()
    assert "\x1b" not in out and len(out.splitlines()) == 2  # the header and one row
    assert out.splitlines()[1].split()[-4:] == ["a\\nb", "-", "\\x1b[31mred", "t\\x20ool"]
    listed = json.loads(ok(bp("ls", "--json", db=db)))  # JSON keeps the values exact
    assert (listed[0]["session"], listed[0]["name"]) == ("a\nb", "\x1b[31mred")


def test_verify_and_read_report_damage(tmp_path):
    db = tmp_path / "db"
    data = sample.log_text(400_000, seed=11).encode()
    eid = json.loads(ok(bp("put", "-", db=db, input=data)))["id"]
    mdb = db / "data.mdb"
    raw = bytearray(mdb.read_bytes())
    at = raw.find(b"\x28\xb5\x2f\xfd")  # a zstd frame: a stored chunk
    assert at > 0
    raw[at + 200] ^= 0xFF
    mdb.write_bytes(bytes(raw))
    proc = bp("verify", db=db)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["ok"] is False and report["damaged_entries"] == [eid]
    assert_error(bp("read", eid, "--full", db=db), 2, "verify")


def test_errors_are_one_line_with_the_right_exit_code(loaded, tmp_path):
    db, eid = loaded["db"], loaded["ids"]["log"]
    missing_id = "0123456789abcdef"
    usage: list[tuple[list[str], str]] = [
        ([], "no command"),
        (["frobnicate"], "invalid choice"),
        (["read", eid], "one of the arguments"),
        (["read", eid, "--head", "5", "--tail", "5"], "not allowed"),
        (["read", eid, "--head", "many"], "many"),
        (["read", eid, "--range", "5"], "A:B"),
        (["read", eid, "--bytes", "a:b"], "A:B"),
        (["read", eid, "--lines", "0:3"], "no line 0"),
        (["read", eid, "--lines", "-3:0"], "no line 0"),
        (["read", eid, "--lines", "a:3"], "A:B"),
        (["put", "-", "--ttl", "40000d"], "pass --ttl never"),  # the library's advice, in the CLI's words
        (["read", "not-an-id", "--full"], "16 lowercase hex"),
        (["put", str(tmp_path / "no-such-file")], "no file"),
        (["put", str(tmp_path)], "directory"),
        (["put", "-", "--ttl", "0"], "TTL"),
        (["put", "-", "--meta", "novalue"], "KEY=VALUE"),
        (["grep", eid, "(unclosed"], "RE2"),
        (["grep", eid, "(?<=look)behind"], "pass -F for a literal"),
        (["grep", eid, "x", "-m", "-1"], "non-negative"),
    ]
    for (_, words), proc in zip(usage, bp_many([args for args, _ in usage], db=db), strict=True):
        assert "()" not in assert_error(proc, 2, words)  # no library call named on the command line
    not_found = [["read", missing_id, "--head", "3"], ["stat", missing_id], ["rm", missing_id], ["grep", missing_id, "x"]]
    for proc in bp_many(not_found, db=db):
        message = assert_error(proc, 1, missing_id, "'blobpad put'", "'blobpad ls'")
        assert "put()" not in message
    # no match is not an error: exit 1, nothing printed at all
    proc = bp("grep", eid, "zzz-no-such", db=db)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, b"", b"")
    # a store path that is a file
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert_error(bp("ls", db=afile), 2)


def test_every_hint_has_command_line_words():
    import blobpad.errors as errors

    hints = {name: value for name, value in vars(errors).items() if isinstance(value, errors.Hint)}
    assert len(hints) >= 8
    for name, hint in hints.items():
        assert hint.cli != hint.library, name
        assert not re.search(r"\w\(\)|fixed=True|ttl=None", hint.cli), (name, hint.cli)  # no library call to type
        err = errors.NotFound("what went wrong", hint=hint)
        assert str(err) == f"what went wrong; {hint.library}" and err.render("cli") == f"what went wrong; {hint.cli}"


def test_a_notepad_too_large_is_refused_in_the_cli_words(tmp_path):
    proc = bp("notes", "--session", "s", "set", "-", db=tmp_path / "db", input=b"x" * (1 << 20 | 1))
    message = assert_error(proc, 2, "1 MiB", "'blobpad put'")
    assert "put()" not in message


def test_a_notepad_text_on_stdin_is_read_no_further_than_a_notepad_takes(tmp_path):
    """200 MB offered on stdin: the command refuses after reading 1 MiB and a byte, so the
    writer meets a closed pipe long before it is done (it reports how much it wrote)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys
            block, sent = b"x" * 65536, 0
            try:
                while sent < 200 << 20:
                    sent += sys.stdout.buffer.write(block)
                sys.stdout.buffer.flush()
            except BrokenPipeError:
                pass
            sys.stderr.write(str(sent))
            sys.stderr.flush()
        """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc = subprocess.run([BLOBPAD, "--db", str(tmp_path / "db"), "notes", "--session", "s", "set", "-"],
                              stdin=writer.stdout, capture_output=True, env=_env(), timeout=120)
        writer.stdout.close()
        sent = int(writer.communicate(timeout=120)[1])
    finally:
        writer.kill()
    assert_error(proc, 2, "over 1048576 bytes", "1 MiB", "'blobpad put'")
    assert sent < 8 << 20, sent  # 1 MiB read, a pipe's buffer or two: never the 200 MB
    with blobpad.open(tmp_path / "db") as store:
        assert store.notepad("s").version("notes") == 0


def test_compact_refuses_while_another_process_has_the_store(tmp_path):
    db = tmp_path / "db"
    ok(bp("put", "-", db=db, input=b"x\n"))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, blobpad; s = blobpad.open(sys.argv[1]); print('open', flush=True); sys.stdin.read()",
         str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
        message = assert_error(bp("compact", db=db), 2, "another process", "'blobpad compact'")
        assert "compact()" not in message
    finally:
        holder.communicate(b"", timeout=60)
    assert json.loads(ok(bp("compact", db=db)))["bytes_after"] > 0


def test_help_on_every_subcommand_has_an_example():
    top = ok(bp("--help")).decode()
    commands = ["put", "read", "grep", "ls", "stat", "rm", "gc", "stats", "compact", "verify", "notes", "mcp", "demo"]
    for name in commands:
        assert re.search(rf"^\s+{name}\s", top, re.M), name
    names = [*commands, "notes set", "notes refs add"]
    for name, proc in zip(names, bp_many([[*name.split(), "--help"] for name in names]), strict=True):
        text = ok(proc).decode()
        assert f"usage: blobpad {name}" in text
        example = text.split("example:\n", 1)[1]
        assert f"blobpad {name.split()[0]}" in example, name


def test_python_dash_m_is_the_same_command(loaded):
    cmd = [sys.executable, "-m", "blobpad"]
    assert ok(bp("--version", cmd=cmd)) == ok(bp("--version"))
    assert ok(bp("--version")).startswith(b"blobpad ")
    db, eid = loaded["db"], loaded["ids"]["log"]
    assert ok(bp("read", eid, "--lines", "3:4", db=db, cmd=cmd)) == ok(bp("read", eid, "--lines", "3:4", db=db))


def test_broken_pipe_is_quiet(loaded):
    db, eid = loaded["db"], loaded["ids"]["log"]
    for args in (["read", eid, "--full"], ["grep", eid, "ERROR", "-m", "100000"]):  # 1 MB, 140 KB
        proc = subprocess.Popen([BLOBPAD, "--db", str(db), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        assert proc.stdout is not None and proc.stderr is not None
        assert len(proc.stdout.read(100)) == 100
        proc.stdout.close()  # like `| head -c 100`: the rest cannot be written
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
        assert err == b"", err


# -- the progress bar ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """33 MB, just over the progress threshold (random, so every put cuts it again)."""
    path = tmp_path_factory.mktemp("big") / "big.bin"
    path.write_bytes(random.Random(1).randbytes(33 << 20))
    return path


def _run_with_tty_stderr(argv: list[str], columns: int = 0) -> tuple[int, bytes, bytes]:
    """Run with stderr on a pseudo-terminal ``columns`` wide (0: a terminal that does not
    say); return (exit code, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=_env())
    finally:
        os.close(slave)
    got = bytearray()
    stdout = b""
    try:
        assert proc.stdout is not None
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: the child closed its end
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            got += chunk
        stdout = proc.stdout.read()
        rc = proc.wait(timeout=60)
    finally:
        os.close(master)
    return rc, stdout, bytes(got)


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, big_file):
    proc = bp("put", str(big_file), db=tmp_path / "db")
    assert ok(proc)  # stderr is a pipe: empty, no bar characters at all
    assert json.loads(proc.stdout)["size_bytes"] == 33 << 20


def test_progress_bar_on_a_terminal(tmp_path, big_file):
    db = tmp_path / "db"
    for columns in (100, 0):
        rc, stdout, tty = _run_with_tty_stderr([BLOBPAD, "--db", str(db), "put", str(big_file)], columns)
        assert rc == 0, tty
        assert json.loads(stdout)["size_bytes"] == 33 << 20  # stdout carries only the JSON
        assert b"put" in tty and b"%|" in tty and b"B/s" in tty, (columns, tty)
    rc, stdout, tty = _run_with_tty_stderr([BLOBPAD, "--db", str(db), "put", str(big_file), "--no-progress"])
    assert rc == 0 and tty == b"" and json.loads(stdout)["size_bytes"] == 33 << 20


# -- notes --------------------------------------------------------------------------------


def test_notes_set_append_plan_refs_and_show(tmp_path):
    db = tmp_path / "db"
    s1 = ["notes", "--session", "s1"]

    def change(*args: str, data: bytes | None = None) -> dict[str, Any]:
        return json.loads(ok(bp(*s1, *args, db=db, input=data)))

    r = change("set", "Root cause: timezone mismatch")
    assert (r["ok"], r["space"], r["used"], r["budget"]) == (True, "notes", 29, 4000)
    change("append", "-", data="Fix: use UTC — everywhere".encode())  # from stdin, UTF-8
    change("plan", "1. Fix auth bug\n2. Add test")
    for ref in ("src/auth/login.ts", "https://example.com/pr/42", "JIRA-7"):
        change("refs", "add", ref)
    r = change("refs", "remove", "JIRA-7")
    assert (r["space"], r["used"]) == ("refs", 2)

    expected = {"notes": "Root cause: timezone mismatch\nFix: use UTC — everywhere", "plan": "1. Fix auth bug\n2. Add test",
                "refs": ["src/auth/login.ts", "https://example.com/pr/42"]}
    assert json.loads(ok(bp(*s1, "show", "--json", db=db))) == expected
    assert ok(bp(*s1, "plan", db=db)).decode() == expected["plan"] + "\n"
    assert ok(bp(*s1, "refs", db=db)).decode().splitlines() == expected["refs"]
    ok(bp("notes", "--session", "s3", "refs", "add", "a\x1b]0;T\x07\tb", db=db))  # shown escaped, not run by the terminal
    assert ok(bp("notes", "--session", "s3", "refs", db=db)) == b"a\\x1b]0;T\\x07\tb\n"
    shown = ok(bp("notes", "show", "--session", "s1", db=db)).decode()  # --session after the action works too
    with blobpad.open(db) as store:  # the CLI shows what the library renders
        assert shown == store.notepad("s1").render_spaces().rstrip("\n") + "\n"
    for part in (*expected["notes"].split("\n"), *expected["plan"].split("\n"), *expected["refs"]):
        assert part in shown
    assert ok(bp("notes", "--session", "s2", db=db)) == b""  # another session's notepad is empty

    # rejected changes leave everything as it was: one error line, exit 2
    assert_error(bp(*s1, "append", "x" * 4000, db=db), 2, "budget")
    assert_error(bp(*s1, "refs", "remove", "not-there", db=db), 1, "not-there")  # not found: exit 1, as the README says
    assert_error(bp("notes", "show", db=db), 2, "--session")
    assert json.loads(ok(bp(*s1, "show", "--json", db=db))) == expected
    # a full replacement over budget is cut, with a warning on stderr
    proc = bp(*s1, "set", "y" * 5000, db=db)
    assert proc.returncode == 0 and proc.stderr.startswith(b"blobpad: warning: ") and proc.stderr.count(b"\n") == 1
    assert json.loads(proc.stdout)["used"] == 4000


# -- demo, mcp ----------------------------------------------------------------------------


def test_notes_help_examples_store_what_they_show(tmp_path):
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    text = ok(bp("notes", "--help")).decode()
    examples = [line.strip() for line in text.split("example:\n", 1)[1].splitlines() if line.strip()]
    assert any("plan" in line for line in examples)
    env = _env(BLOBPAD_DIR=str(tmp_path / "default"), PATH=f"{pathlib.Path(BLOBPAD).parent}:{os.environ['PATH']}")
    for line in examples:  # each example, run by a shell exactly as printed
        proc = subprocess.run(["bash", "-c", line], capture_output=True, env=env, timeout=120)
        assert proc.returncode == 0 and b"Traceback" not in proc.stderr, (line, proc.stderr)
    with blobpad.open(tmp_path / "default") as store:
        plan = store.notepad("s1").read("plan")
    assert plan.splitlines() == ["1. Fix auth bug", "2. Add test"]  # a real newline, not backslash-n
    # TEXT is stored as given: a backslash-n typed without $'...' stays two characters, as documented
    ok(bp("notes", "--session", "s2", "plan", "a\\nb", db=tmp_path / "db"))
    assert ok(bp("notes", "--session", "s2", "plan", db=tmp_path / "db")) == b"a\\nb\n"
    assert "stored exactly as given" in " ".join(text.split())


def test_put_help_and_the_module_docstring_say_what_a_turn_becomes(tmp_path):
    import blobpad.cli

    help_text = " ".join(ok(bp("put", "--help")).decode().split())
    assert "stored as the strings given" not in help_text
    assert "whole number (3, -1) is stored as that integer" in help_text and "size_bytes" in help_text
    doc = " ".join((blobpad.cli.__doc__ or "").split())
    assert "stores the integer ``3``" in doc and 'stores the string ``"3"``' not in doc
    db = tmp_path / "db"
    turns = {}
    for turn in ("3", "-1", "03", "3a", "+3"):
        eid = json.loads(ok(bp("put", "-", "--turn", turn, db=db, input=b"x\n")))["id"]
        turns[turn] = json.loads(ok(bp("stat", eid, db=db)))["turn"]
    assert turns == {"3": 3, "-1": -1, "03": "03", "3a": "3a", "+3": "+3"}  # what the help says happens


def test_oracles_are_found_in_the_environment_and_a_missing_one_is_said_once(tmp_path):
    """The rg fixture finds the test extra's rg in this interpreter's environment even with
    a PATH that lacks it (a venv not activated); a missing oracle is named in the header
    and the summary of the run."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "test_probe.py").write_text(
        "import subprocess, pytest\n"
        "def test_uses_rg(rg):\n"
        "    assert subprocess.run([rg, '--version'], capture_output=True).stdout.startswith(b'ripgrep')\n"
        "def test_skips():\n"
        "    pytest.skip('for the summary')\n"
    )
    (tmp_path / "absent_oracle.py").write_text("import conftest\nconftest.ORACLES['blobpad-absent-oracle'] = 'nowhere'\n")
    tests_dir = pathlib.Path(__file__).parent
    env = _env(PATH=str(tmp_path / "empty"), PYTHONPATH=f"{tests_dir}{os.pathsep}{tmp_path}")
    base = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-rs", "test_probe.py"]
    found = subprocess.run(base, capture_output=True, cwd=tmp_path, env=env, timeout=300)
    out = found.stdout.decode()
    assert found.returncode == 0 and "1 passed, 1 skipped" in out, out
    assert "rg (from" not in out  # found in the environment, though not on PATH (sed and zstd are not, here)
    missing = subprocess.run([*base, "-p", "absent_oracle"], capture_output=True, cwd=tmp_path, env=env, timeout=300)
    lines = missing.stdout.decode().splitlines()
    header = [line for line in lines if line.startswith("missing oracles, the tests that use them are skipped: ")]
    assert len(header) == 1 and "blobpad-absent-oracle (from nowhere)" in header[0], lines
    summary = [line for line in lines if line.startswith("1 tests skipped; missing oracles: ")]
    assert len(summary) == 1 and "blobpad-absent-oracle (from nowhere)" in summary[0], lines


def test_readme_says_what_a_fresh_machine_needs_and_where_the_store_lives(tmp_path):
    root = pathlib.Path(__file__).resolve().parent.parent
    readme = " ".join((root / "README.md").read_text().split())
    assert "`python3-venv`" in readme and "apt-get install zstd" in readme  # what only Debian provides
    ci = (root / ".ci" / "run").read_text()
    assert "python3-venv" in ci and "zstd" in ci and 'pip install -e ".[test]" && pytest' in ci
    assert 'pip install -e ".[test]" && pytest' in readme  # .ci/run runs the README's command
    assert "`$BLOBPAD_DIR`" in readme and "~/.local/share/blobpad" in readme
    assert "mode 0700" in readme and "mode 0600" in readme
    # and what it says is what happens: the default store, its directory and files private whatever the umask
    home = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-c", "import os, sys; os.umask(0o022); from blobpad.cli import main; "
                           "sys.exit(main(['put', '-']))"], input=b"x\n", capture_output=True,
                          env=_env(BLOBPAD_DIR=str(home)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert stat_mode(home) == 0o700
    assert {f.name: stat_mode(f) for f in home.iterdir()} == {"data.mdb": 0o600, "lock.mdb": 0o600, "blobpad.lock": 0o600}


def stat_mode(path: pathlib.Path) -> int:
    return path.stat().st_mode & 0o777


def _demo_observation(out: str) -> dict[str, Any]:
    start = out.index("\n{\n") + 1
    end = out.index("\n}\n", start) + 2
    return json.loads(out[start:end])


def test_demo_on_the_default_store_and_every_command_it_prints_works(tmp_path):
    default = tmp_path / "default"
    size = 1 << 20
    proc = bp("demo", "--size", str(size), env=_env(BLOBPAD_DIR=str(default)))
    out = ok(proc).decode()
    assert f"store {default}" in out
    expected = pathlib.Path(tmp_path / "expected.log")
    sample.write_log(str(expected), size)
    data = expected.read_bytes()
    obs = _demo_observation(out)
    assert obs["ok"] is True and obs["kind"] == "text" and obs["size_bytes"] == len(data)
    assert obs["summary"] == oracle_summary(data)
    listed = json.loads(ok(bp("ls", "--json", db=default)))
    assert [e["id"] for e in listed] == [obs["scratchpad_id"]]
    # the printed line window is the original's
    m = re.search(r"--lines (\d+):(\d+)", out)
    assert m
    first, last = int(m.group(1)), int(m.group(2))
    shown = out[m.end():].split("\n", 1)[1].split("\n\n", 1)[0]
    assert shown.encode() + b"\n" == b"".join(data.splitlines(keepends=True)[first - 1 : last])
    assert re.search(rf"in [\d.]+ ms -> id {obs['scratchpad_id']}", out)  # the put is timed
    assert len(re.findall(r"^\$ blobpad .*# [\d.]+ ms$", out, re.M)) == 4  # and so is each read
    assert "{{" not in obs["_note"]  # the CLI resolves no {{stepN.field}} references: none is suggested

    other = tmp_path / "other"
    out = ok(bp("demo", "--size", str(size), db=other)).decode()
    assert f"store {other}" in out and "characters omitted" in out
    assert len(json.loads(ok(bp("ls", "--json", db=default)))) == 1  # the default store was not touched
    eid = _demo_observation(out)["scratchpad_id"]
    again = ok(bp("demo", "--size", str(size), db=other)).decode()
    listed = json.loads(ok(bp("ls", "--json", db=other)))
    assert [e["id"] for e in listed] == [_demo_observation(again)["scratchpad_id"]] != [eid]  # a new demo replaces it
    _run_printed_commands(again, other)
    assert json.loads(ok(bp("ls", "--json", db=other))) == []  # the last command printed deletes the entry


@pytest.mark.parametrize("given", ["--db", "BLOBPAD_STORE"])
@pytest.mark.parametrize("command", [["put", "-"], ["notes", "--session", "s", "set", "p"], ["ls"]])
def test_a_command_on_an_in_memory_store_says_it_keeps_nothing(tmp_path, given, command):
    """memory:// lives in one process: a CLI command on it starts empty and loses what it
    writes when it ends; it says so on stderr (a put printed an id that the next command
    called unknown, without a word), and still does its work (stdout unchanged)."""
    target = "memory://scratch"
    proc = bp(*command, db=target if given == "--db" else None, input=b"hello\n",
              env=_env() if given == "--db" else _env(BLOBPAD_STORE=target))
    assert proc.returncode == 0, proc.stderr
    assert b"memory://scratch is an in-memory store" in proc.stderr and b"gone when it ends" in proc.stderr
    if command[0] == "put":
        assert ID_RE.fullmatch(proc.stdout.strip().decode()) or ID_RE.search(proc.stdout.decode())
    on_disk = bp("ls", db=tmp_path / "d")
    assert b"in-memory" not in on_disk.stderr  # a store on disk says nothing of the kind


@pytest.mark.parametrize("var", ["BLOBPAD_STORE", "BLOBPAD_DIR"])
def test_a_demo_on_a_store_set_for_it_alone_prints_commands_that_name_it(tmp_path, var):
    """``BLOBPAD_STORE=DIR blobpad demo``: the variable is gone in the next command, so
    the commands printed name the store with --db (they work in a plain shell)."""
    store = tmp_path / "one-off store"
    out = ok(bp("demo", "--size", str(1 << 20), env=_env(**{var: str(store)}))).decode()
    assert f"store {store}" in out
    _run_printed_commands(out, store)  # each run without the variable


def _run_printed_commands(out: str, db: pathlib.Path) -> None:
    """Run every ``$ blobpad ...`` line the demo printed, as a user would, in order: each
    works, and prints what the demo showed under it (when it showed something)."""
    blocks = re.findall(r"^\$ (blobpad [^\n]*)\n((?:(?!\$ )[^\n]+\n)*)", out, re.M)
    assert len(blocks) >= 7, blocks
    for command, shown in blocks:
        argv = shlex.split(command, comments=True)
        assert argv[:3] == ["blobpad", "--db", str(db)], argv  # the store the demo used
        proc = bp(*argv[1:])
        assert proc.returncode == 0, (command, proc.stderr)
        assert re.fullmatch(rb"(blobpad: stopped after \d matching lines; more exist \(raise -m\)\n)?", proc.stderr), command
        if shown:
            assert proc.stdout.decode().rstrip("\n") == shown.rstrip("\n"), command
    assert "rm" in blocks[-1][0].split()


def test_mcp_without_the_extra_says_how_to_install(tmp_path):
    # A real interpreter on which `import mcp` fails, as on an install without the extra.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['mcp'] = None\n")
    env = _env(PYTHONPATH=str(site))
    proc = bp("mcp", db=tmp_path / "db", env=env, cmd=[sys.executable, "-m", "blobpad"])
    assert_error(proc, 2, "pip install 'blobpad[mcp]' (in a checkout of blobpad: pip install '.[mcp]')")


def test_mcp_serves_the_session_of_the_store_it_was_given(tmp_path):
    pytest.importorskip("mcp")
    db, allowed = tmp_path / "db", tmp_path / "allowed"
    allowed.mkdir()
    ok(bp("put", "-", "--session", "agent-7", "--name", "build_log", db=db, input=b"make: *** [all] Error 2\n"))
    server = subprocess.Popen(
        [BLOBPAD, "mcp", "--db", str(db), "--session", "agent-7", "--allow", str(allowed), "--profile", "seed003"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )
    assert server.stdin is not None and server.stdout is not None

    def ask(msg_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode() + b"\n")
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        assert reply.get("id") == msg_id, reply
        return reply["result"]

    try:
        init = ask(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "test", "version": "1"}})
        assert init["serverInfo"]["name"] == "blobpad"
        server.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        tools = {t["name"] for t in ask(2, "tools/list", {})["tools"]}
        assert {"scratchpad_write", "scratchpad_read", "scratchpad_offload"} <= tools  # seed003 profile, --allow
        listed = ask(3, "tools/call", {"name": "scratchpad_list", "arguments": {}})["structuredContent"]
        assert [e["name"] for e in listed["entries"]] == ["build_log"]  # --db and --session reached the server
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert server.returncode == 0
    assert_error(bp("mcp", "--profile", "nope", db=db), 2, "seed003")


@pytest.mark.parametrize(("argv", "instead"), [(["put", "-", "--session", "s"], "pass a file"),
                                               (["notes", "--session", "s", "append", "-"], "give the text"),
                                               (["notes", "--session", "s", "set", "-"], "give the text")])
def test_dash_without_a_standard_input_is_a_clear_error(tmp_path, argv, instead):
    """``blobpad put - <&-``: no stdin at all (Python's sys.stdin is None), not an empty one."""
    proc = subprocess.run(["sh", "-c", '"$0" "$@" <&-', BLOBPAD, "--db", str(tmp_path / "db"), *argv],
                          capture_output=True, env=_env(), timeout=120)
    assert_error(proc, 2, "standard input", instead)


@pytest.mark.parametrize("args", [
    ["read", "{id}", "--lines", "１:２"], ["read", "{id}", "--lines", "1_0:1_1"], ["read", "{id}", "--range", "٣:٤"],
    ["grep", "{id}", "line", "-A", "１"], ["grep", "{id}", "line", "-m", "1_0"],
])
def test_numbers_on_the_command_line_are_ascii_digits(tmp_path, args):
    """int() reads other scripts' digits and underscores ("１:２", "1_0"): the command took them for
    numbers; they are usage errors now, like any other text where a number goes."""
    db = tmp_path / "db"
    eid = json.loads(ok(bp("put", "-", db=db, input=b"line one\nline two\nline three\n")))["id"]
    out = bp(*[a.format(id=eid) for a in args], db=db)
    assert out.returncode == 2 and out.stdout == b"" and b"Traceback" not in out.stderr, out.stderr
    assert ok(bp("read", eid, "--lines", " 2:+3 ", db=db)) == b"line two\nline three\n"  # ASCII, signed, padded


_PEAK_OF_CHILD = """
import resource, subprocess, sys
with open(sys.argv[1], "wb") as out:
    rc = subprocess.run(sys.argv[2:], stdout=out).returncode
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


@pytest.mark.parametrize("how", [["--head", str(10**12)], ["--tail", "40000000"], ["--range", "5:"], ["--bytes", "3:"]])
def test_read_of_a_large_span_writes_it_in_pieces(tmp_path, how):
    """read --head, --tail, --range and --bytes of 48 MB held the whole answer (and its encoded copy):
    several times the entry's size. They now write it a piece at a time, as --full does; the output is
    Python's slice of the content, and the command's peak memory stays well under the entry's size."""
    db = tmp_path / "db"
    text = "".join(f"{i:08d} é line of a large log, some words to compress less {i * 7919 % 100003}\n" for i in range(720_000))
    with blobpad.open(db) as store:
        eid = store.put(text).id
    size = len(text.encode())
    assert size > 45 << 20
    out = tmp_path / "out"

    def peak(*argv: str) -> int:
        proc = subprocess.run([sys.executable, "-c", _PEAK_OF_CHILD, str(out), BLOBPAD, "--db", str(db), "read", eid,
                               *argv], capture_output=True, text=True, env=_env(), timeout=300)
        rc, peak_mb = map(int, proc.stdout.split())
        assert rc == 0, proc.stderr
        return peak_mb

    streamed = peak("--full")  # the process, its chunk cache (64 MiB at most) and a block
    mine = peak(*how)
    want = {"--head": text, "--tail": text[-40000000:], "--range": text[5:], "--bytes": text.encode()[3:]}[how[0]]
    assert out.read_bytes() == (want if isinstance(want, bytes) else want.encode())
    assert mine < streamed + 16, (mine, streamed, size >> 20)


def test_long_numbers_and_long_names_in_arguments(tmp_path):
    """A count of 31 digits is a non-negative integer (it was "invalid number ... use a non-negative
    integer"); a file name of 100,000 characters is quoted in at most 100 (the whole name was echoed)."""
    db = tmp_path / "db"
    eid = json.loads(ok(bp("put", "-", db=db, input=b"hello\n")))["id"]
    assert ok(bp("read", eid, "--head", "9" * 31, db=db)) == b"hello\n"
    assert ok(bp("read", eid, "--tail", "9" * 400, db=db)) == b"hello\n"
    too_long = bp("read", eid, "--head", "9" * 4001, db=db)
    assert too_long.returncode == 2 and len(too_long.stderr) < 400
    from blobpad import cli

    name = str(tmp_path / ("n" * 100_000))
    for argv in (["--db", str(db), "put", name], ["--db", str(db), "put", str(tmp_path / ("d" * 300)) + "/x"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert cli.main(argv) == 2
        assert 0 < len(err.getvalue()) < 400, err.getvalue()[:300]


def test_grep_of_more_matching_text_than_it_holds_in_memory_matches_rg(tmp_path, rg):
    """``blobpad grep`` (every matching line) keeps the lines past 8 MB in a temporary file,
    not in memory, and prints the same bytes as ``rg -n``: a text log of 20 MB whose every
    line matches (``^``, and a set of literals: through ``rg``), one with a pattern in
    process, and a log whose lines hold bytes that are not UTF-8 (printed as they are)."""
    db = tmp_path / "db"
    text = tmp_path / "big.log"
    text.write_text(sample.log_text(20 << 20, 21))
    raw = sample.log_text(10 << 20, 22).encode().split(b"\n")
    binary = tmp_path / "latin.log"
    binary.write_bytes(b"\n".join(row + b" caf\xe9" if i % 3 == 0 else row for i, row in enumerate(raw)))
    ids = {path: json.loads(ok(bp("put", str(path), db=db)))["id"] for path in (text, binary)}
    for path, args in [(text, ["^"]), (text, ["-F", "0"]), (text, [r"\d\d:\d"]), (binary, ["."]), (binary, ["caf"])]:
        mine = bp("grep", ids[path], *args, db=db)
        ref = subprocess.run([rg, "-n", *args, str(path)], capture_output=True)
        assert mine.returncode == ref.returncode == 0, mine.stderr
        assert len(ref.stdout) > 8 << 20 or path is binary
        assert mine.stdout == ref.stdout, (path.name, args)
