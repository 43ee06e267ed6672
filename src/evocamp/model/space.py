"""Search spaces: a domain's named, typed parameters (``domains.NAME.space``).

A space is a list of parameters, each a dict (the form a run spec stores, in
declaration order, every key filled in by :func:`space_entries`)::

    {"name": "lr", "type": "real", "low": 1e-5, "high": 0.1, "log": True,
     "default": 0.001, "condition": {}}
    {"name": "optimizer", "type": "categorical", "choices": ["adam", "sgd"],
     "default": "adam", "condition": {}}
    {"name": "momentum", "type": "real", "low": 0.0, "high": 0.99, "log": False,
     "default": 0.5, "condition": {"optimizer": ["sgd"]}}

``type`` is ``real`` or ``integer`` (``low``, ``high``, ``log``) or ``categorical``
or ``ordinal`` (``choices``). A parameter is active when, for every entry of its
``condition``, the other parameter is active and takes one of the listed values.

**The solution vector** of a domain with a space has one coordinate per parameter, in
declaration order: a real or integer parameter's value (an integer's as a float), a
categorical or ordinal parameter's code (the index of its choice), an inactive
parameter NaN. The evaluation function gets each solution decoded
(:meth:`Space.configurations`): a dict of the active parameters' typed values.

**The unit cube** is where the space's own optimizers work (random search, qUCB):
:meth:`Space.from_unit` maps a point of ``[0, 1]^d`` to a solution (a real by its
position between its bounds, on a log scale for ``log``; an integer rounded; a
category by the cell ``floor(u * k)`` of its ``k`` choices; inactive parameters
NaN), :meth:`Space.to_unit` back (an integer or a category at the middle of its
cell, an inactive parameter at :data:`INACTIVE_UNIT`), so that ``to_unit(from_unit(u))``
(:meth:`Space.snap`) is the canonical point of the solution ``u`` stands for.

Only numpy is imported; a ConfigSpace JSON file (what ``ConfigSpace``'s
``to_json`` and DeepHyper's ``HpProblem.space.to_json`` write) is read by
:func:`from_configspace` without the ConfigSpace package.
"""

from __future__ import annotations

import math

import numpy as np

from evocamp.base.errors import ConfigError

#: Parameter types.
NUMERIC = ("real", "integer")
CHOICES = ("categorical", "ordinal")
#: Column names of evocamp's tables (:mod:`evocamp.results`), which a parameter's
#: name may not take (its column is named as it is); nor may it start with
#: ``measure_`` or ``solution_``.
RESERVED_NAMES = (
    "campaign", "algorithm", "domain", "seed", "generation", "index", "eval_seed",
    "objective", "eval_seconds", "status", "message", "attempts", "noise_seed", "threshold",
)  # fmt: skip
#: Where :meth:`Space.to_unit` puts an inactive parameter (outside the cube: the
#: surrogate's trees tell it from every active value).
INACTIVE_UNIT = -0.5


class SpaceError(ConfigError):
    """A space that cannot be used, or a solution that is no point of it: the message is
    one line naming the parameter (validation puts the key in front of it)."""


