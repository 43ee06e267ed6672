"""The 24 noiseless functions of the BBOB suite (COCO's black-box optimisation
benchmark) through IOHprofiler's ``ioh`` package (pinned in the ``bbob`` extra), the
task code of the ``bbob`` domain (:data:`evocamp.catalogue.domains.DOMAINS`).

Each (function, instance, dimension) is one ``ioh`` problem object, made once per
process and cached; a batch is evaluated by one vectorised call. ``ioh`` computes a
BBOB function from its instance number alone (the instance fixes the rotation, shift
and optimum), so every call gives the same values; the problem's own evaluation
counter and best-so-far are never read.
"""

from __future__ import annotations

import functools

import numpy as np

#: BBOB's function numbers.
FUNCTIONS = tuple(range(1, 25))
#: The search box of every BBOB function, ``[-5, 5]^d``.
BOUND = 5.0
#: Where ``x0: random`` draws a BBOB run's initial points, uniformly: ``[-4, 4]^d``, the
#: box of the optima's shifts, as BBOB-2009's BIPOP-CMA-ES drew every restart's x0
#: (cmaes.m 3.31.bbob's call ``bipopcmaes('fgeneric', '8 * rand(10,1) - 4', 2, opts)``,
#: the string evaluated again at every restart).
START = 4.0
#: COCO's function groups (their names as COCO's figures give them), by function.
GROUPS = {
    "separable": (1, 2, 3, 4, 5),
    "moderate": (6, 7, 8, 9),
    "ill-conditioned": (10, 11, 12, 13, 14),
    "multimodal": (15, 16, 17, 18, 19),
    "weakly structured": (20, 21, 22, 23, 24),
}


@functools.cache
def problem(function: int, instance: int, dimension: int):
    """The ``ioh`` problem of BBOB function ``function``, ``instance``, ``dimension``
    (made once per process)."""
    import ioh

    return ioh.get_problem(
        int(function),
        instance=int(instance),
        dimension=int(dimension),
        problem_class=ioh.ProblemClass.BBOB,
    )


@functools.cache
def optimum(function: int, instance: int, dimension: int) -> float:
    """``f_opt``: the function's minimum on this instance (read once per process: every
    evaluated batch subtracts it)."""
    return float(problem(function, instance, dimension).optimum.y)


def optimum_solution(function: int, instance: int, dimension: int) -> np.ndarray:
    """``x_opt``: where the function takes its minimum on this instance."""
    return np.asarray(problem(function, instance, dimension).optimum.x, dtype=np.float64)


def function_name(function: int) -> str:
    """The function's name as ``ioh`` gives it (e.g. ``Sphere``)."""
    return problem(function, 1, 2).meta_data.name


def values(solutions: np.ndarray, *, function: int, instance: int) -> np.ndarray:
    """``f`` of every row of ``solutions`` (``(n, d)``), one vectorised call."""
    solutions = np.ascontiguousarray(solutions, dtype=np.float64)
    found = problem(function, instance, solutions.shape[1])(solutions)
    return np.asarray(found, dtype=np.float64).reshape(len(solutions))


def bbob(
    solutions: np.ndarray, seeds: np.ndarray, *, function: int = 1, instance: int = 1
) -> dict[str, np.ndarray]:
    """BBOB function ``function`` (1-24), ``instance``, in the solutions' dimension,
    maximised as its negative: objective ``-f``, extra field ``precision`` = ``f -
    f_opt`` (0 at the optimum). No measures; noiseless (the seeds are unused)."""
    value = values(solutions, function=function, instance=instance)
    return {
        "objective": -value,
        "measures": np.empty((len(solutions), 0)),
        "precision": value - optimum(function, instance, solutions.shape[1]),
    }


def param_problems(params: dict) -> list[tuple[str, str]]:
    """The ``bbob`` domain's params the schema cannot check."""
    problems = []
    function = params.get("function", 1)
    if not isinstance(function, int) or isinstance(function, bool) or function not in FUNCTIONS:
        problems.append(("function", f"a BBOB function is 1 to 24, not {function!r}"))
    instance = params.get("instance", 1)
    if not isinstance(instance, int) or isinstance(instance, bool) or instance < 1:
        problems.append(("instance", f"an instance is an integer from 1, not {instance!r}"))
    return problems
