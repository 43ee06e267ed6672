"""Numeric provenance: what computed a run (BLAS library and kernel, numpy's SIMD
targets, pinned package versions, CPU model), recorded per step kind, and whether a
run mixed environments.

One master seed fixes a run's results bit for bit only under one numeric
environment: the same BLAS kernel (OpenBLAS picks its kernel from the CPU when it
loads: ``Haswell``, ``SkylakeX``, ...; ``OPENBLAS_CORETYPE`` overrides it), the same
numpy SIMD loops (numpy picks them from the CPU too: its AVX-512 ``exp`` or ``log``
give other last bits than its AVX2 ones; ``NPY_DISABLE_CPU_FEATURES`` turns targets
off) and the same versions of the packages that compute (:data:`NUMERIC_PACKAGES`,
pinned exactly in ``pyproject.toml``; for the runs whose domain or algorithm type
needs an optional extra, the extra's own, such as the MuJoCo simulator of the
locomotion domains or pycma of the ``pycma`` family, which the catalogue names). Every
step of a run notes its environment in the run state (:func:`noted`); a step whose
BLAS, kernel, SIMD targets or package versions differ from those of the run's earlier
steps gets a warning line, and the run is *mixed* (:func:`is_mixed`): its results stay
valid, but are not bitwise comparable with a run under one environment. The CPU model
is recorded but does not make a run mixed (machines of one kernel family compute the
same bits).

A record is a JSON-compatible dict, one per step kind and environment::

    {"step": "tell", "blas": "openblas 0.3.31.188.0", "kernel": "Haswell",
     "simd": "X86_V3 X86_V4 AVX512_ICL", "packages": "box2d 2.3.10, ...",
     "cpu": "AMD EPYC 9R14", "generations": [1, 30]}

Step kinds: ``initialise``, ``evaluate`` (shard jobs, Dask workers, asynchronous
evaluations) and ``tell`` (the tell job; in Dask and asynchronous modes the segment
job that asks and tells).
"""

from __future__ import annotations

import functools
import operator
import platform
import sys
from importlib import metadata
from pathlib import Path

import numpy  # noqa: F401 - loads the BLAS library that threadpoolctl inspects
import threadpoolctl

try:  # numpy's runtime SIMD dispatch (what ``numpy.show_runtime()`` prints)
    from numpy._core._multiarray_umath import __cpu_dispatch__ as CPU_DISPATCH
    from numpy._core._multiarray_umath import __cpu_features__ as CPU_FEATURES
except ImportError:  # a numpy without it: no SIMD targets recorded
    CPU_DISPATCH, CPU_FEATURES = [], {}

#: Distributions whose versions can change a run's numbers or its files' bytes: the
#: families' and domains' numerics (pyribs and what it computes with), the archive
#: files' writer and the statistics.
#: ``pyproject.toml`` pins each exactly (``tests/unit/test_packaging.py`` checks it).
NUMERIC_PACKAGES = (
    "box2d",
    "gymnasium",
    "h5py",
    "numpy",
    "numpy-groupies",
    "pymoo",
    "ribs",
    "scikit-learn",
    "scipy",
    "statsmodels",
)
#: The record fields that decide the numbers (the CPU model does not).
DECIDING_FIELDS = ("blas", "kernel", "simd", "packages")
#: The fields of an environment, as :func:`environment` gives them.
FIELDS = (*DECIDING_FIELDS, "cpu")
#: An environment's or a record's :data:`FIELDS`, as a tuple.
_FIELDS_OF = operator.itemgetter(*FIELDS)
#: Import names of the distributions whose imported module gives its version at once.
_MODULES = {"numpy": "numpy", "scipy": "scipy", "h5py": "h5py", "ribs": "ribs"}


