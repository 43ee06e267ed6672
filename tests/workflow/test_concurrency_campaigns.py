"""Evaluations several at once (``evaluation.concurrency``): a campaign whose shards
run them so, and Dask workers (Dask and asynchronous modes, real LocalClusters) that
do, each in a lane with GPUs of its own: the archive that of one at a time."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import PLUGINS, archive_digests, run_snakemake, shard_results, write_config
from test_failure_campaigns import misbehaving_config

from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.checkpoint import write_state
from evocamp.loop.engine import initialise, tell
from evocamp.loop.step_settings import STEP_VARIABLE, StepSettings

#: Some raise, some crash (seeds are random: about 1 in 13 and 1 in 17).
FAILURES = "raise %13\nsegfault %17"


@pytest.mark.slow
def test_concurrency_changes_no_archive_and_asks_its_cores(tmp_path, small_config):
    """Shard mode at concurrency 1 and 3, and Dask mode with one LocalCluster worker
    running 3 tasks at once, each in a lane of its own: one archive."""
    evaluation = {"on_failure": "discard"}
    for name, mode, concurrency in [("c1", "shards", 1), ("c3", "shards", 3), ("d3", "dask", 3)]:
        workdir = tmp_path / name
        workdir.mkdir()
        (workdir / "control").write_text(FAILURES + "\nwhere %1")
        config = misbehaving_config(
            small_config,
            workdir,
            evaluation={**evaluation, "concurrency": concurrency},
            generations=2,
            shards=2,
            mode=mode,
            dask={"workers": 1},
        )
        write_config(workdir, config)
        run_snakemake(workdir, "runs", cores=8)
        log = next((workdir / ".snakemake" / "log").iterdir()).read_text()
        assert ("threads: 3" in log) == (concurrency == 3)  # the evaluate or segment jobs'
        lanes = {lane for lane, _ in lanes_seen(workdir).values()}
        assert lanes <= ({"None"} if concurrency == 1 else {"0", "1", "2"}), lanes
    assert archive_digests(tmp_path / "c1") == archive_digests(tmp_path / "c3")
    assert archive_digests(tmp_path / "c1") == archive_digests(tmp_path / "d3")
    logs = [
        "".join(path.read_text() for path in (tmp_path / name / "results").rglob("*.log"))
        for name in ("c1", "c3")
    ]
    assert logs[0].count("(discarded)") == logs[1].count("(discarded)") > 0


def plugin_domain(tmp_path, rules: str) -> dict:
    """The misbehaving test plugin's domain (3-d), ``rules`` in its control file."""
    (tmp_path / "control").write_text(rules)
    return {
        "type": "plugin",
        "function": "evocamp_test_plugin:misbehaving_sphere",
        "python_path": str(PLUGINS),
        "solution_dim": 3,
        "measure_ranges": [[-3, 3], [-3, 3]],
        "params": {"control_file": str(tmp_path / "control"), "marker_dir": str(tmp_path)},
    }


def lanes_seen(tmp_path) -> dict[int, tuple[str, str]]:
    """Each evaluated seed's lane and GPUs (the test plugin's ``where`` rule)."""
    seen = {}
    for line in (tmp_path / "where").read_text().splitlines():
        seed, lane, gpus = line.split()
        seen[int(seed)] = (lane, gpus)
    return seen


#: Fake GPU ids (no GPU needed): 2 workers x 2 lanes x 2 GPUs.
FAKE_GPUS = "a,b,c,d,e,f,g,h"


