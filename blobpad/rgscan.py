"""Counting and listing matching lines with ripgrep, in a child process fed decompressed chunks.

A count, or a listing of every matching line, must read every chunk its filters do
not exclude.  In this process the matching costs more than the decompression: RE2's
Python binding is called once or more per matching line, and two threads making such
short calls hand the GIL to each other more than they match (``benchmarks/scan_floor.py``).
``rg`` matches a set of literals with SIMD, counts lines without a call per line, and
runs beside this process: here the store's worker threads decompress the chunks and
this thread writes them into ``rg``'s standard input, while ``rg`` matches what it has.

It is used only where its answer is the in-process answer, byte for byte
(:func:`literals`): a pattern that is a finite set of literals (``error|fail(ed|ure)``,
``timeout``, a ``fixed`` string), each non-empty, without a newline or a carriage return
(``-f`` would drop a final one), and ASCII when the search ignores case; on text entries
(valid UTF-8), whose every chunk but the last holds a newline (so no line is longer than
two chunks, which bounds ``rg``'s memory); and :data:`MIN_BYTES` or more of chunks to read
(starting ``rg`` costs a few milliseconds). ``rg`` is given the literals with ``-F`` (no
regex syntax of its own is involved) in an unlinked temporary file (UTF-8 whatever the
locale; a command line is readable by every local user), ``--no-config`` (no user
configuration), ``-a`` (a NUL is text) and ``-E none`` (no byte-order-mark sniffing). On
POSIX it leads a process group of its own, killed whole: a wrapper's children hold its
pipes too.

Where to find ``rg`` (:func:`executable`): the environment variable ``BLOBPAD_RG`` (a
path, or ``off`` to never use it), then the ``rg`` the ``ripgrep`` package puts beside
this interpreter's scripts, then ``PATH`` (looked for once a process). It must say it is
ripgrep 13 or later. When ``rg`` is missing or cannot be started, fails (exit status 2,
a signal, output it should not write), stops reading for :data:`GRACE_SECONDS`, or does
not finish within that past the search's budget, the caller searches in this process
instead (:func:`scan` returns None). Without a time budget a result never depends on
whether ``rg`` ran; with one, an ``rg`` that failed has used part of it, and the search
in process covers fewer lines (its ``searched_lines`` says how many).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import IO

from .search import Deadline

__all__ = ["MIN_BYTES", "MAX_LITERALS", "literals", "executable", "scan", "Scanned"]

#: the least bytes of chunks to read for which a search goes to ``rg``
MIN_BYTES = 4 << 20
#: most literals a pattern may stand for
MAX_LITERALS = 64
#: longest literal (bytes)
MAX_LITERAL = 1024
#: deepest nesting of groups a literal pattern may have
MAX_DEPTH = 32
#: how long one write into ``rg`` may wait, and how long ``rg`` may take past the search's
#: own budget to finish what it was given (it reads at hundreds of MB/s: these only bound
#: a hang); a search whose ``rg`` hangs runs in process after at most twice this
GRACE_SECONDS = 10.0

_META = frozenset("\\.+*?()|[]{}^$")
#: characters a backslash may quote to stand for themselves (RE2 reads each so)
_QUOTABLE = frozenset("\\.+*?()|[]{}^$-/#&~ ,:;<=>@!%'\"`")
_VERSION = re.compile(rb"^ripgrep (\d+)\.")


class _NotLiterals(Exception):
    pass


def literals(pattern: str, *, ignore_case: bool, fixed: bool) -> tuple[str, ...] | None:
    """The literals a line must contain one of to match ``pattern``, when that is exactly
    what the pattern means (a finite set of strings, see the module docstring); None otherwise.

    Understood: characters standing for themselves, a backslash before punctuation,
    concatenation, ``|``, groups ``(...)`` and ``(?:...)``, and ``?`` after a character
    or a group.  Anything else (classes, ``.``, repetition, anchors, flags, escapes
    such as ``\\d`` or ``\\x41``) gives None.
    """
    try:
        found = [pattern] if fixed else _Parser(pattern).parse()
    except _NotLiterals:
        return None
    out: dict[str, None] = {}
    for lit in found:
        if not lit or "\n" in lit or "\r" in lit or "\0" in lit or len(lit.encode("utf-8", "surrogatepass")) > MAX_LITERAL:
            return None
        if any(0xD800 <= ord(ch) < 0xE000 for ch in lit):
            return None
        if ignore_case and not lit.isascii():
            return None
        out[lit] = None
    if not out or len(out) > MAX_LITERALS:
        return None
    return tuple(out)


class _Parser:
    """A recursive-descent reader of the literal-set subset of RE2's syntax."""

    def __init__(self, pattern: str) -> None:
        self.s = pattern
        self.i = 0
        self.depth = 0

    def parse(self) -> list[str]:
        out = self.alternation()
        if self.i != len(self.s):
            raise _NotLiterals
        return out

    def alternation(self) -> list[str]:
        out = self.concatenation()
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            out = _union(out, self.concatenation())
        return out

    def concatenation(self) -> list[str]:
        out = [""]
        while self.i < len(self.s) and self.s[self.i] not in "|)":
            atom = self.atom()
            if self.i < len(self.s) and self.s[self.i] == "?":
                self.i += 1
                if self.i < len(self.s) and self.s[self.i] in "?+*{":  # lazy or stacked: not ours
                    raise _NotLiterals
                atom = _union([""], atom)
            if self.i < len(self.s) and self.s[self.i] in "+*{":
                raise _NotLiterals
            if len(out) * len(atom) > MAX_LITERALS:
                raise _NotLiterals
            out = [a + b for a in out for b in atom]
        return out

    def atom(self) -> list[str]:
        ch = self.s[self.i]
        if ch == "(":
            self.i += 1
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _NotLiterals
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?", self.i):  # flags, names, look-around: not ours
                raise _NotLiterals
            inner = self.alternation()
            if self.i >= len(self.s) or self.s[self.i] != ")":
                raise _NotLiterals
            self.i += 1
            self.depth -= 1
            return inner
        if ch == "\\":
            if self.i + 1 >= len(self.s) or self.s[self.i + 1] not in _QUOTABLE:
                raise _NotLiterals
            self.i += 2
            return [self.s[self.i - 1]]
        if ch in _META or ch == "\n":
            raise _NotLiterals
        self.i += 1
        return [ch]


