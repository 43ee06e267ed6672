"""Kept evaluations (evocamp.files.evaluations): rows made by tell or rebuilt from a
run's files, recorded keyed by generation, the settings' size bound."""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pytest
from campaigns import SMALL_CAMPAIGN
from conftest import shard_results

from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.checkpoint import read_state, write_state
from evocamp.files.evaluations import (
    StorageSettings,
    concatenate,
    read_evaluations,
    record_evaluations,
)
from evocamp.loop.engine import initialise, tell


def spec_of(algorithm: str, **config) -> dict:
    campaign = validate_config({**SMALL_CAMPAIGN, **config}, check_plugins=False)
    return run_spec(campaign, algorithm=algorithm, domain="sphere", seed=0)


def told_rows(spec: dict, *, generations: int, shards: int, settings=None) -> list:
    """Rows of each generation, told in this process with ``shards`` shards."""
    state = initialise(spec)
    blocks = []
    for _ in range(generations):
        state = tell(
            state,
            shard_results(state, shards),
            storage=settings or StorageSettings(),
        )
        blocks.append(state.evaluations)
    return blocks


def same_rows(a, b) -> bool:
    """Equal rows, measured seconds aside."""
    fields = [f.name for f in dataclasses.fields(a) if f.name != "eval_seconds"]
    for name in fields:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, dict):
            if sorted(x) != sorted(y) or not all(np.array_equal(x[k], y[k]) for k in x):
                return False
        elif not (x is None and y is None) and not np.array_equal(x, y):
            return False
    return True


@pytest.mark.parametrize("algorithm", ["me", "oes"])
def test_rows_do_not_depend_on_the_shards(algorithm):
    """Rows of 1 and 3 shards are equal (but the measured seconds); ES rows hold noise
    seeds and the generation's centre, others the solutions."""
    spec = spec_of(algorithm)
    one = told_rows(spec, generations=2, shards=1)
    three = told_rows(spec, generations=2, shards=3)
    for a, b in zip(one, three, strict=True):
        assert same_rows(a, b)
    rows = three[1]
    assert list(rows.generation) == [2] * 16 and list(rows.index) == list(range(16))
    if algorithm == "oes":
        assert rows.solution is None and len(rows.noise_seed) == 16
        assert np.array_equal(rows.noise_seed[0::2], rows.noise_seed[1::2]), "antithetic"
        assert rows.batch["centre"].shape == (1, 6)
    else:
        assert rows.solution.shape == (16, 6) and rows.noise_seed is None


def test_rows_are_never_written_with_the_state(tmp_path):
    spec = spec_of("me")
    state = initialise(spec)
    state = tell(state, shard_results(state, 2), storage=StorageSettings())
    write_state(tmp_path / "state.h5", state, run=resolve_run(state.spec))
    assert read_state(tmp_path / "state.h5").evaluations is None
    assert read_evaluations(tmp_path / "state.h5") is None, "rows reach the files once"
    without = tell(initialise(spec), shard_results(initialise(spec), 2))
    assert without.evaluations is None


def shard_mode_files(run, spec: dict, *, generations: int, shards: int) -> list:
    """A shard-mode run's files as its jobs leave them (checkpoint 0, a state and
    shard folder per generation); the rows told in memory, per generation."""
    from evocamp.files.shard import write_shard
    from evocamp.model.layout import RunFolder

    folder = RunFolder(run)
    state = initialise(spec)
    write_state(folder.checkpoint(0), state, run=resolve_run(state.spec))
    blocks = []
    for generation in range(1, generations + 1):
        results = shard_results(state, shards)
        for result in results:
            write_shard(folder.shard(generation, result.shard), result)
        state = tell(state, results, storage=StorageSettings())
        blocks.append(state.evaluations)
        write_state(folder.work_state(generation), state, run=resolve_run(state.spec))
    return blocks


