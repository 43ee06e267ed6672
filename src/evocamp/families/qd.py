"""QD algorithms built from pyribs components, and the passive archive of other families.

``build_scheduler`` turns a run spec into a seeded :class:`ribs.schedulers.Scheduler`;
:class:`QDOptimizer` puts it behind the optimizer protocol
(:mod:`evocamp.model.protocol`). Which archive and emitters an algorithm type uses is
its catalogue entry's business (:mod:`evocamp.catalogue.algorithms`: its recipe). The
CQD score and its targets (:func:`cqd_settings`) are here too. pyribs is imported
inside the functions: it takes about 2 s to import, and the evaluation shards never
need it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.base.seeding import domain_rng, initial_population_rng, optimizer_seeds
from evocamp.domains import DOMAINS
from evocamp.model.protocol import ELITES, CompactBatch
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


# --- components: each pyribs archive, emitter and scheduler a recipe can name ---------


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
        ``(spec, archive, *, options, seed) -> emitter``.
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


def _varying_args(spec: dict, *, seed: int, population: bool) -> dict:
    """Keyword arguments of the emitters that vary solutions from ``x0`` or, with
    ``initial_population: random``, from solutions drawn from the domain's own
    initialisation (:attr:`evocamp.domains.DomainType.initial_solutions`, from the
    emitter's :func:`~evocamp.base.seeding.initial_population_rng`): a whole batch as
    ``initial_solutions`` (``population``: Gaussian and iso-line emitters, whose first
    batch they are) or one as ``x0`` (evolution strategies' starting mean)."""
    domain = spec["domain_spec"]
    args = {"batch_size": spec["algorithm_spec"]["batch_size"], "seed": seed}
    args["bounds"] = _bounds(domain)
    if not random_start(spec["algorithm_spec"]):
        args["x0"] = np.full(domain["solution_dim"], domain["x0"], dtype=np.float64)
        return args
    draw = DOMAINS[domain["type"]].initial_solutions
    count = args["batch_size"] if population else 1
    drawn = draw(initial_population_rng(seed), count, domain["params"])
    if population:
        args["initial_solutions"] = drawn
    else:
        args["x0"] = drawn[0]
    return args


def _gaussian_emitter(spec: dict, archive, *, options: dict, seed: int):
    from ribs import emitters

    sigma = spec["algorithm_spec"]["sigma"]
    common = _varying_args(spec, seed=seed, population=True)
    return emitters.GaussianEmitter(archive, sigma=sigma, **common, **options)


def _iso_line_emitter(spec: dict, archive, *, options: dict, seed: int):
    from ribs import emitters

    algorithm = spec["algorithm_spec"]
    return emitters.IsoLineEmitter(
        archive,
        iso_sigma=algorithm["iso_sigma"],
        line_sigma=algorithm["line_sigma"],
        **_varying_args(spec, seed=seed, population=True),
        **options,
    )


def _evolution_strategy_emitter(spec: dict, archive, *, options: dict, seed: int):
    from ribs import emitters

    algorithm = spec["algorithm_spec"]
    options = {"ranker": algorithm.get("ranker"), **options}
    if "es" in algorithm:  # pyribs' default (cma_es) unless given
        options["es"] = algorithm["es"]
    return emitters.EvolutionStrategyEmitter(
        archive,
        sigma0=algorithm["sigma"],
        **_varying_args(spec, seed=seed, population=False),
        **options,
    )


def _bayesian_optimization_emitter(spec: dict, archive, *, options: dict, seed: int):
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


def _variation_emitter(spec: dict, archive, *, options: dict, seed: int):
    chosen = VARIATIONS[spec["algorithm_spec"]["variation"]]
    return chosen.build(spec, archive, options=options, seed=seed)


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
        )
        for kind, options in recipe.emitter_kinds
        for _ in range(algorithm["emitters"])
    ]
    return recipe.scheduler.build(archive, emitters, result_archive, algorithm=algorithm)


@contextlib.contextmanager
def _failed_rows_left_out(scheduler, failed: np.ndarray):
    """While a scheduler tells a batch with failed rows: its archives add only the
    other rows, and report the failed ones as not added (status 0, value ``-inf``)."""
    archives = [scheduler.archive]
    if getattr(scheduler, "_result_archive", None) is not None:
        archives.append(scheduler._result_archive)
    rows = np.flatnonzero(~failed)
    for archive in archives:
        archive.add = _adding_rows(archive.add, rows, len(failed))
    try:
        yield
    finally:
        for archive in archives:
            del archive.add  # the class's method again


def _adding_rows(add, rows: np.ndarray, count: int):
    def add_rows(solution, objective, measures, **fields):
        status = np.zeros(count, dtype=np.int32)
        value = np.zeros(count)
        if len(rows):
            info = add(
                solution[rows],
                None if objective is None else objective[rows],
                measures[rows],
                **{name: values[rows] for name, values in fields.items()},
            )
            status[rows] = info["status"]
            value[rows] = info["value"]
        value[np.setdiff1d(np.arange(count), rows)] = _below(value[rows])
        return {"status": status, "value": value}

    return add_rows


def _below(values: np.ndarray) -> float:
    """A finite value below all ``values`` (pyribs' emitters take finite values only):
    what a failed solution's objective and improvement value are to its emitter."""
    if not len(values):
        return 0.0
    lowest = float(np.min(values))
    return lowest - max(1.0, abs(lowest))


# --- compact batches: Gaussian and iso-line offspring as parents' cells and seeds ----

