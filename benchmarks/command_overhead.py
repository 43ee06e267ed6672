"""Per-evaluation cost of a ``type: command`` evaluation (docs/programs.md).

One shard of ``--solutions`` solutions is evaluated by the shard step
(``evaluate_slice``, in its supervised child, as the ``evaluate`` step and Dask tasks
do) with:

- ``python``: a plugin function returning constants (chunk_size 1): the cost of a Python
  evaluation function;
- ``command``: a program that does no work of its own, a shell script writing a constant
  results file, in a work directory on local disk and on tmpfs (``/dev/shm``); and the
  same with a batch (one call for the shard);
- ``bare``: the same script started with ``subprocess.run`` from this process, nothing
  else: the program's own run time (fork, exec of ``/bin/sh``, its write).

evocamp's own cost per evaluation is ``command - bare`` (work directory, parameters
file, reading results, supervision, removing the directory). It also counts the files
and bytes left under the work root after the shard (work directories removed after
success), and the files a command evaluation writes and removes.

Usage: ``python benchmarks/command_overhead.py [--solutions 64] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import REPO, machine, table

sys.path.insert(0, str(REPO / "src"))

from evocamp.catalogue.factory import resolve_run  # noqa: E402
from evocamp.config import run_spec, validate_config  # noqa: E402
from evocamp.loop.evaluation import evaluate_slice  # noqa: E402

SCRIPT = """#!/bin/sh
printf '1.0 obj_fn\\n0.5 measure_1\\n0.5 measure_2\\n' > "$2"
"""
BATCH_SCRIPT = """#!/bin/sh
n=$(grep -c ' variables$' "$1")
i=0
: > "$2"
while [ "$i" -lt "$n" ]; do
  [ "$i" -gt 0 ] && echo '#' >> "$2"
  printf '1.0\\n0.5\\n0.5\\n' >> "$2"
  i=$((i + 1))
done
"""
PLUGIN = """import numpy as np

def constant(solutions, seeds):
    n = len(solutions)
    return {"objective": np.ones(n), "measures": np.full((n, 2), 0.5)}
"""


def spec_for(domain: dict) -> dict:
    config = validate_config(
        {
            "algorithms": {"me": {"type": "map_elites", "emitters": 1}},
            "domains": {"d": {"solution_dim": 10, "measure_ranges": [[0, 1], [0, 1]], **domain}},
        }
    )
    return run_spec(config, algorithm="me", domain="d", seed=0)


def per_evaluation(spec: dict, solutions: np.ndarray, repeats: int) -> float:
    """Median seconds per evaluation of one shard (evaluate_slice), over ``repeats``."""
    seeds = np.arange(len(solutions), dtype=np.uint64)
    run = resolve_run(spec)
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = evaluate_slice(
            run, generation=1, shard=0, start=0, solutions=solutions, seeds=seeds
        )
        times.append((time.perf_counter() - began) / len(solutions))
        assert result.status is None, result.messages
    return statistics.median(times)


def bare(script: Path, folder: Path, count: int, repeats: int) -> float:
    """Median seconds per run of the script alone (subprocess.run, nothing else)."""
    (folder / "params.in").write_text("")
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(count):
            subprocess.run([str(script), "params.in", "results.out"], cwd=folder, check=True)
        times.append((time.perf_counter() - began) / count)
    return statistics.median(times)


def left_behind(root: Path) -> str:
    """Folders, files and bytes under a work root."""
    paths = list(root.rglob("*"))
    files = [path for path in paths if path.is_file()]
    size = sum(path.stat().st_size for path in files)
    return f"{len(paths) - len(files)} / {len(files)} / {size} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=int, default=64, help="solutions per shard")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    solutions = np.random.default_rng(0).uniform(-1, 1, (args.solutions, 10))
    print(machine())
    with tempfile.TemporaryDirectory(prefix="command_overhead", dir=REPO) as name:
        here = Path(name)
        script, batch_script = here / "constant.sh", here / "constant_batch.sh"
        script.write_text(SCRIPT)
        batch_script.write_text(BATCH_SCRIPT)
        for path in (script, batch_script):
            path.chmod(0o755)
        (here / "constant_plugin.py").write_text(PLUGIN)
        python = spec_for(
            {"type": "plugin", "function": "constant_plugin:constant", "python_path": name}
        )
        rows = [
            [
                "python function (plugin, chunk_size 1)",
                "-",
                per_evaluation(python, solutions, args.repeats),
                "-",
                "-",
            ]
        ]
        for disk, root in (("local disk", here / "disk"), ("tmpfs", Path("/dev/shm") / here.name)):
            root.mkdir()
            try:
                alone = root.parent / f"{root.name}-alone"
                alone.mkdir()
                own = bare(script, alone, args.solutions, args.repeats)
                subprocess.run(["rm", "-rf", str(alone)], check=True)
                rows.append([f"the script alone (subprocess.run), {disk}", "-", own, "-", "-"])
                for label, batch, program in (
                    ("command", False, script),
                    ("command, batch: true", True, batch_script),
                ):
                    spec = spec_for(
                        {
                            "type": "command",
                            "command": [str(program)],
                            "work_root": str(root),
                            "batch": batch,
                        }
                    )
                    seconds = per_evaluation(spec, solutions, args.repeats)
                    runs = 1 / args.solutions if batch else 1  # program runs per evaluation
                    rows.append(
                        [f"{label}, {disk}", disk, seconds, seconds - own * runs, left_behind(root)]
                    )
            finally:
                subprocess.run(["rm", "-rf", str(root)], check=True)
    print(
        table(
            [
                "evaluation",
                "work root",
                "ms per evaluation",
                "beyond the script's own run",
                "folders / files / bytes left",
            ],
            [
                [
                    label,
                    disk,
                    f"{seconds * 1e3:.2f}",
                    extra if isinstance(extra, str) else f"{extra * 1e3:.2f}",
                    left,
                ]
                for label, disk, seconds, extra, left in rows
            ],
        )
    )
    print(f"{args.solutions} solutions per shard, median of {args.repeats}; load {os.getloadavg()}")


if __name__ == "__main__":
    main()
