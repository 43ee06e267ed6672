"""Every evaluation supervised as a whole process tree (docs/failures.md, "What is
killed"): the processes an evaluation starts (through ``subprocess``, and forked
helpers), which start processes of their own and ignore SIGTERM, are all ended after a
timeout, a retry, a discard, a crash, a SIGTERM or SIGKILL of the step, and the step's
end; a crash is reported by the evaluation's own exit status, whoever holds its pipes.

Each test counts the processes left: every process of a test tree notes its pid
(``evocamp_test_plugin.process_tree``)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import PLUGINS, running, shard_results

from evocamp.base.errors import EvaluationError
from evocamp.base.supervised import KILL_GRACE_SECONDS
from evocamp.files.shard import STATUS

sys.path.insert(0, str(PLUGINS))
from evocamp_test_plugin import tree_pids  # noqa: E402
from test_failures import plugin_state, seed_at  # noqa: E402
from test_programs import command_spec  # noqa: E402


def tree_state(tmp_path, rules: str, evaluation: dict):
    """The initial state of a MAP-Elites run (batch 8) of the misbehaving test plugin,
    whose solution 1 follows ``rules`` (``{seed}`` its evaluation seed)."""
    state = plugin_state(tmp_path, evaluation=evaluation)
    (tmp_path / "control").write_text(rules.format(seed=seed_at(state, 1)))
    return state


def test_a_timeout_and_its_retry_end_every_process_of_each_attempt(tmp_path):
    """A hang past evaluation.timeout, retried once, then discarded: both attempts'
    trees (the evaluation, a forked helper, a program and its child, all ignoring
    SIGTERM) are gone when the shard step returns."""
    state = tree_state(
        tmp_path,
        "tree {seed}\nhang {seed}",
        {"on_failure": "retry", "retries": 1, "after_retries": "discard", "timeout": 1.0},
    )
    (result,) = shard_results(state, 1)
    assert result.status.tolist() == [0, STATUS["timed_out"]] + [0] * 6
    assert result.attempts.tolist() == [1, 2] + [1] * 6
    pids = tree_pids(tmp_path / "tree")
    assert len(pids) == 8
    assert running(pids) == []


def test_a_crash_is_its_exit_status_whoever_holds_its_pipes(tmp_path):
    """An evaluation that calls os._exit(3) after forking a helper that keeps its
    result pipe open (for 20 s) is reported at once as exited with status 3, never as
    a timeout; the discarded evaluation's whole tree is gone when the shard step
    returns."""
    state = tree_state(
        tmp_path, "tree {seed}\nexit {seed}", {"on_failure": "discard", "timeout": 30.0}
    )
    began = time.monotonic()
    (result,) = shard_results(state, 1)
    assert time.monotonic() - began < 10
    assert result.status.tolist() == [0, STATUS["crashed"]] + [0] * 6
    assert result.messages == {
        1: "run me/d/seed0, generation 1, shard 0, solution 1: the evaluation ended its "
        "process with exit status 3"
    }
    pids = tree_pids(tmp_path / "tree")
    assert len(pids) == 4
    assert running(pids) == []


def test_a_crash_under_stop_without_a_time_limit_is_seen_at_once_and_ends_the_tree(
    tmp_path,
):
    """The same crash under the defaults (stop, no time limit): the step stops at once
    (not when the helper lets go of the pipe), and the tree is gone."""
    state = tree_state(tmp_path, "tree {seed}\nexit {seed}", {})
    began = time.monotonic()
    with pytest.raises(
        EvaluationError, match="solution 1: the evaluation ended its process with exit status 3$"
    ):
        shard_results(state, 1)
    assert time.monotonic() - began < 10
    assert running(tree_pids(tmp_path / "tree")) == []


def timed_out_command(tmp_path, command: list[str], *, pidfile, timeout: float) -> list[int]:
    """Evaluate one solution with a ``command`` domain whose program never writes
    results, under ``timeout``: the pids its processes noted in ``pidfile``."""
    import numpy as np

    from evocamp.catalogue.factory import resolve_run
    from evocamp.loop.evaluation import evaluate_slice

    spec = command_spec(
        tmp_path, command=command, evaluation={"on_failure": "discard", "timeout": timeout}
    )
    result = evaluate_slice(
        resolve_run(spec),
        generation=1,
        shard=0,
        start=0,
        solutions=np.zeros((1, 4)),
        seeds=np.array([5]),
    )
    assert result.status.tolist() == [STATUS["timed_out"]]
    return tree_pids(pidfile)


def timed_out_program(tmp_path, *, launcher: list[str], timeout: float) -> list[int]:
    """:func:`timed_out_command` of a program (behind ``launcher``) that is a tree of
    two processes that ignore SIGTERM: the pids of every process of the trees started."""
    pidfile = tmp_path / "tree"
    node = [sys.executable, "-S", str(PLUGINS / "tree_node.py"), str(pidfile), "2"]
    return timed_out_command(tmp_path, [*launcher, *node], pidfile=pidfile, timeout=timeout)


def test_a_timed_out_program_ends_with_every_process_it_started(tmp_path):
    """A ``command`` domain's program (started with subprocess, in the evaluation's
    group) that starts a child of its own, both ignoring SIGTERM and never writing
    results: past evaluation.timeout both are gone when the shard step returns."""
    pids = timed_out_program(tmp_path, launcher=[], timeout=1.0)
    assert len(pids) == 2
    assert running(pids) == []


#: A program whose child leaves its tree (a session of its own, then a child of that
#: re-parented away when its parent exits and is reaped: neither a descendant of the
#: evaluation nor in a group one leads, as an ``srun`` task's child is not) and
#: sleeps, ignoring SIGTERM, while the program hangs.
ESCAPING_PROGRAM = """\
import os, signal, sys, time
middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(sys.argv[1], "a") as noted:
            noted.write(str(os.getpid()) + "\\n")
        time.sleep(600)
    os._exit(0)
