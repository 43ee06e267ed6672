"""Re-evaluation files (``finished/reevaluation_<g>.h5``): a finished run's elites
evaluated again (``evaluation.reevaluate``) and the corrected metrics they give."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.files.hdf5 import atomic_h5, open_for_reading, write_dataset, write_identity

#: The corrected final metrics (Flageat & Cully 2023), as the summary and the campaign
#: tables name them: each is its raw metric of the archive of the elites' means.
CORRECTED_METRICS = (
    "corrected_qd_score",
    "corrected_norm_qd_score",
    "corrected_coverage",
    "corrected_best_objective",
)


@dataclass
class Reevaluation:
    """A run's elites evaluated ``repeats`` more times.

    Attributes
    ----------
    generation : int
        The generation whose archive was re-evaluated (the run's last).
    repeats : int
        Evaluations of each elite.
    index : numpy.ndarray
        int64: each elite's cell index in the archive (-1: the best solution of a run
        without an archive), ascending.
    seed : numpy.ndarray
        uint64: each elite's re-evaluation seed (its repeats' seeds derive from it).
    raw_objective : numpy.ndarray
        float64: the objective the archive holds for each elite.
    objective, measures : numpy.ndarray
        float64: the means over the repeats.
    extra : dict of str to numpy.ndarray
        The means of the extra fields and the spread (``objective_std``, ...).
    corrected : dict of str to float
        :data:`CORRECTED_METRICS` (NaN where the run has no archive).
    """

    generation: int
    repeats: int
    index: np.ndarray
    seed: np.ndarray
    raw_objective: np.ndarray
    objective: np.ndarray
    measures: np.ndarray
    extra: dict
    corrected: dict


_COLUMNS = ("index", "seed", "raw_objective", "objective", "measures")


def write_reevaluation(path: str | Path, spec: dict, result: Reevaluation) -> None:
    """Write a re-evaluation atomically (not durably: a rerun recomputes it)."""
    with atomic_h5(path, durable=False) as handle:
        write_identity(handle, spec, kind="reevaluation", generation=result.generation)
        handle.attrs["repeats"] = result.repeats
        handle.attrs["corrected"] = json.dumps(result.corrected, sort_keys=True)
        for name in _COLUMNS:
            write_dataset(handle, name, getattr(result, name))
        extra = handle.create_group("extra")
        for name in sorted(result.extra):
            write_dataset(extra, name, result.extra[name])


def read_reevaluation(path: str | Path) -> Reevaluation:
    """Read a re-evaluation file.

    Raises
    ------
    CorruptFileError
        When the file is broken (the message names it).
    """
    with open_for_reading(path, what="re-evaluation") as handle:
        return Reevaluation(
            generation=int(handle.attrs["generation"]),
            repeats=int(handle.attrs["repeats"]),
            **{name: handle[name][()] for name in _COLUMNS},
            extra={name: data[()] for name, data in handle["extra"].items()},
            corrected=json.loads(handle.attrs["corrected"]),
        )
