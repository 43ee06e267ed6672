"""The metrics schema: one row per generation, the same columns for every family.

Rows are numpy structured arrays of :data:`METRIC_DTYPE`; they live in a state's
metrics window, in the saved metrics windows (CSV) written at kept checkpoints and in a run's
``metrics.csv`` (docs/outputs.md: "metrics.csv columns").
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from evocamp.base.files import atomic_write_text

METRIC_FIELDS = (
    ("generation", np.int64),
    ("evaluations", np.int64),
    ("qd_score", np.float64),
    ("norm_qd_score", np.float64),
    ("coverage", np.float64),
    ("obj_max", np.float64),
    ("obj_mean", np.float64),
    ("num_elites", np.int64),
    ("wall_seconds", np.float64),
    ("eval_seconds", np.float64),
    ("best_objective", np.float64),
    ("gen_obj_max", np.float64),
    ("gen_obj_mean", np.float64),
    ("sigma", np.float64),
    ("fit_seconds", np.float64),
    ("propose_seconds", np.float64),
    ("utilisation", np.float64),
    ("cqd_score", np.float64),
    ("own_archive_size", np.float64),
    ("failed", np.int64),
    ("timed_out", np.int64),
    ("failed_total", np.int64),
    ("attempts", np.int64),
    ("retries", np.int64),
    ("failed_seconds", np.float64),
)
METRIC_DTYPE = np.dtype(list(METRIC_FIELDS))
#: Metric columns an optimizer's ``stats()`` may fill.
OPTIMIZER_STATS = ("sigma", "fit_seconds", "propose_seconds", "own_archive_size")
#: Timings a compact batch's ``solutions`` may report per shard (mean over shards).
SHARD_STATS = ("fit_seconds", "propose_seconds")
#: Columns measured in seconds (or derived from them): they differ between runs of the
#: same campaign, every other column is reproducible.
TIMING_COLUMNS = (
    "wall_seconds",
    "eval_seconds",
    "fit_seconds",
    "propose_seconds",
    "utilisation",
    "failed_seconds",
)
FLOAT_FORMAT = "%.17g"


def blank_metric_rows(count: int) -> np.ndarray:
    """``count`` metric rows: integer columns 0, float columns NaN."""
    return np.repeat(_BLANK_METRIC_ROW, count)


def _blank_metric_row() -> np.ndarray:
    row = np.zeros(1, dtype=METRIC_DTYPE)
    for name in METRIC_DTYPE.names:
        if METRIC_DTYPE[name].kind == "f":
            row[name] = np.nan
    return row


_BLANK_METRIC_ROW = _blank_metric_row()
#: A blank row's values by column, in :data:`METRIC_DTYPE`'s order.
_BLANK_VALUES = dict(zip(METRIC_DTYPE.names, _BLANK_METRIC_ROW[0].item(), strict=True))


def as_metric_rows(rows: np.ndarray) -> np.ndarray:
    """Metric rows in ``METRIC_DTYPE``; columns an older file lacks are NaN (0 for
    integer columns), but ``best_objective``, which is the QD archive's ``obj_max``."""
    if rows.dtype == METRIC_DTYPE:
        return rows
    out = blank_metric_rows(len(rows))
    for name in rows.dtype.names:
        if name in METRIC_DTYPE.names:
            out[name] = rows[name]
    if "best_objective" not in rows.dtype.names:
        # Written before version 3 (QD runs only): the archive's best is the best so far.
        out["best_objective"] = rows["obj_max"]
    return out


