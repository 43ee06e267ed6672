"""qUCB's cost-aware acquisition (keys ``cost``, ``cost_cooling``): proposals trade the
predicted gain for the predicted cost, alpha 0 proposes what plain qUCB proposes, a cost
that is missing or no positive number is named on one line, and ``mlp_digits`` reports
its deterministic training work."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from conftest import BO_CAMPAIGN, docs_block, error_of, merged

from evocamp.base.errors import OptimizerError
from evocamp.config import validate_config
from evocamp.families.bo import CentralisedQUCB, propose
from evocamp.families.surrogate import cost_alpha
from evocamp.tasks.training import UPDATE_WORK, mlp_digits, train_mlp

SETTINGS = {"bounds": (0.0, 1.0), "candidates": 500, "trees": 10, "initial_points": 10}


def history(count: int = 60):
    """A 2-d history whose objective ignores x0 and whose cost grows 400-fold with it."""
    x = np.random.default_rng(1).uniform(0.0, 1.0, (count, 2))
    y = -((x[:, 1] - 0.5) ** 2)
    return x, y, np.exp(6.0 * x[:, 0])


def proposals(cost=None, *, seed: int = 7) -> np.ndarray:
    x, y, _ = history()
    points, _, _ = propose(
        x,
        y,
        kappas=np.array([0.5, 1.0, 2.0, 4.0]),
        refine_generations=5,
        rng=np.random.default_rng(seed),
        cost=cost,
        **SETTINGS,
    )
    return points


def test_cost_aware_proposals_go_where_the_same_gain_is_cheaper():
    _, _, costs = history()
    plain = np.concatenate([proposals(seed=seed) for seed in range(3)])
    cheap = np.concatenate([proposals((costs, 1.0), seed=seed) for seed in range(3)])
    assert cheap[:, 0].mean() < 0.15 and plain[:, 0].mean() > 0.45  # x0 costs, gains nothing
    assert np.median(np.abs(cheap[:, 1] - 0.5)) < 0.1  # still where the gain is


def test_alpha_zero_proposes_what_plain_qucb_proposes_bitwise():
    _, _, costs = history()
    assert proposals((costs, 0.0)).tobytes() == proposals().tobytes()


def test_alpha_cools_from_one_to_zero_over_the_cooling_evaluations():
    assert cost_alpha(None, told=500, initial_points=10) == 1.0
    alphas = [cost_alpha(40, told=told, initial_points=10) for told in (5, 10, 30, 50, 90)]
    assert alphas == [1.0, 1.0, 0.5, 0.0, 0.0]


def centralised(**keys) -> CentralisedQUCB:
    return CentralisedQUCB(
        solution_dim=2,
        x0=None,
        seed=3,
        batch_size=3,
        kappa=1.0,
        refine_generations=0,
        **SETTINGS,
        **keys,
    )


def test_a_missing_or_bad_cost_is_named_with_its_generation_and_solution():
    optimizer = centralised(cost="work")
    optimizer.ask()
    with pytest.raises(OptimizerError) as caught:
        optimizer.tell(np.zeros(3), np.empty((3, 0)))
    assert str(caught.value) == (
        "generation 1: qUCB's key 'cost' names the field 'work', which the evaluation "
        "did not report (add it to the domain's extra_fields and return it)"
    )
    with pytest.raises(OptimizerError) as caught:
        optimizer.tell(np.zeros(3), np.empty((3, 0)), work=np.array([1.0, 2.0, np.nan]))
    assert str(caught.value) == (
        "generation 1, solution 2: qUCB's key 'cost' names the field 'work', whose value "
        "nan is no positive finite cost"
    )
    # A failed solution (discarded) has no cost to check: it joins neither surrogate.
    optimizer.tell(
        np.array([0.0, np.nan, 1.0]),
        np.empty((3, 0)),
        work=np.array([1.0, np.nan, 2.0]),
        failed=np.array([False, True, False]),
    )
    assert optimizer.costs.tolist() == [1.0, 2.0] and len(optimizer.y) == 2
    optimizer.ask_async(slots=[0], evaluations=[3])
    with pytest.raises(OptimizerError, match=r"^asynchronous mode, completion told after 2 "):
        optimizer.tell_async(
            np.zeros(1), np.empty((1, 0)), solutions=np.zeros((1, 2)), work=np.zeros(1)
        )


def test_a_run_without_cost_pickles_no_cost_attributes():
    assert "cost" not in vars(centralised()) and vars(centralised(cost="w"))["cost"] == "w"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"algorithms": {"cen": {"cost": "work"}}},
            "key 'algorithms.cen.cost': 'work' is no extra field of domain 'ackley4' (its "
            "extra fields: ackley); the cost must be a field every evaluation reports",
        ),
        (
            {"algorithms": {"dec": {"cost_cooling": 20}}},
            "key 'algorithms.dec.cost_cooling': cools the cost's exponent; give "
            "algorithms.dec.cost",
        ),
        (
            {"algorithms": {"rs": {"cost": "ackley"}}},
            "key 'algorithms.rs.cost': not used by type random_search",
        ),
    ],
)
def test_bad_cost_keys_are_named(overrides, message):
    assert message in error_of(merged(BO_CAMPAIGN, overrides))


def test_mlp_digits_work_is_examples_times_weights_plus_its_updates():
    configuration = {
        "learning_rate_init": 0.01,
        "alpha": 1e-4,
        "width": 16,
        "depth": 2,
        "activation": "relu",
        "solver": "adam",
        "batch_size": 64,
    }
    seeds = np.array([4, 4], dtype=np.uint64)
    work = mlp_digits([configuration] * 2, seeds, epochs=3)["work"]
    model, _, _ = train_mlp(configuration, 4, epochs=3, validation_fraction=0.25)
    weights = 64 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10
    assert model.t_ == 3 * 1078
    assert work.tolist() == [model.t_ * weights + UPDATE_WORK * model.t_ / 64 * 3] * 2


@pytest.mark.parametrize("page", ["families.md", "tuning.md"])
def test_the_documented_cost_aware_campaign_validates(page):
    keys = yaml.safe_load(docs_block(page, "algorithms:\n  qucb_cost:"))
    config = validate_config({"campaign": "docs", "mode": "async", **keys})
    assert config["algorithms"]["qucb_cost"]["cost"] == "work"
    assert "work" in config["domains"]["mlp_digits"]["extra_fields"]
