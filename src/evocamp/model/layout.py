"""Where a campaign's files are, and the window rules: the one module that knows a
run folder.

A campaign folder (``<results_dir>/<campaign>``) holds one folder per run, the runs'
job logs and the campaign's figures and tables::

    <campaign>/
      <algorithm>/<domain>/seed<k>/      a run (RunFolder)
        checkpoints/gen_<g>.h5           kept checkpoints: generation 0, every K-th, the last
        work/state_<g>.h5                working states between kept checkpoints
        work/gen_<g>/shard_<s>.h5        a generation's shard results (shard mode)
        work/gen_<g>/shard_<s>.h5.journal  a running shard's finished calls (files/journal.py)
        metrics/segment_<g>.csv          the metrics window of each kept checkpoint
        evaluations/segment_<g>.h5       kept evaluations of each window (indexed by evaluations.h5)
        completions.jsonl                an asynchronous run's completion log
        archive.h5, metrics.csv, evaluations.h5, finished/gen_<N>.json
                                         a finished run's results (N: its last generation)
        figures/heatmap.pdf, ...         the run's figures (RUN_FIGURES)
      logs/<algorithm>/<domain>/seed<k>/ the run's job logs: gen_<g>/<step>.log,
                                         keep_<g>.log, window_<g>.log (folded), ...
      logs/compare.log
      figures/curves.pdf, ...            the campaign's figures (CAMPAIGN_FIGURES)
      tables/final_metrics.csv, ...      the campaign's tables (CAMPAIGN_TABLES)
      figures/bbob_ecdf.pdf, ...         with BBOB domains (SUITE_FIGURES, SUITE_TABLES)

Generations are written with six digits, shards with three. Every path method takes a
number or a string, kept as it is: a Snakemake wildcard such as ``"{gen}"``, so that
the workflow's rules and the Python steps spell paths the same way.

**Windows.** The checkpoints of generation 0 and of every ``checkpoint_every``-th
generation are kept (:func:`is_kept`); the generations after a kept one, up to and
including the next kept one (or the run's last), are a *window*: their working files
and job logs exist until its end is kept, and each generation's metrics row joins the
window's metrics, saved with the kept checkpoint that closes it (:func:`closes_window`);
its last state is written whole (:func:`ends_window`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Formats every figure is written in.
FIGURE_FORMATS = ("pdf", "png")
#: Every run's figures (``evocamp plot-run``).
RUN_FIGURES = ("heatmap", "curves", "timing")
#: The campaign's figures (``evocamp compare``).
CAMPAIGN_FIGURES = ("curves", "heatmaps", "seeds", "aggregate", "ecdf")
#: The campaign's tables and the formats of each (``evocamp compare``).
CAMPAIGN_TABLES = {
    "final_metrics": ("csv", "md", "tex", "html"),
    "tests": ("csv", "md"),
    "aggregate": ("csv", "md"),
    "ert": ("csv", "md"),
}
#: The figures and tables added for a campaign with BBOB domains (COCO-style:
#: ``evocamp.reporting.suite``).
SUITE_FIGURES = ("bbob_ecdf", "critical_difference")
SUITE_TABLES = {"bbob_ert": ("csv", "md"), "ranks": ("csv", "md")}
#: The figures and tables added for a campaign with domains over a search space
#: (``evocamp.reporting.spaces``).
SPACE_FIGURES = ("optimisation_history", "parallel_coordinates")
SPACE_TABLES = {"best_configurations": ("csv", "md")}


# --- the window rules --------------------------------------------------------------


def is_kept(generation: int, *, every: int) -> bool:
    """Whether the checkpoint of ``generation`` is kept: generation 0 and every
    ``every``-th (the run's last is kept too, by ``finalise``)."""
    return generation % every == 0


def closes_window(generation: int, *, every: int) -> bool:
    """Whether ``generation`` closes a window: a positive multiple of ``every``, whose
    metrics window is saved with its checkpoint (the next generation starts a new
    one)."""
    return generation > 0 and is_kept(generation, every=every)


def window_start(generation: int, *, every: int) -> int:
    """The kept generation that the window holding ``generation`` (positive) starts
    from: the last multiple of ``every`` before it."""
    return (generation - 1) // every * every


def ends_window(generation: int, *, every: int, total: int) -> bool:
    """Whether ``generation`` is the last of its window in a run of ``total``
    generations: a kept generation or the run's last (its state is written whole)."""
    return is_kept(generation, every=every) or generation >= total


def kept_generations(total: int, *, every: int) -> range:
    """The positive kept generations of a run of ``total`` generations, oldest first."""
    return range(every, total + 1, every)


# --- numbered names ----------------------------------------------------------------


@dataclass(frozen=True)
class Numbered:
    """A kind of name with a number: ``<prefix><number><suffix>``, the number written
    with ``digits`` digits (``gen_000012.h5``)."""

    prefix: str
    suffix: str = ""
    digits: int = 6

    def name(self, number: int | str) -> str:
        """The name of ``number``; a string (e.g. a wildcard ``"{gen}"``) is kept as it is."""
        text = f"{number:0{self.digits}d}" if isinstance(number, int) else number
        return f"{self.prefix}{text}{self.suffix}"

    def number_of(self, name: str) -> int | None:
        """The number in ``name``, or ``None`` when ``name`` is not of this kind."""
        if not (name.startswith(self.prefix) and name.endswith(self.suffix)):
            return None
        text = name[len(self.prefix) : len(name) - len(self.suffix)]
        return int(text) if text.isdigit() else None

    def numbered_in(
        self, folder: str | Path, *, up_to: int | None = None
    ) -> list[tuple[int, Path]]:
        """``(number, path)`` of the entries of ``folder`` of this kind (numbers
        ``<= up_to`` when given), by number; none when the folder does not exist."""
        found = []
        for path in Path(folder).glob(f"{self.prefix}*{self.suffix}"):
            number = self.number_of(path.name)
            if number is not None and (up_to is None or number <= up_to):
                found.append((number, path))
        return sorted(found)

    def in_folder(self, folder: str | Path, *, up_to: int | None = None) -> list[Path]:
        """The entries of ``folder`` of this kind (numbers ``<= up_to`` when given), by
        number."""
        return [path for _, path in self.numbered_in(folder, up_to=up_to)]


#: Kept checkpoints (``checkpoints/``) and finished-run summaries (``finished/``).
CHECKPOINT = Numbered("gen_", ".h5")
SUMMARY = Numbered("gen_", ".json")
#: A finished run's re-evaluated elites (``evaluation.reevaluate``, ``finished/``), and
#: a shard of them (``work/gen_<g>/``).
REEVALUATION = Numbered("reevaluation_", ".h5")
REEVALUATION_SHARD = Numbered("reevaluation_", ".h5", digits=3)
#: Working files (``work/``): states and the folders of a generation's shards.
WORK_STATE = Numbered("state_", ".h5")
SHARD_FOLDER = Numbered("gen_")
SHARD = Numbered("shard_", ".h5", digits=3)
#: Saved windows: metrics (``metrics/``) and kept evaluations (``evaluations/``); their
#: files keep the name ``segment_<g>`` of earlier versions (runs written then resume).
METRICS_WINDOW = Numbered("segment_", ".csv")
EVALUATION_WINDOW = Numbered("segment_", ".h5")
#: Job logs: a generation's folder, a keep step's log, a folded window.
GENERATION_LOGS = Numbered("gen_")
KEEP_LOG = Numbered("keep_", ".log")
WINDOW_LOG = Numbered("window_", ".log")


# --- folders -----------------------------------------------------------------------


@dataclass(frozen=True)
class RunFolder:
    """Every path of one run (``<campaign>/<algorithm>/<domain>/seed<k>``).

    ``path`` may hold Snakemake wildcards (``{algorithm}``, ...): the paths are then
    the rules' patterns.
    """

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def holding(cls, path: str | Path) -> RunFolder:
        """The run of a file directly in one of its folders (a checkpoint, a working
        state, a saved window, a summary)."""
        return cls(Path(path).parent.parent)

    # who the run is

    @property
    def campaign(self) -> CampaignFolder:
        """The campaign folder the run belongs to."""
        return CampaignFolder(self.path.parents[2])

    @property
    def relative(self) -> Path:
        """``<algorithm>/<domain>/seed<k>``: the run's path in its campaign."""
        return Path(*self.path.parts[-3:])

    @property
    def algorithm(self) -> str:
        """The run's algorithm (its name in the campaign)."""
        return self.path.parts[-3]

    @property
    def domain(self) -> str:
        """The run's domain (its name in the campaign)."""
        return self.path.parts[-2]

    @property
    def seed(self) -> int:
        """The run's seed number."""
        return int(self.path.name.removeprefix("seed"))

    # results

    @property
    def archive(self) -> Path:
        """A finished run's elites (``archive.h5``)."""
        return self.path / "archive.h5"

    @property
    def metrics(self) -> Path:
        """A finished run's metrics, one row per generation (``metrics.csv``)."""
        return self.path / "metrics.csv"

    @property
    def evaluations(self) -> Path:
        """A finished run's kept evaluations (``evaluations.h5``)."""
        return self.path / "evaluations.h5"

    @property
    def replayed_archive(self) -> Path:
        """Where ``evocamp replay`` writes its archive unless told otherwise."""
        return self.path / "replayed_archive.h5"

    @property
    def completions(self) -> Path:
        """An asynchronous run's completion log."""
        return self.path / "completions.jsonl"

    @property
    def finished_folder(self) -> Path:
        """The folder of the run's summaries."""
        return self.path / "finished"

    def summary(self, generation: int | str) -> Path:
        """The summary of a run finished at ``generation``: ``finished/gen_<g>.json``."""
        return self.finished_folder / SUMMARY.name(generation)

    def reevaluation(self, generation: int | str) -> Path:
        """The re-evaluation of the elites of a run finished at ``generation``
        (``evaluation.reevaluate``): ``finished/reevaluation_<g>.h5``."""
        return self.finished_folder / REEVALUATION.name(generation)

    def summaries(self) -> list[Path]:
        """The summaries written so far, oldest first."""
        return SUMMARY.in_folder(self.finished_folder)

    # checkpoints and working files

    @property
    def checkpoints(self) -> Path:
        """The folder of the kept checkpoints."""
        return self.path / "checkpoints"

    def checkpoint(self, generation: int | str) -> Path:
        """A kept checkpoint: ``checkpoints/gen_<g>.h5``."""
        return self.checkpoints / CHECKPOINT.name(generation)

    @property
    def work(self) -> Path:
        """The folder of the working files (states, shards) of the current window."""
        return self.path / "work"

    def work_state(self, generation: int | str) -> Path:
        """A working state: ``work/state_<g>.h5``."""
        return self.work / WORK_STATE.name(generation)

    def work_states(self) -> list[Path]:
        """The working states on disk, oldest first."""
        return WORK_STATE.in_folder(self.work)

    def states_newest_first(self) -> list[Path]:
        """Every state on disk, working states and kept checkpoints, newest first (of
        one generation, the working state first)."""
        states = WORK_STATE.numbered_in(self.work) + CHECKPOINT.numbered_in(self.checkpoints)
        return [path for _, path in sorted(states, key=lambda state: state[0], reverse=True)]

    def shard(self, generation: int | str, shard: int | str) -> Path:
        """A shard's results: ``work/gen_<g>/shard_<s>.h5``."""
        return self.work / SHARD_FOLDER.name(generation) / SHARD.name(shard)

    def reevaluation_shard(self, generation: int | str, shard: int | str) -> Path:
        """A shard of the final re-evaluation of a run finished at ``generation``:
        ``work/gen_<g>/reevaluation_<s>.h5`` (pruned with the generation's shards)."""
        return self.work / SHARD_FOLDER.name(generation) / REEVALUATION_SHARD.name(shard)

    # saved windows

    @property
    def metrics_windows(self) -> Path:
        """The folder of the saved metrics windows."""
        return self.path / "metrics"

    def metrics_window(self, generation: int | str) -> Path:
        """The metrics window saved with the kept checkpoint of ``generation``
        (``metrics/segment_<g>.csv``: the file keeps its earlier name)."""
        return self.metrics_windows / METRICS_WINDOW.name(generation)

    def metrics_window_files(self) -> list[Path]:
        """The saved metrics windows, oldest first."""
        return METRICS_WINDOW.in_folder(self.metrics_windows)

    @property
    def evaluation_windows(self) -> Path:
        """The folder of the saved evaluation windows (a finished run's
        ``evaluations.h5`` presents their rows)."""
        return self.path / "evaluations"

    def evaluation_window(self, generation: int | str) -> Path:
        """The kept evaluations recorded with the kept (or last) checkpoint of
        ``generation``: ``evaluations/segment_<g>.h5``."""
        return self.evaluation_windows / EVALUATION_WINDOW.name(generation)

    def evaluation_window_files(self) -> list[Path]:
        """The saved evaluation windows, oldest first."""
        return EVALUATION_WINDOW.in_folder(self.evaluation_windows)

    # figures and logs

    @property
    def figures(self) -> Path:
        """The folder of the run's figures."""
        return self.path / "figures"

    def figure_files(self) -> list[Path]:
        """Every figure of the run, by figure then format."""
        return [self.figures / f"{name}.{form}" for name in RUN_FIGURES for form in FIGURE_FORMATS]

    @property
    def logs(self) -> Path:
        """The run's job logs: ``<campaign>/logs/<algorithm>/<domain>/seed<k>``."""
        return self.campaign.logs / self.relative

    def generation_logs(self, generation: int | str) -> Path:
        """The folder of a generation's job logs: ``gen_<g>``."""
        return self.logs / GENERATION_LOGS.name(generation)

    def keep_log(self, generation: int | str) -> Path:
        """The log of the step keeping the checkpoint of ``generation``."""
        return self.logs / KEEP_LOG.name(generation)


@dataclass(frozen=True)
class CampaignFolder:
    """Every path of a campaign (``<results_dir>/<campaign>``) but its runs' own."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def run(self, algorithm: str, domain: str, seed: int | str) -> RunFolder:
        """The folder of a run (wildcards allowed)."""
        return RunFolder(self.path / algorithm / domain / f"seed{seed}")

    def runs(self) -> list[RunFolder]:
        """The runs started so far (those with a generation-0 checkpoint), sorted."""
        first = self.run("*", "*", "*").checkpoint(0).relative_to(self.path)
        return [RunFolder.holding(path) for path in sorted(self.path.glob(str(first)))]

    @property
    def logs(self) -> Path:
        """The folder of the job logs: the runs' (below their relative paths) and
        ``compare.log``."""
        return self.path / "logs"

    @property
    def figures(self) -> Path:
        """The folder of the campaign's figures."""
        return self.path / "figures"

    @property
    def tables(self) -> Path:
        """The folder of the campaign's tables."""
        return self.path / "tables"

    def figure_files(self, *, suite: bool = False, space: bool = False) -> list[Path]:
        """Every campaign figure, by figure then format (``suite``: the campaign has
        BBOB domains, and :data:`SUITE_FIGURES` too; ``space``: it has domains with a
        search space, and :data:`SPACE_FIGURES` too)."""
        names = CAMPAIGN_FIGURES + (SUITE_FIGURES if suite else ())
        names += SPACE_FIGURES if space else ()
        return [self.figures / f"{name}.{form}" for name in names for form in FIGURE_FORMATS]

    def table_files(self, *, suite: bool = False, space: bool = False) -> list[Path]:
        """Every campaign table, by table then format (``suite``: with
        :data:`SUITE_TABLES`; ``space``: with :data:`SPACE_TABLES`)."""
        tables = {**CAMPAIGN_TABLES, **(SUITE_TABLES if suite else {})}
        tables.update(SPACE_TABLES if space else {})
        return [self.tables / f"{name}.{form}" for name, forms in tables.items() for form in forms]
