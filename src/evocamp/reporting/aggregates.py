"""Aggregates of a campaign's final results across domains, after rliable's
recommendations (Agarwal et al. 2021): per algorithm, the interquartile mean, median
and mean of normalised scores over every (domain, seed) run with stratified bootstrap
intervals (scipy), performance profiles, and the probability of improvement of each
pair; ``tables/aggregate.{csv,md}``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from evocamp.reporting.comparison import (
    LOWER_IS_BETTER,
    TABLE_METRICS,
    RunMetrics,
    StatisticsSettings,
    algorithms_of,
    domains_of,
    finals_by_algorithm,
)
from evocamp.reporting.significance import a12
from evocamp.reporting.tables import csv_text, interval, markdown_table, markdown_text

#: Points of the performance profiles' threshold grid.
PROFILE_POINTS = 101


@dataclass
class Normalised:
    """Normalised final scores of one metric: per (domain, algorithm), and how each
    domain was normalised (for the figure's statement)."""

    metric: str
    scores: dict[tuple[str, str], np.ndarray]
    how: dict[str, str]
    left_out: dict[str, str]


def _reference_values(settings: StatisticsSettings, domain: str, metric: str):
    """``(worst, best)`` a campaign gives for ``domain`` and ``metric``, else ``None``.
    For ``best_objective`` a minimisation benchmark's ``best_value`` reference counts
    too (its negation)."""
    given = settings.reference.get(domain) or {}
    if metric in given:
        return tuple(float(v) for v in given[metric])
    if metric == "best_objective" and "best_value" in given:
        worst, best = given["best_value"]
        return -float(worst), -float(best)
    return None


def normalised_scores(
    runs: list[RunMetrics], metric: str, settings: StatisticsSettings
) -> Normalised:
    """Final values of ``metric`` normalised per domain: 0 at the worst, 1 at the best.

    The worst and best are the campaign's reference values for the domain
    (``figures.reference``) or, by default, the minimum and maximum over every run of
    the campaign on that domain (reversed where lower is better). A domain without the
    metric, or whose runs all end equal, is left out (``left_out`` says why).
    """
    scores, how, left_out = {}, {}, {}
    for domain in domains_of(runs):
        finals = finals_by_algorithm(runs, domain, metric)
        if not finals:
            left_out[domain] = "no runs have the metric"
            continue
        given = _reference_values(settings, domain, metric)
        if given is not None:
            worst, best = given
            how[domain] = f"reference [{worst:g}, {best:g}]"
        else:
            joined = np.concatenate(list(finals.values()))
            low, high = float(joined.min()), float(joined.max())
            worst, best = (high, low) if metric in LOWER_IS_BETTER else (low, high)
            how[domain] = "min-max over the campaign's runs"
        if worst == best:
            left_out[domain] = "every run ends equal"
            continue
        for algorithm, values in finals.items():
            scores[(domain, algorithm)] = (values - worst) / (best - worst)
    return Normalised(metric=metric, scores=scores, how=how, left_out=left_out)


def _stratified_ci(samples: list[np.ndarray], statistic, *, resamples: int, rng):
    """Percentile confidence interval (95%) of ``statistic`` with every sample (a
    domain's runs) resampled on its own: scipy's bootstrap, which resamples each of
    several samples independently, is rliable's stratified bootstrap. With a sample
    of fewer than 2 runs the interval collapses to the point estimate."""
    point = np.asarray(statistic(*samples, axis=-1), dtype=np.float64)
    if min(len(s) for s in samples) < 2:
        return point, point.copy(), point.copy()
    from scipy.stats import bootstrap

    result = bootstrap(
        tuple(samples),
        statistic,
        n_resamples=resamples,
        vectorized=True,
        method="percentile",
        confidence_level=0.95,
        random_state=rng,
    )
    low, high = result.confidence_interval
    return point, np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)


def _pooled_summaries(*samples, axis=-1):
    """IQM (scipy's 25% trimmed mean), median and mean of the pooled samples."""
    from scipy.stats import trim_mean

    pooled = np.concatenate(samples, axis=axis)
    return np.stack(
        [
            trim_mean(pooled, 0.25, axis=axis),
            np.median(pooled, axis=axis),
            np.mean(pooled, axis=axis),
        ]
    )


