"""Shard-mode states between kept checkpoints: light files on the shared filesystem,
full states in a node-local cache, rebuilt by telling again when the cache is gone.

A shard-mode tell job writes the state after its generation, which the next
generation's shards and tell read. Written whole, that is the optimizer's full state
on the shared filesystem every generation (CMA-ME with 15 emitters in 100 dimensions:
4-15 MB, mostly covariance matrices and elites). Between kept checkpoints the job
writes a *light* state there instead: the run spec, the next batch and its seeds,
the metrics window and the best solution (what shards and the next tell read), for a
compact QD batch the elites its generation inserted (the next shards' parents), plus
a random token, the state it was told from and its shard files. The full state goes
to a node-local cache with the same token (a pickle of the whole state, in a private
folder in memory: ``$XDG_RUNTIME_DIR`` or ``/dev/shm``; ``EVOCAMP_STATE_CACHE`` names
another folder, ``0`` turns it off), where the next tell job finds it; each run keeps
one cached state. With a compact QD batch the tell also caches the next batch's parents
there (:func:`with_cached_elites`: the shards on its node read them instead of the
window's states).

When the cache does not hold a light state's full state (another node, a reboot, a
cleared cache), it is rebuilt from the last full state before it (the window's kept
checkpoint) by telling the window's stored shard results again. Tells are
deterministic, so the rebuilt state equals the lost one bit for bit; each rebuilt
generation is checked against the batch its light state stores.

States of kept generations (every ``checkpoint_every``-th) and of the last
generation are always written whole, so kept checkpoints and final states never
depend on the cache. A kept generation's state is cached as well (before the last
generation), keyed by its file's identity, so the next tell on the node does not read
it back (with delta checkpoints, a chain of files).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import secrets
import sys
from pathlib import Path

import numpy as np

from evocamp.base.errors import CorruptFileError, DiskFullError
from evocamp.base.files import atomic_copy, private_folder, replaced_atomically
from evocamp.base.sharding import ElitesAt
from evocamp.catalogue.factory import batch_format, optimizer_class
from evocamp.files.checkpoint import (
    StoredElites,
    holds_elites,
    light_attrs,
    read_state,
    write_state,
)
from evocamp.files.kept_archive import holds_cells
from evocamp.files.shard import read_shard
from evocamp.loop.engine import held_batch, tell
from evocamp.model.layout import ends_window
from evocamp.model.protocol import ELITES
from evocamp.model.runspec import run_label
from evocamp.model.state import RunState

#: Environment variable naming the cache folder (``0``: no cache, states written whole).
CACHE_VARIABLE = "EVOCAMP_STATE_CACHE"


def cache_folder() -> Path | None:
    """This user's node-local cache folder, or ``None`` without one.

    ``$EVOCAMP_STATE_CACHE`` when set (``0`` for none), else a private folder in
    ``$XDG_RUNTIME_DIR`` or ``/dev/shm`` (both memory on Linux).
    """
    setting = os.environ.get(CACHE_VARIABLE, "")
    if setting == "0":
        return None
    if setting:
        return private_folder(Path(setting))
    for base in (os.environ.get("XDG_RUNTIME_DIR", ""), "/dev/shm"):
        if base and os.path.isdir(base):
            return private_folder(Path(base) / f"evocamp-states-{os.getuid()}")
    return None


def run_cache(work: str | Path) -> Path | None:
    """The cache folder of the run whose working folder is ``work`` (``None``
    without a cache)."""
    folder = cache_folder()
    if folder is None:
        return None
    key = hashlib.sha256(str(Path(work).resolve()).encode()).hexdigest()[:24]
    return folder / key


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


def _elites_readable(state: RunState, told_from: str | Path) -> bool:
    """Whether a light state after ``told_from`` would give its batch's parents: when
    the batch names them by their cells, ``told_from`` must give every elite (a run
    continued by this version in the middle of a window written by an earlier one has
    light states without ``/inserted``; its next state is written whole)."""
    size = len(state.next_seeds)
    if not len(batch_format(state.spec).elites_read(state.next_batch, 0, size)):
        return True
    return holds_elites(told_from)


def write_told_state(
    output: str | Path,
    state: RunState,
    *,
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
    whole = _must_be_whole(state, total) or not _elites_readable(state, told_from)
    cache = run_cache(output.parent)
    if whole or cache is None:
        write_state(output, state, full_every=full_every)
        forget_run(output.parent)
        if cache is not None and total is not None and state.generation < total:
            _cache_whole(cache, output, state)
        return f"full state -> {output}"
    token = secrets.token_hex(8)
    cached = _cache_file(cache, state.generation)
    elites = _elites_file(cache, state.generation)
    try:
        cache.mkdir(exist_ok=True)
        with replaced_atomically(cached) as temporary, open(temporary, "wb") as stream:
            pickle.dump((token, state), stream, protocol=pickle.HIGHEST_PROTOCOL)
        _cache_parents(elites, state, token=token)
    except (OSError, DiskFullError) as error:  # a full /dev/shm: the shared filesystem takes it
        write_state(output, state, full_every=full_every)
        forget_run(output.parent)
        return f"full state -> {output} (cache {cache}: {error})"
    for other in cache.iterdir():
        if other not in (cached, elites):
            other.unlink(missing_ok=True)
    write_state(
        output,
        state,
        light=True,
        attrs={
            "light_token": token,
            "light_previous": os.path.relpath(told_from, output.parent),
            "light_shards": json.dumps([os.path.relpath(p, output.parent) for p in shard_files]),
        },
    )
    return f"light state -> {output}, full state cached in {cached}"


def read_full_state(path: str | Path) -> RunState:
    """Read a state whole: a whole state file as it is, a light one with its full state
    from the cache or rebuilt (:func:`restore`)."""
    cached = _cached_whole(Path(path))
    if cached is not None:
        return cached
    state = read_state(path)
    if state.optimizer is not None:
        return state
    return restore(path)


def keep_whole(
    source: str | Path,
    destination: str | Path,
    *,
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
        write_state(destination, state, full_every=full_every)
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
        cached = _cached_state(current, attrs)
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


def _cache_file(cache: Path, generation: int) -> Path:
    return cache / f"state_{generation:06d}.pickle"


def _elites_file(cache: Path, generation: int) -> Path:
    return cache / f"elites_{generation:06d}.pickle"


def _cache_parents(path: Path, state: RunState, *, token: str) -> None:
    """Cache the elites the next batch's offspring are made from (a compact QD batch's
    parents, :class:`~evocamp.base.sharding.ElitesAt`) for the shards on this node,
    with the light state's token; nothing when the batch names no parents."""
    held = held_batch(state).get(ELITES)
    if not isinstance(held, ElitesAt):
        return
    with replaced_atomically(path) as temporary, open(temporary, "wb") as stream:
        pickle.dump((token, held), stream, protocol=pickle.HIGHEST_PROTOCOL)


