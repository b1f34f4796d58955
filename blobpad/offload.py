"""Offloading: park a large tool observation in the store, hand the model a summary.

The runtime calls :meth:`Offloader.offload` on every observation a tool returns.  A
small observation passes through; a large one has its content put in the store and
comes back as a short *synthetic observation* with the entry's id, which the model
reads in slices through the tools of :mod:`blobpad.tools`.

Two policies, one per design seed:

``"seed000"`` (the default): offload when ``len(json.dumps(observation)) > 4096``.
The synthetic observation has exactly seed 000's fields::

    {"ok": true, "scratchpad_id": "485d7beae4e144eb", "size_bytes": 89042, "kind": "text",
     "summary": "<first 500 characters>\\n[... 88042 characters omitted ...]\\n<last 500>",
     "metadata": {<every other field of the observation>},
     "_note": "Large observation saved in scratchpad. To read it in full or partially, use the
               scratchpad_read tool."}

The ``_note`` is seed 000's sentence verbatim (:data:`SEED000_NOTE`; the id is the
observation's ``scratchpad_id``); content saved because the call asked
(:meth:`Offloader.offload_content`, a ``scratchpad`` argument) is told "Observation saved
in scratchpad" instead, with its name if it has one.  A runtime that resolves ``{{stepN.field}}`` references
in tool arguments (it calls :func:`resolve_refs`) says so with
``Offloader(..., runtime_resolves_refs=True)``, and the note then ends with the
reference to write when the step is known: ``To pass the full content to another
tool, write {{step3.content}}.``  Off by default: a model told about references that
nothing resolves would pass the literal text ``{{step3.content}}`` on.

A binary content's summary is ``[BINARY: <n> bytes, sha256=<hex>]``.

``"seed003"``: offload when the observation is over 30,000 characters, under an
automatic entry name ``<tool>_<n>`` (``n`` counts from 1 per session and tool), with
a preview of the first 2,000 characters; such entries never expire unless a ``ttl``
is given (they live as long as the session).

Seed 003's ``scratchpad`` parameter: a runtime may let the model add a ``scratchpad``
argument to any tool call (:func:`add_scratchpad_parameter` adds it to a tool's JSON
Schema); passing that name as ``offload(..., scratchpad=name)`` saves the output
under it in the session whatever its size, replacing an entry of that name.

Which part of an observation is "the content": a ``str`` or ``bytes`` observation is
its own content.  For a dict, ``content_field`` when given; otherwise the field
``"content"`` if present, else the largest field (when the observation is offloaded
for its size, only if its summary would be shorter than it: a field of at most
``head_chars + tail_chars`` and a little is not worth it, and the whole observation is
stored instead).  If what remains would still be
over the threshold, the whole observation is stored as JSON instead and only its
small fields are kept in ``metadata``, the first of them up to a quarter of the
threshold in all (so what the model sees is always far smaller than the observation,
however many fields it has).  When a dict says ``"encoding": "base64"`` (or
``"binary"``) and its content is a valid base64 string, the decoded bytes are stored
as a binary entry (seed 000's zip read with ``encoding=binary``: the summary gives the
file's own size and sha256), and ``{{stepN.<field>}}`` gives the base64 string back.

References: :func:`resolve_refs` replaces ``{{stepN.field}}`` in a tool call's
arguments with the value of that field of step N's observation, read back in full
from the store when step N was offloaded (seed 000's ``fs_write`` example).
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any, Literal, Protocol

from .errors import (
    MAX_STR_BYTES,
    Conflict,
    InvalidArgument,
    NotFound,
    check_bool,
    check_int,
    check_str,
    check_ttl,
    describe,
)
from .index import Entry
from .store import Store

__all__ = [
    "Offloader", "resolve_refs", "POLICIES", "text_summary", "binary_summary", "entry_summary", "SEED000_NOTE",
    "SCRATCHPAD_PARAMETER", "add_scratchpad_parameter",
]

@dataclass(frozen=True)
class _Policy:
    """One offload policy, in one record: the :class:`Offloader` reads its defaults and
    its behaviour from here, never from the policy's name."""

    name: str
    description: str
    threshold: int                          # default threshold
    ttl: float | None                       # default ttl of the entries (None: never expire)
    measure: Literal["json", "chars"]       # the size compared: len(json.dumps(observation)), or characters
    auto_names: bool                        # an unnamed output is stored as <tool>_<n>
    shows: Literal["summary", "preview"]    # what the model sees instead of the content, and the note with it


_POLICY_RECORDS: dict[str, _Policy] = {p.name: p for p in (
    _Policy("seed000", "offload when len(json.dumps(observation)) > 4096; head+tail summary; TTL 1 hour (seed 000)",
            threshold=4096, ttl=3600, measure="json", auto_names=False, shows="summary"),
    _Policy("seed003", "offload output over 30,000 characters under the name <tool>_<n> with a preview; no TTL "
            "(seed 003)", threshold=30_000, ttl=None, measure="chars", auto_names=True, shows="preview"),
)}

#: The offload policies, by name.
POLICIES: dict[str, str] = {name: p.description for name, p in _POLICY_RECORDS.items()}

