"""Kept evaluations: one row per evaluated solution (``evaluations.h5``).

A block of rows (:class:`EvaluationRows`) holds what a generation's files already
hold: the seeds and batch of the state it was asked in, and the shard results. Rows
reach the shared filesystem once, in the file of their window
(``evaluations/segment_<g>.h5``, :func:`record_window_rows`, which writes it with
:func:`record_evaluations`). When the run's last window is recorded,
``evaluations.h5`` is written as an index of the window files
(:mod:`evocamp.files.evaluation_index`: HDF5 virtual datasets, a few kilobytes, no
second copy of the rows); only when the windows interleave, or an ``evaluations.h5``
written by an earlier version holds rows of its own, are the rows merged into it and
the window files removed. The paths are :class:`evocamp.model.layout.RunFolder`'s.
In shard mode the tell writes no rows: ``keep`` builds its window's rows from the
window's shard files and states before it prunes them
(:func:`evocamp.executors.steps.stored_rows`, reads only), and ``finalise`` the last
window's; Dask and asynchronous modes make them in their segment job
(:func:`evocamp.loop.engine.tell` with ``record``) and record them before the job
writes its checkpoint.

Recording is keyed by generation: the rows of a generation replace the rows of the
same generation already in the file, rows of other generations are kept, and a file
written for another run spec is replaced. A step killed and run again therefore
records the same rows once, never twice, and never loses any (every write is atomic).
Rows are reproducible (but ``eval_seconds``, a measured time).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from evocamp.files.evaluation_index import (
    IndexPlan,
    check_windows,
    indexed_windows,
    is_index,
    plan,
    write_index_group,
)
from evocamp.files.hdf5 import atomic_h5, open_for_reading, write_dataset, write_identity
from evocamp.model.layout import RunFolder
from evocamp.model.runspec import Run

#: Name of the group (state files) and of the file kind (``kind`` attribute).
GROUP = "evaluations"
#: Root dataset of an evaluations file holding its failure messages (JSON), if any.
FAILURES = "failures"
#: Columns measured in seconds: they differ between runs of the same campaign.
TIMING_FIELDS = ("eval_seconds",)


def keeps_noise_seeds(run: Run) -> bool:
    """Whether a run's rows keep each offspring's noise seed instead of the solution:
    types whose batches are a centre and noise seeds (OpenAI-ES, SNES), from which the
    offspring regenerate (their entry's ``noise_seed_rows``)."""
    return run.algorithm.noise_seed_rows


@dataclass(frozen=True)
class StorageSettings:
    """What to keep of every evaluation (the configuration's ``storage`` keys; not the
    ``evaluation`` section, which is the failure policy, repeats and re-evaluation).

    Attributes
    ----------
    keep : bool or "auto"
        Keep every evaluation; ``auto``: for Bayesian optimisation, and for runs
        whose ``evaluations.h5`` is estimated to stay under ``auto_max_mb``.
    max_solution_params : int
        Store the solutions themselves when they have at most this many parameters
        (evolution strategies store the noise seed instead, whatever the size).
    auto_max_mb : float
        The size bound of ``auto``, in MB (10^6 bytes).
    """

    keep: bool | str = "auto"
    max_solution_params: int = 100
    auto_max_mb: float = 100.0

    @classmethod
    def from_config(cls, config: dict) -> StorageSettings:
        """The settings of a validated campaign configuration."""
        storage = config.get("storage") or {}
        keep = storage.get("keep_evaluations", "auto")
        return cls(
            keep={"true": True, "false": False}.get(keep, keep) if isinstance(keep, str) else keep,
            max_solution_params=int(storage.get("max_solution_params", 100)),
            auto_max_mb=float(storage.get("auto_max_mb", 100.0)),
        )

    def to_json(self) -> str:
        """The settings as the ``storage`` keys, in JSON (the step settings carry them:
        :class:`~evocamp.loop.step_settings.StepSettings`)."""
        return json.dumps(
            {
                "storage": {
                    "keep_evaluations": self.keep,
                    "max_solution_params": self.max_solution_params,
                    "auto_max_mb": self.auto_max_mb,
                },
            },
            sort_keys=True,
        )

    def stores_solutions(self, run: Run) -> bool:
        """Whether the rows of this run hold the solutions (else ES's noise seeds, or
        nothing)."""
        if keeps_noise_seeds(run):
            return False
        return run.spec["domain_spec"]["solution_dim"] <= self.max_solution_params

    def row_bytes(self, run: Run) -> int:
        """Bytes of one row: generation, index, seed, objective, seconds, measures,
        extra fields and the solution (or noise seed)."""
        values = 5 + run.measure_dim + len(run.stored_fields)
        if keeps_noise_seeds(run):
            values += 1
        elif self.stores_solutions(run):
            values += run.spec["domain_spec"]["solution_dim"]
        return 8 * values

    def for_run(
        self, run: Run, *, generation_size: int, total: int | None
    ) -> StorageSettings | None:
        """These settings when the run keeps its evaluations (:meth:`keeps`), else
        ``None``: what :func:`evocamp.loop.engine.tell` takes as ``record``."""
        return self if self.keeps(run, generation_size=generation_size, total=total) else None

    def keeps(self, run: Run, *, generation_size: int, total: int | None) -> bool:
        """Whether a run keeps its evaluations (``total``: its generations, ``None``
        when unknown, which ``auto`` treats as too many but for BO)."""
        if self.keep != "auto":
            return bool(self.keep)
        if run.algorithm.keeps_evaluations:
            return True
        if total is None:
            return False
        return total * generation_size * self.row_bytes(run) <= self.auto_max_mb * 1e6


@dataclass
class EvaluationRows:
    """Evaluated solutions, one row each, in (generation, index) order.

    Attributes
    ----------
    generation, index : numpy.ndarray
        int64: the generation and the solution's index in its batch.
    seed : numpy.ndarray
        uint64: the evaluation seed the function received.
    objective : numpy.ndarray
        float64 (n,).
    measures : numpy.ndarray
        float64 (n, measure_dim).
    extra : dict of str to numpy.ndarray
        The domain's ``extra_fields``, float64 (n,) each.
    eval_seconds : numpy.ndarray
        float64 (n,): wall time of the evaluation call per solution.
    solution : numpy.ndarray or None
        float64 (n, solution_dim), when stored (``evaluations.solution_params``).
    noise_seed : numpy.ndarray or None
        uint64 (n,): evolution strategies' noise seed of each offspring.
    status : numpy.ndarray or None
        uint8 (n,): each evaluation's :data:`~evocamp.files.shard.STATUS` (0 evaluated;
        a failed one's objective and measures are NaN); ``None`` in files written
        before evocamp recorded it.
    failures : dict of (int, int) to str
        The message of each failed evaluation, by (generation, index).
    attempts : numpy.ndarray or None
        uint32 (n,): times each solution was evaluated (``on_failure: retry``: 1 + its
        retries); ``None`` in files written before evocamp recorded it.
    batch : dict of str to numpy.ndarray
        Per generation (axis 0, one entry per value of ``batch["generation"]``): what
        regenerates the solutions of a compact batch with the noise seeds (ES:
        ``centre``, ``sigma``, ``bounds``); empty otherwise.
    """

    generation: np.ndarray
    index: np.ndarray
    seed: np.ndarray
    objective: np.ndarray
    measures: np.ndarray
    extra: dict
    eval_seconds: np.ndarray
    solution: np.ndarray | None = None
    noise_seed: np.ndarray | None = None
    batch: dict = field(default_factory=dict)
    status: np.ndarray | None = None
    failures: dict = field(default_factory=dict)
    attempts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.generation)

    def generations(self) -> np.ndarray:
        """The distinct generations of the rows, ascending."""
        return np.unique(self.generation)

    def select(self, keep: np.ndarray) -> EvaluationRows:
        """The rows where ``keep`` (a boolean mask) holds, with their generations' batch
        entries."""
        kept_generations = np.unique(self.generation[keep])
        in_batch = (
            np.isin(self.batch["generation"], kept_generations) if self.batch else slice(None)
        )
        return EvaluationRows(
            generation=self.generation[keep],
            index=self.index[keep],
            seed=self.seed[keep],
            objective=self.objective[keep],
            measures=self.measures[keep],
            extra={name: values[keep] for name, values in self.extra.items()},
            eval_seconds=self.eval_seconds[keep],
            solution=None if self.solution is None else self.solution[keep],
            noise_seed=None if self.noise_seed is None else self.noise_seed[keep],
            batch={name: values[in_batch] for name, values in self.batch.items()},
            status=None if self.status is None else self.status[keep],
            failures=_failures_of(self.failures, self.generation[keep], self.index[keep]),
            attempts=None if self.attempts is None else self.attempts[keep],
        )


