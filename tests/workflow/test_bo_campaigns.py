"""Bayesian optimisation campaigns through the real Snakemake: identical on any executor
and after kills, the shard count as part of the decentralised run, and the figures."""

from __future__ import annotations

import copy
import shutil
import signal

import h5py
import numpy as np
import pytest
from conftest import (
    BO_CAMPAIGN,
    archive_digests,
    evaluation_digests,
    jobs_run,
    kill_tree_after,
    merged,
    run_folder,
    run_snakemake,
    write_config,
)

from evocamp.config import run_spec, validate_config
from evocamp.files.archive import read_archive
from evocamp.reporting.campaign_figures import _campaign_rows
from evocamp.reporting.comparison import load_runs
from evocamp.reporting.status import status_report


@pytest.fixture(scope="module")
def bo_reference(tmp_path_factory):
    """The small BO campaign's runs, finished uninterrupted in shard mode (read only)."""
    workdir = tmp_path_factory.mktemp("bo_reference")
    write_config(workdir, BO_CAMPAIGN)
    run_snakemake(workdir, "runs")
    return workdir


def copied(reference, tmp_path):
    """A copy of a finished campaign folder, to change."""
    workdir = tmp_path / "copy"
    shutil.copytree(reference, workdir, symlinks=True)
    return workdir


def test_bo_campaign_is_identical_on_any_executor_and_after_kills(tmp_path, bo_reference):
    """Shard mode, Dask mode and a shard-mode campaign killed and rerun give bitwise
    identical archives (for the same shard count) and kept evaluations (on by default
    for BO; the decentralised runs' proposed solutions included); the best solutions
    are stored."""
    reference = archive_digests(bo_reference)
    assert len(reference) == 3
    evaluations = evaluation_digests(bo_reference)
    assert len(evaluations) == 3

    dask_mode = tmp_path / "dask"
    write_config(dask_mode, merged(BO_CAMPAIGN, {"mode": "dask", "dask": {"workers": 2}}))
    run_snakemake(dask_mode, "runs")
    assert archive_digests(dask_mode) == reference
    assert evaluation_digests(dask_mode) == evaluations

    killed = tmp_path / "killed"
    write_config(killed, BO_CAMPAIGN)
    assert kill_tree_after(killed, 6.0) == -signal.SIGKILL
    run_snakemake(killed, "runs")
    assert archive_digests(killed) == reference
    assert evaluation_digests(killed) == evaluations

    path = run_folder(bo_reference, BO_CAMPAIGN, "dec", "ackley4", 0) / "archive.h5"
    assert read_archive(path)["file_attrs"]["evaluations"] == 36
    with h5py.File(path) as handle:
        assert handle["best/solution"].shape == (4,)
        assert handle["best/ackley"][()] == pytest.approx(-handle["best/objective"][()])
        best = handle["best/solution"][()], handle["best/objective"][()]
    with h5py.File(path.with_name("evaluations.h5")) as handle:
        rows = handle["evaluations"]
        assert rows["solution"].shape == (36, 4) and rows["extra/ackley"].shape == (36,)
        first = int(np.argmax(rows["objective"][()]))
        assert np.array_equal(rows["solution"][first], best[0])
        assert rows["objective"][first] == best[1]


def test_shard_count_is_part_of_the_decentralised_run(tmp_path, bo_reference):
    """Another shard count makes the decentralised run a new run (recomputed, other
    results); centralised and random search runs are kept."""
    workdir = copied(bo_reference, tmp_path)
    before = archive_digests(workdir)
    write_config(workdir, merged(BO_CAMPAIGN, {"shards": 2}))
    completed = run_snakemake(workdir, "runs")
    after = archive_digests(workdir)
    key = "bo_small/{}/ackley4/seed0"
    assert after[key.format("cen")] == before[key.format("cen")]
    assert after[key.format("rs")] == before[key.format("rs")]
    assert after[key.format("dec")] != before[key.format("dec")]
    assert jobs_run(completed).get("initialise") == 1
    config = validate_config(copy.deepcopy(BO_CAMPAIGN))
    spec = run_spec(config, algorithm="dec", domain="ackley4", seed=0)
    assert spec["algorithm_spec"]["shards"] == 3


def test_bo_figures_show_the_best_ackley_value(tmp_path, bo_reference):
    """The comparison table and `evocamp status` report the best Ackley value (a
    minimum), the table wall time too; the figure has no QD rows for runs without an
    archive."""
    workdir = copied(bo_reference, tmp_path)
    run_snakemake(workdir, "figures")
    folder = workdir / "results" / "bo_small"
    lines = (folder / "tables" / "final_metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = {
        line.split(",")[1]: dict(zip(header, line.split(","), strict=True)) for line in lines[1:]
    }
    for name in ("dec", "cen", "rs"):
        metrics = np.genfromtxt(
            run_folder(workdir, BO_CAMPAIGN, name, "ackley4", 0) / "metrics.csv",
            delimiter=",",
            names=True,
        )
        assert float(rows[name]["best_value_mean"]) == pytest.approx(
            -metrics["best_objective"][-1], rel=1e-12
        )
        assert float(rows[name]["elapsed_seconds_mean"]) == pytest.approx(
            metrics["wall_seconds"].sum(), rel=1e-9
        )
        assert rows[name]["qd_score_mean"] == "nan"
    assert (folder / "figures" / "curves.png").stat().st_size > 5000
    markdown = (folder / "tables" / "final_metrics.md").read_text()
    assert "best value (minimised)" in markdown and "QD score" not in markdown
    status = status_report(folder)
    best = -np.genfromtxt(
        run_folder(workdir, BO_CAMPAIGN, "dec", "ackley4", 0) / "metrics.csv",
        delimiter=",",
        names=True,
    )["best_objective"][-1]
    assert f"{best:.4g} ackley" in status
    assert "best ackley value (min.) of dec/ackley4/seed0" in status

    runs = load_runs(sorted(folder.rglob("metrics.csv")))
    assert {run.minimised for run in runs} == {"ackley"}
    assert _campaign_rows(runs) == [("best", "evaluations"), ("best", "wall seconds")]
