"""The Nevergrad and Optuna families against the libraries' own loops (the peer checks
of issue 43): with one seed, Nevergrad's and Optuna's ask/tell in one process and
evocamp's ``nevergrad`` and ``optuna`` types, pickled between every ask and tell as a
checkpoint holds them, evaluate the same solutions bit for bit; each tell in a new
process with another ``PYTHONHASHSEED`` continues bitwise."""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest
from conftest import batches_in_one_and_in_new_processes, benchmark_module

from evocamp.base.errors import ConfigError, OptimizerError
from evocamp.config import run_spec, validate_config
from evocamp.families.nevergrad import NevergradOptimizer
from evocamp.families.optuna import OptunaSampler, optuna_seed
from evocamp.loop.engine import initialise
from evocamp.model.numerics import NUMERIC_PACKAGES

SEED = 2024
BOUNDS = (-5.0, 5.0)


def sphere(batch) -> np.ndarray:
    """The minimised shifted sphere of every row."""
    return np.sum((np.asarray(batch) - 1.0) ** 2, axis=1)


# Nevergrad's optimizers and the settings under test: NGOpt in 5-d with a budget of
# 1,000 and 4 workers is its CMA (NGOpt's meta-model choices fail under numpy 2.4:
# test_ngopts_metamodel_failure_is_named).
NEVERGRAD_CASES = {
    "NGOpt": {"dim": 5, "budget": 1000, "batch": 4},
    "CMA": {"dim": 3, "budget": None, "batch": 6},
    "TwoPointsDE": {"dim": 3, "budget": 300, "batch": 6},
    "PSO": {"dim": 3, "budget": 300, "batch": 6},
}


#: benchmarks/library_peers.py: the libraries' own loops and evocamp's, pickled.
PEERS = benchmark_module("library_peers")


@pytest.mark.parametrize("name", list(NEVERGRAD_CASES))
def test_nevergrad_evaluates_what_nevergrads_own_loop_evaluates(name):
    case = NEVERGRAD_CASES[name]
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
@pytest.mark.parametrize(
    "make",
    [
        lambda: NevergradOptimizer(
            solution_dim=3, x0=np.zeros(3), bounds=BOUNDS, seed=9, optimizer="CMA", batch_size=5
        ),
        lambda: OptunaSampler(
            solution_dim=3, x0=np.zeros(3), bounds=BOUNDS, seed=9, sampler="tpe", batch_size=5
        ),
        lambda: OptunaSampler(
            solution_dim=3, x0=np.zeros(3), bounds=BOUNDS, seed=9, sampler="cmaes", batch_size=5
        ),
    ],
    ids=["nevergrad-CMA", "optuna-tpe", "optuna-cmaes"],
)
def test_a_tell_in_another_process_continues_bitwise(make):
    """Each tell in a new process with another PYTHONHASHSEED, as shard-mode tell steps
    run, gives the batches of the loop in one process (Nevergrad's CMA reseeds and
    draws from numpy's global state: the optimizer carries its own)."""
    in_process, across = batches_in_one_and_in_new_processes(make)
    assert all(np.array_equal(a, b) for a, b in zip(in_process, across, strict=True))


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


def test_ngopts_metamodel_failure_is_named():
    """nevergrad 1.0.12's MetaModel (NGOpt's choice in low dimensions with several
    workers) calls ``float`` on a one-element array, which numpy 2.4 refuses: the
    failure is one line naming Nevergrad's optimizer, not a bare TypeError."""
    optimizer = NevergradOptimizer(
        solution_dim=2,
        x0=np.zeros(2),
        bounds=BOUNDS,
        seed=1,
        optimizer="NGOpt",
        batch_size=4,
        budget=200,
    )
    with pytest.raises(OptimizerError, match="nevergrad's NGOpt failed to ask: TypeError"):
        for _ in range(30):
            optimizer.tell(-sphere(optimizer.ask()))


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