def with_cached_elites(batch: dict, *, state: str | Path, generation: int) -> dict:
    """A shard's batch read from the light state ``state`` (of ``generation``), its
    parents' elites from
    the node-local cache when the tell that wrote ``state`` ran on this node (one small
    read instead of the window's states); else as it was (:class:`StoredElites`).
    The shard checks every parent against the batch's digests either way."""
    stored = batch.get(ELITES)
    if not isinstance(stored, StoredElites) or stored.token is None:
        return batch
    cache = run_cache(Path(state).parent)
    if cache is None:
        return batch
    try:
        with open(_elites_file(cache, generation), "rb") as stream:
            token, elites = pickle.load(stream)
    except Exception:  # noqa: BLE001 - any unreadable cache entry is a miss
        return batch
    return {**batch, ELITES: elites} if token == stored.token else batch


def _file_identity(path: Path) -> tuple[int, int, int, int]:
    """What tells one written file from any other at ``path``: device, inode, size and
    modification time (a rewritten or replaced file has another; a hard link, the kept
    checkpoint, the same)."""
    status = path.stat()
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


def _whole_file(cache: Path) -> Path:
    return cache / "whole.pickle"


def _cache_whole(cache: Path, path: Path, state: RunState) -> None:
    """Cache a whole state written mid-run (a kept generation's) for the next tell on
    this node, which then does not read it back (with delta checkpoints: the chain back
    to the last full archive); keyed by the file's identity. A failure is a miss."""
    try:
        cache.mkdir(exist_ok=True)
        entry = (
            _file_identity(path),
            json.dumps(state.spec, sort_keys=True),
            pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),
        )
        with replaced_atomically(_whole_file(cache)) as temporary, open(temporary, "wb") as f:
            pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
    except (OSError, DiskFullError):
        forget_run(path.parent)


def _cached_whole(path: Path) -> RunState | None:
    """The state of the whole state file ``path`` from the cache, when the cache holds
    this very file's (:func:`_cache_whole`), else ``None``."""
    cache = run_cache(path.parent)
    if cache is None or not _whole_file(cache).exists():
        return None
    try:
        with open(_whole_file(cache), "rb") as stream:
            identity, spec, state = pickle.load(stream)
        if identity != _file_identity(path):
            return None
        optimizer_class(json.loads(spec))  # imports a plugin's module
        return pickle.loads(state)
    except Exception:  # noqa: BLE001 - any unreadable cache entry is a miss
        return None


def _cached_state(path: Path, attrs: dict) -> RunState | None:
    """The cached full state of the light state ``path``, if the cache holds it.

    The cache is a private folder in memory, written by this user's tell jobs (a
    temporary file renamed when complete), so a plain pickle is safe and fast there.
    """
    cache = run_cache(path.parent)
    if cache is None:
        return None
    try:
        with open(_cache_file(cache, int(attrs["generation"])), "rb") as stream:
            optimizer_class(json.loads(attrs["run_spec"]))  # imports a plugin's module
            token, state = pickle.load(stream)
    except Exception:  # noqa: BLE001 - any unreadable cache entry is a miss
        return None
    return state if token == attrs["light_token"] else None


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
        and all(np.array_equal(told.next_batch[k], stored.next_batch[k]) for k in told.next_batch)
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
