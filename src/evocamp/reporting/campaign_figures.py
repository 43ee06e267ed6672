"""The campaign comparison's figures (``evocamp compare``): metric curves with bootstrap
bands, final archives side by side, the final values of every seed, aggregates across
domains and runtime to target, in the style of :mod:`evocamp.reporting.plotting`; and
:func:`compare_campaign`, which writes them with every table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evocamp.base.files import atomic_write_text
from evocamp.files.archive import read_archive
from evocamp.model.layout import CAMPAIGN_FIGURES, SUITE_FIGURES
from evocamp.reporting.aggregates import normalisation_statement
from evocamp.reporting.comparison import (
    TABLE_METRICS,
    StatisticsSettings,
    algorithms_of,
    aligned,
    aligned_in_time,
    best_field,
    bootstrap_mean_ci,
    domains_of,
    final_values,
    grouped,
    load_runs,
)
from evocamp.reporting.plotting import (
    CURVES,
    ONE_COLUMN,
    PALETTE,
    TWO_COLUMNS,
    draw_heatmap,
    no_figure,
    pyplot,
    save_figure,
)
from evocamp.reporting.runtime_to_target import ecdf
from evocamp.reporting.spaces import space_outputs
from evocamp.reporting.statistics import campaign_statistics
from evocamp.reporting.suite import is_suite_run, plot_ranks, plot_suite_ecdf, suite_tables

#: Campaign curves with more algorithms than this have their legend beside the figure.
LEGEND_INSIDE = 5


def _campaign_rows(runs) -> list[tuple[str, str]]:
    """Rows of the campaign figure: the QD metrics some run has, the best objective
    against evaluations, and again against wall time (fields of :data:`CURVES`, and
    ``best`` for the best objective, or a minimisation benchmark's best value)."""
    rows = [
        (field, label)
        for field, label, _ in CURVES
        if field != "best_objective" and any(np.isfinite(r.rows[field]).any() for r in runs)
    ]
    return rows + [("best", "evaluations"), ("best", "wall seconds")]


def _best_of(members) -> tuple[str, str]:
    """The best-so-far column of a domain's runs and its label."""
    if members[0].minimised:
        return "best_value", f"best {members[0].minimised} value (min.)"
    return "best_objective", "best objective"


def plot_campaign_curves(runs, *, samples: int, seed: int, stem: Path) -> None:
    """Metric curves: one line per algorithm (mean over seeds with a 95% bootstrap
    band), one column per domain; rows: the QD metrics the runs have and the best
    objective (a minimisation benchmark's best value, e.g. Ackley's) against
    evaluations, then the best against wall time."""
    plt = pyplot()
    rng = np.random.default_rng(seed)
    groups = grouped(runs)
    domains = list(dict.fromkeys(domain for domain, _ in groups))
    algorithms = list(dict.fromkeys(algorithm for _, algorithm in groups))
    rows = _campaign_rows(runs)
    figure, axes = plt.subplots(
        len(rows),
        len(domains),
        squeeze=False,
        figsize=(TWO_COLUMNS if len(domains) > 1 else ONE_COLUMN, 1.6 * len(rows)),
    )
    for column, domain in enumerate(domains):
        axes[0, column].set_title(domain)
        domain_runs = [r for (d, _), members in groups.items() if d == domain for r in members]
        for row, (field, label) in enumerate(rows):
            ax = axes[row, column]
            x_label = "evaluations"
            if field == "best":
                x_label = label
                field, label = _best_of(domain_runs)
            for colour, algorithm in enumerate(algorithms):
                members = groups.get((domain, algorithm))
                if not members:
                    continue
                if x_label == "wall seconds":
                    x, values = aligned_in_time(members, field)
                else:
                    x, values = aligned(members, field)
                keep = np.isfinite(values).all(axis=0)
                mean, low, high = bootstrap_mean_ci(values[:, keep], samples=samples, rng=rng)
                style = {"color": PALETTE[colour % len(PALETTE)]}
                dashed = "--" if colour >= len(PALETTE) else "-"  # more algorithms than colours
                ax.plot(x[keep], mean, dashed, label=f"{algorithm} (n={len(members)})", **style)
                ax.fill_between(x[keep], low, high, alpha=0.25, linewidth=0, **style)
            ax.set_ylabel(label)
            ax.set_xlabel(x_label)
        if len(algorithms) <= LEGEND_INSIDE:
            axes[0, column].legend(frameon=False)
    if len(algorithms) > LEGEND_INSIDE:  # beside the figure, not over the first curves
        handles, labels = axes[0, 0].get_legend_handles_labels()
        figure.legend(handles, labels, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    figure.tight_layout()
    save_figure(figure, stem, tight=len(algorithms) > LEGEND_INSIDE)


def heatmaps_figure(data: list[dict]):
    """Final archives side by side (a matplotlib figure): one row per domain, one column
    per algorithm, each with its own colour scale and bar
    (:func:`~evocamp.reporting.plotting.colour_range`): a scale shared with an algorithm
    whose objectives spread wider would show another as one colour.

    Parameters
    ----------
    data : list of dict
        Archives as :func:`evocamp.files.archive.read_archive` reads them.
    """
    plt = pyplot()
    domains = list(dict.fromkeys(d["file_attrs"]["domain"] for d in data))
    algorithms = list(dict.fromkeys(d["file_attrs"]["algorithm"] for d in data))
    figure, axes = plt.subplots(
        len(domains),
        len(algorithms),
        squeeze=False,
        # At least 2 inches per archive: many algorithms make a wider figure, not
        # thinner heatmaps.
        figsize=(max(TWO_COLUMNS, 2.0 * len(algorithms)), 2.2 * len(domains) + 0.3),
    )
    for row, domain in enumerate(domains):
        members = [d for d in data if d["file_attrs"]["domain"] == domain]
        for column, algorithm in enumerate(algorithms):
            ax = axes[row, column]
            match = [d for d in members if d["file_attrs"]["algorithm"] == algorithm]
            if not match:
                ax.set_axis_off()
                continue
            draw_heatmap(ax, match[0])
            ax.set_title(f"{algorithm}\non {domain} (seed {match[0]['file_attrs']['seed']})")
    figure.tight_layout()
    return figure


def _label(metric: str) -> str:
    return {name: label for name, label, _ in TABLE_METRICS}.get(metric, metric)


def _colours(algorithms: list[str]) -> dict[str, str]:
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(algorithms)}


def _nothing_to_show(plt, why: str, stem: Path) -> None:
    figure, ax = plt.subplots(figsize=(ONE_COLUMN, 1.0))
    no_figure(ax, why)
    save_figure(figure, stem)


def plot_aggregate(aggregates: list, *, algorithms: list[str], stem: Path) -> None:
    """rliable's three views per aggregated metric (one block each, titled with the
    metric and how each domain was normalised): IQM with its 95% stratified-bootstrap
    interval per algorithm, performance profiles with bands, and below them the
    probability of improvement of each pair."""
    plt = pyplot()
    if not aggregates:
        _nothing_to_show(plt, "no final metric to aggregate (figures.aggregate_metrics)", stem)
        return
    colours = _colours(algorithms)
    heights = [2.0 + 0.22 * len(a.improvement) + 0.5 for a in aggregates]
    figure = plt.figure(figsize=(TWO_COLUMNS, sum(heights)), layout="constrained")
    blocks = figure.subfigures(len(aggregates), 1, height_ratios=heights, squeeze=False)[:, 0]
    for block, aggregate in zip(blocks, aggregates, strict=True):
        metric = _label(aggregate.normalised.metric)
        block.suptitle(f"{metric}, {normalisation_statement(aggregate)}", fontsize=8)
        pairs = list(aggregate.improvement.items())
        grid = block.add_gridspec(2, 2, height_ratios=[1.6, 0.22 * len(pairs) + 0.45])
        left, middle = block.add_subplot(grid[0, 0]), block.add_subplot(grid[0, 1])
        names = aggregate.algorithms
        for y, algorithm in enumerate(names):
            value, low, high = aggregate.summaries["iqm"][algorithm]
            left.errorbar(
                value,
                y,
                xerr=[[value - low], [high - value]],
                fmt="o",
                color=colours[algorithm],
                capsize=3,
            )
        left.set_yticks(range(len(names)), [f"{a} (n={aggregate.runs[a]})" for a in names])
        left.set_ylim(len(names) - 0.5, -0.5)
        left.set_xlim(aggregate.taus[0] - 0.03, aggregate.taus[-1] + 0.03)
        left.set_xlabel(f"IQM of normalised {metric} (95% CI)")
        left.grid(axis="y", visible=False)
        for algorithm in names:
            fraction, low, high = aggregate.profiles[algorithm]
            style = {"color": colours[algorithm]}
            middle.plot(aggregate.taus, fraction, label=algorithm, **style)
            middle.fill_between(aggregate.taus, low, high, alpha=0.25, linewidth=0, **style)
        middle.set_xlabel(f"normalised {metric} \u03c4")
        middle.set_ylabel("fraction of runs > \u03c4")
        middle.set_ylim(-0.02, 1.02)
        middle.legend(frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
        if pairs:
            right = block.add_subplot(grid[1, :])
            for y, (_, (value, low, high)) in enumerate(pairs):
                right.errorbar(
                    value,
                    y,
                    xerr=[[value - low], [high - value]],
                    fmt="o",
                    color="black",
                    capsize=3,
                )
            right.axvline(0.5, color="grey", linewidth=0.8, linestyle="--")
            right.set_yticks(range(len(pairs)), [f"P({a} > {b})" for (a, b), _ in pairs])
            right.set_ylim(len(pairs) - 0.5, -0.5)
            right.set_xlim(-0.02, 1.02)
            right.set_xlabel("probability of improvement (95% CI; 0.5: no difference)")
            right.grid(axis="y", visible=False)
    save_figure(figure, stem)


def _steps(runtimes: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
    """Budgets at which the ECDF of ``runtimes`` steps (from 0 to ``end``) and its
    value there."""
    finite = np.unique(runtimes[np.isfinite(runtimes)])
    budgets = np.concatenate([[0.0], finite, [max(end, finite.max() if len(finite) else 0.0)]])
    return budgets, ecdf(runtimes, budgets)


def plot_ecdf(runtimes: list, *, algorithms: list[str], stem: Path) -> None:
    """Runtime to target: per domain (columns) the fraction of (run, target) pairs
    reached against evaluations (top) and against wall seconds (bottom)."""
    plt = pyplot()
    if not runtimes:
        _nothing_to_show(plt, "no run has a best objective yet", stem)
        return
    colours = _colours(algorithms)
    figure, axes = plt.subplots(
        2,
        len(runtimes),
        squeeze=False,
        figsize=(TWO_COLUMNS if len(runtimes) > 1 else ONE_COLUMN, 3.6),
    )
    for column, entry in enumerate(runtimes):
        label = entry.field.replace("_", " ")
        axes[0, column].set_title(
            f"{entry.domain}: {len(entry.targets)} targets on {label}\n"
            f"{entry.targets[0]:.3g} to {entry.targets[-1]:.3g} ({entry.spacing})"
        )
        for row, (costs, totals, x_label) in enumerate(
            (
                (entry.evaluations, entry.total_evaluations, "evaluations"),
                (entry.seconds, entry.total_seconds, "wall seconds"),
            )
        ):
            ax = axes[row, column]
            for algorithm, values in costs.items():
                budgets, fractions = _steps(values, float(totals[algorithm].max()))
                ax.step(
                    budgets,
                    fractions,
                    where="post",
                    color=colours[algorithm],
                    label=f"{algorithm} (n={len(values)})",
                )
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel(x_label)
            ax.set_ylabel("fraction of (run, target)\npairs reached")
        axes[0, column].legend(frameon=False)
    figure.tight_layout()
    save_figure(figure, stem)


def _seed_rows(runs) -> list[str]:
    """Final metrics of the per-seed figure: the QD ones some run has, then the best."""
    rows = [
        name
        for name in ("qd_score", "coverage")
        if any(np.isfinite(r.values(name)[-1]) for r in runs)
    ]
    return rows + ["best"]


def plot_seeds(runs, *, stem: Path) -> None:
    """Final values of every seed: per domain (columns) and final metric (rows), a box
    per algorithm with every seed as a point beside it (labelled with its seed)."""
    plt = pyplot()
    groups = grouped(runs)
    domains = domains_of(runs)
    algorithms = algorithms_of(runs)
    colours = _colours(algorithms)
    rows = _seed_rows(runs)
    figure, axes = plt.subplots(
        len(rows),
        len(domains),
        squeeze=False,
        figsize=(TWO_COLUMNS if len(domains) > 1 else ONE_COLUMN, 1.9 * len(rows) + 0.3),
    )
    for column, domain in enumerate(domains):
        members = {a: m for (d, a), m in groups.items() if d == domain}
        axes[0, column].set_title(domain)
        for row, metric in enumerate(rows):
            ax = axes[row, column]
            field = best_field(next(iter(members.values()))) if metric == "best" else metric
            names = [a for a in algorithms if a in members]
            for x, algorithm in enumerate(names):
                values = final_values(members[algorithm], field)
                seeds = [r.seed for r in members[algorithm]]
                keep = np.isfinite(values)
                if not keep.any():
                    continue
                ax.boxplot(
                    values[keep],
                    positions=[x],
                    widths=0.5,
                    showfliers=False,
                    medianprops={"color": colours[algorithm]},
                )
                offsets = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else [0.0]
                ax.scatter(
                    x + 0.38 + np.asarray(offsets)[keep],
                    values[keep],
                    s=9,
                    color=colours[algorithm],
                    zorder=3,
                )
                if len(values) <= 10:
                    for xo, value, seed in zip(
                        np.asarray(offsets)[keep],
                        values[keep],
                        np.asarray(seeds)[keep],
                        strict=True,
                    ):
                        ax.annotate(
                            str(seed),
                            (x + 0.38 + xo, value),
                            xytext=(2, 0),
                            textcoords="offset points",
                            fontsize=5,
                            va="center",
                            color="dimgrey",
                        )
            ax.set_xticks(range(len(names)), names, rotation=15)
            ax.set_xlim(-0.6, len(names) - 0.1)
            ax.grid(axis="x", visible=False)
            ax.set_ylabel(f"final {_label(field)}")
    figure.suptitle(
        "Final values: a box per algorithm, every seed a point (labelled with its seed)",
        fontsize=8,
    )
    figure.tight_layout()
    save_figure(figure, stem)


def compare_campaign(
    *,
    metrics: list[str | Path],
    archives: list[str | Path],
    figures: Path,
    tables: Path,
    samples: int,
    seed: int,
    settings: dict | None = None,
) -> None:
    """The campaign comparison, from every run's results.

    Figures: metric curves with bootstrap bands (``curves``), side-by-side heatmaps
    (``heatmaps``), aggregates across domains (``aggregate``), runtime-to-target ECDFs
    (``ecdf``) and the final values of every seed (``seeds``). Tables: final metrics
    with significance marks (``final_metrics``: CSV, Markdown, LaTeX, HTML), the tests
    (``tests``: CSV, Markdown), the aggregates (``aggregate``) and the expected running
    times (``ert``), CSV and Markdown (:mod:`evocamp.reporting.statistics`). With BBOB
    domains, COCO's figures and tables too (:mod:`evocamp.reporting.suite`): runtime
    ECDFs per dimension and function group (``bbob_ecdf``), the critical-difference
    diagram (``critical_difference``), ERT per function (``bbob_ert``) and the ranks
    (``ranks``). With domains over a search space, the optimisation history, the
    parallel coordinates of the evaluated configurations and the best configuration
    of every run (:mod:`evocamp.reporting.spaces`).

    Parameters
    ----------
    metrics : list of path
        ``metrics.csv`` of every run.
    archives : list of path
        The final archives the heatmaps show.
    figures, tables : Path
        Folders of the figures and the tables.
    samples : int
        Bootstrap resamples.
    seed : int
        Seed of the bootstraps.
    settings : dict, optional
        The campaign's ``figures`` section (alpha, aggregated metrics, targets,
        reference values); keys left out take their defaults.
    """
    runs = load_runs(metrics)
    results = campaign_statistics(
        runs, samples=samples, seed=seed, settings=StatisticsSettings.from_figures(settings or {})
    )
    for name, text in results.tables.items():
        atomic_write_text(tables / name, text)
    algorithms = algorithms_of(runs)
    draw = {  # one per name of evocamp.model.layout.CAMPAIGN_FIGURES
        "curves": lambda stem: plot_campaign_curves(runs, samples=samples, seed=seed, stem=stem),
        "heatmaps": lambda stem: save_figure(
            heatmaps_figure([read_archive(path) for path in archives]), stem
        ),
        "seeds": lambda stem: plot_seeds(runs, stem=stem),
        "aggregate": lambda stem: plot_aggregate(
            results.aggregates, algorithms=algorithms, stem=stem
        ),
        "ecdf": lambda stem: plot_ecdf(results.runtimes, algorithms=algorithms, stem=stem),
    }
    for name in CAMPAIGN_FIGURES:
        draw[name](figures / name)
    if any(is_suite_run(run) for run in runs):
        alpha = StatisticsSettings.from_figures(settings or {}).alpha
        for name, text in suite_tables(runs, alpha=alpha).items():
            atomic_write_text(tables / name, text)
        suite_draw = {  # one per name of evocamp.model.layout.SUITE_FIGURES
            "bbob_ecdf": lambda stem: plot_suite_ecdf(runs, stem=stem),
            "critical_difference": lambda stem: plot_ranks(runs, alpha=alpha, stem=stem),
        }
        for name in SUITE_FIGURES:
            suite_draw[name](figures / name)
    if any(run.domain_spec.get("space") for run in runs):
        space_outputs(runs, metrics, colours=_colours(algorithms), figures=figures, tables=tables)
