"""Nevergrad's optimizers by registry name (``NGOpt``, ``CMA``, ``TwoPointsDE``, ``PSO``,
...), through Nevergrad's own ask/tell.

One generation is one batch of ``batch_size`` candidates asked one after the other
(Nevergrad's ``ask`` with ``num_workers`` candidates allowed in flight) and told in
batch order; in asynchronous mode each freed slot gets one candidate and each result is
told as it arrives (Nevergrad's ask/tell takes one result at a time).

On a domain with a search space (:mod:`evocamp.model.space`) the parametrization is a
``ng.p.Dict`` of the space's parameters (:func:`space_parametrization`): a real as
``ng.p.Scalar`` (``ng.p.Log`` for ``log``), an integer as the same with integer casting,
a categorical as ``ng.p.Choice``, an ordinal as ``ng.p.TransitionChoice`` (its
neighbours are its nearest values), each initialised at its default. Nevergrad has no
conditions: every parameter is drawn, and those inactive in the candidate are NaN in
its solution (left out of the configuration the evaluation function gets).

Randomness: Nevergrad draws from the parametrization's ``random_state`` (seeded here
from the run's optimizer seed) and, inside some optimizers, from numpy's global random
state: its ``CMA`` seeds pycma, which reseeds and draws from the global state, and
``NGOpt``'s meta-models build inner optimizers whose generators are drawn from it.
Numpy's global state is shared with everything else in a process and held by no
checkpoint, so every call into Nevergrad runs with the optimizer's own global state
swapped in (:class:`GlobalDraws`) and swapped out after it: the state is pickled with
the optimizer, and a tell step in another process continues bit for bit. With the same
seed, Nevergrad's own loop in one process (``np.random.seed`` of the same number, then
ask and tell) evaluates the same solutions (``tests/unit/test_libraries.py``).

``nevergrad`` is imported inside the functions and the class (an optional extra:
``pip install 'evocamp[nevergrad]'``), always through :func:`nevergrad_module`, which
applies :func:`metamodel_float_shim` first.
"""

from __future__ import annotations

import builtins
import functools
import warnings
from importlib import metadata

import numpy as np

from evocamp.base.errors import OptimizerError
from evocamp.families.pycma import rekey_solution_archives
from evocamp.model.space import Space


def nevergrad_seeds(seed: int) -> tuple[int, int]:
    """The seeds of a run's optimizer seed: the parametrization's ``random_state`` and
    numpy's global state during Nevergrad's calls (each below ``2**32``)."""
    first = int(seed) % 2**32
    return first, (first + 1) % 2**32


class GlobalDraws:
    """Numpy's global random state of one optimizer: swapped in around each call into
    the library (``with draws:``) and kept, so the library's global draws come from a
    stream the optimizer owns and pickles, and nobody else's draws are changed."""

    def __init__(self, seed: int):
        self.state = np.random.RandomState(seed).get_state()
        self.saved = None

    def __enter__(self):
        self.saved = np.random.get_state()
        np.random.set_state(self.state)
        return self

    def __exit__(self, *exc) -> None:
        self.state = np.random.get_state()
        np.random.set_state(self.saved)
        self.saved = None


#: The nevergrad release whose meta-model :func:`metamodel_float_shim` mends.
SHIMMED_NEVERGRAD = "1.0.12"


def _float_as_numpy_did(value=0.0) -> float:
    """``float`` as numpy < 2.4 made it of an array: a one-element array (of any shape)
    gives its element; anything else is the builtin's."""
    if isinstance(value, np.ndarray) and value.size == 1:
        return builtins.float(value.reshape(-1)[0])
    return builtins.float(value)


def shim_applies(nevergrad: str, numpy: str) -> bool:
    """Whether :func:`metamodel_float_shim` applies to these versions of nevergrad and
    numpy: nevergrad 1.0.12 with numpy 2.4 or later."""
    major, minor = (int(part) for part in numpy.split(".")[:2])
    return nevergrad == SHIMMED_NEVERGRAD and (major, minor) >= (2, 4)


@functools.cache
def metamodel_float_shim() -> bool:
    """Give nevergrad 1.0.12's ``nevergrad.optimization.metamodel`` a module-level
    ``float`` that converts a one-element array as numpy < 2.4 did; whether it is
    applied.

    Why: ``NGOpt`` picks its ``MetaModel`` in low dimensions, at small budgets and with
    several workers (config/bbob.yaml's 2-, 5- and 10-d runs), and the meta-model's
    surrogate loss, ``learn_on_k_best``'s ``loss_function_sm`` at
    ``nevergrad/optimization/metamodel.py`` line 177, is
    ``float(model.predict(...))`` of a one-element array. numpy < 2.4 warned and
    returned the element; numpy 2.4 (pinned: every digest depends on it) raises
    ``TypeError: only 0-dimensional arrays can be converted to Python scalars``
    (facebookresearch/nevergrad#1612, closed in 2024 when numpy only warned; no
    release fixes it). The module's global name ``float`` shadows the builtin in that
    module alone (Python looks a name up in the module's globals before the
    builtins), so the surrogate gives exactly the bits it gave under numpy < 2.4 and
    nothing else changes.

    Applied only for nevergrad 1.0.12 (its installed distribution's version, not its
    source) with numpy >= 2.4; with another nevergrad it does nothing (a later release
    may fix the line). Remove it when the pinned nevergrad no longer calls ``float`` on
    an array there. Done once per process (later calls return the first one's answer
    without reading the installed versions again); :func:`nevergrad_module` calls it, so
    every process that runs the family (workers, Dask, tell steps, unpickled optimizers)
    has it.
    """
    if not shim_applies(metadata.version("nevergrad"), np.__version__):
        return False
    from nevergrad.optimization import metamodel

    metamodel.float = _float_as_numpy_did
    return True


