"""Bytes a shard-mode campaign writes per generation, measured at the block device.

    truncate -s 2G /tmp/fp.img; mkfs.ext4 -q /tmp/fp.img; mount -o loop /tmp/fp.img /mnt/fp
    python benchmarks/footprint.py --mount /mnt/fp [--checkout /path/to/clone ...]

Runs one CMA-ME run (15 emitters x 36 on the 100-d sphere, the overhead benchmark's
setting), sharded, with its ``results/`` folder on the filesystem mounted at
``--mount`` (a symbolic link from the campaign folder; Snakemake's ``.snakemake/``
stays on the local disk), and reads the sectors written to that filesystem's
block device (``/sys/block/<device>/stat``, field 7, 512-byte sectors) before and after
the run, after a ``sync`` each time. Every ``--checkout`` (default: this clone) is
measured with and without kept evaluations, one after the other; the node-local state
cache stays where it is (memory), as on a cluster.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path

from common import CMA_ME_BENCHMARK, REPO, machine, snakemake, table, write_config

SECTOR_BYTES = 512


def block_device(mount: Path) -> str:
    """The block device (``loop0``) of the filesystem mounted at ``mount``."""
    source = subprocess.run(
        ["findmnt", "--noheadings", "--output", "SOURCE", str(mount)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(source).name


def bytes_written(device: str) -> int:
    """Bytes written to ``device`` since boot (after flushing every dirty page)."""
    os.sync()
    fields = Path(f"/sys/block/{device}/stat").read_text().split()
    return int(fields[6]) * SECTOR_BYTES


def campaign(*, generations: int, shards: int, every: int, keep: bool) -> dict:
    """The measured campaign's configuration."""
    return {
        "campaign": "footprint",
        "master_seed": 1,
        "seeds": 1,
        "generations": generations,
        "shards": shards,
        "checkpoint_every": every,
        "keep_evaluations": keep,
        "algorithms": {"cma_me": dict(CMA_ME_BENCHMARK)},
        "domains": {"sphere": {"type": "sphere", "solution_dim": 100}},
    }


def measure(checkout: Path, *, mount: Path, device: str, config: dict) -> tuple[int, float]:
    """Bytes written to the device by one campaign of ``checkout``, and its wall time."""
    workdir, results = mount.parent / f".{mount.name}-campaign", mount / "results"
    for folder in (workdir, results):
        shutil.rmtree(folder, ignore_errors=True)
    write_config(workdir, config)
    results.mkdir()
    (workdir / "results").symlink_to(results)
    command = snakemake(workdir, "--quiet", snakefile=checkout / "Snakefile")
    environment = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    before = bytes_written(device)
    began = time.perf_counter()
    subprocess.run(command, check=True, env=environment, capture_output=True)
    seconds = time.perf_counter() - began
    written = bytes_written(device) - before
    evaluations = results / "footprint" / "cma_me" / "sphere" / "seed0"
    if config["keep_evaluations"] and not (evaluations / "evaluations.h5").exists():
        raise RuntimeError(f"{checkout}: no evaluations.h5 in {evaluations}")
    for folder in (workdir, results):
        shutil.rmtree(folder)
    return written, seconds


def revision(checkout: Path) -> str:
    """The short commit id of a clone."""
    return subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mount", type=Path, required=True, help="a dedicated filesystem")
    parser.add_argument("--checkout", type=Path, action="append", help="clone(s) to measure")
    parser.add_argument("--generations", type=int, default=30)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--keep-evaluations", choices=("both", "true", "false"), default="both")
    args = parser.parse_args()
    device = block_device(args.mount)
    keeps = {"both": (True, False), "true": (True,), "false": (False,)}[args.keep_evaluations]
    rows = []
    for checkout in [path.resolve() for path in args.checkout or [REPO]]:
        for keep in keeps:
            config = campaign(
                generations=args.generations,
                shards=args.shards,
                every=args.checkpoint_every,
                keep=keep,
            )
            written, seconds = measure(checkout, mount=args.mount, device=device, config=config)
            per_generation = written / args.generations / 1e6
            rows.append(
                [
                    revision(checkout),
                    keep,
                    f"{written / 1e6:.2f}",
                    f"{per_generation:.2f}",
                    f"{seconds:.0f}",
                ]
            )
            print(rows[-1], flush=True)
    print(machine())
    print(table(["version", "keep_evaluations", "MB written", "MB / generation", "wall s"], rows))


if __name__ == "__main__":
    main()
