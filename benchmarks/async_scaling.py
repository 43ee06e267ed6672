"""Asynchronous decentralised qUCB (ADBO) with many workers, by simulation.

    python benchmarks/async_scaling.py [--workers 8 64 256 1024] [--per-worker 2]
        [--dim 5] [--mean-seconds 0.5] [--variants today ahead] [--history 0]
    python benchmarks/async_scaling.py --fit-times
    python benchmarks/async_scaling.py --bounded-quality [--seeds 0 1 2]
    python benchmarks/async_scaling.py --coordinator
    python benchmarks/async_scaling.py --segment [--means 0.01 0.1 1] [--workers 8]

``--segment`` runs real segment jobs instead (:func:`segment_ceiling`);
``--bounded-quality`` compares bounded and full fits at equal evaluations
(:func:`bounded_quality`). Otherwise: real
fitting, simulated evaluation times. Every worker runs on a core of its own and
evaluates for a duration drawn from an exponential distribution (not slept). Events
are processed in simulated time, so the numbers are what W cores would see, whatever
this machine has. ``--per-worker`` x W evaluations are proposed, at least
``--min-evaluations`` (the run's budget). Variants (``--variants``, run one after the
other for each worker count, so a changing load touches both alike):

- ``today``: a freed worker fits its own surrogate to the whole history told so far
  and proposes, then evaluates (evocamp before proposals ahead and bounded fits);
- ``ahead``: as evocamp's asynchronous mode now (``propose_ahead``): when a worker
  starts an evaluation it is asked for its next proposal from the history told until
  then, and fits (at most ``FIT_POINTS`` points) and proposes while it evaluates; a
  freed worker starts its queued proposal as soon as that proposal is made;
- ``ahead-full``: ``ahead`` with the whole history fitted (the bound's share);
- ``at-freeing``: ``today`` with the fit bounded (the default of this version);
- ``ahead-cheap-search``: ``ahead`` with the cheaper search (a fit per proposal);
- ``cheap-search-16-trees``, ``cheap-search-12-trees``: ``cheap-search`` with 16 or 12
  trees instead of 25 (what docs/hpc.md advises from about 1,000 workers on);
- ``cheap-search``, ``refit-8-cheap-search``: ``at-freeing`` with DeepHyper's
  cheapeners: 2,000 candidates and 5 generations of the genetic search instead of
  10,000 and 20, and the surrogate refitted every 8th told point (all simulated workers
  share this process's fitted models, as the slots served by one Dask worker process
  or a centralised coordinator do; W workers in W processes would each fit the model
  of a refit they need once).

Fits and proposals are really computed, one after the other, and timed with the
process clock. ``--history N`` starts every run from N told uniform points (a long
campaign's history, as random search would leave it) and proposes the budget after them.

Prints per worker count and variant: evaluations, utilisation (evaluation time /
(time x workers) until the budget's last proposal is asked, so the budget's tail is
left out), proposal latency (fit + propose seconds per proposal: mean and 95th
percentile), the seconds a worker waits for its proposal per evaluation, the
coordinator's seconds per completion (log line, tell, next proposal's batch and its
serialisation: what evocamp's one loop process does for every completion, measured;
Dask's own scheduling of the task comes on top), the bytes each task carries (the
history), the completions per second the workers produce against the rate the
coordinator can serve, and the best Ackley value of the budget.
"""

from __future__ import annotations

import argparse
import heapq
import pickle
import time

import numpy as np
import sklearn.ensemble  # noqa: F401  (imported once here, not in the first timed fit)
from common import machine, table

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)
from evocamp.catalogue.algorithms import ALGORITHMS
from evocamp.families.bo import FIT_POINTS, DecentralisedBatch, DecentralisedQUCB
from evocamp.files.completions import Completion
from evocamp.tasks.functions import ackley_value

BOUND = 32.768
#: Variant: (proposals ahead, fit points, algorithm keys over ``config/bo.yaml``'s).
VARIANTS = {
    "today": (False, 10**9, {}),
    "at-freeing": (False, FIT_POINTS, {}),
    "ahead": (True, FIT_POINTS, {}),
    "ahead-full": (True, 10**9, {}),
    "cheap-search": (False, FIT_POINTS, {"candidates": 2000, "refine_generations": 5}),
    "ahead-cheap-search": (True, FIT_POINTS, {"candidates": 2000, "refine_generations": 5}),
    "cheap-search-16-trees": (
        False,
        FIT_POINTS,
        {"candidates": 2000, "refine_generations": 5, "trees": 16},
    ),
    "cheap-search-12-trees": (
        False,
        FIT_POINTS,
        {"candidates": 2000, "refine_generations": 5, "trees": 12},
    ),
    "refit-8-cheap-search": (
        False,
        FIT_POINTS,
        {"refit_every": 8, "candidates": 2000, "refine_generations": 5},
    ),
}


