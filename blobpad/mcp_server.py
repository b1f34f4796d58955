"""The blobpad MCP server: the scratchpad tools over stdio, on the official ``mcp`` SDK.

Run it with ``blobpad mcp`` or ``python -m blobpad.mcp_server``::

    blobpad mcp --db ~/.local/share/blobpad --session agent-1 --allow ~/project

It serves a :class:`~blobpad.tools.Toolbox` of one session (every entry of the
session is readable; the reading tools are always listed) and, when at least one
``--allow DIR`` is given, the ``scratchpad_offload`` tool, which stores a file by
path: only files inside the allowed directories (after resolving symlinks) are
accepted, so a model cannot read arbitrary files through it.

Every tool result is the Toolbox's JSON object, sent both as the text content and
as ``structuredContent``; a failed call has ``isError: true`` and says how to fix it.

The server reads stdin itself (:func:`serve_stdio`): every request gets a reply.  A
line that is not a valid JSON-RPC message (not JSON, invalid UTF-8, an integer of
more than 4300 digits, nesting deeper than :data:`MAX_DEPTH`, a lone surrogate
escape, a wrong envelope, a batch, over :data:`MAX_MESSAGE_BYTES`) is answered with
a JSON-RPC error carrying the request's id when the line holds a valid one, and the
server reads on.

The ``mcp`` package is an optional extra (``pip install 'blobpad[mcp]'``) imported
only when the server starts.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import secrets
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from .errors import BlobpadError, check_int, describe
from .reads import SEARCH_TIMEOUT
from .search import cancel_on
from .tools import PROFILES, Toolbox, profile_records
from .units import non_negative, seconds_or_zero

__all__ = ["build_server", "call_cancellable", "serve", "serve_stdio", "decode_message", "main", "add_arguments", "run",
           "INSTRUCTIONS", "instructions", "MAX_MESSAGE_BYTES", "MAX_DEPTH"]

#: what every server's instructions start with; its profile's parts' own follow (:func:`instructions`)
INSTRUCTIONS = "blobpad keeps what does not fit in your context outside it."


def instructions(toolbox: Toolbox) -> str:
    """The server's instructions to the model: :data:`INSTRUCTIONS`, then what each part of
    the toolbox's profile says of its own tools (a ``seed002`` server names its notepad
    tools, not a ``scratchpad_read`` it does not have)."""
    return " ".join([INSTRUCTIONS, *(r.instructions for r in toolbox.profiles if r.instructions)])


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise BlobpadError(
            "the MCP server needs the mcp extra: pip install 'blobpad[mcp]' (in a checkout of blobpad: pip install '.[mcp]')"
        ) from None


def call_cancellable(toolbox: Toolbox, name: str, arguments: Any, cancelled: threading.Event) -> dict[str, Any]:
    """``toolbox.call`` whose searches stop once ``cancelled`` is set."""
    with cancel_on(cancelled):
        return toolbox.call(name, arguments)


def build_server(toolbox: Toolbox, *, name: str = "blobpad") -> Any:
    """Return an ``mcp.server.lowlevel.Server`` serving ``toolbox``'s tools.

    Tool calls run in a worker thread (a grep over a large entry does not block the
    event loop); a call the client cancels stops its search at the next check of its
    time budget (:func:`blobpad.search.cancel_on`).
    """
    _require_mcp()
    import anyio.to_thread
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from . import __version__

    async def list_tools(ctx: Any, params: Any) -> Any:
        schemas = await anyio.to_thread.run_sync(toolbox.schemas, "mcp")
        tools = []
        for s in schemas:
            hints = s.get("annotations", {})
            tools.append(types.Tool(
                name=s["name"], description=s["description"], input_schema=s["inputSchema"],
                annotations=types.ToolAnnotations(
                    read_only_hint=hints.get("readOnlyHint"), destructive_hint=hints.get("destructiveHint"),
                ),
            ))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        # a request the client cancels (notifications/cancelled) gets no reply; its search,
        # told through the event, stops at its next check instead of running to its end
        cancelled = threading.Event()
        try:
            result = await anyio.to_thread.run_sync(
                functools.partial(call_cancellable, toolbox, params.name, params.arguments, cancelled), abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
            is_error=not result.get("ok", False),
        )

    return Server(name, version=__version__, instructions=instructions(toolbox), on_list_tools=list_tools,
                  on_call_tool=call_tool)


# -- the stdio transport -----------------------------------------------------------------
#
# The SDK's stdio reader drops a line it cannot parse or validate without a reply, so a
# client waits forever for the answer to a request holding a lone surrogate escape, an
# integer of more than 4300 digits or deep nesting.  blobpad reads stdin itself: every
# line is decoded here, and one that is not a valid message is answered at once with a
# JSON-RPC error (with the request's id whenever it can be recovered from the line).

#: longest message line the server reads, in bytes; a longer one is skipped and answered
#: with an Invalid Request error.
MAX_MESSAGE_BYTES = 64 << 20


def _result_caps() -> str:
    """The profiles' default result caps in words: "20000; 34000 for seed003"."""
    records = profile_records("+".join(PROFILES))
    common = max((r.max_result_chars for r in records), key=[r.max_result_chars for r in records].count)
    others = [f"{r.max_result_chars} for {r.name}" for r in records if r.max_result_chars != common]
    return "; ".join([str(common), *others])


