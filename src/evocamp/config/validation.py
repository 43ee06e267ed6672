"""Validating a campaign configuration: finite numbers, the JSON schema shipped with the
package (``evocamp/schemas/config.schema.yaml``, its ``type`` lists taken from the
catalogue), then what a schema cannot express (keys a type does not use, shards against
batch sizes, ``low < high`` ranges, names that refer to each other, plugins that cannot be
imported). Suite grids (``type: bbob`` with ``functions``, ``dimensions``,
``instances``) are expanded into their domains first (:mod:`evocamp.config.suites`).
Every problem is reported with its key. Defaults come from the schema
(campaign-wide keys, ``archive.*``, domain keys); those particular to an algorithm type
or a built-in domain are filled by :mod:`evocamp.config.run_specs`. A key written under
the name the run spec stores it by (a QD type's per-emitter ``batch_size``), and a
storage key written where it was before ``storage`` (``keep_evaluations``,
``evaluations.*``), are read as the keys they are (:mod:`evocamp.config.renamed_keys`, whose
:func:`~evocamp.config.renamed_keys.stored_name_notices` says what to write instead).
"""

from __future__ import annotations

import copy
import inspect
import math
from importlib import resources
from pathlib import Path

import yaml

from evocamp.base.errors import ConfigError, OptimizerError
from evocamp.base.files import unwritable_reason
from evocamp.base.plugins import describe_import_failure, import_plugin
from evocamp.catalogue.algorithms import (
    ALGORITHMS,
    CELL_ARCHIVE_KEYS,
    TYPE_ARCHIVE_KEYS,
)
from evocamp.catalogue.domains import DEFAULT_SOLUTION_DIM, DOMAINS, DomainType
from evocamp.catalogue.factory import missing_extra, plugin_class
from evocamp.config.renamed_keys import read_renamed_keys
from evocamp.config.run_specs import (
    experiments_of,
    failure_policy_spec,
    readable_space,
    resolved_algorithm,
    resolved_domain,
    space_problems,
    space_refusal,
)
from evocamp.config.suites import expand_suites
from evocamp.families.qd.components import random_start
from evocamp.model.protocol import ASYNC_METHODS, accepts_async, accepts_failed
from evocamp.model.runspec import (
    COMMAND,
    MEASURES_SPREAD,
    OBJECTIVE_SPREAD,
    PLUGIN,
    FailurePolicy,
    measure_dim,
)
from evocamp.tasks.program_keys import COMMAND_KEYS, command_problems, program_problems

#: The configuration schema, shipped inside the package (``workflow/schemas`` links it).
SCHEMA_RESOURCE = ("evocamp", "schemas/config.schema.yaml")


def load_schema() -> dict:
    """The configuration JSON schema, with the ``type`` lists of algorithms and domains
    and the shapes of the keys only a library family's types accept
    (``AlgorithmType.key_shapes``) taken from the catalogue (a test checks the file's
    keys against it)."""
    package, name = SCHEMA_RESOURCE
    schema = yaml.safe_load(resources.files(package).joinpath(name).read_text())
    definitions = schema["$defs"]
    properties = definitions["algorithm"]["properties"]
    for entry in ALGORITHMS.values():
        for key, shape in entry.key_shapes.items():
            properties.setdefault(key, shape)
    definitions["algorithm"]["properties"]["type"]["enum"] = list(ALGORITHMS)
    definitions["domain"]["properties"]["type"]["enum"] = [*DOMAINS, PLUGIN, COMMAND]
    return schema


def _key_name(path) -> str:
    key = ""
    for part in path:
        key += f"[{part}]" if isinstance(part, int) else f".{part}"
    return key.lstrip(".") or "(top level)"


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
    if error.validator == "oneOf" and list(error.absolute_path)[-1:] == ["x0"]:
        return f"key '{key}': {error.instance!r} is neither a number nor random"
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


