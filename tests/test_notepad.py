"""The session notepad (issue 5): seed 001 spaces, seed 002 notepad, seed 004 scratchpad.

Every test runs on a real LMDB store (``store``/``store_factory`` fixtures).  The
oracles are exact expected strings typed from the design seeds, and a small
in-memory model of the notepad that a random sequence of operations is checked
against.  Cross-process safety is checked with two real processes appending to the
same store at the same time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
from blobpad import InvalidArgument, NotFound
from blobpad.notepad import (
    DEFAULT_BUDGETS,
    EMPTY_NOTEPAD_HINT,
    MAX_CONTENT_BYTES,
    NOTEPAD_GUIDANCE,
    NOTEPAD_HEADING,
    NUDGE_TEXTS,
    PRE_COMPACTION_WARNING,
    SCRATCHPAD_FOOTER,
    SCRATCHPAD_GUIDANCE,
    SCRATCHPAD_HEADER,
    Budget,
    Notepad,
    NoteResult,
    estimate_tokens,
    prepend_block,
    purge_expired,
    scratchpad_guidance,
)

HEADER = "[Session Scratchpad - your persistent working memory]"
FOOTER = "[End Scratchpad]"


def blob_keys(store: blobpad.Store) -> int:
    """How many distinct contents the notepad keyspace holds."""
    with store.engine.read() as txn:
        return sum(1 for key, _ in txn.scan("notes") if key[:1] == b"B")


def notes_keys(store: blobpad.Store) -> list[bytes]:
    with store.engine.read() as txn:
        return [key for key, _ in txn.scan("notes")]


def as_json(result: NoteResult) -> dict:
    """The result's dict, after a JSON round trip (it must be serialisable)."""
    return json.loads(json.dumps(result.to_dict()))


# -- the seeds' texts, typed from the seeds ----------------------------------------------


def test_seed_texts_are_exact():
    assert NOTEPAD_HEADING == "## Session Notepad"
    assert EMPTY_NOTEPAD_HINT == (
        "(empty — use write_notepad or update_notepad to save working notes, findings, and task progress; "
        "content here survives context compaction)"
    )
    assert PRE_COMPACTION_WARNING == (
        "[System] Context is approaching the token limit and will be compacted after your next response.\n"
        "Review your session notepad and update it with any working state, findings, or progress you\n"
        "need to preserve. Conversation details may be summarized during compaction, but the notepad\n"
        "is kept in full."
    )
    assert NOTEPAD_GUIDANCE == (
        "For multi-step or complex tasks, use the session notepad to track your plan and record findings as "
        "you work. The notepad survives context compaction — conversation details may be summarized, but the "
        "notepad is preserved in full. Update it after significant findings or completed steps."
    )
    assert SCRATCHPAD_HEADER == HEADER
    assert SCRATCHPAD_FOOTER == FOOTER
    seed_guidance = (
        "## Session Scratchpad\n"
        "You have a persistent scratchpad tool (session.scratchpad) that survives context compaction.\n"
        "Use it to save: multi-step plans, key findings, important decisions, accumulated state.\n"
        "The scratchpad is prepended to each message you receive. Budget: ~2000 tokens.\n"
        'Call session.scratchpad with mode "replace" to overwrite, or "append" to add incrementally.'
    )
    assert scratchpad_guidance(2000, tool="session.scratchpad") == seed_guidance
    # by default it names the tool the Toolbox registers (no dots allowed in tool names)
    assert seed_guidance.replace("session.scratchpad", "session_scratchpad") == SCRATCHPAD_GUIDANCE


def test_default_budgets_are_the_seeds_numbers(store):
    assert DEFAULT_BUDGETS["notes"] == Budget(4000, "chars")
    assert DEFAULT_BUDGETS["plan"] == Budget(2000, "chars")
    assert DEFAULT_BUDGETS["refs"] == Budget(50, "items")
    assert DEFAULT_BUDGETS["scratchpad"] == Budget(2000, "tokens")
    assert DEFAULT_BUDGETS["notepad"] == Budget(None, "chars")
    pad = store.notepad("s")
    assert isinstance(pad, Notepad)
    assert pad.budgets == DEFAULT_BUDGETS
    assert pad.scratchpad_guidance() == SCRATCHPAD_GUIDANCE
    assert store.notepad("s", budgets={"scratchpad": 500}).scratchpad_guidance() == SCRATCHPAD_GUIDANCE.replace(
        "~2000", "~500")


# -- seed 001: notes, plan, refs -----------------------------------------------------------


def test_set_notes_truncates_to_4000_and_warns(store):
    pad = store.notepad("s")
    exact = "n" * 4000
    r = pad.set_notes(exact)
    assert (r.ok, r.changed, r.version, r.used, r.budget, r.unit) == (True, True, 1, 4000, 4000, "chars")
    assert r.warning is None and r.message == "notes updated (4000/4000 characters)"
    text = "".join(chr(0x4E00 + i % 500) for i in range(4001))  # non-ASCII: characters, not bytes
    r = pad.set_notes(text)
    warning = ("notes truncated to 4000 characters (original: 4001); the end was cut off. "
               "Use set_notes with a tighter summary.")
    assert r.ok and r.changed and r.version == 2 and r.used == 4000
    assert r.warning == warning and r.message == warning
    assert as_json(r)["warning"] == warning and as_json(r)["original"] == 4001
    assert pad.read("notes") == text[:4000]


def test_append_notes_rejected_over_4000_leaves_notes_unchanged(store):
    """Seed 001: "rejected if combined would exceed 4,000 chars": the two texts end to end (no
    separator is added), so 3,000 + 1,000 fits exactly, and a rejection names the append's own size."""
    pad = store.notepad("s")
    pad.set_notes("a" * 3000)
    r = pad.append_notes("b" * 1000)
    assert r.ok and r.used == 4000 and r.version == 2
    assert pad.read("notes") == "a" * 3000 + "b" * 1000
    r = pad.append_notes("cd")
    error = ("append_notes rejected: notes would be 4002 characters, over its 4000-character budget "
             "(current: 4000, append: 2); notes unchanged. Use set_notes to overwrite it with a summary, or add less.")
    assert not r.ok and not r.changed and r.error == error and r.message == error and r.warning is None
    assert (r.version, r.used) == (2, 4000)
    assert as_json(r) == {
        "ok": False, "space": "notes", "action": "append_notes", "version": 2, "changed": False, "used": 4000,
        "budget": 4000, "unit": "chars", "message": error, "error": error, "current": 4000, "added": 2,
        "combined": 4002,
    }
    assert pad.read("notes") == "a" * 3000 + "b" * 1000
    assert pad.version("notes") == 2 and len(pad.history("notes")) == 2


@pytest.mark.parametrize(("first", "second"), [
    ("a" * 3999, "b"), ("line\n", "x" * 3995), ("", "z" * 4000), ("a" * 3000, "é" * 1000),
])
def test_seed001_append_is_end_to_end_against_the_budget(store, first, second):
    """The class: whatever the two texts, append_notes stores exactly ``first + second`` when their
    characters together are at most 4,000, and is rejected otherwise, naming ``len(second)`` as the append."""
    pad = store.notepad("s")
    pad.set_notes(first)
    r = pad.append_notes(second)
    assert r.ok and pad.read("notes") == first + second and r.used == len(first + second)
    r = pad.append_notes("!" * 7)
    assert not r.ok and (r.details["current"], r.details["added"]) == (len(first + second), 7)
    assert pad.read("notes") == first + second


