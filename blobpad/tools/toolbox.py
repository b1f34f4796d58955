"""The :class:`Toolbox`: one session's (and turn's) tools for one profile, their
schemas in each API's shape, and the calls that never raise."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from ..errors import (
    BlobpadError,
    CorruptData,
    InvalidArgument,
    NotFound,
    StoreFull,
    check_int,
    check_items,
    check_str,
    check_ttl,
    check_turn,
    describe,
    typename,
)
from ..index import Entry, is_id, parse_id
from ..offload import Offloader
from ..reads import SEARCH_TIMEOUT, check_timeout
from ..store import NAME_SECONDS, NAME_TRIES, Store
from .profiles import REGISTRY
from .sandbox import offload_tool
from .spec import Profile, ToolError, ToolSpec, longest_string, result_size, shrink

log = logging.getLogger("blobpad.tools")

#: Tool profiles: name -> one-line description.  ``Toolbox(..., profile=name)``.
PROFILES: dict[str, str] = {name: profile.description for name, profile in REGISTRY.items()}

#: Schema flavors accepted by :meth:`Toolbox.schemas`.
FLAVORS = ("openai", "openai-responses", "anthropic", "mcp")

_MIN_RESULT = 2000                # smallest max_result_chars accepted


def profile_records(profile: str) -> list[Profile]:
    """The records of ``profile``, a name from :data:`PROFILES` or several joined with
    ``+``; InvalidArgument names the unknown one and the profiles."""
    parts = profile.split("+") if isinstance(profile, str) else [profile]
    for part in parts:
        if not isinstance(part, str) or part not in REGISTRY:
            raise InvalidArgument(f"unknown profile {describe(part)}; the profiles are: {', '.join(PROFILES)} "
                                  "(combine them with '+', e.g. 'blobpad+seed002')")
    return [REGISTRY[part] for part in parts]


def _notepad_options(options: object) -> dict[str, Any]:
    """``notepad_options`` checked: a mapping of :class:`blobpad.notepad.Notepad`'s keyword
    arguments (their values are checked by the notepad)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidArgument(f"notepad_options must be a dict of Notepad's options, not {describe(options)}")
    from ..notepad import Notepad

    known = [p.name for p in inspect.signature(Notepad).parameters.values() if p.kind is p.KEYWORD_ONLY]
    for key in options:
        if key not in known:
            raise InvalidArgument(f"notepad_options: unknown option {describe(key)}; the options are: "
                                  f"{', '.join(known)}")
    return dict(options)


