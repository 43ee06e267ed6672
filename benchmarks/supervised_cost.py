"""Cost of one supervised call (``evocamp.base.supervised``): fork, results over the
pipe, the child's process group ended, in a process that has imported pyribs (as a
warm step process).

    PYTHONPATH=<checkout>/src python benchmarks/supervised_cost.py [--calls 200]

Prints the median and quartiles of the wall time of ``supervised(task, items)`` for a
task that does nothing (one item, and 68 items: a shard of ``chunk_size`` 1), calls
50 ms apart, so the figure is the supervision's own cost. Run it against two
checkouts to compare.
"""

from __future__ import annotations

import argparse
import statistics
import time

import ribs  # noqa: F401  (a process the size of a step's)

from evocamp.base.supervised import supervised


def timed(items: int, calls: int) -> list[float]:
    """Seconds of ``calls`` supervised calls of ``items`` items each."""
    seconds = []
    for _ in range(calls):
        began = time.perf_counter()
        for _ in supervised(lambda k: k, items):
            pass
        seconds.append(time.perf_counter() - began)
        time.sleep(0.05)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    timed(1, 5)  # the first call starts what a step starts once
    for items in (1, 68):
        q1, median, q3 = statistics.quantiles(timed(items, calls), n=4)
        print(
            f"{items:3d} item(s): median {median * 1e3:.2f} ms "
            f"(quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f} ms, {calls} calls)"
        )


if __name__ == "__main__":
    main()
