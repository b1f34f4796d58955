"""The MCP server (issue 4), end to end: the official SDK's client launches
``python -m blobpad.mcp_server`` as a subprocess and talks to it over stdio.

The oracles are the original file's text (slicing, ``str.split``, ``re``) and the
in-process :class:`~blobpad.Toolbox` the server wraps.  The session is recorded as a
readable transcript in the test's directory, and also at ``$BLOBPAD_MCP_TRANSCRIPT``
when that is set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from blobpad import Offloader, Toolbox, sample

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402

from blobpad import mcp_server  # noqa: E402

SESSION = "agent-7"


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return parts[:-1] if text.endswith("\n") else parts


class Transcript:
    """The client's side of the conversation, as text."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def note(self, text: str) -> None:
        self.parts.append(f"# {text}")

    def request(self, method: str, params: Any = None) -> None:
        shown = "" if params is None else " " + json.dumps(params, ensure_ascii=False)
        self.parts.append(f"--> {method}{shown}")

    def response(self, text: str) -> None:
        self.parts.append(f"<-- {text}")

    def save(self, *paths: Path) -> None:
        body = "\n".join(self.parts) + "\n"
        for p in paths:
            p.write_text(body)


async def _call(client: Client, log: Transcript, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    log.request("tools/call", {"name": name, "arguments": args})
    result = await client.call_tool(name, args)
    text = result.content[0].text
    shown = text if len(text) <= 1500 else text[:1500] + f"... [{len(text) - 1500} more characters in the transcript cut]"
    log.response(f"isError={str(result.is_error).lower()} {shown}")
    payload = json.loads(text)
    assert payload == result.structured_content          # the JSON text and the structured content agree
    assert payload["ok"] is (not result.is_error)
    return result.is_error, payload


def _params(db: Path, *extra: str, module: tuple[str, ...] = ("blobpad.mcp_server",)) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", *module, "--db", str(db), *extra],
                                 env={"PYTHONPATH": os.pathsep.join(sys.path)})


