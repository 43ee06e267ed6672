"""Building a run's optimizer: the class of its type (a plugin's imported and checked),
its batch format, the optional dependencies it needs, and the seeded instance."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Callable

import numpy as np

from evocamp.base.errors import OptimizerError
from evocamp.base.plugins import describe_import_failure, import_plugin
from evocamp.base.seeding import RandomStart, optimizer_seeds
from evocamp.catalogue.algorithms import ALGORITHMS, algorithm_type
from evocamp.catalogue.domains import DOMAINS, DomainType
from evocamp.catalogue.entries import AlgorithmType
from evocamp.model.protocol import (
    BatchFormat,
    batch_format_of,
    call_optimizer,
    check_methods,
)
from evocamp.model.runspec import (
    COMMAND,
    PLUGIN,
    Run,
    run_label,
    spec_run_key,
)
from evocamp.model.space import Space, SpaceEvaluation
from evocamp.tasks.programs import Program


def missing_extra(entry: AlgorithmType | DomainType) -> str | None:
    """What to install when a distribution of the algorithm type's or domain's optional
    extra (:class:`~evocamp.catalogue.entries.Extra`) is missing or of a version that
    breaks reproducibility, else ``None``."""
    if entry.extra is None:
        return None
    problems = []
    for name, low, below in entry.extra.requires:
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
    return f"{entry.name} needs {'; '.join(problems)}: pip install 'evocamp[{entry.extra.name}]'"


def run_packages(spec: dict) -> tuple[str, ...]:
    """The distributions of a run's optional extras (its domain's, then its algorithm
    type's) that decide its numbers: what its numeric provenance records after
    :data:`evocamp.model.numerics.NUMERIC_PACKAGES`
    (:func:`evocamp.model.numerics.environment`); ``()`` for every run without one."""
    return _packages(DOMAINS.get(spec["domain_spec"]["type"]), algorithm_type(spec))


def _packages(*entries: DomainType | AlgorithmType | None) -> tuple[str, ...]:
    return tuple(
        name
        for entry in entries
        if entry is not None and entry.extra is not None
        for name in entry.extra.numeric
    )


def load_evaluator(domain_spec: dict, *, local: dict | None = None) -> Callable:
    """The evaluation function of a resolved domain spec (a plugin's is imported; a
    program's, :class:`~evocamp.tasks.programs.Program`, made, with ``local``: where
    and how it runs here, from the step settings); a domain with a space's called with
    the solutions decoded into configurations
    (:class:`~evocamp.model.space.SpaceEvaluation`)."""
    if domain_spec["type"] == COMMAND:
        return Program(domain_spec, local=local)
    if domain_spec["type"] != PLUGIN:
        function = DOMAINS[domain_spec["type"]].evaluate
    else:
        function = import_plugin(domain_spec["function"], domain_spec.get("python_path"))
    if "space" in domain_spec:
        return SpaceEvaluation(function, domain_spec["space"])
    return function


def plugin_class(algorithm: dict, *, where: str) -> type:
    """Import and check a plugin optimizer class; ``where`` starts the messages (e.g.
    ``run me/sphere/seed0``).

    Raises
    ------
    OptimizerError
        When it cannot be imported, lacks ``ask``/``tell`` or has an old or broken
        batch format.
    """
    return _plugin(algorithm, where=where)[0]


def _plugin(algorithm: dict, *, where: str) -> tuple[type, BatchFormat]:
    """A plugin optimizer class, imported and checked, and its batch format."""
    target = algorithm["class"]
    try:
        cls = import_plugin(target, algorithm.get("python_path"))
    except (ImportError, AttributeError) as error:
        failure = describe_import_failure(target, algorithm.get("python_path"), error)
        raise OptimizerError(f"{where}: optimizer class {failure}") from None
    try:
        check_methods(cls, name=target)
        return cls, batch_format_of(cls, name=target)
    except OptimizerError as error:
        raise OptimizerError(f"{where}: {error}") from None


def optimizer_class(spec: dict) -> type:
    """The class of a run's optimizer (a plugin's is imported and checked)."""
    entry = algorithm_type(spec)
    if entry.cls is not None:
        return entry.cls
    return plugin_class(spec["algorithm_spec"], where=f"run {run_label(spec)}")


def resolve_run(
    spec: dict, *, evaluates: bool = False, programs: dict[str, dict] | None = None
) -> Run:
    """The run object of a run spec, resolved once per step: its catalogue entries,
    optimizer class (a plugin's imported and checked), batch format, failure policy
    and evaluation settings; with ``evaluates`` (the shard step) its domain's
    evaluation function too (:func:`load_evaluator`: a user's module is imported only
    by the steps that call it; ``programs``: the step settings' local keys of the
    campaign's command domains, by domain name).

    Raises
    ------
    OptimizerError
        When a plugin's class cannot be imported or has a broken batch format.
    """
    # The entries from the catalogue's tables, a built-in type's class and batch format
    # from its entry (made once with it), a plugin's imported and checked here; the
    # rest read from the spec by the run object's own module (Run.of).
    entry = ALGORITHMS[spec["algorithm_spec"]["type"]]
    domain = DOMAINS.get(spec["domain_spec"]["type"])
    if entry.cls is not None:
        cls, batch_kind = entry.cls, entry.batch_format
    else:
        cls, batch_kind = _plugin(spec["algorithm_spec"], where=f"run {run_label(spec)}")
    return Run.of(
        spec,
        algorithm=entry,
        domain=domain,
        optimizer_class=cls,
        batch_format=batch_kind,
        packages=_packages(domain, entry),
        evaluator=(
            load_evaluator(spec["domain_spec"], local=(programs or {}).get(spec["domain"]))
            if evaluates
            else None
        ),
    )


def owns_archive(spec: dict) -> bool:
    """Whether the optimizer's own archive is the run's (QD), else a passive one is kept."""
    return algorithm_type(spec).recipe is not None


def random_start(spec: dict) -> RandomStart:
    """The initial points of a run on a domain with ``x0: random``: uniform in the box
    its entry gives (``DomainType.random_x0``), drawn from the run's seed."""
    domain = spec["domain_spec"]
    low, high = DOMAINS[domain["type"]].random_x0
    return RandomStart(
        master_seed=int(spec["master_seed"]),
        key=tuple(int(k) for k in spec_run_key(spec)),
        low=float(low),
        high=float(high),
        dim=int(domain["solution_dim"]),
    )


def build_optimizer(spec: dict):
    """Create the seeded optimizer of a run spec.

    QD types get their pyribs scheduler (their entry's recipe); other classes are
    called with ``solution_dim``, ``x0`` (the domain's initial solution; with ``x0:
    random`` drawn from the run's seed, :func:`random_start`, and types that restart,
    ``redraws_x0``, get ``restart_x0``, the draw of each restart), ``bounds`` (``(low,
    high)`` or ``None``; ``None`` on a domain with ``bounded: false`` unless the type
    ``needs_bounds``), ``seed`` (the run's optimizer seed, from the master seed) and
    their parameters (a plugin's ``params``), a plugin's through
    :func:`~evocamp.model.protocol.call_optimizer`. On a domain with a space, ``x0`` is
    the solution of its defaults and ``space`` its parameters (types that take one).
    """
    entry = algorithm_type(spec)
    cls = optimizer_class(spec)
    missing = missing_extra(entry)
    if missing:
        raise OptimizerError(f"run {run_label(spec)}: {missing}")
    if entry.recipe is not None:
        domain = DOMAINS.get(spec["domain_spec"]["type"])
        draw = domain.initial_solutions if domain is not None else None
        return cls.from_spec(spec, recipe=entry.recipe, draw=draw)
    algorithm = spec["algorithm_spec"]
    domain = spec["domain_spec"]
    bounded = domain.get("bounded", True) or entry.needs_bounds
    common = {
        "solution_dim": domain["solution_dim"],
        "bounds": tuple(domain["bounds"]) if "bounds" in domain and bounded else None,
        "seed": optimizer_seeds(spec["master_seed"], spec_run_key(spec), 1)[0],
    }
    if domain["x0"] == "random":
        start = random_start(spec)
        common["x0"] = start(0)
        if entry.redraws_x0:
            common["restart_x0"] = start
    else:
        common["x0"] = np.full(domain["solution_dim"], domain["x0"], dtype=np.float64)
    if "space" in domain:
        common["x0"] = Space(domain["space"]).defaults()
        common["space"] = domain["space"]
    if entry.cls is None:
        params = algorithm.get("params") or {}
    else:
        params = {name: algorithm[name] for name in entry.params if name in algorithm}
    return call_optimizer(spec, 0, "__init__", cls, **common, **params)
