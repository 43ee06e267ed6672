"""The Nevergrad and Optuna families against the libraries' own loops (the peer checks
of issue 43): with one seed, Nevergrad's and Optuna's ask/tell in one process and
evocamp's ``nevergrad`` and ``optuna`` types, pickled between every ask and tell as a
checkpoint holds them, evaluate the same solutions bit for bit; each tell in a new
process with another ``PYTHONHASHSEED`` continues bitwise."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest
from conftest import batches_in_one_and_in_new_processes, benchmark_module

from evocamp.base.errors import ConfigError
from evocamp.config import run_spec, validate_config
from evocamp.families.nevergrad import (
    NevergradOptimizer,
    metamodel_float_shim,
    shim_applies,
)
from evocamp.families.optuna import OptunaSampler, optuna_seed
from evocamp.loop.engine import initialise
from evocamp.model.numerics import NUMERIC_PACKAGES

SEED = 2024
BOUNDS = (-5.0, 5.0)


def sphere(batch) -> np.ndarray:
    """The minimised shifted sphere of every row."""
    return np.sum((np.asarray(batch) - 1.0) ** 2, axis=1)


# Nevergrad's optimizers and the settings under test, with what NGOpt picks there: in
# 5-d with a budget of 1,000 and 4 workers its CMA; in 2-d with config/bbob.yaml's 10
# workers and a budget of 200 its MetaModel (a quadratic surrogate over CMA), which runs
# under numpy 2.4 only with the shim (metamodel_float_shim), and uses its surrogate at
# the 13th, 26th, ... ask.
NEVERGRAD_CASES = {
    "NGOpt-CMA": {"optimizer": "NGOpt", "dim": 5, "budget": 1000, "batch": 4, "picks": "CMA"},
    "NGOpt-MetaModel": {
        "optimizer": "NGOpt",
        "dim": 2,
        "budget": 200,
        "batch": 10,
        "picks": "MetaModel",
    },
    "CMA": {"optimizer": "CMA", "dim": 3, "budget": None, "batch": 6},
    "TwoPointsDE": {"optimizer": "TwoPointsDE", "dim": 3, "budget": 300, "batch": 6},
    "PSO": {"optimizer": "PSO", "dim": 3, "budget": 300, "batch": 6},
}


#: benchmarks/library_peers.py: the libraries' own loops and evocamp's, pickled.
PEERS = benchmark_module("library_peers")


@pytest.mark.parametrize("case", list(NEVERGRAD_CASES))
def test_nevergrad_evaluates_what_nevergrads_own_loop_evaluates(case):
    """NGOpt in its MetaModel regime included: the peer runs with the shim too (under
    numpy 2.4 Nevergrad's own loop fails without it)."""
    case = NEVERGRAD_CASES[case]
    name = case["optimizer"]
    generations = 12
    peer = PEERS.nevergrad_peer(
        name,
        objective=sphere,
        dim=case["dim"],
        bounds=BOUNDS,
        seed=SEED,
        generations=generations,
        batch=case["batch"],
        budget=case["budget"],
    )
    optimizer = NevergradOptimizer(
        solution_dim=case["dim"],
        x0=np.zeros(case["dim"]),
        bounds=BOUNDS,
        seed=SEED,
        optimizer=name,
        batch_size=case["batch"],
        budget=case["budget"],
    )
    ours, optimizer = PEERS.evocamp_loop(optimizer, objective=sphere, generations=generations)
    assert ours.shape == peer.shape == (generations * case["batch"], case["dim"])
    assert np.array_equal(ours, peer)
    assert optimizer.result()["told"] == generations * case["batch"]
    if name == "NGOpt":
        assert optimizer.optimizer.optim.name == case["picks"]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("sampler", list(PEERS.OPTUNA_SAMPLERS))
def test_optuna_evaluates_what_optunas_own_loop_evaluates(sampler):
    """Past the samplers' start-up trials (TPE and GP: 10, CMA-ES: one generation)."""
    dim, batch, generations = 3, 4, 5 if sampler == "gp" else 6
    peer = PEERS.optuna_peer(
        PEERS.OPTUNA_SAMPLERS[sampler](seed=optuna_seed(SEED)),
        objective=sphere,
        dim=dim,
        bounds=BOUNDS,
        generations=generations,
        batch=batch,
    )
    optimizer = OptunaSampler(
        solution_dim=dim,
        x0=np.zeros(dim),
        bounds=BOUNDS,
        seed=SEED,
        sampler=sampler,
        batch_size=batch,
    )
    ours, optimizer = PEERS.evocamp_loop(optimizer, objective=sphere, generations=generations)
    assert ours.shape == (generations * batch, dim)
    assert np.array_equal(ours, peer)
    assert optimizer.result()["trials"] == generations * batch


#: One generation in a new process: unpickle, tell, ask, pickle (a shard-mode tell step).
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def ngopt_metamodel(*, seed: int) -> NevergradOptimizer:
    """NGOpt where it picks its MetaModel (2-d, 14 workers, budget 42): its surrogate at
    the 26th and 39th ask."""
    return NevergradOptimizer(
        solution_dim=2,
        x0=np.zeros(2),
        bounds=BOUNDS,
        seed=seed,
        optimizer="NGOpt",
        batch_size=14,
        budget=42,
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: NevergradOptimizer(
            solution_dim=3, x0=np.zeros(3), bounds=BOUNDS, seed=9, optimizer="CMA", batch_size=5
        ),
        lambda: ngopt_metamodel(seed=9),
        lambda: OptunaSampler(
            solution_dim=3, x0=np.zeros(3), bounds=BOUNDS, seed=9, sampler="tpe", batch_size=5
        ),
        lambda: OptunaSampler(
            solution_dim=3, x0=np.zeros(3), bounds=BOUNDS, seed=9, sampler="cmaes", batch_size=5
        ),
    ],
    ids=["nevergrad-CMA", "nevergrad-NGOpt-MetaModel", "optuna-tpe", "optuna-cmaes"],
)
def test_a_tell_in_another_process_continues_bitwise(make):
    """Each tell in a new process with another PYTHONHASHSEED, as shard-mode tell steps
    run, gives the batches of the loop in one process (Nevergrad's CMA reseeds and
    draws from numpy's global state: the optimizer carries its own)."""
    in_process, across = batches_in_one_and_in_new_processes(make)
    assert all(np.array_equal(a, b) for a, b in zip(in_process, across, strict=True))


