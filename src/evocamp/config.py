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

from evocamp.optimizers import BASELINE_TYPES, BO_TYPES, ES_TYPES, QD_TYPES

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
GRID_ALGORITHMS = {"map_elites", "map_elites_line", "cma_me", "cma_mae"}
#: QD algorithms whose emitters are evolution strategies (they have a ranker).
ES_EMITTER_ALGORITHMS = {"cma_me", "cma_mae"}
DEFAULT_GRID_CELLS_PER_MEASURE = 20
#: Built-in domains whose solution_dim is fixed by the task.
FIXED_DIM_DOMAINS = ("lunar_lander", "digits")
#: Defaults of algorithm keys by family, filled into the run spec.
QD_DEFAULTS = {"emitters": 1, "batch_size": 32, "sigma": 0.5, "iso_sigma": 0.01, "line_sigma": 0.2}
OPENAI_ES_DEFAULTS = {"popsize": 100, "sigma": 0.02, "learning_rate": 0.01, "weight_decay": 0.005}
SNES_DEFAULTS = {"sigma": 1.0, "eta_mu": 1.0}
#: Keys that only some algorithm types use.
KEYS_OF_TYPES = {
    "emitters": QD_TYPES,
    "batch_size": QD_TYPES + BASELINE_TYPES + BO_TYPES,
    "iso_sigma": QD_TYPES,
    "line_sigma": QD_TYPES,
    "ranker": tuple(ES_EMITTER_ALGORITHMS),
    "popsize": ES_TYPES,
    "sigma": QD_TYPES + ES_TYPES,
    "learning_rate": ("openai_es",),
    "weight_decay": ("openai_es",),
    "eta_mu": ("snes",),
    "eta_sigma": ("snes",),
    "kappa": BO_TYPES,
    "initial_points": BO_TYPES,
    "candidates": BO_TYPES,
    "trees": BO_TYPES,
    "refine_generations": BO_TYPES,
    "class": ("plugin",),
    "python_path": ("plugin",),
    "params": ("plugin",),
}


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
    """Number of measures of a domain (given ranges, else the built-in's: digits none,
    the others two)."""
    if "measure_ranges" in domain:
        return len(domain["measure_ranges"])
    from evocamp.domains import MINIMISED_VALUE

    return 0 if domain["type"] == "digits" or domain["type"] in MINIMISED_VALUE else 2


def batch_size_of(algorithm: dict, domain: dict) -> int | None:
    """Solutions asked per generation (``None`` for a plugin: its class decides).

    QD: emitters x batch size; ES: the population (SNES's default depends on the
    domain's dimension).
    """
    from evocamp.domains import solution_dim_of

    kind = algorithm["type"]
    if kind in QD_TYPES:
        return algorithm.get("emitters", 1) * algorithm.get("batch_size", 32)
    if kind == "openai_es":
        return algorithm.get("popsize", OPENAI_ES_DEFAULTS["popsize"])
    if kind in BASELINE_TYPES:
        return algorithm.get("batch_size", QD_DEFAULTS["batch_size"])
    if kind in BO_TYPES:
        from evocamp.bo import BO_DEFAULTS

        return algorithm.get("batch_size", BO_DEFAULTS["batch_size"])
    if kind == "snes":
        from evocamp.es import snes_popsize

        return algorithm.get("popsize") or snes_popsize(solution_dim_of(domain))
    return None


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


def _builtin_measures(domain: dict) -> int:
    return measure_dim({"type": domain["type"]})


