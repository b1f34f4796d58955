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

import blobpad
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


def _params(db: Path | str, *extra: str, module: tuple[str, ...] = ("blobpad.mcp_server",)) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", *module, "--db", str(db), *extra],
                                 env={"PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.mark.engines("lmdb")  # the server runs in another process, sharing the store with this one
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
            assert client.instructions == mcp_server.instructions(Toolbox(store, session=SESSION, scope="session",
                                                                          profile="blobpad+seed002"))
            assert "scratchpad_read" in client.instructions and "update_notepad" in client.instructions
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


def test_mcp_seed003_and_notepad_profiles_without_allow(target):
    db = target("db")  # a directory, or a memory:// store that lives inside the server's process

    async def scenario() -> None:
        # launched the way users do: the blobpad command's "mcp" subcommand
        params = _params(db, "--session", "s3", "--profile", "seed003", module=("blobpad", "mcp"))
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


@pytest.mark.parametrize("profile", ["blobpad", "seed000", "seed001", "seed002", "seed003", "seed004"])
def test_help_states_each_profiles_default_result_cap(capsys, profile):
    """``--help`` gives the cap the server uses when ``--max-result-chars`` is left out."""
    with pytest.raises(SystemExit):
        mcp_server.main(["--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    with blobpad.open("memory://") as store:
        cap = Toolbox(store, session="s", turn=1, profile=profile).max_result_chars
    assert f"{cap} for {profile}" in helptext or (f"the profile's, {cap};" in helptext and f"for {profile}" not in helptext)


def test_blobpad_imports_without_mcp():
    code = "import sys, blobpad; blobpad.Toolbox; blobpad.Offloader; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- every request gets a reply (issue 12): a raw JSON-RPC client over pipes ---------------------------


class RawClient:
    """``blobpad mcp`` in a subprocess, spoken to line by line; every read is bounded by a timeout."""

    def __init__(self, db: Path | str | None, *extra: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "blobpad", "mcp", *(["--db", str(db)] if db is not None else []), *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**(os.environ if env is None else env), "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.buf = b""

    def send(self, line: str | bytes) -> None:
        raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = 20.0) -> dict[str, Any] | None:
        """The next line the server writes, as JSON, or None if none comes within ``timeout``."""
        import select
        import time

        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, rid: Any, method: str, params: Any = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(json.dumps(msg))
        reply = self.recv()
        assert reply is not None, f"no reply to {method}"
        assert reply["id"] == rid
        return reply

    def initialize(self) -> None:
        init = self.request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "raw", "version": "1"}})
        assert init["result"]["serverInfo"]["name"] == "blobpad"
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return code, self.proc.stderr.read().decode("utf-8", "replace")


def _call_line(rid: str, arguments_json: str, tool: str = "scratchpad_read") -> str:
    return '{"jsonrpc":"2.0","id":' + rid + ',"method":"tools/call","params":{"name":"' + tool + '","arguments":' \
        + arguments_json + "}}"


def _fill(template: str, value: str) -> str:
    """``template`` with its ``@@`` replaced by ``value`` (JSON braces make % and format awkward)."""
    return template.replace("@@", value)


def _nested(depth: int) -> str:
    """A JSON value nested ``depth`` arrays deep."""
    return "[" * depth + "]" * depth


