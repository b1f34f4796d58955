"""The LMDB engine: one machine, many processes, the default.

Everything that speaks to LMDB lives here.  It implements the contract of
:mod:`blobpad.engine.base` with one LMDB environment per store directory and
process, one named database per keyspace, and a map that grows by itself:

* ``read()`` is an LMDB read transaction (a snapshot that never blocks the writer);
* ``write(fn)`` runs ``fn`` in one LMDB write transaction and commits it, retrying
  the whole function when the map had to grow; ``write(fn, frees=True)`` may use a
  small reserve past ``max_map_size``, so that a full store can always be emptied.

Values arrive sealed (the checks live above the engines, in ``base.Checked``); here
every key and value length is checked against the pages in use and the keyspace's
limit before a byte is copied out of the map, the file's header is checked before
LMDB opens it, and every LMDB error is translated into a blobpad error.

Locking rules
-------------
A hang is worse than any error, so every lock and every wait in blobpad follows
these rules (the stress test, ``tests/test_stress.py``, runs them under load).

The locks, outermost first (a thread takes them only in this order):

1. ``blobpad.lock`` (``flock``, across processes): held shared while a process has
   the store open; compact() asks for the exclusive side without waiting.
2. The resize lock (:class:`_SharedLock`, one per process and store): every
   transaction, read or write, holds its shared side from begin to end; changing
   the map size (growth, adopting another process's size, shrinking back to the
   ceiling), compact() and a forked child's reopen hold the exclusive side.  A
   waiting exclusive request stops new shared holders (a growth is never starved),
   so a thread holding the shared side must never wait for anything that itself
   needs the shared side: such a wait would hang at the next map growth.
3. LMDB's writer mutex (in ``lock.mdb``, across processes): taken inside a write
   transaction, with the shared side held, and released before a growth.
4. Leaf locks: the chunk cache's, the manifest cache's, the worker pool's creation
   lock, this module's registry lock.  Held only around a dict or counter update,
   never while waiting for anything.

What follows from them:

* A thread holds at most one transaction at a time: no read or write inside
  another read or write, and no transaction held across a ``yield`` to code that
  may open one (a generator hands out data, not an open transaction).  Opening a
  nested one raises :class:`~blobpad.BlobpadError` at once instead of hanging.
* ``write(fn)``'s ``fn`` runs with the shared side and LMDB's writer mutex held
  (the latter blocks every other process's writes): it only touches ``txn`` and
  computes; it never waits for pool work, another thread, a lock or caller code.
* The store's worker pool (``Codec.executor``, shared by puts, count() and grep)
  runs pure computation on bytes read beforehand: hash, count, compress,
  decompress, compare.  A pool task never opens a transaction, never takes the
  resize lock or LMDB's writer mutex, never submits to the pool nor waits on a
  future, and calls no caller code; it may take leaf locks.  So pool work always
  finishes, whatever other threads hold.
* Hence a thread may wait for pool work while it holds a read transaction (count()
  and grep decompress ahead on the pool inside one snapshot): the work it waits
  for needs nothing the thread, or a growth queued behind it, holds.  A put looks
  its chunks up in a short read transaction of its own thread before it hands them
  to the pool, and waits for the pool holding nothing.
"""

from __future__ import annotations

import bisect
import concurrent.futures.thread  # noqa: F401 - its fork hooks must be registered before ours
import contextlib
import errno
import itertools
import os
import shutil
import stat
import struct
import threading
import time
import warnings

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import lmdb

from ..errors import (
    HINT_COMPACT_ALONE,
    HINT_DISK_FULL,
    HINT_MAP_CEILING,
    HINT_MAP_CEILING_FULL,
    HINT_VERIFY,
    BlobpadError,
    CorruptData,
    InvalidArgument,
    StoreFull,
    check_bool,
    check_int,
)
from ..forks import pid as current_pid
from . import lmdbpages
from .base import (
    CLOSED,
    LATER_SPACES,
    MAX_KEY,
    NESTED,
    SPACES,
    VALUE_LIMITS,
    Capabilities,
    RawReadTxn,
    RawWriteTxn,
    damaged_length,
)
from .targets import shown_target

__all__ = ["LmdbEngine", "acquire_lmdb", "make_private", "STORE_FILES", "LMDB_OPTIONS", "DURABILITY"]

T = TypeVar("T")


#: how long an empty data.mdb may take to get its first pages: another process creating the store
#: at the same moment has made the file and is writing them
_CREATE_SECONDS = 2.0


def _stays_empty(data: str) -> bool:
    """Whether ``data`` exists and is still empty after :data:`_CREATE_SECONDS` (bounded polling):
    a file a store's creation left empty, or not a store; one being created fills at once."""
    deadline = time.monotonic() + _CREATE_SECONDS
    while os.path.exists(data) and os.path.getsize(data) == 0:
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.01)
    return False


