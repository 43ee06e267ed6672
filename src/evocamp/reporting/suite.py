"""COCO-style figures and tables of a campaign with BBOB domains (``type: bbob``):
runtime ECDFs over 51 log-spaced precision targets (``1e2`` to ``1e-8``) aggregated over
functions and instances, per dimension and per function group; the ERT of every
(dimension, function, target) over its instances and seeds with the runs that reach it
(``tables/bbob_ert.{csv,md}``); and the ranks of the algorithms across the problems with
a critical-difference diagram (``autorank``: Friedman and Nemenyi;
``tables/ranks.{csv,md}``), beside the significance tables.

A run's runtime to a target is the evaluations at the end of the first generation whose
best-so-far precision (:class:`~evocamp.reporting.comparison.RunMetrics`'s
``best_value``: ``f - f_opt``) is at or below it (COCO counts single evaluations; one
generation's batch is the resolution here). The first hits, ECDF and ERT are those of
:mod:`~evocamp.reporting.runtime_to_target`.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.reporting.comparison import RunMetrics, algorithms_of
from evocamp.reporting.plotting import PALETTE, TWO_COLUMNS, no_figure, pyplot, save_figure
from evocamp.reporting.runtime_to_target import ecdf, expected_running_time, first_hits
from evocamp.reporting.tables import csv_text, markdown_table, markdown_text, number
from evocamp.tasks.bbob import GROUPS

#: COCO's 51 precision targets, ``10^2`` down to ``10^-8`` (five per decade).
BBOB_TARGETS = 10.0 ** np.linspace(2, -8, 51)
#: Targets the Markdown ERT table shows (as COCO's tables do).
ERT_SHOWN_TARGETS = (1e1, 1e-1, 1e-3, 1e-5, 1e-7, 1e-8)
#: Problems fewer than this rank no algorithms (autorank needs five paired samples).
RANKED_PROBLEMS = 5


def is_suite_run(run: RunMetrics) -> bool:
    """Whether a run's domain is a BBOB function."""
    return run.domain_spec.get("type") == "bbob"


@dataclass
class SuiteRuntimes:
    """The runtimes of one run to :data:`BBOB_TARGETS` (evaluations; ``inf``: not
    reached) and its whole budget."""

    algorithm: str
    function: int
    dimension: int
    instance: int
    seed: int
    runtimes: np.ndarray
    total: float
    final_precision: float


def suite_runtimes(runs: list[RunMetrics]) -> list[SuiteRuntimes]:
    """The runtimes to every target of every BBOB run (others are left out)."""
    found = []
    for run in runs:
        if not is_suite_run(run):
            continue
        precision = run.values("best_value")
        found.append(
            SuiteRuntimes(
                algorithm=run.algorithm,
                function=int(run.domain_spec["params"]["function"]),
                dimension=int(run.domain_spec["solution_dim"]),
                instance=int(run.domain_spec["params"]["instance"]),
                seed=run.seed,
                runtimes=first_hits(
                    precision, run.rows["evaluations"], BBOB_TARGETS, lower_is_better=True
                ),
                total=float(run.rows["evaluations"][-1]),
                final_precision=float(precision[-1]),
            )
        )
    return found


def _select(entries: list[SuiteRuntimes], **where) -> list[SuiteRuntimes]:
    return [e for e in entries if all(getattr(e, k) == v for k, v in where.items())]


def _ordered(values) -> list:
    return sorted(set(values))


ERT_COLUMNS = (
    "dimension",
    "function",
    "target",
    "algorithm",
    "runs",
    "successes",
    "ert_evaluations",
)


def ert_rows(entries: list[SuiteRuntimes]) -> list[list]:
    """Rows of ``tables/bbob_ert.csv``: per dimension, function, target and algorithm,
    the ERT over every instance and seed (:func:`expected_running_time`)."""
    rows = []
    algorithms = list(dict.fromkeys(e.algorithm for e in entries))
    for dimension in _ordered(e.dimension for e in entries):
        for function in _ordered(e.function for e in entries):
            for algorithm in algorithms:
                group = _select(
                    entries, dimension=dimension, function=function, algorithm=algorithm
                )
                if not group:
                    continue
                runtimes = np.stack([e.runtimes for e in group])
                ert = expected_running_time(runtimes, np.array([e.total for e in group]))
                successes = np.isfinite(runtimes).sum(axis=0)
                for index, target in enumerate(BBOB_TARGETS):
                    rows.append(
                        [
                            dimension,
                            function,
                            float(target),
                            algorithm,
                            len(group),
                            int(successes[index]),
                            float(ert[index]),
                        ]
                    )
    return rows


