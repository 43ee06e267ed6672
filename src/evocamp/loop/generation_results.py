"""A generation's shard results combined in solution-index order
(:func:`combine_shards`, checked to tile the batch): what the tell of shard mode and
Dask mode's generations fold into the run's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evocamp.base.errors import EvaluationError
from evocamp.files.shard import ATTEMPTS_DTYPE, STATUS, ShardResult
from evocamp.model.runspec import where


@dataclass(frozen=True)
class GenerationResults:
    """A generation's shard results in solution-index order."""

    objective: np.ndarray
    measures: np.ndarray
    extra: dict
    #: Seconds spent evaluating, summed over all solutions.
    eval_seconds: float
    #: Seconds spent evaluating each solution (its call's time over its chunk).
    seconds: np.ndarray
    #: The evaluated solutions, when the shards proposed them (else ``None``).
    solutions: np.ndarray | None
    #: Mean over shards of the seconds they spent proposing (``SHARD_STATS``).
    shard_stats: dict
    shards: int
    #: The distinct numeric environments that evaluated the shards (those that said).
    numerics: list
    #: Each solution's :data:`~evocamp.files.shard.STATUS` (``None``: none failed).
    status: np.ndarray | None = None
    #: The failure message of each failed solution, by index.
    messages: dict = field(default_factory=dict)
    #: Times each solution was evaluated (``None``: once each; retries add to it).
    attempts: np.ndarray | None = None
    #: Seconds spent in failed attempts (timeouts, crashes, raises), summed.
    failed_seconds: float = 0.0

    def failed(self) -> np.ndarray | None:
        """Which solutions failed (``None``: none)."""
        return None if self.status is None else self.status != STATUS["ok"]


def combine_shards(
    spec: dict, generation: int, batch: int, shards: list[ShardResult]
) -> GenerationResults:
    """Concatenate shard results in solution-index order, checking they tile the batch."""
    if len(shards) == 1 and _whole(shards[0], generation, batch):
        return _one_shard(shards[0])
    ordered = sorted(shards, key=lambda r: r.start)
    position = 0
    for result in ordered:
        if result.generation != generation or result.start != position:
            raise EvaluationError(
                f"{where(spec, generation, result.shard, None)}: shard covers solutions "
                f"{result.start}..{result.stop - 1} of generation {result.generation}, "
                f"expected to start at solution {position} of generation {generation}"
            )
        position = result.stop
    if position != batch:
        raise EvaluationError(
            f"{where(spec, generation, None, None)}: shards cover {position} of {batch} solutions"
        )
    extra_names = sorted(ordered[0].extra) if ordered else []
    proposed = [r.solutions for r in ordered if r.solutions is not None]
    stat_names = sorted({name for r in ordered for name in r.stats})
    environments = []
    for result in ordered:
        if result.numerics is not None and result.numerics not in environments:
            environments.append(result.numerics)
    return GenerationResults(
        objective=_joined([r.objective for r in ordered]),
        measures=_joined([r.measures for r in ordered]),
        extra={name: _joined([r.extra[name] for r in ordered]) for name in extra_names},
        eval_seconds=float(sum(r.eval_seconds.sum() for r in ordered)),
        seconds=_joined([r.eval_seconds for r in ordered]),
        solutions=_joined(proposed) if len(proposed) == len(ordered) else None,
        shard_stats={
            name: float(np.mean([r.stats[name] for r in ordered if name in r.stats]))
            for name in stat_names
        },
        shards=len(ordered),
        numerics=environments,
        status=_combined(ordered, "status", 0, np.uint8),
        messages={index: text for r in ordered for index, text in r.messages.items()},
        attempts=_combined(ordered, "attempts", 1, ATTEMPTS_DTYPE),
        failed_seconds=float(
            sum(r.failed_seconds.sum() for r in ordered if r.failed_seconds is not None)
        ),
    )


def _whole(result: ShardResult, generation: int, batch: int) -> bool:
    """Whether one shard result is the whole batch of ``generation``."""
    return result.generation == generation and result.start == 0 and result.stop == batch


def _one_shard(result: ShardResult) -> GenerationResults:
    """:func:`combine_shards` of a generation of one shard (as a Dask mode segment
    evaluating in its own process makes every generation): its columns as they are,
    without the loops over shards."""
    return GenerationResults(
        objective=np.asarray(result.objective),
        measures=np.asarray(result.measures),
        extra={name: np.asarray(result.extra[name]) for name in sorted(result.extra)},
        eval_seconds=float(result.eval_seconds.sum()),
        seconds=np.asarray(result.eval_seconds),
        solutions=None if result.solutions is None else np.asarray(result.solutions),
        shard_stats={name: float(np.mean([value])) for name, value in sorted(result.stats.items())},
        shards=1,
        numerics=[] if result.numerics is None else [result.numerics],
        status=None if result.status is None else np.asarray(result.status),
        messages=dict(result.messages),
        attempts=None if result.attempts is None else np.asarray(result.attempts),
        failed_seconds=(
            0.0 if result.failed_seconds is None else float(result.failed_seconds.sum())
        ),
    )


def _combined(ordered: list[ShardResult], name: str, blank: int, dtype) -> np.ndarray | None:
    """The shards' optional per-solution column ``name`` in index order (``blank`` for
    the solutions of a shard without it), ``None`` when none has it."""
    parts = [getattr(r, name) for r in ordered]
    if all(part is None for part in parts):
        return None
    return _joined(
        [
            np.full(r.stop - r.start, blank, dtype) if part is None else part
            for r, part in zip(ordered, parts, strict=True)
        ]
    )


def _joined(parts: list) -> np.ndarray:
    """The shards' arrays of one column in index order: one shard's as it is (a
    generation of one shard, as a Dask mode segment evaluating in its own process
    makes every generation, is not copied)."""
    return np.asarray(parts[0]) if len(parts) == 1 else np.concatenate(parts)
