"""A MuJoCo locomotion campaign (walker2d_uni, 30-step rollouts of a small MLP) with the
real Snakemake: bitwise the same archives with 3 shards in shard mode and 2 shards in
Dask mode, from x0 and from a random initial population."""

from __future__ import annotations

import numpy as np
from conftest import archive_digests, merged, run_folder, run_snakemake, write_config

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
            "archive": {"cells": 16, "cvt_samples": 2000},
        },
        "me_random": {
            "type": "cvt_map_elites_line",
            "emitter_batch_size": 6,
            "initial_population": "random",
            "archive": {"cells": 16, "cvt_samples": 2000},
        },
        "oes": {"type": "openai_es", "popsize": 6, "sigma": 0.1, "archive": {"dims": [4, 4]}},
    },
    "domains": {
        "walker": {"type": "walker2d_uni", "params": {"hidden": [4], "episode_length": 30}}
    },
}


def test_walker2d_uni_archives_are_the_same_in_shard_and_dask_modes(tmp_path):
    shards = tmp_path / "shards"
    write_config(shards, CONFIG)
    run_snakemake(shards, "runs", timeout=900)
    reference = archive_digests(shards)
    assert len(reference) == 3
    metrics = np.genfromtxt(
        run_folder(shards, CONFIG, "me", "walker", 0) / "metrics.csv", delimiter=",", names=True
    )
    assert metrics["num_elites"][-1] > 0
    dask = tmp_path / "dask"
    write_config(dask, merged(CONFIG, {"shards": 2, "mode": "dask", "dask": {"workers": 2}}))
    run_snakemake(dask, "runs", timeout=900)
    assert archive_digests(dask) == reference
