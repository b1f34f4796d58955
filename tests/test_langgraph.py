"""BlobpadStore, the LangGraph store: against LangGraph's InMemoryStore as the oracle, on every engine.

LangGraph's own store tests run in tests/test_langgraph_conformance.py; these add what
they leave out: random operation sequences compared with InMemoryStore (get, filters,
paging, list_namespaces, vector scores), TTL in minutes with an injected clock
(expiry, refresh on read, TTLConfig), timestamps, the mapping onto blobpad entries,
hostile arguments, and the README snippet.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("langgraph.store.base", reason="langgraph-checkpoint is not installed: pip install 'blobpad[langgraph]'")

from langgraph.store.base import InvalidNamespaceError  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402
from oracles import Meanwhile, readme_snippet  # noqa: E402

import blobpad  # noqa: E402
from blobpad.errors import InvalidArgument  # noqa: E402
from blobpad.integrations.langgraph import HASHED_NAME, SESSION_PREFIX, BlobpadStore  # noqa: E402


class Clock:
    """An injected store clock, moved by hand."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clocked(store_factory, engine_name):
    """A BlobpadStore over a fresh store whose clock the test moves, and that clock."""
    clock = Clock()
    options = {"sync": False} if engine_name == "lmdb" else {}
    raw = store_factory(clock=clock, **options)
    return BlobpadStore(raw), clock


