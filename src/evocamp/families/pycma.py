"""IPOP- and BIPOP-CMA-ES with restarts, from the ``cma`` package (pycma).

pycma's restarts live in its own loop (``cma.fmin2(..., restarts=, bipop=)``), not in
its ask/tell class: :class:`RestartCMAES` drives pycma's ``CMAEvolutionStrategy``
through its ``ask`` and ``tell`` (one generation is one batch of the current restart's
population) and, when pycma's stopping tests fire, starts the next restart as
``cma.fmin2`` does, option by option: IPOP doubles the population (``incpopsize``),
BIPOP interleaves runs with doubling populations and local runs with small ones and
a smaller step size (Hansen 2009), both within one budget rule. With the same seed
and options, the evaluations are bitwise those of ``cma.fmin2`` in one process
(``tests/unit/test_pycma.py``). evocamp runs a fixed number of generations, so
restarts continue until they run out (``fmin2``'s ``restarts`` has no counterpart).

Randomness: pycma draws from numpy's global random state (``np.random.seed(seed)``
and ``np.random.randn``), which one process shares with everything else and which no
checkpoint holds. Here every draw comes from the optimizer's own
``numpy.random.RandomState`` (pycma's ``randn`` option, and BIPOP's draws between
restarts), seeded where pycma would seed the global one (the run's optimizer seed,
plus one per restart as ``fmin2`` does): the same numbers as pycma's own loop, and the
generator is pickled with the optimizer, so a run resumed from a checkpoint continues
bit for bit.

``cma`` is imported inside :class:`RestartCMAES` (an optional extra:
``pip install 'evocamp[cma]'``).
"""

from __future__ import annotations

import numpy as np

from evocamp.model.protocol import failed_as_worst

#: pycma's options evocamp sets: silent, no files (pycma writes ``outcmaes/`` by
#: default), no evaluation of the final mean after a restart (``fmin2`` would spend
#: one evaluation outside any batch). The seeding is the optimizer's own
#: (:meth:`RestartCMAES._start`).
QUIET = {"verbose": -9, "verb_disp": 0, "verb_log": 0, "eval_final_mean": False}


def pycma_seed(seed: int) -> int:
    """The seed pycma gets for a run's optimizer seed: in ``1..2**31`` (pycma takes 0 for
    "seed from the clock", and restarts add one per restart)."""
    return 1 + int(seed) % 2**31


