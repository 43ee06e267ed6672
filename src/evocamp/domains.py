"""Built-in evaluation domains: each function declares, beside it, its catalogue entry
(:class:`DomainType`: solution dimension, measure ranges, bounds, QD score offset,
parameters), collected in :data:`DOMAINS`.

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
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from evocamp import locomotion
from evocamp.model.runspec import PLUGIN
from evocamp.policies import mlp_layers, mlp_output, mlp_size

#: Solution dimension of domains that do not fix it.
DEFAULT_SOLUTION_DIM = 20
#: The domain type of users' own evaluation functions.
PLUGIN_DOMAIN = PLUGIN


@dataclass(frozen=True)
class DomainType:
    """One built-in domain.

    Attributes
    ----------
    name : str
        The ``type`` value.
    summary : str
        One line for the documentation.
    evaluate : callable
        The evaluation function ``(solutions, seeds, **params) -> dict``.
    fixed_dim : callable or None
        The solution dimension fixed by the task, from the params (``None``: the
        ``solution_dim`` key decides, default :data:`DEFAULT_SOLUTION_DIM`).
    measure_ranges : callable
        ``(solution_dim, params) -> [[low, high], ...]`` (``[]``: no measures).
    measure_dim : int
        Number of measures.
    bounds : list or None
        ``[low, high]`` of every parameter (``None``: unbounded).
    qd_score_offset : float or callable
        At or below the worst objective (the QD score's offset), or ``params -> offset``
        when the params decide it (:meth:`score_offset`).
    minimised : str or None
        Minimisation benchmarks: the extra field holding the value to report as a
        minimum (the objective is its negative).
    params : dict
        Defaults of the evaluation function's keyword arguments.
    extra_fields : tuple of str
        Extra outputs stored with every elite by default.
    objective_max : float or None
        The best objective (the CQD score's ``obj_max``; ``None``: unknown, the CQD score
        needs ``cqd.obj_max``).
    extra : str or None
        The optional dependency group of evocamp the domain needs (``pip install
        'evocamp[EXTRA]'``; :data:`evocamp.catalogue.factory.EXTRAS` names its
        distributions): a campaign using the domain is refused, with that command, when
        one is missing.
    param_rules : callable or None
        Checks of the ``params`` values the schema cannot express: ``params -> [(name,
        problem), ...]``.
    initial_solutions : callable or None
        ``(rng, count, params) -> (count, solution_dim)``: ``count`` solutions drawn from
        the domain's own initialisation (a policy's weights as QDax draws them), what QD
        emitters start from with ``initial_population: random``; ``None``: the domain
        has none.
    """

    name: str
    summary: str
    evaluate: Callable
    measure_ranges: Callable[[int, dict], list]
    measure_dim: int
    fixed_dim: Callable[[dict], int] | None = None
    bounds: list | None = None
    qd_score_offset: float | Callable[[dict], float] = 0.0
    minimised: str | None = None
    params: dict = field(default_factory=dict)
    extra_fields: tuple[str, ...] = ()
    objective_max: float | None = None
    extra: str | None = None
    param_rules: Callable[[dict], list[tuple[str, str]]] | None = None
    initial_solutions: Callable[[np.random.Generator, int, dict], np.ndarray] | None = None

    def score_offset(self, params: dict) -> float:
        """The QD score offset with the domain's (resolved) ``params``."""
        if callable(self.qd_score_offset):
            return float(self.qd_score_offset(params))
        return self.qd_score_offset


#: Every built-in domain by its ``type``, in the order the documentation lists them
#: (filled by :func:`built_in` as the functions below are defined).
DOMAINS: dict[str, DomainType] = {}


def built_in(name: str, summary: str, **metadata) -> Callable[[Callable], Callable]:
    """Declare the function it decorates as the built-in domain ``name``.

    Parameters
    ----------
    name : str
        The domain's ``type``.
    summary : str
        One line for the documentation.
    **metadata
        The other fields of :class:`DomainType` (``measure_ranges``,
        ``measure_dim``, ``bounds``, ...); ``evaluate`` is the function.

    Returns
    -------
    callable
        A decorator that adds the entry to :data:`DOMAINS` and returns the function.
    """

    def declare(function: Callable) -> Callable:
        DOMAINS[name] = DomainType(name=name, summary=summary, evaluate=function, **metadata)
        return function

    return declare


