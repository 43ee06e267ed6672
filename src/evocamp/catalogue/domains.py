"""The built-in domains (``domains.NAME.type``), one :class:`DomainType` entry each, in
:data:`DOMAINS`: what each is (dimension rule, measure ranges, bounds, QD score offset,
minimised value, params and their rules, optional extra), its evaluation function being
task code (:mod:`evocamp.tasks`).

Adding a built-in domain is one function in :mod:`evocamp.tasks.functions` and one entry
here; ``python -m evocamp.reporting.reference docs/configuration.md`` then regenerates
the documentation's table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from evocamp.catalogue.entries import Extra
from evocamp.tasks import bbob, functions, locomotion, training

#: Solution dimension of domains that do not fix it.
DEFAULT_SOLUTION_DIM = 20


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
    objective_max : float, callable or None
        The best objective (the CQD score's ``obj_max``; ``None``: unknown, the CQD score
        needs ``cqd.obj_max``), or ``(solution_dim, params) -> best`` when the instance
        decides it (:meth:`best_objective`).
    extra : Extra or None
        The optional dependency group of evocamp the domain needs (``pip install
        'evocamp[NAME]'``): a campaign using the domain is refused, with that command,
        when one of its distributions is missing.
    param_rules : callable or None
        Checks of the ``params`` values the schema cannot express: ``params -> [(name,
        problem), ...]``.
    initial_solutions : callable or None
        ``(rng, count, params) -> (count, solution_dim)``: ``count`` solutions drawn from
        the domain's own initialisation (a policy's weights as QDax draws them), what QD
        emitters start from with ``initial_population: random``; ``None``: the domain
        has none.
    random_x0 : tuple or None
        ``(low, high)``: where the domain's ``x0: random`` draws the initial points,
        uniformly in every coordinate (``None``: the domain takes a number only).
    space : dict or None
        The domain's search space when it has named, typed parameters instead of a
        ``solution_dim`` of reals (:mod:`evocamp.model.space`: ``name -> {type, ...}``, as
        the ``space`` key writes it); its evaluation function is then called with
        configurations (dicts), and a campaign's ``space`` key replaces it.
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
    objective_max: float | Callable[[int, dict], float] | None = None
    extra: Extra | None = None
    param_rules: Callable[[dict], list[tuple[str, str]]] | None = None
    initial_solutions: Callable[[np.random.Generator, int, dict], np.ndarray] | None = None
    random_x0: tuple[float, float] | None = None
    space: dict | None = None

    def score_offset(self, params: dict) -> float:
        """The QD score offset with the domain's (resolved) ``params``."""
        if callable(self.qd_score_offset):
            return float(self.qd_score_offset(params))
        return self.qd_score_offset

    def best_objective(self, solution_dim: int, params: dict) -> float | None:
        """The best objective with the domain's (resolved) ``solution_dim`` and
        ``params`` (``None``: unknown)."""
        if callable(self.objective_max):
            return float(self.objective_max(solution_dim, {**self.params, **params}))
        return self.objective_max


def _no_measures(dim: int, params: dict) -> list:
    return []


def _projection_ranges(dim: int, params: dict) -> list:
    half_span = dim / 2 * functions.PROJECTION_BOUND
    return [[-half_span, half_span], [-half_span, half_span]]


def _arm_ranges(dim: int, params: dict) -> list:
    reach = float(functions.arm_link_lengths(dim, params.get("link_lengths")).sum())
    return [[-reach, reach], [-reach, reach]]


def _lunar_lander_ranges(dim: int, params: dict) -> list:
    return [[-1.0, 1.0], [-3.0, 0.0]]


def _lunar_lander_dim(params: dict) -> int:
    return int(np.prod(functions.LUNAR_LANDER_SHAPE))


def _digits_dim(params: dict) -> int:
    return functions.digits_solution_dim(params.get("hidden", 32))


def _bbob_best(dim: int, params: dict) -> float:
    """Minus ``f_opt`` of a BBOB instance (the best objective)."""
    return -bbob.optimum(params["function"], params["instance"], dim)


