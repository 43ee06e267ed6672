"""Dask clusters for evocamp's tasks: the client of an existing cluster
(``dask.scheduler_file``) or of a LocalCluster started through one fork server, the
worker resources evaluation tasks ask for and a LocalCluster's workers declare
(:class:`DaskResources`, Dask and asynchronous modes), and the workers' logging. The
segments that use them are :mod:`evocamp.executors.dask_mode`'s and
:mod:`evocamp.executors.async_mode`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import multiprocessing
import os
import time
from pathlib import Path

from evocamp.base.errors import ConfigError, EvaluationError
from evocamp.base.lanes import worker_devices
from evocamp.loop.step_settings import StepSettings
from evocamp.model.runspec import Run

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
