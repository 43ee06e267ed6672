"""Optimizer plugins that go wrong on purpose (tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evocamp.model.protocol import CompactBatch


class RandomSearch:
    """Uniform samples in [-1, 1]. While ``control_file`` holds ``<method> <generation>``,
    that method goes wrong at that generation (``ask``: a batch missing a column;
    ``tell``: raises)."""

    def __init__(self, *, solution_dim, x0, bounds, seed, batch=8, control_file=None):
        self.rng = np.random.default_rng(seed)
        self.dim = solution_dim
        self.batch = batch
        self.control_file = control_file
        self.generation = 0

    def _fails(self, method: str) -> bool:
        control = Path(self.control_file) if self.control_file else None
        if control is None or not control.exists():
            return False
        return control.read_text().split() == [method, str(self.generation)]

    def ask(self):
        self.generation += 1
        solutions = self.rng.uniform(-1, 1, (self.batch, self.dim))
        if self._fails("ask"):
            return solutions[:, :-1]
        return solutions

    def tell(self, objective, measures, **extra):
        if self._fails("tell"):
            raise ValueError(f"tell failed on purpose at generation {self.generation}")


class NoTell:
    """Lacks tell()."""

    def __init__(self, **kwargs):
        pass

    def ask(self):
        return np.zeros((4, 2))


class CompactBatchES:
    """A (1 + lambda)-ES whose batch is compact: the parent and one noise seed per
    offspring (docs/plugins.md). A negative ``sigma`` makes materialising fail."""

    def __init__(self, *, solution_dim, x0, bounds, seed, lam=8, sigma=0.3):
        self.rng = np.random.default_rng(seed)
        self.parent = np.asarray(x0, dtype=float)
        self.parent_objective = -np.inf
        self.lam, self.sigma = lam, sigma
        self.pending = None

    def ask(self):
        self.pending = self.rng.integers(2**63, size=self.lam, dtype=np.uint64)
        return {
            "parent": self.parent,
            "sigma": np.asarray(self.sigma),
            "noise": self.pending,
        }

    def tell(self, objective, measures, **extra):
        best = int(np.argmax(objective))
        if objective[best] >= self.parent_objective:
            self.parent = ParentAndNoise.offspring(self.parent, self.sigma, int(self.pending[best]))
            self.parent_objective = objective[best]


class ParentAndNoise(CompactBatch):
    """The batch format of :class:`CompactBatchES`."""

    @staticmethod
    def offspring(parent, sigma, seed):
        return parent + sigma * np.random.default_rng(seed).standard_normal(len(parent))

    @staticmethod
    def size(batch):
        return len(batch["noise"])

    @staticmethod
    def solutions(batch, start, stop):
        parent = np.asarray(batch["parent"][()], dtype=float)
        sigma = float(batch["sigma"][()])
        if sigma < 0:
            raise ValueError(f"sigma {sigma} is negative")
        return np.stack(
            [
                ParentAndNoise.offspring(parent, sigma, int(seed))
                for seed in batch["noise"][start:stop]
            ]
        )


CompactBatchES.batch_format = ParentAndNoise


class OldStyleCompact:
    """Compact batches described the evocamp 0.1 way (static methods on the class)."""

    def __init__(self, **kwargs):
        pass

    def ask(self):
        return {"n": np.asarray(4)}

    @staticmethod
    def batch_size(batch):
        return 4

    @staticmethod
    def solutions(batch, start, stop):
        return np.zeros((stop - start, 6))

    def tell(self, objective, measures, **extra):
        pass
