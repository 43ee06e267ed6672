"""Chaos on the local Slurm cluster: a 4-process program that crashes, hangs and
fails, with shard jobs cancelled (issue 42).

    python benchmarks/slurm_chaos.py [--per-generation 125] [--generations 8]
        [--concurrency 4] [--timeout 20] [--cancels 3] [--interval 20] [--parallel]
        [--workdir DIR]

Needs the local single-node cluster with enough CPUs declared (the machine's real
cores do not matter: the program's processes mostly sleep):
``EVOCAMP_SLURM_CPUS=128 scripts/local-slurm start`` for ``--parallel``, 16 for the
runs one after another (a shard job of concurrency 4 asks 4 x 4 ranks); the script
refuses a node with fewer. One run of MAP-Elites (5 emitters, ``--per-generation``
solutions a generation) on a ``type: command`` domain whose program,
``tests/programs/chaos_driver.py``, runs as 4 processes through the launcher
``srun --overlap --exact -n {ranks}`` (``ranks: 4``) inside each shard job's allocation;
the evaluation seed decides that about 5% of the evaluations crash (the last rank
SIGKILLs itself), 2% hang (every rank and a child of each sleep for an hour,
ignoring SIGTERM) and 3% write a ``fail`` results file. ``evaluation: {on_failure:
retry, retries: 1, after_retries: discard, timeout: --timeout}``: a crash or a hang
is tried twice and discarded, a ``fail`` is kept as ``failed`` at once. The timeout
(20 s) is 20 times an evaluation's second or so, so that a loaded machine does not
make a normal evaluation time out (which would change the archive).

Four runs with the Slurm profile, each to the end with the same Snakemake command
(rerun after a failed invocation, as a user would), one after another or, with
``--parallel``, all four at once (each in its own folder, with its own marker):

- 2 shards, concurrency 1 (the reference);
- 2 shards, concurrency ``--concurrency``: that many evaluations of 4 ranks at once,
  16 CPUs per shard job at 4;
- 8 shards, concurrency 1, while a killer ``scancel``s ``--cancels`` running shard
  jobs at random, one every ``--interval`` seconds on average;
- 8 shards, concurrency 1.

Snakemake runs with ``--cores 64``: ``--cores`` caps every job's threads, remote ones
too, and the evaluate job asks for concurrency x ranks of them (Slurm's
``--cpus-per-task``); the profile's ``local-cores: 2`` bounds the local rules.

Asserts, and prints: every run finished, each generation's metrics row once, with
``--per-generation`` new evaluations; every evaluation kept once (run, generation,
solution), every failure with a message naming its solution, the same status and
message (the work directory and Slurm job ids aside) in every run; archives and the
metrics columns but the timings bitwise those of the reference; no process of the
program (found by a marker in its environment, ``EVOCAMP_CHAOS_MARKER``) and no Slurm
job of the run left when Snakemake has ended.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from behaviour_digests import results_digests
from chaos import CAMPAIGN, Killer, failure_counts, finish, metrics_generations
from chaos import evaluations as kept_evaluations
from common import REPO, machine, scratch_folder, table, write_config

SLURM_PROFILE = str(REPO / "profiles" / "slurm")
DRIVER = REPO / "tests" / "programs" / "chaos_driver.py"
MARKER = "EVOCAMP_CHAOS_MARKER"
#: Snakemake's --cores: no cap on a shard job's concurrency x ranks threads.
CORES = 64
#: What an evaluation's message holds that names one run's files or Slurm's job ids.
RUN_PARTS = re.compile(r"work directory \S+|\bshard \d+|\d+\.\d+|task \d+")


def campaign(args, *, shards: int, concurrency: int, emitters: int = 5) -> dict:
    """The chaos campaign: one MAP-Elites run on the chaotic 4-process program."""
    return {
        "campaign": CAMPAIGN,
        "master_seed": args.seed,
        "generations": args.generations,
        "checkpoint_every": args.generations,
        "shards": shards,
        "seeds": 1,
        "storage": {"keep_evaluations": True},
        "evaluation": {
            "on_failure": "retry",
            "retries": 1,
            "after_retries": "discard",
            "timeout": args.timeout,
            "concurrency": concurrency,
        },
        "algorithms": {
            "me": {
                "type": "map_elites",
                "emitters": emitters,
                "emitter_batch_size": args.per_generation // emitters,
                "sigma": 0.5,
                "archive": {"dims": [10, 10]},
            }
        },
        "domains": {
            "chaos": {
                "type": "command",
                "command": ["python", "-S", str(DRIVER)],
                "ranks": args.ranks,
                "launcher": "srun --overlap --exact -n {ranks}",
                "solution_dim": 4,
                "bounds": [-4, 4],
                "measure_ranges": [[-4, 4], [-4, 4]],
                "sense": "minimise",
                "keep_work": "none",
            }
        },
    }


def marked_processes(marker: str) -> list[str]:
    """The command lines of the program's processes (``srun``, its tasks, their
    children): those whose environment holds ``MARKER=marker`` and the work directory
    an evaluation's program gets (``EVOCAMP_WORKDIR``; the campaign's own processes,
    such as a warm-start server, have the marker only)."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if needle in environ and any(v.startswith(b"EVOCAMP_WORKDIR=") for v in environ):
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                found.append(f"{entry.name}: {command.decode(errors='replace')}")
        except OSError:
            continue
    return found