def test_the_library_append_joins_on_a_new_line_unless_told_not_to(store):
    pad = store.notepad("s")
    pad.write("one")
    pad.append("two")
    assert pad.read() == "one\ntwo"
    pad.append("three", join=False)
    assert pad.read() == "one\ntwothree"
    r = pad.append("x" * 10, space="plan", join=False)
    assert r.ok and pad.read("plan") == "x" * 10
    with pytest.raises(InvalidArgument, match="join"):
        pad.append("y", join="no")
    # a side that already breaks the line (CRLF or CR too) gets no newline of the store's
    for text, added, want in (("a\r\n", "b", "a\r\nb"), ("a", "\r\nb", "a\r\nb"), ("a\r", "b", "a\rb"),
                              ("a", "\nb", "a\nb"), ("a", "b", "a\nb")):
        pad.write(text)
        pad.append(added)
        assert pad.read() == want, (text, added)
        pad.write(text)
        pad.prepend(added)
        assert pad.read() == (added + text if added.endswith(("\n", "\r")) or text.startswith(("\n", "\r"))
                              else f"{added}\n{text}")
    pad.write("a")
    pad.append("\r\nb")
    pad.update("delete", content="\r\nb")  # appending then deleting the same text leaves the text as it was
    assert pad.read() == "a"


def test_load_legacy_notes_moves_the_single_key_scratchpad_into_notes_once(store):
    pad = store.notepad("s")
    assert pad.load_legacy_notes() is None  # nothing written anywhere
    pad.scratchpad("old findings")
    loaded = pad.load_legacy_notes()
    assert loaded is not None and loaded.changed and loaded.action == "load_legacy" and loaded.used == 12
    assert pad.read("notes") == "old findings" and pad.load_legacy_notes() is None
    fresh = store.notepad("t")
    fresh.scratchpad("kept")
    assert fresh.set_notes("new").ok and [v.action for v in fresh.history("notes")] == ["set_notes", "load_legacy"]
    assert fresh.read("notes", version=1) == "kept" and fresh.read("notes") == "new"
    written = store.notepad("u")
    written.set_notes("mine")
    written.scratchpad("later")
    assert written.load_legacy_notes() is None and written.read("notes") == "mine"


def test_set_plan_truncates_to_2000_and_warns(store):
    pad = store.notepad("s")
    assert pad.set_plan("1. Fix auth bug\n2. Add test\n3. Update docs").warning is None
    r = pad.set_plan("p" * 2000)
    assert r.warning is None and r.message == "plan updated (2000/2000 characters)"
    r = pad.set_plan("q" * 2500)
    assert r.warning == ("plan truncated to 2000 characters (original: 2500); the end was cut off. "
                         "Use set_plan with a tighter summary.")
    assert pad.read("plan") == "q" * 2000 and r.version == 3


def test_refs_add_drops_the_oldest_at_50_atomically(store):
    pad = store.notepad("s")
    refs = [f"src/file_{i}.py" for i in range(50)]
    for i, ref in enumerate(refs):
        r = pad.refs_add(ref)
        assert r.ok and r.used == i + 1 and r.details == {"dropped": []}
    assert pad.refs() == refs
    r = pad.refs_add("https://github.com/org/repo/issues/42")
    assert r.ok and r.used == 50 and r.details == {"dropped": ["src/file_0.py"]}
    assert r.message == "ref added (50/50 refs); dropped the oldest: 'src/file_0.py'"
    assert pad.refs() == refs[1:] + ["https://github.com/org/repo/issues/42"]
    assert all(ref in refs + ["https://github.com/org/repo/issues/42"] for ref in pad.refs())  # never cut mid-value
    # adding a present ref moves it to the newest position; nothing is dropped or doubled
    r = pad.refs_add("src/file_1.py")
    assert r.changed and r.details == {"dropped": []} and pad.refs()[-1] == "src/file_1.py"
    assert len(pad.refs()) == 50 and pad.refs().count("src/file_1.py") == 1
    r = pad.refs_add("src/file_1.py")
    assert r.ok and not r.changed and r.message == "ref already present (50/50 refs)"


def test_refs_remove_and_empty_refs(store):
    pad = store.notepad("s")
    pad.refs_add("src/auth/login.ts")
    pad.refs_add("README.md")
    with pytest.raises(InvalidArgument, match=r"'nope' is not in refs \(exact match needed\); current refs: "
                                              r"'src/auth/login.ts', 'README.md'"):
        pad.refs_remove("nope")
    with pytest.raises(InvalidArgument, match="not in refs"):
        pad.refs_remove("readme.md")  # exact match only
    assert pad.refs() == ["src/auth/login.ts", "README.md"] and pad.version("refs") == 2
    r = pad.refs_remove("src/auth/login.ts")
    assert r.ok and r.message == "ref removed (1/50 refs)" and pad.refs() == ["README.md"]
    for bad in ("", "   ", None, 7, ["a"]):
        with pytest.raises(InvalidArgument, match="refs.add: a ref must be"):
            pad.refs_add(bad)
        with pytest.raises(InvalidArgument, match="refs.remove: a ref must be"):
            pad.refs_remove(bad)
    with pytest.raises(InvalidArgument, match="line breaks"):
        pad.refs_add("a\nb")
    with pytest.raises(InvalidArgument, match="at most 2048 characters"):
        pad.refs_add("x" * 2049)
    assert pad.refs() == ["README.md"] and pad.version("refs") == 3


def test_refs_set_of_a_huge_list_is_one_pass(store):
    """A model may send refs.set a list of any length: the work is one pass over it (it
    was quadratic: 100,000 items took a minute), and the answer is the model's."""
    pad = store.notepad("s")
    rng = random.Random(7)
    items: list = [rng.choice([f"dup{rng.randrange(30)}", "", "x\ny", 5, None]) for _ in range(300_000)]
    items += [f"late{i}" for i in range(300_000)]
    expect = list(dict.fromkeys(i for i in items if isinstance(i, str) and i and "\n" not in i))[:50]
    r = pad.refs_set(items)
    assert r.ok and pad.refs() == expect and len(expect) == 50 and expect[-1].startswith("late")
    assert r.details == {"ignored": len(items) - 50}


def test_refs_set_keeps_the_first_50_strings_and_drops_non_strings(store):
    pad = store.notepad("s")
    pad.refs_add("old")
    items: list = []
    for i in range(60):
        items.append(f"ref{i}")
        items.append(i)                      # non-strings are dropped silently
    items[5:5] = [None, {"a": 1}, ["x"], 1.5, True, "", "two\nlines"]
    r = pad.refs_set(items)
    assert r.ok and r.warning is None and r.error is None
    assert pad.refs() == [f"ref{i}" for i in range(50)]
    assert r.used == 50 and r.details == {"ignored": len(items) - 50} and r.message == "refs replaced (50/50 refs)"
    assert pad.refs_set(("a", "b", "a")).ok and pad.refs() == ["a", "b"]
    assert pad.refs_set([]).ok and pad.refs() == []
    for bad in ("ref", None, {"a": "b"}, b"x"):
        with pytest.raises(InvalidArgument, match="items must be a list of strings"):
            pad.refs_set(bad)
    assert pad.refs() == []


def render_oracle(notes: str, plan: str, refs: list[str]) -> str:
    sections = []
    if notes:
        sections.append("## Notes\n" + notes)
    if plan:
        sections.append("## Plan\n" + plan)
    if refs:
        sections.append("## Refs\n" + "\n".join("- " + r for r in refs))
    return "\n".join([HEADER, *sections, FOOTER]) if sections else ""


@pytest.mark.parametrize("mask", range(8))
def test_render_includes_only_non_empty_spaces(store, mask):
    pad = store.notepad("s")
    notes = "Root cause: timezone mismatch in token expiry" if mask & 1 else ""
    plan = "1. ~~Fix auth bug~~ DONE\n2. Add test <-- current\n3. Update docs" if mask & 2 else ""
    refs = ["src/auth/login.ts", "https://github.com/org/repo/issues/42"] if mask & 4 else []
    pad.set_notes("stale notes")  # written then cleared: still empty
    pad.set_notes(notes)
    pad.set_plan(plan)
    pad.refs_set(refs)
    expected = render_oracle(notes, plan, refs)
    assert pad.render_spaces() == expected
    assert (expected == "") == (mask == 0)
    if mask == 7:
        assert expected == (
            f"{HEADER}\n## Notes\nRoot cause: timezone mismatch in token expiry\n"
            "## Plan\n1. ~~Fix auth bug~~ DONE\n2. Add test <-- current\n3. Update docs\n"
            f"## Refs\n- src/auth/login.ts\n- https://github.com/org/repo/issues/42\n{FOOTER}"
        )
    assert prepend_block(pad.render_spaces(), "continue") == (f"{expected}\n\ncontinue" if expected else "continue")


