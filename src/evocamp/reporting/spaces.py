"""What a hyperparameter-tuning user looks at, for the runs on domains with a search
space (:mod:`evocamp.model.space`), added to the campaign comparison
(:data:`evocamp.model.layout.SPACE_FIGURES`, :data:`~evocamp.model.layout.SPACE_TABLES`):

- ``optimisation_history``: every kept evaluation's objective by evaluation number
  (dots) and the best so far (a line), one panel per domain, one colour per algorithm
  (runs that kept no evaluations: the best so far from their metrics);
- ``parallel_coordinates``: the evaluated configurations of each domain, one vertical
  axis per parameter (its unit-cube position: a log parameter on a log scale,
  categories at the middle of their cells and labelled, an inactive parameter on the
  line ``inactive`` below the axis) and one for the objective, each configuration a
  line coloured by its objective;
- ``best_configurations`` (CSV, Markdown): the best configuration of every run, its
  objective and its evaluations.

matplotlib is imported inside the functions (:func:`~evocamp.reporting.plotting.pyplot`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from evocamp.base.files import atomic_write_text
from evocamp.files.archive import read_best
from evocamp.files.evaluations import read_evaluations
from evocamp.model.layout import RunFolder
from evocamp.model.space import INACTIVE_UNIT, Space
from evocamp.reporting.comparison import RunMetrics
from evocamp.reporting.plotting import no_figure, pyplot, save_figure
from evocamp.reporting.tables import csv_text, markdown_table, markdown_text


def space_runs(runs: list[RunMetrics], metrics: list[str | Path]) -> list[tuple]:
    """The runs on a domain with a search space, each ``(run, folder, space)``, in the
    order of ``runs`` (``metrics``: their ``metrics.csv``, in the same order)."""
    return [
        (run, RunFolder(Path(path).parent), Space(run.domain_spec["space"]))
        for run, path in zip(runs, metrics, strict=True)
        if run.domain_spec.get("space")
    ]


def _evaluated(folder: RunFolder) -> tuple[np.ndarray, np.ndarray | None]:
    """A finished run's kept objectives and solutions in evaluation order (empty: none
    kept)."""
    if not folder.evaluations.exists():
        return np.empty(0), None
    rows = read_evaluations(folder.evaluations)
    if rows is None:
        return np.empty(0), None
    order = np.lexsort((rows.index, rows.generation))
    solutions = None if rows.solution is None else rows.solution[order]
    return rows.objective[order], solutions


def _domains(found: list[tuple]) -> list[str]:
    return sorted({run.domain for run, _, _ in found})


def plot_history(found: list[tuple], *, colours: dict, stem: Path) -> None:
    """The ``optimisation_history`` figure."""
    plt = pyplot()
    domains = _domains(found)
    figure, axes = plt.subplots(
        1, max(len(domains), 1), figsize=(4.5 * max(len(domains), 1), 3.4), squeeze=False
    )
    if not domains:
        no_figure(axes[0, 0], "no run on a domain with a search space")
    for ax, domain in zip(axes[0], domains, strict=False):
        labelled = set()
        for run, folder, _ in found:
            if run.domain != domain:
                continue
            objective, _ = _evaluated(folder)
            label = None if run.algorithm in labelled else run.algorithm
            labelled.add(run.algorithm)
            colour = colours[run.algorithm]
            if len(objective):
                count = np.arange(1, len(objective) + 1)
                ax.scatter(count, objective, s=6, alpha=0.35, color=colour, linewidths=0)
                best = np.fmax.accumulate(np.where(np.isnan(objective), -np.inf, objective))
                ax.step(count, best, where="post", color=colour, label=label)
            else:
                ax.step(
                    run.rows["evaluations"],
                    run.rows["best_objective"],
                    where="post",
                    color=colour,
                    label=label,
                )
        ax.set_title(domain)
        ax.set_xlabel("evaluations")
        ax.set_ylabel("objective (best so far: line)")
        ax.legend(fontsize="small")
    figure.tight_layout()
    save_figure(figure, stem)


def _axis_labels(entry: dict) -> tuple[list[float], list[str]]:
    """Tick positions (unit cube) and labels of one parameter's axis."""
    if entry["type"] in ("categorical", "ordinal"):
        count = len(entry["choices"])
        return [(k + 0.5) / count for k in range(count)], [str(c) for c in entry["choices"]]
    return [0.0, 1.0], [f"{entry['low']:.3g}", f"{entry['high']:.3g}"]


