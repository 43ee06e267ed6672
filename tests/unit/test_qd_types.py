"""Issue 24's QD types are the pyribs components their catalogue entries name, and the
CQD score is Kent & Branke's."""

from __future__ import annotations

import numpy as np
import pytest

import evocamp  # noqa: F401 (numba's JIT off before pyribs loads)
from evocamp.catalogue.algorithms import ALGORITHMS, CELL_ARCHIVE_KEYS
from evocamp.catalogue.domains import objective_max
from evocamp.catalogue.factory import build_optimizer
from evocamp.config import run_spec, validate_config
from evocamp.families.cqd import cqd_score
from evocamp.families.cqd import cqd_settings as settings_with


def spec_of(algorithm: dict, domain: dict | None = None, *, name: str = "a", seed: int = 0):
    config = validate_config(
        {
            "algorithms": {name: algorithm},
            "domains": {"arm": domain or {"type": "arm", "solution_dim": 4}},
            "shards": 1,
        }
    )
    return run_spec(config, algorithm=name, domain="arm", seed=seed)


def cqd_settings(spec: dict):
    """The CQD settings of a run, its domain's best objective from the catalogue (as the
    fold asks them)."""
    return settings_with(spec, objective_max=objective_max(spec["domain_spec"]))


def test_cqd_score_normalises_objectives_to_zero_one():
    """The CQD score equals Kent & Branke's sum over targets and penalties of the best
    (f - obj_min) / (obj_max - obj_min) - theta d / dist_max, for negative objectives too
    (pyribs' function alone does not shift by obj_min)."""
    from ribs.archives import GridArchive

    archive = GridArchive(solution_dim=2, dims=[5, 5], ranges=[(-1, 1), (-1, 1)], seed=1)
    rng = np.random.default_rng(0)
    archive.add(rng.normal(size=(30, 2)), -rng.uniform(0, 9, 30), rng.uniform(-1, 1, (30, 2)))
    targets = rng.uniform(-1, 1, (2, 50, 2))
    dist_max = 2 * np.sqrt(2)
    score = cqd_score(
        archive, target_points=targets, penalties=5, obj_min=-9.0, obj_max=0.0, dist_max=dist_max
    )
    f = (archive.data("objective") + 9.0) / 9.0
    measures = archive.data("measures")
    per_set = [
        sum(
            np.max(
                f[:, None] - theta * np.linalg.norm(measures[:, None] - t, axis=2) / dist_max, 0
            ).sum()
            for theta in np.linspace(0, 1, 5)
        )
        for t in targets
    ]
    assert score == pytest.approx(np.mean(per_set), rel=1e-12)


def test_cqd_targets_are_the_domains_whatever_the_algorithm_and_seed():
    first = cqd_settings(spec_of({"type": "map_elites"}, name="me", seed=0))
    other = cqd_settings(spec_of({"type": "cma_es"}, name="es", seed=4))
    assert first["target_points"].tobytes() == other["target_points"].tobytes()
    assert first["target_points"].shape == (1, 200, 2)
    assert (first["obj_min"], first["obj_max"]) == (-(np.pi**2), 0.0)
    assert first["dist_max"] == pytest.approx(np.hypot(8, 8))


def test_cqd_needs_a_grid_and_a_best_objective():
    assert cqd_settings(spec_of({"type": "cvt_map_elites", "archive": {"cells": 20}})) is None
    plugin = {
        "type": "plugin",
        "function": "evocamp_test_plugin:noisy_sphere",
        "python_path": "tests/plugins",
        "solution_dim": 4,
        "measure_ranges": [[-2, 2], [-2, 2]],
    }
    assert cqd_settings(spec_of({"type": "map_elites"}, plugin)) is None
    given = cqd_settings(
        spec_of({"type": "map_elites"}, {**plugin, "cqd": {"obj_max": 3, "penalties": [0, 1]}})
    )
    assert given["obj_max"] == 3 and given["penalties"] == [0, 1]
    off = {"type": "arm", "solution_dim": 4, "cqd": {"target_points": 0}}
    assert cqd_settings(spec_of({"type": "map_elites"}, off)) is None


