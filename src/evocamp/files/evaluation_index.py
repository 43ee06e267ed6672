"""A finished run's ``evaluations.h5`` as an index of its evaluation windows.

A run that keeps evaluations writes each window's rows once, in the window's file
(``evaluations/segment_<g>.h5``). When the run is finalised, ``evaluations.h5`` is
written as HDF5 *virtual datasets* over those files: a few kilobytes that present
every kept row, sorted by generation and index, as one set of datasets (any HDF5
reader, h5py included, reads them as if the rows were copied), instead of a second
copy of every row. The window files therefore stay beside it; the index names them
(the root attribute ``windows``: each file's path relative to the run folder and its
row count), and :func:`check_windows` refuses to read an index whose windows are
missing or changed (HDF5 itself would return fill values).

The rows an index presents are exactly :func:`evocamp.files.evaluations.concatenate`'s
of its windows: a generation found in several windows is taken from the last of them,
rows after the run's last generation are left out. When that would need many small
pieces (windows that interleave), or when an older ``evaluations.h5`` holding rows
must be merged in, the caller writes the rows themselves instead (:func:`plan`
returns ``None``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from evocamp.base.errors import CorruptFileError

#: Root attribute of an index: JSON list of ``{"file": <relative path>, "rows": n}``.
WINDOWS_ATTR = "windows"
#: More pieces than this per window mean interleaved windows: the rows are copied.
MAX_PIECES_PER_WINDOW = 4


@dataclass(frozen=True)
class Piece:
    """Rows ``start:stop`` of window ``window`` (axis 0 of its datasets)."""

    window: int
    start: int
    stop: int


@dataclass(frozen=True)
class IndexPlan:
    """How an index maps its windows: pieces for the per-row datasets and for the
    per-generation ``batch`` datasets, in the index's order."""

    windows: list[Path]
    window_rows: list[int]
    rows: list[Piece]
    batch: list[Piece]
    generations: np.ndarray

    @property
    def row_count(self) -> int:
        return sum(piece.stop - piece.start for piece in self.rows)


def is_index(handle: h5py.File) -> bool:
    """Whether an open evaluations file is an index of window files."""
    return WINDOWS_ATTR in handle.attrs


def indexed_windows(handle: h5py.File, *, path: Path) -> list[Path]:
    """The window files an index maps (absolute), in its order."""
    return [path.parent / entry["file"] for entry in json.loads(handle.attrs[WINDOWS_ATTR])]


def check_windows(handle: h5py.File, *, path: Path) -> None:
    """Refuse an index whose window files are missing or hold other rows than when it
    was written.

    Raises
    ------
    CorruptFileError
        Naming the index and the window file, and how to rebuild the index.
    """
    for entry in json.loads(handle.attrs[WINDOWS_ATTR]):
        window = path.parent / entry["file"]
        rows = _stored_row_count(window)
        if rows == entry["rows"]:
            continue
        state = "is missing" if rows is None else f"holds {rows} rows, not {entry['rows']}"
        raise CorruptFileError(
            f"{path} is an index of the run's evaluation windows and {window} {state}: "
            "keep a run folder's files together (evaluations.h5 reads its rows from "
            "evaluations/); if the window files are intact, delete evaluations.h5 and "
            "rerun to rebuild it"
        )


def _stored_row_count(window: Path) -> int | None:
    try:
        with h5py.File(window, "r") as handle:
            return int(handle["evaluations"].attrs["rows"])
    except (OSError, KeyError):
        return None


