"""Cost of a shard's journal (``evocamp.files.journal``): bytes and seconds per
journalled call.

    python benchmarks/journal_cost.py [--calls 300] [--folder DIR]

Appends ``--calls`` records to a journal in ``--folder`` (a temporary folder by
default: pass a folder on the shared filesystem the shards write to), each written
and flushed as the shard step does after every finished call, and fsynced as it does
after a call of ``SYNC_SECONDS`` or more; prints, for a few call shapes, the bytes per
record and the median and quartiles of the seconds per append, flushed only and
fsynced; then the seconds to open a journal of that many records (a rerun's read).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from evocamp.files.journal import SYNC_SECONDS, ShardJournal
from evocamp.loop.outcomes import Outcome  # what the shard step journals

KEY = {"run": "0" * 64, "generation": 12, "shard": 3, "shards": 8, "batch": "f" * 64}


def shapes(rng) -> dict:
    """Call shapes: name -> an outcome."""
    return {
        "1 solution, 2 measures": Outcome(
            {"objective": rng.normal(size=1), "measures": rng.normal(size=(1, 2))}, 0.5, 1
        ),
        "1 solution, 4 measures, 2 extra fields": Outcome(
            {
                "objective": rng.normal(size=1),
                "measures": rng.normal(size=(1, 4)),
                "a": rng.normal(size=1),
                "b": rng.normal(size=1),
            },
            0.5,
            1,
        ),
        "chunk of 8, 2 measures": Outcome(
            {"objective": rng.normal(size=8), "measures": rng.normal(size=(8, 2))}, 4.0, 8
        ),
        "1 solution, failed (timed out)": Outcome(
            None,
            0.0,
            1,
            3,
            "run me/d/seed0, generation 12, shard 3, solution 97: the evaluation ran past "
            "evaluation.timeout (60 s per solution) and was killed",
            2,
            120.0,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--folder", help="where to write the journal (default: a temporary one)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=arguments.folder) as folder:
        path = Path(folder) / "shard_3.h5.journal"
        for name, outcome in shapes(np.random.default_rng(0)).items():
            for took in (0.5, 2.0):  # flushed only; fsynced too (SYNC_SECONDS)
                outcome = replace(outcome, seconds=took)
                path.unlink(missing_ok=True)
                seconds = []
                with ShardJournal(path, key=KEY) as journal:
                    header = path.stat().st_size
                    for call in range(arguments.calls):
                        began = time.perf_counter()
                        journal.append(call, outcome)
                        seconds.append(time.perf_counter() - began)
                per_record = (path.stat().st_size - header) / arguments.calls
                began = time.perf_counter()
                assert len(ShardJournal(path, key=KEY).finished) == arguments.calls
                read = time.perf_counter() - began
                q1, median, q3 = statistics.quantiles(seconds, n=4)
                how = "fsynced" if took >= SYNC_SECONDS else "flushed"
                print(
                    f"{name:40s} {per_record:4.0f} B/record (key line {header} B); append "
                    f"{how} median {median * 1e3:.3f} ms (quartiles {q1 * 1e3:.3f}-"
                    f"{q3 * 1e3:.3f}); reading {arguments.calls} records {read * 1e3:.1f} ms"
                )


if __name__ == "__main__":
    main()
