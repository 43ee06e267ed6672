"""evocamp beside DeepHyper's CBO and Optuna's TPE on the ``mlp_digits`` tuning task,
side by side: for every seed, every system in turn (or all at once), so that all share
the machine's load.

    python benchmarks/hpo_peers.py --deephyper-python /opt/dhenv/bin/python \
        [--seeds 0 1 2 3 4] [--evaluations 60] [--workers 4] \
        [--algorithms qucb_decentralised] [--clocks virtual] [--search C G] \
        [--cost-cooling double|budget|none|N] \
        [--systems evocamp deephyper_cbo optuna_tpe] [--repeat-check N] [--epochs E] \
        [--together] [--results FILE] [--figure PATH] [--workdir FOLDER]
    python benchmarks/hpo_peers.py --deephyper-python ... --report FILE... [--again FILE]
    python benchmarks/hpo_peers.py --deephyper-python ... --panel TITLE FILE... [--panel ...]
    python benchmarks/hpo_peers.py --deephyper-python ... --work-correlation COUNT EPOCHS SEED

For seed 0, then seed 1, ...: evocamp (``config/hpo.yaml``'s ``--algorithms`` in
asynchronous mode, ``--workers`` slots on a LocalCluster of ``--workers``, one campaign
of that seed per algorithm and clock of ``--clocks``; ``qucb_decentralised_cost`` and
``qucb_centralised_cost``, when the file has no such entry, are its plain qUCB with
``cost: work``; ``cost_cooling`` after ``--cost-cooling``),
DeepHyper's CBO (``bo_deephyper.py search --task hpo``:
``CBO(surrogate_model="ET", acq_func="UCBd", multi_point_strategy="qUCBd")`` with its
process evaluator of ``--workers``), then Optuna's TPE in its own
ask-and-tell loop over a process pool of ``--workers`` (:func:`optuna_tpe`). Every
system trains with evocamp's own ``mlp_digits`` at ``config/hpo.yaml``'s
``params.epochs`` (or ``--epochs``), the same budget, the same workers and 10 random initial points.
With ``--together`` a seed's systems run at the same time (each with its own
``--workers``), so that they share exactly the same load. With ``--repeat-check N``
seed 0 of every system runs again at the end, N trainings, and is compared value for
value in evaluation order with its first run's first N. ``--report`` gathers the
``--results`` files of several processes (seeds run at once) into one report, and
``--again`` compares a run of seed 0 made by another process with the first.

Prints (and ``--results`` keeps, so a report can be redrawn with ``--report``)
per system: best validation accuracy at half the budget and at the budget, at equal
wall time (the shortest of the systems' median search wall times), the test accuracy
of the best configuration, search wall seconds and the whole command's, utilisation
(training seconds / (search wall seconds x workers)), training seconds per run,
proposal latency (evocamp's), mean and 95% bootstrap CI over seeds; writes the figure
(best validation accuracy against trainings and against wall seconds, bands).

``deephyper==0.13.2`` is not a dependency of evocamp: install it into its own
environment (``python -m venv --system-site-packages /opt/dhenv && /opt/dhenv/bin/pip
install deephyper==0.13.2``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import yaml
from common import (
    REPO,
    best_at,
    best_at_time,
    curves_figure,
    interval,
    known_interval,
    machine,
    scratch_folder,
    snakemake,
    store_runs,
    stored_runs,
    table,
    write_config,
)

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)

DOMAIN = "mlp_digits"
TITLE = "mlp_digits (MLPClassifier on digits)"
VALUE = "best validation accuracy"
INITIAL_POINTS = 10
SYSTEMS = ("evocamp", "deephyper_cbo", "optuna_tpe")
#: The cost-aware variants (``cost``: ``mlp_digits``' deterministic training ``work``,
#: its exponent cooled from 1 to 0 over the trainings after the initial design), made
#: from ``config/hpo.yaml``'s plain ones when the file has none of that name.
COST_AWARE = {
    "qucb_decentralised_cost": "qucb_decentralised",
    "qucb_centralised_cost": "qucb_centralised",
}
VARIANTS = ("qucb_decentralised", "qucb_centralised", "random_search", *COST_AWARE)


def hpo_config() -> dict:
    """``config/hpo.yaml`` as a dict."""
    return yaml.safe_load((REPO / "config" / "hpo.yaml").read_text())


def epochs_of(config: dict) -> int:
    """The training epochs of the campaign file's ``mlp_digits``: what every system trains."""
    return int(config["domains"][DOMAIN]["params"]["epochs"])