def nevergrad_module():
    """``nevergrad``, imported, with :func:`metamodel_float_shim` applied."""
    import nevergrad as ng

    metamodel_float_shim()
    return ng


def pycma_strategies(optimizer) -> list:
    """The pycma strategies (``cma.CMAEvolutionStrategy``) inside a Nevergrad optimizer:
    those of its sub-optimizers (``NGOpt``'s choice, a ``MetaModel``'s, a portfolio's),
    found through the attributes of Nevergrad's optimizer objects."""
    found, stack, seen = [], [optimizer], set()
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if type(value).__name__ == "CMAEvolutionStrategy":
            found.append(value)
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif type(value).__module__.startswith("nevergrad.optimization") and hasattr(
            value, "__dict__"
        ):
            stack.extend(v for k, v in vars(value).items() if k not in _NOT_OPTIMIZERS)
    return found


#: Attributes of Nevergrad's optimizers that hold no optimizer (not walked).
_NOT_OPTIMIZERS = frozenset({"archive", "parametrization", "current_bests", "pruning"})


def registry_names() -> list[str]:
    """Every optimizer name of Nevergrad's registry (what ``optimizer:`` accepts)."""
    ng = nevergrad_module()

    return sorted(ng.optimizers.registry)


def parametrization(*, solution_dim: int, x0, bounds, seed: int):
    """Nevergrad's parametrization of a run: an array of ``solution_dim`` floats from
    ``x0`` (within ``bounds``, when given), its ``random_state`` seeded."""
    ng = nevergrad_module()
    x0 = np.array(x0, dtype=np.float64).reshape(int(solution_dim))
    if bounds is None:
        array = ng.p.Array(init=x0)
    else:
        low, high = float(bounds[0]), float(bounds[1])
        array = ng.p.Array(init=np.clip(x0, low, high), lower=low, upper=high)
    array.random_state = np.random.RandomState(seed)
    return array


def space_parametrization(space: Space, *, seed: int):
    """Nevergrad's parametrization of a search space: a ``ng.p.Dict`` of its parameters
    in declaration order, each from its default, its ``random_state`` seeded."""
    ng = nevergrad_module()

    parameters = {}
    for entry in space.entries:
        kind, default = entry["type"], entry["default"]
        if kind == "categorical":
            parameter = ng.p.Choice(entry["choices"])
        elif kind == "ordinal":
            parameter = ng.p.TransitionChoice(entry["choices"])
        else:
            scale = ng.p.Log if entry["log"] else ng.p.Scalar
            parameter = scale(init=float(default), lower=entry["low"], upper=entry["high"])
            if kind == "integer":
                parameter = parameter.set_integer_casting()
        if kind in ("categorical", "ordinal"):
            parameter.value = default
        parameters[entry["name"]] = parameter
    dictionary = ng.p.Dict(**parameters)
    dictionary.random_state = np.random.RandomState(seed)
    return dictionary


