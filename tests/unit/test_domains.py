"""Built-in domains against their definitions (CMA-ME paper, pyribs tutorials)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shard_results

from evocamp.config import resolved_domain, run_spec, validate_config
from evocamp.loop.engine import initialise
from evocamp.loop.outcomes import simulated_seconds
from evocamp.model.runspec import measure_dim
from evocamp.tasks.functions import (
    PROJECTION_SHIFT,
    ackley,
    arm,
    digits,
    digits_solution_dim,
    lunar_lander,
    plain_rastrigin,
    plain_sphere,
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
    def ranges(domain: dict) -> list:
        return resolved_domain(domain)["measure_ranges"]

    assert ranges({"type": "sphere", "solution_dim": 100}) == [[-256.0, 256.0], [-256.0, 256.0]]
    assert ranges({"type": "arm", "solution_dim": 4}) == [[-4.0, 4.0], [-4.0, 4.0]]
    assert ranges({"type": "arm", "solution_dim": 2, "params": {"link_lengths": [1, 2]}}) == [
        [-3.0, 3.0],
        [-3.0, 3.0],
    ]


def test_lunar_lander_rollouts_are_deterministic_and_measured_at_touchdown():
    """The same policy gives the same return and measures (env_seed fixes terrain and
    start); the measures are x and y velocity at the first leg contact, checked against
    a rollout written out here."""
    import gymnasium

    policies = np.random.default_rng(1).normal(size=(4, 32))
    seeds = np.arange(4, dtype=np.uint64)
    first = lunar_lander(policies, seeds, env_seed=52)
    second = lunar_lander(policies, seeds[::-1].copy(), env_seed=52)
    assert first["objective"].tobytes() == second["objective"].tobytes()
    assert first["measures"].tobytes() == second["measures"].tobytes()
    env = gymnasium.make("LunarLander-v3")
    observation, _ = env.reset(seed=52)
    total, touchdown, done = 0.0, None, False
    while not done:
        observation, reward, terminated, truncated, _ = env.step(
            int(np.argmax(policies[0].reshape(4, 8) @ observation))
        )
        total += reward
        if touchdown is None and (observation[6] or observation[7]):
            touchdown = (observation[0], observation[3])
        done = terminated or truncated
    assert first["objective"][0] == total
    assert touchdown is not None, "this policy touches down"
    assert tuple(first["measures"][0]) == touchdown


def test_digits_fitness_is_minus_minibatch_cross_entropy():
    from sklearn.datasets import load_digits

    hidden = 4
    weights = np.random.default_rng(2).normal(scale=0.3, size=(1, digits_solution_dim(hidden)))
    out = digits(weights, np.array([99], dtype=np.uint64), hidden=hidden, minibatch=16)
    data = load_digits()
    x, y = data.data / 16.0, data.target
    chosen = np.random.default_rng(99).choice(len(x) - 360, 16, replace=False)
    w = weights[0]
    w1, b1 = w[: 64 * hidden].reshape(64, hidden), w[64 * hidden : 65 * hidden]
    w2 = w[65 * hidden : 75 * hidden].reshape(hidden, 10)
    b2 = w[75 * hidden :]

    def logits(images):
        return np.tanh(images @ w1 + b1) @ w2 + b2

    z = logits(x[chosen])
    cross_entropy = np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(16), y[chosen]])
    assert out["objective"][0] == pytest.approx(-cross_entropy, rel=1e-12)
    accuracy = np.mean(logits(x[-360:]).argmax(axis=1) == y[-360:])
    assert out["test_accuracy"][0] == accuracy
    assert out["measures"].shape == (1, 0)


def test_ackley_is_maximised_as_its_negative():

    points = np.array([[0.0] * 5, [1.0, -2.0, 0.5, 3.0, -32.768]])
    out = ackley(points, np.zeros(2, dtype=np.uint64))
    d = 5
    expected = [
        -20 * np.exp(-0.2 * np.sqrt(np.sum(x**2) / d))
        - np.exp(np.sum(np.cos(2 * np.pi * x)) / d)
        + 20
        + np.e
        for x in points
    ]
    np.testing.assert_allclose(out["ackley"], expected, rtol=1e-12, atol=1e-12)
    assert abs(out["ackley"][0]) < 1e-12
    np.testing.assert_array_equal(out["objective"], -out["ackley"])
    assert out["measures"].shape == (2, 0)


def test_plain_sphere_and_rastrigin_are_unshifted_minimisation_benchmarks():

    points = np.array([[0.0, 0.0, 0.0], [1.0, -0.5, 2.0]])
    seeds = np.zeros(2, dtype=np.uint64)
    sphere = plain_sphere(points, seeds)
    np.testing.assert_array_equal(sphere["sphere"], [0.0, 5.25])
    np.testing.assert_array_equal(sphere["objective"], -sphere["sphere"])
    rastrigin = plain_rastrigin(points, seeds)
    # 10 d + sum(x^2 - 10 cos(2 pi x)): cos(2 pi) = 1, cos(-pi) = -1, cos(4 pi) = 1.
    np.testing.assert_allclose(rastrigin["rastrigin"], [0.0, 30 + 5.25 - 10 + 10 - 10], atol=1e-12)
    np.testing.assert_array_equal(rastrigin["objective"], -rastrigin["rastrigin"])
    for kind, field in (("plain_sphere", "sphere"), ("plain_rastrigin", "rastrigin")):
        spec = resolved_domain({"type": kind, "solution_dim": 3, "params": {}})
        assert spec["bounds"] == [-5.12, 5.12] and spec["extra_fields"] == [field]
        assert measure_dim(spec) == 0 and spec["measure_ranges"] == []
    config = validate_config(
        {
            "shards": 2,
            "algorithms": {"bo": {"type": "qucb_centralised"}},
            "domains": {"r": {"type": "plain_rastrigin", "solution_dim": 3}},
        }
    )
    assert config["domains"]["r"]["type"] == "plain_rastrigin"


def test_random_search_samples_within_bounds_and_simulated_time_follows_the_seeds():

    config = validate_config(
        {
            "algorithms": {"rs": {"type": "random_search", "batch_size": 6}},
            "domains": {
                "a": {
                    "type": "ackley",
                    "solution_dim": 5,
                    "simulated_seconds": {"distribution": "exponential", "mean": 0.01},
                }
            },
            "shards": 2,
        }
    )
    state = initialise(run_spec(config, algorithm="rs", domain="a", seed=0))
    solutions = state.next_batch["solutions"]
    assert solutions.shape == (6, 5) and np.abs(solutions).max() <= 32.768
    waits = simulated_seconds({"distribution": "exponential", "mean": 0.01}, state.next_seeds)
    assert (
        waits[2:4].tobytes()
        == simulated_seconds(
            {"distribution": "exponential", "mean": 0.01}, state.next_seeds[2:4]
        ).tobytes()
    )
    (result,) = shard_results(state, 1)
    assert result.eval_seconds.sum() >= waits.sum()
    np.testing.assert_array_equal(result.extra["ackley"], -result.objective)