def _non_finite(value, path=()) -> list[str]:
    """Problems for every NaN or infinity in a loaded configuration (YAML's ``.nan``,
    ``.inf``): JSON schema bounds do not catch them."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"key '{_key_name(path)}': {value} is not a finite number"]
    if isinstance(value, dict):
        return [p for name, item in value.items() for p in _non_finite(item, (*path, name))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _non_finite(item, (*path, index))]
    return []


def _raise_problems(problems: list[str]) -> None:
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))


def validate_config(
    config: dict, *, check_plugins: bool = True, check_results_dir: bool = True
) -> dict:
    """Validate a campaign configuration and return it with defaults filled in.

    Parameters
    ----------
    config : dict
        The configuration as loaded from YAML (plus command-line overrides).
    check_plugins : bool
        Import every plugin domain function and optimizer class named, so that a
        misspelt module is reported here and not in every job's log.
    check_results_dir : bool
        Check that this process can make and write ``results_dir`` (it makes and
        removes an empty folder there or in its nearest existing ancestor), so that a
        folder that cannot be written is reported here and not by the first job.

    Raises
    ------
    ConfigError
        With one line per problem, each naming the key and what is allowed.
    """
    import jsonschema

    _raise_problems(_non_finite(config))
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.path)))
    _raise_problems([_describe(error) for error in errors])
    resolved = copy.deepcopy(config)
    _raise_problems(read_renamed_keys(resolved))
    _fill_defaults(resolved, schema, schema)
    _raise_problems(expand_suites(resolved))
    _raise_problems(_semantic_problems(resolved, check_results_dir=check_results_dir))
    if check_plugins:
        _raise_problems(plugin_problems(resolved))
    return resolved


def _semantic_problems(config: dict, *, check_results_dir: bool) -> list[str]:
    problems = _results_dir_problems(config["results_dir"], writable=check_results_dir)
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
    broken = set()
    for name, domain in config["domains"].items():
        found = _domain_problems(name, domain)
        problems += found
        if found:
            broken.add(name)
    for name, algorithm in config["algorithms"].items():
        problems += _algorithm_problems(name, algorithm, config, broken_domains=broken)
    if config["mode"] == "async":
        problems += _asynchronous_problems(config)
    return (
        problems + _spread_problems(config) + _figures_problems(config) + _discard_problems(config)
    )


def _spread_problems(config: dict) -> list[str]:
    """Extra fields named like the spread fields of repeated evaluations."""
    if (config.get("evaluation") or {}).get("repeats", 1) == 1:
        return []
    return [
        f"key 'domains.{name}.extra_fields': '{field}' is the name evocamp gives the spread of "
        "repeated evaluations (evaluation.repeats > 1); rename the field"
        for name, domain in config["domains"].items()
        for field in domain.get("extra_fields") or []
        if field == OBJECTIVE_SPREAD or field.startswith(MEASURES_SPREAD)
    ]


def discards(config: dict) -> bool:
    """Whether failed solutions may be discarded (``evaluation.on_failure`` discard, or
    retry then discard)."""
    return FailurePolicy(**failure_policy_spec(config) or {}).final_action() == "discard"


def _discard_problems(config: dict) -> list[str]:
    """Algorithms that cannot leave failed solutions out (``evaluation.on_failure``
    discard, or retry then discard): a surrogate scheduler (BOP-Elites) fits every
    told solution."""
    if not discards(config):
        return []
    problems = []
    for name, algorithm in config["algorithms"].items():
        entry = ALGORITHMS.get(algorithm.get("type"))
        if entry is not None and entry.recipe is not None and entry.recipe.scheduler.surrogate:
            problems.append(
                f"key 'evaluation.on_failure': algorithm '{name}' ({algorithm['type']}) "
                "cannot leave failed solutions out of its surrogate; use stop or retry "
                "(with after_retries: stop)"
            )
    return problems


def _results_dir_problems(results_dir: str, *, writable: bool) -> list[str]:
    """A ``results_dir`` that exists but is not a folder, or (``writable``) one this
    process cannot make or write (relative to where the campaign runs)."""
    if Path(results_dir).exists() and not Path(results_dir).is_dir():
        return [
            f"key 'results_dir': '{results_dir}' is an existing file, not a folder; name a "
            "folder (it is made when missing)"
        ]
    reason = unwritable_reason(results_dir) if writable else None
    if reason is not None:
        return [
            f"key 'results_dir': '{results_dir}' cannot be written: {reason}; name a "
            "folder this user can write (it is made when missing)"
        ]
    return []


def _figures_problems(config: dict) -> list[str]:
    """Domain names in ``figures.reference`` and ``figures.targets.values`` that the
    campaign does not define, and reference values whose worst equals their best."""
    figures = config["figures"]
    problems = []
    for key, names in (
        ("figures.reference", figures["reference"]),
        ("figures.targets.values", figures["targets"]["values"]),
    ):
        problems += [
            f"key '{key}.{name}': unknown domain '{name}'; defined are {sorted(config['domains'])}"
            for name in names
            if name not in config["domains"]
        ]
    for domain, metrics in figures["reference"].items():
        for metric, (worst, best) in metrics.items():
            if worst == best:
                problems.append(
                    f"key 'figures.reference.{domain}.{metric}': worst and best are both {worst}"
                )
    return problems


def _asynchronous_problems(config: dict) -> list[str]:
    """Algorithm types that cannot run in ``mode: async``, each with why, and a
    LocalCluster of no workers (``dask.workers: 0`` is Dask mode's only)."""
    problems = []
    if config["dask"]["workers"] == 0 and not config["dask"]["scheduler_file"]:
        problems.append(
            "key 'dask.workers': 0 (evaluating in the segment's own process) is for mode "
            "dask only: mode async keeps its slots' evaluations in flight on Dask workers; "
            "give it at least 1"
        )
    used = {algorithm for algorithm, _ in experiments_of(config)}
    for name, algorithm in config["algorithms"].items():
        entry = ALGORITHMS[algorithm["type"]]
        if name in used and entry.async_refusal is not None:
            problems.append(
                f"key 'algorithms.{name}.type': {entry.name} cannot run in mode async: "
                f"{entry.async_refusal}; run it with mode dask or shards (asynchronous are "
                f"{', '.join(asynchronous_types())})"
            )
    return problems


def asynchronous_types() -> list[str]:
    """Algorithm types that run in ``mode: async``."""
    return [name for name, entry in ALGORITHMS.items() if entry.async_refusal is None]


def _domain_problems(name: str, domain: dict) -> list[str]:
    key = f"domains.{name}"
    kind = domain["type"]
    problems = []
    if kind == COMMAND:
        problems += command_problems(key, domain, space=readable_space(domain))
    else:
        problems += [
            f"key '{key}.{setting}': only allowed for type command, not {kind}"
            for setting in COMMAND_KEYS
            if setting in domain
        ]
    if kind == PLUGIN:
        for required in ("function", "measure_ranges"):
            if required not in domain:
                problems.append(f"key '{key}.{required}': required for type plugin")
    elif "function" in domain:
        problems.append(f"key '{key}.function': only allowed for type plugin, not {kind}")
    elif (
        kind in DOMAINS
        and "measure_ranges" in domain
        and len(domain["measure_ranges"]) != DOMAINS[kind].measure_dim
    ):
        problems.append(
            f"key '{key}.measure_ranges': domain {kind} has {DOMAINS[kind].measure_dim} "
            f"measures, got {len(domain['measure_ranges'])} ranges"
        )
    entry = DOMAINS.get(kind)
    missing = missing_extra(entry) if entry is not None else None
    if missing:
        problems.append(f"key '{key}.type': {missing}")
    if entry is not None:
        param_problems = _built_in_param_problems(key, entry, domain.get("params") or {})
        if param_problems:  # the rules below read the params
            return problems + param_problems
    problems += space_problems(key, domain)
    if entry is not None and entry.fixed_dim is not None and "solution_dim" in domain:
        fixed = entry.fixed_dim(domain.get("params") or {})
        if domain["solution_dim"] != fixed:
            problems.append(
                f"key '{key}.solution_dim': domain {kind} has {fixed} parameters "
                f"(leave solution_dim out), not {domain['solution_dim']}"
            )
    for index, (low, high) in enumerate(domain.get("measure_ranges") or []):
        if low >= high:
            problems.append(
                f"key '{key}.measure_ranges[{index}]': low {low} must be below high {high}"
            )
    cqd = domain.get("cqd") or {}
    params = {**(DOMAINS[kind].params if kind in DOMAINS else {}), **(domain.get("params") or {})}
    low = cqd.get("obj_min", DOMAINS[kind].score_offset(params) if kind in DOMAINS else None)
    if low is not None and ("obj_min" in cqd or "obj_max" in cqd):
        high = cqd.get("obj_max")
        if high is None and kind in DOMAINS and not missing:
            dim = domain.get("solution_dim", DEFAULT_SOLUTION_DIM)
            high = DOMAINS[kind].best_objective(dim, params)
    else:
        high = None
    if low is not None and high is not None:
        if low >= high:
            problems.append(f"key '{key}.cqd': obj_min {low} must be below obj_max {high}")
    if "bounds" in domain and domain["bounds"][0] >= domain["bounds"][1]:
        low, high = domain["bounds"]
        problems.append(f"key '{key}.bounds': low {low} must be below high {high}")
    if domain.get("x0") == "random" and (kind not in DOMAINS or DOMAINS[kind].random_x0 is None):
        takers = ", ".join(name for name, other in DOMAINS.items() if other.random_x0)
        problems.append(
            f"key '{key}.x0': random draws in a built-in domain's box ({takers}), "
            f"which type {kind} has not; give a number"
        )
    return problems


def _built_in_param_problems(key: str, entry: DomainType, params: dict) -> list[str]:
    """Params a built-in domain's function does not take, and values its rules refuse."""
    accepted = [
        name
        for name, parameter in inspect.signature(entry.evaluate).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    problems = [
        f"key '{key}.params.{name}': not a parameter of domain {entry.name} "
        f"(its parameters: {', '.join(accepted) or 'none'})"
        for name in params
        if name not in accepted
    ]
    if entry.param_rules is not None:
        problems += [
            f"key '{key}.params.{name}': {problem}" for name, problem in entry.param_rules(params)
        ]
    return problems


def _algorithm_problems(
    name: str, algorithm: dict, config: dict, *, broken_domains: set[str]
) -> list[str]:
    """Problems of an algorithm entry, and of running it on each of its domains (but
    those whose own entry has problems)."""
    key = f"algorithms.{name}"
    entry = ALGORITHMS[algorithm["type"]]
    accepted = {"type", "archive", *entry.keys}
    problems = [
        f"key '{key}.{option}': not used by type {entry.name}"
        for option in algorithm
        if option not in accepted
    ]
    problems += [
        f"key '{key}.{required}': required for type {entry.name} (module:Class)"
        for required in entry.required
        if required not in algorithm
    ]
    missing = missing_extra(entry)
    if missing:
        problems.append(f"key '{key}.type': {missing}")
    problems += [
        f"key '{key}.{option}': {problem}" for option, problem in entry.key_problems(algorithm)
    ]
    if algorithm["archive"].get("dims") is not None and not entry.grid_archive:
        problems.append(f"key '{key}.archive.dims': not used by {entry.name} (use cells)")
    problems += [
        f"key '{key}.archive.{option}': not used by type {entry.name}"
        for option in algorithm["archive"]
        if option in TYPE_ARCHIVE_KEYS and option not in entry.archive_defaults
    ]
    if entry.recipe is not None and not entry.recipe.archive.cells:
        problems += [
            f"key '{key}.archive.{option}': not used by type {entry.name} (its emitters "
            f"learn on a {entry.recipe.archive.name} archive, which has no cells)"
            for option in CELL_ARCHIVE_KEYS
            if option in algorithm["archive"]
        ]
    for algorithm_name, domain_name in experiments_of(config):
        domain = config["domains"].get(domain_name)
        if algorithm_name != name or domain is None or domain_name in broken_domains:
            continue
        shards = config["shards"] if config["mode"] != "async" else 1  # async: no shards
        problems += _pair_problems(name, algorithm, domain_name, domain, shards)
    return problems


def _pair_problems(name: str, algorithm: dict, domain_name: str, domain: dict, shards: int):
    """Problems of running algorithm ``name`` on ``domain_name``."""
    key = f"algorithms.{name}"
    entry = ALGORITHMS[algorithm["type"]]
    problems = []
    domain_spec = resolved_domain(domain)
    measures = measure_dim(domain_spec)
    if entry.needs_measures and measures == 0:
        problems.append(
            f"key '{key}.type': {entry.name} needs measures, but domain "
            f"'{domain_name}' has none; use an ES (openai_es, snes) or a plugin"
        )
    dims = algorithm["archive"].get("dims")
    if dims is not None and measures and len(dims) != measures:
        problems.append(
            f"key '{key}.archive.dims': {len(dims)} dims given but domain "
            f"'{domain_name}' has {measures} measures"
        )
    draws = "initial_population" in entry.keys and random_start(algorithm)
    if draws and not _initialises(domain_spec):
        problems.append(
            f"key '{key}.initial_population': random draws from the domain's own "
            f"initialisation, but domain '{domain_name}' has none (the locomotion "
            "domains have); leave the key out to start from x0"
        )
    cost = algorithm.get("cost")
    if cost is None and "cost_cooling" in algorithm:
        problems.append(f"key '{key}.cost_cooling': cools the cost's exponent; give {key}.cost")
    elif cost is not None and cost not in (domain_spec.get("extra_fields") or []):
        fields = ", ".join(domain_spec.get("extra_fields") or []) or "none"
        problems.append(
            f"key '{key}.cost': '{cost}' is no extra field of domain '{domain_name}' "
            f"(its extra fields: {fields}); the cost must be a field every evaluation reports"
        )
    if "space" in domain_spec and not entry.takes_space:
        problems.append(f"key '{key}.type': {space_refusal(entry, domain_name)}")
    elif entry.needs_bounds and "bounds" not in domain_spec and "space" not in domain_spec:
        problems.append(
            f"key '{key}.type': {entry.name} samples within bounds, but domain "
            f"'{domain_name}' has none; give domains.{domain_name}.bounds"
        )
    if entry.generation_size is not None:
        solutions = entry.generation_size(resolved_algorithm(algorithm, domain_spec))
        if shards > solutions:
            problems.append(
                f"key 'shards': {shards} shards is more than the {solutions} solutions per "
                f"generation of algorithm '{name}' on domain '{domain_name}'; allowed is "
                f"1..{solutions}"
            )
        problems += _batch_memory_problems(
            key,
            solutions,
            solution_dim=int(domain_spec["solution_dim"]),
            measures=measures,
            domain_name=domain_name,
        )
    return problems


def _initialises(domain_spec: dict) -> bool:
    """Whether a domain draws initial solutions of its own (``initial_population``)."""
    entry = DOMAINS.get(domain_spec["type"])
    return entry is not None and entry.initial_solutions is not None


def batch_bytes(solutions: int, *, solution_dim: int, measure_dim: int) -> int:
    """Bytes a generation's batch takes in memory at least: its solutions, their
    evaluation seeds, objectives, measures and seconds (float64 or uint64 each)."""
    return 8 * solutions * (solution_dim + measure_dim + 3)


def _batch_memory_problems(
    key: str, solutions: int, *, solution_dim: int, measures: int, domain_name: str
) -> list[str]:
    """A batch that cannot fit in this machine's memory (refused before ``initialise``
    would try to allocate it)."""
    import psutil

    needed = batch_bytes(solutions, solution_dim=solution_dim, measure_dim=measures)
    memory = psutil.virtual_memory().total
    if needed <= memory:
        return []
    return [
        f"key '{key}': a generation of {solutions:,} solutions of "
        f"{solution_dim} parameters on domain '{domain_name}' takes at least "
        f"{needed / 1e9:,.1f} GB of memory (solutions, seeds, objectives, measures), more "
        f"than this machine's {memory / 2**30:.1f} GiB; lower its batch size"
    ]


def plugin_problems(config: dict) -> list[str]:
    """Plugin domain functions and optimizer classes that cannot be imported (or lack
    ``ask``/``tell``), each named with its key, module and ``python_path``."""
    problems = []
    for name, domain in config["domains"].items():
        if domain["type"] == COMMAND:
            problems += program_problems(f"domains.{name}", domain)
        if domain["type"] != PLUGIN or "function" not in domain:
            continue
        key = f"domains.{name}.function"
        try:
            function = import_plugin(domain["function"], domain.get("python_path"))
        except (ImportError, AttributeError) as error:
            failure = describe_import_failure(domain["function"], domain.get("python_path"), error)
            problems.append(f"key '{key}': {failure}")
            continue
        except Exception as error:  # noqa: BLE001 - a user's module may raise anything
            problems.append(
                f"key '{key}': importing {domain['function']} raised "
                f"{type(error).__name__}: {error}"
            )
            continue
        if not callable(function):
            problems.append(f"key '{key}': {domain['function']} is not a function")
    for name, algorithm in config["algorithms"].items():
        if ALGORITHMS[algorithm["type"]].cls is not None or "class" not in algorithm:
            continue
        try:
            cls = plugin_class(algorithm, where=f"key 'algorithms.{name}.class'")
            if config["mode"] == "async" and not accepts_async(cls):
                problems.append(
                    f"key 'algorithms.{name}.class': {algorithm['class']} cannot run in mode "
                    f"async: it has no {' and '.join(m + '()' for m in ASYNC_METHODS)} "
                    "(docs/plugins.md, 'Asynchronous mode')"
                )
            if discards(config) and not accepts_failed(cls):
                problems.append(
                    f"key 'algorithms.{name}.class': {algorithm['class']}.tell takes no "
                    "'failed' keyword, which discarding failed solutions needs "
                    "(evaluation.on_failure): they come as NaN rows that only the "
                    "optimizer knows how to leave out. Add it, def tell(self, objective, "
                    "measures, *, failed=None, **extra), failed being None or a boolean "
                    "mask of the rows that failed, and leave those rows out "
                    "(docs/plugins.md, 'The protocol'); or use on_failure stop, or retry "
                    "with after_retries: stop"
                )
        except OptimizerError as error:
            problems.append(str(error))
        except Exception as error:  # noqa: BLE001 - a user's module may raise anything
            problems.append(
                f"key 'algorithms.{name}.class': importing {algorithm['class']} raised "
                f"{type(error).__name__}: {error}"
            )
    return problems