# -- seed 002: the freeform notepad ----------------------------------------------------------


def test_read_write_clear(store):
    pad = store.notepad("s")
    assert pad.read() == "" and pad.read_notepad() == {"content": ""} and pad.version() == 0
    r = pad.write_notepad("## Plan\n- [ ] Survey all sheets")
    assert r.ok and r.to_dict()["ok"] is True and r.version == 1
    assert pad.read_notepad() == {"content": "## Plan\n- [ ] Survey all sheets"}
    pad.write("replaced entirely")
    assert pad.read() == "replaced entirely"
    r = pad.write("")
    assert r.ok and r.changed and r.version == 3 and pad.read() == ""
    r = pad.write("")
    assert r.ok and not r.changed and r.version == 3  # no change, no version
    big = "x" * 200_000  # the notepad space has no budget
    assert pad.write(big).warning is None and pad.read() == big


def test_a_replace_all_over_the_size_limit_is_refused_before_it_is_built(store):
    """find_replace with replace_all checks the size the result would have first: 20,000
    replacements of 10,000 bytes would build 200 MB only to refuse it.  The limit is exact:
    a result of MAX_CONTENT_BYTES is kept, one byte more is refused."""
    from blobpad.notepad.budget import MAX_CONTENT_BYTES

    pad = store.notepad("s")
    pad.write_notepad("x" * 20_000)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgument, match=r"notepad would be 200000000 bytes; a space holds at most"):
            pad.update_notepad("find_replace", find="x", replace="y" * 10_000, replace_all=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20
    assert pad.read("notepad") == "x" * 20_000
    pad.write_notepad("xz")
    pad.update_notepad("find_replace", find="z", replace="w" * (MAX_CONTENT_BYTES - 1))
    assert len(pad.read("notepad").encode()) == MAX_CONTENT_BYTES
    with pytest.raises(InvalidArgument, match=rf"notepad would be {MAX_CONTENT_BYTES + 1} bytes"):
        pad.update_notepad("find_replace", find="x", replace="é")


def test_an_expired_notepad_has_no_versions_however_it_is_asked(store_factory):
    clock = [1.8e9]
    store = store_factory(clock=lambda: clock[0])
    pad = store.notepad("p", ttl=5)
    pad.write("v1")
    clock[0] += 5
    for ask in (lambda: pad.read(version=1), lambda: pad.revert(1)):
        with pytest.raises(NotFound, match="notepad of this session has no versions"):
            ask()
    assert pad.read() == "" and pad.history() == []


def test_nudges_take_one_space_by_name(store):
    from blobpad import Nudges

    pad = store.notepad("s")
    assert Nudges(pad, spaces="plan", after_turns=1).spaces == ("plan",)
    assert Nudges(pad, spaces=["plan", "notes"], after_turns=1).spaces == ("plan", "notes")


def test_update_operations(store):
    pad = store.notepad("s")
    pad.write("- [ ] a\n- [ ] b\n- [ ] c")
    r = pad.update("find_replace", find="[ ]", replace="[x]")
    assert r.ok and r.details == {"replacements": 1} and pad.read() == "- [x] a\n- [ ] b\n- [ ] c"
    r = pad.update("find_replace", find="[ ]", replace="[x]", replace_all=True)
    assert r.details == {"replacements": 2} and pad.read() == "- [x] a\n- [x] b\n- [x] c"
    before = (pad.read(), pad.version())
    with pytest.raises(InvalidArgument, match=r"find_replace: find text '\[ \]' was not found: notepad does not "
                                              r"contain it\. Read notepad and copy the exact text"):
        pad.update("find_replace", find="[ ]", replace="[x]")
    assert (pad.read(), pad.version()) == before  # an absent find changes nothing
    pad.update("append", content="## Findings")
    pad.update_notepad("append", content="- Sheet 1: 500 rows\n")
    pad.update("append", content="- Sheet 2: 180 rows")
    pad.update("prepend", content="# Task")
    assert pad.read() == "# Task\n- [x] a\n- [x] b\n- [x] c\n## Findings\n- Sheet 1: 500 rows\n- Sheet 2: 180 rows"
    pad.update("delete", content="- [x] b\n")
    assert pad.read() == "# Task\n- [x] a\n- [x] c\n## Findings\n- Sheet 1: 500 rows\n- Sheet 2: 180 rows"
    pad.update("delete", content="- [x] ", replace_all=True)
    assert pad.read() == "# Task\na\nc\n## Findings\n- Sheet 1: 500 rows\n- Sheet 2: 180 rows"
    with pytest.raises(InvalidArgument, match="delete: content text 'zzz' was not found"):
        pad.update("delete", content="zzz")
    pad.update("find_replace", find="a\nc\n", replace="")
    assert pad.read() == "# Task\n## Findings\n- Sheet 1: 500 rows\n- Sheet 2: 180 rows"
    empty = store.notepad("other")
    with pytest.raises(InvalidArgument, match="notepad is empty"):
        empty.update("find_replace", find="x", replace="y")
    assert empty.version() == 0


@pytest.mark.parametrize(("args", "message"), [
    ({"operation": "rename"}, "operation must be one of find_replace, append, prepend, delete"),
    ({"operation": None}, "operation must be one of"),
    ({"operation": "find_replace", "replace": "x"}, "find_replace needs find"),
    ({"operation": "find_replace", "find": "x"}, "find_replace needs replace"),
    ({"operation": "find_replace", "find": "", "replace": "y"}, "find must not be empty"),
    ({"operation": "find_replace", "find": 3, "replace": "y"}, "find must be a string, not int"),
    ({"operation": "find_replace", "find": "x", "replace": "y", "replace_all": "yes"}, "replace_all must be True or"),
    ({"operation": "append"}, "append needs content: the text to add"),
    ({"operation": "prepend", "content": 5}, "content must be a string, not int"),
    ({"operation": "delete"}, "delete needs content: the text to remove"),
    ({"operation": "delete", "content": ""}, "content must not be empty"),
])
def test_update_argument_errors(store, args, message):
    pad = store.notepad("s")
    pad.write("x")
    with pytest.raises(InvalidArgument, match=message):
        pad.update_notepad(**args)
    assert pad.read() == "x" and pad.version() == 1


def test_context_section(store):
    pad = store.notepad("s")
    assert pad.context_section() == (
        "## Session Notepad\n(empty — use write_notepad or update_notepad to save working notes, findings, and "
        "task progress; content here survives context compaction)"
    )
    pad.write("## Findings\n- Q3 discrepancy: $1.2M vs $1.155M")
    assert pad.context_section() == "## Session Notepad\n## Findings\n- Q3 discrepancy: $1.2M vs $1.155M"
    pad.write("")
    assert pad.context_section() == f"{NOTEPAD_HEADING}\n{EMPTY_NOTEPAD_HINT}"


def test_whitespace_is_content_not_emptiness(store):
    """The seeds test emptiness literally (seed 002 "if the notepad is empty", seed 004's
    ``if (scratchpad)``, seed 001 "only non-empty spaces"): whitespace is shown as written."""
    pad = store.notepad("ws")
    pad.write("  \n")
    assert pad.read() == "  \n" and pad.context_section() == f"{NOTEPAD_HEADING}\n  \n"
    pad.scratchpad("   ")
    assert pad.scratchpad_content() == "   "
    assert pad.scratchpad_block() == f"{HEADER}\n   \n{FOOTER}"
    pad.set_notes(" ")
    assert pad.render_spaces() == f"{HEADER}\n## Notes\n \n{FOOTER}"
    pad.set_notes("")
    assert pad.render_spaces() == "" and pad.scratchpad("").ok and pad.scratchpad_block() == ""


def test_spawn_fork_and_independence(store):
    parent = store.notepad("parent")
    parent.write("## Delegated\n- sub_abc: revenue")
    parent.set_plan("1. delegate")
    parent.refs_add("sheet1.xlsx")
    empty = parent.spawn("sub_abc")
    assert empty.session == "sub_abc" and empty.read() == "" and empty.spaces() == {}
    copied = parent.spawn("sub_def", copy_notepad=True)
    forked = parent.fork("fork_1")
    for child in (copied, forked):
        assert child.read() == parent.read() and child.read("plan") == "1. delegate"
        assert child.refs() == ["sheet1.xlsx"] and child.version() == 1
        assert child.spaces() == {"notepad": 1, "plan": 1, "refs": 1}
    copied.update("append", content="child finding")
    parent.update("append", content="- sub_def: expenses")
    forked.refs_add("fork.txt")
    assert copied.read() == "## Delegated\n- sub_abc: revenue\nchild finding"
    assert parent.read() == "## Delegated\n- sub_abc: revenue\n- sub_def: expenses"
    assert forked.read() == "## Delegated\n- sub_abc: revenue"
    assert parent.refs() == ["sheet1.xlsx"] and forked.refs() == ["sheet1.xlsx", "fork.txt"]
    with pytest.raises(InvalidArgument, match="already has a notepad"):
        parent.fork("sub_def")
    assert copied.read() == "## Delegated\n- sub_abc: revenue\nchild finding"
    with pytest.raises(InvalidArgument, match="its own session id"):
        parent.spawn("parent")
    with pytest.raises(InvalidArgument, match="copy_notepad must be True or False"):
        parent.spawn("x", copy_notepad="yes")
    # deleting the parent leaves the children's copies (shared content) intact
    store.delete_session("parent")
    assert parent.read() == "" and forked.read() == "## Delegated\n- sub_abc: revenue"


# -- seed 004: the token-budgeted scratchpad ----------------------------------------------------


def test_scratchpad_replace_and_append_with_the_seed_messages(store):
    pad = store.notepad("s")
    r = pad.scratchpad("a" * 180)  # 180 ASCII characters = 45 tokens
    assert r.ok and r.message == "Scratchpad updated (45 tokens / 2000 budget)" and r.unit == "tokens"
    r = pad.scratchpad("b" * 12800, mode="replace")  # 3200 tokens
    assert r.warning == r.message == "Scratchpad truncated to 2000 tokens (original: 3200). Consider summarizing."
    assert pad.read("scratchpad") == "b" * 8000 and r.used == 2000
    pad.scratchpad("c" * 7199 + "\n")  # 1800 tokens
    r = pad.scratchpad("d" * 2000, mode="append")  # 500 more
    assert not r.ok and not r.changed
    assert r.error == r.message == ("Append would exceed 2000 token budget (current: 1800, append: 500). "
                                    "Use mode 'replace' to rewrite, or reduce content.")
    assert pad.read("scratchpad") == "c" * 7199 + "\n" and r.version == 3
    r = pad.scratchpad("d" * 800, mode="append")  # 1800 + 200 = 2000: fits
    assert r.ok and r.message == "Scratchpad updated (2000 tokens / 2000 budget)"
    pad.scratchpad("e" * 7200)  # 1800 tokens, no line break at its end: the append is still end to end
    r = pad.scratchpad("f" * 800, mode="append")
    assert r.ok and pad.read("scratchpad") == "e" * 7200 + "f" * 800 and r.used == 2000
    pad.scratchpad("e" * 7200)
    r = pad.scratchpad("f" * 804, mode="append")  # 201 tokens: the message names them, not 202 with a separator
    assert not r.ok and (r.details["current"], r.details["added"]) == (1800, 201)
    with pytest.raises(InvalidArgument, match='mode must be "replace" or "append"'):
        pad.scratchpad("x", mode="insert")


def test_scratchpad_block_and_non_english_truncation(store):
    pad = store.notepad("s")
    assert pad.scratchpad_content() is None and pad.scratchpad_block() == ""
    assert prepend_block(pad.scratchpad_block(), "continue with step 2") == "continue with step 2"
    pad.scratchpad("## Plan\n1. Fix X\n2. Test Y")
    block = "[Session Scratchpad - your persistent working memory]\n## Plan\n1. Fix X\n2. Test Y\n[End Scratchpad]"
    assert pad.scratchpad_block() == block
    assert prepend_block(pad.scratchpad_block(), "continue with step 2") == f"{block}\n\ncontinue with step 2"
    text = "漢" * 2500  # one token per CJK character: 2500 tokens, truncated to 2000 characters
    r = pad.scratchpad(text)
    assert r.message == "Scratchpad truncated to 2000 tokens (original: 2500). Consider summarizing."
    assert pad.read("scratchpad") == "漢" * 2000


def test_token_estimate():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 10) == 10 and estimate_tokens("abcde") == 2
    assert estimate_tokens("日本語のテキスト") == 8
    assert estimate_tokens("Привет, мир") == 9 + 1  # 9 Cyrillic letters, ", " is 2 ASCII
    assert estimate_tokens("😀😀") == 2


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_token_estimate_never_under_counts(text):
    n = estimate_tokens(text)
    raw = text.encode("utf-8", "surrogatepass")
    assert n >= math.ceil(len(raw) / 4)
    assert n >= sum(1 for c in text if ord(c) > 127)  # at least one token per non-ASCII character
    assert n == sum(1 for c in text if ord(c) > 127) + math.ceil(sum(1 for c in text if ord(c) < 128) / 4)


