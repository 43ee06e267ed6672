"""Shared helpers: small campaigns run with the real Snakemake in temporary folders.

The suite has three parts: ``unit/`` (one file per module or concern, in process),
``workflow/`` (real Snakemake campaigns) and ``cluster/`` (the real local Slurm
cluster). Tests under ``workflow/`` and ``cluster/`` are marked ``slow``:
``python -m pytest -m "not slow"`` runs the unit tests only.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from campaigns import (  # noqa: F401 (re-exported)
    BO_CAMPAIGN,
    MIXED_SPACE,
    PLUGINS,
    REPO,
    SMALL_CAMPAIGN,
)

from evocamp.base.errors import ConfigError
from evocamp.catalogue.factory import resolve_run
from evocamp.config import validate_config

# Rules run `python -m evocamp` and tests run `snakefmt`, `ruff`: the interpreter running
# the tests and its scripts come first on PATH, as in an activated virtual environment,
# so a venv's python run without activating it runs every job with itself.
if os.environ.get("PATH", "").split(os.pathsep)[0] != os.path.dirname(sys.executable):
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


def merged(base: dict, overrides: dict) -> dict:
    """Deep-merge ``overrides`` into a copy of ``base``."""
    result = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def write_config(workdir: Path, config: dict) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake_command(
    workdir: Path, *args: str, cores: int = 2, snakefile: Path = REPO / "Snakefile"
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        str(cores),
        *args,
    ]


def run_snakemake(
    workdir: Path,
    *args: str,
    cores: int = 2,
    check: bool = True,
    timeout: float = 1200,
    env: dict | None = None,
    snakefile: Path = REPO / "Snakefile",
) -> subprocess.CompletedProcess:
    """Run the real Snakemake on the campaign in ``workdir``; output is captured."""
    completed = subprocess.run(
        snakemake_command(workdir, *args, cores=cores, snakefile=snakefile),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check and completed.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({completed.returncode}):\n{completed.stdout[-4000:]}\n"
            f"{completed.stderr[-8000:]}"
        )
    return completed


def kill_tree_after(workdir, seconds: float) -> int:
    """Start the campaign in its own process group and SIGKILL the whole group."""
    process = subprocess.Popen(
        snakemake_command(workdir),
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode


def kill_tree_when(workdir, ready, *, timeout: float = 600, poll: float = 0.05) -> bool:
    """Start the campaign in its own process group and SIGKILL the whole group as soon
    as ``ready()`` is true; returns whether it was killed (False: it finished first)."""
    process = subprocess.Popen(
        snakemake_command(workdir),
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + timeout
    while process.poll() is None and time.time() < deadline:
        if ready():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return True
        time.sleep(poll)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise AssertionError(f"the campaign in {workdir} was not ready within {timeout} s")
    return False


def executed(completed, rule: str) -> list[str]:
    """Generations (``gen`` wildcard) of the jobs of ``rule`` that Snakemake started."""
    found, current = [], None
    for line in (completed.stdout + completed.stderr).splitlines():
        header = re.match(r"^\s*(?:local)?(?:rule|checkpoint) (\w+):$", line)
        if header:
            current = header.group(1)
            continue
        if current == rule and line.strip().startswith("wildcards:"):
            match = re.search(r"gen=(\d+)", line)
            found.append(match.group(1) if match else "")
            current = None
    return found


def with_local_keys(spec: dict, config: dict) -> dict:
    """A command domain's run spec with the step settings' local keys of its program
    (``work_root``, ``keep_work``, ...: :data:`evocamp.tasks.program_keys.LOCAL_KEYS`) put
    back into its domain, as run specs of earlier versions held them, so that a test
    evaluating it in process gets them without the workflow's step settings
    (:class:`~evocamp.tasks.programs.Program` takes them from either)."""
    from evocamp.loop.step_settings import StepSettings

    local = StepSettings.from_config(config).programs.get(spec["domain"], {})
    spec["domain_spec"].update(local)
    return spec


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_config(config)
    return str(caught.value)


def docs_block(page: str, opening: str) -> str:
    """The fenced block of ``docs/<page>`` whose text begins with ``opening``."""
    text = (REPO / "docs" / page).read_text()
    blocks = [block.split("\n", 1)[1] for block in text.split("```")[1::2]]
    (found,) = [block for block in blocks if block.startswith(opening)]
    return found


def run_folder(workdir: Path, config: dict, algorithm: str, domain: str, seed: int) -> Path:
    return workdir / "results" / config["campaign"] / algorithm / domain / f"seed{seed}"


def run_log(workdir: Path, campaign: str, run: str, tail: str) -> Path:
    """A job's log: ``results/<campaign>/logs/<run>/<tail>`` (run: algorithm/domain/seed<k>)."""
    return workdir / "results" / campaign / "logs" / run / tail


