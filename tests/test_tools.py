"""The agent-facing tools (issue 4): schemas, profiles, scope, caps and malformed calls.

Every test drives :meth:`Toolbox.call` the way a model would and checks the answer
against an oracle: Python slicing of the original content, ``str.split`` for lines,
Python's ``re`` for grep, ``base64`` for binary reads, ``jsonschema`` for schemas.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import random
import re
import tempfile
import tracemalloc

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import Meanwhile
from oracles import sed_lines as _lines

import blobpad
from blobpad import PROFILES, Offloader, Toolbox, sample
from blobpad.notepad import EMPTY_NOTEPAD_HINT, NOTEPAD_HEADING
from blobpad.tools import FLAVORS, ToolSpec, result_size

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
UNKNOWN_ID = "0123456789abcdef"


@functools.cache
def _log(size: int, seed: int = 0) -> str:
    return sample.log_text(size, seed)


def _grep_oracle(text: str, pattern: str, flags: int = 0, context: int = 0, sep: str = ":") -> str:
    """What ``grep -n -C context`` prints (``N:match``, ``N-context``, ``--`` between groups)."""
    lines = _lines(text)
    hits = {i + 1 for i, line in enumerate(lines) if re.search(pattern, line, flags)}
    keep = sorted({k for n in hits for k in range(max(1, n - context), min(len(lines), n + context) + 1)})
    out: list[str] = []
    prev = None
    for k in keep:
        if context and prev is not None and k > prev + 1:
            out.append("--")
        out.append(f"{k}{sep if k in hits else '-'}{lines[k - 1]}")
        prev = k
    return "\n".join(out)


def _toolbox(store, content, *, profile="blobpad", session="s", turn=1, **options):
    entry = store.put(content, session=session, turn=turn)
    return Toolbox(store, session=session, turn=turn, profile=profile, **options), entry


def _read(tb, **args):
    return tb.call("scratchpad_read", args)


def _all_profiles():
    return list(PROFILES)


# -- schemas --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", _all_profiles())
@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_schema_is_valid_for_its_api(store, tmp_path, profile, flavor):
    tb = Toolbox(store, session="s", turn=1, profile=profile, always_show=True, allow_dirs=[tmp_path])
    schemas = tb.schemas(flavor)
    assert schemas, "always_show lists every tool"
    json.dumps(schemas)
    names = []
    for s in schemas:
        if flavor == "openai":
            assert s["type"] == "function" and set(s) == {"type", "function"}
            fn = s["function"]
            name, desc, params = fn["name"], fn["description"], fn["parameters"]
        elif flavor == "openai-responses":
            assert s["type"] == "function"
            name, desc, params = s["name"], s["description"], s["parameters"]
        elif flavor == "anthropic":
            assert set(s) == {"name", "description", "input_schema"}
            name, desc, params = s["name"], s["description"], s["input_schema"]
        else:
            name, desc, params = s["name"], s["description"], s["inputSchema"]
            assert isinstance(s["annotations"]["readOnlyHint"], bool)
        names.append(name)
        assert NAME_RE.match(name), name                     # OpenAI and Anthropic reject dots
        assert len(desc) >= 30
        jsonschema.Draft202012Validator.check_schema(params)
        jsonschema.Draft7Validator.check_schema(params)
        assert params["type"] == "object"
        assert not {"oneOf", "anyOf", "allOf", "not"} & set(params)   # Anthropic: none at the top level
        assert set(params["required"]) <= set(params["properties"])
        for prop in params["properties"].values():
            assert prop.get("description"), prop
    assert len(names) == len(set(names))


#: The keywords OpenAI's strict mode takes in a tool's parameters, as we use them (its "supported schemas").
STRICT_KEYWORDS = {"type", "description", "enum", "items", "properties", "required", "additionalProperties"}


def _strict_parameters(schema: dict, flavor: str) -> dict:
    if flavor == "openai":
        assert set(schema) == {"type", "function"} and schema["function"]["strict"] is True
        return schema["function"]["parameters"]
    assert schema["type"] == "function" and schema["strict"] is True
    return schema["parameters"]


@pytest.mark.parametrize("profile", _all_profiles() + ["blobpad+seed002", "seed003+seed001"])
@pytest.mark.parametrize("flavor", ["openai", "openai-responses"])
def test_strict_schemas_follow_openais_strict_mode(store, tmp_path, profile, flavor):
    tb = Toolbox(store, session="s", turn=1, profile=profile, always_show=True, allow_dirs=[tmp_path])
    loose = {t["name"] if "name" in t else t["function"]["name"]: t for t in tb.schemas(flavor)}
    strict = tb.schemas(flavor, strict=True)
    assert [s.get("name") or s["function"]["name"] for s in strict] == list(loose) == tb.tool_names()
    for schema in strict:
        params = _strict_parameters(schema, flavor)
        name = schema.get("name") or schema["function"]["name"]
        spec = tb.tools[name]
        jsonschema.Draft202012Validator.check_schema(params)
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert params["required"] == list(params["properties"]) == [p.name for p in spec.params]
        assert set(params) <= STRICT_KEYWORDS
        for p in spec.params:
            prop = params["properties"][p.name]
            assert set(prop) <= STRICT_KEYWORDS and prop["description"] == p.description
            assert prop["type"] == (p.type if p.required else [p.type, "null"])
            if p.enum:
                assert prop["enum"] == list(p.enum) + ([] if p.required else [None])
            if p.type == "array":
                assert prop["items"] == {"type": "string"}
        # what a strict-mode model sends: every argument, null for those it leaves out
        validator = jsonschema.Draft202012Validator(params)
        required = {p.name: _valid_value(p) for p in spec.params if p.required}
        nulls = {p.name: None for p in spec.params if not p.required}
        assert not list(validator.iter_errors({**required, **nulls}))
        assert list(validator.iter_errors(required)) or not nulls      # leaving one out is refused
        # the dispatcher takes the nulls as the defaults, for every tool
        assert spec.validate({**required, **nulls}) == spec.validate(required)
        assert spec.validate(json.dumps({**required, **nulls})) == spec.validate(required)


def _valid_value(p):
    if p.enum:
        return p.enum[0]
    return {"string": "x" * max(1, p.min_length), "integer": max(p.minimum, 1), "boolean": True,
            "array": ["x"]}[p.type]


def test_strict_false_is_the_default_and_strict_is_for_openai_only(store, tmp_path):
    tb = Toolbox(store, session="s", turn=1, profile="blobpad+seed002", always_show=True, allow_dirs=[tmp_path])
    for flavor in FLAVORS:
        assert json.dumps(tb.schemas(flavor, strict=False)) == json.dumps(tb.schemas(flavor))
        assert '"strict":' not in json.dumps(tb.schemas(flavor))
    read = next(s for s in tb.schemas("openai") if s["function"]["name"] == "scratchpad_read")["function"]
    assert read["parameters"]["required"] == ["scratchpad_id"]
    assert read["parameters"]["properties"]["n"] == {"type": "integer", "description": read["parameters"][
        "properties"]["n"]["description"], "minimum": 0, "maximum": (1 << 53) - 1, "default": 2000}
    for flavor in ("anthropic", "mcp"):
        with pytest.raises(blobpad.InvalidArgument, match="strict mode"):
            tb.schemas(flavor, strict=True)
    with pytest.raises(blobpad.InvalidArgument, match="strict must be"):
        tb.schemas("openai", strict="yes")


def test_a_strict_mode_call_reads_like_a_plain_one(store):
    text = _log(3_000, seed=5)
    tb, e = _toolbox(store, text)
    nulls = {p.name: None for p in tb.tools["scratchpad_read"].params if not p.required}
    for args in ({"mode": "lines", "start_line": 10, "end_line": 20}, {"mode": "grep", "pattern": "ERROR"},
                 {"mode": "tail", "n": 300}, {}):
        strict_args = {**nulls, "scratchpad_id": e.id, **args}
        assert len(strict_args) == len(tb.tools["scratchpad_read"].params)
        assert tb.call("scratchpad_read", json.dumps(strict_args)) == _read(tb, scratchpad_id=e.id, **args)
    assert tb.call("scratchpad_list", {"skip": None}) == tb.call("scratchpad_list", {})
    assert _read(tb, scratchpad_id=e.id, mode="lines", start_line=10, end_line=20)["content"] == "\n".join(
        f"{i}\t{line}" for i, line in enumerate(text.splitlines()[9:20], start=10))


def test_profiles_are_documented():
    assert set(PROFILES) >= {"blobpad", "seed000", "seed003"}
    for name, description in PROFILES.items():
        assert isinstance(description, str) and "\n" not in description and len(description) > 20, name
    assert blobpad.PROFILES is PROFILES and blobpad.Toolbox is Toolbox


def test_unknown_profile_flavor_and_scope_are_rejected(store):
    with pytest.raises(blobpad.InvalidArgument, match="profiles are"):
        Toolbox(store, session="s", turn=1, profile="nope")
    with pytest.raises(blobpad.InvalidArgument, match="flavor"):
        Toolbox(store, session="s", turn=1).schemas("gemini")
    with pytest.raises(blobpad.InvalidArgument, match="needs a turn"):
        Toolbox(store, session="s")
    with pytest.raises(blobpad.InvalidArgument, match="max_result_chars"):
        Toolbox(store, session="s", turn=1, max_result_chars=10)
    with pytest.raises(blobpad.InvalidArgument, match="ttl"):
        Toolbox(store, session="s", profile="seed003", ttl=0)
    with pytest.raises(blobpad.InvalidArgument, match="line_chars"):
        Toolbox(store, session="s", turn=1, line_chars=10)


def test_each_profile_is_one_record_the_toolbox_reads(store):
    from blobpad.tools.profiles import REGISTRY

    assert list(REGISTRY) == list(PROFILES)
    for name, record in REGISTRY.items():
        assert record.name == name and PROFILES[name] == record.description
        tb = Toolbox(store, session="s", turn=1, profile=name, always_show=True)
        assert (tb.scope, tb.max_result_chars, tb.offloader.policy) == (
            record.scope, record.max_result_chars, record.offload_policy)
        assert tb.tool_names() == [spec.name for spec in record.tools(tb)]
        assert tb.profiles == (record,) and tb.combined_notepad is False
    # a combination: the first part's scope, the largest cap, the policy that is not the default
    tb = Toolbox(store, session="s", turn=1, profile="blobpad+seed002")
    assert (tb.scope, tb.max_result_chars, tb.offloader.policy) == ("turn", 20_000, "seed000")
    tb = Toolbox(store, session="s", turn=1, profile="seed002+blobpad")
    assert (tb.scope, tb.max_result_chars, tb.offloader.policy) == ("session", 20_000, "seed000")
    tb = Toolbox(store, session="s", turn=1, profile="seed002+seed003")
    assert (tb.scope, tb.max_result_chars, tb.offloader.policy) == ("session", 34_000, "seed003")
    assert Toolbox(store, session="s", profile="seed002+seed004").combined_notepad is True
    assert Toolbox(store, session="s", profile="seed001+seed002").combined_notepad is True


def test_the_toolbox_checks_ttl_and_turn_with_the_stores_checks(store):
    for ttl in (0, -1, float("nan"), float("inf"), 10**100, 200 * 365 * 86400, "1h", True, 1e-9, 9.9e-7):
        with pytest.raises(blobpad.InvalidArgument) as by_store:
            store.put("x", ttl=ttl)
        with pytest.raises(blobpad.InvalidArgument) as by_toolbox:
            Toolbox(store, session="s", profile="seed003", ttl=ttl)
        assert str(by_toolbox.value) == str(by_store.value)
    for turn in (10**100, -(10**100), 1.5, True, [1], "t" * 241, "\ud800"):
        with pytest.raises(blobpad.InvalidArgument):
            store.put("x", session="s", turn=turn)
        with pytest.raises(blobpad.InvalidArgument, match="turn"):
            Toolbox(store, session="s", turn=turn)
    assert store.entries() == []


def test_seed000_read_tool_appears_only_once_the_turn_has_an_entry(store):
    seed0 = Toolbox(store, session="s", turn=1, profile="seed000")
    assert seed0.schemas("anthropic") == []
    store.put("x" * 10, session="s", turn=2)          # another turn
    store.put("x" * 10, session="other", turn=1)      # another session
    assert seed0.tool_names() == []
    Offloader(store).offload({"content": "y" * 5000}, session="s", turn=1)
    assert [s["function"]["name"] for s in seed0.schemas("openai")] == ["scratchpad_read"]
    seed0.turn = 3                                    # next turn: nothing offloaded yet
    assert seed0.schemas("mcp") == []
    assert Toolbox(store, session="s", turn=3, profile="seed000", always_show=True).tool_names() == ["scratchpad_read"]
    # a reader tool of one's own waits with seed 000's; one added to a blobpad toolbox does not
    echo = ToolSpec("echo_entry", "Echo the arguments back, for the test of the listing rule.", (),
                    lambda tb, a, budget: {"ok": True}, reader=True)
    seed0.add_tool(echo)
    assert seed0.tool_names() == []
    tb = Toolbox(store, session="s", turn=3)
    tb.add_tool(echo)
    assert tb.tool_names() == ["scratchpad_read", "scratchpad_list", "echo_entry"]


def test_blobpad_tools_are_listed_from_the_start(store):
    # frameworks (the OpenAI Agents SDK, LangGraph) register tools once, before the first offload
    tb = Toolbox(store, session="s", turn=1)
    assert tb.tool_names() == ["scratchpad_read", "scratchpad_list"] and store.entries() == []
    assert [s["name"] for s in tb.schemas("mcp")] == ["scratchpad_read", "scratchpad_list"]
    listed = tb.call("scratchpad_list", {})
    assert listed["ok"] is True and store.entries() == []
    missing = tb.call("scratchpad_read", {"scratchpad_id": "0123456789abcdef"})
    assert missing["ok"] is False and "scratchpad_list" in missing["error"]
    tb.turn = 2
    assert tb.tool_names() == ["scratchpad_read", "scratchpad_list"]
    # seed 003's tools let the model write, so they are always there
    assert Toolbox(store, session="new", profile="seed003").tool_names() == [
        "scratchpad_write", "scratchpad_read", "scratchpad_edit", "scratchpad_list", "scratchpad_delete"]


# -- profile seed000 ------------------------------------------------------------------------------------


def test_seed000_schema_is_the_seeds(store):
    tb = Toolbox(store, session="s", turn=1, profile="seed000", always_show=True)
    (tool,) = tb.schemas("openai")
    params = tool["function"]["parameters"]
    assert tool["function"]["name"] == "scratchpad_read"
    assert params["required"] == ["scratchpad_id"]
    assert set(params["properties"]) == {"scratchpad_id", "mode", "n", "start", "end"}
    assert params["properties"]["mode"]["enum"] == ["full", "head", "tail", "range"]
    assert params["properties"]["mode"]["default"] == "head"
    assert params["properties"]["n"]["default"] == 2000
    assert "Default 2000" in params["properties"]["n"]["description"]


def test_seed000_defaults_and_modes(store):
    text = _log(9_000, seed=1)
    tb, e = _toolbox(store, text, profile="seed000")
    head = _read(tb, scratchpad_id=e.id)                         # mode head, n 2000 by default
    assert head["ok"] and head["mode"] == "head" and head["content"] == text[:2000] and head["truncated"] is False
    assert _read(tb, scratchpad_id=e.id, mode="tail")["content"] == text[-2000:]
    assert _read(tb, scratchpad_id=e.id, mode="head", n=123)["content"] == text[:123]
    assert _read(tb, scratchpad_id=e.id, mode="tail", n=77)["content"] == text[-77:]
    assert _read(tb, scratchpad_id=e.id, mode="range", start=100, end=350)["content"] == text[100:350]
    length = len(text)
    assert _read(tb, scratchpad_id=e.id, mode="range", start=length - 10)["content"] == text[-10:]
    assert _read(tb, scratchpad_id=e.id, mode="full")["content"] == text
    assert _read(tb, scratchpad_id=e.id, mode="head", n=10**9)["content"] == text   # clamps to the end
    r = _read(tb, scratchpad_id=e.id, mode="range", start=length, end=length + 100)
    assert r["ok"] and r["content"] == ""


def test_seed000_full_of_a_large_entry_is_capped_and_says_how_to_continue(store):
    text = _log(80_000, seed=2)
    tb, e = _toolbox(store, text, profile="seed000")
    r = _read(tb, scratchpad_id=e.id, mode="full")
    assert r["truncated"] is True and result_size(r) <= 20_000
    assert text.startswith(r["content"])
    assert r["next"] == {"scratchpad_id": e.id, "mode": "range", "start": len(r["content"]), "end": len(text)}
    assert f"start={len(r['content'])}" in r["notice"]


# -- profile seed003 -------------------------------------------------------------------------------------


def test_seed003_schemas_are_the_seeds(store):
    tb = Toolbox(store, session="s", profile="seed003")
    props = {s["name"]: s["input_schema"] for s in tb.schemas("anthropic")}
    assert props["scratchpad_write"]["required"] == ["name", "content"]
    assert set(props["scratchpad_read"]["properties"]) == {"name", "offset", "limit", "regex"}
    assert props["scratchpad_read"]["required"] == ["name"]
    assert props["scratchpad_read"]["properties"]["limit"]["default"] == 30_000
    assert props["scratchpad_read"]["properties"]["offset"]["default"] == 0
    assert set(props["scratchpad_edit"]["properties"]) == {"name", "content", "old_string", "new_string", "replace_all"}
    assert props["scratchpad_edit"]["properties"]["replace_all"]["default"] is False
    assert props["scratchpad_list"]["properties"] == {} and props["scratchpad_list"]["required"] == []
    assert props["scratchpad_delete"]["required"] == ["name"]


def test_seed003_write_read_defaults_and_overwrite(store):
    tb = Toolbox(store, session="s", profile="seed003")
    text = _log(50_000, seed=3)
    w = tb.call("scratchpad_write", {"name": "log", "content": text})
    assert w["ok"] and w["name"] == "log" and w["size_chars"] == len(text) and w["overwritten"] is False
    r = tb.call("scratchpad_read", {"name": "log"})                 # offset 0, limit 30,000
    assert r["ok"] and r["content"] == text[:30_000] and r["offset"] == 0
    assert r["remaining"] == len(text) - 30_000 and r["truncated"] is False
    assert "offset=30000" in r["notice"]
    r = tb.call("scratchpad_read", {"name": "log", "offset": 30_000})
    assert r["content"] == text[30_000:] and r["remaining"] == 0
    assert tb.call("scratchpad_read", {"name": "log", "offset": 5, "limit": 10})["content"] == text[5:15]
    w2 = tb.call("scratchpad_write", {"name": "log", "content": "new"})
    assert w2["overwritten"] is True
    assert tb.call("scratchpad_read", {"name": "log"})["content"] == "new"
    assert len(store.entries(session="s")) == 1
    assert store.stat(w2["scratchpad_id"]).expires_at is None        # session-long, like the seed


def test_seed003_list_cut_to_its_cap_keeps_the_newest_entries(store):
    """seed003's scratchpad_list takes no arguments, so a long session's listing is cut at its cap: it keeps
    the newest entries (oldest first among them) and says how many older ones it left out.  It kept the
    oldest, and the outputs an agent had just saved were the ones it could not see."""
    tb = Toolbox(store, session="long", profile="seed003")
    for i in range(1, 401):
        store.put(f"output {i}\n", session="long", name=f"execute_command_{i}")
    listed = tb.call("scratchpad_list", {})
    names = [x["name"] for x in listed["entries"]]
    assert listed["truncated"] and listed["count"] == 400 and 0 < len(names) < 400, listed.get("notice")
    assert names == [f"execute_command_{i}" for i in range(401 - len(names), 401)]
    assert listed["notice"].startswith(f"{400 - len(names)} older entries not shown")
    assert "skip" not in listed["notice"] and "next" not in listed  # nothing to page with: the seed's tool has none


def test_seed003_regex_returns_at_most_100_matching_lines(store):
    text = _log(120_000, seed=4)
    tb = Toolbox(store, session="s", profile="seed003")
    tb.call("scratchpad_write", {"name": "log", "content": text})
    oracle = _grep_oracle(text, r"INFO").split("\n")
    assert len(oracle) > 100
    r = tb.call("scratchpad_read", {"name": "log", "regex": "INFO"})
    assert r["ok"] and r["content"].split("\n") == oracle[:100] and r["matches"] == 100
    assert r["truncated"] is True and "100" in r["notice"]
    few = tb.call("scratchpad_read", {"name": "log", "regex": r"exit code 13\b"})
    assert few["content"] == _grep_oracle(text, r"exit code 13\b") and few["truncated"] is False


def test_seed003_edit(store):
    tb = Toolbox(store, session="s", profile="seed003")
    tb.call("scratchpad_write", {"name": "plan", "content": "1. fix bug\n2. test\n3. test again\n"})
    r = tb.call("scratchpad_edit", {"name": "plan", "old_string": "fix bug", "new_string": "fix bug DONE"})
    assert r["ok"] and r["replacements"] == 1
    assert tb.call("scratchpad_read", {"name": "plan"})["content"] == "1. fix bug DONE\n2. test\n3. test again\n"
    twice = tb.call("scratchpad_edit", {"name": "plan", "old_string": "test", "new_string": "check"})
    assert twice["ok"] is False and "2 times" in twice["error"] and "replace_all" in twice["error"]
    r = tb.call("scratchpad_edit", {"name": "plan", "old_string": "test", "new_string": "check", "replace_all": True})
    assert r["ok"] and r["replacements"] == 2
    assert tb.call("scratchpad_read", {"name": "plan"})["content"] == "1. fix bug DONE\n2. check\n3. check again\n"
    missing = tb.call("scratchpad_edit", {"name": "plan", "old_string": "nowhere", "new_string": "x"})
    assert missing["ok"] is False and "not found" in missing["error"]
    r = tb.call("scratchpad_edit", {"name": "plan", "content": "rewritten"})
    assert r["ok"] and tb.call("scratchpad_read", {"name": "plan"})["content"] == "rewritten"
    both = tb.call("scratchpad_edit", {"name": "plan", "content": "a", "old_string": "b", "new_string": "c"})
    assert both["ok"] is False and "not both" in both["error"]
    half = tb.call("scratchpad_edit", {"name": "plan", "old_string": "rewritten"})
    assert half["ok"] is False and "new_string" in half["error"]
    nobody = tb.call("scratchpad_edit", {"name": "ghost", "content": "x"})
    assert nobody["ok"] is False and "scratchpad_list" in nobody["error"]


@pytest.mark.parametrize("typed", [str.upper, str.lower, lambda i: i[:8].upper() + i[8:]])
@pytest.mark.parametrize("edit", [{"content": "rewritten\n"}, {"old_string": "line 2", "new_string": "rewritten"}])
def test_seed003_edit_of_an_entry_read_by_its_id_keeps_it_reachable_by_that_id_in_any_case(store, typed, edit):
    """An offloaded (unnamed) entry edited through its id, typed in any case, becomes a
    named entry called by the id as ids are written (lower case): the id the model was
    given keeps reading the edited text, in either case, and nothing else is named."""
    tb, entry = _toolbox(store, "line 1\nline 2\nline 3\n", profile="seed003")
    r = tb.call("scratchpad_edit", {"name": typed(entry.id), **edit})
    assert r["ok"] and r["name"] == entry.id
    expected = "rewritten\n" if "content" in edit else "line 1\nrewritten\nline 3\n"
    for name in (entry.id, entry.id.upper(), typed(entry.id)):
        assert tb.call("scratchpad_read", {"name": name})["content"] == expected, name
    listed = tb.call("scratchpad_list", {})["entries"]
    assert [row["name"] for row in listed] == [entry.id]
    again = tb.call("scratchpad_edit", {"name": entry.id.upper(), "content": "third\n"})
    assert again["ok"] and again["name"] == entry.id and store.get(store.find(entry.id, session="s").id) == "third\n"


_EDITS = {
    "targeted": {"old_string": "fix bug", "new_string": "fix bug DONE"},
    "full": {"content": "1. fix bug DONE\n2. run tests\n"},
}
_MEANWHILE = {  # another call's change, and what the entry reads after it
    "targeted edit": ({"tool": "scratchpad_edit", "old_string": "run tests", "new_string": "run tests DONE"},
                      "1. fix bug\n2. run tests DONE\n"),
    "write": ({"tool": "scratchpad_write", "content": "other\n"}, "other\n"),
    "delete": ({"tool": "scratchpad_delete"}, None),
}


@pytest.mark.parametrize("edit", list(_EDITS))
@pytest.mark.parametrize("other", list(_MEANWHILE))
@pytest.mark.parametrize("named", [True, False], ids=["named", "by-id"])
def test_seed003_edit_racing_another_change_is_refused_and_loses_nothing(store, edit, other, named):
    """An edit computed from what it read, while another call edited, wrote or deleted the
    entry: the edit answers ok=false, changes nothing, and the other call's change stands
    (before, both answered ok and the later one silently undid the other, or brought a
    deleted name back).  Named entries and offloaded ones edited through their id."""
    text = "1. fix bug\n2. run tests\n"
    if named:
        tb = Toolbox(store, session="s", profile="seed003")
        tb.call("scratchpad_write", {"name": "plan", "content": text})
        name = "plan"
    else:
        tb, entry = _toolbox(store, text, profile="seed003")
        name = entry.id
    other_args, after = _MEANWHILE[other]
    other_tool = other_args["tool"]
    if other_tool == "scratchpad_write" and not named:
        other_tool, other_args = "scratchpad_edit", {"content": "other\n"}  # a write would name a new entry
    answers = []
    change = lambda: answers.append(tb.call(other_tool, {"name": name, **{k: v for k, v in other_args.items()  # noqa: E731
                                                                           if k != "tool"}}))
    read = "get" if edit == "targeted" else "find" if named else "stat"  # the last read before the edit's put
    with Meanwhile(store, read, change):
        r = tb.call("scratchpad_edit", {"name": name, **_EDITS[edit]})
    assert answers and answers[0]["ok"], answers
    assert r["ok"] is False and "nothing was changed" in r["error"] and "read it again" in r["error"], r
    read = tb.call("scratchpad_read", {"name": name})
    if after is None:
        assert read["ok"] is False and "scratchpad_list" in read["error"]
        assert tb.call("scratchpad_list", {})["entries"] == []
    else:
        assert read["ok"] and read["content"] == after


@pytest.mark.parametrize("mode", [{}, {"offset": 4, "limit": 6}, {"regex": "v[0-9]"}])
def test_seed003_read_of_a_name_written_again_meanwhile_reads_one_version(store, mode):
    """The name a read resolved is written again (by another agent) before the read opens
    the entry: the read answers the entry as it was when the call began, whole and
    consistent (a read-only call reads one snapshot; before: "unknown, has expired");
    the next call reads the new one."""
    tb = Toolbox(store, session="s", profile="seed003")
    old, new = "v1 first\nv1 second\n", "v2 first\nv2 second\n"
    tb.call("scratchpad_write", {"name": "doc", "content": old})
    with Meanwhile(store, "find", lambda: tb.call("scratchpad_write", {"name": "doc", "content": new})) as meanwhile:
        r = tb.call("scratchpad_read", {"name": "doc", **mode})
    after = tb.call("scratchpad_read", {"name": "doc", **mode})
    assert r["ok"] and after["ok"] and meanwhile.done == 1, r
    for answer, text in ((r, old), (after, new)):
        if "regex" in mode:
            assert answer["content"] == "\n".join(f"{n}:{line}" for n, line in enumerate(text.splitlines(), 1))
        else:
            offset = mode.get("offset", 0)
            assert answer["content"] == text[offset : offset + mode.get("limit", 30_000)]


def test_seed003_an_edit_of_a_name_written_again_before_every_read_gets_a_clear_answer(store):
    """An edit whose entry, found by name, is written again every time before the edit
    reads it: the call runs again on the new entry a bounded number of rounds, then
    answers so (never that the name is unknown, never a hang), changing nothing."""
    tb = Toolbox(store, session="s", profile="seed003")
    tb.call("scratchpad_write", {"name": "doc", "content": "v0 todo\n"})
    rounds = iter(range(1, 1000))
    rewrite = lambda: tb.call("scratchpad_write", {"name": "doc", "content": f"v{next(rounds)} todo\n"})  # noqa: E731
    with Meanwhile(store, "find", rewrite, times=1000) as meanwhile:
        r = tb.call("scratchpad_edit", {"name": "doc", "old_string": "todo", "new_string": "done"})
    assert r["ok"] is False and "written again" in r["error"] and "try again" in r["error"], r
    assert meanwhile.done <= 40  # bounded: a few rounds, not until the writer stops
    assert tb.call("scratchpad_read", {"name": "doc"})["content"] == f"v{next(rounds) - 1} todo\n"


def test_put_replaces_commits_only_over_the_entry_it_names(store):
    """``put(name=..., replaces=id)``: stored while the name still names that live entry
    (keeping its expiry and creation time); Conflict and nothing stored once another put
    of the name, a delete or an expiry came between; bad combinations refused."""
    first = store.put("one", session="s", name="n", ttl=100)
    second = store.put("two", session="s", name="n", replaces=first.id, ttl=5)
    assert store.get(store.find("n", session="s").id) == "two"
    assert (second.expires_at, second.created_at) == (first.expires_at, first.created_at)
    with pytest.raises(blobpad.Conflict):
        store.put("three", session="s", name="n", replaces=first.id)  # first was replaced by second
    store.delete(second.id)
    with pytest.raises(blobpad.Conflict):
        store.put("four", session="s", name="n", replaces=second.id)
    with pytest.raises(blobpad.NotFound):
        store.find("n", session="s")
    for bad in ({"replaces": first.id}, {"name": "n", "replaces": first.id, "exclusive": True},
                {"name": "n", "replaces": "not an id"}, {"name": "n", "replaces": 5}):
        with pytest.raises(blobpad.InvalidArgument):
            store.put("x", session="s", **bad)
    assert store.stats().entries == 0


@pytest.mark.parametrize("options", [
    {"notepad_options": [1, 2]}, {"notepad_options": "ab"}, {"notepad_options": {"bogus": 1}},
    {"allow_dirs": 5}, {"allow_dirs": [5]}, {"allow_dirs": [None]},
])
@pytest.mark.parametrize("profile", ["seed002", "blobpad"])
def test_toolbox_options_of_the_wrong_shape_are_invalid_arguments(store, options, profile):
    with pytest.raises(blobpad.InvalidArgument) as caught:
        Toolbox(store, session="s", turn=1, profile=profile, **options)
    assert next(iter(options)) in str(caught.value)


def test_seed003_regex_notice_counts_the_lines_the_cap_left_when_over_100_match(store):
    """Over 100 matching lines whose text the result cap cuts: the notice says how many
    are shown and that more match, never "the first 100 are shown"."""
    text = "".join(f"{i:04d} match " + "x" * 1500 + "\n" for i in range(200))
    tb = Toolbox(store, session="s", profile="seed003")
    tb.call("scratchpad_write", {"name": "wide", "content": text})
    r = tb.call("scratchpad_read", {"name": "wide", "regex": "match"})
    shown = r["matches"]
    assert r["ok"] and r["truncated"] is True and 0 < shown < 100
    assert len(r["content"].split("\n")) == shown
    assert f"{shown} of the first 100 matching lines shown" in r["notice"] and "more lines match" in r["notice"]
    assert "Only the first 100" not in r["notice"]


def test_seed001_loads_the_old_single_key_scratchpad_into_notes_on_first_use(store):
    """Seed 001: "The old single-key format (openclaw:scratchpad) is recognised for
    backwards compatibility and loaded into notes on first use": the scratchpad space
    seed 004 writes becomes notes' first version, once, within notes' budget."""
    legacy = "decided: use the v2 API\n" * 100  # 2,400 characters, under notes' 4,000
    Toolbox(store, session="s", profile="seed004").call("session_scratchpad", {"content": legacy})
    tb = Toolbox(store, session="s", profile="seed001")
    block = tb.context_block()
    assert "## Notes\n" + legacy.rstrip("\n") in block or "## Notes\n" + legacy in block
    r = tb.call("session_scratchpad", {"action": "append_notes", "content": "next"})
    assert r["ok"] and store.notepad("s").read("notes") == legacy + "next"
    assert [v.action for v in store.notepad("s").history("notes")] == ["append_notes", "load_legacy"]
    tb.call("session_scratchpad", {"action": "set_notes", "content": ""})  # emptied on purpose: never loaded again
    assert tb.call("session_scratchpad", {"action": "set_plan", "content": "1. ship"})["ok"]
    assert store.notepad("s").read("notes") == "" and "## Notes" not in tb.context_block()
    assert store.notepad("s").read("scratchpad") == legacy  # the old key is left as it was


def test_seed001_legacy_notes_over_budget_are_cut_with_a_warning_and_the_tool_says_so(store):
    legacy = "".join(f"finding {i}: {'y' * 40}\n" for i in range(200))  # over 4,000 characters
    store.notepad("s").scratchpad(legacy)
    assert store.notepad("s").read("scratchpad") != ""
    kept = store.notepad("s").read("scratchpad")
    r = Toolbox(store, session="s", profile="seed001").call("session_scratchpad", {"action": "refs.add", "ref": "a.py"})
    assert r["ok"] and "old single-key scratchpad" in r["notice"] and "truncated" in r["notice"]
    assert store.notepad("s").read("notes") == kept[:4000]
    assert store.notepad("s").refs() == ["a.py"]
    other = Toolbox(store, session="t", profile="seed001").call("session_scratchpad", {"action": "refs.add", "ref": "b"})
    assert "notice" not in other and store.notepad("t").read("notes") == ""  # nothing to load: nothing written


def test_seed003_edit_over_the_size_limit_is_refused_before_it_is_built(store):
    """replace_all of 250,000 occurrences with 300 characters each would make a 75 MB
    entry (in place edits stop at 64 MiB): refused from the counts, before the text is built."""
    tb = Toolbox(store, session="s", profile="seed003")
    assert tb.call("scratchpad_write", {"name": "g", "content": "ab" * 250_000})["ok"]
    tracemalloc.start()
    try:
        r = tb.call("scratchpad_edit", {"name": "g", "old_string": "a", "new_string": "a" * 300, "replace_all": True})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r["ok"] is False and "would make 'g' 75250000 bytes" in r["error"] and "write a new entry" in r["error"]
    assert peak < 20 << 20
    assert store.get(store.find("g", session="s").id) == "ab" * 250_000
    r = tb.call("scratchpad_edit", {"name": "g", "old_string": "a", "new_string": "aa", "replace_all": True})
    assert r["ok"] and r["replacements"] == 250_000 and r["size_chars"] == 750_000


def test_grep_pages_with_wide_context_hold_only_what_they_show(store):
    """A grep page far into the matches (skip), with 100 lines of context each: the
    context is read for the matches shown only, where it was built for every match up
    to skip + max_matches (11,000 x 200 lines: 450 MB here, gigabytes with longer lines)."""
    lines = [f"{i:08d}" + "x" * 52 for i in range(11_500)]
    e = store.put("\n".join(lines) + "\n", session="s")
    tb = Toolbox(store, session="s", scope="session")
    tracemalloc.start()
    try:
        r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": "^0", "context": 100,
                                        "max_matches": 1000, "skip": 10_000})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r["ok"] and r["first_match"] == 10_001 and r["shown_matches"] >= 1
    assert peak < 64 << 20
    shown = [ln for ln in r["content"].split("\n") if ln != "--"]
    # every line matches: none is shown as context (9901-10000 were, though they match)
    assert shown[0].startswith("10001:") and all(re.match(r"\d+:", ln) for ln in shown)
    for ln in shown:
        number, text = re.match(r"(\d+)[-:](.*)", ln).groups()
        assert lines[int(number) - 1].startswith(text.split(" [... line")[0])


def test_a_grep_page_far_into_matches_of_many_spans_builds_the_page_only(store):
    """The matches a grep page skips are passed over by their line numbers: each used to be
    built whole (text and up to 1,000 spans), 10,000 of them to show 9 (lines of 2,000
    digits and the pattern ``.``: 1.3 GB without a budget; with the 5 s budget it timed out
    and showed none).  The page is the one a search of it alone shows."""
    lines = [str(i % 10) * 300 for i in range(10_050)]
    e = store.put("\n".join(lines) + "\n", session="s")
    tb = Toolbox(store, session="s", scope="session")
    tracemalloc.start()
    try:
        r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": ".", "max_matches": 20,
                                        "skip": 10_000})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r["ok"] and r["first_match"] == 10_001 and r["shown_matches"] >= 1 and r["total_matches"] == 10_050
    assert peak < 64 << 20  # 10,020 matches of 300 spans each: about 600 MB
    shown = r["content"].split("\n")
    assert [int(ln.split(":")[0]) for ln in shown] == list(range(10_001, 10_001 + r["shown_matches"]))
    assert all(lines[int(ln.split(":")[0]) - 1].startswith(ln.split(":", 1)[1][:100]) for ln in shown)


def test_lines_of_binary_content_keep_every_notice(store):
    """Each notice of a lines read is kept: the binary one beside where the entry ends or
    where the output was capped (it used to be replaced by them)."""
    e = store.put(b"\xff\xfeabc\nline2\n" + b"\xfe" * 30 + b"x" * 3000 + b"\n" * 400, session="s")
    tb = Toolbox(store, session="s", scope="session")
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "lines", "start_line": 1, "end_line": 1000})
    assert r["ok"] and "U+FFFD" in r["notice"]
    assert ("Output capped" in r["notice"]) if r["truncated"] else ("The entry ends at line 402." in r["notice"])
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "lines", "start_line": 1, "end_line": 2})
    assert r["ok"] and r["notice"] == "Binary content: lines are decoded as UTF-8, invalid bytes shown as U+FFFD."
    text = store.put("a\nb\n", session="s")
    r = tb.call("scratchpad_read", {"scratchpad_id": text.id, "mode": "lines", "start_line": 1, "end_line": 5})
    assert r["notice"] == "The entry ends at line 2."


def _hinted_calls(text: str) -> list[dict]:
    """The calls a result's text tells the model to make ("read on with k=v, ...")."""
    calls = []
    for hint in re.findall(r"read on with ([^\]]*)\]", text):
        args = {}
        for k, v in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|-?\d+|true|false)', hint):
            args[k] = json.loads(v)
        calls.append(args)
    return calls


