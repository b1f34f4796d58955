"""The tool profiles, one module each, and their registry.

Each module defines one :class:`~blobpad.tools.spec.Profile` record, ``PROFILE``; the
:class:`~blobpad.tools.Toolbox` reads a profile's scope, result cap, offloader policy,
notepad use, context block and tools from it and from nothing else.  A new profile is
a new module here and one line in :data:`REGISTRY`.
"""

from __future__ import annotations

from ..spec import Profile
from . import blobpad, seed000, seed001, seed002, seed003, seed004

__all__ = ["REGISTRY", "Profile"]

#: Every profile by name, in the order they are listed (``blobpad`` first, the default).
REGISTRY: dict[str, Profile] = {
    p.name: p for p in (blobpad.PROFILE, seed000.PROFILE, seed003.PROFILE, seed001.PROFILE, seed002.PROFILE,
                        seed004.PROFILE)
}
