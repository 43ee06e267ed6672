"""The one registry of algorithm types and built-in domains.

Every algorithm type (``algorithms.NAME.type``) is one :class:`AlgorithmType` entry
and every built-in domain (``domains.NAME.type``) one :class:`DomainType` entry.
Configuration validation (which keys a type accepts, what it needs), defaults, run
specs, the optimizer factory and the reference tables of ``docs/configuration.md``
all read them; a test checks the JSON schema against them. Adding an algorithm type
is one class (or one :class:`~evocamp.families.qd.QDRecipe` of pyribs components) and
one entry here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from evocamp import domains
from evocamp.base.errors import OptimizerError
from evocamp.base.plugins import describe_import_failure, import_plugin
from evocamp.base.seeding import domain_rng, optimizer_seeds
from evocamp.families import bo, es
from evocamp.families.baselines import RandomSearch
from evocamp.families.qd import QDOptimizer, QDRecipe
from evocamp.model.protocol import (
    BatchFormat,
    batch_format_of,
    call_optimizer,
    check_methods,
)
from evocamp.model.runspec import PLUGIN, run_label, spec_run_key

#: Optional dependency groups of ``pyproject.toml``: the distributions each installs, with
#: the versions that keep results reproducible (``[low, below)``). pymoo 0.6.2's
#: PatternSearch draws unseeded random numbers, so BOP-Elites' proposals would differ
#: from run to run.
EXTRAS = {"bop": (("pymoo", (0, 6, 1), (0, 6, 2)),)}

#: Families, in the order the documentation lists them.
FAMILIES = ("qd", "es", "bo", "baseline", "plugin")


@dataclass(frozen=True)
class Derived:
    """A default computed from the resolved domain (e.g. SNES's population from the
    solution dimension); ``text`` is how the documentation states it."""

    compute: Callable[[dict], object]
    text: str


@dataclass(frozen=True)
class AlgorithmType:
    """One algorithm type.

    Attributes
    ----------
    name : str
        The ``type`` value.
    family : str
        ``qd``, ``es``, ``bo``, ``baseline`` or ``plugin``.
    summary : str
        One line for the documentation.
    reference : str
        Where it comes from (paper or library).
    defaults : dict
        Every optional key with its default (a value or a :class:`Derived`), filled into
        the run spec. Together with ``optional`` these are the keys the type accepts
        (besides ``type`` and ``archive``).
    optional : tuple of str
        Accepted keys without a default.
    required : tuple of str
        Keys that must be given.
    params : tuple of str
        Keys passed to the class as keyword arguments (besides ``solution_dim``,
        ``x0``, ``bounds`` and ``seed``).
    cls : type or None
        The optimizer class (``None`` for plugins: the ``class`` key names it).
    recipe : QDRecipe or None
        QD types: the pyribs components; the class is :class:`QDOptimizer`, whose
        archive is the run's archive (other families fill a passive archive).
    batch_size : callable or None
        Solutions per generation, from the resolved algorithm spec (``None``: the class
        decides, as plugins do).
    needs_measures : bool
        The type needs a domain with measures (QD).
    needs_bounds : bool
        The type samples within the domain's bounds.
    grid_archive : bool
        The run's (or passive) archive is a grid with ``archive.dims``.
    archive_defaults : dict
        Defaults of ``archive.*`` keys particular to the type.
    shards_in_spec : bool
        The shard count is part of the algorithm (every shard is one worker).
    async_refusal : str or None
        Why the type cannot run in asynchronous mode (``mode: async``), or ``None``
        when it can (its class has ``ask_async`` and ``tell_async``; plugins are checked
        for them).
    extra : str or None
        The optional dependency group of evocamp the type needs (``pip install
        'evocamp[EXTRA]'``; :data:`EXTRAS` names its modules): a campaign using the
        type is refused, with that command, when one is missing.
    """

    name: str
    family: str
    summary: str
    reference: str = ""
    defaults: dict = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    cls: type | None = None
    recipe: QDRecipe | None = None
    batch_size: Callable[[dict], int] | None = None
    needs_measures: bool = False
    needs_bounds: bool = False
    grid_archive: bool = True
    archive_defaults: dict = field(default_factory=dict)
    shards_in_spec: bool = False
    async_refusal: str | None = "it has no asynchronous (steady-state) form"
    extra: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key the type accepts besides ``type`` and ``archive``."""
        return (*self.defaults, *self.optional, *self.required)


