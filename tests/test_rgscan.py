"""Counts and every-matching-line listings made by ripgrep (``blobpad.rgscan``), on every engine.

A search that must read every chunk of a large text entry, for a pattern that is a
set of literals, is handed to ``rg`` in a child process.  Its answer must be the
in-process answer, and Python's ``re`` over the lines: these tests lower
``rgscan.MIN_BYTES`` to 0 so that small entries go to ``rg`` too, run it through a
wrapper that logs every run (so a test knows ``rg`` did the search), and compare.
Then ``rg`` missing, failing, writing nonsense or hanging: the search falls back to
this process and still answers right.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
from blobpad import rgscan

SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)

#: lines of a log, some rare, with what a literal search must get right: case, the
#: Kelvin sign and the long s (case variants of k and s), CRLF, NUL, a colon (rg's
#: separator), non-ASCII text, a byte-order mark
LINES = [
    "INFO request served in 3 ms",
    "INFO request served in 3 ms",
    "INFO request served in 3 ms",
    "debug: cache hit key=a1",
    "ERROR connection failed: timeout",
    "Error: disk failure on /dev/sda",
    "WARN retry 2 of 5",
    "job FAILED with code 7",
    "ok \u212a kelvin",
    "long \u017f s",
    "crlf line\r",
    "nul \0 inside",
    "caf\u00e9 r\u00e9sum\u00e9 na\u00efve",
    "\ufeffbom inside",
    "a:b:c error",
    "",
]
PATTERNS = [
    ("error|fail(ed|ure)", False), ("error|fail(ed|ure)", True), ("failed", False), ("FAILED", True),
    ("k", True), ("s", True), ("K", False), ("r\u00e9sum\u00e9", False), (":", False), ("a:b", False),
    ("colou?r|(?:cache|disk) (hit|failure)", True), ("\\.", False), ("\r", False), ("\0", False),
    ("bom", True), ("never there", False), ("c", True),
]


def _wrapper(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def via_rg(monkeypatch, rg, tmp_path):
    """Every eligible search goes to ``rg``, through a wrapper that logs its arguments; the log's path."""
    if sys.platform == "win32":
        pytest.skip("the wrapper is a shell script")
    log = tmp_path / "rg.log"
    wrapper = _wrapper(tmp_path, "rg-logged", f'echo "$*" >> "{log}"\nexec "{rg}" "$@"\n')
    monkeypatch.setattr(rgscan, "MIN_BYTES", 0)
    monkeypatch.setenv("BLOBPAD_RG", wrapper)
    return log


def _searches(log) -> int:
    if not log.exists():
        return 0
    return sum("--version" not in line for line in log.read_text().splitlines())


def _oracle(text: str, pattern: str, ignore_case: bool, fixed: bool, upto: int | None = None) -> list[int]:
    rx = re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [k for k, line in enumerate(lines[:upto], 1) if rx.search(line)]


def _lines_of(text: str) -> list[str]:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


