"""The one fold: evaluated results into a run state.

Both loops advance a :class:`~evocamp.model.state.RunState` with these two functions
and spell none of their steps themselves:

- :func:`fold_evaluations` adds evaluated solutions to the passive archive (when the
  optimizer does not own the archive), improves the best solution (runs without an
  archive), tells the optimizer and notes the environments that evaluated them;
- :func:`close_generation` writes the generation's metrics row, extends the metrics
  window, notes the tell step and moves the state to the generation.

The synchronous loop (:func:`evocamp.loop.engine.tell`) folds a generation's shard
results at once, in index order, asks the next batch, and closes the generation. The
asynchronous loop (:class:`evocamp.loop.asynchronous.AsynchronousLoop`) folds one
completion at a time (``tell_async``), gives its slot a new proposal, and closes a
generation every ``generation_size`` completions. Either way the generation folded into is
the one after the state's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from evocamp.base.errors import EvaluationError
from evocamp.catalogue.domains import objective_max
from evocamp.catalogue.factory import owns_archive, run_packages
from evocamp.families.cqd import cqd_score, cqd_settings
from evocamp.families.passive import add_to_passive_archive
from evocamp.files.shard import STATUS
from evocamp.loop.step_settings import StepSettings
from evocamp.model.layout import closes_window
from evocamp.model.metrics import metrics_row
from evocamp.model.numerics import environment, noted
from evocamp.model.protocol import accepts_failed, call_method
from evocamp.model.runspec import evaluation_repeats, where
from evocamp.model.state import RunState


@dataclass(frozen=True)
class Evaluated:
    """Evaluated solutions to fold into a run: a generation's, in index order, or one
    completion's (one row each)."""

    objective: np.ndarray
    measures: np.ndarray
    extra: dict
    #: ``solutions_of(rows)``: the solutions of some rows, made only when needed (new
    #: elites of the passive archive, a better best solution).
    solutions_of: Callable
    #: The solutions the optimizer's tell receives as ``solutions`` (``None``: it gets
    #: none, they are its own).
    told_solutions: np.ndarray | None = None
    #: The numeric environments that evaluated them, each noted as an ``evaluate`` step.
    numerics: list = field(default_factory=list)
    #: Which rows failed (``evaluation.on_failure`` discard; their values are NaN):
    #: ``None`` when none did.
    failed: np.ndarray | None = None

    def evaluated_rows(self) -> Evaluated:
        """The rows that did not fail (``self`` when none failed): what the archive, the
        passive archive and the best solution may take."""
        if self.failed is None:
            return self
        rows = np.flatnonzero(~self.failed)
        return replace(
            self,
            objective=self.objective[rows],
            measures=self.measures[rows],
            extra={name: values[rows] for name, values in self.extra.items()},
            solutions_of=lambda chosen: self.solutions_of(rows[np.asarray(chosen, dtype=np.int64)]),
            told_solutions=None,
            failed=None,
        )


def fold_evaluations(state: RunState, evaluated: Evaluated, *, method: str = "tell") -> None:
    """Fold evaluated solutions into ``state`` (changed in place), as part of the
    generation after the state's.

    Parameters
    ----------
    state : RunState
        The run state; its archive, optimizer, best solution and numeric provenance
        change.
    evaluated : Evaluated
        The evaluated solutions.
    method : str
        The optimizer's method that receives them: ``"tell"`` (a generation's batch)
        or ``"tell_async"`` (one completion).
    """
    spec = state.spec
    generation = state.generation + 1
    kept = evaluated.evaluated_rows()
    if state.archive is not None and not owns_archive(spec) and len(kept.objective):
        add_to_passive_archive(
            state.archive,
            objective=kept.objective,
            measures=kept.measures,
            extra=kept.extra,
            solutions=kept.solutions_of,
        )
    if state.archive is None and len(kept.objective):
        state.best = improved_best(
            state.best,
            objective=kept.objective,
            extra=kept.extra,
            solutions_of=kept.solutions_of,
        )
    told = dict(evaluated.extra)
    if evaluated.told_solutions is not None:
        told["solutions"] = evaluated.told_solutions
    if evaluated.failed is not None:
        told["failed"] = evaluated.failed
    # A failed completion is told only to a tell_async that names `failed` (it leaves
    # the point's in-flight bookkeeping; it is never fitted or ranked as evaluated).
    if (
        method == "tell"
        or evaluated.failed is None
        or accepts_failed(type(state.optimizer), method)
    ):
        call_method(
            spec,
            generation,
            state.optimizer,
            method,
            evaluated.objective,
            evaluated.measures,
            **told,
        )
    for evaluated_under in evaluated.numerics:
        state.numerics = note_numerics(
            spec, state.numerics, step="evaluate", generation=generation, current=evaluated_under
        )