def test_custom_counter_and_token_budgets_for_any_space(store):
    def words(text: str) -> int:
        return len(text.split())

    pad = store.notepad("s", counter=words, budgets={"notes": Budget(5, "tokens"), "todo": 10})
    r = pad.set_notes("one two three four five six seven")
    assert r.used == 5 and pad.read("notes") == "one two three four five "  # the longest prefix that fits
    assert r.warning == ("notes truncated to 5 tokens (original: 7); the end was cut off. "
                         "Use set_notes with a tighter summary.")
    r = pad.append_notes("six")
    assert not r.ok and r.details == {"current": 5, "added": 1, "combined": 6}
    assert "over its 5-token budget" in r.error
    r = pad.write("0123456789abc", space="todo")  # a new space counts characters
    assert r.used == 10 and pad.read("todo") == "0123456789" and r.warning.startswith("todo truncated to 10 characters")
    bad = store.notepad("t", counter=lambda text: -1)
    with pytest.raises(InvalidArgument, match="the token counter returned -1"):
        bad.scratchpad("x")
    # a counter whose count of the empty text is over the budget (a chat template's overhead): no text
    # fits, and a write says so; it answered "truncated to 100 tokens", ok, having stored nothing
    templated = store.notepad("u", counter=lambda text: 150 + len(text) // 4, budgets={"tk": Budget(100, "tokens")})
    with pytest.raises(InvalidArgument, match="even empty text as 150 tokens.*no text fits"):
        templated.write("hello world", space="tk")
    assert templated.read("tk") == "" and templated.version("tk") == 0


@pytest.mark.parametrize("options", [
    {"budgets": {"notes": 0}}, {"budgets": {"notes": -5}}, {"budgets": {"notes": MAX_CONTENT_BYTES + 1}},
    {"budgets": {"notes": True}}, {"budgets": {"notes": "10"}},
    {"budgets": {"notes": Budget(10, "items")}}, {"budgets": {"refs": None}}, {"budgets": {"refs": Budget(5, "chars")}},
    {"budgets": {"Bad Name": 5}}, {"budgets": ["notes"]}, {"counter": 5}, {"ttl": 0}, {"ttl": -1.0},
    {"ttl": float("inf")}, {"max_versions": 0}, {"max_versions": 1.5},
])
def test_invalid_options(store, options):
    with pytest.raises(InvalidArgument):
        store.notepad("s", **options)


def test_invalid_arguments(store):
    pad = store.notepad("s")
    with pytest.raises(InvalidArgument, match="session must be a string"):
        store.notepad(None)
    with pytest.raises(InvalidArgument, match="content must be a string, not int"):
        pad.write(5)
    with pytest.raises(InvalidArgument, match="content must be a string, not null"):
        pad.set_notes(None)
    with pytest.raises(InvalidArgument, match="lone surrogates"):
        pad.write("a\ud800b")
    with pytest.raises(InvalidArgument, match=f"at most {MAX_CONTENT_BYTES} bytes"):
        pad.write("x" * (MAX_CONTENT_BYTES + 1))
    with pytest.raises(InvalidArgument, match=f"at most {MAX_CONTENT_BYTES} bytes"):
        pad.set_notes("é" * (MAX_CONTENT_BYTES // 2 + 1))  # bytes, not characters
    pad.write("x" * MAX_CONTENT_BYTES)
    with pytest.raises(InvalidArgument, match="a space holds at most"):
        pad.append("y")
    with pytest.raises(InvalidArgument, match="unknown space 'nope'; the spaces are: notes, plan, refs"):
        pad.write("x", space="nope")
    with pytest.raises(InvalidArgument, match="is a list of refs"):
        pad.write("x", space="refs")
    with pytest.raises(InvalidArgument, match="holds text, not a list"):
        pad.refs("notes")
    with pytest.raises(InvalidArgument, match="version must be a positive integer"):
        pad.revert(0)
    with pytest.raises(InvalidArgument, match="limit must be an integer"):
        pad.history(limit=0)
    assert len(pad.read()) == MAX_CONTENT_BYTES and pad.version() == 1


# -- versions ----------------------------------------------------------------------------------


def test_history_and_revert(store):
    s = store
    pad = s.notepad("s")
    pad.write("v1 plan")
    pad.write("v2 bad rewrite")
    pad.update("append", content="more")
    hist = pad.history()
    assert [v.version for v in hist] == [3, 2, 1]
    assert [v.action for v in hist] == ["append", "write", "write"]
    assert [v.chars for v in hist] == [len("v2 bad rewrite\nmore"), 14, 7]
    assert hist[2].sha256 == hashlib.sha256(b"v1 plan").hexdigest()
    assert json.loads(json.dumps([v.to_dict() for v in hist]))[0]["version"] == 3
    assert pad.read(version=1) == "v1 plan" and pad.read(version=2) == "v2 bad rewrite"
    r = pad.revert(1)
    assert r.ok and r.changed and r.version == 4 and r.action == "revert to 1" and pad.read() == "v1 plan"
    assert pad.history(limit=1)[0].sha256 == hist[2].sha256  # the same content, shared
    pad.revert(3)  # a revert is itself a version, so it can be undone
    assert pad.read() == "v2 bad rewrite\nmore" and pad.version() == 5
    with pytest.raises(NotFound, match="notepad has no version 9; the versions kept are 1 to 5"):
        pad.revert(9)
    with pytest.raises(NotFound, match="no version 9"):
        pad.read(version=9)
    with pytest.raises(NotFound, match="plan of this session has no versions"):
        pad.revert(1, space="plan")
    assert pad.version() == 5
    refs = s.notepad("r")
    refs.refs_add("a")
    refs.refs_add("b")
    refs.revert(1, space="refs")
    assert refs.refs() == ["a"] and refs.version("refs") == 3


def test_versions_are_content_addressed_and_pruned(store):
    pad = store.notepad("s", max_versions=3)
    other = store.notepad("t")
    for _ in range(3):
        pad.write("A" * 1000)
        pad.write("B" * 1000)
    other.write("A" * 1000)
    assert pad.version() == 6 and blob_keys(store) == 2  # six versions, two contents stored once
    assert [v.version for v in pad.history()] == [6, 5, 4]
    with pytest.raises(NotFound, match="the versions kept are 4 to 6"):
        pad.revert(3)
    pad.write("C")
    pad.write("D")
    pad.write("E")
    assert blob_keys(store) == 4  # A (still used by the other session), C, D, E; B was released
    pad.delete()
    assert blob_keys(store) == 1 and other.read() == "A" * 1000
    other.delete()
    assert notes_keys(store) == []


def test_revert_over_a_shrunk_budget_truncates(store):
    store.notepad("s").set_notes("n" * 3000)
    small = store.notepad("s", budgets={"notes": 100})
    small.set_notes("short")
    r = small.revert(1, space="notes")
    assert r.used == 100 and r.warning.startswith("notes truncated to 100 characters (original: 3000)")

    refs = [f"r{i}" for i in range(20)]
    store.notepad("s").refs_set(refs)
    few = store.notepad("s", budgets={"refs": 5})
    few.refs_add("newest")
    r = few.revert(1, space="refs")  # a list over the budget keeps its newest items, as refs_add does
    assert r.used == 5 and few.refs() == refs[-5:] and r.warning is not None
    assert r.details["dropped"] == refs[:-5] and r.warning.startswith("refs reverted to version 1 truncated")


@pytest.mark.parametrize("writer_kind", ["text", "list"])
def test_a_space_declared_another_kind_by_another_handle_is_refused_not_converted(store, writer_kind):
    """Budgets belong to the handle: a custom space one handle declares text and another a
    list is refused by the one that did not write it, whatever the text looks like."""
    text = store.notepad("s", budgets={"foo": 100})
    listed = store.notepad("s", budgets={"foo": Budget(20, "items")})
    if writer_kind == "text":
        for content in ("plain findings", "42", '"abc"', '["a", "b"]', "[]"):
            text.write(content, space="foo")
            for call in (lambda: listed.refs("foo"), lambda: listed.render_spaces(["foo"]),
                         lambda: listed.refs_add("x", space="foo"), lambda: listed.revert(1, space="foo")):
                with pytest.raises(InvalidArgument, match="holds text, but this handle declares it a list"):
                    call()
            assert text.read("foo") == content
    else:
        listed.refs_set(["a", "b"], space="foo")
        for call in (lambda: text.read("foo"), lambda: text.append("more", space="foo"),
                     lambda: text.read("foo", version=1), lambda: text.revert(1, space="foo")):
            with pytest.raises(InvalidArgument, match="holds a list of refs, but this handle declares it text"):
                call()
        assert listed.refs("foo") == ["a", "b"] and listed.version("foo") == 1
    assert store.verify().ok


def test_a_ref_is_one_line_whatever_breaks_it(store):
    pad = store.notepad("s")
    for bad in ("a\vb", "a\fb", "a\x85b", "a\u2028b", "a\u2029b", "a\x1cb", "a\x1eb", "a\rb", "end\n", "a\r\nb"):
        with pytest.raises(InvalidArgument, match="line breaks"):
            pad.refs_add(bad)
        assert pad.refs_set([bad, "kept"]).details == {"ignored": 1}
    odd = "tab\tinside é 😀 \x1b[2J \x00"
    assert pad.refs_add(odd).ok and pad.refs() == ["kept", odd]
    assert pad.render_spaces().splitlines()[1:-1] == ["## Refs", "- kept", f"- {odd}"]  # a line each


def test_an_action_with_a_lone_surrogate_is_refused_before_any_change(store):
    pad = store.notepad("s")
    with pytest.raises(InvalidArgument, match="action contains lone surrogates"):
        pad.write("x", action="edit\ud800")
    assert pad.version() == 0 and pad.history() == []


def test_a_token_counter_that_fails_changes_nothing(store):
    pad = store.notepad("s", budgets={"scratchpad": None}, counter=lambda t: len(t) / 4)
    with pytest.raises(InvalidArgument, match="token counter returned"):
        pad.write("hello", space="scratchpad")
    assert pad.read("scratchpad") == "" and pad.version("scratchpad") == 0


# -- lifecycle, persistence, processes ----------------------------------------------------------


def test_delete_session_deletes_the_notepad_and_only_it(store):
    sessions = ["s", "s1", "s\x00", "", "ss", "\x00s"]
    for name in sessions:
        pad = store.notepad(name)
        pad.write(f"notes of {name!r}")
        pad.set_plan(f"plan of {name!r}")
        pad.refs_add(name or "empty")
    store.put(b"an observation", session="s")
    assert store.delete_session("s") == 1
    assert store.notepad("s").spaces() == {} and store.notepad("s").read() == ""
    assert store.notepad("s").history() == []
    for name in sessions[1:]:
        assert store.notepad(name).read() == f"notes of {name!r}"
        assert store.notepad(name).spaces() == {"notepad": 1, "plan": 1, "refs": 1}
    assert store.delete_session("") == 0  # a session without entries still loses its notepad
    assert store.notepad("").spaces() == {}
    for name in sessions[1:]:
        if name:
            assert store.notepad(name).delete() == 3
    assert notes_keys(store) == []


@pytest.mark.engines("lmdb")  # the memory engine's data is gone at close
def test_notepad_survives_closing_and_reopening(store_factory):
    s = store_factory("persist")
    pad = s.notepad("s")
    pad.write("findings")
    pad.set_notes("notes")
    pad.set_plan("plan")
    pad.refs_set(["a", "b"])
    pad.scratchpad("scratch")
    pad.write("findings v2")
    s.close()
    s2 = store_factory("persist")
    pad2 = s2.notepad("s")
    assert (pad2.read(), pad2.read("notes"), pad2.read("plan"), pad2.refs(), pad2.read("scratchpad")) == (
        "findings v2", "notes", "plan", ["a", "b"], "scratch")
    assert [v.version for v in pad2.history()] == [2, 1] and pad2.read(version=1) == "findings"
    assert pad2.spaces() == {"notepad": 2, "notes": 1, "plan": 1, "refs": 1, "scratchpad": 1}
    with pytest.raises(blobpad.BlobpadError, match="closed"):
        pad.read()


def test_no_ttl_unless_asked(store_factory):
    now = [1_000_000.0]
    s = store_factory("ttl", clock=lambda: now[0])
    forever = s.notepad("forever")
    forever.write("keep")
    brief = s.notepad("brief", ttl=60)
    brief.write("short-lived")
    brief.refs_add("x")
    now[0] += 59
    assert brief.read() == "short-lived" and purge_expired(s) == 0
    now[0] += 2
    assert brief.read() == "" and brief.refs() == [] and brief.spaces() == {} and brief.history() == []
    assert purge_expired(s) == 1 and purge_expired(s) == 0
    now[0] += 10 ** 9
    assert forever.read() == "keep" and purge_expired(s) == 0
    # an expired notepad is replaced, not resurrected, by its next change
    brief.write("again")
    now[0] += 61
    r = brief.update("append", content="more")
    assert brief.read() == "more" and r.version == 1
    # a change through a handle without ttl removes the expiry
    s.notepad("brief").write("now permanent")
    now[0] += 10 ** 9
    assert brief.read() == "now permanent"


def test_store_gc_removes_expired_notepads_and_only_them(store_factory):
    now = [1_000_000.0]
    s = store_factory("gc-ttl", clock=lambda: now[0])
    s.notepad("forever").write("keep")
    s.notepad("brief", ttl=60).write("short-lived")
    s.notepad("later", ttl=600).set_plan("a plan")
    assert s.gc().notepads == 0
    now[0] += 61
    assert s.gc().notepads == 1
    assert purge_expired(s) == 0  # gc really deleted it: nothing is left to purge
    assert s.notepad("forever").read() == "keep" and s.notepad("later").read("plan") == "a plan"
    assert s.notepad("brief").spaces() == {}
    now[0] += 600
    report = s.gc()
    assert report.notepads == 1 and report.to_dict()["notepads"] == 1
    assert s.notepad("forever").read() == "keep"


def test_puts_sweep_expired_notepads_a_batch_at_a_time(store_factory, monkeypatch):
    """The sweep that follows a put removes expired notepads too (texts and all), at most
    SWEEP_LIMIT at a time, and sweeps again at the next put while a whole batch went;
    live notepads and an expiry index record naming nothing stay or go as they should."""
    import blobpad.store as store_module
    from blobpad.maintenance import SWEEP_LIMIT
    from blobpad.notes import expiry_key, meta_key

    monkeypatch.setattr(store_module, "SWEEP_SECONDS", 0.0)
    now = [1_000_000.0]
    s = store_factory("sweep-pads", clock=lambda: now[0])
    s.notepad("forever").write("keep")
    s.notepad("later", ttl=600).set_plan("a plan")
    for i in range(SWEEP_LIMIT + 5):
        s.notepad(f"brief-{i}", ttl=60).write(f"short-lived {i}")
    # an index record naming a notepad that does not expire then (as an older store could hold)
    stale = expiry_key(now[0] + 30, "forever")
    s.engine.write(lambda txn: txn.put("notes", stale, b""))
    monkeypatch.setattr(store_module, "SWEEP_SECONDS", 3600.0)
    before = notes_keys(s)
    now[0] += 61
    s.put("one", ttl=None)  # removes a whole batch (the stale record takes a place in it)

    def held() -> int:  # the brief notepads whose records are still there (expired ones read as empty)
        with s.engine.read() as txn:
            return sum(txn.get("notes", meta_key(f"brief-{i}")) is not None for i in range(SWEEP_LIMIT + 5))

    assert held() == 6
    s.put("two", ttl=None)  # a whole batch went: this put sweeps again
    assert held() == 0
    assert all(s.notepad(f"brief-{i}").spaces() == {} for i in range(SWEEP_LIMIT + 5))
    assert s.notepad("forever").read() == "keep" and s.notepad("later").read("plan") == "a plan"
    assert len(notes_keys(s)) < len(before) and blob_keys(s) == 2 and stale not in notes_keys(s)
    assert s.gc().notepads == 0  # nothing was left for gc()
    report = s.verify()
    assert report.ok, report.problems


_CHILD = textwrap.dedent("""
    import os, sys, time
    import blobpad
    path, tag, go, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = blobpad.open(path)
    pad = store.notepad("shared", max_versions=10_000)
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(n):
        assert pad.update("append", content=f"{tag}-{i}").ok
        assert pad.refs_add(f"{tag}-{i}").ok
    store.close()
""")


def test_two_processes_appending_lose_nothing(tmp_path):
    path = str(tmp_path / "store")
    blobpad.open(path).close()
    go = str(tmp_path / "go")
    n = 60
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, path, tag, go, str(n)], env=env) for tag in "AB"]
    with open(go, "w"):
        pass
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with blobpad.open(path) as s:
        pad = s.notepad("shared")
        lines = pad.read().split("\n")
        assert sorted(lines) == sorted(f"{t}-{i}" for t in "AB" for i in range(n))
        for tag in "AB":  # each writer's lines in its own order
            assert [line for line in lines if line.startswith(tag)] == [f"{tag}-{i}" for i in range(n)]
        assert pad.version() == 2 * n and len(pad.history(limit=1000)) == 2 * n
        refs = pad.refs()
        assert len(refs) == 50 and pad.version("refs") == 2 * n
        for tag in "AB":  # each writer's newest refs, in order, the older ones dropped
            mine = [int(r[2:]) for r in refs if r.startswith(tag)]
            assert mine == list(range(n - len(mine), n))


