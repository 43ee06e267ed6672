"""Baselines every campaign can sit beside its optimizers: random search.

Only numpy is imported.
"""

from __future__ import annotations

import numpy as np


class RandomSearch:
    """Uniform samples in the domain's bounds, ``batch_size`` per generation; learns
    nothing (the baseline of Bayesian optimisation papers).

    Parameters
    ----------
    solution_dim : int
        Parameters of a solution.
    x0 : numpy.ndarray
        Unused (random search has no starting point).
    bounds : tuple
        ``(low, high)`` of every parameter (required).
    seed : int
        The run's optimizer seed.
    batch_size : int
        Samples per generation.
    """

    def __init__(self, *, solution_dim: int, x0, bounds, seed: int, batch_size: int):
        self.dim = int(solution_dim)
        self.low, self.high = (float(b) for b in bounds)
        self.batch_size = int(batch_size)
        self.rng = np.random.default_rng(seed)

    def ask(self) -> np.ndarray:
        """The next batch: ``batch_size`` uniform samples."""
        return self.rng.uniform(self.low, self.high, (self.batch_size, self.dim))

    def tell(self, objective, measures, *, failed=None, **extra) -> None:
        """Random search learns nothing (failed samples, ``failed``, included)."""

    def ask_async(self, *, slots, evaluations) -> np.ndarray:
        """Asynchronous mode: one uniform sample per freed slot."""
        return self.rng.uniform(self.low, self.high, (len(slots), self.dim))

    def tell_async(self, objective, measures, *, solutions, **extra) -> None:
        """Random search learns nothing."""