def minimised_value(domain_spec: dict) -> str | None:
    """The extra field holding a minimisation benchmark's value (e.g. ``ackley``), whose
    best is reported as a minimum; ``None`` for other domains."""
    entry = DOMAINS.get(domain_spec["type"])
    return entry.minimised if entry else None


def domain_group(domain_spec: dict) -> str | None:
    """The optional dependency group a built-in domain needs (e.g. ``mujoco``), whose
    numeric packages its runs record (:func:`evocamp.model.numerics.environment`);
    ``None`` for the others and for plugins."""
    entry = DOMAINS.get(domain_spec["type"])
    return entry.extra if entry else None


def _no_measures(dim: int, params: dict) -> list:
    return []


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


def _projection_ranges(dim: int, params: dict) -> list:
    half_span = dim / 2 * PROJECTION_BOUND
    return [[-half_span, half_span], [-half_span, half_span]]


def _normalise(raw: np.ndarray, worst: float) -> np.ndarray:
    """Map a raw minimisation value onto [0, 100], 100 being the optimum (0)."""
    return (raw - worst) / (0.0 - worst) * 100.0


@built_in(
    "sphere",
    "CMA-ME paper: shifted sphere (0.4 x 5.12), objective normalised to [0, 100], "
    "measures = sums of the clipped halves, ranges +-(n/2) x 5.12",
    measure_ranges=_projection_ranges,
    measure_dim=2,
    objective_max=100.0,
)
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