# -- the model: random operations against an in-memory oracle ------------------------------------


class Model:
    """What a notepad with notes (40 characters), scratchpad (10 tokens) and refs (5) should do."""

    def __init__(self) -> None:
        self.text = {"notes": "", "scratchpad": ""}
        self.refs: list[str] = []
        self.versions = {"notes": 0, "scratchpad": 0, "refs": 0}

    @staticmethod
    def tokens(text: str) -> int:
        non_ascii = sum(1 for c in text if ord(c) > 127)
        return non_ascii + -(-(len(text) - non_ascii) // 4)

    def count(self, space: str, text: str) -> int:
        return self.tokens(text) if space == "scratchpad" else len(text)

    def bump(self, space: str, new) -> bool:
        old = self.refs if space == "refs" else self.text[space]
        if new == old:
            return False
        if space == "refs":
            self.refs = new
        else:
            self.text[space] = new
        self.versions[space] += 1
        return True

    def write(self, space: str, content: str) -> tuple:
        limit = 10 if space == "scratchpad" else 40
        units = "tokens" if space == "scratchpad" else "characters"
        original = self.count(space, content)
        new = content
        if original > limit:
            new = content[:limit] if space == "notes" else max(
                (content[:k] for k in range(len(content) + 1) if self.tokens(content[:k]) <= limit), key=len)
        changed = self.bump(space, new)
        used = self.count(space, new)
        if original > limit:
            msg = (f"Scratchpad truncated to {limit} tokens (original: {original}). Consider summarizing."
                   if space == "scratchpad" else
                   f"notes truncated to {limit} characters (original: {original}); the end was cut off. "
                   "Use set_notes with a tighter summary.")
        elif space == "scratchpad":
            msg = f"Scratchpad updated ({used} tokens / {limit} budget)"
        else:
            msg = f"notes updated ({used}/{limit} {units})"
        return True, changed, msg

    def append(self, space: str, content: str) -> tuple:
        limit = 10 if space == "scratchpad" else 40
        cur = self.text[space]
        new = cur + content  # seeds 001 and 004: end to end
        combined, current, added = self.count(space, new), self.count(space, cur), self.count(space, content)
        if combined > limit:
            if space == "scratchpad":
                msg = (f"Append would exceed {limit} token budget (current: {current}, append: {added}). "
                       "Use mode 'replace' to rewrite, or reduce content.")
            else:
                msg = (f"append_notes rejected: notes would be {combined} characters, over its {limit}-character "
                       f"budget (current: {current}, append: {added}); notes unchanged. "
                       "Use set_notes to overwrite it with a summary, or add less.")
            return False, False, msg
        changed = self.bump(space, new)
        used = self.count(space, new)
        msg = (f"Scratchpad updated ({used} tokens / {limit} budget)" if space == "scratchpad"
               else f"notes updated ({used}/{limit} characters)")
        return True, changed, msg

    def refs_add(self, ref: str) -> tuple:
        if ref in self.refs:
            new = [r for r in self.refs if r != ref] + [ref]
            note = "already present; moved to newest" if new != self.refs else "already present"
            changed = self.bump("refs", new)
            return True, changed, f"ref {note} ({len(new)}/5 refs)"
        new = self.refs + [ref]
        dropped = new[:-5] if len(new) > 5 else []
        new = new[len(dropped):]
        self.bump("refs", new)
        msg = f"ref added ({len(new)}/5 refs)" + ("; dropped the oldest: " + repr(dropped[0]) if dropped else "")
        return True, True, msg

    def refs_remove(self, ref: str) -> tuple | None:
        if ref not in self.refs:
            return None
        self.bump("refs", [r for r in self.refs if r != ref])
        return True, True, f"ref removed ({len(self.refs)}/5 refs)"


def test_random_operations_match_the_model(store):
    rng = random.Random(5)
    pad = store.notepad("m", budgets={"notes": 40, "scratchpad": 10, "refs": 5})
    model = Model()
    words = ["a", "bc", "def ", "ghij\n", "é", "漢字", "\n", "", "longer phrase here"]
    names = ["r1", "r2", "r3", "r4", "r5", "r6", "r7"]
    for step in range(300):
        op = rng.choice(["set_notes", "append_notes", "replace", "append", "add", "remove"])
        content = "".join(rng.choice(words) for _ in range(rng.randrange(0, 12)))
        ref = rng.choice(names)
        if op == "set_notes":
            got, want = pad.set_notes(content), model.write("notes", content)
        elif op == "append_notes":
            got, want = pad.append_notes(content), model.append("notes", content)
        elif op == "replace":
            got, want = pad.scratchpad(content), model.write("scratchpad", content)
        elif op == "append":
            got, want = pad.scratchpad(content, mode="append"), model.append("scratchpad", content)
        elif op == "add":
            got, want = pad.refs_add(ref), model.refs_add(ref)
        else:
            want = model.refs_remove(ref)
            if want is None:
                with pytest.raises(InvalidArgument):
                    pad.refs_remove(ref)
                continue
            got = pad.refs_remove(ref)
        assert (got.ok, got.changed, got.message) == want, (step, op, content, ref)
        assert (pad.read("notes"), pad.read("scratchpad"), pad.refs()) == (
            model.text["notes"], model.text["scratchpad"], model.refs), step
        assert {sp: pad.version(sp) for sp in model.versions} == model.versions
        assert got.version == model.versions[got.space]
    assert all(v > 10 for v in model.versions.values())  # every path was exercised


# -- hostile arguments (they come from a language model) ---------------------------------------

_HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30), st.just(10 ** 5000),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), st.just(""), st.just("\ud800"),
    st.binary(max_size=5), st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_CALLS = {
    "write": lambda p, a, b: p.write(a, space=b), "append": lambda p, a, b: p.append(a, space=b),
    "prepend": lambda p, a, b: p.prepend(a), "find_replace": lambda p, a, b: p.find_replace(a, b),
    "find_replace_all": lambda p, a, b: p.find_replace("x", "y", replace_all=a),
    "delete_text": lambda p, a, b: p.delete_text(a), "update": lambda p, a, b: p.update(a, content=b),
    "update_find": lambda p, a, b: p.update_notepad("find_replace", find=a, replace=b),
    "set_notes": lambda p, a, b: p.set_notes(a), "append_notes": lambda p, a, b: p.append_notes(a),
    "set_plan": lambda p, a, b: p.set_plan(a), "refs_add": lambda p, a, b: p.refs_add(a),
    "refs_remove": lambda p, a, b: p.refs_remove(a), "refs_set": lambda p, a, b: p.refs_set(a),
    "scratchpad": lambda p, a, b: p.scratchpad(a, mode=b), "read": lambda p, a, b: p.read(a),
    "read_version": lambda p, a, b: p.read(version=a), "history": lambda p, a, b: p.history(limit=a),
    "revert": lambda p, a, b: p.revert(a), "refs": lambda p, a, b: p.refs(a),
    "render": lambda p, a, b: p.render_spaces(a), "spawn": lambda p, a, b: p.spawn(a, copy_notepad=b),
    "session": lambda p, a, b: Notepad(p.store, a), "ttl": lambda p, a, b: Notepad(p.store, "t", ttl=a),
    "budgets": lambda p, a, b: Notepad(p.store, "t", budgets={"notes": a}).set_notes("abc"),
    "budget_space": lambda p, a, b: Notepad(p.store, "t", budgets={a if isinstance(a, Hashable) else repr(a): 5}),
    "max_versions": lambda p, a, b: Notepad(p.store, "t", max_versions=a),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(_CALLS)), _HOSTILE, _HOSTILE)
