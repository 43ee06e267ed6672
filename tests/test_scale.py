"""Long campaigns and the Dask mode."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import (
    REPO,
    archive_digests,
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


def test_dask_mode_matches_shard_mode(tmp_path, small_config, reference_small):
    write_config(tmp_path, merged(small_config, {"mode": "dask"}))
    run_snakemake(tmp_path)
    assert archive_digests(tmp_path) == reference_small
    log = job_log_text(tmp_path, "small", "me/sphere/seed0", "gen_000003/segment.log")
    assert "[tcp://127.0.0.1:" in log, "worker lines carry the worker's address"
    assert "me/sphere/seed0: generation 3/6" in log


@pytest.fixture
def scheduler_file(tmp_path):
    """A Dask cluster started by the test: a scheduler and two workers on loopback."""
    path = tmp_path / "scheduler.json"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--scheduler-file",
                str(path),
                "--host",
                "127.0.0.1",
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    deadline = time.time() + 60
    while not path.exists() and time.time() < deadline:
        time.sleep(0.2)
    for _ in range(2):
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(path),
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    yield path
    for process in reversed(processes):
        process.terminate()
        process.wait(timeout=30)


def test_dask_mode_with_an_existing_cluster(
    tmp_path, small_config, reference_small, scheduler_file
):
    config = merged(small_config, {"mode": "dask", "dask": {"scheduler_file": str(scheduler_file)}})
    workdir = tmp_path / "campaign"
    write_config(workdir, config)
    run_snakemake(workdir)
    assert archive_digests(workdir) == reference_small


def test_ten_thousand_generations_run_and_resume(tmp_path):
    """10,000 generations: half in Dask mode; then a shard-mode (8 shards) resume plans
    only the next window; then the rest completes, extending the finished run."""
    config = merged(
        TRIVIAL_RUN,
        {
            "generations": 5_000,
            "checkpoint_every": 500,
            "mode": "dask",
            "dask": {"workers": 1},
            "shards": 1,
        },
    )
    write_config(tmp_path, config)
    run_snakemake(tmp_path, timeout=3000)

    write_config(tmp_path, merged(config, {"generations": 10_000, "mode": "shards", "shards": 8}))
    dry = run_snakemake(tmp_path, "--dry-run", timeout=300)
    planned = dry.stdout + dry.stderr
    assert "gen=005001" in planned and "gen=005500" in planned
    assert "gen=005501" not in planned and "gen=004999" not in planned

    write_config(tmp_path, merged(config, {"generations": 10_000}))
    run_snakemake(tmp_path, timeout=3000)
    folder = run_folder(tmp_path, config, "me", "sphere", 0)
    metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
    assert list(metrics["generation"]) == list(range(10_001))
    assert metrics["evaluations"][-1] == 80_000
    kept = sorted(p.name for p in (folder / "checkpoints").iterdir())
    assert len(kept) == 21 and kept[-1] == "gen_010000.h5"

    fresh = tmp_path / "fresh"
    write_config(fresh, merged(config, {"generations": 10_000, "mode": "shards", "shards": 8}))
    dry = run_snakemake(fresh, "--dry-run", timeout=300)
    assert "gen=000500" in dry.stdout + dry.stderr
    assert "gen=000501" not in dry.stdout + dry.stderr


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
