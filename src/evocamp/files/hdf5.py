"""What every evocamp HDF5 file shares: the schema version, crash-safe creation,
datasets without timestamps, and reading that names a broken file.

The layout of each kind of file is documented in ``docs/hdf5-schema.md``;
:data:`SCHEMA_VERSION` changes whenever it does.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import h5py
import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.base.files import replaced_atomically

SCHEMA_VERSION = 3
#: Older versions this code still reads (QD runs only; version 1: the scheduler as a
#: plain pickle, version 2: a compact pickle of the scheduler; :mod:`evocamp.files.legacy`).
READABLE_SCHEMA_VERSIONS = (1, 2, 3)


@contextlib.contextmanager
def atomic_h5(path: str | Path, *, durable: bool = True):
    """Open a new HDF5 file for writing that appears at ``path`` only when complete
    (:func:`~evocamp.base.files.replaced_atomically`: a full disk raises
    :class:`~evocamp.base.errors.DiskFullError` and leaves the old file; ``durable``
    ``False`` for files a rerun recomputes bit for bit)."""
    with replaced_atomically(path, durable=durable) as temporary:
        with h5py.File(temporary, "w", track_order=False) as handle:
            yield handle
            handle.flush()


def write_dataset(group: h5py.Group, name: str, data) -> h5py.Dataset:
    """Create a dataset without creation timestamps (bitwise-reproducible files)."""
    return group.create_dataset(name, data=np.asarray(data), track_times=False)


def write_identity(handle: h5py.File, spec: dict, *, kind: str, generation: int) -> None:
    """The root attributes every archive and state file has."""
    handle.attrs["schema_version"] = SCHEMA_VERSION
    handle.attrs["kind"] = kind
    handle.attrs["generation"] = generation
    for key in ("campaign", "algorithm", "domain", "seed", "master_seed"):
        handle.attrs[key] = spec[key]


def _opened(path: str | Path, *, scattered: bool) -> h5py.File:
    """``path`` opened for reading; with ``scattered``, without HDF5's data sieve buffer
    (which reads 64 kB around each row read from a contiguous dataset)."""
    if not scattered:
        return h5py.File(path, "r")
    access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    access.set_sieve_buf_size(0)
    return h5py.File(h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY, fapl=access))


@contextlib.contextmanager
def open_for_reading(path: str | Path, *, what: str, scattered: bool = False):
    """Open an HDF5 file, turning any low-level failure into a :class:`CorruptFileError`.

    Parameters
    ----------
    path : str or Path
        File to open.
    what : str
        What the file is, for the message (e.g. ``"checkpoint"``).
    scattered : bool
        The caller reads scattered rows (a shard's parents): only those rows are read,
        not HDF5's 64 kB around each.
    """
    try:
        handle = _opened(path, scattered=scattered)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise CorruptFileError(
            f"{what} {path} is corrupt or truncated ({error}); delete it and rerun "
            "to recompute it from the previous checkpoint"
        ) from None
    try:
        if handle.attrs.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
            raise CorruptFileError(
                f"{what} {path} has schema version {handle.attrs.get('schema_version')}; "
                f"this evocamp writes version {SCHEMA_VERSION} and reads versions "
                f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}"
            )
        yield handle
    except (KeyError, OSError) as error:
        raise CorruptFileError(f"{what} {path} is incomplete or corrupt: {error}") from None
    finally:
        handle.close()
