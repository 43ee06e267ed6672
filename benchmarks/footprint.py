"""Bytes a shard-mode campaign writes per generation, measured at the block device.

    truncate -s 2G /tmp/fp.img; mkfs.ext4 -q /tmp/fp.img; mount -o loop /tmp/fp.img /mnt/fp
    python benchmarks/footprint.py --mount /mnt/fp [--checkout /path/to/clone ...]

Runs one CMA-ME run (15 emitters x 36 on the 100-d sphere, the overhead benchmark's
setting), or with ``--qd`` one CVT-MAP-Elites run (issue 33: ``--cells`` cells, one
Gaussian emitter of ``--batch`` solutions on the ``--solution-dim``-d sphere), sharded,
with its ``results/`` folder on the filesystem mounted at ``--mount`` (a symbolic link
from the campaign folder; Snakemake's ``.snakemake/`` stays on the local disk), and
reads the sectors written to that filesystem's block device
(``/sys/block/<device>/stat``, field 7, 512-byte sectors) before and after the run,
after a ``sync`` each time. Every ``--checkout`` (default: this clone) is measured with
and without kept evaluations, one after the other; the node-local state cache stays
where it is (memory), as on a cluster. The table gives the bytes written,
and the size of the run's largest kept checkpoint (``checkpoints/gen_<g>.h5``).
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


def campaign(
    *, generations: int, shards: int, every: int, keep: bool, qd: dict | None = None
) -> dict:
    """The measured campaign's configuration (``qd``: ``solution_dim``, ``batch`` and
    ``cells`` of a CVT-MAP-Elites run instead of CMA-ME)."""
    algorithm, dim = {"cma_me": dict(CMA_ME_BENCHMARK)}, 100
    if qd is not None:
        algorithm = {
            "cma_me": {
                "type": "cvt_map_elites",
                "emitters": 1,
                "emitter_batch_size": qd["batch"],
                "archive": {"cells": qd["cells"]},
            }
        }
        dim = qd["solution_dim"]
    return {
        "campaign": "footprint",
        "master_seed": 1,
        "seeds": 1,
        "generations": generations,
        "shards": shards,
        "checkpoint_every": every,
        # the old key (storage.keep_evaluations now): earlier checkouts read it too
        "keep_evaluations": keep,
        "algorithms": algorithm,
        "domains": {"sphere": {"type": "sphere", "solution_dim": dim}},
    }


def measure(checkout: Path, *, mount: Path, device: str, config: dict) -> tuple[int, float, int]:
    """Bytes written to the device by one campaign of ``checkout``, its wall time, and
    the bytes of its largest kept checkpoint."""
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
    checkpoint = max(path.stat().st_size for path in (evaluations / "checkpoints").glob("*.h5"))
    for folder in (workdir, results):
        shutil.rmtree(folder)
    return written, seconds, checkpoint


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
    parser.add_argument("--qd", action="store_true", help="CVT-MAP-Elites instead of CMA-ME")
    parser.add_argument("--solution-dim", type=int, default=5700)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--cells", type=int, default=1024)
    args = parser.parse_args()
    qd = None
    if args.qd:
        qd = {"solution_dim": args.solution_dim, "batch": args.batch, "cells": args.cells}
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
                qd=qd,
            )
            written, seconds, checkpoint = measure(
                checkout, mount=args.mount, device=device, config=config
            )
            per_generation = written / args.generations / 1e6
            rows.append(
                [
                    revision(checkout),
                    keep,
                    f"{written / 1e6:.2f}",
                    f"{per_generation:.2f}",
                    f"{checkpoint / 1e6:.2f}",
                    f"{seconds:.0f}",
                ]
            )
            print(rows[-1], flush=True)
    print(machine())
    header = ["version", "keep_evaluations", "MB written", "MB / generation", "checkpoint MB"]
    print(table([*header, "wall s"], rows))


if __name__ == "__main__":
    main()
