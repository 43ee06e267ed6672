"""The hyperparameter-tuning domain ``mlp_digits``: a real MLPClassifier trained on
scikit-learn's digits, one configuration of its space per evaluation."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import REPO

from evocamp.catalogue.domains import DOMAINS
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
    exported = json.loads((REPO / "config" / "spaces" / "mlp_digits.json").read_text())
    by_name = {p["name"]: p for p in exported["hyperparameters"]}
    assert set(by_name) == set(MLP_DIGITS_SPACE)
    configspace_type = {
        "real": "uniform_float",
        "integer": "uniform_int",
        "categorical": "categorical",
        "ordinal": "ordinal",
    }
    for name, parameter in MLP_DIGITS_SPACE.items():
        written = by_name[name]
        assert written["type"] == configspace_type[parameter["type"]], name
        assert written["default_value"] == parameter["default"], name
        if "low" in parameter:
            assert (written["lower"], written["upper"]) == (parameter["low"], parameter["high"])
            assert written["log"] == parameter.get("log", False), name
        else:
            key = "choices" if parameter["type"] == "categorical" else "sequence"
            assert written[key] == parameter["choices"], name
    conditions = {c["child"]: c for c in exported["conditions"]}
    assert set(conditions) == {"momentum"}
    assert conditions["momentum"]["parent"] == "solver"
    assert conditions["momentum"].get("values", [conditions["momentum"].get("value")]) == ["sgd"]
