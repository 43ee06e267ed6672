"""Command-line entry point ``evocamp``: argument parsing, one sub-command per step.

The Snakemake rules call these (``shell:``), and every one can be run by hand. The
steps themselves live in :mod:`evocamp.executors.steps` (the generation loop) and
:mod:`evocamp.reporting` (figures, tables, status). Heavy libraries (pyribs,
matplotlib, dask) are imported only by the steps that use them, so an evaluation
shard starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

from evocamp.base.errors import ConfigError, EvocampError
from evocamp.executors import steps
from evocamp.loop.step_settings import STEP_VARIABLE, StepSettings
from evocamp.model.layout import RunFolder

#: What ``evocamp --help`` says first.
DESCRIPTION = (
    "Evaluation campaigns for quality diversity, evolution strategies and Bayesian "
    "optimisation, run by Snakemake (snakemake --cores 8). The workflow's rules call "
    "the steps (init, evaluate, tell, segment, keep, finalise, reevaluate-shard, "
    "reevaluate, plot-run, compare); check-config, status, export and replay are for "
    "you. Every command and option: docs/cli.md."
)


def cmd_check_config(args) -> None:
    """Validate a campaign file (plugins imported) and print the runs it defines."""
    from evocamp.config import (
        experiments_of,
        read_yaml,
        seeds_of,
        stored_name_notices,
        validate_config,
    )

    written = read_yaml(args.config)
    config = validate_config(written)
    for notice in stored_name_notices(written):
        print(f"evocamp: warning: {notice}", file=sys.stderr)
    for algorithm, domain in experiments_of(config):
        for seed in seeds_of(config):
            print(f"{algorithm}/{domain}/seed{seed}")


def cmd_init(args) -> None:
    """Create a run's optimizer and write its generation-0 checkpoint."""
    steps.init_step(spec=json.loads(args.spec), output=args.output)


def cmd_evaluate(args) -> None:
    """Evaluate one shard of the batch stored in a checkpoint."""
    steps.evaluate_step(
        state=args.state,
        shard=args.shard,
        shards=args.shards,
        output=args.output,
        settings=args.settings,
    )


def cmd_tell(args) -> None:
    """Fold a generation's shards into the archive and write the next checkpoint."""
    steps.tell_step(
        state=args.state,
        shard_files=args.shard_files,
        output=args.output,
        total=args.total,
        full_every=args.full_every,
    )


def cmd_segment(args) -> None:
    """Dask (and asynchronous) mode: run generations after a checkpoint up to --until in
    one process."""
    if args.completions:
        from evocamp.executors.async_mode import run_async_segment

        run_async_segment(
            state_path=args.state,
            until=args.until,
            output=args.output,
            completions=args.completions,
            scheduler_file=args.scheduler_file or None,
            workers=args.workers,
            total=args.total,
            log=steps.progress,
            storage=args.settings.storage,
            full_every=args.full_every,
        )
        return
    from evocamp.executors.dask_mode import run_segment

    run_segment(
        state_path=args.state,
        until=args.until,
        output=args.output,
        shards=args.shards,
        scheduler_file=args.scheduler_file or None,
        workers=args.workers,
        total=args.total,
        log=steps.progress,
        storage=args.settings.storage,
        full_every=args.full_every,
    )


def cmd_replay(args) -> None:
    """Tell a finished asynchronous run again from its completion log and check that
    the archive is bitwise its own (exit status 1 if not)."""
    output = args.output or str(RunFolder(args.run).replayed_archive)
    if not steps.replay_step(run=args.run, output=output):
        sys.exit(1)


def cmd_keep(args) -> None:
    """Keep a checkpoint (every K-th generation), save its metrics window, delete the
    working files of the generations it covers and fold their job logs."""
    steps.keep_step(
        state=args.state,
        checkpoint=args.checkpoint,
        metrics_window=args.metrics_window,
        logs=args.logs,
        total=args.total,
        storage=args.settings.storage,
        full_every=args.full_every,
    )


