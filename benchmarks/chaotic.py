"""Benchmark domain: the sphere, taking ``seconds`` per solution, failing for a few.

Whether a solution fails is a function of its evaluation seed alone (the seeds are
uniform 64-bit words drawn from the master seed), so a campaign fails the same
solutions whatever the mode, shard count or number of kills and reruns.
"""

import ctypes
import time

import numpy as np

from evocamp.tasks.functions import sphere

#: Hang this long: far past any ``evaluation.timeout`` of the chaos benchmark.
HANG_SECONDS = 3600.0


def fault_of(seed: int, *, raises: float, hangs: float, segfaults: float) -> str | None:
    """``"raise"``, ``"hang"``, ``"segfault"`` or ``None`` for the evaluation seed ``seed``:
    the seed's position in [0, 1) falls in the first ``raises``, the next ``hangs`` or
    the next ``segfaults`` of the interval, or after them."""
    position = int(seed) / 2.0**64
    for fault, share in (("raise", raises), ("hang", hangs), ("segfault", segfaults)):
        if position < share:
            return fault
        position -= share
    return None


def chaotic_sphere(solutions, seeds, *, seconds=0.0, raises=0.0, hangs=0.0, segfaults=0.0):
    """Sleep ``seconds`` per solution, then evaluate the sphere; a solution whose seed
    :func:`fault_of` picks raises ``RuntimeError``, sleeps :data:`HANG_SECONDS` or
    reads address 0 (a real ``SIGSEGV``) instead."""
    for seed in seeds:
        fault = fault_of(seed, raises=raises, hangs=hangs, segfaults=segfaults)
        if fault == "raise":
            raise RuntimeError(f"chaotic_sphere: a simulated bug for seed {int(seed)}")
        if fault == "hang":
            time.sleep(HANG_SECONDS)
        if fault == "segfault":
            ctypes.string_at(0)
        time.sleep(seconds)
    return sphere(np.asarray(solutions), seeds)
