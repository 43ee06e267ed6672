"""DAG build time and memory of `snakemake --dry-run` against the number of generations.

    python benchmarks/dag_build.py [--generations 100 1000 10000] [--resume]

With --resume, each campaign is first run half-way (Dask mode, a trivial domain) and
the dry run then plans the resume in shard mode (8 shards), as after an interruption.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import machine, measured, scratch_folder, snakemake, table, write_config

CAMPAIGN = {
    "campaign": "dag",
    "master_seed": 1,
    "shards": 8,
    "seeds": 1,
    "checkpoint_every": 50,
    "algorithms": {"me": {"type": "map_elites", "batch_size": 8, "archive": {"dims": [8, 8]}}},
    "domains": {"sphere": {"type": "sphere", "solution_dim": 4}},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=50,
        help="K: the window of generations Snakemake plans at once",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    with scratch_folder("evocamp-dag-", keep=args.workdir) as root:
        rows = []
        for generations in args.generations:
            workdir = root / f"g{generations}"
            done = 0
            if args.resume:
                done = generations // 2
                write_config(
                    workdir,
                    {
                        **CAMPAIGN,
                        "generations": done,
                        "mode": "dask",
                        "shards": 1,
                        "checkpoint_every": args.checkpoint_every,
                        "dask": {"workers": 1},
                    },
                )
                measured(snakemake(workdir))
            write_config(
                workdir,
                {
                    **CAMPAIGN,
                    "generations": generations,
                    "checkpoint_every": args.checkpoint_every,
                },
            )
            seconds, megabytes = measured(snakemake(workdir, "--dry-run"))
            rows.append(
                [generations, 8, args.checkpoint_every, done, f"{seconds:.2f}", f"{megabytes:.0f}"]
            )
    print(f"machine: {machine()}")
    print(table(["generations", "shards", "K", "already run", "dry-run s", "peak MB"], rows))


if __name__ == "__main__":
    main()
