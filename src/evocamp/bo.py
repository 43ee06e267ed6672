"""Bayesian optimisation: batch UCB (qUCB) with a tree-ensemble surrogate.

Two optimizers share one proposal step (:func:`propose`): fit scikit-learn's
``ExtraTreesRegressor`` to the history, take the spread of its trees' predictions as
the uncertainty, and pick, for each exploration weight kappa, the candidate (uniform
within the bounds) with the highest upper confidence bound ``mean + kappa * std``.
Kappas are drawn from an exponential distribution with mean ``kappa`` (qUCB), one per
worker and slot, from the run's seed: :func:`exploration_weights`.

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
"""

from __future__ import annotations

import time

import numpy as np

#: Streams of the optimizer seed (SeedSequence spawn keys).
KAPPA_STREAM = 1
PROPOSAL_STREAM = 2
#: Defaults of the algorithm keys (the config fills them into the run spec).
BO_DEFAULTS = {
    "batch_size": 8,
    "kappa": 1.96,
    "initial_points": 10,
    "candidates": 10000,
    "trees": 25,
}


def bo_params(algorithm: dict) -> dict:
    """Keyword arguments of a BO class from its resolved algorithm spec."""
    params = {name: algorithm[name] for name in BO_DEFAULTS}
    if algorithm["type"] == "qucb_decentralised":
        params["shards"] = algorithm["shards"]
    return params


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


def fit_surrogate(x: np.ndarray, y: np.ndarray, *, trees: int, rng: np.random.Generator):
    """An ``ExtraTreesRegressor`` of ``trees`` trees fitted to the history (one thread)."""
    from sklearn.ensemble import ExtraTreesRegressor

    model = ExtraTreesRegressor(n_estimators=trees, random_state=int(rng.integers(2**31)))
    return model.fit(x, y)