def _keys(window: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A window's generation and index columns and its batch generations (or ``None``)."""
    with h5py.File(window, "r") as handle:
        group = handle["evaluations"]
        batch = group["batch/generation"][()] if "batch" in group else None
        return group["generation"][()], group["index"][()], batch


def plan(windows: list[Path], *, up_to: int) -> IndexPlan | None:
    """Plan an index of ``windows`` (oldest first) presenting the rows of generations
    ``<= up_to``; ``None`` when there is nothing to index or the windows interleave
    too finely (copy the rows instead)."""
    keys = [_keys(window) for window in windows]
    owner: dict[int, int] = {}
    for number, (generations, _, _) in enumerate(keys):
        for generation in np.unique(generations):
            owner[int(generation)] = number
    row_parts, batch_parts = [], []
    for number, (generations, indices, batch) in enumerate(keys):
        mine = _owned(generations, owner, number, up_to)
        row_parts.append((generations[mine], indices[mine], number, np.flatnonzero(mine)))
        if batch is not None:
            owned = _owned(batch, owner, number, up_to)
            batch_parts.append((batch[owned], number, np.flatnonzero(owned)))
    rows = _pieces(
        np.lexsort(
            (np.concatenate([p[1] for p in row_parts]), np.concatenate([p[0] for p in row_parts]))
        ),
        row_parts,
    )
    if not rows:
        return None
    contributing = {p[2] for p in row_parts if len(p[3])}
    batch_parts = [p for p in batch_parts if p[1] in contributing]
    batch = []
    if contributing == {p[1] for p in batch_parts}:
        order = np.argsort(np.concatenate([p[0] for p in batch_parts]), kind="stable")
        batch = _pieces(order, [(None, None, p[1], p[2]) for p in batch_parts])
    if len(rows) + len(batch) > MAX_PIECES_PER_WINDOW * len(windows):
        return None
    return IndexPlan(
        windows=list(windows),
        window_rows=[len(k[0]) for k in keys],
        rows=rows,
        batch=batch,
        generations=np.unique(np.concatenate([p[0] for p in row_parts])),
    )


def _owned(generations: np.ndarray, owner: dict, number: int, up_to: int) -> np.ndarray:
    """Which entries belong to window ``number`` (it is the last holding their
    generation) and to generations ``<= up_to``."""
    unique, inverse = np.unique(generations, return_inverse=True)
    owners = np.array([owner[int(g)] for g in unique], dtype=np.int64)
    return (owners[inverse.reshape(-1)] == number) & (generations <= up_to)


def _pieces(order: np.ndarray, parts: list[tuple]) -> list[Piece]:
    """Runs of consecutive rows of one window, in ``order`` (positions into the
    concatenation of ``parts``' selected rows)."""
    window = np.concatenate([np.full(len(p[3]), p[2]) for p in parts]).astype(np.int64)
    row = np.concatenate([p[3] for p in parts]).astype(np.int64)
    window, row = window[order], row[order]
    pieces: list[Piece] = []
    start = 0
    for position in range(1, len(row) + 1):
        if (
            position == len(row)
            or window[position] != window[start]
            or row[position] != row[position - 1] + 1
        ):
            pieces.append(Piece(int(window[start]), int(row[start]), int(row[position - 1]) + 1))
            start = position
    return pieces


def write_index_group(handle: h5py.File, index: IndexPlan, *, folder: Path) -> None:
    """Write ``/evaluations`` of an open file as virtual datasets over the planned
    windows (paths stored relative to ``folder``, the run folder) and the
    ``windows`` attribute."""
    relative = [window.relative_to(folder).as_posix() for window in index.windows]
    used = sorted({piece.window for piece in index.rows})
    datasets = {number: _datasets(index.windows[number]) for number in used}
    names = set.intersection(*(set(found) for found in datasets.values()))
    group = handle.create_group("evaluations")
    group.attrs["rows"] = index.row_count
    group.create_group("extra")
    for name in sorted(names):
        pieces = index.batch if name.startswith("batch/") else index.rows
        if not pieces:
            continue
        shapes = {number: found[name][0] for number, found in datasets.items()}
        dtype = datasets[pieces[0].window][name][1]
        _virtual(group, name, pieces, relative=relative, shapes=shapes, dtype=dtype)
    handle.attrs[WINDOWS_ATTR] = json.dumps(
        [
            {"file": file, "rows": rows}
            for file, rows in zip(relative, index.window_rows, strict=True)
        ]
    )


def _datasets(window: Path) -> dict[str, tuple[tuple, np.dtype]]:
    """Shape and dtype of every dataset of a window's ``/evaluations`` (one open)."""
    found = {}
    with h5py.File(window, "r") as handle:
        handle["evaluations"].visititems(
            lambda name, item: (
                found.update({name: (item.shape, item.dtype)})
                if isinstance(item, h5py.Dataset)
                else None
            )
        )
    return found


def _virtual(group, name: str, pieces: list[Piece], *, relative, shapes, dtype) -> None:
    """One virtual dataset: ``pieces`` of the windows' dataset ``name``, in order."""
    total = sum(piece.stop - piece.start for piece in pieces)
    layout = h5py.VirtualLayout(shape=(total, *shapes[pieces[0].window][1:]), dtype=dtype)
    position = 0
    for piece in pieces:
        source = h5py.VirtualSource(
            f"./{relative[piece.window]}", f"evaluations/{name}", shape=shapes[piece.window]
        )
        count = piece.stop - piece.start
        layout[position : position + count] = source[piece.start : piece.stop]
        position += count
    fill = np.nan if np.issubdtype(dtype, np.floating) else None
    group.create_virtual_dataset(name, layout, fillvalue=fill)