#: The locomotion domains' extra: the simulator of the pinned release (its physics
#: decides their numbers, recorded in their runs' provenance) and imageio, which
#: gymnasium's MuJoCo environments import.
MUJOCO = Extra(
    "mujoco",
    requires=(("mujoco", (4, 0, 0), (4, 0, 1)), ("imageio", (2, 14, 1), (999,))),
    numeric=("mujoco",),
)
#: The BBOB domains' extra: ioh of the pinned release (its C++ implementation of the
#: functions decides their values, recorded in their runs' provenance).
BBOB = Extra("bbob", requires=(("ioh", (0, 4, 2), (0, 4, 3)),), numeric=("ioh",))


def _locomotion(name: str, summary: str) -> DomainType:
    """The entry of the locomotion task ``name`` (:data:`evocamp.tasks.locomotion.TASKS`),
    whose evaluation function is ``evocamp.tasks.functions.<name>``."""
    task = locomotion.TASKS[name]
    return DomainType(
        name=name,
        summary=summary,
        evaluate=getattr(functions, name),
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
        extra=MUJOCO,
        param_rules=locomotion.param_problems,
        initial_solutions=task.initial_policies,
    )


def _uni(name: str, feet: str) -> str:
    environment = locomotion.TASKS[name].environment
    return (
        f"QDax's {name} on MuJoCo (gymnasium's {environment}) flown by an MLP policy: "
        f"objective = summed reward, measures = fraction of steps each foot ({feet}) "
        "touches the floor (params: hidden, episode_length, random_starts)"
    )


def _omni(name: str) -> str:
    environment = locomotion.TASKS[name].environment
    return (
        f"QDax's {name} on MuJoCo (gymnasium's {environment}) flown by an MLP policy: "
        "objective = summed reward without its forward term, measures = final torso x, y "
        "clipped to [-30, 30] (params: hidden, episode_length, random_starts)"
    )


