import functools
import json
import os
import shlex
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

try:
    import evocamp
except ModuleNotFoundError:
    raise WorkflowError(
        "this workflow runs the evocamp package, which is not installed here: "
        "pip install -e . in a clone of its repository (or pip install evocamp), in the "
        "environment that runs snakemake"
    ) from None
from evocamp.base.errors import ConfigError
from evocamp.config import (
    experiments_of,
    has_space,
    run_spec,
    run_spec_json,
    read_yaml,
    seeds_of,
    stored_name_notices,
    validate_config,
)
from evocamp.executors.housekeeping import end_jobs_left_running, release_stale_locks
from evocamp.files.checkpoint import kept_for_spec
from evocamp.loop.step_settings import STEP_VARIABLE, StepSettings
from evocamp.model.layout import (
    CampaignFolder,
    is_kept,
    kept_generations,
    window_start,
)

min_version("9.0")

# Checkpoint rules re-evaluate input functions recursively; a window of up to 500
# generations needs more than Python's default recursion limit.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

# The schema is evocamp's own (src/evocamp/schemas, linked from workflow/schemas).
# Plugins are imported, and results_dir is checked to be writable, by the main process
# only: a misspelt module or a results_dir under /proc is reported here, before any
# job runs (jobs that Snakemake runs as processes of their own, e.g. on Slurm, parse
# this file again and need not check again).
try:
    for _configfile in workflow.configfiles:
        read_yaml(_configfile)  # refuses a key given twice (Snakemake keeps the last)
    _validated = validate_config(
        dict(config),
        check_plugins=workflow.is_main_process,
        check_results_dir=workflow.is_main_process,
    )
except ConfigError as error:
    raise WorkflowError(str(error)) from None
# Keys written under their run-spec name (a QD type's per-emitter batch_size): one
# line each saying what to write instead.
if workflow.is_main_process:
    for _notice in stored_name_notices(dict(config)):
        print(f"evocamp: warning: {_notice}", file=sys.stderr)
config.clear()
config.update(_validated)

if workflow.is_main_process and (_ended := end_jobs_left_running(os.getcwd())):
    print(
        f"evocamp: ended {len(_ended)} job(s) a killed Snakemake left running here: "
        + ", ".join(_ended),
        file=sys.stderr,
    )
if workflow.is_main_process and release_stale_locks(os.getcwd()):
    print(
        "evocamp: removed stale Snakemake locks (no other Snakemake runs here)",
        file=sys.stderr,
    )

GENERATIONS = config["generations"]
KEEP_EVERY = config["checkpoint_every"]
SHARDS = config["shards"]
# Shard mode: a generation's shards of a run in one Snakemake group only when asked
# (`group_shards`): group jobs cannot be Slurm array jobs (docs/hpc.md).
SHARD_GROUP = (
    "evaluate_{algorithm}_{domain}_{seed}_{gen}" if config["group_shards"] else None
)
# Evaluations of every elite in the final re-evaluation of each run (0: none).
REEVALUATE = config["evaluation"]["reevaluate"]
# Every path comes from evocamp.model.layout; RUN's paths are the rules' patterns.
CAMPAIGN = CampaignFolder(f"{config['results_dir']}/{config['campaign']}")
# A campaign with BBOB domains gets COCO's figures and tables too (SUITE_FIGURES).
SUITE = any(domain["type"] == "bbob" for domain in config["domains"].values())
# A campaign with domains over a search space gets the tuning figures and table (SPACE_FIGURES).
SPACE = any(has_space(domain) for domain in config["domains"].values())
RUN = CAMPAIGN.run("{algorithm}", "{domain}", "{seed}")
# Everything the workflow reads is under workflow/ (Snakemake's convention: a copy of
# Snakefile and workflow/ runs a campaign given with --configfile); the top-level envs/
# of the repository is a link to workflow/envs.
CONDA_ENV = "../envs/evocamp.yaml"
# The steps run `python -m evocamp` from this workflow's own source tree in a clone of
# the repository (src/ beside the Snakefile), else from the installed package.
SOURCE = f"{workflow.basedir}/src"
IN_CLONE = os.path.isdir(f"{SOURCE}/evocamp")
PACKAGE = f"{SOURCE}/evocamp" if IN_CLONE else os.path.dirname(evocamp.__file__)
# Figure rules depend on their code: editing it reruns figures only.
FIGURE_CODE = [
    f"{PACKAGE}/reporting/{name}.py"
    for name in (
        "plotting",
        "campaign_figures",
        "comparison",
        "statistics",
        "significance",
        "aggregates",
        "runtime_to_target",
        "suite",
        "spaces",
        "tables",
    )
]
# Evaluations that can run at once, for the utilisation in the timing figures.
WORKERS = (
    max(config["dask"]["workers"], 1) if config["mode"] in ("dask", "async") else SHARDS
)
# In a clone, every step runs `python -m evocamp` from this workflow's own source tree,
# also in a `--sdm conda` environment (which holds the dependencies only). The step
# settings (generations, for "generation g/N"; evaluation.max_failed_fraction, which
# only stops a run; checkpoint_full_every, how kept checkpoints store their archive;
# the storage keys) reach every step through this prefix, in one variable
# (evocamp.loop.step_settings): they change no result, so they are no part of the run
# spec or of any rule's params, and raising `generations` reruns nothing.
# (shell.prefix formats its text once more, hence the doubled braces.)
STEP_SETTINGS = shlex.quote(StepSettings.from_config(config).to_json())
shell.prefix(
    "set -euo pipefail; "
    + (
        f"export PYTHONPATH={SOURCE}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
        if IN_CLONE
        else ""
    )
    + f"export {STEP_VARIABLE}={STEP_SETTINGS}; ".replace("{", "{{").replace("}", "}}")
)


