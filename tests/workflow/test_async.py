"""Asynchronous mode end to end with real Snakemake and real Dask clusters: the virtual
clock makes runs bitwise identical across Dask worker counts, a LocalCluster and an
existing scheduler, and SIGKILLs; a real-clock run resumed after a kill keeps its log
and is reproduced by replaying it; ``evocamp replay`` reproduces finished runs."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
from campaigns import ASYNC_CAMPAIGN
from conftest import (
    archive_digests,
    assert_one_numeric_environment,
    kill_tree_when,
    merged,
    run_folder,
    run_snakemake,
    write_config,
)

from evocamp.files.evaluations import read_evaluations


def log_lines(workdir, config, algorithm: str) -> list[str]:
    path = run_folder(workdir, config, algorithm, "ackley4", 0) / "completions.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def results_of(lines: list[str]) -> dict[int, tuple]:
    """What a log says about each evaluation, timings left out."""
    records = [json.loads(line) for line in lines]
    return {
        r["evaluation"]: (r["slot"], r["solution"], r["objective"], r["measures"]) for r in records
    }


def replay(run) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evocamp", "replay", str(run)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def reference_async(tmp_path_factory):
    """The asynchronous campaign, uninterrupted, on a LocalCluster of 2 workers."""
    workdir = tmp_path_factory.mktemp("reference_async")
    write_config(workdir, ASYNC_CAMPAIGN)
    run_snakemake(workdir, "runs")
    return workdir


def test_replay_reproduces_every_finished_run(reference_async):
    config = ASYNC_CAMPAIGN
    for algorithm in config["algorithms"]:
        run = run_folder(reference_async, config, algorithm, "ackley4", 0)
        metrics = np.genfromtxt(run / "metrics.csv", delimiter=",", names=True)
        per_generation = 4 if algorithm == "mine" else 6  # a plugin's generation: its slots
        assert list(metrics["evaluations"]) == [per_generation * g for g in range(7)]
        assert len(log_lines(reference_async, config, algorithm)) >= 6 * per_generation
        assert_one_numeric_environment(run, 6)
        if algorithm != "mine":  # BO runs keep their evaluations by default
            spec = json.loads(next(run.glob("finished/gen_*.json")).read_text())["run_spec"]
            rows = read_evaluations(run / "evaluations.h5", spec=spec)
            logged = results_of(log_lines(reference_async, config, algorithm))
            assert list(rows.generation) == [g for g in range(1, 7) for _ in range(6)]
            assert len(set(rows.index)) == 36  # evaluation ids, each told once
            assert all((np.diff(rows.index[rows.generation == g]) > 0).all() for g in range(1, 7))
            for index, objective, solution in zip(
                rows.index, rows.objective, rows.solution, strict=True
            ):
                assert logged[int(index)][2] == objective
                assert logged[int(index)][1] == list(solution)
        replayed = replay(run)
        assert replayed.returncode == 0, replayed.stderr
        assert "bitwise identical to" in replayed.stderr
        assert (run / "replayed_archive.h5").read_bytes() == (run / "archive.h5").read_bytes()


def test_virtual_clock_runs_match_across_workers_clusters_and_kills(
    tmp_path, reference_async, scheduler_file
):
    """Killed in the first segment (1 worker), killed again in the second (8 workers),
    finished on an existing cluster (2 workers): the archives are those of the
    uninterrupted run, and every logged result is the reference's."""
    config = copy.deepcopy(ASYNC_CAMPAIGN)
    workdir = tmp_path / "campaign"
    write_config(workdir, merged(config, {"dask": {"workers": 1}}))
    assert kill_tree_when(workdir, lambda: len(log_lines(workdir, config, "dec")) >= 3)
    first_kill = len(log_lines(workdir, config, "dec"))
    write_config(workdir, merged(config, {"dask": {"workers": 8}}))
    kept = run_folder(workdir, config, "dec", "ackley4", 0) / "checkpoints/gen_000003.h5"
    assert kill_tree_when(
        workdir,
        lambda: kept.exists() and len(log_lines(workdir, config, "dec")) >= 21,
    )
    write_config(workdir, merged(config, {"dask": {"scheduler_file": str(scheduler_file)}}))
    run_snakemake(workdir, "runs")
    assert archive_digests(workdir) == archive_digests(reference_async)
    for algorithm in config["algorithms"]:
        mine = results_of(log_lines(workdir, config, algorithm))
        reference = results_of(log_lines(reference_async, config, algorithm))
        common = sorted(set(mine) & set(reference))
        assert len(common) >= 24
        assert [mine[e] for e in common] == [reference[e] for e in common]
    assert first_kill >= 3


def test_real_clock_resume_keeps_the_log_and_replays_bitwise(tmp_path):
    """Real clock: told in arrival order. After a kill the log kept so far is the prefix
    of the finished run's log, and replaying the log reproduces the archive."""
    config = merged(ASYNC_CAMPAIGN, {"campaign": "bo_real", "async": {"clock": "real"}})
    config["algorithms"] = {"dec": config["algorithms"]["dec"]}
    workdir = tmp_path / "campaign"
    write_config(workdir, config)
    assert kill_tree_when(workdir, lambda: len(log_lines(workdir, config, "dec")) >= 14)
    before = log_lines(workdir, config, "dec")
    run_snakemake(workdir, "runs")
    after = log_lines(workdir, config, "dec")
    assert after[: len(before)] == before
    run = run_folder(workdir, config, "dec", "ackley4", 0)
    spec = json.loads(next(run.glob("finished/gen_*.json")).read_text())["run_spec"]
    assert spec["asynchronous"] == {"slots": 4, "clock": "real"}
    replayed = replay(run)
    assert replayed.returncode == 0, replayed.stderr


def test_proposals_ahead_on_dask_are_those_made_in_process(tmp_path):
    """``async.propose_ahead`` through Snakemake on a LocalCluster: the Dask workers make
    their slots' next proposals while they evaluate, and every logged result is the one
    the loop gives evaluating in process (the virtual clock); ``evocamp replay`` gives
    the run's archive bit for bit."""
    from evocamp.config import run_spec, validate_config
    from evocamp.loop.asynchronous import (
        AsynchronousLoop,
        Resume,
        evaluate_in_process,
        initialise_asynchronous,
    )

    config = merged(ASYNC_CAMPAIGN, {"async": {"propose_ahead": True}})
    config["algorithms"] = {"dec": config["algorithms"]["dec"]}
    workdir = tmp_path / "campaign"
    write_config(workdir, config)
    run_snakemake(workdir, "runs")
    spec = run_spec(validate_config(config), algorithm="dec", domain="ackley4", seed=0)
    assert spec["asynchronous"]["propose_ahead"] is True
    submit, wait = evaluate_in_process(spec)
    in_process = []
    AsynchronousLoop(
        initialise_asynchronous(spec),
        resume=Resume.from_log([], told=0, spec=spec),
        submit=submit,
        wait=wait,
        record=lambda completion: in_process.append(completion.to_json()),
        workers=2,
    ).run(until=config["generations"])
    logged = results_of(log_lines(workdir, config, "dec"))
    expected = results_of(in_process)
    assert len(expected) >= 36 and all(logged[e] == expected[e] for e in expected)
    run = run_folder(workdir, config, "dec", "ackley4", 0)
    replayed = replay(run)
    assert replayed.returncode == 0, replayed.stderr
    assert (run / "replayed_archive.h5").read_bytes() == (run / "archive.h5").read_bytes()
