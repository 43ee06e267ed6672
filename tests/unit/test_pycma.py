"""The pycma family against pycma's own loop: with one seed, ``cma.fmin2`` (restarts,
IPOP or BIPOP) and evocamp's ``ipop_cma_es``/``bipop_cma_es`` driven generation by
generation, pickled between every ask and tell as a checkpoint holds them, evaluate the
same solutions bit for bit (the peer check of issue 43)."""

from __future__ import annotations

import pickle
from importlib import metadata

import cma
import numpy as np
import pytest
from conftest import batches_in_one_and_in_new_processes, benchmark_module, shard_results

from evocamp.catalogue.algorithms import ALGORITHMS
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.families.pycma import BIPOPCMAES, IPOPCMAES, QUIET, pycma_seed
from evocamp.files.checkpoint import read_state, write_state
from evocamp.loop.engine import initialise, tell
from evocamp.model.metrics import METRIC_DTYPE, TIMING_COLUMNS
from evocamp.model.numerics import NUMERIC_PACKAGES
from evocamp.reporting.runtime_to_target import first_hits
from evocamp.reporting.suite import BBOB_TARGETS
from evocamp.tasks import bbob

DIM = 3
POPSIZE = 7  # pycma's default in 3-d: 4 + floor(3 ln 3)
SEED = 2024


def rastrigin(x) -> float:
    """The minimised Rastrigin function (many local optima: pycma restarts often)."""
    x = np.asarray(x, dtype=np.float64)
    return float(10 * len(x) + np.sum(x * x - 10 * np.cos(2 * np.pi * x)))


def fmin2_evaluations(*, bipop: bool, bounds, budget: int) -> list[np.ndarray]:
    """The first ``budget`` solutions ``cma.fmin2`` evaluates, in order."""
    evaluated = []

    def recorded(x):
        evaluated.append(np.array(x, dtype=np.float64))
        return rastrigin(x)

    options = {**QUIET, "seed": pycma_seed(SEED), "popsize": POPSIZE}
    if bounds is not None:
        options["bounds"] = list(bounds)
    cma.fmin2(recorded, np.ones(DIM), 0.5, options, restarts=4, bipop=bipop)
    return evaluated[:budget]


def evocamp_evaluations(cls, *, bounds, budget: int):
    """The first ``budget`` solutions of the evocamp class, each generation pickled and
    unpickled before its tell and after it (a new process resuming from a checkpoint
    gets the same bytes), and the populations of its generations."""
    optimizer = cls(
        solution_dim=DIM, x0=np.ones(DIM), bounds=bounds, seed=SEED, popsize=POPSIZE, sigma=0.5
    )
    evaluated, sizes = [], []
    while len(evaluated) < budget:
        batch = optimizer.ask()
        optimizer = pickle.loads(pickle.dumps(optimizer))
        sizes.append(len(batch))
        evaluated += list(batch)
        optimizer.tell(np.array([-rastrigin(x) for x in batch]))  # maximised
        optimizer = pickle.loads(pickle.dumps(optimizer))
    return evaluated[:budget], sizes, optimizer


@pytest.mark.parametrize(
    ("cls", "bounds"), [(IPOPCMAES, None), (BIPOPCMAES, (-5.12, 5.12))], ids=["ipop", "bipop"]
)
def test_the_same_seed_evaluates_what_pycmas_own_loop_evaluates(cls, bounds):
    peer = fmin2_evaluations(bipop=cls.BIPOP, bounds=bounds, budget=2500)
    ours, sizes, optimizer = evocamp_evaluations(cls, bounds=bounds, budget=len(peer))
    assert len(peer) == 2500
    assert all(np.array_equal(a, b) for a, b in zip(ours, peer, strict=True))
    assert optimizer.irun >= 2  # restarts were made, with other populations
    assert sizes[0] == POPSIZE and len(set(sizes)) >= 3
    if bounds is not None:
        assert np.all(np.abs(np.array(ours)) <= 5.12)