@dataclass(frozen=True)
class DomainType:
    """One built-in domain.

    Attributes
    ----------
    name : str
        The ``type`` value.
    summary : str
        One line for the documentation.
    evaluate : callable
        The evaluation function ``(solutions, seeds, **params) -> dict``.
    fixed_dim : callable or None
        The solution dimension fixed by the task, from the params (``None``: the
        ``solution_dim`` key decides, default :data:`DEFAULT_SOLUTION_DIM`).
    measure_ranges : callable
        ``(solution_dim, params) -> [[low, high], ...]`` (``[]``: no measures).
    measure_count : int
        Number of measures.
    bounds : list or None
        ``[low, high]`` of every parameter (``None``: unbounded).
    qd_score_offset : float
        At or below the worst objective (the QD score's offset).
    minimised : str or None
        Minimisation benchmarks: the extra field holding the value to report as a
        minimum (the objective is its negative).
    params : dict
        Defaults of the evaluation function's keyword arguments.
    extra_fields : tuple of str
        Extra outputs stored with every elite by default.
    objective_max : float or None
        The best objective (the CQD score's ``obj_max``; ``None``: unknown, the CQD score
        needs ``cqd.obj_max``).
    """

    name: str
    summary: str
    evaluate: Callable
    measure_ranges: Callable[[int, dict], list]
    measure_count: int
    fixed_dim: Callable[[dict], int] | None = None
    bounds: list | None = None
    qd_score_offset: float = 0.0
    minimised: str | None = None
    params: dict = field(default_factory=dict)
    extra_fields: tuple[str, ...] = ()
    objective_max: float | None = None


#: Solution dimension of domains that do not fix it.
DEFAULT_SOLUTION_DIM = 20
#: Grid cells per measure of a grid archive unless ``archive.dims`` says otherwise.
DEFAULT_GRID_CELLS_PER_MEASURE = 20

# --- algorithm types --------------------------------------------------------------

#: Keys every QD type accepts, with their defaults (``iso_sigma`` and ``line_sigma``
#: are filled in for every QD type: they are part of existing run specs).
_QD_DEFAULTS = {"emitters": 1, "batch_size": 32, "sigma": 0.5, "iso_sigma": 0.01, "line_sigma": 0.2}


def _qd_batch(algorithm: dict) -> int:
    return algorithm["emitters"] * algorithm["batch_size"]


def _qd(
    name: str,
    summary: str,
    reference: str,
    recipe: QDRecipe,
    *,
    defaults: dict | None = None,
    batch_size: Callable[[dict], int] = _qd_batch,
    **more,
) -> AlgorithmType:
    """A QD type: ``defaults`` (:data:`_QD_DEFAULTS` unless given) plus ``ranker``, if
    given; its archive (or result archive) is a grid unless it is a CVT."""
    ranker = more.pop("ranker", None)
    defaults = dict(_QD_DEFAULTS if defaults is None else defaults)
    if ranker is not None:
        defaults["ranker"] = ranker
    return AlgorithmType(
        name=name,
        family="qd",
        summary=summary,
        reference=reference,
        defaults=defaults,
        cls=QDOptimizer,
        recipe=recipe,
        batch_size=batch_size,
        needs_measures=True,
        grid_archive=recipe.archive != "cvt",
        **more,
    )


def _mean_measure_width(domain: dict) -> float:
    ranges = np.asarray(domain["measure_ranges"], dtype=np.float64)
    return float(np.mean(ranges[:, 1] - ranges[:, 0]))


def _novelty_threshold(domain: dict) -> float:
    return 0.037 * _mean_measure_width(domain)


def _density_bandwidth(domain: dict) -> float:
    return 0.05 * _mean_measure_width(domain)


