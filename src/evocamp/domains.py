"""Evaluation domains: built-in benchmarks and users' own evaluation functions.

Every domain is a function with the signature of a user plugin::

    def evaluate(solutions, seeds, **params):
        # solutions: float64 array (n, solution_dim); seeds: uint64 array (n,)
        return {"objective": (n,), "measures": (n, measure_dim), "extra": (n,), ...}

A tuple ``(objective, measures)`` is accepted as the return value too. Higher
objective is better. ``seeds[i]`` is the evaluation seed of ``solutions[i]``
(derived from the master seed, run, generation and solution index), for domains
with noise or randomised simulations.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: Bound of the search space in the CMA-ME paper's linear-projection domains.
PROJECTION_BOUND = 5.12
#: Optimum shift of the sphere and Rastrigin functions (``0.4 * 5.12``).
PROJECTION_SHIFT = 0.4 * PROJECTION_BOUND

Evaluator = Callable[..., object]


def _projection_measures(solutions: np.ndarray) -> np.ndarray:
    """Sums over the two halves of the clipped coordinates (CMA-ME paper)."""
    clipped = solutions.copy()
    outside = np.abs(clipped) > PROJECTION_BOUND
    clipped[outside] = PROJECTION_BOUND / clipped[outside]
    half = solutions.shape[1] // 2
    return np.stack((clipped[:, :half].sum(axis=1), clipped[:, half:].sum(axis=1)), axis=1)


def _normalise(raw: np.ndarray, worst: float) -> np.ndarray:
    """Map a raw minimisation value onto [0, 100], 100 being the optimum (0)."""
    return (raw - worst) / (0.0 - worst) * 100.0


def sphere(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """Shifted sphere with linear-projection measures, normalised to [0, 100]."""
    dim = solutions.shape[1]
    worst = dim * (-PROJECTION_BOUND - PROJECTION_SHIFT) ** 2
    raw = np.sum(np.square(solutions - PROJECTION_SHIFT), axis=1)
    return {
        "objective": _normalise(raw, worst),
        "measures": _projection_measures(solutions),
    }


def _rastrigin_raw(shifted: np.ndarray) -> np.ndarray:
    return np.sum(shifted**2 - 10.0 * np.cos(2.0 * np.pi * shifted) + 10.0, axis=-1)


def rastrigin(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """Shifted Rastrigin with linear-projection measures, normalised to [0, 100]."""
    dim = solutions.shape[1]
    worst = float(_rastrigin_raw(np.full(dim, -PROJECTION_BOUND - PROJECTION_SHIFT)))
    raw = _rastrigin_raw(solutions - PROJECTION_SHIFT)
    return {
        "objective": _normalise(raw, worst),
        "measures": _projection_measures(solutions),
    }


def arm(
    solutions: np.ndarray, seeds: np.ndarray, *, link_lengths: list[float] | None = None
) -> dict[str, np.ndarray]:
    """Planar robotic arm: objective -Var(theta), measures = end-effector (x, y)."""
    lengths = _link_lengths(solutions.shape[1], link_lengths)
    cumulative = np.cumsum(solutions, axis=1)
    return {
        "objective": -np.var(solutions, axis=1),
        "measures": np.stack(
            (
                np.sum(lengths * np.cos(cumulative), axis=1),
                np.sum(lengths * np.sin(cumulative), axis=1),
            ),
            axis=1,
        ),
    }


def _link_lengths(joints: int, link_lengths: list[float] | None) -> np.ndarray:
    if link_lengths is None:
        return np.ones(joints)
    return np.asarray(link_lengths, dtype=np.float64)


#: Lunar Lander's linear policy: action = argmax(W obs), W of shape (actions, observations).
LUNAR_LANDER_SHAPE = (4, 8)
#: Lunar Lander's terrain and start: seed 52 is the flat terrain of pyribs' tutorial.
LUNAR_LANDER_ENV_SEED = 52


def lunar_lander(
    solutions: np.ndarray, seeds: np.ndarray, *, env_seed: int = LUNAR_LANDER_ENV_SEED
) -> dict[str, np.ndarray]:
    """gymnasium's ``LunarLander-v3`` flown by linear policies (pyribs' tutorial).

    Objective: the episode return. Measures: x position and y velocity at the first
    step where either leg touches the ground; a lander that never touches down gives
    its last x position and its minimum y velocity. Every episode starts from
    ``env.reset(seed=env_seed)``, so a policy's return is deterministic.
    """
    import gymnasium

    env = gymnasium.make("LunarLander-v3")
    objective = np.empty(len(solutions))
    measures = np.empty((len(solutions), 2))
    try:
        for row, weights in enumerate(solutions):
            objective[row], measures[row] = _lunar_lander_episode(
                env, weights.reshape(LUNAR_LANDER_SHAPE), env_seed
            )
    finally:
        env.close()
    return {"objective": objective, "measures": measures}


def _lunar_lander_episode(env, policy: np.ndarray, env_seed: int) -> tuple[float, list[float]]:
    observation, _ = env.reset(seed=int(env_seed))
    total = 0.0
    lowest_y_velocity = np.inf
    touchdown = None
    done = False
    while not done:
        action = int(np.argmax(policy @ observation))
        observation, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        lowest_y_velocity = min(lowest_y_velocity, float(observation[3]))
        if touchdown is None and (observation[6] or observation[7]):
            touchdown = [float(observation[0]), float(observation[3])]
        done = terminated or truncated
    return total, touchdown or [float(observation[0]), lowest_y_velocity]


#: Pixels of a digits image, and classes.
DIGITS_INPUTS = 64
DIGITS_CLASSES = 10
#: The last DIGITS_TEST images of scikit-learn's digits are the test set.
DIGITS_TEST = 360


def digits_solution_dim(hidden: int) -> int:
    """Weights and biases of the 64-hidden-10 MLP."""
    return DIGITS_INPUTS * hidden + hidden + hidden * DIGITS_CLASSES + DIGITS_CLASSES


@functools.cache
def _digits_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    images = data.data / 16.0
    split = len(images) - DIGITS_TEST
    return images[:split], data.target[:split], images[split:], data.target[split:]


def _mlp_logits(weights: np.ndarray, images: np.ndarray, hidden: int) -> np.ndarray:
    first = DIGITS_INPUTS * hidden
    w1 = weights[:first].reshape(DIGITS_INPUTS, hidden)
    b1 = weights[first : first + hidden]
    rest = weights[first + hidden :]
    w2 = rest[: hidden * DIGITS_CLASSES].reshape(hidden, DIGITS_CLASSES)
    b2 = rest[hidden * DIGITS_CLASSES :]
    return np.tanh(images @ w1 + b1) @ w2 + b2


def _cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_norm - shifted[np.arange(len(labels)), labels]))


def digits(
    solutions: np.ndarray, seeds: np.ndarray, *, hidden: int = 32, minibatch: int = 256
) -> dict[str, np.ndarray]:
    """An MLP (64-hidden-10, tanh) classifying scikit-learn's bundled digits.

    Objective: minus the cross-entropy on ``minibatch`` training images drawn (without
    replacement) from the evaluation seed. Extra field ``test_accuracy``: accuracy on
    the last 360 images, which are never trained on. No measures.
    """
    train_x, train_y, test_x, test_y = _digits_data()
    objective = np.empty(len(solutions))
    accuracy = np.empty(len(solutions))
    for row, (weights, seed) in enumerate(zip(solutions, seeds, strict=True)):
        chosen = np.random.default_rng(int(seed)).choice(len(train_x), minibatch, replace=False)
        objective[row] = -_cross_entropy(
            _mlp_logits(weights, train_x[chosen], hidden), train_y[chosen]
        )
        predicted = _mlp_logits(weights, test_x, hidden).argmax(axis=1)
        accuracy[row] = np.mean(predicted == test_y)
    return {
        "objective": objective,
        "measures": np.empty((len(solutions), 0)),
        "test_accuracy": accuracy,
    }


#: Ackley's constants and search box (Ackley 1987, as in the BO literature).
ACKLEY_A, ACKLEY_B, ACKLEY_C = 20.0, 0.2, 2 * np.pi
ACKLEY_BOUND = 32.768


def ackley_value(solutions: np.ndarray) -> np.ndarray:
    """The Ackley function (minimum 0 at the origin)."""
    dim = solutions.shape[1]
    root_mean_square = np.sqrt(np.sum(solutions**2, axis=1) / dim)
    mean_cosine = np.sum(np.cos(ACKLEY_C * solutions), axis=1) / dim
    return -ACKLEY_A * np.exp(-ACKLEY_B * root_mean_square) - np.exp(mean_cosine) + ACKLEY_A + np.e


def ackley(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """Ackley as a maximisation: objective = minus the Ackley value; extra field
    ``ackley`` (the value itself, to report as a minimum). No measures."""
    value = ackley_value(solutions)
    return {"objective": -value, "measures": np.empty((len(solutions), 0)), "ackley": value}


def plain_sphere(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """The sphere function sum(x^2) (minimum 0 at the origin), maximised as its negative;
    extra field ``sphere`` (the value itself). No measures, no shift or projection."""
    value = np.sum(solutions**2, axis=1)
    return {"objective": -value, "measures": np.empty((len(solutions), 0)), "sphere": value}


def plain_rastrigin(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """The Rastrigin function (minimum 0 at the origin), maximised as its negative;
    extra field ``rastrigin`` (the value itself). No measures, no shift or projection."""
    value = _rastrigin_raw(solutions)
    return {"objective": -value, "measures": np.empty((len(solutions), 0)), "rastrigin": value}


BUILTIN_DOMAINS: dict[str, Evaluator] = {
    "sphere": sphere,
    "rastrigin": rastrigin,
    "arm": arm,
    "lunar_lander": lunar_lander,
    "digits": digits,
    "ackley": ackley,
    "plain_sphere": plain_sphere,
    "plain_rastrigin": plain_rastrigin,
}
#: Minimisation benchmarks (maximised as their negative): the extra field holding the
#: value to report as a minimum.
MINIMISED_VALUE = {"ackley": "ackley", "plain_sphere": "sphere", "plain_rastrigin": "rastrigin"}


def minimised_value(domain_spec: dict) -> str | None:
    """The extra field holding a minimisation benchmark's value (e.g. ``ackley``), whose
    best is reported as a minimum; ``None`` for other domains."""
    return MINIMISED_VALUE.get(domain_spec["type"])


#: Objective bounds below which no solution falls: the QD score offset of a domain.
QD_SCORE_OFFSETS = {"arm": -(float(np.pi) ** 2), "lunar_lander": -600.0}
DEFAULT_SOLUTION_DIM = 20


def solution_dim_of(spec: dict) -> int:
    """Parameters of a domain's solutions (fixed by lunar_lander and digits)."""
    if spec["type"] == "lunar_lander":
        return int(np.prod(LUNAR_LANDER_SHAPE))
    if spec["type"] == "digits":
        return digits_solution_dim((spec.get("params") or {}).get("hidden", 32))
    return spec.get("solution_dim", DEFAULT_SOLUTION_DIM)


