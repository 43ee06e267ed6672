"""The surrogate of Bayesian optimisation (:mod:`evocamp.families.bo`) and the search of
its upper confidence bound: scikit-learn's ``ExtraTreesRegressor`` fitted to a bounded,
deterministic subset of the history (:func:`training_subset`), or reused between refits
(:func:`reused_surrogate`), the spread of its trees' predictions as the uncertainty
(:func:`tree_mean_std`), the genetic search for a point of high UCB
(:func:`refine_by_ucb`) and the schedule of its weight (:func:`kappa_decay`); with a
cost field, a second ensemble of the same trees on the log cost and the cost-aware
acquisition (:class:`CostWeight`). scikit-learn is imported only when a surrogate is
fitted.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from evocamp.base.errors import OptimizerError

#: Streams of the optimizer seed (SeedSequence spawn keys) drawn here.
MODEL_STREAM = 3


def fit_surrogate(x: np.ndarray, y: np.ndarray, *, trees: int, rng: np.random.Generator):
    """An ``ExtraTreesRegressor`` of ``trees`` trees fitted to the history (one thread)."""
    from sklearn.ensemble import ExtraTreesRegressor

    model = ExtraTreesRegressor(n_estimators=trees, random_state=int(rng.integers(2**31)))
    return model.fit(x, y)


def tree_mean_std(model, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation over the ensemble's trees at ``points``.

    The points are converted to float32 once and the trees skip their input checks, as
    the forest's own ``predict`` does (the checks cost more than the trees themselves
    on the genetic search's small batches)."""
    checked = np.ascontiguousarray(points, dtype=np.float32)
    predictions = np.stack([tree.predict(checked, check_input=False) for tree in model.estimators_])
    return predictions.mean(axis=0), predictions.std(axis=0)


#: The genetic search that refines each proposal's UCB maximum (:func:`refine_by_ucb`):
#: parents kept, children per generation, mutation scale as a fraction of the bounds'
#: width (each parameter mutates with probability 1 / solution_dim).
PARENTS = 50
CHILDREN = 200
MUTATION_SCALE = 0.1


def kappa_decay(schedule, *, kappa: float, proposed: int, initial_points: int) -> float:
    """The factor of DeepHyper's periodic exponential decay of the exploration weight
    (its CBO's ``scheduler={"type": "periodic-exp-decay", "period": P, "kappa_final":
    F}``) for a proposal made after ``proposed`` others: ``(F / kappa) ** (t / P)`` with
    ``t = (proposed - initial_points) mod P``, so the weight falls from ``kappa`` towards
    ``F`` over ``P`` proposals and starts again; 1 without a schedule (``None``)."""
    if schedule is None:
        return 1.0
    period, final = int(schedule["period"]), float(schedule["kappa_final"])
    return (final / kappa) ** (((proposed - initial_points) % period) / period)


def ucb(mean: np.ndarray, std: np.ndarray, kappa: float) -> np.ndarray:
    """The upper confidence bound ``mean + kappa * std``."""
    return mean + kappa * std


@dataclass(frozen=True)
class CostWeight:
    """The cost-aware acquisition (cost-aware BO: expected improvement per second,
    Snoek et al. 2012; EI-cool, Lee et al. 2020) on a UCB: a candidate's gain over the
    incumbent, ``UCB - incumbent``, divided by its predicted cost to the power
    ``alpha`` where it is positive, and multiplied by it where it is not (so any
    predicted improvement ranks above none, and among points that improve nothing the
    cheaper still ranks first). The cost is predicted by ``model``, the same tree
    ensemble fitted to the log costs of the history less their median (a cost relative
    to the history's typical one: the ranking does not depend on the cost's unit).
    ``alpha`` 0 ranks as the UCB itself."""

    #: The ensemble fitted to the (centred) log costs.
    model: object
    #: The exponent of the cost (1: gain per unit of cost; cooled towards 0).
    alpha: float
    #: The best objective of the history.
    incumbent: float

    def __call__(self, points: np.ndarray, score: np.ndarray) -> np.ndarray:
        """The acquisition of ``points`` whose UCB is ``score``."""
        if self.alpha == 0.0:
            return score - self.incumbent
        log_cost, _ = tree_mean_std(self.model, points)
        weight = np.exp(self.alpha * log_cost)
        gain = score - self.incumbent
        return np.where(gain > 0.0, gain / weight, gain * weight)


def acquisition(model, points: np.ndarray, *, kappa: float, cost: CostWeight | None = None):
    """The acquisition of ``points``: the UCB with weight ``kappa`` of ``model``, weighted
    by ``cost`` (:class:`CostWeight`) when given."""
    score = ucb(*tree_mean_std(model, points), kappa)
    return score if cost is None else cost(points, score)