#: Keys of the QD types whose variation is a Gaussian or iso-line emitter of choice.
#: Gaussian by default: pyribs' emitters start from one point (x0), where iso-line
#: variation between identical parents hardly moves (benchmarks/RESULTS.md).
_VARIATION_DEFAULTS = {**_QD_DEFAULTS, "variation": "gaussian"}


def _bop_batch(algorithm: dict) -> int:
    """BOP-Elites' smallest batch: its initial design or a later proposal."""
    return algorithm["emitters"] * min(algorithm["batch_size"], algorithm["initial_points"])


#: Emitter kinds of the bandit's pool (pyribs' sphere example, ``me_map_elites``).
_BANDIT_POOL = (
    ("evolution_strategy", {"ranker": "obj"}),
    ("evolution_strategy", {"ranker": "2rd"}),
    ("evolution_strategy", {"ranker": "2imp"}),
    ("iso_line", {}),
)


def _snes_popsize(domain: dict) -> int:
    return es.snes_popsize(domain["solution_dim"])


def _snes_eta_sigma(domain: dict) -> float:
    return es.snes_eta_sigma(domain["solution_dim"])


_BO_DEFAULTS = {
    "batch_size": 8,
    "kappa": 1.96,
    "initial_points": 10,
    "candidates": 10000,
    "trees": 25,
    "refine_generations": 20,
}


def _population(algorithm: dict) -> int:
    return algorithm["popsize"]


def _batch_size(algorithm: dict) -> int:
    return algorithm["batch_size"]


#: Why the batch-only types cannot run asynchronously.
_CMA_WHOLE_BATCHES = (
    "its CMA-ES emitters rank and adapt on whole batches (a tell of one solution has no "
    "ranking to learn from)"
)
_ES_WHOLE_BATCHES = (
    "it computes each update from a whole population ranked together (one offspring "
    "has nothing to be ranked against)"
)


