"""Every evaluation supervised as a whole process tree, in a real campaign and on a
real Dask worker (docs/failures.md, "What is killed"): the processes that evaluations
start, which ignore SIGTERM, are all gone after a campaign with a 2 s timeout, and
after the Dask worker running an evaluation was killed. The unit tests
(tests/unit/test_process_trees.py) cover timeouts, retries, crashes and killed steps
one by one."""

from __future__ import annotations

import os

import pytest
from conftest import PLUGINS, run_folder, run_snakemake, running, write_config
from test_failure_campaigns import misbehaving_config

from evocamp.base.supervised import KILL_GRACE_SECONDS
from evocamp.files.evaluations import read_evaluations
from evocamp.files.shard import STATUS

pytestmark = pytest.mark.slow


def test_a_campaign_with_a_2_s_timeout_leaves_no_process_running(tmp_path, small_config):
    """The issue's campaign: evaluations that start helpers (a program through
    subprocess that starts its own child, a forked helper; all ignore SIGTERM), some of
    them then hanging past a 2 s evaluation.timeout, under discard. When Snakemake has
    finished, not one of those processes runs, and the hung ones are recorded as
    timed out."""
    config = misbehaving_config(
        small_config,
        tmp_path,
        evaluation={"on_failure": "discard", "timeout": 2.0},
        generations=2,
        checkpoint_every=2,
        shards=2,
        seeds=1,
        storage={"keep_evaluations": True},
    )
    (tmp_path / "control").write_text("tree %5\nhang %10")
    write_config(tmp_path, config)
    run_snakemake(tmp_path, "runs")
    pids = [int(line) for line in (tmp_path / "tree").read_text().split()]
    assert running(pids, within=KILL_GRACE_SECONDS + 5) == []
    rows = read_evaluations(run_folder(tmp_path, config, "me", "sphere", 0) / "evaluations.h5")
    assert len(pids) == 4 * sum(int(seed) % 5 == 0 for seed in rows.seed)
    hung = sum(int(seed) % 10 == 0 for seed in rows.seed)
    assert 0 < hung == int((rows.status == STATUS["timed_out"]).sum())


def test_a_killed_dask_worker_takes_its_evaluations_processes_with_it(tmp_path):
    """The Dask worker running an evaluation dies (SIGKILL, as the out-of-memory killer
    or a lost node would end it) after the evaluation started its helpers: they are
    all gone within the grace, the worker being beyond any cleanup of its own."""
    from distributed import KilledWorker

    from evocamp.executors.dask_cluster import dask_client

    pidfile = tmp_path / "tree"
    with dask_client(scheduler_file=None, workers=1, allowed_failures=0, where="test") as client:
        client.run(lambda: os.sys.path.insert(0, str(PLUGINS)))
        worker = next(iter(client.run(os.getpid).values()))
        future = client.submit(_tree_then_kill_parent, str(pidfile), pure=False)
        with pytest.raises(KilledWorker):
            future.result(timeout=120)
    pids = [int(line) for line in pidfile.read_text().split()]
    assert len(pids) == 4
    assert not os.path.exists(f"/proc/{worker}") or running([worker]) == []
    assert running(pids, within=KILL_GRACE_SECONDS + 5) == []


def _tree_then_kill_parent(pidfile: str) -> list:
    """A supervised evaluation that starts a process tree and then kills the process
    that started it, a Dask worker (a worker lost with an evaluation in flight)."""
    import signal
    import time

    from evocamp_test_plugin import process_tree

    from evocamp.base.supervised import supervised

    def task(k):
        process_tree(pidfile)
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(600)

    return list(supervised(task, 1))