def cmd_finalise(args) -> None:
    """Write the final archive and metrics.csv of a run and keep its last checkpoint."""
    steps.finalise_step(
        state=args.state,
        checkpoint=args.checkpoint,
        metrics_windows=args.metrics_windows,
        metrics=args.metrics,
        archive=args.archive,
        summary=args.summary,
        work=args.work,
        logs=args.logs,
        storage=args.settings.storage,
        reevaluation=args.reevaluation or None,
        full_every=args.full_every,
    )


def cmd_reevaluate_shard(args) -> None:
    """Evaluate a shard of a finished run's elites again (evaluation.reevaluate)."""
    steps.reevaluate_shard_step(
        state=args.state,
        shard=args.shard,
        shards=args.shards,
        output=args.output,
        repeats=args.repeats,
    )


def cmd_reevaluate(args) -> None:
    """Combine a finished run's re-evaluation shards: the corrected metrics."""
    steps.reevaluate_step(
        state=args.state, shard_files=args.shard_files, output=args.output, repeats=args.repeats
    )


def cmd_plot_run(args) -> None:
    """Draw a run's archive heatmap and metric curves (PNG and PDF)."""
    from evocamp.reporting.plotting import plot_run

    plot_run(archive=args.archive, metrics=args.metrics, outdir=args.outdir, workers=args.workers)


def cmd_compare(args) -> None:
    """Campaign comparison: metric curves with 95% bootstrap bands, side-by-side
    heatmaps (each on its own robust colour range), final values per seed, aggregates across
    domains, runtime-to-target ECDFs, and the tables (final metrics with significance
    marks, tests, aggregates, expected running times)."""
    from evocamp.reporting.campaign_figures import compare_campaign

    compare_campaign(
        metrics=args.metrics,
        archives=args.archives,
        figures=Path(args.figures),
        tables=Path(args.tables),
        samples=args.bootstrap,
        seed=args.seed,
        settings=json.loads(args.statistics),
    )


def cmd_status(args) -> None:
    """Progress of every run of a campaign (also while it runs), with a text plot of QD
    score against generations per run."""
    from evocamp.config import load_config_file
    from evocamp.reporting.status import status_report

    folder = args.folder
    if folder is not None and not Path(folder).is_dir():
        why = "is not a folder" if Path(folder).exists() else "does not exist"
        raise ConfigError(
            f"campaign folder {folder} {why}: name a campaign folder (e.g. results/default) "
            "or a results folder, or run `evocamp status` where you run snakemake"
        )
    if folder is None:
        configfile = Path(args.configfile)
        if not configfile.exists():
            raise ConfigError(
                f"no campaign folder given and no {configfile} here: run `evocamp status` "
                "where you run snakemake, or name a folder (e.g. results/default)"
            )
        config = load_config_file(configfile, check_plugins=False, check_results_dir=False)
        folder = Path(config["results_dir"]) / config["campaign"]
    print(status_report(folder, plots=not args.no_plots))


def cmd_export(args) -> None:
    """Write a campaign's metrics (or its elites, or its kept evaluations) as one
    table: CSV, or Parquet for a .parquet file (needs pyarrow); or, with `--to ioh
    DIR`, its BBOB runs in IOHprofiler's format (IOHanalyzer, iohinspector)."""
    from evocamp.results import export, export_ioh

    if len(args.to) == 2 and args.to[0] == "ioh":
        runs = export_ioh(args.folder, args.to[1])
        print(f"{runs} runs (IOHprofiler format) -> {args.to[1]}")
        return
    if len(args.to) != 1:
        raise ConfigError(
            f"--to {' '.join(args.to)}: give a .csv or .parquet file, or ioh and a folder"
        )
    rows = export(args.folder, args.to[0], what=args.what)
    print(f"{rows} rows ({args.what}) -> {args.to[0]}")


