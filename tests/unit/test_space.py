"""Search spaces (``domains.NAME.space``, :mod:`evocamp.model.space`): validation in
one line, the ConfigSpace JSON reader, conditions, the unit cube and sampling, the
decoded call of the evaluation function, and the families that take a space."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import MIXED_SPACE, PLUGINS, error_of, merged

from evocamp.catalogue.factory import build_optimizer, load_evaluator
from evocamp.config import run_spec, validate_config
from evocamp.families.baselines import RandomSearch
from evocamp.families.bo import CentralisedQUCB, DecentralisedBatch, DecentralisedQUCB
from evocamp.model.space import (
    INACTIVE_UNIT,
    Space,
    SpaceError,
    from_configspace,
    space_entries,
)

DATA = Path(__file__).resolve().parents[1] / "data"

#: The space of tests/data/deephyper_space.json (a DeepHyper HpProblem's to_json), in
#: the declaration order of the YAML form.
SPACE = MIXED_SPACE

CONFIG = {
    "campaign": "space",
    "seeds": 1,
    "algorithms": {"rs": {"type": "random_search", "batch_size": 6}},
    "domains": {
        "net": {
            "type": "plugin",
            "function": "evocamp_test_plugin:typed_configurations",
            "python_path": str(PLUGINS),
            "measure_ranges": [],
            "space": SPACE,
        }
    },
}


def with_space(**changes) -> dict:
    """:data:`CONFIG` with parameters of its space changed (``None`` removes one)."""
    space = {name: spec for name, spec in {**SPACE, **changes}.items() if spec is not None}
    config = merged(CONFIG, {})
    config["domains"]["net"]["space"] = space
    return config


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"optimizer": {"type": "categorical", "choices": []}},
            "key 'domains.net.space': parameter 'optimizer': choices must be a non-empty list",
        ),
        (
            {"lr": {"type": "real", "low": 0.0, "high": 0.1, "log": True}},
            "key 'domains.net.space': parameter 'lr': log scale needs a positive low bound, "
            "not 0.0",
        ),
        (
            {"momentum": {"type": "real", "low": 0, "high": 1, "condition": {"solver": ["a"]}}},
            "key 'domains.net.space': parameter 'momentum': condition on unknown parameter "
            "'solver' (the space's: lr, layers, optimizer, momentum, width)",
        ),
        (
            {"momentum": {"type": "real", "low": 0, "high": 1, "condition": {"optimizer": "rms"}}},
            "key 'domains.net.space': parameter 'momentum': condition value 'rms' is not a "
            "value of 'optimizer'",
        ),
        (
            {"layers": {"type": "integer", "low": 1, "high": 6.5}},
            "key 'domains.net.space': parameter 'layers': high must be an integer, not 6.5",
        ),
        (
            {"layers": {"type": "integer", "low": 6, "high": 1}},
            "key 'domains.net.space': parameter 'layers': low 6 must be below high 1",
        ),
        (
            {"width": {"type": "ordinal", "choices": [16, 32], "default": 8}},
            "key 'domains.net.space': parameter 'width': default 8 is not one of its choices",
        ),
        (
            {"width": {"type": "float"}},
            "key 'domains.net.space': parameter 'width': type must be real, integer, "
            "categorical or ordinal, not 'float'",
        ),
        (
            {"width": {"type": "ordinal", "choices": [1, 2], "log": True}},
            "key 'domains.net.space': parameter 'width': key 'log' is not used by type ordinal "
            "(its keys: choices, condition, default, type)",
        ),
        (
            {
                "lr": {"type": "real", "low": 1, "high": 2, "condition": {"layers": [1]}},
                "layers": {"type": "integer", "low": 1, "high": 6, "condition": {"lr": [1]}},
            },
            "key 'domains.net.space': parameter 'lr': its conditions form a cycle",
        ),
    ],
)
def test_a_bad_space_is_named_on_one_line(changes, message):
    error = error_of(with_space(**changes))
    assert message in error
    assert error.count("\n") <= 1  # the header line, then this one problem


def test_a_space_with_solution_dim_or_bounds_is_refused():
    config = merged(CONFIG, {"domains": {"net": {"solution_dim": 5, "bounds": [0, 1]}}})
    error = error_of(config)
    assert "key 'domains.net.solution_dim': a domain with a space has one parameter" in error
    assert "key 'domains.net.bounds': a domain with a space has one parameter" in error


@pytest.mark.parametrize("algorithm", ["openai_es", "snes", "map_elites", "bipop_cma_es"])
def test_families_that_need_a_box_refuse_a_space_and_say_which_take_one(algorithm):
    config = merged(CONFIG, {"algorithms": {"rs": {"type": algorithm}}})
    config["algorithms"]["rs"].pop("batch_size")
    config["domains"]["net"]["measure_ranges"] = [[0, 1], [0, 1]]
    assert (
        f"key 'algorithms.rs.type': {algorithm} needs a continuous box, but domain 'net' has "
        "a search space (space); types that take one: qucb_centralised, qucb_decentralised, "
        "random_search, nevergrad, optuna, plugin"
    ) in error_of(config)


def test_a_configspace_file_gives_the_space_of_its_yaml_form(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hp.json").write_text((DATA / "deephyper_space.json").read_text())
    config = validate_config(merged(CONFIG, {"domains": {"net": {"space": "hp.json"}}}))
    from_file = run_spec(config, algorithm="rs", domain="net", seed=0)["domain_spec"]["space"]
    by_name = {entry["name"]: entry for entry in from_file}
    # ConfigSpace writes the parameters in its own order: the same parameters
    assert by_name == {entry["name"]: entry for entry in space_entries(SPACE)}
    assert [entry["name"] for entry in from_file] == [
        "layers",
        "lr",
        "optimizer",
        "width",
        "momentum",
    ]


def test_a_missing_or_unsupported_configspace_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = merged(CONFIG, {"domains": {"net": {"space": "hp.json"}}})
    assert "key 'domains.net.space': cannot read hp.json: No such file" in error_of(config)
    document = json.loads((DATA / "deephyper_space.json").read_text())
    document["conditions"] = [{"type": "OR", "child": "momentum", "conjunctions": []}]
    (tmp_path / "hp.json").write_text(json.dumps(document))
    assert (
        "key 'domains.net.space': hp.json: parameter 'momentum': ConfigSpace condition 'OR' "
        "is not supported (supported: EQ, IN, AND)"
    ) in error_of(config)
    document["conditions"] = []
    document["hyperparameters"][0]["type"] = "normal_float"
    with pytest.raises(SpaceError, match="ConfigSpace type 'normal_float' is not supported"):
        from_configspace(document)


def test_conditions_and_typed_configurations():
    space = Space(space_entries(SPACE))
    solutions = np.array(
        [
            [0.001, 3.0, 0.0, np.nan, 2.0],  # adam: no momentum
            [0.01, 1.0, 1.0, 0.9, 0.0],
            [0.01, 1.0, 0.0, 0.9, 0.0],  # a momentum with adam is inactive, left out
        ]
    )
    configurations = space.configurations(solutions)
    assert configurations[0] == {"lr": 0.001, "layers": 3, "optimizer": "adam", "width": 64}
    assert configurations[1] == {
        "lr": 0.01,
        "layers": 1,
        "optimizer": "sgd",
        "momentum": 0.9,
        "width": 16,
    }
    assert [type(value) for value in configurations[1].values()] == [float, int, str, float, int]
    with pytest.raises(SpaceError, match="solution 0: 'optimizer' has code 2.0, not one of 0..1"):
        space.configurations([[0.001, 3.0, 2.0, np.nan, 2.0]])
    with pytest.raises(SpaceError, match="solution 0: 'layers' is 2.5, not an integer"):
        space.configurations([[0.001, 2.5, 0.0, np.nan, 2.0]])
    defaults = space.defaults()
    assert np.array_equal(defaults, [0.001, 2.0, 0.0, np.nan, 0.0], equal_nan=True)


def test_the_unit_cube_maps_every_type_and_snaps_to_its_solutions():
    space = Space(space_entries(SPACE))
    unit = np.array([[0.0, 0.0, 0.49, 0.3, 0.34], [1.0, 0.999, 0.51, 1.0, 0.99]])
    solutions = space.from_unit(unit)
    assert np.array_equal(
        solutions, [[1e-5, 1.0, 0.0, np.nan, 1.0], [0.1, 6.0, 1.0, 0.99, 2.0]], equal_nan=True
    )
    snapped = space.snap(unit)
    assert snapped[0, 3] == INACTIVE_UNIT  # the surrogate sees inactive apart
    assert np.allclose(snapped[:, [1, 2, 4]], [[1 / 12, 1 / 4, 1 / 2], [11 / 12, 3 / 4, 5 / 6]])
    assert np.array_equal(space.from_unit(snapped), solutions, equal_nan=True)


def test_sampling_covers_every_value_uniformly_in_the_unit_cube():
    space = Space(space_entries(SPACE))
    samples = space.sample(np.random.default_rng(0), 6000)
    assert set(samples[:, 1]) == {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}
    counts = np.bincount(samples[:, 4].astype(int))
    assert counts.min() > 1800  # each of 3 ordinal values about 2000 times
    assert np.isnan(samples[:, 3]).sum() == (samples[:, 2] == 0).sum()
    log_lr = np.log10(samples[:, 0])
    assert -5 <= log_lr.min() and log_lr.max() <= -1
    assert abs(np.median(log_lr) + 3) < 0.1  # log-uniform: median 10^-3


def test_the_evaluation_function_gets_configurations_and_the_optimizers_the_space():
    config = validate_config(CONFIG)
    spec = run_spec(config, algorithm="rs", domain="net", seed=0)
    optimizer = build_optimizer(spec)
    assert isinstance(optimizer, RandomSearch)
    batch = optimizer.ask()
    # the test plugin asserts the types of every configuration it gets
    result = load_evaluator(spec["domain_spec"])(batch, np.arange(6, dtype=np.uint64))
    assert result["objective"].shape == (6,)
    assert result["measures"].shape == (6, 0)  # added: the function returned none


def _told(optimizer, batch):
    objective = -np.nan_to_num(batch, nan=0.0).sum(axis=1)
    optimizer.tell(objective, np.zeros((len(batch), 0)))


def test_qucb_proposes_solutions_of_the_space_and_none_twice():
    entries = space_entries(SPACE)
    space = Space(entries)
    settings = dict(
        solution_dim=5,
        x0=None,
        bounds=None,
        seed=4,
        batch_size=4,
        kappa=1.96,
        initial_points=4,
        candidates=40,
        trees=5,
        refine_generations=2,
        space=entries,
    )
    optimizer = CentralisedQUCB(**settings)
    seen = set()
    for _ in range(4):
        batch = optimizer.ask()
        space.configurations(batch)  # every proposal decodes
        assert np.array_equal(space.from_unit(space.to_unit(batch)), batch, equal_nan=True)
        seen.update(row.tobytes() for row in batch)
        _told(optimizer, batch)
    assert len(seen) == 16
    decentralised = DecentralisedQUCB(shards=2, **settings)
    for _ in range(3):
        batch = decentralised.ask()
        rows = [DecentralisedBatch.solutions(batch, a, b)["solutions"] for a, b in ((0, 2), (2, 4))]
        solutions = np.concatenate(rows)
        space.configurations(solutions)
        objective = -np.nan_to_num(solutions, nan=0.0).sum(axis=1)
        decentralised.tell(objective, np.zeros((4, 0)), solutions=solutions)


def _library_batches(make, *, pickled: bool) -> list:
    """Three batches of a library family's optimizer, told ``-sum`` of each solution
    (inactive parameters as 0), pickled and unpickled between tells or not."""
    import pickle

    optimizer, batches = make(), []
    for _ in range(3):
        batches.append(optimizer.ask())
        if pickled:
            optimizer = pickle.loads(pickle.dumps(optimizer))
        optimizer.tell(-np.nan_to_num(batches[-1], nan=0.0).sum(axis=1), None)
    return batches


@pytest.mark.parametrize(
    ("family", "settings"),
    [
        ("optuna", {"sampler": "tpe"}),
        ("nevergrad", {"optimizer": "TwoPointsDE"}),
        ("nevergrad", {"optimizer": "NGOpt", "budget": 40}),
    ],
)
def test_library_families_take_the_space_through_their_own_space_objects(family, settings):
    from evocamp.families.nevergrad import NevergradOptimizer
    from evocamp.families.optuna import OptunaSampler

    entries = space_entries(SPACE)
    space = Space(entries)
    cls = OptunaSampler if family == "optuna" else NevergradOptimizer

    def make():
        return cls(
            solution_dim=5, x0=space.defaults(), bounds=None, seed=7, batch_size=4,
            space=entries, **settings,
        )  # fmt: skip

    batches = _library_batches(make, pickled=False)
    again = _library_batches(make, pickled=True)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(batches, again, strict=True))
    configurations = space.configurations(np.concatenate(batches))
    assert all(type(c["layers"]) is int and c["width"] in (16, 32, 64) for c in configurations)
    assert all(("momentum" in c) == (c["optimizer"] == "sgd") for c in configurations)
    # asynchronous mode: results told in another order than asked, NaN rows found
    optimizer = make()
    asked = optimizer.ask_async(slots=[0, 1, 2], evaluations=[0, 1, 2])
    optimizer.tell_async(np.zeros(3), None, solutions=asked[::-1])
    assert optimizer.stats()["told"] == 3


def test_ngopt_without_budget_on_a_space_says_to_give_one():
    from evocamp.base.errors import OptimizerError
    from evocamp.families.nevergrad import NevergradOptimizer

    entries = space_entries(SPACE)
    optimizer = NevergradOptimizer(
        solution_dim=5, x0=None, bounds=None, seed=7, batch_size=4, optimizer="NGOpt",
        space=entries,
    )  # fmt: skip
    with pytest.raises(OptimizerError, match="NGOpt and its kin choose by budget: give budget"):
        optimizer.ask()


def test_results_name_and_type_each_parameter():
    from evocamp.results import parameter_columns

    entries = space_entries(SPACE)
    solutions = [[0.001, 3.0, 0.0, np.nan, 2.0], [0.01, 1.0, 1.0, 0.9, 0.0]]
    columns = parameter_columns(entries, np.array(solutions))
    assert list(columns) == ["lr", "layers", "optimizer", "momentum", "width"]
    assert columns["layers"].tolist() == [3, 1] and str(columns["layers"].dtype) == "Int64"
    assert list(columns["optimizer"]) == ["adam", "sgd"]
    assert list(columns["width"]) == [64, 16] and columns["width"].ordered
    assert np.isnan(columns["momentum"][0]) and columns["momentum"][1] == 0.9
