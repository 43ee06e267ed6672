"""Importing a user's function or class named ``module:name``."""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path


@functools.cache
def import_plugin(target: str, python_path: str | None):
    """Import ``module:name`` (a user's function or class) once per process (Dask
    workers evaluate many slices); ``python_path`` is put in front of ``sys.path``.

    Raises
    ------
    ImportError, AttributeError
        As raised by the import; callers turn them into a message naming the
        configuration key (:func:`evocamp.config.plugin_problems`) or the run.
    """
    module_name, _, name = target.partition(":")
    if python_path:
        folder = str(Path(python_path).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module = importlib.import_module(module_name)
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module '{module_name}' has no attribute '{name}'") from None


def describe_import_failure(target: str, python_path: str | None, error: Exception) -> str:
    """``module m cannot be imported (ModuleNotFoundError: ...; python_path: ...)``."""
    module_name = target.partition(":")[0]
    where = python_path or "not set"
    if isinstance(error, AttributeError):
        return f"{target} cannot be imported: {error} (python_path: {where})"
    return (
        f"{target} cannot be imported: module '{module_name}' fails to import "
        f"({type(error).__name__}: {error}; python_path: {where})"
    )
