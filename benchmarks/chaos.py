"""Chaos: failing evaluations and killed jobs (issue 31).

    python benchmarks/chaos.py [--generations 16] [--seconds 0.01] [--kills 6]
        [--interval 3] [--timeout 1] [--retries 2] [--workdir DIR]

One campaign, MAP-Elites and OpenAI-ES (64 solutions a generation each, 4 shards) on
a 10-d plugin sphere (``benchmarks/chaotic.py``) whose evaluations take ``--seconds``
each and, as a function of their evaluation seed, raise (1%), hang for an hour (0.2%)
or read address 0, a real ``SIGSEGV`` (0.2%), run with ``evaluation: {on_failure:
retry, retries: 2, after_retries: discard, timeout: 1}`` five ways, each to the end
with the same Snakemake command (rerun after a failed invocation, as a user would, up
to ``--invocations`` times):

- ``clean``: shard mode, the same campaign on a domain that never fails (what the
  faults cost);
- ``shards``: shard mode, undisturbed;
- ``shards, killed``: shard mode while a killer SIGKILLs ``--kills`` random job
  processes (a shard job, a tell, a keep: the job's own process or, for a warm-start
  step, the warm server's child running it), one every ``--interval`` seconds on
  average (exponential);
- ``dask``: Dask mode (a LocalCluster of 2 workers per segment job), undisturbed;
- ``dask, killed``: Dask mode while the killer SIGKILLs random Dask worker processes
  (the nanny starts a new one; Dask runs the lost tasks again).

Asserts, and prints: every campaign finished; every run's ``metrics.csv`` has each
generation's row once; every evaluation (run, generation, solution index) is kept once,
with the same status, message and values in every faulty campaign (nothing lost or
counted twice); archives and the metrics columns but the timings are bitwise those of
the undisturbed shard campaign; the failed and timed-out counts are the same. Prints
per campaign: wall seconds, shard seconds (the shard jobs' step times, Dask mode: the
Dask tasks', from the job logs), Snakemake invocations, kills (by what was killed),
failures by kind, and what the faults (``shards`` against ``clean``) and the kills
(against the undisturbed campaign of their mode) cost in wall and shard seconds.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from behaviour_digests import results_digests
from common import machine, scratch_folder, snakemake, table, write_config

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)

HERE = Path(__file__).resolve().parent
CAMPAIGN = "chaos"
#: Failure rates of the chaotic domain (shares of the evaluations).
FAULTS = {"raises": 0.01, "hangs": 0.002, "segfaults": 0.002}
#: Solutions per generation of each algorithm.
BATCH = 64
#: Seconds (at most, uniform) the killer waits after a victim appeared.
SETTLE = 0.5
#: What a cmdline of a Dask worker (and of its fork server) contains.
FORKSERVER = "multiprocessing.forkserver"


def campaign(args, *, mode: str, faults: bool) -> dict:
    """The chaos campaign in ``mode`` (``shards`` or ``dask``); ``faults`` False: its
    domain never fails."""
    qd = {
        "emitters": 4,
        "emitter_batch_size": BATCH // 4,
        "sigma": 0.5,
        "archive": {"dims": [20, 20]},
    }
    return {
        "campaign": CAMPAIGN,
        "master_seed": args.seed,
        "generations": args.generations,
        "checkpoint_every": args.checkpoint_every,
        "shards": 4,
        "seeds": 1,
        "mode": mode,
        "dask": {"workers": 2},
        "storage": {"keep_evaluations": True},
        "evaluation": {
            "on_failure": "retry",
            "retries": args.retries,
            "after_retries": "discard",
            "timeout": args.timeout,
        },
        "algorithms": {
            "me": {"type": "map_elites", **qd},
            # A compact batch (centre and noise seeds), sent to every Dask worker.
            "oes": {
                "type": "openai_es",
                "popsize": BATCH,
                "sigma": 0.5,
                "learning_rate": 0.05,
                "archive": {"dims": [20, 20]},
            },
        },
        "domains": {
            "sphere": {
                "type": "plugin",
                "function": "chaotic:chaotic_sphere",
                "python_path": str(HERE),
                "solution_dim": 10,
                "measure_ranges": [[-12.8, 12.8], [-12.8, 12.8]],
                "params": {"seconds": args.seconds, **(FAULTS if faults else {})},
            }
        },
    }


@dataclass(frozen=True)
class Process:
    pid: int
    parent: int
    log: str
    cmdline: str


def campaign_processes(workdir: Path) -> dict[int, Process]:
    """The processes working in ``workdir`` (their current folder), with the file their
    standard error goes to."""
    found = {}
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        try:
            if proc.cwd() != str(workdir):
                continue
            log = os.readlink(f"/proc/{proc.pid}/fd/2")
        except (psutil.Error, OSError):
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        found[proc.pid] = Process(proc.pid, proc.info["ppid"], log, cmdline)
    return found


def job_processes(workdir: Path) -> dict[int, str]:
    """The processes running a job's step, by pid, with a label: ``<step> job`` (the
    ``python -m evocamp <step>`` the job's shell started: the step itself, or the
    client of a warm-start child running it) or ``<step> warm child``. A step's
    process is the first writing to its job's log (its supervised evaluation children
    write there too: they are left alone, since a kill of one is a crash of the
    evaluation, retried or discarded by the failure policy, not a lost job)."""
    found = campaign_processes(workdir)
    results = str(workdir / "results")
    jobs = {}
    for pid, process in found.items():
        parent = found.get(process.parent)
        if not process.log.startswith(results) or (parent and parent.log == process.log):
            continue
        step = Path(process.log).stem.rstrip("_0123456789")
        jobs[pid] = f"{step} {'warm child' if 'warmstart' in process.cmdline else 'job'}"
    return jobs


def dask_workers(workdir: Path) -> dict[int, str]:
    """The Dask worker processes of the campaign's segment jobs: the fork server's
    children (not their own supervised evaluation children)."""
    found = campaign_processes(workdir)

    def forked(pid: int) -> bool:
        return pid in found and FORKSERVER in found[pid].cmdline

    return {
        pid: "Dask worker"
        for pid, process in found.items()
        if forked(pid) and forked(process.parent) and not forked(found[process.parent].parent)
    }


@dataclass
class Killer:
    """SIGKILLs up to ``kills`` processes that ``victims(workdir)`` names, one every
    ``interval`` seconds on average (exponential), in a thread."""

    workdir: Path
    victims: Callable[[Path], dict[int, str]]
    kills: int
    interval: float
    seed: int
    made: Counter = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(self.seed)
        while sum(self.made.values()) < self.kills:
            if self.stop.wait(rng.expovariate(1 / self.interval)):
                return
            while not self.stop.is_set():
                if not self.victims(self.workdir):
                    self.stop.wait(0.02)
                    continue
                # A moment later: killed at once, a victim would always be a process
                # that just started (none was running when the interval ended).
                if self.stop.wait(rng.uniform(0, SETTLE)):
                    return
                found = self.victims(self.workdir)
                if found and self._kill(rng.choice(sorted(found)), found):
                    break

    def _kill(self, pid: int, found: dict[int, str]) -> bool:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.made[found[pid]] += 1
        return True


@dataclass
class Outcome:
    name: str
    workdir: Path
    seconds: float
    invocations: int
    kills: Counter
    shard_seconds: float


def finish(
    name: str,
    workdir: Path,
    *,
    killer: Killer | None,
    invocations: int,
    extra: tuple[str, ...] = (),
    cores: int = 2,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run the campaign in ``workdir`` to the end: the same Snakemake command (``runs``
    and ``extra``) again after each failed invocation (at most ``invocations``),
    ``killer`` at work meanwhile; ``env``: variables added to Snakemake's environment."""
    began = time.perf_counter()
    if killer:
        killer.thread.start()
    for invocation in range(1, invocations + 1):
        done = subprocess.run(
            snakemake(workdir, "runs", *extra, cores=cores),
            cwd=workdir,
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
        )
        (workdir / f"snakemake_{invocation}.log").write_text(done.stdout + done.stderr)
        if done.returncode == 0:
            break
    else:
        raise SystemExit(f"{name}: not finished after {invocations} invocations ({workdir})")
    seconds = time.perf_counter() - began
    if killer:
        killer.stop.set()
        killer.thread.join()
    kills = killer.made if killer else Counter()
    return Outcome(name, workdir, seconds, invocation, kills, shard_seconds(workdir))


