"""The families from other libraries, one :class:`Family`, one :class:`Extra` and its
types' entries each: pycma's IPOP- and BIPOP-CMA-ES, Nevergrad's optimizers, Optuna's
samplers.

A family from another library is declared here (not in
:mod:`~evocamp.catalogue.algorithms`, which takes :data:`LIBRARY_TYPES` as a whole): its
module under ``families/``, its entries here, its extra in ``pyproject.toml`` and its
section of ``docs/families.md`` are the four files it needs (docs/architecture.md,
"Adding a family from another library"). One more optimizer of a library already here
is one name: a Nevergrad registry name in a campaign (``optimizer: DE``), an Optuna
sampler one line of :data:`evocamp.families.optuna.SAMPLERS`, a restart regime of
pycma one entry below.
"""

from __future__ import annotations

from evocamp.catalogue.entries import AlgorithmType, Derived, Extra, Family
from evocamp.families import es, nevergrad, optuna, pycma


def _batch_size(algorithm: dict) -> int:
    return algorithm["batch_size"]


def _population(algorithm: dict) -> int:
    return algorithm["popsize"]


def _pycma_popsize(domain: dict) -> int:
    return es.snes_popsize(domain["solution_dim"])


# --- pycma: IPOP- and BIPOP-CMA-ES --------------------------------------------------

PYCMA = Family("pycma", "CMA-ES with restarts (pycma)")
#: pycma, pinned exactly (its numbers are the runs' numbers).
PYCMA_EXTRA = Extra("cma", requires=(("cma", (4, 5, 0), (4, 5, 1)),), numeric=("cma",))
#: The family's own key (the schema file names it nowhere).
_INCPOPSIZE = {
    "type": "integer",
    "minimum": 2,
    "description": "Factor of the population from one large restart to the next "
    "(ipop_cma_es, bipop_cma_es; cma.fmin2's incpopsize).",
}
_WHOLE_POPULATIONS = (
    "pycma updates from a whole population ranked together (one offspring has nothing "
    "to be ranked against)"
)


def _pycma(name: str, summary: str, reference: str, *, cls: type) -> AlgorithmType:
    """A restart regime of :class:`~evocamp.families.pycma.RestartCMAES`: a generation is
    the current restart's population, ``popsize`` the first (and smallest) one."""
    return AlgorithmType(
        name=name,
        family=PYCMA,
        summary=summary,
        reference=reference,
        defaults={
            "sigma": 0.5,
            "popsize": Derived(_pycma_popsize, "4 + floor(3 ln d), pycma's"),
            "incpopsize": 2,
        },
        params=("popsize", "sigma", "incpopsize"),
        cls=cls,
        generation_size=_population,
        async_refusal=_WHOLE_POPULATIONS,
        extra=PYCMA_EXTRA,
        key_shapes={"incpopsize": _INCPOPSIZE},
        redraws_x0=True,
    )


_PYCMA_TYPES = (
    _pycma(
        "ipop_cma_es",
        "IPOP-CMA-ES: pycma's CMA-ES through its ask/tell, restarted from x0 (a new "
        "one each time with x0: random) with a "
        "doubled population whenever pycma's stopping tests fire, as cma.fmin2 restarts "
        "(needs pycma: pip install 'evocamp[cma]')",
        "Auger & Hansen 2005; pycma 4.5",
        cls=pycma.IPOPCMAES,
    ),
    _pycma(
        "bipop_cma_es",
        "BIPOP-CMA-ES: ipop_cma_es's restarts interleaved with local ones (a small "
        "population and step size) under one budget rule, as cma.fmin2(bipop=True) "
        "(needs pycma: pip install 'evocamp[cma]')",
        "Hansen 2009; pycma 4.5",
        cls=pycma.BIPOPCMAES,
    ),
)

# --- Nevergrad: any optimizer of its registry ---------------------------------------

