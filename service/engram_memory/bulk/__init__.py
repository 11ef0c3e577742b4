"""Bulk import of captures (importer.py).

The defaults live here, not in importer.py, so that `engram-memory import`'s parser
can show it without loading the importer (and the store and tools beneath it).
"""

DEFAULT_BATCH = 500  # lines per write transaction
# Processes preparing lines (bulk/pool.py) beside the one that writes: one per core of the
# 2-core machines measured (bench/results/import_speed.md).
DEFAULT_WORKERS = 2
