"""blobpad in the OpenAI Agents SDK: strict tool schemas, the offloading input filter, and an agent run.

The oracles: the SDK's own strict-schema helper and tool serializers (the schemas must come out
of them unchanged), the SDK's scripted model driving a real ``Runner`` run (no network, no key),
and Python's slicing and ``re`` over the original log for what the model reads back.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import re
import subprocess
import sys

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.models.chatcmpl_converter import Converter as ChatConverter  # noqa: E402
from agents.models.openai_responses import Converter as ResponsesConverter  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402
from agents.strict_schema import ensure_strict_json_schema  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402
from oracles import readme_snippet  # noqa: E402

import blobpad  # noqa: E402
from blobpad import PROFILES, Offloader, Toolbox, sample  # noqa: E402
from blobpad.integrations.openai_agents import OffloadFilter, function_tools  # noqa: E402


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch):
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no export attempt, no key needed


def test_blobpad_imports_without_agents():
    code = ("import sys, blobpad, blobpad.integrations; blobpad.Toolbox; blobpad.Offloader; "
            "print('agents' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- strict schemas: the SDK's helper and serializers are the oracle -------------------------------


@pytest.mark.parametrize("profile", list(PROFILES) + ["blobpad+seed002", "seed003+seed001", "seed000+seed004"])
def test_strict_schemas_are_what_the_sdk_sends(store, tmp_path, profile):
    tb = Toolbox(store, session="s", turn=1, profile=profile, always_show=True, allow_dirs=[tmp_path])
    chat = tb.schemas("openai", strict=True)
    responses = tb.schemas("openai-responses", strict=True)
    tools = function_tools(tb)
    assert [t.name for t in tools] == tb.tool_names() == [c["function"]["name"] for c in chat]
    for tool, c, r in zip(tools, chat, responses, strict=True):
        params = c["function"]["parameters"]
        assert ensure_strict_json_schema(copy.deepcopy(params)) == params   # strict already: unchanged
        assert r["parameters"] == params and r["strict"] is True and c["function"]["strict"] is True
        # the SDK keeps the schema as given and serializes the tool exactly as the Toolbox does
        assert tool.strict_json_schema is True and tool.params_json_schema == params
        assert ChatConverter.tool_to_openai(tool) == c
        (sent,) = ResponsesConverter.convert_tools([tool], []).tools
        assert sent == r
        # what a strict-mode model sends, every argument with null for those it leaves out, is taken
        args = {p.name: (p.enum[0] if p.enum else "x" if p.type == "string" else 1 if p.type == "integer"
                         else True if p.type == "boolean" else ["x"]) if p.required else None
                for p in tb.tools[tool.name].params}
        assert tb.tools[tool.name].validate(args) == tb.tools[tool.name].validate(
            {k: v for k, v in args.items() if v is not None})


def test_function_tools_follow_the_toolboxs_listing_rule(store):
    blob = Toolbox(store, session="s", turn=1)
    seed0 = Toolbox(store, session="s", turn=1, profile="seed000")
    agent = Agent(name="a", tools=[*function_tools(blob), *function_tools(seed0, strict=False)])

    def enabled():
        return [t.name for t in asyncio.run(agent.get_all_tools(agents.RunContextWrapper(None)))]

    assert enabled() == ["scratchpad_read", "scratchpad_list"]          # blobpad's: from the start
    Offloader(store).offload("x" * 5000, session="s", turn=1)
    assert enabled() == ["scratchpad_read", "scratchpad_list", "scratchpad_read"]   # seed 000's: now
    loose = function_tools(seed0, strict=False)[0]
    assert loose.strict_json_schema is False and loose.params_json_schema == seed0.tools[
        "scratchpad_read"].input_schema()
    with pytest.raises(blobpad.InvalidArgument, match="Toolbox"):
        function_tools(store)


# -- the filter ----------------------------------------------------------------------------------------


def _call(call_id: str, name: str) -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}", "id": call_id}


def _output(call_id: str, output) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _data(items: list, instructions: str | None = "be brief") -> CallModelData:
    return CallModelData(model_data=ModelInputData(input=items, instructions=instructions),
                         agent=Agent(name="a"), context=None)


def _run(flt: OffloadFilter, items: list) -> ModelInputData:
    return asyncio.run(flt(_data(items)))


def test_small_outputs_and_other_items_are_left_as_they_are(store):
    tb = Toolbox(store, session="s", scope="session")
    items = [{"role": "user", "content": "hi " * 3000}, _call("1", "shell"), _output("1", "short output"),
             _call("2", "shell"), _output("2", [{"type": "input_text", "text": "y" * 100}]),
             {"role": "assistant", "content": "z" * 9000}]
    before = copy.deepcopy(items)
    out = _run(OffloadFilter(tb), items)
    assert out.instructions == "be brief"
    assert all(a is b for a, b in zip(out.input, items, strict=True)) and items == before
    assert store.entries() == []


def test_a_large_output_is_offloaded_once_and_reads_back(store):
    tb = Toolbox(store, session="s", scope="session")
    log = sample.log_text(200_000, seed=3)
    items = [_call("c1", "shell"), _output("c1", log)]
    before = copy.deepcopy(items)
    flt = OffloadFilter(tb)
    out = _run(flt, items)
    assert items == before                                           # the run's own items are not changed
    seen = json.loads(out.input[1]["output"])
    assert set(seen) == {"ok", "scratchpad_id", "size_bytes", "kind", "summary", "metadata", "_note"}
    assert seen["summary"] == blobpad.offload.text_summary(log) and seen["_note"] == blobpad.offload.SEED000_NOTE
    assert len(out.input[1]["output"]) < 2000
    (entry,) = store.entries()
    assert (entry.id, entry.session, entry.tool) == (seen["scratchpad_id"], "s", "shell")
    assert store.get(entry.id) == log
    # idempotent: the same input again, and the filtered input itself, give the same and put nothing
    again = _run(flt, items)
    assert again.input == out.input and len(store.entries()) == 1
    assert _run(flt, out.input).input == out.input and len(store.entries()) == 1
    # a new filter (a new process) offloads it again; an expired or deleted entry is put again
    store.delete(entry.id)
    fresh = json.loads(_run(flt, items).input[1]["output"])
    assert fresh["scratchpad_id"] != entry.id and store.get(fresh["scratchpad_id"]) == log
    # the model reads it with the toolbox
    read = tb.call("scratchpad_read", {"scratchpad_id": fresh["scratchpad_id"], "mode": "lines", "start_line": 5,
                                       "end_line": 7})
    assert read["content"] == "\n".join(f"{n}\t{line}" for n, line in enumerate(log.splitlines()[4:7], 5))


def test_a_json_object_output_keeps_its_small_fields_and_stores_its_content_as_text(store):
    tb = Toolbox(store, session="s", scope="session")
    log = sample.log_text(50_000, seed=4)
    items = [_call("c1", "shell"), _output("c1", json.dumps({"stdout": log, "exit_code": 2}))]
    seen = json.loads(_run(OffloadFilter(tb), items).input[1]["output"])
    assert seen["metadata"] == {"exit_code": 2}
    assert store.get(seen["scratchpad_id"]) == log                  # lines of the log, not one JSON line
    assert tb.call("scratchpad_read", {"scratchpad_id": seen["scratchpad_id"], "mode": "count",
                                       "pattern": "ERROR"})["count"] == sum("ERROR" in x for x in log.splitlines())


def test_structured_outputs_offload_each_large_text_part(store):
    tb = Toolbox(store, session="s", scope="session")
    big = sample.log_text(30_000, seed=5)
    image = {"type": "input_image", "image_url": "data:image/png;base64," + "A" * 8000}
    parts = [{"type": "input_text", "text": "caption"}, {"type": "input_text", "text": big}, image]
    items = [_call("c1", "browser"), _output("c1", parts)]
    out = _run(OffloadFilter(tb), items)
    shown = out.input[1]["output"]
    assert shown[0] is parts[0] and shown[2] is parts[2] and parts[1]["text"] == big
    seen = json.loads(shown[1]["text"])
    assert shown[1]["type"] == "input_text" and store.get(seen["scratchpad_id"]) == big
    assert len(store.entries()) == 1


def test_the_toolboxs_own_outputs_and_tools_not_chosen_are_not_offloaded(store):
    tb = Toolbox(store, session="s", scope="session")
    big = "x" * 50_000
    items = [_call("1", "scratchpad_read"), _output("1", big), _call("2", "web"), _output("2", big),
             _call("3", "shell"), _output("3", big)]
    out = _run(OffloadFilter(tb, tools=["shell"]), items)
    assert out.input[1] is items[1] and out.input[3] is items[3]
    assert json.loads(out.input[5]["output"])["scratchpad_id"]
    # a tool call no longer in the input (kept on the server: its name is unknown): offloaded,
    # tools= or not (left whole, it would fill the conversation)
    orphan = [_output("9", big)]
    for flt in (OffloadFilter(tb, tools=["shell"]), OffloadFilter(tb)):
        assert "scratchpad_id" in json.loads(_run(flt, orphan).input[0]["output"])
    with pytest.raises(blobpad.InvalidArgument):
        OffloadFilter(store)
    with pytest.raises(blobpad.InvalidArgument):
        OffloadFilter(tb, offloader="seed000")


def _offloaded(item_output: str) -> str:
    seen = json.loads(item_output)
    assert "scratchpad_id" in seen, seen
    return seen["scratchpad_id"]


@pytest.mark.parametrize("case", ["nan", "infinity", "escaped surrogate", "lone surrogate text"])
def test_outputs_python_writes_but_strict_json_or_utf8_refuse_are_offloaded(store, case):
    """A tool output the store cannot hold as it is (JSON with NaN, as json.dumps writes it; a
    lone surrogate, JSON's "\\ud83d" cut from its emoji or a byte surrogateescape decoded) is
    offloaded all the same, not left with only its head and tail: what is stored is the text
    Python writes, with U+FFFD for each lone surrogate."""
    tb = Toolbox(store, session="s", scope="session")
    rows = [{"price": float("nan") if case == "nan" else float("inf") if case == "infinity" else 1.5,
             "note": "cut \ud83d here" if case == "escaped surrogate" else "fine"} for _ in range(2000)]
    text = ("".join(f"line {i} \udcff\n" for i in range(2000)) if case == "lone surrogate text"
            else json.dumps({"rows": rows, "status": 200}))
    flt = OffloadFilter(tb)
    items = [_call("c1", "fetch"), _output("c1", text)]
    out = _run(flt, items)
    shown = out.input[1]["output"]
    shown.encode("utf-8")                                   # what the model is sent is valid UTF-8
    stored = store.get(_offloaded(shown))
    if case == "lone surrogate text":
        assert stored == text.replace("\udcff", "\ufffd")
    else:
        expected = json.dumps(json.loads(text)["rows"], ensure_ascii=False)  # the largest field, as Python writes it
        assert stored == expected.replace("\ud83d", "\ufffd")
        assert json.loads(shown)["metadata"] == {"status": 200}
    assert _run(flt, items).input[1]["output"] == shown and len(store.entries()) == 1   # once, as any output
    # the Offloader itself, which every integration uses, stores them the same way
    direct = Offloader(store).offload(text, session="t", turn=None)
    assert store.get(direct["scratchpad_id"]) == text.replace("\udcff", "\ufffd").replace("\ud83d", "\ufffd")


def test_each_output_keeps_its_entry_when_two_share_a_call_id(store):
    """One filter shared by two runs, or a provider numbering calls per response: two outputs
    under one call id each keep one entry, and every model call shows each the same id."""
    tb = Toolbox(store, session="s", scope="session")
    flt = OffloadFilter(tb)
    a, b = sample.log_text(30_000, seed=1), sample.log_text(30_000, seed=2)
    runs = [[_call("1", "fetch"), _output("1", a)], [_call("1", "fetch"), _output("1", b)]]
    shown = [[_run(flt, items).input[1]["output"] for items in runs] for _ in range(3)]
    assert shown[0] == shown[1] == shown[2]
    ids = [_offloaded(x) for x in shown[0]]
    assert len(set(ids)) == 2 and [store.get(i) for i in ids] == [a, b] and len(store.entries()) == 2


@pytest.mark.parametrize("text", ["x" * 100_000, "\u4e2d" * 100_000, "\x01" * 100_000, "é\x1f" * 50_000],
                         ids=["ascii", "cjk", "control", "mixed"])
def test_the_filter_leaves_its_own_observations_as_they_are(store, text):
    """Filtering the filtered input (filters chained, or the filter run on its own result) changes
    nothing and puts nothing more, also where the observation is over the threshold itself (a summary of
    CJK or control characters counts more once escaped): it was offloaded again, nested."""
    toolbox = Toolbox(store, session="s", scope="session")
    flt = OffloadFilter(toolbox)
    items = [{"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c", "output": text}]
    once = flt.apply(ModelInputData(input=items, instructions=None))
    assert len(store.entries(session="s")) == 1 and once.input[1]["output"] != text
    twice = flt.apply(ModelInputData(input=once.input, instructions=None))
    assert twice.input == once.input and len(store.entries(session="s")) == 1
    (entry,) = store.entries(session="s")
    assert store.get(entry.id) == text


def test_an_output_is_put_again_where_the_toolbox_can_no_longer_read_it(store):
    """A turn-scoped toolbox (seed 000) reads only the current turn's entries: an output offloaded
    in turn 1 and still in the history at turn 2 is put again in turn 2, so the id the model
    sees is one its tool reads; a session-scoped toolbox keeps the first entry."""
    log = sample.log_text(30_000, seed=8)
    items = [_call("1", "fetch"), _output("1", log)]
    tb = Toolbox(store, session="turns", turn=1, profile="seed000")
    flt = OffloadFilter(tb)
    first = _offloaded(_run(flt, items).input[1]["output"])
    tb.turn = 2
    second = _offloaded(_run(flt, items).input[1]["output"])
    assert second != first and store.get(second) == log
    read = tb.call("scratchpad_read", {"scratchpad_id": second, "mode": "range", "start": 0, "end": 40})
    assert read["ok"] is True and read["content"] == log[:40]
    assert tb.call("scratchpad_read", {"scratchpad_id": first, "mode": "range", "start": 0, "end": 40})["ok"] is False
    assert _offloaded(_run(flt, items).input[1]["output"]) == second
    kept = Toolbox(store, session="whole", turn=1, scope="session")
    flt = OffloadFilter(kept)
    once = _offloaded(_run(flt, items).input[1]["output"])
    kept.turn = 2
    assert _offloaded(_run(flt, items).input[1]["output"]) == once


def test_the_sdks_shell_tool_outputs_are_offloaded(store):
    """The SDK's LocalShellTool answers a ``local_shell_call_output`` (text) and its ShellTool a
    ``shell_call_output`` (each command's stdout and stderr): large ones are offloaded like a
    function's, under the tools' names, ``local_shell`` and ``shell``."""
    tb = Toolbox(store, session="s", scope="session")
    log, err = sample.log_text(30_000, seed=9), sample.log_text(20_000, seed=10)
    local = {"type": "local_shell_call_output", "call_id": "l1", "output": log}
    shell = {"type": "shell_call_output", "call_id": "s1", "status": "completed",
             "output": [{"stdout": log, "stderr": "warning: small", "outcome": {"type": "exit", "exit_code": 0}},
                        {"stdout": "", "stderr": err, "outcome": {"type": "exit", "exit_code": 1}}]}
    before = copy.deepcopy([local, shell])
    out = _run(OffloadFilter(tb), [local, shell]).input
    assert [local, shell] == before
    assert store.get(_offloaded(out[0]["output"])) == log
    (first, second) = out[1]["output"]
    assert store.get(_offloaded(first["stdout"])) == log and first["stderr"] == "warning: small"
    assert second["stdout"] == "" and store.get(_offloaded(second["stderr"])) == err
    assert first["outcome"] == {"type": "exit", "exit_code": 0} and out[1]["status"] == "completed"
    assert sorted(e.tool for e in store.entries()) == ["local_shell", "shell", "shell"]
    only = _run(OffloadFilter(tb, tools=["local_shell"]), [local, shell]).input
    assert "scratchpad_id" in json.loads(only[0]["output"]) and only[1] is shell


def test_the_filter_remembers_its_newest_outputs_only():
    """A long run does not grow the filter without end: it remembers the newest 4,096 outputs it
    offloaded (an older one seen again is put again, a newer one keeps its entry), or every
    output of a conversation holding more: such a conversation given again puts nothing."""
    store = blobpad.open("memory://")
    try:
        tb = Toolbox(store, session="s", scope="session")
        flt = OffloadFilter(tb, offloader=Offloader(store, threshold=10))
        items = [_output(str(i), f"output number {i:05d}") for i in range(4097)]
        first = [item for k in range(0, 4097, 1024) for item in _run(flt, items[k:k + 1024]).input]
        again = _run(flt, [items[0], items[-1]]).input
        assert _offloaded(again[1]["output"]) == _offloaded(first[-1]["output"])
        assert _offloaded(again[0]["output"]) != _offloaded(first[0]["output"])
        assert len(store.entries()) == 4098
        # one conversation of 4,500 outputs, given three times: put once, the same ids each time
        big = [_output(f"b{i}", f"another output {i:05d}") for i in range(4500)]
        shown = [_run(flt, big).input for _ in range(3)]
        assert shown[0] == shown[1] == shown[2] and len(store.entries()) == 4098 + 4500
    finally:
        store.close()


def test_the_same_output_from_several_threads_at_once_is_put_once(store):
    """Threads filtering the same input at once (runs sharing one filter) put each output once
    and all show it with the same id."""
    import threading

    tb = Toolbox(store, session="s", scope="session")
    flt = OffloadFilter(tb)
    log = sample.log_text(40_000, seed=12)
    items = [_call("1", "fetch"), _output("1", log)]
    shown: list[str] = []
    barrier = threading.Barrier(8)

    def run() -> None:
        barrier.wait(timeout=30)
        shown.append(flt.apply(ModelInputData(input=items, instructions=None)).input[1]["output"])

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(shown) == 8 and len(set(shown)) == 1
    (entry,) = store.entries(session="s")
    assert _offloaded(shown[0]) == entry.id and store.get(entry.id) == log


def test_the_offloaders_policy_and_threshold_are_the_filters(store):
    tb = Toolbox(store, session="s", turn=7)
    items = [_call("1", "shell"), _output("1", "a" * 3000)]
    assert _run(OffloadFilter(tb), items).input[1] is items[1]          # 3000 < seed 000's 4096
    out = _run(OffloadFilter(tb, offloader=Offloader(store, threshold=1000, ttl=60)), items)
    (entry,) = store.entries()
    assert json.loads(out.input[1]["output"])["scratchpad_id"] == entry.id
    assert entry.turn == 7 and entry.expires_at is not None and entry.expires_at - entry.created_at == pytest.approx(60)


def test_a_store_that_refuses_still_keeps_the_output_out_of_the_conversation(store_factory):
    small = store_factory(max_bytes=1 << 20)
    tb = Toolbox(small, session="s", scope="session")
    rng = random.Random(6)
    log = "\n".join(rng.randbytes(40).hex() for _ in range(40_000))   # 3.2 MB, 1.6 MB compressed: over the cap
    out = _run(OffloadFilter(tb), [_call("1", "shell"), _output("1", log)])
    seen = json.loads(out.input[1]["output"])
    assert "scratchpad_id" not in seen and "could not be saved" in seen["_note"]
    assert seen["summary"] == blobpad.offload.text_summary(log) and len(out.input[1]["output"]) < 2000


# -- the proof: an agent run with the SDK's scripted model ----------------------------------------------


def _output_of(call, call_id: str) -> str:
    return next(i["output"] for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"
                and i.get("call_id") == call_id)


def test_an_agent_run_offloads_a_large_log_and_reads_it_back_through_the_tools(store):
    log = sample.log_text(1_000_000, seed=11)
    lines = log.splitlines()
    toolbox = Toolbox(store, session="deploy-42", scope="session")
    strict_nulls = {p.name: None for p in toolbox.tools["scratchpad_read"].params if not p.required}

    @function_tool
    def fetch_log() -> str:
        """The deploy's log."""
        return log

    def grep_and_lines(call):
        seen = json.loads(_output_of(call, "c1"))          # the model sees the summary and the id, not the log
        sid = seen["scratchpad_id"]
        return [function_call("scratchpad_read", {**strict_nulls, "scratchpad_id": sid, "mode": "grep",
                                                  "pattern": r"ERROR \[(db|http)\.\w+\]", "max_matches": 50},
                              call_id="c2"),
                function_call("scratchpad_read", {**strict_nulls, "scratchpad_id": sid, "mode": "lines",
                                                  "start_line": 1000, "end_line": 1040}, call_id="c3")]

    def count_last(call):
        sid = json.loads(_output_of(call, "c1"))["scratchpad_id"]
        return [function_call("scratchpad_read", {**strict_nulls, "scratchpad_id": sid, "mode": "count",
                                                  "pattern": "WARN"}, call_id="c4"),
                function_call("scratchpad_read", {**strict_nulls, "scratchpad_id": sid, "mode": "lines",
                                                  "start_line": -3, "end_line": -1}, call_id="c5")]

    model = ScriptedModel([[function_call("fetch_log", {}, call_id="c1")], ModelStep.respond(grep_and_lines),
                           ModelStep.respond(count_last), [assistant_message("the database pool ran dry")]])
    agent = Agent(name="ops", model=model, tools=[fetch_log, *function_tools(toolbox)])
    result = Runner.run_sync(agent, "Why did the deploy fail?",
                             run_config=RunConfig(call_model_input_filter=OffloadFilter(toolbox)))
    assert result.final_output == "the database pool ran dry"
    model.assert_complete()

    # every model call saw the summary and the id, never the log; the log went into the store once
    (entry,) = store.entries(session="deploy-42")
    assert store.get(entry.id) == log and entry.tool == "fetch_log"
    for call in model.calls[1:]:
        seen = json.loads(_output_of(call, "c1"))
        assert seen["scratchpad_id"] == entry.id and seen["summary"] == blobpad.offload.text_summary(log)
        assert max(len(json.dumps(i, default=str)) for i in call.input) < 25_000
    # the run's own history keeps the whole output
    assert any(getattr(item, "output", None) == log for item in result.new_items)

    final = model.calls[-1]
    grep = json.loads(_output_of(final, "c2"))
    hits = [(n, line) for n, line in enumerate(lines, 1) if re.search(r"ERROR \[(db|http)\.\w+\]", line)]
    assert grep["ok"] and grep["total_matches"] == len(hits) > 50
    assert grep["content"] == "\n".join(f"{n}:{line}" for n, line in hits[:50])
    window = json.loads(_output_of(final, "c3"))
    assert window["content"] == "\n".join(f"{n}\t{line}" for n, line in enumerate(lines[999:1040], 1000))
    assert json.loads(_output_of(final, "c4"))["count"] == sum("WARN" in line for line in lines)
    tail = json.loads(_output_of(final, "c5"))
    assert tail["content"] == "\n".join(f"{n}\t{line}" for n, line in enumerate(lines[-3:], len(lines) - 2))


@pytest.mark.parametrize("profile", ["blobpad", "seed000"])
@pytest.mark.parametrize("conversation", ["history", "server"])
def test_reads_are_offered_and_never_offloaded_whatever_the_conversation_mode(store, profile, conversation):
    """The model call that first sees a scratchpad_id is offered the tool to read it (the
    SDK picks the tools before the filter puts the entry: seed 000's tool waits for an
    entry), and a large answer of that tool reaches the model as it is, also where the
    conversation is kept on the server and the input holds only the new outputs, without
    the function_call items that name the tool."""
    log = "".join(f"step {i}: ok, all checks passed\n" for i in range(5_000))
    toolbox = Toolbox(store, session=f"run-{profile}-{conversation}", scope="session", profile=profile)
    read = toolbox.tools["scratchpad_read"]
    nulls = {p.name: None for p in read.params if not p.required}
    args = ({"mode": "lines", "start_line": 1, "end_line": 200} if profile == "blobpad"
            else {"mode": "range", "start": 0, "end": 7000})
    offered: list[list[str]] = []

    @function_tool
    def fetch_log() -> str:
        """The deploy's log."""
        return log

    def read_it(call):
        offered.append(sorted(t.name for t in call.tools))
        sid = json.loads(_output_of(call, "c1"))["scratchpad_id"]
        return [function_call("scratchpad_read", {**nulls, "scratchpad_id": sid, **args}, call_id="c2")]

    def answer(call):
        offered.append(sorted(t.name for t in call.tools))
        got = json.loads(_output_of(call, "c2"))
        assert got["ok"] and "scratchpad_id" in got and got.get("summary") is None, got
        assert got["content"].startswith("1\tstep 0: ok" if profile == "blobpad" else "step 0: ok"), got["content"][:80]
        return [assistant_message("read")]

    model = ScriptedModel([[function_call("fetch_log", {}, call_id="c1")], ModelStep.respond(read_it),
                           ModelStep.respond(answer)])
    agent = Agent(name="ops", model=model, tools=[fetch_log, *function_tools(toolbox)])
    kw = {"auto_previous_response_id": True} if conversation == "server" else {}
    result = Runner.run_sync(agent, "Why?", run_config=RunConfig(call_model_input_filter=OffloadFilter(toolbox)), **kw)
    assert result.final_output == "read"
    model.assert_complete()
    assert all("scratchpad_read" in names for names in offered), offered
    (entry,) = store.entries(session=toolbox.session)  # the log, once; the read's answer was not put
    assert store.get(entry.id) == log


def test_a_call_id_the_toolbox_answered_before_does_not_spare_another_tools_output(store):
    """Where the conversation is kept on the server (the input holds the new outputs only), the filter
    knows the toolbox's own answers by their call ids: a call id is no proof on its own (another run, a
    provider numbering calls per response, gives it to another tool), so only the very answer the toolbox
    gave under it is spared. A large output of another tool under a call id a toolbox tool used before is
    offloaded; it reached the model whole."""
    toolbox = Toolbox(store, session="s", scope="session")
    flt = OffloadFilter(toolbox)
    log = "".join(f"step {i}: ok\n" for i in range(50_000))
    seen: dict[str, int] = {}

    @function_tool
    def fetch_log() -> str:
        """The log."""
        return log

    def record(run):
        def respond(call):
            seen[run] = len(_output_of(call, "1"))
            return [assistant_message("ok")]
        return respond

    for run, first in (("a", function_call("scratchpad_list", {"skip": None}, call_id="1")),
                       ("b", function_call("fetch_log", {}, call_id="1"))):
        model = ScriptedModel([[first], ModelStep.respond(record(run))])
        Runner.run_sync(Agent(name=run, model=model, tools=[fetch_log, *function_tools(toolbox)]), "go",
                        run_config=RunConfig(call_model_input_filter=flt), auto_previous_response_id=True)
    assert seen["b"] < 4096 < len(log)  # offloaded: the model saw the observation
    (entry,) = store.entries(session="s")
    assert store.get(entry.id) == log


def test_the_readme_snippet_runs_as_written():
    code = readme_snippet("## OpenAI Agents SDK")
    namespace: dict = {}
    exec(compile(code, "README.md#openai-agents-sdk", "exec"), namespace)
    result, store = namespace["result"], namespace["store"]
    assert result.final_output == "disk full at step 50000"
    (entry,) = store.entries()
    grep = json.loads(_output_of(namespace["model"].calls[-1], "2"))
    assert grep["content"] == "50001:step 50000: ERROR disk full" and entry.kind == "text"
    store.close()
