"""The store: content-addressed zstd chunks in LMDB, with sessions, turns and expiry.

``Store.put`` cuts the content into content-defined chunks
(:mod:`blobpad.chunking`), keys each one by its xxh3-128 hash seeded with a secret
drawn when the store was created, compresses the new ones with zstd on a thread
pool, and writes them in batches.  A chunk whose key is already stored is compared
with the stored bytes before it is shared, so a hash collision (accidental, or
crafted by someone who learnt the seed) can never make one entry read another's
bytes: the new chunk gets the next free key variant instead.

Atomicity: a put whose content fits in one batch (16 MiB) commits exactly one write
transaction: its chunks, their references, the entry with its manifest and indexes,
and the counters, all or nothing.  A larger put writes each batch but the last in a
transaction of its own that also records which chunk references it added under the
put's id in the ``pending`` keyspace; the entry becomes visible only in the final
transaction, which holds the last batch and removes those records.  A put that fails
rolls its batches back; one whose process was killed is rolled back by the next
``open`` or ``gc`` in any process, so nothing half-written is ever visible and no
reference leaks.  The final transactions of puts that several threads of one
process make at the same time are committed together (one transaction and one
flush to disk for all of them, :class:`_GroupCommit`).  How durable a returned put
is depends on the engine's ``sync`` setting (see "Durability" in the README).
"""

from __future__ import annotations

import builtins
import codecs
import contextlib
import hashlib
import json
import math
import os
import secrets
import socket
import stat
import struct
import threading
import time
import weakref
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import xxhash
import zstandard

from . import notes
from .chunking import KEY_SIZE, ChunkParams, Manifest, cut_spans, span_stats
from .codec import Codec
from .engine import SPACES, Checked, ReadTxn, WriteTxn, open_engine
from .engine import prefix_end as _prefix_end
from .errors import (
    HINT_MAX_BYTES,
    HINT_UNKNOWN_NAME,
    BlobpadError,
    CorruptData,
    InvalidArgument,
    NotFound,
    StoreFull,
    check_int,
    check_str,
    check_ttl,
    describe,
)
from .index import NEVER, Entry, expiry_key, name_key, new_id, parse_id, scope_key, seq_key
from .reads import ReadsMixin
from .view import Reader, not_found

__all__ = ["Store", "Stats", "GcReport", "VerifyReport", "open"]

FORMAT = 2  # 2: every record sealed with a checksum (backend.seal)
_BLOCK = 8 << 20          # bytes read from a file or stream at a time
_BATCH = 16 << 20         # raw bytes per write transaction of a put
_WHOLE_DEDUP = 256 << 10  # larger content of a size already stored is hashed and looked for whole first
_REF = struct.Struct("<QII")  # reference count, stored (compressed) length, raw length
_COUNTERS = ("entries", "chunks", "logical_bytes", "stored_bytes", "seq")
_MAX_META = 64 << 10      # largest caller meta, as JSON
_MAX_CLOCK = 253402300800.0  # 10000-01-01: a clock past it is broken
_MAX_MAP = 1 << 46         # largest map size: 64 TiB, inside any 64-bit address space

#: what a worker found for one chunk: key, new frame (None when the stored one is
#: equal), the stored frame it compared with, characters (None if not UTF-8), newlines
_Prepared = tuple[bytes, "bytes | None", "bytes | None", "int | None", int]
#: one chunk handed to a worker: a view of it, and where it lies (buffer, start, end,
#: whether the whole buffer is ASCII)
_Span = tuple[memoryview, bytes, int, int, bool]


@dataclass(frozen=True)
class Stats:
    """What ``Store.stats()`` reports.

    ``entries`` counts the live entries (those ``entries()`` lists and reads find) and
    ``logical_bytes`` is the sum of their sizes; ``expired_entries`` and
    ``expired_bytes`` count apart the expired entries that ``gc()`` (or a put that
    needs their space) has not removed yet.  ``stored_bytes`` is what the compressed,
    deduplicated chunks of both occupy (an expired entry's chunks are freed when it is
    removed); ``compression_ratio`` compares the raw bytes of the stored chunks with
    their compressed size, ``dedup_ratio`` the logical bytes of every entry held with
    the raw bytes of the distinct chunks.
    """

    entries: int
    chunks: int
    logical_bytes: int
    stored_bytes: int
    unique_bytes: int
    disk_bytes: int
    map_size: int
    max_bytes: int | None
    expired_entries: int = 0
    expired_bytes: int = 0

    @property
    def compression_ratio(self) -> float:
        return self.unique_bytes / self.stored_bytes if self.stored_bytes else 1.0

    @property
    def dedup_ratio(self) -> float:
        held = self.logical_bytes + self.expired_bytes
        return held / self.unique_bytes if self.unique_bytes else 1.0

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["compression_ratio"] = round(self.compression_ratio, 3)
        d["dedup_ratio"] = round(self.dedup_ratio, 3)
        return d


@dataclass(frozen=True)
class GcReport:
    """What ``Store.gc()`` freed: expired ``entries``, the ``chunks`` and stored ``bytes``
    nobody referenced any more, ``aborted_puts`` of dead processes rolled back, and
    expired session ``notepads`` (those given a ttl) removed."""

    entries: int
    chunks: int
    bytes: int
    aborted_puts: int = 0
    notepads: int = 0
    #: damage gc() met and could not repair (empty when the store is sound): run
    #: verify() for the whole picture and delete the entries it names
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if k == "problems" else v for k, v in ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


@dataclass(frozen=True)
class VerifyReport:
    """What ``Store.verify()`` found: ``ok`` is true when ``problems`` is empty."""

    ok: bool
    entries: int
    chunks: int
    problems: list[str]
    damaged_entries: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _process_token() -> str:
    """``host:pid:start time`` of this process (computed once per process: a forked
    child has its own pid, so it computes its own)."""
    global _TOKEN
    pid = os.getpid()
    if _TOKEN is None or _TOKEN[0] != pid:
        _TOKEN = (pid, f"{socket.gethostname()}:{pid}:{_start_time(pid)}")
    return _TOKEN[1]


_TOKEN: tuple[int, str] | None = None


def _start_time(pid: int) -> str:
    try:
        with builtins.open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "?"


def _token_alive(token: str) -> bool:
    host, _, rest = token.partition(":")
    pid_s, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True  # cannot tell; LMDB stores are not shared across machines anyway
    try:
        pid = int(pid_s)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return start == "?" or _start_time(pid) in ("?", start)