def simulate(
    *,
    workers: int,
    evaluations: int,
    dim: int,
    mean: float,
    variant: str = "ahead",
    history: int = 0,
    seed: int = 0,
) -> dict:
    """Simulate one asynchronous decentralised run (see the module docstring)."""
    ahead, fit_points, keys = VARIANTS[variant]
    settings = {**ALGORITHMS["qucb_decentralised"].defaults, **keys}
    optimizer = DecentralisedQUCB(
        solution_dim=dim, x0=None, bounds=(-BOUND, BOUND), seed=seed, shards=workers, **settings
    )
    optimizer.fit_points = fit_points
    if history:
        x = np.random.default_rng(seed + 2).uniform(-BOUND, BOUND, (history, dim))
        optimizer.tell_async(-ackley_value(x), np.empty((history, 0)), solutions=x)
    durations = np.random.default_rng(seed + 1).exponential(mean, evaluations)
    events, latencies, coordinator, task_bytes, waits = [], [], [], [], []
    busy = []
    queued = {}  # slot -> (solution, evaluation, the time it is made)
    proposed = 0
    last_ask = 0.0

    def ask(slot: int, now: float) -> tuple[np.ndarray, int, float, float]:
        """The slot's next proposal asked at ``now``: (solution, evaluation id, the
        time it is made, coordinator seconds)."""
        nonlocal proposed, last_ask
        last_ask = now
        began = time.process_time()
        (batch,) = optimizer.ask_async(slots=[slot], evaluations=[proposed])
        task_bytes.append(len(pickle.dumps(batch, protocol=5)))  # what a Dask submit sends
        coordinator_seconds = time.process_time() - began
        began = time.process_time()
        made = DecentralisedBatch.solutions(batch, 0, 1)
        fit = time.process_time() - began
        if len(optimizer.y) >= optimizer.initial_points:
            latencies.append(fit)
        proposed += 1
        return made["solutions"][0], proposed - 1, now + fit, coordinator_seconds

    def run(slot: int, solution, evaluation: int, start: float, *, ready: float) -> None:
        """Start an evaluation; with proposals ahead its completion is handed back once
        the slot's next proposal (made meanwhile, ``ready``) is made too."""
        finish = start + durations[evaluation]
        busy.append((start, finish))
        heapq.heappush(events, (max(finish, ready), evaluation, slot, solution))

    def start_next(slot: int, now: float) -> float:
        """A freed slot's next evaluation; returns the coordinator's seconds."""
        if not ahead:
            solution, evaluation, made_at, seconds = ask(slot, now)
            waits.append(made_at - now)
            run(slot, solution, evaluation, made_at, ready=made_at)
            return seconds
        solution, evaluation, made_at = queued.pop(slot)
        waits.append(max(0.0, made_at - now))  # 0: the completion waited for it instead
        seconds = 0.0
        ready = now
        if proposed < evaluations:
            following, following_id, ready, seconds = ask(slot, now)
            queued[slot] = (following, following_id, ready)
        run(slot, solution, evaluation, now, ready=ready)
        return seconds

    for slot in range(workers):  # the initial design: uniform proposals, no fit
        if ahead:
            queued[slot] = ask(slot, 0.0)[:3]
        start_next(slot, 0.0)
    while events:
        finish, evaluation, slot, solution = heapq.heappop(events)
        objective = -float(ackley_value(solution[None])[0])
        began = time.process_time()
        line = Completion(
            evaluation=evaluation,
            slot=slot,
            solution=solution,
            objective=objective,
            measures=np.empty(0),
        ).to_json()
        optimizer.tell_async(np.asarray([objective]), np.empty((1, 0)), solutions=solution[None])
        told = time.process_time() - began
        if slot in queued or (not ahead and proposed < evaluations):
            told += start_next(slot, finish)
        coordinator.append(told)
        del line
    horizon = last_ask
    evaluating = sum(max(0.0, min(b, horizon) - a) for a, b in busy)
    told_y = optimizer.y[history:]
    return {
        "workers": workers,
        "evaluations": evaluations,
        "utilisation": evaluating / (horizon * workers),
        "latency": float(np.mean(latencies)),
        "latency_p95": float(np.percentile(latencies, 95)),
        "wait": float(np.mean(waits)),
        "coordinator": float(np.mean(coordinator)),
        "task_kb": float(np.mean(task_bytes[-workers:]) / 1e3),
        "rate": workers / (mean + float(np.mean(waits))),
        "best": float(-told_y[:evaluations].max()),
    }


