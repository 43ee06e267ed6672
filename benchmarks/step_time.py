"""Time of the pipeline's short steps (a shard's evaluate, a generation's tell), cold and
warm, for one or more source trees in one session: did a change make them slower?

    python benchmarks/step_time.py --repos /work/base /work/main [--repeats 15]
                                   [--steps evaluate tell] [--modes cold warm] [--workdir DIR]

Every repo is driven through its own command line only (``python -m evocamp ...`` with
``PYTHONPATH=<repo>/src``); this process never imports evocamp, so trees with different
module layouts can be compared. For each repo, in a folder of its own, it writes a
campaign of CMA-ME as in benchmarks/overhead.py (15 emitters x 36, 100x100 grid) on the
built-in 100-d ``sphere`` (8 shards, checkpoint_every 10), gets the run spec from the
repo's ``evocamp.config``, runs ``init`` and evaluates the 8 shards of generation 1.
Then it times, each as a fresh process the way a Snakemake job runs it:

- evaluate: ``evocamp evaluate --state state0.h5 --shard 0 --shards 8`` (to a file of
  its own, so the shard files the tell reads never change);
- tell: ``evocamp tell --state state0.h5 --shard-files shard_00*.h5 --output state1.h5
  --total 20`` (generation 1 of 20: a light state out, the full state into the state
  cache, a private folder in /dev/shm named by EVOCAMP_STATE_CACHE);

in two modes: cold (``EVOCAMP_WARM_START=0``) and warm (the step runs in a fork of the
repo's warm-start server). Each repo gets a private XDG_RUNTIME_DIR, so servers of
different code never meet; an untimed call per (repo, step, mode) comes first (for warm
mode, until a call reports it ran warm), every timed warm call must end its log with
"warm start]" (one that ran cold is redone after warming again), and the servers are
stopped at the end (``python -m evocamp.warmstart stop``). Bytecode is cached (as in an
ordinary install) under a prefix in the scratch folder, whatever PYTHONDONTWRITEBYTECODE
says, so steps do not compile evocamp on every start and the source trees stay untouched.

"wall" is the client process's wall time (time.perf_counter around subprocess.run,
stderr to a log file as in a Snakemake job); "own" is the step's own "[<step> took X s]"
figure from its log (the step after its arguments are parsed: no interpreter start,
no warm-start hand-over); "client CPU" is user + system time of the process we started
(cold: the whole step; warm: only the client's side, the forked child's work is not in
it). Repos are interleaved within every repeat (their order alternates between repeats),
so drift hits them alike. The table gives median and IQR per (step, mode, repo) and the
ratio of each repo's median to the first repo's. Passing the same tree twice
(``--repos /work/base /work/base``) shows the noise floor of the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import CMA_ME_BENCHMARK, machine, scratch_folder, table, write_config

ALGORITHM = CMA_ME_BENCHMARK
SHARDS = 8
TOTAL = 20
CAMPAIGN = {
    "campaign": "step_time",
    "master_seed": 1,
    "generations": TOTAL,
    "checkpoint_every": 10,
    "shards": SHARDS,
    "seeds": 1,
    "mode": "shards",
    "algorithms": {"cmame": ALGORITHM},
    "domains": {"sphere": {"type": "sphere", "solution_dim": 100}},
}
SHARD_FILES = [f"shard_{shard:03d}.h5" for shard in range(SHARDS)]
STEPS = {
    "evaluate": [
        "evaluate", "--state", "state0.h5", "--shard", "0", "--shards", str(SHARDS),
        "--output", "timed_shard_000.h5",
    ],
    "tell": [
        "tell", "--state", "state0.h5", "--shard-files", *SHARD_FILES, "--output", "state1.h5",
        "--total", str(TOTAL),
    ],
}  # fmt: skip
MODES = ("cold", "warm")
#: How long warming up may take (a server imports pyribs & co. before it listens).
WARM_UP_SECONDS = 180.0
#: Timed warm calls that ran cold are redone at most this many times each.
WARM_RETRIES = 3
OWN_TIME = re.compile(r"\[([\w-]+) took ([\d.]+) s(, warm start)?\]\s*$")

#: Run in a subprocess with PYTHONPATH=<repo>/src: prints the run spec of the campaign
#: in the config file argv[1] (algorithm argv[2], domain argv[3], seed 0) and where
#: evocamp was imported from.
SPEC_SNIPPET = """
import importlib, json, pkgutil, sys
import yaml
import evocamp
NAMES = ("validate_config", "run_spec", "run_spec_json")
try:
    from evocamp.config import validate_config, run_spec, run_spec_json
