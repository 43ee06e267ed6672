"""Shared helpers: small campaigns run with the real Snakemake in temporary folders."""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"

#: A small campaign: every family (two QD algorithms, OpenAI-ES, SNES and the README's
#: plugin optimizer) on a 6-d sphere, one seed, 6 generations.
SMALL_CAMPAIGN = {
    "campaign": "small",
    "master_seed": 7,
    "generations": 6,
    "shards": 3,
    "checkpoint_every": 3,
    "seeds": 1,
    "algorithms": {
        "me": {
            "type": "map_elites",
            "emitters": 2,
            "batch_size": 8,
            "sigma": 0.5,
            "archive": {"dims": [10, 10]},
        },
        "cmame": {
            "type": "cma_me",
            "emitters": 2,
            "batch_size": 8,
            "sigma": 0.5,
            "archive": {"dims": [10, 10]},
        },
        "oes": {
            "type": "openai_es",
            "popsize": 16,
            "sigma": 0.3,
            "learning_rate": 0.05,
            "archive": {"dims": [10, 10]},
        },
        "snes": {"type": "snes", "archive": {"dims": [10, 10]}},
        # The README's optimizer example, as written (test_readme_optimizer_example_...).
        "mine": {
            "type": "plugin",
            "class": "my_optimizers:OnePlusLambda",
            "python_path": str(PLUGINS),
            "params": {"lam": 16, "sigma": 0.3},
            "archive": {"dims": [10, 10]},
        },
    },
    "domains": {"sphere": {"type": "sphere", "solution_dim": 6}},
}


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


def run_folder(workdir: Path, config: dict, algorithm: str, domain: str, seed: int) -> Path:
    return workdir / "results" / config["campaign"] / algorithm / domain / f"seed{seed}"


def run_log(workdir: Path, campaign: str, run: str, tail: str) -> Path:
    """A job's log: ``results/<campaign>/logs/<run>/<tail>`` (run: algorithm/domain/seed<k>)."""
    return workdir / "results" / campaign / "logs" / run / tail


def job_log_text(workdir: Path, campaign: str, run: str, tail: str) -> str:
    """A job's log text, on its own or folded into its window log (``evocamp.joblogs``)."""
    from evocamp.joblogs import job_log

    return job_log(workdir / "results" / campaign / "logs" / run, tail)


def archive_digests(workdir: Path) -> dict[str, str]:
    """sha256 of every final ``archive.h5`` below ``workdir``, by run folder."""
    digests = {}
    for path in sorted((workdir / "results").rglob("archive.h5")):
        key = str(path.parent.relative_to(workdir / "results"))
        digests[key] = hashlib.sha256(path.read_bytes()).hexdigest()
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


def shard_results(state, shards: int) -> list:
    """Evaluate the next batch of ``state`` in ``shards`` shards in this process, as
    the shard jobs would (solutions made from the stored batch, kept when the shards
    propose them)."""
    from evocamp.engine import evaluate_slice
    from evocamp.optimizers import optimizer_class, proposal, proposes_in_shards
    from evocamp.storage import shard_bounds

    cls = optimizer_class(state.spec)
    results = []
    for shard in range(shards):
        start, stop = shard_bounds(len(state.next_seeds), shards, shard)
        solutions, stats = proposal(cls, state.next_batch, start, stop)
        results.append(
            evaluate_slice(
                state.spec,
                generation=state.generation + 1,
                shard=shard,
                start=start,
                solutions=solutions,
                seeds=state.next_seeds[start:stop],
                stats=stats,
                keep_solutions=proposes_in_shards(cls),
            )
        )
    return results
