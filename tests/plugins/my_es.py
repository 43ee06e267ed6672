# my_es.py, used as  class: "my_es:CompactOnePlusLambda"  with  python_path: "."
import numpy as np

from evocamp.plugins import CompactBatch


class ParentAndNoise(CompactBatch):
    """A batch described by the parent, sigma and one noise seed per offspring."""

    @staticmethod
    def size(batch):
        return len(batch["noise"])

    @staticmethod
    def solutions(batch, start, stop):
        parent, sigma = batch["parent"][()], batch["sigma"][()]
        return np.stack(
            [
                parent + sigma * np.random.default_rng(int(seed)).standard_normal(len(parent))
                for seed in batch["noise"][start:stop]
            ]
        )


class CompactOnePlusLambda:
    """The (1+lambda)-ES above, with batches of a few bytes per offspring."""

    batch_format = ParentAndNoise

    def __init__(self, *, solution_dim, x0, bounds, seed, lam=8, sigma=0.3):
        self.rng = np.random.default_rng(seed)
        self.parent = np.asarray(x0, dtype=float)
        self.parent_objective = -np.inf
        self.lam, self.sigma = lam, sigma
        self.batch = None

    def ask(self):
        noise = self.rng.integers(0, 2**64, size=self.lam, dtype=np.uint64)
        self.batch = {"parent": self.parent, "sigma": np.float64(self.sigma), "noise": noise}
        return self.batch

    def tell(self, objective, measures, **extra):
        best = int(np.argmax(objective))
        if objective[best] >= self.parent_objective:
            self.parent = ParentAndNoise.solutions(self.batch, best, best + 1)[0]
            self.parent_objective = objective[best]
