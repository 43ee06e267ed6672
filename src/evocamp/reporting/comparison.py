"""Campaign comparison: metrics of all runs, bootstrap confidence intervals, the
final-metrics table, and what the statistics share (settings, final values of runs).

Everything here reads results only (``metrics.csv`` of every run); nothing is
re-evaluated. Bootstrap resampling is seeded from the campaign's master seed, so
tables and figures are reproducible byte for byte. The analyses of the final values
are :mod:`~evocamp.reporting.significance`, :mod:`~evocamp.reporting.aggregates` and
:mod:`~evocamp.reporting.runtime_to_target`; :mod:`~evocamp.reporting.statistics`
runs them all.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.catalogue.domains import minimised_value, objective_max
from evocamp.files.reevaluation import CORRECTED_METRICS
from evocamp.model.layout import RunFolder
from evocamp.model.metrics import read_metrics_csv
from evocamp.reporting.tables import (
    DAGGER,
    csv_text,
    html_table,
    interval,
    latex_escape,
    latex_table,
    markdown_table,
    markdown_text,
    number,
)

#: Final metrics reported in the comparison table: (column, label, LaTeX label).
#: The ``corrected_`` ones are those of the final re-evaluation
#: (``evaluation.reevaluate``; :mod:`evocamp.loop.reevaluation`), beside the raw ones.
TABLE_METRICS = (
    ("qd_score", "QD score", "QD score"),
    ("corrected_qd_score", "corrected QD score", "corr.\\ QD score"),
    ("norm_qd_score", "normalised QD score", "norm.\\ QD score"),
    ("corrected_norm_qd_score", "corrected normalised QD score", "corr.\\ norm.\\ QD score"),
    ("coverage", "coverage", "coverage"),
    ("corrected_coverage", "corrected coverage", "corr.\\ coverage"),
    ("cqd_score", "CQD score", "CQD score"),
    ("best_objective", "best objective", "best objective"),
    ("corrected_best_objective", "corrected best objective", "corr.\\ best objective"),
    ("best_value", "best value (minimised)", "best value (min.)"),
    ("elapsed_seconds", "wall seconds", "wall s"),
)
#: Final metrics for which a lower value is better (every other one: higher).
LOWER_IS_BETTER = frozenset({"best_value", "elapsed_seconds"})


@dataclass(frozen=True)
class StatisticsSettings:
    """The ``figures`` keys of a campaign that the statistics read.

    Attributes
    ----------
    alpha : float
        Significance level of the tests (``figures.alpha``).
    aggregate_metrics : tuple of str
        Final metrics aggregated across domains (``figures.aggregate_metrics``).
    target_count : int
        Targets per domain (``figures.targets.count``).
    target_spacing : str
        ``auto`` (log-spaced for minimised values, else linear), ``linear`` or ``log``.
    target_values : dict
        Explicit targets per domain name (``figures.targets.values``).
    reference : dict
        Per domain name and metric, ``[worst, best]`` for the normalisation
        (``figures.reference``); min-max over the campaign's runs where missing.
    """

    alpha: float = 0.05
    aggregate_metrics: tuple[str, ...] = ("qd_score", "best_objective")
    target_count: int = 51
    target_spacing: str = "auto"
    target_values: dict = dataclasses.field(default_factory=dict)
    reference: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_figures(cls, figures: dict) -> StatisticsSettings:
        """From a campaign's (validated) ``figures`` section; missing keys default."""
        targets = figures.get("targets") or {}
        default = cls()
        return cls(
            alpha=figures.get("alpha", default.alpha),
            aggregate_metrics=tuple(figures.get("aggregate_metrics", default.aggregate_metrics)),
            target_count=targets.get("count", default.target_count),
            target_spacing=targets.get("spacing", default.target_spacing),
            target_values=dict(targets.get("values") or {}),
            reference=dict(figures.get("reference") or {}),
        )


