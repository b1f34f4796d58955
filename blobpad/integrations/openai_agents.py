"""blobpad in the OpenAI Agents SDK (``pip install 'blobpad[openai-agents]'``, SDK 0.24).

Two pieces, both bound to one :class:`~blobpad.tools.Toolbox` (its store, session and turn):

* :func:`function_tools`: the Toolbox's tools as SDK ``FunctionTool`` objects, with
  the schemas of OpenAI's strict mode (:meth:`Toolbox.schemas` with ``strict=True``);
  each call runs :meth:`Toolbox.call` in a worker thread and hands the model its JSON
  answer (a call never raises: a bad one answers ``{"ok": false, "error": ...}``).
* :class:`OffloadFilter`: a ``RunConfig.call_model_input_filter`` that, before each
  model call, puts every tool output over the :class:`~blobpad.Offloader`'s threshold
  into the store and gives the model seed 000's synthetic observation instead (a
  head-and-tail summary, the ``scratchpad_id`` and a note saying how to read it), where
  the SDK's ``ToolOutputTrimmer`` keeps a preview and loses the rest.  The model reads
  the rest with the tools of :func:`function_tools`: lines, grep, count, ranges.

::

    from agents import Agent, RunConfig, Runner
    from blobpad.integrations.openai_agents import OffloadFilter, function_tools

    toolbox = blobpad.Toolbox(store, session="run-1", scope="session")
    agent = Agent(name="ops", tools=[my_tool, *function_tools(toolbox)])
    result = Runner.run_sync(agent, "why did the deploy fail?",
                             run_config=RunConfig(call_model_input_filter=OffloadFilter(toolbox)))

Only the model's copy of the conversation changes: the run's items (``result.new_items``,
a session's history) keep the tool outputs whole, and the filter offloads each of them
once (a later model call gets the same summary and id without another put, as long as
the entry lives; an expired one is put again).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..errors import BlobpadError, InvalidArgument, NotFound, check_bool, typename
from ..offload import Offloader, text_summary, valid_text
from ..tools import Toolbox

try:
    from agents import Agent, FunctionTool, RunContextWrapper
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - the test environment has the SDK
    raise ImportError(
        "blobpad.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'blobpad[openai-agents]' "
        f"(in a checkout of blobpad: pip install '.[openai-agents]'; {exc})"
    ) from exc

__all__ = ["OffloadFilter", "function_tools"]

log = logging.getLogger("blobpad.integrations.openai_agents")

#: per Toolbox, the call ids its function tools answered (the newest ``_ANSWERED_MAX``), each
#: with the digest of every answer given under it and the tool that gave it (a call id alone
#: is no proof: another run, another provider's numbering, may use it for another tool's
#: output), and the Toolboxes an OffloadFilter offloads into
_ANSWERED: weakref.WeakKeyDictionary[Toolbox, OrderedDict[str, dict[bytes, str]]] = weakref.WeakKeyDictionary()
_ANSWERED_MAX = 4096
_FILTERED: weakref.WeakSet[Toolbox] = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()
#: the outputs an OffloadFilter remembers having offloaded (an older one seen again is put again)
_DONE_MAX = 4096
#: the items that call a tool, and the outputs the filter offloads: each with the name of its
#: tool where the kind tells it (shell tools), else None (the name is in the call item)
_CALLS = frozenset({"function_call", "custom_tool_call"})
_OUTPUTS: dict[str, str | None] = {
    "function_call_output": None, "custom_tool_call_output": None,
    "local_shell_call_output": "local_shell", "shell_call_output": "shell",
}


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _answered(toolbox: Toolbox, call_id: str, name: str, answer: str) -> None:
    with _REGISTRY_LOCK:
        calls = _ANSWERED.setdefault(toolbox, OrderedDict())
        answers = calls.pop(call_id, {})
        answers[_digest(answer)] = name
        while len(answers) > 16:  # one call id reused again and again: its oldest answers go
            del answers[next(iter(answers))]
        calls[call_id] = answers
        while len(calls) > _ANSWERED_MAX:
            calls.popitem(last=False)


def _answered_by(toolbox: Toolbox, call_id: str, output: object) -> str | None:
    """The toolbox's tool that gave ``output`` under ``call_id``, or None (another tool's output)."""
    if not isinstance(output, str):
        return None  # the toolbox's tools answer with text
    with _REGISTRY_LOCK:
        calls = _ANSWERED.get(toolbox)
        answers = None if calls is None else calls.get(call_id)
        return None if answers is None else answers.get(_digest(output))


def function_tools(toolbox: Toolbox, *, strict: bool = True) -> list[FunctionTool]:
    """The tools of ``toolbox`` as Agents SDK ``FunctionTool`` objects, to pass to ``Agent(tools=...)``.

    ``strict`` (default True): their parameters are the schemas of OpenAI's strict mode,
    which the SDK sends as they are (every argument required, the optional ones nullable:
    the Toolbox takes null as the default).  A tool is enabled while :meth:`Toolbox.tool_names`
    lists it: the profile ``blobpad`` lists its tools from the start; seed 000's
    ``scratchpad_read`` waits for the scope's first entry, except where an
    :class:`OffloadFilter` offloads into the same toolbox: the SDK chooses a model
    call's tools before its input filter runs, so the call whose input first holds a
    ``scratchpad_id`` would not be offered the tool to read it; every tool is then
    offered from the start.  Each call runs
    :meth:`Toolbox.call` in a worker thread (a grep may take its search budget, 5 s by
    default) and returns its answer as JSON text.
    """
    if not isinstance(toolbox, Toolbox):
        raise InvalidArgument(f"function_tools takes a blobpad.Toolbox, not {typename(toolbox)}")
    check_bool("strict", strict)
    return [_function_tool(toolbox, name, strict) for name in toolbox.tools]


def _function_tool(toolbox: Toolbox, name: str, strict: bool) -> FunctionTool:
    spec = toolbox.tools[name]

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        result = await asyncio.to_thread(toolbox.call, name, arguments)
        answer = json.dumps(result, ensure_ascii=False)
        call_id = getattr(ctx, "tool_call_id", None)
        if isinstance(call_id, str):  # an OffloadFilter knows this answer for the toolbox's own
            _answered(toolbox, call_id, name, answer)  # even when the model's input lacks the call item
        return answer

    def listed(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> bool:
        # the SDK picks the tools before the filter offloads: with a filter on this toolbox,
        # the model call that first sees a scratchpad_id must already be offered the reads
        return toolbox in _FILTERED or name in toolbox.tool_names()

    return FunctionTool(
        name=name,
        description=spec.description,
        params_json_schema=spec.input_schema(strict=strict),
        on_invoke_tool=invoke,
        strict_json_schema=strict,
        is_enabled=listed,
    )


class OffloadFilter:
    """A ``RunConfig.call_model_input_filter`` that offloads large tool outputs into blobpad.

    Before each model call, every tool output (``function_call_output``,
    ``custom_tool_call_output``, and the outputs of the SDK's shell tools,
    ``local_shell_call_output`` and each command's ``stdout`` and ``stderr`` in a
    ``shell_call_output``, whose tools are named ``local_shell`` and ``shell``) over the
    offloader's threshold (seed 000's: 4096 characters of JSON) is put into the store,
    in ``toolbox``'s session and turn, tagged with the tool's name; the model's copy
    holds the synthetic observation instead, as JSON text: ``{"ok", "scratchpad_id",
    "size_bytes", "kind", "summary", "metadata", "_note"}`` (see :class:`blobpad.Offloader`).
    Smaller outputs, and every other item, reach the model as they are (the same objects).

    An output that is a JSON object is offloaded as that object: its ``content`` field
    (or its largest) is stored as text, so the model reads its lines, and the other
    fields stay in ``metadata``.  A structured output (a list of ``input_text``,
    ``input_image``, ``input_file`` parts) has each large text part offloaded on its
    own; the other parts are left as they are.

    Parameters:
        toolbox: the :class:`~blobpad.tools.Toolbox` whose tools the model reads with
            (give them to the agent with :func:`function_tools`); the filter never
            offloads the outputs of its tools, which are capped already: it knows them
            by the ``function_call`` items of the input, or, where the conversation is
            kept on the server (``previous_response_id``, ``conversation_id``) and the
            input holds only the new outputs, by the call ids those tools answered.
        offloader: decides what is large and what the model sees (default: the
            toolbox's, seed 000's policy: over 4096 characters of JSON, entries living
            one hour).
        tools: offload only the outputs of these tools (default: those of every tool).
            An output whose tool cannot be told (its call is kept on the server and
            none of the toolbox's tools answered it) is offloaded all the same: left
            whole, a large one would fill the conversation.

    Each output is offloaded once per filter: later model calls get the same
    observation without another put while its entry lives and the toolbox can read it
    (a turn-scoped toolbox moved on to the next turn cannot: the output is put again in
    the current turn).  Two outputs under one call id (a filter shared by two runs) each
    keep theirs.  The filter remembers the newest 4,096 outputs it offloaded; an older
    one seen again is put again; a conversation of more outputs than that has every one of
    them remembered.  The same output given from several threads at once is put once.
    An output that is a JSON object holding ``NaN`` or
    ``Infinity`` is stored as Python writes it, and lone surrogates (half of a UTF-16
    pair) as U+FFFD (see :class:`blobpad.Offloader`).  If the store refuses an
    output (it is full, say), the model gets the output's first and last 500
    characters and a note saying it could not be saved, never the whole output, and
    the run goes on.
    """

    def __init__(self, toolbox: Toolbox, *, offloader: Offloader | None = None,
                 tools: Iterable[str] | None = None) -> None:
        if not isinstance(toolbox, Toolbox):
            raise InvalidArgument(f"OffloadFilter takes a blobpad.Toolbox, not {typename(toolbox)}")
        if offloader is not None and not isinstance(offloader, Offloader):
            raise InvalidArgument(f"offloader must be a blobpad.Offloader, not {typename(offloader)}")
        if isinstance(tools, str):
            tools = [tools]
        names = None if tools is None else frozenset(tools)
        if names is not None and not all(isinstance(n, str) for n in names):
            raise InvalidArgument("tools must be tool names (strings)")
        self.toolbox = toolbox
        self.offloader = offloader if offloader is not None else toolbox.offloader
        self.tools = names
        # (call id, part, the output's length and hash) -> (entry id, what the model sees); the newest self._limit
        self._done: OrderedDict[tuple[str, str, int, bytes], tuple[str, str]] = OrderedDict()
        self._limit = _DONE_MAX  # outputs remembered: at least _DONE_MAX, and every one of the last input
        # the digests of the observations this filter gave the model: one fed back in (filters chained, the
        # filter run on its own result) stays as it is, though it may be over the threshold (a summary of
        # CJK or control characters, escaped), and is never offloaded in turn
        self._mine: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._gates: dict[tuple[str, str, int, bytes], threading.Lock] = {}  # one put of an output at a time
        with _REGISTRY_LOCK:
            _FILTERED.add(toolbox)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """The SDK's hook: :meth:`apply` to the model's input, in a worker thread (puts block)."""
        return await asyncio.to_thread(self.apply, data.model_data)

    def apply(self, model_data: ModelInputData) -> ModelInputData:
        """The model's input with its large tool outputs offloaded (a new ``ModelInputData``;
        the items given are not changed)."""
        items = model_data.input
        outputs = sum(1 + (len(item["output"]) if isinstance(item.get("output"), list) else 0)
                      for item in items if isinstance(item, dict) and item.get("type") in _OUTPUTS)
        with self._lock:  # a conversation of more outputs than that: remembered all, not put again each call
            self._limit = max(self._limit, 2 * outputs)
        names: dict[str, str] = {}
        for item in items:
            if isinstance(item, dict) and item.get("type") in _CALLS:
                call_id, name = item.get("call_id"), item.get("name")
                if isinstance(call_id, str) and isinstance(name, str):
                    names[call_id] = name
        out: list[Any] = []
        for item in items:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind in _OUTPUTS:
                call_id = item.get("call_id")
                if isinstance(call_id, str):
                    tool = _OUTPUTS[kind] or names.get(call_id) or _answered_by(self.toolbox, call_id, item.get("output"))
                    item = self._output_item(item, call_id, tool)
            out.append(item)
        return ModelInputData(input=out, instructions=model_data.instructions)

    # -- internals ---------------------------------------------------------------------

    def _output_item(self, item: dict[str, Any], call_id: str, tool: str | None) -> dict[str, Any]:
        if tool is not None and tool in self.toolbox.tools:
            return item  # blobpad's own answers: capped, and offloading them would loop
        if self.tools is not None and tool is not None and tool not in self.tools:
            return item  # (a tool that cannot be told, its call kept on the server, is offloaded)
        output = item.get("output")
        if isinstance(output, str):
            shown = self._shown(output, call_id, "", tool)
            return item if shown is None else {**item, "output": shown}
        if not isinstance(output, list):
            return item
        shell = item["type"] == "shell_call_output"  # a list of commands' {stdout, stderr, outcome}
        parts: list[Any] = []
        changed = False
        for i, part in enumerate(output):
            if isinstance(part, dict):
                fields = ("stdout", "stderr") if shell else ("text",) if part.get("type") == "input_text" else ()
                for field in fields:
                    text = part.get(field)
                    shown = self._shown(text, call_id, f"{i}.{field}", tool) if isinstance(text, str) else None
                    if shown is not None:
                        part = {**part, field: shown}
                        changed = True
            parts.append(part)
        return {**item, "output": parts} if changed else item

    def _shown(self, text: str, call_id: str, part: str, tool: str | None) -> str | None:
        """What the model sees instead of ``text``: None when it is small enough to stay."""
        observation: Any = text
        if text.startswith("{"):
            try:
                parsed = json.loads(text)
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, dict):
                observation = parsed
        off = self.offloader
        if off.size_of(observation) <= off.threshold:
            return None
        digest = _digest(text)
        with self._lock:
            if digest in self._mine:
                return None  # an observation this filter made
        # the output itself is in the key: two outputs under one call id (a filter shared by
        # two runs, a provider numbering calls per response) each keep their own entry
        key = (call_id, part, len(text), digest)
        with self._lock:
            gate = self._gates.setdefault(key, threading.Lock())
        try:
            with gate:  # the same output from several threads at once: put once, the others wait for it
                return self._shown_once(key, observation, text, tool)
        finally:
            with self._lock:
                if self._gates.get(key) is gate and not gate.locked():
                    del self._gates[key]

    def _shown_once(self, key: tuple[str, str, int, bytes], observation: Any, text: str, tool: str | None) -> str:
        off, tb = self.offloader, self.toolbox
        with self._lock:
            done = self._done.get(key)
            if done is not None:
                self._done.move_to_end(key)
        if done is not None and self._readable(done[0]):
            return done[1]
        entry_id: str | None
        try:
            synthetic = off.offload(observation, session=tb.session, turn=tb.turn, tool=tool)
            entry_id = synthetic.get("scratchpad_id")
        except BlobpadError as exc:
            log.warning("blobpad: the output of %s (%d characters) could not be offloaded: %s",
                        tool or "a tool", len(text), exc)
            synthetic = {"ok": True, "summary": text_summary(valid_text(text), off.head_chars, off.tail_chars),
                         "_note": f"This output ({len(text)} characters) was too large for the conversation and could "
                                  f"not be saved in the scratchpad ({exc.render('tool')}); only its start and end "
                                  "are shown."}
            entry_id = None
        shown = json.dumps(synthetic, ensure_ascii=False)
        if valid_text(shown) is not shown:  # a lone surrogate of the output's other fields: escaped, as it came
            shown = json.dumps(synthetic)
        with self._lock:
            self._mine[_digest(shown)] = None
            while len(self._mine) > self._limit:
                self._mine.popitem(last=False)
            if entry_id is not None:  # a failure is not remembered: the next model call tries again
                self._done[key] = (entry_id, shown)
                while len(self._done) > self._limit:
                    self._done.popitem(last=False)
        return shown

    def _readable(self, entry_id: str) -> bool:
        """Whether the model can still read the entry an output was offloaded to, through the
        toolbox as it stands now: it lives, and it is in the toolbox's scope (a turn-scoped
        toolbox moved on to the next turn reads none of the last turn's entries)."""
        try:
            return self.toolbox.in_scope(self.offloader.store.stat(entry_id))
        except (NotFound, InvalidArgument):
            return False
