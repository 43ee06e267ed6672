"""Evaluation plugins used by the test suite (a user's own ``module:function``).

They follow the documented signature: a batch of solutions and their seeds in,
a dict with ``objective``, ``measures`` and extra fields out. Failures are
switched on by a control file so that a test can "fix the function" by removing
it, exactly as a user would fix their code and rerun.
"""

import faulthandler
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _failing_seed(control_file):
    """``(mode, seed)`` from the control file, or ``(None, None)`` if it is absent."""
    if not control_file or not Path(control_file).exists():
        return None, None
    mode, seed = Path(control_file).read_text().split()
    return mode, np.uint64(int(seed))


def misbehaving_sphere(solutions, seeds, *, control_file, every=0, marker_dir=None):
    """:func:`noisy_sphere` without noise, misbehaving for chosen solutions.

    Each line of the control file is ``<kind> <seed>`` or ``<kind> %<k>`` (every
    solution whose evaluation seed is a multiple of ``k``); kinds: ``raise``, ``nan``,
    ``segfault`` (a real SIGSEGV), ``exit`` (``os._exit(3)``), ``sys_exit<code>``
    (``sys.exit(code)``, 0 without one), ``hang`` (sleeps an hour), ``segfault_once`` (a
    SIGSEGV the first time a seed is evaluated, marked in ``marker_dir``: a transient
    crash), ``slow`` (sleeps 0.2 s), ``note`` (appends the seed to
    ``marker_dir/evaluated``: which evaluations ran, and how often), ``where``
    (appends the seed, ``EVOCAMP_LANE`` and ``CUDA_VISIBLE_DEVICES`` to
    ``marker_dir/where``), ``shout``
    (prints 10 MB to standard output) and ``tree`` (starts processes that ignore
    SIGTERM, :func:`process_tree`, noted in ``marker_dir/tree``; the rules after it
    for the same seed, e.g. ``hang`` or ``exit``, follow).
    """
    lines = Path(control_file).read_text().split("\n") if Path(control_file).exists() else []
    rules = [line.split() for line in lines if line.strip()]
    objective = -np.sum(solutions**2, axis=1)
    for index, seed in enumerate(int(seed) for seed in seeds):
        for kind, which in rules:
            hit = seed % int(which[1:]) == 0 if which.startswith("%") else seed == int(which)
            if hit:
                objective[index] = _misbehave(kind, seed, marker_dir, objective[index])
    return {"objective": objective, "measures": solutions[:, :2]}


def _segfault() -> None:
    """A real SIGSEGV of this process. The crash is the point, so without the dump of
    every thread's stack and the extension modules that faulthandler prints: pytest
    enables it in the test process, and the evaluation's child is a fork of it."""
    faulthandler.disable()
    os.kill(os.getpid(), signal.SIGSEGV)


def _misbehave(kind: str, seed: int, marker_dir, value: float) -> float:
    if kind == "raise":
        raise ValueError(f"simulated failure for seed {seed}")
    if kind == "segfault":
        _segfault()
    if kind == "exit":
        os._exit(3)
    if kind.startswith("sys_exit"):
        sys.exit(int(kind.removeprefix("sys_exit") or 0))
    if kind == "hang":
        time.sleep(3600)
    if kind == "kill_parent":  # the process that runs the evaluation (a Dask worker) dies
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(3600)
    if kind == "slow":
        time.sleep(0.2)
        return value
    if kind == "where":  # the lane and GPUs it ran with (evaluation.concurrency)
        lane = os.environ.get("EVOCAMP_LANE"), os.environ.get("CUDA_VISIBLE_DEVICES")
        with open(Path(marker_dir) / "where", "a") as noted:
            noted.write(f"{seed} {lane[0]} {lane[1]}\n")
        return value
    if kind == "note":
        with open(Path(marker_dir) / "evaluated", "a") as noted:
            noted.write(f"{seed}\n")
        return value
    if kind == "shout":
        print(f"seed {seed} " + "x" * (10 << 20), flush=True)
        return value
    if kind == "tree":
        process_tree(Path(marker_dir) / "tree")
        return value
    if kind == "segfault_once":
        marker = Path(marker_dir) / f"crashed-{seed}"
        if not marker.exists():
            marker.touch()
            _segfault()
        return value
    return np.nan


#: Seconds the forked helper of :func:`process_tree` lives (holding the evaluation's
#: result pipe) unless it is killed.
HELPER_SECONDS = 20.0


def process_tree(pidfile: Path) -> None:
    """Start processes the evaluation does not wait for, each ignoring SIGTERM and
    noting its pid in ``pidfile`` (after the evaluation's own): a forked helper that
    holds the evaluation's pipes for :data:`HELPER_SECONDS`, and a program started
    through ``subprocess`` that starts a child of its own (``tree_node.py``). Returns
    once all three are running."""
    pidfile = Path(pidfile)
    expected = len(tree_pids(pidfile)) + 4
    with open(pidfile, "a") as noted:
        noted.write(f"{os.getpid()}\n")
    subprocess.Popen(
        [sys.executable, "-S", str(Path(__file__).with_name("tree_node.py")), str(pidfile), "2"]
    )
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(pidfile, "a") as noted:
            noted.write(f"{os.getpid()}\n")
        time.sleep(HELPER_SECONDS)
        os._exit(0)
    deadline = time.monotonic() + 60
    while len(tree_pids(pidfile)) < expected and time.monotonic() < deadline:
        time.sleep(0.01)


