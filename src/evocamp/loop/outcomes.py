"""The calls of a shard's slice of the evaluation function and their outcomes: where
each call is (:class:`Call`, what messages name), the call made and its outputs
checked (:class:`ChunkEvaluator`: repeats averaged, a domain's simulated seconds
slept), and each call's checked outputs and seconds, or why it failed, as the
failure policy (``evaluation.*``) makes them.

:func:`outcomes_in_process` evaluates calls in the shard's own process (the first
failure raises); :func:`supervised_outcomes` in supervised children, ``concurrency``
lanes at once, each free lane taking the next call (:mod:`evocamp.base.lanes`),
retrying, discarding or stopping as the policy says, with the same outcomes whatever
the concurrency. Both pass each outcome to ``note`` as it finishes (the shard's
journal). The shard step (:mod:`evocamp.loop.evaluation`) cuts the slice into calls,
loads the evaluation function with the run and reads and writes the journal.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace

import numpy as np

from evocamp.base.errors import EvaluationError, ProgramCrashed
from evocamp.base.lanes import in_lanes, lane_environment
from evocamp.base.seeding import repeat_seeds
from evocamp.base.supervised import Ended, supervised
from evocamp.files.shard import STATUS
from evocamp.loop.repeats import averaged
from evocamp.model.runspec import COMMAND, FailurePolicy, run_label, where
from evocamp.tasks.programs import FAILED_ROWS, ProgramCall, program_call


@dataclass(frozen=True)
class Outcome:
    """One call's checked outputs and seconds, or why it failed (``status`` a
    :data:`~evocamp.files.shard.STATUS` code, ``message`` naming the solution)."""

    outputs: dict | None
    seconds: float
    #: Solutions of the call.
    size: int
    status: int = 0
    message: str = ""
    #: Times the call was made (``on_failure: retry``: 1 + its retries).
    attempts: int = 1
    #: Seconds its failed attempts took (a retried crash, a timeout, a raise).
    failed_seconds: float = 0.0
    #: A program's batch: the solutions (offsets in the call) its results file says
    #: failed, with their messages; the others are evaluated.
    failed_rows: dict | None = None


def outcomes_in_process(evaluator, *, pending: list[int], note) -> dict:
    """The ``pending`` calls evaluated in this process, by index, each passed to
    ``note`` as it finishes: the first failure raises."""
    outcomes = {}
    for k in pending:
        outcome = evaluator(k)
        if isinstance(outcome, EvaluationError):
            raise outcome
        outcomes[k] = outcome
        note(k, outcome)
    return outcomes


def supervised_outcomes(
    evaluator,
    policy: FailurePolicy,
    *,
    pending: list[int],
    note,
    report: bool = True,
    concurrency: int = 1,
    gpus: int = 0,
    lane: int | None = None,
) -> dict:
    """The ``pending`` calls evaluated in supervised children, by index, each passed to
    ``note`` as it finishes, ``concurrency`` lanes at once, each free lane taking the
    next call (:func:`~evocamp.base.lanes.in_lanes`; ``gpus`` each; ``lane``: the calls
    run in this lane of a Dask worker's, its number and GPUs set in the children
    whatever ``concurrency`` and ``gpus`` are); the policy decides what a failed call
    becomes (stop: it raises; else recorded as failed, with a ``(discarded)`` line in
    the log when ``report``). The outcomes, and a failure raised, are those of one
    lane whatever ``concurrency`` is."""
    lock = threading.Lock()  # the lanes' notes, one at a time
    ahead = min(concurrency, len(pending)) <= 1  # one lane: its child is given every call

    def noted(k: int, outcome: Outcome) -> None:
        with lock:
            note(k, outcome)

    def run_lane(j: int, take, outcomes: dict) -> None:
        laned = concurrency > 1 or gpus or lane is not None
        environment = lane_environment((lane or 0) + j, gpus) if laned else None
        _lane_outcomes(
            evaluator,
            policy,
            take,
            outcomes,
            note=noted,
            report=report,
            environment=environment,
            ahead=ahead,
        )

    return in_lanes(run_lane, pending, concurrency)


#: What a lane gives its child instead of a call when it has none left.
_NO_MORE_CALLS = -1
_INDEX = struct.Struct("<q")


def _lane_outcomes(
    evaluator,
    policy: FailurePolicy,
    take,
    outcomes: dict[int, Outcome],
    *,
    note,
    report: bool,
    environment: dict | None,
    ahead: bool,
) -> None:
    """The calls ``take()`` gives (in order) evaluated in supervised children
    (``environment`` set in them), one child until one crashes or overruns; each
    call's outcome put in ``outcomes`` and passed to ``note`` as it comes. A child is
    given its calls through a pipe: the next one as the last comes back, or (``ahead``:
    the only lane) all of them at once."""
    calls = evaluator.calls
    todo = []  # calls taken without an outcome, in order; the first in flight

    def fill() -> None:
        while (ahead or not todo) and (k := take()) is not None:
            todo.append(k)

    fill()
    attempts, lost = 0, 0.0  # the call in flight's failed attempts and their seconds
    while todo:
        read_end, write_end = os.pipe()
        limits = None
        if policy.timeout is not None:
            limits = [policy.timeout * calls[k].size * evaluator.repeats for k in todo]
        try:
            if ahead:  # the child knows its calls as it starts
                task = functools.partial(_call_of, evaluator, tuple(todo))
            else:  # the child is given its first call, and each next one through a pipe
                task = functools.partial(_given_call, evaluator, read_end)
                os.write(write_end, _INDEX.pack(todo[0]))
            children = supervised(
                task,
                len(todo) if ahead else len(calls),
                limits=limits,
                environment=environment,
            )
            with contextlib.closing(children):
                began = time.perf_counter()
                for result in children:
                    if not todo:  # the child was told there are no more calls
                        break
                    k = todo[0]
                    now = time.perf_counter()
                    spent, began = now - began, now
                    if isinstance(result, Ended):
                        attempts, lost = attempts + 1, lost + spent
                        if attempts < policy.attempts():
                            what = f"{calls[k].whole()}: {_what_ended(result, policy)[0]}"
                            _log_retry(what, attempts, policy)
                            break
                        outcome = _ended_outcome(calls[k], result, attempts, policy, report=report)
                    elif isinstance(result, EvaluationError):
                        attempts, lost = attempts + 1, lost + spent
                        crashed = isinstance(result, ProgramCrashed)  # retried as a crash is
                        if crashed and attempts < policy.attempts():
                            _log_retry(str(result), attempts, policy)
                            break
                        status = STATUS["crashed" if crashed else "failed"]
                        outcome = _failed_outcome(
                            result, status, calls[k].size, policy, report=report
                        )
                    else:
                        attempts, outcome = attempts + 1, result
                        for message in (outcome.failed_rows or {}).values():
                            if policy.final_action() == "stop":
                                raise EvaluationError(message)
                            if report:
                                log_discarded(message)
                    outcomes[k] = replace(outcome, attempts=attempts, failed_seconds=lost)
                    note(k, outcomes[k])
                    attempts, lost = 0, 0.0
                    todo.pop(0)
                    if not ahead:
                        fill()
                        if limits is not None:  # supervised reads the next call's limit
                            limits.append(
                                policy.timeout * calls[todo[0]].size * evaluator.repeats
                                if todo
                                else None
                            )
                        os.write(write_end, _INDEX.pack(todo[0] if todo else _NO_MORE_CALLS))
        finally:
            os.close(read_end)
            os.close(write_end)


def _call_of(evaluator, calls: tuple[int, ...], k: int):  # pragma: no cover - in the child
    """The outcome of the ``k``-th of ``calls``."""
    return evaluator(calls[k])


def _given_call(evaluator, read_end: int, _: int):  # pragma: no cover - runs in the child
    """The outcome of the call the lane gives through ``read_end`` (the child ends when
    it is told there is none left)."""
    data = b""
    while len(data) < _INDEX.size:
        data += os.read(read_end, _INDEX.size - len(data))
    (k,) = _INDEX.unpack(data)
    if k == _NO_MORE_CALLS:
        os._exit(0)
    return evaluator(k)


def _ended_outcome(
    call, ended: Ended, attempts: int, policy: FailurePolicy, *, report: bool
) -> Outcome:
    """The outcome of a call whose child crashed or overran (``attempts`` times)."""
    what, status = _what_ended(ended, policy)
    hint = "" if call.size == 1 else " (chunk_size 1 names the exact solution)"
    after = f" ({attempts} attempts)" if attempts > 1 else ""
    error = EvaluationError(f"{call.whole()}: {what}{after}{hint}")
    return _failed_outcome(error, status, call.size, policy, report=report)


def _what_ended(ended: Ended, policy: FailurePolicy) -> tuple[str, int]:
    """What happened to a call whose child ended early, and its status."""
    if ended.timed_out is not None:
        return (
            f"the evaluation ran past evaluation.timeout ({policy.timeout:g} s per solution) "
            "and was killed",
            STATUS["timed_out"],
        )
    if ended.signal is not None:
        return f"the evaluation's process was {ended.reason()}", STATUS["crashed"]
    return f"the evaluation {ended.reason()}", STATUS["crashed"]


def _failed_outcome(
    error: EvaluationError, status: int, size: int, policy: FailurePolicy, *, report: bool
) -> Outcome:
    """A failed call: raised under the ``stop`` action, else recorded as failed (and
    logged, when ``report``)."""
    if policy.final_action() == "stop":
        raise error
    if report:
        log_discarded(str(error))
    return Outcome(None, 0.0, size, status, str(error))


def log_discarded(message: str) -> None:
    """The log line of a failed evaluation the run goes on without (``discard``)."""
    log_line(f"warning: {message} (discarded)")


def log_line(message: str) -> None:
    """A line for the job's log (standard error), prefixed ``evocamp: ``."""
    print(f"evocamp: {message}", file=sys.stderr, flush=True)


