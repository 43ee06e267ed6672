"""Dask mode: one job (a segment) runs a window's generations, each batch on Dask.

For evaluations of milliseconds to seconds a Snakemake job per shard costs more than
the work. Here one process asks, evaluates and tells ``checkpoint_every``
generations in a row; each generation's batch is split exactly as in shard mode
(``shard_bounds``) and the slices are evaluated on a Dask cluster, then folded in
solution-index order by the same :func:`evocamp.loop.engine.tell`. Results are therefore
bitwise identical to shard mode. Checkpoints are written at window ends only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import sys
import time
from pathlib import Path

from evocamp.base.errors import EvaluationError
from evocamp.base.lanes import worker_lane
from evocamp.base.shard_views import Rows
from evocamp.catalogue.factory import resolve_run
from evocamp.executors.dask_cluster import (
    DaskResources,
    cluster_workers,
    configure_worker_logging,
    dask_client,
)
from evocamp.files.checkpoint import write_state
from evocamp.files.evaluations import StorageSettings, concatenate, record_window_rows
from evocamp.files.shard import ShardResult
from evocamp.loop.engine import held_batch, tell
from evocamp.loop.evaluation import evaluate_shard
from evocamp.loop.progress import generation_line
from evocamp.loop.state_cache import read_full_state
from evocamp.loop.step_settings import StepSettings
from evocamp.model.layout import RunFolder
from evocamp.model.protocol import shard_bounds
from evocamp.model.runspec import Run, where
from evocamp.model.state import RunState


def _worker_prefix() -> str:
    try:
        from distributed import get_worker

        return f"[{get_worker().address}]"
    except (ImportError, ValueError):
        return "[local]"


def evaluate_on_worker(
    spec: dict, generation: int, shard: int, shards: int, batch: dict, seeds, *, gpus=None
) -> ShardResult:
    """Dask task: evaluate one shard (:func:`evocamp.loop.evaluation.evaluate_shard`) of
    the batch it was sent, and log it with the worker's address as prefix (positional
    arguments: ``client.map`` iterates them); ``gpus`` (not ``None``: the worker runs
    several tasks at once, or GPUs are asked) runs its calls in a lane of the worker
    of their own with that many GPUs (:func:`~evocamp.base.lanes.worker_lane`).

    The task sets up the worker's log handler itself (once per process), not a
    ``client.run`` on every worker: a broadcast fails when one worker has just died,
    and a worker its nanny started again would log nothing.
    """
    configure_worker_logging()
    began = time.perf_counter()
    with contextlib.ExitStack() as held:
        lane = None if gpus is None else held.enter_context(worker_lane(gpus))
        result = evaluate_shard(
            resolve_run(spec),
            batch=batch,
            seeds=seeds,
            generation=generation,
            shard=shard,
            shards=shards,
            lane=lane,
        )
    logging.getLogger("evocamp.worker").info(
        "%s generation %d shard %d: solutions %d..%d in %.3f s",
        _worker_prefix(),
        generation,
        shard,
        result.start,
        result.stop - 1,
        time.perf_counter() - began,
    )
    return result


def lost_worker_retries(run: Run) -> int | None:
    """How often a task is started again after its worker died: ``evaluation.retries``
    under ``on_failure: retry`` (a worker lost with its node is retried like a crash),
    else ``None`` (Dask's default, 3)."""
    policy = run.failure_policy
    return policy.retries if policy.on_failure == "retry" else None


def gathered(client, futures: list, *, where):
    """``client.gather(futures)``, with Dask's ``KilledWorker`` (the workers running a
    task died ``distributed.scheduler.allowed-failures`` + 1 times) as one
    :class:`~evocamp.base.errors.EvaluationError` naming the tasks Dask gave up on:
    ``where(k)`` says where task ``k`` of ``futures`` is. A dead worker takes the tasks
    it held with it, so Dask may give up on an innocent task beside the one that killed
    the workers; the message names them all, lowest first."""
    from distributed import wait
    from distributed.scheduler import KilledWorker

    try:
        return client.gather(futures)
    except KilledWorker as error:
        with contextlib.suppress(TimeoutError):  # let the other verdicts arrive
            wait(futures, timeout=2)
        suspects = sorted(
            {k for k, future in enumerate(futures) if future.key == error.task}
            | {k for k, future in enumerate(futures) if _killed(future, KilledWorker)}
        )
        others = "".join(
            f"; so did those evaluating {where(k)}, held by the same workers (Dask cannot "
            "tell which task ended them)"
            for k in suspects[1:]
        )
        raise EvaluationError(
            f"{where(suspects[0])}: the Dask workers evaluating it died "
            f"{error.allowed_failures + 1} times (distributed.scheduler.allowed-failures: "
            f"{error.allowed_failures}; the last was {error.last_worker.address}){others}; a "
            "crash or timeout of the evaluation itself does not end a worker: a worker lost "
            "with its node or killed (out of memory?) does"
        ) from None


def _killed(future, killed_worker: type) -> bool:
    """Whether Dask gave up on ``future`` because its workers died."""
    return future.status == "error" and isinstance(future.exception(), killed_worker)


def _shard_batches(client, state: RunState, bounds: list[tuple[int, int]], *, run: Run) -> list:
    """What each task receives of the state's next batch.

    A plain batch (solutions only) is sliced: each task gets its rows
    (:class:`~evocamp.base.shard_views.Rows`, indexed with the batch's positions). A compact
    batch that names parents by their cells (QD) goes to each task with the elites of
    its own slice (:func:`~evocamp.loop.engine.held_batch`). Another compact batch (e.g.
    an ES centre and noise seeds) is scattered once to every worker and each task gets
    a reference to it: the centre crosses the network once per worker, not once per
    offspring.
    """
    batch = state.next_batch
    size = bounds[-1][1]
    if set(batch) == {"solutions"}:
        return [
            {"solutions": Rows(batch["solutions"][a:b], offset=a, length=size)} for a, b in bounds
        ]
    if run.batch_format.reads_elites:
        return [held_batch(state, run=run, start=a, stop=b) for a, b in bounds]
    # In a list, the batch is one object whose key is a hash of its content (a dict
    # itself would be scattered under its own keys, "centre" etc., which keep the first
    # generation's data).
    shared = broadcast(client, batch, where=where(state.spec, state.generation + 1))
    return [shared] * len(bounds)


#: Attempts of a broadcast to every worker, and seconds between them.
BROADCAST_ATTEMPTS, BROADCAST_PAUSE = 5, 0.5


def broadcast(client, value, *, where: str):
    """``value`` scattered to every worker of ``client``'s cluster (its future).

    A worker that has just died (its nanny starts a new one) is still on the
    scheduler's list for a moment, and a broadcast to it fails (``CommClosedError``,
    or a ``KeyError`` naming its address): the broadcast is tried again
    :data:`BROADCAST_ATTEMPTS` times, :data:`BROADCAST_PAUSE` seconds apart.

    Raises
    ------
    EvaluationError
        One line beginning with ``where`` when every attempt failed.
    """
    for attempt in range(1, BROADCAST_ATTEMPTS + 1):
        try:
            (shared,) = client.scatter([value], broadcast=True)
            return shared
        except (OSError, KeyError) as error:  # distributed's CommClosedError is an OSError
            if attempt == BROADCAST_ATTEMPTS:
                raise EvaluationError(
                    f"{where}: the batch could not be sent to every Dask worker in "
                    f"{BROADCAST_ATTEMPTS} attempts (the last: {type(error).__name__}: "
                    f"{error}); workers died as it was sent"
                ) from None
            time.sleep(BROADCAST_PAUSE)


#: Seconds between two progress lines of a segment at least (its first and last
#: generations' are always written): a segment of generations of microseconds (BBOB)
#: would otherwise spend more on its log than on its evaluations.
PROGRESS_SECONDS = 1.0


def run_generations(
    state: RunState,
    *,
    until: int,
    shards: int,
    client,
    workers: int,
    total: int | None,
    log=print,
    storage: StorageSettings | None = None,
    resources: DaskResources | None = None,
) -> RunState:
    """Advance ``state`` generation by generation up to ``until`` (inclusive).

    Parameters
    ----------
    state : RunState
        The checkpoint to continue from.
    until : int
        The last generation to run.
    shards : int
        Slices per batch (as in shard mode; one Dask task each).
    client : distributed.Client or None
        Where the slices are evaluated; ``None``: in this process, one after the
        other (``dask.workers: 0``: :func:`run_segment`).
    workers : int
        Dask workers evaluating them (the ``utilisation`` column's divisor; 1 in this
        process).
    total : int, optional
        Generations of the run, for the progress line.
    log : callable
        Receives the progress lines: the first and last generation's, and one at
        most every :data:`PROGRESS_SECONDS` between them.
    storage : StorageSettings, optional
        What to keep of the evaluations (default: the defaults); when kept, the
        returned state's ``evaluations`` holds the rows of every generation run here.
    resources : DaskResources, optional
        What each task asks of its worker, and whether its calls run in a lane of the
        worker (default: nothing, one task per worker at a time).
    """
    run = resolve_run(state.spec)
    resources = resources or DaskResources()
    kept = (storage or StorageSettings()).for_run(
        run, generation_size=len(state.next_seeds), total=total
    )
    told = []
    first, logged = state.generation + 1, -math.inf
    settings = StepSettings.current()  # once per segment, not per generation
    while state.generation < until:
        generation = state.generation + 1
        size = len(state.next_seeds)
        if client is None:  # evaluated here, one shard after the other
            bounds = (
                [(0, size)]
                if shards == 1
                else [shard_bounds(size, shards, k) for k in range(shards)]
            )
            results = [
                evaluate_shard(
                    run,
                    batch=(
                        held_batch(state, run=run, start=a, stop=b)
                        if run.batch_format.reads_elites
                        else state.next_batch
                    ),
                    seeds=state.next_seeds,
                    generation=generation,
                    shard=k,
                    shards=shards,
                    settings=settings,
                )
                for k, (a, b) in enumerate(bounds)
            ]
        else:
            bounds = [shard_bounds(size, shards, shard) for shard in range(shards)]
            batches = _shard_batches(client, state, bounds, run=run)
            seeds = [Rows(state.next_seeds[a:b], offset=a, length=size) for a, b in bounds]
            # One client.map call: a single graph update for the whole generation.
            futures = client.map(
                evaluate_on_worker,
                [state.spec] * shards,
                [generation] * shards,
                range(shards),
                [shards] * shards,
                batches,
                seeds,
                pure=False,
                resources=resources.task(),
                gpus=resources.lane_gpus(),
            )
            results = gathered(
                client, futures, where=functools.partial(where, state.spec, generation)
            )
        state = tell(state, results, workers=workers, storage=kept, run=run)
        told.append(state.evaluations)
        now = time.monotonic()
        if generation in (first, until) or now - logged >= PROGRESS_SECONDS:
            log(generation_line(state, total=total))
            logged = now
    return dataclasses.replace(state, evaluations=concatenate(told))


def run_segment(
    *,
    state_path: str | Path,
    until: int,
    output: str | Path,
    shards: int,
    scheduler_file: str | None,
    workers: int,
    total: int | None,
    log=print,
    storage: StorageSettings | None = None,
    full_every: int = 1,
) -> RunState:
    """Run generations after the checkpoint ``state_path`` up to ``until`` on Dask and
    write the resulting checkpoint to ``output``; ``log`` receives the progress lines.
    ``workers`` 0 (``dask.workers: 0``, no ``scheduler_file``) starts no cluster: the
    shards are evaluated in this process by the same shard step, so the results are
    the same bits (for evaluations of microseconds, such as BBOB's, a Dask round trip
    per generation and a LocalCluster per segment cost more than the evaluations).
    The evaluations of these generations, when kept (``evaluations``), are recorded
    first, in the run's evaluation window file named after ``until``
    (``<run>/evaluations/segment_<until>.h5``, the run being the folder of ``output``'s
    folder; after the run's last window, ``evaluations.h5`` indexes them:
    :func:`~evocamp.files.evaluations.record_window_rows`): a kill before the
    checkpoint is written makes the job run again and record them again, in place of
    the first.

    The first generation's ``wall_seconds`` counts from this job's start, not from when
    the checkpoint was written: time between segments (waiting for a core or a queue,
    a stopped campaign) is not the run's.
    """
    started = time.time()
    state = read_full_state(state_path)
    state = dataclasses.replace(state, finished_at=max(state.finished_at, started))
    run = resolve_run(state.spec)
    resources = DaskResources.of(run, StepSettings.current())
    in_process = workers == 0 and not scheduler_file
    with (
        contextlib.nullcontext()
        if in_process
        else dask_client(
            scheduler_file=scheduler_file,
            workers=workers,
            preload=run.batch_format.shard_modules,
            allowed_failures=lost_worker_retries(run),
            where=where(state.spec, state.generation + 1),
            resources=resources,
        )
    ) as client:
        state = run_generations(
            state,
            until=until,
            shards=shards,
            client=client,
            workers=(
                cluster_workers(client)
                if scheduler_file
                else max(workers, 1) * resources.concurrency
            ),
            total=total,
            log=log,
            storage=storage,
            resources=resources,
        )
    if state.evaluations is not None:
        written = record_window_rows(
            RunFolder.holding(output),
            state.evaluations,
            spec=state.spec,
            generation=state.generation,
            total=total,
        )
        print(
            f"generation {state.generation}: {len(state.evaluations)} evaluations recorded "
            f"in {written}",
            file=sys.stderr,
            flush=True,
        )
        state = dataclasses.replace(state, evaluations=None)
    began = time.perf_counter()
    write_state(output, state, run=run, full_every=full_every)
    print(
        f"generation {state.generation}: checkpoint written "
        f"({Path(output).stat().st_size / 1e6:.2f} MB in {time.perf_counter() - began:.3f} s)",
        file=sys.stderr,
        flush=True,
    )
    return state
