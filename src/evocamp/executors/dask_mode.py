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
import multiprocessing
import os
import sys
import time
from pathlib import Path

from evocamp.base.errors import ConfigError, EvaluationError
from evocamp.base.lanes import worker_devices, worker_lane
from evocamp.base.sharding import Rows, shard_bounds
from evocamp.catalogue.factory import resolve_run
from evocamp.files.checkpoint import write_state
from evocamp.files.evaluations import StorageSettings, concatenate, record_window_rows
from evocamp.files.shard import ShardResult
from evocamp.loop.engine import held_batch, tell
from evocamp.loop.evaluation import evaluate_shard
from evocamp.loop.progress import generation_line
from evocamp.loop.state_cache import read_full_state
from evocamp.loop.step_settings import StepSettings
from evocamp.model.layout import RunFolder
from evocamp.model.run import Run
from evocamp.model.runspec import where
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


#: The Dask worker resources an evaluation task asks for when its evaluations need
#: more than a core (``ranks`` of a command domain) or GPUs
#: (``evaluation.gpus_per_evaluation``): workers of an existing cluster declare them
#: (``dask worker --resources "cores=8,GPU=4"``); a LocalCluster's declare them.
CORES, GPUS = "cores", "GPU"


@dataclasses.dataclass(frozen=True)
class DaskResources:
    """What evocamp's evaluation tasks ask of a Dask worker (Dask and asynchronous
    modes): a worker runs ``concurrency`` of them at once (its threads), each
    evaluation ``ranks`` processes with ``gpus`` GPUs of its own."""

    concurrency: int = 1
    ranks: int = 1
    gpus: int = 0

    @classmethod
    def of(cls, run: Run, settings: StepSettings) -> DaskResources:
        """A run's, under the step settings ``settings`` (``evaluation.concurrency``,
        ``evaluation.gpus_per_evaluation``; ``ranks`` is its domain's)."""
        return cls(
            concurrency=settings.concurrency,
            ranks=int(run.spec["domain_spec"].get("ranks") or 1),
            gpus=settings.gpus_per_evaluation,
        )

    def lane_gpus(self) -> int | None:
        """A task's ``gpus`` argument: ``None`` (its calls run as one evaluation at a
        time per worker always did) unless its worker runs several at once or GPUs
        are asked."""
        return self.gpus if self.concurrency > 1 or self.gpus else None

    def task(self) -> dict | None:
        """The resources one task asks for (``None``: none)."""
        asked = {CORES: self.ranks} if self.ranks > 1 else {}
        return {**asked, GPUS: self.gpus} if self.gpus else asked or None

    def worker(self) -> dict | None:
        """The resources a LocalCluster's worker declares: ``concurrency`` tasks'."""
        task = self.task()
        return task and {name: amount * self.concurrency for name, amount in task.items()}


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
    (:class:`~evocamp.base.sharding.Rows`, indexed with the batch's positions). A compact
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
    if client is None:  # evaluated here: nothing to send
        return [batch] * len(bounds)
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


#: Modules a LocalCluster's fork server imports once for all its workers.
WORKER_PRELOAD = ["distributed", "numpy", "h5py", "evocamp.loop.evaluation"]


#: Seconds a segment waits for the scheduler file of ``dask.scheduler_file`` to appear
#: (a scheduler starting beside the campaign), and then for its scheduler to answer.
SCHEDULER_WAIT_SECONDS = 120.0


def existing_cluster(scheduler_file: str, *, where: str, wait: float = SCHEDULER_WAIT_SECONDS):
    """A Dask client to the cluster of ``scheduler_file`` (``dask.scheduler_file``).

    distributed's own client waits for a missing scheduler file forever, so a misspelt
    path or a scheduler that died at its start would hang the segment job until its
    time limit; this one waits ``wait`` seconds for the file, then as long for the
    scheduler to answer, and otherwise stops with one line naming the key and the path.
    """
    from distributed import Client

    path = Path(scheduler_file)
    deadline = time.monotonic() + wait
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    hint = "start the cluster first (dask scheduler --scheduler-file FILE, then its workers)"
    if not path.exists():
        raise ConfigError(
            f"{where}: key 'dask.scheduler_file': no scheduler file at {path} after "
            f"{wait:g} s: {hint}"
        )
    try:
        return Client(scheduler_file=str(path), timeout=wait)
    except (OSError, TimeoutError) as error:
        raise ConfigError(
            f"{where}: key 'dask.scheduler_file': the scheduler that {path} names did not "
            f"answer within {wait:g} s ({error}): {hint}"
        ) from None


@contextlib.contextmanager
def dask_client(
    *,
    scheduler_file: str | None,
    workers: int,
    preload: tuple[str, ...] = (),
    allowed_failures: int | None = None,
    where: str,
    resources: DaskResources | None = None,
):
    """A Dask client: to the cluster of ``scheduler_file``, or to a new LocalCluster
    of ``workers`` worker processes (closed afterwards), each running
    ``resources.concurrency`` tasks at once (default: one) and declaring
    ``resources.worker()``, with GPUs of its own (:func:`local_cluster`).

    The LocalCluster's workers are forked from a fork server that has imported
    :data:`WORKER_PRELOAD` and ``preload`` once, instead of each starting a fresh
    interpreter and importing them: measured with 8 workers on 2 cores (session 3),
    1.2 s to start and 0.06 s to close against 2.1 s and 0.6 s, paid once per segment.
    (Until session 5 distributed replaced the preload list with its own, so only the
    fork server was in effect; with the list in effect the start takes 1.9 s against
    1.7 s on the Intel machine, and no worker imports h5py, evocamp or a surrogate
    library while its first task waits.)

    ``allowed_failures``: times a task is started again after the worker running it
    died (``distributed.scheduler.allowed-failures``; ``None``: Dask's default, 3); a
    LocalCluster's only (an existing cluster's scheduler has its own setting). A
    LocalCluster whose worker process dies while it starts is started again as often
    (:func:`local_cluster`); ``where`` (e.g. ``run me/sphere/seed0, generation 3``)
    begins the message when it never starts.
    """
    import dask
    from distributed import Client
    from distributed.utils import get_mp_context

    if scheduler_file:
        client = existing_cluster(scheduler_file, where=where)
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
    settings = {"distributed.worker.multiprocessing-method": "forkserver"}
    if allowed_failures is not None:
        settings["distributed.scheduler.allowed-failures"] = allowed_failures
    with (
        dask.config.set(settings),
        local_cluster(
            workers=workers,
            attempts=(DASK_ALLOWED_FAILURES if allowed_failures is None else allowed_failures) + 1,
            where=where,
            resources=resources or DaskResources(),
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


#: Dask's default ``distributed.scheduler.allowed-failures``.
DASK_ALLOWED_FAILURES = 3


def local_cluster(
    *, workers: int, attempts: int, where: str, resources: DaskResources | None = None
):
    """A LocalCluster of ``workers`` worker processes, started again (at most
    ``attempts`` times in all) when a worker process dies while it starts.

    Each worker has ``resources.concurrency`` threads (one task each) and declares
    ``resources.worker()``; when GPUs are asked, worker ``w`` sees its own
    ``concurrency x gpus`` of the job's (``CUDA_VISIBLE_DEVICES``:
    :func:`~evocamp.base.lanes.worker_devices`), which its tasks' lanes share out.

    A worker killed while the cluster starts (by the out-of-memory killer, or by hand)
    fails the whole start (distributed's ``RuntimeError: Nanny failed to start.``); a
    moment later the cluster would have started a new one and Dask would have run its
    tasks again, so the start is retried as often as a task would be.

    Raises
    ------
    EvaluationError
        One line beginning with ``where`` when every attempt failed, with the last
        cause (a worker's own error, e.g. a failed import, is in the log above it).
    """
    from distributed import LocalCluster

    resources = resources or DaskResources()
    options = {}
    if resources.gpus:
        per_worker = resources.concurrency * resources.gpus
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = [worker_devices(w, per_worker, visible) for w in range(workers)]
        options["worker_class"] = functools.partial(_nanny_seeing, devices=devices)
    for _ in range(attempts):
        try:
            return LocalCluster(
                n_workers=workers,
                threads_per_worker=resources.concurrency,
                processes=True,
                dashboard_address=None,
                resources=resources.worker(),
                **options,
            )
        except RuntimeError as error:
            if not str(error).endswith("failed to start."):
                raise
            cause = f"{error} {error.__cause__ or ''}".strip()
    raise EvaluationError(
        f"{where}: the Dask LocalCluster of {workers} worker(s) failed to start "
        f"{attempts} times (the last: {cause}): a worker process died while starting "
        "(killed? out of memory? its own error, if any, is in this log above)"
    )


def _nanny_seeing(*args, name, devices: list[str], **options):
    """A LocalCluster's worker ``name`` (a nanny) whose process sees GPUs
    ``devices[name]``."""
    from distributed import Nanny

    env = {**(options.pop("env", None) or {}), "CUDA_VISIBLE_DEVICES": devices[name]}
    return Nanny(*args, name=name, env=env, **options)


def cluster_workers(client) -> int:
    """Workers of the cluster a client is connected to (at least 1)."""
    return max(1, len(client.scheduler_info().get("workers", {})))


def configure_worker_logging() -> None:
    """Set up this worker process's logging for evocamp's tasks (once per process; each
    task calls it first, so it holds on any cluster and in a worker started again).

    The ``evocamp.worker`` logger writes the task lines; distributed's own "Compute
    Failed" block (its worker logs the task, the exception and its traceback when a
    task raises) is dropped for evocamp's tasks, whose error reaches the segment and is
    written there as one line naming where it happened (other tasks' blocks stay).
    """
    logger = logging.getLogger("evocamp.worker")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    worker = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _EvocampTaskFailures) for f in worker.filters):
        worker.addFilter(_EvocampTaskFailures())


#: The functions of evocamp's Dask tasks, as a failed task's description names them.
TASK_FUNCTIONS = ("evaluate_on_worker", "evaluate_on_slot")


class _EvocampTaskFailures(logging.Filter):
    """Drops distributed's "Compute Failed" record of a task of evocamp's."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Compute Failed"):
            return True
        described = " ".join(str(arg) for arg in record.args or ())
        return not any(name in described for name in TASK_FUNCTIONS)


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
        Receives one progress line per generation.
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
    while state.generation < until:
        generation = state.generation + 1
        size = len(state.next_seeds)
        bounds = [shard_bounds(size, shards, shard) for shard in range(shards)]
        batches = _shard_batches(client, state, bounds, run=run)
        seeds = [Rows(state.next_seeds[a:b], offset=a, length=size) for a, b in bounds]
        if client is None:
            results = [
                evaluate_shard(
                    run, batch=batch, seeds=rows, generation=generation, shard=k, shards=shards
                )
                for k, (batch, rows) in enumerate(zip(batches, seeds, strict=True))
            ]
        else:
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
        log(generation_line(state, total=total))
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