def _check_meta(meta: object) -> dict[str, Any]:
    """Validate caller metadata and return a JSON round-tripped copy of it."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InvalidArgument(f"meta must be a dict, not {type(meta).__name__}")
    try:
        meta_json = json.dumps(meta, ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise InvalidArgument("meta is nested too deeply to store as JSON") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"meta must be JSON-serialisable: {describe(str(exc), 200)}") from None
    if len(meta_json) > _MAX_META:
        raise InvalidArgument(f"meta is {len(meta_json)} characters as JSON; the limit is {_MAX_META}")
    try:
        meta_json.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("meta contains lone surrogates; pass valid Unicode text") from None
    result: dict[str, Any] = json.loads(meta_json)
    return result


def _check_settings(raw: bytes, path: str) -> dict[str, Any]:
    """Decode the settings record; anything but the expected shape is CorruptData."""
    try:
        settings = json.loads(raw)
    except ValueError:
        settings = None
    if isinstance(settings, dict) and settings.get("format") not in (None, FORMAT) and isinstance(settings.get("format"), int):
        if settings["format"] == 1:
            raise BlobpadError(
                f"{path} was written by an older blobpad (format 1, before records carried checksums); "
                "this version reads format 2: read it with blobpad 0.1 and put its entries again into a new store"
            )
        raise BlobpadError(f"{path} was written by an incompatible blobpad (format {settings['format']})")
    fields = ("format", "seed", "min_size", "avg_extra", "max_size")
    if not (
        isinstance(settings, dict)
        and all(type(settings.get(f)) is int for f in fields)
        and (settings.get("max_bytes") is None or type(settings["max_bytes"]) is int)
        and 0 < settings["min_size"] <= settings["max_size"] <= 1 << 30
        and 0 <= settings["avg_extra"] <= 1 << 30
    ):
        raise CorruptData(f"the settings of the store at {path} are damaged; restore the store from a backup")
    return settings


def _recount(txn: ReadTxn) -> dict[str, int]:
    """Counters computed from the records themselves (when the counters record is damaged)."""
    entries = logical = chunks = stored = unique = 0
    for _, raw in txn.scan("entries", on_damage=lambda key: None):
        e = _decode_entry(raw)
        entries += 1
        logical += e.size_bytes if e is not None else 0
    for _, rec in txn.scan("refs", on_damage=lambda key: None):
        ref = _unpack_ref(rec)
        if ref is not None:
            chunks += 1
            stored += ref[1]
            unique += ref[2]
    seq = 0
    for key, _ in txn.scan("by_seq", reverse=True, on_damage=lambda key: None):
        seq = int.from_bytes(key[:8], "big")
        break
    return {"entries": entries, "chunks": chunks, "logical_bytes": logical, "stored_bytes": stored, "seq": seq,
            "unique_bytes": unique}


def _due(
    txn: ReadTxn, now: float, on_damage: Callable[[bytes], None] | None = None
) -> Iterator[tuple[bytes, Entry | None]]:
    """The expiry index from its front up to ``now``, with each record's entry (None when
    missing or damaged), as gc() removes them; an entry that expires later within the
    same microsecond is left out (reads still see it)."""
    for key, _ in txn.scan("expiry", b"", expiry_key(_expiry_us(now) + 1, b""), on_damage=on_damage):
        raw = _get_or_damaged(txn, "entries", key[8:])[1]
        e = _decode_entry(raw) if raw is not None else None
        if e is not None and e.expires_at is not None and e.expires_at > now:
            continue
        yield key, e


def _get_or_damaged(txn: ReadTxn, space: str, key: bytes) -> tuple[bool, bytes | None]:
    """(whether a record is stored under ``key``, its value or None when damaged): for
    the paths that must go on past damage (delete, gc, repair)."""
    try:
        value = txn.get(space, key)
    except CorruptData:
        return True, None
    return value is not None, value


def _check_turn(turn: object) -> None:
    if turn is None:
        return
    if isinstance(turn, bool) or not isinstance(turn, (str, int)):
        raise InvalidArgument(f"turn must be a string or an integer, not {type(turn).__name__}")
    if isinstance(turn, str):
        check_str("turn", turn)
    else:
        check_int("turn", turn)


class Store(ReadsMixin):
    """A blobpad store: observations and notepads, on one storage engine.

    Open it with :func:`blobpad.open`.  A Store is a context manager and may be shared
    by the threads of a process; on the LMDB engine several processes may open the
    same path at once.

    Parameters:
        path: the store's target: a directory (the LMDB engine, created if missing)
            or a URL such as ``memory://`` (see :mod:`blobpad.engine`); default
            ``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR``, else the user data directory.
        cache_bytes: size of the LRU cache of decompressed chunks (0 turns it off).
        max_bytes: cap on the stored (compressed) bytes; when a put would exceed it,
            the entries closest to expiry are evicted first.  The cap is saved in the
            store and applies to every process; 0 removes it, None keeps the saved one.
        level: zstd compression level of new chunks.
        workers: threads used to compress and verify chunks (default: CPU count, at most 4).
        clock: function returning the current Unix time; tests inject their own.
        chunk_params: chunk sizes of a new store; an existing store keeps its own.
        engine_options: options of the engine.  The LMDB engine's are ``map_size``
            (initial map, default 64 MiB; it doubles on demand), ``max_map_size``
            (ceiling of the map, default 1 TiB; past it puts raise StoreFull),
            ``max_readers`` (reader slots shared by all processes, default 1024) and
            ``sync`` (default True: see "Durability" in the README; an acknowledged
            put survives a power cut, with False only a killed process).  The memory
            engine takes none.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        cache_bytes: int = 64 << 20,
        max_bytes: int | None = None,
        level: int = 1,
        workers: int | None = None,
        clock: Callable[[], float] = time.time,
        chunk_params: ChunkParams | None = None,
        **engine_options: Any,
    ) -> None:
        check_int("cache_bytes", cache_bytes, minimum=0, maximum=_MAX_MAP)
        check_int("max_bytes", max_bytes, minimum=0, allow_none=True)
        check_int("level", level, minimum=-7, maximum=22)
        check_int("workers", workers, minimum=1, maximum=256, allow_none=True)
        if not callable(clock):
            raise InvalidArgument(f"clock must be a function returning Unix time, not {type(clock).__name__}")
        if chunk_params is not None and not isinstance(chunk_params, ChunkParams):
            raise InvalidArgument(f"chunk_params must be a blobpad.ChunkParams, not {type(chunk_params).__name__}")
        self._backend: Checked = Checked(open_engine(path, **engine_options))
        #: the store's target: the directory of an LMDB store, the URL of another
        self.path: str = self._backend.engine.target
        self._clock = clock
        self._codec = Codec(seed=0, level=level, cache_bytes=cache_bytes, workers=workers or min(4, os.cpu_count() or 1))
        self._reader = Reader(self._backend, self._codec, self.now)
        try:
            settings = self._backend.write(lambda txn: self._init_settings(txn, chunk_params, max_bytes))
            self._codec.seed = settings["seed"]
            self.chunk_params = ChunkParams(settings["min_size"], settings["avg_extra"], settings["max_size"])
            self.max_bytes: int | None = settings.get("max_bytes") or None
            self._recover()
        except BaseException:
            self.close()  # a failed open holds nothing: the store can be repaired or opened again
            raise

    # -- lifecycle --------------------------------------------------------------------

    def _init_settings(self, txn: WriteTxn, params: ChunkParams | None, max_bytes: int | None) -> dict[str, Any]:
        try:
            raw = txn.get("meta", b"settings")
        except CorruptData:
            _check_settings(txn.get_unchecked("meta", b"settings") or b"", self.path)  # an older format says so
            raise CorruptData(
                f"the settings of the store at {self.path} are damaged: its chunks cannot be checked without them; "
                "restore the store from a backup"
            ) from None
        if raw is None:
            if any(True for _ in txn.scan("entries", on_damage=lambda key: None)):
                raise CorruptData(f"{self.path} holds entries but no settings: it is damaged")
            p = params or ChunkParams()
            settings = {
                "format": FORMAT,
                "seed": secrets.randbits(63),
                "min_size": p.min_size,
                "avg_extra": p.avg_extra,
                "max_size": p.max_size,
                "created_at": self._clock(),
            }
        else:
            settings = _check_settings(raw, self.path)
            if settings["format"] != FORMAT:
                raise BlobpadError(
                    f"{self.path} was written by an incompatible blobpad (format {settings.get('format')}); "
                    f"this version reads format {FORMAT}"
                )
        if max_bytes is not None:
            settings["max_bytes"] = max_bytes or None
        txn.put("meta", b"settings", json.dumps(settings).encode())
        return settings

    def _cap(self, txn: ReadTxn) -> int | None:
        """The ``max_bytes`` saved in the store now (another process may have set it)."""
        raw = txn.get("meta", b"settings")
        if raw is not None:
            try:
                self.max_bytes = json.loads(raw).get("max_bytes") or None
            except (ValueError, AttributeError):
                pass  # unreadable settings: keep the cap this process opened with
        return self.max_bytes

    def notepad(self, session: str, **options: Any) -> Any:
        """The :class:`~blobpad.notepad.Notepad` of ``session`` (options: see that class)."""
        from .notepad import Notepad

        return Notepad(self, session, **options)

    def close(self) -> None:
        """Close the store (idempotent); further calls raise BlobpadError."""
        self._codec.close()
        backend, self._backend = self._backend, _ClosedBackend()
        if isinstance(backend, Checked):
            backend.engine.close()

    @property
    def engine(self) -> Checked:
        """The store's engine seen through the integrity checks (``read()``, ``write(fn)``, ``capabilities``).

        Layers built on the store (the notepad) keep their records through it; see
        :mod:`blobpad.engine.base` for the contract.
        """
        return self._backend

    @property
    def codec(self) -> Codec:
        """The store's chunk codec: how many chunks it decompressed (``codec.decompressed``),
        its worker pool, and ``codec.settle()`` to wait for read-ahead a finished read left running."""
        return self._codec

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<blobpad.Store {self.path!r}>"

    def _executor(self) -> ThreadPoolExecutor:
        """The worker pool shared by puts, count() and grep (see :mod:`blobpad.codec`)."""
        return self._codec.executor()

    def now(self) -> float:
        """The store's clock (``time.time`` unless a ``clock`` was given).

        Raises BlobpadError when the clock gives something that is not a Unix time
        between 1970 and the year 9999 (NaN, infinity, a negative or absurd value, not
        a number): expiry decided on such a value would be wrong.
        """
        value = self._clock()
        try:
            t = float(value)
        except (TypeError, ValueError, OverflowError):
            t = math.nan
        if isinstance(value, bool) or not 0 <= t < _MAX_CLOCK:
            raise BlobpadError(
                f"the store's clock returned {describe(value)}, which is not a Unix time between 1970 and 9999; "
                "fix the clock function given to blobpad.open(clock=...)"
            )
        return t

    # -- counters ---------------------------------------------------------------------

    @staticmethod
    def _counters(txn: ReadTxn) -> dict[str, int]:
        """The store's counters; damaged ones are recounted from the records (and rewritten by the next write)."""
        return Store._stored_counters(txn) or _recount(txn)

    @staticmethod
    def _stored_counters(txn: ReadTxn) -> dict[str, int] | None:
        """The counters record, or None when it is damaged."""
        try:
            raw = txn.get("meta", b"counters")
        except CorruptData:
            return None
        if raw is None:
            return dict.fromkeys(_COUNTERS, 0) | {"unique_bytes": 0}
        try:
            counters = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(counters, dict) or any(type(counters.get(k)) is not int for k in _COUNTERS):
            return None
        return counters

    @staticmethod
    def _bump(txn: WriteTxn, counters: dict[str, int] | None = None, /, **deltas: int) -> None:
        """Add ``deltas`` to the counters; ``counters``: the record as this transaction already read it."""
        c = counters if counters is not None else Store._stored_counters(txn)
        if c is None:  # damaged: recount; the records already hold this transaction's changes
            c = _recount(txn)
        else:
            for k, v in deltas.items():
                c[k] = c.get(k, 0) + v
        txn.put("meta", b"counters", json.dumps(c).encode())

    # -- put --------------------------------------------------------------------------

    def put(
        self,
        data: str | bytes | bytearray | memoryview | os.PathLike[str] | IO[bytes],
        *,
        session: str | None = None,
        turn: str | int | None = None,
        ttl: float | None = 3600,
        name: str | None = None,
        step: int | None = None,
        tool: str | None = None,
        meta: dict[str, Any] | None = None,
        kind: str | None = None,
    ) -> Entry:
        """Store an observation and return its :class:`Entry`.

        Args:
            data: ``str`` (always stored as text, never read as a path), bytes-like,
                an ``os.PathLike`` path to read, or a binary file object read as a
                stream (a 2 GB file is never held in memory whole).
            session: the session that owns the entry ("" when None).
            turn: the turn inside the session (str or int).
            ttl: seconds until the entry expires; None for never.
            name: makes a named entry: putting the same name again in the same session
                replaces the old entry.
            step, tool: where the observation came from (kept in the index).
            meta: JSON-serialisable caller metadata.
            kind: "text" or "binary"; by default text when the content is valid UTF-8.

        Raises:
            InvalidArgument: a bad argument (the store is unchanged).
            StoreFull: the store cannot hold the content even after evicting.
        """
        check_str("session", session)
        check_str("name", name)
        check_str("tool", tool)
        if session is None:
            session = ""
        _check_turn(turn)
        check_int("step", step, minimum=0, allow_none=True)
        check_ttl(ttl)
        if kind not in (None, "text", "binary"):
            raise InvalidArgument(f"kind must be 'text', 'binary' or None, not {describe(kind)}")
        meta = _check_meta(meta)

        source = self._source(data)
        created = self.now()
        raw_id = bytes.fromhex(new_id())
        fields = dict(session=session, turn=turn, ttl=ttl, name=name, step=step, tool=tool, meta=meta, created=created)
        try:
            known_sha = None
            if source.size is not None and source.size > _WHOLE_DEDUP and self._has_size(source.size):
                # Something of this very size is stored: hash first, and if the whole
                # content is already there, share its chunks without cutting anything.
                # (Smaller content is deduplicated chunk by chunk, in its one transaction.)
                known_sha = source.sha256()
                twins = self._twin_kinds(source.size, known_sha)
                share = kind or "text"
                if share not in twins and kind is None and "binary" in twins and not source.is_utf8():
                    share = "binary"
                if share in twins:
                    entry = self._put_duplicate(raw_id, source.size, known_sha, share, fields)
                    if entry is not None:
                        return entry
            writer = _PutWriter(self, raw_id, known_sha)
            try:
                writer.run(source.blocks())
                entry = self._finish_put(writer, raw_id, kind=kind, **fields)
            except BaseException:
                writer.rollback()
                raise
        finally:
            source.close()
        return entry

    def _has_size(self, size: int) -> bool:
        prefix = size.to_bytes(8, "big")
        with self._backend.read() as txn:
            return any(True for _ in txn.scan("digests", prefix, _prefix_end(prefix)))

    def _put_duplicate(
        self, raw_id: bytes, size: int, sha: str, kind: str, fields: dict[str, Any]
    ) -> Entry | None:
        """Store a new entry sharing the chunks of an identical one of ``kind``, in one
        write transaction; None if there is none (any more) or it is damaged.

        Identity is decided by size and SHA-256 (collision-resistant), never by the
        seeded chunk hashes alone.
        """
        prefix = size.to_bytes(8, "big") + bytes.fromhex(sha)

        def txn_fn(txn: WriteTxn) -> Entry | None:
            for key, _ in txn.scan("digests", prefix, _prefix_end(prefix)):
                twin_raw = txn.get("entries", key[40:])
                blob = txn.get("manifests", key[40:])
                if twin_raw is None or blob is None:
                    continue
                try:
                    twin = Entry.decode(twin_raw)
                    keys = Manifest.unpack(blob).keys
                except Exception:  # a damaged twin is never shared; verify() reports it
                    continue
                if twin.kind != kind:
                    continue
                uses = Counter(keys)  # a chunk may occur several times in one entry
                refs = {k: _unpack_ref(txn.get("refs", k) or b"") for k in uses}
                if any(r is None for r in refs.values()):
                    continue  # a chunk without a sound reference record is not shared
                for k, n in uses.items():
                    count, slen, rlen = refs[k]  # type: ignore[misc]
                    txn.put("refs", k, _REF.pack(count + n, slen, rlen))
                return self._commit_entry(
                    txn, raw_id, blob, len(keys), kind=twin.kind, size=size, chars=twin.chars,
                    lines=twin.lines, sha256=sha, **fields,
                )
            return None

        return self._backend.write(txn_fn)

    def _twin_kinds(self, size: int, sha: str) -> set[str]:
        """The kinds ("text", "binary") of the sound entries holding exactly this content."""
        prefix = size.to_bytes(8, "big") + bytes.fromhex(sha)
        kinds: set[str] = set()
        with self._backend.read() as txn:
            for key, _ in txn.scan("digests", prefix, _prefix_end(prefix)):
                raw = txn.get("entries", key[40:])
                try:
                    if raw is not None:
                        kinds.add(Entry.decode(raw).kind)
                except Exception:  # damaged: never shared
                    continue
        return kinds

    @staticmethod
    def _source(data: object) -> _Source:
        if isinstance(data, str):
            try:
                return _Source(data.encode("utf-8"))
            except UnicodeEncodeError:
                raise InvalidArgument("the text contains lone surrogates; pass valid Unicode or bytes") from None
        if isinstance(data, (bytes, bytearray, memoryview)):
            return _Source(bytes(data))
        if isinstance(data, os.PathLike):
            path = os.fspath(data)
            shown = describe(path, 300)
            try:
                fh = builtins.open(path, "rb")  # noqa: SIM115 - closed by _Source.close
            except FileNotFoundError:
                raise NotFound(f"no file at {shown}") from None
            except IsADirectoryError:
                raise InvalidArgument(f"{shown} is a directory; pass a file") from None
            except OSError as exc:
                raise InvalidArgument(f"cannot read {shown}: {exc.strerror}") from None
            except (ValueError, UnicodeError):  # an embedded NUL, lone surrogates
                raise InvalidArgument(f"{shown} is not a valid file name") from None
            st = os.fstat(fh.fileno())
            return _Source(None, fh, st.st_size if stat.S_ISREG(st.st_mode) else None, owned=True)
        if callable(getattr(data, "read", None)):
            return _Source(None, data)  # type: ignore[arg-type]
        raise InvalidArgument(
            f"put() takes str, bytes, a path (os.PathLike) or a binary file object, not {type(data).__name__}; "
            "to store a path given as a string, pass pathlib.Path(s)"
        )

    def _finish_put(self, writer: _PutWriter, raw_id: bytes, *, kind: str | None, **fields: Any) -> Entry:
        """The put's final write transaction, its only one when the content fits in one batch.

        It places the last batch of chunks (:meth:`_PutWriter.place_tail`), clears the
        pending-put records of earlier batches if there were any, makes the entry
        visible with its manifest and indexes, updates the counters once, and evicts
        for ``max_bytes``: all or nothing.
        """
        size = writer.size
        is_text = writer.is_text if kind is None else kind == "text"
        if kind == "text" and not writer.is_text:
            raise InvalidArgument("kind='text' but the content is not valid UTF-8; use kind='binary' or omit kind")
        lines = sum(writer.newlines) + (1 if size and not writer.ends_with_newline else 0)
        chars = writer.char_counts if is_text else writer.sizes

        def txn_fn(txn: WriteTxn) -> tuple[Entry, list[bytes], int]:
            cap = self._cap(txn)
            keys, counts = writer.place_tail(txn, cap)
            if writer.batches:
                writer.clear_pending(txn)
            manifest = Manifest.build(writer.keys + keys, writer.sizes, chars, writer.newlines)
            entry = self._commit_entry(
                txn, raw_id, manifest.pack(), len(manifest), kind="text" if is_text else "binary", size=size,
                chars=writer.chars if is_text else None, lines=lines, sha256=writer.sha256, counts=counts, **fields,
            )
            self._evict_for(txn, raw_id, cap)  # only now: a put that fails evicts nothing
            return entry, keys, counts.get("stored_bytes", 0)

        group = self.__dict__.get("_group") or self.__dict__.setdefault("_group", _GroupCommit())
        entry, keys, added = group.write(self._backend.write, txn_fn)
        writer.keys.extend(keys)
        writer.new_stored += added
        return entry

    def _commit_entry(
        self, txn: WriteTxn, raw_id: bytes, packed: bytes, n_chunks: int, *, kind: str, size: int,
        chars: int | None, lines: int, sha256: str, session: str, turn: str | int | None, ttl: float | None,
        name: str | None, step: int | None, tool: str | None, meta: dict[str, Any], created: float,
        counts: dict[str, int] | None = None,
    ) -> Entry:
        """Make an entry visible: its record, manifest and every index, in ``txn``.

        ``counts`` are more counter changes of the same transaction (the chunks it
        created), written with the entry's in one update of the counters.
        """
        if name is not None:
            old = txn.get("names", name_key(session, name))
            if old is not None:
                self._delete_in(txn, old)
        counters = self._stored_counters(txn)  # read once: the sequence, then the update
        seq = (counters or _recount(txn))["seq"] + 1
        expires = None if ttl is None else created + ttl
        entry = Entry(
            id=raw_id.hex(), session=session, turn=turn, step=step, tool=tool, name=name, kind=kind,
            size_bytes=size, chars=chars, lines=lines, created_at=created, expires_at=expires,
            sha256=sha256, meta=meta, chunks=n_chunks, seq=seq,
        )
        txn.put("entries", raw_id, entry.encode())
        txn.put("manifests", raw_id, packed)
        txn.put("by_seq", seq_key(seq), raw_id)
        txn.put("by_scope", scope_key(session) + seq_key(seq), raw_id)
        if turn is not None:
            txn.put("by_scope", scope_key(session, turn) + seq_key(seq), raw_id)
        txn.put("expiry", expiry_key(_expiry_us(expires), raw_id), b"")
        txn.put("digests", _digest_key(size, sha256, raw_id), b"")
        if name is not None:
            txn.put("names", name_key(session, name), raw_id)
        self._bump(txn, counters, **(counts or {}), entries=1, logical_bytes=size, seq=1)
        return entry

    # -- lookup -----------------------------------------------------------------------

    def stat(self, entry_id: str) -> Entry:
        """Return the :class:`Entry` of an id; raise NotFound if unknown or expired."""
        return self._reader.stat(entry_id)

    def exists(self, entry_id: str) -> bool:
        """Whether the id names a live (unexpired) entry; malformed ids are simply absent."""
        try:
            self.stat(entry_id)
        except (NotFound, InvalidArgument):
            return False
        return True

    def find(self, name: str, *, session: str | None = None) -> Entry:
        """Return the live entry called ``name`` in ``session``; raise NotFound otherwise."""
        check_str("name", name, allow_none=False)
        check_str("session", session)
        with self._backend.read() as txn:
            raw_id = txn.get("names", name_key(session or "", name))
            if raw_id is None:
                raise NotFound(f"no entry named {name[:200]!r} in this session", hint=HINT_UNKNOWN_NAME)
            try:
                return self._reader.load(txn, raw_id.hex())[1]
            except NotFound:
                raise NotFound(f"the entry named {name[:200]!r} has expired") from None

    def entries(self, *, session: str | None = None, turn: str | int | None = None, limit: int | None = None) -> list[Entry]:
        """List live entries in creation order.

        With ``session`` (and optionally ``turn``) only that session's (turn's) index
        keys are read; ``turn`` alone means the turn in the default session "".
        With neither, every entry is listed.
        """
        check_str("session", session)
        _check_turn(turn)
        check_int("limit", limit, minimum=0, allow_none=True)
        out: list[Entry] = []
        if limit == 0:
            return out
        now = self.now()
        with self._backend.read() as txn:
            if session is None and turn is None:
                rows: Iterator[tuple[bytes, bytes]] = txn.scan("by_seq")
            else:
                prefix = scope_key(session or "", turn)
                rows = txn.scan("by_scope", prefix, _prefix_end(prefix))
            for _, raw_id in rows:
                raw = txn.get("entries", raw_id)
                if raw is None:
                    continue
                entry = _decode_entry(raw)
                if entry is None:
                    continue  # a damaged record: verify() names it, delete() removes it
                if entry.expires_at is not None and entry.expires_at <= now:
                    continue
                out.append(entry)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def sessions(self) -> list[str]:
        """The sessions that have live entries, in sorted order."""
        return sorted({e.session for e in self.entries()})

    # -- delete, gc, eviction -----------------------------------------------------------

    def delete(self, entry_id: str) -> None:
        """Delete an entry and release its chunks; raise NotFound if it does not exist."""
        raw_id = parse_id(entry_id)

        def txn_fn(txn: WriteTxn) -> bool:
            present, raw = _get_or_damaged(txn, "entries", raw_id)
            if not present:
                return False
            e = _decode_entry(raw) if raw is not None else None  # None when damaged: deleting it is the advice
            if e is not None and e.expires_at is not None and e.expires_at <= self.now():
                self._delete_in(txn, raw_id)
                return False
            self._delete_in(txn, raw_id)
            return True

        if not self._backend.write(txn_fn, frees=True):
            raise not_found(entry_id)

    def delete_session(self, session: str) -> int:
        """Delete every entry of a session (and, through the notepad module, its notepad)."""
        check_str("session", session, allow_none=False)
        prefix = scope_key(session)

        def txn_fn(txn: WriteTxn) -> int:
            ids = [raw_id for _, raw_id in txn.scan("by_scope", prefix, _prefix_end(prefix))]
            for raw_id in ids:
                self._delete_in(txn, raw_id)
            notes.delete_notepad(txn, session)
            return len(ids)

        return self._backend.write(txn_fn, frees=True)

    def _delete_in(self, txn: WriteTxn, raw_id: bytes) -> tuple[int, int]:
        """Delete one entry inside ``txn``; return (chunks freed, stored bytes freed).

        Damage does not stop it: the index keys of a record that does not decode are
        found by scanning the indexes, and the chunks of a chunk list that is missing
        or does not decode are left for the next gc() to recount (``_repair_refs``).
        """
        present, raw = _get_or_damaged(txn, "entries", raw_id)
        if not present:
            return 0, 0
        e = _decode_entry(raw) if raw is not None else None
        blob = _get_or_damaged(txn, "manifests", raw_id)[1]
        keys: list[bytes] | None = None
        size = 0
        if blob is not None:
            try:
                m = Manifest.unpack(blob)
                keys, size = m.keys, m.bytes_at[-1]
            except ValueError:
                keys = None
        txn.delete("entries", raw_id)
        if e is None:
            _purge_index(txn, raw_id)
        else:
            size = e.size_bytes
            txn.delete("by_seq", seq_key(e.seq))
            txn.delete("by_scope", scope_key(e.session) + seq_key(e.seq))
            if e.turn is not None:
                txn.delete("by_scope", scope_key(e.session, e.turn) + seq_key(e.seq))
            txn.delete("expiry", expiry_key(_expiry_us(e.expires_at), raw_id))
            txn.delete("digests", _digest_key(e.size_bytes, e.sha256, raw_id))
            if e.name is not None and _get_or_damaged(txn, "names", name_key(e.session, e.name)) == (True, raw_id):
                txn.delete("names", name_key(e.session, e.name))
        txn.delete("manifests", raw_id)
        freed = (0, 0)
        if keys is None:
            txn.put("meta", _REPAIR, b"1")  # its chunks' references are unknown: gc() recounts them
        else:
            freed = self._release(txn, keys)
        self._bump(txn, entries=-1, logical_bytes=-size)
        self._reader.forget(raw_id)
        return freed

    def _release(self, txn: WriteTxn, keys: Iterable[bytes]) -> tuple[int, int]:
        chunks = stored = unique = 0
        for key in keys:
            rec = _get_or_damaged(txn, "refs", key)[1]
            ref = None if rec is None else _unpack_ref(rec)
            if ref is None:  # missing or damaged: gc() recounts the references
                txn.put("meta", _REPAIR, b"1")
                continue
            count, slen, rlen = ref
            if count <= 1:
                txn.delete("refs", key)
                txn.delete("chunks", key)
                chunks += 1
                stored += slen
                unique += rlen
            else:
                txn.put("refs", key, _REF.pack(count - 1, slen, rlen))
        if chunks:
            self._bump(txn, chunks=-chunks, stored_bytes=-stored, unique_bytes=-unique)
        return chunks, stored

    def gc(self) -> GcReport:
        """Remove expired entries (through the expiry index), free unreferenced chunks,
        roll back puts whose process died, and remove expired notepads; report what was freed."""
        aborted = self._recover()
        now = self.now()
        total_entries = total_chunks = total_bytes = 0
        problems: list[str] = []
        while True:  # in bounded transactions, so a big gc never holds the writer for long

            def txn_fn(txn: WriteTxn) -> tuple[int, int, int, list[str]]:
                n = chunks = freed = 0
                damaged_keys: list[bytes] = []
                for key, _ in _due(txn, now, damaged_keys.append):
                    c, b = self._delete_in(txn, key[8:])
                    if not c and not b and not _get_or_damaged(txn, "entries", key[8:])[0]:
                        txn.delete("expiry", key)
                    n += 1
                    chunks += c
                    freed += b
                    if n >= 500:
                        break
                for key in damaged_keys:  # an index record that names nothing it can be trusted for
                    txn.delete("expiry", key)
                return n, chunks, freed, [f"removed a damaged expiry index record {k.hex()}" for k in damaged_keys]

            n, c, b, found = self._backend.write(txn_fn, frees=True)
            problems.extend(found)
            total_entries += n
            total_chunks += c
            total_bytes += b
            if n < 500:
                break
        with self._backend.read() as txn:
            repair = _get_or_damaged(txn, "meta", _REPAIR)[0]
        if repair:
            c, b = self._backend.write(self._repair_refs, frees=True)
            total_chunks += c
            total_bytes += b
            with self._backend.read() as txn:
                if _get_or_damaged(txn, "meta", _REPAIR)[0]:
                    problems.append(
                        "chunk references cannot be recounted while a damaged chunk list or entry remains; "
                        "delete the entries verify() names, then run gc() again"
                    )
        notepads = self._backend.write(lambda txn: notes.purge_expired(txn, now), frees=True)
        return GcReport(total_entries, total_chunks, total_bytes, aborted, notepads, tuple(problems))

    def _repair_refs(self, txn: WriteTxn) -> tuple[int, int]:
        """Recount the references of every chunk, when the store is flagged for it.

        The references of a chunk list that does not decode cannot be released when its
        entry is deleted, nor those of a damaged or missing reference record; the
        delete flags the store instead (so does verify() when it finds a wrong record),
        and gc() runs this: the references are recounted from the surviving chunk lists
        and the pending journal (in one transaction, so puts in flight are counted
        right), damaged or missing records are rebuilt from the stored frame and the
        chunk lists, chunks nothing references are freed, and the counters are
        recounted.  While a damaged chunk list is still stored nothing is changed (its
        references are unknown).  Returns (chunks freed, stored bytes freed).
        """
        if txn.get("meta", _REPAIR) is None:
            return 0, 0
        census = _census(txn)
        if census is None:
            return 0, 0  # repaired by the gc() after that entry is deleted
        expected, raw_len, sizes = census
        fixes: list[tuple[bytes, bytes | None]] = []
        chunks = stored = unique = freed_chunks = freed_bytes = 0
        recorded = set()
        for key, rec in txn.scan("refs", on_damage=lambda k: None):  # a damaged one: rebuilt below, as a missing one
            recorded.add(key)
            want = expected.get(key, 0)
            ref = _unpack_ref(rec)
            frame = _get_or_damaged(txn, "chunks", key)[1] if ref is None else None
            if ref is None and frame is not None:  # damaged: rebuilt from the frame and the chunk lists
                ref = (0, len(frame), raw_len.get(key, _content_size(frame)))
            if not want or ref is None:
                fixes.append((key, None))
                freed_chunks += 1
                freed_bytes += ref[1] if ref is not None else 0
                continue
            count, slen, rlen = ref
            chunks += 1
            stored += slen
            unique += rlen
            if want != count:  # a rebuilt record (count 0) is always rewritten
                fixes.append((key, _REF.pack(want, slen, rlen)))
        for key, frame in txn.scan("chunks", on_damage=lambda k: None):  # chunks whose record is missing
            if key in recorded:
                continue
            if key in expected:
                rlen = raw_len.get(key, _content_size(frame))
                fixes.append((key, _REF.pack(expected[key], len(frame), rlen)))
                chunks += 1
                stored += len(frame)
                unique += rlen
            else:
                fixes.append((key, None))
                freed_chunks += 1
                freed_bytes += len(frame)
        for key, new in fixes:
            if new is None:
                txn.delete("refs", key)
                txn.delete("chunks", key)
            else:
                txn.put("refs", key, new)
        entries = logical = 0
        for raw_id, raw in txn.scan("entries", on_damage=lambda k: None):
            entries += 1
            e = _decode_entry(raw)
            logical += e.size_bytes if e is not None else sizes.get(raw_id, 0)
        counters = self._counters(txn)
        counters.update(entries=entries, logical_bytes=logical, chunks=chunks, stored_bytes=stored, unique_bytes=unique)
        txn.put("meta", b"counters", json.dumps(counters).encode())
        txn.delete("meta", _REPAIR)
        return freed_chunks, freed_bytes

    def _evict_for(self, txn: WriteTxn, keep: bytes, cap: int | None) -> None:
        """Evict the entries closest to expiry until the stored bytes fit under ``cap``
        (``max_bytes`` as ``txn`` reads it).

        Runs in the final transaction of a put (``keep`` is its id), whose chunks are
        already counted, never in its batches: a put that fails has evicted nothing.
        """
        if not cap:
            return
        over = self._counters(txn)["stored_bytes"] - cap
        if over <= 0:
            return
        victims = []
        for key, _ in txn.scan("expiry"):
            if key[8:] != keep:
                victims.append(key[8:])
            if len(victims) > 10_000:
                break
        for raw_id in victims:
            _, freed = self._delete_in(txn, raw_id)
            over -= freed
            if over <= 0:
                return
        raise StoreFull(
            f"the store is capped at max_bytes={cap} and this put does not fit even after evicting "
            "every other entry", hint=HINT_MAX_BYTES,
        )

    # -- recovery of interrupted puts ---------------------------------------------------

    def _recover(self) -> int:
        """Roll back the pending puts of processes that died; return how many."""
        with self._backend.read() as txn:
            dead = [
                key[:8]
                for key, value in txn.scan("pending")
                if key[8:9] == b"H" and not _token_alive(value.decode("utf-8", "replace"))
            ]
        for raw_id in dead:
            self._backend.write(lambda txn, r=raw_id: _rollback_pending(self, txn, r), frees=True)
        return len(dead)

    # -- stats, verify, compact -------------------------------------------------------

    def stats(self) -> Stats:
        """Counts and sizes of the store (see :class:`Stats`): live and expired entries apart."""
        now = self.now()
        expired = expired_bytes = 0
        with self._backend.read() as txn:
            c = self._counters(txn)
            cap = self._cap(txn)
            for _, e in _due(txn, now):  # the expired entries gc() has not removed yet
                if e is not None and e.expires_at is not None:
                    expired += 1
                    expired_bytes += e.size_bytes
        return Stats(
            entries=c["entries"] - expired, chunks=c["chunks"], logical_bytes=c["logical_bytes"] - expired_bytes,
            stored_bytes=c["stored_bytes"], unique_bytes=c.get("unique_bytes", 0),
            disk_bytes=self._backend.engine.size(), map_size=self._map_size(), max_bytes=cap,
            expired_entries=expired, expired_bytes=expired_bytes,
        )

    def _map_size(self) -> int:
        """The map size of an engine with a size ceiling (LMDB), else 0."""
        engine = self._backend.engine
        return int(engine.map_size()) if engine.capabilities.size_ceiling else 0  # type: ignore[attr-defined]

    def compact(self) -> tuple[int, int]:
        """Give free pages back to the file system; return (bytes before, bytes after).

        Needs the store to be open in this process only.  Raises BlobpadError on an
        engine without compaction (``store.engine.capabilities.compaction``).
        """
        engine = self._backend.engine
        if not engine.capabilities.compaction:
            raise BlobpadError(f"the {engine.capabilities.name} engine has nothing to compact")
        return engine.compact()

    def verify(self) -> VerifyReport:
        """Read every record of every keyspace and report what is damaged; never raises for damage.

        Checks each record's checksum, that LMDB's own record counts match what a
        scan finds (pages lost to damage), every entry against its chunk list and
        every index both ways (each entry is indexed, each index record names a live
        record of the right session), every chunk's content against its hash, the
        reference counts and the counters, and each notepad's heads, versions and
        texts.  ``damaged_entries`` names the entries whose content or lookup cannot
        be trusted.  Wrong reference records or counters damage no content: verify()
        flags the store so that the next gc() rebuilds them.
        """
        problems: list[str] = []
        damaged: set[str] = set()
        totals = [0, 0]  # entries, chunks
        try:
            with self._backend.read() as txn:
                recount = _Verifier(self, txn, problems, damaged, totals).run()
        except BlobpadError as exc:  # the store file cannot even be read through
            problems.append(f"the store cannot be read: {exc}")
            recount = False
        if recount:  # flag the store so that the next gc() recounts every reference
            with contextlib.suppress(BlobpadError):
                self._backend.write(lambda txn: txn.put("meta", _REPAIR, b"1"), frees=True)
        return VerifyReport(not problems, totals[0], totals[1], problems, sorted(damaged))


