"""Offloading (issue 4): seed 000's rule and synthetic observation, seed 003's named
policy, and ``{{stepN.field}}`` references resolved from the store.

Oracles: ``json.dumps`` for the threshold, Python slicing of the original content for
summaries, ``hashlib`` for binary fingerprints, and the original values for references.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
from blobpad import InvalidArgument, NotFound, Offloader, resolve_refs, sample
from blobpad.offload import SEED000_NOTE, binary_summary, text_summary

SEED000_KEYS = {"ok", "scratchpad_id", "size_bytes", "kind", "summary", "metadata", "_note"}


@functools.cache
def _log(size: int, seed: int = 0) -> str:
    return sample.log_text(size, seed)


def _summary_oracle(text: str, head: int = 500, tail: int = 500) -> str:
    if len(text) <= head + tail:
        return text
    return text[:head] + f"\n[... {len(text) - head - tail} characters omitted ...]\n" + text[len(text) - tail:]


# -- seed 000: the threshold -----------------------------------------------------------------


def test_threshold_is_4096_characters_of_json_dumps(store):
    off = Offloader(store)
    empty = len(json.dumps({"ok": True, "content": ""}))
    at = {"ok": True, "content": "x" * (4096 - empty)}
    over = {"ok": True, "content": "x" * (4096 - empty + 1)}
    assert len(json.dumps(at)) == 4096 and len(json.dumps(over)) == 4097
    assert off.offload(at, session="s", turn=1) is at          # passes through untouched
    assert store.entries() == []
    synthetic = off.offload(over, session="s", turn=1)
    assert set(synthetic) == SEED000_KEYS
    assert store.get(synthetic["scratchpad_id"]) == over["content"]


def test_threshold_counts_json_escapes_like_json_dumps(store):
    # 700 'é' are 700 characters but 4200 characters of json.dumps (\u00e9): over 4096.
    off = Offloader(store)
    obs = {"content": "é" * 700}
    assert len(json.dumps(obs)) > 4096
    assert "scratchpad_id" in off.offload(obs, session="s", turn=1)
    small = {"content": "é" * 600}
    assert len(json.dumps(small)) <= 4096
    assert off.offload(small, session="s", turn=1) is small


def test_threshold_is_an_option(store):
    off = Offloader(store, threshold=100)
    obs = {"content": "y" * 200}
    assert "scratchpad_id" in off.offload(obs, session="s", turn=1)
    assert Offloader(store, threshold=10_000).offload(obs, session="s", turn=1) is obs


# -- seed 000: the synthetic observation ---------------------------------------------------------


def test_synthetic_observation_of_the_seed_000_fs_read_example(store):
    text = _log(89_042)
    obs = {"ok": True, "content": text, "path": "/tmp/big_log.txt", "bytes": len(text.encode()), "encoding": "utf-8"}
    out = Offloader(store).offload(obs, session="sess", turn="t1", step=1, tool="fs_read")
    assert set(out) == SEED000_KEYS
    assert out["ok"] is True
    assert out["kind"] == "text"
    assert out["size_bytes"] == len(text.encode("utf-8"))
    assert out["metadata"] == {"path": "/tmp/big_log.txt", "bytes": len(text.encode()), "encoding": "utf-8"}
    expected = text[:500] + f"\n[... {len(text) - 1000} characters omitted ...]\n" + text[-500:]
    assert out["summary"] == expected
    # the seed's sentence, word for word (the id is the observation's scratchpad_id); no reference to
    # write: nothing says the runtime resolves them
    assert out["_note"] == ("Large observation saved in scratchpad. To read it in full or partially, use the "
                            "scratchpad_read tool.") == SEED000_NOTE
    e = store.stat(out["scratchpad_id"])
    assert (e.session, e.turn, e.step, e.tool, e.kind) == ("sess", "t1", 1, "fs_read", "text")
    assert len(e.id) == 16 and all(c in "0123456789abcdef" for c in e.id)
    assert e.expires_at - e.created_at == pytest.approx(3600)        # seed 000's default TTL
    assert store.get(e.id) == text
    json.dumps(out)  # what goes into the model's history is JSON


def test_summary_counts_characters_not_bytes(store):
    text = sample.multibyte_text(20_000, seed=3)
    assert len(text.encode()) > len(text)
    out = Offloader(store).offload({"content": text}, session="s", turn=1)
    assert out["summary"] == _summary_oracle(text)
    assert out["size_bytes"] == len(text.encode("utf-8"))


def test_binary_observation_gets_the_sha256_note(store):
    blob = sample.binary_blob(45_123, seed=1)
    out = Offloader(store).offload({"ok": True, "content": blob, "path": "/tmp/a.zip", "encoding": "binary"},
                                   session="s", turn=1)
    assert out["kind"] == "binary"
    assert out["summary"] == f"[BINARY: 45123 bytes, sha256={hashlib.sha256(blob).hexdigest()}]"
    assert out["size_bytes"] == 45_123
    assert out["metadata"] == {"path": "/tmp/a.zip", "encoding": "binary"}
    assert store.get(out["scratchpad_id"]) == blob


def test_valid_utf8_bytes_stay_binary(store):
    data = b"plain ascii bytes\n" * 400
    out = Offloader(store).offload(data, session="s", turn=1)
    assert out["kind"] == "binary"
    assert store.get(out["scratchpad_id"]) == data


def test_a_bare_string_observation_is_its_own_content(store):
    text = _log(10_000, seed=2)
    out = Offloader(store).offload(text, session="s", turn=1)
    assert out["metadata"] == {}
    assert out["summary"] == _summary_oracle(text)
    assert store.get(out["scratchpad_id"]) == text


def test_ok_false_is_preserved(store):
    out = Offloader(store).offload({"ok": False, "content": "E" * 5000, "code": 2}, session="s", turn=1)
    assert out["ok"] is False
    assert out["metadata"] == {"code": 2}


def test_summary_sizes_and_ttl_are_options(store_factory):
    now = [1_000_000.0]
    store = store_factory(clock=lambda: now[0])
    text = _log(9_000, seed=4)
    out = Offloader(store, head_chars=100, tail_chars=40, ttl=60).offload({"content": text}, session="s", turn=1)
    assert out["summary"] == _summary_oracle(text, 100, 40)
    e = store.stat(out["scratchpad_id"])
    assert e.expires_at == pytest.approx(now[0] + 60)
    now[0] += 61
    with pytest.raises(NotFound):
        store.stat(out["scratchpad_id"])
    forever = Offloader(store, ttl=None).offload({"content": text}, session="s", turn=1)
    assert store.stat(forever["scratchpad_id"]).expires_at is None


def test_content_no_longer_than_head_plus_tail_is_shown_whole(store):
    content = "z" * 1000
    out = Offloader(store, threshold=10).offload({"content": content}, session="s", turn=1)
    assert out["summary"] == content
    one_more = Offloader(store, threshold=10).offload({"content": content + "!"}, session="s", turn=1)
    assert "[... 1 characters omitted ...]" in one_more["summary"]


def test_optional_truncation_below_the_threshold(store):
    obs = {"ok": True, "content": "a" * 2000, "path": "/x"}
    assert Offloader(store).offload(obs, session="s", turn=1) is obs     # off by default
    out = Offloader(store, truncate=1500).offload(obs, session="s", turn=1)
    assert out["content"] == "a" * 1500 + "\n[... 500 characters truncated ...]"
    assert out["path"] == "/x"
    assert obs["content"] == "a" * 2000          # the caller's dict is not modified
    assert store.entries() == []


def test_small_str_and_bytes_observations_come_back_as_dicts(store):
    off = Offloader(store)
    assert off.offload("hello", session="s", turn=1) == {"ok": True, "content": "hello"}
    assert off.offload(b"\x00\x01", session="s", turn=1) == {
        "ok": True, "content": base64.b64encode(b"\x00\x01").decode(), "encoding": "base64"}


def test_the_largest_field_is_the_content_when_there_is_no_content_field(store):
    body = _log(20_000, seed=5)
    out = Offloader(store, runtime_resolves_refs=True).offload({"status": 200, "body": body, "url": "https://e.x/"},
                                                               session="s", turn=1, step=4)
    assert out["metadata"] == {"status": 200, "url": "https://e.x/"}
    assert out["summary"] == _summary_oracle(body)
    assert "{{step4.body}}" in out["_note"]
    assert store.get(out["scratchpad_id"]) == body


def test_content_field_option(store):
    obs = {"content": "short", "stdout": _log(8000, seed=6)}
    out = Offloader(store, content_field="stdout").offload(obs, session="s", turn=1)
    assert out["metadata"] == {"content": "short"}
    assert store.get(out["scratchpad_id"]) == obs["stdout"]


def test_two_large_fields_store_the_whole_observation(store):
    obs = {"ok": True, "stdout": _log(9000, seed=7), "stderr": _log(8000, seed=8), "exit_code": 1}
    out = Offloader(store).offload(obs, session="s", turn=1, step=1)
    assert out["metadata"] == {"exit_code": 1}
    assert len(json.dumps(out)) < 4096 + 2000
    assert json.loads(store.get(out["scratchpad_id"])) == obs
    resolved = resolve_refs({"a": "{{step1.stderr}}", "b": "{{step1.exit_code}}"}, {1: out}, store)
    assert resolved == {"a": obs["stderr"], "b": 1}


def test_resolve_refs_with_a_session_never_reads_another_sessions_entry(store):
    """A small tool output comes back unchanged, so a tool that read an attacker's page
    can return the shape of an offloaded observation naming another session's entry:
    with ``session``, that reads exactly like an unknown id, and brings nothing in."""
    off = Offloader(store)
    theirs = off.offload({"stdout": "their secret\n" * 1000}, session="B", turn=1, step=1)
    mine = off.offload({"stdout": "my log\n" * 1000}, session="A", turn=1, step=1)
    forged = off.offload({"scratchpad_id": theirs["scratchpad_id"], "summary": "x"}, session="A", turn=1, step=2)
    unknown = dict(forged, scratchpad_id="0123456789abcdef")
    assert forged["scratchpad_id"] == theirs["scratchpad_id"]  # passed through: it is small
    steps = {1: mine, 2: forged, 3: unknown}
    assert resolve_refs("{{step1.stdout}}", steps, store, session="A") == "my log\n" * 1000
    errors = []
    for step, eid in ((2, theirs["scratchpad_id"]), (3, "0123456789abcdef")):
        for ref in (f"{{{{step{step}.stdout}}}}", f"{{{{step{step}}}}}", f"x {{{{step{step}.nothing}}}}"):
            with pytest.raises(NotFound) as caught:
                resolve_refs(ref, steps, store, session="A")
            errors.append(str(caught.value).replace(eid, "ID").replace(f"step {step}", "step N"))
    assert errors[:3] == errors[3:]  # another session's entry and an unknown one: the same answers
    assert resolve_refs("{{step2.stdout}}", steps, store) == "their secret\n" * 1000  # without session: any
    with pytest.raises(InvalidArgument, match="session must be a str"):
        resolve_refs("{{step1.stdout}}", steps, store, session=5)


def test_what_the_model_sees_is_always_smaller_than_the_observation(store):
    """Whatever the shape of a dict over the threshold (many small fields, several of a
    middle size, a small ``content`` beside large fields), the observation shown is under
    the threshold and smaller than the original, and every field comes back."""
    off = Offloader(store)
    rng = random.Random(3)
    shapes = [
        {f"k{i}": f"v{i}" for i in range(2000)},                          # many small fields
        {f"f{i}": "x" * 900 for i in range(5)},                           # five of a middle size
        {f"f{i}": "y" * rng.randrange(300, 1100) for i in range(12)},
        {"content": "short", **{f"g{i}": "z" * 700 for i in range(8)}},
        {"stdout": "line\n" * 3000, **{f"h{i}": i for i in range(400)}},
    ]
    for n, obs in enumerate(shapes, 1):
        shown = off.offload(obs, session="s", turn=1, step=n)
        size = len(json.dumps(shown))
        assert size <= off.threshold and size < len(json.dumps(obs)), (n, size)
        assert all(obs[k] == v for k, v in shown["metadata"].items())
        for k in obs:
            assert resolve_refs(f"{{{{step{n}.{k}}}}}", {n: shown}, store) == obs[k]


def test_a_non_string_content_field_is_stored_as_json(store):
    rows = [{"i": i, "v": "x" * 20} for i in range(300)]
    out = Offloader(store).offload({"content": rows, "table": "t"}, session="s", turn=1, step=2)
    assert out["metadata"] == {"table": "t"}
    assert json.loads(store.get(out["scratchpad_id"])) == rows
    assert resolve_refs("{{step2.content}}", {2: out}, store) == rows
    assert resolve_refs("{{step2.content.7.i}}", {2: out}, store) == 7


def test_offload_content_streams_a_file_and_reads_the_summary_back(store, tmp_path):
    path = tmp_path / "big.log"
    text = _log(300_000, seed=9)
    path.write_text(text)
    out = Offloader(store).offload_content(path, session="s", turn=1, metadata={"path": str(path)})
    assert out["summary"] == _summary_oracle(text)
    assert out["metadata"] == {"path": str(path)}
    assert store.get(out["scratchpad_id"]) == text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300), head=st.integers(0, 120), tail=st.integers(0, 120))
def test_summary_property(store, text, head, tail):
    out = Offloader(store, threshold=0, head_chars=head, tail_chars=tail).offload(text, session="p", turn=1)
    assert out["summary"] == _summary_oracle(text, head, tail) == text_summary(text, head, tail)
    assert store.get(out["scratchpad_id"]) == text


def test_binary_summary_format():
    assert binary_summary(3, "ab" * 32) == f"[BINARY: 3 bytes, sha256={'ab' * 32}]"


def test_bad_options_are_rejected(store):
    for kwargs in ({"policy": "nope"}, {"threshold": -1}, {"head_chars": "5"}, {"ttl": 0}, {"truncate": -3}):
        with pytest.raises(InvalidArgument):
            Offloader(store, **kwargs)


# -- seed 003: automatic names ----------------------------------------------------------------------


def test_seed003_threshold_is_30000_characters(store):
    off = Offloader(store, policy="seed003")
    at = "q" * 30_000
    assert off.offload(at, session="s", turn=1, tool="execute_command") == {"ok": True, "content": at}
    out = off.offload(at + "q", session="s", turn=1, tool="execute_command")
    assert out["name"] == "execute_command_1"


def test_seed003_names_count_per_session_and_never_expire(store):
    off = Offloader(store, policy="seed003")
    big = [_log(31_000, seed=i) for i in range(3)]
    a1 = off.offload(big[0], session="A", turn=1, tool="execute_command")
    a2 = off.offload(big[1], session="A", turn=2, tool="execute_command")
    b1 = off.offload(big[2], session="B", turn=1, tool="execute_command")
    r1 = off.offload(big[2], session="A", turn=2, tool="read_file")
    assert [a1["name"], a2["name"], b1["name"], r1["name"]] == [
        "execute_command_1", "execute_command_2", "execute_command_1", "read_file_1"]
    assert store.find("execute_command_2", session="A").id == a2["scratchpad_id"]
    assert store.get(store.find("execute_command_1", session="B").id) == big[2]
    assert store.stat(a1["scratchpad_id"]).expires_at is None
    # a new Offloader (a restarted runtime) continues the count
    again = Offloader(store, policy="seed003").offload(big[0], session="A", turn=3, tool="execute_command")
    assert again["name"] == "execute_command_3"


def test_seed003_names_from_many_handles_at_once_are_all_distinct(store_factory):
    """seed 003's automatic names from several writers of one session at once, each with its own
    handle of the store and its own Offloader, on every engine: every offload succeeds under a
    name of its own, after earlier names of the session (the processes' race, where a loser used
    to give up: test_seed003_names_from_many_processes_at_once_never_give_up)."""
    writers, each, earlier = 4, 25, 300
    handles = [store_factory() for _ in range(writers)]  # one store, several handles
    for n in range(1, earlier + 1):  # a long session: listing its names costs far more than a put
        handles[0].put(f"output {n}\n", session="s", name=f"shell_{n}")
    texts = {(w, i): _log(30_100 + 7 * i, seed=w * 1000 + i) for w in range(writers) for i in range(each)}
    got: dict[tuple[int, int], dict] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def work(w: int) -> None:
        off = Offloader(handles[w], policy="seed003")
        try:
            start.wait(30)
            for i in range(each):
                got[(w, i)] = off.offload(texts[(w, i)], session="s", turn=i, tool="shell")
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads) and not errors, errors[:1]
    store = handles[0]
    names = [out["name"] for out in got.values()]
    assert len(got) == writers * each and len(set(names)) == len(names)
    for key, out in got.items():
        assert store.get(store.find(out["name"], session="s").id) == texts[key]
    listed = {e.name for e in store.named(session="s", prefix="shell_")}
    assert listed == set(names) | {f"shell_{n}" for n in range(1, earlier + 1)}


_OFFLOADING_CHILD = """
import json, sys, time
import blobpad
target, w, start, stop = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
with blobpad.open(target) as s:
    off = blobpad.Offloader(s, policy="seed003")
    done, failed, i = [], [], 0
    while time.time() < start:
        time.sleep(0.005)
    while time.time() < stop and i < 400:
        try:
            done.append(off.offload(f"output {w}.{i}\\n" + "line of tool output\\n" * 2500, session="s1",
                                    turn=i, tool="shell")["name"])
        except blobpad.BlobpadError as exc:
            failed.append(f"{type(exc).__name__}: {exc}"[:300])
        i += 1
