"""Bytes of kept checkpoints, full against deltas, and the time to resume from the end
of a delta chain (issue 33, point 2).

    python benchmarks/kept_checkpoints.py --folder /tmp/kept [--generations 100]

One CVT-MAP-Elites run (``--cells`` cells, one Gaussian emitter of ``--batch``,
``--sigma``), or with ``--cma-mae`` a CVT-CMA-MAE run (separable CMA-ES, 5 emitters
of ``--batch`` / 5; its learning archive is kept as a delta too), on a
``--solution-dim``-d domain whose measures are its first two
parameters (so the archive fills, unlike the sphere's), told in this process (the
shard step and the tell, no Snakemake). Every ``--checkpoint-every``-th state is kept
twice, as the keep step writes it: with ``checkpoint_full_every`` 1 (every archive in
full) and with ``--full-every``. Prints one JSON line per kept generation (elites,
bytes of both files, the delta's chain length, seconds to write each) and then the
seconds to read the newest checkpoint of each kind whole (``read_state``, the
optimizer unpickled and, for the delta, its chain applied and checked), with the page
cache of the files dropped first (``posix_fadvise``) and warm, medians of
``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

import evocamp  # noqa: F401 (BLAS and numba settings first)
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.checkpoint import read_state, write_state
from evocamp.loop.engine import held_batch, initialise, tell
from evocamp.loop.evaluation import evaluate_shard
from evocamp.model.layout import RunFolder

HERE = Path(__file__).resolve().parent


def evaluate(solutions, seeds, **params):
    """The negated sphere; the measures are the first two parameters."""
    return {"objective": -np.sum(solutions**2, axis=1), "measures": solutions[:, :2]}


def uncached(paths) -> None:
    """Drop the page cache of ``paths`` (each file's pages, written back first)."""
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def timed_read(path: Path, chain: list[Path], *, cold: bool) -> float:
    if cold:
        uncached(chain)
    began = time.perf_counter()
    read_state(path)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--solution-dim", type=int, default=5700)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--cells", type=int, default=1024)
    parser.add_argument("--sigma", type=float, default=0.3)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--full-every", type=int, default=10)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cma-mae", action="store_true", help="CVT-CMA-MAE instead")
    args = parser.parse_args()
    archive = {"cells": args.cells, "qd_score_offset": -1e6}
    algorithm = {
        "type": "cvt_map_elites",
        "emitter_batch_size": args.batch,
        "sigma": args.sigma,
        "archive": archive,
    }
    if args.cma_mae:
        algorithm = {
            "type": "cvt_cma_mae",
            "es": "sep_cma_es",
            "emitters": 5,
            "emitter_batch_size": args.batch // 5,
            "sigma": args.sigma,
            "archive": {**archive, "threshold_min": -1e6},
        }
    config = validate_config(
        {
            "algorithms": {"cvt": algorithm},
            "domains": {
                "d": {
                    "type": "plugin",
                    "function": "kept_checkpoints:evaluate",
                    "python_path": str(HERE),
                    "solution_dim": args.solution_dim,
                    "measure_ranges": [[-3, 3], [-3, 3]],
                    "chunk_size": args.batch,
                }
            },
            "shards": args.shards,
            "checkpoint_every": args.checkpoint_every,
            "generations": args.generations,
        }
    )
    spec = run_spec(config, algorithm="cvt", domain="d", seed=0)
    shutil.rmtree(args.folder, ignore_errors=True)
    runs = {
        every: RunFolder(args.folder / f"full_every_{every}" / "d" / "seed0")
        for every in (1, args.full_every)
    }
    state = initialise(spec)
    for run in runs.values():
        run.checkpoints.mkdir(parents=True)
        write_state(run.checkpoint(0), state, run=resolve_run(state.spec))
    for generation in range(1, args.generations + 1):
        batch = held_batch(state)
        shards = [
            evaluate_shard(
                resolve_run(spec),
                batch=batch,
                seeds=state.next_seeds,
                generation=generation,
                shard=shard,
                shards=args.shards,
            )
            for shard in range(args.shards)
        ]
        state = tell(state, shards)
        if generation % args.checkpoint_every:
            continue
        line = {"generation": generation, "elites": len(state.archive)}
        for every, run in runs.items():
            path = run.checkpoint(generation)
            began = time.perf_counter()
            write_state(path, state, run=resolve_run(state.spec), full_every=every)
            line[f"write_s_{every}"] = round(time.perf_counter() - began, 3)
            line[f"MB_{every}"] = round(path.stat().st_size / 1e6, 3)
        import h5py

        with h5py.File(runs[args.full_every].checkpoint(generation), "r") as handle:
            line["chain"] = int(handle.attrs["delta_chain"])
        print(json.dumps(line), flush=True)
    newest = args.generations // args.checkpoint_every * args.checkpoint_every
    for every, run in runs.items():
        chain = [run.checkpoint(g) for g in range(0, newest + 1, args.checkpoint_every)]
        path = run.checkpoint(newest)
        for cold in (True, False):
            seconds = [timed_read(path, chain, cold=cold) for _ in range(args.repeats)]
            print(
                json.dumps(
                    {
                        "full_every": every,
                        "read": path.name,
                        "cache": "dropped" if cold else "warm",
                        "read_state_s": round(statistics.median(seconds), 3),
                        "kept_MB_total": round(sum(p.stat().st_size for p in chain) / 1e6, 2),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