def test_hostile_arguments_raise_only_short_blobpad_errors(store, call, a, b):
    """One store for all examples, on purpose: the notepad carries state from call to call."""
    pad = store.notepad("fuzz")
    if pad.version() == 0:
        pad.write("x y x")
        pad.refs_add("a")
    try:
        result = _CALLS[call](pad, a, b)
    except (InvalidArgument, NotFound) as exc:
        assert len(str(exc)) < 600
    else:
        if isinstance(result, NoteResult):
            json.dumps(result.to_dict())
    assert isinstance(pad.read(), str) and all(isinstance(r, str) for r in pad.refs())


# -- seed 001's opt-in nudges --------------------------------------------------------------

PLAN = "Plan:\n1. Reproduce the bug\n2. Fix the parser\n3. Add a test"


def test_nudges_are_all_off_by_default(store):
    n = blobpad.Nudges(store.notepad("n0"))
    for _ in range(30):
        assert n.turn(PLAN) == []
    n.compacted()
    assert n.turn() == [] and n.steer(PLAN, "continue") == "continue"


def test_nudge_after_n_empty_turns_repeats_every_n_while_empty(store):
    pad = store.notepad("n1")
    n = blobpad.Nudges(pad, after_turns=3)
    got = [n.turn() for _ in range(7)]
    assert [len(h) for h in got] == [0, 0, 1, 0, 0, 1, 0]
    assert got[2] == [NUDGE_TEXTS["after_turns"].format(n=3)] and "after 3 turns" in got[2][0]
    pad.write("seed 002's freeform space is not one of seed 001's")
    assert [len(n.turn()) for _ in range(2)] == [0, 1]  # turns 8 and 9: the third empty turn since the last hint
    pad.refs_add("src/parser.py")
    assert all(n.turn() == [] for _ in range(10))


