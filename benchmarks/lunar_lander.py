"""The Lunar Lander campaign beside its peer, pyribs' own tutorial loop, in one run.

    python benchmarks/lunar_lander.py [--generations 300] [--seeds 0 1 2] [--cores 2]

Runs ``config/lunar_lander.yaml`` (CMA-ME as pyribs' Lunar Lander tutorial runs it,
OpenAI-ES and SNES with the same 150 evaluations per generation) through Snakemake
with the given generations and seeds, and, for the same seeds, the tutorial's loop
itself (GridArchive 50 x 50 over x in [-1, 1] and y velocity in [-3, 0], QD score
offset -600, 5 EvolutionStrategyEmitters of batch 30, sigma0 1.0, ranker 2imp;
``scheduler.ask()`` / evaluate / ``scheduler.tell()`` in one process). Both evaluate
with ``evocamp.tasks.functions.lunar_lander`` (env seed 52), so the task is the same; seeds
differ in how they are derived, so runs are compared as distributions. Prints final
QD score, coverage, best return and wall time per algorithm (mean over seeds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import yaml
from common import REPO, machine, measured, scratch_folder, snakemake, table, write_config

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)


def tutorial_loop(seed: int, generations: int) -> dict:
    """pyribs' Lunar Lander tutorial: one scheduler, evaluated in this process."""
    from ribs.archives import GridArchive
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.schedulers import Scheduler

    from evocamp.tasks.functions import lunar_lander

    began = time.perf_counter()
    archive = GridArchive(
        solution_dim=32,
        dims=[50, 50],
        ranges=[(-1.0, 1.0), (-3.0, 0.0)],
        qd_score_offset=-600,
        seed=seed,
    )
    emitters = [
        EvolutionStrategyEmitter(
            archive, x0=np.zeros(32), sigma0=1.0, ranker="2imp", batch_size=30, seed=seed * 10 + i
        )
        for i in range(5)
    ]
    scheduler = Scheduler(archive, emitters)
    best = -np.inf
    for _ in range(generations):
        solutions = scheduler.ask()
        results = lunar_lander(solutions, np.zeros(len(solutions), dtype=np.uint64))
        best = max(best, float(results["objective"].max()))
        scheduler.tell(results["objective"], results["measures"])
    return {
        "qd_score": archive.stats.qd_score,
        "coverage": archive.stats.coverage,
        "best": best,
        "seconds": time.perf_counter() - began,
    }


def campaign_runs(
    seeds: list[int], generations: int, cores: int, workdir: Path, mode: str | None
) -> dict:
    """Final metrics of every run of the shipped campaign, and its wall time."""
    config = yaml.safe_load((REPO / "config" / "lunar_lander.yaml").read_text())
    config.update(generations=generations, seeds=seeds)
    if mode:
        config["mode"] = mode
    write_config(workdir, config)
    seconds, _ = measured(snakemake(workdir, "runs", cores=cores))
    runs = {}
    for path in sorted((workdir / "results" / "lunar_lander").rglob("metrics.csv")):
        rows = np.genfromtxt(path, delimiter=",", names=True)
        algorithm = path.parts[-4]
        runs.setdefault(algorithm, []).append(
            {
                "qd_score": rows["qd_score"][-1],
                "coverage": rows["coverage"][-1],
                "best": rows["best_objective"][-1],
                "seconds": seconds,
            }
        )
    return runs


def summary(name: str, runs: list[dict], note: str) -> list:
    def mean(key: str) -> float:
        return statistics.mean(float(run[key]) for run in runs)

    return [
        name,
        len(runs),
        f"{mean('qd_score'):,.0f}",
        f"{mean('coverage'):.3f}",
        f"{mean('best'):.1f}",
        f"{max(float(run['best']) for run in runs):.1f}",
        note.format(seconds=mean("seconds")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--mode", choices=["shards", "dask"], help="default: the config's")
    parser.add_argument("--no-peer", action="store_true", help="the campaign only")
    args = parser.parse_args()
    with scratch_folder("evocamp-lunar-") as workdir:
        runs = campaign_runs(args.seeds, args.generations, args.cores, workdir, args.mode)
    peer = [] if args.no_peer else [tutorial_loop(s, args.generations) for s in args.seeds]
    print(f"machine: {machine()}")
    print(f"{args.generations} generations x 150 evaluations, seeds {args.seeds}")
    header = ["algorithm", "runs", "QD score", "coverage", "best return (mean)"]
    header += ["best return (max)", "wall time"]
    mode = args.mode or "the config's mode"
    note = f"{{seconds:,.0f}} s, whole campaign, {args.cores} cores, {mode}"
    rows = [summary(f"evocamp {name}", members, note) for name, members in runs.items()]
    if peer:
        rows.append(
            summary("pyribs tutorial loop (CMA-ME)", peer, "{seconds:,.0f} s per run, 1 core")
        )
    print(table(header, rows))


if __name__ == "__main__":
    main()
