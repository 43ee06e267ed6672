"""Shard-mode states between kept checkpoints: light files, the node-local cache and
rebuilding by telling again (evocamp.loop.state_cache), on real HDF5 files."""

from __future__ import annotations

import json
import os
import pickle

import h5py
import numpy as np
import pytest
from conftest import shard_results, write_final

from evocamp.base.errors import CorruptFileError
from evocamp.catalogue.factory import resolve_run
from evocamp.cli import main
from evocamp.config import run_spec, validate_config
from evocamp.files.checkpoint import write_state
from evocamp.files.shard import write_shard
from evocamp.loop.engine import initialise, tell
from evocamp.loop.state_cache import (
    forget_run,
    keep_whole,
    read_full_state,
    run_cache,
    write_told_state,
)

ALGORITHMS = {
    "cmame": {"type": "cma_me", "emitters": 2, "batch_size": 6},
    "oes": {"type": "openai_es", "popsize": 12, "sigma": 0.1},
    "dbo": {
        "type": "qucb_decentralised",
        "batch_size": 4,
        "initial_points": 4,
        "candidates": 64,
        "trees": 5,
    },
}
SHARDS = 2
KEEP_EVERY = 10
TOTAL = 20


def spec_of(algorithm: str) -> dict:
    domain = {"type": "sphere", "solution_dim": 8}
    if algorithm == "dbo":
        domain = {"type": "ackley", "solution_dim": 3}
    config = validate_config(
        {
            "algorithms": {algorithm: ALGORITHMS[algorithm]},
            "domains": {"d": domain},
            "shards": SHARDS,
            "checkpoint_every": KEEP_EVERY,
            "generations": TOTAL,
        }
    )
    return run_spec(config, algorithm=algorithm, domain="d", seed=5)


def run_shard_mode(folder, spec, generations: int):
    """Tell ``generations`` generations as shard-mode jobs do: the kept checkpoint of
    generation 0, shard files, and the tell step itself (``evocamp tell``)."""
    checkpoint = folder / "checkpoints" / "gen_000000.h5"
    write_state(checkpoint, initialise(spec), run=resolve_run(spec))
    previous = checkpoint
    for generation in range(1, generations + 1):
        state = read_full_state(previous)
        paths = []
        for result in shard_results(state, SHARDS):
            path = folder / "work" / f"gen_{generation:06d}" / f"shard_{result.shard:03d}.h5"
            write_shard(path, result)
            paths.append(path)
        output = folder / "work" / f"state_{generation:06d}.h5"
        arguments = ["tell", "--state", str(previous), "--shard-files", *map(str, paths)]
        assert main([*arguments, "--output", str(output), "--total", str(TOTAL)]) == 0
        previous = output
    return previous


def in_memory(spec, generations: int):
    state = initialise(spec)
    for _ in range(generations):
        state = tell(state, shard_results(state, SHARDS))
    return state


