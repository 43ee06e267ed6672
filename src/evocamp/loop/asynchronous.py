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

A resume reads the completions logged since the checkpoint back (:class:`Resume`)
instead of evaluating them again. The state between segments is a
:class:`~evocamp.model.state.RunState` whose ``next_batch`` holds the proposals
in flight (:func:`encode_in_flight`), so keep, finalise and status work unchanged.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

from evocamp.base.errors import CorruptFileError, EvocampError
from evocamp.base.lanes import Lane
from evocamp.base.seeding import asynchronous_evaluation_seeds, repeat_seeds
from evocamp.catalogue.algorithms import ALGORITHMS
from evocamp.catalogue.factory import resolve_run
from evocamp.files.completions import Completion
from evocamp.files.evaluations import EvaluationRows, StorageSettings
from evocamp.files.shard import ATTEMPTS_DTYPE
from evocamp.loop.engine import initialise
from evocamp.loop.evaluation import evaluate_slice
from evocamp.loop.fold import Evaluated, close_generation, fold_evaluations
from evocamp.loop.outcomes import simulated_seconds
from evocamp.model.metrics import SHARD_STATS
from evocamp.model.protocol import call_method, call_optimizer, checked_proposals
from evocamp.model.run import Run
from evocamp.model.runspec import (
    evaluation_repeats,
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


@dataclass
class InFlight:
    """An evaluation proposed and not yet told."""

    evaluation: int
    slot: int
    #: Virtual time at which it started (when its slot was freed).
    start: float
    seed: int
    #: Its batch of one solution (plain, or compact: the worker proposes it).
    batch: dict
    #: Its virtual duration, once computed (:meth:`finish`).
    duration: float | None = None

    def finish(self, spec: dict) -> float:
        """Its virtual finish time."""
        if self.duration is None:
            self.duration = virtual_duration(spec, self.seed)
        return self.start + self.duration


def virtual_duration(spec: dict, seed: int) -> float:
    """The virtual duration of the evaluation with evaluation seed ``seed``: what the
    domain's ``simulated_seconds`` sleeps, else ``asynchronous.virtual_seconds``; with
    ``evaluation.repeats`` n, the sum of the durations of its n repeats (each drawn
    from its repeat's seed, as the shard step sleeps them)."""
    durations = (
        spec["domain_spec"].get("simulated_seconds") or spec["asynchronous"]["virtual_seconds"]
    )
    seeds = np.asarray([seed], dtype=np.uint64)
    repeats = evaluation_repeats(spec)
    if repeats > 1:
        return float(simulated_seconds(durations, repeat_seeds(seeds, repeats)[0]).sum())
    return float(simulated_seconds(durations, seeds)[0])


@dataclass
class Standing:
    """Where an asynchronous run stands: completions told, proposals made, the virtual
    time of the last tell and the evaluations in flight (by id). (Not the progress
    lines of :mod:`evocamp.loop.progress`.)"""

    told: int
    proposed: int
    now: float
    in_flight: dict[int, InFlight] = field(default_factory=dict)


_PREFIX = "task_"


def encode_in_flight(standing: Standing) -> tuple[dict, np.ndarray]:
    """``(next_batch, next_seeds)`` of a state: the evaluations in flight, in id order
    (each one's batch under ``task_<k>_<name>``), and the counters."""
    entries = [standing.in_flight[e] for e in sorted(standing.in_flight)]
    batch = {
        "async_counters": np.asarray([standing.told, standing.proposed], dtype=np.int64),
        "async_now": np.asarray([standing.now], dtype=np.float64),
        "async_evaluation": np.asarray([p.evaluation for p in entries], dtype=np.int64),
        "async_slot": np.asarray([p.slot for p in entries], dtype=np.int64),
        "async_start": np.asarray([p.start for p in entries], dtype=np.float64),
    }
    for position, entry in enumerate(entries):
        for name, values in entry.batch.items():
            batch[f"{_PREFIX}{position}_{name}"] = np.asarray(values)
    seeds = np.asarray([p.seed for p in entries], dtype=np.uint64)
    return batch, seeds


def decode_in_flight(batch: dict, seeds: np.ndarray) -> Standing:
    """The :class:`Standing` that :func:`encode_in_flight` stored."""
    told, proposed = (int(v) for v in np.asarray(batch["async_counters"]))
    standing = Standing(told=told, proposed=proposed, now=float(batch["async_now"][0]))
    evaluations = np.asarray(batch["async_evaluation"])
    for position, evaluation in enumerate(evaluations):
        prefix = f"{_PREFIX}{position}_"
        standing.in_flight[int(evaluation)] = InFlight(
            evaluation=int(evaluation),
            slot=int(batch["async_slot"][position]),
            start=float(batch["async_start"][position]),
            seed=int(seeds[position]),
            batch={
                name.removeprefix(prefix): np.asarray(values)
                for name, values in batch.items()
                if name.startswith(prefix)
            },
        )
    return standing


def evaluate_in_flight(spec: dict, entry: InFlight, *, lane: Lane | None = None) -> Completion:
    """Evaluate one evaluation in flight (a Dask task, or in process): make its solution
    from its batch (a decentralised worker fits and proposes here) and evaluate it (in
    ``lane``, a Dask worker's, when given: :func:`~evocamp.loop.evaluation.evaluate_slice`).
    Failures name the run, the evaluation id and its slot."""
    run = resolve_run(spec)
    batch_kind = run.batch_format
    solutions, stats = call_optimizer(
        spec,
        0,
        f"{batch_kind.name}.solutions",
        batch_kind.materialise,
        entry.batch,
        0,
        1,
        evaluation=entry.evaluation,
        slot=entry.slot,
    )
    result = evaluate_slice(
        run,
        generation=0,
        shard=None,
        start=entry.evaluation,
        solutions=solutions,
        seeds=np.asarray([entry.seed], dtype=np.uint64),
        stats=stats,
        keep_solutions=True,
        evaluation=entry.evaluation,
        slot=entry.slot,
        lane=lane,
    )
    return Completion(
        evaluation=entry.evaluation,
        slot=entry.slot,
        solution=result.solutions[0],
        objective=float(result.objective[0]),
        measures=result.measures[0],
        extra={name: float(values[0]) for name, values in result.extra.items()},
        eval_seconds=float(result.eval_seconds[0]),
        stats=dict(result.stats),
        numerics=result.numerics,
        status=0 if result.status is None else int(result.status[0]),
        message=result.messages.get(entry.evaluation, ""),
        attempts=1 if result.attempts is None else int(result.attempts[0]),
        failed_seconds=0.0 if result.failed_seconds is None else float(result.failed_seconds[0]),
    )


def _propose(run: Run, optimizer, standing: Standing, slots: list[int], *, start: float):
    """Ask the optimizer for one proposal per freed slot and put them in flight."""
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
        standing.in_flight[evaluation] = entry
        added.append(entry)
    standing.proposed += len(slots)
    return added


def initialise_asynchronous(spec: dict) -> RunState:
    """Create an asynchronous run's optimizer (and passive archive) and fill every
    slot with a proposal (the generation-0 state)."""

    def fill_slots(optimizer) -> tuple[dict, np.ndarray]:
        standing = Standing(told=0, proposed=0, now=0.0)
        slots = list(range(spec["asynchronous"]["slots"]))
        _propose(resolve_run(spec), optimizer, standing, slots, start=0.0)
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
        self.per_generation = completions_per_generation(self.spec)
        self.arrived: dict[int, Completion] = {}
        self.block: list[Completion] = []
        #: ``(generation, completion)`` of every completion told by this loop.
        self.told: list[tuple[int, Completion]] = []
        for entry in self.standing.in_flight.values():
            self._start(entry)

    def _start(self, entry: InFlight) -> None:
        if entry.evaluation not in self.resume.by_id:
            self.submit(entry)

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
        for new in _propose(
            self.run_object, self.state.optimizer, self.standing, [entry.slot], start=finished
        ):
            self._start(new)
        if self.standing.told % self.per_generation == 0:
            self._close_generation()

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
