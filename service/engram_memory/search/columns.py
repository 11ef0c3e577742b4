"""Packed postings and growable numpy columns: the storage shapes of the in-memory index.

A posting packs (slot, field, tf) into one int64: the slot (a record's position in its scope)
in the high 32 bits, the field's index in `FIELD_NAMES` in the next 8, the term frequency in
the low 24. `OPEN` stands for an absent end or expiry, so comparisons need no NULL case.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from engram_memory.search.fields import FIELD_NAMES

Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

OPEN = np.iinfo(np.int64).max  # no t_end, no expiry, or a slot whose record row is not seen yet
FIELD_INDEX: Mapping[str, int] = {name: index for index, name in enumerate(FIELD_NAMES)}
SLOT_SHIFT = 32
FIELD_SHIFT = 24
TF_MASK = (1 << FIELD_SHIFT) - 1
ID_BYTES = 64  # record ids are `mem_` + 52 base32 characters; longer ones disable the index


class Growing:
    """A 1-D numpy array that grows by doubling (amortized O(1) appends)."""

    def __init__(self, dtype: npt.DTypeLike, capacity: int = 16) -> None:
        self.data: npt.NDArray[Any] = np.zeros(capacity, dtype=dtype)
        self.size = 0

    def reserve(self, extra: int) -> None:
        needed = self.size + extra
        if needed > len(self.data):
            grown = np.zeros(max(needed, 2 * len(self.data)), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown

    def extend(self, values: npt.ArrayLike) -> None:
        array = np.asarray(values, dtype=self.data.dtype)
        self.reserve(len(array))
        self.data[self.size : self.size + len(array)] = array
        self.size += len(array)

    def view(self) -> npt.NDArray[Any]:
        return self.data[: self.size]
