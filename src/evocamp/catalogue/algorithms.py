"""Every algorithm type (``algorithms.NAME.type``), one :class:`AlgorithmType` entry each,
and the families they belong to.

Adding a type is one class (or one :class:`~evocamp.families.qd.components.QDRecipe` of
pyribs components) and one entry in :data:`ALGORITHMS`; ``python -m
evocamp.reporting.reference docs/configuration.md`` then regenerates the documentation's
tables. The families from other libraries (pycma, Nevergrad, Optuna) are declared in
:mod:`~evocamp.catalogue.libraries` and taken here as a whole (:data:`LIBRARY_TYPES`);
:data:`FAMILIES` is built from the entries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from evocamp.catalogue.entries import AlgorithmType, Derived, Extra, Family, SpecName
from evocamp.catalogue.libraries import LIBRARY_TYPES
from evocamp.families import bo, es
from evocamp.families.baselines import RandomSearch
from evocamp.families.qd import components
from evocamp.families.qd.components import QDRecipe
from evocamp.families.qd.optimizer import QDOptimizer
from evocamp.model.runspec import PLUGIN

#: Grid cells per measure of a grid archive unless ``archive.dims`` says otherwise.
DEFAULT_GRID_CELLS_PER_MEASURE = 20

# --- families ---------------------------------------------------------------------

QD = Family("qd", "QD (pyribs)")
ES = Family("es", "evolution strategies")
BO = Family("bo", "Bayesian optimisation")
BASELINE = Family("baseline", "baseline")
OWN = Family(PLUGIN, "your own class")

#: BOP-Elites' pattern search: pymoo 0.6.2's PatternSearch draws unseeded random
#: numbers, so BOP-Elites' proposals would differ from run to run.
BOP = Extra("bop", requires=(("pymoo", (0, 6, 1), (0, 6, 2)),))

# --- algorithm types --------------------------------------------------------------

#: Keys every QD type accepts, with their defaults (``iso_sigma`` and ``line_sigma``
#: are filled in for every QD type: they are part of existing run specs).
_QD_DEFAULTS = {
    "emitters": 1,
    "emitter_batch_size": 32,
    "sigma": 0.5,
    "iso_sigma": 0.01,
    "line_sigma": 0.2,
}
#: QD types' per-emitter batch size is stored in run specs as ``batch_size`` (pyribs'
#: name, and the key's name when the run specs were recorded).
_EMITTER_BATCH_SIZE = SpecName("emitter_batch_size", "batch_size", "per emitter")


def _qd_generation(algorithm: dict) -> int:
    """Solutions per generation of a QD type's resolved spec: every emitter's batch."""
    return algorithm["emitters"] * algorithm["batch_size"]


def _qd(
    name: str,
    summary: str,
    reference: str,
    recipe: QDRecipe,
    *,
    defaults: dict | None = None,
    generation_size: Callable[[dict], int] = _qd_generation,
    **more,
) -> AlgorithmType:
    """A QD type: ``defaults`` (:data:`_QD_DEFAULTS` unless given) plus ``ranker``, if
    given; its archive (or result archive) is a grid unless it is a CVT; every type
    whose emitters start from ``x0`` accepts ``initial_population``."""
    ranker = more.pop("ranker", None)
    defaults = dict(_QD_DEFAULTS if defaults is None else defaults)
    if ranker is not None:
        defaults["ranker"] = ranker
    optional = more.pop("optional", ())
    if all(kind is not components.BAYESIAN_OPTIMIZATION for kind, _ in recipe.emitter_kinds):
        optional = (*optional, "initial_population")  # emitters that start from x0
    return AlgorithmType(
        name=name,
        family=QD,
        summary=summary,
        reference=reference,
        defaults=defaults,
        cls=QDOptimizer,
        recipe=recipe,
        generation_size=generation_size,
        needs_measures=True,
        grid_archive=recipe.grid_result,
        spec_names=(_EMITTER_BATCH_SIZE,),
        optional=optional,
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


def _bop_generation(algorithm: dict) -> int:
    """BOP-Elites' smallest batch: its initial design or a later proposal."""
    return algorithm["emitters"] * min(algorithm["batch_size"], algorithm["initial_points"])


