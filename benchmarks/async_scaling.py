"""Asynchronous decentralised qUCB (ADBO) with many workers, by simulation.

    python benchmarks/async_scaling.py [--workers 8 64 256 1024] [--per-worker 2]
        [--dim 5] [--mean-seconds 0.5]

Real fitting, simulated evaluation times. Every worker runs on a core of its own: a
freed worker fits its own surrogate to the history told so far and proposes (both
really computed here, one after the other, and timed with the process clock), then
evaluates for a duration drawn from an exponential distribution (not slept). Events
are processed in simulated time, so the numbers are what W cores would see, whatever
this machine has. ``--per-worker`` x W evaluations are proposed, at least
``--min-evaluations`` (the run's budget).

Prints per worker count: evaluations, utilisation (evaluation time / (time x
workers) until the last proposal is made, so the budget's tail is left out), proposal
latency (fit + propose seconds per proposal: mean and 95th percentile), the
coordinator's seconds per completion (log line, tell, next proposal's batch and its
serialisation: what evocamp's one loop process does for every completion, measured;
Dask's own scheduling of the task comes on top), the bytes each task
carries (the history), and the completions per second the workers produce against
the rate the coordinator can serve.
"""

from __future__ import annotations

import argparse
import heapq
import pickle
import time

import numpy as np
from common import machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.catalogue.algorithms import ALGORITHMS
from evocamp.families.bo import DecentralisedBatch, DecentralisedQUCB
from evocamp.files.completions import Completion
from evocamp.tasks.functions import ackley_value

BOUND = 32.768


def simulate(*, workers: int, evaluations: int, dim: int, mean: float, seed: int = 0) -> dict:
    """Simulate one asynchronous decentralised run (see the module docstring)."""
    settings = dict(ALGORITHMS["qucb_decentralised"].defaults)
    optimizer = DecentralisedQUCB(
        solution_dim=dim, x0=None, bounds=(-BOUND, BOUND), seed=seed, shards=workers, **settings
    )
    durations = np.random.default_rng(seed + 1).exponential(mean, evaluations)
    events, latencies, coordinator, task_bytes = [], [], [], []
    busy_until_last_proposal = []
    proposed = 0

    def start(slot: int, now: float) -> None:
        nonlocal proposed
        began = time.process_time()
        (batch,) = optimizer.ask_async(slots=[slot], evaluations=[proposed])
        task_bytes.append(len(pickle.dumps(batch, protocol=5)))  # what a Dask submit sends
        coordinator_seconds = time.process_time() - began
        began = time.process_time()
        made = DecentralisedBatch.solutions(batch, 0, 1)
        fit = time.process_time() - began
        latencies.append(fit)
        evaluation_start = now + fit
        finish = evaluation_start + durations[proposed]
        heapq.heappush(events, (finish, proposed, slot, evaluation_start, made["solutions"][0]))
        proposed += 1
        return coordinator_seconds

    for slot in range(workers):
        start(slot, 0.0)
    last_proposal = 0.0
    while events:
        finish, evaluation, slot, evaluation_start, solution = heapq.heappop(events)
        busy_until_last_proposal.append((evaluation_start, finish))
        objective = -float(ackley_value(solution[None])[0])
        began = time.process_time()
        line = Completion(
            evaluation=evaluation,
            slot=slot,
            solution=solution,
            objective=objective,
            measures=np.empty(0),
        ).to_json()
        optimizer.tell_async(np.asarray([objective]), np.empty((1, 0)), solutions=solution[None])
        told = time.process_time() - began
        if proposed < evaluations:
            told += start(slot, finish)
            last_proposal = finish
        coordinator.append(told)
        del line
    horizon = last_proposal
    evaluating = sum(max(0.0, min(b, horizon) - a) for a, b in busy_until_last_proposal)
    return {
        "workers": workers,
        "evaluations": evaluations,
        "utilisation": evaluating / (horizon * workers),
        "latency": float(np.mean(latencies[workers:] or latencies)),
        "latency_p95": float(np.percentile(latencies[workers:] or latencies, 95)),
        "coordinator": float(np.mean(coordinator)),
        "task_kb": float(np.mean(task_bytes[-workers:]) / 1e3),
        "rate": workers / (mean + float(np.mean(latencies))),
        "best": float(-optimizer.y.max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 64, 256, 1024])
    parser.add_argument("--per-worker", type=int, default=2)
    parser.add_argument("--min-evaluations", type=int, default=400)
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--mean-seconds", type=float, default=0.5)
    args = parser.parse_args()
    print(machine())
    rows = []
    for workers in args.workers:
        began = time.perf_counter()
        result = simulate(
            workers=workers,
            evaluations=max(args.per_worker * workers, args.min_evaluations),
            dim=args.dim,
            mean=args.mean_seconds,
        )
        rows.append(
            [
                workers,
                result["evaluations"],
                f"{result['utilisation']:.3f}",
                f"{result['latency']:.3f} / {result['latency_p95']:.3f}",
                f"{result['coordinator'] * 1e3:.2f}",
                f"{result['task_kb']:.0f}",
                f"{result['rate']:.0f} / {1 / result['coordinator']:.0f}",
                f"{result['best']:.3g}",
                f"{time.perf_counter() - began:.0f}",
            ]
        )
        print(rows[-1], flush=True)
    print(
        table(
            [
                "workers",
                "evaluations",
                "utilisation",
                "latency s (mean / p95)",
                "coordinator ms per completion",
                "task kB",
                "completions/s: produced / servable",
                "best Ackley",
                "simulated in s",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
