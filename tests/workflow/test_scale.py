"""Long campaigns and the Dask mode."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
from conftest import (
    REPO,
    archive_digests,
    assert_one_numeric_environment,
    evaluation_digests,
    job_log_text,
    merged,
    run_folder,
    run_snakemake,
    write_config,
)

TRIVIAL_RUN = {
    "campaign": "long",
    "master_seed": 11,
    "shards": 8,
    "seeds": 1,
    "algorithms": {"me": {"type": "map_elites", "batch_size": 8, "archive": {"dims": [8, 8]}}},
    "domains": {"sphere": {"type": "sphere", "solution_dim": 4}},
}


def test_dask_mode_matches_shard_mode(
    tmp_path, small_config, reference_small, reference_small_evaluations
):
    """Bitwise equal to shard mode (archives, and kept evaluations but their measured
    seconds); utilisation counts the Dask workers (2), not the shards (3)."""
    write_config(tmp_path, merged(small_config, {"mode": "dask"}))
    run_snakemake(tmp_path, "runs")
    assert archive_digests(tmp_path) == reference_small
    assert evaluation_digests(tmp_path) == reference_small_evaluations
    kept = run_folder(tmp_path, small_config, "me", "sphere", 0) / "checkpoints"
    with h5py.File(kept / "gen_000003.h5", "r") as handle:
        assert "evaluations" not in handle, "segment jobs record their rows, not the checkpoint"
    metrics = np.genfromtxt(
        run_folder(tmp_path, small_config, "me", "sphere", 0) / "metrics.csv",
        delimiter=",",
        names=True,
    )[1:]
    np.testing.assert_allclose(
        metrics["utilisation"], metrics["eval_seconds"] / (metrics["wall_seconds"] * 2)
    )
    assert_one_numeric_environment(run_folder(tmp_path, small_config, "me", "sphere", 0), 6)
    log = job_log_text(tmp_path, "small", "me/sphere/seed0", "gen_000003/segment.log")
    assert "[tcp://127.0.0.1:" in log, "worker lines carry the worker's address"
    assert "me/sphere/seed0: generation 3/6" in log


def test_dask_mode_with_an_existing_cluster(
    tmp_path, small_config, reference_small, scheduler_file
):
    config = merged(small_config, {"mode": "dask", "dask": {"scheduler_file": str(scheduler_file)}})
    workdir = tmp_path / "campaign"
    write_config(workdir, config)
    run_snakemake(workdir, "runs")
    assert archive_digests(workdir) == reference_small


def test_ten_thousand_generation_campaigns_plan_one_window_and_resume(tmp_path):
    """A 10,000-generation campaign plans one window at a time: fresh, it plans
    generations 1..K; after 400 generations (run in Dask mode, two windows re-planned)
    a shard-mode resume plans only the next window. Running on extends the finished run
    without recomputing (to 600: the same checkpoint path as to 10,000, at a size that
    fits CI; benchmarks/dag_build.py measures planning up to 10,000)."""
    config = merged(
        TRIVIAL_RUN,
        {
            "generations": 400,
            "checkpoint_every": 200,
            "mode": "dask",
            "dask": {"workers": 1},
            "shards": 1,
        },
    )
    ten_thousand_in_shard_mode = {"generations": 10_000, "mode": "shards"}
    fresh = tmp_path / "fresh"
    write_config(fresh, merged(config, ten_thousand_in_shard_mode))
    dry = run_snakemake(fresh, "--dry-run", timeout=300)
    assert "gen=000200" in dry.stdout + dry.stderr
    assert "gen=000201" not in dry.stdout + dry.stderr

    write_config(tmp_path, config)
    run_snakemake(tmp_path, "runs", timeout=3000)
    write_config(tmp_path, merged(config, ten_thousand_in_shard_mode))
    dry = run_snakemake(tmp_path, "--dry-run", timeout=300)
    planned = dry.stdout + dry.stderr
    assert "gen=000401" in planned and "gen=000600" in planned
    assert "gen=000601" not in planned and "gen=000399" not in planned

    write_config(tmp_path, merged(config, {"generations": 600}))
    again = run_snakemake(tmp_path, "runs", timeout=3000)
    assert "initialise" not in again.stdout + again.stderr.split("Job stats")[0]
    folder = run_folder(tmp_path, config, "me", "sphere", 0)
    metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
    assert list(metrics["generation"]) == list(range(601))
    assert metrics["evaluations"][-1] == 4_800
    kept = sorted(p.name for p in (folder / "checkpoints").iterdir())
    assert kept == [f"gen_{g:06d}.h5" for g in (0, 200, 400, 600)]


def test_benchmark_scripts_run(tmp_path):
    """The DAG benchmark runs end to end at a small size and prints its table."""
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "dag_build.py"),
            "--generations",
            "100",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    assert "| generations |" in completed.stdout


def test_es_traffic_benchmark_meets_its_byte_target_at_a_small_size():
    """The ES benchmark runs and, at M = 20,000 and P = 100, the batch and shard files
    of a generation fit 16 (M + P) + 64 KiB."""
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "es_traffic.py"),
            "--dims",
            "20000",
            "--popsizes",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO / "benchmarks",
    )
    assert completed.returncode == 0, completed.stderr
    row = next(line for line in completed.stdout.splitlines() if line.startswith("| 20,000 |"))
    assert row.split("|")[5].strip() == "yes"
