"""Evaluations of a shard run at once (``evaluation.concurrency``, base/lanes.py): the
shard's results those of one lane, GPUs given out per lane."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from conftest import shard_results
from test_failures import plugin_state, seed_at
from test_journal import _lines, _wait_for, hanging_shard
from test_programs import command_spec, evaluate, work

from evocamp.base.errors import ConfigError, EvaluationError
from evocamp.base.lanes import Lane, in_lanes, lane_devices, worker_devices
from evocamp.catalogue.factory import resolve_run
from evocamp.config import validate_config
from evocamp.files.shard import read_shard
from evocamp.loop.engine import held_batch
from evocamp.loop.evaluation import evaluate_shard
from evocamp.loop.step_settings import STEP_VARIABLE, StepSettings

CONFIG = {
    "algorithms": {"me": {"type": "map_elites"}},
    "domains": {"d": {"type": "sphere"}},
}


def at_concurrency(monkeypatch, concurrency: int, state, shards: int = 2) -> list:
    monkeypatch.setenv(STEP_VARIABLE, StepSettings(concurrency=concurrency).to_json())
    return shard_results(state, shards)


def test_a_shard_at_concurrency_4_is_that_at_1(tmp_path, monkeypatch):
    # No timeout: a crash's core dump may outlast a short one on a loaded machine.
    policy = {"on_failure": "retry", "retries": 1, "after_retries": "discard"}
    state = plugin_state(tmp_path, evaluation=policy)
    rules = [
        f"segfault {seed_at(state, 1)}",
        f"exit {seed_at(state, 2)}",
        f"raise {seed_at(state, 5)}",
        f"segfault_once {seed_at(state, 6)}",
    ]
    (tmp_path / "control").write_text("\n".join(rules))
    one = at_concurrency(monkeypatch, 1, state)
    (tmp_path / f"crashed-{seed_at(state, 6)}").unlink()  # segfault_once crashes again
    four = at_concurrency(monkeypatch, 4, state)
    for got, want in zip(four, one, strict=True):
        assert got.objective.tobytes() == want.objective.tobytes()
        assert got.measures.tobytes() == want.measures.tobytes()
        assert got.messages == want.messages
        for name in ("status", "attempts"):
            assert getattr(got, name).tobytes() == getattr(want, name).tobytes()
    status = np.concatenate([r.status for r in one])
    assert np.flatnonzero(status).tolist() == [1, 2, 5]
    assert np.concatenate([r.attempts for r in one]).tolist() == [1, 2, 2, 1, 1, 1, 2, 1]


def test_under_stop_the_first_failed_call_is_named_at_any_concurrency(tmp_path, monkeypatch):
    state = plugin_state(tmp_path)
    (tmp_path / "control").write_text(f"raise {seed_at(state, 3)}\nexit {seed_at(state, 1)}")
    messages = []
    for concurrency in (1, 4):
        with pytest.raises(EvaluationError) as raised:
            at_concurrency(monkeypatch, concurrency, state, shards=1)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("run me/d/seed0, generation 1, shard 0, solution 1: ")


def test_lanes_run_at_once_and_results_come_by_index():
    barrier = threading.Barrier(3, timeout=10)  # broken unless 3 lanes wait together
    others_done = threading.Event()
    lanes_of = {}

    def lane(j, take, results):
        barrier.wait()
        while (k := take()) is not None:
            if k == 0:  # held up until the other lanes took and did every other item
                assert others_done.wait(timeout=10)
            results[k] = k * k
            lanes_of[k] = j
            if len(results) == 6 and 0 not in results:
                others_done.set()

    results = in_lanes(lane, list(range(7)), 3)
    assert [results[k] for k in range(7)] == [k * k for k in range(7)]
    assert lanes_of[0] not in {lanes_of[k] for k in range(1, 7)}


def test_a_free_lane_takes_the_next_call(tmp_path, monkeypatch):
    """Calls 0 and 2 take 1.6 s, the others none: lanes taking calls by turn would give
    both to one lane (3.2 s); a free lane takes the next, so another lane takes call 2
    and 2 lanes take about 1.6 s, and the shard's results are those of one lane (a time
    limit given each call as it is taken)."""
    state = plugin_state(tmp_path, evaluation={"timeout": 60})
    slow = [f"slow {seed_at(state, k)}" for k in (0, 2) for _ in range(8)]  # 0.2 s each
    (tmp_path / "control").write_text("\n".join(["where %1", *slow]))
    (one,) = at_concurrency(monkeypatch, 1, state, shards=1)
    (tmp_path / "where").unlink()
    began = time.perf_counter()
    (two,) = at_concurrency(monkeypatch, 2, state, shards=1)
    seconds = time.perf_counter() - began
    lanes = dict(line.split()[:2] for line in (tmp_path / "where").read_text().splitlines())
    assert lanes[str(seed_at(state, 0))] != lanes[str(seed_at(state, 2))]
    assert seconds < 2.9, seconds
    for name in ("objective", "measures", "status", "attempts"):
        assert (
            getattr(two, name) is None
            or getattr(two, name).tobytes() == getattr(one, name).tobytes()
        ), name
    assert two.messages == one.messages
    assert one.eval_seconds[[0, 2]].min() > 1.5


def test_each_lane_gets_its_own_gpus():
    assert [lane_devices(j, 2, "4,5,6,7") for j in range(2)] == ["4,5", "6,7"]
    assert lane_devices(2, 1, None) == "2"
    assert lane_devices(1, 1, "GPU-a, GPU-b") == "GPU-b"
    with pytest.raises(ConfigError) as raised:
        lane_devices(2, 2, "0,1,2,3")
    assert str(raised.value) == (
        "evaluation lane 2 needs GPUs 4..5 (evaluation.gpus_per_evaluation 2) but the job "
        "sees 4 (CUDA_VISIBLE_DEVICES=0,1,2,3)"
    )


FAKE_LAUNCHER = """#!/bin/sh
# fakerun -n N PROGRAM ...: starts N processes of PROGRAM, RANK set in each, as mpirun does
n=$2; shift 2; rank=0
while [ $rank -lt $n ]; do RANK=$rank "$@" & rank=$((rank + 1)); done
wait
"""


def test_ranks_through_a_launcher_and_a_gpu_per_lane(tmp_path, monkeypatch):
    """Two lanes with one GPU each, of the job's 7 and 9; each evaluation 3 processes
    started by the launcher; every process says what it sees."""
    launcher = tmp_path / "fakerun"
    launcher.write_text(FAKE_LAUNCHER)
    launcher.chmod(0o755)
    said = 'echo "$RANK/{ranks} lane $EVOCAMP_LANE gpu $CUDA_VISIBLE_DEVICES" >> said'
    results = 'if [ "$RANK" = 0 ]; then printf "1\\n2\\n3\\n" > {results}; fi'
    spec = command_spec(
        tmp_path,
        command=["sh", "-c", f"{said}; {results}"],
        ranks=3,
        launcher=f"{launcher} -n {{ranks}}",
        keep_work="all",
    )
    settings = StepSettings(concurrency=2, gpus_per_evaluation=1)
    monkeypatch.setenv(STEP_VARIABLE, settings.to_json())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,9")
    result = evaluate(spec, [1, 2, 3, 4])
    assert result.status is None and result.objective.tolist() == [-1.0] * 4
    run = work(tmp_path) / "default/me/d/seed0/g3"
    for solution in (4, 5, 6, 7):  # whichever lane took it, that lane's GPU
        lines = sorted((run / f"s{solution}" / "said").read_text().splitlines())
        lane = lines[0].split()[2]
        assert lane in ("0", "1")
        gpu = {"0": 7, "1": 9}[lane]
        assert lines == [f"{rank}/3 lane {lane} gpu {gpu}" for rank in range(3)]


@pytest.mark.parametrize(
    ("domain", "problem"),
    [
        ({"ranks": 4}, "key 'domains.d.ranks': 4 ranks, but neither the launcher nor the"),
        ({"launcher": "mpirun -n {np}"}, "key 'domains.d.launcher': unknown placeholder {np}"),
        (
            {"launcher": "srun --exact -n {ranks}"},
            "key 'domains.d.launcher': srun without --overlap waits for ever inside a shard job",
        ),
    ],
)
def test_ranks_and_launchers_are_checked(tmp_path, domain, problem):
    with pytest.raises(ConfigError) as raised:
        command_spec(tmp_path, **domain)
    assert problem in str(raised.value)


def test_concurrency_and_gpus_are_step_settings_not_part_of_the_run_spec(tmp_path):
    plain = plugin_state(tmp_path).spec
    wide = plugin_state(tmp_path, evaluation={"concurrency": 4, "gpus_per_evaluation": 1}).spec
    assert wide == plain
    settings = StepSettings.from_config(
        validate_config({**CONFIG, "evaluation": {"concurrency": 4, "gpus_per_evaluation": 2}})
    )
    assert StepSettings.from_json(settings.to_json()) == settings
    assert (settings.concurrency, settings.gpus_per_evaluation) == (4, 2)


@pytest.mark.parametrize("mode", ["dask", "async"])
def test_dask_tasks_ask_their_workers_for_their_lanes_resources(tmp_path, mode):
    """Dask and asynchronous modes take the keys (the tasks ask for worker resources;
    the tests with real LocalClusters are in tests/workflow/test_concurrency_campaigns.py)."""
    from evocamp.executors.dask_cluster import DaskResources

    evaluation = {"concurrency": 2, "gpus_per_evaluation": 1}
    validate_config({**CONFIG, "mode": mode, "evaluation": evaluation})
    launcher = f"{tmp_path / 'fakerun'} -n {{ranks}}"
    run = resolve_run(command_spec(tmp_path, ranks=3, launcher=launcher))
    settings = StepSettings(concurrency=2, gpus_per_evaluation=1)
    resources = DaskResources.of(run, settings)
    assert (resources.task(), resources.worker()) == (
        {"cores": 3, "GPU": 1},
        {"cores": 6, "GPU": 2},
    )
    assert resources.lane_gpus() == 1
    plain = DaskResources.of(run, StepSettings())
    assert (plain.task(), plain.worker(), plain.lane_gpus()) == ({"cores": 3}, {"cores": 3}, None)
    assert DaskResources(concurrency=2).lane_gpus() == 0  # lanes, no GPUs
    assert DaskResources().task() is None  # asks nothing of a cluster's workers


@pytest.mark.parametrize("number", [0, 1])
def test_a_dask_task_runs_its_calls_in_its_lane_one_at_a_time(tmp_path, monkeypatch, number):
    """A task in lane ``number`` of its worker (no GPUs): every call's child has the
    lane's number, and the shard's results are those of no lane."""
    monkeypatch.delenv(STEP_VARIABLE, raising=False)
    state = plugin_state(tmp_path, rules="where %1")
    (plain,) = shard_results(state, 1)
    (tmp_path / "where").unlink()
    laned = evaluate_shard(
        resolve_run(state.spec),
        batch=held_batch(state),
        seeds=state.next_seeds,
        generation=1,
        shard=0,
        shards=1,
        lane=Lane(number),
    )
    assert laned.objective.tobytes() == plain.objective.tobytes()
    lines = (tmp_path / "where").read_text().splitlines()
    assert [line.split()[1:] for line in lines] == [[str(number), "None"]] * 8


def test_each_local_dask_worker_gets_its_own_gpus():
    assert [worker_devices(w, 2, "a,b,c,d") for w in range(2)] == ["a,b", "c,d"]
    assert worker_devices(1, 3, None) == "3,4,5"
    with pytest.raises(ConfigError) as raised:
        worker_devices(1, 4, "0,1,2,3,4")
    assert str(raised.value) == (
        "Dask worker 1 needs GPUs 4..7 (evaluation.concurrency x evaluation.gpus_per_evaluation: "
        "4 per worker) but the job sees 5 (CUDA_VISIBLE_DEVICES=0,1,2,3,4)"
    )


def test_a_killed_shard_step_at_concurrency_3_reruns_only_its_unjournalled_call(
    tmp_path, monkeypatch
):
    """Lanes journal each call as it finishes: SIGKILL while solution 5 hangs and the
    7 others are journalled; the rerun evaluates solution 5 only, and the shard file
    is bitwise the undisturbed one's."""
    monkeypatch.setenv(STEP_VARIABLE, StepSettings(concurrency=3).to_json())
    shard = hanging_shard(tmp_path)
    step = shard.start()
    _wait_for(lambda: len(_lines(shard.journal)) == 8, "the journal's key and 7 calls")
    shard.kill(step)
    log = shard.rerun()
    assert "7 of 8 calls journalled by an earlier attempt, not evaluated again" in log
    seeds = shard.seeds
    assert sorted(int(seed) for seed in _lines(shard.evaluated)) == sorted(seeds + [seeds[5]])
    (undisturbed,) = shard_results(shard.state, 1)
    written = read_shard(shard.output)
    for name in ("objective", "measures"):
        assert getattr(written, name).tobytes() == getattr(undisturbed, name).tobytes()