def concatenate(blocks: list[EvaluationRows]) -> EvaluationRows | None:
    """Blocks joined and sorted by (generation, index); ``None`` for no blocks.

    A generation found in several blocks is taken from the last of them (blocks hold
    whole generations). Optional columns are kept only when every block has them.
    """
    blocks = [block for block in blocks if block is not None and len(block)]
    if not blocks:
        return None
    held = [block.generations() for block in blocks]
    latest = {}
    for number, generations in enumerate(held):
        for generation in generations:
            latest[int(generation)] = number
    if len(latest) < sum(len(generations) for generations in held):  # some held twice
        blocks = [
            block.select(
                np.isin(block.generation, [g for g, owner in latest.items() if owner == number])
            )
            for number, block in enumerate(blocks)
        ]
        blocks = [block for block in blocks if len(block)]

    def joined(name: str):
        parts = [getattr(block, name) for block in blocks]
        return None if any(part is None for part in parts) else np.concatenate(parts)

    extra_names = sorted(set.intersection(*(set(block.extra) for block in blocks)))
    batch_names = sorted(set.intersection(*(set(block.batch) for block in blocks)))
    rows = EvaluationRows(
        generation=joined("generation"),
        index=joined("index"),
        seed=joined("seed"),
        objective=joined("objective"),
        measures=joined("measures"),
        extra={n: np.concatenate([b.extra[n] for b in blocks]) for n in extra_names},
        eval_seconds=joined("eval_seconds"),
        solution=joined("solution"),
        noise_seed=joined("noise_seed"),
        batch={n: np.concatenate([b.batch[n] for b in blocks]) for n in batch_names},
        status=joined("status"),
        failures={key: text for block in blocks for key, text in block.failures.items()},
        attempts=joined("attempts"),
    )
    order = np.lexsort((rows.index, rows.generation))
    if np.array_equal(order, np.arange(len(order))):  # in order already (a segment's)
        return rows
    return _reordered(rows, order)


