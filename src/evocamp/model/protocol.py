"""The optimizer protocol: how the generation loop talks to every optimizer.

The loop (initialise, evaluate, tell, keep, finalise; shard and Dask modes) knows an
optimizer only through this protocol, which built-in families and users' classes
(``type: plugin``) implement alike::

    class MyOptimizer:
        def __init__(self, *, solution_dim, x0, bounds, seed, **params): ...
        def ask(self):              # the next generation's batch: an (n, solution_dim)
            ...                     # array, or a dict of arrays (a compact batch)
        def tell(self, objective, measures, **extra): ...  # results of the whole batch
        # optional:
        def stats(self): ...        # {"sigma": ...}: metrics columns (OPTIMIZER_STATS)
        def result(self): ...       # {"centre": ...}: arrays stored in archive.h5 /result
        batch_format = MyBatch      # only with compact batches: a CompactBatch subclass

Asynchronous mode (``mode: async``) needs two more methods, which say that the class
accepts a proposal request of any size and a tell of any subset of its proposals::

        def ask_async(self, *, slots, evaluations):  # one proposal per freed worker slot
            ...     # an (len(slots), solution_dim) array, or a list of compact batches
        def tell_async(self, objective, measures, *, solutions, **extra): ...
            # the results of any completed proposals (usually one), with the solutions

A *compact batch* describes the solutions instead of listing them (an ES centre and
one noise seed per offspring; a BO history from which every shard proposes). Its
:class:`CompactBatch` class knows the batch's size, materialises the slice of one
shard, says whether shards propose their solutions (then each shard stores what it
evaluated and ``tell`` receives it as ``solutions=``), and names modules Dask workers
import once. Shards never build the optimizer: they call these static methods on the
stored batch, whose values may be h5py datasets (index them: ``[()]`` reads all).

A batch of ``n`` solutions is evaluated in ``shards`` contiguous, near-equal slices
(:func:`shard_bounds`): shard ``s`` evaluates solutions ``start..stop-1``. Results never
depend on the split (every solution's evaluation seed depends only on its index in the
batch), except for algorithms whose shards propose their own solutions (decentralised
BO), where each shard is one worker of the algorithm.

Every call of a user's method (``__init__``, ``ask``, ``tell``, ``stats``,
``result``, and the batch format's ``size`` and ``solutions``) goes through
:func:`call_optimizer`, so any failure is one message naming the class, the method,
the run, the generation (and the shard).
"""

from __future__ import annotations

import inspect
import time
import traceback
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from evocamp.base.errors import EvocampError, OptimizerError
from evocamp.model.metrics import SHARD_STATS
from evocamp.model.runspec import is_plugin, optimizer_name, where

#: The key under which whoever holds a compact batch that names parents by their cells
#: (:meth:`CompactBatch.elites_read`) gives it those elites: an :class:`ElitesByCell`.
#: It is never stored with the batch.
ELITES = "elites"


@runtime_checkable
class ElitesByCell(Protocol):
    """An archive's elites indexed by cell (what ``batch[ELITES]`` holds): the archive
    in memory (``ArchiveElites``, ``families/qd/compact.py``), the states on disk
    (``StoredElites``, ``files/checkpoint.py``) or the cells a Dask task was sent
    (``ElitesAt``, ``base/shard_views.py``)."""

    def __getitem__(self, cells) -> np.ndarray:
        """The solutions of ``cells`` (sorted cell indices), one row each; an error
        naming the cell when one is empty or not held."""
        ...


def shard_bounds(batch: int, shards: int, shard: int) -> tuple[int, int]:
    """Slice ``[start, stop)`` of shard ``shard`` when ``batch`` solutions are split
    into ``shards`` contiguous, near-equal parts."""
    base, remainder = divmod(batch, shards)
    start = shard * base + min(shard, remainder)
    return start, start + base + (1 if shard < remainder else 0)


def shard_of_slice(batch: int, shards: int, start: int, stop: int) -> int | None:
    """The shard whose slice is exactly ``start..stop-1`` (``None`` if none is)."""
    for shard in range(shards):
        if shard_bounds(batch, shards, shard) == (start, stop):
            return shard
    return None