def _add_total(sub: argparse.ArgumentParser, settings: StepSettings) -> None:
    """The ``--total`` option of the steps that need the run's length."""
    sub.add_argument(
        "--total",
        type=int,
        default=settings.generations,
        help=f"generations of the run (default: the step settings' in ${STEP_VARIABLE})",
    )


def _add_full_every(sub: argparse.ArgumentParser, settings: StepSettings) -> None:
    """The ``--full-every`` option of the steps that write a whole state or keep one."""
    sub.add_argument(
        "--full-every",
        type=int,
        default=settings.full_every,
        help="checkpoint_full_every: a kept checkpoint's archive may be a delta of the "
        "previous kept one, in full at least every this many (default: the step "
        f"settings' in ${STEP_VARIABLE}, else 1: always in full)",
    )


def _literal(text: str) -> str:
    """``text`` as argparse prints it: argparse formats every argument's and
    sub-command's help with ``%`` (``%(default)s``), so a literal ``%`` is doubled."""
    return text.replace("%", "%%")


def _command(commands, name: str, func) -> argparse.ArgumentParser:
    """The sub-command ``name`` running ``func``, whose docstring is its line in
    ``evocamp --help`` and its description in ``evocamp <name> --help``."""
    text = inspect.cleandoc(func.__doc__)
    sub = commands.add_parser(name, help=_literal(text), description=text)
    sub.set_defaults(func=func)
    return sub