def test_nudge_on_a_plan_while_the_scratchpad_is_empty(store):
    pad = store.notepad("n2")
    n = blobpad.Nudges(pad, on_plan_detected=1)
    hint = [NUDGE_TEXTS["on_plan_detected"]]
    assert n.turn("I will look at the parser first.") == []
    assert n.turn(PLAN) == hint
    assert n.turn("- [ ] reproduce\n- [x] read the log\n  - [ ] fix") == hint
    assert n.turn("Step 1: read the log\nStep 2: fix\nstep 3: test") == hint
    assert n.turn("1. only two\n2. items") == []
    assert n.turn("We fixed 3 bugs in 2024. Version 1.2 is out, 4.5 next, 10.0 later") == []
    pad.set_plan("1. Reproduce")
    assert n.turn(PLAN) == []


def test_nudge_after_compaction_fires_once(store):
    n = blobpad.Nudges(store.notepad("n3"), after_compaction=1)
    assert n.turn() == []
    n.compacted()
    assert n.turn() == [NUDGE_TEXTS["after_compaction"]] and n.turn() == []


def test_nudge_when_the_scratchpad_was_not_touched_for_n_turns(store):
    pad = store.notepad("n4")
    pad.append_notes("root cause: timezone")
    n = blobpad.Nudges(pad, turns_since_last_use=2)
    hint = [NUDGE_TEXTS["turns_since_last_use"].format(n=2)]
    assert [n.turn(), n.turn(), n.turn()] == [[], hint, []]
    pad.set_plan("1. fix")                      # a change resets the count
    assert [n.turn(), n.turn(), n.turn()] == [[], [], hint]
    pad.set_plan("1. fix")                      # the same content again is no change
    assert [n.turn(), n.turn()] == [[], hint]


