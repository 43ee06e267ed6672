"""Tell throughput, the tell job's step time and the bytes a shard-mode generation
writes to the shared filesystem.

    python benchmarks/tell_throughput.py [--generations 30] [--keep-every 10] [--keep-evaluations]

CMA-ME on the 100-d sphere (100x100 grid), batches of 540 (15 emitters x 36) and 10,000
(20 x 500), one shard. "tell" is evocamp.loop.engine.tell (fold shards, update archive
and emitters, ask the next batch, derive seeds); "step" is what a shard-mode tell job
does besides starting: read the previous state, tell, write the next one
(evocamp.loop.state_cache: light between kept generations, the full state in the
node-local cache). "shared MB / gen" is what the run's folder receives per generation,
averaged over the run: the state written by the tell, the shard file, and kept
checkpoints (every --keep-every generations; hard links, so no bytes). "cache MB / gen"
goes to node-local memory instead. "rebuild" is reading the state at the end of a window
when the cache no longer holds it (telling the window again). Run it with
PYTHONPATH=<other clone>/src to measure another version of the layered package, and with
EVOCAMP_STATE_CACHE=0 to write every state whole (no cache); --keep-evaluations keeps
every evaluation (solutions of 100 parameters included: the rows go into each state
and, at kept generations, into the window's evaluations file; not counted: the final
index evaluations.h5, once per run); for a version from before
the layers (flat modules: evocamp.engine, evocamp.storage, ...), run that clone's own
copy of this script.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from common import machine, scratch_folder, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)


def folder_bytes(folder: Path) -> int:
    """Bytes of the distinct files below ``folder`` (hard links counted once)."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        info = path.stat()
        if path.is_file() and info.st_ino not in seen:
            seen.add(info.st_ino)
            total += info.st_size
    return total


def measure(
    emitters: int, batch_size: int, generations: int, keep_every: int, keep_evaluations: bool
) -> list:
    from evocamp.base.files import atomic_copy
    from evocamp.catalogue.factory import resolve_run
    from evocamp.config import run_spec, validate_config
    from evocamp.files.checkpoint import write_state
    from evocamp.files.evaluations import StorageSettings, gather_states, record_evaluations
    from evocamp.files.shard import read_shard, write_shard
    from evocamp.loop.engine import initialise, tell
    from evocamp.loop.evaluation import evaluate_shard
    from evocamp.loop.state_cache import read_full_state, run_cache, write_told_state
    from evocamp.model.layout import RunFolder, is_kept, window_start

    config = validate_config(
        {
            "algorithms": {
                "cmame": {
                    "type": "cma_me",
                    "emitters": emitters,
                    "batch_size": batch_size,
                    "archive": {"dims": [100, 100]},
                }
            },
            "domains": {"sphere": {"type": "sphere", "solution_dim": 100}},
            "shards": 1,
            "checkpoint_every": keep_every,
            "generations": generations,
        }
    )
    state = initialise(run_spec(config, algorithm="cmame", domain="sphere", seed=0))
    with scratch_folder("evocamp-tell-") as folder:
        run = RunFolder(folder / "run")
        cache = run_cache(run.work)  # None without a node-local cache
        previous = run.checkpoint(0)
        write_state(previous, state, run=resolve_run(state.spec))
        shared = folder_bytes(run.path)
        tells, steps, shared_bytes, cache_bytes, whole = [], [], [], [], 0
        for generation in range(1, generations + 1):
            shard_path = run.shard(generation, 0)
            write_shard(
                shard_path,
                evaluate_shard(
                    resolve_run(state.spec),
                    batch=state.next_batch,
                    seeds=state.next_seeds,
                    generation=generation,
                    shard=0,
                    shards=1,
                ),
            )
            began = time.perf_counter()
            state = read_full_state(previous)  # light: from the cache
            told = time.perf_counter()
            record = StorageSettings(keep=True) if keep_evaluations else None
            state = tell(state, [read_shard(shard_path)], storage=record)
            tells.append(time.perf_counter() - told)
            path = run.work_state(generation)
            write_told_state(
                path,
                state,
                run=resolve_run(state.spec),
                told_from=previous,
                shard_files=[shard_path],
                total=generations,
            )
            steps.append(time.perf_counter() - began)
            if is_kept(generation, every=keep_every):
                atomic_copy(path, run.checkpoint(generation))
                # What the keep step records: the rows of the window's states.
                window = range(window_start(generation, every=keep_every) + 1, generation + 1)
                rows = gather_states(
                    [run.work_state(g) for g in window], spec=state.spec, up_to=generation
                )
                record_evaluations(run.evaluation_window(generation), rows, spec=state.spec)
            now = folder_bytes(run.path)
            shared_bytes.append(now - shared)
            shared = now
            cache_bytes.append(folder_bytes(cache) if cache and cache.exists() else 0)
            previous = path
        whole = path.stat().st_size  # the last generation is written whole
        rebuild = "-"
        window = (generations - 1) % keep_every
        if cache is not None and window:
            # The last tell wrote a whole state and emptied the run's cache.
            began = time.perf_counter()
            read_full_state(run.work_state(generations - 1))
            rebuild = f"{(time.perf_counter() - began) * 1000:.0f} ({window})"
    batch = emitters * batch_size
    per_tell = statistics.median(tells[1:])
    return [
        batch,
        f"{per_tell * 1000:.1f}",
        f"{batch / per_tell:,.0f}",
        f"{statistics.median(steps[1:]) * 1000:.1f}",
        f"{statistics.mean(shared_bytes) / 1e6:.2f}",
        f"{max(shared_bytes) / 1e6:.2f}",
        f"{statistics.mean(cache_bytes) / 1e6:.2f}",
        f"{whole / 1e6:.2f}",
        rebuild,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=30)
    parser.add_argument("--keep-every", type=int, default=10)
    parser.add_argument("--keep-evaluations", action="store_true", help="keep every evaluation")
    parser.add_argument("--small-only", action="store_true", help="only the batch of 540")
    args = parser.parse_args()
    settings = [(15, 36)] + ([] if args.small_only else [(20, 500)])
    rows = [
        measure(emitters, size, args.generations, args.keep_every, args.keep_evaluations)
        for emitters, size in settings
    ]
    print(f"machine: {machine()}")
    print(f"{args.generations} generations, a kept checkpoint every {args.keep_every}")
    print(f"evaluations kept: {args.keep_evaluations}")
    header = ["batch", "tell ms (median)", "solutions/s", "step ms (median)"]
    header += ["shared MB / gen (mean)", "shared MB (max gen)", "cache MB"]
    header += ["whole state MB (last)", "rebuild ms (generations)"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
