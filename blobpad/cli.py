"""The ``blobpad`` command: the library's second face.

Every subcommand is a thin layer over one :class:`blobpad.Store` method, in the way
sqlite-utils' CLI sits on its Python API: ``put`` is ``Store.put``, ``read --lines``
is ``Store.lines``, ``grep`` is ``Store.grep``/``Store.count``, ``grep-session`` is
``Store.grep_session``, ``ls`` is ``Store.entries`` and so on.  The CLI adds only what a shell needs:

* content goes to stdout unchanged (``read ID --lines 10:20`` prints what
  ``sed -n 10,20p`` prints on the original, and ``--lines -100:-1`` the last hundred
  lines; ``grep`` prints every matching line, as ``rg -n`` does, unless ``-m`` caps them);
* errors are one line on stderr (``blobpad: error: ...``), never a traceback, with the
  error's advice in the command line's words (:meth:`blobpad.BlobpadError.render`);
* sizes are shown in binary units (KiB, MiB, GiB: 1 MiB is 1,048,576 bytes) and given
  in bytes in JSON (``size_bytes``, the same name in ``put``, ``stat`` and ``ls --json``);
* exit codes: 0 success, 1 not found / no match / ``verify`` or ``gc`` found damage,
  2 usage errors, bad input and every other failure, 3 ``grep`` ran out of its
  ``--timeout`` (5 s by default; what it printed covers the lines it searched, and
  stderr says which), 130 on Ctrl-C;
* a progress bar (tqdm) on stderr for large puts, only when stderr is a terminal.

A ``--turn`` written as a canonical whole number is that integer: ``--turn 3`` stores
the integer ``3``, as a runtime calling the library with ``turn=3`` does, and ``ls
--turn 3`` lists those entries; anything else (``03``, ``3a``, ``step-3``) is kept as
the string given.

Ids are accepted in either case (``485D7BEAE4E144EB`` is ``485d7beae4e144eb``), as the
library and the tools accept them.

Run ``blobpad --help`` or ``blobpad COMMAND --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import pathlib
import re
import shutil
import stat as stat_module
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, NoReturn

from . import __version__
from .errors import HINT_NOTEPAD_SIZE, BlobpadError, InvalidArgument, NotFound, check_turn, one_line
from .index import Entry, parse_id
from .reads import SEARCH_TIMEOUT, compile_pattern, line_span
from .search import strict_utf8
from .store import Store
from .units import ascii_integer, human_size, non_negative, positive, seconds_or_zero

__all__ = ["main", "build_parser"]

#: exit codes
OK, NOT_FOUND, USAGE = 0, 1, 2
#: grep ran out of its --timeout: what it printed covers the lines it searched
TIMED_OUT = 3
#: characters kept at each end of a text summary
SUMMARY_EDGE = 500
#: inputs larger than this get a progress bar (when stderr is a terminal)
PROGRESS_THRESHOLD = 32 << 20
#: seconds before the bar of an input of unknown size appears (a quick pipe shows none)
PROGRESS_DELAY_UNKNOWN = 0.5
_STREAM_BLOCK = 1 << 20
#: --ttl not given: the library's default applies
_DEFAULT_TTL: Any = object()


#: Arguments that start with "-" but are values: a negative number or A:B span (-5, -100:-1, -500:, -2.5).
_NEGATIVE_VALUE = re.compile(r"^-\d+(?::-?\d*)?$|^-\d*\.\d+$")


class UsageError(Exception):
    """A bad command line or bad input detected by the CLI itself (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``blobpad: error: ...``, and that
    takes a span with a negative start as a value (``--lines -100:-1``, ``--range -500:``),
    as it takes a negative number."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (see '{self.prog} --help')")
        raise SystemExit(USAGE)


