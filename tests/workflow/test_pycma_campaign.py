"""The pycma family (a family from another library) through the real workflow: IPOP- and
BIPOP-CMA-ES restart every generation on a flat objective, so every generation's batch
has another size; the evaluations are bitwise those of ``cma.fmin2`` with the run's
seed, and the same in shard mode (2 shards) and in Dask mode (7 shards) killed and
rerun."""

from __future__ import annotations

import cma
import numpy as np
import pytest
from conftest import (
    PLUGINS,
    archive_digests,
    evaluation_digests,
    kill_tree_when,
    merged,
    run_snakemake,
    write_config,
)

from evocamp.base.seeding import optimizer_seeds
from evocamp.config import run_spec, validate_config
from evocamp.families.pycma import QUIET, pycma_seed
from evocamp.model.runspec import spec_run_key
from evocamp.results import load_evaluations

pytestmark = pytest.mark.slow

CONFIG = {
    "campaign": "pycma",
    "master_seed": 5,
    "generations": 3,
    "shards": 2,
    "checkpoint_every": 2,
    "seeds": 1,
    "storage": {"keep_evaluations": True},
    "algorithms": {"ipop": {"type": "ipop_cma_es"}, "bipop": {"type": "bipop_cma_es"}},
    "domains": {
        "flat": {
            "type": "plugin",
            "function": "evocamp_test_plugin:plateau",
            "python_path": str(PLUGINS),
            "solution_dim": 3,
            "bounds": [-3, 3],  # pycma's boundary transformation: genotypes across steps
            "measure_ranges": [[-3, 3], [-3, 3]],
        }
    },
}


@pytest.fixture(scope="module")
def pycma_done(tmp_path_factory):
    """One uninterrupted run of the campaign (2 shards, shard mode)."""
    workdir = tmp_path_factory.mktemp("pycma")
    write_config(workdir, CONFIG)
    run_snakemake(workdir, "runs")
    return workdir


def fmin2_solutions(algorithm: str, count: int) -> np.ndarray:
    """The first ``count`` solutions ``cma.fmin2`` evaluates on the flat objective with
    the run's seed, x0, sigma, population and bounds."""
    spec = run_spec(validate_config(CONFIG), algorithm=algorithm, domain="flat", seed=0)
    seed = optimizer_seeds(spec["master_seed"], spec_run_key(spec), 1)[0]
    options = {
        **QUIET,
        "seed": pycma_seed(seed),
        "popsize": spec["algorithm_spec"]["popsize"],
        "bounds": spec["domain_spec"]["bounds"],
    }
    evaluated = []

    def flat(x):
        evaluated.append(np.array(x))
        return 0.0

    x0 = np.full(3, spec["domain_spec"]["x0"], dtype=np.float64)
    bipop = spec["algorithm_spec"]["type"] == "bipop_cma_es"
    algorithm_spec = spec["algorithm_spec"]
    cma.fmin2(
        flat,
        x0,
        algorithm_spec["sigma"],
        options,
        restarts=6,
        bipop=bipop,
        incpopsize=algorithm_spec["incpopsize"],
    )
    return np.array(evaluated[:count])


def test_every_generation_is_a_restart_and_evaluates_what_fmin2_evaluates(pycma_done):
    rows = load_evaluations(pycma_done / "results" / "pycma", solutions=True)
    for algorithm in ("ipop", "bipop"):
        run = rows[rows.algorithm == algorithm].sort_values(["generation", "index"])
        sizes = run.groupby("generation").size().tolist()
        solutions = run[[f"solution_{i}" for i in range(3)]].to_numpy()
        assert np.array_equal(solutions, fmin2_solutions(algorithm, len(run))), algorithm
        assert len(sizes) == 3 and sizes[0] == 7, (algorithm, sizes)
        assert len(set(sizes)) == 3, (algorithm, sizes)  # another population per restart
    ipop = rows[rows.algorithm == "ipop"].groupby("generation").size().tolist()
    assert ipop == [7, 14, 28]


def test_dask_mode_with_7_shards_killed_and_rerun_gives_the_same_results(pycma_done, tmp_path):
    """Another mode and shard count (one solution per shard in the first generation),
    SIGKILLed once its generation-2 checkpoint is kept, then rerun: the archives and
    evaluations of the uninterrupted shard-mode run."""
    config = merged(CONFIG, {"shards": 7, "mode": "dask", "dask": {"workers": 2}})
    write_config(tmp_path, config)
    kept = tmp_path / "results"
    assert kill_tree_when(tmp_path, lambda: any(kept.rglob("checkpoints/gen_000002.h5"))), (
        "the campaign finished before the kill"
    )
    run_snakemake(tmp_path, "runs")
    assert archive_digests(tmp_path) == archive_digests(pycma_done)
    assert evaluation_digests(tmp_path) == evaluation_digests(pycma_done)