#: ``emitter_kind`` of a compact QD batch: a Gaussian emitter's offspring are a parent
#: plus noise; an iso-line emitter's are an elite, noise and a line towards a second one;
#: a separable CMA-ES emitter's (``es: sep_cma_es``, no bounds) are its mean plus its
#: noise scaled per parameter.
GAUSSIAN_KIND, ISO_LINE_KIND, SEP_CMA_ES_KIND = 0, 1, 2
#: Parents an emitter of each kind samples per offspring.
_PARENTS_PER_ROW = {GAUSSIAN_KIND: 1, ISO_LINE_KIND: 2, SEP_CMA_ES_KIND: 0}
#: Offspring rows whose noise is drawn at once when a batch is regenerated (memory).
_DRAW_VALUES = 1 << 20
_MASK64 = (1 << 64) - 1
#: Noise values that cost about as much to draw as a call to regenerate rows.
_ROW_CALL_VALUES = 20_000
#: Noise values a shard may draw and discard to reach its first row (a compact batch
#: records its generators' states every :func:`_row_stride` rows, not every row).
_STRIDE_VALUES = 4096


def _row_stride(dim: int) -> int:
    """Offspring rows between two recorded generator states of a compact batch of
    ``dim`` parameters: as many as :data:`_STRIDE_VALUES` noise values allow (at
    least 1). A function of the solution size alone, never of the shard count."""
    return max(1, _STRIDE_VALUES // max(dim, 1))


def _stride(batch) -> int:
    """A compact batch's ``row_stride`` (1 when absent: batches written before it)."""
    return int(batch["row_stride"][()]) if "row_stride" in batch else 1


def _states_of(count: int, stride: int) -> int:
    """Recorded states of an emitter of ``count`` rows: one every ``stride`` rows and
    one after the last."""
    return -(-count // stride) + 1


def _packed_rng(generator) -> np.ndarray:
    """A PCG64 generator's state as 6 uint64 words (state and increment: 128 bits each)."""
    state = generator.bit_generator.state
    words = (
        state["state"]["state"] >> 64,
        state["state"]["state"] & _MASK64,
        state["state"]["inc"] >> 64,
        state["state"]["inc"] & _MASK64,
        state["has_uint32"],
        state["uinteger"],
    )
    return np.array(words, dtype=np.uint64)


def _unpacked_rng(words) -> np.random.Generator:
    """The generator whose state :func:`_packed_rng` packed."""
    words = [int(word) for word in words]
    generator = np.random.Generator(np.random.PCG64())
    generator.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (words[0] << 64) | words[1], "inc": (words[2] << 64) | words[3]},
        "has_uint32": words[4],
        "uinteger": words[5],
    }
    return generator


def _normal_rows(generator, scale: float, *, rows: int, dim: int) -> np.ndarray:
    """``generator.normal(scale=scale, size=(rows, dim))``, drawn in chunks (the draws
    are sequential: chunks give the same values, in less memory)."""
    out = np.empty((rows, dim))
    step = max(1, _DRAW_VALUES // max(dim, 1))
    for first in range(0, rows, step):
        last = min(first + step, rows)
        out[first:last] = generator.normal(scale=scale, size=(last - first, dim))
    return out


class _RecordingGenerator:
    """Stands in for an emitter's generator during pyribs' ``ask``: returns the same
    draws, the first ``normal`` drawn ``stride`` rows at a time (draws are sequential:
    the same values), noting the generator's packed state before each such block and
    after the last row (:attr:`states`, a :class:`QDBatch`'s ``row_state``) and every
    array drawn (:attr:`draws`). Any other use of the generator is noted
    (:attr:`other`)."""

    def __init__(self, generator, *, stride: int = 1) -> None:
        self.generator = generator
        self.stride = stride
        self.states: np.ndarray | None = None
        self.draws: list[np.ndarray] = []
        self.other = False

    def normal(self, loc=0.0, scale=1.0, size=None) -> np.ndarray:
        """``generator.normal(loc, scale, size)``, the first call's rows recorded."""
        if self.states is not None or np.ndim(scale) or loc != 0.0 or len(size or ()) != 2:
            drawn = self.generator.normal(loc, scale, size)
        else:
            rows, dim = size
            self.states = np.empty((_states_of(rows, self.stride), 6), dtype=np.uint64)
            drawn = np.empty((rows, dim))
            for block, first in enumerate(range(0, rows, self.stride)):
                last = min(first + self.stride, rows)
                self.states[block] = _packed_rng(self.generator)
                drawn[first:last] = self.generator.normal(scale=scale, size=(last - first, dim))
            self.states[-1] = _packed_rng(self.generator)
        self.draws.append(drawn)
        return drawn

    def __getattr__(self, name: str):
        self.other = True
        return getattr(self.generator, name)


@contextlib.contextmanager
def _recording(emitters, *, stride: int):
    """While pyribs asks ``emitters``: each one's generator is a
    :class:`_RecordingGenerator` of ``stride`` (yielded, in order), its own again
    afterwards."""
    owners = [_generator_owner(emitter) for emitter in emitters]
    recorders = [_RecordingGenerator(owner._rng, stride=stride) for owner in owners]
    for owner, recorder in zip(owners, recorders, strict=True):
        owner._rng = recorder
    try:
        yield recorders
    finally:
        for owner, recorder in zip(owners, recorders, strict=True):
            owner._rng = recorder.generator


def _digests(solutions: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each solution's bytes (blake2b): the ``parent_digest`` of
    compact batches written before :func:`_sums`."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little")
            for row in np.ascontiguousarray(solutions, dtype=np.float64)
        ],
        dtype=np.uint64,
    )


#: An odd 64-bit multiplier (2^64 over the golden ratio) for :func:`_sums`' weights.
_GOLDEN64 = np.uint64(0x9E3779B97F4A7C15)


