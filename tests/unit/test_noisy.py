"""Noisy domains: repeated evaluations and the final re-evaluation of the elites
(``evaluation.repeats``, ``evaluation.reevaluate``), checked against calling the noisy
Lunar Lander directly with the seeds the documentation derives."""

from __future__ import annotations

import numpy as np
import pytest
from campaigns import PLUGINS
from conftest import error_of, merged

from evocamp.base.errors import EvaluationError
from evocamp.base.seeding import run_key
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.loop.engine import held_batch, initialise
from evocamp.loop.evaluation import evaluate_shard
from evocamp.loop.in_flight import virtual_duration
from evocamp.loop.reevaluation import combine_reevaluation, reevaluate, reevaluate_shard
from evocamp.tasks.functions import lunar_lander, lunar_lander_noisy

NOISY = {
    "generations": 2,
    "algorithms": {
        "me": {"type": "map_elites", "emitters": 1, "emitter_batch_size": 4},
    },
    "domains": {"ll": {"type": "lunar_lander_noisy"}},
    "experiments": [{"algorithm": "me", "domain": "ll"}],
}


def _spec(small_config, evaluation: dict, *, dims=(10, 10)) -> dict:
    config = merged(small_config, {**NOISY, "evaluation": evaluation})
    config["domains"] = NOISY["domains"]
    config["algorithms"] = NOISY["algorithms"]
    config["algorithms"]["me"]["archive"] = {"dims": list(dims)}
    return run_spec(validate_config(config), algorithm="me", domain="ll", seed=0)


def _direct_repeats(solutions: np.ndarray, seeds: np.ndarray, repeats: int) -> list[dict]:
    """Each repeat of each solution, evaluated by calling the domain function directly
    with the seeds docs/failures.md documents: words of
    SeedSequence(evaluation seed, spawn_key=(2,))."""
    words = np.stack(
        [
            np.random.SeedSequence(int(seed), spawn_key=(2,)).generate_state(
                repeats, dtype=np.uint64
            )
            for seed in seeds
        ]
    )
    return [lunar_lander_noisy(solutions, words[:, r]) for r in range(repeats)]


def test_the_noisy_lander_depends_on_the_seed_and_the_plain_one_does_not():
    policy = np.random.default_rng(3).normal(size=(1, 32)).repeat(4, axis=0)
    seeds = np.arange(4, dtype=np.uint64)
    noisy = lunar_lander_noisy(policy, seeds)["objective"]
    assert len(set(noisy.tolist())) == 4
    np.testing.assert_array_equal(noisy, lunar_lander_noisy(policy, seeds)["objective"])
    assert len(set(lunar_lander(policy, seeds)["objective"].tolist())) == 1


def test_repeats_give_the_means_of_real_evaluations_with_derived_seeds(small_config):
    spec = _spec(small_config, {"repeats": 3})
    state = initialise(spec)
    batch, seeds = held_batch(state), state.next_seeds
    solutions, _ = resolve_run(spec).batch_format.materialise(batch, 0, len(seeds))
    results = [
        evaluate_shard(resolve_run(spec), batch=batch, seeds=seeds, generation=1, shard=s, shards=2)
        for s in range(2)
    ]
    objective = np.concatenate([r.objective for r in results])
    measures = np.concatenate([r.measures for r in results])
    extra = {name: np.concatenate([r.extra[name] for r in results]) for name in results[0].extra}

    direct = _direct_repeats(solutions, seeds, 3)
    objectives = np.stack([d["objective"] for d in direct])
    np.testing.assert_array_equal(objective, (objectives[0] + objectives[1] + objectives[2]) / 3)
    np.testing.assert_array_equal(measures, np.mean([d["measures"] for d in direct], axis=0))
    np.testing.assert_array_equal(extra["objective_std"], objectives.std(axis=0))
    spread = np.stack([d["measures"] for d in direct]).std(axis=0)
    np.testing.assert_array_equal(extra["measures_std_0"], spread[:, 0])
    np.testing.assert_array_equal(extra["measures_std_1"], spread[:, 1])
    assert sorted(extra) == ["measures_std_0", "measures_std_1", "objective_std"]
    assert (extra["objective_std"] > 0).all()  # the repeats really differ
    # the archive stores the spread with every elite
    assert {"objective_std", "measures_std_0", "measures_std_1"} <= set(state.archive.field_list)


