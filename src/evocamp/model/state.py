"""The run state: what the loops fold results into and the checkpoints hold.

A :class:`RunState` is everything a run needs to continue after a generation. The
loops (:mod:`evocamp.loop`) create and advance it; :mod:`evocamp.files.checkpoint`
writes and reads it (kept checkpoints and working states). It holds the optimizer and
its archive as opaque objects, so this module imports nothing above the model layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RunState:
    """Everything a run needs to continue after a generation.

    Attributes
    ----------
    spec : dict
        The run spec.
    generation : int
        The last generation told (0: freshly initialised).
    optimizer : object or None
        The optimizer; ``None`` when read with ``with_optimizer=False`` (or light).
    archive : ribs archive or None
        The run's elites: a QD optimizer's result archive, or the passive archive of
        another family; ``None`` without measures (or when read without the optimizer).
    next_batch : dict of str to numpy.ndarray
        The batch of generation ``generation + 1``, as the optimizer describes it.
    next_seeds : numpy.ndarray
        Its evaluation seeds, one per solution.
    metrics_window : numpy.ndarray
        Metric rows (``METRIC_DTYPE``) since the last kept checkpoint.
    finished_at : float
        Unix time at which this state was written.
    best : dict or None
        Runs without an archive: the best solution evaluated so far, with its
        ``objective`` and extra fields (empty before generation 1); ``None`` otherwise.
    evaluations : EvaluationRows or None
        Rows of the evaluations told since the state was read (kept evaluations,
        :class:`evocamp.files.evaluations.EvaluationRows`), when the loop was asked
        for them (Dask and asynchronous segment jobs record them in their window's
        file); never written into a state file (``None`` when read, or when not kept).
    numerics : list of dict
        What computed the run, per step kind (:mod:`evocamp.model.numerics`): BLAS
        kernel, package versions, CPU model; empty in checkpoints written before
        evocamp recorded it.
    """

    spec: dict
    generation: int
    optimizer: object
    archive: object
    next_batch: dict
    next_seeds: np.ndarray
    metrics_window: np.ndarray
    finished_at: float
    best: dict | None = None
    evaluations: object = None
    numerics: list = field(default_factory=list)
