"""The run spec: the resolved, self-contained description of one run.

A run spec is a plain JSON-compatible dict (it is stored verbatim in every
checkpoint's ``run_spec`` attribute and compared with the configuration's to decide
whether a kept checkpoint still belongs to the run)::

    {"campaign", "master_seed", "checkpoint_every", "algorithm", "domain", "seed",
     "algorithm_spec": {"type", ...every key with its default...},
     "domain_spec": {"type", "solution_dim", "measure_ranges", ...},
     "evaluation": {...}}  # only when the failure policy is not the default

:func:`evocamp.config.run_spec` makes one from a campaign; everything that fixes a
run's results is in it, and nothing that may change during its life
(``generations``; ``shards`` only where it is part of the algorithm). The helpers
here name and key a spec for every layer above.

A step resolves the spec it reads once into the **run object**, :class:`Run` (frozen:
the spec as stored, its catalogue entries, its batch format, its failure policy and
evaluation settings; :func:`evocamp.catalogue.factory.resolve_run` looks up what needs
the catalogue, :meth:`Run.of` reads the rest from the spec with the accessors here),
and passes it down instead of the dict. It lives here, below the files layer, so that
the files layer reads what it needs of the catalogue from it and never calls up into
the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from evocamp.base.seeding import run_key

#: The one spelling of "plugin" in the code: the algorithm type and family of users'
#: own optimizer classes and the domain type of their own evaluation functions
#: (``type: plugin`` in a campaign file).
PLUGIN = "plugin"
#: The domain type of programs evaluating solutions (``type: command``, docs/programs.md).
COMMAND = "command"


def run_label(spec: dict) -> str:
    """Human-readable name of a run: ``algorithm/domain/seed<k>``."""
    return f"{spec['algorithm']}/{spec['domain']}/seed{spec['seed']}"


def spec_run_key(spec: dict) -> tuple[int, int, int]:
    """The seeding key of the run a spec describes."""
    return run_key(algorithm=spec["algorithm"], domain=spec["domain"], seed=spec["seed"])


def is_plugin(spec: dict) -> bool:
    """Whether the run's optimizer is a user's class (``type: plugin``)."""
    return spec["algorithm_spec"]["type"] == PLUGIN


def optimizer_name(spec: dict) -> str:
    """The optimizer as messages name it: a plugin's ``module:Class``, else its type."""
    algorithm = spec["algorithm_spec"]
    return algorithm.get("class", algorithm["type"])


def measure_dim(domain_spec: dict) -> int:
    """Number of measures of a resolved domain spec."""
    return len(domain_spec.get("measure_ranges") or [])


#: Extra fields of a run whose evaluations are repeated (``evaluation.repeats`` > 1):
#: the standard deviation over the repeats of the objective, and of each measure
#: (``measures_std_<j>``).
OBJECTIVE_SPREAD = "objective_std"
MEASURES_SPREAD = "measures_std_"


def evaluation_repeats(spec: dict) -> int:
    """Evaluations per solution, averaged (``evaluation.repeats``; 1 when not in the spec)."""
    return int((spec.get("evaluation") or {}).get("repeats", 1))


def spread_fields(spec: dict) -> list[str]:
    """The extra fields that keep the spread of repeated evaluations (none without
    repeats): :data:`OBJECTIVE_SPREAD` and one :data:`MEASURES_SPREAD` per measure."""
    if evaluation_repeats(spec) == 1:
        return []
    measures = measure_dim(spec["domain_spec"])
    return [OBJECTIVE_SPREAD, *(f"{MEASURES_SPREAD}{j}" for j in range(measures))]


def stored_fields(spec: dict) -> list[str]:
    """Every extra field of a run's evaluations, stored with its elites and kept
    evaluations and told to its optimizer: the domain's ``extra_fields``, then
    :func:`spread_fields`."""
    return [*(spec["domain_spec"].get("extra_fields") or []), *spread_fields(spec)]


def where(
    spec: dict,
    generation: int,
    shard: int | None = None,
    index: int | None = None,
    *,
    evaluation: int | None = None,
    slot: int | None = None,
    cells: list[int] | None = None,
) -> str:
    """``run a/d/seed0, generation 5, shard 2, solution 11``: where something happened.

    Asynchronous runs number evaluations instead (``evaluation``) and run them in
    slots, not shards: ``run a/d/seed0, evaluation 17, slot 2``. The final
    re-evaluation names the elites of the archive of ``generation`` by their ``cells``
    (``-1``: the best solution of a run without an archive): ``run a/d/seed0, final
    re-evaluation (evaluation.reevaluate) of generation 5's archive, elite in cell 42``.
    """
    if cells is not None:
        return (
            f"run {run_label(spec)}, final re-evaluation (evaluation.reevaluate) of "
            f"generation {generation}'s {_elites_named(cells)}"
        )
    if evaluation is not None:
        parts = [f"run {run_label(spec)}", f"evaluation {evaluation}"]
        if slot is not None:
            parts.append(f"slot {slot}")
        return ", ".join(parts)
    parts = [f"run {run_label(spec)}", f"generation {generation}"]
    if shard is not None:
        parts.append(f"shard {shard}")
    if index is not None:
        parts.append(f"solution {index}")
    return ", ".join(parts)