def survivors(marker: str, *, within: float) -> list[str]:
    """The marked processes still running ``within`` seconds after the run ended (the
    guardians end a killed step's groups in their 2 s of grace)."""
    deadline = time.monotonic() + within
    while (left := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def campaign_jobs(workdir: Path, *, states: str = "all") -> dict[str, str]:
    """Slurm jobs started in ``workdir`` (their working directory): id and state."""
    lines = subprocess.run(
        ["squeue", "-h", "-t", states, "-o", "%i|%T|%Z|%k"], capture_output=True, text=True
    ).stdout.splitlines()
    fields = [line.split("|") for line in lines if line.count("|") == 3]
    return {job: state for job, state, folder, _ in fields if folder == str(workdir)}


def running_shard_jobs(workdir: Path) -> dict[str, str]:
    """The running evaluate jobs of the campaign in ``workdir``, as the killer's victims."""
    lines = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "-o", "%i|%Z|%k"], capture_output=True, text=True
    ).stdout.splitlines()
    fields = [line.split("|") for line in lines if line.count("|") == 2]
    return {
        job: "shard job"
        for job, folder, comment in fields
        if folder == str(workdir) and comment.startswith("rule_evaluate")
    }


class Canceller(Killer):
    """:class:`chaos.Killer` with ``scancel`` for ``SIGKILL``: its victims are job ids."""

    def _kill(self, pid, found) -> bool:
        done = subprocess.run(["scancel", str(pid)], capture_output=True)
        if done.returncode != 0:
            return False
        self.made[found[pid]] += 1
        return True


def normalised_evaluations(workdir: Path):
    """The kept evaluations (measured seconds left out), each message with what names
    this run's files or Slurm's job ids replaced."""
    frame = kept_evaluations(workdir)
    frame["message"] = frame["message"].astype(str).str.replace(RUN_PARTS, "_", regex=True)
    return frame


