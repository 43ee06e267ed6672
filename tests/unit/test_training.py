"""The hyperparameter-tuning domain ``mlp_digits``: a real MLPClassifier trained on
scikit-learn's digits, one configuration of its space per evaluation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import REPO

from evocamp.catalogue.domains import DOMAINS
from evocamp.catalogue.factory import build_optimizer, load_evaluator
from evocamp.config import run_spec, validate_config
from evocamp.config.run_specs import read_space
from evocamp.model.space import Space
from evocamp.tasks.functions import digits_data
from evocamp.tasks.training import (
    MLP_DIGITS_SPACE,
    mlp_digits,
    train_mlp,
    validation_split,
)

#: Small enough to train in a fraction of a second.
SMALL = {
    "learning_rate_init": 0.01,
    "alpha": 1e-4,
    "width": 16,
    "depth": 1,
    "activation": "relu",
    "solver": "adam",
    "batch_size": 64,
}


def test_a_configuration_gives_the_same_accuracy_for_a_seed_and_the_estimator_gets_it():
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    seeds = np.array([11, 11, 12], dtype=np.uint64)
    first = mlp_digits([SMALL] * 3, seeds, epochs=5)
    again = mlp_digits([SMALL] * 3, seeds, epochs=5)
    for name in ("objective", "validation_loss", "test_accuracy"):
        assert first[name].tobytes() == again[name].tobytes()
        assert first[name][0] == first[name][1]
    assert first["measures"].shape == (3, 0)
    assert 0.85 < first["objective"][0] <= 1.0
    # The same model by hand: the space's names reach scikit-learn's estimator as read.
    images, labels, _, _ = digits_data()
    train, validation = validation_split(11, len(images), fraction=0.25)
    model = MLPClassifier(
        hidden_layer_sizes=(16,),
        learning_rate_init=0.01,
        alpha=1e-4,
        batch_size=64,
        max_iter=5,
        random_state=int(np.random.default_rng([11, 1]).integers(2**31)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(images[train], labels[train])
    assert first["objective"][0] == np.mean(model.predict(images[validation]) == labels[validation])


def test_different_seeds_give_different_validation_splits_of_a_quarter():
    train, validation = validation_split(3, 1437, fraction=0.25)
    assert len(validation) == 359 and len(train) == 1078
    assert np.union1d(train, validation).tolist() == list(range(1437))
    other_train, other = validation_split(4, 1437, fraction=0.25)
    assert not np.array_equal(validation, other)
    assert np.array_equal(validation_split(3, 1437, fraction=0.25)[1], validation)


def test_integers_stay_integers_and_momentum_is_read_with_sgd_only():
    configuration = {**SMALL, "width": np.int64(9), "depth": 2, "batch_size": np.int64(32)}
    model, images, _ = train_mlp(configuration, 5, epochs=1, validation_fraction=0.25)
    assert model.hidden_layer_sizes == (9, 9)
    assert all(type(size) is int for size in model.hidden_layer_sizes)
    assert [w.shape for w in model.coefs_] == [(64, 9), (9, 9), (9, 10)]
    assert type(model.batch_size) is int and model.batch_size == 32
    assert len(images) == 359
    sgd, _, _ = train_mlp(
        {**SMALL, "solver": "sgd", "momentum": 0.6}, 5, epochs=1, validation_fraction=0.25
    )
    assert sgd.momentum == 0.6 and sgd.solver == "sgd"
    with pytest.raises(KeyError, match="momentum"):
        train_mlp({**SMALL, "solver": "sgd"}, 5, epochs=1, validation_fraction=0.25)


def test_the_entry_carries_the_space_and_the_configspace_file_is_the_same_space():
    entry = DOMAINS["mlp_digits"]
    assert entry.space is MLP_DIGITS_SPACE and entry.evaluate is mlp_digits
    kinds = {name: p["type"] for name, p in MLP_DIGITS_SPACE.items()}
    assert sorted(set(kinds.values())) == ["categorical", "integer", "ordinal", "real"]
    assert len(kinds) >= 6
    # The file DeepHyper's HpProblem wrote (benchmarks/bo_deephyper.py space-json), read
    # as a campaign's `space:` reads it: the same entries (ConfigSpace sorts the names).
    exported = read_space(str(REPO / "config" / "spaces" / "mlp_digits.json"))
    built_in = read_space(MLP_DIGITS_SPACE)
    assert sorted(exported, key=by_name) == sorted(built_in, key=by_name)
    assert [e["condition"] for e in built_in if e["condition"]] == [{"solver": ["sgd"]}]


def by_name(entry: dict) -> str:
    return entry["name"]


def test_a_campaign_on_mlp_digits_trains_typed_configurations_of_the_entrys_space():
    config = validate_config(
        {
            "campaign": "hpo",
            "seeds": 1,
            "algorithms": {"rs": {"type": "random_search", "batch_size": 4}},
            "domains": {"net": {"type": "mlp_digits", "params": {"epochs": 2}}},
        }
    )
    spec = run_spec(config, algorithm="rs", domain="net", seed=0)
    assert [e["name"] for e in spec["domain_spec"]["space"]] == list(MLP_DIGITS_SPACE)
    batch = build_optimizer(spec).ask()
    configurations = Space(spec["domain_spec"]["space"]).configurations(batch)
    for configuration in configurations:
        assert type(configuration["width"]) is int and 8 <= configuration["width"] <= 256
        assert configuration["batch_size"] in (16, 32, 64, 128, 256)
        assert ("momentum" in configuration) == (configuration["solver"] == "sgd")
    seeds = np.arange(4, dtype=np.uint64)
    result = load_evaluator(spec["domain_spec"])(batch, seeds, epochs=2)
    direct = mlp_digits(configurations, seeds, epochs=2)
    assert result["objective"].tobytes() == direct["objective"].tobytes()
    assert ((0 < result["objective"]) & (result["objective"] <= 1)).all()