def resolved_domain(domain: dict) -> dict:
    """A domain entry with the built-in's defaults filled in (solution_dim, measure
    ranges, bounds, parameters, extra fields)."""
    import copy

    spec = copy.deepcopy(domain)
    spec["solution_dim"] = solution_dim_of(spec)
    if spec["type"] == "plugin":
        return spec
    spec.setdefault("measure_ranges", default_measure_ranges(spec))
    bounds = default_bounds(spec)
    if bounds is not None:
        spec.setdefault("bounds", bounds)
    if spec["type"] == "lunar_lander":
        spec["params"].setdefault("env_seed", LUNAR_LANDER_ENV_SEED)
    if spec["type"] in MINIMISED_VALUE and not spec.get("extra_fields"):
        spec["extra_fields"] = [MINIMISED_VALUE[spec["type"]]]
    if spec["type"] == "digits":
        spec["params"].setdefault("hidden", 32)
        spec["params"].setdefault("minibatch", 256)
        if not spec.get("extra_fields"):
            spec["extra_fields"] = ["test_accuracy"]
    return spec


def default_qd_score_offset(spec: dict) -> float:
    """QD score offset of a built-in domain: at or below its worst objective (0 for
    domains whose objective is never negative, and for plugins)."""
    return QD_SCORE_OFFSETS.get(spec["type"], 0.0)


