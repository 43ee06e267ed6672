"""Statistics of a campaign's final results: significance tests, aggregates across
domains, runtime to target.

Everything here reads runs loaded by :func:`evocamp.reporting.comparison.load_runs`
(the ``metrics.csv`` of every run); nothing is re-evaluated. The statistics
themselves are scipy's and statsmodels' (rank tests, bootstrap, trimmed means, Holm),
seeded from the campaign's master seed, so every table is reproducible byte for byte.

- **Significance** (:func:`significance_tests`): per domain and final metric, a
  two-sided Mann-Whitney U test of every algorithm against the best one (best mean),
  Holm-corrected within the domain and metric, and the Vargha-Delaney A12 effect size.
- **Aggregates** (:func:`aggregate_scores`): rliable's recommendations (Agarwal et al.
  2021): per algorithm, the interquartile mean, median and mean of normalised scores
  over every (domain, seed) run with stratified bootstrap intervals, performance
  profiles, and the probability of improvement of each pair.
- **Runtime to target** (:func:`runtime_to_target`): COCO / IOHprofiler-style
  empirical cumulative distributions of the evaluations (and wall seconds) needed to
  reach each of a domain's targets, and the expected running time (ERT) per target.
"""

from __future__ import annotations

import functools
import gc
from dataclasses import dataclass, field

import numpy as np

from evocamp.reporting.comparison import (
    DAGGER,
    TABLE_METRICS,
    RunMetrics,
    final_metrics_table,
    grouped,
    table_csv,
    table_latex,
    table_markdown,
)

#: Final metrics for which a lower value is better (every other one: higher).
LOWER_IS_BETTER = frozenset({"best_value", "elapsed_seconds"})
#: Columns of ``tables/tests.csv``.
TEST_COLUMNS = (
    "domain",
    "metric",
    "algorithm",
    "reference",
    "n",
    "n_reference",
    "statistic",
    "p",
    "p_holm",
    "a12",
    "significant",
)
#: Points of the performance profiles' threshold grid.
PROFILE_POINTS = 101
#: Quantiles of the targets shown in the Markdown ERT table (the CSV has every target).
ERT_SHOWN = (0.0, 0.25, 0.5, 0.75, 1.0)


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
    target_values: dict = field(default_factory=dict)
    reference: dict = field(default_factory=dict)

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


# --- values -------------------------------------------------------------------------


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


def _finals_by_algorithm(runs: list[RunMetrics], domain: str, field: str) -> dict[str, np.ndarray]:
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


# --- significance -------------------------------------------------------------------


def a12(values: np.ndarray, reference: np.ndarray, *, lower_is_better: bool = False):
    """Vargha-Delaney A12: the probability that a run of ``values`` beats a run of
    ``reference`` (ties count half), from scipy's Mann-Whitney U statistic.

    Parameters
    ----------
    values, reference : numpy.ndarray
        Samples along the last axis (leading axes are batches, as in a bootstrap).
    lower_is_better : bool
        Whether a lower value beats a higher one.

    Returns
    -------
    float or numpy.ndarray
        A12 in [0, 1]; 0.5: no difference.
    """
    from scipy.stats import mannwhitneyu

    values, reference = np.asarray(values), np.asarray(reference)
    u = mannwhitneyu(values, reference, axis=-1, method="asymptotic").statistic
    share = u / (values.shape[-1] * reference.shape[-1])
    return 1.0 - share if lower_is_better else share


