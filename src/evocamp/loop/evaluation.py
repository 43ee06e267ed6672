"""The shard step: evaluate one shard of a generation's batch.

:func:`evaluate_step` is shard mode's ``evaluate`` command from end to end: the
checkpoint's batch opened (its slice only, from the node-local cache where the tell
left it), the shard evaluated, its file written and its journal removed.
:func:`evaluate_shard` is the one place a shard is evaluated: the ``evaluate`` step
of shard mode (on the batch stored in a checkpoint), Dask mode's tasks (on the batch
they were sent) and the tests call it. It materialises the shard's solutions from the
batch (a compact batch through the optimizer class's batch format, without building
the optimizer), cuts the slice into calls of the evaluation function (chunks),
journals every finished call and makes the shard's result; the calls themselves, their
checked outputs and failures named by run, generation, shard and solution index are
:mod:`evocamp.loop.outcomes`'s.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from evocamp.base.lanes import Lane
from evocamp.catalogue.factory import load_evaluator
from evocamp.files.journal import ShardJournal, journal_key, journal_path, remove_journal
from evocamp.files.shard import ATTEMPTS_DTYPE, STATUS, ShardResult, write_shard
from evocamp.loop.fold import note_numerics
from evocamp.loop.outcomes import (
    Call,
    ChunkEvaluator,
    Outcome,
    log_line,
    outcomes_in_process,
    supervised_outcomes,
)
from evocamp.loop.state_cache import shard_batch
from evocamp.loop.step_settings import StepSettings
from evocamp.model.numerics import environment
from evocamp.model.protocol import call_optimizer, shard_bounds
from evocamp.model.runspec import COMMAND, PLUGIN, Run, where


def evaluate_step(
    *,
    state: str | Path,
    shard: int,
    shards: int,
    output: str | Path,
    settings: StepSettings | None = None,
) -> None:
    """The ``evaluate`` step (``python -m evocamp evaluate``, one of
    :mod:`evocamp.executors.steps`' step commands): evaluate one shard of the batch
    stored in a checkpoint (reading only its slice:
    from the node-local cache when the tell that wrote the checkpoint ran on this node,
    :func:`~evocamp.loop.state_cache.shard_batch`), journalling every finished call
    beside ``output`` (:mod:`evocamp.files.journal`): a rerun of a killed shard
    evaluates only the calls that are missing. ``settings``: the step settings the
    command read (its evaluations at once and their GPUs; ``None``: this process's,
    :meth:`~evocamp.loop.step_settings.StepSettings.current`)."""
    settings = settings if settings is not None else StepSettings.current()
    opened = shard_batch(state, programs=settings.programs)
    with opened as (run, generation, batch, seeds, numerics):
        result = evaluate_shard(
            run,
            batch=batch,
            seeds=seeds,
            generation=generation,
            shard=shard,
            shards=shards,
            shard_file=output,
            settings=settings,
        )
    # A warning in this shard's log when it runs under another kernel than the run so far
    # (the tell notes the shard's environment in the run's records).
    note_numerics(run.spec, numerics, step="evaluate", generation=generation)
    write_shard(output, result)
    remove_journal(output)  # a finished shard leaves no journal
    print(
        f"generation {result.generation} shard {shard}/{shards}: solutions "
        f"{result.start}..{result.stop - 1} evaluated in {result.eval_seconds.sum():.3f} s",
        file=sys.stderr,
        flush=True,
    )


def evaluate_shard(
    run: Run,
    *,
    batch,
    seeds,
    generation: int,
    shard: int,
    shards: int,
    shard_file: str | Path | None = None,
    lane: Lane | None = None,
    settings: StepSettings | None = None,
) -> ShardResult:
    """Evaluate shard ``shard`` of ``shards`` of a generation's batch.

    Parameters
    ----------
    run : Run
        The run (:func:`~evocamp.catalogue.factory.resolve_run`).
    batch : mapping
        The generation's batch as the optimizer described it (values may be h5py
        datasets, read only where the shard needs them, or
        :class:`~evocamp.base.shard_views.Rows` holding only this shard's rows).
    seeds : array-like
        The evaluation seeds of the whole batch (or ``Rows`` holding the shard's).
    generation, shard, shards : int
        Which generation the batch belongs to, and which slice
        (:func:`~evocamp.model.protocol.shard_bounds`) this shard evaluates.
    shard_file : str or pathlib.Path, optional
        The shard's file: every finished call is journalled beside it
        (:func:`~evocamp.files.journal.journal_path`), and the calls a previous
        attempt of this shard journalled are not evaluated again.
    lane : Lane, optional
        A Dask task's lane of its worker (:func:`~evocamp.base.lanes.worker_lane`):
        the shard's calls run there, one at a time (:func:`evaluate_slice`).
    settings : StepSettings, optional
        The step's settings, as its command read them (:func:`evaluate_slice`).

    Raises
    ------
    EvaluationError
        When the evaluation function raises or returns wrong shapes or non-finite
        values (the message names run, generation, shard and solution).
    OptimizerError
        When a plugin's batch format fails to make the shard's solutions.
    """
    start, stop = shard_bounds(len(seeds), shards, shard)
    batch_kind = run.batch_format
    if run.plugin:  # a user's batch format: call_optimizer names its failure
        solutions, stats = call_optimizer(
            run.spec,
            generation,
            f"{batch_kind.name}.solutions",
            batch_kind.materialise,
            batch,
            start,
            stop,
            shard=shard,
        )
    else:  # evocamp's own, called directly (as call_optimizer calls built-ins)
        solutions, stats = batch_kind.materialise(batch, start, stop)
    return evaluate_slice(
        run,
        generation=generation,
        shard=shard,
        start=start,
        solutions=solutions,
        seeds=np.asarray(seeds[start:stop]),
        stats=stats,
        keep_solutions=batch_kind.proposes_in_shards,
        journal=None if shard_file is None else (shard_file, shard, shards),
        lane=lane,
        settings=settings,
    )


def evaluate_slice(
    run: Run,
    *,
    generation: int,
    shard: int | None,
    start: int,
    solutions: np.ndarray,
    seeds: np.ndarray,
    stats: dict | None = None,
    keep_solutions: bool = False,
    evaluation: int | None = None,
    slot: int | None = None,
    cells: np.ndarray | None = None,
    journal: tuple[str | Path, int, int] | None = None,
    lane: Lane | None = None,
    settings: StepSettings | None = None,
) -> ShardResult:
    """Evaluate a contiguous slice of a generation's batch.

    Parameters
    ----------
    run : Run
        The run (its spec's ``domain_spec`` names the evaluation function).
    generation, shard, start : int
        Where the slice is: ``solutions[k]`` is solution ``start + k`` of the batch
        (``shard`` ``None`` in an asynchronous run, which has slots, not shards).
    solutions, seeds : numpy.ndarray
        The slice and its evaluation seeds.
    stats : dict, optional
        Seconds the shard spent making its solutions, kept with the results.
    keep_solutions : bool
        Keep the solutions with the results (the shard proposed them).
    evaluation, slot : int, optional
        Asynchronous runs: the id of the slice's one evaluation and the slot that runs
        it (messages name them instead of generation, shard and index).
    cells : numpy.ndarray, optional
        The final re-evaluation: the archive cell of each solution of the slice
        (messages name the elites by their cells instead of shard and index).
    journal : tuple, optional
        The shard file beside which the slice's calls are journalled
        (:func:`~evocamp.files.journal.journal_path`), the shard and the number of
        shards (:func:`evaluate_shard`'s ``shard_file``; the final re-evaluation's
        shard too).
    lane : Lane, optional
        A Dask task's lane of its worker: the calls run in supervised children with
        the lane's number and GPUs, one at a time (the worker's other lanes are its
        other tasks); ``None``: ``evaluation.concurrency`` lanes at once (shard mode).
    settings : StepSettings, optional
        The step settings, as the step's command read them (``evaluation.concurrency``,
        ``evaluation.gpus_per_evaluation``); ``None``: this process's
        (:meth:`~evocamp.loop.step_settings.StepSettings.current`).

    Raises
    ------
    EvaluationError
        When the function raises or returns wrong shapes or non-finite values; the
        message names run, generation, shard and the solution's index in the batch
        (or the call's range of solutions when ``chunk_size`` > 1).
    """
    spec, domain = run.spec, run.spec["domain_spec"]
    count = len(solutions)
    if count == 0:
        raise ValueError("a shard holds at least one solution (shards <= batch size)")
    # In the order a reader follows: the step's settings, the function, the journal,
    # then the calls, each module entered once (docs/architecture.md, "A shard's walk").
    # The shard command passes the settings its command read; the other callers (Dask
    # tasks, the re-evaluation) read this process's.
    settings = settings if settings is not None else StepSettings.current()
    function = (
        run.evaluator
        if run.evaluator is not None
        else load_evaluator(domain, local=settings.programs.get(spec["domain"]))
    )
    journalled = journal and ShardJournal(
        journal_path(journal[0]),
        key=journal_key(run.spec, generation, *journal[1:], solutions=solutions, seeds=seeds),
    )
    size = domain.get("chunk_size") or _default_chunk(domain, count)
    calls = [
        Call(
            spec,
            generation,
            shard,
            start + lo,
            start + min(lo + size, count) - 1,
            evaluation,
            slot,
            None if cells is None else tuple(int(cell) for cell in cells[lo : lo + size]),
        )
        for lo in range(0, count, size)
    ]
    evaluator = ChunkEvaluator(
        function,
        domain,
        solutions,
        seeds,
        calls,
        repeats=run.repeats,
        measure_dim=run.measure_dim,
    )
    finished = {k: Outcome(**o) for k, o in journalled.finished.items()} if journalled else {}
    if finished:
        log_line(
            f"{where(spec, generation, shard, None)}: {len(finished)} of {len(calls)} calls "
            "journalled by an earlier attempt, not evaluated again"
        )
    pending = [k for k in range(len(calls)) if k not in finished]
    note = journalled.append if journalled else lambda k, outcome: None
    concurrency, gpus, number = settings.concurrency, settings.gpus_per_evaluation, None
    if lane is not None:  # a Dask worker's evaluations at once are its tasks
        concurrency, gpus, number = 1, lane.gpus, lane.number
    try:
        # An asynchronous evaluation's failure is logged by the segment that tells it
        # (AsynchronousLoop's `discarded`), not here where it ran.
        finished.update(
            supervised_outcomes(
                evaluator,
                run.failure_policy,
                pending=pending,
                note=note,
                report=evaluation is None,
                concurrency=concurrency,
                gpus=gpus,
                lane=number,
            )
            if isolated(run) or concurrency > 1 or gpus or lane is not None
            else outcomes_in_process(evaluator, pending=pending, note=note)
        )
    finally:
        if journalled:
            journalled.close()
    outcomes = [finished[k] for k in range(len(calls))]
    return _shard_result(
        run,
        outcomes,
        generation=generation,
        shard=shard,
        start=start,
        count=count,
        solutions=solutions if keep_solutions else None,
        stats=stats,
    )


def _default_chunk(domain: dict, count: int) -> int:
    """Solutions per call without ``chunk_size``: one for a user's function and a
    program (a batch program: the whole slice), the whole slice for built-ins."""
    if domain["type"] == COMMAND:
        return count if domain.get("batch") else 1
    return 1 if domain["type"] == PLUGIN else count


def isolated(run: Run) -> bool:
    """Whether the run's evaluations run in a supervised child process
    (:mod:`evocamp.base.supervised`): always for a user's evaluation function and a
    program (a crash then names its solution), and for built-in domains when a time
    limit or a failure policy other than ``stop`` asks for it."""
    policy = run.failure_policy
    return (
        run.spec["domain_spec"]["type"] in (PLUGIN, COMMAND)
        or policy.timeout is not None
        or policy.on_failure != "stop"
    )


def _shard_result(
    run: Run,
    outcomes: list[Outcome],
    *,
    generation: int,
    shard: int | None,
    start: int,
    count: int,
    solutions,
    stats: dict | None,
) -> ShardResult:
    """The slice's results from its calls' outcomes (a failed call's rows NaN)."""
    names = {"objective": (), "measures": (run.measure_dim,)}
    names.update({name: () for name in run.stored_fields})
    columns = _whole_slice(outcomes, names, count=count) or _merged(
        outcomes, names, start=start, count=count
    )
    merged = columns["outputs"]
    return ShardResult(
        generation=generation,
        shard=shard,
        start=start,
        stop=start + count,
        objective=merged["objective"],
        measures=merged["measures"],
        eval_seconds=columns["eval_seconds"],
        extra={name: merged[name] for name in run.stored_fields},
        solutions=None if solutions is None else np.asarray(solutions, dtype=np.float64),
        stats=dict(stats or {}),
        numerics=environment(run.packages),
        status=columns["status"],
        messages=columns["messages"],
        attempts=columns["attempts"],
        failed_seconds=columns["failed_seconds"],
    )


def _merged(outcomes: list[Outcome], names: dict, *, start: int, count: int) -> dict:
    """The shard result's columns from its calls' outcomes, in order: ``outputs`` (the
    ``names`` of ``(count, *shape)`` each, a failed call's rows NaN), ``eval_seconds``,
    ``status``, ``messages``, ``attempts``, ``failed_seconds`` (``None``: 0 failed, 1
    attempt each, no failed seconds)."""
    merged = {name: np.full((count, *shape), np.nan) for name, shape in names.items()}
    eval_seconds, failed_seconds = np.zeros(count), np.zeros(count)
    status = np.zeros(count, dtype=np.uint8)
    attempts = np.ones(count, dtype=ATTEMPTS_DTYPE)
    messages = {}
    row = 0
    for outcome in outcomes:
        size = outcome.size
        attempts[row : row + size] = outcome.attempts
        failed_seconds[row : row + size] = outcome.failed_seconds / size
        if outcome.outputs is None:
            status[row : row + size] = outcome.status
            messages.update({start + row + i: outcome.message for i in range(size)})
        else:
            for name, values in outcome.outputs.items():
                merged[name][row : row + size] = values
            eval_seconds[row : row + size] = outcome.seconds / size
            for offset, message in (outcome.failed_rows or {}).items():
                status[row + offset] = STATUS["failed"]
                messages[start + row + offset] = message
                eval_seconds[row + offset] = 0.0
        row += size
    return {
        "outputs": merged,
        "eval_seconds": eval_seconds,
        "status": status if status.any() else None,
        "messages": messages,
        "attempts": attempts if (attempts > 1).any() else None,
        "failed_seconds": failed_seconds if failed_seconds.any() else None,
    }


def _whole_slice(outcomes: list[Outcome], names: dict, *, count: int) -> dict | None:
    """:func:`_merged`'s columns of a slice evaluated by one call with no failed row (a
    built-in domain's shard, as a Dask mode segment evaluating in its own process makes
    every generation), its checked outputs taken as they are, without copies; ``None``
    for any other slice."""
    if len(outcomes) != 1 or outcomes[0].outputs is None or outcomes[0].failed_rows:
        return None
    (outcome,) = outcomes
    outputs = {}
    for name, shape in names.items():
        values = outcome.outputs.get(name)
        if values is None or values.dtype != np.float64 or values.shape != (count, *shape):
            return None
        outputs[name] = values
    failed_seconds = outcome.failed_seconds / count
    return {
        "outputs": outputs,
        "eval_seconds": np.full(count, outcome.seconds / count),
        "status": None,
        "messages": {},
        "attempts": (
            np.full(count, outcome.attempts, dtype=ATTEMPTS_DTYPE) if outcome.attempts > 1 else None
        ),
        "failed_seconds": np.full(count, failed_seconds) if failed_seconds else None,
    }
