"""blobpad's benchmark suite (issue 7).

``pytest benchmarks/ --benchmark-only`` times every operation of blobpad next to
the peers an agent runtime would otherwise use; ``python -m benchmarks`` runs a
quick version of it and writes a Markdown report and a chart.  Plain ``pytest``
runs the same benchmarks in smoke mode (smallest size, each one once) so that the
suite cannot rot.  See ``benchmarks/README.md``.
"""
