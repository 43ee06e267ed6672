"""Compact QD batches (:class:`QDBatch`): a batch of Gaussian, iso-line and separable
CMA-ES emitters as its parents' cells and its generators' recorded states, and the
regeneration of any slice of its offspring bit for bit as pyribs' ``ask()`` made them
(what an evaluation shard runs). Making such a batch from pyribs' emitters is
:mod:`evocamp.families.qd.compact`'s; this module imports no pyribs.
"""

from __future__ import annotations

import hashlib

import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.model.protocol import ELITES, CompactBatch

#: ``emitter_kind`` of a compact QD batch: a Gaussian emitter's offspring are a parent
#: plus noise; an iso-line emitter's are an elite, noise and a line towards a second one;
#: a separable CMA-ES emitter's (``es: sep_cma_es``, no bounds) are its mean plus its
#: noise scaled per parameter.
GAUSSIAN_KIND, ISO_LINE_KIND, SEP_CMA_ES_KIND = 0, 1, 2
#: Parents an emitter of each kind samples per offspring.
PARENTS_PER_ROW = {GAUSSIAN_KIND: 1, ISO_LINE_KIND: 2, SEP_CMA_ES_KIND: 0}
#: Offspring rows whose noise is drawn at once when a batch is regenerated (memory).
_DRAW_VALUES = 1 << 20
_MASK64 = (1 << 64) - 1


def _stride(batch) -> int:
    """A compact batch's ``row_stride`` (1 when absent: batches written before it)."""
    return int(batch["row_stride"][()]) if "row_stride" in batch else 1


def states_of(count: int, stride: int) -> int:
    """Recorded states of an emitter of ``count`` rows: one every ``stride`` rows and
    one after the last."""
    return -(-count // stride) + 1


def packed_rng(generator) -> np.ndarray:
    """A PCG64 generator's state as 6 uint64 words (state and increment: 128 bits each)."""
    state = generator.bit_generator.state
    words = (
        state["state"]["state"] >> 64,
        state["state"]["state"] & _MASK64,
        state["state"]["inc"] >> 64,
        state["state"]["inc"] & _MASK64,
        state["has_uint32"],
        state["uinteger"],
    )
    return np.array(words, dtype=np.uint64)


def _unpacked_rng(words) -> np.random.Generator:
    """The generator whose state :func:`packed_rng` packed."""
    words = [int(word) for word in words]
    generator = np.random.Generator(np.random.PCG64())
    generator.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (words[0] << 64) | words[1], "inc": (words[2] << 64) | words[3]},
        "has_uint32": words[4],
        "uinteger": words[5],
    }
    return generator


def _normal_rows(generator, scale: float, *, rows: int, dim: int) -> np.ndarray:
    """``generator.normal(scale=scale, size=(rows, dim))``, drawn in chunks (the draws
    are sequential: chunks give the same values, in less memory)."""
    out = np.empty((rows, dim))
    step = max(1, _DRAW_VALUES // max(dim, 1))
    for first in range(0, rows, step):
        last = min(first + step, rows)
        out[first:last] = generator.normal(scale=scale, size=(last - first, dim))
    return out


def _digests(solutions: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each solution's bytes (blake2b): the ``parent_digest`` of
    compact batches written before :func:`check_sums`."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little")
            for row in np.ascontiguousarray(solutions, dtype=np.float64)
        ],
        dtype=np.uint64,
    )


#: An odd 64-bit multiplier (2^64 over the golden ratio) for :func:`check_sums`' weights.
_GOLDEN64 = np.uint64(0x9E3779B97F4A7C15)


def check_sums(solutions: np.ndarray) -> np.ndarray:
    """A 64-bit check sum of each solution's bytes, in one numpy pass: the sum modulo
    2^64 of its parameters' bit patterns (uint64) times odd weights (``(i + 1)``
    times :data:`_GOLDEN64`, made odd). Odd weights are invertible modulo 2^64, so
    a change confined to one parameter always changes the sum; other changes are
    missed only when their weighted differences cancel, about one chance in 2^64
    for unrelated solutions (a check against reading the wrong elite, not a
    cryptographic hash: 15 times faster than blake2b here)."""
    words = np.ascontiguousarray(solutions, dtype=np.float64).view(np.uint64)
    weights = (np.arange(1, words.shape[1] + 1, dtype=np.uint64) * _GOLDEN64) | np.uint64(1)
    return (words * weights).sum(axis=1, dtype=np.uint64)


