"""The final re-evaluation of a run's elites (``evaluation.reevaluate``).

Flageat & Cully ("Uncertain Quality-Diversity", 2023): in a noisy domain an archive
keeps lucky draws, so its QD score is biased upwards. Every elite of the final archive
(the passive archive of other families; the best solution of runs without one) is
evaluated ``n`` more times with fresh seeds (:func:`evocamp.base.seeding.reevaluation_seeds`,
one per elite in cell-index order, its repeats' seeds derived from it), and the means
of objective and measures are inserted into an empty archive of the same shape: its QD
score, coverage and best objective are the corrected metrics. Everything depends on
the final archive alone, which is bitwise the same in every mode and shard count, so
the corrected metrics are too.
"""

from __future__ import annotations

import copy

import numpy as np

from evocamp.base.errors import EvaluationError
from evocamp.base.seeding import reevaluation_seeds
from evocamp.files.reevaluation import CORRECTED_METRICS, Reevaluation
from evocamp.loop.evaluation import evaluate_slice
from evocamp.model.runspec import measure_dim, spec_run_key
from evocamp.model.state import RunState

#: Archive fields that are not extra fields of the evaluation.
_ARCHIVE_FIELDS = ("solution", "objective", "measures", "threshold", "index")


def reevaluate(state: RunState, *, repeats: int) -> Reevaluation:
    """Evaluate a finished run's elites ``repeats`` (``evaluation.reevaluate``) more
    times and compute the corrected metrics.

    Parameters
    ----------
    state : RunState
        The run's final state (a whole one: its archive, or its best solution).
    repeats : int
        Evaluations of each elite.

    Raises
    ------
    EvaluationError
        When an evaluation fails (the message names the elite's position as
        ``solution <i>``, in the run's last generation).
    """
    spec = state.spec
    index, solutions, raw = _elites(state)
    seeds = reevaluation_seeds(spec["master_seed"], spec_run_key(spec), len(index))
    result = _evaluated(_with_repeats(spec, repeats), state.generation, solutions, seeds)
    return Reevaluation(
        generation=state.generation,
        repeats=repeats,
        index=index,
        seed=seeds,
        raw_objective=raw,
        objective=result.objective if result else np.zeros(0),
        measures=result.measures if result else np.zeros((0, measure_dim(spec["domain_spec"]))),
        extra=dict(result.extra) if result else {},
        corrected=corrected_metrics(state.archive, solutions, result),
    )


def _evaluated(spec: dict, generation: int, solutions: np.ndarray, seeds: np.ndarray):
    """The elites' evaluations through the shard step (``None`` for no elites); a
    failure's message says that its ``solution <i>`` is the i-th elite."""
    if not len(solutions):
        return None
    try:
        return evaluate_slice(
            spec, generation=generation, shard=None, start=0, solutions=solutions, seeds=seeds
        )
    except EvaluationError as error:
        raise EvaluationError(
            f"final re-evaluation (evaluation.reevaluate; solution i: the final archive's "
            f"i-th elite by cell index): {error}",
            details=error.details,
        ) from None


def _with_repeats(spec: dict, repeats: int) -> dict:
    """The run spec with ``repeats`` evaluations per solution (the re-evaluation's)."""
    return {**spec, "evaluation": {**(spec.get("evaluation") or {}), "repeats": repeats}}


def _elites(state: RunState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cell indices, solutions and objectives of a run's elites, in index order
    (the best solution, index -1, for a run without an archive)."""
    if state.archive is None:
        if not state.best:
            return np.zeros(0, np.int64), np.zeros((0, 0)), np.zeros(0)
        solution = np.asarray(state.best["solution"], dtype=np.float64)[None, :]
        return np.array([-1]), solution, np.array([float(state.best["objective"])])
    data = state.archive.data()
    order = np.argsort(data["index"], kind="stable")
    return (
        np.asarray(data["index"], dtype=np.int64)[order],
        np.asarray(data["solution"], dtype=np.float64)[order],
        np.asarray(data["objective"], dtype=np.float64)[order],
    )


def corrected_metrics(archive, solutions: np.ndarray, result) -> dict:
    """The corrected metrics: those of an empty copy of ``archive`` into which the
    elites are inserted with their mean objective and measures (``result``); without
    an archive, only the best objective (the best solution's mean)."""
    corrected = dict.fromkeys(CORRECTED_METRICS, float("nan"))
    if result is None:
        return corrected
    if archive is None:
        corrected["corrected_best_objective"] = float(result.objective.max())
        return corrected
    fresh = copy.deepcopy(archive)
    fresh.clear()
    extra = {
        name: result.extra.get(name, np.full(len(solutions), np.nan))
        for name in archive.field_list
        if name not in _ARCHIVE_FIELDS
    }
    fresh.add(solutions, result.objective, result.measures, **extra)
    stats = fresh.stats
    corrected.update(
        corrected_qd_score=float(stats.qd_score),
        corrected_norm_qd_score=float(stats.norm_qd_score),
        corrected_coverage=float(stats.coverage),
        corrected_best_objective=np.nan if stats.obj_max is None else float(stats.obj_max),
    )
    return corrected
