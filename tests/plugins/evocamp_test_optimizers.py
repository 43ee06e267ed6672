"""Optimizer plugins for the tests: most go wrong on purpose; ``FixedPoints`` asks given
points (the same points as a Dakota ``list_parameter_study``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from my_es import CompactOnePlusLambda, ParentAndNoise


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


class FailingParentAndNoise(ParentAndNoise):
    """docs/plugins.md's compact batch format, failing to make any offspring."""

    @staticmethod
    def solutions(batch, start, stop):
        raise ValueError(f"offspring {start}..{stop - 1} failed on purpose")


class FailingCompactES(CompactOnePlusLambda):
    """docs/plugins.md's compact (1+lambda)-ES whose batch format fails in the shards."""

    batch_format = FailingParentAndNoise


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


class HoldingOnePlusLambda(CompactOnePlusLambda):
    """docs/plugins.md's compact (1+lambda)-ES holding its batch's solutions from ask to
    tell (``asked_solutions``), for the node-local cache."""

    def ask(self):
        batch = super().ask()
        self.asked = ParentAndNoise.solutions(batch, 0, self.lam)
        return batch

    def asked_solutions(self):
        return self.asked

    def restore_asked_solutions(self, solutions):
        self.asked = solutions


class FixedPoints:
    """Asks the given ``points`` (a list of solutions) every generation and learns nothing:
    evocamp's counterpart of Dakota's ``list_parameter_study``."""

    def __init__(self, *, solution_dim, x0, bounds, seed, points):
        self.points = np.asarray(points, dtype=np.float64).reshape(-1, solution_dim)

    def ask(self):
        return self.points.copy()

    def tell(self, objective, measures, *, failed=None, **extra):
        pass