def test_nudges_steer_the_next_message_and_combine(store):
    pad = store.notepad("n5")
    n = blobpad.Nudges(pad, after_turns=1, on_plan_detected=1, after_compaction=1)
    n.compacted()
    out = n.steer(PLAN, "what's next?")
    assert out.split("\n") == [
        NUDGE_TEXTS["after_turns"].format(n=1), NUDGE_TEXTS["on_plan_detected"], NUDGE_TEXTS["after_compaction"],
        "what's next?",
    ]
    assert all(line.startswith("[Hint: ") and line.endswith("]") for line in out.split("\n")[:3])


@pytest.mark.parametrize("options", [
    {"after_turns": -1}, {"after_turns": True}, {"on_plan_detected": 1.5}, {"turns_since_last_use": 10**7},
    {"spaces": ("nope",)},
])
def test_bad_nudge_options_are_invalid_arguments(store, options):
    with pytest.raises(InvalidArgument):
        blobpad.Nudges(store.notepad("n6"), **options)


def test_nudges_reject_a_non_string_reply(store):
    with pytest.raises(InvalidArgument):
        blobpad.Nudges(store.notepad("n7"), on_plan_detected=1).turn(None)


def test_a_version_record_gone_from_the_middle_of_a_history_is_said_never_skipped(store):
    """Versions are pruned oldest first, so those kept are a run: one whose record is gone (a key a
    server lost, or deleted by hand) makes history() raise CorruptData naming the gap, where it listed
    the others as if nothing were missing; verify() names the gap too."""
    from blobpad.notes import SPACE, log_key

    pad = store.notepad("s")
    for text in ("one", "two", "three", "four"):
        pad.write(text)
    assert [v.version for v in pad.history()] == [4, 3, 2, 1]
    store.engine.engine.write(lambda txn: txn.delete(SPACE, log_key("s", "notepad", 2)))
    with pytest.raises(blobpad.CorruptData, match="lacks versions 2 to 2"):
        pad.history()
    assert [v.version for v in pad.history(limit=2)] == [4, 3]  # what lies before the gap still reads
    problems = store.verify().problems
    assert any("lacks version 2 between 1 and 4" in p for p in problems), problems


_APPENDER = """
import sys, os, blobpad
target, stop, count = sys.argv[1], sys.argv[2], sys.argv[3]
with blobpad.open(target) as store:
    pad = store.notepad("s")
    n = 0
    while not os.path.exists(stop):
        pad.append(f"more {n}")
        n += 1
        if n % 5 == 0:
            with open(count, "w") as fh:
                fh.write(str(n))
"""


@pytest.mark.parametrize("delete", ["notepad", "session"])
def test_a_notepad_is_deleted_while_another_writer_keeps_appending_to_it(engine_name, target, tmp_path, delete):
    """Deleting a notepad commits while another writer appends to it without pause (another
    process; a thread on the memory engine), on every engine.  On an optimistic engine (Redis)
    the deletion, which reads every version the notepad keeps, conflicted with every append,
    each shorter than it, and gave up after retry_seconds; a write that keeps conflicting now
    claims the turn to go first."""
    mine = blobpad.open(target())
    try:
        pad = mine.notepad("s")
        pad.write("the plan", space="plan")
        entry = mine.put("an entry of the session\n", session="s")
        stop, count = tmp_path / "stop", tmp_path / "count"
        if engine_name == "memory":  # a store of this process: a thread of it appends
            errors: list[BaseException] = []

            def append() -> None:
                with blobpad.open(target()) as theirs:
                    other, n = theirs.notepad("s"), 0
                    while not stop.exists():
                        try:
                            other.append(f"more {n}")
                        except BaseException as exc:  # noqa: BLE001 - handed to the test
                            errors.append(exc)
                            return
                        n += 1
                        count.write_text(str(n))

            writer: Any = threading.Thread(target=append, daemon=True)
            writer.start()
        else:
            writer = subprocess.Popen([sys.executable, "-c", _APPENDER, target(), str(stop), str(count)],
                                      stderr=subprocess.PIPE, text=True)
        def appended() -> int:  # the file is being rewritten: empty for a moment
            try:
                return int(count.read_text() or 0)
            except (OSError, ValueError):
                return 0

        try:
            deadline = time.monotonic() + 60
            while appended() < 200:  # a notepad of 100 versions, and growing
                assert time.monotonic() < deadline, "the appender did not start"
                time.sleep(0.01)
            if delete == "notepad":
                assert pad.delete() >= 1
            else:
                assert mine.delete_session("s") == 1 and not mine.exists(entry.id)
            before = appended()
            while appended() < before + 5:  # the appends went on meanwhile, and go on
                assert time.monotonic() < deadline, "the appender stopped"
                time.sleep(0.01)
        finally:
            stop.write_text("")
            if isinstance(writer, threading.Thread):
                writer.join(30)
                assert not writer.is_alive() and not errors, errors
            else:
                assert writer.wait(60) == 0, writer.stderr.read()[-2000:]
        # what is left is what the appender wrote after the deletion: a notepad of its own
        assert mine.notepad("s").read("plan") == "" and not mine.notepad("s").read().startswith("more 0")
        history = mine.notepad("s").history(limit=1000)
        assert [v.version for v in history] == sorted((v.version for v in history), reverse=True)
        assert mine.verify().ok
    finally:
        mine.close()
