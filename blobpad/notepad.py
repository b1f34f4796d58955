"""Session notepads: a session's plan and findings, kept outside the model's context.

A :class:`Notepad` is one session's working memory in the store (keyspace
``notes``).  It has named *spaces*, each with a budget; every change is a new
*version* (content-addressed, so a version costs a few bytes when the content was
seen before), and every operation is one write transaction, so two processes
writing the same notepad never lose an update.  Deleting the session
(``Store.delete_session``) deletes its notepad; notepads never expire unless a
``ttl`` is given.

Get one with ``store.notepad(session, **options)`` (same as
``Notepad(store, session, **options)``)::

    pad = store.notepad("s1")
    pad.write("## Plan\\n- [ ] survey")             # seed 002: full replacement
    pad.update("find_replace", find="[ ]", replace="[x]")
    pad.set_plan("1. Fix auth bug\\n2. Add test")   # seed 001 spaces
    pad.refs_add("src/auth/login.ts")
    pad.scratchpad("## Plan ...", mode="append")    # seed 004, token budget
    pad.history("notepad"); pad.revert(1, space="notepad")

Spaces and default budgets (``budgets=`` overrides or adds spaces)
-----------------------------------------------------------------
============== ======================== ===================================
space          default budget           used by
============== ======================== ===================================
``notes``      4000 characters          seed 001 ``set_notes``/``append_notes``
``plan``       2000 characters          seed 001 ``set_plan``
``refs``       50 items (a list)        seed 001 ``refs.add/remove/set``
``notepad``    none (1 MiB hard cap)    seed 002 read/write/update_notepad
``scratchpad`` 2000 tokens              seed 004 replace/append
============== ======================== ===================================

Rules: a full replacement (``write``/``set_notes``/``set_plan``/``scratchpad``
mode ``"replace"``) over budget is truncated and the result carries a warning;
any incremental change (append, prepend, find_replace, delete) that would go over
budget is *rejected*: nothing changes and the result has ``ok: False`` with the
rejection text and the counts.  Tokens are counted by ``counter`` (default
:func:`estimate_tokens`, which never under-counts non-English text).

Public API
----------
``Notepad(store, session, *, budgets=None, counter=None, ttl=None, max_versions=100)``
    ``budgets``: ``{space: Budget | int | None}`` merged over :data:`DEFAULT_BUDGETS`
    (an int keeps the space's default unit; None = no budget).  ``counter``:
    ``(str) -> int`` token counter.  ``ttl``: seconds after the last change after
    which the whole notepad reads as empty and is purged (None: never).
    ``max_versions``: versions kept per space (older ones are pruned).

Text spaces (``space`` defaults to ``"notepad"``); each returns :class:`NoteResult`
unless stated:

* ``read(space="notepad", *, version=None) -> str`` ("" when unused)
* ``write(content, *, space="notepad")`` – full replacement; ``""`` clears
* ``append(content, *, space=...)`` / ``prepend(content, *, space=...)`` – joined
  with a newline when neither side has one
* ``find_replace(find, replace, *, replace_all=False, space=...)`` – first
  occurrence, or all; ``find`` absent -> InvalidArgument
* ``delete_text(text, *, replace_all=False, space=...)`` – remove text; absent -> InvalidArgument
* ``update(operation, *, content=None, find=None, replace=None, replace_all=False, space="notepad")``
  – seed 002 ``update_notepad`` (operation in find_replace, append, prepend, delete)
* ``read_notepad() -> {"content": str}``, ``write_notepad(content) -> NoteResult``,
  ``update_notepad(operation, **kw) -> NoteResult`` – seed 002 tool shapes

Seed 001 (``notes``, ``plan``, ``refs``):

* ``set_notes(content)``, ``append_notes(content)``, ``set_plan(content)``
* ``refs(space="refs") -> list[str]`` (oldest first)
* ``refs_add(ref)``, ``refs_remove(ref)``, ``refs_set(items)``
* ``render_spaces(spaces=("notes", "plan", "refs")) -> str`` – the block prepended
  to each message, only non-empty spaces; "" when all are empty

Seed 004 (``scratchpad``):

* ``scratchpad(content, mode="replace")`` – mode "replace" or "append"
* ``scratchpad_content() -> str | None`` (None when empty)
* ``scratchpad_block() -> str`` – ``[Session Scratchpad - ...]\\n...\\n[End Scratchpad]`` or ""

Context (seed 002): ``context_section(space="notepad") -> str`` – ``## Session
Notepad`` then the content, or the empty-state hint.  Module function
``prepend_block(block, message) -> str``.

Versions: ``version(space) -> int`` (0: never written), ``history(space, *,
limit=50) -> list[Version]`` newest first, ``revert(version, *, space) ->
NoteResult`` (a new version with that version's content; unknown or pruned
version -> NotFound).

Lifecycle: ``spawn(child, *, copy_notepad=False) -> Notepad``, ``fork(child) ->
Notepad`` (always a copy; both raise InvalidArgument if ``child`` already has a
notepad), ``delete() -> int`` (spaces deleted), ``spaces() -> dict[str, int]``
(non-empty spaces -> version).  Module function ``purge_expired(store) -> int``.

Results: :class:`NoteResult` (``to_dict()``: ok, space, action, version, changed,
used, budget, unit, message, plus ``warning``/``error`` and details such as
original, current, append, combined, dropped, replacements when set).
:class:`Version` (``to_dict()``: version, sha256, used, created_at, action).

Errors: :class:`~blobpad.InvalidArgument` for a call the caller must fix (bad
types, unknown space, content over 1 MiB, absent ``find``/ref, empty ref);
:class:`~blobpad.NotFound` only for an unknown or pruned version.  A budget
rejection is not an exception: it is a NoteResult with ``ok: False``.

Constants: :data:`NOTEPAD_HEADING`, :data:`EMPTY_NOTEPAD_HINT`,
:data:`PRE_COMPACTION_WARNING`, :data:`NOTEPAD_GUIDANCE` (seed 002);
:data:`SCRATCHPAD_HEADER`, :data:`SCRATCHPAD_FOOTER`, :data:`SCRATCHPAD_GUIDANCE`
(seed 004); :data:`DEFAULT_BUDGETS`, :data:`MAX_CONTENT_BYTES`.
"""