#: Emitter kinds of the bandit's pool (pyribs' sphere example, ``me_map_elites``).
_BANDIT_POOL = (
    (components.EVOLUTION_STRATEGY, {"ranker": "obj"}),
    (components.EVOLUTION_STRATEGY, {"ranker": "2rd"}),
    (components.EVOLUTION_STRATEGY, {"ranker": "2imp"}),
    (components.ISO_LINE, {}),
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
#: BO keys that are no part of a run spec unless given (DeepHyper's cheapeners, issue 45:
#: a surrogate refitted every k-th told point, a periodic decay of kappa; the cost-aware
#: acquisition, issue 44: the cost field and the cooling of its exponent).
_BO_CHEAPENERS = ("refit_every", "kappa_schedule", "cost", "cost_cooling")


def _population(algorithm: dict) -> int:
    return algorithm["popsize"]


def _batch_size(algorithm: dict) -> int:
    return algorithm["batch_size"]


def _antithetic_pairs(algorithm: dict) -> tuple[str, str] | None:
    """OpenAI-ES samples antithetic pairs: an odd ``popsize`` is refused."""
    if algorithm.get("popsize", 2) % 2:
        return "popsize", f"openai_es samples antithetic pairs; {algorithm['popsize']} is odd"
    return None


def _cma_mae_recipe(archive: components.ArchiveKind) -> QDRecipe:
    """CMA-MAE's components on grid or CVT archives (the result archive of the same
    kind)."""
    return QDRecipe(
        archive=archive,
        emitter=components.EVOLUTION_STRATEGY,
        emitter_options={"selection_rule": "mu", "restart_rule": "basic"},
        result_archive=True,
        result_kind=archive,
    )


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
            QDRecipe(archive=components.GRID, emitter=components.GAUSSIAN),
            async_refusal=None,
        ),
        _qd(
            "map_elites_line",
            "GridArchive + IsoLineEmitter (iso-line variation)",
            "Vassiliades & Mouret 2018; pyribs",
            QDRecipe(archive=components.GRID, emitter=components.ISO_LINE),
            async_refusal=None,
        ),
        _qd(
            "cvt_map_elites",
            "CVTArchive (archive.cells centroids) + GaussianEmitter",
            "Vassiliades et al. 2018; pyribs",
            QDRecipe(archive=components.CVT, emitter=components.GAUSSIAN),
            async_refusal=None,
        ),
        _qd(
            "cvt_map_elites_line",
            "CVTArchive (archive.cells centroids) + IsoLineEmitter (iso-line variation)",
            "Vassiliades & Mouret 2018 (iso-line variation on CVT-MAP-Elites); pyribs",
            QDRecipe(archive=components.CVT, emitter=components.ISO_LINE),
            async_refusal=None,
        ),
        _qd(
            "cma_me",
            "GridArchive + EvolutionStrategyEmitter",
            "Fontaine et al. 2020 (CMA-ME); pyribs",
            QDRecipe(archive=components.GRID, emitter=components.EVOLUTION_STRATEGY),
            ranker="2imp",
            optional=("es",),
            async_refusal=_CMA_WHOLE_BATCHES,
        ),
        _qd(
            "cma_mae",
            "CMA-MAE: archive learning rate < 1, separate result archive, mu selection, "
            "basic restarts",
            "Fontaine & Nikolaidis 2023 (CMA-MAE); pyribs",
            _cma_mae_recipe(components.GRID),
            ranker="imp",
            optional=("es",),
            archive_defaults={"learning_rate": 0.01, "threshold_min": 0.0},
            async_refusal=_CMA_WHOLE_BATCHES,
        ),
        _qd(
            "cvt_cma_me",
            "cma_me on a CVTArchive (archive.cells centroids)",
            "Fontaine et al. 2020 (CMA-ME); pyribs",
            QDRecipe(archive=components.CVT, emitter=components.EVOLUTION_STRATEGY),
            ranker="2imp",
            optional=("es",),
            async_refusal=_CMA_WHOLE_BATCHES,
        ),
        _qd(
            "cvt_cma_mae",
            "cma_mae on CVTArchives (learning and result archives share archive.cells centroids)",
            "Fontaine & Nikolaidis 2023 (CMA-MAE); pyribs",
            _cma_mae_recipe(components.CVT),
            ranker="imp",
            optional=("es",),
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
            QDRecipe(
                archive=components.PROXIMITY, emitter=components.VARIATION, result_archive=True
            ),
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
            QDRecipe(archive=components.DNS, emitter=components.VARIATION, result_archive=True),
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
                archive=components.GRID,
                emitter=components.BAYESIAN_OPTIMIZATION,
                scheduler=components.BAYESIAN_OPTIMIZATION_SCHEDULER,
            ),
            defaults={
                "emitters": 1,
                "emitter_batch_size": 4,
                "initial_points": 20,
                "search_restarts": 5,
                "entropy_ejie": False,
            },
            generation_size=_bop_generation,
            needs_bounds=True,
            extra=BOP,
        ),
        _qd(
            "cma_me_bandit",
            "CMA-ME with a BanditScheduler (UCB1) choosing `emitters` active emitters out "
            "of a pool of `emitters` of each kind: EvolutionStrategyEmitters with rankers "
            "obj, 2rd and 2imp, and IsoLineEmitters",
            "Cully 2021 (ME-MAP-Elites); pyribs' sphere example (me_map_elites)",
            QDRecipe(
                archive=components.GRID, emitter_pool=_BANDIT_POOL, scheduler=components.BANDIT
            ),
            defaults={**_QD_DEFAULTS, "emitters": 4, "line_sigma": 0.1},
            optional=("es",),
        ),
        _qd(
            "density_descent",
            "density descent search: DensityArchive (a kernel density estimate of a "
            "reservoir of measures) + EvolutionStrategyEmitters (ranker density, mu "
            "selection, basic restarts) sampling the grid result archive",
            "Lee et al. 2024 (DDS, arXiv 2312.11331); pyribs",
            QDRecipe(
                archive=components.DENSITY,
                emitter=components.EVOLUTION_STRATEGY,
                emitter_options={
                    "ranker": "density",
                    "selection_rule": "mu",
                    "restart_rule": "basic",
                },
                result_archive=True,
                emitters_on_result=True,
            ),
            defaults={"emitters": 1, "emitter_batch_size": 32, "sigma": 1.5},
            optional=("es",),
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
            family=ES,
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
            generation_size=_population,
        ),
        AlgorithmType(
            name="openai_es",
            family=ES,
            summary="OpenAI-ES: antithetic sampling, centred ranks, Adam",
            reference="Salimans et al. 2017",
            defaults={"popsize": 100, "sigma": 0.02, "learning_rate": 0.01, "weight_decay": 0.005},
            params=("popsize", "sigma", "learning_rate", "weight_decay"),
            cls=es.OpenAIES,
            generation_size=_population,
            async_refusal=_ES_WHOLE_BATCHES,
            rules=(_antithetic_pairs,),
            noise_seed_rows=True,
        ),
        AlgorithmType(
            name="snes",
            family=ES,
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
            generation_size=_population,
            async_refusal=_ES_WHOLE_BATCHES,
            noise_seed_rows=True,
        ),
        AlgorithmType(
            name="qucb_centralised",
            family=BO,
            summary="batch UCB over an ExtraTrees surrogate; tell fits once and proposes the "
            "whole batch",
            reference="qUCB; DeepHyper's CBO",
            defaults=dict(_BO_DEFAULTS),
            optional=_BO_CHEAPENERS,
            params=(*_BO_DEFAULTS, *_BO_CHEAPENERS),
            cls=bo.CentralisedQUCB,
            generation_size=_batch_size,
            needs_bounds=True,
            takes_space=True,
            async_refusal=None,
            keeps_evaluations=True,
        ),
        AlgorithmType(
            name="qucb_decentralised",
            family=BO,
            summary="every shard fits its own surrogate and proposes its own points (the "
            "shard count is part of the run)",
            reference="ADBO, Egelé et al. 2023 (arXiv 2207.00479)",
            defaults=dict(_BO_DEFAULTS),
            optional=_BO_CHEAPENERS,
            params=(*_BO_DEFAULTS, *_BO_CHEAPENERS, "shards"),
            cls=bo.DecentralisedQUCB,
            generation_size=_batch_size,
            needs_bounds=True,
            takes_space=True,
            shards_in_spec=True,
            async_refusal=None,
            keeps_evaluations=True,
        ),
        AlgorithmType(
            name="random_search",
            family=BASELINE,
            summary="uniform samples within the domain's bounds",
            reference="the baseline of BO papers",
            defaults={"batch_size": 32},
            params=("batch_size",),
            cls=RandomSearch,
            generation_size=_batch_size,
            needs_bounds=True,
            takes_space=True,
            async_refusal=None,
        ),
        *LIBRARY_TYPES,
        AlgorithmType(
            name=PLUGIN,
            family=OWN,
            summary="your own optimizer class (docs/plugins.md)",
            required=("class",),
            optional=("python_path", "params"),
            async_refusal=None,
            takes_space=True,
        ),
    )
}