def _reordered(rows: EvaluationRows, order: np.ndarray) -> EvaluationRows:
    batch = rows.batch
    if batch:
        batch_order = np.argsort(batch["generation"], kind="stable")
        batch = {name: values[batch_order] for name, values in batch.items()}
    return EvaluationRows(
        generation=rows.generation[order],
        index=rows.index[order],
        seed=rows.seed[order],
        objective=rows.objective[order],
        measures=rows.measures[order],
        extra={name: values[order] for name, values in rows.extra.items()},
        eval_seconds=rows.eval_seconds[order],
        solution=None if rows.solution is None else rows.solution[order],
        noise_seed=None if rows.noise_seed is None else rows.noise_seed[order],
        batch=batch,
        status=None if rows.status is None else rows.status[order],
        failures=rows.failures,
        attempts=None if rows.attempts is None else rows.attempts[order],
    )


_COLUMNS = ("generation", "index", "seed", "objective", "measures", "eval_seconds")
#: Columns a file may lack (kept only when every block of rows has them).
_OPTIONAL_COLUMNS = ("solution", "noise_seed", "status", "attempts")


def write_evaluations_group(parent: h5py.Group, rows: EvaluationRows) -> None:
    """Store rows as the group ``/evaluations`` of an open file (datasets without
    timestamps, so equal rows give equal bytes)."""
    group = parent.create_group(GROUP)
    group.attrs["rows"] = len(rows)
    for name in _COLUMNS:
        write_dataset(group, name, getattr(rows, name))
    for name in _OPTIONAL_COLUMNS:
        if getattr(rows, name) is not None:
            write_dataset(group, name, getattr(rows, name))
    extra = group.create_group("extra")
    for name in sorted(rows.extra):
        write_dataset(extra, name, rows.extra[name])
    if rows.batch:
        batch = group.create_group("batch")
        for name in sorted(rows.batch):
            write_dataset(batch, name, rows.batch[name])
    write_failures(parent, rows.failures)


def write_failures(parent: h5py.Group, failures: dict) -> None:
    """The failure messages, when there are any, as the JSON string dataset
    :data:`FAILURES` (``[[generation, index, message], ...]``, sorted) beside
    ``/evaluations``."""
    if failures:
        text = json.dumps([[g, i, failures[g, i]] for g, i in sorted(failures)])
        parent.create_dataset(FAILURES, data=text, dtype=h5py.string_dtype())


def read_failures(parent: h5py.Group) -> dict:
    """The failure messages :func:`write_failures` stored (none when absent)."""
    if FAILURES not in parent:
        return {}
    return {(int(g), int(i)): text for g, i, text in json.loads(parent[FAILURES].asstr()[()])}


