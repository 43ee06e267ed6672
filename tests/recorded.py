"""Digests recorded per kernel family and pinned environment (``tests/data``).

Where only a stored digest can guard behaviour (what shipped configs and old
checkpoints compute), the digest depends on the numeric environment: the BLAS kernel
and numpy's SIMD targets (the *kernel family*, e.g. ``Haswell/X86_V3``:
:func:`evocamp.model.numerics.family`) and the pinned package versions. A file of
recorded digests holds them per kernel family, for one pinned environment::

    {"environment": {"blas": "openblas 0.3.31.188.0", "packages": "box2d 2.3.10, ..."},
     "kernel_families": {"Haswell/X86_V3": {...digests...}, "SkylakeX/AVX512_ICL": {...}}}

Tests read the digests of this machine's family (:func:`recorded_digests`); on a family
with no record, or in another environment, they say so in one line and skip the
comparison with the record (``docs/promises.md`` lists these tests). Digests are
recorded by running the recording script by hand under each kernel family a machine
can run, e.g. ``OPENBLAS_CORETYPE=Prescott`` on the command line
(:func:`record_digests`); the tests never change the machine's kernel.
"""

from __future__ import annotations

import json
from pathlib import Path

from evocamp.model.numerics import difference, environment, family

#: The fields of an environment that a record file is for (the family is per record).
PINNED = ("blas", "packages")


def pinned_environment() -> dict[str, str]:
    """This process's BLAS library and package versions (:data:`PINNED`)."""
    current = environment()
    return {field: current[field] for field in PINNED}


def recorded_digests(path: Path) -> dict:
    """The digests recorded in ``path`` for this machine's kernel family.

    Raises
    ------
    pytest.skip.Exception
        One line naming this machine's kernel family when the file holds no record of
        it, or naming the packages that differ from those the file was recorded with.
    """
    import pytest

    data = json.loads(Path(path).read_text())
    current = environment()
    if pinned_environment() != data["environment"]:
        now, then = difference(current, {**current, **data["environment"]})
        pytest.skip(
            f"{Path(path).name} was recorded with {then}, this environment has {now}: "
            "no recorded digests to compare with (pip install -e '.[test]' installs the "
            "pinned versions)"
        )
    kernel_family = family(current)
    recorded = data["kernel_families"]
    if kernel_family not in recorded:
        pytest.skip(
            f"no digests recorded in {Path(path).name} for this machine's kernel family "
            f"{kernel_family} (recorded: {', '.join(sorted(recorded))}); the comparisons "
            "within this run still ran"
        )
    return recorded[kernel_family]


def record_digests(path: Path, digests: dict) -> str:
    """Store ``digests`` in ``path`` as this machine's kernel family's record.

    Records of other families are kept when they were made in the same pinned
    environment, and dropped (and said so) when the environment changed: an upgraded
    package re-records every family.

    Returns
    -------
    str
        What was recorded, for the terminal.
    """
    path = Path(path)
    kernel_family = family()
    data = {"environment": pinned_environment(), "kernel_families": {}}
    note = ""
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("environment") == data["environment"]:
            data["kernel_families"] = old["kernel_families"]
        else:
            dropped = ", ".join(sorted(old.get("kernel_families", {})))
            note = f"; the environment changed, so the records of {dropped} were dropped"
    data["kernel_families"][kernel_family] = digests
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return f"{path}: recorded for kernel family {kernel_family}{note}"
