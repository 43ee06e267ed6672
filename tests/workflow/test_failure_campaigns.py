"""Evaluations that crash, hang or raise, in real campaigns (docs/failures.md): a real
SIGSEGV, a real hang past evaluation.timeout and a real raise, in shard and Dask mode."""

from __future__ import annotations

import contextlib
import csv
import json
import operator
import re
import signal
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import (
    PLUGINS,
    archive_digests,
    kill_tree_after,
    kill_tree_when,
    merged,
    run_folder,
    run_log,
    run_snakemake,
    shard_results,
    write_config,
)

from evocamp.base.seeding import asynchronous_evaluation_seeds, evaluation_seeds, run_key
from evocamp.files.evaluations import read_evaluations


def misbehaving_config(small_config, tmp_path, *, evaluation: dict | None = None, **top):
    """The small campaign's MAP-Elites (batch 16, 6 generations) on the misbehaving
    test plugin, reading the control file ``tmp_path/control``."""
    config = merged(
        small_config,
        {
            "domains": {
                "sphere": {
                    "type": "plugin",
                    "function": "evocamp_test_plugin:misbehaving_sphere",
                    "python_path": str(PLUGINS),
                    "solution_dim": 6,
                    "measure_ranges": [[-3, 3], [-3, 3]],
                    "params": {
                        "control_file": str(tmp_path / "control"),
                        "marker_dir": str(tmp_path),
                    },
                }
            },
            "evaluation": evaluation or {},
            **top,
        },
    )
    config["algorithms"] = {"me": small_config["algorithms"]["me"]}
    return config


def seed_of(config, generation: int, index: int) -> int:
    key = run_key(algorithm="me", domain="sphere", seed=0)
    return int(evaluation_seeds(config["master_seed"], key, generation, 16)[index])


def metrics(workdir, config) -> list[dict]:
    path = run_folder(workdir, config, "me", "sphere", 0) / "metrics.csv"
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_segfault_stops_the_campaign_naming_its_solution(tmp_path, small_config):
    config = misbehaving_config(small_config, tmp_path)
    write_config(tmp_path, config)
    (tmp_path / "control").write_text(f"segfault {seed_of(config, 2, 7)}")
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    assert (
        "evocamp: error: run me/sphere/seed0, generation 2, shard 1, solution 7: "
        "the evaluation's process was killed by signal 11 (SIGSEGV)"
    ) in failed.stderr


#: Deterministic failures (functions of the evaluation seed): about one solution in 13
#: raises, one in 17 segfaults, one in 29 hangs for an hour.
DETERMINISTIC = "raise %13\nsegfault %17\nhang %29"


def test_deterministic_failures_give_one_archive_in_every_mode_and_after_a_kill(
    tmp_path, small_config
):
    """Under discard with a 1 s timeout: shard mode with 3 and 2 shards, Dask mode, and
    shard mode killed twice and rerun give the same archive; metrics.csv counts the
    failures, the hangs and the attempts alike, and the seconds the hangs took."""
    evaluation = {"on_failure": "discard", "timeout": 1.0}
    campaigns = {
        "shards3": {"storage": {"keep_evaluations": True}},
        "shards2": {"shards": 2},
        "dask": {"mode": "dask", "dask": {"workers": 2}},
        "killed": {},
    }
    for name, top in campaigns.items():
        workdir = tmp_path / name
        workdir.mkdir()
        (workdir / "control").write_text(DETERMINISTIC)
        config = misbehaving_config(
            small_config, workdir, evaluation=evaluation, generations=4, **top
        )
        write_config(workdir, config)
        if name == "killed":
            kills = [kill_tree_after(workdir, delay) for delay in (3.5, 5.0)]
            assert -signal.SIGKILL in kills, "the campaign finished before it was killed"
        run_snakemake(workdir, "runs")
    digests = {name: archive_digests(tmp_path / name) for name in campaigns}
    assert len({str(sorted(d.values())) for d in digests.values()}) == 1, digests
    rows = metrics(tmp_path / "shards3", config)
    failed = [int(row["failed"]) for row in rows]
    timed_out = [int(row["timed_out"]) for row in rows]
    assert sum(failed) > 0 and sum(timed_out) > 0
    assert int(rows[-1]["failed_total"]) == sum(failed)
    assert all(int(row["attempts"]) == 16 and row["retries"] == "0" for row in rows[1:])
    assert all(float(row["failed_seconds"]) >= int(row["timed_out"]) for row in rows)
    assert sum(float(row["failed_seconds"]) for row in rows) > 0
    counts = ("failed", "timed_out", "attempts", "retries")
    for name in ("shards2", "dask"):
        assert [[row[c] for c in counts] for row in metrics(tmp_path / name, config)] == [
            [row[c] for c in counts] for row in rows
        ]
    assert_failures_visible(
        tmp_path / "shards3", config, failed=sum(failed), timed_out=sum(timed_out)
    )


