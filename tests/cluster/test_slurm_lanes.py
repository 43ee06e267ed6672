"""A shard job on the local Slurm cluster asks for evaluation.concurrency x ranks
cores (docs/hpc.md, "Evaluations several at once, MPI ranks and GPUs")."""

from __future__ import annotations

import subprocess

import pytest
from conftest import run_snakemake, write_config
from test_slurm import SLURM_PROFILE, run_id_of, slurm_cluster, tiny_config  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_a_shard_job_gets_concurrency_cores(slurm_cluster, tmp_path, small_config):  # noqa: F811
    config = tiny_config(small_config, generations=1, evaluation={"concurrency": 2})
    write_config(tmp_path, config)
    completed = run_snakemake(tmp_path, "runs", "--profile", SLURM_PROFILE)
    lines = subprocess.run(
        ["squeue", "-h", "-t", "all", "--name", run_id_of(completed.stdout + completed.stderr)]
        + ["-o", "%C|%k"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    cpus = {line.split("|")[1]: int(line.split("|")[0]) for line in lines if "|" in line}
    # squeue's comment: the rule and its wildcards (the plugin's)
    evaluate = [count for comment, count in cpus.items() if comment.startswith("rule_evaluate")]
    assert evaluate and set(evaluate) == {2}, cpus