def _embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: letter frequencies (26 dims), enough to rank texts."""
    out = []
    for t in texts:
        v = [0.0] * 26
        for ch in t.lower():
            if "a" <= ch <= "z":
                v[ord(ch) - 97] += 1.0
        out.append(v)
    return out


# -- the oracle: random operation sequences against InMemoryStore -----------------------------------

LABELS = ["a", "b", "ab", "c", "*x"]
WORDS = ["apple pie", "red car", "blue sky", "green apple", "zebra", "car park", ""]


def _namespace(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS) for _ in range(rng.randint(1, 3)))


def _value(rng: random.Random) -> dict:
    value = {"n": rng.randint(-3, 3), "text": rng.choice(WORDS), "tags": rng.sample(["x", "y", "z"], rng.randint(0, 2)),
             "nested": {"k": rng.choice(["p", "q"]), "m": rng.random()}}
    return value  # always an "n": InMemoryStore raises TypeError on an ordering filter over a missing field


def _filter(rng: random.Random) -> dict | None:
    choice = rng.randint(0, 6)
    if choice == 0:
        return None
    if choice == 1:
        return {"n": rng.randint(-3, 3)}
    if choice == 2:
        op = rng.choice(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
        return {"n": {op: rng.randint(-3, 3)}}
    if choice == 3:
        return {"nested": {"k": rng.choice(["p", "q"])}}
    if choice == 4:
        return {"tags": rng.sample(["x", "y", "z"], rng.randint(0, 2))}
    if choice == 5:
        return {"text": rng.choice(WORDS), "n": {"$gte": -1, "$lt": 3}}
    return {"missing": None}


def _path(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS + ["*"]) for _ in range(rng.randint(1, 3)))


def _keys(items) -> set:
    return {(i.namespace, i.key, json.dumps(i.value, sort_keys=True)) for i in items}


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_agree_with_in_memory_store(store, seed):
    rng = random.Random(seed)
    index = {"dims": 26, "embed": _embed, "fields": ["text"]}
    ours, oracle = BlobpadStore(store, index=index), InMemoryStore(index=index)
    for _ in range(160):
        kind = rng.choices(["put", "delete", "get", "search", "query", "list"], [6, 1, 2, 3, 2, 2])[0]
        ns, key = _namespace(rng), f"k{rng.randint(0, 4)}"
        if kind == "put":
            value, idx = _value(rng), rng.choice([None, None, False, ["text", "nested.k"]])
            ours.put(ns, key, value, index=idx)
            # InMemoryStore keeps the vectors of the value a put replaces when the new one is not indexed the same
            # (index=False, other fields): stale scores; BlobpadStore's vectors are those of the current value
            oracle._vectors[ns].pop(key, None)
            oracle.put(ns, key, value, index=idx)
        elif kind == "delete":
            ours.delete(ns, key)
            oracle.delete(ns, key)
        elif kind == "get":
            a, b = ours.get(ns, key), oracle.get(ns, key)
            assert (a is None) == (b is None) and (a is None or (a.value, a.key, a.namespace) == (b.value, b.key, b.namespace))
        elif kind == "search":
            prefix, flt = ns[:rng.randint(0, len(ns))], _filter(rng)
            full = ours.search(prefix, filter=flt, limit=1000)
            assert _keys(full) == _keys(oracle.search(prefix, filter=flt, limit=1000))
            limit, offset = rng.randint(1, 4), rng.randint(0, 6)
            assert _keys(ours.search(prefix, filter=flt, limit=limit, offset=offset)) == _keys(full[offset:offset + limit])
        elif kind == "query":
            prefix, query = ns[:rng.randint(0, len(ns))], rng.choice(WORDS[:-1])
            a = {(r.namespace, r.key): r.score for r in ours.search(prefix, query=query, limit=1000)}
            b = {(r.namespace, r.key): r.score for r in oracle.search(prefix, query=query, limit=1000)}
            assert a.keys() == b.keys()
            for k, score in b.items():
                assert (a[k] is None) == (score is None) and (score is None or math.isclose(a[k], score, abs_tol=1e-5)), k
            scores = [s for s in a.values() if s is not None]
            ranked = [r.score for r in ours.search(prefix, query=query, limit=1000) if r.score is not None]
            assert ranked == sorted(scores, reverse=True)
        else:
            kw = {"limit": rng.randint(1, 20), "offset": rng.randint(0, 3)}
            if rng.random() < 0.6:
                kw["prefix"] = _path(rng)
            if rng.random() < 0.4:
                kw["suffix"] = _path(rng)
            if rng.random() < 0.4:
                kw["max_depth"] = rng.randint(1, 3)
            # InMemoryStore keeps a namespace in its defaultdict once anything touched it (a get, a delete of
            # its last item) and lists it; BlobpadStore lists namespaces that hold items, as LangGraph's SQL stores
            # do: drop the empty ones from the oracle before comparing
            for empty in [n for n, items in oracle._data.items() if not items]:
                del oracle._data[empty]
            assert ours.list_namespaces(**kw) == oracle.list_namespaces(**kw), kw


# -- timestamps and TTL with an injected clock ---------------------------------------------------


def test_created_at_is_kept_across_updates_and_updated_at_moves(clocked):
    lg, clock = clocked
    lg.put(("u", "1"), "prefs", {"theme": "dark"})
    first = lg.get(("u", "1"), "prefs")
    clock.t += 90
    lg.put(("u", "1"), "prefs", {"theme": "light"})
    second = lg.get(("u", "1"), "prefs")
    assert second.value == {"theme": "light"}
    assert second.created_at == first.created_at == first.updated_at
    assert (second.updated_at - first.updated_at).total_seconds() == pytest.approx(90)
    assert second.created_at.tzinfo is not None and second.created_at.timestamp() == pytest.approx(clock.t - 90)
    (found,) = lg.search(("u",))
    assert (found.created_at, found.updated_at) == (second.created_at, second.updated_at)
    lg.delete(("u", "1"), "prefs")
    clock.t += 5
    lg.put(("u", "1"), "prefs", {"theme": "dark"})
    assert lg.get(("u", "1"), "prefs").created_at.timestamp() == pytest.approx(clock.t)  # a new item after a delete


def test_ttl_in_minutes_expires_and_reads_refresh_it(clocked):
    lg, clock = clocked
    lg.put(("s",), "short", {"v": 1}, ttl=1)          # one minute
    lg.put(("s",), "forever", {"v": 2}, ttl=None)
    lg.put(("s",), "quiet", {"v": 3}, ttl=1)
    clock.t += 50
    assert lg.get(("s",), "short").value == {"v": 1}  # refreshes: now expires at +110
    assert lg.get(("s",), "quiet", refresh_ttl=False).value == {"v": 3}
    clock.t += 20                                      # +70
    assert lg.get(("s",), "quiet") is None
    assert lg.get(("s",), "short", refresh_ttl=False).value == {"v": 1}
    assert sorted(i.key for i in lg.search(("s",))) == ["forever", "short"]  # refreshes short: +130
    clock.t += 55                                      # +125
    assert lg.get(("s",), "short", refresh_ttl=False) is not None
    clock.t += 10                                      # +135
    assert lg.get(("s",), "short") is None
    assert lg.list_namespaces() == [("s",)]
    clock.t += 10 ** 8
    assert lg.get(("s",), "forever").value == {"v": 2}
    lg.delete(("s",), "forever")
    assert lg.list_namespaces() == []


def test_ttl_config_default_ttl_and_refresh_on_read(store_factory, engine_name):
    clock = Clock()
    raw = store_factory(clock=clock)
    lg = BlobpadStore(raw, ttl={"default_ttl": 2, "refresh_on_read": False})
    assert lg.supports_ttl and lg.ttl_config == {"default_ttl": 2, "refresh_on_read": False}
    lg.put(("d",), "k", {"v": 1})                      # default_ttl: 2 minutes
    lg.put(("d",), "never", {"v": 1}, ttl=None)
    lg.put(("d",), "hour", {"v": 1}, ttl=60)
    assert raw.find("k", session=SESSION_PREFIX + "d").expires_at == pytest.approx(clock.t + 120)
    assert raw.find("never", session=SESSION_PREFIX + "d").expires_at is None
    clock.t += 100
    assert lg.get(("d",), "k") is not None             # refresh_on_read False: no refresh
    clock.t += 30
    assert lg.get(("d",), "k") is None
    assert lg.get(("d",), "hour", refresh_ttl=True) is not None  # the op's own choice wins
    assert raw.find("hour", session=SESSION_PREFIX + "d").expires_at == pytest.approx(clock.t + 3600)


def test_the_sweeper_runs_gc_until_close(store_factory):
    clock = Clock()
    raw = store_factory(clock=clock)
    lg = BlobpadStore(raw, ttl={"sweep_interval_minutes": 0.001})   # every 60 ms
    lg.put(("t",), "k", {"v": 1}, ttl=1)
    clock.t += 61
    deadline = time.monotonic() + 30
    while raw.stats().expired_entries and time.monotonic() < deadline:
        time.sleep(0.05)
    assert raw.stats().expired_entries == 0 and raw.stats().entries == 0
    lg.close()
    assert not [t for t in threading.enumerate() if t.name == "blobpad-langgraph-sweeper"]
    raw.put("still open", session="x")                  # a store passed in stays open


# -- the mapping onto blobpad --------------------------------------------------------------------


def test_items_are_named_entries_of_a_session_per_namespace(store):
    lg = BlobpadStore(store)
    lg.put(("users", "42", "memories"), "m1", {"text": "likes tea", "n": 1.5, "ok": True, "none": None})
    entry = store.find("m1", session="langgraph:users.42.memories")
    assert entry.kind == "text" and entry.meta["key"] == "m1" and entry.meta["ttl"] is None
    assert json.loads(store.get(entry.id)) == {"text": "likes tea", "n": 1.5, "ok": True, "none": None}
    assert len(store.grep(entry.id, "tea")) == 1        # blobpad's reads see the item as any entry
    assert store.sessions(prefix=SESSION_PREFIX) == ["langgraph:users.42.memories"]
    store.put("not an item", session="langgraph:users.42.memories", name="stray")   # ignored: not written by us
    assert [i.key for i in lg.search(("users",))] == ["m1"] and lg.get(("users", "42", "memories"), "stray") is None


@pytest.mark.parametrize("key", ["k" * 201, "é" * 101, HASHED_NAME + "x", "", " ", "a.b", "\x00", "键"])
def test_any_key_round_trips(store, key):
    lg = BlobpadStore(store)
    lg.put(("ns",), key, {"v": key})
    lg.put(("ns",), "other", {"v": 0})
    assert lg.get(("ns",), key).value == {"v": key}
    assert {i.key for i in lg.search(("ns",))} == {key, "other"}
    lg.delete(("ns",), key)
    assert lg.get(("ns",), key) is None and [i.key for i in lg.search(("ns",))] == ["other"]


def test_store_argument_forms(tmp_path):
    with BlobpadStore() as fresh:
        fresh.put(("a",), "k", {"v": 1})
        assert BlobpadStore().get(("a",), "k") is None  # each BlobpadStore() is a new memory store
        assert fresh.store.path.startswith("memory://")
    target = str(tmp_path / "lg")
    with BlobpadStore(target) as on_disk:
        on_disk.put(("a",), "k", {"v": 1})
    with blobpad.open(target) as raw:                    # the items persist, under the mapping
        assert BlobpadStore(raw).get(("a",), "k").value == {"v": 1}
        BlobpadStore(raw).close()
        assert raw.exists(raw.find("k", session="langgraph:a").id)   # left open
    with pytest.raises(InvalidArgument, match="store must be"):
        BlobpadStore(42)  # type: ignore[arg-type]


def test_async_methods(store):
    async def run():
        lg = BlobpadStore(store, index={"dims": 26, "embed": _embed})
        await lg.aput(("a", "b"), "k", {"text": "apple"})
        await lg.aput(("a", "c"), "j", {"text": "zebra"})
        assert (await lg.aget(("a", "b"), "k")).value == {"text": "apple"}
        hits = await lg.asearch(("a",), query="apple pie")
        assert [h.key for h in hits] == ["k", "j"] and hits[0].score > hits[1].score
        assert await lg.alist_namespaces(prefix=("a",)) == [("a", "b"), ("a", "c")]
        await lg.adelete(("a", "b"), "k")
        assert await lg.aget(("a", "b"), "k") is None

    asyncio.run(run())


# -- hostile arguments: clear errors, the store unchanged ----------------------------------------


@pytest.mark.parametrize(("value", "message"), [
    ([1, 2], "must be a dict"),
    ("text", "must be a dict"),
    ({1: "a"}, "keys must be strings"),
    ({"x": float("nan")}, "JSON-serialisable"),
    ({"x": object()}, "JSON-serialisable"),
    ({"x": {1, 2}}, "JSON-serialisable"),
    ({"x": ["ok", {"y": "\ud800"}]}, "lone surrogates"),
    ({"x": {"y": [1, {"z": float("inf")}]}}, "JSON-serialisable"),
])
def test_values_must_be_json_objects(store, value, message):
    lg = BlobpadStore(store)
    with pytest.raises(InvalidArgument, match=message):
        lg.put(("ns",), "k", value)
    assert store.entries() == []


def test_bad_arguments_raise_clear_errors(store):
    lg = BlobpadStore(store, index={"dims": 26, "embed": _embed})
    cases = [
        (lambda: lg.put(("ns",), "k", {}, ttl=0), "positive number of minutes"),
        (lambda: lg.put(("ns",), "k", {}, ttl=-5), "positive number of minutes"),
        (lambda: lg.put(("ns",), "k", {}, ttl="5"), "number of minutes"),
        (lambda: lg.put(("ns",), "k", {}, ttl=10 ** 12), "pass None for never"),
        (lambda: lg.put(("ns",), "k", {}, ttl=10 ** 400), "pass None for never"),
        (lambda: lg.put(("ns",), "k", {}, ttl=-10 ** 400), "positive number of minutes"),
        (lambda: lg.put(("x" * 250,), "k", {}), "too long for blobpad"),
        (lambda: lg.put(("ns",), "\ud800", {}), "lone surrogates"),
        (lambda: lg.search(("ns",), limit=-1), "limit must be a non-negative integer"),
        (lambda: lg.search(("ns",), filter={"n": {"$regex": "a"}}), "unsupported filter operator"),
        (lambda: lg.list_namespaces(max_depth=0), "max_depth must be a positive integer"),
        (lambda: BlobpadStore(store, ttl={"default_ttl": -1}), "positive number of minutes"),
        (lambda: BlobpadStore(store, ttl={"sweep": 1}), "unknown TTLConfig keys"),
        (lambda: BlobpadStore(store, index={"dims": 0, "embed": _embed}), "dims"),
        (lambda: BlobpadStore(store, index={"dims": 3, "embed": _embed}).put(("ns",), "k", {"text": "a"}),
         "26 dimensions"),
    ]
    lg.put(("ns",), "k", {"n": 1})
    for call, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            call()
    with pytest.raises(InvalidNamespaceError):
        lg.put(("langgraph", "x"), "k", {})
    with pytest.raises(InvalidNamespaceError):
        lg.batch([__import__("langgraph.store.base", fromlist=["GetOp"]).GetOp(("a.b",), "k")])
    assert [e.name for e in store.entries()] == ["k"] and lg.get(("ns",), "k").value == {"n": 1}
    assert lg.get(("x" * 250,), "k") is None and lg.search(("x" * 250,)) == []   # too long to exist


def test_ordering_filters_skip_missing_and_non_numeric_fields(store):
    lg = BlobpadStore(store)
    for key, value in [("num", {"n": 5}), ("missing", {}), ("null", {"n": None}), ("word", {"n": "five"}),
                       ("numeric text", {"n": "7"})]:
        lg.put(("f",), key, value)
    assert sorted(i.key for i in lg.search(("f",), filter={"n": {"$gt": 4}})) == ["num", "numeric text"]
    assert sorted(i.key for i in lg.search(("f",), filter={"n": {"$ne": 5}})) == ["missing", "null", "numeric text", "word"]
    assert sorted(i.key for i in lg.search(("f",), filter={"n": None})) == ["missing", "null"]
    with pytest.raises(InvalidArgument, match="takes a number"):
        lg.search(("f",), filter={"n": {"$gt": "x"}})


def test_ordering_filters_compare_booleans_as_numbers_like_inmemorystore(store):
    """InMemoryStore compares with float(): True is 1 and False 0, as item values and as operands."""
    ours, theirs = BlobpadStore(store), InMemoryStore()
    for lg in (ours, theirs):
        for key, value in [("t", True), ("f", False), ("one", 1), ("half", 0.5), ("two", "2")]:
            lg.put(("f",), key, {"n": value})
    for op in ("$gt", "$gte", "$lt", "$lte"):
        for operand in (0, 1, True, False, 0.5):
            flt = {"n": {op: operand}}
            assert sorted(i.key for i in ours.search(("f",), filter=flt)) == \
                sorted(i.key for i in theirs.search(("f",), filter=flt)), flt


@pytest.mark.parametrize("value", [
    {"m": {1: "a", "1": "b"}}, {"n": {None: 1}}, {"l": [{"ok": 1}, {True: 2}]}, {"deep": {"x": {"y": {2.5: 0}}}},
])
def test_a_value_with_a_key_that_is_not_a_string_at_any_depth_is_refused(store, value):
    """JSON would turn the key 1 into "1" (and {1: "a", "1": "b"} into one key) without a word."""
    lg = BlobpadStore(store)
    with pytest.raises(InvalidArgument, match="keys must be strings at every depth"):
        lg.put(("ns",), "k", value)
    assert lg.get(("ns",), "k") is None and store.entries() == []


def test_what_cannot_be_stored_is_never_found(store):
    """A key or namespace with lone surrogates cannot be stored (a clear error on put); a
    get finds nothing and a delete does nothing, as InMemoryStore answers for an absent key."""
    lg = BlobpadStore(store)
    lg.put(("a",), "k", {"v": 1})
    assert lg.get(("a\ud800",), "k") is None and lg.get(("a",), "k\ud800") is None
    lg.delete(("a",), "k\ud800")
    lg.delete(("a\ud800",), "k")
    assert lg.search(("a\ud800",)) == [] and lg.get(("a",), "k").value == {"v": 1}
    with pytest.raises(InvalidArgument, match="the key contains lone surrogates"):
        lg.put(("a",), "k\ud800", {"v": 2})
    with pytest.raises(InvalidArgument, match="a namespace label contains lone surrogates"):
        lg.put(("a\ud800",), "k", {"v": 2})
    assert [e.name for e in store.entries()] == ["k"]


def test_a_batch_with_a_bad_put_writes_nothing(store):
    from langgraph.store.base import PutOp

    lg = BlobpadStore(store)
    with pytest.raises(InvalidArgument, match="too long for blobpad"):
        lg.batch([PutOp(("ns",), "good", {"v": 1}), PutOp(("y" * 240,), "bad", {"v": 2})])
    assert store.entries() == [] and lg.search(()) == []
    lg.put(("ns",), "old", {"v": 0})
    with pytest.raises(InvalidArgument, match="the key is 70000 characters"):  # refused by the meta's limit
        lg.batch([PutOp(("ns",), "a", {"v": 1}), PutOp(("ns",), "old", None), PutOp(("ns",), "k" * 70_000, {"v": 2})])
    assert lg.get(("ns",), "a") is None and lg.get(("ns",), "old").value == {"v": 0}


def test_a_batch_put_into_the_empty_namespace_is_refused_as_put_refuses_it(store):
    from langgraph.store.base import InvalidNamespaceError, PutOp
    from langgraph.store.memory import InMemoryStore

    for lg in (BlobpadStore(store), InMemoryStore()):
        with pytest.raises(InvalidNamespaceError, match="Namespace cannot be empty"):
            lg.put((), "k", {"v": 1})
    lg = BlobpadStore(store)
    with pytest.raises(InvalidNamespaceError, match="Namespace cannot be empty"):
        lg.batch([PutOp(("ns",), "a", {"v": 1}), PutOp((), "k", {"v": 1})])
    assert store.entries() == [] and lg.list_namespaces() == []


def test_an_item_that_is_not_json_is_named(store):
    lg = BlobpadStore(store)
    entry = store.put("{not json", session="langgraph:ns", name="k", meta={"langgraph": 1, "key": "k", "ttl": None})
    with pytest.raises(blobpad.BlobpadError, match=f"entry {entry.id} .* does not hold JSON"):
        lg.get(("ns",), "k")


def test_too_many_vectors_for_one_item(store):
    lg = BlobpadStore(store, index={"dims": 4096, "embed": lambda texts: [[0.5] * 4096 for _ in texts]})
    lg.put(("ns",), "ok", {"a": "x"}, index=["a"])
    with pytest.raises(InvalidArgument, match="index fewer fields"):
        lg.put(("ns",), "big", {"a": "x", "b": "y", "c": "z", "d": "w", "e": "v"}, index=["a", "b", "c", "d", "e"])
    assert [i.key for i in lg.search(("ns",))] == ["ok"]


def test_blobpad_imports_without_langgraph():
    code = "import sys, blobpad, blobpad.integrations; print('langgraph' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_readme_snippet_runs_as_written():
    code = readme_snippet("## LangGraph")
    namespace: dict = {}
    exec(compile(code, "README.md#langgraph", "exec"), namespace)
    store = namespace["store"]
    assert [h.key for h in namespace["hits"]] == ["tea", "deploy"]
    assert namespace["hits"][0].score > namespace["hits"][1].score
    assert store.list_namespaces(prefix=("users", "*")) == [("users", "42", "memories")]
    store.close()


@pytest.mark.parametrize("read", ["get", "entries"])
def test_an_item_another_host_updates_meanwhile_is_read_never_missed(store, read):
    """Another host puts the key again between this host's lookup of the item and its read
    of the content (a put makes a new entry and deletes the old one): ``get`` and
    ``search`` answer the value as it was when they began, never None or a missing item
    (before: None, and search left the item out).  Oracle: the values put; afterwards
    the new value."""
    here, there = BlobpadStore(store), BlobpadStore(store)
    here.put(("ns",), "k", {"v": 1})
    here.put(("ns",), "other", {"v": 0})
    update = lambda: there.put(("ns",), "k", {"v": 2})  # noqa: E731
    with Meanwhile(store, "find" if read == "get" else read, update):
        item = here.get(("ns",), "k") if read == "get" else {i.key: i for i in here.search(("ns",))}.get("k")
    assert item is not None and item.value == {"v": 1}
    assert here.get(("ns",), "k").value == {"v": 2}
    assert {i.key: i.value for i in here.search(("ns",))} == {"k": {"v": 2}, "other": {"v": 0}}
