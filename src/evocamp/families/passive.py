"""The passive archive: the grid archive into which a run of any family but QD puts every
evaluated solution, so that it gets QD metrics and heatmaps too."""

from __future__ import annotations

import numpy as np

from evocamp.base.seeding import optimizer_seeds
from evocamp.families.qd.components import GRID
from evocamp.model.runspec import measure_dim, spec_run_key


def build_passive_archive(spec: dict):
    """The grid archive into which a non-QD run puts every evaluated solution, so it gets
    QD metrics and heatmaps (``None`` when the domain has no measures or the algorithm
    sets ``archive.passive: false``)."""
    if not measure_dim(spec["domain_spec"]) or not spec["algorithm_spec"]["archive"]["passive"]:
        return None
    seeds = optimizer_seeds(spec["master_seed"], spec_run_key(spec), 2)
    return GRID.build(spec, seed=seeds[1], result=True, cvt_seed=None)


def add_to_passive_archive(archive, *, objective, measures, extra: dict, solutions) -> None:
    """Add a batch to a passive archive, materialising only the solutions that enter it.

    ``solutions(indices)`` returns the solutions at ``indices`` (for an ES batch they
    are regenerated from noise seeds: only those better than their cell's elite are).
    The archive's content is the same as when the whole batch is added.
    """
    occupied, elites = archive.retrieve(measures)
    better = ~occupied | (objective > np.where(occupied, elites["objective"], -np.inf))
    indices = np.flatnonzero(better)
    if len(indices) == 0:
        return
    archive.add(
        solutions(indices),
        objective[indices],
        measures[indices],
        **{name: values[indices] for name, values in extra.items()},
    )
