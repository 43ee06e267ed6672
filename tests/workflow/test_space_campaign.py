"""A domain over a mixed search space (a log-scale real, an integer, a categorical, a
real active only for one category, an ordinal) through the real workflow, with
random search, qUCB (centralised and decentralised), Optuna's TPE and Nevergrad's
TwoPointsDE: the evaluation function gets
ints and strings as declared (the test plugin asserts them, a failed assertion fails
the campaign), and the promises hold: the same archives and evaluations at 1 and 3
shards (decentralised qUCB: its shard count is part of it, so across modes), in Dask
mode killed and rerun, and in asynchronous mode killed and rerun."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import (
    MIXED_SPACE,
    PLUGINS,
    archive_digests,
    evaluation_digests,
    kill_tree_when,
    merged,
    run_snakemake,
    write_config,
)

from evocamp.config.run_specs import read_space
from evocamp.model.space import Space
from evocamp.reporting.campaign_figures import compare_campaign
from evocamp.results import export, load_evaluations

pytestmark = pytest.mark.slow

BO = {"batch_size": 4, "initial_points": 4, "candidates": 50, "trees": 5, "refine_generations": 2}
CONFIG = {
    "campaign": "space",
    "master_seed": 5,
    "generations": 3,
    "shards": 3,
    "checkpoint_every": 2,
    "seeds": 1,
    "storage": {"keep_evaluations": True},
    "algorithms": {
        "rs": {"type": "random_search", "batch_size": 6},
        "cbo": {"type": "qucb_centralised", **BO},
        "dbo": {"type": "qucb_decentralised", **BO},
        "tpe": {"type": "optuna", "sampler": "tpe", "batch_size": 4},
        "de": {"type": "nevergrad", "optimizer": "TwoPointsDE", "batch_size": 4},
    },
    "domains": {
        "net": {
            "type": "plugin",
            "function": "evocamp_test_plugin:typed_configurations",
            "python_path": str(PLUGINS),
            "measure_ranges": [],
            "space": MIXED_SPACE,
        }
    },
}


def digests(workdir, *, without=()) -> tuple[dict, dict]:
    def kept(found: dict) -> dict:
        return {key: value for key, value in found.items() if key.split("/")[1] not in without}

    return kept(archive_digests(workdir)), kept(evaluation_digests(workdir))


@pytest.fixture(scope="module")
def space_done(tmp_path_factory):
    """One uninterrupted run of the campaign (3 shards, shard mode)."""
    workdir = tmp_path_factory.mktemp("space")
    write_config(workdir, CONFIG)
    run_snakemake(workdir, "runs")
    return workdir


def test_every_evaluation_is_a_configuration_of_the_space(space_done):
    rows = load_evaluations(space_done / "results" / "space", solutions=True)
    assert rows.groupby("algorithm").size().to_dict() == {
        "cbo": 12,
        "dbo": 12,
        "de": 12,
        "rs": 18,
        "tpe": 12,
    }
    solutions = rows[[f"solution_{j}" for j in range(5)]].to_numpy()
    space = Space(read_space(CONFIG["domains"]["net"]["space"]))
    configurations = space.configurations(solutions)
    assert {c["optimizer"] for c in configurations} == {"adam", "sgd"}
    assert np.isnan(solutions[:, 3]).sum() == sum(c["optimizer"] == "adam" for c in configurations)
    for algorithm in ("cbo", "dbo"):  # no configuration proposed twice
        run = solutions[(rows.algorithm == algorithm).to_numpy()]
        assert len({row.tobytes() for row in run}) == len(run)


def test_tables_and_figures_name_and_type_every_parameter(space_done, tmp_path):
    """The DataFrames and the export give a named, typed column per parameter; the
    campaign comparison adds the history, the parallel coordinates and the best
    configuration of every run (that of its best kept evaluation)."""
    campaign = space_done / "results" / "space"
    rows = load_evaluations(campaign)
    assert str(rows["layers"].dtype) == "Int64"
    assert list(rows["optimizer"].cat.categories) == ["adam", "sgd"]
    assert rows["width"].cat.ordered and list(rows["width"].cat.categories) == [16, 32, 64]
    assert rows["momentum"].isna().tolist() == (rows["optimizer"] == "adam").tolist()
    assert export(campaign, tmp_path / "evaluations.csv", what="evaluations") == len(rows)
    header = (tmp_path / "evaluations.csv").read_text().splitlines()[0].split(",")
    assert header[-5:] == ["lr", "layers", "optimizer", "momentum", "width"]
    metrics = sorted(str(path) for path in campaign.rglob("seed0/metrics.csv"))
    compare_campaign(
        metrics=metrics,
        archives=[str(Path(path).parent / "archive.h5") for path in metrics],
        figures=tmp_path / "figures",
        tables=tmp_path / "tables",
        samples=20,
        seed=0,
    )
    for name in ("optimisation_history", "parallel_coordinates"):
        assert (tmp_path / "figures" / f"{name}.png").stat().st_size > 10_000
    best = pd.read_csv(tmp_path / "tables" / "best_configurations.csv")
    for _, row in best.iterrows():
        run = rows[rows.algorithm == row.algorithm]
        top = run.loc[run.objective.idxmax()]
        assert row.best_objective == top.objective
        assert (row.layers, row.optimizer, row.width) == (top.layers, top.optimizer, top.width)


def test_one_shard_gives_the_results_of_three(space_done, tmp_path):
    write_config(tmp_path, merged(CONFIG, {"shards": 1}))
    run_snakemake(tmp_path, "runs")
    assert digests(tmp_path, without=("dbo",)) == digests(space_done, without=("dbo",))


def test_dask_mode_killed_and_rerun_gives_the_same_results(space_done, tmp_path):
    write_config(tmp_path, merged(CONFIG, {"mode": "dask", "dask": {"workers": 2}}))
    kept = tmp_path / "results"
    assert kill_tree_when(tmp_path, lambda: any(kept.rglob("checkpoints/gen_000002.h5"))), (
        "the campaign finished before the kill"
    )
    run_snakemake(tmp_path, "runs")
    assert digests(tmp_path) == digests(space_done)


def test_asynchronous_mode_killed_and_rerun_gives_the_uninterrupted_results(tmp_path):
    config = merged(CONFIG, {"mode": "async"})  # qUCB: the proposals of asynchronous BO
    config["algorithms"] = {name: CONFIG["algorithms"][name] for name in ("cbo", "dbo")}
    found = []
    for kill in (False, True):
        workdir = tmp_path / ("killed" if kill else "whole")
        write_config(workdir, config)
        if kill:
            kept = workdir / "results"
            assert kill_tree_when(workdir, lambda k=kept: any(k.rglob("checkpoints/gen_000002.h5")))
        run_snakemake(workdir, "runs")
        found.append(digests(workdir))
    assert found[0] == found[1]
    assert len(found[0][0]) == 2
