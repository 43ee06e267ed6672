"""Campaign configuration: validation against the JSON schema, defaults, run specs.

The schema lives in ``workflow/schemas/config.schema.yaml``; this module adds the
checks a schema cannot express (shards against batch sizes, ``low < high`` ranges,
names that must refer to each other) and expands a campaign into run specs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
GRID_ALGORITHMS = {"map_elites", "map_elites_line", "cma_me", "cma_mae"}
ES_ALGORITHMS = {"cma_me", "cma_mae"}
DEFAULT_GRID_CELLS_PER_MEASURE = 20


class ConfigError(ValueError):
    """A campaign configuration is invalid; the message names the key."""


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    """Read the configuration JSON schema (YAML)."""
    with open(path) as handle:
        return yaml.safe_load(handle)


def _key_name(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _describe(error) -> str:
    """One line for a jsonschema error: the key and what is allowed."""
    key = _key_name(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"key '{key}': unknown key(s) {unknown}; allowed keys are {allowed}"
    if error.validator == "enum":
        return f"key '{key}': {error.instance!r} is not one of {error.validator_value}"
    if error.validator == "oneOf" and "seeds" in error.absolute_path:
        return (
            f"key '{key}': {error.instance!r} is neither a positive number of seeds "
            "nor a list of distinct non-negative seeds"
        )
    return f"key '{key}': {error.message}"


def _fill_defaults(instance, schema: dict, root: dict) -> None:
    """Fill ``default`` values of the schema into ``instance``, recursively."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    if not isinstance(instance, dict):
        return
    for name, sub in schema.get("properties", {}).items():
        if name not in instance and "default" in sub:
            instance[name] = copy.deepcopy(sub["default"])
        if name in instance:
            _fill_defaults(instance[name], sub, root)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for name, value in instance.items():
            if name not in schema.get("properties", {}):
                _fill_defaults(value, extra, root)


def validate_config(config: dict, *, schema: dict | None = None) -> dict:
    """Validate a campaign configuration and return it with defaults filled in.

    Parameters
    ----------
    config : dict
        The configuration as loaded from YAML (plus command-line overrides).
    schema : dict, optional
        The JSON schema; read from ``workflow/schemas`` when not given.

    Raises
    ------
    ConfigError
        With one line per problem, each naming the key and what is allowed.
    """
    import jsonschema

    schema = schema or load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.path)))
    if errors:
        raise ConfigError(
            "invalid configuration:\n" + "\n".join(f"  {_describe(e)}" for e in errors)
        )
    resolved = copy.deepcopy(config)
    _fill_defaults(resolved, schema, schema)
    problems = _semantic_problems(resolved)
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))
    return resolved


def seeds_of(config: dict) -> list[int]:
    """The campaign's seeds: ``0..n-1`` for an integer, else the list given."""
    seeds = config["seeds"]
    return list(range(seeds)) if isinstance(seeds, int) else list(seeds)


def experiments_of(config: dict) -> list[tuple[str, str]]:
    """The (algorithm, domain) pairs of the campaign, in configuration order."""
    if config.get("experiments"):
        return [(e["algorithm"], e["domain"]) for e in config["experiments"]]
    return [(a, d) for a in config["algorithms"] for d in config["domains"]]


def measure_dim(domain: dict) -> int:
    """Number of measures of a domain (built-ins have two)."""
    if domain.get("measure_ranges"):
        return len(domain["measure_ranges"])
    return 2


def batch_size_of(algorithm: dict) -> int:
    """Solutions asked per generation: emitters x batch size."""
    return algorithm["emitters"] * algorithm["batch_size"]


def _semantic_problems(config: dict) -> list[str]:
    problems = []
    for pair_index, (algorithm, domain) in enumerate(experiments_of(config)):
        where = f"experiments[{pair_index}]"
        if algorithm not in config["algorithms"]:
            problems.append(
                f"key '{where}.algorithm': unknown algorithm '{algorithm}'; "
                f"defined are {sorted(config['algorithms'])}"
            )
        if domain not in config["domains"]:
            problems.append(
                f"key '{where}.domain': unknown domain '{domain}'; "
                f"defined are {sorted(config['domains'])}"
            )
    for name, domain in config["domains"].items():
        problems += _domain_problems(name, domain)
    for name, algorithm in config["algorithms"].items():
        problems += _algorithm_problems(name, algorithm, config)
    return problems


