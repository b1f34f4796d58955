"""blobpad as a deepagents backend (``pip install 'blobpad[deepagents]'``, deepagents 0.7).

:class:`BlobpadBackend` is a deepagents ``BackendProtocol``: ``ls``, ``read``, ``grep``,
``glob``, ``write``, ``edit``, ``delete``, ``upload_files`` and ``download_files``, with
their async twins (deepagents runs the sync method in a thread)::

    from deepagents import create_deep_agent
    from blobpad.integrations.deepagents import BlobpadBackend

    agent = create_deep_agent(model=..., backend=BlobpadBackend("/var/lib/agent", session="user-42"))

Where deepagents' ``StoreBackend`` loads a whole file to show 100 of its lines and pages
through every file of the namespace to grep, this backend reads a window with blobpad's
line reads (two chunks at most, whatever the file's size) and greps through
``Store.grep_session`` (literal search, only the entries the path and glob select).

How files map onto blobpad (another process opening the same store sees the same files):

* **Session.** Every file of a backend lives in one blobpad session (``session=``, a
  string, or a function of the LangGraph ``Runtime`` returning one, like
  ``StoreBackend``'s namespace factory).
* **Path -> entry name.** The file ``/src/app.py`` is the named entry ``/src/app.py``; a
  path longer than :data:`MAX_PATH_BYTES` bytes of UTF-8 (or starting with
  :data:`HASHED_NAME`) is named ``HASHED_NAME + sha256(path)``, the path itself being
  in the entry's meta (``meta["path"]``).  Writing a path again replaces the entry and
  keeps its ``created_at``.
* **Content.** ``write`` stores the string as text; ``upload_files`` stores valid UTF-8
  as text and anything else as binary, which reads come back as base64 (``encoding:
  "base64"``), as ``StoreBackend`` does.
* **Lifetime.** Files never expire (``ttl=None``) unless ``ttl=`` says otherwise.  The
  large tool results deepagents evicts (paths in its ``large_tool_results`` folder, at
  the root or under a ``CompositeBackend``'s ``artifacts_root``: see ``evict_prefixes``)
  expire after ``evicted_ttl`` seconds (a day by default) and, being the entries closest
  to expiry, are the first the store evicts when it reaches its ``max_bytes`` cap: they
  never pile up.  Files without a TTL are never evicted: a write that does not fit once
  the expiring entries made room is refused ("Error writing file", StoreFull), and every
  other file stays.  A ``CompositeBackend`` route strips its prefix: a BlobpadBackend
  routed at the eviction folder alone (``routes={"/large_tool_results/": backend}``)
  sees ``/call_1``, and takes ``evict_prefixes=("/",)``.  ``BlobpadBackend()`` with no store opens a
  fresh in-memory store capped at 1 GiB.

Lines are numbered exactly as deepagents numbers them: ``read`` splits like
``str.splitlines`` (so ``\\r``, ``\\r\\n``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``,
``\\x85``, U+2028 and U+2029 end lines too) and gives ``\\r\\n`` and ``\\r`` back as
``\\n``; ``grep`` splits on ``\\n`` only.  For a file whose only line ends are ``\\n``
(what the backend checks once per entry, and knows for what it wrote itself) the two
agree with blobpad's line index and a read costs the same on any size; a file holding
other line ends is read by streaming it from the start (memory stays bounded, time
grows with the offset).

Bounds (the arguments come from a model): a read returns at most ``max_read_bytes`` of
text (fewer lines than ``limit`` when they are longer, ``next_offset`` saying where to
go on; a single longer line is returned whole), a grep at most ``max_grep_matches``
matches (``truncated`` set), each line of a match cut to a window of ``line_window``
characters around its first match, within ``grep_timeout`` seconds.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from deepagents.backends.protocol import (
    BackendProtocol,
    DeleteResult,
    EditResult,
    FileData,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.utils import (
    _get_backend_read_file_type,
    compile_grep_include_glob,
    normalize_read_bounds,
    perform_string_replacement,
    slice_read_response,
)

from ..errors import BlobpadError, Conflict, InvalidArgument, NotFound, NoUniqueMatch, check_int, check_ttl, describe
from ..index import Entry
from ..put import MAX_META, check_meta
from ..reads import MAX_SESSION_ENTRIES
from ..search import check_timeout
from ..store import Store
from ..store import open as open_store

__all__ = ["BlobpadBackend", "HASHED_NAME", "MAX_PATH_BYTES"]

#: paths up to this many bytes of UTF-8 are entry names as they are
MAX_PATH_BYTES = 200
#: entry names of longer paths: this prefix, then the path's SHA-256
HASHED_NAME = "~sha256/"
#: what ``str.splitlines`` ends lines at, besides ``\n``
_OTHER_LINE_ENDS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_OTHER_LINE_ENDS_RE2 = "[\\r\\x0b\\x0c\\x1c-\\x1e\\x{85}\\x{2028}\\x{2029}]"
_ANY_LINE_END = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_BLOCK = 1 << 20  # bytes streamed at a time where a file is read from its start
#: deepagents' evicted tool results: ``{artifacts_root}/large_tool_results/<id>``, any root
_EVICTED = re.compile(r"(?:/[^/]+)*/large_tool_results/")
_KNOWN = 4096  # entries whose line ends this process remembers

SessionFactory = Callable[[Any], str]
T = TypeVar("T")


def _iso(t: float | None) -> str:
    return "" if t is None else datetime.fromtimestamp(t, UTC).isoformat()


def _normalize_path(path: str | None) -> str:
    """The search root deepagents' grep and glob use: leading ``/``, no trailing one."""
    path = path or "/"
    if not path.strip():
        raise ValueError("Path cannot be empty")
    path = path if path.startswith("/") else "/" + path
    return path.rstrip("/") or "/"


