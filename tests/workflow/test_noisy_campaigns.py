"""Noisy domains end to end with real Snakemake: repeated evaluations and the final
re-evaluation (``evaluation.repeats``, ``evaluation.reevaluate``) give bitwise the same
archives, re-evaluations and corrected metrics on 1 and 2 shards and in Dask mode."""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np
import pytest
from conftest import archive_digests, jobs_run, merged, run_folder, run_snakemake, write_config

from evocamp.files.reevaluation import CORRECTED_METRICS, read_reevaluation
from evocamp.model.metrics import read_metrics_csv
from evocamp.reporting.comparison import final_metrics_table, load_runs, table_csv
from evocamp.tasks.functions import lunar_lander_noisy

#: Two generations of MAP-Elites and OpenAI-ES (its passive archive) on the noisy Lunar
#: Lander, each solution evaluated twice, each final elite twice more.
NOISY_CAMPAIGN = {
    "campaign": "noisy",
    "master_seed": 5,
    "generations": 2,
    "checkpoint_every": 2,
    "shards": 1,
    "seeds": 1,
    "storage": {"keep_evaluations": True},
    "evaluation": {"repeats": 2, "reevaluate": 2},
    "algorithms": {
        "me": {
            "type": "map_elites",
            "emitters": 1,
            "emitter_batch_size": 6,
            "sigma": 0.5,
            "archive": {"dims": [5, 5]},
        },
        "oes": {
            "type": "openai_es",
            "popsize": 6,
            "sigma": 0.3,
            "learning_rate": 0.05,
            "archive": {"dims": [5, 5]},
        },
    },
    "domains": {"ll": {"type": "lunar_lander_noisy"}},
}
VARIANTS = {
    "one_shard": {},
    "two_shards": {"shards": 2},
    "dask": {"shards": 2, "mode": "dask", "dask": {"workers": 2}},
}


@pytest.fixture(scope="module")
def noisy_campaigns(tmp_path_factory):
    """The campaign run once per variant: {variant: workdir}."""
    workdirs = {}
    for name, overrides in VARIANTS.items():
        workdir = tmp_path_factory.mktemp(name)
        write_config(workdir, merged(NOISY_CAMPAIGN, overrides))
        run_snakemake(workdir, "runs")
        workdirs[name] = workdir
    return workdirs


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _final(run) -> dict:
    (summary,) = run.glob("finished/gen_*.json")
    return json.loads(summary.read_text())["final"]


def test_archives_and_reevaluations_are_bitwise_the_same_in_every_variant(noisy_campaigns):
    reference = noisy_campaigns["one_shard"]
    for name, workdir in noisy_campaigns.items():
        assert archive_digests(workdir) == archive_digests(reference), name
        for algorithm in ("me", "oes"):
            run = run_folder(workdir, NOISY_CAMPAIGN, algorithm, "ll", 0)
            expected = run_folder(reference, NOISY_CAMPAIGN, algorithm, "ll", 0)
            assert _digest(run / "finished" / "reevaluation_000002.h5") == _digest(
                expected / "finished" / "reevaluation_000002.h5"
            ), (name, algorithm)
            final = _final(run)
            assert {m: final[m] for m in CORRECTED_METRICS} == {
                m: _final(expected)[m] for m in CORRECTED_METRICS
            }
    assert len(set(archive_digests(reference).values())) == 2


def test_kept_evaluations_are_means_of_direct_calls_and_count_every_repeat(noisy_campaigns):
    run = run_folder(noisy_campaigns["two_shards"], NOISY_CAMPAIGN, "me", "ll", 0)
    with h5py.File(run / "evaluations.h5") as handle:
        rows = handle["evaluations"]
        solutions, seeds = rows["solution"][()], rows["seed"][()]
        objective, measures = rows["objective"][()], rows["measures"][()]
        spread = rows["extra"]["objective_std"][()]
    assert len(seeds) == 12
    words = np.stack(
        [
            np.random.SeedSequence(int(s), spawn_key=(2,)).generate_state(2, dtype=np.uint64)
            for s in seeds
        ]
    )
    direct = [lunar_lander_noisy(solutions, words[:, r]) for r in range(2)]
    np.testing.assert_array_equal(objective, (direct[0]["objective"] + direct[1]["objective"]) / 2)
    np.testing.assert_array_equal(measures, (direct[0]["measures"] + direct[1]["measures"]) / 2)
    np.testing.assert_array_equal(
        spread, np.abs(direct[0]["objective"] - direct[1]["objective"]) / 2
    )
    # the metrics count every evaluation: 2 generations x 6 solutions x 2 repeats
    assert read_metrics_csv(run / "metrics.csv")["evaluations"].tolist() == [0, 12, 24]


def test_the_final_metrics_and_tables_hold_the_corrected_metrics(noisy_campaigns):
    workdir = noisy_campaigns["dask"]
    runs = [run_folder(workdir, NOISY_CAMPAIGN, a, "ll", 0) for a in ("me", "oes")]
    for run in runs:
        reevaluation = read_reevaluation(run / "finished" / "reevaluation_000002.h5")
        assert reevaluation.repeats == 2
        assert _final(run)["corrected_qd_score"] == reevaluation.corrected["corrected_qd_score"]
        with h5py.File(run / "archive.h5") as handle:
            elites = int(np.count_nonzero(handle["archive"]["index"][()] >= 0))
        assert len(reevaluation.index) == elites > 0
        log = run.parents[2] / "logs" / run.relative_to(run.parents[2]) / "reevaluate.log"
        assert f"{elites} elites of generation 2 evaluated 2 times each" in log.read_text()
        window_logs = (run.parents[2] / "logs" / run.relative_to(run.parents[2])).glob(
            "window_*.log"
        )
        assert any("| evaluations 24 (2 repeats) |" in path.read_text() for path in window_logs)
    table = final_metrics_table(load_runs([r / "metrics.csv" for r in runs]), samples=100, seed=0)
    header = table_csv(table).splitlines()[0].split(",")
    for metric in CORRECTED_METRICS:
        assert f"{metric}_mean" in header
    row = next(r for r in table if r["algorithm"] == "me")
    assert row["corrected_qd_score"][0] == _final(runs[0])["corrected_qd_score"]


def test_reevaluate_added_to_a_finished_campaign_runs_only_the_reevaluation(
    noisy_campaigns, tmp_path
):
    without = merged(NOISY_CAMPAIGN, {"evaluation": {"reevaluate": 0}})
    write_config(tmp_path, without)
    run_snakemake(tmp_path, "runs")
    run = run_folder(tmp_path, NOISY_CAMPAIGN, "me", "ll", 0)
    assert "corrected_qd_score" not in _final(run)
    assert not list(run.glob("finished/reevaluation_*"))

    write_config(tmp_path, NOISY_CAMPAIGN)
    completed = run_snakemake(tmp_path, "runs")
    assert jobs_run(completed) == {
        "finalise": 2,
        "reevaluate": 2,
        "reevaluate_shard": 2,
        "runs": 1,
        "total": 7,
    }
    assert archive_digests(tmp_path) == archive_digests(noisy_campaigns["one_shard"])
    expected = run_folder(noisy_campaigns["one_shard"], NOISY_CAMPAIGN, "me", "ll", 0)
    assert _digest(run / "finished" / "reevaluation_000002.h5") == _digest(
        expected / "finished" / "reevaluation_000002.h5"
    )
    assert _final(run)["corrected_qd_score"] == _final(expected)["corrected_qd_score"]
