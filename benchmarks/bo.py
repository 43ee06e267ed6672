"""The BO family beside its peer: DeepHyper's CBO on Ackley 5-d and 10-d (the
``mlp_digits`` tuning task beside DeepHyper and Optuna is ``hpo_peers.py``'s).

    python benchmarks/bo.py --deephyper-python /opt/dhenv/bin/python \
        [--seeds 0 1 2 3 4] [--mean-seconds 0.5] [--workers 8] \
        [--modes dask async async-at-freeing] [--algorithms ...] [--figure PATH] \
        [--workdir FOLDER] [--no-peer]
    python benchmarks/bo.py --timing-only --deephyper-python ...

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
    curves_figure,
    interval,
    machine,
    scratch_folder,
    snakemake,
    store_runs,
    stored_runs,
    table,
    write_config,
)

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)

BUDGETS = {"ackley5": 200, "ackley10": 400}
TITLES = {"ackley5": "Ackley 5-d", "ackley10": "Ackley 10-d"}
VALUE = "best Ackley"
DIMS = {"ackley5": 5, "ackley10": 10}
VARIANTS = ("qucb_decentralised", "qucb_centralised", "random_search")
MODES = ("dask", "async-at-freeing", "async")
INITIAL_POINTS = 10


def campaign_curves(
    args, domain: str, workdir: Path, *, mode: str, seeds=None
) -> dict[str, list[dict]]:
    """Run the campaign of one domain in ``mode``; per variant and seed, the best value
    after each generation, the cumulative wall time, utilisation and latency."""
    seeds = list(args.seeds if seeds is None else seeds)
    config = yaml.safe_load((REPO / "config" / "bo.yaml").read_text())
    config["campaign"] = f"bench_{domain}_{mode}"
    config["mode"] = "async" if mode.startswith("async") else mode
    config["async"] = {
        **config.get("async", {}),
        "slots": args.workers,
        "propose_ahead": mode == "async",
    }
    config["seeds"] = seeds
    batch = config["algorithms"]["qucb_centralised"]["batch_size"]
    config["generations"] = BUDGETS[domain] // batch
    config["checkpoint_every"] = config["generations"]
    config["algorithms"] = {name: config["algorithms"][name] for name in args.algorithms}
    config["dask"]["workers"] = args.workers
    config["shards"] = args.workers
    config["domains"] = {domain: config["domains"][domain]}
    config["domains"][domain]["simulated_seconds"]["mean"] = args.mean_seconds
    write_config(workdir, config)
    subprocess.run(
        snakemake(workdir, "runs", cores=args.cores, snakefile=REPO / "Snakefile"),
        check=True,
        capture_output=True,
    )
    campaign = workdir / "results" / config["campaign"]
    return read_curves(args, campaign, domain, mode=mode, seeds=seeds)


def read_curves(args, campaign: Path, domain: str, *, mode: str, seeds) -> dict[str, list[dict]]:
    """The curves of :func:`campaign_curves` of a campaign's finished runs (those with a
    ``metrics.csv``; the others are left out)."""
    from evocamp.model.metrics import read_metrics_csv

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
                "best": -rows["best_objective"],
                "times": wall,
                "wall_seconds": float(wall[-1]),
                "utilisation": float(rows["eval_seconds"].sum() / (wall[-1] * args.workers)),
                "steady_utilisation": float(
                    rows["eval_seconds"][1:].sum() / ((wall[-1] - wall[0]) * args.workers)
                ),
                "latency": float(latency.mean()),
            }
            curves.setdefault(f"{variant} [{mode}]", []).append(run)
    return curves


def deephyper_run(args, domain: str, seed: int) -> dict:
    """DeepHyper's CBO in its own process (``bo_deephyper.py search``): its JSON line."""
    out = subprocess.run(
        [
            args.deephyper_python,
            str(REPO / "benchmarks" / "bo_deephyper.py"),
            "search",
            f"--dim={DIMS[domain]}",
            f"--evaluations={BUDGETS[domain]}",
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


def peer_curves(args, domain: str, seeds=None) -> list[dict]:
    """DeepHyper's runs on ``domain``, one per seed, as runs of the report: the best
    value after each evaluation (in completion order) and its time."""
    runs = []
    for seed in args.seeds if seeds is None else seeds:
        run = deephyper_run(args, domain, seed)
        runs.append(
            {
                "evaluations": np.arange(1, len(run["best"]) + 1),
                "best": np.asarray(run["best"]),
                "times": np.asarray(run["times"]),
                "wall_seconds": run["wall_seconds"],
                "utilisation": run["utilisation"],
                "steady_utilisation": np.nan,
                "latency": np.nan,
            }
        )
    return runs


def optional_interval(values) -> str:
    """:func:`interval`, or ``-`` where the peer does not report the value."""
    return interval(values) if np.isfinite(values[0]) else "-"


def report(results: dict[str, dict[str, list[dict]]], *, budgets) -> str:
    """One Markdown table per domain: best value at half the budget and at the budget,
    wall seconds, utilisation and latency."""
    lines = []
    for domain, variants in results.items():
        budget = budgets[domain]
        rows = [
            [
                name,
                len(runs),
                interval([best_at(r, budget // 2) for r in runs]),
                interval([best_at(r, budget) for r in runs]),
                interval([r["wall_seconds"] for r in runs]),
                interval([r["utilisation"] for r in runs]),
                optional_interval([r["steady_utilisation"] for r in runs]),
                optional_interval([r["latency"] for r in runs]),
            ]
            for name, runs in variants.items()
        ]
        header = [
            "variant",
            "seeds",
            f"{VALUE} at {budget // 2}",
            f"at {budget}",
            "wall s",
            "utilisation",
            "utilisation after generation 1",
            "proposal latency s",
        ]
        lines.append(f"### {TITLES[domain]} ({budget} evaluations)\n")
        lines.append(table(header, rows))
        lines.append("")
    return "\n".join(lines)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deephyper-python", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--mean-seconds", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--domains", nargs="+", choices=list(BUDGETS), default=list(BUDGETS))
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=["dask", "async-at-freeing", "async"]
    )
    parser.add_argument("--algorithms", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--no-peer", action="store_true", help="leave out DeepHyper's CBO")
    parser.add_argument(
        "--cores",
        type=int,
        default=1,
        help="Snakemake's cores: 1 runs one campaign run at a time (wall times not shared)",
    )
    parser.add_argument("--figure", type=Path, default=REPO / "benchmarks/figures/bo.png")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--skip-timing", action="store_true", help="leave out step 4")
    parser.add_argument("--workdir", type=Path, help="keep the campaigns in this folder")
    parser.add_argument(
        "--results",
        type=Path,
        help="JSON file of runs: the variants run now are added to those it holds, and "
        "the report and figure show them all (peers and campaigns may run at other times)",
    )
    args = parser.parse_args()
    budgets = {domain: BUDGETS[domain] for domain in args.domains}
    print(machine(), flush=True)
    if not args.skip_timing:
        print(timing_report(args), flush=True)
    if args.timing_only:
        return
    results = stored_runs(args.results) if args.results else {}
    with scratch_folder("evocamp-bo-", keep=args.workdir) as folder:
        for domain in args.domains:
            variants = results.setdefault(domain, {})
            for mode in args.modes:
                variants.update(campaign_curves(args, domain, folder / domain / mode, mode=mode))
                print(report({domain: variants}, budgets=budgets), flush=True)
                if args.results:
                    store_runs(args.results, results)
            if not args.no_peer:
                variants["deephyper_cbo"] = peer_curves(args, domain)
                print(report({domain: variants}, budgets=budgets), flush=True)
            if args.results:
                store_runs(args.results, results)
    print(report(results, budgets=budgets))
    curves_figure(
        {TITLES[domain]: variants for domain, variants in results.items()},
        args.figure,
        value=VALUE,
        budgets={TITLES[domain]: budget for domain, budget in budgets.items()},
    )
    print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