@pytest.mark.parametrize("algorithm", ["me", "oes", "cmame", "dec"])
def test_rows_rebuilt_from_the_files_are_the_told_rows(tmp_path, algorithm):
    """What keep and finalise record (rows made from shard files and states) is what
    tell makes in memory, bit for bit, for solutions, compact (ES) batches and points
    proposed in the shards (decentralised BO)."""
    from campaigns import BO_CAMPAIGN

    from evocamp.executors.steps import stored_rows
    from evocamp.model.layout import RunFolder

    if algorithm == "dec":
        campaign = validate_config(BO_CAMPAIGN, check_plugins=False)
        spec = run_spec(campaign, algorithm="dec", domain="ackley4", seed=0)
    else:
        spec = spec_of(algorithm)
    told = shard_mode_files(tmp_path / "run", spec, generations=3, shards=3)
    folder = RunFolder(tmp_path / "run")
    rebuilt = stored_rows(folder, run=resolve_run(spec), up_to=3, storage=StorageSettings())
    assert same_rows(rebuilt, concatenate(told))
    assert np.array_equal(rebuilt.eval_seconds, concatenate(told).eval_seconds)
    assert stored_rows(folder, run=resolve_run(spec), up_to=3, storage=None) is None, "not kept"
    assert list(
        stored_rows(folder, run=resolve_run(spec), up_to=2, storage=StorageSettings()).generations()
    ) == [1, 2]


def test_recording_is_keyed_by_generation(tmp_path):
    """Recording again (a step rerun after a kill) replaces a generation's rows, never
    adds them twice; later generations than the run's are dropped; a file of another
    run spec is replaced; gaps are named in the file."""
    spec = spec_of("me")
    blocks = told_rows(spec, generations=4, shards=2)
    path = tmp_path / "evaluations.h5"
    record_evaluations(path, blocks[0], spec=spec)
    record_evaluations(path, blocks[1], spec=spec)
    again = dataclasses.replace(blocks[1], eval_seconds=blocks[1].eval_seconds + 1)
    rows = record_evaluations(path, again, spec=spec)
    assert list(np.unique(rows.generation, return_counts=True)[1]) == [16, 16]
    assert np.array_equal(read_evaluations(path).eval_seconds[16:], again.eval_seconds)
    record_evaluations(path, blocks[3], spec=spec)
    with h5py.File(path, "r") as handle:
        assert handle.attrs["missing_generations"] == "3"
        assert handle.attrs["kind"] == "evaluations" and handle.attrs["generation"] == 4
    assert list(record_evaluations(path, blocks[2], spec=spec, up_to=3).generations()) == [1, 2, 3]
    with h5py.File(path, "r") as handle:
        assert handle.attrs["missing_generations"] == ""
    record_evaluations(path, blocks[3], spec=spec, up_to=6)  # 5 and 6 ran without keeping
    with h5py.File(path, "r") as handle:
        assert handle.attrs["missing_generations"] == "5..6"
        assert handle.attrs["generation"] == 6
    other = spec_of("me", master_seed=8)
    assert read_evaluations(path, spec=other) is None
    assert list(record_evaluations(path, blocks[0], spec=other).generations()) == [1]


def test_auto_keeps_bo_and_small_runs():
    settings = StorageSettings()
    me = resolve_run(spec_of("me"))
    assert settings.row_bytes(me) == 8 * (5 + 2 + 6)
    assert settings.keeps(me, generation_size=16, total=6)
    assert not settings.keeps(me, generation_size=16, total=10**6)
    assert not settings.keeps(me, generation_size=16, total=None)
    assert StorageSettings(keep=True).keeps(me, generation_size=16, total=None)
    assert not StorageSettings(keep=False).keeps(me, generation_size=16, total=6)
    assert StorageSettings(max_solution_params=5).row_bytes(me) == 8 * (5 + 2)
    bo = validate_config(
        {
            "algorithms": {"bo": {"type": "qucb_centralised", "batch_size": 4}},
            "domains": {"ackley": {"type": "ackley", "solution_dim": 4}},
        },
        check_plugins=False,
    )
    spec = run_spec(bo, algorithm="bo", domain="ackley", seed=0)
    assert settings.keeps(resolve_run(spec), generation_size=4, total=None)
    oes = resolve_run(spec_of("oes"))
    assert not settings.stores_solutions(oes) and settings.row_bytes(oes) == 8 * (5 + 2 + 1)
    round_trip = StorageSettings.from_config(
        __import__("json").loads(StorageSettings(keep=True, auto_max_mb=3).to_json())
    )
    assert round_trip == StorageSettings(keep=True, auto_max_mb=3)
    from_command_line = {"storage": {"keep_evaluations": "false"}}  # a string from --config
    assert StorageSettings.from_config(from_command_line).keep is False


