"""Significance of a campaign's final results: per domain and final metric, a two-sided
Mann-Whitney U test of every algorithm against the best one (best mean),
Holm-corrected within the domain and metric, and the Vargha-Delaney A12 effect size
(scipy's rank test, statsmodels' Holm); the marks and caption they give the
final-metrics tables, and ``tables/tests.{csv,md}``.
"""

from __future__ import annotations

import gc

import numpy as np

from evocamp.reporting.comparison import (
    LOWER_IS_BETTER,
    TABLE_METRICS,
    RunMetrics,
    domains_of,
    finals_by_algorithm,
)
from evocamp.reporting.tables import DAGGER, csv_text, markdown_table, markdown_text

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
            finals = finals_by_algorithm(runs, domain, metric)
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


def smallest_p(runs: int, reference_runs: int) -> tuple[float, float]:
    """The smallest p-values the two-sided Mann-Whitney U test of
    :func:`significance_tests` (scipy's) can give for ``runs`` against
    ``reference_runs`` runs: of two samples wholly apart with no tie (below 8 runs on each
    side scipy's exact test: 2 / C(runs + reference_runs, runs), 1/3 for 2 vs 2), and
    of two samples apart whose runs all tie within each (scipy's normal approximation,
    which ties bring lower)."""
    from scipy.stats import mannwhitneyu

    apart = np.arange(runs), np.arange(runs, runs + reference_runs)
    tied = np.zeros(runs), np.ones(reference_runs)
    return tuple(
        float(mannwhitneyu(*pair, alternative="two-sided").pvalue) for pair in (apart, tied)
    )


def too_few_seeds(tests: list[dict], *, alpha: float) -> str | None:
    """A sentence when the seeds are too few for a test's p to reach ``alpha`` (naming
    the smallest p of each such sample size, :func:`smallest_p`), or ``None``."""
    sizes = sorted({(row["n"], row["n_reference"]) for row in tests if row["p"] is not None})
    bounds = {size: smallest_p(*size) for size in sizes}
    too_few = [size for size in sizes if bounds[size][0] > alpha]
    if not too_few:
        return None
    which = (
        "any test"
        if len(too_few) == len(sizes)
        else "the tests of " + ", ".join(f"{n} vs {m}" for n, m in too_few) + " seeds"
    )
    unless = " (unless runs tie)" if any(bounds[size][1] <= alpha for size in too_few) else ""
    smallest = ", ".join(
        f"{bounds[n, m][0]:.4g} for {n} vs {m} seeds "
        f"({bounds[n, m][1]:.4g} if each algorithm's runs all tie)"
        for n, m in too_few
    )
    text = (
        f"Too few seeds for {which} to reject at alpha = {alpha:g}{unless}: the smallest "
        f"p a two-sided Mann-Whitney U test can give is {smallest}"
    )
    enough = next((n for n in range(2, 100) if smallest_p(n, n)[0] <= alpha), None)
    if enough is not None:
        text += f"; {enough} seeds per algorithm are the fewest whose p can reach it"
    return text + "."


def tests_caption(tests: list[dict], *, alpha: float) -> str:
    """The caption line of the comparison tables: which test, correction and alpha (or
    why there are no tests), and when the seeds are too few for any test to reject
    (:func:`too_few_seeds`)."""
    what = "Bold: the best mean of the domain and metric."
    if not any(row["p"] is not None for row in tests):
        return (
            f"{what} No significance tests: they need at least 2 seeds per algorithm "
            "(and 2 algorithms)."
        )
    caption = (
        f"{what} {DAGGER}: not significantly different from it (two-sided Mann-Whitney U "
        f"test, p-values Holm-corrected within each domain and metric, alpha = {alpha:g}; "
        "tables/tests.csv)."
    )
    few = too_few_seeds(tests, alpha=alpha)
    return f"{caption} {few}" if few else caption


def tests_csv(tests: list[dict]) -> str:
    """``tables/tests.csv``: one row per (domain, metric, algorithm)."""
    return csv_text(TEST_COLUMNS, [[row[c] for c in TEST_COLUMNS] for row in tests])


def tests_markdown(tests: list[dict], *, alpha: float) -> str:
    """``tables/tests.md``: the tests as a readable table."""
    header = ["domain", "metric", "algorithm", "reference", "n", "U", "p", "p (Holm)", "A12"]
    header.append(f"significant (alpha = {alpha:g})")
    rows = []
    for row in tests:
        cells = [row["domain"], row["metric"], row["algorithm"], row["reference"]]
        cells.append(f"{row['n']} vs {row['n_reference']}")
        rows.append(cells + [row[c] for c in ("statistic", "p", "p_holm", "a12", "significant")])
    caption = (
        "Every algorithm against the best (by mean) of each domain and final metric: "
        "two-sided Mann-Whitney U test (U of the algorithm), p-values Holm-corrected "
        "within each domain and metric, Vargha-Delaney A12 = probability that a run of "
        "the algorithm beats a run of the reference (ties half; lower is better for "
        "best_value and elapsed_seconds). Tests need at least 2 seeds on each side."
    )
    few = too_few_seeds(tests, alpha=alpha)
    if few:
        caption += " " + few
    return markdown_text(caption, markdown_table(header, rows))
