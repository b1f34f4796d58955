"""The storage interface, and its LMDB implementation.

Everything that speaks to LMDB lives here.  The rest of blobpad sees a few named
keyspaces of ordered byte keys and two kinds of transaction:

* ``backend.read()`` – a context manager giving a :class:`ReadTxn` (``get`` and
  ordered ``scan``), a consistent snapshot that never blocks the writer;
* ``backend.write(fn)`` – runs ``fn(txn)`` in one write transaction
  (:class:`WriteTxn` adds ``put`` and ``delete``) and commits it, retrying the whole
  function when the map had to grow.  ``fn`` must therefore only touch the store
  through ``txn`` (and may be called more than once).  ``write(fn, frees=True)``
  marks a transaction that makes room (delete, gc, rollback): it may use a small
  reserve past the map-size ceiling, so that a full store can always be emptied.

A second backend (Redis, for fleets of agents on many machines) implements the
same three classes; chunking, reads and the notepad do not change.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import warnings

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import lmdb

from .errors import (
    HINT_COMPACT_ALONE,
    HINT_DISK_FULL,
    HINT_MAP_CEILING,
    HINT_MAP_CEILING_FULL,
    HINT_VERIFY,
    BlobpadError,
    CorruptData,
    InvalidArgument,
    StoreFull,
)

__all__ = ["ReadTxn", "WriteTxn", "Backend", "LmdbBackend", "acquire_lmdb", "SPACES"]

T = TypeVar("T")

#: The keyspaces every backend provides.
SPACES = (
    "meta",       # settings and counters
    "entries",    # entry id -> JSON record
    "manifests",  # entry id -> packed chunk list with cumulative offsets
    "chunks",     # chunk key -> zstd frame
    "refs",       # chunk key -> reference count and sizes
    "by_seq",     # creation sequence + id -> b""
    "by_scope",   # session, turn, sequence, id -> b""
    "expiry",     # expires_at + id -> b""
    "names",      # session, name -> id
    "digests",    # size + sha256 + id -> b"": finds an identical entry to share
    "pending",    # id + batch -> chunk keys of a put still in progress
    "notes",      # notepad heads and versions
)


class ReadTxn(Protocol):
    """A consistent read-only view of the store."""

    def get(self, space: str, key: bytes) -> bytes | None:
        """Return the value under ``key`` in ``space``, or None."""
        ...

    def scan(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` for ``start <= key < stop`` in key order (or reversed)."""
        ...


