"""walker2d_uni: evocamp in Dask mode beside a loop written from pyribs' documentation.

    python benchmarks/qd_rl_peer.py [--generations 40] [--seeds 0 1 2] [--batch 64]
        [--episode-length 100] [--figure benchmarks/figures/qd_rl_peer.png]

Both run CVT-MAP-Elites with iso-line variation (QDax's default variation: iso_sigma
0.005, line_sigma 0.05) on a CVT archive of 1,024 cells (k-means on 20,000 samples),
one emitter of ``--batch`` solutions per generation, from x0 = 0, on the same task
(``evocamp.tasks.functions.walker2d_uni``: 64-64 tanh MLP policies, ``--episode-length`` steps,
QD score offset 1.413 per step). The peer is pyribs' documented loop (``CVTArchive``,
``IsoLineEmitter``, ``Scheduler``; ``ask`` / evaluate / ``tell`` in one process, one
core); evocamp runs the same settings as a campaign in Dask mode with one worker and
one shard (one core of evaluation, as the peer) under ``snakemake --cores 1``. Seeds are
derived differently (and so are the CVT centroids), so runs compare as distributions.
Prints final QD score and coverage per seed and the wall time per run; writes a figure
of QD score and coverage by generation.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from common import REPO, machine, measured, scratch_folder, snakemake, table, write_config

import evocamp  # noqa: F401  (process settings before numpy-heavy imports)

CELLS, SAMPLES = 1024, 20_000
ISO_SIGMA, LINE_SIGMA = 0.005, 0.05
OFFSET_PER_STEP = 1.413


def peer_loop(seed: int, *, generations: int, batch: int, episode_length: int) -> dict:
    """pyribs' documented loop: CVTArchive, one IsoLineEmitter, a Scheduler."""
    from ribs.archives import CVTArchive
    from ribs.emitters import IsoLineEmitter
    from ribs.schedulers import Scheduler

    from evocamp.catalogue.domains import DOMAINS
    from evocamp.tasks.functions import walker2d_uni

    began = time.perf_counter()
    params = {"episode_length": episode_length}
    dim = DOMAINS["walker2d_uni"].fixed_dim(params)
    archive = CVTArchive(
        solution_dim=dim,
        centroids=CELLS,
        samples=SAMPLES,
        ranges=[(0.0, 1.0), (0.0, 1.0)],
        qd_score_offset=-OFFSET_PER_STEP * episode_length,
        seed=seed,
    )
    emitter = IsoLineEmitter(
        archive,
        x0=np.zeros(dim),
        iso_sigma=ISO_SIGMA,
        line_sigma=LINE_SIGMA,
        batch_size=batch,
        seed=seed + 1000,
    )
    scheduler = Scheduler(archive, [emitter])
    history = [(archive.stats.qd_score, archive.stats.coverage)]
    for _ in range(generations):
        solutions = scheduler.ask()
        out = walker2d_uni(solutions, np.zeros(len(solutions), dtype=np.uint64), **params)
        scheduler.tell(out["objective"], out["measures"])
        history.append((archive.stats.qd_score, archive.stats.coverage))
    return {"history": np.array(history), "seconds": time.perf_counter() - began}


def evocamp_runs(
    seeds: list[int], *, generations: int, batch: int, episode_length: int, workdir: Path
) -> tuple[dict[int, np.ndarray], float]:
    """Per-generation (QD score, coverage) of every seed's run, and the campaign's wall
    time."""
    config = {
        "campaign": "qd_rl_peer",
        "master_seed": 0,
        "generations": generations,
        "checkpoint_every": generations,
        "mode": "dask",
        "shards": 1,
        "dask": {"workers": 1},
        "seeds": seeds,
        "algorithms": {
            "me_line": {
                "type": "cvt_map_elites_line",
                "emitters": 1,
                "emitter_batch_size": batch,
                "iso_sigma": ISO_SIGMA,
                "line_sigma": LINE_SIGMA,
                "archive": {"cells": CELLS, "cvt_samples": SAMPLES},
            }
        },
        "domains": {
            "walker2d_uni": {"type": "walker2d_uni", "params": {"episode_length": episode_length}}
        },
    }
    write_config(workdir, config)
    seconds, _ = measured(snakemake(workdir, "runs", cores=1))
    histories = {}
    for seed in seeds:
        path = workdir / "results" / "qd_rl_peer" / "me_line" / "walker2d_uni" / f"seed{seed}"
        rows = np.genfromtxt(path / "metrics.csv", delimiter=",", names=True)
        histories[seed] = np.stack([rows["qd_score"], rows["coverage"]], axis=1)
    return histories, seconds


def figure(path: Path, peer: dict[int, np.ndarray], ours: dict[int, np.ndarray], title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for column, label in enumerate(("QD score", "coverage")):
        ax = axes[column]
        for name, runs, colour in (("pyribs loop", peer, "C0"), ("evocamp (Dask)", ours, "C1")):
            for index, history in enumerate(runs.values()):
                ax.plot(
                    history[:, column],
                    color=colour,
                    alpha=0.8,
                    label=name if index == 0 else None,
                )
        ax.set_xlabel("generation")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(title)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--episode-length", type=int, default=100)
    parser.add_argument(
        "--figure", type=Path, default=REPO / "benchmarks" / "figures" / "qd_rl_peer.png"
    )
    args = parser.parse_args()
    budget = {
        "generations": args.generations,
        "batch": args.batch,
        "episode_length": args.episode_length,
    }
    peer = {seed: peer_loop(seed, **budget) for seed in args.seeds}
    with scratch_folder("evocamp-qd-rl-") as workdir:
        ours, seconds = evocamp_runs(args.seeds, workdir=workdir, **budget)
    print(f"machine: {machine()}")
    print(
        f"walker2d_uni, {args.generations} generations x {args.batch} episodes of at most "
        f"{args.episode_length} steps, seeds {args.seeds}"
    )
    rows = []
    for name, finals, per_run in (
        ("pyribs loop", {s: r["history"][-1] for s, r in peer.items()}, None),
        ("evocamp, Dask mode", {s: h[-1] for s, h in ours.items()}, seconds / len(args.seeds)),
    ):
        scores = [float(final[0]) for final in finals.values()]
        coverages = [float(final[1]) for final in finals.values()]
        if per_run is None:
            per_run = statistics.mean(r["seconds"] for r in peer.values())
        rows.append(
            [
                name,
                ", ".join(f"{score:,.0f}" for score in scores),
                f"{statistics.mean(scores):,.0f} +- {statistics.stdev(scores):,.0f}",
                ", ".join(f"{coverage:.3f}" for coverage in coverages),
                f"{statistics.mean(coverages):.3f} +- {statistics.stdev(coverages):.3f}",
                f"{per_run:,.1f} s",
            ]
        )
    print(
        table(
            [
                "loop",
                "QD score per seed",
                "QD score (mean +- sd)",
                "coverage per seed",
                "coverage (mean +- sd)",
                "wall time per run",
            ],
            rows,
        )
    )
    peer_seconds = statistics.mean(r["seconds"] for r in peer.values())
    print(f"wall time ratio evocamp / pyribs loop: {seconds / len(args.seeds) / peer_seconds:.2f}")
    figure(
        args.figure,
        {s: r["history"] for s, r in peer.items()},
        ours,
        f"walker2d_uni: CVT-MAP-Elites (iso-line), {args.batch} x {args.episode_length}-step "
        f"episodes per generation",
    )
    print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
