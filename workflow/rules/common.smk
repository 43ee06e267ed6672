import functools
import json
import os
import shlex
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from evocamp.base.errors import ConfigError
from evocamp.config import (
    experiments_of,
    run_spec,
    run_spec_json,
    seeds_of,
    validate_config,
)
from evocamp.executors.housekeeping import release_stale_locks
from evocamp.files.evaluations import SETTINGS_VARIABLE, EvaluationSettings
from evocamp.files.checkpoint import kept_for_spec

min_version("9.0")

# Checkpoint rules re-evaluate input functions recursively; a window of up to 500
# generations needs more than Python's default recursion limit.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

# The schema is evocamp's own (src/evocamp/schemas, linked from workflow/schemas).
# Plugins are imported by the main process only: a misspelt module is reported here,
# before any job runs (jobs that Snakemake runs as processes of their own, e.g. on
# Slurm, parse this file again and need not import them again).
try:
    _validated = validate_config(dict(config), check_plugins=workflow.is_main_process)
except ConfigError as error:
    raise WorkflowError(str(error)) from None
config.clear()
config.update(_validated)

if workflow.is_main_process and release_stale_locks(os.getcwd()):
    print(
        "evocamp: removed stale Snakemake locks (no other Snakemake runs here)",
        file=sys.stderr,
    )

GENERATIONS = config["generations"]
KEEP_EVERY = config["checkpoint_every"]
SHARDS = config["shards"]
RESULTS = f"{config['results_dir']}/{config['campaign']}"
RUN = f"{RESULTS}/{{algorithm}}/{{domain}}/seed{{seed}}"
RUN_LOGS = f"{RESULTS}/logs/{{algorithm}}/{{domain}}/seed{{seed}}"
CONDA_ENV = "../../envs/evocamp.yaml"
# Figure rules depend on their code: editing it reruns figures only.
FIGURE_CODE = [
    f"{workflow.basedir}/src/evocamp/reporting/plotting.py",
    f"{workflow.basedir}/src/evocamp/reporting/comparison.py",
    f"{workflow.basedir}/src/evocamp/reporting/statistics.py",
    f"{workflow.basedir}/src/evocamp/reporting/significance.py",
    f"{workflow.basedir}/src/evocamp/reporting/aggregates.py",
    f"{workflow.basedir}/src/evocamp/reporting/runtime_to_target.py",
    f"{workflow.basedir}/src/evocamp/reporting/tables.py",
]
# Evaluations that can run at once, for the utilisation in the timing figures.
WORKERS = config["dask"]["workers"] if config["mode"] in ("dask", "async") else SHARDS
# Every step runs `python -m evocamp` from this workflow's own source tree, also in a
# `--sdm conda` environment (which holds the dependencies only). The tell steps print
# "generation g/N"; N reaches them through this prefix so that raising `generations`
# changes no rule's params or code (nothing reruns).
# The keys keep_evaluations and evaluations reach them the same way: they change no
# result, so they are no part of the run spec or of any rule's params.
# (shell.prefix formats its text once more, hence the doubled braces.)
EVALUATIONS = shlex.quote(EvaluationSettings.from_config(config).to_json())
shell.prefix(
    "set -euo pipefail; "
    f"export PYTHONPATH={workflow.basedir}/src${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
    f"export EVOCAMP_GENERATIONS={GENERATIONS}; "
    + f"export {SETTINGS_VARIABLE}={EVALUATIONS}; ".replace("{", "{{").replace(
        "}", "}}"
    )
)


wildcard_constraints:
    algorithm="[A-Za-z0-9][A-Za-z0-9_]*",
    domain="[A-Za-z0-9][A-Za-z0-9_]*",
    seed=r"\d+",
    gen=r"\d{6}",
    shard=r"\d{3}",


def runs():
    """Every run of the campaign as wildcard values."""
    return [
        {"algorithm": algorithm, "domain": domain, "seed": seed}
        for algorithm, domain in experiments_of(config)
        for seed in seeds_of(config)
    ]


def in_run(tail):
    """Path pattern of a file in a run's folder (wildcards algorithm, domain, seed)."""
    return f"{RUN}/{tail}"


def in_run_logs(tail):
    """Path pattern of a log file of a run."""
    return f"{RUN_LOGS}/{tail}"


def run_file(wildcards, tail):
    """Path of a file of the run named by ``wildcards``."""
    return in_run(tail).format(
        algorithm=wildcards.algorithm, domain=wildcards.domain, seed=wildcards.seed
    )


def kept_checkpoint(wildcards, generation):
    return run_file(wildcards, f"checkpoints/gen_{generation:06d}.h5")


def work_state(wildcards, generation):
    return run_file(wildcards, f"work/state_{generation:06d}.h5")


@functools.lru_cache(maxsize=None)
def spec_of(algorithm, domain, seed):
    """The run spec of one run, computed once per Snakemake process."""
    return run_spec(config, algorithm=algorithm, domain=domain, seed=int(seed))