def _profile(*samples, taus, axis=-1):
    """Performance profile: per domain (sample) the fraction of runs above each tau,
    averaged over domains; taus first (scipy's bootstrap batches are the last axis)."""
    fractions = np.mean([np.mean(s[..., None] > taus, axis=-2) for s in samples], axis=0)
    return np.moveaxis(fractions, -1, 0)


def _improvement(*samples, axis=-1):
    """Probability of improvement from samples ``x_1, y_1, x_2, y_2, ...`` (one pair
    per domain): the A12 of x against y, averaged over domains."""
    return np.mean([a12(x, y) for x, y in zip(samples[::2], samples[1::2], strict=True)], axis=0)


AGGREGATE_STATISTICS = ("iqm", "median", "mean")


@dataclass
class Aggregate:
    """Aggregates of one metric across domains (:func:`aggregate_scores`)."""

    normalised: Normalised
    algorithms: list[str]
    #: statistic -> algorithm -> (value, low, high)
    summaries: dict[str, dict[str, tuple[float, float, float]]]
    taus: np.ndarray
    #: algorithm -> (fraction, low, high), arrays over ``taus``
    profiles: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    #: (algorithm, other) -> (probability, low, high)
    improvement: dict[tuple[str, str], tuple[float, float, float]]
    runs: dict[str, int]


def _strata(normalised: Normalised, algorithm: str) -> list[np.ndarray]:
    return [v for (d, a), v in normalised.scores.items() if a == algorithm]


def aggregate_scores(
    runs: list[RunMetrics], metric: str, settings: StatisticsSettings, *, resamples: int, rng
) -> Aggregate | None:
    """rliable's aggregates of ``metric`` (Agarwal et al. 2021) for every algorithm.

    Parameters
    ----------
    runs : list of RunMetrics
        Every run of the campaign.
    metric : str
        A final metric (:data:`~evocamp.reporting.comparison.TABLE_METRICS`).
    settings : StatisticsSettings
        Reference values for the normalisation.
    resamples : int
        Bootstrap resamples.
    rng : numpy.random.Generator
        Source of the resampling (used in a fixed order).

    Returns
    -------
    Aggregate or None
        ``None`` when no domain has the metric. Summaries: IQM, median and mean of the
        normalised scores of every (domain, seed) run, with 95% stratified-bootstrap
        intervals (each domain's runs resampled on their own); performance profiles:
        the fraction of runs whose normalised score exceeds tau (the mean over domains
        of each domain's fraction), with bands; probability of improvement P(X > Y):
        the mean over the domains both ran of the probability that a run of X beats
        a run of Y (ties half), with intervals.
    """
    normalised = normalised_scores(runs, metric, settings)
    if not normalised.scores:
        return None
    algorithms = [a for a in algorithms_of(runs) if _strata(normalised, a)]
    every = np.concatenate(list(normalised.scores.values()))
    taus = np.linspace(min(0.0, every.min()), max(1.0, every.max()), PROFILE_POINTS)
    summaries = {name: {} for name in AGGREGATE_STATISTICS}
    profiles = {}
    for algorithm in algorithms:
        strata = _strata(normalised, algorithm)
        point, low, high = _stratified_ci(strata, _pooled_summaries, resamples=resamples, rng=rng)
        for index, name in enumerate(AGGREGATE_STATISTICS):
            summaries[name][algorithm] = (
                float(point[index]),
                float(low[index]),
                float(high[index]),
            )
        profiles[algorithm] = _stratified_ci(
            strata, functools.partial(_profile, taus=taus), resamples=resamples, rng=rng
        )
    improvement = {}
    for first, algorithm in enumerate(algorithms):
        for other in algorithms[first + 1 :]:
            shared = [
                sample
                for d in normalised.how
                if (d, algorithm) in normalised.scores and (d, other) in normalised.scores
                for sample in (normalised.scores[(d, algorithm)], normalised.scores[(d, other)])
            ]
            if shared:
                point, low, high = _stratified_ci(
                    shared, _improvement, resamples=resamples, rng=rng
                )
                improvement[(algorithm, other)] = (float(point), float(low), float(high))
    counts = {a: sum(len(s) for s in _strata(normalised, a)) for a in algorithms}
    return Aggregate(
        normalised=normalised,
        algorithms=algorithms,
        summaries=summaries,
        taus=taus,
        profiles=profiles,
        improvement=improvement,
        runs=counts,
    )