# (label, line, expected id of the reply, expected error code); None as the code: no reply at all (a
# notification), "tool": answered by the tool (a JSON-RPC result with isError true).
_DEPTH = mcp_server.MAX_DEPTH
HOSTILE = [
    ("lone surrogate in an argument", _call_line("1", '{"scratchpad_id":"\\ud800"}'), 1, -32602),
    ("lone low surrogate in an argument", _call_line('"s1"', '{"scratchpad_id":"ab\\udfffcd"}'), "s1", -32602),
    ("reversed surrogate pair", _call_line("2", '{"scratchpad_id":"\\udc00\\ud800"}'), 2, -32602),
    ("lone surrogate in an argument name", _call_line("3", '{"\\ud83d":1}'), 3, -32602),
    ("lone surrogate in the tool name", _call_line("4", "{}", tool="\\ud800"), 4, -32602),
    ("lone surrogate in the method", '{"jsonrpc":"2.0","id":5,"method":"tools/\\ud800"}', 5, -32600),
    ("lone surrogate in _meta", '{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":{"k":"\\ud800"}}}',
     6, -32602),
    ("lone surrogate as the id", '{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}', None, -32600),
    ("integer of 4301 digits in an argument", _call_line("7", _fill('{"n":@@}', "9" * 4301)), 7, -32700),
    ("integer of 100000 digits", _call_line("8", _fill('{"n":-@@}', "1" * 100_000)), 8, -32700),
    ("integer of 5000 digits as the id", _fill('{"jsonrpc":"2.0","id":@@,"method":"tools/list"}', "9" * 5000), None,
     -32700),
    ("1000 levels of nesting", _call_line("9", _fill('{"x":@@}', _nested(1000))), 9, -32700),
    ("100000 levels of nesting, id last",
     _fill('{"jsonrpc":"2.0","method":"tools/call","params":{"name":"scratchpad_read","arguments":{"x":@@}},"id":"late"}',
           _nested(100_000)), "late", -32700),
    ("nesting one past MAX_DEPTH", _call_line("10", _fill('{"x":@@}', _nested(_DEPTH - 3 + 1))), 10, -32602),
    ("unclosed nesting", _call_line("11", _fill('{"x":@@', '{"a":' * 5000)), 11, -32700),
    ("not JSON", "hello", None, -32700),
    ("truncated JSON", '{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"scr', 12, -32700),
    ("NaN", _call_line("13", '{"n":NaN}'), 13, -32700),
    ("-Infinity", _call_line("14", '{"n":-Infinity}'), 14, -32700),
    ("invalid UTF-8", b'{"jsonrpc":"2.0","id":15,"method":"tools/list","params":{"_meta":{"k":"\xff\xfe"}}}', 15, -32700),
    ("a JSON string", '"tools/list"', None, -32600),
    ("a JSON number", "42", None, -32600),
    ("an empty batch", "[]", None, -32600),
    ("a batch", '[{"jsonrpc":"2.0","id":16,"method":"tools/list"}]', 16, -32600),
    ("null id", '{"jsonrpc":"2.0","id":null,"method":"tools/list"}', None, -32600),
    ("float id", '{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', None, -32600),
    ("boolean id", '{"jsonrpc":"2.0","id":true,"method":"tools/list"}', None, -32600),
    ("object id", '{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', None, -32600),
    ("no jsonrpc member", '{"id":17,"method":"tools/list"}', 17, -32600),
    ("jsonrpc 1.0", '{"jsonrpc":"1.0","id":18,"method":"tools/list"}', 18, -32600),
    ("method not a string", '{"jsonrpc":"2.0","id":19,"method":5}', 19, -32600),
    ("params an array", '{"jsonrpc":"2.0","id":20,"method":"tools/list","params":[1]}', 20, -32600),
    ("an empty object", "{}", None, -32600),
    ("unknown method", '{"jsonrpc":"2.0","id":21,"method":"no/such"}', 21, -32601),
    ("tool name not a string", '{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":5}}', 22, -32602),
    ("notification with a lone surrogate", '{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"\\ud800"}}',
     None, None),
    ("notification nested too deep", _fill('{"jsonrpc":"2.0","method":"notifications/x","params":{"a":@@}}',
                                           _nested(500)), None, None),
    ("blank line", "   ", None, None),
    ("nesting exactly MAX_DEPTH (passed on to the tool)", _call_line("23", _fill('{"x":@@}', _nested(_DEPTH - 3))), 23,
     "tool"),
    ("integer of 4300 digits (passed on to the tool)", _call_line("24", _fill('{"n":@@}', "9" * 4300)), 24, "tool"),
    ("a 1 MB string id is refused", _fill('{"jsonrpc":"2.0","id":"@@","method":"tools/list"}', "x" * (1 << 20)),
     None, -32600),
]