_KEYS_IN_THIS_PROCESS = """
import pickle, sys
from evocamp.families.nevergrad import pycma_strategies
optimizer = pickle.loads(sys.stdin.buffer.read())
archives = [es.sent_solutions for es in pycma_strategies(optimizer.optimizer)]
print(all(
    list(archive.data) == [archive.key(x) for x in archive._unhashed_keys.values()]
    for archive in archives
), len(archives), sum(len(archive.data) for archive in archives))
"""


def test_pycmas_archives_inside_nevergrad_are_keyed_again_in_another_process():
    """pycma keys the solutions it asked by ``hash(x.tobytes())``, salted per process;
    NGOpt's MetaModel tells its CMA-ES solutions it did not ask (the surrogate's), which
    pycma looks up there: unpickled in a process with another ``PYTHONHASHSEED`` (a tell
    step), every key is this process's hash of its solution again."""
    import pickle

    optimizer = ngopt_metamodel(seed=1)
    for _ in range(2):
        optimizer.tell(-sphere(optimizer.ask()))
    optimizer.ask()
    completed = subprocess.run(
        [sys.executable, "-c", _KEYS_IN_THIS_PROCESS],
        input=pickle.dumps(optimizer),
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "321"},
        timeout=120,
    )
    matched, strategies, keys = completed.stdout.decode().split()
    assert (matched, strategies) == ("True", "1") and int(keys) > 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: NevergradOptimizer(
            solution_dim=2, x0=np.zeros(2), bounds=BOUNDS, seed=4, optimizer="PSO", batch_size=3
        ),
        lambda: OptunaSampler(
            solution_dim=2, x0=np.zeros(2), bounds=BOUNDS, seed=4, sampler="random", batch_size=3
        ),
    ],
    ids=["nevergrad", "optuna"],
)
def test_asynchronous_tells_take_results_in_any_order(make):
    """ask_async gives one proposal per freed slot; tell_async finds each result's
    candidate or trial by its solution, whatever the order they finish in."""
    optimizer = make()
    flight = optimizer.ask_async(slots=[0, 1, 2], evaluations=[0, 1, 2])
    assert flight.shape == (3, 2)
    optimizer.tell_async(-sphere(flight[[2]]), None, solutions=flight[[2]])
    optimizer.tell_async(-sphere(flight[[0]]), None, solutions=flight[[0]])
    again = optimizer.ask_async(slots=[2], evaluations=[3])
    optimizer.tell_async(-sphere(again), None, solutions=again)
    assert len(optimizer.asked) == 1 and np.array_equal(_solution(optimizer.asked[0]), flight[1])
    assert optimizer.stats()["told"] == 3


