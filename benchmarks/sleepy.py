"""Benchmark domain: the sphere, made expensive by sleeping ``seconds`` per call."""

import time

from evocamp.tasks.functions import sphere


def sleepy_sphere(solutions, seeds, *, seconds=0.0):
    """Sleep ``seconds`` (one call per shard-sized chunk), then evaluate the sphere."""
    time.sleep(seconds)
    return sphere(solutions, seeds)