wildcard_constraints:
    algorithm="[A-Za-z0-9][A-Za-z0-9_]*",
    domain="[A-Za-z0-9][A-Za-z0-9_]*",
    seed=r"\d+",
    gen=r"\d{6}",
    shard=r"\d{3}",


def runs():
    """Every run of the campaign (a RunFolder each)."""
    return [
        CAMPAIGN.run(algorithm, domain, seed)
        for algorithm, domain in experiments_of(config)
        for seed in seeds_of(config)
    ]


def run_of(wildcards):
    """The run named by ``wildcards``."""
    return CAMPAIGN.run(wildcards.algorithm, wildcards.domain, wildcards.seed)


@functools.lru_cache(maxsize=None)
def spec_of(algorithm, domain, seed):
    """The run spec of one run, computed once per Snakemake process."""
    return run_spec(config, algorithm=algorithm, domain=domain, seed=int(seed))


def require_kept(wildcards, generation):
    """Wait for the kept checkpoint of ``generation`` (a checkpoint rule).

    A kept checkpoint already on disk, with its metrics window, written for the same
    run spec, is used as it is: going through the checkpoint rule would make Snakemake
    plan every finished window again on each resume (minutes for thousands of
    generations). One written for another spec (the configuration changed) goes
    through the rule, so that Snakemake recomputes it.
    """
    folder = run_of(wildcards)
    path = str(folder.checkpoint(generation))
    spec = spec_of(wildcards.algorithm, wildcards.domain, wildcards.seed)
    if folder.metrics_window(generation).exists() and kept_for_spec(path, spec):
        return path
    checkpoints.keep_checkpoint.get(
        algorithm=wildcards.algorithm,
        domain=wildcards.domain,
        seed=wildcards.seed,
        gen=f"{generation:06d}",
    )
    return path


def previous_state(wildcards):
    """The checkpoint whose batch generation ``wildcards.gen`` evaluates.

    Kept checkpoints (generation 0, every K-th) are plain source files reached
    through the checkpoint rule, so Snakemake never plans further back than the
    last kept one. A kept final checkpoint of a finished run lets a raised
    ``generations`` continue from there.
    """
    folder = run_of(wildcards)
    previous = int(wildcards.gen) - 1
    if previous == 0:
        return str(folder.checkpoint(0))
    if is_kept(previous, every=KEEP_EVERY):
        return require_kept(wildcards, previous)
    if folder.checkpoint(previous).exists():
        return str(folder.checkpoint(previous))
    return str(folder.work_state(previous))


