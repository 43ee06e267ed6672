"""A MuJoCo locomotion campaign (walker2d_uni, 30-step rollouts of a small MLP) with the
real Snakemake: bitwise the same archives with 3 shards in shard mode, 2 shards in Dask
mode and after a SIGKILL of the whole tree mid-generation. The QD runs are
config/qd_rl.yaml's: from a random initial population, CVT-CMA-ME with separable CMA-ES;
both have compact batches from generation 2."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from conftest import (
    archive_digests,
    kill_tree_when,
    merged,
    run_folder,
    run_snakemake,
    write_config,
)

CONFIG = {
    "campaign": "walk",
    "master_seed": 3,
    "generations": 2,
    "shards": 3,
    "checkpoint_every": 2,
    "seeds": 1,
    "algorithms": {
        "me": {
            "type": "cvt_map_elites_line",
            "emitter_batch_size": 6,
            "initial_population": "random",
            "archive": {"cells": 16, "cvt_samples": 2000},
        },
        "oes": {"type": "openai_es", "popsize": 6, "sigma": 0.1, "archive": {"dims": [4, 4]}},
        # config/qd_rl.yaml's CMA-ME: separable CMA-ES (no bounds: compact batches).
        "cma": {
            "type": "cvt_cma_me",
            "es": "sep_cma_es",
            "emitter_batch_size": 6,
            "initial_population": "random",
            "archive": {"cells": 16, "cvt_samples": 2000},
        },
    },
    "domains": {
        "walker": {"type": "walker2d_uni", "params": {"hidden": [4], "episode_length": 30}}
    },
}


@pytest.fixture(scope="module")
def walk_done(tmp_path_factory):
    """The campaign run once, uninterrupted, in shard mode (3 shards)."""
    workdir = tmp_path_factory.mktemp("walk")
    write_config(workdir, CONFIG)
    run_snakemake(workdir, "runs", timeout=900)
    return workdir


def test_walker2d_uni_archives_are_the_same_in_shard_and_dask_modes(walk_done, tmp_path):
    reference = archive_digests(walk_done)
    assert len(reference) == 3
    for algorithm, field in (("me", "parents"), ("cma", "es_mean")):
        state = run_folder(walk_done, CONFIG, algorithm, "walker", 0) / "checkpoints"
        with h5py.File(state / "gen_000002.h5") as f:
            assert field in f["next_batch"] and "solutions" not in f["next_batch"], algorithm
    metrics = np.genfromtxt(
        run_folder(walk_done, CONFIG, "me", "walker", 0) / "metrics.csv", delimiter=",", names=True
    )
    assert metrics["num_elites"][-1] > 0
    dask = tmp_path / "dask"
    write_config(dask, merged(CONFIG, {"shards": 2, "mode": "dask", "dask": {"workers": 2}}))
    run_snakemake(dask, "runs", timeout=900)
    assert archive_digests(dask) == reference


def test_a_sigkill_mid_generation_then_rerun_gives_the_same_archives(walk_done, tmp_path):
    """SIGKILL the whole Snakemake tree as soon as a shard of generation 2 (the last)
    is written, the generation's other shards and its tell not yet done; the rerun
    completes with the uninterrupted run's archives."""
    write_config(tmp_path, CONFIG)
    results = tmp_path / "results"
    assert kill_tree_when(tmp_path, lambda: any(results.rglob("work/gen_000002/shard_*.h5")))
    run_snakemake(tmp_path, "runs", timeout=900)
    assert archive_digests(tmp_path) == archive_digests(walk_done)
