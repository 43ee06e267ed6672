"""Keys written under older or other names, read as the keys they are: a QD type's
per-emitter ``batch_size`` (its run spec's name for ``emitter_batch_size``) and the
storage keys written where they were before ``storage``. Each gives one notice line
saying what to write instead (:func:`stored_name_notices`); giving a key both ways is a
problem of the configuration.
"""

from __future__ import annotations

import yaml

from evocamp.catalogue.algorithms import ALGORITHMS


def read_renamed_keys(config: dict) -> list[str]:
    """Read, in place, the keys of a schema-valid configuration written under older or
    other names as the keys they are; the problems of keys given both ways."""
    return _read_stored_names(config) + _read_old_storage_keys(config)


def _keys_under_stored_names(config: dict):
    """``(name, algorithm, SpecName)`` of every algorithm entry of a schema-valid
    configuration that writes a key under its run spec's name (a QD type's
    ``batch_size``)."""
    for name, algorithm in (config.get("algorithms") or {}).items():
        for spec_name in ALGORITHMS[algorithm["type"]].spec_names:
            if spec_name.stored in algorithm:
                yield name, algorithm, spec_name


def _read_stored_names(config: dict) -> list[str]:
    """Read, in place, keys written under their run spec's name as the keys they are;
    the problems of entries that write both."""
    problems = []
    for name, algorithm, spec_name in list(_keys_under_stored_names(config)):
        if spec_name.key in algorithm:
            problems.append(
                f"key 'algorithms.{name}.{spec_name.stored}': {spec_name.key} is given too; "
                f"give only {spec_name.key}"
            )
            continue
        renamed = {spec_name.stored: spec_name.key}
        config["algorithms"][name] = {renamed.get(k, k): v for k, v in algorithm.items()}
    return problems


#: Storage keys as written before ``storage``: ``(path, key under storage)``.
OLD_STORAGE_KEYS = (
    (("keep_evaluations",), "keep_evaluations"),
    (("evaluations", "max_solution_params"), "max_solution_params"),
    (("evaluations", "auto_max_mb"), "auto_max_mb"),
)


def _old_storage_keys(config: dict) -> dict:
    """``{key under storage: value}`` of the storage keys a schema-valid configuration
    writes where they were before ``storage``."""
    found = {}
    for path, key in OLD_STORAGE_KEYS:
        value = config
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            found[key] = value
    return found


def _read_old_storage_keys(config: dict) -> list[str]:
    """Read, in place, storage keys written where they were before ``storage`` as the
    ``storage`` keys they are; the problems of keys given both ways."""
    old = _old_storage_keys(config)
    storage = config.get("storage") or {}
    problems = [
        f"key 'storage.{key}': the old key for it is given too; give only storage.{key}"
        for key in old
        if key in storage
    ]
    config.pop("keep_evaluations", None)
    config.pop("evaluations", None)
    if old and not problems:
        config["storage"] = {**storage, **old}
    return problems


def stored_name_notices(config: dict) -> list[str]:
    """One line per key a campaign file writes under its run spec's name (a QD type's
    per-emitter ``batch_size``), and one for the storage keys it writes where they were
    before ``storage``, saying what to write instead.

    Parameters
    ----------
    config : dict
        The configuration as loaded, once :func:`validate_config` has accepted it
        (the configuration it returns has such keys under their own names).
    """
    notices = [
        f"algorithms.{name}: '{spec_name.stored}' is {spec_name.meaning} for "
        f"{algorithm['type']}: write '{spec_name.key}: {algorithm[spec_name.stored]}'"
        for name, algorithm, spec_name in _keys_under_stored_names(config)
    ]
    if old := _old_storage_keys(config):
        written = ", ".join(f"{key}: {_yaml_value(value)}" for key, value in old.items())
        names = list(dict.fromkeys(path[0] for path, key in OLD_STORAGE_KEYS if key in old))
        verb = "is" if len(names) == 1 else "are"
        notices.append(
            f"{' and '.join(names)} {verb} under storage now: write 'storage: {{{written}}}'"
        )
    return notices


def _yaml_value(value) -> str:
    """A value as a campaign file writes it (``true``, ``auto``, ``5``)."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()