def _failures_of(failures: dict, generation: np.ndarray, index: np.ndarray) -> dict:
    """The messages of the rows ``generation``, ``index`` among ``failures``."""
    if not failures:
        return {}
    rows = set(zip(generation.tolist(), index.tolist(), strict=True))
    return {key: text for key, text in failures.items() if key in rows}


def read_evaluations_group(parent: h5py.Group) -> EvaluationRows | None:
    """The rows stored in ``/evaluations`` of an open file (``None`` without)."""
    if GROUP not in parent:
        return None
    group = parent[GROUP]
    return EvaluationRows(
        **{name: group[name][()] for name in _COLUMNS},
        **{name: group[name][()] if name in group else None for name in _OPTIONAL_COLUMNS},
        extra={name: data[()] for name, data in group["extra"].items()},
        batch={name: data[()] for name, data in group["batch"].items()} if "batch" in group else {},
        failures=read_failures(parent),
    )


def read_evaluations(path: str | Path, *, spec: dict | None = None) -> EvaluationRows | None:
    """The rows of an evaluations file (a window file or ``evaluations.h5``).

    Parameters
    ----------
    path : str or Path
        The file.
    spec : dict, optional
        Only rows written for this run spec: ``None`` when the file was written for
        another one.

    Raises
    ------
    CorruptFileError
        When the file is broken (the message names it).
    """
    with open_for_reading(path, what="evaluations file") as handle:
        if spec is not None and json.loads(handle.attrs["run_spec"]) != spec:
            return None
        if is_index(handle):
            check_windows(handle, path=Path(path))
        return read_evaluations_group(handle)


def evaluations_run_spec(path: str | Path) -> dict:
    """The run spec an evaluations file was written for."""
    with open_for_reading(path, what="evaluations file") as handle:
        return json.loads(handle.attrs["run_spec"])


def record_evaluations(
    path: str | Path, rows: EvaluationRows | None, *, spec: dict, up_to: int | None = None
) -> EvaluationRows | None:
    """Record evaluated rows in an evaluations file, keyed by generation.

    The one function that writes evaluations files: the ``keep`` and ``finalise``
    steps call it, and so can any loop that evaluates solutions (write rows per
    checkpoint, not per evaluation: each call rewrites the file). The file is
    rewritten atomically with the union of its rows and ``rows``: the rows of a
    generation in ``rows`` replace that generation's rows in the file (a step run
    again after a kill records them once), rows of generations after ``up_to`` are
    dropped, and a file written for another run spec is replaced.

    Parameters
    ----------
    path : str or Path
        The evaluations file (created if missing).
    rows : EvaluationRows or None
        Whole generations of evaluated solutions, in any order.
    spec : dict
        The run spec (stored as the file's ``run_spec``).
    up_to : int, optional
        The last generation of the run.

    Returns
    -------
    EvaluationRows or None
        What the file holds now (``None``: nothing to record, no file written).
    """
    path = Path(path)
    existing = read_evaluations(path, spec=spec) if path.exists() else None
    if rows is None or not len(rows):
        return existing
    merged = concatenate([existing, rows])
    if merged is not None and up_to is not None:
        merged = merged.select(merged.generation <= up_to)
    if merged is None or not len(merged):
        return None
    write_evaluations_file(path, merged, spec=spec, up_to=up_to)
    return merged


def record_window_rows(
    folder: RunFolder,
    rows: EvaluationRows | None,
    *,
    spec: dict,
    generation: int,
    total: int | None,
) -> Path | None:
    """Record the rows of a window ending at ``generation`` where they are written once.

    Every step that makes a window's rows calls this (shard mode's ``keep`` and
    ``finalise``, Dask and asynchronous mode's segment jobs): the rows go to the
    window's file (``evaluations/segment_<g>.h5``); when ``generation`` is the run's
    last (``>= total``), ``evaluations.h5`` is then written as an index of every
    window file (:mod:`evocamp.files.evaluation_index`: virtual datasets, a few
    kilobytes), so every row reaches the filesystem once. Window files of another run
    spec are removed. When the windows interleave, or an ``evaluations.h5`` written
    by an earlier version holds rows of its own, the rows are merged into
    ``evaluations.h5`` instead (the window files are then removed after; a kill in
    between merges them again, keyed by generation).

    Returns
    -------
    Path or None
        The file written last (``None``: nothing to record); :func:`held` says what
        ``evaluations.h5`` holds.
    """
    window = folder.evaluation_window(generation)
    written = None
    if rows is not None and record_evaluations(window, rows, spec=spec, up_to=generation):
        written = window
    if total is not None and generation >= total:
        return folder.evaluations if _finish(folder, spec=spec, up_to=generation) else written
    return written