class _Verifier:
    """One verify() pass over a read transaction (see :meth:`Store.verify`)."""

    def __init__(self, store: Store, txn: ReadTxn, problems: list[str], damaged: set[str], totals: list[int]) -> None:
        self.store = store
        self.txn = txn
        self.problems = problems
        self.damaged = damaged
        self.totals = totals
        self.recount = False

    def run(self) -> bool:
        # Every keyspace but the chunks, whose frames are checked one at a time (_chunks).
        records = {space: self._read_space(space) for space in SPACES if space != "chunks"}
        for phase in (self._entries, self._chunks, self._counters):
            try:
                phase(records)
            except BlobpadError as exc:  # damage that stops one phase must not hide the others
                self.problems.append(f"verify stopped early in {phase.__name__.strip('_')}: {exc}")
        try:
            self.problems.extend(notes.verify_notepads(self.txn, records["notes"]))
        except BlobpadError as exc:
                self.problems.append(f"verify stopped early in the notepads: {exc}")
        return self.recount

    def _read_space(self, space: str, check: Callable[[bytes, bytes], None] | None = None) -> dict[bytes, bytes]:
        """Every sound record of ``space``; damaged ones and lost pages are reported.

        With ``check``, each value is handed to it and only the keys are kept (the
        chunks: memory stays one frame, whatever the store's size)."""
        found: dict[bytes, bytes] = {}
        bad: list[bytes] = []
        try:
            for key, value in self.txn.scan(space, on_damage=bad.append):
                if check is not None:
                    check(key, value)
                    value = b""
                found[key] = value
        except BlobpadError as exc:
            self.problems.append(f"the {space} keyspace cannot be read to its end: {exc}")
        for key in bad:
            self.problems.append(f"{space} record {key[:40].hex()}: damaged (checksum mismatch)")
            if space in ("entries", "manifests") and len(key) == 8:
                self.damaged.add(key.hex())
        recorded = self.txn.recorded_count(space)
        if recorded is not None and recorded != len(found) + len(bad):
            self.problems.append(
                f"the {space} keyspace records {recorded} records but {len(found) + len(bad)} can be read: "
                "pages of the store file are damaged"
            )
        return found

    def _entries(self, records: dict[str, dict[bytes, bytes]]) -> None:
        entries, manifests = records["entries"], records["manifests"]
        self.totals[0] = len(entries)
        want: dict[str, dict[bytes, bytes]] = {space: {} for space in ("by_seq", "by_scope", "expiry", "digests")}
        names: dict[bytes, bytes] = {}
        for raw_id, raw in entries.items():
            eid = raw_id.hex()
            e = _decode_entry(raw)
            if e is None or e.id != eid:
                self.problems.append(f"entry {eid}: record unreadable")
                self.damaged.add(eid)
                continue
            want["by_seq"][seq_key(e.seq)] = raw_id
            want["by_scope"][scope_key(e.session) + seq_key(e.seq)] = raw_id
            if e.turn is not None:
                want["by_scope"][scope_key(e.session, e.turn) + seq_key(e.seq)] = raw_id
            want["expiry"][expiry_key(_expiry_us(e.expires_at), raw_id)] = b""
            want["digests"][_digest_key(e.size_bytes, e.sha256, raw_id)] = b""
            if e.name is not None:
                names[name_key(e.session, e.name)] = raw_id
            blob = manifests.get(raw_id)
            try:
                m = Manifest.unpack(blob) if blob is not None else None
            except ValueError:
                m = None
            if m is None:
                self.problems.append(f"entry {eid}: chunk list missing or damaged")
                self.damaged.add(eid)
            elif m.bytes_at[-1] != e.size_bytes or len(m) != e.chunks:
                self.problems.append(f"entry {eid}: its chunk list holds {m.bytes_at[-1]} bytes, not {e.size_bytes}")
                self.damaged.add(eid)
        for raw_id in manifests.keys() - entries.keys():
            self.problems.append(f"chunk list {raw_id.hex()}: no entry owns it")
            self.recount = True
        for space, expected in want.items():
            self._compare_index(space, expected, records[space])
        self._compare_index("names", names, records["names"])

    def _compare_index(self, space: str, expected: dict[bytes, bytes], actual: dict[bytes, bytes]) -> None:
        """Every entry indexed in ``space`` and every record of ``space`` naming a live entry."""
        for key, value in expected.items():
            got = actual.get(key)
            if got != value:
                owner = value.hex() if len(value) == 8 else key[-8:].hex()
                state = "missing" if got is None else f"pointing at {got.hex()}"
                self.problems.append(f"entry {owner}: its {space} record is {state}")
                self.damaged.add(owner)
        for key in actual.keys() - expected.keys():
            self.problems.append(f"{space} record {key[:40].hex()}: names no entry (a stale or damaged index record)")

    def _chunks(self, records: dict[str, dict[bytes, bytes]]) -> None:
        expected: dict[bytes, int] = {}
        raw_len: dict[bytes, int] = {}
        chunk_owner: dict[bytes, list[str]] = {}
        for raw_id, blob in records["manifests"].items():
            try:
                m = Manifest.unpack(blob)
            except ValueError:
                continue  # reported with its entry
            _count_keys(m, expected, raw_len)
            for key in m.keys:
                chunk_owner.setdefault(key, []).append(raw_id.hex())
        for key, value in records["pending"].items():
            if key[8:9] == b"B":
                for i in range(0, len(value), KEY_SIZE):
                    k = value[i : i + KEY_SIZE]
                    expected[k] = expected.get(k, 0) + 1
        failed: dict[bytes, str] = {}

        def check(key: bytes, frame: bytes) -> None:
            if key in raw_len:
                try:
                    self.store._codec.decompress(frame, key, raw_len[key])
                except CorruptData as exc:
                    failed[key] = str(exc)

        refs, chunks = records["refs"], self._read_space("chunks", check)
        self.totals[1] = len(refs)
        for key, rec in refs.items():
            ref = _unpack_ref(rec)
            if ref is None:
                self.problems.append(f"chunk {key.hex()}: reference record damaged ({len(rec)} bytes); gc() rebuilds it")
                self.recount = True
            elif expected.get(key, 0) != ref[0]:
                self.problems.append(
                    f"chunk {key.hex()}: reference count {ref[0]}, but {expected.get(key, 0)} references; gc() recounts them"
                )
                self.recount = True
        for key in expected.keys() - refs.keys():
            self.problems.append(f"chunk {key.hex()}: referenced but has no reference record; gc() rebuilds it")
            self.recount = True
        for key in chunks.keys() - expected.keys():
            self.problems.append(f"chunk {key.hex()}: stored, but nothing references it; gc() frees it")
            self.recount = True
        for key, owners in chunk_owner.items():
            if key not in chunks or key in failed:
                self.problems.append(failed.get(key, f"chunk {key.hex()}: missing"))
                self.damaged.update(owners)

    def _counters(self, records: dict[str, dict[bytes, bytes]]) -> None:
        raw = records["meta"].get(b"counters")
        if raw is None:
            if records["entries"] or records["refs"]:
                self.problems.append("the counters record is missing; the next write recounts it")
            return
        try:
            stored = json.loads(raw)
        except ValueError:
            stored = None
        actual = _recount(self.txn)
        if not isinstance(stored, dict) or any(stored.get(k) != actual[k] for k in _COUNTERS if k != "seq"):
            self.problems.append(f"the counters record is wrong ({raw[:120]!r}); gc() recounts it")
            self.recount = True