def default_measure_ranges(spec: dict) -> list[list[float]]:
    """Measure ranges of a built-in domain: the reachable measure space."""
    kind = spec["type"]
    dim = spec["solution_dim"]
    if kind in ("sphere", "rastrigin"):
        half_span = dim / 2 * PROJECTION_BOUND
        return [[-half_span, half_span], [-half_span, half_span]]
    if kind == "arm":
        reach = float(_link_lengths(dim, spec.get("params", {}).get("link_lengths")).sum())
        return [[-reach, reach], [-reach, reach]]
    if kind == "lunar_lander":
        return [[-1.0, 1.0], [-3.0, 0.0]]
    if kind == "digits" or kind in MINIMISED_VALUE:
        return []
    raise KeyError(kind)


def default_bounds(spec: dict) -> list[float] | None:
    """Solution bounds of a built-in domain (``None``: unbounded)."""
    if spec["type"] == "arm":
        return [-float(np.pi), float(np.pi)]
    if spec["type"] == "ackley":
        return [-ACKLEY_BOUND, ACKLEY_BOUND]
    if spec["type"] in ("plain_sphere", "plain_rastrigin"):
        return [-PROJECTION_BOUND, PROJECTION_BOUND]
    return None


def load_evaluator(spec: dict) -> Evaluator:
    """Return the evaluation function of a resolved domain spec.

    Parameters
    ----------
    spec : dict
        A domain entry of the resolved run spec: ``type`` is a built-in name or
        ``plugin``; plugins give ``function`` as ``"module:function"`` and may
        give ``python_path``, a folder put in front of ``sys.path``.
    """
    if spec["type"] != "plugin":
        return BUILTIN_DOMAINS[spec["type"]]
    return import_plugin(spec["function"], spec.get("python_path"))


@functools.cache
def import_plugin(target: str, python_path: str | None):
    """Import ``module:name`` (a user's function or class) once per process (Dask
    workers evaluate many slices); ``python_path`` is put in front of ``sys.path``."""
    module_name, _, function_name = target.partition(":")
    if python_path:
        folder = str(Path(python_path).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module = importlib.import_module(module_name)
    return getattr(module, function_name)
