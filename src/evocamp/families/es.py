"""Evolution strategies for neuroevolution: OpenAI-ES and SNES with seed-regenerated noise.

A generation's batch is never a P x M array of offspring: it is the centre (and SNES's
per-parameter sigma) once, plus one noise seed per noise vector. Whoever needs an
offspring regenerates its noise from its seed (:func:`noise`): an evaluation shard
for its slice, ``tell`` for the update, one noise vector at a time, so memory stays
O(M) whatever the population. Noise seeds come from the run's optimizer seed and the
generation (:func:`noise_seeds`), so they are fixed by the master seed.

Only numpy is imported: evaluation shards materialise their offspring from here.
"""

from __future__ import annotations

import math

import numpy as np

from evocamp.model.protocol import CompactBatch, failed_as_worst

#: Adam's constants (Kingma & Ba 2015), as in Salimans et al.'s code.
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPSILON = 1e-8


def noise_seeds(seed: int, generation: int, count: int) -> np.ndarray:
    """One uint64 seed per noise vector of ``generation`` (word ``i`` for vector ``i``)."""
    sequence = np.random.SeedSequence(seed, spawn_key=(generation,))
    return sequence.generate_state(count, dtype=np.uint64)


def noise(seed, dim: int) -> np.ndarray:
    """The standard-normal noise vector of one noise seed (``dim`` float64 values)."""
    return np.random.default_rng(int(seed)).standard_normal(dim)


def centred_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-0.5, 0.5] (Salimans et al. 2017); ties broken by index."""
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values), dtype=np.float64)
    return ranks / (len(values) - 1) - 0.5


def nes_utilities(count: int) -> np.ndarray:
    """NES utilities of ranks 1..count (best first): max(0, ln(count/2 + 1) - ln k),
    normalised to sum 1, minus 1/count."""
    raw = np.maximum(0.0, math.log(count / 2 + 1) - np.log(np.arange(1, count + 1)))
    return raw / raw.sum() - 1.0 / count


def _clip(solutions: np.ndarray, batch) -> np.ndarray:
    """Offspring clipped to the batch's ``bounds`` ``[low, high]``, when it has them."""
    if "bounds" not in batch:
        return solutions
    low, high = np.asarray(batch["bounds"][()], dtype=np.float64)
    return np.clip(solutions, low, high)


