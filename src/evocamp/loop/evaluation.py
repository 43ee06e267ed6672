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

import numpy as np

from evocamp.base.errors import EvaluationError
from evocamp.base.sharding import shard_bounds
from evocamp.catalogue.factory import batch_format, load_evaluator
from evocamp.files.shard import ShardResult
from evocamp.loop.repeats import repeated
from evocamp.model.numerics import environment
from evocamp.model.protocol import call_optimizer
from evocamp.model.runspec import evaluation_repeats, measure_dim, stored_fields, where


def evaluate_shard(
    spec: dict, *, batch, seeds, generation: int, shard: int, shards: int
) -> ShardResult:
    """Evaluate shard ``shard`` of ``shards`` of a generation's batch.

    Parameters
    ----------
    spec : dict
        The run spec.
    batch : mapping
        The generation's batch as the optimizer described it (values may be h5py
        datasets, read only where the shard needs them, or
        :class:`~evocamp.base.sharding.Rows` holding only this shard's rows).
    seeds : array-like
        The evaluation seeds of the whole batch (or ``Rows`` holding the shard's).
    generation, shard, shards : int
        Which generation the batch belongs to, and which slice
        (:func:`~evocamp.base.sharding.shard_bounds`) this shard evaluates.

    Raises
    ------
    EvaluationError
        When the evaluation function raises or returns wrong shapes or non-finite
        values (the message names run, generation, shard and solution).
    OptimizerError
        When a plugin's batch format fails to make the shard's solutions.
    """
    start, stop = shard_bounds(len(seeds), shards, shard)
    batch_kind = batch_format(spec)
    solutions, stats = call_optimizer(
        spec,
        generation,
        f"{batch_kind.name}.solutions",
        batch_kind.materialise,
        batch,
        start,
        stop,
        shard=shard,
    )
    return evaluate_slice(
        spec,
        generation=generation,
        shard=shard,
        start=start,
        solutions=solutions,
        seeds=np.asarray(seeds[start:stop]),
        stats=stats,
        keep_solutions=batch_kind.proposes_in_shards,
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

    def solution(self, offset: int) -> str:
        """Location of solution ``first + offset``."""
        if self.evaluation is not None:
            return where(self.spec, self.generation, evaluation=self.evaluation, slot=self.slot)
        return where(self.spec, self.generation, self.shard, self.first + offset)

    def whole(self) -> str:
        """Location of the whole call: its solution, or its range of solutions."""
        if self.first == self.last:
            return self.solution(0)
        whole = where(self.spec, self.generation, self.shard, None)
        return f"{whole}, solutions {self.first}..{self.last}"


def _check_outputs(outputs: dict, *, call: _Call, measure_dim: int, extra_fields: list) -> dict:
    """Check keys, shapes and finiteness of one call's outputs."""
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
    spec: dict,
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
) -> ShardResult:
    """Evaluate a contiguous slice of a generation's batch.

    Parameters
    ----------
    spec : dict
        The run spec (its ``domain_spec`` names the evaluation function).
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

    Raises
    ------
    EvaluationError
        When the function raises or returns wrong shapes or non-finite values; the
        message names run, generation, shard and the solution's index in the batch
        (or the call's range of solutions when ``chunk_size`` > 1).
    """
    domain = spec["domain_spec"]
    evaluator = load_evaluator(domain)
    count = len(solutions)
    if count == 0:
        raise ValueError("a shard holds at least one solution (shards <= batch size)")
    chunk = domain.get("chunk_size") or (1 if domain["type"] == "plugin" else count)
    extra_fields = list(domain.get("extra_fields") or [])
    parts: dict[str, list] = {}
    eval_seconds = np.zeros(count)
    for lo in range(0, count, chunk):
        hi = min(lo + chunk, count)
        call = _Call(spec, generation, shard, start + lo, start + hi - 1, evaluation, slot)
        began = time.perf_counter()

        def evaluate_once(call_seeds, lo=lo, hi=hi, call=call):
            outputs = _call(evaluator, domain, solutions[lo:hi], call_seeds, call=call)
            if domain.get("simulated_seconds"):
                time.sleep(simulated_seconds(domain["simulated_seconds"], call_seeds).sum())
            return _check_outputs(
                outputs, call=call, measure_dim=measure_dim(domain), extra_fields=extra_fields
            )

        checked = repeated(evaluate_once, seeds[lo:hi], repeats=evaluation_repeats(spec))
        eval_seconds[lo:hi] = (time.perf_counter() - began) / (hi - lo)
        for name, values in checked.items():
            parts.setdefault(name, []).append(values)
    merged = {name: np.concatenate(values) for name, values in parts.items()}
    return ShardResult(
        generation=generation,
        shard=shard,
        start=start,
        stop=start + count,
        objective=merged["objective"],
        measures=merged["measures"],
        eval_seconds=eval_seconds,
        extra={name: merged[name] for name in stored_fields(spec)},
        solutions=np.asarray(solutions, dtype=np.float64) if keep_solutions else None,
        stats=dict(stats or {}),
        numerics=environment(),
    )