def test_each_type_is_its_pyribs_components():
    from ribs.archives import DensityArchive, DNSArchive, GridArchive, ProximityArchive
    from ribs.emitters import EvolutionStrategyEmitter, GaussianEmitter, IsoLineEmitter
    from ribs.schedulers import BanditScheduler, BayesianOptimizationScheduler

    ns = build_optimizer(spec_of({"type": "novelty_search"})).scheduler
    assert isinstance(ns.archive, ProximityArchive) and isinstance(ns.result_archive, GridArchive)
    assert ns.archive._novelty_threshold == pytest.approx(0.037 * 8)
    assert isinstance(ns.emitters[0], GaussianEmitter)
    line = build_optimizer(spec_of({"type": "novelty_search", "variation": "iso_line"}))
    assert isinstance(line.scheduler.emitters[0], IsoLineEmitter)
    dns = build_optimizer(spec_of({"type": "dominated_novelty_search"})).scheduler
    assert isinstance(dns.archive, DNSArchive) and dns.archive.capacity == 1024
    optimizer = build_optimizer(spec_of({"type": "cma_me_bandit", "emitters": 3}))
    bandit = optimizer.scheduler
    assert isinstance(bandit, BanditScheduler) and len(bandit.emitter_pool) == 12
    assert len(optimizer.ask()) == 3 * 32 and bandit.active.sum() == 3
    rankers = [type(e._ranker).__name__ for e in bandit.emitter_pool[:9]]
    assert rankers[::3] == [
        "ObjectiveRanker",
        "TwoStageRandomDirectionRanker",
        "TwoStageImprovementRanker",
    ]
    assert all(isinstance(e, IsoLineEmitter) for e in bandit.emitter_pool[9:])
    dds = build_optimizer(spec_of({"type": "density_descent"})).scheduler
    assert isinstance(dds.archive, DensityArchive)
    assert isinstance(dds.emitters[0], EvolutionStrategyEmitter)
    assert dds.emitters[0].archive is dds.result_archive
    bop = build_optimizer(spec_of({"type": "bop_elites"})).scheduler
    assert isinstance(bop, BayesianOptimizationScheduler)
    assert bop.emitters[0].min_obj == pytest.approx(-(np.pi**2))


@pytest.mark.parametrize(
    "name", sorted(name for name, entry in ALGORITHMS.items() if entry.recipe is not None)
)
def test_components_read_only_keys_their_type_accepts(name):
    """Every key a QD type's archive and emitters read is one the type accepts (its
    entry's keys, or ``archive.*`` keys with the type's defaults): components are
    named in the entry, never decoded elsewhere."""
    entry = ALGORITHMS[name]
    recipe = entry.recipe
    for kind, options in recipe.emitter_kinds:
        options = {**recipe.emitter_options, **options}
        assert set(kind.keys) - set(options) <= set(entry.spec_keys), kind.name
    own = set(recipe.archive.keys) - {"dims", "cells", "cvt_samples", *CELL_ARCHIVE_KEYS}
    assert own <= set(entry.archive_defaults), recipe.archive.name
    assert entry.grid_archive == recipe.grid_result


def test_cvt_cma_mae_learns_and_keeps_elites_on_one_tessellation_with_the_chosen_es():
    """cvt_cma_mae: learning and result archives are CVTs with the same centroids (the
    learning one with the archive learning rate); ``es`` picks pyribs' strategy."""
    from ribs.archives import CVTArchive
    from ribs.emitters.opt import LMMAEvolutionStrategy, SeparableCMAEvolutionStrategy

    for es, strategy in (
        ("sep_cma_es", SeparableCMAEvolutionStrategy),
        ("lm_ma_es", LMMAEvolutionStrategy),
    ):
        spec = spec_of(
            {"type": "cvt_cma_mae", "es": es, "emitters": 2, "archive": {"cells": 30}},
            {"type": "arm", "solution_dim": 50},
        )
        scheduler = build_optimizer(spec).scheduler
        learning, result = scheduler.archive, scheduler.result_archive
        assert isinstance(learning, CVTArchive) and isinstance(result, CVTArchive)
        assert learning.centroids.tobytes() == result.centroids.tobytes()
        assert learning.learning_rate == 0.01 and result.learning_rate == 1.0
        assert all(type(emitter._opt) is strategy for emitter in scheduler.emitters)
    default = build_optimizer(spec_of({"type": "cvt_cma_me"}, {"type": "arm", "solution_dim": 5}))
    assert type(default.scheduler.emitters[0]._opt).__name__ == "CMAEvolutionStrategy"
