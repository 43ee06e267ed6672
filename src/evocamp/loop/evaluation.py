"""The shard step: evaluate one shard of a generation's batch.

:func:`evaluate_shard` is the one place a shard is evaluated: the ``evaluate`` step
of shard mode (on the batch stored in a checkpoint), Dask mode's tasks (on the batch
they were sent) and the tests call it. It materialises the shard's solutions from the
batch (a compact batch through the optimizer class's batch format, without building
the optimizer), calls the evaluation function in chunks, checks every output and
names any failure by run, generation, shard and solution index.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.base.errors import EvaluationError
from evocamp.base.lanes import Lane
from evocamp.base.sharding import shard_bounds
from evocamp.catalogue.factory import load_evaluator
from evocamp.files.journal import ShardJournal, journal_key
from evocamp.files.shard import ATTEMPTS_DTYPE, STATUS, ShardResult
from evocamp.loop.outcomes import (
    Outcome,
    log_line,
    outcomes_in_process,
    supervised_outcomes,
)
from evocamp.loop.repeats import repeated
from evocamp.loop.step_settings import StepSettings
from evocamp.model.numerics import environment
from evocamp.model.protocol import call_optimizer
from evocamp.model.run import Run
from evocamp.model.runspec import COMMAND, PLUGIN, run_label, where
from evocamp.tasks.programs import FAILED_ROWS, ProgramCall, program_call


def evaluate_shard(
    run: Run,
    *,
    batch,
    seeds,
    generation: int,
    shard: int,
    shards: int,
    journal: str | Path | None = None,
    lane: Lane | None = None,
) -> ShardResult:
    """Evaluate shard ``shard`` of ``shards`` of a generation's batch.

    Parameters
    ----------
    run : Run
        The run (:func:`~evocamp.catalogue.factory.resolve_run`).
    batch : mapping
        The generation's batch as the optimizer described it (values may be h5py
        datasets, read only where the shard needs them, or
        :class:`~evocamp.base.sharding.Rows` holding only this shard's rows).
    seeds : array-like
        The evaluation seeds of the whole batch (or ``Rows`` holding the shard's).
    generation, shard, shards : int
        Which generation the batch belongs to, and which slice
        (:func:`~evocamp.base.sharding.shard_bounds`) this shard evaluates.
    journal : str or pathlib.Path, optional
        The shard's journal (:func:`~evocamp.files.journal.journal_path`): every
        finished call is journalled there, and the calls a previous attempt of this
        shard journalled are not evaluated again.
    lane : Lane, optional
        A Dask task's lane of its worker (:func:`~evocamp.base.lanes.worker_lane`):
        the shard's calls run there, one at a time (:func:`evaluate_slice`).

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
    return evaluate_slice(
        run,
        generation=generation,
        shard=shard,
        start=start,
        solutions=solutions,
        seeds=np.asarray(seeds[start:stop]),
        stats=stats,
        keep_solutions=batch_kind.proposes_in_shards,
        journal=None if journal is None else (journal, shard, shards),
        lane=lane,
    )


def _as_outputs(returned) -> dict:
    if isinstance(returned, tuple) and len(returned) == 2:
        return {"objective": returned[0], "measures": returned[1]}
    if isinstance(returned, dict):
        return dict(returned)
    raise TypeError(
        "the evaluation function must return a dict with 'objective' and 'measures' "
        f"(or a tuple (objective, measures)), not {type(returned).__name__}"
    )


@dataclass(frozen=True)
class _Call:
    """Where one call of the evaluation function is: solutions ``first..last`` of
    ``generation`` (indices in the generation's batch), evaluated by ``shard`` (in an
    asynchronous run: evaluation ``evaluation``, in ``slot``)."""

    spec: dict
    generation: int
    shard: int | None
    first: int
    last: int
    #: Asynchronous runs: the evaluation id of the call's one solution, and its slot.
    evaluation: int | None = None
    slot: int | None = None
    #: The final re-evaluation: the archive cell of each of the call's solutions.
    cells: tuple[int, ...] | None = None

    def solution(self, offset: int) -> str:
        """Location of solution ``first + offset``."""
        if self.cells is not None:
            return where(self.spec, self.generation, cells=[self.cells[offset]])
        if self.evaluation is not None:
            return where(self.spec, self.generation, evaluation=self.evaluation, slot=self.slot)
        return where(self.spec, self.generation, self.shard, self.first + offset)

    @property
    def size(self) -> int:
        """Solutions of the call."""
        return self.last - self.first + 1

    def program_call(self, *, whole_shard: bool) -> ProgramCall:
        """What a ``type: command`` domain's program needs to know of the call."""
        spec = self.spec
        return program_call(
            run=f"{spec['campaign']}/{run_label(spec)}",
            label=run_label(spec),
            generation=self.generation,
            indices=list(range(self.first, self.last + 1)),
            places=[self.solution(k) for k in range(self.size)],
            whole=self.whole(),
            shard=self.shard,
            evaluation=self.evaluation,
            reevaluation=self.cells is not None,
            whole_shard=whole_shard,
        )

    def whole(self) -> str:
        """Location of the whole call: its solution, or its range of solutions."""
        if self.first == self.last:
            return self.solution(0)
        if self.cells is not None:
            return where(self.spec, self.generation, cells=list(self.cells))
        whole = where(self.spec, self.generation, self.shard, None)
        return f"{whole}, solutions {self.first}..{self.last}"


def _check_outputs(
    outputs: dict, *, call: _Call, measure_dim: int, extra_fields: list, failed=()
) -> dict:
    """Check keys, shapes and finiteness of one call's outputs (but the ``failed``
    rows' finiteness: a program's batch names them, NaN)."""
    count = call.last - call.first + 1
    expected = {"objective": (count,), "measures": (count, measure_dim)}
    expected.update({name: (count,) for name in extra_fields})
    checked = {}
    for name, shape in expected.items():
        if name not in outputs:
            raise EvaluationError(f"{call.whole()}: the result has no '{name}'")
        try:
            values = np.asarray(outputs[name], dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise EvaluationError(f"{call.whole()}: '{name}' is not numeric ({error})") from None
        if values.shape != shape:
            raise EvaluationError(
                f"{call.whole()}: '{name}' has shape {values.shape}, expected {shape}"
            )
        bad = ~np.isfinite(values.reshape(count, -1)).all(axis=1)
        bad[list(failed)] = False
        if bad.any():
            offset = int(np.flatnonzero(bad)[0])
            raise EvaluationError(
                f"{call.solution(offset)}: '{name}' is not finite ({values[offset]})"
            )
        checked[name] = values
    return checked


def simulated_seconds(simulated: dict, seeds: np.ndarray) -> np.ndarray:
    """Simulated evaluation time of each solution (domain key ``simulated_seconds``):
    ``mean`` seconds each (``constant``) or drawn from an exponential distribution with
    that mean from each solution's evaluation seed (``exponential``), so the same
    solution waits the same time on any shard."""
    mean = float(simulated["mean"])
    if simulated["distribution"] == "constant":
        return np.full(len(seeds), mean)
    return np.array(
        [
            np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(1,))).exponential(
                mean
            )
            for seed in seeds
        ]
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
        The shard's journal, the shard and the number of shards (the slice's shard
        file's journal, :func:`evaluate_shard`'s ``journal``; the final
        re-evaluation's shard too).
    lane : Lane, optional
        A Dask task's lane of its worker: the calls run in supervised children with
        the lane's number and GPUs, one at a time (the worker's other lanes are its
        other tasks); ``None``: ``evaluation.concurrency`` lanes at once (shard mode).

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
    size = domain.get("chunk_size") or _default_chunk(domain, count)
    calls = [
        _Call(
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
    evaluator = _ChunkEvaluator(
        load_evaluator(domain),
        domain,
        solutions,
        seeds,
        calls,
        repeats=run.repeats,
        measure_dim=run.measure_dim,
    )
    journalled = journal and ShardJournal(
        journal[0],
        key=journal_key(run.spec, generation, *journal[1:], solutions=solutions, seeds=seeds),
    )
    finished = {k: Outcome(**o) for k, o in journalled.finished.items()} if journalled else {}
    if finished:
        log_line(
            f"{where(spec, generation, shard, None)}: {len(finished)} of {len(calls)} calls "
            "journalled by an earlier attempt, not evaluated again"
        )
    pending = [k for k in range(len(calls)) if k not in finished]
    note = journalled.append if journalled else lambda k, outcome: None
    settings = StepSettings.current()
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


class _ChunkEvaluator:
    """Evaluates call ``k`` of a slice (picklable results only: it may run in a child)."""

    def __init__(
        self,
        evaluator,
        domain: dict,
        solutions,
        seeds,
        calls: list[_Call],
        *,
        repeats: int = 1,
        measure_dim: int,
    ) -> None:
        self.evaluator, self.domain, self.calls = evaluator, domain, calls
        self.solutions, self.seeds, self.repeats = solutions, seeds, repeats
        self.measure_dim = measure_dim
        self.extra_fields = list(domain.get("extra_fields") or [])

    def bounds(self, k: int) -> tuple[int, int]:
        """Rows of call ``k`` in the slice."""
        first = self.calls[0].first
        return self.calls[k].first - first, self.calls[k].last - first + 1

    def __call__(self, k: int) -> Outcome | EvaluationError:
        lo, hi = self.bounds(k)
        began = time.perf_counter()
        try:
            checked = repeated(
                lambda seeds: self._evaluate_once(k, seeds),
                self.seeds[lo:hi],
                repeats=self.repeats,
            )
        except EvaluationError as error:
            return error
        failed = checked.pop(FAILED_ROWS, None)
        return Outcome(checked, time.perf_counter() - began, hi - lo, failed_rows=failed)

    def _evaluate_once(self, k: int, seeds: np.ndarray) -> dict:
        """Call ``k`` with these seeds (one per solution; a repeat's seeds), checked."""
        lo, hi = self.bounds(k)
        outputs = _call(
            self.evaluator, self.domain, self.solutions[lo:hi], seeds, call=self.calls[k]
        )
        failed = outputs.pop(FAILED_ROWS, None)
        if failed and self.repeats > 1:  # the means of a repeated batch need every row
            raise EvaluationError(next(iter(failed.values())))
        if self.domain.get("simulated_seconds"):
            time.sleep(simulated_seconds(self.domain["simulated_seconds"], seeds).sum())
        checked = _check_outputs(
            outputs,
            call=self.calls[k],
            measure_dim=self.measure_dim,
            extra_fields=self.extra_fields,
            failed=failed or (),
        )
        return {**checked, FAILED_ROWS: failed} if failed else checked


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
    return ShardResult(
        generation=generation,
        shard=shard,
        start=start,
        stop=start + count,
        objective=merged["objective"],
        measures=merged["measures"],
        eval_seconds=eval_seconds,
        extra={name: merged[name] for name in run.stored_fields},
        solutions=None if solutions is None else np.asarray(solutions, dtype=np.float64),
        stats=dict(stats or {}),
        numerics=environment(run.packages),
        status=status if status.any() else None,
        messages=messages,
        attempts=attempts if (attempts > 1).any() else None,
        failed_seconds=failed_seconds if failed_seconds.any() else None,
    )


def _call(evaluator, domain: dict, solutions, seeds, *, call: _Call) -> dict:
    """Call the evaluation function once.

    It is never called again after a failure (it may be expensive or have side
    effects): the message names the call's solution, or its range of solutions.
    ``sys.exit`` in it is such a failure too (not a crash of its process).
    """
    hint = "" if call.first == call.last else " (chunk_size 1 names the exact solution)"
    keywords = dict(domain.get("params") or {})
    if domain["type"] == COMMAND:
        keywords["call"] = call.program_call(whole_shard=not domain.get("chunk_size"))
    try:
        return _as_outputs(evaluator(solutions, seeds, **keywords))
    except SystemExit as error:
        raise EvaluationError(
            f"{call.whole()}: the evaluation function exited ({error!r}) instead of "
            f"returning its results{hint}"
        ) from None
    except Exception as error:  # noqa: BLE001 - user code may raise anything
        if domain["type"] == COMMAND and isinstance(error, EvaluationError):
            raise  # a program's failure, which names its solution
        raise EvaluationError(
            f"{call.whole()}: the evaluation function raised {type(error).__name__}: {error}{hint}",
            details="".join(traceback.format_exception(error)),
        ) from None
