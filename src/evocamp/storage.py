"""HDF5 storage: crash-safe writes, run states (checkpoints), shards and archives.

Every file is written to a temporary file in the same folder, flushed, fsynced and
renamed over its final name, so a kill at any instant leaves either the old file
or the new one. Dataset creation times are not recorded, so files with the same
content are bitwise identical. The layout is documented in README.md
("HDF5 schema"); ``SCHEMA_VERSION`` changes whenever it does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

SCHEMA_VERSION = 3
#: Older versions this code still reads (QD runs only; version 1: the scheduler as a
#: plain pickle, version 2: a compact pickle of the scheduler).
READABLE_SCHEMA_VERSIONS = (1, 2, 3)
METRIC_FIELDS = (
    ("generation", np.int64),
    ("evaluations", np.int64),
    ("qd_score", np.float64),
    ("norm_qd_score", np.float64),
    ("coverage", np.float64),
    ("obj_max", np.float64),
    ("obj_mean", np.float64),
    ("num_elites", np.int64),
    ("wall_seconds", np.float64),
    ("eval_seconds", np.float64),
    ("best_objective", np.float64),
    ("gen_obj_max", np.float64),
    ("gen_obj_mean", np.float64),
    ("sigma", np.float64),
    ("fit_seconds", np.float64),
    ("propose_seconds", np.float64),
    ("utilisation", np.float64),
)
METRIC_DTYPE = np.dtype(list(METRIC_FIELDS))
#: Metric columns an optimizer's ``stats()`` may fill.
OPTIMIZER_STATS = ("sigma", "fit_seconds", "propose_seconds")


def blank_metric_rows(count: int) -> np.ndarray:
    """``count`` metric rows: integer columns 0, float columns NaN."""
    return np.repeat(_BLANK_METRIC_ROW, count)


def _blank_metric_row() -> np.ndarray:
    row = np.zeros(1, dtype=METRIC_DTYPE)
    for name in METRIC_DTYPE.names:
        if METRIC_DTYPE[name].kind == "f":
            row[name] = np.nan
    return row


_BLANK_METRIC_ROW = _blank_metric_row()


def as_metric_rows(rows: np.ndarray) -> np.ndarray:
    """Metric rows in ``METRIC_DTYPE``; columns an older file lacks are NaN (0 for
    integer columns), but ``best_objective``, which is the QD archive's ``obj_max``."""
    if rows.dtype == METRIC_DTYPE:
        return rows
    out = blank_metric_rows(len(rows))
    for name in rows.dtype.names:
        if name in METRIC_DTYPE.names:
            out[name] = rows[name]
    if "best_objective" not in rows.dtype.names:
        # Written before version 3 (QD runs only): the archive's best is the best so far.
        out["best_objective"] = rows["obj_max"]
    return out


class CorruptFileError(RuntimeError):
    """A checkpoint, shard or archive file cannot be read back."""


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def replaced_atomically(path: str | Path):
    """Yield a temporary path beside ``path``; when the block succeeds, the temporary
    file is fsynced and renamed over ``path`` (and the folder fsynced).

    On an exception the temporary file is removed and ``path`` is left as it was, so
    a reader (or a kill at any instant) sees either the old file or the new one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield temporary
        descriptor = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
        _fsync_folder(path.parent)
    finally:
        temporary.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_h5(path: str | Path):
    """Open a new HDF5 file for writing that appears at ``path`` only when complete."""
    with replaced_atomically(path) as temporary:
        with h5py.File(temporary, "w", track_order=False) as handle:
            yield handle
            handle.flush()


def atomic_copy(source: str | Path, destination: str | Path) -> None:
    """Copy a file so that ``destination`` is either absent/old or complete: a hard
    link where the filesystem allows one (no bytes written; files are never modified in
    place, only replaced), else a copy."""
    import shutil

    with replaced_atomically(destination) as temporary:
        try:
            os.link(source, temporary)
        except OSError:
            shutil.copyfile(source, temporary)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a text file atomically (temporary file, fsync, rename)."""
    with replaced_atomically(path) as temporary:
        temporary.write_text(text)


