"""Figures read as matplotlib objects (no pixels): labelled colour bars, each campaign
heatmap's own colour range, a run's curve labels inside their panels, the timing figure
of evaluations that took no time."""

from __future__ import annotations

import numpy as np
import pytest

from evocamp.model.metrics import blank_metric_rows
from evocamp.reporting.campaign_figures import heatmaps_figure
from evocamp.reporting.plotting import (
    COLOUR_LOW_PERCENTILE,
    draw_heatmap,
    pyplot,
    run_curves_figure,
    timing_figure,
)


def archive(algorithm: str, objective: np.ndarray) -> dict:
    """An archive as ``read_archive`` gives it: a 10 x 10 grid, one elite per cell."""
    cells = np.arange(len(objective))
    measures = np.stack([cells % 10, cells // 10], axis=1) + 0.5
    return {
        "objective": np.asarray(objective, dtype=float),
        "measures": measures.astype(float),
        "solution": np.zeros((len(objective), 3)),
        "attrs": {"kind": "grid", "dims": [10, 10], "measure_ranges": [[0, 10], [0, 10]]},
        "file_attrs": {"algorithm": algorithm, "domain": "sphere", "seed": 0},
    }


@pytest.fixture(autouse=True)
def close_figures():
    yield
    pyplot().close("all")


def heatmap_ranges(figure) -> dict[str, tuple[float, float]]:
    """Each heatmap panel's colour limits, by the algorithm of its title."""
    return {
        ax.get_title().split("\n")[0]: ax.collections[0].get_clim()
        for ax in figure.axes
        if ax.get_title()
    }


def colour_bar_labels(figure) -> list[str]:
    return [ax.get_ylabel() for ax in figure.axes if ax.get_label() == "<colorbar>"]


def test_campaign_heatmaps_have_their_own_labelled_colour_bar_and_a_robust_range():
    """MAP-Elites' good cells (87 to 99) keep their colours beside CMA-ME's poor ones
    (down to 25): each panel's scale is its own, from its 2nd percentile to its best."""
    rng = np.random.default_rng(0)
    map_elites = rng.uniform(87, 99, 49)
    cma_me = np.concatenate([rng.uniform(60, 98, 95), [25.0, 30.0]])
    figure = heatmaps_figure([archive("map_elites", map_elites), archive("cma_me", cma_me)])
    ranges = heatmap_ranges(figure)
    assert ranges["map_elites"] == pytest.approx(
        (np.percentile(map_elites, COLOUR_LOW_PERCENTILE, method="nearest"), map_elites.max())
    )
    assert ranges["cma_me"] == pytest.approx(
        (np.percentile(cma_me, COLOUR_LOW_PERCENTILE, method="nearest"), cma_me.max())
    )
    assert ranges["cma_me"][0] > 30.0, "the two poor cells do not set the low end"
    assert colour_bar_labels(figure) == ["objective", "objective"]


def test_run_heatmap_colour_bar_is_labelled_and_one_poor_cell_does_not_set_its_scale():
    objective = np.concatenate([np.linspace(50, 100, 40), [-500.0]])
    figure, ax = pyplot().subplots()
    draw_heatmap(ax, archive("map_elites", objective))
    assert colour_bar_labels(figure) == ["objective"]
    assert ax.collections[0].get_clim() == (50.0, 100.0), "the lowest cell below the scale"
    assert ax.collections[0].colorbar.extend == "min", "a triangle: some cells lie below"


def metric_rows(*, eval_seconds: float) -> np.ndarray:
    rows = blank_metric_rows(11)
    rows["generation"] = np.arange(11)
    rows["evaluations"] = 64 * rows["generation"]
    for field in ("qd_score", "norm_qd_score", "cqd_score", "best_objective"):
        rows[field] = np.linspace(0, 1000, 11)
    rows["coverage"] = np.linspace(0, 0.3, 11)
    rows["wall_seconds"] = 1.0
    rows["eval_seconds"] = eval_seconds
    return rows


def test_run_curves_axis_labels_fit_their_panels():
    figure = run_curves_figure(metric_rows(eval_seconds=1.0), title="me on sphere, seed 0")
    renderer = figure.canvas.get_renderer()
    for ax in figure.axes:
        label = ax.yaxis.label.get_window_extent(renderer)
        panel = ax.get_window_extent(renderer)
        assert label.height <= panel.height, f"{ax.get_ylabel()!r} overruns its panel"


def legend_texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [text.get_text() for text in legend.get_texts()] if legend else []


def test_timing_of_evaluations_that_took_no_time_says_so_in_words():
    top = timing_figure(metric_rows(eval_seconds=0.0), workers=4, title="t").axes[0]
    assert legend_texts(top) == ["overhead"], "no legend entry for bars that do not show"
    assert top.get_title().startswith("evaluations took almost no time (0 s of 10 s wall time)")
    top = timing_figure(metric_rows(eval_seconds=2.0), workers=4, title="t").axes[0]
    assert legend_texts(top) == ["evaluation", "overhead"] and top.get_title() == ""
