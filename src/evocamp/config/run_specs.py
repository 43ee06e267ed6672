"""Building run specs from a validated campaign: its seeds and experiments, the
domain and algorithm entries with the catalogue's defaults filled in
(:func:`resolved_domain`, :func:`resolved_algorithm`), and the run spec of one run
(:func:`run_spec`, :mod:`evocamp.model.runspec`) with its ``evaluation`` and
``asynchronous`` parts, as canonical JSON (:func:`run_spec_json`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from evocamp.catalogue.algorithms import (
    ALGORITHMS,
    DEFAULT_GRID_CELLS_PER_MEASURE,
)
from evocamp.catalogue.domains import DEFAULT_SOLUTION_DIM, DOMAINS
from evocamp.catalogue.entries import AlgorithmType, Derived
from evocamp.model.runspec import FailurePolicy
from evocamp.model.space import SpaceError, from_configspace, space_entries
from evocamp.tasks.program_keys import LOCAL_KEYS


def seeds_of(config: dict) -> list[int]:
    """The campaign's seeds: ``0..n-1`` for an integer, else the list given."""
    seeds = config["seeds"]
    return list(range(seeds)) if isinstance(seeds, int) else list(seeds)


def experiments_of(config: dict) -> list[tuple[str, str]]:
    """The (algorithm, domain) pairs of the campaign, in configuration order."""
    if config.get("experiments"):
        return [(e["algorithm"], e["domain"]) for e in config["experiments"]]
    return [(a, d) for a in config["algorithms"] for d in config["domains"]]


def resolved_domain(domain: dict) -> dict:
    """A domain entry with the built-in's defaults filled in (solution_dim, measure
    ranges, bounds, parameters, extra fields; a program's solution_dim: its number of
    ``variables`` when it names them)."""
    spec = copy.deepcopy(domain)
    entry = DOMAINS.get(spec["type"])
    params = spec.setdefault("params", {})
    space = spec.get("space", entry.space if entry is not None else None)
    if space is not None:
        spec["space"] = read_space(space)
        spec["solution_dim"] = len(spec["space"])
    elif entry is not None and entry.fixed_dim is not None:
        spec["solution_dim"] = entry.fixed_dim(params)
    else:
        named = len(spec["variables"]) if spec.get("variables") else DEFAULT_SOLUTION_DIM
        spec["solution_dim"] = spec.get("solution_dim", named)
    if entry is None:
        return spec
    spec.setdefault("measure_ranges", entry.measure_ranges(spec["solution_dim"], params))
    if entry.bounds is not None:
        spec.setdefault("bounds", list(entry.bounds))
    for name, value in entry.params.items():
        params.setdefault(name, value)
    if entry.extra_fields and not spec.get("extra_fields"):
        spec["extra_fields"] = list(entry.extra_fields)
    return spec


def read_space(space: str | dict | list) -> list[dict]:
    """A domain's ``space`` as a run spec stores it (:func:`evocamp.model.space.space_entries`):
    from a mapping, or from a ConfigSpace JSON file (a path relative to the working
    directory, read once here: the run spec holds the space itself).

    Raises
    ------
    SpaceError
        The file cannot be read or the space is bad, on one line.
    """
    if isinstance(space, str):
        try:
            document = json.loads(Path(space).read_text())
        except OSError as error:
            raise SpaceError(f"cannot read {space}: {error.strerror}") from None
        except ValueError as error:
            raise SpaceError(f"{space} is not JSON: {error}") from None
        try:
            space = from_configspace(document)
        except SpaceError as error:
            raise SpaceError(f"{space}: {error}") from None
    return space_entries(space)


def has_space(domain: dict) -> bool:
    """Whether a domain entry has a search space (its ``space`` key, or its built-in
    type's default space)."""
    entry = DOMAINS.get(domain["type"])
    return "space" in domain or (entry is not None and entry.space is not None)


def space_problems(key: str, domain: dict) -> list[str]:
    """Problems of a domain entry's ``space`` (its key ``key``), one line each."""
    if "space" not in domain:
        return []
    problems = [
        f"key '{key}.{name}': a domain with a space has one parameter per entry of it; "
        f"leave {name} out"
        for name in ("solution_dim", "bounds")
        if name in domain
    ]
    try:
        read_space(domain["space"])
    except SpaceError as error:
        problems.append(f"key '{key}.space': {error}")
    return problems


def readable_space(domain: dict) -> list[dict] | None:
    """A domain entry's ``space`` as read (:func:`read_space`); ``None`` when it has none
    or one that cannot be read (:func:`space_problems` says why)."""
    try:
        return read_space(domain["space"]) if "space" in domain else None
    except SpaceError:
        return None


def space_refusal(entry: AlgorithmType, domain_name: str) -> str:
    """Why algorithm type ``entry`` cannot run on a domain with a space (its ``type`` key's
    problem)."""
    takers = ", ".join(name for name, other in ALGORITHMS.items() if other.takes_space)
    return (
        f"{entry.name} needs a continuous box, but domain '{domain_name}' has a search space "
        f"(space); types that take one: {takers}"
    )