def _checked_parents(batch, cells: np.ndarray, found: np.ndarray) -> np.ndarray:
    """``found`` (the solutions read for ``cells``) when each has the check sum the
    batch stored for its cell (``parent_sum`` of ``parent_cells``; batches written
    before it: the blake2b ``parent_digest``).

    Raises
    ------
    CorruptFileError
        When a cell's elite is not the one the batch was made from (the states the
        parents were read from are inconsistent): the message names the cell.
    """
    known = np.asarray(batch["parent_cells"][()], dtype=np.int64)
    if "parent_sum" in batch:
        name, check = "parent_sum", check_sums
    else:
        name, check = "parent_digest", _digests
    expected = np.asarray(batch[name][()], dtype=np.uint64)[np.searchsorted(known, cells)]
    wrong = np.flatnonzero(check(found) != expected)
    if len(wrong):
        raise CorruptFileError(
            f"the elite read for cell {int(cells[wrong[0]])} is not the parent this batch "
            "was made from (the run's working states are inconsistent); delete the run's "
            "work/state_*.h5 and work/gen_* after its last kept checkpoint and rerun"
        )
    return found


def _overlaps(rows: np.ndarray, kinds: np.ndarray, start: int, stop: int, *, stride: int):
    """``(emitter, its first parent, its first row state, its rows, local low, local
    high)`` of every emitter whose offspring overlap ``start..stop-1`` (``stride``:
    rows between recorded states)."""
    first = parent = state = 0
    for emitter, (count, kind) in enumerate(zip(rows.tolist(), kinds.tolist(), strict=True)):
        low, high = max(start, first), min(stop, first + count)
        if low < high:
            yield emitter, parent, state, count, low - first, high - first
        first += count
        parent += PARENTS_PER_ROW[kind] * count
        state += states_of(count, stride)


class QDBatch(CompactBatch):
    """A compact batch of Gaussian and iso-line emitters (MAP-Elites, CVT-MAP-Elites and
    their iso-line variants, novelty search: its parents are entries of its novelty
    archive) and of separable CMA-ES emitters: per emitter its offspring count
    (``emitter_rows``), kind (``emitter_kind``), ``sigma`` (Gaussian: sigma; iso-line:
    iso and line sigma) and its random generator's state before every ``row_stride``-th
    offspring's noise (1 when absent) and after the last (``row_state``: a shard draws
    its own rows and at most ``row_stride - 1`` before them; an iso-line emitter's line
    noise starts after the last); the cells of the parents pyribs sampled (``parents``:
    an emitter's ``n``, an iso-line emitter's ``2n``; -1 for ``x0`` while the archive
    was empty) with a digest of each parent's solution (``parent_cells``,
    ``parent_sum``: a shard checks what it read; ``parent_digest`` in batches written
    before), ``x0`` when used, and ``bounds`` (lower and upper, one column when every
    parameter has the same). The offspring are regenerated bit for bit as pyribs'
    ``ask()`` made them; the parents' solutions come from ``batch[ELITES]``. A batch
    ``{"solutions": ...}`` (a checkpoint written before compact QD batches, asynchronous
    proposals) is plain.
    """

    @staticmethod
    def size(batch) -> int:
        """Offspring of every emitter."""
        if "solutions" in batch:
            return len(batch["solutions"])
        return int(np.sum(batch["emitter_rows"][()]))

    @staticmethod
    def elites_read(batch, start: int, stop: int) -> np.ndarray:
        """The cells of the parents of offspring ``start..stop-1``."""
        if "solutions" in batch:
            return np.empty(0, dtype=np.int64)
        parents = np.asarray(batch["parents"][()], dtype=np.int64)
        kinds = np.asarray(batch["emitter_kind"][()])
        cells = []
        for emitter, first, _, count, low, high in _overlaps(
            np.asarray(batch["emitter_rows"][()]), kinds, start, stop, stride=_stride(batch)
        ):
            cells.append(parents[first + low : first + high])
            if kinds[emitter] == ISO_LINE_KIND:
                cells.append(parents[first + count + low : first + count + high])
        cells = np.concatenate(cells) if cells else np.empty(0, dtype=np.int64)
        return np.unique(cells[cells >= 0])

    @staticmethod
    def solutions(batch, start: int, stop: int) -> np.ndarray:
        """Offspring ``start..stop-1``, regenerated from their parents and noise."""
        if "solutions" in batch:
            return np.asarray(batch["solutions"][start:stop], dtype=np.float64)
        batch = _small_arrays_read(batch)
        cells = QDBatch.elites_read(batch, start, stop)
        found = None
        if len(cells):
            found = _checked_parents(
                batch, cells, np.asarray(batch[ELITES][cells], dtype=np.float64)
            )
        states = batch["row_state"]
        sigma = np.asarray(batch["sigma"][()], dtype=np.float64)
        kinds = np.asarray(batch["emitter_kind"][()])
        stride = _stride(batch)

        def drawn(emitter: int, state: int, count: int, low: int, high: int, dim: int):
            block, skipped = divmod(low, stride)
            generator = _unpacked_rng(states[state + block])
            if skipped:  # the rows before ``low`` since the recorded state
                _normal_rows(generator, sigma[emitter, 0], rows=skipped, dim=dim)
            noise = _normal_rows(generator, sigma[emitter, 0], rows=high - low, dim=dim)
            if kinds[emitter] != ISO_LINE_KIND:
                return noise, None
            generator = _unpacked_rng(states[state + states_of(count, stride) - 1])
            return noise, generator.normal(scale=sigma[emitter, 1], size=(count, 1))[low:high]

        return offspring(batch, start, stop, cells=cells, found=found, noise=drawn)


