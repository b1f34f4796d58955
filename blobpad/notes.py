"""The notepad's records in the store's ``notes`` keyspace: keys, texts, heads, versions, expiry.

This is the storage half of the notepad (:mod:`blobpad.notepad` is the rest): what
the store itself needs to delete a session's notepad (``delete_notepad``), remove
expired notepads in ``gc()`` (``purge_expired``) and check them in ``verify()``
(``verify_notepads``), without knowing anything else of notepads.

Records (keys start with one kind byte; strings are length-prefixed):

* ``B`` + sha256: a text, with the count of versions using it;
* ``H`` + session + space: the head, (current version, digest of its text);
* ``L`` + session + space + version: one version's record (JSON, its text's digest);
* ``M`` + session: the notepad's settings (its expiry);
* ``E`` + expires_at + session: the expiry index.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from collections.abc import Callable
from typing import Any, Protocol

from .engine import Checked, ReadTxn, WriteTxn, prefix_end
from .errors import HINT_VERIFY, CorruptData

__all__ = ["NotesHost", "delete_notepad", "purge_expired", "verify_notepads"]


class NotesHost(Protocol):
    """What a notepad needs of the store that holds it (a :class:`blobpad.Store` is one)."""

    path: str

    @property
    def engine(self) -> Checked:
        """The store's engine, seen through the integrity checks."""
        ...

    def now(self) -> float:
        """The store's clock."""
        ...


SPACE = "notes"
REFCOUNT = struct.Struct(">Q")
HEAD = struct.Struct(">Q32s")
VER = struct.Struct(">Q")


def part(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">I", len(raw)) + raw


def blob_key(digest: bytes) -> bytes:
    return b"B" + digest


def head_key(session: str, space: str) -> bytes:
    return b"H" + part(session) + part(space)


def log_prefix(session: str, space: str | None = None) -> bytes:
    return b"L" + part(session) + (part(space) if space is not None else b"")


def log_key(session: str, space: str, version: int) -> bytes:
    return log_prefix(session, space) + VER.pack(version)


def meta_key(session: str) -> bytes:
    return b"M" + part(session)


def expiry_key(expires_at: float, session: str) -> bytes:
    return b"E" + VER.pack(micros(expires_at)) + part(session)


def micros(t: float) -> int:
    return max(0, min((1 << 64) - 1, int(t * 1_000_000)))


def scan_first(txn: ReadTxn, prefix: bytes) -> bool:
    """Whether any record starts with ``prefix``."""
    return any(True for _ in txn.scan(SPACE, prefix, prefix_end(prefix)))


def scan_prefix(
    txn: ReadTxn, prefix: bytes, on_damage: Callable[[bytes], None] | None = None
) -> list[tuple[bytes, bytes]]:
    return list(txn.scan(SPACE, prefix, prefix_end(prefix), on_damage=on_damage))


# -- blobs, heads and versions inside a transaction -------------------------------------


def blob_get(txn: ReadTxn, digest: bytes) -> bytes:
    raw = txn.get(SPACE, blob_key(digest))
    if raw is None:  # a version always holds a reference to its text: only damage loses it
        raise CorruptData("a notepad version's text is missing from the store", hint=HINT_VERIFY)
    return raw[REFCOUNT.size:]


def blob_ref(txn: WriteTxn, data: bytes, digest: bytes | None = None) -> bytes:
    """Add one reference to the blob holding ``data``; return its digest."""
    digest = digest or hashlib.sha256(data).digest()
    key = blob_key(digest)
    raw = txn.get(SPACE, key)
    if raw is None:
        txn.put(SPACE, key, REFCOUNT.pack(1) + data)
    else:
        (count,) = REFCOUNT.unpack_from(raw)
        txn.put(SPACE, key, REFCOUNT.pack(count + 1) + raw[REFCOUNT.size:])
    return digest


def blob_release(txn: WriteTxn, digest: bytes) -> None:
    key = blob_key(digest)
    raw = txn.get(SPACE, key)
    if raw is None:  # pragma: no cover - defensive
        return
    (count,) = REFCOUNT.unpack_from(raw)
    if count <= 1:
        txn.delete(SPACE, key)
    else:
        txn.put(SPACE, key, REFCOUNT.pack(count - 1) + raw[REFCOUNT.size:])


