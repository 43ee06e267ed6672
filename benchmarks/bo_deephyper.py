"""DeepHyper's CBO on Ackley or on the ``mlp_digits`` tuning task in its own loop: the
peer of evocamp's BO family.

Run with a Python that has ``deephyper==0.13.2`` (``benchmarks/bo.py`` and
``benchmarks/hpo_peers.py`` do, given ``--deephyper-python``); prints one JSON object
per line.

    python bo_deephyper.py search --dim 5 --evaluations 200 --seed 0 --workers 8 --mean-seconds 0.5
    python bo_deephyper.py search --task hpo --evaluations 60 --seed 0 --workers 4 --epochs 300
    python bo_deephyper.py timing --dim 5 --history 100 1000 5000 --batch 8
    python bo_deephyper.py space-json config/spaces/mlp_digits.json

``search --task hpo``: the same CBO on an ``HpProblem`` of ``mlp_digits``'s space
(:data:`evocamp.tasks.training.MLP_DIGITS_SPACE`, the ConfigSpace hyperparameters and
condition of :func:`configspace_of`) with DeepHyper's process evaluator (``workers``
processes; a free worker gets a new point at once); every evaluation trains the
MLP with evocamp's own function (this repository's ``src`` first on the path), its
evaluation seed drawn from the run's seed and the job's index (:func:`peer_seed`).
``space-json``: that ConfigSpace space written as ConfigSpace's JSON, the file a
campaign's ``space:`` may name.

``search``: ``CBO(problem, random_state=seed, surrogate_model="ET", acq_func="UCBd",
multi_point_strategy="qUCBd", n_initial_points=...)`` with DeepHyper's own thread
evaluator of ``workers`` workers (asynchronous: a free worker gets a new point at
once). Every evaluation returns minus the Ackley value after sleeping a time drawn
from an exponential distribution with the given mean (from the seed and the
evaluation's index: the same distribution as evocamp's ``simulated_seconds``).

``timing``: seconds of ``tell`` (history of N random points) + ``ask(batch)``, i.e. one
surrogate fit and one batch proposal, and whether two searches with the same
``random_state`` propose the same points.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from pathlib import Path

import numpy as np

ACKLEY_BOUND = 32.768
#: This repository's package, ahead of an installed evocamp.
SOURCE = Path(__file__).resolve().parents[1] / "src"


def ackley(x: np.ndarray) -> float:
    dim = len(x)
    return float(
        -20.0 * np.exp(-0.2 * np.sqrt(np.sum(x**2) / dim))
        - np.exp(np.sum(np.cos(2 * np.pi * x)) / dim)
        + 20.0
        + np.e
    )


def problem_of(dim: int):
    from deephyper.hpo import HpProblem

    problem = HpProblem()
    for i in range(dim):
        problem.add_hyperparameter((-ACKLEY_BOUND, ACKLEY_BOUND), f"x{i}")
    return problem


def cbo(problem, *, seed: int, initial_points: int, log_dir: str):
    from deephyper.hpo import CBO

    return CBO(
        problem,
        random_state=seed,
        surrogate_model="ET",
        acq_func="UCBd",
        multi_point_strategy="qUCBd",
        n_initial_points=initial_points,
        log_dir=log_dir,
        checkpoint_history_to_csv=False,
    )


def search(args) -> None:
    import tempfile

    from deephyper.evaluator import Evaluator

    dim = args.dim
    counter = iter(range(10**9))
    lock = threading.Lock()
    began = time.perf_counter()
    finished = []  # (seconds since start, ackley value)
    busy = []

    def run(job):
        x = np.array([job.parameters[f"x{i}"] for i in range(dim)])
        with lock:
            index = next(counter)
        wait = np.random.default_rng([args.seed, index]).exponential(args.mean_seconds)
        value = ackley(x)
        time.sleep(wait)
        with lock:
            finished.append((time.perf_counter() - began, value))
            busy.append(wait)
        return -value

    with tempfile.TemporaryDirectory() as log_dir:
        evaluator = Evaluator.create(
            run, method="thread", method_kwargs={"num_workers": args.workers}
        )
        searcher = cbo(
            problem_of(dim), seed=args.seed, initial_points=args.initial_points, log_dir=log_dir
        )
        searcher.search(evaluator, max_evals=args.evaluations)
    wall = time.perf_counter() - began
    finished.sort()
    times = [t for t, _ in finished][: args.evaluations]
    values = np.minimum.accumulate([v for _, v in finished])[: args.evaluations]
    print(
        json.dumps(
            {
                "seed": args.seed,
                "dim": dim,
                "wall_seconds": wall,
                "utilisation": sum(busy) / (wall * args.workers),
                "times": times,
                "best": values.tolist(),
            }
        )
    )


def configspace_of(space: dict):
    """A ConfigSpace ``ConfigurationSpace`` of an evocamp space mapping (``name -> {type,
    low, high, log, choices, default, condition}``): real, integer, categorical and
    ordinal hyperparameters, a condition as ``EqualsCondition`` (one value) or
    ``InCondition`` per parent (several parents: their ``AndConjunction``)."""
    import ConfigSpace as cs

    made = {}
    for name, p in space.items():
        if p["type"] in ("real", "integer"):
            kind = cs.Float if p["type"] == "real" else cs.Integer
            made[name] = kind(
                name, (p["low"], p["high"]), log=p.get("log", False), default=p["default"]
            )
        elif p["type"] == "categorical":
            made[name] = cs.Categorical(name, p["choices"], default=p["default"])
        else:
            made[name] = cs.OrdinalHyperparameter(name, p["choices"], default_value=p["default"])
    configspace = cs.ConfigurationSpace()
    configspace.add(list(made.values()))
    for name, p in space.items():
        parts = [
            cs.EqualsCondition(made[name], made[parent], values[0])
            if len(values) == 1
            else cs.InCondition(made[name], made[parent], values)
            for parent, values in p.get("condition", {}).items()
        ]
        if parts:
            configspace.add(parts[0] if len(parts) == 1 else cs.AndConjunction(*parts))
    return configspace


def mlp_digits_space() -> dict:
    sys.path.insert(0, str(SOURCE))
    from evocamp.tasks.training import MLP_DIGITS_SPACE

    return MLP_DIGITS_SPACE


def peer_seed(seed: int, index: int) -> int:
    """The evaluation seed a peer gives its run ``seed``'s evaluation ``index``."""
    return int(np.random.default_rng([seed, index]).integers(2**63))