@pytest.mark.engines("lmdb")  # the server runs in another process, sharing the store with this one
def test_mcp_every_hostile_line_gets_a_reply_and_the_server_reads_on(store_factory, tmp_path):
    store = store_factory("db")
    text = sample.log_text(30_000, seed=5)
    sid = store.put(text, session="s", tool="t").id
    lines = _lines(text)
    client = RawClient(tmp_path / "db", "--session", "s", "--max-message-bytes", str(4 << 20))
    try:
        client.initialize()
        for n, (label, line, want_id, want) in enumerate(HOSTILE):
            client.send(line)
            if want is not None:
                reply = client.recv()
                assert reply is not None, f"{label}: no reply"
                assert reply["jsonrpc"] == "2.0" and reply["id"] == want_id, (label, reply)
                if want == "tool":
                    assert reply["result"]["isError"] is True, (label, reply)
                else:
                    assert reply["error"]["code"] == want, (label, reply)
                    message = reply["error"]["message"]
                    assert isinstance(message, str) and 0 < len(message) <= 600, (label, message)
                    assert "Traceback" not in message
            # The next request is answered, and is the next line the server writes: nothing was left over.
            follow = client.request(f"f{n}", "tools/call", {"name": "scratchpad_read", "arguments": {
                "scratchpad_id": sid, "mode": "lines", "start_line": n + 1, "end_line": n + 2}})
            content = follow["result"]["structuredContent"]["content"]
            assert content == f"{n + 1}\t{lines[n]}\n{n + 2}\t{lines[n + 1]}", label
        code, err = client.close()
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.parametrize(("params", "says"), [
    ({"name": "scratchpad_read", "arguments": "scratchpad_id=1"}, "params.arguments is an object"),
    ({"name": "scratchpad_read", "arguments": [1, 2]}, "params.arguments is an object"),
    ({"name": 7, "arguments": {}}, "params.name is the tool's name, a string, not 7"),
    ({"arguments": {}}, "params.name is missing"),
    (None, "the params of tools/call are an object"),
    ("scratchpad_read", "the params of tools/call are an object"),
])
def test_mcp_a_tool_call_of_the_wrong_shape_is_told_what_is_wrong(tmp_path, params, says):
    """A tools/call whose name or arguments have the wrong type got the SDK's bare "Invalid request
    parameters"; the reply now says which part is wrong and what it should be, and the server reads on."""
    client = RawClient(tmp_path / "db", "--session", "s")
    try:
        client.initialize()
        reply = client.request(1, "tools/call", params)
        assert reply["error"]["code"] == -32602 and says in reply["error"]["message"], reply
        listed = client.request(2, "tools/list", {"cursor": 5})
        assert listed["error"]["code"] == -32602 and "params.cursor is the string" in listed["error"]["message"]
        assert client.request(3, "tools/list")["result"]["tools"]
        code, err = client.close()
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
    assert code == 0 and "Traceback" not in err, err


def test_mcp_oversized_lines_are_answered_and_skipped(target):
    client = RawClient(target("db"), "--session", "s", "--max-message-bytes", "100000")
    try:
        client.initialize()
        # Just under the limit: a valid request; over it: skipped and answered with its id (the id comes
        # first here, as most clients write it, or last: the member that ends the line's object), or with
        # id null when the id lies between the two (or is not the top-level object's).
        pad = "x" * (100_000 - 200)
        client.send(_fill('{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"p":"@@"}}}', pad))
        assert "tools" in client.recv()["result"]
        client.send(_fill('{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"p":"@@"}}}', pad * 30))
        reply = client.recv()
        assert reply["id"] == 2 and reply["error"]["code"] == -32600 and "100000 bytes" in reply["error"]["message"]
        client.send(_fill('{"jsonrpc":"2.0","method":"tools/list","params":{"_meta":{"p":"@@"}},"id":3}', pad * 30))
        reply = client.recv()
        assert reply["id"] == 3 and reply["error"]["code"] == -32600
        client.send(_fill('{"jsonrpc":"2.0","method":"tools/list","params":{"_meta":{"p":"@@"}},"id":"t\\"3"}',
                          pad * 30))
        assert client.recv()["id"] == 't"3'
        for line in ('{"jsonrpc":"2.0","method":"tools/list","params":{"_meta":{"p":"@@"}},"id":3,"x":1}',
                     '{"jsonrpc":"2.0","method":"tools/list","params":{"_meta":{"p":"@@","id":3}}}',
                     '{"jsonrpc":"2.0","method":"tools/list","params":{"_meta":{"p":"@@"},"l":[{"id":3}]}}'):
            client.send(_fill(line, pad * 30))
            reply = client.recv()
            assert reply["id"] is None and reply["error"]["code"] == -32600, line
        # RFC 8259 lets a parser ignore a byte order mark: a line that starts with one is read as the message
        assert client.proc.stdin is not None
        client.proc.stdin.write(b'\xef\xbb\xbf{"jsonrpc":"2.0","id":"bom","method":"ping"}\n')
        client.proc.stdin.flush()
        assert client.recv() == {"jsonrpc": "2.0", "id": "bom", "result": {}}
        assert "tools" in client.request(4, "tools/list")["result"]
        # A last line without a newline is read at end of input and answered before the server exits.
        assert client.proc.stdin is not None
        client.proc.stdin.write(b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"\\ud800"}}')
        client.proc.stdin.close()
        reply = client.recv()
        assert reply is not None and reply["id"] == 5 and reply["error"]["code"] == -32602
        assert client.proc.wait(30) == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()