#: Every family, in the order of its first type in :data:`ALGORITHMS` (the order the
#: documentation lists them): built from the entries, declared nowhere else.
FAMILIES: dict[str, Family] = {entry.family.name: entry.family for entry in ALGORITHMS.values()}

#: ``archive.*`` keys that only the types whose ``archive_defaults`` name them accept
#: (CMA-MAE's ``learning_rate`` and ``threshold_min`` are those of any grid or CVT
#: archive the emitters learn on).
TYPE_ARCHIVE_KEYS = frozenset(
    name for entry in ALGORITHMS.values() for name in entry.archive_defaults
) - {"learning_rate", "threshold_min"}
#: ``archive.*`` keys of archives with cells (grid, CVT) that the emitters learn on.
CELL_ARCHIVE_KEYS = ("learning_rate", "threshold_min")


def algorithm_type(spec_or_entry: dict) -> AlgorithmType:
    """The catalogue entry of an algorithm entry or run spec (``type`` key)."""
    algorithm = spec_or_entry.get("algorithm_spec", spec_or_entry)
    return ALGORITHMS[algorithm["type"]]


def family_of(algorithm: dict) -> str:
    """The name of an algorithm entry's family (``qd``, ``es``, ``bo``, ``baseline``,
    ``plugin`` or a library's: ``pycma``, ``nevergrad``, ``optuna``)."""
    return ALGORITHMS[algorithm["type"]].family.name
