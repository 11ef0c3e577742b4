"""Bulk import of captures (importer.py).

The default batch size lives here, not in importer.py, so that `engram-memory import`'s parser
can show it without loading the importer (and the store and tools beneath it).
"""

DEFAULT_BATCH = 500  # lines per write transaction
