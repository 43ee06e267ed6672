"""Seconds of the shard-mode steps of a CVT-MAP-Elites run, and what each writes and reads.

    python benchmarks/qd_steps.py --folder /mnt/fp33/steps [--solution-dim 5700] [--batch 256]

Runs the step functions the ``init``, ``evaluate`` and ``tell`` jobs run (no Snakemake,
no process start) in this process, for ``--generations`` generations of one
CVT-MAP-Elites run (``--cells`` cells, one Gaussian emitter of ``--batch`` on the
``--solution-dim``-d sphere; ``--type cvt_cma_me --es sep_cma_es``: one separable CMA-ES
emitter instead; ``--type novelty_search [--local-competition]``: NS or NSLC, its run's
archive the default grid, ``--novelty-threshold`` its archive's) in ``--shards`` shards,
its working files in ``--folder`` (every ``--checkpoint-every``-th state whole, the
others light, as a campaign writes them). Prints the median seconds of an evaluate and a
tell step (wall and this process's CPU seconds: the CPU seconds depend less on other
jobs' load), the mean bytes of a light state, the bytes of a whole state (a kept
checkpoint), and the bytes a shard reads (its state files' sizes are an upper bound; the
HDF5 reads of its parents' rows are counted with ``/proc/self/io`` ``rchar``), the bytes
of the files (states and shard files) written per generation and, with ``--block``
(``--folder`` directly under a dedicated mount, as for ``footprint.py``), the bytes
written to its block device per generation. The shards run on the tells' node (they find
what the tell left in the node-local state cache); ``--shards-elsewhere`` runs them as
on another node (another cache folder). Run it with ``PYTHONPATH=<checkout>/src`` to
measure another checkout (both steps keep their API).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from footprint import block_device, bytes_written

import evocamp  # noqa: F401 (BLAS and numba settings first)
from evocamp.config import run_spec, validate_config
from evocamp.executors.steps import evaluate_step, init_step, tell_step


def read_bytes() -> int:
    """Bytes this process has read through system calls so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