class _ClosedBackend:
    """Stands in for the backend of a closed Store: every use raises."""

    path = ""

    def __getattr__(self, name: str) -> Any:
        raise BlobpadError("the store is closed; open it again with blobpad.open()")

    def close(self) -> None:
        pass


class _GroupJob:
    """One thread's function waiting in a :class:`_GroupCommit`, and what became of it."""

    __slots__ = ("fn", "wake", "batch", "finished", "result", "error")

    def __init__(self, fn: Callable[[WriteTxn], Any]) -> None:
        self.fn = fn
        self.wake = threading.Event()  # set when the job is finished, or its thread is to commit
        self.batch: list[_GroupJob] | None = None  # the jobs this job's thread is to commit
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.finished = result, error, True
        self.wake.set()


class _GroupCommit:
    """The final transactions of puts that threads of this process make at the same time,
    committed together: one write transaction, and one flush to disk, for all of them.

    A thread that finds no commit under way commits its own at once (a lone put waits
    for nobody).  Threads that arrive while one runs queue their functions; when it is
    done, the first of them commits every queued function in one transaction (in the
    order they came, each seeing the writes of those before it, as in transactions of
    their own), and each thread gets its own result.  Should one of them raise, that
    transaction is abandoned and each function is run again in a transaction of its
    own, so one put's failure never fails another's.  The functions only touch ``txn``
    (the rule of ``write(fn)``), so it does not matter which thread runs them; a
    waiting thread holds no transaction (see "Locking rules" in :mod:`blobpad.engine`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a leaf lock: held only around the queue
        self._queue: list[_GroupJob] = []
        self._busy = False
        self._pid = os.getpid()
        _GROUPS.add(self)

    def _after_fork_in_child(self) -> None:
        # a fork may have caught another thread holding the lock, or committing: that
        # thread is not in the child, and neither are the threads that queued
        self._lock = threading.Lock()
        self._queue, self._busy, self._pid = [], False, os.getpid()

    def write(self, write: Callable[[Callable[[WriteTxn], Any]], Any], fn: Callable[[WriteTxn], Any]) -> Any:
        """``write(fn)``'s result, committed alone or with other threads' functions."""
        job = _GroupJob(fn)
        with self._lock:
            if self._busy:
                self._queue.append(job)
            else:
                self._busy = True
                job.batch = [job]
        if job.batch is None:
            job.wake.wait()
        batch = job.batch
        if batch is not None:  # this thread commits the batch (its own job is the first), then hands over
            job.batch = None
            try:
                self._commit(write, batch)
            finally:
                self._hand_over(batch)
        if job.error is not None:
            raise job.error
        return job.result

    @staticmethod
    def _commit(write: Callable[[Callable[[WriteTxn], Any]], Any], batch: list[_GroupJob]) -> None:
        if len(batch) > 1:
            try:
                results = write(lambda txn: [job.fn(txn) for job in batch])
            except Exception:
                pass  # one of them failed: each runs on its own below
            else:
                for job, result in zip(batch, results, strict=True):
                    job.finish(result)
                return
        for job in batch:
            try:
                job.finish(write(job.fn))
            except Exception as exc:
                job.finish(error=exc)

    def _hand_over(self, batch: list[_GroupJob]) -> None:
        """Release the jobs of ``batch`` and make the first queued thread commit the queue."""
        for job in batch:
            if not job.finished:  # the committing thread was interrupted (KeyboardInterrupt)
                job.finish(error=BlobpadError(
                    "the put was interrupted while another thread committed it; it may or may not be stored"
                ))
        with self._lock:
            if not self._queue:
                self._busy = False
                return
            queued, self._queue = self._queue, []
            queued[0].batch = queued
        queued[0].wake.set()


_GROUPS: weakref.WeakSet[_GroupCommit] = weakref.WeakSet()


def _groups_after_fork_in_child() -> None:
    for group in list(_GROUPS):
        group._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_groups_after_fork_in_child)


class _Sha256:
    """The SHA-256 of a put's content, computed beside the cutting without a thread of its own.

    Blocks up to ``_INLINE`` bytes are hashed in the calling thread; larger ones go to
    the store's worker pool, one task at a time so that they are hashed in order: the
    blocks read while a task runs wait for the next one.  A task only hashes bytes it
    was given (a pool task, see "Locking rules" in :mod:`blobpad.engine`).
    """

    _INLINE = 1 << 20

    def __init__(self, pool: Callable[[], ThreadPoolExecutor]) -> None:
        self._sha = hashlib.sha256()
        self._pool = pool
        self._waiting: list[bytes] = []
        self._running: Future[None] | None = None

    def feed(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        """``blocks``, hashed as they are read."""
        for block in blocks:
            if self._running is None and len(block) <= self._INLINE:
                self._sha.update(block)
            else:
                self._waiting.append(block)
                self._pump(wait=False)
            yield block

    def _pump(self, *, wait: bool) -> None:
        if self._running is not None:
            if not wait and not self._running.done():
                return
            self._running.result()
            self._running = None
        if self._waiting:
            blocks, self._waiting = self._waiting, []
            self._running = self._pool().submit(_update_all, self._sha, blocks)

    def hexdigest(self) -> str:
        """The digest of every block fed, once the pool has hashed them all."""
        while self._running is not None or self._waiting:
            self._pump(wait=True)
        return self._sha.hexdigest()


def _update_all(sha: Any, blocks: list[bytes]) -> None:
    for block in blocks:
        sha.update(block)


class _PutWriter:
    """The batches of one put: cut, hash, compress or verify, write, remember."""

    def __init__(self, store: Store, raw_id: bytes, known_sha: str | None = None) -> None:
        self.store = store
        self.raw_id = raw_id
        self._known_sha = known_sha
        self.keys: list[bytes] = []
        self.sizes: list[int] = []
        self.char_counts: list[int] = []
        self.newlines: list[int] = []
        self.chars = 0
        self.is_text = True
        self.size = 0
        self.ends_with_newline = False
        self._batch = 0
        self._written = False
        self.new_stored = 0  # stored bytes of the chunks this put created so far
        self.sha256 = ""
        self.tail: list[tuple[memoryview, _Prepared]] = []  # the last batch, placed by the final transaction

    def run(self, blocks: Iterable[bytes]) -> None:
        """Cut ``blocks`` into chunks and write all of them but the last batch.

        The calling thread cuts, without copying: chunks are views of the blocks read.
        It hashes each task's chunks and looks their keys up (:meth:`_lookup`), then
        hands the task (growing from ``_FIRST_TASK`` to ``_TASK`` bytes, so that a
        large put still spreads over the workers) to the store's worker pool, where
        each chunk is counted and compressed (or compared with the stored copy) while
        the next ones are being cut; a put that is a single task (up to
        ``_FIRST_TASK`` bytes) is prepared in this thread, without a hand-over.  The
        SHA-256 of the whole content is computed beside the cutting (:class:`_Sha256`).
        At most two batches are in flight, so memory stays bounded on any input size.

        Each full batch but the last is written in a transaction of its own, recorded
        in the pending-put journal; the last one (the whole content of a put that
        fits in one batch) is kept in ``tail`` for the put's final transaction
        (:meth:`Store._finish_put`).  This thread waits for the pool holding no
        transaction, and the pool tasks open none (see "Locking rules" in
        :mod:`blobpad.engine`).
        """
        store = self.store
        pool: ThreadPoolExecutor | None = None
        inflight: deque[tuple[memoryview, Future[list[_Prepared]], int]] = deque()
        inflight_bytes = 0
        task: list[_Span] = []
        task_bytes = 0
        task_size = self._FIRST_TASK
        sha = None if self._known_sha is not None else _Sha256(store._executor)
        if sha is not None:
            blocks = sha.feed(blocks)
        last: bytes | None = None
        view = memoryview(b"")
        ascii = True
        try:
            for buf, start, end in cut_spans(blocks, store.chunk_params):
                if buf is not last:  # a new block: chunks are views of it until the next one
                    last, view, ascii = buf, memoryview(buf), buf.isascii()
                task.append((view[start:end], buf, start, end, ascii))
                task_bytes += end - start
                if task_bytes >= task_size:
                    if pool is None:
                        pool = store._executor()
                    fut = pool.submit(self._prepare, task, *self._lookup(task))
                    inflight.extend((span[0], fut, i) for i, span in enumerate(task))
                    inflight_bytes += task_bytes
                    task, task_bytes = [], 0
                    task_size = min(2 * task_size, self._TASK)
                    if inflight_bytes >= 2 * _BATCH:
                        inflight_bytes -= self._flush(inflight, _BATCH)
            if task:
                if pool is None:  # the whole put is this one task: prepare it here
                    fut = Future()
                    if task_bytes <= self._LOOKUP_FROM:  # new content, most likely: no lookup
                        found: list[bytes | None] = [None] * len(task)
                        fut.set_result(self._prepare(task, self._keys(task), found))
                    else:
                        fut.set_result(self._prepare(task, *self._lookup(task)))
                else:
                    fut = pool.submit(self._prepare, task, *self._lookup(task))
                inflight.extend((span[0], fut, i) for i, span in enumerate(task))
                inflight_bytes += task_bytes
            while inflight_bytes > _BATCH:
                inflight_bytes -= self._flush(inflight, _BATCH)
            self.tail = self._take(inflight, inflight_bytes)
        finally:
            for _, fut, _ in inflight:
                fut.cancel()
        self.sha256 = self._known_sha or (sha.hexdigest() if sha is not None else "")

    #: raw bytes of chunks handed to a worker at a time: few tasks, so that workers
    #: seldom wait for the GIL (held by the cutting thread) between chunks
    _TASK = 4 << 20
    _FIRST_TASK = 256 << 10
    #: a put of at most this many bytes is compressed without looking its chunks up
    #: first (a read transaction): were they stored already, the final transaction
    #: compares them with the stored bytes and shares them (:meth:`_place`)
    _LOOKUP_FROM = 64 << 10

    @property
    def batches(self) -> int:
        """How many batches were written before the final transaction (each recorded as pending)."""
        return self._batch

    def _keys(self, task: list[_Span]) -> list[bytes]:
        """Each chunk's key: its seeded xxh3-128 hash, variant 0."""
        seed = self.store._codec.seed
        return [xxhash.xxh3_128_digest(span[0], seed=seed) + b"\0" for span in task]

    def _lookup(self, task: list[_Span]) -> tuple[list[bytes], list[bytes | None]]:
        """In the put's own thread: each chunk's key, and the frame stored under it (or None).

        The lookup is a short read transaction of this thread, during which it waits
        for nothing: the pool task it prepares then only computes (see "Locking rules"
        in :mod:`blobpad.backend`: a pool task that opened a transaction would wait
        behind a growth that waits for a reader that waits for the pool).
        """
        keys = self._keys(task)
        with self.store._backend.read() as txn:
            found = [txn.get("chunks", key) for key in keys]
        return keys, found

    def _prepare(self, task: list[_Span], keys: list[bytes], found: list[bytes | None]) -> list[_Prepared]:
        """In a worker, pure computation: per chunk, its stats, and either the stored frame
        (``found`` by :meth:`_lookup`) when it decompresses to exactly the chunk, or a new frame."""
        store = self.store
        stats = [span_stats(buf, start, end, ascii) for _, buf, start, end, ascii in task]
        found = list(found)
        codec = store._codec.contexts
        seen = [i for i, stored in enumerate(found) if stored is not None]
        stored_frames = [frame for frame in found if frame is not None]
        equal = self._equal_all(codec.decompressor, stored_frames, [task[i] for i in seen])
        for i, same in zip(seen, equal, strict=True):
            if not same:
                found[i] = None
        # the chunks to compress: not stored, or stored but different
        todo = [i for i, stored in enumerate(found) if stored is None]
        frames: list[bytes | None] = [None] * len(task)
        for i, frame in zip(todo, self._compress_all(codec.compressor, [task[i][0] for i in todo]), strict=True):
            frames[i] = frame
        return [
            (key, frame, stored, chars, newlines)
            for key, frame, stored, (chars, newlines) in zip(keys, frames, found, stats, strict=True)
        ]

    @staticmethod
    def _compress_all(compressor: zstandard.ZstdCompressor, chunks: list[memoryview]) -> list[bytes]:
        """One frame per chunk, as ``compressor.compress`` makes them.

        The C backend of zstandard compresses the whole list without taking the GIL
        back between chunks (with a context of its own, from the same parameters,
        which costs more than compressing a few small chunks one by one: so only from
        ``_MULTI_FROM`` bytes on).
        """
        if len(chunks) > 1 and _PutWriter._multi and sum(len(c) for c in chunks) >= _PutWriter._MULTI_FROM:
            try:
                out = compressor.multi_compress_to_buffer(chunks, threads=1)
            except (AttributeError, NotImplementedError):  # the cffi or Rust backend
                _PutWriter._multi = False
            else:
                return [out[i].tobytes() for i in range(len(out))]
        return [compressor.compress(chunk) for chunk in chunks]

    @staticmethod
    def _equal_all(decompressor: zstandard.ZstdDecompressor, frames: list[bytes], spans: list[_Span]) -> list[bool]:
        """Whether each stored frame decompresses to its chunk, exactly.

        Like ``_compress_all``, the C backend decompresses the whole list at once,
        each frame into exactly its chunk's size: a frame of any other size (or a
        damaged one) fails the lot, and then each is compared on its own.  Chunks are
        compared in their buffers (``startswith`` is a memcmp; comparing memoryviews
        goes byte by byte).
        """
        if len(frames) > 1 and _PutWriter._multi:
            try:
                out = decompressor.multi_decompress_to_buffer(
                    frames, decompressed_sizes=array("Q", [end - start for _, _, start, end, _ in spans]), threads=1
                )
            except zstandard.ZstdError:
                pass
            except (AttributeError, NotImplementedError):
                _PutWriter._multi = False
            else:
                return [
                    len(out[i]) == end - start and buf.startswith(out[i], start)
                    for i, (_, buf, start, end, _) in enumerate(spans)
                ]
        equal = []
        for frame, (_, buf, start, end, _) in zip(frames, spans, strict=True):
            try:
                raw = decompressor.decompress(frame, max_output_size=end - start + 1)
            except zstandard.ZstdError:
                equal.append(False)
            else:
                equal.append(len(raw) == end - start and buf.startswith(raw, start))
        return equal

    _multi = True  # whether the multi_*_to_buffer functions are available (C backend)
    _MULTI_FROM = 1 << 20  # raw bytes from which a task's chunks are compressed in one call

    def _take(
        self, inflight: deque[tuple[memoryview, Future[list[_Prepared]], int]], limit: int
    ) -> list[tuple[memoryview, _Prepared]]:
        """The oldest chunks in flight, up to ``limit`` raw bytes, with what the workers found,
        counted into the put's sizes and statistics (their keys are known once written)."""
        batch: list[tuple[memoryview, _Prepared]] = []
        taken = 0
        while inflight and taken < limit:
            chunk, fut, i = inflight.popleft()
            prepared = fut.result()[i]
            batch.append((chunk, prepared))
            taken += len(chunk)
            chars, nl = prepared[3], prepared[4]
            self.sizes.append(len(chunk))
            self.newlines.append(nl)
            if chars is None:
                self.is_text = False
                self.char_counts.append(len(chunk))
            else:
                self.char_counts.append(chars)
                self.chars += chars
            self.size += len(chunk)
        if batch:
            self.ends_with_newline = batch[-1][0][-1:] == b"\n"
        return batch

    def _place_batch(
        self, txn: WriteTxn, batch: list[tuple[memoryview, _Prepared]], cap: int | None
    ) -> tuple[list[bytes], dict[str, int]]:
        """Add a reference to each chunk of ``batch`` in ``txn``: their final keys, and the counter changes.

        Raises StoreFull when the chunks this put created exceed ``cap`` (``max_bytes``
        as ``txn`` reads it) by themselves (eviction waits for the final transaction;
        whatever it evicted, this put could not fit).
        """
        final_keys: list[bytes] = []
        new_stored = new_chunks = new_unique = 0
        for chunk, (key, frame, seen, _, _) in batch:
            key, created, slen = self._place(txn, chunk, key, frame, seen)
            final_keys.append(key)
            if created:
                new_chunks += 1
                new_stored += slen
                new_unique += len(chunk)
        if new_chunks:
            if cap and self.new_stored + new_stored > cap:
                raise StoreFull(
                    f"the store is capped at max_bytes={cap} and this put alone needs more stored "
                    "bytes than that", hint=HINT_MAX_BYTES,
                )
            return final_keys, {"chunks": new_chunks, "stored_bytes": new_stored, "unique_bytes": new_unique}
        return final_keys, {}

    def _flush(self, inflight: deque[tuple[memoryview, Future[list[_Prepared]], int]], limit: int) -> int:
        """Write the oldest chunks in flight, up to ``limit`` raw bytes, in one transaction
        that records them in the pending-put journal; return their raw bytes."""
        store = self.store
        batch = self._take(inflight, limit)
        batch_no = self._batch
        self._batch += 1
        token = _process_token()

        def txn_fn(txn: WriteTxn) -> tuple[list[bytes], int]:
            if batch_no == 0:
                txn.put("pending", self.raw_id + b"H", token.encode())
            final_keys, counts = self._place_batch(txn, batch, store._cap(txn))
            txn.put("pending", self.raw_id + b"B" + batch_no.to_bytes(4, "big"), b"".join(final_keys))
            if counts:
                store._bump(txn, **counts)
            return final_keys, counts.get("stored_bytes", 0)

        final, added = store._backend.write(txn_fn)
        self.new_stored += added
        self._written = True
        self.keys.extend(final)
        return sum(len(chunk) for chunk, _ in batch)

    def place_tail(self, txn: WriteTxn, cap: int | None) -> tuple[list[bytes], dict[str, int]]:
        """In the put's final transaction: place the last batch (see :meth:`_place_batch`)."""
        return self._place_batch(txn, self.tail, cap)

    def _place(
        self, txn: WriteTxn, chunk: bytes | memoryview, key: bytes, frame: bytes | None, seen: bytes | None
    ) -> tuple[bytes, bool, int]:
        """Add one reference to ``chunk``; return (its key, whether it was created, stored size).

        ``frame`` is the compressed chunk, or None when ``_prepare`` found ``seen``, the
        stored frame under the first key, to hold the same bytes.
        """
        store = self.store
        base = key[:16]
        for variant in range(256):
            k = base + bytes([variant])
            rec = txn.get("refs", k)
            if rec is None:
                if frame is None:
                    frame = store._codec.contexts.compressor.compress(chunk)
                txn.put("chunks", k, frame)
                txn.put("refs", k, _REF.pack(1, len(frame), len(chunk)))
                return k, True, len(frame)
            ref = _unpack_ref(rec)
            if ref is None:
                continue  # a damaged record: leave it to gc(), place the chunk under another variant
            count, slen, rlen = ref
            if rlen == len(chunk):
                stored = txn.get("chunks", k)
                if variant == 0 and seen is not None and stored == seen:
                    same = True  # verified against these very stored bytes by _prepare
                else:
                    try:
                        same = stored is not None and store._codec.contexts.decompressor.decompress(
                            stored, max_output_size=rlen + 1
                        ) == chunk
                    except zstandard.ZstdError:
                        same = False
                if same:
                    txn.put("refs", k, _REF.pack(count + 1, slen, rlen))
                    return k, False, 0
        raise StoreFull(f"chunk hash {base.hex()} has 256 different contents; the store is under attack or damaged")

    def clear_pending(self, txn: WriteTxn) -> None:
        prefix = self.raw_id
        for key in [k for k, _ in txn.scan("pending", prefix, _prefix_end(prefix))]:
            txn.delete("pending", key)

    def rollback(self) -> None:
        if not self._written:
            return
        try:
            self.store._backend.write(lambda txn: _rollback_pending(self.store, txn, self.raw_id), frees=True)
        except BlobpadError:
            pass  # the next open or gc() rolls it back


