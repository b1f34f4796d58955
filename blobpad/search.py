"""Searching bytes with RE2 under a time budget: patterns, line runs, the line counter.

The matching half of grep and count, on buffers only (:mod:`blobpad.reads` finds the
buffers of an entry and turns positions into line numbers and results).  Patterns are
compiled with RE2 (linear time: no pattern a model sends can hang the caller), bounded
in length, as UTF-8 bytes; a :class:`Deadline` sizes each RE2 call to about ``_SLICE``
seconds at the speed measured so far, so a search stops close to its budget whatever
the pattern costs per byte.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import re2

from .errors import HINT_FIXED, InvalidArgument, describe

__all__ = ["MAX_PATTERN", "SEARCH_TIMEOUT", "MAX_SPANS", "compile_pattern", "per_line", "check_timeout", "Deadline", "TimedOut",
           "cancel_on", "deadline_for", "strict_utf8",
           "LineCounter", "line_runs", "long_line", "bounded_find", "char_start", "next_char", "UNANCHORED", "finder"]

_Bytes = bytes | bytearray
#: ``Match(anchor, text, pos, endpos)`` of a compiled RE2: the spans of the match and its groups
_Find = Callable[..., list[tuple[int, int]]]

#: longest pattern accepted, in characters
MAX_PATTERN = 4096


#: most match spans kept per line: a pattern such as ``.`` matches every character
MAX_SPANS = 1000


#: matching lines that one batched RE2 call passes over while counting (see LineCounter)
_BATCH = 16


#: count() batches when a matching line starts within this many bytes of the previous one
_DENSE = 4096


#: the largest RE2 program (in instructions) count() batches; bigger patterns match one line per call
_MAX_BATCH_PROGRAM = 20_000


#: bytes of lines each way of counting runs untimed in each thread before it is measured (see
#: LineCounter._count): from the first, doubling, up to the most, while under the probe's CPU time
_PROBE = 8 << 10
_PROBE_MOST = 512 << 10
_PROBE_SECONDS = 0.005


#: a way of counting this many times slower than the other is not tried again (see LineCounter._count)
_FAR_BEHIND = 4


#: the time budget, in seconds, that the Toolbox, the CLI and the MCP server give grep and count
SEARCH_TIMEOUT = 5.0


#: under a time budget, each RE2 call is sized to take about this long at the speed measured so far
_SLICE = 0.01


#: bytes searched by the first RE2 call under a budget, and the least and most of any later one
_FIRST_WINDOW = 1 << 10


_MIN_WINDOW = 256


_MAX_WINDOW = 64 << 10


#: a line longer than the window is searched whole only if its probes took under 1/_MARGIN of the time left
_MARGIN = 4


UNANCHORED = re2._Anchor.UNANCHORED  # the binding under re2's pure-Python wrapper: no Match objects


ANCHOR_START = re2._Anchor.ANCHOR_START


ANCHOR_BOTH = re2._Anchor.ANCHOR_BOTH


class TimedOut(Exception):
    """The time budget of a grep or count ran out; ``line`` is the first line not searched,
    or ``pos`` the buffer offset where it starts (None when the caller knows better)."""

    def __init__(self, line: int | None = None, pos: int | None = None) -> None:
        super().__init__(line, pos)
        self.line = line
        self.pos = pos


def check_timeout(timeout: object, label: str = "timeout") -> float | None:
    """A search budget in seconds: None (no limit) or a positive finite number; else InvalidArgument."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
        isinstance(timeout, int) or math.isfinite(timeout)
    ) or timeout <= 0:
        raise InvalidArgument(f"{label} must be a positive number of seconds or None, not {describe(timeout)}")
    return float(min(timeout, 1e9))


_CANCEL = threading.local()
_NO_LIMIT = 1e9  # seconds: a budget that never runs out (as check_timeout caps), finite for the clocks


@contextlib.contextmanager
def cancel_on(event: threading.Event) -> Iterator[None]:
    """Searches (grep, count, matching lines, grep_session) started in this thread inside
    the block stop once ``event`` is set, from any thread, as if their time budget ran out
    (a caller that gave up on the answer: the MCP server's cancelled requests)."""
    previous = getattr(_CANCEL, "event", None)
    _CANCEL.event = event
    try:
        yield
    finally:
        _CANCEL.event = previous