def test_dask_workers_run_their_lanes_at_once_each_with_its_gpus(tmp_path, monkeypatch):
    """Dask mode, a LocalCluster of 2 workers at concurrency 2 with 2 GPUs per
    evaluation: worker w sees GPUs 4w..4w+3, each task's evaluations run in a lane of
    its worker with 2 of them, and the archive is bitwise shard mode's at concurrency 1."""
    from evocamp.executors.dask_cluster import DaskResources, dask_client
    from evocamp.executors.dask_mode import run_generations

    monkeypatch.delenv(STEP_VARIABLE, raising=False)
    config = {
        "algorithms": {"me": {"type": "map_elites", "emitters": 1, "emitter_batch_size": 8}},
        "domains": {"d": plugin_domain(tmp_path, rules="where %1\nslow %1\nslow %1")},
    }
    state = initialise(run_spec(validate_config(config), algorithm="me", domain="d", seed=0))
    expected = tell(state, shard_results(state, 4)).archive.data()
    (tmp_path / "where").unlink()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", FAKE_GPUS)
    resources = DaskResources(concurrency=2, gpus=2)
    with dask_client(scheduler_file=None, workers=2, where="run a", resources=resources) as client:
        workers = client.scheduler_info()["workers"].values()
        assert sorted(w["resources"]["GPU"] * 10 + w["nthreads"] for w in workers) == [42, 42]
        told = run_generations(
            state, until=1, shards=4, client=client, workers=4, total=1, resources=resources
        )
    archive = told.archive.data()
    for name, values in expected.items():
        np.testing.assert_array_equal(archive[name], values, err_msg=name)
    seen = lanes_seen(tmp_path)
    assert sorted(seen) == sorted(int(seed) for seed in state.next_seeds)
    lane_gpus = {("0", "a,b"), ("1", "c,d"), ("0", "e,f"), ("1", "g,h")}
    assert set(seen.values()) <= lane_gpus
    assert {lane for lane, _ in seen.values()} == {"0", "1"}  # two at once on a worker


def test_asynchronous_slots_run_in_the_lanes_of_their_workers(tmp_path, monkeypatch):
    """Asynchronous mode, a LocalCluster of 2 workers at concurrency 2 with a GPU per
    evaluation: the state a segment writes is bitwise that of evaluating in process."""
    from evocamp.executors.async_mode import run_async_segment
    from evocamp.files.checkpoint import read_state
    from evocamp.loop.asynchronous import (
        AsynchronousLoop,
        Resume,
        evaluate_in_process,
        initialise_asynchronous,
    )

    monkeypatch.delenv(STEP_VARIABLE, raising=False)
    config = validate_config(
        {
            "mode": "async",
            "async": {"slots": 4},
            "algorithms": {"rs": {"type": "random_search", "batch_size": 4}},
            "domains": {"d": {**plugin_domain(tmp_path, rules="where %1"), "bounds": [-3, 3]}},
        }
    )
    spec = run_spec(config, algorithm="rs", domain="d", seed=0)
    submit, wait = evaluate_in_process(spec)
    expected = AsynchronousLoop(
        initialise_asynchronous(spec),
        resume=Resume.from_log([], told=0, spec=spec),
        submit=submit,
        wait=wait,
        record=lambda completion: None,
        workers=1,
    ).run(until=2)
    (tmp_path / "where").unlink()
    state_file = tmp_path / "state.h5"
    write_state(state_file, initialise_asynchronous(spec), run=resolve_run(spec))
    monkeypatch.setenv(STEP_VARIABLE, StepSettings(concurrency=2, gpus_per_evaluation=1).to_json())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "a,b,c,d")
    run_async_segment(
        state_path=state_file,
        until=2,
        output=tmp_path / "out.h5",
        completions=tmp_path / "completions.jsonl",
        scheduler_file=None,
        workers=2,
        total=2,
        log=lambda line: None,
    )
    told = read_state(tmp_path / "out.h5")
    archive, wanted = told.archive.data(), expected.archive.data()
    for name, values in wanted.items():
        np.testing.assert_array_equal(archive[name], values, err_msg=name)
    assert told.next_seeds.tobytes() == expected.next_seeds.tobytes()
    assert set(lanes_seen(tmp_path).values()) <= {("0", "a"), ("1", "b"), ("0", "c"), ("1", "d")}
