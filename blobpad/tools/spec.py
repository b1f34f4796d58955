"""What a tool is: its parameters (:class:`Param`), the tool (:class:`ToolSpec`), the
error a model must fix (:class:`ToolError`), a profile's record (:class:`Profile`),
and the cut of a result to the cap (:func:`shrink`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..errors import describe, typename

if TYPE_CHECKING:
    from ..index import Entry
    from ..notepad import Notepad
    from ..offload import Offloader
    from ..store import Store

log = logging.getLogger("blobpad.tools")

MAX_INT = (1 << 53) - 1          # largest integer a JSON number carries exactly


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
    maximum: int = MAX_INT
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

    def strict_schema(self) -> dict[str, Any]:
        """Its JSON Schema in OpenAI's strict mode: an optional parameter is typed nullable
        (``["integer", "null"]``, its enum holding null too), since strict mode lists every
        property as required and the model sends null for the ones it leaves out; only the
        keywords strict mode takes are kept (type, description, enum, items): the bounds,
        lengths and default stay in the description and in :meth:`check`."""
        s: dict[str, Any] = {"type": self.type if self.required else [self.type, "null"],
                             "description": self.description}
        if self.enum:
            s["enum"] = list(self.enum) if self.required else [*self.enum, None]
        if self.type == "array":
            s["items"] = {"type": "string"}
        return s

    def check(self, value: Any, tool: str) -> Any:
        label = f"{tool}: argument {self.name!r}"
        if self.type == "string":
            if not isinstance(value, str):
                raise ToolError(f"{label} must be a string, not {typename(value, json=True)}")
            _check_unicode(label, value)
            if len(value) < self.min_length:
                raise ToolError(f"{label} must not be empty")
            if self.max_length is not None and len(value) > self.max_length:
                raise ToolError(f"{label} is {len(value)} characters long; the limit is {self.max_length}")
            if self.enum and value not in self.enum:
                raise ToolError(f"{label} is {describe(value)}; it must be one of: {', '.join(self.enum)}")
            return value
        if self.type == "integer":
            if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT:
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ToolError(f"{label} must be an integer, not {typename(value, json=True)} ({describe(value)})")
            if value < self.minimum:
                raise ToolError(f"{label} must be at least {self.minimum}, not {describe(value)}")
            if value > self.maximum:
                raise ToolError(f"{label} must be at most {self.maximum}, not {describe(value)}")
            return value
        if self.type == "boolean":
            if not isinstance(value, bool):
                raise ToolError(f"{label} must be true or false, not {typename(value, json=True)} ({describe(value)})")
            return value
        if not isinstance(value, list):
            raise ToolError(f"{label} must be an array, not {typename(value, json=True)}")
        return value  # its items are the tool's to judge (refs.set drops the bad ones, as its seed says)


def _check_unicode(label: str, value: str) -> None:
    """Refuse a string with lone surrogates (JSON's ``"\\ud800"`` decodes to one): nothing
    below the tools can store, match or open it, and each place would fail its own way."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(f"{label} contains lone surrogates (invalid Unicode, such as \\ud800); "
                            "pass valid text") from None


class ToolContext(Protocol):
    """What a tool's handler and a profile's tool factory use of the :class:`~blobpad.tools.Toolbox`
    they are bound to (the Toolbox is one), so that the profiles never import the Toolbox."""

    store: Store
    session: str
    scope: Literal["turn", "session"]
    max_result_chars: int
    line_chars: int
    search_timeout: float | None
    ttl: float | None
    allow_dirs: list[str]
    max_file_bytes: int
    offloader: Offloader
    profiles: tuple[Profile, ...]

    @property
    def turn(self) -> str | int | None: ...

    @property
    def notepad(self) -> Notepad: ...

    @property
    def combined_notepad(self) -> bool: ...

    def notepad_view(self) -> str: ...

    def entries(self) -> list[Entry]: ...

    def entry(self, entry_id: str) -> Entry: ...

    def named(self, name: str) -> Entry: ...

    def in_scope(self, entry: Entry) -> bool: ...

    def search(self, key: tuple[Any, ...], run: Callable[[float | None], Any]) -> Any: ...


Handler = Callable[[ToolContext, dict[str, Any], int], dict[str, Any]]


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its name, description, parameters and the function that runs it.

    ``reader`` tools of a profile whose record says ``readers_wait`` (seed 000) are
    listed only once the scope holds an entry.
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

    def input_schema(self, *, strict: bool = False) -> dict[str, Any]:
        """The JSON Schema of its arguments; ``strict``: in OpenAI's strict mode (every
        property required, the optional ones nullable: see :meth:`Param.strict_schema`).
        :meth:`validate` takes null as the default of an optional argument."""
        if strict:
            return {
                "type": "object",
                "properties": {p.name: p.strict_schema() for p in self.params},
                "required": [p.name for p in self.params],
                "additionalProperties": False,
            }
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
            raise ToolError(f"{self.name}: the arguments must be a JSON object, not {typename(arguments, json=True)}")
        known = {p.name: p for p in self.params}
        for key in arguments:
            if key not in known:
                names = ", ".join(known) or "none"
                raise ToolError(f"{self.name} has no argument {describe(key)}; its arguments are: {names}")
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


