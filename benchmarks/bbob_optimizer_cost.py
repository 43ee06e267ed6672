"""The CPU time of Nevergrad's optimizers on config/bbob.yaml's runs: 40 generations
of 10 (``budget: 400``), f1-f24, instances 1 and 2, in 2, 5 and 10 dimensions, each run
asked and told in one process on ``tasks.bbob.values`` (the evaluations, a few ms,
included), timed with ``time.process_time``.

    python benchmarks/bbob_optimizer_cost.py [TwoPointsDE NGOpt ...]

Prints one Markdown row per optimizer (benchmarks/RESULTS.md, "The shipped BBOB
campaign").
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from evocamp.families.nevergrad import NevergradOptimizer
from evocamp.tasks.bbob import values


def run_cost(name: str, *, dim: int, function: int, instance: int) -> float:
    """CPU seconds of one run's 40 asks and tells."""
    optimizer = NevergradOptimizer(
        solution_dim=dim,
        x0=np.zeros(dim),
        bounds=(-5.0, 5.0),
        seed=function * 100 + instance,
        optimizer=name,
        batch_size=10,
        budget=400,
    )
    began = time.process_time()
    for _ in range(40):
        batch = optimizer.ask()
        optimizer.tell(-values(batch, function=function, instance=instance))
    return time.process_time() - began


def main() -> None:
    warnings.simplefilter("ignore")
    names = sys.argv[1:] or ["TwoPointsDE", "NGOpt"]
    print("| entry | 2-d | 5-d | 10-d | 144 runs |")
    print("|---|---|---|---|---|")
    for name in names:
        cells, total = [], 0.0
        for dim in (2, 5, 10):
            costs = [
                run_cost(name, dim=dim, function=f, instance=i)
                for f in range(1, 25)
                for i in (1, 2)
            ]
            total += sum(costs)
            cells.append(f"{np.mean(costs):.3f} s per run (at most {max(costs):.2f})")
        print(f"| {name} | {' | '.join(cells)} | {total:.1f} s |")


if __name__ == "__main__":
    main()
