"""Built-in domains against their definitions (CMA-ME paper, pyribs tutorials)."""

from __future__ import annotations

import numpy as np
import pytest

from evocamp.domains import (
    PROJECTION_SHIFT,
    arm,
    default_measure_ranges,
    rastrigin,
    sphere,
)

SEEDS = np.zeros(3, dtype=np.uint64)


@pytest.mark.parametrize("function", [sphere, rastrigin])
def test_projection_objective_is_100_at_optimum_and_0_at_worst(function):
    dim = 10
    solutions = np.stack([np.full(dim, PROJECTION_SHIFT), np.full(dim, -5.12), np.zeros(dim)])
    result = function(solutions, SEEDS)
    np.testing.assert_allclose(result["objective"][:2], [100.0, 0.0], atol=1e-9)
    assert 0 < result["objective"][2] < 100


def test_projection_measures_clip_outside_coordinates():
    solutions = np.array([[1.0, 2.0, 10.24, -1.0]])
    measures = sphere(solutions, SEEDS[:1])["measures"]
    np.testing.assert_allclose(measures, [[3.0, 5.12 / 10.24 - 1.0]])


def test_sphere_value_matches_pyribs_example():
    rng = np.random.default_rng(0)
    solutions = rng.normal(size=(3, 20))
    worst = 20 * (-5.12 - 0.4 * 5.12) ** 2
    raw = np.sum((solutions - 0.4 * 5.12) ** 2, axis=1)
    np.testing.assert_allclose(
        sphere(solutions, SEEDS)["objective"], (raw - worst) / (0 - worst) * 100
    )


def test_arm_measures_are_end_effector_and_objective_minus_variance():
    solutions = np.array([[0.0, 0.0, 0.0], [np.pi / 2, 0.0, 0.0], [0.1, -0.2, 0.3]])
    result = arm(solutions, SEEDS)
    np.testing.assert_allclose(result["measures"][0], [3.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(result["measures"][1], [0.0, 3.0], atol=1e-12)
    np.testing.assert_allclose(result["objective"], -np.var(solutions, axis=1))


def test_default_ranges():
    assert default_measure_ranges({"type": "sphere", "solution_dim": 100}) == [
        [-256.0, 256.0],
        [-256.0, 256.0],
    ]
    assert default_measure_ranges({"type": "arm", "solution_dim": 4}) == [[-4.0, 4.0], [-4.0, 4.0]]
