"""The pyribs components a QD algorithm type is made of: the archives, emitters and
schedulers a :class:`QDRecipe` (its catalogue entry's, :mod:`evocamp.catalogue.algorithms`)
can name, each building itself from a run spec and naming the keys it reads, and
:func:`build_scheduler`, the seeded pyribs scheduler of a run. pyribs is imported inside
the functions: it takes about 2 s to import, and the evaluation shards never need it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from evocamp.base.seeding import initial_population_rng, optimizer_seeds
from evocamp.model.runspec import measure_dim, spec_run_key, stored_fields


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
class ArchiveKind:
    """A pyribs archive a :class:`QDRecipe` can name, with how to build it.

    Attributes
    ----------
    name : str
        How messages and the documentation name it.
    build : callable
        ``(spec, *, seed, result, cvt_seed) -> archive``: the archive of a run spec
        (``result``: it is the result archive, which never has a learning rate).
    keys : tuple of str
        The ``archive.*`` keys it reads.
    cells : bool
        It has cells (a threshold per cell): ``archive.learning_rate`` and
        ``archive.threshold_min`` apply.
    grid : bool
        It is a grid with ``archive.dims`` cells per measure.
    """

    name: str
    build: Callable[..., object]
    keys: tuple[str, ...]
    cells: bool = False
    grid: bool = False


@dataclass(frozen=True)
class EmitterKind:
    """A pyribs emitter a :class:`QDRecipe` can name, with how to build it.

    Attributes
    ----------
    name : str
        How the documentation names it.
    build : callable
        ``(spec, archive, *, options, seed, draw) -> emitter``; ``draw`` is the domain's
        initialisation (:attr:`evocamp.catalogue.domains.DomainType.initial_solutions`)
        or ``None``.
    keys : tuple of str
        The algorithm keys it reads (``options`` may set some instead).
    """

    name: str
    build: Callable[..., object]
    keys: tuple[str, ...]


@dataclass(frozen=True)
class SchedulerKind:
    """A pyribs scheduler a :class:`QDRecipe` can name, with how to build it.

    Attributes
    ----------
    name : str
        How the documentation names it.
    build : callable
        ``(archive, emitters, result_archive, *, algorithm) -> scheduler``.
    surrogate : bool
        It fits a surrogate in ``tell`` (its timings are metrics).
    """

    name: str
    build: Callable[..., object]
    surrogate: bool = False


def _archive_dtypes(spec: dict) -> dict:
    extra = stored_fields(spec)
    return {"extra_fields": {name: ((), np.float64) for name in extra} or None}


def _solution_archive_args(spec: dict, *, seed: int) -> dict:
    """Keyword arguments of every archive that keeps solutions."""
    archive_spec = spec["algorithm_spec"]["archive"]
    common = {"solution_dim": spec["domain_spec"]["solution_dim"], "seed": seed}
    common.update(_archive_dtypes(spec))
    if archive_spec.get("qd_score_offset"):
        common["qd_score_offset"] = archive_spec["qd_score_offset"]
    return common


def _cell_archive_args(spec: dict, *, seed: int, result: bool) -> dict:
    """Keyword arguments of archives with cells (grid, CVT): a learning archive's
    learning rate and minimum threshold (CMA-MAE)."""
    archive_spec = spec["algorithm_spec"]["archive"]
    common = _solution_archive_args(spec, seed=seed)
    common["ranges"] = [tuple(r) for r in spec["domain_spec"]["measure_ranges"]]
    if not result and "learning_rate" in archive_spec:
        common["learning_rate"] = archive_spec["learning_rate"]
        common["threshold_min"] = archive_spec.get("threshold_min", -np.inf)
    return common


def _grid_archive(spec: dict, *, seed: int, result: bool, cvt_seed: int | None):
    from ribs import archives

    common = _cell_archive_args(spec, seed=seed, result=result)
    return archives.GridArchive(dims=spec["algorithm_spec"]["archive"]["dims"], **common)


def _cvt_archive(spec: dict, *, seed: int, result: bool, cvt_seed: int | None):
    from ribs import archives

    common = _cell_archive_args(spec, seed=seed, result=result)
    return archives.CVTArchive(centroids=_cvt_centroids(spec, seed=cvt_seed), **common)


def _proximity_archive(spec: dict, *, seed: int, result: bool, cvt_seed: int | None):
    from ribs import archives

    archive_spec = spec["algorithm_spec"]["archive"]
    return archives.ProximityArchive(
        measure_dim=measure_dim(spec["domain_spec"]),
        k_neighbors=archive_spec["k_neighbors"],
        novelty_threshold=archive_spec["novelty_threshold"],
        local_competition=archive_spec["local_competition"],
        **_solution_archive_args(spec, seed=seed),
    )


def _dns_archive(spec: dict, *, seed: int, result: bool, cvt_seed: int | None):
    from ribs import archives

    archive_spec = spec["algorithm_spec"]["archive"]
    return archives.DNSArchive(
        measure_dim=measure_dim(spec["domain_spec"]),
        capacity=archive_spec["capacity"],
        k_neighbors=archive_spec["k_neighbors"],
        **_solution_archive_args(spec, seed=seed),
    )


def _density_archive(spec: dict, *, seed: int, result: bool, cvt_seed: int | None):
    from ribs import archives

    archive_spec = spec["algorithm_spec"]["archive"]
    return archives.DensityArchive(
        measure_dim=measure_dim(spec["domain_spec"]),
        buffer_size=archive_spec["buffer_size"],
        density_method=archive_spec["density_method"],
        bandwidth=archive_spec["bandwidth"],
        seed=seed,
    )


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


#: :class:`ribs.archives.GridArchive` (``archive.dims``).
GRID = ArchiveKind(
    "grid", _grid_archive, ("dims", "learning_rate", "threshold_min"), cells=True, grid=True
)
#: :class:`ribs.archives.CVTArchive` (``archive.cells`` centroids from k-means).
CVT = ArchiveKind(
    "cvt", _cvt_archive, ("cells", "cvt_samples", "learning_rate", "threshold_min"), cells=True
)
#: :class:`ribs.archives.ProximityArchive` (novelty search).
PROXIMITY = ArchiveKind(
    "proximity", _proximity_archive, ("k_neighbors", "novelty_threshold", "local_competition")
)
#: :class:`ribs.archives.DNSArchive` (dominated novelty search).
DNS = ArchiveKind("dns", _dns_archive, ("capacity", "k_neighbors"))
#: :class:`ribs.archives.DensityArchive` (density descent: measures only).
DENSITY = ArchiveKind("density", _density_archive, ("density_method", "bandwidth", "buffer_size"))


def _bounds(domain: dict):
    if "bounds" not in domain:
        return None
    return [tuple(domain["bounds"])] * domain["solution_dim"]


def random_start(algorithm: dict) -> bool:
    """Whether the emitters start from the domain's own initialisation
    (``initial_population: random``) rather than from ``x0``."""
    return algorithm.get("initial_population", "x0") == "random"


def _varying_args(spec: dict, *, seed: int, population: bool, draw: Callable | None) -> dict:
    """Keyword arguments of the emitters that vary solutions from ``x0`` or, with
    ``initial_population: random``, from solutions drawn from the domain's own
    initialisation (``draw``, :attr:`evocamp.catalogue.domains.DomainType.initial_solutions`,
    from the emitter's :func:`~evocamp.base.seeding.initial_population_rng`): a whole batch as
    ``initial_solutions`` (``population``: Gaussian and iso-line emitters, whose first
    batch they are) or one as ``x0`` (evolution strategies' starting mean)."""
    domain = spec["domain_spec"]
    args = {"batch_size": spec["algorithm_spec"]["batch_size"], "seed": seed}
    args["bounds"] = _bounds(domain)
    if not random_start(spec["algorithm_spec"]):
        args["x0"] = np.full(domain["solution_dim"], domain["x0"], dtype=np.float64)
        return args
    count = args["batch_size"] if population else 1
    drawn = draw(initial_population_rng(seed), count, domain["params"])
    if population:
        args["initial_solutions"] = drawn
    else:
        args["x0"] = drawn[0]
    return args


def _gaussian_emitter(spec: dict, archive, *, options: dict, seed: int, draw: Callable | None):
    from ribs import emitters

    sigma = spec["algorithm_spec"]["sigma"]
    common = _varying_args(spec, seed=seed, population=True, draw=draw)
    return emitters.GaussianEmitter(archive, sigma=sigma, **common, **options)


def _iso_line_emitter(spec: dict, archive, *, options: dict, seed: int, draw: Callable | None):
    from ribs import emitters

    algorithm = spec["algorithm_spec"]
    return emitters.IsoLineEmitter(
        archive,
        iso_sigma=algorithm["iso_sigma"],
        line_sigma=algorithm["line_sigma"],
        **_varying_args(spec, seed=seed, population=True, draw=draw),
        **options,
    )


def _evolution_strategy_emitter(
    spec: dict, archive, *, options: dict, seed: int, draw: Callable | None
):
    from ribs import emitters

    algorithm = spec["algorithm_spec"]
    options = {"ranker": algorithm.get("ranker"), **options}
    if "es" in algorithm:  # pyribs' default (cma_es) unless given
        options["es"] = algorithm["es"]
    return emitters.EvolutionStrategyEmitter(
        archive,
        sigma0=algorithm["sigma"],
        **_varying_args(spec, seed=seed, population=False, draw=draw),
        **options,
    )


def _bayesian_optimization_emitter(
    spec: dict, archive, *, options: dict, seed: int, draw: Callable | None
):
    from ribs import emitters

    algorithm = spec["algorithm_spec"]
    return emitters.BayesianOptimizationEmitter(
        archive,
        bounds=_bounds(spec["domain_spec"]),
        search_nrestarts=algorithm["search_restarts"],
        entropy_ejie=algorithm["entropy_ejie"],
        min_obj=algorithm["archive"].get("qd_score_offset", 0.0),
        num_initial_samples=algorithm["initial_points"],
        batch_size=algorithm["batch_size"],
        seed=seed,
    )


def _variation_emitter(spec: dict, archive, *, options: dict, seed: int, draw: Callable | None):
    chosen = VARIATIONS[spec["algorithm_spec"]["variation"]]
    return chosen.build(spec, archive, options=options, seed=seed, draw=draw)


#: :class:`ribs.emitters.GaussianEmitter`.
GAUSSIAN = EmitterKind("gaussian", _gaussian_emitter, ("batch_size", "sigma"))
#: :class:`ribs.emitters.IsoLineEmitter` (iso-line variation).
ISO_LINE = EmitterKind("iso_line", _iso_line_emitter, ("batch_size", "iso_sigma", "line_sigma"))
#: :class:`ribs.emitters.EvolutionStrategyEmitter` (``sigma`` as sigma0; ``es``: its
#: evolution strategy, pyribs' ``cma_es`` unless given).
EVOLUTION_STRATEGY = EmitterKind(
    "evolution_strategy", _evolution_strategy_emitter, ("batch_size", "sigma", "ranker", "es")
)
#: :class:`ribs.emitters.BayesianOptimizationEmitter` (its ``min_obj`` is the archive's
#: ``qd_score_offset``).
BAYESIAN_OPTIMIZATION = EmitterKind(
    "bayesian_optimization",
    _bayesian_optimization_emitter,
    ("batch_size", "initial_points", "search_restarts", "entropy_ejie"),
)
#: The emitters the ``variation`` key chooses from.
VARIATIONS = {kind.name: kind for kind in (GAUSSIAN, ISO_LINE)}
#: Gaussian or iso-line emitters, as the run's ``variation`` key says.
VARIATION = EmitterKind(
    "variation",
    _variation_emitter,
    tuple(dict.fromkeys(("variation", *GAUSSIAN.keys, *ISO_LINE.keys))),
)


def _standard_scheduler(archive, emitters, result_archive, *, algorithm: dict):
    from ribs import schedulers

    return schedulers.Scheduler(archive, emitters, result_archive=result_archive)


def _bandit_scheduler(archive, emitters, result_archive, *, algorithm: dict):
    from ribs import schedulers

    return schedulers.BanditScheduler(
        archive, emitters, result_archive, num_active=algorithm["emitters"]
    )


def _bayesian_optimization_scheduler(archive, emitters, result_archive, *, algorithm: dict):
    from ribs import schedulers

    return schedulers.BayesianOptimizationScheduler(archive, emitters, result_archive)


#: :class:`ribs.schedulers.Scheduler`.
STANDARD = SchedulerKind("standard", _standard_scheduler)
#: :class:`ribs.schedulers.BanditScheduler`: ``emitters`` active out of the pool (UCB1).
BANDIT = SchedulerKind("bandit", _bandit_scheduler)
#: :class:`ribs.schedulers.BayesianOptimizationScheduler` (BOP-Elites).
BAYESIAN_OPTIMIZATION_SCHEDULER = SchedulerKind(
    "bayesian_optimization", _bayesian_optimization_scheduler, surrogate=True
)


@dataclass(frozen=True)
class QDRecipe:
    """Which pyribs components make a QD algorithm type (its catalogue entry holds one);
    each component builds itself from the run spec and names the keys it reads.

    Attributes
    ----------
    archive : ArchiveKind
        The archive the emitters learn on: :data:`GRID`, :data:`CVT`,
        :data:`PROXIMITY`, :data:`DNS` or :data:`DENSITY`. Archives without cells
        need ``result_archive``.
    emitter : EmitterKind
        :data:`GAUSSIAN`, :data:`ISO_LINE`, :data:`EVOLUTION_STRATEGY`,
        :data:`VARIATION` (Gaussian or iso-line, as the run's ``variation`` key says)
        or :data:`BAYESIAN_OPTIMIZATION`.
    emitter_options : dict
        More keyword arguments of every emitter (e.g. CMA-MAE's ``selection_rule``).
    result_kind : ArchiveKind
        The kind of the result archive: :data:`GRID` (``archive.dims``), or :data:`CVT`
        with the learning archive's centroids (CMA-MAE on a CVT).
    result_archive : bool
        Keep the elites in a separate result archive (a grid unless ``result_kind``
        says otherwise; the run's archive): CMA-MAE, whose learning archive has a
        learning rate below 1, and the archives that are no grid (novelty, DNS,
        density), whose result archive gets every evaluated solution, so their QD
        metrics are comparable with the others'.
    scheduler : SchedulerKind
        :data:`STANDARD`, :data:`BANDIT` (``emitters`` active out of the pool) or
        :data:`BAYESIAN_OPTIMIZATION_SCHEDULER`.
    emitter_pool : tuple of (EmitterKind, dict)
        :data:`BANDIT`: the kinds of the pool, each ``(emitter, options)``; the pool
        holds ``emitters`` emitters of every kind (``emitter`` is then unused).
    emitters_on_result : bool
        The emitters sample from the result archive (density descent: a density archive
        holds no solutions).
    """

    archive: ArchiveKind = GRID
    emitter: EmitterKind = GAUSSIAN
    emitter_options: dict = field(default_factory=dict)
    result_archive: bool = False
    result_kind: ArchiveKind = GRID
    scheduler: SchedulerKind = STANDARD
    emitter_pool: tuple = ()
    emitters_on_result: bool = False

    @property
    def emitter_kinds(self) -> tuple:
        """``(emitter, options)`` of every kind of emitter the scheduler starts with."""
        return self.emitter_pool or ((self.emitter, {}),)

    @property
    def grid_result(self) -> bool:
        """Whether the run's archive (the result archive, else the learning one) is a
        grid with ``archive.dims``."""
        return self.result_kind.grid if self.result_archive else self.archive.grid


def build_scheduler(spec: dict, *, recipe: QDRecipe, draw: Callable | None = None):
    """Create the scheduler (archive, emitters, result archive) of a run.

    Parameters
    ----------
    spec : dict
        A run spec from :func:`evocamp.config.run_spec`.
    recipe : QDRecipe
        The components of the run's algorithm type.
    draw : callable or None
        The domain's own initialisation, ``(rng, count, params) -> solutions``
        (:attr:`evocamp.catalogue.domains.DomainType.initial_solutions`), which
        ``initial_population: random`` draws from; ``None``: the domain has none.

    Returns
    -------
    ribs.schedulers.Scheduler
        Seeded from the master seed: the archive, the optional result archive and
        every emitter get their own stream.
    """
    check_numba_disabled()
    algorithm = spec["algorithm_spec"]
    count = algorithm["emitters"] * len(recipe.emitter_kinds)
    seeds = optimizer_seeds(spec["master_seed"], spec_run_key(spec), 3 + count)
    archive = recipe.archive.build(spec, seed=seeds[0], result=False, cvt_seed=seeds[2])
    result_archive = None
    if recipe.result_archive:
        # A CVT result archive gets the learning archive's centroids (the same seed).
        result_archive = recipe.result_kind.build(
            spec, seed=seeds[1], result=True, cvt_seed=seeds[2]
        )
    learns_on = result_archive if recipe.emitters_on_result else archive
    emitter_seeds = iter(seeds[3:])
    emitters = [
        kind.build(
            spec,
            learns_on,
            options={**recipe.emitter_options, **options},
            seed=next(emitter_seeds),
            draw=draw,
        )
        for kind, options in recipe.emitter_kinds
        for _ in range(algorithm["emitters"])
    ]
    return recipe.scheduler.build(archive, emitters, result_archive, algorithm=algorithm)