NEVERGRAD = Family("nevergrad", "Nevergrad")
#: Nevergrad and the pycma its CMA runs, pinned exactly.
NEVERGRAD_EXTRA = Extra(
    "nevergrad",
    requires=(("nevergrad", (1, 0, 12), (1, 0, 13)), ("cma", (4, 5, 0), (4, 5, 1))),
    numeric=("nevergrad", "cma"),
)
_OPTIONAL_COUNT = {"type": ["integer", "null"], "minimum": 1}
_NEVERGRAD_KEYS = {
    "optimizer": {
        "type": "string",
        "description": "Nevergrad: a name of nevergrad.optimizers.registry (NGOpt, CMA, "
        "TwoPointsDE, PSO, ...).",
    },
    "budget": {
        **_OPTIONAL_COUNT,
        "description": "Nevergrad's budget: the evaluations the optimizer plans for "
        "(NGOpt chooses by it); null: unknown.",
    },
    "num_workers": {
        **_OPTIONAL_COUNT,
        "description": "Nevergrad's num_workers: candidates in flight (null: batch_size; "
        "asynchronous mode: at least async.slots).",
    },
}


def _registry_name(algorithm: dict) -> tuple[str, str] | None:
    """``optimizer`` must be a name of Nevergrad's registry (checked when Nevergrad is
    installed; a campaign without it is refused for the missing extra)."""
    try:
        names = nevergrad.registry_names()
    except ImportError:
        return None
    name = algorithm.get("optimizer", "NGOpt")
    if name in names:
        return None
    close = [n for n in names if n.lower() == str(name).lower()]
    hint = f" (did you mean {close[0]}?)" if close else " (nevergrad.optimizers.registry)"
    return "optimizer", f"{name!r} is not an optimizer of Nevergrad's registry{hint}"


_NEVERGRAD_TYPES = (
    AlgorithmType(
        name="nevergrad",
        family=NEVERGRAD,
        summary="any optimizer of Nevergrad's registry by name (`optimizer`: NGOpt, CMA, "
        "TwoPointsDE, PSO, ...) through Nevergrad's ask/tell, `batch_size` candidates per "
        "generation (needs Nevergrad: pip install 'evocamp[nevergrad]')",
        reference="Rapin & Teytaud 2018 (Nevergrad); nevergrad 1.0.12",
        defaults={"optimizer": "NGOpt", "batch_size": 8, "budget": None, "num_workers": None},
        params=("optimizer", "batch_size", "budget", "num_workers"),
        cls=nevergrad.NevergradOptimizer,
        generation_size=_batch_size,
        async_refusal=None,
        extra=NEVERGRAD_EXTRA,
        rules=(_registry_name,),
        key_shapes=_NEVERGRAD_KEYS,
        takes_space=True,
    ),
)

# --- Optuna: its samplers -----------------------------------------------------------

OPTUNA = Family("optuna", "Optuna")
#: Optuna, the cmaes package of its CMA-ES sampler and the torch of its GP sampler,
#: pinned exactly.
OPTUNA_EXTRA = Extra(
    "optuna",
    requires=(
        ("optuna", (5, 0, 0), (5, 0, 1)),
        ("cmaes", (0, 13, 1), (0, 13, 2)),
        ("torch", (2, 13, 0), (2, 13, 1)),
    ),
    numeric=("optuna", "cmaes", "torch"),
)

_OPTUNA_TYPES = (
    AlgorithmType(
        name="optuna",
        family=OPTUNA,
        summary="one of Optuna's samplers (`sampler`: tpe, cmaes, gp, random, qmc) through "
        "an in-memory study's ask/tell, `batch_size` trials per generation (needs Optuna: "
        "pip install 'evocamp[optuna]')",
        reference="Akiba et al. 2019 (Optuna); optuna 5.0",
        defaults={"sampler": "tpe", "batch_size": 8},
        params=("sampler", "batch_size"),
        cls=optuna.OptunaSampler,
        generation_size=_batch_size,
        needs_bounds=True,
        takes_space=True,
        async_refusal=None,
        extra=OPTUNA_EXTRA,
        key_shapes={
            "sampler": {
                "enum": list(optuna.SAMPLERS),
                "description": "Optuna's sampler (optuna): " + ", ".join(optuna.SAMPLERS) + ".",
            }
        },
    ),
)

#: Every type of every family from another library, in the order the documentation
#: lists them.
LIBRARY_TYPES: tuple[AlgorithmType, ...] = (*_PYCMA_TYPES, *_NEVERGRAD_TYPES, *_OPTUNA_TYPES)