def metrics_generations(workdir: Path) -> dict[str, list[int]]:
    """Each run's ``metrics.csv`` generation column."""
    from evocamp.model.metrics import read_metrics_csv

    runs = sorted((workdir / "results" / CAMPAIGN).glob("*/*/seed*/metrics.csv"))
    return {
        str(path.parent.relative_to(workdir)): [
            int(g) for g in read_metrics_csv(path)["generation"]
        ]
        for path in runs
    }


def failure_counts(workdir: Path) -> dict[str, tuple[int, int, int]]:
    """Each run's ``failed``, ``timed_out`` and last ``failed_total`` from metrics.csv."""
    from evocamp.model.metrics import read_metrics_csv

    counts = {}
    for path in sorted((workdir / "results" / CAMPAIGN).glob("*/*/seed*/metrics.csv")):
        rows = read_metrics_csv(path)
        counts[str(path.parent.relative_to(workdir))] = (
            int(rows["failed"].sum()),
            int(rows["timed_out"].sum()),
            int(rows["failed_total"][-1]),
        )
    return counts


#: A shard job's step time (shard mode) and a Dask task's (Dask mode) in the job logs.
SHARD_TIMES = re.compile(
    r"^\[evaluate took ([\d.]+) s|^\[tcp://[^\]]+\] generation \d+ shard \d+: .* in ([\d.]+) s$",
    re.MULTILINE,
)