def normalisation_statement(aggregate: Aggregate) -> str:
    """One line saying how each domain was normalised (and which were left out)."""
    how = aggregate.normalised.how
    kinds = set(how[d] for d in how if d not in aggregate.normalised.left_out)
    if kinds == {"min-max over the campaign's runs"}:
        text = "normalised per domain: min-max over the campaign's runs (0 worst, 1 best)"
    else:
        parts = [f"{d}: {how[d]}" for d in how if d not in aggregate.normalised.left_out]
        text = "normalised per domain (0 worst, 1 best): " + "; ".join(parts)
    for domain, why in aggregate.normalised.left_out.items():
        text += f"; {domain} left out ({why})"
    return text


AGGREGATE_COLUMNS = (
    "metric",
    "statistic",
    "algorithm",
    "versus",
    "domains",
    "runs",
    "value",
    "ci_low",
    "ci_high",
)


def aggregate_rows(aggregates: list[Aggregate]) -> list[list]:
    """Rows of ``tables/aggregate.csv`` (:data:`AGGREGATE_COLUMNS`)."""
    rows = []
    for aggregate in aggregates:
        metric = aggregate.normalised.metric
        domains = {
            a: sum(1 for (_, b) in aggregate.normalised.scores if b == a)
            for a in aggregate.algorithms
        }
        for name in AGGREGATE_STATISTICS:
            for algorithm in aggregate.algorithms:
                value = aggregate.summaries[name][algorithm]
                rows.append(
                    [metric, name, algorithm, None, domains[algorithm], aggregate.runs[algorithm]]
                    + list(value)
                )
        for (algorithm, other), value in aggregate.improvement.items():
            shared = sum(
                1
                for (d, a) in aggregate.normalised.scores
                if a == algorithm and (d, other) in aggregate.normalised.scores
            )
            runs = aggregate.runs[algorithm] + aggregate.runs[other]
            rows.append(
                [metric, "probability_of_improvement", algorithm, other, shared, runs] + list(value)
            )
    return rows


def aggregate_csv(aggregates: list[Aggregate]) -> str:
    """``tables/aggregate.csv``: tidy rows of every aggregate and its 95% interval."""
    return csv_text(AGGREGATE_COLUMNS, aggregate_rows(aggregates))


def aggregate_markdown(aggregates: list[Aggregate]) -> str:
    """``tables/aggregate.md``: per metric, IQM, median and mean of the normalised
    scores, and the probability of improvement of each pair."""
    parts = [
        "Aggregates across domains (Agarwal et al. 2021, rliable): interquartile mean "
        "(IQM), median and mean of the normalised final scores of every (domain, seed) "
        "run, and the probability of improvement P(X > Y) (mean over domains of the "
        "probability that a run of X beats a run of Y, ties half); 95% stratified "
        "bootstrap intervals (each domain's runs resampled on their own)."
    ]
    labels = dict((name, label) for name, label, _ in TABLE_METRICS)
    for aggregate in aggregates:
        metric = aggregate.normalised.metric
        parts.append(f"**{labels.get(metric, metric)}**, {normalisation_statement(aggregate)}")
        summaries = [
            [algorithm, aggregate.runs[algorithm]]
            + [interval(aggregate.summaries[n][algorithm]) for n in AGGREGATE_STATISTICS]
            for algorithm in aggregate.algorithms
        ]
        parts.append(markdown_table(["algorithm", "runs", "IQM", "median", "mean"], summaries))
        if aggregate.improvement:
            pairs = [
                [algorithm, other, interval(value)]
                for (algorithm, other), value in aggregate.improvement.items()
            ]
            parts.append(markdown_table(["X", "Y", "P(X > Y)"], pairs))
    return markdown_text(*parts)