ALGORITHMS: dict[str, AlgorithmType] = {
    entry.name: entry
    for entry in (
        _qd(
            "map_elites",
            "GridArchive + GaussianEmitter",
            "Mouret & Clune 2015; pyribs",
            QDRecipe(archive="grid", emitter="gaussian"),
            async_refusal=None,
        ),
        _qd(
            "map_elites_line",
            "GridArchive + IsoLineEmitter (iso-line variation)",
            "Vassiliades & Mouret 2018; pyribs",
            QDRecipe(archive="grid", emitter="iso_line"),
            async_refusal=None,
        ),
        _qd(
            "cvt_map_elites",
            "CVTArchive (archive.cells centroids) + GaussianEmitter",
            "Vassiliades et al. 2018; pyribs",
            QDRecipe(archive="cvt", emitter="gaussian"),
            async_refusal=None,
        ),
        _qd(
            "cma_me",
            "GridArchive + EvolutionStrategyEmitter",
            "Fontaine et al. 2020 (CMA-ME); pyribs",
            QDRecipe(archive="grid", emitter="evolution_strategy"),
            ranker="2imp",
            async_refusal=_CMA_WHOLE_BATCHES,
        ),
        _qd(
            "cma_mae",
            "CMA-MAE: archive learning rate < 1, separate result archive, mu selection, "
            "basic restarts",
            "Fontaine & Nikolaidis 2023 (CMA-MAE); pyribs",
            QDRecipe(
                archive="grid",
                emitter="evolution_strategy",
                emitter_options={"selection_rule": "mu", "restart_rule": "basic"},
                result_archive=True,
            ),
            ranker="imp",
            archive_defaults={"learning_rate": 0.01, "threshold_min": 0.0},
            async_refusal=_CMA_WHOLE_BATCHES,
        ),
        _qd(
            "novelty_search",
            "novelty search: ProximityArchive (k nearest neighbours, novelty threshold, "
            "optional local competition) + Gaussian or iso-line emitters (`variation`); "
            "QD metrics from a grid result archive of every evaluated solution, the "
            "novelty archive's size in `own_archive_size`",
            "Lehman & Stanley 2011 (NS, NSLC); pyribs",
            QDRecipe(archive="proximity", emitter="variation", result_archive=True),
            defaults=_VARIATION_DEFAULTS,
            archive_defaults={
                "k_neighbors": 15,
                "novelty_threshold": Derived(
                    _novelty_threshold,
                    "0.037 x the mean width of the measure ranges (pyribs' sphere example)",
                ),
                "local_competition": False,
            },
        ),
        _qd(
            "dominated_novelty_search",
            "dominated novelty search: DNSArchive (a population of `archive.capacity`, "
            "competition by distance to the k nearest fitter solutions) + Gaussian or "
            "iso-line emitters (`variation`); QD metrics from a grid result archive",
            "Bahlous-Boldi et al. 2025 (Dominated Novelty Search); pyribs",
            QDRecipe(archive="dns", emitter="variation", result_archive=True),
            defaults=_VARIATION_DEFAULTS,
            archive_defaults={"capacity": 1024, "k_neighbors": 3},
        ),
        _qd(
            "bop_elites",
            "BOP-Elites: Gaussian-process surrogates of objective and measures, batches "
            "that maximise the expected joint improvement of elites (EJIE), after a Sobol "
            "initial design of `initial_points`; GP fit and EJIE search run in tell "
            "(needs pymoo: pip install 'evocamp[bop]')",
            "Kent et al. 2024 (BOP-Elites, IEEE TEVC); pyribs",
            QDRecipe(
                archive="grid",
                emitter="bayesian_optimization",
                scheduler="bayesian_optimization",
            ),
            defaults={
                "emitters": 1,
                "batch_size": 4,
                "initial_points": 20,
                "search_restarts": 5,
                "entropy_ejie": False,
            },
            batch_size=_bop_batch,
            needs_bounds=True,
            extra="bop",
        ),
        _qd(
            "cma_me_bandit",
            "CMA-ME with a BanditScheduler (UCB1) choosing `emitters` active emitters out "
            "of a pool of `emitters` of each kind: EvolutionStrategyEmitters with rankers "
            "obj, 2rd and 2imp, and IsoLineEmitters",
            "Cully 2021 (ME-MAP-Elites); pyribs' sphere example (me_map_elites)",
            QDRecipe(archive="grid", emitter_pool=_BANDIT_POOL, scheduler="bandit"),
            defaults={**_QD_DEFAULTS, "emitters": 4, "line_sigma": 0.1},
        ),
        _qd(
            "density_descent",
            "density descent search: DensityArchive (a kernel density estimate of a "
            "reservoir of measures) + EvolutionStrategyEmitters (ranker density, mu "
            "selection, basic restarts) sampling the grid result archive",
            "Lee et al. 2024 (DDS, arXiv 2312.11331); pyribs",
            QDRecipe(
                archive="density",
                emitter="evolution_strategy",
                emitter_options={
                    "ranker": "density",
                    "selection_rule": "mu",
                    "restart_rule": "basic",
                },
                result_archive=True,
                emitters_on_result=True,
            ),
            defaults={"emitters": 1, "batch_size": 32, "sigma": 1.5},
            archive_defaults={
                "density_method": "kde",
                "bandwidth": Derived(
                    _density_bandwidth,
                    "0.05 x the mean width of the measure ranges (pyribs' sphere example)",
                ),
                "buffer_size": 10000,
            },
        ),
        AlgorithmType(
            name="cma_es",
            family="es",
            summary="CMA-ES on the objective alone (pyribs' CMA-ES as its "
            "EvolutionStrategyEmitter runs it with ranker obj and mu selection; restarts "
            "from x0 when it converges)",
            reference="Hansen & Ostermeier 2001; pyribs",
            defaults={
                "sigma": 0.5,
                "popsize": Derived(_snes_popsize, "4 + floor(3 ln d)"),
            },
            params=("popsize", "sigma"),
            cls=es.CMAES,
            batch_size=_population,
        ),
        AlgorithmType(
            name="openai_es",
            family="es",
            summary="OpenAI-ES: antithetic sampling, centred ranks, Adam",
            reference="Salimans et al. 2017",
            defaults={"popsize": 100, "sigma": 0.02, "learning_rate": 0.01, "weight_decay": 0.005},
            params=("popsize", "sigma", "learning_rate", "weight_decay"),
            cls=es.OpenAIES,
            batch_size=_population,
            async_refusal=_ES_WHOLE_BATCHES,
        ),
        AlgorithmType(
            name="snes",
            family="es",
            summary="separable NES",
            reference="Schaul et al. 2011",
            defaults={
                "sigma": 1.0,
                "eta_mu": 1.0,
                "popsize": Derived(_snes_popsize, "4 + floor(3 ln d)"),
                "eta_sigma": Derived(_snes_eta_sigma, "(3 + ln d) / (5 sqrt d)"),
            },
            params=("popsize", "sigma", "eta_mu", "eta_sigma"),
            cls=es.SNES,
            batch_size=_population,
            async_refusal=_ES_WHOLE_BATCHES,
        ),
        AlgorithmType(
            name="qucb_centralised",
            family="bo",
            summary="batch UCB over an ExtraTrees surrogate; tell fits once and proposes the "
            "whole batch",
            reference="qUCB; DeepHyper's CBO",
            defaults=dict(_BO_DEFAULTS),
            params=tuple(_BO_DEFAULTS),
            cls=bo.CentralisedQUCB,
            batch_size=_batch_size,
            needs_bounds=True,
            async_refusal=None,
        ),
        AlgorithmType(
            name="qucb_decentralised",
            family="bo",
            summary="every shard fits its own surrogate and proposes its own points (the "
            "shard count is part of the run)",
            reference="ADBO, Egelé et al. 2023 (arXiv 2207.00479)",
            defaults=dict(_BO_DEFAULTS),
            params=(*_BO_DEFAULTS, "shards"),
            cls=bo.DecentralisedQUCB,
            batch_size=_batch_size,
            needs_bounds=True,
            shards_in_spec=True,
            async_refusal=None,
        ),
        AlgorithmType(
            name="random_search",
            family="baseline",
            summary="uniform samples within the domain's bounds",
            reference="the baseline of BO papers",
            defaults={"batch_size": 32},
            params=("batch_size",),
            cls=RandomSearch,
            batch_size=_batch_size,
            needs_bounds=True,
            async_refusal=None,
        ),
        AlgorithmType(
            name=PLUGIN,
            family="plugin",
            summary="your own optimizer class (docs/plugins.md)",
            required=("class",),
            optional=("python_path", "params"),
            async_refusal=None,
        ),
    )
}

