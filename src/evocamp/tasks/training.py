"""Hyperparameter tuning: training a real model is one evaluation.

``mlp_digits`` trains scikit-learn's :class:`~sklearn.neural_network.MLPClassifier` on
scikit-learn's bundled digits (1,797 8 x 8 images, no download) with the
hyperparameters of one configuration of :data:`MLP_DIGITS_SPACE` and scores it on a
validation split drawn from the evaluation seed. Its catalogue entry (the domain type
``mlp_digits``) is :data:`evocamp.catalogue.domains.DOMAINS`'s.

The function has the signature of a plugin over a search space::

    def evaluate(configurations, seeds, **params):
        # configurations: list of dicts, name -> int, float or the choice's own value
        # (inactive parameters absent); seeds: uint64 array (n,)
        return {"objective": (n,), "measures": (n, 0), "extra": (n,), ...}
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import threadpoolctl

from evocamp.tasks.functions import digits_data

#: The search space of ``mlp_digits`` (a domain's ``space:``): eight hyperparameters of
#: four kinds, ``momentum`` active only with the ``sgd`` solver.
MLP_DIGITS_SPACE: dict[str, dict] = {
    "learning_rate_init": {
        "type": "real",
        "low": 1e-4,
        "high": 1e-1,
        "log": True,
        "default": 1e-3,
    },
    "alpha": {"type": "real", "low": 1e-6, "high": 1e-1, "log": True, "default": 1e-4},
    "width": {"type": "integer", "low": 8, "high": 256, "log": True, "default": 64},
    "depth": {"type": "integer", "low": 1, "high": 3, "default": 1},
    "activation": {
        "type": "categorical",
        "choices": ["relu", "tanh", "logistic"],
        "default": "relu",
    },
    "solver": {"type": "categorical", "choices": ["adam", "sgd"], "default": "adam"},
    "momentum": {
        "type": "real",
        "low": 0.5,
        "high": 0.99,
        "default": 0.9,
        "condition": {"solver": ["sgd"]},
    },
    "batch_size": {"type": "ordinal", "choices": [16, 32, 64, 128, 256], "default": 64},
}
#: Training epochs of one evaluation (``params.epochs``): 0.03 to 2.5 s on one core of
#: an AMD EPYC with the space's extremes.
MLP_DIGITS_EPOCHS = 20
#: Share of the training images (all but the fixed test set) held out for validation.
VALIDATION_FRACTION = 0.25


def validation_split(seed: int, count: int, *, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The training and validation indices of ``count`` examples for an evaluation seed.

    Parameters
    ----------
    seed : int
        The evaluation seed: the same seed gives the same split, another seed another.
    count : int
        Number of examples to split.
    fraction : float
        Share of them in the validation set (rounded down, at least one).

    Returns
    -------
    tuple of numpy.ndarray
        Training indices and validation indices, each sorted.
    """
    order = np.random.default_rng([int(seed), 0]).permutation(count)
    held = max(1, int(count * fraction))
    return np.sort(order[held:]), np.sort(order[:held])