def _entry(name: str, spec: dict) -> dict:
    """One parameter of a YAML space with its defaults filled in."""
    if not isinstance(name, str) or not name:
        raise SpaceError(f"parameter {name!r}: a name must be a non-empty string")
    if name in RESERVED_NAMES or name.startswith(("measure_", "solution_")):
        raise SpaceError(f"parameter '{name}': the name of a column of evocamp's tables; rename it")
    if not isinstance(spec, dict):
        raise SpaceError(f"parameter '{name}': a mapping with type, not {spec!r}")
    kind = spec.get("type")
    if kind not in (*NUMERIC, *CHOICES):
        raise SpaceError(
            f"parameter '{name}': type must be real, integer, categorical or ordinal, not {kind!r}"
        )
    allowed = {"type", "default", "condition"} | (
        {"low", "high", "log"} if kind in NUMERIC else {"choices"}
    )
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise SpaceError(
            f"parameter '{name}': key '{unknown[0]}' is not used by type {kind} "
            f"(its keys: {', '.join(sorted(allowed))})"
        )
    entry = {"name": name, "type": kind}
    if kind in NUMERIC:
        for bound in ("low", "high"):
            value = spec.get(bound)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SpaceError(f"parameter '{name}': {bound} must be a number, not {value!r}")
            if kind == "integer" and value != int(value):
                raise SpaceError(f"parameter '{name}': {bound} must be an integer, not {value!r}")
            entry[bound] = int(value) if kind == "integer" else float(value)
        entry["log"] = spec.get("log", False)
        if not isinstance(entry["log"], bool):
            raise SpaceError(f"parameter '{name}': log must be true or false")
    else:
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"parameter '{name}': choices must be a non-empty list")
        entry["choices"] = list(choices)
    condition = spec.get("condition") or {}
    if not isinstance(condition, dict):
        raise SpaceError(f"parameter '{name}': condition must map parameter names to values")
    entry["condition"] = {
        other: list(values) if isinstance(values, list) else [values]
        for other, values in condition.items()
    }
    entry["default"] = spec["default"] if "default" in spec else _middle(entry)
    return entry


def _middle(entry: dict):
    """A parameter's default when none is given: the middle of its range (geometric on a
    log scale), an integer's rounded; a choice's first."""
    if entry["type"] in CHOICES:
        return entry["choices"][0]
    low, high = entry["low"], entry["high"]
    if entry["log"] and low > 0:
        middle = math.sqrt(low * high)
    else:
        middle = (low + high) / 2
    return int(round(middle)) if entry["type"] == "integer" else middle


def space_entries(space: dict | list) -> list[dict]:
    """The parameters of a space given as a YAML mapping (``name -> {type, ...}``) or
    as stored (a list of parameter dicts), every key filled in and checked.

    Raises
    ------
    SpaceError
        A bad parameter or condition, named on one line.
    """
    if isinstance(space, list):
        entries = [
            _entry(spec.get("name"), {k: v for k, v in spec.items() if k != "name"})
            for spec in space
        ]
    elif isinstance(space, dict) and space:
        entries = [_entry(name, spec) for name, spec in space.items()]
    else:
        raise SpaceError("a space is a non-empty mapping of parameter names to their types")
    problems = entry_problems(entries)
    if problems:
        raise SpaceError(problems[0])
    return entries


def entry_problems(entries: list[dict]) -> list[str]:
    """What is wrong with complete parameter dicts, one line each (empty: nothing)."""
    problems = []
    names = [entry["name"] for entry in entries]
    by_name = {entry["name"]: entry for entry in entries}
    for entry in entries:
        name, kind = entry["name"], entry["type"]
        if names.count(name) > 1:
            problems.append(f"parameter '{name}': declared {names.count(name)} times")
        if kind in NUMERIC:
            low, high = entry["low"], entry["high"]
            if not low < high:
                problems.append(f"parameter '{name}': low {low} must be below high {high}")
            elif entry["log"] and low <= 0:
                problems.append(
                    f"parameter '{name}': log scale needs a positive low bound, not {low}"
                )
            elif not _contains(entry, entry["default"]):
                problems.append(
                    f"parameter '{name}': default {entry['default']!r} is not within "
                    f"[{low}, {high}]"
                )
        else:
            choices = entry["choices"]
            if len({repr(choice) for choice in choices}) < len(choices):
                problems.append(f"parameter '{name}': choices repeat a value")
            elif not all(isinstance(c, (str, int, float, bool)) for c in choices):
                problems.append(f"parameter '{name}': choices must be strings, numbers or booleans")
            elif not _contains(entry, entry["default"]):
                problems.append(
                    f"parameter '{name}': default {entry['default']!r} is not one of its choices"
                )
        for other, values in entry["condition"].items():
            if other not in by_name:
                problems.append(
                    f"parameter '{name}': condition on unknown parameter '{other}' "
                    f"(the space's: {', '.join(names)})"
                )
            elif other == name:
                problems.append(f"parameter '{name}': condition on itself")
            elif not values:
                problems.append(f"parameter '{name}': condition on '{other}' lists no values")
            else:
                bad = [v for v in values if not _contains(by_name[other], v)]
                if bad:
                    problems.append(
                        f"parameter '{name}': condition value {bad[0]!r} is not a value of "
                        f"'{other}'"
                    )
    if not problems:
        cycle = _cycle(entries)
        if cycle:
            problems.append(f"parameter '{cycle}': its conditions form a cycle")
    return problems