def _union(a: list[str], b: list[str]) -> list[str]:
    out = list(dict.fromkeys(a + b))
    if len(out) > MAX_LITERALS:
        raise _NotLiterals
    return out


@lru_cache(maxsize=8)
def _checked(path: str) -> str | None:
    """``path`` if it runs and says it is ripgrep 13 or later."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, timeout=10, check=False,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION.match(out)
    return path if m and int(m.group(1)) >= 13 else None


def executable() -> str | None:
    """The ``rg`` to use, or None (see the module docstring)."""
    chosen = os.environ.get("BLOBPAD_RG", "").strip()
    if chosen.lower() in ("off", "0", "no", "false", "none"):
        return None
    if chosen:
        return _checked(chosen)
    return _found()


@lru_cache(maxsize=1)
def _found() -> str | None:
    """The ``rg`` beside this interpreter's scripts, else on ``PATH`` (looked for once a process)."""
    beside = os.path.join(sysconfig.get_path("scripts"), "rg.exe" if os.name == "nt" else "rg")
    if os.path.isfile(beside) and _checked(beside):
        return beside
    on_path = shutil.which("rg")
    return on_path if on_path and _checked(on_path) else None


@dataclass
class Scanned:
    """What :func:`scan` found: the count, or every matching line (``numbers``, ``texts``);
    ``searched_lines`` is set when the budget ran out (the lines searched are 1 to it)."""

    count: int = 0
    numbers: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    searched_lines: int | None = None
    lines: _Lines | None = field(default=None, repr=False)  # rg's lines to the entry's (spooled output)