#: a pattern that defeats RE2's DFA: a grep of the log below takes a good part of a second
SLOW_GREP = r".*[0-9].{100}$"


@pytest.mark.engines("lmdb")  # the server runs in another process, sharing the store with this one
def test_requests_read_before_the_input_ends_are_all_answered(store_factory, tmp_path):
    """A client that writes its requests and closes its end (``printf ... | blobpad mcp``) gets a
    reply to each of them before the server exits: valid requests still being handled when stdin
    closed were cancelled (no reply, or "Connection closed"), only invalid lines were answered.
    A request the client cancels gets no reply, and the server does not wait for one."""
    store = store_factory("db")
    text = sample.log_text(400_000, seed=6)
    sid = store.put(text, session="s", tool="t").id
    lines = _lines(text)
    client = RawClient(tmp_path / "db", "--session", "s")
    try:
        client.initialize()
        read = {"name": "scratchpad_read", "arguments": {"scratchpad_id": sid, "mode": "lines",
                                                          "start_line": 3, "end_line": 5}}
        client.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        client.send(json.dumps({"jsonrpc": "2.0", "id": "two", "method": "tools/call", "params": read}))
        client.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        client.send("not json")
        slow = {"name": "scratchpad_read", "arguments": {"scratchpad_id": sid, "mode": "grep", "pattern": SLOW_GREP,
                                                          "max_matches": 5}}   # still running when stdin closes
        client.send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": slow}))
        client.send(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": slow}))
        client.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}))
        assert client.proc.stdin is not None
        client.proc.stdin.close()
        replies = {}
        for _ in range(5):
            reply = client.recv()
            assert reply is not None, f"replies so far: {replies}"
            replies[reply["id"]] = reply
        late = client.recv(timeout=5)
        # the server exits without waiting DRAIN_SECONDS for the cancelled request (wait() is bounded below it)
        assert client.proc.wait(30) == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()
    if late is not None:  # answered before the cancel reached it, or told it was cancelled
        assert late["id"] == 5 and client.recv(timeout=1) is None, late
    assert set(replies) == {1, "two", 3, None, 4}
    assert "tools" in replies[1]["result"] and replies[3]["result"] == {} and replies[None]["error"]["code"] == -32700
    got = replies["two"]["result"]["structuredContent"]["content"]
    assert got == "\n".join(f"{n}\t{lines[n - 1]}" for n in range(3, 6))
    grep = replies[4]["result"]["structuredContent"]
    hits = [n for n, line in enumerate(lines, 1) if re.search(SLOW_GREP, line)]
    assert grep["ok"] is True and grep["total_matches"] == len(hits) > 5, grep


def test_a_client_that_stopped_reading_is_not_waited_for_at_the_end_of_input(tmp_path):
    """Replies owed at the end of the input are waited for only while someone can read them: a
    client that closed its end of the server's stdout (the server's writes fail) and then its
    stdin lets the server exit at once, not after DRAIN_SECONDS (60 s; wait() is bounded below)."""
    import time

    client = RawClient(tmp_path / "db", "--session", "s")
    try:
        client.initialize()
        assert client.proc.stdout is not None and client.proc.stdin is not None
        client.proc.stdout.close()
        client.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))   # its reply finds no reader
        time.sleep(1)  # (an order of events, not a measurement: the next request comes after that failure)
        client.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        client.proc.stdin.close()
        assert client.proc.wait(30) == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()


