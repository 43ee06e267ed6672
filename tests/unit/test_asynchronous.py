"""Asynchronous mode in process: the completion log, the virtual clock's independence of
arrival order, resume and replay from the log, and its error messages."""

from __future__ import annotations

import copy

import h5py
import numpy as np
import pytest
from campaigns import ASYNC_CAMPAIGN
from conftest import PLUGINS, error_of, merged, write_final

from evocamp.base.errors import CorruptFileError, EvaluationError
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.checkpoint import read_state, write_state
from evocamp.files.completions import Completion, CompletionLog, read_completions
from evocamp.loop.asynchronous import (
    AsynchronousLoop,
    LogMismatchError,
    Resume,
    evaluate_in_process,
    initialise_asynchronous,
    replay,
)
from evocamp.loop.in_flight import decode_in_flight, evaluate_in_flight
from evocamp.loop.step_settings import STEP_VARIABLE, StepSettings
from evocamp.model.layout import RunFolder

#: The asynchronous test campaign without sleeping (durations stay virtual).
FAST = merged(
    ASYNC_CAMPAIGN,
    {
        "domains": {
            "ackley4": {
                "type": "ackley",
                "solution_dim": 4,
                "simulated_seconds": {"distribution": "exponential", "mean": 0.0},
            }
        },
        "async": {"slots": 4, "virtual_seconds": {"distribution": "exponential", "mean": 1.0}},
    },
)
for _name in ("dec", "cen"):  # cheap surrogates: these tests are about the loop
    FAST["algorithms"][_name].update(candidates=50, refine_generations=1, trees=3)


def spec_of(config: dict, algorithm: str) -> dict:
    """A run spec whose virtual durations are exponential (no sleeping)."""
    config = copy.deepcopy(config)
    del config["domains"]["ackley4"]["simulated_seconds"]
    return run_spec(validate_config(config), algorithm=algorithm, domain="ackley4", seed=0)


def run_in_process(spec: dict, *, until: int, order=None, resume=None, state=None, keep_ahead=True):
    """Run ``spec`` to generation ``until`` evaluating in process; ``order`` (a
    random generator) returns finished evaluations in a shuffled order, as a cluster
    might; ``keep_ahead=False`` drops the proposals the workers made ahead (as a kill
    would). Returns the state and the log."""
    submitted, logged = {}, []

    def submit(entry):
        submitted[entry.evaluation] = entry

    def wait(evaluation):
        chosen = evaluation if order is None else order.choice(sorted(submitted))
        completion = evaluate_in_flight(spec, submitted.pop(chosen))
        if not keep_ahead:
            completion.ahead = None
        return completion

    loop = AsynchronousLoop(
        state or initialise_asynchronous(spec),
        resume=resume or Resume.from_log([], told=0, spec=spec),
        submit=submit,
        wait=wait,
        record=logged.append,
        workers=4,
    )
    return loop.run(until=until), logged


@pytest.mark.parametrize("algorithm", ["dec", "cen", "rs"])
def test_virtual_clock_does_not_depend_on_arrival_order(tmp_path, algorithm):
    """Completions arriving in any order give the same run, bit for bit: the virtual
    clock decides what is told next (ties by evaluation id)."""
    spec = spec_of(FAST, algorithm)
    first, told = run_in_process(spec, until=3)
    shuffled, logged = run_in_process(spec, until=3, order=np.random.default_rng(5))
    assert write_final(tmp_path / "a.h5", first) == write_final(tmp_path / "b.h5", shuffled)
    assert first.generation == 3 and int(first.metrics_window["evaluations"][-1]) == 18
    assert len(logged) >= 18
    # Told in virtual-clock order (here the log's order), which the exponential
    # durations make differ from the id order; shuffled arrivals are logged as they come.
    order = [c.evaluation for c in told]
    assert len(order) == 18 and order != sorted(order)
    assert [c.evaluation for c in logged] != order


