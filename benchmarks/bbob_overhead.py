"""Dask mode's overhead on BBOB (functions of microseconds) against the same optimizer's
plain loop in one process.

    python benchmarks/bbob_overhead.py [--batches 10 100 1000] [--evaluations 20000]
                                       [--function 1] [--dimension 10] [--repeats 3]

For each optimizer (evocamp's CMA-ES, pycma's BIPOP-CMA-ES, random search; Optuna's
TPE at the smallest batch only: its ask/tell is the cost there) and batch size (the
optimizer's population or ``batch_size``), three loops run the same run spec, same
seed, on BBOB function ``--function`` in ``--dimension`` dimensions:

- **plain**: the optimizer object evocamp builds (``build_optimizer``: the library's
  ask/tell behind it), asked, evaluated by ``ioh`` in one vectorised call, told, in one
  process; nothing else;
- **dask, 1 worker**: Dask mode's segment loop (``run_generations``) on a LocalCluster
  of one worker, as a segment job runs it (one task per generation and shard);
- **dask, 0 workers**: the same loop with ``dask.workers: 0``, the segment evaluating
  its shards in its own process.

Times are of the steady state (the first two generations left out), on two clocks:
wall time, and the CPU time of the process running the loop (``time.process_time``),
which a machine loaded by other work inflates far less. Evaluations/s is evaluations
over wall time. What is neither evaluation nor ask/tell: the loop's time minus the
evaluation seconds (in the loop's process: the CPU seconds of ioh's calls, timed by
wrapping ``tasks.bbob.values``; on a Dask worker: the metrics' ``eval_seconds``, the
shard step's own timing of its calls) minus the optimizer's ask/tell CPU seconds
(measured by timing the optimizer object's ``ask`` and ``tell`` inside the loop: the
methods are wrapped on the instance, which is what evocamp's loop calls), as a share of
the loop's CPU time for the loops in one process and of its wall time for the loop with
a Dask worker (whose evaluations and waiting are in other processes); for the plain
loop, its own timed ask/tell and evaluation. Each run's last best objective is compared
with the plain loop's: the loops compute the same numbers. A LocalCluster's start and
close (once per segment) is measured separately.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time

import numpy as np
from common import machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.catalogue.factory import build_optimizer
from evocamp.config import run_spec, validate_config
from evocamp.executors.dask_cluster import dask_client
from evocamp.executors.dask_mode import run_generations
from evocamp.loop.engine import initialise
from evocamp.tasks import bbob

#: The optimizers measured: name -> (algorithm entry of a batch size, largest batch).
OPTIMIZERS = {
    "cma_es": (lambda n: {"type": "cma_es", "popsize": n, "sigma": 2.0}, None),
    "bipop_cma_es": (lambda n: {"type": "bipop_cma_es", "popsize": n, "sigma": 2.0}, None),
    "random_search": (lambda n: {"type": "random_search", "batch_size": n}, None),
    "optuna_tpe": (lambda n: {"type": "optuna", "sampler": "tpe", "batch_size": n}, 10),
}
#: Generations of Optuna's TPE (its ask grows with the trials told).
TPE_GENERATIONS = 40
#: Generations left out of every loop's times (caches, the cluster warming up).
WARM_UP = 2
#: Generations of a run at most (one metrics window: ``checkpoint_every``'s maximum).
MAX_GENERATIONS = 500


def spec_of(algorithm: dict, *, function: int, dimension: int, generations: int) -> dict:
    """The run spec of ``algorithm`` on one BBOB problem (seed 0)."""
    config = validate_config(
        {
            "campaign": "bbob_overhead",
            "master_seed": 0,
            "generations": generations,
            "checkpoint_every": generations,
            "mode": "dask",
            "shards": 1,
            "seeds": 1,
            "algorithms": {"a": algorithm},
            "domains": {
                "b": {
                    "type": "bbob",
                    "functions": [function],
                    "dimensions": [dimension],
                    "instances": [1],
                }
            },
        }
    )
    return run_spec(config, algorithm="a", domain=f"b_f{function}_d{dimension}_i1", seed=0)


class EvaluationClock:
    """CPU seconds spent in ioh's evaluations in this process: ``tasks.bbob.values``
    (what the ``bbob`` domain's function and the plain loop call) wrapped with a timer."""

    seconds = 0.0

    @classmethod
    def install(cls) -> None:
        values = bbob.values

        def timed(*args, **kwargs):
            began = time.process_time()
            try:
                return values(*args, **kwargs)
            finally:
                cls.seconds += time.process_time() - began

        bbob.values = timed


class Timed:
    """Seconds spent in an optimizer's ``ask`` and ``tell``, counted by wrapping the
    two methods on the instance (what every loop calls)."""

    def __init__(self, optimizer):
        self.seconds = 0.0
        for name in ("ask", "tell"):
            setattr(optimizer, name, self._timed(getattr(optimizer, name)))

    def _timed(self, method):
        def timed(*args, **kwargs):
            began = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - began

        return timed


def plain(spec: dict, *, generations: int) -> dict:
    """The optimizer's own loop in this process: ask, ioh, tell."""
    function, instance = (spec["domain_spec"]["params"][key] for key in ("function", "instance"))
    optimizer = build_optimizer(spec)
    asktell = 0.0
    best = -np.inf
    count = 0
    for generation in range(1, generations + 1):
        if generation == WARM_UP + 1:
            began, cpu, asktell, count = time.perf_counter(), time.process_time(), 0.0, 0
            EvaluationClock.seconds = 0.0
        tick = time.process_time()
        solutions = optimizer.ask()
        tock = time.process_time()
        objective = -bbob.values(solutions, function=function, instance=instance)
        tack = time.process_time()
        optimizer.tell(objective, np.empty((len(objective), 0)))
        asktell += (tock - tick) + (time.process_time() - tack)
        best = max(best, float(objective.max()))
        count += len(objective)
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {
        "wall": wall,
        "cpu": cpu,
        "eval": EvaluationClock.seconds,
        "asktell": asktell,
        "count": count,
        "best": best,
    }


def dask_mode(spec: dict, *, generations: int, workers: int) -> dict:
    """Dask mode's segment loop (``run_generations``), with ``workers`` LocalCluster
    workers (0: in this process); the cluster's start is not counted here."""
    state = initialise(spec)
    timed = Timed(state.optimizer)
    with (
        contextlib.nullcontext()
        if workers == 0
        else dask_client(scheduler_file=None, workers=workers, where="benchmark")
    ) as client:
        arguments = {"shards": 1, "client": client, "workers": max(workers, 1), "total": None}
        state = run_generations(state, until=WARM_UP, log=lambda line: None, **arguments)
        timed.seconds = EvaluationClock.seconds = 0.0
        began, cpu = time.perf_counter(), time.process_time()
        state = run_generations(state, until=generations, log=lambda line: None, **arguments)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    window = state.metrics_window[WARM_UP:]
    return {
        "wall": wall,
        "cpu": cpu,
        # In this process: ioh's CPU seconds; on a worker: the shard step's own timing.
        "eval": EvaluationClock.seconds if workers == 0 else float(window["eval_seconds"].sum()),
        "asktell": timed.seconds,
        "count": int(window["evaluations"][-1] - state.metrics_window["evaluations"][WARM_UP - 1]),
        "best": float(window["best_objective"][-1]),
    }


def fixed_costs(spec: dict, *, repeats: int) -> dict:
    """Seconds of a LocalCluster of one worker started and closed (once per segment)."""
    from evocamp.catalogue.factory import resolve_run

    run = resolve_run(spec)
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        with dask_client(
            scheduler_file=None,
            workers=1,
            preload=run.batch_format.shard_modules,
            where="benchmark",
        ):
            pass
        seconds.append(time.perf_counter() - began)
    return {"cluster start and close (s)": statistics.median(seconds)}


LOOPS = {
    "plain loop": lambda spec, generations: plain(spec, generations=generations),
    "dask mode, 1 worker": lambda spec, generations: dask_mode(
        spec, generations=generations, workers=1
    ),
    "dask mode, 0 workers": lambda spec, generations: dask_mode(
        spec, generations=generations, workers=0
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument(
        "--evaluations", type=int, default=20_000, help="per loop (at least 20 generations)"
    )
    parser.add_argument("--function", type=int, default=1)
    parser.add_argument("--dimension", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each loop (medians)")
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS))
    args = parser.parse_args()
    EvaluationClock.install()
    rows = []
    for name in args.optimizers:
        make, largest = OPTIMIZERS[name]
        for batch in args.batches:
            if largest is not None and batch > largest:
                continue
            generations = (
                TPE_GENERATIONS
                if name == "optuna_tpe"
                else min(max(20, args.evaluations // batch), MAX_GENERATIONS - WARM_UP) + WARM_UP
            )
            spec = spec_of(
                make(batch), function=args.function, dimension=args.dimension,
                generations=generations,
            )  # fmt: skip
            runs = {loop: [] for loop in LOOPS}
            for _ in range(args.repeats):  # interleaved: drifts of the load hit every loop
                for loop, measure in LOOPS.items():
                    runs[loop].append(measure(spec, generations))
            plain_best = runs["plain loop"][0]["best"]
            for loop, results in runs.items():
                wall = statistics.median(r["wall"] for r in results)
                count = results[0]["count"]
                per_generation = {  # ms
                    what: 1000 * statistics.median(r[what] for r in results) / (count / batch)
                    for what in ("wall", "cpu", "eval", "asktell")
                }
                base = "wall" if loop == "dask mode, 1 worker" else "cpu"
                share = statistics.median(
                    (r[base] - r["eval"] - r["asktell"]) / r[base] for r in results
                )
                rows.append(
                    [
                        name,
                        batch,
                        loop,
                        f"{count / wall:,.0f}",
                        *(
                            f"{per_generation[what]:.2f}"
                            for what in ("wall", "cpu", "eval", "asktell")
                        ),
                        f"{100 * share:.0f}% of {base}",
                        "yes" if all(r["best"] == plain_best for r in results) else "NO",
                    ]
                )
            print(f"done {name} batch {batch}", file=sys.stderr, flush=True)
    costs = fixed_costs(
        spec_of(OPTIMIZERS["cma_es"][0](10), function=args.function, dimension=args.dimension,
                generations=10),
        repeats=args.repeats,
    )  # fmt: skip
    print(f"machine: {machine()}")
    print(
        f"BBOB f{args.function}, {args.dimension}-d; steady state (first {WARM_UP} generations "
        f"left out), medians of {args.repeats} runs"
    )
    print(
        table(
            [
                "optimizer",
                "batch",
                "loop",
                "evaluations/s",
                "ms/generation (wall)",
                "ms/generation (CPU, this process)",
                "evaluation ms/gen",
                "ask/tell ms/gen (CPU)",
                "neither (share)",
                "same best as plain",
            ],
            rows,
        )
    )
    print("; ".join(f"{what}: {value:.2f}" for what, value in costs.items()))


if __name__ == "__main__":
    main()
