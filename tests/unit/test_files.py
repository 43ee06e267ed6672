"""The files layer: atomic writes, corruption messages, checkpoints that round-trip bit
for bit, and checkpoints of earlier versions that still resume."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
from campaigns import SMALL_CAMPAIGN
from conftest import PLUGINS, REPO, shard_results, write_final
from recorded import recorded_digests

from evocamp.base.errors import CorruptFileError
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.archive import read_archive, read_best
from evocamp.files.checkpoint import read_state, write_state
from evocamp.files.hdf5 import atomic_h5, write_dataset
from evocamp.files.shard import read_shard
from evocamp.loop.engine import initialise, tell
from evocamp.model.protocol import shard_bounds


def test_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "state.h5"
    with atomic_h5(path) as handle:
        write_dataset(handle, "x", [1, 2, 3])
    with pytest.raises(RuntimeError):
        with atomic_h5(path) as handle:
            write_dataset(handle, "x", [9, 9, 9])
            raise RuntimeError("killed half-way")
    with h5py.File(path, "r") as handle:
        assert list(handle["x"][()]) == [1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["state.h5"]


def test_only_recomputable_files_skip_the_folder_fsync(tmp_path, monkeypatch):
    """Every file's content is fsynced before its rename; the folder after it too, but
    for shard files and light states (a rerun recomputes them bit for bit): one
    journal commit less per file on a shared filesystem."""
    import os

    from evocamp.files.shard import write_shard

    synced = []
    real_fsync = os.fsync

    def recording_fsync(descriptor):
        synced.append(Path(os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    campaign = validate_config(SMALL_CAMPAIGN, check_plugins=False)
    state = initialise(run_spec(campaign, algorithm="me", domain="sphere", seed=0))
    shards = shard_results(state, 2)
    for name, write in [
        ("shard.h5", lambda path: write_shard(path, shards[0])),
        (
            "light.h5",
            lambda path: write_state(path, state, run=resolve_run(state.spec), light=True),
        ),
        ("whole.h5", lambda path: write_state(path, state, run=resolve_run(state.spec))),
    ]:
        synced.clear()
        write(tmp_path / name)
        assert synced[0].name.startswith(f".{name}.tmp-")
        assert synced[1:] == ([] if name != "whole.h5" else [tmp_path])


def test_identical_content_gives_identical_bytes(tmp_path):
    for name in ("a.h5", "b.h5"):
        with atomic_h5(tmp_path / name) as handle:
            handle.attrs["generation"] = 3
            write_dataset(handle.create_group("archive"), "objective", np.arange(5.0))
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


def test_truncated_file_is_reported_by_name(tmp_path):
    path = tmp_path / "shard_000.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(CorruptFileError, match=r"shard .*shard_000\.h5 is corrupt or truncated"):
        read_shard(path)


@pytest.mark.parametrize(
    ("batch", "shards"), [(1, 1), (7, 3), (16, 8), (540, 1), (540, 8), (10_000, 7)]
)
def test_shards_tile_the_batch(batch, shards):
    bounds = [shard_bounds(batch, shards, s) for s in range(shards)]
    assert bounds[0][0] == 0 and bounds[-1][1] == batch
    assert all(a[1] == b[0] for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1


ALGORITHMS = {
    "me": {"type": "map_elites", "batch_size": 12},
    "line": {"type": "map_elites_line", "batch_size": 12},
    "cvt": {"type": "cvt_map_elites", "batch_size": 12, "archive": {"cells": 40}},
    "cmame": {"type": "cma_me", "emitters": 2, "batch_size": 6},
    "cmamae": {"type": "cma_mae", "emitters": 2, "batch_size": 6},
    # The CVT forms with the ES of policies of thousands of weights (issue 32).
    "cvtme": {"type": "cvt_cma_me", "es": "lm_ma_es", "batch_size": 12, "archive": {"cells": 40}},
    "cvtmae": {
        "type": "cvt_cma_mae",
        "es": "sep_cma_es",
        "emitters": 2,
        "batch_size": 6,
        "archive": {"cells": 40},
    },
    "oes": {"type": "openai_es", "popsize": 12, "sigma": 0.1},
    "snes": {"type": "snes"},
    "ns": {"type": "novelty_search", "batch_size": 12, "archive": {"novelty_threshold": 2.0}},
    "nslc": {
        "type": "novelty_search",
        "variation": "gaussian",
        "batch_size": 12,
        "archive": {"local_competition": True, "novelty_threshold": 2.0},
    },
    "dns": {"type": "dominated_novelty_search", "batch_size": 12, "archive": {"capacity": 20}},
    "bandit": {"type": "cma_me_bandit", "emitters": 2, "batch_size": 6},
    "dds": {
        "type": "density_descent",
        "emitters": 2,
        "batch_size": 6,
        "archive": {"buffer_size": 30},
    },
    "cmaes": {"type": "cma_es"},
    # Bayesian optimisation and its baseline (the third generation is the first the
    # surrogates propose) and a user's optimizer: every family has the round trip.
    "dec": {
        "type": "qucb_decentralised",
        "batch_size": 4,
        "initial_points": 4,
        "candidates": 50,
        "trees": 3,
    },
    "cen": {
        "type": "qucb_centralised",
        "batch_size": 4,
        "initial_points": 4,
        "candidates": 50,
        "trees": 3,
    },
    "rs": {"type": "random_search", "batch_size": 4},
    "mine": {
        "type": "plugin",
        "class": "my_optimizers:OnePlusLambda",
        "python_path": str(PLUGINS),
        "params": {"lam": 8, "sigma": 0.3},
    },
    # BOP-Elites' pattern search takes seconds per generation: two generations on a
    # 3-joint arm (the second's batch is the first proposed by the surrogates).
    "bop": {
        "type": "bop_elites",
        "batch_size": 2,
        "initial_points": 4,
        "search_restarts": 2,
        "archive": {"dims": [4, 4]},
    },
}
#: Domains and generations other than the 100-d sphere's 8.
ROUND_TRIP_DOMAIN = {
    "bop": ({"type": "arm", "solution_dim": 3}, 2),
    **{name: ({"type": "ackley", "solution_dim": 3}, 3) for name in ("dec", "cen", "rs")},
}


@pytest.mark.parametrize(
    "algorithm",
    [
        pytest.param(name, marks=pytest.mark.slow) if name == "bop" else name
        for name in sorted(ALGORITHMS)
    ],
)
def test_checkpoint_round_trips_continue_bitwise_like_memory(tmp_path, algorithm):
    """A run written to and read back from a checkpoint after every generation (as in
    shard mode) gives the same archives and batches, bit for bit, as the same run kept
    in memory; the compact checkpoint holds no empty archive rows."""
    domain, generations = ROUND_TRIP_DOMAIN.get(
        algorithm, ({"type": "sphere", "solution_dim": 100}, 8)
    )
    config = validate_config(
        {"algorithms": {algorithm: ALGORITHMS[algorithm]}, "domains": {"d": domain}, "shards": 1}
    )
    spec = run_spec(config, algorithm=algorithm, domain="d", seed=3)
    in_memory, on_disk = initialise(spec), initialise(spec)
    for generation in range(1, generations + 1):
        path = tmp_path / f"state_{generation}.h5"
        write_state(path, on_disk, run=resolve_run(on_disk.spec))
        on_disk = read_state(path)
        for name in ("in_memory", "on_disk"):
            state = locals()[name]
            state = tell(state, shard_results(state, 1))
            if name == "in_memory":
                in_memory = state
            else:
                on_disk = state
        for name, values in in_memory.next_batch.items():
            assert values.tobytes() == on_disk.next_batch[name].tobytes()
    finals = []
    for name, state in (("memory", in_memory), ("disk", on_disk)):
        finals.append(write_final(tmp_path / f"archive_{name}.h5", state))
    assert finals[0] == finals[1]
    for column in ("generation", "qd_score", "cqd_score", "own_archive_size", "best_objective"):
        np.testing.assert_array_equal(
            in_memory.metrics_window[column], on_disk.metrics_window[column]
        )
    if on_disk.archive is None:  # a domain without measures: the best solution, no elites
        assert np.isfinite(read_best(tmp_path / "archive_disk.h5")["objective"])
        return
    assert len(read_archive(tmp_path / "archive_disk.h5")["objective"]) > 0
    with h5py.File(tmp_path / f"state_{generations}.h5", "r") as handle:
        blob = handle["optimizer/pickle"].size
    archive = on_disk.archive
    # The preallocated per-cell solution array is not in the compact pickle.
    whole = len(pickle.dumps((on_disk.optimizer, on_disk.archive)))
    assert blob + archive.cells * archive.solution_dim * 8 <= whole


def test_schema_1_checkpoints_are_read_and_unknown_versions_named(tmp_path):
    """A version-1 checkpoint (the optimizer as one plain pickle) still resumes; a file
    of an unknown version is refused with one message naming it and the versions."""
    config = validate_config(
        {"algorithms": {"me": {"type": "map_elites"}}, "domains": {"s": {"type": "sphere"}}}
    )
    state = initialise(run_spec(config, algorithm="me", domain="s", seed=0))
    # Version 1 stored the batch as its solutions (a compact QD batch came with version 3).
    state.next_batch = {"solutions": state.optimizer.scheduler._cur_solutions}
    path = tmp_path / "state.h5"
    write_state(path, state, run=resolve_run(state.spec))
    blob = pickle.dumps(state.optimizer.scheduler, protocol=5)
    with h5py.File(path, "r+") as handle:
        handle.attrs["schema_version"] = 1
        handle.move("next_seeds", "next_batch/seeds")
        del handle["optimizer"]
        optimizer = handle.create_group("optimizer")
        optimizer["scheduler"] = np.frombuffer(blob, dtype=np.uint8)
        optimizer.attrs["sha256"] = hashlib.sha256(blob).hexdigest()
    old = read_state(path)
    assert pickle.dumps(old.optimizer.scheduler, protocol=5) == blob
    assert old.next_batch["solutions"].tobytes() == state.next_batch["solutions"].tobytes()
    assert old.next_seeds.tobytes() == state.next_seeds.tobytes()
    with h5py.File(path, "r+") as handle:
        handle.attrs["schema_version"] = 7
    with pytest.raises(CorruptFileError) as caught:
        read_state(path)
    assert str(caught.value) == (
        f"checkpoint {path} has schema version 7; this evocamp writes version 3 "
        "and reads versions 1, 2, 3"
    )


LEGACY = REPO / "tests" / "data" / "legacy_v3"
LEGACY_NAMES = ["me", "cmamae", "oes", "snes", "mine", "dec", "cen", "rs"]


def resumed_legacy_digest(name: str, folder) -> tuple[str, str]:
    """Resume the flat package's checkpoint ``name`` for two generations, as read and
    as written again in today's format and read back; the sha256 of both final
    archives."""
    state = read_state(LEGACY / f"{name}.h5")
    rewritten = folder / f"{name}_today.h5"
    write_state(rewritten, state, run=resolve_run(state.spec))
    digests = []
    for resumed in (state, read_state(rewritten)):
        for _ in range(2):
            resumed = tell(resumed, shard_results(resumed, 2))
        archive = write_final(folder / f"{name}_archive_{len(digests)}.h5", resumed)
        digests.append(hashlib.sha256(archive).hexdigest())
    return digests[0], digests[1]


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_checkpoints_of_the_flat_package_resume_bit_for_bit(tmp_path, monkeypatch, name):
    """Schema-3 checkpoints written by evocamp 0.1 (the flat package: its pickles name
    ``evocamp.es``, ``evocamp.bo``, ``evocamp.algorithms``...; tests/data/legacy_v3/
    make_legacy.py) resume like the same state written in today's format, and two more
    generations give the archive recorded for this machine's kernel family (on the
    family 0.1 ran on, Haswell/X86_V3, the archive that 0.1 gave; record others with
    tests/data/legacy_v3/record_expected.py)."""
    monkeypatch.syspath_prepend(str(PLUGINS))  # the plugin's python_path was absolute
    with h5py.File(LEGACY / f"{name}.h5") as handle:
        assert handle.attrs["schema_version"] == 3
        assert (
            handle["optimizer"]
            .attrs["class"]
            .startswith(
                ("evocamp.algorithms:", "evocamp.es:", "evocamp.bo:", "evocamp.baselines:", "my_")
            )
        )
    as_read, as_rewritten = resumed_legacy_digest(name, tmp_path)
    assert as_read == as_rewritten
    assert as_read == recorded_digests(LEGACY / "expected.json")[name]


def test_checkpoints_naming_the_qd_module_before_its_split_resume_bit_for_bit(
    tmp_path, monkeypatch
):
    """A checkpoint written while ``evocamp.families.qd`` was one module names
    ``evocamp.families.qd.QDOptimizer`` in its pickle: it is read (its class mapped by
    ``files/legacy.py``; a plain pickle, the node-local cache's, through the package's
    public names) and resumes like the same state written today, which names
    ``evocamp.families.qd.optimizer``."""
    from evocamp.families.qd.optimizer import QDOptimizer
    from evocamp.files.legacy import class_module

    for old in ("evocamp.families.qd", "evocamp.algorithms"):
        assert class_module(old, "QDOptimizer") == "evocamp.families.qd.optimizer"
    campaign = validate_config(SMALL_CAMPAIGN, check_plugins=False)
    state = initialise(run_spec(campaign, algorithm="me", domain="sphere", seed=0))
    state = tell(state, shard_results(state, 2))
    today, before = tmp_path / "today.h5", tmp_path / "before.h5"
    write_state(today, state, run=resolve_run(state.spec))
    with monkeypatch.context() as patched:
        patched.setattr(QDOptimizer, "__module__", "evocamp.families.qd")
        write_state(before, state, run=resolve_run(state.spec))
        plain = pickle.dumps(state.optimizer, protocol=5)
    for path, module in ((today, b"evocamp.families.qd.optimizer"), (before, None)):
        with h5py.File(path, "r") as handle:
            blob = handle["optimizer/pickle"][()].tobytes()
            written = handle["optimizer"].attrs["class"]
        if module is None:
            assert written == "evocamp.families.qd:QDOptimizer"
            assert b"evocamp.families.qd" in blob and b"qd.optimizer" not in blob
        else:
            assert module in blob
    assert b"qd.optimizer" not in plain
    assert type(pickle.loads(plain)) is QDOptimizer
    digests = []
    for path in (today, before):
        resumed = read_state(path)
        assert type(resumed.optimizer) is QDOptimizer
        for _ in range(2):
            resumed = tell(resumed, shard_results(resumed, 2))
        digests.append(hashlib.sha256(write_final(tmp_path / f"{path.stem}_a.h5", resumed)))
    assert digests[0].hexdigest() == digests[1].hexdigest()
