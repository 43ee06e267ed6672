"""Asynchronous evaluation: no generation barrier, and still reproducible.

A run keeps ``slots`` evaluations in flight. When one finishes it is logged
(:mod:`evocamp.files.completions`), told to the optimizer (``tell_async``), and its
slot at once gets a new proposal (``ask_async``), numbered by the next evaluation id.
A *generation* is as many consecutive completions as a synchronous generation has
solutions (:func:`completions_per_generation`): metrics rows, checkpoints
(every ``checkpoint_every`` generations) and ``generations`` count them, so curves
line up with synchronous runs.

Which completion is told next:

- **virtual clock** (the default): evaluation ``e`` starts at the virtual time its
  slot was freed and lasts a duration drawn from its evaluation seed (the domain's
  ``simulated_seconds``, else ``asynchronous.virtual_seconds``); completions are told
  in order of virtual finish time, ties by evaluation id. The run is a pure function
  of configuration and seed: identical on any executor, with any number of real
  workers, and after any kill.
- **real clock**: completions are told in the order they arrive; the completion log
  records that order, so a resumed run and a replay (``evocamp replay``) follow it.

**Proposals ahead** (``asynchronous.propose_ahead``, off by default): every slot holds
one proposal *queued* besides its evaluation in flight. When evaluation ``e`` starts on
slot ``w``, the optimizer is asked at once for ``w``'s next proposal, from the history
told until then; a decentralised worker makes that proposal (fits and refines) while it
evaluates ``e`` (:func:`~evocamp.loop.in_flight.evaluate_in_flight`), so a freed slot
starts its queued proposal at once and never waits for a fit. What a proposal saw is
still a pure function of the completion log (the completions told before its slot's
previous evaluation started), so runs stay reproducible under the virtual clock, after
kills and in ``evocamp replay``; the cost is staleness: a proposal misses the
completions told while its slot's previous evaluation ran.

A resume reads the completions logged since the checkpoint back (:class:`Resume`)
instead of evaluating them again. The state between segments is a
:class:`~evocamp.model.state.RunState` whose ``next_batch`` holds the proposals
in flight (:func:`~evocamp.loop.in_flight.encode_in_flight`), so keep, finalise and
status work unchanged.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass

import numpy as np

from evocamp.base.errors import CorruptFileError, EvocampError
from evocamp.base.seeding import asynchronous_evaluation_seeds
from evocamp.catalogue.algorithms import ALGORITHMS
from evocamp.catalogue.factory import resolve_run
from evocamp.files.completions import Completion
from evocamp.files.evaluations import EvaluationRows, StorageSettings
from evocamp.files.shard import ATTEMPTS_DTYPE
from evocamp.loop.engine import initialise
from evocamp.loop.fold import Evaluated, close_generation, fold_evaluations
from evocamp.loop.in_flight import (
    InFlight,
    Standing,
    decode_in_flight,
    encode_in_flight,
    evaluate_in_flight,
    proposes_ahead,
    with_pending,
)
from evocamp.model.metrics import SHARD_STATS
from evocamp.model.protocol import call_method, checked_proposals
from evocamp.model.runspec import (
    Run,
    run_label,
    spec_run_key,
)
from evocamp.model.state import RunState


def asynchronous_settings(spec: dict) -> dict | None:
    """The ``asynchronous`` part of a run spec (``None``: a synchronous run)."""
    return spec.get("asynchronous")


def completions_per_generation(spec: dict) -> int:
    """Completions that make one generation: the type's ``generation_size`` (a
    plugin's ``batch_size`` key, else ``slots``)."""
    algorithm = spec["algorithm_spec"]
    entry = ALGORITHMS[algorithm["type"]]
    if entry.generation_size is not None:
        return int(entry.generation_size(algorithm))
    return int(algorithm.get("batch_size") or spec["asynchronous"]["slots"])


def _propose(
    run: Run, optimizer, standing: Standing, slots: list[int], *, start: float, queue: bool = False
):
    """Ask the optimizer for one proposal per slot and put them in flight (freed
    slots, at virtual time ``start``) or queue them (``queue``: each slot's next)."""
    spec = run.spec
    evaluations = list(range(standing.proposed, standing.proposed + len(slots)))
    generation = standing.told // completions_per_generation(spec) + 1
    asked = call_method(
        spec,
        generation,
        optimizer,
        "ask_async",
        slots=np.asarray(slots, dtype=np.int64),
        evaluations=np.asarray(evaluations, dtype=np.int64),
    )
    batches = checked_proposals(spec, generation, run.batch_format, asked, count=len(slots))
    seeds = asynchronous_evaluation_seeds(spec["master_seed"], spec_run_key(spec), evaluations)
    added = []
    for slot, evaluation, seed, batch in zip(slots, evaluations, seeds, batches, strict=True):
        entry = InFlight(evaluation=evaluation, slot=slot, start=start, seed=int(seed), batch=batch)
        if queue:
            entry.start = float("nan")
            standing.queued[slot] = entry
        else:
            standing.in_flight[evaluation] = entry
        added.append(entry)
    standing.proposed += len(slots)
    return added


