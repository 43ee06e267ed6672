"""Dask mode: one job runs a segment of generations, evaluating each batch on Dask.

For evaluations of milliseconds to seconds a Snakemake job per shard costs more than
the work. Here one process asks, evaluates and tells ``checkpoint_every``
generations in a row; each generation's batch is split exactly as in shard mode
(``shard_bounds``) and the slices are evaluated on a Dask cluster, then folded in
solution-index order by the same :func:`evocamp.engine.tell`. Results are therefore
bitwise identical to shard mode. Checkpoints are written at segment ends only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import time
from pathlib import Path

from evocamp.engine import evaluate_slice, tell
from evocamp.progress import generation_line
from evocamp.storage import RunState, ShardResult, read_state, shard_bounds, write_state


def _worker_prefix() -> str:
    try:
        from distributed import get_worker

        return f"[{get_worker().address}]"
    except (ImportError, ValueError):
        return "[local]"


def evaluate_on_worker(
    spec: dict, generation: int, shard: int, start: int, stop: int, batch: dict, offset: int, seeds
) -> ShardResult:
    """Dask task: materialise solutions ``start..stop-1`` of a generation from ``batch``
    (the whole batch, or for plain batches the slice that begins at ``offset``),
    evaluate them and log it with the worker's address as prefix."""
    from evocamp.optimizers import optimizer_class, proposal, proposes_in_shards

    began = time.perf_counter()
    cls = optimizer_class(spec)
    solutions, stats = proposal(cls, batch, start - offset, stop - offset)
    result = evaluate_slice(
        spec,
        generation=generation,
        shard=shard,
        start=start,
        solutions=solutions,
        seeds=seeds,
        stats=stats,
        keep_solutions=proposes_in_shards(cls),
    )
    logging.getLogger("evocamp.worker").info(
        "%s generation %d shard %d: solutions %d..%d in %.3f s",
        _worker_prefix(),
        generation,
        shard,
        start,
        stop - 1,
        time.perf_counter() - began,
    )
    return result


def _shard_batches(client, batch: dict, bounds: list[tuple[int, int]]) -> tuple[list, list[int]]:
    """What each task receives of the batch, and the solution index it starts at.

    A plain batch (solutions only) is sliced: each task gets its rows. A compact batch
    (e.g. an ES centre and noise seeds) is scattered once to every worker and each task
    gets a reference to it: the centre crosses the network once per worker, not once
    per offspring.
    """
    if set(batch) == {"solutions"}:
        return [{"solutions": batch["solutions"][a:b]} for a, b in bounds], [a for a, _ in bounds]
    # In a list, the batch is one object whose key is a hash of its content (a dict
    # itself would be scattered under its own keys, "centre" etc., which keep the first
    # generation's data).
    (shared,) = client.scatter([batch], broadcast=True)
    return [shared] * len(bounds), [0] * len(bounds)


#: Modules a LocalCluster's fork server imports once for all its workers.
WORKER_PRELOAD = ["distributed", "numpy", "h5py", "evocamp.engine", "evocamp.domains"]


@contextlib.contextmanager
def dask_client(*, scheduler_file: str | None, workers: int, preload: tuple[str, ...] = ()):
    """A Dask client: to the cluster of ``scheduler_file``, or to a new LocalCluster
    of ``workers`` single-threaded worker processes (closed afterwards).

    The LocalCluster's workers are forked from a fork server that has imported
    :data:`WORKER_PRELOAD` and ``preload`` once, instead of each starting a fresh
    interpreter and importing them: measured with 8 workers on 2 cores (session 3),
    1.2 s to start and 0.06 s to close against 2.1 s and 0.6 s, paid once per segment.
    (Until session 5 distributed replaced the preload list with its own, so only the
    fork server was in effect; with the list in effect the start takes 1.9 s against
    1.7 s on the Intel machine, and no worker imports h5py, evocamp or a surrogate
    library while its first task waits.)
    """
    import multiprocessing

    import dask
    from distributed import Client, LocalCluster
    from distributed.utils import get_mp_context

    if scheduler_file:
        client = Client(scheduler_file=scheduler_file)
        try:
            yield client
        finally:
            client.close()
        return
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        # distributed sets its own preload list on its first use of the context (once
        # per process); ours replaces it afterwards.
        get_mp_context()
    multiprocessing.set_forkserver_preload([*WORKER_PRELOAD, *preload])
    with (
        dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}),
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _configure_worker_logging() -> None:
    logger = logging.getLogger("evocamp.worker")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def run_generations(
    state: RunState, *, until: int, shards: int, client, total: int | None, log=print
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
    client : distributed.Client
        Where the slices are evaluated.
    total : int, optional
        Generations of the run, for the progress line.
    log : callable
        Receives one progress line per generation.
    """
    client.run(_configure_worker_logging)
    while state.generation < until:
        generation = state.generation + 1
        size = len(state.next_seeds)
        bounds = [shard_bounds(size, shards, shard) for shard in range(shards)]
        batches, offsets = _shard_batches(client, state.next_batch, bounds)
        # One client.map call: a single graph update for the whole generation.
        futures = client.map(
            evaluate_on_worker,
            [state.spec] * shards,
            [generation] * shards,
            range(shards),
            [start for start, _ in bounds],
            [stop for _, stop in bounds],
            batches,
            offsets,
            [state.next_seeds[start:stop] for start, stop in bounds],
            pure=False,
        )
        state = tell(state, client.gather(futures))
        log(generation_line(state, total=total))
    return state


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
) -> RunState:
    """Run generations after the checkpoint ``state_path`` up to ``until`` on Dask and
    write the resulting checkpoint to ``output``; ``log`` receives the progress lines.

    The first generation's ``wall_seconds`` counts from this job's start, not from when
    the checkpoint was written: time between segments (waiting for a core or a queue,
    a stopped campaign) is not the run's.
    """
    from evocamp.optimizers import optimizer_class

    started = time.time()
    state = read_state(state_path)
    state = dataclasses.replace(state, finished_at=max(state.finished_at, started))
    preload = tuple(getattr(optimizer_class(state.spec), "shard_modules", ()))
    with dask_client(scheduler_file=scheduler_file, workers=workers, preload=preload) as client:
        state = run_generations(
            state,
            until=until,
            shards=shards,
            client=client,
            total=total,
            log=log,
        )
    began = time.perf_counter()
    write_state(output, state)
    print(
        f"generation {state.generation}: checkpoint written "
        f"({Path(output).stat().st_size / 1e6:.2f} MB in {time.perf_counter() - began:.3f} s)",
        file=sys.stderr,
        flush=True,
    )
    return state