def _sums(solutions: np.ndarray) -> np.ndarray:
    """A 64-bit check sum of each solution's bytes, in one numpy pass: the sum modulo
    2^64 of its parameters' bit patterns (uint64) times odd weights (``(i + 1)``
    times :data:`_GOLDEN64`, made odd). Odd weights are invertible modulo 2^64, so
    a change confined to one parameter always changes the sum; other changes are
    missed only when their weighted differences cancel, about one chance in 2^64
    for unrelated solutions (a check against reading the wrong elite, not a
    cryptographic hash: 15 times faster than blake2b here)."""
    words = np.ascontiguousarray(solutions, dtype=np.float64).view(np.uint64)
    weights = (np.arange(1, words.shape[1] + 1, dtype=np.uint64) * _GOLDEN64) | np.uint64(1)
    return (words * weights).sum(axis=1, dtype=np.uint64)


def _checked_parents(batch, cells: np.ndarray, found: np.ndarray) -> np.ndarray:
    """``found`` (the solutions read for ``cells``) when each has the check sum the
    batch stored for its cell (``parent_sum`` of ``parent_cells``; batches written
    before it: the blake2b ``parent_digest``).

    Raises
    ------
    CorruptFileError
        When a cell's elite is not the one the batch was made from (the states the
        parents were read from are inconsistent): the message names the cell.
    """
    known = np.asarray(batch["parent_cells"][()], dtype=np.int64)
    name, check = ("parent_sum", _sums) if "parent_sum" in batch else ("parent_digest", _digests)
    expected = np.asarray(batch[name][()], dtype=np.uint64)[np.searchsorted(known, cells)]
    wrong = np.flatnonzero(check(found) != expected)
    if len(wrong):
        raise CorruptFileError(
            f"the elite read for cell {int(cells[wrong[0]])} is not the parent this batch "
            "was made from (the run's working states are inconsistent); delete the run's "
            "work/state_*.h5 and work/gen_* after its last kept checkpoint and rerun"
        )
    return found


def _overlaps(rows: np.ndarray, kinds: np.ndarray, start: int, stop: int, *, stride: int):
    """``(emitter, its first parent, its first row state, its rows, local low, local
    high)`` of every emitter whose offspring overlap ``start..stop-1`` (``stride``:
    rows between recorded states)."""
    first = parent = state = 0
    for emitter, (count, kind) in enumerate(zip(rows.tolist(), kinds.tolist(), strict=True)):
        low, high = max(start, first), min(stop, first + count)
        if low < high:
            yield emitter, parent, state, count, low - first, high - first
        first += count
        parent += _PARENTS_PER_ROW[kind] * count
        state += _states_of(count, stride)


class QDBatch(CompactBatch):
    """A compact batch of Gaussian and iso-line emitters (MAP-Elites, CVT-MAP-Elites and
    their iso-line variants, novelty search: its parents are entries of its novelty
    archive) and of separable CMA-ES emitters: per emitter its offspring count
    (``emitter_rows``), kind (``emitter_kind``), ``sigma`` (Gaussian: sigma; iso-line:
    iso and line sigma) and its random generator's state before every ``row_stride``-th
    offspring's noise (1 when absent) and after the last (``row_state``: a shard draws
    its own rows and at most ``row_stride - 1`` before them; an iso-line emitter's line
    noise starts after the last); the cells of the parents pyribs sampled (``parents``:
    an emitter's ``n``, an iso-line emitter's ``2n``; -1 for ``x0`` while the archive
    was empty) with a digest of each parent's solution (``parent_cells``,
    ``parent_sum``: a shard checks what it read; ``parent_digest`` in batches written
    before), ``x0`` when used, and ``bounds`` (lower and upper, one column when every
    parameter has the same). The offspring are regenerated bit for bit as pyribs'
    ``ask()`` made them; the parents' solutions come from ``batch[ELITES]``. A batch
    ``{"solutions": ...}`` (a checkpoint written before compact QD batches, asynchronous
    proposals) is plain.
    """

    @staticmethod
    def size(batch) -> int:
        """Offspring of every emitter."""
        if "solutions" in batch:
            return len(batch["solutions"])
        return int(np.sum(batch["emitter_rows"][()]))

    @staticmethod
    def elites_read(batch, start: int, stop: int) -> np.ndarray:
        """The cells of the parents of offspring ``start..stop-1``."""
        if "solutions" in batch:
            return np.empty(0, dtype=np.int64)
        parents = np.asarray(batch["parents"][()], dtype=np.int64)
        kinds = np.asarray(batch["emitter_kind"][()])
        cells = []
        for emitter, first, _, count, low, high in _overlaps(
            np.asarray(batch["emitter_rows"][()]), kinds, start, stop, stride=_stride(batch)
        ):
            cells.append(parents[first + low : first + high])
            if kinds[emitter] == ISO_LINE_KIND:
                cells.append(parents[first + count + low : first + count + high])
        cells = np.concatenate(cells) if cells else np.empty(0, dtype=np.int64)
        return np.unique(cells[cells >= 0])

    @staticmethod
    def solutions(batch, start: int, stop: int) -> np.ndarray:
        """Offspring ``start..stop-1``, regenerated from their parents and noise."""
        if "solutions" in batch:
            return np.asarray(batch["solutions"][start:stop], dtype=np.float64)
        batch = _small_arrays_read(batch)
        cells = QDBatch.elites_read(batch, start, stop)
        found = None
        if len(cells):
            found = _checked_parents(
                batch, cells, np.asarray(batch[ELITES][cells], dtype=np.float64)
            )
        states = batch["row_state"]
        sigma = np.asarray(batch["sigma"][()], dtype=np.float64)
        kinds = np.asarray(batch["emitter_kind"][()])
        stride = _stride(batch)

        def drawn(emitter: int, state: int, count: int, low: int, high: int, dim: int):
            block, skipped = divmod(low, stride)
            generator = _unpacked_rng(states[state + block])
            if skipped:  # the rows before ``low`` since the recorded state
                _normal_rows(generator, sigma[emitter, 0], rows=skipped, dim=dim)
            noise = _normal_rows(generator, sigma[emitter, 0], rows=high - low, dim=dim)
            if kinds[emitter] != ISO_LINE_KIND:
                return noise, None
            generator = _unpacked_rng(states[state + _states_of(count, stride) - 1])
            return noise, generator.normal(scale=sigma[emitter, 1], size=(count, 1))[low:high]

        return _offspring(batch, start, stop, cells=cells, found=found, noise=drawn)


