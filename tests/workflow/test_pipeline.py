"""End-to-end: the real Snakemake runs small campaigns into real HDF5 files."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import (
    PLUGINS,
    REPO,
    archive_digests,
    assert_one_numeric_environment,
    evaluation_digests,
    executed,
    job_log_text,
    merged,
    run_folder,
    run_snakemake,
    write_config,
)

from evocamp.base.seeding import evaluation_seeds, run_key
from evocamp.config import load_config_file
from evocamp.files.hdf5 import SCHEMA_VERSION


def test_small_campaign_outputs(small_campaign_done, small_config):
    """A campaign leaves archives, metrics, kept checkpoints and figures, and no work files."""
    tmp_path = small_campaign_done
    for algorithm in ("me", "cmame"):
        folder = run_folder(tmp_path, small_config, algorithm, "sphere", 0)
        with h5py.File(folder / "archive.h5", "r") as handle:
            assert handle.attrs["schema_version"] == SCHEMA_VERSION
            assert handle.attrs["generation"] == 6
            assert handle.attrs["evaluations"] == 6 * 16
            archive = handle["archive"]
            elites = len(archive["objective"])
            assert 0 < elites <= 100
            assert archive["solution"].shape == (elites, 6)
            assert archive["measures"].shape == (elites, 2)
            assert np.all(np.diff(archive["index"][()]) > 0), "elites sorted by cell"
            assert np.all((archive["objective"][()] >= 0) & (archive["objective"][()] <= 100))
        metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
        assert list(metrics["generation"]) == list(range(7))
        assert list(metrics["evaluations"]) == [16 * g for g in range(7)]
        assert np.all(np.diff(metrics["qd_score"]) >= 0), "elitist archive never loses score"
        assert metrics["num_elites"][-1] == elites
        kept = sorted(p.name for p in (folder / "checkpoints").iterdir())
        assert kept == ["gen_000000.h5", "gen_000003.h5", "gen_000006.h5"]
        assert not list((folder / "work").rglob("*.h5")), "working files are removed"
        assert_one_numeric_environment(folder, 6)
        for name in ("heatmap", "curves"):
            for suffix in (".pdf", ".png"):
                assert (folder / "figures" / f"{name}{suffix}").stat().st_size > 1000
        # Few files: one folded log per kept window, no per-job logs, no working files.
        logs = tmp_path / "results" / "small" / "logs" / algorithm / "sphere" / "seed0"
        assert sorted(p.name for p in logs.iterdir()) == [
            "finalise.log",
            "initialise.log",
            "plot_run.log",
            "window_000003.log",
            "window_000006.log",
        ]
        progress = job_log_text(
            tmp_path, "small", f"{algorithm}/sphere/seed0", "gen_000005/tell.log"
        )
        assert f"{algorithm}/sphere/seed0: generation 5/6 |" in progress
        shard = job_log_text(
            tmp_path, "small", f"{algorithm}/sphere/seed0", "gen_000002/evaluate_001.log"
        )
        assert "generation 2 shard 1/3: solutions" in shard
        assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == sorted(
            ["archive.h5", "metrics.csv", "gen_000006.json", "evaluations.h5"]
            + [f"gen_{g:06d}.h5" for g in (0, 3, 6)]
            + ["segment_000003.csv", "segment_000006.csv"]
            + ["segment_000003.h5", "segment_000006.h5"]  # evaluations.h5 indexes them
            + [
                f"{name}.{suffix}"
                for name in ("heatmap", "curves", "timing")
                for suffix in ("pdf", "png")
            ]
        )
    records = [
        base64.urlsafe_b64decode(p.name).decode()
        for p in (tmp_path / ".snakemake" / "metadata").iterdir()
    ]
    assert records and not [r for r in records if "/work/" in r], "records of working files"


def test_every_family_leaves_its_results(small_campaign_done, small_config):
    """ES and plugin runs: passive archive, /result arrays, the ES columns of metrics.csv."""
    expected_result = {"oes": {"centre", "sigma"}, "snes": {"centre", "sigma"}, "mine": {"parent"}}
    batch = {"oes": 16, "snes": 9, "mine": 16}  # SNES: 4 + floor(3 ln 6)
    for algorithm, names in expected_result.items():
        folder = run_folder(small_campaign_done, small_config, algorithm, "sphere", 0)
        metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
        assert list(metrics["evaluations"]) == [batch[algorithm] * g for g in range(7)]
        assert np.all(metrics["gen_obj_max"][1:] <= metrics["best_objective"][1:])
        assert np.all(np.diff(metrics["best_objective"][1:]) >= 0)
        assert np.all(np.isfinite(metrics["sigma"]))
        with h5py.File(folder / "archive.h5", "r") as handle:
            assert set(handle["result"]) == names
            elites = handle["archive/objective"][()]
            assert len(elites) == metrics["num_elites"][-1] > 0
            assert elites.max() == metrics["best_objective"][-1]
        if algorithm != "mine":
            with h5py.File(folder / "checkpoints" / "gen_000006.h5", "r") as handle:
                assert handle["next_batch/centre"].shape == (6,)
                assert set(handle["next_batch"]) == {"centre", "noise", "sigma"}
    snes = np.genfromtxt(
        run_folder(small_campaign_done, small_config, "snes", "sphere", 0) / "metrics.csv",
        delimiter=",",
        names=True,
    )
    assert snes["sigma"][0] == pytest.approx(np.sqrt(6)), "norm of SNES's initial sigma"


def test_every_evaluation_is_kept(small_campaign_done, small_config):
    """evaluations.h5 (kept by default in small runs): one row per evaluation, in
    generation and index order, with the seed the function got, the objectives that
    made the metrics, the solutions (ES: regenerated from the noise seeds, bitwise
    those of the archive's elites)."""
    from evocamp.files.evaluations import indexed_window_files, read_evaluations
    from evocamp.results import regenerated_solutions

    for algorithm in small_config["algorithms"]:
        folder = run_folder(small_campaign_done, small_config, algorithm, "sphere", 0)
        metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
        rows = read_evaluations(folder / "evaluations.h5")
        assert len(rows) == metrics["evaluations"][-1]
        batch = int(metrics["evaluations"][1])
        assert list(rows.generation) == [g for g in range(1, 7) for _ in range(batch)]
        assert list(rows.index) == list(range(batch)) * 6
        key = run_key(algorithm=algorithm, domain="sphere", seed=0)
        for generation in range(1, 7):
            mine = rows.generation == generation
            seeds = evaluation_seeds(small_config["master_seed"], key, generation, batch)
            assert np.array_equal(rows.seed[mine], seeds)
            assert rows.objective[mine].max() == metrics["gen_obj_max"][generation]
            assert rows.objective[mine].mean() == metrics["gen_obj_mean"][generation]
        assert rows.measures.shape == (len(rows), 2) and np.all(rows.eval_seconds >= 0)
        if algorithm in ("oes", "snes"):
            assert rows.solution is None and rows.noise_seed is not None
            solutions = regenerated_solutions(folder, rows)
        else:
            assert rows.noise_seed is None
            solutions = rows.solution
        with h5py.File(folder / "archive.h5", "r") as handle:
            elites = handle["archive/solution"][()]
            objectives = handle["archive/objective"][()]
        for elite, objective in zip(elites, objectives, strict=True):
            assert np.array_equal(solutions[rows.objective == objective][0], elite)
        assert indexed_window_files(folder / "evaluations.h5"), "rows written once, in windows"


def test_campaign_as_dataframes_and_export(small_campaign_done, small_config, tmp_path):
    """load_campaign: one row per run and generation with every metrics.csv column;
    load_evaluations: one row per evaluation; export to CSV reads back equal; Parquet
    needs pyarrow (a clear message when missing)."""
    import pandas as pd

    from evocamp.cli import main
    from evocamp.model.metrics import METRIC_DTYPE
    from evocamp.results import load_archives, load_campaign, load_evaluations

    folder = small_campaign_done / "results" / "small"
    frame = load_campaign(folder)
    assert list(frame.columns) == ["campaign", "algorithm", "domain", "seed", *METRIC_DTYPE.names]
    total = 0
    for algorithm in small_config["algorithms"]:
        metrics = pd.read_csv(
            run_folder(small_campaign_done, small_config, algorithm, "sphere", 0) / "metrics.csv"
        )
        run = frame[frame.algorithm == algorithm].reset_index(drop=True)
        pd.testing.assert_frame_equal(run[list(metrics.columns)], metrics, check_dtype=False)
        assert set(run.campaign) == {"small"} and set(run.seed) == {0}
        total += len(metrics)
    assert len(frame) == total == 5 * 7
    evaluations = load_evaluations(folder)
    assert len(evaluations) == sum(frame[frame.generation == 6].evaluations), (
        "one row per evaluation"
    )
    archives = load_archives(folder)
    assert len(archives) == sum(frame[frame.generation == 6].num_elites)

    assert main(["export", str(folder), "--to", str(tmp_path / "campaign.csv")]) == 0
    # CSV keeps no dtype: a float column of whole numbers (failed_seconds 0) reads as int
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "campaign.csv"), frame, check_dtype=False)
    parquet = tmp_path / "campaign.parquet"
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(Exception, match="needs pyarrow, which is not installed"):
            from evocamp.results import export

            export(folder, parquet)
        assert not parquet.exists()
    else:
        assert main(["export", str(folder), "--to", str(parquet)]) == 0
        pd.testing.assert_frame_equal(pd.read_parquet(parquet), frame)