_RESULT_CAPS = _result_caps()
#: deepest nesting of objects and arrays accepted in a message (the envelope counts: a
#: tool call's arguments object is at depth 3).
MAX_DEPTH = 100
#: longest string id echoed back in an error reply, in characters.
MAX_ID_CHARS = 1000

_READ_SIZE = 1 << 20
_RECOVER_TOKENS = 1_000_000  # tokens scanned to find the id of a line json cannot parse
_PREFIX_BYTES = 1 << 20  # bytes of an over-long line's start (and of its end) kept to find its id
_BOM = b"\xef\xbb\xbf"
#: the ``id`` member that ends an object: a line's last member, when the id comes after its params
_TRAILING_ID = re.compile(r'[,{]\s*"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)\s*}\s*$')
_MISSING: Any = object()
_SURROGATE = re.compile("[\ud800-\udfff]")
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],:]|[^\s{}\[\],:"]+|"', re.S)
_INT_TOKEN = re.compile(r"-?(?:0|[1-9][0-9]{0,4299})")  # what int() converts


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and len(value) <= MAX_ID_CHARS and not _SURROGATE.search(value)


def _recover_id(text: str) -> Any:
    """The ``id`` member of a top-level JSON object in ``text``, or None.

    For lines ``json`` cannot parse (a syntax error, an integer it refuses, nesting
    too deep for its recursion): a tokenizer that only counts nesting, so any depth is
    fine, and stops after ``_RECOVER_TOKENS`` tokens.
    """
    depth = 0
    key: Any = None
    after_colon = False
    found: Any = None
    for count, match in enumerate(_TOKEN.finditer(text)):
        if count >= _RECOVER_TOKENS:
            return None
        tok = match.group()
        if tok == '"':  # a string with no end: the rest of the line is inside it (one scan, not one a quote)
            break
        if tok == "{" or tok == "[":
            if depth == 0 and tok != "{":
                return None
            depth += 1
            after_colon = False
            continue
        if tok == "}" or tok == "]":
            depth -= 1
            if depth <= 0:
                break
            continue
        if depth == 0:
            return None  # the line does not start with an object
        if depth != 1:
            continue
        if tok == ",":
            key, after_colon = None, False
        elif tok == ":":
            after_colon = key is not None
        elif after_colon:
            if key == "id":
                found = _scalar_id(tok)
            key, after_colon = None, False
        else:
            key = _string_token(tok)
    return found


def _oversized_id(head: bytes, tail: bytes) -> Any:
    """The id of a line too long to read whole, from its first and last :data:`_PREFIX_BYTES`:
    a top-level ``id`` member before the cut (:func:`_recover_id`), or the member that ends
    the line's object (one closing brace after it: the object the line is)."""
    found = _recover_id(head.removeprefix(_BOM).decode("utf-8", "replace"))
    if found is None:
        last = _TRAILING_ID.search(tail.decode("utf-8", "replace"))
        found = None if last is None else _scalar_id(last.group(1))
    return found


def _string_token(tok: str) -> str | None:
    if len(tok) < 2 or not tok.startswith('"') or not tok.endswith('"'):
        return None
    try:
        value = json.loads(tok)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _scalar_id(tok: str) -> Any:
    value: Any = _string_token(tok)
    if value is None and _INT_TOKEN.fullmatch(tok):
        value = int(tok)
    return value if _valid_id(value) else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _find_problem(value: Any, where: str, depth: int = 1) -> str | None:
    """Why ``value`` (at nesting ``depth``) cannot be passed on (too deep, lone surrogates), or None.

    Walks the containers depth first, each through an iterator, and names a member's path
    only when it is a problem or a container to enter: memory stays a frame per level,
    whatever a list of millions of members holds (a tuple and a path string per member,
    pushed at once, took a 16 MB line to 1.4 GB)."""
    if isinstance(value, str):
        return _surrogate_said(where) if _SURROGATE.search(value) else None
    if not isinstance(value, dict | list):
        return None
    if depth > MAX_DEPTH:
        return f"the message is nested more than {MAX_DEPTH} levels deep"
    frames: list[tuple[Iterator[tuple[Any, Any]], str, int, bool]] = [(_members(value), where, depth, isinstance(value, dict))]
    while frames:
        members, path, depth, keyed = frames[-1]
        for label, item in members:
            if keyed and _SURROGATE.search(label):
                return (f"a key in {path or 'the message'} holds a lone surrogate escape (such as \\ud800); "
                        "send valid Unicode text")
            if isinstance(item, str):
                if _SURROGATE.search(item):
                    return _surrogate_said(_member_path(path, label))
            elif isinstance(item, dict | list):
                if depth + 1 > MAX_DEPTH:
                    return f"the message is nested more than {MAX_DEPTH} levels deep"
                frames.append((_members(item), _member_path(path, label), depth + 1, isinstance(item, dict)))
                break
        else:
            frames.pop()
    return None


def _members(container: dict[str, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    """(key, value) of a dict's members, (index, value) of a list's."""
    return iter(container.items()) if isinstance(container, dict) else enumerate(container)


def _member_path(path: str, label: str | int) -> str:
    """The path of a member: ``path.key`` (40 characters of a key at most), ``path[i]``; no longer past 200."""
    if len(path) >= 200:
        return path
    if isinstance(label, int):
        return f"{path}[{label}]"
    return f"{path}.{label[:40]}" if path else label[:40]


def _surrogate_said(path: str) -> str:
    """The refusal of the string at ``path`` that holds a lone surrogate."""
    return f"{path} holds a lone surrogate escape (such as \\ud800); send valid Unicode text"


def _error(code: int, message: str, reply_id: Any = None) -> Any:
    import mcp_types as types

    return types.JSONRPCError(jsonrpc="2.0", id=reply_id, error=types.ErrorData(code=code, message=message))


def _parse_error(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return f"the message is nested more than {MAX_DEPTH} levels deep"
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    text = str(exc)
    if "integer string conversion" in text:
        return f"the message holds an integer of more than {sys.get_int_max_str_digits()} digits"
    return f"invalid JSON: {text[:200]}"


def decode_message(raw: bytes) -> tuple[Any, list[Any]]:
    """Decode one line from the client: ``(message, replies)``.

    ``message`` is the validated JSON-RPC message to dispatch, or None; ``replies``
    are the JSON-RPC errors to send back at once.  Every line that is not a valid
    message gets a reply (a notification whose content is refused gets none, as
    JSON-RPC 2.0 says): -32700 when it is not JSON, or is JSON that cannot be
    represented (an integer of more than 4300 digits, nesting deeper than
    :data:`MAX_DEPTH`, invalid UTF-8); -32600 when it is not a valid request; -32602
    when the params hold lone surrogate escapes.  The reply carries the request's id
    whenever the line holds a valid one (a string of at most :data:`MAX_ID_CHARS`
    characters or an integer), else null.  Blank lines are ignored.
    """
    import mcp_types as types
    from pydantic import ValidationError

    raw = raw.strip(b" \t\r\n").removeprefix(_BOM).lstrip(b" \t\r\n")  # RFC 8259 lets a parser ignore a BOM
    if not raw:
        return None, []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte {exc.start + 1}"
        return None, [_error(types.PARSE_ERROR, f"the message is not valid UTF-8 (at {where}); send UTF-8 JSON",
                             _recover_id(raw.decode("utf-8", "replace")))]
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        return None, [_error(types.PARSE_ERROR, _parse_error(exc), _recover_id(text))]
    if isinstance(obj, list):
        ids = [m["id"] for m in obj if isinstance(m, dict) and _valid_id(m.get("id"))]
        why = ("batches are not supported: send one JSON-RPC message per line" if obj
               else "an empty batch is not a request: send one JSON-RPC message per line")
        return None, [_error(types.INVALID_REQUEST, why, i) for i in ids or [None]]
    if not isinstance(obj, dict):
        return None, [_error(types.INVALID_REQUEST, f"a message is a JSON object, not {type(obj).__name__}")]
    msg_id = obj.get("id", _MISSING)
    reply_id = msg_id if _valid_id(msg_id) else None
    notification = msg_id is _MISSING and isinstance(obj.get("method"), str)
    if msg_id is not _MISSING and reply_id is None:
        return None, [_error(types.INVALID_REQUEST,
                             f"id must be a string of at most {MAX_ID_CHARS} characters or an integer, "
                             f"not {describe(msg_id)}")]
    envelope = {k: v for k, v in obj.items() if k != "params"}
    problem = _find_problem(envelope, "")
    code = types.INVALID_REQUEST
    if problem is None:
        problem = _find_problem(obj.get("params"), "params", 2)
        code = types.INVALID_PARAMS
    if problem is None:
        problem = _params_problem(obj.get("method"), obj.get("params", _MISSING))
        code = types.INVALID_PARAMS
    if problem is None:
        # Validated against the shape it has, so the errors name what is wrong with it.
        model: Any = (types.JSONRPCRequest if "id" in obj else types.JSONRPCNotification) if "method" in obj else (
            types.JSONRPCError if "error" in obj else types.JSONRPCResponse)
        try:
            return model.model_validate(obj, by_name=False), []
        except ValidationError as exc:
            code = types.INVALID_REQUEST
            parts = []
            for err in exc.errors(include_url=False, include_input=False)[:3]:
                loc = ".".join(str(p) for p in err.get("loc", ()))[:100]
                parts.append(f"{loc}: {err.get('msg', '')[:100]}" if loc else err.get("msg", "")[:100])
            problem = "not a valid JSON-RPC 2.0 message (" + "; ".join(parts) + ")"
    if notification:
        return None, []  # JSON-RPC: a notification is never answered
    return None, [_error(code, problem, reply_id)]


def _params_problem(method: Any, params: Any) -> str | None:
    """What is wrong with the params of a ``tools/call`` or ``tools/list`` request, in words (the
    SDK's own check answers "Invalid request parameters" and nothing more), or None."""
    if method == "tools/call":
        if not isinstance(params, dict):
            return ("the params of tools/call are an object with the tool's name and its arguments, not "
                    f"{'nothing' if params is _MISSING else describe(params)}")
        name = params.get("name", _MISSING)
        if name is _MISSING:
            return "params.name is missing: name the tool to call (tools/list lists them)"
        if not isinstance(name, str):
            return f"params.name is the tool's name, a string, not {describe(name)}"
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            return f"params.arguments is an object of the tool's arguments by name, not {describe(arguments)}"
    elif method == "tools/list" and isinstance(params, dict):
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            return f"params.cursor is the string a previous tools/list returned as nextCursor, not {describe(cursor)}"
    return None


@contextlib.contextmanager
def _claim_stdio() -> Iterator[tuple[int, int]]:
    """Serve the wire from private copies of fds 0 and 1, pointing them at /dev/null and stderr.

    So a handler or a child process that reads stdin sees EOF and one that prints
    misses the wire.  Both are restored on exit.  The input copy is not closed: an
    abandoned read may still be blocked on it.
    """
    sys.stdout.flush()
    try:
        wire_in, wire_out = os.dup(0), os.dup(1)
    except OSError as exc:
        raise BlobpadError(f"the MCP server needs stdin and stdout open: {exc.strerror or exc}") from None
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr: stray output goes nowhere
            os.dup2(null, 1)
    finally:
        os.close(null)
    try:
        yield wire_in, wire_out
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_out)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


#: the longest the server goes on after stdin closed, answering the requests read before
DRAIN_SECONDS = 60.0


class _Owed:
    """The ids of the requests handed to the server and not answered yet: when stdin
    closes, the reader waits for their replies (up to :data:`DRAIN_SECONDS`) before it
    ends the session, which would cancel them (``printf ... | blobpad mcp`` got no reply
    to its last requests)."""

    def __init__(self) -> None:
        self.ids: set[Any] = set()
        self.gone = False  # the client stopped reading: no reply can reach it

    def asked(self, message: Any) -> None:
        import mcp_types as types

        if self.gone:
            return
        if isinstance(message, types.JSONRPCRequest):
            self.ids.add(_id_key(message.id))
        elif getattr(message, "method", None) == "notifications/cancelled":  # a cancelled request gets no reply
            params = getattr(message, "params", None)
            request_id = params.get("requestId") if isinstance(params, dict) else None
            self.ids.discard(_id_key(request_id))

    def answered(self, message: Any) -> None:
        self.ids.discard(_id_key(getattr(message, "id", None)))

    async def drained(self) -> None:
        import anyio

        with anyio.move_on_after(DRAIN_SECONDS):
            while self.ids and not self.gone:
                await anyio.sleep(0.01)

    def client_gone(self) -> None:
        self.gone = True
        self.ids.clear()


def _id_key(request_id: Any) -> Any:
    """A request id as a set member: 1 and "1" are different ids (so are 1 and True)."""
    return (type(request_id).__name__, request_id)


async def _read_lines(fd: int, inbox: Any, outbox: Any, limit: int, owed: _Owed) -> None:
    """Read the wire line by line: valid messages to ``inbox``, error replies to ``outbox``;
    at the end of the input, wait for the replies ``owed`` before closing ``inbox``."""
    import anyio
    import anyio.to_thread
    from mcp.shared.message import SessionMessage

    async def handle(line: bytes, oversized: bool, tail: bytes = b"") -> None:
        if oversized:
            import mcp_types as types

            reply_id = _oversized_id(line, tail)
            message, replies = None, [_error(
                types.INVALID_REQUEST,
                f"the message is longer than {limit} bytes; send smaller messages", reply_id)]
        else:
            message, replies = await anyio.to_thread.run_sync(decode_message, line)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):  # the writer is gone
            for reply in replies:
                await outbox.send(SessionMessage(reply))
        if message is not None:
            owed.asked(message)
            await inbox.send(SessionMessage(message))

    buf = bytearray()
    tail = bytearray()  # inside a line longer than limit: its last _PREFIX_BYTES so far
    skipping = False  # inside a line longer than limit: buf keeps only its start
    async with inbox, outbox:
        while True:
            chunk = await anyio.to_thread.run_sync(os.read, fd, _READ_SIZE, abandon_on_cancel=True)
            if not chunk:
                if buf or skipping:
                    await handle(bytes(buf), skipping, bytes(tail))
                await owed.drained()
                return
            start = 0
            while start < len(chunk):
                end = chunk.find(b"\n", start)
                piece = chunk[start:] if end < 0 else chunk[start:end]
                start = len(chunk) if end < 0 else end + 1
                if skipping:
                    room = _PREFIX_BYTES - len(buf)
                    if room > 0:
                        buf += piece[:room]
                    tail += piece[-_PREFIX_BYTES:]
                    del tail[:-_PREFIX_BYTES]
                else:
                    buf += piece
                    if len(buf) > limit:
                        skipping = True
                        tail[:] = buf[-_PREFIX_BYTES:]
                        del buf[_PREFIX_BYTES:]
                if end >= 0:
                    line, oversized, last = bytes(buf), skipping, bytes(tail)
                    buf.clear()
                    tail.clear()
                    skipping = False
                    await handle(line, oversized, last)


async def _write_lines(fd: int, outbox: Any, owed: _Owed) -> None:
    """Write each outgoing message as one line; one that cannot be encoded becomes an error reply."""
    import anyio.to_thread
    import mcp_types as types

    async with outbox:
        async for item in outbox:
            message = item.message
            try:
                data = message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
            except Exception:  # never expected: the input is checked; a reply is owed all the same
                reply_id = getattr(message, "id", None)
                if reply_id is None and not isinstance(message, types.JSONRPCError):
                    continue
                data = _error(types.INTERNAL_ERROR, "the reply could not be encoded as JSON",
                              reply_id).model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
            try:
                await anyio.to_thread.run_sync(_write_all, fd, data + b"\n")
            except OSError:  # the client closed its end: nobody is left to answer
                owed.client_gone()
                return
            owed.answered(message)


async def serve_stdio(
    server: Any,
    *,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    stdin_fd: int | None = None,
    stdout_fd: int | None = None,
) -> None:
    """Run ``server`` (an ``mcp`` lowlevel Server) over stdin/stdout until stdin closes and
    the requests read before it are answered (up to :data:`DRAIN_SECONDS`).

    Every line is decoded by :func:`decode_message`, so a line the SDK would drop
    without a reply is answered with a JSON-RPC error; a line longer than
    ``max_message_bytes`` is skipped and answered with one.  ``stdin_fd`` and
    ``stdout_fd`` serve other descriptors instead (the process's stdio is then left
    alone).
    """
    import anyio

    async def run(in_fd: int, out_fd: int) -> None:
        inbox_send, inbox = anyio.create_memory_object_stream[Any](0)
        outbox, outbox_recv = anyio.create_memory_object_stream[Any](0)
        replies = outbox.clone()
        owed = _Owed()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_lines, in_fd, inbox_send, replies, max_message_bytes, owed)
            tg.start_soon(_write_lines, out_fd, outbox_recv, owed)
            await server.run(inbox, outbox, server.create_initialization_options())

    if stdin_fd is not None and stdout_fd is not None:
        await run(stdin_fd, stdout_fd)
        return
    with _claim_stdio() as (in_fd, out_fd):
        await run(in_fd, out_fd)


def serve(
    store_path: str | os.PathLike[str] | None,
    session: str | None = None,
    allow_dirs: Sequence[str | os.PathLike[str]] = (),
    profile: str = "blobpad",
    *,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    **toolbox_options: Any,
) -> None:
    """Serve the tools of ``session`` over stdin/stdout until the client disconnects.

    ``store_path`` None opens the default store (``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR``, else the user data
    directory); ``session`` None makes a fresh random session for this server.
    ``max_message_bytes`` bounds one request line (see :func:`serve_stdio`);
    ``toolbox_options`` go to :class:`~blobpad.tools.Toolbox`.
    """
    _require_mcp()
    import anyio

    from .store import open as open_store

    check_int("max_message_bytes", max_message_bytes, minimum=1)
    profile_records(profile)  # an unknown profile fails before the store is opened (or made)
    if session is None:
        session = "mcp-" + secrets.token_hex(6)
    store = open_store(store_path)
    try:
        options: dict[str, Any] = {"scope": "session", "always_show": True} | toolbox_options
        toolbox = Toolbox(store, session=session, turn=None, profile=profile, allow_dirs=allow_dirs, **options)
        server = build_server(toolbox)
        anyio.run(functools.partial(serve_stdio, server, max_message_bytes=max_message_bytes))
    finally:
        store.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="blobpad mcp",
        description="Serve the blobpad scratchpad tools over MCP on stdin/stdout.",
    )
    p.add_argument("--db", metavar="STORE", help="store: a directory (LMDB), memory://NAME or "
                   "redis://HOST:PORT/DB?namespace=NAME (default: $BLOBPAD_STORE, else $BLOBPAD_DIR, else the user "
                   "data directory)")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the options of the server, all but ``--db``, to ``p``: the one definition of
    them, for ``python -m blobpad.mcp_server`` and the ``blobpad mcp`` command alike;
    :func:`run` serves what they parsed."""
    p.add_argument("--session", help="session whose entries the server reads and writes (default: a fresh one)")
    p.add_argument("--allow", action="append", default=[], metavar="DIR",
                   help="directory scratchpad_offload may read files from (repeatable; none by default)")
    p.add_argument("--profile", default="blobpad", metavar="NAME",
                   help=f"tool profile: {', '.join(PROFILES)}, or several joined with '+' (default: blobpad)")
    p.add_argument("--max-result-chars", type=non_negative, default=None, metavar="N",
                   help="cap on each tool result, in characters of JSON, at least 2000 (default: the profile's, "
                        f"{_RESULT_CAPS}; a combination takes the largest)")
    p.add_argument("--max-file-bytes", type=non_negative, default=1 << 30, metavar="N",
                   help="largest file scratchpad_offload accepts (default 1 GiB)")
    p.add_argument("--max-message-bytes", type=non_negative, default=MAX_MESSAGE_BYTES, metavar="N",
                   help="longest request line read, in bytes; a longer one is answered with an error "
                        f"(default {MAX_MESSAGE_BYTES >> 20} MiB)")
    p.add_argument("--search-timeout", type=seconds_or_zero, default=SEARCH_TIMEOUT, metavar="SECONDS",
                   help=f"time budget of the searches (grep, count) of one tool call (default {SEARCH_TIMEOUT:g}; "
                        "0: no limit); a search that runs out answers what it found with timed_out: true")


def run(args: argparse.Namespace) -> None:
    """Serve with the options :func:`add_arguments` parsed, and ``args.db`` (the store).

    Raises BlobpadError for a bad option value (an unknown profile, a missing allowed
    directory), before the store is opened where it can."""
    serve(
        args.db, args.session, [os.path.expanduser(d) for d in args.allow], args.profile,
        max_result_chars=args.max_result_chars, max_file_bytes=args.max_file_bytes,
        max_message_bytes=args.max_message_bytes, search_timeout=args.search_timeout or None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m blobpad.mcp_server``; returns the exit status (2 for bad arguments)."""
    args = _parser().parse_args(list(argv) if argv is not None else None)
    try:
        run(args)
    except BlobpadError as exc:
        print(f"blobpad mcp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