def _contains(entry: dict, value) -> bool:
    if entry["type"] in CHOICES:
        return any(_same(value, choice) for choice in entry["choices"])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if entry["type"] == "integer" and value != int(value):
        return False
    return entry["low"] <= value <= entry["high"]


def _same(a, b) -> bool:
    """Equal values of the same kind (``True`` is not ``1``, ``1`` is ``1.0``)."""
    return (
        (isinstance(a, bool) == isinstance(b, bool))
        and (isinstance(a, str) == isinstance(b, str))
        and a == b
    )


def _cycle(entries: list[dict]) -> str | None:
    """The first parameter on a cycle of conditions, else ``None``."""
    parents = {entry["name"]: list(entry["condition"]) for entry in entries}
    state: dict[str, int] = {}

    def visit(name: str) -> str | None:
        if state.get(name) == 1:
            return name
        if state.get(name) == 2:
            return None
        state[name] = 1
        for parent in parents[name]:
            found = visit(parent)
            if found:
                return found
        state[name] = 2
        return None

    for entry in entries:
        found = visit(entry["name"])
        if found:
            return found
    return None


def from_configspace(document: dict) -> dict:
    """A space mapping (as YAML writes one) from a ConfigSpace JSON document.

    Reads the hyperparameter types ``uniform_float``, ``uniform_int``,
    ``categorical``, ``ordinal`` and ``constant`` (a categorical of one choice), and
    conditions ``EQ``, ``IN`` and ``AND`` of them.

    Raises
    ------
    SpaceError
        Another type or condition (``OR``, ``NEQ``, ``LT``, ``GT``, normal
        distributions, forbidden clauses), named on one line.
    """
    if not isinstance(document, dict) or "hyperparameters" not in document:
        raise SpaceError("not a ConfigSpace JSON document (no 'hyperparameters')")
    space: dict = {}
    for hp in document["hyperparameters"]:
        name, kind = hp.get("name"), hp.get("type")
        if kind in ("uniform_float", "uniform_int"):
            spec = {
                "type": "real" if kind == "uniform_float" else "integer",
                "low": hp["lower"],
                "high": hp["upper"],
                "log": bool(hp.get("log", False)),
            }
            if hp.get("q") is not None:
                raise SpaceError(f"parameter '{name}': quantised ({kind} with q) is not supported")
        elif kind in ("categorical", "ordinal"):
            spec = {
                "type": kind,
                "choices": list(hp["choices" if kind == "categorical" else "sequence"]),
            }
            if kind == "categorical" and hp.get("weights") is not None:
                raise SpaceError(f"parameter '{name}': weighted categories are not supported")
        elif kind == "constant":
            spec = {"type": "categorical", "choices": [hp["value"]]}
        else:
            raise SpaceError(
                f"parameter '{name}': ConfigSpace type {kind!r} is not supported (supported: "
                "uniform_float, uniform_int, categorical, ordinal, constant)"
            )
        if "default_value" in hp or "default" in hp:
            spec["default"] = hp.get("default_value", hp.get("default"))
        space[name] = spec
    for condition in document.get("conditions") or []:
        for child, parent, values in _condition_terms(condition):
            if child not in space:
                raise SpaceError(f"condition on unknown parameter '{child}'")
            space[child].setdefault("condition", {})[parent] = values
    if document.get("forbiddens"):
        raise SpaceError("forbidden clauses are not supported")
    return space


def _condition_terms(condition: dict) -> list[tuple[str, str, list]]:
    kind = condition.get("type")
    if kind == "EQ":
        return [(condition["child"], condition["parent"], [condition["value"]])]
    if kind == "IN":
        return [(condition["child"], condition["parent"], list(condition["values"]))]
    if kind == "AND":
        return [term for part in condition["conjunctions"] for term in _condition_terms(part)]
    raise SpaceError(
        f"parameter '{condition.get('child', '?')}': ConfigSpace condition {kind!r} is not "
        "supported (supported: EQ, IN, AND)"
    )