#: The key under which whoever holds a compact batch may give the solutions its
#: optimizer asked, every row (an object indexed with a slice of rows; the node-local
#: state cache's, read where indexed): :class:`BatchFormat` then takes them instead of
#: making them. It is never stored with the batch. An optimizer that holds them from
#: ``ask`` to ``tell`` gives them by ``asked_solutions()`` (``None`` when it does not)
#: and takes them back after a restore by ``restore_asked_solutions(solutions)``.
ASKED = "asked"

#: Methods every optimizer class has.
REQUIRED_METHODS = ("ask", "tell")
#: Methods of optimizer classes that run in asynchronous mode (``mode: async``).
ASYNC_METHODS = ("ask_async", "tell_async")


class CompactBatch:
    """The format of an optimizer's compact batches: subclass it and name the subclass
    in the optimizer class as ``batch_format``.

    Attributes
    ----------
    proposes_in_shards : bool
        ``solutions`` proposes (e.g. fits a model per shard), so a shard's solutions
        depend on its slice: shards store the solutions they evaluated with their
        results, and ``tell`` receives them as ``solutions`` (in batch order).
    shard_modules : tuple of str
        Modules that Dask mode's workers import once, before they are forked (e.g.
        ``("sklearn.ensemble",)`` when every shard fits a surrogate).
    """

    proposes_in_shards: bool = False
    shard_modules: tuple[str, ...] = ()

    @staticmethod
    def size(batch) -> int:
        """How many solutions the batch (a dict of arrays, as ``ask`` returned it)
        describes."""
        raise NotImplementedError

    @staticmethod
    def solutions(batch, start: int, stop: int):
        """Solutions ``start..stop-1`` of the batch as an ``(stop - start, solution_dim)``
        array, or a dict ``{"solutions": array, "fit_seconds": s, "propose_seconds":
        s}`` that also reports the seconds spent making them."""
        raise NotImplementedError

    @staticmethod
    def elites_read(batch, start: int, stop: int) -> np.ndarray:
        """The cells of the run's archive whose elites solutions ``start..stop-1`` are
        made from (sorted, unique; none by default). When there are any, ``solutions``
        finds them in ``batch[ELITES]`` (:data:`ELITES`), which the batch's holder adds:
        the run's archive in memory, or the run's states on disk for a shard."""
        return np.empty(0, dtype=np.int64)


#: The hooks of evocamp 0.1's compact batches, found on the optimizer class itself.
_OLD_HOOKS = ("batch_size", "solutions", "proposes_in_shards", "shard_modules")


@dataclass(frozen=True)
class BatchFormat:
    """How the loop sizes and materialises an optimizer class's batches.

    ``compact`` is the class's :class:`CompactBatch` subclass, or ``None`` for plain
    batches (an array of solutions, stored as ``{"solutions": array}``); the other
    attributes follow from it, read once when the format is made.

    Attributes
    ----------
    name : str
        The format's class name, for messages (``plain`` for plain batches).
    proposes_in_shards : bool
        Whether shards propose their solutions (:attr:`CompactBatch.proposes_in_shards`).
    shard_modules : tuple of str
        Modules Dask workers import up front.
    reads_elites : bool
        Whether the format's batches may name parents by their cells
        (:meth:`CompactBatch.elites_read`).
    """

    compact: type | None = None
    name: str = field(init=False, compare=False)
    proposes_in_shards: bool = field(init=False, compare=False)
    shard_modules: tuple[str, ...] = field(init=False, compare=False)
    reads_elites: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        compact = self.compact
        facts = {
            "name": "plain" if compact is None else compact.__name__,
            "proposes_in_shards": compact is not None and bool(compact.proposes_in_shards),
            "shard_modules": () if compact is None else tuple(compact.shard_modules),
            "reads_elites": compact is not None
            and compact.elites_read is not CompactBatch.elites_read,
        }
        for name, value in facts.items():
            object.__setattr__(self, name, value)

    def elites_read(self, batch, start: int, stop: int) -> np.ndarray:
        """The cells whose elites solutions ``start..stop-1`` are made from (none when
        the batch holds its solutions, :data:`ASKED`)."""
        if not self.reads_elites or ASKED in batch:
            return np.empty(0, dtype=np.int64)
        return np.asarray(self.compact.elites_read(batch, start, stop), dtype=np.int64)

    def size(self, batch) -> int:
        """Solutions in a batch."""
        if self.compact is None:
            return len(batch["solutions"])
        if ASKED in batch:
            return len(batch[ASKED])
        return int(self.compact.size(batch))

    def materialise(self, batch, start: int, stop: int) -> tuple[np.ndarray, dict]:
        """Solutions ``start..stop-1`` as a float64 array, and the seconds spent making
        them (:data:`SHARD_STATS`: those the format reported, else the whole call as
        ``propose_seconds``; nothing for a plain batch). A compact batch's solutions
        held under :data:`ASKED` are taken from there."""
        if self.compact is None:
            return np.asarray(batch["solutions"][start:stop], dtype=np.float64), {}
        began = time.perf_counter()
        made = (
            batch[ASKED][start:stop]
            if ASKED in batch
            else self.compact.solutions(batch, start, stop)
        )
        timings = {"propose_seconds": time.perf_counter() - began}
        if isinstance(made, dict):
            reported = {name: float(made[name]) for name in SHARD_STATS if name in made}
            timings = reported or timings
            made = made["solutions"]
        return np.asarray(made, dtype=np.float64), timings


