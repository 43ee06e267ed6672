"""pyribs' private attributes, in one place: every read or write of them in evocamp is
a function here.

evocamp relies on a few things pyribs keeps private: an archive's per-cell array store
(``_store``: retrieval by cell, the list of occupied cells, its raw arrays for compact
checkpoints) and its random generator (``_rng``), a density archive's reservoir of
measures, an emitter's generator and evolution strategy (``_rng``, ``_opt``), its initial
solutions and clipping, and a scheduler's batch between ``ask`` and ``tell``
(``_cur_solutions``, ``_emitters``, ``_result_archive``). These are the internals of the
pinned release (``ribs==0.12.0`` in pyproject.toml, :data:`RIBS_VERSION`); the first
use of any of them checks that this is the release installed
(:func:`check_ribs_version`), so another release fails with one message instead of
silently different results. pyribs is imported inside the functions (it takes about
2 s to import).
"""

from __future__ import annotations

import contextlib
import copy
import functools

import numpy as np

from evocamp.base.errors import EvocampError

#: The pyribs release whose internals this module knows (pyproject.toml pins it).
RIBS_VERSION = "0.12.0"


@functools.cache
def check_ribs_version() -> None:
    """Check, once per process (a failed check is not remembered), that the installed
    pyribs is :data:`RIBS_VERSION`.

    Raises
    ------
    EvocampError
        On another release: the message names the version found and the one required.
    """
    import ribs

    found = getattr(ribs, "__version__", "unknown")
    if found != RIBS_VERSION:
        raise EvocampError(
            f"evocamp needs pyribs (ribs) {RIBS_VERSION}, whose internals its optimizer "
            f"states and compact batches rely on; found ribs {found}: install "
            f"ribs=={RIBS_VERSION}"
        )


# --- archives --------------------------------------------------------------------------


def retrieve_cells(archive, cells, fields: list[str]) -> tuple[np.ndarray, dict]:
    """``(occupied, data)`` of an archive's ``cells`` (indices), ``fields`` only."""
    check_ribs_version()
    return archive._store.retrieve(np.asarray(cells), fields=fields)


def occupied_cells(archive) -> np.ndarray:
    """The indices of an archive's occupied cells, in its store's order (the order its
    sampling draws from)."""
    check_ribs_version()
    return archive._store.occupied_list


def separate_result_archive(scheduler):
    """A scheduler's result archive when it has one of its own, else ``None``."""
    check_ribs_version()
    return getattr(scheduler, "_result_archive", None)


def store_rows(archive) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{field: (array, rows that are read)}`` of an archive's array store: every
    field at the occupied cells, and the used prefix of the list of occupied cells."""
    check_ribs_version()
    store = archive._store
    occupied = np.flatnonzero(store._props["occupied"])
    rows = {name: (array, occupied) for name, array in store._fields.items()}
    used = np.arange(store._props["n_occupied"])
    rows["occupied_list"] = (store._props["occupied_list"], used)
    return rows


def partial_rows(archive) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The arrays of an archive of which only some rows are read
    (``{name: (array, rows)}``): its store's (:func:`store_rows`), or a density
    archive's reservoir of measures (``buffer``, its first ``n`` rows filled); none for
    another archive."""
    check_ribs_version()
    if hasattr(archive, "_store"):
        return store_rows(archive)
    if hasattr(archive, "_buffer"):
        return {"buffer": (archive._buffer, np.arange(archive._n_occupied))}
    return {}


# --- emitters --------------------------------------------------------------------------


def strategy_of(emitter):
    """An evolution-strategy emitter's evolution strategy (``None`` for another)."""
    check_ribs_version()
    return getattr(emitter, "_opt", None)


def generator_of(owner) -> np.random.Generator:
    """The generator of an archive (its sampling of elites), an emitter or an evolution
    strategy."""
    check_ribs_version()
    return owner._rng


@contextlib.contextmanager
def replaced_generators(emitters, replace):
    """While in the block, the generator each emitter's ``ask`` draws from (an
    evolution-strategy emitter's: its ES's) is ``replace(generator)`` (yielded, in
    order); its own again afterwards."""
    check_ribs_version()
    owners = [getattr(emitter, "_opt", emitter) for emitter in emitters]
    generators = [owner._rng for owner in owners]
    replacements = [replace(generator) for generator in generators]
    for owner, replacement in zip(owners, replacements, strict=True):
        owner._rng = replacement
    try:
        yield replacements
    finally:
        for owner, generator in zip(owners, generators, strict=True):
            owner._rng = generator


def forget_initial_solutions(emitter) -> None:
    """Drop an emitter's initial solutions (pyribs reads them only while its archive is
    empty)."""
    check_ribs_version()
    emitter._initial_solutions = None


def clipped(emitter, solutions: np.ndarray) -> np.ndarray:
    """``solutions`` clipped to an emitter's bounds, as its ``ask`` clips."""
    check_ribs_version()
    return emitter._clip(solutions)


def emitter_without_batch(emitter):
    """An emitter without its evolution strategy's copy of the batch asked (a shallow
    copy; the emitter itself when it holds none)."""
    check_ribs_version()
    opt = getattr(emitter, "_opt", None)
    if getattr(opt, "_solutions", None) is None:
        return emitter
    shell = copy.copy(emitter)
    shell._opt = copy.copy(opt)
    shell._opt._solutions = None
    return shell


def give_strategy_rows(emitter, solutions: np.ndarray) -> None:
    """Give an evolution-strategy emitter's strategy its rows of the batch asked (its
    ``tell`` ranks them)."""
    check_ribs_version()
    emitter._opt._solutions = solutions


# --- schedulers ------------------------------------------------------------------------


def asked_solutions(scheduler) -> np.ndarray | None:
    """The solutions of a scheduler's batch between ``ask`` and ``tell`` (``None`` once
    left out of a pickle)."""
    check_ribs_version()
    return scheduler._cur_solutions


def set_asked_solutions(scheduler, solutions: np.ndarray) -> None:
    """Give a scheduler the solutions of the batch it asked (its ``tell`` reads them)."""
    check_ribs_version()
    scheduler._cur_solutions = solutions


def scheduler_without_batch(scheduler):
    """A shallow copy of a scheduler without the solutions of the batch asked, its
    emitters without their evolution strategies' copies of it
    (:func:`emitter_without_batch`): what a checkpoint pickles of a compact batch's
    scheduler."""
    check_ribs_version()
    shell = copy.copy(scheduler)
    shell._cur_solutions = None
    shell._emitters = [emitter_without_batch(emitter) for emitter in shell._emitters]
    return shell