def _rollback_pending(store: Store, txn: WriteTxn, raw_id: bytes) -> None:
    keys: list[bytes] = []
    doomed = []
    for key, value in txn.scan("pending", raw_id, _prefix_end(raw_id)):
        doomed.append(key)
        if key[8:9] == b"B":
            keys.extend(value[i : i + KEY_SIZE] for i in range(0, len(value), KEY_SIZE))
    if txn.get("entries", raw_id) is not None:
        keys = []  # the put completed; only the bookkeeping is stale
    store._release(txn, keys)
    for key in doomed:
        txn.delete("pending", key)


#: ``meta`` key set when a deleted entry's chunk list was damaged: gc() recounts references
_REPAIR = b"repair_refs"


def _unpack_ref(rec: bytes) -> tuple[int, int, int] | None:
    """(reference count, stored length, raw length) of a ``refs`` record, or None when damaged."""
    return _REF.unpack(rec) if len(rec) == _REF.size else None


def _count_keys(m: Manifest, expected: dict[bytes, int], raw_len: dict[bytes, int]) -> None:
    """Add one reference per chunk occurrence in ``m`` to ``expected``; note each chunk's raw length."""
    at = m.bytes_at
    for i, key in enumerate(m.keys):
        expected[key] = expected.get(key, 0) + 1
        raw_len[key] = at[i + 1] - at[i]