def assert_failures_visible(workdir, config, *, failed: int, timed_out: int) -> None:
    """Every failure in evaluations.h5 (status column, NaN values), in the job logs,
    in `evocamp status` and in the campaign table."""
    from evocamp.reporting.comparison import final_metrics_table, load_runs, table_csv
    from evocamp.reporting.status import status_report
    from evocamp.results import load_evaluations

    folder = run_folder(workdir, config, "me", "sphere", 0)
    campaign = folder.parents[2]
    frame = load_evaluations(campaign)
    lost = frame[frame["status"] != "ok"]
    assert len(lost) == failed and (lost["status"] == "timed_out").sum() == timed_out
    assert lost["objective"].isna().all()
    assert lost["message"].str.startswith("run me/sphere/seed0, generation ").all()
    crashed = lost[lost["status"] == "crashed"]
    assert (
        len(crashed) and crashed["message"].str.contains("signal 11 (SIGSEGV)", regex=False).all()
    )
    assert (frame[frame["status"] == "ok"]["message"] == "").all()
    assert (frame["attempts"] == 1).all()  # discard: nothing retried
    assert frame[frame["status"] == "ok"]["objective"].notna().all()
    logs = "".join(path.read_text() for path in workdir.rglob("*.log"))
    assert logs.count("(discarded)") == failed
    assert f"me/sphere/seed0: {failed} failed, {timed_out} of them timed out" in status_report(
        campaign, plots=False
    )
    table = table_csv(final_metrics_table(load_runs([folder / "metrics.csv"]), samples=100, seed=0))
    header, row = table.splitlines()[:2]
    assert header.split(",")[4] == "failed" and row.split(",")[4] == str(failed)


def test_a_transient_crash_retried_leaves_the_archive_of_a_run_without_it(tmp_path, small_config):
    clean = tmp_path / "clean"
    clean.mkdir()
    write_config(clean, misbehaving_config(small_config, clean))
    run_snakemake(clean, "runs")
    config = misbehaving_config(
        small_config, tmp_path, evaluation={"on_failure": "retry", "retries": 1}
    )
    write_config(tmp_path, config)
    (tmp_path / "control").write_text("segfault_once %7")
    run_snakemake(tmp_path, "runs")
    assert archive_digests(tmp_path) == archive_digests(clean)
    crashed = [path for path in tmp_path.iterdir() if path.name.startswith("crashed-")]
    assert crashed
    rows = metrics(tmp_path, config)
    assert all(int(row["failed"]) == 0 for row in rows)
    assert sum(int(row["retries"]) for row in rows) == len(crashed)
    assert all(int(row["attempts"]) == 16 + int(row["retries"]) for row in rows[1:])
    assert all(float(row["failed_seconds"]) > 0 for row in rows if int(row["retries"]))
    logs = "".join(path.read_text() for path in tmp_path.rglob("*.log"))
    assert logs.count("killed by signal 11 (SIGSEGV); attempt 2 of 2 follows") == len(crashed)


def test_asynchronous_mode_discards_the_same_failures_on_any_worker_count(tmp_path, small_config):
    """Asynchronous mode (virtual clock, 3 slots) under discard: a real raise, SIGSEGV
    and hang are failed completions, never told; 1 and 2 Dask workers give one archive,
    and the metrics count the same failures."""
    runs = {}
    for workers in (1, 2):
        workdir = tmp_path / f"workers{workers}"
        workdir.mkdir()
        (workdir / "control").write_text(DETERMINISTIC)
        config = misbehaving_config(
            small_config,
            workdir,
            evaluation={"on_failure": "discard", "timeout": 1.0},
            mode="async",
            generations=4,
            **{"async": {"slots": 3}, "dask": {"workers": workers}},
        )
        write_config(workdir, config)
        run_snakemake(workdir, "runs")
        runs[workers] = (archive_digests(workdir), metrics(workdir, config))
    assert runs[1][0] == runs[2][0]
    failed = [int(row["failed"]) for row in runs[1][1]]
    assert sum(failed) > 0 and failed == [int(row["failed"]) for row in runs[2][1]]
    for name in ("attempts", "retries", "timed_out"):
        assert [row[name] for row in runs[1][1]] == [row[name] for row in runs[2][1]], name
    log = run_folder(tmp_path / "workers1", config, "me", "sphere", 0) / "completions.jsonl"
    statuses = [json.loads(line).get("status", 0) for line in log.read_text().splitlines()]
    assert sum(1 for status in statuses if status) >= sum(failed)