def batch_format_of(cls: type, *, name: str) -> BatchFormat:
    """The batch format of an optimizer class (``name``: how messages name the class).

    Raises
    ------
    OptimizerError
        When ``batch_format`` is not a :class:`CompactBatch` subclass, or the class
        still carries evocamp 0.1's hooks (``batch_size``/``solutions`` static methods,
        ``proposes_in_shards``, ``shard_modules``): the message says what to change.
    """
    compact = getattr(cls, "batch_format", None)
    if compact is None:
        old = [hook for hook in _OLD_HOOKS if hasattr(cls, hook)]
        if {"batch_size", "solutions"} <= set(old) or set(old) & {
            "proposes_in_shards",
            "shard_modules",
        }:
            raise OptimizerError(
                f"optimizer class {name} describes compact batches with "
                f"{', '.join(old)} on the optimizer class itself (evocamp 0.1); move them "
                "to a subclass of evocamp.plugins.CompactBatch (static methods "
                "size(batch), formerly batch_size, and solutions(batch, start, stop); "
                "attributes proposes_in_shards, shard_modules) and name it in the class: "
                "batch_format = MyBatch (docs/plugins.md)"
            )
        return BatchFormat()
    if not (isinstance(compact, type) and issubclass(compact, CompactBatch)):
        raise OptimizerError(
            f"optimizer class {name}: batch_format must be a subclass of "
            f"evocamp.plugins.CompactBatch, not {compact!r}"
        )
    missing = [
        method
        for method in ("size", "solutions")
        if getattr(compact, method) is getattr(CompactBatch, method)
    ]
    if missing:
        raise OptimizerError(
            f"optimizer class {name}: its batch format {compact.__name__} does not define "
            f"{' and '.join(m + '()' for m in missing)}"
        )
    return BatchFormat(compact)


def check_methods(cls: type, *, name: str) -> None:
    """Raise :class:`OptimizerError` when an optimizer class lacks ``ask`` or ``tell``."""
    missing = [method for method in REQUIRED_METHODS if not callable(getattr(cls, method, None))]
    if missing:
        raise OptimizerError(
            f"optimizer class {name} has no method {', '.join(repr(m) for m in missing)}; "
            "an optimizer needs ask() and tell(objective, measures, **extra)"
        )


def call_optimizer(
    spec: dict,
    generation: int,
    method: str,
    function,
    *args,
    shard: int | None = None,
    evaluation: int | None = None,
    slot: int | None = None,
    **kwargs,
):
    """Call ``function`` (a method of the run's optimizer or of its batch format).

    For a user's class any exception becomes one :class:`OptimizerError` naming the
    class, the method, the run, the generation and, in a shard, the shard (in an
    asynchronous run: the ``evaluation`` id and its slot instead); the
    traceback goes into its ``details`` (the job's log). Built-in classes are called
    directly: their failures are evocamp's bugs and keep their tracebacks.
    """
    if not is_plugin(spec):
        return function(*args, **kwargs)
    try:
        return function(*args, **kwargs)
    except EvocampError:
        raise
    except Exception as error:  # noqa: BLE001 - user code may raise anything
        raise OptimizerError(
            f"{where(spec, generation, shard, evaluation=evaluation, slot=slot)}: optimizer class "
            f"{optimizer_name(spec)}, "
            f"method {method}() raised {type(error).__name__}: {error}",
            details="".join(traceback.format_exception(error)),
        ) from None