@contextlib.contextmanager
def state_cache(folder: Path | None):
    """Steps in this block use ``folder`` as their node-local state cache (``None``:
    the one they would use anyway), as on another node."""
    if folder is None:
        yield
        return
    before = os.environ.get("EVOCAMP_STATE_CACHE")
    os.environ["EVOCAMP_STATE_CACHE"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["EVOCAMP_STATE_CACHE"]
        else:
            os.environ["EVOCAMP_STATE_CACHE"] = before


def plot(lines: Path, figure: Path) -> None:
    """The figure of bytes written per generation against solution size, from JSON
    lines ``{"checkout": "main"|..., "data": <this script's output>}`` (the medians
    over repetitions), full batches (``main``) against compact ones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs: dict[tuple, list[float]] = {}
    for line in lines.read_text().splitlines():
        entry = json.loads(line)
        data = entry["data"]
        key = (entry["checkout"], data["batch"], data["solution_dim"])
        runs.setdefault(key, []).append(data["block_MB_per_generation"])
    fig, axis = plt.subplots(figsize=(5.5, 3.8))
    for (checkout, batch), style in zip(
        sorted({key[:2] for key in runs}), ("o--", "s--", "o-", "s-"), strict=False
    ):
        dims = sorted(dim for c, b, dim in runs if (c, b) == (checkout, batch))
        values = [statistics.median(runs[(checkout, batch, dim)]) for dim in dims]
        label = f"{'full batches' if checkout == 'main' else 'compact batches'}, batch {batch}"
        axis.plot(dims, values, style, label=label)
    axis.set(xscale="log", yscale="log", xlabel="parameters per solution")
    axis.set(ylabel="MB written per generation (block device)")
    axis.set_title("CVT-MAP-Elites, 1,024 cells, 8 shards, K = 10", fontsize=10)
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figure, dpi=120)


def archive_keys(args: argparse.Namespace) -> dict:
    """The ``archive`` keys of the run: a CVT type's ``--cells``; novelty search's
    ``local_competition`` (its run's archive is the default grid)."""
    if args.type == "novelty_search":
        keys = {"local_competition": args.local_competition}
        if args.novelty_threshold is not None:
            keys["novelty_threshold"] = args.novelty_threshold
        return keys
    return {"cells": args.cells}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, help="JSON lines of runs to plot instead")
    figures = Path(__file__).resolve().parent / "figures"
    parser.add_argument("--figure", type=Path, default=figures / "qd_batch_bytes.png")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--solution-dim", type=int, default=5700)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--cells", type=int, default=1024)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--type", default="cvt_map_elites", help="a CVT QD type, or novelty_search")
    parser.add_argument("--local-competition", action="store_true", help="novelty search: NSLC")
    parser.add_argument(
        "--novelty-threshold", type=float, help="novelty search: its archive's threshold"
    )
    parser.add_argument("--es", help="the evolution strategy of a CMA type (sep_cma_es)")
    parser.add_argument(
        "--block", action="store_true", help="--folder's parent is a mount: count its writes"
    )
    parser.add_argument(
        "--shards-elsewhere",
        action="store_true",
        help="run the shards as on another node than the tells: with another state cache",
    )
    args = parser.parse_args()
    if args.plot:
        plot(args.plot, args.figure)
        return
    config = validate_config(
        {
            "algorithms": {
                "cvt": {
                    "type": args.type,
                    "emitter_batch_size": args.batch,
                    "archive": archive_keys(args),
                    **({"es": args.es, "emitters": 1} if args.es else {}),
                }
            },
            "domains": {"s": {"type": "sphere", "solution_dim": args.solution_dim}},
            "shards": args.shards,
            "checkpoint_every": args.checkpoint_every,
            "generations": args.generations,
        }
    )
    spec = run_spec(config, algorithm="cvt", domain="s", seed=0)
    shutil.rmtree(args.folder, ignore_errors=True)
    args.folder.mkdir(parents=True)
    state = args.folder / "state_000000.h5"
    init_step(spec=spec, output=state)
    device = block_device(args.folder.parent) if args.block else None
    written = bytes_written(device) if device else 0
    elsewhere = Path(tempfile.mkdtemp()) if args.shards_elsewhere else None
    evaluate, tell, light, whole, shard_read = [], [], [], [], []
    evaluate_cpu, tell_cpu = [], []
    files_bytes = 0
    for generation in range(1, args.generations + 1):
        shard_folder = args.folder / f"gen_{generation:06d}"
        shard_folder.mkdir()
        files = []
        for shard in range(args.shards):
            files.append(shard_folder / f"shard_{shard:04d}.h5")
            before, began, cpu = read_bytes(), time.perf_counter(), time.process_time()
            with state_cache(elsewhere):
                evaluate_step(state=state, shard=shard, shards=args.shards, output=files[-1])
            evaluate.append(time.perf_counter() - began)
            evaluate_cpu.append(time.process_time() - cpu)
            shard_read.append(read_bytes() - before)
        output = args.folder / f"state_{generation:06d}.h5"
        began, cpu = time.perf_counter(), time.process_time()
        tell_step(
            state=state, shard_files=[str(p) for p in files], output=output, total=args.generations
        )
        tell.append(time.perf_counter() - began)
        tell_cpu.append(time.process_time() - cpu)
        size = output.stat().st_size
        files_bytes += size + sum(path.stat().st_size for path in files)
        (whole if generation % args.checkpoint_every == 0 else light).append(size)
        state = output
    written = (bytes_written(device) - written) if device else None
    print(
        json.dumps(
            {
                "type": args.type,
                "es": args.es,
                "local_competition": args.local_competition,
                "novelty_threshold": args.novelty_threshold,
                "shards_elsewhere": args.shards_elsewhere,
                "solution_dim": args.solution_dim,
                "batch": args.batch,
                "evaluate_s": statistics.median(evaluate),
                "tell_s": statistics.median(tell),
                "evaluate_cpu_s": statistics.median(evaluate_cpu),
                "tell_cpu_s": statistics.median(tell_cpu),
                "light_state_MB": statistics.mean(light) / 1e6 if light else None,
                "whole_state_MB": max(whole) / 1e6 if whole else None,
                "shard_read_MB": statistics.mean(shard_read) / 1e6,
                "batch_MB": args.batch * args.solution_dim * 8 / 1e6,
                "block_MB_per_generation": written / args.generations / 1e6 if device else None,
                "files_MB_per_generation": files_bytes / args.generations / 1e6,
            }
        )
    )


if __name__ == "__main__":
    main()
