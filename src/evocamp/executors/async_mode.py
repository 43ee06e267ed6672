"""Asynchronous mode on Dask: one job runs a segment of an asynchronous run.

The job keeps the run's slots busy on a Dask cluster (a LocalCluster per segment, or
an existing one through its scheduler file, as Dask mode): every evaluation in flight
is one Dask task (a decentralised worker's task fits its surrogate and proposes
first). :class:`~evocamp.loop.asynchronous.AsynchronousLoop` decides which completion
is told next; every completion is appended to the run's completion log as it
arrives. At the segment's end, the evaluations still in flight are waited for and
logged as they finish (the next segment tells them from the log without evaluating
them again: each evaluation runs once), and the state with the proposals in flight is
written.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from evocamp.base.errors import ConfigError
from evocamp.base.lanes import worker_lane
from evocamp.catalogue.factory import resolve_run
from evocamp.executors.dask_cluster import (
    DaskResources,
    cluster_workers,
    configure_worker_logging,
    dask_client,
)
from evocamp.executors.dask_mode import gathered, lost_worker_retries
from evocamp.files.checkpoint import write_state
from evocamp.files.completions import Completion, CompletionLog, read_completions
from evocamp.files.evaluations import StorageSettings, record_window_rows
from evocamp.loop.asynchronous import (
    AsynchronousLoop,
    Resume,
    asynchronous_settings,
    completion_rows,
    completions_per_generation,
)
from evocamp.loop.in_flight import InFlight, decode_in_flight, evaluate_in_flight
from evocamp.loop.outcomes import log_discarded
from evocamp.loop.progress import generation_line
from evocamp.loop.state_cache import read_full_state
from evocamp.loop.step_settings import StepSettings
from evocamp.model.layout import RunFolder
from evocamp.model.runspec import run_label, where
from evocamp.model.state import RunState


def evaluate_on_slot(spec: dict, entry: InFlight, *, gpus: int | None = None) -> Completion:
    """Dask task: evaluate one evaluation in flight
    (:func:`~evocamp.loop.in_flight.evaluate_in_flight`) in a worker whose logging
    is evocamp's (:func:`~evocamp.executors.dask_cluster.configure_worker_logging`);
    ``gpus`` (not ``None``) in a lane of the worker of its own with that many GPUs
    (:meth:`~evocamp.executors.dask_cluster.DaskResources.lane_gpus`)."""
    configure_worker_logging()
    if gpus is None:
        return evaluate_in_flight(spec, entry)
    with worker_lane(gpus) as lane:
        return evaluate_in_flight(spec, entry, lane=lane)


class DaskSlots:
    """Evaluations in flight as Dask tasks, collected as they finish."""

    def __init__(self, client, spec: dict, *, resources: DaskResources | None = None) -> None:
        from distributed import as_completed

        self.client = client
        self.spec = spec
        self.resources = resources or DaskResources()
        self.running = {}
        #: Where each running task's evaluation is (``where``), by task key.
        self.places = {}
        self.finished = as_completed()

    def submit(self, entry: InFlight) -> None:
        """Start evaluating ``entry`` on the cluster."""
        future = self.client.submit(
            evaluate_on_slot,
            self.spec,
            entry,
            pure=False,
            resources=self.resources.task(),
            gpus=self.resources.lane_gpus(),
        )
        self.running[future.key] = future
        self.places[future.key] = where(self.spec, 0, evaluation=entry.evaluation, slot=entry.slot)
        self.finished.add(future)

    def wait(self, evaluation: int | None) -> Completion:
        """The next evaluation to finish (whichever; the loop keeps early ones)."""
        future = next(self.finished)
        del self.running[future.key]
        # An evaluation's failure is raised here, with its message; workers lost running it
        # too many times, as one line naming the evaluation.
        place = self.places.pop(future.key)
        (completion,) = gathered(self.client, [future], where=lambda _: place)
        return completion

    def finish(self, record) -> int:
        """Wait for the evaluations still in flight and log each as it finishes (in
        arrival order, as the real clock tells them); returns how many were logged.

        The next segment tells them from the log, so none is evaluated twice (a
        LocalCluster waits for its running tasks as it closes anyway). One that raised
        (``on_failure: stop``) or whose workers died is not logged: the next segment
        evaluates it again and stops there with its message.
        """
        logged = 0
        for future in self.finished:
            del self.running[future.key]
            self.places.pop(future.key)
            if future.status == "finished":
                record(future.result())
                logged += 1
        return logged


def _discarded_line(completion: Completion) -> None:
    """The log line of a failed completion, written as it is told (so once per segment
    that tells it: a segment killed and run again tells it again, and says so again)."""
    log_discarded(completion.message)


def run_async_segment(
    *,
    state_path: str | Path,
    until: int,
    output: str | Path,
    completions: str | Path,
    scheduler_file: str | None,
    workers: int,
    total: int | None,
    log=print,
    storage: StorageSettings | None = None,
    full_every: int = 1,
) -> RunState:
    """Run an asynchronous run from the checkpoint ``state_path`` until generation
    ``until`` is complete, on Dask, and write the resulting state to ``output``. The
    completions told, when the run keeps its evaluations (``evaluations``), are recorded
    first in the run's evaluation window file named after ``until``, as Dask mode does.

    Parameters
    ----------
    state_path, output : str or Path
        The state to continue from and the one to write.
    until : int
        The last generation (``generation_size`` completions each) to complete.
    completions : str or Path
        The run's completion log (read back on resume, appended to).
    scheduler_file : str, optional
        An existing Dask cluster; ``None`` starts a LocalCluster of ``workers``.
    workers : int
        LocalCluster workers.
    total : int, optional
        Generations of the run, for the progress lines.
    log : callable
        Receives one progress line per generation.
    storage : StorageSettings, optional
        Which completions to keep as evaluation rows (default: the defaults).
    full_every : int
        ``checkpoint_full_every``: the written state's archive may be a delta of the
        previous kept checkpoint's (:mod:`evocamp.files.kept_archive`).
    """
    started = time.time()
    state = read_full_state(state_path)
    settings = asynchronous_settings(state.spec)
    if settings is None:
        raise ConfigError(
            f"run {run_label(state.spec)} is not asynchronous (its checkpoint {state_path} "
            "was written in another mode); its campaign's mode must stay what it was"
        )
    state = dataclasses.replace(state, finished_at=max(state.finished_at, started))
    told = decode_in_flight(state.next_batch, state.next_seeds).told
    resume = Resume.from_log(read_completions(completions), told=told, spec=state.spec)
    run = resolve_run(state.spec)
    resources = DaskResources.of(run, StepSettings.current())
    with (
        dask_client(
            scheduler_file=scheduler_file,
            workers=workers,
            preload=run.batch_format.shard_modules,
            allowed_failures=lost_worker_retries(run),
            where=f"run {run_label(state.spec)}",
            resources=resources,
        ) as client,
        CompletionLog(completions) as completion_log,
    ):
        slots = DaskSlots(client, state.spec, resources=resources)
        loop = AsynchronousLoop(
            state,
            resume=resume,
            submit=slots.submit,
            wait=slots.wait,
            record=completion_log.append,
            workers=cluster_workers(client) if scheduler_file else workers * resources.concurrency,
            discarded=_discarded_line,
        )
        state = loop.run(until=until, on_generation=lambda s: log(generation_line(s, total=total)))
        beyond = slots.finish(completion_log.append)
    kept = (storage or StorageSettings()).for_run(
        run, generation_size=completions_per_generation(state.spec), total=total
    )
    rows = completion_rows(run, loop.told, storage=kept) if kept else None
    if rows is not None:
        record_window_rows(
            RunFolder.holding(output),
            rows,
            spec=state.spec,
            generation=state.generation,
            total=total,
        )
    began = time.perf_counter()
    write_state(output, state, run=run, full_every=full_every)
    print(
        f"generation {state.generation}: {beyond} completions beyond it logged for the next "
        f"segment; checkpoint written ({Path(output).stat().st_size / 1e6:.2f} MB in "
        f"{time.perf_counter() - began:.3f} s)",
        file=sys.stderr,
        flush=True,
    )
    return state