def test_asynchronous_failures_are_logged_once_and_evaluated_once_across_a_kill(
    tmp_path, small_config
):
    """Asynchronous mode (2 segments), killed in its first segment after a failure was
    logged, then rerun: every failed completion told has exactly one `(discarded)` line
    in the run's logs (the rerun tells the killed attempt's completions from the log and
    says so again; a completion evaluated after a segment's end is told, and named, by
    the next), no evaluation started after the kill runs twice (a segment waits for
    those in flight at its end and the next tells them from the log), and the segment
    line counts them."""
    (tmp_path / "control").write_text("note %1\nslow %1\nraise %5\n")
    config = misbehaving_config(
        small_config,
        tmp_path,
        evaluation={"on_failure": "discard"},
        mode="async",
        generations=4,
        checkpoint_every=2,
        **{"async": {"slots": 3}, "dask": {"workers": 2}},
    )
    write_config(tmp_path, config)
    run = run_folder(tmp_path, config, "me", "sphere", 0)
    completions = run / "completions.jsonl"

    def a_failure_logged() -> bool:
        lines = completions.read_text().splitlines() if completions.exists() else []
        return len(lines) >= 6 and any('"status"' in line for line in lines[:-1])

    assert kill_tree_when(tmp_path, a_failure_logged)
    noted_at_kill = len((tmp_path / "evaluated").read_text().splitlines())
    run_snakemake(tmp_path, "runs")
    rows = read_evaluations(run / "evaluations.h5")
    assert len(rows.failures) > 0
    logs = "".join(path.read_text() for path in sorted((tmp_path / "results").rglob("*.log")))
    discarded = sorted(line for line in logs.splitlines() if line.endswith("(discarded)"))
    assert discarded == sorted(
        f"evocamp: warning: {message} (discarded)" for message in rows.failures.values()
    )
    after_kill = (tmp_path / "evaluated").read_text().splitlines()[noted_at_kill:]
    assert len(after_kill) == len(set(after_kill)), "an evaluation ran twice"
    assert re.search(r"generation 2: \d+ completions beyond it logged for the next segment", logs)


@pytest.mark.parametrize("mode", ["dask", "async"])
def test_a_dask_segment_log_holds_one_line_per_failure_and_a_bounded_output(
    tmp_path, small_config, mode
):
    """Dask and asynchronous mode under stop: an evaluation that prints 10 MB leaves its
    first and last 32 kB in the segment's log with a line saying what was dropped (not
    in Snakemake's own output), and one that raises stops the segment with evocamp's
    one line, without distributed's "Compute Failed" block before it."""
    config = misbehaving_config(
        small_config,
        tmp_path,
        mode=mode,
        generations=2,
        checkpoint_every=2,
        **{"async": {"slots": 2}, "dask": {"workers": 2}},
    )
    write_config(tmp_path, config)
    key = run_key(algorithm="me", domain="sphere", seed=0)
    shouting = (
        seed_of(config, 1, 2)
        if mode == "dask"
        else int(asynchronous_evaluation_seeds(config["master_seed"], key, [1])[0])
    )
    (tmp_path / "control").write_text(f"shout {shouting}\nraise %7\n")
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    assert len(failed.stdout) + len(failed.stderr) < 200_000
    log = (run_log(tmp_path, "small", "me/sphere/seed0", "gen_000002/segment.log")).read_text()
    assert len(log) < 200_000
    assert "bytes of the evaluation's output dropped here" in log
    assert "Compute Failed" not in log
    (error,) = [line for line in log.splitlines() if line.startswith("evocamp: error: ")]
    assert "the evaluation function raised ValueError: simulated failure for seed" in error