def test_the_final_reevaluation_gives_the_corrected_metrics_of_the_elites_means(small_config):
    spec = _spec(small_config, {"reevaluate": 3}, dims=(3, 3))
    state = initialise(spec)
    solutions = np.random.default_rng(5).normal(size=(12, 32))
    once = lunar_lander_noisy(solutions, np.arange(12, dtype=np.uint64))
    state.archive.add(solutions, once["objective"], once["measures"])
    elites = state.archive.data()
    order = np.argsort(elites["index"])

    result = reevaluate(state, repeats=3)

    key = run_key(algorithm="me", domain="ll", seed=0)
    seeds = np.random.SeedSequence(spec["master_seed"], spawn_key=(*key, 4)).generate_state(
        len(order), dtype=np.uint64
    )
    direct = _direct_repeats(elites["solution"][order], seeds, 3)
    mean_objective = np.mean([d["objective"] for d in direct], axis=0)
    mean_measures = np.mean([d["measures"] for d in direct], axis=0)
    np.testing.assert_array_equal(result.index, elites["index"][order])
    np.testing.assert_array_equal(result.seed, seeds)
    np.testing.assert_array_equal(result.raw_objective, elites["objective"][order])
    np.testing.assert_allclose(result.objective, mean_objective, rtol=1e-13)
    # Flageat & Cully: the means re-inserted into an empty 3 x 3 archive, best per cell
    cells = state.archive.index_of(mean_measures)
    best = {cell: mean_objective[cells == cell].max() for cell in np.unique(cells)}
    offset = spec["algorithm_spec"]["archive"]["qd_score_offset"]
    assert offset == -600.0
    expected_qd = sum(value - offset for value in best.values())
    assert result.corrected["corrected_qd_score"] == pytest.approx(expected_qd, rel=1e-12)
    assert result.corrected["corrected_norm_qd_score"] == pytest.approx(expected_qd / 9, rel=1e-12)
    assert result.corrected["corrected_coverage"] == len(best) / 9
    assert result.corrected["corrected_best_objective"] == mean_objective.max()
    assert result.corrected["corrected_qd_score"] < state.archive.stats.qd_score  # lucky draws


@pytest.mark.parametrize(
    ("chunk_size", "elites"),
    [
        (1, "elite in cell 2"),
        (2, "elites in cells 0, 2"),  # one call: both elites
    ],
)
def test_a_failing_reevaluation_names_the_elite_by_its_cell(small_config, chunk_size, elites):
    config = merged(small_config, {"evaluation": {"reevaluate": 2}})
    config["algorithms"] = {"me": {"type": "map_elites", "emitters": 1, "archive": {"dims": [4]}}}
    config["domains"] = {
        "pl": {
            "type": "plugin",
            "function": "evocamp_test_plugin:fails_on_negative_first",
            "python_path": str(PLUGINS),
            "measure_ranges": [[-1, 1]],
            "solution_dim": 2,
            "chunk_size": chunk_size,
        }
    }
    spec = run_spec(validate_config(config), algorithm="me", domain="pl", seed=0)
    state = initialise(spec)
    # cells 3, 0 and 2 (index order: 0, 2, 3): the elite at cell 2 has a negative first
    state.archive.add(
        np.array([[0.9, 0.0], [0.1, 0.0], [-0.1, 0.0]]),
        np.array([1.0, 2.0, 3.0]),
        np.array([[0.9], [-0.9], [0.1]]),
    )
    with pytest.raises(EvaluationError) as caught:
        reevaluate(state, repeats=2)
    assert str(caught.value) == (
        "run me/pl/seed0, final re-evaluation (evaluation.reevaluate) of generation 0's "
        f"archive, {elites}: the evaluation function raised ValueError: the first "
        "parameter is negative"
        + (" (chunk_size 1 names the exact solution)" if chunk_size > 1 else "")
    )


def test_repeats_in_a_supervised_child_are_those_in_process(small_config):
    """With a time limit (evaluations in a supervised child, docs/failures.md) the
    repeats, their means and spread are bitwise those evaluated in process; the run
    spec holds the repeats and the failure policy side by side."""
    plain = _spec(small_config, {"repeats": 2})
    limited = _spec(small_config, {"repeats": 2, "timeout": 60, "on_failure": "discard"})
    assert limited["evaluation"] == {**limited["evaluation"], "repeats": 2, "timeout": 60}
    state = initialise(plain)
    batch, seeds = held_batch(state), state.next_seeds
    a, b = (
        evaluate_shard(resolve_run(spec), batch=batch, seeds=seeds, generation=1, shard=0, shards=1)
        for spec in (plain, limited)
    )
    np.testing.assert_array_equal(a.objective, b.objective)
    np.testing.assert_array_equal(a.measures, b.measures)
    assert (
        sorted(a.extra) == sorted(b.extra) == ["measures_std_0", "measures_std_1", "objective_std"]
    )
    for name in a.extra:
        np.testing.assert_array_equal(a.extra[name], b.extra[name])


