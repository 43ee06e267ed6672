"""Run states (checkpoints) on disk: a :class:`~evocamp.model.state.RunState` written and
read back.

Kept checkpoints (``checkpoints/gen_<g>.h5``) and working states (``work/state_<g>.h5``)
share one format. A *light* working state (shard mode, between kept generations)
leaves out ``/archive`` and ``/optimizer``: :mod:`evocamp.loop.state_cache` finds
them in a node-local cache or rebuilds them. A compact QD batch's shards read their
parents from the window's states (:class:`StoredElites`). This module reads and writes files only;
it calls nothing above the files layer.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

from evocamp.base.errors import CorruptFileError, OptimizerError
from evocamp.base.plugins import describe_import_failure, import_plugin
from evocamp.files.archive import write_archive_group, write_best_group, write_inserted_group
from evocamp.files.hdf5 import (
    SCHEMA_VERSION,
    atomic_h5,
    open_for_reading,
    write_dataset,
    write_identity,
)
from evocamp.files.kept_archive import delta_base, elite_rows, is_delta, read_archive_table, rows_of
from evocamp.files.legacy import old_next_batch
from evocamp.files.optimizer_state import (
    own_archive_rows,
    read_optimizer_group,
    write_optimizer_group,
)
from evocamp.model.metrics import METRIC_DTYPE, as_metric_rows
from evocamp.model.protocol import ELITES
from evocamp.model.runspec import Run, is_plugin, run_label
from evocamp.model.state import RunState


def write_state(
    path: str | Path,
    state: RunState,
    *,
    run: Run,
    light: bool = False,
    attrs: dict | None = None,
    full_every: int = 1,
    window: dict | None = None,
) -> None:
    """Write a run state (checkpoint) atomically; durably (the folder fsynced too) but
    a light one, which a rerun of its tell recomputes bit for bit.

    Parameters
    ----------
    path : str or Path
        The file.
    state : RunState
        The state.
    run : Run
        Its run (the family named in ``/optimizer``).
    light : bool
        Write a *light* state: everything but ``/archive`` and ``/optimizer``; the
        elites its tell changed in ``/inserted`` when the optimizer noted them (a
        compact QD batch's parents are read from them, :class:`StoredElites`).
    attrs : dict, optional
        More file attributes (what the state cache needs to find or rebuild them).
    full_every : int
        A kept checkpoint's ``checkpoint_full_every``: above 1, its archive is written
        as the cells changed since the kept checkpoint before it in the same folder
        when that one allows (:func:`~evocamp.files.kept_archive.delta_base`), with
        ``/archive_cells`` either way; 1 (and for working states): in full.
    window : dict, optional
        A light state's window (:func:`window_after`): which state holds each elite
        changed since the window's whole state, stored with ``/inserted``.
    """
    with atomic_h5(path, durable=not light) as handle:
        write_identity(handle, state.spec, kind="state", generation=state.generation)
        handle.attrs["run_spec"] = json.dumps(state.spec, sort_keys=True)
        handle.attrs["finished_at"] = state.finished_at
        handle.attrs["numerics"] = json.dumps(state.numerics, sort_keys=True)
        for name, value in (attrs or {}).items():
            handle.attrs[name] = value
        elites = base = None
        if not light and state.archive is not None:
            base = delta_base(
                path, spec=state.spec, generation=state.generation, full_every=full_every
            )
            elites = write_archive_group(
                handle, state.archive, state.spec, cells=full_every > 1, base=base
            )
        write_best_group(handle, state.best)
        inserted = getattr(state.optimizer, "inserted", None)
        if light and inserted is not None and state.archive is not None:
            write_inserted_group(handle, state.optimizer.parent_archive, inserted)
            if window is not None:
                _write_window(handle["inserted"], window)
        if not light:
            write_optimizer_group(
                handle,
                optimizer=state.optimizer,
                archive=state.archive,
                next_batch=state.next_batch,
                family=run.algorithm.family.name,
                elites=elites,
                cells=full_every > 1 and state.archive is not None,
                base=base,
            )
        batch = handle.create_group("next_batch")
        batch.attrs["size"] = len(state.next_seeds)
        for name in sorted(state.next_batch):
            write_dataset(batch, name, state.next_batch[name])
        write_dataset(handle, "next_seeds", state.next_seeds)
        write_dataset(handle, "metrics_window", state.metrics_window.astype(METRIC_DTYPE))


def holds_elites(path: str | Path) -> bool:
    """Whether a state file gives every elite of its run's archive: a whole state, or a
    light one with ``/inserted`` (the elites changed since the state it was told from,
    which gives the rest)."""
    with h5py.File(path, "r") as handle:
        return not is_light(handle) or "inserted" in handle


def window_after(told_from: str | Path, *, output: str | Path, inserted) -> dict | None:
    """The window of the light state ``output`` told from ``told_from``, whose tell
    changed the elites of ``inserted``: for every cell changed since the window's whole
    state (``cells``, sorted), which of the window's light states holds its elite now
    (``holders``, indices into ``files``, paths relative to ``output``'s folder, the
    first ``output`` itself), and the whole state holding the others (``whole``).
    ``None`` after a light state without a window (written by an earlier version)."""
    told_from, output = Path(told_from), Path(output)
    with open_for_reading(told_from, what="checkpoint") as handle:
        if not is_light(handle):
            holder, whole = {}, told_from
        else:
            group = handle.get("inserted")
            if group is None or "window_cells" not in group:
                return None
            files = [told_from.parent / name for name in json.loads(group.attrs["window_files"])]
            holder = dict(
                zip(
                    group["window_cells"][()].tolist(),
                    (files[index] for index in group["window_holder"][()].tolist()),
                    strict=True,
                )
            )
            whole = told_from.parent / str(group.attrs["window_whole"])
    holder.update(dict.fromkeys(np.asarray(inserted, dtype=np.int64).tolist(), output))
    named = {os.path.normpath(path) for path in holder.values()} - {os.path.normpath(output)}
    paths = [os.path.normpath(output), *sorted(named)]
    index = {path: position for position, path in enumerate(paths)}
    cells = np.array(sorted(holder), dtype=np.int64)
    return {
        "cells": cells,
        "holders": np.array(
            [index[os.path.normpath(holder[cell])] for cell in cells.tolist()], dtype=np.int64
        ),
        "files": [os.path.relpath(path, output.parent) for path in paths],
        "whole": os.path.relpath(whole, output.parent),
    }


def _write_window(group: h5py.Group, window: dict) -> None:
    """Store a light state's window (:func:`window_after`) in its ``/inserted``."""
    write_dataset(group, "window_cells", window["cells"])
    write_dataset(group, "window_holder", window["holders"])
    group.attrs["window_files"] = json.dumps(window["files"])
    group.attrs["window_whole"] = window["whole"]


class StoredElites:
    """The elites of a run's archive after a state's generation, read from disk by cell
    (:data:`~evocamp.model.protocol.ELITES` of a shard's batch, an
    :class:`~evocamp.model.protocol.ElitesByCell`).

    A whole state holds them in ``/archive`` (a kept checkpoint may hold them as a
    delta chain, :func:`~evocamp.files.kept_archive.elite_rows`); a light one holds in
    ``/inserted`` those its generation changed, and the states before it the rest, back
    to the window's whole state (``light_previous``). Only the rows of the cells asked
    for are read. With ``own_archive`` (novelty search,
    :attr:`~evocamp.model.runspec.Run.parents_in_own_archive`) the cells are entries of
    the archive the emitters learn on, which a whole state holds in
    ``/optimizer/rows/archive`` (:func:`~evocamp.files.optimizer_state.own_archive_rows`)
    and a light one's ``/inserted`` as for the run's archive.
    """

    def __init__(self, path: str | Path, *, own_archive: bool = False) -> None:
        self.path = Path(path)
        self.own_archive = own_archive

    def __getitem__(self, cells) -> np.ndarray:
        cells = np.asarray(cells, dtype=np.int64)
        found, current = self._through_window(cells) or self._through_chain(cells)
        if len(found) < len(cells):
            absent = next(cell for cell in cells.tolist() if cell not in found)
            raise self._missing(cells, f"cell {absent} is empty in {current}")
        return np.stack([found[cell] for cell in cells.tolist()])

    def _through_window(self, cells: np.ndarray) -> tuple[dict, Path] | None:
        """The rows of ``cells`` read from the states a light state's window names
        (:func:`window_after`): only the states that hold one of them; ``None`` for a
        whole state or a light one without a window."""
        with open_for_reading(self.path, what="checkpoint", scattered=True) as handle:
            group = handle.get("inserted") if is_light(handle) else None
            if group is None or "window_cells" not in group:
                return None
            changed, holders = group["window_cells"][()], group["window_holder"][()]
            holder = np.full(len(cells), -1, dtype=np.int64)
            if len(changed):
                position = np.minimum(np.searchsorted(changed, cells), len(changed) - 1)
                held = changed[position] == cells
                holder[held] = holders[position[held]]
            files = json.loads(group.attrs["window_files"])
            whole = Path(os.path.normpath(self.path.parent / str(group.attrs["window_whole"])))
            found = rows_of(group, cells[holder == 0])
        for index in sorted(set(holder.tolist()) - {-1, 0}):
            path = Path(os.path.normpath(self.path.parent / files[index]))
            with open_for_reading(path, what="checkpoint", scattered=True) as handle:
                if "inserted" not in handle:
                    raise self._missing(cells, f"{path} has no /inserted")
                found.update(rows_of(handle["inserted"], cells[holder == index]))
        rest = cells[holder == -1]
        if not len(rest):
            return found, whole
        rows, last = self._whole_rows(whole, rest)
        return {**found, **rows}, last

    def _whole_rows(self, path: Path, cells: np.ndarray) -> tuple[dict, Path]:
        """The rows of ``cells`` in the whole state ``path``, and the last file read (a
        delta checkpoint's chain is followed, :func:`~evocamp.files.kept_archive.elite_rows`)."""
        if self.own_archive:
            with open_for_reading(path, what="checkpoint", scattered=True) as handle:
                return own_archive_rows(handle, cells), path
        return elite_rows(path, cells)

    def _through_chain(self, cells: np.ndarray) -> tuple[dict, Path]:
        """The rows of ``cells`` read from the state and each state before it, back to
        the window's whole state (``light_previous``), until all are found."""
        found: dict[int, np.ndarray] = {}
        current = self.path
        while True:
            wanted = np.array([cell for cell in cells.tolist() if cell not in found])
            with open_for_reading(current, what="checkpoint", scattered=True) as handle:
                if not is_light(handle):
                    break
                if "inserted" not in handle:
                    raise self._missing(cells, f"{current} has no /inserted")
                found.update(rows_of(handle["inserted"], wanted))
                previous = handle.attrs.get("light_previous")
            if len(found) == len(cells) or previous is None:
                return found, current
            current = Path(os.path.normpath(current.parent / previous))
        rows, last = self._whole_rows(current, wanted)
        return {**found, **rows}, last

    def _missing(self, cells, reason: str) -> CorruptFileError:
        with open_for_reading(self.path, what="checkpoint") as handle:
            spec = json.loads(handle.attrs["run_spec"])
            generation = int(handle.attrs["generation"]) + 1
        return CorruptFileError(
            f"run {run_label(spec)}, generation {generation}: the parents of its batch "
            f"(stored in {self.path}) cannot be read: {reason}; delete the run's "
            "work/state_*.h5 and work/gen_* after its last kept checkpoint and rerun"
        )


def with_stored_elites(batch: dict, *, run: Run, path: str | Path) -> dict:
    """A batch read from the state file ``path``, with
    the elites its parents are (:class:`StoredElites`) when its format names parents
    by their cells."""
    if not run.batch_format.reads_elites:
        return batch
    return {**batch, ELITES: StoredElites(path, own_archive=run.parents_in_own_archive)}


def is_light(handle: h5py.File) -> bool:
    """Whether an open state file is a light state (no ``/optimizer`` and ``/archive``)."""
    return "optimizer" not in handle


def light_attrs(path: str | Path) -> dict | None:
    """The ``light_*`` attributes, ``generation`` and ``run_spec`` of a light state file
    (``None`` for a whole one).

    Raises
    ------
    FileNotFoundError, OSError, KeyError
        When the file is missing or unreadable (the state cache names it).
    """
    with h5py.File(path, "r") as handle:
        if not is_light(handle):
            return None
        return {
            name: value
            for name, value in handle.attrs.items()
            if name.startswith("light_") or name in ("generation", "run_spec")
        }


def read_state(path: str | Path, *, with_optimizer: bool = True) -> RunState:
    """Read a run state; raise :class:`~evocamp.base.errors.CorruptFileError` naming the
    file if it is broken.

    A light state (or ``with_optimizer=False``) comes back with ``optimizer`` and
    ``archive`` set to ``None``: :func:`evocamp.loop.state_cache.read_full_state` reads
    a state whole, whatever its kind.
    """
    with open_for_reading(path, what="checkpoint") as handle:
        spec = json.loads(handle.attrs["run_spec"])
        next_batch = stored_batch(handle)
        optimizer = archive = None
        if with_optimizer and not is_light(handle):
            _import_plugin_class(spec)
            elites = read_archive_table(path) if is_delta(handle) else None
            optimizer, archive = read_optimizer_group(
                handle, next_batch, path=path, spec=spec, elites=elites
            )
        return RunState(
            spec=spec,
            generation=int(handle.attrs["generation"]),
            optimizer=optimizer,
            archive=archive,
            next_batch=next_batch,
            next_seeds=next_seeds(handle)[()],
            metrics_window=as_metric_rows(handle["metrics_window"][()]),
            finished_at=float(handle.attrs["finished_at"]),
            best={name: data[()] for name, data in handle["best"].items()}
            if "best" in handle
            else None,
            numerics=stored_numerics(handle),
        )


def _import_plugin_class(spec: dict) -> None:
    """Import a plugin optimizer's module (its ``python_path`` first) so that its
    pickled optimizer can be read back."""
    if not is_plugin(spec):
        return
    algorithm = spec["algorithm_spec"]
    target, python_path = algorithm["class"], algorithm.get("python_path")
    try:
        import_plugin(target, python_path)
    except (ImportError, AttributeError) as error:
        failure = describe_import_failure(target, python_path, error)
        raise OptimizerError(f"run {run_label(spec)}: optimizer class {failure}") from None


def stored_numerics(handle: h5py.File) -> list[dict]:
    """The numeric provenance records of an open state file (none before evocamp
    recorded them)."""
    return json.loads(handle.attrs.get("numerics", "[]"))


def next_seeds(handle: h5py.File) -> h5py.Dataset:
    """The evaluation seeds of the next batch (read lazily)."""
    if handle.attrs["schema_version"] < SCHEMA_VERSION:  # where schema 1-2 kept them
        return old_next_batch(handle)[1]
    return handle["next_seeds"]


def stored_batch(handle: h5py.File, *, lazy: bool = False) -> dict:
    """The next batch of an open state file: arrays, or h5py datasets when ``lazy``
    (a shard reads only its rows)."""
    if handle.attrs["schema_version"] < SCHEMA_VERSION:  # schema 1-2: plain (QD only)
        group = old_next_batch(handle)[0]
    else:
        group = dict(handle["next_batch"].items())
    return group if lazy else {name: dataset[()] for name, dataset in group.items()}


@contextlib.contextmanager
def open_batch(path: str | Path, *, resolve: Callable[[dict], Run]):
    """Open a state file's next batch for a shard: yields ``(run, generation, batch,
    seeds, numerics)``, where ``run`` is ``resolve`` of its run spec
    (:func:`evocamp.catalogue.factory.resolve_run`, which the caller passes: this
    layer calls nothing above it), ``generation`` the batch's (one after the state's),
    ``batch`` and ``seeds`` are h5py datasets, read only where indexed, and
    ``numerics`` the run's provenance records so far."""
    with open_for_reading(path, what="checkpoint") as handle:
        generation = int(handle.attrs["generation"]) + 1
        batch, seeds = stored_batch(handle, lazy=True), next_seeds(handle)
        run = resolve(json.loads(handle.attrs["run_spec"]))
        batch = with_stored_elites(batch, run=run, path=path)
        yield run, generation, batch, seeds, stored_numerics(handle)


def kept_for_spec(path: str | Path, spec: dict) -> bool:
    """Whether ``path`` is a readable checkpoint written for exactly this run spec."""
    try:
        with h5py.File(path, "r") as handle:
            return json.loads(handle.attrs["run_spec"]) == spec
    except (OSError, KeyError, ValueError):
        return False