def call_method(spec: dict, generation: int, optimizer, method: str, *args, **kwargs):
    """Call ``optimizer.<method>`` through :func:`call_optimizer`."""
    return call_optimizer(spec, generation, method, getattr(optimizer, method), *args, **kwargs)


def failed_as_worst(objective, failed) -> np.ndarray:
    """The objective values an optimizer ranks when some of its batch failed
    (``evaluation.on_failure`` discard: ``tell(..., failed=mask)``, failed rows NaN):
    the failed rows at ``-inf``, ranked below every evaluated solution."""
    objective = np.array(objective, dtype=np.float64)
    if failed is not None:
        objective[np.asarray(failed, dtype=bool)] = -np.inf
    return objective


def checked_batch(spec: dict, generation: int, batch_format: BatchFormat, asked):
    """The batch ``ask()`` returned, as a dict of arrays, and its size.

    Raises
    ------
    OptimizerError
        When a plain batch is not a finite (n, solution_dim) array with n >= 1 (NaN
        allowed on a domain with a space: an inactive parameter), or a
        compact one's size is not a positive integer.
    """
    method = f"optimizer {optimizer_name(spec)}, method ask()"
    if isinstance(asked, dict):
        batch = {name: np.asarray(value) for name, value in asked.items()}
        if batch_format.compact is not None:
            size = call_optimizer(
                spec, generation, f"{batch_format.name}.size", batch_format.size, batch
            )
            if size < 1:
                raise OptimizerError(
                    f"{where(spec, generation)}: {method} returned a batch that "
                    f"{batch_format.name}.size() says holds {size} solutions"
                )
            return batch, size
        asked = batch.get("solutions")
    dim = spec["domain_spec"]["solution_dim"]
    try:
        solutions = np.asarray(asked, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise OptimizerError(
            f"{where(spec, generation)}: {method} returned a non-numeric batch ({error})"
        ) from None
    if solutions.ndim != 2 or solutions.shape[1] != dim or len(solutions) == 0:
        raise OptimizerError(
            f"{where(spec, generation)}: {method} returned a batch of shape "
            f"{solutions.shape}; expected (n, {dim}) with n >= 1 (solution_dim {dim})"
        )
    # A domain with a space holds its inactive parameters as NaN (evocamp.model.space).
    bad = np.isinf(solutions) if "space" in spec["domain_spec"] else ~np.isfinite(solutions)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise OptimizerError(
            f"{where(spec, generation)}: {method} returned a batch whose solution {row} "
            "is not finite"
        )
    return {"solutions": solutions}, len(solutions)


def accepts_failed(cls: type, method: str = "tell") -> bool:
    """Whether an optimizer class's ``method`` (``tell``, or ``tell_async``) names the
    ``failed`` keyword (``evaluation.on_failure`` discard: failed rows are NaN and it must
    leave them out; a ``**extra`` alone would take them without knowing)."""
    try:
        return "failed" in inspect.signature(getattr(cls, method)).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def accepts_async(cls: type) -> bool:
    """Whether an optimizer class has the asynchronous methods (:data:`ASYNC_METHODS`)."""
    return all(callable(getattr(cls, method, None)) for method in ASYNC_METHODS)


def checked_proposals(
    spec: dict, generation: int, batch_format: BatchFormat, asked, *, count: int
) -> list[dict]:
    """The proposals ``ask_async`` returned, as one single-solution batch each.

    Raises
    ------
    OptimizerError
        When there are not ``count`` of them, or one is not a valid batch of one
        solution (see :func:`checked_batch`).
    """
    method = f"optimizer {optimizer_name(spec)}, method ask_async()"
    if batch_format.compact is None:
        batch, size = checked_batch(spec, generation, batch_format, asked)
        if size != count:
            raise OptimizerError(
                f"{where(spec, generation)}: {method} returned {size} solutions for "
                f"{count} free slots"
            )
        return [{"solutions": row[None]} for row in batch["solutions"]]
    if not isinstance(asked, (list, tuple)) or len(asked) != count:
        raise OptimizerError(
            f"{where(spec, generation)}: {method} must return a list of {count} compact "
            f"batches (one per free slot), not {type(asked).__name__}"
        )
    checked = []
    for proposal in asked:
        batch, size = checked_batch(spec, generation, batch_format, proposal)
        if size != 1:
            raise OptimizerError(
                f"{where(spec, generation)}: {method} returned a proposal of {size} "
                "solutions; each free slot gets one"
            )
        checked.append(batch)
    return checked