def _count_pending(txn: ReadTxn, expected: dict[bytes, int]) -> None:
    """Add the references held by puts in flight (their journal's chunk batches)."""
    for key, value in txn.scan("pending"):
        if key[8:9] == b"B":
            for i in range(0, len(value), KEY_SIZE):
                k = value[i : i + KEY_SIZE]
                expected[k] = expected.get(k, 0) + 1


def _census(txn: ReadTxn) -> tuple[dict[bytes, int], dict[bytes, int], dict[bytes, int]] | None:
    """(references each chunk should have, each chunk's raw length, each entry's size), from
    every chunk list and the pending journal; None while a chunk list does not decode."""
    expected: dict[bytes, int] = {}
    raw_len: dict[bytes, int] = {}
    sizes: dict[bytes, int] = {}
    damaged: list[bytes] = []
    for raw_id, blob in txn.scan("manifests", on_damage=damaged.append):
        try:
            m = Manifest.unpack(blob)
        except ValueError:
            return None
        sizes[raw_id] = m.bytes_at[-1]
        _count_keys(m, expected, raw_len)
    if damaged:
        return None
    _count_pending(txn, expected)
    return expected, raw_len, sizes


def _content_size(frame: bytes) -> int:
    """The raw length a zstd frame declares, 0 when it declares none or is not a frame."""
    try:
        return max(zstandard.frame_content_size(frame), 0)
    except zstandard.ZstdError:
        return 0


