"""The generation loop's steps: initialise, evaluate a shard, tell.

These functions hold no I/O policy of their own; the CLI (one step per Snakemake
job) and the Dask runner (many generations in one process) both call them, which
is why both modes give bitwise-identical results.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass

import numpy as np

from evocamp.seeding import evaluation_seeds
from evocamp.storage import OPTIMIZER_STATS, RunState, ShardResult, blank_metric_rows, run_label


class EvaluationError(RuntimeError):
    """A user evaluation raised or returned bad values; the message says where.

    ``details`` holds the user function's traceback, when there is one.
    """

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.details = details

    def __reduce__(self):
        # Keeps ``details`` when the error travels back from a Dask worker.
        return (_rebuild_evaluation_error, (str(self), self.details))


def _rebuild_evaluation_error(message: str, details: str) -> EvaluationError:
    return EvaluationError(message, details=details)


def _where(spec: dict, generation: int, shard: int | None, index: int | None) -> str:
    parts = [f"run {run_label(spec)}", f"generation {generation}"]
    if shard is not None:
        parts.append(f"shard {shard}")
    if index is not None:
        parts.append(f"solution {index}")
    return ", ".join(parts)


def _next_batch(spec: dict, optimizer, generation: int) -> tuple[dict, np.ndarray]:
    """Ask the batch of ``generation`` and derive its evaluation seeds."""
    from evocamp.algorithms import spec_run_key
    from evocamp.optimizers import call_method, checked_batch

    asked = call_method(spec, generation, optimizer, "ask")
    batch, size = checked_batch(spec, generation, type(optimizer), asked)
    seeds = evaluation_seeds(spec["master_seed"], spec_run_key(spec), generation, size)
    return batch, seeds


def metrics_row(
    *,
    archive,
    optimizer,
    generation: int,
    evaluations: int,
    objective: np.ndarray,
    best_objective: float,
    wall_seconds: float,
    eval_seconds: float,
    shard_stats: dict | None = None,
    workers: int = 0,
) -> np.ndarray:
    """One metrics row (``evocamp.storage.METRIC_DTYPE``).

    QD columns come from ``archive`` (NaN without one); ``gen_obj_max`` and
    ``gen_obj_mean`` from the generation's ``objective`` (NaN at generation 0);
    ``fit_seconds`` and ``propose_seconds`` from the shards (mean per shard) or, when
    the optimizer proposes in ``tell``, from its ``stats()`` like ``sigma``;
    ``utilisation`` is ``eval_seconds / (wall_seconds x workers)`` (the generation's
    shards).
    """
    row = blank_metric_rows(1)
    row["generation"] = generation
    row["evaluations"] = evaluations
    if archive is not None:
        stats = archive.stats
        row["qd_score"] = stats.qd_score
        row["norm_qd_score"] = stats.norm_qd_score
        row["coverage"] = stats.coverage
        row["obj_max"] = np.nan if stats.obj_max is None else stats.obj_max
        row["obj_mean"] = np.nan if stats.obj_mean is None else stats.obj_mean
        row["num_elites"] = stats.num_elites
    if len(objective):
        row["gen_obj_max"] = objective.max()
        row["gen_obj_mean"] = objective.mean()
    row["best_objective"] = best_objective
    for name, value in (shard_stats or {}).items():
        row[name] = value
    stats_of = getattr(optimizer, "stats", None)
    if callable(stats_of):
        for name, value in stats_of().items():
            if name in OPTIMIZER_STATS:
                row[name] = value
    row["wall_seconds"] = wall_seconds
    row["eval_seconds"] = eval_seconds
    if workers and wall_seconds > 0:
        row["utilisation"] = eval_seconds / (wall_seconds * workers)
    return row


def initialise(spec: dict) -> RunState:
    """Create a run's optimizer (and passive archive) and ask the batch of generation 1."""
    from evocamp.algorithms import build_passive_archive
    from evocamp.optimizers import build_optimizer, family_of

    started = time.time()
    optimizer = build_optimizer(spec)
    if family_of(spec["algorithm_spec"]) == "qd":
        archive = optimizer.archive
    else:
        archive = build_passive_archive(spec)
    batch, seeds = _next_batch(spec, optimizer, 1)
    finished = time.time()
    row = metrics_row(
        archive=archive,
        optimizer=optimizer,
        generation=0,
        evaluations=0,
        objective=np.empty(0),
        best_objective=np.nan,
        wall_seconds=finished - started,
        eval_seconds=0.0,
    )
    return RunState(
        spec=spec,
        generation=0,
        optimizer=optimizer,
        archive=archive,
        next_batch=batch,
        next_seeds=seeds,
        metrics_window=row,
        finished_at=finished,
        best=None if archive is not None else {},
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
    ``generation`` (indices in the generation's batch), evaluated by ``shard``."""

    spec: dict
    generation: int
    shard: int
    first: int
    last: int

    def solution(self, offset: int) -> str:
        """Location of solution ``first + offset``."""
        return _where(self.spec, self.generation, self.shard, self.first + offset)

    def whole(self) -> str:
        """Location of the whole call: its solution, or its range of solutions."""
        if self.first == self.last:
            return self.solution(0)
        where = _where(self.spec, self.generation, self.shard, None)
        return f"{where}, solutions {self.first}..{self.last}"


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
    shard: int,
    start: int,
    solutions: np.ndarray,
    seeds: np.ndarray,
    stats: dict | None = None,
    keep_solutions: bool = False,
) -> ShardResult:
    """Evaluate a contiguous slice of a generation's batch.

    Parameters
    ----------
    spec : dict
        The run spec (its ``domain_spec`` names the evaluation function).
    generation, shard, start : int
        Where the slice is: ``solutions[k]`` is solution ``start + k`` of the batch.
    solutions, seeds : numpy.ndarray
        The slice and its evaluation seeds.
    stats : dict, optional
        Seconds the shard spent making its solutions, kept with the results.
    keep_solutions : bool
        Keep the solutions with the results (the shard proposed them).

    Raises
    ------
    EvaluationError
        When the function raises or returns wrong shapes or non-finite values; the
        message names run, generation, shard and the solution's index in the batch
        (or the call's range of solutions when ``chunk_size`` > 1).
    """
    from evocamp.config import measure_dim
    from evocamp.domains import load_evaluator

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
        call = _Call(spec, generation, shard, start + lo, start + hi - 1)
        began = time.perf_counter()
        outputs = _call(evaluator, domain, solutions[lo:hi], seeds[lo:hi], call=call)
        if domain.get("simulated_seconds"):
            time.sleep(simulated_seconds(domain["simulated_seconds"], seeds[lo:hi]).sum())
        eval_seconds[lo:hi] = (time.perf_counter() - began) / (hi - lo)
        checked = _check_outputs(
            outputs, call=call, measure_dim=measure_dim(domain), extra_fields=extra_fields
        )
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
        extra={name: merged[name] for name in extra_fields},
        solutions=np.asarray(solutions, dtype=np.float64) if keep_solutions else None,
        stats=dict(stats or {}),
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
    #: The evaluated solutions, when the shards proposed them (else ``None``).
    solutions: np.ndarray | None
    #: Mean over shards of the seconds they spent proposing (``SHARD_STATS``).
    shard_stats: dict
    shards: int


def combine_shards(
    spec: dict, generation: int, batch: int, shards: list[ShardResult]
) -> GenerationResults:
    """Concatenate shard results in solution-index order, checking they tile the batch."""
    ordered = sorted(shards, key=lambda r: r.start)
    position = 0
    for result in ordered:
        if result.generation != generation or result.start != position:
            raise EvaluationError(
                f"{_where(spec, generation, result.shard, None)}: shard covers solutions "
                f"{result.start}..{result.stop - 1} of generation {result.generation}, "
                f"expected to start at solution {position} of generation {generation}"
            )
        position = result.stop
    if position != batch:
        raise EvaluationError(
            f"{_where(spec, generation, None, None)}: shards cover {position} of {batch} solutions"
        )
    extra_names = sorted(ordered[0].extra) if ordered else []
    proposed = [r.solutions for r in ordered if r.solutions is not None]
    stat_names = sorted({name for r in ordered for name in r.stats})
    return GenerationResults(
        objective=np.concatenate([r.objective for r in ordered]),
        measures=np.concatenate([r.measures for r in ordered]),
        extra={name: np.concatenate([r.extra[name] for r in ordered]) for name in extra_names},
        eval_seconds=float(sum(r.eval_seconds.sum() for r in ordered)),
        solutions=np.concatenate(proposed) if len(proposed) == len(ordered) else None,
        shard_stats={
            name: float(np.mean([r.stats[name] for r in ordered if name in r.stats]))
            for name in stat_names
        },
        shards=len(ordered),
    )


def tell(state: RunState, shards: list[ShardResult]) -> RunState:
    """Fold a generation's shard results into the optimizer (and the passive archive)
    and ask the next batch.

    Parameters
    ----------
    state : RunState
        The state after the previous generation (its ``next_batch`` was evaluated).
    shards : list of ShardResult
        All shards of the generation, in any order.

    The metrics window restarts after every kept checkpoint (a generation that is
    a positive multiple of ``checkpoint_every``), whose rows were already saved.
    """
    from evocamp.optimizers import call_method, family_of, materialise, proposes_in_shards

    generation = state.generation + 1
    results = combine_shards(state.spec, generation, len(state.next_seeds), shards)
    objective, extra = results.objective, results.extra
    optimizer = state.optimizer
    cls = type(optimizer)

    def solutions_of(rows) -> np.ndarray:
        if results.solutions is not None:
            return results.solutions[np.asarray(rows, dtype=np.int64)]
        return np.stack([materialise(cls, state.next_batch, int(r), int(r) + 1)[0] for r in rows])

    if state.archive is not None and family_of(state.spec["algorithm_spec"]) != "qd":
        from evocamp.algorithms import add_to_passive_archive

        add_to_passive_archive(
            state.archive,
            objective=objective,
            measures=results.measures,
            extra=extra,
            solutions=solutions_of,
        )
    best = state.best
    if state.archive is None:
        best = _improved_best(
            state.best, objective=objective, extra=extra, solutions_of=solutions_of
        )
    told = dict(extra)
    if proposes_in_shards(cls):
        told["solutions"] = results.solutions
    call_method(state.spec, generation, optimizer, "tell", objective, results.measures, **told)
    previous_row = state.metrics_window[-1]
    evaluations = int(previous_row["evaluations"]) + len(objective)
    batch, seeds = _next_batch(state.spec, optimizer, generation + 1)
    finished = time.time()
    row = metrics_row(
        archive=state.archive,
        optimizer=optimizer,
        generation=generation,
        evaluations=evaluations,
        objective=objective,
        best_objective=float(np.fmax(previous_row["best_objective"], objective.max())),
        wall_seconds=finished - state.finished_at,
        eval_seconds=results.eval_seconds,
        shard_stats=results.shard_stats,
        workers=results.shards,
    )
    previous = state.generation
    window_start = previous > 0 and previous % state.spec["checkpoint_every"] == 0
    window = row if window_start else np.concatenate([state.metrics_window, row])
    return RunState(
        spec=state.spec,
        generation=generation,
        optimizer=optimizer,
        archive=state.archive,
        next_batch=batch,
        next_seeds=seeds,
        metrics_window=window,
        finished_at=finished,
        best=best,
    )


def _improved_best(best: dict | None, *, objective: np.ndarray, extra: dict, solutions_of) -> dict:
    """The best evaluated solution so far (runs without an archive): its solution,
    objective and extra fields; the first of equal objectives wins. ``solutions_of(rows)``
    gives the solutions of rows of the generation's batch."""
    index = int(np.argmax(objective))
    if best and objective[index] <= best["objective"]:
        return best
    improved = {"solution": solutions_of([index])[0], "objective": np.float64(objective[index])}
    improved.update({name: np.float64(values[index]) for name, values in extra.items()})
    return improved
