"""blobpad's benchmark suite (issue 7).

``pytest benchmarks/ --benchmark-only`` times every operation of blobpad next to
the peers an agent runtime would otherwise use; ``python -m benchmarks`` runs a
quick version of it and writes a Markdown report and a chart.  Plain ``pytest``
runs the same benchmarks in smoke mode (smallest size, each one once) so that the
suite cannot rot.  See ``benchmarks/README.md``.
"""

import os as _os
import sys as _sys

#: ``BLOBPAD_CHECKOUT=DIR python -m benchmarks.X`` measures the blobpad of the checkout at DIR
#: (its ``blobpad`` package is imported instead of this one's) with this checkout's programs:
#: the way to put figures of an older layout beside the current ones.  Each program prints
#: which blobpad it imported.
_CHECKOUT = _os.environ.get("BLOBPAD_CHECKOUT")
if _CHECKOUT:
    if "blobpad" in _sys.modules:
        raise RuntimeError("BLOBPAD_CHECKOUT is set but blobpad was imported before the benchmarks: run "
                           "python -m benchmarks.<program> directly")
    if not _os.path.isdir(_os.path.join(_CHECKOUT, "blobpad")):
        raise SystemExit(f"BLOBPAD_CHECKOUT={_CHECKOUT}: no blobpad package in that directory")
    _sys.path.insert(0, _os.path.abspath(_CHECKOUT))
    import blobpad as _measured

    print(f"benchmarks: BLOBPAD_CHECKOUT: measuring the blobpad at {_os.path.dirname(_measured.__file__)}",
          file=_sys.stderr)
