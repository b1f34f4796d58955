"""The tools a model calls to read (and, per profile, write) the scratchpad.

A :class:`Toolbox` is bound to one store, one session and (for turn-scoped
profiles) one turn.  It gives the tool definitions in the shape each API wants
(:meth:`Toolbox.schemas`) and runs the model's calls (:meth:`Toolbox.call`), which
never raise: every answer is a JSON object with ``ok``; a failure's ``error`` says
what was wrong and how to call again.

Profiles (:data:`PROFILES`) are drop-ins for the design seeds: same tool names,
parameters, defaults and result shapes.  The default, ``"blobpad"``, is the best of
them.  Scope: a turn-scoped toolbox sees only the current turn's entries (seed
000), a session-scoped one the whole session's (seed 003).  An entry outside the
scope answers exactly like an id that never existed.

Every result is capped at ``max_result_chars`` characters of JSON; whatever is cut
is reported with ``truncated: true``, a ``notice`` and, in ``next``, the arguments
that read on.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .errors import MAX_STR_BYTES, BlobpadError, CorruptData, InvalidArgument, NotFound, StoreFull, check_str
from .index import Entry, is_id
from .offload import Offloader
from .reads import SEARCH_TIMEOUT, LineWindow, check_timeout, compile_pattern
from .store import Store

__all__ = ["Toolbox", "PROFILES", "FLAVORS", "Param", "ToolSpec"]

log = logging.getLogger("blobpad.tools")

#: Tool profiles: name -> one-line description.  ``Toolbox(..., profile=name)``.
PROFILES: dict[str, str] = {
    "blobpad": (
        "default: scratchpad_read (modes head, tail, range, lines, grep, count; numbered lines, long lines capped, "
        "every cut says how to read on) and scratchpad_list; sees the current turn's entries"
    ),
    "seed000": (
        "seed 000 drop-in: scratchpad_read(scratchpad_id, mode full/head/tail/range, n=2000, start, end); "
        "sees the current turn's entries"
    ),
    "seed003": (
        "seed 003 drop-in: scratchpad_write, scratchpad_read (offset, limit=30000, regex: at most 100 lines), "
        "scratchpad_edit, scratchpad_list, scratchpad_delete, by entry name; sees the session's entries"
    ),
    "seed001": (
        "seed 001 drop-in (OpenClaw session scratchpad): session_scratchpad(action set_notes/append_notes/set_plan/"
        "refs.add/refs.remove/refs.set) over the notepad's notes, plan and refs spaces"
    ),
    "seed002": (
        "seed 002 drop-in (session notepad): read_notepad, write_notepad, update_notepad(find_replace/append/"
        "prepend/delete) over the session's notepad"
    ),
    "seed004": (
        "seed 004 drop-in (session.scratchpad extension): session_scratchpad(content, mode replace/append) "
        "with a 2000-token budget"
    ),
}

#: Schema flavors accepted by :meth:`Toolbox.schemas`.
FLAVORS = ("openai", "openai-responses", "anthropic", "mcp")

_MAX_INT = (1 << 53) - 1          # largest integer a JSON number carries exactly
_MIN_RESULT = 2000                # smallest max_result_chars accepted
_LINES_PER_CALL = 200             # default number of lines of mode "lines"
_LINE_BATCH = 256                 # lines read from the store at a time
_MAX_NAME = MAX_STR_BYTES         # longest entry name (in characters here; the store counts UTF-8 bytes)
_EDIT_LIMIT = 64 << 20            # largest entry edited in place, in bytes
_MAX_SKIP = 10_000                # grep pages: the engine finds skip + max_matches matches each time


class ToolError(Exception):
    """A call the model must fix; the message says how."""


# -- parameters and their validation ------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One tool parameter: its JSON Schema and the checks run on the model's value."""

    name: str
    type: Literal["string", "integer", "boolean", "array"]
    description: str
    required: bool = False
    default: Any = None
    enum: tuple[str, ...] = ()
    minimum: int = 0
    maximum: int = _MAX_INT
    min_length: int = 0
    max_length: int | None = None

    def schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.enum:
            s["enum"] = list(self.enum)
        if self.type == "integer":
            s["minimum"] = self.minimum
            s["maximum"] = self.maximum
        if self.type == "string":
            if self.min_length:
                s["minLength"] = self.min_length
            if self.max_length is not None:
                s["maxLength"] = self.max_length
        if self.type == "array":
            s["items"] = {"type": "string"}
        if self.default is not None:
            s["default"] = self.default
        return s

    def check(self, value: Any, tool: str) -> Any:
        label = f"{tool}: argument {self.name!r}"
        if self.type == "string":
            if not isinstance(value, str):
                raise ToolError(f"{label} must be a string, not {_typename(value)}")
            if len(value) < self.min_length:
                raise ToolError(f"{label} must not be empty")
            if self.max_length is not None and len(value) > self.max_length:
                raise ToolError(f"{label} is {len(value)} characters long; the limit is {self.max_length}")
            if self.enum and value not in self.enum:
                raise ToolError(f"{label} is {_show(value)}; it must be one of: {', '.join(self.enum)}")
            return value
        if self.type == "integer":
            if isinstance(value, float) and value.is_integer() and abs(value) <= _MAX_INT:
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ToolError(f"{label} must be an integer, not {_typename(value)} ({_show(value)})")
            if value < self.minimum:
                raise ToolError(f"{label} must be at least {self.minimum}, not {_show(value)}")
            if value > self.maximum:
                raise ToolError(f"{label} must be at most {self.maximum}, not {_show(value)}")
            return value
        if self.type == "boolean":
            if not isinstance(value, bool):
                raise ToolError(f"{label} must be true or false, not {_typename(value)} ({_show(value)})")
            return value
        if not isinstance(value, list):
            raise ToolError(f"{label} must be an array, not {_typename(value)}")
        return value