def test_a_dask_worker_killed_again_and_again_is_named_as_its_shard(tmp_path, small_config):
    """The evaluation of one solution kills the Dask worker that runs it (as the kernel's
    out-of-memory killer would): under retry Dask starts the task again on another
    worker evaluation.retries times (without retry: Dask's default, 3), and after the
    last allowed attempt the segment stops with one line naming the shard."""
    allowed = 1
    config = misbehaving_config(
        small_config,
        tmp_path,
        evaluation={"on_failure": "retry", "retries": allowed},
        mode="dask",
        dask={"workers": 2},
    )
    write_config(tmp_path, config)
    (tmp_path / "control").write_text(f"kill_parent {seed_of(config, 1, 3)}")
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    assert (
        "evocamp: error: run me/sphere/seed0, generation 1, shard 0: the Dask workers "
        f"evaluating it died {allowed + 1} times (distributed.scheduler.allowed-failures: "
        f"{allowed}; the last was"
    ) in failed.stderr


def dask_workers() -> list:
    """The Dask worker processes of this process's LocalClusters (psutil processes):
    the children of its multiprocessing fork server."""
    import psutil

    me, workers = psutil.Process(), []
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.ppid() != me.pid and "forkserver" in " ".join(child.cmdline()):
                workers.append(child)
    return workers


@contextlib.contextmanager
def workers_killed_as_they_start(count: int) -> Iterator[list[int]]:
    """SIGKILL the first ``count`` Dask worker processes of this process's LocalClusters
    as soon as they exist, polling every 5 ms in a thread; yields the list of pids
    killed so far."""
    import psutil

    killed, stop = [], threading.Event()

    def kill() -> None:
        while len(killed) < count and not stop.is_set():
            for worker in dask_workers():
                with contextlib.suppress(psutil.Error):
                    worker.kill()
                    killed.append(worker.pid)
            stop.wait(0.005)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    try:
        yield killed
    finally:
        stop.set()
        thread.join()


def test_a_dask_worker_killed_while_the_cluster_starts_is_started_again():
    """A worker killed while a segment's LocalCluster starts (benchmarks/chaos.py found
    it: distributed's `RuntimeError: Nanny failed to start.` ended the segment) makes
    the cluster start again, as often as a task whose worker died is run again; when
    every start loses its worker, one line says so."""
    from evocamp.base.errors import EvaluationError
    from evocamp.executors.dask_cluster import dask_client

    with (
        workers_killed_as_they_start(1) as killed,
        dask_client(scheduler_file=None, workers=1, allowed_failures=1, where="run a") as client,
    ):
        assert client.submit(operator.add, 1, 2).result() == 3
    assert len(killed) == 1
    with workers_killed_as_they_start(10) as killed, pytest.raises(EvaluationError) as caught:
        with dask_client(scheduler_file=None, workers=1, allowed_failures=1, where="run b"):
            pass
    assert len(killed) == 2
    assert str(caught.value) == (
        "run b: the Dask LocalCluster of 1 worker(s) failed to start 2 times (the last: "
        "Nanny failed to start. Nanny failed to start worker process): a worker process "
        "died while starting (killed? out of memory? its own error, if any, is in this "
        "log above)"
    )


@pytest.mark.parametrize("entry", [{"type": "map_elites"}, {"type": "openai_es", "popsize": 8}])
def test_a_generation_sent_as_a_dask_worker_dies_runs_on_the_others(entry):
    """A worker killed just before a generation's tasks are sent (benchmarks/chaos.py
    found both: a client.run on every worker, and an ES batch broadcast to every worker,
    failed with CommClosedError while the scheduler still listed the dead worker): the
    generation runs, and its archive is bitwise that of the shard step run here."""
    from evocamp.config import run_spec, validate_config
    from evocamp.executors.dask_cluster import dask_client
    from evocamp.executors.dask_mode import run_generations
    from evocamp.loop.engine import initialise, tell

    config = validate_config(
        {
            "algorithms": {"a": {**entry, "archive": {"dims": [4, 4]}}},
            "domains": {"s": {"type": "sphere", "solution_dim": 4}},
        }
    )
    state = initialise(run_spec(config, algorithm="a", domain="s", seed=0))
    expected = tell(state, shard_results(state, 2)).archive.data()
    with dask_client(scheduler_file=None, workers=2, where="run a") as client:
        dask_workers()[0].kill()
        told = run_generations(state, until=1, shards=2, client=client, workers=2, total=1)
    assert told.generation == 1
    archive = told.archive.data()
    assert archive.keys() == expected.keys()
    for name, values in expected.items():
        np.testing.assert_array_equal(archive[name], values, err_msg=name)