def segment_start(wildcards):
    """Dask mode: the checkpoint a segment ending at ``wildcards.gen`` starts from.

    Segments end at every K-th generation and at the last one; a kept final
    checkpoint of a shorter earlier run inside the segment is used when present.
    """
    folder = run_of(wildcards)
    end = int(wildcards.gen)
    start = window_start(end, every=KEEP_EVERY)
    for generation in range(end - 1, start, -1):
        if folder.checkpoint(generation).exists():
            return str(folder.checkpoint(generation))
    if start == 0:
        return str(folder.checkpoint(0))
    return require_kept(wildcards, start)


def completion_log_option(wildcards):
    """Asynchronous mode: the segment's ``--completions`` argument (the run's log)."""
    if config["mode"] != "async":
        return ""
    return f"--completions {run_of(wildcards).completions}"


def dask_threads(wildcards):
    """Cores of a Dask-mode segment job: its LocalCluster's workers, each running
    evaluation.concurrency evaluations of the domain's ranks at once (`dask.workers: 0`:
    the segment evaluates in its own process, as one worker), or 1 with an external
    cluster."""
    if config["dask"]["scheduler_file"]:
        return 1
    return max(config["dask"]["workers"], 1) * shard_threads(wildcards)


def dask_gpus(wildcards):
    """GPUs of a Dask-mode segment job: its LocalCluster's workers' (or its own process's,
    `dask.workers: 0`), 0 with an external cluster."""
    if config["dask"]["scheduler_file"]:
        return 0
    return max(config["dask"]["workers"], 1) * shard_gpus(wildcards)


def final_state(wildcards):
    """The state after the last generation, once every kept checkpoint before it exists."""
    for boundary in kept_generations(GENERATIONS, every=KEEP_EVERY):
        require_kept(wildcards, boundary)
    folder = run_of(wildcards)
    if is_kept(GENERATIONS, every=KEEP_EVERY):
        return str(folder.checkpoint(GENERATIONS))
    return str(folder.work_state(GENERATIONS))


def reevaluation_path(wildcards):
    """The run's re-evaluation file (corrected metrics); "" when the campaign asks none."""
    return str(run_of(wildcards).reevaluation(GENERATIONS)) if REEVALUATE else ""


def reevaluation_shard_files(wildcards):
    """The shards of a run's final re-evaluation (one per evaluation shard)."""
    folder = run_of(wildcards)
    return [
        str(folder.reevaluation_shard(GENERATIONS, shard)) for shard in range(SHARDS)
    ]


def reevaluation_file(wildcards):
    """The re-evaluation file as an input of ``finalise`` (none when not asked)."""
    return [reevaluation_path(wildcards)] if REEVALUATE else []


def final_checkpoint(wildcards):
    return str(run_of(wildcards).checkpoint(GENERATIONS))


def shard_files(wildcards):
    folder = run_of(wildcards)
    return [str(folder.shard(wildcards.gen, shard)) for shard in range(SHARDS)]


def spec_json(wildcards):
    """The run spec (everything that fixes a run's results) as JSON."""
    return run_spec_json(spec_of(wildcards.algorithm, wildcards.domain, wildcards.seed))


def shard_mem_mb(wildcards, attempt):
    """Memory of an evaluation job; a retry (e.g. after an out-of-memory kill) asks more."""
    return 500 * attempt


def shard_runtime(wildcards, attempt):
    """Minutes of an evaluation job; a retry (e.g. after a Slurm time-limit kill) asks more."""
    return 30 * attempt


def shard_threads(wildcards):
    """Cores of an evaluation job: evaluation.concurrency evaluations at once, each of
    its domain's ranks (type command; 1 otherwise)."""
    ranks = config["domains"][wildcards.domain].get("ranks") or 1
    return config["evaluation"]["concurrency"] * ranks


def shard_gpus(wildcards):
    """GPUs of an evaluation job: evaluation.gpus_per_evaluation for each evaluation
    at once (0: none asked; Slurm's --gpus)."""
    return (
        config["evaluation"]["concurrency"]
        * config["evaluation"]["gpus_per_evaluation"]
    )


def all_run_files(name):
    """One file of every run: its RunFolder attribute ``name`` (e.g. ``"metrics"``)."""
    return [str(getattr(run, name)) for run in runs()]


def heatmap_archives():
    """Final archives of the seed shown in the campaign heatmaps."""
    seed = config["figures"]["heatmap_seed"]
    if seed is None:
        seed = seeds_of(config)[0]
    return [
        str(CAMPAIGN.run(algorithm, domain, seed).archive)
        for algorithm, domain in experiments_of(config)
    ]


