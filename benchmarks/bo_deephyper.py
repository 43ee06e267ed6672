"""DeepHyper's CBO on Ackley in its own loop: the peer of evocamp's BO family.

Run with a Python that has ``deephyper==0.13.2`` (``benchmarks/bo.py`` does, given
``--deephyper-python``); prints one JSON object per line.

    python bo_deephyper.py search --dim 5 --evaluations 200 --seed 0 --workers 8 --mean-seconds 0.5
    python bo_deephyper.py timing --dim 5 --history 100 1000 5000 --batch 8

``search``: ``CBO(problem, random_state=seed, surrogate_model="ET", acq_func="UCBd",
multi_point_strategy="qUCBd", n_initial_points=...)`` with DeepHyper's own thread
evaluator of ``workers`` workers (asynchronous: a free worker gets a new point at
once). Every evaluation returns minus the Ackley value after sleeping a time drawn
from an exponential distribution with the given mean (from the seed and the
evaluation's index: the same distribution as evocamp's ``simulated_seconds``).

``timing``: seconds of ``tell`` (history of N random points) + ``ask(batch)``, i.e. one
surrogate fit and one batch proposal, and whether two searches with the same
``random_state`` propose the same points.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import numpy as np

ACKLEY_BOUND = 32.768


def ackley(x: np.ndarray) -> float:
    dim = len(x)
    return float(
        -20.0 * np.exp(-0.2 * np.sqrt(np.sum(x**2) / dim))
        - np.exp(np.sum(np.cos(2 * np.pi * x)) / dim)
        + 20.0
        + np.e
    )


def problem_of(dim: int):
    from deephyper.hpo import HpProblem

    problem = HpProblem()
    for i in range(dim):
        problem.add_hyperparameter((-ACKLEY_BOUND, ACKLEY_BOUND), f"x{i}")
    return problem


def cbo(problem, *, seed: int, initial_points: int, log_dir: str):
    from deephyper.hpo import CBO

    return CBO(
        problem,
        random_state=seed,
        surrogate_model="ET",
        acq_func="UCBd",
        multi_point_strategy="qUCBd",
        n_initial_points=initial_points,
        log_dir=log_dir,
        checkpoint_history_to_csv=False,
    )


def search(args) -> None:
    import tempfile

    from deephyper.evaluator import Evaluator

    dim = args.dim
    counter = iter(range(10**9))
    lock = threading.Lock()
    began = time.perf_counter()
    finished = []  # (seconds since start, ackley value)
    busy = []

    def run(job):
        x = np.array([job.parameters[f"x{i}"] for i in range(dim)])
        with lock:
            index = next(counter)
        wait = np.random.default_rng([args.seed, index]).exponential(args.mean_seconds)
        value = ackley(x)
        time.sleep(wait)
        with lock:
            finished.append((time.perf_counter() - began, value))
            busy.append(wait)
        return -value

    with tempfile.TemporaryDirectory() as log_dir:
        evaluator = Evaluator.create(
            run, method="thread", method_kwargs={"num_workers": args.workers}
        )
        searcher = cbo(
            problem_of(dim), seed=args.seed, initial_points=args.initial_points, log_dir=log_dir
        )
        searcher.search(evaluator, max_evals=args.evaluations)
    wall = time.perf_counter() - began
    finished.sort()
    times = [t for t, _ in finished][: args.evaluations]
    values = np.minimum.accumulate([v for _, v in finished])[: args.evaluations]
    print(
        json.dumps(
            {
                "seed": args.seed,
                "dim": dim,
                "wall_seconds": wall,
                "utilisation": sum(busy) / (wall * args.workers),
                "times": times,
                "best": values.tolist(),
            }
        )
    )


def timing(args) -> None:
    import tempfile

    dim = args.dim
    rng = np.random.default_rng(0)
    for size in args.history:
        x = rng.uniform(-ACKLEY_BOUND, ACKLEY_BOUND, (size, dim))
        results = [({f"x{i}": float(v) for i, v in enumerate(row)}, -ackley(row)) for row in x]
        proposals = []
        for _ in range(2):
            with tempfile.TemporaryDirectory() as log_dir:
                searcher = cbo(problem_of(dim), seed=1, initial_points=10, log_dir=log_dir)
                searcher.ask(size)  # the searcher only takes results of points it asked
                began = time.perf_counter()
                searcher.tell(results)
                asked = searcher.ask(args.batch)
                seconds = time.perf_counter() - began
            proposals.append([[c[f"x{i}"] for i in range(dim)] for c in asked])
        print(
            json.dumps(
                {
                    "history": size,
                    "dim": dim,
                    "batch": args.batch,
                    "seconds": seconds,
                    "deterministic": proposals[0] == proposals[1],
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("search")
    one.add_argument("--dim", type=int, required=True)
    one.add_argument("--evaluations", type=int, required=True)
    one.add_argument("--seed", type=int, required=True)
    one.add_argument("--workers", type=int, default=8)
    one.add_argument("--mean-seconds", type=float, default=0.5)
    one.add_argument("--initial-points", type=int, default=10)
    two = sub.add_parser("timing")
    two.add_argument("--dim", type=int, required=True)
    two.add_argument("--history", type=int, nargs="+", required=True)
    two.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    search(args) if args.command == "search" else timing(args)


if __name__ == "__main__":
    main()