#: The arrays of a compact QD batch read whole (all but ``row_state``, of which a
#: shard reads its own rows).
_SMALL_ARRAYS = (
    "emitter_rows",
    "emitter_kind",
    "sigma",
    "parents",
    "parent_cells",
    "parent_digest",
    "parent_sum",
    "bounds",
    "x0",
    "es_mean",
    "es_scale",
    "row_stride",
)


def _small_arrays_read(batch) -> dict:
    """A compact batch (h5py datasets, read where indexed) with its small arrays read
    once (:data:`_SMALL_ARRAYS`)."""
    return {
        **batch,
        **{name: np.asarray(batch[name][()]) for name in _SMALL_ARRAYS if name in batch},
    }


def _offspring(batch, start: int, stop: int, *, cells, found, noise) -> np.ndarray:
    """Offspring ``start..stop-1`` of a compact batch as pyribs makes them: each its
    parent plus its noise (an iso-line emitter's: plus its line noise times the second
    parent minus the first), clipped to the bounds; a separable CMA-ES emitter's its
    noise times its scale (``es_scale``: the square roots of its diagonal covariance)
    plus its mean (``es_mean``), one row of each per such emitter.

    ``found`` holds the solutions of the parents' ``cells`` (sorted); ``noise(emitter,
    first row state, emitter's rows, local low, local high, dim)`` returns the rows'
    noise and, for an iso-line emitter, their line noise (else ``None``), arrays this
    function may overwrite.
    """
    x0 = np.asarray(batch["x0"][()], dtype=np.float64) if "x0" in batch else None

    def parents_at(wanted: np.ndarray) -> np.ndarray:
        if (wanted >= 0).all():
            return found[np.searchsorted(cells, wanted)]
        out = np.repeat(x0[None], len(wanted), axis=0)
        known = wanted >= 0
        if known.any():
            out[known] = found[np.searchsorted(cells, wanted[known])]
        return out

    parents = np.asarray(batch["parents"][()], dtype=np.int64)
    kinds = np.asarray(batch["emitter_kind"][()])
    low_bound, high_bound = np.asarray(batch["bounds"][()], dtype=np.float64)
    bounded = bool(np.isfinite(low_bound).any() or np.isfinite(high_bound).any())
    es_index = np.cumsum(kinds == SEP_CMA_ES_KIND) - 1
    pieces = []
    for emitter, first, state, count, low, high in _overlaps(
        np.asarray(batch["emitter_rows"][()]), kinds, start, stop, stride=_stride(batch)
    ):
        if kinds[emitter] == SEP_CMA_ES_KIND:
            # pyribs: scale * noise + mean (IEEE products and sums commute).
            mean = np.asarray(batch["es_mean"][es_index[emitter]], dtype=np.float64)
            scale = np.asarray(batch["es_scale"][es_index[emitter]], dtype=np.float64)
            made, _ = noise(emitter, state, count, low, high, len(mean))
            made *= scale
            made += mean
            pieces.append(made)
            continue
        elites = parents_at(parents[first + low : first + high])
        rows, line = noise(emitter, state, count, low, high, elites.shape[1])
        # elites + rows [+ line * (towards - elites)], left to right as pyribs adds
        # (IEEE addition commutes: the same bits).
        made = rows
        made += elites
        if line is not None:
            towards = parents_at(parents[first + count + low : first + count + high])
            made += line * (towards - elites)
        if bounded:  # clipping to infinite bounds changes nothing
            np.clip(made, low_bound, high_bound, out=made)
        pieces.append(made)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


class ArchiveElites:
    """The elites of an archive in memory, indexed by cell (:data:`ELITES`)."""

    def __init__(self, archive) -> None:
        self.archive = archive

    def __getitem__(self, cells) -> np.ndarray:
        return self.archive._store.retrieve(np.asarray(cells), fields=["solution"])[1]["solution"]


def _sep_cma_es_kind(emitter) -> int | None:
    """:data:`SEP_CMA_ES_KIND` for an evolution-strategy emitter whose batches can be
    compact: pyribs' separable CMA-ES in float64 without bounds (with bounds it redraws
    the rows out of them, so a row would depend on the others), else ``None``."""
    from ribs.emitters.opt import SeparableCMAEvolutionStrategy

    opt = emitter._opt
    if (
        type(opt) is SeparableCMAEvolutionStrategy
        and (np.asarray(emitter.lower_bounds) == -np.inf).all()
        and (np.asarray(emitter.upper_bounds) == np.inf).all()
        and np.dtype(opt.dtype) == np.float64
        and isinstance(opt._rng.bit_generator, np.random.PCG64)
    ):
        return SEP_CMA_ES_KIND
    return None


def _generator_owner(emitter):
    """What holds the generator an emitter's ``ask`` draws from (an evolution-strategy
    emitter's: its ES)."""
    return getattr(emitter, "_opt", emitter)


def _compact_kind(emitter, archive) -> int | None:
    """The ``emitter_kind`` of an emitter whose batches can be compact, else ``None``."""
    from ribs import emitters

    if type(emitter) is emitters.EvolutionStrategyEmitter:
        return _sep_cma_es_kind(emitter)
    kind = {emitters.GaussianEmitter: GAUSSIAN_KIND, emitters.IsoLineEmitter: ISO_LINE_KIND}
    sigmas = (
        (emitter.sigma,)
        if type(emitter) is emitters.GaussianEmitter
        else (getattr(emitter, "iso_sigma", None), getattr(emitter, "line_sigma", None))
    )
    if (
        type(emitter) not in kind
        or emitter.archive is not archive
        or (emitter.initial_solutions is not None and emitter.archive.empty)
        or not all(np.ndim(value) == 0 for value in sigmas)
        or not isinstance(emitter._rng.bit_generator, np.random.PCG64)
    ):
        return None
    return kind[type(emitter)]


