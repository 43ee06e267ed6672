"""Bayesian optimisation: batch UCB (qUCB) with a tree-ensemble surrogate.

Two optimizers share one proposal step (:func:`propose`): fit scikit-learn's
``ExtraTreesRegressor`` to the history, take the spread of its trees' predictions as
the uncertainty, and find, for each exploration weight kappa, a point of high upper
confidence bound ``mean + kappa * std``: the best of many uniform candidates within the
bounds, refined by a short genetic search (the surrogate and the search:
:mod:`evocamp.families.surrogate`). Kappas are drawn
from an exponential distribution with mean ``kappa`` (qUCB), one per worker and slot,
from the run's seed: :func:`exploration_weights`.

- :class:`CentralisedQUCB`: ``tell`` fits once and proposes the whole next batch
  (point ``j`` uses worker ``j``'s kappa); shards only evaluate.
- :class:`DecentralisedQUCB` (asynchronous decentralised BO, DeepHyper's ADBO, arXiv
  2207.00479, run in synchronous generations): the batch is the history; every
  evaluation shard fits its own surrogate and proposes its own points with its own
  kappa (shard ``s`` is worker ``s``), so no process proposes for all. The shard
  count is part of the algorithm: results are identical for the same configuration,
  seed and shard count, on any executor and after any resume.

Until the history holds ``initial_points`` solutions, proposals are uniform within
the bounds (the initial design). scikit-learn is imported only when a surrogate is
fitted.

On a domain with a search space (:mod:`evocamp.model.space`) both work in the space's
unit cube: the surrogate is fitted on the history's unit-cube points
(:meth:`~evocamp.model.space.Space.to_unit`: a real or integer parameter by its position
between its bounds, on a log scale for ``log``; an integer or a category at the middle
of its cell, so that the trees split between whole values and between categories in
their declared order; an inactive parameter at -0.5, below every active value), every
candidate and child of the genetic search is snapped to the point of the solution it
stands for (:meth:`~evocamp.model.space.Space.snap`), so that a configuration already
evaluated or proposed is recognised, and proposals are returned as solutions
(:meth:`~evocamp.model.space.Space.from_unit`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np

from evocamp.families.surrogate import (
    FIT_POINTS,
    PARENTS,
    best_first,
    checked_costs,
    cost_alpha,
    cost_weight,
    fit_surrogate,
    kappa_decay,
    ranked,
    refine_by_ucb,
    reused_surrogate,
    row_keys,
    training_subset,
    tree_mean_std,
    ucb,
)
from evocamp.model.protocol import CompactBatch, shard_of_slice
from evocamp.model.space import Space

#: Streams of the optimizer seed (SeedSequence spawn keys).
KAPPA_STREAM = 1
PROPOSAL_STREAM = 2


def exploration_weights(seed: int, *, kappa: float, worker: int, count: int) -> np.ndarray:
    """The exploration weights of ``count`` proposal slots of one worker: exponential
    with mean ``kappa``, fixed by the run's seed and the worker for the whole run."""
    stream = np.random.SeedSequence(seed, spawn_key=(KAPPA_STREAM, worker))
    return np.random.default_rng(stream).exponential(kappa, count)


def proposal_rng(seed: int, *, generation: int, worker: int) -> np.random.Generator:
    """The random numbers of one worker's proposal in one generation (initial design,
    candidates and the surrogate's own seed)."""
    stream = np.random.SeedSequence(seed, spawn_key=(PROPOSAL_STREAM, generation, worker))
    return np.random.default_rng(stream)