print(json.dumps({"done": done, "failed": failed}))
"""


@pytest.mark.parametrize("engine", ["lmdb", "redis"])
def test_seed003_names_from_many_processes_at_once_never_give_up(engine, tmp_path, request):
    """Four processes offload outputs into one session at once under seed 003's automatic names
    (shell_<n>) for a few seconds: every offload succeeds, under a name of its own.  A process
    that lost a number to another used to list the session's names again (a read per name) while
    the others took the next numbers first, round after round, until it gave up with Conflict
    after 64 tries (README: "the next n is tried if another writer took it")."""
    if engine == "lmdb":
        target = str(tmp_path / "store")
    else:
        server = request.getfixturevalue("valkey_server")
        target = f"{server.url}?namespace=t-{os.getpid()}-{random.randrange(1 << 30)}"
    with blobpad.open(target) as store:  # made before the processes start
        start = time.time() + 3
        children = [subprocess.Popen([sys.executable, "-c", _OFFLOADING_CHILD, target, str(w), str(start),
                                      str(start + 6)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for w in range(4)]
        results = []
        for child in children:
            out, err = child.communicate(timeout=300)
            assert child.returncode == 0, err[-2000:]
            results.append(json.loads(out))
        failed = [f for r in results for f in r["failed"]]
        names = [n for r in results for n in r["done"]]
        assert not failed, failed[:3]
        assert len(set(names)) == len(names) and all(len(r["done"]) > 0 for r in results)
        assert {e.name for e in store.named(session="s1", prefix="shell_")} == set(names)
        assert store.verify().ok


def test_seed003_never_gives_a_deleted_outputs_number_to_other_content(store_factory):
    """A writer that lost a number to another goes on past the highest number taken, never into a
    hole that a deleted output left below later ones: its name is not given to other content."""
    mine, theirs = store_factory(), store_factory()
    a, b = Offloader(mine, policy="seed003"), Offloader(theirs, policy="seed003")
    big = [_log(31_000, seed=i) for i in range(11)]
    assert [a.offload(big[i], session="s", turn=1, tool="bash")["name"] for i in range(3)] == [
        "bash_1", "bash_2", "bash_3"]
    assert [b.offload(big[i], session="s", turn=1, tool="bash")["name"] for i in range(3, 10)] == [
        f"bash_{n}" for n in range(4, 11)]
    mine.delete(mine.find("bash_6", session="s").id)
    assert a.offload(big[10], session="s", turn=2, tool="bash")["name"] == "bash_11"  # 4 was taken: past 10


def test_seed003_names_count_on_after_other_writers_deletes_and_a_new_session(store):
    """The next ``<tool>_<n>`` an Offloader gives (it remembers its last instead of listing
    the session's names on every offload) is the one after the highest live name: after
    another Offloader took numbers, after the highest name was deleted, and from 1 again
    once the session was deleted.  Oracle: the names listed by ``store.named``."""
    big = _log(31_000)
    a, b = Offloader(store, policy="seed003"), Offloader(store, policy="seed003")
    names = lambda: [e.name for e in store.named(session="s", prefix="run_")]  # noqa: E731

    def offload(off):
        return off.offload(big, session="s", turn=1, tool="run")["name"]

    assert [offload(a) for _ in range(3)] == ["run_1", "run_2", "run_3"]
    assert [offload(b), offload(b)] == ["run_4", "run_5"]  # b lists the names once
    assert offload(a) == "run_6"  # a remembered 3: run_4 is taken (Conflict), so it lists them again
    store.delete(store.find("run_6", session="s").id)
    assert offload(a) == "run_6" and offload(b) == "run_7"
    store.delete_session("s")
    assert offload(b) == "run_1" and offload(a) == "run_2"
    assert names() == ["run_1", "run_2"]


def test_seed003_automatic_names_never_collide(store_factory):
    """Parallel tool calls offloading at once (threads, and two handles of one store standing
    for two processes): each output gets its own <tool>_<n> and stays; they all got shell_1,
    and each put replaced the one before (seven of eight outputs lost)."""
    handles = [store_factory("shared"), store_factory("shared")]
    offloaders = [Offloader(h, policy="seed003") for h in handles]
    n = 8
    barrier = threading.Barrier(n)
    out: list = [None] * n
    failed: list = []

    def run(k: int) -> None:
        try:
            barrier.wait(timeout=30)
            out[k] = offloaders[k % 2].offload(f"output of call {k}\n" * 3000, session="s", turn=1, tool="shell")
        except Exception as exc:  # reported below
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failed and all(not t.is_alive() for t in threads)
    assert sorted(o["name"] for o in out) == sorted(f"shell_{i}" for i in range(1, n + 1))
    store = handles[0]
    for k, o in enumerate(out):
        e = store.find(o["name"], session="s")
        assert e.id == o["scratchpad_id"] and store.get(e.id) == f"output of call {k}\n" * 3000
    assert len(store.entries(session="s")) == n


def test_the_whole_observation_keeps_its_ok(store):
    """{{stepN}} is the whole observation: an offloaded dict's ok comes back with the rest
    (False is what a later step most needs to see); one without ok gets none."""
    off = Offloader(store)
    failed = {"ok": False, "stdout": "x" * 5000, "exit_code": 2}
    plain = {"stdout": "y" * 5000, "exit_code": 0}
    steps = {1: off.offload(failed, session="s", turn=1, step=1), 2: off.offload(plain, session="s", turn=1, step=2)}
    assert all("scratchpad_id" in o for o in steps.values())
    assert resolve_refs("{{step1}}", steps, store) == failed
    assert resolve_refs("{{step2}}", steps, store) == plain
    assert resolve_refs("{{step1.ok}}", steps, store) is False


def _nested(depth: int) -> list:
    top = cur = []
    for _ in range(depth):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    return top


@pytest.mark.parametrize("policy", ["seed000", "seed003"])
def test_an_observation_json_cannot_hold_is_invalid_argument(store, policy):
    """A key that is not a string, a value that contains itself, nesting deeper than Python
    recurses: a clear InvalidArgument from the Offloader and from resolve_refs (they raised
    TypeError, ValueError and RecursionError), nothing stored."""
    loop: list = []
    loop.append(loop)
    off = Offloader(store, policy=policy)
    for obs in ({(1, 2): "x"}, {"a": loop}, {"a": _nested(100_000)}):
        with pytest.raises(InvalidArgument, match="JSON"):
            off.offload(obs, session="s", turn=1)
    with pytest.raises(InvalidArgument, match="JSON"):
        resolve_refs("{{step9.a}}", {9: {"a": loop}}, store)
    assert store.entries() == []


def test_an_exclusive_put_never_replaces_a_live_name(store_factory):
    clock = [1.8e9]
    store = store_factory(clock=lambda: clock[0])
    first = store.put("first\n", session="s", name="n", ttl=10)
    before = store.stats()
    with pytest.raises(blobpad.Conflict, match="already has an entry named 'n'"):
        store.put("second\n" * 1000, session="s", name="n", exclusive=True)
    assert store.stats() == before and store.get(store.find("n", session="s").id) == "first\n"
    assert store.put("other\n", session="t", name="n", exclusive=True).name == "n"  # names are per session
    clock[0] += 10  # the first has expired: its name is free
    again = store.put("third\n", session="s", name="n", exclusive=True)
    assert again.id != first.id and store.get(store.find("n", session="s").id) == "third\n"
    with pytest.raises(InvalidArgument, match="an exclusive put needs a name.*pass a name with exclusive=True"):
        store.put("x", session="s", exclusive=True)
    with pytest.raises(InvalidArgument, match="exclusive must be True or False"):
        store.put("x", session="s", name="m", exclusive="yes")


class _SlowSource:
    """A binary file object whose every read takes ``seconds`` of the store's clock."""

    def __init__(self, clock: list[float], parts: list[bytes], seconds: float) -> None:
        self.clock, self.parts, self.seconds = clock, list(parts), seconds

    def read(self, size: int = -1) -> bytes:
        self.clock[0] += self.seconds
        return self.parts.pop(0) if self.parts else b""


@pytest.mark.parametrize("exclusive", [True, False])
def test_a_name_whose_entry_expires_during_a_put_is_free_when_it_commits(store_factory, exclusive):
    """Live means live when the put commits, not when it began (Store.put's docstring)."""
    clock = [1.8e9]
    store = store_factory(clock=lambda: clock[0])
    old = store.put("old plan\n", session="s", name="plan", ttl=5)
    new = store.put(_SlowSource(clock, [b"new ", b"plan\n"], 3.0), session="s", name="plan", exclusive=exclusive)
    assert store.get(store.find("plan", session="s").id) == "new plan\n" == store.get(new.id)
    assert not store.exists(old.id)
    # its own, when it committed: the name's old entry was dead, its creation time went with it
    assert new.created_at == clock[0] == 1.8e9 + 9 and old.created_at == 1.8e9
    assert store.stats().entries == 1 and store.verify().ok


def test_seed003_preview(store):
    text = _log(40_000, seed=11)
    out = Offloader(store, policy="seed003").offload({"content": text, "cmd": "make"}, session="s", turn=1,
                                                     tool="execute_command")
    assert out["preview"] == text[:2000] + f"\n[... {len(text) - 2000} more characters in the scratchpad ...]"
    assert out["metadata"] == {"cmd": "make"}
    assert "scratchpad_read" in out["_note"] and "execute_command_1" in out["_note"]
    assert store.get(out["scratchpad_id"]) == text


@pytest.mark.parametrize("policy", ["seed000", "seed003"])
def test_content_offloaded_because_asked_is_not_said_to_be_large(store, policy):
    """offload_content saves whatever its size: its note says it was saved, not that it was too large."""
    off = Offloader(store, policy=policy)
    for content in ("tiny\r\n", b"\x00\x01", "x" * 50_000):
        out = off.offload_content(content, session="s", turn=1, tool="scratchpad_offload")
        note = out["_note"]
        assert "large" not in note.lower() and "scratchpad_read" in note, note
        if policy == "seed000":
            assert note == "Observation saved in scratchpad. To read it in full or partially, use the scratchpad_read tool."
        else:
            assert note.startswith(f"Output saved to the scratchpad as {out['name']!r} ("), note
    # an observation offloaded by the policy's own rule is still said to be large
    big = off.offload({"stdout": "y" * 40_000}, session="s", turn=1, tool="execute_command")
    assert "large" in big["_note"].lower()


# -- references between steps ---------------------------------------------------------------------------


def test_fs_write_example_gets_the_full_content_not_the_summary(store):
    body = json.dumps({"headers": {"Accept": "*/*", "User-Agent": "v" * 400}, "args": {},
                       "data": _log(14_000, seed=12)}, indent=2)
    steps = {1: Offloader(store).offload({"ok": True, "content": body, "url": "https://httpbin.org/get"},
                                         session="s", turn=1, step=1, tool="web_fetch")}
    assert "scratchpad_id" in steps[1] and steps[1]["summary"] != body
    args = {"path": "/tmp/out.txt", "content": "{{step1.content}}"}
    resolved = resolve_refs(args, steps, store)
    assert resolved == {"path": "/tmp/out.txt", "content": body}
    assert args == {"path": "/tmp/out.txt", "content": "{{step1.content}}"}   # not modified in place


def test_references_in_nested_arguments_and_inside_strings(store):
    text = _log(6000, seed=13)
    off = Offloader(store)
    steps = {
        1: off.offload({"content": text, "path": "/var/log/app.log"}, session="s", turn=1, step=1),
        "2": {"ok": True, "content": "small", "n": 3},        # not offloaded; str key
    }
    args = {
        "files": [{"name": "{{ step1.path }}", "body": "{{step1.content}}"}],
        "message": "copied {{step1.path}} ({{step2.n}} files, {{step2.content}})",
        "whole": "{{step2}}",
        "untouched": 42,
        "tuple": ("{{step2.content}}",),
    }
    assert resolve_refs(args, steps, store) == {
        "files": [{"name": "/var/log/app.log", "body": text}],
        "message": "copied /var/log/app.log (3 files, small)",
        "whole": {"ok": True, "content": "small", "n": 3},
        "untouched": 42,
        "tuple": ("small",),
    }
    inline = resolve_refs("head: {{step1.content}}", steps, store)
    assert inline == "head: " + text


def test_synthetic_fields_resolve_too(store):
    out = Offloader(store).offload({"content": "x" * 5000}, session="s", turn=1)
    assert resolve_refs("{{step1.scratchpad_id}}", {1: out}, store) == out["scratchpad_id"]
    assert resolve_refs("{{step1.size_bytes}}", {1: out}, store) == 5000


def test_binary_references(store):
    blob = sample.binary_blob(9000, seed=14)
    steps = {1: Offloader(store).offload({"content": blob}, session="s", turn=1)}
    assert resolve_refs({"data": "{{step1.content}}"}, steps, store) == {"data": blob}
    with pytest.raises(InvalidArgument, match="binary"):
        resolve_refs("prefix {{step1.content}}", steps, store)


def test_reference_errors(store_factory):
    now = [2_000_000.0]
    store = store_factory(clock=lambda: now[0])
    steps = {1: Offloader(store, ttl=10).offload({"content": "w" * 5000, "path": "/p"}, session="s", turn=1)}
    with pytest.raises(InvalidArgument, match="step 7"):
        resolve_refs("{{step7.content}}", steps, store)
    with pytest.raises(InvalidArgument, match="nope"):
        resolve_refs("{{step1.nope}}", steps, store)
    with pytest.raises(InvalidArgument, match="missing"):
        resolve_refs("{{step1.path.missing}}", steps, store)
    assert resolve_refs("{{step1}}", steps, store) == {"path": "/p", "content": "w" * 5000}
    assert resolve_refs("no {{refs here", steps, store) == "no {{refs here"
    now[0] += 11
    with pytest.raises(NotFound, match="expired"):
        resolve_refs("{{step1.content}}", steps, store)
    assert resolve_refs("{{step1.path}}", steps, store) == "/p"   # metadata needs no store read


@pytest.mark.parametrize("ref", [
    "{{step1." + "a" * 100_000 + "}}", "{{step1.path." + "b" * 100_000 + "}}", "{{step1.meta.x." + "c" * 100_000 + "}}",
])
def test_a_reference_to_a_long_missing_field_gets_a_short_error(store, ref):
    """A model's reference naming a field that does not exist is refused with a short
    message, however long the name: the error goes back into the model's context (it
    quoted the whole name: 100 KB)."""
    fields = {f"field{i}": i for i in range(3000)}  # and an observation of many fields, all named in the error once
    steps = {1: {"path": "/p", "meta": {"x": {}}, **fields}}
    with pytest.raises(InvalidArgument) as caught:
        resolve_refs(ref, steps, store, session="s")
    assert len(str(caught.value)) < 500


def test_a_stream_seek_with_a_bad_whence_gets_a_short_error(store):
    stream = store.stream(store.put("abc\n", session="s").id)
    for whence in (10**5000, "x" * 100_000, 3):  # repr of the first raised ValueError (over 4300 digits)
        with pytest.raises(InvalidArgument, match="whence") as caught:
            stream.seek(0, whence)
        assert len(str(caught.value)) < 200


def test_offloader_is_exported():
    assert blobpad.Offloader is Offloader and blobpad.resolve_refs is resolve_refs
    assert os.path.basename(blobpad.offload.__file__) == "offload.py"


# -- seed 003's scratchpad parameter ----------------------------------------------------------


def test_scratchpad_argument_saves_any_output_under_its_name_and_replaces_it(store):
    off = Offloader(store, policy="seed003")
    small = {"ok": True, "stdout": "3 files changed\n", "exit_code": 0}
    obs = off.offload(small, session="s", turn=1, step=2, tool="execute_command", scratchpad="diffstat")
    assert obs["name"] == "diffstat" and obs["preview"] == "3 files changed\n"
    assert obs["metadata"] == {"exit_code": 0} and "saved to the scratchpad as 'diffstat'" in obs["_note"]
    assert "too large" not in obs["_note"]
    tb = blobpad.Toolbox(store, session="s", turn=5, profile="seed003")
    assert tb.call("scratchpad_read", {"name": "diffstat"})["content"] == "3 files changed\n"
    first = store.find("diffstat", session="s")
    big = "x" * 40_000
    again = off.offload({"stdout": big}, session="s", turn=2, tool="execute_command", scratchpad="diffstat")
    assert again["scratchpad_id"] != first.id and not store.exists(first.id)
    assert store.get(store.find("diffstat", session="s").id) == big
    # without the argument the policy's own rule and automatic names apply
    assert off.offload(small, session="s", turn=2, tool="execute_command") == small
    assert off.offload({"stdout": big}, session="s", turn=2, tool="execute_command")["name"] == "execute_command_1"
    # another session's entry of the same name is untouched
    off.offload("other", session="t", turn=1, scratchpad="diffstat")
    assert store.get(store.find("diffstat", session="s").id) == big


def test_scratchpad_argument_under_the_seed000_policy(store):
    obs = Offloader(store, runtime_resolves_refs=True).offload({"ok": True, "content": "tiny"}, session="s", turn=1,
                                                               step=4, scratchpad="keep")
    assert set(obs) == {"ok", "scratchpad_id", "size_bytes", "kind", "summary", "metadata", "_note"}
    assert obs["summary"] == "tiny" and store.find("keep", session="s").id == obs["scratchpad_id"]
    assert obs["_note"].startswith("Observation saved in scratchpad as 'keep'. To read it in full or partially")
    assert "{{step4.content}}" in obs["_note"]


@pytest.mark.parametrize("bad", ["", "   ", "x" * 241, "é" * 121, 7, ["a"], "\ud800"])
def test_a_bad_scratchpad_name_is_a_short_invalid_argument(store, bad):
    with pytest.raises(InvalidArgument) as err:
        Offloader(store, policy="seed003").offload("content", session="s", turn=1, scratchpad=bad)
    assert len(str(err.value)) < 200 and "scratchpad name" in str(err.value)
    assert store.entries() == []


def test_a_scratchpad_name_has_the_store_s_limit(store):
    """One name limit everywhere: 240 bytes of UTF-8, what put, find and the tools take."""
    name = "é" * 120  # 240 bytes
    obs = Offloader(store, policy="seed003").offload("content", session="s", turn=1, scratchpad=name)
    assert store.find(name, session="s").id == obs["scratchpad_id"]


def test_add_scratchpad_parameter_to_a_tool_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from blobpad.offload import SCRATCHPAD_PARAMETER, add_scratchpad_parameter

    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    out = add_scratchpad_parameter(schema)
    assert "scratchpad" not in schema["properties"]  # the input is not changed
    assert out["properties"]["scratchpad"] == SCRATCHPAD_PARAMETER and out["required"] == ["command"]
    jsonschema.Draft202012Validator.check_schema(out)
    jsonschema.validate({"command": "ls", "scratchpad": "listing"}, out)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"command": "ls", "scratchpad": ""}, out)
    for bad in ({"type": "array"}, {"properties": []}, out, "schema", {"name": "shell", "description": "no schema"}):
        with pytest.raises(InvalidArgument):
            add_scratchpad_parameter(bad)
    # whole tool definitions: the property goes into their parameters
    openai = {"type": "function", "function": {"name": "shell", "parameters": schema}}
    anthropic = {"name": "shell", "description": "run", "input_schema": schema}
    mcp = {"name": "shell", "inputSchema": schema}
    legacy = {"name": "shell", "parameters": schema}
    got = add_scratchpad_parameter(openai)
    assert got["function"]["parameters"]["properties"]["scratchpad"] == SCRATCHPAD_PARAMETER
    assert got["type"] == "function" and "properties" not in got and "scratchpad" not in openai["function"]["parameters"]
    for tool, key in ((anthropic, "input_schema"), (mcp, "inputSchema"), (legacy, "parameters")):
        got = add_scratchpad_parameter(tool)
        assert set(got) == set(tool) and got[key]["properties"]["scratchpad"] == SCRATCHPAD_PARAMETER
        jsonschema.Draft202012Validator.check_schema(got[key])