def check(name: str, workdir: Path, *, args) -> dict:
    """Assert what a run promises on its own; its evaluations' statuses, counted."""
    from evocamp.model.metrics import read_metrics_csv

    expected = list(range(args.generations + 1))
    for run, generations in metrics_generations(workdir).items():
        assert generations == expected, f"{name}: {run} metrics rows {generations}"
    frame = normalised_evaluations(workdir)
    keys = ["algorithm", "domain", "seed", "generation", "index"]
    assert not frame.duplicated(keys).any(), f"{name}: an evaluation kept twice"
    total = args.per_generation * args.generations
    assert len(frame) == total, f"{name}: {len(frame)} evaluations kept, not {total}"
    for path in (workdir / "results" / CAMPAIGN).glob("*/*/seed*/metrics.csv"):
        # Each generation's row counts its evaluations once: the told ones (the
        # cumulative ``evaluations``) and the failed ones, as the evaluations file has
        # them; one retry for each crash and each hang.
        rows = read_metrics_csv(path)
        told = [int(n) for n in np.diff(rows["evaluations"])]
        kept = frame.groupby("generation")["status"]
        counted = {
            "told": told,
            "failed": [int(n) for n in rows["failed"][1:]],
            "timed out": [int(n) for n in rows["timed_out"][1:]],
            "retries": [int(n) for n in rows["retries"][1:]],
            "failed in all": int(rows["failed_total"][-1]),
        }
        statuses = {g: Counter(s) for g, s in kept}
        generations = range(1, args.generations + 1)
        wanted = {
            "told": [statuses[g]["ok"] for g in generations],
            "failed": [args.per_generation - statuses[g]["ok"] for g in generations],
            "timed out": [statuses[g]["timed_out"] for g in generations],
            "retries": [statuses[g]["crashed"] + statuses[g]["timed_out"] for g in generations],
            "failed in all": int((frame["status"] != "ok").sum()),
        }
        assert counted == wanted, f"{name}: metrics count {counted}, evaluations {wanted}"
    failed = frame[frame["status"] != "ok"]
    for row in failed.itertuples():
        named = f"generation {row.generation}, _, solution {row.index}: "  # _: shard <k>
        assert named in row.message, (
            f"{name}: generation {row.generation}, solution {row.index}: {row.message!r}"
        )
    return dict(Counter(frame["status"]))


def archive_digest(workdir: Path) -> str:
    """The first 12 hex digits of the run's ``archive.h5`` sha256 (one run per campaign)."""
    digests = results_digests(workdir / "results" / CAMPAIGN)
    return " ".join(d[:12] for key, d in digests.items() if key.endswith("archive.h5"))


def same_as(workdir: Path, reference: Path) -> list[str]:
    """What differs from the reference run: archive and metrics digests, evaluations,
    failure counts."""
    differ = []
    mine, theirs = (results_digests(w / "results" / CAMPAIGN) for w in (workdir, reference))
    differ += sorted(key for key in theirs.keys() | mine.keys() if mine.get(key) != theirs.get(key))
    if not normalised_evaluations(workdir).equals(normalised_evaluations(reference)):
        differ.append("evaluations")
    if failure_counts(workdir) != failure_counts(reference):
        differ.append("failure counts")
    return differ


def node_cpus() -> int:
    """The CPUs the local cluster's node declares (``EVOCAMP_SLURM_CPUS``)."""
    out = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True)
    return max((int(word) for word in out.stdout.split() if word.isdigit()), default=0)