def write_dataset(group: h5py.Group, name: str, data) -> h5py.Dataset:
    """Create a dataset without creation timestamps (bitwise-reproducible files)."""
    return group.create_dataset(name, data=np.asarray(data), track_times=False)


@contextlib.contextmanager
def open_for_reading(path: str | Path, *, what: str):
    """Open an HDF5 file, turning any low-level failure into a :class:`CorruptFileError`.

    Parameters
    ----------
    path : str or Path
        File to open.
    what : str
        What the file is, for the message (e.g. ``"checkpoint of generation 12"``).
    """
    try:
        handle = h5py.File(path, "r")
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


# --- archives -------------------------------------------------------------------


def write_archive_group(handle: h5py.File, archive, spec: dict) -> None:
    """Store an archive's elites as plain datasets in ``/archive`` (readable by h5py alone).

    Elites are sorted by cell index so the layout does not depend on insertion order.
    """
    group = handle.create_group("archive")
    data = archive.data()
    order = np.argsort(data["index"], kind="stable")
    for field in sorted(data):
        write_dataset(group, field, np.asarray(data[field])[order])
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


def _write_identity(handle: h5py.File, spec: dict, *, kind: str, generation: int) -> None:
    handle.attrs["schema_version"] = SCHEMA_VERSION
    handle.attrs["kind"] = kind
    handle.attrs["generation"] = generation
    for key in ("campaign", "algorithm", "domain", "seed", "master_seed"):
        handle.attrs[key] = spec[key]


def write_result_group(handle: h5py.File, optimizer) -> None:
    """Store the arrays of an optimizer's ``result()`` (e.g. an ES centre) in ``/result``."""
    result_of = getattr(optimizer, "result", None)
    if not callable(result_of):
        return
    group = handle.create_group("result")
    for name, values in sorted(result_of().items()):
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
    optimizer,
    best: dict | None,
    generation: int,
    evaluations: int,
) -> None:
    """Write ``archive.h5``: the final elites of a run (``/archive``, when the run has an
    archive, else its best solution in ``/best``) and the optimizer's result arrays
    (``/result``), with no wall-clock content."""
    with atomic_h5(path) as handle:
        _write_identity(handle, spec, kind="archive", generation=generation)
        handle.attrs["evaluations"] = evaluations
        if archive is not None:
            write_archive_group(handle, archive, spec)
        write_best_group(handle, best)
        write_result_group(handle, optimizer)


def read_archive(path: str | Path) -> dict:
    """Read the ``/archive`` group of an archive or checkpoint file as numpy arrays (only
    ``attrs`` and ``file_attrs`` when the run has no archive)."""
    with open_for_reading(path, what="archive") as handle:
        data = {"attrs": {}}
        if "archive" in handle:  # runs on domains without measures have none
            group = handle["archive"]
            data = {name: group[name][()] for name in group}
            data["attrs"] = dict(group.attrs)
        data["file_attrs"] = dict(handle.attrs)
    return data


# --- run states (checkpoints) ---------------------------------------------------


@dataclass
class RunState:
    """Everything a run needs to continue after a generation.

    Attributes
    ----------
    spec : dict
        The run spec.
    generation : int
        The last generation told (0: freshly initialised).
    optimizer : object or None
        The optimizer (:mod:`evocamp.optimizers`); ``None`` when read with
        ``with_optimizer=False``.
    archive : ribs archive or None
        The run's elites: a QD optimizer's result archive, or the passive archive of
        another family; ``None`` without measures (or when read without the optimizer).
    next_batch : dict of str to numpy.ndarray
        The batch of generation ``generation + 1``, as the optimizer describes it.
    next_seeds : numpy.ndarray
        Its evaluation seeds, one per solution.
    metrics_window : numpy.ndarray
        Metric rows (``METRIC_DTYPE``) since the last kept checkpoint.
    finished_at : float
        Unix time at which this state was written.
    best : dict or None
        Runs without an archive: the best solution evaluated so far, with its
        ``objective`` and extra fields (empty before generation 1); ``None`` otherwise.
    """

    spec: dict
    generation: int
    optimizer: object
    archive: object
    next_batch: dict
    next_seeds: np.ndarray
    metrics_window: np.ndarray
    finished_at: float
    best: dict | None = None