def final_bytes(folder, state, name: str) -> bytes:
    """The final archive file of ``state`` after one more generation."""
    state = tell(state, shard_results(state, SHARDS))
    path = folder / f"{name}.h5"
    write_final(path, state)
    batch = b"".join(state.next_batch[k].tobytes() for k in sorted(state.next_batch))
    return path.read_bytes() + batch


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "node-cache"
    monkeypatch.setenv("EVOCAMP_STATE_CACHE", str(folder))
    return folder


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_light_states_continue_bitwise_from_the_cache_and_when_rebuilt(tmp_path, cache, algorithm):
    """Between kept generations the shared folder gets light states (no optimizer, no
    archive) and the cache one full state per run; the state read back, from the cache
    or rebuilt from the kept checkpoint and the shard files after the cache is gone,
    continues bit for bit like a run kept in memory."""
    spec = spec_of(algorithm)
    last = run_shard_mode(tmp_path / "run", spec, 6)
    with h5py.File(last, "r") as handle:
        assert "optimizer" not in handle and "archive" not in handle
        assert handle.attrs["light_previous"] == "state_000005.h5"
    cached = sorted(run_cache(last.parent).iterdir())
    assert [p.name for p in cached] == ["state_000006.pickle"]
    with open(cached[0], "rb") as stream:
        identity, _ = pickle.load(stream)
        state = pickle.load(stream)
    assert state.generation == 6 and state.optimizer is not None
    status = last.stat()
    assert identity == (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    expected = final_bytes(tmp_path, in_memory(spec, 6), "memory")
    assert final_bytes(tmp_path, read_full_state(last), "from_cache") == expected
    forget_run(last.parent)
    assert not run_cache(last.parent).exists()
    assert final_bytes(tmp_path, read_full_state(last), "rebuilt") == expected


def test_stale_cache_entries_are_not_used(tmp_path, cache):
    """A cached state is the full state of one file (its identity: device, inode, size,
    modification time); a light state written again (e.g. by a rerun of its tell on
    another node) is another file, whose full state is rebuilt, not taken from the
    cache."""
    spec = spec_of("cmame")
    last = run_shard_mode(tmp_path / "run", spec, 4)
    expected = final_bytes(tmp_path, in_memory(spec, 4), "memory")
    (cached,) = run_cache(last.parent).iterdir()
    with open(cached, "rb") as stream:
        header = pickle.load(stream)
    # A full state of generation 4 of another seed: were it used, the results would differ.
    other = in_memory(dict(spec, seed=6, master_seed=spec["master_seed"] + 1), 4)
    cached.write_bytes(pickle.dumps(header) + pickle.dumps(other))
    assert final_bytes(tmp_path, read_full_state(last), "cached") != expected
    copy = last.with_suffix(".copy")
    copy.write_bytes(last.read_bytes())
    os.replace(copy, last)
    assert final_bytes(tmp_path, read_full_state(last), "rebuilt") == expected


def test_kept_and_last_generations_are_written_whole(tmp_path, cache):
    spec = spec_of("oes")
    folder = tmp_path / "run"
    run_shard_mode(folder, spec, KEEP_EVERY + 1)
    for generation, whole in ((KEEP_EVERY - 1, False), (KEEP_EVERY, True), (KEEP_EVERY + 1, False)):
        with h5py.File(folder / "work" / f"state_{generation:06d}.h5", "r") as handle:
            assert ("optimizer" in handle) == whole, generation
    state = read_full_state(folder / "work" / f"state_{KEEP_EVERY + 1:06d}.h5")
    told = tell(state, shard_results(state, SHARDS))
    output = folder / "work" / "last.h5"
    write_told_state(
        output, told, run=resolve_run(spec), told_from=folder, shard_files=[], total=KEEP_EVERY + 2
    )
    with h5py.File(output, "r") as handle:
        assert "optimizer" in handle
    assert not run_cache(output.parent).exists()


def test_a_kept_state_is_read_from_the_cache_by_the_next_tell(tmp_path, cache):
    """A kept generation's whole state is also cached, keyed by the file's identity: the
    next tell on the node reads it from there (not the file, nor a delta chain behind
    it); a file written again is read from disk."""
    spec = spec_of("cmame")
    folder = tmp_path / "run"
    kept = run_shard_mode(folder, spec, KEEP_EVERY)
    assert [p.name for p in run_cache(kept.parent).iterdir()] == ["state_000010.pickle"]
    expected = final_bytes(tmp_path, in_memory(spec, KEEP_EVERY), "memory")
    status = kept.stat()
    kept.write_bytes(b"\0" * status.st_size)  # unreadable on disk, same identity
    os.utime(kept, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert final_bytes(tmp_path, read_full_state(kept), "from_cache") == expected
    write_state(
        kept, in_memory(spec, KEEP_EVERY), run=resolve_run(spec)
    )  # another file: the cache's is stale
    assert final_bytes(tmp_path, read_full_state(kept), "from_disk") == expected
    forget_run(kept.parent)
    kept.write_bytes(b"\0" * kept.stat().st_size)
    with pytest.raises(CorruptFileError):
        read_full_state(kept)


def test_a_run_started_again_forgets_what_the_cache_holds(tmp_path, cache):
    """``evocamp init`` of a run (a new start in the same folder, e.g. after its results
    were deleted) removes the cache entries an earlier run there left."""
    last = run_shard_mode(tmp_path / "run", spec_of("cmame"), 2)
    assert run_cache(last.parent).exists()
    main(["init", "--spec", json.dumps(spec_of("oes")), "--output", str(last.parent / "s.h5")])
    assert not run_cache(last.parent).exists()


def test_without_a_cache_states_are_written_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOCAMP_STATE_CACHE", "0")
    last = run_shard_mode(tmp_path / "run", spec_of("cmame"), 2)
    with h5py.File(last, "r") as handle:
        assert "optimizer" in handle


def test_a_missing_shard_file_is_named(tmp_path, cache):
    """Without the cache, a light state whose window lost a shard file cannot be
    rebuilt: one message names the state, the run, the missing file and what to do."""
    last = run_shard_mode(tmp_path / "run", spec_of("cmame"), 4)
    forget_run(last.parent)
    missing = tmp_path / "run" / "work" / "gen_000002" / "shard_001.h5"
    missing.unlink()
    with pytest.raises(CorruptFileError) as raised:
        read_full_state(last)
    assert str(raised.value) == (
        f"cannot rebuild the optimizer state of {last} (cmame/d/seed5, not in this node's "
        f"state cache): shard file {missing} is missing; delete the run's work/state_*.h5 "
        "and work/gen_* after its last kept checkpoint and rerun to recompute them"
    )
    assert np.all([p.exists() for p in (tmp_path / "run" / "work").glob("state_*.h5")])


def test_a_light_state_is_kept_whole(tmp_path, cache):
    """Keeping a light state as a checkpoint (a run whose `generations` was lowered ends
    on one) writes it whole; a whole state is kept as a hard link, not a copy."""
    spec = spec_of("cmame")
    last = run_shard_mode(tmp_path / "run", spec, 3)
    kept = tmp_path / "run" / "checkpoints" / "gen_000003.h5"
    keep_whole(last, kept, run=resolve_run(spec))
    with h5py.File(kept, "r") as handle:
        assert "optimizer" in handle and "archive" in handle
    forget_run(last.parent)
    expected = final_bytes(tmp_path, in_memory(spec, 3), "memory")
    assert final_bytes(tmp_path, read_full_state(kept), "kept") == expected
    again = tmp_path / "again.h5"
    keep_whole(kept, again, run=resolve_run(spec))
    assert again.stat().st_ino == kept.stat().st_ino