class NevergradOptimizer:
    """One of Nevergrad's optimizers, named by its registry name, on the objective alone
    (maximised: Nevergrad minimises the negated objective).

    Parameters
    ----------
    solution_dim : int
        Parameters of a solution.
    x0 : numpy.ndarray
        The parametrization's initial value (Nevergrad's ``init``).
    bounds : tuple or None
        ``(low, high)`` of every parameter (Nevergrad's ``lower``/``upper``).
    seed : int
        The run's optimizer seed (:func:`nevergrad_seeds`).
    optimizer : str
        A name of ``nevergrad.optimizers.registry``.
    batch_size : int
        Candidates per generation.
    budget : int or None
        Nevergrad's ``budget`` (evaluations the optimizer plans for; ``NGOpt`` chooses
        its algorithm by it); ``None``: Nevergrad's unknown budget.
    num_workers : int or None
        Nevergrad's ``num_workers`` (candidates in flight); ``None``: ``batch_size``.
    space : list of dict, optional
        The domain's search space (:mod:`evocamp.model.space`; ``x0`` and ``bounds``
        unused): :func:`space_parametrization`.
    """

    def __init__(
        self,
        *,
        solution_dim: int,
        x0,
        bounds,
        seed: int,
        optimizer: str,
        batch_size: int,
        budget: int | None = None,
        num_workers: int | None = None,
        space: list | None = None,
    ):
        ng = nevergrad_module()
        own, global_seed = nevergrad_seeds(seed)
        self.space = None if space is None else Space(space)
        self.name = str(optimizer)
        self.batch_size = int(batch_size)
        self.draws = GlobalDraws(global_seed)
        workers = self.batch_size if num_workers is None else int(num_workers)
        with self.draws, _quiet():
            if self.space is None:
                parameters = parametrization(
                    solution_dim=solution_dim, x0=x0, bounds=bounds, seed=own
                )
            else:
                parameters = space_parametrization(self.space, seed=own)
            self.optimizer = ng.optimizers.registry[self.name](
                parametrization=parameters,
                budget=None if budget is None else int(budget),
                num_workers=workers,
            )
        self.asked: list = []

    def __setstate__(self, state: dict) -> None:
        """Unpickled (a tell step, a Dask worker, a resumed run): the shim applied here
        too (nevergrad's modules come back with the optimizer), and the archives of
        solutions of every pycma strategy inside keyed again for this process
        (:func:`~evocamp.families.pycma.rekey_solution_archives`: pycma keys them by
        ``hash``, which Python salts per process). pycma looks a told solution up
        there, and NGOpt's ``MetaModel`` tells it the surrogate's candidates, which it
        did not ask: without the new keys its runs gave other evaluations in Dask mode
        than in shard mode, and others again with warm start off."""
        nevergrad_module()
        self.__dict__.update(state)
        for strategy in pycma_strategies(self.optimizer):
            rekey_solution_archives(strategy)

    def _ask(self, count: int) -> np.ndarray:
        try:
            with self.draws, _quiet():
                candidates = [self.optimizer.ask() for _ in range(count)]
        except Exception as error:  # noqa: BLE001 - the library's own failure, named
            hint = ""
            if getattr(self, "space", None) is not None and self.optimizer.budget is None:
                hint = " (on a search space, NGOpt and its kin choose by budget: give budget)"
            raise OptimizerError(
                f"nevergrad's {self.name} failed to ask: {type(error).__name__}: {error}{hint}"
            ) from error
        self.asked += candidates
        return np.array([self._row(c) for c in candidates], dtype=np.float64).reshape(count, -1)

    def _row(self, candidate) -> np.ndarray:
        """A candidate's solution (a space's: its encoding, inactive parameters NaN)."""
        if getattr(self, "space", None) is None:  # no attribute: pickled before spaces
            return np.asarray(candidate.value, dtype=np.float64)
        return self.space.solution(candidate.value)

    def _tell(self, candidate, value: float) -> None:
        with self.draws, _quiet():
            self.optimizer.tell(candidate, value)

    def ask(self) -> np.ndarray:
        """``batch_size`` candidates, asked one after the other."""
        self.asked = []
        return self._ask(self.batch_size)

    def tell(self, objective, measures=None, *, failed=None, **extra) -> None:
        """Every candidate of the batch told in batch order with its negated objective;
        a failed one (``failed``) with ``+inf`` (Nevergrad's worst loss)."""
        failed = np.zeros(len(self.asked), bool) if failed is None else np.asarray(failed)
        for candidate, value, lost in zip(self.asked, objective, failed, strict=True):
            self._tell(candidate, np.inf if lost else -float(value))
        self.asked = []

    def ask_async(self, *, slots, evaluations) -> np.ndarray:
        """Asynchronous mode: one candidate per freed slot (Nevergrad keeps up to
        ``num_workers`` in flight)."""
        return self._ask(len(slots))

    def tell_async(self, objective, measures, *, solutions, failed=None, **extra) -> None:
        """The finished candidates, found by their solutions among those in flight,
        each told as Nevergrad's ``tell`` of one result."""
        failed = np.zeros(len(solutions), bool) if failed is None else np.asarray(failed)
        for row, value, lost in zip(np.asarray(solutions), objective, failed, strict=True):
            index = next(
                i
                for i, c in enumerate(self.asked)
                if np.array_equal(self._row(c), row, equal_nan=True)  # NaN: inactive
            )
            candidate = self.asked.pop(index)
            self._tell(candidate, np.inf if lost or not np.isfinite(value) else -float(value))

    def stats(self) -> dict[str, float]:
        """Candidates told so far."""
        return {"told": float(self.optimizer.num_tell)}

    def result(self) -> dict[str, np.ndarray]:
        """The best solution Nevergrad has seen (its ``current_bests['minimum']``, no
        random draw) and the evaluations told."""
        best = self.optimizer.current_bests["minimum"]
        if getattr(self, "space", None) is not None:
            recommendation = self.space.solution(best.parameter.value)
        else:
            # (the parameter's value: ``best.x`` is Nevergrad's standardized data, which
            # differs from the solution wherever the parametrization has bounds)
            recommendation = np.array(best.parameter.value, dtype=np.float64)
        return {
            "recommendation": recommendation,
            "told": np.array(self.optimizer.num_tell, dtype=np.int64),
        }


class _quiet(warnings.catch_warnings):
    """Nevergrad's and pycma's warnings (budget, injected solutions) off the job logs."""

    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("ignore")
        return self
