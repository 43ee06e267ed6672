"""Runtime to target of a campaign's runs, COCO / IOHprofiler-style: per domain,
targets on the best-so-far value, the evaluations (and wall seconds) at which each run
first reaches each target, their empirical cumulative distributions (ECDF) and the
expected running time (ERT) per target; ``tables/ert.{csv,md}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evocamp.reporting.comparison import (
    LOWER_IS_BETTER,
    RunMetrics,
    StatisticsSettings,
    best_field,
    domains_of,
    final_values,
    grouped,
)
from evocamp.reporting.tables import csv_text, markdown_table, markdown_text, number

#: Quantiles of the targets shown in the Markdown ERT table (the CSV has every target).
ERT_SHOWN = (0.0, 0.25, 0.5, 0.75, 1.0)


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
        header = ["algorithm"] + [number(entry.targets[i]) for i in shown]
        rows = []
        for algorithm, evaluations in entry.evaluations.items():
            ert = expected_running_time(evaluations, entry.total_evaluations[algorithm])
            successes = np.isfinite(evaluations).sum(axis=0)
            rows.append(
                [algorithm]
                + [f"{number(ert[i])} ({successes[i]}/{len(evaluations)})" for i in shown]
            )
        parts.append(f"**{entry.domain}**, targets on {entry.field} ({entry.spacing} spacing)")
        parts.append(markdown_table(header, rows))
    return markdown_text(*parts)