def _decode_entry(raw: bytes) -> Entry | None:
    """The entry record ``raw``, or None when it is damaged (unreadable, or fields of the wrong type)."""
    try:
        e = Entry.decode(raw)
    except (ValueError, TypeError, RecursionError):
        return None

    def is_int(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64

    if not (is_int(e.seq) and is_int(e.size_bytes) and isinstance(e.session, str)):
        return None
    if not isinstance(e.sha256, str) or len(e.sha256) != 64 or not set(e.sha256) <= set("0123456789abcdef"):
        return None
    if e.turn is not None and (isinstance(e.turn, bool) or not isinstance(e.turn, (str, int))):
        return None
    if e.name is not None and not isinstance(e.name, str):
        return None
    exp = e.expires_at
    if exp is not None and (isinstance(exp, bool) or not isinstance(exp, (int, float)) or not math.isfinite(exp)):
        return None
    return e


def _purge_index(txn: WriteTxn, raw_id: bytes) -> None:
    """Remove every index key of ``raw_id`` by scanning (its record is damaged: its keys are unknown)."""
    doomed: list[tuple[str, bytes]] = []
    for space in ("by_seq", "by_scope", "names"):  # a damaged index record names nothing: it goes too
        doomed.extend((space, key) for key, value in txn.scan(space, on_damage=lambda k, sp=space: doomed.append((sp, k)))
                      if value == raw_id)
    doomed.extend(("expiry", key) for key, _ in txn.scan("expiry", on_damage=lambda k: doomed.append(("expiry", k)))
                  if key[8:] == raw_id)
    doomed.extend(("digests", key) for key, _ in txn.scan("digests", on_damage=lambda k: doomed.append(("digests", k)))
                  if key[40:] == raw_id)
    for space, key in doomed:
        txn.delete(space, key)


class _Source:
    """The content of a put: in memory, or a binary file read in blocks.

    ``size`` is known for in-memory content and regular files.  ``blocks()`` can be
    called again after ``sha256()`` only when the file is seekable.
    """

    def __init__(self, data: bytes | None, fh: IO[bytes] | None = None, size: int | None = None, *, owned: bool = False):
        self.data = data
        self.fh = fh
        self.size = len(data) if data is not None else size
        self.owned = owned

    def blocks(self) -> Iterator[bytes]:
        if self.data is not None:
            if self.data:
                yield self.data
            return
        assert self.fh is not None
        while True:
            block = self.fh.read(_BLOCK)
            if not block:
                return
            if isinstance(block, str):
                raise InvalidArgument("the file object returned str; open it in binary mode ('rb')")
            yield bytes(block)

    def sha256(self) -> str:
        """Hash the whole content, then rewind so that blocks() reads it again."""
        sha = hashlib.sha256()
        if self.fh is not None:
            start = self.fh.tell()
            for block in self.blocks():
                sha.update(block)
            self.fh.seek(start)
        else:
            sha.update(self.data or b"")
        return sha.hexdigest()

    def is_utf8(self) -> bool:
        """Whether the whole content is valid UTF-8 (rewinds like sha256())."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        start = self.fh.tell() if self.fh is not None else 0
        try:
            for block in self.blocks():
                decoder.decode(block)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
        finally:
            if self.fh is not None:
                self.fh.seek(start)
        return True

    def close(self) -> None:
        if self.owned and self.fh is not None:
            self.fh.close()


def _digest_key(size: int, sha256: str, raw_id: bytes) -> bytes:
    return size.to_bytes(8, "big") + bytes.fromhex(sha256) + raw_id


def _expiry_us(expires_at: float | None) -> int:
    if expires_at is None:
        return NEVER
    return max(0, min(NEVER - 1, int(expires_at * 1_000_000)))


def open(path: str | os.PathLike[str] | None = None, **options: Any) -> Store:  # noqa: A001 - the public name
    """Open (creating if needed) the store ``path`` names: a directory, or a URL such as ``memory://``.

    ``path`` defaults to ``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR``, else the
    platform's user data directory (``platformdirs.user_data_dir("blobpad")``); see
    :mod:`blobpad.engine` for the URLs.  ``options`` are those of :class:`Store`,
    the engine's own included (``map_size``, ``sync``, ... for LMDB).
    """
    return Store(path, **options)