def _default_value(value, domain_spec: dict):
    return value.compute(domain_spec) if isinstance(value, Derived) else copy.deepcopy(value)


def resolved_algorithm(algorithm: dict, domain_spec: dict) -> dict:
    """An algorithm entry with its type's defaults filled in for a resolved domain, its
    keys named as the run spec stores them (``AlgorithmType.spec_names``)."""
    spec = copy.deepcopy(algorithm)
    entry: AlgorithmType = ALGORITHMS[spec["type"]]
    for name, value in entry.defaults.items():
        if name not in spec:
            spec[name] = _default_value(value, domain_spec)
    archive = spec.setdefault("archive", {})
    if entry.grid_archive:
        archive.setdefault(
            "dims", [DEFAULT_GRID_CELLS_PER_MEASURE] * len(domain_spec["measure_ranges"])
        )
    for name, value in entry.archive_defaults.items():
        if name not in archive:
            archive[name] = _default_value(value, domain_spec)
    if entry.recipe is not None:
        archive.pop("passive", None)  # the run's archive is the optimizer's own
    return entry.as_stored(spec)


def run_spec(config: dict, *, algorithm: str, domain: str, seed: int) -> dict:
    """The resolved, self-contained description of one run (:mod:`evocamp.model.runspec`).

    It holds everything that fixes the run's results and nothing that may change
    during its life (``generations`` and ``shards`` are left out on purpose, but for
    types whose shards are workers of the algorithm; so are a program's
    :data:`~evocamp.tasks.program_keys.LOCAL_KEYS`, which are step settings).
    """
    domain_spec = resolved_domain(config["domains"][domain])
    for name in LOCAL_KEYS:
        domain_spec.pop(name, None)
    algorithm_spec = resolved_algorithm(config["algorithms"][algorithm], domain_spec)
    entry = ALGORITHMS[algorithm_spec["type"]]
    asynchronous = asynchronous_spec(config, domain_spec)
    if entry.shards_in_spec:
        # Every shard (asynchronous mode: every slot) is a worker of the algorithm.
        algorithm_spec["shards"] = asynchronous["slots"] if asynchronous else config["shards"]
    domain_entry = DOMAINS.get(domain_spec["type"])
    offset = domain_entry.score_offset(domain_spec["params"]) if domain_entry else 0.0
    if offset:
        algorithm_spec["archive"].setdefault("qd_score_offset", offset)
    spec = {
        "campaign": config["campaign"],
        "master_seed": config["master_seed"],
        "checkpoint_every": config["checkpoint_every"],
        "algorithm": algorithm,
        "domain": domain,
        "seed": seed,
        "algorithm_spec": algorithm_spec,
        "domain_spec": domain_spec,
    }
    if asynchronous:
        spec["asynchronous"] = asynchronous
    evaluation = {**(failure_policy_spec(config) or {}), **evaluation_spec(config)}
    if evaluation:
        spec["evaluation"] = evaluation
    return spec


def evaluation_spec(config: dict) -> dict:
    """The repeats of a run spec's ``evaluation`` part: ``repeats`` when not 1, so that the run
    specs of campaigns without it stay what they were. ``reevaluate`` is no part of
    it: it changes no archive, only adds the final re-evaluation (a rule parameter)."""
    repeats = int((config.get("evaluation") or {}).get("repeats", 1))
    return {"repeats": repeats} if repeats != 1 else {}


def failure_policy_spec(config: dict) -> dict | None:
    """The failure policy's part of a run spec's ``evaluation``: its keys
    (:class:`~evocamp.model.runspec.FailurePolicy`) when any differs from its default,
    else ``None`` (run specs with the defaults stay those of earlier versions).
    ``max_failed_fraction`` only stops a campaign: it is not part of it."""
    default = dataclasses.asdict(FailurePolicy())
    settings = {name: config["evaluation"][name] for name in default}
    if settings["on_failure"] != "retry":  # the retry keys change nothing then
        settings.update(retries=default["retries"], after_retries=default["after_retries"])
    return settings if settings != default else None


def asynchronous_spec(config: dict, domain_spec: dict) -> dict | None:
    """The ``asynchronous`` part of a run spec (``None`` unless ``mode: async``): the
    slot count, the clock, when the virtual clock needs them, the virtual durations
    (a domain's ``simulated_seconds`` are used instead when it has them), and
    ``propose_ahead`` when true."""
    if config["mode"] != "async":
        return None
    settings = config["async"]
    spec = {"slots": settings["slots"] or config["dask"]["workers"], "clock": settings["clock"]}
    if settings["clock"] == "virtual" and not domain_spec.get("simulated_seconds"):
        spec["virtual_seconds"] = dict(settings["virtual_seconds"])
    if settings["propose_ahead"]:  # (absent: run specs of earlier versions, none ahead)
        spec["propose_ahead"] = True
    return spec


def run_spec_json(spec: dict) -> str:
    """Canonical JSON of a run spec (sorted keys, no spaces)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))
