"""Optuna's samplers (TPE, CMA-ES, GP, random, quasi-Monte Carlo) through Optuna's own
ask/tell on an in-memory study.

One generation is one batch of ``batch_size`` trials asked one after the other
(``study.ask`` with the run's search space: ``x0 .. x{d-1}``, each a float within the
domain's bounds) and told in batch order (``study.tell``; a failed solution as a
failed trial, which the samplers leave out); in asynchronous mode each freed slot gets
one trial and each result is told as it arrives, as Optuna's ask/tell allows.

On a domain with a search space (:mod:`evocamp.model.space`) the trial asks its
parameters define-by-run, each after those its condition names and only when active:
a real as ``suggest_float`` (``log`` as declared), an integer as ``suggest_int``, a
categorical as ``suggest_categorical`` of its choices, an ordinal as ``suggest_int`` of
its codes (Optuna has no ordinal type: the order is kept); the solution holds them as
the space encodes them (codes, NaN for inactive parameters).

Randomness: each sampler draws from its own generator, seeded from the run's optimizer
seed (Optuna's ``seed``); the study (its in-memory storage: trials, the samplers'
system attributes such as CMA-ES's pickled state) is pickled with the optimizer, so a
tell step in another process continues bit for bit. With the same seed, Optuna's own
loop in one process (``create_study(sampler=..)``, ask and tell) evaluates the same
solutions (``tests/unit/test_libraries.py``); the GP sampler's fits run in torch on
one thread (``OMP_NUM_THREADS=1``, set by evocamp for every process).

``optuna`` is imported inside the class (an optional extra:
``pip install 'evocamp[optuna]'``; the GP sampler needs ``torch`` as well:
``pip install 'evocamp[optuna-gp]'``).
"""

from __future__ import annotations

import warnings

import numpy as np

from evocamp.model.space import Space

#: The samplers by the names ``sampler:`` takes, each Optuna's class name.
SAMPLERS = {
    "tpe": "TPESampler",
    "cmaes": "CmaEsSampler",
    "gp": "GPSampler",
    "random": "RandomSampler",
    "qmc": "QMCSampler",
}


def optuna_seed(seed: int) -> int:
    """The seed Optuna's sampler gets for a run's optimizer seed (below ``2**32``)."""
    return int(seed) % 2**32


