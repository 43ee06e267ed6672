# my_optimizers.py, used as  class: "my_optimizers:OnePlusLambda"  with  python_path: "."
import numpy as np


class OnePlusLambda:
    """Keeps the best solution seen; each generation tries lam Gaussian mutations of it."""

    def __init__(self, *, solution_dim, x0, bounds, seed, lam=8, sigma=0.3):
        self.rng = np.random.default_rng(seed)
        self.parent = np.asarray(x0, dtype=float)
        self.parent_objective = -np.inf
        self.lam, self.sigma, self.bounds = lam, sigma, bounds
        self.offspring = None

    def ask(self):
        """The next batch: an (n, solution_dim) array."""
        mutations = self.rng.standard_normal((self.lam, len(self.parent)))
        self.offspring = self.parent + self.sigma * mutations
        if self.bounds is not None:
            self.offspring = np.clip(self.offspring, *self.bounds)
        return self.offspring

    def tell(self, objective, measures, *, failed=None, **extra):
        """Results of the whole batch, in the order ask() returned it; failed (only when
        evaluations may be discarded, evaluation.on_failure): the rows that failed."""
        if failed is not None:  # their values are NaN: never the best
            objective = np.where(failed, -np.inf, objective)
        best = int(np.argmax(objective))
        if np.isfinite(objective[best]) and objective[best] >= self.parent_objective:
            self.parent, self.parent_objective = self.offspring[best], objective[best]

    def stats(self):  # optional: metrics columns (sigma)
        return {"sigma": self.sigma}

    def result(self):  # optional: arrays stored in archive.h5 under /result
        return {"parent": self.parent}
