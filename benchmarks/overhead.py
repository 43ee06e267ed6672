"""Per-generation wall time: this pipeline (Dask mode, shard mode) against the peer loop.

    python benchmarks/overhead.py [--costs 0 0.1 1 10] [--generations 6] [--workers 8]

The peer is the loop of pyribs' Lunar Lander example: scheduler.ask(), client.map over
the batch on a Dask LocalCluster, client.gather, scheduler.tell(). All three run
CMA-ME (15 emitters x 36, 100-d sphere, 100x100 grid) with the batch split into
``workers`` chunks, each sleeping c seconds, on ``workers`` single-threaded workers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import REPO, machine, measured, snakemake, table, write_config

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)

HERE = Path(__file__).resolve().parent
ALGORITHM = {
    "type": "cma_me",
    "emitters": 15,
    "batch_size": 36,
    "sigma": 0.5,
    "archive": {"dims": [100, 100]},
}


def campaign(cost: float, *, generations: int, workers: int, mode: str) -> dict:
    return {
        "campaign": "overhead",
        "master_seed": 1,
        "generations": generations,
        "checkpoint_every": generations,
        "shards": workers,
        "seeds": 1,
        "mode": mode,
        "dask": {"workers": workers},
        "algorithms": {"cmame": ALGORITHM},
        "domains": {
            "sphere": {
                "type": "plugin",
                "function": "sleepy:sleepy_sphere",
                "python_path": str(HERE),
                "solution_dim": 100,
                "measure_ranges": [[-256, 256], [-256, 256]],
                "params": {"seconds": cost},
                "chunk_size": 1_000_000,  # one call (one sleep) per shard
            }
        },
    }


def peer(cost: float, *, generations: int, workers: int) -> float:
    """Median seconds per generation of the pyribs + Dask loop."""
    from distributed import Client, LocalCluster
    from sleepy import sleepy_sphere

    from evocamp.algorithms import build_scheduler
    from evocamp.config import run_spec, validate_config

    config = validate_config(campaign(cost, generations=generations, workers=workers, mode="dask"))
    scheduler = build_scheduler(run_spec(config, algorithm="cmame", domain="sphere", seed=0))
    times = []
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        for _ in range(generations):
            began = time.perf_counter()
            solutions = scheduler.ask()
            chunks = np.array_split(solutions, workers)
            seeds = [np.zeros(len(chunk), dtype=np.uint64) for chunk in chunks]
            futures = client.map(sleepy_sphere, chunks, seeds, seconds=cost, pure=False)
            results = client.gather(futures)
            scheduler.tell(
                np.concatenate([r["objective"] for r in results]),
                np.concatenate([r["measures"] for r in results]),
            )
            times.append(time.perf_counter() - began)
    return statistics.median(times[1:])


def pipeline(
    cost: float, *, generations: int, workers: int, mode: str, root: Path
) -> tuple[float, float]:
    """(median seconds per generation, total wall seconds / generations) of a campaign."""
    workdir = root / f"{mode}-{cost}"
    write_config(workdir, campaign(cost, generations=generations, workers=workers, mode=mode))
    seconds, _ = measured(snakemake(workdir, cores=workers))
    metrics = np.genfromtxt(next(workdir.rglob("metrics.csv")), delimiter=",", names=True)
    steady = float(np.median(metrics["wall_seconds"][2:]))
    return steady, seconds / generations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=float, nargs="+", default=[0.0, 0.1, 1.0, 10.0])
    parser.add_argument("--generations", type=int, default=6)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evocamp-overhead-"))
    rows = []
    for cost in args.costs:
        base = peer(cost, generations=args.generations, workers=args.workers)
        rows.append(
            [cost, "peer (pyribs + Dask loop)", f"{base:.3f}", "", "1.00", f"{base - cost:.3f}"]
        )
        for mode in ("dask", "shards"):
            steady, amortised = pipeline(
                cost, generations=args.generations, workers=args.workers, mode=mode, root=root
            )
            rows.append(
                [
                    cost,
                    f"evocamp {mode} mode",
                    f"{steady:.3f}",
                    f"{amortised:.3f}",
                    f"{steady / base:.2f}",
                    f"{steady - cost:.3f}",
                ]
            )
        print(f"done c={cost}", file=sys.stderr, flush=True)
    print(f"machine: {machine()}")
    print(f"workers: {args.workers}, generations per run: {args.generations}, repo: {REPO}")
    print(
        table(
            [
                "c (s per chunk)",
                "loop",
                "s/generation (median)",
                "s/generation incl. start-up",
                "ratio to peer",
                "overhead s/gen",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
