"""Statistics of a campaign's final results: every analysis and every table of the
campaign comparison at once (what ``evocamp compare`` writes to ``tables/``).

Everything here reads runs loaded by :func:`evocamp.reporting.comparison.load_runs`
(the ``metrics.csv`` of every run); nothing is re-evaluated. The analyses are their
own modules, seeded from the campaign's master seed so that every table is
reproducible byte for byte:

- :mod:`~evocamp.reporting.significance`: Mann-Whitney U tests against the best
  algorithm of each domain and metric, Holm, Vargha-Delaney A12;
- :mod:`~evocamp.reporting.aggregates`: normalised scores across domains, IQM, median
  and mean, performance profiles, probability of improvement (rliable);
- :mod:`~evocamp.reporting.runtime_to_target`: targets, first hits, ECDF and ERT;
- :mod:`~evocamp.reporting.tables`: how every table is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evocamp.model.layout import CAMPAIGN_TABLES
from evocamp.reporting.aggregates import (
    Aggregate,
    aggregate_csv,
    aggregate_markdown,
    aggregate_scores,
)
from evocamp.reporting.comparison import (
    RunMetrics,
    StatisticsSettings,
    final_metrics_table,
    table_csv,
    table_html,
    table_latex,
    table_markdown,
)
from evocamp.reporting.runtime_to_target import (
    DomainRuntimes,
    ert_csv,
    ert_markdown,
    runtime_to_target,
)
from evocamp.reporting.significance import (
    significance_tests,
    table_marks,
    tests_caption,
    tests_csv,
    tests_markdown,
)


@dataclass
class CampaignStatistics:
    """The tables of a campaign (file name -> text) and what the figures draw."""

    tables: dict[str, str]
    aggregates: list[Aggregate]
    runtimes: list[DomainRuntimes]


def campaign_statistics(
    runs: list[RunMetrics], *, samples: int, seed: int, settings: StatisticsSettings
) -> CampaignStatistics:
    """Every table of the campaign comparison: final metrics with significance marks
    (CSV, Markdown, LaTeX, HTML), the tests, the aggregates of ``settings.aggregate_metrics``
    and the expected running times (CSV and Markdown each).

    Parameters
    ----------
    runs : list of RunMetrics
        Every run of the campaign.
    samples : int
        Bootstrap resamples.
    seed : int
        Seed of the bootstraps (the campaign's master seed): the same runs give the
        same bytes.
    settings : StatisticsSettings
        Alpha, aggregated metrics, targets, reference values.
    """
    table = final_metrics_table(runs, samples=samples, seed=seed)
    tests = significance_tests(runs, alpha=settings.alpha)
    marks = table_marks(tests)
    note = tests_caption(tests, alpha=settings.alpha)
    rng = np.random.default_rng(seed)
    aggregates = []
    for metric in settings.aggregate_metrics:
        aggregate = aggregate_scores(runs, metric, settings, resamples=samples, rng=rng)
        if aggregate is not None:
            aggregates.append(aggregate)
    runtimes = runtime_to_target(runs, settings)
    write = {  # one per table and format of evocamp.model.layout.CAMPAIGN_TABLES
        "final_metrics.csv": lambda: table_csv(table),
        "final_metrics.md": lambda: table_markdown(table, marks=marks, note=note),
        "final_metrics.tex": lambda: table_latex(table, marks=marks, note=note),
        "final_metrics.html": lambda: table_html(table, marks=marks, note=note),
        "tests.csv": lambda: tests_csv(tests),
        "tests.md": lambda: tests_markdown(tests, alpha=settings.alpha),
        "aggregate.csv": lambda: aggregate_csv(aggregates),
        "aggregate.md": lambda: aggregate_markdown(aggregates),
        "ert.csv": lambda: ert_csv(runtimes),
        "ert.md": lambda: ert_markdown(runtimes),
    }
    tables = {
        f"{name}.{form}": write[f"{name}.{form}"]()
        for name, forms in CAMPAIGN_TABLES.items()
        for form in forms
    }
    return CampaignStatistics(tables=tables, aggregates=aggregates, runtimes=runtimes)
