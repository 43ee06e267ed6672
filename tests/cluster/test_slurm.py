"""The HPC path against a real single-node Slurm cluster (scripts/local-slurm)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    PLUGINS,
    REPO,
    SMALL_CAMPAIGN,
    archive_digests,
    merged,
    run_folder,
    run_log,
    run_snakemake,
    snakemake_command,
    write_config,
)

pytestmark = pytest.mark.slurm
SLURM_PROFILE = str(REPO / "profiles" / "slurm")
LOCAL_SLURM = str(REPO / "scripts" / "local-slurm")


@pytest.fixture(scope="module")
def slurm_cluster():
    """Start the local cluster (installing Slurm if needed); stop it if we started it."""
    was_running = subprocess.run([LOCAL_SLURM, "status"], capture_output=True).returncode == 0
    subprocess.run([LOCAL_SLURM, "start"], check=True, timeout=600)
    yield
    if not was_running:
        subprocess.run([LOCAL_SLURM, "stop"], check=True, timeout=120)


def tiny_config(small_config: dict, **overrides) -> dict:
    config = merged(small_config, {"generations": 3, "checkpoint_every": 3, **overrides})
    config["algorithms"] = {"me": small_config["algorithms"]["me"]}
    return config


def run_locally_and_on_slurm(tmp_path: Path, config: dict) -> tuple[Path, Path]:
    """The campaign run locally and with the Slurm profile; their two folders."""
    local, slurm = tmp_path / "local", tmp_path / "slurm"
    for workdir in (local, slurm):
        write_config(workdir, config)
    run_snakemake(local, "runs")
    completed = run_snakemake(slurm, "runs", "--profile", SLURM_PROFILE)
    assert "has been submitted with SLURM jobid" in completed.stdout + completed.stderr
    return local, slurm


def plugin_domain(**params) -> dict:
    return {
        "sphere": {
            "type": "plugin",
            "function": "evocamp_test_plugin:noisy_sphere",
            "python_path": str(PLUGINS),
            "solution_dim": 6,
            "measure_ranges": [[-3, 3], [-3, 3]],
            "params": params,
        }
    }


def test_local_slurm_script_is_idempotent(slurm_cluster):
    again = subprocess.run([LOCAL_SLURM, "start"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0
    assert "already running" in again.stderr
    status = subprocess.run([LOCAL_SLURM, "status"], capture_output=True, text=True)
    assert "idle" in status.stdout or "mix" in status.stdout


@pytest.fixture(scope="module")
def local_tiny(tmp_path_factory):
    """A local run of the tiny campaign that the Slurm runs are compared with."""
    config = tiny_config(SMALL_CAMPAIGN, generations=2, shards=4)
    workdir = tmp_path_factory.mktemp("local_tiny")
    write_config(workdir, config)
    run_snakemake(workdir, "runs")
    return config, archive_digests(workdir)


def test_slurm_run_with_grouped_shards_matches_local_run(slurm_cluster, tmp_path, local_tiny):
    """Shards submitted as Slurm jobs, two per job (group-components), give the local
    run's archives bit for bit."""
    config, local = local_tiny
    write_config(tmp_path, config)
    completed = run_snakemake(
        tmp_path,
        "--profile",
        SLURM_PROFILE,
        "--group-components",
        "evaluate_{algorithm}_{domain}_{seed}_{gen}=2",
        "--until",
        "finalise",
    )
    text = completed.stdout + completed.stderr
    assert "has been submitted with SLURM jobid" in text
    assert text.count("Group job evaluate_me_sphere_0_000001 ") == 2, "4 shards in 2 jobs"
    assert text.count("Group job evaluate_me_sphere_0_000002 ") == 2
    assert archive_digests(tmp_path) == local


