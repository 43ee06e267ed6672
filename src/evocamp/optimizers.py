"""The optimizer interface: how the generation loop talks to every family.

The loop (initialise, evaluate, tell, keep, finalise; shard and Dask modes) knows an
optimizer only through these methods::

    class MyOptimizer:
        def __init__(self, *, solution_dim, x0, bounds, seed, **params): ...
        def ask(self):                                # the next generation's batch
            return solutions                          # (n, solution_dim) float array,
            # or a dict of arrays: a compact description of the batch, with
        @staticmethod
        def batch_size(batch): ...                    # how many solutions it describes
        @staticmethod
        def solutions(batch, start, stop): ...        # and how a shard materialises them
        def tell(self, objective, measures, **extra): ...   # results of the whole batch
        # optional:
        proposes_in_shards = True                     # solutions() proposes (e.g. fits a
            # model per shard): shards store what they evaluated, tell gets solutions=...
        shard_modules = ("sklearn.ensemble",)         # modules Dask workers import up front
        def stats(self): return {"sigma": ...}        # extra metrics (known columns only)
        def result(self): return {"centre": ...}      # arrays stored in archive.h5 /result
        archive = None                                # a pyribs archive: the run's elites

Built-in families implement it: QD (:class:`evocamp.algorithms.QDOptimizer`, pyribs),
ES (:mod:`evocamp.es`), BO (:mod:`evocamp.bo`); a user's class is ``type: plugin`` with ``class:
"module:Class"``. The optimizer lives in the tell process (in Dask mode, the segment
process) and is pickled into every checkpoint; evaluation shards never build it: they
call the class's static ``solutions`` on the stored batch (whose values may be h5py
datasets: index them, ``[()]`` reads a whole array).
"""

from __future__ import annotations

import numpy as np

#: Algorithm types of each built-in family.
QD_TYPES = ("map_elites", "map_elites_line", "cvt_map_elites", "cma_me", "cma_mae")
ES_TYPES = ("openai_es", "snes")
BO_TYPES = ("qucb_centralised", "qucb_decentralised")
BASELINE_TYPES = ("random_search",)
#: Methods every optimizer class has.
REQUIRED_METHODS = ("ask", "tell")


class OptimizerError(RuntimeError):
    """A user's optimizer class is incomplete, raised, or returned a bad batch; the
    message names the class, the method, the run and the generation."""

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def family_of(algorithm: dict) -> str:
    """``qd``, ``es``, ``bo``, ``baseline`` or ``plugin``: the family of an algorithm entry."""
    kind = algorithm["type"]
    if kind in QD_TYPES:
        return "qd"
    if kind in ES_TYPES:
        return "es"
    if kind in BO_TYPES:
        return "bo"
    if kind in BASELINE_TYPES:
        return "baseline"
    return "plugin"


def optimizer_class(spec: dict) -> type:
    """The class of a run's optimizer (imports only what that family needs)."""
    algorithm = spec["algorithm_spec"]
    family = family_of(algorithm)
    if family == "qd":
        from evocamp.algorithms import QDOptimizer

        return QDOptimizer
    if family == "es":
        from evocamp import es

        return es.OpenAIES if algorithm["type"] == "openai_es" else es.SNES
    if family == "bo":
        from evocamp import bo

        centralised = algorithm["type"] == "qucb_centralised"
        return bo.CentralisedQUCB if centralised else bo.DecentralisedQUCB
    if family == "baseline":
        from evocamp.baselines import RandomSearch

        return RandomSearch
    from evocamp.domains import import_plugin
    from evocamp.storage import run_label

    try:
        cls = import_plugin(algorithm["class"], algorithm.get("python_path"))
    except (ImportError, AttributeError) as error:
        raise OptimizerError(
            f"run {run_label(spec)}: optimizer class {algorithm['class']} cannot be "
            f"imported: {type(error).__name__}: {error} (python_path: "
            f"{algorithm.get('python_path') or 'not set'})"
        ) from None
    missing = [name for name in REQUIRED_METHODS if not callable(getattr(cls, name, None))]
    if missing:
        raise OptimizerError(
            f"run {run_label(spec)}: optimizer class {algorithm['class']} has no method "
            f"{', '.join(repr(m) for m in missing)}; an optimizer needs ask() and "
            "tell(objective, measures, **extra)"
        )
    return cls


def has_compact_batches(cls: type) -> bool:
    """Whether a class describes its batches itself (``batch_size`` and ``solutions``)."""
    return callable(getattr(cls, "solutions", None)) and callable(getattr(cls, "batch_size", None))


#: Timings a compact batch's ``solutions`` may return beside the solutions (a dict
#: ``{"solutions": ..., "fit_seconds": ..., "propose_seconds": ...}``), per shard.
SHARD_STATS = ("fit_seconds", "propose_seconds")


def proposes_in_shards(cls: type) -> bool:
    """Whether a class's shards propose their solutions (``proposes_in_shards = True``):
    they are stored with the shard's results and given to ``tell`` as ``solutions``."""
    return has_compact_batches(cls) and bool(getattr(cls, "proposes_in_shards", False))


