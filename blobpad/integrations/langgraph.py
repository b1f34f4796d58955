"""blobpad as a LangGraph store (``pip install 'blobpad[langgraph]'``, langgraph-checkpoint 4.3).

:class:`BlobpadStore` is a LangGraph ``BaseStore``: ``get``, ``search`` (filters,
``limit``/``offset``, semantic search with ``index=``), ``put`` (TTL in minutes),
``delete`` and ``list_namespaces`` (prefix, suffix, ``"*"`` wildcards, ``max_depth``,
``limit``/``offset``), each with its async twin, over any blobpad store::

    from blobpad.integrations.langgraph import BlobpadStore

    store = BlobpadStore()                    # a fresh in-memory store, like InMemoryStore()
    store = BlobpadStore("/var/lib/agent")    # a path or URL: blobpad.open(...) (closed by close())
    store = BlobpadStore(blobpad_store)       # an open blobpad.Store (left open by close())

How items map onto blobpad (the layout is stable: another process opening the same
store sees the same items):

* **Namespace -> session.** A namespace ``("users", "42")`` is the session
  ``"langgraph:users.42"``: the reserved prefix :data:`SESSION_PREFIX`, then the labels
  joined by ``"."``, a character LangGraph forbids in labels (so the join is
  one-to-one).  The session, prefix included, must fit blobpad's 240 bytes of UTF-8:
  a put under a longer namespace raises ``InvalidArgument`` (a ``ValueError``), and
  reads find nothing there.  ``list_namespaces`` and ``search`` walk
  ``Store.sessions(prefix)``, the session index, never every entry.
* **Key -> entry name.** The entry named the key in that session (a put of the same key
  replaces it, as blobpad's named entries do).  A key longer than 200 bytes of UTF-8, or
  one starting with :data:`HASHED_NAME`, is named ``HASHED_NAME + sha256(key)`` instead;
  the key itself is always in the entry's meta (``meta["key"]``).
* **Value -> content.** The value, a JSON object (a mapping with string keys and JSON
  values: anything else raises ``InvalidArgument`` saying what), stored as its JSON text
  (kind ``"text"``): ``Store.lines``, ``Store.grep``, ``blobpad read`` and ``blobpad grep`` read it like any
  entry.  Tuples come
  back as lists, as through any JSON store.
* **Timestamps.** ``Item.created_at`` is the entry's ``created_at`` (blobpad keeps the
  first put of a name while it lives), ``Item.updated_at`` its ``updated_at``; both are
  timezone-aware UTC datetimes.
* **TTL.** ``put(..., ttl=minutes)`` (or ``TTLConfig.default_ttl``) is the entry's blobpad
  ``ttl`` in seconds; no TTL means the entry never expires.  A read that refreshes
  (``refresh_ttl``, default ``TTLConfig.refresh_on_read``, else True) calls
  ``Store.touch`` on each item it returns, with the item's own TTL (kept in
  ``meta["ttl"]``, minutes).  Expired entries are never returned (``omit_expired`` is
  always in effect) and ``Store.gc()`` reclaims them; with
  ``TTLConfig.sweep_interval_minutes`` a daemon thread runs ``gc()`` at that interval
  until :meth:`BlobpadStore.close`.
* **Vectors.** With ``index={"dims": ..., "embed": ..., "fields": [...]}`` each put embeds
  the texts at the fields (or at ``put``'s ``index=[...]``; ``index=False`` embeds
  nothing) through the caller's embedding function, and keeps the vectors in the entry's
  meta as little-endian float32, base64 (``meta["vectors"]``: field path -> vector; a
  path holding a list gives ``path.0``, ``path.1``, ...).  A query is an exact cosine
  search over the vectors of the items the namespace prefix and filter select; an item
  scores its best vector, and items without vectors come after the scored ones with
  ``score=None``.  blobpad caps meta at 64 KB of JSON, so an item holds about 48 KB of
  vectors (twelve of 1,024 dimensions, three of 3,072): more raises ``InvalidArgument``.
  Without ``index=``, a search's ``query`` is ignored, as in ``InMemoryStore``.

Search order: namespaces in the order of their labels joined by ``"."`` (so ``("a", "b")``
comes after ``("a-",)``, where ``list_namespaces`` sorts the tuples), then a namespace's
items in the order of their last put; with a query, by score.  Filters are those of ``InMemoryStore``: equality
(nested dicts and lists compared as JSON) and the operators ``$eq``, ``$ne``, ``$gt``,
``$gte``, ``$lt``, ``$lte`` (the ordering ones compare as ``float()`` does: ``True`` is 1,
``"2.5"`` is 2.5; a field that is none of these matches no ordering).  A batch runs its reads
first, then its writes (the last write of a key wins), as ``InMemoryStore`` does.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import os
import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import MAX_STR_BYTES, MAX_TTL, BlobpadError, InvalidArgument, NotFound, describe, typename
from ..index import Entry
from ..put import MAX_META, check_meta, non_str_key
from ..store import Store
from ..store import open as open_store

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - the test environment has langgraph-checkpoint
    raise ImportError(
        "blobpad.integrations.langgraph needs langgraph-checkpoint: pip install 'blobpad[langgraph]' "
        f"(in a checkout of blobpad: pip install '.[langgraph]'; {exc})"
    ) from exc

__all__ = ["BlobpadStore", "SESSION_PREFIX", "HASHED_NAME"]

#: the prefix of every session holding LangGraph items
SESSION_PREFIX = "langgraph:"
#: the name prefix of items whose key is too long (or starts with it): the rest is the key's sha256
HASHED_NAME = "\x00sha256:"
#: the longest key stored under its own name, in bytes of UTF-8
_MAX_PLAIN_KEY = 200
#: the most bytes of base64 vectors one item's meta holds (blobpad caps meta at 64 KB of JSON)
_MAX_VECTOR_BYTES = 48 << 10
#: marks the entries this module wrote (a blobpad entry without it is not an item)
_MARK = "langgraph"
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _session(namespace: tuple[str, ...]) -> str:
    return SESSION_PREFIX + ".".join(namespace)


def _valid(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogates): what is not is never stored,
    so reads of it find nothing and deletes of it do nothing."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _fits(session: str) -> bool:
    """Whether a session can be stored at all: valid Unicode, and short enough."""
    try:
        return len(session.encode("utf-8")) <= MAX_STR_BYTES
    except UnicodeEncodeError:
        return False


def _namespace(session: str) -> tuple[str, ...]:
    return tuple(session[len(SESSION_PREFIX):].split("."))


def _name(key: str) -> str:
    """The entry name of a key (see the module docstring)."""
    if not isinstance(key, str):
        raise InvalidArgument(f"a LangGraph key must be a string, not {typename(key)}")
    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("the key contains lone surrogates; pass valid Unicode text") from None
    if len(raw) <= _MAX_PLAIN_KEY and not key.startswith(HASHED_NAME):
        return key
    return HASHED_NAME + hashlib.sha256(raw).hexdigest()


def _value_text(value: object) -> str:
    """The JSON text of an item's value; raise InvalidArgument unless it is a JSON object."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"a LangGraph value must be a dict (a JSON object), not {typename(value)}")
    try:
        text = json.dumps(dict(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise InvalidArgument("the value is nested too deeply to store as JSON") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"a LangGraph value must be JSON-serialisable: {exc}") from None
    _check_keys(value)  # after dumps, which refuses a value that contains itself
    if not _valid(text):
        raise InvalidArgument("the value contains lone surrogates; pass valid Unicode text")
    return text


def _check_keys(value: object) -> None:
    """Refuse a dict key that is not a string, at any depth: JSON would turn 1 into "1" and
    None into "null" without a word (and {1: "a", "1": "b"} into one key)."""
    found = non_str_key(value)
    if found is not None:
        raise InvalidArgument(f"a value's keys must be strings at every depth, not {typename(found[0])} "
                              f"({found[0]!r:.80})")


def _ttl_seconds(ttl: object) -> float | None:
    """Seconds of a TTL in minutes (None: never expires); raise InvalidArgument for a bad one."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidArgument(f"ttl must be a number of minutes or None, not {typename(ttl)}")
    seconds = float(max(-MAX_TTL, min(ttl, MAX_TTL + 1))) * 60  # float() of a huge int would overflow
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"ttl must be a positive number of minutes or None (never expires), not {describe(ttl)}")
    if seconds > MAX_TTL:
        raise InvalidArgument(f"ttl is {describe(ttl)} minutes; the longest is {MAX_TTL // 60} minutes: pass None for never")
    return seconds


def _pack(vector: Sequence[float], dims: int | None) -> str:
    values = [float(x) for x in vector]
    if dims is not None and len(values) != dims:
        raise InvalidArgument(f"the embedding function returned {len(values)} dimensions; index['dims'] says {dims}")
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def _unpack(text: str) -> list[float]:
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def _cosine(query: Sequence[float], query_norm: float, vector: Sequence[float]) -> float:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0 or query_norm == 0:
        return 0.0
    return sum(a * b for a, b in zip(query, vector, strict=False)) / (norm * query_norm)


def _matches_path(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidArgument(f"match_type must be 'prefix' or 'suffix', not {describe(condition.match_type)}")
    return all(p == "*" or k == p for k, p in pairs)


def _compare(item_value: Any, wanted: Any) -> bool:
    """Whether ``item_value`` satisfies the filter value ``wanted`` (InMemoryStore's rules)."""
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(item_value, op, operand) for op, operand in wanted.items())
        if not isinstance(item_value, Mapping):
            return False
        return all(_compare(item_value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (isinstance(item_value, (list, tuple)) and len(item_value) == len(wanted)
                and all(_compare(a, b) for a, b in zip(item_value, wanted, strict=True)))
    return bool(item_value == wanted)


def _number(value: Any) -> float | None:
    """``float(value)``, as InMemoryStore compares (True is 1, "2.5" is 2.5), or None."""
    if not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in _OPERATORS:
        raise InvalidArgument(f"unsupported filter operator {describe(op)}: use one of {', '.join(_OPERATORS)}")
    a, b = _number(value), _number(operand)
    if b is None:
        raise InvalidArgument(f"the filter operator {op} takes a number, not {typename(operand)}")
    if a is None:
        return False  # a missing or non-numeric field satisfies no ordering
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _check_page(limit: object, offset: object) -> None:
    for label, n in (("limit", limit), ("offset", offset)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgument(f"{label} must be a non-negative integer, not {n!r:.80}")


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


class _Found:
    """An item read from the store, with what search and refresh need."""

    __slots__ = ("item", "entry", "vectors")

    def __init__(self, item: Item, entry: Entry, vectors: list[list[float]]) -> None:
        self.item, self.entry, self.vectors = item, entry, vectors


class BlobpadStore(BaseStore):
    """A LangGraph ``BaseStore`` over a blobpad store (the mapping is in the module docstring).

    Args:
        store: None for a fresh in-memory store (``memory://``), a path or URL that
            :func:`blobpad.open` takes, or an open :class:`blobpad.Store`.  A store this
            class opened is closed by :meth:`close`; one passed in is left open.
        index: semantic search: ``{"dims": int, "embed": embeddings or function,
            "fields": ["$"] by default}`` (LangGraph's ``IndexConfig``).
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes) for puts without one,
            ``refresh_on_read`` (default True), ``sweep_interval_minutes`` (a thread
            running ``Store.gc()``).

    Raises:
        InvalidArgument: a bad argument (also a ``ValueError``).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        if store is None:
            self.store, self._owned = open_store("memory://"), True
        elif isinstance(store, Store):
            self.store, self._owned = store, False
        elif isinstance(store, (str, os.PathLike)):
            self.store, self._owned = open_store(store), True
        else:
            raise InvalidArgument(f"store must be a blobpad.Store, a path or URL, or None, not {typename(store)}")
        try:
            self.ttl_config = self._check_ttl_config(ttl)
            self.index_config: dict[str, Any] | None = None
            self.embeddings = None
            self._fields: list[tuple[str, str | list[str]]] = []
            if index is not None:
                self._setup_index(index)
        except BaseException:
            self.close()
            raise
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        sweep = (self.ttl_config or {}).get("sweep_interval_minutes")
        if sweep:
            self._sweeper = threading.Thread(target=self._sweep, args=(float(sweep) * 60,), daemon=True,
                                             name="blobpad-langgraph-sweeper")
            self._sweeper.start()

    # -- configuration ------------------------------------------------------------------

    @staticmethod
    def _check_ttl_config(ttl: object) -> TTLConfig | None:
        if ttl is None:
            return None
        if not isinstance(ttl, Mapping):
            raise InvalidArgument(f"ttl must be a TTLConfig dict or None, not {typename(ttl)}")
        known = {"default_ttl", "refresh_on_read", "omit_expired", "sweep_interval_minutes"}
        unknown = sorted(set(ttl) - known)
        if unknown:
            raise InvalidArgument(f"unknown TTLConfig keys {unknown}: the keys are {sorted(known)}")
        _ttl_seconds(ttl.get("default_ttl"))
        if not isinstance(ttl.get("refresh_on_read", True), bool):
            raise InvalidArgument("TTLConfig's refresh_on_read must be True or False")
        sweep = ttl.get("sweep_interval_minutes")
        if sweep is not None and (isinstance(sweep, bool) or not isinstance(sweep, (int, float))
                                  or not 0 < sweep < math.inf):
            raise InvalidArgument(f"TTLConfig's sweep_interval_minutes must be a positive number, not {describe(sweep)}")
        return TTLConfig(**ttl)  # type: ignore[typeddict-item]

    def _setup_index(self, index: object) -> None:
        if not isinstance(index, Mapping):
            raise InvalidArgument(f"index must be an IndexConfig dict, not {typename(index)}")
        dims = index.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or dims <= 0:
            raise InvalidArgument(f"index['dims'] must be a positive integer, not {describe(dims)}")
        if index.get("embed") is None:
            raise InvalidArgument("index['embed'] must be an embeddings object or function")
        fields = index.get("fields") or ["$"]
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise InvalidArgument("index['fields'] must be a list of field paths (strings)")
        self.index_config = dict(index)
        self.embeddings = ensure_embeddings(index["embed"])
        self._fields = [(f, f if f == "$" else tokenize_path(f)) for f in fields]

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the TTL sweeper, and close the blobpad store if this object opened it."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            if self._sweeper is not None and self._sweeper is not threading.current_thread():
                self._sweeper.join()
        if self._owned:
            self.store.close()

    def __enter__(self) -> BlobpadStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BlobpadStore({self.store!r})"

    def _sweep(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            try:
                self.store.gc()
            except BlobpadError:
                if self._stop.is_set():
                    return  # the store closed under the sweeper

    # -- batches ------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run LangGraph ops: reads first, in order, then the writes (the last one of a key wins)."""
        ops = self._check_ops(ops)
        docs = self._texts(ops)
        vectors = self.embeddings.embed_documents([t for t, _ in docs]) if docs and self.embeddings else []
        queries = self._queries(ops)
        qvec = dict(zip(queries, (self.embeddings.embed_query(q) for q in queries), strict=True)) if queries else {}
        return self._run(ops, docs, vectors, qvec)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` for asyncio: embeddings through the async API, the store in a worker thread."""
        ops = self._check_ops(ops)
        docs = self._texts(ops)
        vectors = await self.embeddings.aembed_documents([t for t, _ in docs]) if docs and self.embeddings else []
        queries = self._queries(ops)
        qvec: dict[str, list[float]] = {}
        if queries and self.embeddings:
            found = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
            qvec = dict(zip(queries, found, strict=True))
        return await asyncio.to_thread(self._run, ops, docs, vectors, qvec)

    @staticmethod
    def _check_ops(ops: Iterable[Op]) -> list[Op]:
        ops = list(ops)
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise InvalidArgument(f"unknown LangGraph operation {typename(op)}")
            validate_op_namespace(op)
            if isinstance(op, (GetOp, PutOp)) and not isinstance(op.key, str):
                raise InvalidArgument(f"a LangGraph key must be a string, not {typename(op.key)}")
            if isinstance(op, PutOp) and op.value is not None:
                if not op.namespace:  # as BaseStore.put refuses it (a batch's PutOp bypasses that check)
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                _name(op.key)  # a key that cannot be stored is refused; reads and deletes of it find nothing
                if any(not _valid(label) for label in op.namespace):
                    raise InvalidArgument("a namespace label contains lone surrogates; pass valid Unicode text")
                _value_text(op.value)
                _ttl_seconds(op.ttl)
                if op.index not in (None, False) and (isinstance(op.index, str) or
                                                      not all(isinstance(p, str) for p in op.index)):
                    raise InvalidArgument("a put's index must be False, None or a list of field paths")
            if isinstance(op, SearchOp):
                _check_page(op.limit, op.offset)
                if op.filter is not None and not isinstance(op.filter, Mapping):
                    raise InvalidArgument(f"a search filter must be a dict, not {typename(op.filter)}")
                if op.query is not None and not isinstance(op.query, str):
                    raise InvalidArgument(f"a search query must be a string, not {typename(op.query)}")
            if isinstance(op, ListNamespacesOp):
                _check_page(op.limit, op.offset)
                if op.max_depth is not None and (isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int)
                                                 or op.max_depth < 1):
                    raise InvalidArgument(f"max_depth must be a positive integer or None, not {describe(op.max_depth)}")
        return ops

    @staticmethod
    def _last_puts(ops: list[Op]) -> dict[tuple[tuple[str, ...], str], PutOp]:
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                puts.pop((op.namespace, op.key), None)
                puts[(op.namespace, op.key)] = op
        return puts

    def _texts(self, ops: list[Op]) -> list[tuple[str, tuple[tuple[str, ...], str, str]]]:
        """The texts to embed of the batch's surviving puts: (text, (namespace, key, path))."""
        if not self.embeddings:
            return []
        out = []
        for op in self._last_puts(ops).values():
            if op.value is None or op.index is False:
                continue
            paths = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
            for path, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                if len(texts) == 1:
                    out.append((texts[0], (op.namespace, op.key, path)))
                else:
                    out.extend((t, (op.namespace, op.key, f"{path}.{i}")) for i, t in enumerate(texts))
        return out

    def _queries(self, ops: list[Op]) -> list[str]:
        if not self.embeddings:
            return []
        return sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})

    def _run(self, ops: list[Op], docs: list[tuple[str, tuple[tuple[str, ...], str, str]]],
             vectors: list[list[float]], qvec: dict[str, list[float]]) -> list[Result]:
        if len(vectors) != len(docs):
            raise InvalidArgument(f"the embedding function returned {len(vectors)} vectors for {len(docs)} texts")
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op, qvec.get(op.query) if op.query else None))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                results.append(None)
        packed: dict[tuple[tuple[str, ...], str], dict[str, str]] = {}
        dims = self.index_config.get("dims") if self.index_config else None
        for (_, (ns, key, path)), vector in zip(docs, vectors, strict=True):
            packed.setdefault((ns, key), {})[path] = _pack(vector, dims)
        writes = [(ns, key, None if op.value is None else self._prepare(op, packed.get((ns, key), {})))
                  for (ns, key), op in self._last_puts(ops).items()]  # every put checked before the first write
        for ns, key, put in writes:
            if put is None:
                self._delete(ns, key)
            else:
                text, kwargs = put
                self.store.put(text, **kwargs)
        return results

    # -- one op -------------------------------------------------------------------------

    def _load(self, entry: Entry, namespace: tuple[str, ...], with_vectors: bool) -> _Found | None:
        """The item ``entry`` holds (None if it is not a LangGraph item); NotFound if it is gone."""
        meta = entry.meta
        if meta.get(_MARK) != 1 or not isinstance(meta.get("key"), str):
            return None
        text = self.store.get(entry.id)
        try:
            value = json.loads(text)
        except ValueError:
            raise BlobpadError(
                f"the entry {entry.id} (key {meta['key']!r:.200}) is marked as a LangGraph item but does not hold "
                "JSON; delete it with blobpad rm"
            ) from None
        updated = entry.updated_at if entry.updated_at is not None else entry.created_at
        item = Item(value=value, key=meta["key"], namespace=namespace,
                    created_at=_when(entry.created_at), updated_at=_when(updated))
        vecs = [_unpack(v) for v in meta.get("vectors", {}).values()] if with_vectors else []
        return _Found(item, entry, vecs)

    def _refresh(self, found: Iterable[_Found]) -> None:
        for f in found:
            minutes = f.entry.meta.get("ttl")
            if minutes is None:
                continue
            try:
                self.store.touch(f.entry.id, float(minutes) * 60)
            except NotFound:
                pass  # expired or replaced meanwhile: nothing to keep alive

    def _get(self, op: GetOp) -> Item | None:
        session = _session(op.namespace)
        if not _fits(session) or not _valid(op.key):
            return None
        try:
            with self.store.snapshot():  # the entry found is the entry read, whatever another host writes
                found = self._load(self.store.find(_name(op.key), session=session), tuple(op.namespace), False)
        except NotFound:
            return None
        if found is None or found.item.key != op.key:
            return None
        if op.refresh_ttl:
            self._refresh([found])
        return found.item

    def _sessions(self, head: tuple[str, ...]) -> list[str]:
        """The LangGraph sessions whose namespace starts with the labels ``head``."""
        prefix = _session(head)
        if not _fits(prefix):
            return []
        out = []
        for session in self.store.sessions(prefix=prefix):
            ns = _namespace(session)
            if ns[:len(head)] == tuple(head) and all(ns):
                out.append(session)
        return out

    def _search(self, op: SearchOp, query: list[float] | None) -> list[SearchItem]:
        wanted = op.filter or {}
        stop = None if wanted or query is not None else op.offset + op.limit
        candidates: list[_Found] = []
        with self.store.snapshot():  # the items listed are the items read, whatever another host writes
            for session in self._sessions(tuple(op.namespace_prefix)):
                ns = _namespace(session)
                for entry in self.store.entries(session=session):
                    try:
                        found = self._load(entry, ns, query is not None)
                    except NotFound:  # expired since it was listed
                        continue
                    if found is None or not all(_compare(found.item.value.get(k), v) for k, v in wanted.items()):
                        continue
                    candidates.append(found)
                    if stop is not None and len(candidates) >= stop:
                        break
                if stop is not None and len(candidates) >= stop:
                    break
        scores: list[float | None]
        if query is not None:
            qnorm = math.sqrt(sum(x * x for x in query))
            scored = [(max(_cosine(query, qnorm, v) for v in f.vectors), f) for f in candidates if f.vectors]
            scored.sort(key=lambda pair: pair[0], reverse=True)
            ranked = [f for _, f in scored] + [f for f in candidates if not f.vectors]
            scores = [s for s, _ in scored] + [None] * (len(ranked) - len(scored))
        else:
            ranked, scores = candidates, [None] * len(candidates)
        page = slice(op.offset, op.offset + op.limit)
        ranked, scores = ranked[page], scores[page]
        if op.refresh_ttl:
            self._refresh(ranked)
        return [SearchItem(namespace=f.item.namespace, key=f.item.key, value=f.item.value,
                           created_at=f.item.created_at, updated_at=f.item.updated_at, score=s)
                for f, s in zip(ranked, scores, strict=True)]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = list(op.match_conditions or ())
        head: tuple[str, ...] = ()
        for c in conditions:
            if c.match_type == "prefix":
                literal = []
                for label in c.path:
                    if label == "*":
                        break
                    literal.append(label)
                head = max(head, tuple(literal), key=len)
        namespaces = [_namespace(s) for s in self._sessions(head)]
        namespaces = [ns for ns in namespaces if all(_matches_path(c, ns) for c in conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[:op.max_depth] for ns in namespaces})
        else:
            namespaces.sort()
        return namespaces[op.offset:op.offset + op.limit]

    def _prepare(self, op: PutOp, vectors: dict[str, str]) -> tuple[str, dict[str, Any]]:
        """The content and the arguments of ``Store.put`` for a put, or InvalidArgument."""
        session = _session(op.namespace)
        if not _fits(session):
            raise InvalidArgument(
                f"the namespace {op.namespace!r:.200} is too long for blobpad: its labels joined by '.' and the prefix "
                f"{SESSION_PREFIX!r} must fit {MAX_STR_BYTES} bytes of UTF-8"
            )
        size = sum(len(v) for v in vectors.values())
        if size > _MAX_VECTOR_BYTES:
            raise InvalidArgument(
                f"the item's {len(vectors)} vectors take {size} bytes of base64; an item holds at most "
                f"{_MAX_VECTOR_BYTES}: index fewer fields (put's index=[...]) or use fewer dimensions"
            )
        ttl = _ttl_seconds(op.ttl)
        meta: dict[str, Any] = {_MARK: 1, "key": op.key, "ttl": op.ttl}
        if vectors:
            meta["vectors"] = vectors
        try:  # here, before the batch's first write, not in Store.put after some of them
            check_meta(meta)
        except InvalidArgument:
            raise InvalidArgument(
                f"the key is {len(op.key)} characters: blobpad keeps a key (with the item's vectors) in at most "
                f"{MAX_META} characters of JSON per item; use a shorter key"
            ) from None
        return _value_text(op.value), {"session": session, "name": _name(op.key), "ttl": ttl, "meta": meta, "kind": "text"}

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        session = _session(namespace)
        if not _fits(session) or not _valid(key):
            return
        try:
            entry = self.store.find(_name(key), session=session)
            self.store.delete(entry.id)
        except NotFound:
            pass  # absent, expired, or deleted meanwhile: the key is gone either way