@pytest.mark.parametrize("profile", ["blobpad", "seed003"])
def test_every_read_on_hint_of_a_grep_is_a_call_the_profile_accepts(store, profile):
    """A matching line cut to the width says how to read the rest: with the profile's own
    arguments (seed 003's read has no mode: it said mode="lines", which its tool refused)."""
    content = "ERR " + "x" * 5000 + "\n" + "y" * 2500 + " ERR deep " + "z" * 3000 + "\nok\n"
    tb = Toolbox(store, session="s", profile=profile, scope="session") if profile == "blobpad" else \
        Toolbox(store, session="s", profile=profile)
    if profile == "seed003":
        assert tb.call("scratchpad_write", {"name": "long", "content": content})["ok"]
        r = tb.call("scratchpad_read", {"name": "long", "regex": "ERR"})
    else:
        e = store.put(content, session="s")
        r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": "ERR", "context": 1})
    assert r["ok"] and "continues" in r["content"]
    hints = _hinted_calls(r["content"])
    if profile == "seed003":
        assert hints == [] and "mode" not in r["content"]
    else:
        assert len(hints) >= 2
    for args in hints:
        follow = tb.call("scratchpad_read", args)
        assert follow["ok"], (args, follow)
        assert follow["content"] and ("x" in follow["content"] or "z" in follow["content"])