#: The arrays of a compact QD batch read whole (all but ``row_state``, of which a
#: shard reads its own rows).
_SMALL_ARRAYS = (
    "emitter_rows",
    "emitter_kind",
    "sigma",
    "parents",
    "parent_cells",
    "parent_digest",
    "parent_sum",
    "bounds",
    "x0",
    "es_mean",
    "es_scale",
    "row_stride",
)


def _small_arrays_read(batch) -> dict:
    """A compact batch (h5py datasets, read where indexed) with its small arrays read
    once (:data:`_SMALL_ARRAYS`)."""
    return {
        **batch,
        **{name: np.asarray(batch[name][()]) for name in _SMALL_ARRAYS if name in batch},
    }


def offspring(batch, start: int, stop: int, *, cells, found, noise) -> np.ndarray:
    """Offspring ``start..stop-1`` of a compact batch as pyribs makes them: each its
    parent plus its noise (an iso-line emitter's: plus its line noise times the second
    parent minus the first), clipped to the bounds; a separable CMA-ES emitter's its
    noise times its scale (``es_scale``: the square roots of its diagonal covariance)
    plus its mean (``es_mean``), one row of each per such emitter.

    ``found`` holds the solutions of the parents' ``cells`` (sorted); ``noise(emitter,
    first row state, emitter's rows, local low, local high, dim)`` returns the rows'
    noise and, for an iso-line emitter, their line noise (else ``None``), arrays this
    function may overwrite.
    """
    x0 = np.asarray(batch["x0"][()], dtype=np.float64) if "x0" in batch else None

    def parents_at(wanted: np.ndarray) -> np.ndarray:
        if (wanted >= 0).all():
            return found[np.searchsorted(cells, wanted)]
        out = np.repeat(x0[None], len(wanted), axis=0)
        known = wanted >= 0
        if known.any():
            out[known] = found[np.searchsorted(cells, wanted[known])]
        return out

    parents = np.asarray(batch["parents"][()], dtype=np.int64)
    kinds = np.asarray(batch["emitter_kind"][()])
    low_bound, high_bound = np.asarray(batch["bounds"][()], dtype=np.float64)
    bounded = bool(np.isfinite(low_bound).any() or np.isfinite(high_bound).any())
    es_index = np.cumsum(kinds == SEP_CMA_ES_KIND) - 1
    pieces = []
    for emitter, first, state, count, low, high in _overlaps(
        np.asarray(batch["emitter_rows"][()]), kinds, start, stop, stride=_stride(batch)
    ):
        if kinds[emitter] == SEP_CMA_ES_KIND:
            # pyribs: scale * noise + mean (IEEE products and sums commute).
            mean = np.asarray(batch["es_mean"][es_index[emitter]], dtype=np.float64)
            scale = np.asarray(batch["es_scale"][es_index[emitter]], dtype=np.float64)
            made, _ = noise(emitter, state, count, low, high, len(mean))
            made *= scale
            made += mean
            pieces.append(made)
            continue
        elites = parents_at(parents[first + low : first + high])
        rows, line = noise(emitter, state, count, low, high, elites.shape[1])
        # elites + rows [+ line * (towards - elites)], left to right as pyribs adds
        # (IEEE addition commutes: the same bits).
        made = rows
        made += elites
        if line is not None:
            towards = parents_at(parents[first + count + low : first + count + high])
            made += line * (towards - elites)
        if bounded:  # clipping to infinite bounds changes nothing
            np.clip(made, low_bound, high_bound, out=made)
        pieces.append(made)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