class _SharedLock:
    """Many holders of the shared side, or one of the exclusive side.

    LMDB may only change its map size while the process has no transaction open,
    so every transaction holds the shared side and a resize takes the exclusive one.
    A waiting exclusive request stops new shared holders, so a thread that asked
    for either side again while holding one would wait for itself forever: that
    raises BlobpadError instead (see "Locking rules" in the module docstring).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shared = 0
        self.pausing = 0  # aborts in progress: reads wait before their next LMDB call (see ops_paused)
        self._exclusive = False
        self._waiting = 0
        self._mine = threading.local()  # .held: whether this thread holds either side

    def _check_free(self) -> None:
        if getattr(self._mine, "held", False):
            raise BlobpadError(NESTED)

    def acquire_shared(self) -> None:
        self._check_free()
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._shared += 1
        self._mine.held = True

    def release_shared(self) -> None:
        self._mine.held = False
        with self._cond:
            self._shared -= 1
            if not self._shared:
                self._cond.notify_all()

    @contextmanager
    def ops_paused(self) -> Iterator[None]:
        """While the body runs, reads of this process make no new LMDB call: each waits in
        :meth:`wait_for_ops` before its next one (the calls in flight end on their own)."""
        with self._cond:
            self.pausing += 1
        try:
            yield
        finally:
            with self._cond:
                self.pausing -= 1
                self._cond.notify_all()

    def wait_for_ops(self) -> None:
        """Wait while an abort pauses reads (see :meth:`ops_paused`); callers check ``pausing`` first."""
        with self._cond:
            while self.pausing:
                self._cond.wait()

    def held(self) -> bool:
        """Whether the calling thread holds either side."""
        return bool(getattr(self._mine, "held", False))

    def acquire_exclusive(self) -> None:
        self._check_free()
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        self._mine.held = True

    def release_exclusive(self) -> None:
        self._mine.held = False
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        self.acquire_exclusive()
        try:
            yield
        finally:
            self.release_exclusive()

def _copy_key(space: str, view: Any) -> bytes:
    if len(view) > MAX_KEY:
        raise damaged_length(space, None, len(view))
    return bytes(view)


def _overlong(space: str, view: Any, limit: int) -> bool:
    """Whether a value's length is damage: past its keyspace's limit or the pages in use."""
    return len(view) > min(limit, VALUE_LIMITS[space])


def _copy_value(space: str, key: bytes, view: Any, limit: int) -> bytes:
    if _overlong(space, view, limit):
        raise damaged_length(space, key, len(view))
    return bytes(view)


def _scanned_value(space: str, view: Any, limit: int) -> bytes:
    """A value met by a scan, copied, or ``b""`` when its length is damage (:func:`_overlong`):
    no seal fits in it, so the checked scan above reports the key as damaged (to ``on_damage``,
    which lets gc() and delete go on past it) instead of the scan ending there."""
    return b"" if _overlong(space, view, limit) else bytes(view)


_META = struct.Struct("<QHHHHIIQQ")  # a meta page: pgno, pad, flags, lower, upper, magic, version, address, mapsize
_DB = struct.Struct("<IHHQQQQQ")  # a tree's record: pad (page size for the free tree), flags, depth, counts, root
_P_META, _MDB_MAGIC, _INTEGERKEY, _NO_PAGE = 0x08, 0xBEEFC0DE, 0x08, (1 << 64) - 1
_P_BRANCH, _P_LEAF, _P_OVERFLOW = 0x01, 0x02, 0x04


def _check_header(data: str) -> None:
    """Check the two meta pages of ``data.mdb`` before LMDB reads them.

    LMDB trusts its meta pages: a damaged flag there fails one of its assertions
    (the process aborts), a damaged transaction id makes it take the older meta and
    so an older state of the store.  The pages LMDB writes in turn hold
    consecutive transaction ids, its magic and version, the page size and the flags of
    the two built-in trees; anything else is damage (but in a page's number, which LMDB
    neither reads nor writes again).

    One exception: damage in the *older* of the two, where LMDB reads only its flags,
    magic, version and transaction id (it takes the newer one's state, and its next
    commit writes its meta over the older).  A page damaged elsewhere whose flags, magic
    and version are sound and whose transaction id is one less than the sound page's is
    that older page: the store opens on the sound one (where a store was unopenable
    over one bit there).  A page whose id is not exactly one less is not trusted to be
    the older: CorruptData, as for any damage to the newer page.

    The roots of the two trees the newer page names are read too: each must hold its own
    number (LMDB writes it in every page) and be a leaf where the tree's depth is 1, a
    branch where it is more, so a damaged root pointer or depth that names a page of
    another kind is found here, not by LMDB at the next commit (an error, or one of its
    assertions, which abort the process).  A writer in another process may commit
    meanwhile and reuse those pages: a root found wrong is believed only once the meta
    pages, read again, still name it.
    """
    try:
        with open(data, "rb") as fh:
            for _attempt in range(_HEADER_TRIES):
                head = fh.read(2 * 65536)
                if len(head) < 2 * 4096:
                    return  # empty or foreign: LMDB's own open says so
                roots = _sound_header(data, head)
                if not roots or _roots_sound(fh, head, roots):
                    return
                fh.seek(0)
                metas = 2 * _DB.unpack_from(head, 40)[0]
                if fh.read(metas) == head[:metas]:  # the meta pages as they were, so no commit since: damage
                    raise CorruptData(f"the header (meta pages) of {data} names a tree root that is not one "
                                      "(damaged)", hint=HINT_VERIFY)
                fh.seek(0)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _os_error(exc, os.path.dirname(data), f"cannot read {data}") from None


#: times the header check reads the meta pages again when another process committed meanwhile
_HEADER_TRIES = 5


def _roots_sound(fh: Any, head: bytes, roots: list[tuple[int, int]]) -> bool:
    """Whether each of ``roots`` (page number, depth of its tree) is a page holding its own
    number, a leaf for a tree of depth 1 and a branch for a deeper one (a page past the end
    of the file is not judged: a file can end before its last page)."""
    psize = _DB.unpack_from(head, 40)[0]
    for root, depth in roots:
        fh.seek(root * psize)
        page = fh.read(12)
        if len(page) < 12:
            continue
        pgno, _pad, flags = struct.unpack_from("<QHH", page)
        kind = flags & (_P_BRANCH | _P_LEAF | _P_OVERFLOW | _P_META)  # LMDB's in-memory bits aside
        if pgno != root or kind != (_P_LEAF if depth == 1 else _P_BRANCH):
            return False
    return True


def _sound_header(data: str, head: bytes) -> list[tuple[int, int]]:
    """Check the meta pages in ``head`` (see :func:`_check_header`); return the tree roots the
    page LMDB reads names, with their trees' depths (none for a store never written)."""
    psize = _DB.unpack_from(head, 40)[0]
    damaged = not (512 <= psize <= 65536 and psize & (psize - 1) == 0 and len(head) >= 2 * psize)
    if damaged:
        raise CorruptData(f"the header (meta pages) of {data} is damaged", hint=HINT_VERIFY)
    sound: list[bool] = []
    txnids: list[int] = []
    read_by_lmdb: list[bool] = []
    roots: list[list[tuple[int, int]]] = []
    for page in range(2):
        at = page * psize
        _pgno, _pad, flags, _lower, _upper, magic, version, _addr, mapsize = _META.unpack_from(head, at)
        free = _DB.unpack_from(head, at + 40)
        main = _DB.unpack_from(head, at + 40 + _DB.size)
        last_pg, txnid = struct.unpack_from("<QQ", head, at + 40 + 2 * _DB.size)
        read_by_lmdb.append(flags == _P_META and magic == _MDB_MAGIC and version == 1)
        # (not its page number, which LMDB neither reads nor writes again: a commit rewrites a meta
        # page from its map size on, so damage before that, to what LMDB does not read, stays)
        sound.append(
            read_by_lmdb[-1] and free[0] == psize
            and free[1] == _INTEGERKEY and main[1] == 0 and free[2] <= 32 and main[2] <= 32
            and all(db[7] == _NO_PAGE or 2 <= db[7] <= last_pg for db in (free, main)) and mapsize >= psize
        )
        txnids.append(txnid)
        roots.append([(db[7], db[2]) for db in (free, main) if db[7] != _NO_PAGE])
    if all(sound) and (abs(txnids[0] - txnids[1]) == 1 or txnids == [0, 0]):  # [0, 0]: created, never written
        return roots[txnids[1] > txnids[0]]
    if sound.count(True) == 1:
        good = sound.index(True)
        older = 1 - good
        if read_by_lmdb[older] and txnids[older] + 1 == txnids[good]:
            return roots[good]  # damage in the older page, which LMDB reads past and its next commit rewrites
    raise CorruptData(f"the header (meta pages) of {data} is damaged", hint=HINT_VERIFY)