@dataclass
class RunMetrics:
    """The metrics history of one run.

    ``minimised`` names what a minimisation benchmark's objective is minus (e.g.
    ``ackley``; ``evocamp.catalogue.domains.DomainType.minimised``), else ``None``;
    ``objective_max`` is that benchmark's best objective where the catalogue knows it
    (a BBOB instance's ``-f_opt``: its minimised value, ``precision``, is ``f - f_opt``),
    else 0. ``domain_spec`` is the run's resolved domain (empty without a summary).
    """

    algorithm: str
    domain: str
    seed: int
    rows: np.ndarray
    minimised: str | None = None
    objective_max: float = 0.0
    domain_spec: dict = dataclasses.field(default_factory=dict)
    #: The corrected final metrics of the run's re-evaluation (``CORRECTED_METRICS``;
    #: empty: none).
    corrected: dict = dataclasses.field(default_factory=dict)

    def values(self, field: str) -> np.ndarray:
        """A metrics column, or a derived one: ``best_value`` (the minimised value's best
        so far: ``objective_max`` minus ``best_objective``; NaN for other domains),
        ``elapsed_seconds`` (wall seconds since the run started) and the corrected
        metrics (NaN but at the last generation, where the run's re-evaluation gives
        them; NaN throughout without one)."""
        if field in CORRECTED_METRICS:
            values = np.full(len(self.rows), np.nan)
            values[-1] = self.corrected.get(field, np.nan)
            return values
        if field == "best_value":
            return (
                self.objective_max - self.rows["best_objective"]
                if self.minimised
                else self.rows["best_objective"] * np.nan
            )
        if field == "elapsed_seconds":
            return np.cumsum(self.rows["wall_seconds"])
        return self.rows[field]


def load_runs(metrics_files: list[str | Path]) -> list[RunMetrics]:
    """Read runs from paths ``.../<algorithm>/<domain>/seed<k>/metrics.csv`` (and the
    domain's type from the run's ``finished/gen_<N>.json`` beside it, when there)."""
    runs = []
    for path in metrics_files:
        run = RunFolder(Path(path).parent)
        runs.append(
            RunMetrics(
                algorithm=run.algorithm,
                domain=run.domain,
                seed=run.seed,
                rows=read_metrics_csv(path),
                **_from_summary(run),
            )
        )
    return runs


def _from_summary(run: RunFolder) -> dict:
    """What a run's last summary says beyond its metrics: what a minimisation
    benchmark's objective is minus, and the corrected metrics."""
    summaries = run.summaries()
    if not summaries:
        return {}
    summary = json.loads(summaries[-1].read_text())
    final = summary.get("final") or {}
    domain_spec = summary["run_spec"]["domain_spec"]
    minimised = minimised_value(domain_spec)
    best = objective_max(domain_spec) if minimised else None
    return {
        "minimised": minimised,
        "objective_max": 0.0 if best is None else best,
        "domain_spec": domain_spec,
        "corrected": {name: final[name] for name in CORRECTED_METRICS if name in final},
    }


