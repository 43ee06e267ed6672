"""Issue 24's algorithms beside pyribs' own usage of the same components.

    python benchmarks/qd_types.py [--seeds 0 1 2 3 4] [--generations 100]
        [--bop-seeds 0 1 2] [--bop-generations 10] [--only NAME ...]

Task: the planar arm (``evocamp.tasks.functions.arm``), 10 joints of length 1, angles in
[-pi, pi], objective -Var(theta), measures = end-effector (x, y) in [-10, 10]^2, a
20 x 20 grid result archive with QD score offset -pi^2. For every algorithm and seed,
two runs with the same components, hyperparameters and budget:

- **evocamp**: the catalogue's type, run by evocamp's own loop in this process
  (``initialise``, the shard step ``evaluate_shard`` on 2 shards, ``tell``): the
  computation the pipeline runs, minus Snakemake (whose results are bitwise the same,
  tests/workflow/test_qd_zoo.py);
- **pyribs**: a direct ``scheduler.ask()`` / evaluate / ``scheduler.tell()`` loop
  written from pyribs' examples (``examples/sphere.py``: ``me_map_elites`` for the
  bandit, ``dds``, ``ns_cma``'s archive set-up; ``examples/bop_elites.py``) and API
  documentation, seeded its own way (``seed * 100 + i``).

Seeds are derived differently, so the two are compared as distributions: the table
prints mean and standard deviation over seeds of the final QD score, coverage and CQD
score (evocamp's CQD function with the same target points for both) and the mean wall
time per run. CMA-ES is also run with pycma (``cma.CMAEvolutionStrategy``, same
popsize and sigma0) to compare fidelity and speed. BOP-Elites runs on a 4-joint arm
and a 10 x 10 grid (its pattern search takes seconds per generation), and prints its
GP fit and EJIE search time per generation as the archive grows.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
from common import machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.catalogue.domains import objective_max
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.families.cqd import cqd_score, cqd_settings
from evocamp.loop.engine import initialise, tell
from evocamp.loop.evaluation import evaluate_shard
from evocamp.tasks.functions import arm

JOINTS = 10
DIMS = [20, 20]
OFFSET = -(np.pi**2)

#: evocamp algorithm entries (the catalogue's defaults unless given here).
ALGORITHMS = {
    "novelty_search": {"type": "novelty_search", "batch_size": 32},
    "dominated_novelty_search": {"type": "dominated_novelty_search", "batch_size": 32},
    "cma_me_bandit": {"type": "cma_me_bandit", "emitters": 2, "batch_size": 16},
    "density_descent": {"type": "density_descent", "batch_size": 32},
    "cma_es": {"type": "cma_es", "popsize": 32},
    "bop_elites": {
        "type": "bop_elites",
        "batch_size": 4,
        "initial_points": 20,
        "archive": {"dims": [10, 10]},
    },
}


def spec_for(name: str, seed: int) -> dict:
    algorithm = dict(ALGORITHMS[name])
    algorithm.setdefault("archive", {"dims": DIMS})
    joints = 4 if name == "bop_elites" else JOINTS
    config = validate_config(
        {
            "master_seed": 2024,
            "algorithms": {name: algorithm},
            "domains": {"arm": {"type": "arm", "solution_dim": joints}},
            "shards": 2,
        }
    )
    return run_spec(config, algorithm=name, domain="arm", seed=seed)


def evocamp_run(name: str, seed: int, generations: int) -> dict:
    """The catalogue's type through evocamp's loop (2 shards per generation)."""
    spec = spec_for(name, seed)
    began = time.perf_counter()
    state = initialise(spec)
    timings = []
    for generation in range(1, generations + 1):
        shards = [
            evaluate_shard(
                resolve_run(spec),
                batch=state.next_batch,
                seeds=state.next_seeds,
                generation=generation,
                shard=shard,
                shards=2,
            )
            for shard in range(2)
        ]
        state = tell(state, shards)
        row = state.metrics_window[-1]
        timings.append(
            (
                int(row["evaluations"]),
                int(row["num_elites"]),
                row["fit_seconds"],
                row["propose_seconds"],
            )
        )
    return {
        **summary(state.archive, spec),
        "seconds": time.perf_counter() - began,
        "timings": timings,
    }


def summary(archive, spec: dict) -> dict:
    stats = archive.stats
    return {
        "qd_score": stats.qd_score,
        "coverage": stats.coverage,
        "cqd": cqd_score(
            archive, **cqd_settings(spec, objective_max=objective_max(spec["domain_spec"]))
        ),
        "best": stats.obj_max,
    }


def pyribs_scheduler(name: str, seed: int, spec: dict):
    """The same components as a pyribs user assembles them (examples/sphere.py,
    examples/bop_elites.py)."""
    from ribs.archives import DensityArchive, DNSArchive, GridArchive, ProximityArchive
    from ribs.emitters import (
        BayesianOptimizationEmitter,
        EvolutionStrategyEmitter,
        GaussianEmitter,
        IsoLineEmitter,
    )
    from ribs.schedulers import BanditScheduler, BayesianOptimizationScheduler, Scheduler

    algorithm = spec["algorithm_spec"]
    dim = spec["domain_spec"]["solution_dim"]
    ranges = [tuple(r) for r in spec["domain_spec"]["measure_ranges"]]
    bounds = [(-np.pi, np.pi)] * dim
    x0 = np.zeros(dim)
    seeds = [seed * 100 + i for i in range(100)]
    result = GridArchive(
        solution_dim=dim,
        dims=algorithm["archive"]["dims"],
        ranges=ranges,
        qd_score_offset=OFFSET,
        seed=seeds[0],
    )
    iso = {"iso_sigma": 0.01, "line_sigma": 0.2, "x0": x0, "bounds": bounds, "batch_size": 32}
    gauss = {"sigma": 0.5, "x0": x0, "bounds": bounds, "batch_size": 32}
    if name == "novelty_search":
        archive = ProximityArchive(
            solution_dim=dim,
            measure_dim=2,
            k_neighbors=15,
            novelty_threshold=0.037 * 20,
            qd_score_offset=OFFSET,
            seed=seeds[1],
        )
        return Scheduler(archive, [GaussianEmitter(archive, **gauss, seed=seeds[2])], result)
    if name == "dominated_novelty_search":
        archive = DNSArchive(
            solution_dim=dim,
            measure_dim=2,
            capacity=1024,
            k_neighbors=3,
            qd_score_offset=OFFSET,
            seed=seeds[1],
        )
        return Scheduler(archive, [GaussianEmitter(archive, **gauss, seed=seeds[2])], result)
    if name == "cma_me_bandit":
        fresh = iter(seeds[2:])
        pool = [
            EvolutionStrategyEmitter(
                result,
                x0=x0,
                sigma0=0.5,
                ranker=ranker,
                bounds=bounds,
                batch_size=16,
                seed=next(fresh),
            )
            for ranker in ("obj", "2rd", "2imp")
            for _ in range(2)
        ]
        pool += [
            IsoLineEmitter(result, **{**iso, "line_sigma": 0.1, "batch_size": 16}, seed=next(fresh))
            for _ in range(2)
        ]
        return BanditScheduler(result, pool, num_active=2, reselect="terminated")
    if name == "density_descent":
        archive = DensityArchive(
            measure_dim=2,
            buffer_size=10000,
            density_method="kde",
            bandwidth=0.05 * 20,
            seed=seeds[1],
        )
        emitter = EvolutionStrategyEmitter(
            result,
            x0=x0,
            sigma0=1.5,
            ranker="density",
            selection_rule="mu",
            restart_rule="basic",
            bounds=bounds,
            batch_size=32,
            seed=seeds[2],
        )
        return Scheduler(archive, [emitter], result)
    if name == "cma_es":
        emitter = EvolutionStrategyEmitter(
            result,
            x0=x0,
            sigma0=0.5,
            ranker="obj",
            selection_rule="mu",
            restart_rule="basic",
            bounds=bounds,
            batch_size=32,
            seed=seeds[2],
        )
        return Scheduler(result, [emitter])
    if name == "bop_elites":
        emitter = BayesianOptimizationEmitter(
            result,
            bounds=bounds,
            search_nrestarts=5,
            min_obj=OFFSET,
            num_initial_samples=20,
            batch_size=4,
            seed=seeds[2],
        )
        return BayesianOptimizationScheduler(result, [emitter])
    raise KeyError(name)


def pyribs_run(name: str, seed: int, generations: int) -> dict:
    spec = spec_for(name, seed)
    began = time.perf_counter()
    scheduler = pyribs_scheduler(name, seed, spec)
    zeros = np.zeros(1, dtype=np.uint64)
    for _ in range(generations):
        solutions = scheduler.ask()
        results = arm(solutions, np.repeat(zeros, len(solutions)))
        scheduler.tell(results["objective"], results["measures"])
    return {**summary(scheduler.result_archive, spec), "seconds": time.perf_counter() - began}


def pycma_run(seed: int, generations: int) -> dict:
    """CMA-ES by pycma (same popsize and sigma0), filling the same grid archive."""
    import cma
    from ribs.archives import GridArchive

    spec = spec_for("cma_es", seed)
    began = time.perf_counter()
    archive = GridArchive(
        solution_dim=JOINTS,
        dims=DIMS,
        ranges=[tuple(r) for r in spec["domain_spec"]["measure_ranges"]],
        qd_score_offset=OFFSET,
        seed=seed,
    )
    es = cma.CMAEvolutionStrategy(
        np.zeros(JOINTS),
        0.5,
        {"popsize": 32, "seed": seed + 1, "bounds": [-np.pi, np.pi], "verbose": -9},
    )
    for _ in range(generations):
        solutions = np.asarray(es.ask())
        results = arm(solutions, np.zeros(len(solutions), dtype=np.uint64))
        es.tell(list(solutions), list(-results["objective"]))
        archive.add(solutions, results["objective"], results["measures"])
    return {**summary(archive, spec), "seconds": time.perf_counter() - began}


def spread(runs: list[dict], key: str, fmt: str) -> str:
    values = [float(run[key]) for run in runs]
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{format(statistics.mean(values), fmt)} +- {format(deviation, fmt)}"


def row(label: str, runs: list[dict]) -> list:
    return [
        label,
        len(runs),
        spread(runs, "qd_score", ",.1f"),
        spread(runs, "coverage", ".3f"),
        spread(runs, "cqd", ",.1f"),
        spread(runs, "best", ".4f"),
        f"{statistics.mean(run['seconds'] for run in runs):.1f} s",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--bop-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--bop-generations", type=int, default=10)
    parser.add_argument("--only", nargs="+", choices=sorted(ALGORITHMS), default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # scipy's Sobol balance warnings (BOP-Elites)
    names = args.only or list(ALGORITHMS)
    rows, growth = [], []
    for name in names:
        bop = name == "bop_elites"
        seeds = args.bop_seeds if bop else args.seeds
        generations = args.bop_generations if bop else args.generations
        ours = [evocamp_run(name, seed, generations) for seed in seeds]
        theirs = [pyribs_run(name, seed, generations) for seed in seeds]
        rows.append(row(f"evocamp {name}", ours))
        rows.append(row(f"pyribs loop ({name})", theirs))
        if name == "cma_es":
            rows.append(row("pycma (cma_es)", [pycma_run(s, generations) for s in seeds]))
        if bop:
            growth = ours[0]["timings"]
    print(f"machine: {machine()}")
    print(
        f"arm {JOINTS} joints, {DIMS[0]} x {DIMS[1]} grid, {args.generations} generations, "
        f"seeds {args.seeds}; bop_elites: arm 4 joints, 10 x 10 grid, "
        f"{args.bop_generations} generations, seeds {args.bop_seeds}"
    )
    header = ["algorithm", "seeds", "QD score", "coverage", "CQD score", "best objective"]
    print(table([*header, "time per run"], rows))
    if growth:
        print("\nbop_elites (evocamp, first seed): time per generation as the archive grows")
        print(
            table(
                ["evaluations", "elites", "GP fit (tell)", "EJIE search (ask)"],
                [[e, n, f"{fit:.2f} s", f"{ask:.2f} s"] for e, n, fit, ask in growth],
            )
        )


if __name__ == "__main__":
    main()