def compact_emitters(scheduler) -> list[int] | None:
    """The ``emitter_kind`` of every emitter when the scheduler's batches can be compact:
    a standard scheduler whose Gaussian and iso-line emitters sample float64 parents
    from the run's grid or CVT archive (the one checkpoints store) or from a novelty
    archive (novelty search's :class:`ribs.archives.ProximityArchive`, whose entries
    keep their indices: new ones are appended, local competition replaces in place;
    its sampling is the grid's), with scalar sigmas,
    and whose evolution-strategy emitters use a separable CMA-ES without bounds
    (:func:`_sep_cma_es_kind`; these read no parents, so a separate result archive,
    CMA-MAE's, or an archive without cells, density descent's, is fine when all are),
    all with the same bounds, and the parents'
    samplers with the same ``x0`` (an evolution strategy's batch is drawn around its
    mean, whatever its ``x0`` was: ``initial_population: random`` starts each at its
    own); else ``None``."""
    from ribs import archives, schedulers

    archive = scheduler.archive
    if type(scheduler) is not schedulers.Scheduler or not scheduler.emitters:
        return None
    kinds = [_compact_kind(emitter, archive) for emitter in scheduler.emitters]
    samples_parents = (
        (
            type(archive) in (archives.GridArchive, archives.CVTArchive)
            and scheduler.result_archive is archive
        )
        or _is_novelty(archive)
    ) and archive.dtypes["solution"] == np.float64
    if not samples_parents and not _reads_no_parents(kinds):
        return None
    first = scheduler.emitters[0]
    samplers = [
        e for e, kind in zip(scheduler.emitters, kinds, strict=True) if kind != SEP_CMA_ES_KIND
    ]
    same = all(
        np.array_equal(e.lower_bounds, first.lower_bounds)
        and np.array_equal(e.upper_bounds, first.upper_bounds)
        for e in scheduler.emitters
    ) and all(np.array_equal(e.x0, samplers[0].x0) for e in samplers)
    return kinds if same and None not in kinds else None


def _reads_no_parents(kinds: list) -> bool:
    """Whether emitters of these kinds read no parents from the archive (all separable
    CMA-ES)."""
    return all(kind == SEP_CMA_ES_KIND for kind in kinds)


def _stored_bounds(emitter) -> np.ndarray:
    """``[lower, upper]`` of an emitter, one column when every parameter has the same."""
    bounds = np.stack([emitter.lower_bounds, emitter.upper_bounds]).astype(np.float64)
    if (bounds == bounds[:, :1]).all():
        return bounds[:, :1].copy()
    return bounds


def compact_ask(scheduler, kinds: list[int]) -> tuple[np.ndarray, dict | None]:
    """pyribs' own ``scheduler.ask()``, and the same batch in compact form (``None``
    when regenerating it does not give the same bytes).

    The emitters draw their noise through :class:`_RecordingGenerator`, which notes
    the generator's state before each offspring row; the parents' cells come from
    drawing the archive's sampling again from a copy of its generator (every emitter
    samples once, in order, as :meth:`ribs.archives.ArchiveBase.sample_elites` does).
    The compact batch is checked against pyribs' batch with the noise drawn (a
    shard draws the same from the row states).
    """
    archive = scheduler.archive
    emitters = scheduler.emitters
    sampler = copy.deepcopy(archive._rng)
    empty = archive.empty
    stride = _row_stride(emitters[0].solution_dim)
    with _recording(emitters, stride=stride) as recorders:
        solutions = np.asarray(scheduler.ask(), dtype=np.float64)
    expected = [2 if kind == ISO_LINE_KIND else 1 for kind in kinds]
    if any(
        r.other or r.states is None or len(r.draws) != n
        for r, n in zip(recorders, expected, strict=True)
    ):
        return solutions, None
    rows = [emitter.batch_size for emitter in emitters]
    parents = []
    for count, kind in zip(rows, kinds, strict=True):
        drawn = _PARENTS_PER_ROW[kind] * count
        if empty or not drawn:
            parents.append(np.full(drawn, -1, dtype=np.int64))
        else:
            chosen = sampler.choice(len(archive._store), size=drawn, replace=True)
            parents.append(np.asarray(archive._store.occupied_list[chosen], dtype=np.int64))
    sigma = np.array([_sigmas(e, k) for e, k in zip(emitters, kinds, strict=True)])
    batch = {
        "emitter_rows": np.asarray(rows, dtype=np.int64),
        "emitter_kind": np.asarray(kinds, dtype=np.int8),
        "sigma": sigma,
        "row_state": np.concatenate([recorder.states for recorder in recorders]),
        "parents": np.concatenate(parents),
        "bounds": _stored_bounds(emitters[0]),
    }
    if stride > 1:
        batch["row_stride"] = np.int64(stride)
    strategies = [e._opt for e, k in zip(emitters, kinds, strict=True) if k == SEP_CMA_ES_KIND]
    if strategies:
        batch["es_mean"] = np.stack([np.asarray(es.mean, dtype=np.float64) for es in strategies])
        batch["es_scale"] = np.stack([np.sqrt(es.cov.eigenvalues) for es in strategies])
    cells = found = None
    if empty:
        first_sampler = next(
            (e for e, k in zip(emitters, kinds, strict=True) if k != SEP_CMA_ES_KIND),
            emitters[0],
        )
        batch["x0"] = np.asarray(first_sampler.x0, dtype=np.float64)
    elif len(batch["parents"]):
        cells = batch["parent_cells"] = np.unique(batch["parents"])
        found = np.asarray(ArchiveElites(archive)[cells], dtype=np.float64)
        batch["parent_sum"] = _sums(found)

    def recorded(emitter: int, state: int, count: int, low: int, high: int, dim: int):
        draws = recorders[emitter].draws
        return draws[0][low:high], (draws[1][low:high] if len(draws) > 1 else None)

    same_draws = sampler.bit_generator.state == archive._rng.bit_generator.state
    made = _offspring(batch, 0, len(solutions), cells=cells, found=found, noise=recorded)
    if not same_draws or made.shape != solutions.shape or not _same_bytes(made, solutions):
        return solutions, None
    return solutions, batch


