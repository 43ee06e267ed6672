"""config/airfoil.yaml, small: xfoil (a real simulator, Debian's package) run by the
airfoil driver as a ``type: command`` domain in a real campaign (docs/airfoil.md)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

import numpy as np
import pytest
import yaml
from conftest import REPO, merged, run_folder, run_snakemake, write_config

from evocamp.files.evaluations import read_evaluations

DRIVER = REPO / "workflow" / "drivers" / "airfoil" / "xfoil_driver.py"


@pytest.fixture(scope="module")
def xfoil():
    """xfoil installed (with apt-get, as root, as the Slurm tests install Slurm)."""
    if shutil.which("xfoil") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "xfoil"],
            env=env,
            capture_output=True,
            timeout=600,
        )
    if shutil.which("xfoil") is None:
        pytest.skip("xfoil is not installed (apt-get install xfoil)")


def test_small_airfoil_campaign(xfoil, tmp_path):
    shipped = yaml.safe_load((REPO / "config" / "airfoil.yaml").read_text())
    config = merged(
        shipped,
        {
            "generations": 2,
            "checkpoint_every": 2,
            "seeds": 1,
            "storage": {"keep_evaluations": True},
            "domains": {"airfoil": {"command": ["python", str(DRIVER)]}},
        },
    )
    config["algorithms"] = {
        "map_elites": merged(shipped["algorithms"]["map_elites"], {"emitter_batch_size": 6})
    }
    write_config(tmp_path, config)
    run_snakemake(tmp_path, "runs")

    run = run_folder(tmp_path, config, "map_elites", "airfoil", 0)
    rows = read_evaluations(run / "evaluations.h5")
    assert rows.generation.tolist() == [1] * 12 + [2] * 12
    evaluated = rows.status == 0
    assert evaluated.sum() >= 18, rows.failures  # xfoil converges on most shapes
    # Every stored value is the driver's for that design, to the bit (the driver
    # writes repr(float)): drag, lift, area, the crest measures and SAIL's objective.
    # The design as the driver read it: Dakota's format writes 16 significant digits
    # (%.15e), one short of a double's round trip.
    spec = importlib.util.spec_from_file_location("xfoil_driver", DRIVER)
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    for k in np.flatnonzero(evaluated)[:3]:
        expected = driver.evaluate([float(f"{v:.15e}") for v in rows.solution[k]])
        assert rows.objective[k] == expected["objective"]
        assert rows.measures[k].tolist() == [expected["measure_1"], expected["measure_2"]]
        assert [rows.extra[name][k] for name in ("cd", "cl", "area")] == [
            expected["cd"],
            expected["cl"],
            expected["area"],
        ]
    # The measures mean what docs/airfoil.md says: the crest of the upper surface.
    assert np.all((rows.measures[evaluated, 0] > 0.2) & (rows.measures[evaluated, 0] < 0.7))
    assert np.all(rows.extra["cd"][evaluated] > 0.003)
    assert np.all(rows.objective[evaluated] > 0)
    # A design fails only by the driver's 'fail' (xfoil not converging), never a crash.
    assert all("fail" in message for message in rows.failures.values()), rows.failures
