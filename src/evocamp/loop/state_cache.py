"""Shard-mode states between kept checkpoints: light files on the shared filesystem,
full states in a node-local cache, rebuilt by telling again when the cache is gone.

A shard-mode tell job writes the state after its generation, which the next
generation's shards and tell read. Written whole, that is the optimizer's full state
on the shared filesystem every generation (CMA-ME with 15 emitters in 100 dimensions:
4-15 MB, mostly covariance matrices and elites). Between kept checkpoints the job
writes a *light* state there instead: the run spec, the next batch and its seeds,
the metrics window and the best solution (what shards and the next tell read), for a
compact QD batch the elites its generation inserted (the next shards' parents), plus
the state it was told from and its shard files. The full state goes to a node-local
cache (a pickle of the whole state, in a private folder in memory: ``$XDG_RUNTIME_DIR``
or ``/dev/shm``; ``EVOCAMP_STATE_CACHE`` names another folder, ``0`` turns it off),
keyed by the light file's identity (device, inode, size, modification time), where the
next tell job on the node finds it; each run keeps the entries of one state. With a
compact batch whose solutions the optimizer holds (pyribs' rows of a compact QD batch)
the tell caches them too (:func:`shard_batch`: the shards on its node read their rows
there, not the state file or their parents; the next tell regenerates none).

When the cache does not hold a light state's full state (another node, a reboot, a
cleared cache), it is rebuilt from the last full state before it (the window's kept
checkpoint) by telling the window's stored shard results again. Tells are
deterministic, so the rebuilt state equals the lost one bit for bit; each rebuilt
generation is checked against the batch its light state stores.

States of kept generations (every ``checkpoint_every``-th) and of the last
generation are always written whole, so kept checkpoints and final states never
depend on the cache. A kept generation's state is cached as well (before the last
generation), so the next tell on the node does not read it back (with delta
checkpoints, a chain of files), nor its shards their rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np

from evocamp.base.errors import CorruptFileError, DiskFullError
from evocamp.base.files import atomic_copy, private_folder, replaced_atomically
from evocamp.catalogue.factory import optimizer_class, resolve_run
from evocamp.files.checkpoint import (
    holds_elites,
    light_attrs,
    open_batch,
    read_state,
    window_after,
    write_state,
)
from evocamp.files.kept_archive import holds_cells
from evocamp.files.shard import read_shard
from evocamp.loop.engine import tell
from evocamp.model.layout import ends_window
from evocamp.model.protocol import ASKED
from evocamp.model.runspec import Run, run_label
from evocamp.model.state import RunState

#: Environment variable naming the cache folder (``0``: no cache, states written whole).
CACHE_VARIABLE = "EVOCAMP_STATE_CACHE"


def cache_folder() -> Path | None:
    """This user's node-local cache folder, or ``None`` without one.

    ``$EVOCAMP_STATE_CACHE`` when set (``0`` for none), else a private folder in
    ``$XDG_RUNTIME_DIR`` or ``/dev/shm`` (both memory on Linux).
    """
    folder = _cache_location()
    return None if folder is None else private_folder(folder)


def _cache_location() -> Path | None:
    """Where this user's cache folder is (:func:`cache_folder`), neither made nor
    checked: a lookup that finds no entry there needs neither."""
    setting = os.environ.get(CACHE_VARIABLE, "")
    if setting == "0":
        return None
    if setting:
        return Path(setting)
    for base in (os.environ.get("XDG_RUNTIME_DIR", ""), "/dev/shm"):
        if base and os.path.isdir(base):
            return Path(base) / f"evocamp-states-{os.getuid()}"
    return None


def _run_key(work: str | Path) -> str:
    """The name of a run's folder in the cache: a digest of its working folder."""
    return hashlib.sha256(str(Path(work).resolve()).encode()).hexdigest()[:24]


def run_cache(work: str | Path) -> Path | None:
    """The cache folder of the run whose working folder is ``work`` (``None``
    without a cache)."""
    folder = cache_folder()
    if folder is None:
        return None
    return folder / _run_key(work)


def _entry(path: Path, name_of) -> Path | None:
    """The cache entry ``name_of(run cache, path)`` of the state file ``path`` when it
    exists in this user's private cache folder, else ``None``; the folder is checked
    (:func:`~evocamp.base.files.private_folder`) only when it holds the entry, so a
    step that finds nothing cached (a shard on another node than the tell, the first
    generation) makes and checks no folder."""
    folder = _cache_location()
    if folder is None:
        return None
    entry = name_of(folder / _run_key(path.parent), path)
    if not entry.is_file() or private_folder(folder) is None:
        return None
    return entry


