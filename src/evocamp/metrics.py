"""Per-generation metrics: CSV segments written at kept checkpoints, merged per run."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from evocamp.storage import METRIC_DTYPE, as_metric_rows, atomic_write_text

FLOAT_FORMAT = "%.17g"


def rows_to_csv(rows: np.ndarray) -> str:
    """Format metric rows (``METRIC_DTYPE``) as CSV with a header line."""
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


def merge_history(segment_files: list[Path], window: np.ndarray) -> np.ndarray:
    """Join saved segments and the rows of the latest state, one row per generation.

    Where a generation appears twice (a final state that is also a kept
    checkpoint), the later source wins; rows come out sorted by generation.
    """
    latest = {}
    for part in [read_metrics_csv(path) for path in sorted(segment_files)] + [window]:
        for row in part:
            latest[int(row["generation"])] = row
    return np.array([latest[g] for g in sorted(latest)], dtype=METRIC_DTYPE)
