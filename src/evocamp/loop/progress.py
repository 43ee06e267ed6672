"""Progress lines for the log: one per generation, with an ETA."""

from __future__ import annotations

import datetime
import math

import numpy as np

from evocamp.model.runspec import evaluation_repeats, run_label
from evocamp.model.state import RunState

#: Generations averaged for the seconds-per-generation estimate.
RATE_WINDOW = 10


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` for a number of seconds (``?`` when unknown)."""
    if not np.isfinite(seconds):
        return "?"
    return str(datetime.timedelta(seconds=round(max(seconds, 0.0))))


def generation_line(state: RunState, *, total: int | None) -> str:
    """One log line: run, generation/total, evaluations (and the repeats of each, with
    ``evaluation.repeats``), QD score and coverage (runs with an archive), best
    objective so far, seconds per generation and the ETA."""
    # Python floats and sums: numpy's mean and isfinite on scalars cost more than the
    # rest of the line (Dask mode's segments write one every generation).
    row = state.metrics_window[-1]
    recent = state.metrics_window["wall_seconds"][-RATE_WINDOW:].tolist()
    per_generation = sum(recent) / len(recent) if recent else float("nan")
    progress = f"{state.generation}/{total}" if total else f"{state.generation}"
    remaining = (total - state.generation) * per_generation if total else float("nan")
    quality = f"best {float(row['best_objective']):.4g}"
    qd_score = float(row["qd_score"])
    if math.isfinite(qd_score):
        quality = f"qd_score {qd_score:.4g} | coverage {float(row['coverage']):.3f} | {quality}"
    repeats = evaluation_repeats(state.spec)
    evaluations = f"{int(row['evaluations'])}" + (f" ({repeats} repeats)" if repeats > 1 else "")
    return (
        f"{run_label(state.spec)}: generation {progress} | evaluations "
        f"{evaluations} | {quality} | "
        f"{per_generation:.2f} s/gen | ETA {format_duration(remaining)}"
    )
