"""The generation loop's steps: initialise a run, tell a generation's results.

These functions hold no I/O policy of their own; the pipeline step commands (one step
per Snakemake job) and Dask mode (many generations in one process) both call them,
which is why both modes give bitwise-identical results.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from evocamp.base.seeding import evaluation_seeds
from evocamp.base.shard_views import ElitesAt
from evocamp.catalogue.factory import build_optimizer, owns_archive, resolve_run
from evocamp.families.passive import build_passive_archive
from evocamp.families.qd.compact import ArchiveElites
from evocamp.files.evaluations import EvaluationRows, StorageSettings, keeps_noise_seeds
from evocamp.files.shard import ATTEMPTS_DTYPE, ShardResult
from evocamp.loop.fold import (
    Evaluated,
    archive_cqd_score,
    close_generation,
    fold_evaluations,
    note_numerics,
    optimizer_stats,
)
from evocamp.loop.generation_results import GenerationResults, combine_shards
from evocamp.model.metrics import metrics_row
from evocamp.model.protocol import ELITES, call_method, call_optimizer, checked_batch
from evocamp.model.runspec import Run, spec_run_key
from evocamp.model.state import RunState


def _next_batch(run: Run, optimizer, generation: int) -> tuple[dict, np.ndarray]:
    """Ask the batch of ``generation`` and derive its evaluation seeds."""
    spec = run.spec
    asked = call_method(spec, generation, optimizer, "ask")
    batch, size = checked_batch(spec, generation, run.batch_format, asked)
    seeds = evaluation_seeds(spec["master_seed"], spec_run_key(spec), generation, size)
    return batch, seeds


def held_batch(
    state: RunState, *, run: Run | None = None, start: int = 0, stop: int | None = None
) -> dict:
    """The state's next batch as its holder gives it to whoever makes solutions
    ``start..stop-1`` (all by default) from it: with the elites of the state's archive
    they are made from (:data:`ELITES`, those cells only; novelty search's: of its
    novelty archive, the optimizer's ``parent_archive``) when the batch names parents
    by their cells and does not hold them already (a state read without its archive
    holds :class:`~evocamp.files.checkpoint.StoredElites`). ``run``: the state's run
    (resolved here when not given)."""
    kind = (run or resolve_run(state.spec)).batch_format
    stop = len(state.next_seeds) if stop is None else stop
    cells = kind.elites_read(state.next_batch, start, stop)
    if not len(cells) or ELITES in state.next_batch:
        return state.next_batch
    parents = getattr(state.optimizer, "parent_archive", state.archive)
    return {**state.next_batch, ELITES: ElitesAt(cells, ArchiveElites(parents)[cells])}


def optimizer_result(spec: dict, generation: int, optimizer) -> dict | None:
    """The optimizer's ``result()`` (arrays stored in ``/result``), if it has one."""
    if not callable(getattr(optimizer, "result", None)):
        return None
    return dict(call_method(spec, generation, optimizer, "result"))


def initialise(spec: dict, *, first_batch=None) -> RunState:
    """Create a run's optimizer (and passive archive) and ask the batch of generation 1.

    ``first_batch(optimizer)`` returns ``(batch, seeds)`` of the state's next batch
    instead (asynchronous mode fills its slots: ``initialise_asynchronous``).
    """
    started = time.time()
    run = resolve_run(spec)
    optimizer = build_optimizer(spec)
    if owns_archive(spec):
        archive = optimizer.archive
    else:
        archive = build_passive_archive(spec)
    if first_batch is None:
        batch, seeds = _next_batch(run, optimizer, 1)
    else:
        batch, seeds = first_batch(optimizer)
    finished = time.time()
    row = metrics_row(
        archive=archive,
        optimizer_stats=optimizer_stats(spec, 0, optimizer),
        generation=0,
        evaluations=0,
        objective=np.empty(0),
        best_objective=np.nan,
        wall_seconds=finished - started,
        eval_seconds=0.0,
        cqd_score=archive_cqd_score(spec, archive),
    )
    return RunState(
        spec=spec,
        generation=0,
        optimizer=optimizer,
        archive=archive,
        next_batch=batch,
        next_seeds=seeds,
        metrics_window=row,
        finished_at=finished,
        best=None if archive is not None else {},
        numerics=note_numerics(spec, [], step="initialise", generation=0),
    )


def tell(
    state: RunState,
    shards: list[ShardResult],
    *,
    workers: int | None = None,
    storage: StorageSettings | None = None,
    run: Run | None = None,
) -> RunState:
    """Fold a generation's shard results, in index order, into a new state
    (:mod:`evocamp.loop.fold`: archive, best solution, optimizer, metrics row) and ask
    the next batch.

    Parameters
    ----------
    state : RunState
        The state after the previous generation (its ``next_batch`` was evaluated).
    shards : list of ShardResult
        All shards of the generation, in any order.
    workers : int, optional
        Evaluations that could run at once, for the ``utilisation`` column (Dask
        mode: its workers); the number of shards when not given (shard mode).
    storage : StorageSettings, optional
        Keep the generation's evaluations: the returned state's ``evaluations``
        holds one row per solution (:func:`evaluation_rows`); ``None``: not kept.
    run : Run, optional
        The state's run, when the step has resolved it (else resolved here, once).

    The metrics window restarts after every kept checkpoint (a generation that is
    a positive multiple of ``checkpoint_every``), whose rows were already saved.
    """
    generation = state.generation + 1
    run = run or resolve_run(state.spec)
    results = combine_shards(state.spec, generation, len(state.next_seeds), shards)
    batch_kind = run.batch_format
    held = held_batch(state, run=run) if batch_kind.reads_elites else state.next_batch

    def solution(row: int) -> np.ndarray:
        made, _ = call_optimizer(
            state.spec,
            generation,
            f"{batch_kind.name}.solutions",
            batch_kind.materialise,
            held,
            row,
            row + 1,
        )
        return made[0]

    def solutions_of(rows) -> np.ndarray:
        if results.solutions is not None:
            return results.solutions[np.asarray(rows, dtype=np.int64)]
        if batch_kind.compact is None and isinstance(held["solutions"], np.ndarray):
            # A plain batch in memory: its rows, as materialise makes them one by one.
            return np.asarray(held["solutions"][np.asarray(rows, dtype=np.int64)], dtype=np.float64)
        return np.stack([solution(int(row)) for row in rows])

    rows = None
    if storage is not None:
        rows = evaluation_rows(state, results, generation=generation, storage=storage, run=run)
    after = replace(state, evaluations=rows)
    evaluated = Evaluated(
        objective=results.objective,
        measures=results.measures,
        extra=results.extra,
        solutions_of=solutions_of,
        told_solutions=results.solutions if batch_kind.proposes_in_shards else None,
        numerics=results.numerics,
        failed=results.failed(),
    )
    fold_evaluations(after, evaluated)
    after.next_batch, after.next_seeds = _next_batch(run, after.optimizer, generation + 1)
    close_generation(
        after,
        objective=results.objective,
        eval_seconds=results.eval_seconds,
        shard_stats=results.shard_stats,
        workers=workers or results.shards,
        status=results.status,
        attempts=results.attempts,
        failed_seconds=results.failed_seconds,
    )
    return after


def evaluation_rows(
    state: RunState,
    results: GenerationResults,
    *,
    generation: int,
    storage: StorageSettings,
    run: Run | None = None,
) -> EvaluationRows:
    """One row per solution of a generation (the batch of ``state``, evaluated as
    ``results``): generation, index, evaluation seed, objective, measures, extra fields,
    seconds, and the solution when small (``storage``); evolution strategies store
    each offspring's noise seed and the generation's centre and sigma instead, from
    which :meth:`~evocamp.model.protocol.BatchFormat.materialise` regenerates it.
    Another compact batch's solutions are materialised once for the whole batch.
    ``run``: the state's run (resolved here when not given)."""
    run = run or resolve_run(state.spec)
    count = len(results.objective)
    index = np.arange(count, dtype=np.int64)
    solution = noise_seed = None
    batch = {}
    if keeps_noise_seeds(run):
        noise = np.asarray(state.next_batch["noise"], dtype=np.uint64)
        noise_seed = noise[index // (count // len(noise))]
        batch = {"generation": np.array([generation], dtype=np.int64)}
        batch.update(
            {
                name: np.asarray(values)[np.newaxis]
                for name, values in state.next_batch.items()
                if name != "noise"
            }
        )
    elif storage.stores_solutions(run):
        if results.solutions is not None:
            solution = results.solutions
        elif set(state.next_batch) == {"solutions"}:
            solution = np.asarray(state.next_batch["solutions"], dtype=np.float64)
        else:
            batch_kind = run.batch_format
            solution, _ = call_optimizer(
                state.spec,
                generation,
                f"{batch_kind.name}.solutions",
                batch_kind.materialise,
                held_batch(state, run=run),
                0,
                count,
            )
    return EvaluationRows(
        generation=np.full(count, generation, dtype=np.int64),
        index=index,
        seed=np.asarray(state.next_seeds, dtype=np.uint64),
        objective=results.objective,
        measures=results.measures,
        extra=dict(results.extra),
        eval_seconds=results.seconds,
        solution=solution,
        noise_seed=noise_seed,
        batch=batch,
        status=(np.zeros(count, dtype=np.uint8) if results.status is None else results.status),
        failures={(generation, index): text for index, text in results.messages.items()},
        attempts=(
            np.ones(count, dtype=ATTEMPTS_DTYPE) if results.attempts is None else results.attempts
        ),
    )
