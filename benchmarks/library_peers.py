"""The peer checks of the Nevergrad and Optuna families: with the same seed, the
library's own ask/tell loop in one process and evocamp's ``nevergrad`` and ``optuna``
types (their classes, pickled between every ask and tell as a checkpoint holds them)
on the 10-d Rastrigin function within [-5.12, 5.12]: the same solutions, in the same
order? And the time each loop takes (the same evaluations).

    python benchmarks/library_peers.py [--generations 40] [--batch 8]

Prints one Markdown row per optimizer (benchmarks/RESULTS.md, "Nevergrad's and
Optuna's optimizers beside their own loops").
"""

from __future__ import annotations

import argparse
import pickle
import time
import warnings

import nevergrad as ng
import numpy as np
import optuna

from evocamp.families.nevergrad import (
    NevergradOptimizer,
    metamodel_float_shim,
    nevergrad_seeds,
)
from evocamp.families.optuna import OptunaSampler, optuna_seed

DIM = 10
BOUNDS = (-5.12, 5.12)
SEED = 7


def rastrigin(batch) -> np.ndarray:
    batch = np.asarray(batch, dtype=np.float64)
    return 10 * DIM + np.sum(batch**2 - 10 * np.cos(2 * np.pi * batch), axis=1)


def nevergrad_peer(name, *, objective, dim, bounds, seed, generations, batch, budget):
    """Nevergrad's own ask/tell loop in one process: numpy's global state seeded once
    (with the seed + 1), the parametrization's ``random_state`` with the seed,
    ``batch`` asks then ``batch`` tells of the minimised ``objective``; the solutions in
    order. Under numpy 2.4 Nevergrad's own loop needs the shim of its meta-model as
    evocamp's does (NGOpt's ``MetaModel`` fails without it): applied first."""
    metamodel_float_shim()
    own, global_seed = nevergrad_seeds(seed)
    np.random.seed(global_seed)
    array = ng.p.Array(init=np.zeros(dim), lower=bounds[0], upper=bounds[1])
    array.random_state = np.random.RandomState(own)
    optimizer = ng.optimizers.registry[name](
        parametrization=array, budget=budget, num_workers=batch
    )
    evaluated = []
    for _ in range(generations):
        candidates = [optimizer.ask() for _ in range(batch)]
        values = objective([c.value for c in candidates])
        evaluated += [c.value for c in candidates]
        for candidate, value in zip(candidates, values, strict=True):
            optimizer.tell(candidate, float(value))
    return np.array(evaluated)


def optuna_peer(sampler, *, objective, dim, bounds, generations, batch):
    """Optuna's own ask/tell loop in one process with ``sampler`` (built with Optuna's
    API): ``batch`` asks then ``batch`` tells of the maximised negated ``objective``."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    space = {f"x{i}": optuna.distributions.FloatDistribution(*bounds) for i in range(dim)}
    evaluated = []
    for _ in range(generations):
        trials = [study.ask(space) for _ in range(batch)]
        rows = np.array([[t.params[f"x{i}"] for i in range(dim)] for t in trials])
        evaluated += list(rows)
        for trial, value in zip(trials, -objective(rows), strict=True):
            study.tell(trial, float(value))
    return np.array(evaluated)


def evocamp_loop(optimizer, *, objective, generations):
    """evocamp's class generation by generation (maximising the negated ``objective``),
    pickled and unpickled after each ask and each tell, as checkpoints hold it, with
    someone else's draws from numpy's global state in between; the solutions in order
    and the optimizer."""
    evaluated = []
    for _ in range(generations):
        batch = optimizer.ask()
        optimizer = pickle.loads(pickle.dumps(optimizer))
        evaluated += list(batch)
        np.random.standard_normal(3)
        optimizer.tell(-objective(batch))
        optimizer = pickle.loads(pickle.dumps(optimizer))
    return np.array(evaluated), optimizer


#: Optuna's samplers as its own API builds them, by the names of ``sampler:``.
OPTUNA_SAMPLERS = {
    "tpe": optuna.samplers.TPESampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "gp": optuna.samplers.GPSampler,
    "random": optuna.samplers.RandomSampler,
    "qmc": lambda seed: optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed),
}


def timed(function):
    began = time.perf_counter()
    result = function()
    return result, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    generations, batch = args.generations, args.batch
    print("| optimizer | evaluations | same solutions, same order | own loop | evocamp, pickled |")
    print("|---|---|---|---|---|")
    common = {"objective": rastrigin, "dim": DIM, "bounds": BOUNDS}
    # NGOpt in 10-d picks its CMA at a budget of 1,000 and its MetaModel (a quadratic
    # surrogate over CMA; metamodel_float_shim under numpy 2.4) at the evaluations it
    # gets (320 by default); the others with a budget of 1,000.
    cases = [
        ("NGOpt", 1000),
        ("NGOpt", generations * batch),
        ("CMA", 1000),
        ("TwoPointsDE", 1000),
        ("PSO", 1000),
    ]
    for name, budget in cases:
        settings = {"generations": generations, "batch": batch, "budget": budget}
        peer, peer_time = timed(
            lambda n=name, s=settings: nevergrad_peer(n, seed=SEED, **common, **s)
        )
        optimizer = NevergradOptimizer(
            solution_dim=DIM,
            x0=np.zeros(DIM),
            bounds=BOUNDS,
            seed=SEED,
            optimizer=name,
            batch_size=batch,
            budget=budget,
        )
        (ours, optimizer), our_time = timed(
            lambda o=optimizer: evocamp_loop(o, objective=rastrigin, generations=generations)
        )
        label = f"nevergrad `{name}`"
        if name == "NGOpt":  # what it picked
            label += f" (budget {budget:,}: its {optimizer.optimizer.optim.name})"
        row(label, peer, ours, peer_time, our_time)
    for name, make in OPTUNA_SAMPLERS.items():
        rounds = min(generations, 10) if name == "gp" else generations
        peer, peer_time = timed(
            lambda m=make, r=rounds: optuna_peer(
                m(seed=optuna_seed(SEED)), generations=r, batch=batch, **common
            )
        )
        optimizer = OptunaSampler(
            solution_dim=DIM,
            x0=np.zeros(DIM),
            bounds=BOUNDS,
            seed=SEED,
            sampler=name,
            batch_size=batch,
        )
        (ours, _), our_time = timed(
            lambda o=optimizer, r=rounds: evocamp_loop(o, objective=rastrigin, generations=r)
        )
        row(f"optuna `{name}`", peer, ours, peer_time, our_time)


def row(name, peer, ours, peer_time, our_time) -> None:
    same = "bitwise" if np.array_equal(peer, ours) else "DIFFERENT"
    print(f"| {name} | {len(ours)} | {same} | {peer_time:.2f} s | {our_time:.2f} s |")


if __name__ == "__main__":
    main()