class _Lines:
    """Maps the lines of the stream given to ``rg`` to the entry's lines: a run of chunks
    after skipped ones starts a line whose number the manifest gives."""

    def __init__(self) -> None:
        self.starts = [1]  # the stream line where each run starts
        self.shift = [0]  # entry line minus stream line, in that run
        self.newlines = 0  # newlines fed so far

    def run(self, entry_line: int) -> None:
        stream_line = self.newlines + 1
        if entry_line - stream_line == self.shift[-1]:
            return
        if self.starts[-1] == stream_line:
            self.shift[-1] = entry_line - stream_line
        else:
            self.starts.append(stream_line)
            self.shift.append(entry_line - stream_line)

    def entry(self, stream_line: int) -> int:
        return stream_line + self.shift[bisect_right(self.starts, stream_line) - 1]


class _Output(threading.Thread):
    """Reads ``rg``'s output as it comes; with ``numbered``, parses ``N:text`` lines, or,
    with a ``spool`` (a binary file), writes them there as they come, whole lines only,
    to be parsed once ``rg`` succeeded (:func:`_emit_spooled`)."""

    def __init__(self, stream: object, numbered: bool, spool: IO[bytes] | None = None) -> None:
        super().__init__(daemon=True, name="blobpad-rg-output")
        self.stream = stream
        self.numbered = numbered
        self.spool = spool
        self.spooled = False  # a line went to the spool
        self.numbers: list[int] = []
        self.texts: list[str] = []
        self.rest = b""
        self.raw = bytearray()
        self.error: BaseException | None = None

    def run(self) -> None:
        read = self.stream.read  # type: ignore[attr-defined]
        try:
            while block := read(1 << 20):
                if self.error is None:
                    try:
                        self._take(block)
                    except Exception as exc:  # noqa: BLE001 - handed to the thread that waits
                        # (rg is still read to its end: it never waits, blocked, on a reader that gave
                        # up, such as one whose spool's disk is full, until the watchdog kills it)
                        self.error = exc
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits
            self.error = self.error or exc

    def _take(self, block: bytes) -> None:
        """Keep one block of ``rg``'s output: a count's digits, or whole ``N:text`` lines."""
        if not self.numbered:
            if len(self.raw) >= 64:  # a count is a few digits: this is not rg's answer
                raise ValueError("unexpected output")
            self.raw += block
            return
        block = self.rest + block
        cut = block.rfind(b"\n") + 1
        self.rest = block[cut:]
        if cut and self.spool is not None:
            self.spool.write(block[:cut])
            self.spooled = True
        elif cut:
            self._parse(block[:cut].decode("utf-8"))

    def _parse(self, text: str) -> None:
        numbers, texts = _parsed(text)
        self.numbers += numbers
        self.texts += texts


def _parsed(text: str) -> tuple[list[int], list[str]]:
    """The numbers and texts of ``rg -n``'s ``N:text`` lines in ``text`` (each ending in a newline)."""
    lines = text.split("\n")
    lines.pop()
    colons = [line.index(":") for line in lines]
    return ([int(line[:c]) for line, c in zip(lines, colons, strict=True)],
            [line[c + 1:] for line, c in zip(lines, colons, strict=True)])


#: bytes of spooled output parsed and handed on at a time (:func:`_emit_spooled`)
_EMIT_BYTES = 4 << 20


def _emit_spooled(spool: IO[bytes], lines: _Lines, on_lines: Callable[[list[int], list[str]], None]) -> int:
    """Hand ``on_lines`` the matching lines ``rg`` wrote to ``spool``, about :data:`_EMIT_BYTES`
    at a time, with the entry's line numbers; return how many there were."""
    spool.seek(0)
    rest = b""
    total = 0
    while True:
        block = spool.read(_EMIT_BYTES)
        if not block:
            return total
        block = rest + block
        cut = block.rfind(b"\n") + 1
        rest = block[cut:]
        if not cut:
            continue
        numbers, texts = _parsed(block[:cut].decode("utf-8"))
        total += len(numbers)
        on_lines(_entry_numbers(lines, numbers), texts)


