"""Numeric provenance (evocamp.model.numerics): every run records what computed it, and
a step under another kernel or package versions is named in its log, in the run's
archive.h5 and in `evocamp status`, on real step commands and real HDF5 files.

A step on another machine is a shard file whose recorded environment says so (as a
shard job on a node of another CPU generation writes it): the tests never change this
machine's BLAS kernel (OPENBLAS_CORETYPE stays as the machine sets it)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import h5py
import pytest
import threadpoolctl
from conftest import write_final

from evocamp.config import run_spec, validate_config
from evocamp.executors.steps import evaluate_step, init_step, tell_step
from evocamp.files.checkpoint import read_state
from evocamp.model.numerics import NUMERIC_PACKAGES, environment, is_mixed, noted
from evocamp.reporting.status import status_report


def test_the_environment_is_what_threadpoolctl_and_the_installed_packages_say():
    """numpy's BLAS (scipy's own OpenBLAS, once scipy is imported, is another one)."""
    import scipy.linalg  # noqa: F401 - loads scipy's OpenBLAS beside numpy's

    blas = [info for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]
    (numpy_blas,) = [info for info in blas if "numpy" in Path(info["filepath"]).parent.name]
    current = environment()
    assert current["kernel"] == numpy_blas["architecture"]
    assert current["blas"] == f"{numpy_blas['internal_api']} {numpy_blas['version']}"
    for name in NUMERIC_PACKAGES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "-"
        assert f"{name} {version}" in current["packages"].split(", ")
    assert current["cpu"]


def _run_folder(tmp_path):
    return tmp_path / "results" / "camp" / "me" / "sphere" / "seed0"


def _generation_one(tmp_path, *, other: dict | None = None) -> tuple:
    """Initialise a MAP-Elites run, evaluate generation 1 in two shard files (shard 1's
    environment replaced by ``other``'s fields) and tell it with the step commands."""
    config = validate_config(
        {
            "campaign": "camp",
            "algorithms": {"me": {"type": "map_elites", "batch_size": 8}},
            "domains": {"sphere": {"type": "sphere", "solution_dim": 4}},
            "shards": 2,
            "checkpoint_every": 5,
        }
    )
    spec = run_spec(config, algorithm="me", domain="sphere", seed=0)
    run = _run_folder(tmp_path)
    initial = run / "checkpoints" / "gen_000000.h5"
    initial.parent.mkdir(parents=True)
    init_step(spec=spec, output=initial)
    shards = [run / "work" / "gen_000001" / f"shard_{shard}.h5" for shard in range(2)]
    shards[0].parent.mkdir(parents=True)
    for shard, path in enumerate(shards):
        evaluate_step(state=initial, shard=shard, shards=2, output=path)
    if other is not None:
        with h5py.File(shards[1], "r+") as handle:
            recorded = json.loads(handle.attrs["numerics"])
            handle.attrs["numerics"] = json.dumps({**recorded, **other})
    told = run / "work" / "state_000001.h5"
    tell_step(state=initial, shard_files=[str(path) for path in shards], output=told, total=5)
    return run, read_state(told)


def test_a_run_under_one_environment_records_each_step_kind_and_marks_nothing(tmp_path, capsys):
    run, state = _generation_one(tmp_path)
    assert "warning" not in capsys.readouterr().err
    current = environment()
    assert [record["step"] for record in state.numerics] == ["initialise", "evaluate", "tell"]
    assert [record["generations"] for record in state.numerics] == [[0, 0], [1, 1], [1, 1]]
    for record in state.numerics:
        assert {key: record[key] for key in current} == current
    assert not is_mixed(state.numerics)
    write_final(run / "archive.h5", state)
    with h5py.File(run / "archive.h5") as handle:
        assert not [name for name in handle.attrs if name.startswith("numerics")]
    report = status_report(tmp_path / "results" / "camp", plots=False)
    assert "mixed" not in report


def test_a_shard_under_another_kernel_is_named_once_and_marks_the_run_mixed(tmp_path, capsys):
    kernel = environment()["kernel"]
    other = "Prescott" if kernel != "Prescott" else "SkylakeX"
    run, state = _generation_one(tmp_path, other={"kernel": other, "cpu": "Intel Xeon"})
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"evocamp: warning: run me/sphere/seed0, generation 1: the evaluate step runs under "
        f"kernel {other} while earlier steps of the run ran under kernel {kernel}; results "
        "stay valid but are not bitwise comparable with a run under one numeric environment"
    ]
    assert is_mixed(state.numerics)
    assert [(record["step"], record["kernel"]) for record in state.numerics] == [
        ("initialise", kernel),
        ("evaluate", kernel),
        ("evaluate", other),
        ("tell", kernel),
    ]
    summary = (
        f"mixed numeric environments: kernel {kernel} (initialise 0, evaluate 1, tell 1) "
        f"| kernel {other} (evaluate 1)"
    )
    write_final(run / "archive.h5", state)
    with h5py.File(run / "archive.h5") as handle:
        assert handle.attrs["numerics_mixed"]
        assert handle.attrs["numerics_summary"] == summary
        assert json.loads(handle.attrs["numerics"]) == state.numerics
    report = status_report(tmp_path / "results" / "camp", plots=False)
    assert "running, mixed" in report
    assert f"  me/sphere/seed0: {summary}" in report.splitlines()