def active(configuration: dict, space: dict) -> dict:
    """A peer's configuration as evocamp's evaluation function takes it: the space's
    active parameters only (a peer may give an inactive one as NaN), as Python values."""
    values = {}
    for name in space:
        value = configuration.get(name)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        values[name] = value.item() if isinstance(value, np.generic) else value
    return values


def train(configuration: dict, *, seed: int, index: int, epochs: int) -> dict:
    """One evaluation of ``mlp_digits`` for a peer: validation and test accuracy, and
    when it began and ended (``time.time()``, comparable across processes; scikit-learn
    imported and the digits loaded before it begins, as evocamp's workers have them)."""
    sys.path.insert(0, str(SOURCE))
    import sklearn.neural_network  # noqa: F401

    from evocamp.tasks.functions import digits_data
    from evocamp.tasks.training import MLP_DIGITS_SPACE, mlp_digits

    digits_data()
    began = time.time()
    out = mlp_digits(
        [active(configuration, MLP_DIGITS_SPACE)],
        np.array([peer_seed(seed, index)], dtype=np.uint64),
        epochs=epochs,
    )
    return {
        "objective": float(out["objective"][0]),
        "test_accuracy": float(out["test_accuracy"][0]),
        "began": began,
        "ended": time.time(),
    }


def _train_job(job, *, seed: int, epochs: int) -> dict:
    index = int(str(job.id).split(".")[-1])
    out = train(dict(job.parameters), seed=seed, index=index, epochs=epochs)
    return {"objective": out.pop("objective"), "metadata": out}


