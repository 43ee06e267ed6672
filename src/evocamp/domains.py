"""Evaluation domains: built-in benchmarks and users' own evaluation functions.

Every domain is a function with the signature of a user plugin::

    def evaluate(solutions, seeds, **params):
        # solutions: float64 array (n, solution_dim); seeds: uint64 array (n,)
        return {"objective": (n,), "measures": (n, measure_dim), "extra": (n,), ...}

A tuple ``(objective, measures)`` is accepted as the return value too. Higher
objective is better. ``seeds[i]`` is the evaluation seed of ``solutions[i]``
(derived from the master seed, run, generation and solution index), for domains
with noise or randomised simulations.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: Bound of the search space in the CMA-ME paper's linear-projection domains.
PROJECTION_BOUND = 5.12
#: Optimum shift of the sphere and Rastrigin functions (``0.4 * 5.12``).
PROJECTION_SHIFT = 0.4 * PROJECTION_BOUND

Evaluator = Callable[..., object]


def _projection_measures(solutions: np.ndarray) -> np.ndarray:
    """Sums over the two halves of the clipped coordinates (CMA-ME paper)."""
    clipped = solutions.copy()
    outside = np.abs(clipped) > PROJECTION_BOUND
    clipped[outside] = PROJECTION_BOUND / clipped[outside]
    half = solutions.shape[1] // 2
    return np.stack((clipped[:, :half].sum(axis=1), clipped[:, half:].sum(axis=1)), axis=1)


def _normalise(raw: np.ndarray, worst: float) -> np.ndarray:
    """Map a raw minimisation value onto [0, 100], 100 being the optimum (0)."""
    return (raw - worst) / (0.0 - worst) * 100.0


def sphere(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """Shifted sphere with linear-projection measures, normalised to [0, 100]."""
    dim = solutions.shape[1]
    worst = dim * (-PROJECTION_BOUND - PROJECTION_SHIFT) ** 2
    raw = np.sum(np.square(solutions - PROJECTION_SHIFT), axis=1)
    return {
        "objective": _normalise(raw, worst),
        "measures": _projection_measures(solutions),
    }


def _rastrigin_raw(shifted: np.ndarray) -> np.ndarray:
    return np.sum(shifted**2 - 10.0 * np.cos(2.0 * np.pi * shifted) + 10.0, axis=-1)


def rastrigin(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """Shifted Rastrigin with linear-projection measures, normalised to [0, 100]."""
    dim = solutions.shape[1]
    worst = float(_rastrigin_raw(np.full(dim, -PROJECTION_BOUND - PROJECTION_SHIFT)))
    raw = _rastrigin_raw(solutions - PROJECTION_SHIFT)
    return {
        "objective": _normalise(raw, worst),
        "measures": _projection_measures(solutions),
    }


def arm(
    solutions: np.ndarray, seeds: np.ndarray, *, link_lengths: list[float] | None = None
) -> dict[str, np.ndarray]:
    """Planar robotic arm: objective -Var(theta), measures = end-effector (x, y)."""
    lengths = _link_lengths(solutions.shape[1], link_lengths)
    cumulative = np.cumsum(solutions, axis=1)
    return {
        "objective": -np.var(solutions, axis=1),
        "measures": np.stack(
            (
                np.sum(lengths * np.cos(cumulative), axis=1),
                np.sum(lengths * np.sin(cumulative), axis=1),
            ),
            axis=1,
        ),
    }


def _link_lengths(joints: int, link_lengths: list[float] | None) -> np.ndarray:
    if link_lengths is None:
        return np.ones(joints)
    return np.asarray(link_lengths, dtype=np.float64)


BUILTIN_DOMAINS: dict[str, Evaluator] = {
    "sphere": sphere,
    "rastrigin": rastrigin,
    "arm": arm,
}


def default_measure_ranges(spec: dict) -> list[list[float]]:
    """Measure ranges of a built-in domain: the reachable measure space."""
    kind = spec["type"]
    dim = spec["solution_dim"]
    if kind in ("sphere", "rastrigin"):
        half_span = dim / 2 * PROJECTION_BOUND
        return [[-half_span, half_span], [-half_span, half_span]]
    if kind == "arm":
        reach = float(_link_lengths(dim, spec.get("params", {}).get("link_lengths")).sum())
        return [[-reach, reach], [-reach, reach]]
    raise KeyError(kind)


def default_bounds(spec: dict) -> list[float] | None:
    """Solution bounds of a built-in domain (``None``: unbounded)."""
    if spec["type"] == "arm":
        return [-float(np.pi), float(np.pi)]
    return None


def load_evaluator(spec: dict) -> Evaluator:
    """Return the evaluation function of a resolved domain spec.

    Parameters
    ----------
    spec : dict
        A domain entry of the resolved run spec: ``type`` is a built-in name or
        ``plugin``; plugins give ``function`` as ``"module:function"`` and may
        give ``python_path``, a folder put in front of ``sys.path``.
    """
    if spec["type"] != "plugin":
        return BUILTIN_DOMAINS[spec["type"]]
    return _plugin_function(spec["function"], spec.get("python_path"))


@functools.cache
def _plugin_function(function: str, python_path: str | None) -> Evaluator:
    """Import ``module:function`` once per process (Dask workers evaluate many slices)."""
    module_name, _, function_name = function.partition(":")
    if python_path:
        folder = str(Path(python_path).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module = importlib.import_module(module_name)
    return getattr(module, function_name)