def _typename(value: Any) -> str:
    return {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "an array",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _show(value: Any, limit: int = 60) -> str:
    """A short repr of a value from the model (never raises, whatever the value)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    try:
        text = repr(value)
    except Exception:
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


Handler = Callable[["Toolbox", dict[str, Any], int], dict[str, Any]]


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its name, description, parameters and the function that runs it.

    ``reader`` tools are listed only once the scope holds an entry (seed 000).
    ``handler(toolbox, arguments, budget)`` returns the result; ``budget`` is the
    number of characters its bulk content may take.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    handler: Handler
    reader: bool = False
    read_only: bool = True
    destructive: bool = False

    def input_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {p.name: p.schema() for p in self.params},
            "required": [p.name for p in self.params if p.required],
            "additionalProperties": False,
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check the model's arguments; return them with defaults filled in."""
        if arguments is None:
            arguments = {}
        if isinstance(arguments, (str, bytes, bytearray)):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                raise ToolError(f"{self.name}: the arguments are not valid JSON ({exc}); pass a JSON object") from None
            except RecursionError:
                raise ToolError(f"{self.name}: the arguments are nested too deeply; pass a flat JSON object") from None
        if not isinstance(arguments, Mapping):
            raise ToolError(f"{self.name}: the arguments must be a JSON object, not {_typename(arguments)}")
        known = {p.name: p for p in self.params}
        for key in arguments:
            if key not in known:
                names = ", ".join(known) or "none"
                raise ToolError(f"{self.name} has no argument {_show(key)}; its arguments are: {names}")
        out: dict[str, Any] = {}
        for p in self.params:
            value = arguments.get(p.name)
            if value is None:
                if p.required:
                    raise ToolError(f"{self.name}: missing required argument {p.name!r} ({p.description})")
                out[p.name] = p.default
            else:
                out[p.name] = p.check(value, self.name)
        return out


# -- the toolbox -----------------------------------------------------------------------------


_UNSET: Any = object()


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
        max_result_chars: cap on the length of every result as JSON (default 20,000;
            34,000 for seed003, so that its default limit of 30,000 fits).
        line_chars: longest line shown whole by the line-numbered modes (default 2000,
            or a quarter of ``max_result_chars`` if that is smaller).
        always_show: list reader tools even before the scope holds an entry.
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
        parts = profile.split("+") if isinstance(profile, str) else [profile]
        for part in parts:
            if part not in _PROFILE_TOOLS:
                raise InvalidArgument(f"unknown profile {part!r}; the profiles are: {', '.join(PROFILES)} "
                                      "(combine them with '+', e.g. 'blobpad+seed002')")
        check_str("session", session, allow_none=False)
        if scope is None:
            scope = "turn" if parts[0] in ("blobpad", "seed000") else "session"
        if scope not in ("turn", "session"):
            raise InvalidArgument(f"scope must be 'turn' or 'session', not {scope!r}")
        if max_result_chars is None:
            max_result_chars = 34_000 if "seed003" in parts else 20_000
        if isinstance(max_result_chars, bool) or not isinstance(max_result_chars, int) or max_result_chars < _MIN_RESULT:
            raise InvalidArgument(f"max_result_chars must be an integer of at least {_MIN_RESULT}, not {max_result_chars!r}")
        if line_chars is None:
            line_chars = min(2000, max_result_chars // 4)
        if isinstance(line_chars, bool) or not isinstance(line_chars, int) or not 80 <= line_chars <= max_result_chars // 2:
            raise InvalidArgument(f"line_chars must be an integer from 80 to max_result_chars/2, not {line_chars!r}")
        self.store = store
        self.session = session
        self.profile = profile
        self._parts = parts
        self.scope = scope
        self.max_result_chars = max_result_chars
        self.line_chars = line_chars
        self.always_show = bool(always_show)
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
            raise InvalidArgument(f"ttl must be a positive number of seconds or None, not {ttl!r}")
        if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or max_file_bytes < 0:
            raise InvalidArgument(f"max_file_bytes must be a non-negative integer, not {max_file_bytes!r}")
        self.ttl = ttl
        self.max_file_bytes = max_file_bytes
        self.search_timeout = search_timeout if search_timeout is None else check_timeout(search_timeout, "search_timeout")
        # per tool call, per thread (an MCP server runs calls in threads at once): the
        # searches already run and when the call's search budget started (see _search)
        self._call = threading.local()
        self.allow_dirs = [os.path.realpath(os.fspath(d)) for d in allow_dirs]
        for d in self.allow_dirs:
            if not os.path.isdir(d):
                raise InvalidArgument(f"allowed directory {d!r} does not exist or is not a directory")
        self.offloader = offloader or Offloader(store, policy="seed003" if "seed003" in parts else "seed000")
        self.notepad_options = dict(notepad_options or {})
        self._pad: Any = None
        self._turn: str | int | None = None
        self.turn = turn
        if any(p in _NOTEPAD_PROFILES for p in parts):
            _ = self.notepad  # fail now, not at the model's first call, if the notepad is unavailable
        tools = [t for part in parts for t in _PROFILE_TOOLS[part](self)]
        if self.allow_dirs:
            tools.append(_offload_tool(self))
        self._tools: dict[str, ToolSpec] = {}
        for t in tools:
            if t.name in self._tools:
                raise InvalidArgument(f"profiles {profile!r} both define the tool {t.name!r}; combine other profiles")
            self._tools[t.name] = t

    # -- notepad ------------------------------------------------------------------------

    @property
    def notepad(self) -> Any:
        """The session's :class:`blobpad.notepad.Notepad` (state of the notepad profiles),
        opened with ``notepad_options``."""
        if self._pad is None:
            try:
                from .notepad import Notepad
            except ImportError as exc:
                raise BlobpadError(f"the notepad profiles need blobpad.notepad.Notepad, which this build lacks ({exc})"
                                   ) from None
            self._pad = Notepad(self.store, self.session, **self.notepad_options)
        return self._pad

    @property
    def combined_notepad(self) -> bool:
        """Whether seed002's notepad tools share the session's one notepad with another
        notepad profile's tool (``seed001+seed002``, ``seed002+seed004``); see :meth:`notepad_view`."""
        return "seed002" in self._parts and ("seed001" in self._parts or "seed004" in self._parts)

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
        if "seed001" in self._parts:
            notes, plan, refs = pad.read("notes"), pad.read("plan"), pad.refs()
            sections += [f"## Notes\n{notes}" if notes else "", f"## Plan\n{plan}" if plan else "",
                         "## Refs\n" + "\n".join(f"- {r}" for r in refs) if refs else ""]
        if "seed004" in self._parts:
            scratchpad = pad.read("scratchpad")
            sections.append(f"## Scratchpad\n{scratchpad}" if scratchpad else "")
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
            from .notepad import EMPTY_NOTEPAD_HINT, NOTEPAD_HEADING

            return f"{NOTEPAD_HEADING}\n{self.notepad_view() or EMPTY_NOTEPAD_HINT}"
        blocks = []
        for part in self._parts:
            if part == "seed001":
                blocks.append(self.notepad.render_spaces())
            elif part == "seed002":
                blocks.append(self.notepad.context_section())
            elif part == "seed004":
                blocks.append(self.notepad.scratchpad_block())
        return "\n\n".join(b for b in blocks if b)

    # -- scope --------------------------------------------------------------------------

    @property
    def turn(self) -> str | int | None:
        """The current turn; assign a new value when the runtime starts the next turn."""
        return self._turn

    @turn.setter
    def turn(self, value: str | int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
            raise InvalidArgument(f"turn must be a string, an integer or None, not {type(value).__name__}")
        if isinstance(value, str):
            check_str("turn", value)
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
            raise ToolError(str(exc)) from None
        if not self.in_scope(e):
            raise self._not_found(repr(entry_id))
        return e

    def named(self, name: str) -> Entry:
        """The entry called ``name`` (or, failing that, with that id) in scope."""
        try:
            e = self.store.find(name, session=self.session)
            if self.in_scope(e):
                return e
        except NotFound:
            pass
        except InvalidArgument as exc:
            raise ToolError(str(exc)) from None
        if is_id(name):  # an id, in either case
            try:
                return self.entry(name)
            except ToolError:
                pass
        raise ToolError(f"no scratchpad entry named {_show(name, 200)} in this session; "
                        "call scratchpad_list to see the names")

    # -- schemas ------------------------------------------------------------------------

    def tool_names(self) -> list[str]:
        """Names of the tools :meth:`schemas` lists right now."""
        show = self.always_show or self._has_entries()
        return [t.name for t in self._tools.values() if show or not t.reader]

    def schemas(self, flavor: str = "openai") -> list[dict[str, Any]]:
        """The tool definitions for an API: ``"openai"`` (Chat Completions ``tools``),
        ``"openai-responses"`` (Responses API), ``"anthropic"`` (Messages ``tools``) or
        ``"mcp"`` (``Tool`` objects of ``tools/list``).

        Reader tools appear only once the scope holds an entry (unless
        ``always_show``), so a model without offloaded observations sees no noise.
        """
        if flavor not in FLAVORS:
            raise InvalidArgument(f"unknown schema flavor {flavor!r}; use one of {', '.join(FLAVORS)}")
        out = []
        for name in self.tool_names():
            t = self._tools[name]
            schema = t.input_schema()
            if flavor == "openai":
                out.append({"type": "function", "function": {"name": t.name, "description": t.description,
                                                             "parameters": schema}})
            elif flavor == "openai-responses":
                out.append({"type": "function", "name": t.name, "description": t.description, "parameters": schema})
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
            tool_name = name if isinstance(name, str) else _show(name)
            tool = self._tools.get(name) if isinstance(name, str) else None
            if tool is None:
                return self._error(tool_name, f"unknown tool {_show(name)}; the tools are: {', '.join(self._tools)}")
            args = tool.validate(arguments)
            self._call.searches, self._call.t0 = {}, time.monotonic()  # one search budget per call (_search)
            try:
                return self._fit(tool, args)
            finally:
                self._call.searches = {}  # let go of the results
        except ToolError as exc:
            return self._error(tool_name, str(exc))
        except NotFound:
            # An entry vanished (expired, deleted) between the scope check and the read.
            return self._error(tool_name, str(self._not_found("with that id or name")))
        except (InvalidArgument, StoreFull) as exc:
            return self._error(tool_name, str(exc))
        except CorruptData:
            log.exception("blobpad tool %s: damaged data", tool_name)
            return self._error(tool_name, "this entry is damaged in the store and cannot be read; "
                                          "run the tool that produced it again")
        except BlobpadError as exc:
            return self._error(tool_name, f"the scratchpad is unavailable: {exc}")
        except Exception:  # never let a traceback or foreign data reach the model
            log.exception("blobpad tool %s failed", tool_name)
            return self._error(tool_name, f"internal error in {tool_name}; nothing was changed by this failure. "
                                          "Try again with other arguments, or continue without it.")

    def _error(self, tool: str, message: str) -> dict[str, Any]:
        limit = self.max_result_chars // 2
        if len(message) > limit:
            message = message[:limit] + "..."
        return {"ok": False, "tool": tool[:200], "error": message}

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
            shown = min(budget, len(_longest_string(result)[1]))
            budget = max(64, min(budget - 64, shown * cap // size))
        return _shrink(result, cap)


def result_size(result: Any) -> int:
    """The size a result is capped by: its length as JSON (non-ASCII kept as is)."""
    return len(json.dumps(result, ensure_ascii=False))


def _longest_string(value: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str]:
    best: tuple[tuple[Any, ...], str] = ((), "")
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, child in items:
        found = (path + (key,), child) if isinstance(child, str) else _longest_string(child, path + (key,))
        if len(found[1]) > len(best[1]):
            best = found
    return best


def _shrink(result: dict[str, Any], cap: int) -> dict[str, Any]:
    """Cut the longest strings of ``result`` until it fits in ``cap`` characters of JSON."""
    result = json.loads(json.dumps(result, ensure_ascii=False))
    for _ in range(200):
        size = result_size(result)
        if size <= cap:
            return result
        path, text = _longest_string(result)
        if len(text) < 100:
            break
        ratio = (len(json.dumps(text, ensure_ascii=False)) - 2) / len(text)   # JSON characters per character
        keep = max(0, min(len(text) - 1, int(len(text) - (size - cap + 100) / ratio) - 1))
        target: Any = result
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = text[:keep] + f"[... {len(text) - keep} characters cut: the result is capped at {cap} ...]"
        result["truncated"] = True
    log.error("blobpad: a result could not be cut under %d characters", cap)
    return {"ok": False, "error": "the result is too large to return; ask for a smaller part"}


# -- shared reading helpers --------------------------------------------------------------------


def _unit(entry: Entry) -> str:
    return "characters" if entry.kind == "text" else "bytes"


def _slice_result(
    tb: Toolbox, entry: Entry, start: int, end: int, budget: int, *, mode: str, keep_end: bool = False,
    next_args: Callable[[int, int], dict[str, Any]] | None = None, id_key: str = "scratchpad_id",
    id_value: str | None = None,
) -> dict[str, Any]:
    """Characters (text) or bytes (binary, base64) ``start:end``, cut to ``budget``."""
    length = entry.length
    binary = entry.kind != "text"
    room = max(1, budget // 4 * 3) if binary else max(1, budget)
    a, b = start, end
    truncated = b - a > room
    if truncated:
        if keep_end:
            a = b - room
        else:
            b = a + room
    raw = tb.store.range(entry.id, a, b)
    content = base64.b64encode(raw).decode("ascii") if isinstance(raw, bytes) else raw
    result: dict[str, Any] = {"ok": True, id_key: id_value or entry.id, "mode": mode, "kind": entry.kind,
                              "start": a, "end": b, f"total_{_unit(entry)}": length}
    if binary:
        result["encoding"] = "base64"
    result["content"] = content
    result["truncated"] = truncated
    if truncated:
        unit = _unit(entry)
        if next_args is None:
            def next_args(s: int, e: int) -> dict[str, Any]:
                return {"mode": "range", "start": s, "end": e}
        rest = (start, a) if keep_end else (b, end)
        nxt = {id_key: id_value or entry.id, **next_args(*rest)}
        result["next"] = nxt
        result["notice"] = (f"Output capped: showing {unit} {a}-{b} of the {end - start} requested "
                            f"({start}-{end}). The other {rest[1] - rest[0]} {unit} ({rest[0]}-{rest[1]}): call "
                            f"again with {_args_text(nxt)}.")
    return result


def _args_text(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())


def _pattern(pattern: str, *, ignore_case: bool, fixed: bool, fixed_hint: str) -> None:
    try:
        compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
    except InvalidArgument as exc:
        raise ToolError(f"{exc.message}; {fixed_hint}" if exc.hint is not None else exc.message) from None


def _search(tb: Toolbox, key: tuple[Any, ...], run: Callable[[float | None], Any]) -> Any:
    """``run(timeout)``, a grep or count, once per tool call: ``_fit`` runs a handler again
    with a smaller budget, and the search must not run (nor time out) again.  The
    searches of one call share ``tb.search_timeout``."""
    call = tb._call
    if not hasattr(call, "searches"):  # a handler run outside call(): one search, the whole budget
        call.searches, call.t0 = {}, time.monotonic()
    hit = call.searches.get(key)
    if hit is None:
        timeout = tb.search_timeout
        if timeout is not None:
            timeout = max(0.001, timeout - (time.monotonic() - call.t0))
        hit = call.searches[key] = run(timeout)
    return hit


def _timed_out_notice(tb: Toolbox, entry: Entry, searched: int | None, what: str,
                      advice: str = "search a literal with fixed_strings=true, or read around a line with "
                                    "mode='lines'") -> str:
    """The notice of a search that ran out of time after line ``searched``."""
    done = searched or 0
    return (f"Timed out: the search stopped after {tb.search_timeout:g} s at line {done + 1} of {entry.lines}; "
            f"{what} lines 1-{done} (the later lines were not searched). This pattern is slow to match here: "
            f"simplify it (a .* before a class and a long repetition such as .{{30}} make RE2 slow), {advice}.")


def _cap_window(w: LineWindow, cap: int, id_args: dict[str, Any]) -> str:
    """Line ``w.line`` from ``w.offset`` cut to ``cap`` characters (``w`` holds at least
    that many), with a notice saying how to read on."""
    rest = w.line_chars - w.offset
    if rest <= cap:
        return w.text
    nxt = _args_text({**id_args, "mode": "lines", "start_line": w.line, "end_line": w.line, "column": w.offset + cap})
    return f"{w.text[:cap]} [... line {w.line} continues for {rest - cap} more characters; read on with {nxt}]"


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


# -- profile "blobpad" -------------------------------------------------------------------------


def _read_blobpad(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    _check_mode_args(a)
    entry = tb.entry(a["scratchpad_id"])
    mode = a["mode"]
    length = entry.length
    if mode == "head":
        return _slice_result(tb, entry, 0, min(a["n"], length), budget, mode=mode)
    if mode == "tail":
        return _slice_result(tb, entry, max(0, length - a["n"]), length, budget, mode=mode, keep_end=True)
    if mode == "range":
        return _range(tb, entry, a, budget, mode)
    if mode == "lines":
        return _lines(tb, entry, a, budget)
    if mode in ("grep", "count"):
        if a["pattern"] is None:
            raise ToolError(f"scratchpad_read: mode {mode!r} needs a pattern (RE2 regular expression, or literal text "
                            "with fixed_strings=true)")
        _pattern(a["pattern"], ignore_case=a["ignore_case"], fixed=a["fixed_strings"],
                 fixed_hint="pass fixed_strings=true to search for the literal text")
        if mode == "count":
            n = _search(tb, ("count", entry.id, a["pattern"], a["ignore_case"], a["fixed_strings"]),
                        lambda t: tb.store.count(entry.id, a["pattern"], ignore_case=a["ignore_case"],
                                                 fixed=a["fixed_strings"], timeout=t))
            counted: dict[str, Any] = {"ok": True, "scratchpad_id": entry.id, "mode": "count",
                                       "pattern": a["pattern"], "count": int(n), "total_lines": entry.lines}
            if n.timed_out:
                counted["timed_out"] = True
                counted["searched_lines"] = n.searched_lines
                counted["notice"] = _timed_out_notice(tb, entry, n.searched_lines, "count is the matching lines among")
            return counted
        return _grep(tb, entry, a, budget)
    raise ToolError(f"scratchpad_read: unknown mode {mode!r}")  # pragma: no cover - the enum check comes first


def _range(tb: Toolbox, entry: Entry, a: dict[str, Any], budget: int, mode: str) -> dict[str, Any]:
    length = entry.length
    start, end = a["start"], a["end"]
    if start is None:
        raise ToolError(f"scratchpad_read: mode 'range' needs start (the first {_unit(entry)[:-1]}, from 0)")
    if start > length:
        raise ToolError(f"scratchpad_read: start {start} is past the end; the entry has {length} {_unit(entry)}")
    if end is None:
        end = length
    if end < start:
        raise ToolError(f"scratchpad_read: end ({end}) is before start ({start}); end is exclusive and must be >= start")
    return _slice_result(tb, entry, start, min(end, length), budget, mode=mode)


def _line_number(n: int, total: int) -> int:
    """A line number of mode lines: negative ones count from the end (-1 is line ``total``),
    clamped to line 1, as :func:`blobpad.reads.line_span` does."""
    if n == 0:
        raise ToolError("scratchpad_read: there is no line 0; lines are numbered from 1, and negative numbers count "
                        "from the end (-1 is the last line)")
    return n if n > 0 else max(1, total + 1 + n)


def _lines(tb: Toolbox, entry: Entry, a: dict[str, Any], budget: int) -> dict[str, Any]:
    total = entry.lines
    first = _line_number(a["start_line"], total)
    column = a["column"]
    last = _line_number(a["end_line"], total) if a["end_line"] is not None else first + _LINES_PER_CALL - 1
    if last < first:
        def shown(name: str, n: int) -> str:
            return f"{name} {a[name]}" + (f" (line {n} of {total})" if a[name] < 0 else "")
        raise ToolError(f"scratchpad_read: {shown('end_line', last)} is before {shown('start_line', first)}; "
                        "both are inclusive")
    if total and first > total:
        raise ToolError(f"scratchpad_read: start_line {first} is past the end; the entry has {total} lines")
    stop = min(last, total)
    cap = min(tb.line_chars, max(80, budget - 300))
    id_args = {"scratchpad_id": entry.id}
    out: list[str] = []
    used = 0
    n = first
    truncated = False
    while n <= stop and not truncated:
        # windows of cap characters: a line of 1 GB costs what its window costs (Store.line_windows)
        if n == first and column:
            batch = tb.store.line_windows(entry.id, n, n, width=cap, column=column)
        else:
            batch = tb.store.line_windows(entry.id, n, min(stop, n + _LINE_BATCH - 1), width=cap)
        for w in batch:
            col = w.offset
            if col:
                if col > w.line_chars:
                    raise ToolError(f"scratchpad_read: column {col} is past the end of line {n} ({w.line_chars} "
                                    "characters)")
                shown = f"[... {col} characters ...]" + _cap_window(w, cap, id_args)
            else:
                shown = _cap_window(w, cap, id_args)
            piece = f"{n}\t{shown}"
            if out and used + len(piece) + 1 > budget:
                truncated = True
                break
            out.append(piece)
            used += len(piece) + 1
            n += 1
    result: dict[str, Any] = {"ok": True, "scratchpad_id": entry.id, "mode": "lines", "start_line": first,
                              "end_line": n - 1 if out else first - 1, "total_lines": total}
    if column:
        result["column"] = column
    if entry.kind != "text":
        result["notice"] = "Binary content: lines are decoded as UTF-8, invalid bytes shown as U+FFFD."
    result["content"] = "\n".join(out)
    result["truncated"] = truncated
    if truncated:
        nxt = {"scratchpad_id": entry.id, "mode": "lines", "start_line": n, "end_line": last}
        result["next"] = nxt
        result["notice"] = (f"Output capped after line {n - 1}; lines {n}-{min(last, total)} not shown: call again "
                            f"with {_args_text(nxt)}.")
    elif last > total and first <= total:
        result["notice"] = f"The entry ends at line {total}."
    return result


def _grep_lines(
    tb: Toolbox, entry: Entry, res_matches: list[Any], context: int, budget: int, id_args: dict[str, Any],
    separator: bool = True,
) -> tuple[list[str], int]:
    """Format grep matches as ``N:text`` (context ``N-text``, groups split by ``--``).

    Returns the lines and how many matches fit in ``budget``.
    """
    cap = min(tb.line_chars, max(80, budget - 400))
    match_lines = {m.line for m in res_matches}
    out: list[str] = []
    used = 0
    last_emitted = 0
    shown = 0

    def ctx_line(number: int, text: str) -> str:
        if len(text) > cap:
            nxt = _args_text({**id_args, "mode": "lines", "start_line": number, "end_line": number, "column": cap})
            return f"{number}-{text[:cap]} [... line {number} continues; read on with {nxt}]"
        return f"{number}-{text}"

    for m in res_matches:
        group: list[str] = []
        first_line = None
        for number, text in m.before:
            if number > last_emitted and number not in match_lines:
                first_line = first_line or number
                group.append(ctx_line(number, text))
        text = m.text[:cap]
        prefix = f"[... {m.offset} characters ...]" if m.offset else ""
        after_chars = m.line_chars - m.offset - len(text)
        suffix = ""
        if after_chars > 0:
            nxt = _args_text({**id_args, "mode": "lines", "start_line": m.line, "end_line": m.line,
                              "column": m.offset + len(text)})
            suffix = f" [... line {m.line} continues for {after_chars} more characters; read on with {nxt}]"
        first_line = first_line or m.line
        group.append(f"{m.line}:{prefix}{text}{suffix}")
        end_line = m.line
        for number, text in m.after:
            if number in match_lines:
                break
            group.append(ctx_line(number, text))
            end_line = number
        if separator and context and out and first_line > last_emitted + 1:
            group.insert(0, "--")
        size = sum(len(g) + 1 for g in group)
        if used + size > budget:
            if out:
                break
            group = [g for g in group if g.startswith(f"{m.line}:")]  # the match alone, without its context
            size = len(group[0]) + 1
            end_line = m.line
        out.extend(group)
        used += size
        last_emitted = max(last_emitted, end_line)
        shown += 1
    return out, shown


def _grep(tb: Toolbox, entry: Entry, a: dict[str, Any], budget: int) -> dict[str, Any]:
    skip, limit, context = a["skip"], a["max_matches"], a["context"]
    pattern, icase, fixed = a["pattern"], a["ignore_case"], a["fixed_strings"]
    res = _search(tb, ("grep", entry.id, pattern, icase, fixed, context, skip + limit),
                  lambda t: tb.store.grep(entry.id, pattern, ignore_case=icase, fixed=fixed, before=context,
                                          after=context, max_matches=skip + limit, line_window=tb.line_chars + 1,
                                          timeout=t))
    matches = res.matches[skip:]
    id_args = {"scratchpad_id": entry.id}
    lines, shown = _grep_lines(tb, entry, matches, context, budget, id_args)
    more = res.truncated or shown < len(matches)
    total: int = len(res.matches)
    counted = None
    if res.truncated:
        counted = _search(tb, ("count", entry.id, pattern, icase, fixed),
                          lambda t: tb.store.count(entry.id, pattern, ignore_case=icase, fixed=fixed, timeout=t))
        total = max(int(counted), total)  # a count that timed out counts fewer lines than grep saw
    result: dict[str, Any] = {"ok": True, "scratchpad_id": entry.id, "mode": "grep", "pattern": pattern,
                              "total_matches": total, "shown_matches": shown,
                              "first_match": skip + 1 if shown else None, "content": "\n".join(lines),
                              "truncated": more}
    nxt = {"scratchpad_id": entry.id, "mode": "grep", "pattern": pattern}
    if icase:
        nxt["ignore_case"] = True
    if fixed:
        nxt["fixed_strings"] = True
    if context:
        nxt["context"] = context
    if limit != 100:
        nxt["max_matches"] = limit
    nxt["skip"] = skip + shown
    if res.timed_out:  # the matches are those of the lines searched; a next call would stop there again
        result["timed_out"] = True
        result["searched_lines"] = res.searched_lines
        result["notice"] = _timed_out_notice(tb, entry, res.searched_lines, "the matches found are all those of")
        if shown < len(matches):
            result["next"] = nxt
            result["notice"] += f" Output capped: for the next ones found, call again with {_args_text(nxt)}."
    elif more:
        why = "max_matches reached" if shown == len(matches) else "output capped"
        if nxt["skip"] <= _MAX_SKIP:
            result["next"] = nxt
            how = f"For the next ones call again with {_args_text(nxt)}, or narrow the pattern."
        else:
            how = f"skip cannot go past {_MAX_SKIP}: narrow the pattern, or read around a line with mode='lines'."
        of = f"of {total}"
        if counted is not None and counted.timed_out:
            result["timed_out"] = True
            result["total_matches_at_least"] = True
            of = (f"of at least {total} (counting them all timed out after {tb.search_timeout:g} s at line "
                  f"{(counted.searched_lines or 0) + 1} of {entry.lines})")
        result["notice"] = f"Showing matches {skip + 1}-{skip + shown} {of} ({why}). {how}"
    elif skip and not shown:
        result["notice"] = f"No matches after the first {skip}; there are {total} in all."
    if entry.kind != "text":
        result["notice"] = (result.get("notice", "") + " Binary content: lines are decoded as UTF-8, "
                            "invalid bytes shown as U+FFFD.").strip()
    return result


def _list_result(tb: Toolbox, budget: int, skip: int, describe: Callable[[Entry], dict[str, Any]],
                 next_tool_args: bool = True) -> dict[str, Any]:
    entries = tb.entries()
    rows: list[dict[str, Any]] = []
    used = 0
    for e in entries[skip:]:
        row = describe(e)
        size = result_size(row) + 2
        if rows and used + size > budget:
            break
        rows.append(row)
        used += size
    result: dict[str, Any] = {"ok": True, "count": len(entries), "entries": rows}
    rest = len(entries) - skip - len(rows)
    if rest > 0:
        result["truncated"] = True
        if next_tool_args:
            result["next"] = {"skip": skip + len(rows)}
            result["notice"] = f"{rest} more entries not shown; call again with skip={skip + len(rows)}."
        else:
            result["notice"] = f"{rest} more entries not shown (output capped); delete the ones you no longer need."
    else:
        result["truncated"] = False
    return result


def _describe_blobpad(e: Entry) -> dict[str, Any]:
    row: dict[str, Any] = {"scratchpad_id": e.id, "kind": e.kind, "size_bytes": e.size_bytes}
    if e.chars is not None:
        row["chars"] = e.chars
    row["lines"] = e.lines
    for key in ("name", "tool", "step"):
        value = getattr(e, key)
        if value is not None:
            row[key] = value
    row["created_at"] = _iso(e.created_at)
    if e.expires_at is not None:
        row["expires_at"] = _iso(e.expires_at)
    return row


def _list_blobpad(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return _list_result(tb, budget, a["skip"], _describe_blobpad)


_ID_PARAM = Param("scratchpad_id", "string", "Id from the 'scratchpad_id' field of a previous observation "
                  "(16 hex characters).", required=True, min_length=1, max_length=64)
_PATTERN_DESC = ("For mode grep/count: the pattern, a regular expression in RE2 syntax (like Python re, without "
                 "look-around or backreferences), or literal text with fixed_strings=true.")


_READ_PARAMS: tuple[Param, ...] = (
    _ID_PARAM,
    Param("mode", "string", "What to read: head, tail, range, lines, grep or count (default head).",
          default="head", enum=("head", "tail", "range", "lines", "grep", "count")),
    Param("n", "integer", "For mode head/tail: number of characters (default 2000).", default=2000),
    Param("start", "integer", "For mode range: first character offset, from 0."),
    Param("end", "integer", "For mode range: end offset, exclusive (default: the end of the entry)."),
    Param("start_line", "integer", "For mode lines: first line, from 1 (default 1); negative numbers count from "
          "the end (-1 is the last line, -100 the hundredth from the end).", default=1, minimum=-_MAX_INT),
    Param("end_line", "integer", f"For mode lines: last line, inclusive (default start_line+{_LINES_PER_CALL - 1}); "
          "negative numbers count from the end (-1 is the last line).", minimum=-_MAX_INT),
    Param("column", "integer", "For mode lines: first character of start_line to show, to read on in a "
          "very long line (default 0).", default=0),
    Param("pattern", "string", _PATTERN_DESC, min_length=1, max_length=4096),
    Param("ignore_case", "boolean", "For mode grep/count: case-insensitive matching (default false).",
          default=False),
    Param("fixed_strings", "boolean", "For mode grep/count: pattern is literal text, not a regular "
          "expression (default false).", default=False),
    Param("context", "integer", "For mode grep: lines of context before and after each match (default 0, "
          "at most 100).", default=0, maximum=100),
    Param("max_matches", "integer", "For mode grep: most matching lines to return (default 100, at most "
          "1000).", default=100, minimum=1, maximum=1000),
    Param("skip", "integer", f"For mode grep: matches to skip, to page through many (default 0, at most "
          f"{_MAX_SKIP}).", default=0, maximum=_MAX_SKIP),
)

#: The arguments of the default scratchpad_read that each mode uses (the others must keep their defaults).
_MODE_ARGS: dict[str, frozenset[str]] = {
    "head": frozenset({"n"}),
    "tail": frozenset({"n"}),
    "range": frozenset({"start", "end"}),
    "lines": frozenset({"start_line", "end_line", "column"}),
    "grep": frozenset({"pattern", "ignore_case", "fixed_strings", "context", "max_matches", "skip"}),
    "count": frozenset({"pattern", "ignore_case", "fixed_strings"}),
}
_READ_DEFAULTS = {p.name: p.default for p in _READ_PARAMS if p.name not in ("scratchpad_id", "mode")}


def _check_mode_args(a: dict[str, Any]) -> None:
    """Refuse an argument the chosen mode does not use (say, start with mode lines): it
    would be ignored silently, and the model would read something else than it asked."""
    mode = a["mode"]
    for name, default in _READ_DEFAULTS.items():
        if name not in _MODE_ARGS[mode] and a[name] != default:
            users = [m for m, names in _MODE_ARGS.items() if name in names]
            takes = ", ".join(sorted(_MODE_ARGS[mode]))
            raise ToolError(
                f"scratchpad_read: {name} is not used by mode {mode!r} (it is for mode {' or '.join(users)}); "
                f"mode {mode!r} takes {takes}"
            )


def _blobpad_tools(tb: Toolbox) -> list[ToolSpec]:
    cap = tb.max_result_chars
    read = ToolSpec(
        "scratchpad_read",
        (
            "Read part of a large observation saved in the scratchpad. Observations too large for the conversation "
            "show only a summary and a scratchpad_id; use this tool to see more of them. Modes: "
            "head = first n characters; tail = last n characters; range = characters start to end (end exclusive); "
            "lines = numbered lines start_line to end_line, shown as 'N<TAB>text' (negative numbers count from "
            "the end: start_line=-100, end_line=-1 reads the last 100 lines); "
            "grep = lines matching pattern, shown as 'N:text' (context lines 'N-text', groups separated by '--'); "
            "count = number of lines matching pattern. "
            f"Each result is capped at about {cap} characters and lines longer than {tb.line_chars} characters are "
            "cut; whatever is cut is marked, with the exact arguments to read on (the result's 'next' field). "
            + (f"A grep or count that takes over {tb.search_timeout:g} s (a pattern RE2 matches slowly) stops and "
               "answers timed_out=true with what it found in the lines it searched. " if tb.search_timeout else "")
            + "Binary entries are read in bytes and returned base64-encoded. "
            "Pass only the arguments of the chosen mode. "
            "Start with grep or head to find what you need instead of reading everything."
        ),
        _READ_PARAMS,
        _read_blobpad,
        reader=True,
    )
    listing = ToolSpec(
        "scratchpad_list",
        (f"List the scratchpad entries you can read (this {tb.scope}'s offloaded observations): scratchpad_id, "
         "kind, size, lines, the tool and step that produced each, and when it expires. Use it when you lost an id."),
        (Param("skip", "integer", "Entries to skip, to page through a long list (default 0).", default=0),),
        _list_blobpad,
        reader=True,
    )
    return [read, listing]


# -- profile "seed000" -------------------------------------------------------------------------


def _read_seed000(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    entry = tb.entry(a["scratchpad_id"])
    mode = a["mode"]
    length = entry.length
    if mode == "full":
        return _slice_result(tb, entry, 0, length, budget, mode=mode)
    if mode == "head":
        return _slice_result(tb, entry, 0, min(a["n"], length), budget, mode=mode)
    if mode == "tail":
        return _slice_result(tb, entry, max(0, length - a["n"]), length, budget, mode=mode, keep_end=True)
    return _range(tb, entry, a, budget, mode)


def _seed000_tools(tb: Toolbox) -> list[ToolSpec]:
    read = ToolSpec(
        "scratchpad_read",
        ("Reads from the scratchpad an observation previously saved because it was too large for the "
         "conversation (its observation shows a summary and a scratchpad_id). Modes: full = the entire content "
         "(only when it is small); head = first n characters (default 2000); tail = last n characters (default "
         "2000); range = characters start to end (end exclusive). "
         f"Results are capped at about {tb.max_result_chars} characters; a cut result has truncated=true and "
         "'next' holds the arguments that read on. Binary entries are read in bytes, base64-encoded."),
        (
            Param("scratchpad_id", "string", "Id obtained from the 'scratchpad_id' field of a previous observation.",
                  required=True, min_length=1, max_length=64),
            Param("mode", "string", "full, head, tail or range (default head).", default="head",
                  enum=("full", "head", "tail", "range")),
            Param("n", "integer", "For mode head/tail: number of characters to read. Default 2000.", default=2000),
            Param("start", "integer", "For mode range: start index."),
            Param("end", "integer", "For mode range: end index (exclusive)."),
        ),
        _read_seed000,
        reader=True,
    )
    return [read]


# -- profile "seed003" -------------------------------------------------------------------------


_NAME_PARAM = Param("name", "string", "The entry name", required=True, min_length=1, max_length=_MAX_NAME)


def _write_seed003(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    name, content = a["name"], a["content"]
    try:
        old: Entry | None = tb.store.find(name, session=tb.session)
    except NotFound:
        old = None
    e = tb.store.put(content, session=tb.session, turn=tb.turn, name=name, tool="scratchpad_write", ttl=tb.ttl,
                     kind="text")
    return {"ok": True, "name": name, "scratchpad_id": e.id, "size_chars": e.length, "overwritten": old is not None}


def _read_seed003(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    entry = tb.named(a["name"])
    name = a["name"]
    if a["regex"] is not None:
        _pattern(a["regex"], ignore_case=False, fixed=False,
                 fixed_hint="escape special characters with a backslash to match them literally")
        res = _search(tb, ("grep", entry.id, a["regex"]),
                      lambda t: tb.store.grep(entry.id, a["regex"], max_matches=100, line_window=tb.line_chars + 1,
                                              timeout=t))
        lines, shown = _grep_lines(tb, entry, res.matches, 0, budget, {"name": name})
        result: dict[str, Any] = {"ok": True, "name": name, "regex": a["regex"], "matches": shown,
                                  "content": "\n".join(lines), "truncated": res.truncated or shown < len(res)}
        if res.timed_out:
            result["timed_out"] = True
            result["notice"] = _timed_out_notice(tb, entry, res.searched_lines, "the lines shown are the matches of",
                                                 "or read the entry with offset and limit")
            if shown < len(res):
                result["notice"] += f" Output capped: {shown} of the {len(res)} matching lines found are shown."
        elif res.truncated:
            result["notice"] = ("Only the first 100 matching lines are shown; more lines match. Narrow the regex "
                                "to see the others.")
        elif shown < len(res):
            result["notice"] = (f"Output capped: {shown} of {len(res)} matching lines shown. Narrow the regex to "
                                "see the others.")
        return result
    offset, limit = a["offset"], a["limit"]
    length = entry.length
    if offset > length:
        raise ToolError(f"scratchpad_read: offset {offset} is past the end; {name!r} has {length} {_unit(entry)}")
    end = min(length, offset + limit)
    r = _slice_result(tb, entry, offset, end, budget, mode="read", id_key="name", id_value=name,
                      next_args=lambda s, e: {"offset": s, "limit": e - s})
    out: dict[str, Any] = {"ok": True, "name": name, "offset": offset, f"total_{_unit(entry)}": length}
    if entry.kind != "text":
        out["encoding"] = "base64"
    out["content"] = r["content"]
    out["remaining"] = length - r["end"]
    out["truncated"] = r["truncated"]
    if r["truncated"]:
        out["next"] = r["next"]
        out["notice"] = r["notice"]
    elif end < length:
        out["notice"] = f"{length - end} more {_unit(entry)} after this; read them with offset={end}."
    return out


def _replace(tb: Toolbox, entry: Entry, name: str, content: str) -> Entry:
    """Put the new content of an edited entry under its name.

    An unnamed entry (an offloaded observation read by its id) becomes a named one
    called by that id, so the model keeps reaching it the same way; the old one goes.
    """
    e = tb.store.put(content, session=tb.session, turn=tb.turn, name=entry.name or name, tool="scratchpad_edit",
                     ttl=tb.ttl, kind="text")
    if entry.name is None:
        try:
            tb.store.delete(entry.id)
        except NotFound:
            pass
    return e


def _edit_seed003(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    name = a["name"]
    content, old, new, replace_all = a["content"], a["old_string"], a["new_string"], a["replace_all"]
    if content is not None and (old is not None or new is not None):
        raise ToolError("scratchpad_edit: pass either content (full replacement) or old_string and new_string "
                        "(targeted replacement), not both")
    if content is None and (old is None or new is None):
        raise ToolError("scratchpad_edit: pass content for a full replacement, or both old_string and new_string "
                        "for a targeted replacement")
    entry = tb.named(name)
    if content is not None:
        e = _replace(tb, entry, name, content)
        return {"ok": True, "name": name, "scratchpad_id": e.id, "size_chars": e.length, "replacements": None}
    if entry.kind != "text":
        raise ToolError(f"scratchpad_edit: {name!r} is binary; only text entries can be edited")
    if entry.size_bytes > _EDIT_LIMIT:
        raise ToolError(f"scratchpad_edit: {name!r} is {entry.size_bytes} bytes; entries over {_EDIT_LIMIT} bytes "
                        "cannot be edited in place (write a new entry instead)")
    if old == "":
        raise ToolError("scratchpad_edit: old_string must not be empty")
    if old == new:
        raise ToolError("scratchpad_edit: old_string and new_string are the same; nothing to change")
    text = tb.store.get(entry.id)
    assert isinstance(text, str)
    count = text.count(old)
    if count == 0:
        raise ToolError(f"scratchpad_edit: old_string was not found in {name!r}; read the entry and copy the exact "
                        "text, including whitespace")
    if count > 1 and not replace_all:
        raise ToolError(f"scratchpad_edit: old_string occurs {count} times in {name!r}; add surrounding text to "
                        "make it unique, or pass replace_all=true")
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    e = _replace(tb, entry, name, updated)
    return {"ok": True, "name": name, "scratchpad_id": e.id, "size_chars": e.length,
            "replacements": count if replace_all else 1}


def _describe_seed003(e: Entry) -> dict[str, Any]:
    row: dict[str, Any] = {"name": e.name}
    if e.name is None:
        row["scratchpad_id"] = e.id
    row["size"] = e.length
    row["unit"] = _unit(e)
    row["created_at"] = _iso(e.created_at)
    return row


def _list_seed003(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return _list_result(tb, budget, 0, _describe_seed003, next_tool_args=False)


def _delete_seed003(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    entry = tb.named(a["name"])
    tb.store.delete(entry.id)
    return {"ok": True, "name": a["name"], "deleted": True}


def _seed003_tools(tb: Toolbox) -> list[ToolSpec]:
    return [
        ToolSpec(
            "scratchpad_write",
            ("Store content in the scratchpad under a name, outside the conversation, to use later. If the name "
             "already exists, the content is overwritten. Entries last for the whole session."),
            (_NAME_PARAM, Param("content", "string", "The content to store", required=True)),
            _write_seed003, read_only=False, destructive=True,
        ),
        ToolSpec(
            "scratchpad_read",
            ("Read or search a scratchpad entry by name. Without regex: returns limit characters from offset "
             "(default: the first 30000). With regex: returns the matching lines (at most 100) as 'N:text'. "
             f"Results are capped at about {tb.max_result_chars} characters; a cut result says how to read on. "
             "Large tool outputs are saved here automatically under names like execute_command_1."),
            (
                _NAME_PARAM,
                Param("offset", "integer", "Character offset to start reading from (default: 0)", default=0),
                Param("limit", "integer", "Maximum characters to return (default: 30000)", default=30_000, minimum=1),
                Param("regex", "string", "Search the entry and return matching lines (max 100); RE2 syntax",
                      min_length=1, max_length=4096),
            ),
            _read_seed003,
        ),
        ToolSpec(
            "scratchpad_edit",
            ("Edit a scratchpad entry in place. Provide content for a full overwrite, or old_string/new_string for "
             "targeted replacement (old_string must occur exactly once unless replace_all is true)."),
            (
                _NAME_PARAM,
                Param("content", "string", "Full replacement (mutually exclusive with old/new)"),
                Param("old_string", "string", "String to find"),
                Param("new_string", "string", "Replacement string"),
                Param("replace_all", "boolean", "Replace all occurrences (default: false)", default=False),
            ),
            _edit_seed003, read_only=False, destructive=True,
        ),
        ToolSpec(
            "scratchpad_list",
            "List all scratchpad entries with their name, size, and creation time. No parameters.",
            (),
            _list_seed003,
        ),
        ToolSpec(
            "scratchpad_delete",
            "Delete a scratchpad entry by name.",
            (Param("name", "string", "The entry name to delete", required=True, min_length=1, max_length=_MAX_NAME),),
            _delete_seed003, read_only=False, destructive=True,
        ),
    ]


# -- offloading a file by path ------------------------------------------------------------------


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


def _store_file_reason(tb: Toolbox, fd: int, st: os.stat_result, opened: str) -> str | None:
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


def _open_confined(tb: Toolbox, raw_path: str) -> tuple[int, str, int]:
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
        raise ToolError(f"scratchpad_offload: cannot resolve {_show(raw_path, 200)}: {exc.strerror or exc}; "
                        "pass the path of a file that stays in place") from None
    if not _inside(real, roots):
        raise ToolError(f"scratchpad_offload: {_show(raw_path, 200)} is outside the allowed directories ({allowed}); "
                        "only files inside them can be offloaded")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise ToolError(f"scratchpad_offload: no file at {_show(raw_path, 200)} (allowed directories: {allowed})") from None
    except IsADirectoryError:
        raise ToolError(f"scratchpad_offload: {_show(raw_path, 200)} is a directory; pass a file") from None
    except OSError as exc:
        raise ToolError(f"scratchpad_offload: cannot open {_show(raw_path, 200)}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"scratchpad_offload: {_show(raw_path, 200)} is a directory; pass a file")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"scratchpad_offload: {_show(raw_path, 200)} is not a regular file")
        if sys.platform.startswith("linux"):
            # Between realpath() and open() a directory on the way may have been swapped
            # for a symlink; check what was actually opened.
            try:
                opened = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                opened = real
            if not _inside(opened, roots):
                raise ToolError(f"scratchpad_offload: {_show(raw_path, 200)} is outside the allowed directories "
                                f"({allowed})")
        else:
            opened = real
        reason = _store_file_reason(tb, fd, st, opened)
        if reason is not None:
            raise ToolError(f"scratchpad_offload: {_show(raw_path, 200)} cannot be offloaded: {reason}, which holds "
                            "every session's data; offload other files")
        if st.st_size > tb.max_file_bytes:
            raise ToolError(f"scratchpad_offload: the file is {st.st_size} bytes; the limit is {tb.max_file_bytes}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, real, st.st_size


class _Limited:
    """A binary reader that fails once more than ``limit`` bytes were read (a file growing while read)."""

    def __init__(self, fh: Any, limit: int) -> None:
        self._fh = fh
        self._left = limit

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._fh.read(n if n is not None and n >= 0 else self._left + 1)
        self._left -= len(data)
        if self._left < 0:
            raise ToolError("scratchpad_offload: the file grew past the size limit while it was read")
        return data


def _offload_file(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    fd, real, size = _open_confined(tb, a["path"])
    with os.fdopen(fd, "rb") as raw:
        fh = _Limited(raw, tb.max_file_bytes)
        try:
            result = tb.offloader.offload_content(
                fh, session=tb.session, turn=tb.turn, tool="scratchpad_offload", field="content",
                metadata={"path": real, "bytes": size},
            )
        except OSError as exc:  # the disk failed while the file was read: nothing was stored
            raise ToolError(f"scratchpad_offload: cannot read {_show(a['path'], 200)}: {exc.strerror or exc}") from None
    return result


def _offload_tool(tb: Toolbox) -> ToolSpec:
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


# -- notepad profiles: seed001, seed002, seed004 ------------------------------------------------


def _note_result(result: Any) -> dict[str, Any]:
    return dict(result.to_dict() if hasattr(result, "to_dict") else result)


_SEED001_ACTIONS = ("set_notes", "append_notes", "set_plan", "refs.add", "refs.remove", "refs.set")


def _seed001(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    action = a["action"]
    pad = tb.notepad
    if action in ("set_notes", "append_notes", "set_plan"):
        if a["content"] is None:
            raise ToolError(f"session_scratchpad: action {action!r} needs content (a string)")
        return _note_result(getattr(pad, action)(a["content"]))
    if action in ("refs.add", "refs.remove"):
        if a["ref"] is None:
            raise ToolError(f"session_scratchpad: action {action!r} needs ref (a non-empty string)")
        method = pad.refs_add if action == "refs.add" else pad.refs_remove
        return _note_result(method(a["ref"]))
    if a["items"] is None:
        raise ToolError("session_scratchpad: action 'refs.set' needs items (an array of strings)")
    return _note_result(pad.refs_set(a["items"]))


def _budget_words(tb: Toolbox, space: str) -> str:
    """A space's budget as the notepad of ``tb`` enforces it: "4,000 characters", "about 2,000 tokens"."""
    budget = tb.notepad.budgets[space]
    if budget.limit is None:
        return "no budget"
    from .notepad import _UNIT_WORDS

    return f"{'about ' if budget.unit == 'tokens' else ''}{budget.limit:,} {_UNIT_WORDS[budget.unit][1]}"


def _seed001_tools(tb: Toolbox) -> list[ToolSpec]:
    notes, plan = _budget_words(tb, "notes"), _budget_words(tb, "plan")
    refs = tb.notepad.budgets["refs"].limit
    return [ToolSpec(
        "session_scratchpad",
        ("Persistent working memory that survives context compaction, in three spaces, all prepended to every "
         f"message you receive (only non-empty ones): notes ({notes}: findings, decisions, constraints, "
         f"partial state), plan ({plan}: the current multi-step plan as a concise ordered list), refs "
         f"({refs} items: file paths, URLs, identifiers). Actions: set_notes(content) replaces notes; "
         f"append_notes(content) appends, rejected if notes would exceed {notes}; set_plan(content) "
         f"replaces the plan; refs.add(ref) adds one ref, dropping the oldest at {refs}; refs.remove(ref) removes "
         f"one by exact match; refs.set(items) replaces all refs (first {refs} kept). Over-budget "
         "set_notes/set_plan are truncated with a warning. Don't write full file contents, conversation history "
         "or speculative ideas."),
        (
            Param("action", "string", "set_notes, append_notes, set_plan, refs.add, refs.remove or refs.set.",
                  required=True, enum=_SEED001_ACTIONS),
            Param("content", "string", "For set_notes, append_notes and set_plan: the text."),
            Param("ref", "string", "For refs.add and refs.remove: one reference (path, URL, id).", min_length=1),
            Param("items", "array", "For refs.set: the new list of references (strings)."),
        ),
        _seed001, read_only=False, destructive=True,
    )]


def _read_notepad(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    content = tb.notepad_view()
    offset = a["offset"]
    if offset > len(content):
        raise ToolError(f"read_notepad: offset {offset} is past the end; the notepad has {len(content)} characters")
    shown = content[offset: offset + max(1, budget)]
    result: dict[str, Any] = {"ok": True, "content": shown}
    end = offset + len(shown)
    if end < len(content):
        result["truncated"] = True
        result["next"] = {"offset": end}
        result["notice"] = (f"The notepad has {len(content)} characters; shown {offset}-{end}. Read the rest with "
                            f"offset={end}, or rewrite it shorter with write_notepad.")
    return result


def _write_notepad(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return _note_result(tb.notepad.write_notepad(a["content"]))


def _update_notepad(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    op = a["operation"]
    if op == "find_replace" and (a["find"] is None or a["replace"] is None):
        raise ToolError("update_notepad: operation 'find_replace' needs find (the exact text) and replace")
    if op != "find_replace" and a["content"] is None:
        raise ToolError(f"update_notepad: operation {op!r} needs content "
                        f"({'the text to remove' if op == 'delete' else 'the text to add'})")
    target = a["find"] if op == "find_replace" else a["content"] if op == "delete" else None
    if tb.combined_notepad and target and target not in tb.notepad.read("notepad") and target in tb.notepad_view():
        raise ToolError(f"update_notepad: {_show(target)} is in a section kept with session_scratchpad, not in the "
                        "notepad text; change that section with session_scratchpad")
    return _note_result(tb.notepad.update_notepad(op, content=a["content"], find=a["find"], replace=a["replace"],
                                                  replace_all=a["replace_all"]))


def _shared_words(tb: Toolbox) -> str:
    """How seed002's tools describe the notepad they share in a combined profile ("" alone)."""
    if not tb.combined_notepad:
        return ""
    kept = "notes, plan and refs" if "seed001" in tb._parts else "scratchpad"
    return (f" This notepad is the session's one notepad: read_notepad also shows the {kept} you keep with "
            "session_scratchpad (under their ## headings), which write_notepad and update_notepad leave as they "
            "are; change those with session_scratchpad.")


def _seed002_tools(tb: Toolbox) -> list[ToolSpec]:
    return [
        ToolSpec(
            "read_notepad",
            ("Read the session notepad: your freeform working notes, task tracking and findings, which survive "
             "context compaction. Returns {content}; an empty string if nothing was written yet." + _shared_words(tb)),
            (Param("offset", "integer", "Character to start from, only needed for a notepad too long for one "
                   "result (default 0).", default=0),),
            _read_notepad,
        ),
        ToolSpec(
            "write_notepad",
            ("Replace the whole session notepad (rewrite it from scratch, or clear it by writing an empty string). "
             "It is included in full in every context and survives compaction: keep your plan, findings and "
             "decisions there. For small changes use update_notepad." + _shared_words(tb)),
            (Param("content", "string", "The new notepad content (replaces everything)", required=True),),
            _write_notepad, read_only=False, destructive=True,
        ),
        ToolSpec(
            "update_notepad",
            ("Surgical edit of the session notepad: append or prepend text, find_replace an exact substring (e.g. "
             "mark a todo done), or delete text. Use append for incremental findings." + _shared_words(tb)),
            (
                Param("operation", "string", "The type of edit to perform", required=True,
                      enum=("find_replace", "append", "prepend", "delete")),
                Param("content", "string", "For append/prepend: text to add. For delete: text to remove."),
                Param("find", "string", "For find_replace: exact substring to find"),
                Param("replace", "string", "For find_replace: replacement text"),
                Param("replace_all", "boolean", "For find_replace: replace all occurrences. Default: false.",
                      default=False),
            ),
            _update_notepad, read_only=False, destructive=True,
        ),
    ]


def _seed004(tb: Toolbox, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return _note_result(tb.notepad.scratchpad(a["content"], mode=a["mode"]))


def _seed004_tools(tb: Toolbox) -> list[ToolSpec]:
    return [ToolSpec(
        "session_scratchpad",
        ("Persist important working state (plans, findings, decisions) that survives context compaction. Content "
         f"is prepended to each message you receive. Budget: {_budget_words(tb, 'scratchpad')}. mode 'replace' "
         "overwrites the whole "
         "scratchpad (truncated with a warning if over budget); 'append' adds to it (rejected if it would exceed "
         "the budget: then rewrite it shorter with 'replace')."),
        (
            Param("content", "string", "The scratchpad content to save", required=True),
            Param("mode", "string", "replace: overwrite entire scratchpad. append: add to existing content.",
                  default="replace", enum=("replace", "append")),
        ),
        _seed004, read_only=False, destructive=True,
    )]


_NOTEPAD_PROFILES = ("seed001", "seed002", "seed004")

_PROFILE_TOOLS: dict[str, Callable[[Toolbox], list[ToolSpec]]] = {
    "blobpad": _blobpad_tools,
    "seed000": _seed000_tools,
    "seed003": _seed003_tools,
    "seed001": _seed001_tools,
    "seed002": _seed002_tools,
    "seed004": _seed004_tools,
}