def read_head(txn: ReadTxn, session: str, space: str) -> tuple[int, bytes] | None:
    raw = txn.get(SPACE, head_key(session, space))
    if raw is None:
        return None
    version, digest = HEAD.unpack(raw)
    return version, digest


def expired(txn: ReadTxn, session: str, now: float) -> bool:
    raw = txn.get(SPACE, meta_key(session))
    if raw is None:
        return False
    expires_at = json.loads(raw).get("expires_at")
    return expires_at is not None and expires_at <= now


def delete_notepad(txn: WriteTxn, session: str) -> int:
    """Delete every space, version and blob reference of ``session``'s notepad; return spaces deleted.

    Damaged records are deleted too (deleting is what CorruptData advises); the text a
    damaged version referred to cannot be released, and verify() reports it."""
    damaged: list[bytes] = []
    for key, value in scan_prefix(txn, log_prefix(session), damaged.append):
        blob_release(txn, bytes.fromhex(json.loads(value)["h"]))
        txn.delete(SPACE, key)
    heads = scan_prefix(txn, b"H" + part(session), damaged.append)
    for key, _ in heads:
        txn.delete(SPACE, key)
    try:
        meta = txn.get(SPACE, meta_key(session))
    except CorruptData:  # its expiry index record is unknown: found by scanning the index
        tail = part(session)
        stale = [k for k, _ in txn.scan(SPACE, b"E", b"F", on_damage=damaged.append) if k[1 + VER.size :] == tail]
        meta, damaged = None, [*damaged, *stale, meta_key(session)]
    if meta is not None:
        expires_at = json.loads(meta).get("expires_at")
        if expires_at is not None:
            txn.delete(SPACE, expiry_key(expires_at, session))
        txn.delete(SPACE, meta_key(session))
    for key in damaged:
        txn.delete(SPACE, key)
    return len(heads) + sum(key[:1] == b"H" for key in damaged)


def set_expiry(txn: WriteTxn, session: str, expires_at: float | None) -> None:
    old = txn.get(SPACE, meta_key(session))
    if old is not None:
        old_at = json.loads(old).get("expires_at")
        if old_at is not None:
            txn.delete(SPACE, expiry_key(old_at, session))
    if expires_at is None:
        if old is not None:
            txn.delete(SPACE, meta_key(session))
        return
    txn.put(SPACE, meta_key(session), json.dumps({"expires_at": expires_at}).encode())
    txn.put(SPACE, expiry_key(expires_at, session), b"")


def any_expired(txn: ReadTxn, now: float) -> bool:
    """Whether the notepads' expiry index names one that may have expired by ``now``."""
    stop = b"E" + VER.pack(micros(now) + 1)
    damaged: list[bytes] = []  # a damaged record is due too: purge_expired deletes it
    return any(True for _ in txn.scan(SPACE, b"E", stop, on_damage=damaged.append)) or bool(damaged)


def purge_expired(txn: WriteTxn, now: float) -> int:
    """Delete every notepad whose ttl has run out by ``now``; return how many were deleted."""
    return purge_some(txn, now, None)[0]


def purge_some(txn: WriteTxn, now: float, limit: int | None) -> tuple[int, int]:
    """Delete the notepads whose ttl has run out by ``now``, going through at most ``limit``
    records of their expiry index (None: all), the first to expire first; return (notepads
    deleted, index records gone through: ``limit`` when more may be due)."""
    stop = b"E" + VER.pack(micros(now) + 1)
    sessions = []
    damaged: list[bytes] = []
    for key, _ in txn.scan(SPACE, b"E", stop, on_damage=damaged.append):
        if limit is not None and len(sessions) >= limit:
            break
        (length,) = struct.unpack_from(">I", key, 1 + VER.size)
        start = 1 + VER.size + 4
        sessions.append((key, key[start:start + length].decode("utf-8")))
    for key in damaged:  # an expiry index record that names nothing it can be trusted for
        txn.delete(SPACE, key)
    purged = 0
    for key, session in sessions:
        try:
            due = expired(txn, session, now)
        except CorruptData:  # its expiry record is damaged: the index said it is due
            due = True
        if due:
            delete_notepad(txn, session)
            purged += 1
        elif not _indexed_at(txn, session, key):
            txn.delete(SPACE, key)  # names a notepad that expires at another time, or none: it would block a limit
    return purged, len(sessions)


