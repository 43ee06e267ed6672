"""Chaos on the local Slurm cluster, small (issue 42; the benchmark is
``benchmarks/slurm_chaos.py``, whose campaign and checks this test runs): a program
of 4 processes started by ``srun --overlap --exact -n 4`` in each shard job, whose
evaluations crash, hang and fail, under ``retry`` then ``discard`` with a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from conftest import REPO, run_snakemake, snakemake_command, write_config
from test_slurm import SLURM_PROFILE, slurm_cluster, wait_for  # noqa: F401

sys.path.insert(0, str(REPO / "benchmarks"))
import slurm_chaos  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
#: Shares of crashes, hangs and fails: master seed 12 gives 2, 1 and 2 of the 32.
SHARES = {"CHAOS_CRASH": "0.1", "CHAOS_HANG": "0.04", "CHAOS_FAIL": "0.1"}
ARGS = SimpleNamespace(seed=12, generations=2, per_generation=16, ranks=4, timeout=8.0)


def chaos_run(workdir, *, shards: int) -> dict:
    """Write the campaign in ``workdir``; the environment its Snakemake runs with."""
    write_config(workdir, slurm_chaos.campaign(ARGS, shards=shards, concurrency=1, emitters=2))
    return {**SHARES, slurm_chaos.MARKER: workdir.name}


def assert_nothing_left(workdir) -> None:
    assert slurm_chaos.survivors(workdir.name, within=15.0) == [], "a process of the program"
    assert slurm_chaos.campaign_jobs(workdir, states="PENDING,RUNNING,COMPLETING") == {}


def test_crashes_hangs_fails_and_a_scancel_give_the_same_archive(slurm_cluster, tmp_path):  # noqa: F811
    """2 shards undisturbed, then 4 shards with one running shard job cancelled and
    Snakemake rerun: each evaluation kept once, each failure named once with the same
    status and message, the same archive and metrics, and no process of the program nor
    Slurm job left after the timeouts and after the scancel."""
    reference, cancelled = tmp_path / "s2", tmp_path / "s4_scancel"
    env = chaos_run(reference, shards=2)
    run_snakemake(reference, "runs", "--profile", SLURM_PROFILE, cores=64, env=env)
    assert_nothing_left(reference)
    statuses = slurm_chaos.check("s2", reference, args=ARGS)
    assert statuses == {"ok": 27, "crashed": 2, "failed": 2, "timed_out": 1}

    env = chaos_run(cancelled, shards=4)
    first = subprocess.Popen(
        snakemake_command(
            cancelled, "runs", "--profile", SLURM_PROFILE, "--retries", "0", cores=64
        ),
        cwd=cancelled,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    try:
        wait_for(lambda: slurm_chaos.running_shard_jobs(cancelled), timeout=180, what="a shard job")
        time.sleep(3)  # an evaluation in flight
        job = sorted(slurm_chaos.running_shard_jobs(cancelled))[0]
        subprocess.run(["scancel", job], check=True)
        assert first.wait(timeout=300) != 0, "the cancelled job fails the first invocation"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert_nothing_left(cancelled)
    run_snakemake(cancelled, "runs", "--profile", SLURM_PROFILE, cores=64, env=env)
    assert_nothing_left(cancelled)
    assert slurm_chaos.check("s4", cancelled, args=ARGS) == statuses
    assert slurm_chaos.same_as(cancelled, reference) == []
