"""The outcomes of a shard's calls of the evaluation function: each call's checked
outputs and seconds, or why it failed, as the failure policy (``evaluation.*``) makes
them.

:func:`outcomes_in_process` evaluates calls in the shard's own process (the first
failure raises); :func:`supervised_outcomes` in supervised children, ``concurrency``
lanes at once, each free lane taking the next call (:mod:`evocamp.base.lanes`),
retrying, discarding or stopping as the policy says, with the same outcomes whatever
the concurrency. Both pass each outcome to ``note`` as it finishes (the shard's
journal). The calls and the evaluator are the
shard step's (:mod:`evocamp.loop.evaluation`); what is used of them here is a call's
``whole()`` and ``size`` and the evaluator's ``calls``, ``repeats`` and ``evaluator(k)``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import sys
import threading
import time
from dataclasses import dataclass, replace

from evocamp.base.errors import EvaluationError, ProgramCrashed
from evocamp.base.lanes import in_lanes, lane_environment
from evocamp.base.supervised import Ended, supervised
from evocamp.files.shard import STATUS
from evocamp.model.runspec import FailurePolicy


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
