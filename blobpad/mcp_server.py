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

The ``mcp`` package is an optional extra (``pip install 'blobpad[mcp]'``) imported
only when the server starts.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Sequence
from typing import Any

from .errors import BlobpadError
from .tools import PROFILES, Toolbox

__all__ = ["build_server", "serve", "main", "INSTRUCTIONS"]

INSTRUCTIONS = (
    "blobpad keeps large content out of your context. Tool outputs or files that are too large are saved in "
    "the scratchpad and you see only a summary and a scratchpad_id. Read the parts you need with "
    "scratchpad_read: grep to find lines, lines to see numbered line windows, head/tail/range for characters. "
    "Results are capped; a cut result has truncated=true and 'next' holds the arguments that read on."
)


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise BlobpadError("the MCP server needs the mcp extra: pip install 'blobpad[mcp]'") from None


def build_server(toolbox: Toolbox, *, name: str = "blobpad") -> Any:
    """Return an ``mcp.server.lowlevel.Server`` serving ``toolbox``'s tools.

    Tool calls run in a worker thread (a grep over a large entry does not block the
    event loop).
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
        result = await anyio.to_thread.run_sync(toolbox.call, params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
            is_error=not result.get("ok", False),
        )

    return Server(name, version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def serve(
    store_path: str | os.PathLike[str] | None,
    session: str | None = None,
    allow_dirs: Sequence[str | os.PathLike[str]] = (),
    profile: str = "blobpad",
    **toolbox_options: Any,
) -> None:
    """Serve the tools of ``session`` over stdin/stdout until the client disconnects.

    ``store_path`` None opens the default store (``$BLOBPAD_DIR`` or the user data
    directory); ``session`` None makes a fresh random session for this server.
    ``toolbox_options`` go to :class:`~blobpad.tools.Toolbox`.
    """
    _require_mcp()
    import anyio
    from mcp.server.stdio import stdio_server

    from .store import open as open_store

    if session is None:
        session = "mcp-" + secrets.token_hex(6)
    store = open_store(store_path)
    try:
        options: dict[str, Any] = {"scope": "session", "always_show": True} | toolbox_options
        toolbox = Toolbox(store, session=session, turn=None, profile=profile, allow_dirs=allow_dirs, **options)
        server = build_server(toolbox)

        async def run() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

        anyio.run(run)
    finally:
        store.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="blobpad mcp",
        description="Serve the blobpad scratchpad tools over MCP on stdin/stdout.",
    )
    p.add_argument("--db", metavar="DIR", help="store directory (default: $BLOBPAD_DIR or the user data directory)")
    p.add_argument("--session", help="session whose entries the server reads and writes (default: a fresh one)")
    p.add_argument("--allow", action="append", default=[], metavar="DIR",
                   help="directory scratchpad_offload may read files from (repeatable; none by default)")
    p.add_argument("--profile", default="blobpad", metavar="NAME",
                   help=f"tool profile: {', '.join(PROFILES)}, or several joined with '+' (default: blobpad)")
    p.add_argument("--max-result-chars", type=int, default=None, metavar="N",
                   help="cap on each tool result, in characters of JSON (default 20000)")
    p.add_argument("--max-file-bytes", type=int, default=1 << 30, metavar="N",
                   help="largest file scratchpad_offload accepts (default 1 GiB)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``blobpad mcp``; returns the exit status (2 for bad arguments)."""
    args = _parser().parse_args(list(argv) if argv is not None else None)
    try:
        serve(
            args.db, args.session, [os.path.expanduser(d) for d in args.allow], args.profile,
            max_result_chars=args.max_result_chars, max_file_bytes=args.max_file_bytes,
        )
    except BlobpadError as exc:
        print(f"blobpad mcp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