def _entry_numbers(lines: _Lines, numbers: list[int]) -> list[int]:
    """The entry's numbers of ``rg``'s line ``numbers``: shifted only when the filters skipped
    chunks (a bisect each)."""
    if lines.starts != [1]:
        return [lines.entry(n) for n in numbers]
    if lines.shift[0]:
        return [n + lines.shift[0] for n in numbers]
    return numbers


def scan(
    rg: str, found: tuple[str, ...], *, ignore_case: bool, numbered: bool,
    chunks: Iterable[tuple[bytes | None, int, int]], deadline: Deadline | None,
    on_lines: Callable[[list[int], list[str]], None] | None = None,
) -> Scanned | None:
    """Count (or, ``numbered``, list) the lines holding one of the literals ``found``, in
    the chunks ``chunks`` yields in order: ``(raw chunk or None when skipped, entry line
    number of its first byte, newlines in it)``.  A chunk after skipped ones must start
    a line (the one before the skipped ones ended in a newline), as grep's skipping ensures.

    With ``on_lines`` (``numbered``), the lines are not kept: ``rg``'s output goes to an
    unlinked temporary file as it comes, and once ``rg`` succeeded it is handed to
    ``on_lines(numbers, texts)`` a few MB at a time, in this thread (the result's
    ``count`` says how many lines; ``numbers`` and ``texts`` stay empty).  Nothing is
    handed on when ``rg`` failed (None), so a search in process after it starts afresh.

    When ``deadline`` passes, the chunks are fed up to the next newline and no further,
    and the result says how far it searched.  Returns None when ``rg`` failed: the caller
    searches in this process.  Errors reading the chunks (damage) propagate, ``rg`` killed.
    """
    cmd = [rg, "--no-config", "--no-messages", "-a", "-E", "none", "-F", "--color", "never",
           "-i" if ignore_case else "-s", "-n" if numbered else "-c"]
    posix = os.name == "posix"
    try:
        proc = _start(cmd, found, posix)
    except (OSError, ValueError):  # no room for the literals' file, no process: search in process
        return None
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.ExitStack() as stack:
        spool = stack.enter_context(tempfile.TemporaryFile()) if on_lines is not None and numbered else None
        out = _Output(proc.stdout, numbered, spool)
        out.start()
        scanned = _scan(proc, out, chunks, numbered, deadline)
        if scanned is None or spool is None:
            return scanned
        scanned.count = _emit_spooled(spool, scanned.lines, on_lines)  # type: ignore[arg-type]
        return scanned


def _scan(
    proc: subprocess.Popen[bytes], out: _Output, chunks: Iterable[tuple[bytes | None, int, int]], numbered: bool,
    deadline: Deadline | None,
) -> Scanned | None:
    """:func:`scan` once ``rg`` started: feed it, wait for it, check what it wrote."""
    assert proc.stdin is not None
    lines = _Lines()
    searched: int | None = None
    ok = False
    writer = _Writer(proc, GRACE_SECONDS)
    try:
        try:
            searched = _feed(writer, chunks, lines, deadline)
        except BrokenPipeError:
            return None
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                proc.stdin.close()
        # one bound for rg to finish what it was given and for its output to end
        end = time.monotonic() + GRACE_SECONDS + (max(0.0, deadline.left()) if deadline is not None else 0.0)
        try:
            status = proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None
        out.join(max(0.0, end - time.monotonic()))
        if out.is_alive() or out.error is not None or status not in (0, 1) or out.rest:
            return None
        ok = True
    finally:
        if not ok:
            _stop(proc, out)
    if not numbered:
        text = bytes(out.raw).strip()
        if not (text.isdigit() if status == 0 else not text):  # a count, or nothing when no line matched
            return None
        return Scanned(count=int(text) if text else 0, searched_lines=searched)
    if status == 1 and (out.numbers or out.spooled):
        return None
    numbers = _entry_numbers(lines, out.numbers)
    return Scanned(count=len(numbers), numbers=numbers, texts=out.texts, searched_lines=searched, lines=lines)


