"""Tell throughput (solutions folded per second) and checkpoint bytes per generation.

    python benchmarks/tell_throughput.py

CMA-ME on the 100-d sphere (100x100 grid), batches of 540 (15 emitters x 36) and
10,000 (20 x 500); times evocamp.engine.tell (fold shards, update archive and
emitters, ask the next batch, derive seeds) and the size of one checkpoint.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from common import machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)


def measure(emitters: int, batch_size: int, generations: int = 6) -> list:
    from evocamp.config import run_spec, validate_config
    from evocamp.engine import evaluate_slice, initialise, tell
    from evocamp.storage import write_state

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
    seconds, sizes = [], []
    folder = Path(tempfile.mkdtemp(prefix="evocamp-tell-"))
    for generation in range(1, generations + 1):
        shard = evaluate_slice(
            state.spec,
            generation=generation,
            shard=0,
            start=0,
            solutions=state.next_solutions,
            seeds=state.next_seeds,
        )
        began = time.perf_counter()
        state = tell(state, [shard])
        seconds.append(time.perf_counter() - began)
        path = folder / f"state_{generation}.h5"
        write_state(path, state)
        sizes.append(path.stat().st_size)
    batch = emitters * batch_size
    per_tell = statistics.median(seconds[1:])
    return [
        batch,
        f"{per_tell * 1000:.1f}",
        f"{batch / per_tell:,.0f}",
        f"{statistics.median(sizes) / 1e6:.2f}",
    ]


def main() -> None:
    rows = [measure(15, 36), measure(20, 500)]
    print(f"machine: {machine()}")
    print(table(["batch", "tell ms (median)", "solutions/s", "checkpoint MB"], rows))


if __name__ == "__main__":
    main()