class Toolbox:
    """The scratchpad tools of one session (and turn), for one profile.

    Parameters:
        store: the store the entries live in.
        session: the session whose entries the model may see.
        turn: the current turn; required by turn-scoped profiles.  Assign
            ``toolbox.turn`` when the runtime moves to the next turn.
        profile: a name from :data:`PROFILES` (default ``"blobpad"``), or several joined
            with ``+`` (``"blobpad+seed002"``: offloaded reads and a notepad); the first
            one decides the default scope.  A session has one notepad: combined with
            seed001 or seed004, seed002's ``read_notepad`` shows all of it (:meth:`notepad_view`).
        scope: ``"turn"`` (only the current turn's entries) or ``"session"`` (all of
            the session's); default: the profile's (turn for blobpad and seed000,
            session for the others).
        max_result_chars: cap on the length of every result as JSON (default 20,000, at least 2,000;
            34,000 for seed003, so that its default limit of 30,000 fits).
        line_chars: longest line shown whole by the line-numbered modes (default 2000,
            or a quarter of ``max_result_chars`` if that is smaller).
        always_show: list the reader tools of seed 000's profile (the profiles whose
            record says ``readers_wait``) even before the scope holds an entry; the
            other profiles list every tool from the start.
        allow_dirs: directories the ``scratchpad_offload`` tool may read files from;
            the tool exists only when this is not empty.
        offloader: the :class:`Offloader` used by ``scratchpad_offload`` (default: one
            with the profile's policy).
        ttl: seconds entries written by the model live (default: never, like seed 003).
        max_file_bytes: largest file ``scratchpad_offload`` accepts (default 1 GiB).
        search_timeout: time budget in seconds of the searches (grep, count, regex) of
            one tool call (default :data:`blobpad.reads.SEARCH_TIMEOUT`, 5 s; None: no
            limit).  A search that runs out answers what it found with
            ``"timed_out": true`` and a notice; see :meth:`blobpad.Store.grep`.
        notepad_options: keyword arguments of :class:`blobpad.notepad.Notepad` (budgets,
            counter, ttl, max_versions) for the notepad profiles.

    ``toolbox.profiles`` holds the :class:`~blobpad.tools.spec.Profile` record of each
    part of ``profile``, in order: everything the toolbox knows of a profile.
    """

    def __init__(
        self,
        store: Store,
        *,
        session: str,
        turn: str | int | None = None,
        profile: str = "blobpad",
        scope: Literal["turn", "session"] | None = None,
        max_result_chars: int | None = None,
        line_chars: int | None = None,
        always_show: bool = False,
        allow_dirs: Iterable[str | os.PathLike[str]] = (),
        offloader: Offloader | None = None,
        ttl: float | None = None,
        max_file_bytes: int = 1 << 30,
        search_timeout: float | None = SEARCH_TIMEOUT,
        notepad_options: Mapping[str, Any] | None = None,
    ) -> None:
        records = profile_records(profile)
        if scope is None:
            scope = records[0].scope
        if scope not in ("turn", "session"):
            raise InvalidArgument(f"scope must be 'turn' or 'session', not {describe(scope)}")
        if max_result_chars is None:
            max_result_chars = max(r.max_result_chars for r in records)
        check_int("max_result_chars", max_result_chars, minimum=_MIN_RESULT)
        if line_chars is None:
            line_chars = min(2000, max_result_chars // 4)
        check_int("line_chars (at most max_result_chars/2)", line_chars, minimum=80, maximum=max_result_chars // 2)
        self.store = store
        self._pad: Any = None
        self.session = session
        self.profile = profile
        self.profiles: tuple[Profile, ...] = tuple(records)  # the records of the profile's parts, in order
        self.scope = scope
        self.max_result_chars = max_result_chars
        self.line_chars = line_chars
        self.always_show = bool(always_show)
        self.ttl = check_ttl(ttl)
        check_int("max_file_bytes", max_file_bytes, minimum=0)
        self.max_file_bytes = max_file_bytes
        self.search_timeout = search_timeout if search_timeout is None else check_timeout(search_timeout, "search_timeout")
        # per tool call, per thread (an MCP server runs calls in threads at once): the
        # searches already run and when the call's search budget started (see search)
        self._call = threading.local()
        if isinstance(allow_dirs, (str, bytes, os.PathLike)):
            raise InvalidArgument("allow_dirs is a list of directories, not one path")
        given = [os.fspath(d) for d in check_items("allow_dirs", allow_dirs, (str, os.PathLike), "directory paths")]
        if any(not d for d in given):  # realpath("") is the working directory: never allowed by accident
            raise InvalidArgument("an allowed directory is empty; name it (use . for the working directory)")
        self.allow_dirs = [os.path.realpath(d) for d in given]
        for d in self.allow_dirs:
            if not os.path.isdir(d):
                raise InvalidArgument(f"allowed directory {describe(d, 300)} does not exist or is not a directory")
        if offloader is None:
            # the first part's policy that is not the offloader's default ("seed000") wins
            policy: Literal["seed000", "seed003"] = next(
                (r.offload_policy for r in records if r.offload_policy != "seed000"), "seed000")
            offloader = Offloader(store, policy=policy)
        self.offloader = offloader
        self.notepad_options = _notepad_options(notepad_options)
        self._turn: str | int | None = None
        self.turn = turn
        if any(r.notepad for r in records):
            _ = self.notepad  # fail now, not at the model's first call, if the notepad is unavailable
        tools: list[ToolSpec] = []
        waiting: set[str] = set()  # the reader tools listed once the scope holds an entry (tool_names)
        for r in records:
            for t in r.tools(self):
                tools.append(t)
                if t.reader and r.readers_wait:
                    waiting.add(t.name)
        self._waiting = waiting
        if self.allow_dirs:
            tools.append(offload_tool(self))
        self._tools: dict[str, ToolSpec] = {}
        for t in tools:
            if t.name in self._tools:
                raise InvalidArgument(f"profiles {profile!r} both define the tool {t.name!r}; combine other profiles")
            self._tools[t.name] = t

    # -- the tools ------------------------------------------------------------------------

    @property
    def tools(self) -> dict[str, ToolSpec]:
        """Every tool of this toolbox by name, shown or not (a copy: change it with :meth:`add_tool`)."""
        return dict(self._tools)

    def add_tool(self, spec: ToolSpec) -> None:
        """Add a tool of your own; :meth:`call` dispatches it and :meth:`schemas` lists it like the profile's
        (a ``reader`` tool waits for the scope's first entry when one of the profiles' readers do).

        Raises InvalidArgument when a tool of that name exists.
        """
        if not isinstance(spec, ToolSpec):
            raise InvalidArgument(f"add_tool takes a blobpad.tools.ToolSpec, not {typename(spec)}")
        if spec.name in self._tools:
            raise InvalidArgument(f"this toolbox already has a tool named {spec.name!r}")
        self._tools[spec.name] = spec
        if spec.reader and any(r.readers_wait for r in self.profiles):
            self._waiting.add(spec.name)

    # -- notepad ------------------------------------------------------------------------

    @property
    def notepad(self) -> Any:
        """The session's :class:`blobpad.notepad.Notepad` (state of the notepad profiles),
        opened with ``notepad_options``."""
        if self._pad is None:
            try:
                from ..notepad import Notepad
            except ImportError as exc:
                raise BlobpadError(f"the notepad profiles need blobpad.notepad.Notepad, which this build lacks ({exc})"
                                   ) from None
            self._pad = Notepad(self.store, self.session, **self.notepad_options)
        return self._pad

    @property
    def combined_notepad(self) -> bool:
        """Whether seed002's notepad tools share the session's one notepad with another
        notepad profile's tool (``seed001+seed002``, ``seed002+seed004``); see :meth:`notepad_view`."""
        return any(r.owns_notepad_text for r in self.profiles) and any(
            r.notepad_sections is not None for r in self.profiles)

    def notepad_view(self) -> str:
        """The session's notepad as ``read_notepad`` returns it.

        One notepad per session, whatever the profiles: alone, seed002's notepad is its
        text (as the seed says).  Combined with seed001 or seed004, ``read_notepad``
        shows the whole notepad: the text ``write_notepad``/``update_notepad`` keep,
        then each non-empty space the other profile's ``session_scratchpad`` keeps, under
        its heading (``## Notes``, ``## Plan``, ``## Refs`` as ``- ref`` lines, or ``##
        Scratchpad``); "" while all are empty.  The spaces are changed with
        ``session_scratchpad``, the text with ``write_notepad``/``update_notepad``.
        """
        pad = self.notepad
        text = pad.read("notepad")
        if not self.combined_notepad:
            return text
        sections = [text]
        for r in self.profiles:
            if r.notepad_sections is not None:
                sections += r.notepad_sections(pad)
        shown = [s for s in sections if s]
        return "\n\n".join([s.rstrip("\n") for s in shown[:-1]] + shown[-1:])

    def context_block(self) -> str:
        """What the runtime prepends to the model's next message for the notepad profiles.

        seed001: the non-empty spaces (notes, plan, refs); seed002: the ``## Session
        Notepad`` section (or its empty-state hint); seed004: the ``[Session
        Scratchpad ...]`` block.  "" for profiles without a notepad or when empty.
        A combined profile (:attr:`combined_notepad`) has one notepad, so one block:
        the ``## Session Notepad`` section holding :meth:`notepad_view`.
        """
        if self.combined_notepad:
            from ..notepad import EMPTY_NOTEPAD_HINT, NOTEPAD_HEADING

            return f"{NOTEPAD_HEADING}\n{self.notepad_view() or EMPTY_NOTEPAD_HINT}"
        blocks = [r.context_block(self.notepad) for r in self.profiles if r.context_block is not None]
        return "\n\n".join(b for b in blocks if b)

    # -- scope --------------------------------------------------------------------------

    @property
    def session(self) -> str:
        """The session whose entries and notepad the tools use; assign another to move the
        toolbox, notepad included, to that session."""
        return self._session

    @session.setter
    def session(self, value: str) -> None:
        check_str("session", value, allow_none=False)
        self._session = value
        self._pad = None  # the notepad is the session's: the next use opens the new session's

    @property
    def turn(self) -> str | int | None:
        """The current turn; assign a new value when the runtime starts the next turn."""
        return self._turn

    @turn.setter
    def turn(self, value: str | int | None) -> None:
        check_turn(value)
        if value is None and self.scope == "turn":
            raise InvalidArgument("a turn-scoped toolbox needs a turn; pass turn=..., or scope='session'")
        self._turn = value

    def in_scope(self, entry: Entry) -> bool:
        """Whether the model may see ``entry`` through this toolbox."""
        if entry.session != self.session:
            return False
        if self.scope == "turn":
            return type(entry.turn) is type(self._turn) and entry.turn == self._turn
        return True

    def entries(self) -> list[Entry]:
        """The live entries this toolbox can see, in creation order."""
        if self.scope == "turn":
            return self.store.entries(session=self.session, turn=self._turn)
        return self.store.entries(session=self.session)

    def _has_entries(self) -> bool:
        if self.scope == "turn":
            return bool(self.store.entries(session=self.session, turn=self._turn, limit=1))
        return bool(self.store.entries(session=self.session, limit=1))

    def _not_found(self, what: str) -> ToolError:
        where = "this turn" if self.scope == "turn" else "this session"
        hint = " or call scratchpad_list to see them" if "scratchpad_list" in self._tools else ""
        return ToolError(
            f"no scratchpad entry {what} in {where}: it is unknown, has expired, or belongs to another "
            f"{self.scope}. Use a scratchpad_id shown in an observation of {where}{hint}."
        )

    def entry(self, entry_id: str) -> Entry:
        """The entry ``entry_id`` if this toolbox may see it; else the not-found ToolError."""
        entry_id = entry_id.strip().lower()
        try:
            e = self.store.stat(entry_id)
        except NotFound:
            raise self._not_found(repr(entry_id)) from None
        except InvalidArgument as exc:
            raise ToolError(exc.render("tool")) from None
        if not self.in_scope(e):
            raise self._not_found(repr(entry_id))
        return e

    def named(self, name: str) -> Entry:
        """The entry called ``name`` (or, failing that, with that id) in scope.

        Inside :meth:`call`, the entry found is remembered: should it be gone when the
        tool reads it (another call wrote the name again meanwhile), the call runs again
        on the entry the name names then (see :meth:`call`)."""
        e = self._resolve(name)
        resolved = getattr(self._call, "resolved", None)
        if resolved is not None:
            resolved[name] = e.id
        return e

    def _resolve(self, name: str) -> Entry:
        try:
            e = self.store.find(name, session=self.session)
            if self.in_scope(e):
                return e
        except NotFound:
            pass
        except InvalidArgument as exc:
            raise ToolError(exc.render("tool")) from None
        if is_id(name):  # an id, in either case
            try:
                return self.entry(name)
            except ToolError:
                pass
            canonical = parse_id(name).hex()  # an entry edited by seed 003 is named by its id, in lower case
            if canonical != name:
                with contextlib.suppress(NotFound):
                    e = self.store.find(canonical, session=self.session)
                    if self.in_scope(e):
                        return e
        where = "this turn" if self.scope == "turn" else "this session"
        raise ToolError(f"no scratchpad entry named {describe(name, 200)} in {where}; "
                        "call scratchpad_list to see the names")

    def search(self, key: tuple[Any, ...], run: Callable[[float | None], Any]) -> Any:
        """``run(timeout)``, a grep or count, once per tool call: a read-only tool is run
        again with a smaller budget when its result is too large, and the search must not
        run (nor time out) again.  The searches of one call share :attr:`search_timeout`."""
        call = self._call
        if not hasattr(call, "searches"):  # a handler run outside call(): one search, the whole budget
            call.searches, call.t0 = {}, time.monotonic()
        hit = call.searches.get(key)
        if hit is None:
            timeout = self.search_timeout
            if timeout is not None:
                timeout = max(0.001, timeout - (time.monotonic() - call.t0))
            hit = call.searches[key] = run(timeout)
        return hit

    # -- schemas ------------------------------------------------------------------------

    def tool_names(self) -> list[str]:
        """Names of the tools :meth:`schemas` lists right now: all of them, but for the
        reader tools of seed 000's profile until the scope holds an entry (unless ``always_show``)."""
        wait = bool(self._waiting) and not self.always_show and not self._has_entries()
        return [name for name in self._tools if not (wait and name in self._waiting)]

    def schemas(self, flavor: str = "openai", *, strict: bool = False) -> list[dict[str, Any]]:
        """The tool definitions for an API: ``"openai"`` (Chat Completions ``tools``),
        ``"openai-responses"`` (Responses API), ``"anthropic"`` (Messages ``tools``) or
        ``"mcp"`` (``Tool`` objects of ``tools/list``).

        The profile ``blobpad`` and the others list every tool from the start (frameworks
        register tools once, before the first offload); seed 000's ``scratchpad_read``
        appears only once the scope holds an entry (unless ``always_show``), as the seed says.

        ``strict`` (the OpenAI flavors only): the schemas of OpenAI's strict mode, with
        ``"strict": true`` on each function: every property required, the optional ones
        nullable (a null argument means its default), ``additionalProperties: false``,
        and no keyword strict mode refuses (see :meth:`ToolSpec.input_schema`).
        """
        if flavor not in FLAVORS:
            raise InvalidArgument(f"unknown schema flavor {describe(flavor)}; use one of {', '.join(FLAVORS)}")
        if not isinstance(strict, bool):
            raise InvalidArgument(f"strict must be True or False, not {describe(strict)}")
        if strict and not flavor.startswith("openai"):
            raise InvalidArgument(f"strict schemas are OpenAI's strict mode: use flavor 'openai' or 'openai-responses', "
                                  f"not {flavor!r}")
        out = []
        for name in self.tool_names():
            t = self._tools[name]
            schema = t.input_schema(strict=strict)
            if flavor == "openai":
                function = {"name": t.name, "description": t.description, "parameters": schema}
                if strict:
                    function["strict"] = True
                out.append({"type": "function", "function": function})
            elif flavor == "openai-responses":
                tool = {"type": "function", "name": t.name, "description": t.description, "parameters": schema}
                if strict:
                    tool["strict"] = True
                out.append(tool)
            elif flavor == "anthropic":
                out.append({"name": t.name, "description": t.description, "input_schema": schema})
            else:
                annotations = {"readOnlyHint": t.read_only}
                if not t.read_only:
                    annotations["destructiveHint"] = t.destructive
                out.append({"name": t.name, "description": t.description, "inputSchema": schema,
                            "annotations": annotations})
        return out

    # -- calls --------------------------------------------------------------------------

    def call(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> dict[str, Any]:
        """Run the tool ``name`` with the model's ``arguments`` (a dict or a JSON string).

        Never raises: returns ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``
        whose message says how to fix the call.  Hidden tools can be called too.
        """
        tool_name = "?"
        try:
            tool_name = name if isinstance(name, str) else describe(name)
            tool = self._tools.get(name) if isinstance(name, str) else None
            if tool is None:
                return self._error(tool_name, f"unknown tool {describe(name)}; the tools are: {', '.join(self._tools)}")
            args = tool.validate(arguments)
            call = self._call
            outer = {k: getattr(call, k) for k in ("t0", "searches", "resolved") if hasattr(call, k)}  # a call inside a call
            call.t0 = time.monotonic()  # one search budget per call (search)
            try:
                for attempt in range(NAME_TRIES):
                    self._call.searches, self._call.resolved = {}, {}
                    try:
                        if tool.read_only:  # one state of the store for the whole call, whatever others write
                            with self.store.snapshot():
                                return self._fit(tool, args)
                        return self._fit(tool, args)
                    except NotFound:
                        if not self._renamed():
                            raise
                        if attempt + 1 == NAME_TRIES or time.monotonic() - self._call.t0 > NAME_SECONDS:
                            names = ", ".join(describe(n, 200) for n in self._call.resolved)
                            raise ToolError(f"the entry named {names} was written again {attempt + 1} times while "
                                            "this call read it (another call keeps writing it); nothing was "
                                            "changed: try again") from None
            finally:
                call.searches, call.resolved = {}, None  # let go of the results
                call.__dict__.update(outer)
        except ToolError as exc:
            return self._error(tool_name, str(exc))
        except NotFound:
            # An entry vanished (expired, deleted) between the scope check and the read.
            return self._error(tool_name, str(self._not_found("with that id or name")))
        except (InvalidArgument, StoreFull) as exc:
            return self._error(tool_name, exc.render("tool"))
        except CorruptData:
            log.exception("blobpad tool %s: damaged data", tool_name)
            return self._error(tool_name, "this entry is damaged in the store and cannot be read; "
                                          "run the tool that produced it again")
        except BlobpadError as exc:
            return self._error(tool_name, f"the scratchpad is unavailable: {exc.render('tool')}")
        except Exception:  # never let a traceback or foreign data reach the model
            log.exception("blobpad tool %s failed", tool_name)
            return self._error(tool_name, f"internal error in {tool_name}; nothing was changed by this failure. "
                                          "Try again with other arguments, or continue without it.")

    def _renamed(self) -> bool:
        """Whether a name this call found its entry by names another live entry now: the
        entry it found was replaced (written again, edited) before the call read it, and
        the call, which changed nothing yet (NotFound is raised before any write), runs
        again on the new one instead of saying the name is unknown."""
        for name, entry_id in self._call.resolved.items():
            try:
                if self._resolve(name).id != entry_id:
                    return True
            except ToolError:  # the name is gone: the call says so
                continue
        return False

    def _error(self, tool: str, message: str) -> dict[str, Any]:
        limit = self.max_result_chars // 2
        if len(message) > limit:
            message = message[:limit] + "..."
        # the name as the model sent it, but always encodable: a lone surrogate (an escape the model
        # wrote) made the whole result impossible to send as UTF-8
        shown = tool[:200] if isinstance(tool, str) else repr(tool)[:200]
        shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")
        return {"ok": False, "tool": shown, "error": message}

    def _fit(self, tool: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
        """Run the handler with a content budget that keeps the result under the cap.

        A read-only tool is run again with a smaller budget while its result is too
        large; a tool that changes something runs once, and its result is cut.
        """
        cap = self.max_result_chars
        budget = cap - 1000
        for _ in range(12):
            result = tool.handler(self, args, budget)
            if not isinstance(result.get("ok"), bool):
                result = {"ok": True, **result}
            if result["ok"] is False and not result.get("error"):
                result["error"] = str(result.get("message") or "the operation was rejected")
            size = result_size(result)
            if size <= cap:
                return result
            if not tool.read_only or budget == 64:
                break
            # shrink what was shown in proportion: content that escapes to several JSON
            # characters each (quotes, backslashes, control characters) needs more than
            # the excess cut, and a page shorter than the budget is cut from its own length
            shown = min(budget, len(longest_string(result)[1]))
            budget = max(64, min(budget - 64, shown * cap // size))
        return shrink(result, cap)
