"""Digests of what campaigns compute, to hold a refactoring to unchanged behaviour.

    python benchmarks/behaviour_digests.py --repo /path/to/checkout --out digests.json
        [--campaign NAME ...] [--cores 2] [--workdir FOLDER]

``--out`` stores the digests as this machine's kernel family's record
(``tests/recorded.py``: digests are held per BLAS kernel and numpy SIMD level, for
one pinned environment); record every family a machine can run by running this
script under each, e.g. with ``OPENBLAS_CORETYPE=Prescott`` on the command line.

Runs a few short campaigns with the code of the checkout ``--repo`` (its
``Snakefile``, and ``PYTHONPATH=<repo>/src`` for every subprocess, so the evocamp that
Snakemake and every job import is that checkout's) in a scratch folder, and writes,
per campaign, the sha256 of every run's ``archive.h5`` and of every ``metrics.csv``
column except those that measure time::

    {"small": {"me/sphere/seed0/archive.h5": "<sha256>",
               "me/sphere/seed0/metrics.csv:qd_score": "<sha256>", ...}, ...}

Keys are relative to the campaign's results folder (``results/<campaign>/``). A
column's digest is the sha256 of its text values in the CSV, each followed by a
newline (UTF-8), so it sees exactly what the file holds (formatting included).

Campaigns (:func:`campaign_configs`; every config text is the same whatever ``--repo``
is, the configs and the plugin folder being this script's own checkout's):

- ``small``: the tests' ``SMALL_CAMPAIGN`` (``tests/conftest.py``): MAP-Elites,
  CMA-ME, OpenAI-ES, SNES and the README's plugin optimizer on a 6-d sphere, 6
  generations, checkpoints every 3 (so a kept checkpoint is resumed from).
- ``default``, ``lunar_lander``, ``digits``, ``bo``: the shipped ``config/*.yaml``
  with ``generations`` and ``seeds`` cut short (:data:`SHORTENED`); algorithms,
  domains, shards, mode, ``checkpoint_every`` and everything else are the file's.
  ``bo`` runs 3 generations: its 8 points per generation reach ``initial_points``
  (10) only after generation 2, so the third generation is the first proposed by the
  surrogates; and 3 of its 6 experiments, every algorithm once and both domains (each
  Dask segment job starts a LocalCluster of 8 workers, the slowest step here).

Only the run targets are built (``snakemake runs``): figures and tables are derived
from ``archive.h5`` and ``metrics.csv`` and are not digested.

Excluded as timing-dependent: every ``metrics.csv`` column measured in seconds
(``wall_seconds``, ``eval_seconds``, ``fit_seconds``, ``propose_seconds``; any column
named ``*_seconds``) and ``utilisation`` (computed from them). The failure counts
(``failed``, ``timed_out``, ``failed_total``) and the attempt counts (``attempts``,
``retries``; ``failed_seconds`` is a timing) are left out too: added after the record,
0 (``attempts``: the batch size) in all these campaigns. Everything else was
identical between repeated runs of the baseline, cold or warm-started (and, checked
for ``default`` and ``digits``, with 1 core instead of 2): ``archive.h5`` holds no
wall-clock content, and jobs may run in any order.

The warm-start servers (``evocamp.warmstart``) of one invocation live in a private
``XDG_RUNTIME_DIR`` (servers of different code versions never meet), shared by its
campaigns one after the other, and are stopped at its end. On 2 busy cores the
campaigns take about 55-75 s (small), 10-20 s (default), 20-35 s (lunar_lander),
10-20 s (digits) and 40-50 s (bo). ``tests/test_behaviour.py`` runs the same
campaigns with the current checkout and compares with
``tests/data/behaviour_digests.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

#: The checkout this script belongs to: its configs and test plugins make the campaigns.
PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "tests"))
sys.path.insert(0, str(PROJECT / "benchmarks"))
from campaigns import SMALL_CAMPAIGN  # noqa: E402 (the tests' small campaign, as data)
from common import snakemake  # noqa: E402
from recorded import record_digests  # noqa: E402

#: Shipped campaigns: config file (relative to the checkout) and the keys overridden
#: to make them short. Nothing else of the file changes.
SHORTENED = {
    "default": ("config/config.yaml", {"generations": 2, "seeds": 1}),
    "lunar_lander": ("config/lunar_lander.yaml", {"generations": 2, "seeds": 1}),
    "digits": ("config/digits.yaml", {"generations": 2, "seeds": 1}),
    "bo": (
        "config/bo.yaml",
        {
            "generations": 3,
            "seeds": 1,
            # Every algorithm once and both domains, instead of all six pairs: each
            # Dask segment starts a cluster of 8 workers.
            "experiments": [
                {"algorithm": "qucb_decentralised", "domain": "ackley5"},
                {"algorithm": "qucb_centralised", "domain": "ackley10"},
                {"algorithm": "random_search", "domain": "ackley10"},
            ],
        },
    ),
}

#: Every campaign, in the order they run.
CAMPAIGNS = ("small", *SHORTENED)

#: ``metrics.csv`` columns left out besides those named ``*_seconds``.
TIMING_COLUMNS = frozenset({"utilisation"})
#: ``metrics.csv`` columns that count failed and retried evaluations (docs/failures.md),
#: added after the digests were recorded: 0 in every campaign here (none fails;
#: ``attempts`` is the batch size), so they are left out and the record stays valid;
#: tests/unit/test_failures.py checks their values.
FAILURE_COLUMNS = frozenset({"failed", "timed_out", "failed_total", "attempts", "retries"})


def timing_column(name: str) -> bool:
    """Whether the ``metrics.csv`` column ``name`` depends on timing (not digested)."""
    return name.endswith("_seconds") or name in TIMING_COLUMNS


def campaign_configs() -> dict[str, dict]:
    """The config of every campaign, by campaign name.

    Returns
    -------
    dict of str to dict
        ``small`` (the tests' small campaign) and the shipped configs shortened by
        :data:`SHORTENED`, in the order of :data:`CAMPAIGNS`.
    """
    configs = {"small": copy.deepcopy(SMALL_CAMPAIGN)}
    for name, (path, overrides) in SHORTENED.items():
        config = yaml.safe_load((PROJECT / path).read_text())
        config.update(overrides)
        configs[name] = config
    for algorithm in configs["bo"]["algorithms"].values():
        # config/bo.yaml has set the cheaper proposals since 2026-11-27; the digests
        # recorded before guard the default search (tests/unit/test_bo.py the others).
        for key in ("refit_every", "candidates", "refine_generations"):
            algorithm.pop(key, None)
    return configs


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def column_digests(path: Path) -> dict[str, str]:
    """The sha256 of every non-timing column of a CSV file, by column name.

    Parameters
    ----------
    path : Path
        A ``metrics.csv``.

    Returns
    -------
    dict of str to str
        sha256 of the column's text values, each followed by ``"\\n"``, by column name;
        columns for which :func:`timing_column` holds and :data:`FAILURE_COLUMNS`
        are left out.
    """
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    digests = {}
    for index, name in enumerate(header):
        if timing_column(name) or name in FAILURE_COLUMNS:
            continue
        text = "".join(f"{row[index]}\n" for row in body)
        digests[name] = hashlib.sha256(text.encode()).hexdigest()
    return digests


def results_digests(results: Path) -> dict[str, str]:
    """Digests of every run below one campaign's results folder.

    Parameters
    ----------
    results : Path
        ``<workdir>/results/<campaign>``.

    Returns
    -------
    dict of str to str
        ``"<algorithm>/<domain>/seed<k>/archive.h5"``: sha256 of the file, and
        ``"<algorithm>/<domain>/seed<k>/metrics.csv:<column>"``: sha256 of the column
        (:func:`column_digests`), sorted by key.
    """
    digests = {}
    for path in results.glob("*/*/seed*/archive.h5"):
        digests[path.relative_to(results).as_posix()] = sha256_file(path)
    for path in results.glob("*/*/seed*/metrics.csv"):
        key = path.relative_to(results).as_posix()
        for column, digest in column_digests(path).items():
            digests[f"{key}:{column}"] = digest
    return dict(sorted(digests.items()))


def subprocess_env(repo: Path, runtime: Path) -> dict[str, str]:
    """The environment of every subprocess: ``repo``'s evocamp first on ``PYTHONPATH``
    and warm-start servers in ``runtime``."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{repo / 'src'}{os.pathsep + path if path else ''}"
    env["XDG_RUNTIME_DIR"] = str(runtime)
    return env


@contextlib.contextmanager
def warm_servers(repo: Path) -> Iterator[Path]:
    """A private ``XDG_RUNTIME_DIR`` for the warm-start servers of campaigns run with
    ``repo`` (mode 0700, short enough for Unix socket paths); at the end its servers
    are stopped and it is removed.

    Parameters
    ----------
    repo : Path
        The checkout whose code runs the campaigns.

    Yields
    ------
    Path
        The folder, for :func:`run_campaign`'s ``runtime``.
    """
    runtime = Path(tempfile.mkdtemp(prefix="evocamp-rt-"))
    runtime.chmod(0o700)
    try:
        yield runtime
    finally:
        stop_warm_servers(subprocess_env(Path(repo).resolve(), runtime), runtime)
        shutil.rmtree(runtime, ignore_errors=True)


def stop_warm_servers(env: dict[str, str], runtime: Path) -> None:
    """Stop the warm-start servers of ``runtime`` with ``python -m evocamp.warmstart
    stop``; should that command fail (e.g. a module renamed), signal the servers that
    hold their lock files directly, as it does."""
    completed = subprocess.run(
        [sys.executable, "-m", "evocamp.warmstart", "stop"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode == 0:
        return
    for lock_path in sorted(runtime.glob("*/*.lock")):
        with open(lock_path) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its server is running
                pid = int(lock.read().strip() or 0)
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)


def run_campaign(
    config: dict,
    *,
    repo: Path,
    workdir: Path,
    runtime: Path | None = None,
    cores: int = 2,
    timeout: float = 1800,
) -> dict[str, str]:
    """Run one campaign with the code of ``repo`` and return its digests.

    Parameters
    ----------
    config : dict
        The campaign config (written to ``workdir/config.yaml``).
    repo : Path
        The checkout whose ``Snakefile`` and ``src`` run the campaign.
    workdir : Path
        An empty (or missing) folder to run in.
    runtime : Path, optional
        The private ``XDG_RUNTIME_DIR`` of the warm-start servers, left running for the
        next campaign (the caller stops them: :func:`warm_servers`). By default a new
        one, whose servers are stopped at the end.
    cores : int
        Snakemake's ``--cores``.
    timeout : float
        Seconds before Snakemake is stopped and the run fails.

    Returns
    -------
    dict of str to str
        :func:`results_digests` of the campaign.

    Raises
    ------
    RuntimeError
        When Snakemake fails (with the end of its output).
    """
    repo = Path(repo).resolve()
    if runtime is None:
        with warm_servers(repo) as runtime:
            return run_campaign(
                config, repo=repo, workdir=workdir, runtime=runtime, cores=cores, timeout=timeout
            )
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = snakemake(workdir, "runs", cores=cores, snakefile=repo / "Snakefile")
    completed = subprocess.run(
        command,
        cwd=workdir,
        env=subprocess_env(repo, runtime),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"snakemake failed ({completed.returncode}) for campaign "
            f"{config['campaign']!r} with {repo}:\n{completed.stdout[-4000:]}\n"
            f"{completed.stderr[-8000:]}"
        )
    return results_digests(workdir / "results" / config["campaign"])


def all_digests(
    *,
    repo: Path,
    scratch: Path,
    names: Iterable[str] = CAMPAIGNS,
    cores: int = 2,
    report=None,
) -> dict[str, dict[str, str]]:
    """Run campaigns one after the other, each in ``scratch/<name>``, sharing warm-start
    servers (stopped at the end).

    Parameters
    ----------
    repo : Path
        The checkout whose code runs the campaigns.
    scratch : Path
        The folder the campaigns run in.
    names : iterable of str
        Campaigns to run (keys of :func:`campaign_configs`).
    cores : int
        Snakemake's ``--cores``.
    report : callable, optional
        Called with ``(name, seconds)`` after each campaign.

    Returns
    -------
    dict of str to dict
        The digests of each campaign, by name.
    """
    configs = campaign_configs()
    digests = {}
    with warm_servers(repo) as runtime:
        for name in names:
            began = time.perf_counter()
            digests[name] = run_campaign(
                configs[name],
                repo=repo,
                workdir=Path(scratch) / name,
                runtime=runtime,
                cores=cores,
            )
            if report is not None:
                report(name, time.perf_counter() - began)
    return digests


def differences(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """Lines naming every key whose digest differs, is missing or is new.

    Parameters
    ----------
    expected, actual : dict of str to str
        Digests of one campaign (:func:`results_digests`).

    Returns
    -------
    list of str
        One line per differing key, sorted; empty when the digests are equal.
    """
    lines = []
    for key in sorted(expected.keys() | actual.keys()):
        if key not in actual:
            lines.append(f"missing: {key}")
        elif key not in expected:
            lines.append(f"new: {key}")
        elif expected[key] != actual[key]:
            lines.append(f"differs: {key}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=PROJECT, help="checkout to run")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument(
        "--campaign", action="append", choices=CAMPAIGNS, help="only these (repeatable)"
    )
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="run here and keep it (default: temporary)")
    args = parser.parse_args(argv)

    def report(name: str, seconds: float) -> None:
        print(f"{name}: {seconds:.1f} s", file=sys.stderr, flush=True)

    began = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.workdir is None:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evocamp-bd-")))
        else:
            scratch = args.workdir
        digests = all_digests(
            repo=args.repo,
            scratch=scratch,
            names=args.campaign or CAMPAIGNS,
            cores=args.cores,
            report=report,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(record_digests(args.out, digests), file=sys.stderr)
    print(f"total: {time.perf_counter() - began:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