def fit_times(*, dims=(5, 10), histories=(1000, 2000, 5000, 10000)) -> str:
    """Process seconds of one decentralised proposal (fit + refined proposal of one
    point, ``config/bo.yaml``'s settings) from a history of uniform Ackley points: fitted
    to at most ``FIT_POINTS`` points, and to all of them."""
    rows = []
    for dim in dims:
        for history in histories:
            x = np.random.default_rng(history).uniform(-BOUND, BOUND, (history, dim))
            row = [dim, history]
            for fit_points in (FIT_POINTS, 10**9):
                settings = dict(ALGORITHMS["qucb_decentralised"].defaults)
                optimizer = DecentralisedQUCB(
                    solution_dim=dim, x0=None, bounds=(-BOUND, BOUND), seed=0, shards=1,
                    **settings,
                )  # fmt: skip
                optimizer.fit_points = fit_points
                optimizer.tell_async(-ackley_value(x), np.empty((history, 0)), solutions=x)
                (batch,) = optimizer.ask_async(slots=[0], evaluations=[history])
                began = time.process_time()
                DecentralisedBatch.solutions(batch, 0, 1)
                row.append(f"{time.process_time() - began:.3f}")
            rows.append(row)
            print(rows[-1], flush=True)
    return table(["d", "history", f"fitted to at most {FIT_POINTS:,} s", "fitted to all s"], rows)


def bounded_against_full(
    *, seed: int, fit_points: int, dim: int = 5, batch: int = 200, evaluations: int = 10000
) -> dict:
    """Best Ackley value at equal evaluations, surrogate fitted to at most ``fit_points``
    of the history: synchronous generations of ``batch`` points of centralised qUCB
    (``config/bo.yaml``'s ``qucb_centralised`` keys; its ``refit_every`` is moot: a
    generation's tell adds ``batch`` points), in process, on Ackley ``dim``-d, up to
    ``evaluations``. Returns the best value after every generation's evaluations and
    each generation's fit seconds (the optimizer's own timing, on the process clock here)
    and process seconds of its ``ask`` (fit and the batch's proposals)."""
    import types

    import yaml
    from common import REPO

    from evocamp.families import bo
    from evocamp.families.bo import CentralisedQUCB

    bo.time = types.SimpleNamespace(perf_counter=time.process_time)  # (load-proof timings)

    keys = yaml.safe_load((REPO / "config" / "bo.yaml").read_text())["algorithms"]
    settings = {**ALGORITHMS["qucb_centralised"].defaults, **keys["qucb_centralised"]}
    settings = {k: v for k, v in settings.items() if k not in ("type", "refit_every")}
    settings["batch_size"] = batch
    optimizer = CentralisedQUCB(
        solution_dim=dim, x0=None, bounds=(-BOUND, BOUND), seed=seed, **settings
    )
    optimizer.fit_points = fit_points
    best, fits, asks, told = [], [], [], []
    while len(optimizer.y) < evaluations:
        began = time.process_time()
        points = optimizer.ask()
        asks.append(time.process_time() - began)
        fits.append(optimizer.stats()["fit_seconds"])
        objective = -ackley_value(points)
        optimizer.tell(objective, np.empty((len(points), 0)))
        told.append(len(optimizer.y))
        best.append(float(-optimizer.y.max()))
    return {"evaluations": told, "best": best, "fit": fits, "ask": asks}


