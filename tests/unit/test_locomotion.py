"""The QD-RL locomotion domains (QDax's tasks on gymnasium's MuJoCo environments) against
rollouts written out here with gymnasium's public API, their entries, and their errors.
Rollouts are 50 steps, to keep the suite fast."""

from __future__ import annotations

import re
import sys

import gymnasium
import mujoco
import numpy as np
import pytest
import yaml
from conftest import REPO, error_of, merged, shard_results

from evocamp.catalogue.domains import DOMAINS
from evocamp.config import load_config_file, resolved_domain, run_spec, validate_config
from evocamp.loop.engine import initialise
from evocamp.tasks.functions import ant_omni, humanoid_omni, humanoid_uni, walker2d_uni
from evocamp.tasks.policies import mlp_size

STEPS = 50


def policy(weights: np.ndarray, sizes: list[int]):
    """The MLP written out: tanh after every layer, (inputs, outputs) matrices then
    biases."""
    layers, start = [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        matrix = weights[start : start + n_in * n_out].reshape(n_in, n_out)
        start += n_in * n_out
        layers.append((matrix, weights[start : start + n_out]))
        start += n_out
    assert start == len(weights)

    def act(observation):
        for matrix, biases in layers:
            observation = np.tanh(observation @ matrix + biases)
        return observation

    return act


def floor_contacts(env, names: list[str]) -> np.ndarray:
    """Which of the named geoms touch the floor now (by name, contact by contact)."""
    touching = np.zeros(len(names))
    for index in range(env.unwrapped.data.ncon):
        contact = env.unwrapped.data.contact[index]
        pair = {
            mujoco.mj_id2name(env.unwrapped.model, mujoco.mjtObj.mjOBJ_GEOM, g)
            for g in contact.geom
        }
        if "floor" in pair and contact.exclude == 0:
            for column, name in enumerate(names):
                touching[column] = max(touching[column], float(name in pair))
    return touching


def weights_for(name: str, params: dict, count: int, *, seed: int = 0) -> np.ndarray:
    dim = resolved_domain({"type": name, "params": params})["solution_dim"]
    return np.random.default_rng(seed).normal(scale=0.3, size=(count, dim))


def test_walker2d_uni_is_the_summed_reward_and_the_feet_contact_fractions():
    """A rollout written out with gymnasium (time limit, reset noise 0, contacts read by
    name) gives the domain's objective and measures exactly; an episode ended by a fall
    divides by its own length."""
    params = {"hidden": [8], "episode_length": STEPS}
    solutions = weights_for("walker2d_uni", params, 3)
    out = walker2d_uni(solutions, np.arange(3, dtype=np.uint64), **params)
    env = gymnasium.make("Walker2d-v5", max_episode_steps=STEPS, reset_noise_scale=0.0)
    act = policy(solutions[0], [17, 8, 6])
    observation, _ = env.reset(seed=0)
    total, contacts, steps, done = 0.0, np.zeros(2), 0, False
    while not done:
        observation, reward, terminated, truncated, _ = env.step(act(observation))
        total += reward
        contacts += floor_contacts(env, ["foot_geom", "foot_left_geom"])
        steps += 1
        done = terminated or truncated
    assert out["objective"][0] == total
    assert out["measures"][0].tolist() == (contacts / steps).tolist()
    assert out["episode_steps"][0] == steps
    assert np.all((out["measures"] >= 0) & (out["measures"] <= 1))
    assert out["measures"].max() > 0, "some foot touches the ground"


def test_ant_omni_drops_the_forward_reward_and_measures_the_final_torso_position():
    params = {"hidden": [], "episode_length": STEPS}  # a linear policy: 27 x 8 + 8
    solutions = weights_for("ant_omni", params, 2, seed=1)
    assert solutions.shape[1] == 27 * 8 + 8
    out = ant_omni(solutions, np.zeros(2, dtype=np.uint64), **params)
    env = gymnasium.make(
        "Ant-v5",
        max_episode_steps=STEPS,
        reset_noise_scale=0.0,
        include_cfrc_ext_in_observation=False,
        contact_cost_weight=0.0,
    )
    act = policy(solutions[1], [27, 8])
    observation, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        observation, reward, terminated, truncated, info = env.step(act(observation))
        assert info["reward_contact"] == 0.0
        total += reward - info["reward_forward"]
        done = terminated or truncated
    assert out["objective"][1] == total
    final = np.clip(env.unwrapped.data.qpos[:2], -30, 30)
    assert out["measures"][1].tolist() == final.tolist()


def humanoid_rollout(weights: np.ndarray) -> tuple[float, float, np.ndarray, int, np.ndarray]:
    """A linear policy's humanoid episode written out with gymnasium: summed reward, the
    same without its forward term, feet contacts, steps, final torso (x, y)."""
    env = gymnasium.make(
        "Humanoid-v5",
        max_episode_steps=STEPS,
        reset_noise_scale=0.0,
        include_cfrc_ext_in_observation=False,
        contact_cost_weight=0.0,
    )
    act = policy(weights, [270, 17])
    observation, _ = env.reset(seed=0)
    total, sideways, contacts, steps, done = 0.0, 0.0, np.zeros(2), 0, False
    while not done:
        observation, reward, terminated, truncated, info = env.step(act(observation))
        assert info["reward_contact"] == 0.0
        total += reward
        sideways += reward - info["reward_forward"]
        contacts += floor_contacts(env, ["left_foot", "right_foot"])
        steps += 1
        done = terminated or truncated
    return total, sideways, contacts, steps, env.unwrapped.data.qpos[:2].copy()


def test_humanoid_uni_and_omni_are_qdax_s_measures_on_gymnasium_s_humanoid():
    """Both humanoid tasks against one rollout written out with gymnasium (linear
    policies, 50 steps at most): the summed reward and the feet's floor contacts; the
    reward without its forward term and the final torso position."""
    params = {"hidden": [], "episode_length": STEPS}
    solutions = weights_for("humanoid_uni", params, 2, seed=3) * 0.2
    assert solutions.shape[1] == 270 * 17 + 17
    uni = humanoid_uni(solutions, np.zeros(2, dtype=np.uint64), **params)
    omni = humanoid_omni(solutions, np.zeros(2, dtype=np.uint64), **params)
    total, sideways, contacts, steps, final = humanoid_rollout(solutions[1])
    assert uni["objective"][1] == total and omni["objective"][1] == sideways
    assert uni["measures"][1].tolist() == (contacts / steps).tolist()
    assert uni["measures"].max() > 0, "some foot touches the ground"
    assert omni["measures"][1].tolist() == np.clip(final, -30, 30).tolist()
    assert uni["episode_steps"].tolist() == omni["episode_steps"].tolist()
    assert uni["episode_steps"][1] == steps


def test_rollouts_depend_on_the_policy_alone_unless_random_starts():
    """Deterministic starts: the seeds and the other solutions of the call change no bit
    (one environment serves the whole call); random starts follow the evaluation seed."""
    params = {"hidden": [4], "episode_length": STEPS}
    solutions = weights_for("walker2d_uni", params, 3, seed=2)
    seeds = np.array([5, 6, 7], dtype=np.uint64)
    together = walker2d_uni(solutions, seeds, **params)
    alone = walker2d_uni(solutions[2:], np.array([99], dtype=np.uint64), **params)
    for field in ("objective", "measures", "episode_steps"):
        assert together[field][2:].tobytes() == alone[field].tobytes()
    noisy = {**params, "random_starts": True}
    first = walker2d_uni(solutions[:1], seeds[:1], **noisy)
    again = walker2d_uni(solutions[:1], seeds[:1], **noisy)
    other = walker2d_uni(solutions[:1], seeds[1:2], **noisy)
    assert first["objective"].tobytes() == again["objective"].tobytes()
    assert first["objective"][0] != other["objective"][0]
    assert first["objective"][0] != together["objective"][0]


@pytest.mark.parametrize(
    ("name", "measures", "offset_per_step", "observations", "actions"),
    [
        ("hopper_uni", 1, 0.9, 11, 3),
        ("walker2d_uni", 2, 1.413, 17, 6),
        ("halfcheetah_uni", 2, 9.231, 17, 6),
        ("ant_uni", 4, 3.24, 27, 8),
        ("ant_omni", 2, 3.0, 27, 8),
        ("humanoid_uni", 2, 0.0, 270, 17),
        ("humanoid_omni", 2, 0.0, 270, 17),
    ],
)
def test_entries_follow_qdax(name, measures, offset_per_step, observations, actions):
    """Dimension (64-64 MLP by default), measure ranges, QDax's QD score offset per step
    times the episode length, and one real 5-step rollout of each task."""
    entry = DOMAINS[name]
    spec = resolved_domain({"type": name})
    assert spec["solution_dim"] == mlp_size([observations, 64, 64, actions])
    expected = [[-30.0, 30.0]] * 2 if name.endswith("omni") else [[0.0, 1.0]] * measures
    assert spec["measure_ranges"] == expected
    assert entry.score_offset(spec["params"]) == -offset_per_step * 1000
    config = validate_config(
        {
            "shards": 1,
            "algorithms": {"me": {"type": "map_elites", "batch_size": 2}},
            "domains": {"d": {"type": name, "params": {"episode_length": 5, "hidden": [2]}}},
        }
    )
    spec = run_spec(config, algorithm="me", domain="d", seed=0)
    offset = spec["algorithm_spec"]["archive"].get("qd_score_offset", 0.0)  # 0: not stored
    assert offset == -offset_per_step * 5
    out = entry.evaluate(
        np.zeros((1, spec["domain_spec"]["solution_dim"])),
        np.zeros(1),
        hidden=[2],
        episode_length=5,
    )
    assert out["measures"].shape == (1, measures) and out["episode_steps"][0] <= 5


def test_a_shard_of_walker2d_uni_is_bitwise_the_same_whatever_the_shards():
    config = validate_config(
        {
            "shards": 3,
            "algorithms": {"me": {"type": "map_elites_line", "batch_size": 6}},
            "domains": {"w": {"type": "walker2d_uni", "params": {"episode_length": 20}}},
        }
    )
    state = initialise(run_spec(config, algorithm="me", domain="w", seed=0))
    whole = shard_results(state, 1)[0]
    parts = shard_results(state, 3)
    assert np.concatenate([p.objective for p in parts]).tobytes() == whole.objective.tobytes()
    assert np.concatenate([p.measures for p in parts]).tobytes() == whole.measures.tobytes()


@pytest.mark.parametrize(
    ("params", "line"),
    [
        (
            {"episode_lenght": 50},
            "key 'domains.walker.params.episode_lenght': not a parameter of domain "
            "walker2d_uni (its parameters: hidden, episode_length, random_starts)",
        ),
        (
            {"hidden": [64, 0]},
            "key 'domains.walker.params.hidden': a list of layer widths (integers >= 1; [] "
            "for a linear policy), not [64, 0]",
        ),
        (
            {"episode_length": 0},
            "key 'domains.walker.params.episode_length': an integer >= 1, not 0",
        ),
    ],
)
def test_a_wrong_param_is_one_clear_line(small_config, params, line):
    config = merged(
        small_config, {"domains": {"walker": {"type": "walker2d_uni", "params": params}}}
    )
    message = error_of(config)
    assert line in message
    assert message.count("key 'domains.walker") == 1, message


def test_without_mujoco_the_check_says_what_to_install(small_config, monkeypatch):
    """mujoco blocked as Python blocks a module (None in sys.modules)."""
    monkeypatch.setitem(sys.modules, "mujoco", None)
    config = merged(small_config, {"domains": {"ant": {"type": "ant_omni"}}})
    assert (
        "key 'domains.ant.type': ant_omni needs mujoco, which is not installed: "
        "pip install 'evocamp[mujoco]'"
    ) in error_of(config)


def test_the_shipped_qd_rl_campaign_and_its_trial_are_valid():
    """config/qd_rl.yaml and the 2-core trial its comments give (top-level keys only, as
    Snakemake's --config sets them): CVT archives of 1,024 cells, separable CMA-ES, QD
    emitters starting from random policies."""
    text = (REPO / "config" / "qd_rl.yaml").read_text()
    config = load_config_file(REPO / "config" / "qd_rl.yaml")
    assert config["seeds"] == 5 and set(config["domains"]) == {"walker2d_uni", "ant_omni"}
    assert {a["type"] for a in config["algorithms"].values()} == {
        "cvt_map_elites_line",
        "cvt_cma_me",
        "cvt_cma_mae",
        "openai_es",
    }
    for algorithm in config["algorithms"].values():
        if algorithm["type"].startswith("cvt_"):
            assert algorithm["archive"]["cells"] == 1024
        if "cma" in algorithm["type"]:
            assert algorithm["es"] == "sep_cma_es"
        if algorithm["type"] != "openai_es":  # QD emitters start from QDax's policies
            assert algorithm["initial_population"] == "random"
    trial = re.search(r"--config (seeds=1 [^\n]*)", text).group(1).split()
    overrides = {key: yaml.safe_load(value) for key, value in (item.split("=") for item in trial)}
    validate_config({**config, **overrides})
