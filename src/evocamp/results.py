"""A campaign's results as pandas DataFrames: metrics, elites and kept evaluations.

::

    from evocamp.results import load_archives, load_campaign, load_evaluations

    runs = load_campaign("results/default")       # one row per run and generation
    final = runs[runs.generation == runs.groupby(["algorithm", "domain", "seed"])
                 .generation.transform("max")]
    final.groupby(["domain", "algorithm"]).qd_score.describe()

Every frame starts with the columns ``campaign, algorithm, domain, seed`` (the run),
so frames of several campaigns concatenate. The files are read, never changed, and
can be read while the campaign runs (every file appears atomically):
:func:`load_campaign` gives the generations finished so far, :func:`load_evaluations`
the evaluations recorded so far (at kept checkpoints). Runs on a domain with a search
space get one named, typed column per parameter (:func:`parameter_columns`).
``evocamp export`` writes them
as CSV or Parquet, and the BBOB runs in IOHprofiler's format (:func:`export_ioh`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.base.errors import ConfigError
from evocamp.base.files import atomic_write_text, replaced_atomically
from evocamp.catalogue.factory import resolve_run
from evocamp.files.archive import read_archive, read_best
from evocamp.files.evaluations import (
    EvaluationRows,
    concatenate,
    evaluations_run_spec,
    indexed_window_files,
    read_evaluations,
)
from evocamp.files.shard import STATUS_NAMES
from evocamp.model.layout import RunFolder
from evocamp.model.metrics import METRIC_DTYPE
from evocamp.model.protocol import call_optimizer
from evocamp.reporting.status import find_runs, run_progress
from evocamp.tasks.bbob import function_name

#: The columns that name a run, first in every frame.
RUN_COLUMNS = ("campaign", "algorithm", "domain", "seed")
#: What ``evocamp export --what`` can write.
TABLES = ("campaign", "archives", "evaluations")
#: The IOHprofiler format's version written (``ioh``'s ``logger.Analyzer`` of ioh 0.4.2).
IOH_FORMAT_VERSION = "0.4.2"


def _runs(folder: str | Path) -> tuple[Path, list[Path]]:
    folder = Path(folder)
    runs = find_runs(folder)
    if not runs:
        raise ConfigError(
            f"{folder} holds no runs of a campaign (expected <algorithm>/<domain>/seed<k>/ "
            "folders, as in results/<campaign>)"
        )
    return folder, runs


def _run_columns(folder: Path, run: Path) -> dict:
    run = RunFolder(run)
    return {
        "campaign": folder.name,
        "algorithm": run.algorithm,
        "domain": run.domain,
        "seed": run.seed,
    }


def _frame(run: dict, columns: dict):
    import pandas as pd

    count = len(next(iter(columns.values()))) if columns else 0
    identity = {name: [value] * count for name, value in run.items()}
    return pd.DataFrame({**identity, **columns})


def _joined(frames: list, columns: list[str]):
    import pandas as pd

    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)


def load_campaign(folder: str | Path):
    """A campaign's metrics as one tidy DataFrame: one row per run and generation.

    Parameters
    ----------
    folder : str or Path
        The campaign folder (``results/<campaign>``).

    Returns
    -------
    pandas.DataFrame
        Columns ``campaign, algorithm, domain, seed`` and every ``metrics.csv`` column
        (``docs/outputs.md``), rows sorted by algorithm, domain, seed and generation;
        runs still running contribute the generations finished so far.

    Raises
    ------
    ConfigError
        When ``folder`` holds no runs.
    """
    folder, runs = _runs(folder)
    frames = []
    for run in runs:
        rows = run_progress(run, folder).rows
        frames.append(
            _frame(_run_columns(folder, run), {name: rows[name] for name in METRIC_DTYPE.names})
        )
    return _joined(frames, [*RUN_COLUMNS, *METRIC_DTYPE.names])


def load_archives(folder: str | Path, *, solutions: bool = False):
    """The final elites of every finished run: one row per elite.

    Parameters
    ----------
    folder : str or Path
        The campaign folder.
    solutions : bool
        Add the elites' parameters as columns ``solution_0, solution_1, ...``.

    Returns
    -------
    pandas.DataFrame
        Columns ``campaign, algorithm, domain, seed, index`` (the cell), ``objective``,
        ``measure_0, ...``, ``threshold`` and the domain's extra fields. Runs without
        an archive (domains without measures) give their best solution, with
        ``index`` -1. Runs on a domain with a search space add a column per parameter,
        named as it is (:func:`parameter_columns`).
    """
    folder, runs = _runs(folder)
    frames = []
    for run in runs:
        path = RunFolder(run).archive
        if not path.exists():
            continue
        data = read_archive(path)
        if "objective" not in data:
            best = read_best(path)
            if best is None:
                continue
            data = {name: np.atleast_1d(value) for name, value in best.items()}
            data["solution"] = data["solution"].reshape(1, -1)
            data["index"] = np.array([-1])
        columns = {"index": data["index"], "objective": data["objective"]}
        for number, values in enumerate(np.asarray(data.get("measures", np.empty((1, 0)))).T):
            columns[f"measure_{number}"] = values
        not_columns = ("index", "objective", "measures", "solution", "centroids", "attrs")
        for name in sorted(set(data) - {*not_columns, "file_attrs"}):
            columns[name] = data[name]
        space = data["file_attrs"].get("space")
        columns.update(_space_columns(space and json.loads(space), data.get("solution")))
        if solutions:
            columns.update(_wide("solution", data["solution"]))
        frames.append(_frame(_run_columns(folder, run), columns))
    return _joined(frames, [*RUN_COLUMNS, "index", "objective"])


def parameter_columns(space: list[dict], solutions: np.ndarray) -> dict:
    """The solutions of a search space's runs as one column per parameter, named as it
    is: a real as floats, an integer as pandas' nullable ``Int64``, a categorical as a
    ``Categorical`` of its choices (an ordinal's ordered); an inactive parameter is
    missing (NaN, ``<NA>``)."""
    import pandas as pd

    solutions = np.asarray(solutions, dtype=np.float64).reshape(-1, len(space))
    columns = {}
    for entry, values in zip(space, solutions.T, strict=True):
        missing = np.isnan(values)
        if entry["type"] in ("categorical", "ordinal"):
            codes = np.where(missing, -1, np.nan_to_num(values, nan=-1)).astype(np.int64)
            column = pd.Categorical.from_codes(
                codes, categories=entry["choices"], ordered=entry["type"] == "ordinal"
            )
        elif entry["type"] == "integer":
            column = pd.array(np.nan_to_num(values).astype(np.int64), dtype="Int64")
            column[missing] = pd.NA
        else:
            column = values
        columns[entry["name"]] = column
    return columns


def _space_columns(space: list[dict] | None, solutions) -> dict:
    return {} if space is None or solutions is None else parameter_columns(space, solutions)


def _wide(prefix: str, values: np.ndarray) -> dict:
    return {f"{prefix}_{number}": column for number, column in enumerate(np.asarray(values).T)}


def run_evaluations(run: str | Path) -> EvaluationRows | None:
    """The evaluations kept for one run so far: ``evaluations.h5`` and the evaluation
    windows saved at kept checkpoints since (``None`` when none were kept)."""
    return concatenate([read_evaluations(path) for path in _evaluation_files(Path(run))])


def regenerated_solutions(run: str | Path, rows: EvaluationRows) -> np.ndarray:
    """The solutions of kept evaluations of an evolution strategy, regenerated from
    their noise seeds and their generation's centre and sigma (with the run's own
    batch format, exactly as the evaluation shards made them)."""
    spec = _run_spec(Path(run))
    kind = resolve_run(spec).batch_format
    # Offspring per noise seed: 2 for OpenAI-ES's antithetic pairs, 1 for SNES.
    share = kind.size({"noise": np.zeros(1, dtype=np.uint64)})
    out = np.empty((len(rows), spec["domain_spec"]["solution_dim"]))
    for position, generation in enumerate(rows.batch["generation"]):
        mine = np.flatnonzero(rows.generation == generation)
        batch = {
            name: values[position] for name, values in rows.batch.items() if name != "generation"
        }
        batch["noise"] = np.zeros((int(rows.index[mine].max()) + share) // share, np.uint64)
        batch["noise"][rows.index[mine] // share] = rows.noise_seed[mine]
        made, _ = call_optimizer(
            spec,
            int(generation),
            f"{kind.name}.solutions",
            kind.materialise,
            batch,
            0,
            kind.size(batch),
        )
        out[mine] = made[rows.index[mine]]
    return out


def _run_spec(run: Path) -> dict:
    for path in _evaluation_files(run):
        return evaluations_run_spec(path)
    raise ConfigError(f"{run} has no kept evaluations")


def _evaluation_files(run: Path) -> list[Path]:
    """A run's evaluations file and the saved evaluation windows it does not index
    (those of generations run since it was written), those that exist."""
    run = RunFolder(run)
    if not run.evaluations.exists():
        return run.evaluation_window_files()
    indexed = indexed_window_files(run.evaluations)
    return [run.evaluations, *(p for p in run.evaluation_window_files() if p not in indexed)]


def load_evaluations(folder: str | Path, *, solutions: bool = False):
    """Every kept evaluation of a campaign: one row per evaluated solution.

    Parameters
    ----------
    folder : str or Path
        The campaign folder.
    solutions : bool
        Add the solutions as columns ``solution_0, ...`` (where stored, or
        regenerated from the noise seeds of evolution strategies).

    Returns
    -------
    pandas.DataFrame
        Columns ``campaign, algorithm, domain, seed, generation, index`` (in the
        generation's batch), ``eval_seed`` (the seed the evaluation function got),
        ``objective``, ``measure_0, ...``, the extra fields, ``eval_seconds``,
        ``status`` (``ok``, ``failed``, ``crashed``, ``timed_out``: docs/failures.md;
        a failed evaluation's values are NaN), ``message`` (a failed evaluation's
        message, else empty), ``attempts`` (times it was evaluated: 1 + its retries;
        absent from files of earlier versions) and, for evolution strategies,
        ``noise_seed``. Runs that keep no evaluations give no
        rows (``storage.keep_evaluations``). Runs on a domain with a search space add
        a column per parameter, named as it is (:func:`parameter_columns`; where the
        solutions are stored).
    """
    import pandas as pd

    folder, runs = _runs(folder)
    frames = []
    for run in runs:
        rows = run_evaluations(run)
        if rows is None:
            continue
        columns = {
            "generation": rows.generation,
            "index": rows.index,
            "eval_seed": rows.seed,
            "objective": rows.objective,
            **_wide("measure", rows.measures),
            **{name: rows.extra[name] for name in sorted(rows.extra)},
            "eval_seconds": rows.eval_seconds,
        }
        if rows.status is not None:
            columns["status"] = np.asarray(STATUS_NAMES, dtype=object)[rows.status]
            columns["message"] = np.asarray(
                [
                    rows.failures.get((g, i), "")
                    for g, i in zip(rows.generation.tolist(), rows.index.tolist(), strict=True)
                ],
                dtype=object,
            )
        if rows.attempts is not None:
            columns["attempts"] = rows.attempts.astype(np.int64)
        if rows.noise_seed is not None:
            # Nullable: runs of other families have none, and float64 would round them.
            columns["noise_seed"] = pd.array(rows.noise_seed, dtype="UInt64")
        space = _run_spec(run)["domain_spec"].get("space")
        columns.update(_space_columns(space, rows.solution))
        if solutions:
            stored = rows.solution
            if stored is None and rows.noise_seed is not None:
                stored = regenerated_solutions(run, rows)
            if stored is not None:
                columns.update(_wide("solution", stored))
        frames.append(_frame(_run_columns(folder, run), columns))
    frame = _joined(frames, [*RUN_COLUMNS, "generation", "index", "eval_seed", "objective"])
    if "noise_seed" in frame:
        frame["noise_seed"] = frame["noise_seed"].astype("UInt64")
    return frame


def export(folder: str | Path, to: str | Path, *, what: str = "campaign") -> int:
    """Write :func:`load_campaign` (or ``load_archives``, ``load_evaluations``) to a
    CSV file, or a Parquet file when ``to`` ends in ``.parquet`` (needs pyarrow).

    Returns
    -------
    int
        Rows written.

    Raises
    ------
    ConfigError
        For an unknown ``what`` or suffix, or Parquet without pyarrow.
    """
    to = Path(to)
    loaders = dict(zip(TABLES, (load_campaign, load_archives, load_evaluations), strict=True))
    if what not in loaders:
        raise ConfigError(f"cannot export {what!r}: choose one of {', '.join(TABLES)}")
    if to.suffix not in (".csv", ".parquet"):
        raise ConfigError(f"cannot export to {to}: name a .csv or .parquet file")
    if to.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"writing {to} needs pyarrow, which is not installed: `pip install pyarrow`, "
                "or export to a .csv file"
            ) from None
    frame = loaders[what](folder)
    with replaced_atomically(to) as temporary:
        if to.suffix == ".parquet":
            frame.to_parquet(temporary, index=False)
        else:
            frame.to_csv(temporary, index=False, float_format="%.17g")
    return len(frame)


@dataclass
class IohRun:
    """One run as IOHprofiler's logger records it (:func:`write_ioh`)."""

    algorithm: str
    function: int
    dimension: int
    instance: int
    #: ``(evaluation, precision)`` lines: every improvement, then the last evaluation
    lines: list[tuple[int, float]]
    #: evaluations spent
    evaluations: int
    #: ``{"evals", "y"}`` of the best, and ``"x"`` where the solution is known
    best: dict
    seed: int = 0


def ioh_lines(
    evaluations: np.ndarray, precision: np.ndarray
) -> tuple[list[tuple[int, float]], int | None]:
    """The lines IOHprofiler's logger writes for values ``precision`` reached at
    ``evaluations`` (ascending): the first finite value, every one strictly below the best
    so far, then the last one (when it is not written already). Returns the lines and
    the position of the best."""
    lines: list[tuple[int, float]] = []
    best = None
    for position, (number, value) in enumerate(zip(evaluations, precision, strict=True)):
        if np.isfinite(value) and (best is None or value < precision[best]):
            lines.append((int(number), float(value)))
            best = position
    if len(precision) and lines and lines[-1][0] != int(evaluations[-1]):
        if np.isfinite(precision[-1]):
            lines.append((int(evaluations[-1]), float(precision[-1])))
    return lines, best


def _ioh_run(run: Path, progress, domain: dict) -> IohRun | None:
    """A BBOB run's :class:`IohRun`: from its kept evaluations (a line per improving
    evaluation) where it kept them, else from its metrics (a line per generation that
    improved, at the generation's last evaluation)."""
    rows = run_evaluations(run)
    if rows is not None and "precision" in rows.extra:
        order = np.lexsort((rows.index, rows.generation))
        precision = np.asarray(rows.extra["precision"], dtype=np.float64)[order]
        evaluations = np.arange(1, len(precision) + 1)
        solutions = rows.solution[order] if rows.solution is not None else None
    else:
        precision = progress.objective_max - progress.rows["best_objective"]
        evaluations = progress.rows["evaluations"].astype(np.int64)
        solutions = None
    lines, best = ioh_lines(evaluations, precision)
    if best is None:
        return None
    found = {"evals": int(evaluations[best]), "y": float(precision[best])}
    if solutions is not None:
        found["x"] = [float(v) for v in solutions[best]]
    return IohRun(
        algorithm=RunFolder(run).algorithm,
        function=int(domain["params"]["function"]),
        dimension=int(domain["solution_dim"]),
        instance=int(domain["params"]["instance"]),
        lines=lines,
        evaluations=int(evaluations[-1]),
        best=found,
        seed=RunFolder(run).seed,
    )


def write_ioh(runs: list[IohRun], to: str | Path, *, info: str) -> None:
    """Write ``runs`` in IOHprofiler's format (the layout of ``ioh``'s
    ``logger.Analyzer``), per algorithm a folder ``<to>/<algorithm>`` holding
    ``IOHprofiler_f<F>_<Name>.json`` per function (per dimension its runs: instance,
    evaluations, best) and ``data_f<F>_<Name>/IOHprofiler_f<F>_DIM<D>.dat`` (per run a
    header ``evaluations raw_y`` and its lines, ``raw_y`` being the precision ``f -
    f_opt`` as ioh logs BBOB problems); runs in the order (instance, seed)."""
    to = Path(to)
    for algorithm in sorted({r.algorithm for r in runs}):
        mine = [r for r in runs if r.algorithm == algorithm]
        for function in sorted({r.function for r in mine}):
            name = function_name(function)
            scenarios = []
            for dimension in sorted({r.dimension for r in mine if r.function == function}):
                group = sorted(
                    (r for r in mine if (r.function, r.dimension) == (function, dimension)),
                    key=lambda r: (r.instance, r.seed),
                )
                path = f"data_f{function}_{name}/IOHprofiler_f{function}_DIM{dimension}.dat"
                text = "".join(
                    "evaluations raw_y\n" + "".join(f"{n} {y:.10f}\n" for n, y in r.lines)
                    for r in group
                )
                atomic_write_text(to / algorithm / path, text)
                scenarios.append(
                    {
                        "dimension": dimension,
                        "path": path,
                        "runs": [
                            {"instance": r.instance, "evals": r.evaluations, "best": r.best}
                            for r in group
                        ],
                    }
                )
            meta = {
                "version": IOH_FORMAT_VERSION,
                "suite": "BBOB",
                "function_id": function,
                "function_name": name,
                "maximization": False,
                "algorithm": {"name": algorithm, "info": info},
                "attributes": ["evaluations", "raw_y"],
                "scenarios": scenarios,
            }
            atomic_write_text(
                to / algorithm / f"IOHprofiler_f{function}_{name}.json",
                json.dumps(meta, indent=1) + "\n",
            )


def export_ioh(folder: str | Path, to: str | Path) -> int:
    """Write a campaign's BBOB runs in IOHprofiler's format (what IOHanalyzer and
    ``iohinspector`` load; :func:`write_ioh`), from each run's kept evaluations (every
    improving evaluation) or, where it kept none, its metrics (every improving
    generation). Runs of other domains are left out; runs still running give what
    they finished.

    Returns
    -------
    int
        Runs written.

    Raises
    ------
    ConfigError
        When ``folder`` holds no runs, or no BBOB run.
    """
    folder, runs = _runs(folder)
    found = []
    for run in runs:
        progress = run_progress(run, folder)
        domain = (progress.spec or {}).get("domain_spec") or {}
        if domain.get("type") != "bbob" or not len(progress.rows):
            continue
        entry = _ioh_run(run, progress, domain)
        if entry is not None:
            found.append(entry)
    if not found:
        raise ConfigError(f"{folder} holds no run of a BBOB domain (type bbob) to export")
    write_ioh(found, to, info=f"evocamp campaign {folder.name}")
    return len(found)
