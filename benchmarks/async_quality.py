"""Asynchronous qUCB's variants in solution quality and proposal latency: proposals
ahead, and DeepHyper's cheapeners (a surrogate refitted every k-th told point, a kappa
schedule, a cheaper acquisition search).

    python benchmarks/async_quality.py [--seeds 0 1 2 3 4] [--domains ackley5 ackley10]
        [--algorithms qucb_decentralised qucb_centralised] [--variants at-freeing ahead ...]

Runs ``config/bo.yaml``'s asynchronous setting (8 slots, the virtual clock, evaluation
times exponential with mean 0.5 s) in this process, evaluating in process and sleeping
nothing: under the virtual clock a run is a pure function of its configuration and
seed, so these are the values the campaign gives on any executor (the durations come
from ``async.virtual_seconds`` instead of the domain's ``simulated_seconds``, the same
draws). Per algorithm and domain, the variants of :data:`VARIANTS` one after the other
per seed (``at-freeing``: a freed slot is proposed for, from everything told;
``ahead``: ``propose_ahead: true``, its queued proposal made from the history told when
its previous evaluation started; the others: at freeing with the algorithm keys they
name); prints the best Ackley value at half the budget and at the budget (5-d: 200
evaluations, 10-d: 400), mean [95% bootstrap CI] over the seeds, the per-seed values,
and the process seconds per completion (almost all of them the proposal's fit and
search: the proposal latency a worker with a core of its own sees).
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import yaml
from common import REPO, interval, machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.config import run_spec, validate_config
from evocamp.files.completions import Completion
from evocamp.loop.asynchronous import (
    AsynchronousLoop,
    Resume,
    evaluate_in_process,
    initialise_asynchronous,
)

#: Evaluations per domain: benchmarks/bo.py's budgets of config/bo.yaml's Ackley domains.
BUDGETS = {"ackley5": 200, "ackley10": 400}

#: Variant name: (``async`` keys, algorithm keys) over ``config/bo.yaml``'s setting.
VARIANTS = {
    "at-freeing": ({"propose_ahead": False}, {}),
    "ahead": ({"propose_ahead": True}, {}),
    "refit-8": ({}, {"refit_every": 8}),
    "refit-32": ({}, {"refit_every": 32}),
    "kappa-decay": ({}, {"kappa_schedule": {"period": 10, "kappa_final": 0.01}}),
    "kappa-decay-25": ({}, {"kappa_schedule": {"period": 25, "kappa_final": 0.1}}),
    "cheap-search": ({}, {"candidates": 2000, "refine_generations": 5}),
    "refit-8-cheap-search": ({}, {"refit_every": 8, "candidates": 2000, "refine_generations": 5}),
    "trees-16": ({}, {"trees": 16}),
    "trees-12": ({}, {"trees": 12}),
}


def best_curve(config: dict, *, algorithm: str, domain: str, seed: int) -> tuple:
    """Best Ackley value after each completion of one run, and the process seconds per
    completion of the run (fits, proposals, tells and the evaluations, which sleep
    nothing: the proposal's cost, measured on the process clock so that the machine's
    load does not enter it)."""
    spec = run_spec(validate_config(config), algorithm=algorithm, domain=domain, seed=seed)
    submit, wait = evaluate_in_process(spec)
    told: list[Completion] = []
    loop = AsynchronousLoop(
        initialise_asynchronous(spec),
        resume=Resume.from_log([], told=0, spec=spec),
        submit=submit,
        wait=wait,
        record=told.append,
        workers=spec["asynchronous"]["slots"],
    )
    began = time.process_time()
    loop.run(until=config["generations"])
    seconds = time.process_time() - began
    objective = np.asarray([c.objective for _, c in loop.told])
    return -np.maximum.accumulate(objective), seconds / len(objective)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--domains", nargs="+", default=list(BUDGETS))
    parser.add_argument(
        "--algorithms", nargs="+", default=["qucb_decentralised", "qucb_centralised"]
    )
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=["at-freeing", "ahead"]
    )
    args = parser.parse_args()
    print(machine(), flush=True)
    base = yaml.safe_load((REPO / "config" / "bo.yaml").read_text())
    rows = []
    for domain in args.domains:
        budget = BUDGETS[domain]
        for algorithm in args.algorithms:
            values = {variant: [] for variant in args.variants}
            latencies = {variant: [] for variant in args.variants}
            for seed in args.seeds:
                for variant in args.variants:
                    asynchronous, keys = VARIANTS[variant]
                    config = copy.deepcopy(base)
                    config.update(mode="async", seeds=[seed], generations=budget // 8)
                    config["algorithms"] = {algorithm: {**config["algorithms"][algorithm], **keys}}
                    entry = config["domains"][domain]
                    durations = entry.pop("simulated_seconds")
                    config["domains"] = {domain: entry}
                    config["async"] = {**asynchronous, "virtual_seconds": durations}
                    curve, latency = best_curve(
                        config, algorithm=algorithm, domain=domain, seed=seed
                    )
                    values[variant].append((curve[budget // 2 - 1], curve[budget - 1]))
                    latencies[variant].append(latency)
                    print(domain, algorithm, seed, variant, values[variant][-1], latency)
            for variant in args.variants:
                half, full = zip(*values[variant], strict=True)
                rows.append(
                    [
                        domain,
                        algorithm,
                        variant,
                        len(half),
                        interval(half),
                        interval(full),
                        " ".join(f"{v:.3g}" for v in full),
                        f"{np.mean(latencies[variant]):.4f}",
                    ]
                )
            header = ["domain", "algorithm", "variant", "seeds", "best at half",
                      "best at budget", "per seed", "CPU s per completion"]  # fmt: skip
            print(table(header, rows), flush=True)


if __name__ == "__main__":
    main()
