"""The BO family beside its peers: DeepHyper's CBO on Ackley 5-d and 10-d, DeepHyper's
CBO and Optuna's TPE on the ``mlp_digits`` tuning task (``--task hpo``).

    python benchmarks/bo.py --deephyper-python /opt/dhenv/bin/python \
        [--seeds 0 1 2 3 4] [--mean-seconds 0.5] [--workers 8] \
        [--modes dask async async-at-freeing] [--algorithms ...] [--figure PATH] \
        [--workdir FOLDER] [--peers]
    python benchmarks/bo.py --timing-only --deephyper-python ...
    python benchmarks/bo.py --task hpo --deephyper-python ... --workers 4 --modes async \
        [--evaluations 60] [--repeat-check]

1. Runs ``config/bo.yaml`` (decentralised qUCB, centralised qUCB, random search; 8
   workers, 8 points per generation) through Snakemake in each of ``--modes``: Dask
   mode (synchronous generations, 8 shards) and asynchronous mode (8 slots; a finished
   evaluation is told at once and its slot starts its queued proposal, made while its
   previous evaluation ran), and ``async-at-freeing`` (asynchronous mode with
   ``propose_ahead: false``: a freed slot is proposed for, as before proposals ahead),
   one campaign per domain and mode so each gets its budget (5-d: 200 evaluations,
   10-d: 400), one run at a time (``--cores 1``) so wall times are not shared;
   ``--algorithms`` keeps some of the campaign's algorithms.
2. Runs DeepHyper's CBO (ET surrogate, UCBd, qUCBd, as the issue measured it) in its own
   loop and thread evaluator with ``--workers`` workers (``bo_deephyper.py search``),
   same function, budget, initial design size and simulated evaluation times.
3. Prints, per domain: best Ackley value at the budget and at half of it, wall seconds,
   utilisation (also after generation 1, which carries the segment's start: Dask
   cluster, imports, initial design) and proposal latency (seconds a proposal takes to
   make: the surrogate fit plus the proposal, in the shard, slot or tell that makes
   it) (mean and 95% bootstrap CI over seeds); writes the figure (best value against
   evaluations and against wall time, bands).
4. Surrogate step: seconds of one fit + one proposal of 8 points at 100 / 1,000 / 5,000
   history points, evocamp's (scikit-learn ExtraTrees) and DeepHyper's (``tell`` +
   ``ask``), and whether a repeated seed repeats the proposal; and the seconds the tell
   step spends proposing as the batch grows (centralised) against decentralised shards.

``--task hpo`` runs ``config/hpo.yaml`` instead (its qUCB variants and random search on
``mlp_digits``, ``--evaluations`` each, ``--workers`` slots) beside DeepHyper's CBO
(``bo_deephyper.py search --task hpo``: its process evaluator) and Optuna's TPE in its
own ask-and-tell loop over a process pool of ``--workers`` (:func:`optuna_tpe`), every
peer training with evocamp's own function, all with 10 initial random points; it
reports the best validation accuracy at half the budget, at the budget and at the
slowest variant's median time to half the budget (equal wall time), the test accuracy
of the best configuration, wall seconds and utilisation, and with ``--repeat-check``
whether seed 0 run again evaluates the same values in the same order. Step 4 is
Ackley's only.

``deephyper==0.13.2`` is not a dependency of evocamp: install it into its own
environment (``python -m venv --system-site-packages /opt/dhenv && /opt/dhenv/bin/pip
install deephyper==0.13.2``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from common import REPO, machine, scratch_folder, snakemake, table, write_config

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)


@dataclass(frozen=True)
class Task:
    """What the comparison runs on: a campaign file, its domains' budgets and titles,
    what the best value is called and its sign (best value = ``sign`` x best
    objective), the peers beside it."""

    config: str
    budgets: dict[str, int]
    titles: dict[str, str]
    value: str
    sign: float
    peers: tuple[str, ...]


TASKS = {
    "ackley": Task(
        config="bo.yaml",
        budgets={"ackley5": 200, "ackley10": 400},
        titles={"ackley5": "Ackley 5-d", "ackley10": "Ackley 10-d"},
        value="best Ackley",
        sign=-1.0,
        peers=("deephyper_cbo",),
    ),
    "hpo": Task(
        config="hpo.yaml",
        budgets={"mlp_digits": 60},
        titles={"mlp_digits": "mlp_digits (MLPClassifier on digits)"},
        value="best validation accuracy",
        sign=1.0,
        peers=("deephyper_cbo", "optuna_tpe"),
    ),
}
DIMS = {"ackley5": 5, "ackley10": 10}
VARIANTS = ("qucb_decentralised", "qucb_centralised", "random_search")
MODES = ("dask", "async-at-freeing", "async")
INITIAL_POINTS = 10


def campaign_curves(
    args, domain: str, workdir: Path, *, mode: str, seeds=None
) -> dict[str, list[dict]]:
    """Run the campaign of one domain in ``mode``; per variant and seed, the best value
    after each generation, the cumulative wall time, utilisation and latency (and for
    a domain with a test accuracy, the values in evaluation order and the test accuracy
    of the best configuration)."""
    task = TASKS[args.task]
    seeds = list(args.seeds if seeds is None else seeds)
    config = yaml.safe_load((REPO / "config" / task.config).read_text())
    config["campaign"] = f"bench_{domain}_{mode}"
    config["mode"] = "async" if mode.startswith("async") else mode
    config["async"] = {
        **config.get("async", {}),
        "slots": args.workers,
        "propose_ahead": mode == "async",
    }
    config["seeds"] = seeds
    batch = config["algorithms"]["qucb_centralised"]["batch_size"]
    config["generations"] = budget_of(args, domain) // batch
    config["checkpoint_every"] = config["generations"]
    config["algorithms"] = {name: config["algorithms"][name] for name in args.algorithms}
    config["dask"]["workers"] = args.workers
    config["shards"] = args.workers
    config["domains"] = {domain: config["domains"][domain]}
    if "simulated_seconds" in config["domains"][domain]:
        config["domains"][domain]["simulated_seconds"]["mean"] = args.mean_seconds
    write_config(workdir, config)
    subprocess.run(
        snakemake(workdir, "runs", cores=args.cores, snakefile=REPO / "Snakefile"),
        check=True,
        capture_output=True,
    )
    return read_curves(
        args, workdir / "results" / config["campaign"], domain, mode=mode, seeds=seeds
    )


def read_curves(args, campaign: Path, domain: str, *, mode: str, seeds) -> dict[str, list[dict]]:
    """The curves of :func:`campaign_curves` of a campaign's finished runs (those with a
    ``metrics.csv``; the others are left out)."""
    from evocamp.model.metrics import read_metrics_csv
    from evocamp.results import load_evaluations

    task = TASKS[args.task]
    evaluations = load_evaluations(campaign) if args.task == "hpo" else None
    curves = {}
    for variant in args.algorithms:
        for seed in seeds:
            metrics = campaign / variant / domain / f"seed{seed}" / "metrics.csv"
            if not metrics.exists():
                continue
            rows = read_metrics_csv(metrics)[1:]
            wall = np.cumsum(rows["wall_seconds"])
            latency = np.nan_to_num(rows["fit_seconds"]) + np.nan_to_num(rows["propose_seconds"])
            run = {
                "evaluations": rows["evaluations"],
                "best": task.sign * rows["best_objective"],
                "times": wall,
                "wall_seconds": float(wall[-1]),
                "utilisation": float(rows["eval_seconds"].sum() / (wall[-1] * args.workers)),
                "steady_utilisation": float(
                    rows["eval_seconds"][1:].sum() / ((wall[-1] - wall[0]) * args.workers)
                ),
                "latency": float(latency.mean()),
            }
            if evaluations is not None:
                own = evaluations[
                    (evaluations.algorithm == variant) & (evaluations.seed == seed)
                ].sort_values(["generation", "index"])
                run["evaluated"] = own.objective.tolist()
                run["test_accuracy"] = float(
                    own.test_accuracy.iloc[int(np.argmax(own.objective.to_numpy()))]
                )
            curves.setdefault(f"{variant} [{mode}]", []).append(run)
    return curves


def peers_of(args) -> tuple[str, ...]:
    """The peers to run: ``--peers`` (none when given empty), else the task's."""
    return TASKS[args.task].peers if args.peers is None else tuple(args.peers)


