"""A non-editable install (``pip install .``) works on its own: the schema ships inside
the package, so `evocamp check-config` and `evocamp status` work from any folder; and a
copy of `Snakefile` and `workflow/` alone runs a campaign with the installed package."""

from __future__ import annotations

import shutil
import subprocess
import sys

from conftest import REPO, run_snakemake, write_config


def venv_seeing_this_environment(venv):
    """A fresh virtual environment that sees the packages of the interpreter running the
    tests (the system's, or a virtual environment's) after its own site-packages, so
    that evocamp installed into it comes first.

    ``venv --system-site-packages`` would not do: made from inside a virtual
    environment, it sees the *base* interpreter's packages, not the outer environment's
    (where the test extra installed pip, setuptools and wheel for the build)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (own,) = venv.glob("lib/python*/site-packages")
    outer = [path for path in sys.path if path.endswith(("site-packages", "dist-packages"))]
    (own / "outer_environment.pth").write_text("".join(f"{path}\n" for path in outer))
    return venv


def test_non_editable_install_checks_configs_and_shows_status(tmp_path, small_campaign_done):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    venv = venv_seeing_this_environment(tmp_path / "venv")
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            *("-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import evocamp; print(evocamp.__file__)"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(venv)), where.stdout
    shutil.copy(REPO / "config" / "config.yaml", elsewhere / "campaign.yaml")
    checked = subprocess.run(
        [str(venv / "bin" / "evocamp"), "check-config", "campaign.yaml"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines() == [
        "map_elites/sphere/seed0",
        "map_elites/sphere/seed1",
        "cma_me/sphere/seed0",
        "cma_me/sphere/seed1",
    ]
    status = subprocess.run(
        [
            str(venv / "bin" / "evocamp"),
            "status",
            str(small_campaign_done / "results" / "small"),
            "--no-plots",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0, status.stderr
    assert "me/sphere/seed0" in status.stdout and "finished" in status.stdout


def test_a_copy_of_snakefile_and_workflow_runs_a_campaign(tmp_path):
    """Snakemake's convention for deploying a workflow: copy `Snakefile` and `workflow/`
    (as `cp -r`: links kept), not `src/`, `envs/`, `config/` or `profiles/`. With evocamp
    installed, the campaign that --configfile names runs (it once failed at the first
    job, recording metadata of ../../envs/evocamp.yaml); without --configfile one message
    says what to give."""
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(REPO / "Snakefile", code / "Snakefile")
    shutil.copytree(REPO / "workflow", code / "workflow", symlinks=True)
    workdir = tmp_path / "campaign"
    config = {
        "campaign": "copied",
        "generations": 2,
        "shards": 2,
        "checkpoint_every": 1,
        "seeds": 1,
        "algorithms": {"me": {"type": "map_elites", "emitter_batch_size": 4}},
        "domains": {"sphere": {"type": "sphere", "solution_dim": 3}},
    }
    write_config(workdir, config)
    run_snakemake(workdir, "runs", snakefile=code / "Snakefile")
    run = workdir / "results" / "copied" / "me" / "sphere" / "seed0"
    assert (run / "archive.h5").stat().st_size > 0
    assert len((run / "metrics.csv").read_text().splitlines()) == 1 + 3  # generations 0-2
    # The figure rules' inputs (their code: the installed package's) are all there.
    planned = run_snakemake(workdir, "--dry-run", snakefile=code / "Snakefile")
    assert "plot_run" in planned.stdout and "compare" in planned.stdout
    default = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(code / "Snakefile")]
        + ["--cores", "1", "--dry-run"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert default.returncode != 0
    assert (
        "no campaign file: give one with --configfile my_campaign.yaml (the default campaign, "
        f"config/config.yaml, is not in {workdir}: copy it from the repository to run it)"
    ) in default.stdout + default.stderr