def test_keep_and_finalise_record_each_row_once_when_run_again(tmp_path):
    """The keep step's recording and finalise's index, each run twice (a kill after
    the write and before the step's end makes Snakemake run it again), and a kill while
    keep prunes its window: every row once, none lost."""
    import shutil

    from evocamp.executors.steps import record_window
    from evocamp.model.layout import RunFolder

    spec = spec_of("me")
    run = tmp_path / "run"
    folder = RunFolder(run)
    segment = folder.evaluation_window(3)
    shard_mode_files(run, spec, generations=5, shards=2)
    settings = StorageSettings()
    for _ in range(2):
        record_window(folder, run=resolve_run(spec), up_to=3, total=5, storage=settings)
    shutil.rmtree(folder.work / "gen_000002")  # killed while pruning the window
    folder.work_state(1).unlink()
    record_window(folder, run=resolve_run(spec), up_to=3, total=5, storage=settings)
    assert list(read_evaluations(segment, spec=spec).generations()) == [1, 2, 3]
    folder.checkpoint(3).parent.mkdir(exist_ok=True)
    shutil.copyfile(folder.work_state(3), folder.checkpoint(3))  # the kept checkpoint
    for path in [*folder.work.glob("state_*.h5"), *folder.work.glob("gen_*")]:
        if int(path.name[-9:-3] if path.suffix else path.name[-6:]) <= 3:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    kept = segment.read_bytes()
    for _ in range(2):  # finalise, killed after writing evaluations.h5 and run again
        record_window(folder, run=resolve_run(spec), up_to=5, total=5, storage=settings)
    assert segment.read_bytes() == kept
    assert [p.name for p in folder.evaluation_window_files()] == [
        "segment_000003.h5",
        "segment_000005.h5",
    ]
    rows = read_evaluations(run / "evaluations.h5", spec=spec)
    assert list(rows.generation) == [g for g in range(1, 6) for _ in range(16)]
    assert list(rows.index) == list(range(16)) * 5


def test_the_last_window_is_written_once(tmp_path):
    """The run's last window (a kept generation or not) is written once, in its window
    file, and evaluations.h5 indexes the windows (a few kilobytes, no row copied);
    finalise after the last keep rewrites only the index."""
    from evocamp.executors.housekeeping import prune_work_files
    from evocamp.executors.steps import record_window
    from evocamp.model.layout import RunFolder

    spec = spec_of("me")
    folder = RunFolder(tmp_path / "run")
    told = shard_mode_files(folder.path, spec, generations=6, shards=2)
    settings = StorageSettings()
    record_window(folder, run=resolve_run(spec), up_to=3, total=6, storage=settings)
    folder.checkpoint(3).write_bytes(folder.work_state(3).read_bytes())
    prune_work_files(folder.work, up_to=3)
    record_window(folder, run=resolve_run(spec), up_to=6, total=6, storage=settings)  # keep 6
    windows = {p: p.stat().st_mtime_ns for p in folder.evaluation_window_files()}
    assert len(windows) == 2
    prune_work_files(folder.work, up_to=6)
    record_window(folder, run=resolve_run(spec), up_to=6, total=6, storage=settings)  # finalise
    assert {p: p.stat().st_mtime_ns for p in folder.evaluation_window_files()} == windows
    assert folder.evaluations.stat().st_size < 20_000 < sum(p.stat().st_size for p in windows)
    assert same_rows(read_evaluations(folder.evaluations, spec=spec), concatenate(told))


@pytest.mark.parametrize("algorithm", ["me", "oes"])
def test_the_index_presents_exactly_the_merged_rows(tmp_path, algorithm):
    """evaluations.h5 as virtual datasets over the window files reads (through evocamp
    and through plain h5py) as the windows' rows merged: a generation in two windows
    from the later one, none after the run's last generation, ES batches per
    generation; the run folder can move."""
    from evocamp.files.evaluations import indexed_window_files, record_window_rows
    from evocamp.model.layout import RunFolder

    spec = spec_of(algorithm)
    blocks = told_rows(spec, generations=7, shards=2)
    folder = RunFolder(tmp_path / "run")
    record_window_rows(folder, concatenate(blocks[0:3]), spec=spec, generation=3, total=6)
    record_window_rows(folder, concatenate(blocks[2:5]), spec=spec, generation=5, total=6)
    again = dataclasses.replace(blocks[4], objective=blocks[4].objective + 1.0)
    record_window_rows(
        folder, concatenate([again, blocks[5], blocks[6]]), spec=spec, generation=6, total=6
    )
    assert len(indexed_window_files(folder.evaluations)) == 3
    expected = concatenate([*blocks[0:4], again, blocks[5]])
    moved = tmp_path / "elsewhere"
    folder.path.rename(moved)
    rows = read_evaluations(moved / "evaluations.h5", spec=spec)
    assert same_rows(rows, expected)
    with h5py.File(moved / "evaluations.h5") as handle:
        assert handle["evaluations/objective"].is_virtual
        assert np.array_equal(handle["evaluations/objective"][()], expected.objective)
        assert handle.attrs["generation"] == 6 and handle.attrs["missing_generations"] == ""