def figure_targets():
    """Every figure and table: per run (by figure and format, then run; unless
    `figures.per_run` is false) and for the campaign."""
    per_run = (
        zip(*(run.figure_files() for run in runs()))
        if config["figures"]["per_run"]
        else ()
    )
    targets = [path for paths in per_run for path in paths]
    targets += CAMPAIGN.figure_files(suite=SUITE, space=SPACE)
    targets += CAMPAIGN.table_files(suite=SUITE, space=SPACE)
    return [str(path) for path in targets]


# The report's entries among the figures and tables (evocamp.model.layout names them
# all): file name -> (caption in workflow/report, labels).
RUN_REPORT = {
    "heatmap.png": ("run_heatmap.rst", {"figure": "heatmap", "seed": "{seed}"}),
    "curves.png": ("run_curves.rst", {"figure": "curves", "seed": "{seed}"}),
    "timing.png": ("run_timing.rst", {"figure": "timing", "seed": "{seed}"}),
}
CAMPAIGN_REPORT = {
    "curves.png": ("campaign_curves.rst", {"figure": "metric curves"}),
    "heatmaps.png": ("campaign_heatmaps.rst", {"figure": "final archives"}),
    "seeds.png": ("campaign_seeds.rst", {"figure": "final values per seed"}),
    "aggregate.png": (
        "campaign_aggregate.rst",
        {"figure": "aggregates across domains"},
    ),
    "ecdf.png": ("campaign_ecdf.rst", {"figure": "runtime to target"}),
    "bbob_ecdf.png": ("campaign_bbob_ecdf.rst", {"figure": "BBOB runtime ECDFs"}),
    "critical_difference.png": (
        "campaign_critical_difference.rst",
        {"figure": "BBOB ranks, critical difference"},
    ),
    "final_metrics.html": ("campaign_table.rst", {"figure": "final metrics table"}),
    "final_metrics.csv": ("campaign_table.rst", {"figure": "final metrics table, CSV"}),
    "tests.csv": ("campaign_tests.rst", {"figure": "significance tests"}),
    "aggregate.csv": ("campaign_aggregate_table.rst", {"figure": "aggregates table"}),
    "ert.csv": ("campaign_ert.rst", {"figure": "expected running time table"}),
}


def reported(path, entries, **where):
    """``path`` as an output: a report entry when ``entries`` names it."""
    if path.name not in entries:
        return str(path)
    caption, labels = entries[path.name]
    return report(str(path), caption=f"../report/{caption}", labels=labels, **where)


def run_figure_outputs():
    """``plot_run``'s outputs, named ``<figure>_<format>``: the PNGs in the report."""
    return {
        path.name.replace(".", "_"): reported(
            path, RUN_REPORT, category="Runs", subcategory="{algorithm} on {domain}"
        )
        for path in RUN.figure_files()
    }


def campaign_outputs():
    """``compare``'s outputs (every campaign figure and table), named
    ``<folder>_<name>_<format>``: those of CAMPAIGN_REPORT in the report."""
    return {
        f"{path.parent.name}_{path.name.replace('.', '_')}": reported(
            path, CAMPAIGN_REPORT, category="Campaign"
        )
        for path in CAMPAIGN.figure_files(suite=SUITE, space=SPACE)
        + CAMPAIGN.table_files(suite=SUITE, space=SPACE)
    }


def statistics_settings():
    """The figures keys the campaign statistics read, as JSON for `evocamp compare`."""
    keys = ("alpha", "aggregate_metrics", "targets", "reference")
    return json.dumps({key: config["figures"][key] for key in keys}, sort_keys=True)


def folder_of_figures(wildcards, output):
    return os.path.dirname(output.figures_curves_png)


def folder_of_tables(wildcards, output):
    return os.path.dirname(output.tables_final_metrics_csv)


def run_targets(wildcards):
    """The results of every run: archives, metrics and summaries (no figures)."""
    return (
        all_run_files("archive")
        + all_run_files("metrics")
        + [str(run.summary(GENERATIONS)) for run in runs()]
    )


def campaign_targets(wildcards):
    """The default target: results of every run, then figures and tables."""
    return run_targets(wildcards) + figure_targets()