os.waitpid(middle, 0)  # reaped: no trace of its group's leader is left
time.sleep(600)
"""


def test_a_timed_out_program_ends_what_left_its_tree(tmp_path):
    """A process the program started that is no longer its descendant nor in its
    groups (found by the supervised child's marker in its environment) is ended
    with the timed-out evaluation."""
    pidfile, program = tmp_path / "escaped", tmp_path / "escaping.py"
    program.write_text(ESCAPING_PROGRAM)
    command = [sys.executable, "-S", str(program), str(pidfile)]
    pids = timed_out_command(tmp_path, command, pidfile=pidfile, timeout=1.0)
    assert len(pids) == 1
    assert running(pids) == []


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)"
)
def test_a_timed_out_mpirun_evaluation_ends_every_task_and_its_children(tmp_path):
    """Open MPI's ``mpirun -n 2`` puts each task in a process group of its own, outside
    the evaluation's: past evaluation.timeout the tasks (trees that ignore SIGTERM)
    are ended too, found as descendants of the evaluation's process."""
    launcher = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2"]
    # (mpirun takes seconds to start its tasks on a loaded machine: 3 s was too short once)
    pids = timed_out_program(tmp_path, launcher=launcher, timeout=6.0)
    assert len(pids) == 4, "2 tasks, each with a child"
    assert running(pids, within=5.0) == []


#: A step that calls the supervised child directly: its task starts a process tree,
#: then ``{then}``; ``{before}`` runs first.
STEP = """
import os, signal, sys, time
sys.path.insert(0, {plugins!r})
from evocamp.base import supervised as module
from evocamp.base.supervised import supervised
from evocamp_test_plugin import process_tree
{before}
def task(k):
    process_tree({pidfile!r})
    {then}
for item in supervised(task, 1):
    print(item, flush=True)
"""


#: Before the step's evaluation: one supervised call, then its guardian killed (a new
#: one must take over).
GUARDIAN_KILLED = (
    "list(supervised(lambda k: k, 1)); os.kill(module._GUARDIAN.pid, signal.SIGKILL); "
    "time.sleep(0.2)"
)


def start_step(tmp_path, then: str, before: str = "") -> tuple[subprocess.Popen, list[int]]:
    """A step process whose evaluation has started its tree, and the tree's pids."""
    pidfile = tmp_path / "tree"
    script = STEP.format(plugins=str(PLUGINS), pidfile=str(pidfile), then=then, before=before)
    step = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(tree_pids(pidfile)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = tree_pids(pidfile)
    assert len(pids) == 4
    return step, pids


@pytest.mark.parametrize(
    ("how", "before"),
    [(signal.SIGTERM, ""), (signal.SIGKILL, ""), (signal.SIGKILL, GUARDIAN_KILLED)],
    ids=["SIGTERM", "SIGKILL", "SIGKILL-guardian-replaced"],
)
def test_a_step_killed_takes_every_process_of_its_evaluation_with_it(tmp_path, how, before):
    """SIGTERM of the step (as scancel sends it) and SIGKILL (a killed Snakemake's job,
    a lost Dask worker): nothing runs in the step then; its evaluation's whole tree is
    gone within the grace (SIGTERM, then SIGKILL for those that ignore it), also when
    the step's first guardian was killed before."""
    step, pids = start_step(tmp_path, "time.sleep(600)", before)
    step.send_signal(how)
    assert step.wait(timeout=30) == -how
    assert running(pids, within=KILL_GRACE_SECONDS + 5) == []


def test_a_step_killed_takes_what_left_its_evaluations_tree(tmp_path):
    """SIGKILL of the step while its evaluation's program hangs and a process it
    started has left the tree (a session of its own, re-parented away): the guardian
    ends that process too, found by the evaluation's marker in its environment."""
    pidfile, program = tmp_path / "escaped", tmp_path / "escaping.py"
    program.write_text(ESCAPING_PROGRAM)
    command = [sys.executable, "-S", str(program), str(pidfile)]
    script = (
        "import subprocess\n"
        "from evocamp.base.supervised import supervised\n"
        f"for item in supervised(lambda k: subprocess.run({command!r}), 1):\n"
        "    print(item)\n"
    )
    step = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not tree_pids(pidfile) and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = tree_pids(pidfile)
    assert len(pids) == 1
    step.kill()
    assert step.wait(timeout=30) == -signal.SIGKILL
    assert running(pids, within=KILL_GRACE_SECONDS + 5) == []


def test_what_a_finished_evaluation_left_running_ends_with_the_step(tmp_path):
    """An evaluation that returns its result and leaves its helpers running: they are
    ended once the step ends (or the next evaluation starts)."""
    step, pids = start_step(tmp_path, "return k")
    assert step.communicate(timeout=60)[0] == "0\n"
    assert step.returncode == 0
    assert running(pids, within=KILL_GRACE_SECONDS + 5) == []


def test_without_a_pidfd_a_crash_is_still_seen_at_once(tmp_path):
    """Where the kernel has no pidfd (Linux before 5.3), the child's end is polled: an
    os._exit(3) while a forked helper holds the result pipe for 20 s is still its exit
    status, seen at once, and the helper is ended."""
    script = (
        "import os, time\n"
        "del os.pidfd_open\n"
        "from evocamp.base.supervised import supervised\n"
        "def task(k):\n"
        "    if os.fork() == 0:\n"
        "        print(os.getpid(), flush=True)\n"
        "        time.sleep(20)\n"
        "        os._exit(0)\n"
        "    time.sleep(0.2)\n"
        "    os._exit(3)\n"
        "began = time.monotonic()\n"
        "print(list(supervised(task, 1)), time.monotonic() - began < 5)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "[Ended(index=0, signal=None, status=3, timed_out=None)] True\n"
    assert running([int(done.stderr.split()[0])]) == []