def forget_run(work: str | Path) -> None:
    """Remove the cached states of the run whose working folder is ``work``."""
    folder = run_cache(work)
    if folder is not None and folder.is_dir():
        for path in folder.glob("*"):
            path.unlink(missing_ok=True)
        folder.rmdir()


def _must_be_whole(state: RunState, total: int | None) -> bool:
    """Whether the state after a tell is written whole: kept generations, the last
    one, and any when the run's length is unknown."""
    if total is None:
        return True
    return ends_window(state.generation, every=state.spec["checkpoint_every"], total=total)


def _elites_readable(state: RunState, told_from: str | Path, *, run: Run) -> bool:
    """Whether a light state after ``told_from`` would give its batch's parents: when
    the batch names them by their cells, ``told_from`` must give every elite (a run
    continued by this version in the middle of a window written by an earlier one has
    light states without ``/inserted``; its next state is written whole)."""
    size = len(state.next_seeds)
    if not len(run.batch_format.elites_read(state.next_batch, 0, size)):
        return True
    return holds_elites(told_from)


def write_told_state(
    output: str | Path,
    state: RunState,
    *,
    run: Run,
    told_from: str | Path,
    shard_files: list,
    total: int | None,
    full_every: int = 1,
) -> str:
    """Write the state after a shard-mode tell: light, with the full state cached,
    or whole (see the module's description).

    Parameters
    ----------
    output : str or Path
        The state file (in the run's working folder).
    state : RunState
        The state after the tell.
    run : Run
        Its run.
    told_from : str or Path
        The state file the tell read.
    shard_files : list of str or Path
        The shard files it folded in.
    total : int or None
        The run's generations (``None``: unknown; the state is written whole).
    full_every : int
        ``checkpoint_full_every``: a whole state's archive may be a delta of the kept
        checkpoint before it (:func:`~evocamp.files.checkpoint.write_state`).

    Returns
    -------
    str
        What was written, for the job's log.
    """
    output = Path(output)
    whole = _must_be_whole(state, total) or not _elites_readable(state, told_from, run=run)
    cache = run_cache(output.parent)
    if whole or cache is None:
        write_state(output, state, run=run, full_every=full_every)
        if cache is not None and total is not None and state.generation < total:
            _cache(cache, output, state)  # replaces every other entry of the run
        else:
            forget_run(output.parent)
        return f"full state -> {output}"
    inserted = getattr(state.optimizer, "inserted", None)
    write_state(
        output,
        state,
        run=run,
        light=True,
        window=None
        if inserted is None
        else window_after(told_from, output=output, inserted=inserted),
        attrs={
            "light_previous": os.path.relpath(told_from, output.parent),
            "light_shards": json.dumps([os.path.relpath(p, output.parent) for p in shard_files]),
        },
    )
    try:
        _cache(cache, output, state, strict=True)
    except (OSError, DiskFullError) as error:  # a full /dev/shm: the shared filesystem takes it
        write_state(output, state, run=run, full_every=full_every)
        forget_run(output.parent)
        return f"full state -> {output} (cache {cache}: {error})"
    return f"light state -> {output}, full state cached in {cache}"


def read_full_state(path: str | Path) -> RunState:
    """Read a state whole: from the node-local cache when it holds this very file's
    full state, else a whole state file as it is, a light one rebuilt
    (:func:`restore`)."""
    cached = _cached(Path(path))
    if cached is not None:
        return cached
    state = read_state(path)
    if state.optimizer is not None:
        return state
    return restore(path)


@contextlib.contextmanager
def shard_batch(path: str | Path, *, programs: dict[str, dict] | None = None):
    """Open a state file's next batch for a shard, as
    :func:`~evocamp.files.checkpoint.open_batch` does (``(run, generation, batch,
    seeds, numerics)``, the run resolved once with its evaluation function,
    :func:`resolve_run`, and ``programs``, the step settings' local keys of command
    domains): from the
    node-local cache when the tell that wrote ``path`` ran on this node and left the
    batch's solutions there (the shard reads its own rows, and neither the state file
    nor the batch's parents), else from the file."""
    held = _cached_rows(Path(path))
    if held is not None:
        header, rows = held
        run = resolve_run(json.loads(header["spec"]), evaluates=True, programs=programs)
        batch = {ASKED: rows}
        yield run, header["generation"] + 1, batch, header["seeds"], header["numerics"]
        return
    resolve = functools.partial(resolve_run, evaluates=True, programs=programs)
    with open_batch(path, resolve=resolve) as opened:
        yield opened


