"""The ``/optimizer`` group of a checkpoint: the optimizer and the run's archive as one
compact pickle, plus the rows of archives' per-cell arrays that are read.

Which arrays of pyribs' archives are stored compactly comes from
:mod:`evocamp.families.ribs_internals` (the one place that knows pyribs' internals): an
archive's per-cell arrays (allocated for every cell, of which only occupied cells are
ever read) and its list of occupied cells, and a density archive's preallocated
reservoir of measures.
The rows of the run's archive are the elites in ``/archive`` (not stored twice); those
of another archive (CMA-MAE's learning archive) go to ``/optimizer/rows``. A sha256
over the pickle and every row set detects a damaged file.
"""

from __future__ import annotations

import hashlib
import json
import pickle

import h5py
import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.families import ribs_internals
from evocamp.families.qd.optimizer import QDOptimizer
from evocamp.files import compact_pickle
from evocamp.files.hdf5 import write_dataset
from evocamp.files.kept_archive import (
    DeltaBase,
    changed_cells,
    learning_rows,
    rows_of,
    write_learning_table,
)
from evocamp.files.legacy import wrapped_scheduler
from evocamp.model.runspec import run_label


def partial_arrays(optimizer, archive) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Arrays of which only some rows are read, to store compactly, by owner:
    ``result`` (the run's archive, whose elites ``/archive`` holds) and, when a QD
    scheduler learns on another archive, ``archive``: CMA-MAE's grid, novelty search's
    and DNS's stores, or a density archive's reservoir of measures (``buffer``, its
    first ``n`` rows filled): :func:`evocamp.families.ribs_internals.partial_rows`."""
    arrays = {}
    if isinstance(optimizer, QDOptimizer):
        scheduler = optimizer.scheduler
        learning = scheduler.archive
        if learning is not scheduler.result_archive:
            rows = ribs_internals.partial_rows(learning)
            if rows:
                arrays["archive"] = rows
    if archive is not None:
        arrays["result"] = ribs_internals.store_rows(archive)
    return arrays


#: The row key of a store's list of occupied cells (not one row per cell).
LIST_KEY = "archive/occupied_list"


def own_archive_rows(handle: h5py.File, cells: np.ndarray) -> dict[int, np.ndarray]:
    """``{entry: solution}`` of those ``cells`` (sorted) that the archive a QD scheduler
    learns on holds in a whole state (``/optimizer/rows/archive/solution``: novelty
    search's entries, always in full), reading only their rows."""
    rows = handle["optimizer/rows"]
    group = {"index": rows["archive/solution.rows"], "solution": rows["archive/solution"]}
    return rows_of(group, cells)


def _learning_keys(optimizer, rows: dict) -> list[str]:
    """The row keys of a scheduler's learning archive when it is a grid or CVT archive
    of its own (CMA-MAE), one row per cell (its list of occupied cells left out); none
    otherwise: novelty search's, DNS's and density descent's archives replace whole
    populations or grow a buffer, where a delta by cell would not pay."""
    from ribs.archives import CVTArchive, GridArchive

    if not isinstance(optimizer, QDOptimizer):
        return []
    learning = optimizer.scheduler.archive
    if learning is optimizer.scheduler.result_archive:
        return []
    if not isinstance(learning, GridArchive | CVTArchive):
        return []
    return sorted(key for key in rows if key.startswith("archive/") and key != LIST_KEY)


def _rows_to_store(
    handle: h5py.File, rows: dict, indices: dict, *, learning: list[str], base: DeltaBase | None
) -> tuple[dict, dict]:
    """The rows to store and their cells, by key: all of them, but for the learning
    archive's ``learning`` keys only those changed since ``base`` when it has a table
    of its learning archive (``/optimizer`` then gets ``learning_delta``, and
    ``rows/archive.emptied`` the cells emptied); writes the learning archive's table."""
    rows, indices = dict(rows), dict(indices)
    if not learning:
        return rows, indices
    cells = indices[learning[0]]
    digests = write_learning_table(
        handle, {key.split("/", 1)[1]: rows[key] for key in learning}, cells
    )
    if base is None or base.learning is None:
        return rows, indices
    changed = changed_cells(cells, digests, base=base.learning)
    for key in learning:
        rows[key], indices[key] = rows[key][changed], cells[changed]
    write_dataset(
        handle["optimizer/rows"], "archive.emptied", np.setdiff1d(base.learning[0], cells)
    )
    handle["optimizer"].attrs["learning_delta"] = True
    return rows, indices


def shared_batch(batch: dict) -> dict[str, np.ndarray]:
    """The batch's arrays as the compact pickle refers to them (``next_batch``: a plain
    batch's solutions, as in version 2; ``next_batch/<name>``: a compact batch's arrays,
    e.g. an ES centre that equals the optimizer's own, stored once)."""
    if set(batch) == {"solutions"}:
        return {"next_batch": batch["solutions"]}
    return {f"next_batch/{name}": np.asarray(values) for name, values in batch.items()}


def _digest(blob: bytes, rows: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256(blob)
    for key in sorted(rows):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(rows[key]).tobytes())
    return digest.hexdigest()


def write_optimizer_group(
    handle: h5py.File,
    *,
    optimizer,
    archive,
    next_batch: dict,
    family: str,
    elites: np.ndarray | None = None,
    cells: bool = False,
    base: DeltaBase | None = None,
) -> None:
    """Write ``/optimizer`` (after ``/archive``, whose elites it refers to: ``elites``,
    their cells, sorted). A kept checkpoint of a run with deltas (``cells``) also gets
    the table of a learning archive (CMA-MAE's grid or CVT), and with a ``base``
    that has one stores only the learning rows changed since it
    (:mod:`evocamp.files.kept_archive`)."""
    rows = {}
    for name, fields in partial_arrays(optimizer, archive).items():
        for field, (array, indices) in fields.items():
            rows[id(array)] = (f"{name}/{field}", indices)
    compact = compact_pickle.dump((optimizer, archive), rows=rows, shared=shared_batch(next_batch))
    indices = dict(rows.values())
    group = handle.create_group("optimizer")
    group.attrs["family"] = family
    group.attrs["class"] = f"{type(optimizer).__module__}:{type(optimizer).__qualname__}"
    write_dataset(group, "pickle", np.frombuffer(compact.blob, dtype=np.uint8))
    stored = group.create_group("rows")
    learning = _learning_keys(optimizer, compact.rows) if cells else []
    stored_rows, stored_indices = _rows_to_store(
        handle, compact.rows, indices, learning=learning, base=base
    )
    for key in sorted(compact.rows):
        store, field = key.split("/", 1)
        if store == "result" and field != "occupied_list":
            # The elites in /archive, sorted by cell index: the same rows.
            if not np.array_equal(elites, indices[key]):
                raise RuntimeError(f"/archive does not hold the rows of {key}")
            continue
        write_dataset(stored, key, stored_rows[key])
        write_dataset(stored, f"{key}.rows", stored_indices[key])
    group.attrs["row_keys"] = json.dumps(sorted(compact.rows))
    group.attrs["sha256"] = _digest(compact.blob, compact.rows)


def read_optimizer_group(
    handle: h5py.File, batch: dict, *, path, spec: dict, elites: dict | None = None
):
    """Unpickle the optimizer and archive of a checkpoint, checking the digest.

    Checkpoints before version 3 (QD only) hold the pyribs scheduler alone. A plugin's
    module must be importable (the caller imports it first). ``elites``: the run's
    archive when ``/archive`` does not hold it (a kept checkpoint's delta chain, read).
    """
    group = handle["optimizer"]
    version = handle.attrs["schema_version"]
    blob = group["pickle" if version >= 3 else "scheduler"][()].tobytes()
    if version == 1:  # a plain pickle
        _check_digest(hashlib.sha256(blob).hexdigest(), handle, path=path, spec=spec)
        return wrapped_scheduler(pickle.loads(blob))
    keys = json.loads(group.attrs["row_keys"])
    stored = {key: _stored_rows(handle, key, elites) for key in keys}
    if group.attrs.get("learning_delta", False):
        learning = [key for key in keys if key.startswith("archive/") and key != LIST_KEY]
        stored.update(learning_rows(path, learning))
    _check_digest(
        _digest(blob, {key: rows for key, (rows, _) in stored.items()}),
        handle,
        path=path,
        spec=spec,
    )
    loaded = compact_pickle.load(
        blob,
        rows=lambda key: stored[key][0],
        row_indices=lambda key: stored[key][1],
        shared=shared_batch(batch),
    )
    return loaded if version >= 3 else wrapped_scheduler(loaded)


def _check_digest(digest: str, handle: h5py.File, *, path, spec: dict) -> None:
    if digest != handle["optimizer"].attrs["sha256"]:
        raise CorruptFileError(
            f"checkpoint {path} (run {run_label(spec)}, generation "
            f"{int(handle.attrs['generation'])}): the optimizer state does not match its "
            "checksum; delete the file and rerun to recompute it"
        )


def _stored_rows(handle: h5py.File, key: str, elites: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """The stored rows of ``key`` (``store/field``) and the row indices they belong to
    (the run's archive's: ``elites``, else ``/archive``)."""
    rows = handle["optimizer/rows"]
    if key in rows:
        return rows[key][()], rows[f"{key}.rows"][()]
    field = key.split("/", 1)[1]
    archive = handle["archive"] if elites is None else elites
    return archive[field][()], archive["index"][()]