def test_an_index_without_its_windows_is_refused(tmp_path):
    """An index whose window file is gone (or replaced by one with other rows) is
    refused with one message naming both files, never read as fill values."""
    from evocamp.base.errors import CorruptFileError
    from evocamp.files.evaluations import record_window_rows
    from evocamp.model.layout import RunFolder

    spec = spec_of("me")
    blocks = told_rows(spec, generations=4, shards=1)
    folder = RunFolder(tmp_path / "run")
    record_window_rows(folder, concatenate(blocks[:2]), spec=spec, generation=2, total=4)
    record_window_rows(folder, concatenate(blocks[2:]), spec=spec, generation=4, total=4)
    window = folder.evaluation_window(2)
    record_evaluations(window, blocks[0], spec=spec, up_to=1)  # other rows now
    with pytest.raises(CorruptFileError, match=f"{window} holds 16 rows, not 32"):
        read_evaluations(folder.evaluations)
    window.unlink()
    with pytest.raises(CorruptFileError, match=f"{window} is missing: keep a run folder"):
        read_evaluations(folder.evaluations)


def test_an_earlier_evaluations_file_with_rows_is_merged(tmp_path):
    """A run finished by an earlier version (its evaluations.h5 holds rows) and then
    given more generations: the old rows and the new windows are merged into one file
    of rows, the windows removed."""
    from evocamp.files.evaluations import indexed_window_files, record_window_rows
    from evocamp.model.layout import RunFolder

    spec = spec_of("me")
    blocks = told_rows(spec, generations=4, shards=1)
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    record_evaluations(folder.evaluations, concatenate(blocks[:2]), spec=spec, up_to=2)
    record_window_rows(folder, concatenate(blocks[2:]), spec=spec, generation=4, total=4)
    assert not indexed_window_files(folder.evaluations)
    assert not folder.evaluation_window_files()
    assert same_rows(read_evaluations(folder.evaluations, spec=spec), concatenate(blocks))


def test_a_finished_run_given_more_generations_reads_its_new_windows(tmp_path):
    """evocamp.results.run_evaluations of a finished run that runs on (more
    generations): the index's rows and the windows written since."""
    from evocamp.files.evaluations import record_window_rows
    from evocamp.model.layout import RunFolder
    from evocamp.results import run_evaluations

    spec = spec_of("me")
    blocks = told_rows(spec, generations=6, shards=1)
    folder = RunFolder(tmp_path / "run")
    record_window_rows(folder, concatenate(blocks[:2]), spec=spec, generation=2, total=4)
    record_window_rows(folder, concatenate(blocks[2:4]), spec=spec, generation=4, total=4)
    record_window_rows(folder, concatenate(blocks[4:]), spec=spec, generation=6, total=8)
    assert same_rows(run_evaluations(folder.path), concatenate(blocks))


def test_a_metrics_window_grows_in_place_and_a_second_tell_keeps_the_first_rows():
    """A generation's metrics row is written in the spare rows after its window
    (loop.fold.extended_window); telling the same state again (a second state after
    it) gets a window of its own and leaves the first one's rows as they were."""
    state = initialise(spec_of("oes", checkpoint_every=6))
    first = tell(state, shard_results(state, 1))
    results = shard_results(first, 1)
    second = tell(first, results)
    rows = second.metrics_window.copy()
    assert np.shares_memory(first.metrics_window, second.metrics_window)
    again = tell(first, results)
    assert second.metrics_window.tobytes() == rows.tobytes()
    assert not np.shares_memory(again.metrics_window, second.metrics_window)
    assert again.metrics_window[:2].tobytes() == rows[:2].tobytes()
    assert list(again.metrics_window["generation"]) == list(rows["generation"]) == [0, 1, 2]