def best_first(score: np.ndarray, count: int) -> np.ndarray:
    """Indices of the ``count`` highest scores, highest first (first index on ties)."""
    return np.argsort(-score, kind="stable")[:count]


def row_keys(points: np.ndarray) -> list[bytes]:
    """Every row's bytes (what ``row.tobytes()`` gives), read in one pass: the keys of
    :func:`ranked`'s ``taken``."""
    points = np.ascontiguousarray(points)
    return points.view(f"V{points.itemsize * points.shape[1]}").ravel().tolist()


def ranked(points: np.ndarray, score: np.ndarray, *, taken: set[bytes], count: int) -> np.ndarray:
    """Indices of the ``count`` best ``points`` by ``score``, best first, with points in
    ``taken`` (their bytes) and repeats of a point ranked after all others."""
    seen = set()
    fresh = np.ones(len(points), dtype=bool)
    for index, key in enumerate(row_keys(points)):
        fresh[index] = key not in taken and key not in seen
        seen.add(key)
    order = np.lexsort((np.arange(len(points)), -score, ~fresh))
    return order[:count]


def refine_by_ucb(
    model,
    population: np.ndarray,
    *,
    kappa: float,
    bounds: tuple[float, float],
    generations: int,
    taken: set[bytes],
    rng: np.random.Generator,
    snap: Callable[[np.ndarray], np.ndarray] | None = None,
    cost: CostWeight | None = None,
) -> np.ndarray:
    """A genetic search for the maximum of the UCB with weight ``kappa`` (weighted by
    ``cost`` when given: :func:`acquisition`).

    Every generation breeds :data:`CHILDREN` children from the population by uniform
    crossover of two random parents and Gaussian mutation, and keeps the
    :data:`PARENTS` best of parents and children by UCB, points in ``taken`` (evaluated
    or proposed already, as bytes) and repeats last (elitist: the best new point never
    gets worse). Crossover recombines good values of different parameters, which
    uniform candidates alone cannot do in many dimensions (the role of DeepHyper's
    ``mixedga``). ``snap`` maps the children to the points of a space's solutions.

    Returns
    -------
    numpy.ndarray
        The final population, best first.
    """
    low, high = bounds
    dim = population.shape[1]
    score = acquisition(model, population, kappa=kappa, cost=cost)
    for _ in range(generations):
        first = population[rng.integers(0, len(population), CHILDREN)]
        second = population[rng.integers(0, len(population), CHILDREN)]
        children = np.where(rng.random((CHILDREN, dim)) < 0.5, first, second)
        mutated = rng.random((CHILDREN, dim)) < 1.0 / dim
        steps = rng.normal(0.0, MUTATION_SCALE * (high - low), (CHILDREN, dim))
        children = np.clip(children + mutated * steps, low, high)
        if snap is not None:
            children = snap(children)
        population = np.concatenate([population, children])
        score = np.concatenate([score, acquisition(model, children, kappa=kappa, cost=cost)])
        keep = ranked(population, score, taken=taken, count=PARENTS)
        population, score = population[keep], score[keep]
    return population[ranked(population, score, taken=taken, count=PARENTS)]


#: Most history points a surrogate is fitted to (:func:`training_subset`): the fit's
#: cost stops growing with the history beyond it.
FIT_POINTS = 1000