def search_hpo(args) -> None:
    import tempfile

    from deephyper.evaluator import Evaluator
    from deephyper.hpo import HpProblem

    problem = HpProblem(configspace_of(mlp_digits_space()))
    began = time.time()
    with tempfile.TemporaryDirectory() as log_dir:
        evaluator = Evaluator.create(
            _train_job,
            method="process",
            method_kwargs={
                "num_workers": args.workers,
                "run_function_kwargs": {"seed": args.seed, "epochs": args.epochs},
            },
        )
        searcher = cbo(problem, seed=args.seed, initial_points=args.initial_points, log_dir=log_dir)
        frame = searcher.search(evaluator, max_evals=args.evaluations)
    wall = time.time() - began
    in_order = frame.sort_values("job_id")["objective"].astype(float).tolist()
    frame = frame.sort_values("m:ended").iloc[: args.evaluations]
    print(
        json.dumps(
            {
                "seed": args.seed,
                "wall_seconds": wall,
                "utilisation": float((frame["m:ended"] - frame["m:began"]).sum())
                / (wall * args.workers),
                "times": (frame["m:ended"] - began).tolist(),
                "training_seconds": (frame["m:ended"] - frame["m:began"]).tolist(),
                "values": frame["objective"].astype(float).tolist(),
                "test_accuracy": frame["m:test_accuracy"].astype(float).tolist(),
                "evaluated": in_order[: args.evaluations],
            }
        )
    )


def timing(args) -> None:
    import tempfile

    dim = args.dim
    rng = np.random.default_rng(0)
    for size in args.history:
        x = rng.uniform(-ACKLEY_BOUND, ACKLEY_BOUND, (size, dim))
        results = [({f"x{i}": float(v) for i, v in enumerate(row)}, -ackley(row)) for row in x]
        proposals = []
        for _ in range(2):
            with tempfile.TemporaryDirectory() as log_dir:
                searcher = cbo(problem_of(dim), seed=1, initial_points=10, log_dir=log_dir)
                searcher.ask(size)  # the searcher only takes results of points it asked
                began = time.perf_counter()
                searcher.tell(results)
                asked = searcher.ask(args.batch)
                seconds = time.perf_counter() - began
            proposals.append([[c[f"x{i}"] for i in range(dim)] for c in asked])
        print(
            json.dumps(
                {
                    "history": size,
                    "dim": dim,
                    "batch": args.batch,
                    "seconds": seconds,
                    "deterministic": proposals[0] == proposals[1],
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("search")
    one.add_argument("--task", choices=["ackley", "hpo"], default="ackley")
    one.add_argument("--dim", type=int)
    one.add_argument("--epochs", type=int, default=20, help="hpo: training epochs")
    one.add_argument("--evaluations", type=int, required=True)
    one.add_argument("--seed", type=int, required=True)
    one.add_argument("--workers", type=int, default=8)
    one.add_argument("--mean-seconds", type=float, default=0.5)
    one.add_argument("--initial-points", type=int, default=10)
    two = sub.add_parser("timing")
    two.add_argument("--dim", type=int, required=True)
    two.add_argument("--history", type=int, nargs="+", required=True)
    two.add_argument("--batch", type=int, default=8)
    three = sub.add_parser("space-json")
    three.add_argument("path", type=Path)
    args = parser.parse_args()
    if args.command == "space-json":
        configspace_of(mlp_digits_space()).to_json(args.path, indent=2)
    elif args.command == "timing":
        timing(args)
    else:
        search_hpo(args) if args.task == "hpo" else search(args)


if __name__ == "__main__":
    main()