def test_mcp_session_end_to_end(store_factory, tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    text = sample.log_text(400_000, seed=21)
    (files / "app.log").write_text(text)
    (tmp_path / "private.txt").write_text("not for the model\n")
    db_dir = tmp_path / "db"
    store = store_factory("db")
    # The agent runtime, in its own process, offloads into the same store and session.
    runtime_text = sample.log_text(20_000, seed=22)
    parked = Offloader(store).offload({"content": runtime_text, "path": "/srv/build.log"}, session=SESSION,
                                      turn=None, step=1, tool="fs_read")
    foreign = store.put("another agent's data\n", session="someone-else").id
    log = Transcript()
    lines = _lines(text)

    async def scenario() -> None:
        params = _params(db_dir, "--session", SESSION, "--allow", str(files), "--profile", "blobpad+seed002")
        log.note(f"server: python -m blobpad.mcp_server --db <tmp>/db --session {SESSION} --allow <tmp>/files "
                 "--profile blobpad+seed002")
        async with Client(params) as client:
            info = client.server_info
            log.note(f"connected: protocol {client.protocol_version}, server {info.name if info else '?'} "
                     f"{info.version if info else ''}")
            log.request("tools/list")
            listing = await client.list_tools()
            names = [t.name for t in listing.tools]
            log.response(json.dumps([{"name": t.name, "required": t.input_schema.get("required", [])}
                                     for t in listing.tools]))
            assert names == ["scratchpad_read", "scratchpad_list", "read_notepad", "write_notepad", "update_notepad",
                             "scratchpad_offload"]
            expected = Toolbox(store, session=SESSION, scope="session", always_show=True, allow_dirs=[files],
                               profile="blobpad+seed002").schemas("mcp")
            for tool, want in zip(listing.tools, expected, strict=True):
                assert tool.input_schema == want["inputSchema"] and tool.description == want["description"]
                assert tool.annotations.read_only_hint is want["annotations"]["readOnlyHint"]
                jsonschema.Draft202012Validator.check_schema(tool.input_schema)

            log.note("offload a 400 KB log by path")
            err, out = await _call(client, log, "scratchpad_offload", {"path": "app.log"})
            assert not err and out["size_bytes"] == len(text.encode()) and out["kind"] == "text"
            assert out["summary"] == text[:500] + f"\n[... {len(text) - 1000} characters omitted ...]\n" + text[-500:]
            assert out["metadata"] == {"path": str((files / "app.log").resolve()), "bytes": len(text.encode())}
            sid = out["scratchpad_id"]

            log.note("read: head, numbered lines, grep, count, a capped tail")
            err, head = await _call(client, log, "scratchpad_read", {"scratchpad_id": sid, "mode": "head", "n": 300})
            assert head["content"] == text[:300]
            err, win = await _call(client, log, "scratchpad_read",
                                   {"scratchpad_id": sid, "mode": "lines", "start_line": 1000, "end_line": 1003})
            assert win["content"] == "\n".join(f"{n}\t{lines[n - 1]}" for n in range(1000, 1004))
            err, grep = await _call(client, log, "scratchpad_read", {"scratchpad_id": sid, "mode": "grep",
                                                                     "pattern": r"exit code \d+;", "max_matches": 3})
            hits = [(n, x) for n, x in enumerate(lines, 1) if re.search(r"exit code \d+;", x)]
            assert grep["content"] == "\n".join(f"{n}:{x}" for n, x in hits[:3])
            assert grep["total_matches"] == len(hits) and grep["truncated"] and grep["next"]["skip"] == 3
            err, count = await _call(client, log, "scratchpad_read",
                                     {"scratchpad_id": sid, "mode": "count", "pattern": "timed out", "fixed_strings": True})
            assert count["count"] == sum("timed out" in x for x in lines)
            err, tail = await _call(client, log, "scratchpad_read", {"scratchpad_id": sid, "mode": "tail", "n": 100_000})
            assert tail["truncated"] and text.endswith(tail["content"]) and len(json.dumps(tail)) <= 20_000

            log.note("what the runtime offloaded in this session is readable; another session's id is not")
            err, mine = await _call(client, log, "scratchpad_read", {"scratchpad_id": parked["scratchpad_id"],
                                                                     "mode": "range", "start": 0, "end": 120})
            assert mine["content"] == runtime_text[:120]
            err_f, theirs = await _call(client, log, "scratchpad_read", {"scratchpad_id": foreign})
            err_u, unknown = await _call(client, log, "scratchpad_read", {"scratchpad_id": "0123456789abcdef"})
            assert err_f and err_u
            assert theirs["error"].replace(foreign, "<id>") == unknown["error"].replace("0123456789abcdef", "<id>")
            err, listed = await _call(client, log, "scratchpad_list", {})
            assert [e["scratchpad_id"] for e in listed["entries"]] == [parked["scratchpad_id"], sid]

            log.note("malformed calls and paths outside --allow")
            for bad in ({"scratchpad_id": sid, "mode": "middle"}, {"scratchpad_id": sid, "n": -1},
                        {"scratchpad_id": sid, "mode": "grep", "pattern": "(unclosed"}, {"mode": "head"}):
                err, res = await _call(client, log, "scratchpad_read", bad)
                assert err and res["ok"] is False and res["error"]
            for path in (str(tmp_path / "private.txt"), "../private.txt", "/etc/passwd"):
                err, res = await _call(client, log, "scratchpad_offload", {"path": path})
                assert err and "outside the allowed directories" in res["error"]
                assert "not for the model" not in json.dumps(res)
            err, res = await _call(client, log, "no_such_tool", {})
            assert err and "scratchpad_read" in res["error"]

            log.note("the session notepad (profile seed002) keeps findings across compaction")
            err, w = await _call(client, log, "write_notepad", {"content": "## Findings\n- 106 worker crashes"})
            assert not err and w["version"] == 1
            err, u = await _call(client, log, "update_notepad", {"operation": "append", "content": "- disk quota: 2x"})
            assert not err
            err, r = await _call(client, log, "read_notepad", {})
            assert r == {"ok": True, "content": "## Findings\n- 106 worker crashes\n- disk quota: 2x"}

    anyio.run(scenario)
    log.save(tmp_path / "mcp_transcript.txt", *([Path(os.environ["BLOBPAD_MCP_TRANSCRIPT"])]
                                                if os.environ.get("BLOBPAD_MCP_TRANSCRIPT") else []))
    # The file the server offloaded is in the store, in the server's session.
    offloaded = [e for e in store.entries(session=SESSION) if e.tool == "scratchpad_offload"]
    assert len(offloaded) == 1 and store.get(offloaded[0].id) == text
    assert store.notepad(SESSION).read() == "## Findings\n- 106 worker crashes\n- disk quota: 2x"


def test_mcp_seed003_and_notepad_profiles_without_allow(store_factory, tmp_path):
    store_factory("db")

    async def scenario() -> None:
        # launched the way users do: the blobpad command's "mcp" subcommand
        params = _params(tmp_path / "db", "--session", "s3", "--profile", "seed003", module=("blobpad", "mcp"))
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["scratchpad_write", "scratchpad_read", "scratchpad_edit", "scratchpad_list",
                             "scratchpad_delete"]              # no scratchpad_offload without --allow
            log = Transcript()
            err, w = await _call(client, log, "scratchpad_write", {"name": "plan", "content": "1. a\n2. b\n"})
            assert not err and w["overwritten"] is False
            err, e = await _call(client, log, "scratchpad_edit", {"name": "plan", "old_string": "b", "new_string": "B"})
            assert not err
            err, r = await _call(client, log, "scratchpad_read", {"name": "plan", "regex": "B"})
            assert r["content"] == "2:2. B"

    anyio.run(scenario)


def test_main_rejects_bad_arguments(tmp_path, capsys):
    assert mcp_server.main(["--db", str(tmp_path / "db"), "--allow", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert mcp_server.main(["--db", str(tmp_path / "db"), "--profile", "blobpad+nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        mcp_server.main(["--db", str(tmp_path / "db"), "--max-result-chars", "many"])
    assert exc.value.code == 2


def test_blobpad_imports_without_mcp():
    code = "import sys, blobpad; blobpad.Toolbox; blobpad.Offloader; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