class _EngineFailure(BlobpadError):
    """An LMDB error none of the known kinds explains (at open: a damaged header)."""


def translate(exc: lmdb.Error, path: str) -> BlobpadError:
    """The blobpad error that says what an LMDB error means for the store at ``path``."""
    if isinstance(
        exc,
        (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError, lmdb.BadRslotError, lmdb.BadDbiError,
         lmdb.BadTxnError, lmdb.PageFullError, lmdb.IncompatibleError, lmdb.CursorFullError),
    ):  # a cursor deeper than LMDB's limit (32 levels) only follows pages that point back: damage
        return CorruptData(f"the store file {path}/data.mdb is damaged: {exc}", hint=HINT_VERIFY)
    if isinstance(exc, lmdb.ReadersFullError) or "MDB_READERS_FULL" in str(exc):
        return BlobpadError(
            f"too many concurrent readers of the store at {path} (every reader slot is taken); "
            "retry when fewer reads run at once, or open the store with a larger max_readers"
        )
    if isinstance(exc, lmdb.BadValsizeError):
        return InvalidArgument(f"a key or value is too large for the store: {exc}")
    if _disk_full(exc):
        return StoreFull(f"the disk holding {path} is full (or failing): {exc}", hint=HINT_DISK_FULL)
    code = getattr(exc, "errno", None)
    if code in (errno.EACCES, errno.EPERM, errno.EROFS) or "Permission denied" in str(exc):
        return BlobpadError(f"permission denied on the store at {path}: {exc}; open a store you own, or fix its permissions")
    return _EngineFailure(f"the storage engine failed on the store at {path}: {exc}")


class _Ended:
    """What a read view holds once its transaction ended: every use is an error."""

    def __getattr__(self, name: str) -> Any:
        raise BlobpadError("this store transaction has ended; read inside the `with` block that opened it")


_ENDED: Any = _Ended()


