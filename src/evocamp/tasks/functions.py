"""The built-in domains' evaluation functions (their catalogue entries:
:data:`evocamp.catalogue.domains.DOMAINS`).

Every one has the signature of a user plugin::

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
from collections.abc import Callable, Sequence

import numpy as np

from evocamp.tasks import locomotion
from evocamp.tasks.policies import mlp_layers, mlp_output, mlp_size

#: Bound of the search space in the CMA-ME paper's linear-projection domains.
PROJECTION_BOUND = 5.12
#: Optimum shift of the sphere and Rastrigin functions (``0.4 * 5.12``).
PROJECTION_SHIFT = 0.4 * PROJECTION_BOUND


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
    lengths = arm_link_lengths(solutions.shape[1], link_lengths)
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


def arm_link_lengths(joints: int, lengths: list[float] | None) -> np.ndarray:
    """The arm's link lengths: those given, else 1 per joint."""
    if lengths is None:
        return np.ones(joints)
    return np.asarray(lengths, dtype=np.float64)


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
    return _lunar_lander_episodes(solutions, [env_seed] * len(solutions))


def lunar_lander_noisy(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`lunar_lander` with a random start: the episode of ``solutions[i]`` starts
    from ``env.reset(seed=seeds[i])`` (gymnasium draws the terrain, the initial push
    and the engines' dispersion from it), so a policy's return depends on its
    evaluation seed, as with any noisy simulator."""
    return _lunar_lander_episodes(solutions, [int(seed) for seed in seeds])


def _lunar_lander_episodes(solutions: np.ndarray, env_seeds: list[int]) -> dict[str, np.ndarray]:
    """One episode per policy, each from ``env.reset(seed=env_seeds[i])``."""
    import gymnasium

    env = gymnasium.make("LunarLander-v3")
    objective = np.empty(len(solutions))
    measures = np.empty((len(solutions), 2))
    try:
        for row, (weights, env_seed) in enumerate(zip(solutions, env_seeds, strict=True)):
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
    return mlp_size(_digits_sizes(hidden))


def _digits_sizes(hidden: int) -> list[int]:
    return [DIGITS_INPUTS, hidden, DIGITS_CLASSES]


@functools.cache
def digits_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits scaled to [0, 1]: training images and labels, then
    the fixed test set (the last :data:`DIGITS_TEST`), read once per process."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = data.data / 16.0
    split = len(images) - DIGITS_TEST
    return images[:split], data.target[:split], images[split:], data.target[split:]


def _mlp_logits(weights: np.ndarray, images: np.ndarray, hidden: int) -> np.ndarray:
    layers = mlp_layers(weights, _digits_sizes(hidden))
    return mlp_output(layers, images, squash_output=False)


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
    train_x, train_y, test_x, test_y = digits_data()
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


def _locomotion_function(name: str) -> Callable:
    """The evaluation function of the locomotion task ``name``
    (:data:`evocamp.tasks.locomotion.TASKS`)."""
    task = locomotion.TASKS[name]

    def evaluate(
        solutions: np.ndarray,
        seeds: np.ndarray,
        *,
        hidden: Sequence[int] = locomotion.DEFAULT_HIDDEN,
        episode_length: int = locomotion.DEFAULT_EPISODE_LENGTH,
        random_starts: bool = False,
    ) -> dict[str, np.ndarray]:
        return locomotion.evaluate_task(
            task,
            solutions,
            seeds,
            hidden=hidden,
            episode_length=episode_length,
            random_starts=random_starts,
        )

    evaluate.__name__ = evaluate.__qualname__ = name
    evaluate.__doc__ = f"QDax's {name} on MuJoCo (:mod:`evocamp.tasks.locomotion`)."
    return evaluate


hopper_uni = _locomotion_function("hopper_uni")
walker2d_uni = _locomotion_function("walker2d_uni")
halfcheetah_uni = _locomotion_function("halfcheetah_uni")
ant_uni = _locomotion_function("ant_uni")
ant_omni = _locomotion_function("ant_omni")
humanoid_uni = _locomotion_function("humanoid_uni")
humanoid_omni = _locomotion_function("humanoid_omni")
