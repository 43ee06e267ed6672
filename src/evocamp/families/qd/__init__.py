"""QD algorithms built from pyribs components.

- :mod:`~evocamp.families.qd.components`: the archives, emitters and schedulers a
  :class:`QDRecipe` names, and :func:`build_scheduler`;
- :mod:`~evocamp.families.qd.batches`: compact QD batches (:class:`QDBatch`) and the
  regeneration of their offspring (what a shard runs; no pyribs);
- :mod:`~evocamp.families.qd.compact`: making compact batches from pyribs' emitters;
- :mod:`~evocamp.families.qd.optimizer`: :class:`QDOptimizer`, a scheduler behind the
  optimizer protocol.

pyribs' private attributes are read through :mod:`evocamp.families.ribs_internals`
only. The names below are the package's public face; checkpoints written before the
package was split name ``evocamp.families.qd.QDOptimizer``, which this import keeps
resolving (:data:`evocamp.files.legacy.MOVED_CLASSES` maps it too).
"""

from evocamp.families.qd.batches import QDBatch
from evocamp.families.qd.compact import (
    ArchiveElites,
    compact_ask,
    compact_emitters,
    inserted_cells,
)
from evocamp.families.qd.components import (
    BANDIT,
    BAYESIAN_OPTIMIZATION,
    BAYESIAN_OPTIMIZATION_SCHEDULER,
    CVT,
    DENSITY,
    DNS,
    EVOLUTION_STRATEGY,
    GAUSSIAN,
    GRID,
    ISO_LINE,
    PROXIMITY,
    STANDARD,
    VARIATION,
    VARIATIONS,
    ArchiveKind,
    EmitterKind,
    QDRecipe,
    SchedulerKind,
    build_scheduler,
    check_numba_disabled,
    random_start,
)
from evocamp.families.qd.optimizer import QDOptimizer

__all__ = [
    "BANDIT",
    "BAYESIAN_OPTIMIZATION",
    "BAYESIAN_OPTIMIZATION_SCHEDULER",
    "CVT",
    "DENSITY",
    "DNS",
    "EVOLUTION_STRATEGY",
    "GAUSSIAN",
    "GRID",
    "ISO_LINE",
    "PROXIMITY",
    "STANDARD",
    "VARIATION",
    "VARIATIONS",
    "ArchiveElites",
    "ArchiveKind",
    "EmitterKind",
    "QDBatch",
    "QDOptimizer",
    "QDRecipe",
    "SchedulerKind",
    "build_scheduler",
    "check_numba_disabled",
    "compact_ask",
    "compact_emitters",
    "inserted_cells",
    "random_start",
]
