"""Project hygiene that users rely on: dependency files in step, lint-clean workflow."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib

import yaml
from conftest import REPO

from evocamp.catalogue.algorithms import ALGORITHMS
from evocamp.catalogue.domains import DOMAINS
from evocamp.model.numerics import NUMERIC_PACKAGES, environment


def conda_env_script():
    """``scripts/conda_env.py``, which writes the environment from pyproject.toml."""
    spec = importlib.util.spec_from_file_location("conda_env", REPO / "scripts" / "conda_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_conda_environment_is_generated_from_pyproject():
    """The environment lives under workflow/ (Snakemake's convention: a copy of Snakefile
    and workflow/ is the whole workflow); the top-level envs/ is a link to it. Its pip
    list is the dependencies and every extra but ``test``, each requirement once, written by
    ``python scripts/conda_env.py`` (an extra added to pyproject.toml needs no edit of
    the environment, only that command)."""
    assert (REPO / "envs").is_symlink() and os.readlink(REPO / "envs") == "workflow/envs"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    text = (REPO / "workflow" / "envs" / "evocamp.yaml").read_text()
    assert text == conda_env_script().render(), "run: python scripts/conda_env.py"
    environment = yaml.safe_load(text)
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    extras = [
        requirement
        for name, requirements in project["optional-dependencies"].items()
        if name != "test"
        for requirement in requirements
    ]
    assert pip_section == list(dict.fromkeys(project["dependencies"] + extras))
    assert len(set(pip_section)) == len(pip_section), "a requirement written twice"
    assert "python=3.11" in environment["dependencies"]


def test_the_catalogues_extras_are_pyprojects():
    """Every extra an algorithm type or a domain names is an extra of pyproject.toml,
    whose exact pins lie in the versions the catalogue accepts, and which pins every
    distribution it records in the runs' provenance exactly; the test extra holds every
    other extra (the tests run every type and domain)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    declared = {e.extra for e in (*ALGORITHMS.values(), *DOMAINS.values()) if e.extra}
    assert {extra.name for extra in declared} <= set(extras) - {"test"}
    for extra in declared:
        pins = dict(
            (re.sub(r"\[.*\]", "", name), version)
            for name, version in (r.split("==") for r in extras[extra.name] if "==" in r)
        )
        for name, low, below in extra.requires:
            if name in pins:
                found = tuple(int(part) for part in pins[name].split(".")[:3])
                assert low <= found < below, (extra.name, name, pins[name])
        assert set(extra.numeric) <= set(pins), extra
    for name, requirements in extras.items():
        assert set(requirements) <= set(extras["test"]), name


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
    """pyproject.toml pins each of NUMERIC_PACKAGES exactly (the test extra holds every
    other extra: test_the_catalogues_extras_are_pyprojects); the installed versions are
    the pinned ones; and the recorded digests were recorded with exactly these versions,
    so an upgrade re-records them."""
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