def ert_markdown(rows: list[list]) -> str:
    """``tables/bbob_ert.md``: the ERT at six targets per dimension and function, with
    the successful runs in brackets."""
    shown = [
        int(np.argmin(np.abs(np.log10(BBOB_TARGETS) - np.log10(t)))) for t in ERT_SHOWN_TARGETS
    ]
    header = ["dimension", "function", "algorithm"] + [f"{BBOB_TARGETS[i]:.0e}" for i in shown]
    table = []
    for start in range(0, len(rows), len(BBOB_TARGETS)):
        block = rows[start : start + len(BBOB_TARGETS)]
        dimension, function, _, algorithm, runs = block[0][:5]
        table.append(
            [dimension, f"f{function}", algorithm]
            + [f"{number(block[i][6])} ({block[i][5]}/{runs})" for i in shown]
        )
    return markdown_text(
        "Expected running time (ERT, evaluations) of every BBOB function per dimension, over "
        "its instances and seeds, to the precision targets f - f_opt shown (COCO's); in "
        "brackets the runs that reach it; inf: none does. tables/bbob_ert.csv has all 51 "
        "targets (1e2 to 1e-8).",
        markdown_table(header, table),
    )


@dataclass
class Ranking:
    """The ranks of the algorithms across the BBOB problems (autorank), or why none."""

    problems: int
    algorithms: list[str]
    result: object | None
    why_not: str = ""


def problem_scores(entries: list[SuiteRuntimes]) -> tuple[list[tuple], dict[str, list[float]]]:
    """Per problem (function, dimension, instance) on which every algorithm ran, each
    algorithm's median final precision over its seeds (lower is better)."""
    algorithms = list(dict.fromkeys(e.algorithm for e in entries))
    problems = _ordered((e.function, e.dimension, e.instance) for e in entries)
    kept, scores = [], {a: [] for a in algorithms}
    for function, dimension, instance in problems:
        medians = {}
        for algorithm in algorithms:
            group = _select(
                entries,
                function=function,
                dimension=dimension,
                instance=instance,
                algorithm=algorithm,
            )
            if group:
                medians[algorithm] = float(np.median([e.final_precision for e in group]))
        if len(medians) == len(algorithms):
            kept.append((function, dimension, instance))
            for algorithm, value in medians.items():
                scores[algorithm].append(value)
    return kept, scores


def rank_algorithms(entries: list[SuiteRuntimes], *, alpha: float) -> Ranking:
    """autorank's nonparametric comparison (Friedman with Nemenyi's critical distance
    for three or more algorithms, Wilcoxon's signed-rank test for two) of the median
    final precisions across problems."""
    problems, scores = problem_scores(entries)
    algorithms = list(scores)
    if len(algorithms) < 2:
        return Ranking(len(problems), algorithms, None, "one algorithm: nothing to rank")
    if len(problems) < RANKED_PROBLEMS:
        return Ranking(
            len(problems),
            algorithms,
            None,
            f"{len(problems)} problems: autorank needs at least {RANKED_PROBLEMS}",
        )
    import pandas as pd
    from autorank import autorank

    with contextlib.redirect_stdout(io.StringIO()):
        result = autorank(
            pd.DataFrame(scores),
            alpha=alpha,
            order="ascending",
            force_mode="nonparametric",
            verbose=False,
        )
    return Ranking(len(problems), algorithms, result)


RANK_COLUMNS = ("algorithm", "mean_rank", "median_precision", "problems", "test", "p_value", "cd")


def ranks_rows(ranking: Ranking) -> list[list]:
    """Rows of ``tables/ranks.csv``: each algorithm's mean rank (1: best) and median
    final precision, the test, its p-value and the critical distance (Nemenyi)."""
    if ranking.result is None:
        return []
    result = ranking.result
    return [
        [
            algorithm,
            float(row["meanrank"]),
            float(row["median"]),
            ranking.problems,
            result.omnibus,
            float(result.pvalue),
            float(result.cd) if result.cd is not None else float("nan"),
        ]
        for algorithm, row in result.rankdf.iterrows()
    ]


def ranks_markdown(ranking: Ranking) -> str:
    """``tables/ranks.md``: the ranks across BBOB problems and the test's verdict."""
    if ranking.result is None:
        return markdown_text(f"No ranking across the BBOB problems: {ranking.why_not}.")
    result = ranking.result
    rows = [[r[0], number(r[1]), number(r[2])] for r in ranks_rows(ranking)]
    verdict = "differ" if result.pvalue < result.alpha else "do not differ significantly"
    return markdown_text(
        f"Ranks across {ranking.problems} BBOB problems (function, dimension, instance) of "
        f"the median final precision f - f_opt over seeds (1: best; autorank, "
        f"nonparametric): {result.omnibus} test, p = {number(result.pvalue)}, the "
        f"algorithms {verdict} at alpha = {result.alpha}"
        + (f"; Nemenyi's critical distance {number(result.cd)}." if result.cd else "."),
        markdown_table(["algorithm", "mean rank", "median precision"], rows),
    )


