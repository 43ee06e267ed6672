"""QD-RL locomotion tasks on MuJoCo (gymnasium's v5 environments) as QDax defines them,
flown by MLP or linear policies whose weights are the solution (:mod:`evocamp.tasks.policies`).

A task's evaluation is one rollout of at most ``episode_length`` physics steps per
solution, ended early when the robot falls (gymnasium's ``terminated``):

- ``*_uni`` (one direction): objective the summed reward; measures the fraction of the
  rollout's steps on which each foot touches the ground (an active MuJoCo contact
  between the foot's geom and the floor).
- ``*_omni`` (any direction): objective the summed reward without its forward term;
  measures the torso's final (x, y), clipped to [-30, 30].

docs/configuration.md ("Locomotion on MuJoCo") lists every difference from QDax's
Brax tasks. The environment is built once per call (a shard's or chunk's solutions),
not once per solution; ``mujoco`` and ``gymnasium`` are imported only here, inside the
function that builds it (``pip install 'evocamp[mujoco]'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from evocamp.tasks.policies import lecun_uniform, mlp_layers, mlp_output, mlp_size

#: Default hidden layer widths of the policy (QDax's examples use (64, 64)).
DEFAULT_HIDDEN = (64, 64)
#: Default rollout length in physics steps (QDax's and gymnasium's 1,000).
DEFAULT_EPISODE_LENGTH = 1000
#: ``*_omni`` tasks clip the final torso position to [-OMNI_BOUND, OMNI_BOUND] (QDax).
OMNI_BOUND = 30.0
#: Ant without contact forces in its observation and without contact cost, as Brax's
#: ant (``use_contact_forces=False``) that QDax wraps.
_ANT_SETTINGS = {"include_cfrc_ext_in_observation": False, "contact_cost_weight": 0.0}
#: Humanoid without the external contact forces in its observation (270 values instead
#: of 348) and without contact cost, as for the ant: Brax's humanoid, which QDax wraps,
#: has no contact cost.
_HUMANOID_SETTINGS = {"include_cfrc_ext_in_observation": False, "contact_cost_weight": 0.0}
#: The humanoid's feet: the spheres at the ends of its shins (QDax counts the contacts
#: of Brax's ``left_shin`` and ``right_shin`` links, whose capsules end in the feet).
_HUMANOID_FEET = ("left_foot", "right_foot")
#: The ant's four lower legs (Brax's ``$ Body 4``, ``7``, ``10``, ``13``).
_ANT_FEET = ("left_ankle_geom", "right_ankle_geom", "third_ankle_geom", "fourth_ankle_geom")


@dataclass(frozen=True)
class LocomotionTask:
    """One QD-RL task.

    Attributes
    ----------
    environment : str
        gymnasium's environment id.
    observations, actions : int
        Sizes of the observation and the action (the policy's inputs and outputs).
    reward_offset : float
        QDax's reward offset per step: the QD score offset is minus this times the
        episode length.
    feet : tuple of str
        ``*_uni``: the geoms whose ground contact is measured, one measure each.
    omni : bool
        ``*_omni``: measures the final torso (x, y); objective without the forward term.
    settings : dict
        Keyword arguments of ``gymnasium.make`` besides the reset noise.
    """

    environment: str
    observations: int
    actions: int
    reward_offset: float
    feet: tuple[str, ...] = ()
    omni: bool = False
    settings: dict = field(default_factory=dict)

    @property
    def measure_dim(self) -> int:
        """Measures: one per foot, or (x, y)."""
        return 2 if self.omni else len(self.feet)

    def measure_ranges(self) -> list[list[float]]:
        """``[low, high]`` of every measure."""
        if self.omni:
            return [[-OMNI_BOUND, OMNI_BOUND], [-OMNI_BOUND, OMNI_BOUND]]
        return [[0.0, 1.0] for _ in self.feet]

    def layer_sizes(self, hidden: Sequence[int]) -> list[int]:
        """The policy's layer widths: observations, ``hidden``, actions."""
        return [self.observations, *hidden, self.actions]

    def solution_dim(self, params: dict) -> int:
        """Weights of the policy with the params' ``hidden`` layers."""
        return mlp_size(self.layer_sizes(params.get("hidden", DEFAULT_HIDDEN)))

    def initial_policies(self, rng: np.random.Generator, count: int, params: dict) -> np.ndarray:
        """``count`` policies as QDax initialises its populations: the MLP's weights
        LeCun-uniform, biases 0 (:func:`evocamp.tasks.policies.lecun_uniform`)."""
        return lecun_uniform(rng, self.layer_sizes(params.get("hidden", DEFAULT_HIDDEN)), count)

    def score_offset(self, params: dict) -> float:
        """QDax's QD score offset: minus the reward offset times the episode length."""
        length = params.get("episode_length", DEFAULT_EPISODE_LENGTH)
        return 0.0 - self.reward_offset * length  # 0.0, not -0.0, for the humanoid's


#: Every task by its domain type, as QDax names them (reward offsets from QDax).
TASKS = {
    "hopper_uni": LocomotionTask("Hopper-v5", 11, 3, 0.9, feet=("foot_geom",)),
    "walker2d_uni": LocomotionTask(
        "Walker2d-v5", 17, 6, 1.413, feet=("foot_geom", "foot_left_geom")
    ),
    "halfcheetah_uni": LocomotionTask("HalfCheetah-v5", 17, 6, 9.231, feet=("bfoot", "ffoot")),
    "ant_uni": LocomotionTask("Ant-v5", 27, 8, 3.24, feet=_ANT_FEET, settings=_ANT_SETTINGS),
    "ant_omni": LocomotionTask("Ant-v5", 27, 8, 3.0, omni=True, settings=_ANT_SETTINGS),
    "humanoid_uni": LocomotionTask(
        "Humanoid-v5", 270, 17, 0.0, feet=_HUMANOID_FEET, settings=_HUMANOID_SETTINGS
    ),
    "humanoid_omni": LocomotionTask(
        "Humanoid-v5", 270, 17, 0.0, omni=True, settings=_HUMANOID_SETTINGS
    ),
}


def make_environment(task: LocomotionTask, *, random_starts: bool):
    """The task's MuJoCo environment (gymnasium's, unwrapped: no time limit or checker
    wrappers). Without ``random_starts`` the reset noise is 0: every episode starts from
    the model's initial pose, so a rollout depends on the policy alone."""
    import gymnasium

    settings = dict(task.settings)
    if not random_starts:
        settings["reset_noise_scale"] = 0.0
    return gymnasium.make(task.environment, **settings).unwrapped


def evaluate_task(
    task: LocomotionTask,
    solutions: np.ndarray,
    seeds: np.ndarray,
    *,
    hidden: Sequence[int],
    episode_length: int,
    random_starts: bool,
) -> dict[str, np.ndarray]:
    """One rollout per solution (its policy's flat weights) on one environment built
    for the call; each reset seeded from the solution's evaluation seed."""
    import mujoco

    env = make_environment(task, random_starts=random_starts)
    sizes = task.layer_sizes(hidden)
    floor = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    feet = {
        mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_GEOM, name): column
        for column, name in enumerate(task.feet)
    }
    objective = np.empty(len(solutions))
    measures = np.empty((len(solutions), task.measure_dim))
    steps = np.empty(len(solutions))
    try:
        for row, (weights, seed) in enumerate(zip(solutions, seeds, strict=True)):
            objective[row], measures[row], steps[row] = rollout(
                env,
                task,
                mlp_layers(weights, sizes),
                seed=int(seed),
                episode_length=episode_length,
                feet=(floor, feet),
            )
    finally:
        env.close()
    return {"objective": objective, "measures": measures, "episode_steps": steps}