def require_kept(wildcards, generation):
    """Wait for the kept checkpoint of ``generation`` (a checkpoint rule).

    A kept checkpoint already on disk, with its metrics segment, written for the same
    run spec, is used as it is: going through the checkpoint rule would make Snakemake
    plan every finished window again on each resume (minutes for thousands of
    generations). One written for another spec (the configuration changed) goes
    through the rule, so that Snakemake recomputes it.
    """
    path = kept_checkpoint(wildcards, generation)
    segment = run_file(wildcards, f"metrics/segment_{generation:06d}.csv")
    spec = spec_of(wildcards.algorithm, wildcards.domain, wildcards.seed)
    if os.path.exists(segment) and kept_for_spec(path, spec):
        return path
    checkpoints.keep_checkpoint.get(
        algorithm=wildcards.algorithm,
        domain=wildcards.domain,
        seed=wildcards.seed,
        gen=f"{generation:06d}",
    )
    return kept_checkpoint(wildcards, generation)


def previous_state(wildcards):
    """The checkpoint whose batch generation ``wildcards.gen`` evaluates.

    Kept checkpoints (generation 0, every K-th) are plain source files reached
    through the checkpoint rule, so Snakemake never plans further back than the
    last kept one. A kept final checkpoint of a finished run lets a raised
    ``generations`` continue from there.
    """
    previous = int(wildcards.gen) - 1
    if previous == 0:
        return kept_checkpoint(wildcards, 0)
    if previous % KEEP_EVERY == 0:
        return require_kept(wildcards, previous)
    if os.path.exists(kept_checkpoint(wildcards, previous)):
        return kept_checkpoint(wildcards, previous)
    return work_state(wildcards, previous)


def segment_start(wildcards):
    """Dask mode: the checkpoint a segment ending at ``wildcards.gen`` starts from.

    Segments end at every K-th generation and at the last one; a kept final
    checkpoint of a shorter earlier run inside the segment is used when present.
    """
    end = int(wildcards.gen)
    start = (end - 1) // KEEP_EVERY * KEEP_EVERY
    for generation in range(end - 1, start, -1):
        if os.path.exists(kept_checkpoint(wildcards, generation)):
            return kept_checkpoint(wildcards, generation)
    if start == 0:
        return kept_checkpoint(wildcards, 0)
    return require_kept(wildcards, start)


def completion_log_option(wildcards):
    """Asynchronous mode: the segment's ``--completions`` argument (the run's log)."""
    if config["mode"] != "async":
        return ""
    return f"--completions {run_file(wildcards, 'completions.jsonl')}"


def dask_threads(wildcards):
    """Cores of a Dask-mode segment job: its LocalCluster, or 1 with an external cluster."""
    if config["dask"]["scheduler_file"]:
        return 1
    return config["dask"]["workers"]


def final_state(wildcards):
    """The state after the last generation, once every kept checkpoint before it exists."""
    for boundary in range(KEEP_EVERY, GENERATIONS + 1, KEEP_EVERY):
        require_kept(wildcards, boundary)
    if GENERATIONS % KEEP_EVERY == 0:
        return kept_checkpoint(wildcards, GENERATIONS)
    return work_state(wildcards, GENERATIONS)


def final_checkpoint(wildcards):
    return kept_checkpoint(wildcards, GENERATIONS)


def shard_files(wildcards):
    return [
        run_file(wildcards, f"work/gen_{wildcards.gen}/shard_{shard:03d}.h5")
        for shard in range(SHARDS)
    ]


def spec_json(wildcards):
    """The run spec (everything that fixes a run's results) as JSON."""
    return run_spec_json(spec_of(wildcards.algorithm, wildcards.domain, wildcards.seed))


def shard_mem_mb(wildcards, attempt):
    """Memory of an evaluation job; a retry (e.g. after an out-of-memory kill) asks more."""
    return 500 * attempt


def all_run_files(tail):
    """One file of every run of the campaign."""
    return [in_run(tail).format(**run) for run in runs()]


def heatmap_archives():
    """Final archives of the seed shown in the campaign heatmaps."""
    seed = config["figures"]["heatmap_seed"]
    if seed is None:
        seed = seeds_of(config)[0]
    return [
        in_run("archive.h5").format(algorithm=algorithm, domain=domain, seed=seed)
        for algorithm, domain in experiments_of(config)
    ]


def figure_targets():
    """Every figure and table: per run and for the campaign."""
    targets = []
    for name in ("heatmap", "curves", "timing"):
        for suffix in ("pdf", "png"):
            targets += all_run_files(f"figures/{name}.{suffix}")
    for name in ("curves", "heatmaps", "seeds", "aggregate", "ecdf"):
        targets += [f"{RESULTS}/figures/{name}.pdf", f"{RESULTS}/figures/{name}.png"]
    for suffix in ("csv", "md", "tex"):
        targets.append(f"{RESULTS}/tables/final_metrics.{suffix}")
    for name in ("tests", "aggregate", "ert"):
        targets += [f"{RESULTS}/tables/{name}.csv", f"{RESULTS}/tables/{name}.md"]
    return targets


def statistics_settings():
    """The figures keys the campaign statistics read, as JSON for `evocamp compare`."""
    keys = ("alpha", "aggregate_metrics", "targets", "reference")
    return json.dumps({key: config["figures"][key] for key in keys}, sort_keys=True)


def folder_of_curves(wildcards, output):
    return os.path.dirname(output.curves)


def folder_of_tables(wildcards, output):
    return os.path.dirname(output.table_csv)


def run_targets(wildcards):
    """The results of every run: archives, metrics and summaries (no figures)."""
    return (
        all_run_files("archive.h5")
        + all_run_files("metrics.csv")
        + all_run_files(f"finished/gen_{GENERATIONS:06d}.json")
    )


def campaign_targets(wildcards):
    """The default target: results of every run, then figures and tables."""
    return run_targets(wildcards) + figure_targets()
