"""Pickles without the bulk that can be stored smaller or is stored elsewhere.

It knows no pyribs internals: :mod:`evocamp.files.optimizer_state` names the arrays to
keep in part (from :mod:`evocamp.families.ribs_internals`).

An optimizer's pickle carries large arrays that a checkpoint need not hold in full:
an archive's preallocated per-cell arrays (filled only where a cell is occupied; the
rest is never read) and copies of the batch that the checkpoint stores anyway. This
codec replaces such arrays in the pickle by references: ``rows`` arrays keep only the
rows that matter (the caller stores them), ``shared`` arrays are byte-equal to a row
range of an array the caller stores anyway. Loading puts every array back with the same
bytes in every row that is read, so an optimizer restored from a compact pickle
continues exactly like the original.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field

import numpy as np

from evocamp.files.legacy import class_module

#: Arrays below this size stay inside the pickle.
SHARED_MIN_BYTES = 4096


@dataclass
class CompactPickle:
    """A compact pickle and the arrays it refers to.

    Attributes
    ----------
    blob : bytes
        The pickle.
    rows : dict of str to numpy.ndarray
        For every ``rows`` reference: the kept rows of the array, in the order of the
        row indices given to :func:`dump`.
    """

    blob: bytes
    rows: dict[str, np.ndarray] = field(default_factory=dict)


class _Pickler(pickle.Pickler):
    def __init__(self, buffer, *, rows: dict, shared: dict) -> None:
        super().__init__(buffer, protocol=5)
        self._rows = rows
        self._shared = shared
        # Where each row of a shared 2-d array starts: finds a row range in one look-up.
        # A 1-d shared array (e.g. an ES centre of 10^6 values) is matched whole.
        self._starts = {
            name: _row_starts(array) for name, array in shared.items() if array.ndim >= 2
        }
        self.kept: dict[str, np.ndarray] = {}
        # One reference per array object (pickle does not memoise persistent ids), so
        # that an array referred to twice is one array again after loading.
        self._references: dict[int, tuple] = {}
        self._alive: list = []  # keeps referenced arrays alive: their ids stay unique

    def persistent_id(self, obj):
        if type(obj) is not np.ndarray:
            return None
        if id(obj) not in self._references:
            reference = self._reference(obj)
            if reference is None:
                return None
            self._references[id(obj)] = (len(self._references), *reference)
            self._alive.append(obj)
        return self._references[id(obj)]

    def _reference(self, obj: np.ndarray) -> tuple | None:
        if id(obj) in self._rows:
            key, indices = self._rows[id(obj)]
            self.kept[key] = obj[indices]
            return ("rows", key, obj.shape, obj.dtype.str)
        if obj.nbytes < SHARED_MIN_BYTES or obj.ndim == 0 or len(obj) == 0:
            return None
        if not obj.flags.c_contiguous:
            return None  # loading gives a C-ordered copy; keep other layouts as they are
        for name, array in self._shared.items():
            if array.ndim == 1 and obj.shape == array.shape and obj.dtype == array.dtype:
                if obj.tobytes() == array.tobytes():
                    return ("shared", name, 0, len(array))
        for name, starts in self._starts.items():
            array = self._shared[name]
            if obj.dtype != array.dtype or obj.shape[1:] != array.shape[1:]:
                continue
            for start in starts.get(obj[0].tobytes(), ()):
                stop = start + len(obj)
                if stop <= len(array) and array[start:stop].tobytes() == obj.tobytes():
                    return ("shared", name, start, stop)
        return None


def _row_starts(array: np.ndarray) -> dict[bytes, list[int]]:
    starts: dict[bytes, list[int]] = {}
    for index, row in enumerate(array):
        starts.setdefault(np.asarray(row).tobytes(), []).append(index)
    return starts


def dump(obj, *, rows: dict | None = None, shared: dict | None = None) -> CompactPickle:
    """Pickle ``obj`` (protocol 5) with references in place of bulky arrays.

    Parameters
    ----------
    obj : object
        What to pickle.
    rows : dict, optional
        ``{id(array): (key, row_indices)}``: arrays of which only ``row_indices`` are
        ever read; their other rows come back as zeros.
    shared : dict, optional
        ``{name: array}``: arrays the caller stores and passes to :func:`load` again;
        any array in ``obj`` with the bytes of a row range of a 2-d one, or of a whole
        1-d one, is referenced.
    """
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, rows=rows or {}, shared=shared or {})
    pickler.dump(obj)
    return CompactPickle(blob=buffer.getvalue(), rows=pickler.kept)


class _Unpickler(pickle.Unpickler):
    def __init__(self, buffer, *, rows, row_indices, shared) -> None:
        super().__init__(buffer)
        self._rows = rows
        self._row_indices = row_indices
        self._shared = shared
        self._loaded: dict[int, np.ndarray] = {}

    def find_class(self, module: str, name: str):
        # Classes of earlier versions of evocamp's own modules live elsewhere now.
        return super().find_class(class_module(module, name), name)

    def persistent_load(self, pid):
        number, kind, *details = pid
        if number not in self._loaded:
            self._loaded[number] = self._array(kind, details)
        return self._loaded[number]

    def _array(self, kind: str, details: list) -> np.ndarray:
        if kind == "rows":
            key, shape, dtype = details
            array = np.zeros(tuple(shape), dtype=np.dtype(dtype))
            array[self._row_indices(key)] = self._rows(key)
            return array
        if kind == "shared":
            name, start, stop = details
            return np.array(self._shared[name][start:stop], copy=True)
        raise pickle.UnpicklingError(f"unknown reference {kind!r}")


def load(blob: bytes, *, rows, row_indices, shared: dict | None = None):
    """Unpickle a compact pickle.

    Parameters
    ----------
    blob : bytes
        The pickle from :func:`dump`.
    rows : callable
        ``rows(key)``: the kept rows stored for ``key``.
    row_indices : callable
        ``row_indices(key)``: the row indices they go to.
    shared : dict, optional
        The same ``{name: array}`` as given to :func:`dump`.
    """
    return _Unpickler(
        io.BytesIO(blob), rows=rows, row_indices=row_indices, shared=shared or {}
    ).load()
