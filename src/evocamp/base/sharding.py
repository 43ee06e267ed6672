"""How a generation's batch is split into evaluation shards.

A batch of ``n`` solutions is split into ``shards`` contiguous, near-equal slices;
shard ``s`` evaluates solutions ``start..stop-1``. Results never depend on the split
(every solution's evaluation seed depends only on its index in the batch), except for
algorithms whose shards propose their own solutions (decentralised BO), where each
shard is one worker of the algorithm.
"""

from __future__ import annotations

import numpy as np


def shard_bounds(batch: int, shards: int, shard: int) -> tuple[int, int]:
    """Slice ``[start, stop)`` of shard ``shard`` when ``batch`` solutions are split
    into ``shards`` contiguous, near-equal parts."""
    base, remainder = divmod(batch, shards)
    start = shard * base + min(shard, remainder)
    return start, start + base + (1 if shard < remainder else 0)


def shard_of_slice(batch: int, shards: int, start: int, stop: int) -> int | None:
    """The shard whose slice is exactly ``start..stop-1`` (``None`` if none is)."""
    for shard in range(shards):
        if shard_bounds(batch, shards, shard) == (start, stop):
            return shard
    return None


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
