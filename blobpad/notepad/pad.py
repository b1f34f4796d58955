"""The notepad: one session's spaces, their versions, and its results.

:class:`Notepad` reads and changes a session's spaces in one write transaction per
change (the records are :mod:`blobpad.notes`); :class:`NoteResult` is what a change
answers and :class:`Version` one entry of a space's history.  Budgets are in
:mod:`.budget`, the texts in :mod:`.texts`, the nudges in :mod:`.nudges`.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..engine import ReadTxn, WriteTxn, prefix_end
from ..errors import (
    HINT_NOTEPAD_SIZE,
    HINT_VERIFY,
    CorruptData,
    InvalidArgument,
    NotFound,
    check_bool,
    check_str,
    check_ttl,
    describe,
    typename,
)
from ..notes import (
    HEAD,
    SPACE,
    VER,
    NotesHost,
    blob_get,
    blob_ref,
    blob_release,
    delete_notepad,
    expired,
    head_key,
    log_key,
    log_prefix,
    part,
    read_head,
    scan_first,
    scan_prefix,
    set_expiry,
)
from ..notes import purge_expired as notes_purge_expired
from . import texts
from .budget import DEFAULT_BUDGETS, MAX_CONTENT_BYTES, Budget, estimate_tokens

__all__ = ["Notepad", "NoteResult", "Version", "purge_expired"]

_MAX_REF = 2048             # longest ref, in characters
_MAX_HISTORY = 10_000       # largest history() limit
_MAX_VERSION = (1 << 63) - 1
_SPACE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
#: a version record's "k": the kind of space that wrote it (a record written before "k" has none)
_KIND = {True: "l", False: "t"}  # a list space, a text space


# -- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NoteResult:
    """The outcome of one notepad operation (JSON-ready with :meth:`to_dict`).

    Attributes:
        ok: False only when a budget rejected the change (then nothing changed).
        space, action: what was called.
        version: the space's version after the call (0: never written).
        changed: whether a new version was written.
        used, budget, unit: the space's size after the call, its limit (None: no
            budget) and the unit of both.
        message: the text to show the model (success, warning or rejection).
        warning: set when the content was truncated.
        error: the rejection text when ``ok`` is False.
        details: counts such as ``original`` (truncation), ``current``, ``added``
            and ``combined`` (rejection), ``replacements``, ``dropped`` (refs_add: the
            refs dropped) and ``ignored`` (refs_set: the items not kept).
    """

    ok: bool
    space: str
    action: str
    version: int
    changed: bool
    used: int
    budget: int | None
    unit: str
    message: str
    warning: str | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: the fields, ``details`` merged in, None warning/error left out."""
        out: dict[str, Any] = {
            "ok": self.ok, "space": self.space, "action": self.action, "version": self.version,
            "changed": self.changed, "used": self.used, "budget": self.budget, "unit": self.unit,
            "message": self.message,
        }
        if self.warning is not None:
            out["warning"] = self.warning
        if self.error is not None:
            out["error"] = self.error
        out.update(self.details)
        return out


@dataclass(frozen=True)
class Version:
    """One version of a space: its number, content hash, size in characters, time and action."""

    version: int
    sha256: str
    chars: int
    created_at: float
    action: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return asdict(self)


def purge_expired(store: NotesHost) -> int:
    """Delete every notepad of ``store`` whose ttl has run out; return how many were deleted.

    ``Store.gc()`` does it too (see :func:`blobpad.notes.purge_expired`).
    """
    return store.engine.write(lambda txn: notes_purge_expired(txn, store.now()), frees=True)


# -- argument checks --------------------------------------------------------------------


def _check_size(action: str, space: str, size: int) -> None:
    """Refuse content of ``size`` UTF-8 bytes for a space: a space holds at most MAX_CONTENT_BYTES."""
    if size > MAX_CONTENT_BYTES:
        raise InvalidArgument(
            f"{action}: {space} would be {size} bytes; a space holds at most {MAX_CONTENT_BYTES} bytes "
            f"(1 MiB): rewrite it shorter with {texts.SETTERS.get(space, 'write')}"
        )


