"""Write workflow/envs/evocamp.yaml from pyproject.toml: the conda environment is generated,
never edited (an extra added to pyproject.toml reaches it by running this).

    python scripts/conda_env.py          # rewrite workflow/envs/evocamp.yaml
    python scripts/conda_env.py --check  # exit 1 when the file is not what it would write

Its pip list is [project.dependencies] followed by every optional extra but the test
extra, in pyproject.toml's order (tests/unit/test_packaging.py checks the file). A conda
environment cannot read pyproject.toml: Snakemake copies the file before conda reads it,
and `--sdm conda` builds an environment of the dependencies only (a clone's jobs run
evocamp from its src/), so the list is written out here.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "workflow" / "envs" / "evocamp.yaml"

HEADER = """\
# Generated from pyproject.toml by `python scripts/conda_env.py`: do not edit.
# Conda environment: `conda env create -f envs/evocamp.yaml`, then `pip install -e .`
# (envs/ links to workflow/envs, where the rules' `conda:` directive finds it).
# The pip list is [project.dependencies] of pyproject.toml followed by every optional
# extra users run algorithms and domains with (all but the test extra).
name: evocamp
channels:
  - conda-forge
  - nodefaults
dependencies:
  - python=3.11
  - pip
  - pip:
"""


def requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The environment's pip list: the dependencies, then every extra but ``test``,
    each requirement once."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = [
        requirement
        for name, listed in project["optional-dependencies"].items()
        if name != "test"
        for requirement in listed
    ]
    # An exact pin shared by two extras (cma in pycma's and the benchmarking one) is
    # written once: pip refuses nothing here, but a reader would ask which one wins.
    return list(dict.fromkeys([*project["dependencies"], *extras]))


def render(pyproject: Path = REPO / "pyproject.toml") -> str:
    """The text of ``workflow/envs/evocamp.yaml`` for ``pyproject``."""
    return HEADER + "".join(f'      - "{line}"\n' for line in requirements(pyproject))


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if TARGET.read_text() != text:
            print(f"{TARGET} is not generated from pyproject.toml: python {__file__}")
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
