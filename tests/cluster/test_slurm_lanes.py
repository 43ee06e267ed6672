"""A shard's allocation on the local Slurm cluster: a shard job asks for
evaluation.concurrency x ranks cores (docs/hpc.md, "Evaluations several at once, MPI
ranks and GPUs"), and an evaluation run through ``srun`` ends with its tasks
(docs/failures.md, "What is killed, how and when")."""

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


def test_a_timed_out_srun_evaluation_leaves_no_task_and_no_job(slurm_cluster, tmp_path):  # noqa: F811
    """A ``command`` domain's program run through ``srun -n 2`` (its tasks are
    slurmstepd's children, not the evaluation's), each task a tree that ignores SIGTERM:
    past evaluation.timeout the shard step's SIGTERM to the evaluation's group reaches
    srun, which ends its step: no task process is left and no Slurm job."""
    import sys

    import numpy as np
    from conftest import PLUGINS, running

    from evocamp.catalogue.factory import resolve_run
    from evocamp.config import run_spec, validate_config
    from evocamp.files.shard import STATUS
    from evocamp.loop.evaluation import evaluate_slice

    pidfile, name = tmp_path / "tree", f"evocamp-srun-{tmp_path.name}"
    node = [sys.executable, "-S", str(PLUGINS / "tree_node.py"), str(pidfile), "2"]
    config = validate_config(
        {
            "algorithms": {"me": {"type": "map_elites", "emitters": 1, "emitter_batch_size": 4}},
            "domains": {
                "d": {
                    "type": "command",
                    "command": ["srun", "-J", name, "-n", "2", "-t", "3", *node],
                    "solution_dim": 4,
                    "measure_ranges": [[-4, 4], [-4, 4]],
                    "work_root": str(tmp_path / "scratch"),
                }
            },
            "evaluation": {"on_failure": "discard", "timeout": 3.0},
        }
    )
    spec = run_spec(config, algorithm="me", domain="d", seed=0)
    result = evaluate_slice(
        resolve_run(spec),
        generation=1,
        shard=0,
        start=0,
        solutions=np.zeros((1, 4)),
        seeds=np.array([5]),
    )
    assert result.status.tolist() == [STATUS["timed_out"]]
    pids = [int(pid) for pid in pidfile.read_text().split()]
    assert len(pids) == 4, "2 tasks, each with a child"
    assert running(pids, within=10.0) == []
    jobs = subprocess.run(["squeue", "-h", "--name", name], capture_output=True, text=True)
    assert jobs.returncode == 0 and jobs.stdout.strip() == "", jobs.stdout
