"""Per-generation wall time: this pipeline (Dask mode, shard mode) against the peer loop.

    python benchmarks/overhead.py [--costs 0 0.1 1 10] [--generations N] [--repeats R]
                                  [--workers 8]

The peer is the loop of pyribs' Lunar Lander example: scheduler.ask(), client.map over
the batch on a Dask LocalCluster, client.gather, scheduler.tell(). All three run
CMA-ME (15 emitters x 36, 100-d sphere, 100x100 grid) with the batch split into
``workers`` chunks, each sleeping c seconds, on ``workers`` single-threaded workers.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from common import (
    CMA_ME_BENCHMARK,
    REPO,
    machine,
    measured,
    scratch_folder,
    snakemake,
    table,
    write_config,
)

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.executors.housekeeping import job_log

HERE = Path(__file__).resolve().parent
ALGORITHM = CMA_ME_BENCHMARK


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


def peer_process(cost: float, *, generations: int, workers: int) -> tuple[float, float]:
    """:func:`peer` run as a script of its own, as a user runs it (a fresh process is
    measurably slower than a long-lived one, so this keeps the comparison fair)."""
    command = [sys.executable, __file__, "--peer", str(cost), str(generations), str(workers)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    median, mean = (float(value) for value in out.split())
    return median, mean


def peer(cost: float, *, generations: int, workers: int) -> tuple[float, float]:
    """(median, mean) seconds per generation of the pyribs + Dask loop (after the first)."""
    from distributed import Client, LocalCluster
    from sleepy import sleepy_sphere

    from evocamp.catalogue.factory import build_optimizer
    from evocamp.config import run_spec, validate_config

    config = validate_config(campaign(cost, generations=generations, workers=workers, mode="dask"))
    spec = run_spec(config, algorithm="cmame", domain="sphere", seed=0)
    scheduler = build_optimizer(spec).scheduler
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
    return statistics.median(times[1:]), statistics.mean(times[1:])


#: Generations per run by default: enough for a steady state, within minutes.
DEFAULT_GENERATIONS = {0.0: 100, 0.1: 40, 1.0: 12, 10.0: 6}
CHECKPOINT_LINE = re.compile(r"checkpoint written \(([\d.]+) MB in ([\d.]+) s\)")


def pipeline(
    cost: float, *, generations: int, workers: int, mode: str, workdir: Path
) -> tuple[float, float, float]:
    """Seconds per generation of a campaign: (median, mean with the segment's
    checkpoint write spread over its generations, whole invocation / generations).

    Generation 1 (workers and caches warming up) is left out of the first two.
    """
    write_config(workdir, campaign(cost, generations=generations, workers=workers, mode=mode))
    seconds, _ = measured(snakemake(workdir, cores=workers))
    metrics = np.genfromtxt(next(workdir.rglob("metrics.csv")), delimiter=",", names=True)
    steady = metrics["wall_seconds"][2:]
    checkpoint = 0.0
    if mode == "dask":
        run_logs = next(workdir.rglob("initialise.log")).parent
        log = job_log(run_logs, f"gen_{generations:06d}/segment.log")
        checkpoint = float(CHECKPOINT_LINE.search(log).group(2))
    amortised = (steady.sum() + checkpoint) / len(steady)
    return float(np.median(steady)), float(amortised), seconds / generations


def main() -> None:
    if sys.argv[1:2] == ["--peer"]:
        cost, generations, workers = sys.argv[2:5]
        print(*peer(float(cost), generations=int(generations), workers=int(workers)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=float, nargs="+", default=[0.0, 0.1, 1.0, 10.0])
    parser.add_argument(
        "--generations", type=int, help="per run (default: 100, 40, 12, 6 for c = 0 .. 10)"
    )
    parser.add_argument(
        "--repeats", type=int, help="runs of each loop per c (default: 5 for c < 1, else 3)"
    )
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    with scratch_folder("evocamp-overhead-") as root:
        rows = []
        for cost in args.costs:
            generations = args.generations or DEFAULT_GENERATIONS.get(cost, 10)
            runs = {"peer": [], "dask": [], "shards": []}
            repeats = args.repeats or (5 if cost < 1 else 3)
            for repeat in range(repeats):  # interleaved, so drifts hit every loop alike
                runs["peer"].append(
                    peer_process(cost, generations=generations, workers=args.workers)
                )
                for mode in ("dask", "shards"):
                    workdir = root / f"{mode}-{cost}-{repeat}"
                    runs[mode].append(
                        pipeline(
                            cost,
                            generations=generations,
                            workers=args.workers,
                            mode=mode,
                            workdir=workdir,
                        )
                    )
            base, base_mean = (
                statistics.median(values) for values in zip(*runs["peer"], strict=True)
            )
            rows.append(
                [cost, generations, "peer (pyribs + Dask loop)", f"{base:.3f}", f"{base_mean:.3f}",
                 "", "1.00", "1.00", f"{base_mean - cost:.3f}"]
            )  # fmt: skip
            for mode in ("dask", "shards"):
                steady, amortised, whole = (
                    statistics.median(values) for values in zip(*runs[mode], strict=True)
                )
                rows.append(
                    [
                        cost,
                        generations,
                        f"evocamp {mode} mode",
                        f"{steady:.3f}",
                        f"{amortised:.3f}",
                        f"{whole:.3f}",
                        f"{steady / base:.2f}",
                        f"{amortised / base_mean:.2f}",
                        f"{amortised - cost:.3f}",
                    ]
                )
            print(f"done c={cost}", file=sys.stderr, flush=True)
    print(f"machine: {machine()}")
    print(f"workers: {args.workers}; medians over repeated runs; repo: {REPO}")
    print(
        table(
            [
                "c (s per chunk)",
                "generations",
                "loop",
                "s/gen (median)",
                "s/gen (mean; ours incl. checkpoint)",
                "s/gen incl. start-up",
                "ratio to peer (median)",
                "ratio to peer (mean)",
                "overhead s/gen (mean - c)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
