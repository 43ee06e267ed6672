"""QD algorithms behind the optimizer protocol (:mod:`evocamp.model.protocol`):
:class:`QDOptimizer` asks and tells a pyribs scheduler built from a recipe
(:mod:`evocamp.families.qd.components`), in compact batches when its emitters allow
(:mod:`evocamp.families.qd.compact`), and leaves failed evaluations out of its archives.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from evocamp.families import ribs_internals
from evocamp.families.qd.batches import QDBatch
from evocamp.families.qd.compact import (
    ArchiveElites,
    compact_ask,
    compact_emitters,
    give_strategies_their_rows,
    inserted_cells,
    novelty_objectives,
    reads_no_parents,
    told_solutions,
)
from evocamp.families.qd.components import QDRecipe, build_scheduler, check_numba_disabled


@contextlib.contextmanager
def _failed_rows_left_out(scheduler, failed: np.ndarray):
    """While a scheduler tells a batch with failed rows: its archives add only the
    other rows, and report the failed ones as not added (status 0, value ``-inf``)."""
    archives = [scheduler.archive]
    result_archive = ribs_internals.separate_result_archive(scheduler)
    if result_archive is not None:
        archives.append(result_archive)
    rows = np.flatnonzero(~failed)
    for archive in archives:
        archive.add = _adding_rows(archive.add, rows, len(failed))
    try:
        yield
    finally:
        for archive in archives:
            del archive.add  # the class's method again


def _adding_rows(add, rows: np.ndarray, count: int):
    def add_rows(solution, objective, measures, **fields):
        status = np.zeros(count, dtype=np.int32)
        value = np.zeros(count)
        if len(rows):
            info = add(
                solution[rows],
                None if objective is None else objective[rows],
                measures[rows],
                **{name: values[rows] for name, values in fields.items()},
            )
            status[rows] = info["status"]
            value[rows] = info["value"]
        value[np.setdiff1d(np.arange(count), rows)] = _below(value[rows])
        return {"status": status, "value": value}

    return add_rows


def _below(values: np.ndarray) -> float:
    """A finite value below all ``values`` (pyribs' emitters take finite values only):
    what a failed solution's objective and improvement value are to its emitter."""
    if not len(values):
        return 0.0
    lowest = float(np.min(values))
    return lowest - max(1.0, abs(lowest))


def _forget_initial_solutions(scheduler) -> None:
    """Drop the initial solutions (``initial_population: random``) of every emitter whose
    archive holds elites: pyribs reads them only while it is empty, which it never is
    again, and states would otherwise carry a batch of solutions from generation to
    generation (and the emitters' batches would not be compact)."""
    pool = getattr(scheduler, "emitter_pool", None)  # a bandit's: every emitter, active or not
    for emitter in scheduler.emitters if pool is None else pool:
        if getattr(emitter, "initial_solutions", None) is not None and not emitter.archive.empty:
            ribs_internals.forget_initial_solutions(emitter)


def _first_proposal(emitter, turn: int) -> np.ndarray:
    """Asynchronous mode: the one solution an emitter proposes on its ``turn``-th
    proposal; while its archive is empty and it has initial solutions, the next of them
    (``ask`` would give the first every time)."""
    if getattr(emitter, "initial_solutions", None) is not None and emitter.archive.empty:
        initial = emitter.initial_solutions
        solution = initial[turn % len(initial)][None]
        return np.asarray(ribs_internals.clipped(emitter, solution), float)
    return np.asarray(emitter.ask()[:1], float)


class QDOptimizer:
    """A pyribs scheduler behind the optimizer interface: batches are plain solutions,
    the run's elites are the scheduler's result archive.

    With a surrogate (BOP-Elites) the seconds of the last ``tell`` (the Gaussian
    processes' fit) and ``ask`` (the EJIE search) are its ``fit_seconds`` and
    ``propose_seconds`` metrics.
    """

    batch_format = QDBatch
    #: Whether the scheduler fits a surrogate (its timings are metrics).
    surrogate = False
    #: The compact form of the batch asked and not yet told (``None``: plain).
    pending: dict | None = None
    #: The cells of the run's archive the last tell of a compact batch changed.
    inserted: np.ndarray | None = None

    def __init__(self, scheduler, *, surrogate: bool = False) -> None:
        self.scheduler = scheduler
        if surrogate:
            self.surrogate = True
            self.seconds = {"fit_seconds": np.nan, "propose_seconds": np.nan}

    @classmethod
    def from_spec(cls, spec: dict, *, recipe: QDRecipe, draw=None) -> QDOptimizer:
        """The seeded scheduler of a run spec (:func:`build_scheduler`; ``draw``: the
        domain's own initialisation, or ``None``)."""
        return cls(
            build_scheduler(spec, recipe=recipe, draw=draw),
            surrogate=recipe.scheduler.surrogate,
        )

    def ask(self) -> np.ndarray | dict:
        """The next batch (all emitters): compact (:class:`QDBatch`) when the emitters
        allow it (:func:`compact_emitters`), else the solutions."""
        started = time.perf_counter()
        kinds = compact_emitters(self.scheduler)
        if kinds is None:
            batch = np.asarray(self.scheduler.ask(), dtype=np.float64)
        else:
            solutions, batch = compact_ask(self.scheduler, kinds)
            self.pending = batch
            batch = solutions if batch is None else batch
        if self.surrogate:
            self.seconds["propose_seconds"] = time.perf_counter() - started
        return batch

    def tell(self, objective, measures, *, failed=None, **extra) -> None:
        """Fold the batch's results into the archive and the emitters; note the cells
        it changed (:attr:`inserted`) when batches are compact.

        Failed solutions (``failed``, ``evaluation.on_failure`` discard) never enter
        the archives; their emitters see them as not added, with an objective and an
        improvement value below every evaluated solution's (ranked last by the
        evolution-strategy emitters' rankers) and measures 0.
        """
        check_numba_disabled()
        started = time.perf_counter()
        scheduler = self.scheduler
        if failed is not None:
            failed = np.asarray(failed, dtype=bool)
            measures = np.where(failed[:, None], 0.0, np.asarray(measures, dtype=np.float64))
            objective = np.array(objective, dtype=np.float64)
            objective[failed] = _below(objective[~failed])
        restored = self.pending is not None and ribs_internals.asked_solutions(scheduler) is None
        before = novelty_objectives(scheduler.archive)
        if restored:
            # Restored from a checkpoint, which holds the batch in compact form only:
            # only the rows the archive can take are regenerated.
            told = told_solutions(
                scheduler.archive,
                self.pending,
                objective,
                measures,
                dim=scheduler.emitters[0].solution_dim,
            )
            ribs_internals.set_asked_solutions(scheduler, told)
            give_strategies_their_rows(scheduler, self.pending)
        if failed is None:
            scheduler.tell(objective, measures, **extra)
        else:
            with _failed_rows_left_out(scheduler, failed):
                scheduler.tell(objective, measures, **extra)
        self.pending = None
        self.inserted = None
        _forget_initial_solutions(scheduler)
        kinds = compact_emitters(scheduler)
        if kinds is not None and not reads_no_parents(kinds):
            self.inserted = inserted_cells(
                scheduler.archive, np.asarray(objective), np.asarray(measures), before=before
            )
            if restored and np.isnan(ArchiveElites(scheduler.archive)[self.inserted]).any():
                raise RuntimeError("a row left out of a restored compact batch was inserted")
        if self.surrogate:
            self.seconds["fit_seconds"] = time.perf_counter() - started

    def asked_solutions(self) -> np.ndarray | None:
        """The solutions of the compact batch asked and not yet told, while held (from
        ``ask`` to ``tell``; ``None`` for a plain batch and after a restore from a
        checkpoint, which holds the batch compact). The node-local state cache keeps
        them for the shards and the next tell on the node."""
        if self.pending is None:
            return None
        return ribs_internals.asked_solutions(self.scheduler)

    def restore_asked_solutions(self, solutions: np.ndarray) -> None:
        """Give an optimizer restored without its compact batch's solutions those
        solutions (:meth:`asked_solutions` of the optimizer that asked them, kept in
        the node-local cache), so that ``tell`` regenerates none."""
        if self.pending is None or ribs_internals.asked_solutions(self.scheduler) is not None:
            return
        ribs_internals.set_asked_solutions(self.scheduler, solutions)
        give_strategies_their_rows(self.scheduler, self.pending)

    def __getstate__(self) -> dict:
        """Pickled without the solutions of a compact batch (``tell`` regenerates
        them; a separable CMA-ES keeps its own copy, left out too): a checkpoint holds
        the batch in compact form only."""
        state = dict(self.__dict__)
        if self.pending is not None:
            state["scheduler"] = ribs_internals.scheduler_without_batch(self.scheduler)
        return state

    def ask_async(self, *, slots, evaluations) -> list[dict]:
        """Asynchronous mode (steady-state MAP-Elites; Gaussian and iso-line emitters,
        whose ``tell`` learns nothing): each proposal is the first solution of an
        ``ask`` of the emitter whose turn it is (emitters take turns by evaluation id),
        varied from elites of the archive as it is now."""
        emitters = self.scheduler.emitters
        return [
            {
                "solutions": _first_proposal(
                    emitters[int(evaluation) % len(emitters)], int(evaluation) // len(emitters)
                )
            }
            for evaluation in evaluations
        ]

    def tell_async(self, objective, measures, *, solutions, **extra) -> None:
        """Asynchronous mode: add finished solutions to the archive at once."""
        check_numba_disabled()
        self.scheduler.archive.add(solutions, objective, measures, **extra)
        _forget_initial_solutions(self.scheduler)

    @property
    def archive(self):
        """The archive whose elites are the run's result."""
        return self.scheduler.result_archive

    @property
    def parent_archive(self):
        """The archive a compact batch's parents are sampled from and :attr:`inserted`
        names cells of: the emitters' (the run's archive, or novelty search's)."""
        return self.scheduler.archive

    def stats(self) -> dict:
        """``own_archive_size``: entries of the archive the emitters learn on, when it is
        not the run's archive (novelty search's, DNS's, density descent's buffer,
        CMA-MAE's learning archive); a surrogate's ``fit_seconds`` and
        ``propose_seconds``."""
        stats = dict(self.seconds) if self.surrogate else {}
        learning = self.scheduler.archive
        if learning is not self.scheduler.result_archive:
            buffer = getattr(learning, "buffer", None)  # a density archive keeps measures only
            stats["own_archive_size"] = len(learning) if buffer is None else len(buffer)
        return stats