def deadline_for(timeout: float | None) -> Deadline | None:
    """The :class:`Deadline` of a search given ``timeout`` seconds (None: no time limit),
    cancelled by the event of :func:`cancel_on` if any; None when neither bounds it."""
    event = getattr(_CANCEL, "event", None)
    if timeout is None and event is None:
        return None
    return Deadline(_NO_LIMIT if timeout is None else timeout, cancel=event)


class Deadline:
    """The time budget of one grep or count call, shared by its worker threads.

    It also sizes the RE2 calls: each searches a window of about ``_SLICE`` seconds
    at the speed measured so far (the first 1 KB), so the deadline is checked often
    whatever the pattern costs per byte.  ``cancel``: an event that, once set, spends
    the budget at once (see :func:`cancel_on`).
    """

    def __init__(self, seconds: float, cancel: threading.Event | None = None) -> None:
        self.end = time.monotonic() + seconds
        self.cancel = cancel
        self.window = _FIRST_WINDOW
        self.expired = False
        # searches too short to say anything about the speed alone, added up: [bytes, seconds]
        self._short = [0, 0.0]

    def left(self) -> float:
        if self.cancel is not None and self.cancel.is_set():
            return 0.0
        return self.end - time.monotonic()

    def check(self, line: int | None = None) -> None:
        """Raise TimedOut (naming ``line`` as the first not searched, when given) once the budget is spent."""
        if self.expired or self.left() <= 0:
            self.expired = True
            raise TimedOut(line)

    def timed(self, find: _Find, buf: _Bytes, pos: int, end: int) -> tuple[int, int]:
        """``find`` over ``buf[pos:end]`` (the whole buffer as context) if the budget is not
        spent (else TimedOut), the window adapted to how long it took; the first span."""
        self.check()
        t0 = time.monotonic()
        span = find(UNANCHORED, buf, pos, end)[0]
        scanned = (span[1] if span[0] >= 0 else end) - pos
        spent = time.monotonic() - t0
        if scanned >= _MIN_WINDOW:
            self.pace(scanned, spent)
        else:
            # A search that stops at a match a few bytes on says little about the speed
            # alone, but many of them do (a long line that matches every few bytes):
            # they are added up, the time of each call included, so the speed they give
            # is a lower bound.  Threads sharing the deadline may lose an update: that
            # only delays the measure.
            short = self._short
            short[0] += scanned
            short[1] += spent
            if short[0] >= _MIN_WINDOW:
                self.pace(short[0], short[1])
                short[0], short[1] = 0, 0.0
        return span

    def pace(self, scanned: int, spent: float) -> None:
        if scanned < _MIN_WINDOW:
            return  # too little to measure the speed
        fit = int(scanned * _SLICE / max(spent, 1e-6))
        self.window = max(_MIN_WINDOW, min(_MAX_WINDOW, 2 * self.window, fit))


def char_start(buf: _Bytes, q: int, lo: int) -> int:
    """``q`` moved back to the start of the UTF-8 character it falls in (not before ``lo``)."""
    k = q
    while k > lo and q - k < 3 and (buf[k] & 0xC0) == 0x80:
        k -= 1
    return k if (buf[k] & 0xC0) != 0x80 else q


def long_line(find: _Find, buf: _Bytes, start: int, end: int, dl: Deadline, *, exact: bool) -> tuple[int, int]:
    """The first match in the line ``buf[start:end]``, longer than one window, under a budget.

    The line is first searched in windows (each match found there is a real match of
    the line: the buffer is the context of ``^``, ``$`` and ``\\b``).  Without ``exact``
    the first such match is enough (counting only asks whether the line matches).
    Otherwise, or if the windows found nothing (a match may cross a window's edge),
    the whole line is searched in one call, which cannot be interrupted: it starts
    only if the windows took less than 1/_MARGIN of the time left, else TimedOut.
    Returns ``(-1, -1)`` when the line does not match.
    """
    t0 = time.monotonic()
    p = start
    while p < end:
        q = end if end - p <= dl.window else char_start(buf, p + dl.window, p + 1)
        span = dl.timed(find, buf, p, q)
        if span[0] >= 0 and not exact:
            return span
        p = q
    if dl.left() < _MARGIN * (time.monotonic() - t0):
        dl.expired = True
        raise TimedOut()
    dl.check()
    return find(UNANCHORED, buf, start, end)[0]


