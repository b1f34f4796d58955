"""The file-offload sandbox: ``scratchpad_offload`` opens a regular file inside the
allowed directories only (resolved, then checked again on what was opened), and never
a file of a blobpad store."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import describe
from .spec import Param, ToolContext, ToolError, ToolSpec


def _inside(path: str, roots: Sequence[str]) -> bool:
    for root in roots:
        try:
            if os.path.commonpath([path, root]) == root:
                return True
        except ValueError:  # different drives
            continue
    return False


#: the files of a blobpad store directory: LMDB's, and blobpad's own lock
_STORE_FILES = ("data.mdb", "lock.mdb", "blobpad.lock")
_LMDB_MAGIC = (b"\xde\xc0\xef\xbe", b"\xbe\xef\xc0\xde")  # MDB_MAGIC, little- and big-endian


def _is_store_dir(directory: str) -> bool:
    """Whether ``directory`` is a blobpad store (or another LMDB environment) by its files."""
    def has(name: str) -> bool:
        return os.path.lexists(os.path.join(directory, name))
    return has("blobpad.lock") or (has("data.mdb") and has("lock.mdb"))


def _store_file_reason(tb: ToolContext, fd: int, st: os.stat_result, opened: str) -> str | None:
    """Why the opened file belongs to a blobpad store, or None.

    Whatever path reached it: the file is one of the open store's files (same device
    and inode, so hard links and bind mounts are caught), or it lies in a directory
    that is a store (by its files, after resolving symlinks), or it is an LMDB data or
    lock file (by its magic number: a copy or a hard link of another store's file).
    """
    for name in _STORE_FILES:
        try:
            own = os.stat(os.path.join(tb.store.path, name))
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return "it is a file of the open blobpad store"
    directory = os.path.dirname(opened)
    while True:
        if _is_store_dir(directory):
            return f"it is inside the blobpad store {directory}"
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    try:
        head = os.read(fd, 20)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        head = b""
    if any(head[i:i + 4] in _LMDB_MAGIC for i in (0, 12, 16)):
        return "it is an LMDB database file, such as a blobpad store's"
    return None


def _open_confined(tb: ToolContext, raw_path: str) -> tuple[int, str, int]:
    """Open a regular file inside the allowed directories: (fd, real path, size)."""
    roots = tb.allow_dirs
    allowed = ", ".join(roots)
    if "\0" in raw_path:
        raise ToolError("scratchpad_offload: the path contains a NUL character")
    candidate = os.path.expanduser(raw_path)
    if not os.path.isabs(candidate):
        candidate = os.path.join(roots[0], candidate)
    try:
        real = os.path.realpath(candidate)
    except OSError as exc:  # a directory on the way changed while it was resolved (a symlink loop, a race)
        raise ToolError(f"scratchpad_offload: cannot resolve {describe(raw_path, 200)}: {exc.strerror or exc}; "
                        "pass the path of a file that stays in place") from None
    if not _inside(real, roots):
        raise ToolError(f"scratchpad_offload: {describe(raw_path, 200)} is outside the allowed directories ({allowed}); "
                        "only files inside them can be offloaded")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise ToolError(f"scratchpad_offload: no file at {describe(raw_path, 200)} (allowed directories: {allowed})") from None
    except IsADirectoryError:
        raise ToolError(f"scratchpad_offload: {describe(raw_path, 200)} is a directory; pass a file") from None
    except OSError as exc:
        raise ToolError(f"scratchpad_offload: cannot open {describe(raw_path, 200)}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"scratchpad_offload: {describe(raw_path, 200)} is a directory; pass a file")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"scratchpad_offload: {describe(raw_path, 200)} is not a regular file")
        if sys.platform.startswith("linux"):
            # Between realpath() and open() a directory on the way may have been swapped
            # for a symlink; check what was actually opened.
            try:
                opened = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                opened = real
            if not _inside(opened, roots):
                raise ToolError(f"scratchpad_offload: {describe(raw_path, 200)} is outside the allowed directories "
                                f"({allowed})")
        else:
            opened = real
        reason = _store_file_reason(tb, fd, st, opened)
        if reason is not None:
            raise ToolError(f"scratchpad_offload: {describe(raw_path, 200)} cannot be offloaded: {reason}, which holds "
                            "every session's data; offload other files")
        if st.st_size > tb.max_file_bytes:
            raise ToolError(f"scratchpad_offload: the file is {st.st_size} bytes; the limit is {tb.max_file_bytes}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, real, st.st_size


class LimitedReader:
    """The binary reader scratchpad_offload reads a file through: it fails once more than ``limit``
    bytes were read (a file growing while read)."""

    def __init__(self, fh: Any, limit: int) -> None:
        self._fh = fh
        self._left = limit

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._fh.read(n if n is not None and n >= 0 else self._left + 1)
        self._left -= len(data)
        if self._left < 0:
            raise ToolError("scratchpad_offload: the file grew past the size limit while it was read")
        return data


def _offload_file(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    fd, real, size = _open_confined(tb, a["path"])
    with os.fdopen(fd, "rb") as raw:
        fh = LimitedReader(raw, tb.max_file_bytes)
        try:
            result = tb.offloader.offload_content(
                fh, session=tb.session, turn=tb.turn, tool="scratchpad_offload", field="content",
                metadata={"path": real, "bytes": size},
            )
        except OSError as exc:  # the disk failed while the file was read: nothing was stored
            raise ToolError(f"scratchpad_offload: cannot read {describe(a['path'], 200)}: {exc.strerror or exc}") from None
    return result


def offload_tool(tb: ToolContext) -> ToolSpec:
    dirs = ", ".join(tb.allow_dirs)
    return ToolSpec(
        "scratchpad_offload",
        ("Save a file into the scratchpad without putting its content in the conversation, and get back its "
         "scratchpad_id, size and a short summary (start and end). Then read parts of it with scratchpad_read. "
         f"Only files inside these directories can be offloaded: {dirs}. Relative paths are taken from the first."),
        (Param("path", "string", "Path of the file to offload.", required=True, min_length=1, max_length=4096),),
        _offload_file,
        read_only=False,
    )
