"""The run object: a run spec resolved once per step.

The run spec stays a JSON dict on disk (stored verbatim in every checkpoint, compared
to match kept checkpoints to runs, its digests recorded); a step reads it, and
:func:`evocamp.catalogue.factory.resolve_run` resolves it once into a :class:`Run`,
which the step passes down instead of the dict: its catalogue entries, its batch
format, its failure policy and its evaluation settings are looked up there and
nowhere else. The class is here, below the files layer, so that the files layer reads
what it needs of the catalogue from it and never calls up into the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evocamp.model.protocol import BatchFormat
from evocamp.model.runspec import FailurePolicy


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
    batch_format: BatchFormat
    failure_policy: FailurePolicy
    repeats: int
    measure_dim: int
    stored_fields: tuple[str, ...]
    parents_in_own_archive: bool
    packages: tuple[str, ...]
    plugin: bool
    evaluator: Callable | None = None