def propose(
    x: np.ndarray,
    y: np.ndarray,
    *,
    kappas: np.ndarray,
    bounds: tuple[float, float],
    candidates: int,
    trees: int,
    initial_points: int,
    refine_generations: int,
    rng: np.random.Generator,
    pending: np.ndarray | None = None,
    snap: Callable[[np.ndarray], np.ndarray] | None = None,
    fit_points: int = FIT_POINTS,
    lies: np.ndarray | None = None,
    refit: tuple[int, int] | None = None,
    cost: tuple[np.ndarray, float] | None = None,
) -> tuple[np.ndarray, float, float]:
    """Propose one point per kappa from the history ``(x, y)`` (maximisation).

    The surrogate is fitted to at most ``fit_points`` of the history
    (:func:`training_subset`). For each kappa in turn: the :data:`PARENTS` best of
    ``candidates`` uniform points and those history points by UCB start a genetic
    search of ``refine_generations`` generations (:func:`refine_by_ucb`); the proposal
    is its best point that is neither evaluated nor proposed already (with no
    generations, the best such candidate).

    ``pending`` (points proposed and still being evaluated, asynchronous mode) are
    never proposed again. ``snap`` (a search space's
    :meth:`~evocamp.model.space.Space.snap`) maps the initial design, the candidates
    and the genetic search's children to the points of the solutions they stand for.
    ``lies`` (points being evaluated whose results the proposal does not wait for) join
    the fit as believers, each with the objective of its nearest fitted point, so the
    proposal does not repeat them. (A pessimistic constant liar, the history's worst
    objective, was measured worse: it pushed proposals away from the incumbent.)
    ``cost`` (the history's costs, one per point of ``y``, and the exponent ``alpha``)
    makes the acquisition cost-aware (:func:`cost_weight`).

    Returns
    -------
    tuple
        ``(points, fit_seconds, propose_seconds)``; both times are 0 while the history
        is smaller than ``initial_points`` (uniform samples: the initial design).
    """
    low, high = bounds
    count = len(kappas)
    dim = x.shape[1]
    keep = (lambda points: points) if snap is None else snap
    if len(y) < initial_points:
        return keep(rng.uniform(low, high, (count, dim))), 0.0, 0.0
    began = time.perf_counter()
    fitted_rows = training_subset(y, limit=fit_points)  # the fit's, or the refit's seeds
    if refit is not None and refit[0] > 1:
        if lies is not None and len(lies):
            pending = lies if pending is None else np.concatenate([pending, lies])
        model = reused_surrogate(
            x,
            y,
            every=refit[0],
            initial_points=initial_points,
            trees=trees,
            seed=refit[1],
            fit_points=fit_points,
        )
        fit_x = x[fitted_rows]  # (the genetic search's seeds)
    else:
        fit_x, fit_y = x[fitted_rows], y[fitted_rows]
        if lies is not None and len(lies):
            nearest = ((lies[:, None, :] - fit_x[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
            fit_x = np.concatenate([fit_x, lies])
            fit_y = np.concatenate([fit_y, fit_y[nearest]])
            pending = lies if pending is None else np.concatenate([pending, lies])
        model = fit_surrogate(fit_x, fit_y, trees=trees, rng=rng)
    weight = None
    if cost is not None:
        weight = cost_weight(x, y, cost=cost, rows=fitted_rows, trees=trees, rng=rng)
    fitted = time.perf_counter()
    uniform = keep(rng.uniform(low, high, (max(candidates, count), dim)))
    start = np.concatenate([uniform, fit_x])
    mean, std = tree_mean_std(model, start)
    taken = set(row_keys(x))  # (one pass over the history: its rows' bytes)
    if pending is not None:
        taken.update(row_keys(pending))
    points = []
    for kappa in kappas:
        score = ucb(mean, std, kappa)
        if weight is not None:
            score = weight(start, score)
        population = refine_by_ucb(
            model,
            start[best_first(score, PARENTS)],
            kappa=kappa,
            bounds=bounds,
            generations=refine_generations,
            taken=taken,
            rng=rng,
            snap=snap,
            cost=weight,
        )
        best = population[0]
        if best.tobytes() in taken:  # all evaluated or proposed: the best new candidate
            best = uniform[ranked(uniform, score[: len(uniform)], taken=taken, count=1)[0]]
        taken.add(best.tobytes())
        points.append(best)
    return np.asarray(points), fitted - began, time.perf_counter() - fitted


class _QUCB:
    """What both qUCB variants hold: their settings and the history (the evaluated
    solutions and objectives of the run, in evaluation order).

    Parameters
    ----------
    solution_dim : int
        Parameters of a solution.
    x0 : numpy.ndarray
        Unused (the initial design is random).
    bounds : tuple
        ``(low, high)`` of every parameter (required).
    seed : int
        The run's optimizer seed.
    batch_size : int
        Points per generation.
    kappa : float
        Mean of the exponential distribution of the exploration weights.
    initial_points : int
        Size of the random initial design.
    candidates : int
        Uniform candidates scored per proposal.
    trees : int
        Trees of the surrogate.
    refine_generations : int
        Generations of the genetic search that refines each proposal's UCB
        (:func:`refine_by_ucb`); 0 proposes the best candidate itself.
    space : list of dict, optional
        The domain's search space (:mod:`evocamp.model.space`): proposals are made in
        its unit cube (``bounds`` is then unused).
    refit_every : int, optional
        Refit the surrogate only every ``refit_every``-th told point and reuse it between
        (:func:`reused_surrogate`); 1 (the default) fits it for every proposal.
    kappa_schedule : dict, optional
        ``{"period": P, "kappa_final": F}``: every exploration weight decays
        periodically (:func:`kappa_decay`, DeepHyper's periodic exponential decay).
    cost : str, optional
        The extra field the evaluation reports as its cost (deterministic, positive):
        the acquisition becomes cost-aware (:func:`cost_weight`).
    cost_cooling : int, optional
        Evaluations after the initial design over which the cost's exponent falls from
        1 to 0 (:func:`cost_alpha`); none: 1 throughout.
    """

    #: History points a surrogate is fitted to at most (:data:`FIT_POINTS`; no key of
    #: the run spec, and a class attribute, so optimizers pickled before it have it; a
    #: benchmark may set it on an instance).
    fit_points = FIT_POINTS
    #: The cheapeners' settings (class attributes: optimizers pickled before them have them).
    refit_every = 1
    kappa_schedule = None
    cost = None
    cost_cooling = None

    def __init__(
        self,
        *,
        solution_dim: int,
        x0,
        bounds,
        seed: int,
        batch_size: int,
        kappa: float,
        initial_points: int,
        candidates: int,
        trees: int,
        refine_generations: int,
        space: list | None = None,
        refit_every: int = 1,
        kappa_schedule: dict | None = None,
        cost: str | None = None,
        cost_cooling: int | None = None,
    ) -> None:
        if space is not None:
            self.space, bounds = Space(space), (0.0, 1.0)
        if bounds is None:
            raise ValueError("Bayesian optimisation samples within bounds; the domain has none")
        self.bounds = (float(bounds[0]), float(bounds[1]))
        self.seed = int(seed)
        self.points = int(batch_size)
        self.kappa = float(kappa)
        self.initial_points = int(initial_points)
        self.candidates = int(candidates)
        self.trees = int(trees)
        self.refine_generations = int(refine_generations)
        self.refit_every = int(refit_every)
        self.kappa_schedule = None if kappa_schedule is None else dict(kappa_schedule)
        self.x = np.empty((0, int(solution_dim)))
        self.y = np.empty(0)
        self.generation = 0
        if cost is not None:  # (no attributes otherwise: pickles stay what they were)
            self.cost, self.costs = str(cost), np.empty(0)
            self.cost_cooling = None if cost_cooling is None else int(cost_cooling)

    def _in_space(self) -> dict:
        """``propose``'s ``snap`` and how its points become solutions, and the history's
        points (in a space's unit cube; as they are without one)."""
        space = getattr(self, "space", None)  # no attribute: a checkpoint of before spaces
        if space is None:
            return {"snap": None, "solutions": lambda points: points, "unit": lambda x: x}
        return {"snap": space.snap, "solutions": space.from_unit, "unit": space.to_unit}

    def _decayed(self, kappas: np.ndarray, proposed) -> np.ndarray:
        """``kappas`` under the kappa schedule, for proposals made after ``proposed``
        others (one count per kappa, or one for all)."""
        factors = [
            kappa_decay(
                self.kappa_schedule,
                kappa=self.kappa,
                proposed=int(count),
                initial_points=self.initial_points,
            )
            for count in np.broadcast_to(proposed, np.shape(kappas))
        ]
        return np.asarray(kappas) * np.asarray(factors)

    def _told_where(self) -> str:
        """A completion told in asynchronous mode, as a cost's error names it."""
        return f"asynchronous mode, completion told after {len(self.y)} others"

    def _refit(self) -> tuple[int, int] | None:
        """``propose``'s ``refit``: ``(refit_every, seed)``, or ``None`` (a fit per proposal)."""
        return (self.refit_every, self.seed) if self.refit_every > 1 else None

    def _cost(self) -> tuple[np.ndarray, float] | None:
        """``propose``'s ``cost``: the history's costs and the exponent now, or ``None``."""
        if self.cost is None:
            return None
        told = len(self.y)
        alpha = cost_alpha(self.cost_cooling, told=told, initial_points=self.initial_points)
        return self.costs, alpha

    def _record(self, solutions, objective, *, extra: dict, kept=slice(None), where="") -> None:
        """Add evaluated points to the history (``kept``: the rows that did not fail),
        with their costs when the acquisition is cost-aware (``where`` names the
        generation or evaluation in a cost's error)."""
        if self.cost is not None:
            values = extra.get(self.cost)
            values = None if values is None else np.asarray(values, dtype=np.float64)[kept]
            costs = checked_costs(values, field=self.cost, where=where)
            self.costs = np.concatenate([self.costs, costs])
        self.x = np.concatenate([self.x, np.asarray(solutions, dtype=np.float64)[kept]])
        self.y = np.concatenate([self.y, np.asarray(objective, dtype=np.float64)[kept]])


class CentralisedQUCB(_QUCB):
    """qUCB proposed centrally: ``ask`` fits one surrogate to the whole history and
    proposes ``batch_size`` points, point ``j`` with worker ``j``'s kappa. Parameters
    as :class:`_QUCB`."""

    def __init__(self, **settings) -> None:
        super().__init__(**settings)
        self.kappas = np.concatenate(
            [
                exploration_weights(self.seed, kappa=self.kappa, worker=worker, count=1)
                for worker in range(self.points)
            ]
        )
        self.pending = None
        self.timings = {"fit_seconds": np.nan, "propose_seconds": np.nan}

    def ask(self) -> np.ndarray:
        """Fit the surrogate and propose the next batch."""
        self.generation += 1
        space = self._in_space()
        points, fit_seconds, propose_seconds = propose(
            space["unit"](self.x),
            self.y,
            kappas=self._decayed(self.kappas, (self.generation - 1) * self.points),
            bounds=self.bounds,
            candidates=self.candidates,
            trees=self.trees,
            initial_points=self.initial_points,
            refine_generations=self.refine_generations,
            rng=proposal_rng(self.seed, generation=self.generation, worker=0),
            snap=space["snap"],
            fit_points=self.fit_points,
            refit=self._refit(),
            cost=self._cost(),
        )
        points = space["solutions"](points)
        self.pending = points
        self.timings = {"fit_seconds": fit_seconds, "propose_seconds": propose_seconds}
        return points

    def tell(self, objective, measures, *, failed=None, **extra) -> None:
        """Add the evaluated batch to the history (not the failed points, ``failed``:
        the surrogate is never fitted on them)."""
        kept = slice(None) if failed is None else ~np.asarray(failed, dtype=bool)
        where = f"generation {self.generation}"
        self._record(self.pending, objective, extra=extra, kept=kept, where=where)
        self.pending = None

    def ask_async(self, *, slots, evaluations) -> np.ndarray:
        """Asynchronous mode: fit the surrogate to the history told so far and propose
        one point per freed slot, with that slot's (worker's) kappa; points still being
        evaluated are not proposed again."""
        in_flight = getattr(self, "in_flight", np.empty((0, self.x.shape[1])))
        kappas = np.array(
            [
                exploration_weights(self.seed, kappa=self.kappa, worker=int(slot), count=1)[0]
                for slot in slots
            ]
        )
        space = self._in_space()
        points, fit_seconds, propose_seconds = propose(
            space["unit"](self.x),
            self.y,
            kappas=self._decayed(kappas, np.asarray(evaluations)),
            bounds=self.bounds,
            candidates=self.candidates,
            trees=self.trees,
            initial_points=self.initial_points,
            refine_generations=self.refine_generations,
            rng=proposal_rng(self.seed, generation=int(evaluations[0]), worker=0),
            pending=space["unit"](in_flight),
            snap=space["snap"],
            fit_points=self.fit_points,
            refit=self._refit(),
            cost=self._cost(),
        )
        points = space["solutions"](points)
        self.in_flight = np.concatenate([in_flight, points])
        self.timings = {"fit_seconds": fit_seconds, "propose_seconds": propose_seconds}
        return points

    def tell_async(self, objective, measures, *, solutions, failed=None, **extra) -> None:
        """Asynchronous mode: add finished points to the history (not the failed ones,
        ``failed``) and take them all out of the points in flight."""
        kept = slice(None) if failed is None else ~np.asarray(failed, dtype=bool)
        self._record(solutions, objective, extra=extra, kept=kept, where=self._told_where())
        done = {np.asarray(point, dtype=np.float64).tobytes() for point in solutions}
        keep = [point.tobytes() not in done for point in self.in_flight]
        self.in_flight = self.in_flight[np.asarray(keep, dtype=bool)]

    def stats(self) -> dict:
        """Seconds the last ``ask`` spent fitting and proposing."""
        return dict(self.timings)


def _in_unit(space, points: np.ndarray) -> np.ndarray:
    """``points`` (solutions) in ``space``'s unit cube, or as they are without a space."""
    return points if space is None else space.to_unit(points)


class DecentralisedBatch(CompactBatch):
    """A decentralised qUCB batch: the history (``x``, ``y``) and what a shard needs to
    propose from it (``bounds``, ``kappa``, ``seed``, ``generation``, ``settings``:
    batch size, shards, initial points, candidates, trees, refine generations, fit
    points); asynchronous proposals ahead add ``pending``, the point the slot was
    evaluating when the proposal was asked (a believer of :func:`propose`); the
    cheapeners, when set, ``refit_every`` and ``kappa_schedule`` (period, final kappa);
    a cost-aware run, ``costs`` (one per history point) and ``cost_cooling`` (-1: none)."""

    proposes_in_shards = True
    #: Imported once by Dask mode's worker fork server (every shard fits a surrogate).
    shard_modules = ("sklearn.ensemble",)

    @staticmethod
    def size(batch) -> int:
        """Points of the generation (``batch_size``)."""
        return int(batch["settings"][0])

    @staticmethod
    def solutions(batch, start: int, stop: int) -> dict:
        """Shard proposal: fit a surrogate to the history and propose the points of the
        shard whose slice is ``start..stop-1``, with that shard's kappas."""
        size, shards, initial_points, candidates, trees, refine_generations, *bound = (
            int(v) for v in batch["settings"][()]
        )  # (states written before the fit was bounded hold no bound: FIT_POINTS)
        if "worker" in batch:  # asynchronous mode: one proposal of one worker slot
            worker = int(batch["worker"][0])
        else:
            worker = shard_of_slice(size, shards, start, stop)
        if worker is None:
            raise ValueError(
                f"solutions {start}..{stop - 1} are not one shard's slice of a batch of "
                f"{size} in {shards} shards: decentralised proposals are made per shard"
            )
        seed = int(batch["seed"][0])
        generation = int(batch["generation"][0])  # (asynchronous mode: the evaluation id)
        schedule = None
        if "kappa_schedule" in batch:
            period, final = batch["kappa_schedule"][()]
            schedule = {"period": int(period), "kappa_final": float(final)}
        kappa = float(batch["kappa"][0])
        every = int(batch["refit_every"][0]) if "refit_every" in batch else 1
        space = Space(json.loads(bytes(batch["space"][()]))) if "space" in batch else None
        x, y = batch["x"][()], batch["y"][()]
        cost = None
        if "costs" in batch:
            cooling = int(batch["cost_cooling"][0])
            alpha = cost_alpha(
                None if cooling < 0 else cooling, told=len(y), initial_points=initial_points
            )
            cost = (batch["costs"][()], alpha)
        points, fit_seconds, propose_seconds = propose(
            _in_unit(space, x),
            y,
            kappas=exploration_weights(seed, kappa=kappa, worker=worker, count=stop - start)
            * kappa_decay(
                schedule,
                kappa=kappa,
                proposed=generation if "worker" in batch else (generation - 1) * size,
                initial_points=initial_points,
            ),
            bounds=tuple(float(b) for b in batch["bounds"][()]),
            candidates=candidates,
            trees=trees,
            initial_points=initial_points,
            refine_generations=refine_generations,
            rng=proposal_rng(seed, generation=generation, worker=worker),
            snap=None if space is None else space.snap,
            fit_points=bound[0] if bound else FIT_POINTS,
            lies=_in_unit(space, batch["pending"][()]) if "pending" in batch else None,
            refit=(every, seed) if every > 1 else None,
            cost=cost,
        )
        return {
            "solutions": points if space is None else space.from_unit(points),
            "fit_seconds": fit_seconds,
            "propose_seconds": propose_seconds,
        }


class DecentralisedQUCB(_QUCB):
    """qUCB proposed by the evaluation shards (ADBO): the batch is the history, and
    shard ``s`` fits its own surrogate and proposes its own points with its own
    kappas (worker ``s``), from the run's seed, the generation and ``s``.

    Parameters are those of :class:`_QUCB` plus ``shards``: the shard count, part of
    the algorithm (every shard is one decentralised worker).
    """

    batch_format = DecentralisedBatch

    def __init__(self, *, shards: int, **settings) -> None:
        super().__init__(**settings)
        self.shards = int(shards)

    def ask(self) -> dict:
        """The next batch: the history and what the shards need to propose from it."""
        self.generation += 1
        return self._batch(generation=self.generation, size=self.points, shards=self.shards)

    def ask_async(self, *, slots, evaluations) -> list[dict]:
        """Asynchronous mode (ADBO proper): one batch per freed slot, holding the history
        told so far; the worker fits its own surrogate and proposes with its slot's
        kappa (its random numbers are keyed by the evaluation id)."""
        return [
            self._batch(generation=int(evaluation), size=1, shards=1, worker=int(slot))
            for slot, evaluation in zip(slots, evaluations, strict=True)
        ]

    def tell_async(self, objective, measures, *, solutions, **extra) -> None:
        """Asynchronous mode: add finished points (proposed by the workers) to the history."""
        self._record(solutions, objective, extra=extra, where=self._told_where())

    def _batch(self, *, generation: int, size: int, shards: int, worker: int | None = None):
        batch = {
            "x": self.x,
            "y": self.y,
            "bounds": np.asarray(self.bounds),
            "settings": np.asarray(
                [
                    size,
                    shards,
                    self.initial_points,
                    self.candidates,
                    self.trees,
                    self.refine_generations,
                    self.fit_points,
                ],
                dtype=np.int64,
            ),
            "kappa": np.asarray([self.kappa]),
            "seed": np.asarray([self.seed], dtype=np.uint64),
            "generation": np.asarray([generation], dtype=np.int64),
        }
        if worker is not None:
            batch["worker"] = np.asarray([worker], dtype=np.int64)
        if self.refit_every > 1:
            batch["refit_every"] = np.asarray([self.refit_every], dtype=np.int64)
        if self.kappa_schedule is not None:
            schedule = self.kappa_schedule
            batch["kappa_schedule"] = np.asarray(
                [schedule["period"], schedule["kappa_final"]], dtype=np.float64
            )
        if self.cost is not None:  # the history's costs; cooling -1: none
            batch["costs"] = self.costs
            cooling = -1 if self.cost_cooling is None else self.cost_cooling
            batch["cost_cooling"] = np.asarray([cooling], dtype=np.int64)
        if getattr(self, "space", None) is not None:  # its parameters as JSON bytes
            text = json.dumps(self.space.entries, separators=(",", ":"))
            batch["space"] = np.frombuffer(text.encode(), dtype=np.uint8)
        return batch

    def tell(self, objective, measures, *, solutions, failed=None, **extra) -> None:
        """Add the solutions the shards proposed and their objectives to the history
        (not the failed ones, ``failed``: the surrogates are never fitted on them)."""
        kept = slice(None) if failed is None else ~np.asarray(failed, dtype=bool)
        where = f"generation {self.generation}"
        self._record(solutions, objective, extra=extra, kept=kept, where=where)