def build_parser() -> argparse.ArgumentParser:
    """The ``evocamp`` argument parser."""
    parser = argparse.ArgumentParser(prog="evocamp", description=DESCRIPTION)
    # The step settings, read once per command: its options' defaults, and every
    # command's args.settings (the shard step's concurrency and GPUs, the storage).
    settings = StepSettings.current()
    parser.set_defaults(settings=settings)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    sub = _command(commands, "check-config", cmd_check_config)
    sub.add_argument("config")

    sub = _command(commands, "init", cmd_init)
    sub.add_argument("--spec", required=True, help="run spec as JSON")
    sub.add_argument("--output", required=True)

    sub = _command(commands, "evaluate", cmd_evaluate)
    sub.add_argument("--state", required=True)
    sub.add_argument("--shard", type=int, required=True)
    sub.add_argument("--shards", type=int, required=True)
    sub.add_argument("--output", required=True)

    sub = _command(commands, "tell", cmd_tell)
    sub.add_argument("--state", required=True)
    sub.add_argument("--shard-files", nargs="+", required=True)
    sub.add_argument("--output", required=True)
    _add_total(sub, settings)
    _add_full_every(sub, settings)

    sub = _command(commands, "segment", cmd_segment)
    sub.add_argument("--state", required=True)
    sub.add_argument("--until", type=int, required=True, help="last generation to run")
    sub.add_argument("--shards", type=int, required=True, help="Dask tasks per generation")
    sub.add_argument("--output", required=True)
    sub.add_argument("--scheduler-file", default="", help="existing Dask cluster")
    sub.add_argument(
        "--workers",
        type=int,
        default=2,
        help="LocalCluster workers (Dask mode: 0 starts none, the segment evaluates itself)",
    )
    sub.add_argument(
        "--completions", default="", help="asynchronous mode: the run's completion log"
    )
    _add_total(sub, settings)
    _add_full_every(sub, settings)

    sub = _command(commands, "replay", cmd_replay)
    sub.add_argument("run", help="the run's folder (results/<campaign>/<alg>/<dom>/seed<k>)")
    sub.add_argument(
        "--output", default=None, help="archive to write (default: RUN/replayed_archive.h5)"
    )

    sub = _command(commands, "keep", cmd_keep)
    sub.add_argument("--state", required=True)
    sub.add_argument("--checkpoint", required=True)
    sub.add_argument("--metrics-window", required=True, help="the metrics window CSV to write")
    sub.add_argument("--logs", required=True, help="the run's log folder")
    _add_total(sub, settings)
    _add_full_every(sub, settings)

    sub = _command(commands, "finalise", cmd_finalise)
    sub.add_argument("--state", required=True)
    sub.add_argument("--checkpoint", required=True)
    sub.add_argument("--metrics-windows", required=True, help="folder of saved metrics windows")
    sub.add_argument("--metrics", required=True)
    sub.add_argument("--archive", required=True)
    sub.add_argument("--summary", required=True, help="JSON summary of the final state")
    sub.add_argument("--work", required=True, help="the run's working folder")
    sub.add_argument("--logs", required=True, help="the run's log folder")
    sub.add_argument(
        "--reevaluation", default="", help="the run's re-evaluation file (corrected metrics)"
    )
    _add_full_every(sub, settings)

    sub = _command(commands, "reevaluate-shard", cmd_reevaluate_shard)
    sub.add_argument("--state", required=True, help="the run's final state")
    sub.add_argument("--shard", type=int, required=True)
    sub.add_argument("--shards", type=int, required=True)
    sub.add_argument("--output", required=True, help="the shard file to write")
    sub.add_argument(
        "--repeats", type=int, required=True, help="evaluations of each elite (at least 1)"
    )

    sub = _command(commands, "reevaluate", cmd_reevaluate)
    sub.add_argument("--state", required=True, help="the run's final state")
    sub.add_argument("--shard-files", nargs="+", required=True, help="its re-evaluation shards")
    sub.add_argument("--output", required=True, help="the re-evaluation file to write")
    sub.add_argument(
        "--repeats", type=int, required=True, help="evaluations of each elite (at least 1)"
    )

    sub = _command(commands, "plot-run", cmd_plot_run)
    sub.add_argument("--archive", required=True)
    sub.add_argument("--metrics", required=True)
    sub.add_argument("--outdir", required=True)
    sub.add_argument("--workers", type=int, default=1, help="evaluations at once")

    sub = _command(commands, "status", cmd_status)
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

    sub = _command(commands, "export", cmd_export)
    sub.add_argument("folder", help="campaign folder (e.g. results/default)")
    sub.add_argument(
        "--to",
        required=True,
        nargs="+",
        metavar="FILE | ioh DIR",
        help="a .csv or .parquet file; or ioh and a folder: the BBOB runs in IOHprofiler's "
        "format (.json and .dat files IOHanalyzer and iohinspector load)",
    )
    sub.add_argument(
        "--what",
        choices=("campaign", "archives", "evaluations"),
        default="campaign",
        help="campaign: one row per run and generation (default); archives: the final "
        "elites; evaluations: every kept evaluation",
    )

    sub = _command(commands, "compare", cmd_compare)
    sub.add_argument("--metrics", nargs="+", required=True, help="metrics.csv of every run")
    sub.add_argument("--archives", nargs="+", required=True, help="archives for heatmaps")
    sub.add_argument("--figures", required=True, help="folder for curves and heatmaps")
    sub.add_argument("--tables", required=True, help="folder for final_metrics.*")
    sub.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    sub.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    sub.add_argument(
        "--statistics",
        default="{}",
        help="the campaign's figures keys as JSON (alpha, aggregate_metrics, targets, "
        "reference); missing keys take their defaults",
    )
    return parser


def main(argv: list[str] | None = None, *, warm: bool = False) -> int:
    """Run one sub-command; every :class:`~evocamp.base.errors.EvocampError` prints one
    ``evocamp: error:`` line (after its details, e.g. a user function's traceback).

    ``warm`` says the process is a warm-start child (:mod:`evocamp.warmstart`); the
    closing log line says so.
    """
    args = build_parser().parse_args(argv)
    began = time.perf_counter()
    try:
        args.func(args)
    except EvocampError as error:
        if error.details:
            print(error.details, file=sys.stderr, end="", flush=True)
        print(f"evocamp: error: {error}", file=sys.stderr, flush=True)
        return 1
    if args.command not in ("status", "export"):
        how = ", warm start" if warm else ""
        steps.log(f"[{args.command} took {time.perf_counter() - began:.2f} s{how}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
