"""Shared fixtures: real LMDB stores in temporary directories, never mocks."""

from __future__ import annotations

import shutil

import pytest

import blobpad


@pytest.fixture
def store(tmp_path):
    """A fresh store in a temporary directory, closed after the test."""
    s = blobpad.open(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def store_factory(tmp_path):
    """Open stores with options: ``store_factory(name="x", **options)``."""
    opened = []

    def make(name: str = "store", **options):
        s = blobpad.open(tmp_path / name, **options)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def rg():
    """Path of ripgrep, or skip."""
    path = shutil.which("rg")
    if not path:
        pytest.skip("ripgrep (rg) is not installed")
    return path