def shard_seconds(workdir: Path) -> float:
    """Seconds the shard jobs (or Dask tasks) that made the results took, from the
    campaign's job logs (a killed job's log is replaced by its rerun's)."""
    total = 0.0
    for path in (workdir / "results" / CAMPAIGN / "logs").rglob("*.log"):
        for job, task in SHARD_TIMES.findall(path.read_text(errors="replace")):
            total += float(job or task)
    return total


def evaluations(workdir: Path):
    """The campaign's kept evaluations, measured seconds left out, in a fixed order."""
    from evocamp.results import load_evaluations

    frame = load_evaluations(workdir / "results" / CAMPAIGN).drop(columns="eval_seconds")
    keys = ["algorithm", "domain", "seed", "generation", "index"]
    return frame.sort_values(keys).reset_index(drop=True)


def check(outcome: Outcome, reference: Outcome | None, *, args) -> dict:
    """Assert what the benchmark promises of ``outcome`` (against ``reference``, the
    undisturbed shard campaign, if given); returns its failures by status."""
    expected = list(range(args.generations + 1))
    for run, generations in metrics_generations(outcome.workdir).items():
        assert generations == expected, f"{outcome.name}: {run} metrics rows {generations}"
    frame = evaluations(outcome.workdir)
    keys = ["algorithm", "domain", "seed", "generation", "index"]
    assert not frame.duplicated(keys).any(), f"{outcome.name}: an evaluation kept twice"
    batch = 2 * BATCH * args.generations
    assert len(frame) == batch, f"{outcome.name}: {len(frame)} evaluations kept, not {batch}"
    if reference is not None:
        assert frame.equals(evaluations(reference.workdir)), f"{outcome.name}: evaluations differ"
        mine, theirs = (
            results_digests(o.workdir / "results" / CAMPAIGN) for o in (outcome, reference)
        )
        differ = sorted(key for key in theirs if mine.get(key) != theirs[key])
        assert mine.keys() == theirs.keys() and not differ, f"{outcome.name}: {differ}"
        assert failure_counts(outcome.workdir) == failure_counts(reference.workdir)
    return dict(Counter(frame["status"]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--generations", type=int, default=16)
    parser.add_argument("--checkpoint-every", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=0.01, help="per evaluation")
    parser.add_argument("--timeout", type=float, default=1.0, help="evaluation.timeout")
    parser.add_argument("--retries", type=int, default=2, help="evaluation.retries")
    parser.add_argument("--kills", type=int, default=6, help="per disturbed campaign")
    parser.add_argument("--interval", type=float, default=3.0, help="mean seconds between kills")
    parser.add_argument("--invocations", type=int, default=40, help="Snakemake runs at most")
    parser.add_argument("--seed", type=int, default=1, help="master seed (and the killer's)")
    parser.add_argument("--workdir", type=Path, help="keep the campaigns here")
    args = parser.parse_args()
    print(machine())
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    plans = [
        ("clean", "shards", False, None),
        ("shards", "shards", True, None),
        ("shards, killed", "shards", True, job_processes),
        ("dask", "dask", True, None),
        ("dask, killed", "dask", True, dask_workers),
    ]
    outcomes, statuses = {}, {}
    with scratch_folder("evocamp-chaos-", keep=args.workdir) as folder:
        for index, (name, mode, faults, victims) in enumerate(plans):
            workdir = (folder / name.replace(", ", "_")).resolve()
            write_config(workdir, campaign(args, mode=mode, faults=faults))
            killer = victims and Killer(
                workdir, victims, kills=args.kills, interval=args.interval, seed=args.seed + index
            )
            outcomes[name] = finish(name, workdir, killer=killer, invocations=args.invocations)
            reference = outcomes["shards"] if faults and name != "shards" else None
            statuses[name] = check(outcomes[name], reference, args=args)
            print(f"{name}: {outcomes[name].seconds:.1f} s", file=sys.stderr, flush=True)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(report(outcomes, statuses))
        hangs = statuses["shards"].get("timed_out", 0)
        print(
            f"hangs: {hangs} x {args.retries + 1} attempts x {args.timeout:g} s = "
            f"{hangs * (args.retries + 1) * args.timeout:g} s of shard time"
        )


def report(outcomes: dict[str, Outcome], statuses: dict[str, dict]) -> str:
    """The table: one row per campaign, its costs against the campaign it differs from
    by the faults (``shards`` against ``clean``) or by the kills."""
    base = {"shards": "clean", "shards, killed": "shards", "dask, killed": "dask"}
    rows = []
    for name, outcome in outcomes.items():
        status, other = statuses[name], outcomes.get(base.get(name))
        rows.append(
            [
                name,
                f"{outcome.seconds:.1f}",
                f"{outcome.seconds - other.seconds:+.1f} (vs {other.name})" if other else "",
                f"{outcome.shard_seconds:.1f}",
                f"{outcome.shard_seconds - other.shard_seconds:+.1f}" if other else "",
                outcome.invocations,
                ", ".join(f"{n} {label}" for label, n in sorted(outcome.kills.items())) or "none",
                status.get("failed", 0),
                status.get("crashed", 0),
                status.get("timed_out", 0),
                "reference" if name == "shards" else ("" if name == "clean" else "yes"),
            ]
        )
    header = [
        "campaign",
        "wall s",
        "wall cost s",
        "shard s",
        "shard cost s",
        "invocations",
        "kills",
        "raised",
        "segfaulted",
        "timed out",
        "same archives, metrics, evaluations",
    ]
    return table(header, rows)


if __name__ == "__main__":
    main()
