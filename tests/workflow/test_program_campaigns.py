"""Evaluations that are programs in real campaigns (``type: command``, docs/programs.md):
a real driver script, with failures chosen by the evaluation seed, gives bitwise the same
archives on 3 and 2 shards, in Dask mode and killed twice and rerun; in asynchronous
mode on 1 and 3 Dask workers; and leaves no work directory after success. A program over
a mixed search space reads typed values and gives named, typed columns, the same on 1
and 2 shards."""

from __future__ import annotations

import signal
import sys

import numpy as np
import pytest
from conftest import (
    MIXED_SPACE,
    REPO,
    archive_digests,
    docs_block,
    evaluation_digests,
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
    # Where and how the program runs change no result: a finished campaign whose
    # work_root, keep_work, keep_work_max and launcher change has nothing to rerun.
    workdir = tmp_path / "shards2"
    config = program_config(small_config, workdir, shards=2)
    config["domains"]["prog"].update(
        work_root=str(workdir / "elsewhere"), keep_work="all", keep_work_max=5, launcher="env"
    )
    write_config(workdir, config)
    dry = run_snakemake(workdir, "runs", "--dry-run")
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


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


def test_a_program_over_a_mixed_space_gives_typed_columns_on_any_shards(tmp_path):
    """Random search over a mixed space (a log real, an integer, a categorical, a real
    active for one category, an ordinal); the program is tests/programs/space_driver.py,
    which exits with status 3 (stopping the campaign) when a value read from Dakota's
    parameters file has the wrong type or an inactive parameter is there."""
    driver = REPO / "tests" / "programs" / "space_driver.py"
    config = {
        "campaign": "program_space",
        "master_seed": 7,
        "generations": 1,
        "checkpoint_every": 1,
        "seeds": 1,
        "storage": {"keep_evaluations": True},
        "algorithms": {"rs": {"type": "random_search", "batch_size": 10}},
        "domains": {
            "train": {
                "type": "command",
                "command": [sys.executable, str(driver), "{params}", "{results}", "--lr={lr}"],
                "measure_ranges": [],
                "space": MIXED_SPACE,
            }
        },
    }
    for shards in (2, 1):
        write_config(tmp_path / f"shards{shards}", {**config, "shards": shards})
        run_snakemake(tmp_path / f"shards{shards}", "runs")
    from evocamp.results import load_evaluations

    rows = load_evaluations(tmp_path / "shards2" / "results" / "program_space")
    assert len(rows) == 10 and (rows["status"] == "ok").all()
    assert set(rows["optimizer"]) == {"adam", "sgd"}
    assert str(rows["lr"].dtype) == "float64" and str(rows["layers"].dtype) == "Int64"
    assert list(rows["optimizer"].cat.categories) == ["adam", "sgd"]
    assert rows["width"].cat.ordered and list(rows["width"].cat.categories) == [16, 32, 64]
    assert rows["momentum"].isna().tolist() == (rows["optimizer"] == "adam").tolist()
    written = np.array([float(f"{lr:.15e}") for lr in rows["lr"]])  # Dakota's 16 digits
    expected = (
        -((np.log10(written) + 3) ** 2)
        - 0.1 * (rows["layers"].to_numpy(dtype=float) - 3) ** 2
        + rows["momentum"].fillna(0.3).to_numpy()
        + rows["width"].astype(int).to_numpy() / 64
        + np.array([int(seed) % 1000 for seed in rows["eval_seed"]]) * 1e-6
    )
    assert np.allclose(rows["objective"], expected, rtol=0, atol=1e-12)
    for digests in (archive_digests, evaluation_digests):
        assert digests(tmp_path / "shards2") == digests(tmp_path / "shards1")


def test_the_tuning_recipes_script_trains_the_same_on_every_call(tmp_path, monkeypatch):
    """docs/tuning.md's PyTorch training script as written (but 3 epochs, not 20), on the
    CPU, through the shard step with the recipe's domain: an adam and an sgd
    configuration get their accuracies, and the same bits when trained again with the
    same seeds."""
    pytest.importorskip("torch")
    import yaml

    from evocamp.catalogue.factory import resolve_run
    from evocamp.config import run_spec, validate_config
    from evocamp.loop.evaluation import evaluate_slice
    from evocamp.model.space import Space

    monkeypatch.chdir(tmp_path)
    script = docs_block("tuning.md", "# train.py, run as")
    assert "\nEPOCHS = 20\n" in script
    (tmp_path / "train.py").write_text(script.replace("\nEPOCHS = 20\n", "\nEPOCHS = 3\n"))
    config = yaml.safe_load(docs_block("tuning.md", "# tune_script.yaml"))
    config["domains"]["digits"]["work_root"] = str(tmp_path / "scratch")
    config["domains"]["digits"]["command"][0] = sys.executable
    spec = run_spec(validate_config(config), algorithm="rs", domain="digits", seed=0)
    space = Space(spec["domain_spec"]["space"])
    configurations = [
        {"lr": 3e-3, "width": 64, "depth": 2, "activation": "relu", "optimizer": "adam"},
        {"lr": 3e-2, "width": 32, "depth": 1, "activation": "tanh", "optimizer": "sgd"}
        | {"momentum": 0.9},
    ]
    for configuration in configurations:
        configuration["batch_size"] = 64
    solutions = np.array([space.solution(c) for c in configurations])
    results = [
        evaluate_slice(
            resolve_run(spec),
            generation=1,
            shard=0,
            start=0,
            solutions=solutions,
            seeds=np.array([5, 6], dtype=np.uint64),
        )
        for _ in range(2)
    ]
    assert results[0].status is None
    assert ((results[0].objective > 0.8) & (results[0].objective <= 1)).all()
    assert (results[0].extra["test_accuracy"] > 0.8).all()
    assert results[0].objective.tobytes() == results[1].objective.tobytes()
    assert (
        results[0].extra["test_accuracy"].tobytes() == results[1].extra["test_accuracy"].tobytes()
    )