def close_generation(
    state: RunState,
    *,
    objective: np.ndarray,
    eval_seconds: float,
    shard_stats: dict,
    workers: int,
    status: np.ndarray | None = None,
    attempts: np.ndarray | None = None,
    failed_seconds: float = 0.0,
) -> None:
    """Close the generation after the state's, once all its evaluations are folded:
    its metrics row, the metrics window, the tell step's provenance; ``state``
    (changed in place) is then at that generation.

    Parameters
    ----------
    state : RunState
        The run state.
    objective : numpy.ndarray
        The generation's objective values.
    eval_seconds : float
        Seconds spent evaluating them.
    shard_stats : dict
        Means of the ``SHARD_STATS`` its evaluations reported.
    workers : int
        Evaluations that could run at once (the ``utilisation`` column).
    status : numpy.ndarray, optional
        The status (:data:`~evocamp.files.shard.STATUS`) of each of ``objective``'s
        evaluations, when some failed (their objective values are NaN): counted in the
        ``failed``, ``timed_out`` and ``failed_total`` columns and checked against
        ``evaluation.max_failed_fraction``.
    attempts : numpy.ndarray, optional
        Times each was evaluated (``None``: once each): the ``attempts`` and
        ``retries`` columns.
    failed_seconds : float
        Seconds spent in failed attempts (the ``failed_seconds`` column).

    Raises
    ------
    EvaluationError
        When more than ``evaluation.max_failed_fraction`` of the generation's
        evaluations, or of the run's so far, failed.
    """
    spec = state.spec
    generation = state.generation + 1
    previous_row = state.metrics_window[-1]
    failures = failure_counts(status, previous_row)
    if failures["failed"]:
        check_failed_fraction(
            spec,
            generation,
            failures,
            batch=len(objective),
            before=attempted(spec, previous_row),
        )
    retries = 0 if attempts is None else int(attempts.sum()) - len(objective)
    failures.update(
        attempts=len(objective) + retries, retries=retries, failed_seconds=failed_seconds
    )
    if status is not None:
        objective = objective[status == STATUS["ok"]]
    finished = time.time()
    row = metrics_row(
        archive=state.archive,
        optimizer_stats=optimizer_stats(spec, generation, state.optimizer),
        generation=generation,
        evaluations=int(previous_row["evaluations"]) + len(objective) * evaluation_repeats(spec),
        objective=objective,
        best_objective=float(
            np.fmax(previous_row["best_objective"], objective.max() if len(objective) else np.nan)
        ),
        wall_seconds=finished - state.finished_at,
        eval_seconds=eval_seconds,
        shard_stats=shard_stats,
        workers=workers,
        cqd_score=archive_cqd_score(spec, state.archive),
        failures=failures,
    )
    state.metrics_window = extended_window(state, row)
    state.numerics = note_numerics(spec, state.numerics, step="tell", generation=generation)
    state.generation = generation
    state.finished_at = finished


def failure_counts(status: np.ndarray | None, previous_row) -> dict:
    """The ``failed``, ``timed_out`` and ``failed_total`` columns of a generation whose
    evaluations have ``status`` (``None``: none failed)."""
    failed = 0 if status is None else int((status != STATUS["ok"]).sum())
    timed_out = 0 if status is None else int((status == STATUS["timed_out"]).sum())
    return {
        "failed": failed,
        "timed_out": timed_out,
        "failed_total": int(previous_row["failed_total"]) + failed,
    }


def attempted(spec: dict, row) -> int:
    """Solutions the run had evaluated or failed to evaluate by the generation of
    metrics ``row``: its ``evaluations`` (calls) over ``evaluation.repeats``, and its
    ``failed_total``; a solution evaluated after retries counts once, as evaluated."""
    return int(row["evaluations"]) // evaluation_repeats(spec) + int(row["failed_total"])