def _log_retry(what: str, attempts: int, policy: FailurePolicy) -> None:
    log_line(f"warning: {what}; attempt {attempts + 1} of {policy.attempts()} follows")


@dataclass(frozen=True)
class Call:
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


class ChunkEvaluator:
    """Evaluates call ``k`` of a slice (picklable results only: it may run in a child)."""

    def __init__(
        self,
        evaluator,
        domain: dict,
        solutions,
        seeds,
        calls: list[Call],
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
        seeds = self.seeds[lo:hi]
        try:
            if self.repeats == 1:
                checked = self._evaluate_once(k, seeds, lo=lo, hi=hi)
            else:  # repeat r with word r of each solution's repeat seeds, averaged
                words = repeat_seeds(seeds, self.repeats)
                checked = averaged(
                    [self._evaluate_once(k, column, lo=lo, hi=hi) for column in words.T]
                )
        except EvaluationError as error:
            return error
        failed = checked.pop(FAILED_ROWS, None)
        return Outcome(checked, time.perf_counter() - began, hi - lo, failed_rows=failed)

    def _evaluate_once(self, k: int, seeds: np.ndarray, *, lo: int, hi: int) -> dict:
        """Call ``k`` (rows ``lo..hi-1`` of the slice) with these seeds (one per
        solution; a repeat's seeds), checked."""
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


def _call(evaluator, domain: dict, solutions, seeds, *, call: Call) -> dict:
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


def _as_outputs(returned) -> dict:
    if isinstance(returned, tuple) and len(returned) == 2:
        return {"objective": returned[0], "measures": returned[1]}
    if isinstance(returned, dict):
        return dict(returned)
    raise TypeError(
        "the evaluation function must return a dict with 'objective' and 'measures' "
        f"(or a tuple (objective, measures)), not {type(returned).__name__}"
    )


def _check_outputs(
    outputs: dict, *, call: Call, measure_dim: int, extra_fields: list, failed=()
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
        # Which row is not finite (a program's failed rows are NaN); no values: none.
        if values.size and not np.isfinite(values).all():
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
