"""What a Dask task holds of a batch and of an archive, indexed as if whole: its shard's
rows (:class:`Rows`) and the elites its offspring are made from (:class:`ElitesAt`).

How a batch is split into shards is the optimizer protocol's
(:func:`evocamp.model.protocol.shard_bounds`).
"""

from __future__ import annotations

import numpy as np


class Rows:
    """Rows ``offset..offset+len(array)-1`` of an array of ``length`` rows, indexed as
    if whole.

    A Dask task receives only its shard's rows of a plain batch (and of the seeds); this
    view lets the shard step index them with the shard's own positions in the batch,
    exactly as it indexes a whole batch read from a checkpoint.
    """

    def __init__(self, array, *, offset: int, length: int) -> None:
        self.array = array
        self.offset = int(offset)
        self.length = int(length)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: slice):
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("Rows supports contiguous slices only")
        start = (0 if index.start is None else index.start) - self.offset
        stop = (self.length if index.stop is None else index.stop) - self.offset
        if start < 0 or stop > len(self.array):
            raise IndexError(
                f"rows {index.start}..{index.stop} are outside the rows held "
                f"({self.offset}..{self.offset + len(self.array) - 1})"
            )
        return self.array[start:stop]


class ElitesAt:
    """The solutions of some cells of an archive, indexed by cell as if whole (an
    :class:`~evocamp.model.protocol.ElitesByCell`).

    A Dask task receives only the elites its shard's offspring are made from; this
    view gives them to the shard step exactly as the whole archive would.
    """

    def __init__(self, cells, solutions) -> None:
        self.cells = np.asarray(cells, dtype=np.int64)
        self.solutions = np.asarray(solutions)

    def __getitem__(self, cells):
        cells = np.asarray(cells, dtype=np.int64)
        positions = np.searchsorted(self.cells, cells)
        held = positions < len(self.cells)
        held[held] = self.cells[positions[held]] == cells[held]
        if not held.all():
            raise IndexError(f"cell {int(cells[~held][0])} is not among the cells held")
        return self.solutions[positions]