def make_sampler(name: str, *, seed: int):
    """Optuna's sampler ``name`` (a key of :data:`SAMPLERS`) seeded with ``seed``, with
    Optuna's defaults but for quasi-Monte Carlo, a scrambled Sobol sequence (the seed
    draws the scrambling; unscrambled, every seed would give the same points)."""
    import optuna

    cls = getattr(optuna.samplers, SAMPLERS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "qmc":
            return cls(qmc_type="sobol", scramble=True, seed=seed)
        return cls(seed=seed)


def search_space(*, solution_dim: int, bounds) -> dict:
    """The trials' distributions: ``x{i}``, a float within ``bounds``, per parameter."""
    import optuna

    low, high = float(bounds[0]), float(bounds[1])
    return {f"x{i}": optuna.distributions.FloatDistribution(low, high) for i in range(solution_dim)}


def quiet() -> None:
    """Optuna's per-trial INFO lines off the job logs (warnings stay)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


class OptunaSampler:
    """One of Optuna's samplers (``sampler``: a key of :data:`SAMPLERS`) maximising the
    objective through an in-memory study's ask and tell.

    Parameters
    ----------
    solution_dim : int
        Parameters of a solution.
    x0 : numpy.ndarray
        Unused: Optuna's samplers start from their search space (CMA-ES from its
        centre; its ``x0`` is deprecated since Optuna 4.9).
    bounds : tuple
        ``(low, high)`` of every parameter (required).
    seed : int
        The run's optimizer seed (:func:`optuna_seed`).
    sampler : str
        ``tpe``, ``cmaes``, ``gp``, ``random`` or ``qmc``.
    batch_size : int
        Trials per generation.
    space : list of dict, optional
        The domain's search space (:mod:`evocamp.model.space`; ``bounds`` unused).
    """

    def __init__(
        self,
        *,
        solution_dim: int,
        x0,
        bounds,
        seed: int,
        sampler: str,
        batch_size: int,
        space: list | None = None,
    ):
        import optuna

        quiet()
        self.space = None if space is None else Space(space)
        if self.space is None:
            self.distributions = search_space(solution_dim=int(solution_dim), bounds=bounds)
        else:
            self.distributions = {name: None for name in self.space.names}
        self.batch_size = int(batch_size)
        self.study = optuna.create_study(
            direction="maximize",
            sampler=make_sampler(sampler, seed=optuna_seed(seed)),
        )
        self.asked: list[tuple[int, np.ndarray]] = []  # (trial number, solution)

    def _ask(self, count: int) -> np.ndarray:
        quiet()
        rows = []
        for _ in range(count):
            if self.space is None:
                trial = self.study.ask(self.distributions)
                row = np.array([trial.params[name] for name in self.distributions], np.float64)
            else:
                trial = self.study.ask()
                row = self.space.solution(suggested(trial, self.space))
            self.asked.append((trial.number, row))
            rows.append(row)
        return np.array(rows, dtype=np.float64).reshape(count, len(self.distributions))

    def _tell(self, number: int, value: float, lost: bool) -> None:
        import optuna

        quiet()
        if lost or not np.isfinite(value):
            self.study.tell(number, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(number, float(value))

    def ask(self) -> np.ndarray:
        """``batch_size`` trials, asked one after the other."""
        self.asked = []
        return self._ask(self.batch_size)

    def tell(self, objective, measures=None, *, failed=None, **extra) -> None:
        """Every trial of the batch told in batch order; a failed one (``failed``) as a
        failed trial."""
        failed = np.zeros(len(self.asked), bool) if failed is None else np.asarray(failed)
        for (number, _), value, lost in zip(self.asked, objective, failed, strict=True):
            self._tell(number, float(value), bool(lost))
        self.asked = []

    def ask_async(self, *, slots, evaluations) -> np.ndarray:
        """Asynchronous mode: one trial per freed slot."""
        return self._ask(len(slots))

    def tell_async(self, objective, measures, *, solutions, failed=None, **extra) -> None:
        """The finished trials, found by their solutions among those in flight, each
        told as it arrives."""
        failed = np.zeros(len(solutions), bool) if failed is None else np.asarray(failed)
        for row, value, lost in zip(np.asarray(solutions), objective, failed, strict=True):
            index = next(
                i
                for i, (_, x) in enumerate(self.asked)
                if np.array_equal(x, row, equal_nan=True)  # NaN: an inactive parameter
            )
            number, _ = self.asked.pop(index)
            self._tell(number, float(value), bool(lost))

    def stats(self) -> dict[str, float]:
        """Trials told so far."""
        return {"told": float(len(self.study.get_trials(deepcopy=False)) - len(self.asked))}

    def result(self) -> dict[str, np.ndarray]:
        """The best trial's solution (Optuna's ``best_trial``) and the trials told."""
        import optuna

        complete = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        result = {"trials": np.array(len(complete), dtype=np.int64)}
        if complete:
            best = self.study.best_trial
            if self.space is not None:
                result["best_solution"] = self.space.solution(_typed(best.params, self.space))
                return result
            result["best_solution"] = np.array(
                [best.params[name] for name in self.distributions], dtype=np.float64
            )
        return result


def suggested(trial, space: Space) -> dict:
    """A trial's configuration of ``space``: its active parameters suggested, each
    after those its condition names (an ordinal's choice through its code)."""
    configuration: dict = {}
    for j in space.order:
        entry = space.entries[j]
        if not space.active_in(j, configuration):
            continue
        name = entry["name"]
        if entry["type"] == "categorical":
            configuration[name] = trial.suggest_categorical(name, entry["choices"])
        elif entry["type"] == "ordinal":
            code = trial.suggest_int(name, 0, len(entry["choices"]) - 1)
            configuration[name] = entry["choices"][code]
        elif entry["type"] == "integer":
            low, high = entry["low"], entry["high"]
            configuration[name] = trial.suggest_int(name, low, high, log=entry["log"])
        else:
            low, high = entry["low"], entry["high"]
            configuration[name] = trial.suggest_float(name, low, high, log=entry["log"])
    return configuration


def _typed(params: dict, space: Space) -> dict:
    """A trial's ``params`` as a configuration (an ordinal's code as its choice)."""
    return {
        name: space.entries[space.index[name]]["choices"][value]
        if space.entries[space.index[name]]["type"] == "ordinal"
        else value
        for name, value in params.items()
    }
