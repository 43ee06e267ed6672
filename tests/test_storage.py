"""HDF5 storage: atomic writes, corruption messages, shard slicing."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from evocamp.storage import (
    CorruptFileError,
    atomic_h5,
    read_shard,
    shard_bounds,
    write_dataset,
)


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
