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


def best_at(run: dict, evaluations: int) -> float:
    """A run's best value once ``evaluations`` evaluations are done (its ``evaluations``
    and ``best`` arrays: the count and the best value after each step)."""
    import numpy as np

    index = np.searchsorted(run["evaluations"], evaluations)
    return float(run["best"][min(index, len(run["best"]) - 1)])


def best_at_time(run: dict, seconds):
    """A run's best value known at each of ``seconds`` (NaN before its first result)."""
    from evocamp.reporting.comparison import value_known_at

    return value_known_at(run["times"], run["best"], seconds)


def interval(values) -> str:
    """Mean [95% bootstrap CI] of ``values``, three significant digits."""
    import numpy as np

    from evocamp.reporting.comparison import bootstrap_mean_ci

    mean, low, high = bootstrap_mean_ci(
        np.asarray(values), samples=2000, rng=np.random.default_rng(0)
    )
    return f"{float(mean):.3g} [{float(low):.3g}, {float(high):.3g}]"


def known_interval(values) -> str:
    """:func:`interval` of the runs that had a value (a run with no result yet has
    NaN), saying how many had one when some had none."""
    import numpy as np

    values = np.asarray(values)
    known = values[np.isfinite(values)]
    if len(known) == 0:
        return "no result yet"
    text = interval(known)
    return text if len(known) == len(values) else f"{text} ({len(known)} of {len(values)} runs)"


def stored_runs(path: Path) -> dict:
    """The runs a benchmark's ``--results`` file holds, ``{domain: {variant: [run,
    ...]}}`` (lists as arrays but ``evaluated``; none when the file does not exist)."""
    import numpy as np

    if not path.exists():
        return {}
    stored = json.loads(path.read_text())
    return {
        domain: {
            name: [
                {
                    key: np.asarray(v) if isinstance(v, list) and key != "evaluated" else v
                    for key, v in run.items()
                }
                for run in runs
            ]
            for name, runs in variants.items()
        }
        for domain, variants in stored.items()
    }


def store_runs(path: Path, results: dict) -> None:
    """Write every run of :func:`stored_runs`' shape to ``path`` (arrays as lists)."""
    import numpy as np

    def plain(value):
        if isinstance(value, np.ndarray):
            return value.tolist()
        return float(value) if isinstance(value, np.floating) else value

    path.write_text(
        json.dumps(
            {
                domain: {
                    name: [{key: plain(v) for key, v in run.items()} for run in runs]
                    for name, runs in variants.items()
                }
                for domain, variants in results.items()
            }
        )
    )


def curves_figure(
    results: dict, path: Path, *, value: str, budgets: dict, colours: list | None = None
) -> None:
    """Best value against evaluations (top) and against wall seconds (bottom), one
    column per ``results`` key (its title), a line and its 95% bootstrap band per
    variant; ``budgets`` gives each column's evaluations; ``colours`` (variant names in
    the order of the palette) keeps a variant's colour across columns."""
    import numpy as np

    from evocamp.reporting.comparison import bootstrap_mean_ci
    from evocamp.reporting.plotting import PALETTE, pyplot

    plt = pyplot()
    fig, axes = plt.subplots(2, len(results), squeeze=False, figsize=(8.0, 5.6))
    rng = np.random.default_rng(0)
    for column, (title, variants) in enumerate(results.items()):
        horizon = max(r["times"][-1] for runs in variants.values() for r in runs)
        grid_t = np.linspace(0, horizon, 200)
        grid_e = np.arange(1, budgets[title] + 1)
        for colour, (name, runs) in enumerate(variants.items()):
            colour = colour if colours is None else colours.index(name)
            style = {"color": PALETTE[colour % len(PALETTE)]}
            for row, (grid, curve) in enumerate(
                ((grid_e, lambda r, g: [best_at(r, e) for e in g]), (grid_t, best_at_time))
            ):
                values = np.array([curve(r, grid) for r in runs], dtype=np.float64)
                keep = np.isfinite(values).all(axis=0)
                mean, low, high = bootstrap_mean_ci(values[:, keep], samples=1000, rng=rng)
                ax = axes[row, column]
                ax.plot(grid[keep], mean, label=name, **style)
                ax.fill_between(grid[keep], low, high, alpha=0.2, linewidth=0, **style)
        axes[0, column].set_title(title)
        axes[0, column].set_xlabel("evaluations")
        axes[1, column].set_xlabel("wall seconds")
        for row in (0, 1):
            axes[row, column].set_ylabel(value)
    for column in range(len(results)) if colours is not None else (0,):
        axes[0, column].legend(frameon=False, fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
