"""LMDB's B-trees read and checked page by page in Python, for verify() on a damaged file.

LMDB trusts its pages: a damaged branch or leaf page makes a cursor moving onto it
abort the process (``Assertion 'IS_LEAF(mp)' failed in mdb_cursor_next()``), or worse.
verify() is what a user runs on a store suspected of damage, so before it lets LMDB walk
a keyspace it walks that keyspace's tree here, reading the file with ``pread`` (never
through LMDB's map) and checking every page it reaches: its number, its kind, its
bounds, every node's bounds, every child's number and kind, and the overflow pages of
large values.  A sound tree is then read by LMDB as usual; a damaged one is never given
to LMDB: its records are taken from the pages that are sound (:meth:`PageFile.walk`),
and the damage is reported with the page it is on.

The layout read here is LMDB 0.9's (``mdb.c``): a page starts with its number (8 bytes),
2 bytes of padding, its flags (2), then ``lower`` and ``upper`` (2 each; for an overflow
page, 4 bytes of page count instead); a node is ``lo``, ``hi``, ``flags`` and the key size
(2 bytes each) followed by the key, then the data (a child page number in ``lo``, ``hi``
and ``flags`` for a branch node; data size ``lo | hi << 16`` for a leaf node).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

__all__ = ["PageFile", "Tree", "MAGIC", "FREE_LIST", "KEYSPACE_TABLE", "damaged_trees"]

#: the names :func:`damaged_trees` gives LMDB's own trees when they are damaged: its list of
#: free pages, and its main tree, which names the others
FREE_LIST = "free-page list"
KEYSPACE_TABLE = "keyspace table"

MAGIC = 0xBEEFC0DE
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_META = 0x01, 0x02, 0x04, 0x08
_F_BIGDATA, _F_DUPDATA = 0x01, 0x04
_HEADER = 16  # page header bytes
_NODE = 8  # node header bytes
_DB = struct.Struct("<IHHQQQQQ")  # MDB_db: pad, flags, depth, branch, leaf, overflow pages, entries, root
_P_INVALID = (1 << 64) - 1
_MAX_DEPTH = 32


@dataclass(frozen=True)
class _Walk:
    """How one walk reads its tree: the file's last page, the tree's name (for the damage
    it reports), whether overflow values are read, whether keys are native integers."""

    last: int
    name: str
    values: bool
    integer_keys: bool


@dataclass
class Tree:
    """What walking one tree found: its records in key order (those on sound pages) and
    its damage (empty for a sound tree)."""

    records: list[tuple[bytes, bytes]] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)


class PageFile:
    """An LMDB data file read with ``pread``, at one of its two meta pages' snapshots."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            head = os.pread(self._fd, 4096 + _HEADER + 160, 0)
            self.psize = self._page_size(head)
            self.metas = [self._meta(i) for i in (0, 1)]
        except BaseException:
            os.close(self._fd)
            raise

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> PageFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _page_size(head: bytes) -> int:
        """The page size the first meta page records (LMDB keeps it in the free tree's pad field)."""
        if len(head) < _HEADER + 28 or struct.unpack_from("<I", head, _HEADER)[0] != MAGIC:
            raise ValueError("no LMDB meta page at the start of the file")
        (psize,) = struct.unpack_from("<I", head, _HEADER + 24)
        if psize not in (4096, 8192, 16384, 32768, 65536):
            raise ValueError(f"the meta page records a page size of {psize}")
        return psize

    def _meta(self, index: int) -> tuple[int, int, int, int] | None:
        """(txnid, last page, main root, free root) of meta page ``index``, or None if damaged."""
        raw = os.pread(self._fd, self.psize, index * self.psize)
        if len(raw) < _HEADER + 136 or struct.unpack_from("<I", raw, _HEADER)[0] != MAGIC:
            return None
        dbs = _HEADER + 24
        free, main = _DB.unpack_from(raw, dbs), _DB.unpack_from(raw, dbs + _DB.size)
        last, txnid = struct.unpack_from("<QQ", raw, dbs + 2 * _DB.size)
        return txnid, last, main[7], free[7]

    def snapshot(self, txnid: int) -> tuple[int, int, int] | None:
        """(last page, main root, free root) of the meta page of transaction ``txnid``, if it is still there."""
        for meta in self.metas:
            if meta is not None and meta[0] == txnid:
                return meta[1], meta[2], meta[3]
        return None

    def page(self, pgno: int, count: int = 1) -> bytes:
        return os.pread(self._fd, self.psize * count, pgno * self.psize)

    def named_roots(self, main_root: int, last: int) -> tuple[dict[bytes, int], list[str]]:
        """The root page of every named tree (``_P_INVALID`` for an empty one), read from the main tree."""
        tree = self.walk(main_root, last, KEYSPACE_TABLE)
        roots: dict[bytes, int] = {}
        for key, value in tree.records:
            if len(value) == _DB.size:
                roots[key] = _DB.unpack(value)[7]
        return roots, tree.damage

    def walk(self, root: int, last: int, name: str, *, values: bool = True, integer_keys: bool = False) -> Tree:
        """Every record of the tree at ``root`` that sound pages hold, and the damage met.
        ``values`` false: the tree is only checked (values of overflow pages are not read,
        only their pages' headers; ``records`` holds the keys, with empty values).
        ``integer_keys``: the tree orders its keys as native integers (LMDB's free-page
        list, ``MDB_INTEGERKEY``), not byte by byte."""
        tree = Tree()
        if root == _P_INVALID:
            return tree
        self._walk(root, _Walk(last, name, values, integer_keys), tree, 0, set(), [])
        return tree

    def _walk(self, pgno: int, how: _Walk, tree: Tree, depth: int, seen: set[int], leaf_depth: list[int]) -> None:
        last, name = how.last, how.name
        where = f"the {name} tree: page {pgno}"
        if depth > _MAX_DEPTH:
            tree.damage.append(f"{where}: deeper than any tree LMDB builds")
            return
        if not 2 <= pgno <= last or pgno in seen:
            tree.damage.append(f"{where}: " + ("reached twice" if pgno in seen else f"not a page of the file (last: {last})"))
            return
        seen.add(pgno)
        raw = self.page(pgno)
        problem = self._page_problem(raw, pgno)
        if problem:
            tree.damage.append(f"{where}: {problem}")
            return
        flags, lower = struct.unpack_from("<HH", raw, 10)
        nodes = self._nodes(raw, lower, how.integer_keys)
        if isinstance(nodes, str):
            tree.damage.append(f"{where}: {nodes}")
            return
        if flags & _P_BRANCH:
            if len(nodes) < 2:  # LMDB asserts a branch has two keys at least
                tree.damage.append(f"{where}: a branch page with {len(nodes)} keys")
                return
            for _off, lo, hi, nflags, _key in nodes:
                self._walk(lo | hi << 16 | nflags << 32, how, tree, depth + 1, seen, leaf_depth)
            return
        if leaf_depth and leaf_depth[0] != depth:
            tree.damage.append(f"{where}: a leaf at depth {depth}, others at {leaf_depth[0]}")
            return
        leaf_depth.append(depth)
        for off, lo, hi, nflags, key in nodes:
            size = lo | hi << 16
            data_at = off + _NODE + len(key)
            if nflags & _F_DUPDATA:
                tree.damage.append(f"{where}: a duplicate-keys node, which no blobpad keyspace has")
                continue
            if nflags & _F_BIGDATA:
                if data_at + 8 > self.psize:
                    tree.damage.append(f"{where}: a node past the end of its page")
                    continue
                big = struct.unpack_from("<Q", raw, data_at)[0]
                value = self._overflow(big, size, last, how.values)
                if isinstance(value, str):
                    tree.damage.append(f"{where}: the value of a node: {value}")
                    continue
            else:
                if data_at + size > self.psize:
                    tree.damage.append(f"{where}: a node's value runs past the end of its page")
                    continue
                value = raw[data_at:data_at + size]
            tree.records.append((key, value))

    def _page_problem(self, raw: bytes, pgno: int) -> str | None:
        if len(raw) < self.psize:
            return "past the end of the file"
        (number,) = struct.unpack_from("<Q", raw, 0)
        flags, lower, upper = struct.unpack_from("<HHH", raw, 10)
        if number != pgno:
            return f"its header says page {number}"
        if not flags & (_P_BRANCH | _P_LEAF) or flags & (_P_OVERFLOW | _P_META):
            return f"not a tree page (flags {flags:#x})"
        if not _HEADER <= lower <= upper <= self.psize or (lower - _HEADER) % 2:
            return f"its bounds are wrong (lower {lower}, upper {upper})"
        return None

    def _nodes(self, raw: bytes, lower: int, integer_keys: bool) -> list[tuple[int, int, int, int, bytes]] | str:
        out = []
        upper = struct.unpack_from("<H", raw, 14)[0]
        for i in range((lower - _HEADER) // 2):
            (off,) = struct.unpack_from("<H", raw, _HEADER + 2 * i)
            if not upper <= off <= self.psize - _NODE or off % 2:
                return f"node {i} is at offset {off}, outside the page's node area"
            lo, hi, nflags, ksize = struct.unpack_from("<HHHH", raw, off)
            if off + _NODE + ksize > self.psize:
                return f"node {i}'s key runs past the end of the page"
            out.append((off, lo, hi, nflags, raw[off + _NODE:off + _NODE + ksize]))
        flags = struct.unpack_from("<H", raw, 10)[0]
        keys: list[bytes] | list[int] = [n[4] for n in out][1 if flags & _P_BRANCH else 0:]  # a branch's first key: the lowest
        if integer_keys:  # the free-page list's keys are transaction ids, native integers (little-endian)
            keys = [int.from_bytes(k, "little") for k in keys]
        if any(a >= b for a, b in zip(keys, keys[1:], strict=False)):  # type: ignore[operator]
            return "its keys are out of order"
        return out

    def _overflow(self, pgno: int, size: int, last: int, values: bool) -> bytes | str:
        if not 2 <= pgno <= last:
            return f"its overflow page {pgno} is not a page of the file"
        head = self.page(pgno)
        if len(head) < _HEADER or struct.unpack_from("<Q", head, 0)[0] != pgno:
            return f"its overflow page {pgno} is damaged"
        flags = struct.unpack_from("<H", head, 10)[0]
        (count,) = struct.unpack_from("<I", head, 12)
        kind = flags & (_P_BRANCH | _P_LEAF | _P_OVERFLOW | _P_META)  # LMDB's in-memory bits aside
        if kind != _P_OVERFLOW or count * self.psize < _HEADER + size or pgno + count - 1 > last:
            return f"its overflow page {pgno} is damaged (flags {flags:#x}, {count} pages for {size} bytes)"
        if not values:
            return b""
        data = os.pread(self._fd, size, pgno * self.psize + _HEADER)
        return data if len(data) == size else f"its overflow pages {pgno}.. run past the end of the file"


def damaged_trees(path: str, txnid: int, names: list[str]) -> dict[str, Tree] | None:
    """The named trees of the file at ``path`` that are damaged at transaction ``txnid``,
    each with the records its sound pages hold, and LMDB's free-page list under
    :data:`FREE_LIST` and its main tree under :data:`KEYSPACE_TABLE` when they are damaged
    (every commit rewrites them: none can succeed); {}
    when every one is sound; None when that snapshot's meta page has been written over
    since (read again).  Sound trees are only checked: their values are not read."""
    with PageFile(path) as pf:
        snap = pf.snapshot(txnid)
        if snap is None:
            return None
        last, main_root, free_root = snap
        roots, damage = pf.named_roots(main_root, last)
        trees: dict[str, Tree] = {}
        if damage:
            trees[KEYSPACE_TABLE] = Tree(damage=damage)
        free = pf.walk(free_root, last, FREE_LIST, values=False, integer_keys=True)  # every commit writes it
        if free.damage:
            trees[FREE_LIST] = free
        for name in names:
            root = roots.get(name.encode())
            if root is None:  # on a damaged table, LMDB found it when the store opened: it is read as usual
                if not damage:
                    trees[name] = Tree(damage=[f"the {name} tree is not named in the keyspace table"])
            elif pf.walk(root, last, name, values=False).damage:
                trees[name] = pf.walk(root, last, name)
        return trees