def initialise_asynchronous(spec: dict) -> RunState:
    """Create an asynchronous run's optimizer (and passive archive) and fill every
    slot with a proposal (the generation-0 state), and with proposals ahead queue each
    slot's next one (from the same empty history)."""

    def fill_slots(optimizer) -> tuple[dict, np.ndarray]:
        standing = Standing(told=0, proposed=0, now=0.0)
        slots = list(range(spec["asynchronous"]["slots"]))
        run = resolve_run(spec)
        _propose(run, optimizer, standing, slots, start=0.0)
        if proposes_ahead(spec):
            _propose(run, optimizer, standing, slots, start=0.0, queue=True)
        return encode_in_flight(standing)

    return initialise(spec, first_batch=fill_slots)


class LogMismatchError(EvocampError):
    """A logged completion does not belong to this run's proposals."""


@dataclass
class Resume:
    """Completions logged but not yet told in the state a segment starts from.

    ``by_id`` holds them by evaluation id (virtual clock: told when their turn comes);
    ``order`` lists them in logged order (real clock: told in that order).
    """

    by_id: dict[int, Completion]
    order: collections.deque

    @classmethod
    def from_log(cls, logged: list[Completion], *, told: int, spec: dict) -> Resume:
        """What of ``logged`` (a run's whole completion log) comes after ``told``
        completions.

        Raises
        ------
        CorruptFileError
            When the log holds fewer than ``told`` completions (it is not this run's,
            or was cut).
        """
        if len(logged) < told:
            raise CorruptFileError(
                f"run {run_label(spec)}: its completion log holds {len(logged)} completions "
                f"but its checkpoint has told {told}; the log was cut or belongs to another "
                "run (asynchronous runs resume from checkpoint and log together)"
            )
        if spec["asynchronous"]["clock"] == "virtual":
            # Logged in arrival order: any completion after the first `told` may be the
            # next one in virtual order, and some of the first may not have been told.
            rest = logged
        else:
            rest = logged[told:]
        by_id = {}
        for completion in rest:
            by_id.setdefault(completion.evaluation, completion)
        return cls(by_id=by_id, order=collections.deque(c.evaluation for c in logged[told:]))


def as_evaluated(completion: Completion) -> Evaluated:
    """One completion as the evaluated solutions to fold (a batch of one); the
    optimizer's ``tell_async`` receives its solution."""
    solutions = completion.solution.reshape(1, -1)
    return Evaluated(
        objective=np.asarray([completion.objective]),
        measures=np.asarray(completion.measures, dtype=np.float64).reshape(1, -1),
        extra={name: np.asarray([value]) for name, value in completion.extra.items()},
        solutions_of=lambda rows: solutions[np.asarray(rows, dtype=np.int64)],
        told_solutions=solutions,
        numerics=[] if completion.numerics is None else [completion.numerics],
        failed=np.array([True]) if completion.status else None,
    )


