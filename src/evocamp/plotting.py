"""Figures: archive heatmaps and metric curves, as PDF (vector) and PNG.

Figures are written without timestamps, so rebuilding them from the same results
gives byte-identical files. All figures share one style (``STYLE``): the
Okabe-Ito colour-blind-safe palette, labelled axes with units, and widths that
fit one column (3.5 in) or two columns (7.2 in) of a paper.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ONE_COLUMN = 3.5
TWO_COLUMNS = 7.2
#: Okabe & Ito (2008), a palette distinguishable with every common colour blindness.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
HEATMAP_COLORMAP = "viridis"
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
CURVES = (
    ("qd_score", "QD score"),
    ("norm_qd_score", "normalised QD score"),
    ("coverage", "coverage (fraction of cells)"),
    ("obj_max", "best objective"),
)


def pyplot():
    """matplotlib.pyplot with the non-interactive backend and the project style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    plt.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=PALETTE)
    return plt


def save_figure(figure, stem: str | Path) -> list[Path]:
    """Save ``<stem>.pdf`` and ``<stem>.png`` with no timestamps; close the figure."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, metadata in (
        (".pdf", {"CreationDate": None, "ModDate": None}),
        (".png", {"Software": None}),
    ):
        path = stem.with_suffix(suffix)
        figure.savefig(path, metadata=metadata)
        written.append(path)
    figure.canvas.figure.clf()
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


def draw_heatmap(
    ax, data: dict, *, vmin: float | None = None, vmax: float | None = None, colorbar: bool = True
):
    """Draw an archive's elites (grid or CVT, two measures) on ``ax``."""
    from ribs.visualize import cvt_archive_heatmap, grid_archive_heatmap

    if len(data["attrs"]["measure_ranges"]) != 2:
        ax.text(
            0.5, 0.5, "heatmaps need 2 measures", ha="center", va="center", transform=ax.transAxes
        )
        return
    archive = archive_from_file(data)
    common = {
        "ax": ax,
        "vmin": vmin,
        "vmax": vmax,
        "cmap": HEATMAP_COLORMAP,
        "cbar": "auto" if colorbar else None,
    }
    if data["attrs"]["kind"] == "cvt":
        cvt_archive_heatmap(archive, lw=0.1, **common)
    else:
        grid_archive_heatmap(archive, **common)
    ax.set_xlabel("measure 1")
    ax.set_ylabel("measure 2")
    ax.grid(False)


def plot_run(*, archive: str | Path, metrics: str | Path, outdir: str | Path) -> None:
    """Write a run's ``heatmap`` and ``curves`` figures (PDF and PNG) into ``outdir``."""
    from evocamp.metrics import read_metrics_csv
    from evocamp.storage import read_archive

    plt = pyplot()
    data = read_archive(archive)
    identity = data["file_attrs"]
    title = (
        f"{identity['algorithm']} on {identity['domain']}, seed {identity['seed']}, "
        f"generation {identity['generation']}"
    )
    figure, ax = plt.subplots(figsize=(ONE_COLUMN, ONE_COLUMN * 0.85))
    draw_heatmap(ax, data)
    ax.set_title(title)
    save_figure(figure, Path(outdir) / "heatmap")

    rows = read_metrics_csv(metrics)
    figure, axes = plt.subplots(1, len(CURVES), figsize=(TWO_COLUMNS, 1.9))
    for ax, (field, label) in zip(axes, CURVES, strict=True):
        ax.plot(rows["evaluations"], rows[field], color=PALETTE[0])
        ax.set_xlabel("evaluations")
        ax.set_ylabel(label)
    figure.suptitle(title)
    figure.tight_layout()
    save_figure(figure, Path(outdir) / "curves")


def finite_range(values: list[np.ndarray]) -> tuple[float, float] | tuple[None, None]:
    """Shared colour scale: min and max over several arrays (``None`` if all empty)."""
    joined = np.concatenate([np.ravel(v) for v in values]) if values else np.zeros(0)
    joined = joined[np.isfinite(joined)]
    if not len(joined):
        return None, None
    return float(joined.min()), float(joined.max())
