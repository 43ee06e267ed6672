"""QD algorithms built from pyribs components, and the passive archive of other families.

``build_scheduler`` turns a run spec into a seeded :class:`ribs.schedulers.Scheduler`;
:class:`QDOptimizer` puts it behind the optimizer protocol
(:mod:`evocamp.model.protocol`). Which archive and emitters an algorithm type uses is
its registry entry's business (:mod:`evocamp.registry`: ``emitter`` and
``archive``). pyribs is imported inside the functions: it takes about 2 s to import,
and the evaluation shards never need it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from evocamp.base.seeding import optimizer_seeds
from evocamp.model.runspec import measure_count, spec_run_key


def check_numba_disabled() -> None:
    """Refuse to run pyribs with numba's JIT on: results would differ from other modes.

    ``import evocamp`` disables it; this catches a program that imported numba first.
    """
    numba = sys.modules.get("numba")
    if numba is not None and not numba.config.DISABLE_JIT:
        raise RuntimeError(
            "numba was imported before evocamp with its JIT enabled; import evocamp "
            "first (it sets NUMBA_DISABLE_JIT=1) so results match every other mode"
        )


@dataclass(frozen=True)
class QDRecipe:
    """Which pyribs components make a QD algorithm type (its registry entry holds one).

    Attributes
    ----------
    archive : str
        ``grid`` (:class:`ribs.archives.GridArchive`, ``archive.dims``) or ``cvt``
        (:class:`ribs.archives.CVTArchive`, ``archive.cells`` centroids from k-means).
    emitter : str
        ``gaussian`` (GaussianEmitter, ``sigma``), ``iso_line`` (IsoLineEmitter,
        ``iso_sigma``, ``line_sigma``) or ``evolution_strategy``
        (EvolutionStrategyEmitter, ``sigma`` as sigma0, ``ranker``).
    emitter_options : dict
        More keyword arguments of every emitter (e.g. CMA-MAE's ``selection_rule``).
    result_archive : bool
        Keep the elites in a separate result archive (CMA-MAE: the archive the
        emitters learn on has a learning rate below 1).
    """

    archive: str = "grid"
    emitter: str = "gaussian"
    emitter_options: dict = field(default_factory=dict)
    result_archive: bool = False


def build_scheduler(spec: dict, *, recipe: QDRecipe):
    """Create the scheduler (archive, emitters, result archive) of a run.

    Parameters
    ----------
    spec : dict
        A run spec from :func:`evocamp.config.run_spec`.
    recipe : QDRecipe
        The components of the run's algorithm type.

    Returns
    -------
    ribs.schedulers.Scheduler
        Seeded from the master seed: the archive, the optional result archive and
        every emitter get their own stream.
    """
    from ribs.schedulers import Scheduler

    check_numba_disabled()
    algorithm = spec["algorithm_spec"]
    seeds = optimizer_seeds(spec["master_seed"], spec_run_key(spec), 3 + algorithm["emitters"])
    archive = _build_archive(
        spec, kind=recipe.archive, seed=seeds[0], result=False, cvt_seed=seeds[2]
    )
    result_archive = None
    if recipe.result_archive:
        result_archive = _build_archive(
            spec, kind="grid", seed=seeds[1], result=True, cvt_seed=None
        )
    emitters = [_build_emitter(spec, archive, recipe=recipe, seed=seed) for seed in seeds[3:]]
    return Scheduler(archive, emitters, result_archive=result_archive)


class QDOptimizer:
    """A pyribs scheduler behind the optimizer interface: batches are plain solutions,
    the run's elites are the scheduler's result archive."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler

    @classmethod
    def from_spec(cls, spec: dict, *, recipe: QDRecipe) -> QDOptimizer:
        """The seeded scheduler of a run spec (:func:`build_scheduler`)."""
        return cls(build_scheduler(spec, recipe=recipe))

    def ask(self) -> np.ndarray:
        """The next batch of solutions (all emitters)."""
        return np.asarray(self.scheduler.ask(), dtype=np.float64)

    def tell(self, objective, measures, **extra) -> None:
        """Fold the batch's results into the archive and the emitters."""
        check_numba_disabled()
        self.scheduler.tell(objective, measures, **extra)

    def ask_async(self, *, slots, evaluations) -> np.ndarray:
        """Asynchronous mode (steady-state MAP-Elites; Gaussian and iso-line emitters,
        whose ``tell`` learns nothing): each proposal is the first solution of an
        ``ask`` of the emitter whose turn it is (emitters take turns by evaluation id),
        varied from elites of the archive as it is now."""
        emitters = self.scheduler.emitters
        return np.asarray(
            [emitters[int(evaluation) % len(emitters)].ask()[0] for evaluation in evaluations],
            dtype=np.float64,
        )

    def tell_async(self, objective, measures, *, solutions, **extra) -> None:
        """Asynchronous mode: add finished solutions to the archive at once."""
        check_numba_disabled()
        self.scheduler.archive.add(solutions, objective, measures, **extra)

    @property
    def archive(self):
        """The archive whose elites are the run's result."""
        return self.scheduler.result_archive


def build_passive_archive(spec: dict):
    """The grid archive into which a non-QD run puts every evaluated solution, so it gets
    QD metrics and heatmaps (``None`` when the domain has no measures or the algorithm
    sets ``archive.passive: false``)."""
    if not measure_count(spec["domain_spec"]) or not spec["algorithm_spec"]["archive"]["passive"]:
        return None
    seeds = optimizer_seeds(spec["master_seed"], spec_run_key(spec), 2)
    return _build_archive(spec, kind="grid", seed=seeds[1], result=True, cvt_seed=None)


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


def _archive_dtypes(spec: dict) -> dict:
    extra = spec["domain_spec"].get("extra_fields") or []
    return {"extra_fields": {name: ((), np.float64) for name in extra} or None}


def _build_archive(spec: dict, *, kind: str, seed: int, result: bool, cvt_seed: int | None):
    from ribs.archives import CVTArchive, GridArchive

    algorithm = spec["algorithm_spec"]
    archive_spec = algorithm["archive"]
    domain = spec["domain_spec"]
    common = {
        "solution_dim": domain["solution_dim"],
        "ranges": [tuple(r) for r in domain["measure_ranges"]],
        "seed": seed,
        **_archive_dtypes(spec),
    }
    if archive_spec.get("qd_score_offset"):
        common["qd_score_offset"] = archive_spec["qd_score_offset"]
    if not result and "learning_rate" in archive_spec:
        common["learning_rate"] = archive_spec["learning_rate"]
        common["threshold_min"] = archive_spec.get("threshold_min", -np.inf)
    if kind == "cvt":
        centroids = _cvt_centroids(spec, seed=cvt_seed)
        return CVTArchive(centroids=centroids, **common)
    return GridArchive(dims=archive_spec["dims"], **common)


def _cvt_centroids(spec: dict, *, seed: int) -> np.ndarray:
    """Centroids of the CVT, computed once per run (k-means on uniform samples)."""
    from sklearn.cluster import KMeans

    archive_spec = spec["algorithm_spec"]["archive"]
    ranges = np.asarray(spec["domain_spec"]["measure_ranges"], dtype=np.float64)
    rng = np.random.default_rng(seed)
    samples = rng.uniform(
        ranges[:, 0], ranges[:, 1], size=(archive_spec["cvt_samples"], len(ranges))
    )
    kmeans = KMeans(
        n_clusters=archive_spec["cells"], n_init=1, max_iter=300, random_state=seed
    ).fit(samples)
    return kmeans.cluster_centers_


def _bounds(domain: dict):
    if "bounds" not in domain:
        return None
    return [tuple(domain["bounds"])] * domain["solution_dim"]


def _build_emitter(spec: dict, archive, *, recipe: QDRecipe, seed: int):
    from ribs.emitters import EvolutionStrategyEmitter, GaussianEmitter, IsoLineEmitter

    algorithm = spec["algorithm_spec"]
    domain = spec["domain_spec"]
    x0 = np.full(domain["solution_dim"], domain["x0"], dtype=np.float64)
    common = {
        "bounds": _bounds(domain),
        "batch_size": algorithm["batch_size"],
        "seed": seed,
        "x0": x0,
        **recipe.emitter_options,
    }
    if recipe.emitter == "gaussian":
        return GaussianEmitter(archive, sigma=algorithm["sigma"], **common)
    if recipe.emitter == "iso_line":
        return IsoLineEmitter(
            archive, iso_sigma=algorithm["iso_sigma"], line_sigma=algorithm["line_sigma"], **common
        )
    if recipe.emitter == "evolution_strategy":
        return EvolutionStrategyEmitter(
            archive, sigma0=algorithm["sigma"], ranker=algorithm["ranker"], **common
        )
    raise ValueError(f"unknown emitter kind {recipe.emitter!r}")
