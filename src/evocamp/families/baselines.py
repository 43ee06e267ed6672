"""Baselines every campaign can sit beside its optimizers: random search.

Only numpy is imported.
"""

from __future__ import annotations

import numpy as np

from evocamp.model.space import Space


class RandomSearch:
    """Uniform samples in the domain's bounds, ``batch_size`` per generation; learns
    nothing (the baseline of Bayesian optimisation papers). On a domain with a space,
    uniform in its unit cube (:meth:`evocamp.model.space.Space.sample`: log parameters
    log-uniform, each choice equally likely, inactive parameters NaN).

    Parameters
    ----------
    solution_dim : int
        Parameters of a solution.
    x0 : numpy.ndarray
        Unused (random search has no starting point).
    bounds : tuple
        ``(low, high)`` of every parameter (required without a space).
    seed : int
        The run's optimizer seed.
    batch_size : int
        Samples per generation.
    space : list of dict, optional
        The domain's search space (:mod:`evocamp.model.space`).
    """

    def __init__(self, *, solution_dim: int, x0, bounds, seed: int, batch_size: int, space=None):
        self.dim = int(solution_dim)
        if space is None:
            self.low, self.high = (float(b) for b in bounds)
        else:
            self.space = Space(space)
        self.batch_size = int(batch_size)
        self.rng = np.random.default_rng(seed)

    def _samples(self, count: int) -> np.ndarray:
        if getattr(self, "space", None) is not None:
            return self.space.sample(self.rng, count)
        return self.rng.uniform(self.low, self.high, (count, self.dim))

    def ask(self) -> np.ndarray:
        """The next batch: ``batch_size`` uniform samples."""
        return self._samples(self.batch_size)

    def tell(self, objective, measures, *, failed=None, **extra) -> None:
        """Random search learns nothing (failed samples, ``failed``, included)."""

    def ask_async(self, *, slots, evaluations) -> np.ndarray:
        """Asynchronous mode: one uniform sample per freed slot."""
        return self._samples(len(slots))

    def tell_async(self, objective, measures, *, solutions, **extra) -> None:
        """Random search learns nothing."""