@dataclass(frozen=True)
class Profile:
    """One tool profile, all in one record: ``Toolbox(profile=name)`` reads nothing else.

    Parameters:
        name: what ``Toolbox(profile=...)`` and ``--profile`` take.
        description: one line for :data:`blobpad.PROFILES` and ``blobpad tools``.
        tools: the factory of its tools, given the toolbox they are bound to.
        scope: the default scope when it comes first in a combination:
            ``"turn"`` or ``"session"``.
        max_result_chars: its default result cap; a combination takes the largest.
        offload_policy: the policy of the :class:`blobpad.Offloader` its toolbox makes
            (``scratchpad_offload``); a combination takes the first that is not the
            offloader's default (``"seed000"``).
        notepad: whether its tools keep state in the session's notepad (the toolbox
            then opens the notepad up front, to fail at once if it is unavailable).
        owns_notepad_text: whether its tools keep the notepad's free text, the text a
            shared ``read_notepad`` shows first (seed002).
        context_block: the block the runtime prepends to the model's next message,
            from the session's notepad (None: no block).
        notepad_sections: the sections a shared ``read_notepad`` shows after the free
            text, from the session's notepad (None: it keeps no such sections).
        kept_words: how the tools that own the notepad text name what this profile
            keeps ("notes, plan and refs").
        readers_wait: its reader tools (``ToolSpec.reader``) are listed only once the
            scope holds an entry (seed 000: the runtime adds ``scratchpad_read`` when the
            turn has an offloaded observation); False: listed from the start, as
            frameworks that register tools once, before the first offload, need.
        instructions: what a model is told of its tools, in a few sentences naming them
            and their parameters as the profile has them (the MCP server's
            ``instructions`` join those of the profile's parts).
    """

    name: str
    description: str
    tools: Callable[[ToolContext], list[ToolSpec]]
    scope: Literal["turn", "session"] = "session"
    max_result_chars: int = 20_000
    offload_policy: Literal["seed000", "seed003"] = "seed000"
    notepad: bool = False
    owns_notepad_text: bool = False
    context_block: Callable[[Notepad], str] | None = None
    notepad_sections: Callable[[Notepad], list[str]] | None = None
    kept_words: str = ""
    readers_wait: bool = False
    instructions: str = ""


# -- the cap of a result -----------------------------------------------------------------------


def result_size(result: Any) -> int:
    """The size a result is capped by: its length as JSON (non-ASCII kept as is)."""
    return len(json.dumps(result, ensure_ascii=False))


def longest_string(value: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str]:
    best: tuple[tuple[Any, ...], str] = ((), "")
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, child in items:
        found = (path + (key,), child) if isinstance(child, str) else longest_string(child, path + (key,))
        if len(found[1]) > len(best[1]):
            best = found
    return best


def shrink(result: dict[str, Any], cap: int) -> dict[str, Any]:
    """Cut the longest strings of ``result`` until it fits in ``cap`` characters of JSON.

    ``next``, the arguments of the call that reads on, is never cut (a cut pattern would
    read on with another one); where it alone would take over half the cap, it goes, and
    the notice says which of its arguments to change (the others stay this call's).
    """
    result = json.loads(json.dumps(result, ensure_ascii=False))
    nxt = result.pop("next", None)
    extra = 0 if nxt is None else result_size({"next": nxt}) - 1  # with the comma before it
    if nxt is not None and extra > cap // 2:
        short = {k: v for k, v in nxt.items() if not isinstance(v, str) or len(v) < 100}
        same = [k for k in nxt if k not in short]
        result["notice"] = (f"Output capped; to read on, call again with the same {' and '.join(same)} as this call "
                            "and " + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in short.items()))
        result["truncated"] = True
        nxt, extra = None, 0
    limit = cap - extra
    for _ in range(200):
        size = result_size(result)
        if size <= limit:
            return result if nxt is None else {**result, "next": nxt}
        path, text = longest_string(result)
        if len(text) < 100:
            break
        ratio = (len(json.dumps(text, ensure_ascii=False)) - 2) / len(text)   # JSON characters per character
        keep = max(0, min(len(text) - 1, int(len(text) - (size - limit + 100) / ratio) - 1))
        target: Any = result
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = text[:keep] + f"[... {len(text) - keep} characters cut: the result is capped at {cap} ...]"
        result["truncated"] = True
    log.error("blobpad: a result could not be cut under %d characters", cap)
    return {"ok": False, "error": "the result is too large to return; ask for a smaller part"}