def test_seed003_list_and_delete(store_factory):
    now = [1_700_000_000.0]
    store = store_factory(clock=lambda: now[0])
    tb = Toolbox(store, session="s", profile="seed003")
    tb.call("scratchpad_write", {"name": "a", "content": "12345"})
    now[0] += 1
    tb.call("scratchpad_write", {"name": "b", "content": "é" * 7})
    listing = tb.call("scratchpad_list", {})
    assert listing["ok"] and listing["count"] == 2
    assert listing["entries"] == [
        {"name": "a", "size": 5, "unit": "characters", "created_at": "2023-11-14T22:13:20+00:00"},
        {"name": "b", "size": 7, "unit": "characters", "created_at": "2023-11-14T22:13:21+00:00"},
    ]
    d = tb.call("scratchpad_delete", {"name": "a"})
    assert d == {"ok": True, "name": "a", "deleted": True}
    assert [e["name"] for e in tb.call("scratchpad_list", {})["entries"]] == ["b"]
    again = tb.call("scratchpad_delete", {"name": "a"})
    assert again["ok"] is False and "scratchpad_list" in again["error"]


def test_seed003_sessions_do_not_share_names(store):
    a = Toolbox(store, session="A", profile="seed003")
    b = Toolbox(store, session="B", profile="seed003")
    a.call("scratchpad_write", {"name": "notes", "content": "from A"})
    b.call("scratchpad_write", {"name": "notes", "content": "from B"})
    assert a.call("scratchpad_read", {"name": "notes"})["content"] == "from A"
    assert b.call("scratchpad_read", {"name": "notes"})["content"] == "from B"
    a.call("scratchpad_write", {"name": "only-a", "content": "secret"})
    foreign = b.call("scratchpad_read", {"name": "only-a"})
    never = b.call("scratchpad_read", {"name": "never-existed"})
    assert foreign["ok"] is False
    assert foreign["error"].replace("only-a", "X") == never["error"].replace("never-existed", "X")
    a_id = store.find("only-a", session="A").id
    by_id = b.call("scratchpad_read", {"name": a_id})
    assert by_id["error"].replace(a_id, "X") == never["error"].replace("never-existed", "X")


