"""Bayesian optimisation: qUCB proposals, the decentralised (per-shard) variant and its
configuration errors (campaigns: tests/workflow/test_bo_campaigns.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BO_CAMPAIGN, error_of, merged, shard_results

from evocamp.catalogue.factory import optimizer_class, resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.families import surrogate
from evocamp.families.bo import (
    exploration_weights,
    fit_surrogate,
    kappa_decay,
    propose,
    ranked,
    training_subset,
    tree_mean_std,
    ucb,
)
from evocamp.loop.engine import initialise, tell
from evocamp.model.protocol import shard_bounds
from evocamp.tasks.functions import ackley_value


def run_in_memory(config: dict, algorithm: str, domain: str, *, generations: int):
    """Run one BO run with the engine's steps in this process (as the shard jobs would)."""
    config = validate_config(config)
    spec = run_spec(config, algorithm=algorithm, domain=domain, seed=0)
    state = initialise(spec)
    for _ in range(generations):
        results = shard_results(state, config["shards"])
        state = tell(state, results)
    return state


def test_ranking_puts_taken_points_and_repeats_after_all_others():
    points = np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0], [4.0, 5.0], [6.0, 7.0]])
    score = np.array([9.0, 1.0, 8.0, 5.0, 5.0])
    taken = {points[3].tobytes()}
    # 0 is best; 4 before 1; then 2 (a repeat of 0, though scored 8) and 3 (taken).
    assert ranked(points, score, taken=taken, count=5).tolist() == [0, 4, 1, 2, 3]
    assert ranked(points, score, taken=taken, count=2).tolist() == [0, 4]


