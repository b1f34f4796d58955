"""What a fork leaves behind, reset in the child.

A forked child inherits every lock in the state the parent's threads left it, and the
structures those threads were changing, but only the forking thread lives on in it.
An object holding such state registers with :func:`reset_in_child`; its
``_after_fork()`` then runs in every child this process forks, before the child's own
code goes on.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["reset_in_child", "pid"]


class _Resettable(Protocol):
    def _after_fork(self) -> None: ...


_OBJECTS: weakref.WeakSet[_Resettable] = weakref.WeakSet()


def reset_in_child(obj: _Resettable) -> None:
    """Run ``obj._after_fork()`` in every child forked while ``obj`` lives."""
    _OBJECTS.add(obj)


#: this process's id, kept up to date in forked children (``os.getpid()`` is a system call)
_PID = [os.getpid()]


def pid() -> int:
    """This process's id, as ``os.getpid()`` gives it, without a system call."""
    return _PID[0]


def _reset_all() -> None:
    _PID[0] = os.getpid()
    for obj in list(_OBJECTS):
        obj._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_all)
