"""What proposals ahead cost in solution quality: asynchronous qUCB with and without them.

    python benchmarks/async_quality.py [--seeds 0 1 2 3 4] [--domains ackley5 ackley10]
        [--algorithms qucb_decentralised qucb_centralised]

Runs ``config/bo.yaml``'s asynchronous setting (8 slots, the virtual clock, evaluation
times exponential with mean 0.5 s) in this process, evaluating in process and sleeping
nothing: under the virtual clock a run is a pure function of its configuration and
seed, so these are the values the campaign gives on any executor (the durations come
from ``async.virtual_seconds`` instead of the domain's ``simulated_seconds``, the same
draws). Per algorithm and domain, ``propose_ahead: false`` (a freed slot is proposed
for, from everything told) and ``true`` (its queued proposal, made from the history
told when its previous evaluation started), one after the other per seed; prints the
best Ackley value at half the budget and at the budget (5-d: 200 evaluations, 10-d:
400), mean [95% bootstrap CI] over the seeds, and the per-seed differences.
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import yaml
from bo import BUDGETS, interval
from common import REPO, machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.config import run_spec, validate_config
from evocamp.files.completions import Completion
from evocamp.loop.asynchronous import (
    AsynchronousLoop,
    Resume,
    evaluate_in_process,
    initialise_asynchronous,
)


def best_curve(config: dict, *, algorithm: str, domain: str, seed: int) -> np.ndarray:
    """Best Ackley value after each completion of one run."""
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
    loop.run(until=config["generations"])
    objective = np.asarray([c.objective for _, c in loop.told])
    return -np.maximum.accumulate(objective)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--domains", nargs="+", default=list(BUDGETS))
    parser.add_argument(
        "--algorithms", nargs="+", default=["qucb_decentralised", "qucb_centralised"]
    )
    args = parser.parse_args()
    print(machine(), flush=True)
    base = yaml.safe_load((REPO / "config" / "bo.yaml").read_text())
    rows = []
    for domain in args.domains:
        _, budget = BUDGETS[domain]
        for algorithm in args.algorithms:
            values = {False: [], True: []}
            for seed in args.seeds:
                for ahead in (False, True):
                    config = copy.deepcopy(base)
                    config.update(mode="async", seeds=[seed], generations=budget // 8)
                    config["algorithms"] = {algorithm: config["algorithms"][algorithm]}
                    entry = config["domains"][domain]
                    durations = entry.pop("simulated_seconds")
                    config["domains"] = {domain: entry}
                    config["async"] = {"propose_ahead": ahead, "virtual_seconds": durations}
                    curve = best_curve(config, algorithm=algorithm, domain=domain, seed=seed)
                    values[ahead].append((curve[budget // 2 - 1], curve[budget - 1]))
                    print(domain, algorithm, seed, ahead, values[ahead][-1], flush=True)
            for ahead in (False, True):
                half, full = zip(*values[ahead], strict=True)
                rows.append(
                    [
                        domain,
                        algorithm,
                        "ahead" if ahead else "at freeing",
                        len(half),
                        interval(half),
                        interval(full),
                        " ".join(f"{v:.3g}" for v in full),
                    ]
                )
            print(table(["domain", "algorithm", "proposals", "seeds", "best at half",
                         "best at budget", "per seed"], rows), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
