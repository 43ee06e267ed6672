"""Tell throughput (solutions folded per second) and checkpoint bytes per generation.

    python benchmarks/tell_throughput.py [--generations 30]

CMA-ME on the 100-d sphere (100x100 grid), batches of 540 (15 emitters x 36) and
10,000 (20 x 500); times evocamp.engine.tell (fold shards, update archive and
emitters, ask the next batch, derive seeds), the whole step of a shard-mode tell job
(read the previous checkpoint, tell, write the next one) and the checkpoint's size
(shard mode writes one per generation). Run it with PYTHONPATH=<other clone>/src to
measure another version.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import machine, scratch_folder, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)


def measure(emitters: int, batch_size: int, generations: int) -> list:
    from evocamp.config import run_spec, validate_config
    from evocamp.engine import evaluate_slice, initialise, tell
    from evocamp.storage import read_state, write_state

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
        }
    )
    state = initialise(run_spec(config, algorithm="cmame", domain="sphere", seed=0))
    with scratch_folder("evocamp-tell-") as folder:
        previous = folder / "state_0.h5"
        write_state(previous, state)
        tells, steps, sizes = [], [], []
        for generation in range(1, generations + 1):
            shard = evaluate_slice(
                state.spec,
                generation=generation,
                shard=0,
                start=0,
                solutions=state.next_batch["solutions"],
                seeds=state.next_seeds,
            )
            began = time.perf_counter()
            state = read_state(previous)
            told = time.perf_counter()
            state = tell(state, [shard])
            tells.append(time.perf_counter() - told)
            path = folder / f"state_{generation}.h5"
            write_state(path, state)
            steps.append(time.perf_counter() - began)
            sizes.append(path.stat().st_size)
            previous.unlink()
            previous = path
    batch = emitters * batch_size
    per_tell = statistics.median(tells[1:])
    return [
        batch,
        generations,
        f"{per_tell * 1000:.1f}",
        f"{batch / per_tell:,.0f}",
        f"{statistics.median(steps[1:]) * 1000:.1f}",
        f"{sizes[0] / 1e6:.2f}",
        f"{sizes[-1] / 1e6:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=30)
    args = parser.parse_args()
    rows = [measure(15, 36, args.generations), measure(20, 500, args.generations)]
    print(f"machine: {machine()}")
    header = ["batch", "generations", "tell ms (median)", "solutions/s"]
    header += ["read + tell + write ms (median)", "checkpoint MB (gen 1)", "checkpoint MB (last)"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
