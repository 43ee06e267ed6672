"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
#: The CMA-ME setting of the overhead and step-time benchmarks (pyribs' Lunar Lander
#: example's 15 emitters x 36, a 100 x 100 grid; on a 100-d sphere there).
CMA_ME_BENCHMARK = {
    "type": "cma_me",
    "emitters": 15,
    "batch_size": 36,
    "sigma": 0.5,
    "archive": {"dims": [100, 100]},
}

MEASURE = (
    "import resource, subprocess, sys, time\n"
    "began = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL,"
    " stderr=subprocess.DEVNULL).returncode\n"
    "print(time.perf_counter() - began, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
    " code)\n"
)


def snakemake(
    workdir: Path, *args: str, cores: int = 2, snakefile: Path = REPO / "Snakefile"
) -> list[str]:
    """The Snakemake command for the campaign whose config is ``workdir/config.yaml``."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        str(cores),
        *args,
    ]


def measured(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of a command (run in a fresh process)."""
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, check=True
    ).stdout.split()
    seconds, kilobytes, code = float(out[0]), int(out[1]), int(out[2])
    if code != 0:
        raise RuntimeError(f"command failed ({code}): {' '.join(command)}")
    return seconds, kilobytes / 1024


@contextlib.contextmanager
def scratch_folder(prefix: str, *, keep: Path | None = None) -> Iterator[Path]:
    """The folder a benchmark's campaigns run in.

    ``keep`` (a benchmark's ``--workdir``) is created if needed and left in place for
    inspection; without it, a temporary folder named ``prefix...`` is removed at the end.
    """
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        yield Path(name)


def write_config(workdir: Path, config: dict) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def machine() -> str:
    """One line describing this machine, for RESULTS.md."""
    cpus = os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    model = ""
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return json.dumps(
        {
            "cpu": model,
            "cores": cpus,
            "memory_gib": round(memory, 1),
            "python": platform.python_version(),
            "os": platform.platform(),
        }
    )


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