def test_seed003_reads_what_the_seed003_offloader_saved(store):
    text = _log(45_000, seed=5)
    out = Offloader(store, policy="seed003").offload(text, session="s", turn=4, tool="execute_command")
    tb = Toolbox(store, session="s", turn=9, profile="seed003")       # another turn: session scope
    r = tb.call("scratchpad_read", {"name": out["name"], "offset": 44_000})
    assert r["content"] == text[44_000:]
    by_id = tb.call("scratchpad_read", {"name": out["scratchpad_id"], "limit": 50})
    assert by_id["content"] == text[:50]


# -- profile blobpad: modes ------------------------------------------------------------------------------


def test_blobpad_char_modes(store):
    text = sample.multibyte_text(30_000, seed=6)
    tb, e = _toolbox(store, text)
    assert _read(tb, scratchpad_id=e.id)["content"] == text[:2000]
    assert _read(tb, scratchpad_id=e.id, mode="tail", n=500)["content"] == text[-500:]
    r = _read(tb, scratchpad_id=e.id, mode="range", start=1234, end=5678)
    assert r["content"] == text[1234:5678] and (r["start"], r["end"]) == (1234, 5678)
    assert r["total_characters"] == len(text)


def test_blobpad_lines_mode(store):
    text = _log(50_000, seed=7)
    lines = _lines(text)
    tb, e = _toolbox(store, text)
    r = _read(tb, scratchpad_id=e.id, mode="lines", start_line=10, end_line=14)
    assert r["content"] == "\n".join(f"{n}\t{lines[n - 1]}" for n in range(10, 15))
    assert (r["start_line"], r["end_line"], r["total_lines"]) == (10, 14, len(lines))
    capped = _read(tb, scratchpad_id=e.id, mode="lines")                 # 200 lines of ~110 characters
    assert capped["truncated"] and capped["next"]["end_line"] == 200
    assert capped["content"].split("\n")[0] == f"1\t{lines[0]}"
    short, rows_entry = _toolbox(store, "".join(f"row {i}\n" for i in range(1, 1001)), turn=2)
    rows = _read(short, scratchpad_id=rows_entry.id, mode="lines")
    assert rows["content"] == "\n".join(f"{i}\trow {i}" for i in range(1, 201)) and rows["end_line"] == 200
    assert rows["truncated"] is False
    end = _read(tb, scratchpad_id=e.id, mode="lines", start_line=len(lines) - 1, end_line=len(lines) + 50)
    assert end["content"] == f"{len(lines) - 1}\t{lines[-2]}\n{len(lines)}\t{lines[-1]}"
    assert end["truncated"] is False and str(len(lines)) in end["notice"]


def test_blobpad_lines_mode_counts_negative_lines_from_the_end_like_slicing(store):
    text = "".join(f"row {i}\n" for i in range(1, 301)) + "last row without newline"
    lines = _lines(text)
    tb, e = _toolbox(store, text)
    cases = {  # (start_line, end_line) -> the Python slice of the lines (end_line inclusive)
        (-1, None): lines[-1:], (-3, -1): lines[-3:], (-100, -1): lines[-100:], (-5, -3): lines[-5:-2],
        (2, -2): lines[1:-1], (-10**9, 5): lines[:5], (-250, 60): lines[-250:60], (-2, 10**6): lines[-2:],
    }
    for (start, end), want in cases.items():
        args = {"scratchpad_id": e.id, "mode": "lines", "start_line": start}
        if end is not None:
            args["end_line"] = end
        r = tb.call("scratchpad_read", args)
        assert r["ok"] is True and r["truncated"] is False, (start, end, r)
        first = r["start_line"]
        assert first == lines.index(want[0]) + 1 and r["end_line"] == first + len(want) - 1, (start, end)
        assert r["content"] == "\n".join(f"{first + k}\t{line}" for k, line in enumerate(want)), (start, end)
    schema = next(s["input_schema"] for s in tb.schemas("anthropic") if s["name"] == "scratchpad_read")
    jsonschema.validate({"scratchpad_id": e.id, "mode": "lines", "start_line": -100, "end_line": -1}, schema)
    assert "count from the end" in schema["properties"]["start_line"]["description"]


def test_following_next_reads_everything(store):
    text = _log(30_000, seed=8)
    tb, e = _toolbox(store, text, max_result_chars=2000)
    got, args, calls = "", {"scratchpad_id": e.id, "mode": "range", "start": 0}, 0
    while True:
        r = tb.call("scratchpad_read", args)
        assert r["ok"] and result_size(r) <= 2000
        got += r["content"]
        calls += 1
        if not r["truncated"]:
            break
        args = r["next"]
    assert got == text and calls > 10
    # lines: every line exactly once, in order
    shown, args = [], {"scratchpad_id": e.id, "mode": "lines", "start_line": 1, "end_line": 10**6}
    while True:
        r = tb.call("scratchpad_read", args)
        assert r["ok"] and result_size(r) <= 2000
        shown += r["content"].split("\n")
        if not r["truncated"]:
            break
        args = r["next"]
    assert shown == [f"{n}\t{line}" for n, line in enumerate(_lines(text), 1)]
    # tail keeps the end and points back at what precedes it
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "tail", "n": 5000})
    assert text.endswith(r["content"]) and r["truncated"]
    assert r["next"] == {"scratchpad_id": e.id, "mode": "range", "start": len(text) - 5000,
                         "end": len(text) - len(r["content"])}
    before = tb.call("scratchpad_read", r["next"])
    assert before["content"] == text[before["start"]:before["end"]] and before["start"] == len(text) - 5000


def test_blobpad_grep_matches_python_re(store):
    text = _log(60_000, seed=9)
    tb, e = _toolbox(store, text)
    r = _read(tb, scratchpad_id=e.id, mode="grep", pattern=r"disk quota", max_matches=1000)
    assert r["content"] == _grep_oracle(text, r"disk quota") and r["truncated"] is False
    assert r["total_matches"] == r["shown_matches"] == r["content"].count("\n") + 1
    r = _read(tb, scratchpad_id=e.id, mode="grep", pattern=r"USER=BRAVO\d+", ignore_case=True, max_matches=1000)
    assert r["content"] == _grep_oracle(text, r"USER=BRAVO\d+", re.IGNORECASE)
    r = _read(tb, scratchpad_id=e.id, mode="grep", pattern="(active=1,", fixed_strings=True, max_matches=1000)
    assert r["content"] == _grep_oracle(text, re.escape("(active=1,"))
    for c in (1, 3):
        r = _read(tb, scratchpad_id=e.id, mode="grep", pattern=r"crashed", context=c, max_matches=1000)
        assert r["content"] == _grep_oracle(text, r"crashed", context=c), c
    count = _read(tb, scratchpad_id=e.id, mode="count", pattern="ERROR")
    assert count["count"] == len([x for x in _lines(text) if "ERROR" in x])
    none = _read(tb, scratchpad_id=e.id, mode="grep", pattern="no such thing")
    assert none["ok"] and none["content"] == "" and none["total_matches"] == 0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet="ab \n\r", max_size=400), context=st.integers(0, 3), icase=st.booleans(),
       pattern=st.sampled_from(["a", "^a", "b$", "^$", "a b", "^", "$", "ab*", r"\r", "B"]))
def test_grep_count_and_lines_agree_with_python_on_any_text(store_factory, text, pattern, context, icase):
    store = store_factory("prop", chunk_params=blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256))
    entry = store.put(text, session="p", turn=1)
    tb = Toolbox(store, session="p", turn=1)
    flags = re.IGNORECASE if icase else 0
    r = _read(tb, scratchpad_id=entry.id, mode="grep", pattern=pattern, context=context, max_matches=1000,
              ignore_case=icase)
    assert r["content"] == _grep_oracle(text, pattern, flags, context)
    c = _read(tb, scratchpad_id=entry.id, mode="count", pattern=pattern, ignore_case=icase)
    assert c["count"] == sum(1 for line in _lines(text) if re.search(pattern, line, flags))
    lines = _read(tb, scratchpad_id=entry.id, mode="lines", start_line=1, end_line=10**6)
    assert lines["content"] == "\n".join(f"{n}\t{line}" for n, line in enumerate(_lines(text), 1))


def test_grep_max_matches_and_skip_page_through_all_matches(store):
    text = _log(40_000, seed=10)
    tb, e = _toolbox(store, text)
    oracle = _grep_oracle(text, "INFO").split("\n")
    r = _read(tb, scratchpad_id=e.id, mode="grep", pattern="INFO", max_matches=7)
    assert r["content"].split("\n") == oracle[:7]
    assert r["truncated"] and r["total_matches"] == len(oracle)
    assert r["next"] == {"scratchpad_id": e.id, "mode": "grep", "pattern": "INFO", "max_matches": 7, "skip": 7}
    got, args = [], {"scratchpad_id": e.id, "mode": "grep", "pattern": "INFO"}
    small = Toolbox(store, session="s", turn=1, max_result_chars=2000)
    while True:
        r = small.call("scratchpad_read", args)
        assert r["ok"] and result_size(r) <= 2000
        got += r["content"].split("\n")
        if not r["truncated"]:
            break
        args = r["next"]
    assert got == oracle


def test_long_lines_are_capped_with_a_way_to_read_on(store):
    long_line = "".join(f"<{i:05d}>" for i in range(1500))        # 10,500 characters
    text = f"first\n{long_line}\nlast needle\n"
    tb, e = _toolbox(store, text)
    r = _read(tb, scratchpad_id=e.id, mode="lines")
    rows = r["content"].split("\n")
    assert rows[0] == "1\tfirst" and rows[2] == "3\tlast needle"
    assert rows[1] == (f"2\t{long_line[:2000]} [... line 2 continues for 8500 more characters; read on with "
                       f'scratchpad_id="{e.id}", mode="lines", start_line=2, end_line=2, column=2000]')
    pieces, column = [], 0
    while True:
        r = _read(tb, scratchpad_id=e.id, mode="lines", start_line=2, end_line=2, column=column)
        body = r["content"].split("\t", 1)[1]
        if column:
            assert body.startswith(f"[... {column} characters ...]")
            body = body[len(f"[... {column} characters ...]"):]
        m = re.search(r" \[\.\.\. line 2 continues.*column=(\d+)\]$", body)
        pieces.append(body[: m.start()] if m else body)
        if not m:
            break
        column = int(m.group(1))
    assert "".join(pieces) == long_line
    g = _read(tb, scratchpad_id=e.id, mode="grep", pattern="<01200>")
    match_line = g["content"]
    assert match_line.startswith("2:[... ") and "<01200>" in match_line and "column=" in match_line
    offset = int(re.match(r"2:\[\.\.\. (\d+) characters", match_line).group(1))
    shown = match_line.split("characters ...]", 1)[1].split(" [... line 2 continues")[0]
    assert shown == long_line[offset:offset + 2000]