def bounded_find(find: _Find, buf: _Bytes, pos: int, size: int, dl: Deadline) -> tuple[int, int]:
    """``find(UNANCHORED, buf, pos, size)[0]`` (``buf[pos:]`` starts a line) in RE2 calls
    that each search whole lines of about one window, checking the deadline between
    them; a line longer than the window goes to :func:`long_line`.  Raises TimedOut
    with ``pos``: the lines before it were searched."""
    start = pos
    try:
        for start, end, long in line_runs(buf, pos, size, dl):
            # whole lines end before their newline: the context after them is that newline
            span = long_line(find, buf, start, end, dl, exact=True) if long else dl.timed(find, buf, start, end)
            if span[0] >= 0:
                return span
    except TimedOut:
        raise TimedOut(pos=start) from None
    return (-1, -1)


def line_runs(buf: _Bytes, pos: int, size: int, dl: Deadline) -> Iterator[tuple[int, int, bool]]:
    """Cut ``buf[pos:size]`` (``pos`` at a line start) for searching under a budget: runs
    of whole lines of about one window, ``(start, end of the last line before its
    newline (or size), False)``, or one line longer than the window, ``(start, its end,
    True)``."""
    while pos < size:
        w = dl.window
        if size - pos <= w:
            yield pos, size, False
            return
        nl = buf.rfind(b"\n", pos, pos + w)
        if nl < 0:  # the line at pos is longer than the window
            le = buf.find(b"\n", pos + w, size)
            nl = size if le < 0 else le
            yield pos, nl, True
        else:
            yield pos, nl, False
        pos = nl + 1


def re2_options(ignore_case: bool, literal: bool) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.never_nl = True  # like rg: a match never spans lines
    options.case_sensitive = not ignore_case
    options.literal = literal
    options.max_mem = 64 << 20
    options.never_capture = True  # only whole-match spans are used: lets RE2 stay in its DFA
    return options


#: google-re2's module cache keeps the last 128 patterns compiled in the process, each with
#: up to ``max_mem`` of automata: a model's hostile patterns would hold gigabytes after their
#: calls ended.  A pattern whose program is larger than _KEEP_PROGRAM empties that cache at
#: once (it lives as long as the search that holds it), and the cache is emptied whenever it
#: would hold more than _KEEP_PATTERNS patterns; small patterns stay compiled, their automata
#: warm, from one call to the next (a search repeated by a model, or paged, does not build
#: its automata again).
_KEEP_PROGRAM = 2000
_KEEP_PATTERNS = 8
_kept: set[tuple[bytes, tuple[Any, ...]]] = set()
_kept_lock = threading.Lock()


#: RE2 compiles a program in about 1.3 microseconds per instruction, holding the GIL (every
#: thread of the process waits), and ``max_mem`` lets one have millions: ``[\\pL\\pN]{1000}``
#: twice, 28 characters, took 3.5 s a compile.  So a pattern is first compiled with this
#: ``max_mem``, under which RE2 stops as soon as the program passes about 65,000 instructions
#: (measured: ``\\pL{55}``, 65,784, is the largest such repetition it builds; 50 ms), and a
#: larger one is refused (:class:`_TooLarge`).  The longest literal pattern
#: (:data:`MAX_PATTERN`) needs about 5,000.  A pattern that passes is compiled again with the
#: full ``max_mem``, which its automata use.
_PROBE_MEM = 1 << 20


class _TooLarge(Exception):
    """A pattern whose program is over :data:`_PROBE_MEM`'s cap."""