@built_in(
    "rastrigin",
    "CMA-ME paper: shifted Rastrigin, otherwise as sphere",
    measure_ranges=_projection_ranges,
    measure_dim=2,
    objective_max=100.0,
)
def rastrigin(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """Shifted Rastrigin with linear-projection measures, normalised to [0, 100]."""
    dim = solutions.shape[1]
    worst = float(_rastrigin_raw(np.full(dim, -PROJECTION_BOUND - PROJECTION_SHIFT)))
    raw = _rastrigin_raw(solutions - PROJECTION_SHIFT)
    return {
        "objective": _normalise(raw, worst),
        "measures": _projection_measures(solutions),
    }


def _arm_ranges(dim: int, params: dict) -> list:
    reach = float(arm_link_lengths(dim, params.get("link_lengths")).sum())
    return [[-reach, reach], [-reach, reach]]


@built_in(
    "arm",
    "planar robotic arm: objective -Var(theta), measures = end-effector x, y "
    "(params: link_lengths)",
    measure_ranges=_arm_ranges,
    measure_dim=2,
    bounds=[-math.pi, math.pi],
    qd_score_offset=-(math.pi**2),
    objective_max=0.0,
)
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


def _lunar_lander_ranges(dim: int, params: dict) -> list:
    return [[-1.0, 1.0], [-3.0, 0.0]]


def _lunar_lander_dim(params: dict) -> int:
    return int(np.prod(LUNAR_LANDER_SHAPE))


@built_in(
    "lunar_lander",
    "gymnasium's LunarLander-v3 flown by a linear policy (pyribs' tutorial); measures = "
    "x position and y velocity at touchdown (params: env_seed)",
    fixed_dim=_lunar_lander_dim,
    measure_ranges=_lunar_lander_ranges,
    measure_dim=2,
    qd_score_offset=-600.0,
    objective_max=300.0,
    params={"env_seed": LUNAR_LANDER_ENV_SEED},
)
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


@built_in(
    "lunar_lander_noisy",
    "as lunar_lander, but each episode starts from the evaluation's seed (its terrain and "
    "initial push vary): returns are noisy, for evaluation.repeats and reevaluate",
    fixed_dim=_lunar_lander_dim,
    measure_ranges=_lunar_lander_ranges,
    measure_dim=2,
    qd_score_offset=-600.0,
    objective_max=300.0,
)
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
def _digits_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


def _digits_dim(params: dict) -> int:
    return digits_solution_dim(params.get("hidden", 32))


@built_in(
    "digits",
    "an MLP (64-hidden-10) classifying scikit-learn's digits; objective = minus the "
    "cross-entropy of a seeded minibatch (params: hidden, minibatch)",
    fixed_dim=_digits_dim,
    measure_ranges=_no_measures,
    measure_dim=0,
    params={"hidden": 32, "minibatch": 256},
    extra_fields=("test_accuracy",),
)
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


@built_in(
    "ackley",
    "Ackley (a = 20, b = 0.2, c = 2 pi), maximised as its negative",
    measure_ranges=_no_measures,
    measure_dim=0,
    bounds=[-ACKLEY_BOUND, ACKLEY_BOUND],
    minimised="ackley",
    extra_fields=("ackley",),
)
def ackley(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """Ackley as a maximisation: objective = minus the Ackley value; extra field
    ``ackley`` (the value itself, to report as a minimum). No measures."""
    value = ackley_value(solutions)
    return {"objective": -value, "measures": np.empty((len(solutions), 0)), "ackley": value}


@built_in(
    "plain_sphere",
    "the unshifted sphere function, maximised as its negative",
    measure_ranges=_no_measures,
    measure_dim=0,
    bounds=[-PROJECTION_BOUND, PROJECTION_BOUND],
    minimised="sphere",
    extra_fields=("sphere",),
)
def plain_sphere(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """The sphere function sum(x^2) (minimum 0 at the origin), maximised as its negative;
    extra field ``sphere`` (the value itself). No measures, no shift or projection."""
    value = np.sum(solutions**2, axis=1)
    return {"objective": -value, "measures": np.empty((len(solutions), 0)), "sphere": value}


@built_in(
    "plain_rastrigin",
    "the unshifted Rastrigin function, maximised as its negative",
    measure_ranges=_no_measures,
    measure_dim=0,
    bounds=[-PROJECTION_BOUND, PROJECTION_BOUND],
    minimised="rastrigin",
    extra_fields=("rastrigin",),
)
def plain_rastrigin(solutions: np.ndarray, seeds: np.ndarray) -> dict[str, np.ndarray]:
    """The Rastrigin function (minimum 0 at the origin), maximised as its negative;
    extra field ``rastrigin`` (the value itself). No measures, no shift or projection."""
    value = _rastrigin_raw(solutions)
    return {"objective": -value, "measures": np.empty((len(solutions), 0)), "rastrigin": value}


def _locomotion_domain(name: str, summary: str) -> Callable:
    """Declare the locomotion task ``name`` (:data:`evocamp.locomotion.TASKS`) as a
    built-in domain; returns its evaluation function."""
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
    evaluate.__doc__ = f"{summary} (:mod:`evocamp.locomotion`)."
    return built_in(
        name,
        summary,
        fixed_dim=task.solution_dim,
        measure_ranges=lambda dim, params: task.measure_ranges(),
        measure_dim=task.measure_dim,
        qd_score_offset=task.score_offset,
        params={
            "hidden": list(locomotion.DEFAULT_HIDDEN),
            "episode_length": locomotion.DEFAULT_EPISODE_LENGTH,
            "random_starts": False,
        },
        extra_fields=("episode_steps",),
        extra="mujoco",
        param_rules=locomotion.param_problems,
        initial_solutions=task.initial_policies,
    )(evaluate)


def _uni(name: str, feet: str) -> str:
    environment = locomotion.TASKS[name].environment
    return (
        f"QDax's {name} on MuJoCo (gymnasium's {environment}) flown by an MLP policy: "
        f"objective = summed reward, measures = fraction of steps each foot ({feet}) "
        "touches the floor (params: hidden, episode_length, random_starts)"
    )


hopper_uni = _locomotion_domain("hopper_uni", _uni("hopper_uni", "foot_geom"))
walker2d_uni = _locomotion_domain("walker2d_uni", _uni("walker2d_uni", "foot_geom, foot_left_geom"))
halfcheetah_uni = _locomotion_domain("halfcheetah_uni", _uni("halfcheetah_uni", "bfoot, ffoot"))
ant_uni = _locomotion_domain("ant_uni", _uni("ant_uni", "the four *_ankle_geom"))


def _omni(name: str) -> str:
    environment = locomotion.TASKS[name].environment
    return (
        f"QDax's {name} on MuJoCo (gymnasium's {environment}) flown by an MLP policy: "
        "objective = summed reward without its forward term, measures = final torso x, y "
        "clipped to [-30, 30] (params: hidden, episode_length, random_starts)"
    )


ant_omni = _locomotion_domain("ant_omni", _omni("ant_omni"))
humanoid_uni = _locomotion_domain("humanoid_uni", _uni("humanoid_uni", "left_foot, right_foot"))
humanoid_omni = _locomotion_domain("humanoid_omni", _omni("humanoid_omni"))