def _solution(asked) -> np.ndarray:
    return asked[1] if isinstance(asked, tuple) else asked.value


def test_failed_solutions_are_the_worst_or_failed_trials():
    nevergrad = NevergradOptimizer(
        solution_dim=2, x0=np.zeros(2), bounds=BOUNDS, seed=1, optimizer="CMA", batch_size=4
    )
    batch = nevergrad.ask()
    nevergrad.tell(np.array([np.nan, -1.0, -2.0, np.nan]), failed=np.array([1, 0, 0, 1], bool))
    assert (
        nevergrad.optimizer.num_tell == 4
        and np.isfinite(nevergrad.result()["recommendation"]).all()
    )
    assert len(batch) == 4
    # The recommendation is the best solution told, in the domain's units (not Nevergrad's
    # standardized data, which differs within bounds).
    assert np.array_equal(nevergrad.result()["recommendation"], batch[1])
    sampler = OptunaSampler(
        solution_dim=2, x0=np.zeros(2), bounds=BOUNDS, seed=1, sampler="tpe", batch_size=4
    )
    sampler.ask()
    sampler.tell(np.array([np.nan, -1.0, -2.0, np.nan]), failed=np.array([1, 0, 0, 1], bool))
    states = [t.state.name for t in sampler.study.trials]
    assert states == ["FAIL", "COMPLETE", "COMPLETE", "FAIL"]
    assert sampler.result()["trials"] == 2


def test_optimizer_names_are_checked_against_nevergrads_registry():
    config = {
        "algorithms": {"n": {"type": "nevergrad", "optimizer": "ngopt"}},
        "domains": {"s": {"type": "plain_sphere", "solution_dim": 3}},
    }
    with pytest.raises(
        ConfigError,
        match=r"'ngopt' is not an optimizer of Nevergrad's registry \(did you mean NGOpt\?\)",
    ):
        validate_config(config)
    config["algorithms"]["n"]["optimizer"] = "TwoPointsDE"
    spec = run_spec(validate_config(config), algorithm="n", domain="s", seed=0)
    assert {k: v for k, v in spec["algorithm_spec"].items() if k != "archive"} == {
        "type": "nevergrad",
        "optimizer": "TwoPointsDE",
        "batch_size": 8,
        "budget": None,
        "num_workers": None,
    }


def test_the_metamodel_shim_converts_as_numpy_before_2_4_did():
    """numpy 2.4 refuses ``float`` of a one-element array (what nevergrad 1.0.12's
    meta-model calls); the shim, applied for that pinned nevergrad and numpy >= 2.4 and
    for nobody else, gives the element, and the builtin's result otherwise."""
    import builtins

    from nevergrad.optimization import metamodel, optimizerlib

    assert metamodel_float_shim() is True
    with pytest.raises(TypeError, match="only 0-dimensional arrays"):
        builtins.float(np.array([0.25]))
    shimmed = vars(metamodel)["float"]
    assert shimmed(np.array([0.1 + 0.2])) == 0.1 + 0.2
    assert shimmed(np.array([[7]], dtype=np.int64)) == 7.0
    assert shimmed(np.float32(0.1)) == builtins.float(np.float32(0.1))
    assert shimmed("1e-3") == 0.001
    with pytest.raises(TypeError):
        shimmed(np.array([1.0, 2.0]))
    assert "float" not in vars(optimizerlib)
    assert shim_applies("1.0.12", "2.4.6") and shim_applies("1.0.12", "2.10.0")
    assert not shim_applies("1.0.13", "2.4.6") and not shim_applies("1.0.12", "2.3.5")


@pytest.mark.parametrize(
    ("algorithm", "recorded"),
    [
        ({"type": "nevergrad", "optimizer": "CMA"}, "nevergrad 1.0.12, cma 4.5.0"),
        ({"type": "optuna", "sampler": "random"}, "optuna 5.0.0, cmaes 0.13.1, torch 2.13.0"),
    ],
)
def test_their_runs_record_the_librarys_versions(algorithm, recorded):
    config = validate_config(
        {
            "algorithms": {"a": algorithm},
            "domains": {"s": {"type": "plain_sphere", "solution_dim": 3}},
        }
    )
    state = initialise(run_spec(config, algorithm="a", domain="s", seed=0))
    common = ", ".join(f"{name} {metadata.version(name)}" for name in NUMERIC_PACKAGES)
    recorded = recorded.replace("torch 2.13.0", f"torch {metadata.version('torch')}")
    assert [record["packages"] for record in state.numerics] == [f"{common}, {recorded}"]