def _optimizer_digest(blob: bytes, rows: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256(blob)
    for key in sorted(rows):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(rows[key]).tobytes())
    return digest.hexdigest()


def _array_stores(optimizer, archive) -> dict:
    """Per-cell array stores to store compactly: ``result`` (the run's archive, whose
    elites ``/archive`` holds) and those the optimizer names (e.g. CMA-MAE's archive)."""
    stores = {}
    own = getattr(optimizer, "archive_stores", None)
    if callable(own):
        stores.update(own())
    if archive is not None:
        stores["result"] = archive._store
    return stores


def _compact_optimizer(state: RunState):
    """The compact pickle (``evocamp.compact_pickle``) of the optimizer and the archive:
    per-cell arrays reduced to the rows that are read, copies of the batch referenced."""
    from evocamp import compact_pickle
    from evocamp.algorithms import store_rows

    rows = {}
    for name, store in _array_stores(state.optimizer, state.archive).items():
        for field, (array, indices) in store_rows(store).items():
            rows[id(array)] = (f"{name}/{field}", indices)
    compact = compact_pickle.dump(
        (state.optimizer, state.archive), rows=rows, shared=_shared_batch(state.next_batch)
    )
    return compact, dict(rows.values())


def _shared_batch(batch: dict) -> dict[str, np.ndarray]:
    """The batch's arrays as the compact pickle refers to them (``next_batch``: a plain
    batch's solutions, as in version 2; ``next_batch/<name>``: a compact batch's arrays,
    e.g. an ES centre that equals the optimizer's own, stored once)."""
    if set(batch) == {"solutions"}:
        return {"next_batch": batch["solutions"]}
    return {f"next_batch/{name}": np.asarray(values) for name, values in batch.items()}


def write_state(
    path: str | Path, state: RunState, *, light: bool = False, attrs: dict | None = None
) -> None:
    """Write a run state (checkpoint) atomically.

    The optimizer and archive are stored as one compact pickle plus the rows of their
    archives that are read: those of the run's archive are the elites in ``/archive``
    (not stored twice), those of another archive (CMA-MAE's) go to ``/optimizer/rows``.

    Parameters
    ----------
    path : str or Path
        The file.
    state : RunState
        The state.
    light : bool
        Write a *light* state: everything but ``/archive`` and ``/optimizer``
        (:mod:`evocamp.state_cache` finds or rebuilds them).
    attrs : dict, optional
        More file attributes (what :mod:`evocamp.state_cache` needs for that).
    """
    with atomic_h5(path) as handle:
        _write_identity(handle, state.spec, kind="state", generation=state.generation)
        handle.attrs["run_spec"] = json.dumps(state.spec, sort_keys=True)
        handle.attrs["finished_at"] = state.finished_at
        for name, value in (attrs or {}).items():
            handle.attrs[name] = value
        if not light and state.archive is not None:
            write_archive_group(handle, state.archive, state.spec)
        write_best_group(handle, state.best)
        if not light:
            _write_optimizer_group(handle, state)
        batch = handle.create_group("next_batch")
        batch.attrs["size"] = len(state.next_seeds)
        for name in sorted(state.next_batch):
            write_dataset(batch, name, state.next_batch[name])
        write_dataset(handle, "next_seeds", state.next_seeds)
        write_dataset(handle, "metrics_window", state.metrics_window.astype(METRIC_DTYPE))