def _sigmas(emitter, kind: int) -> tuple[float, float]:
    """A row of a compact batch's ``sigma``: a Gaussian emitter's sigma, an iso-line
    emitter's iso and line sigma, a separable CMA-ES's sigma (its step size now)."""
    if kind == ISO_LINE_KIND:
        return float(emitter.iso_sigma), float(emitter.line_sigma)
    if kind == SEP_CMA_ES_KIND:
        return float(emitter._opt.sigma), 0.0
    return float(emitter.sigma), 0.0


def _same_bytes(first: np.ndarray, second: np.ndarray) -> bool:
    """Whether two float64 arrays of one shape hold the same bytes (NaN and -0.0
    included)."""
    return np.array_equal(first.view(np.uint64), second.view(np.uint64))


def _insertable(archive, objective: np.ndarray, measures: np.ndarray) -> np.ndarray:
    """The rows of a batch a grid or CVT archive's ``add`` can insert: those whose
    objective exceeds their cell's threshold (``threshold_min`` for an empty cell), as
    pyribs' add decides; it stores no other row's solution. Every row for a novelty
    archive (its scheduler adds every row to the run's archive too)."""
    if _is_novelty(archive):
        return np.ones(len(objective), dtype=bool)
    indices = archive.index_of(measures)
    occupied, data = archive._store.retrieve(indices, fields=["threshold"])
    threshold = np.where(occupied, data["threshold"], archive.threshold_min)
    return np.asarray(objective, dtype=archive.dtypes["objective"]) > threshold


