"""Project hygiene that users rely on: dependency files in step, lint-clean workflow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib

import yaml
from conftest import REPO

from evocamp.model.numerics import NUMERIC_PACKAGES, environment


def test_conda_environment_pins_the_same_dependencies_as_pyproject():
    """The environment lives under workflow/ (Snakemake's convention: a copy of Snakefile
    and workflow/ is the whole workflow); the top-level envs/ is a link to it."""
    assert (REPO / "envs").is_symlink() and os.readlink(REPO / "envs") == "workflow/envs"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    environment = yaml.safe_load((REPO / "workflow" / "envs" / "evocamp.yaml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    extras = [
        requirement
        for name, requirements in project["optional-dependencies"].items()
        if name != "test"
        for requirement in requirements
    ]
    assert pip_section == project["dependencies"] + extras
    assert "python=3.11" in environment["dependencies"]


def exact_pins() -> dict[str, str]:
    """``name: version`` of every ``name[extras]==version`` requirement of pyproject.toml
    (dependencies and every extra), names normalised as distributions are."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [
        requirement for extra in project["optional-dependencies"].values() for requirement in extra
    ]
    pins = {}
    for requirement in requirements:
        if "==" in requirement:
            name, version = requirement.split("==")
            pins[re.sub(r"\[.*\]", "", name).lower().replace("_", "-")] = version
    return pins


def test_every_package_that_decides_numbers_is_pinned_exactly_and_installed_so():
    """pyproject.toml pins each of NUMERIC_PACKAGES exactly (the test extra's pymoo is
    the bop extra's); the installed versions are the pinned ones; and the recorded
    digests were recorded with exactly these versions, so an upgrade re-records them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert [r for r in extras["test"] if r.startswith("pymoo")] == extras["bop"]
    assert set(extras["mujoco"]) <= set(extras["test"])  # the tests run every domain
    pins = exact_pins()
    assert set(NUMERIC_PACKAGES) <= set(pins), set(NUMERIC_PACKAGES) - set(pins)
    pinned = ", ".join(f"{name} {pins[name]}" for name in NUMERIC_PACKAGES)
    installed = environment()["packages"]
    assert installed == pinned, (
        f"installed: {installed}; pyproject.toml pins: {pinned} (pip install -e '.[test]')"
    )
    for recorded in ("tests/data/behaviour_digests.json", "tests/data/legacy_v3/expected.json"):
        assert json.loads((REPO / recorded).read_text())["environment"]["packages"] == pinned, (
            f"{recorded} was recorded with other versions than pyproject.toml pins: record "
            "it again under every kernel family (tests/recorded.py)"
        )


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_snakemake_lint_is_clean():
    completed = run(sys.executable, "-m", "snakemake", "--lint", "--cores", "1")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "Lints for" not in completed.stdout + completed.stderr


def test_workflow_is_snakefmt_formatted():
    completed = run("snakefmt", "--check", "Snakefile", "workflow")
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_python_is_ruff_clean():
    completed = run("ruff", "check", "src", "tests", "benchmarks", "scripts")
    assert completed.returncode == 0, completed.stdout + completed.stderr
