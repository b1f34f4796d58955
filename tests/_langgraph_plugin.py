"""A pytest plugin that runs LangGraph's own store tests against :class:`BlobpadStore`.

``pytest -p _langgraph_plugin tests/test_store.py`` (with this directory on
``PYTHONPATH``), from the root of the langgraph-checkpoint sdist: before collection
it replaces ``langgraph.store.memory.InMemoryStore``, which those tests build
directly, with a subclass of ``BlobpadStore`` on the engine named by
``$BLOBPAD_LANGGRAPH_ENGINE``: ``memory`` (each store a fresh ``memory://``) or
``lmdb`` (each store a fresh directory under a temporary one, removed at the end).
tests/test_langgraph_conformance.py runs it once per engine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import pytest

import blobpad
from blobpad.integrations.langgraph import BlobpadStore

ENGINE = os.environ.get("BLOBPAD_LANGGRAPH_ENGINE", "memory")
_opened: list[blobpad.Store] = []
_root: list[str] = []


class SubstitutedStore(BlobpadStore):
    """``BlobpadStore`` on the engine under test, built as the tests build ``InMemoryStore(index=...)``."""

    def __init__(self, store: Any = None, **kwargs: Any) -> None:
        if store is None:
            if ENGINE == "lmdb":
                if not _root:
                    _root.append(tempfile.mkdtemp(prefix="blobpad-langgraph-"))
                # sync=False: these tests check behaviour, not durability (and 2 shared cores fsync slowly)
                store = blobpad.open(tempfile.mkdtemp(dir=_root[0]), sync=False)
            elif ENGINE == "memory":
                store = blobpad.open("memory://")
            else:
                raise pytest.UsageError(f"BLOBPAD_LANGGRAPH_ENGINE must be 'memory' or 'lmdb', not {ENGINE!r}")
            _opened.append(store)
        super().__init__(store, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    import langgraph.store.memory

    langgraph.store.memory.InMemoryStore = SubstitutedStore  # type: ignore[misc]


def pytest_report_header(config: pytest.Config) -> str:
    return f"InMemoryStore is blobpad.integrations.langgraph.BlobpadStore on the {ENGINE} engine"


def pytest_unconfigure(config: pytest.Config) -> None:
    for store in _opened:
        store.close()
    for root in _root:
        shutil.rmtree(root, ignore_errors=True)