def is_light(handle: h5py.File) -> bool:
    """Whether an open state file is a light state (no ``/optimizer`` and ``/archive``:
    see :mod:`evocamp.state_cache`)."""
    return "optimizer" not in handle


def _write_optimizer_group(handle: h5py.File, state: RunState) -> None:
    from evocamp.optimizers import family_of

    compact, indices = _compact_optimizer(state)
    optimizer = handle.create_group("optimizer")
    optimizer.attrs["family"] = family_of(state.spec["algorithm_spec"])
    optimizer.attrs["class"] = (
        f"{type(state.optimizer).__module__}:{type(state.optimizer).__qualname__}"
    )
    write_dataset(optimizer, "pickle", np.frombuffer(compact.blob, dtype=np.uint8))
    rows = optimizer.create_group("rows")
    for key in sorted(compact.rows):
        store, field = key.split("/", 1)
        if store == "result" and field != "occupied_list":
            # The elites in /archive, sorted by cell index: the same rows.
            if not np.array_equal(handle["archive/index"][()], indices[key]):
                raise RuntimeError(f"/archive does not hold the rows of {key}")
            continue
        write_dataset(rows, key, compact.rows[key])
        write_dataset(rows, f"{key}.rows", indices[key])
    optimizer.attrs["row_keys"] = json.dumps(sorted(compact.rows))
    optimizer.attrs["sha256"] = _optimizer_digest(compact.blob, compact.rows)


def _next_seeds(handle: h5py.File) -> h5py.Dataset:
    """The evaluation seeds of the next batch (``/next_batch/seeds`` before version 3)."""
    if handle.attrs["schema_version"] < 3:
        return handle["next_batch/seeds"]
    return handle["next_seeds"]


def _stored_batch(handle: h5py.File) -> dict[str, np.ndarray]:
    if handle.attrs["schema_version"] < 3:
        return {"solutions": handle["next_batch/solutions"][()]}
    return {name: dataset[()] for name, dataset in handle["next_batch"].items()}


def read_state(path: str | Path, *, with_optimizer: bool = True) -> RunState:
    """Read a run state; raise :class:`CorruptFileError` naming the file if broken.

    The optimizer of a light state comes from the node-local cache or is rebuilt
    (:func:`evocamp.state_cache.restore`).
    """
    with open_for_reading(path, what="checkpoint") as handle:
        if not with_optimizer or not is_light(handle):
            return _state_of(handle, path=path, with_optimizer=with_optimizer)
    from evocamp.state_cache import restore

    return restore(path)


def _state_of(handle: h5py.File, *, path, with_optimizer: bool) -> RunState:
    spec = json.loads(handle.attrs["run_spec"])
    next_batch = _stored_batch(handle)
    optimizer = archive = None
    if with_optimizer:
        optimizer, archive = _read_optimizer(handle, next_batch, path=path, spec=spec)
    return RunState(
        spec=spec,
        generation=int(handle.attrs["generation"]),
        optimizer=optimizer,
        archive=archive,
        next_batch=next_batch,
        next_seeds=_next_seeds(handle)[()],
        metrics_window=as_metric_rows(handle["metrics_window"][()]),
        finished_at=float(handle.attrs["finished_at"]),
        best={name: data[()] for name, data in handle["best"].items()}
        if "best" in handle
        else None,
    )