@pytest.mark.parametrize("encoding", ["base64", "binary", "BASE64"])
def test_a_base64_binary_read_is_stored_as_its_bytes(store, encoding):
    zip_bytes = bytes(range(256)) * 200 + b"PK\x05\x06"
    b64 = base64.b64encode(zip_bytes).decode("ascii")
    obs = {"ok": True, "path": "/tmp/a.zip", "encoding": encoding, "content": b64}
    out = Offloader(store).offload(obs, session="s", turn=1, step=3)
    assert out["kind"] == "binary" and out["size_bytes"] == len(zip_bytes)
    assert out["summary"] == f"[BINARY: {len(zip_bytes)} bytes, sha256={hashlib.sha256(zip_bytes).hexdigest()}]"
    assert out["metadata"] == {"path": "/tmp/a.zip", "encoding": encoding}
    assert store.get(out["scratchpad_id"]) == zip_bytes
    # the reference gives back what the observation carried: the base64 string
    args = resolve_refs({"path": "/tmp/b.zip", "encoding": encoding, "content": "{{step3.content}}"}, {3: out}, store)
    assert args["content"] == b64
    # the read tool shows binary content as base64, as for any binary entry
    r = blobpad.Toolbox(store, session="s", turn=1, profile="seed000").call(
        "scratchpad_read", {"scratchpad_id": out["scratchpad_id"], "mode": "head", "n": 30})
    assert r["ok"] and base64.b64decode(r["content"]) == zip_bytes[:30]


