"""``initial_population: random``: QD emitters start from the locomotion policies' own
initialisation (QDax's LeCun-uniform weights, biases 0), fixed by the master seed; the
initial solutions leave the optimizer once the archive holds elites, so the batches are
compact again from the next generation on."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from conftest import error_of

import evocamp  # noqa: F401 (numba's JIT off before pyribs loads)
from evocamp.catalogue.factory import build_optimizer
from evocamp.config import run_spec, validate_config
from evocamp.families.qd import compact_emitters
from evocamp.tasks.policies import mlp_layers

HIDDEN = [4]
SIZES = [27, 4, 8]  # ant_omni: 27 observations, 8 actions


def spec_of(kind: str, *, seed: int = 0, start: str | None = "random") -> dict:
    algorithm = {
        "type": kind,
        "emitters": 2,
        "emitter_batch_size": 5,
        "archive": {"cells": 16, "cvt_samples": 1000},
    }
    if start is not None:
        algorithm["initial_population"] = start
    config = validate_config(
        {
            "shards": 1,
            "algorithms": {"a": algorithm},
            "domains": {"ant": {"type": "ant_omni", "params": {"hidden": HIDDEN}}},
        }
    )
    return run_spec(config, algorithm="a", domain="ant", seed=seed)


def results_of(solutions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Objective, final (x, y) spread over the archive, episode steps."""
    measures = np.tanh(solutions[:, :2] * 3.0) * 25.0
    return -np.sum(solutions**2, axis=1), measures, np.full(len(solutions), 50.0)


def assert_lecun_uniform(solutions: np.ndarray) -> None:
    """Every layer's weights within +-sqrt(3 / inputs) and spread over it; biases 0."""
    for row in solutions:
        for (matrix, biases), n_in in zip(mlp_layers(row, SIZES), SIZES, strict=False):
            limit = np.sqrt(3.0 / n_in)
            assert np.abs(matrix).max() <= limit and np.abs(matrix).max() > 0.5 * limit
            assert not biases.any()


def test_map_elites_starts_from_random_policies_then_asks_compact_batches():
    optimizer = build_optimizer(spec_of("cvt_map_elites_line"))
    first = optimizer.ask()
    assert isinstance(first, np.ndarray) and first.shape == (10, 27 * 4 + 4 + 4 * 8 + 8)
    assert_lecun_uniform(first)
    assert not np.array_equal(first[:5], first[5:])  # each emitter its own draw
    assert build_optimizer(spec_of("cvt_map_elites_line")).ask().tobytes() == first.tobytes()
    assert build_optimizer(spec_of("cvt_map_elites_line", seed=1)).ask()[0, 0] != first[0, 0]
    assert compact_emitters(optimizer.scheduler) is None
    objective, _, steps = results_of(first)
    optimizer.tell(objective, np.zeros((10, 2)), episode_steps=steps)  # one cell, one elite
    assert all(emitter.initial_solutions is None for emitter in optimizer.scheduler.emitters)
    batch = optimizer.ask()
    assert isinstance(batch, dict) and "x0" not in batch and "solutions" not in batch
    stored = pickle.dumps(optimizer)
    assert sum(row.tobytes() in stored for row in first) == 1  # the elite's alone


def test_without_the_key_the_emitters_start_from_x0():
    first = build_optimizer(spec_of("cvt_map_elites_line", start=None)).ask()
    assert isinstance(first, dict) and not first["x0"].any()
    assert "initial_population" not in spec_of("cvt_map_elites_line", start=None)["algorithm_spec"]


def test_evolution_strategies_start_from_one_random_policy_each():
    optimizer = build_optimizer(spec_of("cvt_cma_me"))
    starts = np.stack([emitter.x0 for emitter in optimizer.scheduler.emitters])
    assert_lecun_uniform(starts)
    assert not np.array_equal(starts[0], starts[1])


def test_asynchronous_proposals_take_the_initial_policies_in_turn():
    optimizer = build_optimizer(spec_of("cvt_map_elites_line"))
    initial = [emitter.initial_solutions.copy() for emitter in optimizer.scheduler.emitters]
    proposals = optimizer.ask_async(slots=4, evaluations=np.arange(4))
    made = np.concatenate([proposal["solutions"] for proposal in proposals])
    expected = np.stack([initial[0][0], initial[1][0], initial[0][1], initial[1][1]])
    assert made.tobytes() == expected.tobytes()
    optimizer.tell_async(*results_of(made)[:2], solutions=made, episode_steps=np.ones(4))
    assert all(emitter.initial_solutions is None for emitter in optimizer.scheduler.emitters)


@pytest.mark.parametrize(
    ("algorithm", "domain", "line"),
    [
        (
            {"type": "map_elites", "initial_population": "random"},
            {"type": "sphere"},
            "key 'algorithms.a.initial_population': random draws from the domain's own "
            "initialisation, but domain 'd' has none (the locomotion domains have); leave "
            "the key out to start from x0",
        ),
        (
            {"type": "bop_elites", "initial_population": "random"},
            {"type": "sphere", "bounds": [-1, 1]},
            "key 'algorithms.a.initial_population': not used by type bop_elites",
        ),
        (
            {"type": "openai_es", "initial_population": "random"},
            {"type": "ant_omni"},
            "key 'algorithms.a.initial_population': not used by type openai_es",
        ),
    ],
)
def test_a_wrong_initial_population_is_one_clear_line(algorithm, domain, line):
    message = error_of({"shards": 1, "algorithms": {"a": algorithm}, "domains": {"d": domain}})
    assert line in message
    assert message.count("initial_population") == 1, message