def job_log_text(workdir: Path, campaign: str, run: str, tail: str) -> str:
    """A job's log text, on its own or folded into its window log
    (:func:`evocamp.executors.housekeeping.job_log`)."""
    from evocamp.executors.housekeeping import job_log

    return job_log(workdir / "results" / campaign / "logs" / run, tail)


def assert_one_numeric_environment(run: Path, generations: int) -> None:
    """A finished run's summary records its steps (initialise; evaluate: shard jobs or
    Dask workers; tell or the segment job) under this machine's numeric environment."""
    import json

    from evocamp.model.numerics import FIELDS, environment

    (summary,) = run.glob("finished/gen_*.json")
    records = json.loads(summary.read_text())["numerics"]
    assert [(r["step"], r["generations"]) for r in records] == [
        ("initialise", [0, 0]),
        ("evaluate", [1, generations]),
        ("tell", [1, generations]),
    ]
    current = environment()
    for record in records:
        assert {field: record[field] for field in FIELDS} == current


def archive_digests(workdir: Path) -> dict[str, str]:
    """sha256 of every final ``archive.h5`` below ``workdir``, by run folder."""
    digests = {}
    for path in sorted((workdir / "results").rglob("archive.h5")):
        key = str(path.parent.relative_to(workdir / "results"))
        digests[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def evaluation_digests(workdir: Path) -> dict[str, str]:
    """sha256 of every ``evaluations.h5`` below ``workdir``, by run folder: of every
    dataset's bytes but the measured ``eval_seconds`` and every attribute but the
    index's list of window files (which windows hold the rows depends on where the
    run stopped and resumed; the rows do not)."""
    import h5py

    from evocamp.files.evaluation_index import WINDOWS_ATTR
    from evocamp.files.evaluations import TIMING_FIELDS

    digests = {}
    for path in sorted((workdir / "results").rglob("evaluations.h5")):
        digest = hashlib.sha256()
        with h5py.File(path, "r") as handle:
            for name, value in sorted(handle.attrs.items()):
                if name != WINDOWS_ATTR:
                    digest.update(f"{name}={value}".encode())

            def add(name, item, digest=digest):
                if isinstance(item, h5py.Dataset) and name.split("/")[-1] not in TIMING_FIELDS:
                    digest.update(name.encode() + str(item.dtype).encode() + item[()].tobytes())

            handle.visititems(add)
        key = str(path.parent.relative_to(workdir / "results"))
        digests[key] = digest.hexdigest()
    return digests


def jobs_run(completed: subprocess.CompletedProcess) -> dict[str, int]:
    """Job counts per rule from Snakemake's "Job stats" table."""
    counts = {}
    text = completed.stdout + completed.stderr
    if "Job stats:" not in text:
        return counts
    table = text.split("Job stats:", 1)[1].splitlines()[3:]
    for line in table:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


@pytest.fixture(scope="session", autouse=True)
def private_warm_servers(tmp_path_factory):
    """Warm-start servers of this session live in a folder of its own and are stopped
    at its end (they would otherwise idle out two minutes later)."""
    from evocamp.warmstart import stop_servers

    folder = tmp_path_factory.mktemp("runtime")
    folder.chmod(0o700)
    previous = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(folder)
    yield folder
    stop_servers()
    if previous is None:
        del os.environ["XDG_RUNTIME_DIR"]
    else:
        os.environ["XDG_RUNTIME_DIR"] = previous


@pytest.fixture
def small_config() -> dict:
    return copy.deepcopy(SMALL_CAMPAIGN)


@pytest.fixture(scope="session")
def small_campaign_done(tmp_path_factory) -> Path:
    """The working directory of one uninterrupted, finished run of the small campaign,
    shared by every test that only reads it (tests must not change it)."""
    workdir = tmp_path_factory.mktemp("reference_small")
    write_config(workdir, SMALL_CAMPAIGN)
    run_snakemake(workdir)
    return workdir


@pytest.fixture(scope="session")
def reference_small(small_campaign_done) -> dict[str, str]:
    """Archive digests of one uninterrupted run of the small campaign."""
    return archive_digests(small_campaign_done)


@pytest.fixture(scope="session")
def reference_small_evaluations(small_campaign_done) -> dict[str, str]:
    """Digests of the kept evaluations of one uninterrupted run of the small campaign."""
    return evaluation_digests(small_campaign_done)


def shard_results(state, shards: int) -> list:
    """Evaluate the next batch of ``state`` in ``shards`` shards in this process, with
    the one shard step the shard jobs and Dask tasks use (a compact QD batch with the
    elites of the state's archive its parents are)."""
    from evocamp.loop.engine import held_batch
    from evocamp.loop.evaluation import evaluate_shard

    return [
        evaluate_shard(
            resolve_run(state.spec),
            batch=held_batch(state),
            seeds=state.next_seeds,
            generation=state.generation + 1,
            shard=shard,
            shards=shards,
        )
        for shard in range(shards)
    ]


def benchmark_module(name: str):
    """``benchmarks/<name>.py`` loaded as a module (the benchmarks are scripts, not a
    package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def running(pids: list[int], *, within: float = 1.0) -> list[int]:
    """Those of ``pids`` still running (zombies are not) after waiting up to ``within``
    seconds for them to end."""
    deadline = time.monotonic() + within
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def write_final(path: Path, state, *, evaluations: int = 0) -> bytes:
    """Write a state's final ``archive.h5`` as the finalise step does; return its bytes."""
    from evocamp.executors.steps import write_run_archive

    write_run_archive(path, state, evaluations=evaluations)
    return Path(path).read_bytes()


@pytest.fixture
def scheduler_file(tmp_path):
    """A Dask cluster started by the test: a scheduler and two workers on loopback."""
    path = tmp_path / "scheduler.json"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--scheduler-file",
                str(path),
                "--host",
                "127.0.0.1",
                # a free port: two test files may each start a cluster at once
                # (pytest-xdist), and the second would find Dask's 8786 taken
                "--port",
                "0",
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    deadline = time.time() + 60
    while not path.exists() and time.time() < deadline:
        time.sleep(0.2)
    for _ in range(2):
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(path),
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    yield path
    for process in reversed(processes):
        process.terminate()
        process.wait(timeout=30)


def pytest_collection_modifyitems(config, items):
    """Tests of real Snakemake campaigns and of the Slurm cluster are ``slow``."""
    here = Path(__file__).resolve().parent
    for item in items:
        part = Path(str(item.fspath)).resolve().relative_to(here).parts[0]
        if part in ("workflow", "cluster"):
            item.add_marker(pytest.mark.slow)


@contextlib.contextmanager
def small_filesystem(folder: Path, *, size: str):
    """A tmpfs of ``size`` mounted at ``folder`` (created) for the block; skips the test
    where this process may not mount (not root, or no mount namespace)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def resize_filesystem(folder: Path, *, size: str) -> None:
    """Change the size of a tmpfs mounted by :func:`small_filesystem`."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


#: One tell step in a fresh process: the optimizer and the batch it asked come in on
#: standard input (pickled), it tells the batch's values and sends back itself and its
#: next batch.
_NEXT_STEP = """
import pickle, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
optimizer, batch = pickle.loads(sys.stdin.buffer.read())
optimizer.tell(-np.sum((batch - 1.0) ** 2, axis=1))
sys.stdout.buffer.write(pickle.dumps((optimizer, optimizer.ask())))
"""


def batches_in_one_and_in_new_processes(make, *, tells: int = 2) -> tuple[list, list]:
    """The batches of an optimizer from ``make()`` told ``tells`` times in this process,
    and told each time in a new process with another ``PYTHONHASHSEED`` (as shard-mode
    tell steps run); the objective is ``-|x - 1|^2``."""
    import pickle

    import numpy as np

    optimizer = make()
    in_process = [optimizer.ask()]
    for _ in range(tells):
        optimizer.tell(-np.sum((in_process[-1] - 1.0) ** 2, axis=1))
        in_process.append(optimizer.ask())
    optimizer = make()
    across = [optimizer.ask()]
    for salt in range(tells):
        completed = subprocess.run(
            [sys.executable, "-c", _NEXT_STEP],
            input=pickle.dumps((optimizer, across[-1])),
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(100 + salt)},
            timeout=120,  # a library thread left waiting (Nevergrad's Powell) hangs at exit
        )
        optimizer, batch = pickle.loads(completed.stdout)
        across.append(batch)
    return in_process, across
