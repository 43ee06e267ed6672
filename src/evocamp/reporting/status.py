"""``evocamp status``: progress of every run of a campaign, as text, over ssh.

It reads only results: saved metrics windows, the newest checkpoint of the
current window (written atomically, so reading it while a campaign runs is safe)
and the last progress line of the logs. No display or server is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.catalogue.domains import minimised_value, objective_max
from evocamp.executors.housekeeping import generation_folders, window_logs
from evocamp.files.checkpoint import read_state
from evocamp.loop.progress import format_duration
from evocamp.model.layout import SUMMARY, CampaignFolder, RunFolder
from evocamp.model.metrics import METRIC_DTYPE, merge_history, read_metrics_csv
from evocamp.model.numerics import is_mixed, mixed_summary

PROGRESS = re.compile(r"generation (\d+)/(\d+)")


@dataclass
class RunProgress:
    """What is known of one run."""

    label: str
    rows: np.ndarray
    total: int | None
    finished: bool
    #: What a minimisation benchmark's objective is minus (e.g. ``ackley``), else None.
    minimised: str | None = None
    #: How the run mixed numeric environments (:func:`~evocamp.model.numerics.mixed_summary`),
    #: or ``None`` when all its steps so far ran under one.
    mixed: str | None = None
    #: The run's spec (``None`` before its first checkpoint can be read).
    spec: dict | None = None
    #: A minimisation benchmark's best objective (a BBOB instance's ``-f_opt``), else 0.
    objective_max: float = 0.0

    def failed(self) -> int:
        """Evaluations of the run that failed so far (``evaluation.on_failure``)."""
        return int(self.rows["failed_total"][-1]) if len(self.rows) else 0

    def best(self) -> tuple[np.ndarray, str]:
        """Best so far per generation and its name: a minimisation benchmark's value
        itself (e.g. the best Ackley value), else the best objective."""
        if self.minimised:
            best = self.objective_max - self.rows["best_objective"]
            return best, f"best {self.minimised} value (min.)"
        return self.rows["best_objective"], "best objective"


def _newest_state(run: RunFolder):
    for path in run.states_newest_first():
        try:
            return read_state(path, with_optimizer=False)
        except (CorruptFileError, OSError, KeyError):
            continue
    return None


def _total_generations(log_folder: Path) -> int | None:
    """The run's length as its newest progress line says (``generation g/N``): from the
    logs of the current window's generations, else from the newest folded window."""
    if not log_folder.is_dir():
        return None
    newest = [
        log
        for folder in reversed(generation_folders(log_folder)[-3:])
        for log in sorted(folder.glob("*.log"))
    ]
    for log in newest + window_logs(log_folder)[::-1][:1]:
        matches = PROGRESS.findall(log.read_text(errors="replace"))
        if matches:
            return int(matches[-1][1])
    return None


def run_progress(folder: Path, campaign_folder: Path) -> RunProgress:
    """Metrics so far, total generations and completion of the run in ``folder``."""
    relative = folder.relative_to(campaign_folder)
    run = RunFolder(folder)
    state = _newest_state(run)
    window = state.metrics_window if state is not None else np.zeros(0, dtype=METRIC_DTYPE)
    rows = merge_history(run.metrics_window_files(), window)
    finished_files = run.summaries()
    total = _total_generations(run.logs)
    finished = False
    if run.metrics.exists():
        final = read_metrics_csv(run.metrics)
        if len(final) >= len(rows):
            rows = final
        finished_at = SUMMARY.number_of(finished_files[-1].name) if finished_files else -1
        finished = finished_at == int(rows["generation"][-1]) and (total in (None, finished_at))
    minimised = minimised_value(state.spec["domain_spec"]) if state else None
    best = objective_max(state.spec["domain_spec"]) if minimised else None
    mixed = mixed_summary(state.numerics) if state and is_mixed(state.numerics) else None
    return RunProgress(
        label=str(relative),
        rows=rows,
        total=total,
        finished=finished,
        minimised=minimised,
        mixed=mixed,
        spec=state.spec if state else None,
        objective_max=0.0 if best is None else best,
    )


def find_runs(campaign_folder: Path) -> list[Path]:
    """Run folders (``<algorithm>/<domain>/seed<k>``) below a campaign folder."""
    return [run.path for run in CampaignFolder(campaign_folder).runs()]