def train_mlp(configuration: dict, seed: int, *, epochs: int, validation_fraction: float):
    """Train the MLP of one configuration on the seed's training split.

    Parameters
    ----------
    configuration : dict
        Hyperparameters by name (:data:`MLP_DIGITS_SPACE`); ``momentum`` read only with
        the ``sgd`` solver.
    seed : int
        The evaluation seed: it draws the validation split and the network's initial
        weights and minibatch order.
    epochs : int
        Passes over the training split (scikit-learn's ``max_iter``).
    validation_fraction : float
        Share of the training images held out for validation.

    Returns
    -------
    tuple
        The fitted classifier and the validation images and labels.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    images, labels, _, _ = digits_data()
    train, validation = validation_split(seed, len(images), fraction=validation_fraction)
    solver = configuration["solver"]
    model = MLPClassifier(
        hidden_layer_sizes=(int(configuration["width"]),) * int(configuration["depth"]),
        activation=configuration["activation"],
        solver=solver,
        alpha=float(configuration["alpha"]),
        batch_size=int(configuration["batch_size"]),
        learning_rate_init=float(configuration["learning_rate_init"]),
        momentum=float(configuration["momentum"]) if solver == "sgd" else 0.9,
        max_iter=epochs,
        random_state=int(np.random.default_rng([int(seed), 1]).integers(2**31)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(images[train], labels[train])
    return model, images[validation], labels[validation]


#: What one minibatch update of one layer costs beyond its multiply-adds (Python and call
#: overhead), counted as this many multiply-adds (:func:`training_work`): fitted to the
#: training seconds of 96 random configurations at 10 epochs on a 2-core AMD EPYC.
UPDATE_WORK = 100_000


def training_work(model, *, batch_size: int) -> float:
    """The deterministic cost of a fitted ``MLPClassifier``'s training: the training
    examples its solver went through (scikit-learn's ``t_``: epochs run, early stop
    included, x training rows) x its trained weights and biases (the multiply-adds of
    its forward and backward passes, up to a constant), plus :data:`UPDATE_WORK` per
    layer and minibatch update (``t_ / batch_size`` updates: small batches cost more
    per example). What qUCB's ``cost`` reads in place of measured seconds, which no
    proposal may depend on; its Spearman correlation with measured training seconds
    is in ``docs/tuning.md``."""
    weights = sum(w.size for w in model.coefs_) + sum(b.size for b in model.intercepts_)
    updates = float(model.t_) / int(batch_size)
    return float(model.t_) * float(weights) + UPDATE_WORK * updates * len(model.coefs_)


def mlp_digits(
    configurations: Sequence[dict],
    seeds: np.ndarray,
    *,
    epochs: int = MLP_DIGITS_EPOCHS,
    validation_fraction: float = VALIDATION_FRACTION,
) -> dict[str, np.ndarray]:
    """Validation accuracy of an MLP classifier trained on scikit-learn's digits.

    Each configuration trains one ``MLPClassifier`` (:func:`train_mlp`) on one thread
    (BLAS limited to one thread while it trains, so that ``evaluation.concurrency`` and
    the workers decide how many cores a campaign uses). No measures.

    Parameters
    ----------
    configurations : sequence of dict
        One configuration of :data:`MLP_DIGITS_SPACE` per evaluation.
    seeds : numpy.ndarray
        One evaluation seed per configuration (the validation split, the initial weights).
    epochs : int
        Training epochs.
    validation_fraction : float
        Share of the 1,437 training images held out for validation.

    Returns
    -------
    dict
        ``objective``: validation accuracy; ``validation_loss``: the validation
        cross-entropy; ``test_accuracy``: accuracy on the fixed test set (the last 360
        images, never trained on nor validated on: what a tuned configuration is worth);
        ``work``: the training's deterministic cost (:func:`training_work`), reported
        for qUCB's ``cost`` (a field of the run when the domain's ``extra_fields`` name
        it; the entry's default fields leave it out).
    """
    _, _, test_images, test_labels = digits_data()
    count = len(configurations)
    accuracy, loss, test, work = (np.empty(count) for _ in range(4))
    with threadpoolctl.threadpool_limits(limits=1):
        for row, (configuration, seed) in enumerate(zip(configurations, seeds, strict=True)):
            model, images, labels = train_mlp(
                configuration, int(seed), epochs=epochs, validation_fraction=validation_fraction
            )
            probabilities = np.clip(model.predict_proba(images), 1e-15, 1.0)
            accuracy[row] = np.mean(model.classes_[probabilities.argmax(axis=1)] == labels)
            columns = np.searchsorted(model.classes_, labels)
            loss[row] = -np.mean(np.log(probabilities[np.arange(len(labels)), columns]))
            test[row] = model.score(test_images, test_labels)
            work[row] = training_work(model, batch_size=configuration["batch_size"])
    return {
        "objective": accuracy,
        "measures": np.empty((count, 0)),
        "validation_loss": loss,
        "test_accuracy": test,
        "work": work,
    }