def _relative(path: str, root: str) -> str:
    if root == "/":
        return path[1:]
    if path == root:
        return path.rsplit("/", 1)[-1]
    return path[len(root) + 1:]


class _Refused(Exception):
    """An InvalidArgument of the function :meth:`BlobpadBackend._on_file` runs, carried past its lookup's."""

    def __init__(self, error: InvalidArgument) -> None:
        super().__init__(str(error))
        self.error = error


def _under(path: str, root: str) -> bool:
    """Whether ``path`` is the file ``root`` or inside the directory ``root``."""
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


class BlobpadBackend(BackendProtocol):
    """A deepagents backend over a blobpad store: see the module's documentation.

    Args:
        store: a :class:`blobpad.Store` (left open by :meth:`close`), a path or URL that
            :func:`blobpad.open` takes (closed by :meth:`close`), or None for a fresh
            in-memory store capped at ``max_bytes`` (1 GiB by default).
        session: the blobpad session holding the files, or a function of the LangGraph
            ``Runtime`` (None outside a graph) returning it.
        ttl: seconds until a written file expires; None (the default) for never.
        evicted_ttl: seconds until a file under one of ``evict_prefixes`` expires.
        evict_prefixes: the path prefixes of deepagents' evicted tool results; None (the
            default): a path in a ``large_tool_results`` folder at the root or below it
            (deepagents writes them to ``{artifacts_root}/large_tool_results/``).
        max_read_bytes, max_grep_matches, line_window, grep_timeout: the bounds of reads
            and greps (see the module's documentation).
    """

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        session: str | SessionFactory = "deepagents",
        ttl: float | None = None,
        evicted_ttl: float | None = 24 * 3600,
        evict_prefixes: Iterable[str] | None = None,
        max_bytes: int = 1 << 30,
        max_read_bytes: int = 16 << 20,
        max_grep_matches: int = 10_000,
        line_window: int = 100_000,
        grep_timeout: float | None = 30.0,
    ) -> None:
        if not (isinstance(session, str) or callable(session)):
            raise InvalidArgument(f"session must be a string or a function of the runtime, not {describe(session)}")
        if isinstance(session, str) and len(session.encode("utf-8", "surrogatepass")) > 240:
            raise InvalidArgument("session is longer than blobpad's 240 bytes of UTF-8")
        check_int("max_read_bytes", max_read_bytes, minimum=1)
        check_int("max_grep_matches", max_grep_matches, minimum=1)
        check_int("line_window", line_window, minimum=1)
        ttl, evicted_ttl = check_ttl(ttl, "ttl"), check_ttl(evicted_ttl, "evicted_ttl")  # before any write needs them
        prefixes = None if evict_prefixes is None else tuple(evict_prefixes)
        if prefixes is not None and not all(isinstance(p, str) for p in prefixes):
            raise InvalidArgument("evict_prefixes must be path prefixes (strings), or None")
        grep_timeout = check_timeout(grep_timeout, "grep_timeout")
        # every argument is checked before a store is opened: a refused one leaves none open
        self._owned = not isinstance(store, Store)
        if store is None:
            self.store: Store = open_store("memory://", max_bytes=max_bytes)
        elif isinstance(store, Store):
            self.store = store
        elif isinstance(store, str):
            self.store = open_store(store)
        else:
            raise InvalidArgument(f"store must be a blobpad.Store, a path or URL, or None, not {describe(store)}")
        self._session = session
        self.ttl = ttl
        self.evicted_ttl = evicted_ttl
        self.evict_prefixes = prefixes
        self.max_read_bytes = max_read_bytes
        self.max_grep_matches = max_grep_matches
        self.line_window = line_window
        self.grep_timeout = grep_timeout
        # entry id -> None (only \n ends lines) or the number of str.splitlines lines
        self._line_ends: OrderedDict[str, int | None] = OrderedDict()
        self._blanks: OrderedDict[str, bool] = OrderedDict()  # whether each entry read is only whitespace

    def close(self) -> None:
        """Close the store if this backend opened it."""
        if self._owned:
            self.store.close()

    def __enter__(self) -> BlobpadBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- names -------------------------------------------------------------------------

    @property
    def session(self) -> str:
        """The session of the current call (the factory's answer, when one was given)."""
        if isinstance(self._session, str):
            return self._session
        try:
            from langgraph.runtime import get_runtime
            runtime = get_runtime()
        except (ImportError, RuntimeError, KeyError):
            runtime = None
        try:
            value = self._session(runtime)
        except AttributeError as exc:
            if runtime is None:  # as StoreBackend says it
                raise RuntimeError(
                    "The session function tried to read the Runtime, but it is unavailable (running outside a "
                    "LangGraph graph execution). Use BlobpadBackend inside a graph (e.g. via create_deep_agent), or "
                    "pass a session function that does not read the Runtime, or a string."
                ) from exc
            raise
        if not isinstance(value, str):
            raise InvalidArgument(f"the session function returned {describe(value)}, not a string")
        return value

    @staticmethod
    def entry_name(path: str) -> str:
        """The name of the entry holding ``path``."""
        if len(path.encode("utf-8", "surrogatepass")) <= MAX_PATH_BYTES and not path.startswith(HASHED_NAME):
            return path
        return HASHED_NAME + hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()

    @staticmethod
    def _path(entry: Entry) -> str:
        path = entry.meta.get("path") if entry.name and entry.name.startswith(HASHED_NAME) else None
        return path if isinstance(path, str) else (entry.name or "")

    def _entry(self, session: str, path: str) -> Entry | None:
        if not isinstance(path, str):
            return None
        try:
            return self.store.find(self.entry_name(path), session=session)
        except (NotFound, InvalidArgument):
            return None

    def _on_file(self, session: str, path: str, fn: Callable[[Entry], T]) -> T:
        """``fn(entry)`` on the entry holding ``path``, run again on the new one if another
        writer (any host) writes the file while ``fn`` reads it (:meth:`Store.with_named`).

        Raises NotFound when there is no such file, and what ``fn`` raises."""
        try:
            name = self.entry_name(path)
        except (TypeError, ValueError):
            raise NotFound(f"no file {describe(path)}") from None

        def call(entry: Entry) -> T:
            try:
                return fn(entry)
            except InvalidArgument as exc:  # fn's own (an edit's text): not the lookup's, passed on as it is
                raise _Refused(exc) from None

        try:
            return self.store.with_named(name, call, session=session)
        except _Refused as refused:
            raise refused.error from None
        except InvalidArgument:  # a path no file can have (lone surrogates, too long): no such file
            raise NotFound(f"no file {describe(path)}") from None

    def _files(self, session: str, root: str = "/") -> dict[str, Entry]:
        """The files at or under ``root`` (a path as ``_normalize_path`` gives it), by path."""
        found: dict[str, Entry] = {}
        prefix = "" if root == "/" else root
        try:
            size = len(prefix.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates: no file's path has them (writes refuse them)
            return found
        if size <= 240:
            for e in self.store.named(session=session, prefix=prefix):
                if not e.name.startswith(HASHED_NAME):
                    found[e.name] = e
        for e in self.store.named(session=session, prefix=HASHED_NAME):
            path = self._path(e)
            if path != e.name:
                found[path] = e
        return {p: e for p, e in found.items() if _under(p, root)}

    def _file_data(self, entry: Entry, content: str) -> FileData:
        data = FileData(content=content, encoding="utf-8" if entry.is_text else "base64")
        data["created_at"] = _iso(entry.created_at)
        data["modified_at"] = _iso(entry.updated_at or entry.created_at)
        return data

    def _whole(self, entry: Entry) -> FileData:
        content = self.store.get(entry.id)
        if isinstance(content, bytes):
            return self._file_data(entry, base64.standard_b64encode(content).decode("ascii"))
        return self._file_data(entry, content)

    @staticmethod
    def _size(entry: Entry) -> int:
        """The size ``StoreBackend`` reports: UTF-8 bytes of text, characters of base64."""
        return entry.size_bytes if entry.is_text else 4 * ((entry.size_bytes + 2) // 3)

    def _info(self, path: str, entry: Entry) -> FileInfo:
        return FileInfo(path=path, is_dir=False, size=self._size(entry),
                        modified_at=_iso(entry.updated_at or entry.created_at))

    def _ttl_for(self, path: str) -> float | None:
        if self.evict_prefixes is None:
            evicted = _EVICTED.match(path) is not None
        else:
            evicted = any(path.startswith(p) for p in self.evict_prefixes)
        return self.evicted_ttl if evicted else self.ttl

    def _put(self, session: str, path: str, data: str | bytes, *, kind: str | None = None,
             meta: dict[str, Any] | None = None) -> Entry:
        name = self.entry_name(path)
        meta = dict(meta or {})
        if name != path:
            meta["path"] = path
            try:  # the path is kept in the entry's meta: at most MAX_META characters of JSON
                check_meta(meta)
            except InvalidArgument:
                raise InvalidArgument(
                    f"the path is {len(path)} characters; blobpad keeps a path in at most {MAX_META} characters of JSON"
                ) from None
        # a file is never evicted to make room for another: a write that does not fit is refused
        entry = self.store.put(data, session=session, name=name, ttl=self._ttl_for(path), meta=meta, kind=kind,
                               evict_untimed=False)
        if isinstance(data, str):
            self._remember(entry.id, None if _OTHER_LINE_ENDS.search(data) is None else self._count_lines(entry))
        return entry

    # -- line ends ---------------------------------------------------------------------

    def _remember(self, entry_id: str, value: int | None) -> None:
        self._line_ends[entry_id] = value
        self._line_ends.move_to_end(entry_id)
        while len(self._line_ends) > _KNOWN:
            self._line_ends.popitem(last=False)

    def _splitlines_total(self, entry: Entry) -> int | None:
        """None when only ``\\n`` ends lines of ``entry``, else its ``str.splitlines`` count."""
        if entry.id in self._line_ends:
            self._line_ends.move_to_end(entry.id)
            return self._line_ends[entry.id]
        found = self.store.count(entry.id, _OTHER_LINE_ENDS_RE2)
        value = None if found == 0 else self._count_lines(entry)
        self._remember(entry.id, value)
        return value

    def _text_blocks(self, entry: Entry) -> Iterator[str]:
        """The text of ``entry`` in blocks of about 1 MB, never split inside a character."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        with self.store.stream(entry.id) as fh:
            while block := fh.read(_BLOCK):
                text = decoder.decode(block)
                if text:
                    yield text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    def _split_lines(self, entry: Entry) -> Iterator[str]:
        """The lines of ``entry`` as ``str.splitlines(keepends=True)`` gives them, streamed."""
        pending: list[str] = []  # the start of a line not ended yet
        for text in self._text_blocks(entry):
            if _ANY_LINE_END.search(text) is None:
                pending.append(text)  # no end in this block: never re-split a long line
                continue
            lines = "".join([*pending, text]).splitlines(keepends=True)
            pending = []
            last = lines[-1]
            if last.endswith("\r") or last.splitlines()[0] == last:  # unended, or a \r a \n may follow
                pending.append(lines.pop())
            yield from lines
        if pending:
            yield "".join(pending)

    def _count_lines(self, entry: Entry) -> int:
        return sum(1 for _ in self._split_lines(entry))

    # -- BackendProtocol ---------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        """The files and directories directly in ``path`` (directories end with ``/``)."""
        if not isinstance(path, str):
            return LsResult(error=f"path must be a string, not {describe(path)}")
        session = self.session
        base = path if path.endswith("/") else path + "/"
        infos: list[FileInfo] = []
        dirs: set[str] = set()
        for file_path, entry in self._files(session, base.rstrip("/") or "/").items():
            if not file_path.startswith(base):
                continue
            rest = file_path[len(base):]
            if "/" in rest:
                dirs.add(base + rest.split("/", 1)[0] + "/")
            else:
                infos.append(self._info(file_path, entry))
        infos.extend(FileInfo(path=d, is_dir=True, size=0, modified_at="") for d in sorted(dirs))
        infos.sort(key=lambda info: info.get("path", ""))
        return LsResult(entries=infos)

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Lines ``offset`` to ``offset + limit`` (0-based) of a file, numbered as deepagents does."""
        try:
            offset, limit = normalize_read_bounds(offset, limit)
        except (TypeError, ValueError, OverflowError):
            return ReadResult(error=f"offset and limit must be integers, not {describe(offset)} and {describe(limit)}")
        try:
            with self.store.snapshot():  # its several reads see one state, whatever another host writes meanwhile
                entry = self._entry(self.session, file_path)
                if entry is None:
                    raise NotFound(file_path)
                return self._read(entry, file_path, offset, limit)
        except NotFound:
            return ReadResult(error=f"File '{file_path}' not found")
        except BlobpadError as exc:
            return ReadResult(error=f"Error reading file '{file_path}': {exc}")

    def _read(self, entry: Entry, file_path: str, offset: int, limit: int) -> ReadResult:
        if _get_backend_read_file_type(file_path) != "text":
            return ReadResult(file_data=self._whole_read(entry))
        if not entry.is_text:
            return slice_read_response(self._whole_read(entry), offset, limit)
        if self._blank(entry):
            return ReadResult(file_data=self._whole_read(entry))
        if limit == 0:
            return ReadResult(file_data=self._file_data(entry, ""), no_lines_requested=True)
        total = self._splitlines_total(entry)
        if total is None:
            return self._read_indexed(entry, offset, limit)
        return self._read_streamed(entry, offset, limit, total)

    def _whole_read(self, entry: Entry) -> FileData:
        """The whole file, as the reads that show a file whole (binary, a non-text type, only
        white space) do, when it is at most ``max_read_bytes`` as shown; else InvalidArgument."""
        shown = entry.size_bytes if entry.is_text else 4 * ((entry.size_bytes + 2) // 3)  # base64
        if shown > self.max_read_bytes:
            raise InvalidArgument(
                f"the file is shown whole, and is {shown} bytes{'' if entry.is_text else ' of base64'}; a read returns "
                f"at most {self.max_read_bytes} (max_read_bytes): download it instead"
            )
        return self._whole(entry)

    def _blank(self, entry: Entry) -> bool:
        """Whether the text is empty or only whitespace (deepagents shows it whole)."""
        if not entry.chars:
            return True
        known = self._blanks.get(entry.id)
        if known is None:
            known = not self.store.head(entry.id, 4096).strip() and all(
                not text.strip() for text in self._text_blocks(entry))
            self._blanks[entry.id] = known
            while len(self._blanks) > _KNOWN:
                self._blanks.popitem(last=False)
        return known

    def _read_indexed(self, entry: Entry, offset: int, limit: int) -> ReadResult:
        total = entry.lines
        if offset >= total:
            return ReadResult(error=f"Line offset {offset} exceeds file length ({total} lines)")
        first, last = offset + 1, min(offset + limit, total)
        start, end = self.store.line_offsets(entry.id, first, last)
        if end - start > self.max_read_bytes and last > first:
            lo, hi = first, last  # the most lines from `first` that fit: lo fits (or is first), hi does not
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.store.line_offsets(entry.id, first, mid)[1] - start <= self.max_read_bytes:
                    lo = mid
                else:
                    hi = mid - 1
            last = lo
            end = self.store.line_offsets(entry.id, first, last)[1]
        text = self.store.byte_range(entry.id, start, end).decode("utf-8")
        return ReadResult(file_data=self._file_data(entry, text), total_lines=total, start_line=first,
                          end_line=last, next_offset=last if last < total else None)

    def _read_streamed(self, entry: Entry, offset: int, limit: int, total: int) -> ReadResult:
        if offset >= total:
            return ReadResult(error=f"Line offset {offset} exceeds file length ({total} lines)")
        picked: list[str] = []
        size = 0
        for number, line in enumerate(self._split_lines(entry)):
            if number < offset:
                continue
            n = len(line.encode("utf-8"))  # max_read_bytes counts bytes, as the indexed read does
            if len(picked) >= limit or (picked and size + n > self.max_read_bytes):
                break
            picked.append(line)
            size += n
        text = "".join(picked).replace("\r\n", "\n").replace("\r", "\n")
        last = offset + len(picked)
        return ReadResult(file_data=self._file_data(entry, text), total_lines=total, start_line=offset + 1,
                          end_line=last, next_offset=last if last < total else None)

    def write(self, file_path: str, content: str) -> WriteResult:
        """Create ``file_path`` or replace its content (keeping its ``created_at``)."""
        if not isinstance(file_path, str) or not isinstance(content, str):
            return WriteResult(error="file_path and content must be strings")
        try:
            self._put(self.session, file_path, content)
        except BlobpadError as exc:
            return WriteResult(error=f"Error writing file '{file_path}': {exc}")
        return WriteResult(path=file_path)

    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:  # noqa: FBT001, FBT002
        """Replace ``old_string`` by ``new_string`` (once, or everywhere with ``replace_all``)."""
        if not all(isinstance(s, str) for s in (file_path, old_string, new_string)):
            return EditResult(error="Error: file_path, old_string and new_string must be strings")
        def edit(entry: Entry) -> EditResult:
            if not entry.is_text:
                return EditResult(error="Error: Cannot edit binary files with text replacements.")
            if not old_string:
                message = perform_string_replacement("", old_string, new_string, replace_all)
                return EditResult(error=message if isinstance(message, str) else "Error: old_string cannot be empty.")
            return self._edit(entry, file_path, old_string, new_string, replace_all)

        try:  # a file written again since it was looked up is edited as it is now
            return self._on_file(self.session, file_path, edit)
        except NotFound:
            return EditResult(error=f"Error: File '{file_path}' not found")
        except BlobpadError as exc:
            return EditResult(error=f"Error editing file '{file_path}': {exc}")

    def _edit(self, entry: Entry, file_path: str, old: str, new: str, replace_all: bool) -> EditResult:
        try:
            done = self.store.edit(entry.id, old, new, replace_all=replace_all, evict_untimed=False)  # as _put
        except NoUniqueMatch as exc:
            return EditResult(error=self._edit_refusal(entry, old, exc.occurrences))
        except Conflict:
            return EditResult(error=f"Error: File '{file_path}' was changed by another writer during the edit; "
                                    "read it again and retry")
        if entry.id in self._line_ends and self._line_ends[entry.id] is None and not _OTHER_LINE_ENDS.search(new):
            self._remember(done.entry.id, None)  # no other line end before, none added
        return EditResult(path=file_path, occurrences=done.occurrences)

    def _edit_refusal(self, entry: Entry, old: str, occurrences: int) -> str:
        """deepagents' own message for a refused edit, from the counts alone."""
        if occurrences > 1:
            return (f"Error: String '{old}' appears {occurrences} times in file. Use replace_all=True to replace "
                    "all instances, or provide a more specific string with surrounding context.")
        if old.endswith("\n") and len(old) > 1:
            stripped = old[:-1]
            if self.store.tail(entry.id, len(stripped)) == stripped:
                count = self.store.occurrences(entry.id, stripped)
                if count == 1:
                    return ("Error: old_string ends with a newline, but the file does not end with a newline. "
                            "Retry with the trailing newline removed from old_string (and from new_string if it "
                            "also ends with a newline).")
                return ("Error: old_string ends with a newline, but the file does not end with a newline. "
                        f"With the trailing newline removed, old_string would appear {count} times in the file. "
                        "Retry with the trailing newline removed and add surrounding context so the match is "
                        "unique.")
        return f"Error: String not found in file: '{old}'"

    def delete(self, file_path: str) -> DeleteResult:
        """Delete a file, or a directory and everything under it."""
        if not isinstance(file_path, str):
            return DeleteResult(error=f"Error: file_path must be a string, not {describe(file_path)}")
        session = self.session
        base = file_path.rstrip("/")
        doomed = [e for p, e in self._files(session, base or "/").items() if p == base or p.startswith(base + "/")]
        if not doomed:
            return DeleteResult(error=f"Error: File '{file_path}' not found")
        for entry in doomed:
            try:
                self.store.delete(entry.id)
            except NotFound:
                pass  # deleted meanwhile: the outcome asked for
        return DeleteResult(path=file_path)

    def grep(self, pattern: str, path: str | None = None, glob: str | None = None, *,
             max_count: int | None = None) -> GrepResult:
        """Lines holding the literal ``pattern`` in the text files at or under ``path``.

        Lines are split on ``\\n`` and numbered from 1, as deepagents does.  At most
        ``max_count`` matches (and never more than ``max_grep_matches``); ``truncated``
        when more exist or the time budget ran out.
        """
        if not isinstance(pattern, str):
            return GrepResult(error=f"pattern must be a string, not {describe(pattern)}")
        if max_count is not None and (isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 0):
            return GrepResult(error=f"max_count must be a non-negative integer, not {describe(max_count)}")
        try:
            root = _normalize_path(path)
        except (ValueError, TypeError):
            return GrepResult(matches=[])
        with self.store.snapshot():  # the files listed are the files searched, whatever another host writes
            return self._grep(pattern, root, glob, max_count)

    def _grep(self, pattern: str, root: str, glob: str | None, max_count: int | None) -> GrepResult:
        session = self.session
        files = self._files(session, root)  # long roots too: _files finds the files named by a hash
        exact = files.get(root)
        if exact is not None:
            files = {root: exact}
        if glob:
            try:
                matcher = compile_grep_include_glob(glob)
            except ValueError as exc:
                return GrepResult(error=str(exc))
            files = {p: e for p, e in files.items() if matcher(_relative(p, root))}
        # in the order the files were first written, as StoreBackend finds them (a store keeps a key's place
        # when it is written again): with max_count, the same matches come first
        text_files = sorted(((p, e) for p, e in files.items() if e.is_text), key=lambda pe: (pe[1].created_at, pe[1].seq))
        files = dict(text_files)
        cap = self.max_grep_matches if max_count is None else min(max_count, self.max_grep_matches)
        if not files:
            return GrepResult(matches=[])
        by_id = {e.id: p for p, e in files.items()}
        try:
            if pattern == "":
                return self._grep_everything(files, cap)
            found, truncated = self._grep_files(session, root, pattern, list(by_id), cap)
        except BlobpadError as exc:
            return GrepResult(error=f"Error searching files: {exc}")
        if cap == 0:  # max_count=0: no match shown, truncated if one exists
            return GrepResult(matches=[], truncated=bool(found))
        matches = [{"path": by_id[m.entry_id], "line": m.line, "text": m.text} for m in found]
        return GrepResult(matches=matches, truncated=truncated)  # type: ignore[arg-type]

    def _grep_files(self, session: str, root: str, pattern: str, ids: list[str], cap: int) -> tuple[list[Any], bool]:
        """(the first ``cap`` matches (one for ``cap`` 0) of the literal ``pattern`` in the
        entries ``ids``, in their order; whether more exist, or the time budget ran out):
        ``Store.grep_session`` over :data:`~blobpad.reads.MAX_SESSION_ENTRIES` of them at a
        time, within one time budget (``grep_timeout``); once ``cap`` are found, the files
        left are searched for one more.  A file expired since it was listed is skipped."""
        deadline = None if self.grep_timeout is None else time.monotonic() + self.grep_timeout
        found: list[Any] = []
        want = max(cap, 1)  # max_count=0 still asks whether one match exists
        for start in range(0, len(ids), MAX_SESSION_ENTRIES):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return found, True
            probing = len(found) >= want  # all wanted are found: is there one more?
            result = self._grep_batch(session, root, pattern, ids[start : start + MAX_SESSION_ENTRIES],
                                      1 if probing else want - len(found), left)
            if result is None:
                continue
            if probing:
                if result.matches or result.timed_out:
                    return found, True
                continue
            found.extend(result.matches)
            if result.truncated or result.timed_out:
                return found, True
        return found, False

    def _grep_batch(self, session: str, root: str, pattern: str, batch: list[str], most: int,
                    timeout: float | None) -> Any:
        """``Store.grep_session`` of the entries ``batch`` (None when none is left).  The
        grep reads one snapshot (:meth:`grep`), so a listed file can only have expired
        since: it is dropped and the batch searched again."""
        for attempt in range(3):
            try:
                return self.store.grep_session(session, pattern, entries=batch, fixed=True, max_matches=most,
                                               line_window=self.line_window, timeout=timeout)
            except NotFound:
                if attempt == 2:
                    raise
                live = {e.id for e in self._files(session, root).values()}
                batch = [i for i in batch if i in live]
                if not batch:
                    return None
        return None

    def _grep_everything(self, files: dict[str, Entry], cap: int) -> GrepResult:
        """An empty pattern: every line of ``content.split("\\n")`` matches, a final empty one
        included.  A file expired since it was listed (the grep reads one snapshot) is skipped."""
        matches: list[dict[str, Any]] = []
        for path, entry in files.items():  # in grep's order
            try:
                lines = entry.lines
                trailing = entry.chars == 0 or self.store.tail(entry.id, 1) == "\n"
                for number in range(1, lines + (2 if trailing else 1)):
                    if len(matches) >= cap:
                        return GrepResult(matches=matches, truncated=True)  # type: ignore[arg-type]
                    if number > lines:
                        text = ""
                    else:
                        window = self.store.line_windows(entry.id, number, number, width=self.line_window)
                        text = window[0].text if window else ""
                    matches.append({"path": path, "line": number, "text": text})
            except NotFound:
                continue
        return GrepResult(matches=matches)  # type: ignore[arg-type]

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Files matching ``pattern`` (deepagents' glob rules), most recently modified first."""
        if not isinstance(pattern, str):
            return GlobResult(error=f"pattern must be a string, not {describe(pattern)}")
        try:
            root = _normalize_path(path)
        except (ValueError, TypeError):
            return GlobResult(matches=[])
        try:
            matcher = compile_grep_include_glob(pattern)
        except ValueError as exc:
            return GlobResult(error=str(exc))
        files = self._files(self.session, root)  # the file root, or the files under the directory root
        if root in files:
            files = {root: files[root]}
        picked = [(p, e) for p, e in files.items() if matcher(_relative(p, root))]
        picked.sort(key=lambda pe: _iso(pe[1].updated_at or pe[1].created_at), reverse=True)
        return GlobResult(matches=[self._info(p, e) for p, e in picked])

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Store each ``(path, bytes)``: valid UTF-8 as text, anything else as binary."""
        session = self.session
        responses = []
        for path, content in files:
            try:
                if not isinstance(path, str) or not isinstance(content, (bytes, bytearray, memoryview)):
                    raise InvalidArgument("each file must be a (path, bytes) pair")
                data = bytes(content)
                try:
                    self._put(session, path, data.decode("utf-8"))
                except UnicodeDecodeError:
                    self._put(session, path, data, kind="binary")
                responses.append(FileUploadResponse(path=path, error=None))
            except BlobpadError as exc:
                responses.append(FileUploadResponse(path=path if isinstance(path, str) else repr(path),
                                                    error=f"{type(exc).__name__}: {exc}"))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """The bytes of each path (text as UTF-8), or ``file_not_found``."""
        session = self.session
        responses = []
        for path in paths:
            try:
                with self.store.snapshot():
                    entry = self._entry(session, path)
                    if entry is None:
                        raise NotFound(describe(path))
                    content = self.store.get(entry.id)
            except NotFound:
                responses.append(FileDownloadResponse(path=path, content=None, error="file_not_found"))
                continue
            data = content.encode("utf-8") if isinstance(content, str) else content
            responses.append(FileDownloadResponse(path=path, content=data, error=None))
        return responses