@st.composite
def logs(draw) -> str:
    body = draw(st.lists(st.sampled_from(LINES), min_size=60, max_size=400))
    return "\n".join(body) + draw(st.sampled_from(["\n", "", "\ntail error"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=logs(), case=st.sampled_from(PATTERNS), filters=st.booleans())
def test_rg_counts_and_lists_what_re_finds(store_factory, via_rg, text, case, filters):
    pattern, ignore_case = case
    s = store_factory(f"s{filters}", chunk_params=SMALL, cache_bytes=0, filters=filters)
    eid = s.put(text, session="rg").id
    want = _oracle(text, pattern, ignore_case, False)
    before = _searches(via_rg)
    n = s.count(eid, pattern, ignore_case=ignore_case)
    found = s.matching_lines(eid, pattern, ignore_case=ignore_case)
    eligible = rgscan.literals(pattern, ignore_case=ignore_case, fixed=False) is not None  # not "\0" nor "\r"
    assert _searches(via_rg) == before + (2 if eligible else 0)  # both went to rg
    assert n == len(want) and not n.timed_out
    assert found.numbers == want
    lines = _lines_of(text)
    assert found.texts == [lines[k - 1] for k in want]
    assert n.chunks_total >= 2


@pytest.mark.parametrize("pattern", ["error", "ERROR connection", "a:b", "caf\u00e9", "(x|y)", "\u212a"])
@pytest.mark.parametrize("ignore_case", [False, True])
def test_fixed_strings_go_to_rg_where_they_mean_the_same(store_factory, via_rg, pattern, ignore_case):
    text = "\n".join(LINES * 30) + "\n(x|y) literal\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    eid = s.put(text, session="rg").id
    want = _oracle(text, pattern, ignore_case, True)
    before = _searches(via_rg)
    assert s.count(eid, pattern, ignore_case=ignore_case, fixed=True) == len(want)
    assert s.matching_lines(eid, pattern, ignore_case=ignore_case, fixed=True).numbers == want
    eligible = pattern.isascii() or not ignore_case
    assert _searches(via_rg) == before + (2 if eligible else 0)


@pytest.mark.parametrize("pattern", ["err.r", "^ERROR", "fail\\w+", "[Ee]rror", "(?i)error", "error$", "\\berror", "x*"])
def test_patterns_that_are_not_literal_sets_stay_in_process(store_factory, via_rg, pattern):
    text = "\n".join(LINES * 30) + "\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    eid = s.put(text, session="rg").id
    want = _oracle(text, pattern, False, False)
    assert s.count(eid, pattern) == len(want)
    assert s.matching_lines(eid, pattern).numbers == want
    assert _searches(via_rg) == 0


def test_entries_that_rg_must_not_read(store_factory, via_rg):
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    binary = s.put(b"error\n" * 200 + b"\xff\xfe error\n" * 50, session="rg").id  # bytes: not text
    long_line = s.put("x" * 2000 + " error\n" + "error\n" * 100, session="rg").id  # a line longer than a chunk
    assert s.count(binary, "error") == 250
    assert s.count(long_line, "error") == 101
    assert s.matching_lines(long_line, "error").numbers == list(range(1, 102))
    assert _searches(via_rg) == 0


def test_skipped_chunks_keep_line_numbers(store_factory, via_rg):
    # rare lines in the middle only: the filters exclude the first and the last chunks and
    # those between the needles, and the runs fed to rg are mapped back to the entry's lines
    lines = [f"INFO request {k} served" for k in range(3000)]
    for k in (700, 701, 1499, 1999):
        lines[k] = f"ERROR rare-needle-{k}"
    text = "\n".join(lines) + "\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0, filters=True)  # filters built at put
    eid = s.put(text, session="rg").id
    want = [701, 702, 1500, 2000]
    n = s.count(eid, "rare-needle")
    found = s.matching_lines(eid, "rare-needle")
    assert n == 4 and found.numbers == want
    assert found.texts == [lines[k - 1] for k in want]
    assert n.chunks_read < n.chunks_total // 4  # the chunks around each needle (and a few false positives)
    assert _searches(via_rg) == 2


class _Budget:
    """A deadline that passes once ``left()`` has been asked ``calls`` times (one per chunk fed)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.expired = False

    def left(self) -> float:
        self.calls -= 1
        return 1.0 if self.calls >= 0 else 0.0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.lists(st.sampled_from(LINES[:-1] + ["x" * 300 + " error"]), min_size=1, max_size=80),
       cuts=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=40),
       stop=st.integers(min_value=0, max_value=45), numbered=st.booleans(), last_newline=st.booleans())
def test_a_budget_that_passes_between_any_two_chunks(rg, body, cuts, stop, numbered, last_newline):
    # rgscan.scan fed chunks cut anywhere (inside lines too), its budget passing before chunk `stop`:
    # what it found is exactly the matching lines among lines 1 to searched_lines
    text = "\n".join(body) + ("\n" if last_newline else "")
    raw = text.encode()
    chunks, at = [], 0
    for size in cuts:
        if at >= len(raw):
            break
        chunks.append(raw[at:at + size])
        at += size
    if at < len(raw):
        chunks.append(raw[at:])
    fed, newlines = [], 0
    for piece in chunks:
        fed.append((piece, newlines + 1, piece.count(b"\n")))
        newlines += piece.count(b"\n")
    got = rgscan.scan(rg, ("error", "FAILED"), ignore_case=False, numbered=numbered, chunks=fed,
                      deadline=_Budget(stop))  # type: ignore[arg-type]
    assert got is not None
    lines = _lines_of(text)
    upto = got.searched_lines if got.searched_lines is not None else len(lines)
    if got.searched_lines is not None:
        assert stop < len(chunks) and 0 <= upto <= len(lines)
    want = [k for k, line in enumerate(lines[:upto], 1) if "error" in line or "FAILED" in line]
    assert got.count == len(want)
    if numbered:
        assert got.numbers == want and got.texts == [lines[k - 1] for k in want]


@pytest.mark.parametrize("timeout", [1e-9, 0.002])
def test_a_budget_that_runs_out_says_how_far_it_searched(store_factory, via_rg, timeout):
    text = "\n".join(LINES * 2000) + "\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    eid = s.put(text, session="rg").id
    n = s.count(eid, "error|fail(ed|ure)", ignore_case=True, timeout=timeout)
    found = s.matching_lines(eid, "error|fail(ed|ure)", ignore_case=True, timeout=timeout)
    for result, got in ((n, None), (found, found.numbers)):
        upto = result.searched_lines if result.timed_out else None
        want = _oracle(text, "error|fail(ed|ure)", True, False, upto)
        assert (int(result) if got is None else got) == (len(want) if got is None else want)
    if timeout == 1e-9:
        assert n.timed_out and n.searched_lines == 0 and n == 0


@pytest.mark.parametrize("body", [
    pytest.param('echo "ripgrep 14.1.0"; exit 0', id="no-search"),  # a search prints a version and exits 0
    pytest.param('case "$*" in *--version*) echo "ripgrep 14.1.0";; *) cat >/dev/null; echo garbage; exit 1;; esac',
                 id="no-match-with-output"),
    pytest.param('case "$*" in *--version*) echo "ripgrep 14.1.0";; *) cat >/dev/null; exit 2;; esac', id="fails"),
    pytest.param('case "$*" in *--version*) echo "ripgrep 14.1.0";; *) cat >/dev/null; echo "x:y:z"; echo 12x;; esac',
                 id="nonsense"),
    pytest.param('case "$*" in *--version*) echo "ripgrep 14.1.0";; *) exec sleep 60;; esac', id="hangs"),
    # a wrapper that does not exec: its child holds the pipes after the wrapper is killed
    pytest.param('case "$*" in *--version*) echo "ripgrep 14.1.0";; *) sh -c \'echo $$ > "{pids}"; exec sleep 600\';; '
                 'esac', id="child-hangs"),
    pytest.param('case "$*" in *--version*) echo "ripgrep 14.1.0";; *) cat >/dev/null; sleep 60;; esac',
                 id="reads-then-hangs"),
    pytest.param('echo "grep 3.11"', id="not-ripgrep"),
])
def test_a_broken_rg_changes_nothing(store_factory, monkeypatch, tmp_path, body):
    if sys.platform == "win32":
        pytest.skip("the wrapper is a shell script")
    monkeypatch.setattr(rgscan, "MIN_BYTES", 0)
    monkeypatch.setattr(rgscan, "GRACE_SECONDS", 0.5)
    pids, log = tmp_path / "pids", tmp_path / "rg.log"
    body = f'echo "$*" >> "{log}"\n' + body.replace("{pids}", str(pids))
    monkeypatch.setenv("BLOBPAD_RG", _wrapper(tmp_path, "rg-broken", body + "\n"))
    text = "\n".join(LINES * 20000) + "\n"  # megabytes: more than a pipe holds, so a write waits for a reader
    s = store_factory(cache_bytes=0)
    eid = s.put(text, session="rg").id
    want = _oracle(text, "error|fail(ed|ure)", True, False)
    got: list[object] = []

    def search() -> None:
        got.append(s.count(eid, "error|fail(ed|ure)", ignore_case=True))
        got.append(s.matching_lines(eid, "error|fail(ed|ure)", ignore_case=True))

    worker = threading.Thread(target=search, daemon=True)
    worker.start()
    worker.join(120)  # a bound on a hang (the grace is 0.5 s; a hang lasts the wrapper's 600 s), not a timing
    try:
        assert not worker.is_alive(), "the search waited for a child of rg that holds its pipes"
    finally:
        for pid in pids.read_text().split() if pids.exists() else ():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        worker.join(60)
    n, found = got
    assert n == len(want) and n.chunks_read == n.chunks_total
    assert found.numbers == want
    tried = "grep 3.11" not in body  # a program that is not ripgrep is never given a search
    assert _searches(log) == (2 if tried else 0)


def test_no_room_for_the_literals_file_changes_nothing(store_factory, via_rg, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))  # TemporaryFile() fails
    text = "\n".join(LINES * 50) + "\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    eid = s.put(text, session="rg").id
    want = _oracle(text, "failed", False, False)
    assert s.count(eid, "failed") == len(want)
    assert s.matching_lines(eid, "failed").numbers == want
    assert _searches(via_rg) == 0


def test_rg_missing_or_turned_off(store_factory, monkeypatch, tmp_path):
    monkeypatch.setattr(rgscan, "MIN_BYTES", 0)
    text = "\n".join(LINES * 50) + "\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    eid = s.put(text, session="rg").id
    want = _oracle(text, "failed", False, False)
    for setting in (str(tmp_path / "no-such-rg"), "off"):
        monkeypatch.setenv("BLOBPAD_RG", setting)
        assert rgscan.executable() is None
        assert s.count(eid, "failed") == len(want)
        assert s.matching_lines(eid, "failed").numbers == want


@pytest.mark.parametrize(("pattern", "expected"), [
    ("error|fail(ed|ure)", {"error", "failed", "failure"}),
    ("colou?r", {"color", "colour"}),
    ("(?:ab|cd)e", {"abe", "cde"}),
    ("\\.x\\(", {".x("}),
    ("a:b c", {"a:b c"}),
    ("()x", {"x"}),
    ("a.b", None), ("a\\d", None), ("(?i)x", None), ("a||b", None), ("x{2}", None), ("[ab]", None),
    ("^a", None), ("a$", None), ("\\Qab\\E", None), ("ab)", None), ("(ab", None), ("a*", None), ("a+", None),
    ("a??", None), ("a?", None), ("\\x41", None), ("\\bword", None), ("(?P<n>a)", None), ("(?=a)", None),
    ("|".join(f"w{k}" for k in range(rgscan.MAX_LITERALS + 1)), None),
    ("(a|b)(c|d)(e|f)(g|h)(i|j)(k|l)(m|n)", None),  # 128 literals
])
def test_which_patterns_are_literal_sets(pattern, expected):
    got = rgscan.literals(pattern, ignore_case=False, fixed=False)
    assert (None if got is None else set(got)) == expected
    if expected is not None:  # what the set means is what the pattern means
        rx = re.compile(pattern)
        for probe in ["", "error", "xx failure", "color", "colour", "abe", "cde", ".x(", "a:b c", "x", "abc", "failed"]:
            assert bool(rx.search(probe)) == any(lit in probe for lit in got)


def test_literal_limits():
    assert rgscan.literals("caf\u00e9", ignore_case=True, fixed=True) is None  # case folding beyond ASCII: in process
    assert rgscan.literals("caf\u00e9", ignore_case=False, fixed=True) == ("caf\u00e9",)
    assert rgscan.literals("a\nb", ignore_case=False, fixed=True) is None
    assert rgscan.literals("", ignore_case=False, fixed=True) is None
    assert rgscan.literals("x" * (rgscan.MAX_LITERAL + 1), ignore_case=False, fixed=True) is None
    assert rgscan.literals("\ud800", ignore_case=False, fixed=True) is None


def test_deeply_nested_groups_are_not_literal_sets(store_factory, via_rg):
    pattern = "(" * 400 + "error" + ")" * 400  # RE2 takes it; a recursive reading would overflow Python's stack
    assert rgscan.literals(pattern, ignore_case=False, fixed=False) is None
    assert rgscan.literals("(" * rgscan.MAX_DEPTH + "error" + ")" * rgscan.MAX_DEPTH, ignore_case=False,
                           fixed=False) == ("error",)
    text = "\n".join(LINES * 30) + "\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    eid = s.put(text, session="rg").id
    assert s.count(eid, pattern) == len(_oracle(text, "error", False, False))


def test_the_literals_are_not_on_rgs_command_line(store_factory, via_rg):
    text = "\n".join(LINES * 30) + "\ntoken sk-secret-7781 seen\n"
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    eid = s.put(text, session="rg").id
    assert s.count(eid, "sk-secret-7781") == 1
    assert _searches(via_rg) == 1
    assert "sk-secret-7781" not in via_rg.read_text()  # another local user could read it there (ps)


_LOCALE_PROBE = """
import os, sys
import blobpad
from blobpad import rgscan
rgscan.MIN_BYTES = 0
ran = []
scan = rgscan.scan
rgscan.scan = lambda *a, **k: ran.append(scan(*a, **k)) or ran[-1]
s = blobpad.open("memory://", chunk_params=blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256))
eid = s.put("\\n".join(["caf\\u00e9 ok", "cafe", "caf\\u00c3\\u00a9 mojibake", "\\u2713 done"] * 40), session="x").id
got = [int(s.count(eid, p)) for p in ("caf\\u00e9", "caf\\u00c3\\u00a9", "\\u2713")]
print(sys.getfilesystemencoding(), got, all(r is not None for r in ran) and len(ran) == 3)
"""


def test_literals_reach_rg_as_utf8_whatever_the_locale(rg, tmp_path):
    if sys.platform == "win32":
        pytest.skip("POSIX locales")

    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "BLOBPAD_RG": rg}
    done = subprocess.run([sys.executable, "-c", _LOCALE_PROBE], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    encoding, got, all_by_rg = done.stdout.split(" ", 1)[0], *done.stdout.split(" ", 1)[1].rsplit(" ", 1)
    assert encoding == "ascii"  # the command line would be encoded as ASCII
    assert got == "[40, 40, 40]" and all_by_rg.strip() == "True"


def test_the_cli_prints_what_rg_prints_on_the_file(rg, tmp_path):
    # past the default MIN_BYTES: `blobpad grep` (every matching line) and `grep -c` go to rg as they ship
    shown = [line for line in LINES if "\0" not in line]  # rg calls a file with a NUL binary
    lines = [f"2023-11-14T22:{k % 60:02d}:00 {shown[k % len(shown)]} req={k}" for k in range(100_000)]
    log = tmp_path / "big.log"
    log.write_text("\n".join(lines) + "\nlast line error without newline")
    assert log.stat().st_size > rgscan.MIN_BYTES
    wrapper = _wrapper(tmp_path, "rg-logged", f'echo "$*" >> "{tmp_path / "rg.log"}"\nexec "{rg}" "$@"\n')
    env = {**os.environ, "BLOBPAD_RG": wrapper}
    cli = [sys.executable, "-m", "blobpad", "--db", str(tmp_path / "db")]
    put = subprocess.run([*cli, "put", str(log)], capture_output=True, env=env, timeout=120, check=True)
    eid = json.loads(put.stdout)["id"]
    for args in (["-i", "error|fail(ed|ure)"], ["FAILED"], ["-F", "a:b:c"], ["-c", "-i", "error|fail(ed|ure)"],
                 ["-c", "FAILED"]):
        mine = subprocess.run([*cli, "grep", eid, *args], capture_output=True, env=env, timeout=120)
        ref = subprocess.run([rg, "--no-config", "-n", *args, str(log)], capture_output=True, timeout=120)
        assert (mine.returncode, mine.stdout) == (ref.returncode, ref.stdout), args
    assert _searches(tmp_path / "rg.log") == 5


def test_a_spool_that_cannot_be_written_never_keeps_rg_waiting(store_factory, monkeypatch):
    """``matching_lines(on_lines=...)`` spools ``rg``'s output to a temporary file.  When that
    file could not be written (a full disk), the thread reading ``rg`` stopped reading: ``rg``
    blocked on its output, the feeding on ``rg``, and the search waited for the watchdog
    (``GRACE_SECONDS``) before it searched in process, its budget spent ("timed out ... no line
    was searched").  ``rg``'s output is now read to its end whatever happens to what is kept
    of it: the search goes on in process at once, and hands on the same lines."""
    import errno

    monkeypatch.setattr(rgscan, "MIN_BYTES", 0)
    monkeypatch.setattr(rgscan, "GRACE_SECONDS", 600)  # a wait for the watchdog would outlast the bound below
    real = tempfile.TemporaryFile
    made: list[object] = []

    class Full:
        """A temporary file on a full disk."""

        def __init__(self) -> None:
            self.file = real()

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name: str) -> object:
            return getattr(self.file, name)

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

    def temporary_file(*args: object, **kwargs: object) -> object:
        made.append(None)  # a search makes two: the literals' file, then the spool of rg's output
        return real(*args, **kwargs) if len(made) % 2 else Full()

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file)
    text = "\n".join(LINES * 20000) + "\n"  # megabytes of matching lines: more than a pipe holds
    s = store_factory(cache_bytes=0)
    eid = s.put(text, session="rg").id
    want = _oracle(text, "failed", False, False)
    got: list[tuple[list[int], list[str]]] = []
    answers: list[object] = []
    worker = threading.Thread(target=lambda: answers.append(s.matching_lines(
        eid, "failed", on_lines=lambda numbers, texts: got.append((numbers, texts)))), daemon=True)
    worker.start()
    worker.join(120)  # a bound on a hang (rg blocked until a watchdog of 600 s), not a timing
    assert not worker.is_alive(), "the search waited for rg, blocked on output nobody read"
    assert made and answers[0].found == len(want)
    assert [n for numbers, _ in got for n in numbers] == want