def _compiled(raw: bytes, options: Any) -> Any:
    """``re2.compile``, refusing a program over :data:`_PROBE_MEM`'s cap before it is built
    (:class:`_TooLarge`), and keeping at most a few small patterns in google-re2's module cache
    (see :data:`_KEEP_PROGRAM`)."""
    key = (raw, tuple(getattr(options, name) for name in re2.Options.NAMES))
    with _kept_lock:
        known = key in _kept
    if not known:
        probe = re2.Options()
        for name, value in zip(re2.Options.NAMES, key[1], strict=True):
            setattr(probe, name, value)
        probe.max_mem = _PROBE_MEM
        program = re2._re2.RE2(raw, probe)
        if not program.ok() and "too large" in str(program.error()):
            raise _TooLarge
    regex = re2.compile(raw, options)
    with _kept_lock:
        if key not in _kept:
            if regex._regexp.ProgramSize() > _KEEP_PROGRAM or len(_kept) >= _KEEP_PATTERNS:
                re2.purge()
                _kept.clear()
            if regex._regexp.ProgramSize() <= _KEEP_PROGRAM:
                _kept.add(key)
    return regex


#: The byte sequences RE2's UTF-8 mode reads as one character though UTF-8 forbids them: an
#: encoded surrogate (ED A0-BF xx), an overlong three- or four-byte form (E0 80-9F xx, F0
#: 80-8F xx xx) and a code point past U+10FFFF (F4 90-BF xx xx).  rg matches no character
#: there, and decoding with "replace" shows one U+FFFD per byte.  (RE2 refuses the other
#: invalid forms itself.)  Text entries are strict UTF-8 and hold none.
_LAX_UTF8 = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]|\xe0[\x80-\x9f][\x80-\xbf]|\xf0[\x80-\x8f][\x80-\xbf]{2}"
                       rb"|\xf4[\x90-\xbf][\x80-\xbf]{2}")


def _invalid(m: re.Match[bytes]) -> bytes:
    return b"\xff" * (m.end() - m.start())


def strict_utf8(buf: _Bytes) -> _Bytes:
    """``buf`` as RE2 must search binary content: each byte of a sequence of
    :data:`_LAX_UTF8` replaced by 0xFF, a byte that is never part of a character, so that
    no pattern matches there (as with rg); the same length, so every offset holds, and
    the same text decoded with "replace".  ``buf`` itself when it holds none.  Applied to
    each chunk: none of these sequences spans two, as the chunker never cuts before a
    continuation byte (:func:`blobpad.chunking.cut_chunks`), so pieces joined stay strict."""
    if _LAX_UTF8.search(buf) is None:
        return buf
    return _LAX_UTF8.sub(_invalid, buf)


def finder(regex: Any) -> _Find:
    """The match function of ``regex`` (:func:`compile_pattern`'s) whose matches all start and end
    between characters.

    RE2 searches bytes: a pattern that can match the empty string (``\\B``, ``x*``, ``^``) can
    match it between two bytes of one character (``\\B``, ASCII-only, holds between the bytes of
    ``é``), and a span there is no position in the text (decoding up to it raised
    UnicodeDecodeError).  Such a match is skipped and the search goes on after that character,
    as a search of the decoded text would.  A pattern that cannot match the empty string
    consumes whole characters (in UTF-8 mode), and gets RE2's own function, at no cost."""
    match = regex._regexp.Match
    if not matches_empty(regex):
        return match  # type: ignore[no-any-return]

    def find(anchor: Any, buf: _Bytes, pos: int, end: int) -> list[tuple[int, int]]:
        found = match(anchor, buf, pos, end)
        s, e = found[0]
        while s >= 0 and s == e and inside_char(buf, s):
            if anchor != UNANCHORED:
                return [(-1, -1)]
            p = next_char(buf, char_start(buf, s, max(0, s - 3)), len(buf))
            if p > end:
                return [(-1, -1)]
            found = match(anchor, buf, p, end)
            s, e = found[0]
        return found  # type: ignore[no-any-return]

    return find


def matches_empty(regex: Any) -> bool:
    """Whether ``regex`` (:func:`compile_pattern`'s) can match the empty string (``\\B``, ``x*``, ``^``)."""
    return bool(regex._regexp.Match(ANCHOR_BOTH, b"", 0, 0)[0][0] >= 0)