def test_results_never_exceed_the_cap_even_when_json_escapes_swell(store):
    text = "\x01\"\\" * 30_000                                 # 6 + 2 + 2 JSON characters per 3 characters
    tb, e = _toolbox(store, text)
    for args in ({"mode": "head", "n": 90_000}, {"mode": "tail", "n": 90_000}, {"mode": "lines"},
                 {"mode": "grep", "pattern": "\x01", "fixed_strings": True}, {"mode": "range", "start": 7}):
        r = _read(tb, scratchpad_id=e.id, **args)
        assert r["ok"] and result_size(r) <= 20_000, args
        assert r["truncated"] is True or "continues for" in r["content"], args
    head = _read(tb, scratchpad_id=e.id, mode="head", n=90_000)
    assert text.startswith(head["content"]) and head["next"]["start"] == len(head["content"])


def test_binary_entries_are_read_in_bytes_as_base64(store):
    blob = sample.binary_blob(50_000, seed=11)
    tb, e = _toolbox(store, blob)
    r = _read(tb, scratchpad_id=e.id, n=100)
    assert r["encoding"] == "base64" and base64.b64decode(r["content"]) == blob[:100]
    assert base64.b64decode(_read(tb, scratchpad_id=e.id, mode="tail", n=33)["content"]) == blob[-33:]
    got, args = b"", {"scratchpad_id": e.id, "mode": "range", "start": 0}
    while True:
        r = tb.call("scratchpad_read", args)
        assert result_size(r) <= 20_000
        got += base64.b64decode(r["content"])
        if not r["truncated"]:
            break
        args = r["next"]
    assert got == blob


def test_scratchpad_list_pages(store):
    tb = Toolbox(store, session="s", turn=1, max_result_chars=2000)
    ids = [store.put(f"entry {i}", session="s", turn=1, tool="t", step=i).id for i in range(30)]
    seen, args = [], {}
    while True:
        r = tb.call("scratchpad_list", args)
        assert r["ok"] and r["count"] == 30 and result_size(r) <= 2000
        seen += [row["scratchpad_id"] for row in r["entries"]]
        if not r["truncated"]:
            break
        args = r["next"]
    assert seen == ids
    row = tb.call("scratchpad_list", {})["entries"][3]
    assert (row["kind"], row["size_bytes"], row["chars"], row["lines"], row["tool"], row["step"]) == (
        "text", 7, 7, 1, "t", 3)


# -- scope and isolation ---------------------------------------------------------------------------------


def _error(tb, entry_id, **args):
    r = tb.call("scratchpad_read", {"scratchpad_id": entry_id, **args})
    assert r["ok"] is False
    return r["error"].replace(entry_id, "<id>")


def test_another_turns_and_another_sessions_ids_read_like_unknown_ids(store_factory):
    now = [1_000_000.0]
    store = store_factory(clock=lambda: now[0])
    mine = store.put("mine\n", session="A", turn=1)
    other_turn = store.put("turn two\n", session="A", turn=2)
    str_turn = store.put("turn '1'\n", session="A", turn="1")
    other_session = store.put("theirs\n", session="B", turn=1)
    expiring = store.put("brief\n", session="A", turn=1, ttl=5)
    deleted = store.put("gone\n", session="A", turn=1)
    store.delete(deleted.id)
    tb = Toolbox(store, session="A", turn=1)
    assert _read(tb, scratchpad_id=mine.id)["content"] == "mine\n"
    now[0] += 6
    for args in ({}, {"mode": "grep", "pattern": "t"}, {"mode": "count", "pattern": "t"}, {"mode": "lines"}):
        unknown = _error(tb, UNKNOWN_ID, **args)
        for foreign in (other_turn, str_turn, other_session, expiring, deleted):
            assert _error(tb, foreign.id, **args) == unknown, (foreign, args)
    assert [r["scratchpad_id"] for r in tb.call("scratchpad_list", {})["entries"]] == [mine.id]
    # session scope: every turn of the session, still not the other session
    whole = Toolbox(store, session="A", turn=1, scope="session")
    assert _read(whole, scratchpad_id=other_turn.id)["content"] == "turn two\n"
    assert _error(whole, other_session.id) == _error(whole, UNKNOWN_ID)
    # seed000 profile: the same rule
    s0 = Toolbox(store, session="A", turn=1, profile="seed000")
    assert _error(s0, other_session.id) == _error(s0, UNKNOWN_ID)
    # moving to the next turn hides the previous one
    tb.turn = 2
    assert _error(tb, mine.id) == _error(tb, UNKNOWN_ID)
    assert _read(tb, scratchpad_id=other_turn.id)["ok"]


def test_malformed_ids_get_a_format_hint(store):
    tb, _ = _toolbox(store, "x")
    r = _read(tb, scratchpad_id="not-an-id")
    assert r["ok"] is False and "16" in r["error"] and "hex" in r["error"]
    upper = store.put("case", session="s", turn=1).id
    assert _read(tb, scratchpad_id=upper.upper())["content"] == "case"
    # seed 003 reads by name, or by id when no entry has that name: in either case too
    named = Toolbox(store, session="s", profile="seed003")
    mixed = "".join(c.upper() if i % 2 else c for i, c in enumerate(upper))
    assert named.call("scratchpad_read", {"name": mixed})["content"] == "case"


# -- malformed calls ----------------------------------------------------------------------------------------

ID = "@ID"  # replaced by a real in-scope id

MALFORMED: list[tuple[str, str, object, str, bool]] = [
    # (profile, tool, arguments, a word the error must contain, whether JSON Schema rejects them too)
    ("blobpad", "scratchpad_read", {}, "scratchpad_id", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": 123}, "string", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "middle"}, "head, tail", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "n": -1}, "at least 0", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "n": 10**30}, "at most", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "n": 2**53}, "at most", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "n": "100"}, "integer", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "n": True}, "integer", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "n": 1.5}, "integer", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "n": float("inf")}, "integer", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "range"}, "start", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "range", "start": -5}, "at least 0", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "range", "start": 10, "end": 5}, "before start", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "range", "start": 10**6}, "past the end", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "grep"}, "pattern", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "grep", "pattern": "(unclosed"}, "pattern", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "grep", "pattern": r"(a)\1"}, "RE2", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "count", "pattern": "["}, "pattern", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "grep", "pattern": ""}, "empty", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "grep", "pattern": "a" * 5000}, "limit", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "grep", "pattern": "a", "context": 101}, "at most", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "grep", "pattern": "a", "max_matches": 0},
     "at least 1", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "ignore_case": "yes"}, "true or false", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "lines", "start_line": 0}, "no line 0", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "lines", "start_line": 1, "end_line": 0}, "no line 0",
     False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "lines", "start_line": -1, "end_line": -3},
     "(line", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "lines", "start_line": 5, "end_line": 2},
     "before start_line", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "lines", "start_line": 10**9}, "past the end", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "mode": "lines", "column": 10**6}, "column", False),
    ("blobpad", "scratchpad_read", {"scratchpad_id": ID, "bogus": 1}, "bogus", True),
    ("blobpad", "scratchpad_read", [ID], "object", True),
    ("blobpad", "scratchpad_read", "{not json", "JSON", False),
    ("blobpad", "scratchpad_read", 7, "object", True),
    ("blobpad", "scratchpad_read", {"scratchpad_id": "zz"}, "16", False),
    ("blobpad", "scratchpad_list", {"skip": -1}, "at least 0", True),
    ("blobpad", "scratchpad_list", {"skip": "all"}, "integer", True),
    ("seed000", "scratchpad_read", {"scratchpad_id": ID, "mode": "lines"}, "full, head", True),
    ("seed000", "scratchpad_read", {"scratchpad_id": ID, "n": -5}, "at least 0", True),
    ("seed000", "scratchpad_read", {"scratchpad_id": ID, "mode": "range"}, "start", False),
    ("seed000", "scratchpad_read", {"scratchpad_id": ID, "end": "10"}, "integer", True),
    ("seed000", "scratchpad_read", {"mode": "head"}, "scratchpad_id", True),
    ("seed003", "scratchpad_write", {"name": "x"}, "content", True),
    ("seed003", "scratchpad_write", {"name": "", "content": "c"}, "empty", True),
    ("seed003", "scratchpad_write", {"name": 5, "content": "c"}, "string", True),
    ("seed003", "scratchpad_write", {"name": "x" * 300, "content": "c"}, "limit", True),
    ("seed003", "scratchpad_write", {"name": "x", "content": ["a"]}, "string", True),
    ("seed003", "scratchpad_write", {"name": "x", "content": "\ud800"}, "surrogates", False),
    ("seed003", "scratchpad_read", {"name": "n", "offset": -1}, "at least 0", True),
    ("seed003", "scratchpad_read", {"name": "n", "limit": 0}, "at least 1", True),
    ("seed003", "scratchpad_read", {"name": "n", "limit": 10**20}, "at most", True),
    ("seed003", "scratchpad_read", {"name": "n", "regex": "["}, "pattern", False),
    ("seed003", "scratchpad_read", {"name": "n", "regex": 5}, "string", True),
    ("seed003", "scratchpad_read", {"name": "n", "offset": 10**6}, "past the end", False),
    ("seed003", "scratchpad_read", {"name": "missing"}, "scratchpad_list", False),
    ("seed003", "scratchpad_edit", {"name": "n"}, "content", False),
    ("seed003", "scratchpad_edit", {"name": "n", "old_string": "a", "new_string": "b", "replace_all": "true"},
     "true or false", True),
    ("seed003", "scratchpad_edit", {"name": "n", "old_string": "", "new_string": "b"}, "empty", False),
    ("seed003", "scratchpad_list", {"x": 1}, "no argument", True),
    ("seed003", "scratchpad_delete", {}, "name", True),
    ("seed003", "scratchpad_delete", {"name": None}, "name", False),
    ("seed001", "session_scratchpad", {"action": 5}, "string", True),
    ("seed001", "session_scratchpad", {"action": "refs.set", "items": "a,b"}, "array", True),
    ("seed001", "session_scratchpad", {"action": "set_plan", "content": {"steps": 2}}, "string", True),
    ("seed001", "session_scratchpad", {"action": "set_notes", "content": "x" * (2 << 20)}, "1 mib", False),
    ("seed002", "read_notepad", {"offset": -1}, "at least 0", True),
    ("seed002", "read_notepad", {"offset": 10}, "past the end", False),
    ("seed002", "read_notepad", {"page": 2}, "no argument", True),
    ("seed002", "write_notepad", {}, "content", True),
    ("seed002", "write_notepad", {"content": 5}, "string", True),
    ("seed002", "update_notepad", {"operation": "append", "content": "x", "replace_all": "yes"}, "true or false", True),
    ("seed002", "update_notepad", {"operation": "delete", "content": "absent"}, "not found", False),
    ("seed004", "session_scratchpad", {}, "content", True),
    ("seed004", "session_scratchpad", {"content": 5}, "string", True),
    ("seed004", "session_scratchpad", {"content": "x", "mode": "merge"}, "replace, append", True),
    ("offload", "scratchpad_offload", {}, "path", True),
    ("offload", "scratchpad_offload", {"path": 5}, "string", True),
    ("offload", "scratchpad_offload", {"path": ""}, "empty", True),
    ("offload", "scratchpad_offload", {"path": "../../etc/passwd"}, "outside", False),
]


def _substitute(args: object, entry_id: str) -> object:
    if isinstance(args, dict):
        return {k: entry_id if v == ID else v for k, v in args.items()}
    if isinstance(args, list):
        return [entry_id if v == ID else v for v in args]
    return args


@pytest.mark.parametrize(("profile", "tool", "args", "word", "schema_rejects"), MALFORMED,
                         ids=[f"{p}-{t}-{i}" for i, (p, t, *_rest) in enumerate(MALFORMED)])
def test_malformed_arguments_get_ok_false_and_a_message(store, tmp_path, profile, tool, args, word, schema_rejects):
    options: dict = {"always_show": True}
    if profile == "offload":
        profile, options["allow_dirs"] = "blobpad", [tmp_path]
    tb = Toolbox(store, session="s", turn=1, profile=profile, **options)
    e = store.put("line one\nline two\n", session="s", turn=1, name="n" if profile == "seed003" else None)
    args = _substitute(args, e.id)
    result = tb.call(tool, args)
    assert result["ok"] is False, result
    assert isinstance(result["error"], str) and word.lower() in result["error"].lower(), result["error"]
    assert "Traceback" not in result["error"]
    json.dumps(result)
    if isinstance(args, (dict, list, int)) and not isinstance(args, bool):
        schema = next(s["input_schema"] for s in tb.schemas("anthropic") if s["name"] == tool)
        valid = jsonschema.Draft202012Validator(schema).is_valid(args)
        if schema_rejects:
            assert not valid, "the schema should reject what the dispatcher rejects"


def _string_params() -> list[tuple[str, str, str]]:
    """(profile, tool, parameter) for every string parameter of every tool of every profile."""
    out = []
    for profile in PROFILES:
        tb = Toolbox(blobpad.open("memory://"), session="s", turn=1, profile=profile, allow_dirs=[tempfile.gettempdir()])
        for schema in tb.schemas("anthropic"):
            for name, prop in schema["input_schema"]["properties"].items():
                if prop["type"] == "string":
                    out.append((profile, schema["name"], name))
        tb.store.close()
    return out