@pytest.mark.parametrize("ahead", [False, True])
def test_resume_from_any_log_prefix_and_replay_are_bitwise_identical(tmp_path, ahead):
    """A kill after any number of logged completions: resuming from the initial state
    with the log's prefix (its completions are not evaluated again) gives the
    uninterrupted run; replaying the whole log gives it without evaluating at all (with
    proposals ahead too)."""
    spec = spec_of(merged(FAST, {"async": {"propose_ahead": ahead}}), "dec")
    reference, logged = run_in_process(spec, until=3)
    expected = write_final(tmp_path / "reference.h5", reference)
    for cut in (1, 7, 13):
        resume = Resume.from_log(logged[:cut], told=0, spec=spec)
        resumed, more = run_in_process(spec, until=3, resume=resume)
        assert write_final(tmp_path / f"cut{cut}.h5", resumed) == expected
        assert {c.evaluation for c in more}.isdisjoint(c.evaluation for c in logged[:cut])
    replayed = replay(spec, logged, generations=3)
    assert write_final(tmp_path / "replayed.h5", replayed) == expected
    with pytest.raises(CorruptFileError, match="the completion log ends before generation 3"):
        replay(spec, logged[:10], generations=3)


def test_retried_and_failed_completions_are_counted_and_replayed(tmp_path):
    """Asynchronous mode under retry (then discard): a transient crash is retried, a
    raise is discarded; the metrics count every attempt, the retries and the failed
    attempts' seconds as the synchronous loop does, the completion log keeps them,
    and a replay from the log gives the same columns."""
    config = merged(
        FAST,
        {
            "domains": {
                "ackley4": {
                    "type": "plugin",
                    "function": "evocamp_test_plugin:misbehaving_sphere",
                    "python_path": str(PLUGINS),
                    "solution_dim": 4,
                    "bounds": [-1.0, 1.0],
                    "measure_ranges": [[-1.0, 1.0], [-1.0, 1.0]],
                    "params": {
                        "control_file": str(tmp_path / "control"),
                        "marker_dir": str(tmp_path),
                    },
                }
            },
            "evaluation": {"on_failure": "retry", "retries": 1, "after_retries": "discard"},
        },
    )
    config["algorithms"] = {"rs": config["algorithms"]["rs"]}
    (tmp_path / "control").write_text("segfault_once %3\nraise %5")
    spec = run_spec(validate_config(config), algorithm="rs", domain="ackley4", seed=0)
    state, logged = run_in_process(spec, until=3)
    rows = state.metrics_window[1:]
    crashed = len(list(tmp_path.glob("crashed-*")))
    assert crashed and rows["retries"].sum() == crashed
    assert (rows["attempts"] == 6 + rows["retries"]).all()
    assert rows["failed"].sum() == sum(1 for c in logged if c.status) > 0
    retried = rows["retries"] > 0
    assert (rows["failed_seconds"][retried] > 0).all()
    read = [Completion.from_json(c.to_json()) for c in logged]
    assert [c.attempts for c in read] == [c.attempts for c in logged]
    assert [c.failed_seconds for c in read] == [c.failed_seconds for c in logged]
    again = replay(spec, read, generations=3).metrics_window[1:]
    for name in ("attempts", "retries", "failed", "failed_seconds"):
        assert again[name].tolist() == rows[name].tolist(), name


#: Steady-state MAP-Elites (Gaussian and iso-line emitters) on the 6-d sphere.
QD_ASYNC = {
    "campaign": "qd_async",
    "mode": "async",
    "checkpoint_every": 2,
    "async": {"slots": 4, "virtual_seconds": {"distribution": "exponential", "mean": 1.0}},
    "algorithms": {
        "me": {"type": "map_elites", "emitters": 2, "batch_size": 4, "archive": {"dims": [8, 8]}},
        "line": {"type": "map_elites_line", "batch_size": 6, "archive": {"dims": [8, 8]}},
    },
    "domains": {"sphere": {"type": "sphere", "solution_dim": 6}},
}


@pytest.mark.parametrize("algorithm", ["me", "line"])
def test_steady_state_map_elites_is_reproducible_through_checkpoints(tmp_path, algorithm):
    """Steady-state MAP-Elites: any arrival order and a checkpoint written and read back
    halfway (the evaluations in flight go with it; kept as a delta of the kept
    checkpoint of generation 1) give the same archive."""
    spec = run_spec(validate_config(QD_ASYNC), algorithm=algorithm, domain="sphere", seed=0)
    straight, _ = run_in_process(spec, until=4)
    folder = RunFolder(tmp_path / "run")
    folder.checkpoints.mkdir(parents=True)
    write_state(
        folder.checkpoint(1), run_in_process(spec, until=1)[0], run=resolve_run(spec), full_every=10
    )
    halfway, logged = run_in_process(spec, until=2, order=np.random.default_rng(1))
    write_state(folder.checkpoint(2), halfway, run=resolve_run(halfway.spec), full_every=10)
    with h5py.File(folder.checkpoint(2), "r") as handle:
        assert handle.attrs["delta_base"] == 1 and "archive" not in handle
    resumed, _ = run_in_process(
        spec,
        until=4,
        state=read_state(folder.checkpoint(2)),
        resume=Resume.from_log(
            logged, told=int(halfway.metrics_window["evaluations"][-1]), spec=spec
        ),
    )
    assert write_final(tmp_path / "a.h5", straight) == write_final(tmp_path / "b.h5", resumed)
    assert straight.archive.stats.num_elites >= 2  # the archive grows with every tell


