"""The run folder (evocamp.model.layout): paths and window rules, without Snakemake."""

from __future__ import annotations

from pathlib import Path

import pytest

from evocamp.model.layout import (
    CAMPAIGN_TABLES,
    CHECKPOINT,
    SHARD,
    WORK_STATE,
    CampaignFolder,
    RunFolder,
    closes_window,
    ends_window,
    is_kept,
    kept_generations,
    window_start,
)


def test_kept_generations_are_zero_and_every_kth():
    assert [g for g in range(13) if is_kept(g, every=5)] == [0, 5, 10]
    assert [g for g in range(13) if closes_window(g, every=5)] == [5, 10]
    assert list(kept_generations(12, every=5)) == [5, 10]
    assert list(kept_generations(10, every=5)) == [5, 10]
    assert list(kept_generations(4, every=5)) == []
    assert list(kept_generations(3, every=1)) == [1, 2, 3]


@pytest.mark.parametrize(
    ("generation", "start"), [(1, 0), (5, 0), (6, 5), (10, 5), (11, 10), (12, 10)]
)
def test_a_window_starts_from_the_last_kept_generation_before_it(generation, start):
    assert window_start(generation, every=5) == start


def test_every_generation_ends_its_window_when_every_one_is_kept():
    assert [window_start(g, every=1) for g in (1, 2, 3)] == [0, 1, 2]
    assert all(ends_window(g, every=1, total=3) for g in (1, 2, 3))


def test_a_window_ends_at_a_kept_generation_or_the_last():
    assert [g for g in range(1, 13) if ends_window(g, every=5, total=12)] == [5, 10, 12]
    assert [g for g in range(1, 11) if ends_window(g, every=5, total=10)] == [5, 10]


def test_run_paths_as_the_workflow_writes_them():
    run = CampaignFolder("results/c").run("me", "sphere", 3)
    assert run.path == Path("results/c/me/sphere/seed3")
    assert (run.algorithm, run.domain, run.seed) == ("me", "sphere", 3)
    assert run.campaign.path == Path("results/c")
    below = {
        run.archive: "archive.h5",
        run.metrics: "metrics.csv",
        run.evaluations: "evaluations.h5",
        run.completions: "completions.jsonl",
        run.checkpoint(12): "checkpoints/gen_000012.h5",
        run.work_state(7): "work/state_000007.h5",
        run.shard(7, 2): "work/gen_000007/shard_002.h5",
        run.metrics_window(10): "metrics/segment_000010.csv",
        run.evaluation_window(10): "evaluations/segment_000010.h5",
        run.summary(30): "finished/gen_000030.json",
        run.metrics_windows: "metrics",
        run.work: "work",
        run.figures: "figures",
    }
    for path, relative in below.items():
        assert path == run.path / relative
    assert run.logs == Path("results/c/logs/me/sphere/seed3")
    assert run.generation_logs(7) == run.logs / "gen_000007"
    assert run.keep_log(10) == run.logs / "keep_000010.log"
    assert RunFolder.holding(run.work_state(7)) == run
    assert RunFolder.holding(run.checkpoint(0)) == run


def test_wildcards_stay_as_they_are():
    """The rules' patterns: a string in place of a number is kept verbatim."""
    run = CampaignFolder("results/c").run("{algorithm}", "{domain}", "{seed}")
    assert str(run.path) == "results/c/{algorithm}/{domain}/seed{seed}"
    assert str(run.shard("{gen}", "{shard}")).endswith("work/gen_{gen}/shard_{shard}.h5")
    assert str(run.checkpoint("{gen}")).endswith("checkpoints/gen_{gen}.h5")
    assert str(run.logs) == "results/c/logs/{algorithm}/{domain}/seed{seed}"


def test_numbered_names_read_back_and_list_by_number(tmp_path):
    assert CHECKPOINT.number_of("gen_000012.h5") == 12
    assert CHECKPOINT.number_of("gen_000012.json") is None
    assert CHECKPOINT.number_of("gen_x.h5") is None
    assert SHARD.name(4) == "shard_004.h5"
    run = RunFolder(tmp_path / "c" / "a" / "d" / "seed0")
    for generation in (1000000, 20, 3):
        run.work_state(generation).parent.mkdir(parents=True, exist_ok=True)
        run.work_state(generation).touch()
    run.checkpoint(20).parent.mkdir(parents=True)
    run.checkpoint(20).touch()
    (run.work / "state_old.h5").touch()
    assert run.work_states() == [run.work_state(g) for g in (3, 20, 1000000)]
    assert [number for number, _ in CHECKPOINT.numbered_in(run.checkpoints)] == [20]
    assert WORK_STATE.in_folder(run.work, up_to=20) == [run.work_state(3), run.work_state(20)]
    assert run.states_newest_first() == [
        run.work_state(1000000),
        run.work_state(20),
        run.checkpoint(20),
        run.work_state(3),
    ]
    assert run.summaries() == [] and run.metrics_window_files() == []


def test_a_campaign_lists_its_runs_figures_and_tables(tmp_path):
    campaign = CampaignFolder(tmp_path / "c")
    for seed in (1, 0):
        started = campaign.run("me", "sphere", seed)
        started.checkpoint(0).parent.mkdir(parents=True)
        started.checkpoint(0).touch()
    campaign.run("me", "sphere", 2).path.mkdir()  # not started: no generation-0 checkpoint
    assert campaign.runs() == [campaign.run("me", "sphere", seed) for seed in (0, 1)]
    names = [path.name for path in campaign.table_files()]
    assert names[:3] == ["final_metrics.csv", "final_metrics.md", "final_metrics.tex"]
    assert len(names) == sum(len(forms) for forms in CAMPAIGN_TABLES.values())
    assert {path.parent for path in campaign.figure_files()} == {campaign.figures}
    assert [path.name for path in campaign.run("a", "d", 0).figure_files()][:2] == [
        "heatmap.pdf",
        "heatmap.png",
    ]