#: ``archive.*`` keys that only the types whose ``archive_defaults`` name them accept
#: (CMA-MAE's ``learning_rate`` and ``threshold_min`` are those of any grid or CVT
#: archive the emitters learn on).
TYPE_ARCHIVE_KEYS = frozenset(
    name for entry in ALGORITHMS.values() for name in entry.archive_defaults
) - {"learning_rate", "threshold_min"}
#: ``archive.*`` keys of archives with cells (grid, CVT) that the emitters learn on.
CELL_ARCHIVE_KEYS = ("learning_rate", "threshold_min")

# --- domains ---------------------------------------------------------------------


def _projection_ranges(dim: int, params: dict) -> list:
    half_span = dim / 2 * domains.PROJECTION_BOUND
    return [[-half_span, half_span], [-half_span, half_span]]


def _arm_ranges(dim: int, params: dict) -> list:
    reach = float(domains.arm_link_lengths(dim, params.get("link_lengths")).sum())
    return [[-reach, reach], [-reach, reach]]


def _lunar_lander_ranges(dim: int, params: dict) -> list:
    return [[-1.0, 1.0], [-3.0, 0.0]]


def _no_measures(dim: int, params: dict) -> list:
    return []


def _lunar_lander_dim(params: dict) -> int:
    return int(np.prod(domains.LUNAR_LANDER_SHAPE))


def _digits_dim(params: dict) -> int:
    return domains.digits_solution_dim(params.get("hidden", 32))