def _read_optimizer(handle: h5py.File, batch: dict, *, path, spec: dict):
    """Unpickle the optimizer and archive of a checkpoint, checking the digest.

    Checkpoints before version 3 (QD only) hold the pyribs scheduler alone.
    """
    from evocamp import compact_pickle
    from evocamp.optimizers import optimizer_class

    optimizer_class(spec)  # imports a plugin's module (from its python_path) for unpickling
    optimizer = handle["optimizer"]
    version = handle.attrs["schema_version"]
    blob = optimizer["pickle" if version >= 3 else "scheduler"][()].tobytes()
    if version == 1:  # a plain pickle
        _check_digest(hashlib.sha256(blob).hexdigest(), handle, path=path, spec=spec)
        return _wrapped_scheduler(pickle.loads(blob))
    stored = {key: _stored_rows(handle, key) for key in json.loads(optimizer.attrs["row_keys"])}
    digest = _optimizer_digest(blob, {key: rows for key, (rows, _) in stored.items()})
    _check_digest(digest, handle, path=path, spec=spec)
    loaded = compact_pickle.load(
        blob,
        rows=lambda key: stored[key][0],
        row_indices=lambda key: stored[key][1],
        shared=_shared_batch(batch),
    )
    return loaded if version >= 3 else _wrapped_scheduler(loaded)


def _wrapped_scheduler(scheduler):
    """A version-1/2 checkpoint's scheduler behind the optimizer interface."""
    from evocamp.algorithms import QDOptimizer

    optimizer = QDOptimizer(scheduler)
    return optimizer, optimizer.archive


def _check_digest(digest: str, handle: h5py.File, *, path, spec: dict) -> None:
    if digest != handle["optimizer"].attrs["sha256"]:
        raise CorruptFileError(
            f"checkpoint {path} (run {run_label(spec)}, generation "
            f"{int(handle.attrs['generation'])}): the optimizer state does not match its "
            "checksum; delete the file and rerun to recompute it"
        )


