"""Shard jobs on Slurm: one job per shard, array jobs, grouped shards (issue 42).

    python benchmarks/slurm_shard_jobs.py [--shards 8 32] [--generations 3]
        [--seconds 2] [--group 4] [--workdir DIR]

Needs the local single-node cluster (``scripts/local-slurm start``; 8 CPUs by default).
One run of random search on a 4-d sphere whose every solution takes ``--seconds``
(``simulated_seconds``: a sleep, so 8 shards at once fit on 2 real cores), one solution
per shard, ``--generations`` generations, with the Slurm profile, three ways for each
shard count S:

- ``jobs``: one Slurm job per shard (the default);
- ``array``: ``--slurm-array-jobs=evaluate``, a generation's S shards one array job;
- ``grouped``: ``group_shards: true`` and ``--group-components ...=G``, G shards per job.

Prints per way: Slurm submissions per generation (``sbatch`` calls, an array counting
once), wall seconds per generation (the campaign's wall time over its generations),
and whether the shards of one Slurm job overlapped in time: the seconds between the
first and the last start of a shard inside one job (the Slurm logs are kept,
``--slurm-keep-successful-logs``, and their timestamps read; 0 when every shard is a
job of its own). The archives of the three ways are compared bit for bit.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from behaviour_digests import results_digests
from common import REPO, machine, scratch_folder, snakemake, table, write_config

SLURM_PROFILE = str(REPO / "profiles" / "slurm")
GROUP_NAME = "evaluate_{algorithm}_{domain}_{seed}_{gen}"


def campaign(shards: int, generations: int, seconds: float) -> dict:
    """One run, one solution per shard, each sleeping ``seconds``."""
    return {
        "campaign": "shard_jobs",
        "generations": generations,
        "checkpoint_every": generations,
        "shards": shards,
        "seeds": [0],
        "algorithms": {"rs": {"type": "random_search", "batch_size": shards}},
        "domains": {
            "sphere": {
                "type": "sphere",
                "solution_dim": 4,
                "bounds": [-5, 5],
                "simulated_seconds": {"distribution": "constant", "mean": seconds},
            }
        },
    }


def run_way(workdir: Path, config: dict, way: str, group: int) -> dict:
    """Run the campaign one way; its submissions, wall seconds and end-time spreads."""
    extra = {"grouped": {"group_shards": True}}.get(way, {})
    write_config(workdir, {**config, **extra})
    args = ["runs", "--profile", SLURM_PROFILE, "--slurm-keep-successful-logs"]
    if way == "array":
        args += ["--slurm-array-jobs=evaluate"]
    if way == "grouped":
        args += ["--group-components", f"{GROUP_NAME}={group}"]
    began = time.perf_counter()
    completed = subprocess.run(
        snakemake(workdir, *args), cwd=workdir, capture_output=True, text=True
    )
    wall = time.perf_counter() - began
    text = completed.stdout + completed.stderr
    if completed.returncode != 0:
        raise RuntimeError(f"{way} failed:\n{text[-4000:]}")
    single = len(re.findall(r"has been submitted with SLURM jobid", text))
    arrays = len(re.findall(r"Submitted array job", text))
    return {
        "submissions": single + arrays,
        "wall": wall,
        "spread": start_spread(workdir),
        "digests": results_digests(workdir / "results" / config["campaign"]),
    }


def start_spread(workdir: Path) -> float:
    """The largest span between the first and the last shard start inside one Slurm job
    (Snakemake's timestamped ``localrule evaluate:`` lines in the job's log)."""
    spans = [0.0]
    for log in (workdir / ".snakemake" / "slurm_logs").rglob("*.log"):
        starts = re.findall(
            r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]\nlocalrule evaluate:",
            log.read_text(errors="replace"),
            flags=re.MULTILINE,
        )
        moments = [time.mktime(time.strptime(start, "%a %b %d %H:%M:%S %Y")) for start in starts]
        if len(moments) > 1:
            spans.append(max(moments) - min(moments))
    return max(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--generations", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    rows = []
    with scratch_folder("evocamp-shard-jobs-", keep=args.workdir) as root:
        for shards in args.shards:
            config = campaign(shards, args.generations, args.seconds)
            results = {}
            for way in ("jobs", "array", "grouped"):
                results[way] = run_way(root / f"S{shards}_{way}", config, way, args.group)
                result = results[way]
                rows.append(
                    [
                        shards,
                        way if way != "grouped" else f"grouped {args.group}",
                        f"{result['submissions'] / args.generations:.1f}",
                        f"{result['wall'] / args.generations:.1f}",
                        f"{result['spread']:.1f}",
                    ]
                )
                print(rows[-1], file=sys.stderr, flush=True)
            same = {way: r["digests"] == results["jobs"]["digests"] for way, r in results.items()}
            if not all(same.values()):
                raise SystemExit(f"archives differ between ways at S={shards}: {same}")
    print(machine())
    print(
        f"{args.seconds:g} s per shard, {args.generations} generations; "
        "archives bitwise equal across the three ways"
    )
    print(
        table(
            [
                "S",
                "way",
                "submissions / generation",
                "s / generation",
                "shard starts in one job span (s)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