def bootstrap_mean_ci(
    values: np.ndarray, *, samples: int, rng: np.random.Generator, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over axis 0 and its percentile bootstrap confidence interval.

    Parameters
    ----------
    values : numpy.ndarray
        Shape ``(seeds, ...)``.
    samples : int
        Bootstrap resamples of the seeds.
    rng : numpy.random.Generator
        Source of the resampling indices.
    level : float
        Confidence level (0.95: the 2.5 and 97.5 percentiles).

    Returns
    -------
    tuple of numpy.ndarray
        ``(mean, low, high)``, each of shape ``values.shape[1:]``. With one seed the
        interval collapses to the mean.
    """
    values = np.asarray(values, dtype=np.float64)
    mean = values.mean(axis=0)
    if len(values) < 2:
        return mean, mean.copy(), mean.copy()
    picks = rng.integers(0, len(values), size=(samples, len(values)))
    means = values[picks].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    return mean, low, high


def grouped(runs: list[RunMetrics]) -> dict[tuple[str, str], list[RunMetrics]]:
    """Runs by (domain, algorithm), each list sorted by seed, in first-seen order."""
    groups: dict[tuple[str, str], list[RunMetrics]] = {}
    for run in runs:
        groups.setdefault((run.domain, run.algorithm), []).append(run)
    return {key: sorted(value, key=lambda r: r.seed) for key, value in groups.items()}


def final_values(members: list[RunMetrics], field: str) -> np.ndarray:
    """The final value of ``field`` of each run (seed order of ``members``)."""
    return np.array([r.values(field)[-1] for r in members], dtype=np.float64)


def domains_of(runs: list[RunMetrics]) -> list[str]:
    """Domains in first-seen order."""
    return list(dict.fromkeys(r.domain for r in runs))


def algorithms_of(runs: list[RunMetrics]) -> list[str]:
    """Algorithms in first-seen order."""
    return list(dict.fromkeys(r.algorithm for r in runs))


def best_field(members: list[RunMetrics]) -> str:
    """The best-so-far column of a domain's runs: ``best_value`` on a minimisation
    benchmark, else ``best_objective``."""
    return "best_value" if members[0].minimised else "best_objective"


def finals_by_algorithm(runs: list[RunMetrics], domain: str, field: str) -> dict[str, np.ndarray]:
    """Final values of ``field`` per algorithm on ``domain`` (algorithms with any
    non-finite final value are left out: a metric they do not have)."""
    finals = {}
    for (d, algorithm), members in grouped(runs).items():
        if d != domain:
            continue
        values = final_values(members, field)
        if len(values) and np.isfinite(values).all():
            finals[algorithm] = values
    return finals


def aligned(runs: list[RunMetrics], field: str) -> tuple[np.ndarray, np.ndarray]:
    """Evaluations and a ``(seeds, generations)`` array of ``field``, cut to the
    shortest run (runs of one experiment share their batch size)."""
    length = min(len(r.rows) for r in runs)
    evaluations = runs[0].rows["evaluations"][:length].astype(np.float64)
    return evaluations, np.stack([r.values(field)[:length] for r in runs])


def aligned_in_time(runs: list[RunMetrics], field: str, *, points: int = 200):
    """Elapsed wall seconds on a common grid (0 to the shortest run's end) and a
    ``(seeds, points)`` array of ``field`` as known at each time (the value of the last
    generation finished by then; NaN before a run's first)."""
    ends = [r.values("elapsed_seconds")[-1] for r in runs]
    grid = np.linspace(0.0, min(ends), points)
    rows = [value_known_at(r.values("elapsed_seconds"), r.values(field), grid) for r in runs]
    return grid, np.stack(rows)


def value_known_at(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The value of the last entry of ``times`` (ascending) at or before each instant
    of ``grid``; NaN before the first.

    Parameters
    ----------
    times : numpy.ndarray
        Ascending instants at which ``values`` became known.
    values : numpy.ndarray
        One value per instant.
    grid : numpy.ndarray
        Instants to look up.

    Returns
    -------
    numpy.ndarray
        Float array shaped like ``grid``.
    """
    index = np.searchsorted(times, grid, side="right") - 1
    known = np.asarray(values, dtype=float)[np.maximum(index, 0)]
    return np.where(index >= 0, known, np.nan)


def final_metrics_table(runs: list[RunMetrics], *, samples: int, seed: int) -> list[dict]:
    """One row per (domain, algorithm): mean and 95% CI of each final metric."""
    rng = np.random.default_rng(seed)
    table = []
    for (domain, algorithm), members in grouped(runs).items():
        row = {
            "domain": domain,
            "algorithm": algorithm,
            "seeds": len(members),
            "evaluations": int(min(r.rows["evaluations"][-1] for r in members)),
            # Evaluations lost to failures (docs/failures.md), per seed in seed order.
            "failed": [int(r.rows["failed_total"][-1]) for r in members],
        }
        for field, _, _ in TABLE_METRICS:
            finals = np.array([r.values(field)[-1] for r in members])
            mean, low, high = bootstrap_mean_ci(finals, samples=samples, rng=rng)
            row[field] = (float(mean), float(low), float(high))
        table.append(row)
    return table


def failed_note(table: list[dict]) -> str | None:
    """``Evaluations lost to failures (docs/failures.md): me on sphere 12 (7, 5 by
    seed).``, or ``None`` when no run lost any."""
    parts = [
        f"{row['algorithm']} on {row['domain']} {sum(row['failed'])} "
        f"({', '.join(str(count) for count in row['failed'])} by seed)"
        for row in table
        if sum(row["failed"])
    ]
    if not parts:
        return None
    return "Evaluations lost to failures (docs/failures.md): " + "; ".join(parts) + "."


def table_csv(table: list[dict]) -> str:
    """CSV: the evaluations lost to failures, and mean, ci_low and ci_high columns per
    metric (every metric; the corrected ones when some run has them)."""
    shown = {field for field, _, _ in shown_metrics(table)}
    fields = [
        field for field, _, _ in TABLE_METRICS if field not in CORRECTED_METRICS or field in shown
    ]
    header = ["domain", "algorithm", "seeds", "evaluations", "failed"]
    for field in fields:
        header += [f"{field}_mean", f"{field}_ci_low", f"{field}_ci_high"]
    rows = []
    for row in table:
        cells = [row["domain"], row["algorithm"], row["seeds"], row["evaluations"]]
        cells.append(sum(row["failed"]))
        for field in fields:
            cells += list(row[field])
        rows.append(cells)
    return csv_text(header, rows)


def shown_metrics(table: list[dict]) -> list[tuple[str, str, str]]:
    """The metrics of :data:`TABLE_METRICS` that some row has (e.g. no QD columns for a
    campaign without archives); the CSV keeps every column."""
    return [
        metric for metric in TABLE_METRICS if any(np.isfinite(row[metric[0]][0]) for row in table)
    ]


def marked_rows(table: list[dict], *, marks: dict | None, bold) -> tuple[list[str], list[list]]:
    """The readable final-metrics table's header and rows: domain, algorithm, seeds and
    ``mean [95% CI]`` per metric some row has, the best mean shown by ``bold`` (a
    function of its text) and a dagger after an algorithm tied with it (``marks`` as in
    :func:`table_markdown`)."""
    marks = marks or {}
    metrics = shown_metrics(table)
    header = ["domain", "algorithm", "seeds"] + [label for _, label, _ in metrics]
    rows = []
    for row in table:
        cells = [row["domain"], row["algorithm"], row["seeds"]]
        for field, _, _ in metrics:
            mark = marks.get((row["domain"], row["algorithm"], field))
            text = interval(row[field])
            if mark == "best":
                mean, rest = text.split(" ", 1)
                text = f"{bold(mean)} {rest}"
            elif mark == "tied":
                text += f" {DAGGER}"
            cells.append(text)
        rows.append(cells)
    return header, rows


def table_caption(table: list[dict], note: str | None) -> str:
    """The readable final-metrics table's caption: what the cells are, ``note`` (the
    tests' caption) and the evaluations lost to failures."""
    caption = "Final metrics: mean over seeds [95% bootstrap confidence interval]."
    return " ".join(part for part in (caption, note, failed_note(table)) if part)


def table_markdown(table: list[dict], *, marks: dict | None = None, note: str | None = None) -> str:
    """Markdown: mean [95% CI] per metric (those some row has).

    ``marks`` maps (domain, algorithm, metric) to ``best`` (shown bold) or ``tied``
    (not significantly different from the best: a dagger), and ``note`` is the
    caption line that says so (:func:`evocamp.reporting.significance.tests_caption`).
    """
    header, rows = marked_rows(table, marks=marks, bold=lambda mean: f"**{mean}**")
    return markdown_text(table_caption(table, note), markdown_table(header, rows))


def table_html(table: list[dict], *, marks: dict | None = None, note: str | None = None) -> str:
    """HTML (a ``<table>`` with its caption, for a web page or the report's first
    screen): the cells of :func:`table_markdown`, the best mean in ``<strong>``."""
    header, rows = marked_rows(table, marks=marks, bold=lambda mean: f"<strong>{mean}</strong>")
    return html_table(header, rows, caption=table_caption(table, note))


def table_latex(table: list[dict], *, marks: dict | None = None, note: str | None = None) -> str:
    """LaTeX (booktabs): mean with the 95% CI below in a smaller font (metrics some row
    has); ``marks`` and ``note`` as in :func:`table_markdown` (the note is a comment
    line above the table, for the caption)."""
    marks = marks or {}
    metrics = shown_metrics(table)
    header = ["Domain", "Algorithm"] + [latex for _, _, latex in metrics]
    rows = []
    for row in table:
        cells = [latex_escape(row["domain"]), latex_escape(row["algorithm"])]
        for field, _, _ in metrics:
            mean, low, high = row[field]
            mark = marks.get((row["domain"], row["algorithm"], field))
            shown = number(mean)
            if mark == "best":
                shown = f"\\textbf{{{shown}}}"
            elif mark == "tied":
                shown += "\\textsuperscript{\\dag}"
            cells.append(f"{shown} {{\\scriptsize [{number(low)}, {number(high)}]}}")
        rows.append(cells)
    lost = failed_note(table)
    caption = f"{note} {lost}" if note and lost else note or lost
    return latex_table(header, rows, columns="ll" + "r" * len(metrics), caption=caption)