def keep_whole(
    source: str | Path,
    destination: str | Path,
    *,
    run: Run,
    state: RunState | None = None,
    full_every: int = 1,
) -> None:
    """Keep a state file as a checkpoint; a light one is written whole (from ``state``,
    its full state when the caller has already read it, else read or rebuilt here).
    With ``full_every`` (``checkpoint_full_every``) above 1 its archive may be a delta
    of the kept checkpoint before it (:mod:`evocamp.files.kept_archive`): a whole state
    written so (:func:`write_told_state`, the segments) is linked as it is, another is
    written again."""
    light = _light_attrs(Path(source), wanted_by=source) is not None
    if light or (full_every > 1 and not holds_cells(source)):
        state = state if state is not None else read_full_state(source)
        write_state(destination, state, run=run, full_every=full_every)
    else:
        atomic_copy(source, destination)


def restore(path: str | Path) -> RunState:
    """The full state of a light state file: from the cache, or rebuilt.

    Raises
    ------
    CorruptFileError
        When it cannot be rebuilt (a file of the window is missing or does not
        reproduce); the message names the file and what to delete.
    """
    chain = []
    current = Path(path)
    while True:
        attrs = _light_attrs(current, wanted_by=path)
        if attrs is None:
            state = read_state(current)
            break
        cached = _cached(current)
        if cached is not None:
            state = cached
            break
        chain.append((current, attrs))
        current = Path(os.path.normpath(current.parent / attrs["light_previous"]))
    if chain:
        print(
            f"{path}: full state not in this node's cache; rebuilt from {current} by telling "
            f"generation(s) {state.generation + 1}..{state.generation + len(chain)} again",
            file=sys.stderr,
            flush=True,
        )
    for light_path, attrs in reversed(chain):
        state = _tell_again(state, light_path, attrs, wanted_by=path)
    return state


def _light_attrs(path: Path, *, wanted_by) -> dict | None:
    """The ``light_*`` attributes, ``generation`` and ``run_spec`` of a state file
    (``None`` for a full state)."""
    try:
        return light_attrs(path)
    except FileNotFoundError:
        raise _unrebuildable(wanted_by, f"{path} is missing") from None
    except (OSError, KeyError) as error:
        raise _unrebuildable(wanted_by, f"{path} cannot be read ({error})") from None


def _file_identity(path: Path) -> tuple[int, int, int, int]:
    """What tells one written file from any other at ``path``: device, inode, size and
    modification time (a rewritten or replaced file has another; a hard link, the kept
    checkpoint, the same)."""
    status = path.stat()
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


def _state_file(cache: Path, path: Path) -> Path:
    return cache / f"{path.stem}.pickle"


def _rows_file(cache: Path, path: Path) -> Path:
    return cache / f"{path.stem}.rows"


