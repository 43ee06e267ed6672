"""What a plugin author imports from evocamp (docs/plugins.md): the one public module for
users' evaluation functions and optimizer classes.

An evaluation function needs nothing from evocamp (``evaluate(solutions, seeds,
**params)`` returns a dict of arrays). An optimizer class with compact batches names a
:class:`CompactBatch` subclass as its ``batch_format``; :class:`BatchFormat` is how the
loop sizes and materialises its batches (``BatchFormat(MyBatch).materialise(batch,
start, stop)`` is what a shard calls), for testing a format before a campaign runs it.
:data:`ELITES` and :data:`ASKED` are the keys under which whoever holds a compact batch
adds its parents' elites or its asked solutions. The errors are those evocamp reports
about a plugin: :class:`OptimizerError` (a class, method or batch), :class:`EvaluationError`
(an evaluation function), both :class:`EvocampError`.

The names live in lower layers (``evocamp.model.protocol``, ``evocamp.base.errors``);
this module only re-exports them, so that plugins never import an internal path.
"""

from evocamp.base.errors import EvaluationError, EvocampError, OptimizerError
from evocamp.model.protocol import ASKED, ELITES, BatchFormat, CompactBatch

__all__ = [
    "ASKED",
    "ELITES",
    "BatchFormat",
    "CompactBatch",
    "EvaluationError",
    "EvocampError",
    "OptimizerError",
]
