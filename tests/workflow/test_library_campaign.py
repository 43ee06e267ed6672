"""The Nevergrad and Optuna families (families from other libraries) through the real
workflow, in one small campaign: Nevergrad's NGOpt in its MetaModel regime (CMA-ES,
which draws from numpy's global state: the optimizer carries its own across tell
steps, and from the third generation the meta-model's surrogate search, which runs
under numpy 2.4 only with the shim: tell steps in new processes apply it) and Optuna's
TPE past its start-up trials; the evaluations are those of Nevergrad's own loop with
the run's seed, and the same in shard mode (2 shards) and in Dask mode (3 shards) killed and
rerun; in asynchronous mode, a run killed and rerun ends as an uninterrupted one."""

from __future__ import annotations

import nevergrad as ng
import numpy as np
import pytest
from conftest import (
    archive_digests,
    evaluation_digests,
    kill_tree_when,
    merged,
    run_snakemake,
    write_config,
)

from evocamp.base.seeding import optimizer_seeds
from evocamp.config import run_spec, validate_config
from evocamp.families.nevergrad import metamodel_float_shim, nevergrad_seeds
from evocamp.model.runspec import spec_run_key
from evocamp.results import load_evaluations

pytestmark = pytest.mark.slow

CONFIG = {
    "campaign": "libraries",
    "master_seed": 11,
    "generations": 4,
    "shards": 2,
    "checkpoint_every": 2,
    "seeds": 1,
    "storage": {"keep_evaluations": True},
    "algorithms": {
        "ngopt": {"type": "nevergrad", "optimizer": "NGOpt", "batch_size": 5, "budget": 20},
        "tpe": {"type": "optuna", "sampler": "tpe", "batch_size": 4},
    },
    "domains": {"rastrigin": {"type": "plain_rastrigin", "solution_dim": 3}},
}


@pytest.fixture(scope="module")
def libraries_done(tmp_path_factory):
    """One uninterrupted run of the campaign (2 shards, shard mode)."""
    workdir = tmp_path_factory.mktemp("libraries")
    write_config(workdir, CONFIG)
    run_snakemake(workdir, "runs")
    return workdir


def nevergrads_own_solutions(count: int, objective) -> np.ndarray:
    """Nevergrad's own loop in one process with the run's seed, x0 and bounds (and the
    shim, without which NGOpt's MetaModel fails under numpy 2.4)."""
    metamodel_float_shim()
    spec = run_spec(validate_config(CONFIG), algorithm="ngopt", domain="rastrigin", seed=0)
    own, global_seed = nevergrad_seeds(
        optimizer_seeds(spec["master_seed"], spec_run_key(spec), 1)[0]
    )
    domain = spec["domain_spec"]
    np.random.seed(global_seed)
    array = ng.p.Array(
        init=np.full(3, domain["x0"], dtype=np.float64),
        lower=domain["bounds"][0],
        upper=domain["bounds"][1],
    )
    array.random_state = np.random.RandomState(own)
    optimizer = ng.optimizers.registry["NGOpt"](parametrization=array, budget=20, num_workers=5)
    evaluated = []
    while len(evaluated) < count:
        candidates = [optimizer.ask() for _ in range(5)]
        evaluated += [c.value for c in candidates]
        for candidate in candidates:
            optimizer.tell(candidate, -float(objective(candidate.value)))
    assert optimizer.optim.name == "MetaModel"
    return np.array(evaluated[:count])


def test_nevergrad_evaluates_what_its_own_loop_evaluates(libraries_done):
    rows = load_evaluations(libraries_done / "results" / "libraries", solutions=True)
    run = rows[rows.algorithm == "ngopt"].sort_values(["generation", "index"])
    solutions = run[[f"solution_{i}" for i in range(3)]].to_numpy()
    told = dict(zip(map(bytes, (s.tobytes() for s in solutions)), run.objective, strict=True))
    assert len(run) == 4 * 5
    own = nevergrads_own_solutions(len(run), lambda x: told[np.asarray(x, np.float64).tobytes()])
    assert np.array_equal(solutions, own)
    tpe = rows[rows.algorithm == "tpe"]
    assert tpe.groupby("generation").size().tolist() == [4, 4, 4, 4]


def test_dask_mode_with_3_shards_killed_and_rerun_gives_the_same_results(libraries_done, tmp_path):
    """Another mode and shard count, SIGKILLed once a generation-2 checkpoint is kept,
    then rerun: the archives and evaluations of the uninterrupted shard-mode run."""
    config = merged(CONFIG, {"shards": 3, "mode": "dask", "dask": {"workers": 2}})
    write_config(tmp_path, config)
    kept = tmp_path / "results"
    assert kill_tree_when(tmp_path, lambda: any(kept.rglob("checkpoints/gen_000002.h5"))), (
        "the campaign finished before the kill"
    )
    run_snakemake(tmp_path, "runs")
    assert archive_digests(tmp_path) == archive_digests(libraries_done)
    assert evaluation_digests(tmp_path) == evaluation_digests(libraries_done)


def test_asynchronous_mode_killed_and_rerun_gives_the_uninterrupted_results(tmp_path):
    """Asynchronous mode (one ask and one tell per completion: Nevergrad with its
    num_workers, Optuna): a run SIGKILLed once its generation-2 checkpoint is kept and
    rerun ends with the archives and evaluations of an uninterrupted one."""
    config = merged(CONFIG, {"mode": "async", "generations": 3})
    digests = []
    for kill in (False, True):
        workdir = tmp_path / ("killed" if kill else "whole")
        workdir.mkdir()
        write_config(workdir, config)
        if kill:
            kept = workdir / "results"
            assert kill_tree_when(workdir, lambda k=kept: any(k.rglob("checkpoints/gen_000002.h5")))
        run_snakemake(workdir, "runs")
        digests.append((archive_digests(workdir), evaluation_digests(workdir)))
    assert digests[0] == digests[1]
    assert len(digests[0][0]) == 2