except ImportError as error:
    found = {}
    try:
        import evocamp.config as config
    except ImportError:
        config = None
    if config is not None:
        found = {name: getattr(config, name) for name in NAMES if hasattr(config, name)}
        for info in pkgutil.iter_modules(getattr(config, "__path__", [])):
            module = importlib.import_module(f"evocamp.config.{info.name}")
            for name in NAMES:
                if found.get(name) is None:
                    found[name] = getattr(module, name, None)
    missing = [name for name in NAMES if found.get(name) is None]
    if missing:
        modules = sorted(info.name for info in pkgutil.iter_modules(evocamp.__path__))
        sys.exit(
            f"step_time: the evocamp at {evocamp.__file__} has no {', '.join(missing)} "
            f"in evocamp.config ({error}); its modules: {', '.join(modules)}. Adapt "
            "SPEC_SNIPPET in benchmarks/step_time.py"
        )
    validate_config, run_spec, run_spec_json = (found[name] for name in NAMES)
with open(sys.argv[1]) as handle:
    config = validate_config(yaml.safe_load(handle))
spec = run_spec(config, algorithm=sys.argv[2], domain=sys.argv[3], seed=0)
print(json.dumps({"module": evocamp.__file__, "spec": run_spec_json(spec)}))
"""


@dataclass
class Sample:
    wall: float
    own: float | None
    cpu: float


@dataclass
class Repo:
    label: str
    path: Path
    work: Path
    runtime: Path  # private XDG_RUNTIME_DIR: this repo's warm-start servers
    cache: Path  # private EVOCAMP_STATE_CACHE
    pycache: Path  # PYTHONPYCACHEPREFIX: bytecode outside the source trees
    spec: str = ""
    samples: dict = field(default_factory=dict)  # (step, mode) -> [Sample]
    redone: int = 0  # timed warm calls that ran cold and were redone

    def env(self, mode: str) -> dict:
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("EVOCAMP_", "SLURM_"))
            and name not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
        }
        env.update(
            PYTHONPATH=str(self.path / "src"),
            PYTHONPYCACHEPREFIX=str(self.pycache),
            XDG_RUNTIME_DIR=str(self.runtime),
            EVOCAMP_STATE_CACHE=str(self.cache),
            EVOCAMP_WARM_START="0" if mode == "cold" else "1",
        )
        return env

    def run(self, argv: list[str], mode: str, *, log: str = "step.log") -> tuple[Sample, str]:
        """Run ``python -m evocamp argv`` in this repo's folder, as a Snakemake job does
        (stderr to a log file): its times and its log."""
        log_path = self.work / log
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(log_path, "w") as stderr:
            began = time.perf_counter()
            code = subprocess.run(
                [sys.executable, "-m", "evocamp", *argv],
                cwd=self.work,
                env=self.env(mode),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            ).returncode
            wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        text = log_path.read_text()
        if code != 0:
            raise RuntimeError(
                f"{self.label}: `python -m evocamp {' '.join(argv[:1])} ...` ({mode}) failed "
                f"with status {code}; end of its log:\n{text[-3000:]}"
            )
        own = OWN_TIME.search(text)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return Sample(wall, float(own.group(2)) if own else None, cpu), text


def ran_warm(log: str) -> bool:
    return log.rstrip().endswith("warm start]")


def prepare(repo: Repo) -> None:
    """Campaign config, run spec, generation-0 state and generation 1's shard files."""
    write_config(repo.work, CAMPAIGN)
    out = subprocess.run(
        [sys.executable, "-c", SPEC_SNIPPET, "config.yaml", "cmame", "sphere"],
        cwd=repo.work,
        env=repo.env("cold"),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{repo.label}: no run spec from {repo.path}:\n{out.stderr[-3000:]}")
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    module = Path(answer["module"]).resolve()
    if not module.is_relative_to((repo.path / "src").resolve()):
        raise RuntimeError(f"{repo.label}: evocamp came from {module}, not {repo.path}/src")
    repo.spec = answer["spec"]
    repo.run(["init", "--spec", repo.spec, "--output", "state0.h5"], "cold", log="prepare.log")
    for shard, name in enumerate(SHARD_FILES):
        repo.run(
            ["evaluate", "--state", "state0.h5", "--shard", str(shard), "--shards", str(SHARDS),
             "--output", name],
            "cold",
            log="prepare.log",
        )  # fmt: skip


def warm_up(repo: Repo, step: str, mode: str) -> None:
    """One untimed call; in warm mode, calls until one runs warm (the first one finds no
    server, starts one and runs cold)."""
    deadline = time.monotonic() + WARM_UP_SECONDS
    while True:
        _, log = repo.run(STEPS[step], mode, log="warm_up.log")
        if mode == "cold" or ran_warm(log):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{repo.label}: {step} still runs cold after {WARM_UP_SECONDS:.0f} s of "
                f"warming up (warm start off or failing? socket path too long? runtime "
                f"folder {repo.runtime}); end of its log:\n{log[-2000:]}"
            )
        time.sleep(1.0)