def test_readme_optimizer_example_is_the_tested_plugin():
    """The small campaign runs the optimizer example of docs/plugins.md exactly as printed."""
    readme = (REPO / "docs" / "plugins.md").read_text()
    section = readme.split("## Your own optimizer", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert example == (PLUGINS / "my_optimizers.py").read_text()


def test_kept_checkpoints_every_k_and_final(tmp_path, small_config):
    """Retention: generation 0, every K-th and the final one; metrics are never thinned."""
    config = merged(small_config, {"generations": 8, "checkpoint_every": 3})
    config["algorithms"] = {"me": small_config["algorithms"]["me"]}
    write_config(tmp_path, config)
    run_snakemake(tmp_path, "runs")
    folder = run_folder(tmp_path, config, "me", "sphere", 0)
    kept = sorted(p.name for p in (folder / "checkpoints").iterdir())
    assert kept == ["gen_000000.h5", "gen_000003.h5", "gen_000006.h5", "gen_000008.h5"]
    metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
    assert list(metrics["generation"]) == list(range(9))


@pytest.mark.parametrize(("shards", "cores"), [(1, 1), (8, 8)])
def test_archives_identical_whatever_the_shards_and_cores(
    tmp_path, small_config, reference_small, reference_small_evaluations, shards, cores
):
    """Shards 1 and 8 with --cores 8 and 1 give the archives of the reference run
    (3 shards, --cores 2), bit for bit, and its kept evaluations (but their measured
    seconds)."""
    write_config(tmp_path, merged(small_config, {"shards": shards}))
    run_snakemake(tmp_path, "runs", cores=cores)
    assert archive_digests(tmp_path) == reference_small
    assert evaluation_digests(tmp_path) == reference_small_evaluations


def test_default_campaign_runs(tmp_path):
    """The default campaign (config/config.yaml; fewer generations, to fit CI) runs to
    its archives, figures and tables."""
    config = load_config_file(REPO / "config" / "config.yaml")
    config.update(generations=2, checkpoint_every=2)
    write_config(tmp_path, config)
    run_snakemake(tmp_path, cores=8)
    assert len(archive_digests(tmp_path)) == 4
    tables = tmp_path / "results" / "default" / "tables"
    assert "map_elites" in (tables / "final_metrics.csv").read_text()


def test_raising_generations_runs_only_new_ones(
    tmp_path, small_config, reference_small, reference_small_evaluations
):
    """N -> 2N: only generations N+1..2N run; the result equals an uninterrupted 2N run
    (and going from 3 to 6 with K=3 also crosses a kept boundary), kept evaluations
    included (those of the first run are kept, the new ones added)."""
    write_config(tmp_path, merged(small_config, {"generations": 4}))
    run_snakemake(tmp_path, "runs")
    write_config(tmp_path, merged(small_config, {"generations": 6}))
    again = run_snakemake(tmp_path, "runs")
    assert sorted(set(executed(again, "tell"))) == ["000005", "000006"]
    assert executed(again, "initialise") == []
    assert archive_digests(tmp_path) == reference_small
    assert evaluation_digests(tmp_path) == reference_small_evaluations
    nothing = run_snakemake(tmp_path, "runs")
    assert "Nothing to be done" in nothing.stdout + nothing.stderr
    # Lowered to 3 (a kept checkpoint): the runs end there again, without evaluating,
    # and metrics.csv stops at generation 3 though the metrics of 4-6 are on disk.
    write_config(tmp_path, merged(small_config, {"generations": 3}))
    lowered = run_snakemake(tmp_path, "runs")
    assert executed(lowered, "evaluate") == executed(lowered, "tell") == []
    for algorithm in small_config["algorithms"]:
        folder = run_folder(tmp_path, small_config, algorithm, "sphere", 0)
        metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
        assert list(metrics["generation"]) == [0, 1, 2, 3], algorithm
        summary = json.loads((folder / "finished" / "gen_000003.json").read_text())
        assert summary["final"]["generation"] == 3


def test_dry_run_of_1000_generations_and_8_shards(tmp_path, small_config):
    write_config(tmp_path, merged(small_config, {"generations": 1000, "shards": 8}))
    completed = run_snakemake(tmp_path, "--dry-run", timeout=120)
    assert "evaluate" in completed.stdout
    assert "RecursionError" not in completed.stderr


def test_all_algorithms_and_domains(tmp_path):
    """Every algorithm type on every built-in domain and a plugin with an extra field."""
    config = {
        "campaign": "zoo",
        "master_seed": 3,
        "generations": 2,
        "shards": 2,
        "checkpoint_every": 2,
        "seeds": [5],
        "algorithms": {
            "me": {"type": "map_elites", "batch_size": 6},
            "line": {"type": "map_elites_line", "batch_size": 6},
            "cvt": {
                "type": "cvt_map_elites",
                "batch_size": 6,
                "archive": {"cells": 30, "cvt_samples": 2000},
            },
            "cmame": {"type": "cma_me", "batch_size": 6},
            "cmamae": {
                "type": "cma_mae",
                "batch_size": 6,
                "archive": {"learning_rate": 0.02, "threshold_min": 0.0},
            },
        },
        "domains": {
            "rastrigin": {"type": "rastrigin", "solution_dim": 4},
            "arm": {"type": "arm", "solution_dim": 5},
            "plugin": {
                "type": "plugin",
                "function": "evocamp_test_plugin:noisy_sphere",
                "python_path": str(PLUGINS),
                "solution_dim": 4,
                "measure_ranges": [[-2, 2], [-2, 2]],
                "extra_fields": ["distance"],
            },
        },
    }
    write_config(tmp_path, config)
    # Archives of every run; figures of the CVT run only (grid heatmaps are drawn in
    # every other campaign of the suite).
    targets = [
        f"results/zoo/{algorithm}/{domain}/seed5/archive.h5"
        for algorithm in config["algorithms"]
        for domain in config["domains"]
    ]
    run_snakemake(tmp_path, *targets, "results/zoo/cvt/arm/seed5/figures/heatmap.png")
    digests = archive_digests(tmp_path)
    assert len(digests) == 15
    cvt = run_folder(tmp_path, config, "cvt", "arm", 5) / "archive.h5"
    with h5py.File(cvt, "r") as handle:
        assert handle["archive"].attrs["kind"] == "cvt"
        assert handle["archive/centroids"].shape == (30, 2)
    plugin = run_folder(tmp_path, config, "cmamae", "plugin", 5) / "archive.h5"
    with h5py.File(plugin, "r") as handle:
        solutions = handle["archive/solution"][()]
        np.testing.assert_allclose(
            handle["archive/distance"][()], np.linalg.norm(solutions, axis=1)
        )


def test_lunar_lander_and_digits_campaign_with_figures(tmp_path):
    """The real workloads end to end: CMA-ME (as in pyribs' tutorial, smaller) and
    OpenAI-ES on Lunar Lander in one comparison, SNES training the digits MLP; figures
    and tables for all of them."""
    config = {
        "campaign": "real",
        "master_seed": 1,
        "generations": 3,
        "shards": 2,
        "checkpoint_every": 3,
        "seeds": 1,
        "algorithms": {
            "cma_me": {
                "type": "cma_me",
                "emitters": 5,
                "batch_size": 6,
                "sigma": 1.0,
                "archive": {"dims": [50, 50]},
            },
            "openai_es": {
                "type": "openai_es",
                "popsize": 30,
                "sigma": 0.1,
                "archive": {"dims": [50, 50]},
            },
            "snes": {"type": "snes"},
        },
        "domains": {"lunar": {"type": "lunar_lander"}, "digits": {"type": "digits"}},
        "experiments": [
            {"algorithm": "cma_me", "domain": "lunar"},
            {"algorithm": "openai_es", "domain": "lunar"},
            {"algorithm": "snes", "domain": "digits"},
        ],
    }
    write_config(tmp_path, config)
    run_snakemake(tmp_path)
    for algorithm in ("cma_me", "openai_es"):
        folder = run_folder(tmp_path, config, algorithm, "lunar", 0)
        with h5py.File(folder / "archive.h5", "r") as handle:
            assert handle["archive"].attrs["dims"].tolist() == [50, 50]
            measures = handle["archive/measures"][()]
            assert len(measures) > 0 and handle["archive/solution"].shape[1] == 32
            assert handle["archive/index"][()].max() < 2500
        metrics = np.genfromtxt(folder / "metrics.csv", delimiter=",", names=True)
        assert metrics["evaluations"][-1] == 90
        assert metrics["qd_score"][-1] > 0, "offset -600: every elite counts positively"
        assert (folder / "figures" / "heatmap.png").stat().st_size > 1000
    digits = run_folder(tmp_path, config, "snes", "digits", 0)
    with h5py.File(digits / "archive.h5", "r") as handle:
        assert "archive" not in handle
        assert handle["best/solution"].shape == (2410,)
        assert 0 <= handle["best/test_accuracy"][()] <= 1
        assert handle["result/centre"].shape == (2410,)
    metrics = np.genfromtxt(digits / "metrics.csv", delimiter=",", names=True)
    assert np.isnan(metrics["qd_score"]).all() and np.isfinite(metrics["best_objective"][1:]).all()
    figures = tmp_path / "results" / "real" / "figures"
    for name in ("curves", "heatmaps"):
        assert (figures / f"{name}.png").stat().st_size > 1000
    table = (tmp_path / "results" / "real" / "tables" / "final_metrics.csv").read_text()
    assert "lunar,openai_es" in table and "digits,snes" in table
    status = subprocess.run(
        [sys.executable, "-m", "evocamp", "status", "results/real"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert "QD score of openai_es/lunar/seed0" in status
    assert "best objective of snes/digits/seed0" in status
