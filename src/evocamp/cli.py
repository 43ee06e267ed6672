"""Command-line entry point ``evocamp``: one sub-command per pipeline step.

The Snakemake rules call these (``shell:``), and every one can be run by hand.
Heavy imports (pyribs, matplotlib, dask) happen inside the sub-commands that
need them, so an evaluation shard starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _progress(line: str) -> None:
    """A per-generation line: into the job's log (stderr) and onto Snakemake's terminal
    (stdout), so long local work is never silent."""
    _log(line)
    print(line, flush=True)


def cmd_check_config(args) -> None:
    """Validate a configuration file and print the runs it defines."""
    from evocamp.config import experiments_of, load_config_file, seeds_of

    config = load_config_file(args.config)
    for algorithm, domain in experiments_of(config):
        for seed in seeds_of(config):
            print(f"{algorithm}/{domain}/seed{seed}")


def cmd_init(args) -> None:
    """Create a run's optimizer and write its generation-0 checkpoint."""
    from evocamp.engine import initialise
    from evocamp.storage import run_label, write_state

    spec = json.loads(args.spec)
    state = initialise(spec)
    write_state(args.output, state)
    _log(
        f"{run_label(spec)}: initialised; batch of {len(state.next_seeds)} solutions "
        f"for generation 1 -> {args.output}"
    )


def cmd_evaluate(args) -> None:
    """Evaluate one shard of the batch stored in a checkpoint."""
    from evocamp.engine import evaluate_slice
    from evocamp.storage import read_shard_input, write_shard

    shard = read_shard_input(args.state, shard=args.shard, shards=args.shards)
    result = evaluate_slice(
        shard.spec,
        generation=shard.generation,
        shard=args.shard,
        start=shard.start,
        solutions=shard.solutions,
        seeds=shard.seeds,
        stats=shard.stats,
        keep_solutions=shard.proposed,
    )
    write_shard(args.output, result)
    _log(
        f"generation {result.generation} shard {args.shard}/{args.shards}: solutions "
        f"{result.start}..{result.stop - 1} evaluated in {result.eval_seconds.sum():.3f} s"
    )


def cmd_tell(args) -> None:
    """Fold a generation's shards into the archive and write the next checkpoint."""
    from evocamp.engine import tell
    from evocamp.progress import generation_line
    from evocamp.state_cache import write_told_state
    from evocamp.storage import read_shard, read_state

    state = tell(read_state(args.state), [read_shard(path) for path in args.shard_files])
    written = write_told_state(
        args.output,
        state,
        told_from=args.state,
        shard_files=args.shard_files,
        total=args.total,
    )
    _log(f"generation {state.generation}: {written}")
    _progress(generation_line(state, total=args.total))


def cmd_segment(args) -> None:
    """Dask mode: run generations after a checkpoint up to --until in one process."""
    from evocamp.dask_mode import run_segment

    run_segment(
        state_path=args.state,
        until=args.until,
        output=args.output,
        shards=args.shards,
        scheduler_file=args.scheduler_file or None,
        workers=args.workers,
        total=args.total,
        log=_progress,
    )


def cmd_keep(args) -> None:
    """Keep a checkpoint (every K-th generation), save its metrics segment, delete the
    working files of the generations it covers and fold their job logs."""
    from evocamp.metrics import write_rows
    from evocamp.state_cache import keep_whole
    from evocamp.storage import read_state

    state = read_state(args.state, with_optimizer=False)
    keep_whole(args.state, args.checkpoint)
    write_rows(args.segment, state.metrics_window)
    _log(f"generation {state.generation}: kept {args.checkpoint}")
    from evocamp.joblogs import KEEP_LOG

    own_log = Path(args.logs) / KEEP_LOG.format(generation=state.generation)
    _tidy_window(
        work=Path(args.state).parent, logs=args.logs, up_to=state.generation, own_log=own_log
    )


def _tidy_window(*, work: Path, logs: str, up_to: int, own_log: Path | None = None) -> None:
    """Remove the working files of generations ``<= up_to`` and fold their job logs
    into one window log (the calling job's own log, still open, is left for the next
    fold)."""
    from evocamp.joblogs import fold_logs
    from evocamp.storage import prune_work_files

    removed = prune_work_files(work, up_to=up_to)
    _log(f"generation {up_to}: removed {removed} working files")
    folded = fold_logs(logs, up_to=up_to, own=own_log)
    if folded is not None:
        _log(f"generation {up_to}: job logs folded into {folded}")


