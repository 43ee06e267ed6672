"""Evaluations that crash, hang or raise (docs/failures.md): the shard step in a
supervised child, real signals and real hangs, every failure named by its solution."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import PLUGINS, REPO, shard_results

from evocamp.base.errors import ConfigError, EvaluationError
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.shard import STATUS
from evocamp.loop.engine import initialise
from evocamp.loop.evaluation import isolated
from evocamp.loop.step_settings import STEP_VARIABLE, StepSettings


def plugin_state(tmp_path, rules: str = "", evaluation: dict | None = None, **domain):
    """The initial state of a MAP-Elites run (batch 8) of the misbehaving test plugin,
    with ``rules`` in its control file."""
    control = tmp_path / "control"
    if rules:
        control.write_text(rules)
    config = validate_config(
        {
            "algorithms": {"me": {"type": "map_elites", "emitters": 1, "emitter_batch_size": 8}},
            "domains": {
                "d": {
                    "type": "plugin",
                    "function": "evocamp_test_plugin:misbehaving_sphere",
                    "python_path": str(PLUGINS),
                    "solution_dim": 3,
                    "measure_ranges": [[-3, 3], [-3, 3]],
                    "params": {"control_file": str(control), "marker_dir": str(tmp_path)},
                    **domain,
                }
            },
            "evaluation": evaluation or {},
        }
    )
    return initialise(run_spec(config, algorithm="me", domain="d", seed=0))


def seed_at(state, index: int) -> int:
    return int(state.next_seeds[index])


def failure(state, shards: int = 2) -> str:
    with pytest.raises(EvaluationError) as raised:
        shard_results(state, shards)
    return str(raised.value)


def test_a_segfault_names_its_solution_under_stop(tmp_path):
    state = plugin_state(tmp_path)
    (tmp_path / "control").write_text(f"segfault {seed_at(state, 5)}")
    assert failure(state) == (
        "run me/d/seed0, generation 1, shard 1, solution 5: "
        "the evaluation's process was killed by signal 11 (SIGSEGV)"
    )


def test_a_deliberate_segfault_prints_no_crash_dump(tmp_path):
    """The test above in a pytest of its own: its child's SIGSEGV is the point, so no
    "Fatal Python error" dump of every stack (pytest's faulthandler, inherited by the
    fork) fills the suite's log."""
    test = "tests/unit/test_failures.py::test_a_segfault_names_its_solution_under_stop"
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", test]
        + ["--basetemp", str(tmp_path / "inner")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0 and "1 passed" in output, output
    assert "Fatal Python error" not in output
    assert "Segmentation fault" not in output


def test_os_exit_names_its_solution(tmp_path):
    state = plugin_state(tmp_path)
    (tmp_path / "control").write_text(f"exit {seed_at(state, 2)}")
    assert failure(state) == (
        "run me/d/seed0, generation 1, shard 0, solution 2: "
        "the evaluation ended its process with exit status 3"
    )


def test_sys_exit_is_named_as_the_evaluation_exiting_and_not_retried(tmp_path):
    """``sys.exit`` in an evaluation is a failure of the function (status ``failed``,
    not retried: a function of the solution), named with its code; it was reported
    as evocamp's own "exit status 70" and retried as a crash."""
    state = plugin_state(tmp_path)
    (tmp_path / "control").write_text(f"sys_exit {seed_at(state, 2)}")
    assert failure(state) == (
        "run me/d/seed0, generation 1, shard 0, solution 2: the evaluation function exited "
        "(SystemExit(0)) instead of returning its results"
    )
    state = plugin_state(
        tmp_path, evaluation={"on_failure": "retry", "retries": 2, "after_retries": "discard"}
    )
    (tmp_path / "control").write_text(f"sys_exit3 {seed_at(state, 6)}")
    results = shard_results(state, 2)
    assert results[0].status is None
    assert results[1].status.tolist() == [0, 0, STATUS["failed"], 0]
    assert results[1].messages == {
        6: "run me/d/seed0, generation 1, shard 1, solution 6: the evaluation function "
        "exited (SystemExit(3)) instead of returning its results"
    }
    assert results[1].attempts is None  # not retried


def test_a_hang_is_killed_at_the_timeout(tmp_path):
    state = plugin_state(tmp_path, evaluation={"timeout": 0.3})
    (tmp_path / "control").write_text(f"hang {seed_at(state, 6)}")
    began = time.monotonic()
    message = failure(state)
    assert time.monotonic() - began < 5
    assert message == (
        "run me/d/seed0, generation 1, shard 1, solution 6: "
        "the evaluation ran past evaluation.timeout (0.3 s per solution) and was killed"
    )


def test_a_raise_keeps_its_message_in_the_child(tmp_path):
    state = plugin_state(tmp_path)
    (tmp_path / "control").write_text(f"raise {seed_at(state, 3)}")
    assert failure(state) == (
        "run me/d/seed0, generation 1, shard 0, solution 3: the evaluation function raised "
        f"ValueError: simulated failure for seed {seed_at(state, 3)}"
    )


def test_a_chunk_names_its_range(tmp_path):
    state = plugin_state(tmp_path, chunk_size=4)
    (tmp_path / "control").write_text(f"segfault {seed_at(state, 5)}")
    assert failure(state, shards=1) == (
        "run me/d/seed0, generation 1, shard 0, solutions 4..7: the evaluation's process was "
        "killed by signal 11 (SIGSEGV) (chunk_size 1 names the exact solution)"
    )


def test_discard_records_failures_and_evaluates_the_rest(tmp_path):
    clean = shard_results(plugin_state(tmp_path / "clean"), 2)
    # The timeout leaves the crashing child time to start and crash on a loaded machine
    # (at 0.3 s, under a load of 60 on 2 cores, it was killed as a hang before crashing).
    state = plugin_state(tmp_path, evaluation={"on_failure": "discard", "timeout": 2.0})
    rules = f"segfault {seed_at(state, 1)}\nhang {seed_at(state, 2)}\nraise {seed_at(state, 6)}"
    (tmp_path / "control").write_text(rules)
    results = shard_results(state, 2)
    status = np.concatenate([r.status for r in results])
    expected = np.zeros(8, dtype=np.uint8)
    expected[[1, 2, 6]] = [STATUS["crashed"], STATUS["timed_out"], STATUS["failed"]]
    np.testing.assert_array_equal(status, expected)
    objective = np.concatenate([r.objective for r in results])
    reference = np.concatenate([r.objective for r in clean])
    assert np.isnan(objective[[1, 2, 6]]).all()
    ok = expected == 0
    assert objective[ok].tobytes() == reference[ok].tobytes()
    assert results[1].messages[6].startswith("run me/d/seed0, generation 1, shard 1, solution 6:")


def test_retry_makes_a_transient_crash_invisible(tmp_path):
    clean = shard_results(plugin_state(tmp_path / "clean"), 2)
    state = plugin_state(tmp_path, evaluation={"on_failure": "retry", "retries": 1})
    (tmp_path / "control").write_text(f"segfault_once {seed_at(state, 4)}")
    results = shard_results(state, 2)
    assert all(r.status is None for r in results)
    for got, want in zip(results, clean, strict=True):
        assert got.objective.tobytes() == want.objective.tobytes()
    assert (tmp_path / f"crashed-{seed_at(state, 4)}").exists()


def test_retries_spent_then_stop_counts_the_attempts(tmp_path):
    state = plugin_state(tmp_path, evaluation={"on_failure": "retry", "retries": 2})
    (tmp_path / "control").write_text(f"segfault {seed_at(state, 0)}")
    assert failure(state) == (
        "run me/d/seed0, generation 1, shard 0, solution 0: "
        "the evaluation's process was killed by signal 11 (SIGSEGV) (3 attempts)"
    )


def test_built_in_domains_run_in_process_unless_a_policy_asks(tmp_path):
    config = {"algorithms": {"me": {"type": "map_elites"}}, "domains": {"s": {"type": "sphere"}}}
    spec = run_spec(validate_config(config), algorithm="me", domain="s", seed=0)
    assert "evaluation" not in spec and not isolated(resolve_run(spec))
    config["evaluation"] = {"timeout": 10}
    spec = run_spec(validate_config(config), algorithm="me", domain="s", seed=0)
    assert spec["evaluation"]["timeout"] == 10 and isolated(resolve_run(spec))


#: One small entry per family (and the QD emitters that learn), for the discard tests.
FAMILY_ENTRIES = {
    "map_elites": {"type": "map_elites", "emitters": 1, "emitter_batch_size": 12},
    "cma_me": {"type": "cma_me", "emitters": 1, "emitter_batch_size": 12},
    "cma_es": {"type": "cma_es", "popsize": 12},
    "openai_es": {"type": "openai_es", "popsize": 12},
    "snes": {"type": "snes", "popsize": 12},
    "qucb_centralised": {
        "type": "qucb_centralised",
        "batch_size": 12,
        "initial_points": 6,
        "candidates": 50,
        "trees": 3,
        "refine_generations": 2,
    },
    "qucb_decentralised": {
        "type": "qucb_decentralised",
        "batch_size": 12,
        "initial_points": 6,
        "candidates": 50,
        "trees": 3,
        "refine_generations": 2,
    },
    "random_search": {"type": "random_search", "batch_size": 12},
    # docs/plugins.md's example optimizer, as written.
    "plugin": {
        "type": "plugin",
        "class": "my_optimizers:OnePlusLambda",
        "python_path": str(PLUGINS),
        "params": {"lam": 12},
    },
}


def discard_run(tmp_path, entry: dict, rules: str, generations: int = 3):
    """A run of the misbehaving plugin under discard, told in this process with the
    shard step and the tell of shard mode (3 shards); every state after each tell."""
    from evocamp.loop.engine import tell

    control = tmp_path / "control"
    control.write_text(rules)
    config = validate_config(
        {
            "algorithms": {"a": entry},
            "domains": {
                "d": {
                    "type": "plugin",
                    "function": "evocamp_test_plugin:misbehaving_sphere",
                    "python_path": str(PLUGINS),
                    "solution_dim": 3,
                    "bounds": [-3, 3],
                    "measure_ranges": [[-3, 3], [-3, 3]],
                    "params": {"control_file": str(control)},
                }
            },
            "evaluation": {"on_failure": "discard", "max_failed_fraction": 0.9},
            "shards": 3,
        }
    )
    state = initialise(run_spec(config, algorithm="a", domain="d", seed=0))
    states = []
    for _ in range(generations):
        failing = [seed for seed in state.next_seeds if int(seed) % 3 == 0]
        state = tell(state, shard_results(state, 3))
        states.append((state, len(failing)))
    return states


@pytest.mark.parametrize("family", sorted(FAMILY_ENTRIES))
def test_discard_keeps_failed_solutions_out_of_every_family(tmp_path, family):
    """Every solution whose evaluation seed is a multiple of 3 raises (about a third):
    under discard the run goes on, each generation's metrics count them, the archive
    (or passive archive) and the best solution never hold one, and every number the
    optimizer goes on with is finite."""
    states = discard_run(tmp_path, FAMILY_ENTRIES[family], "raise %3")
    total = 0
    for state, failing in states:
        row = state.metrics_window[-1]
        total += failing
        assert (row["failed"], row["timed_out"], row["failed_total"]) == (failing, 0, total)
        assert np.isfinite(row["gen_obj_max"]) and np.isfinite(row["best_objective"])
    assert total > 0
    final = states[-1][0]
    archive = final.archive.data()
    assert len(archive["objective"]) > 0 and np.isfinite(archive["objective"]).all()
    # The misbehaving sphere's objective is -|x|^2 of the solution: each elite's own.
    solutions = archive["solution"]
    np.testing.assert_allclose(archive["objective"], -np.sum(solutions**2, axis=1))
    if final.best is not None:
        assert final.best["objective"] == pytest.approx(-np.sum(final.best["solution"] ** 2))
    assert final.next_batch is not None
    for values in final.next_batch.values():
        if np.asarray(values).dtype.kind == "f":
            assert np.isfinite(values).all()


def test_max_failed_fraction_stops_a_run_that_fails_wholesale(tmp_path, monkeypatch):
    monkeypatch.setenv(STEP_VARIABLE, StepSettings(max_failed_fraction=0.2).to_json())
    with pytest.raises(EvaluationError) as raised:
        discard_run(tmp_path, FAMILY_ENTRIES["map_elites"], "raise %2", generations=1)
    message = str(raised.value)
    assert message.startswith("run a/d/seed0, generation 1: ")
    assert "evaluations failed, more than evaluation.max_failed_fraction (0.2)" in message


def steady_run(tmp_path, monkeypatch, generations: list[tuple[int, float]]):
    """The misbehaving plugin's MAP-Elites run (batch 8) under discard, told in this
    process: in each generation ``(k, limit)`` its first k solutions raise, with
    evaluation.max_failed_fraction ``limit``; the final state."""
    from evocamp.loop.engine import tell

    tmp_path.mkdir()
    state = plugin_state(tmp_path, evaluation={"on_failure": "discard"})
    for failing, limit in generations:
        monkeypatch.setenv(STEP_VARIABLE, StepSettings(max_failed_fraction=limit).to_json())
        rules = "".join(f"raise {seed_at(state, index)}\n" for index in range(failing))
        (tmp_path / "control").write_text(rules)
        state = tell(state, shard_results(state, 2))
    return state


def test_max_failed_fraction_counts_every_evaluation_of_the_run(tmp_path, monkeypatch):
    """The run-wide fraction is of every evaluation attempted (it was of the evaluated
    ones and this batch: 3 failures of 8 in every generation stopped a run at 0.5 in
    generation 4, "12 of the run's 23"). A steady rate under the limit runs on; one over
    it stops in its first generation; a limit lowered on a run whose failures went
    over it stops it with the run's count."""
    state = steady_run(tmp_path / "under", monkeypatch, [(3, 0.5)] * 5)
    rows = state.metrics_window
    assert state.generation == 5 and rows["failed_total"][-1] == 15
    assert rows["failed"][1:].tolist() == [3] * 5
    with pytest.raises(EvaluationError) as raised:
        steady_run(tmp_path / "over", monkeypatch, [(5, 0.5)])
    assert str(raised.value) == (
        "run me/d/seed0, generation 1: 5 of this generation's 8 evaluations failed, more "
        "than evaluation.max_failed_fraction (0.5); each failure is named in the run's log"
    )
    with pytest.raises(EvaluationError) as raised:
        steady_run(tmp_path / "lowered", monkeypatch, [(5, 0.8), (5, 0.8), (4, 0.5)])
    assert str(raised.value) == (
        "run me/d/seed0, generation 3: 14 of the run's 24 evaluations failed, more than "
        "evaluation.max_failed_fraction (0.5); each failure is named in the run's log"
    )


def test_metrics_count_attempts_retries_and_the_seconds_failures_took(tmp_path):
    """A hang killed at the timeout under discard, and under retry a transient crash
    and a hang retried once: metrics count every attempt, the retries and the seconds
    the failed attempts took (eval_seconds leaves them out), through real shard files;
    the kept evaluations hold each solution's attempts."""
    from evocamp.files.evaluations import StorageSettings, read_evaluations
    from evocamp.files.evaluations import write_evaluations_file as write_rows
    from evocamp.files.shard import read_shard, write_shard
    from evocamp.loop.engine import tell

    def told(state):
        paths = [tmp_path / f"{state.spec['evaluation']['on_failure']}_{k}.h5" for k in (0, 1)]
        for path, result in zip(paths, shard_results(state, 2), strict=True):
            write_shard(path, result)
        keep = StorageSettings(keep=True)
        return tell(state, [read_shard(p) for p in paths], storage=keep)

    state = plugin_state(tmp_path, evaluation={"on_failure": "discard", "timeout": 0.3})
    (tmp_path / "control").write_text(f"hang {seed_at(state, 5)}")
    row = told(state).metrics_window[-1]
    counts = ("failed", "timed_out", "attempts", "retries")
    assert [int(row[name]) for name in counts] == [1, 1, 8, 0]
    assert 0.3 <= row["failed_seconds"] < 3 and row["eval_seconds"] < 0.3
    state = plugin_state(
        tmp_path,
        evaluation={
            "on_failure": "retry",
            "retries": 1,
            "after_retries": "discard",
            "timeout": 0.3,
        },
    )
    rules = f"segfault_once {seed_at(state, 1)}\nhang {seed_at(state, 5)}"
    (tmp_path / "control").write_text(rules)
    after = told(state)
    row = after.metrics_window[-1]
    assert [int(row[name]) for name in counts] == [1, 1, 10, 2]
    assert 0.6 <= row["failed_seconds"] < 5 and row["eval_seconds"] < 0.3
    assert row["evaluations"] == 7
    write_rows(tmp_path / "e.h5", after.evaluations, spec=after.spec)
    assert read_evaluations(tmp_path / "e.h5").attempts.tolist() == [1, 2, 1, 1, 1, 2, 1, 1]


def test_what_the_child_prints_reaches_the_log_once(tmp_path):
    """The supervised child's prints go to the parent's standard error (the job's log),
    each item's before its result comes back, and are flushed before it ends (os._exit
    does not); the parent's pending output is flushed before the fork (never written
    twice) and its standard output holds only its own lines."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from evocamp.base.supervised import supervised\n"
        "print('parent before')\n"
        "def task(k):\n"
        "    print(f'child {k}')\n"
        "    return k\n"
        "for item in supervised(task, 2):\n"
        "    print(f'got {item}', file=sys.stderr)\n"
        "print('parent after')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == ["parent before", "parent after"]
    lines = done.stderr.splitlines()
    assert sorted(lines) == ["child 0", "child 1", "got 0", "got 1"]
    assert lines.index("child 0") < lines.index("got 0")
    assert lines.index("child 1") < lines.index("got 1")


def test_an_evaluation_printing_10_mb_leaves_its_first_and_last_bytes_in_the_log():
    """A child that prints 10 MB (and one that is killed at its time limit after
    printing as much) leaves the first and last 32 kB in the parent's standard error
    with one line saying how many bytes were dropped between them, and nothing on the
    parent's standard output."""
    import subprocess
    import sys

    script = (
        "import time\n"
        "from evocamp.base.supervised import supervised\n"
        "def task(k):\n"
        "    print('first line ' + 'x' * (10 << 20) + ' last line', flush=True)\n"
        "    if k == 1:\n"
        "        time.sleep(60)\n"
        "    return k\n"
        "print([type(item).__name__ for item in supervised(task, 2, limits=[30, 1])])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout == "['int', 'Ended']\n"
    err = done.stderr
    assert len(err) < 80_000
    dropped = (10 << 20) * 2 + 2 * len("first line  last line\n") - 2 * 32 * 1024
    assert (
        f"[evocamp: {dropped} bytes of the evaluation's output dropped here; "
        "the first 32768 and the last 32768 are kept]"
    ) in err
    assert err.startswith("first line xxx") and err.rstrip().endswith("x last line")


def test_policy_defaults_are_the_schemas_and_stay_out_of_run_specs():
    """The run spec holds the failure policy only when it is not the default (run specs
    of earlier versions stay valid); retry's keys count only under retry; the defaults
    in the code are the schema's; a wrong key is one line."""
    import dataclasses

    from evocamp.base.errors import ConfigError
    from evocamp.config import load_schema
    from evocamp.loop.step_settings import DEFAULT_MAX_FAILED_FRACTION
    from evocamp.model.runspec import FailurePolicy

    keys = load_schema()["properties"]["evaluation"]["properties"]
    defaults = {name: keys[name]["default"] for name in keys}
    assert defaults == {
        **dataclasses.asdict(FailurePolicy()),
        "max_failed_fraction": DEFAULT_MAX_FAILED_FRACTION,
        "repeats": 1,  # noisy evaluations (tests/unit/test_noisy.py)
        "reevaluate": 0,
        "concurrency": 1,  # tests/unit/test_concurrency.py
        "gpus_per_evaluation": 0,
    }
    base = {"algorithms": {"me": {"type": "map_elites"}}, "domains": {"s": {"type": "sphere"}}}

    def spec(evaluation):
        config = validate_config({**base, "evaluation": evaluation})
        return run_spec(config, algorithm="me", domain="s", seed=0)

    assert "evaluation" not in spec({"retries": 5, "max_failed_fraction": 0.1})
    assert spec({"on_failure": "discard", "retries": 5})["evaluation"] == {
        "timeout": None,
        "on_failure": "discard",
        "retries": 2,
        "after_retries": "stop",
    }
    assert spec({"on_failure": "retry", "retries": 5})["evaluation"]["retries"] == 5
    with pytest.raises(ConfigError) as raised:
        validate_config({**base, "evaluation": {"on_failure": "retyr"}})
    assert "key 'evaluation.on_failure': 'retyr' is not one of" in str(raised.value)


def test_failure_messages_survive_files_merges_and_selection(tmp_path):
    """Kept evaluations' failure messages: written beside the rows, read back, merged
    (the last block holding a generation wins), and selected with their rows."""
    from evocamp.files.evaluations import (
        EvaluationRows,
        concatenate,
        read_evaluations,
        write_evaluations_file,
    )

    def rows(generation: int, failed: dict) -> EvaluationRows:
        status = np.zeros(3, dtype=np.uint8)
        status[list(failed)] = STATUS["crashed"]
        return EvaluationRows(
            generation=np.full(3, generation, dtype=np.int64),
            index=np.arange(3, dtype=np.int64),
            seed=np.arange(3, dtype=np.uint64),
            objective=np.where(status > 0, np.nan, 1.0),
            measures=np.zeros((3, 1)),
            extra={},
            eval_seconds=np.zeros(3),
            status=status,
            failures={(generation, i): text for i, text in failed.items()},
        )

    spec = plugin_state(tmp_path).spec
    merged = concatenate([rows(1, {0: "old"}), rows(2, {2: "two"}), rows(1, {1: "new"})])
    assert merged.failures == {(1, 1): "new", (2, 2): "two"}
    write_evaluations_file(tmp_path / "e.h5", merged, spec=spec)
    back = read_evaluations(tmp_path / "e.h5")
    assert back.failures == merged.failures
    assert back.status.tolist() == [0, 2, 0, 0, 0, 2]
    assert back.select(back.generation == 2).failures == {(2, 2): "two"}


def test_discard_needs_a_plugin_optimizer_that_takes_failed():
    """A plugin optimizer whose tell has no 'failed' keyword (it takes only **extra:
    the NaN rows would reach it unmarked) is refused under discard, with one line
    saying what to add; stop keeps it, and docs/plugins.md's example, which names it,
    runs under discard."""
    from evocamp.base.errors import ConfigError

    config = {
        "algorithms": {
            "mine": {
                "type": "plugin",
                "class": "evocamp_test_optimizers:RandomSearch",
                "python_path": str(PLUGINS),
            }
        },
        "domains": {"s": {"type": "sphere"}},
    }
    validate_config(config)
    discarding = {"on_failure": "retry", "after_retries": "discard"}
    with pytest.raises(ConfigError) as raised:
        validate_config({**config, "evaluation": discarding})
    assert str(raised.value).splitlines()[-1].strip(" -") == (
        "key 'algorithms.mine.class': evocamp_test_optimizers:RandomSearch.tell takes no "
        "'failed' keyword, which discarding failed solutions needs (evaluation.on_failure): "
        "they come as NaN rows that only the optimizer knows how to leave out. Add it, def "
        "tell(self, objective, measures, *, failed=None, **extra), failed being None or a "
        "boolean mask of the rows that failed, and leave those rows out (docs/plugins.md, "
        "'The protocol'); or use on_failure stop, or retry with after_retries: stop"
    )
    config["algorithms"]["mine"]["class"] = "my_optimizers:OnePlusLambda"
    validate_config({**config, "evaluation": discarding})


def test_a_missing_or_silent_dask_scheduler_is_named_not_waited_for_forever(tmp_path):
    """dask.scheduler_file naming no file (a misspelt path, a scheduler that died at its
    start) or a scheduler that does not answer: one line naming the key and the path,
    after the wait, where distributed's client would wait forever."""
    from evocamp.executors.dask_cluster import existing_cluster

    missing = tmp_path / "nowhere.json"
    began = time.monotonic()
    with pytest.raises(ConfigError) as error:
        existing_cluster(str(missing), where="run me/sphere/seed0, generation 1", wait=0.5)
    assert time.monotonic() - began < 10
    assert str(error.value) == (
        f"run me/sphere/seed0, generation 1: key 'dask.scheduler_file': no scheduler file "
        f"at {missing} after 0.5 s: start the cluster first (dask scheduler "
        "--scheduler-file FILE, then its workers)"
    )
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"address": f"tcp://127.0.0.1:{port}"}))
    with pytest.raises(ConfigError, match="the scheduler that .*stale.json names did not answer"):
        existing_cluster(str(stale), where="run me/sphere/seed0, generation 1", wait=1)