@functools.cache
def environment(packages: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's numeric environment (computed once per process and ``packages``).

    Parameters
    ----------
    packages : tuple of str, optional
        Distributions that decide the numbers of the run's optional extras (e.g.
        ``("mujoco",)``, :func:`evocamp.catalogue.factory.run_packages`): recorded
        after :data:`NUMERIC_PACKAGES` for those runs alone, so that every other run's
        records stay what they were whether the extras are installed or not.

    Returns
    -------
    dict of str to str
        ``blas`` (library and version, e.g. ``openblas 0.3.31.188.0``), ``kernel`` (the
        BLAS kernel: OpenBLAS's core name, ``unknown`` for a library that does not say),
        ``simd`` (numpy's SIMD targets this CPU runs, :func:`numpy_simd`), ``packages``
        (``name version`` of each of :data:`NUMERIC_PACKAGES` and ``packages``, ``-``
        when not installed) and ``cpu`` (the CPU model).
    """
    packages = (*NUMERIC_PACKAGES, *packages)
    blas = _numpy_blas()
    return {
        "blas": f"{blas.get('internal_api', 'none')} {blas.get('version') or ''}".strip(),
        "kernel": str(blas.get("architecture") or "unknown"),
        "simd": numpy_simd(),
        "packages": ", ".join(f"{name} {_version(name)}" for name in packages),
        "cpu": _cpu_model(),
    }


def _numpy_blas() -> dict:
    """threadpoolctl's description of numpy's BLAS library.

    A process may hold several (scipy's wheel brings its own OpenBLAS once scipy is
    imported); numpy's is the one in its wheel's library folder (``numpy.libs``), or
    the only one (a numpy linked against the system's BLAS). Which others are loaded
    depends on what a step imported, so they are not recorded: their versions follow
    from the pinned packages and their kernel from the same CPU and settings.
    """
    blas = [info for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]
    for info in blas:
        if Path(info.get("filepath", "")).parent.name.startswith("numpy"):
            return info
    return blas[0] if blas else {}


def numpy_simd() -> str:
    """numpy's SIMD targets in use: those of its optimised loops (``exp``, ``log``,
    ``sin``, ``tanh``, sums...) that this CPU supports and that
    ``NPY_DISABLE_CPU_FEATURES`` leaves on, e.g. ``X86_V3 X86_V4 AVX512_ICL`` on an
    AVX-512 CPU, ``X86_V3`` on an AVX2 one (``baseline`` when none). They change
    results' last bits as the BLAS kernel does."""
    enabled = [target for target in CPU_DISPATCH if CPU_FEATURES.get(target)]
    return " ".join(enabled) or "baseline"


def family(current: dict | None = None) -> str:
    """The kernel family of an environment (default: this process's): its BLAS kernel
    and numpy's highest SIMD target, e.g. ``Haswell/X86_V3``: what the digests of
    ``tests/data`` are recorded by."""
    current = environment() if current is None else current
    return f"{current['kernel']}/{current['simd'].split()[-1]}"


def _version(distribution: str) -> str:
    module = sys.modules.get(_MODULES.get(distribution, ""))
    if module is not None and getattr(module, "__version__", None):
        return module.__version__
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "-"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def deciding(record: dict) -> tuple[str, ...]:
    """The fields of a record that decide the numbers (:data:`DECIDING_FIELDS`)."""
    return tuple(record[field] for field in DECIDING_FIELDS)


def noted(
    records: list[dict],
    *,
    step: str,
    generation: int,
    current: dict[str, str] | None = None,
) -> tuple[list[dict], str | None]:
    """A run's records with one step's environment noted, and a warning when that
    environment differs from those of the run's earlier steps.

    Parameters
    ----------
    records : list of dict
        The run's records so far (oldest first; empty for a new run or a checkpoint
        written before evocamp recorded them).
    step : str
        The step kind: ``initialise``, ``evaluate`` or ``tell``.
    generation : int
        The generation the step computed.
    current : dict, optional
        The step's environment (default: this process's, :func:`environment`), e.g.
        what a shard job or a Dask worker reported with its results.

    Returns
    -------
    records : list of dict
        A new list: the matching record's generation span extended, or a new record.
    warning : str or None
        ``"the tell step runs under kernel SkylakeX while earlier steps of the run ran
        under kernel Haswell; ..."`` when the step's deciding fields are new to the
        run, else ``None``.
    """
    current = environment() if current is None else current
    # The records are never changed in place: the new list shares those it keeps
    # (Dask mode's segments note two steps every generation).
    updated = list(records)
    fields = _FIELDS_OF(current)
    for index, record in enumerate(records):
        if record["step"] == step and _FIELDS_OF(record) == fields:
            first, last = record["generations"]
            updated[index] = {
                **record,
                "generations": [min(first, generation), max(last, generation)],
            }
            return updated, None
    warning = None
    if updated and all(deciding(record) != deciding(current) for record in updated):
        now, before = difference(current, updated[-1])
        warning = (
            f"the {step} step runs under {now} while earlier steps of the run ran under "
            f"{before}; results stay valid but are not bitwise comparable with a run "
            "under one numeric environment"
        )
    fields = {field: current[field] for field in FIELDS}
    updated.append({"step": step, **fields, "generations": [generation, generation]})
    return updated, warning


def difference(current: dict, earlier: dict) -> tuple[str, str]:
    """What differs between two environments, as two texts (current, earlier): e.g.
    ``("kernel SkylakeX", "kernel Haswell")`` or ``("scipy 1.17.1", "scipy 1.16.0")``."""
    now, before = [], []
    for field in ("blas", "kernel", "simd"):
        if current[field] != earlier[field]:
            now.append(f"{field} {current[field]}")
            before.append(f"{field} {earlier[field]}")
    packages = dict(_split(current["packages"]))
    for name, version in _split(earlier["packages"]):
        if packages.get(name) != version:
            now.append(f"{name} {packages.get(name, '-')}")
            before.append(f"{name} {version}")
    return ", ".join(now), ", ".join(before)


def _split(packages: str) -> list[tuple[str, str]]:
    return [tuple(item.split(" ", 1)) for item in packages.split(", ") if item]


def is_mixed(records: list[dict]) -> bool:
    """Whether a run's steps ran under more than one numeric environment."""
    return len({deciding(record) for record in records}) > 1


def mixed_summary(records: list[dict]) -> str:
    """One line saying how a mixed run mixed: each environment's deciding difference
    with the steps and generations it computed, oldest first."""
    environments: dict[tuple, list[str]] = {}
    for record in records:
        first, last = record["generations"]
        span = f"{first}" if first == last else f"{first}..{last}"
        environments.setdefault(deciding(record), []).append(f"{record['step']} {span}")
    keys = [dict(zip(DECIDING_FIELDS, key, strict=True)) for key in environments]
    parts = []
    for position, steps in enumerate(environments.values()):
        other = keys[1] if position == 0 else keys[0]
        label = difference(keys[position], other)[0]
        parts.append(f"{label} ({', '.join(steps)})")
    return "mixed numeric environments: " + " | ".join(parts)
