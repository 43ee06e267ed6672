"""Evaluations in flight of an asynchronous run: what each is (:class:`InFlight`: its
slot, virtual start, seed and batch of one), where the run stands (:class:`Standing`),
both encoded in a state's ``next_batch`` (:func:`encode_in_flight`,
:func:`decode_in_flight`), and one evaluation made and evaluated where it runs, a Dask
task or the segment's own process (:func:`evaluate_in_flight`; with proposals ahead,
its slot's queued proposal made meanwhile). The loop that starts and tells them is
:mod:`evocamp.loop.asynchronous`'s.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

import numpy as np

from evocamp.base.lanes import Lane
from evocamp.base.seeding import repeat_seeds
from evocamp.catalogue.factory import resolve_run
from evocamp.files.completions import Completion
from evocamp.loop.evaluation import evaluate_slice
from evocamp.loop.outcomes import simulated_seconds
from evocamp.model.protocol import call_optimizer
from evocamp.model.runspec import (
    Run,
    evaluation_repeats,
)


@dataclass
class InFlight:
    """An evaluation proposed and not yet told."""

    evaluation: int
    slot: int
    #: Virtual time at which it started (when its slot was freed; NaN while queued).
    start: float
    seed: int
    #: Its batch of one solution (plain, or compact: the worker proposes it).
    batch: dict
    #: Its virtual duration, once computed (:meth:`finish`).
    duration: float | None = None
    #: ``(solutions, stats)`` of its batch, once made ahead (never stored: a resumed run
    #: makes it again, the same).
    made: tuple | None = None
    #: Its slot's queued proposal, for the worker to make while it evaluates this one.
    ahead: InFlight | None = None

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
    time of the last tell, the evaluations in flight (by id) and, with proposals ahead,
    each slot's queued proposal (by slot). (Not the progress lines of
    :mod:`evocamp.loop.progress`.)"""

    told: int
    proposed: int
    now: float
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    queued: dict[int, InFlight] = field(default_factory=dict)


_PREFIX = "task_"


def encode_in_flight(standing: Standing) -> tuple[dict, np.ndarray]:
    """``(next_batch, next_seeds)`` of a state: the evaluations in flight and the queued
    proposals, in id order (each one's batch under ``task_<k>_<name>``; ``async_queued``
    marks the queued ones, present only when some are), and the counters."""
    entries = sorted(
        [*standing.in_flight.values(), *standing.queued.values()], key=lambda e: e.evaluation
    )
    batch = {
        "async_counters": np.asarray([standing.told, standing.proposed], dtype=np.int64),
        "async_now": np.asarray([standing.now], dtype=np.float64),
        "async_evaluation": np.asarray([p.evaluation for p in entries], dtype=np.int64),
        "async_slot": np.asarray([p.slot for p in entries], dtype=np.int64),
        "async_start": np.asarray([p.start for p in entries], dtype=np.float64),
    }
    if standing.queued:
        queued = {entry.evaluation for entry in standing.queued.values()}
        batch["async_queued"] = np.asarray([p.evaluation in queued for p in entries], dtype=bool)
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
    queued = np.asarray(batch.get("async_queued", np.zeros(len(evaluations), dtype=bool)))
    for position, evaluation in enumerate(evaluations):
        prefix = f"{_PREFIX}{position}_"
        entry = InFlight(
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
        if queued[position]:
            standing.queued[entry.slot] = entry
        else:
            standing.in_flight[entry.evaluation] = entry
    return standing


def _make(run: Run, entry: InFlight) -> tuple:
    """``(solutions, stats)`` of an entry's batch (a decentralised worker fits and
    proposes here); failures name the run, the evaluation id and its slot."""
    batch_kind = run.batch_format
    return call_optimizer(
        run.spec,
        0,
        f"{batch_kind.name}.solutions",
        batch_kind.materialise,
        entry.batch,
        0,
        1,
        evaluation=entry.evaluation,
        slot=entry.slot,
    )


def _make_in_background(run: Run, entry: InFlight | None, *, evaluating: np.ndarray):
    """Start making ``entry``'s solution in a thread (while this worker evaluates
    ``evaluating``, the slot's point in flight: its ``pending`` point); returns a
    function that waits for it and gives ``(solutions, stats)``, or ``None`` when there
    is nothing to make or making it failed: the evaluation that needs it then makes it
    itself and fails there, with its own evaluation id and slot."""
    if entry is None:
        return lambda: None
    entry = dataclasses.replace(entry, batch=with_pending(entry.batch, evaluating))
    made = []

    def make() -> None:
        try:
            made.append(_make(run, entry))
        except Exception:  # noqa: BLE001  (raised again where the proposal is needed)
            pass

    thread = threading.Thread(target=make, name=f"proposal-{entry.evaluation}", daemon=True)
    thread.start()

    def result() -> tuple | None:
        thread.join()
        return made[0] if made else None

    return result


def evaluate_in_flight(spec: dict, entry: InFlight, *, lane: Lane | None = None) -> Completion:
    """Evaluate one evaluation in flight (a Dask task, or in process): make its solution
    from its batch unless it was made ahead, and evaluate it (in ``lane``, a Dask
    worker's, when given: :func:`~evocamp.loop.evaluation.evaluate_slice`); with
    proposals ahead, make its slot's queued proposal (``entry.ahead``) meanwhile,
    returned as the completion's ``ahead``. Failures name the run, the evaluation id and
    its slot."""
    run = resolve_run(spec)
    solutions, stats = entry.made if entry.made is not None else _make(run, entry)
    ahead = _make_in_background(run, entry.ahead, evaluating=solutions)
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
        ahead=ahead(),
    )


def with_pending(batch: dict, evaluating: np.ndarray) -> dict:
    """A queued compact batch with the point its slot was evaluating when it was asked
    (``pending``): whoever makes the proposal, the worker evaluating that point or,
    after a resume, the worker that starts the proposal (the loop takes the point from
    the told completion), makes it from the same batch."""
    return {**batch, "pending": np.asarray(evaluating, dtype=np.float64).reshape(1, -1)}


def proposes_ahead(spec: dict) -> bool:
    """Whether the run keeps a proposal queued per slot (``asynchronous.propose_ahead``;
    run specs written before it have none: their slots propose when freed)."""
    return bool(spec["asynchronous"].get("propose_ahead"))
