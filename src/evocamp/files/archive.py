"""``archive.h5`` and the ``/archive``, ``/best`` and ``/result`` groups: a run's elites,
its best solution and its optimizer's result, readable with h5py alone."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from evocamp.families.qd.compact import ArchiveElites
from evocamp.files.hdf5 import atomic_h5, open_for_reading, write_dataset, write_identity
from evocamp.files.kept_archive import (
    DeltaBase,
    archive_table,
    is_delta,
    read_archive_table,
    write_kept_archive,
)
from evocamp.model.numerics import is_mixed, mixed_summary


def write_archive_group(
    handle: h5py.File, archive, spec: dict, *, cells: bool = False, base: DeltaBase | None = None
) -> np.ndarray:
    """Store an archive's elites as plain datasets in ``/archive`` (readable by h5py
    alone); returns their cells.

    Elites are sorted by cell index so the layout does not depend on insertion order.
    A kept checkpoint of a run with deltas (``cells``) also gets ``/archive_cells``,
    and with a ``base`` holds only the cells changed since it, in ``/archive_delta``
    (:mod:`evocamp.files.kept_archive`).
    """
    table = archive_table(archive)
    if cells:
        group = write_kept_archive(handle, table, base=base)
    else:
        group = handle.create_group("archive")
        for field in sorted(table):
            write_dataset(group, field, table[field])
    algorithm = spec["algorithm_spec"]
    group.attrs["algorithm_type"] = algorithm["type"]
    group.attrs["cells"] = archive.cells
    group.attrs["measure_ranges"] = np.asarray(spec["domain_spec"]["measure_ranges"])
    group.attrs["learning_rate"] = float(algorithm["archive"].get("learning_rate", 1.0))
    if hasattr(archive, "centroids"):
        group.attrs["kind"] = "cvt"
        write_dataset(group, "centroids", archive.centroids)
    else:
        group.attrs["kind"] = "grid"
        group.attrs["dims"] = np.asarray(archive.dims)
    return table["index"]


def write_inserted_group(handle: h5py.File, archive, cells: np.ndarray) -> None:
    """Store the elites of ``cells`` (sorted: those a light state's tell changed) of
    ``archive`` (the one parents are sampled from: the run's, or novelty search's novelty
    archive, whose cells are its entries) in ``/inserted`` (``index``, ``solution``): with
    the window's kept checkpoint they give the elites a compact QD batch names by their
    cells."""
    group = handle.create_group("inserted")
    cells = np.asarray(cells, dtype=np.int64)
    write_dataset(group, "index", cells)
    write_dataset(
        group,
        "solution",
        ArchiveElites(archive)[cells] if len(cells) else np.empty((0, archive.solution_dim)),
    )


def write_result_group(handle: h5py.File, result: dict | None) -> None:
    """Store the arrays of an optimizer's ``result()`` (e.g. an ES centre) in ``/result``."""
    if result is None:
        return
    group = handle.create_group("result")
    for name, values in sorted(result.items()):
        write_dataset(group, name, values)


def write_best_group(handle: h5py.File, best: dict | None) -> None:
    """Store the best solution of a run without an archive in ``/best``."""
    if best is None:
        return
    group = handle.create_group("best")
    for name, values in sorted(best.items()):
        write_dataset(group, name, values)


def write_final_archive(
    path: str | Path,
    *,
    spec: dict,
    archive,
    result: dict | None,
    best: dict | None,
    generation: int,
    evaluations: int,
    numerics: list[dict] | None = None,
) -> None:
    """Write ``archive.h5``: the final elites of a run (``/archive``, when the run has an
    archive, else its best solution in ``/best``) and the optimizer's ``result()``
    arrays (``/result``; ``None``: the optimizer has none), with no wall-clock content.

    A run on a domain with a search space gets the root attribute ``space``: its
    parameters as JSON (:mod:`evocamp.model.space`), which name and type the columns
    of the solutions (categories' codes with their labels).

    A run whose steps mixed numeric environments (``numerics``, its provenance
    records: :func:`evocamp.model.numerics.is_mixed`) gets the root attributes
    ``numerics_mixed`` (true), ``numerics_summary`` (one line) and ``numerics`` (the
    records as JSON); a run under one environment gets none, so that its file is
    bitwise the same on every machine of that environment."""
    with atomic_h5(path) as handle:
        write_identity(handle, spec, kind="archive", generation=generation)
        handle.attrs["evaluations"] = evaluations
        if "space" in spec["domain_spec"]:  # the solutions' parameters: names, types, labels
            handle.attrs["space"] = json.dumps(spec["domain_spec"]["space"], sort_keys=True)
        if numerics and is_mixed(numerics):
            handle.attrs["numerics_mixed"] = True
            handle.attrs["numerics_summary"] = mixed_summary(numerics)
            handle.attrs["numerics"] = json.dumps(numerics, sort_keys=True)
        if archive is not None:
            write_archive_group(handle, archive, spec)
        write_best_group(handle, best)
        write_result_group(handle, result)


def read_archive(path: str | Path) -> dict:
    """Read the ``/archive`` group of an archive or checkpoint file as numpy arrays, or
    a kept checkpoint's delta chain (:func:`~evocamp.files.kept_archive.read_archive_table`);
    only ``attrs`` and ``file_attrs`` when the run has no archive."""
    with open_for_reading(path, what="archive") as handle:
        data = {"attrs": {}}
        if "archive" in handle:  # runs on domains without measures have none
            group = handle["archive"]
            data = {name: group[name][()] for name in group}
            data["attrs"] = dict(group.attrs)
        delta = is_delta(handle)
        file_attrs = dict(handle.attrs)
    if delta:
        data = read_archive_table(path)
    data["file_attrs"] = file_attrs
    return data


def read_best(path: str | Path) -> dict | None:
    """The ``/best`` group of an archive or checkpoint file (runs without an archive: the
    best solution evaluated, its objective and extra fields), or ``None`` without one."""
    with open_for_reading(path, what="archive") as handle:
        if "best" not in handle or "objective" not in handle["best"]:
            return None
        return {name: data[()] for name, data in handle["best"].items()}