def test_main_rejects_a_bad_max_message_bytes(tmp_path, capsys):
    assert mcp_server.main(["--db", str(tmp_path / "db"), "--max-message-bytes", "0"]) == 2
    assert "max_message_bytes must be at least 1" in capsys.readouterr().err


def test_mcp_allow_home_cannot_offload_the_default_store(tmp_path):
    """``blobpad mcp --allow ~`` with the default store under ~/.local/share/blobpad: the store's own
    files are refused whatever the path, so a grep cannot show another session's notepad."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("BLOBPAD_DIR", "XDG_DATA_HOME")} | {"HOME": str(home)}
    secret = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    code = f"import blobpad; s = blobpad.open(); s.notepad('victim').set_notes({secret!r}); print(s.path); s.close()"
    db = subprocess.run([sys.executable, "-c", code], env=env | {"PYTHONPATH": os.pathsep.join(sys.path)},
                        capture_output=True, text=True, check=True).stdout.strip()
    assert Path(db).resolve() == (home / ".local" / "share" / "blobpad").resolve()
    (home / "todo.txt").write_text("my own file\n")
    client = RawClient(None, "--session", "attacker", "--allow", "~", env=env)
    try:
        client.initialize()
        paths = ["~/.local/share/blobpad/data.mdb", ".local/share/blobpad/lock.mdb", f"{db}/blobpad.lock",
                 "./.local/../.local/share/blobpad/data.mdb"]
        for n, path in enumerate(paths):
            reply = client.request(n + 1, "tools/call", {"name": "scratchpad_offload", "arguments": {"path": path}})
            assert reply["result"]["isError"] is True, path
            assert "cannot be offloaded" in reply["result"]["structuredContent"]["error"]
            assert secret not in json.dumps(reply)
        reply = client.request(9, "tools/call", {"name": "scratchpad_offload", "arguments": {"path": "~/todo.txt"}})
        assert reply["result"]["isError"] is False
        listed = client.request(10, "tools/call", {"name": "scratchpad_list", "arguments": {}})
        assert len(listed["result"]["structuredContent"]["entries"]) == 1
        assert secret not in json.dumps(listed)
        code, err = client.close()
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
    assert code == 0, err


def test_a_call_the_client_cancels_stops_its_search(store):
    """The server runs each call with the event it sets when the client cancels the request
    (notifications/cancelled): the search then stops at its next check, as at the end of its
    budget, instead of running on unseen (14 s of CPU on a 24 MB log with no budget)."""
    import threading

    e = store.put(sample.log_text(6 << 20, seed=4), session="s", name="log")
    for budget in (None, 30.0):  # no budget (--search-timeout 0): only a cancel stops it
        for profile, args in (("blobpad", {"scratchpad_id": e.id, "mode": "grep", "pattern": "[a-z]{60}"}),
                              ("blobpad", {"scratchpad_id": e.id, "mode": "grep", "pattern": "ERROR", "skip": 10}),
                              ("blobpad", {"scratchpad_id": e.id, "mode": "count", "pattern": "ERROR"}),
                              ("seed003", {"name": "log", "regex": "[a-z]{60}"})):
            toolbox = Toolbox(store, session="s", scope="session", search_timeout=budget, profile=profile)
            event = threading.Event()
            assert not mcp_server.call_cancellable(toolbox, "scratchpad_read", args, event).get("timed_out"), args
            event.set()
            stopped = mcp_server.call_cancellable(toolbox, "scratchpad_read", args, event)
            assert stopped["ok"] and stopped["timed_out"] is True and stopped.get("searched_lines", 0) < e.lines, stopped
            assert ("cancelled" in stopped["notice"]) == (budget is None), stopped["notice"]
            assert not toolbox.call("scratchpad_read", args).get("timed_out")  # only that call's searches


_DECODE_CHILD = r"""
import json, resource, sys
from blobpad.mcp_server import decode_message
line = sys.stdin.buffer.read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
message, replies = decode_message(line)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"message": message is not None, "replies": [r.model_dump(mode="json") for r in replies],
                  "grown_mb": grown // 1024}))