def cmd_finalise(args) -> None:
    """Write the final archive and metrics.csv of a run and keep its last checkpoint."""
    from evocamp.metrics import merge_history, write_rows
    from evocamp.state_cache import forget_run, keep_whole
    from evocamp.storage import atomic_write_text, read_state, write_final_archive

    state = read_state(args.state)
    checkpoint = Path(args.checkpoint)
    if Path(args.state).resolve() != checkpoint.resolve():
        keep_whole(args.state, checkpoint, state=state)
    rows = merge_history(sorted(Path(args.segments).glob("segment_*.csv")), state.metrics_window)
    write_rows(args.metrics, rows)
    write_final_archive(
        args.archive,
        spec=state.spec,
        archive=state.archive,
        optimizer=state.optimizer,
        best=state.best,
        generation=state.generation,
        evaluations=int(rows["evaluations"][-1]),
    )
    final = {name: rows[-1][name].item() for name in rows.dtype.names}
    summary = {"run_spec": state.spec, "final": final}
    atomic_write_text(args.summary, json.dumps(summary, indent=1, sort_keys=True) + "\n")
    _log(f"generation {state.generation}: final archive {args.archive}")
    _tidy_window(work=Path(args.work), logs=args.logs, up_to=state.generation)
    forget_run(args.work)


def cmd_plot_run(args) -> None:
    """Draw a run's archive heatmap and metric curves (PNG and PDF)."""
    from evocamp.plotting import plot_run

    plot_run(archive=args.archive, metrics=args.metrics, outdir=args.outdir, workers=args.workers)


def cmd_compare(args) -> None:
    """Campaign comparison: metric curves with 95% bootstrap bands, side-by-side
    heatmaps on a shared colour scale, and the final-metrics table (CSV, Markdown,
    LaTeX)."""
    from evocamp.comparison import (
        final_metrics_table,
        load_runs,
        table_csv,
        table_latex,
        table_markdown,
    )
    from evocamp.plotting import plot_campaign_curves, plot_campaign_heatmaps
    from evocamp.storage import atomic_write_text

    runs = load_runs(args.metrics)
    figures, tables = Path(args.figures), Path(args.tables)
    plot_campaign_curves(runs, samples=args.bootstrap, seed=args.seed, stem=figures / "curves")
    plot_campaign_heatmaps(args.archives, stem=figures / "heatmaps")
    table = final_metrics_table(runs, samples=args.bootstrap, seed=args.seed)
    atomic_write_text(tables / "final_metrics.csv", table_csv(table))
    atomic_write_text(tables / "final_metrics.md", table_markdown(table))
    atomic_write_text(tables / "final_metrics.tex", table_latex(table))


def cmd_status(args) -> None:
    """Progress of every run of a campaign (also while it runs), with a text plot of QD
    score against generations per run."""
    from evocamp.config import ConfigError, load_config_file
    from evocamp.status import status_report

    folder = args.folder
    if folder is None:
        configfile = Path(args.configfile)
        if not configfile.exists():
            raise ConfigError(
                f"no campaign folder given and no {configfile} here: run `evocamp status` "
                "where you run snakemake, or name a folder (e.g. results/default)"
            )
        config = load_config_file(configfile)
        folder = Path(config["results_dir"]) / config["campaign"]
    print(status_report(folder, plots=not args.no_plots))


def _total_from_environment() -> int | None:
    value = os.environ.get("EVOCAMP_GENERATIONS", "")
    return int(value) if value.isdigit() else None


