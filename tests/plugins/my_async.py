# my_async.py, used as  class: "my_async:SteadyStateES"  with  python_path: "."
import numpy as np


class SteadyStateES:
    """Every proposal is a Gaussian mutation of the best solution told so far: a
    (1+lam)-ES in generations, a steady-state (1+1)-ES per worker in asynchronous mode."""

    def __init__(self, *, solution_dim, x0, bounds, seed, lam=8, sigma=0.3):
        self.rng = np.random.default_rng(seed)
        self.best = np.asarray(x0, dtype=float)
        self.best_objective = -np.inf
        self.lam, self.sigma, self.bounds = lam, sigma, bounds
        self.offspring = None

    def mutants(self, count):
        steps = self.sigma * self.rng.standard_normal((count, len(self.best)))
        return np.clip(self.best + steps, *self.bounds) if self.bounds else self.best + steps

    def keep_best(self, solutions, objective):
        index = int(np.argmax(objective))
        if objective[index] >= self.best_objective:
            self.best, self.best_objective = np.array(solutions[index]), objective[index]

    def ask(self):  # modes shards and dask: the whole next batch
        self.offspring = self.mutants(self.lam)
        return self.offspring

    def tell(self, objective, measures, **extra):
        self.keep_best(self.offspring, objective)

    def ask_async(self, *, slots, evaluations):  # mode async: one proposal per freed slot
        return self.mutants(len(slots))

    def tell_async(self, objective, measures, *, solutions, **extra):  # any finished ones
        self.keep_best(solutions, objective)