def inside_char(buf: _Bytes, q: int) -> bool:
    """Whether ``q`` falls between two bytes of one character of ``buf`` (a character as
    ``decode("utf-8", "replace")`` reads it: an invalid byte is one)."""
    if not 0 < q < len(buf) or (buf[q] & 0xC0) != 0x80:
        return False
    k = char_start(buf, q, max(0, q - 3))
    return k < q and next_char(buf, k, len(buf)) > q


def encode_pattern(pattern: object) -> bytes:
    if not isinstance(pattern, str):
        raise InvalidArgument(f"pattern must be a string, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise InvalidArgument(f"pattern is {len(pattern)} characters long; the limit is {MAX_PATTERN}")
    try:
        return pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("pattern contains lone surrogates; pass valid Unicode") from None


_FLAG_GROUP = re.compile(rb"\(\?([imsU]*)(?:-([imsU]*))?([:)])")


def per_line(raw: bytes) -> bytes:
    """The RE2 pattern ``raw`` rewritten so that it means on a buffer of many lines what it
    means on each line alone (what ``rg`` reports): ``\\A`` and ``\\z`` become ``^`` and ``$``
    (the pattern runs in multi-line mode), and a flag group that turns multi-line mode
    off (``(?-m)``, ``(?i-m:...)``) no longer does.  Without this, they would match at
    the starts and ends of the buffers grep happens to search (chunks, pieces of long
    lines), not of lines.  Quotes (``\\Q...\\E``) and character classes are left as they
    are (RE2 refuses ``\\A`` and ``\\z`` in a class).  Raise InvalidArgument for ``\\C``."""
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        ch = raw[i]
        if ch == 0x5C and i + 1 < n:  # a backslash and what it escapes
            escaped = raw[i + 1]
            if escaped == 0x43:  # C
                raise InvalidArgument(
                    "invalid pattern: \\C (any single byte) is not supported: it can match part of a "
                    "character, or a line's newline, and grep reports characters within lines; use . for "
                    "any character", hint=HINT_FIXED,
                )
            if escaped == 0x51:  # Q: quoted up to \E, or to the end
                end = raw.find(b"\\E", i + 2)
                stop = n if end < 0 else end + 2
                out += raw[i:stop]
                i = stop
                continue
            out += b"^" if escaped == 0x41 else b"$" if escaped == 0x7A else raw[i : i + 2]  # \A, \z
            i += 2
            continue
        if ch == 0x5B:  # [: a class, copied whole
            stop = _class_end(raw, i)
            out += raw[i:stop]
            i = stop
            continue
        if ch == 0x28:  # (: a flag group loses a "-m"
            group = _FLAG_GROUP.match(raw, i)
            if group is not None and group.group(2) is not None and b"m" in group.group(2):
                on, off = group.group(1), group.group(2).replace(b"m", b"")
                out += b"(?" + on + (b"-" + off if off else b"") + group.group(3)
                i = group.end()
                continue
        out.append(ch)
        i += 1
    return bytes(out)


def _class_end(raw: bytes, i: int) -> int:
    """Where the character class that starts at ``raw[i]`` (a ``[``) ends, past its ``]``
    (RE2's reading: a ``]`` right after ``[`` or ``[^`` is a member, ``[:name:]`` is one
    item, a backslash escapes the next byte); the end of ``raw`` if it never closes."""
    n = len(raw)
    j = i + 1
    if j < n and raw[j] == 0x5E:  # ^
        j += 1
    if j < n and raw[j] == 0x5D:  # ] as the first member
        j += 1
    while j < n:
        c = raw[j]
        if c == 0x5C:
            j += 2
            continue
        if c == 0x5B and raw.startswith(b"[:", j):
            close = raw.find(b":]", j + 2)
            if close >= 0:
                j = close + 2
                continue
        if c == 0x5D:
            return j + 1
        j += 1
    return n


_NEWLINE_ESCAPE = re.compile(rb"\\(?:n|x0[aA]|x\{0*[aA]\}|012|12(?![0-7]))")


def _holds_line_break(raw: bytes, fixed: bool) -> bool:
    """Whether the pattern ``raw`` names a line break: a newline, or in a regex one of its
    escapes (``\\n``, ``\\x0a``, ``\\x{a}``, ``\\012``; an escaped backslash before an ``n`` is
    not one).  A match never spans lines, so such a pattern could never match (rg refuses it too)."""
    if b"\n" in raw:
        return True
    if fixed:
        return False
    at = 0
    while (at := raw.find(b"\\", at)) >= 0:
        if raw.startswith(b"\\Q", at):  # quoted up to \E: every character in it stands for itself
            end = raw.find(b"\\E", at + 2)
            if end < 0:
                return False
            at = end + 2
            continue
        if _NEWLINE_ESCAPE.match(raw, at):
            return True
        at += 2  # past the backslash and the character it escapes
    return False


#: The size of RE2's program of a pattern that can match nothing: its one instruction fails.
#: With ``never_nl`` (a match never spans lines), a pattern that needs a line break, or a
#: character class left with no character once the newline is taken out of it, compiles to
#: that program, whatever the syntax that named the break (``[\\n]``, ``\\x{A}``, a negated
#: class of everything else).
_NEVER_MATCHES = 1


def compile_pattern(pattern: object, *, ignore_case: bool = False, fixed: bool = False) -> Any:
    """Compile an untrusted pattern with RE2; raise InvalidArgument with RE2's reason.

    The pattern is checked as written first, so an error quotes the caller's pattern
    and not the ``(?m)`` put in front of it.  A pattern naming a line break is refused:
    matches never span lines, so it would silently match nothing; so is any other pattern
    that RE2 finds can never match (:data:`_NEVER_MATCHES`).
    """
    raw = encode_pattern(pattern)
    if _holds_line_break(raw, bool(fixed)):
        raise InvalidArgument(
            "the pattern holds a line break (a newline or \\n): a match never spans lines (as with rg), so it "
            "could match nothing; search for the part of one line (e.g. the text before the break), then read "
            "the lines around the matches", hint=None if fixed else HINT_FIXED,  # a literal already: no advice to pass one
        )
    options = re2_options(ignore_case, bool(fixed))
    try:
        if fixed:
            regex = _compiled(raw, options)
        else:
            try:
                regex = _compiled(b"(?m)" + per_line(raw), options)
            except re2.error:
                _compiled(raw, options)  # the error of the pattern as written, which quotes the caller's
                raise
    except _TooLarge:
        raise InvalidArgument(
            "invalid pattern: too large to compile (RE2 would build a program of over 65,000 instructions, "
            "as for a large class repeated many times, such as \\pL{1000}); repeat it fewer times, or use a "
            "plainer class such as \\w or .", hint=HINT_FIXED,
        ) from None
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidArgument(
            f"invalid pattern: {str(reason)[:300]}; patterns use RE2 syntax "
            "(no backreferences or look-around)", hint=HINT_FIXED,
        ) from None
    if regex._regexp.ProgramSize() <= _NEVER_MATCHES:
        raise InvalidArgument(
            "the pattern can never match: a part of it matches only a line break, or a character class in "
            "it holds no character (as [^\\x00-\\x09\\x0b-\\x{10ffff}], whose one character is the newline); a "
            "match never spans lines (as with rg)", hint=HINT_FIXED,
        )
    return regex


class LineCounter:
    """Counts the lines that hold a match, like ``rg -c``, with few RE2 calls.

    The pattern as compiled by :func:`compile_pattern` finds the next matching line,
    and ``bytes.find`` skips the rest of it: what is counted never depends on text
    added around the caller's pattern.  Each call costs about a microsecond of
    binding overhead, though, which is all the time when most lines match; so where
    matching lines follow each other closely in valid UTF-8, one call of a second
    regex passes the next ``_BATCH - 1`` of them.  Each of its ``_BATCH - 1`` parts is
    ``[^\\n]*$\\C`` (the rest of a line and its newline: ``$`` pins ``\\C``, any byte, to
    the newline), lazily repeated to skip non-matching lines, then ``[^\\n]*?(?:P)``:
    the pattern inside the next line.  That regex puts the pattern in a group, so it
    is only built where the group cannot be escaped: for literals (escaped) and for
    patterns without ``\\Q`` (whose quote, left open, would run past the group; a
    caller's ``\\C`` is refused by :func:`compile_pattern`).  A batch that fails (fewer matching lines
    are left) only ends batching for the rest of the buffer.  Invalid UTF-8 stops
    ``[^\\n]``, so binary content is counted one matching line per call.
    """

    def __init__(self, pattern: str, *, ignore_case: bool, fixed: bool) -> None:
        self._args = (pattern, ignore_case, fixed)
        self._mine = threading.local()  # each thread's compiled pair (see _regexes)
        single, batch = self._regexes()
        self._find = single
        self._has_batch = batch is not None
        self.deadline: Deadline | None = None
        # [bytes, seconds] counted with and without the batch regex (see _count); the
        # worker threads share them, and a lost update only blurs the measure
        self._speed = [[0, 0.0], [0, 0.0]]
        self._calls = 0

    def _regexes(self) -> tuple[_Find, _Find | None]:
        """This thread's (single, batch) match functions, compiled on its first use: RE2
        guards each compiled regex's DFA cache with a lock, which threads sharing one
        take turns at on every call (a count on two threads ran no faster than on one)."""
        pair: tuple[_Find, _Find | None] | None = getattr(self._mine, "pair", None)
        if pair is not None:
            return pair
        pattern, ignore_case, fixed = self._args
        compiled = compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
        single = compiled._regexp
        raw = encode_pattern(pattern) if fixed else per_line(encode_pattern(pattern))
        batch_find: _Find | None = None
        too_big = single.ProgramSize() * (_BATCH - 1) > _MAX_BATCH_PROGRAM  # not worth compiling (up to a second)
        # a pattern that can match empty goes line by line through finder's (a match inside a character is none)
        if not too_big and not matches_empty(compiled) and (fixed or b"\\Q" not in raw):  # compile_pattern refused \C
            body = b"(?:" + (re2.escape(raw) if fixed else raw) + b")"
            line = b"[^\\n]*$\\C(?:[^\\n]*$\\C)*?[^\\n]*?" + body
            try:
                batch = _compiled(b"(?m)" + line * (_BATCH - 1), re2_options(ignore_case, False))
            except re2.error:
                batch = None  # e.g. too large for RE2's memory budget: one line per call
            if batch is not None and batch._regexp.ProgramSize() <= _MAX_BATCH_PROGRAM:
                batch_find = batch._regexp.Match
        pair = (finder(compiled), batch_find)
        self._mine.pair = pair
        return pair

    def count(self, buf: _Bytes, pos: int, size: int, utf8: bool) -> int:
        """The number of matching lines of ``buf[pos:size]``, which starts at a line start
        and ends just past a newline or at the end of the content; ``utf8`` says it is
        valid UTF-8.

        Under a budget (``deadline``), whole lines of about one window are counted at a
        time and a longer line goes to :func:`long_line`; TimedOut is raised when the
        budget is spent (the caller knows which lines were counted before)."""
        dl = self.deadline
        if dl is None:
            return self._count(buf, pos, size, utf8)
        n = 0
        for start, end, long in line_runs(buf, pos, size, dl):
            dl.check()
            if long:
                n += long_line(self._find, buf, start, end, dl, exact=False)[0] >= 0
                continue
            stop = end + 1 if end < size else end  # counting takes the lines with their newline
            t0 = time.monotonic()
            n += self._count(buf, start, stop, utf8)
            dl.pace(stop - start, time.monotonic() - t0)
        return n

    def _count(self, buf: _Bytes, pos: int, size: int, utf8: bool) -> int:
        """Count ``buf[pos:size]`` with or without the batch regex, whichever has been
        faster on this content so far: the batch saves RE2 calls where most lines match,
        but it is a big regex, and a pattern that already defeats RE2's DFA (such as
        ``.*[0-9].{30}$``) makes it 30 times slower than one call per matching line.

        Each way is measured on whole calls (a chunk each, under count()): the first
        calls try each way once, and calls 4, 8, 16... try the slower way again (the
        content may change) unless it was more than ``_FAR_BEHIND`` times slower.  The
        measure is of this thread's CPU time (a wait for the GIL is not the regex's
        cost), after each way ran untimed on this thread's first lines (:meth:`_warm_up`:
        RE2 builds its DFA as it goes, so a first run is many times slower)."""
        if not self._has_batch or not utf8:
            return self._count_with(buf, pos, size, False)
        self._calls += 1
        calls = self._calls
        (b_bytes, b_secs), (p_bytes, p_secs) = self._speed
        if not (b_bytes and b_secs > 0 and p_bytes and p_secs > 0):
            batched = not (b_bytes and b_secs > 0)  # try the batch first, then one call per line
        else:
            lead = (b_bytes / b_secs) / (p_bytes / p_secs)  # how many times faster the batch went
            faster = lead >= 1
            close = 1 / _FAR_BEHIND <= lead <= _FAR_BEHIND
            batched = (not faster) if close and calls >= 4 and calls & (calls - 1) == 0 else faster
        warm: set[bool] = self._mine.__dict__.setdefault("warm", set())
        if batched not in warm:
            warm.add(batched)
            self._warm_up(buf, pos, size, batched)
        return self._timed_count(buf, pos, size, batched)

    def _warm_up(self, buf: _Bytes, pos: int, size: int, batched: bool) -> None:
        """Run one way of counting untimed on this thread's first lines, so that RE2 has
        built the states of its DFA those lines need before the way is measured (the batch
        regex's first 100 KB took 15 times as long as the next ones, and one call per line
        was then chosen for a whole count, 1.5 times slower): ``_PROBE`` bytes, then twice
        as many, up to ``_PROBE_MOST``, stopping once ``_PROBE_SECONDS`` of CPU time are
        spent (a pattern that defeats the DFA costs little here)."""
        t0 = time.thread_time()
        at, step = pos, _PROBE
        while at < size and at - pos < _PROBE_MOST and time.thread_time() - t0 < _PROBE_SECONDS:
            end = buf.find(b"\n", min(at + step, size) - 1, size) + 1 or size
            self._count_with(buf, at, end, batched)
            at, step = end, step * 2

    def _timed_count(self, buf: _Bytes, pos: int, size: int, batched: bool) -> int:
        t0 = time.thread_time()  # this thread's CPU time: a wait for the GIL is not the regex's cost
        n = self._count_with(buf, pos, size, batched)
        slot = self._speed[0 if batched else 1]
        slot[0] += size - pos
        slot[1] += max(time.thread_time() - t0, 1e-9)
        return n

    def _count_with(self, buf: _Bytes, pos: int, size: int, batched: bool) -> int:
        find, batch = self._regexes()
        if not batched:
            batch = None
        n = 0
        while pos < size:
            start, end = find(UNANCHORED, buf, pos, size)[0]
            if start < 0 or (start == size and buf[size - 1] == 10):
                break  # none, or an empty match after the last newline: no line is there
            n += 1
            if batch is not None and start - pos < _DENSE:
                while True:
                    s, e = batch(ANCHOR_START, buf, end, size)[0]
                    if s < 0 or (e == size and buf[size - 1] == 10):
                        batch = None  # fewer than _BATCH - 1 matching lines follow: one by one from here
                        break
                    n += _BATCH - 1
                    end = e
            nl = buf.find(b"\n", end, size)
            if nl < 0:
                break
            pos = nl + 1
        return n


def next_char(buf: _Bytes, p: int, end: int) -> int:
    """Where the character at ``p`` ends: after its UTF-8 sequence, or after the bytes
    that ``decode("utf-8", "replace")`` turns into one U+FFFD."""
    lead = buf[p]
    if lead < 0x80:
        return p + 1
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    try:
        bytes(buf[p : min(p + size, end)]).decode("utf-8")
    except UnicodeDecodeError as exc:
        return p + max(1, exc.end)
    return p + size