def test_a_string_that_is_not_base64_stays_text_whatever_the_encoding_says(store):
    text = "not base64 at all: " + "é" * 5000
    obs = {"ok": True, "encoding": "binary", "content": text}
    out = Offloader(store).offload(obs, session="s", turn=1)
    assert out["kind"] == "text" and store.get(out["scratchpad_id"]) == text
    plain = {"ok": True, "content": base64.b64encode(b"x" * 6000).decode()}  # no encoding: text
    assert Offloader(store).offload(plain, session="s", turn=1)["kind"] == "text"


@pytest.mark.parametrize("policy", ["seed000", "seed003"])
def test_the_note_mentions_step_references_only_when_the_runtime_resolves_them(store, policy):
    obs = {"ok": True, "stdout": _log(40_000), "exit_code": 0}
    plain = Offloader(store, policy=policy).offload(obs, session="s", turn=1, step=2, tool="shell")
    assert "{{" not in plain["_note"] and "step2" not in plain["_note"]
    told = Offloader(store, policy=policy, runtime_resolves_refs=True).offload(obs, session="s", turn=1, step=2,
                                                                               tool="shell")
    assert told["_note"].endswith("To pass the full stdout to another tool, write {{step2.stdout}}.")
    # what the note tells the model to write resolves to the full content
    assert resolve_refs("{{step2.stdout}}", {2: told}, store) == obs["stdout"]
    # without a step there is no reference to write, told or not
    no_step = Offloader(store, policy=policy, runtime_resolves_refs=True).offload(obs, session="s", turn=1, tool="shell")
    assert "{{" not in no_step["_note"]
    with pytest.raises(InvalidArgument):
        Offloader(store, runtime_resolves_refs="yes")  # type: ignore[arg-type]
