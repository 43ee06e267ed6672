"""Figures: the style every figure shares, archive heatmaps and a run's figures, as PDF
(vector) and PNG.

Figures are written without timestamps, so rebuilding them from the same results
gives byte-identical files. All figures share one style (``STYLE``): the
Okabe-Ito colour-blind-safe palette, labelled axes and colour bars, and widths that
fit one column (3.5 in) or two columns (7.2 in) of a paper. The campaign comparison's
figures are :mod:`evocamp.reporting.campaign_figures`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evocamp.files.archive import read_archive
from evocamp.model.layout import RUN_FIGURES
from evocamp.model.metrics import read_metrics_csv

ONE_COLUMN = 3.5
TWO_COLUMNS = 7.2
#: Okabe & Ito (2008), a palette distinguishable with every common colour blindness.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
HEATMAP_COLORMAP = "viridis"
#: A heatmap's colour scale starts at this percentile of its elites' objectives.
COLOUR_LOW_PERCENTILE = 2
STYLE = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.2,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
    "svg.hashsalt": "evocamp",
}
#: The metric curves: field, axis label, and the shorter one of a run's one-row figure
#: (whose panels are too low for the longer ones).
CURVES = (
    ("qd_score", "QD score", "QD score"),
    ("norm_qd_score", "normalised QD score", "norm. QD score"),
    ("coverage", "coverage (fraction of cells)", "coverage"),
    ("cqd_score", "CQD score", "CQD score"),
    ("best_objective", "best objective", "best objective"),
)


#: The timing figure draws no evaluation bars when evaluating took less than this share
#: of the wall time (they would not show).
NO_MEASURABLE_TIME = 0.01


def pyplot():
    """matplotlib.pyplot with the non-interactive backend and the project style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    plt.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=PALETTE)
    return plt


def save_figure(figure, stem: str | Path, *, tight: bool = False) -> list[Path]:
    """Save ``<stem>.pdf`` and ``<stem>.png`` with no timestamps; close the figure
    (``tight``: grow the saved area to what is drawn outside the axes, e.g. a legend)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, metadata in (
        (".pdf", {"CreationDate": None, "ModDate": None}),
        (".png", {"Software": None}),
    ):
        path = stem.with_suffix(suffix)
        figure.savefig(path, metadata=metadata, bbox_inches="tight" if tight else None)
        written.append(path)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return written


def archive_from_file(data: dict):
    """Rebuild a pyribs archive (learning rate 1) holding the stored elites, for drawing."""
    from ribs.archives import CVTArchive, GridArchive

    attrs = data["attrs"]
    ranges = [tuple(r) for r in attrs["measure_ranges"]]
    solution_dim = data["solution"].shape[1]
    if attrs["kind"] == "cvt":
        archive = CVTArchive(solution_dim=solution_dim, centroids=data["centroids"], ranges=ranges)
    else:
        archive = GridArchive(solution_dim=solution_dim, dims=list(attrs["dims"]), ranges=ranges)
    if len(data["objective"]):
        archive.add(data["solution"], data["objective"], data["measures"])
    return archive


def no_figure(ax, why: str) -> None:
    """Words in place of a drawing on ``ax`` (no axes)."""
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def colour_range(objective: np.ndarray) -> tuple[float | None, float | None, str]:
    """A heatmap's colour scale: from the :data:`COLOUR_LOW_PERCENTILE`-th percentile of
    its elites' objectives to the best one, so that a few very poor cells do not squash
    the colours of the rest; the colour bar's ``extend`` (``"min"``: some cells lie below
    and show in the lowest colour). ``None`` ends for an empty archive."""
    values = np.asarray(objective, dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return None, None, "neither"
    low = float(np.percentile(values, COLOUR_LOW_PERCENTILE, method="nearest"))
    high = float(values.max())
    return low, high, "min" if values.min() < low else "neither"


def draw_heatmap(ax, data: dict):
    """Draw an archive's elites (grid or CVT, two measures) on ``ax``, with a labelled
    colour bar whose scale is :func:`colour_range`."""
    from ribs.visualize import cvt_archive_heatmap, grid_archive_heatmap

    if "objective" not in data:
        no_figure(ax, "no archive (a domain without measures)")
        return
    if len(data["attrs"]["measure_ranges"]) != 2:
        no_figure(ax, "heatmaps need 2 measures")
        return
    archive = archive_from_file(data)
    vmin, vmax, extend = colour_range(data["objective"])
    common = {
        "ax": ax,
        "vmin": vmin,
        "vmax": vmax,
        "cmap": HEATMAP_COLORMAP,
        "cbar_kwargs": {"label": "objective", "extend": extend},
    }
    if data["attrs"]["kind"] == "cvt":
        cvt_archive_heatmap(archive, lw=0.1, **common)
    else:
        grid_archive_heatmap(archive, **common)
    ax.set_xlabel("measure 1")
    ax.set_ylabel("measure 2")
    ax.grid(False)


def plot_run(*, archive: str | Path, metrics: str | Path, outdir: str | Path, workers: int) -> None:
    """Write a run's ``heatmap``, ``curves`` and ``timing`` figures (PDF and PNG).

    ``workers`` is how many evaluations can run at once (shards, or Dask workers),
    for the utilisation in the timing figure.
    """
    data = read_archive(archive)
    identity = data["file_attrs"]
    title = (
        f"{identity['algorithm']} on {identity['domain']}, seed {identity['seed']}, "
        f"generation {identity['generation']}"
    )
    rows = read_metrics_csv(metrics)
    draw = {  # one per name of evocamp.model.layout.RUN_FIGURES
        "heatmap": lambda stem: plot_run_heatmap(data, title=title, stem=stem),
        "curves": lambda stem: save_figure(run_curves_figure(rows, title=title), stem),
        "timing": lambda stem: save_figure(timing_figure(rows, workers=workers, title=title), stem),
    }
    for name in RUN_FIGURES:
        draw[name](Path(outdir) / name)


def plot_run_heatmap(data: dict, *, title: str, stem: Path) -> None:
    """A run's final archive as a heatmap (:func:`draw_heatmap`)."""
    figure, ax = pyplot().subplots(figsize=(ONE_COLUMN, ONE_COLUMN * 0.85))
    draw_heatmap(ax, data)
    ax.set_title(title)
    save_figure(figure, stem)