def indexed_window_files(path: str | Path) -> list[Path]:
    """The window files an evaluations file indexes (none: it holds its rows)."""
    with open_for_reading(path, what="evaluations file") as handle:
        return indexed_windows(handle, path=Path(path)) if is_index(handle) else []


def held(path: str | Path) -> tuple[int, str]:
    """How many rows an evaluations file holds and the generations it has none of
    (``missing_generations``: ranges such as ``1..20``), from its attributes."""
    with open_for_reading(path, what="evaluations file") as handle:
        return int(handle[GROUP].attrs["rows"]), str(handle.attrs["missing_generations"])


def _finish(folder: RunFolder, *, spec: dict, up_to: int) -> bool:
    """Write ``evaluations.h5`` for a run finalised at ``up_to``: an index of its
    window files, or their rows merged (see :func:`record_window_rows`); whether it
    holds any row."""
    windows = []
    for path in folder.evaluation_window_files():
        if evaluations_run_spec(path) == spec:
            windows.append(path)
        else:
            path.unlink()
    earlier = _earlier_rows(folder.evaluations, spec=spec)
    index = None if earlier is not None or not windows else plan(windows, up_to=up_to)
    if index is not None:
        write_evaluations_index(folder, index, spec=spec, up_to=up_to)
        return True
    blocks = [earlier, *(read_evaluations(path, spec=spec) for path in windows)]
    merged = record_evaluations(folder.evaluations, concatenate(blocks), spec=spec, up_to=up_to)
    for path in windows:
        path.unlink()
    with contextlib.suppress(OSError):
        folder.evaluation_windows.rmdir()
    return merged is not None


def _earlier_rows(path: Path, *, spec: dict) -> EvaluationRows | None:
    """The rows an existing ``evaluations.h5`` holds itself (not through an index)."""
    if not path.exists():
        return None
    with open_for_reading(path, what="evaluations file") as handle:
        if is_index(handle) or json.loads(handle.attrs["run_spec"]) != spec:
            return None
        return read_evaluations_group(handle)


def write_evaluations_index(folder: RunFolder, index: IndexPlan, *, spec: dict, up_to: int) -> None:
    """Write ``evaluations.h5`` atomically as an index of window files (see
    ``docs/hdf5-schema.md``)."""
    with atomic_h5(folder.evaluations) as handle:
        write_identity(handle, spec, kind=GROUP, generation=up_to)
        handle.attrs["run_spec"] = json.dumps(spec, sort_keys=True)
        missing = set(range(1, up_to + 1)) - {int(g) for g in index.generations}
        handle.attrs["missing_generations"] = as_ranges(sorted(missing))
        write_index_group(handle, index, folder=folder.path)
        write_failures(handle, _indexed_failures(index, up_to=up_to))


def _indexed_failures(index: IndexPlan, *, up_to: int) -> dict:
    """The failure messages of an index's windows, for the generations it presents
    (the last window holding a generation wins, as for its rows)."""
    failures = {}
    for window in index.windows:
        with open_for_reading(window, what="evaluations file") as handle:
            failures.update(
                {key: text for key, text in read_failures(handle).items() if key[0] <= up_to}
            )
    return failures


def missing_generations(rows: EvaluationRows, up_to: int) -> list[int]:
    """Generations ``1..up_to`` without rows."""
    return sorted(set(range(1, up_to + 1)) - {int(g) for g in rows.generations()})


def write_evaluations_file(
    path: str | Path, rows: EvaluationRows, *, spec: dict, up_to: int | None = None
) -> None:
    """Write an evaluations file atomically (see ``docs/hdf5-schema.md``): its
    ``generation`` is ``up_to`` (default: the last with rows), ``missing_generations``
    names the generations up to it without rows."""
    last = int(rows.generation.max()) if up_to is None else up_to
    with atomic_h5(path) as handle:
        write_identity(handle, spec, kind=GROUP, generation=last)
        handle.attrs["run_spec"] = json.dumps(spec, sort_keys=True)
        handle.attrs["missing_generations"] = as_ranges(missing_generations(rows, last))
        write_evaluations_group(handle, rows)


def as_ranges(numbers: list[int]) -> str:
    """``1..3,7``: sorted integers as ranges (empty for none)."""
    parts, start = [], None
    for position, number in enumerate(numbers):
        if start is None:
            start = number
        if position + 1 == len(numbers) or numbers[position + 1] != number + 1:
            parts.append(str(start) if start == number else f"{start}..{number}")
            start = None
    return ",".join(parts)