def build_parser() -> argparse.ArgumentParser:
    """The ``evocamp`` argument parser."""
    parser = argparse.ArgumentParser(prog="evocamp", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    sub = commands.add_parser("check-config", help=cmd_check_config.__doc__)
    sub.add_argument("config")
    sub.set_defaults(func=cmd_check_config)

    sub = commands.add_parser("init", help=cmd_init.__doc__)
    sub.add_argument("--spec", required=True, help="run spec as JSON")
    sub.add_argument("--output", required=True)
    sub.set_defaults(func=cmd_init)

    sub = commands.add_parser("evaluate", help=cmd_evaluate.__doc__)
    sub.add_argument("--state", required=True)
    sub.add_argument("--shard", type=int, required=True)
    sub.add_argument("--shards", type=int, required=True)
    sub.add_argument("--output", required=True)
    sub.set_defaults(func=cmd_evaluate)

    sub = commands.add_parser("tell", help=cmd_tell.__doc__)
    sub.add_argument("--state", required=True)
    sub.add_argument("--shard-files", nargs="+", required=True)
    sub.add_argument("--output", required=True)
    sub.add_argument(
        "--total",
        type=int,
        default=_total_from_environment(),
        help="generations of the run (default: $EVOCAMP_GENERATIONS)",
    )
    sub.set_defaults(func=cmd_tell)

    sub = commands.add_parser("segment", help=cmd_segment.__doc__)
    sub.add_argument("--state", required=True)
    sub.add_argument("--until", type=int, required=True, help="last generation to run")
    sub.add_argument("--shards", type=int, required=True, help="Dask tasks per generation")
    sub.add_argument("--output", required=True)
    sub.add_argument("--scheduler-file", default="", help="existing Dask cluster")
    sub.add_argument("--workers", type=int, default=2, help="LocalCluster workers")
    sub.add_argument(
        "--total",
        type=int,
        default=_total_from_environment(),
        help="generations of the run (default: $EVOCAMP_GENERATIONS)",
    )
    sub.set_defaults(func=cmd_segment)

    sub = commands.add_parser("keep", help=cmd_keep.__doc__)
    sub.add_argument("--state", required=True)
    sub.add_argument("--checkpoint", required=True)
    sub.add_argument("--segment", required=True)
    sub.add_argument("--logs", required=True, help="the run's log folder")
    sub.set_defaults(func=cmd_keep)

    sub = commands.add_parser("finalise", help=cmd_finalise.__doc__)
    sub.add_argument("--state", required=True)
    sub.add_argument("--checkpoint", required=True)
    sub.add_argument("--segments", required=True, help="folder of metrics segments")
    sub.add_argument("--metrics", required=True)
    sub.add_argument("--archive", required=True)
    sub.add_argument("--summary", required=True, help="JSON summary of the final state")
    sub.add_argument("--work", required=True, help="the run's working folder")
    sub.add_argument("--logs", required=True, help="the run's log folder")
    sub.set_defaults(func=cmd_finalise)

    sub = commands.add_parser("plot-run", help=cmd_plot_run.__doc__)
    sub.add_argument("--archive", required=True)
    sub.add_argument("--metrics", required=True)
    sub.add_argument("--outdir", required=True)
    sub.add_argument("--workers", type=int, default=1, help="evaluations at once")
    sub.set_defaults(func=cmd_plot_run)

    sub = commands.add_parser("status", help=cmd_status.__doc__)
    sub.add_argument(
        "folder",
        nargs="?",
        help="campaign folder (e.g. results/default) or results folder (every campaign in "
        "it); default: the campaign that --configfile names",
    )
    sub.add_argument(
        "--configfile",
        default="config/config.yaml",
        help="campaign file whose results to show when no folder is given "
        "(default: config/config.yaml)",
    )
    sub.add_argument("--no-plots", action="store_true", help="table only")
    sub.set_defaults(func=cmd_status)

    sub = commands.add_parser("compare", help=cmd_compare.__doc__)
    sub.add_argument("--metrics", nargs="+", required=True, help="metrics.csv of every run")
    sub.add_argument("--archives", nargs="+", required=True, help="archives for heatmaps")
    sub.add_argument("--figures", required=True, help="folder for curves and heatmaps")
    sub.add_argument("--tables", required=True, help="folder for final_metrics.*")
    sub.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    sub.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    sub.set_defaults(func=cmd_compare)
    return parser


def main(argv: list[str] | None = None, *, warm: bool = False) -> int:
    """Run one sub-command; known failures print one ``evocamp: error:`` message.

    ``warm`` says the process is a warm-start child (:mod:`evocamp.warmstart`); the
    closing log line says so.
    """
    from evocamp.config import ConfigError
    from evocamp.engine import EvaluationError
    from evocamp.optimizers import OptimizerError
    from evocamp.storage import CorruptFileError

    args = build_parser().parse_args(argv)
    began = time.perf_counter()
    try:
        args.func(args)
    except (ConfigError, EvaluationError, OptimizerError, CorruptFileError) as error:
        if getattr(error, "details", ""):
            print(error.details, file=sys.stderr, end="", flush=True)
        print(f"evocamp: error: {error}", file=sys.stderr, flush=True)
        return 1
    if args.command != "status":
        how = ", warm start" if warm else ""
        _log(f"[{args.command} took {time.perf_counter() - began:.2f} s{how}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