@pytest.mark.parametrize(("profile", "tool", "param"), _string_params())
def test_a_lone_surrogate_in_any_string_argument_is_a_clear_error(store, tmp_path, profile, tool, param):
    """JSON's "\\ud800" decodes to a lone surrogate, which nothing can store, match or open
    (a path with one made the sandbox's realpath raise: "internal error")."""
    tb = Toolbox(store, session="s", turn=1, profile=profile, allow_dirs=[tmp_path], always_show=True)
    store.put("line one\n", session="s", turn=1, name="n")
    schema = next(s["input_schema"] for s in tb.schemas("anthropic") if s["name"] == tool)
    args: dict = {}
    for name in schema.get("required", []):
        prop = schema["properties"][name]
        args[name] = {"string": (prop.get("enum") or ["n"])[0], "integer": 1, "boolean": False, "array": []}[prop["type"]]
    args[param] = "x\ud800y"
    for call in (args, json.dumps(args)):  # as a dict, and as the JSON text a model sends
        result = tb.call(tool, call)
        assert result["ok"] is False and "surrogates" in result["error"] and "internal error" not in result["error"], result


def test_valid_arguments_satisfy_the_schema(store):
    tb, e = _toolbox(store, "alpha\nbeta\n")
    schema = next(s["input_schema"] for s in tb.schemas("anthropic") if s["name"] == "scratchpad_read")
    for args in ({"scratchpad_id": e.id}, {"scratchpad_id": e.id, "mode": "grep", "pattern": "a", "context": 2},
                 {"scratchpad_id": e.id, "mode": "lines", "start_line": 1, "end_line": 2, "column": 1},
                 {"scratchpad_id": e.id, "mode": "range", "start": 1, "end": 3, "n": None}):
        jsonschema.validate({k: v for k, v in args.items() if v is not None}, schema)
        assert tb.call("scratchpad_read", args)["ok"] is True


def test_arguments_may_come_as_a_json_string_and_nulls_mean_defaults(store):
    tb, e = _toolbox(store, _log(5000, seed=12))
    r = tb.call("scratchpad_read", json.dumps({"scratchpad_id": e.id, "mode": None, "n": None}))
    assert r["ok"] and r["content"] == _log(5000, seed=12)[:2000]


def test_unknown_tool(store):
    tb, _ = _toolbox(store, "x")
    r = tb.call("scratchpad_delete", {"name": "x"})
    assert r["ok"] is False and "scratchpad_read" in r["error"] and "scratchpad_list" in r["error"]
    assert tb.call(None, {})["ok"] is False   # type: ignore[arg-type]


def test_call_never_raises_on_a_closed_store(tmp_path):
    s = blobpad.open(tmp_path / "closed")
    tb, e = _toolbox(s, "abc")
    s.close()
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id})
    assert r["ok"] is False and "closed" in r["error"]


def test_unexpected_exceptions_become_a_generic_error(store):
    tb, _ = _toolbox(store, "x")

    def explode(toolbox, args, budget):
        raise RuntimeError("session B's secret content")

    # A tool of the test's own, registered like the built-in ones, to reach the last-resort handler.
    tb.add_tool(ToolSpec("explode", "raises", (), explode))
    r = tb.call("explode", {})
    assert r["ok"] is False and "internal error" in r["error"]
    assert "secret" not in json.dumps(r) and "RuntimeError" not in json.dumps(r)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_call_never_raises_and_stays_under_the_cap(store, tmp_path, data):
    profile = data.draw(st.sampled_from(["blobpad", "seed000", "seed003"]))
    tb = Toolbox(store, session="fz", turn=1, profile=profile, always_show=True, allow_dirs=[tmp_path],
                 max_result_chars=3000)
    e = store.put("alpha\nbeta gamma\n" * 50, session="fz", turn=1, name="n")
    tool = data.draw(st.sampled_from(sorted(tb.tools)))
    names = [p.name for p in tb.tools[tool].params] + ["extra"]
    values = st.one_of(_json_values, st.just(e.id), st.just("n"), st.sampled_from(
        ["head", "tail", "range", "lines", "grep", "count", "full", "a|b", "(", "*"]))
    args = data.draw(st.one_of(st.dictionaries(st.sampled_from(names), values, max_size=6), _json_values))
    result = tb.call(tool, args)
    assert isinstance(result, dict) and isinstance(result["ok"], bool)
    assert result_size(result) <= 3000
    if not result["ok"]:
        assert result["error"] and "Traceback" not in result["error"]


# -- scratchpad_offload: a file by path, confined to the allowed directories --------------------------------


@pytest.fixture
def dirs(tmp_path):
    allowed = tmp_path / "allowed"
    outside = tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (allowed / "big.log").write_text(_log(100_000, seed=13))
    return allowed, outside


