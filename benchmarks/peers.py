"""blobpad and its peers, each storing and reading an observation its natural way.

Writers (put):

* ``blobpad``: ``Store.put(pathlib.Path(file))``, streaming, default options (zstd,
  fsync on commit).
* ``sqlite-seed``: the design of seed 000: one row per observation in SQLite with
  the seed's schema (copied below), content read whole and inserted with its
  head+tail summary; default pragmas (rollback journal, ``synchronous=FULL``).
* ``diskcache``: ``Cache.set(key, file, read=True)``, its streaming way to store a
  large value (kept as a file next to its SQLite index).
* ``file``: a plain copy of the file (``shutil.copyfile``, no fsync).
* ``zstd-cli``: ``zstd -3 -T2`` of the file (no fsync).

Readers (head, tail, range, lines, grep):

* ``blobpad``: a Store opened with ``cache_bytes=0`` (its chunk cache off), and
  ``blobpad-warm``: a Store with the default 64 MB cache; both on the LMDB engine
  (a directory).
* ``blobpad-memory`` and ``blobpad-memory-warm``: the same two Stores on the memory
  engine (``blobpad.open("memory://")``): the same chunks, index and checks, the
  records in this process's memory instead of LMDB's map.
* ``blobpad-redis`` and ``blobpad-redis-warm``: the same two Stores on the Redis
  engine (``blobpad.open("redis://127.0.0.1:PORT/0?namespace=...")``), on a Valkey
  server the run starts once and stops at its end (``benchmarks/redis_server.py``),
  over loopback, each store in a namespace of its own.
* ``naive-redis``: the same server used without blobpad: the raw content ``SET`` as
  one string key; head, tail and range by ``GETRANGE`` (bytes: the same as characters
  on ASCII text and binary data; other text is fetched whole and sliced), lines and
  grep by ``GET`` of the whole value, then Python as for ``sqlite-seed``.
* ``sqlite-seed``: ``SELECT content ... WHERE id = ?``, then Python slicing of the
  fetched ``str``/``bytes`` (what the seed's ``scratchpad_read`` does), ``re`` for grep.
* ``diskcache``: ``Cache.get(key)``, then the same slicing.
* ``mmap-re``: the plain file, memory-mapped per call: byte offsets directly,
  characters and lines by scanning blocks, ``re`` for grep.
* ``rg``: ``rg -n`` on the plain file; ``sed``: ``sed -n 'A,Bp;Bq'`` on it.
* ``zstd-rg`` and ``zstd-sed``: ``zstd -dc file.zst | rg`` (or ``| sed``): the
  compressed file, decompressed on every call.

Every reader answers in blobpad's terms (characters for text, bytes for binary;
lines without their newline, numbered from 1; grep returns matching line numbers),
so the benchmarks can check each answer against :class:`benchmarks.data.Truth`.

"Every matching line" (``grep_all``) produces each matching line with its number:
blobpad's ``GrepMatch`` objects (``max_matches`` 10**9, past any content), the
(number, line) pairs that ``mmap-re`` slices out of the map, and the ``N:line``
output that ``rg -n`` writes into a pipe the peer reads (what a shell shows).
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import mmap
import os
import re
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

import blobpad

from . import redis_server
from .data import Dataset

# The schema of seed 000 (shared/seeds/000_*.txt), verbatim.
SEED_SCHEMA = """
CREATE TABLE entries (
id TEXT PRIMARY KEY,
turn_id TEXT NOT NULL,
step_num INTEGER,
executor_name TEXT,
content_kind TEXT NOT NULL, -- 'text' | 'binary'
content BLOB NOT NULL,
size_bytes INTEGER NOT NULL,
summary TEXT,
created_at REAL NOT NULL,
expires_at REAL NOT NULL
);
"""
# "Indexes on turn_id (to retrieve entries of a turn) and expires_at (for the GC)."
SEED_INDEXES = """
CREATE INDEX entries_turn ON entries(turn_id);
CREATE INDEX entries_expiry ON entries(expires_at);
"""
SEED_TTL = 3600.0
SEED_SUMMARY_CHARS = 500

_BLOCK = 1 << 20
_CONTINUATION = bytes(range(0x80, 0xC0))


def disk_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (apparent sizes)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


# -- subprocesses -------------------------------------------------------------------------


class CommandResult:
    """Standard output of a pipeline, exit codes, and (when measured) the peak RSS of its processes."""

    def __init__(self, out: bytes, codes: list[int], peak_rss_kb: list[int | None]) -> None:
        self.out = out
        self.codes = codes
        self.peak_rss_kb = peak_rss_kb


@functools.lru_cache(maxsize=1)
def _gnu_time() -> str | None:
    path = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    if path is None:
        return None
    probe = subprocess.run([path, "-f", "%M", "true"], capture_output=True, text=True, check=False)
    return path if probe.returncode == 0 and probe.stderr.strip().isdigit() else None


def run_pipeline(*commands: list[str], measure: bool = False) -> CommandResult:
    """Run ``commands`` connected by pipes, like a shell's ``a | b``.

    With ``measure``, each process runs under GNU ``time -f %M`` to learn its own
    peak RSS.  (``ru_maxrss`` from ``wait4`` or ``RUSAGE_CHILDREN`` cannot be used:
    on Linux a child's ``ru_maxrss`` starts at its parent's peak RSS at fork time.)
    """
    timer = _gnu_time() if measure else None
    reports: list[str | None] = []
    argvs = []
    for cmd in commands:
        if timer:
            fd, report = tempfile.mkstemp(prefix="blobpad-bench-rss-")
            os.close(fd)
            reports.append(report)
            argvs.append([timer, "-f", "%M", "-o", report, *cmd])
        else:
            reports.append(None)
            argvs.append(cmd)
    procs: list[subprocess.Popen[bytes]] = []
    prev = None
    try:
        for argv in argvs:
            p = subprocess.Popen(argv, stdin=prev, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if prev is not None:
                prev.close()  # the upstream process gets SIGPIPE when the downstream one quits early
            prev = p.stdout
            procs.append(p)
        assert prev is not None
        out = prev.read()
        prev.close()
    finally:
        codes = [p.wait() for p in procs]
    peaks: list[int | None] = []
    for path in reports:
        if path is None:
            peaks.append(None)
            continue
        with open(path) as fh:
            last = fh.read().strip().splitlines()[-1:] or [""]
        os.unlink(path)
        peaks.append(int(last[0]) if last[0].isdigit() else None)
    return CommandResult(out, codes, peaks)


def tool(name: str) -> str | None:
    """Path of a command-line peer: on PATH, else in this interpreter's environment's bin
    (the test extra's ripgrep puts rg there, found even when the venv is not activated)."""
    return shutil.which(name) or shutil.which(name, path=os.path.join(sys.prefix, "bin"))


# -- shared slicing and grep over one buffer --------------------------------------------


Buffer = str | bytes | mmap.mmap


def _count(buf: Buffer, nl: Any, start: int, end: int) -> int:
    if isinstance(buf, mmap.mmap):
        return buf[start:end].count(nl)
    return buf.count(nl, start, end)


def matching_lines(buf: Buffer, rx: re.Pattern[Any], limit: int | None) -> list[int]:
    """Numbers of the lines of ``buf`` where ``rx`` matches (the first ``limit`` of them)."""
    nl: Any = "\n" if isinstance(buf, str) else b"\n"
    found: list[int] = []
    line = 1
    counted = 0
    pos = 0
    size = len(buf)
    while pos <= size and (limit is None or len(found) < limit):
        m = rx.search(buf, pos)
        if m is None:
            break
        start = m.start()
        line += _count(buf, nl, counted, start)
        counted = start
        found.append(line)
        end = buf.find(nl, m.end() if m.end() > start else start)
        if end < 0:
            break
        pos = end + 1
    return found


def matching_pairs(buf: Buffer, rx: re.Pattern[Any]) -> list[tuple[int, Any]]:
    """Every line of ``buf`` where ``rx`` matches, as (number, line without its newline)."""
    nl: Any = "\n" if isinstance(buf, str) else b"\n"
    found: list[tuple[int, Any]] = []
    line = 1
    counted = 0
    pos = 0
    size = len(buf)
    search = rx.search
    find = buf.find
    while pos <= size:
        m = search(buf, pos)
        if m is None:
            break
        start = m.start()
        line += _count(buf, nl, counted, start)
        counted = start
        first = buf.rfind(nl, 0, start) + 1
        end = find(nl, m.end() if m.end() > start else start)
        found.append((line, buf[first:] if end < 0 else buf[first:end]))
        if end < 0:
            break
        pos = end + 1
    return found


def count_lines(buf: Buffer, rx: re.Pattern[Any]) -> int:
    """How many lines of ``buf`` ``rx`` matches, like ``rg -c``."""
    nl: Any = "\n" if isinstance(buf, str) else b"\n"
    n = 0
    pos = 0
    size = len(buf)
    search = rx.search
    find = buf.find
    while pos <= size:
        m = search(buf, pos)
        if m is None:
            break
        n += 1
        end = find(nl, m.end() if m.end() > m.start() else m.start())
        if end < 0:
            break
        pos = end + 1
    return n


def _compile(pattern: str, *, ignore_case: bool = False, fixed: bool = False, binary: bool = False) -> re.Pattern[Any]:
    source = re.escape(pattern) if fixed else pattern
    flags = re.IGNORECASE if ignore_case else 0
    return re.compile(source.encode("utf-8") if binary else source, flags)


def split_window(content: str, first: int, last: int) -> list[str]:
    """Lines ``first``..``last`` of fetched text, split only as far as needed."""
    parts = content.split("\n", last)
    window = parts[first - 1 : last]
    if len(parts) <= last and window and window[-1] == "" and content.endswith("\n"):
        window.pop()  # the empty piece after the final newline is not a line
    return window


# -- readers ---------------------------------------------------------------------------


class Reader:
    """One observation stored in one peer, and the reads an agent makes of it."""

    name: ClassVar[str]
    label: ClassVar[str]
    ops: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.measure_memory = False  # CLI readers: learn each command's peak RSS (slower)
        self.last_peak_rss_kb: int | None = None

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        """Why this peer cannot hold ``dataset`` here (None when it can)."""
        return None

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        """Store ``dataset`` in a new store under ``directory`` and return a reader of it."""
        raise NotImplementedError

    def location(self) -> dict[str, Any]:
        """What another process needs to open this reader again (see :func:`reopen`)."""
        raise NotImplementedError

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def head(self, n: int) -> str | bytes:
        raise NotImplementedError

    def tail(self, n: int) -> str | bytes:
        raise NotImplementedError

    def range(self, start: int, end: int) -> str | bytes:
        raise NotImplementedError

    def lines(self, first: int, last: int) -> list[str]:
        raise NotImplementedError

    def grep_absent(self, literal: str) -> int:
        """Lines containing ``literal`` (the benchmarks pass one that never occurs)."""
        raise NotImplementedError

    def grep_first(self, pattern: str, limit: int) -> list[int]:
        """Line numbers of the first ``limit`` lines matching ``pattern``."""
        raise NotImplementedError

    def grep_lines(self, literal: str) -> list[int]:
        """Numbers of every line containing ``literal`` (the benchmarks pass a rare one)."""
        raise NotImplementedError

    def grep_all(self, pattern: str, ignore_case: bool) -> int:
        """Produce every line matching ``pattern`` with its number; return how many."""
        raise NotImplementedError

    def grep_all_lines(self, pattern: str, ignore_case: bool) -> list[int]:
        """The numbers of the lines :meth:`grep_all` produces, the same way (to check it)."""
        raise NotImplementedError

    def count(self, pattern: str, *, ignore_case: bool) -> int:
        """How many lines match ``pattern``."""
        raise NotImplementedError


GREP_OPS = frozenset({"grep_absent", "grep_rare", "grep_first", "count", "grep_all"})
ALL_READ_OPS = frozenset({"head", "tail", "range", "lines"}) | GREP_OPS
#: a ``max_matches`` past any content (``Store.grep`` clamps it and pages nothing)
ALL_MATCHES = 10**9


class BlobpadReader(Reader):
    name = "blobpad"
    label = "blobpad (cache off)"
    ops = ALL_READ_OPS
    cache_bytes: ClassVar[int] = 0

    def __init__(self, dataset: Dataset, store: blobpad.Store, entry_id: str) -> None:
        super().__init__(dataset)
        self.store = store
        self.entry_id = entry_id
        #: (chunks_read, chunks_total) of the last grep or count
        self.last_chunks: tuple[int, int] | None = None

    def _chunks(self, result: Any) -> Any:
        self.last_chunks = (result.chunks_read, result.chunks_total)
        return result

    @classmethod
    def target(cls, directory: Path) -> str | Path:
        """Where ``load`` opens its store (``blobpad.open``'s target)."""
        return directory / "store"

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        store = blobpad.open(cls.target(directory), cache_bytes=cls.cache_bytes)
        entry = store.put(dataset.path)
        return cls(dataset, store, entry.id)

    def location(self) -> dict[str, Any]:
        return {"store": self.store.path, "id": self.entry_id, "cache_bytes": self.cache_bytes}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        store = blobpad.open(location["store"], cache_bytes=location["cache_bytes"])
        return cls(dataset, store, location["id"])

    def close(self) -> None:
        self.store.close()

    def head(self, n: int) -> str | bytes:
        return self.store.head(self.entry_id, n)

    def tail(self, n: int) -> str | bytes:
        return self.store.tail(self.entry_id, n)

    def range(self, start: int, end: int) -> str | bytes:
        return self.store.range(self.entry_id, start, end)

    def lines(self, first: int, last: int) -> list[str]:
        return self.store.lines(self.entry_id, first, last)

    def grep_absent(self, literal: str) -> int:
        return len(self._chunks(self.store.grep(self.entry_id, literal, fixed=True)))

    def grep_first(self, pattern: str, limit: int) -> list[int]:
        return [m.line for m in self._chunks(self.store.grep(self.entry_id, pattern, max_matches=limit))]

    def grep_lines(self, literal: str) -> list[int]:
        result = self._chunks(self.store.grep(self.entry_id, literal, fixed=True, max_matches=ALL_MATCHES))
        return [m.line for m in result]

    def _grep_all(self, pattern: str, ignore_case: bool) -> blobpad.MatchingLines:
        # what `blobpad grep` prints without -m: every matching line whole, with its number
        # (numbers and texts; the (number, text) pairs are made as they are printed)
        return self._chunks(self.store.matching_lines(self.entry_id, pattern, ignore_case=ignore_case))

    def grep_all(self, pattern: str, ignore_case: bool) -> int:
        return len(self._grep_all(pattern, ignore_case))

    def grep_all_lines(self, pattern: str, ignore_case: bool) -> list[int]:
        return [n for n, _ in self._grep_all(pattern, ignore_case)]

    def count(self, pattern: str, *, ignore_case: bool) -> int:
        return int(self._chunks(self.store.count(self.entry_id, pattern, ignore_case=ignore_case)))


class BlobpadWarmReader(BlobpadReader):
    name = "blobpad-warm"
    label = "blobpad (warm cache)"
    cache_bytes = 64 << 20


class BlobpadMemoryReader(BlobpadReader):
    """blobpad on the memory engine, its chunk cache off."""

    name = "blobpad-memory"
    label = "blobpad memory (cache off)"

    @classmethod
    def target(cls, directory: Path) -> str | Path:
        return "memory://"  # a private store of this process; nothing under ``directory``

    def location(self) -> dict[str, Any]:
        return {"memory": True, "cache_bytes": self.cache_bytes}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        # A memory store cannot be reopened: it lives only in the process that made it
        # (another process sees nothing of it) and its data are gone when its last store
        # closes. So reopening loads the dataset again, into a fresh memory store of the
        # calling process, with the same cache size.
        store = blobpad.open("memory://", cache_bytes=location["cache_bytes"])
        entry = store.put(dataset.path)
        return cls(dataset, store, entry.id)


class BlobpadMemoryWarmReader(BlobpadMemoryReader):
    name = "blobpad-memory-warm"
    label = "blobpad memory (warm cache)"
    cache_bytes = 64 << 20


class BlobpadRedisReader(BlobpadReader):
    """blobpad on the Redis engine: the run's Valkey server over loopback, a namespace per store,
    its chunk cache off."""

    name = "blobpad-redis"
    label = "blobpad Redis (cache off)"

    def __init__(self, dataset: Dataset, store: blobpad.Store, entry_id: str, target: str = "") -> None:
        super().__init__(dataset, store, entry_id)
        self.redis_target = target

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        return redis_server.unavailable()

    @classmethod
    def target(cls, directory: Path) -> str | Path:
        return redis_server.store_url(redis_server.url(), redis_server.namespace(directory.name))

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        target = str(cls.target(directory))
        store = blobpad.open(target, cache_bytes=cls.cache_bytes)
        entry = store.put(dataset.path)
        return cls(dataset, store, entry.id, target)

    def location(self) -> dict[str, Any]:
        return {"store": self.redis_target, "id": self.entry_id, "cache_bytes": self.cache_bytes}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        store = blobpad.open(location["store"], cache_bytes=location["cache_bytes"])
        return cls(dataset, store, location["id"], location["store"])

    def disconnect(self) -> None:
        """Close the store's connections, leaving its data on the server (reopen with :meth:`reopen`)."""
        self.store.close()

    def close(self) -> None:
        self.store.close()
        ns = dict(parse_qsl(urlsplit(self.redis_target).query)).get("namespace")
        if ns:
            redis_server.drop(redis_server.server(), ns)  # the store's keys leave the server's memory


class BlobpadRedisWarmReader(BlobpadRedisReader):
    name = "blobpad-redis-warm"
    label = "blobpad Redis (warm cache)"
    cache_bytes = 64 << 20


class _FetchedReader(Reader):
    """Peers that hand back the whole content, which the caller then slices."""

    ops = ALL_READ_OPS

    def fetch(self) -> str | bytes:
        raise NotImplementedError

    def head(self, n: int) -> str | bytes:
        return self.fetch()[:n]

    def tail(self, n: int) -> str | bytes:
        content = self.fetch()
        return content[-n:] if n else content[:0]

    def range(self, start: int, end: int) -> str | bytes:
        return self.fetch()[start:end]

    def lines(self, first: int, last: int) -> list[str]:
        content = self.fetch()
        if isinstance(content, bytes):
            content = content.decode("utf-8", "replace")
        return split_window(content, first, last)

    def grep_absent(self, literal: str) -> int:
        content = self.fetch()
        return len(matching_lines(content, _compile(literal, fixed=True, binary=isinstance(content, bytes)), None))

    def grep_first(self, pattern: str, limit: int) -> list[int]:
        content = self.fetch()
        return matching_lines(content, _compile(pattern, binary=isinstance(content, bytes)), limit)

    def grep_lines(self, literal: str) -> list[int]:
        content = self.fetch()
        return matching_lines(content, _compile(literal, fixed=True, binary=isinstance(content, bytes)), None)

    def count(self, pattern: str, *, ignore_case: bool) -> int:
        content = self.fetch()
        return count_lines(content, _compile(pattern, ignore_case=ignore_case, binary=isinstance(content, bytes)))


class SqliteSeedReader(_FetchedReader):
    name = "sqlite-seed"
    label = "SQLite row (seed 000)"

    def __init__(self, dataset: Dataset, writer: SqliteSeedWriter, entry_id: str) -> None:
        super().__init__(dataset)
        self.writer = writer
        self.entry_id = entry_id

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        return SqliteSeedWriter.unavailable(dataset)

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        writer = SqliteSeedWriter(directory)
        return cls(dataset, writer, writer.put(dataset))

    def location(self) -> dict[str, Any]:
        return {"directory": str(self.writer.directory), "id": self.entry_id}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        return cls(dataset, SqliteSeedWriter(Path(location["directory"])), location["id"])

    def close(self) -> None:
        self.writer.close()

    def fetch(self) -> str | bytes:
        row = self.writer.conn.execute(
            "SELECT content FROM entries WHERE id = ? AND expires_at > ?", (self.entry_id, time.time())
        ).fetchone()
        if row is None:
            raise KeyError(self.entry_id)
        content: str | bytes = row[0]
        return content


class DiskcacheReader(_FetchedReader):
    name = "diskcache"
    label = "diskcache"

    def __init__(self, dataset: Dataset, writer: DiskcacheWriter, key: str) -> None:
        super().__init__(dataset)
        self.writer = writer
        self.key = key

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        writer = DiskcacheWriter(directory)
        return cls(dataset, writer, writer.put(dataset))

    def location(self) -> dict[str, Any]:
        return {"directory": str(self.writer.directory), "key": self.key}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        return cls(dataset, DiskcacheWriter(Path(location["directory"])), location["key"])

    def close(self) -> None:
        self.writer.close()

    def fetch(self) -> str | bytes:
        value: bytes | None = self.writer.cache.get(self.key)
        if value is None:
            raise KeyError(self.key)
        return value.decode("utf-8") if self.dataset.is_text else value


class NaiveRedisReader(_FetchedReader):
    """A naive Redis user: the raw observation as one string key (``SET``) on the run's Valkey
    server; bytes by ``GETRANGE``, lines (and grep) by ``GET`` of the whole value and Python.

    ``GETRANGE`` counts bytes; blobpad's offsets count characters.  They are the same on
    ASCII text (the log) and on binary data, so there head, tail and range are one
    ``GETRANGE`` each; on other text (multibyte, JSON with non-ASCII) the naive user cannot
    know which bytes hold characters ``[start, end)`` and fetches the value with ``GET``,
    decodes it and slices the ``str``.
    """

    name = "naive-redis"
    label = "Redis string (GET / GETRANGE)"

    def __init__(self, dataset: Dataset, client: Any, key: str, by_bytes: bool) -> None:
        super().__init__(dataset)
        self.client = client
        self.key = key
        self.by_bytes = by_bytes

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        return redis_server.unavailable()

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        srv = redis_server.server()
        key = f"naive:{redis_server.namespace(directory.name)}"
        raw = dataset.path.read_bytes()
        client = srv.client(socket_timeout=60.0)
        client.set(key, raw)
        return cls(dataset, client, key, not dataset.is_text or raw.isascii())

    def location(self) -> dict[str, Any]:
        return {"key": self.key, "by_bytes": self.by_bytes}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        client = redis_server.server().client(socket_timeout=60.0)
        return cls(dataset, client, location["key"], location["by_bytes"])

    def disconnect(self) -> None:
        """Close the connection, leaving the key on the server (reopen with :meth:`reopen`)."""
        self.client.close()

    def close(self) -> None:
        self.client.delete(self.key)
        self.client.close()

    def _decode(self, value: bytes) -> str | bytes:
        return value.decode("utf-8") if self.dataset.is_text else value

    def fetch(self) -> str | bytes:
        value: bytes | None = self.client.get(self.key)
        if value is None:
            raise KeyError(self.key)
        return self._decode(value)

    def _getrange(self, start: int, end: int) -> str | bytes:
        """Bytes ``start`` to ``end`` inclusive (negative: from the end), as GETRANGE counts them."""
        return self._decode(self.client.getrange(self.key, start, end))

    def head(self, n: int) -> str | bytes:
        if not self.by_bytes:
            return super().head(n)
        return self._getrange(0, n - 1) if n else self._decode(b"")

    def tail(self, n: int) -> str | bytes:
        if not self.by_bytes:
            return super().tail(n)
        return self._getrange(-n, -1) if n else self._decode(b"")

    def range(self, start: int, end: int) -> str | bytes:
        if not self.by_bytes:
            return super().range(start, end)
        return self._getrange(start, end - 1) if end > start else self._decode(b"")


class MmapReader(Reader):
    """The plain file, mapped on each call."""

    name = "mmap-re"
    label = "file + mmap + re"
    ops = ALL_READ_OPS

    def __init__(self, dataset: Dataset, path: Path) -> None:
        super().__init__(dataset)
        self.path = path

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        return cls(dataset, dataset.path)

    def location(self) -> dict[str, Any]:
        return {"path": str(self.path)}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        return cls(dataset, Path(location["path"]))

    @contextmanager
    def _map(self) -> Iterator[mmap.mmap]:
        with open(self.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            yield mm

    def head(self, n: int) -> str | bytes:
        with self._map() as mm:
            if not self.dataset.is_text:
                return mm[:n]
            return codecs.getincrementaldecoder("utf-8")().decode(mm[: 4 * n])[:n]

    def tail(self, n: int) -> str | bytes:
        with self._map() as mm:
            if not self.dataset.is_text:
                return mm[max(0, len(mm) - n) :]
            raw = mm[max(0, len(mm) - 4 * n) :]
            skip = 0
            while skip < len(raw) and raw[skip] in _CONTINUATION:
                skip += 1
            text = raw[skip:].decode("utf-8")
            return text[-n:] if n else ""

    def range(self, start: int, end: int) -> str | bytes:
        with self._map() as mm:
            if not self.dataset.is_text:
                return mm[start:end]
            # Count characters block by block (a character starts at every byte that
            # is not a UTF-8 continuation byte) up to the block holding ``start``.
            pos = chars = 0
            while pos < len(mm):
                block = mm[pos : pos + _BLOCK]
                in_block = len(block.translate(None, _CONTINUATION))
                if chars + in_block > start:
                    break
                chars += in_block
                pos += len(block)
            while pos < len(mm) and mm[pos] in _CONTINUATION:
                pos += 1
            text = codecs.getincrementaldecoder("utf-8")().decode(mm[pos : pos + _BLOCK + 4 * (end - start)])
            return text[start - chars : end - chars]

    @staticmethod
    def _nth_newline(mm: mmap.mmap, n: int, pos: int) -> int:
        """Offset of the n-th newline (1-based) at or after ``pos``, or -1."""
        while pos < len(mm):
            block = mm[pos : pos + _BLOCK]
            c = block.count(b"\n")
            if c >= n:
                return pos + len(block) - len(block.split(b"\n", n)[-1]) - 1
            n -= c
            pos += len(block)
        return -1

    def lines(self, first: int, last: int) -> list[str]:
        with self._map() as mm:
            start = 0 if first == 1 else self._nth_newline(mm, first - 1, 0) + 1
            if first > 1 and start == 0:
                return []
            end = self._nth_newline(mm, last - first + 1, start)
            raw = mm[start:] if end < 0 else mm[start:end]
            if end < 0 and raw.endswith(b"\n"):
                raw = raw[:-1]
            return raw.decode("utf-8", "replace").split("\n")

    def grep_absent(self, literal: str) -> int:
        with self._map() as mm:
            return len(matching_lines(mm, _compile(literal, fixed=True, binary=True), None))

    def grep_first(self, pattern: str, limit: int) -> list[int]:
        with self._map() as mm:
            return matching_lines(mm, _compile(pattern, binary=True), limit)

    def grep_lines(self, literal: str) -> list[int]:
        with self._map() as mm:
            return matching_lines(mm, _compile(literal, fixed=True, binary=True), None)

    def _grep_all(self, pattern: str, ignore_case: bool) -> list[tuple[int, bytes]]:
        with self._map() as mm:
            return matching_pairs(mm, _compile(pattern, ignore_case=ignore_case, binary=True))

    def grep_all(self, pattern: str, ignore_case: bool) -> int:
        return len(self._grep_all(pattern, ignore_case))

    def grep_all_lines(self, pattern: str, ignore_case: bool) -> list[int]:
        return [n for n, _ in self._grep_all(pattern, ignore_case)]

    def count(self, pattern: str, *, ignore_case: bool) -> int:
        with self._map() as mm:
            return count_lines(mm, _compile(pattern, ignore_case=ignore_case, binary=True))


class _CliReader(Reader):
    """Command-line tools on the plain file (or on its zstd-compressed copy)."""

    tools: ClassVar[tuple[str, ...]] = ()  # the commands it needs
    compressed: ClassVar[bool] = False

    def __init__(self, dataset: Dataset, path: Path) -> None:
        super().__init__(dataset)
        self.path = path
        self.exe = {t: tool(t) or t for t in self.tools}

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        missing = [t for t in cls.tools if tool(t) is None]
        if missing:
            return f"{', '.join(missing)} not installed"
        return None

    @classmethod
    def load(cls, dataset: Dataset, directory: Path) -> Reader:
        return cls(dataset, dataset.zst_path() if cls.compressed else dataset.path)

    def location(self) -> dict[str, Any]:
        return {"path": str(self.path)}

    @classmethod
    def reopen(cls, dataset: Dataset, location: dict[str, Any]) -> Reader:
        return cls(dataset, Path(location["path"]))

    def _run(self, command: list[str]) -> bytes:
        """Run ``command`` on the file (reading it from ``zstd -dc`` when compressed)."""
        if self.compressed:
            result = run_pipeline([self.exe["zstd"], "-dcq", str(self.path)], command, measure=self.measure_memory)
        else:
            result = run_pipeline([*command, str(self.path)], measure=self.measure_memory)
        known = [p for p in result.peak_rss_kb if p is not None]
        self.last_peak_rss_kb = max(known) if known else None
        if result.codes[-1] not in (0, 1):
            raise RuntimeError(f"{command[0]} failed with exit code {result.codes[-1]}")
        return result.out


class RgReader(_CliReader):
    name = "rg"
    label = "rg -n (plain file)"
    ops = GREP_OPS
    tools: ClassVar[tuple[str, ...]] = ("rg",)

    def grep_absent(self, literal: str) -> int:
        out = self._run([self.exe["rg"], "--no-config", "-n", "-F", "--", literal])
        return out.count(b"\n")

    def grep_first(self, pattern: str, limit: int) -> list[int]:
        out = self._run([self.exe["rg"], "--no-config", "-n", "-m", str(limit), "--", pattern])
        return [int(line.split(b":", 1)[0]) for line in out.split(b"\n") if line]

    def count(self, pattern: str, *, ignore_case: bool) -> int:
        out = self._run([self.exe["rg"], "--no-config", "-c", *(["-i"] if ignore_case else []), "--", pattern])
        return int(out) if out.strip() else 0

    @staticmethod
    def _numbers(out: bytes) -> list[int]:
        return [int(line.split(b":", 1)[0]) for line in out.split(b"\n") if line]

    def grep_lines(self, literal: str) -> list[int]:
        return self._numbers(self._run([self.exe["rg"], "--no-config", "-n", "-F", "--", literal]))

    def _rg_all(self, pattern: str, ignore_case: bool) -> bytes:
        return self._run([self.exe["rg"], "--no-config", "-n", *(["-i"] if ignore_case else []), "--", pattern])

    def grep_all(self, pattern: str, ignore_case: bool) -> int:
        # rg writes the N:line pairs into the pipe; reading them all is the work (one per line)
        return self._rg_all(pattern, ignore_case).count(b"\n")

    def grep_all_lines(self, pattern: str, ignore_case: bool) -> list[int]:
        return self._numbers(self._rg_all(pattern, ignore_case))


class ZstdRgReader(RgReader):
    name = "zstd-rg"
    label = "zstd -dc | rg"
    tools = ("zstd", "rg")
    compressed = True


class SedReader(_CliReader):
    name = "sed"
    label = "sed -n (plain file)"
    ops = frozenset({"lines"})
    tools: ClassVar[tuple[str, ...]] = ("sed",)

    def lines(self, first: int, last: int) -> list[str]:
        out = self._run([self.exe["sed"], "-n", f"{first},{last}p;{last}q"])
        text = out.decode("utf-8", "replace")
        return text[:-1].split("\n") if text.endswith("\n") else text.split("\n") if text else []


class ZstdSedReader(SedReader):
    name = "zstd-sed"
    label = "zstd -dc | sed -n"
    tools = ("zstd", "sed")
    compressed = True


READERS: dict[str, type[Reader]] = {
    cls.name: cls
    for cls in (
        BlobpadReader, BlobpadWarmReader, BlobpadMemoryReader, BlobpadMemoryWarmReader, BlobpadRedisReader,
        BlobpadRedisWarmReader, SqliteSeedReader, DiskcacheReader, NaiveRedisReader, MmapReader, RgReader, SedReader,
        ZstdRgReader, ZstdSedReader,
    )
}


# -- writers ---------------------------------------------------------------------------


class Writer:
    """An empty store in ``directory`` that observations are put into."""

    name: ClassVar[str]
    label: ClassVar[str]

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        return None

    def put(self, dataset: Dataset) -> str:
        """Store the file of ``dataset``; return the handle of the new observation."""
        raise NotImplementedError

    def remove(self, handle: str) -> None:
        raise NotImplementedError

    def verify(self, handle: str, dataset: Dataset) -> None:
        """Raise AssertionError unless ``handle`` holds exactly ``dataset``."""
        raise NotImplementedError

    def footprint(self) -> dict[str, int]:
        """What the store occupies: ``stored_bytes`` at least."""
        return {"stored_bytes": disk_bytes(self.directory)}

    def close(self) -> None:
        pass


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


class BlobpadWriter(Writer):
    name = "blobpad"
    label = "blobpad"

    def __init__(self, directory: Path, **options: Any) -> None:
        super().__init__(directory)
        self.store = blobpad.open(directory / "store", **options)

    def put(self, dataset: Dataset) -> str:
        return self.store.put(dataset.path).id

    def remove(self, handle: str) -> None:
        self.store.delete(handle)

    def verify(self, handle: str, dataset: Dataset) -> None:
        entry = self.store.stat(handle)
        assert entry.size_bytes == dataset.size, (entry.size_bytes, dataset.size)
        assert entry.sha256 == _sha256(dataset.path)
        assert entry.kind == ("text" if dataset.is_text else "binary")

    def footprint(self) -> dict[str, int]:
        s = self.store.stats()
        return {"stored_bytes": s.stored_bytes, "chunks": s.chunks, "disk_bytes": s.disk_bytes}

    def close(self) -> None:
        self.store.close()


class BlobpadFiltersWriter(BlobpadWriter):
    """blobpad building the chunk filters at put (``filters=True``): what they cost a put,
    beside ``blobpad`` (the default, where the first search builds them)."""

    name = "blobpad-filters"
    label = "blobpad, filters at put"

    def __init__(self, directory: Path, **options: Any) -> None:
        super().__init__(directory, **{**options, "filters": True})


def seed_summary(content: str | bytes) -> str:
    """The seed's summary: head and tail of text, a fingerprint of binary."""
    if isinstance(content, bytes):
        return f"[BINARY: {len(content)} bytes, sha256={hashlib.sha256(content).hexdigest()[:12]}...]"
    if len(content) <= 2 * SEED_SUMMARY_CHARS:
        return content
    omitted = len(content) - 2 * SEED_SUMMARY_CHARS
    return f"{content[:SEED_SUMMARY_CHARS]}\n[... {omitted} characters omitted ...]\n{content[-SEED_SUMMARY_CHARS:]}"


class SqliteSeedWriter(Writer):
    name = "sqlite-seed"
    label = "SQLite row (seed 000)"

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.db = directory / "scratchpad.db"
        fresh = not self.db.exists()
        self.conn = sqlite3.connect(self.db)
        if fresh:
            self.conn.executescript(SEED_SCHEMA + SEED_INDEXES)
            self.conn.commit()

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        limit = sqlite3.connect(":memory:").getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        if dataset.size > limit:
            return f"SQLite cannot store a {dataset.size}-byte value (SQLITE_MAX_LENGTH is {limit})"
        return None

    def put(self, dataset: Dataset) -> str:
        raw = dataset.path.read_bytes()
        content: str | bytes = raw.decode("utf-8") if dataset.is_text else raw
        now = time.time()
        entry_id = secrets.token_hex(8)
        self.conn.execute(
            "INSERT INTO entries (id, turn_id, step_num, executor_name, content_kind, content, size_bytes,"
            " summary, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry_id, uuid.uuid4().hex, 1, "fs_read", "text" if dataset.is_text else "binary", content,
             len(raw), seed_summary(content), now, now + SEED_TTL),
        )
        self.conn.commit()
        return entry_id

    def remove(self, handle: str) -> None:
        self.conn.execute("DELETE FROM entries WHERE id = ?", (handle,))
        self.conn.commit()

    def verify(self, handle: str, dataset: Dataset) -> None:
        row = self.conn.execute(
            "SELECT size_bytes, length(CAST(content AS BLOB)) FROM entries WHERE id = ?", (handle,)
        ).fetchone()
        assert row == (dataset.size, dataset.size), row

    def close(self) -> None:
        self.conn.close()


class DiskcacheWriter(Writer):
    name = "diskcache"
    label = "diskcache"

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        import diskcache

        self.cache = diskcache.Cache(str(directory), size_limit=1 << 40, eviction_policy="none")

    def put(self, dataset: Dataset) -> str:
        key = secrets.token_hex(8)
        with open(dataset.path, "rb") as fh:
            self.cache.set(key, fh, read=True)
        return key

    def remove(self, handle: str) -> None:
        self.cache.delete(handle)

    def verify(self, handle: str, dataset: Dataset) -> None:
        fh = self.cache.get(handle, read=True)
        assert fh is not None
        with fh:
            assert os.fstat(fh.fileno()).st_size == dataset.size

    def close(self) -> None:
        self.cache.close()


class FileWriter(Writer):
    name = "file"
    label = "plain file copy"

    def put(self, dataset: Dataset) -> str:
        handle = secrets.token_hex(8)
        shutil.copyfile(dataset.path, self.directory / handle)
        return handle

    def remove(self, handle: str) -> None:
        (self.directory / handle).unlink()

    def verify(self, handle: str, dataset: Dataset) -> None:
        assert (self.directory / handle).stat().st_size == dataset.size


class ZstdWriter(Writer):
    name = "zstd-cli"
    label = "zstd -3 -T2"
    measure_memory = False
    last_peak_rss_kb: int | None = None

    @classmethod
    def unavailable(cls, dataset: Dataset) -> str | None:
        return None if tool("zstd") else "zstd not installed"

    def put(self, dataset: Dataset) -> str:
        handle = secrets.token_hex(8) + ".zst"
        result = run_pipeline([tool("zstd") or "zstd", "-3", "-T2", "-q", "-f", str(dataset.path), "-o",
                               str(self.directory / handle)], measure=self.measure_memory)
        if result.codes != [0]:
            raise RuntimeError(f"zstd failed with exit code {result.codes}")
        self.last_peak_rss_kb = result.peak_rss_kb[0]
        return handle

    def remove(self, handle: str) -> None:
        (self.directory / handle).unlink()

    def verify(self, handle: str, dataset: Dataset) -> None:
        out = run_pipeline([tool("zstd") or "zstd", "-dcq", str(self.directory / handle)]).out
        assert len(out) == dataset.size and hashlib.sha256(out).hexdigest() == _sha256(dataset.path)


WRITERS: dict[str, type[Writer]] = {
    cls.name: cls
    for cls in (BlobpadWriter, BlobpadFiltersWriter, SqliteSeedWriter, DiskcacheWriter, FileWriter, ZstdWriter)
}



def label(peer: str, op: str) -> str:
    """How a peer is named in reports: its reader's label for reads, its writer's for puts."""
    if op.startswith(("put", "reput")) and peer in WRITERS:
        return WRITERS[peer].label
    return READERS[peer].label if peer in READERS else WRITERS[peer].label