def bounded_quality(seeds, *, marks=(1000, 2000, 5000, 10000)) -> str:
    """:func:`bounded_against_full` for ``seeds``, bounded (``FIT_POINTS``) and full:
    best value at each of ``marks`` evaluations, mean [95% bootstrap CI], and the mean
    fit seconds and ask process seconds of the generations up to each mark."""
    from common import interval

    rows = []
    for label, fit_points in ((f"at most {FIT_POINTS:,}", FIT_POINTS), ("all", 10**9)):
        runs = []
        for seed in seeds:
            runs.append(bounded_against_full(seed=seed, fit_points=fit_points))
            print(label, seed, [runs[-1]["best"][-1]], flush=True)
        for previous, mark in zip((0, *marks), marks, strict=False):
            at = [run["evaluations"].index(mark) for run in runs]
            since = [
                slice(run["evaluations"].index(previous) + 1 if previous else 0, k + 1)
                for run, k in zip(runs, at, strict=True)
            ]
            rows.append(
                [
                    label,
                    mark,
                    len(runs),
                    interval([run["best"][k] for run, k in zip(runs, at, strict=True)]),
                    " ".join(f"{run['best'][k]:.3g}" for run, k in zip(runs, at, strict=True)),
                    f"{np.mean([np.mean(runs[i]['fit'][w]) for i, w in enumerate(since)]):.3f}",
                    f"{np.mean([np.mean(runs[i]['ask'][w]) for i, w in enumerate(since)]):.2f}",
                ]
            )
    header = ["fitted to", "evaluations", "seeds", "best Ackley", "per seed",
              "fit CPU s per generation (since the last mark)",
              "ask CPU s per generation"]  # fmt: skip
    return table(header, rows)