def suite_tables(runs: list[RunMetrics], *, alpha: float) -> dict[str, str]:
    """``bbob_ert.{csv,md}`` and ``ranks.{csv,md}`` of a campaign's BBOB runs."""
    entries = suite_runtimes(runs)
    rows = ert_rows(entries)
    ranking = rank_algorithms(entries, alpha=alpha)
    return {
        "bbob_ert.csv": csv_text(ERT_COLUMNS, rows),
        "bbob_ert.md": ert_markdown(rows),
        "ranks.csv": csv_text(RANK_COLUMNS, ranks_rows(ranking)),
        "ranks.md": ranks_markdown(ranking),
    }


def _panels(entries: list[SuiteRuntimes]) -> list[tuple[str, list[int]]]:
    """The ECDF panels of a row: every function, then each group some function is in."""
    functions = set(e.function for e in entries)
    panels = [(f"all functions ({len(functions)})", sorted(functions))]
    for name, members in GROUPS.items():
        present = sorted(functions & set(members))
        if present:
            panels.append((f"{name} (f{members[0]}-{members[-1]})", present))
    return panels


def plot_suite_ecdf(runs: list[RunMetrics], *, stem: Path) -> None:
    """COCO's runtime ECDFs: per dimension (rows) and function group (columns: every
    function, then separable, moderate, ill-conditioned, multimodal, weakly structured),
    the fraction of (run, target) pairs reached against evaluations / dimension (log
    scale), each run of each instance and function a run, 51 targets 1e2 to 1e-8."""
    plt = pyplot()
    entries = suite_runtimes(runs)
    algorithms = algorithms_of([r for r in runs if is_suite_run(r)])
    colours = {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(algorithms)}
    dimensions = _ordered(e.dimension for e in entries)
    panels = _panels(entries)
    figure, axes = plt.subplots(
        max(len(dimensions), 1),
        len(panels),
        squeeze=False,
        figsize=(max(TWO_COLUMNS, 2.2 * len(panels)), 2.1 * max(len(dimensions), 1) + 0.4),
    )
    for row, dimension in enumerate(dimensions):
        for column, (title, functions) in enumerate(panels):
            ax = axes[row, column]
            for algorithm in algorithms:
                group = [
                    e
                    for e in _select(entries, dimension=dimension, algorithm=algorithm)
                    if e.function in functions
                ]
                if not group:
                    continue
                runtimes = np.stack([e.runtimes for e in group]) / dimension
                end = max(e.total for e in group) / dimension
                finite = np.unique(runtimes[np.isfinite(runtimes)])
                budgets = np.concatenate([[0.5], finite, [max(end, 0.5)]])
                ax.step(
                    budgets,
                    ecdf(runtimes, budgets),
                    where="post",
                    color=colours[algorithm],
                    label=algorithm,
                )
            ax.set_xscale("log")
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{dimension}-D, {title}", fontsize=7)
            if row == len(dimensions) - 1:
                ax.set_xlabel("evaluations / dimension")
            if column == 0:
                ax.set_ylabel("fraction of\n(run, target) pairs")
    if entries:
        axes[0, 0].legend(frameon=False, fontsize=6)
    else:
        no_figure(axes[0, 0], "no BBOB run has finished a generation yet")
    figure.suptitle(
        "Runtime ECDFs, 51 precision targets f - f_opt from 1e2 to 1e-8 (COCO)", fontsize=8
    )
    figure.tight_layout()
    save_figure(figure, stem)


def plot_ranks(runs: list[RunMetrics], *, alpha: float, stem: Path) -> None:
    """The critical-difference diagram of the ranks across BBOB problems (autorank's
    ``plot_stats``), or in words why there is none."""
    plt = pyplot()
    ranking = rank_algorithms(suite_runtimes(runs), alpha=alpha)
    figure, ax = plt.subplots(figsize=(TWO_COLUMNS, 2.2))
    if ranking.result is None:
        no_figure(ax, f"no critical-difference diagram: {ranking.why_not}")
    elif ranking.result.omnibus != "friedman":
        no_figure(
            ax,
            f"{ranking.result.omnibus} test of two algorithms over {ranking.problems} problems, "
            f"p = {ranking.result.pvalue:.3g} (tables/ranks.md); a diagram needs three or more",
        )
    else:
        from autorank import plot_stats

        plot_stats(ranking.result, allow_insignificant=True, ax=ax)
        ax.set_title(f"Ranks over {ranking.problems} BBOB problems (median final precision)")
    save_figure(figure, stem, tight=True)