class WriteTxn(ReadTxn, Protocol):
    """A read-write transaction; its changes become visible together on commit."""

    def put(self, space: str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key`` in ``space``, replacing any old value."""
        ...

    def delete(self, space: str, key: bytes) -> bool:
        """Remove ``key`` from ``space``; return whether it existed."""
        ...


class Backend(Protocol):
    """What blobpad needs from a storage engine."""

    path: str

    def read(self) -> Iterator[ReadTxn]:  # used as a context manager
        """Open a read transaction (a context manager yielding a :class:`ReadTxn`)."""
        ...

    def write(self, fn: Callable[[WriteTxn], T], *, frees: bool = False) -> T:
        """Run ``fn`` in a write transaction and commit; return its result.

        ``frees`` marks a transaction that makes room (delete, gc, rollback): it must
        succeed even when the store is full.
        """
        ...

    def compact(self) -> tuple[int, int]:
        """Give unused space back to the file system; return (bytes before, bytes after)."""
        ...

    def size_on_disk(self) -> int:
        """Return the bytes the store occupies on disk."""
        ...

    def close(self) -> None:
        """Release the files; the backend cannot be used afterwards."""
        ...


class _SharedLock:
    """Many holders of the shared side, or one of the exclusive side.

    LMDB may only change its map size while the process has no transaction open,
    so every transaction holds the shared side and a resize takes the exclusive one.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    def acquire_shared(self) -> None:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._shared += 1

    def release_shared(self) -> None:
        with self._cond:
            self._shared -= 1
            if not self._shared:
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._shared:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class _LmdbTxn:
    """A :class:`WriteTxn` (or read-only view) over one ``lmdb.Transaction``."""

    __slots__ = ("_txn", "_dbs")

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, lmdb._Database]) -> None:
        self._txn = txn
        self._dbs = dbs

    def get(self, space: str, key: bytes) -> bytes | None:
        return self._txn.get(key, db=self._dbs[space])

    def scan(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        with self._txn.cursor(self._dbs[space]) as cur:
            if not reverse:
                if not cur.set_range(start):
                    return
                for key, value in cur:
                    if stop is not None and key >= stop:
                        return
                    yield key, value
            else:
                if stop is None:
                    found = cur.last()
                else:
                    found = cur.set_range(stop)
                    found = cur.prev() if found else cur.last()
                while found:
                    key = cur.key()
                    if key < start:
                        return
                    yield key, cur.value()
                    found = cur.prev()

    def put(self, space: str, key: bytes, value: bytes) -> None:
        self._txn.put(key, value, db=self._dbs[space])

    def delete(self, space: str, key: bytes) -> bool:
        return bool(self._txn.delete(key, db=self._dbs[space]))


_REGISTRY: dict[str, tuple[LmdbBackend, int]] = {}
_REGISTRY_LOCK = threading.Lock()

#: errno values of a write that failed because the disk is full (LMDB reports a short
#: write as EIO)
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
_DISK_FULL_TEXT = ("No space left", "Input/output error", "Disk quota exceeded", "File too large")


#: the files LMDB and blobpad keep in a store directory
STORE_FILES = ("data.mdb", "lock.mdb", "blobpad.lock")
#: modes of the store directory and of its files, whatever the umask: only the owner can
#: read a session's logs and notepads
DIR_MODE = 0o700
FILE_MODE = 0o600


def _set_mode(path: str, mode: int) -> None:
    """Give ``path`` exactly ``mode``; warn if it stays open to other users because chmod failed."""
    try:
        current = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:  # not there (yet): nothing to do
        return
    if current == mode:
        return
    try:
        os.chmod(path, mode)
    except OSError as exc:
        if current & 0o077:
            warnings.warn(
                f"{path} has mode {current:o}, so other local users may read it, and blobpad cannot change it to "
                f"{mode:o} ({exc.strerror or exc}); its owner can run: chmod {mode:o} {path}",
                UserWarning, stacklevel=4,
            )


def make_private(path: str) -> None:
    """Give the store directory mode 0700 and its files 0600, whatever the umask.

    The directory is changed only while it holds nothing but a store's files (a store
    created in a directory with other files, such as a home directory, leaves that
    directory as it is; the files are private all the same).
    """
    for name in STORE_FILES:
        _set_mode(os.path.join(path, name), FILE_MODE)
    try:
        with os.scandir(path) as entries:
            only_store = all(e.name in STORE_FILES or e.name.startswith(".compact-") for e in entries)
    except OSError:
        return
    if only_store:
        _set_mode(path, DIR_MODE)


def _make_dir(path: str) -> None:
    """Create the store directory (mode 0700), or raise a BlobpadError saying why it cannot be one."""
    try:
        os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    except FileExistsError:
        raise InvalidArgument(
            f"{path} is a file, not a directory: a blobpad store is a directory; "
            "pass the path of a new or existing store directory"
        ) from None
    except NotADirectoryError:
        raise InvalidArgument(
            f"{path} cannot be a store directory: part of the path is a file; pass another path"
        ) from None
    except OSError as exc:
        raise BlobpadError(f"cannot create the store directory {path}: {exc.strerror or exc}") from None
    if not os.path.isdir(path):  # pragma: no cover - raced with another process
        raise InvalidArgument(f"{path} is not a directory; pass the path of a store directory")
    make_private(path)  # before LMDB creates its files in it: a umask like 0277 would leave it unwritable


def _disk_full(exc: lmdb.Error) -> bool:
    code = getattr(exc, "errno", None)
    return code in _DISK_FULL or any(text in str(exc) for text in _DISK_FULL_TEXT)


def acquire_lmdb(path: str, **options: Any) -> LmdbBackend:
    """Return this process's backend for ``path``, opening it on first use.

    LMDB allows one environment per file per process, so every Store on the same
    directory shares one backend (the first opener's map options apply); each
    acquire must be paired with :meth:`LmdbBackend.close`.
    """
    path = os.fspath(path)
    _make_dir(path)
    key = os.path.realpath(path)
    with _REGISTRY_LOCK:
        held = _REGISTRY.get(key)
        if held is not None and not held[0]._closed:
            _REGISTRY[key] = (held[0], held[1] + 1)
            return held[0]
        backend = LmdbBackend(key, **options)
        _REGISTRY[key] = (backend, 1)
        return backend


class LmdbBackend:
    """The LMDB backend: one environment per process, a map that grows by itself.

    Parameters:
        path: directory holding ``data.mdb`` and ``lock.mdb`` (created if missing).
        map_size: the initial map size in bytes.  The map doubles whenever a write
            needs more room, up to ``max_map_size``; other processes adopt the new
            size on their next transaction.
        max_map_size: the ceiling of the map; a write that needs more raises
            :class:`~blobpad.StoreFull`.  Transactions that free space (delete, gc,
            rollback) may grow the map a little past it (:meth:`reserve` bytes), so
            that a full store can always be emptied; the map is brought back to the
            ceiling (or as close as the data allows) afterwards.
        max_readers: reader slots in the lock file (one per concurrent read
            transaction across all processes).
        sync: flush to disk on every commit, so that an acknowledged write survives
            a crash of the machine, not only of the process.
    """

    def __init__(
        self,
        path: str,
        *,
        map_size: int = 64 << 20,
        max_map_size: int = 1 << 40,
        max_readers: int = 1024,
        sync: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.max_map_size = max_map_size
        self._options = dict(map_size=map_size, max_readers=max_readers, sync=sync)
        self._lock = _SharedLock()
        self._env: lmdb.Environment | None = None
        self._dbs: dict[str, lmdb._Database] = {}
        self._pid = -1
        self._closed = False
        self._lockfile: int | None = None
        self._open()

    # -- environment lifecycle ------------------------------------------------------

    def _open(self) -> None:
        _make_dir(self.path)
        data = os.path.join(self.path, "data.mdb")
        if os.path.exists(data) and os.path.getsize(data) == 0:
            raise CorruptData(f"{data} is empty: it is not a blobpad store; move it away or open another path")
        # The shared lock first: a compact() in another process holds the exclusive side
        # while it swaps data.mdb, and a process that mapped the old file meanwhile would
        # write into a file that is about to be replaced.  So wait for it before mapping.
        self._hold_open_lock()
        try:
            self._open_env(data)
            make_private(self.path)  # the files LMDB just created (the umask applies), or an older store's
        except BaseException:
            if self._lockfile is not None:  # not open after all: let a compact() elsewhere proceed
                os.close(self._lockfile)
                self._lockfile = None
            raise

    def _open_env(self, data: str) -> None:
        opts = self._options
        try:
            env = lmdb.open(
                self.path,
                map_size=opts["map_size"],
                max_dbs=len(SPACES) + 2,
                max_readers=opts["max_readers"],
                sync=opts["sync"],
                metasync=opts["sync"],
                readahead=False,
                lock=True,
                subdir=True,
                mode=FILE_MODE,
            )
        except lmdb.InvalidError as exc:
            raise CorruptData(
                f"{self.path} is not an LMDB store ({exc}); point blobpad at an empty or blobpad directory"
            ) from exc
        except lmdb.Error as exc:
            raise CorruptData(f"cannot open the store at {self.path}: {exc}") from exc
        try:
            self._check_file_size(env, data)
        except BaseException:
            env.close()
            raise
        try:
            env.reader_check()  # clear slots left by processes that died
            self._env = env
            self._pid = os.getpid()
            self._dbs = {}
            for name in SPACES:
                self._dbs[name] = self._retry_resized(lambda n=name: env.open_db(n.encode(), create=True))
        except lmdb.Error as exc:
            env.close()
            self._env = None
            raise CorruptData(f"the store at {self.path} is damaged and cannot be opened: {exc}") from exc

    @staticmethod
    def _check_file_size(env: lmdb.Environment, data: str) -> None:
        """Make sure every page up to the last transaction's last page is backed by the file.

        Pages past the end of the file are mapped but not backed: touching one kills
        the process with SIGBUS.  A healthy file can be shorter than that last page
        (pages a transaction allocated and freed again are counted but never
        written), so a short file is extended with zero pages, under LMDB's writer
        lock so that no other process extends it meanwhile.  A file that was really
        truncated then reads as damaged pages (``CorruptData``, named by verify())
        instead of crashing.  Only the two meta pages have been read so far (with
        ``read``, not through the map), so this comes before any other page is
        touched; every later transaction only adds pages that its writer wrote into
        the file before committing.
        """
        psize = env.stat()["psize"]

        def short() -> tuple[int, int]:
            needed = (env.info()["last_pgno"] + 1) * psize
            try:
                return os.path.getsize(data), needed
            except OSError as exc:
                raise CorruptData(f"cannot read the size of {data}: {exc.strerror or exc}") from None

        size, needed = short()
        if size >= needed:
            return
        try:
            with env.begin(write=True):  # LMDB's writer lock: nobody else extends the file now
                size, needed = short()
                if size < needed:
                    os.truncate(data, needed)  # only ever grows: size < needed
        except (lmdb.Error, OSError) as exc:
            raise CorruptData(
                f"{data} holds {size} bytes but its last transaction uses {needed}, and it cannot be extended "
                f"({exc}); the store may be truncated: open it where it is writable, or restore it from a backup"
            ) from None

    def _hold_open_lock(self) -> None:
        """Hold a shared lock on ``blobpad.lock`` while the store is open in this process.

        compact() needs the only open handle; it asks for the exclusive side.
        """
        if fcntl is None:
            return
        lock_path = os.path.join(self.path, "blobpad.lock")
        try:
            if self._lockfile is None or self._pid != os.getpid():
                self._lockfile = os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE)
            fcntl.flock(self._lockfile, fcntl.LOCK_SH)
        except OSError as exc:
            raise BlobpadError(
                f"cannot lock {lock_path}: {exc.strerror or exc}; the store's directory must be writable"
            ) from None

    def _retry_resized(self, fn: Callable[[], T]) -> T:
        for _ in range(8):
            try:
                return fn()
            except lmdb.MapResizedError:
                self._adopt_size()
        return fn()

    def _environment(self) -> lmdb.Environment:
        if self._closed:
            raise BlobpadError("the store is closed; open it again with blobpad.open()")
        if self._pid != os.getpid():
            # A forked child must not use its parent's environment: open its own.
            with self._lock.exclusive():
                if self._pid != os.getpid():
                    if self._env is not None:
                        # The parent's environment: lmdb refuses to open the same files
                        # again in this process until it is let go.  Closing it in the
                        # child leaves the parent's untouched (lmdb handles the fork).
                        with contextlib.suppress(lmdb.Error):
                            self._env.close()
                        self._env = None
                    self._open()
        assert self._env is not None
        return self._env

    def _adopt_size(self) -> None:
        with self._lock.exclusive():
            assert self._env is not None
            self._env.set_mapsize(0)

    def reserve(self) -> int:
        """The bytes a transaction that frees space may grow the map past ``max_map_size``."""
        return min(max(1 << 20, self.max_map_size // 16), 64 << 20)

    def _grow(self, seen: int, *, frees: bool = False) -> bool:
        """Double the map (up to the ceiling); return whether it went past ``max_map_size``."""
        with self._lock.exclusive():
            assert self._env is not None
            current = self._env.info()["map_size"]
            if current != seen:
                return False  # another thread already grew it
            limit = self.max_map_size + (self.reserve() if frees else 0)
            if current >= limit:
                if frees:
                    raise StoreFull(
                        f"the store is full past its map-size ceiling of {self.max_map_size} bytes and even "
                        "freeing space needs more", hint=HINT_MAP_CEILING_FULL,
                    )
                raise StoreFull(
                    f"the store reached its map-size ceiling of {self.max_map_size} bytes", hint=HINT_MAP_CEILING,
                )
            new = min(current * 2, limit)
            self._env.set_mapsize(new)
            return new > self.max_map_size

    def _back_to_ceiling(self) -> None:
        """Shrink the map to ``max_map_size`` after a freeing write grew it past.

        LMDB keeps it at least as large as the pages in use, so only the unused part
        of the reserve is given back; puts then cannot eat the reserve.
        """
        with self._lock.exclusive():
            assert self._env is not None
            if self._env.info()["map_size"] > self.max_map_size:
                self._env.set_mapsize(self.max_map_size)

    # -- transactions ---------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        """Open a read transaction; see :class:`ReadTxn`."""
        env = self._environment()
        self._lock.acquire_shared()
        try:
            for _attempt in range(8):
                try:
                    txn = env.begin(buffers=False)
                    break
                except lmdb.MapResizedError:
                    self._lock.release_shared()
                    try:
                        self._adopt_size()
                    finally:
                        self._lock.acquire_shared()
            else:  # pragma: no cover - another process resizing in a tight loop
                txn = env.begin(buffers=False)
            try:
                yield _LmdbTxn(txn, self._dbs)
            except (lmdb.CorruptedError, lmdb.PageNotFoundError) as exc:
                raise CorruptData(f"the store file is damaged: {exc}", hint=HINT_VERIFY) from exc
            finally:
                txn.abort()
        finally:
            self._lock.release_shared()

    def write(self, fn: Callable[[WriteTxn], T], *, frees: bool = False) -> T:
        """Run ``fn`` in one write transaction, growing the map and retrying as needed.

        ``frees`` marks a transaction that makes room (delete, gc, rollback): it may
        grow the map up to :meth:`reserve` bytes past ``max_map_size``.
        """
        env = self._environment()
        past_ceiling = False
        try:
            while True:
                self._lock.acquire_shared()
                seen = -1
                try:
                    seen = env.info()["map_size"]
                    with env.begin(write=True) as txn:
                        return fn(_LmdbTxn(txn, self._dbs))
                except lmdb.MapFullError:
                    pass
                except lmdb.MapResizedError:
                    seen = -1
                except (lmdb.CorruptedError, lmdb.PageNotFoundError) as exc:
                    raise CorruptData(f"the store file is damaged: {exc}", hint=HINT_VERIFY) from exc
                except lmdb.Error as exc:
                    if _disk_full(exc):
                        raise StoreFull(
                            f"the disk holding {self.path} is full (or failing): {exc}", hint=HINT_DISK_FULL,
                        ) from None
                    raise
                finally:
                    self._lock.release_shared()
                if seen < 0:
                    self._adopt_size()
                else:
                    past_ceiling = self._grow(seen, frees=frees) or past_ceiling
        finally:
            if past_ceiling:
                self._back_to_ceiling()

    # -- maintenance ----------------------------------------------------------------

    def map_size(self) -> int:
        """Return the current map size in bytes."""
        return int(self._environment().info()["map_size"])

    def size_on_disk(self) -> int:
        return os.path.getsize(os.path.join(self.path, "data.mdb"))

    def compact(self) -> tuple[int, int]:
        """Rewrite the data file without free pages (LMDB's compacting copy).

        Needs the store to be open in this process only: other processes keep the old
        file mapped, so compact() refuses (raises BlobpadError) while they hold it.
        """
        env = self._environment()
        before = self.size_on_disk()
        tmp = os.path.join(self.path, f".compact-{os.getpid()}")
        with self._lock.exclusive():
            if fcntl is not None and self._lockfile is not None:
                try:
                    fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise BlobpadError(
                        "compacting needs the store to itself: another process has it open", hint=HINT_COMPACT_ALONE,
                    ) from None
            try:
                os.makedirs(tmp, mode=DIR_MODE, exist_ok=True)
                env.copy(tmp, compact=True)
                os.chmod(os.path.join(tmp, "data.mdb"), FILE_MODE)  # LMDB writes the copy 0666 minus the umask
                env.close()
                self._env = None
                os.replace(os.path.join(tmp, "data.mdb"), os.path.join(self.path, "data.mdb"))
                os.rmdir(tmp)
            finally:
                if self._env is None:
                    self._open()
                elif fcntl is not None and self._lockfile is not None:
                    fcntl.flock(self._lockfile, fcntl.LOCK_SH)
        return before, self.size_on_disk()

    def close(self) -> None:
        """Release one holder; the environment closes when the last one lets go."""
        with _REGISTRY_LOCK:
            held = _REGISTRY.get(self.path)
            if held is not None and held[0] is self:
                if held[1] > 1:
                    _REGISTRY[self.path] = (self, held[1] - 1)
                    return
                del _REGISTRY[self.path]
        if self._closed:
            return
        self._closed = True
        if self._env is not None and self._pid == os.getpid():
            self._env.close()
        self._env = None
        if self._lockfile is not None and self._pid == os.getpid():
            os.close(self._lockfile)
        self._lockfile = None