def coordinator_rate(*, algorithm: str, completions: int = 2000, slots: int = 8) -> dict:
    """Process seconds evocamp's asynchronous loop spends per completion besides the
    evaluations (log line, tell, next proposal, generation rows): the real
    :class:`~evocamp.loop.asynchronous.AsynchronousLoop` on ``config/bo.yaml``'s Ackley
    5-d, evaluating in process with the evaluation calls timed apart (on Dask they run
    on the workers)."""
    import copy

    import yaml
    from common import REPO

    from evocamp.config import run_spec, validate_config
    from evocamp.loop.asynchronous import (
        AsynchronousLoop,
        Resume,
        evaluate_in_process,
        initialise_asynchronous,
    )

    config = yaml.safe_load((REPO / "config" / "bo.yaml").read_text())
    config = copy.deepcopy(config)
    config.update(mode="async", seeds=[0], generations=completions // 8)
    config["algorithms"] = {algorithm: config["algorithms"][algorithm]}
    entry = config["domains"]["ackley5"]
    config["async"] = {"slots": slots, "virtual_seconds": entry.pop("simulated_seconds")}
    config["domains"] = {"ackley5": entry}
    spec = run_spec(validate_config(config), algorithm=algorithm, domain="ackley5", seed=0)
    submit, wait = evaluate_in_process(spec)
    evaluating = [0.0]

    def timed_wait(evaluation):
        began = time.process_time()
        completion = wait(evaluation)
        evaluating[0] += time.process_time() - began
        return completion

    loop = AsynchronousLoop(
        initialise_asynchronous(spec),
        resume=Resume.from_log([], told=0, spec=spec),
        submit=submit,
        wait=timed_wait,
        record=lambda completion: completion.to_json(),
        workers=slots,
    )
    began = time.process_time()
    loop.run(until=config["generations"])
    total = time.process_time() - began
    return {"per_completion": (total - evaluating[0]) / completions, "worker": evaluating[0]}


def segment_ceiling(
    *, algorithm: str, mean: float, workers: int, completions: int, keys: dict | None = None
) -> dict:
    """Completions per second one real segment job sustains: ``config/bo.yaml``'s Ackley
    5-d in ``mode: async`` through Snakemake (one seed, one window: one segment job),
    ``workers`` slots on a LocalCluster of ``dask.workers`` ``workers``, evaluations
    sleeping exponential times of mean ``mean`` seconds (the domain's
    ``simulated_seconds``; the virtual clock, the default). Generation 1 (the cluster's
    start) is left out: the rate is ``8 x (generations - 1)`` completions over those
    generations' wall seconds."""
    import subprocess

    import yaml
    from common import REPO, scratch_folder, snakemake, write_config

    from evocamp.model.metrics import read_metrics_csv

    config = yaml.safe_load((REPO / "config" / "bo.yaml").read_text())
    entry = config["algorithms"][algorithm]
    config.update(
        campaign="ceiling",
        mode="async",
        seeds=[0],
        generations=completions // entry["batch_size"],
        checkpoint_every=completions // entry["batch_size"],
        shards=workers,
    )
    config["algorithms"] = {algorithm: {**entry, **(keys or {})}}
    config["domains"] = {"ackley5": config["domains"]["ackley5"]}
    config["domains"]["ackley5"]["simulated_seconds"]["mean"] = mean
    config["dask"] = {"workers": workers}
    config["async"] = {"slots": workers}
    with scratch_folder("evocamp-ceiling-") as workdir:
        write_config(workdir, config)
        began = time.perf_counter()
        subprocess.run(snakemake(workdir, "runs"), check=True, capture_output=True)
        wall = time.perf_counter() - began
        rows = read_metrics_csv(
            workdir / "results" / "ceiling" / algorithm / "ackley5" / "seed0" / "metrics.csv"
        )[2:]
    seconds = float(rows["wall_seconds"].sum())
    return {
        "rate": entry["batch_size"] * len(rows) / seconds,
        "utilisation": float(np.mean(rows["utilisation"])),
        "snakemake_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 64, 256, 1024])
    parser.add_argument("--per-worker", type=int, default=2)
    parser.add_argument("--min-evaluations", type=int, default=400)
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--mean-seconds", type=float, default=0.5)
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=["at-freeing", "ahead"]
    )
    parser.add_argument("--history", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--segment", action="store_true", help="time real segment jobs")
    parser.add_argument("--means", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    parser.add_argument("--fit-times", action="store_true", help="only time single proposals")
    parser.add_argument(
        "--bounded-quality",
        action="store_true",
        help="best value at equal evaluations, bounded against full fits (10,000 evaluations)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--coordinator", action="store_true", help="only time the loop's own work per completion"
    )
    args = parser.parse_args()
    print(machine())
    if args.coordinator:
        for algorithm, completions in (("random_search", 4000), ("qucb_decentralised", 400)):
            result = coordinator_rate(algorithm=algorithm, completions=completions)
            print(
                f"{algorithm}: {result['per_completion'] * 1e3:.2f} ms per completion in the "
                f"loop ({1 / result['per_completion']:.0f} completions/s servable), "
                f"{result['worker'] / completions * 1e3:.2f} ms per evaluation call",
                flush=True,
            )
        return
    if args.segment:
        rows = []
        runs = (
            ("random_search", {}, 2000),
            ("qucb_decentralised", {}, 400),
            ("qucb_decentralised", VARIANTS["refit-8-cheap-search"][2], 400),
        )
        for mean in args.means:
            for algorithm, keys, completions in runs:
                workers = args.workers[0]
                budget = min(completions, max(80, int(20 * workers / mean) // 8 * 8))
                result = segment_ceiling(
                    algorithm=algorithm, mean=mean, workers=workers, completions=budget, keys=keys
                )
                ideal = workers / mean
                rows.append(
                    [
                        f"{mean:g}",
                        algorithm + (" (refit 8, 2,000 candidates, 5 generations)" if keys else ""),
                        workers,
                        budget,
                        f"{result['rate']:.1f}",
                        f"{ideal:.0f}",
                        f"{result['utilisation']:.3f}",
                        f"{result['snakemake_seconds']:.0f}",
                    ]
                )
                print(rows[-1], flush=True)
        header = ["mean evaluation s", "algorithm", "workers", "completions",
                  "completions/s sustained", "workers / mean", "utilisation",
                  "Snakemake wall s"]  # fmt: skip
        print(table(header, rows))
        return
    if args.fit_times:
        print(fit_times())
        return
    if args.bounded_quality:
        print(bounded_quality(args.seeds))
        return
    rows = []
    for workers in args.workers:
        for variant in args.variants:
            began = time.perf_counter()
            result = simulate(
                workers=workers,
                evaluations=max(args.per_worker * workers, args.min_evaluations),
                dim=args.dim,
                mean=args.mean_seconds,
                variant=variant,
                history=args.history,
                seed=args.seed,
            )
            rows.append(
                [
                    workers,
                    variant,
                    result["evaluations"],
                    f"{result['utilisation']:.3f}",
                    f"{result['latency']:.3f} / {result['latency_p95']:.3f}",
                    f"{result['wait']:.3f}",
                    f"{result['coordinator'] * 1e3:.2f}",
                    f"{result['task_kb']:.0f}",
                    f"{result['rate']:.0f} / {1 / result['coordinator']:.0f}",
                    f"{result['best']:.3g}",
                    f"{time.perf_counter() - began:.0f}",
                ]
            )
            print(rows[-1], flush=True)
    print(
        table(
            [
                "workers",
                "variant",
                "evaluations",
                "utilisation",
                "latency s (mean / p95)",
                "wait s per evaluation",
                "coordinator ms per completion",
                "task kB",
                "completions/s: produced / servable",
                "best Ackley",
                "simulated in s",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
