"""pyribs' internals in one module (``evocamp.families.ribs_internals``): the release
whose internals it knows is the one pyproject.toml pins, another release is refused
with one message where the internals are first used (not when evocamp is imported)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

import evocamp  # noqa: F401 (numba's JIT off before pyribs loads)
from evocamp.base.errors import EvocampError
from evocamp.catalogue.factory import build_optimizer
from evocamp.config import run_spec, validate_config
from evocamp.families import ribs_internals


def test_the_known_release_is_the_pinned_one():
    pinned = re.search(r'"ribs\[visualize\]==([0-9.]+)"', (REPO / "pyproject.toml").read_text())
    assert pinned is not None
    assert ribs_internals.RIBS_VERSION == pinned.group(1)


def test_another_pyribs_release_is_refused_where_its_internals_are_first_used(monkeypatch):
    """Importing evocamp and building a QD optimizer need no internals; its first ask
    reads the emitters' generators and stops with the versions found and required."""
    import ribs

    config = validate_config(
        {
            "algorithms": {"me": {"type": "map_elites", "emitter_batch_size": 4}},
            "domains": {"d": {"type": "sphere", "solution_dim": 3}},
            "shards": 1,
        }
    )
    spec = run_spec(config, algorithm="me", domain="d", seed=0)
    monkeypatch.setattr(ribs, "__version__", "0.13.0")
    ribs_internals.check_ribs_version.cache_clear()
    try:
        optimizer = build_optimizer(spec)
        for _ in range(2):  # a failed check is not remembered: it fails each time
            with pytest.raises(EvocampError) as caught:
                optimizer.ask()
            assert str(caught.value) == (
                "evocamp needs pyribs (ribs) 0.12.0, whose internals its optimizer states "
                "and compact batches rely on; found ribs 0.13.0: install ribs==0.12.0"
            )
    finally:
        monkeypatch.undo()
        ribs_internals.check_ribs_version.cache_clear()
    assert np.asarray(build_optimizer(spec).ask()["row_state"]).size


def test_importing_evocamp_reads_no_internals():
    """``import evocamp`` and its QD package leave pyribs unimported (the check runs at
    the first use of an internal, never at import)."""
    code = (
        "import sys, evocamp.families.qd, evocamp.files.optimizer_state, evocamp.loop.fold; "
        "print('ribs' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