def _fail(message: str) -> None:
    """Print one error line on stderr."""
    one_line = " ".join(str(message).split())
    try:
        sys.stderr.write(f"blobpad: error: {one_line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _note(message: str) -> None:
    """Print one informational line on stderr (never on stdout, which carries content)."""
    try:
        sys.stderr.write(f"blobpad: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# -- output -------------------------------------------------------------------------------


def _out() -> IO[bytes]:
    if sys.stdout is None:  # started with stdout closed (>&-)
        raise UsageError("standard output is closed; redirect it to a file or /dev/null")
    return sys.stdout.buffer


def _write(data: str | bytes) -> None:
    """Write content to stdout exactly: bytes as they are, text as UTF-8."""
    _out().write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)


def _println(text: str = "") -> None:
    _write(text + "\n")


def _json_line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _print_json(obj: Any) -> None:
    _println(json.dumps(obj, ensure_ascii=False, indent=2))


# -- argument types -----------------------------------------------------------------------

_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> float | None:
    """``3600``, ``90s``, ``30m``, ``2h``, ``7d`` -> seconds; ``never`` -> None."""
    t = text.strip().lower()
    if t in ("never", "none"):
        return None
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([smhd]?)", t)  # ASCII digits: \d takes "３"
    if not m:
        raise argparse.ArgumentTypeError(f"invalid TTL {text[:100]!r}: use seconds (3600), 90s, 30m, 2h, 7d or 'never'")
    seconds = float(m.group(1)) * _TTL_UNITS.get(m.group(2) or "s", 1)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid TTL {text[:100]!r}: it must be positive (use 'never' for no expiry)")
    return seconds


def parse_meta(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` -> (key, value); the value stays a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"invalid --meta {text[:100]!r}: use KEY=VALUE")
    return key, value


def _turn(text: str) -> str | int:
    """``--turn``: a whole number written canonically ("3", "-1", not "03") is that integer,
    as a runtime calling the library with ``turn=3`` stores it; anything else is a string."""
    n = ascii_integer(text)
    if n is None or str(n) != text:
        return text
    try:
        check_turn(n)  # the library's one check: an integer it takes (up to 2**62), else the text
    except InvalidArgument:
        return text
    return n


def _context(text: str) -> int:
    """``-A``, ``-B``, ``-C``: a number of context lines, 0 to 1000 (the library's limit)."""
    n = non_negative(text)
    if n > 1000:
        raise argparse.ArgumentTypeError(f"invalid number {text[:100]!r}: at most 1000 context lines")
    return n


def _add_match_options(p: argparse.ArgumentParser) -> None:
    """The options grep and grep-session share: how to match, and the context lines."""
    p.add_argument("-i", "--ignore-case", action="store_true", help="case-insensitive")
    p.add_argument("-F", "--fixed-strings", dest="fixed", action="store_true", help="the pattern is a literal string")
    p.add_argument("-A", "--after-context", dest="after", type=_context, metavar="N", help="N lines after each match")
    p.add_argument("-B", "--before-context", dest="before", type=_context, metavar="N", help="N lines before each match")
    p.add_argument("-C", "--context", type=_context, metavar="N", help="N lines before and after each match (at most 1000)")


def _timeout(text: str) -> float | None:
    """``--timeout``: seconds, or 0 for no limit."""
    return seconds_or_zero(text) or None


def _int_or_none(text: str, what: str, spec: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    n = ascii_integer(text)
    if n is None:
        raise UsageError(f"invalid {what} {spec[:100]!r}: use A:B with integers, like 100:200")
    return n


def parse_slice(spec: str, what: str) -> tuple[int, int | None]:
    """``A:B``, ``A:`` or ``:B`` -> (start, end) with Python slice semantics (negatives count from the end)."""
    if ":" not in spec:
        raise UsageError(
            f"invalid {what} {spec[:100]!r}: use A:B (A: to the end, :B from the start, negatives count from the end)"
        )
    a, b = spec.split(":", 1)
    start = _int_or_none(a, what, spec)
    return (start or 0), _int_or_none(b, what, spec)


def parse_lines(spec: str) -> tuple[int, int | None]:
    """``A:B`` (1-based, inclusive), ``A:``, ``:B`` or ``N`` -> (first, last or None).

    Negative numbers count from the end (``-100:-1``: the last hundred lines); the
    rest follows ``sed -n A,Bp`` (``5:4`` is line 5 alone), see :func:`blobpad.reads.line_span`.
    """
    if ":" not in spec:
        n = _int_or_none(spec, "--lines", spec)
        if n is None:
            raise UsageError("invalid --lines '': use A:B, 1-based and inclusive, like 10:20 (or -100:-1)")
        first, last = n, n  # type: int, int | None
    else:
        a, b = spec.split(":", 1)
        start = _int_or_none(a, "--lines", spec)
        first = 1 if start is None else start
        last = _int_or_none(b, "--lines", spec)
    if first == 0 or last == 0:
        raise UsageError(f"invalid --lines {spec[:100]!r}: there is no line 0; lines are numbered from 1, like sed, "
                         "and negative numbers count from the end (-1 is the last line)")
    return first, last


# -- the store ----------------------------------------------------------------------------


def _open(args: argparse.Namespace) -> Store:
    """The store of ``--db`` (or its default); for one that lives in this process only
    (``memory://``), a note on stderr: every command starts it empty, and what it writes
    is gone when the command ends (a put that printed an id would be silently lost)."""
    from .store import open as open_store

    store = open_store(args.db)
    if not store.engine.capabilities.persistent:
        _note(f"note: {store.path} is an in-memory store: it lives in this command only, which starts it empty, and "
              "what the command writes is gone when it ends; use a directory or redis://host:port/db to keep "
              "entries between commands")
    return store


def _put_view(store: Store, entry: Entry) -> dict[str, Any]:
    """What ``put`` prints; ``summary`` is null if the entry expired before it was read back."""
    from .offload import entry_summary

    try:
        text: str | None = entry_summary(store, entry, SUMMARY_EDGE, SUMMARY_EDGE)
    except NotFound:
        text = None  # a TTL shorter than the put itself
    return {
        "id": entry.id, "size_bytes": entry.size_bytes, "kind": entry.kind, "lines": entry.lines,
        "chars": entry.chars, "expires_at": entry.expires_at, "summary": text,
    }


# -- put ----------------------------------------------------------------------------------


class _ProgressReader:
    """A binary file object whose reads advance a tqdm bar."""

    def __init__(self, fh: IO[bytes], bar: Any) -> None:
        self._fh = fh
        self._bar = bar

    def read(self, n: int = -1) -> bytes:
        block = self._fh.read(n)
        if block:
            self._bar.update(len(block))
        return block


def _input_size(fh: IO[bytes]) -> int | None:
    try:
        st = os.fstat(fh.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return st.st_size if stat_module.S_ISREG(st.st_mode) else None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _want_progress(size: int | None, disabled: bool) -> bool:
    """A bar only on a terminal, never in pipes, and only for large or unknown sizes."""
    return not disabled and _isatty(sys.stderr) and (size is None or size > PROGRESS_THRESHOLD)


def _progress_bar(size: int | None) -> Any:
    """A tqdm bar on stderr, in bytes; for an unknown size it shows only after a delay."""
    from tqdm import tqdm

    try:
        known_width = os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError):
        known_width = False
    return tqdm(
        total=size, unit="B", unit_scale=True, unit_divisor=1024, desc="put", file=sys.stderr, leave=False,
        # a terminal that reports no width (0 columns) would get an empty bar
        dynamic_ncols=known_width, ncols=None if known_width else 80,
        delay=0 if size is not None else PROGRESS_DELAY_UNKNOWN,
    )


def _cmd_put(args: argparse.Namespace) -> int:
    options: dict[str, Any] = dict(
        session=args.session, turn=args.turn, name=args.name, tool=args.tool, meta=dict(args.meta or []),
        exclusive=args.exclusive,
    )
    if args.ttl is not _DEFAULT_TTL:
        options["ttl"] = args.ttl
    no_progress = args.no_progress
    source: Any
    if args.file == "-":
        source = _stdin("pass a file instead")
        size = _input_size(source)
        no_progress = no_progress or _isatty(source)  # someone is typing the content: no bar over it
    else:
        # The library reads a path itself: it knows the size, and an identical content
        # already stored is recognised without cutting anything.
        if not args.file:
            raise UsageError("the file name is empty; pass a file, or - for stdin")
        source = pathlib.Path(args.file)
        try:
            st = os.stat(source)
        except FileNotFoundError:
            raise UsageError(f"no file at {args.file[:100]!r}") from None
        if stat_module.S_ISDIR(st.st_mode):
            raise UsageError(f"{args.file[:100]!r} is a directory; pass a file, or - for stdin")
        size = st.st_size if stat_module.S_ISREG(st.st_mode) else None
    with contextlib.ExitStack() as stack:
        bar = None
        if _want_progress(size, no_progress):
            if isinstance(source, pathlib.Path):
                source = stack.enter_context(open(source, "rb"))
            bar = stack.enter_context(_progress_bar(size))
            source = _ProgressReader(source, bar)
        store = stack.enter_context(_open(args))
        _out()  # a closed stdout is refused before anything is stored
        entry = store.put(source, **options)
        if bar is not None:
            bar.close()  # before the JSON, which would otherwise land on the bar's line
        try:
            _println(_json_line(_put_view(store, entry)))
            sys.stdout.flush()  # a full or broken stdout fails here, while the id can still be told
        except (OSError, UsageError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            _silence_stdout()  # what stays buffered would fail again at exit (exit status 120)
            raise UsageError(
                f"the content was stored as entry {entry.id}, but its record could not be written to standard "
                f"output ({reason}); read it with blobpad read {entry.id}, or delete it with blobpad rm {entry.id}"
            ) from None
    return OK


# -- read ---------------------------------------------------------------------------------


def _cmd_read(args: argparse.Namespace) -> int:
    # Parse the A:B first: a malformed one is a usage error whatever the id.
    window = parse_lines(args.lines) if args.lines is not None else None
    span = parse_slice(args.range, "--range") if args.range is not None else None
    byte_span = parse_slice(args.bytes, "--bytes") if args.bytes is not None else None
    with _open(args) as store:
        eid = args.id
        if args.full:
            with store.stream(eid) as fh:
                while block := fh.read(_STREAM_BLOCK):
                    _write(block)
        elif args.head is not None:
            _write_range(store, eid, 0, args.head)
        elif args.tail is not None:
            if args.tail:
                _write_range(store, eid, -args.tail, None)
            else:
                store.stat(eid)  # an unknown id is an error still
        elif span is not None:
            _write_range(store, eid, *span)
        elif byte_span is not None:
            _write_bytes(store, eid, *byte_span)
        else:
            assert window is not None
            _read_lines(store, eid, *window)
    return OK


def _write_range(store: Store, eid: str, start: int, end: int | None) -> None:
    """Write ``store.range(eid, start, end)`` (characters of text, bytes of binary, as Python
    slices) in pieces of :data:`_STREAM_BLOCK`, so that ``read --head`` of a 1 GB entry
    holds one piece at a time, not the whole answer twice over."""
    entry = store.stat(eid)
    length = entry.chars if entry.chars is not None else entry.size_bytes
    a, b, _ = slice(start, end).indices(length)
    while a < b:
        stop = min(b, a + _STREAM_BLOCK)
        _write(store.range(eid, a, stop))
        a = stop


def _write_bytes(store: Store, eid: str, start: int, end: int | None) -> None:
    """Write ``store.byte_range(eid, start, end)``, copied from the entry in blocks."""
    _copy_bytes(store, eid, *slice(start, end).indices(store.stat(eid).size_bytes)[:2])


def _copy_bytes(store: Store, eid: str, begin: int, end: int) -> None:
    """Write bytes ``begin`` to ``end`` of the entry, in blocks of :data:`_STREAM_BLOCK`."""
    with store.stream(eid) as fh:
        fh.seek(begin)
        while begin < end:
            block = fh.read(min(_STREAM_BLOCK, end - begin))
            if not block:
                return
            _write(block)
            begin += len(block)


def _read_lines(store: Store, eid: str, first: int, last: int | None) -> None:
    """Write lines ``first`` to ``last`` with their newlines, as ``sed -n first,lastp`` does
    (negative numbers count from the end: :func:`blobpad.reads.line_span`)."""
    entry = store.stat(eid)
    start, stop = line_span(first, last, entry.lines)
    if start > stop:
        return
    # The bytes of those lines are what sed prints (text or binary, a last line without
    # its newline stays so): copied in blocks, so a 1 GB line never sits in memory.
    _copy_bytes(store, entry.id, *store.line_offsets(entry.id, start, stop))


# -- grep ---------------------------------------------------------------------------------

#: line_window for "whole lines", as rg prints them
_WHOLE_LINES = 1 << 60


def _cmd_grep(args: argparse.Namespace) -> int:
    before = args.before if args.before is not None else (args.context or 0)
    after = args.after if args.after is not None else (args.context or 0)
    with _open(args) as store:
        if args.count:
            counted = store.count(args.id, args.pattern, ignore_case=args.ignore_case, fixed=args.fixed,
                                  timeout=args.timeout)
            n = int(counted)
            if args.max_count is not None:
                n = min(n, args.max_count)
            shown: dict[str, Any] = {"count": n}
            if counted.timed_out:
                shown.update(timed_out=True, searched_lines=counted.searched_lines)
            _println(_json_line(shown) if args.json else str(n))  # 0 too, as grep -c prints it (rg -c prints nothing)
            if counted.timed_out:
                return _timed_out(args, counted.searched_lines, store.stat(args.id).lines, "count is that of")
            return OK if n else NOT_FOUND
        if not (args.json or args.max_count is not None or args.max_columns):
            if before or after:
                return _print_with_context(store, args, before, after)
            return _print_every_line(store, args)
        return _print_grep_pages(store, args, before, after)


#: matching lines ``grep`` asks for at a time when it prints them with context, windows or as JSON
_GREP_PAGE = 1000


def _print_grep_pages(store: Store, args: argparse.Namespace, before: int, after: int) -> int:
    """Print the matches ``Store.grep`` finds (with context, ``-m``, ``--max-columns``, or as
    one JSON object), :data:`_GREP_PAGE` at a time, each page searched from the line after
    the last match of the one before (``start_line``), under one ``--timeout`` for the
    command: memory holds a page, whatever matches (every line of a 200 MB log with ``-C 1``
    held 1.5 GB)."""
    limit = args.max_count
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    start, shown, searched = 1, 0, None
    truncated = timed_out = False
    printed: int | None = None  # the last line printed, of the pages before
    exact = _Exact(store, args)
    pages = 0
    while limit is None or shown < limit:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:  # (the page before was cut by its size, not by -m)
            timed_out, searched, truncated = True, start - 1, False  # every line up to its last match was searched
            break
        page = store.grep(
            args.id, args.pattern, ignore_case=args.ignore_case, fixed=args.fixed, before=before, after=after,
            max_matches=_GREP_PAGE if limit is None else min(_GREP_PAGE, limit - shown),
            line_window=args.max_columns or _WHOLE_LINES, timeout=left, start_line=start,
        )
        if args.json:
            _write(_json_page(page.matches, pages))
        else:
            printed = _print_grep(page, args, context=bool(before or after), exact=exact, previous=printed)
        pages += 1
        shown += len(page.matches)
        truncated, timed_out, searched = page.truncated, page.timed_out, page.searched_lines
        if timed_out or not truncated:
            break
        start = page.matches[-1].line + 1
    total = store.stat(args.id).lines if timed_out else 0
    if args.json:
        tail: dict[str, Any] = {"truncated": truncated, "timed_out": timed_out}
        if timed_out:
            tail["searched_lines"] = searched
        _println(_json_end(tail, pages))
    elif truncated:  # --json says it in "truncated"
        _note(f"stopped after {shown} matching line{'s' if shown != 1 else ''}; more exist (raise -m)")
    if timed_out:
        return _timed_out(args, searched, total, "matches above are those of")
    return OK if shown else NOT_FOUND


def _json_page(matches: Sequence[Any], pages: int) -> str:
    """One page's matches in a JSON object ``{"matches": [...], ...}`` written page by page
    (never held whole), ``pages`` pages after the first: the object starts with the first
    page, once a search answered (an error before it leaves stdout empty)."""
    items = ", ".join(_json_line(m.to_dict()) for m in matches)
    if not pages:
        return '{"matches": [' + items
    return ", " + items if items else ""


def _json_end(fields: dict[str, Any], pages: int) -> str:
    """The end of that object: the list closed, then ``fields`` (the whole object when no page came)."""
    return ('' if pages else '{"matches": [') + "], " + _json_line(fields)[1:]


#: bytes of matching lines ``grep`` holds in memory; more wait in a temporary file
_SPOOL_BYTES = 8 << 20


def _print_every_line(store: Any, args: argparse.Namespace) -> int:
    """grep's commonest form, every matching line whole with its number and nothing else:
    through ``Store.matching_lines``, which skips the per-match work grep does for ``-C``,
    ``-m``, ``--max-columns`` and ``--json``.  The lines it hands on as it finds them wait
    in an unlinked temporary file past :data:`_SPOOL_BYTES` (so memory stays bounded
    whatever matches, and the search's read snapshot ends before a slow reader of the
    output holds it), then are printed."""
    binary = _Exact(store, args).binary(args.id)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as spool:

        def on_lines(numbers: list[int], texts: list[Any]) -> None:
            if binary:  # each line's own bytes, as rg prints them (not U+FFFD for those that are not UTF-8)
                spool.write(b"".join([b"%d:%s\n" % pair for pair in zip(numbers, texts, strict=True)]))
            else:
                spool.write("".join([f"{number}:{text}\n" for number, text in zip(numbers, texts, strict=True)])
                            .encode())

        found = store.matching_lines(args.id, args.pattern, ignore_case=args.ignore_case, fixed=args.fixed,
                                     timeout=args.timeout, on_lines=on_lines, as_bytes=binary)
        total = store.stat(args.id).lines if found.timed_out else 0
        spool.seek(0)
        shutil.copyfileobj(spool, _out())
    if found.timed_out:
        return _timed_out(args, found.searched_lines, total, "matches above are those of")
    return OK if found.found else NOT_FOUND


#: lines of context ``grep -A/-B/-C`` reads at a time (a window ends there, or at a gap of more lines than this)
_CONTEXT_WINDOW = 16384
#: bytes a window of lines is read in at once; a larger one (long lines between the matches) is read line by line
_WINDOW_BYTES = 16 << 20


class _WindowLines:
    """Lines ``first`` to ``last`` of an entry (bytes ``start`` to ``end``), asked for in
    ascending order (:meth:`get`): read at once when they take at most :data:`_WINDOW_BYTES`,
    else one at a time from a stream of their own, the lines asked for read whole and those
    between skipped a MB at a time, so that long lines no match prints are never held
    (ten 40 MB lines between two matches took 844 MB)."""

    def __init__(self, store: Any, entry_id: str, first: int, last: int) -> None:
        self.first = self.at = first  # ``at``: the line the stream stands at
        start, end = store.line_offsets(entry_id, first, last)
        self.lines: list[bytes] | None = None
        self.stream: Any = None
        if end - start <= _WINDOW_BYTES:
            with store.stream(entry_id) as content:
                content.seek(start)
                self.lines = content.read(end - start).removesuffix(b"\n").split(b"\n")
        else:
            self.stream = io.BufferedReader(store.stream(entry_id), 1 << 20)
            self.stream.seek(start)

    def get(self, k: int) -> bytes | None:
        """Line ``k`` without its newline (None past the window's end)."""
        if self.lines is not None:
            return self.lines[k - self.first] if k - self.first < len(self.lines) else None
        while self.at < k:  # skip a line without holding it
            while (piece := self.stream.readline(1 << 20)) and not piece.endswith(b"\n"):
                pass
            self.at += 1
        line = self.stream.readline()
        self.at += 1
        return line.removesuffix(b"\n") if line else None

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()


def _print_with_context(store: Any, args: argparse.Namespace, before: int, after: int) -> int:
    """grep with ``-A``, ``-B`` or ``-C`` (without ``-m``, ``--json`` or ``--max-columns``):
    the numbers of the matching lines from ``Store.matching_lines`` (kept as 8-byte integers
    in an unlinked temporary file), then the lines around them read by their byte offsets,
    window by window (:func:`_context_windows`), and printed as ``rg -n`` prints them, each
    line's own bytes.  Grep's pages built each match's spans and context lines as objects
    (200 MB of log with 236,000 matches: past its 5 s budget, where rg takes 0.3 s).
    ``--timeout`` bounds the search; the lines printed around its matches are read after it."""
    regex = compile_pattern(args.pattern, ignore_case=args.ignore_case, fixed=args.fixed)
    with tempfile.TemporaryFile() as spool:
        found = store.matching_lines(
            args.id, args.pattern, ignore_case=args.ignore_case, fixed=args.fixed, timeout=args.timeout,
            on_lines=lambda numbers, _texts: spool.write(array("q", numbers).tobytes()),
        )
        total = store.stat(args.id).lines
        searched = found.searched_lines if found.timed_out else total
        spool.seek(0)
        printed: int | None = None
        for first, last, matches in _context_windows(_spooled_numbers(spool), before, after, total):
            lines = _WindowLines(store, args.id, first, last)
            try:
                printed = _print_window(lines, first, matches, before, after, printed, searched or 0, regex)
            finally:
                lines.close()
    if found.timed_out:
        return _timed_out(args, found.searched_lines, total, "matches above are those of")
    return OK if found.found else NOT_FOUND


def _spooled_numbers(spool: IO[bytes]) -> Iterator[int]:
    """The integers written to ``spool`` as 8-byte ``array("q")`` items, read a block at a time."""
    while block := spool.read(8 << 16):
        yield from array("q", block)


def _context_windows(numbers: Iterable[int], before: int, after: int,
                     total: int) -> Iterator[tuple[int, int, list[int]]]:
    """``(first, last, matches)``: the lines to read, and the matching lines (ascending) whose
    context they hold.  A window takes the next match's context while that starts within
    :data:`_CONTEXT_WINDOW` lines of the window's end and the window stays under that many
    lines; a match's context lies in its one window (windows may overlap)."""
    first = last = 0
    matches: list[int] = []
    for n in numbers:
        a, b = max(1, n - before), min(total, n + after)
        if matches and (a > last + _CONTEXT_WINDOW or b - first >= _CONTEXT_WINDOW):
            yield first, last, matches
            matches = []
        if not matches:
            first = a
        last = max(last, b) if matches else b
        matches.append(n)
    if matches:
        yield first, last, matches


def _print_window(lines: _WindowLines, first: int, matches: list[int], before: int, after: int,
                  printed: int | None, searched: int, regex: Any) -> int | None:
    """Print the context of ``matches`` from ``lines`` (line ``first`` on) as ``rg -n`` does:
    ``N:`` for a match, ``N-`` for context, ``--`` between lines apart, no line up to
    ``printed`` (printed with a window before).  A context line past ``searched`` (the
    lines a search that timed out searched) is tested with ``regex``: a match there is
    printed as one, as rg prints it, and so is one past the window's last match (a match
    of the window after, printed here as context of this one).  Returns the last line printed."""
    hits = set(matches)
    known = min(searched, matches[-1])  # the lines up to here that match are in hits
    out: list[bytes] = []
    for m in matches:
        for k in range(max(m - before, first, (printed or 0) + 1), m + after + 1):
            line = lines.get(k)
            if line is None:
                break
            hit = k in hits or (k > known and regex.search(strict_utf8(line)) is not None)
            if printed is not None and k > printed + 1:
                out.append(b"--\n")
            out.append(b"%d%s%s\n" % (k, b":" if hit else b"-", line))
            printed = k
        if len(out) >= 4096:
            _write(b"".join(out))
            out.clear()
    _write(b"".join(out))
    return printed


def _timed_out(args: argparse.Namespace, searched: int | None, total: int, what: str) -> int:
    """Say on stderr that the search ran out of time, and return TIMED_OUT."""
    done = searched or 0
    covered = (f"the {what} lines 1-{done} only, the later lines were not searched" if done else
               "no line was searched")
    _note(f"timed out after {args.timeout:g} s at line {done + 1} of {total}: {covered} (this pattern is slow to "
          "match: simplify it, or raise --timeout; --timeout 0 means no limit)")
    return TIMED_OUT


class _Exact:
    """Lines as ``rg`` prints them: the library shows the bytes of a binary entry that are
    not UTF-8 as U+FFFD; the CLI prints the line's own bytes instead (read again by their
    offsets, and written back as they were by :func:`_write`'s surrogateescape).  Lines
    cut to a window (``--max-columns``) stay as the library shows them."""

    def __init__(self, store: Any, args: argparse.Namespace) -> None:
        self._store = store
        self._whole = not getattr(args, "max_columns", None)
        self._kinds: dict[str, bool] = {}
        self._read: dict[tuple[str, int], str] = {}  # lines read ahead for a page (:meth:`read_ahead`)

    def binary(self, entry_id: str) -> bool:
        if entry_id not in self._kinds:
            self._kinds[entry_id] = self._whole and self._store.stat(entry_id).kind != "text"
        return self._kinds[entry_id]

    def line(self, entry_id: str, number: int, text: str) -> str:
        if "\ufffd" not in text or not self.binary(entry_id):
            return text
        ahead = self._read.get((entry_id, number))
        if ahead is not None:
            return ahead
        start, end = self._store.line_offsets(entry_id, number, number)
        return self._store.byte_range(entry_id, start, end).removesuffix(b"\n").decode("utf-8", "surrogateescape")

    def read_ahead(self, rows: Iterable[tuple[str, int, str]]) -> None:
        """Read the own bytes of the lines of a page that :meth:`line` will be asked for
        (``(entry id, number, text shown)``), window by window (:func:`_context_windows`)
        instead of one line at a time (two reads a line: 471,946 lines of a binary entry
        took 8 s).  Forgets the page before."""
        self._read.clear()
        wanted: dict[str, list[int]] = {}
        for entry_id, number, text in rows:
            if "\ufffd" in text and self.binary(entry_id):
                wanted.setdefault(entry_id, []).append(number)
        for entry_id, numbers in wanted.items():
            total = self._store.stat(entry_id).lines
            for first, last, inside in _context_windows(sorted(set(numbers)), 0, 0, total):
                lines = _WindowLines(self._store, entry_id, first, last)
                try:
                    for number in inside:
                        line = lines.get(number)
                        if line is not None:
                            self._read[(entry_id, number)] = line.decode("utf-8", "surrogateescape")
                finally:
                    lines.close()


def _holds_match(regex: Any, exact: _Exact, entry_id: str, number: int, text: str) -> bool:
    """Whether context line ``number`` holds a match (one past a limit on matches), tested on
    its own bytes as the search reads them (a binary entry's, not the U+FFFD shown for them)."""
    line = exact.line(entry_id, number, text).encode("utf-8", "surrogateescape")
    return regex.search(strict_utf8(line)) is not None


def _print_grep(result: Any, args: argparse.Namespace, *, context: bool, exact: _Exact,
                previous: int | None = None) -> int | None:
    """Print like ``rg -n``: each line once, ``N:`` for matches, ``N-`` for context, ``--`` between groups.

    ``previous``: the last line the pages before printed; a line up to it is not printed
    again.  Returns the last line printed."""
    rows: dict[int, tuple[bool, str]] = {}
    for m in result.matches:
        for number, text in m.before:
            rows.setdefault(number, (False, text))
        rows[m.line] = (True, m.text)
        for number, text in m.after:
            rows.setdefault(number, (False, text))
    exact.read_ahead((args.id, number, text) for number, (_, text) in rows.items())
    if (result.truncated or result.timed_out) and result.matches and result.matches[-1].after:
        # Matches past the -m limit, or past the lines a search that timed out searched, may
        # sit in the last match's trailing context: rg prints those as matches (N:), so mark
        # them by testing the pattern (what is printed is then the start of the whole output).
        regex = compile_pattern(args.pattern, ignore_case=args.ignore_case, fixed=args.fixed)
        for number, text in result.matches[-1].after:
            if not rows[number][0] and _holds_match(regex, exact, args.id, number, text):
                rows[number] = (True, text)
    out: list[str] = []
    for number in sorted(rows):
        if previous is not None and number <= previous:
            continue  # printed with the page before (its last match's trailing context)
        is_match, text = rows[number]
        text = exact.line(args.id, number, text)
        if context and previous is not None and number > previous + 1:
            out.append("--\n")
        out.append(f"{number}{':' if is_match else '-'}{text}\n")
        previous = number
        if len(out) >= 4096:
            _write("".join(out))
            out.clear()
    _write("".join(out))
    return previous


#: matching lines grep-session asks for per call when it prints them all
_SESSION_PAGE = 1000


def _cmd_grep_session(args: argparse.Namespace) -> int:
    """Print the matches of every entry of a session, page by page (``Store.grep_session``
    and its cursors), under one --timeout for the whole command."""
    before = args.before if args.before is not None else (args.context or 0)
    after = args.after if args.after is not None else (args.context or 0)
    limit = args.max_count
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    cursor = args.cursor
    shown = searched = 0
    truncated = timed_out = False
    printed: tuple[str, int] | None = None  # the last line printed, of the pages before
    pages = 0
    regex = compile_pattern(args.pattern, ignore_case=args.ignore_case, fixed=args.fixed)
    with _open(args) as store:
        exact = _Exact(store, args)
        while limit is None or shown < limit:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                timed_out = True
                break
            page = store.grep_session(
                args.session, args.pattern, names=args.names, ignore_case=args.ignore_case, fixed=args.fixed,
                max_matches=_SESSION_PAGE if limit is None else min(_SESSION_PAGE, limit - shown),
                max_per_entry=args.max_per_entry, before=before, after=after,
                line_window=args.max_columns or _WHOLE_LINES, timeout=left, cursor=cursor,
            )
            if args.json:
                _write(_json_page(page.matches, pages))
            else:
                printed = _print_session_grep(page.matches, context=bool(before or after), exact=exact, regex=regex,
                                              previous=printed)
            pages += 1
            shown += len(page.matches)
            searched += page.searched_entries
            cursor, truncated, timed_out = page.cursor, page.truncated, page.timed_out
            if cursor is None or timed_out:
                break
    if args.json:
        _println(_json_end({"truncated": truncated, "timed_out": timed_out, "cursor": cursor,
                            "searched_entries": searched}, pages))
    elif timed_out:
        how = f"continue with --cursor {cursor}" if cursor is not None else "nothing was searched"
        _note(f"timed out after {args.timeout:g} s: the matches above are those of the lines searched; {how} "
              "(this pattern is slow to match: simplify it, or raise --timeout; --timeout 0 means no limit)")
    elif cursor is not None:
        _note(f"stopped after {shown} matching line{'s' if shown != 1 else ''}; more "
              f"{'exist' if truncated else 'may exist'}: raise -m, or continue with --cursor {cursor}")
    if timed_out:
        return TIMED_OUT
    return OK if shown else NOT_FOUND


def _print_session_grep(matches: Sequence[Any], *, context: bool, exact: _Exact, regex: Any,
                        previous: tuple[str, int] | None = None) -> tuple[str, int] | None:
    """Print like ``rg -n`` over several files: ``NAME:N:TEXT`` for matches, ``NAME-N-TEXT``
    for context (NAME is the entry's name, or its id when it has none), ``--`` between groups.
    A context line that holds a match (past ``-m`` or ``--max-per-entry``) is a match line,
    as ``rg`` prints it (``regex``: the pattern, to test them).

    ``previous``: the last line the pages before printed (entry id, line), whose context
    may overlap this page's: a line is printed once, and ``--`` only between lines apart.
    Returns the last line printed, for the next page."""
    exact.read_ahead((m.entry_id, number, text) for m in matches
                     for number, text in [*m.before, (m.line, m.text), *m.after])
    out: list[str] = []
    k = 0
    while k < len(matches):
        entry_id = matches[k].entry_id
        group = []
        while k < len(matches) and matches[k].entry_id == entry_id:
            group.append(matches[k])
            k += 1
        # a name is caller-chosen (a model's): a line break or a terminal escape in it is shown escaped, so it
        # can neither forge a match line nor reach the terminal raw (as ls shows it)
        label = _one_line(group[0].name) if group[0].name is not None else entry_id
        rows: dict[int, tuple[bool, str]] = {}
        for m in group:
            for number, text in m.before:
                rows.setdefault(number, (False, text))
            rows[m.line] = (True, m.text)
            for number, text in m.after:
                rows.setdefault(number, (False, text))
        for number in sorted(rows):
            if previous is not None and previous[0] == entry_id and number <= previous[1]:
                continue  # printed with the page before (its last match's trailing context)
            is_match, text = rows[number]
            if not is_match and _holds_match(regex, exact, entry_id, number, text):
                is_match = True
            text = exact.line(entry_id, number, text)
            if context and previous is not None and (previous[0] != entry_id or number > previous[1] + 1):
                out.append("--\n")
            sep = ":" if is_match else "-"
            out.append(f"{label}{sep}{number}{sep}{text}\n")
            previous = (entry_id, number)
            if len(out) >= 4096:
                _write("".join(out))
                out.clear()
    _write("".join(out))
    return previous


# -- ls, stat, rm, maintenance ------------------------------------------------------------


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _expires_in(entry: Entry, now: float) -> str:
    """Time left before ``entry`` expires, rounded so that a live entry never shows none
    left: under a minute in whole seconds rounded up (0.2 s left is ``1s``), beyond that
    in whole minutes, hours and minutes, or days, rounded down."""
    if entry.expires_at is None:
        return "never"
    left = entry.expires_at - now
    if left < 60:
        return f"{max(1, math.ceil(left))}s"
    if left < 3600:
        return f"{int(left // 60)}m"
    if left < 86400:
        return f"{int(left // 3600)}h{int(left % 3600 // 60):02d}m"
    return f"{int(left // 86400)}d"


def _cell(text: str | None) -> str:
    """A table cell of caller-chosen text: control characters (a newline, a terminal
    escape) and spaces shown escaped, so one row stays one line and nothing reaches the
    terminal raw; long values are cut to 60 characters."""
    if not text:
        return ""
    shown = "".join(_cell_char(c) for c in text)
    return shown if len(shown) <= 60 else shown[:59] + "…"


def _one_line(text: str) -> str:
    """Caller-chosen text on one line of the terminal: control characters (a line break,
    a terminal escape) shown escaped, every other character as it is."""
    return one_line(text, " \t")


def _cell_char(c: str) -> str:
    if c == " ":
        return "\\x20"  # columns stay separated by spaces only
    return c if c.isprintable() else repr(c)[1:-1]


def _cmd_ls(args: argparse.Namespace) -> int:
    with _open(args) as store:
        entries = store.entries(session=args.session, turn=args.turn)
        now = store.now()
    if args.json:
        if not entries:
            _println("[]")
            return OK
        _println("[\n" + ",\n".join(_json_line(e.to_dict()) for e in entries) + "\n]")
        return OK
    if not entries:
        return OK
    header = ("ID", "SIZE", "LINES", "KIND", "CREATED", "EXPIRES", "SESSION", "TURN", "NAME", "TOOL")
    rows = [header] + [
        (
            e.id, human_size(e.size_bytes), str(e.lines), e.kind, _when(e.created_at), _expires_in(e, now),
            _cell(e.session) or "-", "-" if e.turn is None else _cell(str(e.turn)), _cell(e.name) or "-",
            _cell(e.tool) or "-",
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = {1, 2}
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        _println("  ".join(cells).rstrip())
    return OK


def _cmd_stat(args: argparse.Namespace) -> int:
    with _open(args) as store:
        _print_json(store.stat(args.id).to_dict())
    return OK


def _cmd_rm(args: argparse.Namespace) -> int:
    for eid in args.ids:
        parse_id(eid)  # a malformed id deletes nothing
    rc = OK
    with _open(args) as store:
        for eid in args.ids:
            try:
                store.delete(eid)
            except NotFound as exc:
                _fail(exc.render("cli"))
                rc = NOT_FOUND
    return rc


def _cmd_gc(args: argparse.Namespace) -> int:
    _out()  # a closed stdout is refused before anything changes: the report could not be printed
    with _open(args) as store:
        report = store.gc()
    _print_json(report.to_dict())
    if report.problems:
        _fail("gc met damage it could not repair; run 'blobpad verify' and delete the entries it names")
        return NOT_FOUND
    return OK


def _cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as store:
        d = store.stats().to_dict()
        d["path"] = store.path
    _print_json(d)
    return OK


def _cmd_compact(args: argparse.Namespace) -> int:
    _out()  # a closed stdout is refused before anything changes
    with _open(args) as store:
        before, after = store.compact()
    _print_json({"bytes_before": before, "bytes_after": after, "freed": before - after})
    return OK


def _cmd_verify(args: argparse.Namespace) -> int:
    with _open(args) as store:
        report = store.verify()
    _print_json(report.to_dict())
    return OK if report.ok else NOT_FOUND


# -- notes --------------------------------------------------------------------------------


def _text_arg(text: str) -> str:
    """A TEXT argument of the notepad: the text itself, or stdin's (UTF-8) for ``-``, read
    no further than a notepad takes (1 MiB): more is refused without reading it all."""
    if text != "-":
        return text
    from .notepad import MAX_CONTENT_BYTES

    data = _stdin("give the text itself instead").read(MAX_CONTENT_BYTES + 1)
    if len(data) > MAX_CONTENT_BYTES:
        raise InvalidArgument(
            f"standard input holds over {MAX_CONTENT_BYTES} bytes; a notepad accepts at most {MAX_CONTENT_BYTES} "
            "bytes (1 MiB) per call and per space; nothing was changed", hint=HINT_NOTEPAD_SIZE,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("stdin is not valid UTF-8 text") from None


def _stdin(instead: str) -> IO[bytes]:
    """Standard input as bytes; a clear UsageError when the command runs without one (``<&-``)."""
    if sys.stdin is None or getattr(sys.stdin, "buffer", None) is None:
        raise UsageError(f"- reads standard input, but this command has none (it was closed); {instead}")
    return sys.stdin.buffer


#: The notepad's actions as this command spells them, and the command that rewrites each space.
_NOTE_ACTIONS = {"set_notes": "set", "append_notes": "append", "set_plan": "plan", "refs.add": "refs add",
                 "refs.remove": "refs remove"}
_NOTE_SETTERS = {"notes": "blobpad notes set", "plan": "blobpad notes plan"}
_NOTE_UNITS = {"chars": "characters", "tokens": "tokens", "items": "refs"}


def _note_words(d: dict[str, Any]) -> str | None:
    """A truncation warning or a budget rejection of a notepad change, written from the
    result's counts in this command's words (the library's text names its own calls)."""
    space = d["space"]
    units = _NOTE_UNITS.get(d["unit"], d["unit"])
    setter = _NOTE_SETTERS.get(space, "blobpad notes")
    action = _NOTE_ACTIONS.get(d["action"], d["action"])
    if not d["ok"] and "combined" in d:
        return (f"{action} rejected: {space} would be {d['combined']} {units}, over its budget of {d['budget']} "
                f"(now {d['current']}, adding {d['added']}); {space} unchanged. Rewrite {space} shorter with "
                f"'{setter}', or add less")
    if d.get("warning") is not None and "original" in d:
        return (f"{space} truncated to {d['budget']} {units} (from {d['original']}); the end was cut off. "
                f"Give a tighter summary with '{setter}'")
    return None


def _note_result(result: Any) -> int:
    """Print a notepad change (one JSON line, in this command's words); a rejected change
    is an error (exit 2), a truncation a warning on stderr."""
    d = result.to_dict()
    words = _note_words(d)
    d["action"] = _NOTE_ACTIONS.get(d["action"], d["action"])
    if words is not None:
        d["message"] = words
        d["error" if not d["ok"] else "warning"] = words
    if not d.get("ok", False):
        raise UsageError(d.get("error") or d.get("message") or "the notepad rejected the change")
    if d.get("warning"):
        _note(f"warning: {d['warning']}")
    _println(_json_line(d))
    return OK


def _cmd_notes(args: argparse.Namespace) -> int:
    if args.session is None:  # "" is the default session, as everywhere: it has a notepad too
        raise UsageError("notes needs --session SESSION: a notepad belongs to one session")
    action = args.notes_command or "show"
    _out()  # a closed stdout is refused before anything changes: the result could not be printed
    with _open(args) as store:
        pad = store.notepad(args.session)
        if action == "show":
            if args.json:
                _println(_json_line({"notes": pad.read("notes"), "plan": pad.read("plan"), "refs": pad.refs()}))
            else:
                block = pad.render_spaces()
                if block:
                    _println(block.rstrip("\n"))
            return OK
        if action == "set":
            return _note_result(pad.set_notes(_text_arg(args.text)))
        if action == "append":
            return _note_result(pad.append_notes(_text_arg(args.text), join=True))  # a line of its own
        if action == "plan":
            if args.text is None:
                plan = pad.read("plan")
                if plan:
                    _println(plan.rstrip("\n"))
                return OK
            return _note_result(pad.set_plan(_text_arg(args.text)))
        # refs
        if args.refs_action is None:
            for ref in pad.refs():
                _println(_one_line(ref))
            return OK
        if args.refs_action == "add":
            return _note_result(pad.refs_add(args.ref))
        held = pad.refs()
        if args.ref not in held:  # not found: exit 1, as for every lookup
            shown = ", ".join(repr(r[:60]) for r in held[-10:]) or "none"
            raise NotFound(f"refs remove: {args.ref[:100]!r} is not in the session's refs (exact match needed); "
                           f"current refs: {shown}")
        return _note_result(pad.refs_remove(args.ref))


# -- mcp, demo ----------------------------------------------------------------------------


def _cmd_mcp(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401 - the optional extra, imported only here
    except ImportError:
        raise UsageError(
            "the MCP server needs the mcp extra: pip install 'blobpad[mcp]' (in a checkout of blobpad: pip install '.[mcp]')"
        ) from None
    from . import mcp_server

    mcp_server.run(args)
    return OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run(db=args.db, size=args.size)


# -- the parser ---------------------------------------------------------------------------


def _sub(
    subparsers: Any, name: str, func: Callable[[argparse.Namespace], int], help_text: str, example: str,
    common: argparse.ArgumentParser, description: str | None = None,
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_text, description=description or help_text, parents=[common],
        epilog="example:\n" + "\n".join("  " + line for line in example.strip().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``blobpad`` command."""
    db_help = ("store: a directory (LMDB), memory://NAME or redis://HOST:PORT/DB?namespace=NAME (default: "
               "$BLOBPAD_STORE, else $BLOBPAD_DIR, else the user data dir, as blobpad.open())")
    parser = _Parser(
        prog="blobpad",
        description="blobpad: park huge observations outside an agent's context, read them by slices.",
        epilog="examples:\n  blobpad demo\n  blobpad put big.log --session s1\n"
        "  blobpad read ID --lines 100:120\n  blobpad grep ID 'ERROR|WARN' -C 2\n\n"
        "exit codes: 0 ok, 1 not found, no match or damage found (verify, gc), 2 usage, bad input or any other "
        "failure, 3 grep timed out (partial output)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", metavar="STORE", default=None, help=db_help)
    parser.add_argument("--version", action="version", version=f"blobpad {__version__}")
    # --db is accepted after the subcommand too (blobpad ls --db DIR).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="STORE", default=argparse.SUPPRESS, help=db_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = _sub(
        sub, "put", _cmd_put, "store a file or stdin; print the entry as one JSON object",
        "blobpad put build.log --session s1 --turn 3 --tool make --meta path=build.log\n"
        "make 2>&1 | blobpad put - --ttl 2h",
        common,
        description="Store a file (or stdin with -) and print the entry as one JSON line: "
        "id, size_bytes, kind, lines, chars, expires_at and the summary an agent sees "
        "(first and last 500 characters, or [BINARY: N bytes, sha256=...]). "
        "A turn written as a whole number (3, -1) is stored as that integer, anything else as the string given.",
    )
    p.add_argument("file", metavar="FILE", help="file to store, or - for stdin")
    p.add_argument("--session", help="session owning the entry (default: the default session \"\")")
    p.add_argument("--turn", type=_turn, help="turn inside the session: a whole number such as 3 is stored as "
                   "the integer 3 (as the library's turn=3), anything else as a string")
    p.add_argument("--ttl", type=parse_ttl, default=_DEFAULT_TTL,
                   help="time to live: seconds, or 90s, 30m, 2h, 7d, or 'never' (default: 1h)")
    p.add_argument("--name", help="name the entry; a put with the same name in the session replaces it")
    p.add_argument("--exclusive", action="store_true",
                   help="with --name, never replace: fail (exit 2, nothing stored) if the session has a live entry "
                   "of that name")
    p.add_argument("--tool", help="tool that produced the content")
    p.add_argument("--meta", type=parse_meta, action="append", metavar="KEY=VALUE",
                   help="metadata (repeatable; values are strings)")
    p.add_argument("--no-progress", action="store_true", help="never show the progress bar")

    p = _sub(
        sub, "read", _cmd_read, "write a slice of an entry to stdout, unchanged",
        "blobpad read 485d7beae4e144eb --lines 10:20      # what sed -n 10,20p prints\n"
        "blobpad read 485d7beae4e144eb --lines -100:-1    # the last 100 lines\n"
        "blobpad read 485d7beae4e144eb --head 2000\n"
        "blobpad read 485d7beae4e144eb --range=-500:      # the last 500 characters",
        common,
        description="Write one slice of an entry to stdout, unchanged. Text is counted in characters, "
        "binary in bytes; A:B slices like Python (A: to the end, :B from the start, negatives count "
        "from the end; write --range=-500: for a negative start).",
    )
    p.add_argument("id", metavar="ID", help="entry id")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--head", type=non_negative, metavar="N", help="the first N characters (bytes if binary)")
    mode.add_argument("--tail", type=non_negative, metavar="N", help="the last N characters (bytes if binary)")
    mode.add_argument("--range", metavar="A:B", help="characters A to B (bytes if binary)")
    mode.add_argument("--bytes", metavar="A:B", help="bytes A to B")
    mode.add_argument("--lines", metavar="A:B", help="lines A to B, 1-based and inclusive, with their newlines, as sed -n A,Bp "
                      "(or N; negative numbers count from the end: -100:-1 or -100: is the last 100 lines)")
    mode.add_argument("--full", action="store_true", help="the whole content")

    p = _sub(
        sub, "grep", _cmd_grep, "print the lines matching a pattern, like rg -n",
        "blobpad grep 485d7beae4e144eb 'ERROR|timed out' -i -C 2\n"
        "blobpad grep 485d7beae4e144eb -F '[warn]' -c\n"
        "blobpad grep 485d7beae4e144eb -- -leading-dash",
        common,
        description="Print every matching line as LINE:TEXT and context lines as LINE-TEXT, like rg -n "
        "(each line once, -- between groups; -m N stops after N). Patterns use RE2 syntax (no backreferences or "
        "look-around) and match within a line. Exit status 1 when nothing matched.",
    )
    p.add_argument("id", metavar="ID", help="entry id")
    p.add_argument("pattern", metavar="PATTERN", help="RE2 regular expression (a literal with -F)")
    _add_match_options(p)
    p.add_argument("-m", "--max-count", type=non_negative, metavar="N",
                   help="stop after N matching lines (default: print them all, as rg; with -c, cap the count)")
    p.add_argument("-M", "--max-columns", type=non_negative, metavar="N",
                   help="print a window of N characters around the first match of longer lines (default: whole lines)")
    p.add_argument("-c", "--count", action="store_true", help="print the number of matching lines")
    p.add_argument("--timeout", type=_timeout, default=SEARCH_TIMEOUT, metavar="SECONDS",
                   help=f"stop searching after SECONDS (default {SEARCH_TIMEOUT:g}; 0: no limit): the output then "
                   "covers the lines searched, a notice on stderr says which, and the exit status is 3")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")

    p = _sub(
        sub, "grep-session", _cmd_grep_session, "print the lines matching a pattern in every entry of a session",
        "blobpad grep-session s1 'ERROR|timed out' -i -C 2\n"
        "blobpad grep-session s1 -F '[warn]' --names 'logs/*.txt' --max-per-entry 3\n"
        "blobpad grep-session s1 error -m 20 --json",
        common,
        description="Print every matching line of a session's live entries as NAME:LINE:TEXT and context lines as "
        "NAME-LINE-TEXT, like rg -n over files (NAME is the entry's id when it has no name): named entries by name, "
        "then unnamed ones in creation order. Patterns are grep's. -m N stops after N lines and says how to "
        "continue (--cursor). Exit status 1 when nothing matched, 3 when --timeout ran out (the output covers what "
        "was searched).",
    )
    p.add_argument("session", metavar="SESSION", help="the session whose entries to search ('' is the default one)")
    p.add_argument("pattern", metavar="PATTERN", help="RE2 regular expression (a literal with -F)")
    p.add_argument("--names", metavar="GLOB", help="only the named entries whose names match this shell glob "
                   "(* also matches /)")
    _add_match_options(p)
    p.add_argument("-m", "--max-count", type=non_negative, metavar="N",
                   help="stop after N matching lines in all (default: print them all)")
    p.add_argument("--max-per-entry", type=positive, metavar="N", help="at most N matching lines of each entry")
    p.add_argument("-M", "--max-columns", type=non_negative, metavar="N",
                   help="print a window of N characters around the first match of longer lines (default: whole lines)")
    p.add_argument("--cursor", metavar="CURSOR", help="continue an earlier search where it stopped (same arguments)")
    p.add_argument("--timeout", type=_timeout, default=SEARCH_TIMEOUT, metavar="SECONDS",
                   help=f"stop searching after SECONDS in all (default {SEARCH_TIMEOUT:g}; 0: no limit): the output "
                   "then covers what was searched, a notice on stderr says how to continue, and the exit status is 3")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")

    p = _sub(
        sub, "ls", _cmd_ls, "list live entries",
        "blobpad ls --session s1 --turn 3\nblobpad ls --json", common,
        description="List live entries in creation order: all of them, a session's, or a turn's "
        "(--turn alone means the default session). --json prints a JSON array, one entry per line.",
    )
    p.add_argument("--session", help="only this session's entries")
    p.add_argument("--turn", type=_turn, help="only this turn's entries (3 means the integer turn 3, as put stores it)")
    p.add_argument("--json", action="store_true", help="print a JSON array")

    p = _sub(sub, "stat", _cmd_stat, "print an entry's record as JSON", "blobpad stat 485d7beae4e144eb", common)
    p.add_argument("id", metavar="ID", help="entry id")

    p = _sub(sub, "rm", _cmd_rm, "delete entries", "blobpad rm 485d7beae4e144eb 9fe69da4eb73e6d6", common,
             description="Delete entries and free their chunks. Exit status 1 if any id was not found.")
    p.add_argument("ids", metavar="ID", nargs="+", help="entry ids")

    _sub(sub, "gc", _cmd_gc, "remove expired entries and free their chunks", "blobpad gc", common,
         description="Remove expired entries, free unreferenced chunks and roll back interrupted puts; "
         "print what was freed as JSON.")
    _sub(sub, "stats", _cmd_stats, "print counts and sizes of the store as JSON", "blobpad stats", common,
         description="Print counts and sizes as JSON: entries and logical_bytes count the live entries (what ls "
         "lists), expired_entries and expired_bytes the expired ones that gc has not removed yet; sizes in bytes.")
    _sub(sub, "compact", _cmd_compact, "give free space back to the file system", "blobpad compact", common,
         description="Rewrite the store file without its free pages. Needs the store to itself: "
         "stop the agents and MCP servers using it first.")
    _sub(sub, "verify", _cmd_verify, "check every chunk; exit 1 if anything is damaged", "blobpad verify", common,
         description="Check every entry's chunks, reference counts and checksums; print the report as JSON. "
         "Exit status 1 when problems were found.")

    _add_notes(sub, common)

    p = _sub(
        sub, "mcp", _cmd_mcp, "run the MCP server on stdio (needs blobpad[mcp])",
        "blobpad mcp --session agent-1 --allow ~/project --allow /tmp", common,
        description="Run the Model Context Protocol server on stdin/stdout, so that an agent can offload "
        "and read observations. Needs the extra: pip install 'blobpad[mcp]' (in a checkout: pip install '.[mcp]').",
    )
    from . import mcp_server  # its options are defined there once, for both ways to start the server

    mcp_server.add_arguments(p)

    p = _sub(
        sub, "demo", _cmd_demo, "offload a multi-MB log and read it back, with timings",
        "blobpad demo\nblobpad demo --db /tmp/demo-db", common,
        description="Write a realistic 6 MiB log, offload it, print what an agent would see, then a head, "
        "a line window and a grep, with timings and the commands that read the same. Uses the default store "
        "(or --db); the entry stays an hour so that the commands shown work (a new demo replaces it), and the "
        "last command shown deletes it.",
    )
    p.add_argument("--size", type=non_negative, default=6 << 20, help=argparse.SUPPRESS)
    return parser


def _add_notes(sub: Any, common: argparse.ArgumentParser) -> None:
    """``notes``: show and edit a session's notepad (notes, plan and refs spaces)."""
    session_help = "the session whose notepad to use (required)"
    scoped = argparse.ArgumentParser(add_help=False, parents=[common])
    scoped.add_argument("--session", default=argparse.SUPPRESS, help=session_help)
    p = _sub(
        sub, "notes", _cmd_notes, "show or edit a session's notepad (notes, plan, refs)",
        "blobpad notes --session s1 set 'Root cause: timezone mismatch in token expiry'\n"
        "blobpad notes --session s1 plan $'1. Fix auth bug\\n2. Add test'   # bash: $'...' makes \\n a newline\n"
        "printf '1. Fix auth bug\\n2. Add test\\n' | blobpad notes --session s1 plan -\n"
        "blobpad notes --session s1 refs add src/auth/login.ts\n"
        "blobpad notes --session s1",
        common,
        description="A session's notepad: notes (4,000 characters), plan (2,000 characters) and refs (50 items), "
        "kept outside the model's context. Without an action, show them as the block prepended to messages. "
        "TEXT is stored exactly as given: a backslash and an n stay two characters, as the shell passes them; "
        "write a newline with bash's $'...' quoting, or pass - and give the text on stdin. "
        "Changes print the result as one JSON line: set and plan over budget are truncated with a warning (exit 0), "
        "an append over budget is rejected and changes nothing (exit 2).",
    )
    p.add_argument("--session", default=None, help=session_help)
    p.set_defaults(notes_command=None)
    actions = p.add_subparsers(dest="notes_command", metavar="ACTION", parser_class=_Parser)

    def action(name: str, help_text: str, example: str) -> argparse.ArgumentParser:
        return _sub(actions, name, _cmd_notes, help_text, example, scoped)

    a = action("show", "show notes, plan and refs (the default)", "blobpad notes --session s1 show --json")
    a.add_argument("--json", action="store_true", help='print {"notes": ..., "plan": ..., "refs": [...]}')
    a = action("set", "replace the notes", "blobpad notes --session s1 set 'Root cause: stale cache'")
    a.add_argument("text", metavar="TEXT", help="the new notes, or - for stdin")
    a = action("append", "append TEXT to the notes on a line of its own (rejected if over budget)",
               "blobpad notes --session s1 append 'Found: retry loop in worker.py:88'")
    a.add_argument("text", metavar="TEXT", help="text to append, or - for stdin")
    a = action("plan", "show the plan, or replace it with TEXT", "blobpad notes --session s1 plan - < plan.md")
    a.add_argument("text", metavar="TEXT", nargs="?", help="the new plan, or - for stdin")
    a = action("refs", "list the refs, or add/remove one", "blobpad notes --session s1 refs add https://example.com/pr/42")
    a.set_defaults(refs_action=None)
    ref_actions = a.add_subparsers(dest="refs_action", metavar="add|remove", parser_class=_Parser)
    for name, help_text in (("add", "add a ref (the oldest is dropped past 50)"), ("remove", "remove a ref (exact match)")):
        r = _sub(ref_actions, name, _cmd_notes, help_text, f"blobpad notes --session s1 refs {name} src/app.py", scoped)
        r.add_argument("ref", metavar="REF", help="a file path, URL or identifier")
    p.set_defaults(json=False, text=None, refs_action=None)


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``blobpad`` command; return its exit code.

    What it printed is flushed before it returns: a stdout that cannot take it (a full disk,
    ``> /dev/full``) is one line on stderr and exit status 2, for ``--help`` too, never the
    interpreter's own report of a failed final flush (status 120)."""
    try:
        rc = _main(argv)
    except SystemExit:  # argparse: --help, --version, a usage error
        why = _flush_stdout()
        if why:
            _fail(why)
            raise SystemExit(USAGE) from None
        raise
    why = _flush_stdout()
    if why:
        _fail(why)
        return USAGE if rc == OK else rc
    return rc


def _flush_stdout() -> str | None:
    """Flush stdout; when it cannot take what is buffered, point it at /dev/null (so that the
    interpreter's final flush does not fail again) and return why (None for a reader gone: quiet)."""
    stdout = sys.stdout
    if stdout is None:
        return None
    try:
        stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return None  # the reader went away (| head): quiet, like rg
    except (OSError, ValueError) as exc:
        _silence_stdout()
        return _os_message(exc) if isinstance(exc, OSError) else None
    return None


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        _fail("no command given; try 'blobpad demo' or 'blobpad --help'")
        return USAGE
    try:
        return func(args)  # main() flushes what it printed
    except BrokenPipeError:
        # The reader went away (blobpad read ID --full | head): stop quietly, like rg.
        _silence_stdout()
        return OK
    except NotFound as exc:
        _fail(exc.render("cli"))
        return NOT_FOUND
    except UsageError as exc:
        _fail(str(exc))
        return USAGE
    except BlobpadError as exc:  # InvalidArgument and every other failure the library reports
        _fail(exc.render("cli"))
        return USAGE
    except OSError as exc:
        _flush_stdout()  # the error may be stdout's own: what it holds would fail again at exit
        _fail(_os_message(exc))
        return USAGE
    except KeyboardInterrupt:
        _fail("interrupted")
        return 130
    except Exception as exc:  # a bug: still one line, unless BLOBPAD_DEBUG asks for the traceback
        if os.environ.get("BLOBPAD_DEBUG"):
            raise
        _fail(f"internal error: {type(exc).__name__}: {exc} (run with BLOBPAD_DEBUG=1 for the traceback)")
        return USAGE


def _os_message(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return f"{reason}: {str(exc.filename)[:100]!r}" if exc.filename else reason  # quoted in 100 characters


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
