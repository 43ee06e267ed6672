"""The airfoil driver (workflow/drivers/airfoil/xfoil_driver.py, docs/airfoil.md) against
xfoil itself: a known airfoil's polar, the base design's results file, a failing xfoil."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from campaigns import REPO

DRIVER = REPO / "workflow" / "drivers" / "airfoil" / "xfoil_driver.py"

pytestmark = pytest.mark.skipif(
    shutil.which("xfoil") is None, reason="xfoil is not installed (apt-get install xfoil)"
)


@pytest.fixture(scope="module")
def driver():
    spec = importlib.util.spec_from_file_location("xfoil_driver", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def naca_00xx(thickness: float, points: int = 101):
    """A symmetric NACA 4-digit section (closed trailing edge), cosine spacing."""
    x = 0.5 * (1 - np.cos(np.linspace(0, np.pi, points)))
    half = (thickness / 0.2) * (
        0.2969 * np.sqrt(x) - 0.1260 * x - 0.3516 * x**2 + 0.2843 * x**3 - 0.1036 * x**4
    )
    return x, half, -half


def test_naca_0012_polar_at_re_one_million(driver):
    """NACA 0012, Re 1e6, Mach 0, free transition: no lift at 0 degrees (symmetric), the
    lift of thin-airfoil theory (2 pi alpha = 0.439 at 4 degrees) within 10 % (viscous
    effects take a few percent off), and the 50 to 60 drag counts of a smooth 12 %
    section at this Reynolds number."""
    shape = naca_00xx(0.12)
    cl0, cd0 = driver.xfoil_polar(shape, reynolds=1e6, mach=0.0, alpha=0.0)
    cl4, cd4 = driver.xfoil_polar(shape, reynolds=1e6, mach=0.0, alpha=4.0)
    assert abs(cl0) < 1e-3
    assert cl4 == pytest.approx(2 * np.pi * np.radians(4.0), rel=0.10)
    assert 0.0050 <= cd0 <= 0.0060
    assert cd0 < cd4 < 0.01


def write_parameters(path: Path, values) -> None:
    """A Dakota parameters file (standard format) of the driver's ten variables."""
    lines = [f"{' ' * 21}{len(values):>22d} variables"]
    lines += [f"{' ' * 21}{v:>22.15e} x{i + 1}" for i, v in enumerate(values)]
    lines += [f"{' ' * 21}{1:>22d} functions", f"{' ' * 21}{1:>22d} ASV_1:obj_fn_1"]
    path.write_text("\n".join(lines) + "\n")


def run_driver(tmp_path: Path, values, **env) -> list[str]:
    write_parameters(tmp_path / "params.in", values)
    subprocess.run(
        [sys.executable, str(DRIVER), "params.in", "results.out"],
        cwd=tmp_path,
        check=True,
        timeout=60,
        env={**os.environ, **env},
    )
    return (tmp_path / "results.out").read_text().splitlines()


def test_the_base_design_through_dakota_files(tmp_path, driver):
    lines = run_driver(tmp_path, [0.0] * 10)
    values = {label: float(value) for value, label in (line.split() for line in lines)}
    assert list(values) == ["objective", "measure_1", "measure_2", "cd", "cl", "area"]
    # The base airfoil: lift equal to the base's (no penalty), its own area.
    assert values["cl"] == pytest.approx(driver.BASE_CL, abs=2e-3)
    assert values["area"] == pytest.approx(driver.BASE_AREA, rel=1e-12)
    assert values["objective"] == pytest.approx(-np.log(values["cd"]), rel=1e-3)
    # The crest is where PARSEC put it (x_up, z_up at variables 0).
    assert values["measure_1"] == pytest.approx(0.43, abs=2e-3)
    assert values["measure_2"] == pytest.approx(0.063, abs=1e-4)
    assert 0.004 < values["cd"] < 0.012


def test_a_failing_xfoil_writes_fail(tmp_path):
    lines = run_driver(tmp_path, [0.0] * 10, XFOIL="false")
    assert lines == ["fail xfoil ended with status 1 before converging"]
