"""The tools a model calls to read (and, per profile, write) the scratchpad.

A :class:`Toolbox` is bound to one store, one session and (for turn-scoped
profiles) one turn.  It gives the tool definitions in the shape each API wants
(:meth:`Toolbox.schemas`) and runs the model's calls (:meth:`Toolbox.call`), which
never raise: every answer is a JSON object with ``ok``; a failure's ``error`` says
what was wrong and how to call again.

Profiles (:data:`PROFILES`) are drop-ins for the design seeds: same tool names,
parameters, defaults and result shapes.  The default, ``"blobpad"``, is the best of
them.  Scope: a turn-scoped toolbox sees only the current turn's entries (seed
000), a session-scoped one the whole session's (seed 003).  An entry outside the
scope answers exactly like an id that never existed.

Every result is capped at ``max_result_chars`` characters of JSON; whatever is cut
is reported with ``truncated: true``, a ``notice`` and, in ``next``, the arguments
that read on.

The package: :mod:`~blobpad.tools.spec` (what a tool and a profile are, the result
cap), :mod:`~blobpad.tools.toolbox` (the :class:`Toolbox`), :mod:`~blobpad.tools.profiles`
(one module and one :class:`~blobpad.tools.spec.Profile` record per profile),
:mod:`~blobpad.tools.reading` and :mod:`~blobpad.tools.notes` (helpers the profiles
share) and :mod:`~blobpad.tools.sandbox` (the file-offload sandbox).
"""

from __future__ import annotations

# importable from here as before the split, beside __all__
from .sandbox import LimitedReader as LimitedReader
from .spec import Handler as Handler
from .spec import Param, ToolSpec
from .spec import Profile as Profile
from .spec import ToolError as ToolError
from .spec import result_size as result_size
from .toolbox import FLAVORS, PROFILES, Toolbox
from .toolbox import profile_records as profile_records

__all__ = ["Toolbox", "PROFILES", "FLAVORS", "Param", "ToolSpec"]
