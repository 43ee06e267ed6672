"""Speed of the MuJoCo locomotion domains, on one core.

    python benchmarks/locomotion_speed.py [--steps 5000] [--shard-sizes 1 8 64]
        [--tasks hopper_uni ...]

Per task (evocamp.tasks.locomotion.TASKS): environment steps per second of the bare
simulator (gymnasium's environment, unwrapped, stepped with uniform random actions,
reset when the robot falls) and of evocamp's rollouts with the default policy (the
64-64 tanh MLP, random weights of scale 0.1, deterministic starts); the policy's share
of a rollout's time (its forward passes timed alone on the rollout's observations);
the share of the floor-contact measures; and what building the environment costs
against a 1,000-step rollout. Then evaluations per second of one walker2d_uni shard of
1, 8 and 64 solutions through the shard step itself (evocamp.loop.evaluation,
1,000-step episodes, CVT-MAP-Elites' first batch).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.tasks.locomotion import (
    DEFAULT_HIDDEN,
    TASKS,
    evaluate_task,
    feet_on_floor,
    make_environment,
)
from evocamp.tasks.policies import mlp_layers, mlp_output


def bare_steps_per_second(task, steps: int) -> float:
    env = make_environment(task, random_starts=False)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1.0, 1.0, size=(steps, task.actions))
    env.reset(seed=0)
    began = time.perf_counter()
    for action in actions:
        terminated = env.step(action)[2]
        if terminated:
            env.reset(seed=0)
    return steps / (time.perf_counter() - began)


def build_seconds(task, repeats: int = 5) -> float:
    began = time.perf_counter()
    for _ in range(repeats):
        make_environment(task, random_starts=False).close()
    return (time.perf_counter() - began) / repeats


def random_policies(task, count: int, *, seed: int) -> np.ndarray:
    """Flat weights of ``count`` default policies (scale 0.1)."""
    dim = task.solution_dim({"hidden": DEFAULT_HIDDEN})
    return np.random.default_rng(seed).normal(scale=0.1, size=(count, dim))


def rollout_steps_per_second(task, steps: int) -> tuple[float, float]:
    """Steps per second of evocamp's rollouts (calls of 8 solutions, as many as give
    ``steps`` steps) and steps per episode."""
    done, seconds, episodes, call = 0, 0.0, 0, 0
    while done < steps:
        began = time.perf_counter()
        out = evaluate_task(
            task,
            random_policies(task, 8, seed=call),
            np.zeros(8, dtype=np.uint64),
            hidden=DEFAULT_HIDDEN,
            episode_length=1000,
            random_starts=False,
        )
        seconds += time.perf_counter() - began
        done += int(out["episode_steps"].sum())
        episodes += 8
        call += 1
    return done / seconds, done / episodes


def step_shares(task, steps: int) -> dict[str, float]:
    """Seconds per step of the policy, the simulator step and the contact measures,
    timed inside rollouts of the default policy written as evocamp's."""
    import mujoco

    env = make_environment(task, random_starts=False)
    sizes = task.layer_sizes(DEFAULT_HIDDEN)
    feet = {
        mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_GEOM, name): column
        for column, name in enumerate(task.feet)
    }
    clock = time.perf_counter
    spent = {"policy": 0.0, "step": 0.0, "contacts": 0.0}
    done = 0
    for weights in random_policies(task, 10_000, seed=99):
        layers = mlp_layers(weights, sizes)
        observation, _ = env.reset(seed=0)
        for _ in range(1000):
            t0 = clock()
            action = mlp_output(layers, observation, squash_output=True)
            t1 = clock()
            observation, _, terminated, _, _ = env.step(action)
            t2 = clock()
            if task.feet:
                feet_on_floor(env.data, 0, feet)
            t3 = clock()
            spent["policy"] += t1 - t0
            spent["step"] += t2 - t1
            spent["contacts"] += t3 - t2
            done += 1
            if terminated or done >= steps:
                break
        if done >= steps:
            break
    return {part: seconds / done for part, seconds in spent.items()}


def shard_rate(size: int) -> tuple[float, float]:
    """Evaluations per second and mean steps per evaluation of one walker2d_uni shard."""
    from evocamp.catalogue.factory import resolve_run
    from evocamp.config import run_spec, validate_config
    from evocamp.loop.engine import initialise
    from evocamp.loop.evaluation import evaluate_shard

    config = validate_config(
        {
            "shards": 1,
            "algorithms": {
                "me": {
                    "type": "cvt_map_elites_line",
                    "emitter_batch_size": size,
                    "archive": {"cells": 64, "cvt_samples": 10000},
                }
            },
            "domains": {"w": {"type": "walker2d_uni"}},
        }
    )
    state = initialise(run_spec(config, algorithm="me", domain="w", seed=0))
    began = time.perf_counter()
    result = evaluate_shard(
        resolve_run(state.spec),
        batch=state.next_batch,
        seeds=state.next_seeds,
        generation=1,
        shard=0,
        shards=1,
    )
    seconds = time.perf_counter() - began
    return size / seconds, float(np.mean(result.extra["episode_steps"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--shard-sizes", type=int, nargs="*", default=[1, 8, 64])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    args = parser.parse_args()
    print(machine())
    rows = []
    for name in args.tasks:
        task = TASKS[name]
        bare = bare_steps_per_second(task, args.steps)
        rollout, episode = rollout_steps_per_second(task, args.steps)
        shares = step_shares(task, args.steps)
        per_step = sum(shares.values())
        build = build_seconds(task)
        rows.append(
            [
                name,
                f"{bare:,.0f}",
                f"{rollout:,.0f}",
                f"{episode:,.0f}",
                f"{shares['step'] * 1e6:.0f} us",
                f"{shares['policy'] * 1e6:.1f} us ({shares['policy'] / per_step:.0%})",
                f"{shares['contacts'] * 1e6:.1f} us ({shares['contacts'] / per_step:.0%})",
                f"{build * 1e3:.1f} ms ({build / (1000 / rollout):.1%})",
            ]
        )
    print(
        table(
            [
                "task",
                "bare steps/s",
                "rollout steps/s",
                "steps/episode",
                "simulator step",
                "policy per step (share)",
                "contacts per step (share)",
                "build (vs 1,000 steps)",
            ],
            rows,
        )
    )
    if not args.shard_sizes:
        return
    shard_rows = []
    for size in args.shard_sizes:
        rate, steps = shard_rate(size)
        shard_rows.append([size, f"{rate:.2f}", f"{steps:,.0f}", f"{rate * steps:,.0f}"])
    print(table(["solutions", "evaluations/s", "steps/evaluation", "steps/s"], shard_rows))


if __name__ == "__main__":
    main()