@pytest.mark.parametrize("allow", [[""], ["", "/tmp"], "/tmp", b"/tmp"])
def test_an_empty_or_unlisted_allowed_directory_is_refused(store, tmp_path, monkeypatch, allow):
    """realpath("") is the working directory, and a str iterates as its letters ("/" among
    them: every file): both used to open the offload tool to far more than was named."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.txt").write_text("secret\n")
    with pytest.raises(blobpad.InvalidArgument, match="allowed directory is empty|a list of directories"):
        Toolbox(store, session="s", scope="session", allow_dirs=allow)
    assert "scratchpad_offload" not in Toolbox(store, session="s", scope="session").tool_names()


def test_offload_tool_exists_only_with_allowed_dirs(store, dirs):
    assert "scratchpad_offload" not in Toolbox(store, session="s", turn=1, always_show=True).tool_names()
    tb = Toolbox(store, session="s", turn=1, allow_dirs=[dirs[0]])
    assert "scratchpad_offload" in tb.tool_names()
    assert str(dirs[0].resolve()) in next(s["description"] for s in tb.schemas("anthropic")
                                          if s["name"] == "scratchpad_offload")
    with pytest.raises(blobpad.InvalidArgument, match="not a directory"):
        Toolbox(store, session="s", turn=1, allow_dirs=[dirs[0] / "missing"])


def test_offload_a_file_and_read_it(store, dirs):
    allowed, _ = dirs
    text = (allowed / "big.log").read_text()
    tb = Toolbox(store, session="s", turn=1, allow_dirs=[allowed])
    for path in (str(allowed / "big.log"), "big.log", "./sub/../big.log"):
        out = tb.call("scratchpad_offload", {"path": path})
        assert out["ok"] and out["kind"] == "text" and out["size_bytes"] == len(text.encode())
        assert out["metadata"] == {"path": str((allowed / "big.log").resolve()), "bytes": len(text.encode())}
        assert out["summary"] == text[:500] + f"\n[... {len(text) - 1000} characters omitted ...]\n" + text[-500:]
    got = tb.call("scratchpad_read", {"scratchpad_id": out["scratchpad_id"], "mode": "tail", "n": 300})
    assert got["content"] == text[-300:]


def test_offload_reports_a_path_that_changes_or_fails_under_it(store, dirs, monkeypatch, caplog):
    """A directory swapped while the path is resolved, or a disk error while the file is
    read, is a clear ok:false answer (seen in a race test over MCP), not an internal error."""
    allowed, _ = dirs
    tb = Toolbox(store, session="s", turn=1, allow_dirs=[allowed])
    real_realpath = os.path.realpath

    def swapped(path, *args, **kwargs):
        if str(path).endswith("big.log"):
            raise FileNotFoundError(2, "No such file or directory")
        return real_realpath(path, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os.path, "realpath", swapped)
        r = tb.call("scratchpad_offload", {"path": "big.log"})
    assert r["ok"] is False and "cannot resolve" in r["error"] and "internal" not in r["error"]

    def failing_read(self, n=-1):
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(blobpad.tools.LimitedReader, "read", failing_read)
        r = tb.call("scratchpad_offload", {"path": "big.log"})
    assert r["ok"] is False and "cannot read" in r["error"] and "Input/output error" in r["error"]
    assert not [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert store.entries(session="s") == []  # nothing half-stored
    assert tb.call("scratchpad_offload", {"path": "big.log"})["ok"]


def test_offload_refuses_everything_outside(store, dirs):
    allowed, outside = dirs
    (allowed / "link").symlink_to(outside / "secret.txt")
    (allowed / "dirlink").symlink_to(outside, target_is_directory=True)
    os.mkfifo(allowed / "fifo")
    (allowed / "subdir").mkdir()
    tb = Toolbox(store, session="s", turn=1, allow_dirs=[allowed], max_file_bytes=50_000)
    cases = {
        str(outside / "secret.txt"): "outside the allowed",
        "../outside/secret.txt": "outside the allowed",
        "link": "outside the allowed",
        "dirlink/secret.txt": "outside the allowed",
        "/etc/passwd": "outside the allowed",
        str(outside / "does-not-exist"): "outside the allowed",    # no existence oracle outside
        "fifo": "not a regular file",
        "subdir": "directory",
        "nothing-here": "no file",
        "big.log": "limit",
        "a\0b": "NUL",
    }
    for path, word in cases.items():
        r = tb.call("scratchpad_offload", {"path": path})
        assert r["ok"] is False and word in r["error"], (path, r)
        assert "TOP SECRET" not in json.dumps(r)
    assert store.entries() == []


def test_huge_integers_anywhere_get_ok_false(store):
    tb, e = _toolbox(store, "x")
    huge = 10**5000
    assert tb.call(huge, {})["ok"] is False                                   # type: ignore[arg-type]
    for args in ({"scratchpad_id": e.id, "n": huge}, {"scratchpad_id": e.id, "n": -huge},
                 {"scratchpad_id": huge}, {"scratchpad_id": e.id, "mode": huge}):
        r = tb.call("scratchpad_read", args)
        assert r["ok"] is False and r["error"], r
        assert ("digits" in r["error"]) is (args.get("n") is not None), r



def test_a_writing_tool_runs_once_and_its_result_is_cut(store):
    tb, _ = _toolbox(store, "x")
    calls = []

    def write_big(toolbox, args, budget):
        calls.append(budget)
        return {"ok": True, "echo": "é\x01" * 40_000, "small": "kept"}

    # A tool of the test's own with side effects (read_only=False): it must never be re-run to fit.
    tb.add_tool(ToolSpec("write_big", "writes", (), write_big, read_only=False))
    r = tb.call("write_big", {})
    assert len(calls) == 1
    assert r["ok"] is True and r["truncated"] is True and r["small"] == "kept"
    assert result_size(r) <= 20_000 and ("é\x01" * 1000) in r["echo"] and "characters cut" in r["echo"]


def test_grep_paging_stops_at_the_skip_limit(store):
    text = "hit\n" * 10_050
    tb, e = _toolbox(store, text)
    r = _read(tb, scratchpad_id=e.id, mode="grep", pattern="hit", skip=9_990, max_matches=20)
    assert r["ok"] and r["shown_matches"] == 20 and r["total_matches"] == 10_050 and r["truncated"]
    assert "next" not in r and "narrow the pattern" in r["notice"]
    assert r["content"] == "\n".join(f"{n}:hit" for n in range(9_991, 10_011))

# -- notepad profiles (seeds 001, 002, 004) ---------------------------------------------------------------


def test_notepad_profile_schemas_are_the_seeds(store):
    s1 = {t["name"]: t["input_schema"] for t in Toolbox(store, session="s", profile="seed001").schemas("anthropic")}
    assert list(s1) == ["session_scratchpad"]                      # seed 001's session.scratchpad, no dot
    props = s1["session_scratchpad"]["properties"]
    assert props["action"]["enum"] == ["set_notes", "append_notes", "set_plan", "refs.add", "refs.remove", "refs.set"]
    assert set(props) == {"action", "content", "ref", "items"} and s1["session_scratchpad"]["required"] == ["action"]
    s2 = {t["name"]: t["input_schema"] for t in Toolbox(store, session="s", profile="seed002").schemas("anthropic")}
    assert list(s2) == ["read_notepad", "write_notepad", "update_notepad"]
    assert s2["read_notepad"]["required"] == []
    assert s2["write_notepad"]["required"] == ["content"]
    assert s2["update_notepad"]["properties"]["operation"]["enum"] == ["find_replace", "append", "prepend", "delete"]
    assert set(s2["update_notepad"]["properties"]) == {"operation", "content", "find", "replace", "replace_all"}
    s4 = {t["name"]: t["input_schema"] for t in Toolbox(store, session="s", profile="seed004").schemas("anthropic")}
    assert list(s4) == ["session_scratchpad"]
    assert s4["session_scratchpad"]["properties"]["mode"]["enum"] == ["replace", "append"]
    assert s4["session_scratchpad"]["properties"]["mode"]["default"] == "replace"
    assert s4["session_scratchpad"]["required"] == ["content"]


def test_notepad_tool_descriptions_state_the_budgets_in_force(store):
    def description(profile: str, **budgets) -> str:
        tb = Toolbox(store, session="s", profile=profile, notepad_options={"budgets": budgets} if budgets else {})
        return tb.schemas("openai")[0]["function"]["description"]

    d = description("seed001")
    assert "notes (4,000 characters" in d and "plan (2,000 characters" in d and "refs (50 items" in d
    d = description("seed001", notes=300, plan=120, refs=7)
    assert "notes (300 characters" in d and "plan (120 characters" in d and "refs (7 items" in d
    assert "would exceed 300 characters" in d and "4,000" not in d and "2,000" not in d and " 50" not in d
    assert "Budget: about 2,000 tokens." in description("seed004")
    d = description("seed004", scratchpad=500)
    assert "Budget: about 500 tokens." in d and "2,000" not in d and "2000" not in d


def test_seed001_spaces_and_budgets(store):
    tb = Toolbox(store, session="s", profile="seed001")
    pad = tb.notepad
    assert tb.context_block() == ""                                  # only non-empty spaces are shown
    r = tb.call("session_scratchpad", {"action": "set_plan", "content": "1. Fix auth bug\n2. Add test"})
    assert r["ok"] and pad.read("plan") == "1. Fix auth bug\n2. Add test"
    assert "1. Fix auth bug" in tb.context_block()
    r = tb.call("session_scratchpad", {"action": "set_notes", "content": "x" * 4100})
    assert r["ok"] and r.get("warning") and pad.read("notes") == "x" * 4000
    tb.call("session_scratchpad", {"action": "set_notes", "content": "n" * 3990})
    r = tb.call("session_scratchpad", {"action": "append_notes", "content": "y" * 20})
    assert r["ok"] is False and r["error"] and pad.read("notes") == "n" * 3990     # rejected, unchanged
    for i in range(51):
        assert tb.call("session_scratchpad", {"action": "refs.add", "ref": f"src/f{i}.ts"})["ok"]
    assert pad.refs() == [f"src/f{i}.ts" for i in range(1, 51)]                 # the oldest was dropped
    r = tb.call("session_scratchpad", {"action": "refs.remove", "ref": "src/f0.ts"})
    assert r["ok"] is False and r["error"]
    assert tb.call("session_scratchpad", {"action": "refs.remove", "ref": "src/f7.ts"})["ok"]
    assert "src/f7.ts" not in pad.refs()
    items = ["a", 5, "b", None, *[f"r{i}" for i in range(60)]]
    assert tb.call("session_scratchpad", {"action": "refs.set", "items": items})["ok"]
    assert pad.refs() == ["a", "b", *[f"r{i}" for i in range(48)]]
    for bad, word in (({"action": "set_notes"}, "content"), ({"action": "refs.add"}, "ref"),
                      ({"action": "refs.add", "ref": ""}, "empty"), ({"action": "refs.set"}, "items"),
                      ({"action": "notes.set", "content": "x"}, "set_notes"), ({"content": "x"}, "action")):
        r = tb.call("session_scratchpad", bad)
        assert r["ok"] is False and word in r["error"], (bad, r)


def test_seed002_notepad(store):
    tb = Toolbox(store, session="s", profile="seed002")
    assert tb.call("read_notepad", {}) == {"ok": True, "content": ""}
    assert "## Session Notepad" in tb.context_block() and "write_notepad" in tb.context_block()   # empty-state hint
    assert tb.call("write_notepad", {"content": "## Plan\n- [ ] survey"})["ok"]
    assert tb.call("update_notepad", {"operation": "append", "content": "- [ ] fix"})["ok"]
    assert tb.call("read_notepad", {})["content"] == "## Plan\n- [ ] survey\n- [ ] fix"
    assert tb.call("update_notepad", {"operation": "find_replace", "find": "[ ] survey", "replace": "[x] survey"})["ok"]
    assert tb.call("update_notepad", {"operation": "prepend", "content": "# Task"})["ok"]
    assert tb.call("read_notepad", {})["content"] == "# Task\n## Plan\n- [x] survey\n- [ ] fix"
    assert tb.call("update_notepad", {"operation": "delete", "content": "- [ ] fix"})["ok"]
    assert tb.call("read_notepad", {})["content"] == "# Task\n## Plan\n- [x] survey\n"
    assert tb.context_block() == "## Session Notepad\n# Task\n## Plan\n- [x] survey\n"
    absent = tb.call("update_notepad", {"operation": "find_replace", "find": "nowhere", "replace": "x"})
    assert absent["ok"] is False and absent["error"]
    for bad, word in (({"operation": "find_replace", "find": "a"}, "replace"), ({"operation": "append"}, "content"),
                      ({"operation": "rename", "content": "x"}, "find_replace"), ({}, "operation")):
        r = tb.call("update_notepad", bad)
        assert r["ok"] is False and word in r["error"], (bad, r)
    assert tb.call("write_notepad", {"content": ""})["ok"] and tb.call("read_notepad", {})["content"] == ""
    other = Toolbox(store, session="other", profile="seed002")
    tb.call("write_notepad", {"content": "mine"})
    assert other.call("read_notepad", {})["content"] == ""


@pytest.mark.parametrize("profile", ["seed002", "seed001+seed002"])
def test_a_toolbox_moved_to_another_session_uses_that_sessions_notepad(store, profile):
    tb = Toolbox(store, session="alice", profile=profile, scope="session")
    assert tb.call("write_notepad", {"content": "alice's notes"})["ok"]
    store.put("bob's log\n", session="bob", turn=1)
    tb.session = "bob"
    assert tb.session == "bob" and tb.notepad.session == "bob"
    assert tb.call("read_notepad", {})["content"] == ""
    assert tb.call("write_notepad", {"content": "bob's notes"})["ok"]
    assert store.notepad("alice").read() == "alice's notes" and store.notepad("bob").read() == "bob's notes"
    assert [e.session for e in tb.entries()] == ["bob"]
    for bad in (12345, None, "x" * 241):
        with pytest.raises(blobpad.InvalidArgument, match="session"):
            tb.session = bad
    assert tb.session == "bob" and tb.call("read_notepad", {})["content"] == "bob's notes"


def test_seed002_long_notepad_reads_in_pieces(store):
    tb = Toolbox(store, session="s", profile="seed002", max_result_chars=5000)
    text = _log(30_000, seed=30)
    assert tb.call("write_notepad", {"content": text})["ok"]
    got, args = "", {}
    while True:
        r = tb.call("read_notepad", args)
        assert r["ok"] and result_size(r) <= 5000
        got += r["content"]
        if not r.get("truncated"):
            break
        args = r["next"]
    assert got == text


def test_seed004_scratchpad_budget(store):
    tb = Toolbox(store, session="s", profile="seed004")
    pad = tb.notepad
    r = tb.call("session_scratchpad", {"content": "## Plan\n1. Fix X"})
    assert r["ok"] and pad.scratchpad_content() == "## Plan\n1. Fix X"
    assert tb.call("session_scratchpad", {"content": "2. Test Y", "mode": "append"})["ok"]
    assert "1. Fix X" in pad.scratchpad_content() and pad.scratchpad_content().endswith("2. Test Y")
    block = tb.context_block()
    assert block == pad.scratchpad_block() and "2. Test Y" in block and block.endswith("[End Scratchpad]")
    before = pad.scratchpad_content()
    over = tb.call("session_scratchpad", {"content": "word " * 5000, "mode": "append"})
    assert over["ok"] is False and over["error"] and pad.scratchpad_content() == before
    big = tb.call("session_scratchpad", {"content": "word " * 5000})
    assert big["ok"] and big.get("warning") and len(pad.scratchpad_content()) < 25_000
    bad = tb.call("session_scratchpad", {"content": "x", "mode": "merge"})
    assert bad["ok"] is False and "replace, append" in bad["error"]


def test_profiles_combine_with_plus(store):
    tb = Toolbox(store, session="s", turn=1, profile="blobpad+seed002")
    assert tb.scope == "turn"
    assert tb.tool_names() == ["scratchpad_read", "scratchpad_list", "read_notepad", "write_notepad", "update_notepad"]
    tb = Toolbox(store, session="s", turn=1, profile="seed000+seed002")
    assert tb.tool_names() == ["read_notepad", "write_notepad", "update_notepad"]
    Offloader(store).offload({"content": "z" * 5000}, session="s", turn=1)
    assert tb.tool_names() == ["scratchpad_read", "read_notepad", "write_notepad", "update_notepad"]
    with pytest.raises(blobpad.InvalidArgument, match="session_scratchpad"):
        Toolbox(store, session="s", profile="seed001+seed004")
    with pytest.raises(blobpad.InvalidArgument, match="unknown profile 'nope'"):
        Toolbox(store, session="s", turn=1, profile="blobpad+nope")


def _join(first: str, second: str) -> str:
    return f"{first}\n{second}" if first and second and not first.endswith("\n") and not second.startswith("\n") \
        else first + second


def _model_view(model: dict, parts: list[str]) -> str:
    """The oracle of a combined profile's read_notepad: the notepad text, then the other profile's non-empty spaces."""
    sections = [model["notepad"]]
    if "seed001" in parts:
        sections += [f"## Notes\n{model['notes']}" if model["notes"] else "",
                     f"## Plan\n{model['plan']}" if model["plan"] else "",
                     "## Refs\n" + "\n".join(f"- {r}" for r in model["refs"]) if model["refs"] else ""]
    if "seed004" in parts:
        sections.append(f"## Scratchpad\n{model['scratchpad']}" if model["scratchpad"] else "")
    shown = [x for x in sections if x]
    return "\n\n".join([x.rstrip("\n") for x in shown[:-1]] + shown[-1:])


@pytest.mark.parametrize("profile", ["seed001+seed002", "seed002+seed004", "blobpad+seed002+seed001"])
def test_a_combined_profile_shows_one_notepad_per_session(store, profile):
    parts = profile.split("+")
    tb = Toolbox(store, session="s", turn=1, profile=profile)
    assert tb.combined_notepad
    assert tb.call("read_notepad", {}) == {"ok": True, "content": ""}  # empty until something is written
    assert tb.context_block() == f"{NOTEPAD_HEADING}\n{EMPTY_NOTEPAD_HINT}"
    # the issue's case: notes and a plan written with session_scratchpad are in read_notepad
    if "seed001" in parts:
        tb.call("session_scratchpad", {"action": "set_notes", "content": "Root cause: timezone mismatch"})
        tb.call("session_scratchpad", {"action": "set_plan", "content": "1. Fix auth bug\n2. Add test"})
        assert tb.call("read_notepad", {})["content"] == ("## Notes\nRoot cause: timezone mismatch\n\n"
                                                           "## Plan\n1. Fix auth bug\n2. Add test")
    model = {"notepad": "", "notes": "", "plan": "", "refs": [], "scratchpad": ""}
    if "seed001" in parts:
        model.update(notes="Root cause: timezone mismatch", plan="1. Fix auth bug\n2. Add test")
    rnd = random.Random(profile)
    words = ["alpha", "beta\n", "- [ ] gamma", "\n", "delta", "é🙂", "## h"]
    for _ in range(150):
        w = rnd.choice(words)
        op = rnd.choice(["write", "append", "prepend", "find_replace", "delete", "own_set", "own_append", "refs"])
        if op == "write":
            tb.call("write_notepad", {"content": w})
            model["notepad"] = w
        elif op in ("append", "prepend"):
            tb.call("update_notepad", {"operation": op, "content": w})
            model["notepad"] = _join(model["notepad"], w) if op == "append" else _join(w, model["notepad"])
        elif op in ("find_replace", "delete") and w in model["notepad"]:
            new = rnd.choice(words)
            args = {"operation": op, "find": w, "replace": new} if op == "find_replace" else {"operation": op,
                                                                                            "content": w}
            assert tb.call("update_notepad", args)["ok"] is True
            model["notepad"] = model["notepad"].replace(w, new if op == "find_replace" else "", 1)
        elif op in ("own_set", "own_append") and "seed001" in parts:
            space = rnd.choice(["notes", "plan"])
            action = "append_notes" if op == "own_append" and space == "notes" else f"set_{space}"
            tb.call("session_scratchpad", {"action": action, "content": w})
            model[space] = model[space] + w if action == "append_notes" else w  # seed 001: end to end
        elif op in ("own_set", "own_append"):
            mode = "append" if op == "own_append" else "replace"
            tb.call("session_scratchpad", {"content": w, "mode": mode})
            model["scratchpad"] = model["scratchpad"] + w if mode == "append" else w  # seed 004: end to end
        elif op == "refs" and "seed001" in parts:
            ref = rnd.choice(["src/a.py", "https://e.x/1", "PR-42"])
            if ref in model["refs"]:
                tb.call("session_scratchpad", {"action": "refs.remove", "ref": ref})
                model["refs"].remove(ref)
            else:
                tb.call("session_scratchpad", {"action": "refs.add", "ref": ref})
                model["refs"].append(ref)
        view = _model_view(model, parts)
        assert tb.call("read_notepad", {})["content"] == view
        assert tb.context_block() == f"{NOTEPAD_HEADING}\n{view or EMPTY_NOTEPAD_HINT}"  # one block, the same view
    assert _model_view(model, parts).count("## ") >= 2  # the run mixed the text and the other profile's spaces
    # one notepad per session: another toolbox of the session sees it, another session does not
    assert Toolbox(store, session="s", turn=2, profile=profile).call("read_notepad", {})["content"] == _model_view(model, parts)
    assert Toolbox(store, session="other", turn=1, profile=profile).call("read_notepad", {})["content"] == ""
    # text kept by the other tool is not edited by update_notepad: the answer says which tool changes it
    tb.call("write_notepad", {"content": "plain text"})
    own = {"action": "set_notes", "content": "Root cause here"} if "seed001" in parts else {"content": "Root cause here"}
    assert tb.call("session_scratchpad", own)["ok"] is True
    r = tb.call("update_notepad", {"operation": "find_replace", "find": "Root", "replace": "x"})
    assert r["ok"] is False and "session_scratchpad" in r["error"]
    assert tb.call("update_notepad", {"operation": "delete", "content": "plain "})["ok"] is True
    assert tb.call("read_notepad", {})["content"].startswith("text\n\n## ")
    described = {t["name"]: t["description"] for t in tb.schemas("openai-responses")}
    assert all("session_scratchpad" in described[n] for n in ("read_notepad", "write_notepad", "update_notepad"))


def test_single_notepad_profiles_keep_their_seeds_behaviour(store):
    both = Toolbox(store, session="s", profile="seed001+seed002")
    both.call("session_scratchpad", {"action": "set_notes", "content": "found it"})
    both.call("write_notepad", {"content": "my notes"})
    alone = Toolbox(store, session="s", profile="seed002")  # seed 002: the notepad is its text column
    assert not alone.combined_notepad
    assert alone.call("read_notepad", {})["content"] == "my notes"
    assert alone.context_block() == f"{NOTEPAD_HEADING}\nmy notes"
    seed001 = Toolbox(store, session="s", profile="seed001")  # seed 001: its spaces, prepended as they are
    assert seed001.context_block() == store.notepad("s").render_spaces() and "found it" in seed001.context_block()
    described = {t["name"]: t["description"] for t in alone.schemas("openai-responses")}
    assert "session_scratchpad" not in described["read_notepad"]


@pytest.mark.parametrize(
    "content",
    ["abcdefghij" * 5000, "ab\n" * 20_000, '"\\' * 20_000, "\x01" * 40_000, "😀\t" * 20_000],
    ids=["plain", "newlines", "quotes-backslashes", "control", "emoji-tabs"],
)
def test_capped_reads_fill_the_cap_and_page_through_exactly(store, content):
    """Content that escapes to several JSON characters per character is cut in proportion:
    each page stays under the cap yet holds at least 80% of what fits, and following
    ``next`` reproduces the entry exactly."""
    tb = Toolbox(store, session="s", profile="seed003")
    assert tb.call("scratchpad_write", {"name": "e", "content": content})["ok"]
    cap = tb.max_result_chars
    pages, args = [], {"name": "e"}
    while True:
        r = tb.call("scratchpad_read", args)
        assert r["ok"] and result_size(r) <= cap, (r.get("error"), result_size(r))
        pages.append(r["content"])
        end = r["offset"] + len(r["content"])
        assert ("next" in r) == (end < r["offset"] + 30_000 and end < len(content))  # a cut says how to read on
        if end >= r["total_characters"]:
            break
        args = {"name": "e", "offset": end}
        assert len(pages) < 200
    assert "".join(pages) == content
    fits = (cap - 1000) / (len(json.dumps(content[:1000], ensure_ascii=False)) - 2) * 1000  # characters per page
    assert all(len(p) >= 0.8 * min(fits, 30_000) for p in pages[:-1]), [len(p) for p in pages]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_deeply_nested_arguments_are_a_clear_error_not_an_internal_one(store, profile, caplog):
    tb = Toolbox(store, session="s", turn=1, profile=profile)
    deep: object = {}
    for _ in range(100_000):
        deep = {"x": deep}
    for name in tb.tools:
        for args in ("[" * 100_000, '{"a":' * 100_000, {"scratchpad_id": deep, "content": deep, "name": deep}):
            r = tb.call(name, args)
            assert r["ok"] is False and "internal error" not in r["error"], (name, r["error"][:200])
            assert len(r["error"]) < 1000
    assert not [rec for rec in caplog.records if rec.levelname == "ERROR"]


def test_an_argument_the_mode_does_not_use_is_an_error_not_ignored(store):
    """A model that writes start/end with mode lines would otherwise read lines 1-100
    and believe it read lines 4-5."""
    text = "".join(f"line {i}\n" for i in range(1, 9000))
    tb = Toolbox(store, session="s", turn=1)
    eid = Offloader(store).offload(text, session="s", turn=1)["scratchpad_id"]
    for args, wrong, mode_takes in (
        ({"mode": "lines", "start": 4, "end": 5}, "start", "column, end_line, start_line"),
        ({"mode": "head", "pattern": "line 7"}, "pattern", "n"),
        ({"mode": "grep", "pattern": "line 7", "n": 5}, "n", "context"),
        ({"mode": "range", "start": 0, "start_line": 3}, "start_line", "end, start"),
        ({"mode": "count", "pattern": "x", "max_matches": 5}, "max_matches", "fixed_strings"),
        ({"mode": "tail", "skip": 3}, "skip", "n"),
    ):
        r = tb.call("scratchpad_read", {"scratchpad_id": eid, **args})
        assert r["ok"] is False and f"{wrong} is not used by mode {args['mode']!r}" in r["error"], r
        assert mode_takes in r["error"]
    # the same arguments with the mode that uses them work, and defaults restated are fine
    r = tb.call("scratchpad_read", {"scratchpad_id": eid, "mode": "lines", "start_line": 4, "end_line": 5, "n": 2000})
    assert r["ok"] and r["content"] == "4\tline 4\n5\tline 5"


def test_add_tool_adds_a_tool_of_ones_own_and_refuses_a_taken_name(store):
    tb = Toolbox(store, session="s", turn=1, always_show=True)
    before = set(tb.tools)
    tb.add_tool(ToolSpec("echo", "says it back", (), lambda tb, a, budget: {"ok": True, "said": "hi"}))
    assert set(tb.tools) == before | {"echo"} and "echo" in tb.tool_names()
    assert tb.call("echo", {}) == {"ok": True, "said": "hi"}
    assert any(s["name"] == "echo" for s in tb.schemas("anthropic"))
    with pytest.raises(blobpad.InvalidArgument, match="already has a tool named 'echo'"):
        tb.add_tool(ToolSpec("echo", "again", (), lambda tb, a, budget: {"ok": True}))
    with pytest.raises(blobpad.InvalidArgument, match="ToolSpec"):
        tb.add_tool({"name": "x"})  # type: ignore[arg-type]
    tb.tools.pop("echo")  # a copy: the toolbox keeps it
    assert "echo" in tb.tools


# -- grep pages: labels, context, read-ons --------------------------------------------------------


def _grep_pages(tb, eid: str, **args) -> list[dict]:
    """Every page of a grep, following ``next`` (at most 200 pages)."""
    pages, call = [], {"scratchpad_id": eid, "mode": "grep", **args}
    for _ in range(200):
        page = _read(tb, **call)
        assert page["ok"], page
        pages.append(page)
        if "next" not in page:
            return pages
        call = page["next"]
    raise AssertionError("more than 200 pages")


@pytest.mark.parametrize("seed", range(6))
def test_grep_pages_label_every_line_truly_and_show_each_match_once(store, seed):
    """A line shown as context (``N-``) never matches, a line shown as ``N:`` always does,
    across page boundaries too (a context reached into another page's matches and showed
    them as not matching), and following ``next`` shows every match exactly once."""
    rng = random.Random(seed)
    lines = [rng.choice(["ERROR disk", "ok", "ok fine", "ERROR net"]) + f" {i}" for i in range(1, 61)]
    tb, e = _toolbox(store, "\n".join(lines) + "\n")
    matches = [n for n, line in enumerate(lines, 1) if "ERROR" in line]
    for context in (1, 2, 3):
        for limit in (1, 2, 3, 5):
            seen = []
            for page in _grep_pages(tb, e.id, pattern="ERROR", context=context, max_matches=limit):
                for row in page["content"].split("\n"):
                    if row == "--" or not row:
                        continue
                    m = re.match(r"(\d+)([:-])", row)
                    assert m, row
                    number, label = int(m.group(1)), m.group(2)
                    assert (label == ":") == ("ERROR" in lines[number - 1]), (context, limit, row)
                    if label == ":":
                        seen.append(number)
            assert seen == matches, (context, limit)


def test_the_context_of_a_match_too_large_to_show_whole_is_cut_and_says_so(store):
    """Lines of 3,000 characters around a match with context 5 do not fit the default cap:
    the nearest context lines are shown, and the ones left out are named, with the
    arguments that read them (they were dropped silently)."""
    lines = [f"ctx{i} " + "y" * 3000 for i in range(1, 21)]
    lines[10] = "ERROR here"
    tb, e = _toolbox(store, "\n".join(lines) + "\n")
    page = _read(tb, scratchpad_id=e.id, mode="grep", pattern="ERROR", context=5)
    shown = {int(m.group(1)) for m in re.finditer(r"^(\d+)-", page["content"], re.M)}
    left = re.findall(r"\[\.\.\. context lines (\d+)-(\d+) not shown: the output is capped; read them with (.*)\]$",
                      page["content"], re.M)
    missing = {n for a, b, _ in left for n in range(int(a), int(b) + 1)}
    assert "11:ERROR here" in page["content"] and shown and left
    assert shown | missing == set(range(6, 11)) | set(range(12, 17)) and not shown & missing
    for _, _, how in left:  # the arguments given read those lines
        args = dict(re.findall(r'(\w+)=("[^"]*"|\d+)', how))
        got = _read(tb, **{k: json.loads(v) for k, v in args.items()})
        first, last = int(args["start_line"]), int(args["end_line"])
        assert got["ok"] and got["start_line"] == first and str(first) in got["content"]
        assert len(json.dumps(got)) <= tb.max_result_chars and last >= first


@pytest.mark.parametrize("limit", [5, 150])
def test_a_long_pattern_never_reads_on_with_another(store, limit):
    """At the smallest cap a 1,655-character pattern cannot appear three times: ``next``
    is never cut (it ran another pattern and found nothing); it is dropped, and the notice
    says how to read on."""
    pattern = "|".join(f"nomatch{i:03d}" for i in range(150)) + "|ERROR"
    tb, e = _toolbox(store, "".join(f"{i} ERROR x\n" for i in range(500)), max_result_chars=2000)
    page = _read(tb, scratchpad_id=e.id, mode="grep", pattern=pattern, max_matches=limit)
    assert page["ok"] and page["total_matches"] == 500 and len(json.dumps(page)) <= 2000
    if "next" in page:
        assert page["next"]["pattern"] == pattern
    else:
        skip = int(re.search(r"skip=(\d+)", page["notice"]).group(1))
        assert "same pattern" in page["notice"] and skip == page["shown_matches"] > 0
        follow = _read(tb, scratchpad_id=e.id, mode="grep", pattern=pattern, max_matches=limit, skip=skip)
        assert follow["ok"] and follow["content"].startswith(f"{skip + 1}:{skip} ERROR x")


def test_a_matching_line_shows_its_match_whatever_the_escaping(store):
    """Control characters take six JSON characters each: the budget shrinks, the part of
    the line shown is cut shorter, and it must still hold the match."""
    line = "\x01" * 30_000 + "ERROR" + "\x01" * 30_000
    tb, e = _toolbox(store, line + "\n", max_result_chars=2000)
    page = _read(tb, scratchpad_id=e.id, mode="grep", pattern="ERROR")
    assert page["ok"] and len(json.dumps(page)) <= 2000
    assert "ERROR" in page["content"].split("\n")[0]


def test_a_turn_scoped_seed003_toolbox_neither_sees_nor_replaces_another_turns_named_entry(store):
    """Names are the session's; a turn-scoped toolbox told a read and a delete of another turn's
    "plan" that it does not exist, then replaced it on a write ("overwritten": true), destroying
    an entry it could not see.  The write is now refused, saying why; the toolbox's own names and
    a session-scoped toolbox write as before, and the other turn's entry is intact."""
    first = Toolbox(store, session="s", turn=1, profile="seed003", scope="turn")
    second = Toolbox(store, session="s", turn=2, profile="seed003", scope="turn")
    assert first.call("scratchpad_write", {"name": "plan", "content": "turn one's plan"})["ok"]
    hidden = second.call("scratchpad_read", {"name": "plan"})
    assert not hidden["ok"] and "in this turn" in hidden["error"]
    refused = second.call("scratchpad_write", {"name": "plan", "content": "turn two's"})
    assert not refused["ok"] and "taken by an entry of another turn" in refused["error"], refused
    assert first.call("scratchpad_read", {"name": "plan"})["content"] == "turn one's plan"
    own = [second.call("scratchpad_write", {"name": "mine", "content": text}) for text in ("a", "b")]
    assert [r["overwritten"] for r in own] == [False, True]
    assert second.call("scratchpad_read", {"name": "mine"})["content"] == "b"
    wide = Toolbox(store, session="s", turn=3, profile="seed003", scope="session")
    assert wide.call("scratchpad_write", {"name": "plan", "content": "everyone's"})["overwritten"] is True
    assert store.get(store.find("plan", session="s").id) == "everyone's"


@pytest.mark.parametrize("profile", list(PROFILES))
def test_a_result_is_always_utf8_even_for_a_tool_name_holding_a_lone_surrogate(store, profile):
    """A model's JSON escape (\\ud800) gives a tool name with a lone surrogate: the unknown-tool answer
    echoed it, and the result could not be sent as UTF-8 at all.  The name is shown escaped."""
    tb = Toolbox(store, session="s", turn=1, profile=profile)
    for name in ("\ud800", "scratch\udfffpad_read", "x" * 300 + "\ud800"):
        out = tb.call(name, {})
        assert out["ok"] is False and "unknown tool" in out["error"]
        json.dumps(out, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
        assert out["tool"].startswith(name[:5].encode("utf-8", "backslashreplace").decode()[:5])