DOMAINS: dict[str, DomainType] = {
    entry.name: entry
    for entry in (
        DomainType(
            name="sphere",
            summary="CMA-ME paper: shifted sphere (0.4 x 5.12), objective normalised to "
            "[0, 100], measures = sums of the clipped halves, ranges +-(n/2) x 5.12",
            evaluate=domains.sphere,
            measure_ranges=_projection_ranges,
            measure_count=2,
            objective_max=100.0,
        ),
        DomainType(
            name="rastrigin",
            summary="CMA-ME paper: shifted Rastrigin, otherwise as sphere",
            evaluate=domains.rastrigin,
            measure_ranges=_projection_ranges,
            measure_count=2,
            objective_max=100.0,
        ),
        DomainType(
            name="arm",
            summary="planar robotic arm: objective -Var(theta), measures = end-effector "
            "x, y (params: link_lengths)",
            evaluate=domains.arm,
            measure_ranges=_arm_ranges,
            measure_count=2,
            bounds=[-math.pi, math.pi],
            qd_score_offset=-(math.pi**2),
            objective_max=0.0,
        ),
        DomainType(
            name="lunar_lander",
            summary="gymnasium's LunarLander-v3 flown by a linear policy (pyribs' tutorial); "
            "measures = x position and y velocity at touchdown (params: env_seed)",
            evaluate=domains.lunar_lander,
            fixed_dim=_lunar_lander_dim,
            measure_ranges=_lunar_lander_ranges,
            measure_count=2,
            qd_score_offset=-600.0,
            objective_max=300.0,
            params={"env_seed": domains.LUNAR_LANDER_ENV_SEED},
        ),
        DomainType(
            name="digits",
            summary="an MLP (64-hidden-10) classifying scikit-learn's digits; objective = "
            "minus the cross-entropy of a seeded minibatch (params: hidden, minibatch)",
            evaluate=domains.digits,
            fixed_dim=_digits_dim,
            measure_ranges=_no_measures,
            measure_count=0,
            params={"hidden": 32, "minibatch": 256},
            extra_fields=("test_accuracy",),
        ),
        DomainType(
            name="ackley",
            summary="Ackley (a = 20, b = 0.2, c = 2 pi), maximised as its negative",
            evaluate=domains.ackley,
            measure_ranges=_no_measures,
            measure_count=0,
            bounds=[-domains.ACKLEY_BOUND, domains.ACKLEY_BOUND],
            minimised="ackley",
            extra_fields=("ackley",),
        ),
        DomainType(
            name="plain_sphere",
            summary="the unshifted sphere function, maximised as its negative",
            evaluate=domains.plain_sphere,
            measure_ranges=_no_measures,
            measure_count=0,
            bounds=[-domains.PROJECTION_BOUND, domains.PROJECTION_BOUND],
            minimised="sphere",
            extra_fields=("sphere",),
        ),
        DomainType(
            name="plain_rastrigin",
            summary="the unshifted Rastrigin function, maximised as its negative",
            evaluate=domains.plain_rastrigin,
            measure_ranges=_no_measures,
            measure_count=0,
            bounds=[-domains.PROJECTION_BOUND, domains.PROJECTION_BOUND],
            minimised="rastrigin",
            extra_fields=("rastrigin",),
        ),
    )
}
#: The domain type of users' own evaluation functions.
PLUGIN_DOMAIN = PLUGIN

# --- lookups used by the layers above --------------------------------------------


def algorithm_type(spec_or_entry: dict) -> AlgorithmType:
    """The registry entry of an algorithm entry or run spec (``type`` key)."""
    algorithm = spec_or_entry.get("algorithm_spec", spec_or_entry)
    return ALGORITHMS[algorithm["type"]]


def family_of(algorithm: dict) -> str:
    """``qd``, ``es``, ``bo``, ``baseline`` or ``plugin``: the family of an algorithm entry."""
    return ALGORITHMS[algorithm["type"]].family


def minimised_value(domain_spec: dict) -> str | None:
    """The extra field holding a minimisation benchmark's value (e.g. ``ackley``), whose
    best is reported as a minimum; ``None`` for other domains."""
    entry = DOMAINS.get(domain_spec["type"])
    return entry.minimised if entry else None


#: Defaults of the CQD score's settings (``domains.NAME.cqd``).
CQD_DEFAULTS = {"target_points": 200, "iterations": 1, "penalties": 5}


