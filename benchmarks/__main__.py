"""``python -m benchmarks``: run the suite and write the Markdown report and chart."""

from __future__ import annotations

import sys

from .report import main

sys.exit(main())