def holm(p_values: list[float], *, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down correction (statsmodels' ``multipletests``).

    Returns
    -------
    tuple of numpy.ndarray
        Corrected p-values and whether each hypothesis is rejected at ``alpha``.
    """
    if not len(p_values):
        return np.zeros(0), np.zeros(0, dtype=bool)
    from statsmodels.stats.multitest import multipletests

    # statsmodels' Holm branch calls gc.collect(), which walks every object of the
    # process (0.6 s in a test process); frozen objects are skipped.
    gc.freeze()
    try:
        reject, corrected, _, _ = multipletests(p_values, alpha=alpha, method="holm")
    finally:
        gc.unfreeze()
    return corrected, reject


def best_algorithm(finals: dict[str, np.ndarray], field: str) -> str:
    """The algorithm with the best mean final value (the first of equals)."""
    sign = -1.0 if field in LOWER_IS_BETTER else 1.0
    return max(finals, key=lambda name: sign * float(np.mean(finals[name])))


def tested_metrics(runs: list[RunMetrics]) -> list[str]:
    """The final metrics of the comparison table that some run has."""
    return [
        name for name, _, _ in TABLE_METRICS if any(np.isfinite(r.values(name)[-1]) for r in runs)
    ]


def significance_tests(runs: list[RunMetrics], *, alpha: float) -> list[dict]:
    """Every algorithm against the best of each domain and final metric.

    For each domain and each final metric the comparison table shows, the algorithm
    with the best mean is the reference; every other algorithm gets a two-sided
    Mann-Whitney U test (scipy) against it, p-values Holm-corrected within the domain
    and metric (statsmodels), and the Vargha-Delaney A12 (probability that a run of the
    algorithm beats a run of the reference; lower is better for ``best_value`` and
    ``elapsed_seconds``). An algorithm with fewer than 2 seeds (or a reference with
    fewer) is not tested: its test fields are ``None``.

    Returns
    -------
    list of dict
        One row per (domain, metric, algorithm) with the keys of
        :data:`TEST_COLUMNS`; the reference's own row has no test.
    """
    from scipy.stats import mannwhitneyu

    rows = []
    for domain in domains_of(runs):
        for metric in tested_metrics(runs):
            finals = _finals_by_algorithm(runs, domain, metric)
            if not finals:
                continue
            reference = best_algorithm(finals, metric)
            block = []
            for algorithm, values in finals.items():
                row = dict.fromkeys(TEST_COLUMNS)
                row.update(
                    domain=domain,
                    metric=metric,
                    algorithm=algorithm,
                    reference=reference,
                    n=len(values),
                    n_reference=len(finals[reference]),
                )
                if algorithm != reference and min(len(values), len(finals[reference])) >= 2:
                    test = mannwhitneyu(values, finals[reference], alternative="two-sided")
                    row["statistic"] = float(test.statistic)
                    row["p"] = float(test.pvalue)
                    row["a12"] = float(
                        a12(values, finals[reference], lower_is_better=metric in LOWER_IS_BETTER)
                    )
                block.append(row)
            tested = [row for row in block if row["p"] is not None]
            corrected, reject = holm([row["p"] for row in tested], alpha=alpha)
            for row, p_holm, rejected in zip(tested, corrected, reject, strict=True):
                row["p_holm"] = float(p_holm)
                row["significant"] = bool(rejected)
            rows += block
    return rows


def table_marks(tests: list[dict]) -> dict[tuple[str, str, str], str]:
    """Marks for the comparison tables: ``best`` for each reference, ``tied`` for an
    algorithm not significantly different from it; keyed by (domain, algorithm,
    metric)."""
    marks = {}
    for row in tests:
        key = (row["domain"], row["algorithm"], row["metric"])
        if row["algorithm"] == row["reference"]:
            marks[key] = "best"
        elif row["significant"] is False:
            marks[key] = "tied"
    return marks


def tests_caption(tests: list[dict], *, alpha: float) -> str:
    """The caption line of the comparison tables: which test, correction and alpha (or
    why there are no tests)."""
    what = "Bold: the best mean of the domain and metric."
    if not any(row["p"] is not None for row in tests):
        return (
            f"{what} No significance tests: they need at least 2 seeds per algorithm "
            "(and 2 algorithms)."
        )
    return (
        f"{what} {DAGGER}: not significantly different from it (two-sided Mann-Whitney U "
        f"test, p-values Holm-corrected within each domain and metric, alpha = {alpha:g}; "
        "tables/tests.csv)."
    )


# --- aggregates across domains ------------------------------------------------------


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
        finals = _finals_by_algorithm(runs, domain, metric)
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


# --- runtime to target --------------------------------------------------------------


def domain_targets(
    finals: np.ndarray, *, lower_is_better: bool, count: int, spacing: str
) -> tuple[np.ndarray, str]:
    """Targets from the worst to the best final value of a domain's runs.

    ``spacing`` ``auto`` is log-spaced for minimised values (lower is better) when
    every final value is positive, else linear; ``log`` with a value at or below zero
    falls back to linear. Returns the targets (easiest first) and the spacing used.
    """
    worst = float(finals.max() if lower_is_better else finals.min())
    best = float(finals.min() if lower_is_better else finals.max())
    wants_log = spacing == "log" or (spacing == "auto" and lower_is_better)
    if wants_log and min(worst, best) > 0:
        return np.geomspace(worst, best, count), "log"
    return np.linspace(worst, best, count), "linear"


def first_hits(
    values: np.ndarray, costs: np.ndarray, targets: np.ndarray, *, lower_is_better: bool
) -> np.ndarray:
    """The cost (evaluations, or seconds) at which a best-so-far curve first reaches
    each target; ``inf`` for targets it never reaches.

    Parameters
    ----------
    values : numpy.ndarray
        Best-so-far value per generation (NaN where unknown).
    costs : numpy.ndarray
        Cumulative cost per generation (ascending).
    targets : numpy.ndarray
        Targets to reach (reached: at or above, or at or below where lower is better).
    """
    values = np.asarray(values, dtype=np.float64)[:, None]
    if lower_is_better:
        reached = values <= targets[None, :]
    else:
        reached = values >= targets[None, :]
    hit = reached.any(axis=0)
    first = np.argmax(reached, axis=0)
    return np.where(hit, np.asarray(costs, dtype=np.float64)[first], np.inf)


def ecdf(runtimes: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """Fraction of (run, target) pairs whose runtime is at most each budget.

    Parameters
    ----------
    runtimes : numpy.ndarray
        Runtimes of every (run, target) pair, any shape (``inf``: never reached).
    budgets : numpy.ndarray
        Budgets (evaluations or seconds).
    """
    ordered = np.sort(np.ravel(runtimes))
    return np.searchsorted(ordered, budgets, side="right") / len(ordered)


def expected_running_time(runtimes: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """ERT per target: the cost summed over runs (until a run reaches the target, or
    its whole cost when it never does) divided by the runs that reach it (``inf`` if
    none does).

    Parameters
    ----------
    runtimes : numpy.ndarray
        ``(runs, targets)`` runtimes (``inf``: not reached).
    totals : numpy.ndarray
        Each run's whole cost.
    """
    reached = np.isfinite(runtimes)
    spent = np.where(reached, runtimes, np.asarray(totals, dtype=np.float64)[:, None]).sum(axis=0)
    successes = reached.sum(axis=0)
    with np.errstate(divide="ignore"):
        return np.where(successes > 0, spent / np.maximum(successes, 1), np.inf)


@dataclass
class DomainRuntimes:
    """Runtime to target of one domain (:func:`runtime_to_target`)."""

    domain: str
    field: str
    targets: np.ndarray
    spacing: str
    #: algorithm -> (runs, targets) evaluations and wall seconds to reach each target
    evaluations: dict[str, np.ndarray]
    seconds: dict[str, np.ndarray]
    total_evaluations: dict[str, np.ndarray]
    total_seconds: dict[str, np.ndarray]


def runtime_to_target(runs: list[RunMetrics], settings: StatisticsSettings) -> list[DomainRuntimes]:
    """Per domain: targets on the best-so-far value (a minimisation benchmark's best
    value, else the best objective), and for every run the evaluations and wall
    seconds at which it first reaches each target."""
    groups = grouped(runs)
    result = []
    for domain in domains_of(runs):
        members = {a: m for (d, a), m in groups.items() if d == domain}
        field_name = best_field(next(iter(members.values())))
        lower = field_name in LOWER_IS_BETTER
        finals = np.concatenate([final_values(m, field_name) for m in members.values()])
        finals = finals[np.isfinite(finals)]
        if not len(finals):
            continue
        if domain in settings.target_values:
            targets = np.asarray(settings.target_values[domain], dtype=np.float64)
            spacing = "given"
        else:
            targets, spacing = domain_targets(
                finals,
                lower_is_better=lower,
                count=settings.target_count,
                spacing=settings.target_spacing,
            )
        entry = DomainRuntimes(domain, field_name, targets, spacing, {}, {}, {}, {})
        for algorithm, group in members.items():
            entry.evaluations[algorithm] = np.stack(
                [
                    first_hits(
                        r.values(field_name), r.rows["evaluations"], targets, lower_is_better=lower
                    )
                    for r in group
                ]
            )
            entry.seconds[algorithm] = np.stack(
                [
                    first_hits(
                        r.values(field_name),
                        r.values("elapsed_seconds"),
                        targets,
                        lower_is_better=lower,
                    )
                    for r in group
                ]
            )
            entry.total_evaluations[algorithm] = np.array(
                [float(r.rows["evaluations"][-1]) for r in group]
            )
            entry.total_seconds[algorithm] = np.array(
                [float(r.values("elapsed_seconds")[-1]) for r in group]
            )
        result.append(entry)
    return result


# --- tables ---------------------------------------------------------------------------


def _cell(value) -> str:
    """A CSV cell: empty for ``None``, ``true``/``false``, integers as they are, floats
    with every digit (``repr``), so that rereading gives the same numbers."""
    if value is None:
        return ""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return repr(float(value))
    return str(value)


def csv_text(header: list[str] | tuple[str, ...], rows: list[list]) -> str:
    """CSV of plain cells (names without commas, numbers)."""
    lines = [",".join(header)] + [",".join(_cell(value) for value in row) for row in rows]
    return "\n".join(lines) + "\n"


def tests_csv(tests: list[dict]) -> str:
    """``tables/tests.csv``: one row per (domain, metric, algorithm)."""
    return csv_text(TEST_COLUMNS, [[row[c] for c in TEST_COLUMNS] for row in tests])


def _short(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    return f"{value:.3g}"


def tests_markdown(tests: list[dict], *, alpha: float) -> str:
    """``tables/tests.md``: the tests as a readable table."""
    header = ["domain", "metric", "algorithm", "reference", "n", "U", "p", "p (Holm)", "A12"]
    header.append(f"significant (alpha = {alpha:g})")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in tests:
        cells = [row["domain"], row["metric"], row["algorithm"], row["reference"]]
        cells.append(f"{row['n']} vs {row['n_reference']}")
        cells += [_short(row[c]) for c in ("statistic", "p", "p_holm", "a12", "significant")]
        lines.append("| " + " | ".join(cells) + " |")
    caption = (
        "Every algorithm against the best (by mean) of each domain and final metric: "
        "two-sided Mann-Whitney U test (U of the algorithm), p-values Holm-corrected "
        "within each domain and metric, Vargha-Delaney A12 = probability that a run of "
        "the algorithm beats a run of the reference (ties half; lower is better for "
        "best_value and elapsed_seconds). Tests need at least 2 seeds on each side."
    )
    return caption + "\n\n" + "\n".join(lines) + "\n"


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


def _interval(value: tuple[float, float, float]) -> str:
    return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"


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
        lines = ["| algorithm | runs | IQM | median | mean |", "|---|---|---|---|---|"]
        for algorithm in aggregate.algorithms:
            cells = [algorithm, str(aggregate.runs[algorithm])]
            cells += [_interval(aggregate.summaries[n][algorithm]) for n in AGGREGATE_STATISTICS]
            lines.append("| " + " | ".join(cells) + " |")
        if aggregate.improvement:
            lines += ["", "| X | Y | P(X > Y) |", "|---|---|---|"]
            for (algorithm, other), value in aggregate.improvement.items():
                lines.append(f"| {algorithm} | {other} | {_interval(value)} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


ERT_COLUMNS = (
    "domain",
    "metric",
    "target_index",
    "target",
    "algorithm",
    "runs",
    "successes",
    "ert_evaluations",
    "ert_seconds",
)


def ert_rows(runtimes: list[DomainRuntimes]) -> list[list]:
    """Rows of ``tables/ert.csv`` (:data:`ERT_COLUMNS`)."""
    rows = []
    for entry in runtimes:
        for algorithm, evaluations in entry.evaluations.items():
            by_evaluations = expected_running_time(evaluations, entry.total_evaluations[algorithm])
            by_seconds = expected_running_time(
                entry.seconds[algorithm], entry.total_seconds[algorithm]
            )
            successes = np.isfinite(evaluations).sum(axis=0)
            for index, target in enumerate(entry.targets):
                rows.append(
                    [
                        entry.domain,
                        entry.field,
                        index,
                        float(target),
                        algorithm,
                        len(evaluations),
                        int(successes[index]),
                        float(by_evaluations[index]),
                        float(by_seconds[index]),
                    ]
                )
    return rows


def ert_csv(runtimes: list[DomainRuntimes]) -> str:
    """``tables/ert.csv``: the ERT of every target (evaluations and wall seconds)."""
    return csv_text(ERT_COLUMNS, ert_rows(runtimes))


def shown_target_indices(count: int) -> list[int]:
    """Indices of the targets the Markdown ERT table shows (:data:`ERT_SHOWN`)."""
    return list(dict.fromkeys(round(q * (count - 1)) for q in ERT_SHOWN))


def ert_markdown(runtimes: list[DomainRuntimes]) -> str:
    """``tables/ert.md``: ERT in evaluations at five targets per domain (easiest,
    quartiles, hardest) with the runs that reached each."""
    parts = [
        "Expected running time (ERT, evaluations): evaluations summed over runs (until "
        "the target is reached, or the whole run when it is not) / runs that reach it; "
        "in brackets the runs that reach it; inf: none does. tables/ert.csv has every "
        "target and the ERT in wall seconds."
    ]
    for entry in runtimes:
        shown = shown_target_indices(len(entry.targets))
        header = ["algorithm"] + [f"{entry.targets[i]:.4g}" for i in shown]
        lines = [
            f"**{entry.domain}**, targets on {entry.field} ({entry.spacing} spacing)",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for algorithm, evaluations in entry.evaluations.items():
            ert = expected_running_time(evaluations, entry.total_evaluations[algorithm])
            successes = np.isfinite(evaluations).sum(axis=0)
            cells = [algorithm] + [
                f"{ert[i]:.4g} ({successes[i]}/{len(evaluations)})" for i in shown
            ]
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


# --- everything at once ---------------------------------------------------------------


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
    (CSV, Markdown, LaTeX), the tests, the aggregates of ``settings.aggregate_metrics``
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
    tables = {
        "final_metrics.csv": table_csv(table),
        "final_metrics.md": table_markdown(table, marks=marks, note=note),
        "final_metrics.tex": table_latex(table, marks=marks, note=note),
        "tests.csv": tests_csv(tests),
        "tests.md": tests_markdown(tests, alpha=settings.alpha),
        "aggregate.csv": aggregate_csv(aggregates),
        "aggregate.md": aggregate_markdown(aggregates),
        "ert.csv": ert_csv(runtimes),
        "ert.md": ert_markdown(runtimes),
    }
    return CampaignStatistics(tables=tables, aggregates=aggregates, runtimes=runtimes)
