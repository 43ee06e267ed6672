"""Reading a campaign file: YAML errors named with their file, line and column, keys
given twice refused, then :func:`~evocamp.config.validation.validate_config`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from evocamp.base.errors import ConfigError
from evocamp.config.validation import validate_config


def load_config_file(
    path: str | Path, *, check_plugins: bool = True, check_results_dir: bool = True
) -> dict:
    """Read and validate a campaign file (the checks: :func:`validate_config`).

    Raises
    ------
    ConfigError
        For a missing file, a YAML syntax error (file, line and column) or an invalid
        configuration.
    """
    return validate_config(
        read_yaml(path), check_plugins=check_plugins, check_results_dir=check_results_dir
    )


def read_yaml(path: str | Path) -> dict:
    """A campaign file's content; a syntax error names the file, line and column."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"campaign file {path} cannot be read: {error.strerror}") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "syntax error"
        raise ConfigError(f"campaign file {path} is not valid YAML{where}: {problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"campaign file {path} is not valid YAML: {error}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(
            f"campaign file {path} holds a {type(loaded).__name__}, not a mapping of keys"
        )
    twice = _keys_given_twice(yaml.compose(text, Loader=yaml.SafeLoader))
    if twice:
        raise ConfigError(
            f"campaign file {path}: " + "; ".join(twice) + " (a YAML mapping keeps the last "
            "of keys given twice, silently replacing the first: rename or remove one)"
        )
    return loaded or {}


def _keys_given_twice(node, path: tuple = ()) -> list[str]:
    """``key 'algorithms.me' is given twice (lines 8 and 14)`` for every key of a
    composed YAML document that a mapping holds twice."""
    found = []
    if isinstance(node, yaml.MappingNode):
        lines: dict = {}
        for key_node, value_node in node.value:
            name = key_node.value
            line = key_node.start_mark.line + 1
            if name in lines:
                dotted = ".".join(map(str, (*path, name)))
                found.append(f"key '{dotted}' is given twice (lines {lines[name]} and {line})")
            else:
                lines[name] = line
            found += _keys_given_twice(value_node, (*path, name))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found += _keys_given_twice(item, (*path, index))
    return found