def _indexed_at(txn: ReadTxn, session: str, key: bytes) -> bool:
    """Whether ``session``'s notepad expires at the time its expiry index record ``key`` holds."""
    raw = txn.get(SPACE, meta_key(session))
    expires_at = None if raw is None else json.loads(raw).get("expires_at")
    return expires_at is not None and expiry_key(expires_at, session) == key


def parts(key: bytes, pos: int, n: int) -> tuple[list[str], int]:
    """Decode ``n`` length-prefixed strings of a key from ``pos``; return them and the end."""
    out = []
    for _ in range(n):
        (length,) = struct.unpack_from(">I", key, pos)
        pos += 4
        if pos + length > len(key):
            raise ValueError("a key part runs past the key")
        out.append(key[pos : pos + length].decode("utf-8"))
        pos += length
    return out, pos


def verify_notepads(txn: ReadTxn, records: dict[bytes, bytes]) -> list[str]:
    """Cross-check every notepad record (verify()): texts, versions, heads and expiry, both ways."""
    problems: list[str] = []
    blobs: dict[bytes, int] = {}
    uses: dict[bytes, int] = {}
    heads: dict[tuple[str, str], tuple[int, bytes]] = {}
    logs: dict[tuple[str, str], dict[int, bytes]] = {}
    metas: dict[str, Any] = {}
    expiry: set[tuple[int, str]] = set()
    for key, value in records.items():
        try:
            kind = key[:1]
            if kind == b"B":
                (count,) = REFCOUNT.unpack_from(value)
                if hashlib.sha256(value[REFCOUNT.size :]).digest() != key[1:]:
                    raise ValueError("its text does not match its hash")
                blobs[key[1:]] = count
            elif kind == b"H":
                (session, space), end = parts(key, 1, 2)
                if end != len(key):
                    raise ValueError("trailing bytes")
                heads[(session, space)] = HEAD.unpack(value)
            elif kind == b"L":
                (session, space), end = parts(key, 1, 2)
                (version,) = VER.unpack(key[end:])
                digest = bytes.fromhex(json.loads(value)["h"])
                logs.setdefault((session, space), {})[version] = digest
                uses[digest] = uses.get(digest, 0) + 1
            elif kind == b"M":
                (session,), end = parts(key, 1, 1)
                metas[session] = json.loads(value).get("expires_at")
            elif kind == b"E":
                (session,), end = parts(key, 1 + VER.size, 1)
                expiry.add((VER.unpack_from(key, 1)[0], session))
            else:
                raise ValueError("unknown kind of record")
        except (ValueError, KeyError, TypeError, AttributeError, struct.error) as exc:
            problems.append(f"notepad record {key[:40].hex()}: damaged ({exc})")
    for (session, space), (version, digest) in heads.items():
        if logs.get((session, space), {}).get(version) != digest:
            problems.append(f"notepad of session {session!r}: space {space!r} version {version} is missing or differs")
    for (session, space), versions in logs.items():
        head = heads.get((session, space))
        if head is None or max(versions) > head[0]:
            problems.append(f"notepad of session {session!r}: space {space!r} has versions but no current head")
        kept = sorted(versions)  # pruning keeps a run: a gap between two kept versions is records gone
        gaps = [v for a, b in itertools.pairwise(kept) if b > a + 1 for v in range(a + 1, min(b, a + 11))][:10]
        if gaps:
            missing = kept[-1] - kept[0] + 1 - len(kept)
            problems.append(f"notepad of session {session!r}: space {space!r} lacks version"
                            f"{'s' if missing > 1 else ''} {', '.join(map(str, gaps))}"
                            f"{' ...' if missing > len(gaps) else ''} between {kept[0]} and {kept[-1]}")
    for digest, count in uses.items():
        if digest not in blobs:
            problems.append(f"notepad text {digest.hex()[:16]}: missing, but {count} versions use it")
    for digest, count in blobs.items():
        if uses.get(digest, 0) != count:
            problems.append(f"notepad text {digest.hex()[:16]}: counted {count} uses, but {uses.get(digest, 0)} versions use it")
    want = {(micros(at), session) for session, at in metas.items() if at is not None}
    for _at, session in want ^ expiry:
        problems.append(f"notepad of session {session!r}: its expiry record and its expiry index disagree")
    return problems