def training_subset(y: np.ndarray, *, limit: int) -> np.ndarray:
    """Indices (ascending) of the history points a surrogate is fitted to: all of them
    up to ``limit``, else the ``limit // 2`` best objectives (first index on ties) and
    the most recent of the others up to ``limit`` in all.

    A deterministic function of the history alone, so a proposal stays one of the
    completion log; the best points keep the surrogate sharp where the incumbent is,
    the most recent ones where the workers are searching now.
    """
    count = len(y)
    if count <= limit:
        return np.arange(count)
    chosen = np.zeros(count, dtype=bool)
    chosen[_best_rows(y, limit // 2)] = True
    others = np.flatnonzero(~chosen)
    chosen[others[len(others) - (limit - limit // 2) :]] = True
    return np.flatnonzero(chosen)


def _best_rows(y: np.ndarray, count: int) -> np.ndarray:
    """The rows of the ``count`` highest ``y`` (first index on ties): those of a stable
    sort of ``-y``, found in linear time with a partition around the ``count``-th value
    (a sort of the whole history grew with it)."""
    if count == 0:
        return np.empty(0, dtype=np.int64)
    if np.isnan(y).any():  # (a stable sort puts NaN last; no partition needed)
        return np.argsort(-y, kind="stable")[:count]
    threshold = np.partition(y, len(y) - count)[len(y) - count]
    above = np.flatnonzero(y > threshold)
    level = np.flatnonzero(y == threshold)
    return np.concatenate([above, level[: count - len(above)]])


#: Surrogates fitted in this process for reuse (:func:`reused_surrogate`), newest last.
_SURROGATES: dict[bytes, object] = {}
_SURROGATES_KEPT = 4
_SURROGATES_LOCK = threading.Lock()


def reused_surrogate(
    x: np.ndarray,
    y: np.ndarray,
    *,
    every: int,
    initial_points: int,
    trees: int,
    seed: int,
    fit_points: int = FIT_POINTS,
):
    """The surrogate refitted only every ``every``-th told point: fitted to the first
    ``m = initial_points + k * every`` points of the history (``k`` the most that fit),
    (at most ``fit_points`` of them, :func:`training_subset`), with its random state
    from ``seed`` and ``m`` alone, so every proposal between two
    refits uses the same model, a pure function of the history (a proposal stays one of
    the completion log). Fitted models are kept in this process (the last few) and
    reused; a process that lacks one fits the same model again.

    Returns
    -------
    object
        The fitted ``ExtraTreesRegressor``.
    """
    count = initial_points + ((len(y) - initial_points) // every) * every
    rows = training_subset(y[:count], limit=fit_points)
    fit_x, fit_y = x[:count][rows], y[:count][rows]
    digest = hashlib.blake2b(digest_size=16)
    for part in (np.asarray([seed, count, trees], dtype=np.int64), fit_x, fit_y):
        digest.update(np.ascontiguousarray(part).tobytes())
    key = digest.digest()
    with _SURROGATES_LOCK:  # (a Dask worker's lanes, or a proposal made ahead, are threads)
        model = _SURROGATES.pop(key, None)
    if model is None:
        stream = np.random.SeedSequence(seed, spawn_key=(MODEL_STREAM, count))
        model = fit_surrogate(fit_x, fit_y, trees=trees, rng=np.random.default_rng(stream))
    with _SURROGATES_LOCK:
        _SURROGATES[key] = model
        while len(_SURROGATES) > _SURROGATES_KEPT:
            del _SURROGATES[next(iter(_SURROGATES))]
    return model


def cost_weight(
    x: np.ndarray,
    y: np.ndarray,
    *,
    cost: tuple[np.ndarray, float],
    rows: np.ndarray,
    trees: int,
    rng: np.random.Generator,
) -> CostWeight:
    """The cost-aware acquisition of a proposal (:class:`CostWeight`): the tree ensemble
    fitted to the log costs of the history's ``rows`` (those the objective's surrogate
    is fitted to, :func:`training_subset`), less their median, with the exponent ``cost[1]`` and
    the history's best objective as the incumbent. Its random state is drawn from
    ``rng`` after the objective's surrogate's, so a run without ``cost`` draws what it
    drew."""
    costs, alpha = cost
    log_cost = np.log(np.asarray(costs, dtype=np.float64)[rows])
    model = None
    if alpha != 0.0:
        model = fit_surrogate(x[rows], log_cost - np.median(log_cost), trees=trees, rng=rng)
    return CostWeight(model=model, alpha=float(alpha), incumbent=float(np.max(y)))


def cost_alpha(cooling: int | None, *, told: int, initial_points: int) -> float:
    """The exponent of the cost after ``told`` evaluations: 1 without ``cooling``
    (gain per unit of cost throughout), else falling linearly from 1 after the initial
    design to 0 ``cooling`` evaluations later (EI-cool's cooling over the budget, Lee
    et al. 2020: cheap points first, the plain UCB at the end)."""
    if cooling is None:
        return 1.0
    return float(min(1.0, max(0.0, 1.0 - (told - initial_points) / int(cooling))))


def checked_costs(values, *, field: str, where: str) -> np.ndarray:
    """The costs a tell received (the field ``field``), checked to be positive and
    finite.

    Raises
    ------
    OptimizerError
        Naming ``where`` (the generation or evaluation) and the first solution whose
        cost is missing, not finite or not positive.
    """
    if values is None:
        raise OptimizerError(
            f"{where}: qUCB's key 'cost' names the field '{field}', which the evaluation "
            "did not report (add it to the domain's extra_fields and return it)"
        )
    costs = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~(np.isfinite(costs) & (costs > 0.0)))
    if len(bad):
        raise OptimizerError(
            f"{where}, solution {int(bad[0])}: qUCB's key 'cost' names the field "
            f"'{field}', whose value {float(costs[bad[0]])!r} is no positive finite cost"
        )
    return costs