def text_plot(x: np.ndarray, y: np.ndarray, *, width: int = 60, height: int = 8) -> list[str]:
    """A small ASCII line plot of ``y`` against ``x`` with labelled extremes."""
    if len(x) == 0:
        return ["(no data yet)"]
    y = np.nan_to_num(np.asarray(y, dtype=np.float64))
    low, high = float(y.min()), float(y.max())
    span = high - low or 1.0
    columns = np.linspace(float(x[0]), float(x[-1]), width) if len(x) > 1 else np.array([x[0]])
    canvas = [[" "] * len(columns) for _ in range(height)]
    for column, position in enumerate(columns):
        value = y[min(np.searchsorted(x, position, side="right") - 1, len(y) - 1)]
        level = int(round((value - low) / span * (height - 1)))
        canvas[height - 1 - level][column] = "*"
    labels = [f"{high:>10.4g} |", *[" " * 10 + " |"] * (height - 2), f"{low:>10.4g} |"]
    lines = [label + "".join(row) for label, row in zip(labels, canvas, strict=True)]
    lines.append(" " * 11 + "+" + "-" * len(columns))
    lines.append(" " * 12 + f"generations {int(x[0])} .. {int(x[-1])}")
    return lines


def campaigns_below(folder: Path) -> list[Path]:
    """Campaign folders directly below a results folder (those that hold runs)."""
    if not folder.is_dir():
        return []
    return [path for path in sorted(folder.iterdir()) if path.is_dir() and find_runs(path)]


def status_report(folder: str | Path, *, plots: bool = True) -> str:
    """The text shown by ``evocamp status``.

    Parameters
    ----------
    folder : str or Path
        A campaign folder (``results/<campaign>``): a table of its runs and a QD-score
        plot of each. A results folder holding campaigns: the same for each campaign.
    plots : bool
        Whether to draw the text plots.
    """
    folder = Path(folder)
    if find_runs(folder):
        return campaign_report(folder, plots=plots)
    campaigns = campaigns_below(folder)
    if not campaigns:
        return f"no runs under {folder} yet"
    return "\n\n".join(
        f"== campaign {path.name} ({path})\n" + campaign_report(path, plots=plots)
        for path in campaigns
    )


def _cell(value: float, spec: str) -> str:
    """A table cell: the formatted value, or ``-`` where there is none (NaN: e.g. the QD
    columns of a run without an archive)."""
    return format(value, spec) if np.isfinite(value) else "-"


def campaign_report(campaign_folder: Path, *, plots: bool = True) -> str:
    """A table of a campaign's runs and a plot of each: QD score, or the best objective
    for a run without an archive."""
    runs = [run_progress(folder, campaign_folder) for folder in find_runs(campaign_folder)]
    header = (
        "run",
        "generation",
        "evaluations",
        "qd_score",
        "coverage",
        "best",
        "s/gen",
        "ETA",
        "state",
    )
    table = [header]
    for run in runs:
        if len(run.rows) == 0:
            table.append((run.label, "0", "0", "-", "-", "-", "-", "?", "starting"))
            continue
        last = run.rows[-1]
        recent = run.rows["wall_seconds"][run.rows["generation"] > 0][-10:]
        per_generation = float(np.mean(recent)) if len(recent) else float("nan")
        generation = int(last["generation"])
        remaining = (run.total - generation) * per_generation if run.total else float("nan")
        table.append(
            (
                run.label,
                f"{generation}/{run.total or '?'}",
                str(int(last["evaluations"])),
                _cell(last["qd_score"], ".4g"),
                _cell(last["coverage"], ".3f"),
                _best_cell(run),
                f"{per_generation:.2f}",
                "0:00:00" if run.finished else format_duration(remaining),
                ("finished" if run.finished else "running")
                + (", mixed" if run.mixed else "")
                + (f", {run.failed()} failed" if run.failed() else ""),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in table
    ]
    mixed = [run for run in runs if run.mixed]
    if mixed:
        lines += ["", "not bitwise comparable with a run under one numeric environment:"]
        lines += [f"  {run.label}: {run.mixed}" for run in mixed]
    failing = [run for run in runs if run.failed()]
    if failing:
        lines += ["", "evaluations that failed (docs/failures.md; each is named in the run's log):"]
        lines += [
            f"  {run.label}: {run.failed()} failed, {int(run.rows['timed_out'].sum())} of them "
            "timed out"
            for run in failing
        ]
    if plots:
        for run in runs:
            values, name = run.best()
            if np.isfinite(run.rows["qd_score"]).any():
                values, name = run.rows["qd_score"], "QD score"
            lines += ["", f"{name} of {run.label}"]
            lines += text_plot(run.rows["generation"], values)
    return "\n".join(lines)


def _best_cell(run: RunProgress) -> str:
    """The best-so-far cell: e.g. ``99.1``, or ``5.28 ackley`` for a minimised value."""
    values, _ = run.best()
    cell = _cell(values[-1], ".4g")
    return f"{cell} {run.minimised}" if run.minimised and cell != "-" else cell