def cqd_settings(spec: dict) -> dict | None:
    """The arguments of :func:`evocamp.families.qd.cqd_score` for a run, or ``None`` when
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
    if not (algorithm_type(spec).grid_archive and domain.get("measure_ranges")):
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


def missing_extra(entry: AlgorithmType) -> str | None:
    """What to install when a distribution of the type's optional extra is missing or of
    a version that breaks reproducibility, else ``None``."""
    if entry.extra is None:
        return None
    problems = []
    for name, low, below in EXTRAS[entry.extra]:
        wanted = f"{name}>={'.'.join(map(str, low))},<{'.'.join(map(str, below))}"
        if importlib.util.find_spec(name) is None:
            problems.append(f"{name}, which is not installed")
            continue
        version = importlib.metadata.version(name)
        found = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
        if not low <= found < below:
            problems.append(f"{wanted}, not {name} {version} (results would not be reproducible)")
    if not problems:
        return None
    return f"{entry.name} needs {'; '.join(problems)}: pip install 'evocamp[{entry.extra}]'"


def load_evaluator(domain_spec: dict) -> Callable:
    """The evaluation function of a resolved domain spec (a plugin's is imported)."""
    if domain_spec["type"] != PLUGIN_DOMAIN:
        return DOMAINS[domain_spec["type"]].evaluate
    return import_plugin(domain_spec["function"], domain_spec.get("python_path"))


def plugin_class(algorithm: dict, *, where: str) -> type:
    """Import and check a plugin optimizer class; ``where`` starts the messages (e.g.
    ``run me/sphere/seed0``).

    Raises
    ------
    OptimizerError
        When it cannot be imported, lacks ``ask``/``tell`` or has an old or broken
        batch format.
    """
    target = algorithm["class"]
    try:
        cls = import_plugin(target, algorithm.get("python_path"))
    except (ImportError, AttributeError) as error:
        failure = describe_import_failure(target, algorithm.get("python_path"), error)
        raise OptimizerError(f"{where}: optimizer class {failure}") from None
    try:
        check_methods(cls, name=target)
        batch_format_of(cls, name=target)
    except OptimizerError as error:
        raise OptimizerError(f"{where}: {error}") from None
    return cls


def optimizer_class(spec: dict) -> type:
    """The class of a run's optimizer (a plugin's is imported and checked)."""
    entry = algorithm_type(spec)
    if entry.cls is not None:
        return entry.cls
    return plugin_class(spec["algorithm_spec"], where=f"run {run_label(spec)}")


def batch_format(spec: dict) -> BatchFormat:
    """How a run's batches are sized and materialised."""
    algorithm = spec["algorithm_spec"]
    return batch_format_of(optimizer_class(spec), name=algorithm.get("class", algorithm["type"]))


def owns_archive(spec: dict) -> bool:
    """Whether the optimizer's own archive is the run's (QD), else a passive one is kept."""
    return algorithm_type(spec).recipe is not None


def build_optimizer(spec: dict):
    """Create the seeded optimizer of a run spec.

    QD types get their pyribs scheduler (their entry's recipe); other classes are
    called with ``solution_dim``, ``x0`` (the domain's initial solution), ``bounds``
    (``(low, high)`` or ``None``), ``seed`` (the run's optimizer seed, from the master
    seed) and their parameters (a plugin's ``params``), a plugin's through
    :func:`~evocamp.model.protocol.call_optimizer`.
    """
    entry = algorithm_type(spec)
    cls = optimizer_class(spec)
    missing = missing_extra(entry)
    if missing:
        raise OptimizerError(f"run {run_label(spec)}: {missing}")
    if entry.recipe is not None:
        return cls.from_spec(spec, recipe=entry.recipe)
    algorithm = spec["algorithm_spec"]
    domain = spec["domain_spec"]
    common = {
        "solution_dim": domain["solution_dim"],
        "x0": np.full(domain["solution_dim"], domain["x0"], dtype=np.float64),
        "bounds": tuple(domain["bounds"]) if "bounds" in domain else None,
        "seed": optimizer_seeds(spec["master_seed"], spec_run_key(spec), 1)[0],
    }
    if entry.cls is None:
        params = algorithm.get("params") or {}
    else:
        params = {name: algorithm[name] for name in entry.params}
    return call_optimizer(spec, 0, "__init__", cls, **common, **params)