class RestartCMAES:
    """IPOP- or BIPOP-CMA-ES (Auger & Hansen 2005; Hansen 2009, :attr:`BIPOP`) through
    pycma's ask/tell, on the objective alone (maximised: pycma is told its negative).

    Parameters
    ----------
    solution_dim : int
        Parameters of a solution.
    x0 : numpy.ndarray
        The mean the first run starts from (and every restart, without ``restart_x0``).
    bounds : tuple or None
        ``(low, high)`` of every parameter: pycma's ``bounds`` option (its boundary
        transformation: asked solutions lie within).
    seed : int
        The run's optimizer seed (pycma gets :func:`pycma_seed` of it).
    popsize : int
        The first run's population (pycma's ``popsize``); restarts change it.
    sigma : float
        The initial step size sigma0 (BIPOP's local runs start from a smaller one).
    incpopsize : int
        Factor of the population from one large restart to the next (``fmin2``'s).
    restart_x0 : callable or None
        ``k -> x0`` of restart ``k`` (a domain's ``x0: random``:
        :class:`~evocamp.base.seeding.RandomStart`): every restart starts from a point
        of its own, as ``fmin2`` does with a callable ``x0`` and as BBOB-2009's
        BIPOP-CMA-ES did; ``None``: every restart from ``x0``.
    """

    #: The BIPOP regime (``fmin2``'s ``bipop=True``) instead of IPOP.
    BIPOP = False

    def __init__(
        self,
        *,
        solution_dim: int,
        x0,
        bounds,
        seed: int,
        popsize: int,
        sigma: float,
        incpopsize: int = 2,
        restart_x0=None,
    ):
        import cma

        self.x0 = np.array(x0, dtype=np.float64).reshape(int(solution_dim))
        self.restart_x0 = restart_x0
        self.sigma0 = float(sigma)
        self.incpopsize = int(incpopsize)
        self.seed = pycma_seed(seed)
        self.random = np.random.RandomState(self.seed)
        options = {**QUIET, "popsize": int(popsize), "seed": self.seed}
        if bounds is not None:
            options["bounds"] = [float(bounds[0]), float(bounds[1])]
        self.options = cma.CMAOptions(options)
        # fmin2's restart bookkeeping (the names are fmin2's).
        self.irun = 0
        self.runs_with_small = 0
        self.small_i: list[int] = []
        self.large_i: list[int] = []
        self.poptype = "small"
        self.popsize0 = None
        self.maxiter0 = None
        self.base_evals = 0
        self.asked: list[np.ndarray] | None = None
        self.es = self._start(sigma_factor=1.0)

    def __setstate__(self, state: dict) -> None:
        """An optimizer unpickled, in this process or another: pycma's archives of asked
        solutions keyed again (:func:`rekey_solution_archives`)."""
        self.__dict__.update(state)
        rekey_solution_archives(self.es)

    def _start(self, *, sigma_factor: float):
        """A new pycma strategy from ``x0`` with the current options, seeded as pycma
        seeds the global generator (``np.random.seed(options['seed'])``)."""
        import cma

        self.random.seed(int(self.options["seed"]))
        options = dict(self.options)
        options["seed"] = np.nan  # seeding is ours: pycma leaves numpy's global state alone
        options["randn"] = self.random.randn
        return cma.CMAEvolutionStrategy(self.x0, sigma_factor * self.sigma0, options)

    def _restart(self) -> None:
        """The restart ``cma.fmin2`` makes after a run stopped (its loop's end and top)."""
        es = self.es
        this_evals = es.countevals - self.base_evals
        self.base_evals = es.countevals
        opts = es.opts
        opts["seed"] = int(self.options["seed"])  # ours, not the NaN pycma was given
        if self.irun == 0:
            self.popsize0 = opts["popsize"]
            self.maxiter0 = opts["maxiter"]
        if self.BIPOP:
            (self.small_i if self.poptype == "small" else self.large_i).append(this_evals)
        self.irun += 1
        opts["verb_append"] = es.countevals
        opts["popsize"] = self.incpopsize * es.sp.popsize
        opts["seed"] += 1
        sigma_factor = 1.0
        if not self.BIPOP:
            opts["popsize"] = self.popsize0 * self.incpopsize ** (self.irun - self.runs_with_small)
        elif sum(self.small_i) < max(1, sum(self.large_i)):
            self.poptype = "small"
            self.runs_with_small += 1
            sigma_factor = 0.01 ** self.random.uniform()
            multiplier = self.incpopsize ** (self.irun - self.runs_with_small)
            opts["popsize"] = int(self.popsize0 * multiplier ** (self.random.uniform() ** 2))
            opts["maxiter"] = min(self.maxiter0, 0.5 * sum(self.large_i) / opts["popsize"])
        else:
            self.poptype = "large"
            multiplier = self.incpopsize ** (self.irun - self.runs_with_small)
            opts["popsize"] = self.popsize0 * multiplier
            opts["maxiter"] = self.maxiter0
        self.options = opts
        if self.restart_x0 is not None:
            self.x0 = np.array(self.restart_x0(self.irun), dtype=np.float64)
        self.es = self._start(sigma_factor=sigma_factor)

    def ask(self) -> np.ndarray:
        """The current restart's population (its size changes from restart to restart)."""
        self.asked = self.es.ask()
        return np.array(self.asked, dtype=np.float64)

    def tell(self, objective, measures=None, *, failed=None, **extra) -> None:
        """pycma's ``tell`` of the asked population with the negated objectives (failed
        offspring, ``failed``, at ``+inf``: ranked last); a restart when pycma's
        stopping tests fire."""
        values = -failed_as_worst(objective, failed)
        self.es.tell(self.asked, [float(value) for value in values])
        self.asked = None
        if self.es.stop():
            self._restart()

    def stats(self) -> dict[str, float]:
        """The current restart's step size sigma."""
        return {"sigma": float(self.es.sigma)}

    def result(self) -> dict[str, np.ndarray]:
        """Arrays stored as the run's result (``/result`` of archive.h5): the current
        restart's mean and the number of restarts made."""
        return {
            "centre": np.array(self.es.mean, dtype=np.float64),
            "restarts": np.array(self.irun, dtype=np.int64),
        }


def rekey_solution_archives(es) -> None:
    """Key pycma's archives of solutions again after unpickling.

    pycma finds the genotype of a told solution (before its boundary transformation)
    in ``es.sent_solutions``, a ``SolutionDict`` keyed by ``hash(x.tobytes())``, which
    Python salts per process (``PYTHONHASHSEED``): unpickled in another process (the
    next tell step, a resumed run), the keys would match nothing, and pycma would
    compute the genotype back from the solution instead, with other last bits under
    ``bounds``. Every ``SolutionDict`` of the strategy and of its attributes is keyed
    again from the solutions it keeps (``_unhashed_keys``), in the same order.
    """
    from cma.utilities.utils import SolutionDict

    seen = set()

    def visit(value, depth: int) -> None:
        if id(value) in seen or depth > 2:
            return
        seen.add(id(value))
        if isinstance(value, SolutionDict):
            keys = {old: value.key(x) for old, x in value._unhashed_keys.items()}
            value.data = {keys[old]: v for old, v in value.data.items() if old in keys}
            value.data_with_same_key = {
                keys[old]: v for old, v in value.data_with_same_key.items() if old in keys
            }
            value._unhashed_keys = {keys[old]: x for old, x in value._unhashed_keys.items()}
        elif type(value).__module__.startswith("cma.") and hasattr(value, "__dict__"):
            for attribute in vars(value).values():
                visit(attribute, depth + 1)

    visit(es, 0)


class IPOPCMAES(RestartCMAES):
    """IPOP-CMA-ES: every restart doubles the population (``cma.fmin2(restarts=...)``)."""

    BIPOP = False


class BIPOPCMAES(RestartCMAES):
    """BIPOP-CMA-ES: restarts with doubling populations interleaved with local runs of
    small ones (``cma.fmin2(restarts=..., bipop=True)``)."""

    BIPOP = True
