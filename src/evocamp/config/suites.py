"""Suite grids: a ``bbob`` domain naming ``functions``, ``dimensions`` and
``instances`` stands for one domain per (function, dimension, instance), named
``<key>_f<function>_d<dimension>_i<instance>``; :func:`expand_suites` replaces it by
them in a validated campaign, so that each expanded domain, its runs and its run specs
are ordinary ones (``evocamp check-config`` lists them).
"""

from __future__ import annotations

import copy

from evocamp.tasks.bbob import FUNCTIONS

#: The keys of a suite grid (``type: bbob`` only).
SUITE_KEYS = ("functions", "dimensions", "instances")


def suite_values(axis: list) -> list[int]:
    """An axis of a grid as integers in the order given: ``[1, "3-5"]`` is ``[1, 3, 4,
    5]`` (repeats kept once)."""
    found: list[int] = []
    for item in axis:
        if isinstance(item, str):
            low, high = (int(part) for part in item.split("-"))
            found += range(low, high + 1)
        else:
            found.append(int(item))
    return list(dict.fromkeys(found))


def suite_domain_name(key: str, *, function: int, dimension: int, instance: int) -> str:
    """The name of one domain of a grid, e.g. ``bbob_f1_d2_i1``."""
    return f"{key}_f{function}_d{dimension}_i{instance}"


def _axes(key: str, domain: dict) -> tuple[dict, list[str]]:
    """The grid's functions, dimensions and instances, and the problems of its keys."""
    where = f"domains.{key}"
    problems = []
    params = domain.get("params") or {}
    for single, axis in (("params.function", "functions"), ("params.instance", "instances")):
        if single.split(".")[1] in params:
            problems.append(f"key '{where}.{single}': not with {axis} (a grid names its {axis})")
    if "solution_dim" in domain and "dimensions" in domain:
        problems.append(f"key '{where}.solution_dim': not with dimensions (give one)")
    axes = {
        "functions": suite_values(domain.get("functions", list(FUNCTIONS))),
        "dimensions": suite_values(domain.get("dimensions", [domain.get("solution_dim", 20)])),
        "instances": suite_values(domain.get("instances", [1])),
    }
    for name, values in axes.items():
        if not values:
            problems.append(f"key '{where}.{name}': an empty range")
    problems += [
        f"key '{where}.functions': a BBOB function is 1 to 24, not {f}"
        for f in axes["functions"]
        if f not in FUNCTIONS
    ]
    problems += [
        f"key '{where}.dimensions': a dimension is at least 2, not {d}"
        for d in axes["dimensions"]
        if d < 2
    ]
    return axes, problems


def expand_suites(config: dict) -> list[str]:
    """Replace every suite grid of ``config["domains"]`` (in place, in order) by its
    domains, and a grid's key in ``experiments`` by an experiment per domain.

    Returns
    -------
    list of str
        Problems (one line each, naming the key); the config is left as it was if any.
    """
    problems = []
    domains: dict[str, dict] = {}
    expanded: dict[str, list[str]] = {}
    for key, domain in config["domains"].items():
        if not any(name in domain for name in SUITE_KEYS):
            domains[key] = domain
            continue
        if domain["type"] != "bbob":
            problems += [
                f"key 'domains.{key}.{name}': only allowed for type bbob, not {domain['type']}"
                for name in SUITE_KEYS
                if name in domain
            ]
            continue
        axes, found = _axes(key, domain)
        problems += found
        if found:
            continue
        common = {k: v for k, v in domain.items() if k not in SUITE_KEYS}
        expanded[key] = []
        for function in axes["functions"]:
            for dimension in axes["dimensions"]:
                for instance in axes["instances"]:
                    name = suite_domain_name(
                        key, function=function, dimension=dimension, instance=instance
                    )
                    if name in config["domains"] or name in domains:
                        problems.append(
                            f"key 'domains.{key}': expands to {name}, a domain given already"
                        )
                    one = copy.deepcopy(common)
                    one["solution_dim"] = dimension
                    one["params"] = {**one.get("params", {}), "function": function}
                    one["params"]["instance"] = instance
                    domains[name] = one
                    expanded[key].append(name)
    if problems or not expanded:
        return problems
    config["domains"] = domains
    if config.get("experiments"):
        config["experiments"] = [
            {"algorithm": pair["algorithm"], "domain": name}
            for pair in config["experiments"]
            for name in expanded.get(pair["domain"], [pair["domain"]])
        ]
    return []
