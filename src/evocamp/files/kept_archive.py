"""The archive of a kept checkpoint, in full or as a delta of the kept checkpoint
before it.

A whole state written with ``checkpoint_full_every`` F > 1 (a kept checkpoint, or the
working state of a window's last generation that the keep step hard-links into
``checkpoints/``) holds ``/archive_cells`` (every elite's cell and a 64-bit digest of
its row) and the root attribute ``archive_digest`` (a digest of that table). Its
archive is then either in full (``/archive``, as always) or, when the newest kept
checkpoint before it is of the same run and fewer than F - 1 deltas follow the last
full one, a *delta* (``/archive_delta``): the full rows of the cells whose row changed
since that checkpoint, the cells it emptied (``emptied``), and a reference to it (root
attributes ``delta_base``: its generation, ``delta_base_file``: its path in the run
folder, ``delta_base_digest``: its ``archive_digest``, ``delta_chain``: deltas since the
last full archive). Reading one (:func:`read_archive_table`) reads the last full
archive and applies the deltas in order, checking every link; a missing or different
link is a :class:`~evocamp.base.errors.CorruptFileError` naming the files, never a
wrong archive. A CMA-MAE scheduler's learning archive follows (:data:`LEARNING_CELLS`,
:func:`learning_rows`; :mod:`evocamp.files.optimizer_state` writes it). The final
``archive.h5`` and light states are never deltas.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.files.hdf5 import open_for_reading, write_dataset
from evocamp.model.layout import CHECKPOINT, RunFolder
from evocamp.model.runspec import run_label

#: Groups of a kept checkpoint: every elite's cell and row digest; a delta archive; the
#: table of a scheduler's learning archive (CMA-MAE), whose rows ``/optimizer/rows``
#: holds (in full, or those changed when ``/optimizer`` has ``learning_delta``).
CELLS = "archive_cells"
DELTA = "archive_delta"
LEARNING_CELLS = "optimizer/learning_cells"
#: Datasets of ``/archive`` that are not one row per elite.
NOT_PER_CELL = ("centroids",)


def archive_table(archive) -> dict[str, np.ndarray]:
    """The elites of an archive in memory, one array per field, sorted by cell index
    (so the layout does not depend on insertion order)."""
    data = archive.data()
    order = np.argsort(data["index"], kind="stable")
    return {field: np.asarray(data[field])[order] for field in sorted(data)}


def cell_digests(table: dict[str, np.ndarray]) -> np.ndarray:
    """A 64-bit blake2b digest of each elite's row (every field, by name), uint64."""
    if not len(table["index"]):
        return np.empty(0, dtype=np.uint64)
    fields = [
        np.ascontiguousarray(table[name]).reshape(len(table["index"]), -1).view(np.uint8)
        for name in sorted(table)
    ]
    rows = np.concatenate(fields, axis=1)
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little")
            for row in rows
        ],
        dtype=np.uint64,
    )


