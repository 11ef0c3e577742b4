"""How much memory DuckDB may keep for the store once it serves (`ENGRAM_STORE_CACHE_MIB`).

DuckDB keeps every block it read cached up to its memory limit, 80 % of the machine's memory
by default: after the full read (core/integrity_scan.py) a 100k-record store's server held
1.4 GiB, most of it blocks no call needed again. Serving needs little of DuckDB's memory (point
lookups and small scans; the search index is in this process), so once the store is loaded
the limit is lowered to this bound, which also evicts what the load cached. The load itself
runs under DuckDB's default, so building the index never spills.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from engram_memory.contract.exceptions import ConfigurationError

STORE_CACHE_ENV = "ENGRAM_STORE_CACHE_MIB"
# 512: at 100k records a search's p50 over stdio was as without a bound (123 ms against
# 114-138 ms, load ~20) and the server held 1,055 MiB after 300 searches instead of 1,466;
# 128 held 660 MiB but searches re-read bodies the cache let go (p50 175-290 ms).
DEFAULT_STORE_CACHE_MIB = 512
_SMALLEST_MIB = 32  # below it DuckDB refuses ordinary statements


def store_cache_mib(env: Mapping[str, str] | None = None) -> int:
    """The configured bound.

    Raises:
        ConfigurationError: `ENGRAM_STORE_CACHE_MIB` is not a whole number >= 32.
    """
    text = (os.environ if env is None else env).get(STORE_CACHE_ENV, "")
    if not text:
        return DEFAULT_STORE_CACHE_MIB
    if not text.isdigit() or int(text) < _SMALLEST_MIB:
        raise ConfigurationError(f"{STORE_CACHE_ENV} must be a whole number of MiB >= 32")
    return int(text)