class AsynchronousLoop:
    """Advance an asynchronous run completion by completion.

    Parameters
    ----------
    state : RunState
        The state to continue from (an asynchronous run's).
    resume : Resume
        Completions logged since that state.
    submit : callable
        ``submit(entry)`` starts evaluating an :class:`InFlight` (on Dask, or lazily in
        process).
    wait : callable
        ``wait(evaluation)`` blocks until one submitted evaluation finishes and returns
        its :class:`Completion` (``evaluation``: the one the virtual clock needs next,
        ``None`` for any; an executor may return another).
    record : callable
        ``record(completion)`` appends a completion to the log (before it is told).
    workers : int
        Evaluations that can run at once on the executor (the ``utilisation`` column).
    discarded : callable, optional
        ``discarded(completion)`` is called with each failed completion as it is told
        (the segment writes its log line then, not when it was evaluated: a completion
        evaluated in one segment may be told in the next, or told again after a kill).
    """

    def __init__(
        self,
        state: RunState,
        *,
        resume: Resume,
        submit,
        wait,
        record,
        workers: int,
        discarded=None,
    ):
        self.state = state
        self.spec = state.spec
        self.run_object = resolve_run(state.spec)  # (run() runs the loop)
        self.standing = decode_in_flight(state.next_batch, state.next_seeds)
        self.resume = resume
        self.submit, self.wait, self.record = submit, wait, record
        self.workers = workers
        self.discarded = discarded
        self.virtual = self.spec["asynchronous"]["clock"] == "virtual"
        self.ahead = proposes_ahead(self.spec)
        #: Whether workers make the proposals (they make the queued ones as they evaluate).
        self.made_by_workers = self.run_object.batch_format.proposes_in_shards
        self.per_generation = completions_per_generation(self.spec)
        self.arrived: dict[int, Completion] = {}
        self.block: list[Completion] = []
        #: ``(generation, completion)`` of every completion told by this loop.
        self.told: list[tuple[int, Completion]] = []
        for entry in self.standing.in_flight.values():
            self._start(entry)

    def _start(self, entry: InFlight) -> None:
        """Submit an evaluation (unless the log holds it): with what was made ahead
        instead of its batch, and with its slot's queued proposal when the worker makes it."""
        if entry.evaluation in self.resume.by_id:
            return
        queued = self.standing.queued.get(entry.slot)
        ahead = queued if self.made_by_workers and queued and queued.made is None else None
        batch = {} if entry.made is not None else entry.batch
        self.submit(dataclasses.replace(entry, batch=batch, ahead=ahead))

    def _arrival(self, evaluation: int | None) -> Completion:
        completion = self.wait(evaluation)
        self.record(completion)
        return completion

    def _next_completion(self) -> tuple[Completion, float]:
        """The completion to tell next and the virtual time it finished at."""
        in_flight = self.standing.in_flight
        if self.virtual:
            entry = min(in_flight.values(), key=lambda e: (e.finish(self.spec), e.evaluation))
            completion = self.resume.by_id.pop(entry.evaluation, None)
            while completion is None:
                completion = self.arrived.pop(entry.evaluation, None)
                if completion is None:
                    arrived = self._arrival(entry.evaluation)
                    self.arrived[arrived.evaluation] = arrived
            return completion, entry.finish(self.spec)
        while self.resume.order:
            evaluation = self.resume.order.popleft()
            completion = self.resume.by_id.pop(evaluation)
            if evaluation not in in_flight:
                raise LogMismatchError(
                    f"run {run_label(self.spec)}: the completion log holds evaluation "
                    f"{evaluation}, which this run has not proposed at this point; the log "
                    "belongs to another configuration"
                )
            return completion, 0.0
        return self._arrival(None), 0.0

    def _check_logged(self, completion: Completion, entry: InFlight) -> None:
        """A completion read from the log must be of this run's proposal."""
        if completion.slot != entry.slot or (
            "solutions" in entry.batch
            and completion.solution.tobytes()
            != np.asarray(entry.batch["solutions"][0], dtype=np.float64).tobytes()
        ):
            raise LogMismatchError(
                f"run {run_label(self.spec)}: evaluation {completion.evaluation} in the "
                "completion log is not the solution this run proposed for it; the log "
                "belongs to another configuration (move it away to start the run afresh)"
            )

    def step(self) -> None:
        """Tell the next completion and give its slot a new proposal."""
        completion, finished = self._next_completion()
        entry = self.standing.in_flight.pop(completion.evaluation)
        self._check_logged(completion, entry)
        generation = self.state.generation + 1
        fold_evaluations(self.state, as_evaluated(completion), method="tell_async")
        if completion.status and self.discarded is not None:
            self.discarded(completion)
        self.standing.told += 1
        self.standing.now = finished
        self.block.append(completion)
        self.told.append((generation, completion))
        self._refill(entry.slot, finished, told=completion)
        if self.standing.told % self.per_generation == 0:
            self._close_generation()

    def _refill(self, slot: int, now: float, *, told: Completion) -> None:
        """Give a freed slot its next evaluation: a new proposal, or with proposals ahead
        its queued one at once (made by the worker of ``told``, the slot's completion
        just told, if it did; its ``pending`` point is ``told``'s solution), and queue
        the slot's next from the history as it stands now."""
        run, optimizer = self.run_object, self.state.optimizer
        if not self.ahead:
            for new in _propose(run, optimizer, self.standing, [slot], start=now):
                self._start(new)
            return
        entry = self.standing.queued.pop(slot)
        entry.start = now
        if entry.made is None:
            entry.made = told.ahead
        if self.made_by_workers:
            entry.batch = with_pending(entry.batch, told.solution)
        self.standing.in_flight[entry.evaluation] = entry
        if self.made_by_workers:  # the worker makes the next proposal as it evaluates
            _propose(run, optimizer, self.standing, [slot], start=now, queue=True)
            self._start(entry)
        else:  # the loop proposes: once the evaluation has started
            self._start(entry)
            _propose(run, optimizer, self.standing, [slot], start=now, queue=True)

    def _close_generation(self) -> None:
        """Close the generation the last :attr:`per_generation` completions make."""
        block = self.block
        close_generation(
            self.state,
            objective=np.asarray([c.objective for c in block]),
            eval_seconds=float(sum(c.eval_seconds for c in block)),
            shard_stats={
                name: float(np.mean([c.stats[name] for c in block if name in c.stats]))
                for name in SHARD_STATS
                if any(name in c.stats for c in block)
            },
            workers=self.workers,
            status=(
                np.asarray([c.status for c in block], dtype=np.uint8)
                if any(c.status for c in block)
                else None
            ),
            attempts=np.asarray([c.attempts for c in block], dtype=ATTEMPTS_DTYPE),
            failed_seconds=float(sum(c.failed_seconds for c in block)),
        )
        self.block = []

    def run(self, *, until: int, on_generation=None) -> RunState:
        """Tell completions until generation ``until`` is complete; ``on_generation``
        receives the state after each generation."""
        while self.state.generation < until:
            generation = self.state.generation
            self.step()
            if on_generation is not None and self.state.generation != generation:
                on_generation(self.state)
        batch, seeds = encode_in_flight(self.standing)
        self.state.next_batch, self.state.next_seeds = batch, seeds
        return self.state