def _told_solutions(archive, batch: dict, objective, measures, *, dim: int) -> np.ndarray:
    """A compact batch's solutions as a tell needs them: the rows the archive can
    insert (:func:`_insertable`) and every separable CMA-ES's rows (its tell ranks
    them all) regenerated, in runs of rows (a gap of rows whose noise costs less than
    a call is drawn too), the others NaN (pyribs' Gaussian and iso-line emitters learn
    nothing from their solutions); ``dim``: the solutions' size."""
    batch = {**batch, ELITES: ArchiveElites(archive)}
    needed = np.repeat(batch["emitter_kind"] == SEP_CMA_ES_KIND, batch["emitter_rows"])
    if not needed.all():  # of Gaussian and iso-line rows, those the archive can insert
        needed |= _insertable(archive, objective, measures)
    rows = np.flatnonzero(needed)
    solutions = np.full((QDBatch.size(batch), dim), np.nan)
    if len(rows):
        gap = max(1, _ROW_CALL_VALUES // max(dim, 1))
        breaks = np.flatnonzero(np.diff(rows) > gap) + 1
        for run in np.split(rows, breaks):
            first, last = int(run[0]), int(run[-1]) + 1
            solutions[first:last] = QDBatch.solutions(batch, first, last)
    return solutions


def _without_batch(emitter):
    """An emitter as pickled between ask and tell of a compact batch: an evolution
    strategy's copy of the batch left out (:func:`_give_strategies_their_rows`)."""
    opt = getattr(emitter, "_opt", None)
    if getattr(opt, "_solutions", None) is None:
        return emitter
    shell = copy.copy(emitter)
    shell._opt = copy.copy(opt)
    shell._opt._solutions = None
    return shell


def _give_strategies_their_rows(scheduler, batch: dict) -> None:
    """Give each separable CMA-ES emitter of a restored scheduler its rows of the
    batch (:attr:`scheduler._cur_solutions`), which its tell ranks."""
    first = 0
    for emitter, count, kind in zip(
        scheduler.emitters, batch["emitter_rows"], batch["emitter_kind"], strict=True
    ):
        if kind == SEP_CMA_ES_KIND:
            emitter._opt._solutions = scheduler._cur_solutions[first : first + count].copy()
        first += int(count)


def _forget_initial_solutions(scheduler) -> None:
    """Drop the initial solutions (``initial_population: random``) of every emitter whose
    archive holds elites: pyribs reads them only while it is empty, which it never is
    again, and states would otherwise carry a batch of solutions from generation to
    generation (and the emitters' batches would not be compact)."""
    pool = getattr(scheduler, "emitter_pool", None)  # a bandit's: every emitter, active or not
    for emitter in scheduler.emitters if pool is None else pool:
        if getattr(emitter, "initial_solutions", None) is not None and not emitter.archive.empty:
            emitter._initial_solutions = None


def _first_proposal(emitter, turn: int) -> np.ndarray:
    """Asynchronous mode: the one solution an emitter proposes on its ``turn``-th
    proposal; while its archive is empty and it has initial solutions, the next of them
    (``ask`` would give the first every time)."""
    if getattr(emitter, "initial_solutions", None) is not None and emitter.archive.empty:
        initial = emitter.initial_solutions
        return np.asarray(emitter._clip(initial[turn % len(initial)][None]), float)
    return np.asarray(emitter.ask()[:1], float)


def _is_novelty(archive) -> bool:
    """Whether ``archive`` is a novelty archive (:class:`ribs.archives.ProximityArchive`)."""
    from ribs.archives import ProximityArchive

    return type(archive) is ProximityArchive


def _novelty_objectives(archive) -> np.ndarray | None:
    """A novelty archive's objectives by entry (its entries are ``0..n-1``), before a
    tell (:func:`inserted_cells` compares them); ``None`` for another archive."""
    if not _is_novelty(archive):
        return None
    return archive._store.retrieve(np.arange(len(archive)), fields=["objective"])[1]["objective"]


def inserted_cells(
    archive, objective: np.ndarray, measures: np.ndarray, *, before: np.ndarray | None = None
) -> np.ndarray:
    """The cells whose elite is now one of a batch's solutions (sorted): the cells a
    tell of that batch changed. For a novelty archive (``before``: its objectives by
    entry before the tell, :func:`_novelty_objectives`) the entries it appended and
    those local competition replaced (a replacement has a higher objective)."""
    if before is not None:
        now = _novelty_objectives(archive)
        replaced = np.flatnonzero(now[: len(before)] != before)
        return np.concatenate([replaced, np.arange(len(before), len(now))]).astype(np.int64)
    occupied, elites = archive.retrieve(measures)
    same = (
        occupied & (elites["objective"] == objective) & (elites["measures"] == measures).all(axis=1)
    )
    return np.unique(np.asarray(elites["index"])[same])


class QDOptimizer:
    """A pyribs scheduler behind the optimizer interface: batches are plain solutions,
    the run's elites are the scheduler's result archive.

    With a surrogate (BOP-Elites) the seconds of the last ``tell`` (the Gaussian
    processes' fit) and ``ask`` (the EJIE search) are its ``fit_seconds`` and
    ``propose_seconds`` metrics.
    """

    batch_format = QDBatch
    #: Whether the scheduler fits a surrogate (its timings are metrics).
    surrogate = False
    #: The compact form of the batch asked and not yet told (``None``: plain).
    pending: dict | None = None
    #: The cells of the run's archive the last tell of a compact batch changed.
    inserted: np.ndarray | None = None

    def __init__(self, scheduler, *, surrogate: bool = False) -> None:
        self.scheduler = scheduler
        if surrogate:
            self.surrogate = True
            self.seconds = {"fit_seconds": np.nan, "propose_seconds": np.nan}

    @classmethod
    def from_spec(cls, spec: dict, *, recipe: QDRecipe) -> QDOptimizer:
        """The seeded scheduler of a run spec (:func:`build_scheduler`)."""
        return cls(
            build_scheduler(spec, recipe=recipe),
            surrogate=recipe.scheduler.surrogate,
        )

    def ask(self) -> np.ndarray | dict:
        """The next batch (all emitters): compact (:class:`QDBatch`) when the emitters
        allow it (:func:`compact_emitters`), else the solutions."""
        started = time.perf_counter()
        kinds = compact_emitters(self.scheduler)
        if kinds is None:
            batch = np.asarray(self.scheduler.ask(), dtype=np.float64)
        else:
            solutions, batch = compact_ask(self.scheduler, kinds)
            self.pending = batch
            batch = solutions if batch is None else batch
        if self.surrogate:
            self.seconds["propose_seconds"] = time.perf_counter() - started
        return batch

    def tell(self, objective, measures, *, failed=None, **extra) -> None:
        """Fold the batch's results into the archive and the emitters; note the cells
        it changed (:attr:`inserted`) when batches are compact.

        Failed solutions (``failed``, ``evaluation.on_failure`` discard) never enter
        the archives; their emitters see them as not added, with an objective and an
        improvement value below every evaluated solution's (ranked last by the
        evolution-strategy emitters' rankers) and measures 0.
        """
        check_numba_disabled()
        started = time.perf_counter()
        scheduler = self.scheduler
        if failed is not None:
            failed = np.asarray(failed, dtype=bool)
            measures = np.where(failed[:, None], 0.0, np.asarray(measures, dtype=np.float64))
            objective = np.array(objective, dtype=np.float64)
            objective[failed] = _below(objective[~failed])
        restored = self.pending is not None and scheduler._cur_solutions is None
        before = _novelty_objectives(scheduler.archive)
        if restored:
            # Restored from a checkpoint, which holds the batch in compact form only:
            # only the rows the archive can take are regenerated.
            scheduler._cur_solutions = _told_solutions(
                scheduler.archive,
                self.pending,
                objective,
                measures,
                dim=scheduler.emitters[0].solution_dim,
            )
            _give_strategies_their_rows(scheduler, self.pending)
        if failed is None:
            scheduler.tell(objective, measures, **extra)
        else:
            with _failed_rows_left_out(scheduler, failed):
                scheduler.tell(objective, measures, **extra)
        self.pending = None
        self.inserted = None
        _forget_initial_solutions(scheduler)
        kinds = compact_emitters(scheduler)
        if kinds is not None and not _reads_no_parents(kinds):
            self.inserted = inserted_cells(
                scheduler.archive, np.asarray(objective), np.asarray(measures), before=before
            )
            if restored and np.isnan(ArchiveElites(scheduler.archive)[self.inserted]).any():
                raise RuntimeError("a row left out of a restored compact batch was inserted")
        if self.surrogate:
            self.seconds["fit_seconds"] = time.perf_counter() - started

    def asked_solutions(self) -> np.ndarray | None:
        """The solutions of the compact batch asked and not yet told, while held (from
        ``ask`` to ``tell``; ``None`` for a plain batch and after a restore from a
        checkpoint, which holds the batch compact). The node-local state cache keeps
        them for the shards and the next tell on the node."""
        if self.pending is None:
            return None
        return self.scheduler._cur_solutions

    def restore_asked_solutions(self, solutions: np.ndarray) -> None:
        """Give an optimizer restored without its compact batch's solutions those
        solutions (:meth:`asked_solutions` of the optimizer that asked them, kept in
        the node-local cache), so that ``tell`` regenerates none."""
        if self.pending is None or self.scheduler._cur_solutions is not None:
            return
        self.scheduler._cur_solutions = solutions
        _give_strategies_their_rows(self.scheduler, self.pending)

    def __getstate__(self) -> dict:
        """Pickled without the solutions of a compact batch (``tell`` regenerates
        them; a separable CMA-ES keeps its own copy, left out too): a checkpoint holds
        the batch in compact form only."""
        state = dict(self.__dict__)
        if self.pending is not None:
            shell = copy.copy(self.scheduler)
            shell._cur_solutions = None
            shell._emitters = [_without_batch(emitter) for emitter in shell._emitters]
            state["scheduler"] = shell
        return state

    def ask_async(self, *, slots, evaluations) -> list[dict]:
        """Asynchronous mode (steady-state MAP-Elites; Gaussian and iso-line emitters,
        whose ``tell`` learns nothing): each proposal is the first solution of an
        ``ask`` of the emitter whose turn it is (emitters take turns by evaluation id),
        varied from elites of the archive as it is now."""
        emitters = self.scheduler.emitters
        return [
            {
                "solutions": _first_proposal(
                    emitters[int(evaluation) % len(emitters)], int(evaluation) // len(emitters)
                )
            }
            for evaluation in evaluations
        ]

    def tell_async(self, objective, measures, *, solutions, **extra) -> None:
        """Asynchronous mode: add finished solutions to the archive at once."""
        check_numba_disabled()
        self.scheduler.archive.add(solutions, objective, measures, **extra)
        _forget_initial_solutions(self.scheduler)

    @property
    def archive(self):
        """The archive whose elites are the run's result."""
        return self.scheduler.result_archive

    @property
    def parent_archive(self):
        """The archive a compact batch's parents are sampled from and :attr:`inserted`
        names cells of: the emitters' (the run's archive, or novelty search's)."""
        return self.scheduler.archive

    def stats(self) -> dict:
        """``own_archive_size``: entries of the archive the emitters learn on, when it is
        not the run's archive (novelty search's, DNS's, density descent's buffer,
        CMA-MAE's learning archive); a surrogate's ``fit_seconds`` and
        ``propose_seconds``."""
        stats = dict(self.seconds) if self.surrogate else {}
        learning = self.scheduler.archive
        if learning is not self.scheduler.result_archive:
            buffer = getattr(learning, "buffer", None)  # a density archive keeps measures only
            stats["own_archive_size"] = len(learning) if buffer is None else len(buffer)
        return stats


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


def cqd_score(
    archive,
    *,
    target_points: np.ndarray,
    penalties: int | list,
    obj_min: float,
    obj_max: float,
    dist_max: float,
) -> float:
    """The CQD score (Kent & Branke 2023) of an archive, with pyribs'
    :func:`ribs.archives.cqd_score`: the mean over the sets of ``target_points``
    (iterations x n x measures) of the sum, over targets and penalties theta, of the best
    ``(f - obj_min) / (obj_max - obj_min) - theta d / dist_max`` among the elites (``d``:
    their distance to the target). pyribs normalises ``f / (obj_max - obj_min)`` without
    shifting by ``obj_min``; the shift (a constant per target and penalty) is added here,
    so that objectives normalised to [0, 1] give scores that do not depend on where the
    objective's range lies."""
    from ribs.archives import cqd_score as ribs_cqd_score

    if archive.empty:
        return float("nan")
    result = ribs_cqd_score(
        archive,
        iterations=len(target_points),
        target_points=target_points,
        penalties=penalties,
        obj_min=obj_min,
        obj_max=obj_max,
        dist_max=dist_max,
    )
    shift = -obj_min / (obj_max - obj_min) * target_points.shape[1] * len(result.penalties)
    return float(result.mean + shift)


#: Defaults of the CQD score's settings (``domains.NAME.cqd``).
CQD_DEFAULTS = {"target_points": 200, "iterations": 1, "penalties": 5}


def cqd_settings(spec: dict) -> dict | None:
    """The arguments of :func:`cqd_score` for a run, or ``None`` when
    the run gets no CQD score (no grid archive, no measures, an unknown best objective,
    or ``cqd.target_points: 0``).

    Defaults (:data:`CQD_DEFAULTS`; ``domains.NAME.cqd`` overrides each): target points
    drawn uniformly within the measure ranges from the master seed and the domain's
    name (the same for every algorithm and seed of the campaign), ``obj_min`` the
    archive's QD score offset, ``obj_max`` the domain's best objective, ``dist_max``
    the diagonal of the measure ranges.
    """
    domain = spec["domain_spec"]
    given = {**CQD_DEFAULTS, **(domain.get("cqd") or {})}
    entry = DOMAINS.get(domain["type"])
    obj_max = given.get("obj_max", entry.objective_max if entry else None)
    grid = "dims" in spec["algorithm_spec"]["archive"]  # the run's archive is a grid
    if not (grid and domain.get("measure_ranges")):
        return None
    if obj_max is None or not given["target_points"]:
        return None
    ranges = np.asarray(domain["measure_ranges"], dtype=np.float64)
    rng = domain_rng(spec["master_seed"], spec["domain"])
    targets = rng.uniform(
        ranges[:, 0], ranges[:, 1], size=(given["iterations"], given["target_points"], len(ranges))
    )
    return {
        "target_points": targets,
        "penalties": given["penalties"],
        "obj_min": given.get(
            "obj_min", spec["algorithm_spec"]["archive"].get("qd_score_offset", 0.0)
        ),
        "obj_max": obj_max,
        "dist_max": given.get("dist_max", float(np.linalg.norm(ranges[:, 1] - ranges[:, 0]))),
    }