def _stored_rows(handle: h5py.File, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The stored rows of ``key`` (``store/field``) and the row indices they belong to."""
    rows = handle["optimizer/rows"]
    if key in rows:
        return rows[key][()], rows[f"{key}.rows"][()]
    field = key.split("/", 1)[1]
    return handle["archive"][field][()], handle["archive/index"][()]


def kept_for_spec(path: str | Path, spec: dict) -> bool:
    """Whether ``path`` is a readable checkpoint written for exactly this run spec."""
    try:
        with h5py.File(path, "r") as handle:
            return json.loads(handle.attrs["run_spec"]) == spec
    except (OSError, KeyError, ValueError):
        return False


@dataclass
class ShardInput:
    """One shard's slice of a generation's batch, as read from a checkpoint."""

    spec: dict
    generation: int
    start: int
    solutions: np.ndarray
    seeds: np.ndarray
    #: Seconds spent making the solutions (``evocamp.optimizers.SHARD_STATS``).
    stats: dict
    #: Whether the shard proposed them (they go back with its results).
    proposed: bool


def read_shard_input(path: str | Path, *, shard: int, shards: int) -> ShardInput:
    """Read only shard ``shard`` of ``shards`` of the next batch of a checkpoint.

    The batch belongs to the generation after the checkpoint's; the slice is
    ``shard_bounds(batch, shards, shard)``. Its solutions are materialised by the
    optimizer's class from the stored batch (:func:`evocamp.optimizers.materialise`),
    which reads only what it needs (a QD shard: its rows; an ES shard: the centre and
    its noise seeds).
    """
    from evocamp.optimizers import optimizer_class, proposal, proposes_in_shards

    with open_for_reading(path, what="checkpoint") as handle:
        spec = json.loads(handle.attrs["run_spec"])
        seeds = _next_seeds(handle)
        start, stop = shard_bounds(seeds.shape[0], shards, shard)
        cls = optimizer_class(spec)
        # Version 1/2 batches (QD: /next_batch/solutions) are plain batches as well.
        solutions, stats = proposal(cls, handle["next_batch"], start, stop)
        return ShardInput(
            spec=spec,
            generation=int(handle.attrs["generation"]) + 1,
            start=start,
            solutions=solutions,
            seeds=seeds[start:stop],
            stats=stats,
            proposed=proposes_in_shards(cls),
        )


def run_label(spec: dict) -> str:
    """Human-readable name of a run: ``algorithm/domain/seed<k>``."""
    return f"{spec['algorithm']}/{spec['domain']}/seed{spec['seed']}"


# --- shards ---------------------------------------------------------------------


@dataclass
class ShardResult:
    """Evaluation results of one shard (a contiguous slice of a generation's batch)."""

    generation: int
    shard: int
    start: int
    stop: int
    objective: np.ndarray
    measures: np.ndarray
    eval_seconds: np.ndarray
    extra: dict
    #: The evaluated solutions, when the shard proposed them (``proposes_in_shards``).
    solutions: np.ndarray | None = None
    #: Seconds the shard spent proposing (``evocamp.optimizers.SHARD_STATS``).
    stats: dict = dataclasses.field(default_factory=dict)


def write_shard(path: str | Path, result: ShardResult) -> None:
    """Write a shard's results atomically."""
    with atomic_h5(path) as handle:
        handle.attrs["schema_version"] = SCHEMA_VERSION
        handle.attrs["kind"] = "shard"
        for key in ("generation", "shard", "start", "stop"):
            handle.attrs[key] = getattr(result, key)
        write_dataset(handle, "objective", result.objective)
        write_dataset(handle, "measures", result.measures)
        write_dataset(handle, "eval_seconds", result.eval_seconds)
        extra = handle.create_group("extra")
        for name in sorted(result.extra):
            write_dataset(extra, name, result.extra[name])
        if result.solutions is not None:
            write_dataset(handle, "solutions", result.solutions)
        for name, value in sorted(result.stats.items()):
            handle.attrs[f"stat_{name}"] = value


def read_shard(path: str | Path) -> ShardResult:
    """Read a shard file."""
    with open_for_reading(path, what="shard") as handle:
        return ShardResult(
            generation=int(handle.attrs["generation"]),
            shard=int(handle.attrs["shard"]),
            start=int(handle.attrs["start"]),
            stop=int(handle.attrs["stop"]),
            objective=handle["objective"][()],
            measures=handle["measures"][()],
            eval_seconds=handle["eval_seconds"][()],
            extra={name: handle["extra"][name][()] for name in handle["extra"]},
            solutions=handle["solutions"][()] if "solutions" in handle else None,
            stats={
                name.removeprefix("stat_"): float(value)
                for name, value in handle.attrs.items()
                if name.startswith("stat_")
            },
        )


def prune_work_files(work: Path, *, up_to: int) -> int:
    """Delete working states and shard folders of generations ``<= up_to``.

    Snakemake keeps ``temp()`` files until no checkpoint job is pending, which in a
    windowed chain means until the end of the run; a kept checkpoint makes every
    older working file unnecessary, so it removes them itself, with Snakemake's
    metadata records of every working file of those generations (also of those
    Snakemake removed itself); ``work`` is named as Snakemake names it.

    Returns
    -------
    int
        Number of files removed.
    """
    import shutil

    from evocamp.snakemake_folder import forget_records_below

    def in_window(relative: str) -> bool:
        name = relative.split("/", 1)[0]
        number = name.removeprefix("state_").removeprefix("gen_").removesuffix(".h5")
        return number.isdigit() and int(number) <= up_to

    removed = 0
    for path in sorted(work.glob("state_*.h5")) + sorted(work.glob("gen_*")):
        if not in_window(path.name):
            continue
        if path.is_dir():
            removed += sum(1 for _ in path.iterdir())
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
            removed += 1
    forget_records_below(work, select=in_window)
    return removed


def shard_bounds(batch: int, shards: int, shard: int) -> tuple[int, int]:
    """Slice ``[start, stop)`` of shard ``shard`` when ``batch`` solutions are split
    into ``shards`` contiguous, near-equal parts."""
    base, remainder = divmod(batch, shards)
    start = shard * base + min(shard, remainder)
    return start, start + base + (1 if shard < remainder else 0)
