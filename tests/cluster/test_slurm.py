"""The HPC path against a real single-node Slurm cluster (scripts/local-slurm)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
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
    evaluation_digests,
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


#: Held shared by every test module that uses the local cluster (pytest-xdist runs
#: several at once, one per worker), exclusively to stop it.
CLUSTER_LOCK = Path("/var/tmp/evocamp-slurm-tests.lock")
#: Present while the cluster runs because a test module started it (it was not running
#: before): the last module that uses it stops it then.
STARTED_BY_TESTS = Path("/var/tmp/evocamp-slurm-tests.started")


@pytest.fixture(scope="module")
def slurm_cluster():
    """Start the local cluster (installing Slurm if needed) and hold it for the module;
    the last module of any worker that holds it stops it, if the tests started it. (A
    module that stopped it when it ended stopped it under another worker's tests.)"""
    with open(CLUSTER_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        running = subprocess.run([LOCAL_SLURM, "status"], capture_output=True).returncode == 0
        if not running:
            STARTED_BY_TESTS.touch()
        subprocess.run([LOCAL_SLURM, "start"], check=True, timeout=600)
        yield lock
        fcntl.flock(lock, fcntl.LOCK_UN)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another worker's module holds it: the last one out stops it
        if STARTED_BY_TESTS.exists():
            subprocess.run([LOCAL_SLURM, "stop"], check=True, timeout=120)
            STARTED_BY_TESTS.unlink()


@pytest.fixture
def cluster_alone(slurm_cluster):
    """The local cluster held exclusively, for a test that stops it or its controller:
    it waits until no other worker's module uses it."""
    fcntl.flock(slurm_cluster, fcntl.LOCK_EX)
    yield
    fcntl.flock(slurm_cluster, fcntl.LOCK_SH)


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


def test_local_slurm_script_names_a_cpus_count_it_cannot_apply(slurm_cluster):
    """A running cluster keeps its node's CPUs: asked for another count, start says so."""
    declared = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True)
    cpus = int(declared.stdout.split()[0])
    again = subprocess.run(
        [LOCAL_SLURM, "start"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EVOCAMP_SLURM_CPUS": str(cpus + 1)},
    )
    assert again.returncode == 1
    assert f"its node declares {cpus} CPUs, not {cpus + 1}: stop it" in again.stderr


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
    write_config(tmp_path, {**config, "group_shards": True})
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


def test_a_generations_shards_go_to_slurm_as_one_array_job(slurm_cluster, tmp_path, local_tiny):
    """With ``--slurm-array-jobs=evaluate`` (no Snakemake group declared by default), a
    generation's 4 shards are one ``sbatch`` call, and the archives are the local run's."""
    config, local = local_tiny
    write_config(tmp_path, config)
    completed = run_snakemake(
        tmp_path, "--profile", SLURM_PROFILE, "--slurm-array-jobs=evaluate", "--until", "finalise"
    )
    text = completed.stdout + completed.stderr
    assert "group job" not in text.lower()
    assert text.count("Submitted array job") == config["generations"], text[-3000:]
    assert "has been submitted with SLURM jobid" not in text, "no shard submitted alone"
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


def queued_jobs() -> list[str]:
    """Every job Slurm knows, in any state."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    return out.split()


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


def test_stop_moves_the_configuration_aside_and_start_restores_it(cluster_alone):
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


# Faults of the cluster itself (issue 31, point 6; docs/hpc.md "Faults on the cluster").


def run_id_of(output: str) -> str:
    """The Slurm plugin's run ID in a Snakemake invocation's output (its jobs' name)."""
    return re.search(r"SLURM run ID: (\S+)", output).group(1)


def slurm_jobs_of(output: str) -> dict[str, dict[str, str]]:
    """State, time limit and comment (rule and wildcards) of every Slurm job of the
    Snakemake invocation whose output is ``output`` (its jobs carry its run ID as name)."""
    lines = subprocess.run(
        ["squeue", "-h", "-t", "all", "--name", run_id_of(output), "-o", "%i|%T|%l|%k"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    fields = [line.split("|") for line in lines if line.strip()]
    return {
        job: {"state": state, "limit": limit, "comment": comment}
        for job, state, limit, comment in fields
    }


def assert_each_evaluation_counted_once(workdir: Path, config: dict, *, batch: int) -> None:
    """Every generation's metrics row counts ``batch`` new evaluations, and the run's
    evaluations.h5 holds one row per (generation, index), none twice."""
    import h5py
    import numpy as np

    from evocamp.model.metrics import read_metrics_csv

    folder = run_folder(workdir, config, "me", "sphere", 0)
    generations = config["generations"]
    evaluations = read_metrics_csv(folder / "metrics.csv")["evaluations"]
    assert list(evaluations) == [batch * g for g in range(generations + 1)]
    with h5py.File(folder / "evaluations.h5", "r") as file:
        pairs = np.stack([file["evaluations/generation"][:], file["evaluations/index"][:]], axis=1)
    assert len(pairs) == generations * batch
    assert len(np.unique(pairs, axis=0)) == len(pairs), "no evaluation row twice"


def wait_for(condition, *, timeout: float, what: str, poll: float = 0.5) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"{what} within {timeout} s"
        time.sleep(poll)


def test_requeued_and_timed_out_shard_jobs_give_the_undisturbed_archive(slurm_cluster, tmp_path):
    """One generation, two shard jobs that both hang on their first attempt: one is
    requeued by Slurm (`scontrol requeue`) and restarts under the same job ID, the other
    is killed at its 1-minute time limit and retried by Snakemake with 2 minutes. The
    campaign finishes in one invocation with the local run's archive and evaluations,
    every evaluation counted once."""
    config = tiny_config(SMALL_CAMPAIGN, generations=1, checkpoint_every=1, shards=2)
    config["storage"] = {"keep_evaluations": True}
    config["domains"] = plugin_domain()
    config["domains"]["sphere"]["function"] = "evocamp_test_plugin:hangs_first_attempt"
    config["domains"]["sphere"]["chunk_size"] = 100  # one call per shard
    reference, workdir = tmp_path / "reference", tmp_path / "faults"
    write_config(reference, config)
    run_snakemake(reference, "runs")
    write_config(workdir, config)
    hang_once = workdir / "hang-once"
    hang_once.mkdir()
    output = workdir / "snakemake.out"
    with output.open("w") as sink:
        process = subprocess.Popen(
            # Runtime in minutes = attempt: the retry after a time-limit kill gets twice it.
            snakemake_command(
                workdir,
                "runs",
                "--profile",
                SLURM_PROFILE,
                "--set-resources",
                "evaluate:runtime=attempt",
            ),
            cwd=workdir,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: len(list(hang_once.iterdir())) == 2, timeout=120, what="both shards hang")
        requeued = max(squeue_jobs(), key=int)
        subprocess.run(["scontrol", "requeue", requeued], check=True)
        # Slurm holds a requeued job for CredExpire (120 s by default) before it may
        # start again; let it start at once to keep the test short.
        wait_for(lambda: "JobState=PENDING" in scontrol_job(requeued), timeout=60, what="requeued")
        subprocess.run(["scontrol", "update", f"JobId={requeued}", "StartTime=now"], check=True)
        assert process.wait(timeout=400) == 0, output.read_text()[-6000:]
    finally:
        if process.poll() is None:  # a failed test leaves no hanging job behind
            process.kill()
            process.wait()
            subprocess.run(["scancel", "--name", run_id_of(output.read_text())], check=False)
    text = output.read_text()
    assert "Restarts=1" in scontrol_job(requeued), "Slurm restarted the requeued job"
    jobs = slurm_jobs_of(text)
    assert sorted((job["state"], job["limit"]) for job in jobs.values()) == [
        ("COMPLETED", "1:00"),  # the requeued job, restarted under its ID
        ("COMPLETED", "2:00"),  # the retry of the timed-out one, with twice the time
        ("TIMEOUT", "1:00"),
    ], jobs
    assert jobs[requeued]["state"] == "COMPLETED"
    # The plugin names the time limit (its status, as squeue reports it); the Slurm
    # log it names holds slurmstepd's "CANCELLED ... DUE TO TIME LIMIT".
    assert "SLURM status is: 'TIMEOUT'" in text and "Trying to restart" in text
    slurm_log = re.search(r"log: \S+, (\S+/slurm_logs/\S+\.log)", text).group(1)
    assert "DUE TO TIME LIMIT" in Path(slurm_log).read_text()
    assert archive_digests(workdir) == archive_digests(reference)
    assert evaluation_digests(workdir) == evaluation_digests(reference)
    assert_each_evaluation_counted_once(workdir, config, batch=16)


def scontrol_job(job: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True, check=True
    ).stdout


def test_controller_outage_mid_campaign_is_finished_by_a_rerun(cluster_alone, tmp_path, local_tiny):
    """slurmctld stopped for a minute while shard jobs run, then started again: the
    jobs finish under slurmd, but the Slurm plugin's status checks fail meanwhile (on a
    cluster without slurmdbd) and it forgets the jobs, so this Snakemake waits for
    ever (docs/hpc.md). Stopped and rerun, the same command finishes the campaign with
    the local run's archive, every evaluation counted once."""
    config, local = local_tiny
    write_config(tmp_path, config)
    output = tmp_path / "snakemake.out"
    with output.open("w") as sink:
        process = subprocess.Popen(
            snakemake_command(tmp_path, "runs", "--profile", SLURM_PROFILE),
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: squeue_jobs(), timeout=120, what="shard jobs run", poll=0.2)
        subprocess.run([LOCAL_SLURM, "stop-controller"], check=True, timeout=60)
        try:
            time.sleep(60)
        finally:
            subprocess.run([LOCAL_SLURM, "start-controller"], check=True, timeout=120)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        assert process.poll() is None, (
            "the first invocation survived the outage: the Slurm plugin no longer forgets "
            "its jobs; update docs/hpc.md"
        )
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert "Falling back to 'sacct'" in output.read_text()
    # The lost invocation's shard jobs still run Snakemake in the directory: the rerun
    # waits for them (docs/hpc.md), else it refuses to take the directory's lock.
    wait_for(lambda: not queued_jobs(), timeout=300, what="the lost jobs end", poll=1)
    run_snakemake(tmp_path, "runs", "--profile", SLURM_PROFILE)
    assert archive_digests(tmp_path) == local
    assert_each_evaluation_counted_once(tmp_path, config, batch=16)