def _call(evaluator, domain: dict, solutions, seeds, *, call: _Call) -> dict:
    """Call the evaluation function once.

    It is never called again after a failure (it may be expensive or have side
    effects): the message names the call's solution, or its range of solutions.
    """
    try:
        return _as_outputs(evaluator(solutions, seeds, **(domain.get("params") or {})))
    except Exception as error:  # noqa: BLE001 - user code may raise anything
        hint = "" if call.first == call.last else " (chunk_size 1 names the exact solution)"
        raise EvaluationError(
            f"{call.whole()}: the evaluation function raised {type(error).__name__}: {error}{hint}",
            details="".join(traceback.format_exception(error)),
        ) from None


@dataclass(frozen=True)
class GenerationResults:
    """A generation's shard results in solution-index order."""

    objective: np.ndarray
    measures: np.ndarray
    extra: dict
    #: Seconds spent evaluating, summed over all solutions.
    eval_seconds: float
    #: Seconds spent evaluating each solution (its call's time over its chunk).
    seconds: np.ndarray
    #: The evaluated solutions, when the shards proposed them (else ``None``).
    solutions: np.ndarray | None
    #: Mean over shards of the seconds they spent proposing (``SHARD_STATS``).
    shard_stats: dict
    shards: int
    #: The distinct numeric environments that evaluated the shards (those that said).
    numerics: list


def combine_shards(
    spec: dict, generation: int, batch: int, shards: list[ShardResult]
) -> GenerationResults:
    """Concatenate shard results in solution-index order, checking they tile the batch."""
    ordered = sorted(shards, key=lambda r: r.start)
    position = 0
    for result in ordered:
        if result.generation != generation or result.start != position:
            raise EvaluationError(
                f"{where(spec, generation, result.shard, None)}: shard covers solutions "
                f"{result.start}..{result.stop - 1} of generation {result.generation}, "
                f"expected to start at solution {position} of generation {generation}"
            )
        position = result.stop
    if position != batch:
        raise EvaluationError(
            f"{where(spec, generation, None, None)}: shards cover {position} of {batch} solutions"
        )
    extra_names = sorted(ordered[0].extra) if ordered else []
    proposed = [r.solutions for r in ordered if r.solutions is not None]
    stat_names = sorted({name for r in ordered for name in r.stats})
    environments = []
    for result in ordered:
        if result.numerics is not None and result.numerics not in environments:
            environments.append(result.numerics)
    return GenerationResults(
        objective=np.concatenate([r.objective for r in ordered]),
        measures=np.concatenate([r.measures for r in ordered]),
        extra={name: np.concatenate([r.extra[name] for r in ordered]) for name in extra_names},
        eval_seconds=float(sum(r.eval_seconds.sum() for r in ordered)),
        seconds=np.concatenate([r.eval_seconds for r in ordered]),
        solutions=np.concatenate(proposed) if len(proposed) == len(ordered) else None,
        shard_stats={
            name: float(np.mean([r.stats[name] for r in ordered if name in r.stats]))
            for name in stat_names
        },
        shards=len(ordered),
        numerics=environments,
    )
