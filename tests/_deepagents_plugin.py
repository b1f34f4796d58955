"""pytest plugin: run deepagents' own tests with StoreBackend replaced by blobpad's BlobpadBackend.

deepagents' tests are not on the package index; they run from a copy of its repository,
outside this project (issue 15).  From a fresh shell, with this checkout in ``$BLOBPAD``::

    git clone https://github.com/langchain-ai/deepagents /tmp/deepagents && git -C /tmp/deepagents checkout 23b83ad50
    python3 -m venv /tmp/da-venv
    /tmp/da-venv/bin/pip install -e "$BLOBPAD" deepagents==0.7.8 pytest==9.0.3 pytest-asyncio==1.4.0 \
        pytest-socket pytest-timeout pytest-mock pytest-xdist pytest-cov pytest-benchmark langchain-tests \
        langchain-openai pillow
    cd /tmp/deepagents/libs/deepagents
    PYTHONPATH="$BLOBPAD/tests" /tmp/da-venv/bin/python -m pytest -q -p no:cacheprovider -p _deepagents_plugin \
        --disable-socket --allow-unix-socket --benchmark-disable -o faulthandler_timeout=120 \
        tests/unit_tests/backends/test_store_backend.py tests/unit_tests/backends/test_store_backend_async.py \
        tests/unit_tests/middleware/ tests/unit_tests/test_middleware.py tests/unit_tests/test_middleware_async.py \
        tests/unit_tests/test_eviction_replay.py

(the same without ``-p _deepagents_plugin`` is the baseline; pytest 9.0.3 and pytest-asyncio
1.4.0 are the versions of deepagents' lock file, a newer pytest stops at its warnings filter).

Every test that builds ``StoreBackend(namespace=..., store=...)`` gets a
``BlobpadStoreBackend``: a subclass of ``blobpad.integrations.deepagents.BlobpadBackend``
whose files live in one blobpad store (memory; LMDB in a temporary directory with
``BLOBPAD_SUBST_ENGINE=lmdb``) per LangGraph store object passed (so two
backends over the same ``InMemoryStore`` share their files, as StoreBackends do), in the
blobpad session ``".".join(namespace(runtime))``; the namespace is checked by deepagents'
own ``_validate_namespace``, as StoreBackend checks it.  ``store=None`` (StoreBackend then
uses the graph's store) maps to one per-process default blobpad store.

With ``BLOBPAD_SUBST_SEED=1`` the shim also imports, at the start of every backend call,
the items of the call's namespace that the test put into the LangGraph store directly
(``mem_store.put(ns, path, {"content": str, "encoding": ...})``) and that are new or
changed since the last import: text as ``write``, base64 as ``upload_files`` of the
decoded bytes.  Legacy ``list[str]`` contents are NOT translated (a StoreBackend-only
format).  Nothing is ever copied back: tests reading the LangGraph store still fail.

The patch is applied when this module is imported (``-p`` imports it before any conftest
or test module), and again in ``pytest_configure``, on ``deepagents.backends.store``,
``deepagents.backends`` and any already imported module that bound the original name.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import sys
import tempfile
import weakref
from typing import Any

import deepagents.backends
import deepagents.backends.store as _da_store

import blobpad
from blobpad.integrations.deepagents import BlobpadBackend

ORIGINAL_STORE_BACKEND = _da_store.StoreBackend
_validate_namespace = _da_store._validate_namespace

_BY_WEAKREF: weakref.WeakKeyDictionary[Any, blobpad.Store] = weakref.WeakKeyDictionary()
_BY_ID: dict[int, tuple[Any, blobpad.Store]] = {}  # stores that cannot be weakly referenced (kept alive)
_DEFAULT: list[blobpad.Store] = []
SEED = os.environ.get("BLOBPAD_SUBST_SEED") == "1"
# LangGraph store -> (namespace, key) -> updated_at of its item last imported
_IMPORTED: weakref.WeakKeyDictionary[Any, dict[tuple[tuple[str, ...], str], Any]] = weakref.WeakKeyDictionary()
_IMPORTED_BY_ID: dict[int, dict[tuple[tuple[str, ...], str], Any]] = {}  # for the stores kept in _BY_ID


ENGINE = os.environ.get("BLOBPAD_SUBST_ENGINE", "memory")


def _new_store(owner: Any = None) -> blobpad.Store:
    """A fresh blobpad store: memory, or (``BLOBPAD_SUBST_ENGINE=lmdb``) LMDB in a temporary
    directory closed and removed when ``owner`` (the LangGraph store) is collected."""
    if ENGINE != "lmdb":
        return blobpad.open("memory://", max_bytes=1 << 30)
    directory = tempfile.mkdtemp(prefix="blobpad_subst_")
    _DIRS.append(directory)
    store = blobpad.open(directory, max_bytes=1 << 30)
    if owner is not None:
        # closed later, between tests: a Store closed from a GC finalizer while another one
        # is being opened in the same thread deadlocks on the LMDB engine registry's lock
        weakref.finalize(owner, _PENDING.append, (store, directory))
    return store


_PENDING: list[tuple[blobpad.Store, str]] = []
_DIRS: list[str] = []  # every LMDB directory made, removed at exit


def _drain() -> None:
    while _PENDING:
        store, directory = _PENDING.pop()
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


def _drop_default() -> None:
    _drain()
    for store in _DEFAULT:
        store.close()
    for directory in _DIRS:
        shutil.rmtree(directory, ignore_errors=True)


atexit.register(_drop_default)


def blobpad_store_for(lg_store: Any) -> blobpad.Store:
    """The blobpad store standing for the LangGraph store ``lg_store`` (None: the per-process default)."""
    if lg_store is None:
        if not _DEFAULT:
            _DEFAULT.append(_new_store())
        return _DEFAULT[0]
    try:
        found = _BY_WEAKREF.get(lg_store)
        if found is None:
            found = _BY_WEAKREF[lg_store] = _new_store(lg_store)
        return found
    except TypeError:  # not hashable or not weakly referenceable
        pair = _BY_ID.get(id(lg_store))
        if pair is None or pair[0] is not lg_store:
            pair = _BY_ID[id(lg_store)] = (lg_store, _new_store())
        return pair[1]


class BlobpadStoreBackend(BlobpadBackend):
    """StoreBackend's constructor over BlobpadBackend (see the module's documentation)."""

    def __init__(self, *, namespace: Any, store: Any = None) -> None:
        self._namespace = namespace
        self._lg_store = store
        super().__init__(blobpad_store_for(store), session=self._session_of)

    def _session_of(self, runtime: Any) -> str:
        namespace = _validate_namespace(self._namespace(runtime))
        session = ".".join(namespace)
        if SEED and self._lg_store is not None and not self.store.engine.pinned_here():
            # not inside a snapshot (grep's, read's): a write there is refused; the call's own start seeded
            _seed(self._lg_store, self.store, tuple(namespace), session)
        return session


def _seed(lg_store: Any, store: blobpad.Store, namespace: tuple[str, ...], session: str) -> None:
    """Import the items of ``namespace`` put into ``lg_store`` directly (new or changed ones)."""
    try:
        done = _IMPORTED.setdefault(lg_store, {})
    except TypeError:
        done = _IMPORTED_BY_ID.setdefault(id(lg_store), {})
    plain = BlobpadBackend(store, session=session)
    offset = 0
    while True:
        items = lg_store.search(namespace, limit=100, offset=offset)
        for item in items:
            if tuple(item.namespace) != namespace:
                continue  # a deeper namespace: another session
            mark = (namespace, item.key)
            if done.get(mark) == item.updated_at:
                continue
            done[mark] = item.updated_at
            content = item.value.get("content") if isinstance(item.value, dict) else None
            if not isinstance(content, str):
                continue  # legacy list[str] or malformed: not translated
            if item.value.get("encoding") == "base64":
                failed = plain.upload_files([(item.key, base64.standard_b64decode(content))])[0].error
            else:
                result = plain.write(item.key, content)  # an existing file: replaced (delete, then write)
                if result.error is not None and plain.delete(item.key).error is None:
                    result = plain.write(item.key, content)
                failed = result.error
            if failed is not None:
                del done[mark]  # not copied: tried again at the next call
        if len(items) < 100:
            break
        offset += 100


BlobpadStoreBackend.__name__ = BlobpadStoreBackend.__qualname__ = "StoreBackend"

# proof that the tests ran through the shim: instances built and BlobpadBackend calls made
CALLS: dict[str, int] = {"instances": 0}
_init = BlobpadStoreBackend.__init__


def _counted_init(self: BlobpadStoreBackend, **kwargs: Any) -> None:
    CALLS["instances"] += 1
    _init(self, **kwargs)


BlobpadStoreBackend.__init__ = _counted_init  # type: ignore[method-assign]


def _counter(name: str) -> Any:
    """BlobpadBackend's ``name``, counted; with seeding, the call's session is resolved (which imports
    what the test put into the LangGraph store) before the call, outside any snapshot the call opens."""
    method = getattr(BlobpadBackend, name)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        CALLS[name] = CALLS.get(name, 0) + 1
        if SEED and self._lg_store is not None:
            try:
                _ = self.session
            except Exception:
                pass  # the call itself says what is wrong with its session
        return method(self, *args, **kwargs)

    counted.__name__ = name
    return counted


for _name in ("ls", "read", "write", "edit", "delete", "grep", "glob", "upload_files", "download_files"):
    setattr(BlobpadStoreBackend, _name, _counter(_name))


def _patch() -> None:
    _da_store.StoreBackend = BlobpadStoreBackend
    deepagents.backends.StoreBackend = BlobpadStoreBackend
    for module in list(sys.modules.values()):
        try:
            if getattr(module, "StoreBackend", None) is ORIGINAL_STORE_BACKEND:
                module.StoreBackend = BlobpadStoreBackend
        except Exception:  # noqa: BLE001, S112 - lazy modules may refuse attribute access
            continue


_patch()


def pytest_configure(config: Any) -> None:  # noqa: ARG001
    _patch()


def pytest_runtest_teardown(item: Any) -> None:  # noqa: ARG001
    _drain()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"blobpad_subst (engine={ENGINE}, seed={'on' if SEED else 'off'}): {CALLS}")


def pytest_report_header(config: Any) -> str:  # noqa: ARG001
    return f"blobpad_subst: deepagents StoreBackend -> BlobpadStoreBackend(BlobpadBackend), engine={ENGINE}, seed={SEED}"
