"""Cost of one supervised call (``evocamp.base.supervised``): fork, results over the
pipe, the child's process group ended, in a process that has imported pyribs (as a
warm step process).

    python benchmarks/supervised_cost.py [--calls 200] [--against OTHER/supervised.py]

Prints the median and quartiles of the wall time of ``supervised(task, items)`` for a
task that does nothing (one item, and 68 items: a shard of ``chunk_size`` 1), calls
20 ms apart, so the figure is the supervision's own cost. ``--against`` loads another
version of the module (e.g. ``/work/main/src/evocamp/base/supervised.py``) and
alternates its calls with this one's in the same process (each first every other
time), so that both see the same load.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

import ribs  # noqa: F401  (a process the size of a step's)

from evocamp.base import supervised as this


def timed(module, items: int) -> float:
    """Seconds of one supervised call of ``items`` items."""
    began = time.perf_counter()
    for _ in module.supervised(lambda k: k, items):
        pass
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--against", help="another version of evocamp/base/supervised.py")
    arguments = parser.parse_args()
    versions = {"this": this}
    if arguments.against:
        spec = importlib.util.spec_from_file_location("other_supervised", arguments.against)
        versions["against"] = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(versions["against"])
    for items in (1, 68):
        seconds = {name: [] for name in versions}
        for call in range(arguments.calls + 5):
            order = list(versions.items())
            for name, module in order if call % 2 else order[::-1]:  # neither goes first
                spent = timed(module, items)
                if call >= 5:  # the first calls start what a process starts once
                    seconds[name].append(spent)
                time.sleep(0.02)
        for name, values in seconds.items():
            q1, median, q3 = statistics.quantiles(values, n=4)
            print(
                f"{name:8s} {items:3d} item(s): median {median * 1e3:.2f} ms "
                f"(quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f} ms, {arguments.calls} calls)"
            )


if __name__ == "__main__":
    main()