def _domain_problems(name: str, domain: dict) -> list[str]:
    key = f"domains.{name}"
    problems = []
    if domain["type"] == "plugin":
        for required in ("function", "measure_ranges"):
            if required not in domain:
                problems.append(f"key '{key}.{required}': required for type plugin")
    elif "function" in domain:
        problems.append(f"key '{key}.function': only allowed for type plugin, not {domain['type']}")
    elif "measure_ranges" in domain and len(domain["measure_ranges"]) != _builtin_measures(domain):
        problems.append(
            f"key '{key}.measure_ranges': domain {domain['type']} has "
            f"{_builtin_measures(domain)} measures, got {len(domain['measure_ranges'])} ranges"
        )
    if domain["type"] in FIXED_DIM_DOMAINS and "solution_dim" in domain:
        from evocamp.domains import solution_dim_of

        fixed = solution_dim_of(
            {key: value for key, value in domain.items() if key != "solution_dim"}
        )
        if domain["solution_dim"] != fixed:
            problems.append(
                f"key '{key}.solution_dim': domain {domain['type']} has {fixed} parameters "
                f"(leave solution_dim out), not {domain['solution_dim']}"
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
    kind = algorithm["type"]
    problems = []
    for option, types in KEYS_OF_TYPES.items():
        if option in algorithm and kind not in types:
            problems.append(f"key '{key}.{option}': not used by type {kind}")
    if kind == "plugin" and "class" not in algorithm:
        problems.append(f"key '{key}.class': required for type plugin (module:Class)")
    if kind == "openai_es" and algorithm.get("popsize", 2) % 2:
        problems.append(
            f"key '{key}.popsize': openai_es samples antithetic pairs; "
            f"{algorithm['popsize']} is odd"
        )
    dims = algorithm["archive"].get("dims")
    if dims is not None and kind == "cvt_map_elites":
        problems.append(f"key '{key}.archive.dims': not used by cvt_map_elites (use cells)")
    for algorithm_name, domain_name in experiments_of(config):
        domain = config["domains"].get(domain_name)
        if algorithm_name != name or domain is None:
            continue
        problems += _pair_problems(name, algorithm, domain_name, domain, config["shards"])
    return problems


def resolved_domain_of(domain: dict) -> dict:
    """A domain entry with its built-in defaults (for checks before run specs exist)."""
    from evocamp.domains import resolved_domain

    return resolved_domain(domain)


def _pair_problems(name: str, algorithm: dict, domain_name: str, domain: dict, shards: int):
    """Problems of running algorithm ``name`` on ``domain_name``."""
    key = f"algorithms.{name}"
    problems = []
    measures = measure_dim(domain)
    if algorithm["type"] in QD_TYPES and measures == 0:
        problems.append(
            f"key '{key}.type': {algorithm['type']} needs measures, but domain "
            f"'{domain_name}' has none; use an ES (openai_es, snes) or a plugin"
        )
    dims = algorithm["archive"].get("dims")
    if dims is not None and measures and len(dims) != measures:
        problems.append(
            f"key '{key}.archive.dims': {len(dims)} dims given but domain "
            f"'{domain_name}' has {measures} measures"
        )
    if algorithm["type"] in BASELINE_TYPES + BO_TYPES and "bounds" not in resolved_domain_of(
        domain
    ):
        problems.append(
            f"key '{key}.type': {algorithm['type']} samples within bounds, but domain "
            f"'{domain_name}' has none; give domains.{domain_name}.bounds"
        )
    solutions = batch_size_of(algorithm, domain)
    if solutions is not None and shards > solutions:
        problems.append(
            f"key 'shards': {shards} shards is more than the {solutions} solutions per "
            f"generation of algorithm '{name}' on domain '{domain_name}'; allowed is "
            f"1..{solutions}"
        )
    return problems


def run_spec(config: dict, *, algorithm: str, domain: str, seed: int) -> dict:
    """The resolved, self-contained description of one run.

    It holds everything that fixes the run's results and nothing that may change
    during its life (``generations`` and ``shards`` are left out on purpose).
    """
    from evocamp.domains import default_qd_score_offset, resolved_domain

    domain_spec = resolved_domain(config["domains"][domain])
    algorithm_spec = resolved_algorithm(config["algorithms"][algorithm], domain_spec)
    if algorithm_spec["type"] == "qucb_decentralised":
        # Every shard is one decentralised worker: the shard count is part of the algorithm.
        algorithm_spec["shards"] = config["shards"]
    offset = default_qd_score_offset(domain_spec)
    if offset:
        algorithm_spec["archive"].setdefault("qd_score_offset", offset)
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


def resolved_algorithm(algorithm: dict, domain_spec: dict) -> dict:
    """An algorithm entry with its family's defaults filled in for a domain."""
    algorithm_spec = copy.deepcopy(algorithm)
    kind = algorithm_spec["type"]
    archive = algorithm_spec["archive"]
    if kind in QD_TYPES:
        for name, value in QD_DEFAULTS.items():
            algorithm_spec.setdefault(name, value)
    elif kind == "openai_es":
        for name, value in OPENAI_ES_DEFAULTS.items():
            algorithm_spec.setdefault(name, value)
    elif kind in BASELINE_TYPES:
        algorithm_spec.setdefault("batch_size", QD_DEFAULTS["batch_size"])
    elif kind in BO_TYPES:
        from evocamp.bo import BO_DEFAULTS

        for name, value in BO_DEFAULTS.items():
            algorithm_spec.setdefault(name, value)
    elif kind == "snes":
        from evocamp.es import snes_eta_sigma, snes_popsize

        dim = domain_spec["solution_dim"]
        for name, value in SNES_DEFAULTS.items():
            algorithm_spec.setdefault(name, value)
        algorithm_spec.setdefault("popsize", snes_popsize(dim))
        algorithm_spec.setdefault("eta_sigma", snes_eta_sigma(dim))
    if kind in GRID_ALGORITHMS or kind not in QD_TYPES:
        archive.setdefault(
            "dims", [DEFAULT_GRID_CELLS_PER_MEASURE] * len(domain_spec["measure_ranges"])
        )
    if kind in ES_EMITTER_ALGORITHMS:
        algorithm_spec.setdefault("ranker", "imp" if kind == "cma_mae" else "2imp")
    if kind == "cma_mae":
        archive.setdefault("learning_rate", 0.01)
        archive.setdefault("threshold_min", 0.0)
    if kind in QD_TYPES:
        archive.pop("passive", None)
    return algorithm_spec


def run_spec_json(spec: dict) -> str:
    """Canonical JSON of a run spec (sorted keys, no spaces)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def load_config_file(path: str | Path) -> dict:
    """Read and validate a configuration file."""
    with open(path) as handle:
        return validate_config(yaml.safe_load(handle) or {})