def timed(repo: Repo, step: str, mode: str) -> Sample:
    """One timed call; a warm call that ran cold (server gone, code changed) is redone."""
    for _ in range(WARM_RETRIES + 1):
        sample, log = repo.run(STEPS[step], mode)
        if mode == "cold":
            if ran_warm(log):
                raise RuntimeError(f"{repo.label}: a cold {step} ran warm:\n{log[-2000:]}")
            return sample
        if ran_warm(log):
            return sample
        repo.redone += 1
        print(f"{repo.label}: a timed warm {step} ran cold; warming up again", file=sys.stderr)
        warm_up(repo, step, mode)
    raise RuntimeError(f"{repo.label}: timed warm {step} keeps running cold:\n{log[-2000:]}")


def servers_of(repo: Repo) -> list[int]:
    """Processes started with this repo's private XDG_RUNTIME_DIR: its warm-start servers
    (our own steps have ended by then)."""
    mark = f"XDG_RUNTIME_DIR={repo.runtime}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return found


def stop_servers(repo: Repo, *, wait: float = 15.0) -> None:
    """``python -m evocamp.warmstart stop`` for this repo, then wait until its servers
    have exited (shutting down a process that imported pyribs takes a moment), so
    nothing of this benchmark runs on after it; a server that will not go gets SIGTERM
    by its process id."""
    out = subprocess.run(
        [sys.executable, "-m", "evocamp.warmstart", "stop"],
        cwd=repo.work,
        env=repo.env("warm"),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        print(f"{repo.label}: `evocamp.warmstart stop` failed: {out.stderr.strip()[-500:]}",
              file=sys.stderr)  # fmt: skip
    for signalled in (False, True):
        deadline = time.monotonic() + wait
        while servers_of(repo) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = servers_of(repo)
        if not left:
            return
        if signalled:
            print(f"{repo.label}: warm-start server(s) {left} still running", file=sys.stderr)
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def summary(values: list[float]) -> tuple[float, float | None]:
    """Median and interquartile range (``None`` for fewer than 2 values)."""
    if len(values) < 2:
        return statistics.median(values), None
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), quartiles[2] - quartiles[0]


def cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(repos: list[Repo], steps: list[str], modes: list[str]) -> str:
    first = repos[0]
    rows = []
    for step in steps:
        for mode in modes:
            base_wall = summary([s.wall for s in first.samples[step, mode]])[0]
            base_owns = [s.own for s in first.samples[step, mode] if s.own is not None]
            base_own = summary(base_owns)[0] if base_owns else None
            for repo in repos:
                samples = repo.samples[step, mode]
                wall, wall_iqr = summary([s.wall for s in samples])
                owns = [s.own for s in samples if s.own is not None]
                own, own_iqr = summary(owns) if owns else (None, None)
                cpu = summary([s.cpu for s in samples])[0]
                rows.append(
                    [
                        step,
                        mode,
                        repo.label,
                        len(samples),
                        cell(wall),
                        cell(wall_iqr),
                        f"{wall / base_wall:.3f}",
                        cell(own),
                        cell(own_iqr),
                        "-" if own is None or not base_own else f"{own / base_own:.3f}",
                        cell(cpu),
                    ]
                )
    return table(
        [
            "step",
            "mode",
            "repo",
            "n",
            "wall s (median)",
            "wall IQR",
            f"wall ratio to {first.label}",
            "own s (median)",
            "own IQR",
            f"own ratio to {first.label}",
            "client CPU s (median)",
        ],
        rows,
    )


def labels_of(paths: list[Path]) -> list[str]:
    """Short names of the repos: their folder names, numbered when they repeat."""
    names = [path.name or str(path) for path in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{number}:{name}" for number, name in enumerate(names, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, nargs="+", required=True, help="source trees")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--workdir", type=Path, default=None, help="keep the run folders here")
    args = parser.parse_args()
    paths = [path.resolve() for path in args.repos]
    for path in paths:
        if not (path / "src" / "evocamp").is_dir():
            parser.error(f"{path} has no src/evocamp")
    began = time.perf_counter()
    # Short private folders: a warm server's socket path must stay under ~100 characters;
    # the state cache lives in memory, as in the pipeline.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    private = []
    with scratch_folder("evocamp-step-time-", keep=args.workdir) as root:
        repos = []
        try:
            for number, (path, label) in enumerate(zip(paths, labels_of(paths), strict=True)):
                runtime = Path(tempfile.mkdtemp(prefix="evst-run-", dir="/tmp"))
                cache = Path(tempfile.mkdtemp(prefix="evst-cache-", dir=shm))
                private += [runtime, cache]
                repos.append(
                    Repo(label, path, root / f"repo{number}", runtime, cache, root / "pycache")
                )
            for repo in repos:
                prepare(repo)
                for step in args.steps:
                    for mode in args.modes:
                        warm_up(repo, step, mode)
                        repo.samples[step, mode] = []
            print(f"prepared in {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
            for repeat in range(args.repeats):
                started = time.perf_counter()
                order = repos if repeat % 2 == 0 else repos[::-1]
                for step in args.steps:
                    for mode in args.modes:
                        for repo in order:
                            repo.samples[step, mode].append(timed(repo, step, mode))
                print(
                    f"repeat {repeat + 1}/{args.repeats}: {time.perf_counter() - started:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            for repo in repos:
                if "warm" in args.modes:
                    stop_servers(repo)
            for folder in private:
                shutil.rmtree(folder, ignore_errors=True)
    print(f"machine: {machine()}")
    for repo in repos:
        print(f"repo {repo.label}: {repo.path}")
    print(
        f"steps of CMA-ME (15 emitters x 36, 100x100 grid) on the 100-d sphere, {SHARDS} "
        f"shards, generation 1 of {TOTAL}; {args.repeats} repeats, repos interleaved; "
        f"{time.perf_counter() - began:.0f} s in all"
    )
    if len({repo.spec for repo in repos}) > 1:
        print("NOTE: the repos' run specs differ, so their steps do not do the same work")
    redone = sum(repo.redone for repo in repos)
    if redone:
        print(f"NOTE: {redone} timed warm call(s) ran cold and were redone")
    print()
    print(report(repos, args.steps, args.modes))


if __name__ == "__main__":
    main()