def test_a_log_of_another_configuration_is_refused():
    spec = spec_of(FAST, "rs")
    _, logged = run_in_process(spec, until=1)
    other = copy.deepcopy(spec)
    other["master_seed"] = 99
    with pytest.raises(LogMismatchError, match="is not the solution this run proposed"):
        replay(other, logged, generations=1)


def test_completion_log_is_exact_and_survives_a_torn_last_line(tmp_path):
    path = tmp_path / "completions.jsonl"
    completions = [
        Completion(
            evaluation=index,
            slot=index % 3,
            solution=np.random.default_rng(index).normal(size=5),
            objective=float(np.random.default_rng(index).normal()) * 1e-7,
            measures=np.array([0.1 + index, 1 / 3]),
            extra={"accuracy": 2 / 7},
            eval_seconds=0.25,
            stats={"fit_seconds": 0.5},
        )
        for index in range(4)
    ]
    with CompletionLog(path) as log:
        for completion in completions[:3]:
            log.append(completion)
    with open(path, "ab") as handle:  # a kill in the middle of the next append
        handle.write(completions[3].to_json().encode()[:40])
    read = read_completions(path)
    assert [c.to_json() for c in read] == [c.to_json() for c in completions[:3]]
    assert read[1].solution.tobytes() == completions[1].solution.tobytes()
    with CompletionLog(path) as log:  # the partial line is cut off before appending
        log.append(completions[3])
    assert [c.to_json() for c in read_completions(path)] == [c.to_json() for c in completions]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[2:]]) + "\n")
    with pytest.raises(CorruptFileError, match=r"completions.jsonl, line 2: not a completion"):
        read_completions(path)


@pytest.mark.parametrize(
    ("algorithm", "why"),
    [
        ({"type": "cma_me"}, "its CMA-ES emitters rank and adapt on whole batches"),
        ({"type": "cma_mae"}, "its CMA-ES emitters rank and adapt on whole batches"),
        ({"type": "openai_es"}, "it computes each update from a whole population"),
        ({"type": "snes"}, "it computes each update from a whole population"),
    ],
)
def test_batch_only_algorithms_are_refused_in_async_mode(algorithm, why):
    config = {
        "mode": "async",
        "algorithms": {"mine": algorithm},
        "domains": {"sphere": {"type": "sphere"}},
    }
    message = error_of(config)
    assert f"key 'algorithms.mine.type': {algorithm['type']} cannot run in mode async: " in message
    assert why in message
    assert "run it with mode dask or shards" in message


def test_dask_mode_without_workers_is_refused_in_async_mode():
    config = {
        "mode": "async",
        "dask": {"workers": 0},
        "algorithms": {"rs": {"type": "random_search"}},
        "domains": {"ackley": {"type": "ackley", "solution_dim": 2}},
    }
    assert error_of(config).endswith(
        "key 'dask.workers': 0 (evaluating in the segment's own process) is for mode dask "
        "only: mode async keeps its slots' evaluations in flight on Dask workers; give it at "
        "least 1"
    )
    validate_config({**config, "mode": "dask"})  # Dask mode takes it


def test_a_plugin_without_the_asynchronous_methods_is_refused():
    config = merged(
        FAST,
        {
            "algorithms": {
                "mine": {
                    "type": "plugin",
                    "class": "my_optimizers:OnePlusLambda",
                    "python_path": str(PLUGINS),
                    "params": {"lam": 4},
                }
            }
        },
    )
    del config["algorithms"]["dec"], config["algorithms"]["cen"], config["algorithms"]["rs"]
    assert (
        "key 'algorithms.mine.class': my_optimizers:OnePlusLambda cannot run in mode async: "
        "it has no ask_async() and tell_async()"
    ) in error_of(config)