def budget_of(args, domain: str) -> int:
    """The evaluations of ``domain``: its task's budget, or ``--evaluations``."""
    return args.evaluations or TASKS[args.task].budgets[domain]


def deephyper_run(args, domain: str, seed: int) -> dict:
    """DeepHyper's CBO in its own process (``bo_deephyper.py search``): its JSON line."""
    task = ["--task=hpo"] if args.task == "hpo" else [f"--dim={DIMS[domain]}"]
    out = subprocess.run(
        [
            args.deephyper_python,
            str(REPO / "benchmarks" / "bo_deephyper.py"),
            "search",
            *task,
            f"--evaluations={budget_of(args, domain)}",
            f"--seed={seed}",
            f"--workers={args.workers}",
            f"--mean-seconds={args.mean_seconds}",
            f"--initial-points={INITIAL_POINTS}",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()[-1]
    return json.loads(out)


def optuna_tpe(args, seed: int) -> dict:
    """Optuna's TPE on ``mlp_digits`` in Optuna's own ask-and-tell loop: ``--workers``
    trainings at once in a process pool, a finished one told at once and its worker
    given the next trial (``TPESampler(seed=seed, n_startup_trials=10)``, otherwise
    Optuna's defaults; the ordinal ``batch_size`` as a categorical, Optuna having no
    ordinal kind; ``momentum`` suggested only with the ``sgd`` solver)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    import optuna
    from bo_deephyper import train

    from evocamp.tasks.training import MLP_DIGITS_EPOCHS, MLP_DIGITS_SPACE

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    budget = budget_of(args, "mlp_digits")
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
            running[
                pool.submit(
                    train, configuration, seed=seed, index=trial.number, epochs=MLP_DIGITS_EPOCHS
                )
            ] = trial

        for _ in range(min(args.workers, budget)):
            submit()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                trial = running.pop(future)
                out = future.result()
                study.tell(trial, out["objective"])
                finished.append(out)
                evaluated[trial.number] = out["objective"]
                if asked < budget:
                    submit()
    wall = time.time() - began
    return {
        "seed": seed,
        "wall_seconds": wall,
        "utilisation": sum(o["ended"] - o["began"] for o in finished) / (wall * args.workers),
        "times": [o["ended"] - began for o in finished],
        "values": [o["objective"] for o in finished],
        "test_accuracy": [o["test_accuracy"] for o in finished],
        "evaluated": [evaluated[number] for number in sorted(evaluated)],
    }


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


def peer_run(run: dict, task: Task) -> dict:
    """A peer's JSON record as a run of the report: the best value after each
    evaluation (in completion order), its time, and for ``hpo`` the test accuracy of
    the best configuration."""
    if "values" in run:
        values = np.asarray(run["values"])
        best = np.maximum.accumulate(values)
        extra = {
            "test_accuracy": float(run["test_accuracy"][int(np.argmax(values))]),
            "evaluated": run.get("evaluated"),
        }
    else:
        best, extra = np.asarray(run["best"]), {}
    return {
        "evaluations": np.arange(1, len(best) + 1),
        "best": best,
        "times": np.asarray(run["times"]),
        "wall_seconds": run["wall_seconds"],
        "utilisation": run["utilisation"],
        "steady_utilisation": np.nan,
        "latency": np.nan,
        **extra,
    }


def peer_curves(args, domain: str, peer: str, seeds=None) -> list[dict]:
    """The runs of ``peer`` (``deephyper_cbo``, ``optuna_tpe``) on ``domain``, one per seed."""
    task = TASKS[args.task]
    runs = []
    for seed in args.seeds if seeds is None else seeds:
        if peer == "deephyper_cbo":
            runs.append(peer_run(deephyper_run(args, domain, seed), task))
        else:
            runs.append(peer_run(optuna_tpe(args, seed), task))
    return runs


def best_at(run: dict, evaluations: int) -> float:
    """Best value once ``evaluations`` evaluations are done."""
    index = np.searchsorted(run["evaluations"], evaluations)
    return float(run["best"][min(index, len(run["best"]) - 1)])


def best_at_time(run: dict, seconds: np.ndarray) -> np.ndarray:
    """Best value known at each of ``seconds`` (NaN before the first result)."""
    from evocamp.reporting.comparison import value_known_at

    return value_known_at(run["times"], run["best"], seconds)


def interval(values) -> str:
    from evocamp.reporting.comparison import bootstrap_mean_ci

    mean, low, high = bootstrap_mean_ci(
        np.asarray(values), samples=2000, rng=np.random.default_rng(0)
    )
    return f"{float(mean):.3g} [{float(low):.3g}, {float(high):.3g}]"


def optional_interval(values) -> str:
    """:func:`interval`, or ``-`` where the peer does not report the value."""
    return interval(values) if np.isfinite(values[0]) else "-"


def known_interval(values) -> str:
    """:func:`interval` of the runs that had a value (a run with no result yet has
    NaN), saying how many had one when some had none."""
    values = np.asarray(values)
    known = values[np.isfinite(values)]
    if len(known) == 0:
        return "no result yet"
    text = interval(known)
    return text if len(known) == len(values) else f"{text} ({len(known)} of {len(values)} runs)"


def equal_time(variants: dict[str, list[dict]]) -> float:
    """The wall seconds every variant is compared at: the shortest of the variants'
    median wall times (by then most runs of every variant have finished)."""
    return min(float(np.median([r["wall_seconds"] for r in runs])) for runs in variants.values())


def report(results: dict[str, dict[str, list[dict]]], task: Task, *, budgets) -> str:
    """One Markdown table per domain: best value at half the budget, at the budget and
    (``hpo``) at equal wall time, the test accuracy of the best configuration, wall
    seconds, utilisation, latency, and whether a repeated seed repeated the run."""
    lines = []
    for domain, variants in results.items():
        budget = budgets[domain]
        seconds = equal_time(variants)
        hpo = any("test_accuracy" in runs[0] for runs in variants.values())
        repeats = any("same_again" in r for runs in variants.values() for r in runs)
        rows = []
        for name, runs in variants.items():
            row = [
                name,
                len(runs),
                interval([best_at(r, budget // 2) for r in runs]),
                interval([best_at(r, budget) for r in runs]),
            ]
            if hpo:
                row += [
                    known_interval([float(best_at_time(r, np.array([seconds]))[0]) for r in runs]),
                    interval([r["test_accuracy"] for r in runs]),
                ]
            row += [
                interval([r["wall_seconds"] for r in runs]),
                interval([r["utilisation"] for r in runs]),
                optional_interval([r["steady_utilisation"] for r in runs]),
                optional_interval([r["latency"] for r in runs]),
            ]
            if repeats:
                row.append(next((r["same_again"] for r in runs if "same_again" in r), "-"))
            rows.append(row)
        header = ["variant", "seeds", f"{task.value} at {budget // 2}", f"at {budget}"]
        if hpo:
            header += [f"at {seconds:.0f} s", "test accuracy of the best"]
        header += [
            "wall s",
            "utilisation",
            "utilisation after generation 1",
            "proposal latency s",
        ]
        if repeats:
            header.append("seed 0 again: same evaluations")
        lines.append(f"### {task.titles[domain]} ({budget} evaluations)\n")
        lines.append(table(header, rows))
        lines.append("")
    return "\n".join(lines)


def figure(results: dict, path: Path, task: Task, *, budgets) -> None:
    from evocamp.reporting.comparison import bootstrap_mean_ci
    from evocamp.reporting.plotting import PALETTE, pyplot

    plt = pyplot()
    fig, axes = plt.subplots(2, len(results), squeeze=False, figsize=(8.0, 5.6))
    rng = np.random.default_rng(0)
    for column, (domain, variants) in enumerate(results.items()):
        budget = budgets[domain]
        horizon = max(r["times"][-1] for runs in variants.values() for r in runs)
        grid_t = np.linspace(0, horizon, 200)
        grid_e = np.arange(1, budget + 1)
        for colour, (name, runs) in enumerate(variants.items()):
            style = {"color": PALETTE[colour % len(PALETTE)]}
            for row, (grid, curve) in enumerate(
                ((grid_e, lambda r, g: [best_at(r, e) for e in g]), (grid_t, best_at_time))
            ):
                values = np.array([curve(r, grid) for r in runs], dtype=np.float64)
                keep = np.isfinite(values).all(axis=0)
                mean, low, high = bootstrap_mean_ci(values[:, keep], samples=1000, rng=rng)
                ax = axes[row, column]
                ax.plot(grid[keep], mean, label=name, **style)
                ax.fill_between(grid[keep], low, high, alpha=0.2, linewidth=0, **style)
        axes[0, column].set_title(task.titles[domain])
        axes[0, column].set_xlabel("evaluations")
        axes[1, column].set_xlabel("wall seconds")
        for row in (0, 1):
            axes[row, column].set_ylabel(f"{task.value}")
    axes[0, 0].legend(frameon=False, fontsize=6)
    fig.tight_layout()
    fig.savefig(path)


def repeated(args, domain: str, folder: Path, variants: dict[str, list[dict]]) -> None:
    """Seed 0 of every variant run now run again: its run records ``same_again``,
    ``yes`` where it evaluated the same values in the same order (evaluation-id order)
    as the first time."""
    again = {}
    for mode in args.modes:
        again.update(
            campaign_curves(args, domain, folder / domain / f"{mode}_again", mode=mode, seeds=[0])
        )
    for peer in peers_of(args):
        again[peer] = peer_curves(args, domain, peer, seeds=[0])
    for name, runs in again.items():
        first = variants[name][args.seeds.index(0)]
        first["same_again"] = "yes" if runs[0]["evaluated"] == first["evaluated"] else "no"


def bo_defaults() -> dict:
    """The defaults of the BO family's settings (batch size, kappa, initial points,
    candidates, trees, refine generations), as the catalogue fills them in."""
    from evocamp.catalogue.algorithms import ALGORITHMS

    return dict(ALGORITHMS["qucb_decentralised"].defaults)


def our_step_seconds(dim: int, history: int, *, batch: int, trees: int) -> tuple[float, bool]:
    """One fit + proposal of ``batch`` points by evocamp's qUCB, and whether a second
    call with the same seed proposes the same points."""
    from evocamp.families.bo import exploration_weights, propose
    from evocamp.tasks.functions import ackley_value

    defaults = bo_defaults()
    rng = np.random.default_rng(0)
    x = rng.uniform(-32.768, 32.768, (history, dim))
    y = -ackley_value(x)
    made = []
    for _ in range(2):
        began = time.perf_counter()
        points, _, _ = propose(
            x,
            y,
            kappas=exploration_weights(1, kappa=1.96, worker=0, count=batch),
            bounds=(-32.768, 32.768),
            candidates=defaults["candidates"],
            trees=trees,
            initial_points=10,
            refine_generations=defaults["refine_generations"],
            rng=np.random.default_rng(1),
        )
        seconds = time.perf_counter() - began
        made.append(points)
    return seconds, bool(np.array_equal(made[0], made[1]))


def append_seconds(dim: int, history: int, batch: int) -> float:
    """What a decentralised tell does with a generation: append it to the history."""
    from evocamp.families.bo import DecentralisedQUCB

    settings = {**bo_defaults(), "batch_size": batch}
    optimizer = DecentralisedQUCB(
        solution_dim=dim, x0=None, bounds=(-32.768, 32.768), seed=0, shards=8, **settings
    )
    optimizer.tell(np.zeros(history), None, solutions=np.zeros((history, dim)))
    began = time.perf_counter()
    optimizer.tell(np.zeros(batch), None, solutions=np.zeros((batch, dim)))
    optimizer.ask()
    return time.perf_counter() - began


def timing_report(args) -> str:
    rows = []
    for dim in (5, 10):
        peer = subprocess.run(
            [
                args.deephyper_python,
                str(REPO / "benchmarks" / "bo_deephyper.py"),
                "timing",
                f"--dim={dim}",
                "--history",
                "100",
                "1000",
                "5000",
                "--batch=8",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()
        peer = {row["history"]: row for row in map(json.loads, peer)}
        for history in (100, 1000, 5000):
            ours = [our_step_seconds(dim, history, batch=8, trees=t) for t in (10, 25)]
            rows.append(
                [
                    dim,
                    history,
                    f"{ours[0][0]:.3f}",
                    f"{ours[1][0]:.3f}",
                    "yes" if ours[0][1] and ours[1][1] else "no",
                    f"{peer[history]['seconds']:.3f}",
                    "yes" if peer[history]["deterministic"] else "no",
                ]
            )
    first = table(
        [
            "d",
            "history",
            "evocamp 10 trees s",
            "evocamp 25 trees s",
            "repeatable",
            "DeepHyper CBO s",
            "repeatable",
        ],
        rows,
    )
    rows = []
    for batch in (8, 64, 512):
        centralised, _ = our_step_seconds(10, 1000, batch=batch, trees=25)
        shard, _ = our_step_seconds(10, 1000, batch=max(1, batch // 8), trees=25)
        rows.append(
            [batch, f"{centralised:.3f}", f"{append_seconds(10, 1000, batch):.5f}", f"{shard:.3f}"]
        )
    second = table(
        [
            "batch (8 shards)",
            "centralised tell: fit + propose the batch, s",
            "decentralised tell: append, s",
            "decentralised shard: fit + propose its 1/8, s",
        ],
        rows,
    )
    return first + "\n\n" + second


def stored_runs(path: Path) -> dict:
    """The runs a ``--results`` file holds (none when it does not exist yet)."""
    if not path.exists():
        return {}
    stored = json.loads(path.read_text())
    return {
        domain: {
            name: [
                {
                    key: np.asarray(v) if isinstance(v, list) and key != "evaluated" else v
                    for key, v in run.items()
                }
                for run in runs
            ]
            for name, runs in variants.items()
        }
        for domain, variants in stored.items()
    }


def store_runs(path: Path, results: dict) -> None:
    """Write every run to the ``--results`` file (arrays as lists)."""

    def plain(value):
        if isinstance(value, np.ndarray):
            return value.tolist()
        return float(value) if isinstance(value, np.floating) else value

    path.write_text(
        json.dumps(
            {
                domain: {
                    name: [{key: plain(v) for key, v in run.items()} for run in runs]
                    for name, runs in variants.items()
                }
                for domain, variants in results.items()
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deephyper-python", required=True)
    parser.add_argument("--task", choices=list(TASKS), default="ackley")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--mean-seconds", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--domains", nargs="+", help="default: the task's")
    parser.add_argument("--evaluations", type=int, help="default: the task's budgets")
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=["dask", "async-at-freeing", "async"]
    )
    parser.add_argument("--algorithms", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--peers", nargs="*", help="default: the task's; none when empty")
    parser.add_argument(
        "--cores",
        type=int,
        default=1,
        help="Snakemake's cores: 1 runs one campaign run at a time (wall times not shared)",
    )
    parser.add_argument("--figure", type=Path, help="default: benchmarks/figures/<bo|hpo>.png")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--skip-timing", action="store_true", help="leave out step 4")
    parser.add_argument(
        "--repeat-check", action="store_true", help="run seed 0 again, compare evaluations"
    )
    parser.add_argument("--workdir", type=Path, help="keep the campaigns in this folder")
    parser.add_argument(
        "--results",
        type=Path,
        help="JSON file of runs: the variants run now are added to those it holds, and "
        "the report and figure show them all (peers and campaigns may run at other times)",
    )
    args = parser.parse_args()
    task = TASKS[args.task]
    domains = args.domains or list(task.budgets)
    budgets = {domain: budget_of(args, domain) for domain in domains}
    figure_path = (
        args.figure
        or REPO / "benchmarks" / "figures" / f"{'bo' if args.task == 'ackley' else args.task}.png"
    )
    print(machine(), flush=True)
    if args.task == "ackley" and not args.skip_timing:
        print(timing_report(args), flush=True)
    if args.timing_only:
        return
    results = stored_runs(args.results) if args.results else {}
    with scratch_folder("evocamp-bo-", keep=args.workdir) as folder:
        for domain in domains:
            variants = results.setdefault(domain, {})
            for mode in args.modes:
                variants.update(campaign_curves(args, domain, folder / domain / mode, mode=mode))
                print(report({domain: variants}, task, budgets=budgets), flush=True)
                if args.results:
                    store_runs(args.results, results)
            for peer in peers_of(args):
                variants[peer] = peer_curves(args, domain, peer)
                print(report({domain: variants}, task, budgets=budgets), flush=True)
                if args.results:
                    store_runs(args.results, results)
            if args.repeat_check:
                repeated(args, domain, folder, variants)
            if args.results:
                store_runs(args.results, results)
    print(report(results, task, budgets=budgets))
    figure(results, figure_path, task, budgets=budgets)
    print(f"figure: {figure_path}")


if __name__ == "__main__":
    main()
