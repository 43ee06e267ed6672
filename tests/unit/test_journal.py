"""A shard's journal (docs/failures.md, "A rerun evaluates only what is missing"): a
shard step killed mid-shard loses only the call in flight; its rerun evaluates only
the calls the journal lacks and writes bitwise the shard an undisturbed step writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import PLUGINS, shard_results

from evocamp.base.errors import CorruptFileError
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.checkpoint import write_state
from evocamp.files.journal import ShardJournal, journal_path
from evocamp.files.shard import read_shard
from evocamp.loop.engine import held_batch, initialise
from evocamp.loop.evaluation import evaluate_shard, isolated
from evocamp.loop.outcomes import Outcome

sys.path.insert(0, str(PLUGINS))
from test_failures import plugin_state, seed_at  # noqa: E402


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait_for(predicate, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


def _step(state_file, output) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-m", "evocamp", "evaluate", "--state", str(state_file)]
        + ["--shard", "0", "--shards", "1", "--output", str(output)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


@dataclass
class HangingShard:
    """A plugin run's 8-solution shard whose step hangs at solution 5 until its control
    file says otherwise (:func:`hanging_shard`)."""

    state: object
    seeds: list[int]
    control: Path
    state_file: Path
    output: Path
    journal: Path
    evaluated: Path

    def start(self) -> subprocess.Popen:
        """The shard step started on it."""
        return _step(self.state_file, self.output)

    def kill(self, step: subprocess.Popen) -> None:
        """SIGKILL ``step`` (and check that it died of it)."""
        step.send_signal(signal.SIGKILL)
        assert step.wait(timeout=30) == -signal.SIGKILL

    def rerun(self) -> str:
        """Solution 5 no longer hangs; the step run again to its end: its log."""
        self.control.write_text("note %1")
        rerun = self.start()
        _, log = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, log
        return log


def hanging_shard(tmp_path) -> HangingShard:
    """A state file whose shard step evaluates 8 plugin solutions, noting each one's
    seed in ``evaluated`` as it starts, and hangs at solution 5."""
    state = plugin_state(tmp_path)
    seeds = [seed_at(state, k) for k in range(8)]
    control = tmp_path / "control"
    control.write_text(f"note %1\nhang {seeds[5]}")
    state_file, output = tmp_path / "state.h5", tmp_path / "shard_0.h5"
    write_state(state_file, state, run=resolve_run(state.spec))
    return HangingShard(
        state, seeds, control, state_file, output, journal_path(output), tmp_path / "evaluated"
    )


def test_a_killed_shard_step_reruns_only_the_calls_it_had_not_finished(tmp_path):
    """SIGKILL of the shard step while its 6th solution runs: the rerun evaluates that
    one and the two after it, never the five journalled, and its shard file holds
    bitwise the values of an undisturbed shard and the journalled calls' own seconds;
    the journal is gone once the shard file is written."""
    shard = hanging_shard(tmp_path)
    step = shard.start()
    _wait_for(lambda: len(_lines(shard.journal)) == 6, "the journal's key and 5 calls")
    _wait_for(lambda: len(_lines(shard.evaluated)) == 6, "the 6th solution to start")
    shard.kill(step)
    assert not shard.output.exists()
    log = shard.rerun()
    assert "5 of 8 calls journalled by an earlier attempt, not evaluated again" in log
    seeds = shard.seeds
    assert [int(seed) for seed in _lines(shard.evaluated)] == seeds[:6] + seeds[5:]
    assert not shard.journal.exists()

    (undisturbed,) = shard_results(shard.state, 1)
    written = read_shard(shard.output)
    for name in ("objective", "measures"):
        assert getattr(written, name).tobytes() == getattr(undisturbed, name).tobytes()
    assert written.extra.keys() == undisturbed.extra.keys()
    assert (written.status, written.attempts) == (None, None)
    assert (written.eval_seconds > 0).all()


def test_the_journalled_seconds_are_the_shard_files_exact_floats(tmp_path):
    """A rerun takes a journalled call's outcome as it was written: a journal whose
    key matches, with call 0's objective set to an unmistakable value, gives that
    value and those seconds, bit for bit, and evaluates the others."""
    state = plugin_state(tmp_path, rules="note %1")
    (first,) = shard_results(state, 1)
    run = resolve_run(state.spec)
    shard_file = tmp_path / "shard.h5"
    path = journal_path(shard_file)

    def evaluate():
        return evaluate_shard(
            run,
            batch=held_batch(state),
            seeds=state.next_seeds,
            generation=state.generation + 1,
            shard=0,
            shards=1,
            shard_file=shard_file,
        )

    evaluate()  # journals its 8 calls (the step removes the journal, not this)
    lines = _lines(path)
    assert len(lines) == 9
    odd = float.fromhex("0x1.123456789abcdp-3")
    record = json.loads(lines[1])
    assert record["outputs"]["objective"] == [[1], [first.objective[0].hex()]]
    record["outputs"]["objective"] = [[1], [odd.hex()]]
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    (tmp_path / "evaluated").unlink()
    again = evaluate()
    assert again.objective[0] == odd
    assert again.objective[1:].tobytes() == first.objective[1:].tobytes()
    assert again.eval_seconds[0] == float.fromhex(record["seconds"])
    assert [int(s) for s in _lines(tmp_path / "evaluated")] == [
        seed_at(state, k) for k in range(1, 8)
    ]


KEY = {"run": "r", "generation": 3, "shard": 1, "shards": 4, "batch": "b"}


def _journal_of_two(path) -> None:
    with ShardJournal(path, key=KEY) as journal:
        journal.append(0, Outcome({"objective": np.array([np.pi])}, 0.1, 1))
        journal.append(2, Outcome(None, 0.0, 1, 3, "timed out", 2, 7.5))


def test_a_first_attempt_opens_its_journal_with_its_first_call(tmp_path):
    """No journal yet: opening and closing one writes nothing (a shard killed before
    any call finished leaves no file); the first call journalled writes the key line
    and its own."""
    path = tmp_path / "s.h5.journal"
    with ShardJournal(path, key=KEY) as journal:
        assert journal.finished == {}
    assert not path.exists()
    _journal_of_two(path)
    assert len(_lines(path)) == 3
    assert sorted(ShardJournal(path, key=KEY).finished) == [0, 2]


def test_a_torn_last_record_is_ignored_and_cut_off(tmp_path):
    path = tmp_path / "s.h5.journal"
    _journal_of_two(path)
    with open(path, "ab") as torn:
        torn.write(b'{"call":5,"size":1,"seconds":"0x1.')
    with ShardJournal(path, key=KEY) as journal:
        assert sorted(journal.finished) == [0, 2]
        assert journal.finished[0]["outputs"]["objective"].tobytes() == np.array([np.pi]).tobytes()
        assert journal.finished[2] == {
            "outputs": None,
            "seconds": 0.0,
            "size": 1,
            "status": 3,
            "message": "timed out",
            "attempts": 2,
            "failed_seconds": 7.5,
            "failed_rows": None,
        }
        journal.append(5, Outcome({"objective": np.array([np.nan])}, 0.2, 1, failed_rows={0: "m"}))
    finished = ShardJournal(path, key=KEY).finished
    assert sorted(finished) == [0, 2, 5]
    assert np.isnan(finished[5]["outputs"]["objective"][0])
    assert finished[5]["failed_rows"] == {0: "m"}


@pytest.mark.parametrize("field", sorted(KEY))
def test_a_journal_of_another_run_generation_shard_or_batch_is_not_reused(tmp_path, field):
    path = tmp_path / "s.h5.journal"
    _journal_of_two(path)
    other = {**KEY, field: "other"}
    with ShardJournal(path, key=other) as journal:
        assert journal.finished == {}
    assert len(_lines(path)) == 1  # started again: its key only
    assert ShardJournal(path, key=KEY).finished == {}


def test_a_corrupt_record_before_the_last_is_named(tmp_path):
    path = tmp_path / "s.h5.journal"
    _journal_of_two(path)
    lines = _lines(path)
    path.write_text("\n".join([lines[0], "garbage", lines[2]]) + "\n")
    with pytest.raises(CorruptFileError, match=r"shard journal .*s\.h5\.journal, line 2: "):
        ShardJournal(path, key=KEY)


def test_a_built_in_domain_evaluated_in_process_journals_its_chunks(tmp_path):
    """A built-in domain (in this process, no supervised child) with ``chunk_size`` 2:
    four calls journalled; a rerun whose journal holds the first two (one with a
    changed value) takes them as journalled and evaluates the other two, bitwise; the
    same journal is not read by a shard of another shard count."""
    config = validate_config(
        {
            "algorithms": {"me": {"type": "map_elites", "emitters": 1, "emitter_batch_size": 8}},
            "domains": {"s": {"type": "sphere", "solution_dim": 3, "chunk_size": 2}},
        }
    )
    state = initialise(run_spec(config, algorithm="me", domain="s", seed=0))
    run = resolve_run(state.spec)
    assert not isolated(run)
    shard_file = tmp_path / "shard.h5"
    path = journal_path(shard_file)

    def evaluate():
        return evaluate_shard(
            run,
            batch=held_batch(state),
            seeds=state.next_seeds,
            generation=1,
            shard=0,
            shards=1,
            shard_file=shard_file,
        )

    first = evaluate()
    lines = _lines(path)
    assert len(lines) == 5
    record = json.loads(lines[2])
    shape, values = record["outputs"]["objective"]
    record["outputs"]["objective"] = [shape, [values[0], (-1.5).hex()]]
    path.write_text("\n".join([lines[0], lines[1], json.dumps(record)]) + "\n")
    again = evaluate()
    assert again.objective[3] == -1.5
    expected = first.objective.copy()
    expected[3] = -1.5
    assert again.objective.tobytes() == expected.tobytes()
    assert again.measures.tobytes() == first.measures.tobytes()
    assert len(_lines(path)) == 5
    # The same place, another shard count: the journal is started again, not read.
    half = evaluate_shard(
        run,
        batch=held_batch(state),
        seeds=state.next_seeds,
        generation=1,
        shard=0,
        shards=2,
        shard_file=shard_file,
    )
    assert half.objective.tobytes() == first.objective[:4].tobytes()
    assert json.loads(_lines(path)[0])["journal"]["shards"] == 2