def test_repeats_enter_the_run_spec_only_when_not_1_and_reevaluate_never(small_config):
    default = run_spec(validate_config(small_config), algorithm="me", domain="sphere", seed=0)
    assert "evaluation" not in default
    explicit = merged(small_config, {"evaluation": {"repeats": 1, "reevaluate": 0}})
    assert run_spec(validate_config(explicit), algorithm="me", domain="sphere", seed=0) == default
    noisy = merged(small_config, {"evaluation": {"repeats": 2, "reevaluate": 5}})
    spec = run_spec(validate_config(noisy), algorithm="me", domain="sphere", seed=0)
    assert spec["evaluation"] == {"repeats": 2}  # reevaluate changes no archive
    reevaluated = merged(small_config, {"evaluation": {"reevaluate": 5}})
    assert (
        run_spec(validate_config(reevaluated), algorithm="me", domain="sphere", seed=0) == default
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"evaluation": {"repeats": 0}},
            "key 'evaluation.repeats': 0 is less than the minimum of 1",
        ),
        (
            {"evaluation": {"reevaluate": -1}},
            "key 'evaluation.reevaluate': -1 is less than the minimum of 0",
        ),
        (
            {"evaluation": {"repeat": 2}},
            "key 'evaluation': unknown key(s) ['repeat']; allowed keys are "
            "['after_retries', 'concurrency', 'gpus_per_evaluation', 'max_failed_fraction', "
            "'on_failure', 'reevaluate', 'repeats', 'retries', 'timeout']",
        ),
        (
            {
                "evaluation": {"repeats": 2},
                "domains": {"sphere": {"extra_fields": ["measures_std_0"]}},
            },
            "key 'domains.sphere.extra_fields': 'measures_std_0' is the name evocamp gives "
            "the spread of repeated evaluations (evaluation.repeats > 1); rename the field",
        ),
    ],
)
def test_bad_evaluation_keys_are_named(small_config, overrides, message):
    assert message in error_of(merged(small_config, overrides))


def test_the_virtual_clock_lasts_every_repeat():
    spec = {
        "domain_spec": {"simulated_seconds": {"distribution": "exponential", "mean": 2.0}},
        "evaluation": {"repeats": 3},
    }
    words = np.random.SeedSequence(77, spawn_key=(2,)).generate_state(3, dtype=np.uint64)
    expected = sum(
        np.random.default_rng(np.random.SeedSequence(int(w), spawn_key=(1,))).exponential(2.0)
        for w in words
    )
    assert virtual_duration(spec, 77) == pytest.approx(expected, rel=1e-15)
    once = np.random.default_rng(np.random.SeedSequence(77, spawn_key=(1,))).exponential(2.0)
    assert virtual_duration({**spec, "evaluation": {}}, 77) == once


@pytest.mark.parametrize("shards", [2, 5])
def test_reevaluation_shards_combine_to_the_whole(small_config, shards):
    spec = _spec(small_config, {}, dims=(2, 2))
    state = initialise(spec)
    solutions = np.random.default_rng(9).normal(size=(6, 32))
    once = lunar_lander_noisy(solutions, np.arange(6, dtype=np.uint64))
    state.archive.add(solutions, once["objective"], once["measures"])
    whole = reevaluate(state, repeats=2)
    parts = [reevaluate_shard(state, repeats=2, shard=s, shards=shards) for s in range(shards)]
    assert sum(len(part.objective) for part in parts) == len(whole.index) <= 4
    combined = combine_reevaluation(state, repeats=2, shards=parts[::-1])
    np.testing.assert_array_equal(combined.objective, whole.objective)
    np.testing.assert_array_equal(combined.measures, whole.measures)
    assert combined.corrected == whole.corrected
    with pytest.raises(EvaluationError, match="the re-evaluation shards cover elites"):
        combine_reevaluation(state, repeats=2, shards=parts[1:])


@pytest.mark.parametrize("count", [0, 1, 31, 32, 33, 1000, 4099])
def test_evaluation_seeds_are_their_seed_sequences_words(count):
    """Evaluation seeds, computed without numpy's SeedSequence (its mixing in Python,
    its output hash with array operations), are word for word those of
    ``SeedSequence.generate_state`` (what every recorded run was seeded with), for keys
    and generations of one and several 32-bit words."""
    from evocamp.base.seeding import EVALUATION_STREAM, _ours_match, evaluation_seeds

    assert _ours_match()  # the pinned numpy's SeedSequence: the words are computed here

    for master_seed, key, generation in (
        (0, (1, 2, 0), 1),
        (2**40 + 7, (4294967295, 5, 9), 123),
        (5, (2**32 + 3, 0, 1), 2**33 + 1),
    ):
        expected = np.random.SeedSequence(
            master_seed, spawn_key=(*key, EVALUATION_STREAM, generation)
        ).generate_state(count, dtype=np.uint64)
        seeds = evaluation_seeds(master_seed, key, generation, count)
        assert seeds.dtype == np.uint64 and seeds.flags.writeable
        np.testing.assert_array_equal(seeds, expected)