def table_digest(index: np.ndarray, digests: np.ndarray) -> str:
    """The digest of a whole archive: of its cells and their rows' digests."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(index, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(digests, dtype=np.uint64).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class DeltaBase:
    """The kept checkpoint a delta builds on: its generation, file, ``archive_digest``,
    deltas since its last full archive, and its table of cells and row digests."""

    generation: int
    path: Path
    digest: str
    chain: int
    index: np.ndarray
    digests: np.ndarray
    #: The table of its learning archive (:data:`LEARNING_CELLS`), if it has one.
    learning: tuple[np.ndarray, np.ndarray] | None = None


def delta_base(
    path: str | Path, *, spec: dict, generation: int, full_every: int
) -> DeltaBase | None:
    """The kept checkpoint a whole state of ``generation`` at ``path`` (a kept
    checkpoint, or the working state that becomes one) may be a delta of: the newest
    kept checkpoint before it in its run's ``checkpoints/``, written for the same run
    spec, with ``/archive_cells``, followed by fewer than ``full_every - 1`` deltas;
    ``None`` (write it in full) otherwise or when that file cannot be read."""
    if full_every <= 1:
        return None
    folder = RunFolder.holding(path).checkpoints
    earlier = [p for number, p in CHECKPOINT.numbered_in(folder) if number < generation]
    if not earlier:
        return None
    try:
        with h5py.File(earlier[-1], "r") as handle:
            if CELLS not in handle or json.loads(handle.attrs["run_spec"]) != spec:
                return None
            chain = int(handle.attrs.get("delta_chain", 0))
            if chain + 1 >= full_every:
                return None
            learning = None
            if LEARNING_CELLS in handle:
                learning = (
                    handle[LEARNING_CELLS]["index"][()],
                    handle[LEARNING_CELLS]["digest"][()],
                )
            return DeltaBase(
                generation=int(handle.attrs["generation"]),
                path=earlier[-1],
                digest=str(handle.attrs["archive_digest"]),
                chain=chain,
                index=handle[CELLS]["index"][()],
                digests=handle[CELLS]["digest"][()],
                learning=learning,
            )
    except (OSError, KeyError, ValueError):
        return None


def write_kept_archive(
    handle: h5py.File, table: dict[str, np.ndarray], *, base: DeltaBase | None
) -> h5py.Group:
    """Write ``/archive_cells`` and the archive's rows: all of them in ``/archive``
    without a ``base``, else the cells changed since it in ``/archive_delta``. Returns
    the group written (the caller adds the archive's attributes)."""
    index = np.asarray(table["index"], dtype=np.int64)
    digests = cell_digests(table)
    cells = handle.create_group(CELLS)
    write_dataset(cells, "index", index)
    write_dataset(cells, "digest", digests)
    handle.attrs["archive_digest"] = table_digest(index, digests)
    if base is None:
        handle.attrs["delta_chain"] = 0
        group = handle.create_group("archive")
        for field in sorted(table):
            write_dataset(group, field, table[field])
        return group
    changed = changed_cells(index, digests, base=(base.index, base.digests))
    handle.attrs["delta_base"] = base.generation
    handle.attrs["delta_base_file"] = str(base.path.relative_to(base.path.parent.parent))
    handle.attrs["delta_base_digest"] = base.digest
    handle.attrs["delta_chain"] = base.chain + 1
    group = handle.create_group(DELTA)
    for field in sorted(table):
        write_dataset(group, field, np.asarray(table[field])[changed])
    write_dataset(group, "emptied", np.setdiff1d(base.index, index).astype(np.int64))
    return group


def holds_cells(path: str | Path) -> bool:
    """Whether a state file was written as a kept checkpoint of a run with deltas
    (``/archive_cells``), full or a delta, or has no archive."""
    with h5py.File(path, "r") as handle:
        return CELLS in handle or "archive" not in handle


def changed_cells(
    index: np.ndarray, digests: np.ndarray, *, base: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """Which of the cells ``index`` (with their rows' ``digests``) are new or changed
    since the table ``base`` (cells, digests): a boolean mask."""
    before = dict(zip(base[0].tolist(), base[1].tolist(), strict=True))
    return np.array(
        [
            before.get(cell) != digest
            for cell, digest in zip(np.asarray(index).tolist(), digests.tolist(), strict=True)
        ],
        dtype=bool,
    )


def write_learning_table(
    handle: h5py.File, rows: dict[str, np.ndarray], index: np.ndarray
) -> np.ndarray:
    """Write the table of a learning archive (its rows by field, at the cells
    ``index``) in :data:`LEARNING_CELLS`; returns the rows' digests."""
    digests = cell_digests({**rows, "index": np.asarray(index, dtype=np.int64)})
    group = handle.create_group(LEARNING_CELLS)
    write_dataset(group, "index", np.asarray(index, dtype=np.int64))
    write_dataset(group, "digest", digests)
    return digests


def learning_rows(path: str | Path, keys: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The full rows of a learning archive's ``keys`` (``archive/<field>`` of
    ``/optimizer/rows``) and their cells, of a checkpoint whose learning rows are a
    delta: its chain read back to the last full rows, the deltas applied in order,
    every link checked as for :func:`read_archive_table`."""
    deltas = []
    for _, handle in _chain(path):
        rows = handle["optimizer/rows"]
        found = {key: (rows[key][()], rows[f"{key}.rows"][()]) for key in keys}
        if not handle["optimizer"].attrs.get("learning_delta", False):
            break
        deltas.append((found, rows["archive.emptied"][()]))
    for delta, emptied in reversed(deltas):
        for key, (values, cells) in delta.items():
            base_values, base_cells = found[key]
            kept = ~np.isin(base_cells, np.concatenate([emptied, cells]))
            every = np.concatenate([base_cells[kept], cells])
            order = np.argsort(every, kind="stable")
            found[key] = (np.concatenate([base_values[kept], values])[order], every[order])
    return found


def is_delta(handle: h5py.File) -> bool:
    """Whether an open checkpoint holds its archive as a delta."""
    return DELTA in handle


def read_archive_table(path: str | Path) -> dict | None:
    """The archive of a checkpoint or archive file, full or a delta chain: one array per
    field, sorted by cell index, and ``attrs`` (the group's attributes); ``None``
    when the file holds no archive.

    Raises
    ------
    CorruptFileError
        When a link of the chain is missing, is another file than the one the delta
        was written against, or the archive read back differs from the one written.
    """
    deltas = []
    for _, handle in _chain(path):
        if "archive" in handle:
            group = handle["archive"]
            table = {name: group[name][()] for name in group}
            table["attrs"] = dict(group.attrs)
            break
        if DELTA not in handle:
            return None
        group = handle[DELTA]
        delta = {name: group[name][()] for name in group}
        delta["attrs"] = dict(group.attrs)
        deltas.append(delta)
    for delta in reversed(deltas):
        table = _applied(table, delta)
    if deltas:
        _check_whole(path, table)
    return table


def elite_rows(path: str | Path, cells: np.ndarray) -> tuple[dict[int, np.ndarray], Path]:
    """``{cell: solution}`` of those ``cells`` (sorted) that the archive of a whole state
    holds, reading only their rows: from ``/archive``, or from each delta of its chain
    and then its last full archive. Also returns the last file read."""
    found: dict[int, np.ndarray] = {}
    remaining = np.asarray(cells, dtype=np.int64)
    for current, handle in _chain(path, scattered=True):
        whole = "archive" in handle
        group = handle["archive" if whole else DELTA]
        found.update(rows_of(group, remaining))
        remaining = np.setdiff1d(remaining, np.fromiter(found, dtype=np.int64))
        if not whole and len(remaining):
            remaining = np.setdiff1d(remaining, group["emptied"][()].astype(np.int64))
        if whole or not len(remaining):
            return found, current
    raise AssertionError("unreachable: a chain ends at a whole archive")


def rows_of(group: h5py.Group, cells: np.ndarray) -> dict[int, np.ndarray]:
    """``{cell: solution}`` of those ``cells`` (sorted) that ``group`` (``index``,
    ``solution``) holds, reading only their rows."""
    if not len(cells):
        return {}
    index = group["index"][()]
    positions = np.searchsorted(index, cells)
    held = positions < len(index)
    held[held] = index[positions[held]] == cells[held]
    if not held.any():
        return {}
    rows = group["solution"][positions[held]]
    return dict(zip(cells[held].tolist(), rows, strict=True))


def _chain(path: str | Path, *, scattered: bool = False) -> Iterator[tuple[Path, h5py.File]]:
    """The files of a delta chain, newest first, each open and checked (it exists and is
    the file the delta after it was written against); the caller stops at the first
    that holds what it needs (a full archive), or the chain is followed from each
    delta to its base. ``scattered``: the caller reads scattered rows
    (:func:`~evocamp.files.hdf5.open_for_reading`)."""
    current, wanted = Path(path), None
    while True:
        _check_exists(current, wanted)
        with open_for_reading(current, what="checkpoint", scattered=scattered) as handle:
            _check_link(handle, current, wanted)
            yield current, handle
            current, wanted = _link(handle, current)


def _link(handle: h5py.File, path: Path) -> tuple[Path, tuple[Path, int, str]]:
    """The base file of an open delta and what it must be: ``(delta, generation,
    archive_digest)``."""
    base = RunFolder.holding(path).path / str(handle.attrs["delta_base_file"])
    return base, (path, int(handle.attrs["delta_base"]), str(handle.attrs["delta_base_digest"]))


def _check_exists(path: Path, wanted: tuple[Path, int, str] | None) -> None:
    """Check that the base file a delta names exists (before opening it)."""
    if wanted is not None and not path.exists():
        raise _broken(wanted, path, "which is missing")


def _check_link(handle: h5py.File, path: Path, wanted: tuple[Path, int, str] | None) -> None:
    """Check that an open base file is the one a delta was written against."""
    if wanted is None:
        return
    _, generation, digest = wanted
    found = int(handle.attrs["generation"]), str(handle.attrs.get("archive_digest", ""))
    if found != (generation, digest):
        raise _broken(
            wanted,
            path,
            f"which holds another archive (generation {found[0]}, digest {found[1] or 'none'})",
        )


def _applied(table: dict, delta: dict) -> dict:
    """An archive table with a delta applied: its emptied and changed cells removed,
    its rows added, sorted by cell index."""
    kept = ~np.isin(table["index"], np.concatenate([delta["emptied"], delta["index"]]))
    order = np.argsort(np.concatenate([table["index"][kept], delta["index"]]), kind="stable")
    result = {
        name: np.concatenate([table[name][kept], delta[name]])[order]
        for name in table
        if name not in (*NOT_PER_CELL, "attrs")
    }
    for name in NOT_PER_CELL:
        if name in delta:
            result[name] = delta[name]
    result["attrs"] = delta["attrs"]
    return result


def _check_whole(path: str | Path, table: dict) -> None:
    """Check an archive read through a delta chain against the digest written with it."""
    per_cell = {
        name: values for name, values in table.items() if name not in (*NOT_PER_CELL, "attrs")
    }
    digest = table_digest(table["index"], cell_digests(per_cell))
    with open_for_reading(path, what="checkpoint") as handle:
        written = str(handle.attrs["archive_digest"])
        spec = json.loads(handle.attrs["run_spec"])
        generation = int(handle.attrs["generation"])
    if digest != written:
        raise CorruptFileError(
            f"checkpoint {path} (run {run_label(spec)}, generation {generation}): the "
            "archive read through its deltas does not match the archive it was written "
            "with; a checkpoint of its chain was changed: rerun the run from a kept "
            "checkpoint before the chain's full archive"
        )


def _broken(wanted: tuple[Path, int, str], base: Path, reason: str) -> CorruptFileError:
    """The error of a broken link: the delta, the base it names and what is wrong."""
    delta, generation, digest = wanted
    try:
        with h5py.File(delta, "r") as handle:
            spec = json.loads(handle.attrs["run_spec"])
            label = f"run {run_label(spec)}, generation {int(handle.attrs['generation'])}"
    except (OSError, KeyError, ValueError):
        label = "unreadable"
    return CorruptFileError(
        f"checkpoint {delta} ({label}) holds its archive as the cells changed since the "
        f"kept checkpoint of generation {generation} (archive digest {digest}), {base}, "
        f"{reason}: restore that file, or delete this checkpoint and the later ones of "
        "the run and rerun to recompute them"
    )
