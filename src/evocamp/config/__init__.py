"""Campaign configuration, in three steps: :mod:`~evocamp.config.reading` (a campaign
file's YAML, errors with line and column, keys given twice),
:mod:`~evocamp.config.validation` (the JSON schema and the checks it cannot express,
plugin imports, the schema's defaults; keys under older names are read by
:mod:`~evocamp.config.renamed_keys`) and :mod:`~evocamp.config.run_specs` (the
catalogue's defaults, run specs). Their public names are re-exported here: callers
write ``from evocamp.config import run_spec``.
"""

from evocamp.config.reading import load_config_file, read_yaml
from evocamp.config.renamed_keys import stored_name_notices
from evocamp.config.run_specs import (
    asynchronous_spec,
    evaluation_spec,
    experiments_of,
    failure_policy_spec,
    has_space,
    read_space,
    resolved_algorithm,
    resolved_domain,
    run_spec,
    run_spec_json,
    seeds_of,
)
from evocamp.config.validation import (
    SCHEMA_RESOURCE,
    asynchronous_types,
    batch_bytes,
    discards,
    load_schema,
    plugin_problems,
    validate_config,
)

__all__ = [
    "SCHEMA_RESOURCE",
    "asynchronous_spec",
    "asynchronous_types",
    "batch_bytes",
    "discards",
    "evaluation_spec",
    "experiments_of",
    "failure_policy_spec",
    "has_space",
    "read_space",
    "load_config_file",
    "load_schema",
    "plugin_problems",
    "read_yaml",
    "resolved_algorithm",
    "resolved_domain",
    "run_spec",
    "run_spec_json",
    "seeds_of",
    "stored_name_notices",
    "validate_config",
]