class Space:
    """A search space's parameters (complete dicts, :func:`space_entries`) and the maps
    between solutions, configurations and the unit cube.

    Parameters
    ----------
    entries : list of dict
        The parameters, as a run spec stores them.
    """

    def __init__(self, entries: list[dict]) -> None:
        self.entries = [dict(entry) for entry in entries]
        self.names = [entry["name"] for entry in self.entries]
        self.index = {name: j for j, name in enumerate(self.names)}

    @property
    def dim(self) -> int:
        """Coordinates of a solution (one per parameter)."""
        return len(self.entries)

    @property
    def mixed(self) -> bool:
        """Whether any parameter is not a real one on a linear scale, or has a condition."""
        return any(
            entry["type"] != "real" or entry["log"] or entry["condition"] for entry in self.entries
        )

    def _active(self, values: np.ndarray) -> np.ndarray:
        """Which parameters of the solutions ``values`` (codes, NaN ignored) are active."""
        count = len(values)
        active = np.ones((count, self.dim), dtype=bool)
        done: dict[int, np.ndarray] = {}

        def resolve(j: int) -> np.ndarray:
            if j in done:
                return done[j]
            flags = np.ones(count, dtype=bool)
            for other, allowed in self.entries[j]["condition"].items():
                k = self.index[other]
                codes = [self._code(k, value) for value in allowed]
                flags &= resolve(k) & np.isin(values[:, k], codes)
            done[j] = flags
            return flags

        for j in range(self.dim):
            active[:, j] = resolve(j)
        return active

    def _code(self, j: int, value) -> float:
        """How the solution vector holds ``value`` of parameter ``j``."""
        entry = self.entries[j]
        if entry["type"] in CHOICES:
            return float(next(k for k, c in enumerate(entry["choices"]) if _same(value, c)))
        return float(value)

    def from_unit(self, unit: np.ndarray) -> np.ndarray:
        """Solutions of the points ``unit`` (``(n, dim)`` in ``[0, 1]``, clipped)."""
        u = np.clip(np.asarray(unit, dtype=np.float64).reshape(-1, self.dim), 0.0, 1.0)
        values = np.empty_like(u)
        for j, entry in enumerate(self.entries):
            column = u[:, j]
            if entry["type"] in CHOICES:
                k = len(entry["choices"])
                values[:, j] = np.minimum(np.floor(column * k), k - 1)
                continue
            low, high = entry["low"], entry["high"]
            if entry["type"] == "integer" and not entry["log"]:
                cells = high - low + 1
                values[:, j] = low + np.minimum(np.floor(column * cells), cells - 1)
                continue
            if entry["log"]:
                scaled = np.exp(math.log(low) + column * (math.log(high) - math.log(low)))
            else:
                scaled = low + column * (high - low)
            scaled = np.clip(scaled, low, high)
            values[:, j] = np.round(scaled) if entry["type"] == "integer" else scaled
        values[~self._active(values)] = np.nan
        return values

    def to_unit(self, solutions: np.ndarray) -> np.ndarray:
        """The unit-cube points of ``solutions`` (inactive parameters at
        :data:`INACTIVE_UNIT`)."""
        x = np.asarray(solutions, dtype=np.float64).reshape(-1, self.dim)
        unit = np.empty_like(x)
        for j, entry in enumerate(self.entries):
            column = x[:, j]
            if entry["type"] in CHOICES:
                unit[:, j] = (column + 0.5) / len(entry["choices"])
                continue
            low, high = entry["low"], entry["high"]
            if entry["type"] == "integer" and not entry["log"]:
                unit[:, j] = (column - low + 0.5) / (high - low + 1)
            elif entry["log"]:
                unit[:, j] = (np.log(column) - math.log(low)) / (math.log(high) - math.log(low))
            else:
                unit[:, j] = (column - low) / (high - low)
        unit[np.isnan(x)] = INACTIVE_UNIT
        return unit

    def snap(self, unit: np.ndarray) -> np.ndarray:
        """The canonical unit-cube points of the solutions ``unit`` stands for."""
        return self.to_unit(self.from_unit(unit))

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` solutions drawn uniformly in the unit cube."""
        return self.from_unit(rng.random((count, self.dim)))

    def configurations(self, solutions: np.ndarray) -> list[dict]:
        """Each solution as a dict of its active parameters' typed values (``int`` for
        an integer, ``float`` for a real, the choice itself for a category).

        Raises
        ------
        SpaceError
            A coordinate that is no value of its parameter (a category's code out of
            range or not whole, an integer not whole), naming the solution's row.
        """
        x = np.asarray(solutions, dtype=np.float64).reshape(-1, self.dim)
        active = self._active(x)
        configurations = []
        for row, solution in enumerate(x):
            configuration = {}
            for j, entry in enumerate(self.entries):
                value = float(solution[j])
                if not active[row, j]:
                    continue
                if math.isnan(value):
                    raise SpaceError(f"solution {row}: '{entry['name']}' is active but NaN")
                if entry["type"] in CHOICES:
                    code = int(value)
                    if code != value or not 0 <= code < len(entry["choices"]):
                        raise SpaceError(
                            f"solution {row}: '{entry['name']}' has code {value!r}, not one "
                            f"of 0..{len(entry['choices']) - 1}"
                        )
                    configuration[entry["name"]] = entry["choices"][code]
                elif entry["type"] == "integer":
                    if value != int(value):
                        raise SpaceError(
                            f"solution {row}: '{entry['name']}' is {value!r}, not an integer"
                        )
                    configuration[entry["name"]] = int(value)
                else:
                    configuration[entry["name"]] = float(value)
            configurations.append(configuration)
        return configurations

    @property
    def order(self) -> list[int]:
        """The parameters' indices with every parameter after those its condition names
        (declaration order otherwise): the order a define-by-run library asks them in."""
        placed: list[int] = []
        while len(placed) < self.dim:
            for j, entry in enumerate(self.entries):
                parents = [self.index[other] for other in entry["condition"]]
                if j not in placed and all(k in placed for k in parents):
                    placed.append(j)
                    break
        return placed

    def active_in(self, j: int, configuration: dict) -> bool:
        """Whether parameter ``j`` is active given the parameters already in
        ``configuration`` (its condition's parameters must be in it to count)."""
        return all(
            other in configuration and any(_same(configuration[other], v) for v in values)
            for other, values in self.entries[j]["condition"].items()
        )

    def solution(self, configuration: dict) -> np.ndarray:
        """The solution of a configuration (a dict of typed values; parameters missing
        from it or inactive NaN)."""
        values = np.array(
            [
                [
                    self._code(j, configuration[name]) if name in configuration else np.nan
                    for j, name in enumerate(self.names)
                ]
            ]
        )
        values[~self._active(values)] = np.nan
        return values[0]

    def defaults(self) -> np.ndarray:
        """The solution of every parameter's default (inactive ones NaN)."""
        values = np.array([[self._code(j, e["default"]) for j, e in enumerate(self.entries)]])
        values[~self._active(values)] = np.nan
        return values[0]


class SpaceEvaluation:
    """An evaluation function over a space: called as the shard step calls any
    evaluation function, ``(solutions, seeds, **params)``, it calls ``function`` with
    the solutions decoded (:meth:`Space.configurations`). Its result may leave out
    ``measures`` (no measures: an empty array per solution is added).

    Parameters
    ----------
    function : callable
        The domain's ``evaluate(configurations, seeds, **params)``.
    entries : list of dict
        The space's parameters.
    """

    def __init__(self, function, entries: list[dict]) -> None:
        self.function = function
        self.space = Space(entries)

    def __call__(self, solutions, seeds, **params):
        configurations = self.space.configurations(solutions)
        result = self.function(configurations, seeds, **params)
        if isinstance(result, dict) and "measures" not in result:
            result = {**result, "measures": np.zeros((len(configurations), 0))}
        return result