def with_variant(config: dict, name: str, *, evaluations: int, cooling: str = "double") -> dict:
    """The algorithm entry ``name`` of a campaign file, a cost-aware variant made from
    its plain one when the file has none (:data:`COST_AWARE`); a cost-aware entry's
    exponent cooled from 1 to 0.5 over this budget's trainings after the initial design
    (``cooling`` ``double``, as ``config/hpo.yaml``'s), to 0 (``budget``: EI-cool), over
    ``N`` trainings, or not cooled (``none``: 1 throughout)."""
    if name not in COST_AWARE:
        return config["algorithms"][name]
    entry = {**config["algorithms"].get(name, config["algorithms"][COST_AWARE[name]])}
    entry.pop("cost_cooling", None)
    if cooling in ("budget", "double"):
        entry["cost_cooling"] = (evaluations - INITIAL_POINTS) * (2 if cooling == "double" else 1)
    elif cooling != "none":
        entry["cost_cooling"] = int(cooling)
    return {**entry, "cost": "work"}


def evocamp_runs(
    args, seed: int, workdir: Path, *, clock: str, epochs: int, evaluations: int, algorithm: str
) -> dict[str, dict]:
    """One campaign of ``config/hpo.yaml`` for ``seed`` (``algorithm``, asynchronous
    mode with ``clock``, ``--workers`` slots and workers, ``evaluations`` trainings of
    ``epochs``): its runs by name (``<algorithm> [<clock> clock]``). Every algorithm runs
    as a campaign of its own, so that each has ``--workers`` workers, as the peers."""
    config = hpo_config()
    config["campaign"] = f"hpo_{clock}"
    config["mode"] = "async"
    config["async"] = {**config.get("async", {}), "slots": args.workers, "clock": clock}
    config["seeds"] = [seed]
    entry = with_variant(config, algorithm, evaluations=evaluations, cooling=args.cost_cooling)
    config["algorithms"] = {algorithm: entry}
    if args.search:  # the acquisition search's candidates and genetic generations
        candidates, generations = args.search
        config["algorithms"][algorithm].update(
            candidates=candidates, refine_generations=generations
        )
    config["generations"] = evaluations // config["algorithms"][algorithm]["batch_size"]
    config["checkpoint_every"] = config["generations"]
    config["dask"]["workers"] = args.workers
    domain = config["domains"][DOMAIN]
    domain["params"]["epochs"] = epochs
    if "cost" in config["algorithms"][algorithm]:  # (the entry's fields and the cost's)
        domain["extra_fields"] = ["validation_loss", "test_accuracy", "work"]
    write_config(workdir, config)
    began = time.time()
    subprocess.run(
        snakemake(workdir, "runs", cores=args.cores, snakefile=REPO / "Snakefile"),
        check=True,
        capture_output=True,
    )
    command = time.time() - began
    runs = {}
    campaign = workdir / "results" / config["campaign"]
    for name, run in read_runs(args, campaign, seed, algorithms=[algorithm]).items():
        search = "" if not args.search else ", search {} x {}".format(*args.search)
        if "cost" in entry:
            search += f", cost_cooling {entry.get('cost_cooling', 'none')}"
        runs[f"{name} [{clock} clock{search}]"] = {**run, "command_seconds": command}
    return runs