def test_numpys_global_random_state_is_neither_read_nor_changed():
    """pycma's draws come from the optimizer's own generator: a process whose other code
    draws from numpy's global state gets the same batches, and its state is untouched."""
    first = IPOPCMAES(solution_dim=DIM, x0=np.ones(DIM), bounds=None, seed=1, popsize=6, sigma=1)
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    second = IPOPCMAES(solution_dim=DIM, x0=np.ones(DIM), bounds=None, seed=1, popsize=6, sigma=1)
    for _ in range(3):
        a = first.ask()
        np.random.standard_normal(5)  # someone else's draws between the two
        b = second.ask()
        assert np.array_equal(a, b)
        first.tell(-np.sum(a**2, axis=1))
        second.tell(-np.sum(b**2, axis=1))
    np.random.seed(0)
    assert np.array_equal(np.random.get_state()[1], before)


def test_failed_offspring_are_ranked_last_and_restarts_change_the_population():
    """Under ``discard`` the failed rows (NaN) reach pycma as +inf (minimised: the worst);
    on a flat objective pycma stops every run after a generation, and IPOP doubles."""
    optimizer = IPOPCMAES(
        solution_dim=DIM, x0=np.zeros(DIM), bounds=None, seed=3, popsize=6, sigma=1
    )
    batch = optimizer.ask()
    objective = -np.sum(batch**2, axis=1)
    objective[:2] = np.nan
    optimizer.tell(objective, failed=np.array([True, True] + [False] * (len(batch) - 2)))
    sizes = []
    for _ in range(4):
        batch = optimizer.ask()
        sizes.append(len(batch))
        optimizer.tell(np.zeros(len(batch)))
    assert sizes == [6, 6, 12, 24]  # flat twice, then once per run
    assert ALGORITHMS["ipop_cma_es"].generation_size({"popsize": 6}) == 6  # the first, smallest


def test_its_runs_record_pycmas_version_and_resume_from_their_checkpoint(tmp_path):
    """The runs of the family record ``cma`` after the packages every run records (its
    numbers are pycma's), and a state written as a checkpoint and read back tells and
    asks what the state kept in memory does."""
    config = validate_config(
        {
            "algorithms": {"b": {"type": "bipop_cma_es"}},
            "domains": {"s": {"type": "plain_rastrigin", "solution_dim": 3}},
            "shards": 2,
        }
    )
    state = initialise(run_spec(config, algorithm="b", domain="s", seed=0))
    common = ", ".join(f"{name} {metadata.version(name)}" for name in NUMERIC_PACKAGES)
    assert [record["packages"] for record in state.numerics] == [f"{common}, cma 4.5.0"]
    path = tmp_path / "state.h5"
    write_state(path, state, run=resolve_run(state.spec))
    resumed = read_state(path)
    for _ in range(3):
        state = tell(state, shard_results(state, 2))
        resumed = tell(resumed, shard_results(resumed, 3))
        assert state.next_batch.keys() == resumed.next_batch.keys()
        for key, value in state.next_batch.items():
            assert np.array_equal(value, resumed.next_batch[key]), key


#: One generation in a new process: unpickle, tell, ask, pickle (a shard-mode tell step).
def test_a_tell_in_another_process_continues_bitwise_under_bounds():
    """pycma finds a told solution's genotype by a hash Python salts per process: each
    tell here runs in a new process with another PYTHONHASHSEED, as shard-mode tell steps
    do, and gives the batches of the loop in one process (bounds: the genotype is not
    the solution)."""

    def start():
        return BIPOPCMAES(
            solution_dim=4, x0=np.zeros(4), bounds=(-2, 2), seed=9, popsize=8, sigma=1
        )

    in_process, across = batches_in_one_and_in_new_processes(start)
    assert all(np.array_equal(a, b) for a, b in zip(in_process, across, strict=True))