def test_decentralised_bo_on_slurm_matches_local_run(slurm_cluster, tmp_path):
    """Decentralised qUCB: the shard jobs on Slurm fit their surrogates and propose; the
    run equals the local one bit for bit (same shard count)."""
    from conftest import BO_CAMPAIGN

    from evocamp.model.metrics import read_metrics_csv

    config = merged(BO_CAMPAIGN, {"generations": 2, "checkpoint_every": 2, "shards": 2})
    config["algorithms"] = {"dec": merged(BO_CAMPAIGN["algorithms"]["dec"], {"initial_points": 3})}
    local, slurm = run_locally_and_on_slurm(tmp_path, config)
    assert archive_digests(slurm) == archive_digests(local)
    rows = read_metrics_csv(run_folder(slurm, config, "dec", "ackley4", 0) / "metrics.csv")
    assert rows["fit_seconds"][2] > 0, "generation 2's shards fitted their surrogates"


def test_newer_qd_types_on_slurm_match_the_local_run(slurm_cluster, tmp_path):
    """Every type of issue 24 (novelty search with and without local competition, DNS,
    BOP-Elites, bandit CMA-ME, density descent, CMA-ES): shard jobs on Slurm give the
    local run's archives bit for bit."""
    from campaigns import QD_ZOO_CAMPAIGN

    config = merged(QD_ZOO_CAMPAIGN, {"generations": 2, "shards": 2})
    local, slurm = run_locally_and_on_slurm(tmp_path, config)
    assert len(archive_digests(local)) == len(QD_ZOO_CAMPAIGN["algorithms"]) == 7
    assert archive_digests(slurm) == archive_digests(local)


def test_shard_failing_once_succeeds_on_retry(slurm_cluster, tmp_path, small_config):
    config = tiny_config(small_config, generations=1, checkpoint_every=1, shards=2)
    config["domains"] = plugin_domain()
    config["domains"]["sphere"]["function"] = "evocamp_test_plugin:fails_first_attempt"
    config["domains"]["sphere"]["params"] = {"marker_dir": str(tmp_path / "markers")}
    config["domains"]["sphere"]["chunk_size"] = 100  # one call per shard
    write_config(tmp_path, config)
    completed = run_snakemake(tmp_path, "runs", "--profile", SLURM_PROFILE)
    assert len(list((tmp_path / "markers").iterdir())) == 2, "each shard failed once"
    assert "Trying to restart" in completed.stdout + completed.stderr
    assert (run_folder(tmp_path, config, "me", "sphere", 0) / "archive.h5").exists()


def test_always_failing_shard_stops_the_run_with_its_error(slurm_cluster, tmp_path, small_config):
    from evocamp.base.seeding import evaluation_seeds, run_key

    control = tmp_path / "control"
    config = tiny_config(small_config, generations=2, checkpoint_every=1)
    config["domains"] = plugin_domain(control_file=str(control))
    seed = evaluation_seeds(
        config["master_seed"], run_key(algorithm="me", domain="sphere", seed=0), 1, 16
    )[3]
    control.write_text(f"raise {int(seed)}")
    write_config(tmp_path, config)
    failed = run_snakemake(
        tmp_path, "runs", "--profile", SLURM_PROFILE, "--retries", "0", check=False
    )
    assert failed.returncode != 0
    message = (
        "evocamp: error: run me/sphere/seed0, generation 1, shard 0, solution 3: "
        "the evaluation function raised ValueError"
    )
    log = run_log(tmp_path, "small", "me/sphere/seed0", "gen_000001/evaluate_000.log")
    assert message in log.read_text()
    assert message in failed.stdout + failed.stderr
    folder = run_folder(tmp_path, config, "me", "sphere", 0)
    assert (folder / "checkpoints" / "gen_000000.h5").exists()
    assert not (folder / "archive.h5").exists()