def run_curves_figure(rows: np.ndarray, *, title: str):
    """A run's metrics (:data:`CURVES`) against evaluations (a matplotlib figure)."""
    figure, axes = pyplot().subplots(1, len(CURVES), figsize=(TWO_COLUMNS, 1.9))
    for ax, (field, _, label) in zip(axes, CURVES, strict=True):
        ax.plot(rows["evaluations"], rows[field], color=PALETTE[0])
        ax.set_xlabel("evaluations")
        ax.set_ylabel(label)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def timing_figure(rows: np.ndarray, *, workers: int, title: str):
    """Generation wall time split into evaluation, failed evaluations (when some
    failed or were retried) and overhead, and the utilisation (time spent evaluating /
    (wall time x workers)) per generation (a matplotlib figure)."""
    plt = pyplot()
    rows = rows[rows["generation"] > 0]
    wall = rows["wall_seconds"]
    evaluating = np.minimum(rows["eval_seconds"] / workers, wall)
    failing = np.minimum(np.nan_to_num(rows["failed_seconds"]) / workers, wall - evaluating)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(ONE_COLUMN, 3.2), sharex=True)
    if evaluating.sum() > NO_MEASURABLE_TIME * wall.sum():
        top.bar(rows["generation"], evaluating, width=1.0, color=PALETTE[0], label="evaluation")
    else:  # bars too thin to see, and a legend entry for nothing: say so in words
        words = no_measurable_time(rows["eval_seconds"].sum(), wall.sum(), failing=failing.any())
        top.set_title(words, fontsize=7)
    if failing.any():
        top.bar(
            rows["generation"],
            failing,
            bottom=evaluating,
            width=1.0,
            color=PALETTE[5],
            label="failed evaluations",
        )
    top.bar(
        rows["generation"],
        wall - evaluating - failing,
        bottom=evaluating + failing,
        width=1.0,
        color=PALETTE[1],
        label="overhead",
    )
    top.set_ylabel("s / generation")
    top.legend(frameon=False)
    utilisation = rows["eval_seconds"] / np.maximum(wall * workers, 1e-12)
    bottom.plot(rows["generation"], utilisation, color=PALETTE[2])
    bottom.set_ylim(0, max(1.0, float(utilisation.max()) if len(utilisation) else 1.0))
    bottom.set_xlabel("generation")
    bottom.set_ylabel("utilisation")
    bottom.xaxis.get_major_locator().set_params(integer=True)
    figure.suptitle(f"{title}\n{workers} workers")
    figure.tight_layout()
    return figure


def no_measurable_time(evaluating: float, wall: float, *, failing: bool = False) -> str:
    """The timing figure's words for evaluations too short to show as bars (``failing``:
    failed evaluations are drawn beside the overhead)."""
    rest = "the bars are failed evaluations and overhead" if failing else "every bar is overhead"
    return (
        f"evaluations took almost no time ({evaluating:.2g} s of {wall:.3g} s wall time):\n{rest}"
    )
