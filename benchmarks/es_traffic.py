"""What an ES generation moves: bytes written and seconds, seed-regenerated noise
against the naive design that ships every offspring.

    python benchmarks/es_traffic.py [--dims 10000 100000 1000000] [--popsizes 100 1000]

OpenAI-ES (antithetic, P offspring from P/2 noise vectors) on the sphere with M
parameters, shard mode with 4 shards, run in one process step by step as the jobs
would: write the state (the batch is inside it), each shard reads its slice and
materialises its offspring from the centre and noise seeds, evaluates and writes its
shard file, then tell reads the state, regenerates the noise for the update and
writes the next state. Bytes: the batch (datasets under /next_batch, /next_seeds)
and the shard files, against the target 16 (M + P) + 64 KiB and the naive design
(the batch as P x M float64 offspring, as QD batches are stored; its write and read
timed up to P x M = 10^8); the state file
(optimizer state: centre and Adam moments). Seconds: the generation (all steps in
sequence), tell, and one noise-regeneration pass (P/2 vectors of M normals).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import machine, scratch_folder, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)

SHARDS = 4
KIB = 1024
#: Largest P x M for which the naive design's I/O is measured (8e8 bytes).
NAIVE_MAX = 10**8


def stored_bytes(path: Path, names: list[str]) -> int:
    """Storage bytes of the datasets ``names`` (and every dataset in a group named)."""
    import h5py

    total = 0
    with h5py.File(path, "r") as handle:
        for name in names:
            item = handle[name]
            datasets = item.values() if isinstance(item, h5py.Group) else [item]
            total += sum(dataset.id.get_storage_size() for dataset in datasets)
    return total


def naive_io_seconds(state, folder: Path) -> float:
    """Seconds to write a batch as P x M offspring and read it back shard by shard (the
    naive design's extra I/O; its offspring are drawn here once, not timed)."""
    from evocamp.catalogue.factory import resolve_run
    from evocamp.files.hdf5 import atomic_h5, write_dataset
    from evocamp.model.protocol import shard_bounds

    size = len(state.next_seeds)
    offspring, _ = resolve_run(state.spec).batch_format.materialise(state.next_batch, 0, size)
    path = folder / "naive.h5"
    began = time.perf_counter()
    with atomic_h5(path) as handle:
        write_dataset(handle, "solutions", offspring)
    import h5py

    with h5py.File(path, "r") as handle:
        for shard in range(SHARDS):
            start, stop = shard_bounds(size, SHARDS, shard)
            handle["solutions"][start:stop]
    return time.perf_counter() - began


def measure(dim: int, popsize: int, folder: Path) -> list:
    import numpy as np

    from evocamp.catalogue.factory import resolve_run
    from evocamp.config import run_spec, validate_config
    from evocamp.families import es
    from evocamp.files.checkpoint import open_batch, read_state, write_state
    from evocamp.files.shard import read_shard, write_shard
    from evocamp.loop.engine import initialise, tell
    from evocamp.loop.evaluation import evaluate_shard

    config = validate_config(
        {
            "algorithms": {
                "oes": {"type": "openai_es", "popsize": popsize, "archive": {"passive": False}}
            },
            "domains": {"sphere": {"type": "sphere", "solution_dim": dim}},
            "shards": SHARDS,
        }
    )
    state = initialise(run_spec(config, algorithm="oes", domain="sphere", seed=0))
    # One warm-up generation (Adam's moments become non-zero), then the measured one.
    for generation in (1, 2):
        began = time.perf_counter()
        state_path = folder / f"state_{generation - 1}.h5"
        write_state(state_path, state, run=resolve_run(state.spec))
        shard_paths = []
        for shard in range(SHARDS):
            with open_batch(state_path, resolve=resolve_run) as (
                run,
                batch_generation,
                batch,
                seeds,
                _,
            ):
                result = evaluate_shard(
                    run,
                    batch=batch,
                    seeds=seeds,
                    generation=batch_generation,
                    shard=shard,
                    shards=SHARDS,
                )
            shard_paths.append(folder / f"shard_{generation}_{shard}.h5")
            write_shard(shard_paths[-1], result)
        told = time.perf_counter()
        state = tell(read_state(state_path), [read_shard(path) for path in shard_paths])
        tell_seconds = time.perf_counter() - told
        write_state(folder / "next.h5", state, run=resolve_run(state.spec))
        generation_seconds = time.perf_counter() - began
    batch_bytes = stored_bytes(state_path, ["next_batch", "next_seeds"])
    shard_bytes = sum(path.stat().st_size for path in shard_paths)
    state_bytes = state_path.stat().st_size
    began = time.perf_counter()
    for seed in state.next_batch["noise"]:
        es.noise(seed, dim)
    noise_pass = time.perf_counter() - began
    naive_seconds = naive_io_seconds(state, folder) if dim * popsize <= NAIVE_MAX else None
    target = 16 * (dim + popsize) + 64 * KIB
    naive = popsize * dim * 8
    for path in folder.iterdir():
        path.unlink()
    del np
    return [
        f"{dim:,}",
        f"{popsize:,}",
        f"{(batch_bytes + shard_bytes) / 1e6:.3f}",
        f"{target / 1e6:.3f}",
        "yes" if batch_bytes + shard_bytes <= target else "NO",
        f"{naive / 1e6:,.1f}",
        "-" if naive_seconds is None else f"{naive_seconds:.2f}",
        f"{state_bytes / 1e6:.2f}",
        f"{generation_seconds:.2f}",
        f"{tell_seconds:.2f}",
        f"{noise_pass:.2f}",
        f"{tell_seconds / noise_pass:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--popsizes", type=int, nargs="+", default=[100, 1000])
    args = parser.parse_args()
    with scratch_folder("evocamp-es-") as folder:
        rows = [measure(dim, popsize, folder) for dim in args.dims for popsize in args.popsizes]
    print(f"machine: {machine()}")
    header = ["M", "P", "batch + shards MB", "target MB", "within", "naive batch MB"]
    header += ["naive batch write + read s"]
    header += ["state MB", "s / generation", "tell s", "noise pass s", "tell / noise pass"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
