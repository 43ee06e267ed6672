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
from evocamp.catalogue.factory import resolve_run
from evocamp.files.reevaluation import CORRECTED_METRICS, Reevaluation
from evocamp.files.shard import ShardResult
from evocamp.loop.evaluation import evaluate_slice
from evocamp.loop.step_settings import StepSettings
from evocamp.model.protocol import shard_bounds
from evocamp.model.runspec import measure_dim, spec_run_key, where
from evocamp.model.state import RunState

#: Archive fields that are not extra fields of the evaluation.
_ARCHIVE_FIELDS = ("solution", "objective", "measures", "threshold", "index")


def reevaluate(state: RunState, *, repeats: int) -> Reevaluation:
    """Evaluate a finished run's elites ``repeats`` (``evaluation.reevaluate``) more
    times in one go and compute the corrected metrics (what the workflow does in
    shards: :func:`reevaluate_shard` and :func:`combine_reevaluation`).

    Raises
    ------
    EvaluationError
        When an evaluation fails (the message names the run, the final re-evaluation
        and the elite's archive cell).
    """
    return combine_reevaluation(
        state, repeats=repeats, shards=[reevaluate_shard(state, repeats=repeats, shard=0, shards=1)]
    )


def reevaluate_shard(
    state: RunState, *, repeats: int, shard: int, shards: int, shard_file=None
) -> ShardResult:
    """Evaluate shard ``shard`` of ``shards`` of a finished run's elites (a contiguous
    slice in cell-index order, :func:`~evocamp.model.protocol.shard_bounds`; possibly
    empty when there are fewer elites than shards) ``repeats`` times, journalling its
    finished calls beside ``shard_file`` (a path, optional; as
    :func:`~evocamp.loop.evaluation.evaluate_shard` does).

    Raises
    ------
    EvaluationError
        As :func:`reevaluate`.
    """
    spec = state.spec
    cells, solutions, _ = _elites(state)
    seeds = reevaluation_seeds(spec["master_seed"], spec_run_key(spec), len(solutions))
    start, stop = shard_bounds(len(solutions), shards, shard)
    if stop > start:
        result = evaluate_slice(
            resolve_run(
                _with_repeats(spec, repeats),
                evaluates=True,
                programs=StepSettings.current().programs,
            ),
            generation=state.generation,
            shard=None,
            start=start,
            solutions=solutions[start:stop],
            seeds=seeds[start:stop],
            cells=cells[start:stop],
            journal=None if shard_file is None else (shard_file, shard, shards),
        )
        result.shard = shard
        return result
    dim = measure_dim(spec["domain_spec"])
    return ShardResult(
        generation=state.generation,
        shard=shard,
        start=start,
        stop=start,
        objective=np.zeros(0),
        measures=np.zeros((0, dim)),
        eval_seconds=np.zeros(0),
        extra={},
    )


def combine_reevaluation(
    state: RunState, *, repeats: int, shards: list[ShardResult]
) -> Reevaluation:
    """The re-evaluation of a finished run's elites from its shards' results (in any
    order) and the corrected metrics.

    Raises
    ------
    EvaluationError
        When the shards do not cover the elites exactly.
    """
    spec = state.spec
    index, solutions, raw = _elites(state)
    seeds = reevaluation_seeds(spec["master_seed"], spec_run_key(spec), len(index))
    ordered = sorted((r for r in shards if r.stop > r.start), key=lambda r: r.start)
    position = 0
    for result in ordered:
        if result.start != position:
            break
        position = result.stop
    if position != len(index):
        covered = [(r.start, r.stop - 1) for r in ordered]
        raise EvaluationError(
            f"{where(spec, state.generation)}: the re-evaluation shards cover elites "
            f"{covered}, not 0..{len(index) - 1}"
        )
    result = None
    if ordered:
        result = ShardResult(
            generation=state.generation,
            shard=None,
            start=0,
            stop=len(index),
            objective=np.concatenate([r.objective for r in ordered]),
            measures=np.concatenate([r.measures for r in ordered]),
            eval_seconds=np.concatenate([r.eval_seconds for r in ordered]),
            extra={n: np.concatenate([r.extra[n] for r in ordered]) for n in ordered[0].extra},
        )
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