def _domain_problems(name: str, domain: dict) -> list[str]:
    key = f"domains.{name}"
    problems = []
    if domain["type"] == "plugin":
        for required in ("function", "measure_ranges"):
            if required not in domain:
                problems.append(f"key '{key}.{required}': required for type plugin")
    elif "function" in domain:
        problems.append(f"key '{key}.function': only allowed for type plugin, not {domain['type']}")
    elif domain.get("measure_ranges") and len(domain["measure_ranges"]) != 2:
        problems.append(
            f"key '{key}.measure_ranges': domain {domain['type']} has 2 measures, "
            f"got {len(domain['measure_ranges'])} ranges"
        )
    for index, (low, high) in enumerate(domain.get("measure_ranges") or []):
        if low >= high:
            problems.append(
                f"key '{key}.measure_ranges[{index}]': low {low} must be below high {high}"
            )
    if "bounds" in domain and domain["bounds"][0] >= domain["bounds"][1]:
        low, high = domain["bounds"]
        problems.append(f"key '{key}.bounds': low {low} must be below high {high}")
    return problems


def _algorithm_problems(name: str, algorithm: dict, config: dict) -> list[str]:
    key = f"algorithms.{name}"
    problems = []
    solutions = batch_size_of(algorithm)
    if config["shards"] > solutions:
        problems.append(
            f"key 'shards': {config['shards']} shards is more than the {solutions} "
            f"solutions per generation of algorithm '{name}' "
            f"(emitters x batch_size); allowed is 1..{solutions}"
        )
    dims = algorithm["archive"].get("dims")
    if dims is not None and algorithm["type"] == "cvt_map_elites":
        problems.append(f"key '{key}.archive.dims': not used by cvt_map_elites (use cells)")
    for algorithm_name, domain_name in experiments_of(config):
        domain = config["domains"].get(domain_name)
        if algorithm_name != name or domain is None or dims is None:
            continue
        if len(dims) != measure_dim(domain):
            problems.append(
                f"key '{key}.archive.dims': {len(dims)} dims given but domain "
                f"'{domain_name}' has {measure_dim(domain)} measures"
            )
    return problems


def run_spec(config: dict, *, algorithm: str, domain: str, seed: int) -> dict:
    """The resolved, self-contained description of one run.

    It holds everything that fixes the run's results and nothing that may change
    during its life (``generations`` and ``shards`` are left out on purpose).
    """
    from evocamp.domains import default_bounds, default_measure_ranges

    domain_spec = copy.deepcopy(config["domains"][domain])
    if domain_spec["type"] != "plugin":
        domain_spec.setdefault("measure_ranges", default_measure_ranges(domain_spec))
        bounds = default_bounds(domain_spec)
        if bounds is not None:
            domain_spec.setdefault("bounds", bounds)
    algorithm_spec = copy.deepcopy(config["algorithms"][algorithm])
    archive = algorithm_spec["archive"]
    if algorithm_spec["type"] in GRID_ALGORITHMS:
        archive.setdefault(
            "dims", [DEFAULT_GRID_CELLS_PER_MEASURE] * len(domain_spec["measure_ranges"])
        )
    if algorithm_spec["type"] in ES_ALGORITHMS:
        algorithm_spec.setdefault(
            "ranker", "imp" if algorithm_spec["type"] == "cma_mae" else "2imp"
        )
    if algorithm_spec["type"] == "cma_mae":
        archive.setdefault("learning_rate", 0.01)
        archive.setdefault("threshold_min", 0.0)
    return {
        "campaign": config["campaign"],
        "master_seed": config["master_seed"],
        "checkpoint_every": config["checkpoint_every"],
        "algorithm": algorithm,
        "domain": domain,
        "seed": seed,
        "algorithm_spec": algorithm_spec,
        "domain_spec": domain_spec,
    }


def run_spec_json(spec: dict) -> str:
    """Canonical JSON of a run spec (sorted keys, no spaces)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def load_config_file(path: str | Path) -> dict:
    """Read and validate a configuration file."""
    with open(path) as handle:
        return validate_config(yaml.safe_load(handle) or {})