def _cache(cache: Path, path: Path, state: RunState, *, strict: bool = False) -> None:
    """Cache the state just written to ``path`` for the next jobs on this node, keyed by
    the file's identity: its full state (a pickle, for the next tell, which then reads
    neither the file nor, for a light one, the window's states) and, when the optimizer
    holds its compact batch's solutions, those (for the shards, which then read their
    rows and not the file, and for the next tell, which then regenerates none). Each
    run keeps the entries of one state. A failure is a miss (raised when ``strict``:
    a light state needs its entry)."""
    identity = _file_identity(path)
    kept = (_state_file(cache, path), _rows_file(cache, path))
    try:
        cache.mkdir(exist_ok=True)
        spec = json.dumps(state.spec, sort_keys=True)
        with replaced_atomically(kept[0], durable=False) as temporary, open(temporary, "wb") as f:
            pickle.dump((identity, spec), f, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        asked = getattr(state.optimizer, "asked_solutions", None)
        rows = asked() if callable(asked) else None
        if rows is not None:
            header = {
                "identity": identity,
                "spec": spec,
                "generation": state.generation,
                "seeds": np.asarray(state.next_seeds),
                "numerics": state.numerics,
            }
            _write_rows(kept[1], header, rows)
    except (OSError, DiskFullError):
        forget_run(path.parent)
        if strict:
            raise
        return
    for other in cache.iterdir():
        if other not in kept:
            other.unlink(missing_ok=True)


#: The alignment of a rows entry's rows.
_ROWS_ALIGN = 64


def _rows_offset(header_bytes: int) -> int:
    """Where a rows entry's rows start: after the header's length (8 bytes) and the
    header, aligned to :data:`_ROWS_ALIGN`."""
    return -(-(8 + header_bytes) // _ROWS_ALIGN) * _ROWS_ALIGN


def _write_rows(path: Path, header: dict, rows: np.ndarray) -> None:
    """A rows entry: the header's length (8 bytes), the pickled header (with the rows'
    shape) and, at :func:`_rows_offset`, the rows (float64, C order)."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    data = pickle.dumps({**header, "shape": rows.shape}, protocol=pickle.HIGHEST_PROTOCOL)
    with replaced_atomically(path, durable=False) as temporary, open(temporary, "wb") as stream:
        stream.write(len(data).to_bytes(8, "little"))
        stream.write(data)
        stream.write(bytes(_rows_offset(len(data)) - 8 - len(data)))
        stream.write(memoryview(rows).cast("B"))


class _CachedRows:
    """The rows of a rows entry, indexed as a whole batch's solutions: a slice is read
    from the file when indexed (one ``pread``)."""

    def __init__(self, path: Path, *, offset: int, shape: tuple[int, int]) -> None:
        self.path = path
        self.offset = offset
        self.shape = shape

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: slice) -> np.ndarray:
        start, stop, step = index.indices(self.shape[0])
        if step != 1:
            raise TypeError("cached rows support contiguous slices only")
        rows = np.empty((max(stop - start, 0), self.shape[1]))
        descriptor = os.open(self.path, os.O_RDONLY)
        try:
            read = os.preadv(
                descriptor, [rows], self.offset + start * rows.itemsize * self.shape[1]
            )
        finally:
            os.close(descriptor)
        if read != rows.nbytes:
            raise OSError(f"{self.path}: {read} of {rows.nbytes} bytes read")
        return rows


def _cached_rows(path: Path) -> tuple[dict, _CachedRows] | None:
    """The header and the rows (read where indexed) of the rows entry of the state
    file ``path``, when the cache holds this very file's (:func:`_cache`)."""
    entry = _entry(path, _rows_file)
    if entry is None:
        return None
    try:
        with open(entry, "rb") as stream:
            length = int.from_bytes(stream.read(8), "little")
            header = pickle.loads(stream.read(length))
            size = os.fstat(stream.fileno()).st_size
        offset, (rows, dim) = _rows_offset(length), header["shape"]
        if header["identity"] != _file_identity(path) or size != offset + 8 * rows * dim:
            return None
    except Exception:  # noqa: BLE001 - any unreadable cache entry is a miss
        return None
    return header, _CachedRows(entry, offset=offset, shape=header["shape"])


def _cached(path: Path) -> RunState | None:
    """The full state of the state file ``path`` from the cache, when the cache holds
    this very file's (:func:`_cache`), with its batch's solutions when held; else
    ``None``.

    The cache is a private folder in memory, written by this user's tell jobs (a
    temporary file renamed when complete), so a plain pickle is safe and fast there.
    """
    entry = _entry(path, _state_file)
    if entry is None:
        return None
    try:
        with open(entry, "rb") as stream:
            identity, spec = pickle.load(stream)
            if identity != _file_identity(path):
                return None
            optimizer_class(json.loads(spec))  # imports a plugin's module
            state = pickle.load(stream)
    except Exception:  # noqa: BLE001 - any unreadable cache entry is a miss
        return None
    give = getattr(state.optimizer, "restore_asked_solutions", None)
    held = _cached_rows(path) if callable(give) else None
    if held is not None:
        give(held[1][:])
    return state


def _same(told, stored) -> bool:
    """Equal arrays, NaN equal to NaN (a space's inactive parameters)."""
    told, stored = np.asarray(told), np.asarray(stored)
    return np.array_equal(told, stored, equal_nan=told.dtype.kind in "fc")


def _tell_again(state: RunState, path: Path, attrs: dict, *, wanted_by) -> RunState:
    """Tell the shard results a light state was told with again, and check the result
    against the batch it stores."""
    shards = []
    for relative in json.loads(attrs["light_shards"]):
        shard = path.parent / relative
        if not shard.exists():
            raise _unrebuildable(wanted_by, f"shard file {shard} is missing")
        shards.append(read_shard(shard))
    told = tell(state, shards)
    stored = read_state(path, with_optimizer=False)
    same = (
        told.generation == stored.generation
        and np.array_equal(told.next_seeds, stored.next_seeds)
        and sorted(told.next_batch) == sorted(stored.next_batch)
        and all(_same(told.next_batch[k], stored.next_batch[k]) for k in told.next_batch)
    )
    if not same:
        raise _unrebuildable(
            wanted_by,
            f"telling generation {stored.generation} again does not reproduce the batch "
            f"stored in {path}",
        )
    return dataclasses.replace(
        told, metrics_window=stored.metrics_window, finished_at=stored.finished_at
    )


def _unrebuildable(path, reason: str) -> CorruptFileError:
    try:
        label = run_label(read_state(path, with_optimizer=False).spec) + ", "
    except (OSError, CorruptFileError):
        label = ""
    return CorruptFileError(
        f"cannot rebuild the optimizer state of {path} ({label}not in this node's state "
        f"cache): {reason}; delete the run's work/state_*.h5 and work/gen_* after its last "
        "kept checkpoint and rerun to recompute them"
    )