def tree_mean_std(model, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation over the ensemble's trees at ``points``."""
    predictions = np.stack([tree.predict(points) for tree in model.estimators_])
    return predictions.mean(axis=0), predictions.std(axis=0)


def select_by_ucb(mean: np.ndarray, std: np.ndarray, kappas: np.ndarray) -> np.ndarray:
    """Indices of the candidates chosen for each kappa in turn: the highest
    ``mean + kappa * std`` among those not chosen yet (first index on ties)."""
    chosen = []
    taken = np.zeros(len(mean), dtype=bool)
    for kappa in kappas:
        score = np.where(taken, -np.inf, mean + kappa * std)
        index = int(np.argmax(score))
        taken[index] = True
        chosen.append(index)
    return np.asarray(chosen, dtype=np.int64)


def propose(
    x: np.ndarray,
    y: np.ndarray,
    *,
    kappas: np.ndarray,
    bounds: tuple[float, float],
    candidates: int,
    trees: int,
    initial_points: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, float, float]:
    """Propose one point per kappa from the history ``(x, y)`` (maximisation).

    Returns
    -------
    tuple
        ``(points, fit_seconds, propose_seconds)``; both times are 0 while the history
        is smaller than ``initial_points`` (uniform samples: the initial design).
    """
    low, high = bounds
    count = len(kappas)
    dim = x.shape[1]
    if len(y) < initial_points:
        return rng.uniform(low, high, (count, dim)), 0.0, 0.0
    began = time.perf_counter()
    model = fit_surrogate(x, y, trees=trees, rng=rng)
    fitted = time.perf_counter()
    pool = rng.uniform(low, high, (max(candidates, count), dim))
    mean, std = tree_mean_std(model, pool)
    points = pool[select_by_ucb(mean, std, kappas)]
    return points, fitted - began, time.perf_counter() - fitted


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
    """

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
    ) -> None:
        if bounds is None:
            raise ValueError("Bayesian optimisation samples within bounds; the domain has none")
        self.bounds = (float(bounds[0]), float(bounds[1]))
        self.seed = int(seed)
        self.points = int(batch_size)
        self.kappa = float(kappa)
        self.initial_points = int(initial_points)
        self.candidates = int(candidates)
        self.trees = int(trees)
        self.x = np.empty((0, int(solution_dim)))
        self.y = np.empty(0)
        self.generation = 0

    def _record(self, solutions: np.ndarray, objective: np.ndarray) -> None:
        self.x = np.concatenate([self.x, np.asarray(solutions, dtype=np.float64)])
        self.y = np.concatenate([self.y, np.asarray(objective, dtype=np.float64)])


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
        points, fit_seconds, propose_seconds = propose(
            self.x,
            self.y,
            kappas=self.kappas,
            bounds=self.bounds,
            candidates=self.candidates,
            trees=self.trees,
            initial_points=self.initial_points,
            rng=proposal_rng(self.seed, generation=self.generation, worker=0),
        )
        self.pending = points
        self.timings = {"fit_seconds": fit_seconds, "propose_seconds": propose_seconds}
        return points

    def tell(self, objective, measures, **extra) -> None:
        """Add the evaluated batch to the history."""
        self._record(self.pending, objective)
        self.pending = None

    def stats(self) -> dict:
        """Seconds the last ``ask`` spent fitting and proposing."""
        return dict(self.timings)


class DecentralisedQUCB(_QUCB):
    """qUCB proposed by the evaluation shards (ADBO): the batch is the history, and
    shard ``s`` fits its own surrogate and proposes its own points with its own
    kappas (worker ``s``), from the run's seed, the generation and ``s``.

    Parameters are those of :class:`_QUCB` plus ``shards``: the shard count, part of
    the algorithm (every shard is one decentralised worker).
    """

    proposes_in_shards = True
    #: Imported once by Dask mode's worker fork server (every shard fits a surrogate).
    shard_modules = ("sklearn.ensemble",)

    def __init__(self, *, shards: int, **settings) -> None:
        super().__init__(**settings)
        self.shards = int(shards)

    def ask(self) -> dict:
        """The next batch: the history and what the shards need to propose from it."""
        self.generation += 1
        return {
            "x": self.x,
            "y": self.y,
            "bounds": np.asarray(self.bounds),
            "settings": np.asarray(
                [self.points, self.shards, self.initial_points, self.candidates, self.trees],
                dtype=np.int64,
            ),
            "kappa": np.asarray([self.kappa]),
            "seed": np.asarray([self.seed], dtype=np.uint64),
            "generation": np.asarray([self.generation], dtype=np.int64),
        }

    @staticmethod
    def batch_size(batch) -> int:
        """Points of the generation (``batch_size``)."""
        return int(batch["settings"][0])

    @staticmethod
    def solutions(batch, start: int, stop: int) -> dict:
        """Shard proposal: fit a surrogate to the history and propose the points of the
        shard whose slice is ``start..stop-1``, with that shard's kappas."""
        from evocamp.storage import shard_bounds

        size, shards, initial_points, candidates, trees = (int(v) for v in batch["settings"][()])
        starts = {shard_bounds(size, shards, shard): shard for shard in range(shards)}
        worker = starts.get((start, stop))
        if worker is None:
            raise ValueError(
                f"solutions {start}..{stop - 1} are not one shard's slice of a batch of "
                f"{size} in {shards} shards: decentralised proposals are made per shard"
            )
        seed = int(batch["seed"][0])
        points, fit_seconds, propose_seconds = propose(
            batch["x"][()],
            batch["y"][()],
            kappas=exploration_weights(
                seed, kappa=float(batch["kappa"][0]), worker=worker, count=stop - start
            ),
            bounds=tuple(float(b) for b in batch["bounds"][()]),
            candidates=candidates,
            trees=trees,
            initial_points=initial_points,
            rng=proposal_rng(seed, generation=int(batch["generation"][0]), worker=worker),
        )
        return {
            "solutions": points,
            "fit_seconds": fit_seconds,
            "propose_seconds": propose_seconds,
        }

    def tell(self, objective, measures, *, solutions, **extra) -> None:
        """Add the solutions the shards proposed and their objectives to the history."""
        self._record(solutions, objective)