def metrics_row(
    *,
    archive,
    generation: int,
    evaluations: int,
    objective: np.ndarray,
    best_objective: float,
    wall_seconds: float,
    eval_seconds: float,
    shard_stats: dict | None = None,
    optimizer_stats: dict | None = None,
    workers: int = 0,
    cqd_score: float = np.nan,
    failures: dict | None = None,
) -> np.ndarray:
    """One metrics row.

    QD columns come from ``archive`` (NaN without one); ``gen_obj_max`` and
    ``gen_obj_mean`` from the generation's ``objective`` (NaN at generation 0);
    ``fit_seconds`` and ``propose_seconds`` from the shards (mean per shard) or, when
    the optimizer proposes in ``tell``, from ``optimizer_stats`` (its ``stats()``) like
    ``sigma``;
    ``utilisation`` is ``eval_seconds / (wall_seconds x workers)``, with ``workers`` the
    evaluations that could run at once (shards in shard mode, Dask workers in Dask mode);
    ``cqd_score`` as computed by the caller (NaN: none); ``failures`` the
    ``failed``, ``timed_out`` and ``failed_total`` counts, the ``attempts`` and
    ``retries`` and the ``failed_seconds`` (0 when not given).
    """
    # The row's values in a dict, then one structured row: setting a structured
    # array's fields one by one costs more (Dask mode's segments: every generation).
    row = dict(_BLANK_VALUES)
    row["generation"] = generation
    row["evaluations"] = evaluations
    if archive is not None:
        stats = archive.stats
        row["qd_score"] = stats.qd_score
        row["norm_qd_score"] = stats.norm_qd_score
        row["coverage"] = stats.coverage
        row["obj_max"] = np.nan if stats.obj_max is None else stats.obj_max
        row["obj_mean"] = np.nan if stats.obj_mean is None else stats.obj_mean
        row["num_elites"] = stats.num_elites
    if len(objective):
        row["gen_obj_max"] = objective.max()
        # A float64 array's mean as numpy computes it, its sum over the count, without
        # the wrappers around it (the same bits; Dask mode's segments: every generation).
        row["gen_obj_mean"] = (
            np.add.reduce(objective) / len(objective)
            if objective.dtype == np.float64
            else objective.mean()
        )
    row["best_objective"] = best_objective
    row["cqd_score"] = cqd_score
    row["failed_seconds"] = 0.0
    for columns in (failures, shard_stats):
        for name, value in (columns or {}).items():
            if name not in row:  # as setting a structured row's field checks
                raise ValueError(f"no field of name {name}")
            row[name] = value
    for name, value in (optimizer_stats or {}).items():
        if name in OPTIMIZER_STATS:
            row[name] = value
    row["wall_seconds"] = wall_seconds
    row["eval_seconds"] = eval_seconds
    if workers and wall_seconds > 0:
        row["utilisation"] = eval_seconds / (wall_seconds * workers)
    return np.array([tuple(row.values())], dtype=METRIC_DTYPE)


def rows_to_csv(rows: np.ndarray) -> str:
    """Format metric rows as CSV with a header line."""
    buffer = io.StringIO()
    buffer.write(",".join(METRIC_DTYPE.names) + "\n")
    for row in rows:
        cells = []
        for name in METRIC_DTYPE.names:
            value = row[name]
            cells.append(
                str(int(value)) if METRIC_DTYPE[name].kind == "i" else FLOAT_FORMAT % float(value)
            )
        buffer.write(",".join(cells) + "\n")
    return buffer.getvalue()


def read_metrics_csv(path: str | Path) -> np.ndarray:
    """Read a metrics CSV back into ``METRIC_DTYPE`` rows (columns of later versions
    that an older file lacks are NaN)."""
    return as_metric_rows(np.genfromtxt(path, delimiter=",", names=True, dtype=None, ndmin=1))


def write_rows(path: str | Path, rows: np.ndarray) -> None:
    """Write metric rows as CSV atomically."""
    atomic_write_text(path, rows_to_csv(rows))


def merge_history(
    window_files: list[Path], window: np.ndarray, *, up_to: int | None = None
) -> np.ndarray:
    """Join saved metrics windows and the rows of the latest state's window, one row
    per generation.

    Where a generation appears twice (a final state that is also a kept
    checkpoint), the later source wins; rows come out sorted by generation. With
    ``up_to``, rows of later generations are left out (windows a run saved before its
    campaign's ``generations`` was lowered).
    """
    latest = {}
    for part in [read_metrics_csv(path) for path in sorted(window_files)] + [window]:
        for row in part:
            if up_to is None or int(row["generation"]) <= up_to:
                latest[int(row["generation"])] = row
    return np.array([latest[g] for g in sorted(latest)], dtype=METRIC_DTYPE)