def check_failed_fraction(
    spec: dict, generation: int, failures: dict, *, batch: int, before: int
) -> None:
    """Stop with one line when evaluations fail wholesale: more than
    ``evaluation.max_failed_fraction`` (a step setting,
    :class:`~evocamp.loop.step_settings.StepSettings`) of this generation's ``batch``,
    or of the run's so far (``before`` the generation, :func:`attempted`, and its
    batch)."""
    if not failures["failed"]:
        return
    limit = StepSettings.current().max_failed_fraction
    for what, failed, total in (
        ("this generation's", failures["failed"], batch),
        ("the run's", failures["failed_total"], before + batch),
    ):
        if failed > limit * total:
            raise EvaluationError(
                f"{where(spec, generation)}: {failed} of {what} {total} evaluations failed, "
                f"more than evaluation.max_failed_fraction ({limit:g}); each failure is "
                "named in the run's log"
            )


def optimizer_stats(spec: dict, generation: int, optimizer) -> dict:
    """The optimizer's ``stats()`` (metrics columns such as ``sigma``), if it has any."""
    if not callable(getattr(optimizer, "stats", None)):
        return {}
    return dict(call_method(spec, generation, optimizer, "stats"))


def archive_cqd_score(spec: dict, archive) -> float:
    """The CQD score of a run's archive (NaN when the run gets none: see
    :func:`evocamp.families.cqd.cqd_settings`)."""
    settings = (
        cqd_settings(spec, objective_max=objective_max(spec["domain_spec"]))
        if archive is not None
        else None
    )
    return np.nan if settings is None else cqd_score(archive, **settings)


def note_numerics(
    spec: dict, records: list[dict], *, step: str, generation: int, current: dict | None = None
) -> list[dict]:
    """A run's numeric provenance records with one step noted
    (:func:`evocamp.model.numerics.noted`); a step under another kernel or package
    versions than the run's earlier steps gets one warning line in its log."""
    if current is None:
        current = environment(run_packages(spec))
    records, warning = noted(records, step=step, generation=generation, current=current)
    if warning is not None:
        print(
            f"evocamp: warning: {where(spec, generation)}: {warning}", file=sys.stderr, flush=True
        )
    return records


def extended_window(state: RunState, row: np.ndarray) -> np.ndarray:
    """The metrics window after ``state`` with the next generation's ``row``: it
    restarts after every kept checkpoint (a generation that is a positive multiple of
    ``checkpoint_every``), whose rows were already saved.

    The window is the start of a larger buffer whose spare rows are marked
    (:data:`SPARE_GENERATION`): the next row is written in place when the window's
    next row is spare, so a window of ``n`` generations costs ``n`` row copies, not
    ``n**2 / 2`` (Dask mode's segments: every generation of a window). Rows once
    written never change: a window extended twice (two states after the same one)
    gets its own buffer the second time.
    """
    if closes_window(state.generation, every=state.spec["checkpoint_every"]):
        return row
    window = state.metrics_window
    if window.dtype != row.dtype:
        return np.concatenate([window, row])
    size = len(window) + len(row)
    buffer = window.base
    # The buffer's written rows are a prefix of it and none is spare: a view of it whose
    # length is the index of a spare row, with the buffer's strides, is that prefix.
    if (
        type(buffer) is np.ndarray
        and buffer.dtype == window.dtype
        and len(buffer) >= size
        and window.strides == buffer.strides
        and buffer["generation"][len(window)] == SPARE_GENERATION
    ):
        if len(row) == 1:  # one element assigned: a slice of a structured array costs more
            buffer[len(window)] = row[0]
        else:
            buffer[len(window) : size] = row
        return buffer[:size]
    buffer = np.empty(max(2 * size, 16), dtype=window.dtype)
    buffer["generation"][size:] = SPARE_GENERATION
    buffer[: len(window)] = window
    buffer[len(window) : size] = row
    return buffer[:size]


#: The ``generation`` of a metrics window buffer's spare rows (no row has it).
SPARE_GENERATION = np.iinfo(np.int64).min


def improved_best(best: dict | None, *, objective: np.ndarray, extra: dict, solutions_of) -> dict:
    """The best evaluated solution so far (runs without an archive): its solution,
    objective and extra fields; the first of equal objectives wins. ``solutions_of(rows)``
    gives the solutions of rows of the evaluated batch."""
    index = int(np.argmax(objective))
    if best and objective[index] <= best["objective"]:
        return best
    improved = {"solution": solutions_of([index])[0], "objective": np.float64(objective[index])}
    improved.update({name: np.float64(values[index]) for name, values in extra.items()})
    return improved