def test_other_package_versions_are_named_with_both_versions(tmp_path, capsys):
    packages = environment()["packages"].replace("scipy ", "scipy 0.0.1+")
    _, state = _generation_one(tmp_path, other={"packages": packages})
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    scipy = metadata.version("scipy")
    assert f"runs under scipy 0.0.1+{scipy} while earlier steps of the run ran under " in warning
    assert warning.endswith(
        f"scipy {scipy}; results stay valid but are not bitwise comparable "
        "with a run under one numeric environment"
    )
    assert is_mixed(state.numerics)


@pytest.mark.parametrize("step", ["evaluate", "tell"])
def test_a_step_under_the_run_s_environment_again_gives_no_second_warning(step):
    records, _ = noted([], step="initialise", generation=0)
    other = {**environment(), "kernel": "Elsewhere"}
    records, first = noted(records, step=step, generation=1, current=other)
    records, second = noted(records, step=step, generation=2, current=other)
    records, third = noted(records, step="tell", generation=2)
    assert first is not None and second is None and third is None
    assert records[1]["generations"] == [1, 2]


def test_locomotion_runs_record_the_simulator_and_other_runs_do_not():
    """mujoco decides the locomotion domains' numbers: their runs record its version
    after the packages every run records (initialise, evaluate and tell alike); a
    run of another domain records what it always did, mujoco installed or not."""
    from conftest import shard_results

    from evocamp.loop.engine import initialise, tell

    config = validate_config(
        {
            "algorithms": {"me": {"type": "map_elites", "batch_size": 2}},
            "domains": {
                "ant": {"type": "ant_omni", "params": {"hidden": [2], "episode_length": 5}},
                "sphere": {"type": "sphere", "solution_dim": 4},
            },
            "shards": 1,
        }
    )
    common = ", ".join(f"{name} {metadata.version(name)}" for name in NUMERIC_PACKAGES)
    with_simulator = f"{common}, mujoco {metadata.version('mujoco')}"
    ant = initialise(run_spec(config, algorithm="me", domain="ant", seed=0))
    (evaluated,) = shard_results(ant, 1)
    assert [record["packages"] for record in ant.numerics] == [with_simulator]
    assert evaluated.numerics["packages"] == with_simulator
    told = tell(ant, [evaluated])
    assert [(r["step"], r["packages"]) for r in told.numerics] == [
        ("initialise", with_simulator),
        ("evaluate", with_simulator),
        ("tell", with_simulator),
    ]
    assert not is_mixed(told.numerics)
    sphere = initialise(run_spec(config, algorithm="me", domain="sphere", seed=0))
    assert [record["packages"] for record in sphere.numerics] == [common]
    assert environment()["packages"] == common