def proposal(cls: type, batch, start: int, stop: int) -> tuple[np.ndarray, dict]:
    """Solutions ``start..stop-1`` of a batch, as a float64 array, and the seconds spent
    making them (:data:`SHARD_STATS`: those the class reported, else the whole call
    as ``propose_seconds``; nothing for a plain batch)."""
    import time

    if not has_compact_batches(cls):
        return np.asarray(batch["solutions"][start:stop], dtype=np.float64), {}
    began = time.perf_counter()
    made = cls.solutions(batch, start, stop)
    timings = {"propose_seconds": time.perf_counter() - began}
    if isinstance(made, dict):
        reported = {name: float(made[name]) for name in SHARD_STATS if name in made}
        timings = reported or timings
        made = made["solutions"]
    return np.asarray(made, dtype=np.float64), timings


def materialise(cls: type, batch, start: int, stop: int) -> np.ndarray:
    """Solutions ``start..stop-1`` of a batch, as a float64 array."""
    return proposal(cls, batch, start, stop)[0]


def build_optimizer(spec: dict):
    """Create the seeded optimizer of a run spec.

    QD algorithms get their pyribs scheduler; ES and plugin classes are called with
    ``solution_dim``, ``x0`` (the domain's initial solution), ``bounds`` (``(low,
    high)`` or ``None``), ``seed`` (the run's optimizer seed, from the master seed)
    and their ``params``.
    """
    from evocamp.seeding import optimizer_seeds

    algorithm = spec["algorithm_spec"]
    family = family_of(algorithm)
    cls = optimizer_class(spec)
    if family == "qd":
        return cls.from_spec(spec)
    from evocamp.algorithms import spec_run_key

    domain = spec["domain_spec"]
    seed = optimizer_seeds(spec["master_seed"], spec_run_key(spec), 1)[0]
    common = {
        "solution_dim": domain["solution_dim"],
        "x0": np.full(domain["solution_dim"], domain["x0"], dtype=np.float64),
        "bounds": tuple(domain["bounds"]) if "bounds" in domain else None,
        "seed": seed,
    }
    if family == "es":
        return cls(**common, **es_params(algorithm))
    if family == "baseline":
        return cls(**common, batch_size=algorithm["batch_size"])
    if family == "bo":
        from evocamp.bo import bo_params

        return cls(**common, **bo_params(algorithm))
    return plugin_call(spec, 0, "__init__", cls, **common, **(algorithm.get("params") or {}))


def es_params(algorithm: dict) -> dict:
    """Keyword arguments of an ES class from its resolved algorithm spec."""
    names = ["popsize", "sigma"]
    if algorithm["type"] == "openai_es":
        names += ["learning_rate", "weight_decay"]
    else:
        names += ["eta_mu", "eta_sigma"]
    return {name: algorithm[name] for name in names}


def plugin_call(spec: dict, generation: int, method: str, function, *args, **kwargs):
    """Call a method of a user's optimizer; any exception becomes one
    :class:`OptimizerError` naming the class, the method, the run and the generation."""
    import traceback

    from evocamp.storage import run_label

    try:
        return function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - user code may raise anything
        raise OptimizerError(
            f"run {run_label(spec)}, generation {generation}: optimizer class "
            f"{spec['algorithm_spec']['class']}, method {method}() raised "
            f"{type(error).__name__}: {error}",
            details="".join(traceback.format_exception(error)),
        ) from None


def call_method(spec: dict, generation: int, optimizer, method: str, *args, **kwargs):
    """Call ``optimizer.<method>``; for a plugin, failures name where (:func:`plugin_call`)."""
    function = getattr(optimizer, method)
    if family_of(spec["algorithm_spec"]) != "plugin":
        return function(*args, **kwargs)
    return plugin_call(spec, generation, method, function, *args, **kwargs)


def checked_batch(spec: dict, generation: int, cls: type, asked) -> tuple[dict, int]:
    """The batch ``ask()`` returned, as a dict of arrays, and its size.

    Raises
    ------
    OptimizerError
        When a plain batch is not a finite (n, solution_dim) array, or a compact one is
        not a dict of arrays.
    """
    from evocamp.storage import run_label

    where = (
        f"run {run_label(spec)}, generation {generation}: optimizer "
        f"{spec['algorithm_spec'].get('class', spec['algorithm_spec']['type'])}, method ask()"
    )
    if isinstance(asked, dict):
        batch = {name: np.asarray(value) for name, value in asked.items()}
        if has_compact_batches(cls):
            size = plugin_call(spec, generation, "batch_size", cls.batch_size, batch)
            return batch, int(size)
        asked = batch.get("solutions")
    dim = spec["domain_spec"]["solution_dim"]
    try:
        solutions = np.asarray(asked, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise OptimizerError(f"{where} returned a non-numeric batch ({error})") from None
    if solutions.ndim != 2 or solutions.shape[1] != dim or len(solutions) == 0:
        raise OptimizerError(
            f"{where} returned a batch of shape {solutions.shape}; expected (n, {dim}) "
            f"with n >= 1 (solution_dim {dim})"
        )
    if not np.isfinite(solutions).all():
        row = int(np.flatnonzero(~np.isfinite(solutions).all(axis=1))[0])
        raise OptimizerError(f"{where} returned a batch whose solution {row} is not finite")
    return {"solutions": solutions}, len(solutions)