def test_a_long_history_is_fitted_on_its_best_half_and_its_most_recent_points():
    """Beyond ``fit_points``, the surrogate sees the best half and the most recent of
    the rest (a function of the history alone): the proposals are those made from that
    subset as the whole history."""
    y = np.array([5.0, 1.0, 9.0, 2.0, 9.0, 0.0, 3.0, 4.0])
    assert training_subset(y, limit=8).tolist() == list(range(8))
    # Best 2: 2 and 4 (tie: first index first); then the 2 most recent of the others.
    assert training_subset(y, limit=4).tolist() == [2, 4, 6, 7]
    # The linear-time choice is the stable sort's, ties, infinities and NaN included.
    draws = np.random.default_rng(0)
    for values in (np.round(draws.normal(size=3000), 1), np.r_[np.full(50, -np.inf), y, np.nan]):
        for limit in (4, 7, 1000):
            best = np.argsort(-values, kind="stable")[: limit // 2]
            rest = np.setdiff1d(np.arange(len(values)), best)
            expected = np.sort(np.r_[best, rest[len(rest) - (limit - len(best)) :]])
            assert training_subset(values, limit=limit).tolist() == expected.tolist()
    rng = np.random.default_rng(3)
    x = rng.uniform(-32.768, 32.768, (60, 3))
    y = -ackley_value(x)
    settings = dict(kappas=np.array([0.5, 1.96]), bounds=(-32.768, 32.768), candidates=200)
    settings.update(trees=5, initial_points=10, refine_generations=2)
    bounded, _, _ = propose(x, y, **settings, fit_points=20, rng=np.random.default_rng(1))
    subset = training_subset(y, limit=20)
    alone, _, _ = propose(x[subset], y[subset], **settings, rng=np.random.default_rng(1))
    full, _, _ = propose(x, y, **settings, rng=np.random.default_rng(1))
    assert bounded.tobytes() == alone.tobytes() and bounded.tobytes() != full.tobytes()


def test_genetic_refinement_raises_each_points_ucb_and_proposes_new_points():
    """Ackley 10-d, 200 evaluated points: refined proposals score at least as high a UCB
    as the best uniform candidates (from the same draws; the search is elitist) and
    higher on the whole, and none repeats an evaluated or another proposed point."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-32.768, 32.768, (200, 10))
    x[:20] *= 0.2  # a few points nearer the optimum, as after some generations
    y = -ackley_value(x)
    kappas = np.array([0.0, 0.0, 0.5, 1.96, 6.0])
    settings = dict(kappas=kappas, bounds=(-32.768, 32.768), candidates=2000, trees=10)
    settings.update(initial_points=10)
    plain, _, _ = propose(x, y, **settings, refine_generations=0, rng=np.random.default_rng(1))
    refined, fit_s, propose_s = propose(
        x, y, **settings, refine_generations=10, rng=np.random.default_rng(1)
    )
    assert fit_s > 0 and propose_s > 0
    model = fit_surrogate(x, y, trees=10, rng=np.random.default_rng(1))  # propose's model
    gains = []
    for kappa, before, after in zip(kappas, plain, refined, strict=True):
        (m0, m1), (s0, s1) = tree_mean_std(model, np.stack([before, after]))
        gains.append(ucb(m1, s1, kappa) - ucb(m0, s0, kappa))
    assert min(gains) >= 0 and sum(gains) > 0, gains
    both = np.concatenate([x, refined])
    assert len(np.unique(both, axis=0)) == len(both)
    assert (np.abs(refined) <= 32.768).all()
    # Without generations, the best candidate for each kappa in turn, as plain sampling.
    assert len(np.unique(np.concatenate([x, plain]), axis=0)) == len(x) + len(plain)


def test_surrogate_mean_is_the_forests_prediction_and_spread_is_over_trees():
    from sklearn.ensemble import ExtraTreesRegressor

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (50, 3))
    model = ExtraTreesRegressor(n_estimators=7, random_state=0).fit(x, np.sin(x).sum(axis=1))
    points = rng.uniform(-1, 1, (20, 3))
    mean, std = tree_mean_std(model, points)
    np.testing.assert_allclose(mean, model.predict(points), rtol=1e-12)
    per_tree = np.array([tree.predict(points) for tree in model.estimators_])
    np.testing.assert_allclose(std, per_tree.std(axis=0), rtol=1e-12)
    assert (std > 0).any()


def test_exploration_weights_are_exponential_and_fixed_per_worker():
    weights = exploration_weights(11, kappa=1.96, worker=0, count=20000)
    assert abs(weights.mean() - 1.96) < 0.05 and (weights > 0).all()
    np.testing.assert_array_equal(
        exploration_weights(11, kappa=1.96, worker=3, count=4),
        exploration_weights(11, kappa=1.96, worker=3, count=4),
    )
    assert not np.array_equal(
        exploration_weights(11, kappa=1.96, worker=3, count=4),
        exploration_weights(11, kappa=1.96, worker=4, count=4),
    )


#: A cheaper surrogate and acquisition search than the defaults (for the suite's time).
SMALL_SURROGATE = {"candidates": 2000, "trees": 10, "refine_generations": 10}


def test_kappa_schedule_is_deephypers_periodic_exponential_decay():
    """kappa x factor is DeepHyper's ``eta_0 * exp(-rate * ((i - 1 - delay) % period))``
    with ``rate = -log(kappa_final / kappa) / period``, ``i`` the proposals asked
    including this one and ``delay`` the initial design (its CBO's scheduler)."""
    schedule = {"period": 10, "kappa_final": 0.01}
    rate = -np.log(0.01 / 1.96) / 10
    for proposed in range(10, 40):
        expected = 1.96 * np.exp(-rate * ((proposed + 1 - 1 - 10) % 10))
        got = 1.96 * kappa_decay(schedule, kappa=1.96, proposed=proposed, initial_points=10)
        assert got == pytest.approx(expected, rel=1e-12)
    assert kappa_decay(None, kappa=1.96, proposed=33, initial_points=10) == 1.0


def test_a_reused_surrogate_is_the_one_a_fresh_process_fits():
    """With ``refit_every`` 4, proposals between two refits use one model fitted to the
    history up to the last refit; a process that lacks it (its cache emptied) fits the
    same model, so the proposals are identical (a pure function of the history)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-5, 5, (26, 3))
    y = -ackley_value(x)
    settings = dict(
        kappas=np.array([1.0, 2.0]), bounds=(-5.0, 5.0), candidates=50, trees=5,
        initial_points=10, refine_generations=2, refit=(4, 7),
    )  # fmt: skip

    def proposed(count):
        return propose(x[:count], y[:count], rng=np.random.default_rng(count), **settings)[0]

    surrogate._SURROGATES.clear()
    warm = [proposed(count) for count in (22, 23, 25)]
    assert len(surrogate._SURROGATES) == 1  # 22, 23 and 25 points: refitted at 22 only
    surrogate._SURROGATES.clear()
    cold = [proposed(count) for count in (25, 23, 22)][::-1]
    for made, again in zip(warm, cold, strict=True):
        assert made.tobytes() == again.tobytes()
    fresh = propose(x[:22], y[:22], rng=np.random.default_rng(22), **{**settings, "refit": None})
    assert fresh[0].tobytes() != warm[0].tobytes()  # (a fit per proposal draws its own model)


def test_qucb_beats_random_search_on_ackley_5d_in_200_evaluations():
    """The outcome the family is for: 25 generations of 8 on Ackley 5-d, 8 shards."""
    config = {
        "shards": 8,
        "algorithms": {
            "dec": {"type": "qucb_decentralised", **SMALL_SURROGATE},
            "cen": {"type": "qucb_centralised", **SMALL_SURROGATE},
            "rs": {"type": "random_search", "batch_size": 8},
        },
        "domains": {"ackley5": {"type": "ackley", "solution_dim": 5}},
    }
    best = {
        name: run_in_memory(config, name, "ackley5", generations=25).best["ackley"]
        for name in ("dec", "cen", "rs")
    }
    assert best["dec"] < 0.75 * best["rs"] and best["cen"] < 0.75 * best["rs"], best
    # Random search's best of 200 on Ackley 5-d is about 16 (the 20 seeds: 16.1).
    assert 12 < best["rs"] < 20, best


def test_each_shard_proposes_from_its_own_seed_and_kappa():
    config = merged(BO_CAMPAIGN, {"algorithms": {"dec": {"initial_points": 1}}})
    state = run_in_memory(config, "dec", "ackley4", generations=1)
    batches = resolve_run(state.spec).batch_format
    assert batches.proposes_in_shards and batches.shard_modules == ("sklearn.ensemble",)
    slices = [shard_bounds(6, 3, shard) for shard in range(3)]
    first = [batches.materialise(state.next_batch, a, b)[0] for a, b in slices]
    again = [batches.materialise(state.next_batch, a, b)[0] for a, b in slices]
    for mine, repeated in zip(first, again, strict=True):
        np.testing.assert_array_equal(mine, repeated)
    assert not np.array_equal(first[0], first[1])
    made, timings = batches.materialise(state.next_batch, *slices[1])
    assert made.shape == (2, 4) and set(timings) == {"fit_seconds", "propose_seconds"}
    assert timings["fit_seconds"] > 0
    assert (np.abs(made) <= 32.768).all()
    with pytest.raises(ValueError, match="solutions 1..2 are not one shard's slice"):
        optimizer_class(state.spec).batch_format.solutions(state.next_batch, 1, 3)


def test_tell_gets_the_solutions_the_shards_proposed():
    state = run_in_memory(BO_CAMPAIGN, "dec", "ackley4", generations=3)
    history = state.optimizer
    assert history.x.shape == (18, 4) and history.y.shape == (18,)
    np.testing.assert_allclose(-ackley_value(history.x), history.y, rtol=1e-12)
    assert state.best["ackley"] == pytest.approx(-history.y.max())
    row = state.metrics_window[-1]
    assert row["fit_seconds"] > 0 and row["propose_seconds"] > 0 and 0 < row["utilisation"] <= 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"domains": {"ackley4": {"type": "sphere", "solution_dim": 4}}},
            "key 'algorithms.cen.type': qucb_centralised samples within bounds, but domain "
            "'ackley4' has none; give domains.ackley4.bounds",
        ),
        (
            {"domains": {"ackley4": {"bounds": [5, -5]}}},
            "key 'domains.ackley4.bounds': low 5 must be below high -5",
        ),
        (
            {"algorithms": {"dec": {"kappa": 0}}},
            "key 'algorithms.dec.kappa': 0 is less than or equal to the minimum of 0",
        ),
        (
            {"algorithms": {"dec": {"batch_size": 2}}},
            "key 'shards': 3 shards is more than the 2 solutions per generation of "
            "algorithm 'dec' on domain 'ackley4'; allowed is 1..2",
        ),
        (
            {"algorithms": {"rs": {"kappa": 1.0}}},
            "key 'algorithms.rs.kappa': not used by type random_search",
        ),
    ],
)
def test_bad_bo_configuration_is_named(overrides, message):
    assert message in error_of(merged(BO_CAMPAIGN, overrides))