#: A 4-d plugin domain whose evaluation raises when the first coordinate is negative.
FAILING_ACKLEY4 = {
    "type": "plugin",
    "function": "evocamp_test_plugin:fails_on_negative_first",
    "python_path": str(PLUGINS),
    "solution_dim": 4,
    "bounds": [-1.0, 1.0],
    "measure_ranges": [[-1.0, 1.0]],
}


def test_a_discarded_evaluation_is_named_when_told_not_when_evaluated(capfd):
    """Under discard, evaluating an asynchronous evaluation writes nothing; the loop
    names each failed completion once, as it tells it (a segment that tells it again
    after a kill names it again, from the log)."""
    config = merged(
        FAST,
        {
            "evaluation": {"on_failure": "discard"},
            "domains": {"ackley4": FAILING_ACKLEY4},
        },
    )
    config["algorithms"] = {"rs": config["algorithms"]["rs"]}
    spec = run_spec(validate_config(config), algorithm="rs", domain="ackley4", seed=0)
    submit, wait = evaluate_in_process(spec)
    logged, named = [], []
    AsynchronousLoop(
        initialise_asynchronous(spec),
        resume=Resume.from_log([], told=0, spec=spec),
        submit=submit,
        wait=wait,
        record=logged.append,
        workers=1,
        discarded=named.append,
    ).run(until=1)
    assert capfd.readouterr().err == ""
    failed = [c for c in logged if c.status]
    assert failed and [c.evaluation for c in named] == [c.evaluation for c in failed]
    again = []
    AsynchronousLoop(
        initialise_asynchronous(spec),
        resume=Resume.from_log(logged, told=0, spec=spec),
        submit=submit,
        wait=wait,
        record=lambda c: None,
        workers=1,
        discarded=again.append,
    ).run(until=1)
    assert [c.evaluation for c in again] == [c.evaluation for c in named]


def test_a_failing_evaluation_names_the_evaluation_and_its_slot():
    config = merged(
        FAST,
        {"domains": {"ackley4": FAILING_ACKLEY4}},
    )
    spec = run_spec(validate_config(config), algorithm="rs", domain="ackley4", seed=0)
    submit, wait = evaluate_in_process(spec)
    with pytest.raises(EvaluationError, match=r"run rs/ackley4/seed0, evaluation \d+, slot \d"):
        AsynchronousLoop(
            initialise_asynchronous(spec),
            resume=Resume.from_log([], told=0, spec=spec),
            submit=submit,
            wait=wait,
            record=lambda c: None,
            workers=1,
        ).run(until=2)


def test_proposals_made_ahead_are_those_made_in_place_and_survive_a_checkpoint(tmp_path):
    """Proposals ahead (the default), decentralised: every worker makes its slot's queued
    proposal while it evaluates and hands it back; a run whose workers' proposals are
    dropped (each made again in place, as after a kill) and a run resumed from a
    checkpoint holding queued proposals are the uninterrupted run, bit for bit. Each
    queued proposal saw the history told when its slot's evaluation in flight started,
    and that evaluation's point as pending (a constant liar)."""
    spec = spec_of(merged(FAST, {"async": {"propose_ahead": True}}), "dec")
    assert spec["asynchronous"]["propose_ahead"] is True
    straight, logged = run_in_process(spec, until=4)
    expected = write_final(tmp_path / "straight.h5", straight)
    assert sum(c.ahead is not None for c in logged) == len(logged)  # all made ahead
    shuffled, _ = run_in_process(spec, until=4, order=np.random.default_rng(2))
    assert write_final(tmp_path / "shuffled.h5", shuffled) == expected
    halfway, _ = run_in_process(spec, until=2, keep_ahead=False)
    path = tmp_path / "halfway.h5"
    write_state(path, halfway, run=resolve_run(spec), full_every=1)
    state = read_state(path)
    standing = decode_in_flight(state.next_batch, state.next_seeds)
    assert sorted(standing.queued) == [0, 1, 2, 3] and len(standing.in_flight) == 4
    for slot, entry in standing.queued.items():
        # Asked when the slot's last completion was told (in the log: the order told).
        told_then = max(k + 1 for k, c in enumerate(logged[: standing.told]) if c.slot == slot)
        assert len(entry.batch["y"]) == told_then and np.isnan(entry.start)
    for entry in standing.in_flight.values():  # its pending point: the slot's last told
        last = [c for c in logged[: standing.told] if c.slot == entry.slot][-1]
        assert entry.batch["pending"].tobytes() == last.solution.reshape(1, -1).tobytes()
    resumed, _ = run_in_process(spec, until=4, state=state)
    assert write_final(tmp_path / "resumed.h5", resumed) == expected
    # Proposing only once a slot is freed (the default) is another algorithm.
    old = spec_of(FAST, "dec")
    assert "propose_ahead" not in old["asynchronous"]
    assert write_final(tmp_path / "old.h5", run_in_process(old, until=4)[0]) != expected