def tree_pids(pidfile: Path) -> list[int]:
    """The pids :func:`process_tree` noted in ``pidfile``."""
    pidfile = Path(pidfile)
    return [int(line) for line in pidfile.read_text().split()] if pidfile.exists() else []


def noisy_sphere(solutions, seeds, *, control_file=None, noise=0.01, sleep=0.0):
    """Sphere (maximised as -sum x^2) with seeded noise; measures are the first two
    coordinates; extra field ``distance`` is the solution's norm.

    The control file holds ``<mode> <seed>``: mode ``raise`` raises for the solution
    with that evaluation seed, ``nan`` returns NaN for it, ``shape`` returns measures
    of the wrong shape. ``sleep`` makes every call take that many seconds.
    """
    mode, bad_seed = _failing_seed(control_file)
    time.sleep(sleep)
    objective = np.empty(len(solutions))
    for index, (solution, seed) in enumerate(zip(solutions, seeds, strict=True)):
        if mode == "raise" and seed == bad_seed:
            raise ValueError(f"simulated crash for seed {int(seed)}")
        rng = np.random.default_rng(int(seed))
        objective[index] = -np.sum(solution**2) + noise * rng.standard_normal()
    if mode == "nan" and bad_seed in seeds:
        objective[list(seeds).index(bad_seed)] = np.nan
    measures = solutions[:, :2]
    if mode == "shape" and bad_seed in seeds:
        measures = solutions[:, :3]
    return {
        "objective": objective,
        "measures": measures,
        "distance": np.linalg.norm(solutions, axis=1),
    }


def fails_first_attempt(solutions, seeds, *, marker_dir):
    """Raise on the first call for a given batch (per first seed), succeed after.

    Used to check that a retried shard job succeeds.
    """
    marker = Path(marker_dir) / f"attempted-{int(seeds[0])}"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        raise RuntimeError("transient failure on the first attempt")
    return {"objective": -np.sum(solutions**2, axis=1), "measures": solutions[:, :2]}


def hangs_first_attempt(solutions, seeds, *, control_dir="hang-once", seconds=600.0):
    """Minus the squared norm, measures = the first two parameters; while the folder
    ``control_dir`` exists (relative to the working directory, i.e. the campaign's),
    the first call for a given batch (per first seed) sleeps ``seconds`` first.

    Used to check that a shard job killed at its Slurm time limit succeeds on retry;
    a campaign without the folder computes the same run at once.
    """
    control = Path(control_dir)
    marker = control / f"attempted-{int(seeds[0])}"
    if control.is_dir() and not marker.exists():
        marker.touch()
        time.sleep(seconds)
    return {"objective": -np.sum(solutions**2, axis=1), "measures": solutions[:, :2]}


def fails_on_negative_first(solutions, seeds):
    """Minus the squared norm, measure = the first parameter; raises for a solution
    whose first parameter is negative (a failing user evaluation in asynchronous mode)."""
    if (solutions[:, 0] < 0).any():
        raise ValueError("the first parameter is negative")
    return {"objective": -np.sum(solutions**2, axis=1), "measures": solutions[:, :1]}


def plateau(solutions, seeds):
    """A flat objective (0 everywhere), measures = the first two parameters: pycma's
    flat-fitness test stops every run after one generation, so IPOP- and BIPOP-CMA-ES
    restart, with another population, every generation."""
    return {"objective": np.zeros(len(solutions)), "measures": solutions[:, :2]}


def typed_configurations(configurations, seeds):
    """A domain over a mixed space (``tests/workflow/test_space_campaign.py``): asserts
    that every configuration holds the declared Python types (an ``int`` for
    ``layers``, a ``str`` for ``optimizer``, ``momentum`` only with ``sgd``) and
    scores it."""
    objective = []
    for configuration in configurations:
        assert type(configuration["lr"]) is float, configuration
        assert type(configuration["layers"]) is int, configuration
        assert configuration["optimizer"] in ("adam", "sgd"), configuration
        assert ("momentum" in configuration) == (configuration["optimizer"] == "sgd"), configuration
        assert configuration["width"] in (16, 32, 64), configuration
        score = -((np.log10(configuration["lr"]) + 2.5) ** 2) - abs(configuration["layers"] - 3)
        score -= 0.5 * (configuration["optimizer"] == "adam")
        score -= (configuration.get("momentum", 0.9) - 0.9) ** 2 + configuration["width"] / 64
        objective.append(score)
    return {"objective": np.asarray(objective)}


def costed_configurations(configurations, seeds):
    """:func:`typed_configurations` with a deterministic cost, the field ``cost``
    (``tests/workflow/test_cost_campaign.py``): wider and deeper costs more."""
    scored = typed_configurations(configurations, seeds)
    cost = [c["layers"] * c["width"] * (1.0 + 10 * c["lr"]) for c in configurations]
    return {**scored, "cost": np.asarray(cost, dtype=np.float64)}