class _LmdbTxn:
    """A :class:`~blobpad.engine.base.RawWriteTxn` (or read-only view) over one ``lmdb.Transaction``.

    Keys and values read are copied out of the map only after their lengths are
    checked; every LMDB error is translated into a blobpad error here.
    """

    __slots__ = ("_txn", "_dbs", "_path", "_limit", "_lock")

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, lmdb._Database], path: str, limit: int,
                 lock: _SharedLock) -> None:
        self._txn = txn
        self._dbs = dbs
        self._path = path
        self._limit = limit  # no value can be longer than the pages in use (see LmdbEngine.read)
        self._lock = lock  # every LMDB call waits first while an abort pauses them (see LmdbEngine._abort)

    def get(self, space: str, key: bytes) -> bytes | None:
        if self._lock.pausing:
            self._lock.wait_for_ops()
        try:
            view = self._txn.get(key, db=self._dbs[space])
            return None if view is None else _copy_value(space, key, view, self._limit)
        except lmdb.Error as exc:
            raise translate(exc, self._path) from None

    def txn_id(self) -> int:
        """LMDB's id of this transaction (the snapshot's)."""
        return int(self._txn.id())

    def count(self, space: str) -> int | None:
        """How many records LMDB's own bookkeeping says ``space`` holds."""
        if self._lock.pausing:
            self._lock.wait_for_ops()
        try:
            return int(self._txn.stat(self._dbs[space])["entries"])
        except lmdb.Error as exc:
            raise translate(exc, self._path) from None

    def scan(self, space: str, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        try:
            yield from self._raw_scan(space, start, stop, reverse)
        except lmdb.Error as exc:
            raise translate(exc, self._path) from None

    def _raw_scan(self, space: str, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        # Views into the map (buffers=True) are copied only after their lengths are
        # checked (_copy_key, _copy_value), and before the caller can write.
        lock = self._lock
        if lock.pausing:
            lock.wait_for_ops()
        with self._txn.cursor(self._dbs[space]) as cur:
            if not reverse:
                found = cur.set_range(start)
                while found:
                    key = _copy_key(space, cur.key())
                    if stop is not None and key >= stop:
                        return
                    yield key, _scanned_value(space, cur.value(), self._limit)
                    if lock.pausing:
                        lock.wait_for_ops()
                    found = cur.next()
            else:
                if stop is None:
                    found = cur.last()
                else:
                    found = cur.set_range(stop)
                    found = cur.prev() if found else cur.last()
                while found:
                    key = _copy_key(space, cur.key())
                    if key < start:
                        return
                    yield key, _scanned_value(space, cur.value(), self._limit)
                    if lock.pausing:
                        lock.wait_for_ops()
                    found = cur.prev()

    def put(self, space: str, key: bytes, stored: bytes) -> None:
        try:
            self._txn.put(key, stored, db=self._dbs[space])
        except (lmdb.MapFullError, lmdb.MapResizedError):
            raise  # handled by LmdbEngine.write: the map grows and the transaction is retried
        except lmdb.Error as exc:
            raise translate(exc, self._path) from None

    def delete(self, space: str, key: bytes) -> bool:
        try:
            return bool(self._txn.delete(key, db=self._dbs[space]))
        except (lmdb.MapFullError, lmdb.MapResizedError):
            raise
        except lmdb.Error as exc:
            raise translate(exc, self._path) from None


def _compacted_copy(env: lmdb.Environment, path: str) -> None:
    """LMDB's compacting copy of ``env``, written at ``path``: private from its first byte
    (LMDB's own ``copy`` creates it 0666 minus the umask, readable by others until it is
    chmod-ed, and left so by a kill meanwhile) and on disk before it takes the store's
    place (LMDB does not flush a copy: a power loss after the swap could leave a file
    without its pages)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # left by an earlier attempt of this process
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        env.copyfd(fd, compact=True)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_directory(path: str) -> None:
    """Flush a directory's entries (a rename in it) to disk, where the system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # a file system or platform that cannot flush a directory
    finally:
        os.close(fd)


_REGISTRY: dict[tuple[int, int], tuple[LmdbEngine, int]] = {}
_REGISTRY_LOCK = threading.RLock()  # re-entrant: a close run by the GC inside an open must not deadlock


#: the backends whose transactions the forking thread holds stopped (see _before_fork)
_QUIESCED: list[LmdbEngine] = []
#: the backends whose transaction the forking thread was inside (see _before_fork)
_INSIDE: list[LmdbEngine] = []


def _before_fork() -> None:
    """Before ``os.fork()``: wait until this process has no transaction open, and hold it so.

    The child inherits the environment with every lmdb transaction object in it; when
    it closes that environment (to open its own, see ``_environment``), lmdb aborts
    them, and the abort of a read transaction frees its reader slot in the lock file
    that the parent shares.  A slot the parent still reads under would then protect
    nothing (the parent's pages go to the next writer), and a slot freed under a
    parent object that lives on is taken by another reader, whose protection the
    parent's object later clears.  So, with no transaction open in the parent when
    it forks, and none kept past its end (``read()`` drops each one, and the
    environment keeps no spare, see ``_open_env``), the child's close touches no slot
    of the parent's.  The wait is a map growth's (transactions are short, by the
    rules above).  A thread that forks from inside a transaction cannot wait for
    itself: that store is not held, and the child may not use it (``_environment``
    says so) rather than free the slot its parent reads under; the other stores are.
    """
    with _REGISTRY_LOCK:
        backends = sorted((b for b, _ in _REGISTRY.values() if not b._closed), key=lambda b: b.path)
    for b in backends:
        if b._lock.held():  # the forking thread's own transaction: it cannot wait for itself
            _INSIDE.append(b)
            continue
        b._lock.acquire_exclusive()
        _QUIESCED.append(b)


def _after_fork_in_parent() -> None:
    _INSIDE.clear()
    while _QUIESCED:
        _QUIESCED.pop()._lock.release_exclusive()


def _after_fork_in_child() -> None:
    """In a forked child: fresh locks for every open backend.

    The child inherits the locks in the state the parent's threads left them (held
    by ``_before_fork``, or by a thread that forked inside a transaction; a held
    registry lock would never be released), but only the forking thread exists in
    the child: without this its first transaction, which reopens the environment
    under the exclusive side, would wait forever.
    """
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.RLock()
    _QUIESCED.clear()
    for backend, _ in _REGISTRY.values():
        backend._lock = _SharedLock()
    while _INSIDE:
        _INSIDE.pop()._forked_inside = True


if hasattr(os, "register_at_fork"):
    # Registered after the thread pool's hooks (imported above), so this runs before
    # the pool's, which holds the lock that submit() takes: a reader waiting to submit
    # inside its transaction would otherwise keep _before_fork waiting forever.
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)

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


def _private_fd(fd: int) -> None:
    """Give the file open on ``fd`` mode 0600 if it is the caller's and has another mode: a
    file just created under a umask such as 0277 is read-only to its owner, and another
    open of it (LMDB's second descriptor, another process) would be refused."""
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != FILE_MODE and st.st_uid == os.geteuid():
            os.fchmod(fd, FILE_MODE)


def _owned_with_other_mode(path: str) -> bool:
    """Whether ``path`` is the caller's and its mode is not 0600."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != FILE_MODE


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
    """Create the store directory and any missing parent (mode 0700 each, whatever the
    umask: a parent others may write would let them swap the store for a link), or raise
    a BlobpadError saying why it cannot be one."""
    if not path:
        raise InvalidArgument("the store path is empty; pass a directory path or a URL such as memory://")
    try:
        missing: list[str] = []
        at = path  # as given, never normalised: the kernel follows a link before "..", os.path does not
        while at and not os.path.lexists(at):
            missing.append(at)
            parent = os.path.dirname(at.rstrip(os.sep))
            if parent == at:
                break
            at = parent
        for directory in reversed(missing):
            try:
                os.mkdir(directory, DIR_MODE)
            except FileExistsError:
                continue  # made by another process meanwhile (or a file: said below)
            os.chmod(directory, DIR_MODE)  # the umask applies to mkdir: 0777 would leave it unusable
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
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidArgument(
                f"{shown_target(path)}: the store path, or a name in it, is longer than the file system allows"
            ) from None
        raise _os_error(exc, path, f"cannot create the store directory {path}") from None
    if not os.path.isdir(path):  # pragma: no cover - raced with another process
        raise InvalidArgument(f"{path} is not a directory; pass the path of a store directory")
    make_private(path)  # before LMDB creates its files in it: a umask like 0277 would leave it unwritable


def _os_error(exc: OSError, path: str, what: str) -> BlobpadError:
    """The blobpad error for a failed file operation on the store at ``path``."""
    if exc.errno in _DISK_FULL:
        return StoreFull(f"{what}: the disk holding {path} is full ({exc.strerror})", hint=HINT_DISK_FULL)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return BlobpadError(f"{what}: permission denied ({exc.strerror}); open a store you may write, or fix its permissions")
    return BlobpadError(f"{what}: {exc.strerror or exc}")


def _disk_full(exc: lmdb.Error) -> bool:
    code = getattr(exc, "errno", None)
    return code in _DISK_FULL or any(text in str(exc) for text in _DISK_FULL_TEXT)


#: the options of the LMDB engine, with their defaults
LMDB_OPTIONS: dict[str, Any] = {
    "map_size": 64 << 20,
    "max_map_size": 1 << 40,
    "max_readers": 1024,
    "sync": True,
}
_MAX_MAP = 1 << 46  # largest map size: 64 TiB, inside any 64-bit address space

DURABILITY = {
    True: "sync=True: an acknowledged write survives a killed process and an operating-system crash or power loss "
          "(every commit is flushed to disk before it returns)",
    False: "sync=False: an acknowledged write survives a killed process; an operating-system crash or power loss "
           "may undo the last commits (the store stays consistent where the file system keeps the order of writes)",
}


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """The LMDB engine's options with defaults filled in; InvalidArgument on an unknown or bad one."""
    unknown = sorted(set(options) - set(LMDB_OPTIONS), key=str)
    if unknown:
        raise InvalidArgument(
            f"unknown option {str(unknown[0])[:80]!r} of the LMDB engine; its options are {', '.join(LMDB_OPTIONS)}"
        )
    out = LMDB_OPTIONS | options
    for label in ("map_size", "max_map_size"):
        check_int(label, out[label], minimum=0, maximum=_MAX_MAP)
    check_int("max_readers", out["max_readers"], minimum=1, maximum=1 << 16)
    check_bool("sync", out["sync"])
    if out["max_map_size"] < 1 << 20:
        raise InvalidArgument(f"max_map_size must be at least 1 MiB ({1 << 20} bytes), not {out['max_map_size']}")
    out["map_size"] = max(out["map_size"], 1 << 20)
    if out["map_size"] > out["max_map_size"]:
        if "map_size" in options:
            raise InvalidArgument(
                f"map_size ({out['map_size']}) is above max_map_size ({out['max_map_size']}): the map starts at "
                "map_size and never grows past max_map_size; give a map_size at most the ceiling"
            )
        out["map_size"] = out["max_map_size"]  # the default start, brought down to the ceiling asked for
    return out


def acquire_lmdb(path: str | os.PathLike[str], **options: Any) -> LmdbEngine:
    """Return this process's LMDB engine for ``path``, opening it on first use.

    LMDB allows one environment per file per process, so every Store on the same
    directory shares one engine (the first opener's map options apply); each
    acquire must be paired with :meth:`LmdbEngine.close`.  A ``sync`` given that
    differs from the open engine's is refused (InvalidArgument): the durability a
    caller asks for is never silently another.
    """
    asked_sync = options.get("sync")
    options = check_options(options)
    path = os.fspath(path)
    _make_dir(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _os_error(exc, path, f"cannot open the store directory {path}") from None
    # The directory's identity, not its name: the same store reached through a symlink,
    # a bind mount or any other path shares one environment (LMDB forbids a second).
    key = (st.st_dev, st.st_ino)
    with _REGISTRY_LOCK:
        held = _REGISTRY.get(key)
        if held is not None and not held[0]._closed:
            if asked_sync is not None and asked_sync != held[0].sync:
                raise InvalidArgument(
                    f"the store {path} is already open in this process with sync={held[0].sync}; one process "
                    f"shares one environment per store, so it cannot also have sync={asked_sync}: open it with "
                    f"sync={held[0].sync}, or close the other stores on it first"
                )
            _REGISTRY[key] = (held[0], held[1] + 1)
            return held[0]
        engine = LmdbEngine(os.path.realpath(path), **options)
        engine._registry_key = key
        _REGISTRY[key] = (engine, 1)
        return engine


class _SalvagedTxn:
    """A read snapshot whose damaged trees are never given to LMDB (verify() reads through it).

    ``trees`` holds, for each keyspace whose tree :mod:`~blobpad.engine.lmdbpages` found
    damaged, the records its sound pages hold, in key order: ``get``, ``scan`` and
    ``count`` of those keyspaces are answered from them (a cursor moving onto a damaged
    page aborts the process); every other keyspace is read through LMDB as usual."""

    __slots__ = ("_raw", "_trees")

    def __init__(self, raw: _LmdbTxn, trees: dict[str, lmdbpages.Tree]) -> None:
        self._raw = raw
        self._trees = {space: (list(t.records), [k for k, _ in t.records]) for space, t in trees.items()}

    def get(self, space: str, key: bytes) -> bytes | None:
        if space not in self._trees:
            return self._raw.get(space, key)
        records, keys = self._trees[space]
        i = bisect.bisect_left(keys, key)
        return records[i][1] if i < len(keys) and keys[i] == key else None

    def count(self, space: str) -> int | None:
        return self._raw.count(space)  # LMDB's own count (its tree record): what verify() compares

    def scan(self, space: str, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        if space not in self._trees:
            yield from self._raw.scan(space, start, stop, reverse)
            return
        records, keys = self._trees[space]
        lo = bisect.bisect_left(keys, start)
        hi = len(keys) if stop is None else bisect.bisect_left(keys, stop)
        yield from (reversed(records[lo:hi]) if reverse else records[lo:hi])


class LmdbEngine:
    """The LMDB engine: one environment per process, a map that grows by itself.

    Open it with :func:`acquire_lmdb` (one engine per directory and process).

    Parameters:
        path: directory holding ``data.mdb`` and ``lock.mdb`` (created if missing).
        map_size: the initial map size in bytes.  The map doubles whenever a write
            needs more room, up to ``max_map_size``; other processes adopt the new
            size on their next transaction.
        max_map_size: the ceiling of the map (at least 1 MiB; without a ``map_size``
            the map starts at the smaller of the two); a write that needs more raises
            :class:`~blobpad.StoreFull`.  Transactions that free space (delete, gc,
            rollback) may grow the map a little past it (:meth:`reserve` bytes), so
            that a full store can always be emptied; the map is brought back to the
            ceiling (or as close as the data allows) afterwards.
        max_readers: reader slots in the lock file (one per concurrent read
            transaction across all processes).
        sync: flush to disk on every commit (see :data:`DURABILITY`): True (the
            default), an acknowledged write survives an operating-system crash or
            power loss; False, it survives a killed process, and a machine crash may
            undo the last commits.
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
        self.target = self.path
        self.max_map_size = max_map_size
        self.capabilities = Capabilities(
            name="lmdb", persistent=True, processes=True, compaction=True, size_ceiling=True,
            durability=DURABILITY[sync],
        )
        self._options = dict(map_size=map_size, max_readers=max_readers, sync=sync)
        self._lock = _SharedLock()
        # one thread of the process in a write transaction at a time: the others wait here, not inside
        # py-lmdb (where one waiting for LMDB's writer lock would stall, or with py-lmdb 2.x deadlock, an abort)
        self._write_mutex = threading.Lock()
        self._env: lmdb.Environment | None = None
        self._dbs: dict[str, lmdb._Database] = {}
        self._pid = -1
        self._closed = False
        self._lockfile: int | None = None
        self._registry_key: tuple[int, int] | None = None  # set by acquire_lmdb
        self._file_behind = False  # the map grew since data.mdb was last extended to it
        self._psize = 4096  # LMDB's page size, read at open
        self._forked_inside = False  # this process is a child forked inside one of this store's transactions
        self._open()

    # -- environment lifecycle ------------------------------------------------------

    def _open(self) -> None:
        _make_dir(self.path)
        data = os.path.join(self.path, "data.mdb")
        if _stays_empty(data):
            raise CorruptData(f"{data} is empty: it is not a blobpad store; move it away or open another path")
        # The shared lock first: a compact() in another process holds the exclusive side
        # while it swaps data.mdb, and a process that mapped the old file meanwhile would
        # write into a file that is about to be replaced.  So wait for it before mapping.
        self._hold_open_lock()
        try:
            self._remove_stale_copies()
            _check_header(data)
            self._back_lock_file()
            self._open_env(data)
            make_private(self.path)  # the files LMDB just created (the umask applies), or an older store's
        except BaseException:
            if self._lockfile is not None:  # not open after all: let a compact() elsewhere proceed
                os.close(self._lockfile)
                self._lockfile = None
            raise

    def _remove_stale_copies(self) -> None:
        """Remove ``.compact-*`` copies left by a compact() that was killed or failed.

        A compacting process holds ``blobpad.lock`` exclusively; this runs with the
        shared side held, so no compaction is under way and any copy is stale.
        """
        if fcntl is None:
            return
        try:
            names = [n for n in os.listdir(self.path) if n.startswith(".compact-")]
        except OSError:
            return
        for name in names:
            shutil.rmtree(os.path.join(self.path, name), ignore_errors=True)

    def _back_lock_file(self) -> None:
        """Give every page of ``lock.mdb`` its disk blocks before LMDB maps it.

        LMDB creates the lock file sparse and writes reader slots through its map: on
        a full disk, touching a slot on a page that has no block yet kills the process
        with SIGBUS.  Allocating the whole file first (``posix_fallocate``, which never
        changes bytes already there, so other processes' slots are safe) turns a full
        disk into StoreFull here instead.  The size is LMDB's own for ``max_readers``
        (a 192-byte header holding the first slot, then 64 bytes a slot), so LMDB
        keeps it as it is.  File systems without fallocate are left as they are.
        """
        lock = os.path.join(self.path, "lock.mdb")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise _os_error(exc, self.path, f"cannot open {lock}") from None
        try:
            _private_fd(fd)  # before LMDB opens it again
            want = max(os.fstat(fd).st_size, (self._options["max_readers"] - 1) * 64 + 192)  # LMDB's own size
            os.posix_fallocate(fd, 0, want)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise _os_error(exc, self.path, f"cannot allocate {lock}") from None
        finally:
            os.close(fd)

    def _lmdb_open(self) -> lmdb.Environment:
        """The store's LMDB environment, opened with its options."""
        opts = self._options
        return lmdb.open(
            self.path,
            map_size=opts["map_size"],
            max_dbs=len(SPACES) + 2,
            max_readers=opts["max_readers"],
            sync=opts["sync"],
            metasync=False,  # with sync on, write() flushes the commit's meta page itself: see _flush
            readahead=False,
            max_spare_txns=0,  # a spare read transaction keeps its reader slot past its end: see _before_fork
            lock=True,
            subdir=True,
            mode=FILE_MODE,
        )

    def _open_env(self, data: str) -> None:
        try:
            try:
                env = self._lmdb_open()
            except lmdb.ReadonlyError:
                # LMDB creates data.mdb (the umask applies: 0277 makes it read-only to its
                # owner), then opens it a second time, which that mode refuses: give a file
                # of ours its mode and open again (LMDB wrote its header with the first).
                if not _owned_with_other_mode(data):
                    raise
                _set_mode(data, FILE_MODE)
                env = self._lmdb_open()
        except lmdb.InvalidError as exc:
            raise CorruptData(
                f"{self.path} is not an LMDB store ({exc}); point blobpad at an empty or blobpad directory"
            ) from exc
        except lmdb.Error as exc:
            error = translate(exc, self.path)
            if "already open in this process" in str(exc):
                error = BlobpadError(
                    f"the store at {self.path} is already open in this process through the lmdb module directly; "
                    "close that environment first (blobpad shares one environment per store with every blobpad.open)"
                )
            elif isinstance(error, _EngineFailure):  # not space, permission or readers: the file's header is damaged
                error = CorruptData(
                    f"the store file {data} cannot be opened: its header is damaged or it is not a blobpad store ({exc})",
                    hint=HINT_VERIFY,
                )
            raise error from None
        try:
            self._check_file_size(env, data)
        except BaseException:
            env.close()
            raise
        try:
            env.reader_check()  # clear slots left by processes that died
            self._env = env
            self._pid = os.getpid()
            self._psize = env.stat()["psize"]
            self._check_keyspaces(env, data)
            fresh = env.stat()["entries"] == 0  # no keyspace yet: a new store
            self._dbs = self._retry_resized(env, lambda: self._open_keyspaces(env))
            if fresh:
                self._flush(env)  # the keyspaces of a new store are on disk before anything is put in them
            with env.begin() as txn:  # a damaged tree record could make LMDB treat a keyspace as another kind
                if any(any(db.flags(txn).values()) for db in self._dbs.values()):
                    raise CorruptData(f"the keyspace records of {data} are damaged", hint=HINT_VERIFY)
            self._check_file_size(env, data, whole_map=True)
        except BaseException as exc:
            env.close()
            self._env = None
            if isinstance(exc, lmdb.Error):
                raise translate(exc, self.path) from None
            raise

    @staticmethod
    def _open_keyspaces(env: lmdb.Environment) -> dict[str, lmdb._Database]:
        """Open (creating them in a new store) every keyspace, in one transaction: another
        process opening the store at the same time sees all of them or none."""
        with env.begin(write=True) as txn:
            return {name: env.open_db(name.encode(), txn=txn, create=True) for name in SPACES}

    @staticmethod
    def _check_keyspaces(env: lmdb.Environment, data: str) -> None:
        """A store holds all of blobpad's keyspaces or none (a new store): never some.

        LMDB finds a keyspace by its name in the main tree; a damaged name or page
        hides it, and opening it would quietly create an empty one (an empty notepad,
        lost entries, a fresh seed).  So the names are checked first.  A store written
        before the keyspaces of :data:`~blobpad.engine.base.LATER_SPACES` existed lacks
        all of them and gets them empty.
        """
        with env.begin() as txn:
            names = {bytes(key) for key, _ in txn.cursor()}
        expected = {name.encode() for name in SPACES}
        later = {name.encode() for name in LATER_SPACES}
        if names and names != expected and names != expected - later:  # a store from before LATER_SPACES: opened
            missing = sorted(n.decode() for n in expected - names)
            raise CorruptData(
                f"the keyspace table of {data} is damaged (missing: {', '.join(missing) or 'none'}; "
                f"{len(names - expected)} unknown)", hint=HINT_VERIFY,
            )

    @staticmethod
    def _check_file_size(env: lmdb.Environment, data: str, *, whole_map: bool = False) -> None:
        """Back the whole map with the file, so that no read through the map can fault.

        Pages past the end of the file are mapped but not backed: touching one kills
        the process with SIGBUS.  A healthy file can be shorter than its last page
        (pages a transaction allocated and freed again are counted but never
        written), a truncated one shorter still, and a damaged page can point a read
        past the end.  So the file is extended (sparse: zero pages that take no disk
        blocks) to its last page before any page is read, and to the whole map
        (``whole_map``) once the keyspaces opened (so a foreign LMDB file is never
        changed), under LMDB's writer lock so that no other process
        writes meanwhile; a damaged or truncated file then reads as damaged pages
        (``CorruptData``, named by verify()) instead of crashing.  Only the two meta
        pages have been read so far (with ``read``, not through the map), so this
        comes before any other page is touched; when the map grows, the next write
        transaction extends the file again (:meth:`LmdbEngine.write`).
        """
        psize = env.stat()["psize"]

        def short() -> tuple[int, int]:
            info = env.info()
            needed = (info["last_pgno"] + 1) * psize
            if whole_map:
                needed = max(needed, info["map_size"])
            try:
                return os.path.getsize(data), needed
            except OSError as exc:
                raise CorruptData(f"cannot read the size of {data}: {exc.strerror or exc}") from None

        size, needed = short()
        if size >= needed:
            return
        if (env.info()["last_pgno"] + 1) * psize > max(4 * size, 1 << 30):
            raise CorruptData(
                f"{data} holds {size} bytes but its header claims {(env.info()['last_pgno'] + 1) * psize}: "
                "the header is damaged", hint=HINT_VERIFY,
            )
        try:
            with env.begin(write=True):  # LMDB's writer lock: nobody else extends the file now
                size, needed = short()
                if size < needed:
                    os.truncate(data, needed)  # only ever grows: size < needed
        except lmdb.ReadonlyError:
            return  # a read-only store is not written, so it cannot be extended: reads still check every record
        except (lmdb.Error, OSError) as exc:
            raise CorruptData(
                f"{data} holds {size} bytes but its map needs {needed}, and it cannot be extended "
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
                _private_fd(self._lockfile)
            fcntl.flock(self._lockfile, fcntl.LOCK_SH)
        except OSError as exc:
            raise _os_error(exc, self.path, f"cannot lock {lock_path}") from None

    @staticmethod
    def _retry_resized(env: lmdb.Environment, fn: Callable[[], T]) -> T:
        """``fn()`` on an environment being opened, adopting another process's map size.

        No transaction of this process can be open on ``env`` yet (the constructor has
        not returned, or the caller holds the exclusive side: a fork's or compact()'s
        reopen), so the size is adopted without the resize lock; taking it here would
        wait for that very caller.
        """
        for _ in range(8):
            try:
                return fn()
            except lmdb.MapResizedError:
                env.set_mapsize(0)
        return fn()

    def _current(self, env: lmdb.Environment) -> lmdb.Environment:
        """The environment to use once the shared side of the lock is held: ``env`` (what
        :meth:`_environment` gave before), unless a ``compact()`` of another thread replaced
        it meanwhile (it closes the old one under the exclusive side): then the new one.
        Calls of other threads used to fail on the closed environment."""
        current = self._env
        return env if current is None else current

    def _environment(self) -> lmdb.Environment:
        if self._closed:
            raise BlobpadError(CLOSED)
        if self._pid != current_pid():
            # A forked child must not use its parent's environment: open its own.
            if self._forked_inside:
                raise BlobpadError(
                    f"this process was forked from inside a transaction on the store at {self.path}, so it cannot "
                    "use the store it inherited: closing the parent's environment here would free the reader slot "
                    "the parent still reads under; fork outside blobpad calls, or use the store from a new process"
                )
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

    def _extend_file(self) -> None:
        """Extend data.mdb (sparse) to the map size; called inside a write transaction (the writer lock)."""
        assert self._env is not None
        data = os.path.join(self.path, "data.mdb")
        want = self._env.info()["map_size"]
        try:
            if os.path.getsize(data) < want:
                os.truncate(data, want)
        except OSError as exc:
            raise _os_error(exc, self.path, f"cannot extend {data}") from None
        self._file_behind = False

    def _adopt_size(self) -> None:
        with self._lock.exclusive():
            assert self._env is not None
            self._env.set_mapsize(0)
            self._file_behind = True

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
            self._file_behind = True
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
    def read(self) -> Iterator[RawReadTxn]:
        """Open a read transaction (a snapshot that never blocks the writer)."""
        env = self._environment()
        self._lock.acquire_shared()
        env = self._current(env)
        try:
            for _attempt in range(8):
                try:
                    txn = env.begin(buffers=True)
                    break
                except lmdb.MapResizedError:
                    self._lock.release_shared()
                    try:
                        self._adopt_size()
                    finally:
                        self._lock.acquire_shared()
            else:  # pragma: no cover - another process resizing in a tight loop
                txn = env.begin(buffers=True)
        except lmdb.Error as exc:
            self._lock.release_shared()
            raise translate(exc, self.path) from None
        except BaseException:
            self._lock.release_shared()
            raise
        view = None
        try:
            try:
                info = env.info()  # a value lies inside the pages in use: a longer length is damage
                view = _LmdbTxn(txn, self._dbs, self.path, (info["last_pgno"] + 1) * self._psize, self._lock)
                yield view
            except lmdb.Error as exc:
                raise translate(exc, self.path) from None
            finally:
                # lmdb only resets an aborted read transaction: its reader slot stays taken until the
                # object is freed.  Free it now, whoever still holds the view (see _before_fork).
                txn.abort()
                if view is not None:
                    view._txn = _ENDED
                del txn
        finally:
            self._lock.release_shared()

    def salvage(self, raw: RawReadTxn) -> tuple[RawReadTxn, list[str]] | None:
        """``raw`` (a snapshot of :meth:`read`) with its damaged trees answered from their sound
        pages, and the damage found (one line per damaged page); None when the snapshot's
        meta page was written over meanwhile (two commits since it began): take another.

        Every keyspace's tree is walked in Python first (:mod:`~blobpad.engine.lmdbpages`):
        LMDB trusts its pages, and a damaged one kills the process that walks it, so
        verify() lets LMDB read only the trees found sound."""
        assert isinstance(raw, _LmdbTxn)
        data = os.path.join(self.path, "data.mdb")
        try:
            trees = lmdbpages.damaged_trees(data, raw.txn_id(), list(SPACES))
        except (OSError, ValueError) as exc:
            return raw, [f"the store file's pages cannot be read to check them: {exc}"]
        if trees is None:
            return None
        problems = [line for tree in trees.values() for line in tree.damage]
        if lmdbpages.FREE_LIST in trees or lmdbpages.KEYSPACE_TABLE in trees:
            problems.append("no write can commit while LMDB's free-page list or keyspace table is damaged: compact() "
                            "writes the file again from its sound pages")
        elif trees:
            problems.append("writes that reach a damaged page fail (a delete of what lies on it, too): compact() "
                            "writes the file again from its sound pages; then verify() and delete what it names")
        trees = {space: tree for space, tree in trees.items() if space in SPACES}
        return (_SalvagedTxn(raw, trees), problems) if trees or problems else (raw, [])

    def release_dead_readers(self) -> int:
        """Free the reader slots of processes that died inside a read transaction (LMDB's
        ``reader_check``) and return how many: such a slot holds the snapshot it read, so
        every page freed since stayed unusable and the file grew with each write.  Open does
        it; ``gc()`` and the sweep after puts do it too, so a long-running process needs no
        new open for it."""
        env = self._environment()
        self._lock.acquire_shared()
        try:
            return int(self._current(env).reader_check())
        except lmdb.Error as exc:
            raise translate(exc, self.path) from None
        finally:
            self._lock.release_shared()

    def write(self, fn: Callable[[RawWriteTxn], T], *, frees: bool = False) -> T:
        """Run ``fn`` in one write transaction, growing the map and retrying as needed.

        ``frees`` marks a transaction that makes room (delete, gc, rollback): it may
        grow the map up to :meth:`reserve` bytes past ``max_map_size``.
        """
        env = self._environment()
        past_ceiling = False
        try:
            while True:
                self._lock.acquire_shared()
                env = self._current(env)
                seen = -1
                committed = False
                try:
                    with self._write_mutex:
                        seen = env.info()["map_size"]
                        txn = env.begin(write=True, buffers=True)
                        try:
                            if self._file_behind:  # the map grew: back it with the file (see _check_file_size)
                                self._extend_file()
                            result = fn(_LmdbTxn(txn, self._dbs, self.path, seen, self._lock))  # values: up to the map
                        except BaseException:
                            self._abort(txn)
                            raise
                        txn.commit()
                    committed = True
                    self._flush(env)
                    short_of_slack = self._short_of_slack(env)
                except lmdb.MapFullError:
                    pass
                except lmdb.MapResizedError:
                    seen = -1
                except lmdb.Error as exc:
                    raise translate(exc, self.path) from None
                finally:
                    self._lock.release_shared()
                if committed:
                    if short_of_slack:
                        with contextlib.suppress(StoreFull):
                            self._grow(seen)
                    return result
                if seen < 0:
                    self._adopt_size()
                else:
                    past_ceiling = self._grow(seen, frees=frees) or past_ceiling
        finally:
            if past_ceiling:
                self._back_to_ceiling()

    @property
    def sync(self) -> bool:
        """Whether every commit is flushed before it is acknowledged (the ``sync`` it was opened with)."""
        return bool(self._options["sync"])

    def _abort(self, txn: lmdb.Transaction) -> None:
        """Abort a write transaction while the reads of this process make no new LMDB call.

        py-lmdb (from 2.0) waits, in an abort, until no other thread of the process has
        an LMDB call in flight, holding LMDB's writer lock all the while: threads reading
        without a pause kept a failed write (and every writer behind it, in every
        process) waiting for as long as they read.  Reads now wait before their next
        call (a get, a step of a scan) for the abort alone, so it waits for the calls in
        flight only: microseconds, not the length of a long read."""
        with self._lock.ops_paused():
            txn.abort()

    def _flush(self, env: lmdb.Environment) -> None:
        """With ``sync`` on, make the commit just made durable before write() returns.

        The environment is opened with LMDB's ``MDB_NOMETASYNC``: a commit flushes its
        data pages to disk (``fdatasync``) and then writes its meta page, the one that
        makes it current, without waiting for the disk; this flush then waits for it.
        A write is acknowledged only once both are on disk, as with LMDB's default
        (which writes the meta page through a synchronous descriptor), but the second
        wait happens after LMDB's writer lock is released, so the next writer, in this
        process or another, commits meanwhile (four processes putting 5 KB each: about
        1.3 to 2 times the puts per second).  A power cut between the two loses the
        unacknowledged commit and nothing else: the data pages were flushed first, and
        LMDB keeps the previous meta page (``MDB_NOMETASYNC`` preserves atomicity and
        consistency).  A flush that fails raises: the write is not acknowledged.
        """
        if self._options["sync"]:
            env.sync(True)

    def _short_of_slack(self, env: lmdb.Environment) -> bool:
        """Whether the data fills over half the map (called holding the shared side).

        The file is backed up to the end of the map, so a read that damage sends
        past the data (a node offset up to 64 KiB off its page, a length field up to
        the keyspace's limit) reads zero pages instead of leaving the map; growing
        the map (up to ``max_map_size``) once the data fills half of it keeps as much
        map free as there is data, so such reads stay inside it.
        """
        info = env.info()
        return (info["last_pgno"] + 1) * self._psize * 2 > info["map_size"] and info["map_size"] < self.max_map_size

    # -- maintenance ----------------------------------------------------------------

    def map_size(self) -> int:
        """Return the current map size in bytes."""
        return int(self._environment().info()["map_size"])

    def size(self) -> int:
        """The disk space data.mdb takes (its blocks: the file is sparse past its last written page)."""
        st = os.stat(os.path.join(self.path, "data.mdb"))
        return min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size

    def compact(self) -> tuple[int, int]:
        """Rewrite the data file without free pages (LMDB's compacting copy).

        Needs the store to be open in this process only: other processes keep the old
        file mapped, so compact() refuses (raises BlobpadError) while they hold it.
        """
        env = self._environment()
        before = self.size()
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
                try:
                    os.makedirs(tmp, mode=DIR_MODE, exist_ok=True)
                    if not self._rebuild_if_damaged(env, tmp):
                        _compacted_copy(env, os.path.join(tmp, "data.mdb"))
                    os.chmod(os.path.join(tmp, "data.mdb"), FILE_MODE)
                except (lmdb.Error, OSError) as exc:  # a full disk, mostly: the store is unchanged
                    shutil.rmtree(tmp, ignore_errors=True)
                    if isinstance(exc, lmdb.Error):
                        raise translate(exc, self.path) from None
                    raise _os_error(exc, self.path, "cannot write the compacted copy") from None
                env.close()
                self._env = None
                os.replace(os.path.join(tmp, "data.mdb"), os.path.join(self.path, "data.mdb"))
                _sync_directory(self.path)  # the new file's name, as its bytes, survives a power loss
                shutil.rmtree(tmp, ignore_errors=True)
            finally:
                if self._env is None:
                    self._open()
                elif fcntl is not None and self._lockfile is not None:
                    fcntl.flock(self._lockfile, fcntl.LOCK_SH)
        return before, self.size()

    def _rebuild_if_damaged(self, env: lmdb.Environment, tmp: str) -> bool:
        """When a tree of the file is damaged, write at ``tmp`` a new file holding every record
        its sound pages hold, and return True; else False (LMDB's own copy is used).

        LMDB's copy walks every tree and fails, or aborts, on a damaged page; so does any
        write that reaches one (a delete of what lies on it: the damaged entry could not
        be deleted).  The trees are walked in Python first (:mod:`~blobpad.engine.lmdbpages`);
        a damaged one is copied from its sound pages, the others through LMDB.  What sat
        on the damaged pages is gone from the copy: verify() then names the entries it
        leaves incomplete, and delete() and gc() work on them again."""
        data = os.path.join(self.path, "data.mdb")
        with env.begin() as txn:  # the store is ours alone (compact holds it exclusively): no writer moves on
            trees = lmdbpages.damaged_trees(data, txn.id(), list(SPACES))
            if not trees:
                return False
            out = lmdb.open(tmp, map_size=env.info()["map_size"], max_dbs=len(SPACES) + 2, subdir=True,
                            mode=FILE_MODE, sync=True, metasync=True)
            try:
                for space in SPACES:  # the free-page list is not copied: the new file starts with none
                    target = out.open_db(space.encode())
                    if space in trees:
                        records: Iterator[tuple[bytes, bytes]] = iter(trees[space].records)
                    else:
                        records = iter(txn.cursor(db=self._dbs[space]))
                    while True:
                        batch = list(itertools.islice(records, 1000))
                        if not batch:
                            break
                        with out.begin(write=True) as wtxn:
                            for key, value in batch:
                                wtxn.put(bytes(key), bytes(value), db=target, append=True)
            finally:
                out.close()
        return True

    def close(self) -> None:
        """Release one holder; the environment closes when the last one lets go."""
        with _REGISTRY_LOCK:
            held = _REGISTRY.get(self._registry_key)
            if held is not None and held[0] is self:
                if held[1] > 1:
                    _REGISTRY[self._registry_key] = (self, held[1] - 1)
                    return
                del _REGISTRY[self._registry_key]
        if self._closed:
            return
        self._closed = True
        if self._env is not None and self._pid == os.getpid():
            self._env.close()
        self._env = None
        if self._lockfile is not None and self._pid == os.getpid():
            os.close(self._lockfile)
        self._lockfile = None
