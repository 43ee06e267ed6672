"""Repeated evaluations of noisy domains (``evaluation.repeats``).

A solution is evaluated ``n`` times, repeat ``r`` with word ``r`` of
:func:`evocamp.base.seeding.repeat_seeds` of its evaluation seed; the optimizer, the
archive and the kept evaluations receive the means of the objective, the measures and
the extra fields, and the spread (:func:`evocamp.model.runspec.spread_fields`: the
standard deviation of the objective and of each measure) as extra fields. Every call
of the evaluation function is repeated so, its repeats averaged here
(:class:`evocamp.loop.outcomes.ChunkEvaluator`), so repeats are the same in every
mode, shard count and slot.
"""

from __future__ import annotations

import numpy as np

from evocamp.model.runspec import MEASURES_SPREAD, OBJECTIVE_SPREAD


def averaged(outputs: list[dict]) -> dict:
    """The mean of each output over repeats (in repeat order, so the same floats on any
    machine of the kernel family), and the standard deviations of the objective and of
    each measure (population, ``ddof=0``)."""
    stacked = {name: np.stack([output[name] for output in outputs]) for name in outputs[0]}
    means = {name: values.mean(axis=0) for name, values in stacked.items()}
    means[OBJECTIVE_SPREAD] = stacked["objective"].std(axis=0)
    spread = stacked["measures"].std(axis=0)
    for j in range(spread.shape[1]):
        means[f"{MEASURES_SPREAD}{j}"] = spread[:, j]
    return means