def _start(cmd: list[str], found: tuple[str, ...], posix: bool) -> subprocess.Popen[bytes]:
    """Start ``rg`` with the literals ``found``.  On POSIX they go in a private, unlinked
    file, as UTF-8 whatever the locale, and not on the command line, where any local user
    could read them; ``rg`` leads a process group of its own (see :func:`_kill`).  Windows
    passes the command line as UTF-16 (no encoding is involved), and the literals on it."""
    with contextlib.ExitStack() as stack:
        fds: tuple[int, ...] = ()
        if posix:
            listed = stack.enter_context(tempfile.TemporaryFile())
            listed.write(b"".join(lit.encode("utf-8") + b"\n" for lit in found))
            listed.flush()
            listed.seek(0)
            cmd = [*cmd, "-f", f"/dev/fd/{listed.fileno()}"]
            fds = (listed.fileno(),)
        else:
            cmd = [*cmd, *(arg for lit in found for arg in ("-e", lit))]
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                bufsize=0, pass_fds=fds, start_new_session=posix)


def _feed(
    write: _Writer, chunks: Iterable[tuple[bytes | None, int, int]], lines: _Lines, deadline: Deadline | None
) -> int | None:
    """Write the chunks; return None, or, when the deadline passed, the last line fed
    whole (every line before it was fed or skipped)."""
    at_line_end = True  # what was fed so far ends with a newline (or nothing was fed)
    run = True  # the next chunk fed starts a run (the first one, or one after skipped chunks)
    for raw, first_line, newlines in chunks:
        if raw is None:
            run = True
            continue
        if deadline is not None and deadline.left() <= 0:
            deadline.expired = True
            if at_line_end:
                return first_line - 1
            cut = raw.find(b"\n") + 1
            if cut:  # end the line the chunks fed began: up to this chunk's first newline
                write(raw[:cut])
                return first_line
        if run:
            lines.run(first_line)
            run = False
        write(raw)
        lines.newlines += newlines
        at_line_end = raw.endswith(b"\n")
    return None


class _Writer:
    """Writes into ``rg``'s standard input; a watchdog thread kills ``rg`` when one write
    has waited ``limit`` seconds (``rg`` stopped reading), which ends the write with
    BrokenPipeError instead of a hang."""

    def __init__(self, proc: subprocess.Popen[bytes], limit: float) -> None:
        assert proc.stdin is not None
        self.proc = proc
        self.raw_write = proc.stdin.write
        self.limit = limit
        self.since: float | None = None  # when the write in progress began
        self.done = threading.Event()
        self.dog = threading.Thread(target=self._watch, daemon=True, name="blobpad-rg-watchdog")
        self.dog.start()

    def _watch(self) -> None:
        while not self.done.wait(min(1.0, self.limit / 4)):
            since = self.since
            if since is not None and time.monotonic() - since > self.limit:
                _kill(self.proc)
                return

    def __call__(self, data: bytes) -> None:
        view = memoryview(data)
        self.since = time.monotonic()
        try:
            while view:
                n = self.raw_write(view)
                view = view[n:]
        except BrokenPipeError:
            raise
        except OSError as exc:  # Windows says EINVAL when the reader is gone
            raise BrokenPipeError(str(exc)) from exc
        finally:
            self.since = None

    def close(self) -> None:
        self.done.set()
        self.dog.join()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``rg`` and whatever it started (a wrapper's children hold its pipes too):
    on POSIX it leads a process group of its own."""
    with contextlib.suppress(OSError):
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()


def _stop(proc: subprocess.Popen[bytes], out: _Output) -> None:
    if proc.returncode is None or out.is_alive():  # rg, or a process it started, still holds a pipe
        _kill(proc)
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        proc.wait(timeout=10)
    with contextlib.suppress(OSError):
        if proc.stdout is not None:
            proc.stdout.close()
    out.join(10)
