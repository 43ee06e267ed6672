"""A full disk (or exceeded quota) while writing: one message naming the file, and
nothing already written is lost. Real small tmpfs filesystems, no injected errors."""

from __future__ import annotations

import pytest
from conftest import resize_filesystem, small_filesystem

from evocamp.base.errors import DiskFullError
from evocamp.base.files import atomic_write_text
from evocamp.catalogue.factory import resolve_run
from evocamp.cli import main
from evocamp.config import run_spec, run_spec_json, validate_config
from evocamp.files.checkpoint import read_state, write_state
from evocamp.loop.engine import initialise

BIG = {
    "algorithms": {"cmame": {"type": "cma_me", "emitters": 4, "batch_size": 16}},
    "domains": {"s": {"type": "sphere", "solution_dim": 100}},
    "shards": 1,
}


def big_state():
    config = validate_config(BIG)
    return initialise(run_spec(config, algorithm="cmame", domain="s", seed=0))


def test_a_full_disk_leaves_the_previous_checkpoint_and_names_the_file(tmp_path):
    state = big_state()
    with small_filesystem(tmp_path / "fs", size="4m") as folder:
        path = folder / "state.h5"
        write_state(path, state, run=resolve_run(state.spec))
        before = path.read_bytes()
        filler = folder / "filler"
        filler.write_bytes(b"\0" * (4 * 2**20 - len(before) - 64 * 1024))
        with pytest.raises(DiskFullError) as caught:
            write_state(path, state, run=resolve_run(state.spec))
        assert str(caught.value) == (
            f"no space left on device while writing {path}; nothing already written was "
            f"lost ({path} keeps its previous content, every earlier checkpoint and result "
            "is intact): free space (or raise your quota) and rerun the same command to "
            "continue"
        )
        assert path.read_bytes() == before
        assert sorted(p.name for p in folder.iterdir()) == ["filler", "state.h5"]
        filler.unlink()
        write_state(path, state, run=resolve_run(state.spec))
        assert read_state(path).next_seeds.tobytes() == state.next_seeds.tobytes()


def test_a_new_file_on_a_full_disk_is_not_created(tmp_path):
    with small_filesystem(tmp_path / "fs", size="64k") as folder:
        with pytest.raises(DiskFullError, match=r"metrics.csv was not created"):
            atomic_write_text(folder / "metrics.csv", "x" * 200_000)
        assert list(folder.iterdir()) == []
        resize_filesystem(folder, size="1m")
        atomic_write_text(folder / "metrics.csv", "x" * 200_000)
        assert (folder / "metrics.csv").stat().st_size == 200_000


def test_the_init_step_prints_one_line(tmp_path, capsys):
    spec = big_state().spec
    with small_filesystem(tmp_path / "fs", size="128k") as folder:
        output = folder / "checkpoints" / "gen_000000.h5"
        assert main(["init", "--spec", run_spec_json(spec), "--output", str(output)]) == 1
        err = capsys.readouterr().err
        assert err.count("evocamp: error:") == 1 and "Traceback" not in err
        assert f"evocamp: error: no space left on device while writing {output};" in err
        assert not output.exists()
        assert [p.name for p in output.parent.iterdir()] == []