def test_the_fidelity_benchmark_counts_the_campaigns_own_runs():
    """benchmarks/bipop_fidelity.py drives a run's optimizer in one process: on f1 in
    10-D, its runtime to each of COCO's targets (counted per evaluation) falls within
    the generation in which the campaign's loop (initialise, shard steps, tell) first
    reaches the target, and the targets neither reaches are the same."""
    benchmark = benchmark_module("bipop_fidelity")
    config = benchmark.campaign([1], [2])
    spec = run_spec(config, algorithm="bipop", domain="bbob_f1_d10_i2", seed=1)
    budget = 700
    runtimes, spent, restarts = benchmark.run(spec, budget=budget, targets=BBOB_TARGETS)
    state, rows = initialise(spec), []
    while not rows or rows[-1]["evaluations"] < budget:
        state = tell(state, shard_results(state, 2))
        rows.append(state.metrics_window[-1].copy())
    rows = np.array(rows)
    precision = -bbob.optimum(1, 2, 10) - rows["best_objective"]
    per_generation = first_hits(precision, rows["evaluations"], BBOB_TARGETS, lower_is_better=True)
    assert spent == budget and rows["evaluations"][-1] == budget and restarts == 0
    reached = np.isfinite(runtimes)
    assert 10 <= reached.sum() < len(BBOB_TARGETS)
    assert np.array_equal(reached, np.isfinite(per_generation))
    assert np.all(per_generation[reached] - 10 < runtimes[reached])
    assert np.all(runtimes[reached] <= per_generation[reached])


def test_with_x0_random_every_restart_starts_from_its_own_point_and_runs_repeat(tmp_path):
    """BIPOP-CMA-ES on a bbob domain with ``x0: random`` and ``bounded: false`` through
    the campaign's loop (initialise, shard steps, tell): the first run starts from the
    run's draw in [-4, 4]^d and its first restart from a draw of its own; a second run
    of the same seed in 3 shards instead of 2, written as a checkpoint and read back
    every 10 generations (a resumed run), gives the same batches, metrics and result
    bitwise; another seed starts elsewhere."""
    config = validate_config(
        {
            "algorithms": {"b": {"type": "bipop_cma_es", "sigma": 2}},
            "domains": {
                "f": {
                    "type": "bbob",
                    "solution_dim": 2,
                    "x0": "random",
                    "bounded": False,
                    "params": {"function": 3},  # separable Rastrigin: restarts soon
                }
            },
            "seeds": 2,
            "shards": 2,
        },
        check_results_dir=False,
    )
    spec = run_spec(config, algorithm="b", domain="f", seed=0)
    state, resumed = initialise(spec), initialise(spec)
    first = state.optimizer.x0.copy()
    assert np.array_equal(first, state.optimizer.restart_x0(0))
    assert np.all(np.abs(first) <= bbob.START)
    assert state.optimizer.es.boundary_handler.bounds is None
    for generation in range(1, 400):
        state = tell(state, shard_results(state, 2))
        resumed = tell(resumed, shard_results(resumed, 3))
        if generation % 10 == 0:
            path = tmp_path / f"g{generation}.h5"
            write_state(path, resumed, run=resolve_run(spec))
            resumed = read_state(path)
        if state.optimizer.irun == 1:
            break
    restarted = state.optimizer.restart_x0(1)
    assert state.optimizer.irun == 1 and np.array_equal(state.optimizer.es.x0, restarted)
    assert not np.array_equal(restarted, first)
    assert resumed.optimizer.irun == 1 and resumed.generation == state.generation
    for name in set(METRIC_DTYPE.names) - set(TIMING_COLUMNS):
        ours, theirs = state.metrics_window[name], resumed.metrics_window[name]
        assert ours.tobytes() == theirs.tobytes(), name
    for key, value in state.next_batch.items():
        assert np.array_equal(value, resumed.next_batch[key]), key
    for key, value in state.optimizer.result().items():
        assert np.array_equal(value, resumed.optimizer.result()[key]), key
    other = initialise(run_spec(config, algorithm="b", domain="f", seed=1))
    assert not np.array_equal(other.optimizer.x0, first)
