"""``python -m blobpad``: the same command as the ``blobpad`` entry point."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