def one_run(name: str, workdir: Path, *, killer, args) -> tuple:
    """Run one campaign to the end; its outcome, the program's processes and the Slurm
    jobs of the campaign left after it."""
    outcome = finish(
        name,
        workdir,
        killer=killer,
        invocations=args.invocations,
        extra=("--profile", SLURM_PROFILE),
        cores=CORES,
        env={MARKER: workdir.name},
    )
    left = survivors(workdir.name, within=15.0)
    jobs = campaign_jobs(workdir, states="PENDING,RUNNING,COMPLETING")
    print(f"{name}: {outcome.seconds:.0f} s", file=sys.stderr, flush=True)
    return outcome, left, jobs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-generation", type=int, default=125, help="a multiple of 5")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4, help="of the concurrent run")
    parser.add_argument("--timeout", type=float, default=20.0, help="evaluation.timeout")
    parser.add_argument("--cancels", type=int, default=3, help="scancels in the scancel run")
    parser.add_argument("--interval", type=float, default=20.0, help="mean s between them")
    parser.add_argument("--invocations", type=int, default=10, help="Snakemake runs at most")
    parser.add_argument("--seed", type=int, default=1, help="master seed (and the killer's)")
    parser.add_argument("--parallel", action="store_true", help="the four runs at once")
    parser.add_argument("--workdir", type=Path, help="keep the campaigns here")
    args = parser.parse_args()
    plans = [(2, 1, False), (2, args.concurrency, False), (8, 1, True), (8, 1, False)]
    cpus = node_cpus()
    needed = [shards * concurrency * args.ranks for shards, concurrency, _ in plans]
    if args.concurrency * args.ranks > cpus or (args.parallel and sum(needed) > cpus):
        raise SystemExit(
            f"the local cluster's node has {cpus} CPUs: a shard job of concurrency "
            f"{args.concurrency} x {args.ranks} ranks needs {args.concurrency * args.ranks}"
            + (f", the four runs at once {sum(needed)}" if args.parallel else "")
            + f" (restart it with EVOCAMP_SLURM_CPUS={max(sum(needed), 8)})"
        )
    print(machine())
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"node CPUs: {cpus}; runs {'at once' if args.parallel else 'one after another'}")
    rows, reference = [], None
    with scratch_folder("evocamp-slurm-chaos-", keep=args.workdir) as folder:
        runs = {}
        for shards, concurrency, cancel in plans:
            name = f"{shards} shards, concurrency {concurrency}" + (", scancel" if cancel else "")
            workdir = (folder / f"s{shards}_c{concurrency}{'_scancel' if cancel else ''}").resolve()
            write_config(workdir, campaign(args, shards=shards, concurrency=concurrency))
            killer = cancel and Canceller(
                workdir,
                running_shard_jobs,
                kills=args.cancels,
                interval=args.interval,
                seed=args.seed,
            )
            runs[name] = (workdir, killer or None)
        with ThreadPoolExecutor(max_workers=len(runs) if args.parallel else 1) as pool:
            futures = {
                name: pool.submit(one_run, name, workdir, killer=killer, args=args)
                for name, (workdir, killer) in runs.items()
            }
            done, problems = {}, []
            for name, future in futures.items():
                try:
                    done[name] = future.result()
                except (AssertionError, SystemExit) as error:
                    problems.append(str(error))
        for name, (outcome, left, jobs) in done.items():
            workdir = outcome.workdir
            try:
                statuses = check(name, workdir, args=args)
            except AssertionError as error:
                problems.append(str(error))
                statuses = dict(Counter(normalised_evaluations(workdir)["status"]))
            differ = same_as(workdir, reference) if reference else []
            reference = reference or workdir
            rows.append(
                [
                    name,
                    f"{outcome.seconds:.0f}",
                    outcome.invocations,
                    sum(outcome.kills.values()),
                    sum(statuses.values()),
                    statuses.get("ok", 0),
                    statuses.get("failed", 0),
                    statuses.get("crashed", 0),
                    statuses.get("timed_out", 0),
                    len(left),
                    len(jobs),
                    archive_digest(workdir),
                    "reference" if workdir == reference else ("yes" if not differ else differ),
                ]
            )
            print(rows[-1], file=sys.stderr, flush=True)
            if left:
                problems.append(f"{name}: processes of the program left: {left}")
            if jobs:
                problems.append(f"{name}: Slurm jobs left: {jobs}")
            if differ:
                problems.append(f"{name}: differs from the reference in {differ}")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(
        f"{args.per_generation} solutions x {args.generations} generations, {args.ranks} "
        f"ranks per evaluation, timeout {args.timeout:g} s"
    )
    header = [
        "run",
        "wall s",
        "invocations",
        "scancels",
        "evaluations kept",
        "ok",
        "failed",
        "crashed",
        "timed out",
        "processes left",
        "jobs left",
        "archive.h5 sha256",
        "same archive, metrics, evaluations",
    ]
    print(table(header, rows))
    if problems:
        raise SystemExit("\n".join(problems))


if __name__ == "__main__":
    main()