"""


def _decode_in_child(line: bytes) -> dict[str, Any]:
    """``decode_message(line)`` in a child process, which must answer within 120 s (a hang fails
    the test instead of stalling it), with how much its peak memory grew."""
    proc = subprocess.run([sys.executable, "-c", _DECODE_CHILD], input=line, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return json.loads(proc.stdout)


def test_an_unterminated_string_of_escaped_quotes_is_answered_at_once():
    """The id of a line json cannot parse is recovered by a tokenizer, whose string token
    rescanned to the end of the line at every quote of an unterminated string: a 117 KB line
    of ``\\"`` held the server (and every line after it) for 46 s, a 1 MB one for about an
    hour.  The rest of such a line is one string: one scan, and the reply names the id."""
    head = b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"scratchpad_list","arguments":{"x":"'
    for body in (b'\\"' * 500_000, b'\\"a' * 300_000 + b"\\"):
        got = _decode_in_child(head + body)
        assert not got["message"] and len(got["replies"]) == 1
        reply = got["replies"][0]
        assert reply["id"] == 41 and reply["error"]["code"] == -32700 and "invalid JSON" in reply["error"]["message"]


def test_a_flat_array_of_millions_of_members_is_checked_in_bounded_memory():
    """Every string of a message is checked for lone surrogates: the check pushed a tuple and a
    path string per member of a list at once, so a 16 MB line of ``[0,0,...]`` took the server
    to 1.4 GB (63 MB: 5.4 GB).  It walks one frame per level now; a problem at the end of such a
    list is still found and named by its path, and a refusal describes the list by its first
    members and its length, never by its whole repr."""
    members = 8 << 20

    def call(arguments: bytes) -> bytes:
        return (b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"scratchpad_list","arguments":'
                + arguments + b"}}")

    flat = _decode_in_child(call(b'{"skip":[' + b"0," * (members - 1) + b"0]}"))
    assert flat["message"] and flat["replies"] == [] and flat["grown_mb"] < 600, flat
    late = _decode_in_child(call(b'{"skip":[' + b"0," * (members - 1) + b'[{"k":"\\ud800"}]]}'))
    assert not late["message"] and late["grown_mb"] < 600, late
    said = late["replies"][0]["error"]["message"]
    assert f"params.arguments.skip[{members - 1}][0].k holds a lone surrogate" in said, said
    from blobpad.errors import describe

    shown = describe(list(range(members)))
    assert shown.endswith(f"(a list of {members} members)") and len(shown) < 120
    nested = describe({"skip": [list(range(members))]})  # a small container holding a large one: not its whole repr
    assert nested.endswith("(a dict of 1 member)") and len(nested) < 120
    assert (describe([1, 2]), describe({"a": (1, "b")}), describe(list(range(12)))) == (
        "[1, 2]", "{'a': (1, 'b')}", repr(list(range(12))))  # small ones: their repr, as before


#: every tool any profile has
_ALL_TOOLS = {"scratchpad_read", "scratchpad_list", "read_notepad", "write_notepad", "update_notepad",
              "session_scratchpad", "scratchpad_write", "scratchpad_edit", "scratchpad_delete", "scratchpad_offload"}


@pytest.mark.parametrize("profile", [*blobpad.PROFILES, "seed001+seed002", "blobpad+seed002", "seed002+seed004"])
def test_the_instructions_name_the_tools_the_profile_has_and_no_other(store, profile):
    """The server's instructions tell the model of its profile's tools: a seed002 server was
    told to read entries with a scratchpad_read it does not have, a seed000 one of grep and
    lines modes its scratchpad_read refuses."""
    tb = Toolbox(store, session="s", scope="session", profile=profile, always_show=True)  # as the server makes it
    said = mcp_server.instructions(tb)
    listed = {t["name"] for t in tb.schemas("mcp")}
    named = {word for word in re.findall(r"[a-z_]+", said) if word in _ALL_TOOLS}
    assert named == listed, (profile, said)
    assert said.startswith(mcp_server.INSTRUCTIONS)
    if profile == "seed000":
        assert "grep" not in said and "lines" not in said
