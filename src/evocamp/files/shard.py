"""Shard files (``work/gen_<g>/shard_<s>.h5``): one shard's evaluation results."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.files.hdf5 import SCHEMA_VERSION, atomic_h5, open_for_reading, write_dataset

#: Status of an evaluated solution: evaluated, failed (raised, non-finite or wrong
#: outputs), crashed (its process died), timed out (killed past ``evaluation.timeout``).
STATUS = {"ok": 0, "failed": 1, "crashed": 2, "timed_out": 3}
#: The names of :data:`STATUS`, by code.
STATUS_NAMES = tuple(STATUS)
#: The dtype of a solution's ``attempts`` (times it was evaluated, retries included).
ATTEMPTS_DTYPE = np.uint32


@dataclass
class ShardResult:
    """Evaluation results of one shard (a contiguous slice of a generation's batch)."""

    generation: int
    #: ``None`` for an asynchronous evaluation (a slot's, not a shard's).
    shard: int | None
    start: int
    stop: int
    objective: np.ndarray
    measures: np.ndarray
    eval_seconds: np.ndarray
    extra: dict
    #: The evaluated solutions, when the shard proposed them (``proposes_in_shards``).
    solutions: np.ndarray | None = None
    #: Seconds the shard spent proposing (``evocamp.model.metrics.SHARD_STATS``).
    stats: dict = dataclasses.field(default_factory=dict)
    #: The numeric environment that evaluated it (:func:`evocamp.model.numerics.environment`;
    #: ``None`` in shard files written before evocamp recorded it).
    numerics: dict | None = None
    #: Each solution's :data:`STATUS` (``None``: every one evaluated); a failed
    #: solution's rows are NaN.
    status: np.ndarray | None = None
    #: The failure message of each failed solution, by its index in the batch.
    messages: dict = dataclasses.field(default_factory=dict)
    #: Times each solution was evaluated (``None``: once each; a retry adds one).
    attempts: np.ndarray | None = None
    #: Seconds each solution's failed attempts took (``None``: none failed).
    failed_seconds: np.ndarray | None = None


def write_shard(path: str | Path, result: ShardResult) -> None:
    """Write a shard's results atomically (not durably: a rerun recomputes them)."""
    with atomic_h5(path, durable=False) as handle:
        handle.attrs["schema_version"] = SCHEMA_VERSION
        handle.attrs["kind"] = "shard"
        for key in ("generation", "shard", "start", "stop"):
            handle.attrs[key] = getattr(result, key)
        write_dataset(handle, "objective", result.objective)
        write_dataset(handle, "measures", result.measures)
        write_dataset(handle, "eval_seconds", result.eval_seconds)
        extra = handle.create_group("extra")
        for name in sorted(result.extra):
            write_dataset(extra, name, result.extra[name])
        if result.solutions is not None:
            write_dataset(handle, "solutions", result.solutions)
        for name, value in sorted(result.stats.items()):
            handle.attrs[f"stat_{name}"] = value
        if result.numerics is not None:
            handle.attrs["numerics"] = json.dumps(result.numerics, sort_keys=True)
        if result.status is not None:
            write_dataset(handle, "status", result.status)
            handle.attrs["messages"] = json.dumps({str(k): v for k, v in result.messages.items()})
        for name in ("attempts", "failed_seconds"):
            if getattr(result, name) is not None:
                write_dataset(handle, name, getattr(result, name))


def read_shard(path: str | Path) -> ShardResult:
    """Read a shard file."""
    with open_for_reading(path, what="shard") as handle:
        attrs = dict(handle.attrs.items())  # each attribute read once
        names = set(handle)
        return ShardResult(
            generation=int(attrs["generation"]),
            shard=int(attrs["shard"]),
            start=int(attrs["start"]),
            stop=int(attrs["stop"]),
            objective=handle["objective"][()],
            measures=handle["measures"][()],
            eval_seconds=handle["eval_seconds"][()],
            extra={name: data[()] for name, data in handle["extra"].items()},
            solutions=handle["solutions"][()] if "solutions" in names else None,
            stats={
                name.removeprefix("stat_"): float(value)
                for name, value in attrs.items()
                if name.startswith("stat_")
            },
            numerics=json.loads(attrs["numerics"]) if "numerics" in attrs else None,
            status=handle["status"][()] if "status" in names else None,
            messages={int(k): v for k, v in json.loads(attrs.get("messages", "{}")).items()},
            attempts=handle["attempts"][()] if "attempts" in names else None,
            failed_seconds=handle["failed_seconds"][()] if "failed_seconds" in names else None,
        )