def _elites_named(cells: list[int]) -> str:
    """``best solution`` (cell -1), ``archive, elite in cell 42`` or ``archive, elites
    in cells 3, 7``."""
    if list(cells) == [-1]:
        return "best solution"
    if len(cells) == 1:
        return f"archive, elite in cell {cells[0]}"
    return "archive, elites in cells " + ", ".join(str(cell) for cell in cells)


@dataclass(frozen=True)
class FailurePolicy:
    """What a run does when an evaluation fails (the campaign's ``evaluation`` keys).

    A run spec holds them under ``evaluation`` only when they differ from these
    defaults (the schema's), so the run specs of runs with the defaults are those of
    evocamp versions before the keys existed.
    """

    #: Seconds one solution's evaluation may take (``None``: no limit).
    timeout: float | None = None
    #: ``stop``, ``retry`` (crashes and timeouts) or ``discard``.
    on_failure: str = "stop"
    #: Attempts after the first under ``retry``.
    retries: int = 2
    #: What ``retry`` does when the attempts are spent: ``stop`` or ``discard``.
    after_retries: str = "stop"

    def final_action(self) -> str:
        """``stop`` or ``discard``: what a failure that is not retried leads to."""
        return self.after_retries if self.on_failure == "retry" else self.on_failure

    def attempts(self) -> int:
        """How many times a crashed or timed-out solution is evaluated at most."""
        return 1 + self.retries if self.on_failure == "retry" else 1


def failure_policy(spec: dict) -> FailurePolicy:
    """The run's :class:`FailurePolicy` (the defaults unless its spec says otherwise)."""
    stored = spec.get("evaluation") or {}  # the repeats live there too
    names = [field.name for field in fields(FailurePolicy)]
    return FailurePolicy(**{name: stored[name] for name in names if name in stored})


@dataclass(frozen=True, eq=False)
class Run:
    """A run spec resolved (:func:`evocamp.catalogue.factory.resolve_run`).

    Attributes
    ----------
    spec : dict
        The run spec as stored (never modified).
    label : str
        ``algorithm/domain/seed<k>``, how messages name the run.
    algorithm : AlgorithmType
        The catalogue entry of its algorithm type (``plugin``'s for a user's class).
    domain : DomainType or None
        The catalogue entry of its domain type (``None`` for a user's function).
    optimizer_class : type
        The optimizer's class (a plugin's imported and checked).
    batch_format : BatchFormat
        How its batches are sized and materialised.
    failure_policy : FailurePolicy
        What it does when an evaluation fails.
    repeats : int
        Evaluations per solution (``evaluation.repeats``).
    measure_dim : int
        Its domain's number of measures.
    stored_fields : tuple of str
        The extra fields its evaluations keep (the domain's, and the spread of repeats).
    parents_in_own_archive : bool
        A QD run whose emitters sample parents from an archive of their own.
    packages : tuple of str
        The distributions of its optional extras that decide its numbers, which its
        numeric provenance records (:func:`evocamp.model.numerics.environment`).
    plugin : bool
        Its optimizer class is a user's (``type: plugin``): calls into it and into its
        batch format go through :func:`evocamp.model.protocol.call_optimizer`, which
        names their failures.
    evaluator : callable or None
        Its domain's evaluation function, when the step evaluates
        (``resolve_run(spec, evaluates=True)``: the shard step); ``None`` in the other
        steps, which never import a user's evaluation module.
    """

    spec: dict
    label: str
    algorithm: Any
    domain: Any
    optimizer_class: type
    batch_format: Any  # a model.protocol.BatchFormat (the protocol reads this module)
    failure_policy: FailurePolicy
    repeats: int
    measure_dim: int
    stored_fields: tuple[str, ...]
    parents_in_own_archive: bool
    packages: tuple[str, ...]
    plugin: bool
    evaluator: Callable | None = None

    @classmethod
    def of(
        cls,
        spec: dict,
        *,
        algorithm,
        domain,
        optimizer_class: type,
        batch_format,
        packages: tuple[str, ...],
        evaluator: Callable | None = None,
    ) -> Run:
        """The run object of ``spec`` from what the catalogue resolved (its entries,
        class, batch format, packages and evaluation function; what the catalogue's
        :func:`~evocamp.catalogue.factory.resolve_run` looks up); the rest is read from
        the spec here, by this module's accessors."""
        recipe = algorithm.recipe
        return cls(
            spec=spec,
            label=run_label(spec),
            algorithm=algorithm,
            domain=domain,
            optimizer_class=optimizer_class,
            batch_format=batch_format,
            failure_policy=failure_policy(spec),
            repeats=evaluation_repeats(spec),
            measure_dim=measure_dim(spec["domain_spec"]),
            stored_fields=tuple(stored_fields(spec)),
            # Novelty search's emitters sample their parents from its novelty archive,
            # not from the run's (a whole state holds its entries in
            # /optimizer/rows/archive).
            parents_in_own_archive=bool(
                recipe is not None and recipe.result_archive and not recipe.emitters_on_result
            ),
            packages=packages,
            plugin=is_plugin(spec),
            evaluator=evaluator,
        )