def completion_rows(
    run: Run, told: list[tuple[int, Completion]], *, storage: StorageSettings
) -> EvaluationRows | None:
    """The kept-evaluation rows (:mod:`evocamp.files.evaluations`) of completions told
    by an asynchronous loop (:attr:`AsynchronousLoop.told`), in (generation, evaluation
    id) order; ``index`` is the evaluation id (the completion log keeps the order they
    were told in and their slots)."""
    if not told:
        return None
    told = sorted(told, key=lambda item: (item[0], item[1].evaluation))
    completions = [completion for _, completion in told]
    evaluations = np.asarray([c.evaluation for c in completions], dtype=np.int64)
    count = len(completions)
    spec = run.spec
    return EvaluationRows(
        generation=np.asarray([generation for generation, _ in told], dtype=np.int64),
        index=evaluations,
        seed=asynchronous_evaluation_seeds(spec["master_seed"], spec_run_key(spec), evaluations),
        objective=np.asarray([c.objective for c in completions], dtype=np.float64),
        measures=np.asarray([c.measures for c in completions], dtype=np.float64).reshape(
            count, run.measure_dim
        ),
        extra={
            name: np.asarray([c.extra[name] for c in completions], dtype=np.float64)
            for name in run.stored_fields
        },
        eval_seconds=np.asarray([c.eval_seconds for c in completions], dtype=np.float64),
        solution=np.stack([c.solution for c in completions])
        if storage.stores_solutions(run)
        else None,
        status=np.asarray([c.status for c in completions], dtype=np.uint8),
        failures={(generation, c.evaluation): c.message for generation, c in told if c.status},
        attempts=np.asarray([c.attempts for c in completions], dtype=ATTEMPTS_DTYPE),
    )


def replay(spec: dict, logged: list[Completion], *, generations: int) -> RunState:
    """Tell an asynchronous run again from its completion log alone, up to
    ``generations``: the state it had then (the optimizer proposes again; evaluations
    come from the log).

    Raises
    ------
    CorruptFileError
        When the log ends before the run reaches ``generations``.
    """
    state = initialise_asynchronous(spec)

    def missing(evaluation: int | None) -> Completion:
        raise CorruptFileError(
            f"run {run_label(spec)}: the completion log ends before generation "
            f"{generations} (evaluation {evaluation} is not in it)"
        )

    loop = AsynchronousLoop(
        state,
        resume=Resume.from_log(logged, told=0, spec=spec),
        submit=lambda entry: None,
        wait=missing,
        record=lambda completion: None,
        workers=spec["asynchronous"]["slots"],
    )
    return loop.run(until=generations)


def evaluate_in_process(spec: dict):
    """``(submit, wait)`` that evaluate in this process, the one the virtual clock needs
    first (tests, ``evocamp replay`` beyond the log, and simulations)."""
    submitted: dict[int, InFlight] = {}

    def submit(entry: InFlight) -> None:
        submitted[entry.evaluation] = entry

    def wait(evaluation: int | None) -> Completion:
        chosen = evaluation if evaluation in submitted else min(submitted)
        entry = submitted.pop(chosen)
        return evaluate_in_flight(spec, entry)

    return submit, wait