def rollout(
    env,
    task: LocomotionTask,
    layers: list[tuple[np.ndarray, np.ndarray]],
    *,
    seed: int,
    episode_length: int,
    feet: tuple[int, dict[int, int]],
) -> tuple[float, np.ndarray, int]:
    """One episode: ``(objective, measures, steps taken)``; ``feet`` is the floor's geom
    id and the feet's (:func:`feet_on_floor`)."""
    observation, _ = env.reset(seed=seed)
    total = 0.0
    contacts = np.zeros(len(task.feet))
    steps = 0
    while steps < episode_length:
        action = mlp_output(layers, observation, squash_output=True)
        observation, reward, terminated, _, info = env.step(action)
        steps += 1
        total += float(reward) - (float(info["reward_forward"]) if task.omni else 0.0)
        for column in feet_on_floor(env.data, *feet) if task.feet else ():
            contacts[column] += 1.0
        if terminated:
            break
    if task.omni:
        return total, np.clip(env.data.qpos[:2], -OMNI_BOUND, OMNI_BOUND), steps
    return total, contacts / steps, steps


def feet_on_floor(data, floor: int, feet: dict[int, int]) -> set[int]:
    """The columns of the feet in an active contact (one MuJoCo applies a force at) with
    the floor; ``feet`` maps each foot's geom id to its column. A plain loop: a step has
    a handful of contacts, and numpy's per-call cost would be most of the time."""
    touching = set()
    contact = data.contact
    for (first, second), excluded in zip(
        contact.geom.tolist(), contact.exclude.tolist(), strict=True
    ):
        if excluded == 0 and floor in (first, second):
            column = feet.get(second if first == floor else first)
            if column is not None:
                touching.add(column)
    return touching


def param_problems(params: dict) -> list[tuple[str, str]]:
    """``(param, problem)`` of every locomotion parameter with a wrong value."""
    problems = []
    hidden = params.get("hidden", DEFAULT_HIDDEN)
    if not isinstance(hidden, list | tuple) or not all(
        isinstance(width, int) and not isinstance(width, bool) and width >= 1 for width in hidden
    ):
        problems.append(
            (
                "hidden",
                f"a list of layer widths (integers >= 1; [] for a linear policy), not {hidden!r}",
            )
        )
    length = params.get("episode_length", DEFAULT_EPISODE_LENGTH)
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        problems.append(("episode_length", f"an integer >= 1, not {length!r}"))
    if not isinstance(params.get("random_starts", False), bool):
        problems.append(("random_starts", f"true or false, not {params['random_starts']!r}"))
    return problems
