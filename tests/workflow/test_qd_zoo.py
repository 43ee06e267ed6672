"""Issue 24's algorithms (novelty search, NSLC, DNS, BOP-Elites, bandit CMA-ME, density
descent, CMA-ES) in one small campaign: real Snakemake, real HDF5, the arm domain.
Results are bitwise the same with 3 shards in shard mode, 1 and 8 shards in Dask mode,
and after a SIGKILL and a rerun."""

from __future__ import annotations

import numpy as np
import pytest
from campaigns import QD_ZOO_CAMPAIGN
from conftest import (
    archive_digests,
    kill_tree_when,
    merged,
    run_folder,
    run_snakemake,
    write_config,
)

CONFIG = QD_ZOO_CAMPAIGN


@pytest.fixture(scope="module")
def zoo_done(tmp_path_factory):
    """One uninterrupted run of the campaign (3 shards, shard mode)."""
    workdir = tmp_path_factory.mktemp("qd_zoo")
    write_config(workdir, CONFIG)
    run_snakemake(workdir, "runs", timeout=1200)
    return workdir


def metrics_of(workdir, algorithm: str) -> np.ndarray:
    folder = run_folder(workdir, CONFIG, algorithm, "arm", 0)
    return np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)


def test_every_type_fills_its_grid_archive_and_metrics(zoo_done):
    assert len(archive_digests(zoo_done)) == len(CONFIG["algorithms"])
    for algorithm in CONFIG["algorithms"]:
        metrics = metrics_of(zoo_done, algorithm)
        assert list(metrics["generation"]) == [0, 1, 2, 3], algorithm
        assert metrics["num_elites"][-1] > 0, algorithm
        # The CQD score of every grid archive, from generation 1 on (empty at 0).
        assert np.isnan(metrics["cqd_score"][0]), algorithm
        assert np.all(np.isfinite(metrics["cqd_score"][1:])), algorithm
    # BOP-Elites: 8 Sobol points, then 8 proposals per generation.
    assert list(metrics_of(zoo_done, "bop")["evaluations"]) == [0, 8, 16, 24]
    # Novelty search, DNS and density descent report their own archive's size.
    for algorithm in ("ns", "nslc", "dns", "dds"):
        sizes = metrics_of(zoo_done, algorithm)["own_archive_size"]
        assert sizes[0] == 0 and sizes[-1] > 0, algorithm
    assert metrics_of(zoo_done, "dns")["own_archive_size"].max() <= 12  # the capacity
    assert np.all(np.isnan(metrics_of(zoo_done, "cmaes")["own_archive_size"]))
    assert np.all(np.isfinite(metrics_of(zoo_done, "cmaes")["sigma"]))


@pytest.mark.parametrize(("shards", "workers"), [(1, 1), (8, 2)])
def test_other_shard_counts_in_dask_mode_give_the_same_archives(
    zoo_done, tmp_path, shards, workers
):
    """1 and 8 shards (one solution per shard for most types, two for novelty search)
    against the 3-shard run."""
    write_config(
        tmp_path,
        merged(CONFIG, {"shards": shards, "mode": "dask", "dask": {"workers": workers}}),
    )
    run_snakemake(tmp_path, "runs", timeout=1200)
    assert archive_digests(tmp_path) == archive_digests(zoo_done)


def test_sigkill_then_rerun_gives_the_same_archives(zoo_done, tmp_path):
    """SIGKILL the whole Snakemake tree as soon as a run has kept its generation-2
    checkpoint (mid-campaign, whatever the machine's speed); the rerun completes with
    the uninterrupted run's archives."""
    write_config(tmp_path, CONFIG)
    kept = tmp_path / "results"
    assert kill_tree_when(tmp_path, lambda: any(kept.rglob("checkpoints/gen_000002.h5"))), (
        "the campaign finished before the kill"
    )
    assert not (tmp_path / "results" / "qd_zoo" / "bop" / "arm" / "seed0" / "archive.h5").exists()
    run_snakemake(tmp_path, "runs", timeout=1200)
    assert archive_digests(tmp_path) == archive_digests(zoo_done)