def read_runs(args, campaign: Path, seed: int, *, algorithms: list[str]) -> dict[str, dict]:
    """The runs of seed ``seed`` of a finished campaign, by algorithm: the best value
    after each generation, the cumulative wall time, utilisation, latency, the values
    in evaluation order and the test accuracy of the best configuration."""
    from evocamp.model.metrics import read_metrics_csv
    from evocamp.results import load_evaluations

    evaluations = load_evaluations(campaign)
    runs = {}
    for variant in algorithms:
        rows = read_metrics_csv(campaign / variant / DOMAIN / f"seed{seed}" / "metrics.csv")[1:]
        wall = np.cumsum(rows["wall_seconds"])
        latency = np.nan_to_num(rows["fit_seconds"]) + np.nan_to_num(rows["propose_seconds"])
        own = evaluations[
            (evaluations.algorithm == variant) & (evaluations.seed == seed)
        ].sort_values(["generation", "index"])
        log = campaign / variant / DOMAIN / f"seed{seed}" / "completions.jsonl"
        runs[variant] = {
            "seed": seed,
            "training_seconds": [
                json.loads(line)["eval_seconds"] for line in log.read_text().splitlines()
            ],
            "evaluations": rows["evaluations"],
            "best": rows["best_objective"],
            "times": wall,
            "wall_seconds": float(wall[-1]),
            "utilisation": float(rows["eval_seconds"].sum() / (wall[-1] * args.workers)),
            "latency": float(latency.mean()),
            "evaluated": own.objective.tolist(),
            "test_accuracy": float(
                own.test_accuracy.iloc[int(np.argmax(own.objective.to_numpy()))]
            ),
        }
    return runs