def squeue_jobs() -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "-o", "%i %j"], capture_output=True, text=True
    ).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def test_scancel_mid_run_is_survived_by_rerunning(slurm_cluster, tmp_path, small_config):
    config = tiny_config(small_config, generations=1, checkpoint_every=1, shards=2)
    config["domains"] = plugin_domain(sleep=0.5)  # 8 calls: a shard job runs about 4 s
    reference = tmp_path / "reference"
    write_config(reference, config)
    run_snakemake(reference, "runs")
    workdir = tmp_path / "cancelled"
    write_config(workdir, config)
    process = subprocess.Popen(
        snakemake_command(workdir, "--profile", SLURM_PROFILE, "--retries", "0"),
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    deadline = time.time() + 180
    cancelled = None
    while time.time() < deadline and cancelled is None:
        running = squeue_jobs()
        if running:
            cancelled = running[0]
            subprocess.run(["scancel", cancelled], check=True)
        time.sleep(0.5)
    assert cancelled is not None, "no shard job was seen running"
    first = process.wait(timeout=600)
    assert first != 0, "the cancelled job should fail the first invocation"
    run_snakemake(workdir, "runs", "--profile", SLURM_PROFILE)
    assert archive_digests(workdir) == archive_digests(reference)


def test_dask_and_async_modes_on_a_dask_jobqueue_slurm_cluster(slurm_cluster, tmp_path, local_tiny):
    """dask-jobqueue's SLURMCluster on the local cluster; campaigns connect to it
    through a scheduler file: Dask mode matches a local shard-mode run bitwise, and an
    asynchronous run (virtual clock, 4 slots on the 2 Slurm workers) matches the same
    campaign run on a LocalCluster."""
    from campaigns import ASYNC_CAMPAIGN
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    config, local = local_tiny
    async_config = merged(ASYNC_CAMPAIGN, {"generations": 3, "checkpoint_every": 2})
    async_config["algorithms"] = {"dec": ASYNC_CAMPAIGN["algorithms"]["dec"]}
    write_config(tmp_path / "async_local", async_config)
    run_snakemake(tmp_path / "async_local", "runs")

    scheduler_file = tmp_path / "scheduler.json"
    with SLURMCluster(
        cores=1,
        processes=1,
        memory="1GB",
        walltime="00:20:00",
        queue="debug",
        account="evocamp",
        interface="lo",
        python=sys.executable,
        log_directory=str(tmp_path / "dask-logs"),
        scheduler_options={"dashboard_address": None},
    ) as cluster:
        cluster.scale(jobs=2)
        with Client(cluster) as client:
            client.wait_for_workers(2, timeout=180)
            client.write_scheduler_file(str(scheduler_file))
            workdir = tmp_path / "dask"
            write_config(
                workdir,
                merged(config, {"mode": "dask", "dask": {"scheduler_file": str(scheduler_file)}}),
            )
            run_snakemake(workdir, "runs")
            async_workdir = tmp_path / "async_slurm"
            write_config(
                async_workdir,
                merged(async_config, {"dask": {"scheduler_file": str(scheduler_file)}}),
            )
            run_snakemake(async_workdir, "runs")
            workers = set(client.scheduler_info()["workers"])
    assert len(workers) == 2
    assert archive_digests(workdir) == local
    assert len(archive_digests(async_workdir)) == 1
    assert archive_digests(async_workdir) == archive_digests(tmp_path / "async_local")
    log = run_folder(async_workdir, async_config, "dec", "ackley4", 0) / "completions.jsonl"
    assert len(log.read_text().splitlines()) >= 3 * 6, "3 generations of 6 completions"
    worker_logs = "".join(p.read_text() for p in (tmp_path / "dask-logs").iterdir())
    for address in workers:
        assert f"[{address}] generation 2 shard" in worker_logs, "lines carry the address"


def test_stop_moves_the_configuration_aside_and_start_restores_it(slurm_cluster):
    """A stopped local cluster leaves no slurm.conf naming a controller that is down:
    the Slurm plugin's `scontrol show config` at every Snakemake start then fails at once
    instead of waiting about 9 s (docs/hpc.md)."""
    conf = Path("/etc/slurm/slurm.conf")
    subprocess.run([LOCAL_SLURM, "stop"], check=True, timeout=120)
    try:
        assert not conf.exists() and conf.with_name("slurm.conf.stopped").exists()
        scontrol = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=60
        )
        assert scontrol.returncode != 0
    finally:
        subprocess.run([LOCAL_SLURM, "start"], check=True, timeout=600)
    assert "written by evocamp scripts/local-slurm" in conf.read_text()
    assert not conf.with_name("slurm.conf.stopped").exists()