def plot_parallel_coordinates(found: list[tuple], *, stem: Path) -> None:
    """The ``parallel_coordinates`` figure: one panel per domain."""
    plt = pyplot()
    domains = _domains(found)
    figure, axes = plt.subplots(
        len(domains) or 1, 1, figsize=(8, 3.6 * max(len(domains), 1)), squeeze=False
    )
    if not domains:
        no_figure(axes[0, 0], "no run on a domain with a search space")
    for ax, domain in zip(axes[:, 0], domains, strict=False):
        space = next(s for run, _, s in found if run.domain == domain)
        points, objectives = [], []
        for run, folder, _ in found:
            objective, solutions = _evaluated(folder) if run.domain == domain else (None, None)
            if solutions is not None:
                points.append(space.to_unit(solutions))
                objectives.append(objective)
        if not points:
            no_figure(ax, f"{domain}: no kept evaluations with their solutions")
            continue
        unit, objective = np.concatenate(points), np.concatenate(objectives)
        finite = np.isfinite(objective)
        unit, objective = unit[finite], objective[finite]
        span = objective.max() - objective.min() if len(objective) else 0.0
        scaled = (objective - objective.min()) / span if span > 0 else np.full(len(objective), 0.5)
        order = np.argsort(objective, kind="stable")  # the best drawn last, on top
        x = np.arange(space.dim + 1)
        colour_map = plt.get_cmap("viridis")
        for row in order:
            ax.plot(x, [*unit[row], scaled[row]], color=colour_map(scaled[row]), alpha=0.5, lw=0.8)
        for j, entry in enumerate(space.entries):
            ax.axvline(j, color="0.6", lw=0.6)
            positions, labels = _axis_labels(entry)
            for position, label in zip(positions, labels, strict=True):
                ax.text(j + 0.03, position, label, fontsize="x-small", va="center")
            if entry["condition"]:
                ax.text(j + 0.03, INACTIVE_UNIT, "inactive", fontsize="x-small", va="center")
        ax.axvline(space.dim, color="0.6", lw=0.6)
        if len(objective):
            ax.text(space.dim + 0.03, 0.0, f"{objective.min():.4g}", fontsize="x-small")
            ax.text(space.dim + 0.03, 1.0, f"{objective.max():.4g}", fontsize="x-small")
        ax.set_xticks(x, [*space.names, "objective"])
        ax.set_yticks([])
        ax.set_ylim(INACTIVE_UNIT - 0.1, 1.05)
        ax.set_title(f"{domain}: {len(objective)} evaluated configurations")
    figure.tight_layout()
    save_figure(figure, stem)


def best_configuration_tables(found: list[tuple]) -> dict[str, str]:
    """``best_configurations.{csv,md}``: per run (algorithm, domain, seed), its
    evaluations, best objective and the values of its best configuration (``-`` or
    empty: inactive), the parameters of every domain as columns."""
    names: list[str] = []
    for _, _, space in found:
        names += [name for name in space.names if name not in names]
    header = ["algorithm", "domain", "seed", "evaluations", "best_objective", *names]
    rows = []
    for run, folder, space in sorted(found, key=lambda f: (f[0].domain, f[0].algorithm, f[0].seed)):
        best = read_best(folder.archive) if folder.archive.exists() else None
        configuration = {}
        objective = None
        if best is not None:
            configuration = space.configurations(best["solution"].reshape(1, -1))[0]
            objective = float(best["objective"])
        evaluations = int(run.rows["evaluations"][-1]) if len(run.rows) else 0
        values = [configuration.get(name) for name in names]
        rows.append([run.algorithm, run.domain, run.seed, evaluations, objective, *values])
    caption = (
        "The best configuration of every run on a domain with a search space (its best "
        "objective; `-`: the parameter is inactive or not the domain's)."
    )
    return {
        "best_configurations.csv": csv_text(header, [[_cell(v) for v in r] for r in rows]),
        "best_configurations.md": markdown_text(caption, markdown_table(header, rows)),
    }


def _cell(value):
    """A CSV cell of a configuration's value (text as JSON when it has a comma)."""
    return json.dumps(value) if isinstance(value, str) and "," in value else value


def space_outputs(
    runs: list[RunMetrics], metrics: list, *, colours: dict, figures: Path, tables: Path
) -> None:
    """The figures and tables of :data:`evocamp.model.layout.SPACE_FIGURES` and
    :data:`~evocamp.model.layout.SPACE_TABLES`."""
    found = space_runs(runs, metrics)
    plot_history(found, colours=colours, stem=figures / "optimisation_history")
    plot_parallel_coordinates(found, stem=figures / "parallel_coordinates")
    for name, text in best_configuration_tables(found).items():
        atomic_write_text(tables / name, text)
