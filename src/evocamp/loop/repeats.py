"""Repeated evaluations of noisy domains (``evaluation.repeats``).

A solution is evaluated ``n`` times, repeat ``r`` with word ``r`` of
:func:`evocamp.base.seeding.repeat_seeds` of its evaluation seed; the optimizer, the
archive and the kept evaluations receive the means of the objective, the measures and
the extra fields, and the spread (:func:`evocamp.model.runspec.spread_fields`: the
standard deviation of the objective and of each measure) as extra fields. The shard
step calls :func:`repeated` around each call of the evaluation function, so repeats
are the same in every mode, shard count and slot.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from evocamp.base.seeding import repeat_seeds
from evocamp.model.runspec import MEASURES_SPREAD, OBJECTIVE_SPREAD


def repeated(evaluate_once: Callable[[np.ndarray], dict], seeds: np.ndarray, *, repeats: int):
    """Evaluate solutions ``repeats`` times and average.

    Parameters
    ----------
    evaluate_once : callable
        ``evaluate_once(seeds) -> dict`` of checked float64 outputs (``objective``
        ``(n,)``, ``measures`` ``(n, measure_dim)``, extra fields ``(n,)``) of the
        solutions evaluated with these seeds (one per solution).
    seeds : numpy.ndarray
        The solutions' evaluation seeds.
    repeats : int
        Evaluations per solution; 1 calls ``evaluate_once(seeds)`` once, as is.

    Returns
    -------
    dict
        The outputs' means over the repeats, with the spread fields when
        ``repeats`` > 1.
    """
    if repeats == 1:
        return evaluate_once(seeds)
    words = repeat_seeds(seeds, repeats)
    outputs = [evaluate_once(words[:, r]) for r in range(repeats)]
    return averaged(outputs)


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
