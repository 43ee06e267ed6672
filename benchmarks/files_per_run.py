"""Files a finished shard-mode run leaves behind (inode quotas on shared clusters).

    python benchmarks/files_per_run.py [--generations 1000] [--shards 8] [--checkpoint-every 10]
    python benchmarks/files_per_run.py --checkout /path/to/other/clone   # measure another version
    python benchmarks/files_per_run.py --keep-evaluations false   # or true, auto (the default)

Runs one campaign of one run (MAP-Elites on a 4-d sphere: evaluation is negligible, so
the count is all orchestration) and counts the files below ``results/`` (run folder,
its logs, campaign figures) and in Snakemake's ``.snakemake/`` folder, and the bytes of
the kept evaluations (``evaluations.h5``, in total and per generation).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

from common import REPO, machine, scratch_folder, snakemake, table, write_config

CAMPAIGN = {
    "campaign": "files",
    "master_seed": 1,
    "seeds": 1,
    "algorithms": {"me": {"type": "map_elites", "batch_size": 16, "archive": {"dims": [8, 8]}}},
    "domains": {"sphere": {"type": "sphere", "solution_dim": 4}},
}


def count_files(folder: Path) -> int:
    """Files and folders below ``folder`` (each takes an inode)."""
    return sum(1 for _ in folder.rglob("*")) if folder.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--checkout", type=Path, default=REPO, help="clone to measure")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--keep-evaluations",
        choices=("auto", "true", "false"),
        default=None,
        help="the campaign's keep_evaluations (default: left out, its default)",
    )
    args = parser.parse_args()
    with scratch_folder("evocamp-files-", keep=args.workdir) as workdir:
        config = {
            **CAMPAIGN,
            "generations": args.generations,
            "shards": args.shards,
            "checkpoint_every": args.checkpoint_every,
        }
        if args.keep_evaluations is not None:
            keep = {"true": True, "false": False}.get(args.keep_evaluations, "auto")
            # the old key (storage.keep_evaluations now): earlier checkouts read it too
            config["keep_evaluations"] = keep
        write_config(workdir, config)
        checkout = args.checkout.resolve()
        command = snakemake(workdir, "--quiet", snakefile=checkout / "Snakefile")
        environment = {**os.environ, "PYTHONPATH": str(checkout / "src")}
        began = time.perf_counter()
        subprocess.run(command, check=True, env=environment, capture_output=True)
        seconds = time.perf_counter() - began
        revision = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        results, snakemake_folder = workdir / "results", workdir / ".snakemake"
        run = results / "files" / "me" / "sphere" / "seed0"
        logs = results / "files" / "logs" / "me" / "sphere" / "seed0"
        kept = len(list((run / "checkpoints").glob("gen_*.h5")))
        evaluations = run / "evaluations.h5"
        evaluation_bytes = evaluations.stat().st_size if evaluations.exists() else 0
        rows = [
            [
                revision,
                args.generations,
                args.shards,
                args.checkpoint_every,
                kept,
                count_files(run),
                count_files(logs),
                count_files(results),
                count_files(snakemake_folder / "metadata"),
                count_files(snakemake_folder),
                count_files(results) + count_files(snakemake_folder),
                f"{evaluation_bytes:,}",
                f"{evaluation_bytes / args.generations:,.0f}",
                f"{seconds:.0f}",
            ]
        ]
    print(f"machine: {machine()}")
    header = ["version", "generations", "shards", "K", "kept checkpoints", "run folder"]
    header += ["run logs", "results/ total", ".snakemake/metadata", ".snakemake/ total"]
    header += ["files + folders", "evaluations.h5 bytes", "bytes / generation", "wall s"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
