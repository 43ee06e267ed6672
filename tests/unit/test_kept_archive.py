"""Kept checkpoints whose archive is a delta of the previous kept one
(``checkpoint_full_every``): read back bit for bit, continued bit for bit, a bounded
chain, and a broken chain named."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import shard_results, write_final

from evocamp.base.errors import CorruptFileError
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.archive import read_archive
from evocamp.files.checkpoint import StoredElites, open_batch, read_state, write_state
from evocamp.loop.engine import initialise, tell
from evocamp.loop.evaluation import evaluate_shard
from evocamp.loop.state_cache import keep_whole
from evocamp.model.layout import RunFolder

ALGORITHMS = {
    "cvt": {
        "type": "cvt_map_elites",
        "emitters": 2,
        "emitter_batch_size": 8,
        "sigma": 0.2,
        "archive": {"cells": 64, "cvt_samples": 2000},
    },
    "cmamae": {
        "type": "cma_mae",
        "emitters": 2,
        "emitter_batch_size": 8,
        "sigma": 0.2,
        "archive": {"dims": [8, 8], "threshold_min": -100.0},
    },
}


def kept_run(folder: RunFolder, algorithm: str, *, generations: int, every: int, full_every: int):
    """A run on the 8-joint arm kept every ``every`` generations into ``folder`` with
    ``full_every``, and each kept state written in full beside (``full_<g>.h5``)."""
    config = validate_config(
        {
            "algorithms": {algorithm: ALGORITHMS[algorithm]},
            "domains": {"arm": {"type": "arm", "solution_dim": 8}},
            "shards": 2,
            "checkpoint_every": every,
        }
    )
    state = initialise(run_spec(config, algorithm=algorithm, domain="arm", seed=1))
    folder.checkpoints.mkdir(parents=True)
    write_state(
        folder.checkpoint(0), state, run=resolve_run(state.spec)
    )  # as `init` writes it: no /archive_cells
    for generation in range(1, generations + 1):
        state = tell(state, shard_results(state, 2))
        if generation % every == 0:
            write_state(
                folder.checkpoint(generation),
                state,
                run=resolve_run(state.spec),
                full_every=full_every,
            )
            write_state(folder.path / f"full_{generation}.h5", state, run=resolve_run(state.spec))


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_delta_checkpoints_read_back_and_continue_bit_for_bit(tmp_path, algorithm):
    """Kept every 2 generations with a full archive every 3 kept checkpoints: generation
    2 (its predecessor, generation 0, has no table) and 8 full, 4, 6 and 10 deltas of
    the one before (CMA-MAE's learning archive too); each reads back as the archive
    written in full, and a run continued from it (its shards reading their parents
    through the chain) gives the same archive."""
    folder = RunFolder(tmp_path / "run")
    kept_run(folder, algorithm, generations=10, every=2, full_every=3)
    chain = {}
    for generation in (2, 4, 6, 8, 10):
        with h5py.File(folder.checkpoint(generation), "r") as handle:
            chain[generation] = (int(handle.attrs["delta_chain"]), "archive_delta" in handle)
            if "archive_delta" in handle:
                assert handle.attrs["delta_base"] == generation - 2
                assert handle.attrs["delta_base_file"] == f"checkpoints/gen_{generation - 2:06d}.h5"
                assert len(handle["archive_delta/index"]) < len(handle["archive_cells/index"])
                # CMA-MAE's learning archive: the rows changed (thresholds too), by cell.
                learning = handle["optimizer"].attrs.get("learning_delta", False)
                assert learning == (algorithm == "cmamae")
    assert chain == {2: (0, False), 4: (1, True), 6: (2, True), 8: (0, False), 10: (1, True)}
    for generation in (6, 10):
        path, full = (
            folder.checkpoint(generation),
            read_state(folder.path / f"full_{generation}.h5"),
        )
        read = read_state(path)
        assert write_final(tmp_path / f"read_{generation}.h5", read) == write_final(
            tmp_path / f"full_{generation}.h5", full
        )
        elites, expected = read_archive(path), read_archive(folder.path / f"full_{generation}.h5")
        assert sorted(elites) == sorted(expected)
        for name in set(elites) - {"attrs", "file_attrs"}:
            assert elites[name].tobytes() == expected[name].tobytes()
        with open_batch(path, resolve=resolve_run) as (run, batch_generation, batch, seeds, _):
            from_disk = [
                evaluate_shard(
                    run, batch=batch, seeds=seeds, generation=batch_generation, shard=s, shards=2
                )
                for s in range(2)
            ]
        continued = tell(read, from_disk)
        expected = tell(full, shard_results(full, 2))
        assert write_final(tmp_path / f"a_{generation}.h5", continued) == write_final(
            tmp_path / f"b_{generation}.h5", expected
        )


def test_a_broken_chain_is_named(tmp_path):
    """A delta whose base is missing, or holds another archive, is refused with one
    message naming both files, never read as a wrong archive."""
    folder = RunFolder(tmp_path / "run")
    kept_run(folder, "cvt", generations=6, every=2, full_every=10)
    delta, base = folder.checkpoint(6), folder.checkpoint(4)
    with h5py.File(base, "r") as handle:
        digest = handle.attrs["archive_digest"]
    base.rename(tmp_path / "away.h5")
    with pytest.raises(CorruptFileError) as caught:
        read_state(delta)
    assert str(caught.value) == (
        f"checkpoint {delta} (run cvt/arm/seed1, generation 6) holds its archive "
        f"as the cells changed since the kept checkpoint of generation 4 (archive digest "
        f"{digest}), {base}, which is missing: restore that file, or delete this "
        "checkpoint and the later ones of the run and rerun to recompute them"
    )
    with h5py.File(delta, "r") as handle:  # a parent the delta does not hold: its base's
        unchanged = np.setdiff1d(handle["archive_cells/index"], handle["archive_delta/index"])
    with pytest.raises(CorruptFileError) as through_parents:
        StoredElites(delta)[unchanged[:1]]
    assert str(through_parents.value) == str(caught.value)
    shown = subprocess.run(
        [sys.executable, "-m", "evocamp", "reevaluate-shard", "--state", str(delta)]
        + ["--shard", "0", "--shards", "1", "--output", str(tmp_path / "r.h5"), "--repeats", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "EVOCAMP_WARM_START": "0"},
    )
    assert shown.returncode != 0
    assert f"evocamp: error: {caught.value}" in shown.stderr.splitlines()
    folder.checkpoint(2).rename(base)  # another kept checkpoint in its place
    with h5py.File(base, "r") as handle:
        other = handle.attrs["archive_digest"]
    with pytest.raises(CorruptFileError) as caught:
        read_archive(delta)
    assert str(caught.value).endswith(
        f"{base}, which holds another archive (generation 2, digest {other}): restore that "
        "file, or delete this checkpoint and the later ones of the run and rerun to "
        "recompute them"
    )


def test_the_window_end_state_is_written_as_kept_and_linked(tmp_path):
    """The whole state a window's last tell writes (``work/state_<g>.h5``) is already a
    delta of the kept checkpoint before it, and the keep step links it into
    ``checkpoints/`` rather than writing the archive again; with
    ``checkpoint_full_every`` 1 it has no table (as before deltas)."""
    folder = RunFolder(tmp_path / "run")
    kept_run(folder, "cvt", generations=4, every=2, full_every=10)
    state = read_state(folder.checkpoint(4))
    for _ in range(2):
        state = tell(state, shard_results(state, 2))
    folder.work.mkdir()
    write_state(folder.work_state(6), state, run=resolve_run(state.spec), full_every=10)
    keep_whole(
        folder.work_state(6), folder.checkpoint(6), run=resolve_run(state.spec), full_every=10
    )
    assert folder.work_state(6).stat().st_ino == folder.checkpoint(6).stat().st_ino
    with h5py.File(folder.checkpoint(6), "r") as handle:
        assert handle.attrs["delta_base_file"] == "checkpoints/gen_000004.h5"
        assert len(handle["archive_delta/index"]) < len(handle["archive_cells/index"])
    write_state(folder.work_state(8), state, run=resolve_run(state.spec))
    with h5py.File(folder.work_state(8), "r") as handle:
        assert "archive_cells" not in handle and "archive" in handle


def test_a_shards_parents_are_read_without_the_rows_around_them(tmp_path):
    """A shard reads its parents' rows from a state file opened for scattered reads:
    HDF5 then reads those rows (and the file's metadata), not its 64 kB data sieve
    around each row (which read 8 times the rows of 1,000 parameters)."""
    from evocamp.files.hdf5 import open_for_reading
    from evocamp.files.kept_archive import rows_of

    path = tmp_path / "state.h5"
    solutions = np.random.default_rng(0).standard_normal((400, 1000))
    with h5py.File(path, "w") as handle:
        handle.attrs["schema_version"] = 3
        handle["archive/index"] = np.arange(400, dtype=np.int64)
        handle["archive/solution"] = solutions
    cells = np.arange(3, 400, 20, dtype=np.int64)  # 20 rows of 8 kB, 160 kB apart

    def read(scattered: bool) -> tuple[int, dict]:
        before = _read_bytes()
        with open_for_reading(path, what="checkpoint", scattered=scattered) as handle:
            rows = rows_of(handle["archive"], cells)
        return _read_bytes() - before, rows

    wanted = solutions[cells].nbytes
    scattered, rows = read(True)
    assert all(rows[cell].tobytes() == solutions[cell].tobytes() for cell in cells.tolist())
    assert scattered < wanted + 16_000, (scattered, wanted)
    assert read(False)[0] > 4 * wanted  # what the data sieve reads


def _read_bytes() -> int:
    """Bytes this process has read through system calls so far (``/proc/self/io``)."""
    line = next(
        line for line in open("/proc/self/io").read().splitlines() if line.startswith("rchar:")
    )
    return int(line.split()[1])
