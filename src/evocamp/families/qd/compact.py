"""Making compact QD batches from pyribs' emitters: which schedulers' batches can be
compact (:func:`compact_emitters`), asking pyribs while recording its generators' states
(:func:`compact_ask`, checked against pyribs' own batch), the rows a tell regenerates
(:func:`told_solutions`), the cells a tell changed (:func:`inserted_cells`) and the elites
of an archive in memory (:class:`ArchiveElites`). pyribs' private attributes are read
through :mod:`evocamp.families.ribs_internals` only.
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np

from evocamp.families import ribs_internals
from evocamp.families.qd.batches import (
    GAUSSIAN_KIND,
    ISO_LINE_KIND,
    PARENTS_PER_ROW,
    SEP_CMA_ES_KIND,
    QDBatch,
    check_sums,
    offspring,
    packed_rng,
    states_of,
)
from evocamp.model.protocol import ELITES

#: Noise values that cost about as much to draw as a call to regenerate rows.
_ROW_CALL_VALUES = 20_000
#: Noise values a shard may draw and discard to reach its first row (a compact batch
#: records its generators' states every :func:`_row_stride` rows, not every row).
_STRIDE_VALUES = 4096


def _row_stride(dim: int) -> int:
    """Offspring rows between two recorded generator states of a compact batch of
    ``dim`` parameters: as many as :data:`_STRIDE_VALUES` noise values allow (at
    least 1). A function of the solution size alone, never of the shard count."""
    return max(1, _STRIDE_VALUES // max(dim, 1))


class _RecordingGenerator:
    """Stands in for an emitter's generator during pyribs' ``ask``: returns the same
    draws, the first ``normal`` drawn ``stride`` rows at a time (draws are sequential:
    the same values), noting the generator's packed state before each such block and
    after the last row (:attr:`states`, a :class:`QDBatch`'s ``row_state``) and every
    array drawn (:attr:`draws`). Any other use of the generator is noted
    (:attr:`other`)."""

    def __init__(self, generator, *, stride: int = 1) -> None:
        self.generator = generator
        self.stride = stride
        self.states: np.ndarray | None = None
        self.draws: list[np.ndarray] = []
        self.other = False

    def normal(self, loc=0.0, scale=1.0, size=None) -> np.ndarray:
        """``generator.normal(loc, scale, size)``, the first call's rows recorded."""
        if self.states is not None or np.ndim(scale) or loc != 0.0 or len(size or ()) != 2:
            drawn = self.generator.normal(loc, scale, size)
        else:
            rows, dim = size
            self.states = np.empty((states_of(rows, self.stride), 6), dtype=np.uint64)
            drawn = np.empty((rows, dim))
            for block, first in enumerate(range(0, rows, self.stride)):
                last = min(first + self.stride, rows)
                self.states[block] = packed_rng(self.generator)
                drawn[first:last] = self.generator.normal(scale=scale, size=(last - first, dim))
            self.states[-1] = packed_rng(self.generator)
        self.draws.append(drawn)
        return drawn

    def __getattr__(self, name: str):
        self.other = True
        return getattr(self.generator, name)


@contextlib.contextmanager
def _recording(emitters, *, stride: int):
    """While pyribs asks ``emitters``: each one's generator is a
    :class:`_RecordingGenerator` of ``stride`` (yielded, in order), its own again
    afterwards."""
    with ribs_internals.replaced_generators(
        emitters, lambda generator: _RecordingGenerator(generator, stride=stride)
    ) as recorders:
        yield recorders


class ArchiveElites:
    """The elites of an archive in memory, indexed by cell (:data:`ELITES`, an
    :class:`~evocamp.model.protocol.ElitesByCell`)."""

    def __init__(self, archive) -> None:
        self.archive = archive

    def __getitem__(self, cells) -> np.ndarray:
        return ribs_internals.retrieve_cells(self.archive, cells, ["solution"])[1]["solution"]


def _sep_cma_es_kind(emitter) -> int | None:
    """:data:`SEP_CMA_ES_KIND` for an evolution-strategy emitter whose batches can be
    compact: pyribs' separable CMA-ES in float64 without bounds (with bounds it redraws
    the rows out of them, so a row would depend on the others), else ``None``."""
    from ribs.emitters.opt import SeparableCMAEvolutionStrategy

    opt = ribs_internals.strategy_of(emitter)
    if (
        type(opt) is SeparableCMAEvolutionStrategy
        and (np.asarray(emitter.lower_bounds) == -np.inf).all()
        and (np.asarray(emitter.upper_bounds) == np.inf).all()
        and np.dtype(opt.dtype) == np.float64
        and isinstance(ribs_internals.generator_of(opt).bit_generator, np.random.PCG64)
    ):
        return SEP_CMA_ES_KIND
    return None


def _compact_kind(emitter, archive) -> int | None:
    """The ``emitter_kind`` of an emitter whose batches can be compact, else ``None``."""
    from ribs import emitters

    if type(emitter) is emitters.EvolutionStrategyEmitter:
        return _sep_cma_es_kind(emitter)
    kind = {emitters.GaussianEmitter: GAUSSIAN_KIND, emitters.IsoLineEmitter: ISO_LINE_KIND}
    sigmas = (
        (emitter.sigma,)
        if type(emitter) is emitters.GaussianEmitter
        else (getattr(emitter, "iso_sigma", None), getattr(emitter, "line_sigma", None))
    )
    if (
        type(emitter) not in kind
        or emitter.archive is not archive
        or (emitter.initial_solutions is not None and emitter.archive.empty)
        or not all(np.ndim(value) == 0 for value in sigmas)
        or not isinstance(ribs_internals.generator_of(emitter).bit_generator, np.random.PCG64)
    ):
        return None
    return kind[type(emitter)]


def compact_emitters(scheduler) -> list[int] | None:
    """The ``emitter_kind`` of every emitter when the scheduler's batches can be compact:
    a standard scheduler whose Gaussian and iso-line emitters sample float64 parents
    from the run's grid or CVT archive (the one checkpoints store) or from a novelty
    archive (novelty search's :class:`ribs.archives.ProximityArchive`, whose entries
    keep their indices: new ones are appended, local competition replaces in place;
    its sampling is the grid's), with scalar sigmas,
    and whose evolution-strategy emitters use a separable CMA-ES without bounds
    (:func:`_sep_cma_es_kind`; these read no parents, so a separate result archive,
    CMA-MAE's, or an archive without cells, density descent's, is fine when all are),
    all with the same bounds, and the parents'
    samplers with the same ``x0`` (an evolution strategy's batch is drawn around its
    mean, whatever its ``x0`` was: ``initial_population: random`` starts each at its
    own); else ``None``."""
    from ribs import archives, schedulers

    archive = scheduler.archive
    if type(scheduler) is not schedulers.Scheduler or not scheduler.emitters:
        return None
    kinds = [_compact_kind(emitter, archive) for emitter in scheduler.emitters]
    samples_parents = (
        (
            type(archive) in (archives.GridArchive, archives.CVTArchive)
            and scheduler.result_archive is archive
        )
        or _is_novelty(archive)
    ) and archive.dtypes["solution"] == np.float64
    if not samples_parents and not reads_no_parents(kinds):
        return None
    first = scheduler.emitters[0]
    samplers = [
        e for e, kind in zip(scheduler.emitters, kinds, strict=True) if kind != SEP_CMA_ES_KIND
    ]
    same = all(
        np.array_equal(e.lower_bounds, first.lower_bounds)
        and np.array_equal(e.upper_bounds, first.upper_bounds)
        for e in scheduler.emitters
    ) and all(np.array_equal(e.x0, samplers[0].x0) for e in samplers)
    return kinds if same and None not in kinds else None


def reads_no_parents(kinds: list) -> bool:
    """Whether emitters of these kinds read no parents from the archive (all separable
    CMA-ES)."""
    return all(kind == SEP_CMA_ES_KIND for kind in kinds)


def _stored_bounds(emitter) -> np.ndarray:
    """``[lower, upper]`` of an emitter, one column when every parameter has the same."""
    bounds = np.stack([emitter.lower_bounds, emitter.upper_bounds]).astype(np.float64)
    if (bounds == bounds[:, :1]).all():
        return bounds[:, :1].copy()
    return bounds


def compact_ask(scheduler, kinds: list[int]) -> tuple[np.ndarray, dict | None]:
    """pyribs' own ``scheduler.ask()``, and the same batch in compact form (``None``
    when regenerating it does not give the same bytes).

    The emitters draw their noise through :class:`_RecordingGenerator`, which notes
    the generator's state before each offspring row; the parents' cells come from
    drawing the archive's sampling again from a copy of its generator (every emitter
    samples once, in order, as :meth:`ribs.archives.ArchiveBase.sample_elites` does).
    The compact batch is checked against pyribs' batch with the noise drawn (a
    shard draws the same from the row states).
    """
    archive = scheduler.archive
    emitters = scheduler.emitters
    sampler = copy.deepcopy(ribs_internals.generator_of(archive))
    empty = archive.empty
    stride = _row_stride(emitters[0].solution_dim)
    with _recording(emitters, stride=stride) as recorders:
        solutions = np.asarray(scheduler.ask(), dtype=np.float64)
    expected = [2 if kind == ISO_LINE_KIND else 1 for kind in kinds]
    if any(
        r.other or r.states is None or len(r.draws) != n
        for r, n in zip(recorders, expected, strict=True)
    ):
        return solutions, None
    rows = [emitter.batch_size for emitter in emitters]
    parents = []
    for count, kind in zip(rows, kinds, strict=True):
        drawn = PARENTS_PER_ROW[kind] * count
        if empty or not drawn:
            parents.append(np.full(drawn, -1, dtype=np.int64))
        else:
            occupied = ribs_internals.occupied_cells(archive)
            chosen = sampler.choice(len(occupied), size=drawn, replace=True)
            parents.append(np.asarray(occupied[chosen], dtype=np.int64))
    sigma = np.array([_sigmas(e, k) for e, k in zip(emitters, kinds, strict=True)])
    batch = {
        "emitter_rows": np.asarray(rows, dtype=np.int64),
        "emitter_kind": np.asarray(kinds, dtype=np.int8),
        "sigma": sigma,
        "row_state": np.concatenate([recorder.states for recorder in recorders]),
        "parents": np.concatenate(parents),
        "bounds": _stored_bounds(emitters[0]),
    }
    if stride > 1:
        batch["row_stride"] = np.int64(stride)
    strategies = [
        ribs_internals.strategy_of(e)
        for e, k in zip(emitters, kinds, strict=True)
        if k == SEP_CMA_ES_KIND
    ]
    if strategies:
        batch["es_mean"] = np.stack([np.asarray(es.mean, dtype=np.float64) for es in strategies])
        batch["es_scale"] = np.stack([np.sqrt(es.cov.eigenvalues) for es in strategies])
    cells = found = None
    if empty:
        first_sampler = next(
            (e for e, k in zip(emitters, kinds, strict=True) if k != SEP_CMA_ES_KIND),
            emitters[0],
        )
        batch["x0"] = np.asarray(first_sampler.x0, dtype=np.float64)
    elif len(batch["parents"]):
        cells = batch["parent_cells"] = np.unique(batch["parents"])
        found = np.asarray(ArchiveElites(archive)[cells], dtype=np.float64)
        batch["parent_sum"] = check_sums(found)

    def recorded(emitter: int, state: int, count: int, low: int, high: int, dim: int):
        draws = recorders[emitter].draws
        return draws[0][low:high], (draws[1][low:high] if len(draws) > 1 else None)

    same_draws = (
        sampler.bit_generator.state == ribs_internals.generator_of(archive).bit_generator.state
    )
    made = offspring(batch, 0, len(solutions), cells=cells, found=found, noise=recorded)
    if not same_draws or made.shape != solutions.shape or not _same_bytes(made, solutions):
        return solutions, None
    return solutions, batch


def _sigmas(emitter, kind: int) -> tuple[float, float]:
    """A row of a compact batch's ``sigma``: a Gaussian emitter's sigma, an iso-line
    emitter's iso and line sigma, a separable CMA-ES's sigma (its step size now)."""
    if kind == ISO_LINE_KIND:
        return float(emitter.iso_sigma), float(emitter.line_sigma)
    if kind == SEP_CMA_ES_KIND:
        return float(ribs_internals.strategy_of(emitter).sigma), 0.0
    return float(emitter.sigma), 0.0


def _same_bytes(first: np.ndarray, second: np.ndarray) -> bool:
    """Whether two float64 arrays of one shape hold the same bytes (NaN and -0.0
    included)."""
    return np.array_equal(first.view(np.uint64), second.view(np.uint64))


def _insertable(archive, objective: np.ndarray, measures: np.ndarray) -> np.ndarray:
    """The rows of a batch a grid or CVT archive's ``add`` can insert: those whose
    objective exceeds their cell's threshold (``threshold_min`` for an empty cell), as
    pyribs' add decides; it stores no other row's solution. Every row for a novelty
    archive (its scheduler adds every row to the run's archive too)."""
    if _is_novelty(archive):
        return np.ones(len(objective), dtype=bool)
    indices = archive.index_of(measures)
    occupied, data = ribs_internals.retrieve_cells(archive, indices, ["threshold"])
    threshold = np.where(occupied, data["threshold"], archive.threshold_min)
    return np.asarray(objective, dtype=archive.dtypes["objective"]) > threshold


def told_solutions(archive, batch: dict, objective, measures, *, dim: int) -> np.ndarray:
    """A compact batch's solutions as a tell needs them: the rows the archive can
    insert (:func:`_insertable`) and every separable CMA-ES's rows (its tell ranks
    them all) regenerated, in runs of rows (a gap of rows whose noise costs less than
    a call is drawn too), the others NaN (pyribs' Gaussian and iso-line emitters learn
    nothing from their solutions); ``dim``: the solutions' size."""
    batch = {**batch, ELITES: ArchiveElites(archive)}
    needed = np.repeat(batch["emitter_kind"] == SEP_CMA_ES_KIND, batch["emitter_rows"])
    if not needed.all():  # of Gaussian and iso-line rows, those the archive can insert
        needed |= _insertable(archive, objective, measures)
    rows = np.flatnonzero(needed)
    solutions = np.full((QDBatch.size(batch), dim), np.nan)
    if len(rows):
        gap = max(1, _ROW_CALL_VALUES // max(dim, 1))
        breaks = np.flatnonzero(np.diff(rows) > gap) + 1
        for run in np.split(rows, breaks):
            first, last = int(run[0]), int(run[-1]) + 1
            solutions[first:last] = QDBatch.solutions(batch, first, last)
    return solutions


def give_strategies_their_rows(scheduler, batch: dict) -> None:
    """Give each separable CMA-ES emitter of a restored scheduler its rows of the
    batch (the solutions the scheduler asked), which its tell ranks."""
    solutions = ribs_internals.asked_solutions(scheduler)
    first = 0
    for emitter, count, kind in zip(
        scheduler.emitters, batch["emitter_rows"], batch["emitter_kind"], strict=True
    ):
        if kind == SEP_CMA_ES_KIND:
            ribs_internals.give_strategy_rows(emitter, solutions[first : first + count].copy())
        first += int(count)


def _is_novelty(archive) -> bool:
    """Whether ``archive`` is a novelty archive (:class:`ribs.archives.ProximityArchive`)."""
    from ribs.archives import ProximityArchive

    return type(archive) is ProximityArchive


def novelty_objectives(archive) -> np.ndarray | None:
    """A novelty archive's objectives by entry (its entries are ``0..n-1``), before a
    tell (:func:`inserted_cells` compares them); ``None`` for another archive."""
    if not _is_novelty(archive):
        return None
    entries = np.arange(len(archive))
    return ribs_internals.retrieve_cells(archive, entries, ["objective"])[1]["objective"]


def inserted_cells(
    archive, objective: np.ndarray, measures: np.ndarray, *, before: np.ndarray | None = None
) -> np.ndarray:
    """The cells whose elite is now one of a batch's solutions (sorted): the cells a
    tell of that batch changed. For a novelty archive (``before``: its objectives by
    entry before the tell, :func:`novelty_objectives`) the entries it appended and
    those local competition replaced (a replacement has a higher objective)."""
    if before is not None:
        now = novelty_objectives(archive)
        replaced = np.flatnonzero(now[: len(before)] != before)
        return np.concatenate([replaced, np.arange(len(before), len(now))]).astype(np.int64)
    occupied, elites = archive.retrieve(measures)
    same = (
        occupied & (elites["objective"] == objective) & (elites["measures"] == measures).all(axis=1)
    )
    return np.unique(np.asarray(elites["index"])[same])