SEED000_NOTE = "Large observation saved in scratchpad. To read it in full or partially, use the scratchpad_read tool."

#: Seed 003: the ``scratchpad`` property a runtime adds to its own tools' JSON Schemas.

SCRATCHPAD_PARAMETER: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_STR_BYTES,  # characters; check_str then holds it to as many bytes of UTF-8, as every name
    "description": (
        "Optional. Save this tool's whole output to the scratchpad under this name (an entry of that name is "
        "replaced) instead of returning it in full; you get a preview, and read the rest with "
        "scratchpad_read(name=...)."
    ),
}


def add_scratchpad_parameter(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a tool's schema with seed 003's optional ``scratchpad`` property added.

    ``schema`` is a tool's parameters (a JSON Schema object) or a whole tool definition
    in the OpenAI (``{"type": "function", "function": {..., "parameters": ...}}`` or
    ``{"name", "parameters"}``), Anthropic (``input_schema``) or MCP (``inputSchema``)
    shape, whose parameters get the property.  The runtime passes the argument's value
    to :meth:`Offloader.offload` as ``scratchpad=`` (and removes it before running the
    tool).
    """
    if not isinstance(schema, Mapping):
        raise InvalidArgument(f"add_scratchpad_parameter takes a tool's schema (a mapping), not {type(schema).__name__}")
    if schema.get("type") == "function" and isinstance(schema.get("function"), Mapping):
        return {**schema, "function": add_scratchpad_parameter(schema["function"])}
    for key in ("parameters", "input_schema", "inputSchema"):
        if key in schema:
            return {**schema, key: add_scratchpad_parameter(schema[key])}
    if schema.get("type", "object") != "object" or ("properties" not in schema and "name" in schema):
        raise InvalidArgument(
            "add_scratchpad_parameter takes a tool definition (with parameters, input_schema or inputSchema) "
            "or its parameters schema (a JSON Schema object)"
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise InvalidArgument("the schema's 'properties' must be an object")
    if "scratchpad" in properties:
        raise InvalidArgument("the tool already has a 'scratchpad' parameter")
    return {**schema, "type": "object", "properties": {**properties, "scratchpad": dict(SCRATCHPAD_PARAMETER)}}


_UNSET: Any = object()


class Readable(Protocol):
    """Anything with a binary ``read(n)``, like an open file."""

    def read(self, n: int = -1, /) -> bytes: ...


_SMALL_FIELD = 256   # JSON length of a field kept in metadata when the whole observation is stored
_SUMMARY_SLACK = 200  # a summary's length beyond its head and tail (the marker of what it leaves out)
_MAX_INT = (1 << 53) - 1


def text_summary(text: str, head: int = 500, tail: int = 500) -> str:
    """Seed 000's smart truncation: the first ``head`` characters, a line
    ``[... N characters omitted ...]`` with the exact N, and the last ``tail``.

    Text no longer than ``head + tail`` is returned whole.
    """
    omitted = len(text) - head - tail
    if omitted <= 0:
        return text
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[len(text) - tail:]}"


def binary_summary(size: int, sha256: str) -> str:
    """Seed 000's note for binary content: ``[BINARY: N bytes, sha256=<hex>]``."""
    return f"[BINARY: {size} bytes, sha256={sha256}]"


def entry_summary(store: Store, entry: Entry, head: int = 500, tail: int = 500, *, text: str | None = None) -> str:
    """The short view of a stored entry that stands in for its content (seed 000's):
    :func:`text_summary` of a text entry, :func:`binary_summary` of a binary one.

    ``text`` is the entry's content when the caller still has it; otherwise a long
    text's two ends are read from the store, never the whole content.  The one summary
    of the :class:`Offloader` and of ``blobpad put``.
    """
    if entry.kind != "text":
        return binary_summary(entry.size_bytes, entry.sha256)
    if text is not None:
        return text_summary(text, head, tail)
    chars = entry.length
    if chars <= head + tail:
        whole = store.get(entry.id)
        assert isinstance(whole, str)
        return whole
    first = store.head(entry.id, head)
    last = store.tail(entry.id, tail) if tail else ""
    assert isinstance(first, str) and isinstance(last, str)
    return f"{first}\n[... {chars - head - tail} characters omitted ...]\n{last}"


def _b64_len(n: int) -> int:
    return 4 * ((n + 2) // 3)


def _measure_default(value: Any) -> Any:
    """json.dumps fallback used to *measure* an observation: bytes count as base64."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "x" * _b64_len(len(value))
    return str(value)


def _json_len(value: Any, *, ensure_ascii: bool = True, limit: int | None = None) -> int:
    """len(json.dumps(value)), short-circuited above ``limit`` for big strings and bytes;
    InvalidArgument for a value JSON cannot hold (a key that is not a string, a value that
    contains itself, nesting deeper than Python's recursion allows)."""
    try:
        return _json_len_of(value, ensure_ascii=ensure_ascii, limit=limit)
    except RecursionError:
        raise InvalidArgument("the value is nested too deeply to measure as JSON") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"the value cannot be stored as JSON: {describe(str(exc), 200)}") from None


def _json_len_of(value: Any, *, ensure_ascii: bool, limit: int | None) -> int:
    if limit is not None:
        if isinstance(value, str) and len(value) > limit:
            return len(value) + 2  # a lower bound, already over the limit
        if isinstance(value, (bytes, bytearray, memoryview)) and _b64_len(len(value)) > limit:
            return _b64_len(len(value)) + 2
        if isinstance(value, Mapping):
            for v in value.values():
                if _json_len_of(v, ensure_ascii=ensure_ascii, limit=limit) > limit:
                    return limit + 1
    return len(json.dumps(value, ensure_ascii=ensure_ascii, default=_measure_default))


def _base64_content(value: str, encoding: object) -> bytes | None:
    """The bytes a str field stands for when its observation says ``encoding`` base64
    or binary and the field is valid base64; None otherwise (it is text)."""
    if not isinstance(encoding, str) or encoding.lower() not in ("base64", "binary"):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError):  # binascii.Error is a ValueError
        return None


def _check_name(name: object) -> None:
    """A ``scratchpad`` name from a tool call: a non-blank name within the store's limit for every name."""
    check_str("scratchpad name", name, allow_none=False)
    assert isinstance(name, str)
    if not name.strip():
        raise InvalidArgument(f"the scratchpad name must not be empty or blank, not {describe(name, 60)}")


#: names ``<tool>_<n>`` being put by this process, per (store, session): see Offloader._auto_name
_RESERVED: dict[tuple[int, str], set[str]] = {}


def _auto_prefix(tool: str | None) -> str:
    """What seed 003's automatic names of ``tool``'s outputs start with: ``<tool>_``, cut
    so that a name with its number fits the store's limit."""
    check_str("tool", tool)
    prefix = (tool or "tool_output") + "_"
    room = MAX_STR_BYTES - 20  # a name fits the store's limit whatever the tool's: its number takes <= 19 digits
    if len(prefix.encode("utf-8")) > room:
        prefix = prefix.encode("utf-8")[: room - 1].decode("utf-8", "ignore") + "_"
    return prefix
_RESERVED_LOCK = threading.Lock()
#: how many numbers an automatic name tries when other writers take them first
_NAME_ATTEMPTS = 64
#: losses in a row after which an automatic name tries numbers further on, at random
_DENSE_LOSSES = 4


def _seekable(fh: Any) -> bool:
    try:
        return bool(fh.seekable())
    except (AttributeError, OSError, ValueError):
        return False


class Offloader:
    """Decide, per observation, whether it goes to the store; build what the model sees.

    Parameters:
        store: the :class:`~blobpad.Store` to park content in.
        policy: ``"seed000"`` (default) or ``"seed003"``; see the module docstring.
        threshold: size above which an observation is offloaded.  seed000: length of
            ``json.dumps(observation)``, default 4096.  seed003: characters of the
            output (JSON for a dict), default 30,000.
        head_chars, tail_chars: the summary's head and tail (default 500 each).
        preview_chars: length of seed003's preview (default 2000).
        ttl: seconds an offloaded entry lives (seed000: 3600; seed003: None, never).
        truncate: below the threshold, cut the content to this many characters
            (seed 000's "optional truncation"); None (default) passes it through.
        content_field: the dict field that holds the content (default: automatic).
        note: the ``_note`` of the synthetic observation; may use ``{id}``,
            ``{name}``, ``{field}`` and ``{step}``.  None: the policy's own note.
        runtime_resolves_refs: the runtime passes tool arguments through
            :func:`resolve_refs`, so the note may tell the model to write
            ``{{stepN.field}}`` to pass the full content on (default False: the note
            never mentions references, which would reach tools unresolved).

    Whatever a tool returned is stored, as a demanding runtime needs: a value stored as
    JSON is written as Python writes it (``NaN`` and ``Infinity`` for such floats), and
    text holding lone surrogates (half of a UTF-16 pair, which no UTF-8 text can hold)
    is stored with U+FFFD in their place.
    """

    def __init__(
        self,
        store: Store,
        *,
        policy: Literal["seed000", "seed003"] = "seed000",
        threshold: int | None = None,
        head_chars: int = 500,
        tail_chars: int = 500,
        preview_chars: int = 2000,
        ttl: float | None = _UNSET,
        truncate: int | None = None,
        content_field: str | None = None,
        note: str | None = None,
        runtime_resolves_refs: bool = False,
    ) -> None:
        if not isinstance(policy, str) or policy not in POLICIES:
            raise InvalidArgument(f"policy must be one of {sorted(POLICIES)}, not {describe(policy)}")
        self.store = store
        self.policy = policy
        self._rules = rules = _POLICY_RECORDS[policy]
        self._highest: dict[tuple[str, str], int] = {}  # (session, prefix): the highest automatic number put
        default_threshold = rules.threshold
        self.threshold = check_int("threshold", default_threshold if threshold is None else threshold, minimum=0,
                                   maximum=_MAX_INT)
        self.head_chars = check_int("head_chars", head_chars, minimum=0, maximum=_MAX_INT)
        self.tail_chars = check_int("tail_chars", tail_chars, minimum=0, maximum=_MAX_INT)
        self.preview_chars = check_int("preview_chars", preview_chars, minimum=0, maximum=_MAX_INT)
        if ttl is _UNSET:
            ttl = rules.ttl
        self.ttl: float | None = check_ttl(ttl)
        self.truncate = check_int("truncate", truncate, minimum=0, maximum=_MAX_INT, allow_none=True)
        if content_field is not None and not isinstance(content_field, str):
            raise InvalidArgument(f"content_field must be a string or None, not {type(content_field).__name__}")
        self.content_field = content_field
        self.note = note
        self.runtime_resolves_refs = check_bool("runtime_resolves_refs", runtime_resolves_refs)

    # -- the decision -------------------------------------------------------------------

    def size_of(self, observation: Any) -> int:
        """The size the policy compares with the threshold (exact up to the threshold)."""
        if self._rules.measure == "json":
            return _json_len(observation, limit=self.threshold)
        if isinstance(observation, str):
            return len(observation)
        if isinstance(observation, (bytes, bytearray, memoryview)):
            return len(observation)
        return _json_len(observation, ensure_ascii=False, limit=self.threshold)

    def offload(
        self,
        observation: Any,
        *,
        session: str,
        turn: str | int | None,
        step: int | None = None,
        tool: str | None = None,
        scratchpad: str | None = None,
    ) -> dict[str, Any]:
        """Return what the model's history should hold for ``observation``.

        Over the threshold, the content goes to the store (owned by ``session`` and
        ``turn``, tagged with ``step`` and ``tool``) and the synthetic observation
        comes back.  Below it, a dict comes back unchanged (cut to ``truncate``
        characters if set); a str or bytes comes back as ``{"ok": true, "content": ...}``
        (bytes base64-encoded, with ``"encoding": "base64"``).

        ``scratchpad`` is the value of seed 003's ``scratchpad`` argument of the tool
        call (see :func:`add_scratchpad_parameter`): when given, the content is saved
        under that name in ``session`` whatever its size, replacing an entry of that
        name, and the synthetic observation comes back.

        Raises:
            InvalidArgument: a bad argument (such as a ``scratchpad`` name that is not
                a blank string or one over 240 bytes of UTF-8, the limit of every name) or an observation that
                cannot be stored.
            StoreFull: the store cannot hold it.
        """
        if scratchpad is not None:
            _check_name(scratchpad)
        elif self.size_of(observation) <= self.threshold:
            return self._pass_through(observation)
        content, field, encoding, metadata, ok = self._split(observation, shrink=scratchpad is None)
        return self._park(
            content, field=field, encoding=encoding, metadata=metadata, ok=ok,
            session=session, turn=turn, step=step, tool=tool, name=scratchpad,
            had_ok=isinstance(observation, dict) and "ok" in observation,
        )

    def offload_content(
        self,
        content: str | bytes | os.PathLike[str] | IO[bytes] | Readable,
        *,
        session: str,
        turn: str | int | None,
        step: int | None = None,
        tool: str | None = None,
        field: str | None = "content",
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Always offload ``content`` (whatever its size) and return the synthetic observation.

        ``content`` may be a path or a binary file object: it is streamed into the
        store and the summary is read back from the store, so a file of any size is
        never held in memory.  ``field`` names the observation field the content
        stands for (what ``{{stepN.<field>}}`` resolves to).
        """
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidArgument(f"metadata must be a dict, not {type(metadata).__name__}")
        encoding = "bytes" if isinstance(content, (bytes, bytearray, memoryview)) else "text"
        return self._park(
            content, field=field, encoding=encoding, metadata=dict(metadata or {}), ok=True,
            session=session, turn=turn, step=step, tool=tool, explicit=True,
        )

    # -- internals ---------------------------------------------------------------------

    def _pass_through(self, observation: Any) -> dict[str, Any]:
        if isinstance(observation, (bytes, bytearray, memoryview)):
            return {"ok": True, "content": base64.b64encode(bytes(observation)).decode("ascii"), "encoding": "base64"}
        obs: dict[str, Any] = observation if isinstance(observation, dict) else {"ok": True, "content": observation}
        if self.truncate is None:
            return obs
        field = self._field_of(obs)
        value = obs.get(field) if field is not None else None
        if field is not None and isinstance(value, str) and len(value) > self.truncate:
            out = dict(obs)
            out[field] = value[: self.truncate] + f"\n[... {len(value) - self.truncate} characters truncated ...]"
            return out
        return obs

    def _field_of(self, observation: dict[str, Any]) -> str | None:
        if self.content_field is not None:
            return self.content_field if self.content_field in observation else None
        if "content" in observation:
            return "content"
        candidates = [(k, v) for k, v in observation.items() if k != "ok"]
        if not candidates:
            return None
        return max(candidates, key=lambda kv: _json_len(kv[1], ensure_ascii=False, limit=self.threshold))[0]

    def _split(self, observation: Any, shrink: bool = True) -> tuple[str | bytes, str | None, str, dict[str, Any], bool]:
        """(content, field, encoding, metadata, ok) of an observation to offload (``shrink``:
        because it is too large, so the largest field goes apart only if that shrinks it).

        encoding is "text" (a str field), "bytes" (a bytes field), "base64" (a str
        field of an observation whose ``encoding`` says base64 or binary, and which
        is valid base64: its decoded bytes are stored, as seed 000's binary read of
        a zip) or "json" (any other value, or the whole observation, stored as JSON).
        """
        if isinstance(observation, str):
            return observation, "content", "text", {}, True
        if isinstance(observation, (bytes, bytearray, memoryview)):
            return bytes(observation), "content", "bytes", {}, True
        if not isinstance(observation, dict):
            return self._as_json(observation), None, "json", {}, True
        ok = observation.get("ok", True)
        ok = ok if isinstance(ok, bool) else True
        field = self._field_of(observation)
        if field is not None and shrink and self.content_field is None and "content" not in observation:
            # the largest field, when no field is named: worth storing apart only if its
            # summary is shorter than it (of many small fields, none is)
            cut = self.head_chars + self.tail_chars + _SUMMARY_SLACK
            if not isinstance(observation[field], (bytes, bytearray, memoryview)) and \
                    _json_len(observation[field], limit=cut) <= cut:
                field = None
        if field is not None:
            rest = {k: v for k, v in observation.items() if k not in (field, "ok")}
            if _json_len(rest, limit=self.threshold) <= self.threshold:
                value = observation[field]
                if isinstance(value, str):
                    decoded = _base64_content(value, observation.get("encoding"))
                    if decoded is not None:
                        return decoded, field, "base64", rest, ok
                    return value, field, "text", rest, ok
                if isinstance(value, (bytes, bytearray, memoryview)):
                    return bytes(value), field, "bytes", rest, ok
                return self._as_json(value), field, "json", rest, ok
        small: dict[str, Any] = {}
        room = self.threshold // 4  # many small fields must not make the observation shown large
        for k, v in observation.items():
            n = _json_len(v, limit=_SMALL_FIELD)
            if k == "ok" or n > _SMALL_FIELD:
                continue
            room -= n + _json_len(k) + 2
            if room < 0:
                break
            small[k] = v
        return self._as_json(observation), None, "json", small, ok

    @staticmethod
    def _as_json(value: Any) -> str:
        """``value`` as JSON text, as Python writes it: NaN and infinities as ``NaN`` and
        ``Infinity`` (a tool's float says so; refusing it would leave the model the whole
        output), which ``json.loads`` reads back."""
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidArgument(f"the observation cannot be stored as JSON: {exc}") from None

    def _auto_name(self, session: str, prefix: str, jump: int = 0) -> str:
        """The next ``<prefix><n>`` (``<tool>_<n>``) of the session (``jump`` numbers further),
        reserved in this process until released (:meth:`_release_name`): threads offloading at
        once get different numbers, and the put commits it only if no other process took it
        meanwhile (``exclusive``)."""
        highest = self._highest_number(session, prefix)
        with _RESERVED_LOCK:
            taken = _RESERVED.setdefault((id(self.store), session), set())
            n = highest + 1 + jump
            while f"{prefix}{n}" in taken:
                n += 1
            name = f"{prefix}{n}"
            taken.add(name)
        return name

    def _highest_number(self, session: str, prefix: str) -> int:
        """The highest ``n`` of the session's ``<prefix><n>`` names.  Found by listing the
        session's names once, then remembered and only checked (one lookup): a session's
        names are not listed again on every offload (a session of thousands of outputs
        made each offload cost that many reads).  A remembered name gone since (deleted,
        expired) is listed again; a number another writer took first is a Conflict the
        put retries with a fresh listing (:meth:`_put_auto_named`).  The number is the one
        after the highest *live* name: once the highest was deleted its number is given
        again (and a deleted session counts from 1), as a name written again names other
        content in seed 003 anyway."""
        known = self._highest.get((session, prefix))
        if known is not None:
            try:
                self.store.find(f"{prefix}{known}", session=session)
                return known
            except NotFound:
                pass
        pattern = re.compile(re.escape(prefix) + r"([1-9][0-9]{0,17})")
        highest = 0
        for e in self.store.named(session=session, prefix=prefix):  # the session's names, not all its records
            m = pattern.fullmatch(e.name or "")
            if m:
                highest = max(highest, int(m.group(1)))
        return highest

    def _used(self, session: str, prefix: str, name: str) -> None:
        """Remember ``name``, an automatic name just put, as the highest of its kind (see :meth:`_highest_number`)."""
        n = int(name[len(prefix):])
        with _RESERVED_LOCK:
            if n > self._highest.get((session, prefix), 0):
                self._highest[(session, prefix)] = n

    def _release_name(self, session: str, name: str) -> None:
        with _RESERVED_LOCK:
            taken = _RESERVED.get((id(self.store), session))
            if taken is not None:
                taken.discard(name)
                if not taken:
                    del _RESERVED[(id(self.store), session)]

    def _put_auto_named(self, content: Any, session: str, tool: str | None, **fields: Any) -> tuple[Entry, str]:
        """Put ``content`` under the session's next automatic name (seed 003): a name another
        writer took first makes the put fail with Conflict and store nothing, and the next
        number is tried; content that cannot be read again (a stream that cannot seek back)
        is not tried twice."""
        start = content.tell() if hasattr(content, "read") and _seekable(content) else None
        prefix = _auto_prefix(tool)
        jump = 0
        for attempt in range(_NAME_ATTEMPTS):
            name = self._auto_name(session, prefix, jump)
            try:
                entry = self.store.put(content, session=session, tool=tool, name=name, exclusive=True, **fields)
                self._used(session, prefix, name)
                return entry, name
            except Conflict:
                with _RESERVED_LOCK:  # another writer took the number: list the session's names again
                    self._highest.pop((session, prefix), None)
                rewind = not hasattr(content, "read") or start is not None
                if not rewind or attempt == _NAME_ATTEMPTS - 1:
                    raise
                if start is not None:
                    content.seek(start)
                # After _DENSE_LOSSES losses in a row, a random distance past the highest number
                # taken, growing with each loss: writers racing for the same next number otherwise
                # keep colliding, one winning each time, and one that lists a long session's names
                # meanwhile falls behind round after round (the numbers stay consecutive unless
                # writers keep colliding).  Never below the highest live number.
                losses = attempt + 1
                jump = random.randrange(1 << min(losses - _DENSE_LOSSES + 1, 10)) if losses >= _DENSE_LOSSES else 0
            finally:
                self._release_name(session, name)
        raise AssertionError("unreachable")  # pragma: no cover

    def _park(
        self,
        content: Any,
        *,
        field: str | None,
        encoding: str,
        metadata: dict[str, Any],
        ok: bool,
        session: str,
        turn: str | int | None,
        step: int | None,
        tool: str | None,
        name: str | None = None,
        had_ok: bool = False,
        explicit: bool = False,
    ) -> dict[str, Any]:
        # saved because it was asked (offload_content, or the tool call's scratchpad argument
        # named it), not because it was too large: the note says so
        explicit = explicit or name is not None
        meta: dict[str, Any] = {"field": field, "encoding": encoding}
        if had_ok and field is not None:
            meta["ok"] = ok  # {{stepN}} gives the observation back whole, its ok included
        kind = "binary" if encoding in ("bytes", "base64") else None
        if isinstance(content, str):
            content = valid_text(content)
        if not isinstance(content, (str, bytes, bytearray, memoryview, os.PathLike)) and not hasattr(content, "read"):
            raise InvalidArgument(f"cannot offload content of type {type(content).__name__}")
        if name is None and self._rules.auto_names:
            entry, name = self._put_auto_named(content, session or "", tool, turn=turn, step=step, meta=meta,
                                               ttl=self.ttl, kind=kind)
        else:
            entry = self.store.put(
                content, session=session, turn=turn, step=step, tool=tool, name=name, meta=meta, ttl=self.ttl,
                kind=kind,
            )
        text = content if isinstance(content, str) else None
        note_args = {"id": entry.id, "name": name or "", "field": field or "", "step": "" if step is None else step}
        if self._rules.shows == "summary":
            summary = entry_summary(self.store, entry, self.head_chars, self.tail_chars, text=text)
            return {
                "ok": ok,
                "scratchpad_id": entry.id,
                "size_bytes": entry.size_bytes,
                "kind": entry.kind,
                "summary": summary,
                "metadata": metadata,
                "_note": self._note(note_args, step, field, explicit=explicit),
            }
        preview = self._preview(entry, text)
        assert name is not None
        return {
            "ok": ok,
            "name": name,
            "scratchpad_id": entry.id,
            "size_bytes": entry.size_bytes,
            "kind": entry.kind,
            "preview": preview,
            "metadata": metadata,
            "_note": self._note(note_args, step, field, entry=entry, explicit=explicit),
        }

    def _preview(self, entry: Entry, text: str | None) -> str:
        if entry.kind != "text":
            return binary_summary(entry.size_bytes, entry.sha256)
        n = self.preview_chars
        shown = text[:n] if text is not None else self.store.head(entry.id, n)
        assert isinstance(shown, str)
        rest = entry.length - len(shown)
        if rest <= 0:
            return shown
        return f"{shown}\n[... {rest} more characters in the scratchpad ...]"

    def _note(
        self, args: dict[str, Any], step: int | None, field: str | None, entry: Entry | None = None,
        *, explicit: bool = False,
    ) -> str:
        if self.note is not None:
            try:
                return self.note.format(**args)
            except (KeyError, IndexError, ValueError):
                return self.note
        name = args["name"]
        if self._rules.shows == "summary":
            if explicit:  # saved because the call asked, whatever its size: not a "Large observation"
                how = SEED000_NOTE.split(". ", 1)[1]  # the seed's second sentence
                note = f"Observation saved in scratchpad{f' as {name!r}' if name else ''}. {how}"
            else:
                note = SEED000_NOTE
        else:
            assert entry is not None
            unit = "characters" if entry.kind == "text" else "bytes"
            lead = (
                f"Output saved to the scratchpad as {name!r} ({entry.length} {unit}). " if explicit
                else f"Output too large ({entry.length} {unit}); saved to the scratchpad as {name!r}. "
            )
            note = (
                f"{lead}Read it with scratchpad_read(name={name!r}, offset=..., limit=...), "
                f"or search it with scratchpad_read(name={name!r}, regex=...)."
            )
        if self.runtime_resolves_refs and step is not None and field:
            note += f" To pass the full {field} to another tool, write {{{{step{step}.{field}}}}}."
        return note


# -- text a store can hold -----------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (half of a UTF-16 pair: JSON's ``"\\ud83d"`` cut
    from its emoji, a byte that ``surrogateescape`` decoded) as U+FFFD, the replacement
    character: no UTF-8 text can hold one, so the store refuses it, and a tool output is
    offloaded rather than left whole in the conversation."""
    if text.isascii() or _LONE_SURROGATE.search(text) is None:
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)



# -- references between steps -------------------------------------------------------------

_REF = re.compile(r"\{\{\s*step(\d{1,9})((?:\.[A-Za-z0-9_\-]+)*)\s*\}\}")
#: most characters the references of one resolve_refs call may bring in (bytes count as base64)
MAX_RESOLVED = 16 << 20
#: deepest nesting of lists, tuples and dicts resolve_refs accepts
MAX_REF_DEPTH = 256


def _resolved_size(value: Any, limit: int) -> int:
    """The characters ``value`` adds to the arguments: a string's length, base64 for
    bytes, JSON for anything else (short-circuited above ``limit``)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _b64_len(len(value))
    return _json_len(value, ensure_ascii=False, limit=limit)


def _lookup_step(steps: Mapping[Any, Any], n: int) -> Any:
    for key in (n, str(n)):
        if key in steps:
            return steps[key]
    raise InvalidArgument(f"{{{{step{n}...}}}} refers to step {n}, which has no observation; known steps: "
                          f"{sorted(str(k) for k in steps)[:20]}")


def _resolve_field(
    observation: Any, n: int, path: list[str], store: Store, cache: dict[str, Any], room: int | None = None,
    session: str | None = None,
) -> Any:
    """The value of ``stepN.<path>``: offloaded content comes back whole from the store,
    unless it is larger than ``room`` characters (bytes: their base64), checked before
    reading it; with ``session``, only from an entry of that session (another's reads as
    an unknown one)."""
    value: Any = observation
    rest = path
    if isinstance(observation, dict) and isinstance(observation.get("scratchpad_id"), str) and (
        "summary" in observation or "preview" in observation
    ):
        entry_id = observation["scratchpad_id"]
        found = observation.get("metadata")
        metadata: dict[str, Any] = found if isinstance(found, dict) else {}
        if path and path[0] in metadata:  # never the offloaded field: no store read needed
            value, rest = metadata[path[0]], path[1:]
            return _walk(value, n, path, rest)
        try:
            stored = store.stat(entry_id)
            if session is not None and stored.session != session:
                raise NotFound(entry_id)  # a tool's output may imitate an offloaded observation: never another session's
        except NotFound:
            raise NotFound(f"step {n} was offloaded to the scratchpad, but its entry {entry_id} has expired or "
                           "was deleted; run the step again") from None
        meta = stored.meta
        field = meta.get("field")
        encoding = meta.get("encoding", "text")

        def full() -> Any:
            if entry_id not in cache:
                size = _b64_len(stored.size_bytes) if encoding == "base64" else stored.length
                if room is not None and size > room:
                    raise InvalidArgument(
                        f"{{{{step{n}{''.join('.' + p for p in path)}}}}} reads step {n}'s offloaded content, {size} "
                        f"characters, and the references of these arguments may bring in only {room} more "
                        "(resolve_refs' max_size): refer to a smaller field, or read the part you need with "
                        "scratchpad_read and pass that")
                raw = store.get(entry_id)
                if encoding == "json" and isinstance(raw, str):
                    raw = json.loads(raw)
                elif encoding == "base64" and isinstance(raw, bytes):
                    raw = base64.b64encode(raw).decode("ascii")  # as the observation carried it
                cache[entry_id] = raw
            return cache[entry_id]

        if not path:
            if field is None:
                return full()
            whole = dict(metadata)
            if isinstance(meta.get("ok"), bool):  # the observation had an ok field (older entries: not kept)
                whole["ok"] = meta["ok"]
            whole[field] = full()
            return whole
        head, rest = path[0], path[1:]
        if field is None:
            stored = full()
            if isinstance(stored, dict) and head in stored:
                value = stored[head]
            elif head in observation:
                value = observation[head]
            else:
                raise InvalidArgument(f"step {n} has no field {describe(head)}")
        elif head == field:
            value = full()
        elif head in observation:
            value = observation[head]
        else:
            raise InvalidArgument(f"step {n} has no field {describe(head)}; its fields: "
                                  f"{describe(sorted(map(str, {field, *metadata, *observation} - {'_note'})), 300)}")
    return _walk(value, n, path, rest)


def _walk(value: Any, n: int, path: list[str], rest: list[str]) -> Any:
    """Follow the ``rest`` of ``path`` into nested dicts and lists."""
    for i, key in enumerate(rest):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            where = ".".join([f"step{n}", *path[: len(path) - len(rest) + i]])
            raise InvalidArgument(f"{where[:200]} has no field {describe(key)}")
    return value


def _as_text(value: Any, ref: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        raise InvalidArgument(f"{ref} is binary content; it can only be passed as a whole argument, "
                              "not inside a larger string")
    return json.dumps(value, ensure_ascii=False)


def resolve_refs(
    value: Any, steps: Mapping[Any, Any], store: Store, *, max_size: int = MAX_RESOLVED, session: str | None = None
) -> Any:
    """Replace ``{{stepN.field}}`` references in tool arguments with real values.

    ``value`` is a tool call's arguments (any nesting of dicts, lists and strings);
    ``steps`` maps each step number (int or str) to the observation that step
    produced, as :meth:`Offloader.offload` returned it.  When step N was offloaded,
    ``{{stepN.<field that was offloaded>}}`` resolves to the full content read back
    from the store, not the summary; the other fields come from its ``metadata``.
    ``{{stepN.a.b}}`` walks into nested fields; ``{{stepN}}`` is the whole observation.

    ``session``: the session the steps ran in (pass it): an offloaded observation whose
    entry belongs to another session reads as one whose entry has expired.  A tool whose
    small output comes back unchanged (an observation under the threshold) could
    otherwise put another session's entry id in the shape of an offloaded observation,
    and bring that entry's content into this session.  None reads any session's entry.

    A string that is exactly one reference becomes the referenced value itself (a
    str, bytes, number, dict...); references inside a longer string are replaced by
    their text (JSON for non-strings).  Returns a new value; ``value`` is unchanged.

    Bounds: what the references bring in is at most ``max_size`` characters in all
    (default :data:`MAX_RESOLVED`, 16 MiB; bytes count as their base64, other values
    as their JSON), counted at every occurrence and checked before an offloaded
    content is read or a string is built, so the call holds at most about that much
    beyond its arguments.  Arguments nested deeper than :data:`MAX_REF_DEPTH` (256)
    lists, tuples and dicts, or containing themselves, are refused; the walk uses no
    recursion.

    Raises:
        InvalidArgument: an unknown step or field, binary content inside a string,
            more than ``max_size`` characters brought in, or arguments nested too deeply.
        NotFound: the step's entry has expired or was deleted.
    """
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 0:
        raise InvalidArgument(f"max_size must be a non-negative integer, not {max_size!r}"[:200])
    check_str("session", session)
    cache: dict[str, Any] = {}
    used = 0

    def one(match: re.Match[str], inline: bool) -> Any:
        """The value of one reference, charged to the budget: its text when ``inline``."""
        nonlocal used
        ref = match.group(0)
        n = int(match.group(1))
        path = [p for p in match.group(2).split(".") if p]
        room = max_size - used
        try:
            found = _resolve_field(_lookup_step(steps, n), n, path, store, cache, room, session)
            if inline and isinstance(found, (bytes, bytearray)):
                _as_text(found, ref)  # raises: binary content cannot go inside a string
            size = _resolved_size(found, room)
            if size > room:
                raise InvalidArgument(
                    f"{ref[:100]} brings in {size} characters or more, and the references of these arguments may "
                    f"bring in only {room} more ({max_size} in all: resolve_refs' max_size); refer to smaller "
                    "fields, or to this one fewer times")
            if inline:
                found = _as_text(found, ref)
        except RecursionError:
            raise InvalidArgument(f"{ref[:100]} refers to a value nested too deeply to pass as an argument") from None
        used += size
        return found

    def leaf(v: str) -> Any:
        if "{{" not in v:
            return v
        whole = _REF.fullmatch(v.strip())
        if whole is not None:
            return one(whole, inline=False)
        parts: list[str] = []
        last = 0
        for match in _REF.finditer(v):  # every value is charged before the string is built
            parts += (v[last : match.start()], one(match, inline=True))
            last = match.end()
        parts.append(v[last:])
        return "".join(parts)

    if not isinstance(value, (dict, list, tuple)):
        return leaf(value) if isinstance(value, str) else value
    # An explicit stack of [source items, result, is a tuple, key of the child being built].
    stack: list[list[Any]] = []

    def enter(v: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> None:
        if len(stack) >= MAX_REF_DEPTH:
            raise InvalidArgument(f"the arguments are nested more than {MAX_REF_DEPTH} lists and dicts deep (or contain "
                                  "themselves); resolve_refs refuses them")
        items = iter(v.items()) if isinstance(v, dict) else enumerate(v)
        stack.append([items, {} if isinstance(v, dict) else [], isinstance(v, tuple), None])

    def put(frame: list[Any], key: Any, item: Any) -> None:
        if isinstance(frame[1], dict):
            frame[1][key] = item
        else:
            frame[1].append(item)

    enter(value)
    while True:
        frame = stack[-1]
        for key, child in frame[0]:
            if isinstance(child, (dict, list, tuple)):
                frame[3] = key
                enter(child)
                break
            put(frame, key, leaf(child) if isinstance(child, str) else child)
        else:
            stack.pop()
            built = tuple(frame[1]) if frame[2] else frame[1]
            if not stack:
                return built
            put(stack[-1], stack[-1][3], built)
