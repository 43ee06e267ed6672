"""Project hygiene that users rely on: dependency files in step, lint-clean workflow."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import yaml
from conftest import REPO


def test_conda_environment_pins_the_same_dependencies_as_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    environment = yaml.safe_load((REPO / "envs" / "evocamp.yaml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    extras = [
        requirement
        for name, requirements in project["optional-dependencies"].items()
        if name != "test"
        for requirement in requirements
    ]
    assert pip_section == project["dependencies"] + extras
    assert project["optional-dependencies"]["bop"] == ["pymoo>=0.6.1,<0.6.2"]
    assert "python=3.11" in environment["dependencies"]


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