@pytest.mark.parametrize("algorithm", ["dec", "cen"])
def test_the_surrogate_never_sees_a_discarded_evaluation(algorithm, monkeypatch):
    """Under discard, qUCB's surrogate is fitted on the completions that succeeded only
    (filtered, as DeepHyper's ``filter_failures="ignore"``): its history holds exactly
    their solutions and objectives, all finite, and none of the failed solutions."""
    config = merged(
        FAST,
        {
            "evaluation": {"on_failure": "discard"},
            "domains": {"ackley4": FAILING_ACKLEY4},
        },
    )
    monkeypatch.setenv(STEP_VARIABLE, StepSettings(max_failed_fraction=0.9).to_json())
    config["algorithms"] = {algorithm: config["algorithms"][algorithm]}
    spec = run_spec(validate_config(config), algorithm=algorithm, domain="ackley4", seed=0)
    state, logged = run_in_process(spec, until=2)
    ok = [c for c in logged if not c.status]
    failed = [c for c in logged if c.status]
    assert failed and ok
    optimizer = state.optimizer
    assert np.isfinite(optimizer.y).all() and np.isfinite(optimizer.x).all()
    assert sorted(optimizer.y.tolist()) == sorted(c.objective for c in ok)
    history = {point.tobytes() for point in optimizer.x}
    assert not any(c.solution.tobytes() in history for c in failed)


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "nevergrad", "optimizer": "CMA", "batch_size": 4},
        {"type": "optuna", "sampler": "tpe"},
    ],
)
def test_a_failed_evaluation_is_told_to_nevergrad_and_optuna(entry, monkeypatch):
    """Under discard, Nevergrad and Optuna are told a failed completion (as in
    generations: +inf, a failed trial), so what they hold as asked is what is in flight."""
    config = merged(
        FAST,
        {"evaluation": {"on_failure": "discard"}, "domains": {"ackley4": FAILING_ACKLEY4}},
    )
    monkeypatch.setenv(STEP_VARIABLE, StepSettings(max_failed_fraction=1.0).to_json())
    config["algorithms"] = {"lib": entry}
    spec = run_spec(validate_config(config), algorithm="lib", domain="ackley4", seed=0)
    state, logged = run_in_process(spec, until=3)
    assert any(c.status for c in logged)
    assert len(state.optimizer.asked) == 4  # the slots' evaluations in flight


@pytest.mark.parametrize("ahead", [False, True])
def test_a_failed_evaluation_leaves_centralised_qucbs_in_flight_points(ahead, monkeypatch):
    """Under discard, a failed completion's point leaves centralised qUCB's points in
    flight (it may be proposed again, and the set stays the slots' evaluations): after
    the run the optimizer's in-flight points are exactly the loop's evaluations in
    flight and queued."""
    config = merged(
        FAST,
        {
            "evaluation": {"on_failure": "discard"},
            "domains": {"ackley4": FAILING_ACKLEY4},
            "async": {"propose_ahead": ahead},
        },
    )
    monkeypatch.setenv(STEP_VARIABLE, StepSettings(max_failed_fraction=0.9).to_json())
    config["algorithms"] = {"cen": config["algorithms"]["cen"]}
    spec = run_spec(validate_config(config), algorithm="cen", domain="ackley4", seed=0)
    state, logged = run_in_process(spec, until=3)
    failed = {c.solution.tobytes() for c in logged if c.status}
    assert len(failed) >= 3
    standing = decode_in_flight(state.next_batch, state.next_seeds)
    waiting = [*standing.in_flight.values(), *standing.queued.values()]
    expected = sorted(np.asarray(e.batch["solutions"][0], float).tobytes() for e in waiting)
    assert sorted(p.tobytes() for p in state.optimizer.in_flight) == expected
    assert len(state.optimizer.in_flight) == (8 if ahead else 4)