#: Every built-in domain by its ``type``, in the order the documentation lists them.
DOMAINS: dict[str, DomainType] = {
    entry.name: entry
    for entry in (
        DomainType(
            name="sphere",
            summary=(
                "CMA-ME paper: shifted sphere (0.4 x 5.12), objective normalised to [0, 100], "
                "measures = sums of the clipped halves, ranges +-(n/2) x 5.12"
            ),
            evaluate=functions.sphere,
            measure_ranges=_projection_ranges,
            measure_dim=2,
            objective_max=100.0,
        ),
        DomainType(
            name="rastrigin",
            summary="CMA-ME paper: shifted Rastrigin, otherwise as sphere",
            evaluate=functions.rastrigin,
            measure_ranges=_projection_ranges,
            measure_dim=2,
            objective_max=100.0,
        ),
        DomainType(
            name="arm",
            summary=(
                "planar robotic arm: objective -Var(theta), measures = end-effector x, y "
                "(params: link_lengths)"
            ),
            evaluate=functions.arm,
            measure_ranges=_arm_ranges,
            measure_dim=2,
            bounds=[-math.pi, math.pi],
            qd_score_offset=-(math.pi**2),
            objective_max=0.0,
        ),
        DomainType(
            name="lunar_lander",
            summary=(
                "gymnasium's LunarLander-v3 flown by a linear policy (pyribs' tutorial); "
                "measures = x position and y velocity at touchdown (params: env_seed)"
            ),
            evaluate=functions.lunar_lander,
            fixed_dim=_lunar_lander_dim,
            measure_ranges=_lunar_lander_ranges,
            measure_dim=2,
            qd_score_offset=-600.0,
            objective_max=300.0,
            params={"env_seed": functions.LUNAR_LANDER_ENV_SEED},
        ),
        DomainType(
            name="lunar_lander_noisy",
            summary=(
                "as lunar_lander, but each episode starts from the evaluation's seed (its "
                "terrain and initial push vary): returns are noisy, for evaluation.repeats "
                "and reevaluate"
            ),
            evaluate=functions.lunar_lander_noisy,
            fixed_dim=_lunar_lander_dim,
            measure_ranges=_lunar_lander_ranges,
            measure_dim=2,
            qd_score_offset=-600.0,
            objective_max=300.0,
        ),
        DomainType(
            name="digits",
            summary=(
                "an MLP (64-hidden-10) classifying scikit-learn's digits; objective = minus the "
                "cross-entropy of a seeded minibatch (params: hidden, minibatch)"
            ),
            evaluate=functions.digits,
            fixed_dim=_digits_dim,
            measure_ranges=_no_measures,
            measure_dim=0,
            params={"hidden": 32, "minibatch": 256},
            extra_fields=("test_accuracy",),
        ),
        DomainType(
            name="mlp_digits",
            summary=(
                "hyperparameter tuning: scikit-learn's MLPClassifier trained on its bundled "
                "digits, one configuration of an 8-parameter space per evaluation (learning "
                "rate, L2, width, depth, activation, solver, momentum for sgd, batch size); "
                "objective = accuracy on a validation split drawn from the evaluation seed "
                "(params: epochs, validation_fraction)"
            ),
            evaluate=training.mlp_digits,
            measure_ranges=_no_measures,
            measure_dim=0,
            params={
                "epochs": training.MLP_DIGITS_EPOCHS,
                "validation_fraction": training.VALIDATION_FRACTION,
            },
            extra_fields=("validation_loss", "test_accuracy"),
            objective_max=1.0,
            space=training.MLP_DIGITS_SPACE,
        ),
        DomainType(
            name="ackley",
            summary="Ackley (a = 20, b = 0.2, c = 2 pi), maximised as its negative",
            evaluate=functions.ackley,
            measure_ranges=_no_measures,
            measure_dim=0,
            bounds=[-functions.ACKLEY_BOUND, functions.ACKLEY_BOUND],
            minimised="ackley",
            extra_fields=("ackley",),
        ),
        DomainType(
            name="plain_sphere",
            summary="the unshifted sphere function, maximised as its negative",
            evaluate=functions.plain_sphere,
            measure_ranges=_no_measures,
            measure_dim=0,
            bounds=[-functions.PROJECTION_BOUND, functions.PROJECTION_BOUND],
            minimised="sphere",
            extra_fields=("sphere",),
        ),
        DomainType(
            name="plain_rastrigin",
            summary="the unshifted Rastrigin function, maximised as its negative",
            evaluate=functions.plain_rastrigin,
            measure_ranges=_no_measures,
            measure_dim=0,
            bounds=[-functions.PROJECTION_BOUND, functions.PROJECTION_BOUND],
            minimised="rastrigin",
            extra_fields=("rastrigin",),
        ),
        DomainType(
            name="bbob",
            summary=(
                "a noiseless BBOB function (COCO's suite, through ioh), maximised as minus f; "
                "extra field precision = f - f_opt (the minimised value); bounds [-5, 5] "
                "(params: function 1-24, instance; keys functions, dimensions, instances: "
                "a suite grid, one domain each; x0: random draws in [-4, 4]^d, "
                "bounded: false)"
            ),
            evaluate=bbob.bbob,
            measure_ranges=_no_measures,
            measure_dim=0,
            bounds=[-bbob.BOUND, bbob.BOUND],
            minimised="precision",
            params={"function": 1, "instance": 1},
            extra_fields=("precision",),
            objective_max=_bbob_best,
            extra=BBOB,
            param_rules=bbob.param_problems,
            random_x0=(-bbob.START, bbob.START),
        ),
        _locomotion("hopper_uni", _uni("hopper_uni", "foot_geom")),
        _locomotion("walker2d_uni", _uni("walker2d_uni", "foot_geom, foot_left_geom")),
        _locomotion("halfcheetah_uni", _uni("halfcheetah_uni", "bfoot, ffoot")),
        _locomotion("ant_uni", _uni("ant_uni", "the four *_ankle_geom")),
        _locomotion("ant_omni", _omni("ant_omni")),
        _locomotion("humanoid_uni", _uni("humanoid_uni", "left_foot, right_foot")),
        _locomotion("humanoid_omni", _omni("humanoid_omni")),
    )
}


def minimised_value(domain_spec: dict) -> str | None:
    """The extra field holding a minimisation benchmark's value (e.g. ``ackley``), whose
    best is reported as a minimum; ``None`` for other domains."""
    entry = DOMAINS.get(domain_spec["type"])
    return entry.minimised if entry else None


def objective_max(domain_spec: dict) -> float | None:
    """A built-in domain's best objective (the CQD score's default ``obj_max``); ``None``
    when unknown and for plugins."""
    entry = DOMAINS.get(domain_spec["type"])
    if entry is None:
        return None
    return entry.best_objective(domain_spec["solution_dim"], domain_spec.get("params") or {})
