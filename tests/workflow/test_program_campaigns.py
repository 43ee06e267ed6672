"""Evaluations that are programs in real campaigns (``type: command``, docs/programs.md):
a real driver script, with failures chosen by the evaluation seed, gives bitwise the same
archives on 3 and 2 shards, in Dask mode and killed twice and rerun; in asynchronous
mode on 1 and 3 Dask workers; and leaves no work directory after success."""

from __future__ import annotations

import signal
import sys

import pytest
from conftest import (
    REPO,
    archive_digests,
    kill_tree_after,
    merged,
    run_folder,
    run_snakemake,
    write_config,
)

pytestmark = pytest.mark.slow

DRIVER = REPO / "tests" / "programs" / "sphere_driver.py"

#: The driver fails (a `fail` results file) for one seed in 13, crashes (exit status 3)
#: for one in 17.
COMMAND = ["env", "FAIL_EVERY=13", "CRASH_EVERY=17", sys.executable, str(DRIVER)]

DOMAIN = {
    "type": "command",
    "command": COMMAND,
    "solution_dim": 4,
    "bounds": [-1, 1],
    "measure_ranges": [[-2, 2], [-2, 2]],
    "sense": "minimise",
}


def program_config(small_config, workdir, **top) -> dict:
    config = merged(
        small_config,
        {
            "campaign": "programs",
            "generations": 4,
            "checkpoint_every": 2,
            "evaluation": {"on_failure": "discard"},
            **top,
        },
    )
    config["algorithms"] = {"me": small_config["algorithms"]["me"]}
    config["domains"] = {"prog": {**DOMAIN, "work_root": str(workdir / "scratch")}}
    return config


def test_a_program_domain_gives_one_archive_on_any_shards_mode_and_after_kills(
    tmp_path, small_config
):
    campaigns = {
        "shards3": {"storage": {"keep_evaluations": True}},
        "shards2": {"shards": 2},
        "dask": {"mode": "dask", "dask": {"workers": 2}},
        "killed": {},
    }
    for name, top in campaigns.items():
        workdir = tmp_path / name
        config = program_config(small_config, workdir, **top)
        write_config(workdir, config)
        if name == "killed":
            kills = [kill_tree_after(workdir, delay) for delay in (3.0, 4.5)]
            assert -signal.SIGKILL in kills, "the campaign finished before it was killed"
        run_snakemake(workdir, "runs")
    digests = {name: archive_digests(tmp_path / name) for name in campaigns}
    assert len({str(sorted(d.values())) for d in digests.values()}) == 1, digests
    from evocamp.results import load_evaluations

    campaign = run_folder(tmp_path / "shards3", config, "me", "prog", 0).parents[2]
    frame = load_evaluations(campaign)
    messages = list(frame[frame["status"] != "ok"]["message"])
    assert any("results file results.out: line 1 says fail" in text for text in messages)
    assert any("the program exited with status 3" in text for text in messages)
    assert frame[frame["status"] == "ok"]["objective"].notna().all()
    # Work directories: only the failed ones are kept (at most keep_work_max, 20).
    kept = list((tmp_path / "shards3" / "scratch" / "evocamp-work").glob("*/programs/*/*/*/g*/s*"))
    assert 0 < len(kept) <= 20
    assert {folder.name for folder in kept} <= {f"s{index}" for index in range(16)}


def test_a_program_domain_in_asynchronous_mode_on_any_worker_count(tmp_path, small_config):
    archives = []
    for workers in (1, 3):
        workdir = tmp_path / f"workers{workers}"
        config = program_config(
            small_config,
            workdir,
            mode="async",
            generations=3,
            dask={"workers": workers},
            **{"async": {"slots": 3}},
        )
        config["algorithms"] = {"rs": {"type": "random_search", "batch_size": 6}}
        write_config(workdir, config)
        run_snakemake(workdir, "runs")
        archives.append(archive_digests(workdir))
    assert archives[0] == archives[1]