def deephyper_run(args, seed: int, *, epochs: int, evaluations: int) -> dict:
    """DeepHyper's CBO in its own process (``bo_deephyper.py search --task hpo``)."""
    began = time.time()
    out = subprocess.run(
        [
            args.deephyper_python,
            str(REPO / "benchmarks" / "bo_deephyper.py"),
            "search",
            "--task=hpo",
            f"--evaluations={evaluations}",
            f"--seed={seed}",
            f"--workers={args.workers}",
            f"--epochs={epochs}",
            f"--initial-points={INITIAL_POINTS}",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()[-1]
    return peer_run({**json.loads(out), "command_seconds": time.time() - began})


def optuna_tpe(args, seed: int, *, epochs: int, evaluations: int) -> dict:
    """Optuna's TPE on ``mlp_digits`` in Optuna's own ask-and-tell loop: ``--workers``
    trainings at once in a process pool, a finished one told at once and its worker
    given the next trial (``TPESampler(seed=seed, n_startup_trials=10)``, otherwise
    Optuna's defaults; the ordinal ``batch_size`` as a categorical, Optuna having no
    ordinal kind; ``momentum`` suggested only with the ``sgd`` solver)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    import optuna
    from bo_deephyper import train

    from evocamp.tasks.training import MLP_DIGITS_SPACE

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=INITIAL_POINTS),
    )
    finished, evaluated, asked = [], {}, 0
    began = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        running = {}

        def submit():
            nonlocal asked
            asked += 1
            trial = study.ask()
            configuration = suggested(trial, MLP_DIGITS_SPACE)
            future = pool.submit(train, configuration, seed=seed, index=trial.number, epochs=epochs)
            running[future] = trial

        for _ in range(min(args.workers, evaluations)):
            submit()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                trial = running.pop(future)
                out = future.result()
                study.tell(trial, out["objective"])
                finished.append(out)
                evaluated[trial.number] = out["objective"]
                if asked < evaluations:
                    submit()
    wall = time.time() - began
    return peer_run(
        {
            "seed": seed,
            "wall_seconds": wall,
            "command_seconds": wall,
            "utilisation": sum(o["ended"] - o["began"] for o in finished) / (wall * args.workers),
            "training_seconds": [o["ended"] - o["began"] for o in finished],
            "times": [o["ended"] - began for o in finished],
            "values": [o["objective"] for o in finished],
            "test_accuracy": [o["test_accuracy"] for o in finished],
            "evaluated": [evaluated[number] for number in sorted(evaluated)],
        }
    )


def suggested(trial, space: dict) -> dict:
    """A configuration of ``space`` suggested by an Optuna trial, a conditional parameter
    only where its condition holds (parents come before their children in ``space``)."""
    values = {}
    for name, p in space.items():
        if any(
            values.get(parent) not in allowed for parent, allowed in p.get("condition", {}).items()
        ):
            continue
        if p["type"] == "real":
            values[name] = trial.suggest_float(name, p["low"], p["high"], log=p.get("log", False))
        elif p["type"] == "integer":
            values[name] = trial.suggest_int(name, p["low"], p["high"], log=p.get("log", False))
        else:
            values[name] = trial.suggest_categorical(name, p["choices"])
    return values


def peer_run(run: dict) -> dict:
    """A peer's record as a run of the report: the best value after each training (in
    completion order), its time, the test accuracy of the best configuration."""
    values = np.asarray(run["values"])
    return {
        "seed": run["seed"],
        "training_seconds": run["training_seconds"],
        "evaluations": np.arange(1, len(values) + 1),
        "best": np.maximum.accumulate(values),
        "times": np.asarray(run["times"]),
        "wall_seconds": run["wall_seconds"],
        "command_seconds": run["command_seconds"],
        "utilisation": run["utilisation"],
        "latency": np.nan,
        "evaluated": run["evaluated"],
        "test_accuracy": float(run["test_accuracy"][int(np.argmax(values))]),
    }


def one_seed(args, seed: int, folder: Path, *, epochs: int, evaluations: int) -> dict[str, dict]:
    """Every system's run of ``seed``, by name: one after the other, or with
    ``--together`` all at the same time (each its own ``--workers``)."""

    def ours(clock: str, algorithm: str) -> dict[str, dict]:
        workdir = folder / f"seed{seed}_{clock}_{algorithm}"
        return evocamp_runs(
            args,
            seed,
            workdir,
            clock=clock,
            epochs=epochs,
            evaluations=evaluations,
            algorithm=algorithm,
        )

    def peer(system: str) -> dict[str, dict]:
        run = deephyper_run if system == "deephyper_cbo" else optuna_tpe
        return {system: run(args, seed, epochs=epochs, evaluations=evaluations)}

    clocks = args.clocks if "evocamp" in args.systems else []
    jobs = [
        (f"evocamp {algorithm} [{clock} clock]", lambda c=clock, a=algorithm: ours(c, a))
        for clock in clocks
        for algorithm in args.algorithms
    ]
    jobs += [(name, lambda name=name: peer(name)) for name in args.systems if name != "evocamp"]
    runs = {}

    def done(name: str, made: dict) -> None:
        runs.update(made)
        print(f"{time.strftime('%H:%M:%S')} seed {seed}: {name} done", flush=True)

    if args.together:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(jobs)) as pool:
            futures = {name: pool.submit(job) for name, job in jobs}
            for name, future in futures.items():
                done(name, future.result())
    else:
        for name, job in jobs:
            done(name, job())
    return runs


def equal_time(systems: dict[str, list[dict]]) -> float:
    """The wall seconds every system is compared at: the shortest of the systems'
    median wall times (by then most runs of every system have finished)."""
    return min(float(np.median([r["wall_seconds"] for r in runs])) for runs in systems.values())


def report(systems: dict[str, list[dict]], *, budget: int) -> str:
    """The Markdown table of the comparison (see the module's docstring)."""
    seconds = equal_time(systems)
    rows = []
    for name, runs in systems.items():
        latency = [r["latency"] for r in runs]
        row = [
            name,
            len(runs),
            interval([best_at(r, budget // 2) for r in runs]),
            interval([best_at(r, budget) for r in runs]),
            known_interval([float(best_at_time(r, np.array([seconds]))[0]) for r in runs]),
            interval([r["test_accuracy"] for r in runs]),
            interval([r["wall_seconds"] for r in runs]),
            interval([r["command_seconds"] for r in runs]),
            interval([r["utilisation"] for r in runs]),
            interval([float(np.sum(r["training_seconds"])) for r in runs]),
            spread(np.concatenate([r["training_seconds"] for r in runs])),
            interval(latency) if np.isfinite(latency[0]) else "-",
        ]
        if any("same_again" in r for r in runs):
            row.append(next((r["same_again"] for r in runs if "same_again" in r), "-"))
        rows.append(row)
    header = [
        "system",
        "seeds",
        f"{VALUE} at {budget // 2}",
        f"at {budget}",
        f"at {seconds:.0f} s",
        "test accuracy of the best",
        "search wall s",
        "command wall s",
        "utilisation",
        "training s per run",
        "training s: median (10th-90th percentile, max)",
        "proposal latency s",
    ]
    if any(len(row) > len(header) for row in rows):
        header.append("seed 0 again: same evaluations")
    return f"### {TITLE} ({budget} trainings)\n\n" + table(header, rows)


def spread(seconds: np.ndarray) -> str:
    """The median, 10th and 90th percentiles and maximum of training times."""
    low, median, high = np.percentile(seconds, [10, 50, 90])
    return f"{median:.2g} ({low:.2g}-{high:.2g}, {seconds.max():.2g})"


def same_again(first: dict, again: dict) -> str:
    """Whether a repeated run (of as many or fewer trainings) evaluated the same values
    in the same order as the first run's first trainings: ``yes (n)``, or ``no`` and
    how many leading values it repeated."""
    a, b = first["evaluated"][: len(again["evaluated"])], again["evaluated"]
    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(b))
    return f"yes ({len(b)} of {len(b)})" if same == len(b) else f"no: {same} of {len(b)}"


def work_correlation(count: int, *, epochs: int, seed: int) -> str:
    """Spearman's correlation of ``mlp_digits``' ``work`` (its deterministic cost) with
    the measured seconds of ``count`` random configurations of its space, each trained
    alone in this process (the data loaded and scikit-learn imported first)."""
    from scipy.stats import spearmanr

    from evocamp.config.run_specs import read_space
    from evocamp.model.space import Space
    from evocamp.tasks.training import MLP_DIGITS_SPACE, mlp_digits

    space = Space(read_space(MLP_DIGITS_SPACE))
    rng = np.random.default_rng(seed)
    configurations = space.configurations(space.sample(rng, count))
    mlp_digits(configurations[:1], np.zeros(1, dtype=np.uint64), epochs=1)
    seconds, work = [], []
    for index, configuration in enumerate(configurations):
        began = time.perf_counter()
        out = mlp_digits([configuration], np.array([index], dtype=np.uint64), epochs=epochs)
        seconds.append(time.perf_counter() - began)
        work.append(float(out["work"][0]))
    rho = spearmanr(work, seconds).statistic
    return (
        f"{count} configurations (seed {seed}), {epochs} epochs: Spearman {rho:.3f}; "
        f"seconds median {np.median(seconds):.3g}, max {max(seconds):.3g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deephyper-python", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--evaluations", type=int, default=60)
    parser.add_argument(
        "--epochs", type=int, help="training epochs; default: config/hpo.yaml's params.epochs"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--algorithms", nargs="+", choices=VARIANTS, default=["qucb_decentralised"])
    parser.add_argument("--clocks", nargs="+", choices=["virtual", "real"], default=["virtual"])
    parser.add_argument("--cores", type=int, default=2, help="Snakemake's cores")
    parser.add_argument(
        "--cost-cooling",
        default="double",
        help="the cost-aware variants' exponent: cooled from 1 to 0.5 over the trainings "
        "after the initial design (double, config/hpo.yaml's), to 0 (budget: EI-cool), "
        "over N trainings, or 1 throughout (none)",
    )
    parser.add_argument(
        "--search",
        type=int,
        nargs=2,
        metavar=("CANDIDATES", "GENERATIONS"),
        help="evocamp's acquisition search: candidates and refine_generations (default: "
        "config/hpo.yaml's)",
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="run a seed's systems at the same time, not one after the other",
    )
    parser.add_argument(
        "--repeat-check",
        type=int,
        metavar="N",
        help="run seed 0 of every system again at the end, N trainings, and compare them "
        "with the first run's first N",
    )
    parser.add_argument("--figure", type=Path, default=REPO / "benchmarks/figures/hpo.png")
    parser.add_argument("--workdir", type=Path, help="keep the campaigns in this folder")
    parser.add_argument("--results", type=Path, help="JSON file the runs are kept in")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        help="run nothing: report the runs of these --results files together (runs made "
        "by several processes at once)",
    )
    parser.add_argument(
        "--work-correlation",
        type=int,
        nargs=3,
        metavar=("COUNT", "EPOCHS", "SEED"),
        help="run nothing else: Spearman's correlation of mlp_digits' work with the "
        "measured seconds of COUNT random configurations",
    )
    parser.add_argument(
        "--panel",
        nargs="+",
        action="append",
        metavar="TITLE FILE",
        help="run nothing: one table and one figure column per panel, made of these "
        "--results files (measurements made at different times, each with its peers)",
    )
    parser.add_argument(
        "--again",
        type=Path,
        help="with --report: a --results file of seed 0 run again, compared with the first",
    )
    args = parser.parse_args()
    if args.work_correlation:
        count, epochs, seed = args.work_correlation
        print(work_correlation(count, epochs=epochs, seed=seed))
        return
    if args.panel:
        panels, names = {}, []
        for title, *paths in args.panel:
            systems = panels.setdefault(title, {})
            for path in paths:
                for name, runs in stored_runs(Path(path))[DOMAIN].items():
                    systems.setdefault(name, []).extend(runs)
            print(f"{title}\n\n{report(systems, budget=args.evaluations)}\n")
            panels[title] = {name.split(" [")[0]: runs for name, runs in systems.items()}
            names += [name for name in panels[title] if name not in names]
        budgets = {title: args.evaluations for title in panels}
        curves_figure(panels, args.figure, value=VALUE, budgets=budgets, colours=names)
        print(f"figure: {args.figure}")
        return
    epochs = args.epochs or epochs_of(hpo_config())
    results = stored_runs(args.results) if args.results else {}
    systems = results.setdefault(DOMAIN, {})
    for path in args.report or []:
        for name, runs in stored_runs(path)[DOMAIN].items():
            systems.setdefault(name, []).extend(runs)
    if args.again:
        for name, runs in stored_runs(args.again)[DOMAIN].items():
            first = next(r for r in systems[name] if r["seed"] == runs[0]["seed"])
            first["same_again"] = same_again(first, runs[0])
    if not args.report:
        print(machine(), f"epochs {epochs}", flush=True)
        with scratch_folder("evocamp-hpo-", keep=args.workdir) as folder:
            for seed in args.seeds:
                runs = one_seed(args, seed, folder, epochs=epochs, evaluations=args.evaluations)
                for name, run in runs.items():
                    systems.setdefault(name, []).append(run)
                if args.results:
                    store_runs(args.results, results)
                print(report(systems, budget=args.evaluations), flush=True)
            if args.repeat_check:
                again = one_seed(
                    args, 0, folder / "again", epochs=epochs, evaluations=args.repeat_check
                )
                for name, run in again.items():
                    first = next(r for r in systems[name] if r["seed"] == 0)
                    first["same_again"] = same_again(first, run)
                if args.results:
                    store_runs(args.results, results)
    print(report(systems, budget=args.evaluations))
    curves_figure({TITLE: systems}, args.figure, value=VALUE, budgets={TITLE: args.evaluations})
    print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