class OpenAIESBatch(CompactBatch):
    """An OpenAI-ES batch: ``centre``, scalar ``sigma``, one ``noise`` seed per
    antithetic pair (offspring ``2i`` and ``2i + 1``), ``bounds`` if any."""

    @staticmethod
    def size(batch) -> int:
        """Two offspring per noise seed."""
        return 2 * len(batch["noise"])

    @staticmethod
    def solutions(batch, start: int, stop: int) -> np.ndarray:
        """Offspring ``start..stop-1``, their noise regenerated from the batch's seeds."""
        centre = np.asarray(batch["centre"][()], dtype=np.float64)
        sigma = float(batch["sigma"][()])
        seeds = batch["noise"][start // 2 : (stop + 1) // 2]
        out = np.empty((stop - start, len(centre)))
        eps = None
        for row, index in enumerate(range(start, stop)):
            if eps is None or index % 2 == 0:  # one noise vector per antithetic pair
                eps = noise(seeds[index // 2 - start // 2], len(centre))
            out[row] = centre + sigma * eps if index % 2 == 0 else centre - sigma * eps
        return _clip(out, batch)


class SNESBatch(CompactBatch):
    """A SNES batch: ``centre``, per-parameter ``sigma``, one ``noise`` seed per
    offspring, ``bounds`` if any."""

    @staticmethod
    def size(batch) -> int:
        """One offspring per noise seed."""
        return len(batch["noise"])

    @staticmethod
    def solutions(batch, start: int, stop: int) -> np.ndarray:
        """Offspring ``start..stop-1``, their noise regenerated from the batch's seeds."""
        centre = np.asarray(batch["centre"][()], dtype=np.float64)
        sigma = np.asarray(batch["sigma"][()], dtype=np.float64)
        seeds = batch["noise"][start:stop]
        out = np.empty((stop - start, len(centre)))
        for row, seed in enumerate(seeds):
            out[row] = centre + sigma * noise(seed, len(centre))
        return _clip(out, batch)


class _NoiseES:
    """What OpenAI-ES and SNES share: asking, materialising a slice, bookkeeping."""

    #: Noise vectors per offspring slot: offspring ``j`` uses noise vector ``j // SHARE``.
    SHARE = 1

    def __init__(self, *, solution_dim: int, x0: np.ndarray, bounds, seed: int, popsize: int):
        self.dim = int(solution_dim)
        self.centre = np.array(x0, dtype=np.float64)
        self.bounds = None if bounds is None else (float(bounds[0]), float(bounds[1]))
        self.seed = int(seed)
        self.popsize = int(popsize)
        self.generation = 0
        self.pending: np.ndarray | None = None

    def ask(self) -> dict[str, np.ndarray]:
        """The next batch: centre, step size(s) and one noise seed per noise vector."""
        self.generation += 1
        self.pending = noise_seeds(self.seed, self.generation, self.popsize // self.SHARE)
        batch = {"centre": self.centre.copy(), "sigma": self._sigma_array(), "noise": self.pending}
        if self.bounds is not None:
            batch["bounds"] = np.asarray(self.bounds, dtype=np.float64)
        return batch

    def _sigma_array(self) -> np.ndarray:
        raise NotImplementedError

    def result(self) -> dict[str, np.ndarray]:
        """Arrays stored as the run's result (``/result`` of archive.h5): the centre."""
        return {"centre": self.centre.copy(), "sigma": self._sigma_array()}


class OpenAIES(_NoiseES):
    """OpenAI-ES (Salimans et al. 2017) with antithetic sampling and Adam.

    Offspring ``2i`` and ``2i + 1`` are ``centre + sigma * eps_i`` and
    ``centre - sigma * eps_i``. Returns are shaped by centred ranks over all 2n
    offspring; the gradient estimate is ``g = sum_i (r+_i - r-_i) eps_i / (2 n sigma)``;
    Adam ascends ``g - weight_decay * centre`` with step
    ``lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)``, the form of the
    authors' code.

    Parameters
    ----------
    solution_dim : int
        Number of parameters M.
    x0 : numpy.ndarray
        The initial centre.
    bounds : tuple or None
        ``(low, high)`` of every parameter: offspring are clipped to it (the update
        uses the unclipped noise).
    seed : int
        The run's optimizer seed; noise seeds derive from it and the generation.
    popsize : int
        Offspring per generation (even: n = popsize / 2 noise vectors).
    sigma : float
        Noise standard deviation.
    learning_rate : float
        Adam's step size.
    weight_decay : float
        L2 coefficient.
    """

    SHARE = 2
    batch_format = OpenAIESBatch

    def __init__(
        self,
        *,
        solution_dim: int,
        x0: np.ndarray,
        bounds,
        seed: int,
        popsize: int,
        sigma: float,
        learning_rate: float,
        weight_decay: float,
    ):
        super().__init__(
            solution_dim=solution_dim, x0=x0, bounds=bounds, seed=seed, popsize=popsize
        )
        self.sigma = float(sigma)
        self.learning_rate = float(learning_rate)
        self.weight_decay = float(weight_decay)
        self.adam_m = np.zeros(self.dim)
        self.adam_v = np.zeros(self.dim)
        self.adam_t = 0

    def _sigma_array(self) -> np.ndarray:
        return np.asarray(self.sigma, dtype=np.float64)

    def gradient(self, objective: np.ndarray) -> np.ndarray:
        """The gradient estimate g of the pending batch (one noise pass)."""
        shaped = centred_ranks(objective)
        weights = (shaped[0::2] - shaped[1::2]) / (len(objective) * self.sigma)
        total = np.zeros(self.dim)
        for weight, seed in zip(weights, self.pending, strict=True):
            total += weight * noise(seed, self.dim)
        return total

    def tell(self, objective: np.ndarray, measures=None, *, failed=None, **extra) -> None:
        """Update the centre from the returns of the pending batch (failed offspring,
        ``failed``, ranked last)."""
        step_direction = (
            self.gradient(failed_as_worst(objective, failed)) - self.weight_decay * self.centre
        )
        self.adam_t += 1
        self.adam_m = ADAM_BETA1 * self.adam_m + (1 - ADAM_BETA1) * step_direction
        self.adam_v = ADAM_BETA2 * self.adam_v + (1 - ADAM_BETA2) * step_direction**2
        scale = (
            self.learning_rate
            * math.sqrt(1 - ADAM_BETA2**self.adam_t)
            / (1 - ADAM_BETA1**self.adam_t)
        )
        self.centre = self.centre + scale * self.adam_m / (np.sqrt(self.adam_v) + ADAM_EPSILON)
        self.pending = None

    def stats(self) -> dict[str, float]:
        """What an ES user watches besides objectives: sigma."""
        return {"sigma": self.sigma}


class SNES(_NoiseES):
    """Separable NES (Schaul et al. 2011).

    Offspring ``k`` is ``mu + sigma * s_k`` (element-wise sigma). With utilities
    u_k by rank (:func:`nes_utilities`):
    ``mu <- mu + eta_mu * sigma * sum u_k s_k`` and
    ``sigma <- sigma * exp(eta_sigma / 2 * sum u_k (s_k^2 - 1))``.

    Parameters
    ----------
    solution_dim, x0, bounds, seed
        As for :class:`OpenAIES`.
    popsize : int
        lambda (default ``4 + floor(3 ln d)``, :func:`snes_popsize`).
    sigma : float
        Initial sigma of every parameter.
    eta_mu : float
        Learning rate of the mean (default 1).
    eta_sigma : float or None
        Learning rate of sigma (default ``(3 + ln d) / (5 sqrt d)``).
    """

    batch_format = SNESBatch

    def __init__(
        self,
        *,
        solution_dim: int,
        x0: np.ndarray,
        bounds,
        seed: int,
        popsize: int,
        sigma: float,
        eta_mu: float = 1.0,
        eta_sigma: float | None = None,
    ):
        super().__init__(
            solution_dim=solution_dim, x0=x0, bounds=bounds, seed=seed, popsize=popsize
        )
        self.sigma = np.full(self.dim, float(sigma))
        self.eta_mu = float(eta_mu)
        self.eta_sigma = snes_eta_sigma(self.dim) if eta_sigma is None else float(eta_sigma)

    def _sigma_array(self) -> np.ndarray:
        return self.sigma.copy()

    def tell(self, objective: np.ndarray, measures=None, *, failed=None, **extra) -> None:
        """Update mu and sigma from the returns of the pending batch (one noise pass;
        failed offspring, ``failed``, ranked last)."""
        order = np.argsort(-failed_as_worst(objective, failed), kind="stable")
        utilities = np.empty(len(order))
        utilities[order] = nes_utilities(len(order))
        grad_mu = np.zeros(self.dim)
        grad_sigma = np.zeros(self.dim)
        for utility, seed in zip(utilities, self.pending, strict=True):
            s = noise(seed, self.dim)
            grad_mu += utility * s
            grad_sigma += utility * (s * s - 1.0)
        self.centre = self.centre + self.eta_mu * self.sigma * grad_mu
        self.sigma = self.sigma * np.exp(self.eta_sigma / 2 * grad_sigma)
        self.pending = None

    def stats(self) -> dict[str, float]:
        """What an ES user watches besides objectives: the norm of sigma."""
        return {"sigma": float(np.linalg.norm(self.sigma))}


def snes_popsize(dim: int) -> int:
    """SNES's default population: ``4 + floor(3 ln d)``."""
    return 4 + int(math.floor(3 * math.log(dim)))


def snes_eta_sigma(dim: int) -> float:
    """SNES's default sigma learning rate: ``(3 + ln d) / (5 sqrt d)``."""
    return (3 + math.log(dim)) / (5 * math.sqrt(dim))


class CMAES:
    """CMA-ES (Hansen & Ostermeier 2001) on the objective alone: pyribs'
    :class:`ribs.emitters.opt.CMAEvolutionStrategy`, driven as pyribs'
    ``EvolutionStrategyEmitter`` drives it with the ``obj`` ranker and ``mu`` selection
    (offspring ranked by objective, the best ``popsize // 2`` are the parents), without
    an archive: the run's passive archive (if the domain has measures) gets every
    offspring, so it runs on domains without measures too. When pyribs' stopping
    tests fire (condition number above 1e14, a distribution area below 1e-11, flat
    objectives), the strategy restarts from ``x0`` (``restarts`` counts them).

    Parameters
    ----------
    solution_dim, x0, bounds, seed
        As for :class:`OpenAIES`; offspring outside ``bounds`` are resampled (pyribs).
    popsize : int
        lambda (default ``4 + floor(3 ln d)``, as SNES).
    sigma : float
        Initial step size sigma0.
    """

    def __init__(
        self, *, solution_dim: int, x0: np.ndarray, bounds, seed: int, popsize: int, sigma: float
    ):
        from ribs.emitters.opt import CMAEvolutionStrategy

        low, high = (-np.inf, np.inf) if bounds is None else bounds
        self.x0 = np.array(x0, dtype=np.float64)
        self.es = CMAEvolutionStrategy(
            sigma0=float(sigma),
            solution_dim=int(solution_dim),
            batch_size=int(popsize),
            seed=int(seed),
            lower_bounds=np.full(int(solution_dim), low, dtype=np.float64),
            upper_bounds=np.full(int(solution_dim), high, dtype=np.float64),
        )
        self.es.reset(self.x0)
        self.restarts = 0

    def ask(self) -> np.ndarray:
        """``popsize`` offspring of the current search distribution."""
        return np.asarray(self.es.ask(), dtype=np.float64)

    def tell(self, objective: np.ndarray, measures=None, *, failed=None, **extra) -> None:
        """Update the distribution from the offspring's objectives (maximised; failed
        offspring, ``failed``, ranked last)."""
        objective = failed_as_worst(objective, failed)
        indices = np.flip(np.argsort(objective))  # pyribs' ObjectiveRanker
        self.es.tell(indices, objective, self.es.batch_size // 2)
        if self.es.check_stop(objective[indices]):
            self.es.reset(self.x0)
            self.restarts += 1

    def stats(self) -> dict[str, float]:
        """The step size sigma."""
        return {"sigma": float(self.es.sigma)}

    def result(self) -> dict[str, np.ndarray]:
        """Arrays stored as the run's result (``/result`` of archive.h5): the mean."""
        return {"centre": np.array(self.es.mean, dtype=np.float64)}
