"""ant_omni: how far the first generations explore from x0 = 0 against a random initial
population (``initial_population: random``, QDax's LeCun-uniform policies).

    python benchmarks/ant_omni_start.py [--generations 10] [--seeds 0 1]
        [--episode-length 100] [--processes 2]

The QD algorithms of ``config/qd_rl.yaml`` (CVT-MAP-Elites with iso-line variation and
CMA-ME with separable CMA-ES, their settings as shipped: 160 solutions per generation,
a CVT of 1,024 cells) on ``ant_omni`` with its default 64-64 MLP and ``--episode-length``
steps, each with ``initial_population: x0`` and ``random``. A run is evocamp's
optimizer (``build_optimizer`` of the run spec the campaign would use) asked and told in
one process, each batch evaluated by the domain function: what a campaign computes,
without Snakemake. Prints coverage, QD score and the spread of the final torso positions
after the first batch and after the last generation.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import time

import numpy as np
import yaml
from common import REPO, machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)

ALGORITHMS = ("map_elites_line", "cma_me")


def run(job: tuple[str, bool, int, int, int]) -> dict:
    """One run: coverage and QD score after the first batch and the last generation."""
    from evocamp.catalogue.factory import build_optimizer
    from evocamp.config import run_spec, validate_config
    from evocamp.families.qd import ArchiveElites, QDBatch
    from evocamp.model.protocol import ELITES
    from evocamp.tasks.functions import ant_omni

    name, random, seed, generations, length = job
    shipped = yaml.safe_load((REPO / "config" / "qd_rl.yaml").read_text())
    algorithm = copy.deepcopy(shipped["algorithms"][name])
    algorithm["initial_population"] = "random" if random else "x0"
    config = validate_config(
        {
            "master_seed": 0,
            "shards": 1,
            "algorithms": {name: algorithm},
            "domains": {"ant_omni": {"type": "ant_omni", "params": {"episode_length": length}}},
        }
    )
    optimizer = build_optimizer(run_spec(config, algorithm=name, domain="ant_omni", seed=seed))
    began, rows = time.perf_counter(), {}
    for generation in range(generations + 1):
        batch = optimizer.ask()
        if isinstance(batch, dict):
            batch = QDBatch.solutions(
                {**batch, ELITES: ArchiveElites(optimizer.archive)}, 0, QDBatch.size(batch)
            )
        seeds = np.arange(len(batch), dtype=np.uint64)
        out = ant_omni(batch, seeds, episode_length=length)
        optimizer.tell(out["objective"], out["measures"], episode_steps=out["episode_steps"])
        if generation in (0, generations):
            stats = optimizer.archive.stats
            rows[generation] = (stats.coverage, stats.qd_score, np.std(out["measures"], axis=0))
    return {"job": job, "rows": rows, "seconds": time.perf_counter() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--episode-length", type=int, default=100)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    jobs = [
        (name, random, seed, args.generations, args.episode_length)
        for name in ALGORITHMS
        for random in (False, True)
        for seed in args.seeds
    ]
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        results = pool.map(run, jobs)
    print(machine())
    rows = []
    for result in results:
        name, random, seed, generations, _ = result["job"]
        first, last = result["rows"][0], result["rows"][generations]
        rows.append(
            [
                name,
                "random" if random else "x0",
                seed,
                f"{first[0]:.4f}",
                f"{first[2][0]:.3f}, {first[2][1]:.3f}",
                f"{last[0]:.4f}",
                f"{last[1]:,.0f}",
                f"{result['seconds']:.0f} s",
            ]
        )
    header = [
        "algorithm",
        "start",
        "seed",
        "coverage, first batch",
        "sd of final (x, y), first batch",
        f"coverage, generation {args.generations}",
        f"QD score, generation {args.generations}",
        "wall",
    ]
    print(table(header, rows))


if __name__ == "__main__":
    main()