def _check_text(label: str, value: object) -> bytes:
    """Validate a text argument; return its UTF-8 encoding."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{label} must be a string, not {typename(value)}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{label} contains lone surrogates; pass valid Unicode text") from None
    if len(raw) > MAX_CONTENT_BYTES:
        raise InvalidArgument(
            f"{label} is {len(raw)} bytes; a notepad accepts at most {MAX_CONTENT_BYTES} bytes (1 MiB) per call "
            "and per space", hint=HINT_NOTEPAD_SIZE,
        )
    return raw


def _check_action(action: object) -> None:
    if not isinstance(action, str) or not 1 <= len(action) <= 64:
        raise InvalidArgument(f"action must be a name of 1 to 64 characters, not {describe(action)}")
    try:
        action.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("action contains lone surrogates; pass valid Unicode text") from None


def _check_version(version: object) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= _MAX_VERSION:
        raise InvalidArgument(f"version must be a positive integer (see history()), not {describe(version)}")


def _newest(items: list[str], limit: int) -> tuple[list[str], list[str]]:
    """(the newest ``limit`` of ``items``, the older ones dropped), as a refs list over its budget keeps them."""
    cut = max(0, len(items) - limit)
    return items[cut:], items[:cut]


def _dropped_words(dropped: list[str]) -> str:
    """What a result says of the refs a budget dropped (the first ten, described)."""
    return "dropped the oldest: " + ", ".join(describe(d) for d in dropped[:10]) + (" ..." if len(dropped) > 10 else "")


def _ref_problem(ref: object) -> str | None:
    """Why ``ref`` is not a valid ref, or None."""
    if not isinstance(ref, str):
        return f"a ref must be a string, not {typename(ref)}"
    if not ref.strip():
        return "a ref must be a non-empty string (a file path, URL or identifier)"
    if len(ref) > _MAX_REF:
        return f"a ref is at most {_MAX_REF} characters; this one has {len(ref)}"
    if ref.splitlines() != [ref]:  # every line break str.splitlines() knows (\v, \f, \x85, \u2028...)
        return "a ref is one line: it must not contain line breaks"
    try:
        ref.encode("utf-8")
    except UnicodeEncodeError:
        return "a ref contains lone surrogates; pass valid Unicode text"
    return None


def _join(first: str, second: str) -> str:
    """``first`` then ``second``, on separate lines unless either side is empty or already breaks
    (a line end of any kind: ``\n``, ``\r\n``, ``\r``)."""
    if first and second and not first.endswith(("\n", "\r")) and not second.startswith(("\n", "\r")):
        return f"{first}\n{second}"
    return first + second


# -- the notepad ------------------------------------------------------------------------


@dataclass
class _Outcome:
    """What an operation decided inside its transaction (computed again if it retries)."""

    new: str | list[str] | None  # None: rejected or unchanged
    message_kind: str = "updated"  # updated, truncated, rejected, or a literal message
    details: dict[str, Any] = field(default_factory=dict)
    message: str | None = None


class Notepad:
    """One session's notepad in a store: ``store.notepad(session, **options)``.

    Spaces and their default budgets (:data:`~blobpad.notepad.DEFAULT_BUDGETS`;
    ``budgets=`` overrides them or adds spaces):

    ============== ======================== =====================================
    space          default budget           the seed's methods
    ============== ======================== =====================================
    ``notes``      4000 characters          seed 001 set_notes, append_notes
    ``plan``       2000 characters          seed 001 set_plan
    ``refs``       50 items (a list)        seed 001 refs_add/remove/set
    ``notepad``    none (1 MiB hard cap)    seed 002 read/write/update_notepad
    ``scratchpad`` 2000 tokens              seed 004 scratchpad
    ============== ======================== =====================================

    Every change is one write transaction and a new version (:meth:`history`,
    :meth:`revert`), and answers a :class:`NoteResult`.  A full replacement over
    budget keeps the start that fits and warns; an incremental change (append,
    prepend, find_replace, delete) over budget is rejected: nothing changes and the
    result has ``ok`` False with the counts.  Errors: :class:`~blobpad.InvalidArgument`
    for a call the caller must fix (bad types, unknown space, content over 1 MiB,
    absent ``find`` or ref); :class:`~blobpad.NotFound` only for an unknown or pruned
    version.  The seeds' own names are thin aliases at the end of the class.

    Parameters:
        store: an open :class:`~blobpad.Store`.
        session: the session id (a string, "" allowed).
        budgets: ``{space: Budget | int | None}`` merged over :data:`DEFAULT_BUDGETS`; an
            int keeps the space's default unit (characters for a new space), None
            removes a text space's budget.  Budgets belong to this handle, not to the
            store: pass the same ones in every process.
        counter: ``(text) -> int`` counting tokens for token budgets (default
            :func:`estimate_tokens`).
        ttl: seconds: each change sets the notepad to expire that long after it; an
            expired notepad reads as empty and is deleted by its next change, by
            ``Store.gc()``, by :func:`purge_expired`, or by the sweep that follows a
            put (as expired entries are).  None (default): a change
            removes any expiry.
        max_versions: versions kept per space; older ones are pruned on change.
    """

    def __init__(
        self,
        store: NotesHost,
        session: str,
        *,
        budgets: Mapping[str, Budget | int | None] | None = None,
        counter: Callable[[str], int] | None = None,
        ttl: float | None = None,
        max_versions: int = 100,
    ) -> None:
        check_str("session", session, allow_none=False)
        if counter is not None and not callable(counter):
            raise InvalidArgument(f"counter must be a function (text) -> int, not {typename(counter)}")
        ttl = check_ttl(ttl)
        if not isinstance(max_versions, int) or isinstance(max_versions, bool) or not 1 <= max_versions <= _MAX_VERSION:
            raise InvalidArgument(f"max_versions must be a positive integer, not {describe(max_versions)}")
        self.store = store
        self.session = session
        self.counter: Callable[[str], int] = counter or estimate_tokens
        self.ttl = float(ttl) if ttl is not None else None
        self.max_versions = max_versions
        self.budgets: dict[str, Budget] = dict(DEFAULT_BUDGETS)
        if budgets is not None:
            if not isinstance(budgets, Mapping):
                raise InvalidArgument(f"budgets must be a mapping of space name to Budget, not {typename(budgets)}")
            for name, value in budgets.items():
                self.budgets[name] = self._make_budget(name, value)
        self._options: dict[str, Any] = dict(
            budgets=dict(self.budgets), counter=counter, ttl=ttl, max_versions=max_versions
        )

    def _make_budget(self, name: object, value: Budget | int | None) -> Budget:
        if not isinstance(name, str) or not _SPACE_NAME.fullmatch(name):
            raise InvalidArgument(
                f"space names are 1-32 lowercase letters, digits and underscores starting with a letter, not {describe(name)}"
            )
        default = DEFAULT_BUDGETS.get(name)
        if isinstance(value, Budget):
            budget = value
        elif value is None or (isinstance(value, int) and not isinstance(value, bool)):
            budget = Budget(value, default.unit if default else "chars")
        else:
            raise InvalidArgument(
                f"the budget of {describe(name)} must be a Budget, a positive integer or None, not {describe(value)}"
            )
        if default is not None and (default.unit == "items") != (budget.unit == "items"):
            kind = "a list (unit 'items')" if default.unit == "items" else "a text space (unit 'chars' or 'tokens')"
            raise InvalidArgument(f"space {describe(name)} is {kind}; its budget must keep that kind")
        return budget

    def __repr__(self) -> str:
        return f"<blobpad.Notepad session={self.session!r} of {self.store.path!r}>"

    # -- reading -----------------------------------------------------------------------------

    def read(self, space: str = "notepad", *, version: int | None = None) -> str:
        """The text of a space ("" when never written or expired), or of one of its versions."""
        budget = self._budget(space, list_space=False)
        value = self._read_value(space, budget, version)
        assert isinstance(value, str)
        return value

    def refs(self, space: str = "refs") -> list[str]:
        """The refs, oldest first."""
        budget = self._budget(space, list_space=True)
        value = self._read_value(space, budget, None)
        assert isinstance(value, list)
        return value

    def spaces(self) -> dict[str, int]:
        """The non-empty spaces of this notepad and their current versions."""
        now = self.store.now()
        out: dict[str, int] = {}
        with self.store.engine.read() as txn:
            if expired(txn, self.session, now):
                return out
            prefix = b"H" + part(self.session)
            for key, value in scan_prefix(txn, prefix):
                (length,) = struct.unpack_from(">I", key, len(prefix))
                name = key[len(prefix) + 4:len(prefix) + 4 + length].decode("utf-8")
                version, digest = HEAD.unpack(value)
                data = blob_get(txn, digest)
                if data not in (b"", b"[]"):
                    out[name] = version
        return out

    def version(self, space: str = "notepad") -> int:
        """The current version of a space (0 when never written)."""
        budget = self._budget(space)
        now = self.store.now()
        with self.store.engine.read() as txn:
            return self._current(txn, space, budget, now)[0]

    def history(self, space: str = "notepad", *, limit: int = 50) -> list[Version]:
        """The kept versions of a space, newest first (at most ``limit``)."""
        self._budget(space)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= _MAX_HISTORY:
            raise InvalidArgument(f"limit must be an integer from 1 to {_MAX_HISTORY}, not {describe(limit)}")
        prefix = log_prefix(self.session, space)
        now = self.store.now()
        out: list[Version] = []
        with self.store.engine.read() as txn:
            if expired(txn, self.session, now):
                return out
            for key, value in txn.scan(SPACE, prefix, prefix_end(prefix), reverse=True):
                rec = json.loads(value)
                version = int.from_bytes(key[-VER.size:], "big")
                if out and out[-1].version != version + 1:  # versions are pruned oldest first: a run, never a gap
                    raise CorruptData(
                        f"the history of {space!r} in session {describe(self.session)} lacks versions "
                        f"{version + 1} to {out[-1].version - 1} (their records are gone)", hint=HINT_VERIFY,
                    )
                out.append(Version(version, rec["h"], rec["c"], rec["t"], rec["a"]))
                if len(out) >= limit:
                    break
        return out

    # -- changing a text space ---------------------------------------------------------------

    def write(self, content: str, *, space: str = "notepad", action: str = "write") -> NoteResult:
        """Replace the whole space (``""`` clears it).

        Over budget, the start that fits is kept and the result carries a warning
        (``details["original"]``: the size given).  ``action`` is the name recorded in
        the space's history and the result (the seeds' setters pass theirs).
        """
        budget = self._budget(space, list_space=False)
        _check_text("content", content)
        _check_action(action)
        return self._replace(space, budget, action, content)

    def append(self, content: str, *, space: str = "notepad", action: str = "append", join: bool = True) -> NoteResult:
        """Add ``content`` at the end; rejected (``ok`` False, nothing changed) if over budget.

        With ``join`` (the default) the two are joined with a newline when neither side
        has one, and the budget is checked on the joined text; ``join=False`` appends
        ``content`` exactly as it is (seeds 001 and 004: "combined" is the two texts end to
        end).  A rejection's ``added`` is the count of ``content`` itself.  ``action``: as in
        :meth:`write`.
        """
        budget = self._budget(space, list_space=False)
        _check_text("content", content)
        _check_action(action)
        check_bool("join", join)

        def decide(current: str | list[str], _txn: ReadTxn) -> _Outcome:
            assert isinstance(current, str)
            new = _join(current, content) if join else current + content
            return self._grow(space, budget, action, current, new, {}, added=content)

        return self._mutate(space, budget, action, decide)

    def prepend(self, content: str, *, space: str = "notepad") -> NoteResult:
        """Add ``content`` at the start (on its own line, as :meth:`append` joins); rejected,
        unchanged, if over budget."""
        budget = self._budget(space, list_space=False)
        _check_text("content", content)

        def decide(current: str | list[str], _txn: ReadTxn) -> _Outcome:
            assert isinstance(current, str)
            return self._grow(space, budget, "prepend", current, _join(content, current), {})

        return self._mutate(space, budget, "prepend", decide)

    def find_replace(self, find: str, replace: str, *, replace_all: bool = False, space: str = "notepad") -> NoteResult:
        """Replace the first occurrence of ``find`` (every one with ``replace_all``).

        ``find`` must occur: an absent ``find`` raises InvalidArgument (nothing is
        silently skipped).  An edit that would go over budget is rejected.
        """
        return self._edit(space, "find_replace", find, replace, replace_all, label="find")

    def delete_text(self, text: str, *, replace_all: bool = False, space: str = "notepad") -> NoteResult:
        """Remove the first occurrence of ``text`` (every one with ``replace_all``); absent -> InvalidArgument."""
        return self._edit(space, "delete", text, "", replace_all, label="content")

    def update(
        self,
        operation: str,
        *,
        content: str | None = None,
        find: str | None = None,
        replace: str | None = None,
        replace_all: bool = False,
        space: str = "notepad",
    ) -> NoteResult:
        """Seed 002's ``update_notepad``: operation find_replace, append, prepend or delete."""
        ops = ("find_replace", "append", "prepend", "delete")
        if not isinstance(operation, str) or operation not in ops:
            raise InvalidArgument(f"operation must be one of {', '.join(ops)}, not {describe(operation)}")
        check_bool("replace_all", replace_all)
        if operation == "find_replace":
            if find is None:
                raise InvalidArgument("find_replace needs find: the exact text to replace")
            if replace is None:
                raise InvalidArgument('find_replace needs replace: the new text ("" removes the found text)')
            return self.find_replace(find, replace, replace_all=replace_all, space=space)
        if content is None:
            what = "the text to remove" if operation == "delete" else "the text to add"
            raise InvalidArgument(f"{operation} needs content: {what}")
        if operation == "append":
            return self.append(content, space=space)
        if operation == "prepend":
            return self.prepend(content, space=space)
        return self.delete_text(content, replace_all=replace_all, space=space)

    # -- changing a list space (refs) --------------------------------------------------------

    def refs_add(self, ref: str, *, space: str = "refs") -> NoteResult:
        """Add one ref as the newest; at capacity drop the oldest (whole refs only).

        A ref already present moves to the newest position instead of being doubled.
        """
        budget = self._budget(space, list_space=True)
        problem = _ref_problem(ref)
        if problem:
            raise InvalidArgument(f"refs.add: {problem}")
        assert budget.limit is not None

        def decide(current: str | list[str], _txn: ReadTxn) -> _Outcome:
            assert isinstance(current, list)
            if ref in current:
                new = [r for r in current if r != ref] + [ref]
                note = "already present; moved to newest" if new != current else "already present"
                return _Outcome(new, details={"dropped": []}, message=f"ref {note} ({len(new)}/{budget.limit} refs)")
            new, dropped = _newest(current + [ref], budget.limit)
            msg = f"ref added ({len(new)}/{budget.limit} refs)"
            if dropped:
                msg += "; " + _dropped_words(dropped)
            return _Outcome(new, details={"dropped": dropped}, message=msg)

        return self._mutate(space, budget, "refs.add", decide)

    def refs_remove(self, ref: str, *, space: str = "refs") -> NoteResult:
        """Remove one ref by exact match; an absent ref raises InvalidArgument."""
        budget = self._budget(space, list_space=True)
        problem = _ref_problem(ref)
        if problem:
            raise InvalidArgument(f"refs.remove: {problem}")

        def decide(current: str | list[str], _txn: ReadTxn) -> _Outcome:
            assert isinstance(current, list)
            if ref not in current:
                shown = ", ".join(describe(r, 60) for r in current[-10:]) or "none"
                raise InvalidArgument(
                    f"refs.remove: {describe(ref)} is not in refs (exact match needed); current refs"
                    f"{' (newest 10)' if len(current) > 10 else ''}: {shown}"
                )
            new = list(current)
            new.remove(ref)
            return _Outcome(new, message=f"ref removed ({len(new)}/{budget.limit} refs)")

        return self._mutate(space, budget, "refs.remove", decide)

    def refs_set(self, items: Iterable[object], *, space: str = "refs") -> NoteResult:
        """Replace all refs with the first valid ones, up to the budget (50).

        Non-strings (and empty, multi-line or over-long strings, and repeats) are
        silently dropped; ``details["ignored"]`` counts them and the items past the cap.
        """
        budget = self._budget(space, list_space=True)
        assert budget.limit is not None
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, list | tuple):
            raise InvalidArgument(f"refs.set: items must be a list of strings, not {typename(items)}")
        kept: dict[str, None] = {}  # in order, each once: one pass, and none past the budget
        for item in items:
            if len(kept) >= budget.limit:
                break
            if isinstance(item, str) and item not in kept and _ref_problem(item) is None:
                kept[item] = None
        ignored = len(items) - len(kept)
        limit = budget.limit
        refs = list(kept)
        return self._mutate(space, budget, "refs.set", lambda _cur, _txn: _Outcome(
            refs, details={"ignored": ignored}, message=f"refs replaced ({len(refs)}/{limit} refs)"))

    # -- versions and lifecycle --------------------------------------------------------------

    def revert(self, version: int, *, space: str = "notepad") -> NoteResult:
        """Make ``version``'s content current again, as a new version (so a revert can be undone).

        An unknown or pruned version raises NotFound.  If the budget shrank since, a
        text over it is truncated with a warning, like a replacement.
        """
        budget = self._budget(space)
        _check_version(version)
        session = self.session

        def decide(_current: str | list[str], txn: ReadTxn) -> _Outcome:
            raw = txn.get(SPACE, log_key(session, space, version))
            if raw is None:
                raise self._no_version(txn, space, version)
            record = json.loads(raw)
            old = self._decode(space, budget, record, blob_get(txn, bytes.fromhex(record["h"])))
            if budget.limit is None:
                return _Outcome(old)
            if isinstance(old, list):  # a list over a budget that shrank since: its newest items, as refs_add keeps
                kept, dropped = _newest(old, budget.limit)
                if not dropped:
                    return _Outcome(old)
                return _Outcome(
                    kept, "truncated", dict(original=len(old), dropped=dropped),
                    message=f"{space} reverted to version {version} truncated to its newest {budget.limit} of "
                            f"{len(old)} refs (the budget); " + _dropped_words(dropped),
                )
            original = self._count(budget, old)
            if original <= budget.limit:
                return _Outcome(old)
            return _Outcome(self._truncate(budget, old), "truncated", dict(original=original))

        return self._mutate(space, budget, f"revert to {version}", decide)

    def spawn(self, child: str, *, copy_notepad: bool = False) -> Notepad:
        """The notepad of a sub-session: empty, or a copy of this one with ``copy_notepad``.

        Raises InvalidArgument if ``child`` is this session or already has a notepad.
        After this call the two notepads are independent.
        """
        check_bool("copy_notepad", copy_notepad)
        pad = Notepad(self.store, child, **self._options)
        if child == self.session:
            raise InvalidArgument("a sub-session needs its own session id, not its parent's")
        now = self.store.now()
        expires_at = now + self.ttl if self.ttl is not None else None
        parent = self.session
        action = "fork" if copy_notepad else "spawn"

        def txn_fn(txn: WriteTxn) -> None:
            if expired(txn, child, now):
                delete_notepad(txn, child)
            if scan_prefix(txn, b"H" + part(child)):
                raise InvalidArgument(
                    f"session {describe(child, 60)} already has a notepad; give the sub-session a new id "
                    "(or delete_session() the old one first)"
                )
            if not copy_notepad or expired(txn, parent, now):
                return
            prefix = b"H" + part(parent)
            copied = False
            for key, value in scan_prefix(txn, prefix):
                space_part = key[len(prefix):]
                _, digest = HEAD.unpack(value)
                data = blob_get(txn, digest)
                blob_ref(txn, data, digest)
                log = json.loads(txn.get(SPACE, b"L" + part(parent) + space_part + value[:VER.size]) or b"{}")
                record = {"h": digest.hex(), "c": log.get("c", 0), "t": now, "a": action,
                          **({"k": log["k"]} if "k" in log else {})}
                txn.put(SPACE, b"L" + part(child) + space_part + VER.pack(1), json.dumps(record).encode())
                txn.put(SPACE, b"H" + part(child) + space_part, HEAD.pack(1, digest))
                copied = True
            if copied:
                set_expiry(txn, child, expires_at)

        self.store.engine.write(txn_fn)
        return pad

    def delete(self) -> int:
        """Delete this notepad: every space and version; return how many spaces there were."""
        session = self.session
        return self.store.engine.write(lambda txn: delete_notepad(txn, session), frees=True)

    # -- blocks for the model's context ------------------------------------------------------

    def context_section(self, space: str = "notepad") -> str:
        """Seed 002's system-prompt section: ``## Session Notepad``, then the content of
        ``space`` or, while it is empty, the hint to use the notepad."""
        return texts.notepad_section(self.read(space))

    def render_spaces(self, spaces: Iterable[str] = ("notes", "plan", "refs")) -> str:
        """Seed 001's block prepended to each message: a ``## Notes``/``## Plan``/``## Refs``
        section per non-empty space between the scratchpad's header and footer; "" if all are empty."""
        if isinstance(spaces, str):
            names = [spaces]
        elif isinstance(spaces, Iterable):
            names = list(spaces)
        else:
            raise InvalidArgument(f"spaces must be a list of space names, not {typename(spaces)}")
        budgets = [(name, self._budget(name)) for name in names]
        now = self.store.now()
        with self.store.engine.read() as txn:
            values = [(name, self._current(txn, name, budget, now)[1]) for name, budget in budgets]
        return texts.spaces_block(values)

    def scratchpad_block(self) -> str:
        """Seed 004's block for the next user message: ``[Session Scratchpad - ...]``, the
        scratchpad, ``[End Scratchpad]``; "" when the scratchpad is empty."""
        return texts.scratchpad_block(self.read("scratchpad"))

    def scratchpad_guidance(self, tool: str = "session_scratchpad") -> str:
        """Seed 004's system-prompt section with this notepad's scratchpad budget
        (``tool``: see :func:`~blobpad.notepad.scratchpad_guidance`)."""
        limit = self.budgets["scratchpad"].limit
        return texts.scratchpad_guidance(limit if limit is not None else 2000, tool)

    # -- internals ---------------------------------------------------------------------------

    def _budget(self, space: object, *, list_space: bool | None = None) -> Budget:
        if not isinstance(space, str):
            raise InvalidArgument(f"space must be a string, not {typename(space)}")
        budget = self.budgets.get(space)
        if budget is None:
            raise InvalidArgument(
                f"unknown space {describe(space, 40)}; the spaces are: {', '.join(self.budgets)} "
                "(add one with budgets={name: Budget(...)})"
            )
        if list_space is not None and (budget.unit == "items") != list_space:
            if list_space:
                raise InvalidArgument(f"space {space!r} holds text, not a list: use read/write/append on it")
            raise InvalidArgument(f"space {space!r} is a list of refs: use refs(), refs_add, refs_remove, refs_set")
        return budget

    def _count(self, budget: Budget, value: str | list[str]) -> int:
        if isinstance(value, list):
            return len(value)
        if budget.unit == "chars":
            return len(value)
        n = self.counter(value)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidArgument(f"the token counter returned {describe(n)}; it must return a non-negative integer")
        return n

    def _truncate(self, budget: Budget, text: str) -> str:
        assert budget.limit is not None
        if budget.unit == "chars":
            return text[:budget.limit]
        empty = self._count(budget, "")
        if empty > budget.limit:  # no prefix fits: "truncated" would store nothing and say it fit
            raise InvalidArgument(
                f"the counter counts even empty text as {describe(empty)} {budget.unit}, more than the budget of {budget.limit}: "
                "no text fits; give a larger budget or a counter that counts only the text"
            )
        lo, hi = 0, len(text)  # the longest prefix whose count fits (counts grow with length)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._count(budget, text[:mid]) <= budget.limit:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]

    @staticmethod
    def _encode(value: str | list[str]) -> bytes:
        if isinstance(value, list):
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return value.encode("utf-8")

    @staticmethod
    def _decode(space: str, budget: Budget, record: dict[str, Any], data: bytes) -> str | list[str]:
        """A version's value, as the kind of space this handle declares ``space`` (see :data:`_KIND`).

        A space written as a list by one handle and read as text by another (or the
        reverse: budgets belong to the handle) is an InvalidArgument naming both kinds,
        never text taken apart as a list or a list shown as its JSON.
        """
        listed = budget.unit == "items"
        value: Any = None
        if listed:
            try:
                value = json.loads(data) if data else []
            except ValueError:
                value = None
        kind = record.get("k")
        fits = kind == _KIND[listed] if kind is not None else (
            not listed or isinstance(value, list) and all(isinstance(v, str) for v in value))
        if not fits:
            held, declared = ("text", "a list (unit 'items')") if listed else ("a list of refs", "text")
            raise InvalidArgument(
                f"space {space!r} of this session holds {held}, but this handle declares it {declared}: "
                "declare it as the handle that wrote it did (budgets belong to the handle: pass the same in every process)"
            )
        return value if listed else data.decode("utf-8")

    def _current(self, txn: ReadTxn, space: str, budget: Budget, now: float) -> tuple[int, str | list[str]]:
        empty: str | list[str] = [] if budget.unit == "items" else ""
        if expired(txn, self.session, now):
            return 0, empty
        head = read_head(txn, self.session, space)
        if head is None:
            if scan_first(txn, log_prefix(self.session, space)):
                raise CorruptData(f"the notepad's {space} has versions but its current-version record is missing",
                                  hint=HINT_VERIFY)
            return 0, empty
        log = txn.get(SPACE, log_key(self.session, space, head[0]))
        record = None if log is None else json.loads(log)
        if record is None or record.get("h") != head[1].hex():
            raise CorruptData(f"the notepad's {space}: its current version {head[0]} is missing or differs",
                              hint=HINT_VERIFY)
        return head[0], self._decode(space, budget, record, blob_get(txn, head[1]))

    def _read_value(self, space: str, budget: Budget, version: int | None) -> str | list[str]:
        now = self.store.now()
        with self.store.engine.read() as txn:
            if version is None:
                return self._current(txn, space, budget, now)[1]
            _check_version(version)
            if expired(txn, self.session, now):  # its versions are gone with it, whatever gc() has not removed yet
                raise NotFound(f"{space} of this session has no versions; nothing to read or revert")
            raw = txn.get(SPACE, log_key(self.session, space, version))
            if raw is None:
                raise self._no_version(txn, space, version)
            record = json.loads(raw)
            return self._decode(space, budget, record, blob_get(txn, bytes.fromhex(record["h"])))

    def _no_version(self, txn: ReadTxn, space: str, version: int) -> NotFound:
        kept = [int.from_bytes(k[-VER.size:], "big") for k, _ in scan_prefix(txn, log_prefix(self.session, space))]
        if not kept:
            return NotFound(f"{space} of this session has no versions; nothing to read or revert")
        return NotFound(
            f"{space} has no version {version}; the versions kept are {kept[0]} to {kept[-1]} (see history())"
        )

    def _mutate(
        self, space: str, budget: Budget, action: str, decide: Callable[[str | list[str], ReadTxn], _Outcome]
    ) -> NoteResult:
        """Read the space, ``decide`` the change and write it, all in one write transaction."""
        now = self.store.now()
        expires_at = now + self.ttl if self.ttl is not None else None
        session = self.session
        max_versions = self.max_versions

        def txn_fn(txn: WriteTxn) -> tuple[int, bool, int, _Outcome]:
            if expired(txn, session, now):
                delete_notepad(txn, session)
            version, current = self._current(txn, space, budget, now)
            outcome = decide(current, txn)
            if outcome.new is None or outcome.new == current:
                return version, False, self._count(budget, current), outcome
            used = self._count(budget, outcome.new)  # before the commit: a counter that fails changes nothing
            data = self._encode(outcome.new)
            _check_size(action, space, len(data))
            digest = blob_ref(txn, data)
            version += 1
            record = {"h": digest.hex(), "c": len(outcome.new), "t": now, "a": action,
                      "k": _KIND[isinstance(outcome.new, list)]}
            txn.put(SPACE, log_key(session, space, version), json.dumps(record).encode())
            txn.put(SPACE, head_key(session, space), HEAD.pack(version, digest))
            if version > max_versions:
                start = log_prefix(session, space)
                for key, value in list(txn.scan(SPACE, start, log_key(session, space, version - max_versions + 1))):
                    blob_release(txn, bytes.fromhex(json.loads(value)["h"]))
                    txn.delete(SPACE, key)
            set_expiry(txn, session, expires_at)
            return version, True, used, outcome

        version, changed, used, outcome = self.store.engine.write(txn_fn)
        kind = outcome.message_kind
        rejected = kind == "rejected"
        text = outcome.message or texts.result_message(space, budget, kind, action, used, outcome.details)
        return NoteResult(
            ok=not rejected, space=space, action=action, version=version, changed=changed, used=used,
            budget=budget.limit, unit=budget.unit, message=text,
            warning=text if kind == "truncated" else None, error=text if rejected else None,
            details=dict(outcome.details),
        )

    def _grow(self, space: str, budget: Budget, action: str, current: str, new: str, extra: dict[str, Any],
              *, added: str | None = None) -> _Outcome:
        """The outcome of an incremental edit: rejected when ``new`` is over budget.  A rejection's
        ``added`` counts the text ``added`` (what an append adds), else the growth."""
        if budget.limit is not None:
            combined = self._count(budget, new)
            if combined > budget.limit:
                cur = self._count(budget, current)
                grew = max(0, combined - cur) if added is None else self._count(budget, added)
                return _Outcome(None, "rejected", dict(current=cur, added=grew, combined=combined))
        return _Outcome(new, details=extra)

    def _replace(self, space: str, budget: Budget, action: str, content: str) -> NoteResult:
        if budget.limit is not None:
            original = self._count(budget, content)
            if original > budget.limit:
                kept = self._truncate(budget, content)
                return self._mutate(space, budget, action,
                                    lambda _cur, _txn: _Outcome(kept, "truncated", dict(original=original)))
        return self._mutate(space, budget, action, lambda _cur, _txn: _Outcome(content))

    def _edit(self, space: str, action: str, find: str, replace: str, replace_all: bool, *, label: str) -> NoteResult:
        budget = self._budget(space, list_space=False)
        _check_text(label, find)
        if not find:
            raise InvalidArgument(f"{action}: {label} must not be empty; pass the exact text to {action}")
        _check_text("replace", replace)
        check_bool("replace_all", replace_all)

        def decide(current: str | list[str], _txn: ReadTxn) -> _Outcome:
            assert isinstance(current, str)
            count = current.count(find)
            if not count:
                where = "is empty" if not current else "does not contain it"
                raise InvalidArgument(
                    f"{action}: {label} text {describe(find)} was not found: {space} {where}. Read {space} and copy "
                    "the exact text (whitespace and case matter)"
                )
            n = count if replace_all else 1
            # the size first: n copies of a long replacement could make gigabytes before any check
            grows = len(replace.encode("utf-8")) - len(find.encode("utf-8"))
            _check_size(action, space, len(current.encode("utf-8")) + n * grows)
            new = current.replace(find, replace, n)
            return self._grow(space, budget, action, current, new, {"replacements": n})

        return self._mutate(space, budget, action, decide)

    def load_legacy_notes(self, source: str = "scratchpad") -> NoteResult | None:
        """Seed 001's backwards compatibility: notes never written take the old single-key scratchpad.

        Seed 001 keeps notes, plan and refs under keys of their own and loads the old
        single-key scratchpad (seed 004's, the ``scratchpad`` space here) into notes on
        first use.  When ``notes`` has never been written in this session and ``source``
        holds text, that text becomes notes' first version (action ``load_legacy``),
        cut to notes' budget with a warning as :meth:`write` cuts; ``source`` is left as
        it is.  Answers that change, or None when there was nothing to load (notes were
        written before, even if emptied since, or ``source`` is empty) or when called
        inside :meth:`Store.snapshot` (which refuses writes: the next call outside loads).  The seed 001
        names below, and the seed001 tool profile, call it before they act.
        """
        budget = self._budget("notes", list_space=False)
        legacy = self._budget(source, list_space=False)
        if self.store.engine.pinned_here():  # a read inside Store.snapshot() cannot write: loaded at the next use
            return None
        now = self.store.now()
        with self.store.engine.read() as txn:  # the common case, nothing to load, costs no write
            if read_head(txn, self.session, "notes") is not None or not self._current(txn, source, legacy, now)[1]:
                return None

        def decide(_current: str | list[str], txn: ReadTxn) -> _Outcome:
            if read_head(txn, self.session, "notes") is not None:  # written meanwhile: nothing to load
                return _Outcome(None)
            text = self._current(txn, source, legacy, now)[1]
            assert isinstance(text, str)
            original = self._count(budget, text)
            if budget.limit is not None and original > budget.limit:
                return _Outcome(self._truncate(budget, text), "truncated", dict(original=original, source=source))
            return _Outcome(text or None, details=dict(source=source))

        result = self._mutate("notes", budget, "load_legacy", decide)
        return result if result.changed else None

    # -- the seeds' names --------------------------------------------------------------------
    # Each seed's tool names, kept so that code written against a seed works as is; every
    # one is a single call of a method above, which documents the behaviour.

    def read_notepad(self) -> dict[str, str]:
        """Seed 002's ``read_notepad``: ``{"content": read()}``."""
        return {"content": self.read("notepad")}

    def write_notepad(self, content: str) -> NoteResult:
        """Seed 002's ``write_notepad``: :meth:`write` on the notepad space."""
        return self.write(content, space="notepad")

    def update_notepad(
        self,
        operation: str,
        *,
        content: str | None = None,
        find: str | None = None,
        replace: str | None = None,
        replace_all: bool = False,
    ) -> NoteResult:
        """Seed 002's ``update_notepad``: :meth:`update` on the notepad space."""
        return self.update(operation, content=content, find=find, replace=replace, replace_all=replace_all)

    def set_notes(self, content: str) -> NoteResult:
        """Seed 001's ``set_notes``: :meth:`write` on notes (4,000 characters by default)."""
        self.load_legacy_notes()
        return self.write(content, space="notes", action="set_notes")

    def append_notes(self, content: str, *, join: bool = False) -> NoteResult:
        """Seed 001's ``append_notes``: :meth:`append` to notes, end to end as the seed says (``join``
        puts ``content`` on a line of its own, as ``blobpad notes append`` does): rejected,
        unchanged, if the two together would exceed the budget (4,000 characters by default)."""
        self.load_legacy_notes()
        return self.append(content, space="notes", action="append_notes", join=join)

    def set_plan(self, content: str) -> NoteResult:
        """Seed 001's ``set_plan``: :meth:`write` on plan (2,000 characters by default)."""
        self.load_legacy_notes()
        return self.write(content, space="plan", action="set_plan")

    def scratchpad(self, content: str, mode: str = "replace") -> NoteResult:
        """Seed 004's ``session.scratchpad``: :meth:`write` (mode "replace") or :meth:`append`
        (mode "append", end to end: ``join=False``) on the scratchpad (2,000 tokens by default)."""
        if mode not in ("replace", "append"):
            raise InvalidArgument(f'mode must be "replace" or "append", not {describe(mode)}')
        if mode == "append":
            return self.append(content, space="scratchpad", join=False)
        return self.write(content, space="scratchpad", action="replace")

    def scratchpad_content(self) -> str | None:
        """Seed 004's ``getScratchpadContent``: :meth:`read` of the scratchpad, None when empty."""
        return self.read("scratchpad") or None

    def fork(self, child: str) -> Notepad:
        """A forked session's notepad: :meth:`spawn` with ``copy_notepad=True``."""
        return self.spawn(child, copy_notepad=True)
